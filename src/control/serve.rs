//! The coordinator's task: its listener, each member's link (the handshake, the frames read
//! and written, the heartbeats), strangers refused before anything is spent on them, and the
//! pure `Core`'s effects carried out.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout, Instant};
use tracing::{debug, info, warn};

use crate::config::Secret;
use crate::ledger::Ledger;
use crate::membership::PodAddress;

use super::coordinator::{Core, Effect, Input, Setup, Terms};
use super::news::{self, JobNews, Reporting};
use crate::job_view::{JobView, Output, RankStep};

use super::heard::Request;
use super::message::{cut, WireError};
use super::message::{Message, MAX_RANKS_PER_BEAT};
use super::net::{Listener, Reader, Writer};
use super::wire::Session;
use super::wire::*;

use super::{progress_margin, Ends, Joining, FLUSH};

/// The longest heartbeat timeout a launcher may be given (PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT).
pub(super) const MAX_HEARTBEAT_MS: u64 = 7 * 24 * 3600 * 1000;

/// Whether a heartbeat timeout a hello says (ms; 0: not said) is within what any launcher may
/// be given: a link beaten every microsecond, or judged never, would be a member's way to
/// stall the coordinator or to hide a freeze.
pub(super) fn heartbeat_said_fits(heartbeat_ms: u64) -> bool {
    heartbeat_ms == 0 || (1000..=MAX_HEARTBEAT_MS).contains(&heartbeat_ms)
}

/// Whether no member is at `ip`: a pod arriving to join comes from an address of its own (a
/// name said from a member's address is that member's, or none).
pub(super) fn at_address_is_none(others: &[PodAddress], ip: IpAddr) -> bool {
    !others.iter().any(|m| m.ip == ip)
}

/// How many addresses that are no member's are named in the log, each at its first connection
/// (a flood from many is counted instead).
pub(super) const STRANGERS_NAMED: usize = 8;

/// Connections one member address may hold at once (a reconnect overlaps the old one).
pub(super) const LINKS_PER_ADDRESS: usize = 2;

/// How long a link that failed reads what its follower had already said.
pub(super) const LAST_WORDS: Duration = Duration::from_millis(200);

/// What a connection's task tells the coordinator: what the coordinator's core hears of the
/// link, as the core's own input; and what only the task keeps.
pub(super) enum FromLink {
    /// A follower joined: its outgoing queue, told before its `Joined` is heard.
    Queue {
        link: u64,
        to_link: mpsc::UnboundedSender<Arc<Encoded>>,
    },
    /// What the core hears of the link (`Joined`, `Progress`, `Said`), as the link read it.
    Heard(Input),
    /// A joined member's trainer processes' progress, read `at`: for the job's view, not the
    /// core's decisions.
    Ranks {
        link: u64,
        pod: String,
        ranks: Vec<RankStep>,
        at: std::time::Instant,
    },
    /// The connection from `ip` ended: counted, and heard by the core as `Ended` once it
    /// named its pod.
    Ended {
        link: u64,
        ip: IpAddr,
        pod: Option<String>,
        why: WireError,
    },
}

/// The coordinator's task: carries out what its `Core` decides, over the connections that
/// report to it.
pub(super) struct Coordinator {
    pub(super) shared: Arc<Links>,
    pub(super) core: Core,
    /// Each joined connection's outgoing queue.
    pub(super) senders: HashMap<u64, mpsc::UnboundedSender<Arc<Encoded>>>,
    /// Open connections by address, authenticated or not.
    pub(super) open: HashMap<IpAddr, usize>,
    pub(super) refused: u64,
    /// Addresses that are no member's, already named in the log.
    pub(super) strangers_named: HashSet<IpAddr>,
    /// In an elastic job: connections from addresses that are no member's may be open at once,
    /// how many, and how many are.
    pub(super) stranger_slots: usize,
    pub(super) strangers_open: usize,
    /// What the core said at its start, carried out once the task runs.
    pub(super) first: Vec<Effect>,
    /// The job's progress as the members report it, and where its news go.
    pub(super) view: JobView,
    pub(super) reporting: Reporting,
}

/// What connection tasks read: the followers, the secret, the timeout.
pub(super) struct Links {
    pub(super) others: Vec<PodAddress>,
    pub(super) secret: Secret,
    pub(super) heartbeat_timeout: Duration,
    /// Bytes written to followers, for the record (a big job's fan-out cost).
    pub(super) sent: std::sync::atomic::AtomicU64,
    /// An elastic job's coordinator: a hello from a pod that is no member, by its name, is a
    /// pod arriving to join.
    pub(super) admits_arrivals: bool,
}

impl Coordinator {
    pub(super) fn new(joining: Joining) -> Coordinator {
        let me = joining.me.name.clone();
        let others: Vec<PodAddress> = joining
            .members
            .into_iter()
            .filter(|m| m.name != me)
            .collect();
        let view = JobView::new(
            &joining.reporting.job,
            joining.reporting.stragglers,
            super::clock(),
        );
        let reporting = joining.reporting.clone();
        let (mut core, first) = Core::start(
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
            super::clock(),
        );
        super::write_log(core.lines());
        Coordinator {
            shared: Arc::new(Links {
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
            stranger_slots: joining.growth.map_or(0, |g| g.room * LINKS_PER_ADDRESS),
            strangers_open: 0,
            first,
            view,
            reporting,
        }
    }

    /// Whether a connection from `ip` may be served: only member addresses, a few each. The
    /// first few addresses that are no member's are named at once: a sidecar proxy forwarding
    /// every follower from its own address would otherwise keep the job from starting with
    /// nothing but a count a minute.
    pub(super) fn admit(&mut self, ip: IpAddr) -> bool {
        let pods_there = self.shared.others.iter().filter(|m| m.ip == ip).count();
        let from_there = self.open.get(&ip).copied().unwrap_or(0);
        if pods_there == 0
            && self.strangers_open < self.stranger_slots
            && from_there < LINKS_PER_ADDRESS
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
        if *open >= LINKS_PER_ADDRESS * pods_there {
            self.refused += 1;
            return false;
        }
        *open += 1;
        true
    }

    /// One input to the core, what it says for the log written.
    fn step(&mut self, input: Input) -> Vec<Effect> {
        let effects = self.core.step(input);
        super::write_log(self.core.lines());
        effects
    }

    pub(super) async fn run(mut self, mut listener: Box<dyn Listener>, mut ends: Ends) {
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
                        let why = serve(&shared, link, reader, writer, peer, &to_me).await;
                        let _ = to_me.send(FromLink::Ended { link, ip: peer.ip(), pod: why.0, why: why.1 });
                    });
                    continue;
                }
                Some(report) = from_links.recv() => match self.on_link(report) {
                    Some(input) => self.step(input),
                    None => continue,
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                request = ends.requests.recv() => match request {
                    Some(request) => self.step(Input::Own(request)),
                    // The launcher is gone: close.
                    None => self.step(Input::Own(Request::Finish { succeeded: false })),
                },
                _ = ticks.tick() => {
                    self.report(&ends);
                    let mut effects = self.step(Input::Tick(super::clock()));
                    if ends.progress.has_changed().unwrap_or(false) {
                        if let Some((step, last, behind)) = *ends.progress.borrow_and_update() {
                            let last = last.into_std();
                            effects.extend(self.step(Input::OwnProgress { step, last, behind }));
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
    pub(super) fn on_link(&mut self, report: FromLink) -> Option<Input> {
        match report {
            FromLink::Queue { link, to_link } => {
                self.senders.insert(link, to_link);
                None
            }
            FromLink::Heard(input) => Some(input),
            FromLink::Ranks {
                link,
                pod,
                mut ranks,
                at,
            } => {
                // A member reports of its own processes only, as many as a beat carries, and
                // nothing once its trainer is done (its steps stand still: no slow rank).
                let live =
                    self.core.links.get(&pod) == Some(&link) && !self.core.done.contains(&pod);
                if let Some(ids) = self.core.trainer_ids(&pod) {
                    ranks.retain(|(id, ..)| ids.contains(id));
                }
                ranks.truncate(MAX_RANKS_PER_BEAT);
                if live {
                    self.view.note(&pod, self.core.who(&pod), &ranks, at);
                }
                None
            }
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
                if let Some(pod) = pod
                    .as_ref()
                    .filter(|p| self.core.links.get(*p) == Some(&link))
                {
                    self.view.forget(pod);
                }
                let Some(pod) = pod else {
                    warn!("control channel: closed the connection from {ip}: {why}");
                    return None;
                };
                Some(Input::Ended { link, pod, why })
            }
        }
    }

    /// The job's view on the clock: this launcher's own processes noted, and what is due
    /// said (in the log, to every member, to the launcher's reports).
    fn report(&mut self, ends: &Ends) {
        let now = super::clock();
        let me = self.core.me.clone();
        let own = news::read(&ends.gauges);
        if !own.is_empty() && !self.core.done.contains(&me) {
            self.view.note(&me, self.core.who(&me), &own, now);
        }
        // A member whose trainer is done makes no more steps: it is no straggler.
        for pod in &self.core.done {
            self.view.forget(pod);
        }
        let asked = self.reporting.table_asked.load(Ordering::Relaxed);
        for report in self.view.tick(now, self.core.attempt(), asked) {
            match report {
                Output::Line(line) => info!("{line}"),
                Output::Note(line) => {
                    warn!("{line}");
                    let note = Message::Beat {
                        ranks: Vec::new(),
                        note: Some(cut(&line)),
                    };
                    self.carry_out(vec![Effect::Broadcast(note)], ends);
                }
                Output::Straggler(message) => self.reporting.tell(JobNews::Straggler(message)),
                Output::Summary(summary) => self.reporting.tell(JobNews::Summary(summary)),
                Output::Figures(figures) => self.reporting.tell(JobNews::Figures(figures)),
                Output::Table(table) => {
                    self.reporting.table_asked.store(false, Ordering::Relaxed);
                    self.reporting.tell(JobNews::Table(table));
                }
            }
        }
    }

    pub(super) fn carry_out(&mut self, effects: Vec<Effect>, ends: &Ends) {
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
                Effect::Know(known) => ends.know(known),
                Effect::Served(pod) => ends.served(&pod),
                Effect::Stop => {}
            }
        }
    }
}

/// What the log says of a connection from an address that is no member's.
pub(super) fn stranger_refused(ip: IpAddr) -> String {
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
pub(super) struct LinkTimeouts {
    /// How often the coordinator beats: a third of the smaller timeout (the follower's
    /// judgement of the coordinator).
    pub(super) beat_every: Duration,
    /// When the coordinator counts the follower silent: the larger timeout (the follower beats
    /// at a third of its own).
    pub(super) silent_after: Duration,
}

impl LinkTimeouts {
    pub(super) fn agree(own: Duration, follower_ms: u64) -> LinkTimeouts {
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

/// What a follower said as it joined, its handshake done.
struct Greeted {
    challenge: Challenge,
    /// The session its frames are read with (the hello read).
    session: Session,
    /// The member it is (or an elastic job's arrival).
    pod: String,
    view: String,
    heartbeat_ms: u64,
    who: String,
    terms: Terms,
}

/// One follower's connection: challenge, hello (naming the member of this address), then
/// heartbeats both ways until it ends. Returns the pod (once known) and why it ended.
pub(super) async fn serve(
    shared: &Links,
    link: u64,
    mut reader: Reader,
    mut writer: Writer,
    peer: SocketAddr,
    to_coordinator: &mpsc::UnboundedSender<FromLink>,
) -> (Option<String>, WireError) {
    let greeted = match greet(shared, &mut reader, &mut writer, peer).await {
        Ok(greeted) => greeted,
        Err(e) => return (None, e),
    };
    let Greeted {
        challenge,
        session,
        pod,
        view,
        heartbeat_ms,
        who,
        terms,
    } = greeted;
    let (to_link, mut rx) = mpsc::unbounded_channel();
    let _ = to_coordinator.send(FromLink::Queue { link, to_link });
    let _ = to_coordinator.send(FromLink::Heard(Input::Joined {
        link,
        pod: pod.clone(),
        view,
        who: cut(&who),
        terms,
    }));
    let timeouts = LinkTimeouts::agree(shared.heartbeat_timeout, heartbeat_ms);
    if heartbeat_ms != 0 && Duration::from_millis(heartbeat_ms) != shared.heartbeat_timeout {
        warn!(
            "control channel: {pod} was given a heartbeat timeout of {:.1} s and this launcher {:.1} s (PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT): its link beats for the shorter and is judged by the longer",
            Duration::from_millis(heartbeat_ms).as_secs_f64(),
            shared.heartbeat_timeout.as_secs_f64()
        );
    }
    let joined = Link {
        id: link,
        pod: &pod,
        timeouts,
        challenge,
        to_coordinator,
    };
    let why = joined
        .talk(shared, session, reader, &mut writer, &mut rx)
        .await;
    (Some(pod), why)
}

/// The handshake: this end's challenge, the follower's, its hello, checked (a member of this
/// address, or an elastic job's arrival; a heartbeat timeout that fits), each read bounded.
async fn greet(
    shared: &Links,
    reader: &mut Reader,
    writer: &mut Writer,
    peer: SocketAddr,
) -> Result<Greeted, WireError> {
    let server = nonce()?;
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
    let hello = timeout(HANDSHAKE, session.read(reader))
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
    let name = member_named(shared, pod, peer)?;
    let terms = Terms {
        // Some: the frame is a hello.
        ledger: ledger.unwrap_or(Ledger::first(0)),
        nproc_per_pod,
    };
    Ok(Greeted {
        challenge,
        session,
        pod: name,
        view,
        heartbeat_ms,
        who,
        terms,
    })
}

/// The member a hello names (`pod`) from `peer`: the pod of that name at that address (a
/// hello without a name: the one pod there), or an elastic job's arrival.
fn member_named(shared: &Links, pod: String, peer: SocketAddr) -> Result<String, WireError> {
    // A follower without a pod name is known by its address, when that is one pod's.
    let at_address: Vec<&PodAddress> = shared.others.iter().filter(|m| m.ip == peer.ip()).collect();
    let member = match pod.as_str() {
        "" if at_address.len() == 1 => Some(at_address[0]),
        "" => None,
        name => at_address.into_iter().find(|m| m.name == name),
    };
    match member {
        Some(member) => Ok(member.name.clone()),
        // An elastic job's arrival: the name it says (the job's secret vouches for it;
        // the API decides whether it trains, at the next start).
        None if shared.admits_arrivals
            && at_address_is_none(&shared.others, peer.ip())
            && !shared.others.iter().any(|m| m.name == pod)
            && pod.len() <= 253
            && crate::selector::is_dns_subdomain(&pod) =>
        {
            Ok(pod)
        }
        None => Err(WireError::Malformed(format!(
            "{pod} is not a member of this job at {}",
            peer.ip()
        ))),
    }
}

/// A joined follower's link: who it is, how it is judged, how its frames are sealed, and
/// where it reports; it talks until the connection ends.
struct Link<'a> {
    id: u64,
    pod: &'a str,
    timeouts: LinkTimeouts,
    challenge: Challenge,
    to_coordinator: &'a mpsc::UnboundedSender<FromLink>,
}

impl Link<'_> {
    /// A joined follower's connection, until it ends (the reason). Whatever the coordinator
    /// queued goes out first, so a `Lost` or `Bye` is written before the connection closes.
    async fn talk(
        self,
        shared: &Links,
        reading: Session,
        reader: Reader,
        writer: &mut Writer,
        rx: &mut mpsc::UnboundedReceiver<Arc<Encoded>>,
    ) -> WireError {
        let Link {
            id: link,
            pod,
            timeouts,
            challenge,
            to_coordinator,
        } = self;
        let limit = timeouts.silent_after;
        let (mut incoming, _reader) = frames(reading, reader);
        let mut out = Session::new(&shared.secret, challenge, true);
        let mut beat = tokio::time::interval(timeouts.beat_every);
        let mut idle_until = Instant::now() + limit;
        // Progress reports go on to the coordinator at most this often: a member that sends them
        // faster (a flood, with the secret) costs its link task, not the one loop that decides.
        let report_every = timeouts.beat_every / 2;
        let mut reported: Option<Instant> = None;
        let mut ranked: Option<Instant> = None;
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
                    Some(Ok(Message::Beat { ranks, .. })) => {
                        let at = Instant::now();
                        idle_until = at + limit;
                        if !ranks.is_empty() && due(&mut ranked, at, report_every) {
                            let _ = to_coordinator.send(FromLink::Ranks { link, pod: pod.to_string(), ranks, at: at.into_std() });
                        }
                        Ok(())
                    }
                    Some(Ok(Message::Progress { step, quiet_ms, behind, ranks })) => {
                        let at = Instant::now();
                        idle_until = at + limit;
                        if due(&mut reported, at, report_every) {
                            let quiet = Duration::from_millis(quiet_ms);
                            let _ = to_coordinator.send(FromLink::Heard(Input::Progress { link, pod: pod.to_string(), step, quiet, at: at.into_std(), behind }));
                            if !ranks.is_empty() && due(&mut ranked, at, report_every) {
                                let _ = to_coordinator.send(FromLink::Ranks { link, pod: pod.to_string(), ranks, at: at.into_std() });
                            }
                        }
                        Ok(())
                    }
                    Some(Ok(message)) if is_report(&message) => {
                        idle_until = Instant::now() + limit;
                        let _ = to_coordinator.send(FromLink::Heard(Input::Said { link, pod: pod.to_string(), message }));
                        Ok(())
                    }
                    Some(Ok(other)) => Err(WireError::Malformed(format!("{other:?} from {pod}"))),
                    Some(Err(e)) => Err(e),
                    None => Err(WireError::Closed),
                },
                _ = tokio::time::sleep_until(idle_until) => Err(WireError::Silent(limit.as_secs())),
                _ = beat.tick() => out.write(writer, &Message::beat(), limit).await,
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
}

/// Whether a report read `at` goes on to the coordinator: none went on within `every` before
/// (then it is the last that did).
fn due(last: &mut Option<Instant>, at: Instant, every: Duration) -> bool {
    let due = last.is_none_or(|last| at.duration_since(last) >= every);
    if due {
        *last = Some(at);
    }
    due
}

/// What a follower says that the coordinator decides on (besides its heartbeats): the same on
/// a live link and in a failed link's last words.
pub(super) fn is_report(message: &Message) -> bool {
    matches!(
        message,
        Message::Done | Message::Failed(_) | Message::Stopped | Message::Preempted { .. }
    )
}

/// A failed link's last words: every report its follower had already sent, told to the
/// coordinator in order, until the frames end.
pub(super) async fn last_words(
    incoming: &mut mpsc::Receiver<Result<Message, WireError>>,
    link: u64,
    pod: &str,
    to_coordinator: &mpsc::UnboundedSender<FromLink>,
) {
    while let Some(Ok(message)) = incoming.recv().await {
        if is_report(&message) {
            let _ = to_coordinator.send(FromLink::Heard(Input::Said {
                link,
                pod: pod.to_string(),
                message,
            }));
        }
    }
}
