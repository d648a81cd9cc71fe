//! Whether the job may start again after an attempt ended: one rule, used by the coordinator
//! when it tells everyone of a loss, by each launcher when its attempt ends, and by the launch
//! loop when it decides whether to wait for the coordinator's word. Pure: the table below is
//! the whole of it.

/// What is known about the job when an attempt ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// The restarts failures have spent so far: the restart epoch that ended (0: the first
    /// start) less the job's preemptions, which spend nothing.
    pub spent: u32,
    /// The job's restart budget (`--max-restarts`, the smallest any launcher was given).
    pub max_restarts: u32,
    /// A member's trainer succeeded: that pod will not rejoin, so the job cannot start again as
    /// a whole.
    pub member_finished: bool,
    /// False when a restart would end the same way (a command that cannot start).
    pub restartable: bool,
    /// The attempt ended because a pod was preempted (its launcher was told to stop while its
    /// trainer ran, and the job checkpointed): not a failure, so it spends no restart.
    pub preempted: bool,
}

/// `--max-preemptions` when none is given: every preemption is free.
pub const UNBOUNDED_PREEMPTIONS: u32 = u32::MAX;

/// Whether a preemption, after `preemptions` free ones, spends no restart: only the first
/// `max_preemptions` of a job are free (a pod evicted for its own disk or memory use gets the
/// same SIGTERM as a preempted one, and would otherwise restart for ever); a later one is a
/// failure like any other.
pub fn preemption_is_free(preemptions: u32, max_preemptions: u32) -> bool {
    preemptions < max_preemptions
}

/// How a number of free preemptions reads in a line.
pub fn describe_max_preemptions(max_preemptions: u32) -> String {
    match max_preemptions {
        UNBOUNDED_PREEMPTIONS => "no bound".to_string(),
        n => n.to_string(),
    }
}

/// Why the job does not start again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRestart {
    /// No restarts were asked for: the first failure ends every pod, as without a channel.
    NoneAsked,
    /// Every restart of the budget has been used.
    Spent { max_restarts: u32 },
    /// A member's trainer has succeeded.
    MemberFinished,
    /// A restart would fail the same way.
    WouldRecur,
    /// The coordinator said the loss is final (for one of the two reasons above), and this
    /// launcher does not know which.
    ToldFinal,
}

impl NoRestart {
    /// What a pod's last line adds to the failure's own reason.
    pub fn describe(self) -> String {
        match self {
            NoRestart::NoneAsked => "no restarts were asked for".to_string(),
            NoRestart::Spent { max_restarts } => format!(
                "no restart left (all {max_restarts} of PADDLE_LAUNCHER_MAX_RESTARTS used)"
            ),
            NoRestart::MemberFinished => {
                "no restart: a pod of the job has already finished".to_string()
            }
            NoRestart::WouldRecur => {
                "no restart: the failure would recur (a command that cannot start)".to_string()
            }
            NoRestart::ToldFinal => "no restart: a pod of the job has already finished, or failed in a way a restart would repeat".to_string(),
        }
    }
}

/// The verdict on an attempt that ended in a failure or a preemption: Ok to restart, or why
/// not. The order matters only for the words: no budget is named before a finished member.
pub fn verdict(standing: &Standing) -> Result<(), NoRestart> {
    let Standing {
        spent,
        max_restarts,
        member_finished,
        restartable,
        preempted,
    } = *standing;
    if max_restarts == 0 && !preempted {
        Err(NoRestart::NoneAsked)
    } else if spent >= max_restarts && !preempted {
        Err(NoRestart::Spent { max_restarts })
    } else if member_finished {
        Err(NoRestart::MemberFinished)
    } else if !restartable {
        Err(NoRestart::WouldRecur)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole rule, one row per case.
    #[test]
    fn the_verdict_table() {
        use NoRestart::*;
        type Row = (u32, u32, bool, bool, bool, Result<(), NoRestart>);
        let rows: [Row; 15] = [
            // spent, budget, a member finished, restartable, preempted -> verdict
            (0, 0, false, true, false, Err(NoneAsked)),
            (0, 0, true, false, false, Err(NoneAsked)),
            (0, 1, false, true, false, Ok(())),
            (1, 1, false, true, false, Err(Spent { max_restarts: 1 })),
            // A batch system's attempt may start the count beyond the budget.
            (5, 3, false, true, false, Err(Spent { max_restarts: 3 })),
            (1, 3, false, true, false, Ok(())),
            (1, 3, true, true, false, Err(MemberFinished)),
            (1, 3, false, false, false, Err(WouldRecur)),
            (3, 3, true, false, false, Err(Spent { max_restarts: 3 })),
            // A preemption is no failure: it restarts without a budget, or with it spent...
            (0, 0, false, true, true, Ok(())),
            (4, 2, false, true, true, Ok(())),
            // ... but not a job a member of which has finished, nor one that would fail again.
            (0, 0, true, true, true, Err(MemberFinished)),
            (0, 3, false, false, true, Err(WouldRecur)),
            (9, 3, true, false, true, Err(MemberFinished)),
            (0, 3, false, true, true, Ok(())),
        ];
        for (spent, max_restarts, member_finished, restartable, preempted, expected) in rows {
            let standing = Standing {
                spent,
                max_restarts,
                member_finished,
                restartable,
                preempted,
            };
            assert_eq!(verdict(&standing), expected, "{standing:?}");
        }
    }

    #[test]
    fn each_reason_reads_as_the_pods_last_line_says_it() {
        assert_eq!(
            NoRestart::Spent { max_restarts: 2 }.describe(),
            "no restart left (all 2 of PADDLE_LAUNCHER_MAX_RESTARTS used)"
        );
        assert!(NoRestart::ToldFinal
            .describe()
            .starts_with(&NoRestart::MemberFinished.describe()));
    }
}
