//! Whether a trainer still makes progress: the rule, with the clock and what was observed given
//! (the shell reads the trainer's last output and its progress file's time).
//!
//! Progress is the trainer's output, until it first writes its progress file: from then on only
//! the file counts, so that a program whose logging thread chatters while its training loop is
//! stuck is still judged by its loop. A file written before this trainer started (an earlier
//! attempt's) is no progress of this one.

use std::time::{Duration, Instant};

/// The limits: `first_window` from the start to the first progress, `timeout` after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout: Duration,
    pub first_window: Duration,
}

/// What the shell saw of one trainer.
#[derive(Debug, Clone, Copy)]
pub struct Observed {
    pub started: Instant,
    pub now: Instant,
    pub last_output: Option<Instant>,
    pub file_written: Option<Instant>,
}

/// A trainer judged hung: how long it has been silent, the limit it passed, and what counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hung {
    pub silent: Duration,
    pub limit: Duration,
    /// No progress at all since the start (the first window applied).
    pub never: bool,
    /// What progress was judged by: "output" or "its progress file".
    pub by: &'static str,
}

/// None while the trainer progresses.
pub fn judge(limits: Limits, seen: Observed) -> Option<Hung> {
    let since_start = |t: Option<Instant>| t.filter(|t| *t >= seen.started);
    let (last, by) = match since_start(seen.file_written) {
        Some(written) => (Some(written), "its progress file"),
        None => (since_start(seen.last_output), "output"),
    };
    let (from, limit) = match last {
        Some(last) => (last, limits.timeout),
        None => (seen.started, limits.first_window),
    };
    let silent = seen.now.saturating_duration_since(from);
    (silent >= limit).then_some(Hung {
        silent,
        limit,
        never: last.is_none(),
        by,
    })
}

/// How often the shell looks: a tenth of the shorter limit, within 100 ms..5 s, so that a hang
/// is found within about a tenth of its limit after it.
pub fn check_every(limits: Limits) -> Duration {
    (limits.timeout.min(limits.first_window) / 10)
        .clamp(Duration::from_millis(100), Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_output_until_the_file_is_written_then_the_file() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let limits = Limits {
            timeout: s(10),
            first_window: s(60),
        };
        let at = |now: u64, output: Option<u64>, file: Option<u64>| {
            judge(
                limits,
                Observed {
                    started: t0 + s(100),
                    now: t0 + s(now),
                    last_output: output.map(|o| t0 + s(o)),
                    file_written: file.map(|f| t0 + s(f)),
                },
            )
        };
        // The first window: nothing yet at 159 s is fine, at 160 s it is a hang.
        assert_eq!(at(159, None, None), None);
        let never = at(160, None, None).unwrap();
        assert!(never.never && never.limit == s(60) && never.by == "output");
        // A file of an earlier attempt (written at 50 s) is not this trainer's progress.
        assert!(at(160, None, Some(50)).is_some());
        // Output at 120 s: the timeout applies from there.
        assert_eq!(at(129, Some(120), None), None);
        let silent = at(130, Some(120), None).unwrap();
        assert_eq!((silent.silent, silent.never), (s(10), false));
        // Once the file is written, output no longer counts: chatter at 139 s does not save a
        // trainer whose file was last written at 125 s.
        let by_file = at(140, Some(139), Some(125)).unwrap();
        assert_eq!((by_file.by, by_file.silent), ("its progress file", s(15)));
        assert_eq!(at(134, Some(100), Some(125)), None);
    }

    #[test]
    fn the_check_is_a_tenth_of_the_shorter_limit_within_bounds() {
        let limits = |t, f| Limits {
            timeout: Duration::from_secs(t),
            first_window: Duration::from_secs(f),
        };
        assert_eq!(check_every(limits(30, 1800)), Duration::from_secs(3));
        assert_eq!(check_every(limits(1, 1)), Duration::from_millis(100));
        assert_eq!(check_every(limits(600, 1800)), Duration::from_secs(5));
    }
}
