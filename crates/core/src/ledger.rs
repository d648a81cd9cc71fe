//! The job's restart accounting as one value: the restart epoch, the restarts failures may
//! spend, the free restarts taken (preemptions, and of them an elastic job's grows) and the
//! free preemptions allowed. Every layer carries this one type — a launcher between attempts,
//! its hello and the coordinator's `Go` on the wire, the coordinator's agreement, a follower's
//! judgement when the coordinator is gone, the attempt loop's verdict and the Job's record —
//! and the rules that move it are here, pure and table-tested.

use serde::{Deserialize, Serialize};

use crate::loss::Kind;
use crate::verdict::UNBOUNDED_PREEMPTIONS;

/// Where the job's restarts stand at an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// The restart epoch (PADDLE_LAUNCHER_RESTART_COUNT): of the attempt under way, or, between
    /// attempts, of the one the launcher would start next.
    pub epoch: u32,
    /// The restarts failures may spend (--max-restarts); agreed: the smallest any member has.
    pub max_restarts: u32,
    /// How many of the restarts before `epoch` were free: preemptions and grows.
    #[serde(default)]
    pub preemptions: u32,
    /// The free preemptions (--max-preemptions; `UNBOUNDED_PREEMPTIONS`: every one); agreed:
    /// the smallest any member has.
    #[serde(default = "unbounded")]
    pub max_preemptions: u32,
    /// Of `preemptions`, an elastic job's grows, which --max-preemptions does not bound.
    #[serde(default)]
    pub grows: u32,
}

/// What a Job records of its restarts: the epoch last started, the free restarts (preemptions,
/// at most one more than the epoch when one ended it), and of those the grows.
pub type Recorded = (u32, u32, u32);

fn unbounded() -> u32 {
    UNBOUNDED_PREEMPTIONS
}

impl Ledger {
    /// A job's first attempt with this budget: no free restart taken, every preemption free.
    pub fn first(max_restarts: u32) -> Ledger {
        Ledger {
            epoch: 0,
            max_restarts,
            preemptions: 0,
            max_preemptions: UNBOUNDED_PREEMPTIONS,
            grows: 0,
        }
    }

    /// What failures have spent of the budget: the restarts that were not free.
    pub fn spent(self) -> u32 {
        self.epoch.saturating_sub(self.preemptions)
    }

    /// Whether a preemption now restarts for free: only the first `max_preemptions` of a job
    /// are (grows are not among them).
    pub fn preemption_is_free(self) -> bool {
        crate::verdict::preemption_is_free(
            self.preemptions.saturating_sub(self.grows),
            self.max_preemptions,
        )
    }

    /// The job's ledger from the coordinator's own and every member's: the largest epoch, the
    /// smallest allowances, the most free restarts any knows of — a replaced pod knows of none,
    /// the survivors' count stands — but no more preemptions than restarts, nor grows than
    /// preemptions (a record anyone may edit).
    pub fn agree(self, others: impl IntoIterator<Item = Ledger>) -> Ledger {
        let most = others.into_iter().fold(self, |job, member| Ledger {
            epoch: job.epoch.max(member.epoch),
            max_restarts: job.max_restarts.min(member.max_restarts),
            preemptions: job.preemptions.max(member.preemptions),
            max_preemptions: job.max_preemptions.min(member.max_preemptions),
            grows: job.grows.max(member.grows),
        });
        let preemptions = most.preemptions.min(most.epoch);
        Ledger {
            preemptions,
            grows: most.grows.min(preemptions),
            ..most
        }
    }

    /// The ledger after an attempt of this kind of end restarts: the next epoch; one more free
    /// restart when a preemption or a growth ended it, and one more grow when a growth did.
    pub fn after_attempt(self, kind: Kind) -> Ledger {
        Ledger {
            epoch: self.epoch.saturating_add(1),
            preemptions: self.preemptions.saturating_add(u32::from(kind.is_free())),
            grows: self.grows.saturating_add(u32::from(kind == Kind::Growth)),
            ..self
        }
    }

    /// The ledger between attempts (`epoch`: the next) with what the Job records (the epoch it
    /// last started, its free restarts, of them its grows): the next epoch is one more (the job
    /// was restarted whole since, or is being restarted in place now), no more preemptions
    /// than restarts, no more grows than preemptions.
    pub fn after_record(self, (epoch, preemptions, grows): Recorded) -> Ledger {
        let next = self.epoch.max(epoch.saturating_add(1));
        let preemptions = self.preemptions.max(preemptions).min(next);
        Ledger {
            epoch: next,
            preemptions,
            grows: self.grows.max(grows).min(preemptions),
            ..self
        }
    }

    /// What the Job records of this ledger.
    pub fn recorded(self) -> Recorded {
        (self.epoch, self.preemptions, self.grows)
    }

    /// How the restart after this attempt is said in every launcher's restart line and the
    /// `Restarting` event: which restart, and what it spends.
    pub fn restart_said(self, kind: Kind) -> String {
        let next = self.epoch.saturating_add(1);
        let max = self.max_restarts;
        match kind {
            Kind::Growth => format!(
                "restart {next} with the pods that joined, which spends none of the {max} restarts"
            ),
            Kind::Preemption => format!(
                "restart {next} after a preemption, which spends none of the {max} restarts"
            ),
            Kind::Failure | Kind::Hang if self.preemptions == 0 => {
                format!("restart {next} of {max}")
            }
            Kind::Failure | Kind::Hang => format!(
                "restart {} of {max}, after {} that spent none",
                next - self.preemptions.min(self.epoch),
                self.free_restarts()
            ),
        }
    }

    /// The free restarts as a restart's line names them: "2 preemptions", "1 preemption and
    /// 1 grow", "3 grows".
    fn free_restarts(self) -> String {
        let grows = self.grows.min(self.preemptions);
        let said = [(self.preemptions - grows, "preemption"), (grows, "grow")];
        let parts: Vec<String> = said
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| crate::vocabulary::count(*n as usize, what))
            .collect();
        parts.join(" and ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(epoch: u32, preemptions: u32, grows: u32) -> Ledger {
        Ledger {
            epoch,
            preemptions,
            grows,
            ..Ledger::first(3)
        }
    }

    /// A restart moves the epoch on; a preemption or a growth adds a free restart, a growth a
    /// grow, a failure or a hang neither.
    #[test]
    fn the_ledger_after_an_attempt_counts_free_restarts_and_grows() {
        let table = [
            (Kind::Failure, ledger(3, 1, 0)),
            (Kind::Hang, ledger(3, 1, 0)),
            (Kind::Preemption, ledger(3, 2, 0)),
            (Kind::Growth, ledger(3, 2, 1)),
        ];
        for (kind, after) in table {
            assert_eq!(ledger(2, 1, 0).after_attempt(kind), after, "{kind:?}");
        }
        let top = ledger(u32::MAX, u32::MAX, u32::MAX).after_attempt(Kind::Growth);
        assert_eq!(
            (top.epoch, top.preemptions, top.grows),
            (u32::MAX, u32::MAX, u32::MAX)
        );
    }

    /// A Job's record moves the next epoch past the one it last started and raises the free
    /// restarts, never beyond the restarts nor the grows beyond the preemptions; an older
    /// record changes nothing.
    #[test]
    fn the_ledger_goes_on_from_what_the_job_records() {
        let table = [
            (ledger(0, 0, 0), (4, 2, 1), ledger(5, 2, 1)),
            (ledger(6, 3, 1), (4, 2, 0), ledger(6, 3, 1)),
            (ledger(0, 0, 0), (0, 9, 9), ledger(1, 1, 1)),
            (ledger(2, 0, 3), (0, 0, 0), ledger(2, 0, 0)),
        ];
        for (before, record, after) in table {
            assert_eq!(
                before.after_record(record),
                after,
                "{before:?} with {record:?}"
            );
        }
        assert_eq!(ledger(5, 2, 1).recorded(), (5, 2, 1));
    }

    /// The job agrees on the largest epoch and free restarts any member knows of and the
    /// smallest allowances any member has, whichever member says which.
    #[test]
    fn members_agree_on_the_most_restarts_and_the_smallest_allowances() {
        let a = Ledger {
            epoch: 4,
            max_restarts: 5,
            preemptions: 1,
            max_preemptions: UNBOUNDED_PREEMPTIONS,
            grows: 1,
        };
        let b = Ledger {
            epoch: 2,
            max_restarts: 3,
            preemptions: 2,
            max_preemptions: 1,
            grows: 0,
        };
        let agreed = Ledger {
            epoch: 4,
            max_restarts: 3,
            preemptions: 2,
            max_preemptions: 1,
            grows: 1,
        };
        assert_eq!(a.agree([b]), agreed);
        assert_eq!(b.agree([a]), agreed);
        assert_eq!(Ledger::first(9).agree([a, b]), agreed);
        // A replaced pod (epoch 0, nothing known) takes nothing from the survivors.
        assert_eq!(a.agree([Ledger::first(5)]), a);
        // Never more free restarts than restarts, nor grows than free restarts, even alone.
        let odd = Ledger {
            epoch: 1,
            preemptions: 4,
            grows: 4,
            ..Ledger::first(9)
        };
        let fixed = odd.agree([]);
        assert_eq!((fixed.preemptions, fixed.grows), (1, 1));
        let fewer = Ledger {
            preemptions: 0,
            ..odd
        };
        assert_eq!(fewer.agree([]).grows, 0);
    }

    /// Spent are the restarts that were not free; a preemption is free while the preemptions
    /// taken, grows apart, are fewer than the allowance.
    #[test]
    fn what_is_spent_and_whether_a_preemption_is_free() {
        assert_eq!(ledger(5, 2, 1).spent(), 3);
        assert_eq!(ledger(1, 3, 0).spent(), 0);
        let allowed = |preemptions, grows, max_preemptions| Ledger {
            max_preemptions,
            ..ledger(9, preemptions, grows)
        };
        assert!(allowed(0, 0, 1).preemption_is_free());
        assert!(!allowed(1, 0, 1).preemption_is_free());
        assert!(
            allowed(3, 3, 1).preemption_is_free(),
            "grows are not preemptions"
        );
        assert!(!allowed(0, 0, 0).preemption_is_free());
        assert!(allowed(7, 0, UNBOUNDED_PREEMPTIONS).preemption_is_free());
    }

    /// The restart line names the restart and what it spends, and the free ones before it.
    #[test]
    fn a_restart_says_what_it_spends() {
        let table = [
            (ledger(0, 0, 0), Kind::Failure, "restart 1 of 3"),
            (
                ledger(2, 2, 0),
                Kind::Failure,
                "restart 1 of 3, after 2 preemptions that spent none",
            ),
            (
                ledger(3, 2, 1),
                Kind::Failure,
                "restart 2 of 3, after 1 preemption and 1 grow that spent none",
            ),
            (
                ledger(2, 2, 2),
                Kind::Failure,
                "restart 1 of 3, after 2 grows that spent none",
            ),
            (
                ledger(1, 0, 0),
                Kind::Preemption,
                "restart 2 after a preemption, which spends none of the 3 restarts",
            ),
            (
                ledger(1, 0, 0),
                Kind::Growth,
                "restart 2 with the pods that joined, which spends none of the 3 restarts",
            ),
        ];
        for (ledger, kind, said) in table {
            assert_eq!(ledger.restart_said(kind), said, "{ledger:?}");
        }
    }
}
