//! `run` and `plan`: configuration -> peers -> plan, then the launch: the pserver first, the
//! trainer once every pserver endpoint of the job accepts TCP, then supervision until it is done.

mod attempt;
#[cfg(test)]
mod driven;
mod ending;
mod gathering;
mod hang_watch;
mod peer_check;
mod processes;
mod ready;
mod record;
mod rendezvous;
mod reporter;
mod secret;
mod setup;
mod waits;
mod why_waiting;
pub use why_waiting::why_unreached;

use std::net::IpAddr;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::attempt_loop::{self, AttemptLoop, Command, Input};
use crate::cli::JobArgs;
use crate::config::{Config, Secret};
use crate::error::Error;
use crate::exit::{self, Outcome};
use crate::peers;
use crate::protocol::InputFiles;
use crate::supervise::Signals;
use crate::supervise::Supervisor;
use attempt::Attempts;
use ending::verdict_limits;
use gathering::{wait_for_peers, Gathered};
pub(crate) use secret::{create_secret_command, read_secret_file};
use secret::{job_secret, missing_secret, wait_for_secret_file, JobSecret};
pub use setup::NODE_NAME;
use setup::{configure, input_files, plan_for};
pub(crate) use setup::{derive_coordinator, locate_self};
use waits::off_thread;

/// `run` and `plan`: everything up to the launch; then print the plan (`plan_only`) or carry
/// it out. The outcome is the trainer's (or the pserver's) own end, or the launcher's failure.
pub async fn launch(args: &JobArgs, plan_only: bool) -> Outcome {
    info!(
        "paddle-launcher {} starting as pid {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    // A near miss of a known name would silently not apply: refused. Others are warned of.
    if let Some(near_miss) = crate::cli::near_miss_in_environment() {
        return Outcome::from(Error::from(near_miss));
    }
    for unread in crate::cli::unread_in_environment() {
        warn!("{unread}");
    }
    launch_steps(args, plan_only)
        .await
        .unwrap_or_else(Outcome::from)
}

/// The route from the first line: configure, this pod's own parts, then attempts until the
/// job ends — each gathered (discover, plan, join), begun, run and judged, then restarted in
/// place or finished.
async fn launch_steps(args: &JobArgs, plan_only: bool) -> Result<Outcome, Error> {
    let (config, my_ip) = configure(args, plan_only).await?;
    let pod = config
        .topology
        .pod_name
        .clone()
        .unwrap_or_else(|| my_ip.to_string());
    let span = tracing::Span::current();
    span.record("pod", tracing::field::display(&pod));
    span.record("job", tracing::field::display(&config.topology.job_name));
    let mut own = own_parts(&config, my_ip, plan_only).await?;
    let Some(mut supervisor) = own.supervisor.take() else {
        return print_plan(&config, my_ip, &own.inputs).await;
    };
    let board = crate::metrics::serve::start_for(&config, my_ip, &pod).await;
    let (mut attempts, ledger) = Attempts::new(&config, board);
    let (mut machine, mut command) = AttemptLoop::start(ledger, verdict_limits(&config));
    loop {
        let input = match command {
            Command::Gather {
                ledger,
                members_before,
                alive,
            } => {
                let gathered = own
                    .gather(
                        &config,
                        &mut supervisor,
                        &attempts.reporter.reporting,
                        ledger,
                        &members_before,
                        alive.into_iter().collect(),
                    )
                    .await;
                // Stopped while the job gathers: nothing of this attempt was spent, and the
                // launchers gather on without this pod, free while the allowance lasts.
                let gathered = match gathered {
                    Err(Error::Stopped { signal, doing }) => {
                        let free = config.control.is_on() && ledger.preemption_is_free();
                        let outcome = Outcome::from(Error::Stopped { signal, doing });
                        return Ok(attempt_loop::preemption_status(outcome, Some(signal), free));
                    }
                    gathered => gathered?,
                };
                match gathered {
                    Gathered::Attempt(attempt) => {
                        let begun = attempts.begin(
                            *attempt,
                            &config,
                            &mut supervisor,
                            my_ip,
                            &members_before,
                        );
                        Input::Begun(begun)
                    }
                    Gathered::JobSucceeded(reason) => {
                        info!("{reason}: nothing left for this pod to start");
                        Input::JobSucceeded(reason)
                    }
                }
            }
            Command::Finish { outcome, posts } => {
                return Ok(attempts.finish(outcome, posts, &mut supervisor).await);
            }
            command => {
                attempts
                    .execute(command, &config, &mut supervisor, my_ip)
                    .await?
            }
        };
        command = machine.step(input);
    }
}

/// What this pod has of its own before it looks for the others: with it, it gathers the job
/// at every attempt (`Own::gather`).
pub(super) struct Own {
    /// None for `plan`, which starts nothing; taken by the launch.
    supervisor: Option<Supervisor>,
    secret: Option<Secret>,
    inputs: InputFiles,
    /// This pod's address.
    my_ip: IpAddr,
}

/// The second stage: the signal handlers first (a TERM then ends the pod at once, and zombies
/// are reaped from the start when it is PID 1), the job's secret (waited for while its file is
/// not yet mounted), and the input files, which are on the pod's own or a shared filesystem,
/// not in the membership: checked first.
async fn own_parts(config: &Config, my_ip: IpAddr, plan_only: bool) -> Result<Own, Error> {
    let secret = job_secret(&config.control)?;
    let mut supervisor = if plan_only {
        None
    } else {
        let signals =
            Signals::install().map_err(|e| Error::io("cannot install signal handlers", e))?;
        Some(Supervisor::new(signals, config.timing.grace_period))
    };
    let secret = match (secret, supervisor.as_mut()) {
        (JobSecret::Missing(path), Some(supervisor)) => {
            let create = create_secret_command(config);
            let limit = config.timing.wait_timeout;
            Some(wait_for_secret_file(&path, limit, &create, supervisor).await?)
        }
        (JobSecret::Missing(path), None) => {
            let create = create_secret_command(config);
            return Err(missing_secret(&path, "", &create).into());
        }
        (JobSecret::Read(secret), _) => Some(secret),
        (JobSecret::None, _) => None,
    };
    let for_inputs = config.clone();
    let inputs = off_thread(supervisor.as_mut(), "expanding the file globs", move || {
        input_files(&for_inputs)
    })
    .await??;
    Ok(Own {
        supervisor,
        secret,
        inputs,
        my_ip,
    })
}

/// `plan`: the job's pods found once, ranked, and the plan printed; nothing started.
async fn print_plan(config: &Config, my_ip: IpAddr, inputs: &InputFiles) -> Result<Outcome, Error> {
    let round = peers::Round {
        members_before: &[],
        absent: &Default::default(),
        since: Instant::now(),
        alive: &Default::default(),
        not_ready_after: std::time::Duration::ZERO,
        own_name: config.topology.pod_name.as_deref(),
        own_ip: my_ip,
        told: None,
        keep_wait_on: None,
    };
    let found = wait_for_peers(config, None, round).await?;
    let (plan, _, _) = plan_for(config, &found, my_ip, inputs)?;
    let plan = plan.for_restart(config.restarts_before());
    println!("{}", plan.to_json());
    Ok(Outcome::new(exit::SUCCESS, "plan printed"))
}
