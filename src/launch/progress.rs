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
    let silent = seen
        .now
        .saturating_duration_since(last.unwrap_or(seen.started));
    let running = seen.now.saturating_duration_since(seen.started);
    let file_in_use = by == "its progress file";
    let in_first_window = !file_in_use && running < limits.first_window;
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

/// How often the shell looks: a tenth of the shorter limit, within 100 ms..5 s, so that a hang
/// is found within about a tenth of its limit after it.
pub fn check_every(limits: Limits) -> Duration {
    (limits.timeout.min(limits.first_window) / 10)
        .clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// The signal that asks a Python trainer for every thread's stack. Not SIGABRT, which
/// faulthandler also dumps on: PaddlePaddle installs its own handler for the fatal signals and
/// prints only its C++ state. SIGUSR2 is left alone by Paddle, and SIGUSR1 is the usual
/// checkpoint signal.
pub const STACK_SIGNAL: i32 = nix::libc::SIGUSR2;

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
