//! The options of `status`, which asks a launcher for the job's table.

use clap::Args;

/// Options of `status`.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// The launcher's metrics port [default: 9410].
    #[arg(long, env = "PADDLE_LAUNCHER_METRICS_PORT")]
    pub metrics_port: Option<String>,
    /// The address the launcher's metrics endpoint listens on: the pod's own (in a pod any of
    /// its addresses; a `local` pod's 127.0.0.N).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
}
