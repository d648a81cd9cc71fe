//! `paddle-launcher status`: the job's table as its coordinator knows it, asked of the
//! launcher in this pod (`kubectl exec POD -- paddle-launcher status`) over its metrics
//! endpoint (`GET /status`); a follower's answers where the coordinator's is, followed once.
//! Every wait is bounded; the answer read is bounded too.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::cli::StatusArgs;
use crate::config::{DEFAULT_METRICS_PORT, METRICS_PORT};
use crate::error::ConfigError;
use crate::exit::{self, Outcome};

/// How long connecting, and then reading the answer, may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer read: a 10,000-rank job's table is about 1 MB.
const MAX_ANSWER: u64 = 16 << 20;

/// What `status` prints, and how it ends: 0 with the table; 2 for a bad option; 1 when no
/// launcher answered (said why).
pub fn status(args: &StatusArgs) -> (Option<String>, Outcome) {
    let port = match args.metrics_port.as_deref().map(str::trim) {
        None | Some("") => DEFAULT_METRICS_PORT,
        Some(text) => match text.parse::<u16>() {
            Ok(0) | Err(_) => {
                let expected = "the launcher's metrics port, 1 to 65535 (`status` reads its endpoint, which 0 turns off)";
                let why = ConfigError::new(METRICS_PORT, text, expected).to_string();
                return (None, Outcome::new(exit::INVALID_CONFIG, why));
            }
            Ok(port) => port,
        },
    };
    let first = format!("{}:{port}", args.host);
    match ask(&first).and_then(|answer| match answer {
        Answer::Table(text) => Ok(text),
        // A follower's launcher names the coordinator's endpoint: asked once, not followed on.
        Answer::Elsewhere(at) => match ask(&at)? {
            Answer::Table(text) => Ok(text),
            Answer::Elsewhere(again) => Err(format!("{at} sent it on to {again} as well")),
        },
    }) {
        Ok(text) => (Some(text), Outcome::new(exit::SUCCESS, "status printed")),
        Err(why) => (
            None,
            Outcome::new(exit::INTERNAL, format!("no job status: {why}")),
        ),
    }
}

enum Answer {
    Table(String),
    Elsewhere(String),
}

/// `GET /status` of the launcher at `at` (host:port).
fn ask(at: &str) -> Result<Answer, String> {
    let address: SocketAddr = at
        .to_socket_addrs()
        .ok()
        .and_then(|mut found| found.next())
        .ok_or_else(|| format!("{at} is no address"))?;
    let refused = |e: std::io::Error| {
        format!("no launcher answers at {at} ({e}): run it in a pod of the job, whose launcher serves its metrics port (--metrics-port, PADDLE_LAUNCHER_METRICS_PORT)")
    };
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT).map_err(refused)?;
    let broken = |e: std::io::Error| format!("the launcher at {at} did not answer in full: {e}");
    stream.set_read_timeout(Some(TIMEOUT)).map_err(broken)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(broken)?;
    let request = format!("GET /status HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(broken)?;
    let mut answer = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .map_err(broken)?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or("");
    if status.starts_with("HTTP/1.1 200") {
        return Ok(Answer::Table(body.to_string()));
    }
    let location = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("location").then(|| value.trim())
    });
    match (status.starts_with("HTTP/1.1 307"), location) {
        (true, Some(url)) => {
            let rest = url.strip_prefix("http://").unwrap_or(url);
            Ok(Answer::Elsewhere(
                rest.trim_end_matches("/status").to_string(),
            ))
        }
        _ => Err(format!("the launcher at {at} answered {status:?}")),
    }
}
