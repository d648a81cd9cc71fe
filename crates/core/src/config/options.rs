//! Every option's name as the messages spell it (variable and flag, from the one clap
//! definition), its default, and the small parsers each part of the configuration shares.

use std::time::Duration;

use crate::cli::Opt;
use crate::error::ConfigError;

pub const JOB_NAME: Opt = Opt("job_name");
pub const NAMESPACE: Opt = Opt("namespace");
pub const TRAIN_CONFIG_DIR: Opt = Opt("train_config_dir");
pub const NIC: Opt = Opt("nic");
pub const PORT: Opt = Opt("port");
pub const PORTS_NUM: Opt = Opt("ports_num");
pub const PORTS_NUM_SPARSE: Opt = Opt("ports_num_sparse");
pub const GRADIENT_NUM: Opt = Opt("gradient_num");
pub const POD_IP: Opt = Opt("pod_ip");
pub const POD_NAME: Opt = Opt("pod_name");
pub const SELECTOR: Opt = Opt("selector");
pub const PEERS: Opt = Opt("peers");
pub const WAIT_TIMEOUT: Opt = Opt("wait_timeout");
pub const PSERVER_TIMEOUT: Opt = Opt("pserver_timeout");
pub const LINGER: Opt = Opt("linger");
pub const GRACE_PERIOD: Opt = Opt("grace_period");
pub const POD_GRACE_PERIOD: Opt = Opt("pod_grace_period");
pub const HANG_TIMEOUT: Opt = Opt("hang_timeout");
pub const HANG_FIRST_WINDOW: Opt = Opt("hang_first_window");
pub const HANG_PROGRESS: Opt = Opt("hang_progress");
pub const PROGRESS_FILE: Opt = Opt("progress_file");
pub const LOG_DIR: Opt = Opt("log_dir");
pub const METRICS_PORT: Opt = Opt("metrics_port");
pub const STRAGGLER_WINDOW: Opt = Opt("straggler_window");
pub const STRAGGLER_THRESHOLD: Opt = Opt("straggler_threshold");
pub const STRAGGLER_WINDOWS: Opt = Opt("straggler_windows");
pub const CHECKPOINT_SIGNAL: Opt = Opt("checkpoint_signal");
pub const CHECKPOINT_WINDOW: Opt = Opt("checkpoint_window");
pub const TRAINER_ARGS: &str = "trainer argument (after --)";
pub const ROLE: Opt = Opt("role");
pub const PROTOCOL: Opt = Opt("protocol");
pub const PSERVER_COUNT: Opt = Opt("pserver_count");
pub const TRAINER_COUNT: Opt = Opt("trainer_count");
pub const PSERVER_SELECTOR: Opt = Opt("pserver_selector");
pub const TRAINER_SELECTOR: Opt = Opt("trainer_selector");
pub const MAX_FAILED: Opt = Opt("max_failed_trainers");
pub const ENTRY: Opt = Opt("entry");
pub const PSERVER_CMD: Opt = Opt("pserver_cmd");
pub const TRAINER_CMD: Opt = Opt("trainer_cmd");
pub const TRAINER_PORT: Opt = Opt("trainer_port");
pub const NPROC_PER_POD: Opt = Opt("nproc_per_pod");
pub const TRAIN_FILES: Opt = Opt("train_files");
pub const TEST_FILES: Opt = Opt("test_files");
pub const DNS: Opt = Opt("dns");
pub const DNS_SERVER: Opt = Opt("dns_server");
pub const WATCH_PEERS: Opt = Opt("watch_peers");
pub const CHECK_PEERS: Opt = Opt("check_peers");
pub const TERMINATION_LOG: Opt = Opt("termination_log");
pub const WORKDIR: Opt = Opt("workdir");
pub const JOB_PATH: Opt = Opt("job_path");
pub const ID_DIR: Opt = Opt("id_dir");
pub const JOB_SECRET: Opt = Opt("job_secret");
pub const JOB_SECRET_FILE: Opt = Opt("job_secret_file");
pub const COORDINATOR: Opt = Opt("coordinator");
pub const CONTROL_PORT: Opt = Opt("control_port");
pub const HEARTBEAT_TIMEOUT: Opt = Opt("heartbeat_timeout");
pub const MAX_RESTARTS: Opt = Opt("max_restarts");
pub const MAX_PREEMPTIONS: Opt = Opt("max_preemptions");
pub const MIN_PODS: Opt = Opt("min_pods");
pub const ELASTIC_WAIT: Opt = Opt("elastic_wait");
pub const RUNTIME: Opt = Opt("runtime");

/// Every option named in this module's messages (a test checks each one has a definition).
#[cfg(test)]
pub const NAMED_OPTIONS: &[Opt] = &[
    JOB_NAME,
    NAMESPACE,
    TRAIN_CONFIG_DIR,
    NIC,
    PORT,
    PORTS_NUM,
    PORTS_NUM_SPARSE,
    GRADIENT_NUM,
    POD_IP,
    POD_NAME,
    SELECTOR,
    PEERS,
    WAIT_TIMEOUT,
    PSERVER_TIMEOUT,
    LINGER,
    GRACE_PERIOD,
    POD_GRACE_PERIOD,
    HANG_TIMEOUT,
    HANG_FIRST_WINDOW,
    HANG_PROGRESS,
    PROGRESS_FILE,
    LOG_DIR,
    METRICS_PORT,
    STRAGGLER_WINDOW,
    STRAGGLER_THRESHOLD,
    STRAGGLER_WINDOWS,
    CHECKPOINT_SIGNAL,
    CHECKPOINT_WINDOW,
    ROLE,
    PROTOCOL,
    PSERVER_COUNT,
    TRAINER_COUNT,
    PSERVER_SELECTOR,
    TRAINER_SELECTOR,
    MAX_FAILED,
    ENTRY,
    PSERVER_CMD,
    TRAINER_CMD,
    TRAINER_PORT,
    NPROC_PER_POD,
    TRAIN_FILES,
    TEST_FILES,
    DNS,
    DNS_SERVER,
    WATCH_PEERS,
    CHECK_PEERS,
    TERMINATION_LOG,
    WORKDIR,
    JOB_PATH,
    ID_DIR,
    JOB_SECRET,
    JOB_SECRET_FILE,
    COORDINATOR,
    CONTROL_PORT,
    HEARTBEAT_TIMEOUT,
    MAX_RESTARTS,
    MAX_PREEMPTIONS,
    MIN_PODS,
    ELASTIC_WAIT,
    RUNTIME,
];

pub const DEFAULT_PORT: u16 = 7164;
/// paddle.distributed.launch's default port.
pub const DEFAULT_TRAINER_PORT: u16 = 6170;
pub const DEFAULT_NIC: &str = "eth0";
/// Next to paddle.distributed.launch's 6170.
pub const DEFAULT_CONTROL_PORT: u16 = 6171;
/// The port of the metrics endpoint when none is given (`--metrics-port`): outside the
/// launcher's other ports (the trainers' from 6170, the control channel's 6171, the pservers'
/// from 7164), in the range Prometheus exporters use.
pub const DEFAULT_METRICS_PORT: u16 = 9410;
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";
/// The first window of hang detection when none is given: set-up may take long.
pub const DEFAULT_HANG_FIRST_WINDOW: Duration = Duration::from_secs(1800);
/// How long a launcher may be silent before it counts as lost, when --heartbeat-timeout is
/// not given.
pub const DEFAULT_HEARTBEAT_TIMEOUT_SECONDS: u64 = 10;
/// How long the pods may take to be Running when --wait-timeout is not given.
pub const DEFAULT_WAIT_TIMEOUT_SECONDS: u64 = 1800;
/// How long a lost pod's replacement has to be Running before an elastic job goes on without
/// it, when --elastic-wait is not given: a pod recreated on a node that has the image (behind
/// the Job controller's first backoffs of 10 and 20 s) is Running well within it; a new node
/// (an autoscaler's, pulling a GPU image of gigabytes) seldom is, and the job trains meanwhile.
pub const DEFAULT_ELASTIC_WAIT: Duration = Duration::from_secs(180);
/// Far above any real job; keeps a typo like 1000000 from meaning "a million pods".
pub const MAX_PODS: u32 = 100_000;

/// Empty environment variables count as unset, as Kubernetes manifests often carry `value: ""`.
pub fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// Whether the arguments ask for the control channel: a job secret, or the file holding it.
pub fn channel_asked(args: &crate::cli::JobArgs) -> bool {
    present(&args.job_secret).is_some() || present(&args.job_secret_file).is_some()
}

pub fn required(value: &Option<String>, variable: Opt, what: &str) -> Result<String, ConfigError> {
    present(value)
        .map(str::to_string)
        .ok_or_else(|| ConfigError::new(variable, "", format!("{what} (it is required)")))
}

/// `true` or `false` (also 1/0, yes/no), `default` when unset.
pub fn parse_bool(
    value: &Option<String>,
    variable: Opt,
    default: bool,
) -> Result<bool, ConfigError> {
    match present(value) {
        None => Ok(default),
        Some("true" | "1" | "yes") => Ok(true),
        Some("false" | "0" | "no") => Ok(false),
        Some(other) => Err(ConfigError::new(variable, other, "true or false")),
    }
}

pub fn parse_int(
    text: &str,
    variable: Opt,
    min: u64,
    max: u64,
    what: &str,
) -> Result<u64, ConfigError> {
    let expected = || format!("{what}, an integer from {min} to {max}");
    let n: u64 = text
        .parse()
        .map_err(|_| ConfigError::new(variable, text, expected()))?;
    if n < min || n > max {
        return Err(ConfigError::new(variable, text, expected()));
    }
    Ok(n)
}

pub fn seconds(
    value: &Option<String>,
    variable: Opt,
    default: u64,
) -> Result<Duration, ConfigError> {
    match present(value) {
        None => Ok(Duration::from_secs(default)),
        Some(text) => {
            parse_int(text, variable, 0, 7 * 24 * 3600, "whole seconds").map(Duration::from_secs)
        }
    }
}

/// A command line split on whitespace (no shell); empty counts as unset, like every variable.
pub fn command(value: &Option<String>, default: &str) -> Vec<String> {
    present(value)
        .unwrap_or(default)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}
