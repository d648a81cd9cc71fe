//! Which ranks are stragglers: slow enough, for long enough, to be named before they become
//! hangs — and never a restart by itself. Pure: each window's measures in, the scores and the
//! ranks named (or no longer named) out.
//!
//! A rank's score in a window is its speed relative to the job's, as NVIDIA's resiliency
//! extension scores its ranks (1 is the best, lower is slower): by time where more than half of
//! the ranks measured in the window say how long their steps computed (the progress file's
//! `compute_ms=`: in a synchronous data-parallel job every rank makes the same steps, so a slow
//! rank shows as time, not as steps), the reference time over the rank's, those without a time
//! in this window (no new step yet) not judged; else by its rate of steps (pipelines, parameter
//! servers, asynchronous jobs), the rank's over the reference rate. The reference is the median
//! rank's (of the two middle ones, the faster), not the best's: among three ranks or more, one
//! rank that says 0 ms, or a step it cannot have made, does not make every other rank slow
//! (of two ranks the faster is the reference). A window that would judge no more than half of
//! the ranks reporting judges none: late reports from a few ranks (a slow node's) would
//! otherwise be their own reference and score 1. A rank at most
//! `NOISE_MS` slower than the reference is not slow (integer milliseconds of steps that take
//! one or two would otherwise halve a score). A rank scoring below the threshold in `windows`
//! judged windows with no judged window at or above it in between is named (a window that does
//! not judge it, for want of a report in time, says nothing of it); one named is named no more
//! once it scores at or above the threshold. A window in which no rank made a step judges nothing (that is a hang's
//! business, not a straggler's).

use std::collections::{BTreeSet, HashMap};

/// When a rank is a straggler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// A score below this is slow (0.75: a rank at least a third slower than the median rank).
    pub threshold: f64,
    /// Slow in this many windows in a row is a straggler.
    pub windows: u32,
    /// How long a window is.
    pub window: std::time::Duration,
}

// The threshold is a number from the configuration, above 0 and below 1: never NaN, so equal
// to itself.
impl Eq for Rules {}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            threshold: 0.75,
            windows: 3,
            window: std::time::Duration::from_secs(30),
        }
    }
}

/// How much slower than the reference a step's time must be to count at all.
pub const NOISE_MS: u64 = 5;

/// A rank's measures over a window: its rate of steps (steps per second between its first and
/// last report in the window; None: not measured) and how long its steps computed, if it says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    pub rank: u32,
    pub rate: Option<f64>,
    pub compute_ms: Option<u64>,
}

/// What a window found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// Each rank judged and its score (1: as fast as the reference), in the measures' order.
    pub scores: Vec<(u32, f64)>,
    /// Judged by the steps' compute time (else by the rate of steps).
    pub by_time: bool,
    /// Ranks named stragglers at this window.
    pub named: Vec<u32>,
    /// Ranks named before that are no longer slow.
    pub recovered: Vec<u32>,
}

#[cfg(test)]
impl Window {
    /// `rank`'s score in this window, if it was judged.
    pub fn score(&self, rank: u32) -> Option<f64> {
        score_in(&self.scores, rank)
    }
}

/// `rank`'s score among `scores`, if there.
#[cfg(test)]
pub fn score_in(scores: &[(u32, f64)], rank: u32) -> Option<f64> {
    scores.iter().find(|(r, _)| *r == rank).map(|(_, s)| *s)
}

/// The judgement over windows.
#[derive(Debug, Clone, Default)]
pub struct Judge {
    rules: Rules,
    /// Each rank's judged windows in a row below the threshold.
    slow: HashMap<u32, u32>,
    named: BTreeSet<u32>,
}

impl Judge {
    pub fn new(rules: Rules) -> Judge {
        Judge {
            rules,
            ..Judge::default()
        }
    }

    /// The ranks named now.
    #[cfg(test)]
    pub fn stragglers(&self) -> &BTreeSet<u32> {
        &self.named
    }

    /// A window's end with the measures of the ranks it saw, of the `reporting` ranks known:
    /// its scores, and who is named or recovered.
    pub fn window(&mut self, measures: &[Measure], reporting: usize) -> Window {
        let (scores, by_time) = scores(measures);
        // A few ranks judged among themselves (the others' reports late) would be their own
        // reference: no information, not a fast window.
        if scores.len() * 2 <= reporting {
            return Window::default();
        }
        let mut window = Window {
            by_time,
            ..Window::default()
        };
        // Only ranks slow in a row are kept. A window that did not judge a rank (no report of
        // it came in time: a late beat on a loaded node) says nothing of it: its count stands.
        for &(rank, score) in &scores {
            if score < self.rules.threshold {
                let slow = self.slow.entry(rank).or_default();
                *slow += 1;
                if *slow >= self.rules.windows && self.named.insert(rank) {
                    window.named.push(rank);
                }
            } else {
                // Most ranks are fast and none is slow: no lookup then.
                if !self.slow.is_empty() {
                    self.slow.remove(&rank);
                }
                if !self.named.is_empty() && self.named.remove(&rank) {
                    window.recovered.push(rank);
                }
            }
        }
        // In rank order, whatever order the scores were in.
        window.named.sort_unstable();
        window.recovered.sort_unstable();
        window.scores = scores;
        window
    }

    /// A rank no longer in the job (its pod done or gone): neither counted nor named.
    pub fn forget(&mut self, rank: u32) {
        self.slow.remove(&rank);
        self.named.remove(&rank);
    }
}

/// By time (true) when more than half of the ranks measured say their steps' time, those
/// without one not judged (a rank whose step did not end in the window is no slower for it);
/// else by rate.
fn scores(measures: &[Measure]) -> (Vec<(u32, f64)>, bool) {
    let times: Vec<(u32, u64)> = measures
        .iter()
        .filter_map(|m| Some((m.rank, m.compute_ms?.max(1))))
        .collect();
    if !times.is_empty() && times.len() * 2 > measures.len() {
        let mut sorted: Vec<u64> = times.iter().map(|(_, t)| *t).collect();
        // Of the two middle ones, the faster (the shorter time).
        let middle = (sorted.len() - 1) / 2;
        let reference = *sorted.select_nth_unstable(middle).1;
        let scores = times
            .into_iter()
            .map(|(rank, t)| {
                let slow = t > reference.saturating_add(NOISE_MS);
                (
                    rank,
                    if slow {
                        reference as f64 / t as f64
                    } else {
                        1.0
                    },
                )
            })
            .collect();
        return (scores, true);
    }
    let rates: Vec<(u32, f64)> = measures
        .iter()
        .filter_map(|m| Some((m.rank, m.rate?)))
        .filter(|(_, r)| r.is_finite() && *r >= 0.0)
        .collect();
    if rates.is_empty() {
        return (Vec::new(), false);
    }
    let mut sorted: Vec<f64> = rates.iter().map(|(_, r)| *r).collect();
    // Of the two middle ones, the faster (the higher rate).
    let middle = sorted.len() / 2;
    let reference = *sorted.select_nth_unstable_by(middle, f64::total_cmp).1;
    if reference <= 0.0 {
        return (Vec::new(), false);
    }
    let scores = rates
        .into_iter()
        .map(|(rank, rate)| (rank, (rate / reference).min(1.0)))
        .collect();
    (scores, false)
}

/// What a progress file's last line says: its step (the first word, a number) and, if the
/// program says it, how long that step computed (`compute_ms=<ms>`, anywhere after it):
/// `1200 compute_ms=85 loss=0.31`.
pub fn measure_of(line: &str) -> (Option<u64>, Option<u64>) {
    let mut words = line.split_whitespace();
    let step = words.next().and_then(|w| w.parse().ok());
    let compute = words
        .filter_map(|w| w.strip_prefix("compute_ms="))
        .find_map(|ms| ms.parse().ok());
    (step, step.and(compute))
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Judge {
        /// A window in which every rank reporting is measured.
        fn all(&mut self, measures: &[Measure]) -> Window {
            self.window(measures, measures.len())
        }
    }

    /// The default rules, a rank named after `windows` slow windows.
    fn in_windows(windows: u32) -> Rules {
        Rules {
            windows,
            ..Rules::default()
        }
    }

    fn timed(rank: u32, ms: u64) -> Measure {
        Measure {
            rank,
            rate: Some(1.0),
            compute_ms: Some(ms),
        }
    }

    fn stepping(rank: u32, rate: f64) -> Measure {
        Measure {
            rank,
            rate: Some(rate),
            compute_ms: None,
        }
    }

    /// A synchronous job: every rank at the same step, one slow in time. Named after 3 slow
    /// windows in a row, once; the others never; named no more when it is fast again.
    #[test]
    fn a_rank_slow_in_time_for_three_windows_is_named_once() {
        let mut judge = Judge::new(Rules::default());
        let window = |judge: &mut Judge, slow_ms| {
            judge.all(&[timed(0, 100), timed(1, slow_ms), timed(2, 104)])
        };
        assert!(window(&mut judge, 200).named.is_empty());
        let second = window(&mut judge, 200);
        assert_eq!(second.score(1), Some(0.52));
        assert_eq!(second.score(0), Some(1.0));
        assert_eq!(second.score(2), Some(1.0), "4 ms is noise");
        assert!(second.named.is_empty());
        assert_eq!(window(&mut judge, 200).named, [1]);
        assert!(window(&mut judge, 200).named.is_empty(), "named once");
        assert_eq!(judge.stragglers(), &BTreeSet::from([1]));
        // A fast window in between starts the count again.
        let recovered = window(&mut judge, 100);
        assert_eq!(recovered.recovered, [1]);
        assert!(judge.stragglers().is_empty());
        window(&mut judge, 200);
        window(&mut judge, 200);
        window(&mut judge, 100);
        assert!(
            judge.stragglers().is_empty(),
            "two slow windows are not three"
        );
    }

    /// The reference is the median rank's: one rank that says 0 ms (a step under 1 ms, or a
    /// lie) makes nobody slow; with two ranks, the faster is the reference.
    #[test]
    fn one_fast_outlier_makes_nobody_slow() {
        let rules = in_windows(1);
        let mut judge = Judge::new(rules);
        let window = judge.all(&[timed(0, 100), timed(1, 100), timed(2, 100), timed(3, 0)]);
        assert!(window.named.is_empty(), "{window:?}");
        assert!(window.scores.iter().all(|(_, s)| *s == 1.0), "{window:?}");
        let mut two = Judge::new(rules);
        assert_eq!(two.all(&[timed(0, 100), timed(1, 300)]).named, [1]);
        // Steps of 1 or 2 ms: the difference is noise.
        let mut tiny = Judge::new(rules);
        assert!(tiny.all(&[timed(0, 1), timed(1, 2)]).named.is_empty());
        // Exactly 5 ms slower is noise; 6 ms is a score.
        let mut edge = Judge::new(rules);
        assert_eq!(edge.all(&[timed(0, 10), timed(1, 15)]).score(1), Some(1.0));
        assert_eq!(
            edge.all(&[timed(0, 10), timed(1, 16)]).score(1),
            Some(0.625)
        );
    }

    /// Without times, by rate: a rank that steps at half the job's rate is slow; in lockstep
    /// nobody is; a window where nobody moved, or nobody was measured, judges nothing.
    #[test]
    fn without_times_ranks_are_judged_by_their_rate() {
        let rules = in_windows(1);
        let mut judge = Judge::new(rules);
        let window = judge.all(&[stepping(0, 10.0), stepping(1, 5.0)]);
        assert_eq!((window.score(0), window.score(1)), (Some(1.0), Some(0.5)));
        assert_eq!(window.named, [1]);
        let mut lockstep = Judge::new(rules);
        let same = lockstep.all(&[stepping(0, 8.0), stepping(1, 8.0)]);
        assert!(same.named.is_empty());
        let stalled = lockstep.all(&[stepping(0, 0.0), stepping(1, 0.0)]);
        assert!(stalled.scores.is_empty() && stalled.named.is_empty());
        let unmeasured = Measure {
            rank: 0,
            rate: None,
            compute_ms: None,
        };
        assert!(lockstep.all(&[unmeasured]).scores.is_empty());
        // A rate that cannot be (negative, infinite, not a number) is no rate.
        let odd = [
            stepping(0, 8.0),
            stepping(1, 8.0),
            stepping(2, -1.0),
            stepping(3, f64::INFINITY),
            stepping(4, f64::NAN),
        ];
        let judged: Vec<u32> = lockstep
            .window(&odd, 3)
            .scores
            .iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(judged, [0, 1]);
        // Half the ranks without a time: judged by rate, all of them.
        let mut mixed = Judge::new(rules);
        let window = mixed.all(&[timed(0, 10), stepping(1, 1.0)]);
        assert_eq!(window.score(1), Some(1.0));
        assert!(!window.by_time);
    }

    /// A window in which one rank made no new step (no time: its step ends after the
    /// window's last report) judges the others by time and leaves it unjudged: not a fast
    /// window for a slow rank, not a slow one for it (a rate of 0).
    #[test]
    fn a_rank_without_a_time_in_a_window_leaves_the_others_judged_by_time() {
        let mut judge = Judge::new(Rules::default());
        let slow = [timed(0, 100), timed(1, 100), timed(2, 300)];
        judge.all(&slow);
        judge.all(&slow);
        let no_step = Measure {
            rank: 0,
            rate: Some(0.0),
            compute_ms: None,
        };
        let window = judge.all(&[no_step, timed(1, 100), timed(2, 300)]);
        assert!(window.by_time);
        assert_eq!((window.score(0), window.score(1)), (None, Some(1.0)));
        assert_eq!(window.named, [2]);
        assert!(judge.all(&slow).named.is_empty(), "named once");
    }

    /// Only a few ranks measured (the others' reports late): they are not judged among
    /// themselves, which would make the slow ones their own reference; a named rank is not
    /// said to recover by it.
    #[test]
    fn a_window_that_measures_no_more_than_half_the_ranks_judges_none() {
        let mut judge = Judge::new(Rules::default());
        let all = [
            timed(0, 100),
            timed(1, 100),
            timed(2, 100),
            timed(3, 300),
            timed(4, 300),
        ];
        let late = [timed(3, 300), timed(4, 300)];
        judge.all(&all);
        judge.all(&all);
        let few = judge.window(&late, all.len());
        assert_eq!(few, Window::default());
        assert_eq!(judge.all(&all).named, [3, 4]);
        assert_eq!(judge.window(&late, all.len()).recovered, Vec::<u32>::new());
        assert_eq!(judge.stragglers(), &BTreeSet::from([3, 4]));
        // Three of five are more than half: judged.
        let window = judge.window(&[timed(0, 100), timed(3, 100), timed(4, 100)], 5);
        assert_eq!(window.recovered, [3, 4]);
    }

    /// A rank forgotten (its pod done or gone) is named no more, and its count is gone.
    #[test]
    fn a_forgotten_rank_is_neither_named_nor_counted() {
        let rules = in_windows(2);
        let mut judge = Judge::new(rules);
        let slow = [timed(0, 100), timed(1, 100), timed(2, 300), timed(3, 300)];
        judge.all(&slow);
        assert_eq!(judge.all(&slow).named, [2, 3]);
        judge.forget(2);
        assert_eq!(judge.stragglers(), &BTreeSet::from([3]));
        judge.all(&slow[..2]);
        judge.forget(3);
        let back = judge.all(&slow);
        assert!(back.named.is_empty(), "counts start again: {back:?}");
        assert_eq!(judge.all(&slow).named, [2, 3]);
    }

    /// A score exactly at the threshold is not slow; just below it is.
    #[test]
    fn a_score_at_the_threshold_is_not_slow() {
        let rules = in_windows(1);
        let mut judge = Judge::new(rules);
        let at = judge.all(&[timed(0, 75), timed(1, 75), timed(2, 100)]);
        assert_eq!(at.score(2), Some(0.75));
        assert!(at.named.is_empty(), "{at:?}");
        assert_eq!(
            judge
                .all(&[timed(0, 75), timed(1, 75), timed(2, 101)])
                .named,
            [2]
        );
    }

    /// A time past any bound is a time, not an overflow.
    #[test]
    fn the_longest_time_is_no_overflow() {
        let mut judge = Judge::new(Rules::default());
        let window = judge.all(&[timed(0, u64::MAX), timed(1, u64::MAX)]);
        assert_eq!(window.scores, [(0, 1.0), (1, 1.0)]);
    }

    /// Slow, slow, then a window that judges the others but not it (its report late), then
    /// slow: three judged slow windows with no fast one between, named; a fast one in between
    /// starts the count again.
    #[test]
    fn a_window_that_does_not_judge_a_rank_says_nothing_of_it() {
        let mut judge = Judge::new(Rules::default());
        let slow = [timed(0, 100), timed(1, 100), timed(2, 300)];
        let late = [timed(0, 100), timed(1, 100)];
        judge.all(&slow);
        judge.all(&slow);
        judge.all(&late);
        assert_eq!(judge.all(&slow).named, [2]);
        let mut again = Judge::new(Rules::default());
        again.all(&slow);
        again.all(&slow);
        again.all(&[timed(0, 100), timed(1, 100), timed(2, 100)]);
        assert!(again.all(&slow).named.is_empty());
    }

    #[test]
    fn a_progress_line_says_its_step_and_its_time_if_it_has_one() {
        assert_eq!(measure_of("1200"), (Some(1200), None));
        assert_eq!(
            measure_of("1200 compute_ms=85 loss=0.3"),
            (Some(1200), Some(85))
        );
        assert_eq!(
            measure_of("1200 loss=0.3 compute_ms=85"),
            (Some(1200), Some(85))
        );
        assert_eq!(measure_of("1200 compute_ms=fast"), (Some(1200), None));
        assert_eq!(measure_of("epoch 3 compute_ms=85"), (None, None));
        assert_eq!(measure_of(""), (None, None));
    }
}
