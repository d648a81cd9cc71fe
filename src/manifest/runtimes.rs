//! The batch systems' objects `manifest` writes around the pod template: JobSet, Trainer v2's
//! TrainingRuntime and TrainJob, Volcano's Job, each with its recovery policy.

use serde_json::{json, Value};

use crate::cli::ManifestArgs;

use super::pod::{failed_pod_delay, job};
use super::{task_name, PodKind};

/// Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a ClusterTrainingRuntime for Paddle,
/// which Trainer has none of (its runtimes are torch, deepspeed, jax, mlx, xgboost), and an
/// example TrainJob. Trainer renders a TrainJob as a JobSet named after it whose `node`
/// replicated job's container `node` it may override (image, command, args, env, resources);
/// the launcher reads the job's name and size from that JobSet, as under `--runtime jobset`,
/// and plain `numNodes` is the only ML policy it needs.
pub(super) fn training_runtime(
    request: &ManifestArgs,
    kinds: &[PodKind],
    account: &str,
) -> Vec<Value> {
    let kind = &kinds[0];
    let mut job = job(request, TRAINER_NODE, kind, account);
    job["spec"]["template"]["spec"]["containers"][0]["name"] = json!(TRAINER_NODE);
    let rules = job["spec"]
        .get_mut("podFailurePolicy")
        .and_then(|policy| policy.get_mut("rules"))
        .and_then(Value::as_array_mut);
    for rule in rules.into_iter().flatten() {
        if rule.get("onExitCodes").is_some() {
            rule["onExitCodes"]["containerName"] = json!(TRAINER_NODE);
        }
    }
    let mut runtime = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": request.job_name, "labels": {"trainer.kubeflow.org/framework": "paddle"}},
        "spec": {
            "mlPolicy": {"numNodes": kind.count},
            "template": {"spec": {"replicatedJobs": [{
                "name": TRAINER_NODE,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": job["spec"],
                },
            }]}},
        },
    });
    if let Some(ttl) = request.ttl_seconds_after_finished {
        // The JobSet each TrainJob is rendered as.
        runtime["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
    }
    recovering_jobset(request, &mut runtime["spec"]["template"]["spec"]);
    let mut train_job = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": format!("{}-example", request.job_name), "namespace": request.namespace},
        "spec": {
            "runtimeRef": {"name": request.job_name, "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"numNodes": kind.count},
        },
    });
    if let Some(queue) = &request.queue {
        // Kueue admits a TrainJob by unsuspending it.
        train_job["metadata"]["labels"] = json!({KUEUE_QUEUE: queue});
        train_job["spec"]["suspend"] = json!(true);
    }
    vec![runtime, train_job]
}

/// The name Trainer v2 gives the training step's replicated job and its container
/// (pkg/constants: `Node`).
pub(super) const TRAINER_NODE: &str = "node";

/// Kueue's queue label (kueue.x-k8s.io/v1beta1 constants).
pub(super) const KUEUE_QUEUE: &str = "kueue.x-k8s.io/queue-name";

/// One JobSet: a replicated job of one Job per kind of pod.
pub(super) fn jobset(request: &ManifestArgs, kinds: &[PodKind], account: &str) -> Value {
    let replicated: Vec<Value> = kinds
        .iter()
        .map(|kind| {
            let job = job(request, task_name(kind), kind, account);
            json!({"name": task_name(kind), "replicas": 1, "template": {"spec": job["spec"]}})
        })
        .collect();
    let mut jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": request.job_name, "namespace": request.namespace},
        "spec": {"replicatedJobs": replicated},
    });
    if let Some(ttl) = request.ttl_seconds_after_finished {
        jobset["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
    }
    recovering_jobset(request, &mut jobset["spec"]);
    if let Some(queue) = &request.queue {
        jobset["metadata"]["labels"] = json!({KUEUE_QUEUE: queue});
        jobset["spec"]["suspend"] = json!(true);
    }
    jobset
}

/// One Volcano Job: a task per kind of pod, gang-scheduled, with the env plugin (task indexes)
/// and the svc plugin (each task's hosts and count) the launcher reads.
pub(super) fn volcano_job(request: &ManifestArgs, kinds: &[PodKind], account: &str) -> Value {
    let tasks: Vec<Value> = kinds
        .iter()
        .map(|kind| {
            let job = job(request, task_name(kind), kind, account);
            json!({"name": task_name(kind), "replicas": kind.count, "template": job["spec"]["template"]})
        })
        .collect();
    let pods: u32 = kinds.iter().map(|k| k.count).sum();
    let mut spec = json!({
        "schedulerName": "volcano",
        "minAvailable": pods,
        "maxRetry": 3,
        "plugins": {"env": [], "svc": []},
        "tasks": tasks,
    });
    recovering_volcano_job(request, &mut spec);
    if let Some(queue) = &request.queue {
        spec["queue"] = json!(queue);
    }
    if let Some(ttl) = request.ttl_seconds_after_finished {
        spec["ttlSecondsAfterFinished"] = json!(ttl);
    }
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": request.job_name, "namespace": request.namespace},
        "spec": spec,
    })
}

/// A JobSet whose launchers restart in place: its pods reachable by their DNS names (the
/// coordinator's is one) before they are ready, and no restart of the whole JobSet behind the
/// launchers' back. A lost pod is replaced by its child Job (its `backoffLimit` is the budget,
/// its `podFailurePolicy` fails it at once when a launcher exits non-zero, the budget spent);
/// a child Job that fails fails the JobSet (`failurePolicy.maxRestarts: 0`), and with it
/// every pod: the end the launchers already agreed on.
pub(super) fn recovering_jobset(request: &ManifestArgs, spec: &mut Value) {
    if request.max_restarts == 0 {
        return;
    }
    spec["network"] = json!({"enableDNSHostnames": true, "publishNotReadyAddresses": true});
    spec["failurePolicy"] = json!({"maxRestarts": 0});
    // A pod's DNS name holds its completion index.
    for job in spec["replicatedJobs"].as_array_mut().into_iter().flatten() {
        job["template"]["spec"]["completionMode"] = json!("Indexed");
    }
}

/// A Volcano Job whose launchers restart in place (Volcano v1.11 and later; read in its
/// job controller, docs/manifests-and-rbac.md). A pod deleted (preempted, evicted, drained, its
/// node gone) is recreated alone under its own name by the controller's default sync, so the
/// job has no policy for `PodEvicted`, and never `RestartJob` or `RestartPod` (which also
/// deletes the svc plugin's Service). A pod that fails is not recreated: unless a pod of its
/// name runs again within the launchers' own wait for a replacement (a preempted pod is
/// marked Failed before it is deleted), the job is terminated. The agreed end, every launcher
/// exiting non-zero with the budget spent, fails the job: all its pods have ended.
/// The coordinator's name needs the headless Service to publish pods before they are ready.
pub(super) fn recovering_volcano_job(request: &ManifestArgs, spec: &mut Value) {
    if request.max_restarts == 0 {
        return;
    }
    spec["plugins"]["svc"] = json!(["--publish-not-ready-addresses"]);
    // Pods that wait for their peers for ever: a failed pod ends nothing either.
    if let Some(delay) = failed_pod_delay(request) {
        spec["policies"] = json!([{"event": "PodFailed", "action": "TerminateJob", "timeout": format!("{delay}s")}]);
    }
}
