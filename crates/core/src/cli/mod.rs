//! Every option, its flag, its environment variable and its default, in one place. Values are
//! taken as text here and validated in `config`, so that every bad value gets the same kind of
//! one-line error naming the variable, the value and what is expected.

mod environment;
mod status;
use crate::error::ConfigError;
use clap::{Args, Parser, Subcommand};
pub use status::StatusArgs;

#[derive(Debug, Parser)]
#[command(
    name = "paddle-launcher",
    version,
    about = "Entrypoint for distributed PaddlePaddle jobs: finds the job's pods, assigns ranks, \
             starts and supervises its training processes (one per GPU with Paddle's collective \
             protocol; parameter servers and trainers with fleet, v1 and v2).",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// Log lines as human-readable text, or as JSON objects for log collectors.
    #[arg(long, global = true, env = "PADDLE_LAUNCHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options of `run`, which is what happens without a subcommand.
    #[command(flatten)]
    pub job: JobArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait for the peers, then start and supervise the pserver and the trainer (the default).
    Run(JobArgs),
    /// Do everything up to the launch and print the process plan as JSON; start nothing.
    Plan(JobArgs),
    /// Run a whole job on this machine: one launcher per simulated pod on 127.0.0.2, .3, ...
    Local(LocalArgs),
    /// Say in plain words why the job would not start now (pods, Pending reasons, RBAC); starts
    /// and waits for nothing. Status 0 when it would start.
    Doctor(JobArgs),
    /// Print ready-to-apply YAML for a job: ServiceAccount, Role, RoleBinding, NetworkPolicy
    /// and the Job(s).
    ///
    /// The NetworkPolicy admits only the job's own pods. With --dns a headless Service replaces
    /// the ServiceAccount, Role and RoleBinding. The values are checked as each pod's launcher
    /// will check them: a value the pods would refuse is refused here (status 2).
    Manifest(ManifestArgs),
    /// Print the job's table as its coordinating launcher knows it (pods, ranks, steps, steps
    /// per second, stragglers, restarts): run it in any pod of the job, `kubectl exec POD --
    /// paddle-launcher status`. Asks the pod's launcher over its metrics port.
    Status(StatusArgs),
    /// Print a shell completion script, e.g. `paddle-launcher completions bash > /etc/bash_completion.d/paddle-launcher`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Options of `manifest`, after PaddleCloud's `paddlectl submit`.
#[derive(Debug, Args, Clone)]
pub struct ManifestArgs {
    /// Job name (also the prefix of every object's name).
    #[arg(long)]
    pub job_name: String,
    /// Namespace of every object (replace `default` with yours).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// The training image, whose ENTRYPOINT is paddle-launcher (see docker/).
    #[arg(long)]
    pub image: String,
    /// Number of trainers (pods of the trainer Job; in the colocated layout, of the one Job).
    /// From 64 pods on (one Job, no --dns) the Job is Indexed and its pod 0 coordinates: only
    /// it uses the Kubernetes API; the pods wait for the Secret `<job>-launcher` (`manifest`
    /// prints the command that creates it).
    #[arg(long, default_value_t = 2)]
    pub trainers: u32,
    /// Number of pserver pods of the split layout.
    #[arg(long, default_value_t = 0)]
    pub pservers: u32,
    /// PaddleCloud's split layout: a pserver Job and a trainer Job (needs --pservers).
    #[arg(long)]
    pub split: bool,
    /// An Indexed Job: ranks are the completion indexes.
    #[arg(long)]
    pub indexed: bool,
    /// Contract with the training program: `v1` flags, `v2` PADDLE_INIT_* variables, `fleet`
    /// (parameter server, Paddle 2.x) or `collective` (data parallel, no pserver); see
    /// docs/roles-and-protocols.md for the Paddle versions each needs [default: collective
    /// with --gpu (Paddle 3 on GPUs), else v1].
    #[arg(long = "protocol", value_enum)]
    pub protocol_given: Option<crate::vocabulary::Protocol>,
    /// The training program as one shell line (v2, fleet, collective).
    #[arg(long)]
    pub entry: Option<String>,
    /// Number of passes: `--num_passes` for v1, PADDLE_INIT_NUM_PASSES for v2, NUM_PASSES else.
    #[arg(long)]
    pub passes: Option<u32>,
    /// CPU each trainer pod asks for, e.g. 4 or 500m (the limit too with --cpu-limit).
    #[arg(long, default_value = "1")]
    pub cpu: String,
    /// Memory of each trainer pod (request = limit), e.g. 8Gi.
    #[arg(long, default_value = "2Gi")]
    pub memory: String,
    /// GPUs of each trainer pod (--gpu-resource, nvidia.com/gpu by default); without
    /// --protocol and pservers, GPU pods run the collective protocol.
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// Trainer processes each trainer pod runs (PADDLE_LAUNCHER_NPROC_PER_POD): N, or `auto`,
    /// one per GPU the pod is given [default: auto with --gpu and the collective protocol,
    /// else 1].
    #[arg(long)]
    pub nproc_per_pod: Option<String>,
    /// CPU each pserver pod asks for (split layout; the limit too with --cpu-limit).
    #[arg(long, default_value = "1")]
    pub pscpu: String,
    /// Memory of each pserver pod (split layout).
    #[arg(long, default_value = "2Gi")]
    pub psmemory: String,
    /// Extra environment for the training program, NAME=VALUE; repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub envs: Vec<String>,
    /// Size of the memory-backed /dev/shm of each trainer pod (a quantity): NCCL and data
    /// loaders need more than the container runtime's 64 MiB. Given to every pod with --gpu, as
    /// large as --memory unless set (what it holds counts against the pod's memory limit).
    #[arg(long)]
    pub shm_size: Option<String>,
    /// A node label the pods must match, KEY=VALUE (a GPU pool's, e.g.
    /// cloud.google.com/gke-accelerator=nvidia-l4); repeatable.
    #[arg(long = "node-selector", value_name = "KEY=VALUE")]
    pub node_selectors: Vec<String>,
    /// A taint the pods tolerate, KEY[=VALUE][:EFFECT] as `kubectl taint` writes it (GPU pools
    /// are often tainted nvidia.com/gpu=present:NoSchedule); repeatable.
    #[arg(long = "toleration", value_name = "KEY[=VALUE][:EFFECT]")]
    pub tolerations: Vec<String>,
    /// The pods' PriorityClass.
    #[arg(long)]
    pub priority_class: Option<String>,
    /// The pods' terminationGracePeriodSeconds: the children's stop and, with a job secret, the
    /// preemption checkpoint window follow from it (the launchers are told it).
    #[arg(long, default_value_t = 30)]
    pub termination_grace_period: u64,
    /// Seconds after the job has finished before Kubernetes deletes it and its pods
    /// (ttlSecondsAfterFinished); unset: kept until deleted.
    #[arg(long)]
    pub ttl_seconds_after_finished: Option<u32>,
    /// First pserver port (CONF_PADDLE_PORT); each pserver pod exposes this and the next
    /// ports, one per dense and sparse port.
    #[arg(long, default_value_t = 7164)]
    pub port: u16,
    /// Number of dense-parameter ports per pserver (CONF_PADDLE_PORTS_NUM), at least 1.
    #[arg(long, default_value_t = 1)]
    pub ports_num: u16,
    /// Number of sparse-parameter ports per pserver (CONF_PADDLE_PORTS_NUM_SPARSE).
    #[arg(long, default_value_t = 0)]
    pub ports_num_sparse: u16,
    /// Port of each trainer's own endpoint, fleet and collective (PADDLE_LAUNCHER_TRAINER_PORT).
    #[arg(long, default_value_t = 6170)]
    pub trainer_port: u16,
    /// DNS membership: a headless Service lists the pods; no ServiceAccount, Role or token.
    #[arg(long)]
    pub dns: bool,
    /// Group restarts the job may make (recovery in place). Above 0 the Job is Indexed, a
    /// headless Service names each pod (`<job>-0.<job>-pods` coordinates), the Secret
    /// `<job>-launcher` is waited for (manifest prints the command), and a podFailurePolicy
    /// makes a lost pod cost the Job one failure, preemption none, and an exhausted budget fail
    /// it at once. Under --runtime jobset, trainer and volcano the system's own DNS name of the
    /// first pod coordinates and its own policies are set (docs/manifests-and-rbac.md).
    #[arg(long, default_value_t = 0)]
    pub max_restarts: u32,
    /// Preemptions that restart the job without spending a restart
    /// (PADDLE_LAUNCHER_MAX_PREEMPTIONS); beyond them a preemption counts as a failure
    /// [default: no bound].
    #[arg(long)]
    pub max_preemptions: Option<u32>,
    /// An elastic job (PADDLE_LAUNCHER_MIN_PODS): it may train on with this many pods up to
    /// --trainers; needs --max-restarts (each shrink spends one) and --protocol collective.
    /// The Job succeeds when its coordinator's pod (index 0) has, so that a shrunk job
    /// completes (successPolicy, Kubernetes 1.31 and later) [default: not elastic].
    #[arg(long)]
    pub min_pods: Option<u32>,
    /// Seconds a lost pod's replacement has to be Running before an elastic job goes on
    /// without it (PADDLE_LAUNCHER_ELASTIC_WAIT) [default: the launcher's, 180].
    #[arg(long)]
    pub elastic_wait: Option<u64>,
    /// Seconds a trainer may make no progress (no output, or no write to its progress file)
    /// before it is judged hung, its stacks logged and the pod ended with status 80 (or the job
    /// restarted); 0 leaves hang detection off. 15 minutes without a line of output is rarely
    /// a healthy trainer.
    #[arg(long, default_value_t = 900)]
    pub hang_timeout: u32,
    /// What runs the pods: `job` (batch/v1 Jobs), `jobset` (a JobSet: one replicated job per
    /// kind of pod), `volcano` (a Volcano Job: one task per kind of pod, with its env and svc
    /// plugins) or `trainer` (Kubeflow Trainer v2: a ClusterTrainingRuntime named --job-name
    /// whose `node` replicated job runs the launcher, and an example TrainJob using it). Under
    /// all but `job` the pods set no job name, count or role: their launchers read them from
    /// the system (see --runtime of `run`).
    #[arg(long, value_enum, default_value_t = ManifestRuntime::Job)]
    pub runtime: ManifestRuntime,
    /// A queue: Kueue's `kueue.x-k8s.io/queue-name` label on the Jobs or the JobSet (created
    /// suspended; Kueue admits them), or the Volcano Job's `spec.queue`.
    #[arg(long)]
    pub queue: Option<String>,
    /// A label on the workload object (Job, JobSet, TrainingRuntime and TrainJob, Volcano Job)
    /// and its pods, KEY=VALUE: cost labels, Kueue's `kueue.x-k8s.io/priority-class`;
    /// repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// An annotation on the workload object and its pods, KEY=VALUE (topology, scheduling
    /// hints); repeatable.
    #[arg(long = "annotation", value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// A Secret the pods pull the image with (`imagePullSecrets`); repeatable.
    #[arg(long = "image-pull-secret", value_name = "NAME")]
    pub image_pull_secrets: Vec<String>,
    /// An existing ServiceAccount the pods run as: no ServiceAccount, Role or RoleBinding is
    /// generated (docs/manifests-and-rbac.md lists the verbs it needs).
    #[arg(long, value_name = "NAME")]
    pub service_account: Option<String>,
    /// The extended resource the GPUs are asked as (another vendor's, a MIG profile such as
    /// `nvidia.com/mig-1g.10gb`).
    #[arg(long, value_name = "NAME", default_value = "nvidia.com/gpu")]
    pub gpu_resource: String,
    /// Another resource each pod asks for (requests and limits), NAME=QUANTITY (RDMA devices
    /// such as `rdma/hca_shared_devices_a=1`); repeatable.
    #[arg(long = "resource", value_name = "NAME=QUANTITY")]
    pub resources: Vec<String>,
    /// A Linux capability added to the containers (IPC_LOCK for RDMA); repeatable.
    #[arg(long = "add-capability", value_name = "CAPABILITY")]
    pub add_capabilities: Vec<String>,
    /// The user the containers run as (NGC and Paddle images often assume one of their own).
    #[arg(long, value_name = "UID", conflicts_with = "run_as_root")]
    pub run_as_user: Option<u32>,
    /// Run the containers as root (images that assume it).
    #[arg(long)]
    pub run_as_root: bool,
    /// Pods on the node's network (RDMA pools without a pod network): dnsPolicy
    /// ClusterFirstWithHostNet; the launcher's ports must then be free on each node.
    #[arg(long)]
    pub host_network: bool,
    /// Prometheus scrapes the launchers (docs/observability.md): each pod declares the
    /// metrics port (9410, named `metrics`) and carries the `prometheus.io/scrape`, `port` and
    /// `path` annotations, and the NetworkPolicy admits that port, and only it, from any
    /// namespace.
    #[arg(long)]
    pub metrics: bool,
    /// A CPU limit equal to the request (--cpu, --pscpu): without it the pods ask for CPU and
    /// are not throttled to it (a limit throttles data loaders and NCCL's threads in bursts).
    #[arg(long)]
    pub cpu_limit: bool,
    /// A node label the pods' nodes must have one of the values of, KEY=VALUE[,VALUE...]
    /// (required node affinity, e.g. a GPU model or a pool); repeatable, all must hold.
    #[arg(long = "affinity", value_name = "KEY=VALUE[,VALUE...]")]
    pub affinities: Vec<String>,
    /// A node label to spread the job's pods over, at most one apart between its values (a
    /// topology spread constraint, e.g. kubernetes.io/hostname: one pod per node while there
    /// are as many nodes as pods, else as even as the nodes allow).
    #[arg(long, value_name = "TOPOLOGY_KEY")]
    pub spread_by: Option<String>,
    /// A node label to keep the job's pods together under, where the scheduler can (preferred
    /// pod affinity, e.g. a rack's or a network block's label: NCCL's rings stay near).
    #[arg(long, value_name = "TOPOLOGY_KEY")]
    pub pack_by: Option<String>,
    /// Generate no NetworkPolicy (the platform has its own).
    #[arg(long)]
    pub no_network_policy: bool,
    /// The containers' `imagePullPolicy`.
    #[arg(long, value_parser = ["Always", "IfNotPresent", "Never"], default_value = "Always")]
    pub image_pull_policy: String,
    /// A PersistentVolumeClaim mounted at --job-path: the shared job directory of the workspace
    /// layout (output/node_<rank>/ logs, per-rank data, TRAIN_CONFIG_DIR).
    #[arg(long)]
    pub volume_claim: Option<String>,
    /// Where --volume-claim is mounted, given to the launcher as JOB_PATH.
    #[arg(long, default_value = "/mnt/jobpath")]
    pub job_path: String,
    /// Arguments after `--` become the trainer's arguments (the container's args after `run --`).
    #[arg(last = true, value_name = "TRAINER_ARGS")]
    pub trainer_args: Vec<String>,
}

impl ManifestArgs {
    /// The protocol generated: as given, else `collective` for GPU pods without pservers (what
    /// Paddle 3 runs on GPUs: v1's trainers would end 75 there), else `v1` (the seed's
    /// contract).
    pub fn protocol(&self) -> crate::vocabulary::Protocol {
        use crate::vocabulary::Protocol;
        // A pserver layout is the seed's (v1) unless a protocol says otherwise.
        let pservers = self.split || self.pservers > 0;
        match (self.protocol_given, self.gpu) {
            (Some(given), _) => given,
            (None, 0) => Protocol::V1,
            (None, _) if pservers => Protocol::V1,
            (None, _) => Protocol::Collective,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ManifestRuntime {
    Job,
    Jobset,
    Trainer,
    Volcano,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Number of simulated pods (= trainers = pservers).
    #[arg(long, value_name = "N")]
    pub trainers: String,
    #[command(flatten)]
    pub job: JobArgs,
}

#[derive(Debug, Args, Clone, Default)]
pub struct JobArgs {
    /// Job name (required unless a batch system names the job, see --runtime); also the default
    /// label selector `job-name=<name>` set by the Job controller.
    #[arg(long, env = "JOB_NAME", help_heading = "Job and membership")]
    pub job_name: Option<String>,
    /// Namespace of the job's pods [default: the kubeconfig's or service account's namespace].
    #[arg(long, env = "JOB_NAMESPACE", help_heading = "Job and membership")]
    pub namespace: Option<String>,
    /// Number of pods = trainers = pservers (--num_gradient_servers). Required, unless --peers
    /// gives the list or a batch system the number (--runtime).
    #[arg(
        long,
        env = "CONF_PADDLE_GRADIENT_NUM",
        help_heading = "Job and membership"
    )]
    pub gradient_num: Option<String>,
    /// This pod's IP (downward API status.podIP) [default: address of the NIC, then of the hostname].
    #[arg(long, env = "POD_IP", help_heading = "Job and membership")]
    pub pod_ip: Option<String>,
    /// This pod's name (downward API metadata.name); when set, the own pod is found by name.
    #[arg(long, env = "POD_NAME", help_heading = "Job and membership")]
    pub pod_name: Option<String>,
    /// Label selector of the job's pods [default: job-name=<job name>].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_SELECTOR",
        help_heading = "Job and membership"
    )]
    pub selector: Option<String>,
    /// Static membership instead of Kubernetes: comma-separated pod IPs, rank = list order.
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_PEERS",
        help_heading = "Job and membership"
    )]
    pub peers: Option<String>,
    /// DNS membership instead of the Kubernetes API: the name of a headless Service
    /// (`publishNotReadyAddresses: true`) whose A/AAAA records are the pods; needs no RBAC.
    #[arg(long, env = "PADDLE_LAUNCHER_DNS", help_heading = "Job and membership")]
    pub dns: Option<String>,
    /// The DNS server for --dns and for a --coordinator named by DNS, `ip:port` [default: the
    /// nameservers of /etc/resolv.conf].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_DNS_SERVER",
        help_heading = "Job and membership"
    )]
    pub dns_server: Option<String>,
    /// Seconds to wait for all pods to be Running; 0 waits forever. Time while every pod of the
    /// job is held by a scheduling gate (queued by Kueue) does not count. With a job secret, also
    /// how long the launchers may keep gathering again without agreeing on a start, or wait for
    /// a coordinator's DNS name to get an address [default: 1800].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_WAIT_TIMEOUT",
        help_heading = "Job and membership"
    )]
    pub wait_timeout: Option<String>,
    /// Split layout: number of pserver pods.
    #[arg(long, env = "PSERVERS", help_heading = "Job and membership")]
    pub pserver_count: Option<String>,
    /// Split layout: number of trainer pods.
    #[arg(long, env = "TRAINERS", help_heading = "Job and membership")]
    pub trainer_count: Option<String>,
    /// Split layout: selector of the pserver pods [default: paddle-job-pserver=<job name>].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_PSERVER_SELECTOR",
        help_heading = "Job and membership"
    )]
    pub pserver_selector: Option<String>,
    /// Split layout: selector of the trainer pods [default: paddle-job=<job name>].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_TRAINER_SELECTOR",
        help_heading = "Job and membership"
    )]
    pub trainer_selector: Option<String>,
    /// After the launch, keep watching the peer pods and stop (status 78) when one is deleted,
    /// Failed, terminating or back with another IP: `true` or `false` [default: true].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_WATCH_PEERS",
        help_heading = "Job and membership"
    )]
    pub watch_peers: Option<String>,
    /// The batch system whose names on this pod say who is in the job: `auto` (whichever this
    /// pod shows: JobSet, Volcano, LeaderWorkerSet, Kubeflow, a Job), one of `job`, `jobset`,
    /// `volcano`, `lws`, `kubeflow`, or `static` (read none). Settings given explicitly win
    /// over what it says [default: auto].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_RUNTIME",
        help_heading = "Job and membership"
    )]
    pub runtime: Option<String>,
    /// Seconds to wait for every pserver endpoint to accept connections [default: 300].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_PSERVER_TIMEOUT",
        help_heading = "Roles and protocol"
    )]
    pub pserver_timeout: Option<String>,
    /// Parameter server command, split on whitespace, no shell; e.g. `paddle_pserver_main`
    /// [default: `paddle pserver`]
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_PSERVER_CMD",
        help_heading = "Roles and protocol"
    )]
    pub pserver_cmd: Option<String>,
    /// Trainer command, split on whitespace, no shell; e.g. `paddle_trainer`
    /// [default: `paddle train`]
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_TRAINER_CMD",
        help_heading = "Roles and protocol"
    )]
    pub trainer_cmd: Option<String>,
    /// Seconds the pserver keeps serving after the trainer exited 0 (peers may still be
    /// finishing) [default: 30].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_LINGER",
        help_heading = "Roles and protocol"
    )]
    pub linger: Option<String>,
    /// What this pod runs: `both` (a pserver and a trainer in every pod, the layout of
    /// PaddlePaddle's original Kubernetes tutorial), or only a `pserver` or a `trainer`
    /// (PaddleCloud's split layout) [default: both].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_ROLE",
        help_heading = "Roles and protocol"
    )]
    pub role: Option<String>,
    /// Contract with the training program: `v1` flags, `v2` PADDLE_INIT_* variables, `fleet`
    /// (parameter server, Paddle >= 2) or `collective` (data parallel, no pserver) [default: v1].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_PROTOCOL",
        help_heading = "Roles and protocol"
    )]
    pub protocol: Option<String>,
    /// Do not start when more than this many trainer pods of the job have Failed [default: no limit].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_MAX_FAILED_TRAINERS",
        help_heading = "Roles and protocol"
    )]
    pub max_failed_trainers: Option<String>,
    /// The training program as one shell command line, run with `sh -c` (v2, fleet,
    /// collective); otherwise the arguments after `--` are the program's argv.
    #[arg(long, env = "ENTRY", help_heading = "Roles and protocol")]
    pub entry: Option<String>,
    /// Trainer processes each pod runs (collective), each supervised: N, or `auto` (the
    /// devices CUDA_VISIBLE_DEVICES makes visible when it is set: `-1` or empty is none; else
    /// NVIDIA_VISIBLE_DEVICES, else the /dev/nvidiaN files, else 1). The process of local rank l on the pod ranked r is trainer
    /// id r x N + l, on the l-th port from --trainer-port up (the control port skipped)
    /// [default: `auto` with the collective protocol (one process per visible GPU, one
    /// without), else 1].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_NPROC_PER_POD",
        help_heading = "Roles and protocol"
    )]
    pub nproc_per_pod: Option<String>,
    /// Shared secret of the job's launchers (from a Kubernetes Secret; at least 32 characters).
    /// Setting it turns on the control channel: every launcher sends heartbeats to the
    /// coordinating launcher, and a silent one stops the job (status 78), or costs it a restart
    /// (--max-restarts), within --heartbeat-timeout [default: unset, no control channel].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_JOB_SECRET",
        hide_env_values = true,
        help_heading = "Recovery"
    )]
    pub job_secret: Option<String>,
    /// File holding the job secret instead (a mounted Secret, as `manifest` generates); a file
    /// that does not exist is waited for within --wait-timeout, then refused (status 2): create
    /// the Secret, or unset the variable to run without the channel [default: unset].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_JOB_SECRET_FILE",
        help_heading = "Recovery"
    )]
    pub job_secret_file: Option<String>,
    /// HOST:PORT of the coordinating launcher: the launcher whose pod IP is HOST's address
    /// serves there, every other one connects (HOST may be a DNS name that follows the pod)
    /// [default: the pod of rank 0 on --control-port].
    #[arg(long, env = "PADDLE_LAUNCHER_COORDINATOR", help_heading = "Recovery")]
    pub coordinator: Option<String>,
    /// Port of the control channel when no --coordinator is given [default: 6171].
    #[arg(long, env = "PADDLE_LAUNCHER_CONTROL_PORT", help_heading = "Recovery")]
    pub control_port: Option<String>,
    /// Seconds of silence after which a launcher counts as lost (frozen, or its node gone)
    /// [default: 10].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT",
        help_heading = "Recovery"
    )]
    pub heartbeat_timeout: Option<String>,
    /// Group restarts the job may make: on a failed trainer or pserver, a lost or silent pod,
    /// every launcher stops its children, waits for the job's pods again and starts them anew
    /// with PADDLE_LAUNCHER_RESTART_COUNT; needs the control channel (a job secret)
    /// [default: 0, the first failure ends every pod].
    #[arg(long, env = "PADDLE_LAUNCHER_MAX_RESTARTS", help_heading = "Recovery")]
    pub max_restarts: Option<String>,
    /// Preemptions of the job that restart it without spending a restart: a pod told to stop
    /// (preempted, drained, evicted, deleted) while its trainer runs checkpoints the job, which
    /// restarts in place for free; beyond this many, a preemption counts as a failure. Also
    /// stops a pod that is evicted for its own disk or memory use from restarting the job for
    /// ever; needs the control channel [default: no bound].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_MAX_PREEMPTIONS",
        help_heading = "Recovery"
    )]
    pub max_preemptions: Option<String>,
    /// An elastic job: it may train on with this many pods up to the job's pod count, when a
    /// lost pod's replacement is not Running within --elastic-wait, and grows back when pods
    /// return. Data-parallel jobs found through the Kubernetes API (--protocol collective,
    /// one kind of pod); needs the control channel (a job secret) and a named coordinator
    /// (--coordinator) [default: unset, not elastic: every pod or none].
    #[arg(long, env = "PADDLE_LAUNCHER_MIN_PODS", help_heading = "Recovery")]
    pub min_pods: Option<String>,
    /// Seconds a lost pod's replacement has to be Running before an elastic job goes on
    /// without it, and the window in which pods that arrive join in one restart: a replacement
    /// on a node that has the image is Running well within 180, a new node rarely is
    /// [default: 180].
    #[arg(long, env = "PADDLE_LAUNCHER_ELASTIC_WAIT", help_heading = "Recovery")]
    pub elastic_wait: Option<String>,
    /// Seconds a trainer may make no progress before it is judged hung: its threads' stacks are
    /// dumped into its log, then it is stopped (status 80, or a group restart). Progress is
    /// output, or, once the trainer has written it, a write to PADDLE_LAUNCHER_PROGRESS_FILE;
    /// 0 = never judged [default: 0].
    #[arg(long, env = "PADDLE_LAUNCHER_HANG_TIMEOUT", help_heading = "Hangs")]
    pub hang_timeout: Option<String>,
    /// Seconds a trainer may take to its first progress (set-up: data, compilation, NCCL init)
    /// [default: the hang timeout, at least 1800].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_HANG_FIRST_WINDOW",
        help_heading = "Hangs"
    )]
    pub hang_first_window: Option<String>,
    /// What shows a trainer's progress: `output` (any output until it first writes its
    /// progress file, then the file alone; in a pod of several collective processes, any
    /// process's) or `file` (the progress file alone, from the start: a logging thread, a
    /// progress bar or a data loader's prints cannot hide a stuck loop, and a program that
    /// never writes the file is judged hung after its first window) [default: output].
    #[arg(long, env = "PADDLE_LAUNCHER_HANG_PROGRESS", help_heading = "Hangs")]
    pub hang_progress: Option<String>,
    /// File the trainer touches, or writes its step number to, to show progress; given to it
    /// under the same name, its directory created [default: <workdir>/progress].
    #[arg(long, env = "PADDLE_LAUNCHER_PROGRESS_FILE", help_heading = "Hangs")]
    pub progress_file: Option<String>,
    /// Seconds of each window in which the coordinator compares the ranks' speed (their
    /// steps' compute_ms, else their rate of steps) to name stragglers: at least
    /// --heartbeat-timeout (every launcher reports once every third of it); 0 = never judged
    /// [default: 30].
    #[arg(long, env = "PADDLE_LAUNCHER_STRAGGLER_WINDOW", help_heading = "Hangs")]
    pub straggler_window: Option<String>,
    /// A rank whose speed is below this share of the median rank's is slow in a window: a
    /// number above 0 and below 1 [default: 0.75].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_STRAGGLER_THRESHOLD",
        help_heading = "Hangs"
    )]
    pub straggler_threshold: Option<String>,
    /// Windows in a row a rank must be slow in to be named a straggler (a log line on every
    /// pod, a Straggler event, the metrics; never a restart) [default: 3].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_STRAGGLER_WINDOWS",
        help_heading = "Hangs"
    )]
    pub straggler_windows: Option<String>,
    /// Seconds between forwarding SIGTERM and sending SIGKILL to the children [default: what
    /// the pod allows (--pod-grace-period, or its spec read from the API) less 5 s for the
    /// launcher's own exit, halved with a control channel (the coordinator may wait as long for
    /// the others' stop); 10 when the pod's is unknown].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_GRACE_PERIOD",
        help_heading = "Stopping and preemption"
    )]
    pub grace_period: Option<String>,
    /// The pod's terminationGracePeriodSeconds: the time between the kubelet's SIGTERM to the
    /// launcher and its SIGKILL, which the children's grace period must fit in (`manifest` sets
    /// it; read from the pod's spec when the launcher finds its pods through the API).
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_POD_GRACE_PERIOD",
        help_heading = "Stopping and preemption"
    )]
    pub pod_grace_period: Option<String>,
    /// The signal a trainer is sent to save a checkpoint at its next step boundary and go on,
    /// when a pod of the job is told to stop while training (preemption, drain, deletion);
    /// sent only to processes that handle it; `none` disables [default: SIGUSR1].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_CHECKPOINT_SIGNAL",
        help_heading = "Stopping and preemption"
    )]
    pub checkpoint_signal: Option<String>,
    /// Seconds a preempted pod's trainer is given to checkpoint before it is stopped; it ends
    /// early when the trainer exits [default: with a control channel, the children's grace
    /// period, cut to fit the pod's; none without one].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_CHECKPOINT_WINDOW",
        help_heading = "Stopping and preemption"
    )]
    pub checkpoint_window: Option<String>,
    /// Network interface given to Paddle as --nics [default: eth0; lo in local mode].
    #[arg(long, env = "CONF_PADDLE_NIC", help_heading = "Network")]
    pub nic: Option<String>,
    /// First pserver port [default: 7164].
    #[arg(long, env = "CONF_PADDLE_PORT", help_heading = "Network")]
    pub port: Option<String>,
    /// Number of dense-parameter ports per pserver [default: 1].
    #[arg(long, env = "CONF_PADDLE_PORTS_NUM", help_heading = "Network")]
    pub ports_num: Option<String>,
    /// Number of sparse-parameter ports per pserver [default: 0].
    #[arg(long, env = "CONF_PADDLE_PORTS_NUM_SPARSE", help_heading = "Network")]
    pub ports_num_sparse: Option<String>,
    /// Port of each trainer's own endpoint (fleet, collective) [default: 6170].
    #[arg(long, env = "PADDLE_LAUNCHER_TRAINER_PORT", help_heading = "Network")]
    pub trainer_port: Option<String>,
    /// Port of the launcher's metrics for Prometheus (`GET /metrics`, read-only: docs/observability.md);
    /// 0 turns them off [default: 9410].
    #[arg(long, env = "PADDLE_LAUNCHER_METRICS_PORT", help_heading = "Network")]
    pub metrics_port: Option<String>,
    /// Before a collective trainer starts, check that every peer pod's trainer endpoint answers
    /// a TCP connection from this pod's address (accepted or refused, within 3 s): an
    /// unreachable peer ends the pod at once (status 81), naming it, instead of a hang in
    /// NCCL's or gloo's init: `true` or `false` [default: true].
    #[arg(long, env = "PADDLE_LAUNCHER_CHECK_PEERS", help_heading = "Network")]
    pub check_peers: Option<String>,
    /// Shared job directory root: logs go to $JOB_PATH/$JOB_NAME/output/node_<rank>/, data is
    /// copied from $JOB_PATH/$JOB_NAME/<rank>/data/.
    #[arg(long, env = "JOB_PATH", help_heading = "Files and logs")]
    pub job_path: Option<String>,
    /// Directory under $JOB_PATH/$JOB_NAME whose contents are copied into the work directory.
    #[arg(long, env = "TRAIN_CONFIG_DIR", help_heading = "Files and logs")]
    pub train_config_dir: Option<String>,
    /// Existing file that receives the one-line reason of the exit (the kubelet creates
    /// /dev/termination-log; nothing is created); empty disables [default: /dev/termination-log].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_TERMINATION_LOG",
        help_heading = "Files and logs"
    )]
    pub termination_log: Option<String>,
    /// Working directory of the pserver and the trainer [default: the current directory].
    #[arg(long, env = "PADDLE_LAUNCHER_WORKDIR", help_heading = "Files and logs")]
    pub workdir: Option<String>,
    /// Directory of each process's own log file, named as Paddle's launcher names them
    /// (`workerlog.<local rank>`, `serverlog.0`) and given to the processes as `PADDLE_LOG_DIR`
    /// (collective, fleet); empty disables. --job-path's `output/node_<rank>/` files come first
    /// where both are given [default: `<workdir>/log` with collective and fleet, none with v1
    /// and v2].
    #[arg(long, env = "PADDLE_LAUNCHER_LOG_DIR", help_heading = "Files and logs")]
    pub log_dir: Option<String>,
    /// Directory that receives the files `trainer_id` and `trainer_count`; empty disables
    /// [default: /].
    #[arg(long, env = "PADDLE_LAUNCHER_ID_DIR", help_heading = "Files and logs")]
    pub id_dir: Option<String>,
    /// Glob of the training files: this trainer's share (file i when i % trainers == id, of the
    /// sorted list) is written to the train list.
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_TRAIN_FILES",
        help_heading = "Files and logs"
    )]
    pub train_files: Option<String>,
    /// Glob of the test files, shared out like --train-files into the test list.
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_TEST_FILES",
        help_heading = "Files and logs"
    )]
    pub test_files: Option<String>,
    /// Where this trainer's share of --train-files is written [default: <workdir>/train.list].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_TRAIN_LIST",
        help_heading = "Files and logs"
    )]
    pub train_list: Option<String>,
    /// Where this trainer's share of --test-files is written [default: <workdir>/test.list].
    #[arg(
        long,
        env = "PADDLE_LAUNCHER_TEST_LIST",
        help_heading = "Files and logs"
    )]
    pub test_list: Option<String>,
    /// Arguments after `--` go to the trainer; `--name=value` replaces a generated flag.
    #[arg(last = true, value_name = "TRAINER_ARGS")]
    pub trainer_args: Vec<String>,
}

impl JobArgs {
    /// The options a pod with exactly these environment variables would run with: what
    /// `manifest` validates its pods' environment with, through the same definitions as `run`.
    pub fn from_env_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        trainer_args: &[String],
    ) -> Result<JobArgs, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let command = Cli::command();
        let pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
        let mut argv = vec!["paddle-launcher".to_string()];
        // The options every subcommand takes (--log-format), before the subcommand.
        let global: Vec<clap::Id> = command
            .get_arguments()
            .filter(|arg| arg.is_global_set())
            .map(|arg| arg.get_id().clone())
            .collect();
        for arg in command.get_arguments().filter(|arg| arg.is_global_set()) {
            let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            if let Some((_, value)) = pairs.iter().rev().find(|(name, _)| env == *name) {
                argv.push(format!("--{long}={value}"));
            }
        }
        argv.push("run".to_string());
        let run = command
            .find_subcommand("run")
            .expect("the run subcommand is defined");
        for arg in run.get_arguments() {
            let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            if let Some((_, value)) = pairs.iter().rev().find(|(name, _)| env == *name) {
                argv.push(format!("--{long}={value}"));
            }
        }
        if !trainer_args.is_empty() {
            argv.push("--".to_string());
            argv.extend(trainer_args.iter().cloned());
        }
        // Parsed without the process environment: only the given pairs count.
        let command = global.into_iter().fold(command, |root, id| {
            root.mut_arg(id, |a| a.env(None::<&str>))
        });
        let matches = command
            .mut_subcommand("run", |run| {
                let ids: Vec<clap::Id> = run.get_arguments().map(|a| a.get_id().clone()).collect();
                ids.into_iter()
                    .fold(run, |run, id| run.mut_arg(id, |a| a.env(None::<&str>)))
            })
            .try_get_matches_from(argv)?;
        let run = matches
            .subcommand_matches("run")
            .expect("argv names the run subcommand");
        JobArgs::from_arg_matches(run)
    }
}

/// Clap's refusal of a value (not among an option's choices, not of its type) in the
/// launcher's own terms: the variable and flag, the value, what is expected — "invalid
/// PADDLE_LAUNCHER_LOG_FORMAT (--log-format): \"xml\": expected one of text, json". None for
/// a refusal that is not about a value (an option it does not know).
pub fn clap_refusal(e: &clap::Error, command: &clap::Command) -> Option<ConfigError> {
    use clap::error::{ContextKind, ContextValue};
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(text)) => Some(text.clone()),
        _ => None,
    };
    let arg = text(ContextKind::InvalidArg)?;
    let value = text(ContextKind::InvalidValue)?;
    // "--log-format <LOG_FORMAT>": the option's long name, and the variable that sets it.
    let long = arg
        .split_whitespace()
        .next()
        .unwrap_or(&arg)
        .trim_start_matches("--")
        .to_string();
    let run = command.find_subcommand("run").unwrap_or(command);
    let env = run
        .get_arguments()
        .chain(command.get_arguments())
        .find(|a| a.get_long() == Some(long.as_str()))
        .and_then(|a| a.get_env())
        .map(|env| env.to_string_lossy().into_owned());
    let variable = match env {
        Some(env) => format!("{env} (--{long})"),
        None => format!("--{long}"),
    };
    let expected = match e.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(values)) => format!("one of {}", values.join(", ")),
        _ => "a value --help describes".to_string(),
    };
    Some(ConfigError::new(variable, &value, expected))
}

/// A name of the launcher's prefixes (or near them) that no option reads: Some, with the
/// nearest name that is read when one is close. None for a name read, or not the launcher's.
pub fn unread(name: &str) -> Option<Option<String>> {
    unread_in(name, &known_variables())
}

/// An option of `run`, named by its clap id (the `JobArgs` field). Errors, local mode and the
/// options table of docs/configuration.md all take the option's variable and flag from its one
/// clap definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt(pub &'static str);

impl Opt {
    /// The option's environment variable, e.g. `CONF_PADDLE_PORT` (the id for an unknown one,
    /// which a test rules out for every option the code names).
    pub fn env(self) -> &'static str {
        definitions()
            .iter()
            .find(|(id, ..)| id == self.0)
            .map_or(self.0, |(_, env, ..)| env.as_str())
    }
}

/// "CONF_PADDLE_PORT (--port)": how every message names an option.
impl std::fmt::Display for Opt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match definitions().iter().find(|(id, ..)| id == self.0) {
            Some((_, env, flag, _)) => write!(f, "{env} ({flag})"),
            // Not reachable for the options defined in `config` (a test checks them all).
            None => write!(f, "--{}", self.0.replace('_', "-")),
        }
    }
}
use environment::{definitions, known_variables, unread_in};
pub use environment::{
    near_miss_in_environment, near_subcommand, options_table, unread_in_environment,
};

#[cfg(test)]
mod tests {
    use super::environment::{
        definitions, edit_distance, near_subcommand, options_table, unread_variables,
    };

    const TABLE_BEGIN: &str =
        "<!-- options table: generated from the CLI definitions in crates/core/src/cli/mod.rs; a test checks it -->\n";
    const TABLE_END: &str = "<!-- end of the options table -->";

    /// The options table of docs/configuration.md is the CLI's own definition, not a copy kept
    /// by hand.
    #[test]
    fn the_readme_options_table_is_the_cli_definition() {
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/configuration.md"
        ))
        .unwrap();
        let table = page
            .split(TABLE_BEGIN)
            .nth(1)
            .and_then(|rest| rest.split(TABLE_END).next());
        let expected = options_table();
        assert_eq!(
            table,
            Some(expected.as_str()),
            "docs/configuration.md's options table differs from the CLI; it should read:\n{TABLE_BEGIN}{expected}{TABLE_END}"
        );
    }

    #[test]
    fn every_option_has_help_and_a_default_or_says_unset() {
        for (id, env, flag, help) in definitions() {
            assert!(!help.is_empty(), "{id} ({env}, {flag}) has no help text");
        }
        assert!(options_table()
            .contains("| `CONF_PADDLE_PORT` | `--port` | 7164 | First pserver port |"));
    }

    #[test]
    fn a_misspelt_variable_is_named_with_the_nearest_one_read() {
        let names = [
            "CONF_PADDLE_GRADIENT_NUMS",
            "CONF_PADDLE_GRADIENT_NUM",
            "PADDLE_LAUNCHER_LOG",
            "PADDLE_LAUNCHER_SOMETHING_ELSE_ENTIRELY",
            "HOME",
        ];
        assert_eq!(
            unread_variables(names.into_iter()),
            [
                "CONF_PADDLE_GRADIENT_NUMS is set but no option reads it: did you mean CONF_PADDLE_GRADIENT_NUM?",
                "PADDLE_LAUNCHER_SOMETHING_ELSE_ENTIRELY is set but no option reads it",
            ]
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    /// A prefix misspelt is a setting lost too: named as a misspelt name is. Other programs'
    /// variables are none of the launcher's business.
    #[test]
    fn a_misspelt_prefix_is_named_too() {
        let names = [
            "PADDLE_LAUNCHR_PROTOCOL",
            "PADDLE_LAUNCHER_PROTOCOL",
            "CONF_PADLE_PORT",
            "PADDLE_TRAINER_ID",
            "PADDLE_TRAINERS_NUM",
            "PADDLE_LOCAL_RANK",
            "PADDLE_CURRENT_ENDPOINT",
            "PADDLE_LUANCHER_WAIT_TIMEOUT",
            "CONFIG_PATH",
            // Paddle's launcher's own, two letters from the prefix: read, by Paddle.
            "PADDLE_LAUNCH_WITH_ARGS",
        ];
        assert_eq!(
            unread_variables(names.into_iter()),
            [
                "PADDLE_LAUNCHR_PROTOCOL is set but no option reads it: did you mean PADDLE_LAUNCHER_PROTOCOL?",
                "CONF_PADLE_PORT is set but no option reads it: did you mean CONF_PADDLE_PORT?",
                "PADDLE_LUANCHER_WAIT_TIMEOUT is set but no option reads it: did you mean PADDLE_LAUNCHER_WAIT_TIMEOUT?",
            ]
        );
    }

    #[test]
    fn a_mistyped_subcommand_is_suggested() {
        assert_eq!(near_subcommand("docter").as_deref(), Some("doctor"));
        assert_eq!(near_subcommand("manifets").as_deref(), Some("manifest"));
        assert_eq!(near_subcommand("pla").as_deref(), Some("plan"));
        assert_eq!(near_subcommand("python3"), None);
        assert_eq!(near_subcommand("--doctor"), None);
    }
}
