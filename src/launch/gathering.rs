//! Gathering: the job's pods found (or learnt from the coordinator), the channel joined, and
//! the coordinator's word waited for — the start of an attempt (its epoch, its membership),
//! a gathering again, or the job's end. Bounded by the wait timeout, whatever is waited for.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::{sleep, Instant};
use tracing::info;

use crate::config::{Config, Secret};
use crate::control::{Channel, Heard};
use crate::error::ConfigError;
use crate::error::Error;
use crate::ledger::Ledger;
use crate::loss::Loss;
use crate::membership::{Membership, PodAddress, Served};
use crate::peers;
use crate::supervise::{or_never, Supervisor};

use super::ending::{tell_followers_the_end, VERDICT_STOP_MARGIN};
use super::ready::Attempt;
use super::rendezvous::{
    coordinator_elsewhere, coordinator_without_secret, join_channel, join_grace, joining,
    recheck_of, Located,
};
use super::setup::on_node;
use super::setup::{children_grace_seen, plan_for, who};
use super::waits::{interruptible, Breaks};
use super::why_waiting::WhyWaiting;
use super::Own;
use crate::control::{self, ChannelRole, Joining};
use crate::coordination;
use std::net::SocketAddr;
use tracing::warn;

/// Between two rounds of gathering, doubling from the first to the last: a round that ended at
/// once (views that differ) must not become a busy loop.
pub(super) const REGATHER_PAUSE_FIRST: Duration = Duration::from_millis(250);

pub(super) const REGATHER_PAUSE_LAST: Duration = Duration::from_secs(5);

/// How long a pod an elastic job turned away waits before it asks again.
pub(super) const TURNED_AWAY_PAUSE: Duration = Duration::from_secs(30);

/// How long after a heartbeat timeout a coordinator that refused the start still tells members
/// that join again (their link broke before they heard it): time to gather again.
pub(super) const REFUSAL_SERVED: Duration = Duration::from_secs(15);

pub(super) const REFUSAL_SERVED_AT_MOST: Duration = Duration::from_secs(25);

impl Own {
    /// Finds the job's pods and, with a control channel, waits until every launcher has found the
    /// same ones; the coordinator names the restart epoch. A membership that changes meanwhile
    /// (a pod lost, views that differ) means discovering again, at no cost to the restart budget.
    /// With a named coordinator (`--coordinator`, Kubernetes discovery), only the coordinator finds
    /// the pods: every other launcher learns them from it and makes no API request at all.
    pub(super) async fn gather(
        &self,
        config: &Config,
        supervisor: &mut Supervisor,
        reporting: &control::Reporting,
        ledger: Ledger,
        members_before: &[PodAddress],
        alive: BTreeSet<String>,
    ) -> Result<Gathered, Error> {
        let mut gathering = Gathering {
            why: WhyWaiting::of(config),
            own: self,
            reporting,
            ledger,
            members_before,
            began: Instant::now(),
            rounds: 0,
            absent: Default::default(),
            alive,
            no_coordinator: None,
        };
        loop {
            if gathering.rounds > 0 {
                gathering.pause(config, supervisor).await?;
            }
            gathering.rounds += 1;
            gathering.no_coordinator = None;
            if let Some(ended) = gathering.round(config, supervisor).await? {
                return Ok(ended);
            }
        }
    }
}

/// A gathering: what it starts from, and where its rounds stand.
struct Gathering<'a> {
    /// A follower of a named coordinator: why it cannot reach it, asked of the API.
    why: Option<WhyWaiting>,
    /// This pod's secret, input files and address.
    own: &'a Own,
    /// What the channel reports of the job's progress, and where.
    reporting: &'a control::Reporting,
    ledger: Ledger,
    /// For a restart, the members of the attempt that ended.
    members_before: &'a [PodAddress],
    /// Since when this pod has gathered; a pod turned away (the job trains without it) counts
    /// from its last turning away.
    began: Instant,
    rounds: u32,
    /// An elastic job's pods whose launchers did not say hello within the elastic wait: no
    /// member of this gathering's start (their node may be dead, their pod Running for
    /// minutes).
    absent: BTreeSet<String>,
    /// An elastic job's pods whose launchers the coordinator heard: at the last attempt's
    /// verdict, and in this gathering's rounds that ended without a start; alive, whatever
    /// their Ready condition says.
    alive: BTreeSet<String>,
    /// Why the last round ended when it was the coordinator's name that had no address.
    no_coordinator: Option<String>,
}

impl Gathering<'_> {
    /// Between two rounds: a pause that doubles, within the wait timeout. A launcher that
    /// never agrees (another job name, a frozen one whose pod still runs) or a coordinator
    /// that never comes back must not keep the job in a loop it never leaves.
    async fn pause(&self, config: &Config, supervisor: &mut Supervisor) -> Result<(), Error> {
        let rounds = self.rounds;
        if let Some(limit) = config.timing.wait_timeout {
            if self.began.elapsed() > limit {
                let status = match &self.no_coordinator {
                    Some(why) => format!("the coordinating launcher's address: {why}"),
                    None => format!(
                        "the job's launchers did not agree on a start in {rounds} rounds of gathering (the lines above say why each ended)"
                    ),
                };
                return Err(Error::PeersTimeout {
                    waited_s: self.began.elapsed().as_secs(),
                    status,
                });
            }
        }
        let pause = REGATHER_PAUSE_FIRST * 2u32.saturating_pow(rounds.min(8) - 1);
        let pause = pause.min(REGATHER_PAUSE_LAST);
        interruptible(
            Some(supervisor),
            "waiting to gather again",
            Breaks::AlsoHup,
            sleep(pause),
        )
        .await
    }

    /// One round: the attempt gathered (or the job's end), or None to gather again.
    async fn round(
        &mut self,
        config: &Config,
        supervisor: &mut Supervisor,
    ) -> Result<Option<Gathered>, Error> {
        if let Some(secret) = &self.own.secret {
            // A coordinator named by DNS whose name has no address yet: there is nothing to
            // join, so the pods are not listed again meanwhile. (`join_channel` resolves it
            // again after discovery, which may take long: by then the name may have moved.)
            match coordinator_elsewhere(config, self.own.my_ip).await? {
                Located::NotYet(why) => {
                    if let Some(asked) = &mut self.why {
                        // A stop signal is not held back by a slow API server.
                        let said = asked.say(&why, self.reporting);
                        let doing = "asking why the coordinator has no address";
                        interruptible(Some(&mut *supervisor), doing, Breaks::AlsoHup, said).await?;
                    }
                    self.coordinator_not_yet(why);
                    return Ok(None);
                }
                Located::At(coordinator) if coordination::membership_from_coordinator(config) => {
                    let followed = self.follow(config, supervisor, secret, coordinator);
                    return match followed.await? {
                        Followed::Gathered(gathered) => Ok(Some(gathered)),
                        // The wait for a place in the job starts again.
                        Followed::TurnedAway => {
                            self.began = Instant::now();
                            Ok(None)
                        }
                        Followed::Again => Ok(None),
                    };
                }
                Located::At(_) | Located::ThisPod | Located::NotNamed | Located::NoChannel => {}
            }
        }
        let (mut attempt, membership, me) = self.discover(config, supervisor).await?;
        let Some(secret) = &self.own.secret else {
            attempt.plan = attempt.plan.for_restart(self.ledger.epoch);
            attempt.coordinator_unjoined = coordinator_without_secret(config, &membership, &me);
            return Ok(Some(Gathered::Attempt(Box::new(attempt))));
        };
        let first = self.members_before.is_empty();
        let joined = join_channel(
            secret.clone(),
            self.reporting,
            &attempt,
            config,
            &membership,
            &me,
            first,
        );
        let channel = match joined.await? {
            Located::NoChannel | Located::ThisPod | Located::NotNamed => {
                attempt.plan = attempt.plan.for_restart(self.ledger.epoch);
                return Ok(Some(Gathered::Attempt(Box::new(attempt))));
            }
            Located::At(channel) => channel,
            Located::NotYet(why) => {
                self.coordinator_not_yet(why);
                return Ok(None);
            }
        };
        self.start(config, supervisor, attempt, channel).await
    }

    /// The coordinator's name has no address: said at first, then with why (`WhyWaiting`)
    /// at most every 30 s, not at every round.
    fn coordinator_not_yet(&mut self, why: String) {
        if self.no_coordinator.is_none() && self.rounds <= 1 {
            info!("control channel: waiting for the coordinator's address: {why}");
        }
        self.no_coordinator = Some(why);
    }

    /// Finds the job's pods and plans this pod's part: the attempt (without its channel yet),
    /// the membership and this pod in it.
    async fn discover(
        &self,
        config: &Config,
        supervisor: &mut Supervisor,
    ) -> Result<(Attempt, Membership, crate::membership::Me), Error> {
        let members_before = self.members_before;
        let names: Vec<String> = members_before.iter().map(|m| m.name.clone()).collect();
        let round = peers::Round {
            members_before: &names,
            absent: &self.absent,
            since: self.began,
            alive: &self.alive,
            not_ready_after: join_grace(config, supervisor.grace, true),
            own_name: config.topology.pod_name.as_deref(),
            own_ip: self.own.my_ip,
            told: Some(&|awaited| self.reporting.waiting(awaited)),
            // Only a named coordinator finds the pods where its followers learn them from it.
            keep_wait_on: coordination::job_keeping_the_count(config)
                .filter(|_| coordination::membership_from_coordinator(config)),
        };
        let found = match wait_for_peers(config, Some(&mut *supervisor), round).await {
            // Followers that learn the job only from this coordinator would wait for it until
            // their --wait-timeout: they hear the end instead.
            Err(error)
                if !members_before.is_empty()
                    && coordination::membership_from_coordinator(config)
                    && !matches!(error, Error::Stopped { .. }) =>
            {
                if let Some(secret) = &self.own.secret {
                    let reason = format!("the coordinating launcher ended the job: {error}");
                    let my_ip = self.own.my_ip;
                    tell_followers_the_end(config, secret, my_ip, members_before, reason).await;
                }
                return Err(error);
            }
            found => found?,
        };
        let (plan, membership, me) = plan_for(config, &found, self.own.my_ip, &self.own.inputs)?;
        let children_grace = match found.own_grace {
            Some(pod) => children_grace_seen(config, pod),
            None => config.timing.grace_period,
        };
        supervisor.grace = children_grace;
        let peers::Found {
            peer_loss,
            trainers_done,
            api,
            served,
            ..
        } = found;
        let who = who(&me.name, &plan, config);
        let attempt = Attempt {
            plan,
            who,
            channel: None,
            peer_loss,
            trainers_done,
            ledger: self.ledger,
            api,
            served,
            coordinator_unjoined: None,
            children_grace,
        };
        Ok((attempt, membership, me))
    }

    /// Joined: waits for the coordinator's word. `Go`: the attempt, with its channel and the
    /// agreed ledger; the job's success; or None to gather again (the pods the coordinator
    /// left out of the next start remembered).
    async fn start(
        &mut self,
        config: &Config,
        supervisor: &mut Supervisor,
        mut attempt: Attempt,
        mut channel: Channel,
    ) -> Result<Option<Gathered>, Error> {
        // The trainers' watch, started anew if the API refuses it while this pod gathers: the
        // attempt judges a refusal at its start, as it always did.
        let watched = attempt
            .api
            .clone()
            .zip(config.topology.trainers_to_finish.clone());
        let again = move || {
            watched
                .clone()
                .map(|(api, group)| peers::kubernetes::all_succeeded(api, group).boxed())
        };
        let heard = interruptible(
            Some(supervisor),
            "waiting for the job's launchers",
            Breaks::AlsoHup,
            heard_or_lost(
                &mut channel,
                &mut attempt.peer_loss,
                &mut attempt.trainers_done,
                again,
            ),
        )
        .await?;
        let heard = match heard {
            News::Heard(heard) => heard,
            News::JobSucceeded(reason) => {
                channel.close().await;
                return Ok(Some(Gathered::JobSucceeded(reason)));
            }
        };
        let per_pod = config.topology.processes.per_pod;
        let served = refusal_served(config);
        if let Some(start) = started(heard, &mut channel, per_pod, served).await? {
            attempt.plan = attempt.plan.for_restart(start.ledger.epoch);
            attempt.ledger = start.ledger;
            attempt.channel = Some(channel);
            return Ok(Some(Gathered::Attempt(Box::new(attempt))));
        }
        self.leave_out(&channel);
        Ok(None)
    }

    /// What the coordinator leaves out of the next start. Only by a coordinator that has run
    /// an attempt: every trainer of the job was then its own, and a live member has heard the
    /// end, stopped its children and said hello within the join grace. A fresh coordinator
    /// may find a pod still training an attempt it never ran (the one before its pod's
    /// replacement): it awaits every pod.
    fn leave_out(&mut self, channel: &Channel) {
        let left_out = channel.attendance();
        let silent: Vec<String> = left_out
            .silent
            .into_iter()
            .filter(|_| !self.members_before.is_empty())
            .collect();
        if !silent.is_empty() {
            info!(
                "elastic job: left out of the next start, their launchers did not say hello within the elastic wait: {}",
                silent.join(", ")
            );
        }
        self.absent
            .extend(silent.into_iter().chain(left_out.turned_away));
        // Who said hello in the round that just ended joins who was heard before: a round cut
        // short is no proof that a launcher heard earlier died (one that did is silent for the
        // next round's whole hello wait, and `absent` leaves it out then).
        self.alive.extend(left_out.alive);
    }
}

/// What the channel says next while the attempt gathers. A pod the API shows lost meanwhile
/// means gathering again; the coordinator's launcher hands it to its channel, which decides
/// it in the same place as `Go` (before it: gather again, free; after it: the job's loss), so
/// that a `Go` already on its way to the followers is never undone by one launcher alone. A
/// follower that has said hello leaves it to the coordinator, which watches the same pods.
/// The job's success told meanwhile (the coordinator's goodbye, or every trainer pod Succeeded
/// for a pserver pod of the split layout) ends the gathering too: a pserver pod that came back
/// after its part was served has nothing left to start.
/// `trainers_done`: a split pserver pod's watch of the trainer pods (all Succeeded); `again`
/// starts it anew when the API refuses it meanwhile.
pub(super) async fn heard_or_lost(
    channel: &mut Channel,
    peer_loss: &mut Option<BoxFuture<'static, String>>,
    trainers_done: &mut Option<BoxFuture<'static, Result<String, String>>>,
    again: impl Fn() -> Option<BoxFuture<'static, Result<String, String>>>,
) -> News {
    let mut job_succeeded = channel.job_succeeded();
    let mut watching_trainers = true;
    loop {
        let lost = tokio::select! {
            biased;
            heard = channel.heard() => return News::Heard(heard),
            reason = &mut job_succeeded => return News::JobSucceeded(reason),
            done = or_never(trainers_done.as_mut()), if watching_trainers => {
                match done {
                    Ok(reason) => return News::JobSucceeded(reason),
                    Err(refusal) => {
                        info!("{refusal}: the trainer pods are watched again when the attempt starts");
                        *trainers_done = again();
                        watching_trainers = false;
                        continue;
                    }
                }
            }
            lost = or_never(peer_loss.as_mut()) => lost,
        };
        // Spent: the channel reports the loss from now on.
        *peer_loss = None;
        if channel.coordinates() {
            channel.pod_lost(lost);
        } else if channel.said_hello() {
            info!("{lost}: waiting for the coordinator's word");
        } else {
            return News::Heard(Heard::Regather(lost));
        }
    }
}

/// What the coordinator says to a follower that watches nothing of the API, or the job's
/// success it tells meanwhile.
async fn heard_or_succeeded(channel: &mut Channel) -> News {
    let job_succeeded = channel.job_succeeded();
    tokio::select! {
        biased;
        heard = channel.heard() => News::Heard(heard),
        reason = job_succeeded => News::JobSucceeded(reason),
    }
}

/// What a gathering came to.
pub(super) enum Gathered {
    /// An attempt to run.
    Attempt(Box<Attempt>),
    /// The job succeeded meanwhile (why): nothing left for this pod to start.
    JobSucceeded(String),
}

/// What the channel said while a gathering waited, or the job's success.
pub(super) enum News {
    Heard(Heard),
    JobSucceeded(String),
}

/// What the coordinator said to start an attempt.
pub(super) struct Start {
    pub(super) ledger: Ledger,
    pub(super) membership: Option<Membership>,
}

/// How long a coordinator that refused the start tells members that join again: a heartbeat
/// timeout and time to gather again, within the pod's grace period (the kubelet's default
/// when unknown) less a margin, since a stop meanwhile is no longer heard.
pub(super) fn refusal_served(config: &Config) -> Duration {
    let grace = config
        .timing
        .pod_grace
        .unwrap_or(REFUSAL_SERVED_AT_MOST + VERDICT_STOP_MARGIN);
    (config.control.heartbeat_timeout + REFUSAL_SERVED)
        .min(REFUSAL_SERVED_AT_MOST)
        .min(grace.saturating_sub(VERDICT_STOP_MARGIN))
}

/// What the channel's answer to a gathering means: start (the epoch, and the membership when
/// the coordinator sent it), or gather again (None, the channel closed), or the job's end.
pub(super) async fn started(
    heard: Heard,
    channel: &mut Channel,
    nproc_per_pod: u32,
    refusal_served: Duration,
) -> Result<Option<Start>, Error> {
    match heard {
        Heard::Go { ledger, membership } => {
            if ledger.epoch > 0 {
                info!("restart epoch {}: starting again", ledger.epoch);
            }
            Ok(Some(Start { ledger, membership }))
        }
        Heard::Regather(reason)
        | Heard::Lost(Loss {
            reason,
            restart: true,
            ..
        }) => {
            info!("{reason}: discovering the job's pods again");
            channel.close().await;
            Ok(None)
        }
        Heard::Lost(Loss {
            reason,
            restart: false,
            ..
        }) => {
            channel.close().await;
            Err(Error::PeerLost {
                reason,
                stopped: "nothing (no process had started)".into(),
            })
        }
        Heard::Refused(reason) => {
            // A coordinator tells whoever joins again, until all have heard it: a link that
            // broke is noticed within a heartbeat timeout, and its launcher gathers again.
            if channel.coordinates() {
                let limit = refusal_served;
                info!("control channel: telling every launcher that the start is refused (at most {} s)", limit.as_secs());
                channel.told_everyone(limit).await;
            }
            channel.close().await;
            let own = nproc_per_pod.to_string();
            let expected = format!("the same on every pod: {reason}");
            Err(ConfigError::new(crate::config::NPROC_PER_POD, &own, expected).into())
        }
    }
}

/// Discovery, ended early by a stop signal when there is a supervisor (`run`); HUP too: a
/// pod being reconfigured should not start with the old settings.
pub(super) async fn wait_for_peers(
    config: &Config,
    supervisor: Option<&mut Supervisor>,
    round: peers::Round<'_>,
) -> Result<peers::Found, Error> {
    interruptible(
        supervisor,
        "waiting for the job's pods",
        Breaks::AlsoHup,
        peers::discover(config, round),
    )
    .await?
}

/// What following a coordinator that sends the membership came to.
pub(super) enum Followed {
    Gathered(Gathered),
    /// Gather again (the job regathers, lost before its start, or sent no membership).
    Again,
    /// Turned away (another number of processes): gather again, the wait for a place in the
    /// job counted from now.
    TurnedAway,
}

impl Gathering<'_> {
    /// One attempt of a follower that does not discover the pods: join the coordinator, and plan
    /// with the membership it sends.
    async fn follow(
        &mut self,
        config: &Config,
        supervisor: &mut Supervisor,
        secret: &Secret,
        coordinator: SocketAddr,
    ) -> Result<Followed, Error> {
        let (my_ip, ledger, reporting) = (self.own.my_ip, self.ledger, self.reporting);
        let why = self.why.as_mut();
        let role = ChannelRole::Follower {
            coordinator,
            recheck: recheck_of(config),
        };
        // Without a name, the coordinator knows this pod by its address.
        let me = PodAddress {
            name: config.topology.pod_name.clone().unwrap_or_default(),
            ip: my_ip,
        };
        // Its rank comes with the membership, after the hello; its view is empty: "send me the
        // membership".
        let shown = Some(me.name.clone()).filter(|name| !name.is_empty());
        let shown = shown.unwrap_or_else(|| my_ip.to_string());
        let mut channel = control::join(Joining {
            who: format!("pod {shown}{}", on_node()),
            reporting: reporting.clone(),
            ..joining(config, secret.clone(), me, role, ledger)
        })
        .await
        .map_err(|e| Error::io("cannot join the control channel", e))?;
        // A pod that arrives once the job has trained to its end (an elastic job's late pod) hears
        // its success instead of a membership.
        let state = channel.state_watch();
        let heard = heard_or_succeeded(&mut channel);
        let unreached = Unreached {
            state,
            why,
            reporting,
            coordinator,
        };
        let word = interruptible(
            Some(supervisor),
            "waiting for the coordinator's membership",
            Breaks::AlsoHup,
            unreached.saying_why(heard),
        )
        .await?;
        let heard = match word {
            News::Heard(heard) => heard,
            News::JobSucceeded(reason) => {
                channel.close().await;
                return Ok(Followed::Gathered(Gathered::JobSucceeded(reason)));
            }
        };
        if let Heard::Refused(reason) = &heard {
            if reason.starts_with(control::TURNED_AWAY) {
                channel.close().await;
                turned_away(reason, supervisor).await?;
                return Ok(Followed::TurnedAway);
            }
        }
        let Some(Start { ledger, membership }) = started(
            heard,
            &mut channel,
            config.topology.processes.per_pod,
            refusal_served(config),
        )
        .await?
        else {
            return Ok(Followed::Again);
        };
        let Some(membership) = membership else {
            info!(
            "the coordinator at {coordinator} sent no membership: discovering the job's pods again"
        );
            channel.close().await;
            return Ok(Followed::Again);
        };
        let attempt = attempt_from_coordinator(config, self.own, membership, ledger, channel)?;
        Ok(Followed::Gathered(Gathered::Attempt(Box::new(attempt))))
    }
}

/// A follower that has not reached its coordinator yet, and how it finds out why.
struct Unreached<'a> {
    /// The channel's state: whether this follower has said hello.
    state: tokio::sync::watch::Receiver<control::ChannelState>,
    why: Option<&'a mut WhyWaiting>,
    reporting: &'a control::Reporting,
    coordinator: SocketAddr,
}

impl Unreached<'_> {
    /// `listened` to its end, saying meanwhile, until this follower has said hello, why the
    /// coordinator cannot be reached (`WhyWaiting::say`, which paces itself); the question
    /// to the API never holds back what the channel says.
    async fn saying_why<T>(self, listened: impl std::future::Future<Output = T>) -> T {
        let Some(why) = self.why else {
            return listened.await;
        };
        tokio::pin!(listened);
        why.trying();
        // The first look after a while: a coordinator that answers at once is never asked about.
        let every = Duration::from_secs(5);
        let mut look = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let at = format!("at {}", self.coordinator);
        loop {
            tokio::select! {
                out = &mut listened => {
                    if self.state.borrow().said_hello {
                        why.reached();
                    }
                    return out;
                }
                _ = look.tick() => {
                    if self.state.borrow().said_hello {
                        continue;
                    }
                    tokio::select! {
                        biased;
                        out = &mut listened => {
                            if self.state.borrow().said_hello {
                                why.reached();
                            }
                            return out;
                        }
                        _ = why.say(&at, self.reporting) => {}
                    }
                }
            }
        }
    }
}

/// Turned away (it runs another number of processes than the elastic job): the job trains on
/// without it, and its exit status would end the Job (its podFailurePolicy). It says why and
/// waits before it asks again (a stop signal ends the wait); its wait timeout counts anew.
async fn turned_away(reason: &str, supervisor: &mut Supervisor) -> Result<(), Error> {
    warn!(
        "{reason}; this pod cannot join until it runs as many, and asks again in {} s (the job trains on without it)",
        TURNED_AWAY_PAUSE.as_secs()
    );
    let pause = sleep(TURNED_AWAY_PAUSE);
    interruptible(Some(supervisor), "turned away", Breaks::AlsoHup, pause).await?;
    Ok(())
}

/// A follower's attempt from the membership its coordinator sent: planned as if it had found
/// the pods itself, watching nothing of the API.
fn attempt_from_coordinator(
    config: &Config,
    own: &Own,
    membership: Membership,
    ledger: Ledger,
    channel: Channel,
) -> Result<Attempt, Error> {
    let found = peers::Found {
        membership,
        namespace: None,
        api: None,
        own_grace: None,
        peer_loss: None,
        trainers_done: None,
        served: Served::default(),
    };
    let (plan, _, me) = plan_for(config, &found, own.my_ip, &own.inputs)?;
    let who = who(&me.name, &plan, config);
    Ok(Attempt {
        plan: plan.for_restart(ledger.epoch),
        who,
        channel: Some(channel),
        peer_loss: None,
        trainers_done: None,
        ledger,
        api: None,
        // Nothing of the API is watched here.
        served: Served::default(),
        coordinator_unjoined: None,
        children_grace: config.timing.grace_period,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::Loss;
    use crate::supervise::{Event, Signals};
    use tokio::time::timeout;

    /// A refusal is served for a heartbeat timeout and time to gather again, never past the
    /// pod's grace period less a margin (a stop meanwhile is not heard), 25 s at most.
    #[test]
    fn a_refusal_is_served_within_the_pods_grace_period() {
        let s = Duration::from_secs;
        let served = |heartbeat: &str, grace: Option<&str>| {
            refusal_served(&crate::protocol::testing::config(|args| {
                args.heartbeat_timeout = Some(heartbeat.into());
                args.pod_grace_period = grace.map(String::from);
            }))
        };
        assert_eq!(served("5", None), s(20));
        assert_eq!(served("10", None), s(25));
        assert_eq!(served("10", Some("10")), s(7));
        assert_eq!(served("5", Some("60")), s(20));
        assert_eq!(served("5", Some("2")), s(0));
    }

    /// A loss told while the attempt prepares (its workspace, the peer check) ends that step
    /// at once with the loss, so the trainer is never started in a lost attempt; a wait that
    /// is not the attempt's keeps the loss for the next one to see.
    #[tokio::test(flavor = "current_thread")]
    async fn a_loss_ends_the_steps_before_the_start_and_only_those() {
        let _reaping = crate::supervise::REAPING.lock().await;
        let mut sup = Supervisor::new(Signals::install().unwrap(), Duration::from_secs(1));
        let lost =
            || futures::future::ready(Loss::of_pod("peer pod p-2 was deleted".into())).boxed();
        sup.watch_peers(lost());
        let never = std::future::pending::<()>();
        let ended = timeout(
            Duration::from_secs(5),
            interruptible(
                Some(&mut sup),
                "checking the peers",
                Breaks::AlsoLoss,
                never,
            ),
        )
        .await
        .expect("the loss did not end the peer check");
        match ended {
            Err(Error::PeerLost { reason, .. }) => assert_eq!(reason, "peer pod p-2 was deleted"),
            other => panic!("not the loss: {other:?}"),
        }

        sup.watch_peers(lost());
        let waited = interruptible(
            Some(&mut sup),
            "waiting for the verdict",
            Breaks::StopOnly,
            sleep(Duration::from_millis(200)),
        )
        .await;
        assert!(waited.is_ok(), "{waited:?}");
        let kept = timeout(Duration::from_secs(1), sup.next_event()).await;
        assert!(
            matches!(kept, Ok(Event::PeerLost(_))),
            "the loss was not kept"
        );
        sup.finish();
    }
}
