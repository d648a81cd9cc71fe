//! Data parallel without pservers (`paddle.distributed`, gloo on CPU, NCCL on GPU): one trainer
//! per pod, told its rank and every peer's endpoint. `PADDLE_MASTER`, `PADDLE_NNODES` and
//! `PADDLE_JOB_ID` serve users of `python -m paddle.distributed.launch`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::{endpoints, env};
use crate::config::Config;
use crate::membership::{Me, Membership};

/// The complete contract of a trainer.
pub fn trainer_env(
    config: &Config,
    membership: &Membership,
    me: &Me,
    trainer_id: usize,
) -> BTreeMap<String, String> {
    let master = membership
        .trainers
        .first()
        .map(|rank0| SocketAddr::new(rank0.ip, config.ports.trainer).to_string())
        .unwrap_or_default();
    env(vec![
        ("PADDLE_TRAINER_ID", trainer_id.to_string()),
        ("PADDLE_TRAINERS_NUM", config.topology.trainers.to_string()),
        (
            "PADDLE_TRAINER_ENDPOINTS",
            endpoints(&membership.trainers, config.ports.trainer),
        ),
        (
            "PADDLE_CURRENT_ENDPOINT",
            SocketAddr::new(me.ip, config.ports.trainer).to_string(),
        ),
        ("PADDLE_MASTER", master),
        ("PADDLE_NNODES", config.topology.trainers.to_string()),
        ("PADDLE_JOB_ID", config.topology.job_name.clone()),
    ])
}

#[cfg(test)]
mod tests {
    use crate::protocol::tests::{config, membership};
    use crate::protocol::{plan, InputFiles};

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
        let pairs: Vec<(&str, &str)> = env
            .iter()
            .filter(|(k, _)| !k.starts_with("PADDLE_LAUNCHER_"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("PADDLE_CURRENT_ENDPOINT", "10.0.1.3:6170"),
                ("PADDLE_JOB_ID", "paddle-cluster-job"),
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
