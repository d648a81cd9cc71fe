//! The launcher's side of the job's reports: what its channel makes known (`JobNews`) shown
//! on its metrics board (the coordinator's table and figures, a follower's coordinator) and,
//! on the coordinator that talks to the API, posted: a `Straggler` event, and the job's
//! summary kept on its Job (at most one patch every 30 s, `job_view::SUMMARY_EVERY`). A task of
//! its own: a slow API server never holds the channel back; a refusal is said once.

use std::net::SocketAddr;

use tokio::sync::{mpsc, watch};
use tokio::time::timeout;
use tracing::warn;

use crate::config::Config;
use crate::control::{JobNews, Reporting};
use crate::events::JobEvents;
use crate::job_view::SUMMARY_EVERY;
use crate::metrics::serve::{lock, SharedBoard};
use crate::peers::kubernetes::{annotate_progress, ApiServer};
use crate::vocabulary::EventKind;

use super::record::JOB_RECORD_TIMEOUT;
use super::setup::node_name;

/// Where the coordinator posts: the API server, its pod (events go on the object that owns
/// it), and the Job that keeps the summary, if one does.
#[derive(Clone)]
pub(super) struct Posting {
    pub(super) api: ApiServer,
    pub(super) pod: String,
    pub(super) job: Option<String>,
}

/// The reports' task, and what the channel is given to reach it.
pub(super) struct Reporter {
    pub(super) reporting: Reporting,
    posting: watch::Sender<Option<Posting>>,
}

impl Reporter {
    pub(super) fn start(config: &Config, board: Option<SharedBoard>) -> Reporter {
        let (news, heard) = mpsc::unbounded_channel();
        // The endpoint's `GET /status` asks for the table through it.
        let table_asked = board
            .as_ref()
            .map(|b| lock(b).table_asked())
            .unwrap_or_default();
        let (posting, posts) = watch::channel(None);
        let metrics_port = config.ports.metrics;
        tokio::spawn(report(heard, board, metrics_port, posts));
        Reporter {
            reporting: Reporting {
                job: config.topology.job_name.clone(),
                stragglers: config.timing.stragglers,
                news: Some(news),
                table_asked,
            },
            posting,
        }
    }

    /// This launcher coordinates the attempt and talks to the API: it posts from now on.
    pub(super) fn post_to(&self, posting: Posting) {
        self.posting.send_replace(Some(posting));
    }
}

async fn report(
    mut news: mpsc::UnboundedReceiver<JobNews>,
    board: Option<SharedBoard>,
    metrics_port: Option<u16>,
    posting: watch::Receiver<Option<Posting>>,
) {
    let mut events: Option<JobEvents> = None;
    let mut refused = false;
    // Each attempt's view sums up on its own clock: the patches are spaced here, across
    // restarts in place.
    let mut patched: Option<tokio::time::Instant> = None;
    while let Some(item) = news.recv().await {
        match item {
            JobNews::Figures(figures) => show(&board, |b| b.job_figures(figures)),
            JobNews::Table(table) => show(&board, |b| b.job_table(table)),
            JobNews::Waiting(awaited) => show(&board, |b| b.waiting(awaited)),
            JobNews::CoordinatorAt(at) => {
                let metrics = metrics_port.map(|port| SocketAddr::new(at.ip(), port));
                show(&board, |b| b.coordinator_at(metrics));
            }
            JobNews::Straggler(message) => {
                let Some(to) = posting.borrow().clone() else {
                    continue;
                };
                events
                    .get_or_insert_with(|| JobEvents::start(to.api, to.pod, node_name()))
                    .post(EventKind::Warning, "Straggler", &message);
            }
            JobNews::Summary(summary) => {
                let Some(Posting {
                    api,
                    job: Some(job),
                    ..
                }) = posting.borrow().clone()
                else {
                    continue;
                };
                let now = tokio::time::Instant::now();
                if patched.is_some_and(|at| now.duration_since(at) < SUMMARY_EVERY) {
                    continue;
                }
                patched = Some(now);
                let why = match timeout(JOB_RECORD_TIMEOUT, annotate_progress(&api, &job, &summary))
                    .await
                {
                    Ok(Ok(())) => continue,
                    Ok(Err(why)) => why,
                    Err(_) => format!("no answer in {} s", JOB_RECORD_TIMEOUT.as_secs()),
                };
                if !std::mem::replace(&mut refused, true) {
                    warn!("keeping the job's progress on Job {job}: {why}; `kubectl get job` will not show it (said once)");
                }
            }
        }
    }
}

fn show(board: &Option<SharedBoard>, write: impl FnOnce(&mut crate::metrics::Board)) {
    if let Some(board) = board {
        write(&mut lock(board));
    }
}
