//! PaddlePaddle v1 command-line flags (`paddle pserver` / `paddle train`), as start_paddle.py
//! generated them, with its defects fixed: `--pservers` in rank order, `--local=0` always,
//! and a pass-through flag replacing the generated one instead of repeating it.

use std::collections::BTreeMap;

use super::{ips, process, JobDir};
use crate::config::Config;
use crate::membership::Membership;
use crate::plan::{ProcessSpec, Role};

/// Marks the processes as the launcher's, as the tutorial's start script did (`ps` shows it).
pub const COMMENT: &str = "paddle_process_by_paddle";

fn common_flags(config: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("port", config.ports.pserver.first.to_string()),
        ("ports_num", config.ports.pserver.dense.to_string()),
        (
            "ports_num_for_sparse",
            config.ports.pserver.sparse.to_string(),
        ),
        ("nics", config.ports.nic.clone()),
        ("comment", COMMENT.to_string()),
    ]
}

fn argv(command: &[String], flags: &[(&str, String)]) -> Vec<String> {
    command
        .iter()
        .cloned()
        .chain(
            flags
                .iter()
                .map(|(name, value)| format!("--{name}={value}")),
        )
        .collect()
}

/// The v1 pserver; v2 jobs run the same one.
pub fn pserver(config: &Config, rank: usize, job_dir: Option<&JobDir>) -> ProcessSpec {
    let mut flags = common_flags(config);
    flags.push(("num_gradient_servers", config.topology.trainers.to_string()));
    let argv = argv(&config.program.pserver_cmd, &flags);
    process(config, job_dir, Role::Pserver, rank, argv, BTreeMap::new())
}

pub fn trainer(
    config: &Config,
    membership: &Membership,
    rank: usize,
    job_dir: Option<&JobDir>,
) -> ProcessSpec {
    let mut flags = common_flags(config);
    flags.push(("pservers", ips(&membership.pservers)));
    flags.push(("num_gradient_servers", config.topology.trainers.to_string()));
    flags.push(("trainer_id", rank.to_string()));
    flags.push(("local", "0".to_string()));
    if let Some(dir) = job_dir {
        flags.push(("save_dir", dir.output().display().to_string()));
    }
    for (name, value) in &config.program.trainer_args.overrides {
        match flags.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value.clone(),
            None => flags.push((name.as_str(), value.clone())),
        }
    }
    let mut argv = argv(&config.program.trainer_cmd, &flags);
    argv.extend(config.program.trainer_args.rest.iter().cloned());
    process(config, job_dir, Role::Trainer, rank, argv, BTreeMap::new())
}

#[cfg(test)]
mod tests {
    use crate::cli::JobArgs;
    use crate::config::Config;
    use crate::membership::{rank, testing::pod, Membership};
    use crate::plan::ProcessSpec;
    use crate::protocol::{plan, InputFiles};

    fn config(f: impl FnOnce(&mut JobArgs)) -> Config {
        let mut args = JobArgs {
            job_name: Some("paddle-cluster-job".into()),
            gradient_num: Some("3".into()),
            job_path: Some("/home/jobpath".into()),
            ports_num: Some("2".into()),
            ports_num_sparse: Some("2".into()),
            ..JobArgs::default()
        };
        f(&mut args);
        Config::from_args(&args).unwrap()
    }

    fn membership() -> Membership {
        let members = rank(&[
            pod("p-c", Some("192.168.223.143"), "Running"),
            pod("p-a", Some("192.168.129.71"), "Running"),
            pod("p-b", Some("192.168.129.66"), "Running"),
        ]);
        Membership {
            pservers: members.clone(),
            trainers: members,
        }
    }

    fn plan_for(cfg: &Config, ip: &str) -> crate::plan::Plan {
        let m = membership();
        let me = m.locate(cfg, None, ip.parse().unwrap()).unwrap();
        plan(cfg, &m, &me, &InputFiles::default())
    }

    #[test]
    fn exact_argv_of_both_processes() {
        let p = plan_for(&config(|_| {}), "192.168.129.71");
        assert_eq!(
            p.processes[0].argv,
            [
                "paddle",
                "pserver",
                "--port=7164",
                "--ports_num=2",
                "--ports_num_for_sparse=2",
                "--nics=eth0",
                "--comment=paddle_process_by_paddle",
                "--num_gradient_servers=3"
            ]
        );
        assert_eq!(
            p.processes[1].argv,
            [
                "paddle",
                "train",
                "--port=7164",
                "--ports_num=2",
                "--ports_num_for_sparse=2",
                "--nics=eth0",
                "--comment=paddle_process_by_paddle",
                "--pservers=192.168.129.66,192.168.129.71,192.168.223.143",
                "--num_gradient_servers=3",
                "--trainer_id=1",
                "--local=0",
                "--save_dir=/home/jobpath/paddle-cluster-job/output"
            ]
        );
        // No variables but the launcher's own (the trainer's progress file).
        let launchers = |p: &ProcessSpec| p.env.keys().all(|k| k.starts_with("PADDLE_LAUNCHER_"));
        assert!(p.processes.iter().all(launchers));
        assert_eq!(
            p.processes[1].log.as_deref(),
            Some(std::path::Path::new(
                "/home/jobpath/paddle-cluster-job/output/node_1/train.log"
            ))
        );
        assert_eq!(p.pserver_endpoints.len(), 3 * 4);
        assert_eq!(p.pserver_endpoints[4].to_string(), "192.168.129.71:7164");
        assert_eq!(
            p.copies[0].from,
            std::path::Path::new("/home/jobpath/paddle-cluster-job/1/data")
        );
    }

    #[test]
    fn pass_through_replaces_generated_flags_and_appends_the_rest() {
        let cfg = config(|a| {
            a.job_path = None;
            a.trainer_cmd = Some("paddle_trainer".into());
            a.trainer_args = [
                "--config=trainer_config.lr.py",
                "--ports_num=2",
                "--local=1",
                "--save_dir=/models",
                "--use_gpu=0",
            ]
            .map(String::from)
            .to_vec();
        });
        let argv = &plan_for(&cfg, "192.168.129.66").processes[1].argv;
        assert_eq!(
            argv,
            &[
                "paddle_trainer",
                "--port=7164",
                "--ports_num=2",
                "--ports_num_for_sparse=2",
                "--nics=eth0",
                "--comment=paddle_process_by_paddle",
                "--pservers=192.168.129.66,192.168.129.71,192.168.223.143",
                "--num_gradient_servers=3",
                "--trainer_id=0",
                "--local=1",
                "--save_dir=/models",
                "--config=trainer_config.lr.py",
                "--use_gpu=0"
            ]
        );
        assert_eq!(
            argv.iter()
                .filter(|a| a.starts_with("--ports_num="))
                .count(),
            1
        );
    }
}
