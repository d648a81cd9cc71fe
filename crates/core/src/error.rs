//! Every way the launcher itself can fail, in one type, with the exit status of each in one
//! place (`exit_code`; the README's table mirrors it). Each variant keeps what it is about as
//! data, and its cause as a `#[source]`, so that the one line it prints is built here.

use std::io;
use std::net::IpAddr;
use std::path::Path;

use crate::exit::signal_name;
use crate::exit::{self, Outcome};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Not the user's value: the host would not say which interfaces it has.
    #[error("cannot list this host's network interfaces to check {nic}: {source}")]
    NoInterfaceList {
        nic: String,
        #[source]
        source: io::Error,
    },
    #[error("no Kubernetes client configuration ({source}); run in a pod with a service account, set KUBECONFIG, or give the peers with --peers / PADDLE_LAUNCHER_PEERS or --dns / PADDLE_LAUNCHER_DNS")]
    NoCluster {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `job`: the Job the pods belong to, when their selector names one (its rule joins the
    /// hint, as `manifest` grants it).
    #[error("{}", rbac_hint(namespace, message, job.as_deref()))]
    Forbidden {
        namespace: String,
        message: String,
        job: Option<String>,
    },
    #[error("gave up after {waited_s} s waiting for the job's pods (set --wait-timeout / PADDLE_LAUNCHER_WAIT_TIMEOUT to wait longer): {status}")]
    PeersTimeout { waited_s: u64, status: String },
    #[error("the Kubernetes API server at {url} did not answer{} ({last_error}); check KUBECONFIG or the in-cluster service", if *waited_s > 0 { format!(" in {waited_s} s") } else { String::new() })]
    Unreachable {
        url: String,
        waited_s: u64,
        last_error: String,
    },
    #[error("{url} is not a Kubernetes API server (or not the one of this cluster): it answered the pods' path with {answer}")]
    NotAnApiServer { url: String, answer: String },
    #[error("cannot read the DNS configuration for PADDLE_LAUNCHER_DNS: {source}; fix /etc/resolv.conf or set PADDLE_LAUNCHER_DNS_SERVER (--dns-server)")]
    DnsConfig {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot read what the batch system says of this job: {what}; set the job's settings yourself (JOB_NAME, CONF_PADDLE_GRADIENT_NUM, ...) or --runtime static")]
    BatchSystem { what: String },
    #[error("{failed} trainer pods of the job have Failed, more than PADDLE_LAUNCHER_MAX_FAILED_TRAINERS = {max}: not starting again")]
    TooManyFailures { failed: usize, max: u32 },
    #[error(transparent)]
    Membership(#[from] MembershipError),
    #[error("{} of {} pserver endpoints never accepted a connection within {limit_s} s (PADDLE_LAUNCHER_PSERVER_TIMEOUT): {}", waiting.len(), total, waiting.join(", "))]
    PserversNotReady {
        waiting: Vec<String>,
        total: usize,
        limit_s: u64,
    },
    /// `when`: "before the trainer started" or "while the trainer was running; ...".
    #[error("pserver {ended} {when}{hint}")]
    PserverDied {
        ended: String,
        when: &'static str,
        hint: &'static str,
    },
    #[error("job stopped: {reason}; stopped {stopped} so that the Job can restart cleanly")]
    PeerLost { reason: String, stopped: String },
    /// The trainer made no progress within its limit (`reason` says how long, by what).
    #[error("{reason}")]
    Hung { reason: String },
    /// Peers whose trainer endpoint did not answer from this pod's address.
    #[error(
        "{peers} did not answer a TCP connection from this pod's address {from} in 3 tries of {limit_s} s: NCCL or gloo would hang at their init; check the NetworkPolicies and routes between the pods (or set PADDLE_LAUNCHER_CHECK_PEERS=false)"
    )]
    PeersUnreachable {
        peers: String,
        from: std::net::IpAddr,
        limit_s: u64,
    },
    /// The job hangs, as the control channel told (`reason` names the suspect); this pod's
    /// processes were stopped after its trainer was asked for its stacks.
    #[error("job stopped: {reason}; stopped {stopped} after asking for the stacks")]
    JobHung { reason: String, stopped: String },
    /// A split-layout pserver pod can no longer tell when the trainers are done.
    #[error(
        "stopped the pserver: it can no longer tell when the trainer pods are done: {refusal}"
    )]
    WatchRefused { refusal: String },
    /// `why`: what was missing or refused, in the user's terms (see `spawn_failure`).
    #[error("cannot start the {label} command `{command}`: {why}")]
    Spawn {
        label: String,
        command: String,
        why: String,
        #[source]
        source: io::Error,
    },
    /// A stop signal ended the launcher; `doing` completes "received SIGTERM<doing>".
    #[error("received {}{doing}", signal_name(*signal))]
    Stopped { signal: i32, doing: String },
    /// A port this launcher must listen on is held by another process (or another launcher
    /// of the same pod): `flag` names where the port comes from.
    #[error("cannot listen on {at} for {what}: the port is taken by another process ({source}); free it, or give the job another port with {flag}")]
    PortTaken {
        what: &'static str,
        at: std::net::SocketAddr,
        flag: String,
        #[source]
        source: io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The status the launcher exits with for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) => exit::INVALID_CONFIG,
            Error::NoInterfaceList { .. } | Error::Io { .. } => exit::INTERNAL,
            Error::NoCluster { .. } => exit::NO_CLUSTER,
            Error::Forbidden { .. } | Error::WatchRefused { .. } => exit::FORBIDDEN,
            Error::PeersTimeout { .. } => exit::PEERS_TIMEOUT,
            Error::Unreachable { .. }
            | Error::NotAnApiServer { .. }
            | Error::DnsConfig { .. }
            | Error::BatchSystem { .. } => exit::SOURCE_UNUSABLE,
            Error::TooManyFailures { .. } => exit::TOO_MANY_FAILURES,
            Error::Membership(_) => exit::MEMBERSHIP,
            Error::PserversNotReady { .. } => exit::PSERVERS_NOT_READY,
            Error::PserverDied { .. } => exit::PSERVER_DIED,
            Error::PeerLost { .. } => exit::PEER_LOST,
            Error::Hung { .. } | Error::JobHung { .. } => exit::HANG,
            Error::PeersUnreachable { .. } => exit::PEERS_UNREACHABLE,
            Error::PortTaken { .. } => exit::PORT_TAKEN,
            Error::Spawn { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => exit::NOT_FOUND,
                io::ErrorKind::PermissionDenied => exit::CANNOT_EXECUTE,
                _ => exit::INTERNAL,
            },
            Error::Stopped { signal, .. } => exit::by_signal(*signal),
        }
    }

    /// A stop signal ended the launcher; `doing` completes "received SIGTERM<doing>".
    pub fn stopped(signal: i32, doing: &str) -> Self {
        Error::Stopped {
            signal,
            doing: doing.to_string(),
        }
    }

    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

impl From<Error> for Outcome {
    fn from(error: Error) -> Outcome {
        Outcome::new(error.exit_code(), error.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {variable}: {}: expected {expected}", shown(value))]
pub struct ConfigError {
    /// "ENV_NAME (--flag)"
    pub variable: String,
    pub value: String,
    pub expected: String,
}

impl ConfigError {
    pub fn new(variable: impl std::fmt::Display, value: &str, expected: impl Into<String>) -> Self {
        ConfigError {
            variable: variable.to_string(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("pods {first} and {second} share the IP {ip} (hostNetwork pods on one node?): their pservers would fight for the same ports; give each pod its own IP")]
    DuplicateIp {
        ip: IpAddr,
        first: String,
        second: String,
    },
    #[error("this pod ({who}) is not among the job's pods: {seen}")]
    NotAMember { who: String, seen: String },
    #[error("pods {names} all have this pod's IP {ip}: set POD_NAME (downward API metadata.name) so that it can tell which one it is")]
    AmbiguousIp { ip: IpAddr, names: String },
}

/// A value as the one-line error quotes it; an empty one is "not set" (the usual case: a
/// required variable missing), not `""`.
fn shown(value: &str) -> String {
    match value {
        "" => "not set".to_string(),
        value => format!("{value:?}"),
    }
}

/// The command the v1 and v2 protocols run by default (`paddle pserver`, `paddle train`).
const OLD_PADDLE_COMMAND: &str = "paddle";

/// Why a command could not start, as a user fixes it: a command without a `/` is looked for on
/// the PATH the child gets (named, since a pod's PATH is the image's), one with a `/` must
/// exist, and the working directory must exist; anything else as the system says it.
pub fn spawn_failure(command: &str, cwd: &Path, path: Option<&str>, source: &io::Error) -> String {
    if source.kind() == io::ErrorKind::NotFound {
        if !cwd.is_dir() {
            return format!("its working directory {} does not exist", cwd.display());
        }
        if !command.contains('/') {
            return not_on_path(command, path);
        }
        return format!("{command} does not exist");
    }
    format!("{source} (in {})", cwd.display())
}

/// A command without a `/` that is on no directory of the PATH the child gets.
pub fn not_on_path(command: &str, path: Option<&str>) -> String {
    let path = path.unwrap_or("unset");
    if command == OLD_PADDLE_COMMAND {
        // The default protocol's command: most often a current Paddle image that was not
        // given its protocol.
        return format!(
            "not found on PATH ({path}): `paddle` is the command of PaddlePaddle 0.x/1.x, which the protocols v1 (the default) and v2 run; a PaddlePaddle 2.x or 3.x image needs PADDLE_LAUNCHER_PROTOCOL=collective (--protocol collective), or fleet for a parameter-server job"
        );
    }
    format!("not found on PATH ({path})")
}

/// The refusal plus the Role and RoleBinding that grant what the launcher needs.
pub fn rbac_hint(namespace: &str, message: &str, job: Option<&str>) -> String {
    // "User \"system:serviceaccount:<ns>:<name>\" cannot ..." names the pod's service account.
    let account = message
        .split("system:serviceaccount:")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|ns_name| ns_name.split_once(':'))
        .map_or("default".to_string(), |(_, name)| name.to_string());
    // As `manifest` grants it: the Job's own rule where the pods are one Job's (the
    // coordinator keeps the restart count and what it waits for there; followers read it).
    let job_rule = job.map_or(String::new(), |job| {
        format!("- apiGroups: [batch]\n  resources: [jobs]\n  resourceNames: [{job}]\n  verbs: [get, patch]\n")
    });
    format!(
        "the Kubernetes API refused to list/watch pods: {message}\n\
         The launcher needs pods get/list/watch in namespace {namespace}. Apply (what \
         `paddle-launcher manifest` grants):\n\
         ---\n\
         apiVersion: rbac.authorization.k8s.io/v1\n\
         kind: Role\n\
         metadata: {{name: paddle-launcher, namespace: {namespace}}}\n\
         rules:\n\
         - apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get, list, watch]\n\
         - apiGroups: [\"\"]\n  resources: [events]\n  verbs: [create]\n\
         {job_rule}\
         ---\n\
         apiVersion: rbac.authorization.k8s.io/v1\n\
         kind: RoleBinding\n\
         metadata: {{name: paddle-launcher-{account}, namespace: {namespace}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: paddle-launcher}}\n\
         subjects:\n\
         - {{kind: ServiceAccount, name: {account}, namespace: {namespace}}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_has_its_documented_status_and_one_line() {
        let cases: Vec<(Error, i32)> = vec![
            (ConfigError::new("X (--x)", "v", "y").into(), 2),
            (
                Error::Spawn {
                    label: "trainer".into(),
                    command: "nope".into(),
                    why: "not found on PATH (/bin)".into(),
                    source: io::Error::from(io::ErrorKind::NotFound),
                },
                127,
            ),
            (
                Error::Spawn {
                    label: "trainer".into(),
                    command: "x".into(),
                    why: "not found on PATH (/bin)".into(),
                    source: io::Error::from(io::ErrorKind::PermissionDenied),
                },
                126,
            ),
            (
                Error::Stopped {
                    signal: libc::SIGTERM,
                    doing: " while waiting".into(),
                },
                143,
            ),
            (
                Error::Unreachable {
                    url: "https://10.96.0.1/".into(),
                    waited_s: 3,
                    last_error: "connect".into(),
                },
                79,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.exit_code(), code, "{error}");
            assert!(!error.to_string().contains('\n'), "{error}");
        }
    }

    #[test]
    fn rbac_hint_names_the_service_account() {
        let hint = rbac_hint(
            "team-a",
            "403 pods is forbidden: User \"system:serviceaccount:team-a:trainer\" cannot list resource \"pods\"",
            Some("llm"),
        );
        // What `manifest` grants, the Job's own rule included.
        assert!(
            hint.contains("resources: [jobs]\n  resourceNames: [llm]\n  verbs: [get, patch]"),
            "{hint}"
        );
        assert!(hint.contains("name: trainer, namespace: team-a"), "{hint}");
        // A binding of its own: applying it replaces no other account's binding.
        assert!(
            hint.contains("name: paddle-launcher-trainer, namespace: team-a"),
            "{hint}"
        );
        assert!(hint.contains("verbs: [get, list, watch]"), "{hint}");
    }

    #[test]
    fn a_command_that_cannot_start_is_named_in_the_users_terms() {
        let missing = io::Error::from(io::ErrorKind::NotFound);
        let here = std::env::temp_dir();
        assert_eq!(
            spawn_failure("pyhton", &here, Some("/usr/bin:/bin"), &missing),
            "not found on PATH (/usr/bin:/bin)"
        );
        assert_eq!(
            spawn_failure("./train.sh", &here, Some("/bin"), &missing),
            "./train.sh does not exist"
        );
        let gone = here.join("no-such-dir-of-paddle-launcher");
        assert_eq!(
            spawn_failure("python", &gone, Some("/bin"), &missing),
            format!("its working directory {} does not exist", gone.display())
        );
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert!(spawn_failure("x", &here, None, &denied).contains("(in "));
    }
}
