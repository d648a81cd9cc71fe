//! Measures the launcher on this machine; prints a Markdown report (BENCHMARKS.md keeps it).
//!
//!     cargo bench --bench launch              # everything (about 5 minutes)
//!     cargo bench --bench launch -- latency   # one part: latency | api | footprint | old
//!
//! Launchers are real processes (the release build) against the tests' fake Kubernetes API, one
//! loopback IP per simulated pod. The pserver and trainer are this binary itself in stand-in mode
//! (`--standin pserver|trainer`), so that their start-up cost does not hide the launcher's.

#[allow(dead_code)]
#[path = "../tests/support/fake_api.rs"]
mod fake_api;

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fake_api::{job_pod, FakeApi};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_paddle-launcher");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--standin") {
        return standin(&args[2..]);
    }
    let only = args.iter().skip(1).find(|a| !a.starts_with("--")).cloned();
    let wants = |part: &str| only.as_deref().is_none_or(|o| o == part);
    println!("# paddle-launcher benchmarks\n");
    println!(
        "Machine: {} cores; launcher: release build; {}\n",
        cores(),
        date()
    );
    if wants("latency") {
        latency();
    }
    if wants("api") {
        api_cost();
    }
    if wants("footprint") {
        footprint();
    }
    if wants("old") {
        old_way();
    }
}

/// `--standin pserver --port=P --ports_num=N --ports_num_for_sparse=S ...`: listen on POD_IP
/// until killed. `--standin trainer ...`: exit at once.
fn standin(args: &[String]) {
    if args.first().map(String::as_str) != Some("pserver") {
        return;
    }
    let flag = |name: &str| -> u16 {
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("--{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let ip = std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into());
    let first = flag("port");
    let listeners: Vec<TcpListener> = (first
        ..first + flag("ports_num") + flag("ports_num_for_sparse"))
        .map(|p| TcpListener::bind((ip.as_str(), p)).expect("stand-in pserver cannot listen"))
        .collect();
    for l in listeners {
        std::thread::spawn(move || for _ in l.incoming() {});
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn date() -> String {
    Command::new("date")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn pod_ip(i: usize) -> String {
    format!("127.0.{}.{}", (i + 2) / 250, (i + 2) % 250)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Job {
    api: FakeApi,
    dir: tempfile::TempDir,
    names: Vec<String>,
    launchers: Vec<Child>,
}

impl Job {
    /// `pods` Pending pods and one launcher per pod, all watching.
    fn start(job: &str, pods: usize, bookmark_every: Duration) -> Job {
        let api = FakeApi::start();
        api.set_bookmark_interval(bookmark_every);
        let dir = tempfile::tempdir().unwrap();
        api.write_kubeconfig(&dir.path().join("kubeconfig"));
        let names: Vec<String> = (0..pods).map(|i| format!("{job}-{i}")).collect();
        for name in &names {
            api.put_pod(job_pod(job, name));
        }
        let me = std::env::current_exe().unwrap().display().to_string();
        let port = free_port().to_string();
        let launchers = (0..pods)
            .map(|i| {
                Command::new(LAUNCHER)
                    .arg("run")
                    .env_clear()
                    .env("PATH", std::env::var("PATH").unwrap_or_default())
                    .env("KUBECONFIG", dir.path().join("kubeconfig"))
                    .env("JOB_NAME", job)
                    .env("CONF_PADDLE_GRADIENT_NUM", pods.to_string())
                    .env("CONF_PADDLE_NIC", "lo")
                    .env("CONF_PADDLE_PORT", &port)
                    .env("POD_IP", pod_ip(i))
                    .env("POD_NAME", &names[i])
                    .env(
                        "PADDLE_LAUNCHER_PSERVER_CMD",
                        format!("{me} --standin pserver"),
                    )
                    .env(
                        "PADDLE_LAUNCHER_TRAINER_CMD",
                        format!("{me} --standin trainer"),
                    )
                    .env("PADDLE_LAUNCHER_LINGER", "600")
                    .env("PADDLE_LAUNCHER_TERMINATION_LOG", "")
                    .env("PADDLE_LAUNCHER_ID_DIR", "")
                    .current_dir(dir.path())
                    .stdout(Stdio::null())
                    .stderr(fs::File::create(dir.path().join(format!("{i}.log"))).unwrap())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let job = Job {
            api,
            dir,
            names,
            launchers,
        };
        job.until(
            || job.api.pod_requests().1 >= pods,
            "every launcher watching",
        );
        job
    }

    /// Polls slowly: the latencies come from the launchers' own timestamps, and a busy poll of
    /// many log files would steal the cores the launchers are measured on.
    fn until(&self, done: impl Fn() -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every launcher's log contains `pattern`; a log that has it is not read again.
    fn until_every_log(&self, pattern: &str) {
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut pending: Vec<usize> = (0..self.names.len()).collect();
        loop {
            pending.retain(|&i| !self.log(i).contains(pattern));
            if pending.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {pattern}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self, i: usize) -> String {
        fs::read_to_string(self.dir.path().join(format!("{i}.log"))).unwrap_or_default()
    }

    /// Marks every pod Running; returns when the last one was marked.
    fn all_running(&self) -> SystemTime {
        for (i, name) in self.names.iter().enumerate() {
            self.api
                .set_status("default", name, "Running", Some(&pod_ip(i)));
        }
        SystemTime::now()
    }

    fn stop(mut self) {
        for l in &self.launchers {
            let _ = Command::new("kill").arg(l.id().to_string()).status();
        }
        for l in &mut self.launchers {
            let _ = l.wait();
        }
    }
}

/// Seconds since midnight UTC of a log line's RFC 3339 timestamp ("2026-11-22T02:00:06.571484Z").
fn log_time(line: &str) -> Option<f64> {
    let time = line.split('T').nth(1)?.split('Z').next()?;
    let mut parts = time.split(':');
    let (h, m, s): (f64, f64, f64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    Some(h * 3600.0 + m * 60.0 + s)
}

fn time_of_day(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64() % 86400.0
}

fn first_line_time(log: &str, pattern: &str) -> Option<f64> {
    log.lines().find(|l| l.contains(pattern)).and_then(log_time)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn latency() {
    println!("## 1. Launch latency\n");
    println!(
        "From the API event that makes the last pod Running (sent once every launcher has seen"
    );
    println!("the others Running, so that it measures one event and not a backlog) to the moment");
    println!(
        "every launcher has seen it, started its pserver, and started its trainer (after every"
    );
    println!("pserver port of the job accepted a connection). Times from the launchers' own log");
    println!("lines. All launchers, stand-ins and the fake API share this machine's cores.\n");
    println!("| pods | runs | first pserver started: median | all launchers saw it: median (max) | all pservers started: median (max) | all trainers started: median (max) |");
    println!("|---|---|---|---|---|---|");
    for (pods, runs) in [(3, 7), (32, 5), (128, 3)] {
        let mut first_ms = Vec::new();
        let mut seen_ms = Vec::new();
        let mut pserver_ms = Vec::new();
        let mut trainer_ms = Vec::new();
        for run in 0..runs {
            let job = Job::start(&format!("lat{pods}r{run}"), pods, Duration::from_secs(60));
            let event = time_of_day(job.all_running());
            job.until_every_log("started trainer-");
            let last = |pattern: &str| {
                (0..pods)
                    .map(|i| first_line_time(&job.log(i), pattern).unwrap())
                    .fold(f64::MIN, f64::max)
            };
            let first = (0..pods)
                .map(|i| first_line_time(&job.log(i), "started pserver-").unwrap())
                .fold(f64::MAX, f64::min);
            first_ms.push((first - event) * 1000.0);
            seen_ms.push((last("all pods are Running") - event) * 1000.0);
            pserver_ms.push((last("started pserver-") - event) * 1000.0);
            trainer_ms.push((last("started trainer-") - event) * 1000.0);
            job.stop();
        }
        let max = |v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max);
        println!(
            "| {pods} | {runs} | {:.1} ms | {:.1} ms ({:.1} ms) | {:.1} ms ({:.1} ms) | {:.1} ms ({:.1} ms) |",
            median(first_ms),
            median(seen_ms.clone()),
            max(&seen_ms),
            median(pserver_ms.clone()),
            max(&pserver_ms),
            median(trainer_ms.clone()),
            max(&trainer_ms)
        );
    }
    println!();
}

fn api_cost() {
    let wait = Duration::from_secs(60);
    println!("## 2. API cost while waiting\n");
    println!(
        "3 launchers wait {} s for pods that never become Running (the fake sends a bookmark",
        wait.as_secs()
    );
    println!("every 60 s, as a real API server does about once a minute).\n");
    let job = Job::start("cost", 3, Duration::from_secs(60));
    let before = Instant::now();
    std::thread::sleep(wait.saturating_sub(before.elapsed()));
    let (lists, watches) = job.api.pod_requests();
    let all = job.api.requests().len();
    let bytes = job.api.bytes_sent();
    job.stop();
    println!("| requests per launcher | of which lists / watches | response bytes per launcher |");
    println!("|---|---|---|");
    println!(
        "| {:.1} | {:.1} / {:.1} | {:.0} |\n",
        all as f64 / 3.0,
        lists as f64 / 3.0,
        watches as f64 / 3.0,
        bytes as f64 / 3.0
    );
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn footprint() {
    println!("## 3. Footprint\n");
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/x86_64-unknown-linux-gnu/dist/paddle-launcher");
    println!("| binary | size | peak RSS while waiting (VmHWM) |");
    println!("|---|---|---|");
    for (name, path) in [
        ("release (dynamic glibc)", PathBuf::from(LAUNCHER)),
        ("dist (static, stripped, LTO)", dist.clone()),
    ] {
        if !path.exists() {
            println!("| {name} | not built (see BENCHMARKS.md) | |");
            continue;
        }
        let size = fs::metadata(&path).unwrap().len();
        let rss = waiting_rss(&path);
        println!(
            "| {name} | {:.2} MB ({size} bytes) | {:.1} MB |",
            size as f64 / 1e6,
            rss as f64 / 1024.0
        );
    }
    println!();
}

/// Peak RSS of a launcher of `binary` after 5 s of waiting for 2 pods that never come.
fn waiting_rss(binary: &Path) -> u64 {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    api.write_kubeconfig(&dir.path().join("kubeconfig"));
    let mut child = Command::new(binary)
        .arg("run")
        .env_clear()
        .env("KUBECONFIG", dir.path().join("kubeconfig"))
        .env("JOB_NAME", "rss")
        .env("CONF_PADDLE_GRADIENT_NUM", "2")
        .env("CONF_PADDLE_NIC", "lo")
        .env("POD_IP", "127.0.0.2")
        .env("PADDLE_LAUNCHER_TERMINATION_LOG", "")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let rss = rss_kib(child.id(), "VmHWM:");
    let _ = child.kill();
    let _ = child.wait();
    rss
}

/// The old start_paddle.py, modelled: list the pods every 20 s until all are Running, start the
/// pserver, sleep 20 s, start the trainer. Returns (pserver, trainer) start times.
fn old_launcher(api: SocketAddr, job: &str, pods: usize) -> (SystemTime, SystemTime, usize) {
    let mut polls = 0;
    loop {
        polls += 1;
        let body = http_get(
            api,
            &format!("/api/v1/namespaces/default/pods?labelSelector=job-name%3D{job}"),
        );
        let list: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        if items.len() == pods && items.iter().all(|p| p["status"]["phase"] == "Running") {
            break;
        }
        std::thread::sleep(Duration::from_secs(20));
    }
    let pserver = SystemTime::now();
    std::thread::sleep(Duration::from_secs(20));
    (pserver, SystemTime::now(), polls)
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = s.read_to_string(&mut response);
    response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

fn old_way() {
    println!("## 4. Against the old way\n");
    println!(
        "3 launchers and 3 models of the old start_paddle.py (poll every 20 s, then sleep 20 s"
    );
    println!(
        "before the trainer) against the same fake API in the same run; pods turn Running at a"
    );
    println!("random moment 0-20 s after the start, as after image pulls.\n");
    println!("| run | new: trainers started | old: trainers started | ratio |");
    println!("|---|---|---|---|");
    let mut ratios = Vec::new();
    for run in 0..3 {
        let job = Job::start(&format!("old{run}"), 3, Duration::from_secs(60));
        let addr = job.api.addr;
        let name = format!("old{run}");
        let olds: Vec<_> = (0..3)
            .map(|_| {
                let name = name.clone();
                std::thread::spawn(move || old_launcher(addr, &name, 3))
            })
            .collect();
        let delay = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_millis() as u64
            * 20;
        std::thread::sleep(Duration::from_millis(delay));
        let event = time_of_day(job.all_running());
        job.until_every_log("started trainer-");
        let new = (0..3)
            .map(|i| first_line_time(&job.log(i), "started trainer-").unwrap())
            .fold(f64::MIN, f64::max)
            - event;
        let old = olds
            .into_iter()
            .map(|t| time_of_day(t.join().unwrap().1))
            .fold(f64::MIN, f64::max)
            - event;
        job.stop();
        ratios.push(old / new);
        println!(
            "| {run} | {:.3} s | {:.1} s | {:.0}x |",
            new,
            old,
            old / new
        );
    }
    println!("\nMedian ratio: {:.0}x\n", median(ratios));
}
