//! The control channel between the launchers of a job: real launcher processes with static
//! membership on loopback addresses of their own, frozen with SIGSTOP (a node that died while
//! the API still says Running), and hostile clients on the coordinator's port.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nix::sys::signal::Signal;
use paddle_launcher::{ControlMessage, ControlSession};
use support::{assert_contains, free_ports, loopback_ip, Launcher};

const LIMIT: Duration = Duration::from_secs(90);
const SECRET: &str = "control-channel-test-secret";

/// A job of `seconds.len()` pods whose trainer is `sleep <seconds[i]>`; pod 0 coordinates.
struct Job {
    dir: tempfile::TempDir,
    ips: Vec<String>,
    port: u16,
}

impl Job {
    fn new(pods: usize) -> Job {
        Job {
            dir: tempfile::tempdir().unwrap(),
            ips: (0..pods).map(|_| loopback_ip()).collect(),
            port: free_ports(1),
        }
    }

    /// Pod 0 gets the secret as a variable, the others as a file (a mounted Secret, with the
    /// newline `echo` leaves), as pods may.
    fn start(&self, pod: usize, trainer_seconds: u32) -> Launcher {
        let mut env = vec![
            ("JOB_NAME", "hb".to_string()),
            ("PADDLE_LAUNCHER_PEERS", self.ips.join(",")),
            ("POD_IP", self.ips[pod].clone()),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
            ("PADDLE_LAUNCHER_CONTROL_PORT", self.port.to_string()),
            ("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "2".to_string()),
        ];
        if pod == 0 {
            env.push(("PADDLE_LAUNCHER_JOB_SECRET", SECRET.to_string()));
        } else {
            let file = self.dir.path().join(format!("secret-{pod}"));
            std::fs::write(&file, format!("{SECRET}\n")).unwrap();
            env.push((
                "PADDLE_LAUNCHER_JOB_SECRET_FILE",
                file.display().to_string(),
            ));
        }
        let seconds = trainer_seconds.to_string();
        Launcher::start(
            self.dir.path(),
            &format!("pod-{pod}"),
            &["run", "--", "sleep", &seconds],
            &env,
        )
    }

    fn coordinator(&self) -> String {
        format!("{}:{}", self.ips[0], self.port)
    }
}

/// A follower frozen with SIGSTOP sends nothing, though its pod would still be Running: the
/// coordinator notices within the heartbeat timeout and the others stop with status 78.
#[test]
fn a_frozen_follower_stops_the_job_within_the_heartbeat_timeout() {
    let job = Job::new(3);
    let launchers: Vec<Launcher> = (0..3).map(|i| job.start(i, 120)).collect();
    launchers[0].wait_for_output("control channel: hb-2 joined", LIMIT);
    launchers[2].wait_for_output("started trainer-2", LIMIT);
    launchers[2].signal(Signal::SIGSTOP);
    let mut launchers = launchers.into_iter();
    for _ in 0..2 {
        let done = launchers.next().unwrap().wait(LIMIT);
        assert_eq!(done.code(), 78, "{}", done.stderr);
        assert_contains(
            &done.stderr,
            "peer pod hb-2 sent no heartbeat for 2 s (frozen, or its node is gone)",
        );
    }
    let frozen = launchers.next().unwrap();
    frozen.signal(Signal::SIGKILL);
    frozen.wait(LIMIT);
}

/// The coordinator itself frozen: every follower notices its silence and stops.
#[test]
fn a_frozen_coordinator_stops_the_job_within_the_heartbeat_timeout() {
    let job = Job::new(2);
    let coordinator = job.start(0, 120);
    let follower = job.start(1, 120);
    follower.wait_for_output("started trainer-1", LIMIT);
    coordinator.wait_for_output("control channel: hb-1 joined", LIMIT);
    coordinator.signal(Signal::SIGSTOP);
    let done = follower.wait(LIMIT);
    assert_eq!(done.code(), 78, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        &format!(
            "the coordinating launcher at {} sent no heartbeat for 2 s",
            job.coordinator()
        ),
    );
    coordinator.signal(Signal::SIGKILL);
    coordinator.wait(LIMIT);
}

/// Reads until the server closes the connection; true when it did within the limit.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut sink = [0u8; 256];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn connect_with_challenge(address: &str) -> (TcpStream, [u8; 16]) {
    let mut stream = TcpStream::connect(address).unwrap();
    let mut challenge = [0u8; 16];
    stream.read_exact(&mut challenge).unwrap();
    (stream, challenge)
}

/// Hostile clients on the coordinator's port change nothing: junk, an oversized frame, the
/// wrong secret, a replayed frame, a stranger with the right secret and a silent client are
/// all disconnected, and the job still ends well. Trainers end at different moments (the
/// follower first): a follower that is done is not mistaken for a lost one.
#[test]
fn hostile_clients_are_dropped_and_the_job_ends_cleanly() {
    let job = Job::new(2);
    let coordinator = job.start(0, 12);
    let follower = job.start(1, 6);
    follower.wait_for_output("started trainer-1", LIMIT);
    coordinator.wait_for_output("control channel: coordinating 2 launchers", LIMIT);
    let address = job.coordinator();

    let (mut junk, _) = connect_with_challenge(&address);
    junk.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(closed_by_server(&mut junk), "junk kept its connection");

    let (mut huge, _) = connect_with_challenge(&address);
    huge.write_all(&[0xff, 0xff]).unwrap();
    huge.write_all(&[b'x'; 4096]).unwrap_or(());
    assert!(
        closed_by_server(&mut huge),
        "an oversized frame kept its connection"
    );

    let (mut forged, challenge) = connect_with_challenge(&address);
    let wrong = paddle_launcher::config_secret(b"not-the-job-secret-at-all");
    let mut session = ControlSession::new(&wrong, challenge, false);
    let hello = ControlMessage::Hello { pod: "hb-1".into() };
    forged.write_all(&session.seal(&hello)).unwrap();
    assert!(
        closed_by_server(&mut forged),
        "a frame under the wrong secret was accepted"
    );

    let right = paddle_launcher::config_secret(SECRET.as_bytes());
    let (mut replayed, challenge) = connect_with_challenge(&address);
    let mut session = ControlSession::new(&right, challenge, false);
    let frame = session.seal(&hello);
    replayed.write_all(&frame).unwrap();
    replayed.write_all(&frame).unwrap();
    assert!(
        closed_by_server(&mut replayed),
        "a replayed frame was accepted"
    );

    let (mut stranger, challenge) = connect_with_challenge(&address);
    let mut session = ControlSession::new(&right, challenge, false);
    let intruder = ControlMessage::Hello {
        pod: "not-in-the-job".into(),
    };
    stranger.write_all(&session.seal(&intruder)).unwrap();
    assert!(
        closed_by_server(&mut stranger),
        "a pod outside the job was accepted"
    );

    let (mut silent, _) = connect_with_challenge(&address);
    assert!(
        closed_by_server(&mut silent),
        "a client that never says hello kept its connection"
    );

    let done = follower.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let done = coordinator.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    for line in [
        "closed the connection from",
        "more than 1024",
        "fails authentication",
        "not-in-the-job is not a member of this job",
        "no hello within 5 s",
    ] {
        assert_contains(&done.stderr, line);
    }
    assert!(
        !done.stderr.contains("sent no heartbeat"),
        "{}",
        done.stderr
    );
}

/// A secret file that does not exist is an optional Secret nobody created: the job runs
/// without a channel. One too short to be a key is refused before anything starts.
#[test]
fn a_missing_secret_file_means_no_channel_and_a_short_one_is_refused() {
    let job = Job::new(1);
    let env = |file: &str| {
        vec![
            ("JOB_NAME", "hb".to_string()),
            ("PADDLE_LAUNCHER_PEERS", job.ips[0].clone()),
            ("POD_IP", job.ips[0].clone()),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
            ("PADDLE_LAUNCHER_JOB_SECRET_FILE", file.to_string()),
        ]
    };
    let missing = job.dir.path().join("no-such-secret").display().to_string();
    let done = Launcher::start(
        job.dir.path(),
        "missing",
        &["run", "--", "true"],
        &env(&missing),
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(&done.stderr, "no control channel (no heartbeats)");
    let short = job.dir.path().join("short");
    std::fs::write(&short, "tooshort\n").unwrap();
    let short = short.display().to_string();
    let done = Launcher::start(
        job.dir.path(),
        "short",
        &["run", "--", "true"],
        &env(&short),
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "invalid PADDLE_LAUNCHER_JOB_SECRET_FILE (--job-secret-file)",
    );
}
