//! Jobs on the real control plane (tests/real_cluster.rs, and the scale bench): `manifest`'s
//! objects created as a user would, read back with the real kubectl.

use serde_json::{json, Value};

use super::control_plane::ControlPlane;
use super::{assert_contains, LAUNCHER};

/// YAML documents (separated by `---`) as JSON values.
pub fn documents(yaml: &str) -> Vec<Value> {
    yaml.split("\n---")
        .map(|d| d.trim())
        .filter(|d| {
            d.lines()
                .any(|l| !l.starts_with('#') && !l.trim().is_empty())
        })
        .map(|d| serde_saphyr::from_str::<Value>(d).unwrap_or_else(|e| panic!("{e}:\n{d}")))
        .collect()
}

/// Creates `objects` in `namespace` (kubectl create, as the admin): they must be accepted.
#[track_caller]
pub fn create(plane: &ControlPlane, namespace: &str, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let file = plane
        .dir
        .join(format!("create-{}.json", super::control_plane::unique()));
    std::fs::write(&file, list.to_string()).unwrap();
    plane.kubectl_must(&["create", "-n", namespace, "-f", file.to_str().unwrap()]);
}

/// The object as JSON (kubectl get -o json), None when it does not exist.
pub fn get(plane: &ControlPlane, namespace: &str, what: &[&str]) -> Option<Value> {
    let mut args = vec!["get", "-n", namespace, "-o", "json"];
    args.extend(what);
    let (code, out, _) = plane.kubectl(&args);
    (code == 0).then(|| serde_json::from_str(&out).unwrap())
}

/// `manifest`'s Job for `job` in `namespace` with `extra` options, the program after `--`; the
/// Secret its pods wait for created first as the manifest's comment says.
pub fn generated(
    plane: &ControlPlane,
    namespace: &str,
    job: &str,
    extra: &[&str],
    program: &[String],
) -> Vec<Value> {
    let mut args = vec![
        "manifest",
        "--job-name",
        job,
        "--namespace",
        namespace,
        "--image",
        "example.com/team/paddle-job:dp",
        "--protocol",
        "collective",
    ];
    args.extend(extra);
    args.push("--");
    args.extend(program.iter().map(String::as_str));
    let out = std::process::Command::new(LAUNCHER)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    if let Some(command) = yaml
        .lines()
        .find_map(|l| l.strip_prefix("# Create the Secret"))
    {
        assert_contains(command, "kubectl create secret generic");
        plane.kubectl_must(&[
            "create",
            "secret",
            "generic",
            &format!("{job}-launcher"),
            "-n",
            namespace,
            "--from-literal=secret=real-cluster-test-secret-0123456789abcdef",
        ]);
    }
    documents(&yaml)
}

/// The Job's pods tolerate `pool`'s taint (`manifest --node-selector` pins them to its nodes):
/// the one edit the tests make to a generated Job, so that a test's nodes run its pods only.
pub fn tolerate_pool(objects: &mut [Value], pool: &str) {
    for object in objects.iter_mut().filter(|o| o["kind"] == "Job") {
        object["spec"]["template"]["spec"]["tolerations"] = json!([
            {"key": super::node_agent::POOL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
        ]);
    }
}
