//! How an attempt that ended without success is told to the job and waits for its verdict:
//! the steps the attempt loop takes, shared with the drivers' simulation (`driven`), so that
//! what is simulated is what runs.

use std::time::Duration;

use crate::control::Channel;
use crate::error::Error;
use crate::exit::Outcome;
use crate::verdict::{verdict, Standing};

use super::lifecycle;

/// How long a failed launcher waits for the coordinator's word on whether the job may restart.
pub(crate) const FAILED_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Tells the job that this launcher's attempt ended without success (`said`: the reason as
/// every pod names it), and waits a moment for the job's first answer.
pub(crate) async fn tell_failure(channel: &Channel, result: &Result<Outcome, Error>, said: &str) {
    // Told before deciding: whether the job may restart depends on the others.
    let restartable = lifecycle::others_may_restart(result);
    let hang = matches!(result, Err(Error::Hung { .. }));
    channel
        .failed(said, restartable, hang, FAILED_ANSWER_WAIT)
        .await;
}

/// Whether the attempt ended with a preemption, as the coordinator told it (or a follower's
/// own judgement once its coordinator is gone): it spends no restart.
pub(crate) fn preempted(channel: Option<&Channel>) -> bool {
    channel
        .and_then(Channel::cause)
        .is_some_and(|cause| cause.preempted)
}

/// Whether the attempt ended, free, for an elastic job's growth: a grow, which the free
/// preemptions do not count.
pub(crate) fn grown(channel: Option<&Channel>) -> bool {
    channel
        .and_then(Channel::cause)
        .is_some_and(|cause| cause.preempted && cause.grown)
}

/// What the job has spent of its restarts when the attempt ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spent {
    /// The restart epoch that ended.
    pub epoch: u32,
    /// The job's free preemptions before it.
    pub preemptions: u32,
    pub max_restarts: u32,
    /// The job's free preemptions.
    pub max_preemptions: u32,
    /// Of `preemptions`, the elastic job's grows (the free preemptions do not count them).
    pub grows: u32,
}

/// How long a launcher waits for the verdict: after a failure a restart could mend (the others'
/// grace period and the heartbeat timeout, and a margin), and after one that ends this pod
/// whatever it says (a coordinator's: its pod's grace period runs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct VerdictLimits {
    pub recoverable: Duration,
    pub ending: Duration,
}

/// After an end that is no success, told to the job: how long to wait for the coordinator's
/// verdict, or None when its word cannot change this pod's end (the launcher then only says
/// its children are stopped).
pub(crate) fn verdict_wait(
    channel: &Channel,
    result: &Result<Outcome, Error>,
    spent: Spent,
    limits: VerdictLimits,
) -> Option<Duration> {
    // The job's trainers were asked for a checkpoint: the attempt's end may still turn out a
    // free preemption's (a frozen coordinator's silence is judged only after the heartbeat
    // timeout), so the budget alone must not end this pod before the verdict.
    // A checkpoint asked for the job's growth: its restart is free whatever the allowance.
    let free = crate::verdict::preemption_is_free(
        spent.preemptions.saturating_sub(spent.grows),
        spent.max_preemptions,
    ) || channel.growth_asked();
    let preemption_possible = preempted(Some(channel)) || (channel.checkpoint_was_asked() && free);
    let budget_allows = verdict(&Standing {
        spent: spent.epoch.saturating_sub(spent.preemptions),
        max_restarts: spent.max_restarts,
        member_finished: false,
        restartable: true,
        preempted: preemption_possible,
    })
    .is_ok();
    let recoverable = lifecycle::recoverable(result);
    // A failure a restart could mend waits for the verdict. One that ends this pod whatever it
    // says (a stop signal, a command that cannot start, bad configuration) does not, unless
    // this launcher coordinates: only it can decide the others' verdict, within its grace
    // period (the pod may be being deleted).
    if !budget_allows || !(recoverable || channel.coordinates()) {
        return None;
    }
    Some(match recoverable {
        true => limits.recoverable,
        false => limits.ending,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{self, Heard, Joining, Role};
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
            next_epoch: 1,
            growth,
            ..joining(me, Role::Coordinator { listen })
        })
        .await
        .unwrap();
        assert!(matches!(channel.heard().await, Heard::Go { epoch: 1, .. }));
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
    fn joining(me: PodAddress, role: Role) -> Joining {
        Joining {
            role,
            secret: crate::config::Secret(b"ending-test-secret-0123456789abcdef".to_vec()),
            view: String::new(),
            members: Vec::new(),
            who: format!("pod {}", me.name),
            me,
            next_epoch: 0,
            max_restarts: 1,
            preemptions: 0,
            max_preemptions: crate::verdict::UNBOUNDED_PREEMPTIONS,
            nproc_per_pod: 1,
            heartbeat_timeout: Duration::from_secs(2),
            join_grace: Duration::from_secs(5),
            membership: None,
            ended: None,
            progress_check: Duration::ZERO,
            served: Served::default(),
            network: control::tcp(),
            growth: None,
            grows: 0,
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
        let spent = |epoch| Spent {
            epoch,
            preemptions: 0,
            max_restarts: 1,
            max_preemptions: crate::verdict::UNBOUNDED_PREEMPTIONS,
            grows: 0,
        };
        assert!(!channel.checkpoint_was_asked());
        assert_eq!(verdict_wait(&channel, &failed, spent(1), limits), None);
        assert_eq!(
            verdict_wait(&channel, &failed, spent(0), limits),
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
        let role = Role::Follower {
            coordinator,
            recheck: None,
        };
        let _arrival = control::join(joining(arrival, role)).await.unwrap();
        let asked = tokio::time::timeout(Duration::from_secs(10), channel.checkpoint_asked());
        let reason = asked.await.expect("the growth asked for no checkpoint");
        assert!(reason.starts_with(control::GROWS), "{reason}");
        let failed: Result<Outcome, Error> = Ok(Outcome::new(3, "trainer exited with status 3"));
        let limits = VerdictLimits {
            recoverable: Duration::from_secs(17),
            ending: Duration::from_secs(4),
        };
        let spent = Spent {
            epoch: 1,
            preemptions: 0,
            max_restarts: 1,
            max_preemptions: 0,
            grows: 0,
        };
        assert_eq!(
            verdict_wait(&channel, &failed, spent, limits),
            Some(Duration::from_secs(17))
        );
    }
}
