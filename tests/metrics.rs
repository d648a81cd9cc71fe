//! The metrics endpoint as Prometheus and a hostile client meet it: a real launcher running a
//! program that numbers its steps, scraped over TCP on its pod's address; what it shows, and
//! what it refuses.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{free_ports, Launcher};

const LIMIT: Duration = Duration::from_secs(120);
const SECRET: &str = "metrics-test-secret-0123456789abcdef";

/// Numbers 60 steps (or as many as the test asks), one each 0.2 s, in its progress file, with
/// how long each computed (the line a program writes).
const STEPS: &str = r#"
import os, time
path = os.environ["PADDLE_LAUNCHER_PROGRESS_FILE"]
for step in range(1, 61):
    with open(path, "w") as f:
        f.write(f"{step} compute_ms=200\n")
    time.sleep(0.2)
"#;

/// One request, its whole answer (the endpoint closes the connection after it).
fn request(at: &str, text: &[u8]) -> String {
    let mut stream = TcpStream::connect(at).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(text).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// The value of the line of `name` with `labels` in a scrape.
fn value(scrape: &str, name: &str, labels: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(name) && l.contains(labels))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Scrapes until `ready` holds of the answer (a launcher starting, a rate wanting two samples),
/// or the limit: the last answer.
fn scrape_until(at: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let answer = TcpStream::connect(at)
            .ok()
            .map(|_| request(at, b"GET /metrics HTTP/1.1\r\nHost: pod\r\n\r\n"))
            .unwrap_or_default();
        if ready(&answer) || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn pod(dir: &std::path::Path, ip: &str, port: u16, steps: u32) -> Launcher {
    let env = [
        ("JOB_NAME", "observed".to_string()),
        ("PADDLE_LAUNCHER_PEERS", ip.to_string()),
        ("POD_IP", ip.to_string()),
        ("POD_NAME", "observed-0".to_string()),
        ("CONF_PADDLE_NIC", "lo".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("PADDLE_LAUNCHER_METRICS_PORT", port.to_string()),
        ("PADDLE_LAUNCHER_JOB_SECRET", SECRET.to_string()),
        ("PADDLE_LAUNCHER_CONTROL_PORT", free_ports(1).to_string()),
        (
            "PADDLE_LAUNCHER_WORKDIR",
            dir.join("work").display().to_string(),
        ),
    ];
    let program = STEPS.replace("61", &(steps + 1).to_string());
    Launcher::start(
        dir,
        "observed-0",
        &["run", "--", "python3", "-c", &program],
        &env,
    )
}

/// A training pod's scrape: its state, its size, its process's step, steps per second (two
/// samples 5 s apart) and its step's time as its progress file says it, with the labels
/// Prometheus users filter by; nothing secret in it.
#[test]
fn a_training_pod_shows_its_state_size_and_each_processs_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (ip, port) = ("127.0.0.61", free_ports(1));
    let at = format!("{ip}:{port}");
    let launcher = pod(dir.path(), ip, port, 150);
    let rate = "paddle_launcher_process_steps_per_second{";
    let scrape = scrape_until(&at, |s| {
        value(s, rate, "rank=\"0\"").is_some_and(|r| r > 0.0)
    });
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let me = "job_name=\"observed\",pod=\"observed-0\"";
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text";
    assert!(scrape.starts_with(head), "{scrape}");
    let state = |s: &str| {
        value(
            &scrape,
            "paddle_launcher_state{",
            &format!("{me},state=\"{s}\""),
        )
    };
    assert_eq!(
        (state("training"), state("waiting")),
        (Some(1.0), Some(0.0)),
        "{scrape}"
    );
    assert_eq!(value(&scrape, "paddle_launcher_job_pods{", me), Some(1.0));
    let process = format!("{me},rank=\"0\",local_rank=\"0\"");
    let step = value(&scrape, "paddle_launcher_process_step{", &process).unwrap();
    assert!((1.0..=150.0).contains(&step), "{scrape}");
    // 5 steps a second at most (a loaded machine makes fewer); the file is read once a second
    // and sampled every 5 s, so a rate may read up to 6/5 of it.
    let steps_per_second = value(&scrape, rate, &process).unwrap();
    assert!(
        steps_per_second > 0.0 && steps_per_second <= 6.0,
        "{scrape}"
    );
    let compute = "paddle_launcher_process_step_compute_seconds{";
    assert_eq!(value(&scrape, compute, &process), Some(0.2), "{scrape}");
    assert!(!scrape.contains(SECRET), "the job secret in the metrics");
    assert!(scrape.ends_with("# EOF\n"), "{scrape}");
}

/// A hostile client gets nothing but the read-only metrics: another method or path is
/// refused, a head past the limit is refused and closed, a client that sends nothing is closed
/// (not waited for), a connection past one address's share of the slots takes the place of
/// that address's oldest silent one, and silent clients
/// holding every slot from many addresses give way to a scraper, which is answered; the job
/// runs on.
#[test]
fn a_hostile_client_gets_nothing_but_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (ip, port) = ("127.0.0.62", free_ports(1));
    let at = format!("{ip}:{port}");
    // Long enough for every silent client to be timed out (5 s each, at once) and a scrape after.
    let launcher = pod(dir.path(), ip, port, 200);
    scrape_until(&at, |s| s.starts_with("HTTP/1.1 200"));
    let post = request(
        &at,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nkill",
    );
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    let other = request(&at, b"GET /debug/pprof HTTP/1.1\r\n\r\n");
    assert!(other.starts_with("HTTP/1.1 404 "), "{other}");
    let mut large = b"GET /metrics HTTP/1.1\r\nX-Fill: ".to_vec();
    large.extend(std::iter::repeat_n(b'a', 20_000));
    let large = request(&at, &large);
    assert!(large.starts_with("HTTP/1.1 431 "), "{large}");
    // One address holds at most 4 slots: its fifth connection is closed at once, without an
    // answer, while a scraper on another address is answered.
    let mut silent: Vec<TcpStream> = (0..4).map(|_| connect_from("127.0.0.63", &at)).collect();
    let mut buf = [0u8; 64];
    // Past their 250 ms of grace (`serve::tests` checks the refusal within it, which a test
    // of processes cannot time), a fifth takes the place of the address's own oldest silent
    // connection: clients behind one address, a sidecar's or a NAT's, cannot lock each other
    // out for good.
    std::thread::sleep(Duration::from_millis(500));
    let mut fifth = connect_from("127.0.0.63", &at);
    fifth.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = fifth.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let mut oldest = silent.remove(0);
    oldest
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(oldest.read(&mut buf).unwrap_or(1), 0, "the oldest closed");
    let scraped = request(&at, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(scraped.starts_with("HTTP/1.1 200 "), "{scraped}");
    // Silent clients of 16 addresses hold every one of the 64 slots, and open another
    // whenever one is closed: a scraper from another address is still answered each time, in
    // the place of the oldest connection silent for a second (issue 51: with 8 slots, silent
    // clients of two addresses let 0 of 18 scrapes through).
    let holders: Vec<String> = (0..16).map(|i| format!("127.0.1.{}", 10 + i)).collect();
    for round in 0..3 {
        for from in &holders {
            silent.extend((0..4).map(|_| connect_from(from, &at)));
        }
        std::thread::sleep(Duration::from_millis(1300));
        let mut scraper = connect_from("127.0.0.65", &at);
        scraper
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        scraper.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        let _ = scraper.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 200 "),
            "round {round}: {answer}"
        );
    }
    // The silent ones are closed (in a newcomer's place, or after the head's 2 s): each read
    // ends, with no answer.
    for mut client in silent {
        client
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let n = client
            .read(&mut buf)
            .expect("closed by the endpoint, not left open");
        assert_eq!(n, 0);
    }
    let after = scrape_until(&at, |s| s.starts_with("HTTP/1.1 200"));
    assert!(after.contains("paddle_launcher_state"), "{after}");
    assert!(!after.contains(SECRET));
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
}

/// A client on `from` (a loopback address of the test's choosing) connected to `at`.
fn connect_from(from: &str, at: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    let to: std::net::SocketAddr = at.parse().unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

/// Kills Prometheus when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A PromQL query's result through Prometheus's HTTP API: each series' labels and value.
fn query(prometheus: &str, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let get = format!(
        "GET /api/v1/query?query={encoded} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
    );
    let answer = TcpStream::connect(prometheus)
        .ok()
        .map(|_| request(prometheus, get.as_bytes()))
        .unwrap_or_default();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let parsed: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    parsed["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|series| {
            let value = series["value"][1].as_str()?.parse().ok()?;
            Some((series["metric"].clone(), value))
        })
        .collect()
}

/// A real Prometheus server (Debian's package, as `.ci/run` installs it) scrapes the launchers of
/// a `local` job, 2 pods x 2 processes numbering their steps, and a PromQL query returns the
/// step rate of each of the 4 ranks.
#[test]
fn a_real_prometheus_gets_each_ranks_step_rate() {
    let binary = "/usr/bin/prometheus";
    assert!(
        std::path::Path::new(binary).exists(),
        "{binary} is missing: `bash .ci/run` installs Debian's prometheus package"
    );
    let dir = tempfile::tempdir().unwrap();
    let port = free_ports(1);
    let program = STEPS.replace("61", "301");
    let env = [
        ("PADDLE_LAUNCHER_METRICS_PORT", port.to_string()),
        ("PADDLE_LAUNCHER_NPROC_PER_POD", "2".to_string()),
    ];
    let args = [
        "local",
        "--trainers",
        "2",
        "--job-name",
        "prom",
        "--protocol",
        "collective",
    ];
    let mut argv: Vec<&str> = args.to_vec();
    argv.extend(["--", "python3", "-c", &program]);
    let launcher = Launcher::start(dir.path(), "local", &argv, &env);
    let config = dir.path().join("prometheus.yml");
    let targets = format!("['127.0.0.2:{port}', '127.0.0.3:{port}']");
    let scrape = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: paddle\n    static_configs:\n      - targets: {targets}\n"
    );
    std::fs::write(&config, scrape).unwrap();
    let web = format!("127.0.0.1:{}", free_ports(1));
    let server = std::process::Command::new(binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
        .spawn()
        .unwrap();
    let _server = Killed(server);
    // Over 20 s of samples, once there are that many: a gauge read from the progress file once
    // a second, whose reader a loaded machine may hold back and then let catch up, gives a
    // noisy slope over a few samples only (9 steps a second was seen in CI over 10 s).
    let promql = "sum by (rank) (deriv(paddle_launcher_process_step{job_name=\"prom\"}[20s]))";
    let deadline = Instant::now() + LIMIT;
    let mut rates = Vec::new();
    let mut first_seen: Option<Instant> = None;
    while Instant::now() < deadline {
        rates = query(&web, promql);
        if rates.len() == 4 && rates.iter().all(|(_, rate)| *rate > 0.0) {
            let first = *first_seen.get_or_insert_with(Instant::now);
            if first.elapsed() >= Duration::from_secs(20) {
                break;
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    let mut ranks: Vec<String> = rates
        .iter()
        .map(|(labels, _)| labels["rank"].as_str().unwrap_or("").to_string())
        .collect();
    ranks.sort();
    assert_eq!(ranks, ["0", "1", "2", "3"], "{rates:?}\n{log}");
    // 5 steps a second at most each (fewer on a loaded machine).
    assert!(rates.iter().all(|(_, r)| *r > 0.0 && *r < 6.0), "{rates:?}");
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
}
