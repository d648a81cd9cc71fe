//! An attempt as the gathering hands it over, ready to begin: its plan in its restart epoch,
//! its channel and ledger, and the watches that may end it.

use std::net::SocketAddr;

use futures::future::BoxFuture;

use crate::control::Channel;
use crate::ledger::Ledger;
use crate::membership::Served;
use crate::peers::kubernetes::ApiServer;
use crate::plan::Plan;

/// One attempt, ready to start: the plan in its restart epoch and the watches that may end it.
pub(super) struct Attempt {
    pub(super) plan: Plan,
    /// "pod p-1 (trainer id 1 of 3)": who this launcher is, in what it tells the others.
    pub(super) who: String,
    pub(super) channel: Option<Channel>,
    pub(super) peer_loss: Option<BoxFuture<'static, String>>,
    pub(super) trainers_done: Option<BoxFuture<'static, Result<String, String>>>,
    /// The attempt's ledger: agreed over the channel, else this pod's own.
    pub(super) ledger: Ledger,
    /// The API server the pods were found through, if they were (for the job's events).
    pub(super) api: Option<ApiServer>,
    /// The members the control channel says have served their part (`peer_loss` ignores
    /// their pods).
    pub(super) served: Served,
    /// Without a job secret: the pod that would coordinate the job's channel and where, if
    /// another pod's (a pod the secret did not reach must not train alone while the others
    /// wait for its hello).
    pub(super) coordinator_unjoined: Option<UnjoinedCoordinator>,
    /// The children's grace period in this attempt: the configuration's, or what this pod's
    /// spec says when discovery read it (`setup::children_grace_seen`).
    pub(super) children_grace: std::time::Duration,
}

/// Without a job secret: where the job's channel would be served, when that may be another
/// pod's (the pod of rank 0, or --coordinator's address or DNS name).
#[derive(Debug, Clone)]
pub(super) struct UnjoinedCoordinator {
    /// How the log names it ("pod j-0", or the name given).
    pub(super) who: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) dns_server: Option<SocketAddr>,
}
