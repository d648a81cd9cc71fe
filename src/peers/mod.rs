//! "Who is in the job": one backend per file, all ending in the same ranked member list.

pub mod kubernetes;
pub mod static_list;

use crate::config::{Config, Discovery};
use crate::exit::{self, Outcome};
use crate::membership::Member;

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("gave up after {waited_s} s waiting for the job's pods (set --wait-timeout / PADDLE_LAUNCHER_WAIT_TIMEOUT to wait longer): {status}")]
    Timeout { waited_s: u64, status: String },
    #[error("{0}")]
    Forbidden(String),
    #[error("no Kubernetes client configuration ({0}); run in a pod with a service account, set KUBECONFIG, or give the peers with --peers / PADDLE_LAUNCHER_PEERS")]
    NoCluster(String),
}

impl DiscoveryError {
    pub fn outcome(&self) -> Outcome {
        let code = match self {
            DiscoveryError::Timeout { .. } => exit::PEERS_TIMEOUT,
            DiscoveryError::Forbidden(_) => exit::FORBIDDEN,
            DiscoveryError::NoCluster(_) => exit::NO_CLUSTER,
        };
        Outcome::new(code, self.to_string())
    }
}

/// The job's members in rank order, once exactly the expected number are ready, and the
/// namespace they were found in (when the backend has one).
pub async fn discover(config: &Config) -> Result<(Vec<Member>, Option<String>), DiscoveryError> {
    match &config.discovery {
        Discovery::Static { ips } => Ok((static_list::members(&config.job_name, ips), None)),
        Discovery::Kubernetes { selector } => {
            let (client, namespace) = kubernetes::connect(config.namespace.as_deref()).await?;
            let pods = kubernetes::wait_until_ready(
                client,
                &namespace,
                selector,
                config.gradient_num as usize,
                config.wait_timeout,
            )
            .await?;
            Ok((crate::membership::rank(&pods), Some(namespace)))
        }
    }
}
