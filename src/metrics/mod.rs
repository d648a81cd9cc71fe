//! What a launcher shows Prometheus: its state, the job's restarts by cause and size, and each
//! of its trainer processes' progress (step, steps per second over the last minute, seconds
//! since its last progress). A `Board` is pure state the launcher's steps write and a scrape
//! reads (`render`, the OpenMetrics text format of `prometheus-client`); `serve` is the
//! endpoint. Nothing secret is on it: names, counts and steps.
//!
//! Labels: `job_name` (Prometheus's own `job` is the scrape job's: a target label of that
//! name would be renamed `exported_job`), `pod`, and per process `rank` (its trainer id) and
//! `local_rank`. Each value is bounded by the job's size: no label takes unbounded values.

mod job;
pub mod serve;
pub use job::Status;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::loss::Kind;
use crate::supervise::OutputClock;

/// The window steps per second are measured over.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// What the launcher is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// Waiting for the job's pods, or gathering them.
    Waiting,
    /// Its processes run.
    Training,
    /// The job restarts in place: its processes are being stopped, the pods gathered again.
    Restarting,
    /// The pod ends.
    Ending,
}

impl State {
    const ALL: [State; 4] = [
        State::Waiting,
        State::Training,
        State::Restarting,
        State::Ending,
    ];

    fn name(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Training => "training",
            State::Restarting => "restarting",
            State::Ending => "ending",
        }
    }
}

/// Where a trainer process's progress is read from: the step its progress file last said
/// (`u64::MAX`: none), when the file and the output last changed.
pub struct Source {
    pub trainer_id: u32,
    pub local_rank: u32,
    pub step: Arc<AtomicU64>,
    /// How long its last step computed, in ms, if its progress file says (`u64::MAX`: not).
    pub compute_ms: Arc<AtomicU64>,
    pub file: OutputClock,
    pub output: OutputClock,
    pub started: Instant,
    /// What must live while the process is watched (the thread that reads its file).
    pub keep: Option<Arc<dyn Send + Sync>>,
}

impl Source {
    /// What the job's channel reads of it at each heartbeat.
    pub fn gauge(&self) -> crate::control::RankGauge {
        crate::control::RankGauge {
            trainer_id: self.trainer_id,
            step: self.step.clone(),
            compute_ms: self.compute_ms.clone(),
        }
    }
}

/// A process's progress as sampled: (when, step) over the last `RATE_WINDOW`.
#[derive(Default)]
struct Samples(VecDeque<(Instant, u64)>);

impl Samples {
    fn note(&mut self, at: Instant, step: u64) {
        // A step below the last is a restarted count (a new attempt): the window starts again.
        if self.0.back().is_some_and(|(_, last)| step < *last) {
            self.0.clear();
        }
        self.0.push_back((at, step));
        while self
            .0
            .front()
            .is_some_and(|(t, _)| at.duration_since(*t) > RATE_WINDOW)
        {
            self.0.pop_front();
        }
    }

    /// Steps per second over the samples kept: None until two samples a second apart.
    fn rate(&self) -> Option<f64> {
        let (&(t0, s0), &(t1, s1)) = (self.0.front()?, self.0.back()?);
        let span = t1.duration_since(t0).as_secs_f64();
        (span >= 1.0).then(|| (s1 - s0) as f64 / span)
    }
}

/// The job as this launcher knows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    pub pods: u32,
    pub ranks: u32,
    /// An elastic job's range (--min-pods to the job's pods); None: not elastic.
    pub elastic: Option<(u32, u32)>,
}

/// Everything a scrape shows.
pub struct Board {
    job: String,
    pod: String,
    state: State,
    restarts: BTreeMap<Kind, u64>,
    size: Size,
    sources: Vec<Source>,
    samples: Vec<Samples>,
    /// The coordinator's: its view's figures, and its last table and when it came (`job.rs`).
    figures: Option<crate::job_view::Figures>,
    table: Option<(Instant, crate::job_view::Table)>,
    /// Set by `GET /status` on the coordinator: the view makes a table.
    table_asked: Arc<std::sync::atomic::AtomicBool>,
    /// A follower's: the coordinator's metrics endpoint.
    coordinator: Option<std::net::SocketAddr>,
    /// What it waits for, while it waits (`State::Waiting`).
    awaited: Option<crate::membership::Awaited>,
}

impl Board {
    pub fn new(job: &str, pod: &str) -> Board {
        Board {
            job: job.to_string(),
            pod: pod.to_string(),
            state: State::Waiting,
            restarts: BTreeMap::new(),
            size: Size::default(),
            sources: Vec::new(),
            samples: Vec::new(),
            figures: None,
            table: None,
            table_asked: Arc::default(),
            coordinator: None,
            awaited: None,
        }
    }

    pub fn set_state(&mut self, state: State) {
        self.state = state;
    }

    /// What the launcher waits for now (said while its state is `Waiting`).
    pub fn waiting(&mut self, awaited: crate::membership::Awaited) {
        self.awaited = Some(awaited);
    }

    /// What it waits for, while it waits.
    fn awaited(&self) -> Option<&crate::membership::Awaited> {
        self.awaited
            .as_ref()
            .filter(|_| self.state == State::Waiting)
    }

    pub fn restarted(&mut self, cause: Kind) {
        *self.restarts.entry(cause).or_default() += 1;
    }

    /// An attempt begins to train, with the job at this size.
    pub fn training(&mut self, size: Size) {
        self.state = State::Training;
        self.size = size;
    }

    /// The job restarts in place for `cause`: the processes of the attempt are gone.
    pub fn restarting(&mut self, cause: Kind) {
        self.restarted(cause);
        self.state = State::Restarting;
        self.watch(Vec::new());
    }

    /// The processes of a new attempt (those of the last one are no longer watched).
    pub fn watch(&mut self, sources: Vec<Source>) {
        self.samples = sources.iter().map(|_| Samples::default()).collect();
        self.sources = sources;
    }

    /// Notes each process's step now (the rate's samples): called every few seconds.
    pub fn sample(&mut self, now: Instant) {
        for (source, samples) in self.sources.iter().zip(&mut self.samples) {
            if let Some(step) = step_of(source) {
                samples.note(now, step);
            }
        }
    }

    /// The OpenMetrics text a scrape gets.
    pub fn render(&self, now: Instant) -> String {
        let mut registry = Registry::with_prefix("paddle_launcher");
        let me = self.labels(&[]);
        let with = |more: &[(&str, String)]| self.labels(more);
        let state = family(
            &mut registry,
            "state",
            "1 for what the launcher is doing now",
        );
        for each in State::ALL {
            let value = f64::from(u8::from(each == self.state));
            state
                .get_or_create(&with(&[("state", each.name().into())]))
                .set(value);
        }
        // A counter (`_total`): it only goes up while this launcher runs.
        let restarts = Family::<Vec<(String, String)>, Counter>::default();
        let help = "Restarts of the job in place this launcher took part in, by cause";
        registry.register("job_restarts", help, restarts.clone());
        for cause in Kind::ALL {
            let n = self.restarts.get(&cause).copied().unwrap_or(0);
            restarts
                .get_or_create(&with(&[("cause", cause.name().into())]))
                .inc_by(n);
        }
        for (name, help, value) in [
            ("job_pods", "The job's pods in this attempt", self.size.pods),
            (
                "job_ranks",
                "The job's trainer processes in this attempt",
                self.size.ranks,
            ),
        ] {
            family(&mut registry, name, help)
                .get_or_create(&me)
                .set(f64::from(value));
        }
        if let Some((min, max)) = self.size.elastic {
            let help = "An elastic job's range of pods (--min-pods, the job's pods)";
            let range = family(&mut registry, "job_elastic_pods", help);
            range
                .get_or_create(&with(&[("bound", "min".into())]))
                .set(f64::from(min));
            range
                .get_or_create(&with(&[("bound", "max".into())]))
                .set(f64::from(max));
        }
        if let Some(awaited) = self.awaited() {
            let help = "While the launcher waits: 1 for each pod the job waits for, with one word of why (the Kubernetes reason, else the pod's phase)";
            let pods = family(&mut registry, "awaited_pod", help);
            for (pod, why) in &awaited.pods {
                pods.get_or_create(&with(&[("awaited", pod.clone()), ("why", why.clone())]))
                    .set(1.0);
            }
        }
        self.render_processes(&mut registry, now);
        self.render_job(&mut registry);
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &registry);
        text
    }

    /// The pod's labels, and `more`.
    fn labels(&self, more: &[(&str, String)]) -> Vec<(String, String)> {
        let mut labels = vec![
            ("job_name".to_string(), self.job.clone()),
            ("pod".to_string(), self.pod.clone()),
        ];
        labels.extend(more.iter().map(|(k, v)| (k.to_string(), v.clone())));
        labels
    }

    fn render_processes(&self, registry: &mut Registry, now: Instant) {
        let step = family(
            registry,
            "process_step",
            "The step the process last wrote to its progress file",
        );
        let rate = family(
            registry,
            "process_steps_per_second",
            "Steps per second over the last minute, from its progress file",
        );
        let quiet = family(
            registry,
            "process_seconds_since_progress",
            "Seconds since the process's last progress: its progress file once written, else its output",
        );
        let compute = family(
            registry,
            "process_step_compute_seconds",
            "How long the process's last step computed, as its progress file says (compute_ms=)",
        );
        for (source, samples) in self.sources.iter().zip(&self.samples) {
            let labels = self.labels(&[
                ("rank", source.trainer_id.to_string()),
                ("local_rank", source.local_rank.to_string()),
            ]);
            if let Some(n) = step_of(source) {
                step.get_or_create(&labels).set(n as f64);
            }
            if let Some(r) = samples.rate() {
                rate.get_or_create(&labels).set(r);
            }
            let ms = source.compute_ms.load(Ordering::Relaxed);
            if ms != u64::MAX {
                compute.get_or_create(&labels).set(ms as f64 / 1000.0);
            }
            let since = |t: Option<Instant>| t.filter(|t| *t >= source.started);
            let last = since(source.file.last()).or(since(source.output.last()));
            let silent = now.saturating_duration_since(last.unwrap_or(source.started));
            quiet.get_or_create(&labels).set(silent.as_secs_f64());
        }
    }
}

type Labelled = Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>;

/// A gauge family registered under `name`, to be filled in.
fn family(registry: &mut Registry, name: &str, help: &str) -> Labelled {
    let family = Labelled::default();
    registry.register(name, help, family.clone());
    family
}

fn step_of(source: &Source) -> Option<u64> {
    Some(source.step.load(Ordering::Relaxed)).filter(|s| *s != u64::MAX)
}

/// What observability costs, measured by `cargo bench --bench launch -- observability`: one
/// scrape's rendering of a launcher of `processes` trainer processes (the mean of `rounds`).
#[doc(hidden)]
pub fn measure(processes: u32, rounds: u32) -> Duration {
    let mut board = Board::new("bench", "bench-0");
    board.training(Size {
        pods: 32,
        ranks: 32 * processes,
        elastic: None,
    });
    let sources = (0..processes)
        .map(|local| Source {
            trainer_id: local,
            local_rank: local,
            step: Arc::new(AtomicU64::new(120_000 + u64::from(local))),
            compute_ms: Arc::new(AtomicU64::new(85)),
            file: OutputClock::new(),
            output: OutputClock::new(),
            started: Instant::now(),
            keep: None,
        })
        .collect();
    board.watch(sources);
    let began = Instant::now();
    for round in 0..rounds {
        board.sample(began + Duration::from_secs(u64::from(round) * 5));
        std::hint::black_box(board.render(Instant::now()));
    }
    began.elapsed() / rounds.max(1)
}

/// The coordinator's view of a job of `pods` launchers of `per_pod` processes each, over
/// `rounds` windows: what noting one report of every launcher costs, what the window's end
/// costs (every rank measured and judged, the table and figures made), and the table alone;
/// each the mean.
#[doc(hidden)]
pub fn measure_view(pods: u32, per_pod: u32, rounds: u32) -> (Duration, Duration, Duration) {
    use crate::job_view::{AttemptShape, JobView, RankStep};
    let rules = crate::straggler::Rules::default();
    let start = std::time::Instant::now();
    let mut view = JobView::new("bench", Some(rules), start);
    let names: Vec<String> = (0..pods).map(|p| format!("bench-{p}")).collect();
    let attempt = Some(AttemptShape {
        ledger: crate::ledger::Ledger::first(3),
        pods,
        ranks: pods * per_pod,
    });
    let (mut noting, mut ending, mut table) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for round in 0..rounds {
        // Two reports of each launcher in the window, a rate between them.
        for half in [1, 2] {
            let at = start + rules.window * round + rules.window * half / 3;
            let reports: Vec<Vec<RankStep>> = (0..pods)
                .map(|p| {
                    let ms = |r: u32| 80 + u64::from(r % 7) + 40 * u64::from(r == 3);
                    let step = u64::from(round * 100 + half * 30);
                    let first = p * per_pod;
                    (first..first + per_pod)
                        .map(|r| (r, step, Some(ms(r))))
                        .collect()
                })
                .collect();
            let began = Instant::now();
            for (pod, ranks) in names.iter().zip(&reports) {
                view.note(pod, pod, ranks, at);
            }
            noting += began.elapsed() / 2;
        }
        let end = start + rules.window * (round + 1);
        let began = Instant::now();
        std::hint::black_box(view.tick(end, attempt, false));
        ending += began.elapsed();
        if let Some(attempt) = attempt {
            let began = Instant::now();
            std::hint::black_box(view.table(end, attempt));
            table += began.elapsed();
        }
    }
    let n = rounds.max(1);
    (noting / n, ending / n, table / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(trainer_id: u32, step: &Arc<AtomicU64>) -> Source {
        Source {
            trainer_id,
            local_rank: trainer_id % 2,
            step: step.clone(),
            compute_ms: Arc::new(AtomicU64::new(if trainer_id == 3 { 250 } else { u64::MAX })),
            file: OutputClock::new(),
            output: OutputClock::new(),
            started: Instant::now(),
            keep: None,
        }
    }

    fn value(text: &str, name: &str, labels: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains(labels))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// What a scrape shows: the state, the restarts by cause, the size, and each process's
    /// step and rate over the samples of the last minute, with the labels Prometheus users
    /// filter by.
    #[test]
    fn a_scrape_shows_the_state_restarts_size_and_each_processs_progress() {
        let mut board = Board::new("dp", "dp-0");
        board.restarting(Kind::Preemption);
        board.restarted(Kind::Hang);
        board.restarted(Kind::Hang);
        board.training(Size {
            pods: 4,
            ranks: 8,
            elastic: Some((2, 4)),
        });
        let steps = [
            Arc::new(AtomicU64::new(u64::MAX)),
            Arc::new(AtomicU64::new(10)),
        ];
        board.watch(vec![source(2, &steps[0]), source(3, &steps[1])]);
        let t0 = Instant::now();
        board.sample(t0);
        steps[1].store(40, Ordering::Relaxed);
        board.sample(t0 + Duration::from_secs(10));
        let text = board.render(t0 + Duration::from_secs(10));
        let me = "job_name=\"dp\",pod=\"dp-0\"";
        assert_eq!(
            value(
                &text,
                "paddle_launcher_state{",
                &format!("{me},state=\"training\"")
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(&text, "paddle_launcher_state{", "state=\"waiting\""),
            Some(0.0)
        );
        assert_eq!(
            value(
                &text,
                "paddle_launcher_job_restarts_total{",
                "cause=\"hang\""
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &text,
                "paddle_launcher_job_restarts_total{",
                "cause=\"grow\""
            ),
            Some(0.0)
        );
        assert_eq!(value(&text, "paddle_launcher_job_ranks{", me), Some(8.0));
        assert_eq!(
            value(&text, "paddle_launcher_job_elastic_pods{", "bound=\"min\""),
            Some(2.0)
        );
        let three = "rank=\"3\",local_rank=\"1\"";
        assert_eq!(
            value(&text, "paddle_launcher_process_step{", three),
            Some(40.0)
        );
        assert_eq!(
            value(&text, "paddle_launcher_process_steps_per_second{", three),
            Some(3.0)
        );
        // Its step's time, as its progress file says it; none said, none shown.
        let compute = "paddle_launcher_process_step_compute_seconds{";
        assert_eq!(value(&text, compute, three), Some(0.25));
        assert_eq!(value(&text, compute, "rank=\"2\""), None);
        // A process that wrote no step has none, and no rate; its silence is shown.
        assert!(
            !text.contains("paddle_launcher_process_step{job_name=\"dp\",pod=\"dp-0\",rank=\"2\""),
            "{text}"
        );
        assert!(value(
            &text,
            "paddle_launcher_process_seconds_since_progress{",
            "rank=\"2\""
        )
        .is_some());
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(
            value(
                &text,
                "paddle_launcher_job_restarts_total{",
                "cause=\"preemption\""
            ),
            Some(1.0)
        );
        // The pod ends; a restart takes the attempt's processes off the board.
        board.set_state(State::Ending);
        let ending = board.render(t0);
        assert_eq!(
            value(&ending, "paddle_launcher_state{", "state=\"ending\""),
            Some(1.0)
        );
        board.restarting(Kind::Failure);
        let restarting = board.render(t0);
        assert_eq!(
            value(
                &restarting,
                "paddle_launcher_state{",
                "state=\"restarting\""
            ),
            Some(1.0)
        );
        assert!(
            !restarting.contains("paddle_launcher_process_step{"),
            "{restarting}"
        );
    }

    /// The rate is over the last minute only, and a step count that goes back (a new attempt)
    /// starts the window again.
    #[test]
    fn the_rate_is_over_the_last_minute_and_starts_again_with_the_count() {
        let mut samples = Samples::default();
        let t0 = Instant::now();
        samples.note(t0, 0);
        samples.note(t0 + Duration::from_secs(50), 500);
        samples.note(t0 + Duration::from_secs(100), 600);
        // The first sample is out of the window: (600 - 500) / 50 s.
        assert_eq!(samples.rate(), Some(2.0));
        samples.note(t0 + Duration::from_secs(101), 3);
        assert_eq!(samples.rate(), None, "one sample since the count went back");
        // A stalled process: the same step is a rate of 0, not a new window.
        samples.note(t0 + Duration::from_secs(111), 3);
        assert_eq!(samples.rate(), Some(0.0));
        // A sample exactly a minute old is still in the window.
        let mut minute = Samples::default();
        minute.note(t0, 0);
        minute.note(t0 + RATE_WINDOW, 120);
        assert_eq!(minute.rate(), Some(2.0));
    }
}
