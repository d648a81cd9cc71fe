//! The metrics endpoint: `GET /metrics` (and `GET /status`) over HTTP/1.1, served by hyper, one
//! answer per connection. A port open to the cluster is an attack surface: it is read-only
//! (nothing a request says changes anything), shows nothing secret, reads at most `HEAD_LIMIT`
//! bytes of a request head within `HEAD_TIMEOUT` (a scraper sends its head at once: seconds are
//! a scraper's scale, not minutes), holds at most `CONNECTIONS` connections and `SCRAPES_PER_ADDRESS`
//! of one address, and ends every connection within `CONNECTION_TIMEOUT`. When every slot is
//! held, a new connection takes the place of the oldest one that has been silent for
//! `HEAD_GRACE` without its request head (`Slots::admit`): clients that open connections and
//! say nothing keep Prometheus or `status` out only by holding every slot with connections
//! younger than that, from `CONNECTIONS / SCRAPES_PER_ADDRESS` addresses at least.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tracing::{info, warn};

use super::{Board, Status};
use crate::config::Config;

/// A request's head may hold this much (hyper's smallest buffer): a scraper's is a few hundred
/// bytes. A larger head is answered 431.
pub const HEAD_LIMIT: usize = 8192;
/// How long a connection may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a connection may last in all (its head, the answer made and sent): the job's table
/// waits up to `TABLE_WAIT`, a slow reader of a large answer no more than this.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections open at once: a scrape and a `status` are one each, and a connection costs a
/// small task and an 8 KiB buffer at most; enough that a client holding slots needs many
/// addresses (`SCRAPES_PER_ADDRESS` each) to hold them all.
pub const CONNECTIONS: usize = 64;
/// Connections one address may hold at once.
pub const SCRAPES_PER_ADDRESS: usize = 4;
/// How long a new connection is safe from being closed for a newer one while it has not sent
/// its request head: a scraper's head comes within milliseconds, so a silent connection older
/// than this is the one that waits (1 s let attackers that close each connection after 0.5 s
/// never be evicted: docs/observability.md's measures).
pub const HEAD_GRACE: Duration = Duration::from_millis(250);
/// How often each process's step is sampled for its rate.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The board the launcher writes and the endpoint reads.
pub type SharedBoard = Arc<Mutex<Board>>;

/// The launcher's board, its endpoint started on `--metrics-port` (None: off). It listens on
/// every address, but on the pod's own when that is a loopback one (`local`'s pods, one
/// machine's: each its own), so that `kubectl port-forward` reaches it too.
pub async fn start_for(config: &Config, pod_ip: IpAddr, pod: &str) -> Option<SharedBoard> {
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
pub async fn start(at: SocketAddr, board: SharedBoard) {
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

/// The open connections, oldest first: each with its address, whether its request head has
/// come (its answer is being made), and how to close it.
#[derive(Default)]
struct Slots {
    open: Vec<Slot>,
    next: u64,
}

struct Slot {
    id: u64,
    ip: IpAddr,
    opened: std::time::Instant,
    asked: Arc<AtomicBool>,
    close: Option<tokio::task::AbortHandle>,
}

/// Why a connection was not let in.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// Its address holds `SCRAPES_PER_ADDRESS` connections already.
    AddressFull,
    /// Every slot is held by a connection being answered.
    Full,
}

impl Slots {
    /// A place for a connection from `ip` opened `now`: its id, and whether it had to close
    /// another to get one. Past `SCRAPES_PER_ADDRESS` of its address it is refused; with every slot
    /// held, the oldest connection that has been silent for `HEAD_GRACE` without its request
    /// head is closed for it (a scraper's head comes at once: a connection that says nothing
    /// is the one that waits; a newer one may be a scraper whose head is on its way); it is
    /// refused only when no held slot is such.
    fn admit(
        &mut self,
        ip: IpAddr,
        now: std::time::Instant,
    ) -> Result<(u64, Option<Slot>), Refused> {
        let idle = |s: &Slot| {
            !s.asked.load(Ordering::Relaxed)
                && now.saturating_duration_since(s.opened) >= HEAD_GRACE
        };
        let mut closed = None;
        // An address past its share (clients behind one address: a sidecar, a NAT) gives up
        // its own oldest silent connection, else the newcomer is refused.
        if self.open.iter().filter(|s| s.ip == ip).count() >= SCRAPES_PER_ADDRESS {
            let own = self.open.iter().position(|s| s.ip == ip && idle(s));
            let own = own.ok_or(Refused::AddressFull)?;
            closed = Some(self.open.remove(own));
        }
        if closed.is_none() && self.open.len() >= CONNECTIONS {
            let oldest = self.open.iter().position(idle).ok_or(Refused::Full)?;
            closed = Some(self.open.remove(oldest));
        }
        let id = self.next;
        self.next += 1;
        self.open.push(Slot {
            id,
            ip,
            opened: now,
            asked: Arc::default(),
            close: None,
        });
        Ok((id, closed))
    }

    fn slot(&mut self, id: u64) -> Option<&mut Slot> {
        self.open.iter_mut().find(|s| s.id == id)
    }

    fn leave(&mut self, id: u64) {
        self.open.retain(|s| s.id != id);
    }
}

/// A connection's slot, given back when its task ends or is dropped.
struct Leaving(Arc<Mutex<Slots>>, u64);

impl Drop for Leaving {
    fn drop(&mut self) {
        locked(&self.0).leave(self.1);
    }
}

fn locked(slots: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

async fn serve(listener: TcpListener, board: SharedBoard) {
    let slots: Arc<Mutex<Slots>> = Arc::default();
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
                let admitted = locked(&slots).admit(peer.ip(), std::time::Instant::now());
                // Refused: closed at once, without a word.
                let Ok((id, closed)) = admitted else { continue };
                if let Some(close) = closed.and_then(|slot| slot.close) {
                    close.abort();
                }
                let asked = match locked(&slots).slot(id) {
                    Some(slot) => slot.asked.clone(),
                    None => continue,
                };
                let (board, left) = (board.clone(), slots.clone());
                let task = tokio::spawn(async move {
                    // Its slot given back however the task ends: done, timed out, aborted for
                    // a newer connection, or a panic in the answer.
                    let _leaving = Leaving(left, id);
                    let exchange = connection(stream, board, asked);
                    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, exchange).await;
                });
                match locked(&slots).slot(id) {
                    Some(slot) => slot.close = Some(task.abort_handle()),
                    // Closed by a newer connection before it was registered: gone already.
                    None => task.abort(),
                }
            }
        }
    }
}

pub fn lock(board: &SharedBoard) -> std::sync::MutexGuard<'_, Board> {
    // A panic while holding it leaves the board as it was: still worth showing.
    board
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One connection, one answer: hyper reads the head (at most `HEAD_LIMIT` bytes within
/// `HEAD_TIMEOUT`, else a 431 or a close), `asked` is set once it has come, and the connection
/// closes after the answer.
async fn connection(stream: tokio::net::TcpStream, board: SharedBoard, asked: Arc<AtomicBool>) {
    let answering = hyper::service::service_fn(move |request: Request<Incoming>| {
        asked.store(true, Ordering::Relaxed);
        let board = board.clone();
        async move { Ok::<_, Infallible>(answer(&request, &board).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(HEAD_LIMIT)
        .keep_alive(false)
        .title_case_headers(true)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), answering)
        .await;
}

async fn answer(request: &Request<Incoming>, board: &SharedBoard) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    let (status, kind, body, location) =
        match respond(request.method().as_str(), request.uri().path()) {
            Route::Metrics => {
                let metrics = lock(board).render(std::time::Instant::now());
                (StatusCode::OK, METRICS_TYPE, metrics, None)
            }
            Route::Status => match status_of(board).await {
                Status::Job(text) | Status::Pod(text) => (StatusCode::OK, TEXT, text, None),
                Status::Elsewhere(at) => {
                    let body =
                        format!("the job's table is on its coordinator: http://{at}/status\n");
                    let location = Some(format!("http://{at}/status"));
                    (StatusCode::TEMPORARY_REDIRECT, TEXT, body, location)
                }
                Status::Asked => {
                    let body = "the job's table is being made: ask again\n".to_string();
                    (StatusCode::SERVICE_UNAVAILABLE, TEXT, body, None)
                }
            },
            Route::Refused(status, body) => (status, TEXT, body.to_string(), None),
        };
    let mut response = Response::builder()
        .status(status)
        .header("Content-Type", kind);
    if let Some(location) = location {
        response = response.header("Location", location);
    }
    response
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// How long `GET /status` on the coordinator waits for the table it asked its view for (the
/// view looks every 250 ms, and makes one at most every second).
pub const TABLE_WAIT: Duration = Duration::from_secs(3);

/// The status to answer: on the coordinator, a fresh table, asked for and waited for.
async fn status_of(board: &SharedBoard) -> Status {
    let deadline = tokio::time::Instant::now() + TABLE_WAIT;
    loop {
        let status = lock(board).status(std::time::Instant::now());
        if status != Status::Asked || tokio::time::Instant::now() >= deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a request asks for: the metrics (`GET /metrics`), the job's table (`GET /status`,
/// what `paddle-launcher status` prints); nothing else is served.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Status,
    Refused(StatusCode, &'static str),
}

fn respond(method: &str, path: &str) -> Route {
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        ("GET", "/status") => Route::Status,
        ("GET", _) => Route::Refused(
            StatusCode::NOT_FOUND,
            "only /metrics and /status are served\n",
        ),
        _ => Route::Refused(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n"),
    }
}

const METRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_of_the_metrics_and_the_status_is_answered() {
        assert_eq!(respond("GET", "/metrics"), Route::Metrics);
        assert_eq!(respond("GET", "/status"), Route::Status);
        assert!(matches!(
            respond("GET", "/"),
            Route::Refused(StatusCode::NOT_FOUND, _)
        ));
        let post = respond("POST", "/metrics");
        assert!(matches!(
            post,
            Route::Refused(StatusCode::METHOD_NOT_ALLOWED, _)
        ));
    }

    /// Every slot held by connections that said nothing: a new one takes the place of the
    /// oldest silent past `HEAD_GRACE`, whatever its address; one address never holds more
    /// than its share; connections being answered, or younger than the grace (a scraper's
    /// head on its way), keep a newcomer out (issue 51: two addresses of silent clients kept
    /// every scrape out).
    #[test]
    fn a_newcomer_takes_the_place_of_the_oldest_silent_connection() {
        let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(10, 0, n, 1));
        let t0 = std::time::Instant::now();
        let mut slots = Slots::default();
        for n in 0..CONNECTIONS {
            let from = ip((n / SCRAPES_PER_ADDRESS) as u8);
            assert_eq!(slots.admit(from, t0).map(|(_, c)| c.is_none()), Ok(true));
        }
        assert_eq!(slots.admit(ip(0), t0).err(), Some(Refused::AddressFull));
        // Past its grace, an address's own oldest silent connection gives way to its newcomer.
        let (_, closed) = slots.admit(ip(0), t0 + HEAD_GRACE).unwrap();
        assert_eq!(closed.map(|c| (c.id, c.ip)), Some((0, ip(0))));
        // All silent, but within their grace: none closed for a newcomer yet.
        let soon = t0 + HEAD_GRACE / 2;
        assert_eq!(slots.admit(ip(200), soon).err(), Some(Refused::Full));
        let later = t0 + HEAD_GRACE;
        let (_, closed) = slots.admit(ip(200), later).unwrap();
        assert_eq!(closed.map(|c| (c.id, c.ip)), Some((1, ip(0))));
        // The oldest that has not asked: the one being answered stays.
        slots.open[0].asked.store(true, Ordering::Relaxed);
        let (_, closed) = slots.admit(ip(201), later).unwrap();
        assert_eq!(closed.map(|c| c.id), Some(3));
        for slot in &slots.open {
            slot.asked.store(true, Ordering::Relaxed);
        }
        assert_eq!(slots.admit(ip(202), later).err(), Some(Refused::Full));
        let first = slots.open[0].id;
        slots.leave(first);
        assert!(slots.admit(ip(202), later).is_ok());
    }
}
