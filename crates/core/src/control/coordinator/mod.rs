//! The coordinator's decisions, as a pure state machine: what it is told (a member joined, said
//! something, its link ended, this launcher's own request, the clock) goes in; what it says
//! (to every link, to one, to this launcher) comes out. The task in `mod.rs` only carries the
//! effects out over TCP, so every decision here is driven, unit-tested and simulated
//! (`simulation.rs`) without a socket.

mod losing;
mod starting;
use losing::loss_told;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

pub use super::heard::GROWS;
use super::heard::{after_preemption, judge_preemption, Heard, Known, LogLine, Request};
use super::message::{cut, Message, WireError};
use crate::ledger::Ledger;
use crate::loss::{Kind, Loss};
use crate::membership::Membership;
use crate::progress::{suspect, LastProgress};
use crate::verdict::{verdict, Standing};
use std::time::Instant;

/// What the coordinator is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A member's authenticated hello on connection `link`.
    Joined {
        link: u64,
        pod: String,
        view: String,
        /// How it names itself ("pod p-1 on node n7 (trainer id 1 of 3)").
        who: String,
        /// What it says of the job's restarts.
        terms: Terms,
    },
    /// A joined member's report of its trainer's progress, read `at` (this launcher's clock):
    /// it had been `quiet` that long.
    Progress {
        link: u64,
        pod: String,
        step: Option<u64>,
        quiet: Duration,
        at: Instant,
        /// Of several trainer processes, the one furthest behind (its trainer id).
        behind: Option<u32>,
    },
    /// This launcher's own trainer's progress.
    OwnProgress {
        step: Option<u64>,
        last: Instant,
        behind: Option<u32>,
    },
    /// What a joined member said after its hello (`Done`, `Failed`, `Stopped`) on `link`.
    Said {
        link: u64,
        pod: String,
        message: Message,
    },
    /// A joined member's connection ended.
    Ended {
        link: u64,
        pod: String,
        why: WireError,
    },
    /// This launcher's own request.
    Own(Request),
    /// The clock, now.
    Tick(Instant),
}

/// What the coordinator says or does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// To every member joined now.
    Broadcast(Message),
    /// To connection `link` only.
    Send { link: u64, message: Message },
    /// Let go of connection `link`: it writes what is queued, then closes.
    Close(u64),
    /// To this launcher.
    Hear(Heard),
    /// What this launcher knows now (the channel's state): the job's loss without hearing it
    /// (it told it), the verdict, a checkpoint asked of its trainers, that every trainer
    /// succeeded (a launcher without one), an elastic gathering's attendance.
    Know(Known),
    /// This launcher learns that a member has served its part (`Message::Served`).
    Served(String),
    /// Nothing more to say: the channel ends.
    Stop,
}

/// Where the coordinator is, with what it knows there: no flag beside it says more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for every member's hello: what each said of the job (the epoch it would start
    /// next, its budget, the preemptions it knows of).
    Gathering {
        since: Instant,
        ready: HashMap<String, Terms>,
    },
    /// Started the attempt of this ledger (its epoch, budget and free restarts as agreed);
    /// nothing lost yet.
    Running {
        ledger: Ledger,
        /// A member was preempted: every trainer was asked for a checkpoint, and the attempt's
        /// end, whatever ends it, is the preemption's (a trainer whose peer left fails too),
        /// which spends no restart.
        preempted: Option<Preempted>,
        growing: GrowthState,
    },
    /// The started attempt is lost, told to every member. The verdict waits until the members
    /// joined then have stopped or gone (`awaiting`), and this launcher's children too: each
    /// says `Done` before `Stopped` on its one connection, so by then every success is known.
    Lost {
        loss: Loss,
        awaiting: HashSet<String>,
        own_stopped: bool,
    },
    /// The verdict on the loss is final (`loss.restart`): told to everyone, and to every pod
    /// that joins from now on.
    Decided(Loss),
    /// The members' configurations cannot start together (why): told to every member that
    /// joins again, until every member has heard it.
    Refused(String),
    /// Said what there was to say (the job gathers again, or was lost before its start: that
    /// loss); waiting for this launcher to close the channel.
    Closing(Option<Loss>),
    /// The last word is out: nothing more is said. The stage it stopped in.
    Stopped(Box<Stage>),
}

impl Stage {
    /// This stage, or the one a stopped coordinator stopped in.
    fn last(&self) -> &Stage {
        match self {
            Stage::Stopped(stage) => stage.last(),
            stage => stage,
        }
    }
}

/// A member preempted in the running attempt: its pod, and what its launcher said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preempted {
    pod: String,
    reason: String,
}

/// An elastic job's growth in the running attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrowthState {
    /// No pod waits to join (none came, or every arrival left before the window ended).
    No,
    /// The first arrival came then: the window in which others may follow runs.
    Since(Instant),
    /// Every trainer was asked for a checkpoint: the attempt ends at `at`, for `reason`.
    Due { at: Instant, reason: String },
}

/// The longest pause between two lines naming the members that have not said hello.
const HELLO_NAMED_AGAIN_LAST: Duration = Duration::from_secs(30);

/// Everything the coordinator decides from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// This launcher's pod.
    pub me: String,
    /// The other members' pods, in order (for what the log names) and for lookups: a join
    /// must cost the same whether the job has ten pods or ten thousand.
    others: Vec<String>,
    is_other: HashSet<String>,
    /// The members without a trainer (the split layout's pserver pods): their work ends with
    /// the trainers' (they never say `Done` while the job trains), so a success waits only for
    /// the others.
    serving: HashSet<String>,
    /// Serving members whose part ended cleanly (a fleet pserver stopped by the trainers'
    /// `stop_server`): their close is no loss, and no trainer finished by it.
    served: HashSet<String>,
    view: String,
    /// What this launcher says of the job's restarts (the job's preemptions before this
    /// attempt, as it knows them, among them).
    own: Terms,
    join_grace: Duration,
    pub stage: Stage,
    /// The live connection of each joined member; a second hello of the same pod is refused.
    pub links: HashMap<String, u64>,
    /// The members whose trainer succeeded, this launcher among them once its own has.
    pub done: HashSet<String>,
    /// How each member names itself, this launcher too.
    who: HashMap<String, String>,
    /// Each member's last progress report (this launcher's too): the link it came on (None:
    /// this launcher's), the step, and when the member last progressed (as of `at`, `quiet`).
    progress: HashMap<String, Reported>,
    /// The last tick's time: what "how long ago" is measured from.
    now: Instant,
    /// How far apart two members' last progress must be for the older to stand out: what a
    /// report's staleness (its beat interval, twice) and a progress file's polling may blur.
    progress_margin: Duration,
    /// How long a member found Running may be silent before the gathering names it: a
    /// launcher without the job secret (or with another) never says hello, and nothing else
    /// would say so before the join grace ends. Named again after twice as long each time,
    /// up to `HELLO_NAMED_AGAIN_LAST`.
    hello_overdue: Duration,
    /// When the members that have not said hello are named next.
    hello_named_at: Instant,
    /// Members that joined while the attempt's end was not known yet (after the loss, before
    /// the verdict; a member that had served its part, back): told how it ends.
    held: HashMap<String, u64>,
    /// The job had ended before this coordinator started: it serves only to tell every
    /// member that joins (as a refusal does).
    ended: bool,
    /// Members told the job's end, or its refusal, as they joined.
    told: HashSet<String>,
    membership: Option<Membership>,
    growth: Option<Growth>,
    /// Pods that are no member and said hello while the job trained, each on its link: held
    /// (they hear nothing of the attempt) until it ends, then told how.
    arrivals: HashMap<String, u64>,
    /// What the last step said for the log (`lines`).
    said: Vec<LogLine>,
}

/// How a member is named in the job's lines: what it says of itself ("pod p-1 on node n7
/// (trainer id 1 of 3)"), without control characters (the line reaches logs, termination
/// messages and events), and only if it names its own pod; else just its pod.
fn named(pod: &str, said: &str) -> String {
    let clean: String = said.chars().filter(|c| !c.is_control()).collect();
    let own = format!("pod {pod}");
    match clean.strip_prefix(&own) {
        Some(rest) if rest.is_empty() || rest.starts_with(' ') => clean,
        _ => own,
    }
}

/// What a member says of the job's restarts when it joins: the job agrees on the largest epoch,
/// the most preemptions and the smallest allowances any member says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// Its ledger (its epoch: the one it would start next; its own allowances).
    pub ledger: Ledger,
    /// The trainer processes its pod runs: the same on every pod, or nothing starts.
    pub nproc_per_pod: u32,
}

impl Terms {
    /// A job's first start with this budget, no preemption yet, and every preemption free.
    pub fn first(max_restarts: u32) -> Terms {
        Terms {
            ledger: Ledger::first(max_restarts),
            nproc_per_pod: 1,
        }
    }
}

/// What a coordinator starts from.
pub struct Setup {
    pub me: String,
    pub others: Vec<String>,
    pub view: String,
    pub terms: Terms,
    pub join_grace: Duration,
    pub membership: Option<Membership>,
    /// The job has ended (why): every member that joins hears a final `Lost`.
    pub ended: Option<String>,
    /// How this launcher names itself in the job's lines.
    pub who: String,
    /// See `Core::progress_margin`.
    pub progress_margin: Duration,
    /// See `Core::hello_overdue`.
    pub hello_overdue: Duration,
    /// An elastic job: pods that join while it trains make it grow.
    pub growth: Option<Growth>,
}

/// How an elastic job's coordinator starts the refusal it sends a pod that cannot join (it
/// runs another number of processes): the pod is turned away, and the job goes on without it.
pub const TURNED_AWAY: &str = "turned away by the job's coordinating launcher";

/// How an elastic job's coordinator grows the job: a pod that is no member says hello while
/// the job trains (its pod is Running, its launcher has the job's secret); more may follow
/// within `window` of the first, then every trainer is asked for a checkpoint, given
/// `checkpoint_window`, and the job restarts with them, spending no restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growth {
    pub window: Duration,
    pub checkpoint_window: Duration,
}

/// One member's last progress report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    link: Option<u64>,
    step: Option<u64>,
    quiet: Duration,
    at: Instant,
    behind: Option<u32>,
}

impl Core {
    /// A coordinator gathering since `now`, and what it says at once (a job of one pod starts).
    pub fn start(setup: Setup, now: Instant) -> (Core, Vec<Effect>) {
        let me_name = setup.me.clone();
        let serving = setup
            .membership
            .iter()
            .flat_map(Membership::without_trainer)
            .map(str::to_string)
            .collect();
        let stage = match &setup.ended {
            // As if it had run and lost, for good.
            Some(reason) => Stage::Decided(Loss {
                restart: false,
                ..Loss::of_pod(reason.clone())
            }),
            None => Stage::Gathering {
                since: now,
                ready: HashMap::new(),
            },
        };
        let mut core = Core {
            serving,
            served: HashSet::new(),
            me: setup.me,
            is_other: setup.others.iter().cloned().collect(),
            others: setup.others,
            view: setup.view,
            own: setup.terms,
            join_grace: setup.join_grace,
            stage,
            links: HashMap::new(),
            done: HashSet::new(),
            who: HashMap::from([(me_name.clone(), named(&me_name, &setup.who))]),
            progress: HashMap::new(),
            now,
            progress_margin: setup.progress_margin,
            hello_overdue: setup.hello_overdue,
            hello_named_at: now + setup.hello_overdue,
            held: HashMap::new(),
            ended: setup.ended.is_some(),
            told: HashSet::new(),
            membership: setup.membership,
            growth: setup.growth,
            arrivals: HashMap::new(),
            said: Vec::new(),
        };
        let mut effects = Vec::new();
        core.start_when_ready(&mut effects);
        core.stop_when_done(&mut effects);
        (core, effects)
    }

    /// One input, and what it makes the coordinator say. Nothing once it has stopped.
    pub fn step(&mut self, input: Input) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.said.clear();
        if self.stopped() {
            return effects;
        }
        match input {
            Input::Joined {
                link,
                pod,
                view,
                who,
                terms,
            } => {
                if self.is_other.contains(&pod) && !self.links.contains_key(&pod) {
                    self.who.insert(pod.clone(), named(&pod, &who));
                }
                self.joined(link, pod, view, terms, &mut effects)
            }
            // Heartbeats: noted, nothing decided (a thousand of them a second must stay cheap).
            Input::Progress {
                link,
                pod,
                step,
                quiet,
                at,
                behind,
            } => {
                if self.links.get(&pod) == Some(&link) {
                    let link = Some(link);
                    let report = Reported {
                        link,
                        step,
                        quiet,
                        at,
                        behind,
                    };
                    self.progress.insert(pod, report);
                }
                return effects;
            }
            Input::OwnProgress { step, last, behind } => {
                let report = Reported {
                    link: None,
                    step,
                    quiet: Duration::ZERO,
                    at: last,
                    behind,
                };
                self.progress.insert(self.me.clone(), report);
                return effects;
            }
            Input::Said { link, pod, message } => self.said(link, pod, message, &mut effects),
            Input::Ended { link, pod, why } => self.ended_link(link, pod, why, &mut effects),
            Input::Own(request) => self.own(request, &mut effects),
            Input::Tick(now) => {
                self.now = self.now.max(now);
                self.tick(now, &mut effects)
            }
        }
        self.stop_when_done(&mut effects);
        effects
    }

    /// What the last step said for the pod's log, taken (the next step forgets it anyway).
    pub fn lines(&mut self) -> Vec<LogLine> {
        std::mem::take(&mut self.said)
    }

    fn info(&mut self, line: String) {
        self.said.push(LogLine::Info(line));
    }

    fn warn(&mut self, line: String) {
        self.said.push(LogLine::Warn(line));
    }

    pub fn stopped(&self) -> bool {
        matches!(self.stage, Stage::Stopped(_))
    }

    /// Whether an attempt started (it may have been lost since, or the channel stopped).
    pub fn started(&self) -> bool {
        matches!(
            self.stage.last(),
            Stage::Running { .. } | Stage::Lost { .. } | Stage::Decided(_)
        )
    }

    /// Started, and nothing lost yet (the channel may have stopped since).
    pub fn training(&self) -> bool {
        matches!(self.stage.last(), Stage::Running { .. })
    }

    /// The job's loss as last told, if any.
    #[cfg(any(test, feature = "testing"))]
    pub fn loss(&self) -> Option<&Loss> {
        match self.stage.last() {
            Stage::Lost { loss, .. } | Stage::Decided(loss) | Stage::Closing(Some(loss)) => {
                Some(loss)
            }
            _ => None,
        }
    }

    /// The verdict on the loss, once final: whether the job restarts. "No restart" is final
    /// as soon as it is said.
    #[cfg(any(test, feature = "testing"))]
    pub fn verdict(&self) -> Option<bool> {
        match self.stage.last() {
            Stage::Decided(loss) => Some(loss.restart),
            // A loss before the start that may not restart (a started one is `Decided` at once).
            Stage::Closing(Some(loss)) if !loss.restart => Some(false),
            _ => None,
        }
    }

    /// How a member names itself in the job's lines (its pod's name when it said nothing).
    pub fn who<'a>(&'a self, pod: &'a str) -> &'a str {
        self.who.get(pod).map_or(pod, String::as_str)
    }

    /// The trainer ids a member's processes have (its rank's, times the processes per pod):
    /// what its heartbeats may report of; None when this coordinator has no membership to
    /// say (none is checked then).
    pub fn trainer_ids(&self, pod: &str) -> Option<std::ops::Range<u32>> {
        let membership = self.membership.as_ref()?;
        let per_pod = self.own.nproc_per_pod;
        let ids = match membership.trainers.iter().find(|m| m.name == pod) {
            Some(member) => {
                let first = (member.rank as u32).saturating_mul(per_pod);
                first..first.saturating_add(per_pod)
            }
            None => 0..0,
        };
        Some(ids)
    }

    /// The attempt under way, for the job's view: its ledger, the pods joined (this one
    /// too) and the trainer processes of the members with a trainer. None before the start
    /// and once anything is lost.
    pub fn attempt(&self) -> Option<crate::job_view::AttemptShape> {
        let Stage::Running { ledger, .. } = &self.stage else {
            return None;
        };
        let trainers = (self.others.len() + 1).saturating_sub(self.serving.len()) as u32;
        Some(crate::job_view::AttemptShape {
            ledger: *ledger,
            pods: self.links.len() as u32 + 1,
            ranks: trainers * self.own.nproc_per_pod,
        })
    }

    /// Followers with a trainer that have neither said they are done nor gone.
    pub fn waiting_for(&self) -> Vec<String> {
        self.others
            .iter()
            .filter(|pod| !self.done.contains(*pod) && self.links.contains_key(*pod))
            .filter(|pod| !self.serving.contains(*pod))
            .cloned()
            .collect()
    }

    // Neither means anything before the start: no trainer ran.
    fn said(&mut self, link: u64, pod: String, message: Message, effects: &mut Vec<Effect>) {
        // Only the pod's live connection speaks for it (not a second one being refused).
        if self.links.get(&pod) != Some(&link) || !self.started() {
            return;
        }
        match message {
            // A pserver pod's end is no trainer's success: it neither ends the job's restarts
            // nor is awaited; its pod's end is no loss, which everyone watching it must know.
            // Its pserver has ended: after a loss, it has nothing left to stop.
            Message::Done if self.serving.contains(&pod) => {
                self.stopped_or_gone(&pod, effects);
                self.serve(pod, effects);
            }
            // A pserver pod whose pserver has ended has nothing left to fail, nor to preempt:
            // it leaves (a loss it saw through the API, this launcher sees too).
            Message::Failed(_) | Message::Preempted { .. } if self.served.contains(&pod) => {
                self.info(format!(
                    "control channel: {pod} leaves (its pserver had ended)"
                ));
            }
            Message::Done => {
                // The first success is news to the followers; later ones change nothing for
                // them, and a thousand would cost a million frames.
                if self.done.is_empty() {
                    effects.push(Effect::Broadcast(Message::Finished { pod: pod.clone() }));
                }
                self.done.insert(pod.clone());
                self.finished_after_loss(&pod, effects);
            }
            Message::Failed(ending) => self.lose(&pod, ending, effects),
            Message::Preempted { reason } => self.preempted(pod, reason, effects),
            Message::Stopped => self.stopped_or_gone(&pod, effects),
            _ => {}
        }
    }

    fn ended_link(&mut self, link: u64, pod: String, why: WireError, effects: &mut Vec<Effect>) {
        if self.arrivals.get(&pod) == Some(&link) {
            self.info(format!(
                "control channel: {pod}, which had arrived to join the job, left: {why}"
            ));
            self.arrivals.remove(&pod);
            if let Stage::Running { growing, .. } = &mut self.stage {
                if self.arrivals.is_empty() && matches!(growing, GrowthState::Since(_)) {
                    *growing = GrowthState::No;
                }
            }
            return;
        }
        if self.links.get(&pod) != Some(&link) {
            return;
        }
        self.links.remove(&pod);
        if matches!(self.stage, Stage::Refused(_)) && matches!(why, WireError::Closed) {
            self.told.insert(pod);
            self.stop_when_done(effects);
            return;
        }
        // A member whose trainer is done may still serve the others (a lingering pserver):
        // its silence is a loss too (a final one), its close is not. A member that has served
        // its part serves nothing: neither is.
        let finished = self.done.contains(&pod) || self.served.contains(&pod);
        let silent_unserved = matches!(why, WireError::Silent(_)) && !self.served.contains(&pod);
        if let Stage::Gathering { ready, .. } = &mut self.stage {
            ready.remove(&pod);
            self.info(format!(
                "control channel: {pod} left before the start: {why}"
            ));
        } else if self.training() && (!finished || silent_unserved) {
            let reason = match why {
                WireError::Silent(seconds) => format!(
                    "peer pod {pod} sent no heartbeat for {seconds} s (frozen, or its node is gone)"
                ),
                WireError::Closed => format!(
                    "the launcher of peer pod {pod} closed the control connection (its pod is gone, or it was killed)"
                ),
                other => format!("the control connection of peer pod {pod} failed: {other}"),
            };
            self.lose(&pod, Loss::of_pod(reason), effects);
        }
        // Gone: nothing more to wait for from it (its `Done`, if any, came first).
        self.stopped_or_gone(&pod, effects);
    }

    /// While gathering, the members that have not said hello `hello_overdue` after the
    /// gathering began, and again after twice as long each time: the line that names them.
    pub fn overdue_hellos(&mut self, now: Instant) -> Option<String> {
        let Stage::Gathering { since, .. } = &self.stage else {
            return None;
        };
        let since = *since;
        if self.hello_overdue.is_zero() || now < self.hello_named_at {
            return None;
        }
        let waited = now.saturating_duration_since(since);
        // Never more often than `hello_overdue`, which may itself be longer than the longest
        // pause (a heartbeat timeout of minutes).
        let again = waited.min(HELLO_NAMED_AGAIN_LAST).max(self.hello_overdue);
        self.hello_named_at = now + again;
        let silent = self.not_joined();
        if silent.is_empty() {
            return None;
        }
        const NAMED: usize = 8;
        let mut named = silent[..silent.len().min(NAMED)].join(", ");
        if silent.len() > NAMED {
            named.push_str(&format!(" and {} more", silent.len() - NAMED));
        }
        Some(format!(
            "control channel: {} found Running {} not said hello yet after {} s: {named}; its launcher may still be starting, or run without the job secret (PADDLE_LAUNCHER_JOB_SECRET) or with another one, and then never does; the gathering ends after {} s",
            crate::vocabulary::count(silent.len(), "pod"),
            if silent.len() == 1 { "has" } else { "have" },
            waited.as_secs(),
            self.join_grace.as_secs()
        ))
    }

    fn tick(&mut self, now: Instant, effects: &mut Vec<Effect>) {
        if let Some(line) = self.overdue_hellos(now) {
            self.warn(line);
        }
        self.grow_when_due(now, effects);
        let Stage::Gathering { since, .. } = &self.stage else {
            return;
        };
        if now.saturating_duration_since(*since) <= self.join_grace {
            return;
        }
        let absent: Vec<String> = self.not_joined().into_iter().map(String::from).collect();
        let reason = format!(
            "{} did not join the control channel within {} s",
            absent.join(", "),
            self.join_grace.as_secs()
        );
        if self.growth.is_some() {
            effects.push(Effect::Know(Known::Absent(absent)));
        }
        self.regather(reason, effects);
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The split layout's membership: pservers p0 and p1 (this launcher in p0's place when it
    /// serves), trainers me and t1 (t0 in this launcher's place when it serves).
    fn split_setup(me_serves: bool) -> Setup {
        let member = |name: &str, rank| crate::membership::Member {
            name: name.into(),
            ip: format!("10.0.0.{}", rank + 1).parse().unwrap(),
            rank,
        };
        let (p0, t0) = if me_serves {
            ("me", "t0")
        } else {
            ("p0", "me")
        };
        let others: Vec<&str> = [p0, "p1", t0, "t1"]
            .into_iter()
            .filter(|pod| *pod != "me")
            .collect();
        Setup {
            membership: Some(Membership {
                pservers: vec![member(p0, 10), member("p1", 11)],
                trainers: vec![member(t0, 0), member("t1", 1)],
            }),
            ..setup(&others)
        }
    }

    fn setup(others: &[&str]) -> Setup {
        Setup {
            me: "me".into(),
            others: others.iter().map(|p| p.to_string()).collect(),
            view: "v".into(),
            terms: Terms::first(3),
            join_grace: Duration::from_secs(60),
            membership: None,
            ended: None,
            who: "pod me (trainer id 0 of 3)".into(),
            progress_margin: Duration::from_secs(2),
            hello_overdue: Duration::from_secs(2),
            growth: None,
        }
    }

    /// A coordinator of `me`, `a` and `b`, both joined (links 1 and 2): the job runs.
    fn both_joined(at: Instant) -> Core {
        let (mut core, _) = Core::start(setup(&["a", "b"]), at);
        core.step(joined(1, "a"));
        core.step(joined(2, "b"));
        // What it said for the log: the driver's to write.
        core.lines();
        core
    }

    fn joined(link: u64, pod: &str) -> Input {
        Input::Joined {
            link,
            pod: pod.into(),
            view: "v".into(),
            who: format!("pod {pod} on node n7"),
            terms: Terms::first(3),
        }
    }

    /// What the coordinator says for the pod's log is its driver's to write, one step's at a
    /// time: the start, then a loss as a warning naming its reason; a step that says nothing
    /// leaves nothing from the one before.
    #[test]
    fn what_it_says_for_the_log_is_the_last_steps() {
        let at = Instant::now();
        let (mut core, _) = Core::start(setup(&["a"]), at);
        core.step(joined(1, "a"));
        assert_eq!(
            core.lines(),
            [
                LogLine::Info("control channel: a joined".into()),
                LogLine::Info(
                    "control channel: all 2 launchers are here: starting restart epoch 0".into()
                ),
            ]
        );
        let failed = Message::Failed(Loss {
            reason: "pod a: trainer exited with status 1".into(),
            restart: true,
            kind: Kind::Failure,
        });
        core.step(said(1, "a", failed));
        assert_eq!(
            core.lines(),
            [LogLine::Warn(
                "control channel: pod a: trainer exited with status 1".into()
            )]
        );
        core.step(Input::Tick(at));
        assert_eq!(core.lines(), []);
    }

    /// Pods that run different numbers of trainer processes cannot start together: once all
    /// have joined, everyone hears one refusal naming both numbers (status 2 everywhere), and
    /// nothing starts; pods that agree start.
    #[test]
    fn pods_with_other_processes_per_pod_are_refused_together() {
        let at = Instant::now();
        let (mut core, _) = Core::start(setup(&["a", "b"]), at);
        let mut b = joined(2, "b");
        if let Input::Joined { terms, .. } = &mut b {
            terms.nproc_per_pod = 2;
        }
        assert!(core.step(joined(1, "a")).is_empty(), "b is not there yet");
        let effects = core.step(b);
        let reason = "pod b runs 2 trainer processes and pod me (trainer id 0 of 3) 1 trainer process (PADDLE_LAUNCHER_NPROC_PER_POD (--nproc-per-pod)): every pod of the job must run as many";
        assert_eq!(
            effects,
            vec![
                Effect::Broadcast(Message::Refused {
                    reason: reason.into()
                }),
                Effect::Hear(Heard::Refused(reason.into())),
            ]
        );
        assert!(matches!(core.stage, Stage::Refused(_)));
        // Served on: a member whose link broke before it heard joins again and is told; once
        // every member has closed its link after hearing it, the coordinator stops.
        assert!(core
            .step(ended(1, "a", WireError::Io("reset".into())))
            .is_empty());
        let again = core.step(joined(3, "a"));
        assert_eq!(
            again,
            [Effect::Send {
                link: 3,
                message: Message::Refused {
                    reason: reason.into()
                }
            }]
        );
        assert!(!core.stopped());
        let effects = core.step(ended(2, "b", WireError::Closed));
        assert!(core.stopped(), "{effects:?}");
        let agreeing = both_joined(at);
        assert!(matches!(agreeing.stage, Stage::Running { .. }));
    }

    fn said(link: u64, pod: &str, message: Message) -> Input {
        Input::Said {
            link,
            pod: pod.into(),
            message,
        }
    }

    fn ended(link: u64, pod: &str, why: WireError) -> Input {
        Input::Ended {
            link,
            pod: pod.into(),
            why,
        }
    }

    /// The split layout: the pserver pods have no trainer and never say `Done` while the job
    /// trains; the job's success waits for the trainers only, and tells the pservers (`Bye`).
    /// A pserver that fails still ends the attempt, pservers and trainers alike.
    #[test]
    fn a_coordinator_without_a_trainer_tells_its_pservers_end_as_served() {
        let t0 = Instant::now();
        // A pserver pod named by --coordinator.
        let split = || split_setup(true);
        let (mut core, _) = Core::start(split(), t0);
        for (link, pod) in [(1, "p1"), (2, "t0"), (3, "t1")] {
            core.step(joined(link, pod));
        }
        assert!(matches!(core.stage, Stage::Running { .. }));
        // Its pserver ended: no trainer's success (no `Finished`), but served.
        assert_eq!(
            core.step(Input::Own(Request::Done)),
            [
                Effect::Broadcast(Message::Served { pod: "me".into() }),
                Effect::Served("me".into()),
            ]
        );
        let failed = Message::Failed(Loss {
            reason: "pod t1: trainer exited with status 3".into(),
            restart: true,
            kind: Kind::Failure,
        });
        let effects = core.step(said(3, "t1", failed));
        assert!(
            effects.iter().any(|e| matches!(
                e,
                Effect::Broadcast(Message::Lost(Loss { restart: true, .. }))
            )),
            "a trainer's failure after the coordinator's pserver ended is final: {effects:?}"
        );

        // Every trainer succeeds: it says goodbye and ends as the pservers it tells do, its
        // pserver stopped by the trainers first or still serving.
        for own_first in [true, false] {
            let (mut core, _) = Core::start(split(), t0);
            for (link, pod) in [(1, "p1"), (2, "t0"), (3, "t1")] {
                core.step(joined(link, pod));
            }
            if own_first {
                core.step(Input::Own(Request::Done));
            }
            assert_eq!(
                core.step(said(2, "t0", Message::Done)),
                [Effect::Broadcast(Message::Finished { pod: "t0".into() })]
            );
            assert_eq!(
                core.step(said(3, "t1", Message::Done)),
                [
                    Effect::Broadcast(Message::Bye),
                    Effect::Know(Known::Succeeded),
                    Effect::Stop
                ]
            );
        }
    }

    /// A pserver pod that has served its part serves nothing: neither its silence (its node
    /// gone) nor its launcher joining again under the same name (its container restarted)
    /// is a loss.
    #[test]
    fn a_served_pods_silence_or_return_is_no_loss() {
        let (mut core, _) = Core::start(split_setup(false), Instant::now());
        for (link, pod) in [(1, "p0"), (2, "p1"), (3, "t1")] {
            core.step(joined(link, pod));
        }
        core.step(said(1, "p0", Message::Done));
        let silent = ended(1, "p0", WireError::Silent(10));
        assert_eq!(core.step(silent), []);
        assert_eq!(core.step(joined(9, "p0")), []);
        // A pserver still serving is lost when silent.
        let silent = ended(2, "p1", WireError::Silent(10));
        let effects = core.step(silent);
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::Broadcast(Message::Lost(Loss { .. })))),
            "{effects:?}"
        );
    }

    #[test]
    fn a_success_waits_for_the_trainers_only() {
        let t0 = Instant::now();
        let split = || split_setup(false);
        // Every member joined: the attempt runs.
        let running = || {
            let (mut core, _) = Core::start(split(), t0);
            for (link, pod) in [(1, "p0"), (2, "p1"), (3, "t1")] {
                core.step(joined(link, pod));
            }
            core
        };
        let mut core = running();
        assert!(matches!(core.stage, Stage::Running { .. }));
        let finish = Input::Own(Request::Finish { succeeded: true });
        assert!(!core.step(finish.clone()).contains(&Effect::Stop));
        assert_eq!(core.waiting_for(), ["t1"]);
        let effects = core.step(said(3, "t1", Message::Done));
        assert_eq!(
            effects,
            [Effect::Broadcast(Message::Bye), Effect::Stop],
            "the pservers are told the job's success, not waited for"
        );

        let mut core = running();
        let failed = Message::Failed(Loss {
            reason: "pod p1: pserver exited with status 1".into(),
            restart: true,
            kind: Kind::Failure,
        });
        let effects = core.step(said(2, "p1", failed));
        assert!(
            effects.iter().any(|e| matches!(
                e,
                Effect::Broadcast(Message::Lost(Loss { restart: true, .. }))
            )),
            "{effects:?}"
        );
        assert!(
            matches!(&core.stage, Stage::Lost { awaiting, .. } if awaiting.len() == 3),
            "every member stops, pservers too"
        );

        // A pserver pod whose pserver ended cleanly says Done: no trainer finished by it (a
        // failure after it may still restart the job), and its close is no loss; everyone
        // (whose API watch sees its pod) is told it has served, once.
        let mut core = running();
        let served = [
            Effect::Broadcast(Message::Served { pod: "p0".into() }),
            Effect::Served("p0".into()),
        ];
        assert_eq!(core.step(said(1, "p0", Message::Done)), served);
        assert_eq!(core.step(said(1, "p0", Message::Done)), []);
        let closed = ended(1, "p0", WireError::Closed);
        assert_eq!(core.step(closed), []);
        let failed = Message::Failed(Loss {
            reason: "pod t1: trainer exited with status 3".into(),
            restart: true,
            kind: Kind::Failure,
        });
        let effects = core.step(said(3, "t1", failed.clone()));
        assert!(
            effects.iter().any(|e| matches!(
                e,
                Effect::Broadcast(Message::Lost(Loss { restart: true, .. }))
            )),
            "{effects:?}"
        );

        // After a loss, a pserver pod whose pserver has ended has nothing to stop: the
        // verdict does not wait for a `Stopped` it will never say.
        let mut core = running();
        core.step(said(3, "t1", failed));
        core.step(Input::Own(Request::Stopped));
        core.step(said(3, "t1", Message::Stopped));
        core.step(said(2, "p1", Message::Stopped));
        let effects = core.step(said(1, "p0", Message::Done));
        assert!(
            effects.contains(&Effect::Broadcast(Message::Verdict { restart: true })),
            "{effects:?}"
        );

        // A pserver pod whose pserver ended leaves as it may (stopped, evicted): no loss, no
        // checkpoint asked of the trainers.
        let mut core = running();
        core.step(said(1, "p0", Message::Done));
        let leaving = [
            Message::Preempted {
                reason: "pod p0: preempted".into(),
            },
            Message::Failed(Loss {
                reason: "pod p0: received SIGTERM; its pserver had ended".into(),
                restart: true,
                kind: Kind::Failure,
            }),
        ];
        for message in leaving {
            assert_eq!(core.step(said(1, "p0", message)), []);
        }
        assert!(core.loss().is_none());
    }

    /// A member that finished stopped progressing for good: it is no suspect, however old its
    /// last report. What a member says of itself is cleaned (no control characters) and kept
    /// only if it names its own pod.
    #[test]
    fn a_finished_member_is_no_suspect_and_names_are_cleaned() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let (mut core, _) = Core::start(setup(&["a", "b", "c"]), t0);
        core.step(joined(1, "a"));
        core.step(Input::Joined {
            link: 2,
            pod: "b".into(),
            view: "v".into(),
            who: "pod b\njob stopped: FORGED\u{1b}[2J (trainer id 1 of 3)".into(),
            terms: Terms::first(3),
        });
        core.step(Input::Joined {
            link: 3,
            pod: "c".into(),
            view: "v".into(),
            who: "pod a (trainer id 0 of 3)".into(),
            terms: Terms::first(3),
        });
        for (link, pod, quiet) in [(1, "a", 500), (2, "b", 40), (3, "c", 30)] {
            core.step(Input::Progress {
                link,
                pod: pod.into(),
                step: None,
                quiet: s(quiet),
                at: t0,
                behind: None,
            });
        }
        core.step(said(1, "a", Message::Done));
        core.step(Input::Tick(t0 + s(1)));
        let effects = core.step(said(
            3,
            "c",
            Message::Failed(Loss {
                reason: "pod c: trainer-2 made no progress for 30 s".into(),
                restart: true,
                kind: Kind::Hang,
            }),
        ));
        let Some(Effect::Broadcast(Message::Lost(Loss { reason, .. }))) = effects.first() else {
            panic!("{effects:?}")
        };
        assert!(
            reason.starts_with("the job hangs: suspect pod b: its last progress is the oldest, 41.0 s ago (the others' 31.0 s or less)"),
            "{reason}"
        );
        // The Failed reason's own control characters are not passed on either.
        assert!(!reason.chars().any(char::is_control), "{reason}");
        // `c` claimed to be pod a: it is named as itself.
        assert_eq!(core.who["c"], "pod c");
    }

    /// Nothing ran before `Go`: a `Done` then is not a finished member.
    #[test]
    fn a_done_before_the_start_is_ignored() {
        let (mut core, _) = Core::start(setup(&["a", "b"]), Instant::now());
        core.step(joined(1, "a"));
        assert!(core.step(said(1, "a", Message::Done)).is_empty());
        assert!(core.done.is_empty());
        let go = core.step(joined(2, "b"));
        assert!(matches!(
            go[0],
            Effect::Broadcast(Message::Go {
                ledger: Ledger { epoch: 0, .. },
                ..
            })
        ));
        let effects = core.step(said(1, "a", Message::Done));
        assert!(core.done.contains("a"));
        assert_eq!(
            effects,
            [Effect::Broadcast(Message::Finished { pod: "a".into() })]
        );
    }

    /// A member whose trainer is done may still serve the others (its pserver lingers): its
    /// launcher closing the connection is its normal end, its silence is a loss, and a final
    /// one.
    #[test]
    fn a_done_member_that_goes_silent_is_a_final_loss() {
        for (why, lost) in [
            (WireError::Closed, None),
            (WireError::Silent(2), Some(false)),
        ] {
            let (mut core, _) = Core::start(setup(&["a"]), Instant::now());
            core.step(joined(7, "a"));
            core.step(said(7, "a", Message::Done));
            core.step(ended(7, "a", why));
            assert_eq!(core.loss().map(|loss| loss.restart), lost);
        }
    }

    /// A coordinator whose own trainer succeeded waits for the followers' outcomes, but a
    /// loss after its success is final and ends its wait at once: nobody is left to report
    /// (M8: a coordinator that kept waiting would hold every follower until its own timeout).
    #[test]
    fn a_coordinator_that_succeeded_stops_at_the_first_loss() {
        let mut core = both_joined(Instant::now());
        core.step(Input::Own(Request::Finish { succeeded: true }));
        assert!(!core.stopped(), "it stopped before the followers reported");
        let effects = core.step(ended(1, "a", WireError::Closed));
        assert!(
            matches!(
                effects[0],
                Effect::Broadcast(Message::Lost(Loss { restart: false, .. }))
            ),
            "{effects:?}"
        );
        assert!(core.stopped(), "it waits for b after the loss");
        assert_eq!(effects.last(), Some(&Effect::Stop));
    }

    /// A success this launcher reports only once the attempt is lost (no `Done` before): the
    /// attempt's end is the loss's, so it closes and tells no success to anyone (a `Finished`
    /// would take the restart back from every follower).
    #[test]
    fn a_success_finished_after_a_loss_closes_without_telling_it() {
        let mut core = both_joined(Instant::now());
        let lost = core.step(ended(1, "a", WireError::Closed));
        assert!(
            lost.contains(&Effect::Broadcast(Message::Lost(Loss {
                reason: "the launcher of peer pod a closed the control connection (its pod is gone, or it was killed)".into(),
                restart: true,
                kind: Kind::Failure,
            }))),
            "{lost:?}"
        );
        let effects = core.step(Input::Own(Request::Finish { succeeded: true }));
        assert_eq!(effects, [Effect::Stop]);
        assert!(!core.done.contains("me"));
    }

    /// An elastic job's grows are free restarts, not among its free preemptions: with one
    /// free preemption and one restart so far that was a grow, a preemption is free; had that
    /// restart been a preemption, the same one counts as a failure. The job agrees on the
    /// most grows any member knows of, never more than its preemptions.
    #[test]
    fn grows_are_not_among_the_free_preemptions() {
        let terms = |grows| Terms {
            ledger: Ledger {
                epoch: 1,
                preemptions: 1,
                max_preemptions: 1,
                grows,
                ..Ledger::first(0)
            },
            ..Terms::first(0)
        };
        for (grows, free) in [(1, true), (0, false)] {
            let at = Instant::now();
            let (mut core, _) = Core::start(
                Setup {
                    terms: terms(0),
                    ..setup(&["a"])
                },
                at,
            );
            let mut a = joined(1, "a");
            if let Input::Joined { terms: t, .. } = &mut a {
                *t = terms(grows);
            }
            let go = core.step(a);
            let agreed = go.iter().find_map(|e| match e {
                Effect::Broadcast(Message::Go { ledger, .. }) => Some(ledger.grows),
                _ => None,
            });
            assert_eq!(agreed, Some(grows), "{go:?}");
            core.step(said(
                1,
                "a",
                Message::Preempted {
                    reason: "pod a: preempted (SIGTERM while training)".into(),
                },
            ));
            let ended = core.step(ended(1, "a", WireError::Closed));
            let told = ended.iter().find_map(|e| match e {
                Effect::Broadcast(Message::Lost(Loss { restart, kind, .. })) => {
                    Some((*restart, *kind))
                }
                _ => None,
            });
            let kind = match free {
                true => Kind::Preemption,
                false => Kind::Failure,
            };
            assert_eq!(told, Some((free, kind)), "grows {grows}: {ended:?}");
        }
    }

    /// The preempted pod's own end is the attempt's end as it said it; another pod's end after
    /// a preemption is told as following it.
    #[test]
    fn a_preempted_pods_own_end_says_what_it_said() {
        let preempted = Message::Preempted {
            reason: "pod a: preempted (SIGTERM while training)".into(),
        };
        let reason_of = |effects: &[Effect]| {
            effects.iter().find_map(|e| match e {
                Effect::Broadcast(Message::Lost(Loss { reason, .. })) => Some(reason.clone()),
                _ => None,
            })
        };
        let mut core = both_joined(Instant::now());
        core.step(said(1, "a", preempted.clone()));
        let own = reason_of(&core.step(ended(1, "a", WireError::Closed))).unwrap();
        assert!(!own.contains("; then: "), "{own}");
        let mut core = both_joined(Instant::now());
        core.step(said(1, "a", preempted));
        let other = reason_of(&core.step(ended(2, "b", WireError::Closed))).unwrap();
        assert!(
            other.starts_with("pod a: preempted (SIGTERM while training); then: "),
            "{other}"
        );
    }

    /// A launcher's own end that calls itself a preemption is judged a failure: a preemption
    /// is free only as the coordinator recorded it (its `Preempted` first), within the
    /// allowance.
    #[test]
    fn an_own_end_is_no_preemption_by_its_word_alone() {
        let mut core = both_joined(Instant::now());
        let effects = core.step(Input::Own(Request::Failed(Loss {
            reason: "pod me: trainer exited with status 3".into(),
            restart: true,
            kind: Kind::Preemption,
        })));
        let told = effects.iter().find_map(|e| match e {
            Effect::Broadcast(Message::Lost(loss)) => Some(loss.kind),
            _ => None,
        });
        assert_eq!(told, Some(Kind::Failure), "{effects:?}");
    }

    /// This launcher's own failure before the start: the followers gather again when a restart
    /// could mend it, and end when it would recur (a configuration error, say).
    #[test]
    fn an_own_failure_while_gathering_says_whether_gathering_again_helps() {
        for restartable in [true, false] {
            let (mut core, _) = Core::start(setup(&["a", "b"]), Instant::now());
            core.step(joined(1, "a"));
            let effects = core.step(Input::Own(Request::Failed(Loss::failure(
                "pod me: cannot prepare the workspace".into(),
                restartable,
            ))));
            assert!(
                effects.iter().any(|e| matches!(
                    e,
                    Effect::Broadcast(Message::Lost(Loss { restart, .. })) if *restart == restartable
                )),
                "{restartable}: {effects:?}"
            );
        }
    }

    /// A member whose trainer succeeded closes its link as its normal end; its launcher
    /// joining again under its name (its pod restarted or replaced) is a loss, and a final one:
    /// the job cannot start again without it, and its return means its pod was lost, as the API
    /// watch of the peers says too (M12: held, it would leave the others training beside a pod
    /// that starts over).
    #[test]
    fn a_finished_member_joining_again_is_a_final_loss() {
        let mut core = both_joined(Instant::now());
        core.step(said(1, "a", Message::Done));
        let closed = core.step(ended(1, "a", WireError::Closed));
        assert!(closed.is_empty(), "{closed:?}");
        let effects = core.step(joined(3, "a"));
        assert!(
            effects.iter().any(|e| matches!(
                e,
                Effect::Broadcast(Message::Lost(Loss { restart: false, reason, .. }))
                    if reason.contains("peer pod a joined again")
            )),
            "{effects:?}"
        );
        assert_eq!(core.verdict(), Some(false));
    }

    /// Messages for a connection that is not the pod's live one, or from a pod that is no
    /// member, change nothing.
    #[test]
    fn what_a_stale_or_foreign_connection_says_changes_nothing() {
        let mut core = both_joined(Instant::now());
        let before = core.clone();
        let failed = Message::Failed(Loss {
            reason: "x".into(),
            restart: true,
            kind: Kind::Failure,
        });
        assert!(core.step(said(1, "stranger", failed.clone())).is_empty());
        // A second connection of `a`, refused: what it said before the refusal took effect.
        assert!(core.step(said(4, "a", failed)).is_empty());
        assert!(core.step(ended(9, "a", WireError::Closed)).is_empty());
        assert_eq!(core.step(joined(3, "stranger")), [Effect::Close(3)]);
        assert_eq!(core.step(joined(4, "a")), [Effect::Close(4)]);
        for (link, pod) in [(9, "a"), (1, "stranger")] {
            core.step(Input::Progress {
                link,
                pod: pod.into(),
                step: Some(1),
                quiet: Duration::ZERO,
                at: Instant::now(),
                behind: None,
            });
        }
        assert_eq!(core, before);
    }

    /// A finished trainer stopped progressing for good: the coordinator's own, once it
    /// succeeded, is no suspect of a hang either.
    #[test]
    fn a_hang_never_names_the_coordinators_own_finished_trainer() {
        let t0 = Instant::now();
        let mut core = both_joined(t0);
        let s = Duration::from_secs;
        // Its own trainer ended at step 1 and succeeded; a and b are ahead of it.
        core.step(Input::OwnProgress {
            step: Some(1),
            last: t0 + s(5),
            behind: None,
        });
        core.step(Input::Own(Request::Done));
        for (link, pod, step) in [(1, "a", 10), (2, "b", 9)] {
            core.step(Input::Progress {
                link,
                pod: pod.into(),
                step: Some(step),
                quiet: Duration::ZERO,
                at: t0 + s(5),
                behind: None,
            });
        }
        core.step(Input::Tick(t0 + s(35)));
        let failed = Message::Failed(Loss {
            reason: "pod a: trainer-1 made no progress for 30 s".into(),
            restart: true,
            kind: Kind::Hang,
        });
        let effects = core.step(said(1, "a", failed));
        let reason = effects
            .iter()
            .find_map(|e| match e {
                Effect::Broadcast(Message::Lost(Loss { reason, .. })) => Some(reason.clone()),
                _ => None,
            })
            .unwrap();
        assert!(reason.contains("suspect pod b on node n7"), "{reason}");
    }

    /// A preemption asks every trainer for a checkpoint: the followers' by a broadcast, the
    /// coordinator's own by an effect, unless the preempted pod is its own (its launcher asks
    /// its trainer itself, as it leaves).
    #[test]
    fn a_preemption_asks_the_coordinators_own_trainer_unless_it_is_the_preempted_one() {
        let checkpoints = |effects: &[Effect]| {
            (
                effects
                    .iter()
                    .any(|e| matches!(e, Effect::Broadcast(Message::Checkpoint { .. }))),
                effects
                    .iter()
                    .any(|e| matches!(e, Effect::Know(Known::Checkpoint(_)))),
            )
        };
        let running = || both_joined(Instant::now());
        let follower = Message::Preempted {
            reason: "pod a: preempted (SIGTERM while training)".into(),
        };
        assert_eq!(
            checkpoints(&running().step(said(1, "a", follower))),
            (true, true)
        );
        let own = Request::Preempted("pod me: preempted (SIGTERM while training)".into());
        assert_eq!(checkpoints(&running().step(Input::Own(own))), (true, false));
    }

    /// A hang reported by one launcher: the coordinator names the rank its reports point at
    /// (furthest behind), not the reporter, and every launcher hears that the job hangs, so
    /// that each asks its trainer for its stacks.
    #[test]
    fn a_hang_names_the_rank_furthest_behind_for_everyone() {
        let t0 = Instant::now();
        let mut core = both_joined(t0);
        let s = Duration::from_secs;
        core.step(Input::OwnProgress {
            step: Some(10),
            last: t0 + s(5),
            behind: None,
        });
        // b runs several trainer processes: its launcher names the one furthest behind.
        let report = |link, pod: &str, step, behind| Input::Progress {
            link,
            pod: pod.into(),
            step: Some(step),
            quiet: Duration::ZERO,
            at: t0 + s(5),
            behind,
        };
        core.step(report(1, "a", 10, None));
        core.step(report(2, "b", 9, Some(5)));
        core.step(Input::Tick(t0 + s(35)));
        let effects = core.step(said(
            1,
            "a",
            Message::Failed(Loss {
                reason:
                    "pod a on node n7 at 2026-11-23T10:00:00Z: trainer-1 made no progress for 30 s"
                        .into(),
                restart: true,
                kind: Kind::Hang,
            }),
        ));
        let reason = "the job hangs: suspect trainer id 5 on pod b on node n7: furthest behind, at step 9 (2 ranks at later steps), last progress 30.0 s ago; found by pod a on node n7 at 2026-11-23T10:00:00Z: trainer-1 made no progress for 30 s";
        assert!(
            effects.contains(&Effect::Broadcast(Message::Lost(Loss {
                reason: reason.into(),
                restart: true,
                kind: Kind::Hang,
            }))),
            "{effects:?}"
        );
        assert!(effects.contains(&Effect::Hear(Heard::Lost(Loss {
            reason: reason.into(),
            restart: true,
            kind: Kind::Hang,
        }))));
    }

    /// A member finished and lingers (its pserver serves), then another fails: the job cannot
    /// restart, and that is final at once, not once the lingering member leaves.
    #[test]
    fn a_final_loss_is_decided_at_once() {
        let mut core = both_joined(Instant::now());
        core.step(said(1, "a", Message::Done));
        let effects = core.step(said(
            2,
            "b",
            Message::Failed(Loss {
                reason: "trainer exited with status 3".into(),
                restart: true,
                kind: Kind::Failure,
            }),
        ));
        assert!(effects.contains(&Effect::Broadcast(Message::Verdict { restart: false })));
        assert_eq!(core.verdict(), Some(false));
    }

    /// An elastic job's coordinator of `me`, `a` and `b`, both joined: arrivals are gathered for
    /// 60 s, then the trainers get 5 s for their checkpoint.
    fn elastic_both_joined(at: Instant, checkpoint: u64) -> Core {
        let mut core = elastic(at, &["a", "b"], checkpoint);
        core.step(joined(1, "a"));
        core.step(joined(2, "b"));
        core
    }

    /// An elastic job's coordinator of `me` and `others`, gathering: arrivals are gathered for
    /// 60 s, then the trainers get `checkpoint` s for their checkpoint.
    fn elastic(at: Instant, others: &[&str], checkpoint: u64) -> Core {
        let growth = Some(Growth {
            window: Duration::from_secs(60),
            checkpoint_window: Duration::from_secs(checkpoint),
        });
        let setup = Setup {
            growth,
            ..setup(others)
        };
        Core::start(setup, at).0
    }

    /// An elastic job's gathering whose member `b` never says hello (its node died: its pod
    /// may stay Running for minutes) ends after the join grace naming `b` absent, which the
    /// next round leaves out; a job that is not elastic regathers without naming it.
    #[test]
    fn an_elastic_gathering_names_the_members_that_did_not_say_hello() {
        let at = Instant::now();
        let growth = Some(Growth {
            window: Duration::from_secs(2),
            checkpoint_window: Duration::ZERO,
        });
        for elastic in [true, false] {
            let grace = Setup {
                join_grace: Duration::from_secs(2),
                growth: growth.filter(|_| elastic),
                ..setup(&["a", "b"])
            };
            let (mut core, _) = Core::start(grace, at);
            core.step(joined(1, "a"));
            assert!(core
                .step(Input::Tick(at + Duration::from_secs(2)))
                .is_empty());
            let effects = core.step(Input::Tick(at + Duration::from_secs(3)));
            let absent = effects.iter().find_map(|e| match e {
                Effect::Know(Known::Absent(pods)) => Some(pods.clone()),
                _ => None,
            });
            let expected = elastic.then(|| vec!["b".to_string()]);
            assert_eq!(absent, expected, "elastic: {elastic}");
            assert!(effects
                .iter()
                .any(|e| matches!(e, Effect::Hear(Heard::Regather(_)))));
        }
    }

    /// An elastic job turns away a pod that runs another number of processes, and goes on:
    /// while it trains, the arrival hears why and its link is let go (no growth); while it
    /// gathers, the odd member hears why, the others gather again without it.
    #[test]
    fn an_elastic_job_turns_away_a_pod_with_another_process_count() {
        let at = Instant::now();
        let two = |input: Input| match input {
            Input::Joined {
                link,
                pod,
                view,
                who,
                mut terms,
            } => {
                terms.nproc_per_pod = 2;
                Input::Joined {
                    link,
                    pod,
                    view,
                    who,
                    terms,
                }
            }
            other => other,
        };
        let turned = |effects: &[Effect], link: u64| {
            effects.iter().any(|e| {
                matches!(e, Effect::Send { link: l, message: Message::Refused { reason } }
                    if *l == link && reason.starts_with(TURNED_AWAY) && reason.contains("pod c runs 2 trainer processes"))
            }) && effects.contains(&Effect::Close(link))
                && effects.contains(&Effect::Know(Known::TurnedAway(vec!["c".into()])))
        };
        let mut training = elastic_both_joined(at, 5);
        let effects = training.step(two(joined(9, "c")));
        assert!(turned(&effects, 9), "{effects:?}");
        assert!(training.arrivals.is_empty());
        assert!(matches!(
            training.stage,
            Stage::Running {
                growing: GrowthState::No,
                ..
            }
        ));
        assert!(matches!(training.stage, Stage::Running { .. }));
        // Gathering: c is a member the API found, and differs.
        let mut gathering = elastic(at, &["a", "c"], 0);
        gathering.step(joined(1, "a"));
        let effects = gathering.step(two(joined(3, "c")));
        assert!(turned(&effects, 3), "{effects:?}");
        assert!(effects.iter().any(
            |e| matches!(e, Effect::Hear(Heard::Regather(r)) if r.starts_with("c turned away"))
        ));
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::Broadcast(Message::Refused { .. }))));
        // The coordinator is the odd one out (both others run 2): it does not speak for the
        // job, and refuses the start as any job does, rather than turn the job away.
        let mut odd = elastic(at, &["a", "c"], 0);
        odd.step(two(joined(1, "a")));
        let effects = odd.step(two(joined(3, "c")));
        assert!(effects
            .iter()
            .any(|e| matches!(e, Effect::Broadcast(Message::Refused { .. }))));
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::Know(Known::TurnedAway(_)))));
    }

    fn lost_of(effects: &[Effect]) -> Option<(bool, bool)> {
        effects.iter().find_map(|e| match e {
            Effect::Broadcast(Message::Lost(Loss { restart, kind, .. })) => {
                Some((*restart, kind.is_free()))
            }
            _ => None,
        })
    }

    /// Pods that are no member say hello while an elastic job trains: held, told nothing;
    /// the window after the first gathers the others; then every trainer is asked for a
    /// checkpoint (this launcher's too), and after its window the attempt ends as a free
    /// restart (told as a preemption: no restart spent), for which the arrivals are told to
    /// gather once every member has stopped.
    #[test]
    fn arrivals_make_an_elastic_job_grow_after_a_checkpoint() {
        let at = Instant::now();
        let mut core = elastic_both_joined(at, 5);
        core.step(Input::Tick(at + Duration::from_secs(10)));
        assert!(core.step(joined(3, "c")).is_empty(), "c is held");
        core.step(Input::Tick(at + Duration::from_secs(40)));
        assert!(core.step(joined(4, "d")).is_empty(), "d is held");
        let early = core.step(Input::Tick(at + Duration::from_secs(69)));
        assert!(early.is_empty(), "{early:?}");
        let asked = core.step(Input::Tick(at + Duration::from_secs(70)));
        let reason = "the job grows: c, d joined (2 pods)".to_string();
        assert_eq!(
            asked,
            vec![
                Effect::Broadcast(Message::Checkpoint {
                    reason: reason.clone()
                }),
                Effect::Know(Known::Checkpoint(reason.clone()))
            ]
        );
        assert!(core
            .step(Input::Tick(at + Duration::from_secs(74)))
            .is_empty());
        let ended = core.step(Input::Tick(at + Duration::from_secs(75)));
        assert_eq!(lost_of(&ended), Some((true, true)), "{ended:?}");
        assert!(
            ended.iter().any(|e| matches!(
                e,
                Effect::Broadcast(Message::Lost(Loss {
                    kind: Kind::Growth,
                    ..
                }))
            )),
            "told as a grow: {ended:?}"
        );
        core.step(said(1, "a", Message::Stopped));
        core.step(said(2, "b", Message::Stopped));
        let decided = core.step(Input::Own(Request::Stopped));
        for link in [3, 4] {
            let told = decided.iter().any(|e| {
                matches!(e, Effect::Send { link: l, message: Message::Lost(Loss { restart: true, kind: Kind::Growth, .. }) } if *l == link)
            });
            assert!(told, "link {link}: {decided:?}");
        }
        assert!(decided.contains(&Effect::Broadcast(Message::Verdict { restart: true })));
        // The launchers heard at the verdict, arrivals and this one included: alive for the
        // next gathering, whatever their pods' Ready condition (issue 51).
        let alive = ["a", "b", "c", "d", "me"].map(String::from).to_vec();
        assert!(
            decided.contains(&Effect::Know(Known::Alive(alive))),
            "{decided:?}"
        );
    }

    /// A member whose link went silent (its node dead) is not heard alive at the verdict: the
    /// next gathering may leave it out by its Ready condition.
    #[test]
    fn a_silent_member_is_not_said_alive_at_the_verdict() {
        let at = Instant::now();
        let mut core = elastic_both_joined(at, 5);
        core.step(Input::Ended {
            link: 2,
            pod: "b".into(),
            why: WireError::Silent(10),
        });
        core.step(said(1, "a", Message::Stopped));
        let decided = core.step(Input::Own(Request::Stopped));
        let alive = decided.iter().find_map(|e| match e {
            Effect::Know(Known::Alive(pods)) => Some(pods.clone()),
            _ => None,
        });
        assert_eq!(
            alive,
            Some(vec!["a".to_string(), "me".to_string()]),
            "{decided:?}"
        );
    }

    /// A trainer that ends once it has checkpointed for the growth (as a program may on the
    /// signal) ends the attempt the growth was ending anyway: free (told as the growth is),
    /// said after the growth on every pod, no hang asked for. A failure before the growth
    /// asked for a checkpoint is the job's own, as any is.
    #[test]
    fn a_failure_in_the_growths_checkpoint_window_is_the_growths_free_restart() {
        let at = Instant::now();
        let failed = || {
            Message::Failed(Loss {
                reason: "pod a: trainer exited with status 3".into(),
                restart: true,
                kind: Kind::Hang,
            })
        };
        let mut core = elastic_both_joined(at, 5);
        core.step(joined(3, "c"));
        core.step(Input::Tick(at + Duration::from_secs(60)));
        let ended = core.step(said(1, "a", failed()));
        let told = ended.iter().find_map(|e| match e {
            Effect::Broadcast(Message::Lost(loss)) => Some(loss.clone()),
            _ => None,
        });
        let reason = "the job grows: c joined (1 pod); then: pod a: trainer exited with status 3";
        let growth = Loss {
            reason: reason.into(),
            restart: true,
            kind: Kind::Growth,
        };
        assert_eq!(told, Some(growth));

        let mut core = elastic_both_joined(at, 5);
        core.step(joined(3, "c"));
        core.step(Input::Tick(at + Duration::from_secs(59)));
        let ended = core.step(said(1, "a", failed()));
        let told = ended.iter().find_map(|e| match e {
            Effect::Broadcast(Message::Lost(Loss { reason, kind, .. })) => {
                Some((reason.starts_with("the job hangs"), *kind))
            }
            _ => None,
        });
        assert_eq!(told, Some((true, Kind::Hang)), "{ended:?}");
    }

    /// What the growth's window makes free, and what it does not. Free: a member preempted
    /// in it (with no budget and no free preemption left), said after the growth; a failure
    /// after every arrival left (the growth's restart comes all the same, free, as a follower
    /// cut off from the coordinator judges too). The job's own, as without a growth: a hang
    /// once a member finished (the growth is over: the job is ending; the hang is asked for
    /// stacks and named).
    #[test]
    fn what_the_growths_window_makes_free_and_what_it_does_not() {
        let at = Instant::now();
        let lost = |effects: &[Effect]| {
            effects.iter().find_map(|e| match e {
                Effect::Broadcast(Message::Lost(Loss { reason, kind, .. })) => {
                    Some((reason.clone(), *kind))
                }
                _ => None,
            })
        };
        let failed = |hang| {
            Message::Failed(Loss {
                reason: "pod a: trainer exited with status 3".into(),
                restart: true,
                kind: if hang { Kind::Hang } else { Kind::Failure },
            })
        };
        let growing = |terms: Terms| {
            let growth = Some(Growth {
                window: Duration::from_secs(60),
                checkpoint_window: Duration::from_secs(5),
            });
            let (mut core, _) = Core::start(
                Setup {
                    growth,
                    terms,
                    ..setup(&["a", "b"])
                },
                at,
            );
            for (link, pod) in [(1, "a"), (2, "b")] {
                let mut input = joined(link, pod);
                if let Input::Joined { terms: t, .. } = &mut input {
                    *t = terms;
                }
                core.step(input);
            }
            core.step(joined(3, "c"));
            core.step(Input::Tick(at + Duration::from_secs(60)));
            core
        };
        let spent = Terms {
            ledger: Ledger {
                epoch: 1,
                preemptions: 1,
                max_preemptions: 1,
                ..Ledger::first(0)
            },
            ..Terms::first(0)
        };
        let mut core = growing(spent);
        core.step(said(
            2,
            "b",
            Message::Preempted {
                reason: "pod b: preempted (SIGTERM while training)".into(),
            },
        ));
        let told = core.step(said(
            2,
            "b",
            Message::Failed(Loss {
                reason: "pod b: preempted: its checkpoint window is over".into(),
                restart: true,
                kind: Kind::Failure,
            }),
        ));
        let (reason, kind) = lost(&told).unwrap();
        assert_eq!(
            reason,
            "the job grows: c joined (1 pod); then: pod b: preempted: its checkpoint window is over"
        );
        assert_eq!(kind, Kind::Growth);
        assert_eq!(lost_of(&told), Some((true, true)));

        let mut core = growing(Terms::first(3));
        core.step(said(2, "b", Message::Done));
        let told = core.step(said(1, "a", failed(true)));
        let (reason, kind) = lost(&told).unwrap();
        assert!(reason.starts_with("the job hangs: "), "{reason}");
        assert_eq!(kind, Kind::Hang);

        let mut core = growing(spent);
        core.step(ended(3, "c", WireError::Closed));
        let told = core.step(said(1, "a", failed(false)));
        let (reason, kind) = lost(&told).unwrap();
        assert_eq!(
            reason,
            "the job grows: c joined (1 pod); then: pod a: trainer exited with status 3"
        );
        assert_eq!(kind, Kind::Growth);
        assert_eq!(lost_of(&told), Some((true, true)));
    }

    /// Without a checkpoint signal the restart follows the window at once; a grow spends no
    /// restart even when the free preemptions are used up.
    #[test]
    fn a_grow_is_free_whatever_the_preemptions_left() {
        let at = Instant::now();
        let growth = Some(Growth {
            window: Duration::from_secs(60),
            checkpoint_window: Duration::ZERO,
        });
        let mut terms = Terms::first(0);
        terms.ledger.max_preemptions = 0;
        let (mut core, _) = Core::start(
            Setup {
                growth,
                terms,
                ..setup(&["a"])
            },
            at,
        );
        let mut a = joined(1, "a");
        if let Input::Joined { terms: t, .. } = &mut a {
            *t = terms;
        }
        core.step(a);
        core.step(joined(2, "c"));
        let effects = core.step(Input::Tick(at + Duration::from_secs(60)));
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::Know(Known::Checkpoint(_)))));
        assert_eq!(lost_of(&effects), Some((true, true)), "{effects:?}");
    }

    /// What does not grow the job: a pod that is no member without growth (closed); an
    /// arrival that leaves before the window ends; arrivals once a member has finished (the
    /// job is ending: they hear its success instead).
    #[test]
    fn what_does_not_grow_the_job() {
        let at = Instant::now();
        let mut core = both_joined(at);
        assert_eq!(core.step(joined(3, "c")), vec![Effect::Close(3)]);

        let mut core = elastic_both_joined(at, 0);
        core.step(joined(3, "c"));
        core.step(ended(3, "c", WireError::Closed));
        let later = core.step(Input::Tick(at + Duration::from_secs(120)));
        assert_eq!(lost_of(&later), None, "{later:?}");
        // One that comes later opens a window of its own.
        core.step(Input::Tick(at + Duration::from_secs(200)));
        core.step(joined(4, "d"));
        let early = core.step(Input::Tick(at + Duration::from_secs(250)));
        assert_eq!(lost_of(&early), None, "{early:?}");
        assert!(lost_of(&core.step(Input::Tick(at + Duration::from_secs(260)))).is_some());

        let mut core = elastic_both_joined(at, 0);
        core.step(joined(3, "c"));
        core.step(said(1, "a", Message::Done));
        let none = core.step(Input::Tick(at + Duration::from_secs(120)));
        assert_eq!(lost_of(&none), None, "{none:?}");
        core.step(said(2, "b", Message::Done));
        let end = core.step(Input::Own(Request::Finish { succeeded: true }));
        assert!(
            end.contains(&Effect::Send {
                link: 3,
                message: Message::Bye
            }),
            "{end:?}"
        );
        assert!(core.stopped());
    }

    /// Two members running; b's pod is lost (a loss the job may restart from) and its
    /// replacement joins on link 3 before the verdict: held, told nothing yet.
    fn b_replaced_after_a_restartable_loss() -> Core {
        let mut core = both_joined(Instant::now());
        core.step(ended(2, "b", WireError::Closed));
        assert_eq!(core.loss().map(|loss| loss.restart), Some(true));
        assert!(
            core.step(joined(3, "b")).is_empty(),
            "told before the verdict"
        );
        core
    }

    /// A restartable loss waits for everyone's stop; a member joining meanwhile (a replacement)
    /// is told nothing provisional: it hears the verdict when it is decided.
    #[test]
    fn a_member_joining_after_a_loss_hears_only_the_verdict() {
        let mut core = b_replaced_after_a_restartable_loss();
        // a's success, read before everyone stopped, makes it final: the joiner hears that.
        let effects = core.step(said(1, "a", Message::Done));
        assert!(effects.iter().any(|e| matches!(
            e,
            Effect::Send {
                link: 3,
                message: Message::Lost(Loss { restart: false, .. })
            }
        )));
        assert_eq!(core.verdict(), Some(false));
    }

    /// The usual replacement: a pod is lost, its replacement joins while the others stop, and
    /// the job restarts. The replacement hears the loss first, then the verdict, as any member.
    #[test]
    fn a_replacement_held_until_a_restart_hears_its_loss_before_the_verdict() {
        let mut core = b_replaced_after_a_restartable_loss();
        core.step(said(1, "a", Message::Stopped));
        let effects = core.step(Input::Own(Request::Stopped));
        let lost = effects.iter().position(|e| {
            matches!(
                e,
                Effect::Send {
                    link: 3,
                    message: Message::Lost(Loss { restart: true, .. })
                }
            )
        });
        let verdict = effects
            .iter()
            .position(|e| *e == Effect::Broadcast(Message::Verdict { restart: true }));
        assert!(lost.is_some() && lost < verdict, "{effects:?}");
    }

    /// Gathering ends after the join grace, naming who did not join; not a moment before.
    #[test]
    fn a_member_that_never_joins_ends_the_gathering_after_the_grace() {
        let start = Instant::now();
        let (mut core, _) = Core::start(setup(&["a", "b"]), start);
        core.step(joined(1, "a"));
        assert!(core
            .step(Input::Tick(start + Duration::from_secs(60)))
            .is_empty());
        let effects = core.step(Input::Tick(start + Duration::from_secs(61)));
        let regather = Effect::Hear(Heard::Regather(
            "b did not join the control channel within 60 s".into(),
        ));
        assert!(effects.contains(&regather), "{effects:?}");
        // The one that said hello is alive for the next round, the silent one is not.
        let alive = effects.iter().find_map(|e| match e {
            Effect::Know(Known::Alive(pods)) => Some(pods.clone()),
            _ => None,
        });
        let alive = alive.expect("who said hello");
        assert!(alive.contains(&"a".to_string()) && !alive.contains(&"b".to_string()));
        assert_eq!(core.stage, Stage::Closing(None));
    }

    /// Many pods without a hello: eight are named, and how many more there are.
    #[test]
    fn at_most_eight_silent_pods_are_named_and_the_rest_counted() {
        let names = |count: usize| (0..count).map(|i| format!("p{i}")).collect::<Vec<_>>();
        let line = |count: usize| {
            let others = names(count);
            let others: Vec<&str> = others.iter().map(String::as_str).collect();
            let start = Instant::now();
            let (mut core, _) = Core::start(setup(&others), start);
            core.overdue_hellos(start + Duration::from_secs(2)).unwrap()
        };
        let eight = line(8);
        assert!(
            eight.contains(": p0, p1, p2, p3, p4, p5, p6, p7;"),
            "{eight}"
        );
        let nine = line(9);
        assert!(
            nine.contains(": p0, p1, p2, p3, p4, p5, p6, p7 and 1 more;"),
            "{nine}"
        );
    }

    /// A member found Running that never says hello (its launcher has no job secret, say) is
    /// named every `hello_overdue` while the coordinator gathers, long before the join grace
    /// ends; once everyone is there, nobody is.
    #[test]
    fn a_member_that_never_says_hello_is_named_every_few_heartbeats() {
        let start = Instant::now();
        let (mut core, _) = Core::start(setup(&["a", "b", "c"]), start);
        core.step(joined(1, "a"));
        let at = |s: u64| start + Duration::from_millis(s);
        assert_eq!(core.overdue_hellos(at(1_900)), None, "before the first");
        let line = core.overdue_hellos(at(2_000)).expect("b and c not named");
        assert!(
            line.contains("2 pods found Running have not said hello yet after 2 s: b, c;"),
            "{line}"
        );
        assert!(line.contains("PADDLE_LAUNCHER_JOB_SECRET"), "{line}");
        // Again after twice as long as it has waited.
        assert_eq!(core.overdue_hellos(at(3_900)), None, "named again too soon");
        core.step(joined(2, "b"));
        let line = core.overdue_hellos(at(4_000)).expect("c not named again");
        assert!(
            line.contains("1 pod found Running has not said hello yet after 4 s: c;"),
            "{line}"
        );
        assert_eq!(core.overdue_hellos(at(7_900)), None, "named again too soon");
        core.step(joined(3, "c"));
        assert_eq!(
            core.overdue_hellos(at(60_000)),
            None,
            "named after the start"
        );

        // A heartbeat timeout longer than the longest pause between two lines.
        let mut setup = setup(&["a"]);
        setup.hello_overdue = Duration::from_secs(60);
        let (mut core, _) = Core::start(setup, start);
        assert_eq!(core.overdue_hellos(at(59_000)), None);
        assert!(core.overdue_hellos(at(60_000)).is_some());
        assert_eq!(
            core.overdue_hellos(at(119_000)),
            None,
            "named again too soon"
        );
        assert!(core.overdue_hellos(at(120_000)).is_some());
    }
}
