//! Peers from DNS: the A/AAAA records of a headless Service (`publishNotReadyAddresses: true`,
//! so that pods are listed before they are Ready). Needs no RBAC. Records appear as pods get
//! IPs, so the name is re-resolved until exactly the expected number of addresses is seen
//! twice in a row; ranks are numeric IP order.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::TokioResolver;
use tokio::time::{sleep, Instant};
use tracing::info;

use crate::error::Error;
use crate::membership::Member;

const RESOLVE_EVERY: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_secs(30);
/// The resolver retries inside a lookup; this bounds one round against a dead server.
const LOOKUP_LIMIT: Duration = Duration::from_secs(3);

fn resolver(server: Option<SocketAddr>) -> Result<TokioResolver, Error> {
    let provider = TokioConnectionProvider::default();
    let mut builder = match server {
        Some(addr) => {
            let servers = NameServerConfigGroup::from_ips_clear(&[addr.ip()], addr.port(), true);
            TokioResolver::builder_with_config(
                ResolverConfig::from_parts(None, vec![], servers),
                provider,
            )
        }
        None => {
            TokioResolver::builder(provider).map_err(|e| Error::DnsConfig { source: e.into() })?
        }
    };
    let options = builder.options_mut();
    // Every round must ask the server: a cached answer would hide pods that just appeared.
    options.cache_size = 0;
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    options.use_hosts_file = ResolveHosts::Never;
    // Short, so that an unreachable server still gives a progress line well within 30 s.
    options.timeout = Duration::from_secs(1);
    options.attempts = 1;
    Ok(builder.build())
}

/// One round: the addresses `name` resolves to now (none when it does not exist yet).
async fn lookup(resolver: &TokioResolver, name: &str) -> Result<BTreeSet<IpAddr>, String> {
    match tokio::time::timeout(LOOKUP_LIMIT, resolver.lookup_ip(name)).await {
        Ok(Ok(found)) => Ok(found.iter().collect()),
        Ok(Err(e)) if e.is_no_records_found() => Ok(BTreeSet::new()),
        Ok(Err(e)) => Err(format!("DNS lookup of {name} failed, retrying: {e}")),
        Err(_) => Err(format!(
            "DNS lookup of {name} got no answer within {} s, retrying",
            LOOKUP_LIMIT.as_secs()
        )),
    }
}

/// The addresses `name` resolves to right now, for `doctor`: Err when DNS cannot be used at
/// all, Ok(Err) when this one lookup failed.
pub async fn resolve_once(
    name: &str,
    server: Option<SocketAddr>,
) -> Result<Result<BTreeSet<IpAddr>, String>, Error> {
    Ok(lookup(&resolver(server)?, name).await)
}

/// The job's members once `name` resolves to exactly `expected` addresses, the same twice.
pub async fn wait_until_stable(
    name: &str,
    server: Option<SocketAddr>,
    expected: usize,
    timeout: Option<Duration>,
) -> Result<Vec<Member>, Error> {
    let resolver = resolver(server)?;
    let started = Instant::now();
    info!(
        "waiting for {name} to resolve to {expected} addresses (DNS {}, timeout: {})",
        server.map_or("from /etc/resolv.conf".to_string(), |s| s.to_string()),
        timeout.map_or("none".to_string(), |t| format!("{} s", t.as_secs()))
    );
    let mut previous: Option<BTreeSet<IpAddr>> = None;
    let mut status = String::new();
    let mut last_progress = started;
    loop {
        let seen = match lookup(&resolver, name).await {
            Ok(ips) => Some(ips),
            Err(e) => {
                status = e;
                None
            }
        };
        if let Some(ips) = &seen {
            if ips.len() == expected && previous.as_ref() == Some(ips) {
                info!("{name} resolves to the same {expected} addresses twice: ready");
                return Ok(members(name, ips));
            }
            let listed = ips
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            status = format!(
                "{name} resolves to {} of {expected} addresses{}{}",
                ips.len(),
                if listed.is_empty() {
                    String::new()
                } else {
                    format!(": {listed}")
                },
                if ips.len() > expected {
                    " (more than expected: waiting for the extra ones to go)"
                } else {
                    ""
                }
            );
        }
        let first_round = last_progress == started;
        if first_round || seen != previous || last_progress.elapsed() >= PROGRESS_EVERY {
            info!("waiting: {status}");
            last_progress = Instant::now();
        }
        previous = seen;
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            return Err(Error::PeersTimeout {
                waited_s: started.elapsed().as_secs(),
                status,
            });
        }
        sleep(RESOLVE_EVERY).await;
    }
}

/// Members in numeric IP order, named by their address (DNS gives no pod names).
pub fn members(name: &str, ips: &BTreeSet<IpAddr>) -> Vec<Member> {
    ips.iter()
        .enumerate()
        .map(|(rank, ip)| Member {
            name: format!("{name}/{ip}"),
            ip: *ip,
            rank,
        })
        .collect()
}
