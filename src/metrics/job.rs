//! The job-wide part of the board, on the coordinator: its view of every rank (`report`'s
//! table and figures) for the metrics and `paddle-launcher status`; on a follower, where the
//! coordinator's board is, so that `status` in any pod finds the job's table.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;

use super::{family, step_of, Board};
use crate::job_view::{Figures, Table};

/// What `GET /status` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The job's table, as this launcher (the coordinator) knows it.
    Job(String),
    /// Another launcher's board has it (the coordinator's metrics endpoint).
    Elsewhere(SocketAddr),
    /// Only this pod's processes are known here (no control channel, or nothing said yet).
    Pod(String),
    /// This launcher coordinates: its view is asked for a table (ask again shortly).
    Asked,
}

/// How fresh a table must be to answer `GET /status` with it: older, a new one is asked for.
pub const TABLE_FRESH: Duration = Duration::from_secs(2);

impl Board {
    /// The coordinator's figures, made again.
    pub fn job_figures(&mut self, figures: Figures) {
        self.figures = Some(figures);
        self.coordinator = None;
    }

    /// The coordinator's table, as asked for.
    pub fn job_table(&mut self, table: Table) {
        self.table = Some((Instant::now(), table));
    }

    /// What `GET /status` sets to have the coordinator's view make a table.
    pub fn table_asked(&self) -> Arc<AtomicBool> {
        self.table_asked.clone()
    }

    /// A follower's: the coordinator's metrics endpoint (None: metrics are off here, so
    /// presumably there too).
    pub fn coordinator_at(&mut self, metrics: Option<SocketAddr>) {
        self.coordinator = metrics;
        (self.figures, self.table) = (None, None);
    }

    /// What `GET /status` answers now; `Status::Asked` when this launcher coordinates and its
    /// table is not fresh (asked for: try again shortly).
    pub fn status(&self, now: Instant) -> Status {
        if let Some(at) = self.coordinator {
            return Status::Elsewhere(at);
        }
        match (&self.figures, &self.table) {
            (_, Some((made, table))) if now.saturating_duration_since(*made) < TABLE_FRESH => {
                return Status::Job(table.text.clone())
            }
            (Some(_), _) => {
                self.table_asked.store(true, Ordering::Relaxed);
                return Status::Asked;
            }
            _ => {}
        }
        let mut text = match self.awaited() {
            Some(awaited) => format!(
                "pod {} of job {}: waiting: {}\n",
                self.pod, self.job, awaited.line
            ),
            None => format!(
                "pod {} of job {}: {} (this launcher knows no job-wide view: the job has no control channel, or its coordinator has said nothing yet)\n",
                self.pod,
                self.job,
                self.state.name()
            ),
        };
        let _ = writeln!(
            text,
            "{:>6} {:>6} {:>10} {:>9}",
            "RANK", "LOCAL", "STEP", "STEPS/S"
        );
        for (source, samples) in self.sources.iter().zip(&self.samples) {
            let step = step_of(source).map_or("-".into(), |s| s.to_string());
            let rate = samples.rate().map_or("-".into(), |r| format!("{r:.2}"));
            let _ = writeln!(
                text,
                "{:>6} {:>6} {step:>10} {rate:>9}",
                source.trainer_id, source.local_rank
            );
        }
        Status::Pod(text)
    }

    /// The coordinator's job-wide metrics, from its view's figures.
    pub(super) fn render_job(&self, registry: &mut Registry) {
        let Some(figures) = &self.figures else {
            return;
        };
        let with = |more: &[(&str, String)]| self.labels(more);
        if let Some((lowest, highest)) = figures.steps {
            let help = "The lowest and highest step any rank of the job reports (their spread)";
            let steps = family(registry, "job_step", help);
            steps
                .get_or_create(&with(&[("bound", "lowest".into())]))
                .set(lowest as f64);
            steps
                .get_or_create(&with(&[("bound", "highest".into())]))
                .set(highest as f64);
        }
        if let Some((rank, behind, score)) = figures.slowest {
            let me = with(&[]);
            let help = "The job's slowest rank: lowest score in the last window, else lowest step";
            family(registry, "job_slowest_rank", help)
                .get_or_create(&me)
                .set(f64::from(rank));
            let help = "Steps the slowest rank is behind the furthest one";
            family(registry, "job_slowest_rank_steps_behind", help)
                .get_or_create(&me)
                .set(behind as f64);
            if let Some(score) = score {
                let help =
                    "The slowest rank's score: its speed over the median rank's (1: as fast or faster)";
                family(registry, "job_slowest_rank_score", help)
                    .get_or_create(&me)
                    .set(score);
            }
        }
        let help = "Ranks named stragglers now";
        family(registry, "job_stragglers", help)
            .get_or_create(&with(&[]))
            .set(figures.stragglers.len() as f64);
        let help = "Each rank named a straggler, with its last score";
        let scores = family(registry, "job_straggler_score", help);
        for (rank, score) in &figures.stragglers {
            scores
                .get_or_create(&with(&[("rank", rank.to_string())]))
                .set(*score);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coordinator's board asks its view for a table when it has none fresh, and answers
    /// with it once it comes; a follower's sends to the coordinator; a board without a job
    /// view shows its own processes.
    #[test]
    fn status_is_the_fresh_table_the_coordinator_or_the_pod() {
        let mut board = Board::new("j", "j-0");
        assert!(
            matches!(board.status(Instant::now()), Status::Pod(text) if text.contains("no job-wide view"))
        );
        board.job_figures(Figures::default());
        let asked = board.table_asked();
        assert_eq!(board.status(Instant::now()), Status::Asked);
        assert!(
            asked.load(Ordering::Relaxed),
            "the view is asked for a table"
        );
        let table = Table {
            text: "job j: step 3\n".into(),
        };
        board.job_table(table);
        assert_eq!(
            board.status(Instant::now()),
            Status::Job("job j: step 3\n".into())
        );
        let later = Instant::now() + TABLE_FRESH;
        assert_eq!(
            board.status(later),
            Status::Asked,
            "a stale table is asked for again"
        );
        let at: SocketAddr = "10.0.0.5:9410".parse().unwrap();
        board.coordinator_at(Some(at));
        assert_eq!(board.status(Instant::now()), Status::Elsewhere(at));
    }

    /// While the launcher waits, `status` and the metrics say what for (issue 51: they said
    /// only "waiting", and that the job had no control channel); once it trains, neither does.
    #[test]
    fn a_waiting_launcher_says_what_it_waits_for() {
        let mut board = Board::new("j", "j-0");
        board.waiting(crate::membership::Awaited {
            line: "2/3 pods Running with an IP; j-2: Pending (ImagePullBackOff: no such image)"
                .into(),
            pods: vec![("j-2".into(), "ImagePullBackOff".into())],
        });
        let Status::Pod(text) = board.status(Instant::now()) else {
            panic!("no pod status");
        };
        assert!(
            text.starts_with("pod j-0 of job j: waiting: 2/3 pods Running with an IP; j-2: Pending (ImagePullBackOff"),
            "{text}"
        );
        let metrics = board.render(Instant::now());
        let series = "paddle_launcher_awaited_pod{job_name=\"j\",pod=\"j-0\",awaited=\"j-2\",why=\"ImagePullBackOff\"} 1";
        assert!(metrics.contains(series), "{metrics}");
        board.training(super::super::Size::default());
        assert!(!board.render(Instant::now()).contains("awaited_pod{"));
        let Status::Pod(text) = board.status(Instant::now()) else {
            panic!("no pod status");
        };
        assert!(!text.contains("waiting:"), "{text}");
    }
}
