//! DNS membership against a real DNS server (Debian's dnsmasq) on loopback, whose records
//! change while the launchers wait. No Kubernetes API is configured at all.

mod support;

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::dnsmasq::Dnsmasq;
use support::{assert_contains, free_ports, loopback_ip, Launcher};

const NAME: &str = "trainers.paddle.test";
const LIMIT: Duration = Duration::from_secs(90);

/// What these tests do with the DNS server.
trait JobDns {
    /// Replaces the records of NAME and makes dnsmasq reload them.
    fn set(&self, ips: &[&str]);
    /// A launcher's environment for a DNS-membership job of `pods` pods, as the pod at `ip`.
    fn env(&self, job: &str, pods: usize, ip: &str) -> Vec<(&'static str, String)>;
}

impl JobDns for Dnsmasq {
    fn set(&self, ips: &[&str]) {
        let records: Vec<(&str, &str)> = ips.iter().map(|ip| (*ip, NAME)).collect();
        self.set_records(&records);
    }

    fn env(&self, job: &str, pods: usize, ip: &str) -> Vec<(&'static str, String)> {
        vec![
            ("JOB_NAME", job.to_string()),
            ("CONF_PADDLE_GRADIENT_NUM", pods.to_string()),
            ("CONF_PADDLE_NIC", "lo".to_string()),
            ("POD_IP", ip.to_string()),
            ("PADDLE_LAUNCHER_DNS", NAME.to_string()),
            (
                "PADDLE_LAUNCHER_DNS_SERVER",
                format!("127.0.0.1:{}", self.port),
            ),
        ]
    }
}

#[test]
fn launchers_agree_once_the_records_are_exactly_the_job_and_stable() {
    let dir = tempfile::tempdir().unwrap();
    let dns = Dnsmasq::start(dir.path());
    dns.set(&["127.0.0.72"]);
    let ips = ["127.0.0.71", "127.0.0.70", "127.0.0.72"];
    let launchers: Vec<Launcher> = ips
        .iter()
        .map(|ip| {
            let env = dns.env("dnsjob", 3, ip);
            Launcher::start(dir.path(), ip, &["plan"], &env)
        })
        .collect();
    for l in &launchers {
        l.wait_for_output("resolves to 1 of 3 addresses: 127.0.0.72", LIMIT);
    }
    // A replacement pod's record appears before the old one's is gone: 4 of 3, not ready.
    dns.set(&["127.0.0.70", "127.0.0.71", "127.0.0.72", "127.0.0.73"]);
    for l in &launchers {
        l.wait_for_output("resolves to 4 of 3 addresses", LIMIT);
    }
    dns.set(&["127.0.0.72", "127.0.0.70", "127.0.0.71"]);
    let plans: Vec<Value> = launchers
        .into_iter()
        .map(|l| {
            let done = l.wait(LIMIT);
            assert_eq!(done.code(), 0, "{}", done.stderr);
            assert_contains(&done.stderr, "more than expected");
            serde_json::from_str(&done.stdout).unwrap()
        })
        .collect();
    let ids: Vec<u64> = plans
        .iter()
        .map(|p| p["trainer_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [1, 0, 2], "numeric IP order: .70, .71, .72");
    for plan in &plans {
        assert_eq!(plan["pods"], plans[0]["pods"]);
        assert_eq!(plan["namespace"], Value::Null, "no Kubernetes API was used");
    }
}

#[test]
fn a_name_that_never_resolves_times_out_with_what_was_seen() {
    let dir = tempfile::tempdir().unwrap();
    let dns = Dnsmasq::start(dir.path());
    let mut env = dns.env("nodns", 2, "127.0.0.74");
    env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "3".to_string()));
    let done = Launcher::start(dir.path(), "nodns", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 71, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        &format!("{NAME} resolves to 0 of 2 addresses"),
    );
}

#[test]
fn doctor_reports_what_the_name_resolves_to() {
    let dir = tempfile::tempdir().unwrap();
    let dns = Dnsmasq::start(dir.path());
    dns.set(&["127.0.0.76", "127.0.0.77"]);
    let env = |ip: &str| dns.env("docdns", 3, ip);
    let done = Launcher::start(dir.path(), "doc1", &["doctor"], &env("127.0.0.76")).wait(LIMIT);
    assert_eq!(done.code(), 71, "{}", done.stdout);
    let expected = format!(
        "{NAME} resolves to 2 of 3 addresses [127.0.0.76, 127.0.0.77]: the job would not start yet"
    );
    assert_contains(&done.stdout, &expected);
    dns.set(&["127.0.0.76", "127.0.0.77", "127.0.0.78"]);
    let mut ready = env("127.0.0.78");
    ready.extend(["pserver", "train"].map(support::standin_cmd));
    let done = Launcher::start(dir.path(), "doc2", &["doctor"], &ready).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stdout);
    assert_contains(&done.stdout, "resolves to all 3 addresses");
    // Ranked as `run` ranks DNS members: numeric IP order.
    assert_contains(&done.stdout, "this pod would be trainer 2 / pserver 2");
    assert_contains(&done.stdout, "the job would start now");
}

/// An unreadable /etc/resolv.conf is named as such (status 79), not as a missing Kubernetes
/// configuration. The broken file is bind-mounted in a mount namespace of the launcher's own,
/// so the machine's resolv.conf is untouched.
#[test]
fn a_broken_resolv_conf_is_named_as_the_dns_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("resolv.conf");
    std::fs::write(&broken, "nameserver not-an-address\n").unwrap();
    let out = Command::new("unshare")
        .args([
            "--mount",
            "sh",
            "-c",
            "mount --bind \"$1\" /etc/resolv.conf && exec \"$2\" run",
        ])
        .args(["sh", &broken.display().to_string(), support::LAUNCHER])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PADDLE_LAUNCHER_TERMINATION_LOG", "")
        .env("PADDLE_LAUNCHER_ID_DIR", "")
        .envs([
            ("JOB_NAME", "dnsconf"),
            ("CONF_PADDLE_GRADIENT_NUM", "2"),
            ("PADDLE_LAUNCHER_DNS", NAME),
            ("POD_IP", "127.0.0.2"),
            ("CONF_PADDLE_NIC", "lo"),
        ])
        .output()
        .expect("unshare (util-linux) is needed; the tests run as root");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(79), "{stderr}");
    assert!(
        stderr.contains("cannot read the DNS configuration") && !stderr.contains("KUBECONFIG"),
        "{stderr}"
    );
}

/// The coordinator named by a DNS name that follows its pod (an Indexed Job's
/// `<job>-0.<service>`): its pod is killed, the name moves to the replacement, which serves
/// there, learns the epoch from the survivors, and every trainer restarts in epoch 1.
#[test]
fn a_replaced_coordinator_serves_at_the_same_name_and_the_group_restarts() {
    const COORDINATOR: &str = "job-0.pods.paddle.test";
    let dir = tempfile::tempdir().unwrap();
    let dns = Dnsmasq::start(dir.path());
    let ips: Vec<String> = (0..4).map(|_| loopback_ip()).collect();
    let records = |pods: &[usize]| -> Vec<(String, &str)> {
        let mut records: Vec<(String, &str)> =
            pods.iter().map(|&i| (ips[i].clone(), NAME)).collect();
        records.push((ips[pods[0]].clone(), COORDINATOR));
        records
    };
    let set = |pods: &[usize]| {
        let owned = records(pods);
        let borrowed: Vec<(&str, &str)> = owned.iter().map(|(ip, n)| (ip.as_str(), *n)).collect();
        dns.set_records(&borrowed);
    };
    set(&[0, 1, 2]);
    let port = free_ports(1);
    let trainer_port = free_ports(1);
    let program = r#"echo "count=$PADDLE_LAUNCHER_RESTART_COUNT rank=$PADDLE_TRAINER_ID"
[ "$PADDLE_LAUNCHER_RESTART_COUNT" = 0 ] && exec sleep 120
exec sleep 1"#;
    let start = |i: usize| {
        let mut env = dns.env("dc", 3, &ips[i]);
        env.extend([
            ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
            ("PADDLE_LAUNCHER_TRAINER_PORT", trainer_port.to_string()),
            ("PADDLE_LAUNCHER_JOB_SECRET", "d".repeat(40)),
            ("PADDLE_LAUNCHER_MAX_RESTARTS", "1".to_string()),
            (
                "PADDLE_LAUNCHER_COORDINATOR",
                format!("{COORDINATOR}:{port}"),
            ),
            ("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "2".to_string()),
        ]);
        Launcher::start(
            dir.path(),
            &format!("pod-{i}"),
            &["run", "--", "sh", "-c", program],
            &env,
        )
    };
    let mut launchers: Vec<Option<Launcher>> = (0..3).map(|i| Some(start(i))).collect();
    for launcher in launchers.iter().flatten() {
        launcher.wait_for_output("count=0 ", LIMIT);
    }
    launchers[0].as_ref().unwrap().wait_for_output(
        &format!("coordinating 3 launchers on {}:{port}", ips[0]),
        LIMIT,
    );
    // Pod 0's node dies; its replacement gets another address, and the name follows it.
    let killed = launchers[0].take().unwrap();
    killed.signal(Signal::SIGKILL);
    killed.wait(LIMIT);
    set(&[3, 1, 2]);
    launchers.push(Some(start(3)));
    for (i, launcher) in launchers.into_iter().enumerate() {
        let Some(launcher) = launcher else { continue };
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 0, "pod {i}:\n{}\n{}", done.stdout, done.stderr);
        assert_contains(&done.stdout, "count=1 ");
        if i == 3 {
            assert_contains(
                &done.stderr,
                &format!("coordinating 3 launchers on {}:{port}", ips[3]),
            );
        }
    }
}
