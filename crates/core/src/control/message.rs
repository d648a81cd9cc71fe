//! What launchers tell each other on the job's channel, as data: the messages, the reasons cut
//! to fit a frame, and what can go wrong with a link. Pure: the frames, their authentication
//! and the sockets are `wire`'s.

use serde::{Deserialize, Serialize};

pub use crate::job_view::RankStep;
use crate::ledger::Ledger;
use crate::loss::Loss;
use crate::membership::Membership;

/// The largest frame the coordinator reads: a follower only ever says small things.
pub const MAX_PAYLOAD: usize = 1024;

/// Longer reasons are cut: a frame must stay within `MAX_PAYLOAD`.
pub const MAX_REASON: usize = 400;

impl Message {
    /// A hello's ledger (its epoch: the one its launcher would start next, "next" on the
    /// wire); None for any other frame.
    pub fn ledger(&self) -> Option<Ledger> {
        match *self {
            Message::Hello {
                next_epoch,
                max_restarts,
                preemptions,
                max_preemptions,
                grows,
                ..
            } => Some(Ledger {
                epoch: next_epoch,
                max_restarts,
                preemptions,
                max_preemptions,
                grows,
            }),
            _ => None,
        }
    }
}

/// How many of a pod's processes one heartbeat carries at most: with the beat's other fields
/// and the largest numbers, they fit `MAX_PAYLOAD`. A pod that runs more (none does with
/// one process per GPU) reports those furthest behind.
pub const MAX_RANKS_PER_BEAT: usize = 16;

impl Message {
    /// A heartbeat that says nothing more.
    pub fn beat() -> Message {
        Message::Beat {
            ranks: Vec::new(),
            note: None,
        }
    }
}

/// What launchers tell each other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Message {
    /// A follower's first frame: which member it is, the restart epoch it would start next,
    /// and the fingerprint of the membership it found.
    Hello {
        pod: String,
        #[serde(rename = "next")]
        next_epoch: u32,
        view: String,
        /// The restarts this launcher was given (--max-restarts).
        max_restarts: u32,
        /// This launcher's heartbeat timeout in milliseconds: it beats at a third of it and
        /// judges the coordinator by it, so the coordinator beats this link at a third of the
        /// smaller of the two timeouts and judges it by the larger. 0: not said (an older
        /// launcher), the coordinator's own.
        #[serde(default)]
        heartbeat_ms: u64,
        /// How the follower names itself in the job's lines: "pod p-1 on node n7 (trainer id 1
        /// of 3)", so that a suspect the coordinator names has its rank and node.
        #[serde(default)]
        who: String,
        /// The job's preemptions this launcher knows of: restarts that spent no budget.
        #[serde(default)]
        preemptions: u32,
        /// The free preemptions this launcher was given (--max-preemptions; u32::MAX: no
        /// bound).
        #[serde(default = "unbounded")]
        max_preemptions: u32,
        /// Of those preemptions, the elastic job's grows this launcher knows of: free restarts
        /// that are no preemption, which --max-preemptions does not bound.
        #[serde(default)]
        grows: u32,
        /// The trainer processes its pod runs (--nproc-per-pod): every pod must run as many.
        #[serde(default = "one", rename = "nproc")]
        nproc_per_pod: u32,
    },
    /// A heartbeat. A follower's carries its trainer processes' progress when it reads it
    /// (for the coordinator's view of the job: its table, its stragglers); the coordinator's
    /// may carry a line for every launcher's log (a straggler named). Both fields are absent
    /// on the wire when empty, and a launcher from before them reads the frame as a beat.
    Beat {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ranks: Vec<RankStep>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A follower's heartbeat while hang detection is on: its trainer's progress, the step it
    /// last wrote to its progress file (if it writes numbers) and how long ago any progress was.
    Progress {
        step: Option<u64>,
        quiet_ms: u64,
        /// Of a pod's several trainer processes, the trainer id of the one furthest behind
        /// (whose step and progress these are); none when the pod runs one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        behind: Option<u32>,
        /// Its trainer processes' progress, as a beat's.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ranks: Vec<RankStep>,
    },
    /// Coordinator: every member is here with the same view: start restart epoch `epoch`, with
    /// this membership (which a follower that did not discover the pods itself needs).
    Go {
        membership: Option<Membership>,
        /// The job's ledger as the members agreed it (`Ledger::agree`), its fields on the
        /// frame itself: "epoch", "max_restarts", "preemptions", "max_preemptions", "grows".
        #[serde(flatten)]
        ledger: Ledger,
    },
    /// A follower's trainer succeeded: its end from now on is not a loss, and the job can no
    /// longer start again as a whole.
    Done,
    /// A follower failed (or saw the job fail), a `Failure` or a `Hang` (the coordinator names
    /// the rank furthest behind, and every launcher asks its trainers for their stacks before
    /// stopping them): the coordinator tells everyone. Its fields on the frame itself:
    /// "reason", "restartable" — false when a restart would fail the same way (a command that
    /// cannot start) — and "hang", which may be absent.
    Failed(#[serde(with = "failed_frame")] Loss),
    /// Coordinator: the job lost a member or one failed: stop (its fields on the frame
    /// itself: "reason", "restart" — whether the job may start again, not once a member has
    /// finished — "hang", "preempted", "grown"; the last three may be absent).
    Lost(Loss),
    /// A follower's launcher was told to stop while its trainer runs (its pod is preempted,
    /// drained or deleted): it has asked its trainer for a checkpoint, and the job's other
    /// trainers must checkpoint with it. Said before its checkpoint window; its end follows
    /// as a `Failed` (or the connection's end), which then spends no restart.
    Preempted { reason: String },
    /// Coordinator: a member is preempted (the reason): ask the trainer for a checkpoint now.
    Checkpoint { reason: String },
    /// Coordinator: the membership is not what everyone agrees on yet: discover the job again.
    Regather { reason: String },
    /// Coordinator: the members were configured so that no start can work (the trainer
    /// processes per pod differ): every launcher ends with status 2.
    Refused { reason: String },
    /// The coordinator ends normally, after every follower is done.
    Bye,
    /// Coordinator: this member without a trainer (a split layout's pserver pod) has served
    /// its part: its pod's end (deleted, evicted) is no loss to the job. Told to everyone, who
    /// watch its pod through the API too.
    Served { pod: String },
    /// Coordinator: this member's trainer succeeded, so the job can no longer start again as a
    /// whole. Told to every follower, so that none restarts and waits for that pod if the
    /// coordinator itself is lost later.
    Finished { pod: String },
    /// A follower, after a loss: its children are stopped. Said after any `Done` of its own
    /// (one connection keeps its order), so once every member has said it (or is gone), the
    /// coordinator knows every success there was.
    Stopped,
    /// Coordinator: whether the job restarts, decided once, after every member stopped.
    Verdict { restart: bool },
}

/// A `Failed` frame's fields, as the wire has always carried them.
mod failed_frame {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::loss::{Kind, Loss};

    #[derive(Serialize, Deserialize)]
    struct Failed {
        reason: String,
        restartable: bool,
        #[serde(default)]
        hang: bool,
    }

    pub fn serialize<S: Serializer>(loss: &Loss, serializer: S) -> Result<S::Ok, S::Error> {
        Failed {
            reason: loss.reason.clone(),
            restartable: loss.restart,
            hang: loss.kind == Kind::Hang,
        }
        .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Loss, D::Error> {
        let failed = Failed::deserialize(deserializer)?;
        Ok(Loss {
            reason: failed.reason,
            restart: failed.restartable,
            kind: match failed.hang {
                true => Kind::Hang,
                false => Kind::Failure,
            },
        })
    }
}

fn unbounded() -> u32 {
    crate::verdict::UNBOUNDED_PREEMPTIONS
}

/// A launcher that does not say runs one trainer process per pod.
fn one() -> u32 {
    1
}

/// A reason that fits in a frame: at most `MAX_REASON` bytes once encoded (quotes, control
/// characters and non-ASCII letters take more bytes than characters). A frame the coordinator
/// refuses would lose what it says, such as "a restart would fail the same way".
pub fn cut(reason: &str) -> String {
    let mut cut: String = reason.chars().take(MAX_REASON).collect();
    while serde_json::to_string(&cut).map_or(0, |json| json.len()) > MAX_REASON {
        cut.pop();
    }
    cut
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("a frame of {0} bytes, more than {1}")]
    Oversized(usize, usize),
    #[error("a frame that fails authentication (wrong secret, altered, replayed or out of order)")]
    BadMac,
    #[error("a frame that is not a message: {0}")]
    Malformed(String),
    #[error("{0}")]
    Io(String),
    #[error("sent no heartbeat for {0} s")]
    Silent(u64),
    #[error("the connection was closed")]
    Closed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::Kind;

    /// The two heartbeats as a launcher from before their progress fields declared them.
    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "kind", rename_all = "lowercase")]
    enum Older {
        Beat,
        Progress {
            step: Option<u64>,
            quiet_ms: u64,
            #[serde(default)]
            behind: Option<u32>,
        },
    }

    /// A beat with a note or ranks, and a progress report with ranks, are still a beat and a
    /// progress report to a launcher from before them; an empty beat is the frame it was.
    #[test]
    fn an_older_launcher_reads_the_new_heartbeats_as_heartbeats() {
        let beat = Message::Beat {
            ranks: vec![(3, 120, Some(85)), (4, 119, None)],
            note: Some("straggler: rank 4".into()),
        };
        let json = serde_json::to_string(&beat).unwrap();
        assert_eq!(serde_json::from_str::<Older>(&json).unwrap(), Older::Beat);
        assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), beat);
        let progress = Message::Progress {
            step: Some(120),
            quiet_ms: 10,
            behind: None,
            ranks: vec![(3, 120, Some(85))],
        };
        let json = serde_json::to_string(&progress).unwrap();
        let older = Older::Progress {
            step: Some(120),
            quiet_ms: 10,
            behind: None,
        };
        assert_eq!(serde_json::from_str::<Older>(&json).unwrap(), older);
        assert_eq!(
            serde_json::to_string(&Message::beat()).unwrap(),
            r#"{"kind":"beat"}"#
        );
        // What an older follower sends, a newer coordinator reads.
        let old = r#"{"kind":"progress","step":7,"quiet_ms":3}"#;
        assert!(matches!(
            serde_json::from_str::<Message>(old).unwrap(),
            Message::Progress { step: Some(7), ranks, .. } if ranks.is_empty()
        ));
    }

    /// The largest progress report a heartbeat carries fits a frame.
    #[test]
    fn a_full_progress_report_fits_a_frame() {
        let ranks = vec![(u32::MAX, u64::MAX, Some(u64::MAX)); MAX_RANKS_PER_BEAT];
        let report = Message::Progress {
            step: Some(u64::MAX),
            quiet_ms: u64::MAX,
            behind: Some(u32::MAX),
            ranks,
        };
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.len() <= MAX_PAYLOAD, "{}", json.len());
    }

    /// A launcher's own end on the wire: `Failed` with its fields as every launcher reads them
    /// ("restartable", and "hang" for a hang), and back to the same end.
    #[test]
    fn a_failed_frame_says_a_hang_and_a_failure_apart() {
        for (kind, hang) in [(Kind::Hang, true), (Kind::Failure, false)] {
            let failed = Message::Failed(Loss {
                reason: "r".into(),
                restart: false,
                kind,
            });
            let json = serde_json::to_value(&failed).unwrap();
            assert_eq!(
                json,
                serde_json::json!({"kind": "failed", "reason": "r", "restartable": false, "hang": hang})
            );
            assert_eq!(serde_json::from_value::<Message>(json).unwrap(), failed);
        }
    }
}
