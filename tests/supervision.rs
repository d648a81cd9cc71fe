//! The launcher as the supervisor of its pserver and trainer: exit statuses, signals, ordering,
//! and nothing left behind. Static membership (--peers), real processes on loopback IPs.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::{
    assert_contains, assert_nothing_left, free_ports, standin, survivors, Launcher, OnePod,
};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn trainer_exit_code_becomes_launcher_exit_code() {
    let pod = OnePod::new().set("STANDIN_TRAINER_EXIT", "3");
    let term_log = pod.dir.path().join("termination-log");
    std::fs::write(&term_log, "").unwrap();
    let pod = pod.set(
        "PADDLE_LAUNCHER_TERMINATION_LOG",
        &term_log.display().to_string(),
    );
    let done = pod.start().wait(LIMIT);
    assert_eq!(done.code(), 3, "{}", done.stderr);
    // The pod's line names it, and when, as every pod of a bigger job would.
    let reason = std::fs::read_to_string(&term_log).unwrap();
    assert!(
        reason.starts_with("job stopped: pod sup-0 (trainer id 0 of 1, pserver id 0 of 1) at 20"),
        "{reason}"
    );
    assert!(
        reason.ends_with("Z: trainer exited with status 3\n"),
        "{reason}"
    );
    assert!(
        done.stdout.contains("[pserver-0] pserver received SIGTERM"),
        "the pserver was not stopped:\n{}",
        done.stdout
    );
    assert_nothing_left(&pod.pids());
}

/// Issue 52: a value clap refuses (not among an option's choices) ends the pod as every bad
/// input does: status 2, and one line naming the variable, the value and what is expected,
/// last on stderr and in the termination message (it was empty, the reason only in clap's
/// three lines). `--termination-log` given on the command line is where it goes.
#[test]
fn a_value_clap_refuses_writes_the_termination_message() {
    let expected =
        "invalid PADDLE_LAUNCHER_LOG_FORMAT (--log-format): \"xml\": expected one of text, json";
    let pod = OnePod::new().set("PADDLE_LAUNCHER_LOG_FORMAT", "xml");
    let term_log = pod.dir.path().join("termination-log");
    std::fs::write(&term_log, "").unwrap();
    let by_env = pod.set(
        "PADDLE_LAUNCHER_TERMINATION_LOG",
        &term_log.display().to_string(),
    );
    let done = by_env.start().wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_eq!(
        std::fs::read_to_string(&term_log).unwrap(),
        format!("{expected}\n")
    );
    let last = done.stderr.lines().last().unwrap_or_default();
    assert_eq!(last, format!("error: {expected}"), "{}", done.stderr);
    // The flag, after the variable's empty value (which would write nothing).
    std::fs::write(&term_log, "").unwrap();
    let flag = format!("--termination-log={}", term_log.display());
    let pod = OnePod::new()
        .set("PADDLE_LAUNCHER_LOG_FORMAT", "xml")
        .set("PADDLE_LAUNCHER_TERMINATION_LOG", "");
    let done = Launcher::start(pod.dir.path(), "flag", &["run", &flag], &pod.env).wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_eq!(
        std::fs::read_to_string(&term_log).unwrap(),
        format!("{expected}\n")
    );
}

#[test]
fn sigterm_during_training_is_forwarded_to_both_children() {
    let pod = OnePod::new().set("STANDIN_TRAINER_SECONDS", "120");
    let launcher = pod.start();
    launcher.wait_for_output("connected to 1 pserver endpoints", LIMIT);
    launcher.signal(Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_contains(&done.stdout, "[trainer-0] trainer received SIGTERM");
    assert_contains(&done.stdout, "[pserver-0] pserver received SIGTERM");
    assert_contains(
        &done.stderr,
        "received SIGTERM; stopped trainer-0 and pserver-0",
    );
    assert_nothing_left(&pod.pids());
}

/// As PID 1 the launcher receives only the signals it handles: every catchable one is
/// forwarded (a custom STOPSIGNAL, SIGWINCH, SIGPWR, real-time signals), and only TERM, INT and
/// QUIT stop it.
#[test]
fn every_catchable_signal_is_forwarded_to_both_children_which_keep_running() {
    use nix::libc::{SIGHUP, SIGPWR, SIGRTMIN, SIGUSR1, SIGUSR2, SIGWINCH};
    let pod = OnePod::new().set("STANDIN_TRAINER_SECONDS", "120");
    let launcher = pod.start();
    launcher.wait_for_output("connected to 1 pserver endpoints", LIMIT);
    for (sig, name) in [
        (SIGHUP, "SIGHUP".to_string()),
        (SIGUSR1, "SIGUSR1".to_string()),
        (SIGUSR2, "SIGUSR2".to_string()),
        (SIGWINCH, "SIGWINCH".to_string()),
        (SIGPWR, "SIGPWR".to_string()),
        (SIGRTMIN() + 1, "SIGRTMIN+1".to_string()),
    ] {
        launcher.signal_number(sig);
        launcher.wait_for_output(&format!("[trainer-0] trainer received {name}"), LIMIT);
        launcher.wait_for_output(&format!("[pserver-0] pserver received {name}"), LIMIT);
    }
    launcher.signal(Signal::SIGINT);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 130, "{}", done.stderr);
    assert_nothing_left(&pod.pids());
}

/// `sh -c ENTRY` is the group leader, the user's program its child: when the leader exits at
/// once on SIGTERM, the rest of the group still gets the grace period to clean up. (The child
/// closes its output, so that the wait for the output pumps cannot hide a launcher that left
/// early.)
#[test]
fn the_whole_process_group_gets_the_grace_period() {
    let pod = OnePod::new();
    let cleaned = pod.dir.path().join("cleaned");
    let trainer = script(
        pod.dir.path(),
        "entry",
        &format!(
            "(trap 'sleep 1; echo done > {}; exit 0' TERM; echo ready; exec >/dev/null 2>&1; while true; do sleep 0.1; done) &\n\
             trap 'exit 0' TERM\nwait\n",
            cleaned.display()
        ),
    );
    let pod = pod.set("PADDLE_LAUNCHER_TRAINER_CMD", &trainer);
    let launcher = pod.start();
    launcher.wait_for_output("[trainer-0] ready", LIMIT);
    launcher.signal(Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_eq!(
        std::fs::read_to_string(&cleaned).ok().as_deref(),
        Some("done\n"),
        "the program under the shell was killed before its grace period:\n{}",
        done.stderr
    );
}

/// Copies and globs run off the runtime thread: a TERM during a copy that never ends (here a
/// FIFO nobody writes to, in the job's config directory) still ends the launcher at once.
#[test]
fn sigterm_ends_a_workspace_copy_that_hangs() {
    let pod = OnePod::new();
    let config_dir = pod.dir.path().join("jobs/sup/conf");
    std::fs::create_dir_all(&config_dir).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(config_dir.join("stuck"))
        .status()
        .unwrap();
    assert!(made.success());
    let jobs = pod.dir.path().join("jobs").display().to_string();
    let pod = pod.set("JOB_PATH", &jobs).set("TRAIN_CONFIG_DIR", "conf");
    let launcher = pod.start();
    launcher.wait_for_output("trainer id 0 of 1", LIMIT);
    launcher.signal(Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "received SIGTERM while preparing the workspace",
    );
    assert_nothing_left(&pod.pids());
}

#[test]
fn children_that_ignore_sigterm_are_killed_after_the_grace_period() {
    let pod = OnePod::new().set("PADDLE_LAUNCHER_GRACE_PERIOD", "1");
    let trainer = stubborn_trainer(pod.dir.path());
    let pod = pod.set("PADDLE_LAUNCHER_TRAINER_CMD", &trainer);
    let launcher = pod.start();
    launcher.wait_for_output("[trainer-0] ready", LIMIT);
    launcher.signal(Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_contains(&done.stderr, "grace period of 1 s over: sending SIGKILL");
    assert_contains(&done.stderr, "was killed by SIGKILL");
}

/// An executable shell script standing in for a user's trainer; it accepts any flags.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Ignores SIGTERM (its `sleep` children inherit that), as a stubborn user program would.
fn stubborn_trainer(dir: &Path) -> String {
    script(
        dir,
        "stubborn-trainer",
        "trap '' TERM\necho ready\nwhile true; do sleep 1; done\n",
    )
}

/// Python block-buffers a pipe: without PYTHONUNBUFFERED from the launcher, a trainer's line
/// would show only when it exits. The test's own environment has no PYTHONUNBUFFERED
/// (`Launcher::start` clears it), as a user's pod has none.
#[test]
fn a_python_trainers_lines_reach_the_log_while_it_runs() {
    let pod = OnePod::new();
    assert!(!pod.env.iter().any(|(name, _)| *name == "PYTHONUNBUFFERED"));
    let trainer = pod.dir.path().join("trainer.py");
    std::fs::write(
        &trainer,
        "import time\nprint('epoch 0 done')\ntime.sleep(600)\n",
    )
    .unwrap();
    let pod = pod.set(
        "PADDLE_LAUNCHER_TRAINER_CMD",
        &format!("python3 {}", trainer.display()),
    );
    let launcher = pod.start();
    launcher.wait_for_output("[trainer-0] epoch 0 done", LIMIT);
    launcher.signal(Signal::SIGTERM);
    assert_eq!(launcher.wait(LIMIT).code(), 143);
    assert_nothing_left(&pod.pids());
}

/// A user's own choice wins: PYTHONUNBUFFERED=0 in the pod is passed on as it is.
#[test]
fn a_pythonunbuffered_the_user_set_is_kept() {
    let pod = OnePod::new().set("PYTHONUNBUFFERED", "0");
    let show = script(
        pod.dir.path(),
        "show-env",
        "echo \"PYTHONUNBUFFERED=[$PYTHONUNBUFFERED]\"\n",
    );
    let done = pod
        .set("PADDLE_LAUNCHER_TRAINER_CMD", &show)
        .start()
        .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(&done.stdout, "[trainer-0] PYTHONUNBUFFERED=[0]");
}

/// PaddlePaddle >= 2's `paddle pserver` prints its version and exits 0 (here `true` does the
/// same): the error names the likely cause and the protocols to use instead.
#[test]
fn a_pserver_that_exits_0_at_once_is_explained() {
    let pod = OnePod::new().set("PADDLE_LAUNCHER_PSERVER_CMD", "true");
    let done = pod.start().wait(LIMIT);
    assert_eq!(done.code(), 75, "{}", done.stderr);
    let last = done.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("pserver exited with status 0 before the trainer started")
            && last.contains("probably PaddlePaddle 2 or later")
            && last.contains("--protocol fleet"),
        "{last}"
    );
}

/// Children never outlive their launcher: SIGKILLed, it cannot stop them itself, yet they die
/// with it (PR_SET_PDEATHSIG), also when it is not PID 1 (here, local mode, wrappers).
#[test]
fn a_sigkilled_launcher_leaves_no_child_behind() {
    let pod = OnePod::new().set("STANDIN_TRAINER_SECONDS", "120");
    let launcher = pod.start();
    launcher.wait_for_output("connected to 1 pserver endpoints", LIMIT);
    assert_eq!(survivors(&pod.pids()).len(), 2, "pserver and trainer run");
    launcher.signal(Signal::SIGKILL);
    assert_eq!(launcher.wait(LIMIT).status.signal(), Some(9));
    // Their end is asynchronous: look until they are gone or the limit says they never will be.
    let deadline = std::time::Instant::now() + LIMIT;
    while !survivors(&pod.pids()).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_nothing_left(&pod.pids());
}

#[test]
fn pserver_death_stops_the_trainer_with_its_own_code() {
    let pod = OnePod::new()
        .set("STANDIN_TRAINER_SECONDS", "120")
        .set("STANDIN_PSERVER_SECONDS", "1");
    let done = pod.start().wait(LIMIT);
    assert_eq!(done.code(), 75, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "pserver exited with status 1 while the trainer was running",
    );
    assert_contains(&done.stdout, "[trainer-0] trainer received SIGTERM");
    assert_nothing_left(&pod.pids());
}

#[test]
fn trainer_starts_only_once_the_pserver_listens() {
    // The stand-in trainer connects once, without retrying: it succeeds only if the launcher
    // waited for the port (the old launcher slept a fixed 20 s instead).
    let pod = OnePod::new().set("STANDIN_PSERVER_DELAY", "1.5");
    let done = pod.start().wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stdout, "trainer 0 connected to 1 pserver endpoints");
}

#[test]
fn pserver_that_never_listens_is_reported_by_endpoint() {
    let pod = OnePod::new()
        .set("STANDIN_PSERVER_DELAY", "600")
        .set("PADDLE_LAUNCHER_PSERVER_TIMEOUT", "1");
    let port = pod
        .env
        .iter()
        .find(|(n, _)| *n == "CONF_PADDLE_PORT")
        .unwrap()
        .1
        .clone();
    let done = pod.start().wait(LIMIT);
    assert_eq!(done.code(), 74, "{}", done.stderr);
    assert_contains(&done.stderr, &format!("1 of 1 pserver endpoints never accepted a connection within 1 s (PADDLE_LAUNCHER_PSERVER_TIMEOUT): {}:{port}", pod.ip));
    assert_nothing_left(&pod.pids());
}

#[test]
fn missing_command_exits_127_and_names_it() {
    let pod = OnePod::new().set(
        "PADDLE_LAUNCHER_PSERVER_CMD",
        "paddle_pserver_main_missing --x",
    );
    let done = pod.start().wait(LIMIT);
    assert_eq!(done.code(), 127, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "cannot start the pserver-0 command `paddle_pserver_main_missing`: not found on PATH (",
    );
    // Not the system's "No such file or directory", which reads as if a directory were missing.
    assert!(!done.stderr.contains("No such file"), "{}", done.stderr);
}

#[test]
fn successful_trainer_leaves_the_pserver_serving_for_the_linger_time() {
    let pod = OnePod::new().set("PADDLE_LAUNCHER_LINGER", "2");
    let port = pod
        .env
        .iter()
        .find(|(n, _)| *n == "CONF_PADDLE_PORT")
        .unwrap()
        .1
        .clone();
    let launcher = pod.start();
    launcher.wait_for_output("the pserver keeps serving for 2 s", LIMIT);
    // The trainer is gone, the pserver still serves its peers.
    std::net::TcpStream::connect(format!("{}:{port}", pod.ip))
        .expect("the pserver stopped serving during the linger");
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let at = |line: &str| {
        done.stderr
            .find(line)
            .unwrap_or_else(|| panic!("no {line:?} in\n{}", done.stderr))
    };
    assert!(at("exited with status 0") < at("the pserver keeps serving"));
    assert!(
        at("the pserver keeps serving") < at("exited with status 143"),
        "the pserver was stopped before the linger"
    );
    assert_nothing_left(&pod.pids());
}

/// The README's first command, as a new user runs it (only the trainers' port is a free one
/// here): a whole 3-pod collective job on loopback, every trainer meeting its two peers.
#[test]
fn the_readmes_first_command_runs_a_whole_job() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(Path::new(root).join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("cargo run -- "))
        .expect("the README's first command");
    let mut args: Vec<String> = line["cargo run -- ".len()..]
        .split_whitespace()
        .map(|word| word.trim_matches('"').replace("$PWD", root))
        .collect();
    let end_of_options = args.iter().position(|a| a == "--").unwrap();
    let port = free_ports(1).to_string();
    args.splice(
        end_of_options..end_of_options,
        ["--trainer-port".to_string(), port],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let done = Launcher::start(dir.path(), "readme", &args, &[]).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    for rank in 0..3 {
        assert_contains(
            &done.stdout,
            &format!(
                "[trainer-{rank}] trainer {rank} of 3 at 127.0.0.{}",
                rank + 2
            ),
        );
    }
    assert_contains(&done.stdout, "met all 2 peers");
    assert_contains(&done.stderr, "all 3 simulated pods succeeded");
}

#[test]
fn local_mode_runs_a_whole_job_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_ports(1).to_string();
    let args = [
        "local",
        "--trainers",
        "3",
        "--job-name",
        "demo",
        "--port",
        &port,
        "--pserver-cmd",
        &format!("{} pserver", standin()),
        "--trainer-cmd",
        &format!("{} train", standin()),
        // Peers' trainers still connect to our pserver after our own trainer is done.
        "--linger",
        "3",
        "--",
        "--config=trainer_config.py",
    ];
    let done = Launcher::start(dir.path(), "local", &args, &[]).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    for rank in 0..3 {
        assert_contains(
            &done.stdout,
            &format!("[trainer-{rank}] trainer {rank} connected to 3 pserver endpoints"),
        );
        assert_contains(
            &done.stdout,
            &format!(
                "[pserver-{rank}] pserver listening on 127.0.0.{}:{port}",
                rank + 2
            ),
        );
    }
    assert_contains(&done.stderr, "all 3 simulated pods succeeded");
}

#[test]
fn local_mode_fails_with_the_first_failing_pod_and_stops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_ports(1).to_string();
    let args = [
        "local",
        "--trainers",
        "2",
        "--job-name",
        "fail",
        "--port",
        &port,
        "--pserver-cmd",
        &format!("{} pserver", standin()),
        "--trainer-cmd",
        &format!("{} train", standin()),
        "--",
        "--no_such_flag=1",
    ];
    let done = Launcher::start(dir.path(), "local", &args, &[]).wait(LIMIT);
    // The strict stand-in rejects the unknown flag with 2; the launcher passes that on.
    assert_eq!(done.code(), 2, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stderr, "unknown flag --no_such_flag");
}

/// Local mode sets each simulated pod's address, name, peers, size, selector, progress file and
/// log directory: given, one is refused with a clear line; `local --help` leaves them out (it
/// lists what a user may set), while `run --help` still lists them.
#[test]
fn local_mode_rejects_options_it_sets_itself() {
    let help = |sub: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_paddle-launcher"))
            .args([sub, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let (local, run) = (help("local"), help("run"));
    for flag in [
        "--pod-ip",
        "--pod-name",
        "--peers ",
        "--gradient-num",
        "--selector",
        "--progress-file",
        "--log-dir",
    ] {
        assert!(!local.contains(flag), "local --help lists {flag}:\n{local}");
        assert_contains(&run, flag);
    }
    assert_contains(&local, "--max-restarts");
    let dir = tempfile::tempdir().unwrap();
    let done = Launcher::start(
        dir.path(),
        "local",
        &[
            "local",
            "--trainers",
            "2",
            "--job-name",
            "x",
            "--pod-ip",
            "10.0.0.1",
        ],
        &[],
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "invalid POD_IP (--pod-ip): \"10.0.0.1\": expected nothing: local mode sets it",
    );
}

/// Leaves an orphan behind: the background child outlives the subshell that started it, so
/// it is reparented to the nearest subreaper or PID 1.
fn orphaning_trainer(dir: &Path) -> String {
    let body = "(sleep 0.3 &)\necho orphan started\nsleep 1.5\necho trainer done\n";
    script(dir, "orphaning-trainer", body)
}

#[test]
fn orphaned_grandchildren_are_reaped_by_the_launcher_as_subreaper() {
    let pod = OnePod::new().set("PADDLE_LAUNCHER_LOG", "debug");
    let trainer = orphaning_trainer(pod.dir.path());
    let done = pod
        .set("PADDLE_LAUNCHER_TRAINER_CMD", &trainer)
        .start()
        .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(&done.stdout, "[trainer-0] trainer done");
    assert!(
        done.stderr.contains("reaped orphan pid"),
        "the orphan did not come to the launcher:\n{}",
        done.stderr
    );
}

#[test]
fn as_pid_1_in_a_fresh_pid_namespace_orphans_are_reaped_and_the_status_passes_through() {
    let pod = OnePod::new()
        .set("PADDLE_LAUNCHER_LOG", "debug")
        .set("STANDIN_TRAINER_EXIT", "0");
    let trainer = orphaning_trainer(pod.dir.path());
    let pod = pod.set("PADDLE_LAUNCHER_TRAINER_CMD", &trainer);
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", support::LAUNCHER, "run"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PADDLE_LAUNCHER_TERMINATION_LOG", "")
        .env("PADDLE_LAUNCHER_ID_DIR", "")
        .envs(pod.env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("unshare (util-linux) is needed; the tests run as root");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("starting as pid 1\n"), "{stderr}");
    assert!(
        !stderr.contains("cannot become a child subreaper"),
        "{stderr}"
    );
    assert!(
        stderr.contains("reaped orphan pid"),
        "PID 1 did not reap the orphan:\n{stderr}"
    );
}

/// The trainer's log on a filesystem that stalls (here a FIFO nobody reads, whose open blocks
/// as a hung NFS mount's would): the launcher still answers signals at once, and the trainer
/// still runs, because the log is opened off the thread that handles signals and heartbeats.
#[test]
fn a_log_file_that_blocks_on_open_stalls_nothing() {
    let pod = OnePod::new().set("STANDIN_TRAINER_SECONDS", "120");
    let job_path = pod.dir.path().join("jobs");
    let node = job_path.join("sup/output/node_0");
    std::fs::create_dir_all(&node).unwrap();
    let fifo = node.join("train.log");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let pod = pod.set("JOB_PATH", &job_path.display().to_string());
    let launcher = pod.start();
    launcher.wait_for_output("connected to 1 pserver endpoints", LIMIT);
    launcher.signal(Signal::SIGTERM);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert_contains(&done.stdout, "[trainer-0] trainer received SIGTERM");
    assert_nothing_left(&pod.pids());
}

/// A Python trainer that makes progress for a while, then blocks with a second thread alive.
/// `HANG_AFTER` lines (or progress-file writes, with `BY_FILE`), 0.2 s apart; then it waits for
/// ever in `wait_for_ever` while a thread sleeps in `background`, or, with `CHATTER`, prints
/// every 0.2 s from that thread (output that must not count once the file is in use).
const STUCK_TRAINER: &str = r#"
import os, sys, threading, time
def background():
    while True:
        if os.environ.get("CHATTER"):
            print("chatter", flush=True)
        time.sleep(0.2)
threading.Thread(target=background, daemon=True).start()
for step in range(int(os.environ["HANG_AFTER"])):
    if os.environ.get("BY_FILE"):
        with open(os.environ["PADDLE_LAUNCHER_PROGRESS_FILE"], "w") as f:
            f.write(f"{step}\n")
    else:
        print(f"step {step}", flush=True)
    time.sleep(0.2)
def wait_for_ever():
    threading.Event().wait()
if os.environ.get("FINISH"):
    sys.exit(0)
wait_for_ever()
"#;

fn stuck_trainer(extra: &[(&'static str, &str)]) -> (OnePod, Launcher) {
    let mut pod = OnePod::new()
        .set("PADDLE_LAUNCHER_PROTOCOL", "collective")
        .set("PADDLE_LAUNCHER_TRAINER_PORT", &free_ports(1).to_string())
        .set("PADDLE_LAUNCHER_WORKDIR", "work")
        .set("PADDLE_LAUNCHER_HANG_TIMEOUT", "2")
        .set("PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "3");
    for (name, value) in extra {
        pod = pod.set(name, value);
    }
    let args = ["run", "--", "python3", "-c", STUCK_TRAINER];
    let launcher = Launcher::start(pod.dir.path(), &pod.ip, &args, &pod.env);
    (pod, launcher)
}

/// A trainer that stops progressing is found within the hang timeout (and a check), its
/// threads' stacks are in its log (Python's faulthandler, registered on SIGUSR2 by the
/// launcher's sitecustomize: the program is unchanged), and the pod ends with the hang status,
/// 80, naming the trainer and the limit.
#[test]
fn a_hung_trainer_is_found_its_stacks_are_logged_and_the_pod_exits_80() {
    let (_pod, launcher) = stuck_trainer(&[("HANG_AFTER", "5")]);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 80, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stderr, "trainer-0 made no progress for ");
    assert_contains(
        &done.stderr,
        "(PADDLE_LAUNCHER_HANG_TIMEOUT (--hang-timeout) = 2 s): nothing new from output",
    );
    // Every thread's stack, with the function each is stuck in.
    assert_contains(&done.stderr, "(most recent call first):");
    assert_contains(&done.stderr, "in wait_for_ever");
    assert_contains(&done.stderr, "in background");
}

/// Once the trainer writes its progress file, only the file counts: a thread that keeps
/// printing does not hide a stuck training loop. Without writes, output keeps a trainer alive,
/// and one that finishes is never judged.
#[test]
fn once_the_progress_file_is_written_output_no_longer_counts() {
    let (_pod, launcher) =
        stuck_trainer(&[("HANG_AFTER", "5"), ("BY_FILE", "1"), ("CHATTER", "1")]);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 80, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stderr, "nothing new from its progress file");
    // Progress every 0.2 s for 4 s, past the first window and twice the timeout, then
    // success: never judged hung.
    let (_pod, launcher) = stuck_trainer(&[("HANG_AFTER", "20"), ("FINISH", "1")]);
    let done = launcher.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    assert!(!done.stderr.contains("made no progress"), "{}", done.stderr);
}

/// Bad values of the hang options are refused at the start, one line, status 2.
#[test]
fn bad_hang_settings_are_refused_before_anything_starts() {
    for (name, value, expected) in [
        ("PADDLE_LAUNCHER_HANG_TIMEOUT", "-1", "invalid PADDLE_LAUNCHER_HANG_TIMEOUT (--hang-timeout): \"-1\""),
        ("PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "0", "invalid PADDLE_LAUNCHER_HANG_FIRST_WINDOW (--hang-first-window): \"0\""),
        ("PADDLE_LAUNCHER_PROGRESS_FILE", "/proc/no/such/progress", "invalid PADDLE_LAUNCHER_PROGRESS_FILE (--progress-file): \"/proc/no/such/progress\": expected a file the launcher can create"),
    ] {
        let pod = OnePod::new()
            .set("PADDLE_LAUNCHER_HANG_TIMEOUT", "600")
            .set(name, value);
        let done = pod.start().wait(LIMIT);
        assert_eq!(done.code(), 2, "{name}={value}: {}", done.stderr);
        assert_contains(&done.stderr, expected);
        assert!(!done.stdout.contains("[pserver-0]"), "{}", done.stdout);
    }
    // With hang detection off, the progress file is never touched: a path that could not be
    // created is no error.
    let pod = OnePod::new().set("PADDLE_LAUNCHER_PROGRESS_FILE", "/proc/no/such/progress");
    let done = pod.start().wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
}

/// A progress bar redrawn with `\r` (no newline for a whole epoch) is output: never judged hung.
#[test]
fn a_progress_bar_without_newlines_is_progress() {
    const BAR: &str = r#"
import sys, time
print("epoch 1", flush=True)
for i in range(30):
    sys.stdout.write(f"\r{i}/30")
    sys.stdout.flush()
    time.sleep(0.1)
print(flush=True)
"#;
    let pod = OnePod::new()
        .set("PADDLE_LAUNCHER_PROTOCOL", "collective")
        .set("PADDLE_LAUNCHER_TRAINER_PORT", &free_ports(1).to_string())
        .set("PADDLE_LAUNCHER_WORKDIR", "work")
        .set("PADDLE_LAUNCHER_HANG_TIMEOUT", "1")
        .set("PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "1");
    let args = ["run", "--", "python3", "-c", BAR];
    let done = Launcher::start(pod.dir.path(), &pod.ip, &args, &pod.env).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
}

/// A trainer under `sh -c` (as ENTRY runs): the shell dies of the stack signal while the stuck
/// program dumps its stacks and goes on in the same process group; the program is still
/// stopped, not left running, and the pod ends with 80.
#[test]
fn a_hung_program_under_a_shell_is_stopped_with_its_group() {
    let (pod, _) = (OnePod::new(), ());
    let pid_file = pod.dir.path().join("program.pid");
    let pod = pod
        .set("PADDLE_LAUNCHER_PROTOCOL", "collective")
        .set("PADDLE_LAUNCHER_TRAINER_PORT", &free_ports(1).to_string())
        .set("PADDLE_LAUNCHER_WORKDIR", "work")
        .set("PADDLE_LAUNCHER_HANG_TIMEOUT", "2")
        .set("PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "3")
        .set("HANG_AFTER", "3")
        .set("STUCK", STUCK_TRAINER)
        .set("PID_FILE", pid_file.to_str().unwrap());
    let script = r#"python3 -c 'import os; open(os.environ["PID_FILE"], "w").write(str(os.getpid())); exec(os.environ["STUCK"])'; echo after"#;
    let args = ["run", "--", "sh", "-c", script];
    let done = Launcher::start(pod.dir.path(), &pod.ip, &args, &pod.env).wait(LIMIT);
    assert_eq!(done.code(), 80, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stderr, "in wait_for_ever");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the stuck program (pid {pid}) outlived its launcher"
    );
}
