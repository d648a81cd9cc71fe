//! Child processes as PID 1 would keep them: one owner of `waitpid` that reaps every zombie
//! (orphans included), signals forwarded to whole process groups, SIGKILL after a grace period,
//! and exit statuses computed in one place.

mod output;
use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::{sleep_until, Instant};
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::exit::{is_stop_signal, signal_name, Ended};
use crate::loss::Loss;

/// Never passed on to a child.
const JOB_SECRET_VARIABLE: &str = "PADDLE_LAUNCHER_JOB_SECRET";

/// The launcher's own settings' prefix: kept from its children.
const LAUNCHER_PREFIX: &str = "PADDLE_LAUNCHER_";
/// How often `stop` looks whether a group is empty when no SIGCHLD tells.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// Every signal the launcher receives and forwards to its children's process groups, as tini
/// does: PID 1 gets only the signals it installs handlers for, so a signal left out here would
/// be silently dropped (a custom STOPSIGNAL, SIGWINCH, SIGPWR, real-time signals).
/// Not among them, each for its reason:
/// - SIGKILL, SIGSTOP: cannot be caught.
/// - SIGCHLD: the launcher's own, for reaping.
/// - SIGILL, SIGFPE, SIGSEGV, SIGBUS, SIGTRAP, SIGABRT, SIGSYS: raised by a fault of the
///   launcher itself; its default action (a core, a crash) is the honest answer.
/// - SIGPIPE: ignored, as in every Rust program: a closed log pipe must not reach the children.
/// - SIGTTIN, SIGTTOU: terminal job control of the launcher's own process group (tini too).
pub fn forwarded_signals() -> Vec<i32> {
    use nix::libc::*;
    let mut signals = vec![
        SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGSTKFLT, SIGCONT, SIGTSTP,
        SIGURG, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGWINCH, SIGIO, SIGPWR,
    ];
    signals.extend(SIGRTMIN()..=SIGRTMAX());
    signals
}

pub struct Signals {
    streams: Vec<(i32, tokio::signal::unix::Signal)>,
    child: tokio::signal::unix::Signal,
}

impl Signals {
    /// Install before spawning anything, so that no SIGCHLD or SIGTERM can be missed.
    pub fn install() -> io::Result<Self> {
        let mut streams = Vec::new();
        for sig in forwarded_signals() {
            streams.push((sig, signal(SignalKind::from_raw(sig))?));
        }
        Ok(Signals {
            streams,
            child: signal(SignalKind::child())?,
        })
    }
}

async fn next_of(streams: &mut [(i32, tokio::signal::unix::Signal)]) -> i32 {
    let waits = streams.iter_mut().map(|(sig, stream)| {
        let sig = *sig;
        Box::pin(async move {
            stream.recv().await;
            sig
        })
    });
    futures::future::select_all(waits).await.0
}

pub struct SpawnSpec<'a> {
    pub label: String,
    pub argv: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub cwd: &'a Path,
    pub output: Output,
    /// Variables of the launcher's environment it does not get.
    pub unset: &'a [String],
    /// A launcher of `local`'s simulated pods: it keeps the settings (PADDLE_LAUNCHER_*) this
    /// launcher was given through its environment. A training program does not.
    pub inherits_settings: bool,
}

struct Child {
    label: String,
    pid: Pid,
    ended: Option<Ended>,
    /// Every process of its group has ended (seen as ESRCH): the group id may be reused by an
    /// unrelated process, so it is never signalled again.
    group_gone: bool,
    /// When its output was last seen (by the pump threads).
    output: OutputClock,
}

pub enum Event {
    /// A signal number (real-time signals have no `nix` name).
    Signal(i32),
    Exited {
        child: usize,
        ended: Ended,
    },
    /// A peer pod of the job was lost, or the job's loss was told; reported once.
    PeerLost(Loss),
    /// Every trainer of the job is done (the reason), or it can no longer be known (why);
    /// reported once.
    JobDone(Result<String, String>),
}

/// The longest line written whole (1 MiB: a JSON record, a tensor printed in full); a longer
/// one is written in pieces of this size, each whole, the ones after the first marked as its
/// continuation, so that neither memory nor the log waits for its end.
const MAX_LINE: usize = 1024 * 1024;

pub struct Supervisor {
    signals: Signals,
    peer_loss: Option<BoxFuture<'static, Loss>>,
    job_done: Option<BoxFuture<'static, Result<String, String>>>,
    children: Vec<Child>,
    pending: VecDeque<Event>,
    pumps: Vec<mpsc::Receiver<()>>,
    pub grace: Duration,
}

/// The child's environment: the launcher's, less its own settings and the variables the spec
/// unsets, plus the spec's. The children get the contract (Paddle's variables, the restart
/// count, the progress file: in `spec.env`), not the launcher's own configuration: a program
/// that read PADDLE_LAUNCHER_* would depend on how its launcher was set up. The job secret
/// above all authenticates the launchers only: a program (or its crash handler, or an
/// experiment tracker) that dumps its environment would print it. Only `local` gives it on
/// purpose, in `spec.env`, to the launchers of its simulated pods.
fn environment(command: &mut Command, spec: &SpawnSpec<'_>) {
    for (name, _) in std::env::vars_os().filter(|_| !spec.inherits_settings) {
        if name.to_string_lossy().starts_with(LAUNCHER_PREFIX) {
            command.env_remove(name);
        }
    }
    for name in spec.unset {
        command.env_remove(name);
    }
    command.env_remove(JOB_SECRET_VARIABLE).envs(spec.env);
}

impl Supervisor {
    pub fn new(signals: Signals, grace: Duration) -> Self {
        // Orphans of our children must come to us to be reaped even when we are not PID 1
        // (e.g. shareProcessNamespace, or local mode).
        if nix::unistd::getpid().as_raw() != 1 {
            if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
                warn!("cannot become a child subreaper ({e}); orphans may stay zombies");
            }
        }
        Supervisor {
            signals,
            peer_loss: None,
            job_done: None,
            children: Vec::new(),
            pending: VecDeque::new(),
            pumps: Vec::new(),
            grace,
        }
    }

    /// From now on, `next_event` also reports when every trainer of the job is done.
    pub fn end_when(&mut self, job_done: BoxFuture<'static, Result<String, String>>) {
        self.job_done = Some(job_done);
    }

    /// Forgets the watches of an attempt that ended: the next one brings its own.
    pub fn forget_watches(&mut self) {
        self.peer_loss = None;
        self.job_done = None;
        // What they reported and a wait kept is that attempt's news too.
        self.pending
            .retain(|event| !matches!(event, Event::PeerLost(_) | Event::JobDone(_)));
    }

    /// Events taken by a wait that was not about them, reported again first, in their order.
    pub fn requeue(&mut self, events: Vec<Event>) {
        for event in events.into_iter().rev() {
            self.pending.push_front(event);
        }
    }

    /// From now on, `next_event` also reports the first lost peer.
    pub fn watch_peers(&mut self, first_loss: BoxFuture<'static, Loss>) {
        self.peer_loss = Some(first_loss);
    }

    /// Starts a process in its own process group (so a signal reaches its whole tree), without
    /// a shell. A missing or non-executable command becomes 127 / 126, as in a shell.
    pub fn spawn(&mut self, spec: SpawnSpec<'_>) -> Result<usize, Error> {
        let mut command = Command::new(&spec.argv[0]);
        command.args(&spec.argv[1..]);
        environment(&mut command, &spec);
        command
            .current_dir(spec.cwd)
            .stdin(Stdio::null())
            .process_group(0);
        // Children never outlive their launcher, even when it is SIGKILLed and is not PID 1
        // (local mode, a wrapper entrypoint). The death signal follows the *thread* that
        // forked: every spawn happens on the runtime's one thread, which lives as long as the
        // launcher. A launcher that died between fork and prctl is caught by the ppid check.
        let launcher = std::process::id() as i32;
        // SAFETY: only async-signal-safe system calls run between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if nix::libc::getppid() != launcher {
                    nix::libc::_exit(1);
                }
                Ok(())
            });
        }
        let prefixed = matches!(spec.output, Output::Prefixed { .. });
        if prefixed {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mut child = command.spawn().map_err(|source| {
            let path = spec
                .env
                .get("PATH")
                .cloned()
                .or_else(|| std::env::var("PATH").ok());
            Error::Spawn {
                label: spec.label.clone(),
                command: spec.argv[0].clone(),
                why: crate::error::spawn_failure(&spec.argv[0], spec.cwd, path.as_deref(), &source),
                source,
            }
        })?;
        let pid = Pid::from_raw(child.id() as i32);
        let process = spec.label.as_str();
        info!(
            process,
            pid = pid.as_raw(),
            "started {process} (pid {pid}): {}",
            quoted(spec.argv)
        );
        let output = OutputClock::new();
        if let Output::Prefixed { log } = spec.output {
            // Opened by the pumps, off the runtime thread: the log is often on a shared
            // filesystem, and a stalled mount must not stop the heartbeats.
            let (finished, written) = mpsc::channel();
            self.pumps.push(written);
            let file = Arc::new(LogFile::start(log, &spec.label, finished));
            let seen = output.clone();
            if let Some(out) = child.stdout.take() {
                self.pump(out, &spec.label, file.clone(), seen.clone(), false);
            }
            if let Some(err) = child.stderr.take() {
                self.pump(err, &spec.label, file, seen, true);
            }
        }
        self.children.push(Child {
            label: spec.label,
            pid,
            ended: None,
            group_gone: false,
            output,
        });
        Ok(self.children.len() - 1)
    }

    /// When the child's output was last seen, as it goes on (never, for output not pumped).
    pub fn output_clock(&self, child: usize) -> OutputClock {
        self.children[child].output.clone()
    }

    /// Copies a pipe line by line (bytes, not UTF-8: programs print what they like) to our
    /// stdout/stderr with a prefix, and to the log file.
    fn pump(
        &mut self,
        pipe: impl Read + Send + 'static,
        label: &str,
        file: Arc<LogFile>,
        seen: OutputClock,
        to_stderr: bool,
    ) {
        let prefix = format!("[{label}] ");
        let (done, finished) = mpsc::channel();
        self.pumps.push(finished);
        let continued_prefix = format!("[{label}+] ");
        std::thread::spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut line = Vec::new();
            // The last piece written did not end its line: the next one continues it.
            let mut continues = false;
            while read_line_noting_output(&mut reader, &mut line, &seen) {
                // A line per piece, in the container's output marked as a continuation. The
                // process's log file too (its stdout and stderr share it): a piece ended by a
                // newline never has the other stream's output spliced into it.
                let ends = line.ends_with(b"\n");
                if !ends {
                    line.push(b'\n');
                }
                file.write_all(&line);
                let mark = if continues {
                    &continued_prefix
                } else {
                    &prefix
                };
                continues = !ends;
                let mut framed = mark.as_bytes().to_vec();
                framed.extend_from_slice(&line);
                // A closed stdout must not stop the log file (nor the child): ignore write errors.
                let _ = if to_stderr {
                    io::stderr().lock().write_all(&framed)
                } else {
                    io::stdout().lock().write_all(&framed)
                };
                line.clear();
            }
            let _ = done.send(());
        });
    }

    pub fn label(&self, child: usize) -> &str {
        &self.children[child].label
    }

    /// Whether any process of the child's group may still be alive (the child itself, or what
    /// it started: the program under `sh -c ENTRY`, daemons).
    fn group_alive(&mut self, child: usize) -> bool {
        let c = &mut self.children[child];
        if !c.group_gone && c.ended.is_some() {
            // Zombies still count: the reaper runs before each check.
            c.group_gone = kill(Pid::from_raw(-c.pid.as_raw()), None) == Err(Errno::ESRCH);
        }
        !c.group_gone
    }

    /// Sends `sig` to the process group of each given child whose group is still there.
    pub fn signal(&mut self, children: &[usize], sig: i32) {
        for &i in children {
            if !self.group_alive(i) {
                continue;
            }
            let c = &mut self.children[i];
            debug!(
                "sending {} to {} (process group {})",
                signal_name(sig),
                c.label,
                c.pid
            );
            // SAFETY: kill(2) has no memory effects; a raw number reaches real-time signals too.
            let sent = unsafe { nix::libc::kill(-c.pid.as_raw(), sig) };
            if sent != 0 && Errno::last() == Errno::ESRCH {
                c.group_gone = true;
            }
        }
    }

    /// Sends `sig` to every process of the given children's groups that handles it, and only
    /// to those: a signal such as SIGUSR1 kills a process that does not (a shell wrapper, a
    /// data loader's worker). How many were sent it.
    pub fn signal_handlers(&mut self, children: &[usize], sig: i32) -> usize {
        let mut sent = 0;
        for &i in children {
            if !self.group_alive(i) {
                continue;
            }
            let group = self.children[i].pid.as_raw();
            for pid in handlers_in_group(group, sig) {
                if signal_if_handled(pid, group, sig) {
                    debug!("sent {} to process {pid} (group {group})", signal_name(sig));
                    sent += 1;
                }
            }
        }
        sent
    }

    pub fn forward(&mut self, sig: i32) {
        let all: Vec<usize> = (0..self.children.len()).collect();
        let alive: Vec<usize> = all.into_iter().filter(|&i| self.group_alive(i)).collect();
        if !alive.is_empty() {
            let names: Vec<&str> = alive
                .iter()
                .map(|&i| self.children[i].label.as_str())
                .collect();
            info!("forwarding {} to {}", signal_name(sig), names.join(", "));
        }
        self.signal(&alive, sig);
    }

    /// Reaps every exited process, ours or orphaned, until none is left to reap: SIGCHLDs
    /// coalesce, so one wait per signal would leave zombies behind.
    fn reap(&mut self) {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => self.record(pid, Ended::Code(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => {
                    self.record(pid, Ended::Signal(sig as i32))
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Ok(_) => continue,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    warn!("waitpid failed: {e}");
                    return;
                }
            }
        }
    }

    fn record(&mut self, pid: Pid, ended: Ended) {
        match self.children.iter().position(|c| c.pid == pid) {
            Some(i) => {
                let (process, status) = (self.children[i].label.as_str(), ended.exit_code());
                info!(
                    process,
                    status,
                    "{process} (pid {pid}) {}",
                    ended.describe()
                );
                self.children[i].ended = Some(ended);
                self.pending.push_back(Event::Exited { child: i, ended });
            }
            None => debug!("reaped orphan pid {pid} ({})", ended.describe()),
        }
    }

    /// The next signal, child exit or lost peer.
    pub async fn next_event(&mut self) -> Event {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return event;
            }
            let Signals { streams, child } = &mut self.signals;
            let lost = or_never(self.peer_loss.as_mut());
            let done = or_never(self.job_done.as_mut());
            let event = tokio::select! {
                sig = next_of(streams) => Some(Event::Signal(sig)),
                loss = lost => {
                    self.peer_loss = None;
                    Some(Event::PeerLost(loss))
                }
                reason = done => {
                    self.job_done = None;
                    Some(Event::JobDone(reason))
                }
                _ = child.recv() => None,
            };
            match event {
                Some(event) => return event,
                None => self.reap(),
            }
        }
    }

    /// Stops the given children: `sig` to their process groups, SIGKILL when the grace period
    /// is over. Returns once every process of those groups is gone, not only the group leader:
    /// the program under `sh -c ENTRY` gets its grace period too. Exit events seen meanwhile
    /// stay queued; other signals received meanwhile are forwarded.
    pub async fn stop(&mut self, children: &[usize], sig: i32) {
        let stopping: Vec<usize> = children
            .iter()
            .copied()
            .filter(|&i| self.group_alive(i))
            .collect();
        if stopping.is_empty() {
            return;
        }
        let names: Vec<&str> = stopping
            .iter()
            .map(|&i| self.children[i].label.as_str())
            .collect();
        info!(
            "stopping {} with {} (SIGKILL after {} s)",
            names.join(", "),
            signal_name(sig),
            self.grace.as_secs()
        );
        self.signal(&stopping, sig);
        let deadline = Instant::now() + self.grace;
        let mut killed = false;
        loop {
            self.reap();
            if !stopping.iter().any(|&i| self.group_alive(i)) {
                return;
            }
            let Signals { streams, child } = &mut self.signals;
            let kill_now = tokio::select! {
                _ = child.recv() => false,
                // A group member whose parent is still alive is not ours to reap: no SIGCHLD.
                _ = tokio::time::sleep(GROUP_POLL) => false,
                // A second stop signal from outside means "now": do not wait for the grace period.
                sig = next_of(streams) => {
                    if !is_stop_signal(sig) {
                        self.forward(sig);
                    } else {
                        // Also seen by whatever waits next: a stop for a restart must not
                        // swallow the signal that ends the pod.
                        self.pending.push_back(Event::Signal(sig));
                    }
                    is_stop_signal(sig)
                }
                _ = sleep_until(deadline), if !killed => {
                    warn!("grace period of {} s over: sending SIGKILL", self.grace.as_secs());
                    true
                }
            };
            if kill_now && !killed {
                self.signal(&stopping, nix::libc::SIGKILL);
                killed = true;
            }
        }
    }

    /// Kills what is left of every child's process group (daemons a child left behind) and
    /// waits briefly for the output pumps, so the last lines reach the logs.
    pub fn finish(&mut self) {
        self.reap();
        let all: Vec<usize> = (0..self.children.len()).collect();
        self.signal(&all, nix::libc::SIGKILL);
        self.reap();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        for pump in self.pumps.drain(..) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let _ = pump.recv_timeout(left);
        }
    }
}

/// The future's output, or never when there is none (a `select!` arm that may be absent).
pub async fn or_never<F: std::future::Future + Unpin>(future: Option<&mut F>) -> F::Output {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// Lines a log file may fall behind the console by before they are dropped from the file.
const LOG_BACKLOG: usize = 4096;
/// Bytes it may fall behind by (lines may be up to `MAX_LINE` long): PID 1's memory is bounded
/// by this for each process, not by 4,096 lines of a mebibyte.
const LOG_BACKLOG_BYTES: usize = 64 * 1024 * 1024;

/// What a child's log file is sent: its lines, and where lines had to be left out.
enum LogItem {
    Line(Vec<u8>),
    Gap(u64),
}

fn open_log(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Appending keeps the logs of an earlier attempt when Kubernetes restarts the pod.
    OpenOptions::new().create(true).append(true).open(path)
}

/// The processes of group `group` that handle `sig` (its bit in `SigCgt` of
/// /proc/<pid>/status), read from /proc: a pod's few processes, on a filesystem in memory.
pub fn handlers_in_group(group: i32, sig: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if group_of(pid) == Some(group) && catches(pid, sig) {
            found.push(pid);
        }
    }
    found.sort_unstable();
    found
}

/// Sends `sig` to `pid` if it is still the process of `group` that handles it. The process is
/// pinned by a pidfd before it is checked again: a process found handling the signal could
/// otherwise exit and its pid go to another between the check and the kill, which the signal
/// would kill. Where pidfds are refused (a kernel before 5.3, a seccomp profile), the check
/// and a plain kill.
fn signal_if_handled(pid: i32, group: i32, sig: i32) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let still_handles = || group_of(pid) == Some(group) && catches(pid, sig);
    // SAFETY: pidfd_open(2) reads no memory; it returns a new descriptor or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return match Errno::last() {
            Errno::ESRCH => false,
            // SAFETY: kill(2) has no memory effects.
            _ => still_handles() && unsafe { nix::libc::kill(pid, sig) } == 0,
        };
    }
    // SAFETY: the descriptor was just returned by pidfd_open and is owned by no one else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // Checked with the process pinned: if /proc/<pid> is another process now, the pinned one
    // has ended and the send below fails (ESRCH).
    if !still_handles() {
        return false;
    }
    // SAFETY: pidfd_send_signal(2) with no siginfo reads no memory of ours.
    let sent = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<nix::libc::siginfo_t>(),
            0,
        )
    };
    match (sent, Errno::last()) {
        (0, _) => true,
        // Allowed to open a pidfd but not to signal through it (a seccomp profile): checked
        // once more, then the plain kill.
        // SAFETY: kill(2) has no memory effects.
        (_, Errno::ENOSYS | Errno::EPERM) => {
            still_handles() && (unsafe { nix::libc::kill(pid, sig) }) == 0
        }
        _ => false,
    }
}

/// The process group of `pid`: the fifth field of /proc/<pid>/stat, counted after the command
/// name's closing parenthesis (the name may hold spaces and parentheses).
fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(2)?.parse().ok()
}

/// Whether `pid` has a handler for `sig`.
fn catches(pid: i32, sig: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    matches!(mask, Some(mask) if (1..=64).contains(&sig) && mask & (1 << (sig - 1)) != 0)
}

/// The tests whose supervisor reaps (`waitpid(-1)`) or that spawn children run one at a time:
/// one test's supervisor would reap another test's child, which then never ends for it.
#[cfg(test)]
pub(crate) static REAPING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
pub use output::{quoted, write_termination_message, Output, OutputClock};
use output::{read_line_noting_output, LogFile};

#[cfg(test)]
mod tests {
    use super::output::{queue_line, quoted, write_log, Output};
    use super::*;
    use std::io::BufRead;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// Only the processes of the group that handle the signal are found: a Python trainer
    /// with a handler, not the process it started (which the signal would kill).
    #[test]
    fn handlers_are_found_by_their_signal_mask_in_the_group() {
        let _reaping = REAPING.blocking_lock();
        let mut python = Command::new("python3")
            .args([
                "-c",
                "import signal, subprocess, time\n\
                 signal.signal(signal.SIGUSR1, lambda *a: None)\n\
                 child = subprocess.Popen(['sleep', '30'])\n\
                 print(child.pid, flush=True)\n\
                 time.sleep(30)",
            ])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(python.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let sleeper: i32 = line.trim().parse().unwrap();
        let group = python.id() as i32;
        let found = handlers_in_group(group, nix::libc::SIGUSR1);
        let none = handlers_in_group(group, nix::libc::SIGUSR2);
        // Sent to the handler only: not to the sleeper, nor to a process of another group.
        let usr1 = nix::libc::SIGUSR1;
        let to_sleeper = signal_if_handled(sleeper, group, usr1);
        let to_python = signal_if_handled(group, group, usr1);
        let to_another_group = signal_if_handled(std::process::id() as i32, group, usr1);
        std::thread::sleep(Duration::from_millis(100));
        let sleeper_alive = kill(Pid::from_raw(sleeper), None).is_ok();
        let python_alive = python.try_wait().unwrap().is_none();
        // SAFETY: kill(2) has no memory effects.
        unsafe { nix::libc::kill(-group, nix::libc::SIGKILL) };
        let _ = python.wait();
        assert_eq!(found, vec![group], "the sleeper {sleeper} has no handler");
        assert!(none.is_empty(), "{none:?}");
        assert_eq!(
            (to_sleeper, to_python, to_another_group),
            (false, true, false)
        );
        assert!(sleeper_alive && python_alive);
    }

    #[test]
    fn an_argv_is_logged_on_one_line_with_odd_arguments_quoted() {
        let argv: Vec<String> = ["sh", "-c", "cd /data\npython train.py --lr 0.1", "--x=1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            quoted(&argv),
            r#"sh -c "cd /data\npython train.py --lr 0.1" --x=1"#
        );
    }

    /// Lines left out of a log file that fell behind are marked where they are missing, and
    /// every queued line is written before the writer ends.
    #[test]
    fn a_log_file_marks_the_lines_it_left_out_where_they_are_missing() {
        let (items, queued) = mpsc::sync_channel(2);
        let (left_out, bytes) = (AtomicU64::new(0), AtomicUsize::new(0));
        for line in ["one\n", "two\n", "three\n", "four\n"] {
            queue_line(&items, &bytes, &left_out, line.as_bytes());
        }
        // "three" and "four" found the queue full; the writer catches up, then "five" comes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.log");
        let mut file = io::BufWriter::new(open_log(&path).unwrap());
        for _ in 0..2 {
            if let Ok(LogItem::Line(line)) = queued.try_recv() {
                bytes.fetch_sub(line.len(), Ordering::Relaxed);
                file.write_all(&line).unwrap();
            }
        }
        assert!(queue_line(&items, &bytes, &left_out, b"five\n"));
        drop(items);
        write_log(file, &queued, &bytes, "trainer-0");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "one\ntwo\n[paddle-launcher: 2 lines of trainer-0 output left out here: this file fell behind]\nfive\n"
        );
        assert_eq!(bytes.load(Ordering::Relaxed), 0);
    }

    /// A log file's backlog is bounded in bytes too (lines may be a mebibyte): a line that
    /// would pass the bound is left out, and marked where it is missing.
    #[test]
    fn a_log_files_backlog_is_bounded_in_bytes() {
        let (items, queued) = mpsc::sync_channel(8);
        let (left_out, bytes) = (AtomicU64::new(0), AtomicUsize::new(0));
        let almost = vec![b'x'; LOG_BACKLOG_BYTES - 10];
        assert!(queue_line(&items, &bytes, &left_out, &almost));
        assert!(!queue_line(
            &items,
            &bytes,
            &left_out,
            b"too much for the bound\n"
        ));
        assert!(queue_line(&items, &bytes, &left_out, b"fits\n"));
        drop(items);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.log");
        let file = io::BufWriter::new(open_log(&path).unwrap());
        write_log(file, &queued, &bytes, "trainer-0");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("[paddle-launcher: 1 lines of trainer-0 output left out here: this file fell behind]\nfits\n"), "{}", &text[text.len() - 200..]);
        assert_eq!(bytes.load(Ordering::Relaxed), 0);
    }

    /// Once a child's whole group has ended, its group id may belong to someone else: it is
    /// never signalled again (in local mode, pids are reused quickly).
    #[tokio::test(flavor = "current_thread")]
    async fn a_group_that_has_ended_is_never_signalled_again() {
        let _reaping = REAPING.lock().await;
        let mut sup = Supervisor::new(Signals::install().unwrap(), Duration::from_secs(1));
        let env = BTreeMap::new();
        let argv = ["true".to_string()];
        let spec = SpawnSpec {
            label: "short".into(),
            argv: &argv,
            env: &env,
            cwd: Path::new("."),
            output: Output::Inherit,
            unset: &[],
            inherits_settings: false,
        };
        let child = sup.spawn(spec).unwrap();
        let exited = async { while !matches!(sup.next_event().await, Event::Exited { .. }) {} };
        tokio::time::timeout(Duration::from_secs(30), exited)
            .await
            .expect("`true` exits at once");
        assert!(!sup.group_alive(child));
        assert!(sup.children[child].group_gone);
        // Nothing is sent, whatever process now has that number.
        sup.signal(&[child], nix::libc::SIGKILL);
        sup.finish();
    }
}
