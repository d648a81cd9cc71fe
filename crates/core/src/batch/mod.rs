//! Which batch system created this pod, and what that system already says about the job: its
//! pods (a label selector), how many, each pod's rank, and the coordinator. Pure: the shell
//! gathers the facts (environment, this pod's own labels and annotations, the JobSet object)
//! and `detect` asks for the next one it needs. What it finds only fills the settings the user
//! left unset: an explicit `CONF_PADDLE_*`/`JOB_*`/flag always wins (`fill`).
//!
//! The names read here are those each system puts on its pods, as listed (with their sources)
//! in the project's reference `batch-systems.md`.

use std::collections::BTreeMap;

use crate::cli::JobArgs;
use crate::config::{
    Ranking, COORDINATOR, GRADIENT_NUM, JOB_NAME, PSERVER_COUNT, PSERVER_SELECTOR, ROLE, RUNTIME,
    SELECTOR, TRAINER_COUNT, TRAINER_SELECTOR,
};
use crate::error::ConfigError;
use crate::vocabulary::{System, COMPLETION_INDEX};

pub mod indexed_job;
pub mod jobset;
pub mod kubeflow;
pub mod lws;
pub mod volcano;

/// `--runtime`: which system to read, or `auto` (whichever this pod shows), or `static` (none:
/// the settings alone, as before any system was read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Static,
    Only(System),
}

pub fn parse_choice(text: Option<&str>) -> Result<Choice, ConfigError> {
    Ok(match text.unwrap_or("auto") {
        "auto" => Choice::Auto,
        "static" => Choice::Static,
        "job" => Choice::Only(System::Job),
        "jobset" => Choice::Only(System::JobSet),
        "volcano" => Choice::Only(System::Volcano),
        "lws" => Choice::Only(System::Lws),
        "kubeflow" => Choice::Only(System::Kubeflow),
        other => {
            return Err(ConfigError::new(
                RUNTIME,
                other,
                "one of auto, job, jobset, volcano, lws, kubeflow, static",
            ))
        }
    })
}

/// What this pod knows of itself so far.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The environment variables the systems set (any others are ignored).
    pub env: BTreeMap<String, String>,
    /// This pod's labels and annotations in one map (annotations win), once fetched.
    pub own: Option<BTreeMap<String, String>>,
    /// (replicated job, pods) of the JobSet this pod belongs to, once fetched.
    pub jobset: Option<Vec<(String, u32)>>,
    /// The user gave the job's counts: the JobSet object is not needed (nor `get` on it).
    pub counts_given: bool,
}

/// The next fact detection needs, or its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Done(Option<Box<Detected>>),
    /// This pod's own object (its labels and annotations).
    OwnPod,
    /// The JobSet of that name: how many pods each replicated job has.
    JobSet(String),
}

/// A group of the job's pods as the system names it: a Volcano task, a JobSet replicated job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub name: String,
    pub selector: String,
    pub pods: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Every pod is alike (role both).
    Colocated(Task),
    /// A pserver task and a trainer task; `own_is_pserver` says which this pod is in.
    Split {
        pservers: Task,
        trainers: Task,
        own_is_pserver: bool,
    },
}

/// What the system says about the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub system: System,
    pub job_name: String,
    pub layout: Layout,
    pub ranking: Ranking,
    /// Host of the coordinating launcher (a stable DNS name the system provides).
    pub coordinator: Option<String>,
    /// Where each of the above came from, for `plan` and `doctor`.
    pub sources: Vec<String>,
}

/// Where a system shows itself on a pod: its environment (read first: it costs nothing) or its
/// own labels (one API request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign {
    Env,
    Labels,
}

/// The order in which the signs are read: the first that answers wins. Environment before
/// labels; among the labels the most specific system first (a JobSet's pods also carry the
/// labels of the Job it made; a Kubeflow PaddleJob's are plain pods with its own labels).
pub const PRECEDENCE: &[(System, Sign)] = &[
    (System::Lws, Sign::Env),
    (System::Volcano, Sign::Env),
    (System::JobSet, Sign::Labels),
    (System::Volcano, Sign::Labels),
    (System::Lws, Sign::Labels),
    (System::Kubeflow, Sign::Labels),
    (System::Job, Sign::Labels),
];

/// The next step of detection. `need_own_pod`: whether, in `auto`, a pod without any sign in
/// its environment is worth one API request for its labels (the shell says yes when a setting
/// the job needs is missing).
pub fn detect(choice: Choice, facts: &Facts, need_own_pod: bool) -> Result<Step, ConfigError> {
    if choice == Choice::Static {
        return Ok(Step::Done(None));
    }
    let wanted = |system| choice == Choice::Auto || choice == Choice::Only(system);
    let found = |d: Option<Detected>| d.map(|d| Step::Done(Some(Box::new(d))));
    for &(system, sign) in PRECEDENCE.iter().filter(|(system, _)| wanted(*system)) {
        let own = match (sign, &facts.own) {
            (Sign::Env, _) => None,
            (Sign::Labels, Some(own)) => Some(own),
            (Sign::Labels, None) => {
                return Ok(if choice == Choice::Auto && !need_own_pod {
                    Step::Done(None)
                } else {
                    Step::OwnPod
                });
            }
        };
        let step = match (system, own) {
            (System::Lws, None) => found(lws::from_env(&facts.env)?),
            (System::Volcano, None) => found(volcano::from_env(&facts.env)?),
            (System::JobSet, Some(own)) => match own.get(jobset::JOBSET_NAME) {
                None => None,
                Some(name) => {
                    let jobs = match &facts.jobset {
                        Some(jobs) => Some(jobs.as_slice()),
                        None if facts.counts_given => None,
                        None => return Ok(Step::JobSet(name.clone())),
                    };
                    found(Some(with_own_attempt(
                        jobset::from_labels(name, own, jobs)?,
                        own,
                    )))
                }
            },
            (System::Volcano, Some(own)) => {
                found(volcano::from_labels(own, &facts.env).map(|d| with_own_attempt(d, own)))
            }
            (System::Lws, Some(own)) => found(lws::from_labels(own)),
            (System::Kubeflow, Some(own)) => found(kubeflow::from_labels(own, &facts.env)?),
            (System::Job, Some(own)) => found(indexed_job::from_labels(own)),
            (_, None) => None,
        };
        if let Some(step) = step {
            return Ok(step);
        }
    }
    match choice {
        Choice::Only(system) => Err(ConfigError::new(
            RUNTIME,
            system.name(),
            format!(
                "a pod that system created: this pod has no {}",
                system.signs()
            ),
        )),
        _ => Ok(Step::Done(None)),
    }
}

/// This pod's own attempt, read where the system writes it on its pods: the floor below which
/// no pod counts (see `Ranking::own_attempt`).
fn with_own_attempt(mut detected: Detected, own: &BTreeMap<String, String>) -> Detected {
    let key = detected.ranking.attempt;
    detected.ranking.own_attempt = key
        .and_then(|key| own.get(key))
        .and_then(|value| value.parse().ok());
    if let (Some(key), Some(attempt)) = (key, detected.ranking.own_attempt) {
        detected
            .sources
            .push(format!("this pod is of attempt {attempt} ({key})"));
    }
    detected
}

/// One task: every pod alike. A pserver task and a trainer task (by their names): the split
/// layout, this pod in its own task. Several other tasks: the `whole` job as one group when
/// its indexes rank all of its pods (JobSet's global job index), else an error naming them.
fn layout(
    mut tasks: Vec<Task>,
    own: Option<&str>,
    whole: Option<Task>,
    system: System,
) -> Result<Layout, ConfigError> {
    let is_pserver = |t: &Task| matches!(t.name.as_str(), "pserver" | "pservers" | "ps");
    let is_trainer = |t: &Task| matches!(t.name.as_str(), "trainer" | "trainers");
    let names = |tasks: &[Task]| {
        tasks
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if tasks.len() == 2 {
        if let (Some(ps), Some(tr)) = (
            tasks.iter().position(is_pserver),
            tasks.iter().position(is_trainer),
        ) {
            let own_is_pserver = match own {
                Some(own) if own == tasks[ps].name => true,
                Some(own) if own == tasks[tr].name => false,
                _ => {
                    return Err(ConfigError::new(
                        RUNTIME,
                        system.name(),
                        format!(
                            "a pod whose own task is known (tasks {}; this pod's: {}): set POD_NAME from the downward API, or PADDLE_LAUNCHER_ROLE",
                            names(&tasks),
                            own.unwrap_or("unknown")
                        ),
                    ))
                }
            };
            let trainers = tasks[tr].clone();
            let pservers = tasks.swap_remove(ps);
            return Ok(Layout::Split {
                pservers,
                trainers,
                own_is_pserver,
            });
        }
    }
    if tasks.len() == 1 {
        return Ok(Layout::Colocated(tasks.swap_remove(0)));
    }
    match whole {
        Some(whole) if !tasks.is_empty() => Ok(Layout::Colocated(whole)),
        _ => Err(ConfigError::new(
            RUNTIME,
            system.name(),
            format!(
                "one task, or a `pserver` and a `trainer` task, to read the job from (this job has: {}); set the job's selector and counts yourself, or --runtime static",
                if tasks.is_empty() { "none".to_string() } else { names(&tasks) }
            ),
        )),
    }
}

fn count(name: &str, text: &str) -> Result<u32, ConfigError> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| unexpected(name, text, "a number of pods from 1"))
}

/// A value a batch system set that does not have its documented shape.
fn unexpected(name: &str, value: &str, shape: &str) -> ConfigError {
    ConfigError {
        variable: format!("{name} (set by the batch system; --runtime static ignores it)"),
        value: value.to_string(),
        expected: shape.to_string(),
    }
}

/// The settings with what the system says filled in where the user set nothing, and one
/// line per setting saying where its value came from, or that the user's own won.
pub fn fill(detected: &Detected, args: &JobArgs) -> (JobArgs, Vec<String>) {
    let mut out = args.clone();
    let mut notes = detected.sources.clone();
    let mut set = |slot: &mut Option<String>, name: &str, value: Option<String>| {
        let Some(value) = value else { return };
        match crate::config::present(slot) {
            Some(own) if own != value => notes.push(format!(
                "{name}: the setting {own:?} wins over {value:?} from {}",
                detected.system.name()
            )),
            Some(_) => {}
            None => {
                notes.push(format!("{name}={value} from {}", detected.system.name()));
                *slot = Some(value);
            }
        }
    };
    set(
        &mut out.job_name,
        JOB_NAME.env(),
        Some(detected.job_name.clone()),
    );
    fill_layout(&detected.layout, args, &mut out, &mut set);
    if let Some(host) = &detected.coordinator {
        let port = crate::config::present(&args.control_port)
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(crate::config::DEFAULT_CONTROL_PORT);
        set(
            &mut out.coordinator,
            COORDINATOR.env(),
            Some(format!("{host}:{port}")),
        );
    }
    (out, notes)
}

/// The system's pods of the job, each layout's own settings: filled where not set.
fn fill_layout(
    layout: &Layout,
    args: &JobArgs,
    out: &mut JobArgs,
    set: &mut impl FnMut(&mut Option<String>, &str, Option<String>),
) {
    // A selector given picks other pods than the system's: their count is the user's too.
    let pods = |t: &Task, selector: &Option<String>| match crate::config::present(selector) {
        Some(_) => None,
        None => t.pods.map(|n| n.to_string()),
    };
    match layout {
        Layout::Colocated(task) => {
            set(
                &mut out.selector,
                SELECTOR.env(),
                Some(task.selector.clone()),
            );
            set(
                &mut out.gradient_num,
                GRADIENT_NUM.env(),
                pods(task, &args.selector),
            );
        }
        Layout::Split {
            pservers,
            trainers,
            own_is_pserver,
        } => {
            let role = if *own_is_pserver {
                "pserver"
            } else {
                "trainer"
            };
            set(&mut out.role, ROLE.env(), Some(role.to_string()));
            set(
                &mut out.pserver_selector,
                PSERVER_SELECTOR.env(),
                Some(pservers.selector.clone()),
            );
            set(
                &mut out.trainer_selector,
                TRAINER_SELECTOR.env(),
                Some(trainers.selector.clone()),
            );
            set(
                &mut out.pserver_count,
                PSERVER_COUNT.env(),
                pods(pservers, &args.pserver_selector),
            );
            set(
                &mut out.trainer_count,
                TRAINER_COUNT.env(),
                pods(trainers, &args.trainer_selector),
            );
        }
    }
}

/// The environment variables `detect` reads.
pub fn system_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(name, _)| {
            name.starts_with("VC_")
                || name.starts_with("VK_")
                || name.starts_with("LWS_")
                || matches!(
                    name.as_str(),
                    "HOSTNAME"
                        | "POD_NAME"
                        | "PADDLE_NNODES"
                        | "PADDLE_SERVER_NUM"
                        | "PADDLE_TRAINER_NUM"
                )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::indexed_job::JOB_NAME;
    use super::jobset::*;
    use super::kubeflow::*;
    use super::lws::*;
    use super::volcano::*;
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn done(step: Step) -> Detected {
        match step {
            Step::Done(Some(d)) => *d,
            other => panic!("expected a detection, got {other:?}"),
        }
    }

    fn colocated(d: &Detected) -> &Task {
        match &d.layout {
            Layout::Colocated(task) => task,
            other => panic!("expected one task, got {other:?}"),
        }
    }

    /// The pserver task, the trainer task, and whether this pod is a pserver.
    fn split_of(d: &Detected) -> (&Task, &Task, bool) {
        match &d.layout {
            Layout::Split {
                pservers,
                trainers,
                own_is_pserver,
            } => (pservers, trainers, *own_is_pserver),
            other => panic!("expected two tasks, got {other:?}"),
        }
    }

    #[test]
    fn a_leaderworkerset_group_is_read_from_its_environment() {
        let facts = Facts {
            env: map(&[
                ("LWS_LEADER_ADDRESS", "train-3.train.ml"),
                ("LWS_GROUP_SIZE", "4"),
                ("LWS_WORKER_INDEX", "2"),
            ]),
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &facts, false).unwrap());
        assert_eq!(d.system, System::Lws);
        assert_eq!(d.job_name, "train-3");
        let task = colocated(&d);
        assert_eq!(
            task.selector,
            "leaderworkerset.sigs.k8s.io/name=train,leaderworkerset.sigs.k8s.io/group-index=3"
        );
        assert_eq!(task.pods, Some(4));
        assert_eq!(d.coordinator.as_deref(), Some("train-3.train.ml"));
        assert_eq!(d.ranking.index, [LWS_WORKER_INDEX]);
        // subdomainPolicy UniquePerReplica: the subdomain is the leader's hostname.
        let unique = Facts {
            env: map(&[
                ("LWS_LEADER_ADDRESS", "my-lws-3.my-lws-3.ml"),
                ("LWS_GROUP_SIZE", "2"),
            ]),
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &unique, false).unwrap());
        assert_eq!(
            colocated(&d).selector,
            "leaderworkerset.sigs.k8s.io/name=my-lws,leaderworkerset.sigs.k8s.io/group-index=3"
        );
        // A shape the system never writes is named, not guessed at.
        let bad = Facts {
            env: map(&[("LWS_LEADER_ADDRESS", "nodots"), ("LWS_GROUP_SIZE", "4")]),
            ..Facts::default()
        };
        let e = detect(Choice::Auto, &bad, false).unwrap_err();
        assert!(e.to_string().contains("LWS_LEADER_ADDRESS"), "{e}");
        // --runtime static reads none of it.
        assert_eq!(
            detect(Choice::Static, &facts, true).unwrap(),
            Step::Done(None)
        );
    }

    /// The svc plugin's ConfigMap (`/etc/volcano/<task>.host`, a host per line) says what its
    /// variables say: a container without them detects the same split layout.
    #[test]
    fn host_files_stand_in_for_the_svc_variables() {
        let files = [
            ("pserver.host", "ctr-pserver-0.ctr\nctr-pserver-1.ctr\n"),
            (
                "trainer.host",
                "ctr-trainer-0.ctr\nctr-trainer-1.ctr\nctr-trainer-2.ctr\n\n",
            ),
            ("big-task.host", "ctr-big-task-0.ctr"),
            ("empty.host", "\n"),
            ("notes.txt", "ctr-x-0.ctr"),
        ]
        .map(|(name, text)| (name.to_string(), text.to_string()));
        let env = host_files(&files);
        assert_eq!(
            env,
            map(&[
                ("VC_BIG_TASK_HOSTS", "ctr-big-task-0.ctr"),
                ("VC_BIG_TASK_NUM", "1"),
                ("VC_PSERVER_HOSTS", "ctr-pserver-0.ctr,ctr-pserver-1.ctr"),
                ("VC_PSERVER_NUM", "2"),
                (
                    "VC_TRAINER_HOSTS",
                    "ctr-trainer-0.ctr,ctr-trainer-1.ctr,ctr-trainer-2.ctr"
                ),
                ("VC_TRAINER_NUM", "3"),
            ])
        );
        let mut env = host_files(&files[..2]);
        env.extend(map(&[
            ("VC_TASK_INDEX", "1"),
            ("HOSTNAME", "ctr-trainer-1"),
        ]));
        let facts = Facts {
            env,
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &facts, false).unwrap());
        let (pservers, trainers, own_is_pserver) = split_of(&d);
        assert!(!own_is_pserver);
        assert_eq!((pservers.pods, trainers.pods), (Some(2), Some(3)));
    }

    #[test]
    fn volcano_tasks_come_from_its_svc_plugin_and_name_the_layout() {
        let one_task = Facts {
            env: map(&[
                ("VC_TASK_INDEX", "1"),
                (
                    "VC_WORKER_HOSTS",
                    "mnist-worker-0.mnist,mnist-worker-1.mnist,mnist-worker-2.mnist",
                ),
                ("VC_WORKER_NUM", "3"),
                ("HOSTNAME", "mnist-worker-1"),
            ]),
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &one_task, false).unwrap());
        assert_eq!((d.system, d.job_name.as_str()), (System::Volcano, "mnist"));
        let task = colocated(&d);
        assert_eq!(
            task.selector,
            "volcano.sh/job-name=mnist,volcano.sh/task-spec=worker"
        );
        assert_eq!(task.pods, Some(3));
        assert_eq!(d.coordinator.as_deref(), Some("mnist-worker-0.mnist"));
        assert_eq!(d.ranking.attempt, Some(VOLCANO_JOB_VERSION));

        let split = Facts {
            env: map(&[
                ("VC_TASK_INDEX", "0"),
                ("VC_PSERVER_HOSTS", "ctr-pserver-0.ctr,ctr-pserver-1.ctr"),
                ("VC_PSERVER_NUM", "2"),
                (
                    "VC_TRAINER_HOSTS",
                    "ctr-trainer-0.ctr,ctr-trainer-1.ctr,ctr-trainer-2.ctr",
                ),
                ("VC_TRAINER_NUM", "3"),
                ("HOSTNAME", "ctr-pserver-0"),
            ]),
            ..Facts::default()
        };
        let d = done(detect(Choice::Only(System::Volcano), &split, false).unwrap());
        let (pservers, trainers, own_is_pserver) = split_of(&d);
        assert!(own_is_pserver);
        assert_eq!((pservers.pods, trainers.pods), (Some(2), Some(3)));
        assert_eq!(
            trainers.selector,
            "volcano.sh/job-name=ctr,volcano.sh/task-spec=trainer"
        );
        assert_eq!(d.coordinator, None);
    }

    #[test]
    fn a_jobset_pod_asks_for_its_labels_then_its_jobset() {
        let mut facts = Facts::default();
        // Nothing in the environment: in auto, only a pod missing a setting asks the API.
        assert_eq!(
            detect(Choice::Auto, &facts, false).unwrap(),
            Step::Done(None)
        );
        assert_eq!(detect(Choice::Auto, &facts, true).unwrap(), Step::OwnPod);
        facts.own = Some(map(&[
            (JOBSET_NAME, "big"),
            (JOBSET_REPLICATED_JOB, "trainer"),
            (JOBSET_GLOBAL_INDEX, "3"),
            (JOBSET_COORDINATOR, "big-trainer-0-0.big"),
            (JOB_NAME, "big-trainer-1"),
            (JOBSET_RESTART_ATTEMPT, "2"),
        ]));
        assert_eq!(
            detect(Choice::Auto, &facts, true).unwrap(),
            Step::JobSet("big".into())
        );
        let object = serde_json::json!({"spec": {"replicatedJobs": [
            {"name": "pserver", "replicas": 1, "template": {"spec": {"parallelism": 2}}},
            {"name": "trainer", "replicas": 2, "template": {"spec": {"parallelism": 3, "completions": 3}}}
        ]}});
        facts.jobset = Some(jobset_pods(&object));
        assert_eq!(
            facts.jobset.as_deref(),
            Some(&[("pserver".to_string(), 2), ("trainer".to_string(), 6)][..])
        );
        let d = done(detect(Choice::Auto, &facts, true).unwrap());
        assert_eq!(d.system, System::JobSet);
        let (pservers, trainers, own_is_pserver) = split_of(&d);
        assert!(!own_is_pserver);
        assert_eq!((pservers.pods, trainers.pods), (Some(2), Some(6)));
        assert_eq!(
            trainers.selector,
            "jobset.sigs.k8s.io/jobset-name=big,jobset.sigs.k8s.io/replicatedjob-name=trainer"
        );
        assert_eq!(d.ranking.index, [JOBSET_GLOBAL_INDEX, COMPLETION_INDEX]);
        assert_eq!(d.ranking.attempt, Some(JOBSET_RESTART_ATTEMPT));
        // Pods of attempts 0 and 1 never count, in the pserver task too.
        assert_eq!(d.ranking.own_attempt, Some(2));
        // The annotation names a pod of the whole JobSet: no coordinator of the trainers alone.
        assert_eq!(d.coordinator, None);

        // The user gave the counts: the JobSet is not read, and its pods are one job.
        let given = Facts {
            own: facts.own.clone(),
            counts_given: true,
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &given, true).unwrap());
        assert_eq!(colocated(&d).selector, "jobset.sigs.k8s.io/jobset-name=big");
        assert_eq!(colocated(&d).pods, None);
    }

    #[test]
    fn several_groups_are_one_jobset_or_an_error_naming_them() {
        // A driver and workers: the whole JobSet, ranked by the global job index.
        let facts = Facts {
            own: Some(map(&[
                (JOBSET_NAME, "mixed"),
                (JOBSET_REPLICATED_JOB, "workers"),
                (JOBSET_COORDINATOR, "mixed-driver-0-0.mixed"),
            ])),
            jobset: Some(vec![("driver".into(), 1), ("workers".into(), 4)]),
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &facts, true).unwrap());
        let task = colocated(&d);
        assert_eq!(task.selector, "jobset.sigs.k8s.io/jobset-name=mixed");
        assert_eq!(task.pods, Some(5));
        assert_eq!(d.coordinator.as_deref(), Some("mixed-driver-0-0.mixed"));
        // A JobSet object without replicated jobs is named, not a panic.
        let empty = Facts {
            jobset: Some(Vec::new()),
            ..facts
        };
        let e = detect(Choice::Auto, &empty, true).unwrap_err();
        assert!(e.to_string().contains("this job has: none"), "{e}");
        // Volcano tasks whose indexes repeat from task to task: which pods are the job is not
        // guessed.
        let volcano = Facts {
            env: map(&[
                ("VC_TASK_INDEX", "0"),
                ("VC_MPIMASTER_HOSTS", "m-mpimaster-0.m"),
                ("VC_MPIWORKER_HOSTS", "m-mpiworker-0.m,m-mpiworker-1.m"),
                ("HOSTNAME", "m-mpiworker-0"),
            ]),
            ..Facts::default()
        };
        let e = detect(Choice::Auto, &volcano, false).unwrap_err();
        assert!(
            e.to_string().contains("this job has: mpimaster, mpiworker"),
            "{e}"
        );
        // A pserver/trainer job whose own task cannot be told (hostNetwork: the node's name).
        let unknown = Facts {
            env: map(&[
                ("VC_TASK_INDEX", "0"),
                ("VC_PSERVER_HOSTS", "c-pserver-0.c"),
                ("VC_TRAINER_HOSTS", "c-trainer-0.c"),
                ("HOSTNAME", "node-17"),
            ]),
            ..Facts::default()
        };
        let e = detect(Choice::Auto, &unknown, false).unwrap_err();
        assert!(e.to_string().contains("this pod's: unknown"), "{e}");
        let named = Facts {
            env: {
                let mut env = unknown.env.clone();
                env.insert("POD_NAME".into(), "c-trainer-0".into());
                env
            },
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &named, false).unwrap());
        assert!(matches!(
            d.layout,
            Layout::Split {
                own_is_pserver: false,
                ..
            }
        ));
    }

    #[test]
    fn kubeflow_and_plain_jobs_are_read_from_labels() {
        let kubeflow = Facts {
            env: map(&[("PADDLE_NNODES", "4")]),
            own: Some(map(&[
                (KUBEFLOW_JOB_NAME, "pj"),
                (KUBEFLOW_REPLICA_TYPE, "worker"),
                (KUBEFLOW_REPLICA_INDEX, "1"),
            ])),
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &kubeflow, true).unwrap());
        assert_eq!(d.system, System::Kubeflow);
        assert_eq!(colocated(&d).pods, Some(4));
        // With pservers the operator sets PADDLE_TRAINER_NUM=1 on each Worker pod (one trainer
        // per pod, not the job's total): the layout is read, the counts are not guessed.
        let with_servers = Facts {
            env: map(&[("PADDLE_TRAINER_NUM", "1")]),
            ..kubeflow
        };
        let d = done(detect(Choice::Auto, &with_servers, true).unwrap());
        let (pservers, trainers, own_is_pserver) = split_of(&d);
        assert!(!own_is_pserver);
        assert_eq!((pservers.pods, trainers.pods), (None, None));
        assert_eq!(
            pservers.selector,
            "training.kubeflow.org/job-name=pj,training.kubeflow.org/replica-type=master"
        );

        let job = Facts {
            own: Some(map(&[(JOB_NAME, "plain")])),
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &job, true).unwrap());
        assert_eq!(
            (d.system, colocated(&d).selector.as_str()),
            (System::Job, "job-name=plain")
        );
        assert_eq!(colocated(&d).pods, None);
        // Naming a system the pod does not show is an error naming what was looked for.
        let e = detect(Choice::Only(System::JobSet), &job, true).unwrap_err();
        assert!(
            e.to_string().contains("jobset.sigs.k8s.io/jobset-name"),
            "{e}"
        );
        let none = Facts {
            own: Some(BTreeMap::new()),
            ..Facts::default()
        };
        assert_eq!(detect(Choice::Auto, &none, true).unwrap(), Step::Done(None));
        assert!(parse_choice(Some("slurm"))
            .unwrap_err()
            .to_string()
            .contains("PADDLE_LAUNCHER_RUNTIME"));
    }

    #[test]
    fn settings_given_win_over_what_the_system_says() {
        let facts = Facts {
            env: map(&[("LWS_LEADER_ADDRESS", "t-0.t.ns"), ("LWS_GROUP_SIZE", "4")]),
            ..Facts::default()
        };
        let d = done(detect(Choice::Auto, &facts, false).unwrap());
        let args = JobArgs {
            gradient_num: Some("2".into()),
            control_port: Some("7000".into()),
            ..JobArgs::default()
        };
        let (filled, notes) = fill(&d, &args);
        assert_eq!(filled.gradient_num.as_deref(), Some("2"));
        assert_eq!(filled.job_name.as_deref(), Some("t-0"));
        assert_eq!(filled.coordinator.as_deref(), Some("t-0.t.ns:7000"));
        assert!(
            notes.iter().any(
                |n| n == "CONF_PADDLE_GRADIENT_NUM: the setting \"2\" wins over \"4\" from lws"
            ),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n == "JOB_NAME=t-0 from lws"),
            "{notes:?}"
        );
    }

    /// What a pod of each entry of the precedence table shows: environment variables or labels.
    fn signs_of(system: System, sign: Sign) -> Vec<(&'static str, &'static str)> {
        match (system, sign) {
            (System::Lws, Sign::Env) => {
                vec![("LWS_LEADER_ADDRESS", "t-0.t.ns"), ("LWS_GROUP_SIZE", "4")]
            }
            (System::Volcano, Sign::Env) => {
                vec![("VC_TASK_INDEX", "0"), ("VC_WORKER_HOSTS", "v-worker-0.v")]
            }
            (System::JobSet, Sign::Labels) => {
                vec![(JOBSET_NAME, "js"), (JOBSET_REPLICATED_JOB, "workers")]
            }
            (System::Volcano, Sign::Labels) => {
                vec![(VOLCANO_JOB_NAME, "v"), (VOLCANO_TASK, "worker")]
            }
            (System::Lws, Sign::Labels) => vec![(LWS_NAME, "l"), (LWS_GROUP_INDEX, "0")],
            (System::Kubeflow, Sign::Labels) => vec![(KUBEFLOW_JOB_NAME, "pj")],
            (System::Job, Sign::Labels) => vec![(JOB_NAME, "j")],
            other => panic!("no such sign in the table: {other:?}"),
        }
    }

    /// A pod showing the signs of every system is taken for the first entry of the table; with
    /// that entry's signs gone, for the next; and so on: `detect` follows `PRECEDENCE`.
    #[test]
    fn detection_follows_the_precedence_table() {
        let mut facts = Facts {
            own: Some(BTreeMap::new()),
            jobset: Some(vec![("workers".to_string(), 2)]),
            ..Facts::default()
        };
        for &(system, sign) in PRECEDENCE {
            let target = match sign {
                Sign::Env => &mut facts.env,
                Sign::Labels => facts.own.as_mut().unwrap(),
            };
            target.extend(
                signs_of(system, sign)
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into())),
            );
        }
        for &(system, sign) in PRECEDENCE {
            let d = done(detect(Choice::Auto, &facts, true).unwrap());
            assert_eq!(d.system, system, "{sign:?}: {:?}", d.sources);
            let target = match sign {
                Sign::Env => &mut facts.env,
                Sign::Labels => facts.own.as_mut().unwrap(),
            };
            for (name, _) in signs_of(system, sign) {
                target.remove(name);
            }
        }
        assert_eq!(
            detect(Choice::Auto, &facts, true).unwrap(),
            Step::Done(None)
        );
    }
}
