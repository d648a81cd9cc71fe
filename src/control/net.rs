//! Where the channel's connections come from: TCP in the binary; under the drivers'
//! simulation (`driven`), an in-memory network on tokio's paused clock, so that the very tasks
//! the binary runs (`Coordinator::run`, `serve`, `talk`, `follow`) are driven there.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket};

/// One direction of a connection.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// A connection accepted: its two directions and the peer's address.
pub type Accepted = (Reader, Writer, SocketAddr);

/// A listening socket.
pub trait Listener: Send {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Accepted>>;
}

/// What the channel connects over.
pub trait Network: Send + Sync {
    fn listen(&self, at: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>>;
    /// A connection to `to` from this pod's own address `from` (the coordinator admits member
    /// addresses only).
    fn connect(&self, from: IpAddr, to: SocketAddr) -> BoxFuture<'_, io::Result<(Reader, Writer)>>;
}

/// A network, shared by the tasks of one launcher.
#[derive(Clone)]
pub struct Net(pub Arc<dyn Network>);

/// The network the binary uses: TCP.
pub fn tcp() -> Net {
    Net(Arc::new(Tcp))
}

struct Tcp;

struct TcpListening(TcpListener);

impl Listener for TcpListening {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Accepted>> {
        async move {
            let (stream, peer) = self.0.accept().await?;
            let (reader, writer) = stream.into_split();
            Ok((Box::new(reader) as Reader, Box::new(writer) as Writer, peer))
        }
        .boxed()
    }
}

impl Network for Tcp {
    fn listen(&self, at: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        async move {
            let listener = TcpListener::bind(at).await?;
            Ok(Box::new(TcpListening(listener)) as Box<dyn Listener>)
        }
        .boxed()
    }

    fn connect(&self, from: IpAddr, to: SocketAddr) -> BoxFuture<'_, io::Result<(Reader, Writer)>> {
        async move {
            let socket = match to {
                SocketAddr::V4(_) => TcpSocket::new_v4(),
                SocketAddr::V6(_) => TcpSocket::new_v6(),
            }?;
            socket
                .bind(SocketAddr::new(from, 0))
                .map_err(|e| io::Error::new(e.kind(), format!("cannot use {from}: {e}")))?;
            let (reader, writer) = socket.connect(to).await?.into_split();
            Ok((Box::new(reader) as Reader, Box::new(writer) as Writer))
        }
        .boxed()
    }
}
