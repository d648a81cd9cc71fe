//! Which network interface NCCL and gloo use, chosen for them: the one that holds the pod's IP.
//!
//! Left alone, NCCL picks the first interface that is not loopback or docker (a veth, a second
//! network of a multi-NIC node, a CNI's tunnel) and multi-node jobs hang in `ncclCommInitRank`
//! (Paddle #51096, fixed by setting NCCL_SOCKET_IFNAME; NVIDIA/nccl #913). The launcher knows
//! the pod's IP and this host's interfaces: it names the interface exactly. NCCL reads
//! `NCCL_SOCKET_IFNAME`, where a leading `=` asks for an exact match (not a prefix: `eth1` would
//! also match `eth10`); gloo reads `GLOO_SOCKET_IFNAME`, an exact name (Paddle 3.3's
//! `phi/core/distributed/gloo_utils.cc` and its ProcessGroupGloo both read it; Paddle has no
//! variable of its own for this). The user's own values always win.

use std::net::IpAddr;

use serde::Serialize;

use crate::vocabulary::Protocol;

/// The variables this module sets, with the form of their value.
pub const NCCL_SOCKET_IFNAME: &str = "NCCL_SOCKET_IFNAME";
pub const GLOO_SOCKET_IFNAME: &str = "GLOO_SOCKET_IFNAME";

/// One variable: the value the launcher gives the processes (None: it gives none), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SocketSetting {
    pub variable: &'static str,
    pub value: Option<String>,
    pub why: String,
}

/// The settings for a pod whose address is `ip`, on a host with `interfaces` (name, address);
/// `user`: the value a variable already has in the launcher's environment, if any. Only the
/// collective and fleet protocols use NCCL or gloo (v1 and v2 are given `--nics`).
pub fn choose(
    protocol: Protocol,
    ip: IpAddr,
    interfaces: &[(String, IpAddr)],
    user: impl Fn(&str) -> Option<String>,
) -> Vec<SocketSetting> {
    if !protocol.paddles_launcher() {
        return Vec::new();
    }
    // Every loopback address is the loopback interface's (local simulated pods use 127.0.0.x).
    let holds = |address: &IpAddr| {
        *address == ip
            || (ip.is_loopback() && address.is_loopback() && address.is_ipv4() == ip.is_ipv4())
    };
    let interface = interfaces
        .iter()
        .find(|(_, address)| holds(address))
        .map(|(name, _)| name.clone());
    [(NCCL_SOCKET_IFNAME, "="), (GLOO_SOCKET_IFNAME, "")]
        .into_iter()
        .map(|(variable, exact)| {
            let (value, why) = match (user(variable).filter(|v| !v.is_empty()), &interface) {
                (Some(own), _) => (None, format!("yours: {variable}={own} is kept")),
                (None, Some(name)) => (
                    Some(format!("{exact}{name}")),
                    format!("{name} holds this pod's IP {ip}"),
                ),
                (None, None) => (
                    None,
                    format!("no interface of this host holds this pod's IP {ip}: left to the library's own choice"),
                ),
            };
            SocketSetting {
                variable,
                value,
                why,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interfaces() -> Vec<(String, IpAddr)> {
        [
            ("lo", "127.0.0.1"),
            ("veth0", "169.254.1.1"),
            ("eth0", "10.0.0.7"),
            ("eth10", "10.1.0.7"),
        ]
        .iter()
        .map(|(n, ip)| (n.to_string(), ip.parse().unwrap()))
        .collect()
    }

    #[test]
    fn the_interface_of_the_pod_ip_exactly_and_the_users_own_values_kept() {
        let ip = "10.0.0.7".parse().unwrap();
        let chosen = choose(Protocol::Collective, ip, &interfaces(), |_| None);
        let values: Vec<(&str, Option<&str>)> = chosen
            .iter()
            .map(|s| (s.variable, s.value.as_deref()))
            .collect();
        assert_eq!(
            values,
            [
                (NCCL_SOCKET_IFNAME, Some("=eth0")),
                (GLOO_SOCKET_IFNAME, Some("eth0"))
            ]
        );
        assert_eq!(chosen[0].why, "eth0 holds this pod's IP 10.0.0.7");
        let user = |v: &str| (v == NCCL_SOCKET_IFNAME).then(|| "ib".to_string());
        let kept = choose(Protocol::Fleet, ip, &interfaces(), user);
        assert_eq!(kept[0].value, None);
        assert_eq!(kept[0].why, "yours: NCCL_SOCKET_IFNAME=ib is kept");
        assert_eq!(kept[1].value.as_deref(), Some("eth0"));
        // Simulated pods on loopback addresses: the loopback interface.
        let local = choose(
            Protocol::Collective,
            "127.0.0.3".parse().unwrap(),
            &interfaces(),
            |_| None,
        );
        assert_eq!(local[1].value.as_deref(), Some("lo"));
        // An address no interface holds (a pod IP from the downward API on another host).
        let elsewhere = choose(
            Protocol::Collective,
            "10.9.9.9".parse().unwrap(),
            &interfaces(),
            |_| None,
        );
        assert!(elsewhere.iter().all(|s| s.value.is_none()));
        // v1 and v2 are told `--nics`; NCCL and gloo are not theirs.
        assert!(choose(Protocol::V1, ip, &interfaces(), |_| None).is_empty());
        assert!(choose(Protocol::V2, ip, &interfaces(), |_| None).is_empty());
    }
}
