//! `manifest` output: valid Kubernetes objects (k8s-openapi types, kubernetes-validate --strict,
//! checkov), wired so that launchers started from it plan a job; and k8s-examples/ in sync.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde_json::{json, Value};
use support::fake_api::FakeApi;
use support::{assert_contains, Cluster, Launcher, LAUNCHER};

/// checkov findings that are deliberate: the image tag and the namespace are the user's choice,
/// the launcher needs its service-account token to watch the job's pods, and the pods have no
/// CPU limit unless asked (`--cpu-limit`: a limit throttles data loaders and NCCL in bursts).
const ACCEPTED_CHECKS: &[&str] = &["CKV_K8S_21", "CKV_K8S_43", "CKV_K8S_38", "CKV_K8S_11"];

const VARIANTS: &[&[&str]] = &[
    &[
        "--job-name",
        "colo",
        "--namespace",
        "team-a",
        "--image",
        "example.com/t/p:v1",
        "--trainers",
        "3",
    ],
    &[
        "--job-name",
        "idx",
        "--namespace",
        "team-a",
        "--image",
        "example.com/t/p:v1",
        "--trainers",
        "2",
        "--indexed",
        "--protocol",
        "collective",
        "--gpu",
        "1",
        "--",
        "python",
        "/workspace/train.py",
    ],
    &[
        "--job-name",
        "sp",
        "--namespace",
        "team-a",
        "--image",
        "example.com/t/p:v2",
        "--split",
        "--pservers",
        "2",
        "--trainers",
        "3",
        "--protocol",
        "v2",
        "--passes",
        "5",
        "--env",
        "PADDLE_INIT_USE_GPU=0",
        "--",
        "python",
        "/workspace/train.py",
    ],
    &[
        "--job-name",
        "fl",
        "--namespace",
        "team-a",
        "--image",
        "example.com/t/p:v3",
        "--split",
        "--pservers",
        "1",
        "--trainers",
        "2",
        "--protocol",
        "fleet",
        "--volume-claim",
        "data",
        "--max-preemptions",
        "3",
        "--entry",
        "python /workspace/ps.py",
    ],
    &[
        "--job-name",
        "rs",
        "--namespace",
        "team-a",
        "--image",
        "example.com/t/p:v1",
        "--trainers",
        "3",
        "--protocol",
        "collective",
        "--max-restarts",
        "2",
        "--",
        "python",
        "/workspace/train.py",
    ],
    &[
        "--job-name",
        "gp",
        "--image",
        "example.com/t/p:v1",
        "--trainers",
        "2",
        "--gpu",
        "4",
        "--node-selector",
        "cloud.google.com/gke-accelerator=nvidia-l4",
        "--toleration",
        "nvidia.com/gpu=present:NoSchedule",
        "--priority-class",
        "gpu-high",
        "--termination-grace-period",
        "90",
        "--ttl-seconds-after-finished",
        "3600",
        "--protocol",
        "collective",
        "--",
        "python",
        "/workspace/train.py",
    ],
];

fn manifest(args: &[&str]) -> String {
    let out = Command::new(LAUNCHER)
        .arg("manifest")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_document_is_a_valid_kubernetes_object() {
    for args in VARIANTS {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(args)).unwrap();
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        let jobs = if args.contains(&"--split") { 2 } else { 1 };
        // DNS membership needs no API access, so no RBAC objects at all.
        let access: &[&str] = if args.contains(&"--dns") {
            &["Service", "NetworkPolicy"]
        } else if args.contains(&"--max-restarts") {
            // The headless Service that names the coordinator's pod, then the API access.
            &[
                "Service",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "NetworkPolicy",
            ]
        } else {
            &["ServiceAccount", "Role", "RoleBinding", "NetworkPolicy"]
        };
        assert_eq!(&kinds[..access.len()], access);
        assert_eq!(kinds[access.len()..], vec!["Job"; jobs][..]);
        for doc in docs {
            match doc["kind"].as_str().unwrap() {
                "ServiceAccount" => drop(serde_json::from_value::<ServiceAccount>(doc).unwrap()),
                "Role" => {
                    let role: Role = serde_json::from_value(doc).unwrap();
                    let rules = role.rules.unwrap();
                    // Least privilege: reading pods, creating events (the job's story), and
                    // where the pods are one Job's, reading and annotating that Job (the
                    // restart count a whole-Job restart goes on from).
                    assert_eq!(rules.len(), 2 + usize::from(jobs == 1), "least privilege");
                    assert_eq!(rules[0].verbs, ["get", "list", "watch"]);
                    assert_eq!(
                        rules[0].resources.as_deref(),
                        Some(&["pods".to_string()][..])
                    );
                    assert_eq!(rules[1].verbs, ["create"]);
                    assert_eq!(
                        rules[1].resources.as_deref(),
                        Some(&["events".to_string()][..])
                    );
                    if let Some(jobs_rule) = rules.get(2) {
                        assert_eq!(jobs_rule.verbs, ["get", "patch"]);
                        assert_eq!(
                            jobs_rule.resources.as_deref(),
                            Some(&["jobs".to_string()][..])
                        );
                        assert_eq!(
                            jobs_rule.api_groups.as_deref(),
                            Some(&["batch".to_string()][..])
                        );
                        // Its own Job only: the trainer can read the token too.
                        assert_eq!(jobs_rule.resource_names.as_ref().map(Vec::len), Some(1));
                    }
                }
                "RoleBinding" => drop(serde_json::from_value::<RoleBinding>(doc).unwrap()),
                "Service" => {
                    let spec = serde_json::from_value::<Service>(doc)
                        .unwrap()
                        .spec
                        .unwrap();
                    assert_eq!(spec.cluster_ip.as_deref(), Some("None"), "headless");
                    assert_eq!(spec.publish_not_ready_addresses, Some(true));
                }
                "NetworkPolicy" => drop(serde_json::from_value::<NetworkPolicy>(doc).unwrap()),
                "Job" => {
                    let job: Job = serde_json::from_value(doc).unwrap();
                    let pod = job.spec.unwrap().template.spec.unwrap();
                    let security = pod.containers[0].security_context.clone().unwrap();
                    assert_eq!(security.run_as_non_root, Some(true));
                    assert_eq!(security.read_only_root_filesystem, Some(true));
                }
                other => panic!("unexpected {other}"),
            }
        }
    }
}

#[test]
fn kubernetes_validate_strict_accepts_every_variant() {
    let dir = tempfile::tempdir().unwrap();
    for (i, args) in VARIANTS.iter().enumerate() {
        let file = dir.path().join(format!("{i}.yaml"));
        std::fs::write(&file, manifest(args)).unwrap();
        support::assert_valid_on_every_kubernetes(&file, &format!("{args:?}"));
    }
}

#[test]
fn checkov_finds_nothing_beyond_the_documented_exceptions() {
    let dir = tempfile::tempdir().unwrap();
    for (i, args) in VARIANTS.iter().enumerate() {
        let file = dir.path().join(format!("{i}.yaml"));
        std::fs::write(&file, manifest(args)).unwrap();
        let (passed, failures) = support::checkov(&file);
        let failed: BTreeSet<String> = failures.into_iter().map(|(id, _)| id).collect();
        assert!(passed > 50, "checkov ran only {passed} checks");
        let unexpected: Vec<&String> = failed
            .iter()
            .filter(|c| !ACCEPTED_CHECKS.contains(&c.as_str()))
            .collect();
        assert!(
            unexpected.is_empty(),
            "{args:?}: checkov failed {unexpected:?}"
        );
    }
}

/// Pods as the Job controller makes them from a manifest's Job, Running on loopback IPs.
fn pods_of(api: &FakeApi, job: &Value, first_ip: u8) -> Vec<(String, String)> {
    let name = job["metadata"]["name"].as_str().unwrap();
    let count = job["spec"]["parallelism"].as_u64().unwrap();
    (0..count)
        .map(|i| {
            let pod_name = format!("{name}-{i}-x");
            let ip = format!("127.0.0.{}", first_ip as u64 + i);
            let mut labels = job["spec"]["template"]["metadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            labels["job-name"] = json!(name);
            api.put_pod(json!({"kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": pod_name, "namespace": job["metadata"]["namespace"], "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running", "podIP": ip}}));
            (pod_name, ip)
        })
        .collect()
}

/// The container's environment as the kubelet would set it for one pod.
fn pod_env(job: &Value, pod: &(String, String)) -> Vec<(&'static str, String)> {
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let mut env: Vec<(&'static str, String)> = Vec::new();
    for var in container["env"].as_array().unwrap() {
        let name: &'static str =
            Box::leak(var["name"].as_str().unwrap().to_string().into_boxed_str());
        let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("status.podIP") => pod.1.clone(),
            Some("metadata.name") => pod.0.clone(),
            Some("metadata.namespace") => {
                job["metadata"]["namespace"].as_str().unwrap().to_string()
            }
            Some("spec.nodeName") => "node-a".to_string(),
            Some(other) => panic!("unexpected field {other}"),
            None => var["value"].as_str().unwrap().to_string(),
        };
        env.push((name, value));
    }
    // This machine's interface (pods have eth0); `plan` writes nothing to the work directory.
    env.push(("CONF_PADDLE_NIC", "lo".into()));
    env
}

/// Launchers started with exactly the manifests' environment (downward API filled in as the
/// kubelet would) plan the job: the manifests and the launcher agree.
#[test]
fn launchers_started_from_each_manifest_plan_the_job() {
    for (v, args) in VARIANTS.iter().enumerate() {
        let Cluster { api, dir } = Cluster::new();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(args)).unwrap();
        let jobs: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Job").collect();
        let pods: Vec<Vec<(String, String)>> = jobs
            .iter()
            .enumerate()
            .map(|(j, job)| pods_of(&api, job, 60 + 10 * v as u8 + 5 * j as u8))
            .collect();
        for (job, pods) in jobs.iter().zip(&pods) {
            if args.contains(&"--dns") {
                // DNS discovery itself is tested against dnsmasq (tests/dns.rs): here, that the
                // pod's environment selects it and needs no API.
                let mut env = pod_env(job, &pods[0]);
                support::mount_job_secret(dir.path(), &mut env);
                let done = Launcher::start(dir.path(), "doctor", &["doctor"], &env)
                    .wait(std::time::Duration::from_secs(60));
                assert_contains(
                    &done.stdout,
                    "peers: the DNS records of dn-pods (no Kubernetes API",
                );
                // There is no such Service here: the doctor says the job would not start.
                assert_eq!(done.code(), 71, "{}", done.stdout);
                continue;
            }
            let mut ids = BTreeSet::new();
            for pod in pods {
                let mut env = pod_env(job, pod);
                support::mount_job_secret(dir.path(), &mut env);
                env.push((
                    "KUBECONFIG",
                    dir.path().join("kubeconfig").display().to_string(),
                ));
                let container_args: Vec<String> = serde_json::from_value(
                    job["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
                )
                .unwrap();
                let mut argv: Vec<&str> = container_args.iter().map(String::as_str).collect();
                argv[0] = "plan";
                let done = Launcher::start(dir.path(), &pod.0, &argv, &env)
                    .wait(std::time::Duration::from_secs(60));
                assert_eq!(done.code(), 0, "{args:?} {}: {}", pod.0, done.stderr);
                let plan: Value = serde_json::from_str(&done.stdout).unwrap();
                let id = if plan["trainer_id"].is_null() {
                    &plan["pserver_id"]
                } else {
                    &plan["trainer_id"]
                };
                ids.insert(id.as_u64().unwrap());
                let protocol = args
                    .iter()
                    .position(|a| *a == "--protocol")
                    .map_or("v1", |i| args[i + 1]);
                assert_eq!(plan["protocol"], protocol);
            }
            assert_eq!(ids.len(), pods.len(), "{args:?}: ranks are not distinct");
        }
    }
}

/// Each file in k8s-examples/ starts with the `manifest` command that generated it.
#[test]
fn k8s_examples_are_what_manifest_generates() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("k8s-examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let command = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# Generated by: paddle-launcher manifest "))
            .unwrap_or_else(|| panic!("{} has no generator line", path.display()));
        let args = split_words(command);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(
            manifest(&args),
            text,
            "{} is out of date: regenerate it with its first line's command",
            path.display()
        );
        checked += 1;
    }
    assert!(
        checked >= 3,
        "expected the colocated, indexed and split examples"
    );
}

/// Words of a command line, with "double-quoted" words as `manifest` writes them.
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c == ' ' {
            chars.next();
        } else if c == '"' {
            chars.next();
            let mut word = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => word.extend(chars.next()),
                    '"' => break,
                    c => word.push(c),
                }
            }
            words.push(word);
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                word.push(c);
                chars.next();
            }
            words.push(word);
        }
    }
    words
}

/// `manifest` with these extra arguments: its status, stdout and stderr.
fn manifest_output(extra: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(LAUNCHER)
        .args([
            "manifest",
            "--job-name",
            "bad",
            "--image",
            "example.com/t/p:v1",
        ])
        .args(extra)
        .env_remove("PADDLE_LAUNCHER_LOG_FORMAT")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Ports the pods' launchers would refuse are refused by `manifest`, with the launcher's rule:
/// status 2, nothing printed, one line naming the manifest flag, its value and the variable.
#[test]
fn ports_the_launcher_refuses_are_refused_with_one_line() {
    let cases: &[(&[&str], &str, &str, &str)] = &[
        // 65535 + 2 ports overflowed u16 (containerPort 0, or a panic in a debug build).
        (
            &["--port", "65535", "--ports-num", "2"],
            "--port",
            "65535",
            "CONF_PADDLE_PORT",
        ),
        (
            &["--ports-num", "0"],
            "--ports-num",
            "0",
            "CONF_PADDLE_PORTS_NUM",
        ),
        (&["--port", "0"], "--port", "0", "CONF_PADDLE_PORT"),
        (
            &[
                "--trainer-port",
                "0",
                "--protocol",
                "collective",
                "--",
                "python",
                "/t.py",
            ],
            "--trainer-port",
            "0",
            "PADDLE_LAUNCHER_TRAINER_PORT",
        ),
    ];
    for (extra, flag, value, variable) in cases {
        let (code, stdout, stderr) = manifest_output(extra);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stdout.is_empty(), "{extra:?} printed {stdout}");
        assert!(!stderr.contains("panicked"), "{extra:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{extra:?}: {stderr}");
        for word in [format!("invalid {flag}: \"{value}\""), variable.to_string()] {
            assert!(lines[0].contains(&word), "{extra:?}: no {word} in {stderr}");
        }
    }
}

/// Resources as the API server parses them, and the launcher's own variables by name: each
/// mistake one line, status 2, with what is accepted (or the name that was meant).
#[test]
fn resources_and_launcher_variables_are_checked_by_name() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--memory", "8GB"],
            &["invalid --memory: \"8GB\"", "8Gi, 512Mi or 8G bytes"],
        ),
        (
            &["--cpu", "2cores"],
            &["invalid --cpu: \"2cores\"", "4, 500m or 1.5 CPUs"],
        ),
        (
            &["--psmemory", "0"],
            &["invalid --psmemory: \"0\"", "above 0"],
        ),
        (
            &["--env", "PADDLE_LAUNCHER_HANG_TIMEOUTS=60"],
            &[
                "invalid --env",
                "did you mean PADDLE_LAUNCHER_HANG_TIMEOUT?",
            ],
        ),
        (
            &["--env", "PADDLE_LAUNCHER_SOMETHING_ELSE_ENTIRELY=1"],
            &[
                "invalid --env",
                "is none (docs/configuration.md lists them)",
            ],
        ),
        (
            &["--env", "PADDLE_LAUNCHR_HANG_TIMEOUT=60"],
            &[
                "invalid --env",
                "did you mean PADDLE_LAUNCHER_HANG_TIMEOUT?",
            ],
        ),
    ];
    for (extra, said) in cases {
        let (code, stdout, stderr) = manifest_output(extra);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stdout.is_empty(), "{extra:?} printed {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{extra:?}: {stderr}");
        for word in *said {
            assert!(stderr.contains(word), "{extra:?}: no {word} in {stderr}");
        }
    }
    let (code, _, stderr) = manifest_output(&["--memory", "1.5Gi", "--cpu", "500m"]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// What a GPU pool asks of a pod, given as options: a memory-backed /dev/shm (sized as the
/// pod's memory unless given), its node labels and taints, a priority class, the grace period
/// the launchers are told, a time to live; a writable HOME on every pod. Each bad value is one
/// line, status 2.
#[test]
fn gpu_pool_options_reach_every_pod() {
    let job_of = |extra: &[&str]| -> Value {
        let mut args = vec!["--job-name", "g", "--image", "example.com/t/p:v1"];
        args.extend(extra);
        args.extend(["--protocol", "collective", "--", "python", "/t.py"]);
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(&args)).unwrap();
        docs.into_iter().find(|d| d["kind"] == "Job").unwrap()
    };
    let job = job_of(&[
        "--gpu",
        "2",
        "--memory",
        "16Gi",
        "--node-selector",
        "cloud.google.com/gke-accelerator=nvidia-l4",
        "--toleration",
        "nvidia.com/gpu=present:NoSchedule",
        "--toleration",
        "dedicated:NoExecute",
        "--priority-class",
        "gpu-high",
        "--termination-grace-period",
        "120",
        "--ttl-seconds-after-finished",
        "3600",
    ]);
    assert_eq!(job["spec"]["ttlSecondsAfterFinished"], 3600);
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 120);
    assert_eq!(pod["priorityClassName"], "gpu-high");
    assert_eq!(
        pod["nodeSelector"]["cloud.google.com/gke-accelerator"],
        "nvidia-l4"
    );
    let tolerations = each(&pod["tolerations"], &[]);
    assert_eq!(tolerations[0]["key"], "nvidia.com/gpu");
    assert_eq!(tolerations[0]["operator"], "Equal");
    assert_eq!(tolerations[0]["value"], "present");
    assert_eq!(tolerations[0]["effect"], "NoSchedule");
    assert_eq!(tolerations[1]["operator"], "Exists");
    assert_eq!(tolerations[1]["effect"], "NoExecute");
    fn volume(pod: &Value, name: &str) -> Option<Value> {
        each(&pod["volumes"], &[])
            .into_iter()
            .find(|v| v["name"] == name)
            .cloned()
    }
    let shm = volume(pod, "shm").expect("a /dev/shm on a GPU pod");
    assert_eq!(shm["emptyDir"]["medium"], "Memory");
    assert_eq!(shm["emptyDir"]["sizeLimit"], "16Gi");
    let container = &pod["containers"][0];
    let mounted = |path: &str| {
        each(&container["volumeMounts"], &[])
            .into_iter()
            .any(|m| m["mountPath"] == path)
    };
    assert!(mounted("/dev/shm") && mounted("/home/paddle-launcher"));
    let env = |c: &Value, name: &str| {
        each(&c["env"], &[])
            .into_iter()
            .find(|v| v["name"] == name)
            .map(|v| v["value"].as_str().unwrap().to_string())
    };
    assert_eq!(
        env(container, "PADDLE_LAUNCHER_POD_GRACE_PERIOD").as_deref(),
        Some("120")
    );
    assert_eq!(
        env(container, "HOME").as_deref(),
        Some("/home/paddle-launcher")
    );
    // Without a GPU, no /dev/shm unless asked; HOME all the same.
    let cpu = job_of(&[]);
    let cpu_pod = &cpu["spec"]["template"]["spec"];
    assert!(volume(cpu_pod, "shm").is_none());
    assert!(volume(cpu_pod, "home").is_some());
    let asked = job_of(&["--shm-size", "4Gi"]);
    let shm = volume(&asked["spec"]["template"]["spec"], "shm").unwrap();
    assert_eq!(shm["emptyDir"]["sizeLimit"], "4Gi");
    for (extra, said) in [
        (&["--shm-size", "4GB"][..], "invalid --shm-size: \"4GB\""),
        (
            &["--node-selector", "pool"][..],
            "invalid --node-selector: \"pool\"",
        ),
        (
            &["--toleration", "gpu:Sometimes"][..],
            "invalid --toleration: \"gpu:Sometimes\"",
        ),
        (
            &["--priority-class", "High"][..],
            "invalid --priority-class: \"High\"",
        ),
    ] {
        let (code, stdout, stderr) = manifest_output(extra);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{extra:?}: {stderr}");
        assert!(stderr.contains(said), "{extra:?}: {stderr}");
    }
}

/// The values `manifest` writes into the pods' environment are validated as a whole, as the
/// launcher does: the user's `--env` and other combinations too.
#[test]
fn pod_environment_the_launcher_refuses_is_refused() {
    // TRAIN_CONFIG_DIR names a directory under JOB_PATH, which only --volume-claim sets.
    let (code, stdout, stderr) = manifest_output(&["--env", "TRAIN_CONFIG_DIR=conf"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("invalid --env TRAIN_CONFIG_DIR: \"conf\""),
        "{stderr}"
    );
    let (code, _, stderr) = manifest_output(&["--namespace", "Team_A"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid --namespace: \"Team_A\""),
        "{stderr}"
    );
}

/// Issue 52: every generated Job counts a pod's end as the launchers do. A free preemption
/// (83: a pod deleted without the eviction API, within --max-preemptions) and a disruption
/// Kubernetes marks are ignored; the launcher's configuration statuses fail the Job at once,
/// with or without restarts in place; with them, every other status but a kill's does too.
#[test]
fn every_generated_job_counts_a_pods_end_as_the_launchers_do() {
    let policy = |extra: &[&str]| -> Vec<Value> {
        let mut args = vec!["--job-name", "pfp", "--image", "example.com/t/p:v1"];
        args.extend(extra);
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(&args)).unwrap();
        let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
        let container = &job["spec"]["template"]["spec"]["containers"][0]["name"];
        let rules = job["spec"]["podFailurePolicy"]["rules"].as_array().unwrap();
        for rule in rules.iter().filter(|r| r.get("onExitCodes").is_some()) {
            assert_eq!(&rule["onExitCodes"]["containerName"], container, "{rule}");
        }
        rules
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if let Some(codes) = r.get_mut("onExitCodes") {
                    codes.as_object_mut().unwrap().remove("containerName");
                }
                r
            })
            .collect()
    };
    let disrupted = json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]});
    let free = json!({"action": "Ignore", "onExitCodes": {"operator": "In", "values": [83]}});
    assert_eq!(
        policy(&[]),
        vec![
            disrupted.clone(),
            free.clone(),
            json!({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2, 76, 126, 127]}}),
        ]
    );
    assert_eq!(
        policy(&["--max-restarts", "2"]),
        vec![
            disrupted,
            free,
            json!({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [137, 143]}}),
        ]
    );
}

/// The status of a launcher started with the pod's environment `env` (`run`): 2 when the pods
/// would refuse it; whatever it does after its configuration is read (it finds no cluster here)
/// ends it within the limit, or it is stopped and counted as accepted.
fn pods_status(dir: &std::path::Path, env: &[(&'static str, String)]) -> (Option<i32>, String) {
    let err = dir.join("pod.stderr");
    let mut child = Command::new(LAUNCHER)
        .arg("run")
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let said = || std::fs::read_to_string(&err).unwrap_or_default();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), said());
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return (None, said());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Issue 52: `manifest --env` checks every launcher variable with the parser the pods use. For
/// each PADDLE_LAUNCHER_* the launcher reads (`run`'s options and those every subcommand takes,
/// such as --log-format), a value a pod started with the generated environment refuses (status
/// 2) is refused by `manifest` too, naming the variable; a pod that accepts it is not refused
/// by `manifest` for it, unless the manifest sets the variable itself.
#[test]
fn every_launcher_variable_the_pods_refuse_manifest_refuses() {
    use clap::CommandFactory;
    let cli = paddle_launcher::cli::Cli::command();
    let run = cli.find_subcommand("run").unwrap();
    let names: BTreeSet<String> = run
        .get_arguments()
        .chain(cli.get_arguments().filter(|a| a.is_global_set()))
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .filter(|e| e.starts_with("PADDLE_LAUNCHER_"))
        .collect();
    assert!(names.contains("PADDLE_LAUNCHER_LOG_FORMAT"), "{names:?}");
    let args = ["--job-name", "bad", "--image", "example.com/t/p:v1"];
    let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(&args)).unwrap();
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut env = pod_env(job, &("bad-0-x".into(), "127.0.0.91".into()));
    support::mount_job_secret(dir.path(), &mut env);
    let own: BTreeSet<&str> = env.iter().map(|(name, _)| *name).collect();
    for (name, value) in env.iter_mut() {
        if ["PADDLE_LAUNCHER_WORKDIR", "PADDLE_LAUNCHER_ID_DIR", "HOME"].contains(name) {
            *value = dir.path().display().to_string();
        }
    }
    env.push(("PADDLE_LAUNCHER_TERMINATION_LOG", String::new()));
    env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "1".into()));
    let (status, said) = pods_status(dir.path(), &env);
    assert_ne!(status, Some(2), "the generated pod refuses itself: {said}");
    let mut refused_by_pods = Vec::new();
    let mut disagree = Vec::new();
    for name in &names {
        let bad = "garbage!";
        let mut pod = env.clone();
        pod.retain(|(n, _)| n != name);
        pod.push((Box::leak(name.clone().into_boxed_str()), bad.to_string()));
        // Each in a directory of its own: a relative path one value makes is not another's.
        let cwd = dir.path().join(name);
        std::fs::create_dir(&cwd).unwrap();
        let (pods, said) = pods_status(&cwd, &pod);
        let (code, _, stderr) = manifest_output(&["--env", &format!("{name}={bad}")]);
        let last = |text: &str| text.lines().last().unwrap_or_default().to_string();
        if pods == Some(2) {
            refused_by_pods.push(name.clone());
            if POD_FILES.contains(&name.as_str()) {
                continue;
            }
            if code != Some(2) || !stderr.contains(name.as_str()) {
                disagree.push(format!(
                    "{name}: the pods refuse it ({}), manifest: {code:?} {}",
                    last(&said),
                    last(&stderr)
                ));
            }
        } else if !own.contains(name.as_str()) && code != Some(0) {
            disagree.push(format!(
                "{name}: the pods accept it, manifest: {code:?} {}",
                last(&stderr)
            ));
        }
    }
    assert!(disagree.is_empty(), "{disagree:#?}");
    assert!(
        refused_by_pods.contains(&"PADDLE_LAUNCHER_LOG_FORMAT".to_string()),
        "{refused_by_pods:?}"
    );
    // The exceptions are refused by the pods (else they would be none).
    for name in POD_FILES {
        assert!(
            refused_by_pods.iter().any(|r| r == name),
            "{name}: {refused_by_pods:?}"
        );
    }
}

/// The variables whose value the pods check against their own files (a pattern that matches
/// none of them, a path taken by something else): `manifest` cannot see the pods' files.
const POD_FILES: &[&str] = &["PADDLE_LAUNCHER_TEST_FILES", "PADDLE_LAUNCHER_TRAIN_FILES"];

/// The items of `list`, each followed down `path`.
fn each<'a>(list: &'a Value, path: &[&str]) -> Vec<&'a Value> {
    let mut out = Vec::new();
    for item in list.as_array().into_iter().flatten() {
        let mut at = item;
        for key in path {
            at = &at[*key];
        }
        out.push(at);
    }
    out
}

/// The pod templates of a Job, a JobSet's replicated jobs or a Volcano Job's tasks.
fn pod_templates(doc: &Value) -> Vec<&Value> {
    match (doc["apiVersion"].as_str(), doc["kind"].as_str()) {
        (Some("batch/v1"), Some("Job")) => vec![&doc["spec"]["template"]],
        (Some("jobset.x-k8s.io/v1alpha2"), _) => each(
            &doc["spec"]["replicatedJobs"],
            &["template", "spec", "template"],
        ),
        (Some("batch.volcano.sh/v1alpha1"), _) => each(&doc["spec"]["tasks"], &["template"]),
        (Some("trainer.kubeflow.org/v1alpha1"), Some("ClusterTrainingRuntime")) => each(
            &doc["spec"]["template"]["spec"]["replicatedJobs"],
            &["template", "spec", "template"],
        ),
        _ => Vec::new(),
    }
}

/// The program of the container: the first absolute path after `--` in its args, else in ENTRY.
fn program_path(container: &Value) -> Option<String> {
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    let after = args.iter().skip_while(|a| *a != "--").skip(1);
    let entry = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "ENTRY")
        .and_then(|v| v["value"].as_str())
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect::<Vec<_>>();
    after
        .chain(entry.iter())
        .find(|word| word.starts_with('/'))
        .cloned()
}

/// No volume of a generated pod is mounted over the training program (the image's
/// /workspace/train.py stays visible), in every variant and every file of k8s-examples/.
#[test]
fn no_volume_hides_the_program() {
    let mut manifests: Vec<(String, String)> = VARIANTS
        .iter()
        .map(|args| (format!("{args:?}"), manifest(args)))
        .collect();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("k8s-examples");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            manifests.push((path.display().to_string(), text));
        }
    }
    let mut checked = 0;
    for (source, text) in &manifests {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap();
        for template in docs.iter().flat_map(pod_templates) {
            let container = &template["spec"]["containers"][0];
            let Some(program) = program_path(container) else {
                continue;
            };
            for mount in container["volumeMounts"].as_array().unwrap() {
                let at = mount["mountPath"].as_str().unwrap().trim_end_matches('/');
                assert!(
                    !(program == at || program.starts_with(&format!("{at}/"))),
                    "{source}: the volume {} at {at} hides the program {program}",
                    mount["name"]
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} containers name their program");
}

/// `manifest --help` describes every option and names every kind of object it prints.
#[test]
fn manifest_help_describes_every_option_and_object() {
    use clap::CommandFactory;
    let cli = paddle_launcher::cli::Cli::command();
    let manifest = cli.find_subcommand("manifest").unwrap();
    // The short help (`-h`, the subcommand list) and the long one (`--help`).
    let about = manifest.get_about().unwrap().to_string();
    for kind in [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "Job",
    ] {
        assert!(
            about.contains(kind),
            "`manifest` says nothing of {kind}: {about}"
        );
    }
    let long = manifest.get_long_about().unwrap().to_string();
    assert!(long.contains("headless Service"), "{long}");
    let undescribed: Vec<String> = manifest
        .get_arguments()
        .filter(|a| a.get_help().is_none() && a.get_id() != "help")
        .map(|a| a.get_id().to_string())
        .collect();
    assert!(undescribed.is_empty(), "no help for {undescribed:?}");
}

/// Found by a new user: a claim mounted over the program or over another mount, and an
/// --env that overrides what the manifest sets itself, were accepted.
#[test]
fn mounts_and_variables_that_would_break_the_pods_are_refused() {
    let program = [
        "--protocol",
        "collective",
        "--",
        "python",
        "/workspace/train.py",
    ];
    let cases: &[(&[&str], &str)] = &[
        (
            &["--volume-claim", "pvc", "--job-path", "/workspace"],
            "--job-path",
        ),
        (
            &["--volume-claim", "pvc", "--job-path", "/tmp"],
            "--job-path",
        ),
        (
            &[
                "--volume-claim",
                "pvc",
                "--job-path",
                "/var/lib/paddle-launcher/x",
            ],
            "--job-path",
        ),
        (&["--volume-claim", "pvc", "--job-path", "/"], "--job-path"),
        (
            &["--volume-claim", "pvc", "--job-path", "rel"],
            "--job-path",
        ),
        (&["--env", "JOB_NAME=other"], "--env"),
        (&["--env", "POD_IP=1.2.3.4"], "--env"),
    ];
    for (extra, flag) in cases {
        let args: Vec<&str> = extra.iter().chain(&program).copied().collect();
        let (code, stdout, stderr) = manifest_output(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?} printed {stdout}");
        assert_contains(&stderr, &format!("invalid {flag}: "));
    }
    for fine in [
        &["--volume-claim", "pvc", "--job-path", "/mnt/jobpath"][..],
        &["--env", "PADDLE_DISTRI_BACKEND=gloo"],
    ] {
        let args: Vec<&str> = fine.iter().chain(&program).copied().collect();
        let (code, _, stderr) = manifest_output(&args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
    }
}

/// From 64 pods on, the one-Job layout names a coordinator (pod 0 of the Indexed Job, through
/// the headless Service) so that only it uses the API; below that, nothing of it.
#[test]
fn big_jobs_name_a_coordinator_small_ones_do_not() {
    let job_of = |trainers: &str| -> (Value, Vec<String>) {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(&[
            "--job-name",
            "big",
            "--image",
            "example.com/t/p:v1",
            "--protocol",
            "collective",
            "--trainers",
            trainers,
            "--",
            "python",
            "/workspace/train.py",
        ]))
        .unwrap();
        let kinds = docs
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect();
        (
            docs.into_iter().find(|d| d["kind"] == "Job").unwrap(),
            kinds,
        )
    };
    let env_of = |job: &Value, name: &str| {
        job["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    let (small, kinds) = job_of("63");
    assert_eq!(env_of(&small, "PADDLE_LAUNCHER_COORDINATOR"), None);
    assert!(!kinds.contains(&"Service".to_string()));
    let (big, kinds) = job_of("64");
    assert_eq!(
        env_of(&big, "PADDLE_LAUNCHER_COORDINATOR"),
        Some(json!("big-0.big-pods:6171"))
    );
    assert_eq!(env_of(&big, "PADDLE_LAUNCHER_MAX_RESTARTS"), None);
    assert_eq!(big["spec"]["completionMode"], "Indexed");
    assert_eq!(big["spec"]["template"]["spec"]["subdomain"], "big-pods");
    assert!(kinds.contains(&"Service".to_string()));
}

/// The control channel's parts go in every pod, of both layouts (the split layout's pservers
/// and trainers are one membership): the Secret (optional, so that a pod started before it
/// exists says what is missing instead of waiting in ContainerCreating), the port, and the
/// annotations that keep a sidecar proxy off that port.
#[test]
fn the_channel_is_mounted_in_every_pod_and_kept_out_of_sidecars() {
    let jobs_of = |args: &[&str]| -> Vec<Value> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(args)).unwrap();
        docs.into_iter().filter(|d| d["kind"] == "Job").collect()
    };
    let base = [
        "--job-name",
        "ch",
        "--image",
        "paddle:1",
        "--protocol",
        "fleet",
        "--entry",
        "python train.py",
    ];
    let colocated = jobs_of(&base);
    let split: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--split", "--pservers", "2"])
        .collect();
    let split = jobs_of(&split);
    assert_eq!(split.len(), 2);
    let template = |job: &Value| job["spec"]["template"].clone();
    let variables = |job: &Value| -> Vec<String> {
        each(&template(job)["spec"]["containers"][0]["env"], &["name"])
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    let secrets = |job: &Value| -> Vec<Value> {
        each(&template(job)["spec"]["volumes"], &["secret"])
            .into_iter()
            .filter(|s| !s.is_null())
            .cloned()
            .collect()
    };
    for job in colocated.iter().chain(&split) {
        assert!(variables(job).contains(&"PADDLE_LAUNCHER_JOB_SECRET_FILE".to_string()));
        assert_eq!(secrets(job).len(), 1);
        assert_eq!(secrets(job)[0]["optional"], true);
        let annotations = &template(job)["metadata"]["annotations"];
        assert_eq!(
            annotations["traffic.sidecar.istio.io/excludeInboundPorts"],
            "6171"
        );
        assert_eq!(
            annotations["traffic.sidecar.istio.io/excludeOutboundPorts"],
            "6171"
        );
    }
}

/// What applying the documents alone would miss is said on stderr and at the top of the YAML:
/// the Secret every pod waits for, with the exact command in the job's namespace, and an image
/// that is not pinned.
#[test]
fn manifest_says_which_secret_must_exist_and_warns_of_an_unpinned_image() {
    let (code, yaml, stderr) = manifest_output(&["--namespace", "team-a", "--max-restarts", "2"]);
    assert_eq!(code, Some(0), "{stderr}");
    let command = "kubectl create secret generic bad-launcher -n team-a --from-literal=secret=";
    assert!(stderr.contains(command), "{stderr}");
    let header: Vec<&str> = yaml.lines().take_while(|l| l.starts_with('#')).collect();
    assert!(header.iter().any(|l| l.contains(command)), "{yaml}");
    assert!(!stderr.contains("not pinned"), "{stderr}");
    let (_, _, split) = manifest_output(&["--split", "--pservers", "1"]);
    assert!(
        split.contains("kubectl create secret generic bad-launcher"),
        "{split}"
    );
    for image in [
        "example.com/t/p",
        "example.com/t/p:latest",
        "localhost:5000/p",
    ] {
        let out = Command::new(LAUNCHER)
            .args(["manifest", "--job-name", "img", "--image", image])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("--image {image} is not pinned")),
            "{image}: {stderr}"
        );
    }
    for image in ["localhost:5000/p:2.6.2", "p@sha256:0123"] {
        let out = Command::new(LAUNCHER)
            .args(["manifest", "--job-name", "img", "--image", image])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("not pinned"),
            "{image}"
        );
    }
}

/// `--max-preemptions` reaches every pod of the split layout (one agreement for the whole job),
/// and a value the launcher would refuse is refused by `manifest`, naming it.
#[test]
fn the_bound_on_free_preemptions_reaches_every_pod() {
    let text = manifest(&[
        "--job-name",
        "mp",
        "--image",
        "example.com/t/p:v1",
        "--split",
        "--pservers",
        "2",
        "--protocol",
        "fleet",
        "--max-preemptions",
        "2",
        "--",
        "python",
        "/workspace/train.py",
    ]);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let jobs: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Job").collect();
    assert_eq!(jobs.len(), 2);
    for job in jobs {
        let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap();
        let bound = env
            .iter()
            .find(|e| e["name"] == "PADDLE_LAUNCHER_MAX_PREEMPTIONS");
        assert_eq!(bound.map(|e| e["value"].clone()), Some(json!("2")), "{job}");
    }
    let out = Command::new(LAUNCHER)
        .args(["manifest", "--job-name", "mp", "--image", "i"])
        .args(["--max-preemptions", "10001"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(
        &String::from_utf8_lossy(&out.stderr),
        "invalid --max-preemptions: \"10001\": expected a number of preemptions, an integer from 0 to 10000",
    );
}

/// GPUs without a protocol generate Paddle 3's collective job (one process per GPU), not
/// v1's flags, with which a Paddle 3 trainer ends 75; a protocol given is kept, and CPU pods
/// keep the seed's v1.
#[test]
fn gpu_pods_without_a_protocol_are_collective() {
    let env = |extra: &[&str]| -> Vec<(String, String)> {
        let mut args = vec!["--job-name", "g", "--image", "example.com/t/p:v1"];
        args.extend(extra);
        args.extend(["--", "python", "/t.py"]);
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(&args)).unwrap();
        let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
        each(
            &job["spec"]["template"]["spec"]["containers"][0]["env"],
            &[],
        )
        .into_iter()
        .filter_map(|v| {
            Some((
                v["name"].as_str()?.to_string(),
                v["value"].as_str()?.to_string(),
            ))
        })
        .collect()
    };
    let value = |env: &[(String, String)], name: &str| {
        env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    };
    let gpu = env(&["--gpu", "8"]);
    assert_eq!(
        value(&gpu, "PADDLE_LAUNCHER_PROTOCOL").as_deref(),
        Some("collective")
    );
    assert_eq!(
        value(&gpu, "PADDLE_LAUNCHER_NPROC_PER_POD").as_deref(),
        Some("auto")
    );
    let chosen = env(&["--gpu", "8", "--protocol", "v2"]);
    assert_eq!(
        value(&chosen, "PADDLE_LAUNCHER_PROTOCOL").as_deref(),
        Some("v2")
    );
    let cpu = env(&[]);
    assert_eq!(
        value(&cpu, "PADDLE_LAUNCHER_PROTOCOL").as_deref(),
        Some("v1")
    );
}

/// GPU pods of the collective protocol run one trainer process per GPU (`auto`), each with
/// its own port declared; a count above the GPUs is refused in one line; CPU pods run what is
/// asked.
#[test]
fn gpu_pods_run_one_trainer_process_per_gpu() {
    let container = |extra: &[&str]| -> Value {
        let mut args = vec!["--job-name", "g", "--image", "example.com/t/p:v1"];
        args.extend(extra);
        args.extend(["--protocol", "collective", "--", "python", "/t.py"]);
        let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(&args)).unwrap();
        let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
        job["spec"]["template"]["spec"]["containers"][0].clone()
    };
    let nproc = |c: &Value| {
        each(&c["env"], &[])
            .into_iter()
            .find(|v| v["name"] == "PADDLE_LAUNCHER_NPROC_PER_POD")
            .map(|v| v["value"].as_str().unwrap().to_string())
    };
    let ports = |c: &Value| -> Vec<(String, u64)> {
        each(&c["ports"], &[])
            .into_iter()
            .filter(|p| p["name"].as_str().unwrap().starts_with("trainer"))
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["containerPort"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let gpu = container(&["--gpu", "3"]);
    assert_eq!(nproc(&gpu).as_deref(), Some("auto"));
    assert_eq!(
        ports(&gpu),
        [
            ("trainer-0".to_string(), 6170),
            ("trainer-1".to_string(), 6172),
            ("trainer-2".to_string(), 6173)
        ],
        "the control port 6171 is skipped"
    );
    let cpu = container(&["--nproc-per-pod", "2"]);
    assert_eq!(nproc(&cpu).as_deref(), Some("2"));
    assert_eq!(
        nproc(&container(&[])).as_deref(),
        Some("1"),
        "a collective pod without GPUs: one, not the launcher's own default (auto)"
    );
    let (code, stdout, stderr) = manifest_output(&[
        "--gpu",
        "2",
        "--nproc-per-pod",
        "4",
        "--protocol",
        "collective",
        "--",
        "python",
        "/t.py",
    ]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(
        stderr.contains("invalid --nproc-per-pod: \"4\": expected at most --gpu 2"),
        "{stderr}"
    );
    let (code, _, stderr) = manifest_output(&["--nproc-per-pod", "2", "--", "python", "/t.py"]);
    assert_eq!(code, Some(2), "v1 runs one trainer per pod: {stderr}");
}

/// `--min-pods`: an elastic Indexed Job. Every pod gets the range (and the elastic wait when
/// given); the Job succeeds when its coordinator's pod (index 0) has, so that a job that shrank
/// completes; it is a valid Job on every Kubernetes with success policies (1.31 on, beta
/// there); a pod launched from it plans with the range. Refused: without restarts, under
/// another runtime, above the pod count, with a protocol that has pservers.
#[test]
fn an_elastic_job_is_generated_with_its_range_and_a_success_policy() {
    let args = [
        "--job-name",
        "el",
        "--image",
        "example.com/t/p:v1",
        "--trainers",
        "4",
        "--protocol",
        "collective",
        "--max-restarts",
        "3",
        "--min-pods",
        "2",
        "--elastic-wait",
        "120",
        "--",
        "python",
        "/workspace/train.py",
    ];
    let text = manifest(&args);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("elastic.yaml");
    std::fs::write(&file, &text).unwrap();
    let validate = support::manifest_tool("kubernetes-validate");
    for version in ["1.31", "1.37"] {
        let out = Command::new(&validate)
            .args(["--strict", "--kubernetes-version", version])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{version}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    assert_eq!(
        job["spec"]["successPolicy"],
        json!({"rules": [{"succeededIndexes": "0", "succeededCount": 1}]})
    );
    let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(value("PADDLE_LAUNCHER_MIN_PODS"), Some(json!("2")));
    assert_eq!(value("PADDLE_LAUNCHER_ELASTIC_WAIT"), Some(json!("120")));
    // A pod of it, as the Job controller makes it: its launcher plans with the range.
    let Cluster { api, dir } = Cluster::new();
    let pods = pods_of(&api, job, 140);
    let mut env = pod_env(job, &pods[1]);
    support::mount_job_secret(dir.path(), &mut env);
    env.push((
        "KUBECONFIG",
        dir.path().join("kubeconfig").display().to_string(),
    ));
    let argv = ["plan", "--", "python", "/workspace/train.py"];
    let done = Launcher::start(dir.path(), &pods[1].0, &argv, &env)
        .wait(std::time::Duration::from_secs(60));
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let plan: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(plan["num_gradient_servers"], 4);
    assert_eq!(
        plan["control"]["elastic"],
        json!({"min_pods": 2, "max_pods": 4, "elastic_wait_s": 120})
    );
    let argv = ["doctor", "--", "python", "/workspace/train.py"];
    let done =
        Launcher::start(dir.path(), "doctor", &argv, &env).wait(std::time::Duration::from_secs(60));
    assert_contains(
        &done.stdout,
        "\nelastic: trains with 2 to 4 pods, waiting 120 s for a lost pod's replacement (--elastic-wait)",
    );
    for (extra, said) in [
        (&["--min-pods", "2"][..], "invalid --min-pods: \"2\": expected --max-restarts of at least 1 too"),
        (
            &["--min-pods", "2", "--max-restarts", "1", "--runtime", "jobset"],
            "invalid --min-pods: \"2\": expected unset with --runtime jobset, trainer or volcano",
        ),
        (
            &["--min-pods", "5", "--max-restarts", "1", "--protocol", "collective", "--trainers", "4", "--", "python", "t.py"],
            "invalid --min-pods: \"5\": expected a number of pods, at most the job's pod count, an integer from 1 to 4",
        ),
        (
            &["--min-pods", "2", "--max-restarts", "1", "--protocol", "v2", "--trainers", "4", "--", "python", "t.py"],
            "expected unset with --protocol v2: every pod's pserver holds a share",
        ),
    ] {
        let (code, out, err) = manifest_output(extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(out.is_empty(), "{out}");
        assert_contains(&err, said);
    }
    // A minimum of every pod is no elastic job: the Job succeeds as any does.
    let mut whole = args;
    whole[11] = "4";
    let docs: Vec<Value> = serde_saphyr::from_multiple(&manifest(&whole)).unwrap();
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    assert!(job["spec"]["successPolicy"].is_null(), "{job}");
}

/// A label the launcher finds its pods by cannot be replaced by a platform's: refused in one
/// line (status 2) rather than generating a job whose pods its launchers never find; the same
/// value is no conflict.
#[test]
fn a_label_the_launcher_sets_is_not_overwritten() {
    let mut args = Vec::new();
    args.extend(["--label", "paddle-launcher/job=other"]);
    let (code, stdout, stderr) = manifest_output(&args);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(
        stderr.contains("invalid --label: \"paddle-launcher/job=other\": expected a key the launcher does not set itself (paddle-launcher/job is \"bad\""),
        "{stderr}"
    );
    let args = ["--label", "paddle-launcher/job=bad"];
    let (code, _, stderr) = manifest_output(&args);
    assert_eq!(code, Some(0), "{stderr}");
}

/// An existing ServiceAccount: the pods run as it, no ServiceAccount, Role or RoleBinding is
/// generated, and the note says the verbs it needs; the NetworkPolicy stays unless
/// --no-network-policy; the documents still pass the official schemas.
#[test]
fn an_existing_service_account_gets_no_rbac_and_its_verbs_are_said() {
    let base = ["--service-account", "trainers"];
    let (code, stdout, stderr) = manifest_output(&base);
    assert_eq!(code, Some(0), "{stderr}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    for generated in ["ServiceAccount", "Role", "RoleBinding"] {
        assert!(
            !kinds.contains(&generated),
            "{generated} generated: {kinds:?}"
        );
    }
    assert!(kinds.contains(&"NetworkPolicy"), "{kinds:?}");
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    assert_eq!(
        job["spec"]["template"]["spec"]["serviceAccountName"],
        "trainers"
    );
    assert!(
        stderr.contains("The pods run as the existing ServiceAccount trainers, for which no Role is generated: in namespace default, it needs get, list, watch on pods; create on events; get, patch on jobs bad"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sa.yaml");
    std::fs::write(&file, &stdout).unwrap();
    support::assert_valid_on_every_kubernetes(&file, "--service-account");
    let mut args = base.to_vec();
    args.push("--no-network-policy");
    let (code, stdout, stderr) = manifest_output(&args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("kind: NetworkPolicy"), "{stdout}");
    // Found by DNS: no token in the pods, but the account given all the same.
    let (code, stdout, stderr) = manifest_output(&["--dns", "--service-account", "trainers"]);
    assert_eq!(code, Some(0), "{stderr}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    assert_eq!(
        job["spec"]["template"]["spec"]["serviceAccountName"],
        "trainers"
    );
    assert_eq!(
        job["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );
    let (code, _, stderr) = manifest_output(&["--service-account", "Bad_Name"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid --service-account: \"Bad_Name\""),
        "{stderr}"
    );
}

/// A GPU fleet's pod options: another GPU resource (a MIG profile), RDMA devices, IPC_LOCK,
/// root, the node's network — each where the API expects it, the documents still valid; a bad
/// value refused in one line (status 2).
#[test]
fn a_gpu_fleets_pod_options_reach_the_pods() {
    let args = [
        "--protocol",
        "collective",
        "--gpu",
        "8",
        "--gpu-resource",
        "nvidia.com/mig-1g.10gb",
        "--resource",
        "rdma/hca_shared_devices_a=1",
        "--add-capability",
        "IPC_LOCK",
        "--run-as-root",
        "--host-network",
        "--",
        "python",
        "/t.py",
    ];
    let (code, stdout, stderr) = manifest_output(&args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--host-network: each pod uses its node's network"),
        "{stderr}"
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], false);
    let container = &pod["containers"][0];
    for side in ["requests", "limits"] {
        let resources = &container["resources"][side];
        assert_eq!(resources["nvidia.com/mig-1g.10gb"], "8", "{side}");
        assert!(resources["nvidia.com/gpu"].is_null(), "{side}");
        assert_eq!(resources["rdma/hca_shared_devices_a"], "1", "{side}");
    }
    assert_eq!(
        container["securityContext"]["capabilities"]["add"],
        json!(["IPC_LOCK"])
    );
    assert_eq!(container["securityContext"]["runAsUser"], 0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fleet.yaml");
    std::fs::write(&file, &stdout).unwrap();
    support::assert_valid_on_every_kubernetes(&file, "a GPU fleet's pod options");
    for (extra, expected) in [
        (
            &["--add-capability", "ipc_lock"][..],
            "invalid --add-capability: \"ipc_lock\"",
        ),
        (
            &["--resource", "rdma/hca=0"][..],
            "invalid --resource: \"rdma/hca=0\": expected a Kubernetes quantity above 0",
        ),
        (
            &["--gpu-resource", "not a name"][..],
            "invalid --gpu-resource: \"not a name\"",
        ),
    ] {
        let (code, _, stderr) = manifest_output(extra);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
    // A capability without root has no effect: said.
    let (code, _, stderr) = manifest_output(&["--add-capability", "IPC_LOCK"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--add-capability IPC_LOCK: Kubernetes gives added capabilities"),
        "{stderr}"
    );
    let (code, _, stderr) = manifest_output(&["--run-as-root", "--run-as-user", "5"]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// CPU and placement: no CPU limit unless asked (requests kept, memory's limit kept); with
/// --cpu-limit the limit is the request. Required node affinity, a topology spread and a
/// preferred pod affinity reach the pod templates of every runtime and layout, selecting every
/// pod of the job (pservers and trainers alike) by its job label; the documents stay valid; a
/// bad value is refused in one line.
#[test]
fn cpu_limits_are_asked_and_placement_reaches_every_runtime() {
    let job_pod = |extra: &[&str]| -> Value {
        let mut args = vec!["--cpu", "4", "--memory", "8Gi", "--", "python", "/t.py"];
        args.splice(0..0, extra.iter().copied());
        let (code, stdout, stderr) = manifest_output(&args);
        assert_eq!(code, Some(0), "{stderr}");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
        let job = docs.iter().find(|d| d["kind"] == "Job").unwrap();
        job["spec"]["template"].clone()
    };
    let resources = &job_pod(&[])["spec"]["containers"][0]["resources"];
    assert_eq!(resources["requests"]["cpu"], "4");
    assert!(resources["limits"]["cpu"].is_null(), "{resources}");
    assert_eq!(resources["limits"]["memory"], "8Gi");
    let limited = &job_pod(&["--cpu-limit"])["spec"]["containers"][0]["resources"];
    assert_eq!(limited["limits"]["cpu"], "4");
    let placement = [
        "--affinity",
        "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,NVIDIA-H200",
        "--spread-by",
        "kubernetes.io/hostname",
        "--pack-by",
        "topology.kubernetes.io/zone",
    ];
    let dir = tempfile::tempdir().unwrap();
    // The split layout's pservers and trainers are one job: placed together.
    let split = ["--split", "--pservers", "2", "--protocol", "fleet"];
    for (runtime, layout) in [
        ("job", &[][..]),
        ("job", &split[..]),
        ("jobset", &[]),
        ("volcano", &[]),
        ("trainer", &[]),
    ] {
        let mut args = vec!["--runtime", runtime, "--gpu", "8", "--trainers", "4"];
        args.extend(layout);
        args.extend(placement);
        args.extend(["--", "python", "/t.py"]);
        let (code, stdout, stderr) = manifest_output(&args);
        assert_eq!(code, Some(0), "{runtime}: {stderr}");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
        let mut templates = 0;
        for doc in &docs {
            for template in pod_templates(doc) {
                templates += 1;
                let job = json!({"paddle-launcher/job": "bad"});
                let labels = &job;
                assert_eq!(template["metadata"]["labels"]["paddle-launcher/job"], "bad");
                let spec = &template["spec"];
                let terms = &spec["affinity"]["nodeAffinity"]
                    ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
                assert_eq!(
                    terms[0]["matchExpressions"],
                    json!([{"key": "nvidia.com/gpu.product", "operator": "In",
                        "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"]}]),
                    "{runtime}"
                );
                let spread = &spec["topologySpreadConstraints"][0];
                assert_eq!(spread["topologyKey"], "kubernetes.io/hostname", "{runtime}");
                assert_eq!(spread["maxSkew"], 1);
                assert_eq!(spread["labelSelector"]["matchLabels"], *labels, "{runtime}");
                let pack = &spec["affinity"]["podAffinity"]
                    ["preferredDuringSchedulingIgnoredDuringExecution"][0];
                assert_eq!(
                    pack["podAffinityTerm"]["topologyKey"],
                    "topology.kubernetes.io/zone"
                );
                assert_eq!(
                    pack["podAffinityTerm"]["labelSelector"]["matchLabels"],
                    *labels
                );
            }
        }
        let expected = if layout.is_empty() { 1 } else { 2 };
        assert_eq!(
            templates, expected,
            "{runtime} {layout:?}: its pod templates"
        );
        if runtime == "job" && layout.is_empty() {
            let file = dir.path().join("placed.yaml");
            std::fs::write(&file, &stdout).unwrap();
            support::assert_valid_on_every_kubernetes(&file, "placement");
        }
    }
    for (extra, expected) in [
        (&["--affinity", "gpu"][..], "invalid --affinity: \"gpu\""),
        (
            &["--affinity", "gpu=a,"][..],
            "invalid --affinity: \"gpu=a,\"",
        ),
        (
            &["--spread-by", "not a key"][..],
            "invalid --spread-by: \"not a key\"",
        ),
        (
            &["--pack-by", "bad key!"][..],
            "invalid --pack-by: \"bad key!\"",
        ),
    ] {
        let (code, stdout, stderr) = manifest_output(extra);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(
            stdout.is_empty() && stderr.contains(expected),
            "{extra:?}: {stderr}"
        );
    }
}

/// The supported patch path for what no flag covers: `k8s-examples/overlay` (the overlay
/// docs/manifests-and-rbac.md shows) applied by the real `kubectl kustomize` (built with the
/// control plane) over `manifest`'s output as its base. The patch lands (the datasets volume,
/// its mount, a variable, the scheduler), what the launcher generated stays (its variables,
/// volumes, arguments), and the result is valid on every Kubernetes version checked.
#[test]
fn a_kustomize_overlay_patches_the_generated_job() {
    let dir = tempfile::tempdir().unwrap();
    let (base, overlay) = (dir.path().join("base"), dir.path().join("overlay"));
    std::fs::create_dir_all(&base).unwrap();
    std::fs::create_dir_all(&overlay).unwrap();
    let generated = manifest(&[
        "--job-name",
        "demo",
        "--image",
        "example.com/t/p:v1",
        "--gpu",
        "8",
        "--trainers",
        "4",
        "--",
        "python",
        "/t.py",
    ]);
    std::fs::write(base.join("job.yaml"), &generated).unwrap();
    std::fs::write(
        base.join("kustomization.yaml"),
        "resources:\n  - job.yaml\n",
    )
    .unwrap();
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("k8s-examples/overlay");
    for file in ["kustomization.yaml", "datasets.yaml"] {
        std::fs::copy(example.join(file), overlay.join(file)).unwrap();
    }
    let out = Command::new(support::control_plane::binary("kubectl"))
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .unwrap();
    let patched = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job_of = |text: &str| -> Value {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap();
        docs.into_iter().find(|d| d["kind"] == "Job").unwrap()
    };
    let (before, after) = (job_of(&generated), job_of(&patched));
    let pod = &after["spec"]["template"]["spec"];
    assert_eq!(pod["schedulerName"], "gpu-scheduler");
    let names = |list: &Value| -> Vec<String> {
        let items = list.as_array().cloned().unwrap_or_default();
        items
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect()
    };
    let container = &pod["containers"][0];
    let original = &before["spec"]["template"]["spec"]["containers"][0];
    for (field, added) in [("env", "DATASET_DIR"), ("volumeMounts", "datasets")] {
        let (was, is) = (names(&original[field]), names(&container[field]));
        assert!(is.contains(&added.to_string()), "{field}: {is:?}");
        assert!(
            was.iter().all(|n| is.contains(n)),
            "{field}: {was:?} -> {is:?}"
        );
    }
    let volumes = names(&pod["volumes"]);
    assert!(volumes.contains(&"datasets".to_string()), "{volumes:?}");
    assert!(names(&before["spec"]["template"]["spec"]["volumes"])
        .iter()
        .all(|v| volumes.contains(v)));
    assert_eq!(container["args"], original["args"]);
    assert_eq!(container["resources"], original["resources"]);
    let file = dir.path().join("patched.yaml");
    std::fs::write(&file, &patched).unwrap();
    support::assert_valid_on_every_kubernetes(&file, "the kustomize overlay's output");
}

/// `--metrics`: each pod declares the metrics port and carries the scrape annotations, and the
/// NetworkPolicy admits that port alone from any namespace (a Prometheus in `monitoring`);
/// without it, only the job's own pods reach its pods. Valid on every Kubernetes checked.
#[test]
fn metrics_are_declared_annotated_and_admitted_when_asked() {
    let policy_and_pods = |extra: &[&str]| -> (Value, Vec<Value>) {
        let mut args = extra.to_vec();
        args.extend(["--", "python", "/t.py"]);
        let (code, stdout, stderr) = manifest_output(&args);
        assert_eq!(code, Some(0), "{stderr}");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
        let policy = docs
            .iter()
            .find(|d| d["kind"] == "NetworkPolicy")
            .unwrap()
            .clone();
        let pods = docs.iter().flat_map(pod_templates).cloned().collect();
        (policy, pods)
    };
    let (policy, pods) = policy_and_pods(&[]);
    assert_eq!(policy["spec"]["ingress"].as_array().map(Vec::len), Some(1));
    assert!(pods[0]["metadata"]["annotations"]["prometheus.io/scrape"].is_null());
    for runtime in ["job", "jobset"] {
        let (policy, pods) = policy_and_pods(&["--metrics", "--runtime", runtime]);
        let scrape = &policy["spec"]["ingress"][1];
        assert_eq!(
            scrape["from"],
            json!([{"namespaceSelector": {}}]),
            "{runtime}"
        );
        assert_eq!(scrape["ports"], json!([{"protocol": "TCP", "port": 9410}]));
        assert!(!pods.is_empty());
        for pod in pods {
            let annotations = &pod["metadata"]["annotations"];
            assert_eq!(annotations["prometheus.io/scrape"], "true", "{runtime}");
            assert_eq!(annotations["prometheus.io/port"], "9410");
            assert_eq!(annotations["prometheus.io/path"], "/metrics");
            let ports = &pod["spec"]["containers"][0]["ports"];
            let declared = ports
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "metrics" && p["containerPort"] == 9410);
            assert!(declared, "{runtime}: {ports}");
        }
    }
    // The port is the manifest's: another one through --env is refused, not scraped where
    // nothing listens.
    let other = ["--metrics", "--env", "PADDLE_LAUNCHER_METRICS_PORT=9500"];
    let (code, _, stderr) = manifest_output(&other);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid --env: \"PADDLE_LAUNCHER_METRICS_PORT=9500\""),
        "{stderr}"
    );
    // Trainer ports go round it as the launcher places them; a sidecar lets the scrape through.
    let (policy, pods) = policy_and_pods(&["--metrics", "--gpu", "8", "--trainer-port", "9403"]);
    assert_eq!(policy["spec"]["ingress"].as_array().map(Vec::len), Some(2));
    let ports = &pods[0]["spec"]["containers"][0]["ports"];
    let nine_four_ten: Vec<&Value> = ports
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["containerPort"] == 9410)
        .collect();
    assert_eq!(nine_four_ten.len(), 1, "{ports}");
    assert_eq!(nine_four_ten[0]["name"], "metrics");
    let inbound =
        &pods[0]["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeInboundPorts"];
    assert_eq!(inbound, "6171,9410");
    let (_, stdout, _) = manifest_output(&["--metrics", "--", "python", "/t.py"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.yaml");
    std::fs::write(&file, stdout).unwrap();
    support::assert_valid_on_every_kubernetes(&file, "--metrics");
}
