//! Pods -> live members -> ranks. Pure: the same input gives the same ranks on every pod.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use crate::config::{Config, Group, GroupKind, Ranking};
use crate::error::MembershipError;

use crate::vocabulary::Protocol;

/// A pod's `status.phase`. Anything the launcher does not know is `Unknown`, which is neither
/// ready nor finished: such a pod keeps the job waiting rather than being counted wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }

    /// Done for good: the pod will not run again.
    pub fn is_finished(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

impl From<&str> for PodPhase {
    fn from(text: &str) -> Self {
        match text {
            "Pending" => PodPhase::Pending,
            "Running" => PodPhase::Running,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            _ => PodPhase::Unknown,
        }
    }
}

impl fmt::Display for PodPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the launcher needs to know of one pod, whatever the discovery backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub ip: Option<IpAddr>,
    pub phase: PodPhase,
    /// metadata.deletionTimestamp is set: the pod is going away.
    pub terminating: bool,
    /// Its place in rank order as the batch system wrote it (major first): the Indexed-Job
    /// completion index, JobSet's (global job index, completion index), Volcano's task index...
    pub index: Option<Vec<u64>>,
    /// The attempt of the job it was created for (JobSet restart-attempt, Volcano job-version).
    pub attempt: Option<u64>,
    /// metadata.creationTimestamp, in seconds since the epoch.
    pub created: Option<i64>,
    /// Why a pod is not Running yet, e.g. "Unschedulable: 0/3 nodes are available: ...".
    pub waiting_reason: Option<String>,
    /// The scheduling gates holding it (Kueue's `kueue.x-k8s.io/admission`, topology gates):
    /// not scheduled until a queue admits the job.
    pub gates: Vec<String>,
    /// How its failed container ended (status, OOMKilled, termination message), if it has.
    pub ended: Option<String>,
    /// Its spec's terminationGracePeriodSeconds.
    pub grace_period: Option<u64>,
    /// metadata.deletionTimestamp, in seconds since the epoch by the API server's clock: by
    /// then the kubelet has killed what still runs in the deleted pod (a trainer in its
    /// preemption window, say). See `bound_deletions` for this node's own bound.
    pub stops_by: Option<i64>,
    /// metadata.deletionGracePeriodSeconds: the grace the deletion gave it.
    pub deletion_grace: Option<u64>,
    /// Its Ready condition is there and not True: the node lifecycle controller sets it False
    /// on every pod of a node whose kubelet stopped reporting, after the node monitor grace
    /// period, and leaves the phase Running (a completed sidecar or a failing readiness probe
    /// does too). Only an elastic job leaves such a pod out (`leave_out`).
    pub not_ready: bool,
    /// Left out of an elastic job's next epoch though Running (`leave_out`).
    pub left_out: bool,
    /// spec.nodeName: the node it was scheduled to.
    pub node: Option<String>,
}

impl PodView {
    /// A pod that is, or may still become, part of the job.
    pub fn is_live(&self) -> bool {
        !self.terminating && !self.phase.is_finished()
    }

    pub fn is_ready(&self) -> bool {
        self.is_live() && self.phase == PodPhase::Running && self.ip.is_some() && !self.left_out
    }

    /// Until when a deleted pod whose containers have not ended may still run them (`now` and
    /// the answer in seconds since the epoch), if it may now.
    pub fn may_still_run(&self, now: i64) -> Option<i64> {
        let until = self.stops_by?.saturating_add(KILL_SLACK_S);
        (self.terminating && !self.phase.is_finished() && now < until).then_some(until)
    }
}

/// How long past its deletionTimestamp a deleted pod is still taken to run: the kubelet counts
/// the grace period from when it saw the deletion, a moment after the API server stamped it
/// (which truncates it to the second).
pub const KILL_SLACK_S: i64 = 5;

/// The longest grace a deletion is taken to give (as `--pod-grace-period` allows: a week).
const LONGEST_GRACE_S: i64 = 7 * 24 * 3600;

/// Each deleted pod's end by this node's clock too: the deletionTimestamp is the API server's,
/// and a node clock ahead of it would end the wait early. The deletion's grace counted from
/// when this launcher first saw it (`seen`: by pod name, `now` then) is a bound no clock skew
/// shortens; the later of the two stands, and never more than a week after it was seen.
pub fn bound_deletions(pods: &mut [PodView], seen: &mut BTreeMap<String, i64>, now: i64) {
    seen.retain(|name, _| pods.iter().any(|p| p.terminating && p.name == *name));
    for pod in pods.iter_mut().filter(|p| p.terminating) {
        let first = *seen.entry(pod.name.clone()).or_insert(now);
        let grace = pod.deletion_grace.map_or(0, |g| {
            i64::try_from(g)
                .unwrap_or(LONGEST_GRACE_S)
                .min(LONGEST_GRACE_S)
        });
        let by_this_node = first.saturating_add(grace);
        let latest = first.saturating_add(LONGEST_GRACE_S);
        pod.stops_by = Some(
            pod.stops_by
                .map_or(by_this_node, |s| s.max(by_this_node))
                .min(latest),
        );
    }
}

/// The pods a watch has shown so far, by name. Mirrors list + watch semantics: a relist
/// (`Init` .. `InitDone`) replaces the whole set at once, so a pod deleted while the watch
/// was down does not linger.
#[derive(Debug, Default, Clone)]
pub struct PodSet {
    pods: BTreeMap<String, PodView>,
    relisting: Option<BTreeMap<String, PodView>>,
    /// See `current`.
    ranking: Ranking,
}

impl PodSet {
    pub fn new(ranking: &Ranking) -> Self {
        PodSet {
            ranking: ranking.clone(),
            ..PodSet::default()
        }
    }

    pub fn begin_relist(&mut self) {
        self.relisting = Some(BTreeMap::new());
    }

    pub fn relisted(&mut self, pod: PodView) {
        self.relisting
            .get_or_insert_with(BTreeMap::new)
            .insert(pod.name.clone(), pod);
    }

    pub fn is_relisting(&self) -> bool {
        self.relisting.is_some()
    }

    pub fn end_relist(&mut self) {
        if let Some(pods) = self.relisting.take() {
            self.pods = pods;
        }
    }

    pub fn applied(&mut self, pod: PodView) {
        self.pods.insert(pod.name.clone(), pod);
    }

    pub fn deleted(&mut self, name: &str) {
        self.pods.remove(name);
    }

    /// The pods of the job's current attempt (see `current`).
    pub fn pods(&self) -> Vec<PodView> {
        current(self.pods.values().cloned().collect(), &self.ranking)
    }

    /// Every pod seen, of any attempt, replaced or not.
    pub fn all(&self) -> Vec<PodView> {
        self.pods.values().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Option<&PodView> {
        self.pods.get(name)
    }
}

/// The members of an attempt whose part ended cleanly while the job goes on (a split layout's
/// pserver pod whose pserver the trainers stopped): their pod's end, deleted or evicted, is no
/// loss. The control channel learns them (the coordinator tells every launcher); the API watch
/// of the peers, started before the channel, reads them.
#[derive(Debug, Clone, Default)]
pub struct Served(std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>);

impl Served {
    pub fn insert(&self, pod: &str) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(pod.to_string());
    }

    pub fn contains(&self, pod: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(pod)
    }
}

/// What became of a member pod after the launch, if it is no longer usable: training against a
/// dead pserver or a gone peer would hang or train wrong. A pod that Succeeded is done, not lost.
/// A terminating pod is lost unless `terminating_is_loss` is false: with a control channel and
/// a checkpoint signal, its launcher asks the job for a checkpoint and tells it when it leaves
/// (its trainer is needed until then); a frozen one is caught by its heartbeat.
pub fn lost(
    member: &Member,
    now: Option<&PodView>,
    succeeded_before: bool,
    terminating_is_loss: bool,
) -> Option<String> {
    let what = match now {
        None if succeeded_before => return None,
        None => "was deleted".to_string(),
        Some(p) if p.phase == PodPhase::Succeeded => return None,
        Some(p) if p.phase == PodPhase::Failed => match &p.ended {
            Some(ended) => format!("has Failed: {ended}"),
            None => "has Failed".to_string(),
        },
        Some(p) if p.terminating && terminating_is_loss => "is terminating".to_string(),
        Some(p) if p.ip.is_some_and(|ip| ip != member.ip) => {
            format!(
                "came back with IP {} instead of {}",
                p.ip.map_or(String::new(), |ip| ip.to_string()),
                member.ip
            )
        }
        Some(_) => return None,
    };
    Some(format!(
        "peer pod {} (rank {}, {}) {what}",
        member.name, member.rank, member.ip
    ))
}

/// A pod of the job as the control channel knows it: its name (as every launcher computes it)
/// and its address. Ranks are the plan's business, not the channel's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAddress {
    pub name: String,
    pub ip: IpAddr,
}

/// A pod with its rank.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    pub name: String,
    pub ip: IpAddr,
    pub rank: usize,
}

impl Member {
    pub fn address(&self) -> PodAddress {
        PodAddress {
            name: self.name.clone(),
            ip: self.ip,
        }
    }
}

/// Why the job is not ready yet, in numbers and per-pod reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitStatus {
    pub expected: usize,
    pub live: usize,
    pub ready: usize,
    /// Failed, Succeeded or terminating pods, ignored.
    pub ignored: usize,
    /// (name, phase, reason) of each live pod that is not ready.
    pub not_ready: Vec<(String, PodPhase, Option<String>)>,
    /// Each pod being deleted whose containers have not ended, said with where and since when:
    /// a dead node's pod stays so (Terminating, its Ready condition False) until Kubernetes lets
    /// go of it, and its Job creates no replacement before (`podReplacementPolicy: Failed`).
    pub going: Vec<(String, String)>,
}

impl fmt::Display for WaitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} pods Running with an IP ({} live, {} finished or terminating ignored)",
            self.ready, self.expected, self.live, self.ignored
        )?;
        if self.live > self.expected {
            write!(
                f,
                "; {} live pods but {} expected: waiting for the extra ones to go away",
                self.live, self.expected
            )?;
        }
        for (name, phase, reason) in &self.not_ready {
            write!(f, "; {name}: {phase}")?;
            if let Some(reason) = reason {
                write!(f, " ({reason})")?;
            }
        }
        for (name, going) in &self.going {
            write!(f, "; {name}: {going}")?;
        }
        Ok(())
    }
}

/// What a wait for the job's pods waits for now: the line its log says, and each pod it
/// awaits with one word of why (the Kubernetes reason, `Unschedulable`, `ImagePullBackOff`,
/// else the pod's phase).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Awaited {
    pub line: String,
    pub pods: Vec<(String, String)>,
}

/// "Terminating since 2026-12-07T10:00:00Z on node n3, not Ready: its replacement comes once
/// Kubernetes lets go of it": a deleted pod whose containers have not ended, in words. On a
/// node that stopped reporting the pod keeps its phase and turns not Ready (node lifecycle
/// controller), and stays Terminating past its grace period until the node is back, deleted or
/// tainted `node.kubernetes.io/out-of-service` (then the pod GC ends it).
fn going(pod: &PodView) -> String {
    let asked = pod
        .stops_by
        .map(|by| {
            let grace = pod
                .deletion_grace
                .map_or(0, |g| i64::try_from(g).unwrap_or(i64::MAX));
            by.saturating_sub(grace)
        })
        .and_then(|at| k8s_openapi::jiff::Timestamp::from_second(at).ok());
    let mut said = "Terminating".to_string();
    if let Some(at) = asked {
        said.push_str(&format!(" since {at:.0}"));
    }
    if let Some(node) = &pod.node {
        said.push_str(&format!(" on node {node}"));
    }
    if pod.not_ready {
        said.push_str(", not Ready (its node may be unreachable)");
    }
    said.push_str(": its replacement comes once Kubernetes lets go of it");
    said
}

pub enum Readiness {
    Ready(Vec<PodView>),
    Waiting(WaitStatus),
}

/// Ready when exactly `expected` live pods exist and all of them are Running with an IP.
/// More live pods than expected (say, a replacement started before the old pod went away)
/// is not ready: ranks must not be handed out twice.
pub fn readiness(pods: &[PodView], expected: usize) -> Readiness {
    let live: Vec<&PodView> = pods.iter().filter(|p| p.is_live()).collect();
    let ready = live.iter().filter(|p| p.is_ready()).count();
    if live.len() == expected && ready == expected {
        return Readiness::Ready(live.into_iter().cloned().collect());
    }
    Readiness::Waiting(WaitStatus {
        expected,
        live: live.len(),
        ready,
        ignored: pods.len() - live.len(),
        not_ready: live
            .iter()
            .filter(|p| !p.is_ready())
            .map(|p| (p.name.clone(), p.phase, p.waiting_reason.clone()))
            .collect(),
        going: pods
            .iter()
            .filter(|p| p.terminating && !p.phase.is_finished())
            .map(|p| (p.name.clone(), going(p)))
            .collect(),
    })
}

/// Pods of a group that have Failed (PaddleCloud's guard against restarting a broken job).
pub fn failed(pods: &[PodView]) -> usize {
    pods.iter().filter(|p| p.phase == PodPhase::Failed).count()
}

/// The one rule for "may the job start now", used by the wait and by `doctor` alike: the
/// failed-trainer guard first, then each group's readiness.
pub struct Verdict {
    /// Each group's readiness, in the order of the groups.
    pub groups: Vec<Readiness>,
    /// (failed trainer pods, the limit) when the guard forbids starting.
    pub too_many_failed: Option<(usize, u32)>,
    /// Gathering for a restart: a member of the attempt that ended has Succeeded. Its trainer
    /// finished, it will never rejoin, and the job cannot start again as a whole.
    pub finished: Option<String>,
    /// Deleted pods of the job that may still run their trainer, and until when (seconds since
    /// the epoch): the job does not start before they are gone, so that no trainer runs in two
    /// attempts at once (a preempted pod's checkpoint window while a Job already replaced it).
    pub still_running: Vec<(String, i64)>,
}

impl Verdict {
    /// Every group's ready pods, when the job may start.
    pub fn ready(&self) -> Option<Vec<Vec<PodView>>> {
        if self.too_many_failed.is_some()
            || self.finished.is_some()
            || !self.still_running.is_empty()
        {
            return None;
        }
        self.groups
            .iter()
            .map(|r| match r {
                Readiness::Ready(pods) => Some(pods.clone()),
                Readiness::Waiting(_) => None,
            })
            .collect()
    }

    /// When the job may be judged again for a deleted pod that may no longer run by then.
    pub fn judge_again_at(&self) -> Option<i64> {
        self.still_running.iter().map(|(_, until)| *until).min()
    }

    /// What the job waits for beyond its groups' readiness, if anything.
    pub fn held_by(&self) -> Option<String> {
        let held: Vec<String> = self
            .still_running
            .iter()
            .map(
                |(name, until)| match k8s_openapi::jiff::Timestamp::from_second(*until) {
                    Ok(at) => format!("{name} (until {at} at most)"),
                    Err(_) => name.clone(),
                },
            )
            .collect();
        (!held.is_empty()).then(|| {
            format!(
                "deleted pods that may still run a trainer until their grace period ends, waited for so that no trainer runs in two attempts at once: {}",
                held.join(", ")
            )
        })
    }
}

/// Judges the groups' pods (`pods[i]` are the pods of `groups[i]`, of the job's current
/// attempt) at `now` (seconds since the epoch). `members_before`: for a restart, the members of
/// the attempt that ended, of which one that finished rules it out (other finished pods a
/// selector may match are ignored, as at the first start). `seen`: every pod the selectors
/// match, of any attempt, replaced or not: a deleted one that may still run holds the start.
pub fn judge(
    groups: &[Group],
    pods: &[Vec<PodView>],
    max_failed_trainers: Option<u32>,
    members_before: &[String],
    seen: &[PodView],
    now: i64,
) -> Verdict {
    let trainers = groups.iter().position(|g| g.kind != GroupKind::Pservers);
    let failed = trainers.map_or(0, |i| failed(&pods[i]));
    Verdict {
        groups: groups
            .iter()
            .zip(pods)
            .map(|(group, pods)| readiness(pods, group.expected as usize))
            .collect(),
        too_many_failed: max_failed_trainers
            .filter(|&max| failed > max as usize)
            .map(|max| (failed, max)),
        finished: pods
            .iter()
            .flatten()
            .find(|p| p.phase == PodPhase::Succeeded && members_before.contains(&p.name))
            .map(|p| p.name.clone()),
        still_running: seen
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.may_still_run(now)?)))
            .collect(),
    }
}

/// An elastic job's start with fewer pods than it has (one group, the job's pods): the pods
/// Running with an IP, when nothing else holds the start (the failed-trainer guard, a finished
/// member, a deleted pod that may still run), no group has more live pods than expected (one
/// index twice), at least `min` are ready and not all, and either the elastic wait is over
/// (`waited`) or every member of the attempt that ended is among them with a pod more (the job
/// grows: nobody else is awaited).
pub fn elastic_start(
    verdict: &Verdict,
    pods: &[Vec<PodView>],
    expected: usize,
    min: usize,
    waited: bool,
    members_before: &[String],
) -> Option<Vec<PodView>> {
    let [pods] = pods else {
        return None;
    };
    let held = verdict.too_many_failed.is_some()
        || verdict.finished.is_some()
        || !verdict.still_running.is_empty();
    let live = pods.iter().filter(|p| p.is_live()).count();
    let ready: Vec<PodView> = pods
        .iter()
        .filter(|p| p.is_live() && p.is_ready())
        .cloned()
        .collect();
    let grows = !members_before.is_empty()
        && ready.len() > members_before.len()
        && members_before
            .iter()
            .all(|name| ready.iter().any(|p| p.name == *name));
    let enough = ready.len() >= min && ready.len() < expected;
    (!held && live <= expected && enough && (waited || grows)).then_some(ready)
}

/// An elastic job's pods that are not Ready (`PodView::not_ready`) and whose launcher is not
/// known to be alive (`alive`), or whose launcher did not say hello within the elastic wait
/// (`absent`), are no member of the next epoch, though the API may show them Running: a node
/// that died keeps its pods Running and Ready for the node monitor grace period (50 s by
/// default), then Running but not Ready until the unreachable taint's toleration (300 s) has
/// them deleted. They are left out (marked, and said why) while at least `min` pods are ready
/// without them; with fewer, every pod is awaited again (a launcher that was only slow may have
/// come).
///
/// The Ready condition stands for a dead node's launcher, which is silent; a pod whose launcher
/// is plainly alive is not judged by it: this launcher's own pod, and the pods whose launchers
/// the coordinator heard last (`alive`: at the last attempt's verdict, or in the gathering's
/// last round). A readiness gate, a finished sidecar or a kubelet that stopped reporting on a
/// live container leave a pod Running and not Ready: leaving such a pod out made it arrive
/// again, grow the job and be left out at the next gathering, a restart each time, forever.
/// And it is judged by it only by a coordinator that has run an attempt, once the gathering
/// has lasted its hello wait (`not_ready_judged`: a heartbeat timeout and a grace period at
/// least), as a silent pod is: a live launcher whose link the coordinator lost may still be
/// training the attempt that ended until then, and one a fresh coordinator never ran with
/// may be training the attempt before it; a start without it would train two epochs at once.
pub fn leave_out(
    pods: &mut [Vec<PodView>],
    absent: &BTreeSet<String>,
    alive: &BTreeSet<String>,
    min: usize,
    not_ready_judged: bool,
) {
    let silent_not_ready =
        |p: &PodView| not_ready_judged && p.not_ready && !alive.contains(&p.name);
    let out = |p: &PodView| silent_not_ready(p) || absent.contains(&p.name);
    let ready_without = pods
        .iter()
        .flatten()
        .filter(|p| p.is_ready() && !out(p))
        .count();
    if ready_without < min {
        return;
    }
    for pod in pods.iter_mut().flatten().filter(|p| p.is_ready()) {
        let why = match (silent_not_ready(pod), absent.contains(&pod.name)) {
            (true, _) => "not Ready, and its launcher was not heard (its node stopped reporting, or a readiness probe fails)",
            (false, true) => "its launcher did not say hello within the elastic wait",
            (false, false) => continue,
        };
        pod.left_out = true;
        pod.waiting_reason = Some(why.to_string());
    }
}

/// Before an elastic gathering may judge pods by their Ready condition (`leave_out`'s
/// `not_ready_judged`), the first pod it would then leave out for it: not Ready, its launcher
/// not heard. Such a pod holds the start until then: counted in, a dead node's pod would cost
/// a whole round of hellos; left out at once, a live launcher whose link the coordinator lost
/// might still be training the attempt that ended.
pub fn awaiting_judgement<'a>(
    pods: &'a [Vec<PodView>],
    alive: &BTreeSet<String>,
) -> Option<&'a PodView> {
    pods.iter()
        .flatten()
        .find(|p| p.is_ready() && p.not_ready && !alive.contains(&p.name))
}

/// The job's members by role, each list in rank order. In the colocated layout both lists are the
/// same pods.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Membership {
    pub pservers: Vec<Member>,
    pub trainers: Vec<Member>,
}

impl Membership {
    /// Each pod of the job once (a pod of the colocated layout is a trainer and a pserver),
    /// trainers first.
    pub fn pod_addresses(&self) -> Vec<PodAddress> {
        let mut pods: Vec<PodAddress> = Vec::new();
        for member in self.trainers.iter().chain(&self.pservers) {
            if !pods.iter().any(|p| p.name == member.name) {
                pods.push(member.address());
            }
        }
        pods
    }

    /// The pods that run no trainer: the split layout's pserver pods (none in the colocated
    /// layout, whose every pod trains).
    pub fn without_trainer(&self) -> impl Iterator<Item = &str> {
        self.pservers
            .iter()
            .filter(|p| !self.trainers.iter().any(|t| t.name == p.name))
            .map(|p| p.name.as_str())
    }

    pub fn from_groups(protocol: Protocol, groups: Vec<(GroupKind, Vec<Member>)>) -> Self {
        let mut m = Membership::default();
        for (kind, members) in groups {
            match kind {
                GroupKind::Job => {
                    if protocol.has_pservers() {
                        m.pservers = members.clone();
                    }
                    m.trainers = members;
                }
                GroupKind::Pservers => m.pservers = members,
                GroupKind::Trainers => m.trainers = members,
            }
        }
        m
    }

    /// Two listeners on one IP would fight for the same ports: pservers always listen,
    /// trainers only in protocols where they have their own endpoint.
    pub fn check_listeners(&self, protocol: Protocol) -> Result<(), MembershipError> {
        check_distinct_ips(&self.pservers)?;
        if protocol.trainers_listen() {
            check_distinct_ips(&self.trainers)?;
        }
        Ok(())
    }

    /// This pod's place: its rank among the pods of its own group.
    pub fn locate(
        &self,
        config: &Config,
        own_name: Option<&str>,
        own_ip: IpAddr,
    ) -> Result<Me, MembershipError> {
        let (list, pserver, trainer) = match config.own_group() {
            GroupKind::Job => (
                &self.trainers,
                config.topology.protocol.has_pservers(),
                true,
            ),
            GroupKind::Pservers => (&self.pservers, true, false),
            GroupKind::Trainers => (&self.trainers, false, true),
        };
        let member = find_self(list, own_name, own_ip)?;
        Ok(Me {
            name: member.name.clone(),
            ip: member.ip,
            pserver_rank: pserver.then_some(member.rank),
            trainer_rank: trainer.then_some(member.rank),
        })
    }
}

/// This pod in the job: what it runs is what it has a rank for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    pub name: String,
    pub ip: IpAddr,
    pub pserver_rank: Option<usize>,
    pub trainer_rank: Option<usize>,
}

impl Me {
    pub fn address(&self) -> PodAddress {
        PodAddress {
            name: self.name.clone(),
            ip: self.ip,
        }
    }
}

/// The pods that are part of the job now: those of its newest attempt (a pod of an earlier
/// one is on its way out: JobSet and Volcano recreate every pod on a restart, so its pods never
/// count, not even as failed), and with `replaced_ignored` (an index unique in the group), of a
/// finished pod and a live one at one index (a replaced pod and its replacement) only the live
/// one. Two live pods at one index both stay: the Job controller deletes one, and the readiness
/// rule waits for that.
pub fn current(pods: Vec<PodView>, ranking: &Ranking) -> Vec<PodView> {
    let newest = pods
        .iter()
        .filter_map(|p| p.attempt)
        .chain(ranking.own_attempt)
        .max();
    let replaced_ignored = ranking.replaced_ignored;
    let mut pods: Vec<PodView> = pods
        .into_iter()
        .filter(|p| newest.is_none_or(|n| p.attempt.unwrap_or(0) >= n))
        .collect();
    if replaced_ignored {
        let live: BTreeSet<Vec<u64>> = pods
            .iter()
            .filter(|p| p.is_live())
            .filter_map(|p| p.index.clone())
            .collect();
        // Of finished pods at one index without a live one, the newest stands for it.
        let mut newest_finished: BTreeMap<Vec<u64>, (Option<i64>, String)> = BTreeMap::new();
        for p in pods.iter().filter(|p| !p.is_live()) {
            if let Some(index) = &p.index {
                let key = (p.created, p.name.clone());
                let entry = newest_finished.entry(index.clone()).or_insert(key.clone());
                if key > *entry {
                    *entry = key;
                }
            }
        }
        pods.retain(|p| match (&p.index, p.is_live()) {
            (Some(index), false) => {
                !live.contains(index)
                    && newest_finished
                        .get(index)
                        .is_some_and(|(_, name)| *name == p.name)
            }
            _ => true,
        });
    }
    pods
}

/// Ranks: the index the batch system wrote on each pod when every pod has one, else numeric
/// IP order (IPv4 before IPv6; 10.0.0.9 before 10.0.0.10), ties by pod name.
pub fn rank(pods: &[PodView]) -> Vec<Member> {
    let mut ordered: Vec<&PodView> = pods.iter().filter(|p| p.ip.is_some()).collect();
    if ordered.iter().all(|p| p.index.is_some()) {
        ordered.sort_by(|a, b| (&a.index, &a.name).cmp(&(&b.index, &b.name)));
    } else {
        ordered.sort_by(|a, b| (a.ip, &a.name).cmp(&(b.ip, &b.name)));
    }
    ordered
        .into_iter()
        .enumerate()
        .filter_map(|(rank, p)| {
            Some(Member {
                name: p.name.clone(),
                ip: p.ip?,
                rank,
            })
        })
        .collect()
}

/// Rejects two members on one IP: every member runs a pserver on the same ports.
pub fn check_distinct_ips(members: &[Member]) -> Result<(), MembershipError> {
    let mut by_ip: BTreeMap<IpAddr, &str> = BTreeMap::new();
    for m in members {
        if let Some(first) = by_ip.insert(m.ip, &m.name) {
            return Err(MembershipError::DuplicateIp {
                ip: m.ip,
                first: first.to_string(),
                second: m.name.clone(),
            });
        }
    }
    Ok(())
}

/// This pod's member entry: by POD_NAME when given, else by IP.
pub fn find_self<'a>(
    members: &'a [Member],
    own_name: Option<&str>,
    own_ip: IpAddr,
) -> Result<&'a Member, MembershipError> {
    let found = match own_name {
        Some(name) => members.iter().find(|m| m.name == name),
        None => {
            let same_ip: Vec<&Member> = members.iter().filter(|m| m.ip == own_ip).collect();
            if same_ip.len() > 1 {
                let names: Vec<&str> = same_ip.iter().map(|m| m.name.as_str()).collect();
                return Err(MembershipError::AmbiguousIp {
                    ip: own_ip,
                    names: names.join(", "),
                });
            }
            same_ip.first().copied()
        }
    };
    found.ok_or_else(|| MembershipError::NotAMember {
        who: match own_name {
            Some(name) => format!("POD_NAME {name}"),
            None => format!("IP {own_ip}"),
        },
        seen: members
            .iter()
            .map(|m| format!("{} {}", m.name, m.ip))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;

    pub fn pod(name: &str, ip: Option<&str>, phase: &str) -> PodView {
        PodView {
            name: name.into(),
            ip: ip.map(|ip| ip.parse().unwrap()),
            phase: phase.into(),
            terminating: false,
            index: None,
            attempt: None,
            created: None,
            waiting_reason: None,
            gates: Vec::new(),
            ended: None,
            grace_period: None,
            stops_by: None,
            deletion_grace: None,
            not_ready: false,
            left_out: false,
            node: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    /// Pods whose launcher did not say hello are left out while the job has its minimum
    /// without them, and awaited again otherwise.
    #[test]
    fn absent_launchers_are_left_out_while_the_minimum_stands_without_them() {
        let ready = |name: &str| pod(name, Some("10.0.0.1"), "Running");
        let absent: BTreeSet<String> = ["b".to_string()].into();
        let mut pods = vec![vec![ready("a"), ready("b"), ready("c")]];
        leave_out(&mut pods, &absent, &BTreeSet::new(), 2, true);
        let still: Vec<bool> = pods[0].iter().map(PodView::is_ready).collect();
        assert_eq!(still, [true, false, true]);
        let mut short = vec![vec![ready("a"), ready("b"), pod("c", None, "Pending")]];
        leave_out(&mut short, &absent, &BTreeSet::new(), 2, true);
        assert!(short[0][1].is_ready());
        let group = Group {
            kind: GroupKind::Job,
            selector: crate::selector::LabelSelector::parse("job-name=j").unwrap(),
            expected: 3,
            ranking: crate::config::Ranking::default(),
        };
        let verdict = judge(std::slice::from_ref(&group), &pods, None, &[], &[], 0);
        let started = elastic_start(&verdict, &pods, 3, 2, true, &[]).unwrap();
        let names: Vec<&str> = started.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
    }

    /// A pod Running but not Ready is left out of an elastic job only while its launcher is not
    /// known to be alive: one the coordinator heard at the last attempt's end (or this
    /// launcher's own pod, which the caller counts alive) stays a member, whatever its Ready
    /// condition says (issue 51: such a pod arrived, grew the job and was left out again at
    /// every gathering).
    #[test]
    fn a_not_ready_pod_whose_launcher_is_alive_is_not_left_out() {
        let running = |name: &str, not_ready: bool| PodView {
            not_ready,
            ..pod(name, Some("10.0.0.1"), "Running")
        };
        let gathered_by = |alive: &[&str], judged: bool| {
            let alive: BTreeSet<String> = alive.iter().map(|s| s.to_string()).collect();
            let mut pods = vec![vec![
                running("a", false),
                running("b", false),
                running("c", true),
            ]];
            leave_out(&mut pods, &BTreeSet::new(), &alive, 2, judged);
            pods[0].iter().map(PodView::is_ready).collect::<Vec<_>>()
        };
        let gathered = |alive: &[&str]| gathered_by(alive, true);
        assert_eq!(gathered(&[]), [true, true, false]);
        assert_eq!(gathered(&["a", "b"]), [true, true, false]);
        assert_eq!(gathered(&["c"]), [true, true, true]);
        // Before the gathering's hello wait, the Ready condition leaves nobody out.
        assert_eq!(gathered_by(&[], false), [true, true, true]);
        // Absent (no hello within this gathering's wait) stands even for a pod heard before.
        let absent: BTreeSet<String> = ["c".to_string()].into();
        let mut pods = vec![vec![
            running("a", false),
            running("b", false),
            running("c", false),
        ]];
        leave_out(&mut pods, &absent, &absent, 2, true);
        assert!(!pods[0][2].is_ready());
    }

    /// Before the hello wait, the pod that would be left out for its Ready condition is the one
    /// that holds the start: not Ready, Running with an IP, its launcher not heard.
    #[test]
    fn a_pod_not_ready_and_unheard_awaits_its_judgement() {
        let running = |name: &str, not_ready: bool| PodView {
            not_ready,
            ..pod(name, Some("10.0.0.1"), "Running")
        };
        let pods = vec![vec![running("a", false), running("b", true)]];
        let heard = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        let awaited = awaiting_judgement(&pods, &heard(&["a"])).map(|p| p.name.as_str());
        assert_eq!(awaited, Some("b"));
        assert!(awaiting_judgement(&pods, &heard(&["a", "b"])).is_none());
        let pending = vec![vec![PodView {
            not_ready: true,
            ..pod("c", None, "Pending")
        }]];
        assert!(awaiting_judgement(&pending, &heard(&[])).is_none());
    }

    /// A phase the launcher does not know (or the API's own `Unknown`, a lost node) is neither
    /// ready nor finished: the job waits instead of counting the pod either way.
    #[test]
    fn an_unknown_phase_keeps_the_job_waiting() {
        for phase in ["Unknown", "Evicting"] {
            let p = pod("a", Some("10.0.0.1"), phase);
            assert_eq!(p.phase, PodPhase::Unknown);
            assert!(p.is_live() && !p.is_ready());
            assert!(matches!(readiness(&[p], 1), Readiness::Waiting(_)));
        }
    }

    fn names(members: &[Member]) -> Vec<&str> {
        members.iter().map(|m| m.name.as_str()).collect()
    }

    #[test]
    fn stale_failed_and_succeeded_pods_do_not_block_launch() {
        let pods = vec![
            pod("a", Some("10.0.0.1"), "Running"),
            pod("old", Some("10.0.0.5"), "Failed"),
            pod("done", None, "Succeeded"),
            pod("b", Some("10.0.0.2"), "Running"),
        ];
        match readiness(&pods, 2) {
            Readiness::Ready(live) => assert_eq!(live.len(), 2),
            Readiness::Waiting(w) => panic!("not ready: {w}"),
        }
    }

    /// An elastic job of 3, at least 2: it starts without the pods that are not Running only
    /// after the elastic wait, with at least the minimum; at once when every member of the last
    /// attempt is back with more; never while something else holds the start, with one index
    /// twice, with all 3 (the usual start), or below the minimum.
    #[test]
    fn an_elastic_job_starts_with_the_running_pods_when_the_rule_says() {
        let group = Group {
            kind: GroupKind::Job,
            selector: crate::selector::LabelSelector::parse("job-name=j").unwrap(),
            expected: 3,
            ranking: crate::config::Ranking::default(),
        };
        let groups = std::slice::from_ref(&group);
        let running = |name: &str, last: u8| pod(name, Some(&format!("10.0.0.{last}")), "Running");
        let pending = |name: &str| pod(name, None, "Pending");
        let start = |pods: Vec<PodView>, waited: bool, before: &[&str]| {
            let before: Vec<String> = before.iter().map(|b| b.to_string()).collect();
            let pods = vec![pods];
            let verdict = judge(groups, &pods, None, &before, &[], 0);
            elastic_start(&verdict, &pods, 3, 2, waited, &before)
                .map(|ready| ready.into_iter().map(|p| p.name).collect::<Vec<_>>())
        };
        let two = || vec![running("a", 1), running("b", 2), pending("c")];
        assert_eq!(
            start(two(), true, &["a", "b", "c"]),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            start(two(), false, &["a", "b", "c"]),
            None,
            "before the wait"
        );
        let one = vec![running("a", 1), pending("b"), pending("c")];
        assert_eq!(
            start(one, true, &["a", "b", "c"]),
            None,
            "below the minimum"
        );
        let all = vec![running("a", 1), running("b", 2), running("c", 3)];
        assert_eq!(start(all, true, &[]), None, "all 3 start as any job does");
        // Grown: the last attempt's 2 members are back with one more... of 4 expected.
        let four = Group {
            expected: 4,
            ..group.clone()
        };
        let grown = vec![vec![
            running("a", 1),
            running("b", 2),
            running("d", 4),
            pending("c"),
        ]];
        let before = ["a", "b"].map(String::from);
        let verdict = judge(std::slice::from_ref(&four), &grown, None, &before, &[], 0);
        let names = |ready: Option<Vec<PodView>>| ready.map(|r| r.len());
        assert_eq!(
            names(elastic_start(&verdict, &grown, 4, 2, false, &before)),
            Some(3)
        );
        // ... but not with one of them missing (a loss: the wait runs), even with more pods
        // than it had; nor with the same pods only.
        let lost = ["a", "b", "e"].map(String::from);
        assert_eq!(
            names(elastic_start(&verdict, &grown, 4, 2, false, &lost)),
            None
        );
        let replaced = ["a", "e"].map(String::from);
        let at_once = elastic_start(&verdict, &grown, 4, 2, false, &replaced);
        assert_eq!(names(at_once), None);
        let same = vec![vec![
            running("a", 1),
            running("b", 2),
            pending("c"),
            pending("d"),
        ]];
        let verdict = judge(std::slice::from_ref(&four), &same, None, &before, &[], 0);
        assert_eq!(
            names(elastic_start(&verdict, &same, 4, 2, false, &before)),
            None
        );
        // Held: a member finished, or a pod of one index twice (more live pods than expected).
        let finished = vec![
            running("a", 1),
            running("b", 2),
            pod("c", None, "Succeeded"),
        ];
        assert_eq!(
            start(finished, true, &["a", "b", "c"]),
            None,
            "a member finished"
        );
        let twice = vec![
            running("a", 1),
            running("b", 2),
            pending("c"),
            pending("c2"),
        ];
        assert_eq!(start(twice, true, &[]), None, "4 live pods of 3");
    }

    /// A pod that Succeeded is ignored when the job starts, but a member that did rules out a
    /// restart: it will never rejoin, so the others end at once instead of waiting for it.
    #[test]
    fn a_succeeded_pod_rules_out_a_restart() {
        let group = Group {
            kind: GroupKind::Job,
            selector: crate::selector::LabelSelector::parse("job-name=j").unwrap(),
            expected: 2,
            ranking: crate::config::Ranking::default(),
        };
        let pods = vec![vec![
            pod("a", Some("10.0.0.1"), "Running"),
            pod("b", Some("10.0.0.2"), "Running"),
            pod("done", None, "Succeeded"),
        ]];
        let groups = std::slice::from_ref(&group);
        let starting = judge(groups, &pods, None, &[], &[], 0);
        assert!(starting.ready().is_some() && starting.finished.is_none());
        let members = ["a", "done"].map(String::from);
        let restarting = judge(groups, &pods, None, &members, &[], 0);
        assert!(restarting.ready().is_none());
        assert_eq!(restarting.finished.as_deref(), Some("done"));
        // A finished pod that was no member (another Job's, under a wide selector): ignored.
        let others = ["a", "b"].map(String::from);
        assert!(judge(groups, &pods, None, &others, &[], 0)
            .ready()
            .is_some());
    }

    #[test]
    fn terminating_pod_is_not_counted() {
        let mut going = pod("b", Some("10.0.0.2"), "Running");
        going.terminating = true;
        let pods = vec![pod("a", Some("10.0.0.1"), "Running"), going];
        let Readiness::Waiting(w) = readiness(&pods, 2) else {
            panic!("a terminating pod made the job ready")
        };
        assert_eq!((w.live, w.ready, w.ignored), (1, 1, 1));
    }

    /// A Job replaces a deleted pod at once (its default replacement policy): the replacement
    /// is Running while the old pod's trainer may still checkpoint in its grace period. The job
    /// waits for the old pod until the kubelet must have killed it, and no longer.
    #[test]
    fn a_deleted_pod_that_may_still_run_holds_the_job_until_its_grace_ends() {
        let group = Group {
            kind: GroupKind::Job,
            selector: crate::selector::LabelSelector::parse("job-name=j").unwrap(),
            expected: 2,
            ranking: crate::config::Ranking::default(),
        };
        let mut going = pod("b", Some("10.0.0.2"), "Running");
        going.terminating = true;
        going.stops_by = Some(1_000);
        let with = |old: PodView| {
            vec![vec![
                pod("a", Some("10.0.0.1"), "Running"),
                pod("b-new", Some("10.0.0.3"), "Running"),
                old,
            ]]
        };
        let groups = std::slice::from_ref(&group);
        let at = |old: PodView, now| {
            let pods = with(old);
            judge(groups, &pods, None, &[], &pods[0], now)
        };
        let held = at(going.clone(), 990);
        assert!(held.ready().is_none());
        assert_eq!(held.judge_again_at(), Some(1_000 + KILL_SLACK_S));
        let said = held.held_by().unwrap();
        assert!(
            said.contains("b (until 1970-01-01T00:16:45Z at most)"),
            "{said}"
        );
        let later = at(going.clone(), 1_000 + KILL_SLACK_S);
        assert!(later.ready().is_some() && later.held_by().is_none());
        // Its containers ended: nothing runs there any more.
        let mut ended = going.clone();
        ended.phase = PodPhase::Failed;
        assert!(at(ended, 990).ready().is_some());
        // Not deleted: an extra live pod, judged as such.
        let mut live = going.clone();
        live.terminating = false;
        assert!(at(live, 990).still_running.is_empty());
        // Left out of the current attempt's pods (a batch system's replaced pod at its index):
        // it holds the start all the same.
        let current = with(going.clone())[0][..2].to_vec();
        let held = judge(groups, &[current], None, &[], &with(going)[0], 990);
        assert!(
            held.ready().is_none(),
            "a replaced pod left out released the hold"
        );
    }

    /// A node clock ahead of the API server's would end the wait before the kubelet kills:
    /// the deletion's grace counted from when this launcher first saw it bounds it too, and
    /// nothing is held more than a week.
    #[test]
    fn a_deletion_is_bounded_by_this_nodes_clock_too() {
        let mut going = pod("b", Some("10.0.0.2"), "Running");
        going.terminating = true;
        going.deletion_grace = Some(30);
        // Stamped 1,000 by the API server, first seen at 1,100 by a clock 100 s ahead.
        going.stops_by = Some(1_000);
        let mut seen = BTreeMap::new();
        let mut pods = vec![going.clone(), pod("a", Some("10.0.0.1"), "Running")];
        bound_deletions(&mut pods, &mut seen, 1_100);
        assert_eq!(pods[0].stops_by, Some(1_130));
        assert_eq!(pods[1].stops_by, None);
        // Seen again later: still counted from the first sight.
        let mut again = vec![going.clone()];
        bound_deletions(&mut again, &mut seen, 1_120);
        assert_eq!(again[0].stops_by, Some(1_130));
        // A clock behind: the API server's stamp is the later end.
        let mut behind = vec![going.clone()];
        bound_deletions(&mut behind, &mut BTreeMap::new(), 900);
        assert_eq!(behind[0].stops_by, Some(1_000));
        // A stamp years ahead: a week at most.
        going.stops_by = Some(i64::MAX / 2);
        let mut far = vec![going];
        bound_deletions(&mut far, &mut BTreeMap::new(), 0);
        assert_eq!(far[0].stops_by, Some(LONGEST_GRACE_S));
    }

    #[test]
    fn extra_live_pods_keep_waiting_and_say_why() {
        let pods = vec![
            pod("a", Some("10.0.0.1"), "Running"),
            pod("b", Some("10.0.0.2"), "Running"),
            pod("c", Some("10.0.0.3"), "Running"),
        ];
        let Readiness::Waiting(w) = readiness(&pods, 2) else {
            panic!("3 live pods accepted for a 2-pod job")
        };
        assert!(w.to_string().contains("3 live pods but 2 expected"), "{w}");
    }

    #[test]
    fn missing_pods_and_missing_ips_keep_waiting_with_reasons() {
        let mut pending = pod("b", None, "Pending");
        pending.waiting_reason = Some("Unschedulable: 0/3 nodes are available".into());
        let pods = vec![pod("a", None, "Running"), pending];
        let Readiness::Waiting(w) = readiness(&pods, 3) else {
            panic!("ready without IPs")
        };
        assert_eq!(
            w.to_string(),
            "0/3 pods Running with an IP (2 live, 0 finished or terminating ignored); a: Running; b: Pending (Unschedulable: 0/3 nodes are available)"
        );
    }

    /// Issue 52: a dead node's pod, past its grace and still Terminating (its Job waits for it
    /// before it creates the replacement), is named in the waiting line, with its node, since
    /// when, and why it stays.
    #[test]
    fn a_pod_stuck_terminating_is_named_with_its_node_and_since_when() {
        let mut stuck = pod("c", Some("10.0.0.3"), "Running");
        stuck.terminating = true;
        stuck.not_ready = true;
        stuck.node = Some("n3".into());
        stuck.stops_by = Some(1_796_642_430);
        stuck.deletion_grace = Some(30);
        let pods = [
            pod("a", Some("10.0.0.1"), "Running"),
            pod("b", Some("10.0.0.2"), "Running"),
            stuck,
        ];
        let Readiness::Waiting(wait) = readiness(&pods, 3) else {
            panic!("ready without c");
        };
        assert_eq!(
            wait.to_string(),
            "2/3 pods Running with an IP (2 live, 1 finished or terminating ignored); c: Terminating since 2026-12-07T11:20:00Z on node n3, not Ready (its node may be unreachable): its replacement comes once Kubernetes lets go of it"
        );
        // Once its containers have ended it holds nothing: not named.
        let mut ended = pods[2].clone();
        ended.phase = "Failed".into();
        let Readiness::Waiting(wait) = readiness(&[pods[0].clone(), ended], 2) else {
            panic!("ready");
        };
        assert!(wait.going.is_empty(), "{wait}");
    }

    #[test]
    fn ranks_follow_numeric_ip_order_not_string_order() {
        let pods = vec![
            pod("x", Some("10.0.0.10"), "Running"),
            pod("y", Some("10.0.0.9"), "Running"),
            pod("z", Some("9.255.0.1"), "Running"),
        ];
        assert_eq!(names(&rank(&pods)), ["z", "y", "x"]);
    }

    #[test]
    fn ipv6_ranks_numerically_after_ipv4() {
        let pods = vec![
            pod("v6-big", Some("fd00::a"), "Running"),
            pod("v6-small", Some("fd00::9"), "Running"),
            pod("v4", Some("192.168.0.1"), "Running"),
        ];
        assert_eq!(names(&rank(&pods)), ["v4", "v6-small", "v6-big"]);
    }

    #[test]
    fn indexed_job_annotation_wins_over_ip_order() {
        let mut pods = vec![
            pod("job-0-abc", Some("10.0.0.3"), "Running"),
            pod("job-1-def", Some("10.0.0.1"), "Running"),
            pod("job-2-ghi", Some("10.0.0.2"), "Running"),
        ];
        for (i, p) in pods.iter_mut().enumerate() {
            p.index = Some(vec![i as u64]);
        }
        let members = rank(&pods);
        assert_eq!(names(&members), ["job-0-abc", "job-1-def", "job-2-ghi"]);
        // Without the annotation on every pod, IP order applies.
        pods[1].index = None;
        assert_eq!(names(&rank(&pods)), ["job-1-def", "job-2-ghi", "job-0-abc"]);
    }

    #[test]
    fn ranks_follow_a_two_level_index_not_ip_order() {
        // JobSet: (global job index, completion index); 2 jobs of 2 pods, IPs in reverse.
        let mut pods: Vec<PodView> = (0..4)
            .map(|i| {
                pod(
                    &format!("js-{i}"),
                    Some(&format!("10.0.0.{}", 9 - i)),
                    "Running",
                )
            })
            .collect();
        for (i, p) in pods.iter_mut().enumerate() {
            p.index = Some(vec![(i / 2) as u64, (i % 2) as u64]);
        }
        pods.swap(0, 3);
        assert_eq!(names(&rank(&pods)), ["js-0", "js-1", "js-2", "js-3"]);
    }

    #[test]
    fn pods_of_an_earlier_attempt_or_replaced_at_their_index_do_not_count() {
        let system = Ranking::by(&["index"], Some("attempt"));
        let plain_job = Ranking::default();
        let at = |name: &str, index: u64, attempt: Option<u64>, phase: &str, created: i64| {
            let mut p = pod(name, Some("10.0.0.1"), phase);
            p.index = Some(vec![index]);
            p.attempt = attempt;
            p.created = Some(created);
            p
        };
        // A restart: attempt 1's pods replace attempt 0's, one of which still runs.
        let pods = vec![
            at("old-0", 0, Some(0), "Running", 1700000000),
            at("old-1", 1, Some(0), "Failed", 1700000000),
            at("new-0", 0, Some(1), "Pending", 1700000060),
            at("new-1", 1, Some(1), "Running", 1700000060),
        ];
        assert_eq!(
            names_of(&current(pods.clone(), &system)),
            ["new-0", "new-1"]
        );
        assert_eq!(names_of(&current(pods, &plain_job)), ["new-0", "new-1"]);
        // The other task of a split layout, seen before its attempt-1 pods exist: this pod's
        // own attempt says that attempt 0's are gone, though nothing newer shows yet.
        let trainers = vec![
            at("old-trainer-0", 0, Some(0), "Running", 1700000000),
            at("old-trainer-1", 1, Some(0), "Running", 1700000000),
        ];
        assert_eq!(current(trainers.clone(), &system), trainers);
        let mut in_attempt_1 = system.clone();
        in_attempt_1.own_attempt = Some(1);
        assert!(current(trainers, &in_attempt_1).is_empty());
        // A replaced Indexed Job pod: the Failed one is gone from the count; two live pods at
        // one index both stay (the readiness rule waits for the controller to delete one); of
        // two finished pods at an index without a live one, the newer stands for it.
        let pods = vec![
            at("job-0-a", 0, None, "Failed", 1700000000),
            at("job-0-b", 0, None, "Running", 1700000120),
            at("job-1-a", 1, None, "Running", 1700000000),
            at("job-1-b", 1, None, "Pending", 1700000180),
            at("job-2-a", 2, None, "Failed", 1700000000),
            at("job-2-b", 2, None, "Failed", 1700000240),
        ];
        assert_eq!(
            names_of(&current(pods.clone(), &system)),
            ["job-0-b", "job-1-a", "job-1-b", "job-2-b"]
        );
        // A selector the user gave may span Jobs whose indexes repeat: nothing is dropped.
        assert_eq!(current(pods.clone(), &plain_job), pods);
        // Without indexes or attempts nothing is dropped.
        let plain = vec![pod("a", None, "Failed"), pod("b", None, "Running")];
        assert_eq!(names_of(&current(plain, &system)), ["a", "b"]);
    }

    fn names_of(pods: &[PodView]) -> Vec<&str> {
        pods.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn equal_ips_are_ordered_by_name_and_rejected() {
        let pods = vec![
            pod("node-b", Some("172.18.0.2"), "Running"),
            pod("node-a", Some("172.18.0.2"), "Running"),
        ];
        let members = rank(&pods);
        assert_eq!(names(&members), ["node-a", "node-b"]);
        let err = check_distinct_ips(&members).unwrap_err();
        assert!(
            err.to_string()
                .contains("node-a and node-b share the IP 172.18.0.2"),
            "{err}"
        );
    }

    #[test]
    fn own_member_by_name_or_ip_and_a_clear_error_otherwise() {
        let members = rank(&[
            pod("a", Some("10.0.0.1"), "Running"),
            pod("b", Some("10.0.0.2"), "Running"),
        ]);
        let ip = "10.0.0.2".parse().unwrap();
        assert_eq!(find_self(&members, None, ip).unwrap().rank, 1);
        assert_eq!(find_self(&members, Some("a"), ip).unwrap().rank, 0);
        let err = find_self(&members, None, "10.0.0.3".parse().unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "this pod (IP 10.0.0.3) is not among the job's pods: a 10.0.0.1, b 10.0.0.2"
        );
    }

    #[test]
    fn a_shared_ip_without_pod_name_is_ambiguous() {
        let members = rank(&[
            pod("t-a", Some("10.0.0.1"), "Running"),
            pod("t-b", Some("10.0.0.1"), "Running"),
        ]);
        let ip = "10.0.0.1".parse().unwrap();
        let err = find_self(&members, None, ip).unwrap_err();
        assert!(
            err.to_string()
                .contains("pods t-a, t-b all have this pod's IP 10.0.0.1: set POD_NAME"),
            "{err}"
        );
        assert_eq!(find_self(&members, Some("t-b"), ip).unwrap().rank, 1);
    }

    #[test]
    fn split_trainers_may_share_an_ip_unless_they_listen() {
        let trainers = rank(&[
            pod("t-a", Some("10.0.0.1"), "Running"),
            pod("t-b", Some("10.0.0.1"), "Running"),
        ]);
        let pservers = rank(&[pod("p-a", Some("10.0.0.7"), "Running")]);
        let groups = || {
            vec![
                (GroupKind::Pservers, pservers.clone()),
                (GroupKind::Trainers, trainers.clone()),
            ]
        };
        assert!(Membership::from_groups(Protocol::V2, groups())
            .check_listeners(Protocol::V2)
            .is_ok());
        let fleet = Membership::from_groups(Protocol::Fleet, groups());
        assert!(matches!(
            fleet.check_listeners(Protocol::Fleet),
            Err(MembershipError::DuplicateIp { .. })
        ));
    }

    #[test]
    fn one_job_group_is_both_lists_unless_collective() {
        let pods = rank(&[pod("a", Some("10.0.0.1"), "Running")]);
        let v1 = Membership::from_groups(Protocol::V1, vec![(GroupKind::Job, pods.clone())]);
        assert_eq!((v1.pservers.len(), v1.trainers.len()), (1, 1));
        let collective =
            Membership::from_groups(Protocol::Collective, vec![(GroupKind::Job, pods)]);
        assert_eq!(
            (collective.pservers.len(), collective.trainers.len()),
            (0, 1)
        );
    }

    #[test]
    fn failed_pods_are_counted() {
        let pods = [
            pod("a", None, "Failed"),
            pod("b", None, "Failed"),
            pod("c", None, "Running"),
        ];
        assert_eq!(failed(&pods), 2);
    }

    #[test]
    fn a_peer_is_lost_when_deleted_failed_terminating_or_readdressed() {
        let member = Member {
            name: "j-1".into(),
            ip: "10.0.0.2".parse().unwrap(),
            rank: 1,
        };
        let running = pod("j-1", Some("10.0.0.2"), "Running");
        assert_eq!(lost(&member, Some(&running), false, true), None);
        assert_eq!(
            lost(&member, None, false, true).unwrap(),
            "peer pod j-1 (rank 1, 10.0.0.2) was deleted"
        );
        assert_eq!(
            lost(&member, None, true, true),
            None,
            "a pod that succeeded may go away"
        );
        let failed = pod("j-1", Some("10.0.0.2"), "Failed");
        assert!(lost(&member, Some(&failed), false, true)
            .unwrap()
            .ends_with("has Failed"));
        let mut going = running.clone();
        going.terminating = true;
        assert!(lost(&member, Some(&going), false, true)
            .unwrap()
            .ends_with("is terminating"));
        assert_eq!(
            lost(&member, Some(&going), false, false),
            None,
            "a preempted peer's launcher tells the job itself when it leaves"
        );
        let moved = pod("j-1", Some("10.0.0.9"), "Running");
        assert!(lost(&member, Some(&moved), false, true)
            .unwrap()
            .ends_with("came back with IP 10.0.0.9 instead of 10.0.0.2"));
        assert_eq!(
            lost(&member, Some(&pod("j-1", None, "Succeeded")), false, true),
            None
        );
    }

    #[test]
    fn relist_replaces_the_set() {
        let mut set = PodSet::default();
        set.applied(pod("gone", Some("10.0.0.1"), "Running"));
        set.begin_relist();
        set.relisted(pod("new", Some("10.0.0.2"), "Running"));
        assert_eq!(
            names(&rank(&set.pods())),
            ["gone"],
            "a relist applies only when it ends"
        );
        set.end_relist();
        assert_eq!(names(&rank(&set.pods())), ["new"]);
        set.deleted("new");
        assert!(set.pods().is_empty());
    }
}
