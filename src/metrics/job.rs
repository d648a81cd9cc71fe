//! The job-wide part of the board, on the coordinator: its view of every rank (`report`'s
//! table and figures) for the metrics and `paddle-launcher status`; on a follower, where the
//! coordinator's board is, so that `status` in any pod finds the job's table.

use std::fmt::Write as _;
use std::net::SocketAddr;

use prometheus_client::registry::Registry;

use super::{family, step_of, Board};
use crate::report::Table;

/// What `GET /status` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The job's table, as this launcher (the coordinator) knows it.
    Job(String),
    /// Another launcher's board has it (the coordinator's metrics endpoint).
    Elsewhere(SocketAddr),
    /// Only this pod's processes are known here (no control channel, or nothing said yet).
    Pod(String),
}

impl Board {
    /// The coordinator's table and figures, made again.
    pub fn job_view(&mut self, table: Table) {
        self.view = Some(table);
        self.coordinator = None;
    }

    /// A follower's: the coordinator's metrics endpoint (None: metrics are off here, so
    /// presumably there too).
    pub fn coordinator_at(&mut self, metrics: Option<SocketAddr>) {
        self.coordinator = metrics;
        self.view = None;
    }

    pub fn status(&self) -> Status {
        if let Some(table) = &self.view {
            return Status::Job(table.text.clone());
        }
        if let Some(at) = self.coordinator {
            return Status::Elsewhere(at);
        }
        let mut text = format!(
            "pod {} of job {}: {} (this launcher knows no job-wide view: the job has no control channel, or its coordinator has said nothing yet)\n",
            self.pod,
            self.job,
            self.state.name()
        );
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
        let Some(table) = &self.view else {
            return;
        };
        let figures = &table.figures;
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
