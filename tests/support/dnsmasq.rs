//! A real DNS server (Debian's dnsmasq) on 127.0.0.1, whose records a test replaces at will.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(90);
const ATTEMPTS: usize = 5;

pub struct Dnsmasq {
    child: Child,
    hosts: PathBuf,
    pub port: u16,
}

impl Dnsmasq {
    /// Starts dnsmasq on a free port. The port is free for UDP when chosen, but dnsmasq also
    /// listens on TCP, and another test's listener may take either before dnsmasq binds: a start
    /// that ends in dnsmasq's exit is tried again on another port.
    pub fn start(dir: &Path) -> Dnsmasq {
        Dnsmasq::start_with(dir, |mut command| command.spawn().unwrap())
    }

    /// `start`, its process spawned by `spawn` (the real cluster's spawner, whose processes
    /// end with the test binary).
    pub fn start_with(dir: &Path, spawn: fn(Command) -> Child) -> Dnsmasq {
        let binary = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("dnsmasq is needed (.ci/run installs Debian's dnsmasq-base)");
        let hosts = dir.join("hosts");
        std::fs::write(&hosts, "").unwrap();
        let log = dir.join("dnsmasq.log");
        let mut failures = Vec::new();
        for _ in 0..ATTEMPTS {
            let port = free_udp_and_tcp_port();
            let mut command = Command::new(binary);
            command
                .args([
                    "--keep-in-foreground",
                    "--conf-file=/dev/null",
                    "--no-resolv",
                    "--no-hosts",
                    "--bind-interfaces",
                    "--listen-address=127.0.0.1",
                    "--local-ttl=0",
                    "--user=root",
                    // Its own group (dip) would change its credentials, which clears a death
                    // signal (prctl(2)): the real cluster's dnsmasq must end with its test binary.
                    "--group=root",
                    "--pid-file",
                    "--log-facility=-",
                ])
                .arg(format!("--port={port}"))
                .arg(format!("--addn-hosts={}", hosts.display()))
                .stderr(std::fs::File::create(&log).unwrap());
            let child = spawn(command);
            match started(child, &log) {
                Ok(child) => return Dnsmasq { child, hosts, port },
                Err(why) => failures.push(format!("port {port}: {why}")),
            }
        }
        panic!("dnsmasq did not start: {}", failures.join("; "))
    }

    /// Replaces every record, (address, name) each, and makes dnsmasq reload them.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn set_records(&self, records: &[(&str, &str)]) {
        let text: String = records
            .iter()
            .map(|(ip, name)| format!("{ip} {name}\n"))
            .collect();
        std::fs::write(&self.hosts, text).unwrap();
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGHUP).unwrap();
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until dnsmasq says it started (until then a SIGHUP would kill it instead of reloading
/// the records), or exited, or LIMIT passed.
fn started(mut child: Child, log: &Path) -> Result<Child, String> {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("started, version") {
            return Ok(child);
        }
        if let Some(status) = child.try_wait().unwrap() {
            return Err(format!("exited ({status}): {}", text.trim()));
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("not started within {LIMIT:?}: {}", text.trim()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port that UDP and TCP can both bind on 127.0.0.1 at this moment.
fn free_udp_and_tcp_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
