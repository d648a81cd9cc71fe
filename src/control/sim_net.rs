//! The in-memory network of the drivers' simulation (`driven`): connections are tokio duplex
//! pipes between the simulated pods' addresses, on the test's paused clock. A pod's network can
//! be cut (every connection of it fails on both sides, as after a reset), cut on its side only
//! (its connections fail there while their peers hear nothing: a reset that never reached them,
//! a NAT entry gone), or go dark (nothing in or out and no FIN: a frozen launcher, a node that
//! died), and a connection to a dark pod is never answered.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

use super::net::{Accepted, Listener, Net, Network, Reader, Writer};

/// Bytes a connection holds in each direction before a writer waits (a socket's buffers).
const PIPE: usize = 64 * 1024;

#[derive(Default)]
struct World {
    listeners: HashMap<SocketAddr, mpsc::UnboundedSender<Accepted>>,
    dark: HashSet<IpAddr>,
    /// Every connection: each side's address and state.
    connections: Vec<[(IpAddr, Arc<Side>); 2]>,
    /// Whoever waits on a connection, woken when the network changes.
    waiting: Vec<Waker>,
    /// The ends dark pods let go of: open, as nothing closes them.
    kept: Vec<Box<dyn std::any::Any + Send>>,
    next_port: u16,
}

impl World {
    fn wake_all(&mut self) {
        for waker in self.waiting.drain(..) {
            waker.wake();
        }
    }
}

/// One side of a connection.
#[derive(Default)]
struct Side {
    /// Its reads and writes fail (a reset reached it).
    cut: AtomicBool,
    /// Its end closes nothing when dropped: the peer never hears of it.
    silent: AtomicBool,
}

/// The network every simulated pod shares.
#[derive(Clone, Default)]
pub(crate) struct SimNet(Arc<Mutex<World>>);

impl SimNet {
    pub(crate) fn net(&self) -> Net {
        Net(Arc::new(self.clone()))
    }

    /// Every connection of `ip` fails on both sides (its pod's network was reset).
    pub(crate) fn cut(&self, ip: IpAddr) {
        let mut world = self.0.lock().unwrap();
        for sides in &world.connections {
            if sides.iter().any(|(own, _)| *own == ip) {
                for (_, side) in sides {
                    side.cut.store(true, Ordering::SeqCst);
                }
            }
        }
        world.wake_all();
    }

    /// Every connection of `ip` fails on its side; their peers hear nothing, ever (a reset
    /// lost on the way): they must find out by the silence.
    pub(crate) fn cut_one_side(&self, ip: IpAddr) {
        let mut world = self.0.lock().unwrap();
        for (own, side) in world.connections.iter().flatten() {
            if *own == ip {
                side.silent.store(true, Ordering::SeqCst);
                side.cut.store(true, Ordering::SeqCst);
            }
        }
        world.wake_all();
    }

    /// Nothing goes in or out of `ip` any more, and nothing says so (`false`: it is back).
    pub(crate) fn set_dark(&self, ip: IpAddr, dark: bool) {
        let mut world = self.0.lock().unwrap();
        match dark {
            true => world.dark.insert(ip),
            false => world.dark.remove(&ip),
        };
        world.wake_all();
    }
}

impl Network for SimNet {
    fn listen(&self, at: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        let world = self.0.clone();
        async move {
            let (tx, rx) = mpsc::unbounded_channel();
            let mut locked = world.lock().unwrap();
            if locked.listeners.get(&at).is_some_and(|l| !l.is_closed()) {
                return Err(io::Error::from(io::ErrorKind::AddrInUse));
            }
            locked.listeners.insert(at, tx);
            drop(locked);
            Ok(Box::new(SimListener(rx)) as Box<dyn Listener>)
        }
        .boxed()
    }

    fn connect(&self, from: IpAddr, to: SocketAddr) -> BoxFuture<'_, io::Result<(Reader, Writer)>> {
        let world = self.0.clone();
        async move {
            let dark = {
                let locked = world.lock().unwrap();
                locked.dark.contains(&from) || locked.dark.contains(&to.ip())
            };
            if dark {
                // Nobody answers, nobody says so.
                return std::future::pending().await;
            }
            let (ours, side) = {
                let mut locked = world.lock().unwrap();
                let Some(listener) = locked.listeners.get(&to).filter(|l| !l.is_closed()) else {
                    return Err(io::Error::from(io::ErrorKind::ConnectionRefused));
                };
                let listener = listener.clone();
                let (ours, theirs) = tokio::io::duplex(PIPE);
                let (side, their_side) = (Arc::<Side>::default(), Arc::<Side>::default());
                locked
                    .connections
                    .push([(from, side.clone()), (to.ip(), their_side.clone())]);
                locked.next_port = locked.next_port.wrapping_add(1).max(1024);
                let port = locked.next_port;
                drop(locked);
                let (reader, writer) = tokio::io::split(theirs);
                let accepted: Accepted = (
                    Box::new(End::new(reader, to.ip(), &their_side, &world)),
                    Box::new(End::new(writer, to.ip(), &their_side, &world)),
                    SocketAddr::new(from, port),
                );
                if listener.send(accepted).is_err() {
                    return Err(io::Error::from(io::ErrorKind::ConnectionRefused));
                }
                (ours, side)
            };
            let (reader, writer) = tokio::io::split(ours);
            Ok((
                Box::new(End::new(reader, from, &side, &world)) as Reader,
                Box::new(End::new(writer, from, &side, &world)) as Writer,
            ))
        }
        .boxed()
    }
}

struct SimListener(mpsc::UnboundedReceiver<Accepted>);

impl Listener for SimListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Accepted>> {
        async move {
            match self.0.recv().await {
                Some(accepted) => Ok(accepted),
                None => std::future::pending().await,
            }
        }
        .boxed()
    }
}

/// How many waiting tasks are kept before they are all woken anyway (a spurious wake costs a
/// poll; an unbounded list would cost the memory of a long run).
const WAITING_KEPT: usize = 4096;

/// One side's half of a connection; `own` is its pod.
struct End<T: Send + 'static> {
    /// Taken only when the end is dropped.
    io: Option<T>,
    own: IpAddr,
    side: Arc<Side>,
    world: Arc<Mutex<World>>,
}

impl<T: Send + 'static> Drop for End<T> {
    /// A dark pod's end that its tasks let go of (a timeout of its own) closes nothing: its
    /// node is gone, no FIN leaves it, so the pipe is kept open. So is a silently cut end's.
    fn drop(&mut self) {
        let mut world = self.world.lock().unwrap();
        if world.dark.contains(&self.own) || self.side.silent.load(Ordering::SeqCst) {
            if let Some(io) = self.io.take() {
                world.kept.push(Box::new(io));
            }
        }
    }
}

impl<T: Send + 'static> End<T> {
    fn new(io: T, own: IpAddr, side: &Arc<Side>, world: &Arc<Mutex<World>>) -> Self {
        End {
            io: Some(io),
            own,
            side: side.clone(),
            world: world.clone(),
        }
    }

    fn io(&mut self) -> Pin<&mut T>
    where
        T: Unpin,
    {
        Pin::new(
            self.io
                .as_mut()
                .expect("an end is used only until it is dropped"),
        )
    }

    /// Whether this side may move now: an error once cut; not at all while its pod is dark
    /// (what a live peer writes to it fills the pipe, then waits, as a socket's buffers do).
    fn may_move(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.side.cut.load(Ordering::SeqCst) {
            return Poll::Ready(Err(io::Error::from(io::ErrorKind::ConnectionReset)));
        }
        let mut world = self.world.lock().unwrap();
        // Woken when the network changes: a cut must reach a waiting reader or writer too.
        if world.waiting.len() >= WAITING_KEPT {
            world.wake_all();
        }
        world.waiting.push(cx.waker().clone());
        if world.dark.contains(&self.own) {
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for End<ReadHalf<DuplexStream>> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.may_move(cx) {
            Poll::Ready(Ok(())) => self.io().poll_read(cx, buf),
            other => other,
        }
    }
}

impl AsyncWrite for End<WriteHalf<DuplexStream>> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.may_move(cx) {
            Poll::Ready(Ok(())) => self.io().poll_write(cx, data),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.may_move(cx) {
            Poll::Ready(Ok(())) => self.io().poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.may_move(cx) {
            Poll::Ready(Ok(())) => self.io().poll_shutdown(cx),
            other => other,
        }
    }
}
