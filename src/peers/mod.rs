//! "Who is in the job": one backend per file, all ending in the same ranked member list.

pub mod dns;
pub mod kubernetes;
pub mod static_list;

use crate::config::{Config, Discovery, GroupKind};
use crate::error::Error;
use crate::membership::{rank, Awaited, Member, Membership, PodView, Served};
use futures::future::BoxFuture;
use futures::FutureExt;

/// What discovery found: the members by role in rank order, the namespace (when the backend
/// has one), and a watch that reports the first lost peer (when the backend can tell).
pub struct Found {
    pub membership: Membership,
    pub namespace: Option<String>,
    /// The API server the pods were found through, when they were.
    pub api: Option<kubernetes::ApiServer>,
    /// This pod's terminationGracePeriodSeconds, when its spec was read.
    pub own_grace: Option<std::time::Duration>,
    pub peer_loss: Option<BoxFuture<'static, String>>,
    /// For a pserver of the split layout: resolves when every trainer pod has Succeeded.
    pub trainers_done: Option<BoxFuture<'static, Result<String, String>>>,
    /// The members whose pod's end `peer_loss` ignores, as the control channel learns them.
    pub served: Served,
}

/// What one round of a gathering brings beyond the configuration.
#[derive(Clone, Copy)]
pub struct Round<'a> {
    /// For a restart, the members of the attempt that ended.
    pub members_before: &'a [String],
    /// An elastic job's pods whose launcher did not say hello within the elastic wait in an
    /// earlier round: left out while the job has its minimum without them.
    pub absent: &'a std::collections::BTreeSet<String>,
    /// When the gathering began: an elastic job's wait runs from then, not from each round.
    pub since: tokio::time::Instant,
    /// An elastic job's pods whose launchers the coordinator heard: at the last attempt's
    /// verdict, and in this gathering's earlier rounds; alive, whatever their Ready condition
    /// says (`membership::leave_out`).
    pub alive: &'a std::collections::BTreeSet<String>,
    /// How long a gathering waits before it judges a pod by its Ready condition (an elastic
    /// job's hello wait: `membership::leave_out`), when it follows an attempt.
    pub not_ready_after: std::time::Duration,
    /// This pod's name (POD_NAME), when given; else it is known by `own_ip`.
    pub own_name: Option<&'a str>,
    pub own_ip: std::net::IpAddr,
    /// Where what the wait waits for goes besides the log, whenever it changes (the metrics
    /// board: `status` and the metrics say it too).
    pub told: Option<&'a (dyn Fn(&Awaited) + Sync)>,
    /// The Job on which a named coordinator keeps what it waits for, for its followers, which
    /// make no other API request (`kubernetes::WAITING_ANNOTATION`).
    pub keep_wait_on: Option<&'a str>,
}

impl Round<'_> {
    /// The launchers known alive among `pods`: those the coordinator heard (`alive`), and this
    /// one's own pod (the launcher that judges is evidently alive).
    pub fn alive_among(&self, pods: &[Vec<PodView>]) -> std::collections::BTreeSet<String> {
        let own = pods.iter().flatten().filter(|p| match self.own_name {
            Some(name) => p.name == name,
            None => p.ip == Some(self.own_ip),
        });
        let mut alive = self.alive.clone();
        alive.extend(own.map(|p| p.name.clone()));
        alive
    }
}

/// Waits until every group has exactly the expected number of ready pods. `members_before`:
/// for a restart, the members of the attempt that ended (one that finished rules it out).
pub async fn discover(config: &Config, round: Round<'_>) -> Result<Found, Error> {
    let mut trainers_done = None;
    let mut api = None;
    let mut own_grace = None;
    let served = Served::default();
    let (groups, namespace, peer_loss) = match &config.topology.discovery {
        Discovery::Static { ips } => {
            let members = static_list::members(&config.topology.job_name, ips);
            (vec![(GroupKind::Job, members)], None, None)
        }
        Discovery::Dns { name, server } => {
            let members = dns::wait_until_stable(
                name,
                *server,
                config.topology.trainers as usize,
                config.timing.wait_timeout,
            )
            .await?;
            (vec![(GroupKind::Job, members)], None, None)
        }
        Discovery::Kubernetes { groups } => {
            let server = kubernetes::connect(config.topology.namespace.as_deref()).await?;
            if let Some(group) = &config.topology.trainers_to_finish {
                let done = kubernetes::all_succeeded(server.clone(), group.clone());
                trainers_done = Some(done.boxed());
            }
            let (ready, watch) = kubernetes::wait_until_ready(
                &server,
                groups,
                config.timing.wait_timeout,
                config.topology.max_failed_trainers,
                round,
                config.control.elastic,
            )
            .await?;
            let topology = &config.topology;
            own_grace = ready
                .iter()
                .flatten()
                .find(|pod| {
                    topology.pod_name.as_deref() == Some(pod.name.as_str())
                        || (topology.pod_name.is_none() && pod.ip == topology.pod_ip)
                })
                .and_then(|pod| pod.grace_period)
                .map(std::time::Duration::from_secs);
            let ranked: Vec<(GroupKind, Vec<Member>)> = groups
                .iter()
                .zip(ready)
                .map(|(g, pods)| (g.kind, rank(&pods)))
                .collect();
            let members = ranked.iter().map(|(_, m)| m.clone()).collect();
            // A preempted peer tells the job itself, through the channel, when it leaves.
            let terminating_is_loss =
                !(config.control.is_on() && config.timing.checkpoint().is_some());
            let peer_loss = watch
                .first_loss(members, terminating_is_loss, served.clone())
                .boxed();
            api = Some(server.clone());
            (ranked, Some(server.namespace), Some(peer_loss))
        }
    };
    Ok(Found {
        membership: Membership::from_groups(config.topology.protocol, groups),
        namespace,
        api,
        own_grace,
        peer_loss,
        trainers_done,
        served,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::testing::pod;

    /// This launcher's own pod is alive, found by POD_NAME when given, else by its address:
    /// never another pod (the mutation run found the match untested).
    #[test]
    fn this_launchers_own_pod_is_alive_by_its_name_else_its_address() {
        let heard: std::collections::BTreeSet<String> = ["a".to_string()].into();
        let pods = vec![vec![
            pod("a", Some("10.0.0.1"), "Running"),
            pod("b", Some("10.0.0.2"), "Running"),
            pod("c", Some("10.0.0.3"), "Running"),
        ]];
        let none = std::collections::BTreeSet::new();
        let round = |own_name: Option<&'static str>| Round {
            members_before: &[],
            absent: &none,
            since: tokio::time::Instant::now(),
            alive: &heard,
            not_ready_after: std::time::Duration::ZERO,
            own_name,
            own_ip: "10.0.0.3".parse().unwrap(),
            told: None,
            keep_wait_on: None,
        };
        let names = |set: std::collections::BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        assert_eq!(names(round(Some("b")).alive_among(&pods)), ["a", "b"]);
        assert_eq!(names(round(None).alive_among(&pods)), ["a", "c"]);
    }
}
