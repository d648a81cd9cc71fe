//! `manifest --runtime jobset|volcano` and `--queue`: the objects match the CRD schemas of
//! tests/fixtures/crds (strictly: no field the schema lacks), the core objects pass
//! kubernetes-validate, and launchers started as the system would start the pods plan the job
//! without being told its name, size or layout.

mod support;

use std::process::Command;

use serde_json::{json, Value};
use support::crd::Crd;
use support::dnsmasq::Dnsmasq;
use support::{assert_contains, Cluster, Launcher, LAUNCHER};

fn manifest(args: &[&str]) -> Result<Vec<Value>, String> {
    let out = Command::new(LAUNCHER)
        .arg("manifest")
        .args(args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).to_string());
    }
    Ok(serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap())
}

const JOBSET: &[&str] = &[
    "--job-name",
    "js",
    "--namespace",
    "team-a",
    "--image",
    "example.com/t/p:v1",
    "--trainers",
    "3",
    "--protocol",
    "collective",
    "--runtime",
    "jobset",
    "--ttl-seconds-after-finished",
    "3600",
    "--queue",
    "team-a-queue",
    "--",
    "python",
    "/workspace/train.py",
];
/// One Volcano task of 3 data-parallel pods.
const COLOCATED_VOLCANO: &[&str] = &[
    "--job-name",
    "vc",
    "--namespace",
    "team-a",
    "--image",
    "example.com/t/p:v1",
    "--trainers",
    "3",
    "--protocol",
    "collective",
    "--runtime",
    "volcano",
    "--",
    "python3",
    "train.py",
];

const VOLCANO: &[&str] = &[
    "--job-name",
    "vc",
    "--namespace",
    "team-a",
    "--image",
    "example.com/t/p:v1",
    "--split",
    "--pservers",
    "2",
    "--trainers",
    "3",
    "--protocol",
    "fleet",
    "--runtime",
    "volcano",
    "--ttl-seconds-after-finished",
    "3600",
    "--queue",
    "research",
    "--entry",
    "python /workspace/ps.py",
];

/// The split layout as a JobSet: a `pserver` and a `trainer` replicated job.
const SPLIT_JOBSET: &[&str] = &[
    "--job-name",
    "jsp",
    "--namespace",
    "team-a",
    "--image",
    "example.com/t/p:v1",
    "--split",
    "--pservers",
    "2",
    "--trainers",
    "3",
    "--protocol",
    "fleet",
    "--runtime",
    "jobset",
    "--entry",
    "python /w/ps.py",
];

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {docs:#?}"))
}

#[test]
fn jobset_and_volcano_manifests_match_their_crd_schemas() {
    let jobset = Crd::load("jobset.x-k8s.io_jobsets.yaml");
    let volcano = Crd::load("batch.volcano.sh_jobs.yaml");
    let docs = manifest(JOBSET).unwrap();
    let object = find(&docs, "JobSet");
    assert_eq!(jobset.violations(object), Vec::<String>::new());
    assert_eq!(
        object["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "team-a-queue"
    );
    assert_eq!(
        object["spec"]["suspend"], true,
        "Kueue admits it by unsuspending"
    );
    let role = find(&docs, "Role");
    assert_eq!(
        role["rules"][2],
        json!({"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]})
    );
    // The split layout as a JobSet: a `pserver` and a `trainer` replicated job.
    let docs = manifest(SPLIT_JOBSET).unwrap();
    let object = find(&docs, "JobSet");
    assert_eq!(jobset.violations(object), Vec::<String>::new());
    let names: Vec<&str> = object["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pserver", "trainer"]);

    let docs = manifest(VOLCANO).unwrap();
    let object = find(&docs, "Job");
    assert_eq!(volcano.violations(object), Vec::<String>::new());
    assert_eq!(object["spec"]["queue"], "research");
    assert_eq!(object["spec"]["minAvailable"], 5);
    let tasks: Vec<&str> = object["spec"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["pserver", "trainer"]);

    // The checker is strict: a field either schema lacks, a wrong type, a missing required
    // field are each found.
    let mut broken = find(&manifest(JOBSET).unwrap(), "JobSet").clone();
    broken["spec"]["replicatedJobs"][0]["replicaz"] = json!(1);
    broken["spec"]["suspend"] = json!("yes");
    broken["spec"]["replicatedJobs"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    let found = jobset.violations(&broken).join("\n");
    assert_contains(
        &found,
        ".spec.replicatedJobs[0].replicaz: a field the schema does not have",
    );
    assert_contains(&found, ".spec.suspend: \"yes\" is not of type \"boolean\"");
    assert_contains(
        &found,
        ".spec.replicatedJobs[0]: the required field \"name\" is missing",
    );
    assert_contains(
        &volcano.violations(&broken).join("\n"),
        "is not batch.volcano.sh/v1alpha1 Job",
    );
}

#[test]
fn the_core_objects_pass_kubernetes_validate() {
    let dir = tempfile::tempdir().unwrap();
    for args in [JOBSET, VOLCANO] {
        let core: Vec<Value> = manifest(args)
            .unwrap()
            .into_iter()
            .filter(|d| {
                d["apiVersion"]
                    .as_str()
                    .is_some_and(|v| !v.contains(".x-k8s.io") && !v.contains("volcano.sh"))
            })
            .collect();
        assert_eq!(
            core.len(),
            4,
            "ServiceAccount, Role, RoleBinding, NetworkPolicy"
        );
        let file = dir.path().join("core.yaml");
        let text: Vec<String> = core
            .iter()
            .map(|d| serde_saphyr::to_string(d).unwrap())
            .collect();
        std::fs::write(&file, text.join("---\n")).unwrap();
        support::assert_valid_on_every_kubernetes(&file, "the core objects");
    }
}

#[test]
fn combinations_the_systems_do_their_own_way_are_refused() {
    let base = ["--job-name", "x", "--image", "i:1", "--runtime", "jobset"];
    for extra in [&["--dns"][..], &["--indexed"]] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let e = manifest(&args).unwrap_err();
        assert_contains(
            &e,
            "invalid --runtime: \"jobset\": expected job with --dns or --indexed",
        );
    }
    let e = manifest(&["--job-name", "x", "--image", "i:1", "--queue", "Team A"]).unwrap_err();
    assert_contains(&e, "invalid --queue: \"Team A\"");
}

/// The environment a container of `template` gets, with the downward API filled in.
fn container_env(
    template: &Value,
    name: &str,
    ip: &str,
    extra: &[(&'static str, String)],
) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = Vec::new();
    for var in template["spec"]["containers"][0]["env"].as_array().unwrap() {
        let key: &'static str =
            Box::leak(var["name"].as_str().unwrap().to_string().into_boxed_str());
        let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("status.podIP") => ip.to_string(),
            Some("metadata.name") => name.to_string(),
            Some("metadata.namespace") => "team-a".to_string(),
            Some("spec.nodeName") => "node-a".to_string(),
            Some("metadata.labels['jobset.sigs.k8s.io/jobset-name']") => jobset_of(name),
            Some(other) => panic!("unexpected field {other}"),
            // As the kubelet expands `$(NAME)` of a variable defined before.
            None => env.iter().fold(
                var["value"].as_str().unwrap().to_string(),
                |v, (k, known)| v.replace(&format!("$({k})"), known),
            ),
        };
        env.push((key, value));
    }
    env.push(("CONF_PADDLE_NIC", "lo".into()));
    env.extend(extra.iter().cloned());
    env
}

/// The JobSet a pod named `<jobset>-<replicated job>-<job>-<pod>-<suffix>` is of, as its label
/// says.
fn jobset_of(pod: &str) -> String {
    let parts: Vec<&str> = pod.split('-').collect();
    parts[..parts.len().saturating_sub(4)].join("-")
}

/// A launcher of pod `name` at `ip` with exactly `template`'s environment (and the job's Secret,
/// and the cluster), run as `plan` with the container's own arguments: its plan and its log.
fn plan_as_the_pod(
    dir: &std::path::Path,
    template: &Value,
    name: &str,
    ip: &str,
) -> (Value, String) {
    let mut env = container_env(template, name, ip, &[]);
    support::mount_job_secret(dir, &mut env);
    env.push(("KUBECONFIG", dir.join("kubeconfig").display().to_string()));
    // The container's own arguments, `run -- <program>`, as `plan`.
    let args: Vec<&str> = template["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .map(|a| if a == "run" { "plan" } else { a })
        .collect();
    let done = Launcher::start(dir, name, &args, &env).wait(std::time::Duration::from_secs(60));
    assert_eq!(done.code(), 0, "{}", done.stderr);
    (serde_json::from_str(&done.stdout).unwrap(), done.stderr)
}

fn pod(name: &str, ip: &str, template: &Value, marks: Value) -> Value {
    let mut labels = template["metadata"]["labels"].clone();
    for (k, v) in marks.as_object().unwrap() {
        labels[k] = v.clone();
    }
    json!({"kind": "Pod", "apiVersion": "v1",
           "metadata": {"name": name, "namespace": "team-a", "labels": labels, "annotations": marks},
           "spec": {"containers": [{"name": "c", "image": "i"}]},
           "status": {"phase": "Running", "podIP": ip}})
}

/// The JobSet of `docs` (named `js`) as the API serves it, and its first replicated job's pods
/// as its controllers make them, `js-worker-0-<i>-q` at `ips[i]` (completion index i): their
/// pod template.
fn jobset_in_the_api(api: &support::fake_api::FakeApi, docs: &[Value], ips: &[&str]) -> Value {
    let jobset = find(docs, "JobSet");
    api.record(
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/js",
        200,
        jobset.to_string(),
    );
    let rjob = &jobset["spec"]["replicatedJobs"][0];
    let template = &rjob["template"]["spec"]["template"];
    for (i, ip) in ips.iter().enumerate() {
        let marks = json!({"jobset.sigs.k8s.io/jobset-name": "js",
                           "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                           "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/job-global-index": "0",
                           "jobset.sigs.k8s.io/restart-attempt": "0",
                           "batch.kubernetes.io/job-completion-index": i.to_string()});
        api.put_pod(pod(&format!("js-worker-0-{i}-q"), ip, template, marks));
    }
    template.clone()
}

/// The JobSet's pods, as the JobSet and Job controllers would make them from the manifest, and
/// their launchers with exactly its environment: each plans its rank of three.
#[test]
fn launchers_of_the_jobset_manifest_plan_the_job() {
    let Cluster { api, dir } = Cluster::new();
    let docs = manifest(JOBSET).unwrap();
    let ips = ["127.0.36.13", "127.0.36.12", "127.0.36.11"];
    let template = &jobset_in_the_api(&api, &docs, &ips);
    for (i, ip) in ips.iter().enumerate() {
        let (plan, _) = plan_as_the_pod(dir.path(), template, &format!("js-worker-0-{i}-q"), ip);
        assert_eq!(plan["trainer_id"], i);
        assert_eq!(plan["job"], "js");
        assert_eq!(plan["num_gradient_servers"], 3);
    }
}

/// `--max-restarts` under JobSet and Trainer v2: a recovering job. Each object passes its CRD
/// schema; the coordinator is the first pod by the DNS name JobSet gives it, in every pod's
/// environment (made of the JobSet's name from the pod's label, for a runtime that serves
/// every TrainJob); the child Job replaces a lost pod within the budget and fails at once on a
/// launcher's own non-zero exit (its rule names the container as it is named); the JobSet
/// is never restarted whole behind the launchers. A pod's launcher, with exactly that
/// environment, plans with the coordinator by name.
#[test]
fn jobset_and_trainer_jobs_recover_in_place() {
    let with_restarts = |args: &[&'static str]| -> Vec<&'static str> {
        let end = args.iter().position(|a| *a == "--").unwrap();
        let mut args = args.to_vec();
        args.splice(end..end, ["--max-restarts", "2"]);
        args
    };
    let jobsets = Crd::load("jobset.x-k8s.io_jobsets.yaml");
    let runtimes = Crd::load("trainer.kubeflow.org_clustertrainingruntimes.yaml");
    for (args, kind, crd, job) in [
        (with_restarts(JOBSET), "JobSet", &jobsets, "worker"),
        (
            with_restarts(TRAINER),
            "ClusterTrainingRuntime",
            &runtimes,
            "node",
        ),
    ] {
        let docs = manifest(&args).unwrap();
        let object = find(&docs, kind);
        assert_eq!(crd.violations(object), Vec::<String>::new(), "{kind}");
        let spec = match kind {
            "JobSet" => &object["spec"],
            _ => &object["spec"]["template"]["spec"],
        };
        assert_eq!(spec["failurePolicy"]["maxRestarts"], 0, "{kind}");
        assert_eq!(spec["network"]["enableDNSHostnames"], true, "{kind}");
        assert_eq!(spec["network"]["publishNotReadyAddresses"], true, "{kind}");
        let child = &spec["replicatedJobs"][0]["template"]["spec"];
        assert_eq!(child["backoffLimit"], 2, "{kind}");
        assert_eq!(child["completionMode"], "Indexed", "{kind}");
        let container = &child["template"]["spec"]["containers"][0];
        // Every rule on exit codes names the container as the runtime renders it: a free
        // preemption (83) ignored, every other status but a kill's failing the Job at once.
        let rules = child["podFailurePolicy"]["rules"].as_array().unwrap();
        let on_codes: Vec<(&Value, &Value, &Value)> = rules
            .iter()
            .filter(|r| r.get("onExitCodes").is_some())
            .map(|r| {
                (
                    &r["action"],
                    &r["onExitCodes"]["operator"],
                    &r["onExitCodes"]["values"],
                )
            })
            .collect();
        assert_eq!(
            on_codes,
            vec![
                (&json!("Ignore"), &json!("In"), &json!([83])),
                (&json!("FailJob"), &json!("NotIn"), &json!([137, 143])),
            ],
            "{kind}"
        );
        for rule in rules.iter().filter(|r| r.get("onExitCodes").is_some()) {
            assert_eq!(
                rule["onExitCodes"]["containerName"], container["name"],
                "{kind}"
            );
        }
        let env = container["env"].as_array().unwrap();
        let value = |name: &str| env.iter().find(|v| v["name"] == name).cloned();
        assert_eq!(
            value("PADDLE_LAUNCHER_COORDINATOR").unwrap()["value"],
            format!("$(JOBSET_NAME)-{job}-0-0.$(JOBSET_NAME):6171"),
            "{kind}"
        );
        assert_eq!(
            value("JOBSET_NAME").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
        );
        assert_eq!(value("PADDLE_LAUNCHER_MAX_RESTARTS").unwrap()["value"], "2");
    }
    // A pod of the recovering JobSet, as its controllers make it: its launcher plans with the
    // coordinator named as JobSet names the first pod, and the budget.
    let Cluster { api, dir } = Cluster::new();
    let docs = manifest(&with_restarts(JOBSET)).unwrap();
    let ips = ["127.0.36.23", "127.0.36.22", "127.0.36.21"];
    let template = &jobset_in_the_api(&api, &docs, &ips);
    let (plan, _) = plan_as_the_pod(dir.path(), template, "js-worker-0-1-q", ips[1]);
    assert_eq!(plan["trainer_id"], 1);
    assert_eq!(plan["control"]["coordinator"], "js-worker-0-0.js:6171");
    assert_eq!(plan["control"]["max_restarts"], 2);
}

/// A recovering JobSet end to end: two pods as the JobSet and Job controllers make them from
/// the manifest, their launchers run with exactly its environment, a real collective trainer
/// on each; trainer 1 fails in the first attempt (`recovering_pods_complete`).
#[test]
fn a_recovering_jobset_restarts_in_place_and_completes() {
    let Cluster { api, dir } = Cluster::new();
    let docs = manifest(&recovering(JOBSET)).unwrap();
    let ips = ["127.0.36.31", "127.0.36.32"];
    let template = &jobset_in_the_api(&api, &docs, &ips);
    let names: Vec<String> = (0..2).map(|i| format!("js-worker-0-{i}-q")).collect();
    let pods = Pods {
        template,
        names: &names,
        ips: &ips,
        coordinator: "js-worker-0-0.js",
    };
    let logs = recovering_pods_complete(dir.path(), pods, |_| Vec::new());
    for log in logs {
        assert_contains(&log, "JobSet js");
    }
}

/// `--max-restarts` under Volcano: the Job passes its CRD schema; a deleted pod is left to the
/// controller's default sync, which recreates it alone under its own name (no policy for
/// `PodEvicted`, no `RestartJob`/`RestartPod`); a failed pod terminates the job unless a pod of
/// its name runs again within the pods' wait for a replacement (their default, or the one
/// `--env` gives them); the svc plugin publishes pods before they are ready, and every pod
/// names the coordinator by the hostname the plugin gives the first.
#[test]
fn a_volcano_job_recovers_in_place_as_generated() {
    let crd = Crd::load("batch.volcano.sh_jobs.yaml");
    // The pods' wait for their peers (the last one given, blank the default), from when they
    // have noticed the loss (10 s) and stopped their children (the pod's grace period, 30 s).
    for (envs, policies) in [
        (
            &[][..],
            json!([{"event": "PodFailed", "action": "TerminateJob", "timeout": "1840s"}]),
        ),
        (
            &["PADDLE_LAUNCHER_WAIT_TIMEOUT=600"],
            json!([{"event": "PodFailed", "action": "TerminateJob", "timeout": "640s"}]),
        ),
        (
            &[
                "PADDLE_LAUNCHER_WAIT_TIMEOUT=600",
                "PADDLE_LAUNCHER_WAIT_TIMEOUT=",
            ],
            json!([{"event": "PodFailed", "action": "TerminateJob", "timeout": "1840s"}]),
        ),
        // Pods that wait for ever: no failed pod ends the job either.
        (&["PADDLE_LAUNCHER_WAIT_TIMEOUT=0"], Value::Null),
    ] {
        let mut args = recovering(COLOCATED_VOLCANO);
        let end = args.iter().position(|a| *a == "--").unwrap();
        let given: Vec<&str> = envs.iter().flat_map(|env| ["--env", env]).collect();
        args.splice(end..end, given);
        let docs = manifest(&args).unwrap();
        let job = find(&docs, "Job");
        assert_eq!(crd.violations(job), Vec::<String>::new());
        assert_eq!(job["spec"]["policies"], policies, "{envs:?}");
        assert_eq!(
            job["spec"]["plugins"]["svc"],
            json!(["--publish-not-ready-addresses"])
        );
        let task = &job["spec"]["tasks"][0];
        assert!(task.get("policies").is_none(), "{task}");
        let pod = &task["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Never");
        // The svc plugin gives hostname and subdomain only to a template without them.
        assert!(pod.get("subdomain").is_none() && pod.get("hostname").is_none());
        let env = pod["containers"][0]["env"].as_array().unwrap();
        let value = |name: &str| env.iter().find(|v| v["name"] == name).cloned();
        assert_eq!(
            value("PADDLE_LAUNCHER_COORDINATOR").unwrap()["value"],
            "vc-worker-0.vc:6171"
        );
        assert_eq!(value("PADDLE_LAUNCHER_MAX_RESTARTS").unwrap()["value"], "2");
    }
}

/// A recovering Volcano Job end to end: two pods as its controller and env/svc plugins make
/// them from the manifest, as in `a_recovering_jobset_restarts_in_place_and_completes`.
#[test]
fn a_recovering_volcano_job_restarts_in_place_and_completes() {
    let Cluster { api, dir } = Cluster::new();
    let docs = manifest(&recovering(COLOCATED_VOLCANO)).unwrap();
    let task = &find(&docs, "Job")["spec"]["tasks"][0];
    let template = &task["template"];
    let ips = ["127.0.36.41", "127.0.36.42"];
    let names: Vec<String> = (0..2).map(|i| format!("vc-worker-{i}")).collect();
    for (i, ip) in ips.iter().enumerate() {
        let marks = json!({"volcano.sh/job-name": "vc", "volcano.sh/task-spec": "worker",
                           "volcano.sh/task-index": i.to_string(), "volcano.sh/job-version": "0"});
        api.put_pod(pod(&names[i], ip, template, marks));
    }
    let hosts = names.iter().map(|n| format!("{n}.vc")).collect::<Vec<_>>();
    let pods = Pods {
        template,
        names: &names,
        ips: &ips,
        coordinator: "vc-worker-0.vc",
    };
    let logs = recovering_pods_complete(dir.path(), pods, |i| {
        vec![
            ("VC_WORKER_HOSTS", hosts.join(",")),
            ("VC_WORKER_NUM", "2".to_string()),
            ("VC_TASK_INDEX", i.to_string()),
            ("HOSTNAME", names[i].clone()),
        ]
    });
    for log in logs {
        assert_contains(&log, "Volcano job vc (VC_<TASK>_HOSTS");
    }
}

/// `args` (a job of 3 pods) as a job of 2 pods with `--max-restarts 2` and a collective trainer
/// that fails once (`TRAINER_FAILING_ONCE`).
fn recovering(args: &[&'static str]) -> Vec<&'static str> {
    let end = args.iter().position(|a| *a == "--").unwrap();
    let mut args: Vec<&str> = args[..end].to_vec();
    let trainers = args.iter().position(|a| *a == "--trainers").unwrap();
    args[trainers + 1] = "2";
    args.extend([
        "--max-restarts",
        "2",
        "--",
        "python3",
        "-c",
        TRAINER_FAILING_ONCE,
    ]);
    args
}

/// Two pods of a recovering job as its batch system makes them.
struct Pods<'a> {
    template: &'a Value,
    names: &'a [String],
    ips: &'a [&'a str],
    /// The DNS name the system gives pod 0, which the generated environment names the
    /// coordinator by (a test DNS server gives it pod 0's address).
    coordinator: &'a str,
}

/// The pods, made from their template (with `system_env(i)` added by their batch system), run
/// their launchers with exactly its environment (the writable paths moved into the test's
/// directory) and a DNS server that has the coordinator's name. Trainer 1 fails in the first
/// attempt: both pods restart in place, within the budget the manifest gives, and the job
/// completes.
fn recovering_pods_complete(
    dir: &std::path::Path,
    pods: Pods,
    system_env: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<String> {
    let Pods {
        template,
        names,
        ips,
        coordinator,
    } = pods;
    let dns = Dnsmasq::start(dir);
    dns.set_records(&[(ips[0], coordinator)]);
    let trainer = support::free_ports(1).to_string();
    let launchers: Vec<Launcher> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            let own = dir.join(&names[i]);
            let path = |sub: &str| own.join(sub).display().to_string();
            let mut moved = vec![
                ("PADDLE_LAUNCHER_WORKDIR", path("work")),
                ("PADDLE_LAUNCHER_ID_DIR", path("work")),
                ("PADDLE_LAUNCHER_PROGRESS_FILE", path("progress")),
                ("HOME", path("home")),
                ("XDG_CACHE_HOME", path("home/.cache")),
                (
                    "PADDLE_LAUNCHER_DNS_SERVER",
                    format!("127.0.0.1:{}", dns.port),
                ),
                ("PADDLE_LAUNCHER_TRAINER_PORT", trainer.clone()),
                ("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "3".to_string()),
            ];
            moved.extend(system_env(i));
            let mut env = container_env(template, &names[i], ip, &moved);
            support::mount_job_secret(dir, &mut env);
            env.push(("KUBECONFIG", dir.join("kubeconfig").display().to_string()));
            let args: Vec<&str> = template["spec"]["containers"][0]["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            Launcher::start(dir, &names[i], &args, &env)
        })
        .collect();
    let mut logs = Vec::new();
    for (i, launcher) in launchers.into_iter().enumerate() {
        let done = launcher.wait(std::time::Duration::from_secs(120));
        assert_eq!(done.code(), 0, "pod {i}:\n{}\n{}", done.stdout, done.stderr);
        assert_contains(&done.stderr, "restarting the job (restart 1 of 2)");
        assert_contains(
            &done.stdout,
            &format!("trainer {i} done in restart epoch 1"),
        );
        assert_contains(&done.stderr, "(after 1 restart of the job)");
        logs.push(done.stderr);
    }
    logs
}

/// A collective trainer of the test: trainer 1 fails in the first attempt; every trainer of a
/// later one says so and succeeds.
const TRAINER_FAILING_ONCE: &str = r#"
import os, sys
me, epoch = os.environ["PADDLE_TRAINER_ID"], os.environ["PADDLE_LAUNCHER_RESTART_COUNT"]
if me == "1" and epoch == "0":
    sys.exit(3)
if epoch == "0":
    import time; time.sleep(30)
print(f"trainer {me} done in restart epoch {epoch}", flush=True)
"#;

/// The Volcano Job's pods as its controller and env/svc plugins would make them: a trainer
/// plans the split layout, with the pservers of the pserver task.
#[test]
fn launchers_of_the_volcano_manifest_plan_the_split_layout() {
    let Cluster { api, dir } = Cluster::new();
    let docs = manifest(VOLCANO).unwrap();
    let tasks = find(&docs, "Job")["spec"]["tasks"]
        .as_array()
        .unwrap()
        .clone();
    let mut plugin_env: Vec<(&'static str, String)> = Vec::new();
    let mut ip = 10;
    let mut pods = Vec::new();
    for task in &tasks {
        let name = task["name"].as_str().unwrap();
        let count = task["replicas"].as_u64().unwrap();
        let hosts: Vec<String> = (0..count).map(|i| format!("vc-{name}-{i}.vc")).collect();
        let upper: &'static str = Box::leak(name.to_uppercase().into_boxed_str());
        plugin_env.push((
            Box::leak(format!("VC_{upper}_HOSTS").into_boxed_str()),
            hosts.join(","),
        ));
        plugin_env.push((
            Box::leak(format!("VC_{upper}_NUM").into_boxed_str()),
            count.to_string(),
        ));
        for i in 0..count {
            ip += 1;
            let pod_name = format!("vc-{name}-{i}");
            let marks = json!({"volcano.sh/job-name": "vc", "volcano.sh/task-spec": name,
                               "volcano.sh/task-index": i.to_string(), "volcano.sh/job-version": "0"});
            let address = format!("127.0.37.{ip}");
            api.put_pod(pod(&pod_name, &address, &task["template"], marks));
            pods.push((pod_name, address, task["template"].clone(), i));
        }
    }
    let (name, address, template, index) = &pods[3];
    assert_eq!(name, "vc-trainer-1");
    let mut extra = plugin_env.clone();
    extra.push(("VC_TASK_INDEX", index.to_string()));
    extra.push(("HOSTNAME", name.clone()));
    extra.push((
        "KUBECONFIG",
        dir.path().join("kubeconfig").display().to_string(),
    ));
    let mut env = container_env(template, name, address, &extra);
    support::mount_job_secret(dir.path(), &mut env);
    let done =
        Launcher::start(dir.path(), "vc", &["plan"], &env).wait(std::time::Duration::from_secs(60));
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let plan: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(plan["trainer_id"], 1);
    assert_eq!(
        plan["pserver_endpoints"],
        json!(["127.0.37.11:7164", "127.0.37.12:7164"])
    );
    assert_eq!(plan["num_gradient_servers"], 3);
}

/// The split layout as a JobSet: a `pserver` replicated job (global job index 0, 2 pods) and a
/// `trainer` one (global job index 1, 3 pods), IPs opposite to rank order. A trainer and a
/// pserver plan from the JobSet alone: their role, both groups and their own ranks. Then the
/// JobSet restarts: attempt 1's trainers exist while attempt 0's pservers still run and
/// attempt 1's are not created yet; a trainer of attempt 1 waits for its own attempt's
/// pservers instead of planning with the old ones.
#[test]
fn launchers_of_a_split_jobset_plan_their_roles() {
    let Cluster { api, dir } = Cluster::new();
    let docs = manifest(SPLIT_JOBSET).unwrap();
    let jobset = find(&docs, "JobSet");
    api.record(
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/jsp",
        200,
        jobset.to_string(),
    );
    // The pods the controllers make of replicated job `only` in `attempt`, IPs counting down
    // from `last_ip`: (name, IP, pod template).
    let create = |attempt: u32, only: &str, last_ip: &mut u8| {
        let mut pods = Vec::new();
        for (global, rjob) in jobset["spec"]["replicatedJobs"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let template = &rjob["template"]["spec"]["template"];
            let name = rjob["name"].as_str().unwrap();
            if name != only {
                continue;
            }
            for i in 0..rjob["template"]["spec"]["parallelism"].as_u64().unwrap() {
                let marks = json!({"jobset.sigs.k8s.io/jobset-name": "jsp",
                                   "jobset.sigs.k8s.io/replicatedjob-name": name,
                                   "jobset.sigs.k8s.io/job-index": "0",
                                   "jobset.sigs.k8s.io/job-global-index": global.to_string(),
                                   "jobset.sigs.k8s.io/restart-attempt": attempt.to_string(),
                                   "batch.kubernetes.io/job-completion-index": i.to_string()});
                let pod_name = format!("jsp-{name}-0-{i}-a{attempt}");
                let ip = format!("127.0.38.{last_ip}");
                *last_ip -= 1;
                api.put_pod(pod(&pod_name, &ip, template, marks));
                pods.push((pod_name, ip, template.clone()));
            }
        }
        pods
    };
    let mut last_ip = 30;
    let mut pods = create(0, "pserver", &mut last_ip);
    pods.extend(create(0, "trainer", &mut last_ip));
    let start = |(name, ip, template): &(String, String, Value)| {
        let mut env = container_env(template, name, ip, &[]);
        support::mount_job_secret(dir.path(), &mut env);
        env.push((
            "KUBECONFIG",
            dir.path().join("kubeconfig").display().to_string(),
        ));
        Launcher::start(dir.path(), name, &["plan"], &env)
    };
    let plan_of = |launcher: Launcher| {
        let done = launcher.wait(std::time::Duration::from_secs(60));
        assert_eq!(done.code(), 0, "{}", done.stderr);
        serde_json::from_str::<Value>(&done.stdout).unwrap()
    };
    let trainer = plan_of(start(&pods[3]));
    assert_eq!(trainer["trainer_id"], 1);
    assert_eq!(trainer["pserver_id"], Value::Null);
    assert_eq!(
        trainer["pserver_endpoints"],
        json!(["127.0.38.30:7164", "127.0.38.29:7164"])
    );
    assert_eq!(trainer["num_gradient_servers"], 3);
    let pserver = plan_of(start(&pods[1]));
    assert_eq!(pserver["pserver_id"], 1);
    assert_eq!(pserver["trainer_id"], Value::Null);

    for (name, _, _) in &pods[2..] {
        api.set_status("team-a", name, "Failed", None);
    }
    let trainers = create(1, "trainer", &mut last_ip);
    let waiting = start(&trainers[0]);
    waiting.wait_for_output("0/2 pods Running", std::time::Duration::from_secs(60));
    let pservers = create(1, "pserver", &mut last_ip);
    let trainer = plan_of(waiting);
    let endpoints: Vec<String> = pservers.iter().map(|p| format!("{}:7164", p.1)).collect();
    assert_eq!(trainer["pserver_endpoints"], json!(endpoints));
    assert_eq!(trainer["trainer_id"], 0);
}

/// checkov on the JobSet and the Volcano Job finds nothing beyond the exceptions documented in
/// k8s-examples/README.md (the same ones as for the Jobs). checkov takes the Volcano Job (`kind:
/// Job`) for a batch/v1 Job and finds no pod template at `spec.template`: its pod-template
/// checks fail there, and are checked here on the task templates instead.
#[test]
fn checkov_finds_nothing_new_in_jobset_and_volcano_manifests() {
    let dir = tempfile::tempdir().unwrap();
    for args in [JOBSET, VOLCANO] {
        let file = dir.path().join("m.yaml");
        let docs = manifest(args).unwrap();
        let text: Vec<String> = docs
            .iter()
            .map(|d| serde_saphyr::to_string(d).unwrap())
            .collect();
        std::fs::write(&file, text.join("---\n")).unwrap();
        let (passed, failures) = support::checkov(&file);
        let mut failed = Vec::new();
        for (id, resource) in failures {
            let misread = resource == "Job.team-a.vc"
                && ["CKV_K8S_23", "CKV_K8S_29", "CKV_K8S_31", "CKV_K8S_40"].contains(&id.as_str());
            let accepted = ["CKV_K8S_21", "CKV_K8S_43", "CKV_K8S_38", "CKV_K8S_11"];
            if !accepted.contains(&id.as_str()) && !misread {
                failed.push(format!("{id} on {resource}"));
            }
        }
        assert!(passed > 10, "checkov ran only {passed} checks");
        assert!(failed.is_empty(), "{args:?}: {failed:?}");
    }
    // What those four checks ask of a pod, on every task template of the Volcano Job.
    let docs = manifest(VOLCANO).unwrap();
    for task in find(&docs, "Job")["spec"]["tasks"].as_array().unwrap() {
        let pod = &task["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true); // CKV_K8S_23
        assert_eq!(pod["securityContext"]["runAsUser"], 10001); // CKV_K8S_40
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        ); // 31
        let container = &pod["containers"][0]["securityContext"]; // CKV_K8S_29
        assert_eq!(container["allowPrivilegeEscalation"], false);
        assert_eq!(container["runAsNonRoot"], true);
    }
}

/// Kubeflow Trainer v2: a ClusterTrainingRuntime for Paddle and an example TrainJob.
const TRAINER: &[&str] = &[
    "--job-name",
    "paddle",
    "--namespace",
    "team-a",
    "--image",
    "example.com/t/p:v1",
    "--trainers",
    "3",
    "--protocol",
    "collective",
    "--runtime",
    "trainer",
    "--ttl-seconds-after-finished",
    "3600",
    "--queue",
    "team-a-queue",
    "--",
    "python",
    "/workspace/train.py",
];

/// `manifest --runtime trainer`: both objects pass their CRD schemas (strictly), the runtime's
/// training step is the `node` replicated job (its container `node`, the label Trainer looks
/// for), the TrainJob names the runtime, and what Trainer v2 cannot express is refused.
#[test]
fn trainer_v2_manifests_match_their_crd_schemas() {
    let runtimes = Crd::load("trainer.kubeflow.org_clustertrainingruntimes.yaml");
    let train_jobs = Crd::load("trainer.kubeflow.org_trainjobs.yaml");
    let docs = manifest(TRAINER).unwrap();
    let runtime = find(&docs, "ClusterTrainingRuntime");
    assert_eq!(runtimes.violations(runtime), Vec::<String>::new());
    assert_eq!(runtime["spec"]["mlPolicy"]["numNodes"], 3);
    let node = &runtime["spec"]["template"]["spec"]["replicatedJobs"][0];
    assert_eq!(node["name"], "node");
    assert_eq!(
        node["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"],
        "trainer"
    );
    assert_eq!(
        node["template"]["spec"]["template"]["spec"]["containers"][0]["name"],
        "node"
    );
    let train_job = find(&docs, "TrainJob");
    assert_eq!(train_jobs.violations(train_job), Vec::<String>::new());
    assert_eq!(train_job["spec"]["runtimeRef"]["name"], "paddle");
    assert_eq!(train_job["spec"]["suspend"], true, "Kueue admits it");
    let role = find(&docs, "Role");
    assert_eq!(
        role["rules"][2],
        json!({"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]})
    );
    // The checker reads these schemas strictly too.
    let mut broken = train_job.clone();
    broken["spec"]["trainer"]["nodes"] = json!(3);
    assert_contains(
        &train_jobs.violations(&broken).join("\n"),
        ".spec.trainer.nodes: a field the schema does not have",
    );
    let base: Vec<&str> = TRAINER[..TRAINER.len() - 3].to_vec();
    for (extra, said) in [
        (
            &["--split", "--pservers", "1"][..],
            "invalid --split: \"true\": expected the one-kind layout with --runtime trainer",
        ),
        (
            &["--dns"][..],
            "invalid --runtime: \"trainer\": expected job with --dns or --indexed",
        ),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        assert_contains(&manifest(&args).unwrap_err(), said);
    }
}

/// A TrainJob of the runtime as Trainer v2 renders it (a JobSet named after the TrainJob, its
/// `node` job of numNodes pods) and the pods the JobSet and Job controllers make of it: their
/// launchers, with exactly the runtime's environment, plan the job, ranked by completion index.
#[test]
fn launchers_of_a_rendered_trainjob_plan_the_job() {
    let Cluster { api, dir } = Cluster::new();
    let docs = manifest(TRAINER).unwrap();
    let runtime = find(&docs, "ClusterTrainingRuntime");
    let name = find(&docs, "TrainJob")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let mut jobset_spec = runtime["spec"]["template"]["spec"].clone();
    let nodes = 2;
    for field in ["parallelism", "completions"] {
        jobset_spec["replicatedJobs"][0]["template"]["spec"][field] = json!(nodes);
    }
    api.record(
        &format!("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/{name}"),
        200,
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
               "metadata": {"name": name, "namespace": "team-a",
                            "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
               "spec": jobset_spec})
        .to_string(),
    );
    let template = &jobset_spec["replicatedJobs"][0]["template"]["spec"]["template"];
    let ips = ["127.0.38.12", "127.0.38.11"];
    for (i, ip) in ips.iter().enumerate() {
        let marks = json!({"jobset.sigs.k8s.io/jobset-name": name,
                           "jobset.sigs.k8s.io/replicatedjob-name": "node",
                           "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/job-global-index": "0",
                           "jobset.sigs.k8s.io/restart-attempt": "0",
                           "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
                           "batch.kubernetes.io/job-completion-index": i.to_string()});
        api.put_pod(pod(&format!("{name}-node-0-{i}-x"), ip, template, marks));
    }
    for (i, ip) in ips.iter().enumerate() {
        let pod_name = format!("{name}-node-0-{i}-x");
        let (plan, stderr) = plan_as_the_pod(dir.path(), template, &pod_name, ip);
        assert_eq!(plan["trainer_id"], i, "{plan:#}");
        assert_eq!(plan["job"], name.as_str());
        assert_eq!(plan["num_gradient_servers"], nodes);
        assert_contains(
            &stderr,
            &format!("batch system jobset: JobSet {name}, replicated job node"),
        );
    }
}

/// Every pod template under `value` (an object's `template` whose spec has containers).
fn pod_templates(value: &Value) -> Vec<&Value> {
    match value {
        Value::Object(map) => map
            .iter()
            .flat_map(|(key, child)| {
                if key == "template" && child["spec"]["containers"].is_array() {
                    vec![child]
                } else {
                    pod_templates(child)
                }
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(pod_templates).collect(),
        _ => Vec::new(),
    }
}

/// A platform's labels, annotations, pull Secrets and pull policy reach the workload object
/// and every pod of each runtime as generated (the objects still pass their CRDs), and a bad
/// one, or a label the launcher finds its pods by, is refused in one line with status 2.
#[test]
fn labels_annotations_and_pull_secrets_reach_every_runtime() {
    let extra = [
        "--label",
        "example.com/cost-center=ml-42",
        "--label",
        "kueue.x-k8s.io/priority-class=high",
        "--annotation",
        "example.com/topology=rack 1, then rack 2",
        "--image-pull-secret",
        "regcred",
        "--image-pull-policy",
        "IfNotPresent",
    ];
    let with_extra = |args: &[&'static str]| -> Vec<&'static str> {
        let end = args.iter().position(|a| *a == "--").unwrap();
        let mut args = args.to_vec();
        args.splice(end..end, extra);
        args
    };
    let jobsets = Crd::load("jobset.x-k8s.io_jobsets.yaml");
    let runtimes = Crd::load("trainer.kubeflow.org_clustertrainingruntimes.yaml");
    let volcano = Crd::load("batch.volcano.sh_jobs.yaml");
    for (args, kind, crd) in [
        (JOBSET, "JobSet", Some(&jobsets)),
        (TRAINER, "ClusterTrainingRuntime", Some(&runtimes)),
        (COLOCATED_VOLCANO, "Job", Some(&volcano)),
    ] {
        let docs = manifest(&with_extra(args)).unwrap();
        let object = find(&docs, kind);
        if let Some(crd) = crd {
            assert_eq!(crd.violations(object), Vec::<String>::new(), "{kind}");
        }
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["example.com/cost-center"], "ml-42", "{kind}");
        assert_eq!(labels["kueue.x-k8s.io/priority-class"], "high", "{kind}");
        let annotations = &object["metadata"]["annotations"];
        assert_eq!(
            annotations["example.com/topology"], "rack 1, then rack 2",
            "{kind}"
        );
        let pods = pod_templates(object);
        assert!(!pods.is_empty(), "{kind} has no pod template");
        for pod in pods {
            assert_eq!(
                pod["metadata"]["labels"]["example.com/cost-center"], "ml-42",
                "{kind}"
            );
            assert_eq!(
                pod["metadata"]["annotations"]["example.com/topology"], "rack 1, then rack 2",
                "{kind}"
            );
            assert_eq!(
                pod["spec"]["imagePullSecrets"],
                json!([{"name": "regcred"}]),
                "{kind}"
            );
            for container in pod["spec"]["containers"].as_array().unwrap() {
                assert_eq!(container["imagePullPolicy"], "IfNotPresent", "{kind}");
            }
        }
        // The objects that are no workload get none of it.
        let account = find(&docs, "ServiceAccount");
        assert!(account["metadata"]["labels"]["example.com/cost-center"].is_null());
    }
    for (flag, value, expected) in [
        (
            "--label",
            "bad key=v",
            "invalid --label: \"bad key=v\": expected a label key",
        ),
        (
            "--label",
            "team=not a value",
            "invalid --label: \"team=not a value\": expected a label value",
        ),
        (
            "--annotation",
            "novalue",
            "invalid --annotation: \"novalue\": expected KEY=VALUE",
        ),
        (
            "--image-pull-secret",
            "Reg_Cred",
            "invalid --image-pull-secret: \"Reg_Cred\": expected a Secret's name",
        ),
    ] {
        let mut args = JOBSET.to_vec();
        args.splice(0..0, [flag, value]);
        let error = manifest(&args).unwrap_err();
        assert!(error.contains(expected), "{flag} {value}: {error}");
    }
}
