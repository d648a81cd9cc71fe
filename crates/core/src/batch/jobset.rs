//! JobSet (jobset.sigs.k8s.io, api/jobset/v1alpha2/jobset_types.go): the labels it puts on
//! its pods, and how its replicated jobs become this job's layout.

use std::collections::BTreeMap;

use super::*;

pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
pub const JOBSET_REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";
pub const JOBSET_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
pub const JOBSET_RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";
pub const JOBSET_COORDINATOR: &str = "jobset.sigs.k8s.io/coordinator";

/// JobSet: the labels name the JobSet and this pod's replicated job; the JobSet object says
/// how many pods each replicated job has (replicas x parallelism).
pub fn from_labels(
    name: &str,
    own: &BTreeMap<String, String>,
    jobs: Option<&[(String, u32)]>,
) -> Result<Detected, ConfigError> {
    let own_job = own.get(JOBSET_REPLICATED_JOB).cloned().unwrap_or_default();
    let tasks: Vec<Task> = jobs
        .unwrap_or_default()
        .iter()
        .map(|(job, pods)| Task {
            name: job.clone(),
            selector: format!("{JOBSET_NAME}={name},{JOBSET_REPLICATED_JOB}={job}"),
            pods: Some(*pods),
        })
        .collect();
    // Several replicated jobs (a driver and workers, two worker pools): the whole JobSet is the
    // job, ranked by the global job index that numbers all of its Jobs.
    let whole = Task {
        name: name.to_string(),
        selector: format!("{JOBSET_NAME}={name}"),
        pods: Some(jobs.unwrap_or_default().iter().map(|(_, pods)| pods).sum()),
    };
    let layout = if jobs.is_none() {
        // Not read (the counts are the user's): the whole JobSet, counted by the user.
        Layout::Colocated(Task {
            pods: None,
            ..whole
        })
    } else {
        layout(tasks, Some(&own_job), Some(whole), System::JobSet)?
    };
    // The coordinator annotation names one pod of the whole JobSet: a coordinator of all.
    let coordinator = match &layout {
        Layout::Colocated(_) => own.get(JOBSET_COORDINATOR).cloned(),
        Layout::Split { .. } => None,
    };
    let mut sources = vec![format!(
        "JobSet {name}, replicated job {own_job} (labels {JOBSET_NAME}, {JOBSET_REPLICATED_JOB}; \
         pod counts from the JobSet's replicas x parallelism); ranks from {JOBSET_GLOBAL_INDEX} \
         then {COMPLETION_INDEX}; pods of an earlier {JOBSET_RESTART_ATTEMPT} ignored"
    )];
    if let Some(c) = &coordinator {
        sources.push(format!("coordinator {c} ({JOBSET_COORDINATOR})"));
    }
    Ok(Detected {
        system: System::JobSet,
        job_name: name.to_string(),
        layout,
        ranking: Ranking::by(
            &[JOBSET_GLOBAL_INDEX, COMPLETION_INDEX],
            Some(JOBSET_RESTART_ATTEMPT),
        ),
        coordinator,
        sources,
    })
}

/// The pods of each replicated job of a JobSet object (`spec.replicatedJobs`).
pub fn jobset_pods(jobset: &serde_json::Value) -> Vec<(String, u32)> {
    let jobs = jobset["spec"]["replicatedJobs"].as_array();
    jobs.into_iter()
        .flatten()
        .filter_map(|job| {
            let name = job["name"].as_str()?.to_string();
            let replicas = job["replicas"].as_u64().unwrap_or(1);
            let spec = &job["template"]["spec"];
            let parallelism = spec["parallelism"].as_u64().unwrap_or(1);
            // Fewer completions than parallelism: only that many pods ever run at once.
            let at_once = parallelism.min(spec["completions"].as_u64().unwrap_or(parallelism));
            Some((name, (replicas * at_once).min(u32::MAX as u64) as u32))
        })
        .collect()
}
