//! The job's control channel: every launcher keeps one TCP connection to the coordinating
//! launcher and both sides send heartbeats, so that a launcher that goes silent — frozen, or on
//! a node that died while the API still says Running — is noticed within the heartbeat timeout
//! and the job stops (as for any lost peer) instead of hanging in a collective operation.
//!
//! The port is reachable by every pod of the cluster, so nothing on it is trusted:
//! - a connection from an address that is not a member pod's is closed at once, before any
//!   task, buffer or log line is spent on it; each member address may hold only a few
//!   connections, and there are at most twice as many connections as members;
//! - the server sends a random challenge, the client one of its own; every frame carries an
//!   HMAC-SHA256 under the job's secret over its direction, both challenges and a per-direction
//!   sequence number: a forged, altered, replayed (on this or any other connection, in either
//!   direction), reordered or reflected frame is refused and its connection closed;
//! - a frame is at most `MAX_PAYLOAD` bytes, the length checked before anything is read; the
//!   hello must come within `HANDSHAKE` and name the member of the connection's address;
//! - every write has a deadline, so a peer that stops reading cannot pin a connection.
//!
//! An attacker on the pod network without the secret can connect from a non-member address and
//! be dropped; spoofing a member's address (or cutting connections, as any on-path party can)
//! makes launchers look silent, which stops the job rather than letting it train wrong.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, timeout, Instant};
use tracing::{debug, info, warn};

use crate::config::Secret;

pub const MAX_PAYLOAD: usize = 1024;
const MAC_LEN: usize = 32;
const NONCE_LEN: usize = 16;
/// Both challenges, the server's first.
pub type Challenge = [u8; 2 * NONCE_LEN];
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Connections one member address may hold at once (a reconnect overlaps the old one).
const PER_ADDRESS: usize = 2;
/// How long a follower tries to reach the coordinator, and a member may take to join at all.
const CONNECT_GRACE: Duration = Duration::from_secs(60);
/// Longer reasons are cut: a frame must stay within `MAX_PAYLOAD`.
const MAX_REASON: usize = 400;
const CLIENT: u8 = b'C';
const SERVER: u8 = b'S';

/// What launchers tell each other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Message {
    /// A follower's first frame: which member of the job it is.
    Hello {
        pod: String,
    },
    Beat,
    /// A follower ends normally: its silence from now on is not a loss.
    Done,
    /// The coordinator saw the job lose a member: stop.
    Lost {
        reason: String,
    },
    /// The coordinator ends normally.
    Bye,
}

impl Message {
    fn lost(reason: &str) -> Message {
        Message::Lost {
            reason: reason.chars().take(MAX_REASON).collect(),
        }
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("a frame of {0} bytes, more than {MAX_PAYLOAD}")]
    Oversized(usize),
    #[error("a frame that fails authentication (wrong secret, altered, replayed or out of order)")]
    BadMac,
    #[error("a frame that is not a message: {0}")]
    Malformed(String),
    #[error("{0}")]
    Io(String),
}

/// One connection's authenticated session, for one direction of sending and receiving.
pub struct Session {
    key: hmac::Key,
    challenge: Challenge,
    own: u8,
    sent: u64,
    received: u64,
}

impl Session {
    pub fn new(secret: &Secret, challenge: Challenge, is_server: bool) -> Session {
        Session {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret.0),
            challenge,
            own: if is_server { SERVER } else { CLIENT },
            sent: 0,
            received: 0,
        }
    }

    fn mac_input(&self, direction: u8, seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut input = Vec::with_capacity(1 + self.challenge.len() + 8 + payload.len());
        input.push(direction);
        input.extend_from_slice(&self.challenge);
        input.extend_from_slice(&seq.to_be_bytes());
        input.extend_from_slice(payload);
        input
    }

    /// The bytes of one frame: length, payload, MAC. Messages are built small (`Message::lost`
    /// cuts reasons), so the payload always fits.
    pub fn seal(&mut self, message: &Message) -> Vec<u8> {
        let mut payload = serde_json::to_vec(message).unwrap_or_default();
        payload.truncate(MAX_PAYLOAD);
        let tag = hmac::sign(&self.key, &self.mac_input(self.own, self.sent, &payload));
        self.sent += 1;
        let mut frame = (payload.len() as u16).to_be_bytes().to_vec();
        frame.extend_from_slice(&payload);
        frame.extend_from_slice(tag.as_ref());
        frame
    }

    /// Checks one frame's payload and MAC, in the order the peer must have sent them.
    pub fn open(&mut self, payload: &[u8], mac: &[u8]) -> Result<Message, WireError> {
        let peer = if self.own == SERVER { CLIENT } else { SERVER };
        let input = self.mac_input(peer, self.received, payload);
        hmac::verify(&self.key, &input, mac).map_err(|_| WireError::BadMac)?;
        self.received += 1;
        serde_json::from_slice(payload).map_err(|e| WireError::Malformed(e.to_string()))
    }

    pub async fn read(
        &mut self,
        stream: &mut (impl AsyncRead + Unpin),
    ) -> Result<Message, WireError> {
        let mut length = [0u8; 2];
        stream.read_exact(&mut length).await.map_err(io)?;
        let length = u16::from_be_bytes(length) as usize;
        if length > MAX_PAYLOAD {
            return Err(WireError::Oversized(length));
        }
        let mut frame = vec![0u8; length + MAC_LEN];
        stream.read_exact(&mut frame).await.map_err(io)?;
        let (payload, mac) = frame.split_at(length);
        self.open(payload, mac)
    }

    /// Writes one frame, giving up after `deadline`: a peer that stops reading must not pin
    /// the connection.
    pub async fn write(
        &mut self,
        stream: &mut (impl AsyncWrite + Unpin),
        message: &Message,
        deadline: Duration,
    ) -> Result<(), WireError> {
        let frame = self.seal(message);
        match timeout(deadline, stream.write_all(&frame)).await {
            Ok(written) => written.map_err(io),
            Err(_) => Err(WireError::Io(format!(
                "the peer read nothing for {} s",
                deadline.as_secs()
            ))),
        }
    }
}

fn io(e: std::io::Error) -> WireError {
    WireError::Io(e.to_string())
}

/// Reads frames one after the other on a task of their own: a read must never be cancelled
/// halfway through a frame (by a timer or a write in a `select!`), or the stream would lose
/// its framing. The task ends at the first error, or when the returned guard is dropped.
fn frames(
    mut session: Session,
    mut reader: tokio::net::tcp::OwnedReadHalf,
) -> (mpsc::Receiver<Result<Message, WireError>>, AbortOnDrop) {
    let (tx, rx) = mpsc::channel(8);
    let task = tokio::spawn(async move {
        loop {
            let frame = session.read(&mut reader).await;
            let failed = frame.is_err();
            if tx.send(frame).await.is_err() || failed {
                return;
            }
        }
    });
    (rx, AbortOnDrop(task))
}

pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A member of the job: its name (as every launcher computes it) and its pod's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub ip: IpAddr,
}

/// A joined control channel; its loss future (from `join`) resolves when the job lost a member.
pub struct Channel {
    finish: Option<oneshot::Sender<bool>>,
    finished: Option<oneshot::Receiver<()>>,
}

impl Channel {
    /// Ends this launcher's part. After a success it says goodbye (a follower "done", the
    /// coordinator "bye"), so that the others do not take its end for a loss; after a failure
    /// it says nothing, so that they do.
    pub async fn finish(mut self, succeeded: bool) {
        if let (Some(finish), Some(finished)) = (self.finish.take(), self.finished.take()) {
            let _ = finish.send(succeeded);
            let _ = timeout(Duration::from_secs(1), finished).await;
        }
    }
}

/// Where this launcher stands in the channel.
pub enum Role {
    Coordinator { listen: SocketAddr },
    Follower { coordinator: SocketAddr },
}

/// Joins the channel: serves it (the coordinator, for `members`) or connects to it. Returns the
/// channel and a future that resolves with the reason when the job lost a member.
pub async fn join(
    role: Role,
    secret: Secret,
    me: Member,
    members: Vec<Member>,
    heartbeat_timeout: Duration,
) -> std::io::Result<(Channel, BoxFuture<'static, String>)> {
    let (lost_tx, lost_rx) = oneshot::channel::<String>();
    let (finish_tx, finish_rx) = oneshot::channel::<bool>();
    let (finished_tx, finished_rx) = oneshot::channel::<()>();
    match role {
        Role::Coordinator { listen } => {
            let listener = TcpListener::bind(listen).await?;
            info!(
                "control channel: coordinating {} launchers on {listen} (heartbeat timeout {} s)",
                members.len(),
                heartbeat_timeout.as_secs()
            );
            let others: Vec<Member> = members.into_iter().filter(|m| m.name != me.name).collect();
            let coordinator = Coordinator::new(secret, others, heartbeat_timeout);
            tokio::spawn(coordinator.run(listener, lost_tx, finish_rx, finished_tx));
        }
        Role::Follower { coordinator } => {
            info!(
                "control channel: following the coordinator at {coordinator} (heartbeat timeout {} s)",
                heartbeat_timeout.as_secs()
            );
            tokio::spawn(async move {
                let follower = Follower {
                    coordinator,
                    secret,
                    me,
                    heartbeat_timeout,
                };
                if let Some(reason) = follower.run(finish_rx, finished_tx).await {
                    let _ = lost_tx.send(reason);
                }
            });
        }
    }
    let loss = async move {
        match lost_rx.await {
            Ok(reason) => reason,
            // The channel ended without a loss: nothing more to report, ever.
            Err(_) => std::future::pending().await,
        }
    };
    let channel = Channel {
        finish: Some(finish_tx),
        finished: Some(finished_rx),
    };
    Ok((channel, loss.boxed()))
}

fn nonce() -> Result<[u8; NONCE_LEN], WireError> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| WireError::Io("no random numbers for a challenge".into()))?;
    Ok(nonce)
}

fn both(server: [u8; NONCE_LEN], client: [u8; NONCE_LEN]) -> Challenge {
    let mut challenge = [0u8; 2 * NONCE_LEN];
    challenge[..NONCE_LEN].copy_from_slice(&server);
    challenge[NONCE_LEN..].copy_from_slice(&client);
    challenge
}

/// What the coordinator knows of its followers.
struct Members {
    started: Instant,
    last_seen: HashMap<String, Instant>,
    done: Vec<String>,
    /// The live link of each member, for broadcasts; a newer connection replaces an older one.
    links: HashMap<String, (u64, mpsc::UnboundedSender<Message>)>,
    /// Open connections by address, authenticated or not.
    open: HashMap<IpAddr, usize>,
    /// Set once the job lost a member: told to every link, late ones too.
    lost: Option<String>,
    refused: u64,
}

struct Coordinator {
    state: Arc<Mutex<Members>>,
    members: Arc<Vec<Member>>,
    secret: Secret,
    heartbeat_timeout: Duration,
}

impl Coordinator {
    fn new(secret: Secret, members: Vec<Member>, heartbeat_timeout: Duration) -> Self {
        Coordinator {
            state: Arc::new(Mutex::new(Members {
                started: Instant::now(),
                last_seen: HashMap::new(),
                done: Vec::new(),
                links: HashMap::new(),
                open: HashMap::new(),
                lost: None,
                refused: 0,
            })),
            members: Arc::new(members),
            secret,
            heartbeat_timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Members> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a connection from `ip` may be served: only member addresses, a few each.
    fn admit(&self, ip: IpAddr) -> bool {
        let pods_there = self.members.iter().filter(|m| m.ip == ip).count();
        let mut s = self.lock();
        let open = s.open.entry(ip).or_insert(0);
        if pods_there == 0 || *open >= PER_ADDRESS * pods_there {
            s.refused += 1;
            return false;
        }
        *open += 1;
        true
    }

    async fn run(
        self,
        listener: TcpListener,
        lost_tx: oneshot::Sender<String>,
        mut finish_rx: oneshot::Receiver<bool>,
        finished_tx: oneshot::Sender<()>,
    ) {
        let this = Arc::new(self);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut watchdog = tokio::time::interval(Duration::from_millis(250));
        let mut lost_tx = Some(lost_tx);
        let mut refusals = tokio::time::interval(Duration::from_secs(60));
        let mut next_link = 0u64;
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        // Out of file descriptors, say: do not spin on it.
                        Err(e) => {
                            debug!("control channel: accept failed: {e}");
                            sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    if !this.admit(peer.ip()) {
                        // Closed at once; counted, not logged one by one (a flood would
                        // bury the trainers' output).
                        drop(stream);
                        continue;
                    }
                    next_link += 1;
                    let (link, this) = (next_link, this.clone());
                    let stop = stop_rx.clone();
                    tokio::spawn(async move {
                        let served = this.serve(link, stream, peer, stop).await;
                        if let Some(open) = this.lock().open.get_mut(&peer.ip()) {
                            *open = open.saturating_sub(1);
                        }
                        if let Err(why) = served {
                            warn!("control channel: closed the connection from {peer}: {why}");
                        }
                    });
                }
                _ = refusals.tick() => {
                    let refused = std::mem::take(&mut this.lock().refused);
                    if refused > 0 {
                        warn!("control channel: refused {refused} connections from addresses that are not the job's pods, or too many from one");
                    }
                }
                _ = watchdog.tick(), if lost_tx.is_some() => {
                    let silent = silent_member(&this.lock(), &this.members, this.heartbeat_timeout);
                    if let Some(reason) = silent {
                        warn!("control channel: {reason}");
                        this.broadcast(&Message::lost(&reason));
                        this.lock().lost = Some(reason.clone());
                        if let Some(tx) = lost_tx.take() {
                            let _ = tx.send(reason);
                        }
                    }
                }
                finished = &mut finish_rx => {
                    // Only a success says goodbye: after a failure the followers must notice.
                    if finished == Ok(true) && lost_tx.is_some() {
                        this.broadcast(&Message::Bye);
                    }
                    let _ = stop_tx.send(true);
                    sleep(Duration::from_millis(50)).await;
                    let _ = finished_tx.send(());
                    return;
                }
            }
        }
    }

    fn broadcast(&self, message: &Message) {
        let s = self.lock();
        for (_, link) in s.links.values() {
            let _ = link.send(message.clone());
        }
    }

    /// One follower's connection: challenge, hello (naming the member of this address), then
    /// heartbeats both ways until it ends.
    async fn serve(
        &self,
        link: u64,
        stream: TcpStream,
        peer: SocketAddr,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), WireError> {
        let server = nonce()?;
        let (reader, mut writer) = stream.into_split();
        timeout(HANDSHAKE, writer.write_all(&server))
            .await
            .map_err(|_| WireError::Io("no room to send the challenge".into()))?
            .map_err(io)?;
        let mut reader = reader;
        let mut client = [0u8; NONCE_LEN];
        let no_hello = || WireError::Io(format!("no hello within {} s", HANDSHAKE.as_secs()));
        timeout(HANDSHAKE, reader.read_exact(&mut client))
            .await
            .map_err(|_| no_hello())?
            .map_err(io)?;
        let challenge = both(server, client);
        let mut session = Session::new(&self.secret, challenge, true);
        let hello = timeout(HANDSHAKE, session.read(&mut reader))
            .await
            .map_err(|_| no_hello())??;
        let Message::Hello { pod } = hello else {
            return Err(WireError::Malformed(
                "the first frame is not a hello".into(),
            ));
        };
        if !self
            .members
            .iter()
            .any(|m| m.name == pod && m.ip == peer.ip())
        {
            return Err(WireError::Malformed(format!(
                "{pod} is not a member of this job at {}",
                peer.ip()
            )));
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        {
            let mut s = self.lock();
            // One live connection per pod: a second hello cannot push the first one out.
            if s.links.contains_key(&pod) {
                return Err(WireError::Malformed(format!("{pod} is already connected")));
            }
            s.last_seen.insert(pod.clone(), Instant::now());
            if let Some(reason) = &s.lost {
                let _ = tx.send(Message::lost(reason));
            }
            s.links.insert(pod.clone(), (link, tx));
        }
        info!("control channel: {pod} joined");
        let result = self
            .talk(&pod, challenge, reader, &mut writer, &mut rx, &mut stop)
            .await;
        let mut s = self.lock();
        if s.links.get(&pod).is_some_and(|(id, _)| *id == link) {
            s.links.remove(&pod);
        }
        result
    }

    async fn talk(
        &self,
        pod: &str,
        challenge: Challenge,
        reader: tokio::net::tcp::OwnedReadHalf,
        writer: &mut tokio::net::tcp::OwnedWriteHalf,
        rx: &mut mpsc::UnboundedReceiver<Message>,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), WireError> {
        let limit = self.heartbeat_timeout;
        let mut reading = Session::new(&self.secret, challenge, true);
        reading.received = 1; // the hello
        let (mut incoming, _reader) = frames(reading, reader);
        let mut out = Session::new(&self.secret, challenge, true);
        let mut beat = tokio::time::interval(limit / 3);
        let mut idle_until = Instant::now() + limit;
        loop {
            tokio::select! {
                // Queued messages first: a Bye or Lost must go out before a stop closes us.
                biased;
                message = rx.recv() => {
                    let Some(message) = message else { return Ok(()) };
                    out.write(writer, &message, limit).await?;
                }
                frame = incoming.recv() => match frame {
                    Some(Ok(Message::Beat)) => {
                        self.lock().last_seen.insert(pod.to_string(), Instant::now());
                        idle_until = Instant::now() + limit;
                    }
                    Some(Ok(Message::Done)) => {
                        self.lock().done.push(pod.to_string());
                        return Ok(());
                    }
                    Some(Ok(other)) => {
                        return Err(WireError::Malformed(format!("{other:?} from {pod}")))
                    }
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
                _ = stop.changed() => {
                    while let Ok(message) = rx.try_recv() {
                        out.write(writer, &message, limit).await?;
                    }
                    return Ok(());
                }
                // The watchdog decides what the silence means.
                _ = tokio::time::sleep_until(idle_until) => return Ok(()),
                _ = beat.tick() => out.write(writer, &Message::Beat, limit).await?,
            }
        }
    }
}

/// The first member that is neither done nor heard from within its limit: the heartbeat
/// timeout since its last frame, or a grace period to join at all.
fn silent_member(s: &Members, members: &[Member], limit: Duration) -> Option<String> {
    members.iter().find_map(|m| {
        if s.done.contains(&m.name) {
            return None;
        }
        let (since, allowed) = match s.last_seen.get(&m.name) {
            Some(at) => (*at, limit),
            None => (s.started, limit.max(CONNECT_GRACE)),
        };
        (since.elapsed() > allowed).then(|| {
            format!(
                "peer pod {} sent no heartbeat for {} s (frozen, or its node is gone)",
                m.name,
                allowed.as_secs()
            )
        })
    })
}

/// A follower's side of the channel.
struct Follower {
    coordinator: SocketAddr,
    secret: Secret,
    me: Member,
    heartbeat_timeout: Duration,
}

impl Follower {
    /// Connects (retrying while the coordinator is not up yet), then beats and listens. The
    /// reason of a loss, or None after the coordinator's or its own end.
    async fn run(
        self,
        mut finish_rx: oneshot::Receiver<bool>,
        finished_tx: oneshot::Sender<()>,
    ) -> Option<String> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        let (challenge, reader, mut writer) = loop {
            let why = match self.handshake().await {
                Ok(connected) => break connected,
                Err(why) => why,
            };
            if started.elapsed() > CONNECT_GRACE {
                return Some(format!(
                    "the coordinating launcher at {} could not be reached for {} s ({why})",
                    self.coordinator,
                    CONNECT_GRACE.as_secs()
                ));
            }
            info!(
                "control channel: waiting for the coordinator at {} ({why})",
                self.coordinator
            );
            tokio::select! {
                _ = sleep(pause) => {}
                _ = &mut finish_rx => {
                    let _ = finished_tx.send(());
                    return None;
                }
            }
            pause = (pause * 2).min(Duration::from_secs(2));
        };
        let limit = self.heartbeat_timeout;
        let mut out = Session::new(&self.secret, challenge, false);
        out.sent = 1; // the hello
        let (mut incoming, _reader) = frames(Session::new(&self.secret, challenge, false), reader);
        let lost_link = |why: String| {
            Some(format!(
                "lost the connection to the coordinating launcher at {} ({why})",
                self.coordinator
            ))
        };
        let mut beat = tokio::time::interval(limit / 3);
        let mut heard_until = Instant::now() + limit;
        loop {
            tokio::select! {
                frame = incoming.recv() => match frame {
                    Some(Ok(Message::Beat)) => heard_until = Instant::now() + limit,
                    Some(Ok(Message::Lost { reason })) => return Some(reason),
                    Some(Ok(Message::Bye)) => {
                        info!("control channel: the coordinator finished");
                        let _ = finish_rx.await;
                        let _ = finished_tx.send(());
                        return None;
                    }
                    Some(Ok(other)) => return lost_link(format!("unexpected {other:?}")),
                    Some(Err(e)) => return lost_link(e.to_string()),
                    None => return lost_link("closed".into()),
                },
                _ = tokio::time::sleep_until(heard_until) => {
                    return Some(format!(
                        "the coordinating launcher at {} sent no heartbeat for {} s (frozen, or its node is gone)",
                        self.coordinator,
                        limit.as_secs()
                    ));
                }
                _ = beat.tick() => {
                    if let Err(e) = out.write(&mut writer, &Message::Beat, limit).await {
                        return lost_link(e.to_string());
                    }
                }
                finished = &mut finish_rx => {
                    // Only a success says "done": after a failure the coordinator must notice.
                    if finished == Ok(true) {
                        let _ = out.write(&mut writer, &Message::Done, limit).await;
                    }
                    let _ = writer.shutdown().await;
                    let _ = finished_tx.send(());
                    return None;
                }
            }
        }
    }

    /// Connects from this pod's own address (the coordinator admits member addresses only),
    /// exchanges challenges and says hello.
    async fn handshake(
        &self,
    ) -> Result<
        (
            Challenge,
            tokio::net::tcp::OwnedReadHalf,
            tokio::net::tcp::OwnedWriteHalf,
        ),
        String,
    > {
        let socket = match self.coordinator {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(|e| e.to_string())?;
        socket
            .bind(SocketAddr::new(self.me.ip, 0))
            .map_err(|e| format!("cannot use {}: {e}", self.me.ip))?;
        let stream = timeout(HANDSHAKE, socket.connect(self.coordinator))
            .await
            .map_err(|_| "no answer".to_string())?
            .map_err(|e| e.to_string())?;
        let (mut reader, mut writer) = stream.into_split();
        let mut server = [0u8; NONCE_LEN];
        timeout(HANDSHAKE, reader.read_exact(&mut server))
            .await
            .map_err(|_| "no challenge".to_string())?
            .map_err(|e| format!("no challenge: {e}"))?;
        let client = nonce().map_err(|e| e.to_string())?;
        let challenge = both(server, client);
        let mut hello = Session::new(&self.secret, challenge, false);
        let mut first = client.to_vec();
        first.extend(hello.seal(&Message::Hello {
            pod: self.me.name.clone(),
        }));
        timeout(HANDSHAKE, writer.write_all(&first))
            .await
            .map_err(|_| "cannot say hello".to_string())?
            .map_err(|e| e.to_string())?;
        Ok((challenge, reader, writer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    fn split(frame: &[u8]) -> (&[u8], &[u8]) {
        let length = u16::from_be_bytes([frame[0], frame[1]]) as usize;
        frame[2..].split_at(length)
    }

    #[test]
    fn frames_open_once_in_order_and_only_under_the_same_secret_and_challenges() {
        let challenge = both([7u8; NONCE_LEN], [9u8; NONCE_LEN]);
        let mut client = Session::new(&secret(), challenge, false);
        let mut server = Session::new(&secret(), challenge, true);
        let hello = client.seal(&Message::Hello { pod: "j-1".into() });
        let beat = client.seal(&Message::Beat);
        let (p, m) = split(&hello);
        assert_eq!(server.open(p, m), Ok(Message::Hello { pod: "j-1".into() }));
        // Replaying the hello (sequence 0 again) fails; the next frame in order passes.
        assert_eq!(server.open(p, m), Err(WireError::BadMac));
        let (p2, m2) = split(&beat);
        assert_eq!(server.open(p2, m2), Ok(Message::Beat));
        // Another secret, another server or client challenge, or the wrong direction: refused.
        for mut other in [
            Session::new(
                &Secret(b"fedcba9876543210fedcba9876543210".to_vec()),
                challenge,
                true,
            ),
            Session::new(&secret(), both([8u8; NONCE_LEN], [9u8; NONCE_LEN]), true),
            Session::new(&secret(), both([7u8; NONCE_LEN], [1u8; NONCE_LEN]), true),
            Session::new(&secret(), challenge, false),
        ] {
            assert_eq!(other.open(p, m), Err(WireError::BadMac));
        }
        // An altered payload fails.
        let mut altered = p.to_vec();
        altered[2] ^= 1;
        let mut fresh = Session::new(&secret(), challenge, true);
        assert_eq!(fresh.open(&altered, m), Err(WireError::BadMac));
    }

    /// The server's frames cannot be replayed to a follower on another connection: the
    /// follower's own challenge is in every MAC.
    #[test]
    fn a_coordinator_stream_recorded_on_one_connection_fails_on_another() {
        let server = [3u8; NONCE_LEN];
        let mut recorded = Session::new(&secret(), both(server, [1u8; NONCE_LEN]), true);
        let lost = recorded.seal(&Message::lost("replayed"));
        let (p, m) = split(&lost);
        let mut victim = Session::new(&secret(), both(server, [2u8; NONCE_LEN]), false);
        assert_eq!(victim.open(p, m), Err(WireError::BadMac));
    }

    #[test]
    fn long_reasons_are_cut_to_fit_a_frame() {
        let mut session = Session::new(&secret(), [0u8; 2 * NONCE_LEN], true);
        let frame = session.seal(&Message::lost(&"x".repeat(10_000)));
        let (payload, _) = split(&frame);
        assert!(payload.len() <= MAX_PAYLOAD);
        assert!(serde_json::from_slice::<Message>(payload).is_ok());
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_reading_it() {
        let mut session = Session::new(&secret(), [0u8; 2 * NONCE_LEN], true);
        let mut bytes: &[u8] = &[0xff, 0xff, 1, 2, 3];
        assert_eq!(
            session.read(&mut bytes).await,
            Err(WireError::Oversized(65535))
        );
    }

    fn member(name: &str, ip: &str) -> Member {
        Member {
            name: name.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn a_member_is_silent_after_the_timeout_unless_done() {
        let limit = Duration::from_secs(10);
        let coordinator = Coordinator::new(
            secret(),
            vec![member("a", "10.0.0.2"), member("b", "10.0.0.3")],
            limit,
        );
        let mut s = coordinator.lock();
        s.last_seen
            .insert("a".into(), Instant::now() - Duration::from_secs(11));
        assert!(silent_member(&s, &coordinator.members, limit)
            .is_some_and(|r| r.contains("peer pod a sent no heartbeat for 10 s")));
        s.done.push("a".into());
        // b never joined, but its grace to join is not over.
        assert_eq!(silent_member(&s, &coordinator.members, limit), None);
    }

    /// Only member addresses are served, and only a few connections each.
    #[test]
    fn connections_are_admitted_from_member_addresses_only_and_a_few_each() {
        let coordinator = Coordinator::new(
            secret(),
            vec![member("a", "10.0.0.2")],
            Duration::from_secs(10),
        );
        let stranger: IpAddr = "10.9.9.9".parse().unwrap();
        let a: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(!coordinator.admit(stranger));
        assert!(coordinator.admit(a) && coordinator.admit(a));
        assert!(!coordinator.admit(a), "a third connection from one pod");
        assert_eq!(coordinator.lock().refused, 2);
    }
}
