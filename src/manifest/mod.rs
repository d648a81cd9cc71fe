//! `manifest`: ready-to-apply YAML for a job. Pure: options in, documents out.
//!
//! The pods run as a non-root user with a read-only root filesystem, no capabilities and the
//! runtime's seccomp profile; the launcher's files go to writable emptyDir volumes (/tmp and
//! the work directory [`WORKDIR`]).
//!
//! Every pod's launcher validates its options when it starts; `manifest` runs that same
//! validation (`Config::from_args`) on each container's environment and arguments before it
//! prints anything, so a bad value is an error here and not a Job whose pods all exit 2.

mod custom;
mod flags;
mod pod;
mod runtimes;
use serde_json::{json, Value};

use crate::cli::{ManifestArgs, ManifestRuntime};
use crate::config::{DEFAULT_CONTROL_PORT, DEFAULT_METRICS_PORT};
use crate::error::ConfigError;
use crate::vocabulary::PodRole;

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
pub(super) const JOB_LABEL: &str = "paddle-launcher/job";
/// A high UID, not one of the image's users (checkov: CKV_K8S_40).
const USER: u32 = 10001;

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
    check_names(request)?;
    check_layout(request)?;
    let kinds = pod_kinds(request);
    check_envs(request, &kinds)?;
    check_resources(request)?;
    check_placement(request)?;
    check_job_path(request)?;
    let marks = custom::check_custom(request)?;
    for kind in &kinds {
        validate_pods(request, kind)?;
    }
    let own = format!("{}-launcher", request.job_name);
    let account = request
        .service_account
        .clone()
        .unwrap_or_else(|| own.clone());
    let mut docs = Vec::new();
    docs.extend(service(request));
    // A job found by DNS needs no API access; an existing account has its own.
    if !request.dns && request.service_account.is_none() {
        docs.extend(rbac(request, &account));
    }
    if !request.no_network_policy {
        docs.push(network_policy(request, &own));
    }
    docs.extend(runtime_objects(request, &kinds, &account));
    custom::customize(request, &marks, &mut docs)?;
    Ok(docs)
}

/// The headless Service of a job found by DNS or whose coordinator is named: listing pods
/// before they are Ready (the launchers wait for all of them, and the coordinator's name must
/// resolve while its pod starts).
fn service(request: &ManifestArgs) -> Option<Value> {
    if !(request.dns || named_coordinator(request)) {
        return None;
    }
    let mut ports = Vec::new();
    if request.dns {
        ports.push(match request.protocol().trainers_listen() {
            true => json!({"name": "trainer", "port": request.trainer_port}),
            false => json!({"name": "pserver", "port": request.port}),
        });
    }
    if named_coordinator(request) {
        ports.push(json!({"name": "control", "port": DEFAULT_CONTROL_PORT}));
    }
    Some(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": dns_name(request), "namespace": request.namespace},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                 "selector": {JOB_LABEL: request.job_name}, "ports": ports},
    }))
}

/// The launchers' ServiceAccount, Role and RoleBinding (not needed by a job found by DNS).
fn rbac(request: &ManifestArgs, account: &str) -> [Value; 3] {
    [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": account, "namespace": request.namespace}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": account, "namespace": request.namespace},
               "rules": role_rules(request)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": account, "namespace": request.namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": request.namespace}]}),
    ]
}

/// Only the job's own pods may connect to its pods; with --metrics, a scraper in any
/// namespace to the metrics port alone.
fn network_policy(request: &ManifestArgs, account: &str) -> Value {
    // Any port: gloo and the pservers' peers connect on ports of their own choosing.
    let mut ingress =
        vec![json!({"from": [{"podSelector": {"matchLabels": {JOB_LABEL: request.job_name}}}]})];
    if request.metrics {
        ingress.push(json!({"from": [{"namespaceSelector": {}}],
            "ports": [{"protocol": "TCP", "port": DEFAULT_METRICS_PORT}]}));
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": account, "namespace": request.namespace},
        "spec": {
            "podSelector": {"matchLabels": {JOB_LABEL: request.job_name}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    })
}

/// The batch system's objects: an Indexed Job per kind of pod, or the JobSet, the Trainer v2
/// runtime and job, the Volcano Job.
fn runtime_objects(request: &ManifestArgs, kinds: &[PodKind], account: &str) -> Vec<Value> {
    match request.runtime {
        ManifestRuntime::Job => {
            let mut docs = Vec::new();
            for kind in kinds {
                let name = match kind.role {
                    PodRole::Both => request.job_name.clone(),
                    role => format!("{}-{role}", request.job_name),
                };
                let mut job = job(request, &name, kind, account);
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
            docs
        }
        ManifestRuntime::Jobset => vec![jobset(request, kinds, account)],
        ManifestRuntime::Volcano => vec![volcano_job(request, kinds, account)],
        ManifestRuntime::Trainer => training_runtime(request, kinds, account)
            .into_iter()
            .collect(),
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

/// The Secret holding the job's control-channel secret (`kubectl create secret generic`).
/// What the user must do or know beyond applying the documents, said on stderr and as comments
/// at the top of the YAML: the Secret the pods wait for (it is no document: a secret does not
/// belong in a file kept with the job), and an image that is not pinned.
pub fn notes(request: &ManifestArgs) -> Vec<String> {
    let mut notes = vec![format!(
        "Create the Secret {name} first (the pods wait for it, and exit 2 if it is not there within --wait-timeout): kubectl create secret generic {name} -n {ns} --from-literal=secret=$(openssl rand -hex 16)",
        name = secret_name(request),
        ns = request.namespace
    )];
    if !image_is_pinned(&request.image) {
        notes.push(format!(
            "--image {} is not pinned: give a version tag (not `latest`) or a digest (@sha256:...), so that every pod, and every restart, runs the same Paddle",
            request.image
        ));
    }
    if request.host_network {
        notes.push(
            "--host-network: each pod uses its node's network, so the ports its container declares (the control channel's 6171, the trainers' from --trainer-port, the pservers' from --port) must be free on every node, with one pod of the job per node (the scheduler keeps two such jobs apart); the NetworkPolicy does not apply to host-network pods; v1 and v2 need the nodes' interface name (CONF_PADDLE_NIC, eth0 by default)".to_string(),
        );
    }
    let root = request.run_as_root || request.run_as_user == Some(0);
    if !request.add_capabilities.is_empty() && !root {
        notes.push(format!(
            "--add-capability {}: Kubernetes gives added capabilities to a container's root processes only; with the default user (or --run-as-user other than 0) they have no effect: add --run-as-root if the image allows it",
            request.add_capabilities.join(",")
        ));
    }
    if let (Some(account), false) = (&request.service_account, request.dns) {
        notes.push(format!(
            "The pods run as the existing ServiceAccount {account}, for which no Role is generated: in namespace {}, it needs {}",
            request.namespace,
            verbs_needed(request)
        ));
    }
    notes
}

/// The Role's rules in words: "get, list, watch on pods; create on events; ...".
fn verbs_needed(request: &ManifestArgs) -> String {
    let rules = role_rules(request);
    let words = |value: &Value| -> String {
        let items = value.as_array().into_iter().flatten();
        items
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let said: Vec<String> = rules
        .as_array()
        .into_iter()
        .flatten()
        .map(|rule| {
            let named = match words(&rule["resourceNames"]) {
                names if names.is_empty() => String::new(),
                names => format!(" {names}"),
            };
            format!(
                "{} on {}{named}",
                words(&rule["verbs"]),
                words(&rule["resources"])
            )
        })
        .collect();
    said.join("; ")
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
use flags::{
    check_envs, check_job_path, check_layout, check_names, check_placement, check_resources,
    validate_pods,
};
use pod::{job, named_coordinator};
use runtimes::TRAINER_NODE;
use runtimes::{jobset, training_runtime, volcano_job, KUEUE_QUEUE};

fn runtime_name(request: &ManifestArgs) -> &'static str {
    match request.runtime {
        ManifestRuntime::Job => "job",
        ManifestRuntime::Jobset => "jobset",
        ManifestRuntime::Volcano => "volcano",
        ManifestRuntime::Trainer => "trainer",
    }
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

/// The variable the JobSet coordinator's name is made of, from the pod's label.
const JOBSET_NAME_VARIABLE: &str = "JOBSET_NAME";

fn jobset_name_field() -> String {
    format!("metadata.labels['{}']", crate::batch::jobset::JOBSET_NAME)
}

#[cfg(test)]
mod tests {
    use super::flags::is_positive_quantity;

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
