//! The other parts of the configuration, each from its options: ports, the program, timing,
//! the control channel and the workspace.

use std::path::PathBuf;

use super::*;
use crate::verdict::UNBOUNDED_PREEMPTIONS;

impl Ports {
    pub fn from_args(args: &JobArgs) -> Result<Ports, ConfigError> {
        let nic = present(&args.nic).unwrap_or(DEFAULT_NIC).to_string();
        if nic.len() > 15 || nic.contains(['/', ' ', ',', ':']) {
            return Err(ConfigError::new(
                NIC,
                &nic,
                "a network interface name such as eth0 (at most 15 characters)",
            ));
        }
        let ports = port_layout(args)?;
        let trainer_port = match present(&args.trainer_port) {
            Some(text) => parse_int(text, TRAINER_PORT, 1, 65535, "a TCP port")? as u16,
            None => DEFAULT_TRAINER_PORT,
        };
        let metrics = match present(&args.metrics_port) {
            Some(text) => {
                parse_int(text, METRICS_PORT, 0, 65535, "a TCP port, or 0 for none")? as u16
            }
            None => DEFAULT_METRICS_PORT,
        };
        Ok(Ports {
            nic,
            pserver: ports,
            metrics: (metrics != 0).then_some(metrics),
            trainer: trainer_port,
            trainers: vec![trainer_port],
            check_peers: parse_bool(&args.check_peers, CHECK_PEERS, true)?,
            sockets: Vec::new(),
        })
    }
}

impl Program {
    /// The entry rules depend on the protocol; v1's pass-through flags on the ports and counts.
    pub fn from_args(
        args: &JobArgs,
        topology: &Topology,
        ports: &Ports,
    ) -> Result<Program, ConfigError> {
        let protocol = topology.protocol;
        let entry = present(&args.entry).map(str::to_string);
        match (protocol, &entry) {
            (Protocol::V1, Some(text)) => {
                return Err(ConfigError::new(
                    ENTRY,
                    text,
                    "no entry command with --protocol v1, which runs --trainer-cmd with flags",
                ))
            }
            (Protocol::V1, None) => {}
            (_, None) if args.trainer_args.is_empty() => {
                return Err(ConfigError::new(
                    ENTRY,
                    "",
                    "the training program: --entry \"python train.py\", or its argv after --",
                ))
            }
            (_, Some(_)) if !args.trainer_args.is_empty() => {
                return Err(ConfigError::new(
                    ENTRY,
                    entry.as_deref().unwrap_or_default(),
                    "either --entry or the program's argv after --, not both",
                ))
            }
            _ => {}
        }
        // Only v1 generates trainer flags; other protocols run the program's argv as given.
        let trainer_args = if protocol == Protocol::V1 {
            parse_pass_through(&args.trainer_args, &ports.pserver, topology.trainers)?
        } else {
            PassThrough {
                overrides: Vec::new(),
                rest: args.trainer_args.clone(),
            }
        };
        Ok(Program {
            pserver_cmd: command(&args.pserver_cmd, "paddle pserver"),
            trainer_cmd: command(&args.trainer_cmd, "paddle train"),
            entry,
            trainer_args,
        })
    }
}

/// What the launcher keeps of the pod's grace period for its own exit after its children's:
/// the verdict's last round trip, the termination message, the events' flush.
pub const OWN_EXIT_MARGIN: Duration = Duration::from_secs(5);
/// The children's grace period when the pod's is not known.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The children's time between SIGTERM and SIGKILL: as given (never longer than the pod's:
/// the kubelet kills everything then), else what the pod's allows less the launcher's own
/// exit, halved with a control channel (a coordinator whose pod is deleted stops its children,
/// then waits as long for the others' stop before its verdict), at least 1 s.
pub fn children_grace(
    given: Option<Duration>,
    pod: Option<Duration>,
    channel: bool,
) -> Result<Duration, ConfigError> {
    match (given, pod) {
        (Some(given), Some(pod)) if given > pod => Err(ConfigError::new(
            GRACE_PERIOD,
            &given.as_secs().to_string(),
            format!(
                "at most the pod's grace period, {} s ({}): the kubelet kills the launcher and its children then",
                pod.as_secs(),
                POD_GRACE_PERIOD
            ),
        )),
        (Some(given), _) => Ok(given),
        (None, Some(pod)) => {
            let usable = pod.saturating_sub(OWN_EXIT_MARGIN);
            let share = if channel { usable / 2 } else { usable };
            Ok(Duration::from_secs(share.as_secs().max(1)))
        }
        (None, None) => Ok(DEFAULT_GRACE),
    }
}

/// The checkpoint signal: a name (`SIGUSR1`, `usr1`) or `none`. Never one that stops or kills
/// the trainer, nor the stack signal while hangs are watched.
fn checkpoint_signal(
    given: &Option<String>,
    hangs_watched: bool,
) -> Result<Option<i32>, ConfigError> {
    let text = present(given).unwrap_or("SIGUSR1");
    if text.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let upper = text.to_ascii_uppercase();
    let name = match upper.strip_prefix("SIG") {
        Some(_) => upper.clone(),
        None => format!("SIG{upper}"),
    };
    let expected = "a signal the trainer handles to checkpoint and go on, such as SIGUSR1, or none";
    let signal = crate::exit::signal_by_name(&name)
        .ok_or_else(|| ConfigError::new(CHECKPOINT_SIGNAL, text, expected))?;
    use libc::*;
    let why = match signal {
        SIGKILL | SIGSTOP => Some("it cannot be handled"),
        SIGTERM | SIGINT | SIGQUIT | SIGHUP => Some("it asks the trainer to stop, not to go on"),
        SIGCHLD | SIGSEGV | SIGBUS | SIGFPE | SIGILL | SIGABRT | SIGPIPE | SIGTRAP | SIGSYS => {
            Some("the runtime or the kernel sends it for something else")
        }
        SIGUSR2 if hangs_watched => Some("it asks for the trainer's stacks while hangs are watched (PADDLE_LAUNCHER_HANG_TIMEOUT)"),
        _ => None,
    };
    match why {
        Some(why) => Err(ConfigError::new(
            CHECKPOINT_SIGNAL,
            text,
            format!("{expected} ({name} cannot be: {why})"),
        )),
        None => Ok(Some(signal)),
    }
}

impl Timing {
    pub fn from_args(args: &JobArgs) -> Result<Timing, ConfigError> {
        let wait_timeout = seconds(
            &args.wait_timeout,
            WAIT_TIMEOUT,
            DEFAULT_WAIT_TIMEOUT_SECONDS,
        )?;
        let pserver_timeout = seconds(&args.pserver_timeout, PSERVER_TIMEOUT, 300)?;
        let hang_timeout = seconds(&args.hang_timeout, HANG_TIMEOUT, 0)?;
        let grace_given = present(&args.grace_period)
            .map(|_| seconds(&args.grace_period, GRACE_PERIOD, 0))
            .transpose()?;
        let pod_grace = present(&args.pod_grace_period)
            .map(|_| seconds(&args.pod_grace_period, POD_GRACE_PERIOD, 0))
            .transpose()?;
        let channel = channel_asked(args);
        // Set-up (reading data, compiling, NCCL's init) often takes longer than a step.
        let default_window = hang_timeout.max(DEFAULT_HANG_FIRST_WINDOW).as_secs();
        let hang_first_window =
            seconds(&args.hang_first_window, HANG_FIRST_WINDOW, default_window)?;
        if hang_first_window.is_zero() {
            return Err(ConfigError::new(
                HANG_FIRST_WINDOW,
                "0",
                "whole seconds of at least 1 (the time a trainer may take to its first progress)",
            ));
        }
        let hang_output_counts = match present(&args.hang_progress) {
            None | Some("output") => true,
            Some("file") => false,
            Some(other) => {
                return Err(ConfigError::new(
                    HANG_PROGRESS,
                    other,
                    "`output` (output until the progress file is first written, then the file) or `file` (the progress file alone)",
                ))
            }
        };
        let hang_timeout = Some(hang_timeout).filter(|t| !t.is_zero());
        let checkpoint_signal = checkpoint_signal(&args.checkpoint_signal, hang_timeout.is_some())?;
        let checkpoint_window = present(&args.checkpoint_window)
            .map(|_| seconds(&args.checkpoint_window, CHECKPOINT_WINDOW, 0))
            .transpose()?;
        let grace_period = children_grace(grace_given, pod_grace, channel)?;
        if let (Some(window), Some(pod)) = (checkpoint_window, pod_grace) {
            if window + grace_period > pod {
                return Err(ConfigError::new(
                    CHECKPOINT_WINDOW,
                    &window.as_secs().to_string(),
                    format!(
                        "at most the pod's grace period, {} s ({POD_GRACE_PERIOD}), less the children's, {} s: the window and their stop must both end before the kubelet kills the pod",
                        pod.as_secs(),
                        grace_period.as_secs()
                    ),
                ));
            }
        }
        Ok(Timing {
            wait_timeout: (!wait_timeout.is_zero()).then_some(wait_timeout),
            pserver_timeout,
            linger: seconds(&args.linger, LINGER, 30)?,
            grace_period,
            grace_given,
            pod_grace,
            hang_timeout,
            hang_first_window,
            hang_output_counts,
            stragglers: stragglers(args)?,
            checkpoint_signal,
            checkpoint_window,
            channel,
        })
    }
}

/// The straggler rules from --straggler-window, --straggler-threshold and
/// --straggler-windows; None when the window is 0.
fn stragglers(args: &JobArgs) -> Result<Option<crate::straggler::Rules>, ConfigError> {
    let rules = crate::straggler::Rules::default();
    let window = seconds(
        &args.straggler_window,
        STRAGGLER_WINDOW,
        rules.window.as_secs(),
    )?;
    let threshold = match present(&args.straggler_threshold) {
        None => rules.threshold,
        Some(text) => match text.parse::<f64>() {
            Ok(t) if t > 0.0 && t < 1.0 => t,
            _ => {
                let expected = "a number above 0 and below 1 (a share of the median rank's speed)";
                return Err(ConfigError::new(STRAGGLER_THRESHOLD, text, expected));
            }
        },
    };
    let windows = match present(&args.straggler_windows) {
        None => rules.windows,
        Some(text) => parse_int(text, STRAGGLER_WINDOWS, 1, 1000, "windows in a row")? as u32,
    };
    Ok(Some(crate::straggler::Rules {
        threshold,
        windows,
        window,
    })
    .filter(|_| !window.is_zero()))
}

impl Control {
    /// Whether the job runs the control channel: a secret, or the file that holds it.
    pub fn is_on(&self) -> bool {
        self.secret.is_some() || self.secret_file.is_some()
    }

    pub fn from_args(args: &JobArgs) -> Result<Control, ConfigError> {
        let (secret, secret_file) = job_secret(args)?;
        let port = |text: &str, variable| {
            parse_int(text, variable, 1, 65535, "a TCP port").map(|n| n as u16)
        };
        let coordinator = coordinator(args)?;
        let max_restarts = present(&args.max_restarts)
            .map(|text| parse_int(text, MAX_RESTARTS, 0, 10_000, "a number of restarts"))
            .transpose()?
            .unwrap_or(0) as u32;
        if max_restarts > 0 && !channel_asked(args) {
            return Err(ConfigError::new(
                MAX_RESTARTS,
                &max_restarts.to_string(),
                "0 without a job secret: the launchers agree on restarts over the control channel \
                 (set PADDLE_LAUNCHER_JOB_SECRET or PADDLE_LAUNCHER_JOB_SECRET_FILE)",
            ));
        }
        let max_preemptions = present(&args.max_preemptions)
            .map(|text| {
                parse_int(text, MAX_PREEMPTIONS, 0, 10_000, "a number of preemptions")
                    .map(|n| n as u32)
            })
            .transpose()?;
        if let (Some(n), false) = (max_preemptions, channel_asked(args)) {
            return Err(ConfigError::new(
                MAX_PREEMPTIONS,
                &n.to_string(),
                "unset without a job secret: only the control channel restarts a preempted job \
                 (set PADDLE_LAUNCHER_JOB_SECRET or PADDLE_LAUNCHER_JOB_SECRET_FILE)",
            ));
        }
        Ok(Control {
            elastic: None,
            max_restarts,
            max_preemptions: max_preemptions.unwrap_or(UNBOUNDED_PREEMPTIONS),
            dns_server: topology::dns_server(args)?,
            secret,
            secret_file,
            coordinator,
            port: present(&args.control_port)
                .map(|text| port(text, CONTROL_PORT))
                .transpose()?
                .unwrap_or(DEFAULT_CONTROL_PORT),
            heartbeat_timeout: match seconds(
                &args.heartbeat_timeout,
                HEARTBEAT_TIMEOUT,
                DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
            )? {
                d if d.is_zero() => {
                    return Err(ConfigError::new(
                        HEARTBEAT_TIMEOUT,
                        "0",
                        "whole seconds from 1 (a launcher must be allowed some silence)",
                    ))
                }
                d => d,
            },
        })
    }
}

/// The job secret (--job-secret, never echoed) or its file (--job-secret-file), not both.
fn job_secret(args: &JobArgs) -> Result<(Option<Secret>, Option<PathBuf>), ConfigError> {
    // Blank is unset, as for every option (`channel_asked` says the same); the blanks
    // around it are no part of it, as in the file that may hold it instead.
    let secret = match args
        .job_secret
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        // The value is not echoed: it is a secret.
        Some(text) if text.len() < MIN_SECRET_LEN => {
            return Err(ConfigError::new(
                JOB_SECRET,
                "(hidden)",
                "at least 32 characters, e.g. from `openssl rand -hex 16` in a Secret",
            ))
        }
        secret => secret.map(|s| Secret(s.as_bytes().to_vec())),
    };
    let secret_file = present(&args.job_secret_file).map(PathBuf::from);
    if let (Some(_), Some(file)) = (&secret, &secret_file) {
        return Err(ConfigError::new(
            JOB_SECRET_FILE,
            &file.display().to_string(),
            "either the secret or its file, not both",
        ));
    }
    Ok((secret, secret_file))
}

/// --coordinator: HOST:PORT of the coordinating launcher, if given.
fn coordinator(args: &JobArgs) -> Result<Option<(String, u16)>, ConfigError> {
    let port = |text: &str| parse_int(text, COORDINATOR, 1, 65535, "a TCP port").map(|n| n as u16);
    present(&args.coordinator)
        .map(|text| {
            let bad = || {
                ConfigError::new(
                    COORDINATOR,
                    text,
                    "HOST:PORT, e.g. my-job-0.my-job:6171 or 10.1.2.3:6171 ([v6]:port for IPv6)",
                )
            };
            let (host, number) = text.rsplit_once(':').ok_or_else(bad)?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() || host.contains(char::is_whitespace) {
                return Err(bad());
            }
            Ok((host.to_string(), port(number).map_err(|_| bad())?))
        })
        .transpose()
}

impl Workspace {
    pub fn from_args(args: &JobArgs, protocol: Protocol) -> Result<Workspace, ConfigError> {
        let job_path = present(&args.job_path).map(PathBuf::from);
        let train_config_dir = match present(&args.train_config_dir) {
            Some(dir) if job_path.is_none() => return Err(ConfigError::new(
                TRAIN_CONFIG_DIR,
                dir,
                "to be set together with JOB_PATH (it names a directory under $JOB_PATH/$JOB_NAME)",
            )),
            Some(dir) if dir.split('/').any(|c| c == "..") || dir.starts_with('/') => {
                return Err(ConfigError::new(
                    TRAIN_CONFIG_DIR,
                    dir,
                    "a relative directory under $JOB_PATH/$JOB_NAME, without '..'",
                ))
            }
            dir => dir.map(str::to_string),
        };
        let glob_option = |value: &Option<String>, variable| match present(value) {
            Some(pattern) if glob::Pattern::new(pattern).is_err() => Err(ConfigError::new(
                variable,
                pattern,
                "a glob pattern such as /data/train/part-*",
            )),
            pattern => Ok(pattern.map(str::to_string)),
        };
        let train_files = glob_option(&args.train_files, TRAIN_FILES)?;
        let test_files = glob_option(&args.test_files, TEST_FILES)?;
        let workdir = PathBuf::from(present(&args.workdir).unwrap_or("."));
        let list_path = |value: &Option<String>, default: &str| {
            present(value).map_or_else(|| workdir.join(default), PathBuf::from)
        };
        let train_list = list_path(&args.train_list, "train.list");
        let test_list = list_path(&args.test_list, "test.list");
        let progress_file = list_path(&args.progress_file, "progress");
        // Paddle 3's launcher writes its processes' logs under `--log_dir log`.
        let log_dir = match args.log_dir.as_deref().map(str::trim) {
            Some("") => None,
            Some(dir) => Some(PathBuf::from(dir)),
            None => protocol.paddles_launcher().then(|| workdir.join("log")),
        };
        Ok(Workspace {
            job_path,
            train_config_dir,
            workdir,
            id_dir: match args.id_dir.as_deref() {
                None => Some(PathBuf::from("/")),
                Some("") => None,
                Some(dir) => Some(PathBuf::from(dir)),
            },
            train_files,
            test_files,
            train_list,
            test_list,
            progress_file,
            log_dir,
            log_dir_given: args.log_dir.is_some(),
        })
    }
}

/// Where the exit reason goes: the default path, a given one, or nowhere when set empty.
/// Known even when the rest of the configuration is invalid, so that the reason is written.
pub fn termination_log(args: &JobArgs) -> Option<PathBuf> {
    termination_log_given(args.termination_log.as_deref())
}

/// The termination message's file from --termination-log (PADDLE_LAUNCHER_TERMINATION_LOG) as
/// given: the default when not, none when empty.
pub fn termination_log_given(given: Option<&str>) -> Option<PathBuf> {
    match given {
        None => Some(PathBuf::from(DEFAULT_TERMINATION_LOG)),
        Some("") => None,
        Some(path) => Some(PathBuf::from(path)),
    }
}

fn port_layout(args: &JobArgs) -> Result<PortLayout, ConfigError> {
    let int = |value: &Option<String>, variable, min, default: u16, what| match present(value) {
        Some(text) => parse_int(text, variable, min, 65535, what).map(|n| n as u16),
        None => Ok(default),
    };
    let first = int(&args.port, PORT, 1, DEFAULT_PORT, "a TCP port")?;
    let dense = int(&args.ports_num, PORTS_NUM, 1, 1, "a number of dense ports")?;
    let sparse = int(
        &args.ports_num_sparse,
        PORTS_NUM_SPARSE,
        0,
        0,
        "a number of sparse ports",
    )?;
    let last = first as u32 + dense as u32 + sparse as u32 - 1;
    if last > 65535 {
        return Err(ConfigError::new(
            PORT,
            &first.to_string(),
            format!(
                "a first port that leaves room for {dense} dense + {sparse} sparse ports below 65536 (the range would end at {last})"
            ),
        ));
    }
    Ok(PortLayout {
        first,
        dense,
        sparse,
    })
}

/// Splits `--name=value`, `-name=value` and `--name value` (the latter only for generated
/// flags, which all take a value) from the rest. Port-layout flags must agree with the
/// launcher's own settings, because the pserver is started from those.
fn parse_pass_through(
    args: &[String],
    ports: &PortLayout,
    gradient_num: u32,
) -> Result<PassThrough, ConfigError> {
    let mut out = PassThrough::default();
    let mut tokens = args.iter();
    while let Some(token) = tokens.next() {
        let stripped = token
            .strip_prefix("--")
            .or_else(|| token.strip_prefix('-'))
            .filter(|s| !s.is_empty() && !s.starts_with('-'));
        let (name, value) = match stripped.map(|s| s.split_once('=')) {
            Some(Some((name, value))) if GENERATED_TRAINER_FLAGS.contains(&name) => {
                (name.to_string(), value.to_string())
            }
            Some(None) if GENERATED_TRAINER_FLAGS.contains(&stripped.unwrap_or_default()) => {
                let name = stripped.unwrap_or_default().to_string();
                let value = tokens.next().ok_or_else(|| {
                    ConfigError::new(TRAINER_ARGS, token, format!("a value after --{name}"))
                })?;
                (name, value.clone())
            }
            _ => {
                out.rest.push(token.clone());
                continue;
            }
        };
        let own = match name.as_str() {
            "port" => Some((ports.first.to_string(), PORT)),
            "ports_num" => Some((ports.dense.to_string(), PORTS_NUM)),
            "ports_num_for_sparse" => Some((ports.sparse.to_string(), PORTS_NUM_SPARSE)),
            "num_gradient_servers" => Some((gradient_num.to_string(), GRADIENT_NUM)),
            _ => None,
        };
        if let Some((own_value, variable)) = own {
            if own_value != value {
                return Err(ConfigError::new(
                    TRAINER_ARGS,
                    &format!("--{name}={value}"),
                    format!(
                        "the value of {variable} ({own_value}), which the pserver uses too: set it there instead"
                    ),
                ));
            }
        }
        out.overrides.retain(|(n, _)| *n != name);
        out.overrides.push((name, value));
    }
    Ok(out)
}

/// --min-pods and --elastic-wait, judged against the rest of the configuration: an elastic job
/// is data-parallel (every pod alike, no pserver whose count shards the parameters), found
/// through the Kubernetes API (which tells a pod that is gone from one that is late), with a
/// control channel (whose coordinator decides each epoch's members). --min-pods equal to the
/// pod count is no elastic job.
pub fn elastic(args: &JobArgs, config: &Config) -> Result<Option<Elastic>, ConfigError> {
    let pods = config.topology.trainers;
    let Some(text) = present(&args.min_pods) else {
        if let Some(wait) = present(&args.elastic_wait) {
            return Err(ConfigError::new(
                ELASTIC_WAIT,
                wait,
                "unset without --min-pods (PADDLE_LAUNCHER_MIN_PODS), which makes a job elastic",
            ));
        }
        return Ok(None);
    };
    let range = "a number of pods, at most the job's pod count";
    let min_pods = parse_int(text, MIN_PODS, 1, u64::from(pods.max(1)), range)? as u32;
    let refuse = |why: String| Err(ConfigError::new(MIN_PODS, text, why));
    if !channel_asked(args) {
        return refuse(
            "unset without a job secret: the launchers agree on each epoch's pods over the \
             control channel (set PADDLE_LAUNCHER_JOB_SECRET or PADDLE_LAUNCHER_JOB_SECRET_FILE)"
                .into(),
        );
    }
    if config.topology.role != PodRole::Both {
        return refuse(
            "unset in the split layout: its pserver pods hold the parameters by their count \
             (an elastic job is data-parallel, every pod alike: --protocol collective)"
                .into(),
        );
    }
    if config.topology.protocol.has_pservers() {
        return refuse(format!(
            "unset with --protocol {}: every pod's pserver holds a share of the parameters by \
             their count (an elastic job is data-parallel: --protocol collective)",
            config.topology.protocol
        ));
    }
    if !matches!(config.topology.discovery, Discovery::Kubernetes { .. }) {
        return refuse(
            "unset with --peers or --dns: only pods found through the Kubernetes API tell a pod \
             that is gone from one that is late"
                .into(),
        );
    }
    let wait = match present(&args.elastic_wait) {
        None => DEFAULT_ELASTIC_WAIT,
        Some(_) => seconds(&args.elastic_wait, ELASTIC_WAIT, 0)?,
    };
    if wait.is_zero() {
        // Every pod that came back a moment late would shrink the job, and every arrival
        // restart it at once.
        return Err(ConfigError::new(
            ELASTIC_WAIT,
            "0",
            "whole seconds from 1: the time a replacement has to be Running, and arrivals to gather",
        ));
    }
    if let Some(limit) = config.timing.wait_timeout.filter(|limit| wait >= *limit) {
        return Err(ConfigError::new(
            ELASTIC_WAIT,
            &wait.as_secs().to_string(),
            format!(
                "fewer seconds than --wait-timeout ({} s), which would end the job before it went on without a pod",
                limit.as_secs()
            ),
        ));
    }
    Ok((min_pods < pods).then_some(Elastic {
        min_pods,
        max_pods: pods,
        wait,
    }))
}
