//! Big jobs: with a named coordinator, only the coordinator lists and watches the job's pods;
//! every other launcher takes the membership from it over the control channel.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::fake_api::job_pod;
use support::{assert_contains, free_ports, loopback_ip, Cluster, Launcher, DISCOVERS};

const LIMIT: Duration = Duration::from_secs(120);
const PODS: usize = 33;

/// 33 launchers, each able to reach the API (a kubeconfig, RBAC): the coordinator makes one
/// list and one watch, the 32 followers none at all, and every pod still gets its own rank and
/// the whole endpoint list. Followers started before the coordinator wait for it, saying so.
#[test]
fn followers_of_a_named_coordinator_make_no_api_request() {
    let cluster = Cluster::new();
    let job = "big";
    let ips: Vec<String> = (0..PODS).map(|_| loopback_ip()).collect();
    for (i, ip) in ips.iter().enumerate() {
        let name = format!("{job}-{i}");
        cluster.api.put_pod(job_pod(job, &name));
        cluster
            .api
            .set_status("default", &name, "Running", Some(ip));
    }
    let control_port = free_ports(1);
    let trainer_port = free_ports(1);
    let start = |i: usize| {
        let mut env = cluster.env(job, PODS);
        env.extend([
            ("POD_IP", ips[i].clone()),
            ("POD_NAME", format!("{job}-{i}")),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
            ("PADDLE_LAUNCHER_TRAINER_PORT", trainer_port.to_string()),
            ("PADDLE_LAUNCHER_JOB_SECRET", "s".repeat(40)),
            (
                "PADDLE_LAUNCHER_COORDINATOR",
                format!("{}:{control_port}", ips[0]),
            ),
        ]);
        Launcher::start(
            cluster.dir.path(),
            &format!("{job}-{i}"),
            &[
                "run",
                "--",
                "sh",
                "-c",
                "echo \"rank=$PADDLE_TRAINER_ID endpoints=$PADDLE_TRAINER_ENDPOINTS\"",
            ],
            &env,
        )
    };
    // The followers first: they wait for the coordinator.
    let mut launchers: Vec<Launcher> = (1..PODS).map(start).collect();
    launchers[0].wait_for_output(
        &format!("waiting for the coordinator at {}:{control_port}", ips[0]),
        LIMIT,
    );
    launchers.insert(0, start(0));
    let mut ranks = BTreeSet::new();
    for (i, launcher) in launchers.into_iter().enumerate() {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 0, "pod {i}:\n{}", done.stderr);
        let line = done
            .stdout
            .lines()
            .find(|l| l.contains("rank="))
            .unwrap_or_else(|| panic!("pod {i} printed no rank: {}", done.stdout));
        let rank: usize = line
            .split("rank=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|r| r.parse().ok())
            .unwrap();
        ranks.insert(rank);
        let endpoints = line.split("endpoints=").nth(1).unwrap();
        assert_eq!(endpoints.split(',').count(), PODS, "{line}");
        if i > 0 {
            assert!(
                !done.stderr.contains(DISCOVERS),
                "a follower waited for the pods itself: {}",
                done.stderr
            );
        } else {
            assert_contains(&done.stderr, DISCOVERS);
            assert_contains(&done.stderr, &format!("coordinating {PODS} launchers"));
        }
    }
    assert_eq!(ranks, (0..PODS).collect::<BTreeSet<_>>());
    let (lists, watches) = cluster.api.pod_requests();
    assert_eq!(
        (lists, watches),
        (1, 1),
        "requests: {:?}",
        cluster.api.requests()
    );
}

/// A follower's `doctor` asks the coordinator, not the pods' API: refused while nothing
/// listens there (and then the Job, for why: one small request), fine once something does;
/// no list or watch of pods either way.
#[test]
fn doctor_of_a_follower_checks_the_coordinator_and_not_the_api() {
    let cluster = Cluster::new();
    let (coordinator, me) = (loopback_ip(), loopback_ip());
    let port = free_ports(1);
    let mut env = cluster.env("big", 4);
    env.extend([
        ("POD_IP", me.clone()),
        ("POD_NAME", "big-1".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("PADDLE_LAUNCHER_JOB_SECRET", "s".repeat(40)),
        (
            "PADDLE_LAUNCHER_COORDINATOR",
            format!("{coordinator}:{port}"),
        ),
        ("ENTRY", "python train.py".to_string()),
    ]);
    let done = Launcher::start(cluster.dir.path(), "doctor", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 71, "{}", done.stdout);
    assert_contains(&done.stdout, "this pod makes no Kubernetes API request");
    assert_contains(
        &done.stdout,
        &format!("the coordinator at {coordinator}:{port} does not accept connections"),
    );
    // Why, as a waiting follower asks: the Job keeps nothing (no coordinator wrote there), and
    // a coordinator named by its address has no completion index to look its pod up by.
    assert_contains(
        &done.stdout,
        "the coordinator: it has said nothing of what it waits for",
    );
    let listener = std::net::TcpListener::bind((coordinator.as_str(), port)).unwrap();
    let done = Launcher::start(cluster.dir.path(), "doctor2", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stdout);
    assert_contains(&done.stdout, "accepts connections");
    drop(listener);
    assert_eq!(cluster.api.pod_requests(), (0, 0));
}
