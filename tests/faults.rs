//! The launcher under faults: a misbehaving API server, lost peers, signals in every phase.

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::fake_api::{job_pod, FakeApi};
use support::{
    assert_contains, assert_nothing_left, cluster_env, free_ports, standin, standin_cmd, survivors,
    Cluster, Launcher, OnePod, Rng,
};

const LIMIT: Duration = Duration::from_secs(120);
const RUNS: usize = 3;

/// When a fault is injected: before the launchers start, or while they wait (watching).
#[derive(Clone, Copy, PartialEq)]
enum When {
    AtStart,
    WhileWaiting,
}

/// Three launchers (`plan`) against a fake API with a fault injected; pods turn Running in
/// random order at random times. Every launcher must plan, all must agree, and `served` must
/// confirm that the fault really reached them.
fn launch_despite(
    job: &str,
    first_ip: u8,
    when: When,
    inject: impl Fn(&FakeApi),
    served: impl Fn(&FakeApi) -> bool,
) {
    for run in 0..RUNS {
        let Cluster { api, dir } = Cluster::new();
        let names: Vec<String> = (0..3).map(|i| format!("{job}-{i}")).collect();
        let ips: Vec<String> = (0..3)
            .map(|i| format!("127.0.0.{}", first_ip + i))
            .collect();
        for name in &names {
            api.put_pod(job_pod(job, name));
        }
        if when == When::AtStart {
            inject(&api);
        }
        let launchers: Vec<Launcher> = (0..3)
            .map(|i| {
                let mut env = cluster_env(dir.path(), job, 3);
                env.push(("POD_IP", ips[i].clone()));
                Launcher::start(dir.path(), &names[i], &["plan"], &env)
            })
            .collect();
        let mut rng = Rng::seeded(u64::from(first_ip) * 1000 + run as u64);
        std::thread::sleep(Duration::from_millis(100 + rng.below(300)));
        if when == When::WhileWaiting {
            // Once every launcher watches, so that the fault hits open watches.
            while api.pod_requests().1 < 3 {
                std::thread::sleep(Duration::from_millis(10));
            }
            inject(&api);
        }
        let mut order = [0, 1, 2];
        rng.shuffle(&mut order);
        for i in order {
            std::thread::sleep(Duration::from_millis(rng.below(300)));
            api.set_status("default", &names[i], "Running", Some(&ips[i]));
        }
        let plans: Vec<Value> = launchers
            .into_iter()
            .map(|l| {
                let done = l.wait(LIMIT);
                assert_eq!(done.code(), 0, "{job} run {run}:\n{}", done.stderr);
                serde_json::from_str(&done.stdout).unwrap()
            })
            .collect();
        for (i, plan) in plans.iter().enumerate() {
            assert_eq!(plan["trainer_id"], i, "{job} run {run}: numeric IP order");
            assert_eq!(
                plan["pods"], plans[0]["pods"],
                "{job} run {run}: the launchers disagree"
            );
        }
        assert!(
            served(&api),
            "{job} run {run}: the fault was not served: {:#?}",
            api.requests()
        );
    }
}

#[test]
fn launch_survives_500s() {
    launch_despite(
        "e500",
        2,
        When::AtStart,
        |api| api.fail_next(4, 500, None),
        |api| api.pending_failures() == 0,
    );
}

#[test]
fn launch_survives_429_with_retry_after() {
    launch_despite(
        "e429",
        6,
        When::AtStart,
        |api| api.fail_next(4, 429, Some(1)),
        |api| api.pending_failures() == 0,
    );
}

#[test]
fn launch_survives_a_connection_reset_mid_watch() {
    // Each launcher has to watch again after the reset.
    launch_despite(
        "reset",
        10,
        When::WhileWaiting,
        |api| api.reset_watches(),
        |api| api.pod_requests().1 >= 6,
    );
}

#[test]
fn launch_survives_watches_closed_by_the_server() {
    launch_despite(
        "closed",
        14,
        When::WhileWaiting,
        |api| api.end_watches(),
        |api| api.pod_requests().1 >= 6,
    );
}

/// An API server that restarts refuses every request (403) for a few seconds after it failed,
/// until its authorizer has read the Roles (seen against the real one, tests/real_cluster.rs):
/// refusals that follow a failure are retried; only a refusal with no failure before it is a
/// missing Role (kubernetes_e2e.rs: status 72 at once).
#[test]
fn launch_survives_a_restarted_api_servers_refusals() {
    launch_despite(
        "restart403",
        42,
        When::WhileWaiting,
        |api| {
            // Down: its connections dropped and new ones reset, for 2.5 s.
            api.go_down_for(Duration::from_millis(2500));
            api.end_watches();
            std::thread::sleep(Duration::from_millis(2500));
            // Up, refusing everything for 5 s: every launcher asks meanwhile (its backoff
            // after 2.5 s of failures is shorter), and is refused.
            let (lists, watches) = api.pod_requests();
            api.set_forbidden(true);
            std::thread::sleep(Duration::from_secs(5));
            let refused = api.pod_requests().0 + api.pod_requests().1 - lists - watches;
            api.set_forbidden(false);
            assert!(refused >= 3, "only {refused} requests refused");
        },
        |api| api.pod_requests().1 >= 6,
    );
}

#[test]
fn launch_survives_410_gone() {
    // 410 Gone on resuming: each launcher has to list again.
    launch_despite(
        "gone410",
        18,
        When::WhileWaiting,
        |api| api.compact(),
        |api| api.pod_requests().0 >= 6,
    );
}

#[test]
fn launch_survives_slow_answers() {
    launch_despite(
        "slow",
        22,
        When::AtStart,
        |api| api.set_delay(Duration::from_millis(400)),
        // Every launcher's list at least was answered late.
        |api| api.delayed_answers() >= 3,
    );
}

/// The API server is down for the first 20 s of the launchers' life: they retry, then launch
/// for real (pservers and trainers), with ranks in IP order.
#[test]
fn launch_happens_after_the_api_was_down_for_20_seconds() {
    let Cluster { api, dir } = Cluster::new();
    api.go_down_for(Duration::from_secs(20));
    let port = free_ports(1).to_string();
    let launchers: Vec<Launcher> = (0..3)
        .map(|i| {
            let name = format!("down-{i}");
            let mut pod = job_pod("down", &name);
            pod["status"] =
                serde_json::json!({"phase": "Running", "podIP": format!("127.0.0.{}", 26 + i)});
            api.put_pod(pod);
            let mut env = cluster_env(dir.path(), "down", 3);
            env.extend([
                ("POD_IP", format!("127.0.0.{}", 26 + i)),
                ("CONF_PADDLE_PORT", port.clone()),
                standin_cmd("pserver"),
                standin_cmd("train"),
                ("PADDLE_LAUNCHER_LINGER", "3".to_string()),
            ]);
            Launcher::start(dir.path(), &name, &["run"], &env)
        })
        .collect();
    for (i, launcher) in launchers.into_iter().enumerate() {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 0, "{}", done.stderr);
        assert_contains(&done.stderr, "failed, retrying with backoff");
        assert_contains(
            &done.stdout,
            &format!("trainer {i} connected to 3 pserver endpoints"),
        );
    }
}

/// Two pods training; then something happens to pod 1. Pod 0's launcher must stop its children
/// and exit 78 (so the Job restarts it) instead of training against a lost pserver.
fn lose_peer(
    job: &str,
    first_ip: u8,
    watch: &str,
    lose: impl Fn(&FakeApi, &str),
) -> (support::Finished, std::path::PathBuf, tempfile::TempDir) {
    let Cluster { api, dir } = Cluster::new();
    let pids = dir.path().join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let port = free_ports(1).to_string();
    let names = [format!("{job}-0"), format!("{job}-1")];
    for (i, name) in names.iter().enumerate() {
        let mut pod = job_pod(job, name);
        pod["status"] = serde_json::json!({"phase": "Running", "podIP": format!("127.0.0.{}", first_ip + i as u8)});
        api.put_pod(pod);
    }
    let mut env = cluster_env(dir.path(), job, 2);
    env.extend([
        ("POD_IP", format!("127.0.0.{first_ip}")),
        ("POD_NAME", names[0].clone()),
        ("CONF_PADDLE_PORT", port.clone()),
        standin_cmd("pserver"),
        standin_cmd("train"),
        ("PADDLE_LAUNCHER_WATCH_PEERS", watch.to_string()),
        ("STANDIN_TRAINER_SECONDS", "120".to_string()),
        ("STANDIN_PID_DIR", pids.display().to_string()),
    ]);
    // Pod 1's pserver, so that pod 0's trainer can start: a stand-in without a launcher.
    let mut peer = std::process::Command::new(standin())
        .args([
            "pserver",
            &format!("--port={port}"),
            "--ports_num=1",
            "--ports_num_for_sparse=0",
            "--num_gradient_servers=2",
        ])
        .env("POD_IP", format!("127.0.0.{}", first_ip + 1))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let launcher = Launcher::start(dir.path(), &names[0], &["run"], &env);
    launcher.wait_for_output("trainer 0 connected to 2 pserver endpoints", LIMIT);
    lose(&api, &names[1]);
    let done = if watch == "true" {
        launcher.wait(LIMIT)
    } else {
        // Watching is off: the launcher must still be training; stop it ourselves.
        std::thread::sleep(Duration::from_secs(2));
        launcher.signal(Signal::SIGTERM);
        launcher.wait(LIMIT)
    };
    let _ = peer.kill();
    let _ = peer.wait();
    (done, pids, dir)
}

#[test]
fn a_deleted_peer_stops_the_launch_with_78() {
    let (done, pids, _dir) = lose_peer("del", 30, "true", |api, name| {
        api.delete_pod("default", name)
    });
    assert_eq!(done.code(), 78, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "job stopped: peer pod del-1 (rank 1, 127.0.0.31) was deleted; stopped trainer-0 and pserver-0",
    );
    assert_eq!(survivors(&pids), Vec::<String>::new());
}

/// A peer whose container the kernel killed for memory: the loss says so, from the kubelet's
/// report, and the job's line names it.
#[test]
fn a_failed_peer_stops_the_launch_with_78() {
    let (done, pids, _dir) = lose_peer("fail", 32, "true", |api, name| {
        api.set_terminated("default", name, 137, "OOMKilled", "")
    });
    assert_eq!(done.code(), 78, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "job stopped: peer pod fail-1 (rank 1, 127.0.0.33) has Failed: its container launcher ended with status 137 (OOMKilled: the kernel's out-of-memory killer); stopped trainer-0 and pserver-0",
    );
    assert_eq!(survivors(&pids), Vec::<String>::new());
}

/// Without a control channel, a peer's own words reach this pod through the API: its
/// launcher's termination message, which the kubelet keeps in the pod's status.
#[test]
fn a_failed_peer_is_named_with_its_termination_message() {
    let (done, _pids, _dir) = lose_peer("said", 38, "true", |api, name| {
        let message = format!(
            "job stopped: pod {name} at 2026-11-23T10:00:00Z: trainer exited with status 3"
        );
        api.set_terminated("default", name, 3, "Error", &message)
    });
    assert_eq!(done.code(), 78, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "job stopped: peer pod said-1 (rank 1, 127.0.0.39) has Failed: its container launcher ended with status 3: pod said-1 at 2026-11-23T10:00:00Z: trainer exited with status 3; stopped ",
    );
}

#[test]
fn a_peer_back_with_a_new_ip_stops_the_launch_with_78() {
    let (done, _pids, _dir) = lose_peer("moved", 34, "true", |api, name| {
        // Gone while the watch was down, and back under the same name elsewhere: a relist shows it.
        api.delete_pod("default", name);
        let mut pod = job_pod("moved", name);
        pod["status"] = serde_json::json!({"phase": "Running", "podIP": "127.0.0.99"});
        api.put_pod(pod);
    });
    assert_eq!(done.code(), 78, "{}", done.stderr);
    assert_contains(&done.stderr, "peer pod moved-1 (rank 1, 127.0.0.35)");
}

#[test]
fn with_peer_watching_off_a_lost_peer_does_not_stop_training() {
    let (done, _pids, _dir) = lose_peer("nowatch", 36, "false", |api, name| {
        api.delete_pod("default", name)
    });
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert!(!done.stderr.contains("peer pod"), "{}", done.stderr);
}

/// A one-pod launch stopped by SIGTERM once `phase` shows in its log.
fn sigterm_during(pod: &OnePod, phase: &str, reason: &str) {
    let launcher = pod.start();
    launcher.wait_for_output(phase, LIMIT);
    launcher.signal(Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert!(done.stderr.contains(reason), "{}", done.stderr);
    assert_nothing_left(&pod.pids());
}

#[test]
fn sigterm_while_the_pserver_starts_exits_143_and_leaves_nothing() {
    let pod = OnePod::new().set("STANDIN_PSERVER_DELAY", "600");
    sigterm_during(
        &pod,
        "waiting for 1 pserver endpoints",
        "received SIGTERM while waiting for the pservers",
    );
}

#[test]
fn sigterm_while_lingering_exits_143_and_leaves_nothing() {
    let pod = OnePod::new().set("PADDLE_LAUNCHER_LINGER", "600");
    sigterm_during(
        &pod,
        "the pserver keeps serving for 600 s",
        "received SIGTERM while the pserver lingered",
    );
}

/// Nothing listens at the kubeconfig's server: the launcher names the URL, does not repeat the
/// same failure line every second, and ends with its own status (79), not "pods not Running".
#[test]
fn an_unreachable_api_server_is_named_once_and_ends_with_79() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_ports(1));
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: {url}\n\
             contexts:\n- name: gone\n  context:\n    cluster: gone\n    user: u\n\
             current-context: gone\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .unwrap();
    let mut env = cluster_env(dir.path(), "gone", 2);
    env.push(("POD_IP", "127.0.0.2".into()));
    env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "6".into()));
    let done = Launcher::start(dir.path(), "gone", &["run"], &env).wait(LIMIT);
    assert_eq!(done.code(), 79, "{}", done.stderr);
    let last = done.stderr.lines().last().unwrap_or_default().to_string();
    assert!(
        last.contains(&format!("the Kubernetes API server at {url}"))
            && last.contains("did not answer"),
        "{last}"
    );
    let failures = done
        .stderr
        .lines()
        .filter(|l| l.contains("failed, retrying"))
        .count();
    assert_eq!(failures, 1, "the same failure repeated:\n{}", done.stderr);
}

/// A server that is not a Kubernetes API server (a wrong URL, a proxy) answers 404 in plain
/// text: said at once, with the URL, instead of "Failed to parse error data" for half an hour.
#[test]
fn a_server_that_is_not_an_api_server_is_named_at_once() {
    let cluster = Cluster::new();
    cluster.api.record(
        "/api/v1/namespaces/default/pods",
        404,
        "404 page not found".to_string(),
    );
    let mut env = cluster.env("wrong", 2);
    env.push(("POD_IP", "127.0.0.2".into()));
    env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "0".into()));
    let done = Launcher::start(cluster.dir.path(), "wrong", &["run"], &env).wait(LIMIT);
    assert_eq!(done.code(), 79, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        &format!("{}/ is not a Kubernetes API server", cluster.api.url()),
    );
}
