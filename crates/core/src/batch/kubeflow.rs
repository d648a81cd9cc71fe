//! Kubeflow's training operator (training.kubeflow.org): PaddleJob's labels and environment
//! (training-operator pkg/apis/kubeflow.org/v1/common_types.go).

use std::collections::BTreeMap;

use super::*;

pub const KUBEFLOW_JOB_NAME: &str = "training.kubeflow.org/job-name";
pub const KUBEFLOW_REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
pub const KUBEFLOW_REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";

/// Kubeflow's PaddleJob: labels name the job and the replica type. Collective: the workers,
/// PADDLE_NNODES of them (the operator's count of the job's pods, a Master replica included:
/// give CONF_PADDLE_GRADIENT_NUM when there is one). With pservers (the operator sets
/// PADDLE_SERVER_NUM on Master pods, PADDLE_TRAINER_NUM on Worker pods, each "1": one per pod,
/// not the job's totals) the layout is Master = pservers, Worker = trainers, and the counts are
/// the user's (PSERVERS, TRAINERS).
pub fn from_labels(
    own: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Result<Option<Detected>, ConfigError> {
    let Some(job_name) = own.get(KUBEFLOW_JOB_NAME) else {
        return Ok(None);
    };
    let own_type = own
        .get(KUBEFLOW_REPLICA_TYPE)
        .filter(|t| !t.is_empty())
        .cloned()
        .unwrap_or_else(|| "worker".to_string());
    let task = |kind: &str, pods: Option<u32>| Task {
        name: kind.to_string(),
        selector: format!("{KUBEFLOW_JOB_NAME}={job_name},{KUBEFLOW_REPLICA_TYPE}={kind}"),
        pods,
    };
    let with_servers =
        env.contains_key("PADDLE_SERVER_NUM") || env.contains_key("PADDLE_TRAINER_NUM");
    let layout = if with_servers {
        Layout::Split {
            pservers: task("master", None),
            trainers: task("worker", None),
            own_is_pserver: own_type == "master",
        }
    } else {
        let pods = env
            .get("PADDLE_NNODES")
            .map(|n| count("PADDLE_NNODES", n))
            .transpose()?;
        Layout::Colocated(task(&own_type, pods))
    };
    Ok(Some(Detected {
        system: System::Kubeflow,
        job_name: job_name.clone(),
        layout,
        ranking: Ranking::by(&[KUBEFLOW_REPLICA_INDEX], None),
        coordinator: None,
        sources: vec![format!(
            "Kubeflow PaddleJob {job_name}, replica type {own_type} (labels {KUBEFLOW_JOB_NAME}, \
             {KUBEFLOW_REPLICA_TYPE}; the count from PADDLE_NNODES, none with pservers); \
             ranks from {KUBEFLOW_REPLICA_INDEX}"
        )],
    }))
}
