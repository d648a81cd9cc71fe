//! How an attempt that ended without success is told to the job and waits for its verdict:
//! the steps the attempt loop takes, shared with the drivers' simulation (`driven`), so that
//! what is simulated is what runs.

use super::rendezvous::joining;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tracing::{info, warn};

use crate::config::{Config, Secret};
use crate::control::{self, Channel, ChannelRole, Joining};
use crate::ledger::Ledger;
use crate::loss::Loss;
use crate::membership::PodAddress;

use crate::attempt_loop::VerdictLimits;
use crate::control::ChannelState;

/// How long a failed launcher waits for the coordinator's word on whether the job may restart.
pub(crate) const FAILED_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Tells the job that this launcher's attempt ended without success (`ended`: a failure or a
/// hang, its reason as every pod names it, whether a restart could mend it), and waits a
/// moment for the job's first answer.
pub(crate) async fn tell_failure(channel: &Channel, ended: Loss) {
    channel.tell_end(ended, FAILED_ANSWER_WAIT).await;
}

/// What the job's channel has told this launcher so far (nothing without a channel), for the
/// attempt loop's next step.
pub(crate) fn state_of(channel: Option<&Channel>) -> ChannelState {
    channel.map(Channel::state).unwrap_or_default()
}

/// No verdict to wait for: a failed launcher says its children are stopped (`stopped`), for
/// the others' verdict; whether the job may restart, as the channel knows it (never without
/// one).
pub(crate) fn read_verdict(channel: Option<&Channel>, stopped: bool) -> bool {
    let Some(channel) = channel else {
        return false;
    };
    if stopped {
        channel.stopped();
    }
    channel.may_restart()
}

/// How long a coordinator that ended the job at a restart serves its address, besides the grace
/// period, so that the followers hear of it.
pub(super) const TELL_THE_END: Duration = Duration::from_secs(5);

/// How long a launcher about to exit lets its last events go out.
pub(super) const EVENTS_FLUSH: Duration = Duration::from_secs(3);

/// How long a launcher whose children are stopped waits for the coordinator's verdict, besides
/// the others' grace period and the heartbeat timeout (a silent member counts as stopped once
/// its link is judged): a bound for a coordinator that says nothing, not part of the decision.
pub(super) const VERDICT_MARGIN: Duration = Duration::from_secs(5);

/// How long after the others' grace period a coordinating launcher whose own pod is ending
/// still waits for their word: a round trip, kept short (its pod's own grace runs out).
pub(super) const VERDICT_STOP_MARGIN: Duration = Duration::from_secs(3);

/// How long to wait for the coordinator's verdict after a loss.
pub(super) fn verdict_limits(config: &Config) -> VerdictLimits {
    VerdictLimits {
        // The others stop their children within their grace period, then say so; a silent
        // one counts as stopped once its link is judged.
        recoverable: config.timing.grace_period + config.control.heartbeat_timeout + VERDICT_MARGIN,
        ending: config.timing.grace_period + VERDICT_STOP_MARGIN,
    }
}

/// Serves the coordinator's address until every member of the attempt that ended has heard
/// that the job cannot start again (a final `Lost`), or the join grace has passed.
pub(super) async fn tell_followers_the_end(
    config: &Config,
    secret: &Secret,
    my_ip: IpAddr,
    members: &[PodAddress],
    reason: String,
) {
    let Some((_, port)) = &config.control.coordinator else {
        return;
    };
    let Some(me) = members.iter().find(|m| m.ip == my_ip) else {
        return;
    };
    // The followers decided to restart when this launcher did, and are connecting as soon as
    // their children are stopped; a member that is gone never will.
    let grace = config.timing.grace_period + TELL_THE_END;
    let role = ChannelRole::Coordinator {
        listen: SocketAddr::new(my_ip, *port),
    };
    // Its ledger says nothing: the job has ended.
    let ledger = Ledger {
        max_preemptions: 0,
        ..Ledger::first(0)
    };
    let joining = Joining {
        members: members.to_vec(),
        join_grace: grace,
        ended: Some(reason),
        progress_check: Duration::ZERO,
        ..joining(config, secret.clone(), me.clone(), role, ledger)
    };
    tell_the_end(joining, grace).await;
}

/// Serves `joining` (a coordinator's, with the job's end) until every member has heard the end,
/// or `grace` has passed.
pub(super) async fn tell_the_end(joining: Joining, grace: Duration) {
    let others = joining.members.len().saturating_sub(1);
    match control::join(joining).await {
        Ok(mut channel) => {
            info!(
                "control channel: telling the other {} that the job has ended (at most {} s)",
                crate::vocabulary::count(others, "launcher"),
                grace.as_secs()
            );
            channel.told_everyone(grace).await;
        }
        Err(e) => {
            warn!("control channel: cannot tell the other launchers that the job has ended: {e}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempt_loop::verdict_wait;
    use crate::control::{self, ChannelRole, Heard, Joining};
    use crate::error::Error;
    use crate::exit::Outcome;
    use crate::membership::{PodAddress, Served};

    /// A job of one pod: its launcher coordinates and starts at once.
    async fn alone() -> Channel {
        alone_at("127.0.7.2", None).await.0
    }

    /// `alone`, on `ip`, with an elastic job's growth if given; its control port.
    async fn alone_at(ip: &str, growth: Option<control::Growing>) -> (Channel, u16) {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        let port = std::net::TcpListener::bind((ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = std::net::SocketAddr::new(ip, port);
        let me = pod("p-0", ip);
        let mut channel = control::join(Joining {
            view: control::fingerprint(std::slice::from_ref(&me)),
            members: vec![me.clone()],
            growth,
            ..joining_as(me, ChannelRole::Coordinator { listen }, 1)
        })
        .await
        .unwrap();
        assert!(matches!(
            channel.heard().await,
            Heard::Go {
                ledger: Ledger { epoch: 1, .. },
                ..
            }
        ));
        (channel, port)
    }

    fn pod(name: &str, ip: std::net::IpAddr) -> PodAddress {
        PodAddress {
            name: name.into(),
            ip,
        }
    }

    /// `me` joining the test's channel as `role`, with no view (a follower asking for the
    /// membership).
    /// A test launcher's channel: of `me`, as `role`, starting `epoch`, with a budget of 1.
    fn joining_as(me: PodAddress, role: ChannelRole, epoch: u32) -> Joining {
        Joining {
            role,
            secret: crate::config::Secret(b"ending-test-secret-0123456789abcdef".to_vec()),
            view: String::new(),
            members: Vec::new(),
            who: format!("pod {}", me.name),
            me,
            nproc_per_pod: 1,
            heartbeat_timeout: Duration::from_secs(2),
            join_grace: Duration::from_secs(5),
            membership: None,
            ended: None,
            progress_check: Duration::ZERO,
            served: Served::default(),
            network: control::tcp(),
            growth: None,
            reporting: control::Reporting::default(),
            ledger: Ledger {
                epoch,
                ..Ledger::first(1)
            },
        }
    }

    /// A trainer failure with the budget spent and no checkpoint asked of the job: the pod ends
    /// at once, whatever the channel could still say; with restarts left it waits for the
    /// verdict, as long as a recoverable failure may take.
    #[tokio::test]
    async fn a_spent_budget_waits_for_no_verdict_when_no_checkpoint_was_asked() {
        let channel = alone().await;
        let failed: Result<Outcome, Error> = Ok(Outcome::new(3, "trainer exited with status 3"));
        let limits = VerdictLimits {
            recoverable: Duration::from_secs(17),
            ending: Duration::from_secs(4),
        };
        let spent = |epoch| Ledger {
            epoch,
            ..Ledger::first(1)
        };
        assert!(!channel.state().checkpoint_asked());
        assert_eq!(
            verdict_wait(&state_of(Some(&channel)), &failed, spent(1), limits),
            None
        );
        assert_eq!(
            verdict_wait(&state_of(Some(&channel)), &failed, spent(0), limits),
            Some(Duration::from_secs(17))
        );
    }

    /// A trainer failure once the job's growth asked for a checkpoint, with the budget spent
    /// and no free preemption: the attempt's end is the growth's free restart, so the pod
    /// waits for the verdict instead of ending at once (as it would for a preemption beyond
    /// the free ones).
    #[tokio::test]
    async fn a_failure_after_the_growths_checkpoint_waits_for_the_verdict() {
        let growth = control::Growing {
            core: control::Growth {
                window: Duration::from_millis(200),
                checkpoint_window: Duration::from_secs(30),
            },
            room: 1,
        };
        let (channel, port) = alone_at("127.0.7.3", Some(growth)).await;
        let coordinator = std::net::SocketAddr::new("127.0.7.3".parse().unwrap(), port);
        let arrival = pod("p-1", "127.0.7.4".parse().unwrap());
        let role = ChannelRole::Follower {
            coordinator,
            recheck: None,
        };
        let _arrival = control::join(joining_as(arrival, role, 0)).await.unwrap();
        let asked = tokio::time::timeout(Duration::from_secs(10), channel.checkpoint_asked());
        let reason = asked.await.expect("the growth asked for no checkpoint");
        assert!(reason.starts_with(control::GROWS), "{reason}");
        let failed: Result<Outcome, Error> = Ok(Outcome::new(3, "trainer exited with status 3"));
        let limits = VerdictLimits {
            recoverable: Duration::from_secs(17),
            ending: Duration::from_secs(4),
        };
        let spent = Ledger {
            epoch: 1,
            max_preemptions: 0,
            ..Ledger::first(1)
        };
        assert_eq!(
            verdict_wait(&state_of(Some(&channel)), &failed, spent, limits),
            Some(Duration::from_secs(17))
        );
    }

    /// A failed launcher waits for the verdict as long as the others may take to stop their
    /// children and say so, a silent one's link judged, and a margin; an ending one, its grace
    /// and a round trip.
    #[test]
    fn the_verdict_is_waited_for_as_long_as_the_others_may_take() {
        let config = crate::protocol::testing::config(|args| {
            args.grace_period = Some("7".into());
            args.heartbeat_timeout = Some("11".into());
        });
        let limits = verdict_limits(&config);
        assert_eq!(limits.recoverable, Duration::from_secs(7 + 11 + 5));
        assert_eq!(limits.ending, Duration::from_secs(7 + 3));
    }
}
