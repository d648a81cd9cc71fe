//! Waits that a stop signal (and, where asked, the attempt's loss) ends: every wait of the
//! attempt loop that is not the supervised run itself goes through `interruptible`.

use tracing::info;

use crate::error::Error;
use crate::exit::{is_stop_signal, signal_name};
use crate::supervise::{Event, Supervisor};

/// Runs file work (globs over shared filesystems, copies of data) on the blocking pool, so that
/// the only runtime thread keeps handling signals: a TERM during a long copy ends it at once.
pub(super) async fn off_thread<T: Send + 'static>(
    supervisor: Option<&mut Supervisor>,
    doing: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let work = tokio::task::spawn_blocking(work);
    let joined = interruptible(supervisor, doing, Breaks::StopOnly, work).await?;
    joined.map_err(|e| Error::io(format!("{doing} failed"), e.into()))
}

/// What besides its work and a stop signal ends a wait in which no child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Breaks {
    /// Nothing else (waiting for the job's verdict, its end, a file's work).
    StopOnly,
    /// SIGHUP too: before the attempt, a reload asked of a pod that is still gathering stops
    /// it, so it is not started with the old settings.
    AlsoHup,
    /// The attempt's loss too: once the attempt is lost nothing more is started in it (the
    /// workspace prepared, the peers checked, then the trainer).
    AlsoLoss,
}

/// Waits for `work` while no child runs: a stop signal (and what `breaks` says) ends the wait
/// with an error; other signals have no child to go to, and are logged.
pub(super) async fn interruptible<T>(
    supervisor: Option<&mut Supervisor>,
    doing: &str,
    breaks: Breaks,
    work: impl std::future::Future<Output = T>,
) -> Result<T, Error> {
    let Some(supervisor) = supervisor else {
        return Ok(work.await);
    };
    tokio::pin!(work);
    // What the wait is not about (a peer lost, the job done): kept for whoever waits next, since
    // the supervisor reports each once.
    let mut held = Vec::new();
    let ended = loop {
        tokio::select! {
            done = &mut work => break Ok(done),
            event = supervisor.next_event() => match event {
                Event::Signal(sig) if is_stop_signal(sig) || (breaks == Breaks::AlsoHup && sig == nix::libc::SIGHUP) => {
                    break Err(Error::stopped(sig, &format!(" while {doing}")));
                }
                // After the job's end (a split pserver pod's trainers all done), as the attempt
                // would have taken them: the end first.
                Event::PeerLost(loss)
                    if breaks == Breaks::AlsoLoss
                        && !held.iter().any(|e| matches!(e, Event::JobDone(_))) =>
                {
                    info!("{}: stopped {doing}, nothing more is started", loss.reason);
                    break Err(Error::PeerLost {
                        reason: loss.reason,
                        stopped: "nothing (its trainer had not started)".into(),
                    });
                }
                Event::Signal(sig) => {
                    info!("ignoring {} while {doing}: no child to forward it to yet", signal_name(sig))
                }
                event @ (Event::Exited { .. } | Event::PeerLost(_) | Event::JobDone(_)) => {
                    held.push(event)
                }
            },
        }
    };
    supervisor.requeue(held);
    ended
}
