//! One attempt of the job once its pods are gathered: begun (the job's record and story, the
//! watches that may end it), run (the workspace, the peer check, the pod's processes), judged
//! (a failure told to the job, the job's verdict, the budget), then restarted in place or
//! finished with the pod's last line.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tracing::{debug, info, warn};

use super::ending;
use super::ending::{after_restarts, for_the_job, post_hang, verdict_limits, EVENTS_FLUSH};
use super::gathering::Attempt;
use super::lifecycle::{self, Budget};
use super::peer_check::{named_peers, peers_to_check, silent_peers, PEER_CHECK_TIMEOUT};
use super::processes::drive;
use super::record::{JobRecord, PREEMPTION_RECORD_WAIT};
use super::rendezvous::{channel_without_secret, UNJOINED_LOOK_UNBOUNDED};
use super::setup::{node_name, now_utc};
use super::waits::{interruptible, Breaks};
use crate::config::Config;
use crate::control::Channel;
use crate::error::{ConfigError, Error};
use crate::events::{JobEvents, Kind};
use crate::exit::{self, Outcome};
use crate::ledger::Ledger;
use crate::membership::{Loss, PodAddress};
use crate::plan::{Plan, PodEntry};
use crate::supervise::Supervisor;
use crate::vocabulary::JOB_STOPPED;
use crate::workspace;

/// What this launcher's attempts carry from one to the next.
pub(super) struct Attempts {
    /// Where the job's restarts stand before the next attempt (its epoch: the next; its
    /// allowances: this launcher's own, which it says in its hello).
    pub ledger: Ledger,
    /// The pods of the attempt that ended, when restarting.
    pub members_before: Vec<PodAddress>,
    /// The workspace preparation of an attempt that was lost while it ran, if it may still run.
    preparing_before: Option<JoinHandle<Result<(), Error>>>,
    /// The job's Kubernetes events, once this launcher is the one that posts them.
    events: Option<JobEvents>,
}

impl Attempts {
    /// The first attempt's count starts where the batch system's own restarts of the job left it.
    pub fn new(config: &Config) -> Attempts {
        let ledger = Ledger {
            epoch: config.restarts_before(),
            max_preemptions: config.control.max_preemptions,
            ..Ledger::first(config.control.max_restarts)
        };
        if ledger.epoch > 0 {
            let n = ledger.epoch;
            info!(
                "the batch system has restarted the job {n} times: the restart count starts at {n}"
            );
        }
        Attempts {
            ledger,
            members_before: Vec::new(),
            preparing_before: None,
            events: None,
        }
    }
}

/// An attempt under way.
pub(super) struct Running {
    plan: Plan,
    /// "pod p-1 (trainer id 1 of 3)": who this launcher is, in what it tells the others.
    who: String,
    channel: Option<Channel>,
    /// The attempt's ledger (its epoch: the plan's restart count).
    ledger: Ledger,
    /// Where the job's count is kept (the Job object), when this launcher coordinates.
    record: Option<JobRecord>,
    /// Whether this launcher tells the job's story (its events): the coordinator, else rank 0.
    posts: bool,
    /// Set when this pod finds it cannot join the job's channel: it ends as bad configuration.
    unjoined: Arc<OnceLock<ConfigError>>,
}

/// Begins an attempt: the job's record and its "Started" event (one launcher tells them), and
/// the watches that may end it from here on — a peer's loss, the channel's, a coordinator this
/// pod cannot join, and for a pserver pod the trainers' end.
pub(super) fn begin(
    attempt: Attempt,
    attempts: &mut Attempts,
    config: &Config,
    supervisor: &mut Supervisor,
    my_ip: IpAddr,
    pod: &str,
) -> Running {
    let Attempt {
        plan,
        who,
        mut channel,
        peer_loss,
        trainers_done,
        ledger,
        api,
        coordinator_unjoined,
        ..
    } = attempt;
    let posts = match &channel {
        Some(channel) => channel.coordinates(),
        None => plan.trainer_id == Some(0),
    };
    let coordinates = channel.as_ref().is_some_and(Channel::coordinates);
    let record = JobRecord::of(config, api.as_ref()).filter(|_| coordinates);
    if let Some(record) = &record {
        // In the background: the start is not held back by it.
        drop(record.write(ledger.recorded()));
    }
    if let (true, None, Some(api)) = (posts, &attempts.events, api) {
        // POD_NAME, else the pod's name as found by its address (under hostNetwork pods
        // share one, so the name given wins).
        let own = plan.pods.iter().find(|entry| entry.ip == plan.pod_ip);
        let name = match (&config.topology.pod_name, own) {
            (Some(name), _) => name.clone(),
            (None, Some(entry)) => entry.name.clone(),
            (None, None) => pod.to_string(),
        };
        attempts.events = Some(JobEvents::start(api, name, node_name()));
    }
    if let Some(events) = attempts.events.as_mut().filter(|_| posts) {
        let restarted = match plan.restart_count {
            0 => String::new(),
            n => format!(" ({})", lifecycle::restarts_said(n)),
        };
        let found = match config.control.elastic {
            Some(elastic) if plan.pods.len() < elastic.max_pods as usize => format!(
                "{} of the job's {} pods found (elastic, at least {})",
                plan.pods.len(),
                elastic.max_pods,
                elastic.min_pods
            ),
            _ => format!("all {} pods of the job found", plan.pods.len()),
        };
        events.post(
            Kind::Normal,
            "Started",
            &format!("{found}: training started{restarted}"),
        );
        if let Some((reason, message)) =
            resized(&attempts.members_before, &plan.pods, config.control.elastic)
        {
            events.post(Kind::Normal, reason, &message);
        }
    }
    let mut losses = Vec::new();
    if let (true, Some(loss)) = (config.topology.watch_peers, peer_loss) {
        losses.push(loss.map(Loss::of_pod).boxed());
    }
    if let Some(channel) = &mut channel {
        losses.push(channel.losses());
    }
    let unjoined = Arc::new(OnceLock::new());
    if let Some(coordinator) = coordinator_unjoined {
        // As long as a coordinator would go on gathering, waiting for this pod's hello.
        let looking = config
            .timing
            .wait_timeout
            .unwrap_or(UNJOINED_LOOK_UNBOUNDED);
        let found = unjoined.clone();
        losses.push(channel_without_secret(my_ip, coordinator, looking, found).boxed());
    }
    supervisor.forget_watches();
    if !losses.is_empty() {
        let first = futures::future::select_all(losses).map(|(reason, _, _)| reason);
        supervisor.watch_peers(first.boxed());
    }
    // A pserver pod ends with the trainers: the API shows them all Succeeded, or the
    // coordinator says so first (a Succeeded pod the API no longer lists is never counted).
    if let Some(done) = trainers_done {
        let done = match &channel {
            Some(channel) => {
                let said = channel.job_succeeded().map(Ok);
                futures::future::select(done, said)
                    .map(|either| either.factor_first().0)
                    .boxed()
            }
            None => done,
        };
        supervisor.end_when(done);
    }
    Running {
        plan,
        who,
        channel,
        ledger,
        record,
        posts,
        unjoined,
    }
}

/// Runs the attempt: the workspace prepared and the peers checked — the attempt's loss or a
/// stop meanwhile ends it there, before anything more is started — then the pod's processes,
/// supervised until they end. The attempt's end; or (the outer error) the workspace's own
/// failure, which ends this pod at once: its channel dropped, the others see a loss they may
/// restart from, as from a pod that died.
pub(super) async fn run(
    running: &Running,
    attempts: &mut Attempts,
    config: &Config,
    supervisor: &mut Supervisor,
    my_ip: IpAddr,
) -> Result<Result<Outcome, Error>, Error> {
    let plan = &running.plan;
    let for_workspace = plan.clone();
    let mut preparing = tokio::task::spawn_blocking(move || workspace::prepare(&for_workspace));
    let doing = "preparing the workspace";
    let prepared = interruptible(Some(supervisor), doing, Breaks::AlsoLoss, &mut preparing);
    // The workspace's own failure ends the pod; a stop or the attempt's loss, the attempt.
    let prepared = match prepared.await {
        Ok(joined) => {
            joined.map_err(|e| Error::io(format!("{doing} failed"), e.into()))??;
            Ok(())
        }
        Err(lost @ Error::PeerLost { .. }) => {
            attempts.preparing_before = Some(preparing);
            Err(lost)
        }
        Err(ended) => Err(ended),
    };
    let checked = match (prepared, peers_to_check(plan, config)) {
        (Err(ended), _) => Err(ended),
        (Ok(()), peers) if peers.is_empty() => Ok(Vec::new()),
        (Ok(()), peers) => {
            let doing = format!(
                "checking that every peer's trainer endpoint answers from {my_ip} ({}, at most {} s each)",
                crate::vocabulary::count(peers.len(), "peer"),
                PEER_CHECK_TIMEOUT.as_secs()
            );
            info!("{doing}");
            interruptible(
                Some(supervisor),
                &doing,
                Breaks::AlsoLoss,
                silent_peers(my_ip, peers),
            )
            .await
        }
    };
    let channel = running.channel.as_ref();
    let result = match checked {
        Ok(silent) if silent.is_empty() => {
            drive(supervisor, plan, config, channel, &running.who).await
        }
        Ok(silent) => Err(Error::PeersUnreachable {
            peers: named_peers(&silent),
            from: my_ip,
            limit_s: PEER_CHECK_TIMEOUT.as_secs(),
        }),
        // Stopped before the trainer started: told to the job like any end (a preemption
        // as such: the restart around the replacement spends nothing).
        Err(stopped) => {
            if let (Some(channel), Error::Stopped { signal, .. }) = (channel, &stopped) {
                if *signal == nix::libc::SIGTERM && config.timing.checkpoint().is_some() {
                    let reason = "preempted (SIGTERM before its trainer started)";
                    channel.preempted(&format!("{} at {}: {reason}", running.who, now_utc()));
                }
            }
            Err(stopped)
        }
    };
    // A pod that cannot join the job's channel ends as bad configuration, whatever its
    // children did once stopped.
    Ok(match running.unjoined.get() {
        Some(error) => Err(Error::Config(error.clone())),
        None => result,
    })
}

/// An attempt's end as judged for the job (its result apart, which decides what follows).
pub(super) struct Judged {
    pub budget: Budget,
    /// "pod p-1 (...) at <time>": this pod's end as told to the job, and the whole line.
    who_at: String,
    said: String,
    succeeded: bool,
    hung: bool,
    /// The preemption's record on the Job, while it is written.
    preemption_recorded: Option<JoinHandle<()>>,
}

/// Judges the attempt's end: a failure told to the job, the job's verdict waited for (whether
/// the job may restart depends on what the others did), a preemption recorded on the Job as
/// soon as it is known, and the budget the restart would spend. A stop signal during the wait
/// for the verdict ends this pod (it is being deleted), and says so.
pub(super) async fn judge(
    running: &Running,
    mut result: Result<Outcome, Error>,
    config: &Config,
    supervisor: &mut Supervisor,
) -> (Result<Outcome, Error>, Judged) {
    let channel = running.channel.as_ref();
    let hung = match &result {
        Ok(outcome) => outcome.code == exit::HANG,
        Err(e) => e.exit_code() == exit::HANG,
    };
    // How this pod's failure, if it is one, is told to the job (and names it on every pod).
    let who_at = format!("{} at {}", running.who, now_utc());
    let said = match &result {
        Ok(outcome) => format!("{who_at}: {}", outcome.reason),
        Err(e) => format!("{who_at}: {e}"),
    };
    let succeeded = matches!(&result, Ok(o) if o.code == exit::SUCCESS);
    if let (Some(channel), false) = (channel, succeeded) {
        ending::tell_failure(channel, &result, &said).await;
    }
    // A preemption may take every pod at once (a Kueue suspension): recorded as soon as it
    // is known, the pods created again count it, and it spends nothing there either.
    // Written meanwhile: only a pod that ends waits for it (`finish`), not the verdict.
    let record_preemption = |preempted: bool, grown: bool| {
        running.record.as_ref().filter(|_| preempted).map(|record| {
            // The epoch that ended, with its free restart counted.
            let after = running.ledger.after_attempt(true, grown);
            record.write(
                Ledger {
                    epoch: running.ledger.epoch,
                    ..after
                }
                .recorded(),
            )
        })
    };
    let preemption_recorded = record_preemption(ending::preempted(channel), ending::grown(channel));
    let recoverable = lifecycle::recoverable(&result);
    let wait = match (channel, succeeded) {
        (Some(channel), false) => {
            ending::verdict_wait(channel, &result, running.ledger, verdict_limits(config))
        }
        _ => None,
    };
    let may_restart = match (channel, wait) {
        (Some(channel), Some(limit)) => {
            let waiting = channel.verdict(limit);
            let failure = match &result {
                Ok(outcome) => outcome.reason.clone(),
                Err(e) => e.to_string(),
            };
            let doing = format!("waiting for the job's verdict after: {failure}");
            match interruptible(Some(supervisor), &doing, Breaks::StopOnly, waiting).await {
                Ok(verdict) => verdict && recoverable,
                Err(stopped) => {
                    result = Err(stopped);
                    false
                }
            }
        }
        // Every failed launcher says its children are stopped, for the others' verdict.
        (Some(channel), None) => {
            if !succeeded {
                channel.stopped();
            }
            channel.may_restart()
        }
        (None, _) => false,
    };
    // Read again once the verdict is in: the cause may have come with it.
    let preempted = ending::preempted(channel);
    let grown = ending::grown(channel);
    let preemption_recorded = preemption_recorded.or_else(|| record_preemption(preempted, grown));
    let budget = Budget {
        ledger: running.ledger,
        may_restart,
        preempted,
    };
    let judged = Judged {
        budget,
        who_at,
        said,
        succeeded,
        hung,
        preemption_recorded,
    };
    (result, judged)
}

/// The job restarts in place: said with the job's first cause and what the restart spends,
/// the channel closed, a lost attempt's workspace preparation waited for (the next one's
/// must not run beside it), the count moved on.
pub(super) async fn restart(
    running: Running,
    judged: Judged,
    reason: String,
    attempts: &mut Attempts,
    supervisor: &mut Supervisor,
) -> Result<(), Error> {
    let Judged { budget, hung, .. } = judged;
    // The job's first cause, the same line on every pod, when the channel told it.
    let cause = running.channel.as_ref().and_then(Channel::cause);
    let hang = cause.as_ref().map_or(hung, |cause| cause.hang);
    let grown = budget.preempted && cause.as_ref().is_some_and(|cause| cause.grown);
    let reason = cause.map_or(reason, |cause| cause.reason);
    let restart = budget.ledger.restart_said(budget.preempted, grown);
    warn!("{reason}: restarting the job ({restart})");
    if let Some(events) = attempts.events.as_mut().filter(|_| running.posts) {
        post_hang(events, hang, &reason);
        events.post(Kind::Warning, "Restarting", &format!("{restart}: {reason}"));
    }
    if let Some(mut channel) = running.channel {
        channel.finish(false).await;
    }
    // Waited for before gathering, so that the job's wait for this pod is bounded as any
    // gathering is, and a stop signal ends this pod as it would while gathering.
    if let Some(earlier) = attempts.preparing_before.take() {
        let doing = "waiting for the workspace preparation of the attempt that was lost to end";
        info!("{doing}");
        let ended = interruptible(Some(supervisor), doing, Breaks::StopOnly, earlier);
        match ended.await? {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!("the lost attempt's workspace preparation: {e}"),
            Err(e) => debug!("the lost attempt's workspace preparation: {e}"),
        }
    }
    // The job's count moves on; the allowances this launcher says stay its own.
    attempts.ledger = Ledger {
        max_restarts: attempts.ledger.max_restarts,
        max_preemptions: attempts.ledger.max_preemptions,
        ..budget.ledger.after_attempt(budget.preempted, grown)
    };
    attempts.members_before = running.plan.pods.iter().map(PodEntry::address).collect();
    Ok(())
}

/// The pod ends: a preemption's record waited for (briefly), the others' reports waited for,
/// the job's end posted, and the pod's last line — the job's first cause first when another
/// pod's.
pub(super) async fn finish(
    running: Running,
    judged: Judged,
    result: Result<Outcome, Error>,
    attempts: &mut Attempts,
    config: &Config,
    supervisor: &mut Supervisor,
) -> Outcome {
    if let Some(written) = judged.preemption_recorded {
        let job = &config.topology.job_name;
        let limit = PREEMPTION_RECORD_WAIT.as_secs();
        info!("waiting for the preemption's record on Job {job} (at most {limit} s)");
        if timeout(PREEMPTION_RECORD_WAIT, written).await.is_err() {
            warn!(
                "the preemption may not be recorded on Job {job} (no answer within {limit} s): if every pod of the job is lost, its restart may spend a restart"
            );
        }
    }
    let mut cause = None;
    if let Some(mut channel) = running.channel {
        // A stop signal ends the wait for the others; the pod's outcome stands.
        let _ = interruptible(
            Some(&mut *supervisor),
            "waiting for the other launchers to report",
            Breaks::StopOnly,
            channel.finish(judged.succeeded),
        )
        .await;
        // Read last: a loss told while the others reported is the job's too.
        cause = channel.cause();
    }
    supervisor.finish();
    let reason = cause.as_ref().map(|cause| cause.reason.clone());
    let outcome = for_the_job(result, &judged.who_at, &judged.said, reason);
    let outcome = after_restarts(outcome, running.plan.restart_count);
    if let Some(events) = attempts.events.as_mut().filter(|_| running.posts) {
        // The job's end, not this pod's: a coordinator that succeeded while another pod
        // failed tells the failure.
        match &cause {
            Some(cause) => {
                post_hang(events, cause.hang, &cause.reason);
                let line = format!("{JOB_STOPPED}{}", cause.reason);
                events.post_final(Kind::Warning, "Failed", &line);
            }
            None if outcome.code == exit::SUCCESS => {
                events.post_final(Kind::Normal, "Succeeded", &outcome.reason)
            }
            None => {
                post_hang(events, judged.hung, &outcome.reason);
                events.post_final(Kind::Warning, "Failed", &outcome.reason);
            }
        }
        events.flush(EVENTS_FLUSH).await;
    }
    outcome
}

/// An elastic job that starts with other pods than its last attempt: the event that says so
/// (its reason, its message), naming the pods that left or came. None for the first start and
/// for a job that is not elastic.
fn resized(
    before: &[PodAddress],
    now: &[PodEntry],
    elastic: Option<crate::config::Elastic>,
) -> Option<(&'static str, String)> {
    let elastic = elastic?;
    if before.is_empty() || before.len() == now.len() {
        return None;
    }
    let of = |pods: usize| format!("{pods} of {}", elastic.max_pods);
    let change = format!("from {} to {} pods", of(before.len()), of(now.len()));
    if now.len() < before.len() {
        let gone: Vec<&str> = before
            .iter()
            .filter(|b| !now.iter().any(|n| n.name == b.name))
            .map(|b| b.name.as_str())
            .collect();
        Some((
            "ScaledDown",
            format!(
                "{change}: {} not Running again within the elastic wait of {} s",
                gone.join(", "),
                elastic.wait.as_secs()
            ),
        ))
    } else {
        let came: Vec<&str> = now
            .iter()
            .filter(|n| !before.iter().any(|b| b.name == n.name))
            .map(|n| n.name.as_str())
            .collect();
        Some(("ScaledUp", format!("{change}: {} joined", came.join(", "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of an elastic job's size: down, naming the pods gone and the wait; up,
    /// naming the pods come; nothing at the first start, at the same size, or when not elastic.
    #[test]
    fn an_elastic_jobs_size_changes_are_told() {
        let pod = |name: &str, last: u8| PodAddress {
            name: name.into(),
            ip: std::net::IpAddr::from([10, 0, 0, last]),
        };
        let entry = |name: &str, last: u8| PodEntry {
            name: name.into(),
            ip: std::net::IpAddr::from([10, 0, 0, last]),
            rank: 0,
            role: "both",
        };
        let elastic = Some(crate::config::Elastic {
            min_pods: 2,
            max_pods: 3,
            wait: std::time::Duration::from_secs(180),
        });
        let three = [pod("j-0", 1), pod("j-1", 2), pod("j-2", 3)];
        let two = [entry("j-0", 1), entry("j-2", 3)];
        assert_eq!(
            resized(&three, &two, elastic),
            Some((
                "ScaledDown",
                "from 3 of 3 to 2 of 3 pods: j-1 not Running again within the elastic wait of 180 s".into()
            ))
        );
        let back = [entry("j-0", 1), entry("j-3", 4), entry("j-2", 3)];
        let before = [pod("j-0", 1), pod("j-2", 3)];
        assert_eq!(
            resized(&before, &back, elastic),
            Some(("ScaledUp", "from 2 of 3 to 3 of 3 pods: j-3 joined".into()))
        );
        assert_eq!(resized(&[], &two, elastic), None);
        assert_eq!(resized(&before, &two, elastic), None);
        assert_eq!(resized(&three, &two, None), None);
    }
}
