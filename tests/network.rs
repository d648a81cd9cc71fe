//! NCCL's and gloo's network interface, and the peers' reachability before a collective
//! trainer starts: real launcher processes on loopback addresses.

mod support;

use support::{assert_contains, free_ports, Launcher};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A collective pod of a two-pod job whose peer is at `peer`; the environment as a pod's.
fn pod(
    dir: &std::path::Path,
    peer: &str,
    extra: &[(&'static str, String)],
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("JOB_NAME", "net".to_string()),
        ("PADDLE_LAUNCHER_PEERS", format!("127.0.0.2,{peer}")),
        ("POD_IP", "127.0.0.2".to_string()),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
        ("PADDLE_LAUNCHER_TRAINER_PORT", free_ports(1).to_string()),
        (
            "PADDLE_LAUNCHER_WORKDIR",
            dir.join("work").display().to_string(),
        ),
    ];
    env.extend(extra.iter().cloned());
    env
}

/// The trainer is told the interface that holds the pod's IP, exactly (NCCL's `=`), for NCCL
/// and for gloo; a value the user set is kept and the launcher sets none.
#[test]
fn nccl_and_gloo_are_given_the_pod_ips_interface_and_a_users_value_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let program = [
        "run",
        "--",
        "sh",
        "-c",
        "echo nccl=[$NCCL_SOCKET_IFNAME] gloo=[$GLOO_SOCKET_IFNAME]",
    ];
    // The peer at 127.0.0.3 answers with a refusal (its trainer does not listen yet): it is
    // reachable.
    let done = Launcher::start(
        dir.path(),
        "net-0",
        &program,
        &pod(dir.path(), "127.0.0.3", &[]),
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(&done.stdout, "nccl=[=lo] gloo=[lo]");
    assert_contains(
        &done.stderr,
        "NCCL_SOCKET_IFNAME==lo (the leading = asks NCCL for exactly this interface; lo holds this pod's IP 127.0.0.2)",
    );
    let own = [("NCCL_SOCKET_IFNAME", "ib0".to_string())];
    let done = Launcher::start(
        dir.path(),
        "net-0",
        &program,
        &pod(dir.path(), "127.0.0.3", &own),
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(&done.stdout, "nccl=[ib0] gloo=[lo]");
    assert_contains(
        &done.stderr,
        "NCCL_SOCKET_IFNAME: not set by the launcher (yours: NCCL_SOCKET_IFNAME=ib0 is kept)",
    );
}

/// A peer this pod cannot reach is named within seconds, with its own status, and the trainer
/// never starts (NCCL or gloo would hang at their init); the check can be turned off.
#[test]
fn an_unreachable_peer_is_named_at_once_and_the_check_can_be_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let program = ["run", "--", "echo", "TRAINER-RAN"];
    // TEST-NET-1: no host answers there, and none can from a loopback address.
    let env = pod(dir.path(), "192.0.2.1", &[]);
    let started = std::time::Instant::now();
    let done = Launcher::start(dir.path(), "net-0", &program, &env).wait(LIMIT);
    assert_eq!(done.code(), 81, "{}", done.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_contains(&done.stderr, "192.0.2.1:");
    assert_contains(
        &done.stderr,
        "did not answer a TCP connection from this pod's address 127.0.0.2 in 3 tries of 3 s",
    );
    assert!(!done.stdout.contains("TRAINER-RAN"), "{}", done.stdout);
    let skip = pod(
        dir.path(),
        "192.0.2.1",
        &[("PADDLE_LAUNCHER_CHECK_PEERS", "false".to_string())],
    );
    let done = Launcher::start(dir.path(), "net-0", &program, &skip).wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(&done.stdout, "TRAINER-RAN");
    let bad = pod(
        dir.path(),
        "192.0.2.1",
        &[("PADDLE_LAUNCHER_CHECK_PEERS", "maybe".to_string())],
    );
    let done = Launcher::start(dir.path(), "net-0", &program, &bad).wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "invalid PADDLE_LAUNCHER_CHECK_PEERS (--check-peers): \"maybe\": expected true or false",
    );
}
