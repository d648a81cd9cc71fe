//! The attempt loop as one pure machine: what a launcher does from one gathering to the next,
//! and how its last attempt's end becomes the pod's last line. Inputs are what the executor
//! found (an attempt gathered, its run's end, what the job's channel says at each step); commands
//! are what it does next (gather, run, tell the failure, wait for the verdict, restart in place,
//! close the channel, finish). No clock, no socket, no log: the executor (`launch::launch_steps`
//! with `attempt`'s pieces, and the drivers' simulation `driven` with its own stand-ins for the
//! API and the trainer) carries the commands out, so that both run these decisions.
//!
//! A launcher's loop: Gathering -> Running -> (Telling) -> Judging -> Restarting -> Gathering,
//! or Judging -> Closing -> Done.

use std::time::Duration;

use crate::control::heard::ChannelState;
use crate::error::Error;
use crate::exit::{self, Outcome};
use crate::ledger::Ledger;
use crate::ledger::Recorded;
use crate::loss::{said_by, Kind, Loss};
use crate::membership::PodAddress;
use crate::vocabulary::EventKind;
use crate::vocabulary::JOB_STOPPED;

use crate::lifecycle;
use crate::verdict::{verdict, NoRestart, Standing};

/// An attempt begun: what the machine needs of it.
#[derive(Debug, Clone)]
pub struct Begun {
    /// Its ledger: agreed over the channel, else this launcher's own.
    pub ledger: Ledger,
    /// Its pods.
    pub members: Vec<PodAddress>,
    /// It has a control channel.
    pub channel: bool,
    /// This launcher keeps the job's count on its Job object (the coordinator, with an API).
    pub records: bool,
    /// This launcher tells the job's story (its events).
    pub posts: bool,
    /// A stop by SIGTERM is told to the job as a preemption (a channel, and a checkpoint
    /// window to give the job): the restart around it is free while the allowance lasts.
    pub preemptible: bool,
    /// "pod p-1 (trainer id 1 of 3)": who this launcher is, in what it tells the others.
    pub who: String,
}

/// What happened.
#[derive(Debug)]
pub enum Input {
    /// The gathering found an attempt, and it is begun.
    Begun(Begun),
    /// The job succeeded while this pod gathered (why): nothing left for it to start.
    JobSucceeded(String),
    /// The attempt's run ended (`at`: when, UTC, as the lines say it), and what the channel
    /// says then.
    Ran {
        result: Result<Outcome, Error>,
        at: String,
        state: ChannelState,
    },
    /// The failure is told to the job; what the channel says now.
    Told(ChannelState),
    /// The job's verdict on a restart (or what the channel says without one: `may_restart`),
    /// or the stop signal that ended the wait; what the channel says then.
    Verdict {
        verdict: Result<bool, Error>,
        state: ChannelState,
    },
    /// The restart's steps are done: the channel closed, an earlier preparation waited for.
    Restarted,
    /// The channel is closed at the pod's end: what it said last.
    Closed(ChannelState),
}

/// An event for the job's story (posted only by the launcher that tells it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub kind: EventKind,
    pub reason: &'static str,
    pub message: String,
}

/// What to do next.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// Find the job's pods and agree on the next attempt, from this ledger (its epoch: the next)
    /// and the pods the last attempt ran with.
    Gather {
        ledger: Ledger,
        members_before: Vec<PodAddress>,
        /// The pods the coordinator heard alive at the attempt's end (the channel state's `attendance.alive`).
        alive: Vec<String>,
    },
    /// Begin and run the attempt gathered.
    Run,
    /// Tell the job this launcher's attempt failed: a `Failure` or a `Hang`, its reason naming
    /// the pod and when.
    TellFailure(Loss),
    /// Wait at most `limit` for the job's verdict (`doing`: what the wait says); first record
    /// a preemption on the Job, if asked.
    AwaitVerdict {
        limit: Duration,
        doing: String,
        record: Option<Recorded>,
    },
    /// No verdict to wait for: say this launcher's children are stopped (`stopped`, after a
    /// failure), then read whether the job may restart; record a preemption, if asked.
    ReadVerdict {
        stopped: bool,
        record: Option<Recorded>,
    },
    /// Restart in place: say `line`, post these events, close the channel, wait for the lost
    /// attempt's preparation; record a preemption not yet recorded, if asked.
    Restart {
        line: String,
        posts: Vec<Post>,
        record: Option<Recorded>,
        kind: Kind,
    },
    /// The pod ends: wait for the preemption's record (if one is being written), close the
    /// channel telling whether this pod succeeded; record a preemption, if asked.
    Close {
        succeeded: bool,
        record: Option<Recorded>,
    },
    /// End the pod with this outcome, after posting these events (the last ones).
    Finish { outcome: Outcome, posts: Vec<Post> },
}

/// An attempt's end, being judged.
#[derive(Debug)]
struct AttemptEnd {
    result: Result<Outcome, Error>,
    /// "pod p-1 (...)" and when, UTC: who told the job this end.
    who: String,
    at: String,
    /// This pod's end as told to the job: "pod p-1 (...) at <time>: why" (`loss::said_by`).
    said: String,
    succeeded: bool,
    /// Its own end's kind: a `Hang` or a `Failure`.
    kind: Kind,
    /// A preemption's record on the Job was asked for.
    recorded: bool,
}

#[derive(Debug)]
enum Stage {
    Gathering,
    Running(Begun),
    Telling(Begun, AttemptEnd),
    Judging(Begun, AttemptEnd),
    Restarting,
    Closing(Begun, AttemptEnd),
    Done,
}

/// The attempt loop of one launcher.
#[derive(Debug)]
pub struct AttemptLoop {
    /// Between attempts: where the job's restarts stand (its epoch: the next; its allowances:
    /// this launcher's own, which it says in its hello).
    ledger: Ledger,
    /// The pods of the attempt that ended, when restarting.
    members_before: Vec<PodAddress>,
    /// The pods the coordinator heard alive at that attempt's end.
    alive: Vec<String>,
    limits: VerdictLimits,
    stage: Stage,
}

impl AttemptLoop {
    /// The loop from this ledger (the batch system's restarts of the job, this launcher's
    /// allowances), and its first command: gather.
    pub fn start(ledger: Ledger, limits: VerdictLimits) -> (AttemptLoop, Command) {
        let machine = AttemptLoop {
            ledger,
            members_before: Vec::new(),
            alive: Vec::new(),
            limits,
            stage: Stage::Gathering,
        };
        let gather = machine.gather();
        (machine, gather)
    }

    fn gather(&self) -> Command {
        Command::Gather {
            ledger: self.ledger,
            members_before: self.members_before.clone(),
            alive: self.alive.clone(),
        }
    }

    /// One step: the input in, the next command out. An input the stage does not expect is
    /// the executor's mistake: the loop ends with it as an internal error.
    pub fn step(&mut self, input: Input) -> Command {
        let stage = std::mem::replace(&mut self.stage, Stage::Done);
        match (stage, input) {
            (Stage::Gathering, Input::Begun(attempt)) => {
                self.stage = Stage::Running(attempt);
                Command::Run
            }
            (Stage::Gathering, Input::JobSucceeded(reason)) => Command::Finish {
                outcome: Outcome::new(exit::SUCCESS, reason),
                posts: Vec::new(),
            },
            (Stage::Running(attempt), Input::Ran { result, at, state }) => {
                self.ran(attempt, result, at, state)
            }
            (Stage::Telling(attempt, ended), Input::Told(state)) => {
                self.told(attempt, ended, state)
            }
            (Stage::Judging(attempt, ended), Input::Verdict { verdict, state }) => {
                self.judged(attempt, ended, verdict, state)
            }
            (Stage::Restarting, Input::Restarted) => {
                self.stage = Stage::Gathering;
                self.gather()
            }
            (Stage::Closing(attempt, ended), Input::Closed(state)) => {
                self.closed(attempt, ended, state)
            }
            (stage, input) => Command::Finish {
                outcome: Outcome::new(
                    exit::INTERNAL,
                    format!("internal error: the attempt loop got {input:?} in {stage:?}"),
                ),
                posts: Vec::new(),
            },
        }
    }

    /// The run ended: a failure is told to the job first (whether the job may restart depends
    /// on what the others did); without a channel, judged at once.
    fn ran(
        &mut self,
        attempt: Begun,
        result: Result<Outcome, Error>,
        at: String,
        state: ChannelState,
    ) -> Command {
        // A hang this launcher found, or the job's it heard: its trainers were asked for their
        // stacks. Any other end of its own is a failure.
        let kind = match result {
            Err(Error::Hung { .. } | Error::JobHung { .. }) => Kind::Hang,
            _ => Kind::Failure,
        };
        let said = said_by(&attempt.who, &at, &reason_of(&result));
        let succeeded = code_of(&result) == exit::SUCCESS && result.is_ok();
        let tell = Command::TellFailure(Loss {
            reason: said.clone(),
            restart: lifecycle::others_may_restart(&result),
            kind,
        });
        let ended = AttemptEnd {
            result,
            who: attempt.who.clone(),
            at,
            said,
            succeeded,
            kind,
            recorded: false,
        };
        if attempt.channel && !succeeded {
            self.stage = Stage::Telling(attempt, ended);
            return tell;
        }
        self.told(attempt, ended, state)
    }

    /// Told (or nothing to tell): a preemption recorded as soon as it is known — it may take
    /// every pod at once (a Kueue suspension), and the pods created again count it — then the
    /// verdict waited for when the channel's word can change this pod's end.
    fn told(&mut self, attempt: Begun, mut ended: AttemptEnd, state: ChannelState) -> Command {
        let record = self.record_preemption(&attempt, &mut ended, &state);
        let wait = match (attempt.channel, ended.succeeded) {
            (true, false) => verdict_wait(&state, &ended.result, attempt.ledger, self.limits),
            _ => None,
        };
        let command = match (attempt.channel, wait) {
            (true, Some(limit)) => Command::AwaitVerdict {
                limit,
                doing: format!(
                    "waiting for the job's verdict after: {}",
                    reason_of(&ended.result)
                ),
                record,
            },
            // Every failed launcher says its children are stopped, for the others' verdict.
            (true, None) => Command::ReadVerdict {
                stopped: !ended.succeeded,
                record,
            },
            (false, _) => return self.judged(attempt, ended, Ok(false), state),
        };
        self.stage = Stage::Judging(attempt, ended);
        command
    }

    /// The preemption's record on the Job (the epoch that ended, its free restart counted),
    /// once: when this launcher keeps the count and the channel says the attempt was preempted.
    fn record_preemption(
        &self,
        attempt: &Begun,
        ended: &mut AttemptEnd,
        state: &ChannelState,
    ) -> Option<Recorded> {
        let kind = state.cause.as_ref().map(|cause| cause.kind);
        let kind = kind.filter(|kind| kind.is_free())?;
        if !attempt.records || ended.recorded {
            return None;
        }
        ended.recorded = true;
        let after = attempt.ledger.after_attempt(kind);
        Some(
            Ledger {
                epoch: attempt.ledger.epoch,
                ..after
            }
            .recorded(),
        )
    }

    /// The verdict is in (a stop meanwhile ends this pod: it is being deleted, and says so):
    /// the attempt's end with the budget decides between a restart in place and the pod's end.
    fn judged(
        &mut self,
        attempt: Begun,
        mut ended: AttemptEnd,
        verdict: Result<bool, Error>,
        state: ChannelState,
    ) -> Command {
        let may_restart = match verdict {
            Ok(verdict) => verdict && lifecycle::recoverable(&ended.result),
            Err(stopped) => {
                ended.result = Err(stopped);
                false
            }
        };
        // Read again once the verdict is in: the cause may have come with it.
        let record = self.record_preemption(&attempt, &mut ended, &state);
        let budget = Budget {
            ledger: attempt.ledger,
            may_restart,
            preempted: state.ended_free(),
        };
        let result = std::mem::replace(&mut ended.result, Ok(Outcome::new(0, "")));
        match after_run(result, &budget) {
            AfterRun::Restart(reason) => self.restart(attempt, &ended, reason, state, record),
            AfterRun::Finish(result) => {
                ended.result = result;
                let succeeded = ended.succeeded;
                self.stage = Stage::Closing(attempt, ended);
                Command::Close { succeeded, record }
            }
        }
    }

    /// The job restarts in place: said with the job's first cause (the same line on every pod,
    /// when the channel told it) and what the restart spends; the count moved on.
    fn restart(
        &mut self,
        attempt: Begun,
        ended: &AttemptEnd,
        reason: String,
        state: ChannelState,
        record: Option<Recorded>,
    ) -> Command {
        // The job's first cause, as the channel told it; without one, this launcher's own end.
        let kind = state.cause.as_ref().map_or(ended.kind, |cause| cause.kind);
        self.alive = state.attendance.alive;
        let reason = state.cause.map_or(reason, |cause| cause.reason);
        let restart = attempt.ledger.restart_said(kind);
        let mut posts = Vec::new();
        if attempt.posts {
            posts.extend(hang_post(kind == Kind::Hang, &reason));
            posts.push(Post {
                kind: EventKind::Warning,
                reason: "Restarting",
                message: format!("{restart}: {reason}"),
            });
        }
        // The job's count moves on; the allowances this launcher says stay its own.
        self.ledger = Ledger {
            max_restarts: self.ledger.max_restarts,
            max_preemptions: self.ledger.max_preemptions,
            ..attempt.ledger.after_attempt(kind)
        };
        self.members_before = attempt.members;
        self.stage = Stage::Restarting;
        Command::Restart {
            line: format!("{reason}: restarting the job ({restart})"),
            posts,
            record,
            kind,
        }
    }

    /// The channel is closed: the pod's last line — the job's first cause first when another
    /// pod's — and the job's end in its story (the job's, not this pod's: a coordinator that
    /// succeeded while another pod failed tells the failure).
    fn closed(&mut self, attempt: Begun, ended: AttemptEnd, state: ChannelState) -> Command {
        let cause = state.cause;
        let reason = cause.as_ref().map(|cause| cause.reason.clone());
        let stop = stopped_by(&ended.result);
        let hung = ended.kind == Kind::Hang;
        let outcome = ended.for_the_job(reason);
        let free = attempt.preemptible && attempt.ledger.preemption_is_free();
        let outcome = preemption_status(outcome, stop, free);
        let outcome = after_restarts(outcome, attempt.ledger.epoch);
        let mut posts = Vec::new();
        if attempt.posts {
            match &cause {
                Some(cause) => {
                    posts.extend(hang_post(cause.kind == Kind::Hang, &cause.reason));
                    posts.push(Post {
                        kind: EventKind::Warning,
                        reason: "Failed",
                        message: format!("{JOB_STOPPED}{}", cause.reason),
                    });
                }
                None if outcome.code == exit::SUCCESS => posts.push(Post {
                    kind: EventKind::Normal,
                    reason: "Succeeded",
                    message: outcome.reason.clone(),
                }),
                None => {
                    posts.extend(hang_post(hung, &outcome.reason));
                    posts.push(Post {
                        kind: EventKind::Warning,
                        reason: "Failed",
                        message: outcome.reason.clone(),
                    });
                }
            }
        }
        Command::Finish { outcome, posts }
    }
}

/// How long a launcher waits for the verdict: after a failure a restart could mend (the others'
/// grace period and the heartbeat timeout, and a margin), and after one that ends this pod
/// whatever it says (a coordinator's: its pod's grace period runs).
#[derive(Debug, Clone, Copy)]
pub struct VerdictLimits {
    pub recoverable: Duration,
    pub ending: Duration,
}

impl AttemptEnd {
    /// The pod's last line, said for the job. A failure of this pod's own (its trainer's
    /// status, a hang, a pserver's end) names the pod and when (as the others' lines name it
    /// after their "job stopped: "), unless the job's first cause (`cause`, the coordinator's
    /// word) was another's: then that comes first, and this pod's failure after it. A loss
    /// told by another says so itself. A stop signal is this pod's news only: the pod was
    /// deleted, the job may go on.
    fn for_the_job(self, cause: Option<String>) -> Outcome {
        let signalled = matches!(self.result, Err(Error::Stopped { .. }));
        let mut outcome = self.result.unwrap_or_else(Outcome::from);
        let own = outcome.code != exit::SUCCESS && !outcome.reason.starts_with(JOB_STOPPED);
        if !own || signalled {
            return outcome;
        }
        // The coordinator's word may be `said` cut to fit a frame.
        outcome.reason = match cause {
            Some(cause) if !self.said.starts_with(&cause) => {
                format!("{JOB_STOPPED}{cause}; on this pod: {}", outcome.reason)
            }
            _ => format!(
                "{JOB_STOPPED}{}",
                said_by(&self.who, &self.at, &outcome.reason)
            ),
        };
        outcome
    }
}

/// The signal that stopped this launcher, if one did.
pub fn stopped_by(result: &Result<Outcome, Error>) -> Option<i32> {
    match result {
        Err(Error::Stopped { signal, .. }) => Some(*signal),
        _ => None,
    }
}

/// The status of a launcher that its pod's deletion stopped (SIGTERM, the kubelet's): PREEMPTED
/// when the launchers go on without it for free (`free`: the stop is a preemption the job's
/// allowance still covers, or came before any attempt spent anything), so that the Job
/// controller, whose `podFailurePolicy` ignores that status, does not count it either. Any
/// other end keeps its status: a stop the launchers count ends 143 and is counted.
pub fn preemption_status(outcome: Outcome, stopped_by: Option<i32>, free: bool) -> Outcome {
    if stopped_by != Some(libc::SIGTERM) || !free {
        // A trainer's (or pserver's) own 83 would be taken for a free preemption and never
        // counted: the pod retried for ever. It is reported as a failure like any other.
        if outcome.code == exit::PREEMPTED {
            return Outcome::new(
                exit::INTERNAL,
                format!(
                    "{}; reported as 1: {} is this launcher's status for a free preemption, which the Job does not count",
                    outcome.reason,
                    exit::PREEMPTED
                ),
            );
        }
        return outcome;
    }
    Outcome::new(
        exit::PREEMPTED,
        format!(
            "{}; a free preemption: exit {} (the Job's podFailurePolicy counts no failure for it)",
            outcome.reason,
            exit::PREEMPTED
        ),
    )
}

/// The pod's outcome, saying how many times the job had restarted when it ended, if at all:
/// a success after restarts is not the same news as a first run's.
fn after_restarts(mut outcome: Outcome, restart_count: u32) -> Outcome {
    if restart_count > 0 {
        outcome.reason = format!(
            "{} ({} of the job)",
            outcome.reason,
            lifecycle::restarts_said(restart_count)
        );
    }
    outcome
}

/// Where the end of one attempt leads: another attempt, or the pod's end.
#[derive(Debug)]
pub enum AfterRun {
    /// A recoverable failure while restarts are left (the reason).
    Restart(String),
    Finish(Result<Outcome, Error>),
}

/// What the job may still do when an attempt ends.
#[derive(Debug, Clone)]
pub struct Budget {
    /// The attempt that ended.
    pub ledger: Ledger,
    /// False once a pod of the job has finished, or the coordinator said the loss is final.
    pub may_restart: bool,
    /// The attempt ended with a preemption: the restart spends no budget either.
    pub preempted: bool,
}

/// Decides what an attempt's end means. A failed trainer or pserver, a lost or silent peer and
/// pservers that never came up are recoverable: a restart starts them again, with the same or
/// a replaced pod. A stop signal (the pod is being deleted), a command that cannot start and
/// every configuration error are not: starting again would end the same way. Without a budget
/// the first failure ends the pod as it always did.
pub fn after_run(result: Result<Outcome, Error>, budget: &Budget) -> AfterRun {
    let Some(reason) = lifecycle::recoverable_reason(&result) else {
        return AfterRun::Finish(result);
    };
    let standing = Standing {
        spent: budget.ledger.spent(),
        max_restarts: budget.ledger.max_restarts,
        // The coordinator's word, which folds both in: this launcher does not know which.
        member_finished: false,
        restartable: budget.may_restart,
        preempted: budget.preempted,
    };
    let why_not = match verdict(&standing) {
        Ok(()) => return AfterRun::Restart(reason),
        Err(NoRestart::NoneAsked) => return AfterRun::Finish(result),
        Err(NoRestart::WouldRecur) => NoRestart::ToldFinal.describe(),
        Err(other) => other.describe(),
    };
    let code = match &result {
        Ok(outcome) => outcome.code,
        Err(e) => e.exit_code(),
    };
    let described = match result {
        Ok(outcome) => outcome.reason,
        Err(e) => e.to_string(),
    };
    AfterRun::Finish(Ok(Outcome::new(code, format!("{described}; {why_not}"))))
}

/// The "Hang" event of a job judged hung: where its stacks are.
fn hang_post(hung: bool, reason: &str) -> Option<Post> {
    hung.then(|| Post {
        kind: EventKind::Warning,
        reason: "Hang",
        message: format!(
            "{reason}; every trainer's Python stacks are in its pod's log (kubectl logs)"
        ),
    })
}

fn code_of(result: &Result<Outcome, Error>) -> i32 {
    match result {
        Ok(outcome) => outcome.code,
        Err(e) => e.exit_code(),
    }
}

fn reason_of(result: &Result<Outcome, Error>) -> String {
    match result {
        Ok(outcome) => outcome.reason.clone(),
        Err(e) => e.to_string(),
    }
}

/// After an end that is no success, told to the job: how long to wait for the coordinator's
/// verdict, or None when its word cannot change this pod's end (the launcher then only says
/// its children are stopped).
pub fn verdict_wait(
    state: &ChannelState,
    result: &Result<Outcome, Error>,
    ledger: Ledger,
    limits: VerdictLimits,
) -> Option<Duration> {
    // The job's trainers were asked for a checkpoint: the attempt's end may still turn out a
    // free preemption's (a frozen coordinator's silence is judged only after the heartbeat
    // timeout), so the budget alone must not end this pod before the verdict.
    // A checkpoint asked for the job's growth: its restart is free whatever the allowance.
    let free = ledger.preemption_is_free() || state.growth_asked();
    let preemption_possible = state.ended_free() || (state.checkpoint_asked() && free);
    let budget_allows = crate::verdict::verdict(&crate::verdict::Standing {
        spent: ledger.spent(),
        max_restarts: ledger.max_restarts,
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
    if !budget_allows || !(recoverable || state.coordinates) {
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
    use libc::SIGTERM;

    const LIMITS: VerdictLimits = VerdictLimits {
        recoverable: Duration::from_secs(17),
        ending: Duration::from_secs(4),
    };

    fn pod(name: &str, last: u8) -> PodAddress {
        PodAddress {
            name: name.into(),
            ip: std::net::IpAddr::from([10, 0, 0, last]),
        }
    }

    fn begun(ledger: Ledger, channel: bool) -> Begun {
        Begun {
            ledger,
            members: vec![pod("p-0", 1), pod("p-1", 2)],
            channel,
            records: false,
            posts: true,
            who: "pod p-1 (trainer id 1 of 2)".into(),
            preemptible: false,
        }
    }

    fn ran(code: i32, reason: &str, state: ChannelState) -> Input {
        Input::Ran {
            result: Ok(Outcome::new(code, reason)),
            at: "12:00:00Z".into(),
            state,
        }
    }

    fn verdict(verdict: bool, state: ChannelState) -> Input {
        Input::Verdict {
            verdict: Ok(verdict),
            state,
        }
    }

    fn cause(reason: &str, preempted: bool) -> ChannelState {
        ChannelState {
            cause: Some(Loss {
                reason: reason.into(),
                restart: true,
                kind: match preempted {
                    true => Kind::Preemption,
                    false => Kind::Failure,
                },
            }),
            ..ChannelState::default()
        }
    }

    /// A loop started with this launcher's allowances and the batch system's restarts, the
    /// attempt begun with `begun`.
    fn running(ledger: Ledger, attempt: Begun) -> AttemptLoop {
        let (mut machine, first) = AttemptLoop::start(ledger, LIMITS);
        assert_eq!(
            first,
            Command::Gather {
                ledger,
                members_before: Vec::new(),
                alive: Vec::new(),
            }
        );
        assert_eq!(machine.step(Input::Begun(attempt)), Command::Run);
        machine
    }

    /// A trainer's success: nothing told, the others' word read, the channel closed as a
    /// success, and the job's success posted by the launcher that tells the story.
    #[test]
    fn a_success_closes_the_channel_and_posts_the_jobs_success() {
        let mut machine = running(Ledger::first(2), begun(Ledger::first(2), true));
        let read = machine.step(ran(
            0,
            "trainer exited with status 0",
            ChannelState::default(),
        ));
        assert_eq!(
            read,
            Command::ReadVerdict {
                stopped: false,
                record: None
            }
        );
        let close = machine.step(verdict(false, ChannelState::default()));
        assert_eq!(
            close,
            Command::Close {
                succeeded: true,
                record: None
            }
        );
        let Command::Finish { outcome, posts } =
            machine.step(Input::Closed(ChannelState::default()))
        else {
            panic!("no finish");
        };
        assert_eq!(outcome.code, 0);
        assert_eq!(posts.len(), 1);
        assert_eq!(
            (posts[0].kind, posts[0].reason),
            (EventKind::Normal, "Succeeded")
        );
    }

    /// A failure within the budget: told to the job naming the pod and when, the verdict waited
    /// for as long as a recoverable failure may take, then a restart in place that says what it
    /// spends; the next gathering starts from the next epoch with this attempt's pods, and the
    /// launcher's own allowances (not the job's agreed ones).
    #[test]
    fn a_failure_within_the_budget_restarts_in_place() {
        let own = Ledger::first(5);
        let agreed = Ledger::first(2);
        let mut machine = running(own, begun(agreed, true));
        let tell = machine.step(ran(
            3,
            "trainer exited with status 3",
            ChannelState::default(),
        ));
        assert_eq!(
            tell,
            Command::TellFailure(Loss::failure(
                "pod p-1 (trainer id 1 of 2) at 12:00:00Z: trainer exited with status 3".into(),
                true,
            ))
        );
        let Command::AwaitVerdict { limit, record, .. } =
            machine.step(Input::Told(ChannelState::default()))
        else {
            panic!("no verdict waited for");
        };
        assert_eq!((limit, record), (LIMITS.recoverable, None));
        let Command::Restart {
            line,
            posts,
            record,
            kind,
        } = machine.step(verdict(
            true,
            ChannelState {
                attendance: crate::control::heard::Attendance {
                    alive: vec!["p-0".into(), "p-1".into(), "p-2".into()],
                    ..Default::default()
                },
                ..ChannelState::default()
            },
        ))
        else {
            panic!("no restart");
        };
        // This pod's own failure, as the attempt's end says it (the job's first cause instead
        // when the channel told one).
        assert_eq!(
            line,
            "trainer exited with status 3: restarting the job (restart 1 of 2)"
        );
        assert_eq!(record, None);
        assert_eq!(kind, Kind::Failure);
        assert_eq!(posts.len(), 1);
        assert_eq!(
            (posts[0].kind, posts[0].reason),
            (EventKind::Warning, "Restarting")
        );
        let Command::Gather {
            ledger,
            members_before,
            alive,
        } = machine.step(Input::Restarted)
        else {
            panic!("no gathering");
        };
        assert_eq!(members_before, vec![pod("p-0", 1), pod("p-1", 2)]);
        // The launchers the coordinator heard at the verdict go to the next gathering (an
        // arrival among them), whose elastic rule keeps them whatever their Ready condition.
        assert_eq!(alive, ["p-0", "p-1", "p-2"]);
        assert_eq!((ledger.epoch, ledger.max_restarts), (1, 5));
    }

    /// With the budget spent, no verdict can change this pod's end: it says its children are
    /// stopped and ends, naming the job's first cause (another pod's) first.
    #[test]
    fn a_spent_budget_ends_the_pod_with_the_jobs_first_cause() {
        let spent = Ledger {
            epoch: 2,
            ..Ledger::first(2)
        };
        let mut machine = running(spent, begun(spent, true));
        machine.step(ran(
            3,
            "trainer exited with status 3",
            ChannelState::default(),
        ));
        let read = machine.step(Input::Told(ChannelState::default()));
        assert_eq!(
            read,
            Command::ReadVerdict {
                stopped: true,
                record: None
            }
        );
        let other = cause("pod p-0 at 11:59:59Z: trainer exited with status 1", false);
        let close = machine.step(verdict(true, other.clone()));
        assert!(
            matches!(
                close,
                Command::Close {
                    succeeded: false,
                    ..
                }
            ),
            "{close:?}"
        );
        let Command::Finish { outcome, posts } = machine.step(Input::Closed(other)) else {
            panic!("no finish");
        };
        assert_eq!(outcome.code, 3);
        assert!(
            outcome.reason.starts_with(
                "job stopped: pod p-0 at 11:59:59Z: trainer exited with status 1; on this pod: trainer exited with status 3"
            ),
            "{}",
            outcome.reason
        );
        assert!(outcome.reason.contains("restarts"), "{}", outcome.reason);
        assert_eq!(posts.last().map(|p| p.reason), Some("Failed"));
    }

    /// A preemption told by the coordinator is recorded on the Job by the launcher that keeps
    /// the count, once, as soon as it is known (the ended epoch with its free restart), and
    /// the restart spends nothing.
    #[test]
    fn a_preemption_is_recorded_once_and_spends_nothing() {
        let ledger = Ledger {
            epoch: 1,
            ..Ledger::first(1)
        };
        let records = Begun {
            records: true,
            ..begun(ledger, true)
        };
        let mut machine = running(Ledger::first(1), records);
        machine.step(ran(143, "trainer stopped", ChannelState::default()));
        let preempted = cause("pod p-0: preempted", true);
        let Command::AwaitVerdict { record, .. } = machine.step(Input::Told(preempted.clone()))
        else {
            panic!("no verdict waited for: a preemption may restart whatever was spent");
        };
        assert_eq!(record, Some((1, 1, 0)));
        let Command::Restart {
            line, record, kind, ..
        } = machine.step(verdict(true, preempted))
        else {
            panic!("no restart");
        };
        assert_eq!(record, None, "recorded once");
        assert_eq!(kind, Kind::Preemption);
        assert!(
            line.ends_with("(restart 2 after a preemption, which spends none of the 1 restarts)"),
            "{line}"
        );
        let Command::Gather { ledger, .. } = machine.step(Input::Restarted) else {
            panic!("no gathering");
        };
        assert_eq!((ledger.epoch, ledger.preemptions), (2, 1));
    }

    /// A growth's free restart is recorded as one of the grows too: a whole-Job restart then
    /// knows it was no preemption.
    #[test]
    fn a_growth_is_recorded_among_the_grows() {
        let records = Begun {
            records: true,
            ..begun(Ledger::first(1), true)
        };
        let mut machine = running(Ledger::first(1), records);
        machine.step(ran(143, "trainer stopped", ChannelState::default()));
        let grown = ChannelState {
            cause: Some(Loss {
                reason: "the job grows: p-2 joined (1 pod)".into(),
                restart: true,
                kind: Kind::Growth,
            }),
            ..ChannelState::default()
        };
        let Command::AwaitVerdict { record, .. } = machine.step(Input::Told(grown)) else {
            panic!("no verdict waited for");
        };
        assert_eq!(record, Some((0, 1, 1)));
    }

    /// A stop signal while the verdict is waited for ends the pod (it is being deleted), with
    /// the signal's status; a launcher that does not tell the story posts nothing.
    #[test]
    fn a_stop_while_waiting_for_the_verdict_ends_the_pod() {
        let quiet = Begun {
            posts: false,
            ..begun(Ledger::first(3), true)
        };
        let mut machine = running(Ledger::first(3), quiet);
        machine.step(ran(
            3,
            "trainer exited with status 3",
            ChannelState::default(),
        ));
        machine.step(Input::Told(ChannelState::default()));
        let stopped = Err(Error::Stopped {
            signal: 15,
            doing: "waiting for the job's verdict".into(),
        });
        let close = machine.step(Input::Verdict {
            verdict: stopped,
            state: ChannelState::default(),
        });
        assert!(matches!(
            close,
            Command::Close {
                succeeded: false,
                ..
            }
        ));
        let Command::Finish { outcome, posts } =
            machine.step(Input::Closed(ChannelState::default()))
        else {
            panic!("no finish");
        };
        assert_eq!(outcome.code, 143);
        assert!(posts.is_empty());
    }

    /// Issue 52: a launcher its pod's deletion stopped (SIGTERM) ends PREEMPTED (83, which the
    /// generated Job ignores) when the launchers restart for free without it: it told the job
    /// of its preemption, and the job's free preemptions were not used up. Past the allowance,
    /// without a preemption told (no channel or checkpoint window), or stopped by another
    /// signal, the signal's status stands and the Job controller counts it.
    #[test]
    fn a_stop_the_launchers_count_free_ends_preempted_else_by_its_signal() {
        let ended = |ledger: Ledger, preemptible: bool, signal: i32| {
            let attempt = Begun {
                preemptible,
                ..begun(ledger, true)
            };
            let mut machine = running(ledger, attempt);
            let stopped = Err(Error::stopped(signal, " while training"));
            machine.step(Input::Ran {
                result: stopped,
                at: "12:00:00Z".into(),
                state: ChannelState::default(),
            });
            let preempted = cause("pod p-1: preempted (SIGTERM while training)", true);
            machine.step(Input::Told(preempted.clone()));
            machine.step(verdict(false, preempted.clone()));
            let Command::Finish { outcome, .. } = machine.step(Input::Closed(preempted)) else {
                panic!("no finish");
            };
            outcome
        };
        let free = ended(Ledger::first(1), true, SIGTERM);
        assert_eq!(free.code, exit::PREEMPTED, "{free:?}");
        assert!(
            free.reason.contains("a free preemption: exit 83"),
            "{free:?}"
        );
        assert!(free.reason.starts_with("received SIGTERM"), "{free:?}");
        let spent = Ledger {
            epoch: 2,
            preemptions: 2,
            max_preemptions: 2,
            ..Ledger::first(1)
        };
        assert_eq!(ended(spent, true, SIGTERM).code, 143);
        let one_left = Ledger {
            max_preemptions: 3,
            ..spent
        };
        assert_eq!(ended(one_left, true, SIGTERM).code, exit::PREEMPTED);
        assert_eq!(ended(Ledger::first(1), false, SIGTERM).code, 143);
        assert_eq!(ended(Ledger::first(1), true, libc::SIGINT).code, 130);
        // A trainer's own 83 is no free preemption: reported as 1, which the Job counts.
        let own = preemption_status(
            Outcome::new(83, "trainer exited with status 83"),
            None,
            true,
        );
        assert_eq!(own.code, exit::INTERNAL, "{own:?}");
        assert!(own
            .reason
            .starts_with("trainer exited with status 83; reported as 1"));
    }

    /// Without a channel there is nobody to tell and no verdict: the first failure ends the
    /// pod with its own status.
    #[test]
    fn without_a_channel_a_failure_ends_the_pod() {
        let mut machine = running(Ledger::first(3), begun(Ledger::first(3), false));
        let close = machine.step(ran(
            3,
            "trainer exited with status 3",
            ChannelState::default(),
        ));
        assert!(
            matches!(
                close,
                Command::Close {
                    succeeded: false,
                    ..
                }
            ),
            "{close:?}"
        );
        let Command::Finish { outcome, .. } = machine.step(Input::Closed(ChannelState::default()))
        else {
            panic!("no finish");
        };
        assert_eq!(outcome.code, 3);
    }

    /// A job that succeeded while this pod gathered ends it with success; an input the stage
    /// does not expect ends the loop as an internal error, never a panic.
    #[test]
    fn the_jobs_success_while_gathering_and_an_input_out_of_order() {
        let (mut machine, _) = AttemptLoop::start(Ledger::first(0), LIMITS);
        let Command::Finish { outcome, .. } =
            machine.step(Input::JobSucceeded("the job succeeded".into()))
        else {
            panic!("no finish");
        };
        assert_eq!(outcome.code, exit::SUCCESS);
        let (mut machine, _) = AttemptLoop::start(Ledger::first(0), LIMITS);
        let Command::Finish { outcome, .. } = machine.step(Input::Restarted) else {
            panic!("no finish");
        };
        assert_eq!(outcome.code, exit::INTERNAL);
        assert!(outcome.reason.contains("Restarted"), "{}", outcome.reason);
    }

    /// The pod's last line: its own failure names the pod and when, after "job stopped: ";
    /// after the job's first cause when another pod's (the coordinator's word may be this
    /// pod's own, cut to fit a frame: then it is this pod's); a success, a loss told by
    /// another, and a stop signal are left as they are.
    #[test]
    fn the_pods_last_line_names_the_jobs_first_cause_first() {
        let failed = || Ok(Outcome::new(3, "trainer-0 exited with status 3"));
        let who = "pod p-1 at 2026-11-26T10:00:00Z";
        let said = format!("{who}: trainer-0 exited with status 3");
        let line = |result, cause: Option<&str>| {
            let ended = AttemptEnd {
                result,
                who: "pod p-1".into(),
                at: "2026-11-26T10:00:00Z".into(),
                said: said.clone(),
                succeeded: false,
                kind: Kind::Failure,
                recorded: false,
            };
            ended.for_the_job(cause.map(String::from)).reason
        };
        assert_eq!(
            line(failed(), None),
            format!("{JOB_STOPPED}{who}: trainer-0 exited with status 3")
        );
        assert_eq!(
            line(failed(), Some("pod p-2 at t: trainer-0 exited with status 1")),
            format!("{JOB_STOPPED}pod p-2 at t: trainer-0 exited with status 1; on this pod: trainer-0 exited with status 3")
        );
        assert_eq!(
            line(failed(), Some(&said[..20])),
            format!("{JOB_STOPPED}{who}: trainer-0 exited with status 3"),
            "this pod's own cause, cut"
        );
        let success = Ok(Outcome::new(exit::SUCCESS, "trainer exited with status 0"));
        assert_eq!(line(success, Some("x")), "trainer exited with status 0");
        let told = Ok(Outcome::new(78, format!("{JOB_STOPPED}pod p-2: lost")));
        assert_eq!(line(told, None), format!("{JOB_STOPPED}pod p-2: lost"));
        let stopped = Err(Error::Stopped {
            signal: libc::SIGTERM,
            doing: "training".into(),
        });
        assert!(!line(stopped, Some("pod p-2: x")).starts_with(JOB_STOPPED));
    }

    #[test]
    fn an_outcome_after_restarts_says_how_many() {
        let outcome = || Outcome::new(0, "trainer exited with status 0");
        assert_eq!(
            after_restarts(outcome(), 0).reason,
            "trainer exited with status 0"
        );
        assert_eq!(
            after_restarts(outcome(), 1).reason,
            "trainer exited with status 0 (after 1 restart of the job)"
        );
    }

    #[test]
    fn what_an_attempts_end_leads_to() {
        let budget = |epoch, max_restarts, may_restart| Budget {
            ledger: Ledger {
                epoch,
                ..Ledger::first(max_restarts)
            },
            may_restart,
            preempted: false,
        };
        let trainer_failed = || Ok(Outcome::new(3, "trainer exited with status 3"));
        let peer_lost = || {
            Err(Error::PeerLost {
                reason: "peer pod p-1 was deleted".into(),
                stopped: "trainer-0".into(),
            })
        };
        let show = |after: AfterRun| match after {
            AfterRun::Restart(reason) => format!("restart: {reason}"),
            AfterRun::Finish(Ok(o)) => format!("finish {}: {}", o.code, o.reason),
            AfterRun::Finish(Err(e)) => format!("fail {}: {e}", e.exit_code()),
        };
        let cases: Vec<(Result<Outcome, Error>, Budget, &str)> = vec![
            (
                Ok(Outcome::new(0, "trainer exited with status 0")),
                budget(0, 3, true),
                "finish 0: trainer exited with status 0",
            ),
            (trainer_failed(), budget(0, 3, true), "restart: trainer exited with status 3"),
            (trainer_failed(), budget(2, 3, true), "restart: trainer exited with status 3"),
            (
                trainer_failed(),
                budget(3, 3, true),
                "finish 3: trainer exited with status 3; no restart left (all 3 of PADDLE_LAUNCHER_MAX_RESTARTS used)",
            ),
            (
                trainer_failed(),
                budget(0, 3, false),
                "finish 3: trainer exited with status 3; no restart: a pod of the job has already finished, or failed in a way a restart would repeat",
            ),
            // No budget: today's fail-fast, the outcome untouched.
            (trainer_failed(), budget(0, 0, true), "finish 3: trainer exited with status 3"),
            (peer_lost(), budget(0, 1, true), "restart: peer pod p-1 was deleted"),
            (
                peer_lost(),
                budget(1, 1, true),
                "finish 78: job stopped: peer pod p-1 was deleted; stopped trainer-0 so that the Job can restart cleanly; no restart left (all 1 of PADDLE_LAUNCHER_MAX_RESTARTS used)",
            ),
            (
                Err(Error::PserverDied {
                    ended: "exited with status 9".into(),
                    when: "while the trainer was running; the trainer was stopped",
                    hint: "",
                }),
                budget(0, 1, true),
                "restart: pserver exited with status 9 while the trainer was running; the trainer was stopped",
            ),
            // The pod is being deleted: stop, whatever the budget.
            (
                Err(Error::stopped(SIGTERM, "; stopped trainer-0")),
                budget(0, 5, true),
                "fail 143: received SIGTERM; stopped trainer-0",
            ),
            // A spent budget is said first: it is this pod's own reason.
            (
                trainer_failed(),
                budget(3, 3, false),
                "finish 3: trainer exited with status 3; no restart left (all 3 of PADDLE_LAUNCHER_MAX_RESTARTS used)",
            ),
        ];
        for (result, budget, expected) in cases {
            assert_eq!(show(after_run(result, &budget)), expected);
        }
    }

    /// A launcher's own end is told with its kind: a hang its watch found (or the job's it
    /// heard) as a hang, anything else as a failure; without a channel's cause the pod's last
    /// events say it the same way — a Hang event (with where the stacks are) only after a hang,
    /// and Failed, never Succeeded, after a failure.
    #[test]
    fn an_own_end_is_told_and_posted_by_its_kind() {
        let hung = Input::Ran {
            result: Err(Error::Hung {
                reason: "trainer-0 made no progress for 30 s".into(),
            }),
            at: "12:00:00Z".into(),
            state: ChannelState::default(),
        };
        let mut machine = running(Ledger::first(0), begun(Ledger::first(0), true));
        let Command::TellFailure(told) = machine.step(hung) else {
            panic!("no telling");
        };
        assert_eq!(told.kind, Kind::Hang);
        let mut machine = running(Ledger::first(0), begun(Ledger::first(0), true));
        let failed = ran(3, "trainer exited with status 3", ChannelState::default());
        let Command::TellFailure(told) = machine.step(failed) else {
            panic!("no telling");
        };
        assert_eq!(told.kind, Kind::Failure);

        // Without a channel: judged at once, the pod's own end posted.
        for (result, hang_posted) in [
            (
                Err(Error::Hung {
                    reason: "trainer-0 made no progress for 30 s".into(),
                }),
                true,
            ),
            (Ok(Outcome::new(3, "trainer exited with status 3")), false),
        ] {
            let mut machine = running(Ledger::first(0), begun(Ledger::first(0), false));
            let input = Input::Ran {
                result,
                at: "12:00:00Z".into(),
                state: ChannelState::default(),
            };
            let Command::Close { succeeded, .. } = machine.step(input) else {
                panic!("no close");
            };
            assert!(!succeeded);
            let Command::Finish { posts, .. } =
                machine.step(Input::Closed(ChannelState::default()))
            else {
                panic!("no finish");
            };
            let reasons: Vec<&str> = posts.iter().map(|p| p.reason).collect();
            match hang_posted {
                true => assert_eq!(reasons, ["Hang", "Failed"]),
                false => assert_eq!(reasons, ["Failed"]),
            }
        }
    }

    /// The job's first cause, when the channel told one, is what the pod's last events say: a
    /// hang's with its Hang event, any other without.
    #[test]
    fn the_jobs_cause_is_posted_by_its_kind() {
        for (kind, reasons) in [
            (Kind::Hang, vec!["Hang", "Failed"]),
            (Kind::Failure, vec!["Failed"]),
        ] {
            let mut machine = running(Ledger::first(0), begun(Ledger::first(0), true));
            let told = ChannelState {
                cause: Some(Loss {
                    reason: "the job hangs: suspect p-2".into(),
                    restart: false,
                    kind,
                }),
                ..ChannelState::default()
            };
            machine.step(ran(
                3,
                "trainer exited with status 3",
                ChannelState::default(),
            ));
            machine.step(Input::Told(told.clone()));
            let close = machine.step(verdict(false, told.clone()));
            assert!(matches!(close, Command::Close { .. }), "{close:?}");
            let Command::Finish { posts, .. } = machine.step(Input::Closed(told)) else {
                panic!("no finish");
            };
            let posted: Vec<&str> = posts.iter().map(|p| p.reason).collect();
            assert_eq!(posted, reasons, "{kind:?}");
        }
    }

    /// A checkpoint asked for the job's growth keeps a launcher waiting for the verdict even
    /// when no free preemption is left: the growth's restart is free whatever the allowance.
    #[test]
    fn a_growths_checkpoint_waits_for_the_verdict_past_the_allowance() {
        let spent = Ledger {
            epoch: 1,
            max_restarts: 1,
            preemptions: 0,
            max_preemptions: 0,
            grows: 0,
        };
        let failed = Ok(Outcome::new(3, "trainer exited with status 3"));
        let growing = ChannelState {
            checkpoint: Some("the job grows: p-3 joined (1 pod)".into()),
            ..ChannelState::default()
        };
        assert_eq!(
            verdict_wait(&growing, &failed, spent, LIMITS),
            Some(LIMITS.recoverable)
        );
        let preempting = ChannelState {
            checkpoint: Some("pod p-2: preempted".into()),
            ..ChannelState::default()
        };
        assert_eq!(verdict_wait(&preempting, &failed, spent, LIMITS), None);
    }
}
