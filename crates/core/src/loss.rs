//! The one record of an attempt's end: why it ended, whether the job may start again, and what
//! kind of end it was. Every layer carries this one type — a launcher's own failure as it tells
//! the job, the coordinator's judgement and its `Lost` frame on the wire, what a launcher
//! hears, the job's first cause the attempt loop names, the restart the ledger counts and the
//! metrics label, and a member pod lost as the API shows it.

use serde::{Deserialize, Serialize};

/// What kind of end an attempt had: exactly one, so that a restart spends, counts and is said
/// one way. The kind decides what the restart costs; whether there is one at all is the
/// verdict's (`Loss::restart`), which any kind may lose (a member that finished meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A trainer or pserver failed, or a pod of the job was lost (deleted, silent).
    Failure,
    /// The job hung (no progress within --hang-timeout): every launcher asks its trainers for
    /// their stacks before stopping them, and ends with the hang's status.
    Hang,
    /// A pod of the job was preempted within the free allowance: the restart spends no budget.
    /// (Past the allowance the coordinator judges a preemption a `Failure`.)
    Preemption,
    /// An elastic job grew with pods that arrived: a free restart, counted among the grows,
    /// not the preemptions, and bounded by no allowance.
    Growth,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Failure, Kind::Hang, Kind::Preemption, Kind::Growth];

    /// The restart after it spends none of --max-restarts.
    pub fn is_free(self) -> bool {
        matches!(self, Kind::Preemption | Kind::Growth)
    }

    /// Its name as a metric's label says it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Failure => "failure",
            Kind::Hang => "hang",
            Kind::Preemption => "preemption",
            Kind::Growth => "grow",
        }
    }
}

/// An attempt's end, as a launcher tells the job (its own), as the job's channel tells it (the
/// coordinator's judgement) or as the API shows a member pod's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Frame", into = "Frame")]
pub struct Loss {
    /// What every pod's last line says, the same on all.
    pub reason: String,
    /// Whether the job may start again: as a launcher tells its own end, whether a restart
    /// could mend it; as the channel tells the loss, provisional until the verdict, which may
    /// only turn it into "no" (a member that finished meanwhile).
    pub restart: bool,
    pub kind: Kind,
}

impl Loss {
    /// A failure the job may restart from (a member pod lost, its link ended, a trainer
    /// failed).
    pub fn of_pod(reason: String) -> Loss {
        Loss::failure(reason, true)
    }

    /// A failure; `restart`: false when a restart would fail the same way.
    pub fn failure(reason: String, restart: bool) -> Loss {
        Loss {
            reason,
            restart,
            kind: Kind::Failure,
        }
    }

    /// The loss of this kind with another reason and verdict (told again once a member
    /// finished: the job cannot start again).
    pub fn retold(&self, reason: String, restart: bool) -> Loss {
        Loss {
            reason,
            restart,
            kind: self.kind,
        }
    }
}

/// "pod p-1 on node n7 (trainer id 1 of 3) at 12:00:00Z: why": a launcher's own end as it
/// tells the job and as every pod's last line names it (`who`: the launcher, `at`: when, UTC).
pub fn said_by(who: &str, at: &str, why: &str) -> String {
    format!("{who} at {at}: {why}")
}

/// A `Lost` frame's fields as the wire has always carried them (launchers of every version read
/// and write these): a kind as three flags, the last three absent from older launchers. A
/// growth is said preempted too (its restart is free), and a hang is never preempted.
#[derive(Serialize, Deserialize)]
struct Frame {
    reason: String,
    restart: bool,
    #[serde(default)]
    hang: bool,
    #[serde(default)]
    preempted: bool,
    #[serde(default)]
    grown: bool,
}

impl From<Frame> for Loss {
    fn from(frame: Frame) -> Loss {
        let kind = match (frame.preempted, frame.grown, frame.hang) {
            (true, true, _) => Kind::Growth,
            (true, false, _) => Kind::Preemption,
            (false, _, true) => Kind::Hang,
            (false, _, false) => Kind::Failure,
        };
        Loss {
            reason: frame.reason,
            restart: frame.restart,
            kind,
        }
    }
}

impl From<Loss> for Frame {
    fn from(loss: Loss) -> Frame {
        Frame {
            reason: loss.reason,
            restart: loss.restart,
            hang: loss.kind == Kind::Hang,
            preempted: loss.kind.is_free(),
            grown: loss.kind == Kind::Growth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind goes through the frame and comes back itself, and the frame says it as the
    /// launchers before the kind did.
    #[test]
    fn every_kind_keeps_its_frame() {
        let said = [
            (
                Kind::Failure,
                r#"{"reason":"r","restart":true,"hang":false,"preempted":false,"grown":false}"#,
            ),
            (
                Kind::Hang,
                r#"{"reason":"r","restart":true,"hang":true,"preempted":false,"grown":false}"#,
            ),
            (
                Kind::Preemption,
                r#"{"reason":"r","restart":true,"hang":false,"preempted":true,"grown":false}"#,
            ),
            (
                Kind::Growth,
                r#"{"reason":"r","restart":true,"hang":false,"preempted":true,"grown":true}"#,
            ),
        ];
        for (kind, json) in said {
            let loss = Loss {
                reason: "r".into(),
                restart: true,
                kind,
            };
            assert_eq!(serde_json::to_string(&loss).unwrap(), json);
            assert_eq!(serde_json::from_str::<Loss>(json).unwrap(), loss);
        }
    }

    /// An older launcher's frame, without the kind's flags, is a failure; a preempted hang
    /// (never written) reads as the preemption it was judged.
    #[test]
    fn a_frame_without_flags_is_a_failure() {
        let old: Loss = serde_json::from_str(r#"{"reason":"r","restart":false}"#).unwrap();
        assert_eq!(old, Loss::failure("r".into(), false));
        let both: Loss =
            serde_json::from_str(r#"{"reason":"r","restart":true,"hang":true,"preempted":true}"#)
                .unwrap();
        assert_eq!(both.kind, Kind::Preemption);
    }
}
