//! PaddlePaddle v1 command-line flags (`paddle pserver` / `paddle train`), as start_paddle.py
//! generated them, with its defects fixed: `--pservers` in rank order, `--local=0` always,
//! and a pass-through flag replacing the generated one instead of repeating it.

use std::collections::BTreeMap;

use super::JobDir;
use crate::config::Config;
use crate::membership::Member;
use crate::plan::{ProcessSpec, Role};

/// Marks the processes as the launcher's, as the seed did (`ps` shows it).
pub const COMMENT: &str = "paddle_process_by_paddle";

fn common_flags(config: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("port", config.ports.first.to_string()),
        ("ports_num", config.ports.dense.to_string()),
        ("ports_num_for_sparse", config.ports.sparse.to_string()),
        ("nics", config.nic.clone()),
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

pub fn processes(
    config: &Config,
    members: &[Member],
    me: &Member,
    job_dir: Option<&JobDir>,
) -> Vec<ProcessSpec> {
    let mut pserver = common_flags(config);
    pserver.push(("num_gradient_servers", config.gradient_num.to_string()));

    let mut trainer = common_flags(config);
    let pservers: Vec<String> = members.iter().map(|m| m.ip.to_string()).collect();
    trainer.push(("pservers", pservers.join(",")));
    trainer.push(("num_gradient_servers", config.gradient_num.to_string()));
    trainer.push(("trainer_id", me.rank.to_string()));
    trainer.push(("local", "0".to_string()));
    if let Some(dir) = job_dir {
        trainer.push(("save_dir", dir.output().display().to_string()));
    }
    let mut trainer: Vec<(&str, String)> = trainer;
    for (name, value) in &config.trainer_args.overrides {
        match trainer.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value.clone(),
            None => trainer.push((name.as_str(), value.clone())),
        }
    }
    let mut trainer_argv = argv(&config.trainer_cmd, &trainer);
    trainer_argv.extend(config.trainer_args.rest.iter().cloned());

    let log = |file: &str| job_dir.map(|d| d.node_logs(me.rank).join(file));
    vec![
        ProcessSpec {
            role: Role::Pserver,
            argv: argv(&config.pserver_cmd, &pserver),
            env: BTreeMap::new(),
            cwd: config.workdir.clone(),
            log: log("server.log"),
        },
        ProcessSpec {
            role: Role::Trainer,
            argv: trainer_argv,
            env: BTreeMap::new(),
            cwd: config.workdir.clone(),
            log: log("train.log"),
        },
    ]
}

#[cfg(test)]
mod tests {
    use crate::cli::JobArgs;
    use crate::config::Config;
    use crate::membership::{rank, tests::pod};
    use crate::protocol::plan;

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

    fn members() -> Vec<crate::membership::Member> {
        rank(&[
            pod("p-c", Some("192.168.223.143"), "Running"),
            pod("p-a", Some("192.168.129.71"), "Running"),
            pod("p-b", Some("192.168.129.66"), "Running"),
        ])
    }

    #[test]
    fn exact_argv_of_both_processes() {
        let cfg = config(|_| {});
        let members = members();
        let p = plan(&cfg, &members, &members[1]);
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
        let members = members();
        let argv = &plan(&cfg, &members, &members[0]).processes[1].argv;
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
