//! The launcher against a real Kubernetes control plane (docs/development.md, "A real control
//! plane"): etcd, kube-apiserver with RBAC, the Job, garbage-collector and node lifecycle
//! controllers, kube-scheduler, built from the official Go modules by tests/cluster/build.sh.
//! The Jobs' pods are created by the real Job controller and bound by the real scheduler; the
//! node agent (tests/support/node_agent.rs, the one stand-in) runs them as processes, as a
//! kubelet would, and the launchers authenticate with their ServiceAccount's token.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::control_plane::{control_plane, ControlPlane};
use support::node_agent::{agent, NodeAgent};
use support::real_jobs::{create, documents, generated, get, tolerate_pool};
use support::{assert_contains, paddle_python};

/// What a whole job on the real control plane may take on a loaded 2-core machine (a guard
/// against hangs, not a timing assertion).
const JOB_LIMIT: Duration = Duration::from_secs(300);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The first fenced block of `file` (relative to the repository) that starts with `starts`.
fn doc_block(file: &str, lang: &str, starts: &str) -> String {
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let fence = format!("```{lang}\n");
    text.split(&fence)
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .find(|b| b.starts_with(starts))
        .unwrap_or_else(|| panic!("no {lang} block starting {starts:?} in {file}"))
        .to_string()
}

/// The first condition of the Job that is True among `types`: (type, reason).
fn job_condition(
    plane: &ControlPlane,
    namespace: &str,
    job: &str,
    types: &[&str],
) -> Option<(String, String)> {
    let job = get(plane, namespace, &["job", job])?;
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["status"] == "True" && types.contains(&c["type"].as_str().unwrap_or_default()))
        .map(|c| {
            (
                c["type"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// Waits until the Job is Complete or Failed: (type, reason). Times out with every pod's
/// output, the Job and the agent's errors.
fn wait_job_end(
    plane: &ControlPlane,
    agent: &NodeAgent,
    namespace: &str,
    job: &str,
) -> (String, String) {
    wait_job_condition(plane, agent, namespace, job, &["Complete", "Failed"])
}

/// Waits until one of the Job's conditions `types` is True: (type, reason).
fn wait_job_condition(
    plane: &ControlPlane,
    agent: &NodeAgent,
    namespace: &str,
    job: &str,
    types: &[&str],
) -> (String, String) {
    let what = || {
        format!(
            "job {namespace}/{job} not {types:?}\njob: {:#}\npods: {}\nagent: {:?}\n{}",
            get(plane, namespace, &["job", job]).unwrap_or_default(),
            plane
                .kubectl(&["get", "pods", "-n", namespace, "-o", "wide"])
                .1,
            agent.errors(),
            agent.all_logs(namespace)
        )
    };
    wait_for(what, || job_condition(plane, namespace, job, types))
}

/// The Job `job` of `manifest` with `options`, its program `trains_until(done)`, pinned to
/// `nodes` nodes of its own (each taking `max_pods` pods: the pool is the namespace), created;
/// the nodes' names.
fn create_pinned(
    (plane, agent, namespace, job): (&ControlPlane, &NodeAgent, &str, &str),
    (nodes, max_pods): (usize, u32),
    options: &[&str],
    done: &str,
) -> Vec<String> {
    let pool = namespace;
    let names: Vec<String> = (0..nodes).map(|i| format!("{pool}-node-{i}")).collect();
    for node in &names {
        agent.add_pool_node(node, pool, max_pods);
    }
    let selector = format!("{}={pool}", support::node_agent::POOL);
    let mut options = options.to_vec();
    options.extend(["--node-selector", &selector]);
    let program = trains_until(&test_dir(plane, namespace), done);
    let mut objects = generated(plane, namespace, job, &options, &program);
    tolerate_pool(&mut objects, pool);
    create(plane, namespace, &objects);
    names
}

/// A directory of the test's own for its programs, named after its namespace.
fn test_dir(plane: &ControlPlane, namespace: &str) -> PathBuf {
    let dir = plane.dir.join(namespace);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Polls `check` until it answers, for JOB_LIMIT at most (a guard against hangs, not a timing
/// assertion); a timeout fails with `what` (computed then: every pod's output, say).
fn wait_for<T>(what: impl Fn() -> String, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + JOB_LIMIT;
    loop {
        if let Some(answer) = check() {
            return answer;
        }
        assert!(Instant::now() < deadline, "after {JOB_LIMIT:?}: {}", what());
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The job's pods, as the API has them.
fn pods(plane: &ControlPlane, namespace: &str, job: &str) -> Vec<Value> {
    let list = get(
        plane,
        namespace,
        &["pods", "-l", &format!("batch.kubernetes.io/job-name={job}")],
    )
    .unwrap();
    list["items"].as_array().unwrap().clone()
}

/// The docs' RBAC (docs/manifests-and-rbac.md#rbac) for `namespace`, as the docs say to apply it.
fn docs_rbac(namespace: &str) -> Vec<Value> {
    let yaml = doc_block(
        "docs/manifests-and-rbac.md",
        "yaml",
        "apiVersion: v1\nkind: ServiceAccount",
    );
    documents(&yaml.replace("team-a", namespace))
}

/// Every Job, RBAC object and custom resource of `k8s-examples/` is accepted by the real API
/// server (a server-side dry run: admission and validation included), JobSet's CRD and webhooks
/// from its module (its controller running), Trainer v2's and Volcano's CRDs from
/// tests/fixtures/crds (Volcano's objects are checked by its CRD only: a working Volcano needs
/// its scheduler and admission webhooks, not built here).
#[test]
fn every_example_is_accepted_by_the_real_api_server() {
    let plane = control_plane();
    // JobSet's CRD and webhooks from its module, as its controller runs with them.
    support::control_plane::jobset_controller();
    let crds = repo().join("tests/fixtures/crds");
    for file in std::fs::read_dir(&crds).unwrap() {
        let path = file.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".yaml") && !name.starts_with("jobset") {
            plane.register_crd(&path);
        }
    }
    let mut checked = 0;
    for file in std::fs::read_dir(repo().join("k8s-examples")).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for namespace in namespaces_of(&text) {
            let _ = plane.kubectl(&["create", "namespace", &namespace]);
        }
        let (code, out, err) = plane.kubectl(&[
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            path.to_str().unwrap(),
        ]);
        assert_eq!(
            code,
            0,
            "{} refused by the real API server:\n{err}{out}",
            path.display()
        );
        checked += out.lines().count();
    }
    // One line per object: a file the server took as empty would pass the loop unnoticed.
    assert!(checked >= 30, "only {checked} objects checked");
}

fn namespaces_of(yaml: &str) -> Vec<String> {
    let mut found: Vec<String> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("namespace: "))
        .map(|n| n.trim().to_string())
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The README's Job, its RBAC from the docs, in a namespace of its own: the real Job controller
/// creates its 4 Indexed pods, the launchers (as the ServiceAccount `paddle-launcher`) find each
/// other through the real API and train with real PaddlePaddle over gloo, and the Job completes.
/// What differs from a cluster: the image's program is this repository's example, given an
/// output directory.
#[test]
fn the_readmes_job_runs_to_complete_under_the_real_job_controller() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("readme");
    create(plane, &namespace, &docs_rbac(&namespace));
    let mut job = documents(&doc_block(
        "README.md",
        "yaml",
        "apiVersion: batch/v1\nkind: Job",
    ))
    .remove(0);
    let out = plane.dir.join(&namespace);
    std::fs::create_dir_all(&out).unwrap();
    let container = &mut job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["args"],
        json!(["run", "--", "python", "/workspace/train.py"])
    );
    let train = repo().join("examples/collective/train.py");
    container["args"] = json!(["run", "--", paddle_python(), train, out]);
    create(plane, &namespace, &[job]);

    let (end, reason) = wait_job_end(plane, agent, &namespace, "dp-job");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    let pods = pods(plane, &namespace, "dp-job");
    assert_eq!(pods.len(), 4, "{pods:#?}");
    for pod in &pods {
        // Created by the Job controller, not by the test.
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Job");
        assert_eq!(pod["status"]["phase"], "Succeeded", "{pod:#}");
    }
    for rank in 0..4 {
        let result = out.join(format!("result-{rank}.json"));
        assert!(
            result.exists(),
            "no {} after the job:\n{logs}",
            result.display()
        );
    }
    // The launchers found each other through the real API, as the ServiceAccount.
    assert_contains(&logs, support::DISCOVERS);
}

/// Waits until the JobSet is Completed or Failed: that condition.
fn wait_jobset_end(plane: &ControlPlane, agent: &NodeAgent, namespace: &str, name: &str) -> Value {
    let what = || {
        format!(
            "jobset not ended: {:#}\n{}\n{}",
            get(plane, namespace, &["jobset", name]).unwrap_or_default(),
            plane.kubectl(&["get", "all", "-n", namespace]).1,
            agent.all_logs(namespace)
        )
    };
    wait_for(what, || {
        let jobset = get(plane, namespace, &["jobset", name])?;
        jobset["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["status"] == "True" && (c["type"] == "Completed" || c["type"] == "Failed"))
            .cloned()
    })
}

/// A pod's one container's environment entry `name` set to `value` (added when missing).
fn set_env(objects: &mut [Value], name: &str, value: &str) {
    let mut pods: Vec<&mut Value> = Vec::new();
    for object in objects.iter_mut() {
        match object["kind"].as_str() {
            Some("Job") => pods.push(&mut object["spec"]["template"]),
            Some("JobSet") => {
                for replicated in object["spec"]["replicatedJobs"].as_array_mut().unwrap() {
                    pods.push(&mut replicated["template"]["spec"]["template"]);
                }
            }
            _ => {}
        }
    }
    for pod in pods {
        let env = pod["spec"]["containers"][0]["env"].as_array_mut().unwrap();
        env.retain(|e| e["name"] != name);
        env.push(json!({"name": name, "value": value}));
    }
}

/// `manifest`'s objects for a 2-pod `job` with restarts (and `extra` options), created with a
/// value every launcher refuses (`PADDLE_LAUNCHER_HANG_TIMEOUT=soon`).
fn create_badly_configured(plane: &ControlPlane, namespace: &str, job: &str, extra: &[&str]) {
    let program = vec!["/bin/true".to_string()];
    let mut options = vec!["--trainers", "2", "--max-restarts", "2"];
    options.extend(extra);
    let mut objects = generated(plane, namespace, job, &options, &program);
    set_env(&mut objects, "PADDLE_LAUNCHER_HANG_TIMEOUT", "soon");
    create(plane, namespace, &objects);
}

/// A value every launcher refuses (status 2): the generated podFailurePolicy fails the Job at
/// once (reason PodFailurePolicy, no pod retried), and the pod's termination message, which
/// the docs tell users to read with kubectl, names the variable and the value.
#[test]
fn a_bad_configuration_fails_the_job_at_once_through_the_generated_policy() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("badconf");
    create_badly_configured(plane, &namespace, "bad", &[]);

    let (end, reason) = wait_job_end(plane, agent, &namespace, "bad");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Failed", "PodFailurePolicy"),
        "{logs}"
    );
    let pods = pods(plane, &namespace, "bad");
    assert!(pods.len() <= 2, "a pod was retried: {pods:#?}");
    let failed = pods
        .iter()
        .find(|p| p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2)
        .unwrap_or_else(|| panic!("no pod ended 2: {pods:#?}\n{logs}"));
    let name = failed["metadata"]["name"].as_str().unwrap();
    let message = plane.kubectl_must(&[
        "get",
        "pod",
        name,
        "-n",
        &namespace,
        "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.message}",
    ]);
    assert_contains(&message, "PADDLE_LAUNCHER_HANG_TIMEOUT");
    assert_contains(&message, "soon");
}

/// A program for the pods: rank `failing` exits 3 in the job's first run; every rank then meets
/// its peers as a collective program does (standins/collective).
fn failing_once(dir: &std::path::Path, failing: u32) -> Vec<String> {
    let script = dir.join("fail_once.py");
    let standin = repo().join("standins/collective");
    std::fs::write(
        &script,
        format!(
            "import os, sys\n\
             if os.environ['PADDLE_TRAINER_ID'] == '{failing}' and \
             os.environ.get('PADDLE_LAUNCHER_RESTART_COUNT', '0') == '0':\n    \
             print('failing on purpose', flush=True)\n    sys.exit(3)\n\
             os.execv(sys.executable, [sys.executable, '{}'])\n",
            standin.display()
        ),
    )
    .unwrap();
    vec!["python3".to_string(), script.display().to_string()]
}

/// A program for the pods: about 20 s of steps of their own work (0.1 s each, 200 of them;
/// rank `slow`'s 0.25 s, 80), each step's time in the progress file's line as
/// docs/observability.md shows; no exchange between ranks. (A rank that has finished is no
/// longer judged: they end together.)
fn one_rank_slow(dir: &std::path::Path, slow: u32) -> Vec<String> {
    let script = dir.join("one_slow.py");
    std::fs::write(
        &script,
        format!(
            "import os, time\n\
             slow = os.environ['PADDLE_TRAINER_ID'] == '{slow}'\n\
             own, steps = (0.25, 80) if slow else (0.1, 200)\n\
             path = os.environ['PADDLE_LAUNCHER_PROGRESS_FILE']\n\
             for step in range(1, steps + 1):\n    \
             began = time.monotonic()\n    time.sleep(own)\n    \
             compute_ms = (time.monotonic() - began) * 1000\n    \
             open(path, 'w').write(f'{{step}} compute_ms={{compute_ms:.0f}}\\n')\n"
        ),
    )
    .unwrap();
    vec!["python3".to_string(), script.display().to_string()]
}

/// The words of a documented shell line, its single quotes taken off (no shell runs it).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let (mut word, mut quoted) = (String::new(), false);
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                words.extend(Some(std::mem::take(&mut word)).filter(|w| !w.is_empty()))
            }
            c => word.push(c),
        }
    }
    words.extend(Some(word).filter(|w| !w.is_empty()));
    words
}

/// One rank slower than the other in a Job from `manifest --max-restarts 1` (2 s straggler
/// windows): the coordinator names it in every pod's log and in a `Straggler` event on the Job
/// (accepted by the real API, the generated Role allowing it), keeps the job's progress on the
/// Job with a real merge patch, which docs/observability.md's `kubectl get job -o
/// custom-columns` line shows, and the job completes without a restart.
#[test]
fn a_slow_rank_is_named_on_the_job_and_its_progress_kept_there() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("strag");
    let dir = test_dir(plane, &namespace);
    let options = ["--trainers", "2", "--max-restarts", "1"];
    let mut objects = generated(
        plane,
        &namespace,
        "strag",
        &options,
        &one_rank_slow(&dir, 1),
    );
    set_env(&mut objects, "PADDLE_LAUNCHER_STRAGGLER_WINDOW", "2");
    set_env(&mut objects, "PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "2");
    create(plane, &namespace, &objects);

    let (end, reason) = wait_job_end(plane, agent, &namespace, "strag");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    for pod in pods(plane, &namespace, "strag") {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let log = agent.logs(&namespace, name);
        assert!(
            log.contains("straggler: rank 1 (pod strag-"),
            "{name} names no straggler; the job's logs:\n{logs}"
        );
        assert!(!log.contains("straggler: rank 0"), "{log}");
        assert!(!log.contains("restarting the job"), "{log}");
    }
    let ours = launcher_events(plane, &namespace);
    assert!(
        ours.contains(&("Job".to_string(), "Straggler".to_string())),
        "no Straggler event: {ours:?}"
    );
    let described = plane.kubectl_must(&["describe", "job", "-n", &namespace, "strag"]);
    assert_contains(&described, "straggler: rank 1 (pod strag-");
    let documented = doc_block("docs/observability.md", "sh", "kubectl get job");
    let line = documented.lines().next().unwrap();
    let line = line.replace("llm", "strag").replace("team-a", &namespace);
    let args = words(&line);
    assert_eq!(args[..3], ["kubectl", "get", "job"], "{line}");
    let shown = plane.kubectl_must(&args[1..].iter().map(String::as_str).collect::<Vec<_>>());
    let row = shown.lines().nth(1).unwrap_or_default();
    assert!(row.starts_with("strag "), "{shown}");
    assert_contains(row, "ranks reporting, restarts 0 of 1");
}

/// A trainer failing once in a Job from `manifest --max-restarts 2`: the launchers restart the
/// job in place (the same pods, no container restarted, the Job controller's backoff untouched),
/// the coordinator records the restart on the Job with a real patch, and the Job completes.
#[test]
fn a_trainer_failure_is_restarted_in_place_and_the_job_completes() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("inplace");
    let dir = test_dir(plane, &namespace);
    let objects = generated(
        plane,
        &namespace,
        "inplace",
        &["--trainers", "2", "--max-restarts", "2"],
        &failing_once(&dir, 1),
    );
    create(plane, &namespace, &objects);

    let (end, reason) = wait_job_end(plane, agent, &namespace, "inplace");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    assert_contains(&logs, "failing on purpose");
    assert_contains(&logs, "restarting the job (restart 1 of 2)");
    let pods = pods(plane, &namespace, "inplace");
    assert_eq!(pods.len(), 2, "a pod was replaced: {pods:#?}");
    for pod in &pods {
        assert_eq!(
            pod["status"]["containerStatuses"][0]["restartCount"], 0,
            "{pod:#}"
        );
    }
    let job = get(plane, &namespace, &["job", "inplace"]).unwrap();
    assert_eq!(job["status"]["failed"].as_u64().unwrap_or(0), 0, "{job:#}");
    assert_eq!(
        job["metadata"]["annotations"]["paddle-launcher.paddlepaddle.org/restart-count"], "1",
        "{job:#}"
    );
    // The job's story as events on its Job, accepted by the real API and listed where
    // docs/troubleshooting.md says: `kubectl describe job`.
    let ours = launcher_events(plane, &namespace);
    for reason in ["Started", "Restarting", "Succeeded"] {
        assert!(
            ours.contains(&("Job".to_string(), reason.to_string())),
            "no {reason}: {ours:?}"
        );
    }
    let described = plane.kubectl_must(&["describe", "job", "-n", &namespace, "inplace"]);
    for line in ["Restarting", "restart 1 of 2", "paddle-launcher"] {
        assert_contains(&described, line);
    }
}

/// A program for the pods: each run prints its epoch (PADDLE_LAUNCHER_RESTART_COUNT) and world
/// size (PADDLE_TRAINERS_NUM), then trains (never ends) until `done` (a Python condition on
/// `epoch` and `world`) holds; then it meets its peers and ends, as standins/collective does.
fn trains_until(dir: &std::path::Path, done: &str) -> Vec<String> {
    let script = dir.join(format!("until-{}.py", support::control_plane::unique()));
    let standin = repo().join("standins/collective");
    std::fs::write(
        &script,
        format!(
            "import os, sys, time\n\
             epoch = int(os.environ.get('PADDLE_LAUNCHER_RESTART_COUNT', '0'))\n\
             world = int(os.environ['PADDLE_TRAINERS_NUM'])\n\
             print(f'epoch {{epoch}} world {{world}}', flush=True)\n\
             if not ({done}):\n    \
             print('training', flush=True)\n    time.sleep(3600)\n\
             os.execv(sys.executable, [sys.executable, '{}'])\n",
            standin.display()
        ),
    )
    .unwrap();
    vec!["python3".to_string(), script.display().to_string()]
}

/// Waits until every pod of the job runs its program (the line it prints), the pods' names.
fn wait_training(
    plane: &ControlPlane,
    agent: &NodeAgent,
    namespace: &str,
    job: &str,
    count: usize,
) -> Vec<String> {
    let what = || format!("not {count} pods training:\n{}", agent.all_logs(namespace));
    wait_for(what, || {
        let mut names: Vec<String> = pods(plane, namespace, job)
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        let training = names
            .iter()
            .filter(|n| agent.logs(namespace, n).contains("training"))
            .count();
        names.sort();
        (names.len() == count && training == count).then_some(names)
    })
}

/// One pod of a training job evicted through the real Eviction API: the API server adds the
/// DisruptionTarget condition, the generated podFailurePolicy ignores the pod (the Job's backoff
/// untouched), the Job controller creates its replacement, the launchers restart the job in
/// place with it (a preemption: no restart spent), and the Job completes.
#[test]
fn an_evicted_pod_is_replaced_and_the_job_restarts_in_place() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("evict");
    let dir = test_dir(plane, &namespace);
    let objects = generated(
        plane,
        &namespace,
        "evict",
        &["--trainers", "2", "--max-restarts", "1"],
        &trains_until(&dir, "epoch >= 1"),
    );
    create(plane, &namespace, &objects);
    let names = wait_training(plane, agent, &namespace, "evict", 2);

    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": names[1], "namespace": namespace}});
    let file = dir.join("eviction.json");
    std::fs::write(&file, eviction.to_string()).unwrap();
    plane.kubectl_must(&[
        "create",
        "--raw",
        &format!("/api/v1/namespaces/{namespace}/pods/{}/eviction", names[1]),
        "-f",
        file.to_str().unwrap(),
    ]);

    let (end, reason) = wait_job_end(plane, agent, &namespace, "evict");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    assert_contains(&logs, "preempted (SIGTERM while training)");
    let job = get(plane, &namespace, &["job", "evict"]).unwrap();
    // The evicted pod is not counted against the backoff limit: the rule ignored it.
    assert_eq!(job["status"]["failed"].as_u64().unwrap_or(0), 0, "{job:#}");
    assert_eq!(job["status"]["succeeded"], 2, "{job:#}");
    assert_eq!(
        job["metadata"]["annotations"]["paddle-launcher.paddlepaddle.org/preemptions"], "1",
        "{job:#}"
    );
}

/// One pod of a training job deleted (as a node's loss is, once Kubernetes gives up on it): its
/// replacement is created by the real Job controller, and the launchers restart in place with it.
#[test]
fn a_deleted_pod_is_replaced_by_the_job_controller_and_the_job_restarts_in_place() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("deleted");
    let dir = test_dir(plane, &namespace);
    let objects = generated(
        plane,
        &namespace,
        "deleted",
        &["--trainers", "3", "--max-restarts", "1"],
        &trains_until(&dir, "epoch >= 1"),
    );
    create(plane, &namespace, &objects);
    let names = wait_training(plane, agent, &namespace, "deleted", 3);
    plane.kubectl_must(&["delete", "pod", "-n", &namespace, &names[2], "--wait=false"]);

    let (end, reason) = wait_job_end(plane, agent, &namespace, "deleted");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    let pods = pods(plane, &namespace, "deleted");
    let now: Vec<&str> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(
        !now.contains(&names[2].as_str()),
        "the deleted pod is back: {now:?}"
    );
    assert_eq!(pods.len(), 3, "{now:?}");
    let job = get(plane, &namespace, &["job", "deleted"]).unwrap();
    assert_eq!(job["status"]["succeeded"], 3, "{job:#}");
}

/// Issue 52: `kubectl delete pod` (no eviction, so no DisruptionTarget condition) more often
/// than the Job's `backoffLimit` allows: each deleted pod's launcher ends 83, a free
/// preemption, which the generated podFailurePolicy ignores as the launchers do, and the Job
/// completes with no failure counted (it ended Failed/BackoffLimitExceeded at the second
/// delete). The last two deletes give 5 s of the pod's 30 (`--grace-period=5`): the launcher
/// cuts what its stop takes to fit — the checkpoint window of a trainer that handles the
/// signal, the children's stop of one that does not (its window closes at once) — and ends
/// before the node's SIGKILL, saying so (it was killed, 137, its termination message unwritten).
#[test]
fn plain_deletes_beyond_the_backoff_limit_are_free_and_a_short_grace_is_kept() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("deletes");
    let dir = test_dir(plane, &namespace);
    let objects = generated(
        plane,
        &namespace,
        "dels",
        &["--trainers", "2", "--max-restarts", "1"],
        &checkpointing_until(&dir, "epoch >= 4", "epoch != 3"),
    );
    create(plane, &namespace, &objects);
    let mut deleted: Vec<String> = Vec::new();
    for round in 0..4 {
        // Both pods of this epoch train, the deleted ones gone.
        let what = || {
            format!(
                "epoch {round} not training:\n{}",
                agent.all_logs(&namespace)
            )
        };
        let names = wait_for(what, || {
            let mut names: Vec<String> = pods(plane, &namespace, "dels")
                .iter()
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                .collect();
            names.sort();
            let line = format!("epoch {round} world 2");
            let training = names
                .iter()
                .all(|n| !deleted.contains(n) && agent.logs(&namespace, n).contains(&line));
            (names.len() == 2 && training).then_some(names)
        });
        let victim = names.last().unwrap().clone();
        let mut delete = vec!["delete", "pod", "-n", &namespace, &victim, "--wait=false"];
        if round >= 2 {
            delete.push("--grace-period=5");
        }
        plane.kubectl_must(&delete);
        deleted.push(victim);
    }

    let (end, reason) = wait_job_end(plane, agent, &namespace, "dels");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    let job = get(plane, &namespace, &["job", "dels"]).unwrap();
    let failed = job["status"]["failed"].as_u64().unwrap_or(0);
    assert_eq!(failed, 0, "{logs}\n{job:#}");
    assert_eq!(job["status"]["succeeded"], 2, "{job:#}");
    for victim in &deleted {
        let log = agent.logs(&namespace, victim);
        assert_contains(&log, "exiting with status 83: received SIGTERM");
        assert_contains(&log, "a free preemption: exit 83");
    }
    // Seen before the SIGTERM or a moment after it (the API tells both the node and the
    // launcher's watch): either way the stop is cut, and the launcher's own exit line says it
    // ended before the kill.
    for short in &deleted[2..] {
        let log = agent.logs(&namespace, short);
        assert_contains(
            &log,
            "(metadata.deletionGracePeriodSeconds: 5 s), less than its own 30 s",
        );
    }
    assert_contains(&agent.logs(&namespace, &deleted[3]), "does not handle");
}

/// A program for the pods that, in the epochs where `handles` holds, notes the checkpoint
/// signal (and goes on), printing "training" until `done` holds, as `trains_until`.
fn checkpointing_until(dir: &std::path::Path, done: &str, handles: &str) -> Vec<String> {
    let mut program = trains_until(dir, done);
    let script = PathBuf::from(&program[1]);
    let text = std::fs::read_to_string(&script).unwrap();
    let handler = format!(
        "import os, signal\nepoch = int(os.environ.get('PADDLE_LAUNCHER_RESTART_COUNT', '0'))\nif {handles}:\n    signal.signal(signal.SIGUSR1, lambda *_: None)\n"
    );
    std::fs::write(&script, format!("{handler}{text}")).unwrap();
    program[1] = script.display().to_string();
    program
}

/// `manifest --runtime jobset --max-restarts 2` under the real JobSet controller: it creates the
/// child Job and the headless Service, the launchers reach their coordinator by the name the
/// manifest gives (the cluster DNS of the node agent), a trainer failure is
/// restarted in place, and the JobSet completes.
#[test]
fn a_generated_jobset_restarts_in_place_and_completes_under_the_real_jobset_controller() {
    let (plane, agent) = (control_plane(), agent());
    support::control_plane::jobset_controller();
    let namespace = plane.namespace("jobset");
    let dir = test_dir(plane, &namespace);
    let objects = generated(
        plane,
        &namespace,
        "js",
        &[
            "--runtime",
            "jobset",
            "--trainers",
            "2",
            "--max-restarts",
            "2",
        ],
        &failing_once(&dir, 0),
    );
    create(plane, &namespace, &objects);

    let completed = wait_jobset_end(plane, agent, &namespace, "js");
    let logs = agent.all_logs(&namespace);
    assert_eq!(completed["type"], "Completed", "{completed:#}\n{logs}");
    assert_contains(&logs, "failing on purpose");
    assert_contains(&logs, "restarting the job (restart 1 of 2)");
    let services = plane.kubectl_must(&["get", "services", "-n", &namespace, "-o", "name"]);
    assert!(!services.trim().is_empty(), "no headless Service");
}

/// Not a test of its own: run by `the_control_plane_ends_with_its_test_binary` in a test
/// binary of its own, it starts the control plane and the node agent, prints their pids, and ends.
#[test]
#[ignore = "run by the_control_plane_ends_with_its_test_binary"]
fn start_the_control_plane_and_end() {
    let plane = control_plane();
    let mut pids: Vec<String> = plane
        .components
        .iter()
        .map(|c| c.pid().to_string())
        .collect();
    pids.push(agent().dns.pid().to_string());
    println!("control plane pids: {}", pids.join(" "));
}

/// Every process of the control plane ends with the test binary that started it, however it
/// ends (each is spawned with a death signal, docs/development.md).
#[test]
fn the_control_plane_ends_with_its_test_binary() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "start_the_control_plane_and_end",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pids: Vec<String> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("control plane pids: "))
        .unwrap_or_else(|| panic!("no pids in:\n{stdout}"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(pids.len(), 5, "{pids:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let alive: Vec<&String> = pids
            .iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                    s.rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().next())
                        != Some("Z")
                })
            })
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after the test binary ended: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The events the launchers posted in `namespace`: (kind of the object they are about, reason).
fn launcher_events(plane: &ControlPlane, namespace: &str) -> Vec<(String, String)> {
    let events = get(plane, namespace, &["events"]).unwrap();
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reportingComponent"] == "paddle-launcher")
        .map(|e| {
            let kind = e["involvedObject"]["kind"].as_str().unwrap_or_default();
            (
                kind.to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The generated Role without `verb` on `resource` (the rule dropped when it has no verb left).
fn without_verb(objects: &mut [Value], resource: &str, verb: &str) {
    for role in objects.iter_mut().filter(|o| o["kind"] == "Role") {
        let rules = role["rules"].as_array_mut().unwrap();
        for rule in rules.iter_mut() {
            if rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == resource)
            {
                rule["verbs"].as_array_mut().unwrap().retain(|v| v != verb);
            }
        }
        rules.retain(|r| !r["verbs"].as_array().unwrap().is_empty());
    }
}

/// The launchers authenticate as the generated ServiceAccount, and its Role is exactly enough:
/// with every verb the job runs and records its restart and events; without any one verb, the
/// launcher says so in the documented line (docs/manifests-and-rbac.md#rbac), and a verb whose
/// absence changes nothing would be a verb granted for nothing.
#[test]
fn the_generated_role_is_enough_and_each_verb_is_needed() {
    let (plane, agent) = (control_plane(), agent());
    // (resource, verb, the Job's end, the launcher's line without it). Without `watch` a launcher
    // that must wait for its peers stops at once; one that found them all Running at its first
    // look trains on without the API's word of a lost peer and says so: which one depends on
    // how fast the pods start (docs/manifests-and-rbac.md#rbac).
    let cases: [(&str, &str, &str, &str); 6] = [
        ("pods", "list", "Failed", "exiting with status 72: the Kubernetes API refused to list/watch pods: 403 pods is forbidden: User \"system:serviceaccount:"),
        ("pods", "watch", "either", "cannot watch resource \"pods\""),
        ("pods", "get", "Complete", "the API refused to get this pod"),
        ("events", "create", "Complete", "Kubernetes events: the API refused to create them"),
        ("jobs", "get", "Complete", "the API refused to get Job no-get-jobs in namespace"),
        ("jobs", "patch", "Complete", "the API refused to patch Job no-patch-jobs in namespace"),
    ];
    let mut runs = Vec::new();
    for (resource, verb, _, _) in cases {
        let namespace = plane.namespace(&format!("rbac-{verb}-{resource}"));
        let dir = plane.dir.join(&namespace);
        std::fs::create_dir_all(&dir).unwrap();
        // A job name of its own: the cluster DNS's short names are shared by all namespaces.
        let job = format!("no-{verb}-{resource}");
        let mut objects = generated(
            plane,
            &namespace,
            &job,
            &["--trainers", "2", "--max-restarts", "1"],
            &failing_once(&dir, 1),
        );
        without_verb(&mut objects, resource, verb);
        create(plane, &namespace, &objects);
        runs.push((namespace, job));
    }
    for ((resource, verb, ends, line), (namespace, job)) in cases.iter().zip(&runs) {
        let (end, reason) = wait_job_end(plane, agent, namespace, job);
        let logs = agent.all_logs(namespace);
        let what = format!("without {verb} on {resource}: {end} ({reason})");
        assert_contains(&logs, line);
        match *ends {
            "Failed" => assert_eq!(reason, "PodFailurePolicy", "{what}\n{logs}"),
            "Complete" => assert_eq!(end, "Complete", "{what}\n{logs}"),
            _ if end == "Complete" => {
                assert_contains(&logs, "no longer allowed to watch the peers")
            }
            _ => assert_contains(&logs, "exiting with status 72"),
        }
    }
    // Without `get` on pods the events are the pods' (not listed by `kubectl describe job`).
    let (namespace, _) = &runs[2];
    let ours = launcher_events(plane, namespace);
    assert!(
        !ours.is_empty() && ours.iter().all(|(kind, _)| kind == "Pod"),
        "{ours:?}"
    );
}

/// Waits until some pod's output of `namespace` has `line`.
fn wait_line(agent: &NodeAgent, namespace: &str, line: &str) {
    let what = || format!("no {line:?}:\n{}", agent.all_logs(namespace));
    wait_for(what, || {
        agent.all_logs(namespace).contains(line).then_some(())
    })
}

/// A job that cannot start says why on every pod (issue 51): 3 pods on 2 nodes of one pod
/// each (the third Pending for real: the scheduler's `Unschedulable`), a named coordinator
/// (`--max-restarts`). Whichever pod is Pending, every Running pod's log names the reason
/// within its first minute: the coordinator from its watch, the followers (which make no
/// request while the coordinator answers) from what the coordinator keeps on its Job, or, when
/// the coordinator's own pod is the Pending one, from that pod. A third node: the job runs to
/// Complete.
#[test]
fn every_pod_of_a_job_that_cannot_start_says_why() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("why");
    create_pinned(
        (plane, agent, &namespace, "why"),
        (2, 1),
        &["--trainers", "3", "--max-restarts", "1"],
        "epoch >= 0",
    );
    let running = wait_for(
        || format!("no pod Pending:\n{}", agent.all_logs(&namespace)),
        || {
            let pods = pods(plane, &namespace, "why");
            let pending = pods.iter().any(|p| p["status"]["phase"] == "Pending");
            let running: Vec<String> = pods
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                .collect();
            (pending && running.len() == 2).then_some(running)
        },
    );
    for pod in &running {
        let what = || format!("{pod} does not say why:\n{}", agent.logs(&namespace, pod));
        wait_for(what, || {
            let log = agent.logs(&namespace, pod);
            let said = log
                .lines()
                .any(|l| l.contains("waiting: ") && l.contains("Unschedulable"));
            said.then_some(())
        });
    }
    agent.add_pool_node(&format!("{namespace}-node-2"), &namespace, 1);
    let (end, _) = wait_job_end(plane, agent, &namespace, "why");
    assert_eq!(end, "Complete", "{}", agent.all_logs(&namespace));
}

/// An elastic Job (`manifest --min-pods 2`) of 3 pods on nodes of its own: a pod deleted while
/// its replacement cannot be scheduled (the nodes cordoned: Pending for real) -> the job trains
/// on with 2 pods after the elastic wait; the nodes uncordoned -> the replacement is scheduled
/// and the job grows back to 3; the real Job controller completes the Job through the generated
/// successPolicy.
#[test]
fn an_elastic_job_shrinks_while_its_replacement_is_pending_and_grows_back() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("elastic");
    let nodes = create_pinned(
        (plane, agent, &namespace, "elastic"),
        (2, 110),
        &[
            "--trainers",
            "3",
            "--min-pods",
            "2",
            "--max-restarts",
            "4",
            "--elastic-wait",
            "5",
        ],
        "epoch >= 2 and world == 3",
    );
    let names = wait_training(plane, agent, &namespace, "elastic", 3);
    wait_line(agent, &namespace, "epoch 0 world 3");

    for node in &nodes {
        plane.kubectl_must(&["cordon", node]);
    }
    plane.kubectl_must(&["delete", "pod", "-n", &namespace, &names[2], "--wait=false"]);
    wait_line(agent, &namespace, "world 2");
    // The Job controller creates the replacement once the deleted pod has ended (the
    // generated podFailurePolicy makes its podReplacementPolicy `Failed`): it stays Pending.
    wait_for(
        || "no replacement Pending".to_string(),
        || {
            let pods = pods(plane, &namespace, "elastic");
            pods.iter()
                .any(|p| p["status"]["phase"] == "Pending")
                .then_some(())
        },
    );
    for node in &nodes {
        plane.kubectl_must(&["uncordon", node]);
    }
    let (end, reason) = wait_job_end(plane, agent, &namespace, "elastic");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "SuccessPolicy"),
        "{logs}"
    );
    let grown = logs
        .lines()
        .filter_map(|l| l.split("epoch ").nth(1))
        .any(|l| l.ends_with("world 3") && !l.starts_with('0') && !l.starts_with('1'));
    assert!(grown, "the job never ran with 3 pods again:\n{logs}");
    // The coordinator's record of both restarts on the Job, a grow among them, by real patches.
    let job = get(plane, &namespace, &["job", "elastic"]).unwrap();
    let annotations = &job["metadata"]["annotations"];
    let recorded =
        |key: &str| annotations[format!("paddle-launcher.paddlepaddle.org/{key}")].clone();
    assert_eq!(recorded("grows"), "1", "{job:#}");
    assert!(
        recorded("restart-count").as_str().is_some_and(|c| c >= "2"),
        "{job:#}"
    );
}

/// Seconds since `start`, for a timeline.
fn since(start: Instant) -> f64 {
    (start.elapsed().as_millis() as f64 / 100.0).round() / 10.0
}

/// Waits until `ready` holds of the pod `name` (its JSON; None when it is gone).
fn wait_pod(
    plane: &ControlPlane,
    namespace: &str,
    name: &str,
    what: &str,
    ready: impl Fn(Option<&Value>) -> bool,
) {
    let what = || {
        format!(
            "pod {name} not {what}: {:#?}",
            get(plane, namespace, &["pod", name])
        )
    };
    wait_for(what, || {
        ready(get(plane, namespace, &["pod", name]).as_ref()).then_some(())
    })
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The node of a training pod of a recovering Job (`manifest --max-restarts 2`, its pods on
/// nodes of their own) dies: its kubelet stops, its processes freeze. What follows is the real
/// node lifecycle controller's and Job controller's doing, measured on the way: the pod stays
/// Running, turns not Ready once the node is NotReady, is evicted after the unreachable
/// toleration and stays Terminating (nothing confirms its end on a dead node); the launchers find
/// the frozen peer by the heartbeat meanwhile. The generated podFailurePolicy makes the Job's
/// podReplacementPolicy `Failed`: no replacement while the pod is Terminating, so the test then
/// does what a cloud's node lifecycle does for a machine that is gone, deletes the Node; the pod
/// garbage collector fails and removes the pod, the Job controller creates the replacement, and
/// the launchers restart in place with it.
#[test]
fn a_dead_nodes_pod_is_found_by_the_heartbeat_and_replaced_once_kubernetes_lets_go_of_it() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("deadnode");
    create_pinned(
        (plane, agent, &namespace, "deadnode"),
        (3, 1),
        &["--trainers", "2", "--max-restarts", "2"],
        "epoch >= 1",
    );
    let names = wait_training(plane, agent, &namespace, "deadnode", 2);
    let victim = &names[1];
    let pod = get(plane, &namespace, &["pod", victim]).unwrap();
    let node = pod["spec"]["nodeName"].as_str().unwrap().to_string();

    let start = Instant::now();
    agent.kill_node(&node);
    let mut timeline = vec![format!("node {node} of pod {victim} dies at 0 s")];
    wait_line(agent, &namespace, "no heartbeat");
    timeline.push(format!(
        "{} s: the launchers name the silent peer",
        since(start)
    ));
    wait_pod(plane, &namespace, victim, "not Ready", |p| {
        p.is_some_and(|p| !pod_ready(p))
    });
    timeline.push(format!(
        "{} s: the pod is not Ready (still {})",
        since(start),
        get(plane, &namespace, &["pod", victim]).unwrap()["status"]["phase"]
    ));
    wait_pod(plane, &namespace, victim, "deleted", |p| {
        p.is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string())
    });
    timeline.push(format!(
        "{} s: the pod is evicted, Terminating",
        since(start)
    ));
    // A while Terminating: no replacement meanwhile.
    std::thread::sleep(Duration::from_secs(10));
    let now = pods(plane, &namespace, "deadnode");
    assert_eq!(
        now.len(),
        2,
        "a replacement while the dead pod is Terminating: {now:#?}"
    );
    assert!(
        get(plane, &namespace, &["pod", victim]).is_some(),
        "the dead pod is gone"
    );
    // Issue 52: the survivor's waiting line names the pod it waits on, where and why.
    wait_line(agent, &namespace, &format!("{victim}: Terminating since"));
    assert_contains(
        &agent.all_logs(&namespace),
        &format!("on node {node}, not Ready (its node may be unreachable): its replacement comes once Kubernetes lets go of it"),
    );

    plane.kubectl_must(&["delete", "node", &node, "--wait=false"]);
    timeline.push(format!("{} s: the Node is deleted", since(start)));
    let (end, reason) = wait_job_end(plane, agent, &namespace, "deadnode");
    timeline.push(format!("{} s: the Job is {end}", since(start)));
    eprintln!("timeline:\n{}", timeline.join("\n"));
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    let job = get(plane, &namespace, &["job", "deadnode"]).unwrap();
    assert_eq!(job["status"]["succeeded"], 2, "{job:#}");
}

/// The node of a member of an elastic Job (`--min-pods 2`, 3 pods, each on a node of its own
/// and no node left for a replacement) dies: the job trains on with the 2 live pods (the silent
/// peer found by the heartbeat, left out once its pod is not Ready or after the hello wait,
/// docs/recovery.md) while the API still has the dead pod Running; the generated successPolicy
/// is met with it still there, and the Job is Complete once the Node is deleted.
#[test]
fn an_elastic_job_trains_on_without_a_dead_nodes_pod_still_in_the_api() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("elasticdead");
    create_pinned(
        (plane, agent, &namespace, "elasticdead"),
        (3, 1),
        &[
            "--trainers",
            "3",
            "--min-pods",
            "2",
            "--max-restarts",
            "2",
            "--elastic-wait",
            "5",
        ],
        "world == 2",
    );
    let names = wait_training(plane, agent, &namespace, "elasticdead", 3);
    let victim = &names[2];
    let node = get(plane, &namespace, &["pod", victim]).unwrap()["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_string();

    let start = Instant::now();
    agent.kill_node(&node);
    wait_line(agent, &namespace, "world 2");
    let shrunk = since(start);
    // Found by its silence first, as in a cluster (the node monitor grace is the longer).
    assert_contains(&agent.all_logs(&namespace), "sent no heartbeat for 10 s");
    let dead = get(plane, &namespace, &["pod", victim]).unwrap();
    assert_eq!(dead["status"]["phase"], "Running", "{dead:#}");
    // The success policy is met when pod 0 succeeds; the Job controller then waits for every
    // pod to have ended before it says Complete, and the dead node's pod never ends by itself.
    let met = wait_job_condition(
        plane,
        agent,
        &namespace,
        "elasticdead",
        &["SuccessCriteriaMet", "Failed"],
    );
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        met,
        (
            "SuccessCriteriaMet".to_string(),
            "SuccessPolicy".to_string()
        ),
        "{logs}"
    );
    let trained = since(start);
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        get(plane, &namespace, &["pod", victim]).is_some(),
        "the dead pod is gone"
    );
    assert!(job_condition(plane, &namespace, "elasticdead", &["Complete"]).is_none());
    // What a cloud does for a machine that is gone: the Node deleted, the pod garbage
    // collector fails and removes its pods, and the Job is Complete.
    plane.kubectl_must(&["delete", "node", &node, "--wait=false"]);
    let (end, reason) = wait_job_end(plane, agent, &namespace, "elasticdead");
    eprintln!(
        "the job trains on with 2 pods {shrunk} s after the node died, its success policy met at \
         {trained} s, Complete at {} s once the Node was deleted",
        since(start)
    );
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "SuccessPolicy"),
        "{logs}"
    );
}

/// Runs the ignored test `name` of this binary in a process of its own, so with a control plane
/// of its own (one whose API server it may restart without disturbing the other tests); fails
/// with its output when it fails.
fn in_a_control_plane_of_its_own(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored", "--nocapture"])
        .env(support::node_agent::IP_BLOCK_ENV, "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{name}:\n{stdout}{stderr}");
    assert_contains(&stdout, "1 passed");
    eprintln!("{stderr}");
}

/// The API server restarted while the launchers wait for the job's last pod (connections
/// dropped, their watches resumed from a resourceVersion the new server's cache may not have):
/// they go on waiting, start once all 3 pods run, and the Job completes; no launcher starts its
/// program twice.
#[test]
fn the_launchers_wait_through_an_api_server_restart_and_start_once() {
    in_a_control_plane_of_its_own("api_server_restarted_while_the_launchers_wait");
}

#[test]
#[ignore = "run by the_launchers_wait_through_an_api_server_restart_and_start_once"]
fn api_server_restarted_while_the_launchers_wait() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("apirestart");
    // Room for 2 of the 3 pods: the third stays Pending until a node is added.
    create_pinned(
        (plane, agent, &namespace, "apirestart"),
        (1, 2),
        &["--trainers", "3", "--max-restarts", "1"],
        "True",
    );
    let pool = namespace.clone();
    wait_for(
        || agent.all_logs(&namespace),
        || (agent.all_logs(&namespace).matches("waiting").count() >= 2).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(3));

    plane.restart_api_server();
    eprintln!("API server restarted");
    std::thread::sleep(Duration::from_secs(5));
    agent.add_pool_node(&format!("{pool}-node-1"), &pool, 2);

    let (end, reason) = wait_job_end(plane, agent, &namespace, "apirestart");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Complete", "CompletionsReached"),
        "{logs}"
    );
    assert_eq!(logs.matches("epoch 0 world 3").count(), 3, "{logs}");
    assert!(
        !logs.contains("epoch 1"),
        "a launcher started twice:\n{logs}"
    );
    // The restart reached the launchers (not a restart between two of their requests).
    assert_contains(&logs, "failed, retrying with backoff");
    let said: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    eprintln!(
        "what the launchers said of the restart:\n{}",
        said.join("\n")
    );
}

/// A value every launcher refuses, in a generated JobSet: the child Job fails at once through the
/// generated podFailurePolicy, and the JobSet with it (`failurePolicy.maxRestarts: 0`: JobSet
/// does not recreate the job), as docs/manifests-and-rbac.md says.
#[test]
fn a_bad_configuration_fails_a_generated_jobset_at_once() {
    let (plane, agent) = (control_plane(), agent());
    support::control_plane::jobset_controller();
    let namespace = plane.namespace("jobsetbad");
    create_badly_configured(plane, &namespace, "jsbad", &["--runtime", "jobset"]);
    let ended = wait_jobset_end(plane, agent, &namespace, "jsbad");
    let logs = agent.all_logs(&namespace);
    assert_eq!(ended["type"], "Failed", "{ended:#}\n{logs}");
    assert_contains(&logs, "PADDLE_LAUNCHER_HANG_TIMEOUT");
    let jobs = get(plane, &namespace, &["jobs"]).unwrap();
    let child = &jobs["items"][0];
    assert_eq!(
        jobs["items"].as_array().unwrap().len(),
        1,
        "JobSet recreated its job: {jobs:#}"
    );
    let failed = child["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Failed" && c["reason"] == "PodFailurePolicy");
    assert!(failed, "{child:#}");
}

/// The rest of the launcher's event reasons on the real API: a job whose first attempt hangs
/// (`--hang-timeout`) and whose second fails with no restart left posts `Hang` and `Failed` on
/// its Job, beside `Started` and `Restarting` (docs/troubleshooting.md#the-jobs-events).
#[test]
fn a_hang_and_an_exhausted_budget_are_events_on_the_job() {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace("hangevents");
    let dir = test_dir(plane, &namespace);
    let script = dir.join("hang_then_fail.py");
    std::fs::write(
        &script,
        "import os, sys, time\n\
         if os.environ.get('PADDLE_LAUNCHER_RESTART_COUNT', '0') == '0':\n    \
         print('step 1', flush=True)\n    time.sleep(3600)\n\
         sys.exit(3)\n",
    )
    .unwrap();
    let program = vec!["python3".to_string(), script.display().to_string()];
    let mut objects = generated(
        plane,
        &namespace,
        "hangevents",
        &[
            "--trainers",
            "2",
            "--max-restarts",
            "1",
            "--hang-timeout",
            "3",
        ],
        &program,
    );
    set_env(&mut objects, "PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "3");
    create(plane, &namespace, &objects);
    let (end, reason) = wait_job_end(plane, agent, &namespace, "hangevents");
    let logs = agent.all_logs(&namespace);
    assert_eq!(
        (end.as_str(), reason.as_str()),
        ("Failed", "PodFailurePolicy"),
        "{logs}"
    );
    let ours = launcher_events(plane, &namespace);
    for reason in ["Started", "Hang", "Restarting", "Failed"] {
        assert!(
            ours.contains(&("Job".to_string(), reason.to_string())),
            "no {reason}: {ours:?}\n{logs}"
        );
    }
}
