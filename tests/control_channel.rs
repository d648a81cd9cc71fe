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
const SECRET: &str = "control-channel-test-secret-0123456789";

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

    fn start(&self, pod: usize, trainer_seconds: u32) -> Launcher {
        let seconds = trainer_seconds.to_string();
        Launcher::start(
            self.dir.path(),
            &format!("pod-{pod}"),
            &["run", "--", "sleep", &seconds],
            &self.env(pod),
        )
    }

    /// Pod 0 gets the secret as a variable, the others as a file (a mounted Secret, with the
    /// newline `echo` leaves), as pods may.
    fn env(&self, pod: usize) -> Vec<(&'static str, String)> {
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
        env
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

/// A client on `from` (a loopback address of the test's choosing) that has read the
/// coordinator's challenge and sent its own; returns both.
fn connect_from(from: &str, address: &str) -> (TcpStream, [u8; 32]) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    let to: std::net::SocketAddr = address.parse().unwrap();
    socket.connect(&to.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    let mut challenge = [0u8; 32];
    stream.read_exact(&mut challenge[..16]).unwrap();
    challenge[16..].copy_from_slice(&[0x5a; 16]);
    stream.write_all(&challenge[16..]).unwrap();
    (stream, challenge)
}

/// `connect_from` once the coordinator has seen an earlier connection of `from` close: until
/// then the address may hold no more connections, and it is refused without a challenge.
fn connect_from_after_close(from: &str, address: &str) -> (TcpStream, [u8; 32]) {
    for _ in 0..100 {
        let (mut stream, _) = connect_from_unchecked(from, address);
        let mut challenge = [0u8; 32];
        if stream.read_exact(&mut challenge[..16]).is_ok() {
            challenge[16..].copy_from_slice(&[0x5a; 16]);
            stream.write_all(&challenge[16..]).unwrap();
            return (stream, challenge);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the coordinator never admitted {from} again after its connection closed");
}

/// Hostile clients on the coordinator's port change nothing: from an address outside the job
/// they are refused at once, however many; from a member's address (pod 2's, beside its own launcher),
/// junk, an oversized frame, the wrong secret, a hello recorded on another connection, another
/// pod's name and a silent client are each disconnected for their own reason; the job still
/// ends well. Trainers end at different moments (the follower first): a follower that is done
/// is not taken for a lost one.
#[test]
fn hostile_clients_are_dropped_and_the_job_ends_cleanly() {
    let job = Job::new(3);
    let coordinator = job.start(0, 14);
    let follower = job.start(1, 7);
    let third = job.start(2, 7);
    coordinator.wait_for_output("starting restart epoch 0", LIMIT);
    let address = job.coordinator();

    // A flood from an address that is not the job's: every connection closed at once.
    let outsider = loopback_ip();
    for _ in 0..300 {
        let (mut stream, _) = connect_from_unchecked(&outsider, &address);
        assert!(closed_by_server(&mut stream), "an outsider was served");
    }

    let member = job.ips[2].clone();
    let expect_closed = |client: &mut TcpStream, what: &str, reason: &str| {
        assert!(closed_by_server(client), "{what} kept its connection");
        coordinator.wait_for_output(reason, LIMIT);
    };

    let (mut junk, _) = connect_from(&member, &address);
    junk.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    expect_closed(
        &mut junk,
        "junk",
        "a frame of 1195725856 bytes, more than 1024",
    );

    let (mut huge, _) = connect_from(&member, &address);
    huge.write_all(&[0, 0, 0x04, 0x01]).unwrap();
    expect_closed(
        &mut huge,
        "an oversized frame",
        "a frame of 1025 bytes, more than 1024",
    );

    let hello = ControlMessage::Hello {
        pod: "hb-2".into(),
        next_epoch: 0,
        view: "any".into(),
        max_restarts: 0,
        heartbeat_ms: 0,
        who: String::new(),
        preemptions: 0,
        max_preemptions: u32::MAX,
        nproc_per_pod: 1,
        grows: 0,
    };
    let (mut forged, challenge) = connect_from(&member, &address);
    let wrong = paddle_launcher::config_secret(b"not-the-job-secret-at-all-0123456789");
    forged
        .write_all(&ControlSession::new(&wrong, challenge, false).seal(&hello))
        .unwrap();
    expect_closed(&mut forged, "the wrong secret", "fails authentication");

    // A hello sealed for one connection, sent on another: its challenges are not this one's.
    let right = paddle_launcher::config_secret(SECRET.as_bytes());
    let (recorded_on, challenge) = connect_from(&member, &address);
    let recorded = ControlSession::new(&right, challenge, false).seal(&hello);
    // Closed first: the member's own launcher holds one of the two connections its address may.
    drop(recorded_on);
    let (mut replayed, _) = connect_from_after_close(&member, &address);
    replayed.write_all(&recorded).unwrap();
    assert!(
        closed_by_server(&mut replayed),
        "a hello from another connection was accepted"
    );

    let (mut stranger, challenge) = connect_from_after_close(&member, &address);
    let intruder = ControlMessage::Hello {
        pod: "hb-0".into(),
        next_epoch: 0,
        view: "any".into(),
        max_restarts: 0,
        heartbeat_ms: 0,
        who: String::new(),
        preemptions: 0,
        max_preemptions: u32::MAX,
        nproc_per_pod: 1,
        grows: 0,
    };
    stranger
        .write_all(&ControlSession::new(&right, challenge, false).seal(&intruder))
        .unwrap();
    expect_closed(
        &mut stranger,
        "another pod's name",
        &format!("hb-0 is not a member of this job at {member}"),
    );

    // A member's hello whose heartbeat timeout would have the coordinator beat its link every
    // microsecond (or never judge it): refused like any malformed hello.
    for heartbeat_ms in [1, u64::MAX] {
        let (mut hasty, challenge) = connect_from_after_close(&member, &address);
        let hello = ControlMessage::Hello {
            pod: "hb-2".into(),
            next_epoch: 0,
            view: "any".into(),
            max_restarts: 0,
            heartbeat_ms,
            who: String::new(),
            preemptions: 0,
            max_preemptions: u32::MAX,
            nproc_per_pod: 1,
            grows: 0,
        };
        hasty
            .write_all(&ControlSession::new(&right, challenge, false).seal(&hello))
            .unwrap();
        expect_closed(
            &mut hasty,
            "an unbounded heartbeat timeout",
            &format!("a heartbeat timeout of {heartbeat_ms} ms, outside 1 s to 7 days"),
        );
    }

    let (mut silent, _) = connect_from(&member, &address);
    expect_closed(
        &mut silent,
        "a client that never says hello",
        "no hello within 5 s",
    );

    for pod in [follower, third] {
        let done = pod.wait(LIMIT);
        assert_eq!(done.code(), 0, "{}", done.stderr);
    }
    let done = coordinator.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    for word in [
        "sent no heartbeat",
        "control connection",
        "hb-2 joined again",
    ] {
        assert!(!done.stderr.contains(word), "{}", done.stderr);
    }
}

/// A client that does not wait for the challenge (the outsider is closed before it is sent).
fn connect_from_unchecked(from: &str, address: &str) -> (TcpStream, ()) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    let to: std::net::SocketAddr = address.parse().unwrap();
    socket.connect(&to.into()).unwrap();
    (socket.into(), ())
}

/// The coordinator's trainer ends first: it stays until the follower has reported its outcome,
/// so the follower's later end is neither taken for a loss nor left unwatched.
#[test]
fn the_coordinator_may_finish_first_and_waits_for_the_others() {
    for _ in 0..3 {
        let job = Job::new(2);
        let coordinator = job.start(0, 1);
        let follower = job.start(1, 6);
        coordinator.wait_for_output(
            "control channel: waiting for 1 launcher to report their outcome: hb-1",
            LIMIT,
        );
        assert!(
            !follower.stderr_so_far().contains("trainer exited"),
            "the coordinator waited for a follower that was done"
        );
        let done = follower.wait(LIMIT);
        assert_eq!(done.code(), 0, "{}", done.stderr);
        assert!(
            !done.stderr.contains("coordinating launcher"),
            "{}",
            done.stderr
        );
        let done = coordinator.wait(LIMIT);
        assert_eq!(done.code(), 0, "{}", done.stderr);
    }
}

/// A follower whose trainer failed tells the coordinator, which stops the job at once (not
/// after the heartbeat timeout), naming the pod, its node (NODE_NAME, from the downward API),
/// its rank and what happened.
#[test]
fn a_failed_follower_stops_the_job_at_once_naming_its_failure() {
    let job = Job::new(2);
    let coordinator = job.start(0, 120);
    let mut env = job.env(1);
    env.push(("NODE_NAME", "n7".to_string()));
    let follower = Launcher::start(job.dir.path(), "failing", &["run", "--", "false"], &env);
    assert_eq!(follower.wait(LIMIT).code(), 1);
    let done = coordinator.wait(LIMIT);
    assert_eq!(done.code(), 78, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "exiting with status 78: job stopped: pod hb-1 on node n7 (trainer id 1 of 2) at 20",
    );
    assert_contains(&done.stderr, "Z: trainer exited with status 1;");
    assert!(
        !done.stderr.contains("sent no heartbeat"),
        "{}",
        done.stderr
    );
}

/// A secret file that does not exist is a Secret not created or not mounted yet: waited for
/// within --wait-timeout, saying so, then refused (status 2, one line saying what to do); never
/// "no channel" on this pod while the others, started after the Secret, wait for it. One too
/// short to be a key is refused at once.
#[test]
fn a_missing_secret_file_is_waited_for_then_refused_and_a_short_one_is_refused() {
    let job = Job::new(1);
    let env = |file: &str| {
        vec![
            ("JOB_NAME", "hb".to_string()),
            ("PADDLE_LAUNCHER_PEERS", job.ips[0].clone()),
            ("POD_IP", job.ips[0].clone()),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
            ("PADDLE_LAUNCHER_JOB_SECRET_FILE", file.to_string()),
            ("PADDLE_LAUNCHER_WAIT_TIMEOUT", "2".to_string()),
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
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        &format!("waiting for the job secret at {missing} (PADDLE_LAUNCHER_JOB_SECRET_FILE (--job-secret-file) at most 2 s): the Secret mounted there does not exist yet"),
    );
    assert_contains(
        &done.stderr,
        &format!("invalid PADDLE_LAUNCHER_JOB_SECRET_FILE (--job-secret-file): \"{missing}\": expected a file that exists after waiting 2 s (--wait-timeout): create the Secret mounted there"),
    );
    assert!(
        !done.stderr.contains("started trainer"),
        "the launcher went on without the channel: {}",
        done.stderr
    );
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

/// Launchers that never agree on who is in the job (here one was given another job name, so
/// its hello names a pod the coordinator does not know, and each round ends only after the join
/// grace) gather again and again, pausing between rounds, and give up once --wait-timeout has
/// passed, with status 71 saying so, instead of looping for ever.
#[test]
fn launchers_that_never_agree_give_up_after_the_wait_timeout() {
    let job = Job::new(2);
    let start = |pod: usize, name: &str| {
        let mut env = job.env(pod);
        env.retain(|(k, _)| *k != "JOB_NAME");
        env.push(("JOB_NAME", name.to_string()));
        env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "3".to_string()));
        Launcher::start(
            job.dir.path(),
            &format!("pod-{pod}"),
            &["run", "--", "sleep", "30"],
            &env,
        )
    };
    let launchers = [start(0, "hb"), start(1, "other")];
    for launcher in launchers {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 71, "{}", done.stderr);
        assert_contains(&done.stderr, "did not agree on a start in");
        assert_contains(&done.stderr, "rounds of gathering");
    }
}

/// The control channel's port held by another process in the pod (a sidecar, another
/// launcher on a hostNetwork node): the coordinator ends at once with its own status (82, not
/// the 1 of a local failure), naming the address and the option that chose the port.
#[test]
fn a_control_port_taken_ends_with_its_own_status_naming_the_port_and_option() {
    let job = Job::new(2);
    let _holder = std::net::TcpListener::bind(job.coordinator()).unwrap();
    let done = job.start(0, 30).wait(LIMIT);
    assert_eq!(done.code(), 82, "{}", done.stderr);
    let last = done.stderr.lines().last().unwrap_or_default().to_string();
    assert_contains(
        &last,
        &format!(
            "cannot listen on {} for the control channel: the port is taken by another process",
            job.coordinator()
        ),
    );
    assert_contains(&last, "PADDLE_LAUNCHER_CONTROL_PORT (--control-port)");
}

/// A sidecar proxy (Istio's) accepts the followers' connections and forwards them from
/// 127.0.0.6, which is no member's address: the coordinator names it at once, and what to do,
/// once however many connections come, instead of a count a minute later while the job never
/// starts.
#[test]
fn a_connection_forwarded_by_a_sidecar_is_named_at_once_with_the_remedy() {
    let job = Job::new(2);
    // Pod 1 never starts: the coordinator keeps waiting for it.
    let coordinator = job.start(0, 30);
    coordinator.wait_for_output("control channel: coordinating 2 launchers", LIMIT);
    for _ in 0..20 {
        let (mut stream, _) = connect_from_unchecked("127.0.0.6", &job.coordinator());
        assert!(closed_by_server(&mut stream), "the proxy was served");
    }
    let named = "control channel: refused a connection from 127.0.0.6: not the address of a pod of this job (a sidecar proxy such as Istio's forwards connections from 127.0.0.6 or ::6: keep the control port out of the mesh";
    coordinator.wait_for_output(named, LIMIT);
    coordinator.signal(Signal::SIGTERM);
    let done = coordinator.wait(LIMIT);
    assert_eq!(done.stderr.matches(named).count(), 1, "{}", done.stderr);
}

/// A member's success is told to every launcher, not only the coordinator: after pod 1's
/// trainer succeeded, the coordinator's pod is lost; pod 2 knows the job cannot start again as
/// a whole (pod 1 will never rejoin), so it ends at once with 78 instead of restarting and
/// waiting for pod 1 until --wait-timeout.
#[test]
fn a_members_success_reaches_every_launcher_so_none_waits_for_it_after_a_loss() {
    let job = Job::new(3);
    let start = |pod: usize, seconds: &str| {
        let mut env = job.env(pod);
        env.push(("PADDLE_LAUNCHER_MAX_RESTARTS", "2".to_string()));
        env.push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "20".to_string()));
        Launcher::start(
            job.dir.path(),
            &format!("pod-{pod}"),
            &["run", "--", "sleep", seconds],
            &env,
        )
    };
    let coordinator = start(0, "120");
    let finishing = start(1, "1");
    let survivor = start(2, "120");
    let finished = finishing.wait(LIMIT);
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    survivor.wait_for_output(
        "control channel: the trainer of hb-1 succeeded: the job cannot start again as a whole",
        LIMIT,
    );
    coordinator.signal(Signal::SIGKILL);
    coordinator.wait(LIMIT);
    let done = survivor.wait(LIMIT);
    assert_eq!(done.code(), 78, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "no restart: a pod of the job has already finished",
    );
    assert!(
        !done.stderr.contains("restarting the job"),
        "{}",
        done.stderr
    );
}

/// A pod started before the kubelet has put the job's Secret in place: its launcher waits for
/// the file, saying so, and joins the channel once it appears; the job runs as one.
#[test]
fn a_secret_file_that_appears_late_is_waited_for_and_the_job_runs() {
    let job = Job::new(2);
    let coordinator = job.start(0, 2);
    let mut env = job.env(1);
    let late = job.dir.path().join("late-secret");
    for (name, value) in &mut env {
        if *name == "PADDLE_LAUNCHER_JOB_SECRET_FILE" {
            *value = late.display().to_string();
        }
    }
    let follower = Launcher::start(job.dir.path(), "pod-1", &["run", "--", "sleep", "2"], &env);
    follower.wait_for_output("waiting for the job secret at", LIMIT);
    std::fs::write(&late, format!("{SECRET}\n")).unwrap();
    for launcher in [follower, coordinator] {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 0, "{}", done.stderr);
    }
}
