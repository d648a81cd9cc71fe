//! The pod's own set-up before it looks for the others: its configuration as it runs it (the
//! batch system's names, devices, address, progress file), the input files, and the plan a
//! membership gives this pod (who it is, what it says about itself).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use tracing::{info, warn};

use crate::address::own_ip;
use crate::cli::JobArgs;
use crate::config::{Config, Discovery};
use crate::error::ConfigError;
use crate::error::Error;
use crate::membership::{Me, Membership};
use crate::plan::Plan;
use crate::protocol::InputFiles;
use crate::{peers, protocol};

use crate::{coordination, progress};

/// The first stage: the configuration as this pod runs it, complete and checked before
/// anything runs or waits, and never amended afterwards — the batch system's names read, the
/// pod's devices and processes settled, its address and network settings chosen, the
/// coordinator derived where the Job names it, the progress file made. What discovery later
/// finds (the pods, their namespace, this pod's own grace period) goes into the attempt and
/// its plan, not here.
pub(super) async fn configure(args: &JobArgs, plan_only: bool) -> Result<(Config, IpAddr), Error> {
    let interfaces = crate::address::host_interfaces();
    let mut config =
        crate::discover::configure(args, &interfaces, crate::address::hostname_ip).await?;
    let seen = crate::devices::seen();
    crate::devices::resolve(&mut config, &seen)?;
    if !config.topology.processes.found.is_empty() {
        info!("{}", config.topology.processes.found);
    }
    let defaulted = crate::config::present(&args.protocol).is_none();
    if let Some(line) = crate::devices::v1_on_gpus(config.topology.protocol, defaulted, &seen) {
        warn!("{line}");
    }
    let my_ip = own_ip(&config, &interfaces, crate::address::hostname_ip)?;
    config.ports.sockets = crate::address::sockets(&config, my_ip, &interfaces);
    if !plan_only {
        for setting in &config.ports.sockets {
            info!("{}", crate::address::said(setting));
        }
    }
    // Before any wait for the secret's file: an elastic job without a named coordinator is
    // refused at once.
    if config.control.is_on() {
        derive_coordinator(&mut config);
    }
    coordination::elastic_needs_a_named_coordinator(&config)?;
    // Only a pod with a trainer, with hang detection on, needs its progress file.
    let watches_hangs = config.timing.hang_timeout.is_some()
        && config.topology.role != crate::vocabulary::PodRole::Pserver;
    progress_file(&mut config.workspace, watches_hangs && !plan_only)?;
    log_dir(&mut config.workspace, !plan_only)?;
    let workspace = &config.workspace;
    if let (true, Some(shared)) = (watches_hangs, &workspace.job_path) {
        if lexically(&workspace.progress_file).starts_with(lexically(shared)) {
            warn!(
                "the progress file {} is under JOB_PATH, which every pod shares: one pod's progress would hide another's hang; give each pod its own ({})",
                workspace.progress_file.display(),
                crate::config::PROGRESS_FILE
            );
        }
    }
    Ok((config, my_ip))
}

/// The children's grace period when discovery read this pod's own (its spec's
/// terminationGracePeriodSeconds, read with the pods): it follows the pod's, unless
/// --grace-period said otherwise. Runtime state (the supervisor's, the attempt's), not the
/// configuration, which stays as built.
pub(super) fn children_grace_seen(config: &Config, pod_grace: Duration) -> Duration {
    let timing = &config.timing;
    if timing.pod_grace.is_some() {
        return timing.grace_period;
    }
    if let Some(given) = timing.grace_given.filter(|given| *given > pod_grace) {
        warn!(
            "{} is {} s, longer than this pod's terminationGracePeriodSeconds ({} s): the kubelet will kill the children before it ends",
            crate::config::GRACE_PERIOD,
            given.as_secs(),
            pod_grace.as_secs()
        );
        return timing.grace_period;
    }
    let channel = config.control.is_on();
    match crate::config::children_grace(timing.grace_given, Some(pod_grace), channel) {
        Ok(grace) => {
            if grace != timing.grace_period {
                info!(
                    "the children's grace period: {} s (this pod's terminationGracePeriodSeconds is {} s)",
                    grace.as_secs(),
                    pod_grace.as_secs()
                );
            }
            grace
        }
        Err(_) => timing.grace_period,
    }
}

/// `path` with its `.` dropped and each `..` taking the name before it, without looking at the
/// filesystem (the paths need not exist yet): `/mnt/job/./x/../progress` is under `/mnt/job`.
pub(super) fn lexically(path: &std::path::Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Now, to the second, as Kubernetes writes times ("2026-11-23T22:16:40Z").
pub(super) fn now_utc() -> String {
    format!("{:.0}", k8s_openapi::jiff::Timestamp::now())
}

/// The plan for what discovery found: this pod located among the members, ranked.
pub(super) fn plan_for(
    config: &Config,
    found: &peers::Found,
    my_ip: IpAddr,
    inputs: &InputFiles,
) -> Result<(Plan, Membership, Me), Error> {
    let membership = found.membership.clone();
    let epoch = config.for_epoch(membership.trainers.len());
    let me = locate_self(&epoch, &membership, my_ip)?;
    let stack_handler = config
        .timing
        .hang_timeout
        .map(|_| progress::stack_dump_dir(&config.workspace.progress_file));
    let mut plan = protocol::plan(&epoch, &membership, &me, inputs)
        .with_launcher_env(|name| std::env::var(name).ok(), stack_handler.as_deref())
        .for_restart(0);
    // The namespace the API found the pods in, when none was given.
    if found.namespace.is_some() {
        plan.namespace = found.namespace.clone();
    }
    info!("{} pod {}: {}", me.name, me.ip, ranks_line(&plan, config));
    Ok((plan, membership, me))
}

/// This pod in the membership, after the checks every plan needs (each listener on its own
/// address). `doctor` asks the same.
pub(crate) fn locate_self(
    config: &Config,
    membership: &Membership,
    my_ip: IpAddr,
) -> Result<Me, Error> {
    membership.check_listeners(config.topology.protocol)?;
    // Static and DNS members have made-up names: only a real pod list can be searched by name.
    let own_name = match config.topology.discovery {
        Discovery::Kubernetes { .. } => config.topology.pod_name.as_deref(),
        Discovery::Static { .. } | Discovery::Dns { .. } => None,
    };
    Ok(membership.locate(config, own_name, my_ip)?)
}

/// Without --coordinator, in an Indexed Job whose pods have a subdomain (a headless Service),
/// the coordinator is pod 0 by its DNS name: derived from this pod's hostname, its completion
/// index and /etc/hosts, so that only pod 0 uses the API without any setting. Only when the
/// Job is the whole job: JOB_NAME is its name and the default selector finds its pods.
pub(crate) fn derive_coordinator(config: &mut Config) {
    if !coordination::may_derive_from_indexed_job(config) {
        return;
    }
    let index = std::env::var("JOB_COMPLETION_INDEX").ok();
    let hostname = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let derived = crate::batch::indexed_job::coordinator(
        index.as_deref(),
        &hostname,
        &hosts,
        &config.topology.job_name,
        config.control.port,
    );
    if let Some((host, port)) = derived {
        info!("coordinator: {host}:{port}, pod 0 of this Indexed Job (JOB_COMPLETION_INDEX, hostname {hostname}, its subdomain in /etc/hosts)");
        config.control.coordinator = Some((host, port));
    }
}

/// "pod p-1 on node n7 (trainer id 1 of 3)": how this launcher names itself to the others, so
/// that the first failure's line on every pod says where it happened (the node from NODE_NAME,
/// which the downward API's spec.nodeName gives and `manifest` sets).
pub(super) fn who(pod: &str, plan: &Plan, config: &Config) -> String {
    format!("pod {pod}{} ({})", on_node(), ranks_line(plan, config))
}

/// " on node n7", from NODE_NAME; nothing without it.
pub(super) fn on_node() -> String {
    node_name().map_or(String::new(), |n| format!(" on node {n}"))
}

/// This pod's node (NODE_NAME), when the downward API gives it.
pub(super) fn node_name() -> Option<String> {
    std::env::var(NODE_NAME).ok().filter(|n| !n.is_empty())
}

/// The variable of this pod's node name (downward API `spec.nodeName`).
pub const NODE_NAME: &str = "NODE_NAME";

/// "trainer id 1 of 3, pserver id 1 of 3": the roles this pod has, nothing for the others.
/// The trainers are the plan's (an elastic job's epoch may have fewer than the pod count).
pub(super) fn ranks_line(plan: &Plan, config: &Config) -> String {
    let mut parts = Vec::new();
    let ids: Vec<usize> = plan
        .trainers()
        .filter_map(|p| p.place.as_ref().map(|place| place.trainer_id))
        .collect();
    match (plan.trainer_id, ids.first(), ids.last()) {
        (Some(_), Some(first), Some(last)) if ids.len() > 1 => {
            let world = plan.num_gradient_servers * config.topology.processes.per_pod;
            parts.push(format!("trainer ids {first}-{last} of {world}"));
        }
        (Some(id), _, _) => parts.push(format!("trainer id {id} of {}", plan.num_gradient_servers)),
        (None, _, _) => {}
    }
    if let Some(id) = plan.pserver_id {
        parts.push(format!("pserver id {id} of {}", config.topology.pservers));
    }
    parts.join(", ")
}

/// The files matched by --train-files / --test-files, sorted; none matched is an error.
pub(super) fn input_files(config: &Config) -> Result<InputFiles, ConfigError> {
    let expand = |pattern: &Option<String>,
                  variable: crate::cli::Opt|
     -> Result<Option<Vec<PathBuf>>, ConfigError> {
        let Some(pattern) = pattern else {
            return Ok(None);
        };
        let paths = glob::glob(pattern)
            .map_err(|e| ConfigError::new(variable, pattern, format!("a glob pattern ({e})")))?;
        let mut files: Vec<PathBuf> = paths
            .filter_map(Result::ok)
            .filter(|p| p.is_file())
            .collect();
        if files.is_empty() {
            return Err(ConfigError::new(
                variable,
                pattern,
                "a pattern that matches at least one file",
            ));
        }
        files.sort();
        Ok(Some(files))
    };
    Ok(InputFiles {
        train: expand(&config.workspace.train_files, crate::config::TRAIN_FILES)?,
        test: expand(&config.workspace.test_files, crate::config::TEST_FILES)?,
    })
}

/// Writes `name` in `dir` whole (a temporary file renamed over it), and not at all when it
/// already holds `text`: a Python starting meanwhile, in a pod sharing the directory, never reads
/// half of it.
pub(super) fn write_whole(dir: &std::path::Path, name: &str, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let temporary = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, &path)
}

/// The trainer's progress file as an absolute path (the trainer runs in the work directory), its
/// directory made and the file creatable (`create`; `plan` touches nothing): a path that cannot
/// be is bad input, said before any network use; beside it, the `sitecustomize.py` that lets a
/// Python trainer be asked for its stacks.
pub(super) fn progress_file(
    workspace: &mut crate::config::Workspace,
    create: bool,
) -> Result<(), ConfigError> {
    let path = &workspace.progress_file;
    let bad = |e: std::io::Error| {
        ConfigError::new(
            crate::config::PROGRESS_FILE,
            &path.display().to_string(),
            format!("a file the launcher can create, its directory made if missing ({e})"),
        )
    };
    let absolute = std::path::absolute(path).map_err(bad)?;
    if create {
        if let Some(dir) = absolute.parent() {
            std::fs::create_dir_all(dir).map_err(bad)?;
        }
        // Not a FIFO or a device, which opening could block on.
        if let Ok(meta) = std::fs::metadata(&absolute) {
            if !meta.is_file() {
                let why = std::io::Error::other("it exists and is not a regular file");
                return Err(bad(why));
            }
        }
        // Opened to append, never written: an existing file keeps its time.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&absolute)
            .map_err(bad)?;
        let dir = progress::stack_dump_dir(&absolute);
        write_whole(&dir, "sitecustomize.py", progress::SITECUSTOMIZE).map_err(bad)?;
    }
    workspace.progress_file = absolute;
    Ok(())
}

/// The processes' log directory as an absolute path, as Paddle's launcher gives
/// `PADDLE_LOG_DIR` (a relative one is the launcher's, as Paddle's `--log_dir` is), made
/// (`create`; `plan` touches nothing). One given that cannot be made is bad input; the
/// default's (the work directory may be read-only) is said, and no file is written.
fn log_dir(workspace: &mut crate::config::Workspace, create: bool) -> Result<(), ConfigError> {
    let Some(dir) = &workspace.log_dir else {
        return Ok(());
    };
    let value = dir.display().to_string();
    let made = std::path::absolute(dir).and_then(|absolute| match create {
        true => std::fs::create_dir_all(&absolute).map(|()| absolute),
        false => Ok(absolute),
    });
    workspace.log_dir = match (made, workspace.log_dir_given) {
        (Ok(absolute), _) => Some(absolute),
        (Err(e), true) => {
            let expected = format!("a directory the launcher can create ({e})");
            return Err(ConfigError::new(crate::config::LOG_DIR, &value, expected));
        }
        (Err(e), false) => {
            warn!("no per-process log files: cannot create {value} ({e}); give --log-dir a writable directory, or empty for none");
            None
        }
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JOB_PATH warning compares paths as written, `.` and `..` resolved: a progress file
    /// reached through them is still under the shared directory, a sibling is not.
    #[test]
    fn paths_compare_with_dots_resolved() {
        let under = |file: &str, dir: &str| {
            lexically(std::path::Path::new(file)).starts_with(lexically(std::path::Path::new(dir)))
        };
        assert!(under("/mnt/job/./x/../progress", "/mnt/job"));
        assert!(under("/mnt/other/../job/progress", "/mnt/job/."));
        assert!(!under("/mnt/job/../jobs/progress", "/mnt/job"));
        assert!(!under("/mnt/jobpath/progress", "/mnt/job"));
    }
}
