//! Keeps the fake API honest: the real kubectl must be able to use it, and the real API
//! server's recorded responses must pass through it and the launcher's pod parsing.

mod support;

use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use paddle_launcher::pod_view;
use serde_json::Value;
use support::fake_api::{job_pod, FakeApi};
use support::kubectl;

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[test]
fn kubectl_lists_pods_by_label_selector() {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    api.put_pod(job_pod("job-a", "job-a-0"));
    api.put_pod(job_pod("job-a", "job-a-1"));
    api.put_pod(job_pod("job-b", "job-b-0"));
    let (code, stdout, stderr) = kubectl(
        &api,
        dir.path(),
        &[
            "get",
            "pods",
            "-n",
            "default",
            "-l",
            "job-name=job-a",
            "-o",
            "json",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let list: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(names(&list), ["job-a-0", "job-a-1"]);
    let (code, stdout, _) = kubectl(
        &api,
        dir.path(),
        &["get", "pods", "-l", "job-name!=job-a", "-o", "json"],
    );
    assert_eq!(code, 0);
    assert_eq!(names(&serde_json::from_str(&stdout).unwrap()), ["job-b-0"]);
}

/// The field selectors the launcher's own-pod lookup sends (a pod by its IP, not finished),
/// through kubectl; a field the real server cannot select on is refused as it refuses it.
#[test]
fn kubectl_selects_pods_by_ip_and_phase() {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    for (name, phase) in [("old", "Failed"), ("new", "Running"), ("other", "Running")] {
        api.put_pod(job_pod("j", name));
        let ip = if name == "other" {
            "10.0.0.8"
        } else {
            "10.0.0.7"
        };
        api.set_status("default", name, phase, Some(ip));
    }
    let selector = "status.podIP=10.0.0.7,status.phase!=Succeeded,status.phase!=Failed";
    let (code, stdout, stderr) = kubectl(
        &api,
        dir.path(),
        &["get", "pods", "--field-selector", selector, "-o", "json"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(names(&serde_json::from_str(&stdout).unwrap()), ["new"]);
    let (code, _, stderr) = kubectl(
        &api,
        dir.path(),
        &["get", "pods", "--field-selector", "spec.color=blue"],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("is not a known field selector"), "{stderr}");
}

#[test]
fn kubectl_reports_the_forbidden_status_body() {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    api.set_forbidden(true);
    let (code, _, stderr) = kubectl(&api, dir.path(), &["get", "pods", "-o", "json"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("pods is forbidden: User \"system:serviceaccount:default:trainer\" cannot list resource \"pods\""), "{stderr}");
}

#[test]
fn kubectl_watch_receives_changes_as_they_happen() {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    api.put_pod(job_pod("w", "w-0"));
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    let mut watcher = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(dir.path().join("kube-cache"))
        .args([
            "get",
            "pods",
            "-l",
            "job-name=w",
            "--watch-only",
            "-o",
            "json",
            "--request-timeout=20s",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    // Change the pod until the watcher has seen it (it may connect after the first change).
    let reader = std::thread::spawn({
        let mut out = watcher.stdout.take().unwrap();
        move || {
            let mut text = String::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
                if n == 0 {
                    break;
                }
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if text.contains("\"127.0.0.42\"") {
                    break;
                }
            }
            text
        }
    });
    for _ in 0..100 {
        api.set_status("default", "w-0", "Running", Some("127.0.0.42"));
        std::thread::sleep(std::time::Duration::from_millis(100));
        if reader.is_finished() {
            break;
        }
    }
    let seen = reader.join().unwrap();
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert!(seen.contains("\"podIP\": \"127.0.0.42\""), "{seen}");
}

/// Every object the real API server sent (lists, watch events, bookmarks) parses as a Pod and
/// gives a sensible view; bookmarks carry no pod name.
#[test]
fn every_recorded_pod_parses() {
    let mut pods = 0;
    for file in [
        "v1-34-pod-list.json",
        "v1-36-pod-list.json",
        "v1-34-watch_event-watch_pods.json",
        "v1-36-watch_event-watch_pods.json",
        "v1-34-watch_event-watch_pods_without_initial_events.json",
        "v1-36-watch_event-watch_pods_without_initial_events.json",
    ] {
        let recorded: Value =
            serde_json::from_str(&std::fs::read_to_string(support::fixture(file)).unwrap())
                .unwrap();
        let body = recorded[0]["response_body"].as_str().unwrap();
        let objects: Vec<Value> = if file.contains("pod-list") {
            serde_json::from_str::<Value>(body).unwrap()["items"]
                .as_array()
                .unwrap()
                .clone()
        } else {
            body.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str::<Value>(l).unwrap()["object"].clone())
                .collect()
        };
        for object in objects {
            let pod: Pod =
                serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
            let view = pod_view(&pod);
            if object["metadata"]["name"].is_string() {
                pods += 1;
                assert!(!view.name.is_empty());
                assert!(
                    ["Pending", "Running", "Succeeded", "Failed"].contains(&view.phase.as_str()),
                    "{file}: {}",
                    view.phase
                );
                if view.phase == paddle_launcher::PodPhase::Running {
                    assert!(
                        view.ip.is_some(),
                        "{file}: {} Running without an IP",
                        view.name
                    );
                }
            }
        }
    }
    assert!(pods > 30, "only {pods} pods in the fixtures");
}

/// The recorded PodList body is served verbatim (the fake does not rewrite it) and both kubectl
/// and the launcher's own client accept it.
#[test]
fn recorded_pod_list_is_served_verbatim_to_kubectl() {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    let recorded: Value = serde_json::from_str(
        &std::fs::read_to_string(support::fixture("v1-36-pod-list.json")).unwrap(),
    )
    .unwrap();
    let body = recorded[0]["response_body"].as_str().unwrap().to_string();
    api.record("/api/v1/namespaces/kube-system/pods", 200, body.clone());
    let (code, stdout, stderr) = kubectl(
        &api,
        dir.path(),
        &["get", "pods", "-n", "kube-system", "-o", "json"],
    );
    assert_eq!(code, 0, "{stderr}");
    let ours: Value = serde_json::from_str(&stdout).unwrap();
    let theirs: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(names(&ours), names(&theirs));
    assert_eq!(
        ours["items"][0]["status"]["podIP"],
        theirs["items"][0]["status"]["podIP"]
    );
}

/// The real kubectl creates an event through the fake API and lists it back; an event the real
/// server would refuse (an unknown type) is refused with the real server's status and reason.
#[test]
fn kubectl_creates_and_lists_events() {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    let event = |kind: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": "j.", "namespace": "default"},
            "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": "default", "uid": "c-1"},
            "type": kind, "reason": "Started", "message": "all 3 pods of the job found",
            "source": {"component": "paddle-launcher"}
        })
    };
    let file = dir.path().join("event.json");
    std::fs::write(&file, event("Normal").to_string()).unwrap();
    let (code, stdout, stderr) = kubectl(
        &api,
        dir.path(),
        &[
            "create",
            "--validate=false",
            "-f",
            &file.display().to_string(),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("event/j."), "{stdout}");
    let (code, stdout, stderr) = kubectl(
        &api,
        dir.path(),
        &["get", "events", "-n", "default", "-o", "jsonpath={range .items[*]}{.involvedObject.kind}/{.involvedObject.name} {.type} {.reason}: {.message}{\"\\n\"}{end}"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "Job/j Normal Started: all 3 pods of the job found\n"
    );
    std::fs::write(&file, event("Bad").to_string()).unwrap();
    let (code, _, stderr) = kubectl(
        &api,
        dir.path(),
        &[
            "create",
            "--validate=false",
            "-f",
            &file.display().to_string(),
        ],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("Unsupported value"), "{stderr}");
    assert_eq!(api.events().len(), 1);
}
