//! Every exit status the launcher itself chooses, in one place (the README's table mirrors it).
//! Statuses of the trainer pass through unchanged, so these avoid the common 1/2/3 and the
//! 128+signal range.

/// A process status the launcher ends with, plus the one-line reason that goes to the log and
/// to the Kubernetes termination message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub code: i32,
    pub reason: String,
}

impl Outcome {
    pub fn new(code: i32, reason: impl Into<String>) -> Self {
        Outcome {
            code,
            reason: reason.into(),
        }
    }
}

/// Everything went well: the trainer exited 0.
pub const SUCCESS: i32 = 0;
/// An unexpected local failure (pipes, files, runtime) that is not the user's input.
pub const INTERNAL: i32 = 1;
/// An invalid flag or environment variable; nothing was contacted or started.
pub const INVALID_CONFIG: i32 = 2;
/// The expected pods were not all Running within the wait timeout (an API server that never
/// answered is SOURCE_UNUSABLE instead).
pub const PEERS_TIMEOUT: i32 = 71;
/// The Kubernetes API refused us (401/403): the pod's service account lacks pods get/list/watch.
pub const FORBIDDEN: i32 = 72;
/// The membership cannot give this pod a rank: duplicate IPs, own IP or name not among the pods.
pub const MEMBERSHIP: i32 = 73;
/// Some pserver endpoint of the job never accepted a TCP connection within its timeout.
pub const PSERVERS_NOT_READY: i32 = 74;
/// This pod's pserver exited while the trainer still needed it.
pub const PSERVER_DIED: i32 = 75;
/// No Kubernetes client configuration was found (no kubeconfig, not in a pod) and no --peers.
pub const NO_CLUSTER: i32 = 76;
/// More trainer pods of the job have Failed than --max-failed-trainers allows.
pub const TOO_MANY_FAILURES: i32 = 77;
/// A peer pod was lost after the launch (deleted, Failed, terminating, new IP): the children
/// were stopped so that the Job restarts the pod cleanly instead of training against a dead peer.
pub const PEER_LOST: i32 = 78;
/// The membership source cannot be used: the Kubernetes API server never answered within the
/// wait timeout, or is not a Kubernetes API server (404 on the pods' path), or the DNS
/// configuration for --dns cannot be read. The line names the server.
pub const SOURCE_UNUSABLE: i32 = 79;
/// The trainer made no progress for --hang-timeout (or its first window): its stacks were dumped
/// into its log and it was stopped. Usually the infrastructure's (a rank stuck in a collective,
/// a hung filesystem): the Job may retry it.
pub const HANG: i32 = 80;
/// A peer pod's trainer endpoint did not answer from this pod's address (--check-peers): NCCL
/// or gloo would hang at their init. A network matter (a NetworkPolicy, a route): not retried
/// in place.
pub const PEERS_UNREACHABLE: i32 = 81;
/// A port the launcher must listen on (the control channel's) is taken by another process:
/// the line names the address and the flag that chose it. Not retried in place: the port stays
/// taken until whatever holds it ends.
pub const PORT_TAKEN: i32 = 82;
/// This pod was deleted or evicted (a preemption, a drain, `kubectl delete pod`) and its
/// launcher stopped as it was told to, while the job goes on without it for free: one of the
/// job's free preemptions (`--max-preemptions`), or a stop before the pod's trainer had begun.
/// The generated Job's `podFailurePolicy` ignores it as the launchers do, so the Job controller
/// replaces the pod without counting a failure against its `backoffLimit`. A stop the launchers
/// count (past `--max-preemptions`, or without a control channel) ends 143 instead. A trainer
/// or pserver that itself exits 83 is reported as 1 (`INTERNAL`'s number), which the Job counts:
/// it would otherwise be retried for ever.
pub const PREEMPTED: i32 = 83;
/// A command was found but could not be executed (shell convention).
pub const CANNOT_EXECUTE: i32 = 126;
/// A command was not found (shell convention).
pub const NOT_FOUND: i32 = 127;

/// The status for "ended by signal `signo`", as shells and Kubernetes report it.
pub fn by_signal(signo: i32) -> i32 {
    128 + signo
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal(i32),
}

impl Ended {
    /// The status a shell would report: the code, or 128 + signal.
    pub fn exit_code(self) -> i32 {
        match self {
            Ended::Code(c) => c,
            Ended::Signal(s) => by_signal(s),
        }
    }

    pub fn describe(self) -> String {
        match self {
            Ended::Code(c) => format!("exited with status {c}"),
            Ended::Signal(s) => format!("was killed by {}", signal_name(s)),
        }
    }
}

/// The standard signals by name, with Linux's numbers (libc's), as `kill -l` names them.
const SIGNALS: [(&str, i32); 31] = [
    ("SIGHUP", libc::SIGHUP),
    ("SIGINT", libc::SIGINT),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGILL", libc::SIGILL),
    ("SIGTRAP", libc::SIGTRAP),
    ("SIGABRT", libc::SIGABRT),
    ("SIGBUS", libc::SIGBUS),
    ("SIGFPE", libc::SIGFPE),
    ("SIGKILL", libc::SIGKILL),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGSEGV", libc::SIGSEGV),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGPIPE", libc::SIGPIPE),
    ("SIGALRM", libc::SIGALRM),
    ("SIGTERM", libc::SIGTERM),
    ("SIGSTKFLT", libc::SIGSTKFLT),
    ("SIGCHLD", libc::SIGCHLD),
    ("SIGCONT", libc::SIGCONT),
    ("SIGSTOP", libc::SIGSTOP),
    ("SIGTSTP", libc::SIGTSTP),
    ("SIGTTIN", libc::SIGTTIN),
    ("SIGTTOU", libc::SIGTTOU),
    ("SIGURG", libc::SIGURG),
    ("SIGXCPU", libc::SIGXCPU),
    ("SIGXFSZ", libc::SIGXFSZ),
    ("SIGVTALRM", libc::SIGVTALRM),
    ("SIGPROF", libc::SIGPROF),
    ("SIGWINCH", libc::SIGWINCH),
    ("SIGIO", libc::SIGIO),
    ("SIGPWR", libc::SIGPWR),
    ("SIGSYS", libc::SIGSYS),
];

/// A standard signal's number by its name ("SIGUSR1").
pub fn signal_by_name(name: &str) -> Option<i32> {
    SIGNALS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, signo)| *signo)
}

pub fn signal_name(signo: i32) -> String {
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    match SIGNALS.iter().find(|(_, known)| *known == signo) {
        Some((name, _)) => name.to_string(),
        None if signo == min => "SIGRTMIN".to_string(),
        None if signo > min && signo <= max => format!("SIGRTMIN+{}", signo - min),
        None => format!("signal {signo}"),
    }
}

/// Signals after which the launcher stops: exit with 128 + signal, SIGKILL after the grace
/// period. Every other forwarded signal leaves the decision to the children: they are
/// forwarded, and the launcher ends when the children end.
pub fn is_stop_signal(sig: i32) -> bool {
    matches!(sig, libc::SIGTERM | libc::SIGINT | libc::SIGQUIT)
}
