//! Raw option text -> validated `Config`. Pure: no network, no files. Each bad value yields one
//! `ConfigError` naming the variable and flag, the value, and what is expected.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::JobArgs;

pub mod options;
mod parts;
mod topology;

use crate::error::ConfigError;
use crate::selector::{is_dns_label, is_dns_subdomain, LabelSelector};
use crate::vocabulary::{PodRole, Protocol};
pub use options::*;
pub use parts::{children_grace, termination_log, termination_log_given};

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
    /// Preemptions that restart the job without spending a restart
    /// (`UNBOUNDED_PREEMPTIONS`: every one).
    pub max_preemptions: u32,
    /// Where a coordinator named by DNS is resolved (--dns-server); None: resolv.conf.
    pub dns_server: Option<SocketAddr>,
    /// The job may train on with fewer pods (--min-pods below the pod count).
    pub elastic: Option<Elastic>,
}

/// An elastic job: it trains with `min_pods` up to the job's pod count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elastic {
    pub min_pods: u32,
    /// The job's pod count: its size when every pod trains.
    pub max_pods: u32,
    /// How long the pods that are not Running are waited for before the job goes on without
    /// them, and how long arrivals are gathered into one restart.
    pub wait: Duration,
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
    /// The trainer processes each pod runs.
    pub processes: Processes,
}

/// The ports of `per_pod` trainer processes from `first` up: `first` alone for one; for
/// several, the ports that are not the control channel's (`control`). Fewer when the range
/// runs out.
pub fn trainer_ports(first: u16, per_pod: usize, control: &[u16]) -> Vec<u16> {
    if per_pod == 1 {
        return vec![first];
    }
    (first..=u16::MAX)
        .filter(|port| !control.contains(port))
        .take(per_pod)
        .collect()
}

/// Most trainer processes a pod may run: more than any node has devices, and a typo like
/// 80000 is refused rather than forked.
pub const MAX_NPROC_PER_POD: u32 = 1024;

/// --nproc-per-pod as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerPod {
    Count(u32),
    /// As many as the pod has devices (`devices::resolve`).
    Auto,
}

/// The trainer processes of each pod: how many, and on what. `per_pod` is final once
/// `devices::resolve` has looked at the pod (for `auto`, 1 until then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processes {
    pub asked: PerPod,
    pub per_pod: u32,
    /// The GPUs this pod sees (0: none, the processes use gloo on CPUs).
    pub devices: u32,
    /// What the launcher found and why it runs `per_pod` processes (a log line).
    pub found: String,
    /// The pod's own values of the variables the processes would otherwise be given
    /// (PADDLE_DISTRI_BACKEND, FLAGS_selected_gpus for one process: the user's win).
    pub given: std::collections::BTreeMap<String, String>,
}

impl Processes {
    pub fn one() -> Processes {
        Processes {
            asked: PerPod::Count(1),
            per_pod: 1,
            devices: 0,
            found: String::new(),
            given: Default::default(),
        }
    }

    /// Several processes per pod: the per-node contract of `paddle.distributed.launch`; one is
    /// the seed's contract, byte for byte.
    pub fn several(&self) -> bool {
        self.per_pod > 1
    }
}

/// The network side: the NIC given to Paddle, the pservers' ports and the trainers' port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    pub nic: String,
    pub pserver: PortLayout,
    /// Port of each trainer's own endpoint (fleet, collective).
    pub trainer: u16,
    /// Each trainer process's own port, local rank order: `trainer` for one process; settled
    /// with the number of processes per pod (`Config::settle_trainer_ports`).
    pub trainers: Vec<u16>,
    /// Before a collective trainer starts, check that every peer's address answers.
    pub check_peers: bool,
    /// The metrics endpoint's port; None: off.
    pub metrics: Option<u16>,
    /// The socket interfaces chosen for NCCL and gloo, and why (filled in once the pod's own
    /// address and the host's interfaces are known: see `network::choose`).
    pub sockets: Vec<crate::network::SocketSetting>,
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
    /// The children's time between SIGTERM and SIGKILL (see `children_grace`).
    pub grace_period: Duration,
    /// --grace-period as given; None: derived from the pod's.
    pub grace_given: Option<Duration>,
    /// The pod's terminationGracePeriodSeconds, when known.
    pub pod_grace: Option<Duration>,
    /// How long a trainer may make no progress; None: never judged hung.
    pub hang_timeout: Option<Duration>,
    /// How long it may take to its first progress.
    pub hang_first_window: Duration,
    /// Whether output shows progress (until the progress file is first written), or the
    /// progress file alone does (`--hang-progress file`).
    pub hang_output_counts: bool,
    /// When the coordinator names a rank a straggler; None: never.
    pub stragglers: Option<crate::straggler::Rules>,
    /// The signal that asks a trainer for a checkpoint; None: never asked.
    pub checkpoint_signal: Option<i32>,
    /// --checkpoint-window as given; None: see `checkpoint`.
    pub checkpoint_window: Option<Duration>,
    /// The job has a control channel (a job secret, or its file): the children's grace period
    /// is shared with the others' stop, and a preemption is the job's.
    pub channel: bool,
}

impl Timing {
    /// How a trainer is asked for a checkpoint, and how long a preempted pod gives it, when
    /// it does: as given, else, with a channel, the children's grace period, cut so that the
    /// window, the children's stop and the launcher's own exit fit in the pod's grace period.
    /// Without a channel no other trainer could join the checkpoint (the peers stop when the
    /// pod terminates): no window unless given.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        let signal = self.checkpoint_signal?;
        let window = match (self.checkpoint_window, self.channel, self.pod_grace) {
            (Some(given), _, _) => given,
            (None, false, _) => Duration::ZERO,
            (None, true, None) => self.grace_period,
            (None, true, Some(pod)) => self
                .grace_period
                .min(pod.saturating_sub(self.grace_period + parts::OWN_EXIT_MARGIN)),
        };
        Some(Checkpoint { signal, window }).filter(|_| !window.is_zero())
    }

    /// What the pod's stop may take, the children's time being `children` (the pod's own
    /// grace period, once read, may have set it: `children_grace_seen`).
    pub fn stop_times(&self, children: Duration) -> StopTimes {
        StopTimes {
            children,
            window: self.checkpoint().map_or(Duration::ZERO, |c| c.window),
            pod: self.pod_grace,
            channel: self.channel,
        }
    }
}

/// The kubelet's shortest grace period: a deletion that gives less (a force delete's 0)
/// still leaves the containers 2 s after SIGTERM (kubelet, kuberuntime_container.go:
/// `minimumGracePeriodInSeconds`).
pub const KUBELET_MIN_GRACE: Duration = Duration::from_secs(2);

/// What a pod's stop may take, as the launcher shares out its pod's grace period: the
/// children's time between SIGTERM and SIGKILL, a preempted pod's checkpoint window, and the
/// launcher's own exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopTimes {
    /// The children's time between SIGTERM and SIGKILL.
    pub children: Duration,
    /// A preempted pod's checkpoint window (zero: none).
    pub window: Duration,
    /// The pod's grace period, when known.
    pub pod: Option<Duration>,
    /// The job has a control channel: the children's time is shared with the others' stop.
    pub channel: bool,
}

impl StopTimes {
    /// The times cut to a deletion's grace period (`grace`: `metadata.deletionGracePeriodSeconds`
    /// at least the kubelet's shortest; `left`: what it leaves from now) when it is shorter than
    /// the pod's own:
    /// shared out as the pod's is (`children_grace`, `Timing::checkpoint`) — the launcher's own
    /// exit first (`OWN_EXIT_MARGIN`, at most a fifth of a short grace), then the children's
    /// stop (half the rest with a channel, at least 1 s), the window what is left — and never
    /// longer than given. None when the deletion leaves the pod all its time.
    pub fn within(self, grace: Duration, left: Duration) -> Option<StopTimes> {
        let whole = self
            .pod
            .unwrap_or(self.children + self.window + parts::OWN_EXIT_MARGIN);
        // The deletion's own grace, not what is left of it: an ordinary deletion read a moment
        // after its SIGTERM leaves a little less than the pod's, and cuts nothing.
        if grace >= whole {
            return None;
        }
        let left = left.min(grace);
        let usable = left - parts::OWN_EXIT_MARGIN.min(left / 5);
        let share = match self.channel {
            true => usable / 2,
            false => usable,
        };
        let children = self.children.min(share.max(Duration::from_secs(1)));
        Some(StopTimes {
            children,
            window: self.window.min(usable.saturating_sub(children)),
            pod: Some(left),
            channel: self.channel,
        })
    }
}

/// How a trainer is asked for a checkpoint, and how long a preempted pod gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub signal: i32,
    pub window: Duration,
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
    /// The trainer's progress file (`PADDLE_LAUNCHER_PROGRESS_FILE`).
    pub progress_file: PathBuf,
    /// The directory of the processes' own log files (`PADDLE_LOG_DIR`); None: not written.
    pub log_dir: Option<PathBuf>,
    /// --log-dir was given (a directory that cannot be made is then bad input; the default's
    /// is only said, and the files not written).
    pub log_dir_given: bool,
}

impl Config {
    /// Validates every option; the parts in the order their rules depend on each other.
    pub fn from_args(args: &JobArgs) -> Result<Config, ConfigError> {
        let topology = Topology::from_args(args)?;
        let ports = Ports::from_args(args)?;
        let program = Program::from_args(args, &topology, &ports)?;
        let timing = Timing::from_args(args)?;
        let workspace = Workspace::from_args(args, topology.protocol)?;
        let control = Control::from_args(args)?;
        let mut config = Config {
            runtime: None,
            topology,
            ports,
            program,
            timing,
            workspace,
            control,
        };
        config.settle_trainer_ports()?;
        config.one_list_per_pod()?;
        config.straggler_window_fits()?;
        config.control.elastic = parts::elastic(args, &config)?;
        Ok(config)
    }

    /// A straggler window holds several of every launcher's reports: a window without a
    /// launcher's report does not judge its ranks, so a shorter one would never name any.
    fn straggler_window_fits(&self) -> Result<(), ConfigError> {
        let heartbeat = self.control.heartbeat_timeout;
        match self.timing.stragglers {
            Some(rules) if rules.window < heartbeat => Err(ConfigError::new(
                STRAGGLER_WINDOW,
                &rules.window.as_secs().to_string(),
                format!(
                    "at least the heartbeat timeout, {} s ({HEARTBEAT_TIMEOUT}): every launcher reports its processes' steps once every third of it, and a window without a launcher's report does not judge its ranks; or 0 for none",
                    heartbeat.as_secs()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// --train-files and --test-files share the files out by pod (one list each): with
    /// several processes per pod every process would read its pod's whole share.
    pub fn one_list_per_pod(&self) -> Result<(), ConfigError> {
        let n = self.topology.processes.per_pod;
        let lists = [
            (&self.workspace.train_files, TRAIN_FILES),
            (&self.workspace.test_files, TEST_FILES),
        ];
        match lists.into_iter().find(|(files, _)| files.is_some()) {
            Some((Some(files), opt)) if n > 1 => Err(ConfigError::new(
                opt,
                files,
                format!(
                    "unset with {n} trainer processes per pod ({NPROC_PER_POD}): the lists are one per pod; share the files out in the program by PADDLE_TRAINER_ID of PADDLE_TRAINERS_NUM"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Settles the trainer processes' ports (`ports.trainers`), local rank order, once the
    /// number of processes is known: --trainer-port for one; for several, the ports from there
    /// up that the control channel does not use (its default 6171 is next to the trainers'
    /// 6170), the same on every pod.
    pub fn settle_trainer_ports(&mut self) -> Result<(), ConfigError> {
        let first = self.ports.trainer;
        let per_pod = self.topology.processes.per_pod as usize;
        let coordinator = self.control.coordinator.as_ref().map(|(_, port)| *port);
        let taken: Vec<u16> = std::iter::once(self.control.port)
            .chain(coordinator)
            .chain(self.ports.metrics)
            .collect();
        let ports = trainer_ports(first, per_pod, &taken);
        if ports.len() < per_pod {
            return Err(ConfigError::new(
                TRAINER_PORT,
                &first.to_string(),
                format!(
                    "a port with room for {per_pod} trainer ports above it, one per process ({NPROC_PER_POD})"
                ),
            ));
        }
        self.ports.trainers = ports;
        self.metrics_port_is_free()
    }

    /// The metrics port is none of the launcher's others (the trainers', the pservers', the
    /// control channel's): one listener would take it from the other.
    fn metrics_port_is_free(&self) -> Result<(), ConfigError> {
        let Some(metrics) = self.ports.metrics else {
            return Ok(());
        };
        let taken = |port: &u16| *port == metrics;
        let used_by = if self.control.port == metrics {
            Some(format!("the control channel's (--control-port {metrics})"))
        } else if self.ports.trainers.iter().any(taken) {
            Some("a trainer process's (--trainer-port and up)".to_string())
        } else if self.ports.pserver.ports().any(|p| taken(&p)) {
            Some("a pserver's (CONF_PADDLE_PORT and up)".to_string())
        } else {
            None
        };
        match used_by {
            Some(used_by) => Err(ConfigError::new(
                METRICS_PORT,
                &metrics.to_string(),
                format!("a port the launcher uses for nothing else: it is {used_by}; or 0 for no metrics"),
            )),
            None => Ok(()),
        }
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

    /// The configuration of an attempt of `trainer_pods` pods: an elastic job's world is the
    /// epoch's members (ranks, world size and endpoints follow), not the pod count it may grow
    /// back to. Any other job's members are its pod count.
    pub fn for_epoch(&self, trainer_pods: usize) -> Config {
        let mut epoch = self.clone();
        if self.control.elastic.is_some() {
            let pods = u32::try_from(trainer_pods).unwrap_or(u32::MAX);
            epoch.topology.trainers = pods;
            epoch.topology.pservers = pods;
        }
        epoch
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

#[cfg(test)]
mod tests {
    /// Issue 52: a deletion's grace period shorter than the pod's is shared out as the pod's:
    /// the launcher's own exit (5 s, at most a fifth), the children's stop (half the rest with
    /// a channel, at least 1 s), the window the rest; every part at most as configured, the
    /// whole within the deletion's; a deletion that leaves the pod its time cuts nothing.
    #[test]
    fn a_short_deletion_is_shared_out_as_the_pods_grace_period() {
        let ms = Duration::from_millis;
        let given = StopTimes {
            children: ms(12_000),
            window: ms(12_000),
            pod: Some(ms(30_000)),
            channel: true,
        };
        let cut = |left: u64| {
            given
                .within(ms(left), ms(left))
                .map(|c| (c.children.as_millis(), c.window.as_millis()))
        };
        assert_eq!(cut(30_000), None);
        assert_eq!(cut(60_000), None);
        // An ordinary deletion read a moment after its signal: nothing to cut.
        assert_eq!(given.within(ms(30_000), ms(29_900)), None);
        // What is left of a short one is what is shared out.
        assert_eq!(
            given.within(ms(5_000), ms(4_000)).map(|c| c.children),
            Some(ms(1_600))
        );
        assert_eq!(cut(29_000), Some((12_000, 12_000)));
        assert_eq!(cut(20_000), Some((8_000, 8_000)));
        assert_eq!(cut(5_000), Some((2_000, 2_000)));
        assert_eq!(cut(2_000), Some((1_000, 600)));
        assert_eq!(cut(500), Some((1_000, 0)));
        let alone = StopTimes {
            channel: false,
            window: Duration::ZERO,
            ..given
        };
        assert_eq!(
            alone.within(ms(10_000), ms(10_000)).map(|c| c.children),
            Some(ms(8_000))
        );
        // Not knowing the pod's: the configured parts and the exit are the whole.
        let unknown = StopTimes { pod: None, ..given };
        assert_eq!(unknown.within(ms(29_000), ms(29_000)), None);
        assert_eq!(
            unknown.within(ms(28_999), ms(28_999)).map(|c| c.pod),
            Some(Some(ms(28_999)))
        );
    }

    /// The children's grace period: as given (never above the pod's), else the pod's less the
    /// launcher's own exit, halved with a channel, at least 1 s; 10 s when nothing is known.
    #[test]
    fn the_childrens_grace_period_fits_the_pods() {
        let s = Duration::from_secs;
        let grace = |given: Option<u64>, pod: Option<u64>, channel| {
            children_grace(given.map(s), pod.map(s), channel)
        };
        assert_eq!(grace(None, None, true), Ok(s(10)));
        assert_eq!(grace(None, Some(30), false), Ok(s(25)));
        assert_eq!(grace(None, Some(30), true), Ok(s(12)));
        assert_eq!(grace(None, Some(2), false), Ok(s(1)));
        assert_eq!(grace(Some(20), Some(30), true), Ok(s(20)));
        assert_eq!(grace(Some(20), None, true), Ok(s(20)));
        let too_long = grace(Some(40), Some(30), false).unwrap_err().to_string();
        assert_eq!(
            too_long,
            "invalid PADDLE_LAUNCHER_GRACE_PERIOD (--grace-period): \"40\": expected at most the pod's grace period, 30 s (PADDLE_LAUNCHER_POD_GRACE_PERIOD (--pod-grace-period)): the kubelet kills the launcher and its children then"
        );
    }

    use super::options::NAMED_OPTIONS;
    use super::*;

    /// The checkpoint window fits the pod: with a channel it is the children's grace period,
    /// cut to leave their stop and the launcher's exit room; without one there is none unless
    /// given (no other trainer could join the checkpoint); `none` turns it all off.
    #[test]
    fn the_checkpoint_window_fits_the_pods_grace_period() {
        let s = Duration::from_secs;
        type Row = (
            Option<&'static str>,
            bool,
            Option<&'static str>,
            Option<&'static str>,
            Option<Duration>,
        );
        let rows: [Row; 7] = [
            // pod grace, channel, --grace-period, --checkpoint-window -> window
            (Some("30"), true, None, None, Some(s(12))),
            (None, true, None, None, Some(s(10))),
            // A grace period given long: the window is what is left.
            (Some("30"), true, Some("20"), None, Some(s(5))),
            (Some("30"), true, Some("28"), None, None),
            (Some("30"), false, None, None, None),
            (Some("30"), false, None, Some("4"), Some(s(4))),
            (None, true, None, Some("7"), Some(s(7))),
        ];
        for (pod, channel, grace, window, expected) in rows {
            let timing = with(|args| {
                args.pod_grace_period = pod.map(String::from);
                args.grace_period = grace.map(String::from);
                args.checkpoint_window = window.map(String::from);
                if channel {
                    args.job_secret = Some("0123456789abcdef0123456789abcdef".into());
                }
            })
            .unwrap()
            .timing;
            let got = timing.checkpoint().map(|c| c.window);
            assert_eq!(got, expected, "{pod:?} {channel} {grace:?} {window:?}");
            assert_eq!(
                timing.checkpoint().map(|c| c.signal),
                expected.map(|_| libc::SIGUSR1)
            );
        }
        let off = with(|args| args.checkpoint_signal = Some("none".into())).unwrap();
        assert_eq!(off.timing.checkpoint(), None);
        let refused = with(|args| {
            args.pod_grace_period = Some("30".into());
            args.grace_period = Some("20".into());
            args.checkpoint_window = Some("11".into());
        });
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("less the children's, 20 s"));
    }

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

    /// --hang-progress: output by default, the file alone when asked; anything else is refused
    /// in one line naming the option, the value and the two choices.
    #[test]
    fn what_shows_progress_is_output_or_the_file_alone() {
        assert!(with(|_| {}).unwrap().timing.hang_output_counts);
        let file = with(|a| a.hang_progress = Some("file".into())).unwrap();
        assert!(!file.timing.hang_output_counts);
        let output = with(|a| a.hang_progress = Some("output".into())).unwrap();
        assert!(output.timing.hang_output_counts);
        let bad = with(|a| a.hang_progress = Some("stdout".into())).unwrap_err();
        assert_eq!(
            bad.variable,
            "PADDLE_LAUNCHER_HANG_PROGRESS (--hang-progress)"
        );
        assert!(
            bad.expected.contains("`output`") && bad.expected.contains("`file`"),
            "{bad}"
        );
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

    /// The metrics are on by default at their own port, off with 0, and refused on a port the
    /// launcher uses for something else, naming what.
    #[test]
    fn the_metrics_port_is_one_of_its_own_or_none() {
        assert_eq!(
            with(|_| {}).unwrap().ports.metrics,
            Some(DEFAULT_METRICS_PORT)
        );
        let off = with(|a| a.metrics_port = Some("0".into())).unwrap();
        assert_eq!(off.ports.metrics, None);
        for (port, what) in [
            ("6171", "the control channel's"),
            ("6170", "a trainer process's"),
            ("7164", "a pserver's"),
        ] {
            let err = with(|a| a.metrics_port = Some(port.into()))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("PADDLE_LAUNCHER_METRICS_PORT") && err.contains(what),
                "{err}"
            );
        }
        // Several processes' ports go round it, as round the control port.
        let several = with(|a| {
            a.protocol = Some("collective".into());
            a.entry = Some("python t.py".into());
            a.nproc_per_pod = Some("3".into());
            a.metrics_port = Some("6172".into());
        })
        .unwrap();
        assert_eq!(several.ports.trainers, [6170, 6173, 6174]);
    }

    /// Stragglers are judged by default (30 s windows, 0.75, 3 in a row), never with a window
    /// of 0; a threshold outside (0, 1) or no windows is refused, naming the variable.
    #[test]
    fn straggler_rules_have_defaults_and_refuse_what_judges_nothing() {
        let rules = with(|_| {}).unwrap().timing.stragglers.unwrap();
        assert_eq!(rules, crate::straggler::Rules::default());
        assert_eq!(rules.window, Duration::from_secs(30));
        let off = with(|a| a.straggler_window = Some("0".into())).unwrap();
        assert_eq!(off.timing.stragglers, None);
        let given = with(|a| {
            a.straggler_threshold = Some("0.5".into());
            a.straggler_windows = Some("5".into());
        })
        .unwrap();
        let given = given.timing.stragglers.unwrap();
        assert_eq!((given.threshold, given.windows), (0.5, 5));
        for bad in ["0", "1", "1.5", "-0.2", "NaN", "half"] {
            let err = with(|a| a.straggler_threshold = Some(bad.into()))
                .unwrap_err()
                .to_string();
            assert!(err.contains("PADDLE_LAUNCHER_STRAGGLER_THRESHOLD"), "{err}");
        }
        let err = with(|a| a.straggler_windows = Some("0".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("PADDLE_LAUNCHER_STRAGGLER_WINDOWS"), "{err}");
        // Shorter than the heartbeat timeout, a window would miss launchers' reports.
        let err = with(|a| a.straggler_window = Some("5".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("PADDLE_LAUNCHER_STRAGGLER_WINDOW=5")
                || err.contains("PADDLE_LAUNCHER_STRAGGLER_WINDOW"),
            "{err}"
        );
        assert!(err.contains("heartbeat timeout, 10 s"), "{err}");
        let fits = with(|a| {
            a.straggler_window = Some("5".into());
            a.heartbeat_timeout = Some("5".into());
        });
        assert!(fits.is_ok());
    }

    #[test]
    fn workspace_lists_follow_the_workdir_and_an_empty_id_dir_is_off() {
        let args = JobArgs {
            workdir: Some("/w".into()),
            id_dir: Some(String::new()),
            test_list: Some("/lists/test".into()),
            ..JobArgs::default()
        };
        let w = Workspace::from_args(&args, Protocol::V1).unwrap();
        assert_eq!(w.train_list, PathBuf::from("/w/train.list"));
        assert_eq!(w.test_list, PathBuf::from("/lists/test"));
        assert_eq!(w.id_dir, None);
        let default = Workspace::from_args(&JobArgs::default(), Protocol::V1).unwrap();
        assert_eq!(default.id_dir, Some(PathBuf::from("/")));
        // Paddle 3's protocols write each process's log under <workdir>/log, as Paddle's
        // launcher does; the seed's protocols none, unless asked; empty is off.
        assert_eq!(w.log_dir, None);
        for protocol in [Protocol::Collective, Protocol::Fleet] {
            let w = Workspace::from_args(&args, protocol).unwrap();
            assert_eq!(w.log_dir, Some(PathBuf::from("/w/log")));
        }
        let off = JobArgs {
            log_dir: Some(String::new()),
            ..args.clone()
        };
        assert_eq!(
            Workspace::from_args(&off, Protocol::Collective)
                .unwrap()
                .log_dir,
            None
        );
        let asked = JobArgs {
            log_dir: Some("/logs".into()),
            ..args
        };
        let w = Workspace::from_args(&asked, Protocol::V2).unwrap();
        assert_eq!(w.log_dir, Some(PathBuf::from("/logs")));
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

    /// With a control channel the split layout's pods must all find the same members (one
    /// view, one coordinator): a pserver pod waits for the trainer pods too.
    #[test]
    fn with_a_channel_a_split_pserver_waits_for_the_whole_job() {
        let args = JobArgs {
            job_name: Some("j".into()),
            role: Some("pserver".into()),
            pserver_count: Some("2".into()),
            trainer_count: Some("3".into()),
            job_secret_file: Some("/etc/paddle/secret".into()),
            ..JobArgs::default()
        };
        let pserver = Topology::from_args(&args).unwrap();
        let trainer = Topology::from_args(&JobArgs {
            role: Some("trainer".into()),
            ..args
        })
        .unwrap();
        let kinds = |t: &Topology| match &t.discovery {
            Discovery::Kubernetes { groups } => groups
                .iter()
                .map(|g| (g.kind, g.selector.to_string(), g.expected))
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(kinds(&pserver), kinds(&trainer));
        assert_eq!(
            kinds(&pserver),
            [
                (GroupKind::Pservers, "paddle-job-pserver=j".to_string(), 2),
                (GroupKind::Trainers, "paddle-job=j".to_string(), 3)
            ]
        );
        // It still ends when every trainer pod has Succeeded, as the API shows.
        assert!(pserver.trainers_to_finish.is_some());
        assert!(trainer.trainers_to_finish.is_none());
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

    /// --min-pods and --elastic-wait: an elastic data-parallel job through the API with a
    /// channel; each other combination refused in one line naming the option, the value and
    /// what to use.
    #[test]
    fn an_elastic_job_is_data_parallel_found_through_the_api_with_a_channel() {
        let elastic = |f: &dyn Fn(&mut JobArgs)| {
            with(|a| {
                a.job_secret = Some("s".repeat(32));
                a.protocol = Some("collective".into());
                a.entry = Some("python train.py".into());
                a.min_pods = Some("2".into());
                f(a);
            })
        };
        let fine = elastic(&|_| {}).unwrap().control.elastic.unwrap();
        assert_eq!(fine.min_pods, 2);
        assert_eq!(fine.wait, DEFAULT_ELASTIC_WAIT);
        let given = elastic(&|a| a.elastic_wait = Some("1".into())).unwrap();
        assert_eq!(given.control.elastic.unwrap().wait, Duration::from_secs(1));
        // As many as the job has: not elastic.
        let all = elastic(&|a| a.min_pods = Some("3".into())).unwrap();
        assert_eq!(all.control.elastic, None);
        assert_eq!(with(|_| {}).unwrap().control.elastic, None);
        let refused =
            |f: &dyn Fn(&mut JobArgs), opt: crate::cli::Opt, value: &str, expected: &str| {
                let e = elastic(f).unwrap_err().to_string();
                let head = format!("invalid {} (--", opt.env());
                let value = format!(": \"{value}\": expected");
                assert!(
                    e.starts_with(&head) && e.contains(&value) && e.contains(expected),
                    "{e}"
                );
            };
        refused(
            &|a| a.min_pods = Some("0".into()),
            MIN_PODS,
            "0",
            "at most the job's pod count, an integer from 1 to 3",
        );
        refused(
            &|a| a.min_pods = Some("4".into()),
            MIN_PODS,
            "4",
            "from 1 to 3",
        );
        refused(
            &|a| a.job_secret = None,
            MIN_PODS,
            "2",
            "without a job secret",
        );
        refused(
            &|a| a.protocol = Some("v2".into()),
            MIN_PODS,
            "2",
            "--protocol collective",
        );
        refused(
            &|a| {
                a.role = Some("trainer".into());
                a.protocol = Some("v2".into());
                a.trainer_count = Some("3".into());
                a.pserver_count = Some("2".into());
            },
            MIN_PODS,
            "2",
            "split layout",
        );
        refused(
            &|a| a.peers = Some("10.0.0.1,10.0.0.2,10.0.0.3".into()),
            MIN_PODS,
            "2",
            "Kubernetes API",
        );
        refused(
            &|a| a.elastic_wait = Some("-1".into()),
            ELASTIC_WAIT,
            "-1",
            "whole seconds",
        );
        refused(
            &|a| a.elastic_wait = Some("1800".into()),
            ELASTIC_WAIT,
            "1800",
            "fewer seconds than --wait-timeout (1800 s)",
        );
        refused(
            &|a| {
                a.min_pods = None;
                a.elastic_wait = Some("60".into());
            },
            ELASTIC_WAIT,
            "60",
            "unset without --min-pods",
        );
    }

    /// The blanks around a secret are no part of it (as in the file that may hold it): one
    /// that is 31 blanks and a letter is too short.
    #[test]
    fn a_secret_is_measured_without_its_blanks() {
        let padded = JobArgs {
            job_secret: Some(format!("{}x", " ".repeat(31))),
            ..base()
        };
        assert!(Control::from_args(&padded).is_err());
        let newline = JobArgs {
            job_secret: Some(format!("{}\n", "s".repeat(32))),
            ..base()
        };
        let secret = Control::from_args(&newline).unwrap().secret.unwrap();
        assert_eq!(secret.0, "s".repeat(32).into_bytes());
    }

    /// A secret of blanks is no secret, as a blank value of any option is unset: the channel
    /// is off wherever that is asked (the topology, the restart budget, the channel itself).
    #[test]
    fn a_blank_secret_is_no_secret() {
        let blank = JobArgs {
            job_secret: Some(" ".repeat(40)),
            ..base()
        };
        assert!(!Control::from_args(&blank).unwrap().is_on());
        let with_restarts = JobArgs {
            max_restarts: Some("1".into()),
            ..blank
        };
        let refused = Control::from_args(&with_restarts).unwrap_err().to_string();
        assert!(
            refused.contains("PADDLE_LAUNCHER_MAX_RESTARTS"),
            "{refused}"
        );
    }
}
