//! The launch plan: what `plan` prints as JSON and what `run` carries out.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use serde::Serialize;

use crate::config::Config;

use crate::membership::{Me, Membership};
use crate::vocabulary::Protocol;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Pserver,
    Trainer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Pserver => "pserver",
            Role::Trainer => "trainer",
        }
    }
}

/// One process to start: argv goes to execve as is (no shell), env is added to the launcher's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessSpec {
    /// `pserver-<rank>` / `trainer-<rank>`: the prefix of its output lines.
    pub name: String,
    pub role: Role,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// File that receives a copy of the process's output, besides the container's stdout.
    pub log: Option<PathBuf>,
    /// A trainer's place in the job (one row of the plan's processes); None for a pserver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<TrainerPlace>,
    /// Variables of the launcher's environment the process does not get (a collective or fleet
    /// process's `http_proxy` and `https_proxy`, kept as `*_original`, as Paddle 3.x's launcher
    /// does).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unset: Vec<String>,
}

/// A trainer process's place in the job: what `plan` and `doctor` show of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrainerPlace {
    /// Pod-major: the pod's rank x processes per pod + the local rank.
    pub trainer_id: usize,
    /// The job's trainer processes.
    pub of: usize,
    pub local_rank: usize,
    /// Its own endpoint (collective, fleet).
    pub endpoint: Option<String>,
    /// Its GPU, an index into CUDA_VISIBLE_DEVICES (`FLAGS_selected_gpus`).
    pub device: Option<String>,
    pub progress_file: PathBuf,
}

impl TrainerPlace {
    /// "trainer id 5 of 8 (local rank 1)": how the process is named where its end or hang is
    /// told.
    pub fn named(&self) -> String {
        format!(
            "trainer id {} of {} (local rank {})",
            self.trainer_id, self.of, self.local_rank
        )
    }
}

/// A directory whose contents are copied into the work directory before the launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Copy {
    pub from: PathBuf,
    pub to: PathBuf,
}

/// A small file written before the launch (id files, train/test lists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileSpec {
    pub path: PathBuf,
    pub content: String,
    /// A required file that cannot be written stops the launch; others only warn.
    pub required: bool,
}

/// A pod of the job, its rank among the pods of its role, and what it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodEntry {
    pub name: String,
    pub ip: IpAddr,
    pub rank: usize,
    /// "both", "pserver" or "trainer".
    pub role: &'static str,
}

impl PodEntry {
    pub fn address(&self) -> crate::membership::PodAddress {
        crate::membership::PodAddress {
            name: self.name.clone(),
            ip: self.ip,
        }
    }
}

/// The job's control channel as this pod will join it (when a job secret is configured).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlPlan {
    /// HOST:PORT of the coordinating launcher.
    pub coordinator: String,
    /// Whether this pod serves it; null when HOST is a DNS name, resolved at the launch.
    pub this_pod_coordinates: Option<bool>,
    pub heartbeat_timeout_s: u64,
    /// Group restarts the job may make.
    pub max_restarts: u32,
    /// Preemptions that restart the job without spending a restart; null: every one.
    pub max_preemptions: Option<u32>,
    /// An elastic job's range of pods; null: every pod or none.
    pub elastic: Option<ElasticPlan>,
}

/// An elastic job as `plan` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ElasticPlan {
    pub min_pods: u32,
    pub max_pods: u32,
    /// How long the pods that are not Running are waited for before the job goes on without.
    pub elastic_wait_s: u64,
}

impl ControlPlan {
    /// The coordinator: --coordinator's HOST:PORT, else the pod of rank 0 (the first trainer,
    /// else the first pserver) on the control port — the same on every pod.
    pub fn new(config: &Config, membership: &Membership, me: &Me) -> Option<ControlPlan> {
        let control = &config.control;
        if !control.is_on() {
            return None;
        }
        let (coordinator, this_pod_coordinates) =
            crate::coordination::coordinator(control, membership, me)?;
        Some(ControlPlan {
            coordinator,
            this_pod_coordinates,
            heartbeat_timeout_s: control.heartbeat_timeout.as_secs(),
            max_restarts: control.max_restarts,
            max_preemptions: Some(control.max_preemptions)
                .filter(|&n| n != crate::verdict::UNBOUNDED_PREEMPTIONS),
            elastic: control.elastic.map(|e| ElasticPlan {
                min_pods: e.min_pods,
                max_pods: e.max_pods,
                elastic_wait_s: e.wait.as_secs(),
            }),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub job: String,
    pub namespace: Option<String>,
    pub protocol: Protocol,
    /// This pod's trainer rank; null on a pserver-only pod.
    pub trainer_id: Option<usize>,
    /// This pod's pserver rank; null when it runs no pserver.
    pub pserver_id: Option<usize>,
    pub num_gradient_servers: u32,
    pub pod_ip: IpAddr,
    pub pods: Vec<PodEntry>,
    /// Every pserver endpoint of the job; the trainer starts once all of them accept TCP.
    pub pserver_endpoints: Vec<SocketAddr>,
    /// Copies done before the launch, when their source exists.
    pub copies: Vec<Copy>,
    pub files: Vec<FileSpec>,
    pub processes: Vec<ProcessSpec>,
    /// The control channel; null without a job secret.
    pub control: Option<ControlPlan>,
    /// The job-wide restart epoch these processes start in: 0 first, then one more per group
    /// restart (`PADDLE_LAUNCHER_RESTART_COUNT`, so a program can resume from its checkpoint).
    pub restart_count: u32,
    /// The batch system that created this pod and the settings taken from it; null: none.
    pub runtime: Option<crate::config::RuntimeReport>,
    /// NCCL's and gloo's socket interface: what the processes are given, and why.
    pub sockets: Vec<crate::network::SocketSetting>,
}

/// The variable that tells the training program which restart epoch it runs in.
pub const RESTART_COUNT: &str = "PADDLE_LAUNCHER_RESTART_COUNT";

impl Plan {
    /// The plan for restart epoch `epoch`: the same processes, told the epoch.
    pub fn for_restart(mut self, epoch: u32) -> Plan {
        self.restart_count = epoch;
        for process in &mut self.processes {
            process.env.insert(RESTART_COUNT.into(), epoch.to_string());
        }
        self
    }

    /// What the launcher adds to each process's environment at its start, in the plan so that
    /// `plan` shows exactly what runs. Python block-buffers a pipe (lines would reach `kubectl
    /// logs` late, and be lost on SIGKILL) and prints no stacks on SIGABRT: PYTHONUNBUFFERED and
    /// PYTHONFAULTHANDLER are 1 unless the pod (`inherited`) or the plan sets them. With hang
    /// detection, a trainer's PYTHONPATH starts with `stack_handler`, whose sitecustomize lets
    /// a hung Python be asked for its stacks.
    pub fn with_launcher_env(
        mut self,
        inherited: impl Fn(&str) -> Option<String>,
        stack_handler: Option<&std::path::Path>,
    ) -> Plan {
        for process in &mut self.processes {
            for variable in ["PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"] {
                if !process.env.contains_key(variable) && inherited(variable).is_none() {
                    process.env.insert(variable.into(), "1".into());
                }
            }
            // Paddle 3.x's launcher (`context/args_envs.py`) takes the proxies from every process
            // it starts "to ensure stable NCCL communication", backed up as `*_original`: the
            // collective and fleet processes get the same environment here.
            let paddle_launched = self.protocol.paddles_launcher();
            for proxy in ["http_proxy", "https_proxy"] {
                let Some(value) = inherited(proxy).filter(|_| paddle_launched) else {
                    continue;
                };
                if !process.env.contains_key(proxy) {
                    process.env.insert(format!("{proxy}_original"), value);
                    process.unset.push(proxy.to_string());
                }
            }
            if let (Role::Trainer, Some(ours)) = (process.role, stack_handler) {
                let theirs = process
                    .env
                    .get("PYTHONPATH")
                    .cloned()
                    .or_else(|| inherited("PYTHONPATH"))
                    .filter(|p| !p.is_empty());
                let path = match theirs {
                    Some(theirs) => format!("{}:{theirs}", ours.display()),
                    None => ours.display().to_string(),
                };
                process.env.insert("PYTHONPATH".into(), path);
            }
        }
        self
    }

    /// The first process of `role` (the pod's trainer, or its local rank 0).
    pub fn process(&self, role: Role) -> Option<&ProcessSpec> {
        self.processes.iter().find(|p| p.role == role)
    }

    /// The pod's trainer processes, local rank order.
    pub fn trainers(&self) -> impl Iterator<Item = &ProcessSpec> {
        self.processes.iter().filter(|p| p.role == Role::Trainer)
    }

    pub fn to_json(&self) -> String {
        // Serialising plain strings, numbers and maps cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;

    /// A collective plan of `processes` for the pod at `pod_ip` of `pods`, trainer 0.
    pub fn plan_of(processes: Vec<ProcessSpec>, pods: Vec<PodEntry>, pod_ip: IpAddr) -> Plan {
        Plan {
            job: "j".into(),
            namespace: None,
            protocol: Protocol::Collective,
            trainer_id: Some(0),
            pserver_id: None,
            num_gradient_servers: 1,
            pod_ip,
            pods,
            pserver_endpoints: Vec::new(),
            copies: Vec::new(),
            files: Vec::new(),
            processes,
            control: None,
            restart_count: 0,
            runtime: None,
            sockets: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    fn process(role: Role, env: &[(&str, &str)]) -> ProcessSpec {
        ProcessSpec {
            name: role.as_str().into(),
            role,
            argv: vec!["python".into()],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: PathBuf::from("/work"),
            log: None,
            place: None,
            unset: Vec::new(),
        }
    }

    /// As Paddle 3.x's launcher does for every process it starts, a collective or fleet
    /// process gets no http(s)_proxy, kept as `*_original`; the seed's protocols keep theirs; a
    /// proxy the plan itself sets stands.
    #[test]
    fn paddle_trainers_get_the_proxies_as_originals() {
        let processes = vec![
            process(Role::Pserver, &[]),
            process(Role::Trainer, &[]),
            process(Role::Trainer, &[("https_proxy", "http://plan:3128")]),
        ];
        let plan = plan_of(processes, Vec::new(), IpAddr::from([127, 0, 0, 1]));
        let pod = |name: &str| match name {
            "http_proxy" | "https_proxy" => Some("http://proxy:3128".to_string()),
            _ => None,
        };
        let collective = plan.clone().with_launcher_env(pod, None);
        let unset = |plan: &Plan, i: usize| plan.processes[i].unset.clone();
        let original = |plan: &Plan, i: usize, name: &str| {
            plan.processes[i]
                .env
                .get(&format!("{name}_original"))
                .cloned()
        };
        assert_eq!(
            unset(&collective, 0),
            ["http_proxy", "https_proxy"],
            "a pserver too"
        );
        assert_eq!(unset(&collective, 1), ["http_proxy", "https_proxy"]);
        assert_eq!(
            original(&collective, 1, "https_proxy").as_deref(),
            Some("http://proxy:3128")
        );
        assert_eq!(
            unset(&collective, 2),
            ["http_proxy"],
            "the plan's own stands"
        );
        let mut v1 = plan;
        v1.protocol = Protocol::V1;
        let v1 = v1.with_launcher_env(pod, None);
        assert_eq!(unset(&v1, 1), Vec::<String>::new());
        assert_eq!(original(&v1, 1, "http_proxy"), None);
    }

    /// The pod's own values and the plan's stand; the stack handler comes first on a trainer's
    /// PYTHONPATH, before the plan's or the pod's, and only with hang detection.
    #[test]
    fn the_variables_added_at_start_are_in_the_plan() {
        let processes = vec![
            process(Role::Pserver, &[]),
            process(Role::Trainer, &[("PYTHONPATH", "/plan")]),
            process(Role::Trainer, &[("PYTHONFAULTHANDLER", "0")]),
        ];
        let plan = plan_of(processes, Vec::new(), IpAddr::from([127, 0, 0, 1]));
        let pod = |name: &str| match name {
            "PYTHONUNBUFFERED" => Some("0".to_string()),
            "PYTHONPATH" => Some("/pod".to_string()),
            _ => None,
        };
        let handler = std::path::Path::new("/tmp/paddle-launcher-python");
        let added = plan.clone().with_launcher_env(pod, Some(handler));
        let env = |i: usize, name: &str| added.processes[i].env.get(name).cloned();
        assert_eq!(env(0, "PYTHONUNBUFFERED"), None, "the pod's 0 is passed on");
        assert_eq!(env(0, "PYTHONFAULTHANDLER").as_deref(), Some("1"));
        assert_eq!(
            env(0, "PYTHONPATH"),
            None,
            "a pserver is not asked for stacks"
        );
        assert_eq!(
            env(1, "PYTHONPATH").as_deref(),
            Some("/tmp/paddle-launcher-python:/plan")
        );
        assert_eq!(
            env(2, "PYTHONPATH").as_deref(),
            Some("/tmp/paddle-launcher-python:/pod")
        );
        assert_eq!(env(2, "PYTHONFAULTHANDLER").as_deref(), Some("0"));
        let without = plan.with_launcher_env(|_| None, None);
        assert_eq!(
            without.processes[1]
                .env
                .get("PYTHONPATH")
                .map(String::as_str),
            Some("/plan")
        );
        assert_eq!(without.processes[2].env.get("PYTHONPATH"), None);
        assert_eq!(
            without.processes[2]
                .env
                .get("PYTHONUNBUFFERED")
                .map(String::as_str),
            Some("1")
        );
    }
}
