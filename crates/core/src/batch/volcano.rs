//! Volcano (batch.volcano.sh): the environment its plugins give a pod (`VC_*`, the svc
//! plugin's host files) and the labels it puts on it
//! (volcano-sh/apis pkg/apis/batch/v1alpha1/labels.go and the env/svc job plugins).

use std::collections::BTreeMap;

use super::*;

pub const VOLCANO_JOB_NAME: &str = "volcano.sh/job-name";
pub const VOLCANO_TASK: &str = "volcano.sh/task-spec";
pub const VOLCANO_TASK_INDEX: &str = "volcano.sh/task-index";
pub const VOLCANO_JOB_VERSION: &str = "volcano.sh/job-version";

/// Volcano with its `svc` plugin: `VC_<TASK>_HOSTS` lists every task's pods as
/// `<job>-<task>-<i>.<job>`, `VC_<TASK>_NUM` their number; the env plugin adds VC_TASK_INDEX.
pub fn from_env(env: &BTreeMap<String, String>) -> Result<Option<Detected>, ConfigError> {
    if !in_volcano(env) {
        return Ok(None);
    }
    let mut job = None;
    let mut tasks = Vec::new();
    for (name, hosts) in env {
        let Some(key) = name
            .strip_prefix("VC_")
            .and_then(|n| n.strip_suffix("_HOSTS"))
        else {
            continue;
        };
        // The first host names the job (its subdomain) and the task (between job and index).
        let Some(first) = hosts.split(',').next().filter(|h| !h.is_empty()) else {
            continue;
        };
        let bad = || unexpected(name, hosts, "<job>-<task>-<index>.<job>, comma-separated");
        let (host, job_name) = first.split_once('.').ok_or_else(bad)?;
        let job_name = job_name.split('.').next().unwrap_or(job_name);
        let task = host
            .strip_prefix(job_name)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.rsplit_once('-'))
            .map(|(task, _)| task.to_string())
            .ok_or_else(bad)?;
        let num_name = format!("VC_{key}_NUM");
        let pods = match env.get(&num_name) {
            Some(n) => count(&num_name, n)?,
            None => hosts.split(',').count() as u32,
        };
        job = Some(job_name.to_string());
        tasks.push(Task {
            selector: format!("{VOLCANO_JOB_NAME}={job_name},{VOLCANO_TASK}={task}"),
            name: task,
            pods: Some(pods),
        });
    }
    let Some(job_name) = job else {
        // No svc plugin: the names come from the pod's labels.
        return Ok(None);
    };
    // The pod's name is `<job>-<task>-<index>`, and so is its hostname (the svc plugin's),
    // unless it shares the node's network.
    let name = env
        .get("POD_NAME")
        .or(env.get("HOSTNAME"))
        .cloned()
        .unwrap_or_default();
    let own = tasks
        .iter()
        .filter(|t| name.starts_with(&format!("{job_name}-{}-", t.name)))
        .max_by_key(|t| t.name.len())
        .map(|t| t.name.clone());
    let layout = layout(tasks, own.as_deref(), None, System::Volcano)?;
    let coordinator = match &layout {
        Layout::Colocated(task) => Some(format!("{job_name}-{}-0.{job_name}", task.name)),
        Layout::Split { .. } => None,
    };
    Ok(Some(Detected {
        system: System::Volcano,
        sources: vec![format!(
            "Volcano job {job_name} (VC_<TASK>_HOSTS and VC_<TASK>_NUM of its svc plugin, HOSTNAME); \
             ranks from {VOLCANO_TASK_INDEX}; pods of an earlier {VOLCANO_JOB_VERSION} ignored"
        )],
        job_name,
        layout,
        ranking: ranking(),
        coordinator,
    }))
}

/// Volcano without the svc plugin: the pod's labels name its job and task; the count is the
/// user's (CONF_PADDLE_GRADIENT_NUM).
pub fn from_labels(
    own: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> Option<Detected> {
    let job_name = own.get(VOLCANO_JOB_NAME)?;
    let task = own.get(VOLCANO_TASK)?;
    let key = format!("VC_{}_NUM", task.to_uppercase().replace('-', "_"));
    Some(Detected {
        system: System::Volcano,
        job_name: job_name.clone(),
        layout: Layout::Colocated(Task {
            name: task.clone(),
            selector: format!("{VOLCANO_JOB_NAME}={job_name},{VOLCANO_TASK}={task}"),
            pods: env.get(&key).and_then(|n| n.parse().ok()),
        }),
        ranking: ranking(),
        coordinator: None,
        sources: vec![format!(
            "Volcano job {job_name} task {task} (labels {VOLCANO_JOB_NAME}, {VOLCANO_TASK})"
        )],
    })
}

fn ranking() -> Ranking {
    Ranking::by(&[VOLCANO_TASK_INDEX], Some(VOLCANO_JOB_VERSION))
}

/// Whether the pod is a Volcano job's: its env plugin sets the task index in every container.
pub fn in_volcano(env: &BTreeMap<String, String>) -> bool {
    env.contains_key("VC_TASK_INDEX") || env.contains_key("VK_TASK_INDEX")
}

/// Where Volcano's svc plugin mounts its ConfigMap `<job>-svc`: one `<task>.host` file per
/// task, a host per line.
pub const VOLCANO_HOSTS_DIR: &str = "/etc/volcano";

/// The svc plugin's host files, (file name, contents) each, as the variables it also sets
/// (`VC_<TASK>_HOSTS`, `VC_<TASK>_NUM`): for a container whose environment lacks them.
pub fn host_files(files: &[(String, String)]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (file, text) in files {
        let Some(task) = file.strip_suffix(".host").filter(|t| !t.is_empty()) else {
            continue;
        };
        let hosts: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect();
        if hosts.is_empty() {
            continue;
        }
        let key = task.to_uppercase().replace('-', "_");
        env.insert(format!("VC_{key}_HOSTS"), hosts.join(","));
        env.insert(format!("VC_{key}_NUM"), hosts.len().to_string());
    }
    env
}
