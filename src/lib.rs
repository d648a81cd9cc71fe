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
pub(crate) use paddle_launcher_core::attempt_loop;
pub(crate) use paddle_launcher_core::batch;
pub use paddle_launcher_core::cli;
pub(crate) use paddle_launcher_core::config;
pub(crate) mod control;
pub(crate) use paddle_launcher_core::coordination;
pub(crate) mod devices;
pub(crate) mod discover;
pub(crate) mod doctor;
pub(crate) use paddle_launcher_core::error;
pub(crate) mod events;
pub(crate) use paddle_launcher_core::exit;
pub(crate) use paddle_launcher_core::job_view;
pub(crate) mod launch;
pub(crate) use paddle_launcher_core::ledger;
pub(crate) use paddle_launcher_core::lifecycle;
pub(crate) mod local;
pub(crate) use paddle_launcher_core::loss;
pub(crate) mod manifest;
pub(crate) use paddle_launcher_core::membership;
pub(crate) mod metrics;
pub(crate) use paddle_launcher_core::network;
pub(crate) mod peers;
pub(crate) use paddle_launcher_core::plan;
pub(crate) use paddle_launcher_core::progress;
pub(crate) use paddle_launcher_core::protocol;
pub mod run;
pub(crate) use paddle_launcher_core::selector;
pub(crate) mod status;
pub(crate) use paddle_launcher_core::straggler;
pub(crate) mod supervise;
#[cfg(test)]
pub(crate) use paddle_launcher_core::verdict;
pub(crate) use paddle_launcher_core::vocabulary;
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
