//! The v2 Python API (`paddle.init()`): every `PADDLE_INIT_<NAME>` variable becomes the flag
//! `--<name>`, so only names that are real v2 flags may be set. The pserver is v1's.

use super::{env, ips};
use crate::config::Config;
use crate::membership::Membership;

/// The complete v2 contract of a trainer.
pub fn trainer_env(
    config: &Config,
    membership: &Membership,
    trainer_id: usize,
) -> std::collections::BTreeMap<String, String> {
    env(vec![
        ("PADDLE_INIT_PORT", config.ports.pserver.first.to_string()),
        (
            "PADDLE_INIT_PORTS_NUM",
            config.ports.pserver.dense.to_string(),
        ),
        (
            "PADDLE_INIT_PORTS_NUM_FOR_SPARSE",
            config.ports.pserver.sparse.to_string(),
        ),
        ("PADDLE_INIT_NICS", config.ports.nic.clone()),
        (
            "PADDLE_INIT_NUM_GRADIENT_SERVERS",
            config.topology.trainers.to_string(),
        ),
        ("PADDLE_INIT_TRAINER_ID", trainer_id.to_string()),
        ("PADDLE_INIT_PSERVERS", ips(&membership.pservers)),
    ])
}

#[cfg(test)]
mod tests {
    use crate::protocol::testing::{config, contract, membership};
    use crate::protocol::{plan, InputFiles};

    /// The v2 flags that `paddle.init()` understands (reference: original-launchers.md).
    const V2_FLAGS: &[&str] = &[
        "port",
        "ports_num",
        "ports_num_for_sparse",
        "nics",
        "num_gradient_servers",
        "trainer_id",
        "pservers",
        "trainer_count",
        "use_gpu",
        "num_passes",
    ];

    #[test]
    fn split_trainer_contract_is_exactly_the_seven_variables() {
        let cfg = config(|a| {
            a.role = Some("trainer".into());
            a.protocol = Some("v2".into());
            a.pserver_count = Some("2".into());
            a.trainer_count = Some("3".into());
            a.gradient_num = None;
            a.entry = Some("python train.py --num_passes 2".into());
        });
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.1.3".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        assert_eq!(p.processes.len(), 1);
        let trainer = &p.processes[0];
        assert_eq!(trainer.argv, ["sh", "-c", "python train.py --num_passes 2"]);
        // The protocol's contract; the launcher's own variables (its progress file) aside.
        let pairs = contract(&trainer.env);
        assert_eq!(
            pairs,
            [
                ("PADDLE_INIT_NICS", "eth0"),
                ("PADDLE_INIT_NUM_GRADIENT_SERVERS", "3"),
                ("PADDLE_INIT_PORT", "7164"),
                ("PADDLE_INIT_PORTS_NUM", "1"),
                ("PADDLE_INIT_PORTS_NUM_FOR_SPARSE", "0"),
                ("PADDLE_INIT_PSERVERS", "10.0.0.1,10.0.0.2"),
                ("PADDLE_INIT_TRAINER_ID", "2"),
            ]
        );
        for (name, _) in &pairs {
            let flag = name.strip_prefix("PADDLE_INIT_").unwrap().to_lowercase();
            assert!(V2_FLAGS.contains(&flag.as_str()), "{name} is not a v2 flag");
        }
        // The trainer waits for both pservers' ports.
        assert_eq!(p.pserver_endpoints.len(), 2);
    }

    #[test]
    fn colocated_v2_runs_the_v1_pserver_and_the_entry_trainer() {
        let cfg = config(|a| {
            a.protocol = Some("v2".into());
            a.trainer_args = vec!["python".into(), "train.py".into()];
        });
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.1.1".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        assert_eq!(p.processes[0].argv[..2], ["paddle", "pserver"]);
        assert_eq!(p.processes[1].argv, ["python", "train.py"]);
        assert_eq!(
            p.processes[1].env["PADDLE_INIT_PSERVERS"],
            "10.0.1.1,10.0.1.2,10.0.1.3"
        );
    }
}
