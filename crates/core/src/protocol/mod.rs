//! Membership + config -> the processes to start. One module per contract with the framework,
//! each giving the complete argv and environment of a role (like one function per environment
//! contract in Kubeflow's envvar.go), so that each is easy to diff against Paddle's own docs.

pub mod collective;
pub mod fleet;
pub mod v1;
pub mod v2;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::config::Config;

use crate::membership::{Me, Member, Membership};
use crate::plan::{ControlPlan, Copy, FileSpec, Plan, PodEntry, ProcessSpec, Role, TrainerPlace};
use crate::vocabulary::Protocol;

/// Directory layout of PaddlePaddle's original Kubernetes tutorial: `$JOB_PATH/$JOB_NAME/{output/node_<rank>, <rank>/data, <config>}`.
pub struct JobDir {
    pub root: PathBuf,
}

impl JobDir {
    pub fn new(config: &Config) -> Option<Self> {
        let root = config
            .workspace
            .job_path
            .as_ref()?
            .join(&config.topology.job_name);
        Some(JobDir { root })
    }

    pub fn output(&self) -> PathBuf {
        self.root.join("output")
    }
}

/// Where a process's output is copied: `output/node_<rank>/{server,train}.log` as in PaddlePaddle's tutorial;
/// pserver pods of the split layout use `output/pserver_<rank>/server.log`; a pod of several
/// trainer processes `train.<local rank>.log`. Without a job path, the log directory's
/// files, named as Paddle 3's launcher names them (`workerlog.<local rank>`, `serverlog.0`:
/// a pod runs one pserver).
pub fn log_file(
    config: &Config,
    job_dir: Option<&JobDir>,
    role: Role,
    rank: usize,
    local: usize,
) -> Option<PathBuf> {
    let dir = match (role, config.topology.role) {
        (Role::Pserver, crate::vocabulary::PodRole::Pserver) => format!("pserver_{rank}"),
        _ => format!("node_{rank}"),
    };
    let file = match role {
        Role::Pserver => "server.log".to_string(),
        Role::Trainer if config.topology.processes.several() => format!("train.{local}.log"),
        Role::Trainer => "train.log".to_string(),
    };
    if let Some(job_dir) = job_dir {
        return Some(job_dir.output().join(dir).join(file));
    }
    let paddles = match role {
        Role::Pserver => "serverlog.0".to_string(),
        Role::Trainer => format!("workerlog.{local}"),
    };
    Some(config.workspace.log_dir.as_ref()?.join(paddles))
}

/// The progress file of the pod's trainer process `local`: the one configured when the pod
/// runs one, else one per process beside it (`progress.0`, `progress.1`, ...).
pub fn progress_file(config: &Config, local: usize) -> PathBuf {
    let file = &config.workspace.progress_file;
    if !config.topology.processes.several() {
        return file.clone();
    }
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{local}"));
    file.with_file_name(name)
}

/// The list of `ip:port` endpoints.
pub fn endpoints(members: &[Member], port: u16) -> String {
    members
        .iter()
        .map(|m| SocketAddr::new(m.ip, port).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

pub fn ips(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| m.ip.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The training program of the entry-command protocols: `sh -c ENTRY` (the user's own shell
/// line, explicitly), else the argv after `--`.
pub fn program(config: &Config) -> Vec<String> {
    match &config.program.entry {
        Some(line) => vec!["sh".into(), "-c".into(), line.clone()],
        None => config.program.trainer_args.rest.clone(),
    }
}

pub fn env(pairs: Vec<(&str, String)>) -> BTreeMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// A process of this pod, with the launcher's conventions for cwd, log and name.
pub fn process(
    config: &Config,
    job_dir: Option<&JobDir>,
    role: Role,
    rank: usize,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
) -> ProcessSpec {
    let slot = Slot {
        pod_rank: rank,
        local: 0,
    };
    process_in(config, job_dir, role, slot, argv, env)
}

/// Where a trainer process sits: its pod's rank among the trainer pods, its rank in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub pod_rank: usize,
    pub local: usize,
}

impl Slot {
    /// Pod-major: one pod's processes are neighbours (NCCL rings, NVLink).
    pub fn trainer_id(self, config: &Config) -> usize {
        self.pod_rank * config.topology.processes.per_pod as usize + self.local
    }
}

/// The job's trainer processes: every trainer pod's, `per_pod` each.
pub fn world_size(config: &Config) -> usize {
    config.topology.trainers as usize * config.topology.processes.per_pod as usize
}

fn process_in(
    config: &Config,
    job_dir: Option<&JobDir>,
    role: Role,
    slot: Slot,
    argv: Vec<String>,
    mut env: BTreeMap<String, String>,
) -> ProcessSpec {
    let rank = slot.pod_rank;
    let mut place = None;
    if role == Role::Trainer {
        // Where the trainer shows progress (hang detection; the launcher made its directory).
        let progress = progress_file(config, slot.local);
        let file = progress.display().to_string();
        env.insert(crate::config::PROGRESS_FILE.env().to_string(), file);
        place = Some(TrainerPlace {
            trainer_id: slot.trainer_id(config),
            of: world_size(config),
            local_rank: slot.local,
            endpoint: env.get("PADDLE_CURRENT_ENDPOINT").cloned(),
            device: env.get("FLAGS_selected_gpus").cloned(),
            progress_file: progress,
        });
        // Which signal asks it for a checkpoint, so that it handles that one; none when no
        // checkpoint will be asked (no window: no channel, or none given).
        if let Some(checkpoint) = config.timing.checkpoint() {
            let name = crate::exit::signal_name(checkpoint.signal);
            env.insert(crate::config::CHECKPOINT_SIGNAL.env().to_string(), name);
        }
    }
    // Paddle 3's launcher tells each process where its log is (collective and fleet only:
    // the seed's protocols have none unless asked, and then the file is the launcher's).
    let paddle_3 = config.topology.protocol.paddles_launcher();
    // Where its log file is: the log directory's, or --job-path's output directory, which
    // comes first.
    let log = log_file(config, job_dir, role, rank, slot.local);
    if let Some(dir) = log.as_ref().and_then(|l| l.parent()).filter(|_| paddle_3) {
        env.insert("PADDLE_LOG_DIR".to_string(), dir.display().to_string());
    }
    // As Paddle's launcher gives its processes, unless the pod sets it: its import of paddle
    // sets 1 in its own environment (`paddle/base/__init__.py`, `__bootstrap__`), which every
    // process copies; above 1, every process prints a warning at import.
    let threads = "OMP_NUM_THREADS";
    if paddle_3 && !config.topology.processes.given.contains_key(threads) {
        env.insert(threads.to_string(), "1".to_string());
    }
    // NCCL's and gloo's interface: the pod IP's (only collective and fleet get any).
    for socket in &config.ports.sockets {
        if let Some(value) = &socket.value {
            env.insert(socket.variable.to_string(), value.clone());
        }
    }
    // Named by trainer id: the prefix of its lines says which of the job's ranks wrote them.
    let name = match &place {
        Some(place) => format!("trainer-{}", place.trainer_id),
        None => format!("{}-{rank}", role.as_str()),
    };
    ProcessSpec {
        name,
        role,
        argv,
        env,
        cwd: config.workspace.workdir.clone(),
        log,
        place,
        unset: Vec::new(),
    }
}

/// This pod's pserver under the job's protocol (none in collective mode).
fn pserver(
    config: &Config,
    membership: &Membership,
    me: &Me,
    jd: Option<&JobDir>,
    rank: usize,
) -> Option<ProcessSpec> {
    Some(match config.topology.protocol {
        Protocol::V1 | Protocol::V2 => v1::pserver(config, rank, jd),
        Protocol::Fleet => process(
            config,
            jd,
            Role::Pserver,
            rank,
            program(config),
            fleet::pserver_env(config, membership, me),
        ),
        Protocol::Collective => return None,
    })
}

/// This pod's trainer processes under the job's protocol: v1 flags, or the program with its
/// contract; several only in collective mode (the configuration refuses the others).
fn trainers(
    config: &Config,
    membership: &Membership,
    me: &Me,
    jd: Option<&JobDir>,
    rank: usize,
) -> Vec<ProcessSpec> {
    let env = match config.topology.protocol {
        Protocol::V1 => return vec![v1::trainer(config, membership, rank, jd)],
        Protocol::V2 => v2::trainer_env(config, membership, rank),
        Protocol::Fleet => fleet::trainer_env(config, membership, me, rank),
        Protocol::Collective => {
            return (0..config.topology.processes.per_pod as usize)
                .map(|local| {
                    let slot = Slot {
                        pod_rank: rank,
                        local,
                    };
                    let env = collective::trainer_env(config, membership, me, slot);
                    process_in(config, jd, Role::Trainer, slot, program(config), env)
                })
                .collect()
        }
    };
    vec![process(
        config,
        jd,
        Role::Trainer,
        rank,
        program(config),
        env,
    )]
}

/// Every pserver endpoint the trainer needs up before it starts (empty: no gate).
pub fn pserver_endpoints(config: &Config, membership: &Membership) -> Vec<SocketAddr> {
    let ports: Vec<u16> = match config.topology.protocol {
        Protocol::V1 | Protocol::V2 => config.ports.pserver.ports().collect(),
        Protocol::Fleet => vec![config.ports.pserver.first],
        Protocol::Collective => vec![],
    };
    membership
        .pservers
        .iter()
        .flat_map(|m| ports.iter().map(move |&p| SocketAddr::new(m.ip, p)))
        .collect()
}

/// This trainer's share of the sorted files: file i when i % trainers == id (seeds 001/002).
pub fn shard(files: &[PathBuf], trainers: u32, id: usize) -> Vec<PathBuf> {
    let mut sorted = files.to_vec();
    sorted.sort();
    sorted
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % trainers as usize == id)
        .map(|(_, f)| f)
        .collect()
}

fn list_file(path: &Path, files: &[PathBuf]) -> FileSpec {
    let content: String = files.iter().map(|f| format!("{}\n", f.display())).collect();
    FileSpec {
        path: path.to_path_buf(),
        content,
        required: true,
    }
}

/// Files matched by --train-files / --test-files (sorted), found before planning.
#[derive(Debug, Clone, Default)]
pub struct InputFiles {
    pub train: Option<Vec<PathBuf>>,
    pub test: Option<Vec<PathBuf>>,
}

pub fn plan(config: &Config, membership: &Membership, me: &Me, inputs: &InputFiles) -> Plan {
    let job_dir = JobDir::new(config);
    let rank = me.trainer_rank.or(me.pserver_rank).unwrap_or(0);
    let copies = copies_of(config, job_dir.as_ref(), me, rank);
    let mut files = files_of(config, me, inputs);
    let jd = job_dir.as_ref();
    let pserver = me
        .pserver_rank
        .and_then(|rank| pserver(config, membership, me, jd, rank));
    let trainers = me
        .trainer_rank
        .map(|rank| trainers(config, membership, me, jd, rank))
        .unwrap_or_default();
    // The pserver first: it is started first.
    let mut processes: Vec<ProcessSpec> = pserver.into_iter().chain(trainers).collect();
    if let Some(elastic) = config.control.elastic {
        // The world at full size, beside this epoch's (PADDLE_TRAINERS_NUM): what a program
        // rescales its learning rate or data shards by when the job trains with fewer pods.
        let full = elastic.max_pods * config.topology.processes.per_pod;
        for process in processes.iter_mut().filter(|p| p.role == Role::Trainer) {
            process.env.insert(FULL_WORLD_SIZE.into(), full.to_string());
        }
    }
    files.extend(
        processes
            .iter_mut()
            .filter_map(|p| backup_long_lists(config, p)),
    );
    let gate = if me.trainer_rank.is_some() {
        pserver_endpoints(config, membership)
    } else {
        Vec::new()
    };
    Plan {
        job: config.topology.job_name.clone(),
        namespace: config.topology.namespace.clone(),
        protocol: config.topology.protocol,
        trainer_id: me.trainer_rank,
        pserver_id: me.pserver_rank,
        num_gradient_servers: config.topology.trainers,
        pod_ip: me.ip,
        pods: pod_entries(membership),
        pserver_endpoints: gate,
        copies,
        files,
        processes,
        control: ControlPlan::new(config, membership, me),
        restart_count: 0,
        runtime: config.runtime.clone(),
        sockets: config.ports.sockets.clone(),
    }
}

/// What is copied from the shared job directory into the work directory: the training
/// configuration, and a trainer's own data.
fn copies_of(config: &Config, job_dir: Option<&JobDir>, me: &Me, rank: usize) -> Vec<Copy> {
    let mut copies = Vec::new();
    if let Some(dir) = job_dir {
        if let Some(sub) = &config.workspace.train_config_dir {
            copies.push(Copy {
                from: dir.root.join(sub),
                to: config.workspace.workdir.clone(),
            });
        }
        if me.trainer_rank.is_some() {
            copies.push(Copy {
                from: dir.root.join(rank.to_string()).join("data"),
                to: config.workspace.workdir.join("data"),
            });
        }
    }
    copies
}

/// The files a trainer pod is given: the seed's id files (one trainer per pod), and its shard
/// of the train and test lists.
fn files_of(config: &Config, me: &Me, inputs: &InputFiles) -> Vec<FileSpec> {
    let mut files = Vec::new();
    if let Some(id) = me.trainer_rank {
        // The seed's files say one trainer's id: none when the pod runs several (each is told
        // its own in PADDLE_TRAINER_ID).
        let id_dir = config
            .workspace
            .id_dir
            .as_ref()
            .filter(|_| !config.topology.processes.several());
        if let Some(dir) = id_dir {
            for (name, value) in [
                ("trainer_id", id as u32),
                ("trainer_count", config.topology.trainers),
            ] {
                files.push(FileSpec {
                    path: dir.join(name),
                    content: format!("{value}\n"),
                    required: false,
                });
            }
        }
        if let Some(train) = &inputs.train {
            files.push(list_file(
                &config.workspace.train_list,
                &shard(train, config.topology.trainers, id),
            ));
        }
        if let Some(test) = &inputs.test {
            files.push(list_file(
                &config.workspace.test_list,
                &shard(test, config.topology.trainers, id),
            ));
        }
    }
    files
}

/// An elastic job's world size when every pod trains (each trainer's environment).
pub const FULL_WORLD_SIZE: &str = "PADDLE_LAUNCHER_FULL_WORLD_SIZE";

/// The lists Paddle's launcher keeps out of a process's environment when they are this long or
/// longer (`launch/utils/process_context.py`: `LIMIT_LEN_ENVS`; the pod's `PADDLE_ENV_LIMIT_LEN`
/// instead, as there): Linux
/// refuses an exec with one string over 128 KiB (MAX_ARG_STRLEN), which 8 GPUs on 1,000 nodes
/// reach.
const LONG_LISTS: [&str; 2] = ["TRAINER_IP_PORT_LIST", "PADDLE_TRAINER_ENDPOINTS"];
pub const ENV_LIMIT_LEN: usize = 48_000;

/// A process's lists too long for its environment, as Paddle's launcher handles them: left out
/// and written, as JSON, to `backup_env.<trainer id>.json` in its log directory (else its work
/// directory), whose path it is given as `PADDLE_BACKUP_ENV_PATH`; Paddle reads the lists back
/// from there (`paddle.distributed.backup_env.getenv_or_backup`). None when none is that long.
fn backup_long_lists(config: &Config, process: &mut ProcessSpec) -> Option<FileSpec> {
    // The pod's own limit, as Paddle's launcher reads it.
    let limit = (config.topology.processes.given.get("PADDLE_ENV_LIMIT_LEN"))
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(ENV_LIMIT_LEN);
    let names: Vec<&str> = LONG_LISTS
        .into_iter()
        .filter(|name| process.env.get(*name).is_some_and(|v| v.len() >= limit))
        .collect();
    let long: BTreeMap<String, String> = names
        .into_iter()
        .filter_map(|name| process.env.remove_entry(name))
        .collect();
    if long.is_empty() {
        return None;
    }
    let id = process.place.as_ref().map_or(0, |p| p.trainer_id);
    let name = format!("backup_env.{id}.json");
    // The log directory is absolute; a relative work directory is the process's own.
    let workdir = &config.workspace.workdir;
    let (written, given) = match process.env.get("PADDLE_LOG_DIR") {
        Some(dir) => (Path::new(dir).join(&name), Path::new(dir).join(&name)),
        None if workdir.is_absolute() => (workdir.join(&name), workdir.join(&name)),
        None => (workdir.join(&name), PathBuf::from(&name)),
    };
    let env = "PADDLE_BACKUP_ENV_PATH".to_string();
    process.env.insert(env, given.display().to_string());
    Some(FileSpec {
        path: written,
        content: serde_json::to_string(&long).unwrap_or_default(),
        required: true,
    })
}

/// Every pod with its rank and what it runs; a pod in both lists is listed once as "both".
fn pod_entries(membership: &Membership) -> Vec<PodEntry> {
    let entry = |member: &Member, role: &'static str| PodEntry {
        name: member.name.clone(),
        ip: member.ip,
        rank: member.rank,
        role,
    };
    if membership.pservers == membership.trainers {
        return membership
            .trainers
            .iter()
            .map(|p| entry(p, "both"))
            .collect();
    }
    let pservers = membership.pservers.iter().map(|p| entry(p, "pserver"));
    pservers
        .chain(membership.trainers.iter().map(|p| entry(p, "trainer")))
        .collect()
}

#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;
    use crate::cli::JobArgs;
    use crate::config::GroupKind;
    use crate::membership::{rank, testing::pod};

    /// A config from the tutorial job's values plus edits.
    pub fn config(edit: impl FnOnce(&mut JobArgs)) -> Config {
        let mut args = JobArgs {
            job_name: Some("paddle-cluster-job".into()),
            gradient_num: Some("3".into()),
            ..JobArgs::default()
        };
        edit(&mut args);
        Config::from_args(&args).unwrap()
    }

    /// A process's environment without the launcher's own variables (its progress file,
    /// checkpoint signal): the protocol's contract, sorted by name.
    pub fn contract(env: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
        env.iter()
            .filter(|(k, _)| !k.starts_with("PADDLE_LAUNCHER_"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    pub fn members(prefix: &str, ips: &[&str]) -> Vec<Member> {
        let pods: Vec<_> = ips
            .iter()
            .enumerate()
            .map(|(i, ip)| pod(&format!("{prefix}-{i}"), Some(ip), "Running"))
            .collect();
        rank(&pods)
    }

    /// The layout of PaddlePaddle's tutorial (3 pods), or PaddleCloud's split layout of 2
    /// pservers + 3 trainers.
    pub fn membership(config: &Config) -> Membership {
        let trainers = members("t", &["10.0.1.1", "10.0.1.2", "10.0.1.3"]);
        let groups = if config.own_group() == GroupKind::Job {
            vec![(GroupKind::Job, trainers)]
        } else {
            vec![
                (GroupKind::Pservers, members("p", &["10.0.0.1", "10.0.0.2"])),
                (GroupKind::Trainers, trainers),
            ]
        };
        Membership::from_groups(config.topology.protocol, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::cli::JobArgs;

    /// The coordinator is the same on every pod: rank 0 on the control port, or --coordinator.
    #[test]
    fn the_control_plan_names_one_coordinator_for_every_pod() {
        let me = |ip: &str, name: &str| Me {
            name: name.into(),
            ip: ip.parse().unwrap(),
            pserver_rank: None,
            trainer_rank: Some(0),
        };
        let off = config(|_| {});
        assert_eq!(
            ControlPlan::new(&off, &membership(&off), &me("10.0.1.1", "t-0")),
            None
        );
        let on = config(|a| a.job_secret = Some("s".repeat(32)));
        let m = membership(&on);
        let first = ControlPlan::new(&on, &m, &me("10.0.1.1", "t-0")).unwrap();
        let other = ControlPlan::new(&on, &m, &me("10.0.1.2", "t-1")).unwrap();
        assert_eq!(first.coordinator, "10.0.1.1:6171");
        assert_eq!(other.coordinator, first.coordinator);
        assert_eq!(
            (first.this_pod_coordinates, other.this_pod_coordinates),
            (Some(true), Some(false))
        );
        let named = config(|a| {
            a.job_secret_file = Some("/etc/paddle-launcher/secret".into());
            a.coordinator = Some("job-0.job:7000".into());
        });
        let plan = ControlPlan::new(&named, &membership(&named), &me("10.0.1.2", "t-1")).unwrap();
        assert_eq!(
            (plan.coordinator.as_str(), plan.this_pod_coordinates),
            ("job-0.job:7000", None)
        );
    }

    #[test]
    fn shards_are_disjoint_and_cover_every_file() {
        let files: Vec<PathBuf> = ["d/part-3", "d/part-1", "d/part-0", "d/part-2", "d/part-4"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let shards: Vec<Vec<PathBuf>> = (0..2).map(|id| shard(&files, 2, id)).collect();
        assert_eq!(
            shards[0],
            ["d/part-0", "d/part-2", "d/part-4"].map(PathBuf::from)
        );
        assert_eq!(shards[1], ["d/part-1", "d/part-3"].map(PathBuf::from));
    }

    /// The trainer is told its checkpoint signal only when it can be asked for a checkpoint:
    /// with a window (the channel's default, or one given), not when none would ever come.
    #[test]
    fn the_checkpoint_signal_is_told_only_when_it_may_be_sent() {
        let told = |edit: fn(&mut JobArgs)| {
            let cfg = config(edit);
            let m = membership(&cfg);
            let me = m.locate(&cfg, None, "10.0.1.2".parse().unwrap()).unwrap();
            let p = plan(&cfg, &m, &me, &InputFiles::default());
            let trainer = p
                .processes
                .iter()
                .find(|s| s.role == Role::Trainer)
                .unwrap();
            trainer
                .env
                .get(crate::config::CHECKPOINT_SIGNAL.env())
                .cloned()
        };
        assert_eq!(told(|_| {}), None, "no channel, no window");
        let channel = told(|a| a.job_secret = Some("s".repeat(32)));
        assert_eq!(channel.as_deref(), Some("SIGUSR1"));
        let given = told(|a| a.checkpoint_window = Some("5".into()));
        assert_eq!(given.as_deref(), Some("SIGUSR1"));
        let off = told(|a| {
            a.job_secret = Some("s".repeat(32));
            a.checkpoint_signal = Some("none".into());
        });
        assert_eq!(off, None);
    }

    #[test]
    fn trainer_gets_id_files_and_its_share_of_the_lists() {
        let cfg = config(|a| a.id_dir = Some("/ids".into()));
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.1.2".parse().unwrap()).unwrap();
        let inputs = InputFiles {
            train: Some(
                (0..6)
                    .map(|i| PathBuf::from(format!("/data/train-{i}")))
                    .collect(),
            ),
            test: None,
        };
        let p = plan(&cfg, &m, &me, &inputs);
        let file = |name: &str| {
            p.files
                .iter()
                .find(|f| f.path.ends_with(name))
                .unwrap()
                .content
                .clone()
        };
        assert_eq!(file("trainer_id"), "1\n");
        assert_eq!(file("trainer_count"), "3\n");
        assert_eq!(file("train.list"), "/data/train-1\n/data/train-4\n");
        assert!(p.files.iter().all(|f| !f.path.ends_with("test.list")));
    }

    #[test]
    fn pserver_pod_gets_no_trainer_files_and_no_gate() {
        let cfg = config(|a| {
            a.role = Some("pserver".into());
            a.protocol = Some("v2".into());
            a.pserver_count = Some("2".into());
            a.trainer_count = Some("3".into());
            a.gradient_num = None;
            a.entry = Some("python train.py".into());
        });
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.0.2".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        assert_eq!((p.pserver_id, p.trainer_id), (Some(1), None));
        assert!(p.files.is_empty() && p.pserver_endpoints.is_empty());
        assert_eq!(p.processes.len(), 1);
        assert_eq!(p.processes[0].role, Role::Pserver);
    }
}
