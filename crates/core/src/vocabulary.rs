//! The words the whole launcher shares: the contract with the training program, what a pod
//! runs, the batch systems it reads, and the one label the core's default ranking reads. A leaf:
//! the CLI's definitions and the validated configuration both name these, and neither may
//! import the other for them.

/// What this pod runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PodRole {
    /// A pserver and a trainer in every pod (the colocated layout of PaddlePaddle's tutorial); in `collective`, only the trainer.
    Both,
    /// Only the pserver (PaddleCloud's split layout).
    Pserver,
    /// Only the trainer (PaddleCloud's split layout).
    Trainer,
}

/// The contract with the training program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `paddle pserver` / `paddle train` command-line flags.
    V1,
    /// The v2 Python API: `PADDLE_INIT_*` variables for the entry command.
    V2,
    /// Parameter-server mode of Paddle >= 2 (`PaddleCloudRoleMaker`).
    Fleet,
    /// Data parallel, no pserver (`paddle.distributed`, gloo/NCCL).
    Collective,
}

/// The names users write (`v1`, `collective`, `both`, ...), from the one clap definition.
fn value_name(value: &impl clap::ValueEnum) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&value_name(self))
    }
}

impl std::fmt::Display for PodRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&value_name(self))
    }
}

impl Protocol {
    /// The program is given the NIC's name (v1 `--nics`, v2 `PADDLE_INIT_NICS`).
    pub fn uses_nic(self) -> bool {
        matches!(self, Protocol::V1 | Protocol::V2)
    }

    pub fn has_pservers(self) -> bool {
        self != Protocol::Collective
    }

    /// The protocols of Paddle's own `paddle.distributed.launch` (2.x, 3.x), whose rules for
    /// its processes' environment the launcher follows (proxies kept aside, the log directory,
    /// OpenMP threads, the socket interfaces).
    pub fn paddles_launcher(self) -> bool {
        matches!(self, Protocol::Collective | Protocol::Fleet)
    }

    /// Trainers listen on their own endpoint: two of them cannot share an IP.
    pub fn trainers_listen(self) -> bool {
        matches!(self, Protocol::Fleet | Protocol::Collective)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    Job,
    JobSet,
    Volcano,
    Lws,
    Kubeflow,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Job => "job",
            System::JobSet => "jobset",
            System::Volcano => "volcano",
            System::Lws => "lws",
            System::Kubeflow => "kubeflow",
        }
    }

    /// What a pod of this system shows, for the error when `--runtime` names it wrongly.
    pub fn signs(self) -> &'static str {
        match self {
            System::Job => "label batch.kubernetes.io/job-name",
            System::JobSet => "label jobset.sigs.k8s.io/jobset-name",
            System::Volcano => "VC_TASK_INDEX or label volcano.sh/job-name",
            System::Lws => "LWS_LEADER_ADDRESS or label leaderworkerset.sigs.k8s.io/name",
            System::Kubeflow => "label training.kubeflow.org/job-name",
        }
    }
}

/// The Indexed Job's completion index (a label since Kubernetes 1.28, an annotation before);
/// every other system's labels live in `batch`.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// How every pod's last line begins when the job ended for a cause (its own or another pod's):
/// the job's first cause follows, so that each pod's termination message says what happened to
/// the job, not only "peer lost".
pub const JOB_STOPPED: &str = "job stopped: ";

/// "1 launcher", "3 launchers": a count with its noun, for log lines.
pub fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        // "addresses", "processes": not "addresss".
        n if noun.ends_with('s') => format!("{n} {noun}es"),
        n => format!("{n} {noun}s"),
    }
}

/// A Kubernetes Event's type: Normal or Warning, as `kubectl describe` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_english() {
        assert_eq!(count(1, "address"), "1 address");
        assert_eq!(count(2, "address"), "2 addresses");
        assert_eq!(count(3, "process"), "3 processes");
        assert_eq!(count(0, "pod"), "0 pods");
    }
}
