//! Who coordinates the job's control channel, in one place: the pod --coordinator names, pod 0
//! of an Indexed Job with a headless Service, or the pod of rank 0; whether followers take the
//! membership from the coordinator; and when a generated manifest names one. Pure: the shell
//! (`launch`, `manifest`) asks. In the split layout with a channel every pod finds the whole
//! job (`config::topology`), so the pod of rank 0, the first trainer, is the same on all.

use std::net::{IpAddr, SocketAddr};

use crate::config::{Config, Control, Discovery, GroupKind};
use crate::error::ConfigError;
use crate::membership::{Me, Membership};

/// The coordinator's address, and whether this pod is it (None: not known before its name is
/// resolved): --coordinator's HOST:PORT, else the pod of rank 0 (the first trainer, else the
/// first pserver) on the control port — the same on every pod.
pub fn coordinator(
    control: &Control,
    membership: &Membership,
    me: &Me,
) -> Option<(String, Option<bool>)> {
    Some(match &control.coordinator {
        Some((host, port)) => {
            let address = match host.parse::<IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, *port).to_string(),
                Err(_) => format!("{host}:{port}"),
            };
            let ours = host.parse::<IpAddr>().ok().map(|ip| ip == me.ip);
            (address, ours)
        }
        None => {
            let first = membership
                .trainers
                .first()
                .or(membership.pservers.first())?;
            let address = SocketAddr::new(first.ip, control.port).to_string();
            (address, Some(first.name == me.name))
        }
    })
}

/// Whether pod 0 of an Indexed Job may be taken for the coordinator without --coordinator:
/// only for the pods the default selector finds, `job-name=<JOB_NAME>`, when the hostname says
/// this pod is of that very Job (the shell checks that): under JobSet, say, pod 0 of one child
/// Job is not the whole job's, and two coordinators would wait for each other.
pub fn may_derive_from_indexed_job(config: &Config) -> bool {
    config.control.coordinator.is_none() && one_job(config)
}

/// Whether the pods are found as the pods of one Job named JOB_NAME (`job-name=<JOB_NAME>`).
fn one_job(config: &Config) -> bool {
    let default_selector = format!("job-name={}", config.topology.job_name);
    match &config.topology.discovery {
        Discovery::Kubernetes { groups } => {
            groups.len() == 1 && groups[0].selector.to_string() == default_selector
        }
        _ => false,
    }
}

/// The Job whose annotations keep the job's restart count where no batch system's label does:
/// the one Job the pods are of, with a control channel (whose coordinator records each start).
/// Every pod lost together, or a Kueue suspension and resumption, creates pods that know
/// nothing; the Job object outlives them.
pub fn job_keeping_the_count(config: &Config) -> Option<&str> {
    (config.control.is_on() && one_job(config)).then_some(config.topology.job_name.as_str())
}

/// Whether the launchers other than the coordinator take the membership from it: with a named
/// coordinator, when the pods would be found through the Kubernetes API (the load this saves)
/// and the job is one Job (the split layout's pservers watch the trainers themselves).
pub fn membership_from_coordinator(config: &Config) -> bool {
    config.control.coordinator.is_some()
        && matches!(config.topology.discovery, Discovery::Kubernetes { .. })
        && config.own_group() == GroupKind::Job
}

/// From this many pods on, `manifest` names a coordinator (the Indexed Job's pod 0) even without
/// restarts: only it lists and watches the pods, the others learn them from it. Every launcher
/// watching the job moves about 2 x N^2 pod objects through the API server per start (measured
/// with 4.6 KB pods: 152 MB at 128 pods, 610 MB at 256, BENCHMARKS.md section 6) against 2 x N
/// with a coordinator; below 64 (~38 MB) that is small enough not to ask for a Secret and a
/// headless Service.
pub const NAMED_COORDINATOR_FROM: u32 = 64;

/// Whether a generated Job names its coordinator (pod 0 by its DNS name): for restarts (its
/// replacement keeps the name), and for big jobs (only it uses the API). Not for big jobs of
/// the split layout, whose pservers watch the trainers themselves, nor with --dns, which needs
/// no API.
pub fn named_in_manifest(max_restarts: u32, split: bool, dns: bool, pods: u32) -> bool {
    max_restarts > 0 || (!split && !dns && pods >= NAMED_COORDINATOR_FROM)
}

/// An elastic job needs a named coordinator (--coordinator, or an Indexed Job's pod 0 by its
/// DNS name): only it finds the pods and decides each epoch's members. Without one every
/// launcher would decide on its own clock, and a pod that arrives at rank 0 would coordinate
/// a channel of its own instead of joining the job.
pub fn elastic_needs_a_named_coordinator(config: &Config) -> Result<(), ConfigError> {
    match (config.control.elastic, &config.control.coordinator) {
        (Some(elastic), None) => Err(ConfigError::new(
            crate::config::MIN_PODS,
            &elastic.min_pods.to_string(),
            "unset without a named coordinator: --coordinator HOST:PORT, a DNS name that follows \
             the first pod (as `manifest --min-pods` generates), or an Indexed Job whose pods \
             have a subdomain (a headless Service)",
        )),
        _ => Ok(()),
    }
}
