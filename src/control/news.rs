//! What the channel carries of the job's progress besides its decisions: each launcher's
//! trainer processes' steps on its heartbeats (`RankGauge`s read at each beat), and what the
//! coordinator's view of them (`job_view::JobView`) makes known to the launcher (`JobNews`): its
//! metrics, the `Straggler` event, the Job's annotation, the table of `paddle-launcher status`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::message::MAX_RANKS_PER_BEAT;
use crate::job_view::{Figures, RankStep, Table};
use crate::straggler::Rules;

/// A number a gauge holds when it has none.
pub const NO_STEP: u64 = u64::MAX;

/// One trainer process's progress as its progress file last said: its step and how long the
/// step computed (`NO_STEP`: not said), written by the file's reader.
#[derive(Debug, Clone)]
pub struct RankGauge {
    pub trainer_id: u32,
    pub step: Arc<AtomicU64>,
    pub compute_ms: Arc<AtomicU64>,
}

/// The gauges of this launcher's processes in the attempt under way.
pub type Gauges = Arc<Mutex<Vec<RankGauge>>>;

/// What the channel makes known to the launcher, for it to show or post.
#[derive(Debug, Clone, PartialEq)]
pub enum JobNews {
    /// The coordinator named a straggler (the message of a `Straggler` event).
    Straggler(String),
    /// The job's summary, for the Job's annotation.
    Summary(String),
    /// The job's figures, as the coordinator knows them (its metrics).
    Figures(Figures),
    /// The job's table, as `status` asked for it.
    Table(Table),
    /// A follower's: where its coordinator is (`paddle-launcher status` asks it).
    CoordinatorAt(SocketAddr),
    /// What this launcher waits for before the job can start (`status` and the metrics say
    /// it); a follower's, what its coordinator does (`pods` empty: said in the line alone).
    Waiting(crate::membership::Awaited),
}

/// What a launcher brings to the channel for its reports: the job's name, the straggler rules
/// (None: not judged), where its news go (None: nowhere), and whether `status` asks for the
/// job's table (set by the metrics endpoint, cleared once a table is sent).
#[derive(Debug, Clone, Default)]
pub struct Reporting {
    pub job: String,
    pub stragglers: Option<Rules>,
    pub news: Option<mpsc::UnboundedSender<JobNews>>,
    pub table_asked: Arc<std::sync::atomic::AtomicBool>,
}

impl Reporting {
    /// What this launcher waits for now, for its board.
    pub fn waiting(&self, awaited: &crate::membership::Awaited) {
        self.tell(JobNews::Waiting(awaited.clone()));
    }

    pub(super) fn tell(&self, news: JobNews) {
        if let Some(to) = &self.news {
            let _ = to.send(news);
        }
    }
}

/// The processes' progress now, those furthest behind first, as many as a beat carries.
pub(super) fn read(gauges: &Gauges) -> Vec<RankStep> {
    let gauges = gauges.lock().unwrap_or_else(|p| p.into_inner());
    let mut ranks: Vec<RankStep> = gauges
        .iter()
        .filter_map(|g| {
            let step = Some(g.step.load(Ordering::Relaxed)).filter(|s| *s != NO_STEP)?;
            let ms = Some(g.compute_ms.load(Ordering::Relaxed)).filter(|m| *m != NO_STEP);
            Some((g.trainer_id, step, ms))
        })
        .collect();
    ranks.sort_by_key(|&(id, step, _)| (step, id));
    ranks.truncate(MAX_RANKS_PER_BEAT);
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_carries_the_processes_furthest_behind_that_said_a_step() {
        let gauge = |id, step, ms| RankGauge {
            trainer_id: id,
            step: Arc::new(AtomicU64::new(step)),
            compute_ms: Arc::new(AtomicU64::new(ms)),
        };
        let mut all: Vec<RankGauge> = (0..20).map(|i| gauge(i, 100 + u64::from(i), 5)).collect();
        all.push(gauge(20, NO_STEP, NO_STEP));
        all.push(gauge(21, 7, NO_STEP));
        let ranks = read(&Arc::new(Mutex::new(all)));
        assert_eq!(ranks.len(), MAX_RANKS_PER_BEAT);
        assert_eq!(ranks[0], (21, 7, None));
        assert_eq!(ranks[1], (0, 100, Some(5)));
        assert!(!ranks.iter().any(|r| r.0 == 20 || r.0 == 19));
    }
}
