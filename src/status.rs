//! `paddle-launcher status`: the job's table as its coordinator knows it, asked of the
//! launcher in this pod (`kubectl exec POD -- paddle-launcher status`) over its metrics
//! endpoint (`GET /status`); a follower's answers where the coordinator's is, followed once.
//! Every wait is bounded; the answer read is bounded too.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::cli::StatusArgs;
use crate::config::{DEFAULT_METRICS_PORT, METRICS_PORT};
use crate::error::ConfigError;
use crate::exit::{self, Outcome};

/// How long connecting may take, and then the whole answer.
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
    let Ok(host) = args.host.trim().parse::<IpAddr>() else {
        let why = format!(
            "--host={}: expected the IP address the launcher's metrics endpoint listens on, such as 127.0.0.1 (no name is looked up)",
            args.host
        );
        return (None, Outcome::new(exit::INVALID_CONFIG, why));
    };
    let first = SocketAddr::new(host, port);
    match ask(first).and_then(|answer| match answer {
        Answer::Table(text) => Ok(text),
        // A follower's launcher names the coordinator's endpoint: asked once, not followed on.
        Answer::Elsewhere(at) if at.port() == port => match ask(at)? {
            Answer::Table(text) => Ok(text),
            Answer::Elsewhere(again) => Err(format!("{at} sent it on to {again} as well")),
        },
        Answer::Elsewhere(at) => Err(format!(
            "{first} sent it on to {at}, another port than the launchers' metrics port {port}: not followed"
        )),
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
    Elsewhere(SocketAddr),
}

/// `GET /status` of the launcher at `at`, within `TIMEOUT` in all, connecting included (a
/// server that trickles its answer is cut off, not waited for).
fn ask(at: SocketAddr) -> Result<Answer, String> {
    ask_within(at, TIMEOUT)
}

fn ask_within(at: SocketAddr, limit: Duration) -> Result<Answer, String> {
    let deadline = Instant::now() + limit;
    let refused = |e: std::io::Error| {
        format!("no launcher answers at {at} ({e}): run it in a pod of the job, whose launcher serves its metrics port (--metrics-port, PADDLE_LAUNCHER_METRICS_PORT)")
    };
    let mut stream = TcpStream::connect_timeout(&at, limit).map_err(refused)?;
    let broken = |e: std::io::Error| format!("the launcher at {at} did not answer in full: {e}");
    stream.set_write_timeout(Some(TIMEOUT)).map_err(broken)?;
    let request = format!("GET /status HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(broken)?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let seconds = limit.as_secs_f64();
            return Err(format!(
                "the launcher at {at} did not answer in full within {seconds} s"
            ));
        }
        stream.set_read_timeout(Some(left)).map_err(broken)?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            // The time left ran out in this read: said as the deadline, next time round.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(broken(e)),
        }
        if answer.len() as u64 > MAX_ANSWER {
            return Err(format!(
                "the launcher at {at} answered more than {MAX_ANSWER} bytes"
            ));
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or("");
    if status.starts_with("HTTP/1.1 200") {
        return Ok(Answer::Table(printable(body)));
    }
    let location = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("location").then(|| value.trim())
    });
    // Where a follower's launcher sends it: http://<ip>:<port>/status, nothing else.
    let elsewhere = location
        .and_then(|url| url.strip_prefix("http://")?.strip_suffix("/status"))
        .and_then(|address| address.parse::<SocketAddr>().ok());
    match (status.starts_with("HTTP/1.1 307"), elsewhere) {
        (true, Some(next)) => Ok(Answer::Elsewhere(next)),
        _ => Err(format!("the launcher at {at} answered {status:?}")),
    }
}

/// The table as a terminal may show it: a control character (an escape sequence a hostile
/// server sent) becomes U+FFFD; lines and tabs stay.
fn printable(body: &str) -> String {
    let shown = |c: char| match c.is_control() && c != '\n' && c != '\t' {
        true => char::REPLACEMENT_CHARACTER,
        false => c,
    };
    body.chars().map(shown).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const S5: Duration = Duration::from_secs(5);

    /// A server on loopback that answers one connection with `parts`, `pause` apart.
    fn serving(parts: Vec<String>, pause: Duration) -> SocketAddr {
        serving_on("127.0.0.1:0", parts, pause)
    }

    fn serving_on(on: &str, parts: Vec<String>, pause: Duration) -> SocketAddr {
        let listener = TcpListener::bind(on).unwrap();
        let at = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut head = [0u8; 1024];
            let _ = stream.read(&mut head);
            for part in parts {
                if stream.write_all(part.as_bytes()).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        });
        at
    }

    /// A server that trickles its answer a byte at a time is cut off at the limit, not
    /// waited for; a whole answer is read; a redirect is taken only to an address.
    #[test]
    fn an_answer_is_bounded_in_time_and_a_redirect_must_name_an_address() {
        let trickle: Vec<String> = "HTTP/1.1 200 OK\r\n\r\nslow"
            .chars()
            .map(String::from)
            .collect();
        let slow = serving(trickle, Duration::from_millis(300));
        let began = Instant::now();
        let err = ask_within(slow, Duration::from_secs(1)).err().unwrap();
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "{:?}",
            began.elapsed()
        );
        assert!(err.contains("did not answer in full within 1 s"), "{err}");
        let whole = serving(
            vec!["HTTP/1.1 200 OK\r\n\r\njob j: step 3\n".into()],
            Duration::ZERO,
        );
        match ask_within(whole, Duration::from_secs(5)) {
            Ok(Answer::Table(text)) => assert_eq!(text, "job j: step 3\n"),
            _ => panic!("no table"),
        }
        // A terminal's escape sequence is not passed on to it.
        let escape = "HTTP/1.1 200 OK\r\n\r\nrank 3\t\u{1b}[2Jslow\r\n";
        match ask_within(serving(vec![escape.into()], Duration::ZERO), S5) {
            Ok(Answer::Table(text)) => assert_eq!(text, "rank 3\t\u{fffd}[2Jslow\u{fffd}\n"),
            _ => panic!("no table"),
        }
        let moved =
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://10.0.0.7:9410/status\r\n\r\n";
        let follower = serving(vec![moved.into()], Duration::ZERO);
        match ask_within(follower, Duration::from_secs(5)) {
            Ok(Answer::Elsewhere(at)) => assert_eq!(at, "10.0.0.7:9410".parse().unwrap()),
            _ => panic!("no redirect"),
        }
        let named =
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://evil.example/status\r\n\r\n";
        let by_name = serving(vec![named.into()], Duration::ZERO);
        assert!(ask_within(by_name, Duration::from_secs(5)).is_err());
    }

    fn args(at: SocketAddr) -> StatusArgs {
        StatusArgs {
            host: at.ip().to_string(),
            metrics_port: Some(at.port().to_string()),
        }
    }

    /// A follower's redirect is followed once, to an address on the same port: the table
    /// printed; a redirect to another port, or a second one, is not followed (status 1).
    #[test]
    fn a_redirect_is_followed_once_on_the_same_port_only() {
        let table = "HTTP/1.1 200 OK\r\n\r\njob j: step 3\n".to_string();
        let to = |at: SocketAddr| {
            format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{at}/status\r\n\r\n")
        };
        let coordinator = serving_on("127.0.0.92:0", vec![table.clone()], Duration::ZERO);
        let on_port = |ip: &str| format!("{ip}:{}", coordinator.port());
        let follower = serving_on(
            &on_port("127.0.0.91"),
            vec![to(coordinator)],
            Duration::ZERO,
        );
        let (printed, outcome) = status(&args(follower));
        assert_eq!(
            printed.as_deref(),
            Some("job j: step 3\n"),
            "{}",
            outcome.reason
        );
        assert_eq!(outcome.code, exit::SUCCESS);

        let other_port = serving_on("127.0.0.93:0", vec![table], Duration::ZERO);
        let follower = serving_on("127.0.0.94:0", vec![to(other_port)], Duration::ZERO);
        let (printed, outcome) = status(&args(follower));
        assert!(printed.is_none());
        assert_eq!(outcome.code, exit::INTERNAL);
        assert!(
            outcome
                .reason
                .contains("another port than the launchers' metrics port"),
            "{}",
            outcome.reason
        );

        let onward = serving_on("127.0.0.96:0", vec![], Duration::ZERO);
        let again = serving_on(
            &format!("127.0.0.95:{}", onward.port()),
            vec![to(onward)],
            Duration::ZERO,
        );
        let follower = serving_on(
            &format!("127.0.0.97:{}", onward.port()),
            vec![to(again)],
            Duration::ZERO,
        );
        let (printed, outcome) = status(&args(follower));
        assert!(printed.is_none());
        assert!(outcome.reason.contains("as well"), "{}", outcome.reason);
    }

    /// An answer of exactly the most read is read; a byte more is refused. A connection reset
    /// mid-answer is no table.
    #[test]
    fn an_answer_is_bounded_in_size_and_a_reset_is_no_table() {
        let head = "HTTP/1.1 200 OK\r\n\r\n";
        let body = |size: u64| "x".repeat(size as usize - head.len());
        let most = serving(vec![format!("{head}{}", body(MAX_ANSWER))], Duration::ZERO);
        match ask_within(most, S5) {
            Ok(Answer::Table(text)) => {
                assert_eq!(text.len() as u64, MAX_ANSWER - head.len() as u64)
            }
            _ => panic!("the largest answer refused"),
        }
        let more = serving(
            vec![format!("{head}{}", body(MAX_ANSWER + 1))],
            Duration::ZERO,
        );
        let refused = ask_within(more, S5).err().unwrap();
        assert!(refused.contains("answered more than"), "{refused}");

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let _ = stream.read(&mut [0u8; 1024]);
            stream.write_all(b"HTTP/1.1 200 OK\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(200));
            // Closed with a linger of 0: the connection is reset, not ended.
            socket2::SockRef::from(&stream)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
        });
        let reset = ask_within(at, S5).err().unwrap();
        assert!(reset.contains("did not answer in full: "), "{reset}");
    }

    /// A host that is no IP address, or a port of 0, is refused (status 2), naming it.
    #[test]
    fn a_host_or_port_that_cannot_be_asked_is_refused() {
        let args = |host: &str, port: Option<&str>| StatusArgs {
            host: host.into(),
            metrics_port: port.map(String::from),
        };
        let (_, outcome) = status(&args("launcher.local", None));
        assert_eq!(outcome.code, exit::INVALID_CONFIG);
        assert!(
            outcome.reason.contains("--host=launcher.local"),
            "{}",
            outcome.reason
        );
        let (_, outcome) = status(&args("127.0.0.1", Some("0")));
        assert_eq!(outcome.code, exit::INVALID_CONFIG);
        assert!(
            outcome.reason.contains("PADDLE_LAUNCHER_METRICS_PORT"),
            "{}",
            outcome.reason
        );
    }
}
