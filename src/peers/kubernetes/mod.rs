//! Peers from the Kubernetes API: one list + watch of the selector's pods (kube-runtime's
//! watcher: relists on 410 Gone, resumes from bookmarks, backs off on errors).

mod job_object;
mod waiting;

pub use job_object::{
    annotate_progress, annotate_waiting, jobset, own_marks, record_restarts, recorded_restarts,
    waiting_on_job,
};
use std::collections::HashSet;
use std::time::Duration;
#[cfg(test)]
use waiting::all_gated;
pub use waiting::wait_until_ready;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use tokio::time::Instant;
use tracing::warn;

use crate::config::{Elastic, Group, GroupKind, Ranking};
use crate::error::Error;
use crate::membership::{
    awaiting_judgement, bound_deletions, elastic_start, judge, leave_out, lost, Member, PodPhase,
    PodSet, PodView, Readiness, Served, Verdict,
};

/// Interval of the "still waiting" line, so a stuck job always says why.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);
/// How long a pod looks for its own object: the kubelet publishes the pod's IP moments after
/// the containers start.
const OWN_POD_WAIT: Duration = Duration::from_secs(60);

use crate::vocabulary::COMPLETION_INDEX;
use crate::vocabulary::JOB_STOPPED;

/// The API server the launcher talks to: its client, the namespace of the job's pods, and its
/// URL (named in every error, so that a wrong server is recognised).
#[derive(Clone)]
pub struct ApiServer {
    pub client: Client,
    pub namespace: String,
    pub url: String,
}

/// Client config the standard way: $KUBECONFIG / ~/.kube/config, else in-cluster.
pub async fn connect(namespace: Option<&str>) -> Result<ApiServer, Error> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| Error::NoCluster { source: e.into() })?;
    let namespace = namespace
        .map(str::to_string)
        .unwrap_or_else(|| config.default_namespace.clone());
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| Error::NoCluster { source: e.into() })?;
    Ok(ApiServer {
        client,
        namespace,
        url,
    })
}

fn group_name(kind: GroupKind) -> &'static str {
    match kind {
        GroupKind::Job => "pods",
        GroupKind::Pservers => "pserver pods",
        GroupKind::Trainers => "trainer pods",
    }
}

type GroupEvents = futures::stream::BoxStream<'static, (usize, watcher::Result<Event<Pod>>)>;

/// How long after an API server that had answered fails (unreachable, 5xx) its refusals
/// (401/403) are retried: a restarted API server refuses every request for a few seconds,
/// until its RBAC authorizer has read the Roles (seen against the real one,
/// `tests/real_cluster.rs`). Beyond it, or without a failure before, a refusal is what it says.
const REFUSAL_PATIENCE: Duration = Duration::from_secs(60);

/// The live view of every group's pods: one watch per group, merged. It outlives the wait for
/// readiness, so that the launcher keeps watching its peers without new requests.
pub struct PodWatch {
    events: futures::stream::SelectAll<GroupEvents>,
    views: GroupViews,
    namespace: String,
    url: String,
    /// Some event came from the API server: it is reachable and speaks Kubernetes.
    answered: bool,
    /// Since when the API server has failed (unreachable, 5xx) without answering since: a
    /// refusal that follows within `REFUSAL_PATIENCE` is retried.
    failing_since: Option<Instant>,
    /// Where each group's pods carry their rank and attempt.
    rankings: Vec<Ranking>,
    /// The Job the pods belong to, when their selector names one (`job_of`).
    job: Option<String>,
}

/// Every group's pods as its watch has shown them. A set may be judged only when every group
/// has been listed and none is in the middle of a relist (after a 410 Gone, its pods come back
/// one by one): an event on another group must not make a half-relisted set look complete.
#[derive(Debug, Clone)]
pub struct GroupViews {
    pods: Vec<PodSet>,
    listed: Vec<bool>,
}

impl GroupViews {
    pub fn new(groups: &[Group]) -> Self {
        GroupViews {
            pods: groups.iter().map(|g| PodSet::new(&g.ranking)).collect(),
            listed: vec![false; groups.len()],
        }
    }

    /// Applies one watch event of `group`; true when every set is complete and may be judged.
    pub fn apply(&mut self, group: usize, event: Event<PodView>) -> bool {
        let set = &mut self.pods[group];
        match event {
            Event::Init => set.begin_relist(),
            Event::InitApply(pod) => set.relisted(pod),
            Event::InitDone => {
                set.end_relist();
                self.listed[group] = true;
            }
            Event::Apply(pod) => set.applied(pod),
            Event::Delete(pod) => set.deleted(&pod.name),
        }
        self.listed.iter().all(|l| *l) && !self.pods.iter().any(PodSet::is_relisting)
    }

    pub fn group(&self, group: usize) -> &PodSet {
        &self.pods[group]
    }
}

/// What one watch event did to the view.
enum Change {
    /// Every group's set is complete and may be judged.
    Settled,
    /// Mid-relist, or not every group listed yet.
    Unsettled,
    Error(String),
    /// An answer that retrying cannot change: access refused, or not an API server.
    Refused(Error),
}

impl PodWatch {
    fn start(server: &ApiServer, groups: &[Group]) -> Self {
        let api: Api<Pod> = Api::namespaced(server.client.clone(), &server.namespace);
        let streams = groups.iter().enumerate().map(|(i, group)| {
            let config = watcher::Config::default().labels(&group.selector.to_string());
            watcher(api.clone(), config)
                .default_backoff()
                .map(move |event| (i, event))
                .boxed()
        });
        PodWatch {
            events: futures::stream::select_all(streams),
            views: GroupViews::new(groups),
            namespace: server.namespace.clone(),
            url: server.url.clone(),
            answered: false,
            failing_since: None,
            rankings: groups.iter().map(|g| g.ranking.clone()).collect(),
            job: job_of(groups),
        }
    }

    async fn next_change(&mut self) -> Change {
        let Some((group, event)) = self.events.next().await else {
            // The watchers restart themselves forever; an end would be a bug, but not a hang.
            return std::future::pending().await;
        };
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                return match refusal(&error) {
                    Some(Refusal::Forbidden(message)) if self.patient() => Change::Error(format!(
                        "refused ({message}) right after failing, as an API server that has \
                             just started does until its authorizer has read the Roles: retrying \
                             for up to {} s from its failure",
                        REFUSAL_PATIENCE.as_secs()
                    )),
                    Some(Refusal::Forbidden(message)) => Change::Refused(Error::Forbidden {
                        namespace: self.namespace.clone(),
                        message,
                        job: self.job.clone(),
                    }),
                    Some(Refusal::NotFound(answer)) => Change::Refused(Error::NotAnApiServer {
                        url: self.url.clone(),
                        answer,
                    }),
                    None => {
                        self.failing_since.get_or_insert_with(Instant::now);
                        Change::Error(error.to_string())
                    }
                }
            }
        };
        // Init comes before the list request is even sent: it proves nothing.
        if !matches!(event, Event::Init) {
            self.answered = true;
            self.failing_since = None;
        }
        let ranking = &self.rankings[group];
        let event = match event {
            Event::Init => Event::Init,
            Event::InitApply(pod) => Event::InitApply(ranked_view(&pod, ranking)),
            Event::InitDone => Event::InitDone,
            Event::Apply(pod) => Event::Apply(ranked_view(&pod, ranking)),
            Event::Delete(pod) => Event::Delete(ranked_view(&pod, ranking)),
        };
        if self.views.apply(group, event) {
            Change::Settled
        } else {
            Change::Unsettled
        }
    }

    /// Whether a refusal is retried: only one that follows a failure of an API server that had
    /// answered (a restart), within REFUSAL_PATIENCE of that failure. A Role that lacks a verb
    /// is refused with no failure before it, and said at once.
    fn patient(&self) -> bool {
        self.answered
            && self
                .failing_since
                .is_some_and(|t| t.elapsed() < REFUSAL_PATIENCE)
    }

    /// After the launch: waits for the next complete view. API errors are retried (and
    /// logged); a refusal (401/403, 404) is returned, since retrying cannot help.
    async fn settled(&mut self, watching: &str) -> Result<(), Error> {
        loop {
            match self.next_change().await {
                Change::Settled => return Ok(()),
                Change::Unsettled => {}
                Change::Error(e) => warn!(
                    "the Kubernetes API server at {} failed, retrying with backoff (watching {watching}): {e}",
                    self.url
                ),
                Change::Refused(e) => return Err(e),
            }
        }
    }

    /// Resolves with the reason as soon as a member pod is lost (see `membership::lost`).
    pub async fn first_loss(
        mut self,
        members: Vec<Vec<Member>>,
        terminating_is_loss: bool,
        served: Served,
    ) -> String {
        let mut succeeded: HashSet<String> = HashSet::new();
        loop {
            if let Err(e) = self.settled("the peers").await {
                // The own trainer's end still ends the pod; only the early warning is gone.
                warn!("no longer allowed to watch the peers; going on without: {e}");
                return std::future::pending().await;
            }
            for (i, group) in members.iter().enumerate() {
                let set = self.views.group(i);
                for member in group.iter().filter(|m| !served.contains(&m.name)) {
                    let now = set.get(&member.name);
                    let succeeded_before = succeeded.contains(&member.name);
                    if let Some(reason) = lost(member, now, succeeded_before, terminating_is_loss) {
                        return reason;
                    }
                    if now.is_some_and(|p| p.phase == PodPhase::Succeeded) {
                        succeeded.insert(member.name.clone());
                    }
                }
            }
        }
    }
}

/// The grace period of this pod's own deletion (`metadata.deletionGracePeriodSeconds`), read
/// once when its launcher is told to stop (by then the API has the deletion: the kubelet acts
/// on it). None when the pod is not being deleted, or the read fails or takes longer than
/// `limit`: the pod's own grace period then stands.
pub async fn own_deletion_grace(
    namespace: Option<String>,
    name: String,
    limit: Duration,
) -> Option<Duration> {
    let read = async {
        let server = connect(namespace.as_deref()).await.ok()?;
        let pods: Api<Pod> = Api::namespaced(server.client, &server.namespace);
        let pod = pods.get(&name).await.ok()?;
        pod.metadata.deletion_timestamp.as_ref()?;
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        Some(Duration::from_secs(u64::try_from(grace).unwrap_or(0)))
    };
    tokio::time::timeout(limit, read).await.ok().flatten()
}

/// Resolves once `group.expected` of its pods have Succeeded: the trainers are done, so a
/// pserver of the split layout can stop and let its Job complete. Err when the API refuses
/// the watch: without it the pserver could never tell, and would serve forever.
pub async fn all_succeeded(server: ApiServer, group: Group) -> Result<String, String> {
    let mut watch = PodWatch::start(&server, std::slice::from_ref(&group));
    loop {
        watch
            .settled("the trainer pods")
            .await
            .map_err(|e| e.to_string())?;
        let done = watch
            .views
            .group(0)
            .pods()
            .iter()
            .filter(|p| p.phase == PodPhase::Succeeded)
            .count();
        if done >= group.expected as usize {
            return Ok(format!(
                "all {done} trainer pods `{}` Succeeded",
                group.selector
            ));
        }
    }
}

/// The wall clock in seconds since the epoch, as the API's timestamps count.
pub fn seconds_since_epoch() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Logs a failure once, then the same failure at most every `PROGRESS_EVERY` with a count:
/// an unreachable server retried for half an hour must not flood the log.
#[derive(Default)]
struct Repeats {
    last: Option<(String, Instant)>,
    since_logged: u32,
}

impl Repeats {
    fn warn(&mut self, line: &str) {
        match &mut self.last {
            Some((last, at)) if last == line => {
                self.since_logged += 1;
                if at.elapsed() >= PROGRESS_EVERY {
                    warn!(
                        "{line} (again {} times in {} s)",
                        self.since_logged,
                        at.elapsed().as_secs()
                    );
                    *at = Instant::now();
                    self.since_logged = 0;
                }
            }
            _ => {
                warn!("{line}");
                self.last = Some((line.to_string(), Instant::now()));
                self.since_logged = 0;
            }
        }
    }
}

/// The Job the pods of one group belong to, when its selector names one (`job-name=<job>`, as
/// the Job controller labels its pods): the Role's rule for it joins the RBAC hint.
fn job_of(groups: &[Group]) -> Option<String> {
    let [group] = groups else {
        return None;
    };
    let selector = group.selector.to_string();
    selector.split(',').find_map(|term| {
        let (key, value) = term.trim().split_once('=')?;
        let key = key.trim_end_matches('=');
        matches!(key, "job-name" | "batch.kubernetes.io/job-name")
            .then(|| value.trim_start_matches('=').to_string())
    })
}

/// One plain list of each group's pods, no watch, every pod the selector matches (of any
/// attempt, replaced or not: `membership::current` picks the attempt's): for `doctor`.
pub async fn list_once(server: &ApiServer, groups: &[Group]) -> Result<Vec<Vec<PodView>>, Error> {
    let api: Api<Pod> = Api::namespaced(server.client.clone(), &server.namespace);
    let mut lists = Vec::new();
    for group in groups {
        let params = kube::api::ListParams::default().labels(&group.selector.to_string());
        match api.list(&params).await {
            Ok(list) => lists.push(
                list.items
                    .iter()
                    .map(|pod| ranked_view(pod, &group.ranking))
                    .collect(),
            ),
            Err(kube::Error::Api(status)) if matches!(status.code, 401 | 403) => {
                return Err(Error::Forbidden {
                    namespace: server.namespace.clone(),
                    message: format!("{} {}", status.code, status.message),
                    job: job_of(groups),
                })
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(Error::NotAnApiServer {
                    url: server.url.clone(),
                    answer: format!("404 {}", status.message),
                })
            }
            Err(e) => {
                return Err(Error::Unreachable {
                    url: server.url.clone(),
                    waited_s: 0,
                    last_error: e.to_string(),
                })
            }
        }
    }
    Ok(lists)
}

pub fn describe_group(kind: GroupKind) -> &'static str {
    group_name(kind)
}

/// Answers of the API server that retrying cannot change.
enum Refusal {
    /// 401/403: the Role is missing.
    Forbidden(String),
    /// 404 on the pods' path: not an API server (a proxy, a wrong URL).
    NotFound(String),
}

fn refusal(error: &watcher::Error) -> Option<Refusal> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s))
        | watcher::Error::WatchError(s) => s,
        _ => return None,
    };
    let message = format!("{} {}", status.code, status.message);
    match status.code {
        401 | 403 => Some(Refusal::Forbidden(message)),
        404 => Some(Refusal::NotFound(message)),
        _ => None,
    }
}

/// The coordinator's own pod, as a follower that cannot reach it asks after it: the pods that
/// match the job's `selector` and the coordinator's completion `index` (one, or none: a small
/// list whatever the job's size), said in one line.
pub async fn coordinators_pod(
    server: &ApiServer,
    selector: &str,
    index: u64,
) -> Result<String, String> {
    let selector = format!("{selector},{COMPLETION_INDEX}={index}");
    let pods: Api<Pod> = Api::namespaced(server.client.clone(), &server.namespace);
    let params = kube::api::ListParams::default().labels(&selector);
    let listed = pods.list(&params).await.map_err(|e| match e {
        kube::Error::Api(status) if matches!(status.code, 401 | 403) => format!(
            "the API refused to list the pods `{selector}` ({}): allow `list` on `pods` (`paddle-launcher manifest` grants it)",
            status.message
        ),
        e => format!("the pods `{selector}` cannot be listed: {e}"),
    })?;
    let views: Vec<PodView> = listed.items.iter().map(pod_view).collect();
    Ok(describe_coordinators_pod(&views, index))
}

/// "the coordinator's pod llm-0-x is Pending (Unschedulable: ...)": what its pods say.
fn describe_coordinators_pod(pods: &[PodView], index: u64) -> String {
    let Some(pod) = pods.iter().find(|p| p.is_live()).or(pods.first()) else {
        return format!("no pod of completion index {index} (the coordinator's) exists: its Job has not created it yet, or it was deleted");
    };
    let mut said = format!("the coordinator's pod {} is ", pod.name);
    match (pod.terminating, pod.phase, pod.ip) {
        (true, ..) => said.push_str("being deleted"),
        (false, PodPhase::Running, None) => said.push_str("Running without an IP yet"),
        (false, phase, _) => said.push_str(phase.as_str()),
    }
    if let Some(why) = pod.waiting_reason.as_ref().or(pod.ended.as_ref()) {
        said.push_str(&format!(" ({why})"));
    }
    said
}

/// What the readiness rule needs from a pod of an Indexed Job (or of none); tolerant of any
/// missing field.
pub fn pod_view(pod: &Pod) -> PodView {
    ranked_view(pod, &Ranking::default())
}

/// A label or annotation of the pod (annotations first: where the systems write indexes).
fn mark<'a>(pod: &'a Pod, key: &str) -> Option<&'a String> {
    let meta = &pod.metadata;
    let annotations = meta.annotations.as_ref().and_then(|a| a.get(key));
    annotations.or_else(|| meta.labels.as_ref().and_then(|l| l.get(key)))
}

/// The pod's view, with its index and attempt read where `ranking` says.
pub fn ranked_view(pod: &Pod, ranking: &Ranking) -> PodView {
    let meta = &pod.metadata;
    let status = pod.status.as_ref();
    let number = |key: &str| mark(pod, key).and_then(|v| v.trim().parse::<u64>().ok());
    PodView {
        name: meta.name.clone().unwrap_or_default(),
        ip: status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok()),
        phase: status
            .and_then(|s| s.phase.as_deref())
            .map_or(PodPhase::Pending, PodPhase::from),
        terminating: meta.deletion_timestamp.is_some(),
        index: ranking.index.iter().map(|key| number(key)).collect(),
        attempt: ranking.attempt.and_then(number),
        created: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        waiting_reason: waiting_reason(pod),
        gates: gates(pod),
        ended: container_ended(pod),
        grace_period: pod
            .spec
            .as_ref()
            .and_then(|spec| spec.termination_grace_period_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            // As --pod-grace-period allows: a week.
            .map(|seconds| seconds.min(7 * 24 * 3600)),
        stops_by: meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        deletion_grace: meta
            .deletion_grace_period_seconds
            .and_then(|g| u64::try_from(g).ok()),
        not_ready: not_ready(pod),
        left_out: false,
        node: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
    }
}

/// The pod's Ready condition is there and not True. A pod without one (none reported yet, or a
/// stand-in API's) is judged by its phase alone.
fn not_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|ready| ready.status != "True")
}

/// How the pod's failed container ended, as the kubelet recorded it: its status, the kernel's
/// OOMKilled, and its termination message (a launcher's names the job's first cause), so that a
/// peer's loss says why without a `kubectl describe`.
fn container_ended(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let ended = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| Some((c, c.state.as_ref()?.terminated.as_ref()?)))
        .find(|(_, t)| t.exit_code != 0 || t.reason.as_deref() == Some("OOMKilled"));
    let (container, terminated) = ended?;
    let reason = match terminated.reason.as_deref() {
        Some("OOMKilled") => " (OOMKilled: the kernel's out-of-memory killer)".to_string(),
        Some(r) if !r.is_empty() && r != "Error" => format!(" ({r})"),
        _ => String::new(),
    };
    let message = terminated
        .message
        .as_deref()
        .and_then(|m| m.lines().find(|line| !line.trim().is_empty()))
        .map(|line| line.trim().trim_start_matches(JOB_STOPPED))
        .map_or(String::new(), |line| {
            format!(": {}", line.chars().take(MAX_MESSAGE).collect::<String>())
        });
    Some(format!(
        "its container {} ended with status {}{reason}{message}",
        container.name, terminated.exit_code
    ))
}

/// How much of a peer's termination message its loss repeats.
const MAX_MESSAGE: usize = 300;

/// The scheduling gates of a pod that is not scheduled yet.
fn gates(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.scheduling_gates.as_ref())
        .map(|gates| gates.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default()
}

/// The most telling reason a pod is not Running: the scheduler's verdict, then a waiting
/// (init) container, then the pod's own reason (Evicted, ...).
fn waiting_reason(pod: &Pod) -> Option<String> {
    // A gated pod waits for a queue (Kueue), not for the scheduler: say which gate.
    let gates = gates(pod);
    if !gates.is_empty() {
        return Some(format!("waiting for admission by {}", gates.join(", ")));
    }
    let status = pod.status.as_ref()?;
    let with_message = |reason: &str, message: Option<&String>| match message {
        Some(m) if !m.is_empty() => format!("{reason}: {m}"),
        _ => reason.to_string(),
    };
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.is_some());
    if let Some(c) = unscheduled {
        return Some(with_message(c.reason.as_deref()?, c.message.as_ref()));
    }
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in containers {
        if let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            if let Some(reason) = &waiting.reason {
                return Some(with_message(reason, waiting.message.as_ref()));
            }
        }
    }
    status
        .reason
        .as_deref()
        .map(|r| with_message(r, status.message.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    /// A failed peer's loss says how its container ended, as the kubelet recorded it: the
    /// kernel's OOMKilled, or the status and the first line of its launcher's termination
    /// message (the job's first cause, without its own "job stopped: ").
    #[test]
    fn a_failed_pod_says_how_its_container_ended() {
        let failed = |terminated: serde_json::Value| {
            pod_view(&pod(serde_json::json!({
                "metadata": {"name": "j-2"},
                "status": {"phase": "Failed", "podIP": "10.0.0.3", "containerStatuses": [
                    {"name": "sidecar", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "launcher", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": terminated}}
                ]}
            })))
        };
        let oom = failed(serde_json::json!({"exitCode": 137, "reason": "OOMKilled"}));
        assert_eq!(
            oom.ended.as_deref(),
            Some("its container launcher ended with status 137 (OOMKilled: the kernel's out-of-memory killer)")
        );
        let said = failed(serde_json::json!({
            "exitCode": 3, "reason": "Error",
            "message": "job stopped: pod j-2 (trainer id 2 of 3): trainer exited with status 3\nmore"
        }));
        assert_eq!(
            said.ended.as_deref(),
            Some("its container launcher ended with status 3: pod j-2 (trainer id 2 of 3): trainer exited with status 3")
        );
        let member = Member {
            name: "j-2".into(),
            ip: "10.0.0.3".parse().unwrap(),
            rank: 2,
        };
        assert_eq!(
            lost(&member, Some(&oom), false, true).unwrap(),
            "peer pod j-2 (rank 2, 10.0.0.3) has Failed: its container launcher ended with status 137 (OOMKilled: the kernel's out-of-memory killer)"
        );
        let running = pod_view(&pod(serde_json::json!({
            "metadata": {"name": "j-2"}, "status": {"phase": "Running", "podIP": "10.0.0.3"}
        })));
        assert_eq!(running.ended, None);
    }

    /// Kueue holds a pod with its gate: the gate is the reason, not the scheduler's
    /// "SchedulingGated" condition.
    #[test]
    fn a_gated_pod_waits_for_admission_by_its_gate() {
        let v = pod_view(&pod(serde_json::json!({
            "metadata": {"name": "q"},
            "spec": {"containers": [], "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}
        })));
        assert_eq!(
            v.waiting_reason.as_deref(),
            Some("waiting for admission by kueue.x-k8s.io/admission")
        );
        assert!(all_gated(&[vec![v.clone()]]));
        let mut running = v;
        running.gates.clear();
        assert!(!all_gated(&[vec![running]]));
        assert!(!all_gated(&[vec![]]), "a job without pods is not queued");
    }

    #[test]
    fn unschedulable_pod_reports_the_schedulers_message() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "j-0"},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu."}]}
        }));
        let v = pod_view(&p);
        assert_eq!(v.phase, PodPhase::Pending);
        assert_eq!(
            v.waiting_reason.as_deref(),
            Some("Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.")
        );
    }

    #[test]
    fn waiting_container_reason_and_indexed_annotation() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "j-1", "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {COMPLETION_INDEX: "1"}},
            "status": {"phase": "Pending", "podIP": "10.0.0.5", "containerStatuses": [{
                "name": "trainer", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}
        }));
        let v = pod_view(&p);
        assert_eq!(
            v.waiting_reason.as_deref(),
            Some("ImagePullBackOff: Back-off pulling image")
        );
        assert_eq!(v.index, Some(vec![1]));
        assert!(v.terminating);
        assert_eq!(v.ip, Some("10.0.0.5".parse().unwrap()));
    }

    #[test]
    fn a_pod_without_status_is_pending() {
        let v = pod_view(&pod(serde_json::json!({"metadata": {"name": "x"}})));
        assert_eq!(
            (v.phase, v.ip, v.waiting_reason),
            (PodPhase::Pending, None, None)
        );
    }

    /// A pod of a node whose kubelet stopped reporting: still Running, with its IP, but the
    /// node lifecycle controller set its Ready condition False (`MarkPodsNotReady` in
    /// pkg/controller/util/node, after --node-monitor-grace-period): no member of an elastic
    /// job's next epoch (a job of every pod waits for it either way). A Running pod without
    /// the condition (a stand-in API's) is judged by its phase.
    #[test]
    fn a_running_pod_that_is_not_ready_is_left_out_of_an_elastic_job() {
        let view = |ready: Option<&str>| {
            let conditions: Vec<_> = ready
                .map(|s| serde_json::json!({"type": "Ready", "status": s}))
                .into_iter()
                .collect();
            pod_view(&pod(serde_json::json!({
                "metadata": {"name": "x"},
                "status": {"phase": "Running", "podIP": "10.0.0.5", "conditions": conditions}
            })))
        };
        let elastic = |ready: Option<&str>| {
            let mut pods = vec![vec![view(ready), running("other", "10.0.0.6")]];
            let none = Default::default();
            crate::membership::leave_out(&mut pods, &none, &none, 1, true);
            pods[0][0].clone()
        };
        assert!(!elastic(Some("False")).is_ready());
        assert!(!elastic(Some("Unknown")).is_ready());
        let reason = elastic(Some("False")).waiting_reason.unwrap_or_default();
        assert!(reason.starts_with("not Ready"), "{reason}");
        assert!(elastic(Some("True")).is_ready());
        assert!(elastic(None).is_ready());
        // A job of every pod: the phase alone (a completed sidecar leaves a pod not Ready).
        assert!(view(Some("False")).is_ready());
    }

    /// What a follower says of its coordinator's pod: none yet, Pending and why, Running
    /// without an address, being deleted.
    #[test]
    fn the_coordinators_pod_is_described_in_one_line() {
        assert!(describe_coordinators_pod(&[], 0).starts_with("no pod of completion index 0"));
        let pending = PodView {
            waiting_reason: Some("Unschedulable: 0/2 nodes are available".into()),
            ..crate::membership::testing::pod("j-0-abc", None, "Pending")
        };
        assert_eq!(
            describe_coordinators_pod(std::slice::from_ref(&pending), 0),
            "the coordinator's pod j-0-abc is Pending (Unschedulable: 0/2 nodes are available)"
        );
        let no_ip = crate::membership::testing::pod("j-0-abc", None, "Running");
        assert_eq!(
            describe_coordinators_pod(&[no_ip], 0),
            "the coordinator's pod j-0-abc is Running without an IP yet"
        );
        let going = PodView {
            terminating: true,
            ..crate::membership::testing::pod("j-0-old", Some("10.0.0.1"), "Running")
        };
        // The live one is said before one that goes away.
        assert_eq!(
            describe_coordinators_pod(&[going.clone(), pending], 0),
            "the coordinator's pod j-0-abc is Pending (Unschedulable: 0/2 nodes are available)"
        );
        assert_eq!(
            describe_coordinators_pod(&[going], 0),
            "the coordinator's pod j-0-old is being deleted"
        );
    }

    fn running(name: &str, ip: &str) -> PodView {
        pod_view(&pod(serde_json::json!({
            "metadata": {"name": name},
            "status": {"phase": "Running", "podIP": ip}
        })))
    }

    /// Split layout: group 0 (pservers) is relisting after a 410 Gone; an event on group 1 must
    /// not make the half-relisted group 0 look complete.
    #[test]
    fn no_group_is_judged_while_another_is_mid_relist() {
        let group = |kind, selector: &str| Group {
            kind,
            selector: crate::selector::LabelSelector::parse(selector).unwrap(),
            expected: 1,
            ranking: Ranking::default(),
        };
        let groups = [
            group(GroupKind::Pservers, "role=ps"),
            group(GroupKind::Trainers, "role=tr"),
        ];
        let mut views = GroupViews::new(&groups);
        for (group, name) in [(0, "ps-0"), (1, "tr-0")] {
            assert!(!views.apply(group, Event::Init));
            assert!(!views.apply(group, Event::InitApply(running(name, "10.0.0.1"))));
            views.apply(group, Event::InitDone);
        }
        assert!(views.apply(1, Event::Apply(running("tr-0", "10.0.0.1"))));
        assert!(!views.apply(0, Event::Init));
        assert!(!views.apply(0, Event::InitApply(running("ps-1", "10.0.0.2"))));
        assert!(
            !views.apply(1, Event::Apply(running("tr-0", "10.0.0.1"))),
            "judged while the pservers were mid-relist"
        );
        assert!(views.apply(0, Event::InitDone));
        let names: Vec<String> = views.group(0).pods().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["ps-1"], "the relist replaces the set");
    }
}
