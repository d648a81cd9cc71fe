//! `manifest`: ready-to-apply YAML for a job. Pure: options in, documents out.
//!
//! The pods run as a non-root user with a read-only root filesystem, no capabilities and the
//! runtime's seccomp profile; the launcher's files go to writable emptyDir volumes (/tmp and
//! the work directory [`WORKDIR`]).
//!
//! Every pod's launcher validates its options when it starts; `manifest` runs that same
//! validation (`Config::from_args`) on each container's environment and arguments before it
//! prints anything, so a bad value is an error here and not a Job whose pods all exit 2.

use serde_json::{json, Value};

use crate::cli::Opt;
use crate::cli::{JobArgs, ManifestArgs, ManifestRuntime};
use crate::config::options;
use crate::config::Config;
use crate::config::DEFAULT_CONTROL_PORT;
use crate::error::ConfigError;
use crate::selector::is_dns_subdomain;
use crate::vocabulary::{PodRole, Protocol};

/// The writable scratch directory: the work directory of the pserver and the trainer (data
/// copies, train/test lists) and the id files' directory, as the root filesystem is read-only.
/// Not /workspace: images put the training program there (docker/Dockerfile's `COPY ...
/// /workspace/`), and a volume mounted over it would hide the program. A directory named after
/// the launcher under /var/lib (a program's variable state) is one no image ships files in, so
/// the emptyDir mounted here hides nothing.
pub const WORKDIR: &str = "/var/lib/paddle-launcher";
/// Where the optional job Secret is mounted, and its key.
const SECRET_DIR: &str = "/etc/paddle-launcher";
const SECRET_KEY: &str = "secret";
/// On every pod of the job: what its NetworkPolicy selects.
const JOB_LABEL: &str = "paddle-launcher/job";
/// A high UID, not one of the image's users (checkov: CKV_K8S_40).
const USER: u32 = 10001;

fn invalid(flag: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError::new(flag, value, expected)
}

/// What a resource option takes, as the API server parses it.
const QUANTITY: &str = "a Kubernetes quantity above 0: a number and an optional suffix, e.g. 4, 500m or 1.5 CPUs, 8Gi, 512Mi or 8G bytes (Ki Mi Gi Ti Pi Ei are powers of 1024, k M G T P E of 1000)";

/// A quantity as the API server parses it (`resource.Quantity`: a signed decimal number, then
/// a binary suffix Ki..Ei, a decimal one m, k, M..E, or an exponent e/E and an integer), and
/// above 0, as a request must be: "8GB" and "2cores" are not.
fn is_positive_quantity(text: &str) -> bool {
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    let number_end = unsigned
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let digits = number.chars().filter(char::is_ascii_digit).count();
    let well_formed = digits > 0 && number.matches('.').count() <= 1;
    let exponent = |rest: &str| {
        let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
    };
    let suffix_ok = match suffix {
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        _ => suffix.strip_prefix(['e', 'E']).is_some_and(exponent),
    };
    well_formed && suffix_ok && number.chars().any(|c| ('1'..='9').contains(&c))
}

/// `--job-path` is mounted only with `--volume-claim`: it must be an absolute directory of its
/// own, neither one of the pod's other mounts nor over the training program.
fn check_job_path(request: &ManifestArgs) -> Result<(), ConfigError> {
    if request.volume_claim.is_none() {
        return Ok(());
    }
    let path = request.job_path.trim_end_matches('/');
    let within =
        |inner: &str, outer: &str| inner == outer || inner.starts_with(&format!("{outer}/"));
    let reserved = ["/tmp", WORKDIR, SECRET_DIR];
    let program = program_path(request);
    let clash = !path.starts_with('/')
        || path.is_empty()
        || path.split('/').any(|c| c == "..")
        || reserved.iter().any(|r| within(path, r) || within(r, path))
        || program.is_some_and(|p| within(&p, path));
    if clash {
        return Err(invalid(
            "--job-path",
            &request.job_path,
            "an absolute directory of its own for the claim: not /, not /tmp, /var/lib/paddle-launcher or /etc/paddle-launcher, and not above the training program",
        ));
    }
    Ok(())
}

/// The training program's path: the first absolute path in the program after `--`, or in
/// --entry. A volume mounted over it would hide it.
fn program_path(request: &ManifestArgs) -> Option<String> {
    let words: Vec<String> = match &request.entry {
        Some(entry) => entry.split_whitespace().map(str::to_string).collect(),
        None => request.trainer_args.clone(),
    };
    words
        .into_iter()
        .find(|w| w.starts_with('/'))
        .map(|w| w.trim_end_matches('/').to_string())
}

/// What one of the pod templates runs: one Job each.
struct PodKind<'a> {
    role: PodRole,
    count: u32,
    cpu: &'a str,
    memory: &'a str,
    gpu: u32,
    labels: Value,
}

/// The pod templates: one Job of pods running both, or (`--split`) a pserver and a trainer Job.
fn pod_kinds(request: &ManifestArgs) -> Vec<PodKind<'_>> {
    if !request.split {
        return vec![PodKind {
            role: PodRole::Both,
            count: request.trainers,
            cpu: &request.cpu,
            memory: &request.memory,
            gpu: request.gpu,
            labels: json!({}),
        }];
    }
    vec![
        PodKind {
            role: PodRole::Pserver,
            count: request.pservers,
            cpu: &request.pscpu,
            memory: &request.psmemory,
            gpu: 0,
            labels: json!({"paddle-job-pserver": request.job_name}),
        },
        PodKind {
            role: PodRole::Trainer,
            count: request.trainers,
            cpu: &request.cpu,
            memory: &request.memory,
            gpu: request.gpu,
            labels: json!({"paddle-job": request.job_name}),
        },
    ]
}

pub fn documents(request: &ManifestArgs) -> Result<Vec<Value>, ConfigError> {
    if !(request.job_name.len() <= 52 && is_dns_subdomain(&request.job_name)) {
        // 52 leaves room for the "-pserver"/"-launcher" suffixes within 63.
        return Err(invalid(
            "--job-name",
            &request.job_name,
            "a job name of 1-52 lowercase letters, digits, '-' or '.'",
        ));
    }
    if request.image.is_empty() || request.image.contains(char::is_whitespace) {
        return Err(invalid(
            "--image",
            &request.image,
            "an image reference such as example.com/team/paddle-job:v1",
        ));
    }
    if request.split && request.dns {
        return Err(invalid(
            "--dns",
            "true",
            "the one-Job layout (the split layout is found through the Kubernetes API)",
        ));
    }
    if request.split && request.runtime == ManifestRuntime::Trainer {
        return Err(invalid(
            "--split",
            "true",
            "the one-kind layout with --runtime trainer (Trainer v2 runs one `node` replicated job; use --runtime jobset or volcano for the split layout)",
        ));
    }
    if let (Some(asked), true) = (&request.nproc_per_pod, request.gpu > 0) {
        let n: u32 = asked.trim().parse().unwrap_or(0);
        if n > request.gpu {
            return Err(invalid(
                "--nproc-per-pod",
                asked,
                &format!(
                    "at most --gpu {}: one trainer process per GPU, or auto",
                    request.gpu
                ),
            ));
        }
    }
    if request.split && (request.pservers == 0 || !request.protocol.has_pservers()) {
        return Err(invalid(
            "--split",
            "true",
            "--pservers of at least 1 and a protocol with pservers (v1, v2, fleet)",
        ));
    }
    if request.split && request.max_restarts > 0 {
        return Err(invalid(
            "--max-restarts",
            &request.max_restarts.to_string(),
            "0 with --split (group restarts are generated for the one-Job layout)",
        ));
    }
    if request.runtime != ManifestRuntime::Job && (request.dns || request.indexed) {
        return Err(invalid(
            "--runtime",
            runtime_name(request),
            "job with --dns or --indexed (under JobSet, Trainer v2 and Volcano the system's own indexes rank the pods and its own DNS names them)",
        ));
    }
    if let (Some(min), true) = (request.min_pods, request.runtime != ManifestRuntime::Job) {
        return Err(invalid(
            "--min-pods",
            &min.to_string(),
            "unset with --runtime jobset, trainer or volcano (elastic jobs are generated as an Indexed Job, whose success policy lets a shrunk job complete)",
        ));
    }
    if let (Some(min), 0) = (request.min_pods, request.max_restarts) {
        return Err(invalid(
            "--min-pods",
            &min.to_string(),
            "--max-restarts of at least 1 too: every time the job goes on with fewer pods it spends a restart",
        ));
    }
    if let Some(queue) = &request.queue {
        if !(queue.len() <= 63 && is_dns_subdomain(queue)) {
            return Err(invalid(
                "--queue",
                queue,
                "a queue name: 1-63 lowercase letters, digits, '-' or '.'",
            ));
        }
    }
    if !request.split && request.pservers != 0 {
        return Err(invalid(
            "--pservers",
            &request.pservers.to_string(),
            "--split too (without it every pod runs a pserver)",
        ));
    }
    let kinds = pod_kinds(request);
    // The variables the manifest sets itself: an --env of the same name would be a second
    // entry, and the last one wins (JOB_NAME=other would make the pods wait for other pods).
    let without_envs = ManifestArgs {
        envs: Vec::new(),
        ..request.clone()
    };
    let own: Vec<String> = kinds
        .iter()
        .flat_map(|kind| container_env(&without_envs, kind))
        .filter_map(|entry| entry["name"].as_str().map(str::to_string))
        .collect();
    for pair in &request.envs {
        match pair.split_once('=') {
            Some((name, _)) if own.iter().any(|o| o == name) => {
                return Err(invalid(
                    "--env",
                    pair,
                    "a variable the manifest does not set itself (set the launcher's own options with their manifest flags)",
                ))
            }
            Some((name, _)) if !name.is_empty() && !name.contains(char::is_whitespace) => {}
            _ => return Err(invalid("--env", pair, "NAME=VALUE")),
        }
    }
    for (flag, value) in [
        ("--cpu", &request.cpu),
        ("--memory", &request.memory),
        ("--pscpu", &request.pscpu),
        ("--psmemory", &request.psmemory),
    ] {
        if !is_positive_quantity(value) {
            return Err(invalid(flag, value, QUANTITY));
        }
    }
    for pair in &request.envs {
        let name = pair.split_once('=').map_or("", |(name, _)| name);
        if let Some(near) = crate::cli::unread(name) {
            let expected = match near {
                Some(known) => {
                    format!("a variable the launcher reads: {name} is none; did you mean {known}?")
                }
                None => format!(
                    "a variable the launcher reads: {name} is none (docs/configuration.md lists them)"
                ),
            };
            return Err(invalid("--env", pair, &expected));
        }
    }
    check_placement(request)?;
    check_job_path(request)?;
    for kind in &kinds {
        validate_pods(request, kind)?;
    }
    let account = format!("{}-launcher", request.job_name);
    let mut docs = Vec::new();
    if request.dns || named_coordinator(request) {
        // Headless, and listing pods before they are Ready: the launchers wait for all of them,
        // and the coordinator's name must resolve while its pod starts.
        let mut ports = Vec::new();
        if request.dns {
            ports.push(match request.protocol.trainers_listen() {
                true => json!({"name": "trainer", "port": request.trainer_port}),
                false => json!({"name": "pserver", "port": request.port}),
            });
        }
        if named_coordinator(request) {
            ports.push(json!({"name": "control", "port": DEFAULT_CONTROL_PORT}));
        }
        docs.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": dns_name(request), "namespace": request.namespace},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                     "selector": {JOB_LABEL: request.job_name}, "ports": ports},
        }));
    }
    if !request.dns {
        docs.extend([
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": account, "namespace": request.namespace}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": account, "namespace": request.namespace},
                   "rules": role_rules(request)}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": account, "namespace": request.namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                   "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": request.namespace}]}),
        ]);
    }
    docs.push(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": account, "namespace": request.namespace},
        "spec": {
            "podSelector": {"matchLabels": {JOB_LABEL: request.job_name}},
            "policyTypes": ["Ingress"],
            // Any port: gloo and the pservers' peers connect on ports of their own choosing.
            "ingress": [{"from": [{"podSelector": {"matchLabels": {JOB_LABEL: request.job_name}}}]}],
        },
    }));
    match request.runtime {
        ManifestRuntime::Job => {
            for kind in &kinds {
                let name = match kind.role {
                    PodRole::Both => request.job_name.clone(),
                    role => format!("{}-{role}", request.job_name),
                };
                let mut job = job(request, &name, kind, &account);
                if let Some(ttl) = request.ttl_seconds_after_finished {
                    job["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
                }
                if let Some(queue) = &request.queue {
                    // Kueue admits a Job by unsuspending it.
                    job["metadata"]["labels"] = json!({KUEUE_QUEUE: queue});
                    job["spec"]["suspend"] = json!(true);
                }
                docs.push(job);
            }
        }
        ManifestRuntime::Jobset => docs.push(jobset(request, &kinds, &account)),
        ManifestRuntime::Volcano => docs.push(volcano_job(request, &kinds, &account)),
        ManifestRuntime::Trainer => docs.extend(training_runtime(request, &kinds, &account)),
    }
    Ok(docs)
}

/// Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a ClusterTrainingRuntime for Paddle,
/// which Trainer has none of (its runtimes are torch, deepspeed, jax, mlx, xgboost), and an
/// example TrainJob. Trainer renders a TrainJob as a JobSet named after it whose `node`
/// replicated job's container `node` it may override (image, command, args, env, resources);
/// the launcher reads the job's name and size from that JobSet, as under `--runtime jobset`,
/// and plain `numNodes` is the only ML policy it needs.
fn training_runtime(request: &ManifestArgs, kinds: &[PodKind], account: &str) -> Vec<Value> {
    let kind = &kinds[0];
    let mut job = job(request, TRAINER_NODE, kind, account);
    job["spec"]["template"]["spec"]["containers"][0]["name"] = json!(TRAINER_NODE);
    let rules = job["spec"]
        .get_mut("podFailurePolicy")
        .and_then(|policy| policy.get_mut("rules"))
        .and_then(Value::as_array_mut);
    for rule in rules.into_iter().flatten() {
        if rule.get("onExitCodes").is_some() {
            rule["onExitCodes"]["containerName"] = json!(TRAINER_NODE);
        }
    }
    let mut runtime = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": request.job_name, "labels": {"trainer.kubeflow.org/framework": "paddle"}},
        "spec": {
            "mlPolicy": {"numNodes": kind.count},
            "template": {"spec": {"replicatedJobs": [{
                "name": TRAINER_NODE,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": job["spec"],
                },
            }]}},
        },
    });
    if let Some(ttl) = request.ttl_seconds_after_finished {
        // The JobSet each TrainJob is rendered as.
        runtime["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
    }
    recovering_jobset(request, &mut runtime["spec"]["template"]["spec"]);
    let mut train_job = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": format!("{}-example", request.job_name), "namespace": request.namespace},
        "spec": {
            "runtimeRef": {"name": request.job_name, "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"numNodes": kind.count},
        },
    });
    if let Some(queue) = &request.queue {
        // Kueue admits a TrainJob by unsuspending it.
        train_job["metadata"]["labels"] = json!({KUEUE_QUEUE: queue});
        train_job["spec"]["suspend"] = json!(true);
    }
    vec![runtime, train_job]
}

/// The name Trainer v2 gives the training step's replicated job and its container
/// (pkg/constants: `Node`).
const TRAINER_NODE: &str = "node";

/// Kueue's queue label (kueue.x-k8s.io/v1beta1 constants).
const KUEUE_QUEUE: &str = "kueue.x-k8s.io/queue-name";

fn runtime_name(request: &ManifestArgs) -> &'static str {
    match request.runtime {
        ManifestRuntime::Job => "job",
        ManifestRuntime::Jobset => "jobset",
        ManifestRuntime::Volcano => "volcano",
        ManifestRuntime::Trainer => "trainer",
    }
}

/// The least the launchers need: their pods, events to post (the job's story in `kubectl
/// describe`; without it the job goes on), and under JobSet the JobSet (its pod counts).
fn role_rules(request: &ManifestArgs) -> Value {
    let mut rules = vec![
        json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}),
    ];
    // The coordinator records each start on the Job, so that a Job restarted whole (every pod
    // lost, a Kueue suspension) goes on counting: only where the pods are one Job's.
    if request.runtime == ManifestRuntime::Job && !request.split {
        rules.push(json!({"apiGroups": ["batch"], "resources": ["jobs"],
                   "resourceNames": [request.job_name], "verbs": ["get", "patch"]}));
    }
    if matches!(
        request.runtime,
        ManifestRuntime::Jobset | ManifestRuntime::Trainer
    ) {
        rules.push(
            json!({"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]}),
        );
    }
    json!(rules)
}

/// The replicated job of a kind of pod: Trainer v2's `node`, else `task_name`.
fn replicated_job_name(request: &ManifestArgs, kind: &PodKind) -> &'static str {
    match request.runtime {
        ManifestRuntime::Trainer => TRAINER_NODE,
        _ => task_name(kind),
    }
}

/// The name of a kind of pod as a JobSet replicated job or a Volcano task: what the launcher
/// reads the layout from (`pserver` and `trainer`: the split layout; one: every pod alike).
fn task_name(kind: &PodKind) -> &'static str {
    match kind.role {
        PodRole::Both => "worker",
        PodRole::Pserver => "pserver",
        PodRole::Trainer => "trainer",
    }
}

/// One JobSet: a replicated job of one Job per kind of pod.
fn jobset(request: &ManifestArgs, kinds: &[PodKind], account: &str) -> Value {
    let replicated: Vec<Value> = kinds
        .iter()
        .map(|kind| {
            let job = job(request, task_name(kind), kind, account);
            json!({"name": task_name(kind), "replicas": 1, "template": {"spec": job["spec"]}})
        })
        .collect();
    let mut jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": request.job_name, "namespace": request.namespace},
        "spec": {"replicatedJobs": replicated},
    });
    if let Some(ttl) = request.ttl_seconds_after_finished {
        jobset["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
    }
    recovering_jobset(request, &mut jobset["spec"]);
    if let Some(queue) = &request.queue {
        jobset["metadata"]["labels"] = json!({KUEUE_QUEUE: queue});
        jobset["spec"]["suspend"] = json!(true);
    }
    jobset
}

/// One Volcano Job: a task per kind of pod, gang-scheduled, with the env plugin (task indexes)
/// and the svc plugin (each task's hosts and count) the launcher reads.
fn volcano_job(request: &ManifestArgs, kinds: &[PodKind], account: &str) -> Value {
    let tasks: Vec<Value> = kinds
        .iter()
        .map(|kind| {
            let job = job(request, task_name(kind), kind, account);
            json!({"name": task_name(kind), "replicas": kind.count, "template": job["spec"]["template"]})
        })
        .collect();
    let pods: u32 = kinds.iter().map(|k| k.count).sum();
    let mut spec = json!({
        "schedulerName": "volcano",
        "minAvailable": pods,
        "maxRetry": 3,
        "plugins": {"env": [], "svc": []},
        "tasks": tasks,
    });
    recovering_volcano_job(request, &mut spec);
    if let Some(queue) = &request.queue {
        spec["queue"] = json!(queue);
    }
    if let Some(ttl) = request.ttl_seconds_after_finished {
        spec["ttlSecondsAfterFinished"] = json!(ttl);
    }
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": request.job_name, "namespace": request.namespace},
        "spec": spec,
    })
}

fn env_value(name: &str, value: impl ToString) -> Value {
    json!({"name": name, "value": value.to_string()})
}

fn env_field(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

/// The launcher options the manifest sets from its own flags: each with the flag it comes from
/// (an error in its value names that flag) and its value. One list, from which the pods'
/// environment is made, so that the two cannot disagree.
fn options_from_flags(request: &ManifestArgs, kind: &PodKind) -> Vec<(Opt, &'static str, String)> {
    let mut set = Vec::new();
    // Under JobSet and Volcano the launcher reads the job's name, counts and role from the
    // system (`--runtime auto`): the pods carry none of them.
    if request.runtime == ManifestRuntime::Job {
        set.push((options::JOB_NAME, "--job-name", request.job_name.clone()));
    }
    set.extend([
        (
            options::PROTOCOL,
            "--protocol",
            request.protocol.to_string(),
        ),
        (options::PORT, "--port", request.port.to_string()),
        (
            options::PORTS_NUM,
            "--ports-num",
            request.ports_num.to_string(),
        ),
        (
            options::PORTS_NUM_SPARSE,
            "--ports-num-sparse",
            request.ports_num_sparse.to_string(),
        ),
        (
            options::TRAINER_PORT,
            "--trainer-port",
            request.trainer_port.to_string(),
        ),
    ]);
    if request.runtime == ManifestRuntime::Job {
        if kind.role == PodRole::Both {
            set.push((
                options::GRADIENT_NUM,
                "--trainers",
                request.trainers.to_string(),
            ));
        } else {
            set.push((options::ROLE, "--split", kind.role.to_string()));
            set.push((
                options::PSERVER_COUNT,
                "--pservers",
                request.pservers.to_string(),
            ));
            set.push((
                options::TRAINER_COUNT,
                "--trainers",
                request.trainers.to_string(),
            ));
        }
    }
    if request.volume_claim.is_some() {
        set.push((options::JOB_PATH, "--job-path", request.job_path.clone()));
    }
    if request.dns {
        set.push((options::DNS, "--dns", dns_name(request)));
    }
    if request.max_restarts > 0 {
        let restarts = request.max_restarts.to_string();
        set.push((options::MAX_RESTARTS, "--max-restarts", restarts));
    }
    if let Some(free) = request.max_preemptions {
        let free = free.to_string();
        set.push((options::MAX_PREEMPTIONS, "--max-preemptions", free));
    }
    if let Some(min) = request.min_pods {
        set.push((options::MIN_PODS, "--min-pods", min.to_string()));
    }
    if let Some(wait) = request.elastic_wait {
        set.push((options::ELASTIC_WAIT, "--elastic-wait", wait.to_string()));
    }
    if named_coordinator(request) {
        // The Indexed Job's first pod, by the name its replacement keeps.
        let coordinator = format!("{}:{DEFAULT_CONTROL_PORT}", coordinator_host(request));
        set.push((options::COORDINATOR, "--job-name", coordinator));
    }
    if let Some(coordinator) = system_coordinator(request) {
        set.push((options::COORDINATOR, "--max-restarts", coordinator));
    }
    if let Some(entry) = &request.entry {
        set.push((options::ENTRY, "--entry", entry.clone()));
    }
    if request.hang_timeout > 0 {
        let timeout = request.hang_timeout.to_string();
        set.push((options::HANG_TIMEOUT, "--hang-timeout", timeout));
    }
    if let (Some(nproc), true) = (nproc_asked(request), kind.role != PodRole::Pserver) {
        set.push((options::NPROC_PER_POD, "--nproc-per-pod", nproc));
    }
    set
}

/// --nproc-per-pod as the trainer pods get it: as given, else `auto` on GPU pods of the
/// collective protocol (one process per GPU the device plugin gives), else unset (one).
fn nproc_asked(request: &ManifestArgs) -> Option<String> {
    let given = request.nproc_per_pod.as_deref().map(str::trim);
    match given.filter(|n| !n.is_empty()) {
        Some(n) => Some(n.to_string()),
        None if request.gpu > 0 && request.protocol == Protocol::Collective => {
            Some("auto".to_string())
        }
        None => None,
    }
}

/// The trainer processes each trainer pod will run: `auto` is one per GPU asked for.
fn nproc_expected(request: &ManifestArgs) -> u32 {
    match nproc_asked(request).as_deref() {
        Some("auto") => request.gpu.max(1),
        Some(n) => n.parse().unwrap_or(1),
        None => 1,
    }
}

/// The trainer processes' ports, as the launcher picks them: from --trainer-port up, the
/// control port skipped when there are several.
fn trainer_ports(request: &ManifestArgs) -> Vec<u16> {
    let n = nproc_expected(request).max(1) as usize;
    crate::config::trainer_ports(request.trainer_port, n, &[DEFAULT_CONTROL_PORT])
}

/// The options the pods get from the downward API, with the flag whose value stands for them
/// when `manifest` validates the pods (none for what only the pod knows).
const FROM_DOWNWARD_API: &[(Opt, &str, Option<&str>)] = &[
    (
        options::NAMESPACE,
        "metadata.namespace",
        Some("--namespace"),
    ),
    (options::POD_IP, "status.podIP", None),
    (options::POD_NAME, "metadata.name", None),
];

/// A writable HOME for the non-root user under the read-only root filesystem (an emptyDir of
/// its own: Paddle and pip keep their caches there); a path no image ships files in.
const HOME: &str = "/home/paddle-launcher";

fn container_env(request: &ManifestArgs, kind: &PodKind) -> Vec<Value> {
    let mut env: Vec<Value> = FROM_DOWNWARD_API
        .iter()
        .map(|(opt, path, _)| env_field(opt.env(), path))
        .collect();
    // Where the pod runs: a failure's line on every pod names its node.
    env.push(env_field(crate::launch::NODE_NAME, "spec.nodeName"));
    if system_coordinator(request).is_some_and(|name| name.contains(JOBSET_NAME_VARIABLE)) {
        // Before the coordinator's name, which is made of it (`$(JOBSET_NAME)`).
        env.push(env_field(JOBSET_NAME_VARIABLE, &jobset_name_field()));
    }
    env.extend(
        options_from_flags(request, kind)
            .into_iter()
            .map(|(opt, _, value)| env_value(opt.env(), value)),
    );
    env.push(env_value(options::WORKDIR.env(), WORKDIR));
    // The children's grace period fits the pod's (a follower of a named coordinator does not
    // read its own pod's spec).
    env.push(env_value(
        options::POD_GRACE_PERIOD.env(),
        request.termination_grace_period,
    ));
    env.push(env_value("HOME", HOME));
    env.push(env_value("XDG_CACHE_HOME", format!("{HOME}/.cache")));
    // The root filesystem is read-only: the id files go to the work directory.
    env.push(env_value(options::ID_DIR.env(), WORKDIR));
    // From the Secret `<job>-launcher`: a pod without it waits for it (--wait-timeout),
    // saying so, then exits 2.
    env.push(env_value(
        options::JOB_SECRET_FILE.env(),
        format!("{SECRET_DIR}/{SECRET_KEY}"),
    ));
    if let Some(passes) = request.passes {
        match request.protocol {
            Protocol::V1 => {}
            Protocol::V2 => env.push(env_value("PADDLE_INIT_NUM_PASSES", passes)),
            Protocol::Fleet | Protocol::Collective => env.push(env_value("NUM_PASSES", passes)),
        }
    }
    for pair in &request.envs {
        if let Some((name, value)) = pair.split_once('=') {
            env.push(env_value(name, value));
        }
    }
    env
}

/// Runs the launcher's own validation (`Config::from_args`, what `run` does in each pod) on
/// the environment and arguments of this kind's container, so that `manifest` accepts exactly
/// what the pods will.
fn validate_pods(request: &ManifestArgs, kind: &PodKind) -> Result<(), ConfigError> {
    // Only the downward API knows these; the validation needs them to be well-formed only.
    let placeholder = |path: &str| match path {
        "metadata.namespace" => request.namespace.clone(),
        "metadata.name" => format!("{}-0", request.job_name),
        path if path == jobset_name_field() => request.job_name.clone(),
        // An address of the documentation range (RFC 5737): never a real pod's.
        _ => "192.0.2.1".to_string(),
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for var in container_env(request, kind) {
        let Some(name) = var["name"].as_str() else {
            continue;
        };
        let value = match var["value"].as_str() {
            // As the kubelet expands it: `$(NAME)` of a variable defined before.
            Some(value) => expand(value, &pairs),
            None => match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some(path) => placeholder(path),
                None => continue,
            },
        };
        pairs.push((name.to_string(), value));
    }
    let args = JobArgs::from_env_pairs(
        pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        &container_trainer_args(request, kind),
    )
    .map_err(|e| {
        let reason = e.to_string();
        let first_line = reason.lines().next().unwrap_or_default();
        invalid(
            "the pods' options",
            first_line,
            "options the launcher accepts",
        )
    })?;
    let args = as_detected(request, kind, args)?;
    match Config::from_args(&args) {
        Ok(_) => Ok(()),
        Err(e) => Err(as_manifest_error(request, e)),
    }
}

/// Under JobSet and Volcano: the options with what the pod's launcher will read from the
/// system filled in, by the launcher's own detection from the names and variables the system
/// gives this manifest's pods.
fn as_detected(
    request: &ManifestArgs,
    kind: &PodKind,
    args: JobArgs,
) -> Result<JobArgs, ConfigError> {
    use crate::batch::{detect, fill, Choice, Facts, Step};
    use crate::vocabulary::System;
    let kinds = pod_kinds(request);
    let job = &request.job_name;
    let (system, facts) = match request.runtime {
        ManifestRuntime::Job => return Ok(args),
        ManifestRuntime::Jobset | ManifestRuntime::Trainer => {
            let own = [
                (crate::batch::jobset::JOBSET_NAME, job.clone()),
                (
                    crate::batch::jobset::JOBSET_REPLICATED_JOB,
                    replicated_job_name(request, kind).to_string(),
                ),
            ];
            let facts = Facts {
                own: Some(own.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
                jobset: Some(
                    kinds
                        .iter()
                        .map(|k| (replicated_job_name(request, k).to_string(), k.count))
                        .collect(),
                ),
                ..Facts::default()
            };
            (System::JobSet, facts)
        }
        ManifestRuntime::Volcano => {
            let mut env = std::collections::BTreeMap::new();
            env.insert("VC_TASK_INDEX".to_string(), "0".to_string());
            env.insert(
                "HOSTNAME".to_string(),
                format!("{job}-{}-0", task_name(kind)),
            );
            for k in &kinds {
                let task = task_name(k);
                let hosts: Vec<String> = (0..k.count)
                    .map(|i| format!("{job}-{task}-{i}.{job}"))
                    .collect();
                let key = task.to_uppercase();
                env.insert(format!("VC_{key}_HOSTS"), hosts.join(","));
                env.insert(format!("VC_{key}_NUM"), k.count.to_string());
            }
            (
                System::Volcano,
                Facts {
                    env,
                    ..Facts::default()
                },
            )
        }
    };
    match detect(Choice::Only(system), &facts, true)? {
        Step::Done(Some(detected)) => Ok(fill(&detected, &args).0),
        other => Err(invalid(
            "--runtime",
            runtime_name(request),
            &format!("pods whose launcher can read the job (it would ask for {other:?})"),
        )),
    }
}

/// The `manifest` flag whose value the pods' variable holds, if one does.
fn flag_of(request: &ManifestArgs, variable: &str) -> Option<&'static str> {
    let kinds = pod_kinds(request);
    let from_flags = kinds
        .iter()
        .flat_map(|kind| options_from_flags(request, kind))
        .map(|(opt, flag, _)| (opt, Some(flag)));
    let from_api = FROM_DOWNWARD_API.iter().map(|(opt, _, flag)| (*opt, *flag));
    from_flags
        .chain(from_api)
        .find(|(opt, _)| opt.env() == variable)
        .and_then(|(_, flag)| flag)
}

/// The launcher's error, in the terms of the `manifest` flag that set the value.
fn as_manifest_error(request: &ManifestArgs, e: ConfigError) -> ConfigError {
    // "CONF_PADDLE_PORT (--port)" -> CONF_PADDLE_PORT
    let variable = e.variable.split(" (").next().unwrap_or_default();
    let by_env = request.envs.iter().any(|pair| {
        pair.split_once('=')
            .is_some_and(|(name, _)| name == variable)
    });
    let flag = if by_env {
        format!("--env {variable}")
    } else if let Some(flag) = flag_of(request, variable) {
        flag.to_string()
    } else {
        // Already in words that fit `manifest` too, e.g. "trainer argument (after --)".
        return e;
    };
    invalid(
        &flag,
        &e.value,
        &format!("{} (the pods' {variable})", e.expected),
    )
}

/// The container's arguments after `run --`.
fn container_trainer_args(request: &ManifestArgs, kind: &PodKind) -> Vec<String> {
    // A v1 pserver takes no pass-through (it is `paddle pserver`, started from the launcher's
    // own options). The launcher of every other protocol needs the program even in a pserver
    // pod: fleet runs it as the pserver, and v2's pserver pods validate it like any other.
    if kind.role == PodRole::Pserver && request.protocol == Protocol::V1 {
        return Vec::new();
    }
    let mut trainer_args = request.trainer_args.clone();
    if let (Some(passes), Protocol::V1) = (request.passes, request.protocol) {
        trainer_args.push(format!("--num_passes={passes}"));
    }
    trainer_args
}

fn job(request: &ManifestArgs, name: &str, kind: &PodKind, account: &str) -> Value {
    let trainer_args = container_trainer_args(request, kind);
    let mut args = vec!["run".to_string()];
    if !trainer_args.is_empty() {
        args.push("--".to_string());
        args.extend(trainer_args);
    }
    let mut ports: Vec<Value> = Vec::new();
    if kind.role != PodRole::Trainer && request.protocol.has_pservers() {
        // In u32: the launcher's validation keeps the range below 65536, and nothing here can
        // overflow whatever it is given.
        let first = u32::from(request.port);
        let count = u32::from(request.ports_num) + u32::from(request.ports_num_sparse);
        ports.extend(
            (0..count).map(|i| json!({"name": format!("pserver-{i}"), "containerPort": first + i})),
        );
    }
    if kind.role != PodRole::Pserver && request.protocol.trainers_listen() {
        let trainers = trainer_ports(request);
        for (local, port) in trainers.iter().enumerate() {
            let name = match trainers.len() {
                1 => "trainer".to_string(),
                _ => format!("trainer-{local}"),
            };
            ports.push(json!({"name": name, "containerPort": port}));
        }
    }
    ports.push(json!({"name": "control", "containerPort": DEFAULT_CONTROL_PORT}));
    let mut labels = kind.labels.clone();
    labels[JOB_LABEL] = json!(request.job_name);
    let mut resources = json!({"cpu": kind.cpu, "memory": kind.memory});
    if kind.gpu > 0 {
        resources["nvidia.com/gpu"] = json!(kind.gpu.to_string());
    }
    let mut mounts = vec![
        json!({"name": "tmp", "mountPath": "/tmp"}),
        json!({"name": "scratch", "mountPath": WORKDIR}),
        json!({"name": "home", "mountPath": HOME}),
    ];
    let mut volumes = vec![
        json!({"name": "tmp", "emptyDir": {}}),
        json!({"name": "scratch", "emptyDir": {}}),
        json!({"name": "home", "emptyDir": {}}),
    ];
    if kind.role != PodRole::Pserver && (kind.gpu > 0 || request.shm_size.is_some()) {
        let size = request.shm_size.as_deref().unwrap_or(kind.memory);
        mounts.push(json!({"name": "shm", "mountPath": "/dev/shm"}));
        volumes.push(json!({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}));
    }
    // A file, not an environment variable: it does not show in `ps` or `kubectl describe`.
    // Optional, so that a pod started before the Secret exists runs its launcher, which says
    // what it waits for, instead of waiting in ContainerCreating unexplained.
    let secret = json!({"secretName": secret_name(request), "optional": true,
                        "items": [{"key": SECRET_KEY, "path": SECRET_KEY}]});
    mounts.push(json!({"name": "job-secret", "mountPath": SECRET_DIR, "readOnly": true}));
    volumes.push(json!({"name": "job-secret", "secret": secret}));
    if let Some(claim) = &request.volume_claim {
        mounts.push(json!({"name": "jobpath", "mountPath": request.job_path}));
        volumes.push(json!({"name": "jobpath", "persistentVolumeClaim": {"claimName": claim}}));
    }
    let mut container = json!({
        "name": container_name(kind),
        "image": request.image,
        "imagePullPolicy": "Always",
        "args": args,
        "env": container_env(request, kind),
        "resources": {"requests": resources, "limits": resources},
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "runAsUser": USER,
            "capabilities": {"drop": ["ALL"]},
        },
    });
    if !ports.is_empty() {
        container["ports"] = json!(ports);
    }
    let mut spec = json!({
        "parallelism": kind.count,
        "completions": kind.count,
        // A lost pod is restarted by the Job; the launchers of the others exit 78 and follow.
        "backoffLimit": 3,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "restartPolicy": "Never",
                // The launchers are told it (POD_GRACE_PERIOD): the children get what it allows
                // less the launcher's own exit, halved with a channel (the coordinating launcher
                // stops its children, then waits as long for the others' stop).
                "terminationGracePeriodSeconds": request.termination_grace_period,
                "securityContext": {
                    "runAsNonRoot": true,
                    "runAsUser": USER,
                    "runAsGroup": USER,
                    "fsGroup": USER,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [container],
                "volumes": volumes,
            },
        },
    });
    spec["template"]["metadata"]["annotations"] = sidecar_annotations();
    if request.indexed || named_coordinator(request) {
        spec["completionMode"] = json!("Indexed");
    }
    if named_coordinator(request) {
        spec["template"]["spec"]["subdomain"] = json!(dns_name(request));
    }
    if request.max_restarts > 0 {
        // The launchers restart in place: the Job only replaces a pod that is gone, and that
        // costs it one failure (each one also costs the launchers one restart, so the two
        // budgets run out together). A launcher that exits non-zero has used up the job's
        // budget, or cannot run at all: fail the Job at once instead of retrying the pod. Not
        // counted: preemption and eviction (DisruptionTarget); counted, not fatal: a container
        // killed from outside (137: SIGKILL or OOM; 143: SIGTERM, the pod deleted).
        spec["backoffLimit"] = json!(request.max_restarts);
        if elastic(request) {
            // A shrunk job's missing pods never succeed: the job's success is its
            // coordinator's (pod 0 ends last, once every trainer has), after which the Job
            // controller ends the pods left (a replacement still Pending).
            spec["successPolicy"] =
                json!({"rules": [{"succeededIndexes": "0", "succeededCount": 1}]});
        }
        spec["podFailurePolicy"] = json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": container_name(kind),
                "operator": "NotIn", "values": [137, 143]}},
        ]});
    }
    let pod = &mut spec["template"]["spec"];
    place_pods(request, pod);
    if request.dns {
        // DNS membership needs no API access: no token in the pod.
        pod["automountServiceAccountToken"] = json!(false);
    } else {
        pod["serviceAccountName"] = json!(account);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": request.namespace},
        "spec": spec,
    })
}

/// Where the pods may run, as a GPU pool asks: its node labels, its taints tolerated, a
/// priority class (checked by `check_placement`).
fn place_pods(request: &ManifestArgs, pod: &mut Value) {
    let selector: serde_json::Map<String, Value> = request
        .node_selectors
        .iter()
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_string(), json!(value)))
        .collect();
    if !selector.is_empty() {
        pod["nodeSelector"] = Value::Object(selector);
    }
    let tolerations: Vec<Value> = request
        .tolerations
        .iter()
        .filter_map(|taint| toleration(taint))
        .collect();
    if !tolerations.is_empty() {
        pod["tolerations"] = json!(tolerations);
    }
    if let Some(class) = &request.priority_class {
        pod["priorityClassName"] = json!(class);
    }
}

/// A toleration from `KEY[=VALUE][:EFFECT]`: Equal with a value, Exists without; every effect
/// when none is given. None when it is not one.
fn toleration(taint: &str) -> Option<Value> {
    let (key_value, effect) = match taint.rsplit_once(':') {
        Some((key_value, effect)) => (key_value, Some(effect)),
        None => (taint, None),
    };
    if effect.is_some_and(|e| !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&e)) {
        return None;
    }
    let (key, value) = match key_value.split_once('=') {
        Some((key, value)) => (key, Some(value)),
        None => (key_value, None),
    };
    if !is_qualified_name(key) || value.is_some_and(|v| !is_label_value(v)) {
        return None;
    }
    let mut toleration = match value {
        Some(value) => json!({"key": key, "operator": "Equal", "value": value}),
        None => json!({"key": key, "operator": "Exists"}),
    };
    if let Some(effect) = effect {
        toleration["effect"] = json!(effect);
    }
    Some(toleration)
}

fn is_qualified_name(key: &str) -> bool {
    crate::selector::label_key(key).is_ok()
}

fn is_label_value(value: &str) -> bool {
    crate::selector::label_value(value).is_ok()
}

/// The placement and size options, each refused with one line as the API server would refuse it.
fn check_placement(request: &ManifestArgs) -> Result<(), ConfigError> {
    if let Some(size) = request
        .shm_size
        .as_deref()
        .filter(|s| !is_positive_quantity(s))
    {
        return Err(invalid("--shm-size", size, QUANTITY));
    }
    for pair in &request.node_selectors {
        let fits = pair
            .split_once('=')
            .is_some_and(|(key, value)| is_qualified_name(key) && is_label_value(value));
        if !fits {
            return Err(invalid(
                "--node-selector",
                pair,
                "KEY=VALUE with a label key (an optional DNS prefix and /, then up to 63 letters, digits, -, _ or .) and a label value",
            ));
        }
    }
    if let Some(taint) = request.tolerations.iter().find(|t| toleration(t).is_none()) {
        return Err(invalid(
            "--toleration",
            taint,
            "KEY[=VALUE][:EFFECT] with a label key and value, the effect NoSchedule, PreferNoSchedule or NoExecute",
        ));
    }
    if let Some(class) = request
        .priority_class
        .as_deref()
        .filter(|c| !is_dns_subdomain(c))
    {
        return Err(invalid(
            "--priority-class",
            class,
            "a PriorityClass name: lowercase letters, digits, - and ., at most 253",
        ));
    }
    Ok(())
}

/// A JobSet whose launchers restart in place: its pods reachable by their DNS names (the
/// coordinator's is one) before they are ready, and no restart of the whole JobSet behind the
/// launchers' back. A lost pod is replaced by its child Job (its `backoffLimit` is the budget,
/// its `podFailurePolicy` fails it at once when a launcher exits non-zero, the budget spent);
/// a child Job that fails fails the JobSet (`failurePolicy.maxRestarts: 0`), and with it
/// every pod: the end the launchers already agreed on.
fn recovering_jobset(request: &ManifestArgs, spec: &mut Value) {
    if request.max_restarts == 0 {
        return;
    }
    spec["network"] = json!({"enableDNSHostnames": true, "publishNotReadyAddresses": true});
    spec["failurePolicy"] = json!({"maxRestarts": 0});
    // A pod's DNS name holds its completion index.
    for job in spec["replicatedJobs"].as_array_mut().into_iter().flatten() {
        job["template"]["spec"]["completionMode"] = json!("Indexed");
    }
}

/// A Volcano Job whose launchers restart in place (Volcano v1.11 and later; read in its
/// job controller, docs/manifests-and-rbac.md). A pod deleted (preempted, evicted, drained, its
/// node gone) is recreated alone under its own name by the controller's default sync, so the
/// job has no policy for `PodEvicted`, and never `RestartJob` or `RestartPod` (which also
/// deletes the svc plugin's Service). A pod that fails is not recreated: unless a pod of its
/// name runs again within the launchers' own wait for a replacement (a preempted pod is
/// marked Failed before it is deleted), the job is terminated. The agreed end, every launcher
/// exiting non-zero with the budget spent, fails the job: all its pods have ended.
/// The coordinator's name needs the headless Service to publish pods before they are ready.
fn recovering_volcano_job(request: &ManifestArgs, spec: &mut Value) {
    if request.max_restarts == 0 {
        return;
    }
    spec["plugins"]["svc"] = json!(["--publish-not-ready-addresses"]);
    // Pods that wait for their peers for ever: a failed pod ends nothing either.
    if let Some(delay) = failed_pod_delay(request) {
        spec["policies"] = json!([{"event": "PodFailed", "action": "TerminateJob", "timeout": format!("{delay}s")}]);
    }
}

/// How long after a pod fails Volcano may terminate the job unless a pod of its name runs
/// again: the pods' own wait for their peers (the last `--env` of it, blank meaning the
/// default, as the kubelet gives the pods the last), from when they have noticed the loss (a
/// heartbeat timeout, 10 s) and stopped their children (the pod's grace period). None: the
/// pods wait for ever (0).
fn failed_pod_delay(request: &ManifestArgs) -> Option<u64> {
    let variable = format!("{}=", options::WAIT_TIMEOUT.env());
    let given = request
        .envs
        .iter()
        .rev()
        .find_map(|env| env.strip_prefix(&variable))
        .map(str::trim)
        .filter(|value| !value.is_empty());
    let wait = match given {
        None => options::DEFAULT_WAIT_TIMEOUT_SECONDS,
        // Anything else is refused with the pods' own variables (`validate_pods`).
        Some(value) => value
            .parse()
            .unwrap_or(options::DEFAULT_WAIT_TIMEOUT_SECONDS),
    };
    let noticed = options::DEFAULT_HEARTBEAT_TIMEOUT_SECONDS;
    (wait > 0).then(|| wait + noticed + request.termination_grace_period)
}

/// `$(NAME)` replaced by the value of a variable defined before it, as the kubelet does with a
/// container's environment; anything else left as it is.
fn expand(value: &str, before: &[(String, String)]) -> String {
    let mut out = value.to_string();
    for (name, known) in before.iter().rev() {
        out = out.replace(&format!("$({name})"), known);
    }
    out
}

/// Under a batch system with restarts: the coordinator is the first pod by the DNS name the
/// system gives it, which its replacement keeps. JobSet and Trainer v2:
/// `<jobset>-<replicated job>-0-0.<jobset>` (`network.enableDNSHostnames`, the subdomain
/// defaulting to the JobSet's name), the JobSet's name from the pod's own label: a Trainer v2
/// runtime serves every TrainJob, each a JobSet of its own name. Volcano: `<job>-<task>-0.<job>`
/// (its svc plugin's hostname and subdomain).
fn system_coordinator(request: &ManifestArgs) -> Option<String> {
    if request.max_restarts == 0 {
        return None;
    }
    let kind = pod_kinds(request).into_iter().next()?;
    match request.runtime {
        ManifestRuntime::Jobset | ManifestRuntime::Trainer => {
            let name = format!("$({JOBSET_NAME_VARIABLE})");
            let job = replicated_job_name(request, &kind);
            Some(format!("{name}-{job}-0-0.{name}:{DEFAULT_CONTROL_PORT}"))
        }
        ManifestRuntime::Volcano => {
            let (job, task) = (&request.job_name, task_name(&kind));
            Some(format!("{job}-{task}-0.{job}:{DEFAULT_CONTROL_PORT}"))
        }
        ManifestRuntime::Job => None,
    }
}

/// The variable the JobSet coordinator's name is made of, from the pod's label.
const JOBSET_NAME_VARIABLE: &str = "JOBSET_NAME";

fn jobset_name_field() -> String {
    format!("metadata.labels['{}']", crate::batch::jobset::JOBSET_NAME)
}

/// Whether the pods get a named coordinator: for restarts (its replacement keeps the name), and
/// for big jobs (only it uses the API). Not for the split layout, whose pservers watch the
/// trainers themselves, nor with --dns, which needs no API.
/// Whether the job is elastic: a minimum below its pod count.
fn elastic(request: &ManifestArgs) -> bool {
    request.min_pods.is_some_and(|min| min < request.trainers)
}

fn named_coordinator(request: &ManifestArgs) -> bool {
    request.runtime == ManifestRuntime::Job
        && crate::launch::coordination::named_in_manifest(
            request.max_restarts,
            request.split,
            request.dns,
            request.trainers,
        )
}

fn container_name(kind: &PodKind) -> &'static str {
    match kind.role {
        PodRole::Both | PodRole::Trainer => "trainer",
        PodRole::Pserver => "pserver",
    }
}

/// The DNS name of the Indexed Job's pod 0 through the headless Service (`subdomain`): it
/// follows the pod, so a replacement of the coordinator's pod serves at the same name.
fn coordinator_host(request: &ManifestArgs) -> String {
    format!("{}-0.{}", request.job_name, dns_name(request))
}

/// A sidecar proxy (Istio's) would accept the control port's connections for the pod and
/// forward them from 127.0.0.6, an address that is no member's, so the coordinator would refuse
/// every follower: the port is kept out of the mesh both ways.
fn sidecar_annotations() -> Value {
    let port = DEFAULT_CONTROL_PORT.to_string();
    json!({
        "traffic.sidecar.istio.io/excludeInboundPorts": port,
        "traffic.sidecar.istio.io/excludeOutboundPorts": port,
    })
}

/// The Secret holding the job's control-channel secret (`kubectl create secret generic`).
/// What the user must do or know beyond applying the documents, said on stderr and as comments
/// at the top of the YAML: the Secret the pods wait for (it is no document: a secret does not
/// belong in a file kept with the job), and an image that is not pinned.
pub fn notes(request: &ManifestArgs) -> Vec<String> {
    let mut notes = vec![format!(
        "Create the Secret {name} first (the pods wait for it, then exit 2): kubectl create secret generic {name} -n {ns} --from-literal=secret=$(openssl rand -hex 16)",
        name = secret_name(request),
        ns = request.namespace
    )];
    if !image_is_pinned(&request.image) {
        notes.push(format!(
            "--image {} is not pinned: give a version tag (not `latest`) or a digest (@sha256:...), so that every pod, and every restart, runs the same Paddle",
            request.image
        ));
    }
    notes
}

/// A digest, or a tag other than `latest` (a registry's port is no tag).
fn image_is_pinned(image: &str) -> bool {
    if image.contains("@sha256:") {
        return true;
    }
    let name = image.rsplit('/').next().unwrap_or(image);
    matches!(name.rsplit_once(':'), Some((_, tag)) if !tag.is_empty() && tag != "latest")
}

fn secret_name(request: &ManifestArgs) -> String {
    format!("{}-launcher", request.job_name)
}

/// The headless Service of --dns and of --max-restarts, resolved through the pod's search
/// domains.
fn dns_name(request: &ManifestArgs) -> String {
    format!("{}-pods", request.job_name)
}

/// The documents as one YAML stream, with a header saying how to regenerate it.
pub fn to_yaml(request: &ManifestArgs, docs: &[Value], command_line: &str) -> String {
    let mut out = format!("# Generated by: {command_line}\n");
    for note in notes(request) {
        out.push_str(&format!("# {note}\n"));
    }
    for doc in docs {
        out.push_str("---\n");
        match serde_saphyr::to_string(doc) {
            Ok(yaml) => out.push_str(&yaml),
            Err(e) => out.push_str(&format!("# cannot write this document: {e}\n")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the API server parses them: "8GB" and "2cores" would be refused at creation, a
    /// request of 0 or below schedules nothing.
    #[test]
    fn resources_are_quantities_the_api_server_accepts() {
        for good in [
            "4", "500m", "1.5", "+2", "8Gi", "512Mi", "8G", "1e3", "2E-1", ".5", "1.",
        ] {
            assert!(is_positive_quantity(good), "{good}");
        }
        for bad in [
            "8GB", "2cores", "", "Gi", "0", "0.0", "-1", "1..5", "1e", "1eX", "8gi", "1 Gi", "1KiB",
        ] {
            assert!(!is_positive_quantity(bad), "{bad}");
        }
    }
}
