//! paddle-launcher: environment -> peers -> ranks -> process plan -> supervised processes.
//!
//! The pure core, unit-tested without a cluster: the words every part shares (`vocabulary`,
//! `exit`, `error`), the options (`cli`, `config`), NCCL's and gloo's interface (`network`),
//! what the batch system says (`batch`, but `batch::discover`), the membership and its ranks
//! (`selector`, `membership`), the process plan (`plan`, `protocol`), and what a pod does after
//! the launch (`lifecycle` and `attempt_loop`, the state machines deciding every exit and
//! restart; `progress`, the hang rules; `verdict`; `coordination`, who coordinates; `control::coordinator`, the channel's
//! decisions). The thin I/O shell around it:
//! `address`, `batch::discover`, `peers`, `events`, `workspace`, `supervise`, `control` (the
//! job's channel), `launch` and `local` (the drivers), `doctor`, `manifest`, `run`.
//! `tests/architecture.rs` keeps it so: no import cycle, and no core module imports the shell.
//! Modules are crate-private unless the tests read them (the CLI definition; configuration,
//! membership, selectors and the pod view of the API's objects are re-exported for them
//! below). The compiler then finds dead code.

pub(crate) mod address;
pub(crate) mod attempt_loop;
pub(crate) mod batch;
pub mod cli;
pub(crate) mod config;
pub(crate) mod control;
pub(crate) mod coordination;
pub(crate) mod devices;
pub(crate) mod doctor;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod exit;
pub(crate) mod job_view;
pub(crate) mod launch;
pub(crate) mod ledger;
pub(crate) mod lifecycle;
pub(crate) mod local;
pub(crate) mod loss;
pub(crate) mod manifest;
pub(crate) mod membership;
pub(crate) mod metrics;
pub(crate) mod network;
pub(crate) mod peers;
pub(crate) mod plan;
pub(crate) mod progress;
pub(crate) mod protocol;
pub mod run;
pub(crate) mod selector;
pub(crate) mod status;
pub(crate) mod straggler;
pub(crate) mod supervise;
pub(crate) mod verdict;
pub(crate) mod vocabulary;
pub(crate) mod workspace;

pub use config::Config;
/// For the bench harness: what coordinating a big job costs (`cargo bench -- coordinator`).
#[doc(hidden)]
pub use control::{
    measure_coordinator, measure_heartbeats, measure_progress, CoordinatorCost, HeartbeatCost,
    ProgressCost,
};
/// For the tests' hostile clients of the control channel.
pub use control::{Message as ControlMessage, Session as ControlSession};
pub use membership::{rank, readiness, PodPhase, PodView, Readiness};
#[doc(hidden)]
pub use metrics::{measure as measure_observability, measure_view};
pub use peers::kubernetes::pod_view;
pub use selector::LabelSelector;

/// A job secret, as `PADDLE_LAUNCHER_JOB_SECRET` gives it.
pub fn config_secret(bytes: &[u8]) -> config::Secret {
    config::Secret(bytes.to_vec())
}
