//! Data parallel without pservers (`paddle.distributed`, gloo on CPU, NCCL on GPU): each of a
//! pod's trainer processes is told its rank and every process's endpoint. One per pod gets the
//! seed's contract; several get the per-node contract of `paddle.distributed.launch` 3.3.1
//! (`../shared/reference/paddle-launch-multiprocess.md`, every variable with the Paddle line
//! that reads it). `PADDLE_MASTER`, `PADDLE_NNODES` and `PADDLE_JOB_ID` serve users of
//! `python -m paddle.distributed.launch`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::{env, world_size, Slot};
use crate::config::Config;
use crate::membership::{Me, Membership};

/// Every trainer process's endpoint, in trainer-id order: each pod's ports, pod by pod.
fn endpoints(membership: &Membership, ports: &[u16]) -> String {
    membership
        .trainers
        .iter()
        .flat_map(|m| {
            ports
                .iter()
                .map(|&port| SocketAddr::new(m.ip, port).to_string())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The complete contract of a trainer process.
pub fn trainer_env(
    config: &Config,
    membership: &Membership,
    me: &Me,
    slot: Slot,
) -> BTreeMap<String, String> {
    let ports = &config.ports.trainers;
    let own_port = ports[slot.local];
    let master = membership
        .trainers
        .first()
        .map(|rank0| SocketAddr::new(rank0.ip, ports[0]).to_string())
        .unwrap_or_default();
    let id = slot.trainer_id(config).to_string();
    let world = world_size(config).to_string();
    let mut vars = vec![
        ("PADDLE_TRAINER_ID", id.clone()),
        ("PADDLE_TRAINERS_NUM", world.clone()),
        ("PADDLE_TRAINER_ENDPOINTS", endpoints(membership, ports)),
        (
            "PADDLE_CURRENT_ENDPOINT",
            SocketAddr::new(me.ip, own_port).to_string(),
        ),
        ("PADDLE_MASTER", master),
        ("PADDLE_NNODES", config.topology.trainers.to_string()),
        ("PADDLE_JOB_ID", config.topology.job_name.clone()),
        // Paddle's launcher's default (`--auto_cluster_config 0`), read by its auto-parallel
        // engine.
        ("PADDLE_AUTO_CLUSTER", "0".to_string()),
    ];
    let processes = &config.topology.processes;
    let given = |name: &str| processes.given.contains_key(name);
    if !processes.several() && processes.devices > 0 && !given("FLAGS_selected_gpus") {
        // One process is given every GPU found, as Paddle's launcher gives `--nproc_per_node 1`
        // its device list (indices into CUDA_VISIBLE_DEVICES).
        let all: Vec<String> = (0..processes.devices).map(|d| d.to_string()).collect();
        vars.push(("FLAGS_selected_gpus", all.join(",")));
    }
    if !processes.several() && processes.devices == 0 && !given("PADDLE_DISTRI_BACKEND") {
        // Without GPUs Paddle's launcher gives gloo to one process too (`collective.py`: no
        // device list): a CUDA build of Paddle on a CPU node otherwise looks for a GPU.
        vars.push(("PADDLE_DISTRI_BACKEND", "gloo".to_string()));
    }
    if processes.several() {
        let local = slot.local.to_string();
        vars.extend([
            ("PADDLE_GLOBAL_RANK", id),
            ("PADDLE_GLOBAL_SIZE", world),
            ("PADDLE_LOCAL_RANK", local.clone()),
            ("PADDLE_LOCAL_SIZE", processes.per_pod.to_string()),
            ("PADDLE_RANK_IN_NODE", local.clone()),
        ]);
        // Paddle's own rule: a GPU's index into CUDA_VISIBLE_DEVICES (passed on unchanged),
        // else gloo on CPUs.
        if processes.devices > 0 {
            vars.push(("FLAGS_selected_gpus", local));
        } else if !given("PADDLE_DISTRI_BACKEND") {
            vars.push(("PADDLE_DISTRI_BACKEND", "gloo".to_string()));
        }
    }
    env(vars)
}

#[cfg(test)]
mod tests {
    use crate::protocol::testing::{config, contract, membership};
    use crate::protocol::{plan, InputFiles};

    /// Several processes per pod get what `paddle.distributed.launch` 3.3.1 gives each process
    /// (measured: ../shared/reference/paddle-launch-multiprocess.md section 2), pod-major ids,
    /// each its own port (the control port skipped), its own progress file and log.
    #[test]
    fn several_processes_get_paddles_per_node_contract() {
        let cfg = |edit: fn(&mut crate::config::Processes)| {
            let mut cfg = config(|a| {
                a.protocol = Some("collective".into());
                a.nproc_per_pod = Some("2".into());
                a.job_path = Some("/jobs".into());
                a.id_dir = Some("/ids".into());
                a.trainer_args = vec!["python".into(), "train.py".into()];
            });
            edit(&mut cfg.topology.processes);
            cfg
        };
        let cpu = cfg(|_| {});
        let m = membership(&cpu);
        let me = m.locate(&cpu, None, "10.0.1.2".parse().unwrap()).unwrap();
        let p = plan(&cpu, &m, &me, &InputFiles::default());
        assert_eq!(p.processes.len(), 2);
        assert!(
            p.files.is_empty(),
            "no id files naming one trainer: {:?}",
            p.files
        );
        let second = &p.processes[1];
        let given = contract(&second.env);
        assert_eq!(
            given,
            [
                ("OMP_NUM_THREADS", "1"),
                ("PADDLE_AUTO_CLUSTER", "0"),
                ("PADDLE_CURRENT_ENDPOINT", "10.0.1.2:6172"),
                ("PADDLE_DISTRI_BACKEND", "gloo"),
                ("PADDLE_GLOBAL_RANK", "3"),
                ("PADDLE_GLOBAL_SIZE", "6"),
                ("PADDLE_JOB_ID", "paddle-cluster-job"),
                ("PADDLE_LOCAL_RANK", "1"),
                ("PADDLE_LOCAL_SIZE", "2"),
                // Where its log file is: --job-path's output directory comes first.
                ("PADDLE_LOG_DIR", "/jobs/paddle-cluster-job/output/node_1"),
                ("PADDLE_MASTER", "10.0.1.1:6170"),
                ("PADDLE_NNODES", "3"),
                ("PADDLE_RANK_IN_NODE", "1"),
                ("PADDLE_TRAINERS_NUM", "6"),
                (
                    "PADDLE_TRAINER_ENDPOINTS",
                    "10.0.1.1:6170,10.0.1.1:6172,10.0.1.2:6170,10.0.1.2:6172,10.0.1.3:6170,10.0.1.3:6172"
                ),
                ("PADDLE_TRAINER_ID", "3"),
            ]
        );
        assert_eq!(second.name, "trainer-3");
        let place = second.place.as_ref().unwrap();
        assert_eq!((place.trainer_id, place.of, place.local_rank), (3, 6, 1));
        assert!(place.progress_file.ends_with("progress.1"), "{place:?}");
        assert_eq!(
            second.env["PADDLE_LAUNCHER_PROGRESS_FILE"],
            place.progress_file.display().to_string()
        );
        assert_eq!(
            second.log.as_deref(),
            Some(std::path::Path::new(
                "/jobs/paddle-cluster-job/output/node_1/train.1.log"
            ))
        );
        // With GPUs: the device's index into CUDA_VISIBLE_DEVICES, and no gloo; the user's own
        // backend and thread count win.
        let gpu = cfg(|p| p.devices = 2);
        let p = plan(&gpu, &m, &me, &InputFiles::default());
        let env = &p.processes[1].env;
        assert_eq!(
            env.get("FLAGS_selected_gpus").map(String::as_str),
            Some("1")
        );
        assert!(!env.contains_key("PADDLE_DISTRI_BACKEND"));
        let given = cfg(|p| {
            p.given
                .insert("PADDLE_DISTRI_BACKEND".into(), "nccl".into());
            p.given.insert("OMP_NUM_THREADS".into(), "2".into());
        });
        let p = plan(&given, &m, &me, &InputFiles::default());
        let env = &p.processes[0].env;
        assert!(!env.contains_key("PADDLE_DISTRI_BACKEND"));
        // The pod's own thread count passes on; otherwise Paddle's launcher's 1.
        assert!(!env.contains_key("OMP_NUM_THREADS"), "{env:?}");
    }

    /// One process on a pod with GPUs is given them all, as Paddle's launcher gives
    /// `--nproc_per_node 1` (measured: `FLAGS_selected_gpus=2,3` for two devices of four); the
    /// pod's own value wins. Its output goes to Paddle's `workerlog.0` in the log directory.
    #[test]
    fn one_process_on_a_gpu_pod_is_given_every_gpu_and_paddles_log_file() {
        let mut cfg = config(|a| {
            a.protocol = Some("collective".into());
            a.nproc_per_pod = Some("1".into());
            a.trainer_args = vec!["python".into(), "train.py".into()];
        });
        cfg.topology.processes.devices = 4;
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.1.2".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        let process = &p.processes[0];
        assert_eq!(process.env["FLAGS_selected_gpus"], "0,1,2,3");
        assert_eq!(
            process.place.as_ref().unwrap().device.as_deref(),
            Some("0,1,2,3")
        );
        assert_eq!(
            process.log.as_deref(),
            Some(std::path::Path::new("./log/workerlog.0"))
        );
        cfg.topology
            .processes
            .given
            .insert("FLAGS_selected_gpus".into(), "1".into());
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        assert!(!p.processes[0].env.contains_key("FLAGS_selected_gpus"));
        assert_eq!(
            p.processes[0].env.get("PADDLE_DISTRI_BACKEND"),
            None,
            "a GPU's"
        );
        // Without GPUs, one process is given none, and gloo as Paddle's launcher gives it.
        cfg.topology.processes.devices = 0;
        cfg.topology.processes.given.clear();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        assert!(!p.processes[0].env.contains_key("FLAGS_selected_gpus"));
        assert_eq!(p.processes[0].env["PADDLE_DISTRI_BACKEND"], "gloo");
    }

    /// 1,000 pods x 8 processes: the endpoint list (over 100 KB, near Linux's 128 KiB bound on
    /// one exec string) is left out of each process's environment and written to its
    /// `backup_env.<trainer id>.json`, named by PADDLE_BACKUP_ENV_PATH, as Paddle's launcher
    /// does; a short list stays in the environment, with no file.
    #[test]
    fn an_endpoint_list_too_long_for_the_environment_goes_to_paddles_backup_file() {
        let cfg = |pods: u32| {
            let mut cfg = config(|a| {
                a.protocol = Some("collective".into());
                a.gradient_num = Some(pods.to_string());
                a.nproc_per_pod = Some("8".into());
                a.trainer_args = vec!["python".into(), "train.py".into()];
                a.log_dir = Some("/logs".into());
            });
            cfg.topology.processes.devices = 8;
            cfg
        };
        let ips: Vec<String> = (0..1000)
            .map(|i| format!("10.1.{}.{}", i / 250, i % 250 + 1))
            .collect();
        let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
        let big = cfg(1000);
        let m = crate::membership::Membership::from_groups(
            crate::vocabulary::Protocol::Collective,
            vec![(
                crate::config::GroupKind::Job,
                crate::protocol::testing::members("t", &ips),
            )],
        );
        let me = m.locate(&big, None, "10.1.0.2".parse().unwrap()).unwrap();
        let p = plan(&big, &m, &me, &InputFiles::default());
        let second = &p.processes[1];
        assert!(!second.env.contains_key("PADDLE_TRAINER_ENDPOINTS"));
        assert_eq!(
            second.env["PADDLE_BACKUP_ENV_PATH"],
            "/logs/backup_env.9.json"
        );
        let file = p
            .files
            .iter()
            .find(|f| f.path.ends_with("backup_env.9.json"))
            .unwrap();
        let backup: std::collections::BTreeMap<String, String> =
            serde_json::from_str(&file.content).unwrap();
        let list = &backup["PADDLE_TRAINER_ENDPOINTS"];
        assert!(list.len() > 100_000, "{}", list.len());
        assert_eq!(list.split(',').count(), 8000);
        assert_eq!(
            p.files
                .iter()
                .filter(|f| f.path.to_string_lossy().contains("backup_env"))
                .count(),
            8
        );
        // Three pods: in the environment, no file.
        let small = cfg(3);
        let m = membership(&small);
        let me = m.locate(&small, None, "10.0.1.2".parse().unwrap()).unwrap();
        let p = plan(&small, &m, &me, &InputFiles::default());
        assert!(p.processes[0].env.contains_key("PADDLE_TRAINER_ENDPOINTS"));
        assert!(!p.processes[0].env.contains_key("PADDLE_BACKUP_ENV_PATH"));
        assert!(p
            .files
            .iter()
            .all(|f| !f.path.to_string_lossy().contains("backup_env")));
    }

    #[test]
    fn every_pod_is_a_trainer_with_the_full_endpoint_list() {
        let cfg = config(|a| {
            a.protocol = Some("collective".into());
            a.trainer_port = Some("6170".into());
            a.trainer_args = vec!["python".into(), "train.py".into()];
        });
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.1.3".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        assert_eq!(p.processes.len(), 1, "no pserver in collective mode");
        assert!(p.pserver_endpoints.is_empty());
        let env = &p.processes[0].env;
        // The protocol's contract; the launcher's own variables (its progress file) aside.
        let pairs = contract(env);
        assert_eq!(
            pairs,
            [
                ("OMP_NUM_THREADS", "1"),
                ("PADDLE_AUTO_CLUSTER", "0"),
                ("PADDLE_CURRENT_ENDPOINT", "10.0.1.3:6170"),
                ("PADDLE_DISTRI_BACKEND", "gloo"),
                ("PADDLE_JOB_ID", "paddle-cluster-job"),
                ("PADDLE_LOG_DIR", "./log"),
                ("PADDLE_MASTER", "10.0.1.1:6170"),
                ("PADDLE_NNODES", "3"),
                ("PADDLE_TRAINERS_NUM", "3"),
                (
                    "PADDLE_TRAINER_ENDPOINTS",
                    "10.0.1.1:6170,10.0.1.2:6170,10.0.1.3:6170"
                ),
                ("PADDLE_TRAINER_ID", "2"),
            ]
        );
    }
}
