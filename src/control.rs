//! The job's control channel: every launcher keeps one TCP connection to the coordinating
//! launcher and both sides send heartbeats, so that a launcher that goes silent — frozen, or on
//! a node that died while the API still says Running — is noticed within the heartbeat timeout
//! and the job stops (as for any lost peer) instead of hanging in a collective operation.
//!
//! The port is reachable by every pod of the cluster, so nothing on it is trusted:
//! - every frame carries an HMAC-SHA256 under the job's secret, over the direction, the
//!   connection's random challenge (sent by the server first) and a sequence number that goes
//!   up by one per frame: a forged, altered, replayed, reordered or other-connection frame is
//!   refused and its connection closed;
//! - a frame is at most `MAX_PAYLOAD` bytes; the length is read first and checked before any
//!   allocation; the hello must come within `HANDSHAKE`, and a silent connection is dropped;
//! - at most `MAX_CONNECTIONS` connections at once; a pod name outside the job is refused.
//!
//! An attacker on the pod network without the secret can connect and be dropped, nothing more;
//! it can also cut connections (as any on-path party can), which the job sees as a silent peer.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, timeout, Instant};
use tracing::{info, warn};

use crate::config::Secret;

pub const MAX_PAYLOAD: usize = 1024;
const MAC_LEN: usize = 32;
const NONCE_LEN: usize = 16;
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Far more than any job's launchers need at once; bounds what a flood of connections costs.
const MAX_CONNECTIONS: usize = 4096;
/// How long a follower tries to reach the coordinator, and a member may take to connect once.
const CONNECT_GRACE: Duration = Duration::from_secs(60);
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

/// One direction-aware, sequence-numbered, authenticated session of a connection.
pub struct Session {
    key: hmac::Key,
    challenge: [u8; NONCE_LEN],
    own: u8,
    sent: u64,
    received: u64,
}

impl Session {
    pub fn new(secret: &Secret, challenge: [u8; NONCE_LEN], is_server: bool) -> Session {
        Session {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret.0),
            challenge,
            own: if is_server { SERVER } else { CLIENT },
            sent: 0,
            received: 0,
        }
    }

    fn mac_input(&self, direction: u8, seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut input = Vec::with_capacity(1 + NONCE_LEN + 8 + payload.len());
        input.push(direction);
        input.extend_from_slice(&self.challenge);
        input.extend_from_slice(&seq.to_be_bytes());
        input.extend_from_slice(payload);
        input
    }

    /// The bytes of one frame: length, payload, MAC.
    pub fn seal(&mut self, message: &Message) -> Vec<u8> {
        let payload = serde_json::to_vec(message).unwrap_or_default();
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
        let io = |e: std::io::Error| WireError::Io(e.to_string());
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

    pub async fn write(
        &mut self,
        stream: &mut (impl AsyncWrite + Unpin),
        message: &Message,
    ) -> Result<(), WireError> {
        let frame = self.seal(message);
        stream
            .write_all(&frame)
            .await
            .map_err(|e| WireError::Io(e.to_string()))
    }
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

/// A joined control channel; its loss future (from `join`) resolves when the job lost a member.
pub struct Channel {
    finish: Option<oneshot::Sender<()>>,
    finished: Option<oneshot::Receiver<()>>,
}

impl Channel {
    /// Says goodbye (a follower: "done"; the coordinator: "bye" to all), briefly waiting for it
    /// to be sent, so that the others do not count this launcher's end as a loss.
    pub async fn finish(mut self) {
        if let (Some(finish), Some(finished)) = (self.finish.take(), self.finished.take()) {
            let _ = finish.send(());
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
    me: String,
    members: Vec<String>,
    heartbeat_timeout: Duration,
) -> std::io::Result<(Channel, BoxFuture<'static, String>)> {
    let (lost_tx, lost_rx) = oneshot::channel::<String>();
    let (finish_tx, finish_rx) = oneshot::channel::<()>();
    let (finished_tx, finished_rx) = oneshot::channel::<()>();
    match role {
        Role::Coordinator { listen } => {
            let listener = TcpListener::bind(listen).await?;
            info!(
                "control channel: coordinating {} launchers on {listen} (heartbeat timeout {} s)",
                members.len(),
                heartbeat_timeout.as_secs()
            );
            let others: Vec<String> = members.into_iter().filter(|m| *m != me).collect();
            tokio::spawn(coordinate(
                listener,
                secret,
                others,
                heartbeat_timeout,
                lost_tx,
                finish_rx,
                finished_tx,
            ));
        }
        Role::Follower { coordinator } => {
            info!(
                "control channel: following the coordinator at {coordinator} (heartbeat timeout {} s)",
                heartbeat_timeout.as_secs()
            );
            tokio::spawn(async move {
                let reason = follow(
                    coordinator,
                    secret,
                    me,
                    heartbeat_timeout,
                    finish_rx,
                    finished_tx,
                )
                .await;
                if let Some(reason) = reason {
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

fn challenge() -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    // The system's random source failing is not survivable for anything else either; a
    // zero challenge would only weaken replay protection across connections.
    let _ = SystemRandom::new().fill(&mut nonce);
    nonce
}

/// What the coordinator knows of its followers.
struct Members {
    started: Instant,
    last_seen: HashMap<String, Instant>,
    done: HashSet<String>,
    /// One sender per live connection, for broadcasts.
    links: Vec<mpsc::UnboundedSender<Message>>,
    connections: usize,
}

async fn coordinate(
    listener: TcpListener,
    secret: Secret,
    members: Vec<String>,
    heartbeat_timeout: Duration,
    lost_tx: oneshot::Sender<String>,
    mut finish_rx: oneshot::Receiver<()>,
    finished_tx: oneshot::Sender<()>,
) {
    let state = Arc::new(Mutex::new(Members {
        started: Instant::now(),
        last_seen: HashMap::new(),
        done: HashSet::new(),
        links: Vec::new(),
        connections: 0,
    }));
    let allowed: Arc<HashSet<String>> = Arc::new(members.iter().cloned().collect());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut watchdog = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let admitted = {
                    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                    let room = s.connections < MAX_CONNECTIONS;
                    if room {
                        s.connections += 1;
                    }
                    room
                };
                if !admitted {
                    warn!("control channel: refused {peer}: {MAX_CONNECTIONS} connections already");
                    continue;
                }
                let link = Link {
                    state: state.clone(),
                    allowed: allowed.clone(),
                    secret: secret.clone(),
                    heartbeat_timeout,
                    stop: stop_rx.clone(),
                };
                tokio::spawn(async move {
                    if let Err(why) = link.serve(stream).await {
                        warn!("control channel: closed the connection from {peer}: {why}");
                    }
                    let mut s = link.state.lock().unwrap_or_else(|e| e.into_inner());
                    s.connections -= 1;
                });
            }
            _ = watchdog.tick() => {
                let silent = {
                    let s = state.lock().unwrap_or_else(|e| e.into_inner());
                    silent_member(&s, &members, heartbeat_timeout)
                };
                if let Some(reason) = silent {
                    warn!("control channel: {reason}");
                    broadcast(&state, &Message::Lost { reason: reason.clone() });
                    let _ = lost_tx.send(reason);
                    // Keep serving: followers that connect late still hear of the loss.
                    let _ = finish_rx.await;
                    let _ = stop_tx.send(true);
                    let _ = finished_tx.send(());
                    return;
                }
            }
            _ = &mut finish_rx => {
                broadcast(&state, &Message::Bye);
                let _ = stop_tx.send(true);
                sleep(Duration::from_millis(50)).await;
                let _ = finished_tx.send(());
                return;
            }
        }
    }
}

/// The first member that is neither done nor heard from within its limit: the heartbeat
/// timeout since its last frame, or a grace period to connect at all.
fn silent_member(s: &Members, members: &[String], limit: Duration) -> Option<String> {
    members.iter().find_map(|m| {
        if s.done.contains(m) {
            return None;
        }
        let (since, allowed) = match s.last_seen.get(m) {
            Some(at) => (*at, limit),
            None => (s.started, limit.max(CONNECT_GRACE)),
        };
        (since.elapsed() > allowed).then(|| {
            format!(
                "peer pod {m} sent no heartbeat for {} s (frozen, or its node is gone)",
                allowed.as_secs()
            )
        })
    })
}

fn broadcast(state: &Arc<Mutex<Members>>, message: &Message) {
    let s = state.lock().unwrap_or_else(|e| e.into_inner());
    for link in &s.links {
        let _ = link.send(message.clone());
    }
}

/// One follower's connection, on the coordinator's side.
struct Link {
    state: Arc<Mutex<Members>>,
    allowed: Arc<HashSet<String>>,
    secret: Secret,
    heartbeat_timeout: Duration,
    stop: watch::Receiver<bool>,
}

impl Link {
    async fn serve(&self, mut stream: TcpStream) -> Result<(), WireError> {
        let io = |e: std::io::Error| WireError::Io(e.to_string());
        let nonce = challenge();
        let mut session = Session::new(&self.secret, nonce, true);
        timeout(HANDSHAKE, stream.write_all(&nonce))
            .await
            .map_err(|_| WireError::Io("no room to send the challenge".into()))?
            .map_err(io)?;
        let hello = timeout(HANDSHAKE, session.read(&mut stream))
            .await
            .map_err(|_| WireError::Io(format!("no hello within {} s", HANDSHAKE.as_secs())))??;
        let Message::Hello { pod } = hello else {
            return Err(WireError::Malformed(
                "the first frame is not a hello".into(),
            ));
        };
        if !self.allowed.contains(&pod) {
            return Err(WireError::Malformed(format!(
                "{pod} is not a member of this job"
            )));
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.last_seen.insert(pod.clone(), Instant::now());
            s.links.push(tx);
        }
        info!("control channel: {pod} joined");
        let (reader, mut writer) = stream.into_split();
        let (mut incoming, _reader) = frames(session, reader);
        let mut beat = tokio::time::interval(self.heartbeat_timeout / 3);
        let mut stop = self.stop.clone();
        // Sequence numbers are per direction: the writing half counts its own.
        let mut out = Session::new(&self.secret, nonce, true);
        let mut idle_until = Instant::now() + self.heartbeat_timeout;
        loop {
            tokio::select! {
                frame = incoming.recv() => match frame {
                    Some(Ok(Message::Beat)) => {
                        self.seen(&pod);
                        idle_until = Instant::now() + self.heartbeat_timeout;
                    }
                    Some(Ok(Message::Done)) => {
                        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                        s.done.insert(pod.clone());
                        return Ok(());
                    }
                    Some(Ok(other)) => {
                        return Err(WireError::Malformed(format!("{other:?} from {pod}")))
                    }
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
                // The watchdog decides what the silence means.
                _ = tokio::time::sleep_until(idle_until) => return Ok(()),
                message = rx.recv() => {
                    let Some(message) = message else { return Ok(()) };
                    out.write(&mut writer, &message).await?;
                }
                _ = beat.tick() => out.write(&mut writer, &Message::Beat).await?,
                _ = stop.changed() => return Ok(()),
            }
        }
    }

    fn seen(&self, pod: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.last_seen.insert(pod.to_string(), Instant::now());
    }
}

/// A follower's side: connects (retrying while the coordinator is not up yet), then beats and
/// listens. Returns the reason of a loss, or None after the coordinator's or its own goodbye.
async fn follow(
    coordinator: SocketAddr,
    secret: Secret,
    me: String,
    heartbeat_timeout: Duration,
    mut finish_rx: oneshot::Receiver<()>,
    finished_tx: oneshot::Sender<()>,
) -> Option<String> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut stream = loop {
        match timeout(HANDSHAKE, TcpStream::connect(coordinator)).await {
            Ok(Ok(stream)) => break stream,
            _ if started.elapsed() > CONNECT_GRACE => {
                return Some(format!(
                    "the coordinating launcher at {coordinator} could not be reached for {} s",
                    CONNECT_GRACE.as_secs()
                ))
            }
            _ => {
                info!("control channel: waiting for the coordinator at {coordinator}");
                tokio::select! {
                    _ = sleep(pause) => {}
                    _ = &mut finish_rx => {
                        let _ = finished_tx.send(());
                        return None;
                    }
                }
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    };
    let silent = || {
        Some(format!(
            "the coordinating launcher at {coordinator} sent no heartbeat for {} s (frozen, or its node is gone)",
            heartbeat_timeout.as_secs()
        ))
    };
    let mut nonce = [0u8; NONCE_LEN];
    if timeout(HANDSHAKE, stream.read_exact(&mut nonce))
        .await
        .is_err()
    {
        return silent();
    }
    let mut out = Session::new(&secret, nonce, false);
    let (reader, mut writer) = stream.into_split();
    let (mut incoming, _reader) = frames(Session::new(&secret, nonce, false), reader);
    if out
        .write(&mut writer, &Message::Hello { pod: me })
        .await
        .is_err()
    {
        return silent();
    }
    let mut beat = tokio::time::interval(heartbeat_timeout / 3);
    let mut heard_until = Instant::now() + heartbeat_timeout;
    loop {
        tokio::select! {
            frame = incoming.recv() => match frame {
                Some(Ok(Message::Beat)) => heard_until = Instant::now() + heartbeat_timeout,
                Some(Ok(Message::Lost { reason })) => return Some(reason),
                Some(Ok(Message::Bye)) => {
                    info!("control channel: the coordinator finished");
                    let _ = finish_rx.await;
                    let _ = finished_tx.send(());
                    return None;
                }
                Some(Ok(_)) | Some(Err(_)) | None => return silent(),
            },
            _ = tokio::time::sleep_until(heard_until) => return silent(),
            _ = beat.tick() => {
                if out.write(&mut writer, &Message::Beat).await.is_err() {
                    return silent();
                }
            }
            _ = &mut finish_rx => {
                let _ = out.write(&mut writer, &Message::Done).await;
                let _ = writer.shutdown().await;
                let _ = finished_tx.send(());
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret(b"0123456789abcdef".to_vec())
    }

    fn split(frame: &[u8]) -> (&[u8], &[u8]) {
        let length = u16::from_be_bytes([frame[0], frame[1]]) as usize;
        frame[2..].split_at(length)
    }

    #[test]
    fn frames_open_once_in_order_and_only_under_the_same_secret_and_challenge() {
        let nonce = [7u8; NONCE_LEN];
        let mut client = Session::new(&secret(), nonce, false);
        let mut server = Session::new(&secret(), nonce, true);
        let hello = client.seal(&Message::Hello { pod: "j-1".into() });
        let beat = client.seal(&Message::Beat);
        let (p, m) = split(&hello);
        assert_eq!(server.open(p, m), Ok(Message::Hello { pod: "j-1".into() }));
        // Replaying the hello (sequence 0 again) fails; the next frame in order passes.
        assert_eq!(server.open(p, m), Err(WireError::BadMac));
        let (p2, m2) = split(&beat);
        assert_eq!(server.open(p2, m2), Ok(Message::Beat));
        // Another secret, another connection's challenge, or the server's own direction: refused.
        for mut other in [
            Session::new(&Secret(b"fedcba9876543210".to_vec()), nonce, true),
            Session::new(&secret(), [8u8; NONCE_LEN], true),
            Session::new(&secret(), nonce, false),
        ] {
            assert_eq!(other.open(p, m), Err(WireError::BadMac));
        }
        // An altered payload fails.
        let mut altered = p.to_vec();
        altered[2] ^= 1;
        let mut fresh = Session::new(&secret(), nonce, true);
        assert_eq!(fresh.open(&altered, m), Err(WireError::BadMac));
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_reading_it() {
        let mut session = Session::new(&secret(), [0u8; NONCE_LEN], true);
        let mut bytes: &[u8] = &[0xff, 0xff, 1, 2, 3];
        assert_eq!(
            session.read(&mut bytes).await,
            Err(WireError::Oversized(65535))
        );
    }

    #[test]
    fn a_member_is_silent_after_the_timeout_unless_done() {
        let limit = Duration::from_secs(10);
        let long_ago = Instant::now() - Duration::from_secs(11);
        let mut s = Members {
            started: Instant::now(),
            last_seen: HashMap::from([("a".to_string(), long_ago)]),
            done: HashSet::new(),
            links: Vec::new(),
            connections: 0,
        };
        let members = vec!["a".to_string(), "b".to_string()];
        assert!(silent_member(&s, &members, limit)
            .is_some_and(|r| r.contains("peer pod a sent no heartbeat for 10 s")));
        s.done.insert("a".into());
        // b never connected, but its grace to connect is not over.
        assert_eq!(silent_member(&s, &members, limit), None);
    }
}
