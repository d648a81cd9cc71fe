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
/// (not waited for), clients past the concurrent limit are closed at once while a scraper that
/// comes after them is still answered; the job runs on.
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
    // Silent clients hold every slot; one more is closed at once, without an answer.
    let silent: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&at).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut extra = TcpStream::connect(&at).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(
        extra.read(&mut buf).unwrap_or(0),
        0,
        "an answer past the limit"
    );
    // The silent ones are closed after the read timeout: each read ends (no answer).
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
