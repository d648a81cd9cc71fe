//! Shared test helpers: the fake API server, launcher processes, the stand-in programs.
#![allow(dead_code)] // each test binary uses a different part of the helpers

pub mod control_plane;
pub mod crd;
pub mod dnsmasq;
pub mod fake_api;
pub mod node_agent;
pub mod real_jobs;

use std::fs;
use std::path::{Path, PathBuf};

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The Kubernetes versions whose schemas the generated manifests are validated against: the
/// oldest the docs claim (1.29: podFailurePolicy rules without onPodConditions) and the newest
/// kubernetes-validate knows.
const KUBERNETES_VERSIONS: &[&str] = &["1.29", "1.37"];

/// Validates `file` strictly against the official schemas of every Kubernetes version the docs
/// claim; a failure names `what`, the version and the validator's words.
#[allow(dead_code)]
pub fn assert_valid_on_every_kubernetes(file: &Path, what: &str) {
    let validate = manifest_tool("kubernetes-validate");
    for version in KUBERNETES_VERSIONS {
        let out = Command::new(&validate)
            .args(["--strict", "--kubernetes-version", version])
            .arg(file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{what} on Kubernetes {version}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

pub const LAUNCHER: &str = env!("CARGO_BIN_EXE_paddle-launcher");

/// The stand-in `paddle` program (see standins/README.md).
pub fn standin() -> String {
    format!("{}/standins/paddle", env!("CARGO_MANIFEST_DIR"))
}

/// The environment entry that makes a launcher run the stand-in for `role` ("pserver" or
/// "train"), e.g. `("PADDLE_LAUNCHER_PSERVER_CMD", "<repo>/standins/paddle pserver")`.
pub fn standin_cmd(role: &str) -> (&'static str, String) {
    let variable = match role {
        "pserver" => "PADDLE_LAUNCHER_PSERVER_CMD",
        _ => "PADDLE_LAUNCHER_TRAINER_CMD",
    };
    (variable, format!("{} {role}", standin()))
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/k8s-api-replays")
        .join(name)
}

/// A launcher process with a clean environment (nothing of the test runner's leaks in) and
/// its output captured to files, so a chatty process can never block on a full pipe.
pub struct Launcher {
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
}

pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

impl Launcher {
    pub fn start(dir: &Path, name: &str, args: &[&str], env: &[(&str, String)]) -> Launcher {
        let out = dir.join(format!("{name}.stdout"));
        let err = dir.join(format!("{name}.stderr"));
        let child = Command::new(LAUNCHER)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("PADDLE_LAUNCHER_TERMINATION_LOG", "")
            .env("PADDLE_LAUNCHER_ID_DIR", "")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Launcher { child, out, err }
    }

    pub fn stderr_so_far(&self) -> String {
        fs::read_to_string(&self.err).unwrap_or_default()
    }

    pub fn stdout_so_far(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits for the exit; a launcher still running after `limit` is killed and the test fails
    /// with its output (the limit guards against hangs; it is not a timing assertion).
    pub fn wait(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Finished {
                    status,
                    stdout: self.stdout_so_far(),
                    stderr: self.stderr_so_far(),
                };
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "launcher still running after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    self.stdout_so_far(),
                    self.stderr_so_far()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls the launcher's output until `pattern` appears.
    pub fn wait_for_output(&self, pattern: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.stdout_so_far().contains(pattern) || self.stderr_so_far().contains(pattern) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "no {pattern:?} after {limit:?}\nstdout:\n{}\nstderr:\n{}",
            self.stdout_so_far(),
            self.stderr_so_far()
        );
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// Any signal number, real-time ones included (they have no `nix` name).
    pub fn signal_number(&self, sig: i32) {
        // SAFETY: kill(2) has no memory effects.
        assert_eq!(unsafe { nix::libc::kill(self.child.id() as i32, sig) }, 0);
    }
}

/// A test that fails midway must not leave its launcher (and so its children) running.
impl Drop for Launcher {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Fails with the whole text when `wanted` is not in it (a launcher's output, a manifest).
#[track_caller]
pub fn assert_contains(text: &str, wanted: &str) {
    assert!(text.contains(wanted), "no {wanted:?} in:\n{text}");
}

/// A port with the next `count - 1` ports likely free too (an ephemeral port the kernel just
/// handed out and took back).
pub fn free_ports(count: u16) -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port as u32 + count as u32 <= 65535 {
            return port;
        }
    }
}

/// Stand-in processes (they write `<role>-<pid>` files into the pid dir) still alive.
pub fn survivors(pid_dir: &Path) -> Vec<String> {
    fs::read_dir(pid_dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            let pid = name.rsplit('-').next()?.to_string();
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // A zombie is dead; only its parent's wait is missing.
            let state = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_string();
            (state != "Z").then_some(name)
        })
        .collect()
}

/// A small deterministic generator for random pod orders; the seed is printed for replay.
pub struct Rng(u64);

impl Rng {
    /// Randomness a failing run replays: from `seed`, or from `TEST_SEED` when
    /// set (the seed is printed either way).
    pub fn seeded(seed: u64) -> Rng {
        let seed = std::env::var("TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(seed)
            | 1;
        eprintln!("random seed: {seed} (TEST_SEED={seed} replays it)");
        Rng(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// Lines of `text` from the stand-in trainer: its argv as printed.
pub fn trainer_argv(text: &str) -> Option<Vec<String>> {
    let json = text
        .lines()
        .find_map(|l| l.split("trainer argv: ").nth(1))?;
    serde_json::from_str(json).ok()
}

/// A loopback address that no other test of this run is given: 127.<p>.<n / 250>.<n % 250 + 2>,
/// with p from the process id (nextest runs each test in a process of its own) and n counting
/// up within the process. Linux routes all of 127.0.0.0/8 to `lo`, so each simulated pod has
/// an address of its own without any set-up.
pub fn loopback_ip() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::process::id() % 200 + 20;
    format!("127.{p}.{}.{}", n / 250 % 250, n % 250 + 2)
}

/// A one-pod job on an address of its own, with stand-in processes that record their pids.
pub struct OnePod {
    pub dir: tempfile::TempDir,
    pub ip: String,
    pub env: Vec<(&'static str, String)>,
}

impl OnePod {
    pub fn new() -> OnePod {
        let ip = loopback_ip();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pids")).unwrap();
        let env = vec![
            ("JOB_NAME", "sup".to_string()),
            ("PADDLE_LAUNCHER_PEERS", ip.to_string()),
            ("POD_IP", ip.to_string()),
            ("CONF_PADDLE_NIC", "lo".to_string()),
            ("CONF_PADDLE_PORT", free_ports(1).to_string()),
            standin_cmd("pserver"),
            standin_cmd("train"),
            ("PADDLE_LAUNCHER_LINGER", "0".to_string()),
            ("PADDLE_LAUNCHER_GRACE_PERIOD", "5".to_string()),
            (
                "STANDIN_PID_DIR",
                dir.path().join("pids").display().to_string(),
            ),
        ];
        OnePod { dir, ip, env }
    }

    pub fn set(mut self, name: &'static str, value: &str) -> Self {
        self.env.retain(|(n, _)| *n != name);
        self.env.push((name, value.to_string()));
        self
    }

    pub fn start(&self) -> Launcher {
        Launcher::start(self.dir.path(), &self.ip, &["run"], &self.env)
    }

    pub fn pids(&self) -> PathBuf {
        self.dir.path().join("pids")
    }
}

pub fn assert_nothing_left(pids: &Path) {
    assert_eq!(
        survivors(pids),
        Vec::<String>::new(),
        "processes left behind"
    );
}

/// A fake API server with a kubeconfig for it in a temporary directory.
pub struct Cluster {
    pub api: fake_api::FakeApi,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub fn new() -> Cluster {
        let api = fake_api::FakeApi::start();
        let dir = tempfile::tempdir().unwrap();
        api.write_kubeconfig(&dir.path().join("kubeconfig"));
        Cluster { api, dir }
    }

    pub fn env(&self, job: &str, pods: usize) -> Vec<(&'static str, String)> {
        cluster_env(self.dir.path(), job, pods)
    }
}

/// A launcher's environment for `job` of `pods` pods against the cluster whose kubeconfig is
/// in `dir`, on this machine's loopback interface.
pub fn cluster_env(dir: &Path, job: &str, pods: usize) -> Vec<(&'static str, String)> {
    vec![
        ("KUBECONFIG", dir.join("kubeconfig").display().to_string()),
        ("JOB_NAME", job.to_string()),
        ("CONF_PADDLE_GRADIENT_NUM", pods.to_string()),
        ("CONF_PADDLE_NIC", "lo".to_string()),
    ]
}

/// The virtualenv with `paddlepaddle==2.6.2`, the last release with a CPU parameter server,
/// that .ci/run creates (or PADDLE_PS_PYTHON).
pub fn ps_paddle_python() -> String {
    venv_tool(
        Some("PADDLE_PS_PYTHON"),
        "ps-venv",
        "python",
        "paddlepaddle 2.6.2",
    )
}

/// The virtualenv with `paddlepaddle` that .ci/run creates (or PADDLE_PYTHON).
pub fn paddle_python() -> String {
    venv_tool(
        Some("PADDLE_PYTHON"),
        "paddle-venv",
        "python",
        "paddlepaddle",
    )
}

/// `kubernetes-validate` or `checkov`, from the virtualenv .ci/run creates.
pub fn manifest_tool(name: &str) -> String {
    venv_tool(None, "tools-venv", name, "kubernetes-validate and checkov")
}

/// A program of a virtualenv under target/ that .ci/run creates with `holding`, unless
/// `variable` names it; a missing one says how to get it.
fn venv_tool(variable: Option<&str>, venv: &str, program: &str, holding: &str) -> String {
    let path = variable
        .and_then(|v| std::env::var(v).ok())
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target")
                .join(venv)
                .join("bin")
                .join(program)
                .display()
                .to_string()
        });
    let or_set = variable.map_or(String::new(), |v| format!(", or set {v}"));
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: run `bash .ci/run` (it creates the venv with {holding}){or_set}"
    );
    path
}

/// What checkov finds in a manifest file: the number of checks passed, and each failed one as
/// (check id, resource).
pub fn checkov(file: &Path) -> (u64, Vec<(String, String)>) {
    let out = Command::new(manifest_tool("checkov"))
        .args([
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "-o",
            "json",
            "-f",
        ])
        .arg(file)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    // One report, or one per framework.
    let reports = match report.as_array() {
        Some(all) => all.clone(),
        None => vec![report],
    };
    let mut passed = 0;
    let mut failed = Vec::new();
    for r in &reports {
        passed += r["summary"]["passed"].as_u64().unwrap_or(0);
        for check in r["results"]["failed_checks"]
            .as_array()
            .into_iter()
            .flatten()
        {
            failed.push((
                check["check_id"].as_str().unwrap_or_default().to_string(),
                check["resource"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    (passed, failed)
}

/// The line a launcher writes when it lists and watches the job's pods itself.
pub const DISCOVERS: &str = "to be Running (API server";

/// What the kubelet does for a pod whose environment names the job's mounted Secret
/// (`PADDLE_LAUNCHER_JOB_SECRET_FILE`, as `manifest` writes it): the file exists, here in the
/// test's `dir`, holding a secret.
pub fn mount_job_secret(dir: &Path, env: &mut [(&'static str, String)]) {
    for (name, value) in env.iter_mut() {
        if *name == "PADDLE_LAUNCHER_JOB_SECRET_FILE" {
            let file = dir.join("mounted-job-secret");
            std::fs::write(&file, "mounted-secret-of-the-test-0123456789abcdef\n").unwrap();
            *value = file.display().to_string();
        }
    }
}

/// The real kubectl against `api` (its kubeconfig and cache in `dir`): status, stdout, stderr.
pub fn kubectl(
    api: &fake_api::FakeApi,
    dir: &std::path::Path,
    args: &[&str],
) -> (i32, String, String) {
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(dir.join("kube-cache"))
        .args(args)
        .output()
        .expect("kubectl is needed for this test (.ci/run installs Debian's kubernetes-client)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}
