//! The example manifests must be valid Kubernetes objects wired to what the launcher reads.

use std::collections::BTreeSet;

use clap::CommandFactory;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use paddle_launcher::cli::Cli;
use serde_json::Value;

/// What `manifest` gives the training program itself, not the launcher: a writable home and
/// cache under the read-only root filesystem.
const FOR_THE_PROGRAM: &[&str] = &["HOME", "XDG_CACHE_HOME"];

/// Every environment variable name the launcher reads, taken from its CLI definition.
fn launcher_env_names() -> BTreeSet<String> {
    let cli = Cli::command();
    let mut names = BTreeSet::new();
    let commands = std::iter::once(&cli).chain(cli.get_subcommands());
    for command in commands {
        for arg in command.get_arguments() {
            if let Some(env) = arg.get_env() {
                names.insert(env.to_string_lossy().to_string());
            }
        }
    }
    // Read without being an option: the node a failure's line names.
    names.insert("NODE_NAME".to_string());
    names
}

#[test]
fn colocated_example_is_valid_and_wired_to_the_launcher() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/k8s-examples/colocated-v1.yaml"
    ))
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let of_kind = |kind: &str| {
        docs.iter()
            .filter(|d| d["kind"] == kind)
            .cloned()
            .collect::<Vec<_>>()
    };
    let job: Job = serde_json::from_value(of_kind("Job").remove(0)).unwrap();
    let role: Role = serde_json::from_value(of_kind("Role").remove(0)).unwrap();
    let binding: RoleBinding = serde_json::from_value(of_kind("RoleBinding").remove(0)).unwrap();
    let account: ServiceAccount =
        serde_json::from_value(of_kind("ServiceAccount").remove(0)).unwrap();

    let rules = role.rules.unwrap();
    // Pods, events, and the Job (where the restart count outlives every pod).
    assert_eq!(rules.len(), 3);
    assert_eq!(
        rules[2].resources.as_deref(),
        Some(&["jobs".to_string()][..])
    );
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["pods".to_string()][..])
    );
    assert_eq!(rules[0].verbs, ["get", "list", "watch"]);
    assert_eq!(binding.role_ref.name, role.metadata.name.clone().unwrap());
    let account_name = account.metadata.name.unwrap();
    assert_eq!(binding.subjects.unwrap()[0].name, account_name);

    let spec = job.spec.unwrap();
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some(account_name.as_str())
    );
    let container = &pod.containers[0];
    let env = container.env.clone().unwrap();
    let known = launcher_env_names();
    for var in &env {
        assert!(
            known.contains(&var.name) || FOR_THE_PROGRAM.contains(&var.name.as_str()),
            "{} is not read by the launcher",
            var.name
        );
    }
    let value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    let field = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value_from.clone()?.field_ref)
            .map(|f| f.field_path)
    };
    assert_eq!(value("JOB_NAME"), job.metadata.name);
    let pods = value("CONF_PADDLE_GRADIENT_NUM")
        .unwrap()
        .parse::<i32>()
        .unwrap();
    assert_eq!(Some(pods), spec.parallelism);
    assert_eq!(Some(pods), spec.completions);
    assert_eq!(field("POD_IP").as_deref(), Some("status.podIP"));
    assert_eq!(field("POD_NAME").as_deref(), Some("metadata.name"));
    // The container exposes every pserver port.
    let first: i32 = value("CONF_PADDLE_PORT").unwrap().parse().unwrap();
    let count: i32 = value("CONF_PADDLE_PORTS_NUM")
        .unwrap()
        .parse::<i32>()
        .unwrap()
        + value("CONF_PADDLE_PORTS_NUM_SPARSE")
            .unwrap()
            .parse::<i32>()
            .unwrap();
    let ports: Vec<i32> = container
        .ports
        .clone()
        .unwrap()
        .iter()
        .map(|p| p.container_port)
        .collect();
    // The pserver's ports, then the control channel's (used once the job's Secret exists).
    let mut expected: Vec<i32> = (first..first + count).collect();
    expected.push(6171);
    assert_eq!(ports, expected);
    assert_eq!(
        container.args.as_ref().unwrap()[..2],
        ["run".to_string(), "--".to_string()]
    );
}

/// The YAML blocks of the documentation: README.md, then every page of docs/ by name, each block
/// with the file it is in.
fn documented_yaml_blocks() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    std::iter::once(root.join("README.md"))
        .chain(pages)
        .flat_map(|path| {
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            text.split("```yaml\n")
                .skip(1)
                .map(|rest| (name.clone(), rest.split("```").next().unwrap().to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The documentation's RBAC block creates the ServiceAccount its Job snippets run as, and binds
/// the Role to it in the one namespace of all three objects.
#[test]
fn readme_rbac_creates_and_binds_the_jobs_service_account() {
    let docs: Vec<Value> = documented_yaml_blocks()
        .iter()
        .flat_map(|(_, block)| serde_saphyr::from_multiple::<Value>(block).unwrap())
        .collect();
    let one = |kind: &str| {
        let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(
            found.len(),
            1,
            "README.md and docs/ together should have exactly one {kind}"
        );
        found[0].clone()
    };
    let account: ServiceAccount = serde_json::from_value(one("ServiceAccount")).unwrap();
    let role: Role = serde_json::from_value(one("Role")).unwrap();
    let binding: RoleBinding = serde_json::from_value(one("RoleBinding")).unwrap();
    let namespace = account.metadata.namespace.clone();
    assert_eq!(account.metadata.name.as_deref(), Some("paddle-launcher"));
    assert_eq!(role.metadata.namespace, namespace);
    assert_eq!(binding.metadata.namespace, namespace);
    assert_eq!(Some(binding.role_ref.name), role.metadata.name);
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(Some(&subjects[0].name), account.metadata.name.as_ref());
    assert_eq!(subjects[0].namespace, namespace);
}

/// Every Job in the documentation's YAML blocks (README.md and docs/) is a valid Job whose
/// environment the launcher reads; the front page shows one.
#[test]
fn readme_job_snippets_are_valid_and_use_known_variables() {
    let blocks = documented_yaml_blocks();
    assert!(
        blocks.len() >= 5,
        "expected the RBAC and a Job per protocol"
    );
    // Variables that Paddle itself reads, set by the user.
    let paddle_own = ["PADDLE_DISTRI_BACKEND"];
    let known = launcher_env_names();
    let mut protocols = BTreeSet::new();
    let mut jobs_in = BTreeSet::new();
    for (file, block) in &blocks {
        for doc in serde_saphyr::from_multiple::<Value>(block).unwrap() {
            if doc["kind"] != "Job" {
                continue;
            }
            jobs_in.insert(file.as_str());
            let job: Job = serde_json::from_value(doc).unwrap();
            let pod = job.spec.unwrap().template.spec.unwrap();
            let env = pod.containers[0].env.clone().unwrap();
            for var in &env {
                assert!(
                    known.contains(&var.name) || paddle_own.contains(&var.name.as_str()),
                    "{file} uses {} which the launcher does not read",
                    var.name
                );
                if var.name == "PADDLE_LAUNCHER_PROTOCOL" {
                    protocols.insert(var.value.clone().unwrap());
                }
            }
            assert_eq!(pod.service_account_name.as_deref(), Some("paddle-launcher"));
        }
    }
    assert_eq!(
        protocols,
        ["collective", "fleet", "v2"].map(String::from).into()
    );
    assert!(jobs_in.contains("README.md"), "the front page shows no Job");
}

/// The recovering example: the launchers find their coordinator by the name of the Indexed
/// Job's pod 0 through the headless Service, wait for the Secret, and the Job's own policy
/// matches the launchers' budget (preemption free, a lost pod one failure, a launcher's
/// non-zero exit the end).
#[test]
fn recovering_example_names_its_coordinator_and_fails_the_job_when_the_budget_is_spent() {
    use k8s_openapi::api::core::v1::Service;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/k8s-examples/recovering-collective.yaml"
    ))
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let of_kind = |kind: &str| docs.iter().find(|d| d["kind"] == kind).unwrap().clone();
    let job: Job = serde_json::from_value(of_kind("Job")).unwrap();
    let service: Service = serde_json::from_value(of_kind("Service")).unwrap();
    let service_spec = service.spec.unwrap();
    assert_eq!(service_spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(service_spec.publish_not_ready_addresses, Some(true));

    let spec = job.spec.unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    let pod = spec.template.spec.unwrap();
    let service_name = service.metadata.name.unwrap();
    assert_eq!(pod.subdomain.as_deref(), Some(service_name.as_str()));
    // The Service selects the pods.
    let labels = spec.template.metadata.unwrap().labels.unwrap();
    for (key, value) in service_spec.selector.unwrap() {
        assert_eq!(labels.get(&key), Some(&value));
    }
    let container = &pod.containers[0];
    let env = container.env.clone().unwrap();
    let known = launcher_env_names();
    let value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    for var in &env {
        let program = FOR_THE_PROGRAM.contains(&var.name.as_str());
        assert!(known.contains(&var.name) || program || var.name == "PADDLE_DISTRI_BACKEND");
    }
    let job_name = job.metadata.name.unwrap();
    assert_eq!(
        value("PADDLE_LAUNCHER_COORDINATOR"),
        format!("{job_name}-0.{service_name}:6171")
    );
    let budget: i32 = value("PADDLE_LAUNCHER_MAX_RESTARTS").parse().unwrap();
    assert!(budget > 0);
    assert_eq!(spec.backoff_limit, Some(budget));
    // The secret is mounted where the launcher reads it; a pod started before it exists runs
    // its launcher, which exits 2 naming it (and the podFailurePolicy fails the Job).
    let secret_file = value("PADDLE_LAUNCHER_JOB_SECRET_FILE");
    let volume = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.secret.is_some())
        .unwrap();
    let secret = volume.secret.unwrap();
    assert_eq!(secret.optional, Some(true));
    let mount = container
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .find(|m| m.name == volume.name)
        .unwrap();
    let key = &secret.items.unwrap()[0].path;
    assert_eq!(secret_file, format!("{}/{key}", mount.mount_path));

    let rules = spec.pod_failure_policy.unwrap().rules;
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].action, "Ignore");
    assert_eq!(
        rules[0].on_pod_conditions.as_ref().unwrap()[0].type_,
        "DisruptionTarget"
    );
    // A free preemption (83): not counted, as the launchers count it.
    assert_eq!(rules[1].action, "Ignore");
    let free = rules[1].on_exit_codes.as_ref().unwrap();
    assert_eq!(
        (free.operator.as_str(), &free.values[..]),
        ("In", &[83][..])
    );
    assert_eq!(rules[2].action, "FailJob");
    let codes = rules[2].on_exit_codes.as_ref().unwrap();
    for rule in &rules[1..] {
        let container_name = rule
            .on_exit_codes
            .as_ref()
            .unwrap()
            .container_name
            .as_deref();
        assert_eq!(container_name, Some(container.name.as_str()));
    }
    assert_eq!(codes.operator, "NotIn");
    // Killed from outside: counted, not fatal; every exit of the launcher itself is fatal.
    assert_eq!(codes.values, [137, 143]);
}
