//! Launchers under the batch systems people already run, unconfigured: no JOB_NAME, no count,
//! no selector. Each pod is labelled, annotated and given the environment exactly as its
//! system does (names from the project's reference `batch-systems.md`, which cites each
//! system's source), with an earlier attempt's pods still present and ranks that differ from
//! IP order.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{assert_contains, free_ports, standin_cmd, trainer_argv, Cluster, Launcher};

const LIMIT: Duration = Duration::from_secs(60);

/// A pod as a controller creates it: `labels`, `annotations`, Running on `ip` (or Pending
/// without one).
fn pod(name: &str, labels: Value, annotations: Value, ip: Option<&str>) -> Value {
    let status = match ip {
        Some(ip) => json!({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}),
        None => json!({"phase": "Pending"}),
    };
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-11-23T10:00:00Z",
                     "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "paddle", "image": "paddle:test"}], "restartPolicy": "Never"},
        "status": status
    })
}

/// The environment of a pod of no particular job: the cluster, the NIC, and nothing naming
/// the job.
fn bare_env(cluster: &Cluster, ip: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "KUBECONFIG",
            cluster.dir.path().join("kubeconfig").display().to_string(),
        ),
        ("CONF_PADDLE_NIC", "lo".to_string()),
        ("POD_IP", ip.to_string()),
    ]
}

fn plan_of(done: &support::Finished) -> Value {
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    serde_json::from_str(&done.stdout).unwrap()
}

fn pod_order(plan: &Value) -> Vec<String> {
    plan["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// A JobSet pod (jobset controller, pkg/controllers/jobset_controller.go, labels and
/// annotations from api/jobset/v1alpha2/jobset_types.go) of child Job `<js>-<rjob>-<job>`,
/// completion index `index` (the Job controller's label and annotation).
fn jobset_pod(
    js: &str,
    rjob: &str,
    job: u32,
    global: u32,
    index: u32,
    attempt: u32,
    ip: Option<&str>,
) -> Value {
    let child = format!("{js}-{rjob}-{job}");
    let marks = json!({
        "jobset.sigs.k8s.io/jobset-name": js,
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
        "jobset.sigs.k8s.io/job-index": job.to_string(),
        "jobset.sigs.k8s.io/job-global-index": global.to_string(),
        "jobset.sigs.k8s.io/global-replicas": "2",
        "jobset.sigs.k8s.io/job-key": format!("key-{child}"),
        "jobset.sigs.k8s.io/restart-attempt": attempt.to_string(),
        "batch.kubernetes.io/job-completion-index": index.to_string(),
    });
    let mut labels = marks.clone();
    labels["batch.kubernetes.io/job-name"] = json!(child);
    labels["job-name"] = json!(child);
    labels["batch.kubernetes.io/controller-uid"] = json!(format!("uid-{child}-{attempt}"));
    let mut p = pod(&format!("{child}-{index}-a{attempt}x"), labels, marks, ip);
    p["metadata"]["creationTimestamp"] = json!(format!("2026-11-23T10:0{attempt}:00Z"));
    p
}

/// A JobSet of one replicated job, 2 Jobs of 2 pods, on its second attempt (restart-attempt 1)
/// while two pods of attempt 0 still run, one of them at an index whose new pod does not exist
/// yet; that new pod is then held by Kueue and admitted late. Every pod runs, with ranks
/// (global job index, completion index) opposite to IP order, and none of attempt 0's IPs.
#[test]
fn a_jobset_runs_unconfigured_with_its_own_ranks() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    let ips = ["127.0.31.14", "127.0.31.13", "127.0.31.12", "127.0.31.11"];
    // Attempt 0, not gone yet: ranks 0 and 2 (job 1, index 0) on other addresses.
    api.put_pod(jobset_pod("js", "workers", 0, 0, 0, 0, Some("127.0.31.21")));
    api.put_pod(jobset_pod("js", "workers", 1, 1, 0, 0, Some("127.0.31.22")));
    for rank in [0, 1, 3u32] {
        let ip = Some(ips[rank as usize]);
        api.put_pod(jobset_pod(
            "js",
            "workers",
            rank / 2,
            rank / 2,
            rank % 2,
            1,
            ip,
        ));
    }
    api.record(
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/js",
        200,
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
               "metadata": {"name": "js", "namespace": "default"},
               "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2,
                   "template": {"spec": {"parallelism": 2, "completions": 2}}}]}})
        .to_string(),
    );
    let port = free_ports(1);
    let start = |rank: usize| {
        let mut env = bare_env(&cluster, ips[rank]);
        env.extend([
            ("CONF_PADDLE_PORT", port.to_string()),
            standin_cmd("pserver"),
            standin_cmd("train"),
            ("PADDLE_LAUNCHER_LINGER", "2".to_string()),
        ]);
        Launcher::start(cluster.dir.path(), &format!("js-{rank}"), &["run"], &env)
    };
    let mut launchers: Vec<(usize, Launcher)> =
        [0, 1, 3].into_iter().map(|r| (r, start(r))).collect();
    launchers[0]
        .1
        .wait_for_output("waiting: 3/4 pods Running", LIMIT);
    // Rank 2's new pod, held by Kueue: its scheduling gate, and the condition the scheduler sets.
    let mut gated = jobset_pod("js", "workers", 1, 1, 0, 1, None);
    gated["spec"]["schedulingGates"] = json!([{"name": "kueue.x-k8s.io/admission"}]);
    gated["status"]["conditions"] =
        json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]);
    api.put_pod(gated);
    launchers[0]
        .1
        .wait_for_output("waiting for admission by kueue.x-k8s.io/admission", LIMIT);
    // Admitted: the gate goes, the pod is scheduled and runs; only then does its launcher start.
    let mut admitted = api.pod("default", "js-workers-1-0-a1x").unwrap();
    admitted["spec"]["schedulingGates"] = json!([]);
    admitted["status"] = json!({"phase": "Running", "podIP": ips[2], "podIPs": [{"ip": ips[2]}]});
    api.put_pod(admitted);
    launchers.push((2, start(2)));

    for (rank, launcher) in launchers {
        let done = launcher.wait(LIMIT);
        assert_eq!(
            done.code(),
            0,
            "rank {rank}:\n{}\n{}",
            done.stdout,
            done.stderr
        );
        let argv = trainer_argv(&done.stdout).expect("the trainer printed its argv");
        assert!(argv.contains(&format!("--trainer_id={rank}")), "{argv:?}");
        assert!(
            argv.contains(&"--num_gradient_servers=4".to_string()),
            "{argv:?}"
        );
        let pservers = format!("--pservers={}", ips.join(","));
        assert!(argv.contains(&pservers), "{argv:?}");
        assert_contains(
            &done.stderr,
            "batch system jobset: JobSet js, replicated job workers",
        );
        assert_contains(&done.stderr, "CONF_PADDLE_GRADIENT_NUM=4 from jobset");
    }
}

/// Volcano's split layout: a `pserver` and a `trainer` task, named by its svc plugin's
/// VC_<TASK>_HOSTS/_NUM and its env plugin's VC_TASK_INDEX; pods carry volcano.sh/* labels
/// and annotations (volcano-sh/apis pkg/apis/batch/v1alpha1/labels.go). A trainer of an
/// earlier job-version still runs.
#[test]
fn a_volcano_job_with_pserver_and_trainer_tasks_plans_from_its_names() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    let volcano_pod = |task: &str, index: u32, version: u32, ip: &str| {
        let labels = json!({"volcano.sh/job-name": "ctr", "volcano.sh/job-namespace": "default",
                            "volcano.sh/queue-name": "default", "volcano.sh/task-spec": task,
                            "volcano.sh/task-index": index.to_string()});
        let annotations = json!({"volcano.sh/job-name": "ctr", "volcano.sh/task-spec": task,
                                 "volcano.sh/task-index": index.to_string(),
                                 "volcano.sh/job-version": version.to_string(),
                                 "volcano.sh/job-retry-count": version.to_string(),
                                 "scheduling.k8s.io/group-name": "ctr"});
        let name = format!("ctr-{task}-{index}");
        let mut p = pod(&name, labels, annotations, Some(ip));
        p["spec"]["hostname"] = json!(name);
        p["spec"]["subdomain"] = json!("ctr");
        p
    };
    // Index order opposite to IP order in both tasks.
    api.put_pod(volcano_pod("pserver", 0, 1, "127.0.32.12"));
    api.put_pod(volcano_pod("pserver", 1, 1, "127.0.32.11"));
    api.put_pod(volcano_pod("trainer", 0, 1, "127.0.32.23"));
    api.put_pod(volcano_pod("trainer", 1, 1, "127.0.32.22"));
    api.put_pod(volcano_pod("trainer", 2, 1, "127.0.32.21"));
    // Of job-version 0: same name scheme, would make four trainers.
    let mut stale = volcano_pod("trainer", 3, 0, "127.0.32.29");
    stale["metadata"]["name"] = json!("ctr-trainer-old");
    api.put_pod(stale);
    let volcano_env = |hostname: &str, index: &str| {
        vec![
            ("VC_TASK_INDEX", index.to_string()),
            ("VK_TASK_INDEX", index.to_string()),
            (
                "VC_PSERVER_HOSTS",
                "ctr-pserver-0.ctr,ctr-pserver-1.ctr".to_string(),
            ),
            ("VC_PSERVER_NUM", "2".to_string()),
            (
                "VC_TRAINER_HOSTS",
                "ctr-trainer-0.ctr,ctr-trainer-1.ctr,ctr-trainer-2.ctr".to_string(),
            ),
            ("VC_TRAINER_NUM", "3".to_string()),
            ("HOSTNAME", hostname.to_string()),
            ("PADDLE_LAUNCHER_PROTOCOL", "fleet".to_string()),
            ("ENTRY", "python train.py".to_string()),
        ]
    };
    let mut env = bare_env(&cluster, "127.0.32.22");
    env.extend(volcano_env("ctr-trainer-1", "1"));
    let done = Launcher::start(cluster.dir.path(), "trainer-1", &["plan"], &env).wait(LIMIT);
    let plan = plan_of(&done);
    assert_eq!(plan["trainer_id"], 1);
    assert_eq!(plan["pserver_id"], Value::Null);
    assert_eq!(plan["num_gradient_servers"], 3);
    assert_eq!(
        plan["pserver_endpoints"],
        json!(["127.0.32.12:7164", "127.0.32.11:7164"])
    );
    assert_eq!(plan["runtime"]["system"], "volcano");
    assert_contains(&done.stderr, "PADDLE_LAUNCHER_ROLE=trainer from volcano");
    let trainers: Vec<String> = pod_order(&plan)
        .into_iter()
        .filter(|n| n.contains("trainer"))
        .collect();
    assert_eq!(
        trainers,
        ["ctr-trainer-0", "ctr-trainer-1", "ctr-trainer-2"]
    );

    let mut env = bare_env(&cluster, "127.0.32.11");
    env.extend(volcano_env("ctr-pserver-1", "1"));
    let plan =
        plan_of(&Launcher::start(cluster.dir.path(), "pserver-1", &["plan"], &env).wait(LIMIT));
    assert_eq!(plan["pserver_id"], 1);
    assert_eq!(plan["trainer_id"], Value::Null);
}

/// A LeaderWorkerSet group (labels and env of api/leaderworkerset/v1/leaderworkerset_types.go):
/// the group is the job, the worker index the rank, the leader the coordinator; another
/// group's pods are not this job's.
#[test]
fn a_leaderworkerset_group_is_one_job_ranked_by_worker_index() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    let lws_pod = |group: u32, worker: u32, ip: &str| {
        let name = if worker == 0 {
            format!("llm-{group}")
        } else {
            format!("llm-{group}-{worker}")
        };
        let labels = json!({"leaderworkerset.sigs.k8s.io/name": "llm",
                            "leaderworkerset.sigs.k8s.io/group-index": group.to_string(),
                            "leaderworkerset.sigs.k8s.io/worker-index": worker.to_string(),
                            "leaderworkerset.sigs.k8s.io/group-key": format!("key{group}")});
        let annotations = json!({"leaderworkerset.sigs.k8s.io/size": "3",
                                 "leaderworkerset.sigs.k8s.io/leader-name": format!("llm-{group}")});
        pod(&name, labels, annotations, Some(ip))
    };
    for worker in 0..3 {
        api.put_pod(lws_pod(1, worker, &format!("127.0.33.{}", 19 - worker)));
        api.put_pod(lws_pod(0, worker, &format!("127.0.33.{}", 29 - worker)));
    }
    let mut env = bare_env(&cluster, "127.0.33.18");
    env.extend([
        ("LWS_LEADER_ADDRESS", "llm-1.llm.default".to_string()),
        ("LWS_GROUP_SIZE", "3".to_string()),
        ("LWS_WORKER_INDEX", "1".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("ENTRY", "python train.py".to_string()),
    ]);
    let plan = plan_of(&Launcher::start(cluster.dir.path(), "lws", &["plan"], &env).wait(LIMIT));
    assert_eq!(plan["job"], "llm-1");
    assert_eq!(plan["trainer_id"], 1);
    assert_eq!(pod_order(&plan), ["llm-1", "llm-1-1", "llm-1-2"]);
    // doctor says what it read, and from where.
    let done = Launcher::start(cluster.dir.path(), "lws-doctor", &["doctor"], &env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stdout, "batch system lws: LeaderWorkerSet llm group 1 of 3 pods (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE)");
    assert_contains(&done.stdout, "CONF_PADDLE_GRADIENT_NUM=3 from lws");
}

/// A Kubeflow PaddleJob's workers (labels of the training-operator's
/// pkg/apis/kubeflow.org/v1/common_types.go, env of pkg/controller.v1/paddlepaddle/envvar.go):
/// found by this pod's own labels, which it reads by its IP.
#[test]
fn a_kubeflow_paddlejob_is_found_from_this_pods_labels() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    for index in 0..3u32 {
        let labels = json!({"training.kubeflow.org/job-name": "pj",
                            "training.kubeflow.org/operator-name": "paddlejob-controller",
                            "training.kubeflow.org/replica-type": "worker",
                            "training.kubeflow.org/replica-index": index.to_string()});
        let ip = format!("127.0.34.{}", 19 - index);
        api.put_pod(pod(
            &format!("pj-worker-{index}"),
            labels,
            json!({}),
            Some(&ip),
        ));
    }
    let mut env = bare_env(&cluster, "127.0.34.19");
    env.extend([
        ("PADDLE_MASTER", "127.0.34.19:36543".to_string()),
        ("PADDLE_NNODES", "3".to_string()),
        ("PADDLE_JOB_ID", "pj".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("ENTRY", "python train.py".to_string()),
    ]);
    let plan = plan_of(&Launcher::start(cluster.dir.path(), "kf", &["plan"], &env).wait(LIMIT));
    assert_eq!(plan["job"], "pj");
    assert_eq!(plan["trainer_id"], 0);
    assert_eq!(
        pod_order(&plan),
        ["pj-worker-0", "pj-worker-1", "pj-worker-2"]
    );
    // The own-pod lookup was one field-selected list, not a list of every pod.
    assert!(
        api.requests()
            .iter()
            .any(|r| r.contains("fieldSelector=status.podIP")),
        "{:#?}",
        api.requests()
    );
}

/// Asking for a system the pod does not show is a one-line error naming what was looked for,
/// and a JobSet the launcher may not read says which permission to grant.
#[test]
fn a_wrong_runtime_or_an_unreadable_jobset_is_named() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    api.put_pod(pod(
        "plain-0",
        json!({"job-name": "plain"}),
        json!({}),
        Some("127.0.35.2"),
    ));
    let mut env = bare_env(&cluster, "127.0.35.2");
    env.push(("PADDLE_LAUNCHER_RUNTIME", "volcano".to_string()));
    let done = Launcher::start(cluster.dir.path(), "wrong", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "invalid PADDLE_LAUNCHER_RUNTIME (--runtime): \"volcano\"",
    );
    assert_contains(&done.stderr, "VC_TASK_INDEX or label volcano.sh/job-name");

    api.put_pod(jobset_pod("secret", "w", 0, 0, 0, 0, Some("127.0.35.3")));
    api.record(
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/secret",
        403,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
               "message": "jobsets.jobset.x-k8s.io \"secret\" is forbidden: User \"system:serviceaccount:default:default\" cannot get resource \"jobsets\""})
        .to_string(),
    );
    let env = bare_env(&cluster, "127.0.35.3");
    let done = Launcher::start(cluster.dir.path(), "forbidden", &["plan"], &env).wait(LIMIT);
    assert_eq!(done.code(), 72, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "grant `get` on jobsets.jobset.x-k8s.io, or set CONF_PADDLE_GRADIENT_NUM",
    );
}

/// A JobSet restarted whole twice (every pod of attempt 2, none of the earlier ones left): the
/// fresh launchers agree on restart count 2, not 0, so a training program that resumes from
/// its checkpoint on a restart does so.
#[test]
fn a_jobset_restarted_whole_gives_its_attempt_as_the_restart_count() {
    let cluster = Cluster::new();
    let api = &cluster.api;
    let ips = ["127.0.32.11", "127.0.32.12"];
    for rank in 0..2u32 {
        api.put_pod(jobset_pod(
            "jr",
            "workers",
            rank,
            rank,
            0,
            2,
            Some(ips[rank as usize]),
        ));
    }
    api.record(
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/jr",
        200,
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
               "metadata": {"name": "jr", "namespace": "default"},
               "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2,
                   "template": {"spec": {"parallelism": 1, "completions": 1}}}]}})
        .to_string(),
    );
    let (trainer_port, control_port) = (free_ports(1), free_ports(1));
    let launchers: Vec<Launcher> = ips
        .iter()
        .enumerate()
        .map(|(rank, ip)| {
            let mut env = bare_env(&cluster, ip);
            env.extend([
                ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
                ("PADDLE_LAUNCHER_TRAINER_PORT", trainer_port.to_string()),
                ("PADDLE_LAUNCHER_CONTROL_PORT", control_port.to_string()),
                (
                    "PADDLE_LAUNCHER_JOB_SECRET",
                    "batch-systems-test-secret-0123456789abcdef".to_string(),
                ),
                ("PADDLE_LAUNCHER_MAX_RESTARTS", "3".to_string()),
            ]);
            Launcher::start(
                cluster.dir.path(),
                &format!("jr-{rank}"),
                &[
                    "run",
                    "--",
                    "sh",
                    "-c",
                    "echo rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT",
                ],
                &env,
            )
        })
        .collect();
    for (rank, launcher) in launchers.into_iter().enumerate() {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
        assert_contains(&done.stdout, &format!("rank={rank} count=2"));
        assert_contains(
            &done.stderr,
            "the batch system has restarted the job 2 times: the restart count starts at 2",
        );
    }
}
