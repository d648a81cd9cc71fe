//! The hang watch: each trainer process's progress (its progress file's step, or its output)
//! followed, and a process with none within its limit named, with what it last did.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::control::Channel;
use crate::supervise::OutputClock;

use crate::progress;

/// The shell's side of hang detection for the pod's trainer processes: looks at each one's
/// last output and progress file's time every `check_every`, and asks the rule
/// (`progress::hung_by`).
pub(super) struct HangWatch {
    pub(super) processes: Vec<Watched>,
    pub(super) started: std::time::Instant,
    pub(super) limits: progress::Limits,
    pub(super) every: tokio::time::Interval,
    /// How much older a process that writes no step must be to be the one reported.
    pub(super) margin: Duration,
    /// How the processes are judged, and the pod's processes' name ("trainers 2-3") for a
    /// hang judged in lockstep, which is the pod's.
    pub(super) ranks: progress::Ranks,
    pub(super) pod_label: String,
}

/// One trainer process under watch.
pub(super) struct Watched {
    pub(super) local: usize,
    /// When it ended, in a lockstep pod (its siblings are judged from then); an ended
    /// process of a pod judged alone leaves the watch.
    pub(super) ended: Option<std::time::Instant>,
    /// Its trainer id, when the pod runs several.
    pub(super) trainer_id: Option<u32>,
    pub(super) output: OutputClock,
    pub(super) file: ProgressFileClock,
    pub(super) label: String,
}

/// When the progress file last changed, noted by a thread of its own: a stat that hangs on a
/// stalled network filesystem must not stop the launcher's only runtime thread (heartbeats,
/// signals), and counts as no progress. Any change of the file's time is progress, timed by
/// this machine's clock: the file server's clock may be ahead or behind.
pub(super) struct ProgressFileClock {
    pub(super) changed: OutputClock,
    /// The step its last change said (`progress::step_of`); `NO_STEP` when none.
    pub(super) step: Arc<AtomicU64>,
    /// How long that step computed, if the line said (`compute_ms=`); `NO_STEP` when not.
    pub(super) compute_ms: Arc<AtomicU64>,
    pub(super) stop: Arc<AtomicBool>,
}

pub(super) use crate::control::NO_STEP;

/// How much of the progress file's end is read for its step: a line, with room to spare.
pub(super) const STEP_READ: u64 = 4096;

impl ProgressFileClock {
    /// Starts looking, every `every`, from the file's time now (taken before the trainer
    /// starts, so that an earlier attempt's file is no progress).
    pub(super) fn start(path: PathBuf, every: Duration) -> ProgressFileClock {
        let changed = OutputClock::new();
        let step = Arc::new(AtomicU64::new(NO_STEP));
        let compute_ms = Arc::new(AtomicU64::new(NO_STEP));
        let stop = Arc::new(AtomicBool::new(false));
        let (clock, said, stopped) = (changed.clone(), step.clone(), stop.clone());
        let timed = compute_ms.clone();
        // Without a thread (the pod's process limit), the file is not watched: output still is.
        let looked = std::thread::Builder::new().spawn(move || {
            let time_of = || std::fs::metadata(&path).and_then(|m| m.modified()).ok();
            let mut last = time_of();
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(every);
                let now = time_of();
                if now.is_some() && now != last {
                    clock.now();
                    last = now;
                    // Read between the writer's truncation and its write, the file says
                    // nothing: the step it said before stands (a touch-only file, or one with
                    // no number, keeps none; its time alone is progress).
                    if let (Some(step), compute) = step_in(&path) {
                        said.store(step, Ordering::Relaxed);
                        timed.store(compute.unwrap_or(NO_STEP), Ordering::Relaxed);
                    }
                }
            }
        });
        if let Err(e) = looked {
            warn!("cannot watch the progress file ({e}): the trainer's output alone shows its progress");
        }
        ProgressFileClock {
            changed,
            step,
            compute_ms,
            stop,
        }
    }

    /// The step the file last said, if a number.
    pub(super) fn step(&self) -> Option<u64> {
        Some(self.step.load(Ordering::Relaxed)).filter(|s| *s != NO_STEP)
    }
}

/// The step at the end of the progress file: its last `STEP_READ` bytes are read, however
/// long the file has grown (a trainer may append a line a step).
pub(super) fn step_in(path: &std::path::Path) -> (Option<u64>, Option<u64>) {
    use std::io::{Read, Seek, SeekFrom};
    let tail = || -> Option<Vec<u8>> {
        let mut file = std::fs::File::open(path).ok()?;
        let length = file.metadata().ok()?.len();
        file.seek(SeekFrom::Start(length.saturating_sub(STEP_READ)))
            .ok()?;
        let mut tail = Vec::new();
        file.take(STEP_READ).read_to_end(&mut tail).ok()?;
        Some(tail)
    };
    tail().map_or((None, None), |t| {
        progress::measure_of(&String::from_utf8_lossy(&t))
    })
}

impl Drop for ProgressFileClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl HangWatch {
    pub(super) fn new(
        processes: Vec<Watched>,
        limits: progress::Limits,
        margin: Duration,
        ranks: progress::Ranks,
        pod_label: String,
    ) -> HangWatch {
        let mut every = tokio::time::interval(progress::check_every(limits));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        HangWatch {
            processes,
            started: std::time::Instant::now(),
            limits,
            every,
            margin,
            ranks,
            pod_label,
        }
    }

    /// A process ended: judged no more, nor reported; in lockstep its end stays the pod's
    /// progress (`progress::ended`).
    pub(super) fn ended(&mut self, local: usize) {
        match self.ranks {
            progress::Ranks::Alone => self.processes.retain(|p| p.local != local),
            progress::Ranks::Lockstep => {
                let now = std::time::Instant::now();
                for process in self.processes.iter_mut().filter(|p| p.local == local) {
                    process.ended.get_or_insert(now);
                }
            }
        }
    }

    /// The reason once a trainer process of `watch` is judged hung; never without one.
    pub(super) async fn next_hang_of(
        watch: Option<&mut HangWatch>,
        channel: Option<&Channel>,
    ) -> String {
        match watch {
            Some(watch) => watch.next_hang(channel).await,
            None => std::future::pending().await,
        }
    }

    /// Resolves with the reason once a trainer process is judged hung: the one whose progress
    /// is oldest is judged first. Each look is also reported to the job's channel (the pod's
    /// process furthest behind: its step and its last progress), whose coordinator names the
    /// rank a hang points at.
    pub(super) async fn next_hang(&mut self, channel: Option<&Channel>) -> String {
        loop {
            self.every.tick().await;
            let now = std::time::Instant::now();
            let looks: Vec<(progress::Observed, &Watched)> = self
                .processes
                .iter()
                .map(|process| {
                    // Output is no progress where the file alone counts: neither for the
                    // judgement nor for the progress reported to the job.
                    let output_counts = self.limits.output_counts;
                    let seen = progress::Observed {
                        started: self.started,
                        now,
                        last_output: process.output.last().filter(|_| output_counts),
                        file_written: process.file.changed.last(),
                    };
                    let seen = match process.ended {
                        Some(at) => progress::ended(seen, at, output_counts),
                        None => seen,
                    };
                    (seen, process)
                })
                .collect();
            let last =
                |seen: &progress::Observed| progress::last_progress(seen).0.unwrap_or(self.started);
            // The process furthest behind, reported whole (its own step, time and id), of
            // those still running.
            let running: Vec<&(progress::Observed, &Watched)> =
                looks.iter().filter(|(_, p)| p.ended.is_none()).collect();
            let marks: Vec<(Option<u64>, std::time::Instant)> = running
                .iter()
                .map(|(seen, p)| (p.file.step(), last(seen)))
                .collect();
            let behind = progress::furthest_behind(&marks, self.margin, self.ranks)
                .map(|(i, step)| (running[i], step));
            if let (Some(channel), Some(((seen, process), step))) = (channel, behind) {
                channel.report_progress(step, Instant::from_std(last(seen)), process.trainer_id);
            }
            let seen: Vec<progress::Observed> = looks.iter().map(|(seen, _)| *seen).collect();
            if let Some((i, mut hung)) = progress::judge_pod(self.limits, self.ranks, &seen) {
                // In lockstep the pod's processes were judged together: said of them all.
                // Those that ended (their part done) are not named: what is judged is the
                // others' silence since.
                let running: Vec<&Watched> = looks
                    .iter()
                    .map(|(_, p)| *p)
                    .filter(|p| p.ended.is_none())
                    .collect();
                let label = match (self.ranks, running.as_slice()) {
                    (progress::Ranks::Lockstep, [one]) if seen.len() > 1 => one.label.clone(),
                    (progress::Ranks::Lockstep, _) if seen.len() > 1 => {
                        hung.by = match hung.by {
                            "output" => "their output",
                            _ => "their progress files",
                        };
                        if running.len() == seen.len() || running.is_empty() {
                            self.pod_label.clone()
                        } else {
                            let ids: Vec<String> = running
                                .iter()
                                .map(|p| p.trainer_id.map_or(p.local as u32, |id| id).to_string())
                                .collect();
                            format!("trainers {}", ids.join(", "))
                        }
                    }
                    _ => looks[i].1.label.clone(),
                };
                return hung_reason(&label, &hung);
            }
        }
    }
}

/// "trainer-0 made no progress for 31 s (...)": the line a hang is reported with.
pub(super) fn hung_reason(label: &str, hung: &progress::Hung) -> String {
    use crate::config::{HANG_FIRST_WINDOW, HANG_PROGRESS, HANG_TIMEOUT};
    if hung.never {
        // Judged by the file alone only where output does not count.
        let nothing = match hung.by.contains("progress file") {
            true => format!(
                "no write to its progress file (output does not count: {HANG_PROGRESS} is file)"
            ),
            false => "no output, no write to its progress file".to_string(),
        };
        format!(
            "{label} made no progress in the {} s after its start ({HANG_FIRST_WINDOW}): {nothing}",
            hung.limit.as_secs()
        )
    } else {
        format!(
            "{label} made no progress for {} s ({HANG_TIMEOUT} = {} s): nothing new from {}",
            hung.silent.as_secs(),
            hung.limit.as_secs(),
            hung.by
        )
    }
}
