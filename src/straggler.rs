//! Which ranks are stragglers: slow enough, for long enough, to be named before they become
//! hangs — and never a restart by itself. Pure: each window's measures in, the scores and the
//! ranks named (or no longer named) out.
//!
//! A rank's score in a window is relative to the best rank's, as NVIDIA's resiliency extension
//! scores its ranks (1 is the best, lower is slower): by time where every rank says how long its
//! last step computed (the progress file's `compute_ms=`: in a synchronous data-parallel job
//! every rank makes the same steps, so a slow rank shows as time, not as steps), the best time
//! over the rank's; else by steps made in the window (pipelines, parameter servers, asynchronous
//! jobs), the rank's over the most any rank made. A rank scoring below the threshold in
//! `windows` windows in a row is named; one named is named no more once it scores at or above
//! the threshold again. A window in which no rank made a step judges nothing (that is a hang's
//! business, not a straggler's).

use std::collections::{BTreeMap, BTreeSet};

/// When a rank is a straggler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// A score below this is slow (0.75: a rank at least a third slower than the best).
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

/// A rank's measures at a window's end: the step it last wrote, and how long that step
/// computed, if it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measure {
    pub rank: u32,
    pub step: u64,
    pub compute_ms: Option<u64>,
}

/// What a window found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// Each rank's score (1 for the best).
    pub scores: BTreeMap<u32, f64>,
    /// Ranks named stragglers at this window.
    pub named: Vec<u32>,
    /// Ranks named before that are no longer slow.
    pub recovered: Vec<u32>,
}

/// The judgement over windows.
#[derive(Debug, Clone, Default)]
pub struct Judge {
    rules: Rules,
    /// Each rank's step at the last window's end.
    last_step: BTreeMap<u32, u64>,
    /// Each rank's windows in a row below the threshold.
    slow: BTreeMap<u32, u32>,
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

    /// A window's end with every rank's measures: its scores, and who is named or recovered.
    pub fn window(&mut self, measures: &[Measure]) -> Window {
        let scores = self.scores(measures);
        for m in measures {
            self.last_step.insert(m.rank, m.step);
        }
        let mut window = Window::default();
        for (&rank, &score) in &scores {
            let slow = self.slow.entry(rank).or_default();
            if score < self.rules.threshold {
                *slow += 1;
                if *slow >= self.rules.windows && self.named.insert(rank) {
                    window.named.push(rank);
                }
            } else {
                *slow = 0;
                if self.named.remove(&rank) {
                    window.recovered.push(rank);
                }
            }
        }
        window.scores = scores;
        window
    }

    /// By time when every rank says its step's time, else by steps made since the last window
    /// (a rank first seen has made none that can be counted: it is not judged yet).
    fn scores(&self, measures: &[Measure]) -> BTreeMap<u32, f64> {
        let times: Option<Vec<(u32, u64)>> = measures
            .iter()
            .map(|m| Some((m.rank, m.compute_ms?.max(1))))
            .collect();
        if let Some(times) = times.filter(|t| !t.is_empty()) {
            let best = times.iter().map(|(_, t)| *t).min().unwrap_or(1);
            return times
                .into_iter()
                .map(|(rank, t)| (rank, best as f64 / t as f64))
                .collect();
        }
        // A step count that went back (the program started again) is counted from there on.
        let made: Vec<(u32, u64)> = measures
            .iter()
            .filter_map(|m| Some((m.rank, m.step.checked_sub(*self.last_step.get(&m.rank)?)?)))
            .collect();
        let most = made.iter().map(|(_, n)| *n).max().unwrap_or(0);
        if most == 0 {
            return BTreeMap::new();
        }
        made.into_iter()
            .map(|(rank, n)| (rank, n as f64 / most as f64))
            .collect()
    }
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

    fn timed(rank: u32, step: u64, ms: u64) -> Measure {
        Measure {
            rank,
            step,
            compute_ms: Some(ms),
        }
    }

    fn stepped(rank: u32, step: u64) -> Measure {
        Measure {
            rank,
            step,
            compute_ms: None,
        }
    }

    /// A synchronous job: every rank at the same step, one slow in time. Named after 3 slow
    /// windows in a row, once; the others never; named no more when it is fast again.
    #[test]
    fn a_rank_slow_in_time_for_three_windows_is_named_once() {
        let mut judge = Judge::new(Rules::default());
        let window = |judge: &mut Judge, step, slow_ms| {
            judge.window(&[
                timed(0, step, 100),
                timed(1, step, slow_ms),
                timed(2, step, 110),
            ])
        };
        assert!(window(&mut judge, 10, 200).named.is_empty());
        let second = window(&mut judge, 20, 200);
        assert_eq!(second.scores[&1], 0.5);
        assert_eq!(second.scores[&0], 1.0);
        assert!(second.named.is_empty());
        assert_eq!(window(&mut judge, 30, 200).named, [1]);
        assert!(window(&mut judge, 40, 200).named.is_empty(), "named once");
        assert_eq!(judge.stragglers(), &BTreeSet::from([1]));
        // A fast window in between starts the count again.
        let recovered = window(&mut judge, 50, 100);
        assert_eq!(recovered.recovered, [1]);
        assert!(judge.stragglers().is_empty());
        window(&mut judge, 60, 200);
        window(&mut judge, 70, 200);
        window(&mut judge, 80, 100);
        assert!(
            judge.stragglers().is_empty(),
            "two slow windows are not three"
        );
    }

    /// Without times, by steps made: a rank that makes half the steps of the best is slow; in
    /// lockstep (the same steps) nobody is; a window where nobody moved judges nothing.
    #[test]
    fn without_times_ranks_are_judged_by_the_steps_they_make() {
        let rules = Rules {
            windows: 1,
            ..Rules::default()
        };
        let mut judge = Judge::new(rules);
        // The first window sees each rank for the first time: no steps made to count.
        assert!(judge
            .window(&[stepped(0, 0), stepped(1, 0)])
            .scores
            .is_empty());
        let window = judge.window(&[stepped(0, 100), stepped(1, 50)]);
        assert_eq!((window.scores[&0], window.scores[&1]), (1.0, 0.5));
        assert_eq!(window.named, [1]);
        let mut lockstep = Judge::new(rules);
        lockstep.window(&[stepped(0, 0), stepped(1, 0)]);
        assert!(lockstep
            .window(&[stepped(0, 80), stepped(1, 80)])
            .named
            .is_empty());
        let stalled = lockstep.window(&[stepped(0, 80), stepped(1, 80)]);
        assert!(stalled.scores.is_empty() && stalled.named.is_empty());
        // A count that went back (the program started again) is not a slow rank.
        let mut restarted = Judge::new(rules);
        restarted.window(&[stepped(0, 500), stepped(1, 500)]);
        let window = restarted.window(&[stepped(0, 600), stepped(1, 20)]);
        assert!(
            window.named.is_empty() && !window.scores.contains_key(&1),
            "{window:?}"
        );
        // One rank without a time: judged by steps, all of them.
        let mut mixed = Judge::new(rules);
        mixed.window(&[timed(0, 0, 10), stepped(1, 0)]);
        let window = mixed.window(&[timed(0, 10, 10), stepped(1, 10)]);
        assert_eq!(window.scores[&1], 1.0);
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
