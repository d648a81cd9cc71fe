//! The parameter-server contract (`--protocol fleet`) proven with real PaddlePaddle 2.6.2, as
//! the collective one is: 2 pservers and 2 trainers in both layouts, colocated (`local`) and
//! split (pserver and trainer pods against the fake API). Training must really happen on the
//! pservers: each trainer only ever sees half of the model's weights, its loss falls at least
//! tenfold, both trainers read back the same four weights from the pservers afterwards, and
//! those are the weights the pservers themselves saved (their table files). The pservers are
//! stopped by trainer 0 and every process exits 0 with no crash banner.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::fake_api::job_pod;
use support::{free_ports, ps_paddle_python, Cluster, Launcher, LAUNCHER};

const LIMIT: Duration = Duration::from_secs(240);
const TRUE_W: [f64; 4] = [1.0, -0.75, 0.5, 1.0];

fn program() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/parameter_server/train.py")
        .display()
        .to_string()
}

/// The table rows (id -> weight) the pservers saved, and which files (one per pserver shard
/// set: part-<pserver>-*) held them.
fn saved_table(shared: &Path) -> (Vec<(u64, f64)>, Vec<String>) {
    let mut rows = Vec::new();
    let mut servers = Vec::new();
    for entry in std::fs::read_dir(shared.join("tables/000")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            // id, then the accessor's fields: ..., the weight is the 7th (CtrCommonAccessor).
            let fields: Vec<&str> = line.split_whitespace().collect();
            rows.push((fields[0].parse().unwrap(), fields[6].parse().unwrap()));
            let server = name.split('-').nth(1).unwrap().to_string();
            if !servers.contains(&server) {
                servers.push(server);
            }
        }
    }
    rows.sort_by_key(|(id, _)| *id);
    servers.sort();
    (rows, servers)
}

/// What every run must show: trained on the pservers, read back identically, saved by them.
fn check_training(shared: &Path, logs: &str) {
    let results: Vec<Value> = (0..2)
        .map(|t| {
            let text = std::fs::read_to_string(shared.join(format!("result-{t}.json")))
                .unwrap_or_else(|e| panic!("result-{t}.json: {e}\n{logs}"));
            serde_json::from_str(&text).unwrap()
        })
        .collect();
    for (t, result) in results.iter().enumerate() {
        let losses: Vec<f64> = serde_json::from_value(result["losses"].clone()).unwrap();
        let (first, last) = (losses[0], losses[losses.len() - 1]);
        assert!(first / last >= 10.0, "trainer {t}: loss {first} -> {last}");
    }
    let weights: Vec<Vec<f64>> = results
        .iter()
        .map(|r| serde_json::from_value(r["weights"].clone()).unwrap())
        .collect();
    assert_eq!(
        weights[0], weights[1],
        "the trainers read different weights"
    );
    for (i, w) in weights[0].iter().enumerate() {
        // Each weight was trained by one trainer only, yet both read it: from the pservers.
        assert!(
            (w - TRUE_W[i]).abs() < 0.25,
            "weight {i}: {w}, {:?}",
            weights[0]
        );
    }
    let ids: Vec<u64> = serde_json::from_value(results[0]["ids"].clone()).unwrap();
    let (rows, servers) = saved_table(shared);
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(rows.iter().map(|(id, _)| *id).collect::<Vec<_>>(), sorted);
    for (id, saved) in &rows {
        let read = weights[0][ids.iter().position(|i| i == id).unwrap()];
        assert!(
            (saved - read).abs() <= 1e-5 * read.abs().max(1.0),
            "row {id}: the pservers saved {saved}, the trainers read {read}"
        );
    }
    assert_eq!(
        servers,
        ["000", "001"],
        "both pservers hold rows of the table"
    );
    assert!(!logs.contains("FatalError"), "a crash banner:\n{logs}");
}

#[test]
fn real_paddle_parameter_server_trains_colocated() {
    let python = ps_paddle_python();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let out = std::process::Command::new(LAUNCHER)
        .args([
            "local",
            "--trainers",
            "2",
            "--job-name",
            "ps",
            "--protocol",
            "fleet",
            "--",
        ])
        .args([&python, &program(), &shared.display().to_string()])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let logs = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{logs}");
    check_training(&shared, &logs);
    assert!(logs.contains("pserver 0 stopped by the trainers"), "{logs}");
}

#[test]
fn real_paddle_parameter_server_trains_in_the_split_layout() {
    let python = ps_paddle_python();
    let Cluster { api, dir } = Cluster::new();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    // PaddleCloud's labels: the selectors' defaults of the split layout.
    let pods = [
        (
            "ps-pserver-0",
            "paddle-job-pserver",
            "pserver",
            "127.0.39.12",
        ),
        (
            "ps-pserver-1",
            "paddle-job-pserver",
            "pserver",
            "127.0.39.11",
        ),
        ("ps-trainer-0", "paddle-job", "trainer", "127.0.39.22"),
        ("ps-trainer-1", "paddle-job", "trainer", "127.0.39.21"),
    ];
    for (name, label, _, ip) in pods {
        let mut pod = job_pod("ps", name);
        pod["metadata"]["labels"] = serde_json::json!({ label: "ps" });
        pod["status"] = serde_json::json!({"phase": "Running", "podIP": ip});
        api.put_pod(pod);
    }
    let ports = free_ports(2);
    let launchers: Vec<(String, Launcher)> = pods
        .iter()
        .map(|(name, _, role, ip)| {
            let env = vec![
                (
                    "KUBECONFIG",
                    dir.path().join("kubeconfig").display().to_string(),
                ),
                ("JOB_NAME", "ps".to_string()),
                ("PADDLE_LAUNCHER_ROLE", role.to_string()),
                ("PSERVERS", "2".to_string()),
                ("TRAINERS", "2".to_string()),
                ("PADDLE_LAUNCHER_PROTOCOL", "fleet".to_string()),
                ("CONF_PADDLE_NIC", "lo".to_string()),
                ("CONF_PADDLE_PORT", ports.to_string()),
                ("PADDLE_LAUNCHER_TRAINER_PORT", (ports + 1).to_string()),
                ("POD_IP", ip.to_string()),
                ("POD_NAME", name.to_string()),
                (
                    "PADDLE_LAUNCHER_WORKDIR",
                    dir.path().join(name).display().to_string(),
                ),
                ("HOME", dir.path().display().to_string()),
            ];
            let shared = shared.display().to_string();
            let launcher = Launcher::start(
                dir.path(),
                name,
                &["run", "--", &python, &program(), &shared],
                &env,
            );
            (name.to_string(), launcher)
        })
        .collect();
    let mut logs = String::new();
    let mut codes = Vec::new();
    // Trainers first: once they are done their pods Succeed, as the kubelet would report.
    for (name, launcher) in launchers.into_iter().rev() {
        let done = launcher.wait(LIMIT);
        if name.contains("trainer") && done.code() == 0 {
            api.set_status("default", &name, "Succeeded", None);
        }
        logs.push_str(&format!("== {name}\n{}{}", done.stdout, done.stderr));
        codes.push((name, done.code()));
    }
    for (name, code) in &codes {
        assert_eq!(*code, 0, "{name}:\n{logs}");
    }
    check_training(&shared, &logs);
}
