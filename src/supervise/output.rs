//! The children's output: each line read (bounded), marked with its process, forwarded to the
//! pod's log, kept in a per-process log file when asked, and the termination message written.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use super::{open_log, LogItem, LOG_BACKLOG, LOG_BACKLOG_BYTES, MAX_LINE};

/// Where a child's stdout/stderr go.
#[derive(Debug, Clone)]
pub enum Output {
    /// Straight to the launcher's stdout/stderr.
    Inherit,
    /// Each line prefixed with `[label] ` on the launcher's stdout/stderr, and copied to a file.
    Prefixed { log: Option<PathBuf> },
}

/// Reads one line into `line` (false at the end), noting output as seen whenever bytes come, not
/// only at a newline: a progress bar redrawn with `\r` for a whole epoch is output too. A line
/// longer than `MAX_LINE` is passed on in pieces, so that neither memory nor the log waits.
pub(super) fn read_line_noting_output(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    seen: &OutputClock,
) -> bool {
    loop {
        let (used, complete) = match reader.fill_buf() {
            Ok([]) => return !line.is_empty(),
            Ok(bytes) => {
                seen.now();
                match bytes.iter().position(|&b| b == b'\n') {
                    Some(at) => {
                        line.extend_from_slice(&bytes[..=at]);
                        (at + 1, true)
                    }
                    None => {
                        line.extend_from_slice(bytes);
                        (bytes.len(), false)
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return !line.is_empty(),
        };
        reader.consume(used);
        if complete || line.len() >= MAX_LINE {
            return true;
        }
    }
}

/// When something was last seen, noted from any thread: a child's output (its pumps note it),
/// a change of its progress file; hang detection reads it.
#[derive(Clone)]
pub struct OutputClock {
    pub(super) epoch: std::time::Instant,
    /// Milliseconds after `epoch`; 0 for never.
    pub(super) at: Arc<AtomicU64>,
}

impl OutputClock {
    /// A clock that has seen nothing yet.
    pub fn new() -> OutputClock {
        OutputClock {
            epoch: std::time::Instant::now(),
            at: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Notes that it was seen now.
    pub fn now(&self) {
        // At least 1: 0 means never.
        let ms = self.epoch.elapsed().as_millis().max(1);
        self.at
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// When output was last seen; None: never.
    pub fn last(&self) -> Option<std::time::Instant> {
        match self.at.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.epoch + Duration::from_millis(ms)),
        }
    }
}

/// A child's log file, written by a thread of its own, shared by the child's stdout and stderr:
/// the file is often on a shared filesystem, and a stalled mount must hold up neither the
/// heartbeats (the runtime thread) nor the console (`kubectl logs`).
pub(super) struct LogFile {
    pub(super) items: Option<mpsc::SyncSender<LogItem>>,
    /// The bytes of the lines queued and not written yet.
    pub(super) queued_bytes: Arc<AtomicUsize>,
    /// Lines left out since the last gap was queued.
    pub(super) left_out: AtomicU64,
    /// Lines left out in all, for the writer's last word.
    pub(super) total_left_out: Arc<AtomicU64>,
    pub(super) label: String,
}

impl LogFile {
    /// None: no file. The writer's end is reported on `finished`.
    pub(super) fn start(path: Option<PathBuf>, label: &str, finished: mpsc::Sender<()>) -> LogFile {
        let total_left_out = Arc::new(AtomicU64::new(0));
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let items = path.map(|path| {
            let (items, queued) = mpsc::sync_channel::<LogItem>(LOG_BACKLOG);
            let (label, total) = (label.to_string(), total_left_out.clone());
            let bytes = queued_bytes.clone();
            std::thread::spawn(move || {
                let file = match open_log(&path) {
                    Ok(file) => file,
                    Err(e) => {
                        warn!("{label} output is not copied to {}: {e}", path.display());
                        return;
                    }
                };
                write_log(io::BufWriter::new(file), &queued, &bytes, &label);
                let total = total.load(Ordering::Relaxed);
                if total > 0 {
                    warn!("{label} output: {total} lines in all were left out of its log file");
                }
                let _ = finished.send(());
            });
            items
        });
        LogFile {
            items,
            queued_bytes,
            left_out: AtomicU64::new(0),
            total_left_out,
            label: label.to_string(),
        }
    }

    pub(super) fn write_all(&self, line: &[u8]) {
        let Some(items) = &self.items else {
            return;
        };
        if !queue_line(items, &self.queued_bytes, &self.left_out, line)
            && self.total_left_out.fetch_add(1, Ordering::Relaxed) == 0
        {
            warn!(
                "{} output is {LOG_BACKLOG} lines or {} MiB ahead of its log file (a stalled filesystem?): lines are left out of the file until it catches up, and the file says where",
                self.label,
                LOG_BACKLOG_BYTES >> 20
            );
        }
    }
}

/// Queues a line, after the gap of the lines left out before it; false when it is left out too
/// (the queue is full, in lines or in bytes).
pub(super) fn queue_line(
    items: &mpsc::SyncSender<LogItem>,
    bytes: &AtomicUsize,
    left_out: &AtomicU64,
    line: &[u8],
) -> bool {
    if bytes.load(Ordering::Relaxed) + line.len() > LOG_BACKLOG_BYTES {
        left_out.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let gap = left_out.swap(0, Ordering::Relaxed);
    if gap > 0 {
        if let Err(mpsc::TrySendError::Full(_)) = items.try_send(LogItem::Gap(gap)) {
            left_out.fetch_add(gap + 1, Ordering::Relaxed);
            return false;
        }
    }
    match items.try_send(LogItem::Line(line.to_vec())) {
        Err(mpsc::TrySendError::Full(_)) => {
            left_out.fetch_add(1, Ordering::Relaxed);
            false
        }
        _ => {
            bytes.fetch_add(line.len(), Ordering::Relaxed);
            true
        }
    }
}

/// Writes the queued lines, buffered and flushed whenever the queue is empty (one write per
/// burst, not per line, on a network filesystem), and a line where lines were left out.
pub(super) fn write_log(
    mut file: io::BufWriter<File>,
    queued: &mpsc::Receiver<LogItem>,
    bytes: &AtomicUsize,
    label: &str,
) {
    while let Ok(first) = queued.recv() {
        let mut next = Some(first);
        while let Some(item) = next {
            let _ = match item {
                LogItem::Line(line) => {
                    bytes.fetch_sub(line.len(), Ordering::Relaxed);
                    file.write_all(&line)
                }
                LogItem::Gap(lines) => writeln!(
                    file,
                    "[paddle-launcher: {lines} lines of {label} output left out here: this file fell behind]"
                ),
            };
            next = queued.try_recv().ok();
        }
        let _ = file.flush();
    }
}

/// Writes the one-line reason where Kubernetes reads the termination message. The file is
/// created by the kubelet; outside a pod it usually does not exist, and nothing is created.
pub fn write_termination_message(path: &Path, reason: &str) {
    let line = reason.lines().next().unwrap_or_default();
    match OpenOptions::new().write(true).truncate(true).open(path) {
        Ok(mut f) => {
            let _ = writeln!(f, "{line}");
        }
        Err(e) => debug!("no termination message written to {}: {e}", path.display()),
    }
}

/// An argv as one log line a user can read back: plain words as they are, any other argument
/// quoted with its newlines and quotes escaped (a multi-line `sh -c` script stays one line).
pub fn quoted(argv: &[String]) -> String {
    let plain = |a: &String| {
        !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    };
    argv.iter()
        .map(|a| {
            if plain(a) {
                a.clone()
            } else {
                format!("{a:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
