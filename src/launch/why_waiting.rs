//! Why a follower still waits for its coordinator. A follower of a named coordinator makes no
//! API request while the coordinator answers; while it cannot reach it (refused: the
//! coordinator is still finding the pods, or its name has no address: its pod is not Running),
//! it asks the API why, at a cost that does not grow with the job's size: what the coordinator
//! keeps on its Job (one object, `WAITING_ANNOTATION`), else the coordinator's own pod (a list
//! of the one pod of its completion index). Said in its log at least every `SAY_EVERY`, and on
//! its board (`status`, the metrics).

use std::time::Duration;

use tokio::time::{timeout, Instant};
use tracing::info;

use crate::config::{Config, Discovery};
use crate::control::Reporting;
use crate::membership::Awaited;
use crate::peers::kubernetes::{self, ApiServer};

use crate::coordination;

/// How often the log says why, while it waits.
pub(super) const SAY_EVERY: Duration = Duration::from_secs(30);

/// How often the API is asked (each time one or two small requests).
pub(super) const ASK_EVERY: Duration = Duration::from_secs(60);

/// How long after the wait begins the API is first asked: a coordinator that is only starting
/// costs nothing.
pub(super) const FIRST_ASK: Duration = Duration::from_secs(10);

/// What the coordinator keeps on its Job is believed while it is at most this old: it writes
/// it again every 30 s while it waits.
pub(super) const KEPT_FRESH_S: u64 = 90;

/// How long one question to the API may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct WhyWaiting {
    namespace: Option<String>,
    api: Option<ApiServer>,
    job: String,
    /// The job's pods, and the coordinator's completion index among them.
    selector: String,
    index: Option<u64>,
    /// Since when the coordinator cannot be reached: the API is asked only after `FIRST_ASK`
    /// of it (a coordinator that answers at once costs nothing).
    unreached_since: Option<Instant>,
    asked: Option<Instant>,
    said: Option<Instant>,
    why: Option<String>,
}

impl WhyWaiting {
    /// For a follower of a named coordinator found through the API; None otherwise.
    pub(super) fn of(config: &Config) -> Option<WhyWaiting> {
        if !coordination::membership_from_coordinator(config) {
            return None;
        }
        let Discovery::Kubernetes { groups } = &config.topology.discovery else {
            return None;
        };
        let job = coordination::job_keeping_the_count(config)?.to_string();
        let (host, _) = config.control.coordinator.as_ref()?;
        Some(WhyWaiting {
            namespace: config.topology.namespace.clone(),
            api: None,
            index: coordinator_index(host, &job),
            job,
            selector: groups.first()?.selector.to_string(),
            unreached_since: None,
            asked: None,
            said: None,
            why: None,
        })
    }

    /// A new try to reach the coordinator begins (a follower's connect): unreached from now.
    pub(super) fn trying(&mut self) {
        self.unreached_since = Some(Instant::now());
    }

    /// The coordinator was reached: a later wait for it counts from its own start.
    pub(super) fn reached(&mut self) {
        self.unreached_since = None;
    }

    /// Says why the coordinator cannot be reached (`reached`: how the connection failed),
    /// asking the API when it is due; at most one line every `SAY_EVERY`, none before the
    /// coordinator has been unreached for `FIRST_ASK`.
    pub(super) async fn say(&mut self, reached: &str, reporting: &Reporting) {
        let now = Instant::now();
        let since = *self.unreached_since.get_or_insert(now);
        if now.duration_since(since) < FIRST_ASK
            || self
                .said
                .is_some_and(|at| now.duration_since(at) < SAY_EVERY)
        {
            return;
        }
        if self
            .asked
            .is_none_or(|at| now.duration_since(at) >= ASK_EVERY)
        {
            self.asked = Some(now);
            self.why = Some(self.ask().await);
        }
        self.said = Some(now);
        let why = self.why.clone().unwrap_or_default();
        let line = format!("the coordinating launcher cannot be reached ({reached}): {why}");
        info!("waiting: {line}");
        reporting.waiting(&Awaited {
            line,
            pods: Vec::new(),
        });
    }

    /// What the coordinator keeps on its Job, when fresh; else what its pod shows.
    async fn ask(&mut self) -> String {
        if self.api.is_none() {
            match timeout(ASK_TIMEOUT, kubernetes::connect(self.namespace.as_deref())).await {
                Ok(Ok(api)) => self.api = Some(api),
                Ok(Err(e)) => return format!("the API cannot be asked why: {e}"),
                Err(_) => return "the API cannot be asked why: no answer".to_string(),
            }
        }
        let Some(api) = &self.api else {
            return String::new();
        };
        let kept = timeout(ASK_TIMEOUT, kubernetes::waiting_on_job(api, &self.job)).await;
        let kept = match kept {
            Ok(Ok(Some((age, line)))) if age <= KEPT_FRESH_S => {
                return format!("it said {age} s ago, on its Job: {line}")
            }
            Ok(Ok(_)) => None,
            Ok(Err(why)) => Some(why),
            Err(_) => Some(format!(
                "Job {} not read in {} s",
                self.job,
                ASK_TIMEOUT.as_secs()
            )),
        };
        let Some(index) = self.index else {
            return kept.unwrap_or_else(|| "it has said nothing of what it waits for".into());
        };
        let pod = kubernetes::coordinators_pod(api, &self.selector, index);
        match timeout(ASK_TIMEOUT, pod).await {
            Ok(Ok(said)) => said,
            Ok(Err(why)) => why,
            Err(_) => format!("its pod not listed in {} s", ASK_TIMEOUT.as_secs()),
        }
    }
}

/// Why the coordinator cannot be reached, asked of the API once (`doctor` on a follower);
/// None where no coordinator is named or the pods are not one Job's.
pub async fn why_unreached(config: &Config) -> Option<String> {
    Some(WhyWaiting::of(config)?.ask().await)
}

/// The coordinator's completion index from its DNS name, as `manifest` names it
/// (`<job>-<index>.<service>`); None for any other name.
pub(super) fn coordinator_index(host: &str, job: &str) -> Option<u64> {
    let first = host.split('.').next()?;
    first.strip_prefix(job)?.strip_prefix('-')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coordinators_index_is_read_from_the_name_manifest_gives_it() {
        assert_eq!(coordinator_index("llm-0.llm-pods", "llm"), Some(0));
        assert_eq!(coordinator_index("llm-12.llm-pods.ns.svc", "llm"), Some(12));
        assert_eq!(coordinator_index("llm-x.llm-pods", "llm"), None);
        assert_eq!(coordinator_index("other-0.svc", "llm"), None);
        assert_eq!(coordinator_index("10.0.0.1", "llm"), None);
    }
}
