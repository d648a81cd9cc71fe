//! `manifest`: ready-to-apply YAML for a job. Pure: options in, documents out.
//!
//! The pods run as a non-root user with a read-only root filesystem, no capabilities and the
//! runtime's seccomp profile; the launcher's files go to writable emptyDir volumes (/tmp and
//! the work directory /workspace).

use serde_json::{json, Value};

use crate::cli::ManifestArgs;
use crate::config::ConfigError;
use crate::selector::is_dns_subdomain;

const WORKDIR: &str = "/workspace";
/// On every pod of the job: what its NetworkPolicy selects.
const JOB_LABEL: &str = "paddle-launcher/job";
/// A high UID, not one of the image's users (checkov: CKV_K8S_40).
const USER: u32 = 10001;

fn invalid(flag: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError::new(flag, value, expected)
}

/// What one of the pod templates runs.
struct PodKind<'a> {
    role: &'static str,
    count: u32,
    cpu: &'a str,
    memory: &'a str,
    gpu: u32,
    labels: Value,
}

pub fn documents(a: &ManifestArgs) -> Result<Vec<Value>, ConfigError> {
    if !(a.job_name.len() <= 52 && is_dns_subdomain(&a.job_name)) {
        // 52 leaves room for the "-pserver"/"-launcher" suffixes within 63.
        return Err(invalid(
            "--job-name",
            &a.job_name,
            "a job name of 1-52 lowercase letters, digits, '-' or '.'",
        ));
    }
    if a.image.is_empty() || a.image.contains(char::is_whitespace) {
        return Err(invalid(
            "--image",
            &a.image,
            "an image reference such as example.com/team/paddle-job:v1",
        ));
    }
    if a.trainers == 0 {
        return Err(invalid("--trainers", "0", "at least 1 trainer"));
    }
    if a.split && a.dns {
        return Err(invalid(
            "--dns",
            "true",
            "the one-Job layout (the split layout is found through the Kubernetes API)",
        ));
    }
    if a.split && (a.pservers == 0 || a.protocol == "collective") {
        return Err(invalid(
            "--split",
            "true",
            "--pservers of at least 1 and a protocol with pservers (v1, v2, fleet)",
        ));
    }
    if !a.split && a.pservers != 0 {
        return Err(invalid(
            "--pservers",
            &a.pservers.to_string(),
            "--split too (without it every pod runs a pserver)",
        ));
    }
    match (a.protocol.as_str(), &a.entry) {
        ("v1", Some(entry)) => {
            return Err(invalid("--entry", entry, "no entry with --protocol v1"))
        }
        ("v1", None) => {}
        (_, None) if a.trainer_args.is_empty() => return Err(invalid(
            "--entry",
            "",
            "the training program: --entry \"python /workspace/train.py\", or its argv after --",
        )),
        (_, Some(entry)) if !a.trainer_args.is_empty() => {
            return Err(invalid(
                "--entry",
                entry,
                "either --entry or the program's argv after --, not both",
            ))
        }
        _ => {}
    }
    for pair in &a.envs {
        match pair.split_once('=') {
            Some((name, _)) if !name.is_empty() && !name.contains(char::is_whitespace) => {}
            _ => return Err(invalid("--env", pair, "NAME=VALUE")),
        }
    }
    let account = format!("{}-launcher", a.job_name);
    let mut docs = Vec::new();
    if a.dns {
        // Headless, and listing pods before they are Ready: the launchers wait for all of them.
        let mut ports = vec![json!({"name": "pserver", "port": a.port})];
        if matches!(a.protocol.as_str(), "fleet" | "collective") {
            ports = vec![json!({"name": "trainer", "port": a.trainer_port})];
        }
        docs.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": dns_name(a), "namespace": a.namespace},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                     "selector": {JOB_LABEL: a.job_name}, "ports": ports},
        }));
    } else {
        docs.extend([
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": account, "namespace": a.namespace}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": account, "namespace": a.namespace},
                   "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": account, "namespace": a.namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                   "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": a.namespace}]}),
        ]);
    }
    docs.push(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": account, "namespace": a.namespace},
        "spec": {
            "podSelector": {"matchLabels": {JOB_LABEL: a.job_name}},
            "policyTypes": ["Ingress"],
            // Any port: gloo and the pservers' peers connect on ports of their own choosing.
            "ingress": [{"from": [{"podSelector": {"matchLabels": {JOB_LABEL: a.job_name}}}]}],
        },
    }));
    if a.split {
        let pserver = PodKind {
            role: "pserver",
            count: a.pservers,
            cpu: &a.pscpu,
            memory: &a.psmemory,
            gpu: 0,
            labels: json!({"paddle-job-pserver": a.job_name}),
        };
        let trainer = PodKind {
            role: "trainer",
            count: a.trainers,
            cpu: &a.cpu,
            memory: &a.memory,
            gpu: a.gpu,
            labels: json!({"paddle-job": a.job_name}),
        };
        docs.push(job(
            a,
            &format!("{}-pserver", a.job_name),
            &pserver,
            &account,
        ));
        docs.push(job(
            a,
            &format!("{}-trainer", a.job_name),
            &trainer,
            &account,
        ));
    } else {
        let both = PodKind {
            role: "both",
            count: a.trainers,
            cpu: &a.cpu,
            memory: &a.memory,
            gpu: a.gpu,
            labels: json!({}),
        };
        docs.push(job(a, &a.job_name, &both, &account));
    }
    Ok(docs)
}

fn env_value(name: &str, value: impl ToString) -> Value {
    json!({"name": name, "value": value.to_string()})
}

fn env_field(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

fn container_env(a: &ManifestArgs, kind: &PodKind) -> Vec<Value> {
    let mut env = vec![
        env_value("JOB_NAME", &a.job_name),
        env_field("JOB_NAMESPACE", "metadata.namespace"),
        env_field("POD_IP", "status.podIP"),
        env_field("POD_NAME", "metadata.name"),
        env_value("PADDLE_LAUNCHER_PROTOCOL", &a.protocol),
        env_value("CONF_PADDLE_PORT", a.port),
        env_value("CONF_PADDLE_PORTS_NUM", a.ports_num),
        env_value("CONF_PADDLE_PORTS_NUM_SPARSE", a.ports_num_sparse),
        env_value("PADDLE_LAUNCHER_TRAINER_PORT", a.trainer_port),
        env_value("PADDLE_LAUNCHER_WORKDIR", WORKDIR),
        // The root filesystem is read-only: the id files go to the work directory.
        env_value("PADDLE_LAUNCHER_ID_DIR", WORKDIR),
    ];
    if kind.role == "both" {
        env.push(env_value("CONF_PADDLE_GRADIENT_NUM", a.trainers));
    } else {
        env.push(env_value("PADDLE_LAUNCHER_ROLE", kind.role));
        env.push(env_value("PSERVERS", a.pservers));
        env.push(env_value("TRAINERS", a.trainers));
    }
    if a.volume_claim.is_some() {
        env.push(env_value("JOB_PATH", &a.job_path));
    }
    if a.dns {
        env.push(env_value("PADDLE_LAUNCHER_DNS", dns_name(a)));
    }
    if let Some(entry) = &a.entry {
        env.push(env_value("ENTRY", entry));
    }
    if let Some(passes) = a.passes {
        match a.protocol.as_str() {
            "v1" => {}
            "v2" => env.push(env_value("PADDLE_INIT_NUM_PASSES", passes)),
            _ => env.push(env_value("NUM_PASSES", passes)),
        }
    }
    for pair in &a.envs {
        if let Some((name, value)) = pair.split_once('=') {
            env.push(env_value(name, value));
        }
    }
    env
}

fn job(a: &ManifestArgs, name: &str, kind: &PodKind, account: &str) -> Value {
    let mut trainer_args = a.trainer_args.clone();
    if let (Some(passes), "v1") = (a.passes, a.protocol.as_str()) {
        trainer_args.push(format!("--num_passes={passes}"));
    }
    let mut args = vec!["run".to_string()];
    // v1/v2 pservers take no pass-through; a fleet pserver runs the program too.
    if !trainer_args.is_empty() && (kind.role != "pserver" || a.protocol == "fleet") {
        args.push("--".to_string());
        args.extend(trainer_args);
    }
    let mut ports: Vec<Value> = Vec::new();
    if kind.role != "trainer" && a.protocol != "collective" {
        let count = a.ports_num + a.ports_num_sparse;
        ports.extend(
            (0..count)
                .map(|i| json!({"name": format!("pserver-{i}"), "containerPort": a.port + i})),
        );
    }
    if kind.role != "pserver" && matches!(a.protocol.as_str(), "fleet" | "collective") {
        ports.push(json!({"name": "trainer", "containerPort": a.trainer_port}));
    }
    let mut labels = kind.labels.clone();
    labels[JOB_LABEL] = json!(a.job_name);
    let mut resources = json!({"cpu": kind.cpu, "memory": kind.memory});
    if kind.gpu > 0 {
        resources["nvidia.com/gpu"] = json!(kind.gpu.to_string());
    }
    let mut mounts = vec![
        json!({"name": "tmp", "mountPath": "/tmp"}),
        json!({"name": "workspace", "mountPath": WORKDIR}),
    ];
    let mut volumes = vec![
        json!({"name": "tmp", "emptyDir": {}}),
        json!({"name": "workspace", "emptyDir": {}}),
    ];
    if let Some(claim) = &a.volume_claim {
        mounts.push(json!({"name": "jobpath", "mountPath": a.job_path}));
        volumes.push(json!({"name": "jobpath", "persistentVolumeClaim": {"claimName": claim}}));
    }
    let container_name = if kind.role == "both" {
        "trainer"
    } else {
        kind.role
    };
    let mut container = json!({
        "name": container_name,
        "image": a.image,
        "imagePullPolicy": "Always",
        "args": args,
        "env": container_env(a, kind),
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
                // Longer than the launcher's grace period (10 s), so it stops its children first.
                "terminationGracePeriodSeconds": 30,
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
    if a.indexed {
        spec["completionMode"] = json!("Indexed");
    }
    let pod = &mut spec["template"]["spec"];
    if a.dns {
        // DNS membership needs no API access: no token in the pod.
        pod["automountServiceAccountToken"] = json!(false);
    } else {
        pod["serviceAccountName"] = json!(account);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": a.namespace},
        "spec": spec,
    })
}

/// The headless Service of --dns, resolved through the pod's search domains.
fn dns_name(a: &ManifestArgs) -> String {
    format!("{}-pods", a.job_name)
}

/// The documents as one YAML stream, with a header saying how to regenerate it.
pub fn to_yaml(docs: &[Value], command_line: &str) -> String {
    let mut out = format!("# Generated by: {command_line}\n");
    for doc in docs {
        out.push_str("---\n");
        match serde_saphyr::to_string(doc) {
            Ok(yaml) => out.push_str(&yaml),
            Err(e) => out.push_str(&format!("# cannot write this document: {e}\n")),
        }
    }
    out
}
