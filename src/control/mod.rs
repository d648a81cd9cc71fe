//! The job's control channel: every launcher keeps one authenticated TCP connection to the
//! coordinating launcher, over which the job agrees when to start (`Go`, with the agreed
//! `Ledger`), notices a silent or gone launcher within the heartbeat timeout, learns the first
//! failure anywhere (`Failed`, `Lost`) and gets one verdict on a restart. The protocol and its
//! threat model are in docs/control-channel.md. The decisions are pure machines
//! (`coordinator::Core`, `following::Following`, the words they share in `heard`), simulated in
//! `simulation`; this module is the channel's API and the tasks around them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep, timeout, Instant};
use tracing::{debug, info, warn, Instrument};

use crate::config::Secret;
use crate::ledger::Ledger;
use crate::membership::{Loss, Membership, PodAddress, Served};

mod coordinator;
mod cost;
mod follower;
mod following;
pub(crate) mod heard;
mod message;
mod net;
#[cfg(test)]
pub(crate) mod sim_net;
#[cfg(test)]
mod simulation;
mod wire;

use coordinator::{Core, Effect, Input, Setup, Terms};
pub use coordinator::{Growth, GROWS, TURNED_AWAY};
pub use cost::{measure_coordinator, measure_progress, CoordinatorCost, ProgressCost};

use follower::follow;
pub use follower::serves_a_channel;
use heard::Request;
pub use heard::{Cause, Heard};
pub use message::Message;
use message::{cut, WireError};
pub use net::{tcp, Net};
use net::{Listener, Reader, Writer};
pub use wire::Session;
use wire::*;

/// The longest heartbeat timeout a launcher may be given (PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT).
const MAX_HEARTBEAT_MS: u64 = 7 * 24 * 3600 * 1000;
/// Whether a heartbeat timeout a hello says (ms; 0: not said) is within what any launcher may
/// be given: a link beaten every microsecond, or judged never, would be a member's way to
/// stall the coordinator or to hide a freeze.
fn heartbeat_said_fits(heartbeat_ms: u64) -> bool {
    heartbeat_ms == 0 || (1000..=MAX_HEARTBEAT_MS).contains(&heartbeat_ms)
}

/// Whether no member is at `ip`: a pod arriving to join comes from an address of its own (a
/// name said from a member's address is that member's, or none).
fn at_address_is_none(others: &[PodAddress], ip: IpAddr) -> bool {
    !others.iter().any(|m| m.ip == ip)
}

/// How many addresses that are no member's are named in the log, each at its first connection
/// (a flood from many is counted instead).
const STRANGERS_NAMED: usize = 8;
/// Connections one member address may hold at once (a reconnect overlaps the old one).
const PER_ADDRESS: usize = 2;
/// How long a link that failed reads what its follower had already said.
const LAST_WORDS: Duration = Duration::from_millis(200);
/// How long queued last words (Lost, Bye) may take to go out when a channel closes.
const FLUSH: Duration = Duration::from_secs(1);

/// A trainer's progress as its launcher reports it: the step it last wrote, if a number, and
/// when it last progressed.
pub type Progress = Option<(Option<u64>, Instant, Option<u32>)>;

/// Looks the coordinator's DNS name up again: the addresses it has now (none, or several while a
/// replaced pod's old address is still listed), or None when the lookup itself failed, which
/// says nothing about where the coordinator is.
pub type Recheck = Arc<dyn Fn() -> BoxFuture<'static, Option<BTreeSet<IpAddr>>> + Send + Sync>;

/// Where this launcher stands in the channel.
pub enum Role {
    Coordinator {
        listen: SocketAddr,
    },
    Follower {
        coordinator: SocketAddr,
        /// When the coordinator is known by a DNS name: a follower that cannot reach it looks
        /// the name up again, and gathers again as soon as it has moved, instead of knocking
        /// at a replaced pod's old address for the whole join grace.
        recheck: Option<Recheck>,
    },
}

/// How often a follower that cannot reach its coordinator looks its name up again: from the
/// first to the last while the answer stays the same (a thousand followers of a coordinator
/// still finding the pods must not flood the cluster's DNS).
const RECHECK_FIRST: Duration = Duration::from_secs(1);
const RECHECK_LAST: Duration = Duration::from_secs(10);

/// Everything a launcher brings to one attempt's channel.
pub struct Joining {
    pub role: Role,
    pub secret: Secret,
    pub me: PodAddress,
    /// Every member of the job, this one included.
    pub members: Vec<PodAddress>,
    /// The fingerprint of the membership this launcher found (`view`).
    pub view: String,
    /// The job's ledger as this launcher knows it (its epoch: the one it would start next;
    /// its allowances: its own).
    pub ledger: Ledger,
    /// The trainer processes this launcher's pod runs.
    pub nproc_per_pod: u32,
    pub heartbeat_timeout: Duration,
    /// How long members may take to join: they may still be stopping their children.
    pub join_grace: Duration,
    /// The coordinator's: the membership it found, sent with `Go`.
    pub membership: Option<Membership>,
    /// The coordinator's: the job has ended (why). Every member that joins hears a final
    /// `Lost`; the channel ends once all have, so that followers which learn the job only from
    /// this coordinator end too instead of waiting for it.
    pub ended: Option<String>,
    /// How this launcher names itself in the job's lines ("pod p-1 on node n7 (trainer id 1
    /// of 3)").
    pub who: String,
    /// How often a trainer's progress is looked at (hang detection's check interval; zero
    /// when off): how late a progress may be noticed.
    pub progress_check: Duration,
    /// Where the members that served their part are told (the API watch of the peers reads it).
    pub served: Served,
    /// What the channel connects over (`tcp()`).
    pub network: Net,
    /// The coordinator's, in an elastic job: pods that are no member may join while it trains.
    pub growth: Option<Growing>,
}

/// An elastic job's coordinator: how it grows the job, and the pods it may grow by (the job's
/// pod count less the members): connections from addresses that are no member's are served,
/// at most `PER_ADDRESS` for each pod it may grow by, all of them authenticated like any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growing {
    pub core: coordinator::Growth,
    pub room: usize,
}

/// The fingerprint of a membership: equal on two pods exactly when they found the same pods at
/// the same addresses.
pub fn fingerprint(members: &[PodAddress]) -> String {
    let mut entries: Vec<String> = members
        .iter()
        .map(|m| format!("{}={}", m.name, m.ip))
        .collect();
    entries.sort();
    let digest = ring::digest::digest(&ring::digest::SHA256, entries.join("\n").as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// This launcher's part of one attempt's channel.
pub struct Channel {
    heard: Option<mpsc::UnboundedReceiver<Heard>>,
    requests: mpsc::UnboundedSender<Request>,
    task: Option<JoinHandle<()>>,
    /// The coordinator's verdict: false once the job may not restart (it may turn false after
    /// a loss was first told as restartable: a member finished meanwhile).
    may_restart: watch::Receiver<bool>,
    /// Set once the job's loss is known here: told by the coordinator, or decided by it.
    lost: watch::Receiver<bool>,
    /// The coordinator's verdict on the loss, once every member has stopped; or this
    /// launcher's last word on it when the coordinator is gone before saying it.
    verdict: watch::Receiver<Option<bool>>,
    coordinates: bool,
    said_hello: watch::Receiver<bool>,
    progress: watch::Sender<Progress>,
    cause: watch::Receiver<Option<Cause>>,
    /// Why the job's trainers were last asked for a checkpoint (a member is preempted).
    checkpoint: watch::Receiver<Option<String>>,
    succeeded: watch::Receiver<bool>,
    /// An elastic job's coordinator: the pods its gathering leaves out.
    left_out: watch::Receiver<LeftOut>,
}

/// Adds the `pods` that `list` does not have yet.
fn once_each(list: &mut Vec<String>, pods: Vec<String>) {
    for pod in pods {
        if !list.contains(&pod) {
            list.push(pod);
        }
    }
}

/// The pods an elastic job's coordinator leaves out of its next round of gathering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Members that did not say hello within the elastic wait.
    pub silent: Vec<String>,
    /// Pods turned away: they cannot join (another number of processes).
    pub turned_away: Vec<String>,
}

impl Channel {
    /// The next thing heard; never, once the channel has nothing more to say.
    pub async fn heard(&mut self) -> Heard {
        match self.heard.as_mut() {
            Some(heard) => match heard.recv().await {
                Some(heard) => heard,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    /// An elastic job's coordinator, after its gathering ended: the pods it leaves out of the
    /// next round (none otherwise).
    pub fn left_out(&self) -> LeftOut {
        self.left_out.borrow().clone()
    }

    /// After `Go`: a future of the first loss the channel reports.
    pub fn losses(&mut self) -> BoxFuture<'static, Loss> {
        let heard = self.heard.take();
        async move {
            if let Some(mut heard) = heard {
                while let Some(heard) = heard.recv().await {
                    if let Heard::Lost { reason, hang, .. } = heard {
                        return Loss { reason, hang };
                    }
                }
            }
            std::future::pending().await
        }
        .boxed()
    }

    /// Resolves once the coordinator has said that every trainer of the job succeeded (a
    /// follower's, or a coordinator's without a trainer).
    pub fn job_succeeded(&self) -> BoxFuture<'static, String> {
        let mut succeeded = self.succeeded.clone();
        async move {
            if succeeded.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
            "the coordinating launcher said every trainer of the job succeeded".to_string()
        }
        .boxed()
    }

    /// Resolves with the reason once the job's trainers are asked for a checkpoint in this
    /// attempt (a member is preempted; the coordinator asks once an attempt); never when they
    /// are not.
    pub fn checkpoint_asked(&self) -> BoxFuture<'static, String> {
        let mut asked = self.checkpoint.clone();
        async move {
            let reason = match asked.wait_for(Option::is_some).await {
                Ok(reason) => reason.clone(),
                Err(_) => None,
            };
            match reason {
                Some(reason) => reason,
                None => std::future::pending().await,
            }
        }
        .boxed()
    }

    /// Whether the job's trainers were asked for a checkpoint in this attempt: a member is
    /// preempted, so the attempt's end may be a preemption's, which only the coordinator's
    /// word (or its silence, judged) tells.
    pub fn checkpoint_was_asked(&self) -> bool {
        self.checkpoint.borrow().is_some()
    }

    /// Whether the checkpoint was asked for an elastic job's growth: the attempt's end is the
    /// growth's free restart, whatever the free preemptions left.
    pub fn growth_asked(&self) -> bool {
        self.checkpoint
            .borrow()
            .as_ref()
            .is_some_and(|reason| reason.starts_with(GROWS))
    }

    /// This launcher was told to stop while its trainer runs (its pod is preempted, drained
    /// or deleted): asks every trainer of the job for a checkpoint, through the coordinator.
    /// Its end follows with `failed`, which then spends no restart.
    pub fn preempted(&self, reason: &str) {
        let _ = self.requests.send(Request::Preempted(cut(reason)));
    }

    /// Whether the job may still restart: not once a member finished, or the coordinator
    /// said the loss is final.
    pub fn may_restart(&self) -> bool {
        *self.may_restart.borrow()
    }

    /// After a loss, once this launcher's children are stopped: says so, and waits up to
    /// `limit` for the coordinator's verdict, decided once every member has stopped (so every
    /// success there was is in it, with no timer in the argument). Whether the job may restart;
    /// what is known by then if no verdict comes (the coordinator lost, say).
    pub async fn verdict(&self, limit: Duration) -> bool {
        self.stopped();
        // "No restart" is never taken back: nothing to wait for.
        if !self.may_restart() {
            return false;
        }
        info!(
            "control channel: waiting for the job's verdict, given once every launcher has stopped its children (at most {} s)",
            limit.as_secs()
        );
        let mut verdict = self.verdict.clone();
        let decided = match timeout(limit, verdict.wait_for(Option::is_some)).await {
            Ok(Ok(decided)) => *decided,
            _ => None,
        };
        decided.unwrap_or_else(|| self.may_restart())
    }

    /// After a loss: this launcher's children are stopped (the coordinator's verdict waits for
    /// every launcher to say so).
    pub fn stopped(&self) {
        let _ = self.requests.send(Request::Stopped);
    }

    /// Whether this launcher serves the channel.
    pub fn coordinates(&self) -> bool {
        self.coordinates
    }

    /// A follower's: whether it has said hello to the coordinator, after which a `Go` may be
    /// on its way and only the coordinator may call the attempt off.
    pub fn said_hello(&self) -> bool {
        *self.said_hello.borrow()
    }

    /// The coordinator's launcher saw a member's pod lost through the API: the coordinator
    /// decides, in the one place that also decides `Go`, so the two cannot cross. Before the
    /// start everyone gathers again (free); after it, the loss is the job's, as any other.
    pub fn pod_lost(&self, reason: String) {
        let _ = self.requests.send(Request::PodLost(reason));
    }

    /// Tells the job that this launcher's trainer succeeded, the moment it does: from now on
    /// the job cannot start again as a whole (this pod will not be there to join).
    pub fn done(&self) {
        let _ = self.requests.send(Request::Done);
    }

    /// Tells the job that this launcher failed (a follower tells the coordinator, which tells
    /// everyone; the coordinator tells everyone), and waits up to `wait` for the job's answer:
    /// whether it may restart (`may_restart` then says) depends on what the others did, e.g. a
    /// pod that already finished. A coordinator that does not answer leaves it as it was.
    /// `restartable`: false when a restart would fail the same way; `hang`: this launcher's
    /// trainer was judged hung (the coordinator names the rank the progress points at).
    pub async fn failed(&self, reason: &str, restartable: bool, hang: bool, wait: Duration) {
        let _ = self.requests.send(Request::Failed {
            reason: cut(reason),
            restartable,
            hang,
        });
        let mut lost = self.lost.clone();
        let _ = timeout(wait, lost.wait_for(|known| *known)).await;
    }

    /// Tells the job at once that this launcher's trainer is judged hung, without waiting for
    /// an answer: the coordinator names the suspect and has every launcher dump its stacks.
    /// The failure said again once the trainer is stopped changes nothing (the first stands).
    pub fn tell_hang(&self, reason: &str) {
        let _ = self.requests.send(Request::Failed {
            reason: cut(reason),
            restartable: true,
            hang: true,
        });
    }

    /// A preempted launcher's checkpoint window is over (the reason): the job stops as this
    /// pod's processes do, without waiting for them, and the restart spends no budget. The
    /// failure said again once they are stopped changes nothing (the first stands).
    pub fn leaving(&self, reason: &str) {
        let _ = self.requests.send(Request::Failed {
            reason: cut(reason),
            restartable: true,
            hang: false,
        });
    }

    /// Ends this launcher's part and waits until it has. After a success a follower says
    /// "done", and the coordinator stays until every follower has reported its outcome, then
    /// says goodbye; after a failure nothing is said, and the others notice the end.
    pub async fn finish(&mut self, succeeded: bool) {
        let _ = self.requests.send(Request::Finish { succeeded });
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Channel {
    /// The job's first cause, once the coordinator has told it (a hang's names its suspect):
    /// what every pod's last line says, whichever pod failed first.
    pub fn cause(&self) -> Option<Cause> {
        self.cause.borrow().clone()
    }

    /// This launcher's trainer's progress, for the coordinator's judgement of a hang: sent
    /// with the follower's heartbeats, read by the coordinator's task on its ticks.
    /// `behind`: of several trainer processes, the trainer id of the one these are of.
    pub fn report_progress(&self, step: Option<u64>, last: Instant, behind: Option<u32>) {
        self.progress.send_replace(Some((step, last, behind)));
    }

    /// A coordinator serving the job's end: waits until every member has been told, or
    /// `limit` has passed.
    pub async fn told_everyone(&mut self, limit: Duration) {
        if let Some(task) = self.task.as_mut() {
            // A task that ended is gone: a later `finish` must not wait for it again.
            if timeout(limit, task).await.is_ok() {
                self.task = None;
            }
        }
    }

    /// Ends this attempt's part without a word (a regather, or a failure already told).
    pub async fn close(&mut self) {
        self.finish(false).await;
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// How much older one trainer's progress must be than the others' to stand out: two beat
/// intervals of a report's staleness, and the progress file's polling.
pub fn progress_margin(heartbeat_timeout: Duration, progress_check: Duration) -> Duration {
    2 * (heartbeat_timeout / 3) + progress_check
}

/// Joins one attempt's channel: serves it (the coordinator) or connects to it. What follows
/// is heard through the returned channel: `Go`, `Regather` or `Lost`.
pub async fn join(joining: Joining) -> std::io::Result<Channel> {
    let (heard_tx, heard_rx) = mpsc::unbounded_channel();
    let (requests_tx, requests_rx) = mpsc::unbounded_channel();
    let (may_restart_tx, may_restart) = watch::channel(true);
    let (lost_tx, lost) = watch::channel(false);
    let (said_hello_tx, said_hello) = watch::channel(false);
    let (verdict_tx, verdict) = watch::channel(None);
    let (progress_tx, progress_rx) = watch::channel(None);
    let (cause_tx, cause) = watch::channel(None);
    let (checkpoint_tx, checkpoint) = watch::channel(None);
    let (succeeded_tx, succeeded) = watch::channel(false);
    let (left_out_tx, left_out) = watch::channel(LeftOut::default());
    let ends = Ends {
        left_out: left_out_tx,
        served: joining.served.clone(),
        succeeded: succeeded_tx,
        checkpoint: checkpoint_tx,
        cause: cause_tx,
        progress: progress_rx,
        heard: heard_tx,
        requests: requests_rx,
        may_restart: may_restart_tx,
        lost: lost_tx,
        said_hello: said_hello_tx,
        verdict: verdict_tx,
    };
    let limit = joining.heartbeat_timeout.as_secs();
    let coordinates = matches!(joining.role, Role::Coordinator { .. });
    let task = match joining.role {
        Role::Coordinator { listen } => {
            let listener = joining.network.0.listen(listen).await?;
            info!(
                "control channel: coordinating {} on {listen} (heartbeat timeout {limit} s)",
                crate::vocabulary::count(joining.members.len(), "launcher")
            );
            let coordinator = Coordinator::new(joining);
            tokio::spawn(coordinator.run(listener, ends).in_current_span())
        }
        Role::Follower {
            coordinator,
            ref recheck,
        } => {
            info!("control channel: following the coordinator at {coordinator} (heartbeat timeout {limit} s)");
            let recheck = recheck.clone();
            tokio::spawn(follow(joining, coordinator, recheck, ends).in_current_span())
        }
    };
    Ok(Channel {
        heard: Some(heard_rx),
        requests: requests_tx,
        task: Some(task),
        may_restart,
        lost,
        coordinates,
        said_hello,
        verdict,
        progress: progress_tx,
        cause,
        checkpoint,
        succeeded,
        left_out,
    })
}

/// The task's side of a `Channel`.
struct Ends {
    heard: mpsc::UnboundedSender<Heard>,
    requests: mpsc::UnboundedReceiver<Request>,
    may_restart: watch::Sender<bool>,
    lost: watch::Sender<bool>,
    verdict: watch::Sender<Option<bool>>,
    /// A follower's: its hello is out, so a `Go` may be on its way to it.
    said_hello: watch::Sender<bool>,
    /// This launcher's trainer's progress, as last reported.
    progress: watch::Receiver<Progress>,
    cause: watch::Sender<Option<Cause>>,
    checkpoint: watch::Sender<Option<String>>,
    /// The coordinator said every trainer of the job succeeded (`Bye`).
    succeeded: watch::Sender<bool>,
    /// The members that served their part (`Served`), for the API watch of the peers.
    served: Served,
    left_out: watch::Sender<LeftOut>,
}

impl Ends {
    /// A member has served its part: the API watch of the peers ignores its pod's end.
    fn served(&self, pod: &str) {
        info!("control channel: {pod} has served its part: its pod's end is no loss to the job");
        self.served.insert(pod);
    }

    fn hear(&self, heard: Heard) {
        if let Heard::Lost {
            restart,
            reason,
            hang,
            preempted,
            grown,
        } = &heard
        {
            let cause = Cause {
                reason: reason.clone(),
                hang: *hang,
                preempted: *preempted,
                grown: *grown,
            };
            self.knows_cause(cause);
            self.knows_lost(*restart);
        }
        let _ = self.heard.send(heard);
    }

    /// A member is preempted (the reason): this launcher's trainer is asked for a checkpoint.
    /// Not queued with what is heard: it comes while the trainers run, not in order with the
    /// attempt's start and end.
    fn checkpoint(&self, reason: String) {
        self.checkpoint.send_replace(Some(reason));
    }

    /// The job's first cause, as the coordinator told it, and whether the job hangs: the first
    /// word stands.
    fn knows_cause(&self, said: Cause) {
        self.cause.send_if_modified(|cause| {
            let first = cause.is_none();
            if first {
                *cause = Some(said);
            }
            first
        });
    }

    /// The job lost a member; `restart`: whether it may start again.
    fn knows_lost(&self, restart: bool) {
        if !restart {
            self.may_restart.send_replace(false);
        }
        self.lost.send_replace(true);
    }

    /// The verdict is known: the coordinator's, or what this launcher knows when the
    /// coordinator is gone without one. The first word stands.
    fn knows_verdict(&self, restart: bool) {
        self.knows_lost(restart);
        self.verdict.send_if_modified(|verdict| {
            let first = verdict.is_none();
            if first {
                *verdict = Some(restart);
            }
            first
        });
    }
}

/// What a connection's task tells the coordinator.
enum FromLink {
    Joined {
        link: u64,
        pod: String,
        view: String,
        who: String,
        terms: Terms,
        to_link: mpsc::UnboundedSender<Arc<Encoded>>,
    },
    Progress {
        link: u64,
        pod: String,
        step: Option<u64>,
        quiet: Duration,
        at: Instant,
        behind: Option<u32>,
    },
    Said {
        link: u64,
        pod: String,
        message: Message,
    },
    Ended {
        link: u64,
        ip: IpAddr,
        pod: Option<String>,
        why: WireError,
    },
}

/// The coordinator's task: carries out what its `Core` decides, over the connections that
/// report to it.
struct Coordinator {
    shared: Arc<Shared>,
    core: Core,
    /// Each joined connection's outgoing queue.
    senders: HashMap<u64, mpsc::UnboundedSender<Arc<Encoded>>>,
    /// Open connections by address, authenticated or not.
    open: HashMap<IpAddr, usize>,
    refused: u64,
    /// Addresses that are no member's, already named in the log.
    strangers_named: HashSet<IpAddr>,
    /// In an elastic job: connections from addresses that are no member's may be open at once,
    /// how many, and how many are.
    stranger_slots: usize,
    strangers_open: usize,
    /// What the core said at its start, carried out once the task runs.
    first: Vec<Effect>,
}

/// What connection tasks read: the followers, the secret, the timeout.
struct Shared {
    others: Vec<PodAddress>,
    secret: Secret,
    heartbeat_timeout: Duration,
    /// Bytes written to followers, for the record (a big job's fan-out cost).
    sent: std::sync::atomic::AtomicU64,
    /// An elastic job's coordinator: a hello from a pod that is no member, by its name, is a
    /// pod arriving to join.
    admits_arrivals: bool,
}

impl Coordinator {
    fn new(joining: Joining) -> Coordinator {
        let me = joining.me.name.clone();
        let others: Vec<PodAddress> = joining
            .members
            .into_iter()
            .filter(|m| m.name != me)
            .collect();
        let (core, first) = Core::start(
            Setup {
                me,
                others: others.iter().map(|m| m.name.clone()).collect(),
                view: joining.view,
                terms: Terms {
                    ledger: joining.ledger,
                    nproc_per_pod: joining.nproc_per_pod,
                },
                join_grace: joining.join_grace,
                membership: joining.membership,
                ended: joining.ended,
                who: joining.who,
                progress_margin: progress_margin(joining.heartbeat_timeout, joining.progress_check),
                hello_overdue: joining.heartbeat_timeout,
                growth: joining.growth.map(|g| g.core),
            },
            Instant::now(),
        );
        Coordinator {
            shared: Arc::new(Shared {
                others,
                secret: joining.secret,
                heartbeat_timeout: joining.heartbeat_timeout,
                sent: std::sync::atomic::AtomicU64::new(0),
                admits_arrivals: joining.growth.is_some(),
            }),
            core,
            senders: HashMap::new(),
            open: HashMap::new(),
            refused: 0,
            strangers_named: HashSet::new(),
            stranger_slots: joining.growth.map_or(0, |g| g.room * PER_ADDRESS),
            strangers_open: 0,
            first,
        }
    }

    /// Whether a connection from `ip` may be served: only member addresses, a few each. The
    /// first few addresses that are no member's are named at once: a sidecar proxy forwarding
    /// every follower from its own address would otherwise keep the job from starting with
    /// nothing but a count a minute.
    fn admit(&mut self, ip: IpAddr) -> bool {
        let pods_there = self.shared.others.iter().filter(|m| m.ip == ip).count();
        let from_there = self.open.get(&ip).copied().unwrap_or(0);
        if pods_there == 0 && self.strangers_open < self.stranger_slots && from_there < PER_ADDRESS
        {
            // A pod that may arrive to join an elastic job: served within the slots its room
            // allows, a few per address like a member's (one address cannot take them all),
            // authenticated like any.
            self.strangers_open += 1;
            *self.open.entry(ip).or_insert(0) += 1;
            return true;
        }
        if pods_there == 0 {
            if self.strangers_named.len() < STRANGERS_NAMED && self.strangers_named.insert(ip) {
                warn!("{}", stranger_refused(ip));
            }
            self.refused += 1;
            return false;
        }
        // Only member addresses get an entry: strangers must not grow the table.
        let open = self.open.entry(ip).or_insert(0);
        if *open >= PER_ADDRESS * pods_there {
            self.refused += 1;
            return false;
        }
        *open += 1;
        true
    }

    async fn run(mut self, mut listener: Box<dyn Listener>, mut ends: Ends) {
        let (from_links_tx, mut from_links) = mpsc::unbounded_channel::<FromLink>();
        let mut connections = JoinSet::new();
        let mut ticks = tokio::time::interval(Duration::from_millis(250));
        let mut refusals = tokio::time::interval(Duration::from_secs(60));
        let mut next_link = 0u64;
        let first = std::mem::take(&mut self.first);
        self.carry_out(first, &ends);
        while !self.core.stopped() {
            let effects = tokio::select! {
                accepted = listener.accept() => {
                    let (reader, writer, peer) = match accepted {
                        Ok(accepted) => accepted,
                        // Out of file descriptors, say: do not spin on it.
                        Err(e) => {
                            debug!("control channel: accept failed: {e}");
                            sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    if !self.admit(peer.ip()) {
                        // Closed at once; counted, not logged one by one (a flood would
                        // bury the trainers' output).
                        drop((reader, writer));
                        continue;
                    }
                    next_link += 1;
                    let link = next_link;
                    let (shared, to_me) = (self.shared.clone(), from_links_tx.clone());
                    connections.spawn(async move {
                        let why = serve(&shared, link, (reader, writer), peer, &to_me).await;
                        let _ = to_me.send(FromLink::Ended { link, ip: peer.ip(), pod: why.0, why: why.1 });
                    });
                    continue;
                }
                Some(report) = from_links.recv() => match self.on_link(report) {
                    Some(input) => self.core.step(input),
                    None => continue,
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                request = ends.requests.recv() => match request {
                    Some(request) => self.core.step(Input::Own(request)),
                    // The launcher is gone: close.
                    None => self.core.step(Input::Own(Request::Finish { succeeded: false })),
                },
                _ = ticks.tick() => {
                    let mut effects = self.core.step(Input::Tick(Instant::now()));
                    if ends.progress.has_changed().unwrap_or(false) {
                        if let Some((step, last, behind)) = *ends.progress.borrow_and_update() {
                            effects.extend(self.core.step(Input::OwnProgress { step, last, behind }));
                        }
                    }
                    effects
                }
                _ = refusals.tick() => {
                    let refused = std::mem::take(&mut self.refused);
                    if refused > 0 {
                        warn!("control channel: refused {refused} connections from addresses that are not the job's pods, or too many from one");
                    }
                    continue;
                }
            };
            self.carry_out(effects, &ends);
        }
        // Dropping the senders lets each connection write what is queued, then end: those of
        // the links joined but not yet seen (queued reports) too.
        self.senders.clear();
        drop(listener);
        drop(from_links);
        let _ = timeout(FLUSH, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        debug!(
            "control channel: closed; {} bytes of messages sent to the followers (heartbeats aside)",
            self.shared.sent.load(Ordering::Relaxed)
        );
    }

    /// A connection's report, as the core's input; None when it is the shell's alone.
    fn on_link(&mut self, report: FromLink) -> Option<Input> {
        match report {
            FromLink::Joined {
                link,
                pod,
                view,
                who,
                terms,
                to_link,
            } => {
                self.senders.insert(link, to_link);
                Some(Input::Joined {
                    link,
                    pod,
                    view,
                    who,
                    terms,
                })
            }
            FromLink::Progress {
                link,
                pod,
                step,
                quiet,
                at,
                behind,
            } => Some(Input::Progress {
                link,
                pod,
                step,
                quiet,
                at,
                behind,
            }),
            FromLink::Said { link, pod, message } => Some(Input::Said { link, pod, message }),
            FromLink::Ended { link, ip, pod, why } => {
                if let Some(open) = self.open.get_mut(&ip) {
                    *open = open.saturating_sub(1);
                }
                if at_address_is_none(&self.shared.others, ip) {
                    self.strangers_open = self.strangers_open.saturating_sub(1);
                    if self.open.get(&ip) == Some(&0) {
                        self.open.remove(&ip);
                    }
                }
                self.senders.remove(&link);
                let Some(pod) = pod else {
                    warn!("control channel: closed the connection from {ip}: {why}");
                    return None;
                };
                Some(Input::Ended { link, pod, why })
            }
        }
    }

    fn carry_out(&mut self, effects: Vec<Effect>, ends: &Ends) {
        for effect in effects {
            match effect {
                // One encoding for every link.
                Effect::Broadcast(message) => {
                    let encoded = Encoded::new(&message);
                    for link in self.core.links.values() {
                        if let Some(sender) = self.senders.get(link) {
                            let _ = sender.send(encoded.clone());
                        }
                    }
                }
                Effect::Send { link, message } => {
                    if let Some(sender) = self.senders.get(&link) {
                        let _ = sender.send(Encoded::new(&message));
                    }
                }
                Effect::Close(link) => {
                    self.senders.remove(&link);
                }
                Effect::Hear(heard) => ends.hear(heard),
                Effect::KnowsLost {
                    restart,
                    reason,
                    hang,
                    preempted,
                    grown,
                } => {
                    ends.knows_cause(Cause {
                        reason,
                        hang,
                        preempted,
                        grown,
                    });
                    ends.knows_lost(restart);
                }
                Effect::KnowsVerdict { restart } => ends.knows_verdict(restart),
                Effect::Checkpoint(reason) => ends.checkpoint(reason),
                Effect::Served(pod) => ends.served(&pod),
                // Each pod once, however often it knocks.
                Effect::Absent(pods) => ends
                    .left_out
                    .send_modify(|left| once_each(&mut left.silent, pods)),
                Effect::TurnedAway(pods) => ends
                    .left_out
                    .send_modify(|left| once_each(&mut left.turned_away, pods)),
                Effect::JobSucceeded => {
                    ends.succeeded.send_replace(true);
                }
                Effect::Stop => {}
            }
        }
    }
}

/// What the log says of a connection from an address that is no member's.
fn stranger_refused(ip: IpAddr) -> String {
    let istio = [
        IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 6)),
        IpAddr::V6(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
    ];
    let sidecar = match ip {
        ip if istio.contains(&ip) => " (a sidecar proxy such as Istio's forwards connections from 127.0.0.6 or ::6: keep the control port out of the mesh with the annotations traffic.sidecar.istio.io/excludeInboundPorts and excludeOutboundPorts, as `manifest` does)",
        _ => "",
    };
    format!("control channel: refused a connection from {ip}: not the address of a pod of this job{sidecar}")
}

/// How one coordinator-follower link beats and when it counts as silent, when the two
/// launchers were given different heartbeat timeouts: neither ever judges the other by a
/// shorter timeout than the other beats for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LinkTimeouts {
    /// How often the coordinator beats: a third of the smaller timeout (the follower's
    /// judgement of the coordinator).
    beat_every: Duration,
    /// When the coordinator counts the follower silent: the larger timeout (the follower beats
    /// at a third of its own).
    silent_after: Duration,
}

impl LinkTimeouts {
    fn agree(own: Duration, follower_ms: u64) -> LinkTimeouts {
        let follower = match follower_ms {
            0 => own,
            ms => Duration::from_millis(ms),
        };
        LinkTimeouts {
            beat_every: own.min(follower) / 3,
            silent_after: own.max(follower),
        }
    }
}

/// One follower's connection: challenge, hello (naming the member of this address), then
/// heartbeats both ways until it ends. Returns the pod (once known) and why it ended.
async fn serve(
    shared: &Shared,
    link: u64,
    (mut reader, mut writer): (Reader, Writer),
    peer: SocketAddr,
    to_coordinator: &mpsc::UnboundedSender<FromLink>,
) -> (Option<String>, WireError) {
    let server = match nonce() {
        Ok(server) => server,
        Err(e) => return (None, e),
    };
    let greeted = async {
        timeout(HANDSHAKE, writer.write_all(&server))
            .await
            .map_err(|_| WireError::Io("no room to send the challenge".into()))?
            .map_err(io)?;
        let mut client = [0u8; NONCE_LEN];
        let no_hello = || WireError::Io(format!("no hello within {} s", HANDSHAKE.as_secs()));
        timeout(HANDSHAKE, reader.read_exact(&mut client))
            .await
            .map_err(|_| no_hello())?
            .map_err(io)?;
        let challenge = both(server, client);
        let mut session = Session::new(&shared.secret, challenge, true);
        let hello = timeout(HANDSHAKE, session.read(&mut reader))
            .await
            .map_err(|_| no_hello())??;
        let ledger = hello.ledger();
        let Message::Hello {
            pod,
            view,
            heartbeat_ms,
            who,
            nproc_per_pod,
            ..
        } = hello
        else {
            return Err(WireError::Malformed(
                "the first frame is not a hello".into(),
            ));
        };
        if !heartbeat_said_fits(heartbeat_ms) {
            return Err(WireError::Malformed(format!(
                "a heartbeat timeout of {heartbeat_ms} ms, outside 1 s to 7 days"
            )));
        }
        // A follower without a pod name is known by its address, when that is one pod's.
        let at_address: Vec<&PodAddress> =
            shared.others.iter().filter(|m| m.ip == peer.ip()).collect();
        let member = match pod.as_str() {
            "" if at_address.len() == 1 => Some(at_address[0]),
            "" => None,
            name => at_address.into_iter().find(|m| m.name == name),
        };
        let name = match member {
            Some(member) => member.name.clone(),
            // An elastic job's arrival: the name it says (the job's secret vouches for it;
            // the API decides whether it trains, at the next start).
            None if shared.admits_arrivals
                && at_address_is_none(&shared.others, peer.ip())
                && !shared.others.iter().any(|m| m.name == pod)
                && pod.len() <= 253
                && crate::selector::is_dns_subdomain(&pod) =>
            {
                pod.clone()
            }
            None => {
                return Err(WireError::Malformed(format!(
                    "{pod} is not a member of this job at {}",
                    peer.ip()
                )))
            }
        };
        let terms = Terms {
            // Some: the frame is a hello.
            ledger: ledger.unwrap_or(Ledger::first(0)),
            nproc_per_pod,
        };
        Ok((challenge, session, name, view, heartbeat_ms, who, terms))
    };
    let (challenge, session, pod, view, heartbeat_ms, who, terms) = match greeted.await {
        Ok(greeted) => greeted,
        Err(e) => return (None, e),
    };
    let (to_link, mut rx) = mpsc::unbounded_channel();
    let _ = to_coordinator.send(FromLink::Joined {
        link,
        pod: pod.clone(),
        view,
        who: cut(&who),
        terms,
        to_link,
    });
    let timeouts = LinkTimeouts::agree(shared.heartbeat_timeout, heartbeat_ms);
    if heartbeat_ms != 0 && Duration::from_millis(heartbeat_ms) != shared.heartbeat_timeout {
        warn!(
            "control channel: {pod} was given a heartbeat timeout of {:.1} s and this launcher {:.1} s (PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT): its link beats for the shorter and is judged by the longer",
            Duration::from_millis(heartbeat_ms).as_secs_f64(),
            shared.heartbeat_timeout.as_secs_f64()
        );
    }
    let why = talk(
        shared,
        timeouts,
        link,
        &pod,
        challenge,
        session,
        reader,
        &mut writer,
        &mut rx,
        to_coordinator,
    )
    .await;
    (Some(pod), why)
}

/// A joined follower's connection, until it ends (the reason). Whatever the coordinator
/// queued goes out first, so a `Lost` or `Bye` is written before the connection closes.
#[allow(clippy::too_many_arguments)]
async fn talk(
    shared: &Shared,
    timeouts: LinkTimeouts,
    link: u64,
    pod: &str,
    challenge: Challenge,
    reading: Session,
    reader: Reader,
    writer: &mut Writer,
    rx: &mut mpsc::UnboundedReceiver<Arc<Encoded>>,
    to_coordinator: &mpsc::UnboundedSender<FromLink>,
) -> WireError {
    let limit = timeouts.silent_after;
    let (mut incoming, _reader) = frames(reading, reader);
    let mut out = Session::new(&shared.secret, challenge, true);
    let mut beat = tokio::time::interval(timeouts.beat_every);
    let mut idle_until = Instant::now() + limit;
    // Progress reports go on to the coordinator at most this often: a member that sends them
    // faster (a flood, with the secret) costs its link task, not the one loop that decides.
    let report_every = timeouts.beat_every / 2;
    let mut reported: Option<Instant> = None;
    loop {
        let result = tokio::select! {
            biased;
            message = rx.recv() => match message {
                Some(encoded) => {
                    shared.sent.fetch_add(encoded.frame_len(), Ordering::Relaxed);
                    out.write_encoded(writer, &encoded, limit).await
                }
                // The coordinator let go of this link: it said all there was to say.
                None => {
                    close_gracefully(writer, &mut incoming).await;
                    return WireError::Closed;
                }
            },
            frame = incoming.recv() => match frame {
                Some(Ok(Message::Beat)) => {
                    idle_until = Instant::now() + limit;
                    Ok(())
                }
                Some(Ok(Message::Progress { step, quiet_ms, behind })) => {
                    let at = Instant::now();
                    idle_until = at + limit;
                    if reported.is_none_or(|last| at.duration_since(last) >= report_every) {
                        reported = Some(at);
                        let quiet = Duration::from_millis(quiet_ms);
                        let _ = to_coordinator.send(FromLink::Progress { link, pod: pod.to_string(), step, quiet, at, behind });
                    }
                    Ok(())
                }
                Some(Ok(message)) if is_report(&message) => {
                    idle_until = Instant::now() + limit;
                    let _ = to_coordinator.send(FromLink::Said { link, pod: pod.to_string(), message });
                    Ok(())
                }
                Some(Ok(other)) => Err(WireError::Malformed(format!("{other:?} from {pod}"))),
                Some(Err(e)) => Err(e),
                None => Err(WireError::Closed),
            },
            _ = tokio::time::sleep_until(idle_until) => Err(WireError::Silent(limit.as_secs())),
            _ = beat.tick() => out.write(writer, &Message::Beat, limit).await,
        };
        if let Err(why) = result {
            // A write that failed because the follower has just closed (after its last word)
            // must not hide what it said: whatever was already read is told first.
            let said_last = last_words(&mut incoming, link, pod, to_coordinator);
            let _ = timeout(LAST_WORDS, said_last).await;
            return why;
        }
    }
}

/// What a follower says that the coordinator decides on (besides its heartbeats): the same on
/// a live link and in a failed link's last words.
fn is_report(message: &Message) -> bool {
    matches!(
        message,
        Message::Done | Message::Failed { .. } | Message::Stopped | Message::Preempted { .. }
    )
}

/// A failed link's last words: every report its follower had already sent, told to the
/// coordinator in order, until the frames end.
async fn last_words(
    incoming: &mut mpsc::Receiver<Result<Message, WireError>>,
    link: u64,
    pod: &str,
    to_coordinator: &mpsc::UnboundedSender<FromLink>,
) {
    while let Some(Ok(message)) = incoming.recv().await {
        if is_report(&message) {
            let _ = to_coordinator.send(FromLink::Said {
                link,
                pod: pod.to_string(),
                message,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    /// Two launchers given different heartbeat timeouts: the link beats often enough for the
    /// stricter and is judged by the more patient, so neither takes the other for silent.
    /// A hello's heartbeat timeout: unsaid, or from 1 s to 7 days (what the option allows).
    #[test]
    fn a_hellos_heartbeat_timeout_is_within_what_the_option_allows() {
        let week = 7 * 24 * 3600 * 1000;
        let cases = [
            (0, true),
            (1, false),
            (999, false),
            (1000, true),
            (week, true),
            (week + 1, false),
            (u64::MAX, false),
        ];
        for (ms, fits) in cases {
            assert_eq!(heartbeat_said_fits(ms), fits, "{ms} ms");
        }
    }

    #[test]
    fn a_link_beats_for_the_shorter_timeout_and_is_judged_by_the_longer() {
        let s = Duration::from_secs;
        for (own, follower, beat, silent) in [
            (s(2), 30_000, s(2) / 3, s(30)),
            (s(30), 2_000, s(2) / 3, s(30)),
            (s(9), 9_000, s(3), s(9)),
            // An older follower that did not say: the coordinator's own.
            (s(9), 0, s(3), s(9)),
        ] {
            let agreed = LinkTimeouts::agree(own, follower);
            assert_eq!(agreed.beat_every, beat, "{own:?} / {follower} ms");
            assert_eq!(agreed.silent_after, silent, "{own:?} / {follower} ms");
        }
    }

    fn member(name: &str, ip: &str) -> PodAddress {
        PodAddress {
            name: name.into(),
            ip: ip.parse().unwrap(),
        }
    }

    /// Only member addresses are served, and only a few connections each.
    #[test]
    fn connections_are_admitted_from_member_addresses_only_and_a_few_each() {
        let members = vec![member("me", "10.0.0.1"), member("a", "10.0.0.2")];
        let mut coordinator = Coordinator::new(joining(&members, 0, 0, 0));
        let stranger: IpAddr = "10.9.9.9".parse().unwrap();
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(!coordinator.admit(stranger));
        assert!(
            !coordinator.admit("10.0.0.1".parse().unwrap()),
            "its own address"
        );
        assert!(coordinator.admit(a) && coordinator.admit(a));
        assert!(!coordinator.admit(a), "a third connection from one pod");
        assert_eq!(coordinator.refused, 3);
        // Two pods on one address (hostNetwork): a few connections each.
        let shared = vec![
            member("me", "10.0.0.1"),
            member("b", "10.0.0.3"),
            member("c", "10.0.0.3"),
        ];
        let mut coordinator = Coordinator::new(joining(&shared, 0, 0, 0));
        let both: IpAddr = "10.0.0.3".parse().unwrap();
        let admitted = (0..6).filter(|_| coordinator.admit(both)).count();
        assert_eq!(admitted, 4);
        // A flood of strangers: each refused, the first eight named once each (the log line),
        // the rest only counted; a stranger seen again is not named again.
        let mut coordinator = Coordinator::new(joining(&members, 0, 0, 0));
        for i in 0..20u8 {
            let ip = IpAddr::from([10, 9, 9, i]);
            assert!(!coordinator.admit(ip) && !coordinator.admit(ip));
        }
        assert_eq!(coordinator.refused, 40);
        let named: Vec<IpAddr> = (0..8u8).map(|i| IpAddr::from([10, 9, 9, i])).collect();
        assert_eq!(
            coordinator.strangers_named,
            named.into_iter().collect::<std::collections::HashSet<_>>()
        );
    }

    /// A link that failed tells every report its follower had sent before the end, the
    /// preemption too: dropped, a preempted pod's end would count as a failure.
    #[tokio::test]
    async fn a_failed_links_last_words_keep_every_report() {
        let said = [
            Message::Beat,
            Message::Preempted {
                reason: "pod p-1: preempted (SIGTERM while training)".into(),
            },
            Message::Failed {
                reason: "pod p-1: stopped".into(),
                restartable: true,
                hang: false,
            },
            Message::Stopped,
            Message::Done,
        ];
        let (frames, mut incoming) = mpsc::channel(8);
        for message in said.iter().cloned() {
            frames.send(Ok(message)).await.unwrap();
        }
        drop(frames);
        let (to_coordinator, mut told) = mpsc::unbounded_channel();
        last_words(&mut incoming, 7, "p-1", &to_coordinator).await;
        let mut reports = Vec::new();
        while let Ok(FromLink::Said { link, pod, message }) = told.try_recv() {
            assert_eq!((link, pod.as_str()), (7, "p-1"));
            reports.push(message);
        }
        assert_eq!(reports, said[1..].to_vec());
    }

    #[test]
    fn a_view_names_the_members_and_their_addresses_in_any_order() {
        let one = [member("a", "10.0.0.2"), member("b", "10.0.0.3")];
        let swapped = [member("b", "10.0.0.3"), member("a", "10.0.0.2")];
        let moved = [member("a", "10.0.0.2"), member("b", "10.0.0.4")];
        assert_eq!(fingerprint(&one), fingerprint(&swapped));
        assert_ne!(fingerprint(&one), fingerprint(&moved));
    }

    /// An elastic job's coordinator serves addresses that are no member's, for pods that may
    /// arrive: a few per address, within the room the job has (one address cannot take every
    /// slot); without growth, none.
    #[test]
    fn an_elastic_coordinator_admits_a_few_arrivals_per_address_within_its_room() {
        let members = vec![member("me", "10.0.0.1"), member("a", "10.0.0.2")];
        let growing = |room| {
            let mut joining = joining(&members, 0, 0, 0);
            joining.growth = Some(Growing {
                core: Growth {
                    window: Duration::from_secs(60),
                    checkpoint_window: Duration::ZERO,
                },
                room,
            });
            Coordinator::new(joining)
        };
        let [x, y, z]: [IpAddr; 3] =
            ["10.9.9.1", "10.9.9.2", "10.9.9.3"].map(|ip| ip.parse().unwrap());
        let mut coordinator = growing(2);
        assert!(coordinator.admit(x) && coordinator.admit(x));
        assert!(!coordinator.admit(x), "a third connection from one address");
        assert!(coordinator.admit(y) && coordinator.admit(y));
        assert!(!coordinator.admit(z), "beyond the room the job has");
        let mut coordinator = growing(0);
        assert!(!coordinator.admit(x), "a job at full size grows by nobody");
        let mut coordinator = Coordinator::new(joining(&members, 0, 0, 0));
        assert!(!coordinator.admit(x));
    }

    /// An arrival's connection that ends gives its place back, and its address leaves the
    /// table once none is open from it: two at a time from one address, never a third, and
    /// nothing kept of addresses that are gone.
    #[test]
    fn an_arrivals_ended_connection_gives_its_place_back_and_leaves_no_entry() {
        let members = vec![member("me", "10.0.0.1"), member("a", "10.0.0.2")];
        let mut joining = joining(&members, 0, 0, 0);
        joining.growth = Some(Growing {
            core: Growth {
                window: Duration::from_secs(60),
                checkpoint_window: Duration::ZERO,
            },
            room: 1,
        });
        let mut coordinator = Coordinator::new(joining);
        let x: IpAddr = "10.9.9.1".parse().unwrap();
        let end = |link| FromLink::Ended {
            link,
            ip: x,
            pod: None,
            why: WireError::Closed,
        };
        assert!(coordinator.admit(x) && coordinator.admit(x));
        coordinator.on_link(end(1));
        assert!(coordinator.admit(x), "the place given back");
        assert!(!coordinator.admit(x), "a third connection from one address");
        coordinator.on_link(end(2));
        coordinator.on_link(end(3));
        assert!(coordinator.open.is_empty(), "{:?}", coordinator.open);
    }

    /// An elastic job's coordinator takes a hello from an address that is no member's as an
    /// arrival only under a name that is no member's: a pod claiming a member's name from
    /// elsewhere is turned away, before the start (the member itself then joins and starts)
    /// and while the job trains (the job does not grow); a pod of its own name is held and the
    /// job grows with it.
    #[tokio::test]
    async fn an_arrival_under_a_members_name_is_turned_away() {
        let members: Vec<PodAddress> = (0..2)
            .map(|i| member(&format!("p-{i}"), &format!("127.0.6.{}", 100 + i)))
            .collect();
        let port = free_port("127.0.6.100");
        let mut coordinating = joining(&members, 0, port, 0);
        coordinating.growth = Some(Growing {
            core: Growth {
                window: Duration::from_secs(1),
                checkpoint_window: Duration::ZERO,
            },
            room: 1,
        });
        let arriving = |name: &str| {
            let mut arrival = joining(&members, 1, port, 0);
            arrival.me = member(name, "127.0.6.102");
            arrival.view = String::new();
            arrival.members = Vec::new();
            arrival.membership = None;
            join(arrival)
        };
        let mut coordinator = join(coordinating).await.unwrap();
        let mut impostor = arriving("p-1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut follower = join(joining(&members, 1, port, 0)).await.unwrap();
        assert_eq!(started(&mut coordinator).await, 0);
        assert_eq!(started(&mut follower).await, 0);
        let told = timeout(Duration::from_millis(500), impostor.heard()).await;
        assert!(
            !matches!(told, Ok(Heard::Go { .. })),
            "a member's name from elsewhere was let in: {told:?}"
        );
        impostor.close().await;
        let mut losses = follower.losses();
        let _impostor = arriving("p-1").await.unwrap();
        let grew = timeout(Duration::from_secs(3), &mut losses).await;
        assert!(grew.is_err(), "the job grew by an impostor: {grew:?}");
        let _arrival = arriving("p-2").await.unwrap();
        let loss = timeout(WAIT, losses).await.expect("the job did not grow");
        assert!(
            loss.reason.starts_with("the job grows: p-2 joined"),
            "{loss:?}"
        );
    }

    /// `index` of `members` joins; the coordinator is member 0 on `port`.
    fn joining(members: &[PodAddress], index: usize, port: u16, next_epoch: u32) -> Joining {
        let coordinator = SocketAddr::new(members[0].ip, port);
        Joining {
            role: if index == 0 {
                Role::Coordinator {
                    listen: coordinator,
                }
            } else {
                Role::Follower {
                    coordinator,
                    recheck: None,
                }
            },
            secret: secret(),
            me: members[index].clone(),
            members: members.to_vec(),
            nproc_per_pod: 1,
            view: fingerprint(members),
            ledger: Ledger {
                epoch: next_epoch,
                ..Ledger::first(3)
            },
            heartbeat_timeout: Duration::from_secs(2),
            join_grace: Duration::from_secs(5),
            membership: Some(Membership::default()),
            ended: None,
            who: format!("pod {}", members[index].name),
            progress_check: Duration::ZERO,
            served: Served::default(),
            network: tcp(),
            growth: None,
        }
    }

    fn free_port(ip: &str) -> u16 {
        std::net::TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    const WAIT: Duration = Duration::from_secs(5);

    /// The epoch a `Go` names; a follower's comes with the coordinator's membership.
    async fn started(channel: &mut Channel) -> u32 {
        match heard(channel).await {
            Heard::Go { ledger, .. } => ledger.epoch,
            other => panic!("not a start: {other:?}"),
        }
    }

    async fn heard(channel: &mut Channel) -> Heard {
        timeout(Duration::from_secs(20), channel.heard())
            .await
            .expect("the channel said nothing")
    }

    /// Three launchers on their own loopback addresses (127.0.6.x): the coordinator and two
    /// followers that would start epochs `nexts`.
    async fn three(base: u8, nexts: [u32; 3]) -> (Vec<PodAddress>, Vec<Channel>) {
        three_with_budgets(base, nexts, [3, 3, 3]).await
    }

    async fn three_with_budgets(
        base: u8,
        nexts: [u32; 3],
        budgets: [u32; 3],
    ) -> (Vec<PodAddress>, Vec<Channel>) {
        let members: Vec<PodAddress> = (0..3)
            .map(|i| member(&format!("p-{i}"), &format!("127.0.6.{}", base + i as u8)))
            .collect();
        let port = free_port("127.0.6.1");
        let mut channels = Vec::new();
        for (i, (next_epoch, budget)) in nexts.into_iter().zip(budgets).enumerate() {
            let mut joining = joining(&members, i, port, next_epoch);
            joining.ledger.max_restarts = budget;
            channels.push(join(joining).await.unwrap());
        }
        (members, channels)
    }

    /// Three launchers, all started in epoch `next`.
    async fn three_started(base: u8, next_epoch: u32) -> Vec<Channel> {
        let (_, mut channels) = three(base, [next_epoch; 3]).await;
        for channel in &mut channels {
            assert_eq!(started(channel).await, next_epoch);
        }
        channels
    }

    /// Followers that start before the coordinator listens keep knocking within their join
    /// grace (refused connections, one line in ten seconds), then start with it: a coordinator
    /// slower to start is no reason to gather again.
    #[tokio::test]
    async fn followers_started_first_wait_for_the_coordinator() {
        let members: Vec<PodAddress> = (0..3)
            .map(|i| member(&format!("p-{i}"), &format!("127.0.6.{}", 180 + i)))
            .collect();
        let port = free_port("127.0.6.180");
        let mut followers = Vec::new();
        for i in 1..3 {
            followers.push(join(joining(&members, i, port, 0)).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        // Nothing reached yet: a loss seen meanwhile is the follower's own to regather on.
        assert!(followers.iter().all(|f| !f.said_hello()));
        let mut coordinator = join(joining(&members, 0, port, 0)).await.unwrap();
        assert_eq!(started(&mut coordinator).await, 0);
        for follower in &mut followers {
            assert_eq!(started(follower).await, 0);
            // From its hello on, only the coordinator may call the attempt off.
            assert!(follower.said_hello());
        }
    }

    /// Nobody starts before everyone is there, and all start the largest epoch anyone would:
    /// a replacement pod (next 0) joins survivors (next 2) in epoch 2.
    #[tokio::test]
    async fn everyone_starts_the_same_epoch_once_all_have_joined() {
        let (_, mut channels) = three(10, [2, 0, 2]).await;
        for channel in &mut channels {
            assert_eq!(started(channel).await, 2);
        }
    }

    /// A follower's failure reaches everyone at once, as a loss the job may restart from; once
    /// a member is done, a later loss is final.
    #[tokio::test]
    async fn a_failure_is_told_to_everyone_and_is_final_once_a_member_is_done() {
        let (_, mut channels) = three(20, [0, 0, 0]).await;
        for channel in &mut channels {
            assert_eq!(started(channel).await, 0);
        }
        channels[1]
            .failed(
                "pod p-1 (trainer 1): trainer exited with status 3",
                true,
                false,
                WAIT,
            )
            .await;
        let lost = Heard::Lost {
            reason: "pod p-1 (trainer 1): trainer exited with status 3".into(),
            restart: true,
            hang: false,
            preempted: false,
            grown: false,
        };
        assert_eq!(heard(&mut channels[0]).await, lost);
        assert_eq!(heard(&mut channels[2]).await, lost);
        assert!(channels.iter().all(Channel::may_restart));

        let (_, mut channels) = three(30, [1, 1, 1]).await;
        for channel in &mut channels {
            assert_eq!(started(channel).await, 1);
        }
        let mut done = channels.remove(2);
        done.finish(true).await;
        // The follower's Done is read before its connection's end: not a loss.
        sleep(Duration::from_millis(300)).await;
        channels[1]
            .failed(
                "pod p-1 (trainer 1): trainer exited with status 3",
                true,
                false,
                WAIT,
            )
            .await;
        // The failed follower has the answer before it decides.
        assert!(!channels[1].may_restart(), "the follower would restart");
        let Heard::Lost { restart, .. } = heard(&mut channels[0]).await else {
            panic!("not a loss")
        };
        assert!(!restart, "a restart after a member finished");
        assert!(!channels[0].may_restart());
    }

    /// The words a launcher says before it stops anything reach every launcher: a hang judged
    /// (every pod dumps its stacks), a process that failed for good (no restart), a preempted
    /// pod's window over (a free restart).
    #[tokio::test]
    async fn words_said_without_waiting_reach_everyone_at_once() {
        let channels = three_started(190, 0).await;
        channels[1].tell_hang("pod p-1: trainer made no progress for 60 s");
        for (i, mut channel) in channels.into_iter().enumerate().filter(|(i, _)| *i != 1) {
            let lost = heard(&mut channel).await;
            assert!(
                matches!(&lost, Heard::Lost { hang: true, restart: true, reason, .. } if reason.contains("p-1")),
                "launcher {i} heard {lost:?}"
            );
        }

        let channels = three_started(150, 0).await;
        let failure = "pod p-2: trainer id 5 exited with status 2";
        channels[2].failed(failure, false, false, WAIT).await;
        for mut channel in channels.into_iter().take(2) {
            let lost = heard(&mut channel).await;
            assert!(
                matches!(&lost, Heard::Lost { restart: false, hang: false, reason, .. } if reason.contains("trainer id 5")),
                "{lost:?}"
            );
        }

        let channels = three_started(230, 0).await;
        channels[1].preempted("pod p-1: preempted (SIGTERM while training)");
        channels[1].leaving("pod p-1: preempted: its checkpoint window is over");
        for mut channel in channels.into_iter().step_by(2) {
            assert!(
                matches!(
                    heard(&mut channel).await,
                    Heard::Lost {
                        preempted: true,
                        restart: true,
                        ..
                    }
                ),
                "not a preemption's end"
            );
        }
    }

    /// A member whose trainer succeeds just as another's failure goes out as a loss the job
    /// may restart from: the job cannot restart without it, and every launcher still deciding
    /// hears so, the one that failed included.
    #[tokio::test]
    async fn a_done_that_crosses_a_restartable_loss_makes_it_final() {
        for finisher in [0, 2] {
            let channels = three_started(70 + 10 * finisher as u8, 0).await;
            channels[1]
                .failed(
                    "pod p-1 (trainer 1): trainer exited with status 3",
                    true,
                    false,
                    WAIT,
                )
                .await;
            assert!(channels.iter().all(Channel::may_restart));
            channels[finisher].done();
            // Each launcher's decision, as `launch` takes it: once its children are stopped,
            // the coordinator's verdict, given when every launcher has stopped.
            let verdicts =
                futures::future::join_all(channels.iter().map(|c| c.verdict(WAIT))).await;
            assert_eq!(
                verdicts, [false; 3],
                "a launcher would restart although launcher {finisher} finished"
            );
        }
    }

    /// Said the moment a trainer succeeds, long before its launcher finishes (its pserver may
    /// linger): a failure after it is final.
    #[tokio::test]
    async fn a_done_said_before_the_launcher_finishes_makes_a_later_failure_final() {
        let mut channels = three_started(100, 0).await;
        channels[2].done();
        sleep(Duration::from_millis(300)).await;
        channels[1]
            .failed("pod p-1: trainer exited with status 3", true, false, WAIT)
            .await;
        assert!(
            !channels[1].may_restart(),
            "the failed follower would restart"
        );
        let Heard::Lost { restart, .. } = heard(&mut channels[0]).await else {
            panic!("not a loss")
        };
        assert!(!restart, "a restart without the member that finished");
    }

    /// The job restarts only while every member may: the smallest budget is the job's, sent
    /// with `Go`, and the coordinator's verdict says no restart once it is spent, or when the
    /// failure would recur.
    /// After a loss the job may restart from, each launcher that has stopped its children gets
    /// the coordinator's verdict once all have, not at its wait's bound.
    #[tokio::test]
    async fn the_verdict_comes_once_every_launcher_has_stopped() {
        let channels = three_started(220, 0).await;
        channels[1]
            .failed("pod p-1: trainer exited with status 3", true, false, WAIT)
            .await;
        let bound = Duration::from_secs(600);
        let waits = channels
            .iter()
            .map(|channel| timeout(Duration::from_secs(30), channel.verdict(bound)));
        for verdict in futures::future::join_all(waits).await {
            assert!(verdict.expect("no verdict before the wait's bound"));
        }
    }

    #[tokio::test]
    async fn one_budget_for_the_job_and_one_verdict_on_each_loss() {
        let (_, mut channels) = three_with_budgets(110, [1, 1, 1], [3, 1, 2]).await;
        for channel in &mut channels {
            assert!(matches!(
                heard(channel).await,
                Heard::Go {
                    ledger: Ledger {
                        epoch: 1,
                        max_restarts: 1,
                        ..
                    },
                    ..
                }
            ));
        }
        channels[2]
            .failed("pod p-2: trainer exited with status 3", true, false, WAIT)
            .await;
        assert!(!channels[2].may_restart(), "restart 2 of a budget of 1");
        assert!(matches!(
            heard(&mut channels[0]).await,
            Heard::Lost { restart: false, .. }
        ));

        let mut channels = three_started(120, 0).await;
        channels[1]
            .failed(
                "pod p-1: cannot start the trainer: no such file",
                false,
                false,
                WAIT,
            )
            .await;
        assert!(!channels[1].may_restart());
        assert!(matches!(
            heard(&mut channels[2]).await,
            Heard::Lost { restart: false, .. }
        ));
    }

    /// A follower whose launcher is gone (its connection closed without a word) is a loss at
    /// once, not after the heartbeat timeout.
    #[tokio::test]
    async fn a_follower_that_vanishes_is_a_loss_at_once() {
        let (_, mut channels) = three(40, [0, 0, 0]).await;
        for channel in &mut channels {
            assert_eq!(started(channel).await, 0);
        }
        let started = Instant::now();
        drop(channels.remove(2));
        let Heard::Lost {
            reason, restart, ..
        } = heard(&mut channels[0]).await
        else {
            panic!("not a loss")
        };
        assert!(restart);
        assert!(
            reason.contains("the launcher of peer pod p-2 closed the control connection"),
            "{reason}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "only the heartbeat timeout told"
        );
        assert!(matches!(heard(&mut channels[1]).await, Heard::Lost { .. }));
    }

    /// A pod its launcher saw lost through the API is decided by the coordinator, where `Go` is:
    /// before the start everyone gathers again; once `Go` is out, everyone hears the loss, one
    /// the job may restart from, so no follower runs an attempt the coordinator left alone.
    #[tokio::test]
    async fn a_pod_lost_is_decided_where_go_is_decided() {
        let members: Vec<PodAddress> = (0..3)
            .map(|i| member(&format!("p-{i}"), &format!("127.0.6.{}", 140 + i)))
            .collect();
        let port = free_port("127.0.6.140");
        let mut coordinator = join(joining(&members, 0, port, 0)).await.unwrap();
        assert!(coordinator.coordinates());
        // p-2 never joins: the coordinator is still gathering.
        let mut follower = join(joining(&members, 1, port, 0)).await.unwrap();
        assert!(!follower.coordinates());
        sleep(Duration::from_millis(300)).await;
        coordinator.pod_lost("peer pod p-2 was deleted".into());
        let regather = Heard::Regather("peer pod p-2 was deleted".into());
        assert_eq!(heard(&mut coordinator).await, regather);
        assert_eq!(heard(&mut follower).await, regather);

        let mut channels = three_started(130, 0).await;
        channels[0].pod_lost("peer pod p-2 was deleted".into());
        let lost = Heard::Lost {
            reason: "peer pod p-2 was deleted".into(),
            restart: true,
            hang: false,
            preempted: false,
            grown: false,
        };
        assert_eq!(heard(&mut channels[0]).await, lost);
        assert_eq!(heard(&mut channels[1]).await, lost);
    }

    /// A pod without the job secret takes a coordinator's port for a channel only when it
    /// sends a challenge and then waits: another server's banner, a refusal or a close is none.
    #[tokio::test]
    async fn a_channel_is_told_from_other_servers_by_its_challenge_and_silence() {
        let members: Vec<PodAddress> = (0..2)
            .map(|i| member(&format!("p-{i}"), &format!("127.0.6.{}", 160 + i)))
            .collect();
        let (from, host) = (members[1].ip, members[0].ip);
        let network = tcp();
        let probe = |at: SocketAddr| serves_a_channel(&network, from, at, WAIT);
        let port = free_port("127.0.6.160");
        let at = SocketAddr::new(host, port);
        assert!(!probe(at).await, "nothing listens");
        let _coordinator = join(joining(&members, 0, port, 0)).await.unwrap();
        assert!(probe(at).await, "a launcher's channel");

        let banner = tokio::net::TcpListener::bind((host, 0)).await.unwrap();
        let at = banner.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = banner.accept().await {
                let _ = stream.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
                sleep(Duration::from_secs(2)).await;
            }
        });
        assert!(!probe(at).await, "an SSH server");
    }

    /// A follower that found other pods than the coordinator did: everyone discovers again.
    #[tokio::test]
    async fn different_views_make_everyone_discover_again() {
        let members: Vec<PodAddress> = (0..2)
            .map(|i| member(&format!("p-{i}"), &format!("127.0.6.{}", 50 + i)))
            .collect();
        let port = free_port("127.0.6.50");
        let mut coordinator = join(joining(&members, 0, port, 0)).await.unwrap();
        let mut stale = joining(&members, 1, port, 0);
        stale.view = "an older view".into();
        let mut follower = join(stale).await.unwrap();
        assert!(
            matches!(heard(&mut coordinator).await, Heard::Regather(r) if r.contains("p-1 found other pods"))
        );
        assert!(matches!(heard(&mut follower).await, Heard::Regather(_)));
    }

    /// A hello without a pod name from an address two members share cannot be told for
    /// either: it is refused, and the job gathers again after the join grace.
    #[tokio::test]
    async fn a_nameless_hello_from_an_address_two_pods_share_is_refused() {
        // b and c on one address (hostNetwork); b says hello without its name.
        let members = vec![
            member("me", "127.0.6.200"),
            member("b", "127.0.6.201"),
            member("c", "127.0.6.201"),
        ];
        let port = free_port("127.0.6.200");
        let mut coordinator = join(joining(&members, 0, port, 0)).await.unwrap();
        let mut nameless = joining(&members, 1, port, 0);
        nameless.me.name = String::new();
        let mut b = join(nameless).await.unwrap();
        let mut c = join(joining(&members, 2, port, 0)).await.unwrap();
        // Which of the two it is cannot be told: it is never taken for either, so the job
        // cannot start and gathers again once the join grace is over.
        for channel in [&mut coordinator, &mut b, &mut c] {
            let heard = heard(channel).await;
            assert!(matches!(heard, Heard::Regather(_)), "{heard:?}");
        }
    }

    /// A follower that did not discover the pods (no view) and has no pod name: the coordinator
    /// knows it by its address and sends it the membership it found.
    #[tokio::test]
    async fn a_follower_without_a_view_gets_the_coordinators_membership() {
        let members: Vec<PodAddress> = (0..2)
            .map(|i| member(&format!("p-{i}"), &format!("127.0.6.{}", 60 + i)))
            .collect();
        let found = Membership {
            pservers: Vec::new(),
            trainers: members
                .iter()
                .enumerate()
                .map(|(rank, m)| crate::membership::Member {
                    name: m.name.clone(),
                    ip: m.ip,
                    rank,
                })
                .collect(),
        };
        let port = free_port("127.0.6.60");
        let mut coordinating = joining(&members, 0, port, 0);
        coordinating.membership = Some(found.clone());
        let mut coordinator = join(coordinating).await.unwrap();
        let mut asking = joining(&members, 1, port, 0);
        asking.view = String::new();
        asking.me.name = String::new();
        asking.members = Vec::new();
        asking.membership = None;
        let mut follower = join(asking).await.unwrap();
        assert_eq!(started(&mut coordinator).await, 0);
        assert_eq!(
            heard(&mut follower).await,
            Heard::Go {
                membership: Some(found),
                ledger: Ledger {
                    epoch: 0,
                    max_restarts: 3,
                    preemptions: 0,
                    max_preemptions: crate::verdict::UNBOUNDED_PREEMPTIONS,
                    grows: 0
                },
            }
        );
    }
}
