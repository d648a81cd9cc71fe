//! The job's count of restarts as a launcher carries it from one attempt to the next, and how
//! an attempt's end and the Job's record move it on.

use crate::peers::kubernetes::Recorded;

/// Where the job's count of restarts stands before an attempt, as this launcher knows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Count {
    /// The restart epoch the attempt would start (PADDLE_LAUNCHER_RESTART_COUNT).
    pub next_epoch: u32,
    /// How many of the restarts before were preemptions, which spend no budget.
    pub preemptions: u32,
    /// Of those, how many were an elastic job's grows (not bounded by --max-preemptions).
    pub grows: u32,
}

impl Count {
    /// The count after an attempt of restart epoch `epoch` (after the job's `preemptions`,
    /// `grows` of them, as agreed) that ends to restart: the next epoch; one more free restart
    /// when a preemption or a growth ended it (`preempted`), and one more grow when a growth
    /// did (`grown`, which counts only with `preempted`).
    pub(crate) fn after_attempt(
        (epoch, preemptions, grows): Recorded,
        preempted: bool,
        grown: bool,
    ) -> Count {
        Count {
            next_epoch: epoch.saturating_add(1),
            preemptions: preemptions.saturating_add(u32::from(preempted)),
            grows: grows.saturating_add(u32::from(preempted && grown)),
        }
    }

    /// The count with what the Job records (the epoch it last started, its preemptions, of
    /// them its grows): the next epoch is one more (the job was restarted whole since, or is
    /// being restarted in place now), no more preemptions than restarts, no more grows than
    /// preemptions.
    pub(crate) fn after_record(self, (epoch, preemptions, grows): Recorded) -> Count {
        let next_epoch = self.next_epoch.max(epoch.saturating_add(1));
        let preemptions = self.preemptions.max(preemptions).min(next_epoch);
        Count {
            next_epoch,
            preemptions,
            grows: self.grows.max(grows).min(preemptions),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After restarts the outcome says how many; a first run's says nothing of them.
    /// The count moves on after an attempt: a failure spends (no free restart more), a
    /// preemption is one more free restart, a growth one more free restart that is a grow (a
    /// grow flag without a free end counts nothing).
    #[test]
    fn the_count_after_an_attempt_counts_grows_among_the_free_restarts() {
        let count = |c: Count| (c.next_epoch, c.preemptions, c.grows);
        let rows = [
            ((false, false), (4, 2, 1)),
            ((true, false), (4, 3, 1)),
            ((true, true), (4, 3, 2)),
            ((false, true), (4, 2, 1)),
        ];
        for ((preempted, grown), expected) in rows {
            let after = Count::after_attempt((3, 2, 1), preempted, grown);
            assert_eq!(count(after), expected, "{preempted} {grown}");
        }
    }

    /// What the Job records moves a fresh count on: the next epoch one more than the one
    /// recorded, the most preemptions and grows either knows, no more grows than preemptions
    /// and no more preemptions than restarts (a record anyone may edit).
    #[test]
    fn the_count_goes_on_from_what_the_job_records() {
        let count = |c: Count| (c.next_epoch, c.preemptions, c.grows);
        let fresh = Count {
            next_epoch: 0,
            preemptions: 0,
            grows: 0,
        };
        assert_eq!(count(fresh.after_record((4, 2, 1))), (5, 2, 1));
        assert_eq!(count(fresh.after_record((4, 2, 9))), (5, 2, 2));
        assert_eq!(count(fresh.after_record((1, 9, 9))), (2, 2, 2));
        let known = Count {
            next_epoch: 7,
            preemptions: 3,
            grows: 2,
        };
        assert_eq!(count(known.after_record((4, 1, 0))), (7, 3, 2));
    }
}
