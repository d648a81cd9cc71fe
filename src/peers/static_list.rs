//! A fixed peer list (local mode, clusters without Kubernetes): rank = position in the list.

use std::net::IpAddr;

use crate::membership::Member;

/// Members named `<job>-<rank>`, the names local mode gives its simulated pods.
pub fn members(job: &str, ips: &[IpAddr]) -> Vec<Member> {
    ips.iter()
        .enumerate()
        .map(|(rank, ip)| Member {
            name: format!("{job}-{rank}"),
            ip: *ip,
            rank,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rank_is_list_order_not_ip_order() {
        let ips = ["10.0.0.9", "10.0.0.10", "10.0.0.1"].map(|s| s.parse().unwrap());
        let m = super::members("j", &ips);
        assert_eq!(m[0].ip.to_string(), "10.0.0.9");
        assert_eq!((m[2].name.as_str(), m[2].rank), ("j-2", 2));
    }
}
