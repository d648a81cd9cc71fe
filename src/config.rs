//! Raw option text -> validated `Config`. Pure: no network, no files. Each bad value yields one
//! `ConfigError` naming the variable and flag, the value, and what is expected.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{JobArgs, Opt};
use crate::error::ConfigError;
use crate::selector::{is_dns_label, is_dns_subdomain, LabelSelector};
use crate::vocabulary::{PodRole, Protocol};

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
pub const TRAINER_ARGS: &str = "trainer argument (after --)";
pub const ROLE: Opt = Opt("role");
pub const PROTOCOL: Opt = Opt("protocol");
pub const PSERVER_COUNT: Opt = Opt("pserver_count");
pub const TRAINER_COUNT: Opt = Opt("trainer_count");
pub const PSERVER_SELECTOR: Opt = Opt("pserver_selector");
pub const TRAINER_SELECTOR: Opt = Opt("trainer_selector");
pub const MAX_FAILED: Opt = Opt("max_failed_trainers");
pub const ENTRY: Opt = Opt("entry");
pub const TRAINER_PORT: Opt = Opt("trainer_port");
pub const TRAIN_FILES: Opt = Opt("train_files");
pub const TEST_FILES: Opt = Opt("test_files");
pub const DNS: Opt = Opt("dns");
pub const DNS_SERVER: Opt = Opt("dns_server");
pub const WATCH_PEERS: Opt = Opt("watch_peers");
pub const TERMINATION_LOG: Opt = Opt("termination_log");
pub const WORKDIR: Opt = Opt("workdir");
pub const ID_DIR: Opt = Opt("id_dir");
pub const JOB_SECRET: Opt = Opt("job_secret");
pub const JOB_SECRET_FILE: Opt = Opt("job_secret_file");
pub const COORDINATOR: Opt = Opt("coordinator");
pub const CONTROL_PORT: Opt = Opt("control_port");
pub const HEARTBEAT_TIMEOUT: Opt = Opt("heartbeat_timeout");
pub const MAX_RESTARTS: Opt = Opt("max_restarts");
pub const RUNTIME: Opt = Opt("runtime");

/// Every option named in this module's messages (a test checks each one has a definition).
#[cfg(test)]
const NAMED_OPTIONS: &[Opt] = &[
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
    ROLE,
    PROTOCOL,
    PSERVER_COUNT,
    TRAINER_COUNT,
    PSERVER_SELECTOR,
    TRAINER_SELECTOR,
    MAX_FAILED,
    ENTRY,
    TRAINER_PORT,
    TRAIN_FILES,
    TEST_FILES,
    DNS,
    DNS_SERVER,
    WATCH_PEERS,
    TERMINATION_LOG,
    WORKDIR,
    ID_DIR,
    JOB_SECRET,
    JOB_SECRET_FILE,
    COORDINATOR,
    CONTROL_PORT,
    HEARTBEAT_TIMEOUT,
    MAX_RESTARTS,
    RUNTIME,
];

pub const DEFAULT_PORT: u16 = 7164;
/// paddle.distributed.launch's default port.
pub const DEFAULT_TRAINER_PORT: u16 = 6170;
pub const DEFAULT_NIC: &str = "eth0";
/// Next to paddle.distributed.launch's 6170.
pub const DEFAULT_CONTROL_PORT: u16 = 6171;
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";
/// Far above any real job; keeps a typo like 1000000 from meaning "a million pods".
pub const MAX_PODS: u32 = 100_000;

/// The pserver's ports: `first .. first + dense + sparse - 1` on every pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortLayout {
    pub first: u16,
    pub dense: u16,
    pub sparse: u16,
}

impl PortLayout {
    pub fn ports(&self) -> impl Iterator<Item = u16> {
        let first = self.first;
        (0..self.dense + self.sparse).map(move |i| first + i)
    }
}

/// Which pods a group of the job is, and so what they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// Every pod is a trainer, and a pserver when the protocol has them (one Job, the colocated layout).
    Job,
    Pservers,
    Trainers,
}

/// Pods selected by label, `expected` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub kind: GroupKind,
    pub selector: LabelSelector,
    pub expected: u32,
    pub ranking: Ranking,
}

/// Where a pod's rank and attempt are written on it (label or annotation keys): ranks follow
/// the `index` values, major first, when every pod has them (else IP order); a pod of an
/// earlier `attempt` than the newest seen is not part of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranking {
    pub index: Vec<&'static str>,
    pub attempt: Option<&'static str>,
    /// The index is unique among the group's pods (a batch system's selector): a finished pod
    /// at the index of a live one was replaced by it, and does not count, not even as failed.
    pub replaced_ignored: bool,
    /// This pod's own `attempt`: the job is at least there, so a pod of an earlier one never
    /// counts, not even in a group that shows no pod of the new attempt yet (the split layout's
    /// other task, recreated a moment later).
    pub own_attempt: Option<u64>,
}

impl Ranking {
    /// A batch system's ranking of the pods its selector finds.
    pub fn by(index: &[&'static str], attempt: Option<&'static str>) -> Ranking {
        Ranking {
            index: index.to_vec(),
            attempt,
            replaced_ignored: true,
            own_attempt: None,
        }
    }
}

impl Default for Ranking {
    /// An Indexed Job's completion index, for a selector that may span several Jobs: nothing
    /// is ignored.
    fn default() -> Self {
        Ranking {
            index: vec![crate::vocabulary::COMPLETION_INDEX],
            attempt: None,
            replaced_ignored: false,
            own_attempt: None,
        }
    }
}

/// How this launcher learns who is in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    /// List + watch the pods of each group.
    Kubernetes { groups: Vec<Group> },
    /// A fixed list of pod IPs of a one-group job; rank = position.
    Static { ips: Vec<IpAddr> },
    /// The A/AAAA records of a headless Service; rank = numeric IP order.
    Dns {
        name: String,
        server: Option<std::net::SocketAddr>,
    },
}

/// A validated configuration, in parts that are each built and tested on their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The batch system that created this pod and what was taken from it; None: none read.
    pub runtime: Option<RuntimeReport>,
    pub topology: Topology,
    pub ports: Ports,
    pub program: Program,
    pub timing: Timing,
    pub workspace: Workspace,
    pub control: Control,
}

/// What `plan` and `doctor` say of the batch system: its name, and where each setting came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeReport {
    pub system: crate::vocabulary::System,
    pub settings: Vec<String>,
}

/// The job's control channel: on only with a secret, since an open port must authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    pub secret: Option<Secret>,
    /// Read at the launch (a file is not this module's business); a missing one: no channel.
    pub secret_file: Option<PathBuf>,
    /// (host, port) of the coordinating launcher; None: the pod of rank 0 on `port`.
    pub coordinator: Option<(String, u16)>,
    pub port: u16,
    pub heartbeat_timeout: Duration,
    /// Group restarts left to the job at its start (0: the first failure ends every pod).
    pub max_restarts: u32,
    /// Where a coordinator named by DNS is resolved (--dns-server); None: resolv.conf.
    pub dns_server: Option<SocketAddr>,
}

/// The job's shared secret; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

/// Secrets shorter than this are refused: an HMAC key an attacker could guess is no key.
pub const MIN_SECRET_LEN: usize = 32;

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Who is in the job and who this pod is: names, role, protocol, counts, and how peers are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub job_name: String,
    pub namespace: Option<String>,
    pub role: PodRole,
    pub protocol: Protocol,
    /// Number of trainers (--num_gradient_servers).
    pub trainers: u32,
    /// Number of pservers: the pods in the colocated layout, the pserver pods in the split one.
    pub pservers: u32,
    pub max_failed_trainers: Option<u32>,
    /// Stop when a peer pod is lost after the launch.
    pub watch_peers: bool,
    /// A pserver pod of the split layout ends (status 0) once these trainer pods all Succeeded.
    pub trainers_to_finish: Option<Group>,
    pub pod_ip: Option<IpAddr>,
    pub pod_name: Option<String>,
    pub discovery: Discovery,
}

/// The network side: the NIC given to Paddle, the pservers' ports and the trainers' port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    pub nic: String,
    pub pserver: PortLayout,
    /// Port of each trainer's own endpoint (fleet, collective).
    pub trainer: u16,
}

/// What runs: the commands, and the training program with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub pserver_cmd: Vec<String>,
    pub trainer_cmd: Vec<String>,
    /// The training program for v2/fleet/collective: `sh -c ENTRY`, or the args after `--`.
    pub entry: Option<String>,
    pub trainer_args: PassThrough,
}

/// How long the launcher waits, lingers and gives its children to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    /// None: wait forever.
    pub wait_timeout: Option<Duration>,
    pub pserver_timeout: Duration,
    pub linger: Duration,
    pub grace_period: Duration,
}

/// Files: the shared job directory, the work directory, id files and file lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub job_path: Option<PathBuf>,
    pub train_config_dir: Option<String>,
    pub workdir: PathBuf,
    /// Directory for the `trainer_id` and `trainer_count` files; None: not written.
    pub id_dir: Option<PathBuf>,
    pub train_files: Option<String>,
    pub test_files: Option<String>,
    pub train_list: PathBuf,
    pub test_list: PathBuf,
}

impl Config {
    /// Validates every option; the parts in the order their rules depend on each other.
    pub fn from_args(args: &JobArgs) -> Result<Config, ConfigError> {
        let topology = Topology::from_args(args)?;
        let ports = Ports::from_args(args)?;
        let program = Program::from_args(args, &topology, &ports)?;
        let timing = Timing::from_args(args)?;
        let workspace = Workspace::from_args(args)?;
        let control = Control::from_args(args)?;
        Ok(Config {
            runtime: None,
            topology,
            ports,
            program,
            timing,
            workspace,
            control,
        })
    }

    /// The restarts the job has had as a whole before this pod started: its batch system's
    /// attempt (JobSet's restart-attempt, Volcano's job-version) read from this pod's labels; 0
    /// when none says. The restart count starts there, so that a training program told
    /// `PADDLE_LAUNCHER_RESTART_COUNT` never takes a job restarted whole for a fresh one.
    pub fn restarts_before(&self) -> u32 {
        let Discovery::Kubernetes { groups } = &self.topology.discovery else {
            return 0;
        };
        groups
            .iter()
            .filter_map(|g| g.ranking.own_attempt)
            .max()
            .map_or(0, |attempt| u32::try_from(attempt).unwrap_or(u32::MAX))
    }

    /// The pods' group this pod belongs to, by its role.
    pub fn own_group(&self) -> GroupKind {
        match self.topology.role {
            PodRole::Both => GroupKind::Job,
            PodRole::Pserver => GroupKind::Pservers,
            PodRole::Trainer => GroupKind::Trainers,
        }
    }
}

/// Trainer arguments after `--`: those naming a flag the launcher generates replace it
/// (so a flag never appears twice), the rest are appended in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PassThrough {
    pub overrides: Vec<(String, String)>,
    pub rest: Vec<String>,
}

/// Flags of the v1 trainer that the launcher generates.
pub const GENERATED_TRAINER_FLAGS: &[&str] = &[
    "port",
    "ports_num",
    "ports_num_for_sparse",
    "nics",
    "comment",
    "pservers",
    "num_gradient_servers",
    "trainer_id",
    "local",
    "save_dir",
];

impl Topology {
    pub fn from_args(args: &JobArgs) -> Result<Topology, ConfigError> {
        let job_name = required(&args.job_name, JOB_NAME, "the job's name")?;
        if !(job_name.len() <= 63 && is_dns_subdomain(&job_name)) {
            return Err(ConfigError::new(
                JOB_NAME,
                &job_name,
                "a Kubernetes job name: 1-63 lowercase letters, digits, '-' or '.', alphanumeric at both ends",
            ));
        }
        let namespace = match present(&args.namespace) {
            Some(ns) if !is_dns_label(ns) => {
                return Err(ConfigError::new(
                    NAMESPACE,
                    ns,
                    "a namespace name: 1-63 lowercase letters, digits or '-'",
                ))
            }
            ns => ns.map(str::to_string),
        };
        let role = match present(&args.role).unwrap_or("both") {
            "both" => PodRole::Both,
            "pserver" => PodRole::Pserver,
            "trainer" => PodRole::Trainer,
            other => {
                return Err(ConfigError::new(
                    ROLE,
                    other,
                    "one of both, pserver, trainer",
                ))
            }
        };
        let protocol = match present(&args.protocol).unwrap_or("v1") {
            "v1" => Protocol::V1,
            "v2" => Protocol::V2,
            "fleet" => Protocol::Fleet,
            "collective" => Protocol::Collective,
            other => {
                return Err(ConfigError::new(
                    PROTOCOL,
                    other,
                    "one of v1, v2, fleet, collective",
                ))
            }
        };
        if role == PodRole::Pserver && !protocol.has_pservers() {
            return Err(ConfigError::new(
                ROLE,
                "pserver",
                "trainer or both: the collective protocol has no pservers",
            ));
        }
        let count = |value: &Option<String>, variable| {
            present(value)
                .map(|text| parse_int(text, variable, 1, MAX_PODS as u64, "a number of pods"))
                .transpose()
                .map(|n| n.map(|n| n as u32))
        };
        let peers = present(&args.peers).map(parse_peers).transpose()?;
        let gradient_num = count(&args.gradient_num, GRADIENT_NUM)?;
        let pod_ip = present(&args.pod_ip)
            .map(|text| {
                text.parse::<IpAddr>().map_err(|_| {
                    ConfigError::new(POD_IP, text, "an IPv4 or IPv6 address, e.g. 10.1.2.3")
                })
            })
            .transpose()?;
        let pod_name = match present(&args.pod_name) {
            Some(name) if !is_dns_subdomain(name) => {
                return Err(ConfigError::new(
                    POD_NAME,
                    name,
                    "a pod name: lowercase letters, digits, '-' and '.'",
                ))
            }
            name => name.map(str::to_string),
        };
        let selector = |value: &Option<String>, variable, default: String| {
            let text = present(value).map(str::to_string).unwrap_or(default);
            LabelSelector::parse(&text).map_err(|expected| {
                ConfigError::new(variable, &text, format!("a label selector with {expected}"))
            })
        };
        let mut trainers_to_finish = None;
        let (trainers, pservers, discovery) = if role == PodRole::Both {
            let trainers = match (gradient_num, &peers) {
                (Some(n), _) => n,
                (None, Some(ips)) => ips.len() as u32,
                (None, None) => {
                    return Err(ConfigError::new(
                        GRADIENT_NUM,
                        "",
                        "the number of pods (= trainers) in the job, e.g. 3",
                    ))
                }
            };
            let dns = present(&args.dns)
                .map(|name| {
                    let bare = name.strip_suffix('.').unwrap_or(name);
                    if bare.len() > 253 || !bare.split('.').all(crate::selector::is_dns_label) {
                        return Err(ConfigError::new(
                            DNS,
                            name,
                            "a DNS name such as my-job-pods.default.svc.cluster.local",
                        ));
                    }
                    let server = dns_server(args)?;
                    Ok(Discovery::Dns {
                        name: name.to_string(),
                        server,
                    })
                })
                .transpose()?;
            if let (Some(_), Some(text)) = (&dns, present(&args.peers)) {
                return Err(ConfigError::new(
                    PEERS,
                    text,
                    "either --peers or --dns, not both",
                ));
            }
            let discovery = match (peers, dns) {
                (None, Some(dns)) => dns,
                (Some(ips), _) => {
                    if ips.len() as u32 != trainers {
                        return Err(ConfigError::new(
                            PEERS,
                            args.peers.as_deref().unwrap_or_default(),
                            format!(
                                "exactly CONF_PADDLE_GRADIENT_NUM = {trainers} addresses, got {}",
                                ips.len()
                            ),
                        ));
                    }
                    if let Some(text) = present(&args.selector) {
                        return Err(ConfigError::new(
                            SELECTOR,
                            text,
                            "no selector together with --peers (static membership uses no API)",
                        ));
                    }
                    Discovery::Static { ips }
                }
                (None, None) => Discovery::Kubernetes {
                    groups: vec![Group {
                        kind: GroupKind::Job,
                        selector: selector(
                            &args.selector,
                            SELECTOR,
                            format!("job-name={job_name}"),
                        )?,
                        expected: trainers,
                        ranking: Ranking::default(),
                    }],
                },
            };
            let pservers = if protocol.has_pservers() { trainers } else { 0 };
            (trainers, pservers, discovery)
        } else {
            if let Some(text) = present(&args.peers) {
                return Err(ConfigError::new(
                    PEERS,
                    text,
                    "no static peers with --role pserver/trainer (the split layout is found through Kubernetes)",
                ));
            }
            if let Some(text) = present(&args.dns) {
                return Err(ConfigError::new(
                    DNS,
                    text,
                    "no DNS membership with --role pserver/trainer (the split layout is found through Kubernetes)",
                ));
            }
            let expected_trainers =
                "the number of trainer pods (required with --role pserver/trainer)";
            let trainers = count(&args.trainer_count, TRAINER_COUNT)?
                .ok_or_else(|| ConfigError::new(TRAINER_COUNT, "", expected_trainers))?;
            if let Some(n) = gradient_num.filter(|&n| n != trainers) {
                return Err(ConfigError::new(
                    GRADIENT_NUM,
                    &n.to_string(),
                    format!("the number of trainer pods, TRAINERS = {trainers} (or unset)"),
                ));
            }
            let mut groups = Vec::new();
            let mut pservers = 0;
            if protocol.has_pservers() {
                pservers = count(&args.pserver_count, PSERVER_COUNT)?.ok_or_else(|| {
                    ConfigError::new(
                        PSERVER_COUNT,
                        "",
                        "the number of pserver pods (required with --role pserver/trainer)",
                    )
                })?;
                groups.push(Group {
                    kind: GroupKind::Pservers,
                    selector: selector(
                        &args.pserver_selector,
                        PSERVER_SELECTOR,
                        format!("paddle-job-pserver={job_name}"),
                    )?,
                    expected: pservers,
                    ranking: Ranking::default(),
                });
            }
            let trainer_group = Group {
                kind: GroupKind::Trainers,
                selector: selector(
                    &args.trainer_selector,
                    TRAINER_SELECTOR,
                    format!("paddle-job={job_name}"),
                )?,
                expected: trainers,
                ranking: Ranking::default(),
            };
            // A pserver waits only for the pserver pods (its contract names no trainer); it
            // watches the trainer pods after the launch to know when the job is done.
            if role == PodRole::Trainer {
                groups.push(trainer_group);
            } else {
                trainers_to_finish = Some(trainer_group);
            }
            (trainers, pservers, Discovery::Kubernetes { groups })
        };
        let max_failed_trainers = present(&args.max_failed_trainers)
            .map(|text| parse_int(text, MAX_FAILED, 0, MAX_PODS as u64, "a number of pods"))
            .transpose()?
            .map(|n| n as u32);
        Ok(Topology {
            job_name,
            namespace,
            role,
            protocol,
            trainers,
            pservers,
            max_failed_trainers,
            watch_peers: match present(&args.watch_peers).unwrap_or("true") {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                other => return Err(ConfigError::new(WATCH_PEERS, other, "true or false")),
            },
            trainers_to_finish,
            pod_ip,
            pod_name,
            discovery,
        })
    }
}

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
        Ok(Ports {
            nic,
            pserver: ports,
            trainer: trainer_port,
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

impl Timing {
    pub fn from_args(args: &JobArgs) -> Result<Timing, ConfigError> {
        let wait_timeout = seconds(&args.wait_timeout, WAIT_TIMEOUT, 1800)?;
        let pserver_timeout = seconds(&args.pserver_timeout, PSERVER_TIMEOUT, 300)?;
        Ok(Timing {
            wait_timeout: (!wait_timeout.is_zero()).then_some(wait_timeout),
            pserver_timeout,
            linger: seconds(&args.linger, LINGER, 30)?,
            grace_period: seconds(&args.grace_period, GRACE_PERIOD, 10)?,
        })
    }
}

impl Control {
    pub fn from_args(args: &JobArgs) -> Result<Control, ConfigError> {
        let secret = match args.job_secret.as_deref().filter(|s| !s.is_empty()) {
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
        let port = |text: &str, variable| {
            parse_int(text, variable, 1, 65535, "a TCP port").map(|n| n as u16)
        };
        let coordinator = present(&args.coordinator)
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
                Ok((host.to_string(), port(number, COORDINATOR).map_err(|_| bad())?))
            })
            .transpose()?;
        let max_restarts = present(&args.max_restarts)
            .map(|text| parse_int(text, MAX_RESTARTS, 0, 10_000, "a number of restarts"))
            .transpose()?
            .unwrap_or(0) as u32;
        if max_restarts > 0 && secret.is_none() && secret_file.is_none() {
            return Err(ConfigError::new(
                MAX_RESTARTS,
                &max_restarts.to_string(),
                "0 without a job secret: the launchers agree on restarts over the control channel \
                 (set PADDLE_LAUNCHER_JOB_SECRET or PADDLE_LAUNCHER_JOB_SECRET_FILE)",
            ));
        }
        Ok(Control {
            max_restarts,
            dns_server: dns_server(args)?,
            secret,
            secret_file,
            coordinator,
            port: present(&args.control_port)
                .map(|text| port(text, CONTROL_PORT))
                .transpose()?
                .unwrap_or(DEFAULT_CONTROL_PORT),
            heartbeat_timeout: match seconds(&args.heartbeat_timeout, HEARTBEAT_TIMEOUT, 10)? {
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

impl Workspace {
    pub fn from_args(args: &JobArgs) -> Result<Workspace, ConfigError> {
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
        })
    }
}

/// Where the exit reason goes: the default path, a given one, or nowhere when set empty.
/// Known even when the rest of the configuration is invalid, so that the reason is written.
pub fn termination_log(args: &JobArgs) -> Option<PathBuf> {
    match args.termination_log.as_deref() {
        None => Some(PathBuf::from(DEFAULT_TERMINATION_LOG)),
        Some("") => None,
        Some(path) => Some(PathBuf::from(path)),
    }
}

/// Empty environment variables count as unset, as Kubernetes manifests often carry `value: ""`.
pub(crate) fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn required(value: &Option<String>, variable: Opt, what: &str) -> Result<String, ConfigError> {
    present(value)
        .map(str::to_string)
        .ok_or_else(|| ConfigError::new(variable, "", format!("{what} (it is required)")))
}

fn parse_int(
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

fn parse_peers(text: &str) -> Result<Vec<IpAddr>, ConfigError> {
    text.split(',')
        .map(|ip| {
            ip.trim().parse::<IpAddr>().map_err(|_| {
                ConfigError::new(
                    PEERS,
                    text,
                    format!("comma-separated IP addresses, `{}` is not one", ip.trim()),
                )
            })
        })
        .collect()
}

/// The coordinator an Indexed Job with a headless Service implies: pod 0 of the job by its DNS
/// name, `<job>-0.<subdomain>` (a pod's hostname is `<job>-<index>`, and with `subdomain` the
/// kubelet writes its FQDN `<job>-<index>.<subdomain>.<ns>.svc...` into /etc/hosts). None
/// without a completion index or a subdomain: there is no stable name to derive.
pub fn indexed_job_coordinator(
    completion_index: Option<&str>,
    hostname: &str,
    etc_hosts: &str,
    job_name: &str,
    port: u16,
) -> Option<(String, u16)> {
    let index: u32 = completion_index?.trim().parse().ok()?;
    // This pod's Job must be the job (JOB_NAME): under JobSet a child Job is only a part.
    let job = hostname
        .strip_suffix(&format!("-{index}"))
        .filter(|job| *job == job_name)?;
    let fqdn = etc_hosts
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .find(|field| field.starts_with(&format!("{hostname}.")))?;
    let subdomain = fqdn.split('.').nth(1).filter(|s| !s.is_empty())?;
    Some((format!("{job}-0.{subdomain}"), port))
}

/// --dns-server: for --dns, and for a coordinator named by DNS.
fn dns_server(args: &JobArgs) -> Result<Option<SocketAddr>, ConfigError> {
    present(&args.dns_server)
        .map(|text| {
            text.parse().map_err(|_| {
                ConfigError::new(
                    DNS_SERVER,
                    text,
                    "ip:port of a DNS server, e.g. 10.96.0.10:53",
                )
            })
        })
        .transpose()
}

fn seconds(value: &Option<String>, variable: Opt, default: u64) -> Result<Duration, ConfigError> {
    match present(value) {
        None => Ok(Duration::from_secs(default)),
        Some(text) => {
            parse_int(text, variable, 0, 7 * 24 * 3600, "whole seconds").map(Duration::from_secs)
        }
    }
}

/// A command line split on whitespace (no shell); empty counts as unset, like every variable.
fn command(value: &Option<String>, default: &str) -> Vec<String> {
    present(value)
        .unwrap_or(default)
        .split_whitespace()
        .map(str::to_string)
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> JobArgs {
        JobArgs {
            job_name: Some("paddle-cluster-job".into()),
            gradient_num: Some("3".into()),
            ..JobArgs::default()
        }
    }

    fn with(f: impl FnOnce(&mut JobArgs)) -> Result<Config, ConfigError> {
        let mut args = base();
        f(&mut args);
        Config::from_args(&args)
    }

    #[test]
    fn seed_defaults() {
        let c = with(|_| {}).unwrap();
        assert_eq!(
            c.ports.pserver,
            PortLayout {
                first: 7164,
                dense: 1,
                sparse: 0
            }
        );
        assert_eq!(c.ports.nic, "eth0");
        // Empty counts as unset, for commands too.
        let blank = with(|a| a.pserver_cmd = Some("  ".into())).unwrap();
        assert_eq!(blank.program.pserver_cmd, ["paddle", "pserver"]);
        assert_eq!(c.program.pserver_cmd, ["paddle", "pserver"]);
        assert_eq!(c.program.trainer_cmd, ["paddle", "train"]);
        assert_eq!(
            c.topology.discovery,
            Discovery::Kubernetes {
                groups: vec![Group {
                    kind: GroupKind::Job,
                    selector: LabelSelector::parse("job-name=paddle-cluster-job").unwrap(),
                    expected: 3,
                    ranking: Ranking::default(),
                }]
            }
        );
        assert_eq!(
            (c.topology.role, c.topology.protocol, c.topology.pservers),
            (PodRole::Both, Protocol::V1, 3)
        );
        assert_eq!(c.timing.wait_timeout, Some(Duration::from_secs(1800)));
        assert_eq!(
            termination_log(&base()),
            Some(PathBuf::from("/dev/termination-log"))
        );
    }

    /// Every rejected value names its variable, echoes the value and says what is expected.
    #[test]
    fn validation_table() {
        type Edit = fn(&mut JobArgs);
        let cases: &[(Edit, &dyn std::fmt::Display, &str, &str)] = &[
            (|a| a.job_name = None, &JOB_NAME, "", "required"),
            (
                |a| a.job_name = Some("Paddle_Job".into()),
                &JOB_NAME,
                "Paddle_Job",
                "job name",
            ),
            (
                |a| a.namespace = Some("Prod".into()),
                &NAMESPACE,
                "Prod",
                "namespace",
            ),
            (|a| a.port = Some("abc".into()), &PORT, "abc", "TCP port"),
            (|a| a.port = Some("0".into()), &PORT, "0", "from 1 to 65535"),
            (
                |a| a.port = Some("70000".into()),
                &PORT,
                "70000",
                "from 1 to 65535",
            ),
            (|a| a.port = Some("-1".into()), &PORT, "-1", "integer"),
            (
                |a| {
                    a.port = Some("65535".into());
                    a.ports_num = Some("2".into())
                },
                &PORT,
                "65535",
                "would end at 65536",
            ),
            (
                |a| a.ports_num = Some("0".into()),
                &PORTS_NUM,
                "0",
                "from 1",
            ),
            (
                |a| a.ports_num_sparse = Some("x".into()),
                &PORTS_NUM_SPARSE,
                "x",
                "integer",
            ),
            (
                |a| a.gradient_num = Some("0".into()),
                &GRADIENT_NUM,
                "0",
                "from 1",
            ),
            (
                |a| a.gradient_num = Some("3.5".into()),
                &GRADIENT_NUM,
                "3.5",
                "integer",
            ),
            (
                |a| a.gradient_num = None,
                &GRADIENT_NUM,
                "",
                "number of pods",
            ),
            (
                |a| a.pod_ip = Some("10.0.0.300".into()),
                &POD_IP,
                "10.0.0.300",
                "IPv4 or IPv6",
            ),
            (
                |a| a.pod_name = Some("Pod_1".into()),
                &POD_NAME,
                "Pod_1",
                "pod name",
            ),
            (
                |a| a.selector = Some("job name=x".into()),
                &SELECTOR,
                "job name=x",
                "label selector",
            ),
            (
                |a| a.selector = Some("a=b,".into()),
                &SELECTOR,
                "a=b,",
                "empty requirement",
            ),
            (
                |a| a.peers = Some("10.0.0.1,nope,x".into()),
                &PEERS,
                "10.0.0.1,nope,x",
                "`nope`",
            ),
            (
                |a| a.peers = Some("10.0.0.1".into()),
                &PEERS,
                "10.0.0.1",
                "exactly CONF_PADDLE_GRADIENT_NUM = 3",
            ),
            (
                |a| a.wait_timeout = Some("10m".into()),
                &WAIT_TIMEOUT,
                "10m",
                "whole seconds",
            ),
            (
                |a| a.linger = Some("-5".into()),
                &LINGER,
                "-5",
                "whole seconds",
            ),
            (
                |a| a.nic = Some("eth0/1".into()),
                &NIC,
                "eth0/1",
                "interface",
            ),
            (
                |a| a.train_config_dir = Some("cfg".into()),
                &TRAIN_CONFIG_DIR,
                "cfg",
                "JOB_PATH",
            ),
            (
                |a| a.trainer_args = vec!["--ports_num=2".into()],
                &TRAINER_ARGS,
                "--ports_num=2",
                "CONF_PADDLE_PORTS_NUM (--ports-num) (1)",
            ),
            (
                |a| a.role = Some("worker".into()),
                &ROLE,
                "worker",
                "both, pserver, trainer",
            ),
            (
                |a| a.protocol = Some("v3".into()),
                &PROTOCOL,
                "v3",
                "v1, v2, fleet, collective",
            ),
            (
                |a| {
                    a.role = Some("pserver".into());
                    a.protocol = Some("collective".into())
                },
                &ROLE,
                "pserver",
                "collective protocol has no pservers",
            ),
            (
                |a| a.role = Some("trainer".into()),
                &TRAINER_COUNT,
                "",
                "number of trainer pods",
            ),
            (
                |a| {
                    a.role = Some("trainer".into());
                    a.trainer_count = Some("4".into());
                    a.pserver_count = Some("2".into())
                },
                &GRADIENT_NUM,
                "3",
                "TRAINERS = 4",
            ),
            (
                |a| {
                    a.role = Some("trainer".into());
                    a.gradient_num = None;
                    a.trainer_count = Some("4".into())
                },
                &PSERVER_COUNT,
                "",
                "number of pserver pods",
            ),
            (
                |a| {
                    a.role = Some("trainer".into());
                    a.peers = Some("10.0.0.1".into())
                },
                &PEERS,
                "10.0.0.1",
                "no static peers",
            ),
            (
                |a| a.entry = Some("python t.py".into()),
                &ENTRY,
                "python t.py",
                "no entry command with --protocol v1",
            ),
            (
                |a| a.protocol = Some("collective".into()),
                &ENTRY,
                "",
                "the training program",
            ),
            (
                |a| {
                    a.protocol = Some("v2".into());
                    a.entry = Some("python t.py".into());
                    a.trainer_args = vec!["python".into()]
                },
                &ENTRY,
                "python t.py",
                "not both",
            ),
            (
                |a| a.trainer_port = Some("0".into()),
                &TRAINER_PORT,
                "0",
                "TCP port",
            ),
            (
                |a| a.max_failed_trainers = Some("x".into()),
                &MAX_FAILED,
                "x",
                "integer",
            ),
            (
                |a| a.train_files = Some("data/[".into()),
                &TRAIN_FILES,
                "data/[",
                "glob pattern",
            ),
            (
                |a| a.trainer_args = vec!["--save_dir".into()],
                &TRAINER_ARGS,
                "--save_dir",
                "a value",
            ),
        ];
        for (edit, variable, value, expected) in cases {
            let err = with(*edit).expect_err(&format!("accepted a bad {variable}={value:?}"));
            assert_eq!(err.variable, variable.to_string(), "{err}");
            assert_eq!(err.value, *value, "{err}");
            assert!(err.expected.contains(expected), "{err} lacks {expected:?}");
            let line = err.to_string();
            assert!(
                !line.contains('\n') && line.contains(&variable.to_string()),
                "{line}"
            );
        }
    }

    #[test]
    fn timing_wait_of_zero_is_forever_and_defaults_hold() {
        let t = Timing::from_args(&JobArgs {
            wait_timeout: Some("0".into()),
            linger: Some("5".into()),
            ..JobArgs::default()
        })
        .unwrap();
        assert_eq!(t.wait_timeout, None);
        assert_eq!(t.linger, Duration::from_secs(5));
        assert_eq!(
            (t.pserver_timeout, t.grace_period),
            (Duration::from_secs(300), Duration::from_secs(10))
        );
    }

    #[test]
    fn workspace_lists_follow_the_workdir_and_an_empty_id_dir_is_off() {
        let w = Workspace::from_args(&JobArgs {
            workdir: Some("/w".into()),
            id_dir: Some(String::new()),
            test_list: Some("/lists/test".into()),
            ..JobArgs::default()
        })
        .unwrap();
        assert_eq!(w.train_list, PathBuf::from("/w/train.list"));
        assert_eq!(w.test_list, PathBuf::from("/lists/test"));
        assert_eq!(w.id_dir, None);
        let default = Workspace::from_args(&JobArgs::default()).unwrap();
        assert_eq!(default.id_dir, Some(PathBuf::from("/")));
    }

    #[test]
    fn ports_need_nothing_else_and_default_to_the_seed() {
        let p = Ports::from_args(&JobArgs::default()).unwrap();
        assert_eq!(
            (p.nic.as_str(), p.pserver.first, p.trainer),
            ("eth0", 7164, 6170)
        );
    }

    #[test]
    fn a_split_pserver_waits_for_pservers_and_watches_the_trainers() {
        let t = Topology::from_args(&JobArgs {
            job_name: Some("j".into()),
            role: Some("pserver".into()),
            pserver_count: Some("2".into()),
            trainer_count: Some("3".into()),
            ..JobArgs::default()
        })
        .unwrap();
        assert_eq!((t.trainers, t.pservers), (3, 2));
        let Discovery::Kubernetes { groups } = &t.discovery else {
            panic!("{:?}", t.discovery)
        };
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].kind, GroupKind::Pservers);
        assert_eq!(
            t.trainers_to_finish.map(|g| g.selector.to_string()),
            Some("paddle-job=j".to_string())
        );
    }

    #[test]
    fn program_pass_through_is_checked_against_the_ports_and_counts() {
        let args = JobArgs {
            job_name: Some("j".into()),
            gradient_num: Some("2".into()),
            trainer_args: vec!["--num_gradient_servers=2".into(), "--x=1".into()],
            ..JobArgs::default()
        };
        let topology = Topology::from_args(&args).unwrap();
        let ports = Ports::from_args(&args).unwrap();
        let program = Program::from_args(&args, &topology, &ports).unwrap();
        assert_eq!(program.trainer_args.rest, ["--x=1"]);
        let four = Topology {
            trainers: 4,
            ..topology
        };
        let err = Program::from_args(&args, &four, &ports).unwrap_err();
        assert_eq!(err.variable, TRAINER_ARGS);
    }

    /// Messages name options by their clap definition: each one named here must have one.
    #[test]
    fn every_named_option_has_a_definition() {
        for opt in NAMED_OPTIONS {
            let label = opt.to_string();
            assert!(
                label.ends_with(&format!("(--{})", opt.0.replace('_', "-"))),
                "{label}"
            );
            assert_ne!(opt.env(), opt.0, "{label} has no environment variable");
        }
        assert_eq!(PORT.to_string(), "CONF_PADDLE_PORT (--port)");
    }

    #[test]
    fn highest_valid_port_range_is_accepted() {
        let c = with(|a| {
            a.port = Some("65533".into());
            a.ports_num = Some("2".into());
            a.ports_num_sparse = Some("1".into());
        })
        .unwrap();
        assert_eq!(
            c.ports.pserver.ports().collect::<Vec<_>>(),
            [65533, 65534, 65535]
        );
    }

    #[test]
    fn peers_give_the_count_and_static_discovery() {
        let c = with(|a| {
            a.gradient_num = None;
            a.peers = Some("10.0.0.2, 10.0.0.1".into());
        })
        .unwrap();
        assert_eq!(c.topology.trainers, 2);
        assert_eq!(
            c.topology.discovery,
            Discovery::Static {
                ips: vec!["10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap()]
            }
        );
    }

    #[test]
    fn pass_through_separates_overrides_from_the_rest() {
        let c = with(|a| {
            a.ports_num = Some("2".into());
            a.trainer_args = [
                "--dot_period=10",
                "--ports_num=2",
                "--save_dir",
                "/out",
                "-local=1",
                "--config=trainer_config.lr.py",
                "--save_dir=/out2",
            ]
            .map(String::from)
            .to_vec();
        })
        .unwrap();
        assert_eq!(
            c.program.trainer_args.overrides,
            [("ports_num", "2"), ("local", "1"), ("save_dir", "/out2")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert_eq!(
            c.program.trainer_args.rest,
            ["--dot_period=10", "--config=trainer_config.lr.py"]
        );
    }

    #[test]
    fn an_indexed_job_with_a_subdomain_implies_its_pod_0_as_coordinator() {
        let hosts = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.1.2.3\ttrain-2.train-pods.team-a.svc.cluster.local\ttrain-2\n";
        let derive = |index, hostname, hosts, job| {
            indexed_job_coordinator(index, hostname, hosts, job, 6171)
        };
        assert_eq!(
            derive(Some("2"), "train-2", hosts, "train"),
            Some(("train-0.train-pods".to_string(), 6171))
        );
        // No index (not an Indexed Job), a hostname of another index, no subdomain: nothing.
        assert_eq!(derive(None, "train-2", hosts, "train"), None);
        assert_eq!(derive(Some("3"), "train-2", hosts, "train"), None);
        let bare = "127.0.0.1\tlocalhost\n10.1.2.3\ttrain-2\n";
        assert_eq!(derive(Some("2"), "train-2", bare, "train"), None);
        // A JobSet's child Job `train-workers-1` of job `train`: its pod 0 is not the job's.
        let child =
            "10.1.2.4\ttrain-workers-1-2.train.team-a.svc.cluster.local\ttrain-workers-1-2\n";
        assert_eq!(derive(Some("2"), "train-workers-1-2", child, "train"), None);
    }
}
