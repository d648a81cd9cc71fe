//! The metrics endpoint: `GET /metrics` over HTTP/1.1, one answer per connection. A port open
//! to the cluster is an attack surface: it is read-only (nothing a request says changes
//! anything), shows nothing secret, reads at most `HEAD_LIMIT` bytes of a request within
//! `READ_TIMEOUT`, answers at most `CONNECTIONS` clients at once and `PER_ADDRESS` of one
//! address (the rest are closed at once: one client cannot hold every slot and keep Prometheus
//! out) and gives each answer `WRITE_TIMEOUT` to leave.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{info, warn};

use super::{Board, Status};
use crate::config::Config;

/// A request's head may hold this much: a scraper's is a few hundred bytes.
pub const HEAD_LIMIT: usize = 8192;
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONNECTIONS: usize = 8;
/// Connections one address may hold at once.
pub const PER_ADDRESS: usize = 4;
/// How often each process's step is sampled for its rate.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The board the launcher writes and the endpoint reads.
pub type Shared = Arc<Mutex<Board>>;

/// The launcher's board, its endpoint started on `--metrics-port` (None: off). It listens on
/// every address, but on the pod's own when that is a loopback one (`local`'s pods, one
/// machine's: each its own), so that `kubectl port-forward` reaches it too.
pub async fn start_for(config: &Config, pod_ip: IpAddr, pod: &str) -> Option<Shared> {
    let port = config.ports.metrics?;
    let host = match pod_ip {
        ip if ip.is_loopback() => ip,
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let board = Arc::new(Mutex::new(Board::new(&config.topology.job_name, pod)));
    start(SocketAddr::new(host, port), board.clone()).await;
    Some(board)
}

/// Listens on `at` and answers until the launcher ends; a port that cannot be had is said, and
/// the launcher runs without metrics (a job is not failed for them).
pub async fn start(at: SocketAddr, board: Shared) {
    let listener = match TcpListener::bind(at).await {
        Ok(listener) => listener,
        Err(e) => {
            warn!("no metrics: cannot listen on {at} ({e}); give another --metrics-port, or 0");
            return;
        }
    };
    info!("metrics for Prometheus on http://{at}/metrics");
    tokio::spawn(serve(listener, board));
}

/// The connections each address holds now.
type Holders = Arc<Mutex<std::collections::HashMap<IpAddr, usize>>>;

/// One address's hold on a slot, given back when its connection ends.
struct Held(Holders, IpAddr);

impl Held {
    fn take(holders: &Holders, ip: IpAddr) -> Option<Held> {
        let mut held = holders.lock().unwrap_or_else(|p| p.into_inner());
        let count = held.entry(ip).or_default();
        if *count >= PER_ADDRESS {
            return None;
        }
        *count += 1;
        Some(Held(holders.clone(), ip))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = held.get_mut(&self.1) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.1);
            }
        }
    }
}

async fn serve(listener: TcpListener, board: Shared) {
    let permits = Arc::new(Semaphore::new(CONNECTIONS));
    let holders = Holders::default();
    let mut sample = tokio::time::interval(SAMPLE_EVERY);
    loop {
        tokio::select! {
            _ = sample.tick() => lock(&board).sample(std::time::Instant::now()),
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else {
                    // Out of descriptors, say: a pause rather than a spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let Some(held) = Held::take(&holders, peer.ip()) else {
                    continue;
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    continue;
                };
                let board = board.clone();
                tokio::spawn(async move {
                    answer(stream, &board).await;
                    drop((permit, held));
                });
            }
        }
    }
}

pub fn lock(board: &Shared) -> std::sync::MutexGuard<'_, Board> {
    // A panic while holding it leaves the board as it was: still worth showing.
    board
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn answer(mut stream: TcpStream, board: &Shared) {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Some(head)) => head,
        Ok(None) => Head::TooLarge,
        // Silent past the limit: closed without a word.
        Err(_) => return,
    };
    const TEXT: &str = "text/plain; charset=utf-8";
    let (status, kind, body, location) = match respond(&head) {
        Route::Metrics => {
            let metrics = lock(board).render(std::time::Instant::now());
            ("200 OK", METRICS_TYPE, metrics, None)
        }
        Route::Status => match status_of(board).await {
            Status::Job(text) | Status::Pod(text) => ("200 OK", TEXT, text, None),
            Status::Elsewhere(at) => {
                let body = format!("the job's table is on its coordinator: http://{at}/status\n");
                let location = Some(format!("http://{at}/status"));
                ("307 Temporary Redirect", TEXT, body, location)
            }
            Status::Asked => {
                let body = "the job's table is being made: ask again\n".to_string();
                ("503 Service Unavailable", TEXT, body, None)
            }
        },
        Route::Refused(status, body) => (status, TEXT, body.to_string(), None),
    };
    let location = location.map_or(String::new(), |l| format!("Location: {l}\r\n"));
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n{location}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = stream.write_all(response.as_bytes());
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write).await;
}

/// How long `GET /status` on the coordinator waits for the table it asked its view for (the
/// view looks every 250 ms, and makes one at most every second).
pub const TABLE_WAIT: Duration = Duration::from_secs(3);

/// The status to answer: on the coordinator, a fresh table, asked for and waited for.
async fn status_of(board: &Shared) -> Status {
    let deadline = tokio::time::Instant::now() + TABLE_WAIT;
    loop {
        let status = lock(board).status(std::time::Instant::now());
        if status != Status::Asked || tokio::time::Instant::now() >= deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A request's head as read: its first line, or too large to read.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Line(String),
    TooLarge,
}

/// Reads up to the blank line that ends the head, at most `HEAD_LIMIT` bytes; None when it is
/// larger. A connection closed early gives what came.
async fn read_head(stream: &mut TcpStream) -> Option<Head> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > HEAD_LIMIT {
            return None;
        }
    }
    let text = String::from_utf8_lossy(&head);
    Some(Head::Line(text.lines().next().unwrap_or("").to_string()))
}

/// What a request asks for: the metrics (`GET /metrics`), the job's table (`GET /status`,
/// what `paddle-launcher status` prints); nothing else is served.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Status,
    Refused(&'static str, &'static str),
}

fn respond(head: &Head) -> Route {
    let line = match head {
        Head::Line(line) => line,
        Head::TooLarge => return Route::Refused("431 Request Header Fields Too Large", ""),
    };
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        ("GET", "/status") => Route::Status,
        ("GET", _) => Route::Refused("404 Not Found", "only /metrics and /status are served\n"),
        _ => Route::Refused("405 Method Not Allowed", "only GET is served\n"),
    }
}

const METRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_of_the_metrics_and_the_status_is_answered() {
        let line = |l: &str| respond(&Head::Line(l.to_string()));
        assert_eq!(line("GET /metrics HTTP/1.1"), Route::Metrics);
        assert_eq!(line("GET /metrics?x=1 HTTP/1.1"), Route::Metrics);
        assert_eq!(line("GET /status HTTP/1.1"), Route::Status);
        assert!(matches!(
            line("GET / HTTP/1.1"),
            Route::Refused("404 Not Found", _)
        ));
        let post = line("POST /metrics HTTP/1.1");
        assert!(matches!(post, Route::Refused("405 Method Not Allowed", _)));
        assert!(matches!(
            line(""),
            Route::Refused("405 Method Not Allowed", _)
        ));
        let large = respond(&Head::TooLarge);
        assert!(matches!(
            large,
            Route::Refused("431 Request Header Fields Too Large", _)
        ));
    }
}
