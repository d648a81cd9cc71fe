//! A real DNS server (Debian's dnsmasq) on 127.0.0.1, whose records a test replaces at will.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(90);

pub struct Dnsmasq {
    child: Child,
    hosts: PathBuf,
    pub port: u16,
}

impl Dnsmasq {
    pub fn start(dir: &Path) -> Dnsmasq {
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let hosts = dir.join("hosts");
        std::fs::write(&hosts, "").unwrap();
        let binary = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("dnsmasq is needed (.ci/run installs Debian's dnsmasq-base)");
        let child = Command::new(binary)
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
                "--local-ttl=0",
                "--user=root",
                "--pid-file",
                "--log-facility=-",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--addn-hosts={}", hosts.display()))
            .stderr(std::fs::File::create(dir.join("dnsmasq.log")).unwrap())
            .spawn()
            .unwrap();
        // Until it has started, a SIGHUP would kill it instead of reloading the records.
        let log = dir.join("dnsmasq.log");
        let deadline = std::time::Instant::now() + LIMIT;
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("started, version")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "dnsmasq did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Dnsmasq { child, hosts, port }
    }

    /// Replaces every record, (address, name) each, and makes dnsmasq reload them.
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
