//! The job's control channel: every launcher keeps one authenticated TCP connection to the
//! coordinating launcher, over which the job agrees when to start (`Go`, with the agreed
//! `Ledger`), notices a silent or gone launcher within the heartbeat timeout, learns the first
//! failure anywhere (`Failed`, `Lost`) and gets one verdict on a restart. The protocol and its
//! threat model are in docs/control-channel.md. The decisions are pure machines
//! (`coordinator::Core`, `following::Following`, the words they share in `heard`), simulated in
//! `simulation`; this module is the channel's API and the tasks around them.

mod serve;
use std::collections::BTreeSet;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tracing::{info, Instrument};

use crate::config::Secret;
use crate::ledger::Ledger;
use crate::loss::Loss;
use crate::membership::{Membership, PodAddress, Served};

use paddle_launcher_core::control::coordinator;
mod cost;
mod follower;
use paddle_launcher_core::control::following;
pub(crate) use paddle_launcher_core::control::heard;
use paddle_launcher_core::control::message;
mod net;
mod news;
#[cfg(test)]
pub(crate) mod sim_net;
#[cfg(test)]
mod simulation;
mod wire;

#[cfg(test)]
pub use coordinator::GROWS;
pub use coordinator::{Growth, TURNED_AWAY};
pub use cost::{
    measure_coordinator, measure_heartbeats, measure_progress, CoordinatorCost, HeartbeatCost,
    ProgressCost,
};

use follower::follow;
pub use follower::serves_a_channel;
use heard::Request;
pub use heard::{Attendance, ChannelState, Heard, Known};
use message::cut;
pub use message::Message;
pub use net::{tcp, Net};
pub use news::{Gauges, JobNews, RankGauge, Reporting, NO_STEP};
pub use wire::Session;

/// Writes what a pure machine of the channel said for the log.
fn write_log(lines: Vec<heard::LogLine>) {
    for line in lines {
        match line {
            heard::LogLine::Info(line) => info!("{line}"),
            heard::LogLine::Warn(line) => tracing::warn!("{line}"),
        }
    }
}

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
pub enum ChannelRole {
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
    pub role: ChannelRole,
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
    /// What the job reports of its progress, and where.
    pub reporting: Reporting,
}

/// An elastic job's coordinator: how it grows the job, and the pods it may grow by (the job's
/// pod count less the members): connections from addresses that are no member's are served,
/// at most `LINKS_PER_ADDRESS` for each pod it may grow by, all of them authenticated like any.
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
    /// What the channel has made known so far: its one state, as its task publishes it.
    state: watch::Receiver<ChannelState>,
    coordinates: bool,
    progress: watch::Sender<Progress>,
    /// This launcher's trainer processes' progress, read at each heartbeat.
    gauges: Gauges,
    /// This launcher's end of the attempt is told (`tell_end`).
    told_end: AtomicBool,
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
    /// next round (none otherwise); after an attempt's verdict, the pods it heard alive then.
    pub fn attendance(&self) -> Attendance {
        self.state.borrow().attendance.clone()
    }

    /// After `Go`: a future of the first loss the channel reports.
    pub fn losses(&mut self) -> BoxFuture<'static, Loss> {
        let heard = self.heard.take();
        async move {
            if let Some(mut heard) = heard {
                while let Some(heard) = heard.recv().await {
                    if let Heard::Lost(loss) = heard {
                        return loss;
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
        let mut state = self.state.clone();
        async move {
            if state.wait_for(|known| known.succeeded).await.is_err() {
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
        let mut state = self.state.clone();
        async move {
            let reason = match state.wait_for(|known| known.checkpoint.is_some()).await {
                Ok(known) => known.checkpoint.clone(),
                Err(_) => None,
            };
            match reason {
                Some(reason) => reason,
                None => std::future::pending().await,
            }
        }
        .boxed()
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
        self.state.borrow().may_restart
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
        let mut state = self.state.clone();
        let decided = match timeout(limit, state.wait_for(|known| known.verdict.is_some())).await {
            Ok(Ok(known)) => known.verdict,
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
        self.state.borrow().said_hello
    }

    /// The channel's state, to be read while the channel is borrowed elsewhere.
    pub fn state_watch(&self) -> watch::Receiver<ChannelState> {
        self.state.clone()
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

    /// Tells the job how this launcher's attempt ended (a follower tells the coordinator, which
    /// tells everyone; the coordinator tells everyone): a `Failure`, with whether a restart
    /// could mend it (a preempted pod leaving is one, which the coordinator judges its
    /// preemption's), or a `Hang` of its trainer (the coordinator names the rank the progress
    /// points at and has every launcher dump its stacks). Said at once, and once an attempt:
    /// the first end told is the one the job hears (a later one would change nothing there),
    /// so that the lifecycle's word before the siblings' stop and the attempt loop's after
    /// the run are one telling. Returns the wait, of at most `wait`, for the job's answer:
    /// whether it may restart (`may_restart` then says) depends on what the others did, e.g.
    /// a pod that already finished. A coordinator that does not answer leaves it as it was.
    pub fn tell_end(&self, ended: Loss, wait: Duration) -> impl Future<Output = ()> + 'static {
        if !self.told_end.swap(true, Ordering::Relaxed) {
            let _ = self.requests.send(Request::Failed(Loss {
                reason: cut(&ended.reason),
                ..ended
            }));
        }
        let mut state = self.state.clone();
        async move {
            let _ = timeout(wait, state.wait_for(|known| known.lost)).await;
        }
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
    /// What the channel has made known so far, as it stands now.
    pub fn state(&self) -> ChannelState {
        self.state.borrow().clone()
    }

    /// This launcher's trainer's progress, for the coordinator's judgement of a hang: sent
    /// with the follower's heartbeats, read by the coordinator's task on its ticks.
    /// `behind`: of several trainer processes, the trainer id of the one these are of.
    pub fn report_progress(&self, step: Option<u64>, last: Instant, behind: Option<u32>) {
        self.progress.send_replace(Some((step, last, behind)));
    }

    /// The attempt's trainer processes, whose progress each heartbeat carries from now on.
    pub fn watch_ranks(&self, gauges: Vec<RankGauge>) {
        *self.gauges.lock().unwrap_or_else(|p| p.into_inner()) = gauges;
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

/// The clock the channel's machines are given: tokio's (paused in the simulations and tests
/// that pause it), as the core's `std::time::Instant`.
pub(crate) fn clock() -> std::time::Instant {
    Instant::now().into_std()
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
    let coordinates = matches!(joining.role, ChannelRole::Coordinator { .. });
    let (state_tx, state) = watch::channel(ChannelState {
        coordinates,
        ..ChannelState::default()
    });
    let (progress_tx, progress_rx) = watch::channel(None);
    let gauges = Gauges::default();
    let ends = Ends {
        gauges: gauges.clone(),
        served: joining.served.clone(),
        progress: progress_rx,
        heard: heard_tx,
        requests: requests_rx,
        state: state_tx,
    };
    let limit = joining.heartbeat_timeout.as_secs();
    let task = match joining.role {
        ChannelRole::Coordinator { listen } => {
            let listener = joining.network.0.listen(listen).await?;
            info!(
                "control channel: coordinating {} on {listen} (heartbeat timeout {limit} s)",
                crate::vocabulary::count(joining.members.len(), "launcher")
            );
            let coordinator = Coordinator::new(joining);
            tokio::spawn(coordinator.run(listener, ends).in_current_span())
        }
        ChannelRole::Follower {
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
        state,
        coordinates,
        progress: progress_tx,
        gauges,
        told_end: AtomicBool::new(false),
    })
}

/// The task's side of a `Channel`.
struct Ends {
    heard: mpsc::UnboundedSender<Heard>,
    requests: mpsc::UnboundedReceiver<Request>,
    /// The channel's one state, published whole.
    state: watch::Sender<ChannelState>,
    /// This launcher's trainer's progress, as last reported.
    progress: watch::Receiver<Progress>,
    /// This launcher's trainer processes' progress (`Channel::watch_ranks`).
    gauges: Gauges,
    /// The members that served their part (`Served`), for the API watch of the peers.
    served: Served,
}

impl Ends {
    /// A member has served its part: the API watch of the peers ignores its pod's end.
    fn served(&self, pod: &str) {
        info!("control channel: {pod} has served its part: its pod's end is no loss to the job");
        self.served.insert(pod);
    }

    /// What the channel hears, in order with the attempt's start and end; a loss is known
    /// at once too.
    fn hear(&self, heard: Heard) {
        if let Heard::Lost(loss) = &heard {
            self.know(Known::Lost(loss.clone()));
        }
        let _ = self.heard.send(heard);
    }

    /// What one of the channel's machines made known: the state changes by its rules, and is
    /// published if it did.
    fn know(&self, known: Known) {
        self.state.send_if_modified(|state| state.know(known));
    }
}
use serve::Coordinator;

#[cfg(test)]
mod tests {
    use super::message::WireError;
    use super::serve::{heartbeat_said_fits, last_words, Coordinator, FromLink, LinkTimeouts};
    use super::*;
    use crate::loss::Kind;
    use tokio::io::AsyncWriteExt;
    use tokio::time::sleep;

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
            Message::beat(),
            Message::Preempted {
                reason: "pod p-1: preempted (SIGTERM while training)".into(),
            },
            Message::Failed(Loss {
                reason: "pod p-1: stopped".into(),
                restart: true,
                kind: Kind::Failure,
            }),
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
        while let Ok(FromLink::Heard(coordinator::Input::Said { link, pod, message })) =
            told.try_recv()
        {
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
                ChannelRole::Coordinator {
                    listen: coordinator,
                }
            } else {
                ChannelRole::Follower {
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
            reporting: Reporting::default(),
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
            .tell_end(
                Loss {
                    reason: "pod p-1 (trainer 1): trainer exited with status 3".into(),
                    restart: true,
                    kind: Kind::Failure,
                },
                WAIT,
            )
            .await;
        let lost = Heard::Lost(Loss {
            reason: "pod p-1 (trainer 1): trainer exited with status 3".into(),
            restart: true,
            kind: Kind::Failure,
        });
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
            .tell_end(
                Loss {
                    reason: "pod p-1 (trainer 1): trainer exited with status 3".into(),
                    restart: true,
                    kind: Kind::Failure,
                },
                WAIT,
            )
            .await;
        // The failed follower has the answer before it decides.
        assert!(!channels[1].may_restart(), "the follower would restart");
        let Heard::Lost(Loss { restart, .. }) = heard(&mut channels[0]).await else {
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
        channels[1]
            .tell_end(
                Loss {
                    reason: "pod p-1: trainer made no progress for 60 s".into(),
                    restart: true,
                    kind: Kind::Hang,
                },
                Duration::ZERO,
            )
            .await;
        for (i, mut channel) in channels.into_iter().enumerate().filter(|(i, _)| *i != 1) {
            let lost = heard(&mut channel).await;
            assert!(
                matches!(&lost, Heard::Lost(Loss { kind: Kind::Hang, restart: true, reason, .. }) if reason.contains("p-1")),
                "launcher {i} heard {lost:?}"
            );
        }

        let channels = three_started(150, 0).await;
        let failure = "pod p-2: trainer id 5 exited with status 2";
        channels[2]
            .tell_end(
                Loss {
                    reason: failure.to_string(),
                    restart: false,
                    kind: Kind::Failure,
                },
                WAIT,
            )
            .await;
        for mut channel in channels.into_iter().take(2) {
            let lost = heard(&mut channel).await;
            assert!(
                matches!(&lost, Heard::Lost(Loss { restart: false, kind: Kind::Failure, reason, .. }) if reason.contains("trainer id 5")),
                "{lost:?}"
            );
        }

        let channels = three_started(230, 0).await;
        channels[1].preempted("pod p-1: preempted (SIGTERM while training)");
        channels[1]
            .tell_end(
                Loss::of_pod("pod p-1: preempted: its checkpoint window is over".into()),
                Duration::ZERO,
            )
            .await;
        for mut channel in channels.into_iter().step_by(2) {
            assert!(
                matches!(
                    heard(&mut channel).await,
                    Heard::Lost(Loss {
                        kind: Kind::Preemption,
                        restart: true,
                        ..
                    })
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
                .tell_end(
                    Loss {
                        reason: "pod p-1 (trainer 1): trainer exited with status 3".into(),
                        restart: true,
                        kind: Kind::Failure,
                    },
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
            .tell_end(
                Loss {
                    reason: "pod p-1: trainer exited with status 3".into(),
                    restart: true,
                    kind: Kind::Failure,
                },
                WAIT,
            )
            .await;
        assert!(
            !channels[1].may_restart(),
            "the failed follower would restart"
        );
        let Heard::Lost(Loss { restart, .. }) = heard(&mut channels[0]).await else {
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
            .tell_end(
                Loss {
                    reason: "pod p-1: trainer exited with status 3".into(),
                    restart: true,
                    kind: Kind::Failure,
                },
                WAIT,
            )
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
            .tell_end(
                Loss {
                    reason: "pod p-2: trainer exited with status 3".into(),
                    restart: true,
                    kind: Kind::Failure,
                },
                WAIT,
            )
            .await;
        assert!(!channels[2].may_restart(), "restart 2 of a budget of 1");
        assert!(matches!(
            heard(&mut channels[0]).await,
            Heard::Lost(Loss { restart: false, .. })
        ));

        let mut channels = three_started(120, 0).await;
        channels[1]
            .tell_end(
                Loss {
                    reason: "pod p-1: cannot start the trainer: no such file".into(),
                    restart: false,
                    kind: Kind::Failure,
                },
                WAIT,
            )
            .await;
        assert!(!channels[1].may_restart());
        assert!(matches!(
            heard(&mut channels[2]).await,
            Heard::Lost(Loss { restart: false, .. })
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
        let Heard::Lost(Loss {
            reason, restart, ..
        }) = heard(&mut channels[0]).await
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
        assert!(matches!(
            heard(&mut channels[1]).await,
            Heard::Lost(Loss { .. })
        ));
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
        let lost = Heard::Lost(Loss {
            reason: "peer pod p-2 was deleted".into(),
            restart: true,
            kind: Kind::Failure,
        });
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
