//! The pod's Job (or JobSet) as the launcher reads and writes it: the restart count the
//! coordinator records on it, its parent JobSet, and this pod's own labels and annotations.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::Api;
use tokio::time::{sleep, Instant};
use tracing::info;

use crate::error::Error;
use crate::ledger::Recorded;

use super::{ApiServer, OWN_POD_WAIT};

/// This pod's labels and annotations in one map (annotations win): found by POD_NAME, else by
/// its IP (a field selector), waiting up to a minute for the kubelet to publish the IP.
pub async fn own_marks(
    server: &ApiServer,
    name: Option<&str>,
    ip: IpAddr,
) -> Result<BTreeMap<String, String>, Error> {
    let api: Api<Pod> = Api::namespaced(server.client.clone(), &server.namespace);
    let refused = |e: kube::Error| match e {
        kube::Error::Api(status) if matches!(status.code, 401 | 403) => Error::Forbidden {
            namespace: server.namespace.clone(),
            message: status.message,
            job: None,
        },
        e => Error::BatchSystem {
            what: format!("this pod's object from {}: {e}", server.url),
        },
    };
    let started = Instant::now();
    let pod = loop {
        let found = match name {
            Some(name) => api
                .get_opt(name)
                .await
                .map_err(refused)?
                .into_iter()
                .collect(),
            None => {
                // A finished pod keeps its IP, which a new pod may have been given since.
                let fields =
                    format!("status.podIP={ip},status.phase!=Succeeded,status.phase!=Failed");
                let params = kube::api::ListParams::default().fields(&fields);
                api.list(&params).await.map_err(refused)?.items
            }
        };
        let who = name.map_or(format!("with IP {ip}"), |n| format!("named {n}"));
        match &found[..] {
            [pod] => break pod.clone(),
            [] if started.elapsed() < OWN_POD_WAIT => {
                info!(
                    "batch system: no pod {who} in namespace {} yet; asking again",
                    server.namespace
                );
                sleep(Duration::from_secs(2)).await;
            }
            [] => {
                return Err(Error::BatchSystem {
                    what: format!(
                        "no pod {who} in namespace {} (set JOB_NAMESPACE, POD_NAME)",
                        server.namespace
                    ),
                })
            }
            several => {
                let names: Vec<String> = several
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                return Err(Error::BatchSystem {
                    what: format!("pods {} all have IP {ip} (hostNetwork): set POD_NAME from the downward API", names.join(", ")),
                });
            }
        }
    };
    let meta = pod.metadata;
    let mut marks = meta.labels.unwrap_or_default();
    marks.extend(meta.annotations.unwrap_or_default());
    Ok(marks)
}

/// The JobSet object `name`, for the size of each replicated job.
pub async fn jobset(server: &ApiServer, name: &str) -> Result<serde_json::Value, Error> {
    let resource = ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(server.client.clone(), &server.namespace, &resource);
    match api.get(name).await {
        Ok(object) => Ok(object.data),
        Err(kube::Error::Api(status)) if matches!(status.code, 401 | 403) => {
            Err(Error::Forbidden {
                namespace: server.namespace.clone(),
                message: format!(
                    "{} (the launcher reads its JobSet for the number of pods: grant `get` on jobsets.jobset.x-k8s.io, or set CONF_PADDLE_GRADIENT_NUM)",
                    status.message
                ),
                job: None,
            })
        }
        Err(e) => Err(Error::BatchSystem {
            what: format!("JobSet {name} in namespace {}: {e}", server.namespace),
        }),
    }
}

/// The annotations on the job's Job object in which the coordinator records the restart epoch
/// it started and the job's preemptions: a pod outlives no whole-Job restart (every pod lost and
/// created again by the Job controller, a Kueue suspension and resumption), the Job does.
pub const RESTART_COUNT_ANNOTATION: &str = "paddle-launcher.paddlepaddle.org/restart-count";

pub const PREEMPTIONS_ANNOTATION: &str = "paddle-launcher.paddlepaddle.org/preemptions";

/// Of the preemptions recorded, an elastic job's grows (free restarts that --max-preemptions
/// does not bound).
pub const GROWS_ANNOTATION: &str = "paddle-launcher.paddlepaddle.org/grows";

/// The largest restart count a Job's record is believed up to.
pub(super) const MAX_RECORDED: u32 = 1_000_000;

/// How many times a record is written over a Job that keeps changing.
pub(super) const WRITE_TRIES: u32 = 10;

/// The job's progress as its coordinator last summed it up (`job_view::JobView::summary`), kept
/// on the Job for `kubectl get job -o custom-columns=...` (docs/observability.md).
pub const PROGRESS_ANNOTATION: &str = "paddle-launcher.paddlepaddle.org/progress";

/// Keeps the job's progress summary on its Job: one merge patch of the annotation alone, no
/// read (a summary overwritten by a later one loses nothing).
pub async fn annotate_progress(server: &ApiServer, job: &str, summary: &str) -> Result<(), String> {
    annotate(server, job, PROGRESS_ANNOTATION, summary).await
}

/// One merge patch of the Job's annotation `key` alone, no read.
async fn annotate(server: &ApiServer, job: &str, key: &str, value: &str) -> Result<(), String> {
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    let params = kube::api::PatchParams::default();
    jobs(server)
        .patch(job, &params, &kube::api::Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| job_refusal(server, job, "patch", e))
}

/// What a named coordinator waits for while it gathers the job's pods, kept on its Job as
/// `<seconds since the epoch> <line>` (written at most every 10 s, and at least every 30 s while
/// it waits): its followers, which make no other API request and cannot reach it yet, read it
/// and say it (`waiting_on_job`), and so does `kubectl describe job`.
pub const WAITING_ANNOTATION: &str = "paddle-launcher.paddlepaddle.org/waiting";

/// The longest line kept in `WAITING_ANNOTATION`: a job of thousands of pods lists the first.
const WAITING_KEPT: usize = 2048;

/// Keeps what the coordinator waits for on its Job: one merge patch of the annotation alone.
pub async fn annotate_waiting(server: &ApiServer, job: &str, line: &str) -> Result<(), String> {
    let mut kept: String = line.chars().take(WAITING_KEPT).collect();
    if kept.len() < line.len() {
        kept.push_str(" ...");
    }
    let value = format!("{} {kept}", super::seconds_since_epoch());
    annotate(server, job, WAITING_ANNOTATION, &value).await
}

/// What the coordinator last said it waits for, kept on the Job `job`, and how many seconds
/// ago (by this node's clock); None when it says nothing.
pub async fn waiting_on_job(
    server: &ApiServer,
    job: &str,
) -> Result<Option<(u64, String)>, String> {
    let object = match jobs(server).get(job).await {
        Ok(object) => object,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
        Err(e) => return Err(job_refusal(server, job, "get", e)),
    };
    let annotations = object.metadata.annotations.unwrap_or_default();
    let Some((at, line)) = annotations
        .get(WAITING_ANNOTATION)
        .and_then(|value| value.split_once(' '))
    else {
        return Ok(None);
    };
    let Ok(at) = at.parse::<i64>() else {
        return Ok(None);
    };
    let now = super::seconds_since_epoch();
    let age = u64::try_from(now.saturating_sub(at)).unwrap_or(0);
    Ok(Some((age, line.to_string())))
}

/// What the Job `job` records of the restarts (`Recorded`), if anything; why not, when it
/// cannot be read.
pub async fn recorded_restarts(server: &ApiServer, job: &str) -> Result<Option<Recorded>, String> {
    Ok(job_record(server, job)
        .await?
        .and_then(|(_, recorded)| recorded))
}

/// The Job's resourceVersion and what it records, None when there is no such Job.
pub(super) async fn job_record(
    server: &ApiServer,
    job: &str,
) -> Result<Option<(Option<String>, Option<Recorded>)>, String> {
    let object = match jobs(server).get(job).await {
        Ok(object) => object,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
        Err(e) => return Err(job_refusal(server, job, "get", e)),
    };
    let annotations = object.metadata.annotations.unwrap_or_default();
    // Anyone who may edit the Job may write here: a count no job reaches is no count.
    let read = |key: &str| {
        let value = annotations.get(key)?.trim().parse::<u32>().ok();
        value.filter(|&v| v <= MAX_RECORDED)
    };
    let recorded = read(RESTART_COUNT_ANNOTATION).map(|epoch| {
        let preemptions = read(PREEMPTIONS_ANNOTATION)
            .unwrap_or(0)
            .min(epoch.saturating_add(1));
        let grows = read(GROWS_ANNOTATION).unwrap_or(0).min(preemptions);
        (epoch, preemptions, grows)
    });
    Ok(Some((object.metadata.resource_version, recorded)))
}

/// What went wrong reading (`get`) or writing (`patch`) the Job, in one line: a refusal names
/// the verb the Role lacks, as the API server's words alone do not say what to grant.
pub(super) fn job_refusal(server: &ApiServer, job: &str, verb: &str, e: kube::Error) -> String {
    match e {
        kube::Error::Api(status) if matches!(status.code, 401 | 403) => format!(
            "the API refused to {verb} Job {job} in namespace {} ({}): allow `get` and `patch` on \
             `jobs` named {job} in the launcher's Role (`paddle-launcher manifest` grants them)",
            server.namespace, status.message
        ),
        kube::Error::Api(status) => format!(
            "Job {job} in namespace {}: {} ({})",
            server.namespace, status.message, status.code
        ),
        e => format!("Job {job} in namespace {}: {e}", server.namespace),
    }
}

pub(super) fn jobs(server: &ApiServer) -> Api<k8s_openapi::api::batch::v1::Job> {
    Api::namespaced(server.client.clone(), &server.namespace)
}

/// Records on the Job `job` that restart epoch `epoch` has started, after `preemptions` (`grows`
/// of them): only forward (a record of a later epoch stands), and only over the version read
/// (a coordinator of an earlier attempt, whose write was slow, cannot write over a later one:
/// 409, read again).
pub async fn record_restarts(
    server: &ApiServer,
    job: &str,
    (epoch, preemptions, grows): Recorded,
) -> Result<(), String> {
    // What a record above MAX_RECORDED says is ignored when read: writing it would make the
    // next whole-Job restart count from 0.
    if epoch > MAX_RECORDED {
        return Err(format!(
            "restart epoch {epoch} is beyond the {MAX_RECORDED} a record on Job {job} is read up to: not recorded"
        ));
    }
    // At most one more than the epoch: the preemption that ended it.
    let preemptions = preemptions.min(epoch.saturating_add(1));
    let grows = grows.min(preemptions);
    // The Job's status changes under a write too (its controller, Kueue): a conflict is
    // likely while pods come and go, so it is read and tried again, a moment later.
    for attempt in 0..WRITE_TRIES {
        if attempt > 0 {
            sleep(Duration::from_millis(100)).await;
        }
        let Some((version, recorded)) = job_record(server, job).await? else {
            return Err(format!(
                "Job {job} in namespace {} not found",
                server.namespace
            ));
        };
        // Only forward: a later epoch, or this one with more preemptions known.
        if recorded.is_some_and(|recorded| recorded >= (epoch, preemptions, grows)) {
            return Ok(());
        }
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": version,
            "annotations": {
                RESTART_COUNT_ANNOTATION: epoch.to_string(),
                PREEMPTIONS_ANNOTATION: preemptions.to_string(),
                GROWS_ANNOTATION: grows.to_string(),
            }
        }});
        let params = kube::api::PatchParams::default();
        match jobs(server)
            .patch(job, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => return Err(job_refusal(server, job, "patch", e)),
        }
    }
    Err(format!(
        "Job {job} in namespace {}: changed under every write ({WRITE_TRIES} tries)",
        server.namespace
    ))
}
