//! This pod's own address: which one the launcher takes (a rule with its inputs given) and where
//! those inputs come from on a host (its interfaces, its hostname's address).

use std::net::{IpAddr, ToSocketAddrs};

use crate::config::Config;
use crate::error::{ConfigError, Error};
use crate::network::SocketSetting;

/// This pod's own address: POD_IP, else the NIC's address (IPv4 first), else the hostname's
/// (looked up only then: it is a blocking resolver call, and NSS may be missing in a static
/// binary). The NIC must exist only where the program is told to use it (v1 and v2 pass it as
/// `--nics`): collective and fleet pods on hosts without `eth0` run on POD_IP alone.
pub fn own_ip(
    config: &Config,
    interfaces: &Interfaces,
    hostname_ip: impl FnOnce() -> Option<IpAddr>,
) -> Result<IpAddr, Error> {
    let nic_ips: Vec<IpAddr> = match interfaces {
        Ok(list) => list
            .iter()
            .filter(|(name, _)| *name == config.ports.nic)
            .map(|(_, ip)| *ip)
            .collect(),
        Err(_) => Vec::new(),
    };
    if config.topology.protocol.uses_nic() && nic_ips.is_empty() {
        let list = interfaces.as_ref().map_err(|e| Error::NoInterfaceList {
            nic: crate::config::NIC.to_string(),
            source: std::io::Error::other(e.clone()),
        })?;
        let mut known: Vec<&str> = Vec::new();
        for (name, _) in list {
            if !known.contains(&name.as_str()) {
                known.push(name);
            }
        }
        return Err(ConfigError::new(
            crate::config::NIC,
            &config.ports.nic,
            format!(
                "a network interface of this host with an address: {}",
                known.join(", ")
            ),
        )
        .into());
    }
    if let Some(ip) = config.topology.pod_ip {
        return Ok(ip);
    }
    let nic_ip = nic_ips
        .iter()
        .find(|ip| ip.is_ipv4())
        .or(nic_ips.first())
        .copied();
    nic_ip.or_else(hostname_ip).ok_or_else(|| {
        ConfigError::new(
            crate::config::POD_IP,
            "",
            format!(
                "this pod's IP (set it from the downward API status.podIP; {} has no address here)",
                config.ports.nic
            ),
        )
        .into()
    })
}

/// NCCL's and gloo's socket interface for a pod at `ip` (`network::choose`), the user's own
/// values read from this process's environment.
pub fn sockets(config: &Config, ip: IpAddr, interfaces: &Interfaces) -> Vec<SocketSetting> {
    let listed = interfaces.as_deref().unwrap_or(&[]);
    crate::network::choose(config.topology.protocol, ip, listed, |variable| {
        std::env::var(variable).ok()
    })
}

/// How `plan`'s and `doctor`'s readers see a choice: "NCCL_SOCKET_IFNAME==eth0 (eth0 holds ...)".
pub fn said(setting: &SocketSetting) -> String {
    match &setting.value {
        // NCCL reads a leading `=` as "exactly this interface", not a prefix: said, since
        // `NCCL_SOCKET_IFNAME==lo` looks like a typo.
        Some(value) if value.starts_with('=') => format!(
            "{}={value} (the leading = asks NCCL for exactly this interface; {})",
            setting.variable, setting.why
        ),
        Some(value) => format!("{}={value} ({})", setting.variable, setting.why),
        None => format!(
            "{}: not set by the launcher ({})",
            setting.variable, setting.why
        ),
    }
}

/// This host's interfaces and addresses, or why they could not be listed.
pub type Interfaces = Result<Vec<(String, IpAddr)>, String>;

/// This host's network interfaces and their addresses.
pub fn host_interfaces() -> Interfaces {
    local_ip_address::list_afinet_netifas().map_err(|e| e.to_string())
}

/// The hostname's address, the last fallback for the own IP (what start_paddle.py used).
pub fn hostname_ip() -> Option<IpAddr> {
    let host = nix::unistd::gethostname().ok()?.into_string().ok()?;
    (host.as_str(), 0)
        .to_socket_addrs()
        .ok()?
        .map(|a| a.ip())
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::JobArgs;
    use crate::config::NIC;

    fn with(f: impl FnOnce(&mut JobArgs)) -> Result<Config, ConfigError> {
        let mut args = JobArgs {
            job_name: Some("paddle-cluster-job".into()),
            gradient_num: Some("3".into()),
            ..JobArgs::default()
        };
        f(&mut args);
        Config::from_args(&args)
    }

    fn interfaces(list: &[(&str, &str)]) -> Interfaces {
        Ok(list
            .iter()
            .map(|(name, ip)| (name.to_string(), ip.parse().unwrap()))
            .collect())
    }

    #[test]
    fn own_ip_prefers_pod_ip_then_nic_then_hostname() {
        let ifs = interfaces(&[
            ("lo", "127.0.0.1"),
            ("eth0", "fe80::1"),
            ("eth0", "10.1.2.3"),
            ("lo", "::1"),
        ]);
        let mut c = with(|_| {}).unwrap();
        let host = || Some("10.9.9.9".parse().unwrap());
        assert_eq!(own_ip(&c, &ifs, host).unwrap().to_string(), "10.1.2.3");
        c.topology.pod_ip = Some("10.0.0.7".parse().unwrap());
        assert_eq!(own_ip(&c, &ifs, host).unwrap().to_string(), "10.0.0.7");
        c.ports.nic = "ib0".into();
        let Error::Config(err) = own_ip(&c, &ifs, host).unwrap_err() else {
            panic!("not a configuration error")
        };
        assert_eq!(err.variable, NIC.to_string());
        // Each interface once, in the host's order.
        assert!(err.expected.ends_with(": lo, eth0"), "{err}");
    }

    /// hostNetwork nodes name their NIC ens5, enp0s3, ...: only v1/v2 hand the NIC to Paddle.
    #[test]
    fn collective_and_fleet_pods_need_no_eth0_and_no_hostname_lookup() {
        let ifs = interfaces(&[("lo", "127.0.0.1"), ("ens5", "10.0.0.9")]);
        for protocol in ["collective", "fleet"] {
            let c = with(|a| {
                a.protocol = Some(protocol.into());
                a.pod_ip = Some("10.0.0.9".into());
                a.trainer_args = vec!["python".into()];
            })
            .unwrap();
            let looked_up = std::cell::Cell::new(false);
            let host = || {
                looked_up.set(true);
                None
            };
            assert_eq!(own_ip(&c, &ifs, host).unwrap().to_string(), "10.0.0.9");
            // Even an unreadable interface list does not matter with POD_IP.
            assert_eq!(
                own_ip(&c, &Err("EPERM".into()), host).unwrap().to_string(),
                "10.0.0.9"
            );
            assert!(!looked_up.get(), "the hostname was resolved needlessly");
        }
        let v1 = with(|a| a.pod_ip = Some("10.0.0.9".into())).unwrap();
        assert!(matches!(
            own_ip(&v1, &ifs, || None),
            Err(Error::Config(ConfigError { variable, .. })) if variable == NIC.to_string()
        ));
    }

    #[test]
    fn an_unreadable_interface_list_is_not_called_a_bad_nic() {
        let c = with(|_| {}).unwrap();
        let err = own_ip(&c, &Err("Operation not permitted".into()), || None).unwrap_err();
        assert!(matches!(err, Error::NoInterfaceList { .. }), "{err}");
        assert_eq!(err.exit_code(), crate::exit::INTERNAL);
        assert!(
            err.to_string()
                .contains("cannot list this host's network interfaces"),
            "{err}"
        );
    }
}
