//! Big jobs against the real API server (BENCHMARKS.md section 12): N launchers of one Job (from
//! N = 64 on, pod 0 coordinates and only it uses the API), their pods created by the real Job
//! controller, bound by the real scheduler and run by the tests' node agent, all on this
//! machine. Counted: every request the launchers make (the API server's audit log: one line per
//! request of a ServiceAccount) and every byte between them and the API server (a TCP proxy in
//! front of it that the pods' kubeconfigs name: TLS bytes, so a little more than the HTTP ones).
//! The API server's `/metrics` cannot tell the launchers' requests from the controllers' and
//! the node agent's.
//!
//!     bash tests/cluster/build.sh && cargo bench --bench real_api   # about 3 minutes

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::control_plane::control_plane;
use support::node_agent::{agent, route_pods_through, POOL};
use support::real_jobs::{create, generated, get, tolerate_pool};

const LIMIT: Duration = Duration::from_secs(600);

fn main() {
    println!("## 12. Big jobs against the real API server\n");
    println!("| pods | launchers' API requests | by verb | bytes to the launchers | bytes from them | Job created to Complete |");
    println!("|---|---|---|---|---|---|");
    for pods in [128, 256] {
        run(pods);
    }
    println!(
        "\nMeasured with `bash tests/cluster/build.sh && cargo bench --bench real_api`, {}.",
        date()
    );
}

/// One Job of `pods` pods whose program exits at once, from creation to Complete.
fn run(pods: usize) {
    let (plane, agent) = (control_plane(), agent());
    let namespace = plane.namespace(&format!("scale{pods}"));
    let pool = namespace.clone();
    // A node takes 64 pods of 1 CPU each (the generated default).
    for i in 0..pods.div_ceil(60) {
        agent.add_pool_node(&format!("{pool}-node-{i}"), &pool, 110);
    }
    let proxy = CountingProxy::start(plane.api_port);
    route_pods_through(Some(format!("https://127.0.0.1:{}", proxy.port)));
    let selector = format!("{POOL}={pool}");
    let count = pods.to_string();
    let mut objects = generated(
        plane,
        &namespace,
        &namespace,
        &["--trainers", &count, "--node-selector", &selector],
        &["/bin/true".to_string()],
    );
    tolerate_pool(&mut objects, &pool);
    let audited_before = audit_lines(plane).len();
    let start = Instant::now();
    create(plane, &namespace, &objects);
    loop {
        let job = get(plane, &namespace, &["job", &namespace]).unwrap_or_default();
        let ended = job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["status"] == "True" && (c["type"] == "Complete" || c["type"] == "Failed"))
            .cloned();
        if let Some(ended) = ended {
            assert_eq!(ended["type"], "Complete", "{job:#}");
            break;
        }
        assert!(
            start.elapsed() < LIMIT,
            "not complete: {job:#}\n{}",
            agent.all_logs(&namespace)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let took = start.elapsed();
    route_pods_through(None);
    let ours = format!("system:serviceaccount:{namespace}:");
    let requests: Vec<Value> = audit_lines(plane)[audited_before..]
        .iter()
        .filter(|e| {
            e["user"]["username"]
                .as_str()
                .is_some_and(|u| u.starts_with(&ours))
        })
        .cloned()
        .collect();
    let mut verbs: std::collections::BTreeMap<String, usize> = Default::default();
    for request in &requests {
        let resource = request["objectRef"]["resource"].as_str().unwrap_or("-");
        *verbs
            .entry(format!(
                "{} {resource}",
                request["verb"].as_str().unwrap_or("-")
            ))
            .or_default() += 1;
    }
    let by_verb: Vec<String> = verbs.iter().map(|(v, n)| format!("{v} {n}")).collect();
    println!(
        "| {pods} | {} | {} | {:.2} MB | {:.2} MB | {:.1} s |",
        requests.len(),
        by_verb.join(", "),
        proxy.down.load(Ordering::Relaxed) as f64 / 1e6,
        proxy.up.load(Ordering::Relaxed) as f64 / 1e6,
        took.as_secs_f64()
    );
}

/// The audit log's events so far.
fn audit_lines(plane: &support::control_plane::ControlPlane) -> Vec<Value> {
    std::fs::read_to_string(&plane.audit_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A TCP proxy on loopback in front of the API server, counting the bytes each way.
struct CountingProxy {
    port: u16,
    /// From the API server to the clients.
    down: Arc<AtomicU64>,
    /// From the clients to the API server.
    up: Arc<AtomicU64>,
}

impl CountingProxy {
    fn start(api_port: u16) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (down, up) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (d, u) = (down.clone(), up.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", api_port)) else {
                    continue;
                };
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    u.clone(),
                );
                pipe(server, client, d.clone());
            }
        });
        CountingProxy { port, down, up }
    }
}

/// Copies `from` to `to` on a thread of its own, counting into `count`.
fn pipe(mut from: TcpStream, mut to: TcpStream, count: Arc<AtomicU64>) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    count.fetch_add(n as u64, Ordering::Relaxed);
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

fn date() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
