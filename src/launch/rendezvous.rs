//! Finding and joining the job's control channel: the coordinator named (`--coordinator`) or
//! found as rank 0, a follower that learns the job from it, a pod without the job's secret
//! that must not train alone, the join's grace and an elastic coordinator's room to grow.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::{sleep, Instant};
use tracing::{info, warn};

use crate::config::{Config, Secret};
use crate::control::{self, Channel, ChannelRole, Joining};
use crate::error::ConfigError;
use crate::error::Error;
use crate::ledger::Ledger;
use crate::loss::Loss;
use crate::membership::{Me, Membership, PodAddress, Served};
use crate::peers;

use super::processes::{progress_check, CONNECT_TIMEOUT};
use super::ready::{Attempt, UnjoinedCoordinator};
use super::record::JobRecord;
use crate::coordination;

/// How long the launchers of an attempt may take to join its control channel, besides the
/// grace period they may spend stopping their children first.
pub(super) const JOIN_GRACE: Duration = Duration::from_secs(60);

/// What one try to reach the coordinator found.
pub(super) enum Located<T> {
    /// The coordinator is this pod.
    ThisPod,
    /// No coordinator is named (--coordinator): the pod of rank 0 coordinates, found later.
    NotNamed,
    /// The job has no control channel.
    NoChannel,
    /// The coordinator, or the channel joined there.
    At(T),
    /// Not yet: its name has no single address (why).
    NotYet(String),
}

/// The named coordinator's address when it is another pod's.
pub(super) async fn coordinator_elsewhere(
    config: &Config,
    my_ip: IpAddr,
) -> Result<Located<SocketAddr>, Error> {
    let Some((host, port)) = &config.control.coordinator else {
        return Ok(Located::NotNamed);
    };
    Ok(
        match resolve(host, *port, config.control.dns_server).await? {
            Ok(address) if address.ip() == my_ip => Located::ThisPod,
            Ok(address) => Located::At(address),
            Err(why) => Located::NotYet(why),
        },
    )
}

/// What this launcher brings to a channel, in one place: its role, secret, address and ledger,
/// its configuration's timeouts, and nothing found yet (no members, view or membership, no
/// growth, the usual join grace); each caller sets what it found.
pub(super) fn joining(
    config: &Config,
    secret: Secret,
    me: PodAddress,
    role: ChannelRole,
    ledger: Ledger,
) -> Joining {
    Joining {
        role,
        secret,
        me,
        members: Vec::new(),
        view: String::new(),
        ledger,
        nproc_per_pod: config.topology.processes.per_pod,
        heartbeat_timeout: config.control.heartbeat_timeout,
        join_grace: JOIN_GRACE + config.timing.grace_period,
        membership: None,
        ended: None,
        who: String::new(),
        progress_check: progress_check(config),
        // It watches no pod through the API.
        served: Served::default(),
        network: control::tcp(),
        growth: None,
        reporting: control::Reporting::default(),
    }
}

pub(super) fn coordinator_without_secret(
    config: &Config,
    membership: &Membership,
    me: &Me,
) -> Option<UnjoinedCoordinator> {
    let (address, ours) = coordination::coordinator(&config.control, membership, me)?;
    if ours == Some(true) {
        return None;
    }
    let (host, port) = match address.parse::<SocketAddr>() {
        Ok(at) => (at.ip().to_string(), at.port()),
        Err(_) => config.control.coordinator.clone()?,
    };
    let who = membership
        .trainers
        .iter()
        .chain(&membership.pservers)
        .find(|m| host.parse() == Ok(m.ip))
        .map_or_else(|| host.clone(), |m| format!("pod {}", m.name));
    Some(UnjoinedCoordinator {
        who,
        host,
        port,
        dns_server: config.control.dns_server,
    })
}

/// How often a launcher without a job secret looks for a control channel that the job's
/// coordinator serves: from the first to the last pause, each a random part longer (a thousand
/// such pods must not knock at pod 0 at the same instants), for as long as that coordinator
/// would gather (--wait-timeout; an hour without one).
pub(super) const UNJOINED_LOOK_FIRST: Duration = Duration::from_millis(250);

pub(super) const UNJOINED_LOOK_LAST: Duration = Duration::from_secs(30);

pub(super) const UNJOINED_LOOK_UNBOUNDED: Duration = Duration::from_secs(3600);

/// Resolves once the coordinator is seen serving a control channel that this launcher, without
/// the job secret, cannot join: the error it ends with (status 2), and a loss that stops its
/// children meanwhile. Never, while none answers.
pub(super) async fn channel_without_secret(
    from: IpAddr,
    coordinator: UnjoinedCoordinator,
    looking: Duration,
    found: Arc<std::sync::OnceLock<ConfigError>>,
) -> Loss {
    let UnjoinedCoordinator {
        who,
        host,
        port,
        dns_server,
    } = coordinator;
    info!(
        "no job secret here, so no control channel: a safeguard checks now and then, for up to {} s, that {who} serves none at {host}:{port} either (if it did, the other pods have a secret this pod lacks, and it ends with status 2 saying so)",
        looking.as_secs()
    );
    let until = Instant::now() + looking;
    let mut pause = UNJOINED_LOOK_FIRST;
    // Each pod apart from the first look on: a thousand must not knock at pod 0 together.
    sleep(jitter(UNJOINED_LOOK_FIRST)).await;
    while Instant::now() < until {
        let at = match resolve(&host, port, dns_server).await {
            Ok(Ok(at)) if at.ip() != from => Some(at),
            _ => None,
        };
        if let Some(at) = at {
            if control::serves_a_channel(&control::tcp(), from, at, CONNECT_TIMEOUT).await {
                let error = ConfigError::new(
                    crate::config::JOB_SECRET,
                    "",
                    format!("the job's secret: the launcher of {who} serves the job's control channel at {at}, and waits for this pod to join it; give every pod of the job the same secret (the Secret `manifest` mounts)"),
                );
                let reason = error.to_string();
                let _ = found.set(error);
                return Loss::of_pod(reason);
            }
        }
        sleep(pause + jitter(pause / 2)).await;
        pause = (pause * 2).min(UNJOINED_LOOK_LAST);
    }
    warn!(
        "no job secret: stopped checking for a control channel at {host}:{port} after {} s; if {who} starts one later, this pod cannot join it (give every pod the same job secret)",
        looking.as_secs()
    );
    std::future::pending().await
}

/// A random part of `up_to`.
pub(super) fn jitter(up_to: Duration) -> Duration {
    let mut bytes = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    up_to.mul_f64(f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX))
}

/// The address of the coordinator's HOST: an IP, or a DNS name resolved without NSS (the
/// static binary has none). Err: why the name has no single address yet (its pod is
/// starting, or being replaced); gathering again tries again, within --wait-timeout.
pub(super) async fn resolve(
    host: &str,
    port: u16,
    dns_server: Option<SocketAddr>,
) -> Result<Result<SocketAddr, String>, Error> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Ok(SocketAddr::new(ip, port)));
    }
    let ips = match peers::dns::resolve_once(host, dns_server).await? {
        Ok(ips) => ips,
        Err(e) => return Ok(Err(format!("{host}: {e}"))),
    };
    // One pod coordinates: with two addresses (a replaced pod's old one still listed) two
    // launchers would each take the name for their own.
    Ok(match (ips.first(), ips.len()) {
        (Some(&ip), 1) => Ok(SocketAddr::new(ip, port)),
        (None, _) => Err(format!("{host} has no address yet")),
        _ => {
            let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
            Err(format!(
                "{host} has {} addresses ({}); waiting for one",
                ips.len(),
                list.join(", ")
            ))
        }
    })
}

/// A follower's way to look the coordinator's DNS name up again; None when it is an address.
pub(super) fn recheck_of(config: &Config) -> Option<control::Recheck> {
    let (host, _) = config.control.coordinator.clone()?;
    if host.parse::<IpAddr>().is_ok() {
        return None;
    }
    let dns_server = config.control.dns_server;
    Some(std::sync::Arc::new(move || {
        let host = host.clone();
        async move {
            match peers::dns::resolve_once(&host, dns_server).await {
                Ok(Ok(ips)) => Some(ips),
                Ok(Err(_)) | Err(_) => None,
            }
        }
        .boxed()
    }))
}

/// Joins this attempt's control channel: as the coordinator (the pod at --coordinator's
/// address, else the pod of rank 0) or as a follower of it. `NoChannel`: the plan has none.
/// `first_attempt`: this launcher's first, when a coordinator reads the count recorded on its
/// Job (later ones count from the attempt that ended here, which the record can only trail).
pub(super) async fn join_channel(
    secret: Secret,
    reporting: &control::Reporting,
    attempt: &Attempt,
    config: &Config,
    membership: &Membership,
    me: &Me,
    first_attempt: bool,
) -> Result<Located<Channel>, Error> {
    let control = &config.control;
    let members = membership.pod_addresses();
    let ledger = attempt.ledger;
    let api = attempt.api.as_ref().filter(|_| first_attempt);
    let Some(plan) = &attempt.plan.control else {
        return Ok(Located::NoChannel);
    };
    let role = match (
        plan.this_pod_coordinates,
        plan.coordinator.parse::<SocketAddr>(),
    ) {
        (Some(true), Ok(listen)) => ChannelRole::Coordinator { listen },
        (Some(false), Ok(coordinator)) => ChannelRole::Follower {
            coordinator,
            recheck: None,
        },
        // A DNS name: whoever has its address serves.
        _ => {
            let Some((host, port)) = &control.coordinator else {
                return Ok(Located::NoChannel);
            };
            match resolve(host, *port, config.control.dns_server).await? {
                Ok(address) if address.ip() == me.ip => ChannelRole::Coordinator {
                    listen: SocketAddr::new(me.ip, *port),
                },
                Ok(coordinator) => ChannelRole::Follower {
                    coordinator,
                    recheck: recheck_of(config),
                },
                Err(why) => return Ok(Located::NotYet(why)),
            }
        }
    };
    if matches!(role, ChannelRole::Coordinator { .. }) && attempt.plan.trainer_id.is_none() {
        warn!("control channel: this pserver pod coordinates (--coordinator names it): its own end, a deletion or an eviction, ends the attempt for every pod even once its pserver has ended; name a trainer pod instead");
    }
    let ledger = match (&role, JobRecord::of(config, api)) {
        (ChannelRole::Coordinator { .. }, Some(record)) => record.ledger_from(ledger).await,
        _ => ledger,
    };
    let growth = growing(config, &role, members.len());
    let listen = match role {
        ChannelRole::Coordinator { listen } => Some(listen),
        ChannelRole::Follower { .. } => None,
    };
    let channel = control::join(Joining {
        growth,
        view: control::fingerprint(&members),
        members,
        join_grace: join_grace(config, attempt.children_grace, growth.is_some()),
        membership: Some(membership.clone()),
        who: attempt.who.clone(),
        served: attempt.served.clone(),
        reporting: reporting.clone(),
        ..joining(config, secret, me.address(), role, ledger)
    })
    .await
    .map_err(|e| channel_refused(config, listen, e))?;
    Ok(Located::At(channel))
}

/// Why the channel could not be served: its port taken by another process is said with the
/// address and the option that chose the port (`exit::PORT_TAKEN`); anything else is local.
fn channel_refused(config: &Config, listen: Option<SocketAddr>, e: std::io::Error) -> Error {
    match listen {
        Some(at) if e.kind() == std::io::ErrorKind::AddrInUse => Error::PortTaken {
            what: "the control channel",
            at,
            flag: match config.control.coordinator {
                Some(_) => crate::config::options::COORDINATOR.to_string(),
                None => crate::config::options::CONTROL_PORT.to_string(),
            },
            source: e,
        },
        _ => Error::io("cannot serve the control channel", e),
    }
}

/// How long a gathering waits for the members' hellos. The others may still be stopping their
/// children (a grace period) before they join. An elastic job's coordinator (`elastic`) waits
/// its elastic wait: a member whose launcher has not said hello by then is no member of the
/// next start (`leave_out`); but never less than a live member may take to hear the loss
/// (a heartbeat timeout) and stop its children (a grace period), lest the job start without a
/// member that still trains.
pub(super) fn join_grace(config: &Config, children_grace: Duration, elastic: bool) -> Duration {
    match config.control.elastic {
        Some(e) if elastic => e
            .wait
            .max(config.control.heartbeat_timeout + children_grace),
        _ => JOIN_GRACE + children_grace,
    }
}

/// An elastic job's coordinator grows it by the pods it lacks: arrivals are gathered for the
/// elastic wait, and the trainers given their checkpoint window (none without a checkpoint
/// signal) before the restart.
pub(super) fn growing(
    config: &Config,
    role: &ChannelRole,
    members: usize,
) -> Option<control::Growing> {
    let elastic = config.control.elastic?;
    if !matches!(role, ChannelRole::Coordinator { .. }) {
        return None;
    }
    let checkpoint_window = config
        .timing
        .checkpoint()
        .map_or(Duration::ZERO, |checkpoint| checkpoint.window);
    Some(growth_of(elastic, checkpoint_window, members))
}

/// An elastic job's growth with `members` pods now: arrivals gathered for the elastic wait,
/// `checkpoint_window` given to the trainers, room for the pods the job lacks.
pub(super) fn growth_of(
    elastic: crate::config::Elastic,
    checkpoint_window: Duration,
    members: usize,
) -> control::Growing {
    control::Growing {
        core: control::Growth {
            window: elastic.wait,
            checkpoint_window,
        },
        room: (elastic.max_pods as usize).saturating_sub(members),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An elastic job's coordinator waits its elastic wait for the members' hellos, and no less
    /// than a live member takes to hear the loss and stop its children; its followers, and a
    /// job that is not elastic, the usual join grace. Only its coordinator grows the job.
    #[test]
    fn an_elastic_coordinator_waits_its_elastic_wait_for_hellos_and_grows_the_job() {
        let config = |wait: &str, elastic: bool| {
            crate::protocol::testing::config(|a| {
                a.job_secret = Some("s".repeat(32));
                a.protocol = Some("collective".into());
                a.entry = Some("python train.py".into());
                a.heartbeat_timeout = Some("10".into());
                a.grace_period = Some("20".into());
                a.elastic_wait = elastic.then(|| wait.to_string());
                a.min_pods = elastic.then(|| "2".to_string());
            })
        };
        let s = Duration::from_secs;
        assert_eq!(join_grace(&config("120", true), s(20), true), s(120));
        // Shorter than a member's stop: the stop.
        assert_eq!(join_grace(&config("5", true), s(20), true), s(10 + 20));
        let usual = JOIN_GRACE + s(20);
        assert_eq!(join_grace(&config("120", true), s(20), false), usual);
        assert_eq!(join_grace(&config("120", false), s(20), true), usual);
        let elastic = config("120", true);
        let coordinator = ChannelRole::Coordinator {
            listen: "10.0.0.1:6171".parse().unwrap(),
        };
        let follower = ChannelRole::Follower {
            coordinator: "10.0.0.1:6171".parse().unwrap(),
            recheck: None,
        };
        let grows = growing(&elastic, &coordinator, 2).expect("the coordinator grows the job");
        assert_eq!((grows.room, grows.core.window), (1, s(120)));
        assert!(growing(&elastic, &follower, 2).is_none());
        assert!(growing(&config("120", false), &coordinator, 2).is_none());
    }

    /// An elastic job's coordinator makes room for the pods it lacks, and none at full size:
    /// an extra slot would admit a pod beyond the job's size.
    #[test]
    fn an_elastic_jobs_room_is_the_pods_it_lacks() {
        let elastic = crate::config::Elastic {
            min_pods: 2,
            max_pods: 4,
            wait: Duration::from_secs(7),
        };
        let room = |members| growth_of(elastic, Duration::from_secs(3), members).room;
        assert_eq!((room(4), room(3), room(2)), (0, 1, 2));
        let growth = growth_of(elastic, Duration::from_secs(3), 3).core;
        assert_eq!(
            (growth.window, growth.checkpoint_window),
            (Duration::from_secs(7), Duration::from_secs(3))
        );
    }
}
