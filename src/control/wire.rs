//! The channel's frames: messages, their encoding, the HMAC session of one connection, and the
//! limits every read is bounded by.

use std::sync::Arc;
use std::time::Duration;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::config::Secret;

use super::message::{Message, WireError};

pub use super::message::MAX_PAYLOAD;
/// The largest frame a follower reads from its coordinator: the membership of a big job.
pub(super) const MAX_FROM_COORDINATOR: usize = 16 << 20;
pub(super) const MAC_LEN: usize = 32;
pub(super) const NONCE_LEN: usize = 16;
/// Both challenges, the server's first.
pub type Challenge = [u8; 2 * NONCE_LEN];
pub(super) const HANDSHAKE: Duration = Duration::from_secs(5);
pub(super) const CLIENT: u8 = b'C';
pub(super) const SERVER: u8 = b'S';

/// A message serialised once, with the digest its MACs cover: a membership sent to a thousand
/// followers is encoded and hashed once, and each connection only MACs 32 bytes.
pub struct Encoded {
    payload: Vec<u8>,
    digest: [u8; 32],
}

impl Encoded {
    /// The bytes its frame takes on the wire.
    pub(super) fn frame_len(&self) -> u64 {
        (4 + self.payload.len() + MAC_LEN) as u64
    }

    pub fn new(message: &Message) -> Arc<Encoded> {
        // Serialising plain strings, numbers and addresses cannot fail.
        let payload = serde_json::to_vec(message).unwrap_or_default();
        let mut digest = [0u8; 32];
        digest.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &payload).as_ref());
        Arc::new(Encoded { payload, digest })
    }
}

/// One connection's authenticated session, for one direction of sending and receiving.
pub struct Session {
    pub(super) key: hmac::Key,
    pub(super) challenge: Challenge,
    pub(super) own: u8,
    pub(super) sent: u64,
    pub(super) received: u64,
    /// The largest frame this side reads: small for the coordinator (anyone can connect), a
    /// whole membership for a follower (it reads only the coordinator it chose to connect to).
    pub(super) limit: usize,
}

impl Session {
    pub fn new(secret: &Secret, challenge: Challenge, is_server: bool) -> Session {
        Session {
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret.0),
            challenge,
            own: if is_server { SERVER } else { CLIENT },
            sent: 0,
            received: 0,
            limit: if is_server {
                MAX_PAYLOAD
            } else {
                MAX_FROM_COORDINATOR
            },
        }
    }

    pub(super) fn mac_input(&self, direction: u8, seq: u64, digest: &[u8]) -> Vec<u8> {
        let mut input = Vec::with_capacity(1 + self.challenge.len() + 8 + digest.len());
        input.push(direction);
        input.extend_from_slice(&self.challenge);
        input.extend_from_slice(&seq.to_be_bytes());
        input.extend_from_slice(digest);
        input
    }

    /// The bytes of one frame: length, payload, MAC (over the payload's digest).
    pub fn seal(&mut self, message: &Message) -> Vec<u8> {
        self.seal_encoded(&Encoded::new(message))
    }

    pub(super) fn seal_encoded(&mut self, encoded: &Encoded) -> Vec<u8> {
        let tag = hmac::sign(
            &self.key,
            &self.mac_input(self.own, self.sent, &encoded.digest),
        );
        self.sent += 1;
        let mut frame = Vec::with_capacity(4 + encoded.payload.len() + MAC_LEN);
        frame.extend_from_slice(&(encoded.payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&encoded.payload);
        frame.extend_from_slice(tag.as_ref());
        frame
    }

    /// Checks one frame's payload and MAC, in the order the peer must have sent them.
    pub fn open(&mut self, payload: &[u8], mac: &[u8]) -> Result<Message, WireError> {
        let peer = if self.own == SERVER { CLIENT } else { SERVER };
        let digest = ring::digest::digest(&ring::digest::SHA256, payload);
        let input = self.mac_input(peer, self.received, digest.as_ref());
        hmac::verify(&self.key, &input, mac).map_err(|_| WireError::BadMac)?;
        self.received += 1;
        serde_json::from_slice(payload).map_err(|e| WireError::Malformed(e.to_string()))
    }

    pub async fn read(
        &mut self,
        stream: &mut (impl AsyncRead + Unpin),
    ) -> Result<Message, WireError> {
        let mut length = [0u8; 4];
        stream.read_exact(&mut length).await.map_err(io)?;
        let length = u32::from_be_bytes(length) as usize;
        if length > self.limit {
            return Err(WireError::Oversized(length, self.limit));
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
        self.write_encoded(stream, &Encoded::new(message), deadline)
            .await
    }

    pub(super) async fn write_encoded(
        &mut self,
        stream: &mut (impl AsyncWrite + Unpin),
        encoded: &Encoded,
        deadline: Duration,
    ) -> Result<(), WireError> {
        let frame = self.seal_encoded(encoded);
        match timeout(deadline, stream.write_all(&frame)).await {
            Ok(written) => written.map_err(io),
            Err(_) => Err(WireError::Io(format!(
                "the peer read nothing for {} s",
                deadline.as_secs()
            ))),
        }
    }
}

pub(super) fn io(e: std::io::Error) -> WireError {
    use std::io::ErrorKind::{ConnectionReset, UnexpectedEof};
    match e.kind() {
        // The peer's process is gone (its kernel closed or reset the connection).
        UnexpectedEof | ConnectionReset => WireError::Closed,
        _ => WireError::Io(e.to_string()),
    }
}

/// How long a closing side reads what its peer still sends: shorter than the coordinator's
/// flush of its last words, which it must not eat up.
const CLOSE_LINGER: Duration = Duration::from_millis(500);

/// Ends this side after its last frame, then reads (and drops) what the peer still sends until
/// it closes too, for at most `CLOSE_LINGER`. A socket closed with unread data is reset, and a
/// reset makes the peer drop what it has not read yet: this side's last frames (a `Done`, a
/// verdict), which would turn a success into a loss.
pub(super) async fn close_gracefully(
    writer: &mut super::net::Writer,
    incoming: &mut mpsc::Receiver<Result<Message, WireError>>,
) {
    let _ = writer.shutdown().await;
    let _ = timeout(CLOSE_LINGER, async {
        while let Some(Ok(_)) = incoming.recv().await {}
    })
    .await;
}

/// Reads frames one after the other on a task of their own: a read must never be cancelled
/// halfway through a frame (by a timer or a write in a `select!`), or the stream would lose
/// its framing. The task ends at the first error, or when the returned guard is dropped.
pub(super) fn frames(
    mut session: Session,
    mut reader: super::net::Reader,
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

pub(super) fn nonce() -> Result<[u8; NONCE_LEN], WireError> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| WireError::Io("no random numbers for a challenge".into()))?;
    Ok(nonce)
}

pub(super) fn both(server: [u8; NONCE_LEN], client: [u8; NONCE_LEN]) -> Challenge {
    let mut challenge = [0u8; 2 * NONCE_LEN];
    challenge[..NONCE_LEN].copy_from_slice(&server);
    challenge[NONCE_LEN..].copy_from_slice(&client);
    challenge
}

#[cfg(test)]
mod tests {
    use super::super::message::{cut, MAX_REASON};
    use super::*;
    use crate::ledger::Ledger;
    use crate::loss::{Kind, Loss};

    fn secret() -> Secret {
        Secret(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    fn hello(pod: &str) -> Message {
        Message::Hello {
            pod: pod.into(),
            next_epoch: 0,
            view: "v".into(),
            max_restarts: 0,
            heartbeat_ms: 0,
            who: format!("pod {pod}"),
            preemptions: 0,
            max_preemptions: 1,
            nproc_per_pod: 1,
            grows: 0,
        }
    }

    /// Whatever a failure's text, the follower's frame saying it stays within what the
    /// coordinator reads.
    #[test]
    fn a_reason_of_any_text_fits_in_a_frame() {
        for text in [
            "plain ".repeat(200),
            "\u{1}é\"".repeat(300),
            "€".repeat(1000),
        ] {
            let message = Message::Failed(Loss {
                reason: cut(&text),
                restart: false,
                kind: Kind::Hang,
            });
            let payload = serde_json::to_vec(&message).unwrap();
            assert!(payload.len() <= MAX_PAYLOAD, "{} bytes", payload.len());
            assert!(text.starts_with(&cut(&text)) && !cut(&text).is_empty());
        }
    }

    /// What a launcher without hang detection (or of the release before it) sends still reads:
    /// the fields added since have their defaults.
    #[test]
    fn messages_without_the_newer_fields_still_read() {
        let lost: Message =
            serde_json::from_str(r#"{"kind":"lost","reason":"x","restart":true}"#).unwrap();
        assert_eq!(
            lost,
            Message::Lost(Loss {
                reason: "x".into(),
                restart: true,
                kind: Kind::Failure,
            })
        );
        let hello: Message = serde_json::from_str(
            r#"{"kind":"hello","pod":"p","next":0,"view":"v","max_restarts":1}"#,
        )
        .unwrap();
        assert!(matches!(
            hello,
            Message::Hello { who, heartbeat_ms: 0, preemptions: 0, max_preemptions: u32::MAX, nproc_per_pod: 1, grows: 0, .. } if who.is_empty()
        ));
        let go: Message =
            serde_json::from_str(r#"{"kind":"go","epoch":2,"membership":null,"max_restarts":1}"#)
                .unwrap();
        assert!(matches!(
            go,
            Message::Go {
                ledger: Ledger {
                    epoch: 2,
                    max_restarts: 1,
                    preemptions: 0,
                    max_preemptions: u32::MAX,
                    grows: 0,
                },
                ..
            }
        ));
    }

    fn split(frame: &[u8]) -> (&[u8], &[u8]) {
        let length = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        frame[4..].split_at(length)
    }

    #[test]
    fn frames_open_once_in_order_and_only_under_the_same_secret_and_challenges() {
        let challenge = both([7u8; NONCE_LEN], [9u8; NONCE_LEN]);
        let mut client = Session::new(&secret(), challenge, false);
        let mut server = Session::new(&secret(), challenge, true);
        let sealed = client.seal(&hello("j-1"));
        let beat = client.seal(&Message::beat());
        let (p, m) = split(&sealed);
        assert_eq!(server.open(p, m), Ok(hello("j-1")));
        // Replaying the hello (sequence 0 again) fails; the next frame in order passes.
        assert_eq!(server.open(p, m), Err(WireError::BadMac));
        let (p2, m2) = split(&beat);
        assert_eq!(server.open(p2, m2), Ok(Message::beat()));
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
        let lost = recorded.seal(&Message::Lost(Loss {
            reason: "replayed".into(),
            restart: true,
            kind: Kind::Failure,
        }));
        let (p, m) = split(&lost);
        let mut victim = Session::new(&secret(), both(server, [2u8; NONCE_LEN]), false);
        assert_eq!(victim.open(p, m), Err(WireError::BadMac));
    }

    #[test]
    fn long_reasons_are_cut_to_fit_a_frame() {
        let mut session = Session::new(&secret(), [0u8; 2 * NONCE_LEN], true);
        let frame = session.seal(&Message::Lost(Loss {
            reason: cut(&"x".repeat(10_000)),
            restart: false,
            kind: Kind::Failure,
        }));
        let (payload, _) = split(&frame);
        assert!(payload.len() <= MAX_PAYLOAD);
        assert!(serde_json::from_slice::<Message>(payload).is_ok());
    }

    /// A reason that fits exactly is not cut; a frame takes the bytes the coordinator counts
    /// as sent (the count its closing line reports).
    #[test]
    fn a_reason_that_fits_is_whole_and_a_frame_is_as_long_as_counted() {
        let fits = "x".repeat(MAX_REASON - 2);
        assert_eq!(cut(&fits), fits);
        assert_eq!(cut(&format!("{fits}y")), fits);
        let mut session = Session::new(&secret(), [0u8; 2 * NONCE_LEN], true);
        for message in [Message::beat(), hello("j-1")] {
            let encoded = Encoded::new(&message);
            let frame = session.seal_encoded(&encoded);
            assert_eq!(encoded.frame_len(), frame.len() as u64, "{message:?}");
        }
    }

    /// Each connection's challenge is fresh: a constant one would let a frame recorded on one
    /// connection be replayed on another.
    #[test]
    fn challenges_differ_from_connection_to_connection() {
        let drawn: std::collections::HashSet<[u8; NONCE_LEN]> =
            (0..8).map(|_| nonce().unwrap()).collect();
        assert_eq!(drawn.len(), 8);
    }

    /// Dropping the guard ends the reading task, and with it the connection's read half: a
    /// frozen peer's link leaves nothing behind.
    #[tokio::test]
    async fn the_reading_task_ends_with_its_guard() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let session = Session::new(&secret(), [0u8; 2 * NONCE_LEN], true);
        let (_incoming, guard) = frames(session, Box::new(ours));
        drop(guard);
        // The read half is gone with the task: the peer reads the end of the stream.
        let mut byte = [0u8; 1];
        let read = timeout(Duration::from_secs(2), theirs.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "the reading task outlived its guard"
        );
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_reading_it() {
        let mut session = Session::new(&secret(), [0u8; 2 * NONCE_LEN], true);
        let mut bytes: &[u8] = &[0, 0, 0x04, 0x01, 1, 2, 3];
        assert_eq!(
            session.read(&mut bytes).await,
            Err(WireError::Oversized(1025, MAX_PAYLOAD))
        );
        // A frame of exactly the limit is read (and judged by its MAC).
        let mut frame = (MAX_PAYLOAD as u32).to_be_bytes().to_vec();
        frame.resize(4 + MAX_PAYLOAD + MAC_LEN, 0);
        assert_eq!(
            session.read(&mut frame.as_slice()).await,
            Err(WireError::BadMac)
        );
    }
}
