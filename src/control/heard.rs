//! What a launcher hears from the job's channel and asks of it, the
//! words the channel's pure machines (`coordinator::Core`, `following::Following`) and the
//! attempt loop share, with the rules that word a preemption's end. Pure: no socket here.

use crate::ledger::Ledger;
use crate::loss::{Kind, Loss};
use crate::membership::Membership;

/// A line one of the channel's pure machines says for the pod's log: its driver writes it (the
/// machines themselves touch no logger, so that a simulation runs them silently and fast).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogLine {
    Info(String),
    Warn(String),
}

/// What a launcher hears from the channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// Every member is ready: start restart epoch `epoch`; a follower gets the coordinator's
    /// membership.
    Go {
        membership: Option<Membership>,
        /// The attempt's ledger, agreed by all.
        ledger: Ledger,
    },
    /// Not everyone found the same members, or not all joined: discover the job again.
    Regather(String),
    /// The members' configurations cannot start together (why): end with status 2.
    Refused(String),
    /// The job lost a member or one failed: stop (with whether the job may start again, and
    /// what kind of end it is).
    Lost(Loss),
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// What this launcher asks of its channel (the coordinator's core or the follower's).
pub(super) enum Request {
    /// This launcher's attempt ended without success (a failure or a hang, with whether a
    /// restart could mend it).
    Failed(Loss),
    /// The coordinator's launcher saw a member's pod lost through the API.
    PodLost(String),
    /// After a loss: this launcher's children are stopped.
    Stopped,
    Done,
    /// This launcher was told to stop while its trainer runs (the reason): every trainer of
    /// the job is asked for a checkpoint.
    Preempted(String),
    Finish {
        succeeded: bool,
    },
}

/// The end of an attempt that a preemption ends, in an attempt of this ledger: a free
/// preemption, or beyond the free ones a failure whose reason says why it counts as one (the
/// restart as provisional as any, for the verdict to decide). The coordinator's judgement, and
/// a follower's when the coordinator is gone.
pub fn judge_preemption(reason: String, ledger: Ledger) -> Loss {
    if ledger.preemption_is_free() {
        return Loss {
            reason,
            restart: true,
            kind: Kind::Preemption,
        };
    }
    let free = match ledger.max_preemptions {
        0 => "no preemption is free".to_string(),
        1 => "only the job's first preemption was free".to_string(),
        n => format!("only the job's first {n} preemptions were free"),
    };
    Loss::of_pod(format!(
        "{reason}; {free} (PADDLE_LAUNCHER_MAX_PREEMPTIONS): this one counts as a failure"
    ))
}

/// How the end of an attempt in which a member was preempted (or the job was growing) reads
/// on every pod: the preemption (what its launcher said) or the growth first, then what ended
/// the attempt. The coordinator says it; a follower whose coordinator is gone says it itself.
pub fn after_preemption(preempted: &str, ended: &str) -> String {
    format!("{preempted}; then: {ended}")
}
