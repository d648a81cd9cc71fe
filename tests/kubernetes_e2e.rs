//! Launchers against the fake Kubernetes API: discovery, ranks, and the whole launch.

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;
use support::fake_api::job_pod;
use support::{
    assert_contains, free_ports, loopback_ip, standin, standin_cmd, survivors, trainer_argv,
    Cluster, Launcher, Rng,
};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn three_pods_agree_on_ranks_and_train_against_each_others_pservers() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    let job = "e2e";
    let names = ["e2e-x7k2p", "e2e-a9q4m", "e2e-m3z8r"];
    for name in names {
        api.put_pod(job_pod(job, name));
    }
    // A failed pod of an earlier attempt carries the same label: it must not block or count.
    let mut stale = job_pod(job, "e2e-old");
    stale["status"] = json!({"phase": "Failed", "podIP": "127.0.0.9"});
    api.put_pod(stale);

    let port = free_ports(3);
    let job_path = cluster.dir.path().join("jobpath");
    let pid_dir = cluster.dir.path().join("pids");
    std::fs::create_dir_all(&pid_dir).unwrap();
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let launchers: Vec<Launcher> = (0..3)
        .map(|i| {
            let term_log = cluster.dir.path().join(format!("termination-{i}"));
            std::fs::write(&term_log, "").unwrap();
            let mut env = cluster.env(job, 3);
            env.extend([
                ("POD_IP", ips[i].to_string()),
                ("POD_NAME", names[i].to_string()),
                ("JOB_PATH", job_path.display().to_string()),
                ("CONF_PADDLE_PORT", port.to_string()),
                ("CONF_PADDLE_PORTS_NUM", "2".to_string()),
                ("CONF_PADDLE_PORTS_NUM_SPARSE", "1".to_string()),
                standin_cmd("pserver"),
                standin_cmd("train"),
                // Peers' trainers still connect to our pserver after our own trainer is done.
                ("PADDLE_LAUNCHER_LINGER", "3".to_string()),
                (
                    "PADDLE_LAUNCHER_TERMINATION_LOG",
                    term_log.display().to_string(),
                ),
                (
                    "PADDLE_LAUNCHER_WORKDIR",
                    cluster
                        .dir
                        .path()
                        .join(format!("work-{i}"))
                        .display()
                        .to_string(),
                ),
                ("STANDIN_PID_DIR", pid_dir.display().to_string()),
            ]);
            Launcher::start(
                cluster.dir.path(),
                names[i],
                &["run", "--", "--config=trainer_config.py", "--num_passes=1"],
                &env,
            )
        })
        .collect();

    // The kubelet reports the pods Running one by one, in random order and at random times.
    let mut rng = Rng::seeded(77);
    let mut order = [0, 1, 2];
    rng.shuffle(&mut order);
    for i in order {
        std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
        api.set_status("default", names[i], "Running", Some(ips[i]));
    }

    let mut ranks = Vec::new();
    for (i, launcher) in launchers.into_iter().enumerate() {
        let done = launcher.wait(LIMIT);
        assert_eq!(
            done.code(),
            0,
            "launcher {i}:\n{}\n{}",
            done.stdout,
            done.stderr
        );
        let argv = trainer_argv(&done.stdout).expect("the trainer printed its argv");
        let rank = i; // numeric IP order: 127.0.0.2 < .3 < .4
        assert_eq!(
            argv,
            [
                standin(),
                "train".into(),
                format!("--port={port}"),
                "--ports_num=2".into(),
                "--ports_num_for_sparse=1".into(),
                "--nics=lo".into(),
                "--comment=paddle_process_by_paddle".into(),
                "--pservers=127.0.0.2,127.0.0.3,127.0.0.4".into(),
                "--num_gradient_servers=3".into(),
                format!("--trainer_id={rank}"),
                "--local=0".into(),
                format!("--save_dir={}/e2e/output", job_path.display()),
                "--config=trainer_config.py".into(),
                "--num_passes=1".into(),
            ]
        );
        ranks.push(rank);
        // Output reaches the container's stdout with a prefix AND the seed's log files.
        assert!(done.stdout.contains(&format!(
            "[trainer-{rank}] trainer {rank} connected to 9 pserver endpoints"
        )));
        let node = job_path.join(format!("e2e/output/node_{rank}"));
        let train_log = std::fs::read_to_string(node.join("train.log")).unwrap();
        assert!(
            train_log.contains(&format!("trainer {rank} connected to 9 pserver endpoints")),
            "{train_log}"
        );
        let server_log = std::fs::read_to_string(node.join("server.log")).unwrap();
        assert!(
            server_log.contains(&format!("pserver listening on {}:{port}", ips[i])),
            "{server_log}"
        );
        let reason =
            std::fs::read_to_string(cluster.dir.path().join(format!("termination-{i}"))).unwrap();
        assert_eq!(reason, "trainer exited with status 0\n");
    }
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2]);
    assert_eq!(survivors(&pid_dir), Vec::<String>::new());
    // One list and one watch per launcher: no polling.
    let pod_requests = api
        .requests()
        .iter()
        .filter(|r| r.contains("/pods"))
        .count();
    assert!(pod_requests <= 3 * 3, "{:#?}", api.requests());
}

#[test]
fn indexed_job_pods_rank_by_completion_index() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    // Index order differs from IP order on purpose.
    let pods = [
        ("idx-0-aaa", "127.0.0.12", "0"),
        ("idx-1-bbb", "127.0.0.10", "1"),
        ("idx-2-ccc", "127.0.0.11", "2"),
    ];
    for (name, ip, index) in pods {
        let mut pod = job_pod("idx", name);
        pod["metadata"]["annotations"] = json!({"batch.kubernetes.io/job-completion-index": index});
        pod["status"] = json!({"phase": "Running", "podIP": ip});
        api.put_pod(pod);
    }
    let mut env = cluster.env("idx", 3);
    env.push(("POD_IP", "127.0.0.10".into()));
    let done = Launcher::start(cluster.dir.path(), "plan", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let plan: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(plan["trainer_id"], 1);
    assert_eq!(plan["namespace"], "default");
    let order: Vec<&str> = plan["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["idx-0-aaa", "idx-1-bbb", "idx-2-ccc"]);
}

#[test]
fn missing_role_is_an_immediate_error_with_the_rbac_to_apply() {
    let cluster = Cluster::new();
    cluster.api.set_forbidden(true);
    let mut env = cluster.env("rbac", 2);
    env.push(("POD_IP", "127.0.0.2".into()));
    env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "600".into()));
    let done = Launcher::start(cluster.dir.path(), "rbac", &["run"], &env).wait(LIMIT);
    assert_eq!(done.code(), 72, "{}", done.stderr);
    assert_contains(&done.stderr, "403 pods is forbidden");
    assert_contains(&done.stderr, "verbs: [get, list, watch]");
    assert_contains(
        &done.stderr,
        "kind: ServiceAccount, name: trainer, namespace: default",
    );
}

#[test]
fn sigterm_while_waiting_for_pods_exits_with_143() {
    let cluster = Cluster::new();
    cluster.api.put_pod(job_pod("waiting", "waiting-0"));
    let mut env = cluster.env("waiting", 1);
    env.push(("POD_IP", "127.0.0.2".into()));
    let launcher = Launcher::start(cluster.dir.path(), "waiting", &["run"], &env);
    launcher.wait_for_output("waiting: 0/1 pods Running", LIMIT);
    launcher.signal(Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "received SIGTERM while waiting for the job's pods",
    );
}

#[test]
fn wait_timeout_says_which_pod_is_not_running_and_why() {
    let cluster = Cluster::new();
    let mut stuck = job_pod("slow", "slow-1");
    stuck["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]});
    cluster.api.put_pod(stuck);
    let mut running = job_pod("slow", "slow-0");
    running["status"] = json!({"phase": "Running", "podIP": "127.0.0.2"});
    cluster.api.put_pod(running);
    let mut env = cluster.env("slow", 2);
    env.push(("POD_IP", "127.0.0.2".into()));
    env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "2".into()));
    let done = Launcher::start(cluster.dir.path(), "slow", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 71, "{}", done.stderr);
    assert_contains(&done.stderr, "1/2 pods Running with an IP (2 live, 0 finished or terminating ignored); slow-1: Pending (Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.)");
}

#[test]
fn watch_recovers_from_410_gone_and_still_sees_the_pods() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    for name in ["gone-0", "gone-1"] {
        api.put_pod(job_pod("gone", name));
    }
    let mut env = cluster.env("gone", 2);
    env.push(("POD_IP", "127.0.0.3".into()));
    let launcher = Launcher::start(cluster.dir.path(), "gone", &["plan"], &env);
    launcher.wait_for_output("waiting: 0/2", LIMIT);
    // The server forgets its history: the open watch ends and resuming it gets 410 Gone.
    api.set_status("default", "gone-0", "Running", Some("127.0.0.2"));
    api.compact();
    api.set_status("default", "gone-1", "Running", Some("127.0.0.3"));
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let plan: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(plan["trainer_id"], 1);
    let lists = api
        .requests()
        .iter()
        .filter(|r| r.contains("/pods?") && !r.contains("watch="))
        .count();
    assert!(lists >= 2, "no relist after 410: {:#?}", api.requests());
}

#[test]
fn duplicate_host_network_ips_from_a_real_pod_list_are_rejected() {
    let cluster = Cluster::new();
    // The recorded kind control plane: static pods with hostNetwork all on 172.18.0.4.
    let recorded: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(support::fixture("v1-34-pod-list.json")).unwrap(),
    )
    .unwrap();
    let list: serde_json::Value =
        serde_json::from_str(recorded[0]["response_body"].as_str().unwrap()).unwrap();
    for pod in list["items"].as_array().unwrap() {
        cluster.api.put_pod(pod.clone());
    }
    let mut env = cluster.env("kind", 4);
    env.extend([
        ("POD_IP", "172.18.0.4".to_string()),
        ("JOB_NAMESPACE", "kube-system".to_string()),
        ("PADDLE_LAUNCHER_SELECTOR", "tier=control-plane".to_string()),
    ]);
    let done = Launcher::start(cluster.dir.path(), "kind", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 73, "{}", done.stderr);
    assert_contains(&done.stderr, "pods etcd-v1.34-control-plane and kube-apiserver-v1.34-control-plane share the IP 172.18.0.4");
}

#[test]
fn invalid_value_fails_before_any_api_call() {
    let cluster = Cluster::new();
    let mut env = cluster.env("bad", 2);
    env.push(("CONF_PADDLE_PORT", "65536".into()));
    let done = Launcher::start(cluster.dir.path(), "bad", &["run"], &env).wait(LIMIT);
    assert_eq!(done.code(), 2);
    let last = done.stderr.lines().last().unwrap_or_default();
    assert!(
        last.ends_with("invalid CONF_PADDLE_PORT (--port): \"65536\": expected a TCP port, an integer from 1 to 65535"),
        "{}",
        done.stderr
    );
    assert_eq!(cluster.api.requests(), Vec::<String>::new());
}

#[test]
fn watch_resumes_from_the_last_bookmark() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    api.set_bookmark_interval(Duration::from_millis(100));
    api.put_pod(job_pod("mark", "mark-0"));
    let mut env = cluster.env("mark", 1);
    env.push(("POD_IP", "127.0.0.2".into()));
    let launcher = Launcher::start(cluster.dir.path(), "mark", &["plan"], &env);
    launcher.wait_for_output("waiting: 0/1", LIMIT);
    // Changes outside the selector move the server's resourceVersion on; only bookmarks tell
    // the launcher's watch about it.
    for i in 0..5 {
        api.put_pod(job_pod("other-job", &format!("other-{i}")));
    }
    let latest = api.pod("default", "other-4").unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    std::thread::sleep(Duration::from_millis(500));
    api.end_watches();
    let resumed = |requests: Vec<String>| {
        requests
            .iter()
            .any(|r| r.contains("watch=true") && r.contains(&format!("resourceVersion={latest}")))
    };
    let deadline = std::time::Instant::now() + LIMIT;
    while !resumed(api.requests()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    api.set_status("default", "mark-0", "Running", Some("127.0.0.2"));
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(
        resumed(api.requests()),
        "the watch did not resume from bookmark {latest}: {:#?}",
        api.requests()
    );
    let lists = api
        .requests()
        .iter()
        .filter(|r| !r.contains("watch="))
        .count();
    assert_eq!(
        lists,
        1,
        "a clean watch end must not cost a relist: {:#?}",
        api.requests()
    );
}

#[test]
fn doctor_says_why_the_job_would_not_start() {
    let cluster = Cluster::new();
    let mut stuck = job_pod("doc", "doc-1");
    stuck["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient memory."}]});
    cluster.api.put_pod(stuck);
    let mut running = job_pod("doc", "doc-0");
    running["status"] = json!({"phase": "Running", "podIP": "127.0.0.2"});
    cluster.api.put_pod(running);
    let mut env = cluster.env("doc", 3);
    env.push(("POD_IP", "127.0.0.2".into()));
    let done = Launcher::start(cluster.dir.path(), "doctor", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 71, "{}\n{}", done.stdout, done.stderr);
    for expected in [
        "configuration: OK (job doc, 3 trainers",
        "reachable; pods can be listed in namespace default",
        "doc-1: Pending (Unschedulable: 0/3 nodes are available: 3 Insufficient memory.)",
        "1 of 3 pods do not exist yet",
        "the job would not start yet",
    ] {
        assert!(
            done.stdout.contains(expected),
            "no {expected:?} in:\n{}",
            done.stdout
        );
    }
    // It looked once and did not wait: one list, no watch.
    assert_eq!(cluster.api.pod_requests(), (1, 0));

    cluster.api.set_forbidden(true);
    let done = Launcher::start(cluster.dir.path(), "doctor2", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 72);
    assert_contains(&done.stdout, "verbs: [get, list, watch]");
}

#[test]
fn doctor_says_when_the_job_would_start_and_with_which_rank() {
    let cluster = Cluster::new();
    for (name, ip) in [("ok-0", "127.0.0.3"), ("ok-1", "127.0.0.2")] {
        let mut pod = job_pod("ok", name);
        pod["status"] = json!({"phase": "Running", "podIP": ip});
        cluster.api.put_pod(pod);
    }
    let mut env = cluster.env("ok", 2);
    env.push(("POD_IP", "127.0.0.3".into()));
    env.extend(["pserver", "train"].map(support::standin_cmd));
    let done = Launcher::start(cluster.dir.path(), "doctor", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stdout, "pods `job-name=ok`: all 2 Running with an IP");
    assert_contains(&done.stdout, "this pod would be trainer 1 / pserver 1");
    assert_contains(&done.stdout, "control channel: off");
    env.push(("PADDLE_LAUNCHER_JOB_SECRET", "d".repeat(32)));
    let done = Launcher::start(cluster.dir.path(), "doctor2", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    // Rank 0 is the lower address, ok-1's: it coordinates, this pod follows.
    assert_contains(
        &done.stdout,
        "control channel: coordinator 127.0.0.2:6171, this pod follows; heartbeat timeout 10 s; no group restarts",
    );
    env.push(("PADDLE_LAUNCHER_MAX_RESTARTS", "2".into()));
    let done = Launcher::start(cluster.dir.path(), "doctor3", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    assert_contains(
        &done.stdout,
        "heartbeat timeout 10 s; up to 2 group restarts; every preemption restarts the job for free",
    );
    env.push(("PADDLE_LAUNCHER_MAX_PREEMPTIONS", "3".into()));
    // plan shows the budget, and the epoch the processes would start in.
    let done = Launcher::start(cluster.dir.path(), "plan", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let plan: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(plan["control"]["max_restarts"], 2);
    assert_eq!(plan["control"]["max_preemptions"], 3);
    assert_eq!(plan["restart_count"], 0);
    for process in plan["processes"].as_array().unwrap() {
        assert_eq!(process["env"]["PADDLE_LAUNCHER_RESTART_COUNT"], "0");
    }
}

/// doctor judges with the launcher's own rule, the failed-trainer guard included.
#[test]
fn doctor_applies_the_failed_trainer_guard_as_the_launcher_does() {
    let cluster = Cluster::new();
    for (name, phase, ip) in [
        ("gd-0", "Running", "127.0.0.3"),
        ("gd-1", "Running", "127.0.0.2"),
        ("gd-old", "Failed", "127.0.0.4"),
    ] {
        let mut pod = job_pod("gd", name);
        pod["status"] = json!({"phase": phase, "podIP": ip});
        cluster.api.put_pod(pod);
    }
    let mut env = cluster.env("gd", 2);
    env.push(("POD_IP", "127.0.0.3".into()));
    env.push(("PADDLE_LAUNCHER_MAX_FAILED_TRAINERS", "0".into()));
    let done = Launcher::start(cluster.dir.path(), "doctor", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 77, "{}\n{}", done.stdout, done.stderr);
    assert_contains(
        &done.stdout,
        "1 trainer pods of the job have Failed, more than PADDLE_LAUNCHER_MAX_FAILED_TRAINERS = 0",
    );
}

/// Pods held by Kueue's scheduling gate (Pending, `PodScheduled=False` `SchedulingGated`, as the
/// API shows a gated pod: k8s.io/kubernetes pkg/scheduler, KEP-3521; gate name from Kueue's
/// pkg/controller/jobs/pod): the launcher says it waits for admission by that gate, and its wait
/// timeout does not run while the whole job is queued; admitted later, the job starts.
#[test]
fn a_job_held_by_kueue_waits_for_admission_without_timing_out() {
    let cluster = Cluster::new();
    let job = "queued";
    let names = ["queued-0", "queued-1"];
    let ips = [loopback_ip(), loopback_ip()];
    let gated = |name: &str| {
        let mut pod = job_pod(job, name);
        pod["spec"]["schedulingGates"] = json!([{"name": "kueue.x-k8s.io/admission"}]);
        pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
            "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}]);
        pod
    };
    for name in names {
        cluster.api.put_pod(gated(name));
    }
    let launchers: Vec<Launcher> = (0..2)
        .map(|i| {
            let mut env = cluster.env(job, 2);
            env.extend([
                ("POD_IP", ips[i].clone()),
                ("POD_NAME", names[i].to_string()),
                ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
                ("PADDLE_LAUNCHER_TRAINER_PORT", free_ports(1).to_string()),
                ("PADDLE_LAUNCHER_WAIT_TIMEOUT", "2".to_string()),
            ]);
            Launcher::start(cluster.dir.path(), names[i], &["run", "--", "true"], &env)
        })
        .collect();
    for launcher in &launchers {
        launcher.wait_for_output("waiting for admission by kueue.x-k8s.io/admission", LIMIT);
        launcher.wait_for_output("held by a scheduling gate", LIMIT);
    }
    // Twice the wait timeout, queued: nobody gave up.
    std::thread::sleep(Duration::from_secs(4));
    for launcher in &launchers {
        assert!(
            !launcher.stderr_so_far().contains("exiting with status"),
            "{}",
            launcher.stderr_so_far()
        );
    }
    // Kueue admits the job: the gates go, the scheduler places the pods, they run.
    for (name, ip) in names.iter().zip(&ips) {
        let mut pod = job_pod(job, name);
        pod["status"] = json!({"phase": "Running", "podIP": ip});
        cluster.api.put_pod(pod);
    }
    for launcher in launchers {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 0, "{}", done.stderr);
    }
}

/// A Job replaces a deleted pod at once (its default `podReplacementPolicy`): the replacement is
/// Running while the old pod's trainer may still checkpoint in its grace period. The launcher
/// does not start the job before that grace period is over (no trainer in two attempts at
/// once), says why while it waits, and `doctor` says so too; `--wait-timeout` does not run
/// meanwhile.
#[test]
fn a_deleted_pod_that_may_still_run_is_waited_for_until_its_grace_period_ends() {
    let cluster = Cluster::new();
    let job = "rep";
    for (name, ip) in [("rep-old", "127.0.0.62"), ("rep-new", "127.0.0.63")] {
        let mut pod = job_pod(job, name);
        pod["status"] = json!({"phase": "Running", "podIP": ip});
        cluster.api.put_pod(pod);
    }
    cluster.api.mark_deleting("default", "rep-old", 6);
    let deadline = cluster.api.pod("default", "rep-old").unwrap()["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second();
    let mut env = cluster.env(job, 1);
    env.extend([
        ("POD_IP", "127.0.0.63".to_string()),
        ("POD_NAME", "rep-new".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("PADDLE_LAUNCHER_TRAINER_PORT", free_ports(1).to_string()),
        // Shorter than the hold: the wait timeout does not run while only the deleted pod holds.
        ("PADDLE_LAUNCHER_WAIT_TIMEOUT", "2".to_string()),
    ]);
    let doctor = Launcher::start(
        cluster.dir.path(),
        "doctor",
        &["doctor", "--", "true"],
        &env,
    )
    .wait(LIMIT);
    assert_eq!(doctor.code(), 71, "{}\n{}", doctor.stdout, doctor.stderr);
    assert_contains(
        &doctor.stdout,
        "deleted pods that may still run a trainer until their grace period ends",
    );
    assert_contains(&doctor.stdout, "rep-old (until ");
    let done = Launcher::start(
        cluster.dir.path(),
        "rep-new",
        &["run", "--", "date", "+started at %s"],
        &env,
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "so that no trainer runs in two attempts at once: rep-old",
    );
    let started: i64 = done
        .stdout
        .lines()
        .find_map(|line| line.split("started at ").nth(1))
        .and_then(|at| at.trim().parse().ok())
        .unwrap_or_else(|| panic!("no start time in:\n{}", done.stdout));
    // The kubelet counts the grace from when it saw the deletion, a little after the stamp.
    assert!(
        started >= deadline + 5,
        "the trainer started at {started}, before the old pod's grace period ended at {deadline} (+ 5 s)"
    );
}

/// The children's grace period follows the pod's: read from the pod's spec with the pods
/// (terminationGracePeriodSeconds 11: 11 - 5 s for the launcher's own exit), so that a stop
/// neither cuts the trainer short of what the pod allows nor outlasts it.
#[test]
fn the_childrens_grace_period_is_the_pods_less_the_launchers_own_exit() {
    let cluster = Cluster::new();
    let mut pod = job_pod("grace", "grace-0");
    pod["spec"]["terminationGracePeriodSeconds"] = serde_json::json!(11);
    pod["status"] = serde_json::json!({"phase": "Running", "podIP": "127.0.0.61"});
    cluster.api.put_pod(pod);
    let mut env = cluster.env("grace", 1);
    env.extend([
        ("POD_IP", "127.0.0.61".to_string()),
        ("POD_NAME", "grace-0".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("PADDLE_LAUNCHER_TRAINER_PORT", free_ports(1).to_string()),
    ]);
    let launcher = Launcher::start(
        cluster.dir.path(),
        "grace-0",
        &["run", "--", "sleep", "60"],
        &env,
    );
    launcher.wait_for_output("started trainer-0", LIMIT);
    launcher.signal(nix::sys::signal::Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "the children's grace period: 6 s (this pod's terminationGracePeriodSeconds is 11 s)",
    );
    assert_contains(
        &done.stderr,
        "stopping trainer-0 with SIGTERM (SIGKILL after 6 s)",
    );
}

/// A forward proxy on loopback that serves CONNECT (what a Kubernetes client's proxy speaks)
/// and counts the tunnels it opened.
struct ConnectProxy {
    port: u16,
    tunnels: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ConnectProxy {
    fn start() -> ConnectProxy {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let tunnels = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = tunnels.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let counted = counted.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(client.try_clone().unwrap());
                    let mut first = String::new();
                    reader.read_line(&mut first).unwrap();
                    // The headers, to the empty line.
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                    }
                    let Some(target) = first.strip_prefix("CONNECT ") else {
                        return;
                    };
                    let target = target.split_whitespace().next().unwrap().to_string();
                    let Ok(upstream) = std::net::TcpStream::connect(&target) else {
                        return;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let mut client = client;
                    client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .unwrap();
                    let (mut up_read, mut up_write) = (upstream.try_clone().unwrap(), upstream);
                    let mut client_write = client.try_clone().unwrap();
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut reader, &mut up_write);
                        let _ = up_write.shutdown(std::net::Shutdown::Write);
                    });
                    let _ = std::io::copy(&mut up_read, &mut client_write);
                    let _ = client_write.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        ConnectProxy { port, tunnels }
    }

    fn tunnels(&self) -> usize {
        self.tunnels.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Behind a proxy (a workstation's `plan` or `doctor` with a kubeconfig), the launcher reaches
/// the API through `https_proxy` as kubectl does, and directly where `NO_PROXY` names the
/// server.
#[test]
fn the_api_is_reached_through_the_proxy_unless_no_proxy_names_it() {
    let cluster = Cluster::new();
    let mut pod = job_pod("px", "px-0");
    pod["status"] = json!({"phase": "Running", "podIP": "127.0.0.71"});
    cluster.api.put_pod(pod);
    let proxy = ConnectProxy::start();
    let mut env = cluster.env("px", 1);
    env.extend([
        ("POD_IP", "127.0.0.71".to_string()),
        ("POD_NAME", "px-0".to_string()),
        ("https_proxy", format!("http://127.0.0.1:{}", proxy.port)),
    ]);
    env.extend(["pserver", "train"].map(support::standin_cmd));
    let done = Launcher::start(cluster.dir.path(), "proxied", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(
        proxy.tunnels() > 0,
        "the API was not reached through the proxy"
    );
    let through_the_proxy = proxy.tunnels();
    env.push(("NO_PROXY", "127.0.0.1".to_string()));
    let done = Launcher::start(cluster.dir.path(), "direct", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_eq!(
        proxy.tunnels(),
        through_the_proxy,
        "NO_PROXY names the server"
    );
}
