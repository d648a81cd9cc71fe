//! Parameter-server mode of Paddle >= 2 (`fleet` with `PaddleCloudRoleMaker`): the entry
//! command runs as pserver and as trainer, told its role and every endpoint through the
//! environment. Every process has its own endpoint: pservers on the first pserver port,
//! trainers on the trainer port.

use std::collections::BTreeMap;

use super::{endpoints, env};
use crate::config::Config;
use crate::membership::{Me, Membership};

fn shared(config: &Config, membership: &Membership, role: &str) -> Vec<(&'static str, String)> {
    vec![
        ("TRAINING_ROLE", role.to_string()),
        ("PADDLE_TRAINING_ROLE", role.to_string()),
        (
            "PADDLE_PSERVERS_IP_PORT_LIST",
            endpoints(&membership.pservers, config.ports.pserver.first),
        ),
        ("PADDLE_PSERVER_NUMS", config.topology.pservers.to_string()),
        ("PADDLE_TRAINERS_NUM", config.topology.trainers.to_string()),
    ]
}

/// The complete contract of a pserver process.
pub fn pserver_env(config: &Config, membership: &Membership, me: &Me) -> BTreeMap<String, String> {
    let mut vars = shared(config, membership, "PSERVER");
    vars.push(("PADDLE_PORT", config.ports.pserver.first.to_string()));
    vars.push(("POD_IP", me.ip.to_string()));
    env(vars)
}

/// The complete contract of a trainer process.
pub fn trainer_env(
    config: &Config,
    membership: &Membership,
    me: &Me,
    trainer_id: usize,
) -> BTreeMap<String, String> {
    let mut vars = shared(config, membership, "TRAINER");
    vars.push(("PADDLE_TRAINER_ID", trainer_id.to_string()));
    vars.push((
        "PADDLE_TRAINER_ENDPOINTS",
        endpoints(&membership.trainers, config.ports.trainer),
    ));
    vars.push(("PADDLE_PORT", config.ports.trainer.to_string()));
    vars.push(("POD_IP", me.ip.to_string()));
    env(vars)
}

#[cfg(test)]
mod tests {
    use crate::protocol::testing::{config, membership};
    use crate::protocol::{plan, InputFiles};

    /// The protocol's variables; the launcher's own (its progress file) aside.
    fn keys(env: &std::collections::BTreeMap<String, String>) -> Vec<&str> {
        env.keys()
            .map(String::as_str)
            .filter(|k| !k.starts_with("PADDLE_LAUNCHER_"))
            .collect()
    }

    #[test]
    fn pserver_and_trainer_contracts_match_the_role_maker() {
        let split = |role: &str| {
            config(|a| {
                a.role = Some(role.into());
                a.protocol = Some("fleet".into());
                a.pserver_count = Some("2".into());
                a.trainer_count = Some("3".into());
                a.gradient_num = None;
                a.trainer_port = Some("6200".into());
                a.trainer_args = vec!["python".into(), "ps_train.py".into()];
            })
        };
        let cfg = split("pserver");
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.0.2".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        let pserver = &p.processes[0];
        assert_eq!(pserver.argv, ["python", "ps_train.py"]);
        assert_eq!(
            keys(&pserver.env),
            [
                "OMP_NUM_THREADS",
                "PADDLE_LOG_DIR",
                "PADDLE_PORT",
                "PADDLE_PSERVERS_IP_PORT_LIST",
                "PADDLE_PSERVER_NUMS",
                "PADDLE_TRAINERS_NUM",
                "PADDLE_TRAINING_ROLE",
                "POD_IP",
                "TRAINING_ROLE"
            ]
        );
        assert_eq!(pserver.env["TRAINING_ROLE"], "PSERVER");
        assert_eq!(
            pserver.env["PADDLE_PSERVERS_IP_PORT_LIST"],
            "10.0.0.1:7164,10.0.0.2:7164"
        );
        assert_eq!(
            (
                pserver.env["POD_IP"].as_str(),
                pserver.env["PADDLE_PORT"].as_str()
            ),
            ("10.0.0.2", "7164")
        );

        let cfg = split("trainer");
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.1.1".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        let trainer = &p.processes[0];
        assert_eq!(
            keys(&trainer.env),
            [
                "OMP_NUM_THREADS",
                "PADDLE_LOG_DIR",
                "PADDLE_PORT",
                "PADDLE_PSERVERS_IP_PORT_LIST",
                "PADDLE_PSERVER_NUMS",
                "PADDLE_TRAINERS_NUM",
                "PADDLE_TRAINER_ENDPOINTS",
                "PADDLE_TRAINER_ID",
                "PADDLE_TRAINING_ROLE",
                "POD_IP",
                "TRAINING_ROLE"
            ]
        );
        assert_eq!(trainer.env["TRAINING_ROLE"], "TRAINER");
        assert_eq!(trainer.env["PADDLE_TRAINER_ID"], "0");
        assert_eq!(
            trainer.env["PADDLE_TRAINER_ENDPOINTS"],
            "10.0.1.1:6200,10.0.1.2:6200,10.0.1.3:6200"
        );
        assert_eq!(
            (
                trainer.env["PADDLE_PSERVER_NUMS"].as_str(),
                trainer.env["PADDLE_TRAINERS_NUM"].as_str()
            ),
            ("2", "3")
        );
        assert_eq!(
            p.pserver_endpoints
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["10.0.0.1:7164", "10.0.0.2:7164"]
        );
    }

    #[test]
    fn colocated_fleet_gives_each_process_its_own_endpoint() {
        let cfg = config(|a| {
            a.protocol = Some("fleet".into());
            a.entry = Some("python ps_train.py".into());
        });
        let m = membership(&cfg);
        let me = m.locate(&cfg, None, "10.0.1.2".parse().unwrap()).unwrap();
        let p = plan(&cfg, &m, &me, &InputFiles::default());
        let ports: Vec<&str> = p
            .processes
            .iter()
            .map(|p| p.env["PADDLE_PORT"].as_str())
            .collect();
        assert_eq!(ports, ["7164", "6170"]);
        assert_eq!(p.processes[1].env["PADDLE_TRAINER_ID"], "1");
    }
}
