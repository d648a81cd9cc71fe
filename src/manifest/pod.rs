//! The pod template and the Indexed Job `manifest` writes: the container's env and args, its
//! placement, and the Job's failure policy.

use serde_json::{json, Value};

use crate::cli::Opt;
use crate::cli::{ManifestArgs, ManifestRuntime};
use crate::config::options;
use crate::config::{DEFAULT_CONTROL_PORT, DEFAULT_METRICS_PORT};
use crate::exit;
use crate::vocabulary::{PodRole, Protocol};

use super::{
    dns_name, pod_kinds, secret_name, PodKind, JOB_LABEL, SECRET_DIR, SECRET_KEY, USER, WORKDIR,
};
use super::{jobset_name_field, replicated_job_name, task_name, JOBSET_NAME_VARIABLE};

pub(super) fn env_value(name: &str, value: impl ToString) -> Value {
    json!({"name": name, "value": value.to_string()})
}

pub(super) fn env_field(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

/// The options the pods get from the downward API, with the flag whose value stands for them
/// when `manifest` validates the pods (none for what only the pod knows).
pub(super) const FROM_DOWNWARD_API: &[(Opt, &str, Option<&str>)] = &[
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
pub(super) const HOME: &str = "/home/paddle-launcher";

pub(super) fn container_env(request: &ManifestArgs, kind: &PodKind) -> Vec<Value> {
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
    // The port the annotations, the container port and the NetworkPolicy name: set, so that an
    // --env of another is refused rather than scraped where nothing listens.
    if request.metrics {
        env.push(env_value(options::METRICS_PORT.env(), DEFAULT_METRICS_PORT));
    }
    // The root filesystem is read-only: the id files go to the work directory.
    env.push(env_value(options::ID_DIR.env(), WORKDIR));
    // From the Secret `<job>-launcher`: a pod without it waits for it (--wait-timeout),
    // saying so, then exits 2.
    env.push(env_value(
        options::JOB_SECRET_FILE.env(),
        format!("{SECRET_DIR}/{SECRET_KEY}"),
    ));
    if let Some(passes) = request.passes {
        match request.protocol() {
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

/// The container's arguments after `run --`.
pub(super) fn container_trainer_args(request: &ManifestArgs, kind: &PodKind) -> Vec<String> {
    // A v1 pserver takes no pass-through (it is `paddle pserver`, started from the launcher's
    // own options). The launcher of every other protocol needs the program even in a pserver
    // pod: fleet runs it as the pserver, and v2's pserver pods validate it like any other.
    if kind.role == PodRole::Pserver && request.protocol() == Protocol::V1 {
        return Vec::new();
    }
    let mut trainer_args = request.trainer_args.clone();
    if let (Some(passes), Protocol::V1) = (request.passes, request.protocol()) {
        trainer_args.push(format!("--num_passes={passes}"));
    }
    trainer_args
}

/// A pod's requests and limits: no CPU limit unless asked (`--cpu-limit`), since CFS throttles
/// a limited container in bursts; the rest, limit = request.
fn resources(request: &ManifestArgs, kind: &PodKind) -> (Value, Value) {
    let mut requests = json!({"cpu": kind.cpu, "memory": kind.memory});
    if kind.gpu > 0 {
        requests[request.gpu_resource.as_str()] = json!(kind.gpu.to_string());
    }
    let mut limits = requests.clone();
    if !request.cpu_limit {
        limits.as_object_mut().map(|l| l.remove("cpu"));
    }
    (requests, limits)
}

pub(super) fn job(request: &ManifestArgs, name: &str, kind: &PodKind, account: &str) -> Value {
    let args = run_args(request, kind);
    let ports = container_ports(request, kind);
    let mut labels = kind.labels.clone();
    labels[JOB_LABEL] = json!(request.job_name);
    let (resources, limits) = resources(request, kind);
    let (mounts, volumes) = storage(request, kind);
    let mut container = json!({
        "name": container_name(kind),
        "image": request.image,
        "imagePullPolicy": "Always",
        "args": args,
        "env": container_env(request, kind),
        "resources": {"requests": resources, "limits": limits},
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
    spec["template"]["metadata"]["annotations"] = sidecar_annotations(request);
    if request.indexed || named_coordinator(request) {
        spec["completionMode"] = json!("Indexed");
    }
    if named_coordinator(request) {
        spec["template"]["spec"]["subdomain"] = json!(dns_name(request));
    }
    restarts(request, kind, &mut spec);
    let pod = &mut spec["template"]["spec"];
    place_pods(request, pod);
    if request.dns {
        // DNS membership needs no API access: no token in the pod.
        pod["automountServiceAccountToken"] = json!(false);
    }
    // The generated account, or one given (which may carry pull secrets or a cloud identity,
    // with DNS membership too).
    if !request.dns || request.service_account.is_some() {
        pod["serviceAccountName"] = json!(account);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": request.namespace},
        "spec": spec,
    })
}

/// The container's arguments: `run`, and the program's after `--`.
fn run_args(request: &ManifestArgs, kind: &PodKind) -> Vec<String> {
    let trainer_args = container_trainer_args(request, kind);
    let mut args = vec!["run".to_string()];
    if !trainer_args.is_empty() {
        args.push("--".to_string());
        args.extend(trainer_args);
    }
    args
}

/// The container's ports: the pservers', the trainers' where they listen, the channel's.
fn container_ports(request: &ManifestArgs, kind: &PodKind) -> Vec<Value> {
    let mut ports: Vec<Value> = Vec::new();
    if kind.role != PodRole::Trainer && request.protocol().has_pservers() {
        // In u32: the launcher's validation keeps the range below 65536, and nothing here can
        // overflow whatever it is given.
        let first = u32::from(request.port);
        let count = u32::from(request.ports_num) + u32::from(request.ports_num_sparse);
        ports.extend(
            (0..count).map(|i| json!({"name": format!("pserver-{i}"), "containerPort": first + i})),
        );
    }
    if kind.role != PodRole::Pserver && request.protocol().trainers_listen() {
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
    if request.metrics {
        ports.push(json!({"name": "metrics", "containerPort": DEFAULT_METRICS_PORT}));
    }
    ports
}

/// The container's mounts and the pod's volumes: writable scratch on a read-only root, shared
/// memory for GPU trainers (NCCL), the job secret as a file, the job's volume claim.
fn storage(request: &ManifestArgs, kind: &PodKind) -> (Vec<Value>, Vec<Value>) {
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
    (mounts, volumes)
}

/// How the Job counts its pods' failures. Not counted, as the launchers do not count them:
/// a disruption Kubernetes marks (an eviction, a preemption by the scheduler, a node's
/// shutdown or loss: `DisruptionTarget`), and a launcher that ends PREEMPTED (83: its pod
/// deleted — `kubectl delete pod`, a drain without the eviction API — within the job's free
/// preemptions). Failing the Job at once: the launcher's configuration statuses, which a
/// retried pod would meet again.
fn restarts(request: &ManifestArgs, kind: &PodKind, spec: &mut Value) {
    let container = container_name(kind);
    let mut rules = vec![
        json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}),
        json!({"action": "Ignore", "onExitCodes": {"containerName": container,
            "operator": "In", "values": [exit::PREEMPTED]}}),
    ];
    if request.max_restarts > 0 {
        // The launchers restart in place: the Job only replaces a pod that is gone, and that
        // costs it one failure (each one also costs the launchers one restart, so the two
        // budgets run out together). A launcher that exits non-zero has used up the job's
        // budget, or cannot run at all: fail the Job at once instead of retrying the pod.
        // Counted, not fatal: a container killed from outside (137: SIGKILL or OOM; 143:
        // SIGTERM past the free preemptions).
        spec["backoffLimit"] = json!(request.max_restarts);
        if elastic(request) {
            // A shrunk job's missing pods never succeed: the job's success is its
            // coordinator's (pod 0 ends last, once every trainer has), after which the Job
            // controller ends the pods left (a replacement still Pending).
            spec["successPolicy"] =
                json!({"rules": [{"succeededIndexes": "0", "succeededCount": 1}]});
        }
        rules.push(
            json!({"action": "FailJob", "onExitCodes": {"containerName": container,
            "operator": "NotIn", "values": [137, 143]}}),
        );
    } else {
        // No restart in place for failures: the Job retries the pods (`backoffLimit`), but
        // not a configuration every pod would refuse again.
        rules.push(
            json!({"action": "FailJob", "onExitCodes": {"containerName": container,
            "operator": "In", "values": CONFIGURATION_STATUSES}}),
        );
    }
    spec["podFailurePolicy"] = json!({ "rules": rules });
}

/// The launcher's statuses that a retried pod would meet again: bad configuration (2), no
/// cluster to find peers in (76), a command that cannot be executed (126) or is not there (127).
pub(super) const CONFIGURATION_STATUSES: [i32; 4] = [
    exit::INVALID_CONFIG,
    exit::NO_CLUSTER,
    exit::CANNOT_EXECUTE,
    exit::NOT_FOUND,
];

/// Where the pods may run, as a GPU pool asks: its node labels, its taints tolerated, a
/// priority class (checked by `check_placement`).
pub(super) fn place_pods(request: &ManifestArgs, pod: &mut Value) {
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
pub(super) fn toleration(taint: &str) -> Option<Value> {
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

/// How long after a pod fails Volcano may terminate the job unless a pod of its name runs
/// again: the pods' own wait for their peers (the last `--env` of it, blank meaning the
/// default, as the kubelet gives the pods the last), from when they have noticed the loss (a
/// heartbeat timeout, 10 s) and stopped their children (the pod's grace period). None: the
/// pods wait for ever (0).
pub(super) fn failed_pod_delay(request: &ManifestArgs) -> Option<u64> {
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
pub(super) fn expand(value: &str, before: &[(String, String)]) -> String {
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
pub(super) fn system_coordinator(request: &ManifestArgs) -> Option<String> {
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

/// Whether the pods get a named coordinator: for restarts (its replacement keeps the name), and
/// for big jobs (only it uses the API). Not for the split layout, whose pservers watch the
/// trainers themselves, nor with --dns, which needs no API.
/// Whether the job is elastic: a minimum below its pod count.
pub(super) fn elastic(request: &ManifestArgs) -> bool {
    request.min_pods.is_some_and(|min| min < request.trainers)
}

pub(super) fn named_coordinator(request: &ManifestArgs) -> bool {
    request.runtime == ManifestRuntime::Job
        && crate::coordination::named_in_manifest(
            request.max_restarts,
            request.split,
            request.dns,
            request.trainers,
        )
}

pub(super) fn container_name(kind: &PodKind) -> &'static str {
    match kind.role {
        PodRole::Both | PodRole::Trainer => "trainer",
        PodRole::Pserver => "pserver",
    }
}

/// The DNS name of the Indexed Job's pod 0 through the headless Service (`subdomain`): it
/// follows the pod, so a replacement of the coordinator's pod serves at the same name.
pub(super) fn coordinator_host(request: &ManifestArgs) -> String {
    format!("{}-0.{}", request.job_name, dns_name(request))
}

/// A sidecar proxy (Istio's) would accept the control port's connections for the pod and
/// forward them from 127.0.0.6, an address that is no member's, so the coordinator would refuse
/// every follower: the port is kept out of the mesh both ways.
/// With --metrics the metrics port is kept out inbound too: a scraper reaches the launcher
/// itself.
pub(super) fn sidecar_annotations(request: &ManifestArgs) -> Value {
    let port = DEFAULT_CONTROL_PORT.to_string();
    let inbound = match request.metrics {
        true => format!("{port},{DEFAULT_METRICS_PORT}"),
        false => port.clone(),
    };
    json!({
        "traffic.sidecar.istio.io/excludeInboundPorts": inbound,
        "traffic.sidecar.istio.io/excludeOutboundPorts": port,
    })
}

/// The launcher options the manifest sets from its own flags: each with the flag it comes from
/// (an error in its value names that flag) and its value. One list, from which the pods'
/// environment is made, so that the two cannot disagree.
pub(super) fn options_from_flags(
    request: &ManifestArgs,
    kind: &PodKind,
) -> Vec<(Opt, &'static str, String)> {
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
            request.protocol().to_string(),
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
    set.extend(counts_from_flags(request, kind));
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

/// The job's pod counts and this pod's role, for a Job (under JobSet and Volcano the launcher
/// reads them from the system).
fn counts_from_flags(request: &ManifestArgs, kind: &PodKind) -> Vec<(Opt, &'static str, String)> {
    let mut counts = Vec::new();
    if request.runtime != ManifestRuntime::Job {
        return counts;
    }
    if kind.role == PodRole::Both {
        counts.push((
            options::GRADIENT_NUM,
            "--trainers",
            request.trainers.to_string(),
        ));
    } else {
        counts.push((options::ROLE, "--split", kind.role.to_string()));
        counts.push((
            options::PSERVER_COUNT,
            "--pservers",
            request.pservers.to_string(),
        ));
        counts.push((
            options::TRAINER_COUNT,
            "--trainers",
            request.trainers.to_string(),
        ));
    }
    counts
}

/// --nproc-per-pod as the trainer pods get it: as given, else `auto` on GPU pods of the
/// collective protocol (one process per GPU the device plugin gives), else 1 for a collective
/// pod without GPUs (the launcher's own default there is `auto`, which a node's visible
/// devices could turn into more), else unset (one).
pub(super) fn nproc_asked(request: &ManifestArgs) -> Option<String> {
    let given = request.nproc_per_pod.as_deref().map(str::trim);
    match given.filter(|n| !n.is_empty()) {
        Some(n) => Some(n.to_string()),
        // `auto` counts the devices NVIDIA's plugin shows; another vendor's: as many as asked.
        None if request.gpu > 0 && request.protocol() == Protocol::Collective => {
            match request.gpu_resource.starts_with("nvidia.com/") {
                true => Some("auto".to_string()),
                false => Some(request.gpu.to_string()),
            }
        }
        None if request.protocol() == Protocol::Collective => Some("1".to_string()),
        None => None,
    }
}

/// The trainer processes each trainer pod will run: `auto` is one per GPU asked for.
pub(super) fn nproc_expected(request: &ManifestArgs) -> u32 {
    match nproc_asked(request).as_deref() {
        Some("auto") => request.gpu.max(1),
        Some(n) => n.parse().unwrap_or(1),
        None => 1,
    }
}

/// The trainer processes' ports, as the launcher picks them: from --trainer-port up, the
/// control port skipped when there are several.
pub(super) fn trainer_ports(request: &ManifestArgs) -> Vec<u16> {
    let n = nproc_expected(request).max(1) as usize;
    // The launcher skips its control and metrics ports (the metrics are on by default).
    let taken = [DEFAULT_CONTROL_PORT, DEFAULT_METRICS_PORT];
    crate::config::trainer_ports(request.trainer_port, n, &taken)
}

pub(super) fn is_qualified_name(key: &str) -> bool {
    crate::selector::label_key(key).is_ok()
}

pub(super) fn is_label_value(value: &str) -> bool {
    crate::selector::label_value(value).is_ok()
}
