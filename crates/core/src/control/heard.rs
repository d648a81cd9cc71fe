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
pub enum Request {
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

/// How the job's growth is said: every launcher's restart line and the event name it so (and
/// a checkpoint asked for it is known by it).
pub const GROWS: &str = "the job grows";

/// What the job's channel has made known to its launcher so far, as one value: the channel's
/// task publishes it whole (one `watch`), and only `ChannelState::know` changes it, by each part's
/// rule — the first cause stands, "no restart" is never taken back, the first verdict stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelState {
    /// This launcher coordinates the channel (known from its start).
    pub coordinates: bool,
    /// A follower's hello is out: a `Go` may be on its way to it, and only the coordinator
    /// may call the attempt off.
    pub said_hello: bool,
    /// The job's loss is known here: told by the coordinator, or decided by it.
    pub lost: bool,
    /// The job's first cause, as the coordinator told it (a hang's names its suspect): what
    /// every pod's last line says, whichever pod failed first.
    pub cause: Option<Loss>,
    /// Whether the job may still restart: not once a member finished, or the loss is final.
    pub may_restart: bool,
    /// The verdict on the loss, decided once every member has stopped (the coordinator's; or
    /// this launcher's last word on it when the coordinator is gone without one).
    pub verdict: Option<bool>,
    /// Why the job's trainers were last asked for a checkpoint (a member preempted, or the
    /// elastic job's growth).
    pub checkpoint: Option<String>,
    /// The coordinator said every trainer of the job succeeded.
    pub succeeded: bool,
    /// An elastic job's coordinator: who its next gathering leaves out, who it heard alive.
    pub attendance: Attendance,
}

impl Default for ChannelState {
    fn default() -> ChannelState {
        ChannelState {
            coordinates: false,
            said_hello: false,
            lost: false,
            cause: None,
            may_restart: true,
            verdict: None,
            checkpoint: None,
            succeeded: false,
            attendance: Attendance::default(),
        }
    }
}

/// What an elastic job's coordinator knows of the launchers for its next gathering: the pods
/// it leaves out of the next round, and the pods it heard alive at the attempt's end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attendance {
    /// Members that did not say hello within the elastic wait.
    pub silent: Vec<String>,
    /// Pods turned away: they cannot join (another number of processes).
    pub turned_away: Vec<String>,
    /// The pods whose launchers were on the channel when the verdict on the attempt's loss
    /// was told (members still connected, arrivals, members that joined again), or, for a
    /// gathering that ended without a start, that had said hello in it: alive, whatever their
    /// Ready condition says (`membership::leave_out`).
    pub alive: Vec<String>,
}

/// What one of the channel's machines makes known to its launcher: the one vocabulary of the
/// coordinator's core and the follower's machine for the channel's `ChannelState`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// A follower's hello is out.
    SaidHello,
    /// The job's loss (its first is the job's cause); a loss that may not restart is final.
    Lost(Loss),
    /// The verdict on the loss, decided once.
    Verdict(bool),
    /// The job can no longer start again as a whole (a member finished, or the job ended).
    CannotRestart,
    /// This launcher's trainers are asked for a checkpoint (a member preempted, the reason).
    Checkpoint(String),
    /// Every trainer of the job succeeded (what ends a pserver pod of the split layout,
    /// without waiting for the API to show it).
    Succeeded,
    /// An elastic job's gathering ended for want of these members' hellos within the elastic
    /// wait: the next round leaves them out.
    Absent(Vec<String>),
    /// An elastic job's pods that cannot join (another number of processes): turned away,
    /// and left out of the next round.
    TurnedAway(Vec<String>),
    /// The pods whose launchers were on the channel as the verdict was told, or had said hello
    /// in a gathering that ends without a start: alive, whatever the API says of their Ready
    /// condition.
    Alive(Vec<String>),
}

impl ChannelState {
    /// A checkpoint was asked of the job's trainers (a member's preemption, or a growth): the
    /// attempt's end may be a preemption's, which only the coordinator's word (or its silence,
    /// judged) tells.
    pub fn checkpoint_asked(&self) -> bool {
        self.checkpoint.is_some()
    }

    /// The checkpoint asked was the elastic job's growth's: the attempt's end is the growth's
    /// free restart, whatever the free preemptions left.
    pub fn growth_asked(&self) -> bool {
        self.checkpoint
            .as_ref()
            .is_some_and(|reason| reason.starts_with(GROWS))
    }

    /// The job's first cause is a preemption's or a growth's: its restart spends nothing.
    pub fn ended_free(&self) -> bool {
        self.cause
            .as_ref()
            .is_some_and(|cause| cause.kind.is_free())
    }

    /// What is `known` now, by its part's rule; whether anything changed.
    pub fn know(&mut self, known: Known) -> bool {
        let before = self.clone();
        match known {
            Known::SaidHello => self.said_hello = true,
            Known::Lost(loss) => {
                self.lost = true;
                self.may_restart &= loss.restart;
                self.cause.get_or_insert(loss);
            }
            Known::Verdict(restart) => {
                self.lost = true;
                self.may_restart &= restart;
                self.verdict.get_or_insert(restart);
            }
            Known::CannotRestart => self.may_restart = false,
            Known::Checkpoint(reason) => self.checkpoint = Some(reason),
            Known::Succeeded => self.succeeded = true,
            Known::Absent(pods) => once_each(&mut self.attendance.silent, pods),
            Known::TurnedAway(pods) => once_each(&mut self.attendance.turned_away, pods),
            Known::Alive(pods) => self.attendance.alive = pods,
        }
        *self != before
    }
}

/// Adds the `pods` that `list` does not have yet: each pod once, however often it knocks.
fn once_each(list: &mut Vec<String>, pods: Vec<String>) {
    for pod in pods {
        if !list.contains(&pod) {
            list.push(pod);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::Kind;

    fn lost(reason: &str, restart: bool) -> Known {
        Known::Lost(Loss {
            reason: reason.into(),
            restart,
            kind: Kind::Failure,
        })
    }

    /// Each part of the channel's state by its rule: the first cause stands, "no restart" is
    /// never taken back, the first verdict stands (and makes the loss known), a checkpoint's
    /// reason is the last asked, a pod is left out once however often it knocks; what changes
    /// nothing says so (the watch's readers are not woken).
    #[test]
    fn the_channels_state_keeps_each_first_word() {
        let mut state = ChannelState::default();
        assert!(state.may_restart && !state.lost);
        assert!(state.know(lost("first", true)));
        assert!(state.know(lost("second", false)));
        assert_eq!(
            state.cause.as_ref().map(|c| c.reason.as_str()),
            Some("first")
        );
        assert!(state.lost && !state.may_restart);
        assert!(!state.know(lost("third", true)), "no restart is final");
        assert!(!state.may_restart);

        let mut state = ChannelState::default();
        assert!(state.know(Known::Verdict(true)));
        assert!(state.lost && state.may_restart);
        assert!(state.know(Known::Verdict(false)));
        assert_eq!(state.verdict, Some(true), "the first verdict stands");
        assert!(!state.may_restart, "a later no still forbids a restart");

        let mut state = ChannelState::default();
        assert!(!state.checkpoint_asked() && !state.growth_asked());
        assert!(state.know(Known::Checkpoint("a".into())));
        assert!(state.checkpoint_asked() && !state.growth_asked());
        assert!(state.know(Known::Checkpoint(
            "the job grows: p-3 joined (1 pod)".into()
        )));
        assert!(state.checkpoint_asked() && state.growth_asked());
        assert!(state.know(Known::Checkpoint("b".into())));
        assert_eq!(state.checkpoint.as_deref(), Some("b"));
        assert!(state.know(Known::Absent(vec!["p-1".into(), "p-2".into()])));
        assert!(!state.know(Known::Absent(vec!["p-2".into()])));
        assert!(state.know(Known::TurnedAway(vec!["p-3".into()])));
        assert!(state.know(Known::Alive(vec!["p-0".into()])));
        assert_eq!(state.attendance.silent, ["p-1", "p-2"]);
        assert_eq!(state.attendance.turned_away, ["p-3"]);
        assert_eq!(state.attendance.alive, ["p-0"]);
        assert!(state.know(Known::SaidHello) && state.said_hello);
        assert!(state.know(Known::Succeeded) && state.succeeded);
        assert!(state.know(Known::CannotRestart) && !state.may_restart);
        assert!(!state.know(Known::CannotRestart));
    }
}
