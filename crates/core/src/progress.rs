//! Whether a trainer still makes progress: the rule, with the clock and what was observed given
//! (the shell reads the trainer's last output and its progress file's time).
//!
//! Progress is the trainer's output, until it first writes its progress file: from then on only
//! the file counts, so that a program whose logging thread chatters while its training loop is
//! stuck is still judged by its loop. A file written before this trainer started (an earlier
//! attempt's) is no progress of this one.
//!
//! The first window is for set-up (importing, reading data, NCCL's or gloo's init, waiting for
//! the other ranks), which often prints a line and then takes minutes: output does not end it,
//! only the first write of the progress file does. So a trainer is judged hung once it has been
//! silent for `timeout` and, until it has written its file, once the first window is over too.

use std::time::{Duration, Instant};

/// The limits: `first_window` from the start to the first progress, `timeout` after it; and
/// whether output counts as progress until the progress file is first written
/// (`--hang-progress output`), or the file alone counts from the start (`file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout: Duration,
    pub first_window: Duration,
    pub output_counts: bool,
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

/// The trainer's last progress since its start, if any, and what it was judged by: the
/// progress file once written, output until then.
pub fn last_progress(seen: &Observed) -> (Option<Instant>, &'static str) {
    let since_start = |t: Option<Instant>| t.filter(|t| *t >= seen.started);
    match since_start(seen.file_written) {
        Some(written) => (Some(written), "its progress file"),
        None => (since_start(seen.last_output), "output"),
    }
}

/// None while the trainer progresses.
pub fn hung_by(limits: Limits, seen: Observed) -> Option<Hung> {
    // `--hang-progress file`: output is no progress at all (a logging thread, a progress bar,
    // a data-loader worker's prints cannot hide a loop that is stuck).
    let seen = match limits.output_counts {
        true => seen,
        false => Observed {
            last_output: None,
            ..seen
        },
    };
    let (last, by) = match limits.output_counts {
        true => last_progress(&seen),
        false => (last_progress(&seen).0, "its progress file"),
    };
    let silent = seen
        .now
        .saturating_duration_since(last.unwrap_or(seen.started));
    let running = seen.now.saturating_duration_since(seen.started);
    // The first write of the file ends the first window; output never does.
    let file_written = seen.file_written.is_some_and(|t| t >= seen.started);
    let in_first_window = !file_written && running < limits.first_window;
    if in_first_window || silent < limits.timeout {
        return None;
    }
    Some(match last {
        Some(_) => Hung {
            silent,
            limit: limits.timeout,
            never: false,
            by,
        },
        // Judged once both limits have passed: the later one is what applied.
        None => Hung {
            silent,
            limit: limits.first_window.max(limits.timeout),
            never: true,
            by,
        },
    })
}

/// How a pod's trainer processes are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranks {
    /// Each by its own progress: ranks that do not wait for one another (a parameter-server
    /// trainer; a pod's one process).
    Alone,
    /// The pod by the progress of any of its processes: collective ranks move in lockstep (none
    /// passes a step's all-reduce before all reach it), and most programs print and number
    /// steps on local rank 0 alone (PaddleNLP; Paddle's own launcher shows only local rank 0's
    /// log), so a quiet rank shows nothing of a pod that trains.
    Lockstep,
}

/// Which of a pod's processes (`seen`, one each, all started together) is judged hung, if any,
/// under `ranks`: alone, the one silent longest; in lockstep, the pod is judged as one process
/// whose output is any of theirs and whose progress file is any of theirs (the first write of
/// any ends the pod's first window, and from then on the files alone count, as for one
/// process), and the one named is the one with the newest progress, whose silence is the pod's.
pub fn judge_pod(limits: Limits, ranks: Ranks, seen: &[Observed]) -> Option<(usize, Hung)> {
    match ranks {
        Ranks::Alone => seen
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, hung_by(limits, *s)?)))
            .max_by_key(|(_, hung)| hung.silent),
        Ranks::Lockstep => {
            let first = seen.first()?;
            let pod = Observed {
                last_output: seen.iter().filter_map(|s| s.last_output).max(),
                file_written: seen.iter().filter_map(|s| s.file_written).max(),
                ..*first
            };
            let newest = (0..seen.len()).max_by_key(|&i| last_progress(&seen[i]).0)?;
            Some((newest, hung_by(limits, pod)?))
        }
    }
}

/// A process of a lockstep pod that has ended (its part done), as the pod's judgement keeps it:
/// its end at `at` is its last progress, and nothing else of it counts, so that a sibling still
/// tearing down, or writing its own shard of a checkpoint, is judged from then by whatever
/// shows its own progress. Where output counts (`output_counts`) the end counts as output and
/// its progress file no more (counted as a file write, the end of the rank that numbered the
/// steps kept the pod judged by files alone: a sibling printing its teardown was judged hung);
/// where the file alone counts, as a write of it if it had written its file (else the pod had
/// no progress left at all, and a quiet sibling was judged hung from the attempt's start), and
/// as nothing if it had not (its end does not cut short its siblings' first window).
pub fn ended(seen: Observed, at: Instant, output_counts: bool) -> Observed {
    let wrote = seen.file_written.is_some_and(|t| t >= seen.started);
    match output_counts {
        true => Observed {
            last_output: Some(at),
            file_written: None,
            ..seen
        },
        false => Observed {
            last_output: None,
            file_written: wrote.then_some(at),
            ..seen
        },
    }
}

/// How often the shell looks: a tenth of the shorter limit, within 100 ms..5 s, so that a hang
/// is found within about a tenth of its limit after it.
pub fn check_every(limits: Limits) -> Duration {
    (limits.timeout.min(limits.first_window) / 10)
        .clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// The step a progress file says: the first word of its last non-empty line, when that is a
/// number ("1200", "1200 loss=0.3"); a touch, or any other text, says none. And, if its line
/// says it, how long that step computed (`1200 compute_ms=85`: `straggler::measure_of`).
pub fn measure_of(text: &str) -> (Option<u64>, Option<u64>) {
    let line = text.lines().rev().find(|line| !line.trim().is_empty());
    line.map_or((None, None), crate::straggler::measure_of)
}

/// One launcher's last report of its trainer's progress, as the coordinator has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastProgress {
    /// How the launcher names itself: "pod p-1 on node n7 (trainer id 1 of 3)".
    pub who: String,
    pub step: Option<u64>,
    /// How long since its last progress.
    pub quiet: Duration,
}

/// Of a pod's trainer processes, each with the step it last wrote (if a number) and the time
/// of its last progress, the one the pod reports and the step it reports: of those that write
/// steps, the lowest step, then the oldest progress, with its own step. A process that writes
/// no step (hung before its first, or local rank 0 alone numbering the steps) cannot be placed
/// among the steps. Alone, it is reported instead only when its progress is older than every
/// writer's by more than `margin` (as the coordinator's own age rule judges ranks), at the
/// writers' lowest step, which it has not passed. In lockstep never while a process writes
/// steps: a writer at step N shows that every rank of the job passed step N - 1's all-reduce,
/// the quiet one too, whose silence says only that it does not print. Its time is always its
/// own. When none writes steps, the oldest progress.
pub fn furthest_behind(
    marks: &[(Option<u64>, std::time::Instant)],
    margin: Duration,
    ranks: Ranks,
) -> Option<(usize, Option<u64>)> {
    let oldest_of = |steps: bool| {
        (0..marks.len())
            .filter(|&i| marks[i].0.is_some() == steps)
            .min_by_key(|&i| (marks[i].0, marks[i].1))
    };
    let oldest_writer = marks.iter().filter(|m| m.0.is_some()).map(|m| m.1).min();
    match (oldest_of(true), oldest_of(false), oldest_writer) {
        (Some(writer), Some(silent), Some(oldest))
            if ranks == Ranks::Alone && marks[silent].1 + margin < oldest =>
        {
            Some((silent, marks[writer].0))
        }
        (Some(writer), _, _) => Some((writer, marks[writer].0)),
        (None, silent, _) => silent.map(|i| (i, None)),
    }
}

/// Which rank a job-wide hang points at, said for the job's line. A rank blocked in a
/// collective waits for the one that never reached it: with step numbers written as a step
/// begins, that one is furthest behind. At equal steps (or none), the rank whose progress is
/// oldest, when it is older than the others' by more than `margin` (how stale a report may be);
/// otherwise no rank stands out, and the stacks in every pod's log tell.
pub fn suspect(reports: &[LastProgress], margin: Duration) -> String {
    let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let Some(lowest) = reports.iter().filter_map(|r| r.step).min() else {
        return by_age(reports, margin, secs);
    };
    let behind: Vec<&LastProgress> = reports.iter().filter(|r| r.step == Some(lowest)).collect();
    let ahead = reports.iter().filter(|r| r.step > Some(lowest)).count();
    if ahead == 0 {
        return by_age(reports, margin, secs);
    }
    let oldest = behind.iter().max_by_key(|r| r.quiet).expect("one at least");
    let others = match behind.len() {
        1 => String::new(),
        n => format!(", with {} more at that step", n - 1),
    };
    format!(
        "suspect {}: furthest behind, at step {lowest} ({} at later steps){others}, last progress {} ago",
        oldest.who,
        crate::vocabulary::count(ahead, "rank"),
        secs(oldest.quiet)
    )
}

fn by_age(reports: &[LastProgress], margin: Duration, secs: impl Fn(Duration) -> String) -> String {
    let mut by_quiet: Vec<&LastProgress> = reports.iter().collect();
    by_quiet.sort_by_key(|r| std::cmp::Reverse(r.quiet));
    match by_quiet.as_slice() {
        [] => "no rank reported its progress: compare the stacks in the pods' logs".to_string(),
        [oldest, next, ..] if oldest.quiet > next.quiet + margin => format!(
            "suspect {}: its last progress is the oldest, {} ago (the others' {} or less)",
            oldest.who,
            secs(oldest.quiet),
            secs(next.quiet)
        ),
        [only] if reports.len() == 1 => format!(
            "suspect {}: last progress {} ago",
            only.who,
            secs(only.quiet)
        ),
        _ => format!(
            "no rank is behind the others (the same step, last progress within {} of each other): compare the stacks in the pods' logs",
            secs(margin)
        ),
    }
}

/// The signal that asks a Python trainer for every thread's stack. Not SIGABRT, which
/// faulthandler also dumps on: PaddlePaddle installs its own handler for the fatal signals and
/// prints only its C++ state. SIGUSR2 is left alone by Paddle, and SIGUSR1 is the usual
/// checkpoint signal.
pub const STACK_SIGNAL: i32 = libc::SIGUSR2;

/// The directory, beside the progress file, whose `sitecustomize.py` the launcher puts first on
/// a Python trainer's `PYTHONPATH` when hang detection is on.
pub fn stack_dump_dir(progress_file: &std::path::Path) -> std::path::PathBuf {
    let dir = progress_file.parent().unwrap_or(std::path::Path::new("."));
    dir.join("paddle-launcher-python")
}

/// Python runs `sitecustomize` at start-up, before the program: it registers faulthandler to
/// write every thread's stack on `STACK_SIGNAL` (the program goes on), then runs the image's
/// own `sitecustomize`, which this one would otherwise hide. The program needs no change.
pub const SITECUSTOMIZE: &str = r##"# Written by paddle-launcher (--hang-timeout): on SIGUSR2, every thread's stack to stderr.
import sys
if not getattr(sys, "_paddle_launcher_site", False):
    sys._paddle_launcher_site = True
    try:
        import faulthandler, signal
        faulthandler.register(signal.SIGUSR2, all_threads=True)
    except Exception:
        pass
    finally:
        # The image's own sitecustomize, which this one hides; never another launcher's.
        import importlib.machinery, importlib.util, os
        _here = os.path.dirname(os.path.abspath(__file__))
        for _path in sys.path:
            if not isinstance(_path, str) or os.path.abspath(_path or ".") == _here:
                continue
            _spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [_path])
            if _spec is None or _spec.origin is None:
                continue
            try:
                with open(_spec.origin) as _f:
                    if _f.readline().startswith("# Written by paddle-launcher"):
                        continue
            except OSError:
                pass
            _module = importlib.util.module_from_spec(_spec)
            sys.modules["sitecustomize"] = _module
            _spec.loader.exec_module(_module)
            break
"##;

#[cfg(test)]
mod tests {

    /// The process reported for the pod is one process, whole: the lowest step, one that wrote
    /// none first, then the oldest progress (its time is its own, not another's).
    #[test]
    fn the_process_furthest_behind_is_the_lowest_step_then_the_oldest() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let margin = Duration::from_secs(5);
        let behind = |marks: &[(Option<u64>, u64)]| {
            let marks: Vec<_> = marks.iter().map(|(step, s)| (*step, at(*s))).collect();
            furthest_behind(&marks, margin, Ranks::Alone)
        };
        assert_eq!(behind(&[]), None);
        assert_eq!(
            behind(&[(Some(19), 5), (Some(3), 9), (Some(3), 1)]),
            Some((2, Some(3)))
        );
        // Hung before its first step, older than every writer by more than the margin:
        // reported, at their lowest step.
        assert_eq!(
            behind(&[(Some(19), 20), (None, 1), (Some(3), 30)]),
            Some((1, Some(3)))
        );
        // Not by more than the margin (a rank that prints now and then while rank 0 numbers
        // the steps): the writer, whole.
        assert_eq!(
            behind(&[(Some(19), 20), (None, 16), (Some(3), 30)]),
            Some((2, Some(3)))
        );
        // A writer stuck longer than a process that writes no steps: the writer, whole.
        assert_eq!(behind(&[(Some(9), 60), (None, 69)]), Some((0, Some(9))));
        assert_eq!(behind(&[(None, 5), (None, 2)]), Some((1, None)));
    }

    use super::*;

    /// In lockstep a quiet local rank (it neither prints nor writes steps: only local rank 0
    /// does) is no hang while its pod trains; alone it is one after its first window.
    #[test]
    fn a_lockstep_pod_is_hung_only_when_every_process_is() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let limits = Limits {
            timeout: s(3),
            first_window: s(3),
            output_counts: true,
        };
        let seen = |now: u64, file: Option<u64>| Observed {
            started: t0,
            now: t0 + s(now),
            last_output: None,
            file_written: file.map(|f| t0 + s(f)),
        };
        // Local rank 0 writes its steps, local rank 1 is quiet.
        let pod = |now: u64, file: u64| [seen(now, Some(file)), seen(now, None)];
        assert_eq!(judge_pod(limits, Ranks::Lockstep, &pod(6, 5)), None);
        assert_eq!(judge_pod(limits, Ranks::Lockstep, &pod(600, 599)), None);
        let alone = judge_pod(limits, Ranks::Alone, &pod(6, 5)).unwrap();
        assert_eq!((alone.0, alone.1.never), (1, true));
        // Both silent: the pod's silence is its newest progress's (rank 0's, 4 s).
        let both = judge_pod(limits, Ranks::Lockstep, &pod(9, 5)).unwrap();
        assert_eq!((both.0, both.1.silent, both.1.never), (0, s(4), false));
        // Alone, the one silent longest.
        let longest = judge_pod(limits, Ranks::Alone, &pod(9, 5)).unwrap();
        assert_eq!((longest.0, longest.1.silent), (1, s(9)));
        assert_eq!(judge_pod(limits, Ranks::Lockstep, &[]), None);
        // Rank 0's first step ends the pod's first window: the quiet rank's own does not
        // delay the pod's judgement.
        let long_first = Limits {
            first_window: s(60),
            ..limits
        };
        let judged = judge_pod(long_first, Ranks::Lockstep, &pod(10, 5)).unwrap();
        assert_eq!((judged.0, judged.1.silent), (0, s(5)));
        // A chatty rank does not hide a loop stuck since its last write (files alone count).
        let chatty = [
            seen(10, Some(5)),
            Observed {
                last_output: Some(t0 + s(9)),
                ..seen(10, None)
            },
        ];
        assert!(judge_pod(limits, Ranks::Lockstep, &chatty).is_some());
        // The writer ended at 9 s (its part done): the quiet rank, still at its teardown, is
        // judged from then (a hang only once it has been silent for the timeout after it).
        let writer_ended = [ended(seen(10, Some(5)), t0 + s(9), true), seen(10, None)];
        assert_eq!(judge_pod(limits, Ranks::Lockstep, &writer_ended), None);
        let later = [ended(seen(12, Some(5)), t0 + s(9), true), seen(12, None)];
        assert_eq!(
            judge_pod(limits, Ranks::Lockstep, &later).unwrap().1.silent,
            s(3)
        );
        // The writer's end leaves its steps behind: a sibling that prints on (its teardown)
        // is judged by its output from then, not by a progress file nobody writes any more.
        let printing = Observed {
            last_output: Some(t0 + s(14)),
            ..seen(16, None)
        };
        let teardown = [ended(seen(16, Some(5)), t0 + s(9), true), printing];
        assert_eq!(judge_pod(limits, Ranks::Lockstep, &teardown), None);
        // A process that only printed ends as output.
        let printed = ended(seen(10, None), t0 + s(8), true);
        assert_eq!(
            (printed.last_output, printed.file_written),
            (Some(t0 + s(8)), None)
        );
    }

    /// In lockstep a process that writes no steps is never reported ahead of a writer, however
    /// old its progress: a writer at step N shows that it passed step N - 1 too.
    #[test]
    fn in_lockstep_the_writer_furthest_behind_is_reported() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let margin = Duration::from_secs(5);
        let marks = [(Some(19), at(20)), (None, at(1)), (Some(3), at(30))];
        assert_eq!(
            furthest_behind(&marks, margin, Ranks::Lockstep),
            Some((2, Some(3)))
        );
        assert_eq!(
            furthest_behind(&marks, margin, Ranks::Alone),
            Some((1, Some(3)))
        );
        let quiet = [(None, at(5)), (None, at(2))];
        assert_eq!(
            furthest_behind(&quiet, margin, Ranks::Lockstep),
            Some((1, None))
        );
    }

    /// `--hang-progress file` (issue 51, defect 3): output is no progress, ever. A lockstep pod
    /// whose local rank 0 prints from a logger thread while its training loop (and every
    /// other rank, stuck in a collective) writes no step is judged hung by the timeout after
    /// the last step; with output counting, the chatter hid it until the program wrote its
    /// first step, and for ever in a program that writes none.
    #[test]
    fn with_the_file_alone_output_hides_no_hang() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let limits = |output_counts| Limits {
            timeout: s(5),
            first_window: s(30),
            output_counts,
        };
        let seen = |output: Option<u64>, file: Option<u64>| Observed {
            started: t0,
            now: t0 + s(40),
            last_output: output.map(|o| t0 + s(o)),
            file_written: file.map(|f| t0 + s(f)),
        };
        // A logger thread printing at 39 s, no step ever written: hidden when output counts.
        let chatty = [seen(Some(39), None), seen(None, None)];
        assert_eq!(judge_pod(limits(true), Ranks::Lockstep, &chatty), None);
        let judged = judge_pod(limits(false), Ranks::Lockstep, &chatty).unwrap();
        assert!(
            judged.1.never && judged.1.by == "its progress file",
            "{judged:?}"
        );
        // Steps written until 20 s, then only the logger: the file alone says 20 s of silence.
        let stuck = [seen(Some(39), Some(20)), seen(None, None)];
        let judged = judge_pod(limits(false), Ranks::Lockstep, &stuck).unwrap();
        assert_eq!((judged.1.silent, judged.1.never), (s(20), false));
        // A pod that writes its steps is healthy either way; quiet ranks stay healthy, whichever
        // local rank writes them.
        let training = [seen(None, Some(38)), seen(None, None)];
        assert_eq!(judge_pod(limits(false), Ranks::Lockstep, &training), None);
        let by_rank_1 = [seen(None, None), seen(None, Some(38))];
        assert_eq!(judge_pod(limits(false), Ranks::Lockstep, &by_rank_1), None);
        // The step writer ends (its part done) at 7,199 s: its quiet sibling is judged from
        // then, not from the attempt's start (the review's case: hung at once).
        let late = |now: u64| Observed {
            now: t0 + s(now),
            ..seen(None, None)
        };
        let writer_done = ended(seen(Some(1), Some(7198)), t0 + s(7199), false);
        let pod = [
            Observed {
                now: t0 + s(7200),
                ..writer_done
            },
            late(7200),
        ];
        assert_eq!(judge_pod(limits(false), Ranks::Lockstep, &pod), None);
        let pod = [
            Observed {
                now: t0 + s(7205),
                ..writer_done
            },
            late(7205),
        ];
        assert_eq!(
            judge_pod(limits(false), Ranks::Lockstep, &pod)
                .unwrap()
                .1
                .silent,
            s(6)
        );
        // A rank that ends before any step was written does not end its siblings' first window.
        let early = ended(seen(None, None), t0 + s(3), false);
        let pod = [
            Observed {
                now: t0 + s(20),
                ..early
            },
            Observed {
                now: t0 + s(20),
                ..seen(None, None)
            },
        ];
        assert_eq!(judge_pod(limits(false), Ranks::Lockstep, &pod), None);
        // Before its first window is over, nothing is judged.
        let early = Observed {
            now: t0 + s(29),
            ..seen(Some(1), None)
        };
        assert_eq!(hung_by(limits(false), early), None);
    }

    #[test]
    fn progress_is_output_until_the_file_is_written_then_the_file() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let limits = Limits {
            timeout: s(10),
            first_window: s(60),
            output_counts: true,
        };
        let at = |now: u64, output: Option<u64>, file: Option<u64>| {
            hung_by(
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
        // Output does not end the first window: a line at 101 s, then set-up in silence, is
        // not judged before 160 s; after it, silence since the last line counts.
        assert_eq!(at(130, Some(101), None), None);
        assert_eq!(at(159, Some(101), None), None);
        let silent = at(160, Some(101), None).unwrap();
        assert_eq!(
            (silent.silent, silent.never, silent.limit),
            (s(59), false, s(10))
        );
        assert_eq!(at(175, Some(170), None), None);
        assert_eq!(at(180, Some(170), None).unwrap().silent, s(10));
        // The first write of the file ends the first window: from then on the timeout from the
        // file's last write, and output no longer counts (chatter at 139 s does not save a
        // trainer whose file was last written at 125 s).
        assert_eq!(at(134, Some(100), Some(125)), None);
        let by_file = at(140, Some(139), Some(125)).unwrap();
        assert_eq!((by_file.by, by_file.silent), ("its progress file", s(15)));
    }

    #[test]
    fn a_step_is_the_first_word_of_the_last_line_when_a_number() {
        assert_eq!(measure_of("1200\n").0, Some(1200));
        assert_eq!(measure_of("1\n2 loss=0.3\n\n").0, Some(2));
        assert_eq!(measure_of("").0, None);
        assert_eq!(measure_of("epoch 3\n").0, None);
        assert_eq!(measure_of("-4\n").0, None);
    }

    #[test]
    fn the_suspect_is_the_rank_furthest_behind_then_the_oldest_if_it_stands_out() {
        let s = Duration::from_secs;
        let report = |who: &str, step: Option<u64>, quiet: u64| LastProgress {
            who: format!("pod {who}"),
            step,
            quiet: s(quiet),
        };
        let margin = s(2);
        // Steps written as a step begins: the rank that never began step 10 is behind, even
        // though the others went quiet later (blocked in step 10's all-reduce).
        let said = suspect(
            &[
                report("j-0", Some(10), 30),
                report("j-1", Some(9), 31),
                report("j-2", Some(10), 30),
            ],
            margin,
        );
        assert_eq!(
            said,
            "suspect pod j-1: furthest behind, at step 9 (2 ranks at later steps), last progress 31.0 s ago"
        );
        // Equal steps: the oldest, only when it stands out by more than the margin.
        let equal = [report("j-0", Some(10), 30), report("j-1", Some(10), 40)];
        assert!(suspect(&equal, margin).starts_with("suspect pod j-1: its last progress is the oldest, 40.0 s ago (the others' 30.0 s or less)"));
        let close = [report("j-0", None, 30), report("j-1", None, 31)];
        assert!(suspect(&close, margin).starts_with("no rank is behind the others"));
        assert!(suspect(&[], margin).starts_with("no rank reported"));
        // Two behind: the older of them, and how many share its step.
        let two = [
            report("j-0", Some(8), 5),
            report("j-1", Some(8), 9),
            report("j-2", Some(12), 1),
        ];
        assert!(suspect(&two, margin).starts_with(
            "suspect pod j-1: furthest behind, at step 8 (1 rank at later steps), with 1 more at that step"
        ));
    }

    #[test]
    fn the_check_is_a_tenth_of_the_shorter_limit_within_bounds() {
        let limits = |t, f| Limits {
            timeout: Duration::from_secs(t),
            first_window: Duration::from_secs(f),
            output_counts: true,
        };
        assert_eq!(check_every(limits(30, 1800)), Duration::from_secs(3));
        assert_eq!(check_every(limits(1, 1)), Duration::from_millis(100));
        assert_eq!(check_every(limits(600, 1800)), Duration::from_secs(5));
    }
}
