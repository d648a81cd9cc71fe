//! Split pserver/trainer layout, today's Paddle contracts, and real PaddlePaddle training.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use support::fake_api::job_pod;
use support::{assert_contains, free_ports, paddle_python, standin_cmd, Cluster, Launcher, Rng};

const LIMIT: Duration = Duration::from_secs(120);

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pod_with(job: &str, name: &str, labels: Value) -> Value {
    let mut pod = job_pod(job, name);
    pod["metadata"]["labels"] = labels;
    pod
}

#[test]
fn real_paddle_trains_data_parallel_over_gloo_with_three_launchers() {
    let python = paddle_python();
    let Cluster { api, dir } = Cluster::new();
    let names = ["dp-0-q8w", "dp-1-m2c", "dp-2-z5x"];
    let ips = ["127.0.0.12", "127.0.0.13", "127.0.0.14"];
    for name in names {
        api.put_pod(job_pod("dp", name));
    }
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let port = free_ports(1).to_string();
    let train = manifest_dir()
        .join("examples/collective/train.py")
        .display()
        .to_string();
    let launchers: Vec<Launcher> = (0..3)
        .map(|i| {
            let env = vec![
                (
                    "KUBECONFIG",
                    dir.path().join("kubeconfig").display().to_string(),
                ),
                ("JOB_NAME", "dp".to_string()),
                ("CONF_PADDLE_GRADIENT_NUM", "3".to_string()),
                ("CONF_PADDLE_NIC", "lo".to_string()),
                ("POD_IP", ips[i].to_string()),
                ("POD_NAME", names[i].to_string()),
                ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
                ("PADDLE_LAUNCHER_TRAINER_PORT", port.clone()),
                (
                    "PADDLE_LAUNCHER_WORKDIR",
                    dir.path().join(names[i]).display().to_string(),
                ),
                ("PADDLE_DISTRI_BACKEND", "gloo".to_string()),
                ("HOME", dir.path().display().to_string()),
            ];
            let out = out.display().to_string();
            Launcher::start(
                dir.path(),
                names[i],
                &["run", "--", &python, &train, &out],
                &env,
            )
        })
        .collect();
    let mut rng = Rng::seeded(71);
    let mut order = [0, 1, 2];
    rng.shuffle(&mut order);
    for i in order {
        std::thread::sleep(Duration::from_millis(50 + rng.below(300)));
        api.set_status("default", names[i], "Running", Some(ips[i]));
    }
    for (i, launcher) in launchers.into_iter().enumerate() {
        let done = launcher.wait(LIMIT);
        assert_eq!(
            done.code(),
            0,
            "launcher {i}:\n{}\n{}",
            done.stdout,
            done.stderr
        );
        assert_contains(&done.stdout, &format!("[trainer-{i}] rank {i} of world 3"));
    }
    let results: Vec<Value> = (0..3)
        .map(|r| {
            serde_json::from_str(
                &std::fs::read_to_string(out.join(format!("result-{r}.json"))).unwrap(),
            )
            .unwrap()
        })
        .collect();
    for (r, result) in results.iter().enumerate() {
        assert_eq!(result["world"], 3);
        assert_eq!(result["rank"], r);
        assert_eq!(
            result["env_trainer_id"], r,
            "the launcher's rank is Paddle's rank"
        );
        let (first, last) = (
            result["first_loss"].as_f64().unwrap(),
            result["last_loss"].as_f64().unwrap(),
        );
        assert!(last < first / 100.0, "rank {r}: loss {first} -> {last}");
    }
    // Each rank trained on different data: equal parameters prove the all-reduce.
    assert_eq!(results[0]["params"], results[1]["params"]);
    assert_eq!(results[0]["params"], results[2]["params"]);
}

#[test]
fn split_layout_v2_trainers_find_pservers_and_may_share_an_ip() {
    let Cluster { api, dir } = Cluster::new();
    let job = "split";
    let pservers = [
        ("split-pserver-a", "127.0.0.22"),
        ("split-pserver-b", "127.0.0.23"),
    ];
    // Trainers do not listen in v2: two of them on one IP (hostNetwork on one node) is fine.
    let trainers = [
        ("split-trainer-x", "127.0.0.25"),
        ("split-trainer-y", "127.0.0.24"),
        ("split-trainer-z", "127.0.0.24"),
    ];
    for (name, _) in pservers {
        api.put_pod(pod_with(job, name, json!({"paddle-job-pserver": job})));
    }
    for (name, _) in trainers {
        api.put_pod(pod_with(job, name, json!({"paddle-job": job})));
    }
    let port = free_ports(2).to_string();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for i in 0..7 {
        std::fs::write(data.join(format!("part-{i:02}")), "x").unwrap();
    }
    let common = |role: &str, name: &str, ip: &str| {
        let workdir = dir.path().join(name);
        vec![
            (
                "KUBECONFIG",
                dir.path().join("kubeconfig").display().to_string(),
            ),
            ("JOB_NAME", job.to_string()),
            ("PSERVERS", "2".to_string()),
            ("TRAINERS", "3".to_string()),
            ("CONF_PADDLE_NIC", "lo".to_string()),
            ("CONF_PADDLE_PORT", port.clone()),
            ("CONF_PADDLE_PORTS_NUM", "2".to_string()),
            ("POD_IP", ip.to_string()),
            ("POD_NAME", name.to_string()),
            ("PADDLE_LAUNCHER_ROLE", role.to_string()),
            ("PADDLE_LAUNCHER_PROTOCOL", "v2".to_string()),
            standin_cmd("pserver"),
            ("PADDLE_LAUNCHER_WORKDIR", workdir.display().to_string()),
            ("PADDLE_LAUNCHER_ID_DIR", workdir.display().to_string()),
            (
                "PADDLE_LAUNCHER_TRAIN_FILES",
                format!("{}/part-*", data.display()),
            ),
            (
                "ENTRY",
                manifest_dir()
                    .join("standins/v2-trainer")
                    .display()
                    .to_string(),
            ),
        ]
    };
    let pserver_launchers: Vec<Launcher> = pservers
        .iter()
        .map(|(name, ip)| Launcher::start(dir.path(), name, &["run"], &common("pserver", name, ip)))
        .collect();
    let trainer_launchers: Vec<Launcher> = trainers
        .iter()
        .map(|(name, ip)| Launcher::start(dir.path(), name, &["run"], &common("trainer", name, ip)))
        .collect();
    let mut all: Vec<(&str, &str)> = pservers.iter().chain(trainers.iter()).copied().collect();
    Rng::seeded(183).shuffle(&mut all);
    for (name, ip) in all {
        api.set_status("default", name, "Running", Some(ip));
    }
    // Rank by numeric IP, ties by name: y (.24), z (.24), x (.25).
    let expected_ids = [2, 0, 1];
    for ((name, _), (launcher, id)) in trainers
        .iter()
        .zip(trainer_launchers.into_iter().zip(expected_ids))
    {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 0, "{name}:\n{}\n{}", done.stdout, done.stderr);
        assert_contains(&done.stdout, &format!("v2 flags: --nics=lo --num_gradient_servers=3 --port={port} --ports_num=2 --ports_num_for_sparse=0 --pservers=127.0.0.22,127.0.0.23 --trainer_id={id}"));
        assert_contains(
            &done.stdout,
            &format!("v2 trainer {id} of 3 connected to 4 pserver endpoints"),
        );
        let list = std::fs::read_to_string(dir.path().join(name).join("train.list")).unwrap();
        let expected: String = (0..7)
            .filter(|i| i % 3 == id)
            .map(|i| format!("{}/part-{i:02}\n", data.display()))
            .collect();
        assert_eq!(list, expected, "{name}'s share of the training files");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(name).join("trainer_count")).unwrap(),
            "3\n"
        );
    }
    // A pserver pod stops when told to...
    let mut pserver_launchers = pserver_launchers.into_iter();
    let stopped = pserver_launchers.next().unwrap();
    stopped.signal(Signal::SIGTERM);
    let done = stopped.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_contains(&done.stderr, "received SIGTERM; stopped the pserver");
    // ...and otherwise serves until every trainer pod has Succeeded, then ends with 0 so that
    // the pserver Job completes.
    let mut serving = pserver_launchers.next().unwrap();
    assert!(
        serving.child.try_wait().unwrap().is_none(),
        "the pserver ended before the trainer pods did"
    );
    for (name, _) in trainers {
        api.set_status("default", name, "Succeeded", None);
    }
    let done = serving.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    // Given a moment to end by itself (Paddle's trainer 0 may be stopping it); this stand-in
    // does not, so it is stopped.
    assert_contains(
        &done.stderr,
        "all 3 trainer pods `paddle-job=split` Succeeded: the pserver may end by itself within 5 s",
    );
    assert_contains(
        &done.stderr,
        "all 3 trainer pods `paddle-job=split` Succeeded: stopped the pserver",
    );
}

#[test]
fn too_many_failed_trainer_pods_stop_the_job_with_a_reason() {
    let Cluster { api, dir } = Cluster::new();
    for (name, phase) in [
        ("g-0", "Failed"),
        ("g-1", "Failed"),
        ("g-2", "Running"),
        ("g-3", "Pending"),
    ] {
        let mut pod = pod_with("g", name, json!({"paddle-job": "g"}));
        pod["status"] = json!({"phase": phase, "podIP": "127.0.0.40"});
        api.put_pod(pod);
    }
    let term_log = dir.path().join("termination-log");
    std::fs::write(&term_log, "").unwrap();
    let env = vec![
        (
            "KUBECONFIG",
            dir.path().join("kubeconfig").display().to_string(),
        ),
        ("JOB_NAME", "g".to_string()),
        ("TRAINERS", "2".to_string()),
        ("POD_IP", "127.0.0.40".to_string()),
        ("CONF_PADDLE_NIC", "lo".to_string()),
        ("PADDLE_LAUNCHER_ROLE", "trainer".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("PADDLE_LAUNCHER_MAX_FAILED_TRAINERS", "1".to_string()),
        (
            "PADDLE_LAUNCHER_TERMINATION_LOG",
            term_log.display().to_string(),
        ),
        ("ENTRY", "true".to_string()),
    ];
    let done = Launcher::start(dir.path(), "guard", &["run"], &env).wait(LIMIT);
    assert_eq!(done.code(), 77, "{}", done.stderr);
    assert_eq!(
        std::fs::read_to_string(&term_log).unwrap(),
        "2 trainer pods of the job have Failed, more than PADDLE_LAUNCHER_MAX_FAILED_TRAINERS = 1: not starting again\n"
    );
}

/// A split-layout pserver learns that the job is done from its watch of the trainer pods: once
/// the API refuses that watch, it must not serve forever (its Job would never complete).
#[test]
fn a_split_pserver_that_may_no_longer_watch_the_trainers_stops_with_72() {
    let Cluster { api, dir } = Cluster::new();
    let job = "deny";
    let pserver = ("deny-pserver-0", "127.0.0.26");
    let trainer = ("deny-trainer-0", "127.0.0.27");
    api.put_pod(pod_with(job, pserver.0, json!({"paddle-job-pserver": job})));
    api.put_pod(pod_with(job, trainer.0, json!({"paddle-job": job})));
    for (name, ip) in [pserver, trainer] {
        api.set_status("default", name, "Running", Some(ip));
    }
    let env = vec![
        (
            "KUBECONFIG",
            dir.path().join("kubeconfig").display().to_string(),
        ),
        ("JOB_NAME", job.to_string()),
        ("PSERVERS", "1".to_string()),
        ("TRAINERS", "1".to_string()),
        ("CONF_PADDLE_NIC", "lo".to_string()),
        ("CONF_PADDLE_PORT", free_ports(1).to_string()),
        ("POD_IP", pserver.1.to_string()),
        ("POD_NAME", pserver.0.to_string()),
        ("PADDLE_LAUNCHER_ROLE", "pserver".to_string()),
        standin_cmd("pserver"),
    ];
    let launcher = Launcher::start(dir.path(), "pserver", &["run"], &env);
    launcher.wait_for_output("[pserver-0] pserver listening", LIMIT);
    api.set_forbidden(true);
    api.end_watches();
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 72, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "stopped the pserver: it can no longer tell when the trainer pods are done",
    );
    assert_contains(&done.stdout, "[pserver-0] pserver received SIGTERM");
}
