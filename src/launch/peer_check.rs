//! `--check-peers`: before a collective trainer starts, every peer's trainer endpoint is
//! asked for a TCP connection, so that a peer this pod cannot reach is named at once instead
//! of found by a hang in NCCL's or gloo's init.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::time::{sleep, timeout};
use tracing::{info, warn};

use crate::config::Config;
use crate::plan::Plan;

/// The trainer endpoints of the peers a collective trainer connects to at its init: checked
/// before it starts (`--check-peers`), so that a peer this pod cannot reach is named at once
/// instead of found by a hang in NCCL's or gloo's init. Peers at this pod's own address (host
/// network) are not checked.
pub(super) fn peers_to_check(plan: &Plan, config: &Config) -> Vec<SocketAddr> {
    let collective = config.topology.protocol == crate::vocabulary::Protocol::Collective;
    if !config.ports.check_peers || !collective || plan.trainer_id.is_none() {
        return Vec::new();
    }
    // An IPv6 link-local peer is reached through an interface this check does not name.
    let link_local =
        |ip: &IpAddr| matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    plan.pods
        .iter()
        .filter(|pod| pod.ip != plan.pod_ip && !link_local(&pod.ip))
        .map(|pod| SocketAddr::new(pod.ip, config.ports.trainer))
        .collect()
}

/// How long one peer may take to answer, and how many are asked at once.
pub(super) const PEER_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

pub(super) const PEER_CHECK_AT_ONCE: usize = 256;

/// How many times a silent peer is asked, a second apart: a pod network still being programmed
/// for pods that have just started may drop the first packets.
pub(super) const PEER_CHECK_TRIES: usize = 3;

/// The peers that did not answer a TCP connection from `from` in any of the tries. A refusal is
/// an answer: the peer's trainer may not listen yet, but its pod is reachable.
pub(super) async fn silent_peers(from: IpAddr, mut peers: Vec<SocketAddr>) -> Vec<SocketAddr> {
    use futures::StreamExt;
    let probe = match from {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    if probe
        .and_then(|s| s.bind(SocketAddr::new(from, 0)))
        .is_err()
    {
        warn!(
            "cannot connect from this pod's address {from}: the peers' reachability is not checked"
        );
        return Vec::new();
    }
    for attempt in 1..=PEER_CHECK_TRIES {
        peers = futures::stream::iter(peers)
            .map(|peer| async move { (!answers(from, peer).await).then_some(peer) })
            .buffer_unordered(PEER_CHECK_AT_ONCE)
            .filter_map(std::future::ready)
            .collect()
            .await;
        if peers.is_empty() || attempt == PEER_CHECK_TRIES {
            break;
        }
        info!(
            "{} did not answer yet: asking again in 1 s",
            crate::vocabulary::count(peers.len(), "peer")
        );
        sleep(Duration::from_secs(1)).await;
    }
    peers
}

/// The silent peers as the error names them: the first ten, then how many more.
pub(super) fn named_peers(peers: &[SocketAddr]) -> String {
    let mut named: Vec<String> = peers.iter().take(10).map(ToString::to_string).collect();
    if peers.len() > 10 {
        named.push(format!("and {} more", peers.len() - 10));
    }
    named.join(", ")
}

pub(super) async fn answers(from: IpAddr, peer: SocketAddr) -> bool {
    let socket = match peer {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    // This pod's address is not one to connect from (a POD_IP that is not local): nothing
    // this check can say.
    let Ok(socket) = socket else { return true };
    if socket.bind(SocketAddr::new(from, 0)).is_err() {
        return true;
    }
    match timeout(PEER_CHECK_TIMEOUT, socket.connect(peer)).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::JobArgs;

    /// Before a collective trainer starts, every other pod's trainer endpoint is checked: not
    /// this pod's own address (host network), not an IPv6 link-local one, and nothing for
    /// other protocols, without --check-peers, or on a pod without a trainer.
    #[test]
    fn the_peers_checked_are_the_other_pods_trainer_endpoints() {
        let entry = |name: &str, ip: &str| crate::plan::PodEntry {
            name: name.into(),
            ip: ip.parse().unwrap(),
            rank: 0,
            role: "both",
        };
        let pods = vec![
            entry("p-0", "10.0.0.1"),
            entry("p-1", "10.0.0.2"),
            entry("p-2", "10.0.0.1"),
            entry("p-3", "fe80::1"),
            entry("p-4", "10.0.0.3"),
        ];
        let plan = crate::plan::testing::plan_of(Vec::new(), pods, "10.0.0.1".parse().unwrap());
        let collective = |edit: fn(&mut JobArgs)| {
            crate::protocol::testing::config(|args| {
                args.protocol = Some("collective".into());
                args.entry = Some("python train.py".into());
                args.trainer_port = Some("6200".into());
                edit(args);
            })
        };
        let checked = peers_to_check(&plan, &collective(|_| {}));
        let expected: Vec<SocketAddr> = ["10.0.0.2:6200", "10.0.0.3:6200"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(checked, expected);
        let off = collective(|args| args.check_peers = Some("false".into()));
        assert!(peers_to_check(&plan, &off).is_empty());
        let v1 = crate::protocol::testing::config(|_| {});
        assert!(peers_to_check(&plan, &v1).is_empty());
        let mut pserver_only = plan.clone();
        pserver_only.trainer_id = None;
        assert!(peers_to_check(&pserver_only, &collective(|_| {})).is_empty());
    }
}
