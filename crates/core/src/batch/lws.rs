//! LeaderWorkerSet (leaderworkerset.x-k8s.io): one group (leader + workers) is one job
//! (api/leaderworkerset/v1/leaderworkerset_types.go).

use std::collections::BTreeMap;

use super::*;

pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
pub const LWS_GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
pub const LWS_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
pub const LWS_SIZE: &str = "leaderworkerset.sigs.k8s.io/size";

/// LeaderWorkerSet: one group (leader + workers) is one job; everything is in the env.
pub fn from_env(env: &BTreeMap<String, String>) -> Result<Option<Detected>, ConfigError> {
    let (Some(leader), Some(size)) = (env.get("LWS_LEADER_ADDRESS"), env.get("LWS_GROUP_SIZE"))
    else {
        return Ok(None);
    };
    // `<lws>-<group>.<subdomain>.<namespace>`: the leader's hostname first; the subdomain is
    // the LWS's name, or the leader's hostname again (subdomainPolicy UniquePerReplica).
    let host = leader.split('.').next().unwrap_or_default();
    let (lws, group) = host
        .rsplit_once('-')
        .filter(|(lws, g)| !lws.is_empty() && g.parse::<u32>().is_ok())
        .ok_or_else(|| {
            unexpected(
                "LWS_LEADER_ADDRESS",
                leader,
                "<lws>-<group>.<subdomain>.<namespace>",
            )
        })?;
    let pods = count("LWS_GROUP_SIZE", size)?;
    Ok(Some(Detected {
        system: System::Lws,
        job_name: host.to_string(),
        layout: Layout::Colocated(Task {
            name: host.to_string(),
            selector: format!("{LWS_NAME}={lws},{LWS_GROUP_INDEX}={group}"),
            pods: Some(pods),
        }),
        ranking: Ranking::by(&[LWS_WORKER_INDEX], None),
        coordinator: Some(leader.clone()),
        sources: vec![format!(
            "LeaderWorkerSet {lws} group {group} of {pods} pods (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE); \
             ranks from label {LWS_WORKER_INDEX}; coordinator the leader"
        )],
    }))
}

pub fn from_labels(own: &BTreeMap<String, String>) -> Option<Detected> {
    let lws = own.get(LWS_NAME)?;
    let group = own.get(LWS_GROUP_INDEX)?;
    let pods = own.get(LWS_SIZE).and_then(|s| s.parse().ok());
    let job_name = format!("{lws}-{group}");
    Some(Detected {
        system: System::Lws,
        job_name: job_name.clone(),
        layout: Layout::Colocated(Task {
            name: job_name,
            selector: format!("{LWS_NAME}={lws},{LWS_GROUP_INDEX}={group}"),
            pods,
        }),
        ranking: Ranking::by(&[LWS_WORKER_INDEX], None),
        coordinator: None,
        sources: vec![format!(
            "LeaderWorkerSet {lws} group {group} (labels {LWS_NAME}, {LWS_GROUP_INDEX}; size from annotation {LWS_SIZE})"
        )],
    })
}
