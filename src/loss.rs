//! The one record of an attempt's loss: why it ended, whether the job may start again, and
//! what kind of end it was. Every layer carries this one type — the coordinator's decision and
//! its `Lost` frame on the wire (its fields on the frame itself), what a launcher hears, the
//! job's first cause the attempt loop names, and a member pod lost as the API shows it.

use serde::{Deserialize, Serialize};

/// An attempt's loss, as the job's channel tells it (or the API shows a member pod's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    /// What every pod's last line says, the same on all.
    pub reason: String,
    /// Whether the job may start again, as said when the loss was told: provisional until the
    /// verdict, which may only turn it into "no" (a member that finished meanwhile).
    pub restart: bool,
    /// The job hangs: every launcher asks its trainer for its stacks before stopping it, and
    /// ends with the hang's status.
    #[serde(default)]
    pub hang: bool,
    /// The attempt ended with a preemption: the restart spends no budget.
    #[serde(default)]
    pub preempted: bool,
    /// The attempt ended for an elastic job's growth (free, with `preempted`): it counts among
    /// the grows, not the free preemptions.
    #[serde(default)]
    pub grown: bool,
}

impl Loss {
    /// A loss the job may restart from, of no particular kind (a member pod lost, its link
    /// ended, a trainer failed).
    pub fn of_pod(reason: String) -> Loss {
        Loss {
            reason,
            restart: true,
            hang: false,
            preempted: false,
            grown: false,
        }
    }

    /// The loss of this kind with another reason and verdict (told again once a member
    /// finished: the job cannot start again).
    pub fn retold(&self, reason: String, restart: bool) -> Loss {
        Loss {
            reason,
            restart,
            ..self.clone()
        }
    }
}

/// Why the job restarted in place, by kind (a metric's label, the restart's line says more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// A trainer or pserver failed, or a pod of the job was lost (deleted, silent).
    Failure,
    /// The job hung (no progress within --hang-timeout).
    Hang,
    /// A pod of the job was preempted (a free restart, or one that spent the budget).
    Preemption,
    /// An elastic job grew with pods that arrived.
    Grow,
}

impl Cause {
    pub const ALL: [Cause; 4] = [Cause::Failure, Cause::Hang, Cause::Preemption, Cause::Grow];

    /// The kind of an attempt's end: a grow is a preemption of the attempt that also grows.
    pub fn of(preempted: bool, grown: bool, hang: bool) -> Cause {
        match (preempted, grown, hang) {
            (true, true, _) => Cause::Grow,
            (true, false, _) => Cause::Preemption,
            (false, _, true) => Cause::Hang,
            (false, _, false) => Cause::Failure,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cause::Failure => "failure",
            Cause::Hang => "hang",
            Cause::Preemption => "preemption",
            Cause::Grow => "grow",
        }
    }
}
