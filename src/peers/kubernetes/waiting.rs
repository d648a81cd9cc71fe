//! Waiting for the job's pods: the watch read until every group is Running (or an elastic
//! job may start without some), with a timeout that does not run while the job is queued or
//! held by deleted pods, a line whenever what it waits for changes, and one every 30 s.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::{interval_at, sleep_until, Instant};
use tracing::{info, warn};

use super::*;
use crate::membership::Awaited;

/// Says what the wait is for, where, and how long it may take.
fn announce(
    server: &ApiServer,
    groups: &[Group],
    timeout: Option<Duration>,
    elastic: Option<Elastic>,
) {
    let wanted: Vec<String> = groups
        .iter()
        .map(|g| {
            format!(
                "{} {} matching `{}`",
                g.expected,
                group_name(g.kind),
                g.selector
            )
        })
        .collect();
    info!(
        "waiting for {} in namespace {} to be Running (API server {}, timeout: {})",
        wanted.join(" and "),
        server.namespace,
        server.url,
        timeout.map_or("none".to_string(), |t| format!("{} s", t.as_secs()))
    );
    if let Some(e) = elastic {
        info!(
            "elastic job (--min-pods {}): after {} s (--elastic-wait) it starts with the pods that are Running then, if at least {} are",
            e.min_pods,
            e.wait.as_secs(),
            e.min_pods
        );
    }
}

/// The wait's timeout, which does not run while the job is queued (every pod held by a
/// scheduling gate: Kueue) or held by deleted pods alone (their grace periods bound it): the
/// time spent so is added to it.
struct Deadline {
    at: Option<Instant>,
    /// Since when every pod of the job has been held by a scheduling gate.
    gated_since: Option<Instant>,
    /// Since when the job has been held by deleted pods alone.
    held_since: Option<Instant>,
}

impl Deadline {
    fn runs(&self) -> bool {
        self.at.is_some() && self.gated_since.is_none() && self.held_since.is_none()
    }

    /// Whether the job is held by deleted pods alone now.
    fn hold(&mut self, held: bool) {
        pause(&mut self.at, &mut self.held_since, held);
    }

    /// Whether every pod of the job is gated now; true when it has just become so.
    fn gate(&mut self, gated: bool) -> bool {
        let newly = gated && self.gated_since.is_none();
        pause(&mut self.at, &mut self.gated_since, gated);
        newly
    }
}

/// A deadline `at` paused `since` a moment while `paused`: moved on by the pause once over.
fn pause(at: &mut Option<Instant>, since: &mut Option<Instant>, paused: bool) {
    match (paused, *since) {
        (true, None) => *since = Some(Instant::now()),
        (false, Some(from)) => {
            *at = at.map(|deadline| deadline + from.elapsed());
            *since = None;
        }
        _ => {}
    }
}

/// What the waiting line adds for an elastic job with `ready` pods Running.
fn elastic_line(e: Elastic, ready: usize) -> String {
    format!(
        " | elastic (--min-pods {}): {ready} Running, {}",
        e.min_pods,
        if ready < e.min_pods as usize {
            format!(
                "fewer than {}: no pod trains until {} are",
                e.min_pods, e.min_pods
            )
        } else {
            format!(
                "it starts without the others {} s after the wait began",
                e.wait.as_secs()
            )
        }
    )
}

/// Waits until, in every group, exactly the expected number of live pods match and are Running
/// with an IP; returns each group's ready pods, and the watch for what happens next.
pub async fn wait_until_ready(
    server: &ApiServer,
    groups: &[Group],
    timeout: Option<Duration>,
    max_failed_trainers: Option<u32>,
    round: crate::peers::Round<'_>,
    elastic: Option<Elastic>,
) -> Result<(Vec<Vec<PodView>>, PodWatch), Error> {
    let mut watch = PodWatch::start(server, groups);
    let started = Instant::now();
    announce(server, groups, timeout, elastic);
    let mut wait = Wait {
        groups,
        max_failed_trainers,
        round,
        elastic,
        // When an elastic job may go on without the pods that are not Running: from the
        // gathering's start, so that a round after one whose hellos did not all come starts
        // at once.
        elastic_at: elastic.map(|e| round.since + e.wait),
        not_ready_at: elastic.map(|_| round.since + round.not_ready_after),
        started,
        deadline: Deadline {
            at: timeout.map(|t| started + t),
            gated_since: None,
            held_since: None,
        },
        status: format!(
            "no answer from the Kubernetes API server at {} yet",
            server.url
        ),
        judge_again: None,
        deletions: BTreeMap::new(),
        awaited: Awaited::default(),
    };
    let mut errors = Repeats::default();
    let mut last_error = String::from("no answer yet");
    let mut progress = interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut settled = false;
    let mut kept = KeptWait::new(server, round.keep_wait_on);
    loop {
        // What it waits for, said beyond the log (the board, the Job) whenever it changes.
        kept.tell(&wait.awaited, round.told);
        let (judge_again, elastic_at) = (wait.judge_again, wait.elastic_at);
        let not_ready_at = wait.not_ready_at;
        tokio::select! {
            change = watch.next_change() => {
                settled = matches!(change, Change::Settled);
                match change {
                    Change::Settled => {}
                    Change::Unsettled => continue,
                    Change::Error(e) => {
                        errors.warn(&format!(
                            "the Kubernetes API server at {} failed, retrying with backoff: {e}",
                            server.url
                        ));
                        wait.status = format!("last API error: {e}");
                        last_error = e;
                        continue;
                    }
                    Change::Refused(e) => return Err(e),
                }
            }
            // Judged again on a settled view only: not on a half-relisted one, nor while the
            // API fails.
            _ = async { sleep_until(judge_again.unwrap_or(started)).await }, if judge_again.is_some() && settled => {}
            _ = async { sleep_until(elastic_at.unwrap_or(started)).await }, if elastic_at.is_some_and(|at| Instant::now() < at) => {}
            _ = async { sleep_until(not_ready_at.unwrap_or(started)).await }, if not_ready_at.is_some_and(|at| Instant::now() < at) => {}
            _ = progress.tick() => {
                info!("still waiting after {} s: {}", started.elapsed().as_secs(), wait.status);
                kept.write(&wait.status);
                continue;
            }
            _ = async { sleep_until(wait.deadline.at.unwrap_or(started)).await }, if wait.deadline.runs() => {
                let waited_s = started.elapsed().as_secs();
                if !watch.answered {
                    return Err(Error::Unreachable { url: server.url.clone(), waited_s, last_error });
                }
                return Err(Error::PeersTimeout { waited_s, status: wait.status });
            }
        }
        if let Some(ready) = wait.look(&watch.views)? {
            // What the Job keeps says so: a follower that cannot reach the coordinator from now
            // on is not told that it still looks for the pods.
            kept.write(
                "it has found the pods it waited for: starting (an attempt, or a gathering round)",
            );
            return Ok((ready, watch));
        }
    }
}

/// What a named coordinator waits for, said on the board (`told`) when it changes and kept on
/// its Job for its followers (`WAITING_ANNOTATION`): written when it changes, at most every
/// `KEPT_EVERY_LEAST`, and again at every progress line (every 30 s) so that a follower can
/// tell a coordinator that still waits from one that is gone. The writes run on their own: a
/// slow API server never holds the wait back; a refusal is said once.
struct KeptWait {
    server: ApiServer,
    job: Option<String>,
    said: String,
    written: Option<Instant>,
    refused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The least time between two writes of what the coordinator waits for.
const KEPT_EVERY_LEAST: Duration = Duration::from_secs(10);

impl KeptWait {
    fn new(server: &ApiServer, job: Option<&str>) -> KeptWait {
        KeptWait {
            server: server.clone(),
            job: job.map(str::to_string),
            said: String::new(),
            written: None,
            refused: Default::default(),
        }
    }

    fn tell(&mut self, awaited: &Awaited, told: Option<&(dyn Fn(&Awaited) + Sync)>) {
        if awaited.line == self.said {
            return;
        }
        self.said = awaited.line.clone();
        if let Some(told) = told {
            told(awaited);
        }
        if self
            .written
            .is_none_or(|at| at.elapsed() >= KEPT_EVERY_LEAST)
        {
            self.write(&awaited.line);
        }
    }

    fn write(&mut self, line: &str) {
        let Some(job) = self.job.clone() else {
            return;
        };
        self.written = Some(Instant::now());
        let (server, line, refused) = (self.server.clone(), line.to_string(), self.refused.clone());
        tokio::spawn(async move {
            let write = super::annotate_waiting(&server, &job, &line);
            let why = match tokio::time::timeout(Duration::from_secs(10), write).await {
                Ok(Ok(())) => return,
                Ok(Err(why)) => why,
                Err(_) => "no answer in 10 s".to_string(),
            };
            if !refused.swap(true, std::sync::atomic::Ordering::Relaxed) {
                warn!("keeping what the job waits for on Job {job}: {why}; the other pods cannot say it (said once)");
            }
        });
    }
}

/// A wait for the job's pods, between two looks at the watch's view.
struct Wait<'a> {
    groups: &'a [Group],
    max_failed_trainers: Option<u32>,
    round: crate::peers::Round<'a>,
    elastic: Option<Elastic>,
    elastic_at: Option<Instant>,
    /// When an elastic job's gathering may judge a pod by its Ready condition.
    not_ready_at: Option<Instant>,
    started: Instant,
    deadline: Deadline,
    /// What it waits for, as last said.
    status: String,
    /// The same, with each pod awaited and why, for the board.
    awaited: Awaited,
    /// When a deleted pod the job waits for may no longer run: judged again then, with no
    /// event.
    judge_again: Option<Instant>,
    /// When this launcher first saw each deleted pod (`bound_deletions`).
    deletions: BTreeMap<String, i64>,
}

impl Wait<'_> {
    /// Judges the view: the pods to start with once ready, an error when the job cannot
    /// start, else None (what it waits for said when it changes).
    fn look(&mut self, views: &GroupViews) -> Result<Option<Vec<Vec<PodView>>>, Error> {
        let groups = self.groups;
        let mut pods: Vec<Vec<PodView>> =
            (0..groups.len()).map(|i| views.group(i).pods()).collect();
        if let Some(e) = self.elastic {
            let alive = self.round.alive_among(&pods);
            // Only by a coordinator that has run an attempt (a fresh one awaits every pod: one
            // may still be training the attempt before it), after its hello wait; until then
            // a pod it would leave out holds the start.
            let after_attempt = !self.round.members_before.is_empty();
            let judged = after_attempt && self.not_ready_at.is_some_and(|at| Instant::now() >= at);
            let awaiting = awaiting_judgement(&pods, &alive).filter(|_| after_attempt && !judged);
            if let Some(pod) = awaiting {
                let line = format!(
                    "{} is not Ready and its launcher was not heard since the attempt ended: the job starts without it only once the hello wait is over ({} s from the gathering's start), when a live launcher has stopped its trainers",
                    pod.name,
                    self.round.not_ready_after.as_secs()
                );
                let awaited = vec![(pod.name.clone(), "NotReady".to_string())];
                self.say(line, || awaited);
                return Ok(None);
            }
            leave_out(
                &mut pods,
                self.round.absent,
                &alive,
                e.min_pods as usize,
                judged,
            );
        }
        let now = seconds_since_epoch();
        let mut seen: Vec<PodView> = (0..groups.len())
            .flat_map(|i| views.group(i).all())
            .collect();
        bound_deletions(&mut seen, &mut self.deletions, now);
        let members_before = self.round.members_before;
        let verdict = judge(
            groups,
            &pods,
            self.max_failed_trainers,
            members_before,
            &seen,
            now,
        );
        if let Some((failed, max)) = verdict.too_many_failed {
            return Err(Error::TooManyFailures { failed, max });
        }
        // A restart decided as another pod finished (a crossing the channel could not undo in
        // time): it can never gather, so it ends now rather than at the timeout.
        if let Some(pod) = verdict.finished {
            return Err(Error::PeerLost {
                reason: format!("pod {pod} of the attempt that ended has Succeeded: the job cannot start again as a whole"),
                stopped: "nothing (no process had started)".into(),
            });
        }
        if let Some(ready) = verdict.ready() {
            info!(
                "all pods are Running after {:.1} s",
                self.started.elapsed().as_secs_f64()
            );
            return Ok(Some(ready));
        }
        if let Some(ready) = self.elastic_ready(&verdict, &pods) {
            return Ok(Some(vec![ready]));
        }
        self.judge_again = verdict
            .judge_again_at()
            .map(|at| Instant::now() + Duration::from_secs(u64::try_from(at - now).unwrap_or(0)));
        let held = !verdict.still_running.is_empty()
            && verdict
                .groups
                .iter()
                .all(|r| matches!(r, Readiness::Ready(_)));
        self.deadline.hold(held);
        if self.deadline.gate(all_gated(&pods)) {
            info!("every pod of the job is held by a scheduling gate: waiting for its admission, without a timeout");
        }
        let mut line = waiting_line(groups, &verdict);
        if let (Some(e), Readiness::Waiting(wait)) = (self.elastic, &verdict.groups[0]) {
            line.push_str(&elastic_line(e, wait.ready));
        }
        self.say(line, || awaited_pods(&verdict));
        Ok(None)
    }

    /// What the wait waits for, said in the log and kept for the board when it changes, with
    /// each pod awaited (`pods`, made only then).
    fn say(&mut self, line: String, pods: impl FnOnce() -> Vec<(String, String)>) {
        if line == self.status {
            return;
        }
        info!("waiting: {line}");
        self.awaited = Awaited {
            line: line.clone(),
            pods: pods(),
        };
        self.status = line;
    }

    /// An elastic job that may start without some pods: those it starts with, said.
    fn elastic_ready(&self, verdict: &Verdict, pods: &[Vec<PodView>]) -> Option<Vec<PodView>> {
        let e = self.elastic?;
        let expected = self.groups[0].expected as usize;
        let waited = self.elastic_at.is_some_and(|at| Instant::now() >= at);
        let min = e.min_pods as usize;
        let members_before = self.round.members_before;
        let ready = elastic_start(verdict, pods, expected, min, waited, members_before)?;
        let names: Vec<&str> = ready.iter().map(|p| p.name.as_str()).collect();
        let why = if waited {
            format!(
                "the others are not Running after the elastic wait of {} s",
                e.wait.as_secs()
            )
        } else {
            "every pod of the last attempt is back, with more".to_string()
        };
        info!(
            "elastic job: starting with {} of {expected} pods ({}) after {:.1} s: {why}",
            ready.len(),
            names.join(", "),
            self.started.elapsed().as_secs_f64()
        );
        Some(ready)
    }
}

/// Whether the job is queued: it has pods, and each live one is held by a scheduling gate.
pub(super) fn all_gated(groups: &[Vec<PodView>]) -> bool {
    let mut live = groups.iter().flatten().filter(|p| p.is_live()).peekable();
    live.peek().is_some() && live.all(|p| !p.gates.is_empty())
}

/// Each pod the groups that are not ready await, with one word of why: the reason Kubernetes
/// gives (`Unschedulable`, `ImagePullBackOff`, ...) or the pod's phase.
fn awaited_pods(verdict: &Verdict) -> Vec<(String, String)> {
    let waits = verdict
        .groups
        .iter()
        .filter_map(|readiness| match readiness {
            Readiness::Waiting(wait) => Some(wait),
            Readiness::Ready(_) => None,
        });
    let mut pods = Vec::new();
    for wait in waits {
        pods.extend(wait.not_ready.iter().map(|(name, phase, reason)| {
            let word = reason
                .as_deref()
                .and_then(|r| r.split([':', ' ']).next())
                .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()))
                .unwrap_or(phase.as_str());
            (name.clone(), word.to_string())
        }));
        // The pods being deleted it waits on too: their replacements come after them.
        let going = wait
            .going
            .iter()
            .map(|(name, _)| (name.clone(), "Terminating".into()));
        pods.extend(going);
    }
    pods
}

/// What the groups that are not ready wait for, in one line.
fn waiting_line(groups: &[Group], verdict: &Verdict) -> String {
    let mut waiting: Vec<String> = groups
        .iter()
        .zip(&verdict.groups)
        .filter_map(|(group, readiness)| match readiness {
            Readiness::Ready(_) => None,
            Readiness::Waiting(wait) if groups.len() == 1 => Some(wait.to_string()),
            Readiness::Waiting(wait) => Some(format!("{}: {wait}", group_name(group.kind))),
        })
        .collect();
    waiting.extend(verdict.held_by());
    waiting.join(" | ")
}
