//! "Who is in the job": one backend per file, all ending in the same ranked member list.

pub mod dns;
pub mod kubernetes;
pub mod static_list;

use crate::config::{Config, Discovery, GroupKind};
use crate::exit::{self, Outcome};
use crate::membership::{rank, Member, Membership};
use futures::future::BoxFuture;
use futures::FutureExt;

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("gave up after {waited_s} s waiting for the job's pods (set --wait-timeout / PADDLE_LAUNCHER_WAIT_TIMEOUT to wait longer): {status}")]
    Timeout { waited_s: u64, status: String },
    #[error("{0}")]
    Forbidden(String),
    #[error("the Kubernetes API server at {url} did not answer in {waited_s} s ({status}); check KUBECONFIG or the in-cluster service")]
    Unreachable {
        url: String,
        waited_s: u64,
        status: String,
    },
    #[error("{0}")]
    NotAnApiServer(String),
    #[error("cannot read the DNS configuration for PADDLE_LAUNCHER_DNS: {0}; fix /etc/resolv.conf or set PADDLE_LAUNCHER_DNS_SERVER (--dns-server)")]
    DnsConfig(String),
    #[error("{failed} trainer pods of the job have Failed, more than PADDLE_LAUNCHER_MAX_FAILED_TRAINERS = {max}: not starting again")]
    TooManyFailures { failed: usize, max: u32 },
    #[error("no Kubernetes client configuration ({0}); run in a pod with a service account, set KUBECONFIG, or give the peers with --peers / PADDLE_LAUNCHER_PEERS")]
    NoCluster(String),
}

impl DiscoveryError {
    pub fn outcome(&self) -> Outcome {
        let code = match self {
            DiscoveryError::Timeout { .. } => exit::PEERS_TIMEOUT,
            DiscoveryError::Unreachable { .. }
            | DiscoveryError::NotAnApiServer(_)
            | DiscoveryError::DnsConfig(_) => exit::SOURCE_UNUSABLE,
            DiscoveryError::Forbidden(_) => exit::FORBIDDEN,
            DiscoveryError::NoCluster(_) => exit::NO_CLUSTER,
            DiscoveryError::TooManyFailures { .. } => exit::TOO_MANY_FAILURES,
        };
        Outcome::new(code, self.to_string())
    }
}

/// What discovery found: the members by role in rank order, the namespace (when the backend
/// has one), and a watch that reports the first lost peer (when the backend can tell).
pub struct Found {
    pub membership: Membership,
    pub namespace: Option<String>,
    pub peer_loss: Option<BoxFuture<'static, String>>,
    /// For a pserver of the split layout: resolves when every trainer pod has Succeeded.
    pub trainers_done: Option<BoxFuture<'static, Result<String, String>>>,
}

/// Waits until every group has exactly the expected number of ready pods.
pub async fn discover(config: &Config) -> Result<Found, DiscoveryError> {
    let mut trainers_done = None;
    let (groups, namespace, peer_loss) = match &config.discovery {
        Discovery::Static { ips } => {
            let members = static_list::members(&config.job_name, ips);
            (vec![(GroupKind::Job, members)], None, None)
        }
        Discovery::Dns { name, server } => {
            let members = dns::wait_until_stable(
                name,
                *server,
                config.trainers as usize,
                config.wait_timeout,
            )
            .await?;
            (vec![(GroupKind::Job, members)], None, None)
        }
        Discovery::Kubernetes { groups } => {
            let server = kubernetes::connect(config.namespace.as_deref()).await?;
            if let Some(group) = &config.trainers_to_finish {
                let done = kubernetes::all_succeeded(server.clone(), group.clone());
                trainers_done = Some(done.boxed());
            }
            let (ready, watch) = kubernetes::wait_until_ready(
                &server,
                groups,
                config.wait_timeout,
                config.max_failed_trainers,
            )
            .await?;
            let ranked: Vec<(GroupKind, Vec<Member>)> = groups
                .iter()
                .zip(ready)
                .map(|(g, pods)| (g.kind, rank(&pods)))
                .collect();
            let members = ranked.iter().map(|(_, m)| m.clone()).collect();
            let peer_loss = watch.first_loss(members).boxed();
            (ranked, Some(server.namespace), Some(peer_loss))
        }
    };
    Ok(Found {
        membership: Membership::from_groups(config.protocol, groups),
        namespace,
        peer_loss,
        trainers_done,
    })
}
