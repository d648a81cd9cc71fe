//! The job's count of restarts kept on its Job object (an annotation the coordinator writes),
//! so that a job whose pods are all created again goes on from it.

use std::time::Duration;

use tokio::time::timeout;
use tracing::{info, warn};

use crate::config::Config;
use crate::ledger::Recorded;
use crate::peers;
use crate::peers::kubernetes::ApiServer;

use crate::coordination;
use crate::ledger::Ledger;

/// How long the Job's record of the restart count is waited for, read or written.
pub(super) const JOB_RECORD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a preempted attempt's end waits for its record on the Job: the pod is within its
/// grace period.
pub(super) const PREEMPTION_RECORD_WAIT: Duration = Duration::from_secs(2);

/// The job's restart count as kept on its Job object, where no batch system's label keeps it
/// (`coordination::job_keeping_the_count`): read by a coordinator at its first attempt,
/// written at every start and at a preemption's end.
pub(super) struct JobRecord {
    pub(super) api: ApiServer,
    pub(super) job: String,
}

impl JobRecord {
    pub(super) fn of(config: &Config, api: Option<&ApiServer>) -> Option<JobRecord> {
        Some(JobRecord {
            api: api?.clone(),
            job: coordination::job_keeping_the_count(config)?.to_string(),
        })
    }

    /// The count as the coordinator starts gathering, with what the Job records: the epoch
    /// it last started (so the next is one more: the job was restarted whole since, or is
    /// being restarted in place now) and its preemptions. Unreadable: this launcher's own
    /// count stands, said in the log.
    pub(super) async fn ledger_from(&self, ledger: Ledger) -> Ledger {
        let job = &self.job;
        info!(
            "reading the restart count recorded on Job {job} (at most {} s)",
            JOB_RECORD_TIMEOUT.as_secs()
        );
        let read = peers::kubernetes::recorded_restarts(&self.api, job);
        let why = match timeout(JOB_RECORD_TIMEOUT, read).await {
            Ok(Ok(Some(record))) => {
                let (epoch, ..) = record;
                let recorded = ledger.after_record(record);
                if recorded.epoch > ledger.epoch {
                    info!(
                        "Job {job} records restart epoch {epoch} as started: the job was restarted whole since, so the restart count goes on at {}",
                        recorded.epoch
                    );
                }
                return recorded;
            }
            Ok(Ok(None)) => return ledger,
            Ok(Err(why)) => {
                format!("{why} (grant `get` and `patch` on it, docs/manifests-and-rbac.md)")
            }
            Err(_) => format!("no answer in {} s", JOB_RECORD_TIMEOUT.as_secs()),
        };
        warn!("reading the restart count recorded on Job {job}: {why}: the count starts from this pod's own");
        ledger
    }

    /// Records that restart epoch `epoch` started, after `preemptions` (`grows` of them): in
    /// the background, bounded, a failure said in the log (the job goes on; only a whole-Job
    /// restart would then start the count again).
    pub(super) fn write(&self, record: Recorded) -> tokio::task::JoinHandle<()> {
        let (api, job) = (self.api.clone(), self.job.clone());
        let (epoch, ..) = record;
        tokio::spawn(async move {
            let write = peers::kubernetes::record_restarts(&api, &job, record);
            let why = match timeout(JOB_RECORD_TIMEOUT, write).await {
                Ok(Ok(())) => return,
                Ok(Err(why)) => format!("{why} (grant `patch` on it, docs/manifests-and-rbac.md)"),
                Err(_) => format!("no answer in {} s", JOB_RECORD_TIMEOUT.as_secs()),
            };
            warn!("recording restart epoch {epoch} on Job {job}: {why}: a whole-Job restart would start the restart count at 0");
        })
    }
}
