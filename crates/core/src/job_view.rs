//! What a job reports of itself, as its coordinator sees it: every rank's step from the
//! members' heartbeats, judged for stragglers each window (`straggler`), summed up in a line
//! for the coordinator's log (at most one a minute), a summary for the Job's annotation (at
//! most one every 30 s: the API load of one patch, whatever the job's size), and the job's
//! table (`paddle-launcher status`) with the figures the coordinator's metrics show. Pure:
//! reports and the clock in, what to say out; the coordinator's task carries it out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use std::time::Instant;

use crate::ledger::Ledger;
use crate::straggler::{Judge, Measure, Rules};

/// At most one progress line in the coordinator's log this often.
pub const LINE_EVERY: Duration = Duration::from_secs(60);
/// At most one summary on the Job this often.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(30);
/// The job's figures (the coordinator's metrics) are made again this often.
pub const FIGURES_EVERY: Duration = Duration::from_secs(5);
/// A table asked for is made at most this often (it goes over every rank).
pub const TABLE_EVERY: Duration = Duration::from_secs(1);
/// The table shows this many ranks at most, the slowest: a job of 10,000 pods has 80,000.
pub const TABLE_ROWS: usize = 200;
/// Without straggler judgement, rates are measured over periods this long.
pub const RATE_PERIOD: Duration = Duration::from_secs(30);

/// One trainer process's progress as a heartbeat carries it, on the wire `[trainer id, step,
/// ms its last step computed or null]`: short, as a pod's several must fit one frame.
pub type RankStep = (u32, u64, Option<u64>);

/// The attempt under way, as the coordinator agreed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptShape {
    pub ledger: Ledger,
    /// The pods joined (this one too), and the trainer processes the job runs.
    pub pods: u32,
    pub ranks: u32,
}

/// What the view says.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A line for this launcher's log.
    Line(String),
    /// A line for every launcher's log (this one's too): told to every member.
    Note(String),
    /// A rank named a straggler: the message of a `Straggler` event.
    Straggler(String),
    /// The job's one-line summary, kept on the Job.
    Summary(String),
    /// The job's figures, made again.
    Figures(Figures),
    /// The job's table, as it was asked for.
    Table(Table),
}

/// The job as `paddle-launcher status` prints it (its figures travel on their own).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub text: String,
}

/// What the coordinator's metrics show of the job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// The lowest and highest step any rank reports.
    pub steps: Option<(u64, u64)>,
    /// The slowest rank: the lowest score below 1 in the last window, else the lowest step; how many
    /// steps it is behind the furthest rank, and its score if judged.
    pub slowest: Option<(u32, u64, Option<f64>)>,
    /// The ranks named stragglers, with their last score.
    pub stragglers: Vec<(u32, f64)>,
}

/// One rank as last reported, and what it reported since the last window.
#[derive(Debug, Clone, Default)]
struct Rank {
    step: u64,
    ms: Option<u64>,
    ms_sum: u64,
    ms_steps: u64,
    /// When it was first reported in the window under way (the last report of the window
    /// before), and its step then: its rate is measured between that report and the last.
    since: Option<(Instant, u64)>,
    /// When it was last reported.
    at: Option<Instant>,
    /// Its rate over the last window, if measured.
    rate: Option<f64>,
}

/// A step's time above this is no time (a day): what a follower says is bounded before it is
/// summed.
const MAX_STEP_MS: u64 = 24 * 3600 * 1000;

/// The longest a rank's last report is carried forward at its rate to compare it with the
/// latest (`figures`): the default heartbeat timeout, past which a silent launcher is lost.
const MAX_CARRIED: Duration = Duration::from_secs(10);

/// A rate is measured between reports at least this far apart.
const MIN_SPAN: Duration = Duration::from_secs(1);

/// A rank's place in the table's order: (not named, score, step, id).
type Place = (bool, f64, u64, u32);
/// A rank as the table shows it: its pod, id and what it reported.
type Row<'a> = (&'a str, u32, &'a Rank);

/// A member's processes as its last heartbeat said.
#[derive(Debug, Clone)]
struct Member {
    at: Instant,
    ranks: BTreeMap<u32, Rank>,
}

/// The coordinator's view of the job's progress.
#[derive(Debug)]
pub struct JobView {
    job: String,
    judge: Option<Judge>,
    rules: Option<Rules>,
    members: BTreeMap<String, Member>,
    /// How each member names itself ("pod p-1 on node n7").
    who: BTreeMap<String, String>,
    /// Each rank's score in the last window, and the ranks named.
    scores: Vec<(u32, f64)>,
    named: BTreeMap<u32, f64>,
    period_end: Instant,
    next_line: Instant,
    next_summary: Instant,
    next_figures: Instant,
    next_table: Instant,
    /// The job's step (its slowest rank's) at the last period's end, and its rate since.
    job_step: Option<u64>,
    job_rate: Option<f64>,
    /// The attempt under way at the last tick that had one.
    last_attempt: Option<AttemptShape>,
}

/// A naming said on every pod (a note) and as an event on the job.
fn named_said(reports: &mut Vec<Output>, line: String) {
    reports.push(Output::Note(line.clone()));
    reports.push(Output::Straggler(line));
}

/// One line for the ranks named in a window beyond the first `NAMED_LINES`.
fn others_named(named: &[u32]) -> Option<String> {
    let others = named.get(NAMED_LINES..).filter(|o| !o.is_empty())?;
    let listed: Vec<String> = others
        .iter()
        .take(NAMED_LISTED)
        .map(u32::to_string)
        .collect();
    let more = match others.len() > NAMED_LISTED {
        true => format!(" and {} more", others.len() - NAMED_LISTED),
        false => String::new(),
    };
    Some(format!(
        "straggler: {} more ranks named in this window: {}{more} (`paddle-launcher status` lists them)",
        others.len(),
        listed.join(" ")
    ))
}

/// The table's first line while no attempt trains.
const BETWEEN_ATTEMPTS: &str =
    "no attempt is training now (the job restarts or ends): the last one as seen\n";

/// At most this many ranks named in a window are said one by one (a line on every pod, an
/// event); the others in one line: half a job of 10,000 slower at once must not flood the
/// followers' links nor take the coordinator's task for seconds.
const NAMED_LINES: usize = 10;
/// The ranks the line of the others lists by number.
const NAMED_LISTED: usize = 100;

impl JobView {
    /// A view from `now`, judging stragglers by `rules` (None: not judged).
    pub fn new(job: &str, rules: Option<Rules>, now: Instant) -> JobView {
        let period = rules.map_or(RATE_PERIOD, |r| r.window);
        JobView {
            job: job.to_string(),
            judge: rules.map(Judge::new),
            rules,
            members: BTreeMap::new(),
            who: BTreeMap::new(),
            scores: Vec::new(),
            named: BTreeMap::new(),
            period_end: now + period,
            next_line: now + LINE_EVERY,
            // The first once the first rates are measured (a short window: sooner).
            next_summary: now + period.min(SUMMARY_EVERY),
            next_figures: now,
            next_table: now,
            job_step: None,
            job_rate: None,
            last_attempt: None,
        }
    }

    fn period(&self) -> Duration {
        self.rules.map_or(RATE_PERIOD, |r| r.window)
    }

    /// A member's processes' progress, reported `at`; `who` is how it names itself.
    pub fn note(&mut self, pod: &str, who: &str, ranks: &[RankStep], at: Instant) {
        // A thousand pods report every few seconds: nothing is allocated for a known one.
        if !self.members.contains_key(pod) {
            self.who.insert(pod.to_string(), who.to_string());
            let ranks = BTreeMap::new();
            self.members.insert(pod.to_string(), Member { at, ranks });
        }
        let Some(member) = self.members.get_mut(pod) else {
            return;
        };
        member.at = at;
        member
            .ranks
            .retain(|id, _| ranks.iter().any(|(r, ..)| r == id));
        for &(id, step, ms) in ranks {
            let rank = member.ranks.entry(id).or_default();
            let ms = ms.filter(|ms| *ms <= MAX_STEP_MS);
            // A count that went back (the program started again) is measured from here on.
            if step < rank.step {
                (rank.since, rank.ms_sum, rank.ms_steps) = (None, 0, 0);
            }
            rank.since.get_or_insert((at, step));
            // Each step's time is counted once, however many beats repeat it.
            if let (true, Some(ms)) = (step != rank.step || rank.ms.is_none(), ms) {
                rank.ms_sum = rank.ms_sum.saturating_add(ms);
                rank.ms_steps += 1;
            }
            (rank.step, rank.ms, rank.at) = (step, ms, Some(at));
        }
    }

    /// A member left (or its trainer is done): its processes are no longer shown, judged nor
    /// named.
    pub fn forget(&mut self, pod: &str) {
        let Some(member) = self.members.remove(pod) else {
            return;
        };
        self.who.remove(pod);
        for rank in member.ranks.keys() {
            self.named.remove(rank);
            if let Some(judge) = self.judge.as_mut() {
                judge.forget(*rank);
            }
        }
    }

    /// The clock, with the attempt under way (None: none trains now), and whether the table
    /// is asked for: what is due.
    pub fn tick(
        &mut self,
        now: Instant,
        attempt: Option<AttemptShape>,
        table: bool,
    ) -> Vec<Output> {
        let mut reports = Vec::new();
        let Some(attempt) = attempt else {
            // Between attempts (a restart decided, the job ending) the table asked for is the
            // last one's, said as such: `status` is most wanted then.
            if let (true, Some(last)) = (table && now >= self.next_table, self.last_attempt) {
                self.next_table = now + TABLE_EVERY;
                let mut made = self.table(now, last);
                made.text.insert_str(0, BETWEEN_ATTEMPTS);
                reports.push(Output::Table(made));
            }
            return reports;
        };
        self.last_attempt = Some(attempt);
        if now >= self.period_end {
            self.period_end = now + self.period();
            self.period_ended(&mut reports);
        }
        if now >= self.next_figures {
            self.next_figures = now + FIGURES_EVERY;
            reports.push(Output::Figures(self.figures()));
        }
        if table && now >= self.next_table {
            self.next_table = now + TABLE_EVERY;
            reports.push(Output::Table(self.table(now, attempt)));
        }
        if now >= self.next_summary {
            self.next_summary = now + SUMMARY_EVERY;
            reports.push(Output::Summary(self.summary(attempt)));
        }
        if now >= self.next_line {
            self.next_line = now + LINE_EVERY;
            reports.push(Output::Line(format!(
                "job progress: {}",
                self.summary(attempt)
            )));
        }
        reports
    }

    /// The measures of the ranks reported in the window that ends: the rate between their
    /// first and last report in it, the mean time of the steps they made in it. A rank with
    /// no new report is left out (what it said is as old as its last beat, not this window's).
    /// The next window is measured from each rank's last report.
    fn measures(&mut self) -> Vec<Measure> {
        let mut measures = Vec::new();
        for rank_of in self.members.values_mut().flat_map(|m| m.ranks.iter_mut()) {
            let (&id, rank) = rank_of;
            rank.rate = match (rank.since, rank.at) {
                (Some((t0, s0)), Some(t1)) if t1.saturating_duration_since(t0) >= MIN_SPAN => {
                    let made = rank.step.saturating_sub(s0) as f64;
                    Some(made / t1.duration_since(t0).as_secs_f64())
                }
                _ => None,
            };
            let mean = (rank.ms_steps > 0).then(|| rank.ms_sum / rank.ms_steps);
            if rank.rate.is_some() || mean.is_some() {
                let (rate, compute_ms) = (rank.rate, mean);
                measures.push(Measure {
                    rank: id,
                    rate,
                    compute_ms,
                });
            }
            (rank.ms_sum, rank.ms_steps) = (0, 0);
            rank.since = rank.at.map(|at| (at, rank.step));
        }
        measures
    }

    /// A period's end: rates measured, and stragglers judged when they are.
    fn period_ended(&mut self, reports: &mut Vec<Output>) {
        let seconds = self.period().as_secs_f64().max(0.001);
        let step = self.lowest_step();
        self.job_rate = match (self.job_step, step) {
            (Some(then), Some(now)) => now.checked_sub(then).map(|n| n as f64 / seconds),
            _ => None,
        };
        self.job_step = step;
        let measures = self.measures();
        let reporting = self.ranks().count();
        let Some(judge) = self.judge.as_mut() else {
            return;
        };
        let window = judge.window(&measures, reporting);
        self.scores = window.scores;
        if window.named.is_empty() && window.recovered.is_empty() && self.named.is_empty() {
            return;
        }
        // Looked up once for all the ranks named, however many.
        let scores: HashMap<u32, f64> = self.scores.iter().copied().collect();
        let by = match window.by_time {
            true => "its steps' compute time",
            false => "its rate of steps",
        };
        let step = self.lowest_step().unwrap_or(0);
        let pods = self.pods_of(&window.named);
        for (i, &rank) in window.named.iter().enumerate() {
            let score = scores.get(&rank).copied().unwrap_or(0.0);
            self.named.insert(rank, score);
            if i < NAMED_LINES {
                let pod = pods.get(&rank).map_or("its pod unknown", |p| p.as_str());
                named_said(reports, self.named_line(rank, pod, score, by, step));
            }
        }
        if let Some(line) = others_named(&window.named) {
            named_said(reports, line);
        }
        for rank in window.recovered {
            self.named.remove(&rank);
            let score = scores.get(&rank).copied().unwrap_or(1.0);
            let line = format!("straggler: rank {rank} is no longer slow (score {score:.2})");
            reports.push(Output::Note(line));
        }
        for (rank, score) in self.named.iter_mut() {
            *score = scores.get(rank).copied().unwrap_or(*score);
        }
    }

    fn named_line(&self, rank: u32, pod: &str, score: f64, by: &str, step: u64) -> String {
        let rules = self.rules.unwrap_or_default();
        format!(
            "straggler: rank {rank} ({pod}) scored {score:.2} (its speed over the median rank's) by {by}, below {:.2} in {} windows of {} s in a row, at the job's step {step}; named, not restarted",
            rules.threshold,
            rules.windows,
            rules.window.as_secs()
        )
    }

    /// How the pod that runs each of the first `NAMED_LINES` of `ranks` names itself, in one
    /// pass over the pods.
    fn pods_of(&self, ranks: &[u32]) -> HashMap<u32, String> {
        let wanted: BTreeSet<u32> = ranks.iter().take(NAMED_LINES).copied().collect();
        let mut pods = HashMap::new();
        if wanted.is_empty() {
            return pods;
        }
        for (pod, member) in &self.members {
            for rank in member.ranks.keys().filter(|r| wanted.contains(r)) {
                let who = self.who.get(pod).unwrap_or(pod);
                pods.insert(*rank, who.clone());
            }
        }
        pods
    }

    fn lowest_step(&self) -> Option<u64> {
        self.ranks().map(|(_, _, r)| r.step).min()
    }

    fn ranks(&self) -> impl Iterator<Item = (&str, u32, &Rank)> {
        self.members
            .iter()
            .flat_map(|(pod, m)| m.ranks.iter().map(move |(id, r)| (pod.as_str(), *id, r)))
    }

    /// The job's figures now, in one pass over the ranks (and one for the latest report).
    /// How far behind a rank is, is judged at one moment: each pod's figures are as old as its
    /// last heartbeat, so each rank's step is carried forward at its own rate to the latest
    /// report (ranks in lockstep, reported a heartbeat apart, are none behind).
    pub fn figures(&self) -> Figures {
        let latest = self.ranks().filter_map(|(_, _, rank)| rank.at).max();
        let at_latest = |rank: &Rank| -> u64 {
            let (Some(latest), Some(at), Some(rate)) = (latest, rank.at, rank.rate) else {
                return rank.step;
            };
            // At most a heartbeat timeout's worth: a pod not heard for longer is no longer
            // taken to go on at its pace (a stalled one would hide behind it).
            let age = latest.saturating_duration_since(at).min(MAX_CARRIED);
            let ahead = rate * age.as_secs_f64();
            rank.step.saturating_add(ahead.floor() as u64)
        };
        let mut steps: Option<(u64, u64)> = None;
        // The highest step at the latest report, and the rank with the lowest (the lowest id
        // of those), with its step then.
        let mut highest_then = 0;
        let mut behind: Option<(u64, u32)> = None;
        for (_, id, rank) in self.ranks() {
            steps = Some(steps.map_or((rank.step, rank.step), |(lo, hi)| {
                (lo.min(rank.step), hi.max(rank.step))
            }));
            let then = at_latest(rank);
            highest_then = highest_then.max(then);
            behind = behind.min(Some((then, id))).or(Some((then, id)));
        }
        // The lowest score if any is below 1 (slower than the reference), else the rank
        // furthest behind: a score of 1 says nothing of steps.
        let judged = self
            .scores
            .iter()
            .filter(|(_, score)| *score < 1.0)
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .and_then(|&(rank, score)| Some((rank, self.step_then(rank, at_latest)?, Some(score))));
        let slowest = judged
            .or(behind.map(|(step, id)| (id, step, None)))
            .map(|(rank, step, score)| (rank, highest_then.saturating_sub(step), score));
        Figures {
            steps,
            slowest,
            stragglers: self.named.iter().map(|(r, s)| (*r, *s)).collect(),
        }
    }

    /// The step `rank` is at as `then` carries it forward, if it is in the view.
    fn step_then(&self, rank: u32, then: impl Fn(&Rank) -> u64) -> Option<u64> {
        self.members
            .values()
            .find_map(|m| m.ranks.get(&rank).map(&then))
    }

    /// "step 1200, 3.20 steps/s, 32 of 32 ranks reporting, restarts 1 of 3 (and 2 free),
    /// slowest rank 5 (12 steps behind, score 0.41), stragglers: 5".
    pub fn summary(&self, attempt: AttemptShape) -> String {
        self.summed(attempt, &self.figures())
    }

    fn summed(&self, attempt: AttemptShape, figures: &Figures) -> String {
        let reporting = self.ranks().count();
        let mut line = match figures.steps {
            Some((lowest, _)) => format!("step {lowest}"),
            None => "no step reported yet".to_string(),
        };
        if let Some(rate) = self.job_rate {
            let _ = write!(line, ", {rate:.2} steps/s");
        }
        let ledger = attempt.ledger;
        let _ = write!(
            line,
            ", {reporting} of {} ranks reporting, restarts {} of {}",
            attempt.ranks,
            ledger.spent(),
            ledger.max_restarts,
        );
        // Preemptions and grows restart the job without spending a restart.
        if ledger.preemptions > 0 {
            let _ = write!(line, " (and {} free)", ledger.preemptions);
        }
        if let Some((rank, behind, score)) = figures.slowest {
            let _ = write!(line, ", slowest rank {rank} ({behind} steps behind");
            if let Some(score) = score {
                let _ = write!(line, ", score {score:.2}");
            }
            line.push(')');
        }
        if !figures.stragglers.is_empty() {
            let named: Vec<String> = figures
                .stragglers
                .iter()
                .map(|(r, _)| r.to_string())
                .collect();
            let _ = write!(line, ", stragglers: {}", named.join(" "));
        }
        line
    }

    /// The table `paddle-launcher status` prints: the summary, then a row for each of the
    /// `TABLE_ROWS` slowest ranks (the named stragglers, then by score, then by step), and
    /// how many more there are.
    pub fn table(&self, now: Instant, attempt: AttemptShape) -> Table {
        let figures = self.figures();
        let mut text = format!("job {}: {}\n", self.job, self.summed(attempt, &figures));
        let _ = writeln!(
            text,
            "{:<40} {:>6} {:>10} {:>9} {:>12} {:>6}",
            "POD", "RANK", "STEP", "STEPS/S", "REPORTED", "SCORE"
        );
        // Each row's place in the order, looked up once: (not named, score, step, id). A rank
        // not judged in the last window is placed as one judged as fast as the reference, so
        // that among those the furthest behind come first.
        let scores: HashMap<u32, f64> = self.scores.iter().copied().collect();
        let mut rows: Vec<(Place, Row)> = self
            .ranks()
            .map(|(pod, id, rank)| {
                let score = scores.get(&id).copied().unwrap_or(1.0);
                (
                    (!self.named.contains_key(&id), score, rank.step, id),
                    (pod, id, rank),
                )
            })
            .collect();
        let all = rows.len();
        let slowest = |a: &(Place, Row), b: &(Place, Row)| {
            let (a, b) = (a.0, b.0);
            (a.0.cmp(&b.0))
                .then(a.1.total_cmp(&b.1))
                .then((a.2, a.3).cmp(&(b.2, b.3)))
        };
        if all > TABLE_ROWS {
            rows.select_nth_unstable_by(TABLE_ROWS, slowest);
            rows.truncate(TABLE_ROWS);
        }
        rows.sort_by(slowest);
        let rows: Vec<Row> = rows.into_iter().map(|(_, row)| row).collect();
        for (pod, id, rank) in &rows {
            let at = self.members.get(*pod).map_or(now, |m| m.at);
            let ago = now.saturating_duration_since(at).as_secs_f64();
            let rate = rank.rate.map_or("-".to_string(), |r| format!("{r:.2}"));
            let mut score = scores.get(id).map_or("-".into(), |s| format!("{s:.2}"));
            if self.named.contains_key(id) {
                score.push_str(" straggler");
            }
            let _ = writeln!(
                text,
                "{pod:<40} {id:>6} {:>10} {rate:>9} {:>10.1} s {score:>6}",
                rank.step, ago
            );
        }
        if all > rows.len() {
            let _ = writeln!(
                text,
                "... and {} more ranks, none named nor slower",
                all - rows.len()
            );
        }
        // A pod none of whose ranks has reported a step (no progress file written yet, or
        // none at all): a row all the same, so that every pod of the job is in the table.
        let silent = self.members.iter().filter(|(_, m)| m.ranks.is_empty());
        for (pod, member) in silent.take(TABLE_ROWS) {
            let ago = now.saturating_duration_since(member.at).as_secs_f64();
            let _ = writeln!(
                text,
                "{pod:<40} {:>6} {:>10} {:>9} {ago:>10.1} s {:>6}",
                "-", "no step", "-", "-"
            );
        }
        Table { text }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::straggler::score_in;

    const S: Duration = Duration::from_secs(1);

    fn attempt() -> AttemptShape {
        AttemptShape {
            ledger: Ledger::first(3),
            pods: 2,
            ranks: 4,
        }
    }

    /// The default rules with windows of `window`.
    fn windows_of(window: Duration) -> Rules {
        Rules {
            window,
            ..Rules::default()
        }
    }

    fn rules() -> Rules {
        windows_of(10 * S)
    }

    /// Two pods of two ranks each, one rank computing `slow_ms` a step where the others take
    /// 100: reported every second, with a tick after each report.
    fn run(view: &mut JobView, from: Instant, seconds: u64, slow_ms: u64) -> Vec<Output> {
        let mut reports = Vec::new();
        for second in 1..=seconds {
            let at = from + S * second as u32;
            let step = second * 3;
            let ms = |rank| if rank == 3 { slow_ms } else { 100 };
            let pod = |ranks: [u32; 2]| -> Vec<RankStep> {
                ranks.iter().map(|&r| (r, step, Some(ms(r)))).collect()
            };
            view.note("p-0", "pod p-0 on node n1", &pod([0, 1]), at);
            view.note("p-1", "pod p-1 on node n7", &pod([2, 3]), at);
            reports.extend(view.tick(at, Some(attempt()), false));
        }
        reports
    }

    fn notes(reports: &[Output]) -> Vec<&str> {
        reports
            .iter()
            .filter_map(|r| match r {
                Output::Note(line) => Some(line.as_str()),
                _ => None,
            })
            .collect()
    }

    /// A rank slow in compute time for three windows is named once, on every pod (a note) and
    /// as an event, with its pod and node; no other rank is; it is said when it recovers.
    #[test]
    fn a_rank_slow_for_three_windows_is_named_with_its_pod_and_node() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        let reports = run(&mut view, start, 29, 250);
        assert!(notes(&reports).is_empty(), "two windows: {reports:?}");
        let reports = run(&mut view, start + 29 * S, 11, 250);
        let named = notes(&reports);
        assert_eq!(named.len(), 1, "{reports:?}");
        assert!(
            named[0].starts_with("straggler: rank 3 (pod p-1 on node n7) scored 0.40 (its speed over the median rank's) by its steps' compute time"),
            "{}",
            named[0]
        );
        assert!(reports.contains(&Output::Straggler(named[0].to_string())));
        assert_eq!(view.figures().stragglers, [(3, 0.4)]);
        assert_eq!(view.figures().slowest.map(|s| s.0), Some(3));
        let again = run(&mut view, start + 40 * S, 20, 250);
        assert!(notes(&again).is_empty(), "named once: {again:?}");
        let recovered = run(&mut view, start + 60 * S, 10, 100);
        assert_eq!(
            notes(&recovered),
            ["straggler: rank 3 is no longer slow (score 1.00)"]
        );
        assert!(view.figures().stragglers.is_empty());
    }

    /// Ranks as fast as one another are never named, however long the job runs; without
    /// rules nothing is judged even with a slow rank.
    #[test]
    fn ranks_alike_or_no_rules_name_nobody() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        let reports = run(&mut view, start, 300, 110);
        assert!(notes(&reports).is_empty(), "{reports:?}");
        let mut off = JobView::new("j", None, start);
        let reports = run(&mut off, start, 300, 900);
        assert!(notes(&reports).is_empty());
        assert!(!reports.iter().any(|r| matches!(r, Output::Straggler(_))));
    }

    /// The progress line at most once a minute, the summary once every 30 s, whatever the
    /// number of reports; nothing while no attempt trains.
    #[test]
    fn lines_and_summaries_are_bounded_in_time_not_by_the_reports() {
        let start = Instant::now();
        let mut view = JobView::new("j", None, start);
        let reports = run(&mut view, start, 180, 100);
        let count = |f: fn(&Output) -> bool| reports.iter().filter(|r| f(r)).count();
        assert_eq!(count(|r| matches!(r, Output::Line(_))), 3);
        assert_eq!(count(|r| matches!(r, Output::Summary(_))), 6);
        let mut short = JobView::new("j", Some(rules()), start);
        let early = run(&mut short, start, 60, 100);
        let summaries = early.iter().filter(|r| matches!(r, Output::Summary(_)));
        assert_eq!(
            summaries.count(),
            2,
            "the first after a 10 s window, then one in 30 s"
        );
        let line = reports
            .iter()
            .find_map(|r| match r {
                Output::Line(line) => Some(line.clone()),
                _ => None,
            })
            .unwrap();
        assert!(
            line.starts_with("job progress: step 180, 3.00 steps/s, 4 of 4 ranks reporting, restarts 0 of 3, slowest rank 0 (0 steps behind)"),
            "{line}"
        );
        assert!(view.tick(start + 1000 * S, None, false).is_empty());
        // Asked between attempts: the last attempt's table, said as such; none before any.
        let between = view.tick(start + 1001 * S, None, true);
        assert!(
            matches!(between.as_slice(), [Output::Table(t)] if t.text.starts_with(BETWEEN_ATTEMPTS) && t.text.contains("restarts 0 of 3")),
            "{between:?}"
        );
        let mut never = JobView::new("j", None, start);
        assert!(never.tick(start + S, None, true).is_empty());
    }

    /// A named rank whose pod is forgotten (its trainer done, its link gone) is named no more:
    /// not in the figures, the summary, nor the metrics.
    #[test]
    fn a_forgotten_pods_named_rank_is_named_no_more() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        let reports = run(&mut view, start, 31, 250);
        assert_eq!(notes(&reports).len(), 1, "{:?}", notes(&reports));
        assert_eq!(view.figures().stragglers.len(), 1);
        view.forget("p-1");
        assert!(view.figures().stragglers.is_empty());
        assert!(!view.summary(attempt()).contains("stragglers"));
        view.forget("p-1");
    }

    /// Half of a large job slower at once: every one named, in the figures, but only the first
    /// `NAMED_LINES` said one by one (a line on every pod, an event each), the rest in one line.
    #[test]
    fn many_ranks_named_at_once_are_said_in_few_lines() {
        let start = Instant::now();
        let rules = Rules {
            windows: 1,
            ..rules()
        };
        let mut view = JobView::new("j", Some(rules), start);
        let pods = 500u32;
        let mut reports = Vec::new();
        for second in 1..=10u32 {
            let at = start + S * second;
            for pod in 0..pods {
                let ms = if pod % 2 == 1 { 200 } else { 100 };
                let ranks: Vec<RankStep> = (0..2)
                    .map(|l| (pod * 2 + l, u64::from(second), Some(ms)))
                    .collect();
                view.note(&format!("p-{pod}"), &format!("pod p-{pod}"), &ranks, at);
            }
            reports.extend(view.tick(at, Some(attempt()), false));
        }
        assert_eq!(view.figures().stragglers.len(), 500);
        let said = notes(&reports);
        assert_eq!(said.len(), NAMED_LINES + 1, "{said:?}");
        assert!(
            said[0].starts_with("straggler: rank 2 (pod p-1) scored 0.50"),
            "{}",
            said[0]
        );
        assert!(
            said[NAMED_LINES]
                .starts_with("straggler: 490 more ranks named in this window: 22 23 26 27 "),
            "{}",
            said[NAMED_LINES]
        );
        assert!(
            said[NAMED_LINES].contains(" and 390 more "),
            "{}",
            said[NAMED_LINES]
        );
        let events = reports.iter().filter(|r| matches!(r, Output::Straggler(_)));
        assert_eq!(events.count(), NAMED_LINES + 1);
    }

    /// Ranks in lockstep without times, one pod reporting every 250 ms and the other only
    /// every 10 s (its beat), with windows of 2 s: its stale steps are not a slow rate, so
    /// nobody is named; a step time past bounds is no time and no overflow.
    #[test]
    fn stale_or_absurd_reports_name_nobody() {
        let start = Instant::now();
        let rules = windows_of(2 * S);
        let mut view = JobView::new("j", Some(rules), start);
        let mut reports = Vec::new();
        let quarter = Duration::from_millis(250);
        for tick in 1..=480u32 {
            let at = start + quarter * tick;
            let step = u64::from(tick) * 5 / 4;
            view.note("p-0", "pod p-0", &[(0, step, None)], at);
            if tick % 40 == 0 {
                view.note("p-1", "pod p-1", &[(1, step, None)], at);
            }
            reports.extend(view.tick(at, Some(attempt()), false));
        }
        assert!(notes(&reports).is_empty(), "{:?}", notes(&reports));
        let mut absurd = JobView::new("j", Some(rules), start);
        for second in 1..=20u32 {
            let at = start + S * second;
            let step = u64::from(second);
            absurd.note("p-0", "pod p-0", &[(0, step, Some(100))], at);
            absurd.note("p-1", "pod p-1", &[(1, step, Some(u64::MAX))], at);
            assert!(notes(&absurd.tick(at, Some(attempt()), false)).is_empty());
        }
    }

    /// A rank is measured from its own reports: beats that repeat a step (four a step here)
    /// and a count that goes back (its program started again in place, at 10 s) leave its
    /// rate measured over the window, not from its last report nor across the restart; two
    /// ranks in lockstep are both judged in every window, neither slow.
    #[test]
    fn a_rank_is_measured_across_repeated_beats_and_a_restarted_count() {
        let start = Instant::now();
        let rules = windows_of(4 * S);
        let mut view = JobView::new("j", Some(rules), start);
        let quarter = Duration::from_millis(250);
        let mut judged = 0;
        for tick in 1..=96u32 {
            let at = start + quarter * tick;
            let step = u64::from(tick / 4);
            let restarted = if tick > 40 { step - 9 } else { step };
            view.note("p-0", "pod p-0", &[(0, step, None)], at);
            view.note("p-1", "pod p-1", &[(1, restarted, None)], at);
            let reports = view.tick(at, Some(attempt()), false);
            assert!(notes(&reports).is_empty(), "{:?}", notes(&reports));
            if tick % 16 == 0 && tick > 16 {
                judged += 1;
                for rank in [0, 1] {
                    let score = score_in(&view.scores, rank);
                    assert!(
                        score.is_some_and(|s| s >= rules.threshold),
                        "window {judged}: rank {rank} scored {score:?}: {:?}",
                        view.scores
                    );
                }
            }
        }
        assert_eq!(judged, 5);
    }

    /// A window's measures are each rank's own: its rate between its first and last report
    /// (at least a second apart), the mean time of the steps it made; a rank with a time but
    /// one report is measured by its time alone, one with neither is not measured.
    #[test]
    fn a_windows_measures_are_each_ranks_rate_and_mean_time() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        for second in 1..=10u32 {
            let ms = if second % 2 == 0 { 200 } else { 100 };
            let step = 2 * u64::from(second);
            view.note("p-0", "pod p-0", &[(0, step, Some(ms))], start + S * second);
        }
        view.note("p-1", "pod p-1", &[(1, 5, Some(300))], start + 10 * S);
        let half = Duration::from_millis(500);
        view.note("p-2", "pod p-2", &[(2, 5, None)], start + 10 * S - half);
        view.note("p-2", "pod p-2", &[(2, 6, None)], start + 10 * S);
        let measured: Vec<(u32, Option<f64>, Option<u64>)> = view
            .measures()
            .iter()
            .map(|m| (m.rank, m.rate, m.compute_ms))
            .collect();
        assert_eq!(measured, [(0, Some(2.0), Some(150)), (1, None, Some(300))]);
    }

    /// Issue 52: ranks in lockstep, their pods reported a heartbeat apart (3 s, at 2 steps a
    /// second), are compared at one moment: none is behind (they were said "6 steps behind").
    /// A rank really behind still is, by as much as it is at that moment.
    #[test]
    fn ranks_are_compared_at_one_moment_not_at_their_reports() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        for second in 0..=10u32 {
            let step = 2 * u64::from(second);
            view.note("p-0", "pod p-0", &[(0, step, None)], start + S * second);
            let later = start + S * second + 3 * S;
            view.note("p-1", "pod p-1", &[(1, step + 6, None)], later);
        }
        // p-0 last said step 20 at 10 s, p-1 step 26 at 13 s: the same pace, the same step.
        let measured = view.measures();
        assert!(measured.iter().all(|m| m.rate == Some(2.0)), "{measured:?}");
        assert_eq!(view.figures().slowest.map(|s| s.1), Some(0));
        // Rank 1 ten steps behind at that moment.
        view.note("p-1", "pod p-1", &[(1, 16, None)], start + 13 * S);
        assert_eq!(view.figures().slowest.map(|s| (s.0, s.1)), Some((1, 10)));
    }

    /// Issue 52: a pod none of whose ranks has reported a step (no progress file) still has
    /// its row in `status`'s table (there was the header alone).
    #[test]
    fn a_pod_without_steps_has_a_row() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        view.note("p-0", "pod p-0", &[], start);
        view.note("p-1", "pod p-1", &[(1, 7, None)], start);
        let table = view.table(start + 2 * S, attempt()).text;
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(rows[0].starts_with("p-1 "), "{table}");
        assert!(
            rows[1].starts_with("p-0 ") && rows[1].contains("no step") && rows[1].contains("2.0 s"),
            "{table}"
        );
    }

    /// Scores of 1 say nothing of steps: the slowest is then the rank furthest behind, and in
    /// the table a rank not judged in the last window comes among those as fast as the
    /// reference, by its step, not after every judged rank.
    #[test]
    fn a_rank_far_behind_is_the_slowest_when_no_score_is_below_one() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        view.note("p-0", "pod p-0", &[(0, 100, None), (1, 100, None)], start);
        view.note("p-1", "pod p-1", &[(2, 40, None), (3, 100, None)], start);
        view.scores = vec![(0, 1.0), (1, 1.0), (3, 1.0)];
        assert_eq!(view.figures().slowest, Some((2, 60, None)));
        let table = view.table(start, attempt()).text;
        let first = table.lines().nth(2).unwrap_or_default();
        assert!(
            first.starts_with("p-1 ") && first.contains("     2 "),
            "{table}"
        );
        view.scores = vec![(0, 1.0), (1, 0.5), (3, 1.0)];
        assert_eq!(view.figures().slowest, Some((1, 0, Some(0.5))));
    }

    /// The summary says the restarts spent of the budget, and the free ones only when any.
    #[test]
    fn the_summary_says_free_restarts_only_when_there_were_some() {
        let start = Instant::now();
        let mut view = JobView::new("j", None, start);
        view.note("p-0", "pod p-0", &[(0, 7, None)], start);
        let later = AttemptShape {
            ledger: Ledger {
                epoch: 3,
                preemptions: 2,
                ..Ledger::first(3)
            },
            ..attempt()
        };
        let summary = view.summary(later);
        assert!(
            summary.contains(", restarts 1 of 3 (and 2 free), "),
            "{summary}"
        );
        let first = view.summary(attempt());
        assert!(first.contains(", restarts 0 of 3, slowest"), "{first}");
    }

    /// The table lists the named stragglers first, whatever their score now, then the
    /// slowest; of more than `TABLE_ROWS` ranks the slowest that many and a count of the rest.
    #[test]
    fn the_table_lists_the_named_first_and_at_most_its_rows() {
        let start = Instant::now();
        let mut view = JobView::new("j", None, start);
        view.note("p-0", "pod p-0", &[(0, 9, None), (1, 9, None)], start);
        view.scores = vec![(0, 0.8), (1, 0.5)];
        view.named.insert(0, 0.8);
        let table = view.table(start, attempt()).text;
        let ranks: Vec<&str> = table
            .lines()
            .skip(2)
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        assert_eq!(ranks, ["0", "1"], "{table}");
        assert!(table.contains(" 0.80 straggler"), "{table}");
        for (count, more) in [(TABLE_ROWS, None), (TABLE_ROWS + 1, Some(1))] {
            let mut big = JobView::new("j", None, start);
            for id in 0..count as u32 {
                big.note(&format!("p-{id}"), "pod", &[(id, 5, None)], start);
            }
            let table = big.table(start, attempt()).text;
            assert_eq!(
                table.lines().count(),
                2 + TABLE_ROWS + usize::from(more.is_some())
            );
            let said = more.map(|n| format!("... and {n} more ranks, none named nor slower"));
            assert_eq!(
                table.lines().last().filter(|l| l.starts_with("...")),
                said.as_deref()
            );
        }
    }

    /// The line of the others lists at most `NAMED_LISTED` ranks, and says how many more.
    #[test]
    fn the_line_of_the_others_lists_a_hundred() {
        let named: Vec<u32> = (0..(NAMED_LINES + NAMED_LISTED) as u32).collect();
        let line = others_named(&named).unwrap();
        assert!(line.starts_with("straggler: 100 more ranks named in this window: 10 11 "));
        assert!(line.contains(" 109 (`paddle-launcher status`"), "{line}");
        let one_more: Vec<u32> = (0..=named.len() as u32).collect();
        let line = others_named(&one_more).unwrap();
        assert!(line.contains(" 109 and 1 more (`"), "{line}");
        assert_eq!(others_named(&named[..NAMED_LINES]), None);
    }

    /// A step's time up to a day is a time (a step that writes a checkpoint may take hours);
    /// above a day it is no time.
    #[test]
    fn a_step_time_is_bounded_at_a_day() {
        let start = Instant::now();
        let mut view = JobView::new("j", Some(rules()), start);
        let two_hours = 2 * 3600 * 1000;
        let day = 24 * 3600 * 1000;
        let ranks = [
            (0, 1, Some(two_hours)),
            (1, 1, Some(day)),
            (2, 1, Some(day + 1)),
        ];
        view.note("p-0", "pod p-0", &ranks, start);
        let measured: Vec<(u32, Option<u64>)> = view
            .measures()
            .iter()
            .map(|m| (m.rank, m.compute_ms))
            .collect();
        assert_eq!(measured, [(0, Some(two_hours)), (1, Some(day))]);
    }

    /// The figures every 5 s; the table only while asked for, at most once a second.
    #[test]
    fn the_table_is_made_only_when_asked() {
        let start = Instant::now();
        let mut view = JobView::new("j", None, start);
        view.note("p-0", "pod p-0", &[(0, 1, None)], start);
        let quarter = Duration::from_millis(250);
        let mut figures = 0;
        let mut tables = 0;
        for tick in 0..40u32 {
            let asked = tick >= 20;
            for report in view.tick(start + quarter * tick, Some(attempt()), asked) {
                match report {
                    Output::Figures(_) => figures += 1,
                    Output::Table(_) => tables += 1,
                    _ => {}
                }
            }
        }
        assert_eq!(figures, 2, "at 0 s and 5 s");
        assert_eq!(tables, 5, "asked from 5 s to 9.75 s: once a second");
    }

    /// The table names every rank with its pod, step and rate; the figures say the spread and
    /// the rank furthest behind.
    #[test]
    fn the_table_and_figures_show_every_rank_and_the_slowest() {
        let start = Instant::now();
        let mut view = JobView::new("j", None, start);
        view.note("p-0", "pod p-0", &[(0, 100, None), (1, 90, None)], start);
        view.note("p-1", "pod p-1", &[(2, 120, None)], start);
        let figures = view.figures();
        assert_eq!(figures.steps, Some((90, 120)));
        assert_eq!(figures.slowest, Some((1, 30, None)));
        let table = view.table(start + 2 * S, attempt()).text;
        assert!(
            table.starts_with("job j: step 90, 3 of 4 ranks reporting"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(table.contains("p-1"), "{table}");
        // A pod that left is no longer shown; ranks a pod no longer runs neither.
        view.forget("p-1");
        view.note("p-0", "pod p-0", &[(0, 101, None)], start);
        assert_eq!(view.figures().steps, Some((101, 101)));
    }
}
