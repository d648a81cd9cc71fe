//! What a platform adds to every runtime's objects as generated: labels and annotations on the
//! workload object and its pods, the Secrets that pull the image, the pull policy. Applied last,
//! to whatever `documents` made, so that every runtime gets them alike; a key the launcher sets
//! itself (the job's name its pods are found by) is refused rather than overwritten.

use serde_json::{json, Map, Value};

use super::flags::{invalid, is_positive_quantity, QUANTITY};
use super::JOB_LABEL;
use crate::cli::ManifestArgs;
use crate::config::DEFAULT_METRICS_PORT;
use crate::error::ConfigError;
use crate::selector::{is_dns_subdomain, label_key, label_value};

/// The kinds that are no workload: they get none of it.
const NOT_WORKLOADS: [&str; 5] = [
    "Service",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "NetworkPolicy",
];

/// `--label`s and `--annotation`s, checked: (key, value) each.
pub(super) struct Marks {
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
}

/// Every --label, --annotation, --image-pull-secret and --service-account, checked: one line
/// for the first bad one.
pub(super) fn check_custom(request: &ManifestArgs) -> Result<Marks, ConfigError> {
    let pair = |flag: &str, text: &str| -> Result<(String, String), ConfigError> {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| invalid(flag, text, "KEY=VALUE"))?;
        label_key(key).map_err(|why| invalid(flag, text, &why))?;
        Ok((key.to_string(), value.to_string()))
    };
    let mut labels = Vec::new();
    for text in &request.labels {
        let (key, value) = pair("--label", text)?;
        label_value(&value).map_err(|why| invalid("--label", text, &why))?;
        labels.push((key, value));
    }
    let mut annotations = Vec::new();
    for text in &request.annotations {
        annotations.push(pair("--annotation", text)?);
    }
    check_pods(request)?;
    if let Some(name) = request
        .service_account
        .as_ref()
        .filter(|name| !(name.len() <= 253 && is_dns_subdomain(name)))
    {
        return Err(invalid(
            "--service-account",
            name,
            "a ServiceAccount's name: lowercase letters, digits, '-' or '.', at most 253",
        ));
    }
    for name in &request.image_pull_secrets {
        if !(name.len() <= 253 && is_dns_subdomain(name)) {
            return Err(invalid(
                "--image-pull-secret",
                name,
                "a Secret's name: lowercase letters, digits, '-' or '.', at most 253",
            ));
        }
    }
    Ok(Marks {
        labels,
        annotations,
    })
}

/// The pods' own options: the GPU resource's name, the other resources, the capabilities.
fn check_pods(request: &ManifestArgs) -> Result<(), ConfigError> {
    label_key(&request.gpu_resource)
        .map_err(|why| invalid("--gpu-resource", &request.gpu_resource, &why))?;
    for text in &request.resources {
        let (name, quantity) = text
            .split_once('=')
            .ok_or_else(|| invalid("--resource", text, "NAME=QUANTITY"))?;
        label_key(name).map_err(|why| invalid("--resource", text, &why))?;
        if !is_positive_quantity(quantity) {
            return Err(invalid("--resource", text, QUANTITY));
        }
    }
    for text in &request.affinities {
        let (key, values) = text
            .split_once('=')
            .ok_or_else(|| invalid("--affinity", text, "KEY=VALUE[,VALUE...]"))?;
        label_key(key).map_err(|why| invalid("--affinity", text, &why))?;
        for value in values.split(',') {
            if value.is_empty() {
                return Err(invalid(
                    "--affinity",
                    text,
                    "KEY=VALUE[,VALUE...], no value empty",
                ));
            }
            label_value(value).map_err(|why| invalid("--affinity", text, &why))?;
        }
    }
    for (flag, key) in [
        ("--spread-by", &request.spread_by),
        ("--pack-by", &request.pack_by),
    ] {
        if let Some(key) = key {
            label_key(key).map_err(|why| invalid(flag, key, &why))?;
        }
    }
    for capability in &request.add_capabilities {
        let fits = !capability.is_empty()
            && capability
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !fits {
            return Err(invalid(
                "--add-capability",
                capability,
                "a Linux capability's name without CAP_, e.g. IPC_LOCK",
            ));
        }
    }
    Ok(())
}

/// Where the scheduler puts the pods: the nodes' labels (required node affinity), spread
/// over a topology key or kept together under one, each over every pod of the job (the label
/// every template has, pservers' and trainers' alike).
fn placement(request: &ManifestArgs, spec: &mut Value) {
    let labels = json!({JOB_LABEL: request.job_name});
    let expressions: Vec<Value> = request
        .affinities
        .iter()
        .filter_map(|text| text.split_once('='))
        .map(|(key, values)| {
            json!({"key": key, "operator": "In", "values": values.split(',').collect::<Vec<_>>()})
        })
        .collect();
    if !expressions.is_empty() {
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
            json!({"nodeSelectorTerms": [{"matchExpressions": expressions}]});
    }
    let selector = json!({"matchLabels": labels});
    if let Some(key) = &request.spread_by {
        spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
        }]);
    }
    if let Some(key) = &request.pack_by {
        spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json!([{"weight": 100, "podAffinityTerm": {"labelSelector": selector, "topologyKey": key}}]);
    }
}

/// The pod template's spec as the pod options ask: resources, capabilities, the user, the
/// node's network.
fn pod_options(request: &ManifestArgs, spec: &mut Value) {
    if request.host_network {
        spec["hostNetwork"] = json!(true);
        spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
    }
    let user = match (request.run_as_root, request.run_as_user) {
        (true, _) => Some(0),
        (false, user) => user,
    };
    if let Some(user) = user {
        // The group (and the volumes' fsGroup) stays the generated one: a UID says nothing of
        // the image's groups.
        let context = &mut spec["securityContext"];
        context["runAsNonRoot"] = json!(user != 0);
        context["runAsUser"] = json!(user);
    }
    let Some(containers) = spec["containers"].as_array_mut() else {
        return;
    };
    for container in containers {
        for text in &request.resources {
            if let Some((name, quantity)) = text.split_once('=') {
                container["resources"]["requests"][name] = json!(quantity);
                container["resources"]["limits"][name] = json!(quantity);
            }
        }
        let context = &mut container["securityContext"];
        if !request.add_capabilities.is_empty() {
            context["capabilities"]["add"] = json!(request.add_capabilities);
        }
        if let Some(user) = user {
            context["runAsNonRoot"] = json!(user != 0);
            context["runAsUser"] = json!(user);
        }
    }
}

/// Adds what was asked to every workload object and every pod template in it.
pub(super) fn customize(
    request: &ManifestArgs,
    marks: &Marks,
    docs: &mut [Value],
) -> Result<(), ConfigError> {
    for doc in docs.iter_mut() {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if NOT_WORKLOADS.contains(&kind) {
            continue;
        }
        mark(&mut doc["metadata"], marks)?;
        let mut templates = Vec::new();
        pod_templates(doc, &mut templates);
        for template in templates {
            mark(&mut template["metadata"], marks)?;
            if request.metrics {
                scraped(&mut template["metadata"]);
            }
            let spec = &mut template["spec"];
            pod_options(request, spec);
            placement(request, spec);
            if !request.image_pull_secrets.is_empty() {
                let secrets: Vec<Value> = request
                    .image_pull_secrets
                    .iter()
                    .map(|name| json!({"name": name}))
                    .collect();
                spec["imagePullSecrets"] = json!(secrets);
            }
            if let Some(containers) = spec["containers"].as_array_mut() {
                for container in containers {
                    container["imagePullPolicy"] = json!(request.image_pull_policy);
                }
            }
        }
    }
    Ok(())
}

/// The annotations Prometheus' Kubernetes discovery is commonly configured to follow
/// (`prometheus.io/scrape`, `port`, `path`).
fn scraped(metadata: &mut Value) {
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = Value::Object(Map::new());
    }
    let annotations = &mut metadata["annotations"];
    annotations["prometheus.io/scrape"] = json!("true");
    annotations["prometheus.io/port"] = json!(DEFAULT_METRICS_PORT.to_string());
    annotations["prometheus.io/path"] = json!("/metrics");
}

/// The labels and annotations asked, added to `metadata`; one the launcher set already with
/// another value is refused (its pods are found by their labels).
fn mark(metadata: &mut Value, marks: &Marks) -> Result<(), ConfigError> {
    for (field, flag, pairs) in [
        ("labels", "--label", &marks.labels),
        ("annotations", "--annotation", &marks.annotations),
    ] {
        if pairs.is_empty() {
            continue;
        }
        if !metadata[field].is_object() {
            metadata[field] = Value::Object(Map::new());
        }
        for (key, value) in pairs {
            match metadata[field][key].as_str() {
                Some(ours) if ours != value => {
                    return Err(invalid(
                        flag,
                        &format!("{key}={value}"),
                        &format!("a key the launcher does not set itself ({key} is {ours:?} on the generated objects)"),
                    ))
                }
                _ => metadata[field][key] = json!(value),
            }
        }
    }
    Ok(())
}

/// Every pod template under `value`: an object's `template` whose spec has containers.
fn pod_templates<'v>(value: &'v mut Value, out: &mut Vec<&'v mut Value>) {
    match value {
        Value::Object(map) => {
            let is_pod = map
                .get("template")
                .is_some_and(|t| t["spec"]["containers"].is_array());
            for (key, child) in map.iter_mut() {
                if key == "template" && is_pod {
                    out.push(child);
                } else {
                    pod_templates(child, out);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| pod_templates(item, out)),
        _ => {}
    }
}
