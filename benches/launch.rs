//! Measures the launcher on this machine; prints a Markdown report (BENCHMARKS.md keeps it).
//!
//!     cargo bench --bench launch              # everything (about 5 minutes)
//!     cargo bench --bench launch -- latency   # one part: latency | api | footprint | old | recovery | scale | coordinator | hang | preemption | processes | elastic | observability
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
    if wants("recovery") {
        recovery();
    }
    if wants("hang") {
        hang();
    }
    if wants("preemption") {
        preemption();
    }
    if wants("scale") {
        scale();
    }
    if wants("coordinator") {
        coordinator();
    }
    if wants("processes") {
        processes();
    }
    if wants("observability") {
        observability();
    }
    if wants("elastic") {
        elastic();
    }
}

const ELASTIC_WAIT_S: u64 = 2;

/// Issue 31: an elastic job (`--min-pods` one less than its pods) loses a pod whose
/// replacement stays Pending: from the loss to every other trainer started again in the smaller
/// job, at 3 and 32 pods; of that, the elastic wait is the user's choice, the rest the
/// launchers' own part (the loss noticed, every trainer stopped, the verdict, the gathering
/// after the wait, the smaller membership sent, every trainer started).
fn elastic() {
    println!("## 11. An elastic job goes on without a lost pod\n");
    println!("Launchers with a job secret and `--max-restarts` (collective protocol, trainer `sleep 600`,");
    println!("heartbeat timeout {HEARTBEAT_TIMEOUT_S} s), `--min-pods` one less than the pods, `--elastic-wait {ELASTIC_WAIT_S}`, the");
    println!("coordinator named (pod 0 by its address: only it uses the API). One follower's launcher is");
    println!(
        "killed and its pod marked Failed, its replacement created Pending (never scheduled); from"
    );
    println!(
        "the kill to every other trainer started again as a job of one pod fewer (the launchers'"
    );
    println!(
        "log lines). The launchers' own part: the whole less the elastic wait, which starts when"
    );
    println!(
        "the coordinator begins to gather again; the gathering's end -> every trainer started is"
    );
    println!("shown apart.\n");
    println!("| pods | loss -> smaller job training: median (max) | the launchers' own part: median (max) | of which after the wait: median |");
    println!("|---|---|---|---|");
    for (pods, runs) in [(3, 3), (32, 3)] {
        let (mut totals, mut own, mut after) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let mut job = Recovering::start_elastic(&format!("el{pods}r{run}"), pods, 2);
            let alive = job.alive();
            let victim = alive[1];
            let at = time_of_day(SystemTime::now());
            job.lose_pod(victim);
            job.add_pending_pod();
            let others: Vec<usize> = alive.iter().copied().filter(|&i| i != victim).collect();
            let started = job.until_each(&others, "started trainer-", at);
            let shrunk = job
                .line_after(0, "elastic job: starting with", at)
                .expect("the coordinator started the smaller job");
            let wait = ELASTIC_WAIT_S as f64 * 1000.0;
            totals.push((started - at) * 1000.0);
            own.push((started - at) * 1000.0 - wait);
            after.push((started - shrunk) * 1000.0);
            job.stop();
        }
        let max = |v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max);
        println!(
            "| {pods} | {:.0} ms ({:.0} ms) | {:.0} ms ({:.0} ms) | {:.0} ms |",
            median(totals.clone()),
            max(&totals),
            median(own.clone()),
            max(&own),
            median(after),
        );
    }
    println!("\nCommand: `cargo bench --bench launch -- elastic`.\n");
}

/// Issue 28: 32 pods of 8 trainer processes each (collective, `--nproc-per-pod 8`) against 32
/// of one: from the event that makes the last pod Running to every process started (the
/// launchers' own "started trainer-G" lines), and what each extra process costs a launcher.
fn processes() {
    println!("## 10. Several processes per pod\n");
    println!("| pods x processes | processes | last process started after the last pod Running: median of 3 (max) | launcher RSS per pod, processes running |");
    println!("|---|---|---|---|");
    let mut rows = Vec::new();
    for per_pod in [1usize, 8] {
        let pods = 32;
        let mut times = Vec::new();
        let mut rss = Vec::new();
        for run in 0..3 {
            let api = FakeApi::start();
            let dir = tempfile::tempdir().unwrap();
            api.write_kubeconfig(&dir.path().join("kubeconfig"));
            let job = format!("np{per_pod}r{run}");
            let names: Vec<String> = (0..pods).map(|i| format!("{job}-{i}")).collect();
            for name in &names {
                api.put_pod(job_pod(&job, name));
            }
            let port = free_port().to_string();
            let mut launchers: Vec<Child> = (0..pods)
                .map(|i| {
                    let log = dir.path().join(format!("{i}.log"));
                    pod_launcher(dir.path(), &job, pods, i, &names[i], &log)
                        .env("PADDLE_LAUNCHER_PROTOCOL", "collective")
                        .env("PADDLE_LAUNCHER_NPROC_PER_POD", per_pod.to_string())
                        .env("PADDLE_LAUNCHER_TRAINER_PORT", &port)
                        .args(["run", "--", "sleep", "600"])
                        .spawn()
                        .unwrap()
                })
                .collect();
            let log = |i: usize| {
                fs::read_to_string(dir.path().join(format!("{i}.log"))).unwrap_or_default()
            };
            let deadline = Instant::now() + Duration::from_secs(300);
            while api.pod_requests().1 < pods {
                assert!(Instant::now() < deadline, "launchers not watching");
                std::thread::sleep(Duration::from_millis(100));
            }
            for (i, name) in names.iter().enumerate() {
                api.set_status("default", name, "Running", Some(&pod_ip(i)));
            }
            let last_running = time_of_day(SystemTime::now());
            let started = |text: &str| text.matches("started trainer-").count();
            while (0..pods).any(|i| started(&log(i)) < per_pod) {
                assert!(Instant::now() < deadline, "processes not started");
                std::thread::sleep(Duration::from_millis(100));
            }
            let last = (0..pods)
                .flat_map(|i| {
                    log(i)
                        .lines()
                        .filter(|l| l.contains("started trainer-"))
                        .filter_map(log_time)
                        .collect::<Vec<_>>()
                })
                .fold(0.0, f64::max);
            times.push((last - last_running) * 1000.0);
            let total: u64 = launchers.iter().map(|l| rss_kib(l.id(), "VmRSS:")).sum();
            rss.push(total as f64 / pods as f64);
            for l in &launchers {
                let _ = Command::new("kill").arg(l.id().to_string()).status();
            }
            for l in &mut launchers {
                let _ = l.wait();
            }
        }
        let max = times.iter().cloned().fold(0.0, f64::max);
        let (time, kib) = (median(times), median(rss));
        println!(
            "| {pods} x {per_pod} | {} | {time:.1} ms ({max:.1} ms) | {kib:.0} KiB |",
            pods * per_pod
        );
        rows.push((per_pod, time, kib));
    }
    if let [(_, t1, r1), (n, t8, r8)] = rows.as_slice() {
        let extra = (*n - 1) as f64;
        println!(
            "\nPer extra process: {:.2} ms more until the last process started (over the job's {} extra processes), {:.0} KiB more launcher RSS.\n",
            (t8 - t1) / (extra * 32.0),
            extra as usize * 32,
            (r8 - r1) / extra
        );
    }
}

/// Counts the heap in use and its peak, for what the coordinator's state costs.
struct CountingAllocator;

static HEAP_NOW: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static HEAP_PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only sizes are counted.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use std::sync::atomic::Ordering::Relaxed;
        let now = HEAP_NOW.fetch_add(layout.size(), Relaxed) + layout.size();
        HEAP_PEAK.fetch_max(now, Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        HEAP_NOW.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The coordinator alone at 1,000 and 10,000 launchers: its pure state machine fed every
/// hello and then a loss, each broadcast encoded once and sealed per link as the task does.
/// No sockets: the CPU and heap of deciding and sealing, not of the kernel's sending.
fn coordinator() {
    use std::sync::atomic::Ordering::Relaxed;
    println!("## 7. The coordinator at scale (simulated, no processes)\n");
    println!("| launchers | first hello to every `Go` sealed | a loss to every `Lost` sealed | peak heap | `Go` frame | `Lost` frame |");
    println!("|---|---|---|---|---|---|");
    let mut progress = Vec::new();
    for members in [1_000, 10_000] {
        let mut runs = Vec::new();
        let mut peak = 0;
        for _ in 0..5 {
            let base = HEAP_NOW.load(Relaxed);
            HEAP_PEAK.store(base, Relaxed);
            let cost = paddle_launcher::measure_coordinator(members);
            peak = peak.max(HEAP_PEAK.load(Relaxed) - base);
            runs.push(cost);
        }
        let start = median(runs.iter().map(|r| r.start.as_secs_f64() * 1e3).collect());
        let restart = median(runs.iter().map(|r| r.restart.as_secs_f64() * 1e3).collect());
        println!(
            "| {members} | {start:.1} ms | {restart:.2} ms | {:.1} MiB | {} KiB | {} B |",
            peak as f64 / (1 << 20) as f64,
            runs[0].go_frame / 1024,
            runs[0].lost_frame
        );
        let costs: Vec<paddle_launcher::ProgressCost> = (0..5)
            .map(|_| paddle_launcher::measure_progress(members))
            .collect();
        progress.push((members, costs));
    }
    println!("\nHang detection's part (`--hang-timeout` on): every follower's heartbeat carries its progress.\n");
    println!("| launchers | one heartbeat of every follower, authenticated and noted | a hang report to every `Lost` sealed (suspect named) | heartbeat frame with progress / without |");
    println!("|---|---|---|---|");
    for (members, runs) in &progress {
        let round = median(runs.iter().map(|r| r.round.as_secs_f64() * 1e3).collect());
        let hang = median(runs.iter().map(|r| r.hang.as_secs_f64() * 1e3).collect());
        println!(
            "| {members} | {round:.2} ms | {hang:.2} ms | {} B / {} B |",
            runs[0].progress_frame, runs[0].beat_frame
        );
    }
    println!("\nCommand: `cargo bench --bench launch -- coordinator`. The `Go` carries the membership, so its fan-out (one encoding, then one HMAC and one copy per link) dominates the start.\n");
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

/// The launcher of simulated pod `i` (`name`) of `job` (`pods` pods) against the fake API whose
/// kubeconfig is in `dir`, with a clean environment and its log in `log`: what every part of
/// the bench starts, before its own settings.
fn pod_launcher(dir: &Path, job: &str, pods: usize, i: usize, name: &str, log: &Path) -> Command {
    let mut command = Command::new(LAUNCHER);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env("JOB_NAME", job)
        .env("CONF_PADDLE_GRADIENT_NUM", pods.to_string())
        .env("CONF_PADDLE_NIC", "lo")
        .env("POD_IP", pod_ip(i))
        .env("POD_NAME", name)
        .env("PADDLE_LAUNCHER_TERMINATION_LOG", "")
        .env("PADDLE_LAUNCHER_ID_DIR", "")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(fs::File::create(log).unwrap());
    command
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
                let log = dir.path().join(format!("{i}.log"));
                pod_launcher(dir.path(), job, pods, i, &names[i], &log)
                    .arg("run")
                    .env("CONF_PADDLE_PORT", &port)
                    .env(
                        "PADDLE_LAUNCHER_PSERVER_CMD",
                        format!("{me} --standin pserver"),
                    )
                    .env(
                        "PADDLE_LAUNCHER_TRAINER_CMD",
                        format!("{me} --standin trainer"),
                    )
                    .env("PADDLE_LAUNCHER_LINGER", "600")
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

/// A job whose launchers recover in place: collective protocol, a job secret, a restart budget;
/// each trainer is `sleep 600`, so that only the bench ends it.
struct Recovering {
    api: FakeApi,
    dir: tempfile::TempDir,
    job: String,
    pods: usize,
    control_port: u16,
    max_restarts: u32,
    /// (pod name, IP, launcher, log file) of every pod ever created.
    members: Vec<(String, String, Option<Child>, PathBuf)>,
    /// What the trainers are.
    trainers: Trainers,
    /// An elastic job (`--min-pods` one less than the pods, `ELASTIC_WAIT_S`), its coordinator
    /// named (pod 0 by its address).
    elastic: bool,
}

/// The trainers of a `Recovering` job.
#[derive(Clone, Copy, PartialEq)]
enum Trainers {
    /// `sleep 600`.
    Sleeping,
    /// `HANGING_TRAINER`, with hang detection on.
    Hanging,
    /// `CHECKPOINTING_TRAINER`.
    Checkpointing,
}

/// A trainer that notes when it is asked for a checkpoint (the time to `signalled-<rank>` in
/// the current directory) and trains on.
const CHECKPOINTING_TRAINER: &str = r#"
import os, signal, time
rank = os.environ["PADDLE_TRAINER_ID"]
def asked(*_):
    with open(f"signalled-{rank}", "w") as f:
        f.write(str(time.time()))
signal.signal(getattr(signal, os.environ["PADDLE_LAUNCHER_CHECKPOINT_SIGNAL"]), asked)
open(f"ready-{rank}", "w").close()
while True:
    time.sleep(1)
"#;

/// A trainer that writes its progress file every 0.1 s as each step begins, and at step 30
/// (rank 1 at 29, before writing it) stops for good, as in a collective whose rank 1 never
/// arrives; the moment it stopped goes to `onset-<rank>` in the current directory.
const HANGING_TRAINER: &str = r#"
import os, threading, time
rank = int(os.environ["PADDLE_TRAINER_ID"])
for step in range(1, 1000):
    if step == (29 if rank == 1 else 31):
        with open(f"onset-{rank}", "w") as f:
            f.write(str(time.time()))
        threading.Event().wait()
    with open(os.environ["PADDLE_LAUNCHER_PROGRESS_FILE"], "w") as f:
        f.write(f"{step}\n")
    time.sleep(0.1)
"#;
const HANG_TIMEOUT_S: u64 = 2;

const HEARTBEAT_TIMEOUT_S: u64 = 3;

impl Recovering {
    /// `pods` Running pods and their launchers, once every trainer started.
    fn start(job: &str, pods: usize, max_restarts: u32) -> Recovering {
        Recovering::started(job, pods, max_restarts, Trainers::Sleeping)
    }

    /// Like `start`, with hang detection on and trainers that hang (`HANGING_TRAINER`).
    fn start_hanging(job: &str, pods: usize) -> Recovering {
        Recovering::started(job, pods, 0, Trainers::Hanging)
    }

    fn started(job: &str, pods: usize, max_restarts: u32, trainers: Trainers) -> Recovering {
        Recovering::begun(job, pods, max_restarts, trainers, false)
    }

    /// Like `start`, an elastic job.
    fn start_elastic(job: &str, pods: usize, max_restarts: u32) -> Recovering {
        Recovering::begun(job, pods, max_restarts, Trainers::Sleeping, true)
    }

    fn begun(
        job: &str,
        pods: usize,
        max_restarts: u32,
        trainers: Trainers,
        elastic: bool,
    ) -> Recovering {
        let api = FakeApi::start();
        let dir = tempfile::tempdir().unwrap();
        api.write_kubeconfig(&dir.path().join("kubeconfig"));
        let mut this = Recovering {
            api,
            dir,
            job: job.to_string(),
            pods,
            control_port: free_port(),
            max_restarts,
            members: Vec::new(),
            trainers,
            elastic,
        };
        this.start_pods();
        this
    }

    fn start_pods(&mut self) {
        for _ in 0..self.pods {
            let i = self.add_pod();
            self.set_running(i);
        }
        self.until_each(&self.alive(), "started trainer-", 0.0);
    }

    /// A new Pending pod (new name, new IP) and its launcher, waiting for it.
    fn add_pod(&mut self) -> usize {
        let i = self.members.len();
        let name = format!("{}-{i}", self.job);
        self.api.put_pod(job_pod(&self.job, &name));
        let log = self.dir.path().join(format!("{i}.log"));
        let mut command = pod_launcher(self.dir.path(), &self.job, self.pods, i, &name, &log);
        match self.trainers {
            Trainers::Hanging => {
                let progress = self.dir.path().join(format!("progress-{i}"));
                command
                    .args(["run", "--", "python3", "-c", HANGING_TRAINER])
                    .env("PADDLE_LAUNCHER_HANG_TIMEOUT", HANG_TIMEOUT_S.to_string())
                    .env("PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "60")
                    .env("PADDLE_LAUNCHER_PROGRESS_FILE", progress);
            }
            Trainers::Checkpointing => {
                command
                    .args(["run", "--", "python3", "-c", CHECKPOINTING_TRAINER])
                    .env("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "2");
            }
            Trainers::Sleeping => {
                command.args(["run", "--", "sleep", "600"]);
            }
        }
        if self.elastic {
            command
                .env("PADDLE_LAUNCHER_MIN_PODS", (self.pods - 1).to_string())
                .env("PADDLE_LAUNCHER_ELASTIC_WAIT", ELASTIC_WAIT_S.to_string())
                .env(
                    "PADDLE_LAUNCHER_COORDINATOR",
                    format!("{}:{}", pod_ip(0), self.control_port),
                );
        }
        let child = command
            .env("PADDLE_LAUNCHER_PROTOCOL", "collective")
            .env(
                "PADDLE_LAUNCHER_JOB_SECRET",
                "bench-secret-0123456789abcdef0123456789",
            )
            .env(
                "PADDLE_LAUNCHER_MAX_RESTARTS",
                self.max_restarts.to_string(),
            )
            .env(
                "PADDLE_LAUNCHER_CONTROL_PORT",
                self.control_port.to_string(),
            )
            .env(
                "PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT",
                HEARTBEAT_TIMEOUT_S.to_string(),
            )
            .spawn()
            .unwrap();
        self.members.push((name, pod_ip(i), Some(child), log));
        i
    }

    /// A new pod the scheduler cannot place: Pending, no launcher.
    fn add_pending_pod(&mut self) {
        let i = self.members.len();
        let name = format!("{}-{i}", self.job);
        self.api.put_pod(job_pod(&self.job, &name));
        let log = self.dir.path().join(format!("{i}.log"));
        self.members.push((name, pod_ip(i), None, log));
    }

    fn set_running(&self, i: usize) -> f64 {
        let (name, ip, ..) = &self.members[i];
        self.api.set_status("default", name, "Running", Some(ip));
        time_of_day(SystemTime::now())
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].2.is_some())
            .collect()
    }

    fn log(&self, i: usize) -> String {
        fs::read_to_string(&self.members[i].3).unwrap_or_default()
    }

    /// The time of the first line of `i`'s log after `after` (seconds of the day) that
    /// contains `pattern`.
    fn line_after(&self, i: usize, pattern: &str, after: f64) -> Option<f64> {
        self.log(i)
            .lines()
            .filter(|l| l.contains(pattern))
            .filter_map(log_time)
            .find(|&t| t > after)
    }

    /// Waits until each of `pods` logged `pattern` after `after`; the latest of those times.
    fn until_each(&self, pods: &[usize], pattern: &str, after: f64) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let times: Vec<Option<f64>> = pods
                .iter()
                .map(|&i| self.line_after(i, pattern, after))
                .collect();
            if times.iter().all(Option::is_some) {
                return times.into_iter().flatten().fold(f64::MIN, f64::max);
            }
            assert!(Instant::now() < deadline, "timed out waiting for {pattern}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills pod `i`'s trainer (the `sleep` its launcher started last) as a crash would.
    fn crash_trainer(&self, i: usize) -> f64 {
        let log = self.log(i);
        let pid = log
            .lines()
            .rev()
            .find_map(|l| {
                l.split("(pid ")
                    .nth(1)?
                    .split(')')
                    .next()?
                    .parse::<i32>()
                    .ok()
            })
            .unwrap();
        let at = time_of_day(SystemTime::now());
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        at
    }

    fn signal_launcher(&self, i: usize, signal: &str) -> f64 {
        let child = self.members[i].2.as_ref().unwrap();
        let at = time_of_day(SystemTime::now());
        Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        at
    }

    /// The node of pod `i` is gone: its launcher killed, the pod Failed.
    fn lose_pod(&mut self, i: usize) {
        let mut child = self.members[i].2.take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let name = self.members[i].0.clone();
        self.api.set_status("default", &name, "Failed", None);
    }

    fn stop(mut self) {
        for (.., child, _) in &mut self.members {
            if let Some(child) = child {
                let _ = Command::new("kill").arg(child.id().to_string()).status();
                let _ = child.wait();
            }
        }
    }
}

/// Recovery in place against today's way, at 3 and 32 pods.
fn recovery() {
    println!("## 5. Recovery in place\n");
    println!("Launchers with a job secret and `--max-restarts` (collective protocol, trainer `sleep 600`,");
    println!(
        "heartbeat timeout {HEARTBEAT_TIMEOUT_S} s), all on this machine. Times from the launchers' own log lines:"
    );
    println!("- trainer failure: one trainer SIGKILLed -> every trainer of the job started again;");
    println!(
        "- frozen peer: one launcher SIGSTOPped (its pod still Running in the API) -> every other"
    );
    println!("  trainer stopped (bounded below by the heartbeat timeout);");
    println!(
        "- replacement: the frozen pod's launcher killed, its pod Failed, a new pod (new name, new"
    );
    println!("  IP) created; from the new pod's Running event -> every trainer started again;");
    println!(
        "- today's way (`--max-restarts 0`): one trainer SIGKILLed -> every launcher exited, then"
    );
    println!(
        "  new launchers for already-Running pods -> every trainer started. A cluster adds the"
    );
    println!(
        "  deletion, scheduling and container start of every pod to this (minutes at 1,000 nodes,"
    );
    println!("  JobSet KEP-467), which recovery in place does for one pod at most.\n");
    println!("| pods | trainer failure -> all restarted: median (max) | frozen peer -> all others stopped: median (max) | replacement Running -> all restarted: median (max) | today's way: failure -> all exited + relaunch |");
    println!("|---|---|---|---|---|");
    for (pods, runs) in [(3, 3), (32, 3)] {
        let mut job = Recovering::start(&format!("rec{pods}"), pods, 10);
        let (mut failure, mut frozen, mut replaced) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let alive = job.alive();
            let at = job.crash_trainer(alive[1]);
            failure.push((job.until_each(&alive, "started trainer-", at) - at) * 1000.0);

            let alive = job.alive();
            let victim = alive[1];
            let at = job.signal_launcher(victim, "-STOP");
            let others: Vec<usize> = alive.iter().copied().filter(|&i| i != victim).collect();
            frozen.push((job.until_each(&others, "was killed by SIGTERM", at) - at) * 1000.0);
            job.lose_pod(victim);
            let new = job.add_pod();
            // The survivors wait for the pod; the replacement's launcher is up and watching.
            job.until_each(&[new], "waiting: ", 0.0);
            let at = job.set_running(new);
            let alive = job.alive();
            replaced.push((job.until_each(&alive, "started trainer-", at) - at) * 1000.0);
        }
        job.stop();
        let today = todays_way(pods);
        let max = |v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max);
        println!(
            "| {pods} | {:.0} ms ({:.0} ms) | {:.0} ms ({:.0} ms) | {:.0} ms ({:.0} ms) | {:.0} ms + {:.0} ms + the pods' recreation |",
            median(failure.clone()),
            max(&failure),
            median(frozen.clone()),
            max(&frozen),
            median(replaced.clone()),
            max(&replaced),
            today.0,
            today.1,
        );
    }
    println!();
}

/// A hang: from the moment the first trainer stopped progressing to every trainer of the job
/// stopped (asked for its stacks first), at 3 and 32 pods.
fn hang() {
    println!("## 8. A hang found and stopped\n");
    println!("Launchers with a job secret (collective protocol, heartbeat timeout {HEARTBEAT_TIMEOUT_S} s,");
    println!("`--hang-timeout {HANG_TIMEOUT_S}`), Python trainers that write their progress file every 0.1 s and");
    println!("stop for good at step 30 (rank 1 one step earlier, before writing it). From the moment the");
    println!(
        "first trainer stopped, rank 1 (its own clock), to every trainer of the job stopped (the"
    );
    println!("launchers' log lines); of that, {HANG_TIMEOUT_S} s are the timeout and 2 s the stacks' dump, by design.\n");
    println!("| pods | hang onset -> every trainer stopped: median (max) | of which the launchers' own | suspect named |");
    println!("|---|---|---|---|");
    for (pods, runs) in [(3, 3), (32, 3)] {
        let mut totals = Vec::new();
        let mut named = 0;
        for run in 0..runs {
            let job = Recovering::start_hanging(&format!("hang{pods}r{run}"), pods);
            let alive = job.alive();
            let stopped = job.until_each(&alive, "was killed by SIGTERM", 0.0);
            let onset = (0..pods)
                .filter_map(|rank| {
                    fs::read_to_string(job.dir.path().join(format!("onset-{rank}"))).ok()
                })
                .filter_map(|t| t.trim().parse::<f64>().ok())
                .map(|t| t % 86_400.0)
                .fold(f64::MAX, f64::min);
            totals.push((stopped - onset) * 1000.0);
            if (0..pods).all(|i| {
                job.log(i)
                    .contains(&format!("suspect pod hang{pods}r{run}-1 "))
            }) {
                named += 1;
            }
            job.stop();
        }
        let max = totals.iter().cloned().fold(f64::MIN, f64::max);
        let designed = (HANG_TIMEOUT_S as f64 + 2.0) * 1000.0;
        println!(
            "| {pods} | {:.0} ms ({:.0} ms) | {:.0} ms | {named} of {runs} runs, on every pod |",
            median(totals.clone()),
            max,
            median(totals) - designed,
        );
    }
    println!("\nCommand: `cargo bench --bench launch -- hang`.\n");
}

/// A preemption: from the SIGTERM to one launcher to every trainer of the job asked for a
/// checkpoint (its handler ran), at 3 and 32 pods.
fn preemption() {
    println!(
        "## 9. A preemption: every trainer asked for a checkpoint
"
    );
    println!(
        "Launchers with a job secret (collective protocol), Python trainers with a handler for"
    );
    println!(
        "the checkpoint signal that write the time it ran. From the SIGTERM to one follower's"
    );
    println!(
        "launcher (the kubelet's, as for a preempted pod) to the last trainer's handler.
"
    );
    println!("| pods | SIGTERM -> every trainer's handler ran: median (max) |");
    println!("|---|---|");
    for (pods, runs) in [(3, 5), (32, 3)] {
        let mut totals = Vec::new();
        for run in 0..runs {
            let job = Recovering::started(
                &format!("pre{pods}r{run}"),
                pods,
                0,
                Trainers::Checkpointing,
            );
            // Every trainer's handler is installed.
            let files = |prefix: &str| {
                (0..pods)
                    .filter_map(|rank| {
                        fs::read_to_string(job.dir.path().join(format!("{prefix}-{rank}"))).ok()
                    })
                    .collect::<Vec<String>>()
            };
            let deadline = Instant::now() + Duration::from_secs(120);
            while files("ready").len() < pods {
                assert!(Instant::now() < deadline, "the trainers did not start");
                std::thread::sleep(Duration::from_millis(50));
            }
            let alive = job.alive();
            let at = job.signal_launcher(alive[1], "-TERM");
            let deadline = Instant::now() + Duration::from_secs(60);
            let times = loop {
                let times: Vec<f64> = files("signalled")
                    .iter()
                    .filter_map(|t| t.trim().parse::<f64>().ok())
                    .map(|t| t % 86_400.0)
                    .collect();
                if times.len() == pods || Instant::now() > deadline {
                    break times;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            assert_eq!(times.len(), pods, "not every trainer was asked");
            let last = times.iter().cloned().fold(f64::MIN, f64::max);
            totals.push((last - at) * 1000.0);
            job.stop();
        }
        let max = totals.iter().cloned().fold(f64::MIN, f64::max);
        println!("| {pods} | {:.1} ms ({:.1} ms) |", median(totals), max);
    }
    println!("\nCommand: `cargo bench --bench launch -- preemption`.\n");
}

/// Today's way, measured here: (failure -> every launcher exited, relaunch -> every trainer
/// started), in milliseconds.
fn todays_way(pods: usize) -> (f64, f64) {
    let mut job = Recovering::start(&format!("today{pods}"), pods, 0);
    let at = job.crash_trainer(1);
    let mut exited = at;
    for (.., child, log) in &mut job.members {
        let _ = child.take().unwrap().wait();
        let text = fs::read_to_string(log).unwrap_or_default();
        if let Some(t) = text.lines().rev().find_map(log_time) {
            exited = exited.max(t);
        }
    }
    job.stop();
    let relaunch = time_of_day(SystemTime::now());
    let again = Recovering::start(&format!("again{pods}"), pods, 0);
    let started = again.until_each(&again.alive(), "started trainer-", 0.0);
    again.stop();
    ((exited - at) * 1000.0, (started - relaunch) * 1000.0)
}

/// A pod as the Job controller makes it, with the managedFields, conditions and container
/// statuses of a real pod (from the recorded API responses): about the size the API server
/// sends for each pod of a real job (4.6 KB).
fn realistic_pod(job: &str, name: &str) -> serde_json::Value {
    static REAL: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    let real = REAL.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/k8s-api-replays/v1-36-pod-list.json");
        let replay: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
        let list: serde_json::Value =
            serde_json::from_str(replay[0]["response_body"].as_str().unwrap()).unwrap();
        // kube-proxy's: a DaemonSet pod, the closest to a Job's (one container, no probes).
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("kube-proxy")
            })
            .unwrap()
            .clone()
    });
    let mut pod = job_pod(job, name);
    pod["metadata"]["managedFields"] = real["metadata"]["managedFields"].clone();
    for field in ["conditions", "containerStatuses"] {
        pod["status"][field] = real["status"][field].clone();
    }
    pod
}

/// One start of a big job: every launcher against the fake API, the pods Pending, then Running
/// one after the other. `coordinator`: the launchers name pod 0's as their coordinator.
struct ScaleRun {
    requests: usize,
    api_bytes: u64,
    pod_bytes: usize,
    start_ms: f64,
    coordinator_rss_kib: u64,
    channel_bytes: Option<u64>,
    /// Where the start's time went, from pod 0's log and the trainers' start times.
    timeline: String,
}

fn scale_run(pods: usize, coordinator: bool) -> ScaleRun {
    let job = if coordinator { "co" } else { "all" };
    let api = FakeApi::start();
    api.set_bookmark_interval(Duration::from_secs(60));
    let dir = tempfile::tempdir().unwrap();
    api.write_kubeconfig(&dir.path().join("kubeconfig"));
    let names: Vec<String> = (0..pods).map(|i| format!("{job}-{i}")).collect();
    let pod_bytes = serde_json::to_string(&realistic_pod(job, &names[0]))
        .unwrap()
        .len();
    for name in &names {
        api.put_pod(realistic_pod(job, name));
    }
    let me = std::env::current_exe().unwrap().display().to_string();
    let (control, trainer) = (free_port(), free_port());
    let launchers: Vec<Child> = (0..pods)
        .map(|i| {
            let log = dir.path().join(format!("{i}.log"));
            let mut command = pod_launcher(dir.path(), job, pods, i, &names[i], &log);
            command
                .args(["run", "--", &me, "--standin", "trainer"])
                .env("PADDLE_LAUNCHER_PROTOCOL", "collective")
                .env("PADDLE_LAUNCHER_TRAINER_PORT", trainer.to_string());
            if coordinator {
                command
                    .env(
                        "PADDLE_LAUNCHER_JOB_SECRET",
                        "scale-secret-0123456789abcdef0123456789",
                    )
                    .env(
                        "PADDLE_LAUNCHER_COORDINATOR",
                        format!("{}:{control}", pod_ip(0)),
                    );
            }
            command.spawn().unwrap()
        })
        .collect();
    let log =
        |i: usize| fs::read_to_string(dir.path().join(format!("{i}.log"))).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(1800);
    // Every launcher that watches is watching (today: all; coordinator mode: one).
    let watchers = if coordinator { 1 } else { pods };
    while api.pod_requests().1 < watchers {
        assert!(Instant::now() < deadline, "the launchers never watched");
        std::thread::sleep(Duration::from_millis(200));
    }
    for (i, name) in names.iter().enumerate() {
        api.set_status("default", name, "Running", Some(&pod_ip(i)));
    }
    let event = time_of_day(SystemTime::now());
    let launcher0 = launchers[0].id();
    let mut peak = 0;
    let mut pending: Vec<usize> = (0..pods).collect();
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "not every trainer started");
        peak = peak.max(rss_kib(launcher0, "VmHWM:"));
        pending.retain(|&i| !log(i).contains("started trainer-"));
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut starts: Vec<f64> = (0..pods)
        .filter_map(|i| first_line_time(&log(i), "started trainer-"))
        .map(|t| (t - event) * 1000.0)
        .collect();
    starts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let started = event + starts[starts.len() - 1] / 1000.0;
    let at = |pattern: &str| {
        first_line_time(&log(0), pattern).map_or("-".to_string(), |t| {
            format!("{:.0} ms", (t - event) * 1000.0)
        })
    };
    let timeline = format!(
        "{pods} pods, {}: pod 0 saw every pod Running at {}, all launchers joined at {}; trainers started from {:.0} ms, half by {:.0} ms, all by {:.0} ms",
        if coordinator { "coordinator" } else { "every launcher" },
        at("all pods are Running"),
        at("launchers are here"),
        starts[0],
        starts[starts.len() / 2],
        starts[starts.len() - 1],
    );
    let (lists, watches) = api.pod_requests();
    let api_bytes = api.bytes_sent();
    for mut child in launchers {
        let _ = child.wait();
    }
    let channel_bytes = coordinator.then(|| {
        log(0)
            .lines()
            .find_map(|l| l.split("closed; ").nth(1)?.split(' ').next()?.parse().ok())
            .unwrap_or(0)
    });
    ScaleRun {
        requests: lists + watches,
        api_bytes,
        pod_bytes,
        start_ms: (started - event) * 1000.0,
        coordinator_rss_kib: peak,
        channel_bytes,
        timeline,
    }
}

/// Big jobs, both modes side by side: every launcher watching the pods, or only the coordinator.
fn scale() {
    println!("## 6. Big jobs: every launcher watches, or only the coordinator\n");
    println!(
        "N launchers (collective protocol, a trainer that exits at once) against the fake API,"
    );
    println!("which serves each pod with the managedFields of a real one; the pods are created");
    println!(
        "Pending, the launchers started and watching, then every pod is set Running. API bytes:"
    );
    println!("everything the API served for this one start (lists and watch events). Start: from");
    println!("the moment the last pod was set Running to the last trainer started. RSS: VmHWM of");
    println!("pod 0's launcher (the coordinator in that mode). Control channel: bytes the");
    println!("coordinator sent (the membership with `Go`, then the end), heartbeats aside.");
    println!(
        "Pod objects of {} bytes.\n",
        serde_json::to_string(&realistic_pod("co", "co-0"))
            .unwrap()
            .len()
    );
    println!("| pods | mode | API requests | API bytes | = one list + watch of the job x | start | pod 0's launcher peak RSS | control channel bytes |");
    println!("|---|---|---|---|---|---|---|---|");
    // Every launcher watching 1,000 pods does not fit this machine (1,000 processes holding
    // the job's pods at once): that mode stops at 256; its cost grows as N^2 (the table).
    // PADDLE_BENCH_SCALE=64,128:coordinator measures other sizes (":coordinator": that mode only).
    let runs: Vec<(usize, bool)> = std::env::var("PADDLE_BENCH_SCALE")
        .unwrap_or_else(|_| "128,256,1000:coordinator".to_string())
        .split(',')
        .flat_map(|entry| {
            let (pods, only) = entry.split_once(':').unwrap_or((entry, ""));
            let pods: usize = pods.trim().parse().expect("PADDLE_BENCH_SCALE: sizes");
            let modes: &[bool] = if only == "coordinator" {
                &[true]
            } else {
                &[false, true]
            };
            modes.iter().map(move |&c| (pods, c)).collect::<Vec<_>>()
        })
        .collect();
    let mut timelines = Vec::new();
    for (pods, coordinator) in runs {
        {
            let run = scale_run(pods, coordinator);
            let mode = if coordinator {
                "coordinator"
            } else {
                "every launcher"
            };
            println!(
                "| {pods} | {mode} | {} | {:.1} MB | {:.2} | {:.0} ms | {:.1} MB | {} |",
                run.requests,
                run.api_bytes as f64 / 1e6,
                // One list of the job's pods and one watch event for each: 2 pod objects a pod.
                run.api_bytes as f64 / (2 * run.pod_bytes * pods) as f64,
                run.start_ms,
                run.coordinator_rss_kib as f64 / 1024.0,
                run.channel_bytes
                    .map_or("-".to_string(), |b| format!("{:.1} MB", b as f64 / 1e6)),
            );
            timelines.push(run.timeline);
        }
    }
    println!();
    for timeline in timelines {
        println!("- {timeline}");
    }
    println!();
}

/// What the metrics and the straggler rule cost (pure, no processes): one scrape of a launcher
/// of 8 processes (a node of 8 GPUs; every launcher renders its own, so a 32-pod job's 32
/// scrapes cost 32 of these spread over 32 pods), and one straggler window at 1,000 and 10,000
/// ranks.
fn observability() {
    println!("## Observability (pure, no processes)\n");
    println!("| measured | per call |");
    println!("|---|---|");
    let scrape = paddle_launcher::measure_observability(8, 200);
    println!(
        "| one scrape of a launcher of 8 processes (rendered, with a rate sample) | {:.1} us |",
        scrape.as_secs_f64() * 1e6
    );
    for (pods, per_pod, rounds) in [(1_000, 8, 20), (10_000, 1, 10), (10_000, 8, 5)] {
        let (noting, ending, table) = paddle_launcher::measure_view(pods, per_pod, rounds);
        let ranks = pods * per_pod;
        println!(
            "| the coordinator's view of {pods} launchers x {per_pod} processes: one report of every launcher noted | {:.2} ms |",
            noting.as_secs_f64() * 1e3
        );
        println!(
            "| the same: a window's end ({ranks} ranks measured and judged, the figures made) | {:.2} ms (a table `status` asks for: {:.2} ms) |",
            ending.as_secs_f64() * 1e3,
            table.as_secs_f64() * 1e3
        );
    }
    let beats = paddle_launcher::measure_heartbeats(32, 8, 2_000);
    // At the default heartbeat timeout of 10 s a launcher beats every 3.33 s.
    let per_second = 3.0 / 10.0;
    println!(
        "| a follower's heartbeat with its 8 processes' steps (gauges read, encoded, sealed) | {:.1} us ({:.5} % of a core at one beat per 3.33 s) |",
        beats.follower.as_secs_f64() * 1e6,
        beats.follower.as_secs_f64() * per_second * 100.0
    );
    println!(
        "| the coordinator's part of one beat of each of 31 followers (opened, parsed, noted) | {:.1} us ({:.4} % of a core) |",
        beats.coordinator.as_secs_f64() * 1e6,
        beats.coordinator.as_secs_f64() * per_second * 100.0
    );
    println!(
        "| a heartbeat frame with 8 processes' steps / without | {} B / {} B |",
        beats.frame, beats.bare_frame
    );
    println!("\nThe Job annotation: one PATCH at most every 30 s per job, by the coordinator: at most 120 requests an hour, whatever the job's size (`job_view::SUMMARY_EVERY`); a `Straggler` event per rank named (at most 40 events in a launcher's life).\n");
}
