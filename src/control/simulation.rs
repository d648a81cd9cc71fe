//! A seeded, deterministic simulation of one attempt's channel: the coordinator's pure `Core`
//! and the followers' pure `Following` machines (their launchers' drivers modelled), driven by
//! proptest through joins, deliveries in any interleaving
//! (each connection keeps its order, as TCP does), losses, freezes, replacements, trainers that
//! succeed or fail, preemptions (a launcher told to stop asks the job for a checkpoint, then
//! leaves), crossings of `Done` with failures, members without a trainer (the split layout's
//! pservers, whose work ends with the trainers'), and forged messages; invariants are
//! checked after every step. A failure prints the shrunk action list, and proptest keeps its
//! seed in `proptest-regressions/` to replay it exactly.
//!
//! `cargo test --lib simulation` runs 10,000 cases (a few seconds); more with `PROPTEST_CASES=200000`.

use std::collections::VecDeque;
use std::time::Duration;

use proptest::prelude::*;
use std::time::Instant;

use super::coordinator::{Core, Effect, Growth, Input, Setup, Terms};
use super::following::{self, Following};
use super::message::{Message, WireError};
use super::{Heard, Known, Request};
use crate::ledger::Ledger;
use crate::loss::{Kind, Loss};
use crate::verdict::UNBOUNDED_PREEMPTIONS;

const JOIN_GRACE: Duration = Duration::from_secs(60);

/// One thing that happens; indexes are taken modulo the number of followers.
#[derive(Debug, Clone)]
enum Action {
    /// Follower `i` connects and says hello (again, after a loss: a replaced pod with next 0).
    Connect(usize),
    /// The next frame follower `i` sent reaches the coordinator.
    ToCoordinator(usize),
    /// The next frame the coordinator queued for follower `i` reaches it.
    ToFollower(usize),
    /// Follower `i`'s trainer succeeds (it says `Done`), or fails (restartable, hung).
    Succeeds(usize),
    Fails(usize, bool, bool),
    /// Follower `i`'s launcher is told to stop while its trainer runs: it asks the job for a
    /// checkpoint (its end follows as a failure or a broken connection).
    Preempted(usize),
    /// Follower `i` reports its trainer's progress (a step), with its beat.
    Progresses(usize, u8),
    /// Follower `i`'s connection ends: its pod killed (closed) or frozen (silent).
    Breaks(usize, bool),
    /// Follower `i` finishes its part after a success: it closes its connection.
    Leaves(usize),
    /// Follower `i`'s children are stopped after a loss it knows of: it says so.
    Stops(usize),
    /// The coordinator's own launcher: its trainer succeeds, fails, sees a pod lost, has
    /// stopped its children, finishes.
    OwnStops,
    OwnDone,
    OwnFails(bool, bool),
    OwnPodLost,
    OwnPreempted,
    OwnFinish(bool),
    /// Time passes (seconds).
    Tick(u8),
    /// A frame from no member, or for a connection that is not the pod's live one.
    Forged(usize),
    /// Pod `a-j`, no member, says hello (an elastic job's arrival; to another job, refused),
    /// or its connection ends.
    Arrives(usize),
    ArrivalLeaves(usize),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0..8usize).prop_map(Action::Connect),
        8 => (0..8usize).prop_map(Action::ToCoordinator),
        8 => (0..8usize).prop_map(Action::ToFollower),
        2 => (0..8usize).prop_map(Action::Succeeds),
        2 => (0..8usize, any::<bool>(), any::<bool>()).prop_map(|(i, r, h)| Action::Fails(i, r, h)),
        1 => (0..8usize).prop_map(Action::Preempted),
        3 => (0..8usize, 0..4u8).prop_map(|(i, s)| Action::Progresses(i, s)),
        1 => (0..8usize, any::<bool>()).prop_map(|(i, s)| Action::Breaks(i, s)),
        1 => (0..8usize).prop_map(Action::Leaves),
        3 => (0..8usize).prop_map(Action::Stops),
        2 => Just(Action::OwnStops),
        1 => Just(Action::OwnDone),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(r, h)| Action::OwnFails(r, h)),
        1 => Just(Action::OwnPodLost),
        1 => Just(Action::OwnPreempted),
        1 => any::<bool>().prop_map(Action::OwnFinish),
        1 => (0..90u8).prop_map(Action::Tick),
        1 => (0..8usize).prop_map(Action::Forged),
        1 => (0..3usize).prop_map(Action::Arrives),
        1 => (0..3usize).prop_map(Action::ArrivalLeaves),
    ]
}

/// An elastic job's mix: arrivals and short ticks more often, failures and breaks less, so
/// that the job still trains, with arrivals waiting, when its window and its checkpoint window
/// end.
fn elastic_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => action(),
        3 => (0..3usize).prop_map(Action::Arrives),
        4 => (0..12u8).prop_map(Action::Tick),
        6 => (0..8usize).prop_map(Action::ToCoordinator),
        6 => (0..8usize).prop_map(Action::ToFollower),
        3 => (0..8usize).prop_map(Action::Connect),
    ]
}

/// A pod that is no member of the attempt, arriving to join an elastic job.
#[derive(Debug, Default)]
struct Arrival {
    link: Option<u64>,
    /// What the coordinator sent it on its live link.
    heard: Vec<Message>,
}

/// A follower: its launcher's driver, modelled (what it asks when), and its channel's
/// decisions, the real `Following`.
#[derive(Debug, Default)]
struct Follower {
    name: String,
    following: Following,
    /// The epoch it would start next, and its budget.
    next_epoch: u32,
    max_restarts: u32,
    /// The job's preemptions it knows of (a replaced pod: none).
    preemptions: u32,
    /// The free preemptions it was given.
    max_preemptions: u32,
    /// Its view differs from the coordinator's (it found other pods).
    stale_view: bool,
    /// A pserver pod of the split layout: no trainer, so it never says `Done` while the job
    /// trains; the job's success is told to it (`Bye`).
    serving: bool,
    /// The live connection, if any.
    link: Option<u64>,
    /// Frames it sent, not yet read by the coordinator.
    outbox: VecDeque<Input>,
    /// Frames the coordinator queued for it, not yet read.
    inbox: VecDeque<Message>,
    /// The `Go` it heard: epoch, budget, preemptions, free preemptions.
    go: Option<(u32, u32, u32, u32)>,
    said_done: bool,
    said_failed: bool,
    said_preempted: bool,
    /// It was asked for a checkpoint, and whether for the job's growth.
    asked_checkpoint: bool,
    asked_for_growth: bool,
    /// It heard that a member finished (or the coordinator's end): the job cannot restart.
    heard_finished: bool,
    said_stopped: bool,
    /// The verdicts of the losses it was told, in order.
    losses: Vec<bool>,
    /// The first loss it was told: its reason and whether the job hangs.
    first_loss: Option<(String, bool)>,
    /// Whether the losses it was told were preemptions.
    preempted_losses: Vec<bool>,
    /// The coordinator's final verdict, once told.
    verdict: Option<bool>,
    /// Gone for good in this attempt (its connection ended); it may be replaced.
    gone: bool,
}

/// What has been said so far, for the invariants.
#[derive(Debug, Default)]
struct Record {
    gos: Vec<(u32, u32, u32, u32)>,
    /// The preemption told to every member (the reason of its `Checkpoint`), once.
    checkpoint: Option<String>,
    /// A preempted launcher's own word (a `Preempted` read while running, before any loss).
    preempted_said: bool,
    /// A failure a restart would repeat was said (read by the coordinator, or its own).
    unrestartable_said: bool,
    /// Whether each Lost broadcast was a preemption's.
    lost_preempted: Vec<bool>,
    /// The member that said it was preempted first (read while running, before any loss).
    preempted_pod: Option<String>,
    /// The member the input being stepped is about ("" for the API's word).
    from: String,
    /// Every Lost broadcast, in order: its verdict.
    lost: Vec<bool>,
    /// The first loss's reason and whether it is a hang: every later word of it agrees.
    cause: Option<(String, bool)>,
    /// A `Done` (a follower's, read by the coordinator, or its own) before the first loss.
    finished_before_loss: bool,
    /// A `Done` read by the coordinator (or its own) before the verdict.
    finished_before_verdict: bool,
    /// Members joined when the loss was told, and those of them that have since stopped or
    /// gone (as read by the coordinator).
    awaited: Vec<String>,
    stopped_or_gone: Vec<String>,
    own_stopped: bool,
    verdicts: Vec<bool>,
    /// The members whose `Done` the coordinator read while running.
    done: Vec<String>,
    /// The job's success was told (`Bye`).
    bye: bool,
    /// The serving members whose `Done` the coordinator read on their live link, and those
    /// it told everyone had served.
    served_done: Vec<String>,
    served_told: Vec<String>,
    /// The coordinator's launcher left after a failure of its own (`Finish` without success).
    own_left: bool,
    stopped: bool,
    /// An elastic job: since when an arrival has waited while the job trained (the first of
    /// those still connected), and when the job was told it grows (its checkpoint asked, or
    /// its restart told at once).
    arrived_at: Option<Instant>,
    grow_told_at: Option<Instant>,
}

struct Sim {
    core: Core,
    now: Instant,
    followers: Vec<Follower>,
    next_link: u64,
    record: Record,
    own: Terms,
    own_done: bool,
    /// The coordinator's own pod has no trainer: its `Done` is its pserver's end.
    own_serving: bool,
    /// What each member's hello said, for the hellos the coordinator holds.
    hellos: std::collections::HashMap<String, Terms>,
    /// An elastic job's growth, and the pods arriving.
    growth: Option<Growth>,
    arrivals: Vec<Arrival>,
}

impl Sim {
    fn new(
        nexts: &[u32],
        budgets: &[u32],
        preemptions: &[u32],
        free: &[u32],
        stale: &[bool],
        serving: &[bool],
    ) -> (Sim, Vec<Effect>) {
        Sim::elastic(nexts, budgets, preemptions, free, stale, serving, None)
    }

    fn elastic(
        nexts: &[u32],
        budgets: &[u32],
        preemptions: &[u32],
        free: &[u32],
        stale: &[bool],
        serving: &[bool],
        growth: Option<Growth>,
    ) -> (Sim, Vec<Effect>) {
        let n = nexts.len() - 1;
        let followers: Vec<Follower> = (1..=n)
            .map(|i| Follower {
                name: format!("p-{i}"),
                next_epoch: nexts[i],
                max_restarts: budgets[i],
                preemptions: preemptions[i],
                max_preemptions: free[i],
                stale_view: stale[i],
                serving: serving[i],
                ..Follower::default()
            })
            .collect();
        // The split layout's membership: the serving members are pservers only, the others
        // (the coordinator's launcher among them) trainers.
        let member = |name: &str, rank| crate::membership::Member {
            name: name.to_string(),
            ip: std::net::IpAddr::from([10, 0, 0, rank as u8 + 1]),
            rank,
        };
        // The coordinator's own pod serves (a pserver pod named by --coordinator) only in a job
        // that has trainers.
        let own_serving = serving[0] && followers.iter().any(|f| !f.serving);
        let mut membership = crate::membership::Membership {
            pservers: Vec::new(),
            trainers: Vec::new(),
        };
        match own_serving {
            true => membership.pservers.push(member("p-0", 0)),
            false => membership.trainers.push(member("p-0", 0)),
        }
        for (rank, f) in followers.iter().enumerate() {
            match f.serving {
                true => membership.pservers.push(member(&f.name, rank + 1)),
                false => membership.trainers.push(member(&f.name, rank + 1)),
            }
        }
        let now = Instant::now();
        let own = Terms {
            nproc_per_pod: 1,
            ledger: Ledger {
                epoch: nexts[0],
                max_restarts: budgets[0],
                preemptions: preemptions[0],
                max_preemptions: free[0],
                grows: 0,
            },
        };
        let (mut core, effects) = Core::start(
            Setup {
                me: "p-0".into(),
                others: followers.iter().map(|f| f.name.clone()).collect(),
                view: "view".into(),
                terms: own,
                join_grace: JOIN_GRACE,
                membership: Some(membership),
                ended: None,
                who: "pod p-0 (trainer id 0)".into(),
                progress_margin: Duration::from_secs(2),
                hello_overdue: Duration::ZERO,
                growth,
            },
            now,
        );
        // What it says for the log: written by the driver, dropped here.
        core.lines();
        let sim = Sim {
            core,
            now,
            followers,
            next_link: 0,
            record: Record::default(),
            own,
            own_done: false,
            own_serving,
            hellos: std::collections::HashMap::new(),
            growth,
            arrivals: (0..3).map(|_| Arrival::default()).collect(),
        };
        (sim, effects)
    }

    fn step(&mut self, input: Input) -> Result<(), TestCaseError> {
        let running = self.core.started();
        match &input {
            Input::Said {
                link,
                pod,
                message: Message::Done,
            } if running && self.core.links.get(pod) == Some(link) => {
                // The safety of "decide once": no success can be read after a restart was
                // decided (each member says Done before it says Stopped).
                // A pserver pod's end (its pserver stopped by the trainers) is no success of
                // the job's: it neither ends the restarts nor is awaited.
                let serving = self.followers.iter().any(|f| f.name == *pod && f.serving);
                if serving {
                    // Its pserver has ended: nothing left to stop.
                    self.record.stopped_or_gone.push(pod.clone());
                    self.record.served_done.push(pod.clone());
                } else {
                    prop_assert!(
                        self.record.verdicts != [true],
                        "{} finished after the job was told to restart",
                        pod
                    );
                    self.record.done.push(pod.clone());
                    self.finished();
                }
            }
            Input::Said {
                link,
                pod,
                message: Message::Stopped,
            } if self.core.links.get(pod) == Some(link) => {
                self.record.stopped_or_gone.push(pod.clone());
            }
            Input::Ended { link, pod, .. } if self.core.links.get(pod) == Some(link) => {
                self.record.stopped_or_gone.push(pod.clone());
            }
            Input::Own(Request::Done | Request::Finish { succeeded: true })
                if running && self.own_serving =>
            {
                self.record.served_done.push("p-0".into());
            }
            Input::Own(Request::Done | Request::Finish { succeeded: true }) if running => {
                self.own_done = true;
                self.finished();
            }
            Input::Own(Request::Stopped) if !self.record.lost.is_empty() => {
                self.record.own_stopped = true;
            }
            Input::Own(Request::Finish { succeeded: false }) => self.record.own_left = true,
            Input::Said {
                link,
                pod,
                message: Message::Preempted { reason },
            } if running && self.core.links.get(pod) == Some(link) => self.preempted(pod, reason),
            Input::Own(Request::Preempted(reason)) if running => self.preempted("p-0", reason),
            Input::Said {
                link,
                pod,
                message: Message::Failed(Loss { restart: false, .. }),
            } if running && self.core.links.get(pod) == Some(link) => {
                self.record.unrestartable_said = true;
            }
            Input::Own(Request::Failed(Loss { restart: false, .. })) => {
                self.record.unrestartable_said = true
            }
            _ => {}
        }
        match &input {
            // A member's: an arrival's terms are no part of the start.
            Input::Joined { pod, terms, .. }
                if !self.core.links.contains_key(pod)
                    && self.followers.iter().any(|f| f.name == *pod) =>
            {
                self.hellos.insert(pod.clone(), *terms);
            }
            Input::Ended { link, pod, .. } if self.core.links.get(pod) == Some(link) => {
                self.hellos.remove(pod);
            }
            _ => {}
        }
        self.record.from = match &input {
            Input::Joined { pod, .. } | Input::Said { pod, .. } | Input::Ended { pod, .. } => {
                pod.clone()
            }
            Input::Own(Request::PodLost(_)) => String::new(),
            _ => "p-0".into(),
        };
        let was_stopped = self.core.stopped();
        let effects = self.core.step(input);
        self.core.lines();
        if was_stopped {
            prop_assert!(effects.is_empty(), "a stopped coordinator said {effects:?}");
        }
        self.apply(effects)
    }

    /// A member said it was preempted, while running: the first before any loss is the one
    /// every trainer is asked to checkpoint for.
    /// When the job's growth had asked for a checkpoint already, that one stands for the
    /// preemption's (every trainer is asked once), whose end the attempt's is.
    fn preempted(&mut self, pod: &str, reason: &str) {
        if self.record.lost.is_empty() && !self.record.preempted_said {
            self.record.preempted_said = true;
            self.record.preempted_pod = Some(pod.to_string());
            if self.record.grow_told_at.is_some() && self.record.checkpoint.is_none() {
                self.record.checkpoint = Some(super::message::cut(reason));
            }
        }
    }

    /// A member's success was read while running: before the loss, before the verdict.
    fn finished(&mut self) {
        if self.record.lost.is_empty() {
            self.record.finished_before_loss = true;
        }
        if self.record.verdicts.is_empty() {
            self.record.finished_before_verdict = true;
        }
    }

    /// The coordinator reads follower `i`'s next frame, if any.
    fn deliver_to_coordinator(&mut self, i: usize) -> Result<bool, TestCaseError> {
        match self.follower(i).and_then(|f| f.outbox.pop_front()) {
            Some(input) => self.step(input).map(|()| true),
            None => Ok(false),
        }
    }

    /// Follower `i` reads the coordinator's next frame, if any.
    fn deliver_to_follower(&mut self, i: usize) -> Result<bool, TestCaseError> {
        let Some(f) = self.follower(i) else {
            return Ok(false);
        };
        let Some(message) = f.inbox.pop_front() else {
            return Ok(false);
        };
        if let Message::Verdict { .. } = message {
            // A member that never started learns of the loss from its `Lost`.
            prop_assert!(
                f.go.is_some() || !f.losses.is_empty(),
                "{} heard a verdict before the loss",
                f.name
            );
        }
        let effects = f.following.step(following::Input::Frame(message));
        self.follower_does(i, effects)?;
        Ok(true)
    }

    /// Follower `i`'s launcher asks its channel (`request`), and the follower says what it
    /// decides on its connection.
    fn follower_asks(&mut self, i: usize, request: Request) -> Result<(), TestCaseError> {
        let Some(f) = self.follower(i) else {
            return Ok(());
        };
        let effects = f.following.step(following::Input::Request(request));
        self.follower_does(i, effects)
    }

    /// What follower `i`'s machine decided: what it says goes out on its connection (if it
    /// has one), what it hears is noted for the invariants.
    fn follower_does(
        &mut self,
        i: usize,
        effects: Vec<following::Effect>,
    ) -> Result<(), TestCaseError> {
        let served_told = self.record.served_told.clone();
        let Some(f) = self.follower(i) else {
            return Ok(());
        };
        for effect in effects {
            match effect {
                following::Effect::Hear(Heard::Go {
                    ledger:
                        Ledger {
                            epoch,
                            max_restarts,
                            preemptions,
                            max_preemptions,
                            ..
                        },
                    ..
                }) => f.go = Some((epoch, max_restarts, preemptions, max_preemptions)),
                following::Effect::Hear(Heard::Lost(Loss {
                    restart,
                    reason,
                    kind,
                })) => {
                    let (hang, preempted, grown) =
                        (kind == Kind::Hang, kind.is_free(), kind == Kind::Growth);
                    // A growth's restart (or a loss in its checkpoint window) is told as one,
                    // free, by the coordinator or by the link's end when it is gone.
                    prop_assert_eq!(
                        kind == Kind::Growth,
                        kind.is_free() && reason.starts_with("the job grows"),
                        "{} heard a loss told as a grow or not: {}",
                        f.name,
                        reason
                    );
                    // Once a member finished, the growth is over: a follower that judges the
                    // end itself (its coordinator gone) calls no loss its restart. (The
                    // coordinator may have told the growth's loss before the success reached
                    // it, and says it again, final.)
                    let own_judgement = reason.contains("the coordinating launcher at");
                    prop_assert!(
                        !(grown && f.heard_finished && own_judgement),
                        "{} judged a grow after a member finished: {}",
                        f.name,
                        reason
                    );
                    // Once asked for a checkpoint, the attempt's end is the preemption's,
                    // whoever tells it (the coordinator, or the link's end when it is gone),
                    // while the job's preemptions are free.
                    // (A checkpoint asked for the job's growth is no preemption: a failure in its
                    // window is a loss like any.)
                    let free = f.go.is_some_and(|(_, _, p, max)| p < max);
                    prop_assert!(
                        preempted || !f.asked_checkpoint || !free || f.asked_for_growth,
                        "{} was asked for a checkpoint, then heard a loss that is no preemption: {}",
                        f.name,
                        reason
                    );
                    f.losses.push(restart);
                    f.preempted_losses.push(preempted);
                    f.first_loss.get_or_insert((reason, hang));
                }
                following::Effect::Know(Known::Lost(loss)) => f.losses.push(loss.restart),
                following::Effect::Know(Known::Checkpoint(reason)) => {
                    f.asked_for_growth = reason.starts_with("the job grows");
                    // Asked while its trainer runs, never before its start.
                    prop_assert!(
                        f.go.is_some(),
                        "{} asked for a checkpoint before Go",
                        f.name
                    );
                    prop_assert!(!f.asked_checkpoint, "{} asked twice", f.name);
                    f.asked_checkpoint = true;
                }
                following::Effect::Know(Known::Verdict(restart)) => {
                    f.verdict.get_or_insert(restart);
                }
                following::Effect::Say(message) => {
                    match &message {
                        Message::Done => f.said_done = true,
                        Message::Failed(_) => f.said_failed = true,
                        Message::Stopped => f.said_stopped = true,
                        Message::Preempted { .. } => f.said_preempted = true,
                        _ => {}
                    }
                    if let Some(link) = f.link {
                        let pod = f.name.clone();
                        f.outbox.push_back(Input::Said { link, pod, message });
                    }
                }
                following::Effect::Served(pod) => {
                    prop_assert!(
                        served_told.contains(&pod),
                        "{} heard {pod} served, which the coordinator never said",
                        f.name
                    );
                }
                // Every member here runs one process per pod.
                following::Effect::Hear(Heard::Refused(reason)) => {
                    prop_assert!(false, "{} refused: {reason}", f.name);
                }
                following::Effect::Know(Known::CannotRestart) => f.heard_finished = true,
                // The coordinator's words (and the driver's hello): never the follower's.
                following::Effect::Know(
                    known @ (Known::SaidHello
                    | Known::Absent(_)
                    | Known::TurnedAway(_)
                    | Known::Alive(_)),
                ) => {
                    prop_assert!(false, "{} made {known:?} known", f.name);
                }
                following::Effect::Hear(Heard::Regather(_))
                | following::Effect::Know(Known::Succeeded)
                | following::Effect::StopListening
                | following::Effect::Log(_)
                | following::Effect::Close => {}
            }
        }
        Ok(())
    }

    /// Carries out the effects, checking each against what was said before.
    fn apply(&mut self, effects: Vec<Effect>) -> Result<(), TestCaseError> {
        for effect in effects {
            match effect {
                Effect::Broadcast(message) => {
                    self.check_broadcast(&message)?;
                    let linked: Vec<u64> = self.core.links.values().copied().collect();
                    for a in &self.arrivals {
                        prop_assert!(
                            !a.link.is_some_and(|l| linked.contains(&l)),
                            "an arrival is told the attempt's words"
                        );
                    }
                    for follower in &mut self.followers {
                        if follower.link.is_some_and(|l| linked.contains(&l)) {
                            follower.inbox.push_back(message.clone());
                        }
                    }
                }
                Effect::Send { link, message } => {
                    if let Some(f) = self.followers.iter_mut().find(|f| f.link == Some(link)) {
                        f.inbox.push_back(message);
                    } else if let Some(a) = self.arrivals.iter_mut().find(|a| a.link == Some(link))
                    {
                        // An arrival hears the attempt's end only: the verdict, or the success.
                        prop_assert!(
                            matches!(message, Message::Lost(Loss { .. }) | Message::Bye),
                            "an arrival was told {message:?}"
                        );
                        prop_assert!(a.heard.is_empty(), "an arrival told twice: {message:?}");
                        if let (Message::Lost(Loss { restart, .. }), Some(verdict)) =
                            (&message, self.record.verdicts.first())
                        {
                            prop_assert_eq!(restart, verdict, "an arrival told another verdict");
                        }
                        a.heard.push(message);
                    }
                }
                Effect::Close(link) => {
                    if let Some(f) = self.followers.iter_mut().find(|f| f.link == Some(link)) {
                        f.link = None;
                        f.gone = true;
                    }
                    if let Some(a) = self.arrivals.iter_mut().find(|a| a.link == Some(link)) {
                        let running = self.core.started();
                        prop_assert!(
                            self.growth.is_none() || !running,
                            "an elastic job's coordinator turned an arrival away"
                        );
                        a.link = None;
                    }
                }
                // (Who the coordinator heard at the verdict: the drivers' simulation checks
                // what the next gathering makes of it.)
                Effect::Know(Known::Alive(_))
                | Effect::Hear(_)
                | Effect::Know(Known::Lost(Loss { .. }))
                | Effect::Know(Known::Verdict(_))
                | Effect::Know(Known::Checkpoint(_))
                | Effect::Know(Known::Absent(_))
                | Effect::Know(Known::TurnedAway(_))
                | Effect::Served(_) => {}
                // A follower's words: the coordinator never says them.
                Effect::Know(known @ (Known::SaidHello | Known::CannotRestart)) => {
                    prop_assert!(false, "the coordinator made {known:?} known");
                }
                // Only a coordinator without a trainer hears it, with its goodbye.
                Effect::Know(Known::Succeeded) => {
                    prop_assert!(self.own_serving, "the job's success told to a trainer");
                    prop_assert!(self.record.bye, "the job's success without a goodbye");
                }
                Effect::Stop => self.record.stopped = true,
            }
        }
        self.check_state()
    }

    fn check_broadcast(&mut self, message: &Message) -> Result<(), TestCaseError> {
        match message {
            Message::Go {
                ledger:
                    Ledger {
                        epoch,
                        max_restarts,
                        preemptions,
                        max_preemptions,
                        ..
                    },
                ..
            } => {
                prop_assert!(self.record.gos.is_empty(), "a second Go: {message:?}");
                // Everyone starts the largest epoch anyone would, with the smallest budget
                // and free preemptions, and the most preemptions anyone knows of (never more
                // than the restarts).
                let hellos = || self.hellos.values();
                let epoch_expected = hellos()
                    .map(|h| h.ledger.epoch)
                    .fold(self.own.ledger.epoch, u32::max);
                let budget_expected = hellos()
                    .map(|h| h.ledger.max_restarts)
                    .fold(self.own.ledger.max_restarts, u32::min);
                let preemptions_expected = hellos()
                    .map(|h| h.ledger.preemptions)
                    .fold(self.own.ledger.preemptions, u32::max)
                    .min(epoch_expected);
                let free_expected = hellos()
                    .map(|h| h.ledger.max_preemptions)
                    .fold(self.own.ledger.max_preemptions, u32::min);
                prop_assert_eq!(
                    (*epoch, *max_restarts, *preemptions, *max_preemptions),
                    (
                        epoch_expected,
                        budget_expected,
                        preemptions_expected,
                        free_expected
                    )
                );
                // Only once every member has joined (as far as the coordinator knows: its
                // connection may be ending unseen), with the coordinator's view.
                for f in &self.followers {
                    let joined = self.core.links.contains_key(&f.name);
                    prop_assert!(joined && !f.stale_view, "Go without {}", f.name);
                }
                self.record
                    .gos
                    .push((*epoch, *max_restarts, *preemptions, *max_preemptions));
            }
            Message::Checkpoint { reason } if reason.starts_with("the job grows") => {
                // Once, while the job trains, with an arrival waiting, in an elastic job.
                prop_assert!(self.growth.is_some(), "a grow without growth");
                prop_assert!(self.record.grow_told_at.is_none(), "a second grow");
                prop_assert!(!self.record.gos.is_empty(), "a grow before Go");
                prop_assert!(self.record.lost.is_empty(), "a grow after the loss");
                prop_assert!(
                    self.record.done.is_empty(),
                    "a grow after a member finished"
                );
                prop_assert!(
                    self.record.arrived_at.is_some(),
                    "a grow without an arrival"
                );
                self.record.grow_told_at = Some(self.now);
            }
            Message::Checkpoint { reason } => {
                // Once, while running, before any loss, and only when a member said it was
                // preempted.
                prop_assert!(self.record.checkpoint.is_none(), "a second Checkpoint");
                prop_assert!(!self.record.gos.is_empty(), "a Checkpoint before Go");
                prop_assert!(self.record.lost.is_empty(), "a Checkpoint after the loss");
                prop_assert!(self.record.preempted_said, "a Checkpoint nobody asked for");
                self.record.checkpoint = Some(reason.clone());
            }
            Message::Verdict { restart } => {
                prop_assert!(self.record.verdicts.is_empty(), "a second verdict");
                prop_assert_eq!(
                    self.record.lost.last(),
                    Some(restart),
                    "a verdict unlike the loss"
                );
                // "Restart" is decided once every member has stopped or is gone, and this
                // launcher too, so no success can arrive after it; "no restart" is final at once.
                prop_assert!(
                    self.record.own_stopped || !restart,
                    "a restart decided before the coordinator stopped"
                );
                for pod in self.record.awaited.iter().filter(|_| *restart) {
                    prop_assert!(
                        self.record.stopped_or_gone.contains(pod),
                        "a restart decided before {} stopped",
                        pod
                    );
                }
                if *restart {
                    prop_assert!(
                        !self.record.finished_before_verdict,
                        "a restart although a member finished"
                    );
                }
                self.record.verdicts.push(*restart);
            }
            Message::Lost(Loss {
                restart,
                reason,
                kind,
            }) => {
                let (hang, preempted) = (*kind == Kind::Hang, kind.is_free());
                prop_assert_eq!(
                    *kind == Kind::Growth,
                    kind.is_free() && reason.starts_with("the job grows"),
                    "a loss told as a grow or not: {}",
                    reason
                );
                if self.record.lost.is_empty() {
                    self.record.awaited = self.core.links.keys().cloned().collect();
                }
                // The job's growth: a free restart (a later word of it is final only for a
                // member that finished meanwhile, checked below).
                if reason.contains("the job grows") && self.record.lost.is_empty() {
                    prop_assert!(self.growth.is_some(), "a grow without growth");
                    prop_assert!(self.record.lost.is_empty(), "a grow after the loss");
                    // A loss inside the checkpoint window the growth asked for ends the
                    // attempt early, said after the growth ("the job grows: ...; then: ..."):
                    // free, but a failure that may not be restarted still ends the job.
                    let in_window = reason.contains("; then: ");
                    prop_assert!(
                        preempted && (*restart || in_window),
                        "a grow that is not a free restart"
                    );
                    // Only while the growth stands: nobody finished; and no hang (nothing to
                    // find: the trainers were asked to checkpoint).
                    if in_window {
                        prop_assert!(!hang, "a loss in the growth's window told as a hang");
                        prop_assert!(
                            !self.record.finished_before_loss,
                            "a loss after a member finished said as the growth's: {}",
                            reason
                        );
                    }
                    if self.record.grow_told_at.is_none() {
                        prop_assert!(!in_window, "a loss said after a growth not begun");
                        self.check_grow_not_early()?;
                    } else if let (Some(told), Some(growth)) =
                        (self.record.grow_told_at, self.growth)
                    {
                        prop_assert!(
                            in_window || self.now >= told + growth.checkpoint_window,
                            "the grow's restart before its checkpoint window ended"
                        );
                    }
                    self.record.grow_told_at.get_or_insert(self.now);
                }
                // The job's growth is a free restart: its own word (its reason may follow a
                // preemption's), and every later word of the same loss.
                let growing = reason.contains("the job grows")
                    || (!self.record.lost.is_empty()
                        && self.record.grow_told_at.is_some()
                        && self.record.lost_preempted.first() == Some(&true));
                // Once the job was asked for a checkpoint, the attempt's end is the
                // preemption's, whatever ends it, and its line says so first; it spends
                // nothing while the job's preemptions are free, and beyond them says so.
                let free = self
                    .record
                    .gos
                    .first()
                    .is_some_and(|&(_, _, p, max)| p < max);
                prop_assert_eq!(
                    preempted,
                    self.record.checkpoint.is_some() && free || growing,
                    "a loss after a checkpoint request is a free preemption's, and only then"
                );
                if self.record.checkpoint.is_some() && !free && !growing {
                    prop_assert!(
                        reason.contains("this one counts as a failure"),
                        "a preemption beyond the free ones does not say so: {}",
                        reason
                    );
                }
                if let Some(checkpoint) = &self.record.checkpoint {
                    // The preempted member's own end says it all; another's follows it.
                    // (A later word repeats the first: checked below.)
                    // (Once the growth was told, its line comes first, the preemption after it.)
                    let own_end = self.record.preempted_pod.as_ref() == Some(&self.record.from);
                    let first = self.record.lost.is_empty();
                    let after_growth = self.record.grow_told_at.is_some()
                        && reason.starts_with("the job grows")
                        && reason.contains(&format!("; then: {checkpoint}"));
                    prop_assert!(
                        !first
                            || own_end
                            || reason.starts_with(checkpoint.as_str())
                            || after_growth,
                        "{reason}"
                    );
                    prop_assert!(!hang, "a preemption told as a hang");
                }
                if let Some(first) = self.record.lost_preempted.first() {
                    prop_assert_eq!(&preempted, first, "the preemption flag changed");
                }
                self.record.lost_preempted.push(preempted);
                // One cause for the job: a later word (final after a success) repeats it.
                match &self.record.cause {
                    None => self.record.cause = Some((reason.clone(), hang)),
                    Some((first, first_hang)) => {
                        prop_assert!(
                            reason.starts_with(first.as_str()),
                            "another cause: {reason} after {first}"
                        );
                        prop_assert_eq!(&hang, first_hang, "the hang flag changed");
                    }
                }
                let Some(&(epoch, budget, preemptions, free)) = self.record.gos.first() else {
                    // Before the start a loss can only be final, or a regather.
                    prop_assert!(!restart || self.record.lost.is_empty());
                    self.record.lost.push(*restart);
                    return Ok(());
                };
                if *restart && !preempted {
                    // Preemptions spent none of it.
                    prop_assert!(epoch - preemptions < budget, "a restart beyond the budget");
                }
                // Only the job's first free preemptions spend nothing.
                prop_assert!(
                    !preempted || preemptions < free || growing,
                    "preemption {} told free of {}",
                    preemptions + 1,
                    free
                );
                // A preemption restarts whatever the budget: not once a member finished or a
                // failure would recur.
                if preempted && !restart {
                    prop_assert!(
                        self.record.finished_before_loss
                            || self.record.unrestartable_said
                            || self.record.lost.contains(&true),
                        "a preemption ended the job"
                    );
                }
                if *restart {
                    prop_assert!(
                        !self.record.finished_before_loss,
                        "a restart after a member finished"
                    );
                    prop_assert!(
                        !self.record.lost.contains(&false),
                        "a final verdict taken back"
                    );
                }
                // At most one verdict, and a second only to make it final.
                match self.record.lost.as_slice() {
                    [] => {}
                    [true] => prop_assert!(!restart, "the same verdict twice"),
                    more => prop_assert!(false, "a third verdict after {more:?}"),
                }
                self.record.lost.push(*restart);
            }
            Message::Bye => {
                // The job's success: this launcher's trainer and every other trainer are done
                // (unless this launcher left early, which ends the job's restarts too), and
                // nothing was lost; the pservers are told, not waited for.
                prop_assert!(
                    self.own_done || self.own_serving,
                    "Bye before the coordinator's trainer was done"
                );
                prop_assert!(self.record.lost.is_empty(), "Bye after a loss");
                // A coordinator without a trainer tells the trainers' success, its own launcher
                // gone or not.
                let left = self.record.own_left && !self.own_serving;
                for f in self.followers.iter().filter(|f| !f.serving && !left) {
                    prop_assert!(
                        self.record.done.contains(&f.name),
                        "Bye before {} said Done",
                        f.name
                    );
                }
                self.record.bye = true;
            }
            Message::Served { pod } => {
                // Only a member without a trainer whose part ended, once: a trainer's pod, or
                // one still serving, ignored by everyone's API watch would hide its loss.
                prop_assert!(
                    self.record.served_done.contains(pod),
                    "{pod} told served without its Done"
                );
                prop_assert!(
                    !self.record.served_told.contains(pod),
                    "{pod} told served twice"
                );
                self.record.served_told.push(pod.clone());
            }
            Message::Finished { .. } | Message::Done => {}
            _ => {}
        }
        Ok(())
    }

    fn check_state(&self) -> Result<(), TestCaseError> {
        if let Some(restart) = self.core.loss().map(|loss| loss.restart) {
            prop_assert_eq!(Some(&restart), self.record.lost.last());
        }
        // Every follower told of the loss heard the job's one cause, hang or not.
        for f in &self.followers {
            if let (Some((reason, hang)), Some((first, first_hang))) =
                (&f.first_loss, &self.record.cause)
            {
                prop_assert!(
                    reason.starts_with(first.as_str()),
                    "{} heard {reason}",
                    f.name
                );
                prop_assert_eq!(hang, first_hang, "{} heard another hang flag", f.name);
            }
        }
        Ok(())
    }

    /// An elastic job that trains (started, nothing lost, nobody finished): arrivals waiting
    /// since `arrived_at` are told the job grows within the window, and its restart follows
    /// within the checkpoint window.
    fn check_growth_in_time(&self) -> Result<(), TestCaseError> {
        let Some(growth) = self.growth else {
            return Ok(());
        };
        let training = self.core.started()
            && self.record.lost.is_empty()
            && self.record.done.is_empty()
            && self.record.checkpoint.is_none()
            && !self.own_done
            && !self.core.stopped();
        if !training {
            return Ok(());
        }
        if let (Some(at), None) = (self.record.arrived_at, self.record.grow_told_at) {
            prop_assert!(
                self.now < at + growth.window,
                "arrivals waiting {:?} (window {:?}) and the job not told it grows",
                self.now - at,
                growth.window
            );
        }
        if let Some(told) = self.record.grow_told_at {
            prop_assert!(
                self.now < told + growth.checkpoint_window,
                "the grow's restart not told {:?} after its checkpoint",
                self.now - told
            );
        }
        Ok(())
    }

    /// A grow is told no earlier than the window after the first arrival still waiting.
    fn check_grow_not_early(&self) -> Result<(), TestCaseError> {
        if let (Some(at), Some(growth)) = (self.record.arrived_at, self.growth) {
            prop_assert!(
                self.now >= at + growth.window,
                "a grow {:?} after the first arrival, before its window of {:?}",
                self.now - at,
                growth.window
            );
        }
        Ok(())
    }

    fn follower(&mut self, i: usize) -> Option<&mut Follower> {
        let n = self.followers.len();
        if n == 0 {
            return None;
        }
        self.followers.get_mut(i % n)
    }

    fn act(&mut self, action: &Action) -> Result<(), TestCaseError> {
        match *action {
            Action::Connect(i) => {
                self.next_link += 1;
                let link = self.next_link;
                let Some(f) = self.follower(i) else {
                    return Ok(());
                };
                if f.link.is_some() {
                    return Ok(());
                }
                if f.gone {
                    // A replaced pod: a fresh launcher, which would start epoch 0 and knows of
                    // no preemption.
                    *f = Follower {
                        name: f.name.clone(),
                        max_restarts: f.max_restarts,
                        max_preemptions: f.max_preemptions,
                        serving: f.serving,
                        // What the old connection sent, its end included, is still on its way.
                        outbox: std::mem::take(&mut f.outbox),
                        ..Follower::default()
                    };
                }
                f.link = Some(link);
                let hello = Input::Joined {
                    link,
                    pod: f.name.clone(),
                    view: if f.stale_view { "stale" } else { "view" }.into(),
                    who: format!("pod {}", f.name),
                    terms: Terms {
                        nproc_per_pod: 1,
                        ledger: Ledger {
                            epoch: f.next_epoch,
                            max_restarts: f.max_restarts,
                            preemptions: f.preemptions,
                            max_preemptions: f.max_preemptions,
                            grows: 0,
                        },
                    },
                };
                f.outbox.push_back(hello);
            }
            Action::ToCoordinator(i) => {
                self.deliver_to_coordinator(i)?;
            }
            Action::ToFollower(i) => {
                self.deliver_to_follower(i)?;
            }
            Action::Succeeds(i) => {
                // A launcher says Done only while its drive runs, before it says Stopped (a
                // pserver pod's when its pserver was stopped by the trainers).
                let asks = self.follower(i).is_some_and(|f| {
                    let live = f.go.is_some() && !f.said_stopped && !f.said_failed;
                    live && f.link.is_some()
                });
                if asks {
                    self.follower_asks(i, Request::Done)?;
                }
            }
            Action::Fails(i, restartable, hang) => {
                let asks = self.follower(i).is_some_and(|f| {
                    f.go.is_some() && f.link.is_some() && !f.said_done && !f.said_failed
                });
                if asks {
                    let request = Request::Failed(Loss {
                        reason: "trainer exited with status 3".into(),
                        restart: restartable,
                        kind: if hang { Kind::Hang } else { Kind::Failure },
                    });
                    self.follower_asks(i, request)?;
                }
            }
            Action::Preempted(i) => {
                // Said by a launcher whose trainer runs, once.
                let asks = self.follower(i).is_some_and(|f| {
                    let training = f.go.is_some() && !f.said_done && !f.said_failed;
                    training && f.link.is_some() && !f.said_preempted
                });
                if let (true, Some(f)) = (asks, self.follower(i)) {
                    let reason = format!("pod {}: preempted (SIGTERM while training)", f.name);
                    self.follower_asks(i, Request::Preempted(reason))?;
                }
            }
            Action::Progresses(i, step) => {
                let now = self.now;
                if let Some(f) = self.follower(i) {
                    if let Some(link) = f.link {
                        f.outbox.push_back(Input::Progress {
                            link,
                            pod: f.name.clone(),
                            step: Some(u64::from(step)),
                            quiet: Duration::ZERO,
                            at: now,
                            behind: None,
                        });
                    }
                }
            }
            Action::Stops(i) => {
                // A launcher whose trainer succeeded lingers or leaves: it never says Stopped.
                // One that joined after the loss ran nothing: it hears the verdict as its
                // `Lost`, and gathers again or ends, without stopping anything.
                let asks = self.follower(i).is_some_and(|f| {
                    let knows = !f.losses.is_empty() || f.said_failed;
                    let ran = f.go.is_some();
                    knows && ran && f.link.is_some() && !f.said_stopped && !f.said_done
                });
                if asks {
                    self.follower_asks(i, Request::Stopped)?;
                }
            }
            Action::OwnStops => self.step(Input::Own(Request::Stopped))?,
            Action::Breaks(i, silent) => self.end_link(
                i,
                if silent {
                    WireError::Silent(2)
                } else {
                    WireError::Closed
                },
                false,
            ),
            Action::Leaves(i) => self.end_link(i, WireError::Closed, true),
            Action::OwnDone => self.step(Input::Own(Request::Done))?,
            Action::OwnFails(restartable, hang) => {
                self.step(Input::Own(Request::Failed(Loss {
                    reason: "pod p-0: trainer exited with status 3".into(),
                    restart: restartable,
                    kind: if hang { Kind::Hang } else { Kind::Failure },
                })))?;
            }
            Action::OwnPreempted => {
                self.step(Input::Own(Request::Preempted(
                    "pod p-0: preempted (SIGTERM while training)".into(),
                )))?;
            }
            Action::OwnPodLost => {
                self.step(Input::Own(Request::PodLost(
                    "peer pod p-9 was deleted".into(),
                )))?;
            }
            Action::OwnFinish(succeeded) => {
                self.step(Input::Own(Request::Finish { succeeded }))?;
            }
            Action::Tick(seconds) => {
                self.now += Duration::from_secs(u64::from(seconds));
                self.step(Input::Tick(self.now))?;
                self.check_growth_in_time()?;
            }
            Action::Arrives(j) => {
                // A coordinator that has stopped serves nothing: its listener is closed.
                if self.arrivals[j].link.is_some() || self.core.stopped() {
                    return Ok(());
                }
                self.next_link += 1;
                let link = self.next_link;
                self.arrivals[j] = Arrival {
                    link: Some(link),
                    heard: Vec::new(),
                };
                let training = self.core.started()
                    && self.record.lost.is_empty()
                    && self.record.grow_told_at.is_none();
                if self.growth.is_some() && training && self.record.arrived_at.is_none() {
                    self.record.arrived_at = Some(self.now);
                }
                self.step(Input::Joined {
                    link,
                    pod: format!("a-{j}"),
                    view: "another".into(),
                    who: format!("pod a-{j}"),
                    terms: Terms::first(0),
                })?;
            }
            Action::ArrivalLeaves(j) => {
                let Some(link) = self.arrivals[j].link.take() else {
                    return Ok(());
                };
                self.step(Input::Ended {
                    link,
                    pod: format!("a-{j}"),
                    why: WireError::Closed,
                })?;
                let waiting = self
                    .arrivals
                    .iter()
                    .any(|a| a.link.is_some() && a.heard.is_empty());
                if !waiting && self.record.grow_told_at.is_none() {
                    self.record.arrived_at = None;
                }
            }
            Action::Forged(i) => {
                let before = self.core.clone();
                let pod = self
                    .follower(i)
                    .map_or("p-1".to_string(), |f| f.name.clone());
                for forged in [
                    Input::Said {
                        link: u64::MAX,
                        pod: "intruder".into(),
                        message: Message::Failed(Loss {
                            reason: "forged".into(),
                            restart: true,
                            kind: Kind::Hang,
                        }),
                    },
                    Input::Progress {
                        link: u64::MAX,
                        pod: pod.clone(),
                        step: Some(0),
                        quiet: Duration::ZERO,
                        at: self.now,
                        behind: None,
                    },
                    Input::Said {
                        link: u64::MAX,
                        pod: pod.clone(),
                        message: Message::Preempted {
                            reason: "forged".into(),
                        },
                    },
                    Input::Ended {
                        link: u64::MAX,
                        pod,
                        why: WireError::Closed,
                    },
                ] {
                    let effects = self.core.step(forged);
                    prop_assert!(effects.is_empty(), "a forged frame was heard: {effects:?}");
                }
                prop_assert_eq!(
                    &self.core,
                    &before,
                    "a forged frame changed the coordinator"
                );
            }
        }
        Ok(())
    }

    /// The coordinator's pod is gone (killed, its node lost): every follower still connected
    /// hears its silence.
    fn coordinator_gone(&mut self) -> Result<(), TestCaseError> {
        for i in 0..self.followers.len() {
            if self.followers[i].link.is_some() {
                let effects = self.followers[i]
                    .following
                    .step(following::Input::Silent(2));
                self.follower_does(i, effects)?;
            }
        }
        Ok(())
    }

    /// Follower `i`'s connection ends after what it sent has been read (TCP's order): gone.
    fn end_link(&mut self, i: usize, why: WireError, only_after_success: bool) {
        let Some(f) = self.follower(i) else {
            return;
        };
        let Some(link) = f.link else {
            return;
        };
        if only_after_success && !f.said_done {
            return;
        }
        let pod = f.name.clone();
        f.outbox.push_back(Input::Ended { link, pod, why });
        f.link = None;
        f.gone = true;
    }

    /// Every frame in flight is read, in a fixed order.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..64 {
            let mut moved = false;
            for i in 0..self.followers.len() {
                moved |= self.deliver_to_coordinator(i)?;
                while self.deliver_to_follower(i)? {
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        Ok(())
    }
}

/// Runs `actions` on a coordinator, its followers and any arrivals, checking every step; then
/// what must hold at the end: every follower still connected heard the verdict, one for all
/// once everyone stopped, one `Go` for everyone, arrivals told the success with everyone, and
/// the launcher's own end closes the channel.
fn keeps_its_invariants(
    mut sim: Sim,
    first: Vec<Effect>,
    actions: &[Action],
) -> Result<(), TestCaseError> {
    sim.apply(first)?;
    for action in actions {
        sim.act(action)?;
    }
    sim.drain()?;
    if let Some(verdict) = sim.core.loss().map(|loss| loss.restart) {
        for f in sim
            .followers
            .iter()
            .filter(|f| f.link.is_some() && f.go.is_some())
        {
            prop_assert_eq!(
                f.losses.last(),
                Some(&verdict),
                "{} heard another verdict",
                &f.name
            );
        }
    }
    // Then every launcher that knows of the loss stops its children: the verdict comes,
    // one for all, as long as the coordinator has not stopped.
    if !sim.record.lost.is_empty() && !sim.core.stopped() && sim.core.started() {
        for i in 0..sim.followers.len() {
            sim.act(&Action::Stops(i))?;
        }
        if !sim.own_done {
            sim.act(&Action::OwnStops)?;
        }
        sim.drain()?;
        prop_assert_eq!(
            sim.record.verdicts.len(),
            1,
            "no verdict once everyone stopped"
        );
        let verdict = sim.record.verdicts[0];
        for f in sim
            .followers
            .iter()
            .filter(|f| f.link.is_some() && f.said_stopped)
        {
            prop_assert_eq!(
                f.verdict,
                Some(verdict),
                "{} holds another verdict",
                &f.name
            );
        }
    }
    if let Some(go) = sim.record.gos.first() {
        for f in sim.followers.iter().filter(|f| f.go.is_some()) {
            prop_assert_eq!(f.go.as_ref(), Some(go));
        }
    }
    // However it went, the launcher's own end closes the channel.
    sim.step(Input::Own(Request::Finish { succeeded: false }))?;
    prop_assert!(sim.core.stopped());
    if sim.record.bye {
        for (j, a) in sim
            .arrivals
            .iter()
            .enumerate()
            .filter(|(_, a)| a.link.is_some())
        {
            prop_assert!(!a.heard.is_empty(), "a-{} waits after the job's success", j);
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Whatever happens in whatever order: one `Go` for everyone, with the largest epoch and
    /// the smallest budget, only once all have joined with one view; one verdict per loss,
    /// taken back only to make it final; no restart beyond the budget or after a member
    /// finished; forged frames change nothing; a stopped coordinator says nothing; and every
    /// follower still connected at the end heard the verdict the coordinator holds.
    #[test]
    fn the_coordinator_keeps_its_invariants_under_any_interleaving(
        members in 1..6usize,
        nexts in proptest::collection::vec(0..4u32, 6),
        budgets in proptest::collection::vec(0..4u32, 6),
        preemptions in proptest::collection::vec(0..3u32, 6),
        free in proptest::collection::vec(prop_oneof![0..3u32, Just(UNBOUNDED_PREEMPTIONS)], 6),
        stale in proptest::collection::vec(proptest::bool::weighted(0.05), 6),
        serving in proptest::collection::vec(proptest::bool::weighted(0.3), 6),
        actions in proptest::collection::vec(action(), 0..160),
    ) {
        let (sim, first) = Sim::new(
            &nexts[..members],
            &budgets[..members],
            &preemptions[..members],
            &free[..members],
            &stale[..members],
            &serving[..members],
        );
        keeps_its_invariants(sim, first, &actions)?;
    }

    /// The same for an elastic job (no pserver pods, views alike or not), pods that are no
    /// member arriving and leaving while it runs: an arrival hears nothing of the attempt but
    /// its end (the verdict, or the success), never a refusal while the job runs; a grow is a
    /// free restart whatever the budget and the free preemptions left, told only while the job
    /// trains, within the window after the first arrival still waiting, its restart within the
    /// checkpoint window after it.
    #[test]
    fn an_elastic_coordinator_keeps_its_invariants_and_grows_in_time(
        members in 1..6usize,
        nexts in proptest::collection::vec(0..4u32, 6),
        budgets in proptest::collection::vec(0..4u32, 6),
        preemptions in proptest::collection::vec(0..3u32, 6),
        free in proptest::collection::vec(prop_oneof![0..3u32, Just(UNBOUNDED_PREEMPTIONS)], 6),
        stale in proptest::collection::vec(proptest::bool::weighted(0.05), 6),
        window in 1..40u64,
        checkpoint in prop_oneof![Just(0u64), 1..20u64],
        actions in proptest::collection::vec(elastic_action(), 0..200),
    ) {
        let growth = Growth {
            window: Duration::from_secs(window),
            checkpoint_window: Duration::from_secs(checkpoint),
        };
        let serving = [false; 6];
        let (sim, first) = Sim::elastic(
            &nexts[..members],
            &budgets[..members],
            &preemptions[..members],
            &free[..members],
            &stale[..members],
            &serving[..members],
            Some(growth),
        );
        keeps_its_invariants(sim, first, &actions)?;
    }

    /// A job whose failures stop: every member joins, every trainer succeeds and every
    /// launcher with a trainer leaves, in any order: the coordinator starts once, restarts
    /// nothing and ends with goodbye once its own trainer is done too, without waiting for the
    /// members that only serve (the split layout's pservers), which hear the goodbye.
    #[test]
    fn a_job_without_failures_completes(
        members in 1..6usize,
        order in proptest::collection::vec(0..6usize, 0..40),
        serving in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let zeros = vec![0u32; members];
        let unbounded = vec![UNBOUNDED_PREEMPTIONS; members];
        let budgets = vec![2u32; members];
        let fresh = vec![false; members];
        let (mut sim, first) = Sim::new(&zeros, &budgets, &zeros, &unbounded, &fresh, &serving[..members]);
        sim.apply(first)?;
        for i in 0..members - 1 {
            sim.act(&Action::Connect(i))?;
        }
        for &i in &order {
            sim.act(&Action::ToCoordinator(i))?;
        }
        sim.drain()?;
        prop_assert_eq!(sim.record.gos.len(), 1);
        // The trainers succeed; the pservers serve until they are told.
        let trains = |i: usize| !serving[1 + i % (members - 1).max(1)];
        for &i in order.iter().filter(|&&i| trains(i)) {
            sim.act(&Action::Succeeds(i))?;
            sim.act(&Action::ToCoordinator(i))?;
        }
        for i in (0..members - 1).filter(|&i| trains(i)) {
            sim.act(&Action::Succeeds(i))?;
            sim.act(&Action::Leaves(i))?;
        }
        sim.drain()?;
        sim.act(&Action::OwnFinish(true))?;
        prop_assert!(sim.core.stopped());
        prop_assert!(sim.record.bye, "the job's success was not told");
        sim.drain()?;
        for f in sim.followers.iter().filter(|f| f.serving) {
            prop_assert!(f.following.told(), "{} did not hear the job's success", &f.name);
        }
        prop_assert!(sim.record.lost.is_empty(), "{:?}", sim.record.lost);
        // It succeeded: started, and nothing was lost.
        let training = sim.core.training();
        prop_assert!(training);
        let heard_go = sim.followers.iter().all(|f| f.go.is_some());
        prop_assert!(heard_go);
    }
}

/// Starts a job of `nexts.len()` members (every hello read), and returns it running.
fn running(
    nexts: &[u32],
    budget: u32,
    preemptions: &[u32],
    free: u32,
) -> Result<Sim, TestCaseError> {
    let budgets = vec![budget; nexts.len()];
    let frees = vec![free; nexts.len()];
    let fresh = vec![false; nexts.len()];
    let (mut sim, first) = Sim::new(nexts, &budgets, preemptions, &frees, &fresh, &fresh);
    sim.apply(first)?;
    for i in 0..nexts.len() - 1 {
        sim.act(&Action::Connect(i))?;
    }
    sim.drain()?;
    prop_assert_eq!(sim.record.gos.len(), 1);
    Ok(sim)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 10, ..ProptestConfig::default() })]

    /// A preempted member (a follower, or the coordinator's own launcher), whatever then ends
    /// the attempt (its connection closes, it fails, another trainer fails as its peer
    /// leaves, the coordinator's pod is killed before it says a word), restarts the job with
    /// no budget spent while the job's preemptions are free; beyond them, it is judged as a
    /// failure. The next attempt, where the preempted pod is a fresh launcher, starts with a
    /// free preemption counted, and a failure then is judged by the restarts less the free
    /// preemptions.
    #[test]
    fn a_free_preemption_restarts_the_job_whatever_the_budget(
        members in 2..6usize,
        budget in 0..3u32,
        epoch in 0..4u32,
        before in 0..3u32,
        free in prop_oneof![0..3u32, Just(UNBOUNDED_PREEMPTIONS)],
        preempted in 0..6usize,
        end in 0..4u8,
    ) {
        let preempted = preempted % members; // 0: the coordinator's own launcher
        let before = before.min(epoch);
        let is_free = before < free;
        let mut sim = running(&vec![epoch; members], budget, &vec![before; members], free)?;
        let follower = |k: usize| k - 1;
        if preempted == 0 {
            sim.act(&Action::OwnPreempted)?;
        } else {
            sim.act(&Action::Preempted(follower(preempted)))?;
        }
        sim.drain()?;
        prop_assert!(sim.record.checkpoint.is_some(), "nobody was asked for a checkpoint");
        let asked = sim.followers.iter().enumerate().all(|(i, f)| f.asked_checkpoint || i + 1 == preempted);
        prop_assert!(asked, "a trainer was not asked for a checkpoint");
        if end == 3 {
            // Every follower is left to its own word: the preemption's end, a restart.
            sim.coordinator_gone()?;
            for f in &sim.followers {
                prop_assert_eq!(f.preempted_losses.last(), Some(&is_free), "{}", &f.name);
                // Its own budget judges a preemption that is not free.
                prop_assert_eq!(f.verdict, Some(true), "{}", &f.name);
            }
            return Ok(());
        }
        // Another member than the preempted one, to fail as its peer leaves.
        let other = (preempted + 1) % members;
        match (end, preempted) {
            (0, 0) | (1, 0) => sim.act(&Action::OwnFails(true, false))?,
            (0, k) => sim.act(&Action::Breaks(follower(k), false))?,
            (1, k) => sim.act(&Action::Fails(follower(k), true, false))?,
            (_, _) if other == 0 => sim.act(&Action::OwnFails(true, false))?,
            (_, _) => sim.act(&Action::Fails(follower(other), true, false))?,
        }
        sim.drain()?;
        for i in 0..members - 1 {
            sim.act(&Action::Stops(i))?;
        }
        sim.act(&Action::OwnStops)?;
        sim.drain()?;
        prop_assert_eq!(&sim.record.lost_preempted, &vec![is_free]);
        let restarts = is_free || epoch - before < budget;
        prop_assert_eq!(&sim.record.verdicts, &vec![restarts], "free {} before {}", free, before);
        if !restarts {
            return Ok(());
        }

        // The next attempt: the survivors count a free preemption, the replacement knows
        // nothing.
        let counted_by_survivors = before + u32::from(is_free);
        let nexts: Vec<u32> = (0..members).map(|k| if k == preempted { 0 } else { epoch + 1 }).collect();
        let counted: Vec<u32> = (0..members).map(|k| if k == preempted { 0 } else { counted_by_survivors }).collect();
        let mut sim = running(&nexts, budget, &counted, free)?;
        prop_assert_eq!(sim.record.gos[0], (epoch + 1, budget, counted_by_survivors, free));
        sim.act(&Action::Fails(0, true, false))?;
        sim.drain()?;
        // epoch + 1 restarts, the free preemptions among them spent nothing.
        let spent = epoch + 1 - counted_by_survivors;
        prop_assert_eq!(&sim.record.lost, &vec![spent < budget], "budget {} epoch {}", budget, epoch);
    }
}

/// The same `Heard` for the coordinator's own launcher as for the followers: it hears the
/// verdict of a loss another member reported.
#[test]
fn the_coordinators_own_launcher_hears_a_followers_failure() {
    let free = [UNBOUNDED_PREEMPTIONS; 2];
    let (mut sim, first) = Sim::new(
        &[0, 0],
        &[2, 2],
        &[0, 0],
        &free,
        &[false, false],
        &[false, false],
    );
    sim.apply(first).unwrap();
    sim.act(&Action::Connect(0)).unwrap();
    sim.act(&Action::ToCoordinator(0)).unwrap();
    sim.act(&Action::ToFollower(0)).unwrap();
    sim.act(&Action::Fails(0, true, false)).unwrap();
    let Some(Input::Said { link, pod, message }) = sim.followers[0].outbox.pop_front() else {
        panic!("nothing said");
    };
    let effects = sim.core.step(Input::Said { link, pod, message });
    assert!(effects.contains(&Effect::Hear(Heard::Lost(Loss {
        reason: "trainer exited with status 3".into(),
        restart: true,
        kind: Kind::Failure,
    }))));
}
