//! `run` and `plan`: configuration -> peers -> plan, then the launch: the pserver first, the
//! trainer once every pserver endpoint of the job accepts TCP, then supervision until it is done.

mod attempt;
pub mod coordination;
#[cfg(test)]
mod driven;
mod ending;
pub mod lifecycle;
pub mod progress;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::net::TcpStream;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tracing::{info, warn};

use crate::address::own_ip;
use crate::cli::JobArgs;
use crate::config::{Config, Control, Discovery, Secret, JOB_SECRET_FILE, MIN_SECRET_LEN};
use crate::control::{self, Channel, Heard, Joining, Role as ControlRole};
use crate::error::ConfigError;
use crate::error::Error;
use crate::events::{JobEvents, Kind};
use crate::exit::{self, Outcome};
use crate::exit::{is_stop_signal, signal_name};
use crate::membership::{Loss, Me, Membership, PodAddress, Served};
use crate::peers::kubernetes::{ApiServer, Recorded};
use crate::plan::{Plan, ProcessSpec, Role};
use crate::protocol::InputFiles;
use crate::supervise::Signals;
use crate::supervise::{or_never, Event, Output, OutputClock, SpawnSpec, Supervisor};
use crate::vocabulary::{Protocol, JOB_STOPPED};
use crate::{peers, protocol};
use attempt::Attempts;
use lifecycle::{AfterRun, Command, Input, Lifecycle, Setup};

/// Between probe rounds, doubling from the first to the last: pservers that start in a few
/// milliseconds are seen at once, slow ones cost a round of connects every 100 ms.
const PROBE_PAUSE_FIRST: Duration = Duration::from_millis(2);
const PROBE_PAUSE_LAST: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Between two rounds of gathering, doubling from the first to the last: a round that ended at
/// once (views that differ) must not become a busy loop.
const REGATHER_PAUSE_FIRST: Duration = Duration::from_millis(250);
const REGATHER_PAUSE_LAST: Duration = Duration::from_secs(5);
/// How long a pod an elastic job turned away waits before it asks again.
const TURNED_AWAY_PAUSE: Duration = Duration::from_secs(30);
/// How long the launchers of an attempt may take to join its control channel, besides the
/// grace period they may spend stopping their children first.
const JOIN_GRACE: Duration = Duration::from_secs(60);
/// How long a coordinator that ended the job at a restart serves its address, besides the grace
/// period, so that the followers hear of it.
const TELL_THE_END: Duration = Duration::from_secs(5);
/// How long a launcher about to exit lets its last events go out.
const EVENTS_FLUSH: Duration = Duration::from_secs(3);
/// How long a launcher whose children are stopped waits for the coordinator's verdict, besides
/// the others' grace period and the heartbeat timeout (a silent member counts as stopped once
/// its link is judged): a bound for a coordinator that says nothing, not part of the decision.
const VERDICT_MARGIN: Duration = Duration::from_secs(5);
/// How long a pod whose trainer process failed waits for the job to have heard it before it
/// stops the siblings: a round trip to the coordinator, kept short (the siblings still run).
const TOLD_BEFORE_STOP: Duration = Duration::from_millis(500);
/// How long after the others' grace period a coordinating launcher whose own pod is ending
/// still waits for their word: a round trip, kept short (its pod's own grace runs out).
const VERDICT_STOP_MARGIN: Duration = Duration::from_secs(3);
/// How long after a heartbeat timeout a coordinator that refused the start still tells members
/// that join again (their link broke before they heard it): time to gather again.
const REFUSAL_SERVED: Duration = Duration::from_secs(15);
const REFUSAL_SERVED_AT_MOST: Duration = Duration::from_secs(25);

/// `run` and `plan`: everything up to the launch; then print the plan (`plan_only`) or carry
/// it out. The outcome is the trainer's (or the pserver's) own end, or the launcher's failure.
pub async fn launch(args: &JobArgs, plan_only: bool) -> Outcome {
    info!(
        "paddle-launcher {} starting as pid {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    for unread in crate::cli::unread_in_environment() {
        warn!("{unread}");
    }
    launch_steps(args, plan_only)
        .await
        .unwrap_or_else(Outcome::from)
}

/// The first stage: the configuration as this pod runs it — the batch system's names read,
/// the pod's devices and processes settled, its address and network settings chosen, the
/// progress file made — all checked before any wait for the peers.
async fn configure(args: &JobArgs, plan_only: bool) -> Result<(Config, IpAddr), Error> {
    let interfaces = crate::address::host_interfaces();
    let mut config =
        crate::batch::discover::configure(args, &interfaces, crate::address::hostname_ip).await?;
    crate::devices::resolve(&mut config, &crate::devices::seen(), crate::devices::cpus())?;
    if !config.topology.processes.found.is_empty() {
        info!("{}", config.topology.processes.found);
    }
    let my_ip = own_ip(&config, &interfaces, crate::address::hostname_ip)?;
    config.ports.sockets = crate::address::sockets(&config, my_ip, &interfaces);
    if !plan_only {
        for setting in &config.ports.sockets {
            info!("{}", crate::address::said(setting));
        }
    }
    // Only a pod with a trainer, with hang detection on, needs its progress file.
    let watches_hangs = config.timing.hang_timeout.is_some()
        && config.topology.role != crate::vocabulary::PodRole::Pserver;
    progress_file(&mut config.workspace, watches_hangs && !plan_only)?;
    let workspace = &config.workspace;
    if let (true, Some(shared)) = (watches_hangs, &workspace.job_path) {
        if lexically(&workspace.progress_file).starts_with(lexically(shared)) {
            warn!(
                "the progress file {} is under JOB_PATH, which every pod shares: one pod's progress would hide another's hang; give each pod its own ({})",
                workspace.progress_file.display(),
                crate::config::PROGRESS_FILE
            );
        }
    }
    Ok((config, my_ip))
}

/// The route from the first line: configure, this pod's own parts, then attempts until the
/// job ends — each gathered (discover, plan, join), begun, run and judged, then restarted in
/// place or finished.
async fn launch_steps(args: &JobArgs, plan_only: bool) -> Result<Outcome, Error> {
    let (mut config, my_ip) = configure(args, plan_only).await?;
    let pod = config
        .topology
        .pod_name
        .clone()
        .unwrap_or_else(|| my_ip.to_string());
    tracing::Span::current().record("pod", tracing::field::display(&pod));
    let own = own_parts(&mut config, plan_only).await?;
    let Some(mut supervisor) = own.supervisor else {
        return print_plan(&mut config, my_ip, &own.inputs).await;
    };
    let mut attempts = Attempts::new(&config);
    loop {
        let gathered = gather(
            &mut config,
            &mut supervisor,
            own.secret.as_ref(),
            my_ip,
            &own.inputs,
            attempts.count,
            &attempts.members_before,
        )
        .await?;
        let attempt = match gathered {
            Gathered::Attempt(attempt) => *attempt,
            Gathered::JobSucceeded(reason) => {
                info!("{reason}: nothing left for this pod to start");
                return Ok(Outcome::new(exit::SUCCESS, reason));
            }
        };
        let running = attempt::begin(
            attempt,
            &mut attempts,
            &config,
            &mut supervisor,
            my_ip,
            &pod,
        );
        let result = attempt::run(&running, &mut attempts, &config, &mut supervisor, my_ip).await?;
        let (result, judged) = attempt::judge(&running, result, &config, &mut supervisor).await;
        match lifecycle::after_run(result, &judged.budget) {
            AfterRun::Restart(reason) => {
                attempt::restart(running, judged, reason, &mut attempts, &mut supervisor).await?
            }
            AfterRun::Finish(result) => {
                let finished = attempt::finish(
                    running,
                    judged,
                    result,
                    &mut attempts,
                    &config,
                    &mut supervisor,
                );
                return Ok(finished.await);
            }
        }
    }
}

/// What this pod has of its own before it looks for the others.
struct Own {
    /// None for `plan`, which starts nothing.
    supervisor: Option<Supervisor>,
    secret: Option<Secret>,
    inputs: InputFiles,
}

/// The second stage: the signal handlers first (a TERM then ends the pod at once, and zombies
/// are reaped from the start when it is PID 1), the job's secret (waited for while its file is
/// not yet mounted), the coordinator derived where the Job names it, and the input files,
/// which are on the pod's own or a shared filesystem, not in the membership: checked first.
async fn own_parts(config: &mut Config, plan_only: bool) -> Result<Own, Error> {
    let secret = job_secret(&config.control)?;
    // Before any wait for the secret's file: an elastic job without a named coordinator is
    // refused at once.
    if !matches!(secret, JobSecret::None) {
        derive_coordinator(config);
    }
    coordination::elastic_needs_a_named_coordinator(config)?;
    let mut supervisor = if plan_only {
        None
    } else {
        let signals =
            Signals::install().map_err(|e| Error::io("cannot install signal handlers", e))?;
        Some(Supervisor::new(signals, config.timing.grace_period))
    };
    let secret = match (secret, supervisor.as_mut()) {
        (JobSecret::Missing(path), Some(supervisor)) => {
            let create = create_secret_command(config);
            let limit = config.timing.wait_timeout;
            Some(wait_for_secret_file(&path, limit, &create, supervisor).await?)
        }
        (JobSecret::Missing(path), None) => {
            let create = create_secret_command(config);
            return Err(missing_secret(&path, "", &create).into());
        }
        (JobSecret::Read(secret), _) => Some(secret),
        (JobSecret::None, _) => None,
    };
    let for_inputs = config.clone();
    let inputs = off_thread(supervisor.as_mut(), "expanding the file globs", move || {
        input_files(&for_inputs)
    })
    .await??;
    Ok(Own {
        supervisor,
        secret,
        inputs,
    })
}

/// `plan`: the job's pods found once, ranked, and the plan printed; nothing started.
async fn print_plan(
    config: &mut Config,
    my_ip: IpAddr,
    inputs: &InputFiles,
) -> Result<Outcome, Error> {
    let round = peers::Round {
        members_before: &[],
        absent: &Default::default(),
        since: Instant::now(),
    };
    let found = wait_for_peers(config, None, round).await?;
    let (plan, _, _) = plan_for(config, &found, my_ip, inputs)?;
    let plan = plan.for_restart(config.restarts_before());
    println!("{}", plan.to_json());
    Ok(Outcome::new(exit::SUCCESS, "plan printed"))
}

/// The pod's last line, said for the job. A failure of this pod's own (its trainer's status,
/// a hang, a pserver's end) names the pod and when (`said`, as the others' lines name it after
/// their "job stopped: "), unless the job's first cause (`cause`, the coordinator's word) was
/// another's: then that comes first, and this pod's failure after it. A loss told by another
/// says so itself. A stop signal is this pod's news only: the pod was deleted, the job may go
/// on.
fn for_the_job(
    result: Result<Outcome, Error>,
    who_at: &str,
    said: &str,
    cause: Option<String>,
) -> Outcome {
    let signalled = matches!(result, Err(Error::Stopped { .. }));
    let mut outcome = result.unwrap_or_else(Outcome::from);
    let own = outcome.code != exit::SUCCESS && !outcome.reason.starts_with(JOB_STOPPED);
    if !own || signalled {
        return outcome;
    }
    // The coordinator's word may be `said` cut to fit a frame.
    outcome.reason = match cause {
        Some(cause) if !said.starts_with(&cause) => {
            format!("{JOB_STOPPED}{cause}; on this pod: {}", outcome.reason)
        }
        _ => format!("{JOB_STOPPED}{who_at}: {}", outcome.reason),
    };
    outcome
}

/// The trainer endpoints of the peers a collective trainer connects to at its init: checked
/// before it starts (`--check-peers`), so that a peer this pod cannot reach is named at once
/// instead of found by a hang in NCCL's or gloo's init. Peers at this pod's own address (host
/// network) are not checked.
fn peers_to_check(plan: &Plan, config: &Config) -> Vec<SocketAddr> {
    let collective = config.topology.protocol == crate::vocabulary::Protocol::Collective;
    if !config.ports.check_peers || !collective || plan.trainer_id.is_none() {
        return Vec::new();
    }
    // An IPv6 link-local peer is reached through an interface this check does not name.
    let link_local =
        |ip: &IpAddr| matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    plan.pods
        .iter()
        .filter(|pod| pod.ip != plan.pod_ip && !link_local(&pod.ip))
        .map(|pod| SocketAddr::new(pod.ip, config.ports.trainer))
        .collect()
}

/// How long one peer may take to answer, and how many are asked at once.
const PEER_CHECK_TIMEOUT: Duration = Duration::from_secs(3);
const PEER_CHECK_AT_ONCE: usize = 256;

/// How many times a silent peer is asked, a second apart: a pod network still being programmed
/// for pods that have just started may drop the first packets.
const PEER_CHECK_TRIES: usize = 3;

/// The peers that did not answer a TCP connection from `from` in any of the tries. A refusal is
/// an answer: the peer's trainer may not listen yet, but its pod is reachable.
async fn silent_peers(from: IpAddr, mut peers: Vec<SocketAddr>) -> Vec<SocketAddr> {
    use futures::StreamExt;
    let probe = match from {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    if probe
        .and_then(|s| s.bind(SocketAddr::new(from, 0)))
        .is_err()
    {
        warn!(
            "cannot connect from this pod's address {from}: the peers' reachability is not checked"
        );
        return Vec::new();
    }
    for attempt in 1..=PEER_CHECK_TRIES {
        peers = futures::stream::iter(peers)
            .map(|peer| async move { (!answers(from, peer).await).then_some(peer) })
            .buffer_unordered(PEER_CHECK_AT_ONCE)
            .filter_map(std::future::ready)
            .collect()
            .await;
        if peers.is_empty() || attempt == PEER_CHECK_TRIES {
            break;
        }
        info!(
            "{} did not answer yet: asking again in 1 s",
            crate::vocabulary::count(peers.len(), "peer")
        );
        sleep(Duration::from_secs(1)).await;
    }
    peers
}

/// The silent peers as the error names them: the first ten, then how many more.
fn named_peers(peers: &[SocketAddr]) -> String {
    let mut named: Vec<String> = peers.iter().take(10).map(ToString::to_string).collect();
    if peers.len() > 10 {
        named.push(format!("and {} more", peers.len() - 10));
    }
    named.join(", ")
}

async fn answers(from: IpAddr, peer: SocketAddr) -> bool {
    let socket = match peer {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    // This pod's address is not one to connect from (a POD_IP that is not local): nothing
    // this check can say.
    let Ok(socket) = socket else { return true };
    if socket.bind(SocketAddr::new(from, 0)).is_err() {
        return true;
    }
    match timeout(PEER_CHECK_TIMEOUT, socket.connect(peer)).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        Err(_) => false,
    }
}

/// The pod's grace period as its spec says (read with the pods): the children's follows it,
/// unless --grace-period or --pod-grace-period said otherwise.
fn grace_from_the_pod(config: &mut Config, supervisor: &mut Supervisor, pod_grace: Duration) {
    let timing = &mut config.timing;
    if timing.pod_grace.is_some() {
        return;
    }
    timing.pod_grace = Some(pod_grace);
    if let Some(given) = timing.grace_given.filter(|given| *given > pod_grace) {
        warn!(
            "{} is {} s, longer than this pod's terminationGracePeriodSeconds ({} s): the kubelet will kill the children before it ends",
            crate::config::GRACE_PERIOD,
            given.as_secs(),
            pod_grace.as_secs()
        );
        return;
    }
    let channel = config.control.is_on();
    if let Ok(grace) = crate::config::children_grace(timing.grace_given, Some(pod_grace), channel) {
        if grace != timing.grace_period {
            info!(
                "the children's grace period: {} s (this pod's terminationGracePeriodSeconds is {} s)",
                grace.as_secs(),
                pod_grace.as_secs()
            );
        }
        timing.grace_period = grace;
        supervisor.grace = grace;
    }
}

/// A hang's own event, before the restart or the end it led to: what a user searches for.
fn post_hang(events: &mut JobEvents, hung: bool, reason: &str) {
    if hung {
        let said =
            format!("{reason}; every trainer's Python stacks are in its pod's log (kubectl logs)");
        events.post(Kind::Warning, "Hang", &said);
    }
}

/// `path` with its `.` dropped and each `..` taking the name before it, without looking at the
/// filesystem (the paths need not exist yet): `/mnt/job/./x/../progress` is under `/mnt/job`.
fn lexically(path: &std::path::Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Now, to the second, as Kubernetes writes times ("2026-11-23T22:16:40Z").
fn now_utc() -> String {
    format!("{:.0}", k8s_openapi::jiff::Timestamp::now())
}

/// The pod's outcome, saying how many times the job had restarted when it ended, if at all:
/// a success after restarts is not the same news as a first run's.
fn after_restarts(mut outcome: Outcome, restart_count: u32) -> Outcome {
    if restart_count > 0 {
        outcome.reason = format!(
            "{} ({} of the job)",
            outcome.reason,
            lifecycle::restarts_said(restart_count)
        );
    }
    outcome
}

/// How long to wait for the coordinator's verdict after a loss.
fn verdict_limits(config: &Config) -> ending::VerdictLimits {
    ending::VerdictLimits {
        // The others stop their children within their grace period, then say so; a silent
        // one counts as stopped once its link is judged.
        recoverable: config.timing.grace_period + config.control.heartbeat_timeout + VERDICT_MARGIN,
        ending: config.timing.grace_period + VERDICT_STOP_MARGIN,
    }
}

/// One attempt, ready to start: the plan in its restart epoch and the watches that may end it.
struct Attempt {
    plan: Plan,
    /// "pod p-1 (trainer id 1 of 3)": who this launcher is, in what it tells the others.
    who: String,
    channel: Option<Channel>,
    peer_loss: Option<BoxFuture<'static, String>>,
    trainers_done: Option<BoxFuture<'static, Result<String, String>>>,
    /// The job's restart budget: agreed over the channel, else this pod's own.
    max_restarts: u32,
    /// How many of the restarts before were preemptions: agreed over the channel.
    preemptions: u32,
    /// The job's free preemptions: agreed over the channel.
    max_preemptions: u32,
    /// Of the preemptions, the elastic job's grows: agreed over the channel.
    grows: u32,
    /// The API server the pods were found through, if they were (for the job's events).
    api: Option<ApiServer>,
    /// The members the control channel says have served their part (`peer_loss` ignores
    /// their pods).
    served: Served,
    /// Without a job secret: the pod that would coordinate the job's channel and where, if
    /// another pod's (a pod the secret did not reach must not train alone while the others
    /// wait for its hello).
    coordinator_unjoined: Option<UnjoinedCoordinator>,
}

/// Finds the job's pods and, with a control channel, waits until every launcher has found the
/// same ones; the coordinator names the restart epoch. A membership that changes meanwhile
/// (a pod lost, views that differ) means discovering again, at no cost to the restart budget.
/// With a named coordinator (`--coordinator`, Kubernetes discovery), only the coordinator finds
/// the pods: every other launcher learns them from it and makes no API request at all.
async fn gather(
    config: &mut Config,
    supervisor: &mut Supervisor,
    secret: Option<&Secret>,
    my_ip: IpAddr,
    inputs: &InputFiles,
    count: Count,
    members_before: &[PodAddress],
) -> Result<Gathered, Error> {
    // Since when this pod has gathered; a pod turned away (the job trains without it) counts
    // from its last turning away.
    let mut began = Instant::now();
    let mut rounds: u32 = 0;
    // An elastic job's pods whose launchers did not say hello within the elastic wait: no
    // member of this gathering's start (their node may be dead, their pod Running for minutes).
    let mut absent: std::collections::BTreeSet<String> = Default::default();
    // Why the last round ended when it was the coordinator's name that had no address.
    let mut no_coordinator: Option<String> = None;
    loop {
        if rounds > 0 {
            // Gathering again: a launcher that never agrees (another job name, a frozen one
            // whose pod still runs) or a coordinator that never comes back must not keep the
            // job in a loop it never leaves.
            if let Some(limit) = config.timing.wait_timeout {
                if began.elapsed() > limit {
                    let status = match no_coordinator {
                        Some(why) => format!("the coordinating launcher's address: {why}"),
                        None => format!(
                            "the job's launchers did not agree on a start in {rounds} rounds of gathering (the lines above say why each ended)"
                        ),
                    };
                    return Err(Error::PeersTimeout {
                        waited_s: began.elapsed().as_secs(),
                        status,
                    });
                }
            }
            let pause = REGATHER_PAUSE_FIRST * 2u32.saturating_pow(rounds.min(8) - 1);
            let pause = pause.min(REGATHER_PAUSE_LAST);
            interruptible(
                Some(&mut *supervisor),
                "waiting to gather again",
                Breaks::AlsoHup,
                sleep(pause),
            )
            .await?;
        }
        rounds += 1;
        no_coordinator = None;
        if let Some(secret) = secret {
            // A coordinator named by DNS whose name has no address yet: there is nothing to
            // join, so the pods are not listed again meanwhile. (`join_channel` resolves it
            // again after discovery, which may take long: by then the name may have moved.)
            match coordinator_elsewhere(config, my_ip).await? {
                Found::NotYet(why) => {
                    info!("control channel: waiting for the coordinator's address: {why}");
                    no_coordinator = Some(why);
                    continue;
                }
                Found::At(coordinator) if coordination::membership_from_coordinator(config) => {
                    match follow_coordinator(
                        config,
                        supervisor,
                        secret,
                        coordinator,
                        (my_ip, inputs),
                        count,
                        &mut began,
                    )
                    .await?
                    {
                        Some(gathered) => return Ok(gathered),
                        None => continue,
                    }
                }
                Found::At(_) | Found::ThisPod | Found::NotNamed | Found::NoChannel => {}
            }
        }
        let names: Vec<String> = members_before.iter().map(|m| m.name.clone()).collect();
        let round = peers::Round {
            members_before: &names,
            absent: &absent,
            since: began,
        };
        let found = match wait_for_peers(config, Some(&mut *supervisor), round).await {
            // Followers that learn the job only from this coordinator would wait for it until
            // their --wait-timeout: they hear the end instead.
            Err(error)
                if !members_before.is_empty()
                    && coordination::membership_from_coordinator(config)
                    && !matches!(error, Error::Stopped { .. }) =>
            {
                if let Some(secret) = secret {
                    let reason = format!("the coordinating launcher ended the job: {error}");
                    tell_followers_the_end(config, secret, my_ip, members_before, reason).await;
                }
                return Err(error);
            }
            found => found?,
        };
        let (plan, membership, me) = plan_for(config, &found, my_ip, inputs)?;
        if let Some(pod_grace) = found.own_grace {
            grace_from_the_pod(config, supervisor, pod_grace);
        }
        let peers::Found {
            peer_loss,
            trainers_done,
            api,
            served,
            ..
        } = found;
        let who = who(&me.name, &plan, config);
        let mut attempt = Attempt {
            plan,
            who,
            channel: None,
            peer_loss,
            trainers_done,
            max_restarts: config.control.max_restarts,
            preemptions: count.preemptions,
            max_preemptions: config.control.max_preemptions,
            grows: count.grows,
            api,
            served,
            coordinator_unjoined: None,
        };
        let Some(secret) = secret else {
            attempt.plan = attempt.plan.for_restart(count.next_epoch);
            attempt.coordinator_unjoined = coordinator_without_secret(config, &membership, &me);
            return Ok(Gathered::Attempt(Box::new(attempt)));
        };
        let mut channel = match join_channel(
            secret.clone(),
            &attempt,
            config,
            &membership,
            &me,
            count,
            members_before.is_empty(),
        )
        .await?
        {
            Found::NoChannel | Found::ThisPod | Found::NotNamed => {
                attempt.plan = attempt.plan.for_restart(count.next_epoch);
                return Ok(Gathered::Attempt(Box::new(attempt)));
            }
            Found::At(channel) => channel,
            Found::NotYet(why) => {
                info!("control channel: waiting for the coordinator's address: {why}");
                no_coordinator = Some(why);
                continue;
            }
        };
        // The trainers' watch, started anew if the API refuses it while this pod gathers: the
        // attempt judges a refusal at its start, as it always did.
        let watched = attempt
            .api
            .clone()
            .zip(config.topology.trainers_to_finish.clone());
        let again = move || {
            watched
                .clone()
                .map(|(api, group)| peers::kubernetes::all_succeeded(api, group).boxed())
        };
        let heard = interruptible(
            Some(supervisor),
            "waiting for the job's launchers",
            Breaks::AlsoHup,
            heard_or_lost(
                &mut channel,
                &mut attempt.peer_loss,
                TrainersWatch {
                    done: &mut attempt.trainers_done,
                    again: &again,
                },
            ),
        )
        .await?;
        let heard = match heard {
            Word::Heard(heard) => heard,
            Word::JobSucceeded(reason) => {
                channel.close().await;
                return Ok(Gathered::JobSucceeded(reason));
            }
        };
        if let Some(start) = started(
            heard,
            &mut channel,
            config.topology.processes.per_pod,
            refusal_served(config),
        )
        .await?
        {
            attempt.plan = attempt.plan.for_restart(start.epoch);
            attempt.max_restarts = start.max_restarts;
            attempt.preemptions = start.preemptions;
            attempt.max_preemptions = start.max_preemptions;
            attempt.grows = start.grows;
            attempt.channel = Some(channel);
            return Ok(Gathered::Attempt(Box::new(attempt)));
        }
        // Only by a coordinator that has run an attempt: every trainer of the job was then its
        // own, and a live member has heard the end, stopped its children and said hello
        // within the join grace. A fresh coordinator may find a pod still training an attempt
        // it never ran (the one before its pod's replacement): it awaits every pod.
        let left_out = channel.left_out();
        let silent: Vec<String> = left_out
            .silent
            .into_iter()
            .filter(|_| !names.is_empty())
            .collect();
        if !silent.is_empty() {
            info!(
                "elastic job: left out of the next start, their launchers did not say hello within the elastic wait: {}",
                silent.join(", ")
            );
        }
        absent.extend(silent.into_iter().chain(left_out.turned_away));
    }
}

/// What the channel says next while the attempt gathers. A pod the API shows lost meanwhile
/// means gathering again; the coordinator's launcher hands it to its channel, which decides
/// it in the same place as `Go` (before it: gather again, free; after it: the job's loss), so
/// that a `Go` already on its way to the followers is never undone by one launcher alone. A
/// follower that has said hello leaves it to the coordinator, which watches the same pods.
/// The job's success told meanwhile (the coordinator's goodbye, or every trainer pod Succeeded
/// for a pserver pod of the split layout) ends the gathering too: a pserver pod that came back
/// after its part was served has nothing left to start.
async fn heard_or_lost(
    channel: &mut Channel,
    peer_loss: &mut Option<BoxFuture<'static, String>>,
    trainers: TrainersWatch<'_>,
) -> Word {
    let mut job_succeeded = channel.job_succeeded();
    let mut watching_trainers = true;
    loop {
        let lost = tokio::select! {
            biased;
            heard = channel.heard() => return Word::Heard(heard),
            reason = &mut job_succeeded => return Word::JobSucceeded(reason),
            done = or_never(trainers.done.as_mut()), if watching_trainers => {
                match done {
                    Ok(reason) => return Word::JobSucceeded(reason),
                    Err(refusal) => {
                        info!("{refusal}: the trainer pods are watched again when the attempt starts");
                        *trainers.done = (trainers.again)();
                        watching_trainers = false;
                        continue;
                    }
                }
            }
            lost = or_never(peer_loss.as_mut()) => lost,
        };
        // Spent: the channel reports the loss from now on.
        *peer_loss = None;
        if channel.coordinates() {
            channel.pod_lost(lost);
        } else if channel.said_hello() {
            info!("{lost}: waiting for the coordinator's word");
        } else {
            return Word::Heard(Heard::Regather(lost));
        }
    }
}

/// A split pserver pod's watch of the trainer pods (all Succeeded), and how to start it anew.
struct TrainersWatch<'a> {
    done: &'a mut Option<BoxFuture<'static, Result<String, String>>>,
    again: &'a dyn Fn() -> Option<BoxFuture<'static, Result<String, String>>>,
}

/// What a gathering came to.
enum Gathered {
    /// An attempt to run.
    Attempt(Box<Attempt>),
    /// The job succeeded meanwhile (why): nothing left for this pod to start.
    JobSucceeded(String),
}

/// What the channel said while a gathering waited, or the job's success.
enum Word {
    Heard(Heard),
    JobSucceeded(String),
}

/// What one try to reach the coordinator found.
enum Found<T> {
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

/// What the coordinator said to start an attempt.
struct Start {
    epoch: u32,
    membership: Option<Membership>,
    max_restarts: u32,
    preemptions: u32,
    max_preemptions: u32,
    grows: u32,
}

/// Where the job's count of restarts stands before an attempt, as this launcher knows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Count {
    /// The restart epoch the attempt would start (PADDLE_LAUNCHER_RESTART_COUNT).
    pub next_epoch: u32,
    /// How many of the restarts before were preemptions, which spend no budget.
    pub preemptions: u32,
    /// Of those, how many were an elastic job's grows (not bounded by --max-preemptions).
    pub grows: u32,
}

impl Count {
    /// The count after an attempt of restart epoch `epoch` (after the job's `preemptions`,
    /// `grows` of them, as agreed) that ends to restart: the next epoch; one more free restart
    /// when a preemption or a growth ended it (`preempted`), and one more grow when a growth
    /// did (`grown`, which counts only with `preempted`).
    pub(crate) fn after_attempt(
        (epoch, preemptions, grows): Recorded,
        preempted: bool,
        grown: bool,
    ) -> Count {
        Count {
            next_epoch: epoch.saturating_add(1),
            preemptions: preemptions.saturating_add(u32::from(preempted)),
            grows: grows.saturating_add(u32::from(preempted && grown)),
        }
    }

    /// The count with what the Job records (the epoch it last started, its preemptions, of
    /// them its grows): the next epoch is one more (the job was restarted whole since, or is
    /// being restarted in place now), no more preemptions than restarts, no more grows than
    /// preemptions.
    pub(crate) fn after_record(self, (epoch, preemptions, grows): Recorded) -> Count {
        let next_epoch = self.next_epoch.max(epoch.saturating_add(1));
        let preemptions = self.preemptions.max(preemptions).min(next_epoch);
        Count {
            next_epoch,
            preemptions,
            grows: self.grows.max(grows).min(preemptions),
        }
    }
}

/// How long a coordinator that refused the start tells members that join again: a heartbeat
/// timeout and time to gather again, within the pod's grace period (the kubelet's default
/// when unknown) less a margin, since a stop meanwhile is no longer heard.
fn refusal_served(config: &Config) -> Duration {
    let grace = config
        .timing
        .pod_grace
        .unwrap_or(REFUSAL_SERVED_AT_MOST + VERDICT_STOP_MARGIN);
    (config.control.heartbeat_timeout + REFUSAL_SERVED)
        .min(REFUSAL_SERVED_AT_MOST)
        .min(grace.saturating_sub(VERDICT_STOP_MARGIN))
}

/// What the channel's answer to a gathering means: start (the epoch, and the membership when
/// the coordinator sent it), or gather again (None, the channel closed), or the job's end.
async fn started(
    heard: Heard,
    channel: &mut Channel,
    nproc_per_pod: u32,
    refusal_served: Duration,
) -> Result<Option<Start>, Error> {
    match heard {
        Heard::Go {
            epoch,
            membership,
            max_restarts,
            preemptions,
            max_preemptions,
            grows,
        } => {
            if epoch > 0 {
                info!("restart epoch {epoch}: starting again");
            }
            Ok(Some(Start {
                epoch,
                membership,
                max_restarts,
                preemptions,
                max_preemptions,
                grows,
            }))
        }
        Heard::Regather(reason)
        | Heard::Lost {
            reason,
            restart: true,
            ..
        } => {
            info!("{reason}: discovering the job's pods again");
            channel.close().await;
            Ok(None)
        }
        Heard::Lost {
            reason,
            restart: false,
            ..
        } => {
            channel.close().await;
            Err(Error::PeerLost {
                reason,
                stopped: "nothing (no process had started)".into(),
            })
        }
        Heard::Refused(reason) => {
            // A coordinator tells whoever joins again, until all have heard it: a link that
            // broke is noticed within a heartbeat timeout, and its launcher gathers again.
            if channel.coordinates() {
                let limit = refusal_served;
                info!("control channel: telling every launcher that the start is refused (at most {} s)", limit.as_secs());
                channel.told_everyone(limit).await;
            }
            channel.close().await;
            let own = nproc_per_pod.to_string();
            let expected = format!("the same on every pod: {reason}");
            Err(ConfigError::new(crate::config::NPROC_PER_POD, &own, expected).into())
        }
    }
}

/// Serves the coordinator's address until every member of the attempt that ended has heard
/// that the job cannot start again (a final `Lost`), or the join grace has passed.
async fn tell_followers_the_end(
    config: &Config,
    secret: &Secret,
    my_ip: IpAddr,
    members: &[PodAddress],
    reason: String,
) {
    let Some((_, port)) = &config.control.coordinator else {
        return;
    };
    let Some(me) = members.iter().find(|m| m.ip == my_ip) else {
        return;
    };
    // The followers decided to restart when this launcher did, and are connecting as soon as
    // their children are stopped; a member that is gone never will.
    let grace = config.timing.grace_period + TELL_THE_END;
    let joining = Joining {
        role: ControlRole::Coordinator {
            listen: SocketAddr::new(my_ip, *port),
        },
        secret: secret.clone(),
        me: me.clone(),
        members: members.to_vec(),
        view: String::new(),
        next_epoch: 0,
        preemptions: 0,
        grows: 0,
        max_restarts: 0,
        max_preemptions: 0,
        nproc_per_pod: config.topology.processes.per_pod,
        heartbeat_timeout: config.control.heartbeat_timeout,
        join_grace: grace,
        membership: None,
        ended: Some(reason),
        growth: None,
        who: String::new(),
        progress_check: Duration::ZERO,
        served: Served::default(),
        network: control::tcp(),
    };
    tell_the_end(joining, grace).await;
}

/// Serves `joining` (a coordinator's, with the job's end) until every member has heard the end,
/// or `grace` has passed.
async fn tell_the_end(joining: Joining, grace: Duration) {
    let others = joining.members.len().saturating_sub(1);
    match control::join(joining).await {
        Ok(mut channel) => {
            info!(
                "control channel: telling the other {} that the job has ended (at most {} s)",
                crate::vocabulary::count(others, "launcher"),
                grace.as_secs()
            );
            channel.told_everyone(grace).await;
        }
        Err(e) => {
            warn!("control channel: cannot tell the other launchers that the job has ended: {e}")
        }
    }
}

/// The named coordinator's address when it is another pod's.
async fn coordinator_elsewhere(config: &Config, my_ip: IpAddr) -> Result<Found<SocketAddr>, Error> {
    let Some((host, port)) = &config.control.coordinator else {
        return Ok(Found::NotNamed);
    };
    Ok(
        match resolve(host, *port, config.control.dns_server).await? {
            Ok(address) if address.ip() == my_ip => Found::ThisPod,
            Ok(address) => Found::At(address),
            Err(why) => Found::NotYet(why),
        },
    )
}

/// One attempt of a follower that does not discover the pods: join the coordinator, and plan
/// with the membership it sends. None: gather again.
async fn follow_coordinator(
    config: &mut Config,
    supervisor: &mut Supervisor,
    secret: &Secret,
    coordinator: SocketAddr,
    (my_ip, inputs): (IpAddr, &InputFiles),
    count: Count,
    began: &mut Instant,
) -> Result<Option<Gathered>, Error> {
    let mut channel = control::join(Joining {
        role: ControlRole::Follower {
            coordinator,
            recheck: recheck_of(config),
        },
        secret: secret.clone(),
        // Without a name, the coordinator knows this pod by its address.
        me: PodAddress {
            name: config.topology.pod_name.clone().unwrap_or_default(),
            ip: my_ip,
        },
        members: Vec::new(),
        // Empty: "send me the membership".
        view: String::new(),
        next_epoch: count.next_epoch,
        preemptions: count.preemptions,
        grows: count.grows,
        max_restarts: config.control.max_restarts,
        max_preemptions: config.control.max_preemptions,
        nproc_per_pod: config.topology.processes.per_pod,
        heartbeat_timeout: config.control.heartbeat_timeout,
        join_grace: JOIN_GRACE + config.timing.grace_period,
        membership: None,
        ended: None,
        // Its rank comes with the membership, after the hello.
        who: format!(
            "pod {}{}",
            config
                .topology
                .pod_name
                .as_deref()
                .unwrap_or(&my_ip.to_string()),
            on_node()
        ),
        progress_check: progress_check(config),
        // It watches no pod through the API.
        served: Served::default(),
        network: control::tcp(),
        growth: None,
    })
    .await
    .map_err(|e| Error::io("cannot join the control channel", e))?;
    // A pod that arrives once the job has trained to its end (an elastic job's late pod) hears
    // its success instead of a membership.
    let word = interruptible(
        Some(supervisor),
        "waiting for the coordinator's membership",
        Breaks::AlsoHup,
        heard_or_lost(
            &mut channel,
            &mut None,
            TrainersWatch {
                done: &mut None,
                again: &|| None,
            },
        ),
    )
    .await?;
    let heard = match word {
        Word::Heard(heard) => heard,
        Word::JobSucceeded(reason) => {
            channel.close().await;
            return Ok(Some(Gathered::JobSucceeded(reason)));
        }
    };
    // Turned away (it runs another number of processes than the elastic job): the job trains
    // on without it, and its exit status would end the Job (its podFailurePolicy). It waits,
    // says why, and asks again; its wait timeout counts from now.
    if let Heard::Refused(reason) = &heard {
        if reason.starts_with(control::TURNED_AWAY) {
            channel.close().await;
            warn!(
                "{reason}; this pod cannot join until it runs as many, and asks again in {} s (the job trains on without it)",
                TURNED_AWAY_PAUSE.as_secs()
            );
            let pause = sleep(TURNED_AWAY_PAUSE);
            interruptible(Some(supervisor), "turned away", Breaks::AlsoHup, pause).await?;
            *began = Instant::now();
            return Ok(None);
        }
    }
    let Some(Start {
        epoch,
        membership,
        max_restarts,
        preemptions,
        max_preemptions,
        grows,
    }) = started(
        heard,
        &mut channel,
        config.topology.processes.per_pod,
        config.control.heartbeat_timeout,
    )
    .await?
    else {
        return Ok(None);
    };
    let Some(membership) = membership else {
        info!(
            "the coordinator at {coordinator} sent no membership: discovering the job's pods again"
        );
        channel.close().await;
        return Ok(None);
    };
    let found = peers::Found {
        membership,
        namespace: None,
        api: None,
        own_grace: None,
        peer_loss: None,
        trainers_done: None,
        served: Served::default(),
    };
    let (plan, _, me) = plan_for(config, &found, my_ip, inputs)?;
    let who = who(&me.name, &plan, config);
    Ok(Some(Gathered::Attempt(Box::new(Attempt {
        plan: plan.for_restart(epoch),
        who,
        channel: Some(channel),
        peer_loss: None,
        trainers_done: None,
        max_restarts,
        preemptions,
        max_preemptions,
        grows,
        api: None,
        // Nothing of the API is watched here.
        served: Served::default(),
        coordinator_unjoined: None,
    }))))
}

/// Without a job secret: where the job's channel would be served, when that may be another
/// pod's (the pod of rank 0, or --coordinator's address or DNS name).
#[derive(Debug, Clone)]
struct UnjoinedCoordinator {
    /// How the log names it ("pod j-0", or the name given).
    who: String,
    host: String,
    port: u16,
    dns_server: Option<SocketAddr>,
}

fn coordinator_without_secret(
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
const UNJOINED_LOOK_FIRST: Duration = Duration::from_millis(250);
const UNJOINED_LOOK_LAST: Duration = Duration::from_secs(30);
const UNJOINED_LOOK_UNBOUNDED: Duration = Duration::from_secs(3600);

/// Resolves once the coordinator is seen serving a control channel that this launcher, without
/// the job secret, cannot join: the error it ends with (status 2), and a loss that stops its
/// children meanwhile. Never, while none answers.
async fn channel_without_secret(
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
fn jitter(up_to: Duration) -> Duration {
    let mut bytes = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    up_to.mul_f64(f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX))
}

/// The plan for what discovery found: this pod located among the members, ranked.
fn plan_for(
    config: &mut Config,
    found: &peers::Found,
    my_ip: IpAddr,
    inputs: &InputFiles,
) -> Result<(Plan, Membership, Me), Error> {
    if found.namespace.is_some() {
        config.topology.namespace = found.namespace.clone();
    }
    let membership = found.membership.clone();
    let epoch = config.for_epoch(membership.trainers.len());
    let me = locate_self(&epoch, &membership, my_ip)?;
    let stack_handler = config
        .timing
        .hang_timeout
        .map(|_| progress::stack_dump_dir(&config.workspace.progress_file));
    let plan = protocol::plan(&epoch, &membership, &me, inputs)
        .with_launcher_env(|name| std::env::var(name).ok(), stack_handler.as_deref())
        .for_restart(0);
    info!("{} pod {}: {}", me.name, me.ip, ranks_line(&plan, config));
    Ok((plan, membership, me))
}

/// This pod in the membership, after the checks every plan needs (each listener on its own
/// address). `doctor` asks the same.
pub(crate) fn locate_self(
    config: &Config,
    membership: &Membership,
    my_ip: IpAddr,
) -> Result<Me, Error> {
    membership.check_listeners(config.topology.protocol)?;
    // Static and DNS members have made-up names: only a real pod list can be searched by name.
    let own_name = match config.topology.discovery {
        Discovery::Kubernetes { .. } => config.topology.pod_name.as_deref(),
        Discovery::Static { .. } | Discovery::Dns { .. } => None,
    };
    Ok(membership.locate(config, own_name, my_ip)?)
}

/// Without --coordinator, in an Indexed Job whose pods have a subdomain (a headless Service),
/// the coordinator is pod 0 by its DNS name: derived from this pod's hostname, its completion
/// index and /etc/hosts, so that only pod 0 uses the API without any setting. Only when the
/// Job is the whole job: JOB_NAME is its name and the default selector finds its pods.
pub(crate) fn derive_coordinator(config: &mut Config) {
    if !coordination::may_derive_from_indexed_job(config) {
        return;
    }
    let index = std::env::var("JOB_COMPLETION_INDEX").ok();
    let hostname = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let derived = crate::batch::indexed_job::coordinator(
        index.as_deref(),
        &hostname,
        &hosts,
        &config.topology.job_name,
        config.control.port,
    );
    if let Some((host, port)) = derived {
        info!("coordinator: {host}:{port}, pod 0 of this Indexed Job (JOB_COMPLETION_INDEX, hostname {hostname}, its subdomain in /etc/hosts)");
        config.control.coordinator = Some((host, port));
    }
}

/// The address of the coordinator's HOST: an IP, or a DNS name resolved without NSS (the
/// static binary has none). Err: why the name has no single address yet (its pod is
/// starting, or being replaced); gathering again tries again, within --wait-timeout.
async fn resolve(
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
fn recheck_of(config: &Config) -> Option<control::Recheck> {
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

/// The job secret as this pod has it.
enum JobSecret {
    /// No channel: neither the secret nor its file is set.
    None,
    Read(Secret),
    /// The file is set but does not exist (yet): a Secret nobody created, or one the kubelet
    /// has not put in place.
    Missing(PathBuf),
}

/// The job secret: given, or read from its file (a mounted Secret). A file that does not exist
/// is never "no channel" for this pod, or the pods started after the Secret would wait for a
/// channel this one never joins: it is waited for (`wait_for_secret_file`).
fn job_secret(control: &Control) -> Result<JobSecret, Error> {
    if let Some(secret) = &control.secret {
        return Ok(JobSecret::Read(secret.clone()));
    }
    let Some(path) = &control.secret_file else {
        return Ok(JobSecret::None);
    };
    Ok(match read_secret_file(path)? {
        Some(secret) => JobSecret::Read(secret),
        None => JobSecret::Missing(path.clone()),
    })
}

/// How often a missing secret file is looked for, and how often the wait is said again.
const SECRET_LOOK_EVERY: Duration = Duration::from_secs(1);
const SECRET_SAY_EVERY: Duration = Duration::from_secs(30);

/// Waits for the job secret's file within --wait-timeout, saying what it waits for: a Secret
/// created after the pods is mounted by the kubelet within a minute or so (the volume is
/// optional, so the pod runs and can say this instead of hanging in ContainerCreating).
async fn wait_for_secret_file(
    path: &std::path::Path,
    limit: Option<Duration>,
    create: &str,
    supervisor: &mut Supervisor,
) -> Result<Secret, Error> {
    let began = Instant::now();
    let mut said: Option<Instant> = None;
    loop {
        // A file being written may be caught short: only a short file at the end is an error.
        let read = read_secret_file(path);
        let timed_out = limit.is_some_and(|limit| began.elapsed() >= limit);
        let read = match read {
            Err(Error::Config(_)) if !timed_out => Ok(None),
            read => read,
        };
        if let Some(secret) = read? {
            if said.is_some() {
                info!(
                    "found the job secret at {} after {:.1} s",
                    path.display(),
                    began.elapsed().as_secs_f64()
                );
            }
            return Ok(secret);
        }
        if timed_out {
            let waited = format!(
                " after waiting {} s (--wait-timeout)",
                began.elapsed().as_secs()
            );
            return Err(missing_secret(path, &waited, create).into());
        }
        if said.is_none_or(|at| at.elapsed() >= SECRET_SAY_EVERY) {
            warn!(
                "waiting for the job secret at {} ({} {}): the Secret mounted there does not exist yet, or has no key `secret`; create it with `{create}`",
                path.display(),
                JOB_SECRET_FILE,
                limit.map_or("no time limit".to_string(), |l| format!("at most {} s", l.as_secs()))
            );
            said = Some(Instant::now());
        }
        interruptible(
            Some(&mut *supervisor),
            "waiting for the job secret",
            Breaks::AlsoHup,
            sleep(SECRET_LOOK_EVERY),
        )
        .await?;
    }
}

fn missing_secret(path: &std::path::Path, waited: &str, create: &str) -> ConfigError {
    ConfigError::new(
        JOB_SECRET_FILE,
        &path.display().to_string(),
        format!("a file that exists{waited}: create the Secret mounted there (`{create}`), or unset the variable to run without the control channel"),
    )
}

/// The command that creates the Secret `manifest` mounts for this job (`<job>-launcher`), in
/// this pod's namespace when it knows it.
pub(crate) fn create_secret_command(config: &Config) -> String {
    let namespace = config
        .topology
        .namespace
        .as_deref()
        .unwrap_or("<namespace>");
    format!(
        "kubectl create secret generic {}-launcher -n {namespace} --from-literal=secret=$(openssl rand -hex 16)",
        config.topology.job_name
    )
}

/// The secret in `path`; None when the file does not exist.
pub(crate) fn read_secret_file(path: &std::path::Path) -> Result<Option<Secret>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            if text.len() < MIN_SECRET_LEN {
                return Err(ConfigError::new(
                    JOB_SECRET_FILE,
                    &path.display().to_string(),
                    format!("a file holding at least {MIN_SECRET_LEN} characters"),
                )
                .into());
            }
            Ok(Some(Secret(text.into_bytes())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(
            format!("cannot read the job secret {}", path.display()),
            e,
        )),
    }
}

/// Joins this attempt's control channel: as the coordinator (the pod at --coordinator's
/// address, else the pod of rank 0) or as a follower of it. `NoChannel`: the plan has none.
/// `first_attempt`: this launcher's first, when a coordinator reads the count recorded on its
/// Job (later ones count from the attempt that ended here, which the record can only trail).
async fn join_channel(
    secret: Secret,
    attempt: &Attempt,
    config: &Config,
    membership: &Membership,
    me: &Me,
    count: Count,
    first_attempt: bool,
) -> Result<Found<Channel>, Error> {
    let control = &config.control;
    let members = membership.pod_addresses();
    let who = who(&me.name, &attempt.plan, config);
    let api = attempt.api.as_ref().filter(|_| first_attempt);
    let Some(plan) = &attempt.plan.control else {
        return Ok(Found::NoChannel);
    };
    let role = match (
        plan.this_pod_coordinates,
        plan.coordinator.parse::<SocketAddr>(),
    ) {
        (Some(true), Ok(listen)) => ControlRole::Coordinator { listen },
        (Some(false), Ok(coordinator)) => ControlRole::Follower {
            coordinator,
            recheck: None,
        },
        // A DNS name: whoever has its address serves.
        _ => {
            let Some((host, port)) = &control.coordinator else {
                return Ok(Found::NoChannel);
            };
            match resolve(host, *port, config.control.dns_server).await? {
                Ok(address) if address.ip() == me.ip => ControlRole::Coordinator {
                    listen: SocketAddr::new(me.ip, *port),
                },
                Ok(coordinator) => ControlRole::Follower {
                    coordinator,
                    recheck: recheck_of(config),
                },
                Err(why) => return Ok(Found::NotYet(why)),
            }
        }
    };
    if matches!(role, ControlRole::Coordinator { .. }) && attempt.plan.trainer_id.is_none() {
        warn!("control channel: this pserver pod coordinates (--coordinator names it): its own end, a deletion or an eviction, ends the attempt for every pod even once its pserver has ended; name a trainer pod instead");
    }
    let count = match (&role, JobRecord::of(config, api)) {
        (ControlRole::Coordinator { .. }, Some(record)) => record.count_from(count).await,
        _ => count,
    };
    let growth = growing(config, &role, members.len());
    let join_grace = join_grace(config, growth.is_some());
    let channel = control::join(Joining {
        growth,
        role,
        secret,
        me: me.address(),
        view: control::fingerprint(&members),
        members,
        next_epoch: count.next_epoch,
        preemptions: count.preemptions,
        grows: count.grows,
        max_restarts: control.max_restarts,
        max_preemptions: control.max_preemptions,
        nproc_per_pod: config.topology.processes.per_pod,
        heartbeat_timeout: control.heartbeat_timeout,
        join_grace,
        membership: Some(membership.clone()),
        ended: None,
        who,
        progress_check: progress_check(config),
        served: attempt.served.clone(),
        network: control::tcp(),
    })
    .await
    .map_err(|e| Error::io("cannot serve the control channel", e))?;
    Ok(Found::At(channel))
}

/// How long a gathering waits for the members' hellos. The others may still be stopping their
/// children (a grace period) before they join. An elastic job's coordinator (`elastic`) waits
/// its elastic wait: a member whose launcher has not said hello by then is no member of the
/// next start (`leave_out`); but never less than a live member may take to hear the loss
/// (a heartbeat timeout) and stop its children (a grace period), lest the job start without a
/// member that still trains.
fn join_grace(config: &Config, elastic: bool) -> Duration {
    match config.control.elastic {
        Some(e) if elastic => e
            .wait
            .max(config.control.heartbeat_timeout + config.timing.grace_period),
        _ => JOIN_GRACE + config.timing.grace_period,
    }
}

/// An elastic job's coordinator grows it by the pods it lacks: arrivals are gathered for the
/// elastic wait, and the trainers given their checkpoint window (none without a checkpoint
/// signal) before the restart.
fn growing(config: &Config, role: &ControlRole, members: usize) -> Option<control::Growing> {
    let elastic = config.control.elastic?;
    if !matches!(role, ControlRole::Coordinator { .. }) {
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
fn growth_of(
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

/// How long the Job's record of the restart count is waited for, read or written.
const JOB_RECORD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a preempted attempt's end waits for its record on the Job: the pod is within its
/// grace period.
const PREEMPTION_RECORD_WAIT: Duration = Duration::from_secs(2);

/// The job's restart count as kept on its Job object, where no batch system's label keeps it
/// (`coordination::job_keeping_the_count`): read by a coordinator at its first attempt,
/// written at every start and at a preemption's end.
struct JobRecord {
    api: ApiServer,
    job: String,
}

impl JobRecord {
    fn of(config: &Config, api: Option<&ApiServer>) -> Option<JobRecord> {
        Some(JobRecord {
            api: api?.clone(),
            job: coordination::job_keeping_the_count(config)?.to_string(),
        })
    }

    /// The count as the coordinator starts gathering, with what the Job records: the epoch
    /// it last started (so the next is one more: the job was restarted whole since, or is
    /// being restarted in place now) and its preemptions. Unreadable: this launcher's own
    /// count stands, said in the log.
    async fn count_from(&self, count: Count) -> Count {
        let job = &self.job;
        info!(
            "reading the restart count recorded on Job {job} (at most {} s)",
            JOB_RECORD_TIMEOUT.as_secs()
        );
        let read = peers::kubernetes::recorded_restarts(&self.api, job);
        let why = match timeout(JOB_RECORD_TIMEOUT, read).await {
            Ok(Ok(Some(record))) => {
                let (epoch, ..) = record;
                let recorded = count.after_record(record);
                if recorded.next_epoch > count.next_epoch {
                    info!(
                        "Job {job} records restart epoch {epoch} as started: the job was restarted whole since, so the restart count goes on at {}",
                        recorded.next_epoch
                    );
                }
                return recorded;
            }
            Ok(Ok(None)) => return count,
            Ok(Err(why)) => {
                format!("{why} (grant `get` and `patch` on it, docs/manifests-and-rbac.md)")
            }
            Err(_) => format!("no answer in {} s", JOB_RECORD_TIMEOUT.as_secs()),
        };
        warn!("reading the restart count recorded on Job {job}: {why}: the count starts from this pod's own");
        count
    }

    /// Records that restart epoch `epoch` started, after `preemptions` (`grows` of them): in
    /// the background, bounded, a failure said in the log (the job goes on; only a whole-Job
    /// restart would then start the count again).
    fn write(&self, record: Recorded) -> tokio::task::JoinHandle<()> {
        let (api, job) = (self.api.clone(), self.job.clone());
        let (epoch, ..) = record;
        tokio::spawn(async move {
            let write = peers::kubernetes::record_restarts(&api, &job, record);
            let why = match timeout(JOB_RECORD_TIMEOUT, write).await {
                Ok(Ok(())) => return,
                Ok(Err(why)) => format!("{why} (grant `patch` on it, docs/manifests-and-rbac.md)"),
                Err(_) => format!("no answer in {} s", JOB_RECORD_TIMEOUT.as_secs()),
            };
            warn!("recording restart epoch {epoch} on Job {job}: {why}: a whole-Job restart would start the restart count at 0");
        })
    }
}

/// "pod p-1 on node n7 (trainer id 1 of 3)": how this launcher names itself to the others, so
/// that the first failure's line on every pod says where it happened (the node from NODE_NAME,
/// which the downward API's spec.nodeName gives and `manifest` sets).
fn who(pod: &str, plan: &Plan, config: &Config) -> String {
    format!("pod {pod}{} ({})", on_node(), ranks_line(plan, config))
}

/// How often this pod's trainer's progress is looked at (zero with hang detection off).
fn progress_check(config: &Config) -> Duration {
    config
        .timing
        .hang_timeout
        .map_or(Duration::ZERO, |timeout| {
            progress::check_every(progress::Limits {
                timeout,
                first_window: config.timing.hang_first_window,
            })
        })
}

/// " on node n7", from NODE_NAME; nothing without it.
fn on_node() -> String {
    node_name().map_or(String::new(), |n| format!(" on node {n}"))
}

/// This pod's node (NODE_NAME), when the downward API gives it.
fn node_name() -> Option<String> {
    std::env::var(NODE_NAME).ok().filter(|n| !n.is_empty())
}

/// The variable of this pod's node name (downward API `spec.nodeName`).
pub const NODE_NAME: &str = "NODE_NAME";

/// "trainer id 1 of 3, pserver id 1 of 3": the roles this pod has, nothing for the others.
/// The trainers are the plan's (an elastic job's epoch may have fewer than the pod count).
fn ranks_line(plan: &Plan, config: &Config) -> String {
    let mut parts = Vec::new();
    let ids: Vec<usize> = plan
        .trainers()
        .filter_map(|p| p.place.as_ref().map(|place| place.trainer_id))
        .collect();
    match (plan.trainer_id, ids.first(), ids.last()) {
        (Some(_), Some(first), Some(last)) if ids.len() > 1 => {
            let world = plan.num_gradient_servers * config.topology.processes.per_pod;
            parts.push(format!("trainer ids {first}-{last} of {world}"));
        }
        (Some(id), _, _) => parts.push(format!("trainer id {id} of {}", plan.num_gradient_servers)),
        (None, _, _) => {}
    }
    if let Some(id) = plan.pserver_id {
        parts.push(format!("pserver id {id} of {}", config.topology.pservers));
    }
    parts.join(", ")
}

/// Discovery, ended early by a stop signal when there is a supervisor (`run`); HUP too: a
/// pod being reconfigured should not start with the old settings.
async fn wait_for_peers(
    config: &Config,
    supervisor: Option<&mut Supervisor>,
    round: peers::Round<'_>,
) -> Result<peers::Found, Error> {
    interruptible(
        supervisor,
        "waiting for the job's pods",
        Breaks::AlsoHup,
        peers::discover(config, round),
    )
    .await?
}

/// Runs file work (globs over shared filesystems, copies of data) on the blocking pool, so that
/// the only runtime thread keeps handling signals: a TERM during a long copy ends it at once.
async fn off_thread<T: Send + 'static>(
    supervisor: Option<&mut Supervisor>,
    doing: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let work = tokio::task::spawn_blocking(work);
    let joined = interruptible(supervisor, doing, Breaks::StopOnly, work).await?;
    joined.map_err(|e| Error::io(format!("{doing} failed"), e.into()))
}

/// What besides its work and a stop signal ends a wait in which no child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaks {
    /// Nothing else (waiting for the job's verdict, its end, a file's work).
    StopOnly,
    /// SIGHUP too: before the attempt, a reload asked of a pod that is still gathering stops
    /// it, so it is not started with the old settings.
    AlsoHup,
    /// The attempt's loss too: once the attempt is lost nothing more is started in it (the
    /// workspace prepared, the peers checked, then the trainer).
    AlsoLoss,
}

/// Waits for `work` while no child runs: a stop signal (and what `breaks` says) ends the wait
/// with an error; other signals have no child to go to, and are logged.
async fn interruptible<T>(
    supervisor: Option<&mut Supervisor>,
    doing: &str,
    breaks: Breaks,
    work: impl std::future::Future<Output = T>,
) -> Result<T, Error> {
    let Some(supervisor) = supervisor else {
        return Ok(work.await);
    };
    tokio::pin!(work);
    // What the wait is not about (a peer lost, the job done): kept for whoever waits next, since
    // the supervisor reports each once.
    let mut held = Vec::new();
    let ended = loop {
        tokio::select! {
            done = &mut work => break Ok(done),
            event = supervisor.next_event() => match event {
                Event::Signal(sig) if is_stop_signal(sig) || (breaks == Breaks::AlsoHup && sig == nix::libc::SIGHUP) => {
                    break Err(Error::stopped(sig, &format!(" while {doing}")));
                }
                // After the job's end (a split pserver pod's trainers all done), as the attempt
                // would have taken them: the end first.
                Event::PeerLost(loss)
                    if breaks == Breaks::AlsoLoss
                        && !held.iter().any(|e| matches!(e, Event::JobDone(_))) =>
                {
                    info!("{}: stopped {doing}, nothing more is started", loss.reason);
                    break Err(Error::PeerLost {
                        reason: loss.reason,
                        stopped: "nothing (its trainer had not started)".into(),
                    });
                }
                Event::Signal(sig) => {
                    info!("ignoring {} while {doing}: no child to forward it to yet", signal_name(sig))
                }
                event @ (Event::Exited { .. } | Event::PeerLost(_) | Event::JobDone(_)) => {
                    held.push(event)
                }
            },
        }
    };
    supervisor.requeue(held);
    ended
}

/// The files matched by --train-files / --test-files, sorted; none matched is an error.
fn input_files(config: &Config) -> Result<InputFiles, ConfigError> {
    let expand = |pattern: &Option<String>,
                  variable: crate::cli::Opt|
     -> Result<Option<Vec<PathBuf>>, ConfigError> {
        let Some(pattern) = pattern else {
            return Ok(None);
        };
        let paths = glob::glob(pattern)
            .map_err(|e| ConfigError::new(variable, pattern, format!("a glob pattern ({e})")))?;
        let mut files: Vec<PathBuf> = paths
            .filter_map(Result::ok)
            .filter(|p| p.is_file())
            .collect();
        if files.is_empty() {
            return Err(ConfigError::new(
                variable,
                pattern,
                "a pattern that matches at least one file",
            ));
        }
        files.sort();
        Ok(Some(files))
    };
    Ok(InputFiles {
        train: expand(&config.workspace.train_files, crate::config::TRAIN_FILES)?,
        test: expand(&config.workspace.test_files, crate::config::TEST_FILES)?,
    })
}

fn spawn(sup: &mut Supervisor, spec: &ProcessSpec) -> Result<usize, Error> {
    sup.spawn(SpawnSpec {
        label: spec.name.clone(),
        argv: &spec.argv,
        env: &spec.env,
        cwd: &spec.cwd,
        output: Output::Prefixed {
            log: spec.log.clone(),
        },
    })
}

/// Writes `name` in `dir` whole (a temporary file renamed over it), and not at all when it
/// already holds `text`: a Python starting meanwhile, in a pod sharing the directory, never reads
/// half of it.
fn write_whole(dir: &std::path::Path, name: &str, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    let temporary = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, &path)
}

/// The trainer's progress file as an absolute path (the trainer runs in the work directory), its
/// directory made and the file creatable (`create`; `plan` touches nothing): a path that cannot
/// be is bad input, said before any network use; beside it, the `sitecustomize.py` that lets a
/// Python trainer be asked for its stacks.
fn progress_file(
    workspace: &mut crate::config::Workspace,
    create: bool,
) -> Result<(), ConfigError> {
    let path = &workspace.progress_file;
    let bad = |e: std::io::Error| {
        ConfigError::new(
            crate::config::PROGRESS_FILE,
            &path.display().to_string(),
            format!("a file the launcher can create, its directory made if missing ({e})"),
        )
    };
    let absolute = std::path::absolute(path).map_err(bad)?;
    if create {
        if let Some(dir) = absolute.parent() {
            std::fs::create_dir_all(dir).map_err(bad)?;
        }
        // Not a FIFO or a device, which opening could block on.
        if let Ok(meta) = std::fs::metadata(&absolute) {
            if !meta.is_file() {
                let why = std::io::Error::other("it exists and is not a regular file");
                return Err(bad(why));
            }
        }
        // Opened to append, never written: an existing file keeps its time.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&absolute)
            .map_err(bad)?;
        let dir = progress::stack_dump_dir(&absolute);
        write_whole(&dir, "sitecustomize.py", progress::SITECUSTOMIZE).map_err(bad)?;
    }
    workspace.progress_file = absolute;
    Ok(())
}

/// Carries out the lifecycle's commands (spawn, signal, probe, timers, stop) and feeds it what
/// happened, until it finishes. All decisions are the lifecycle's; this only does I/O.
async fn drive(
    sup: &mut Supervisor,
    plan: &Plan,
    config: &Config,
    channel: Option<&Channel>,
    who: &str,
) -> Result<Outcome, Error> {
    let label = |role| {
        plan.process(role)
            .map(|p| p.name.clone())
            .unwrap_or_default()
    };
    let trainers: Vec<&ProcessSpec> = plan.trainers().collect();
    let several = trainers.len() > 1;
    // Each of several processes is named by its place in the job, where its end or hang is told.
    let process_name = |spec: &ProcessSpec| match (&spec.place, several) {
        (Some(place), true) => place.named(),
        _ => label(Role::Trainer),
    };
    let trainer_label = match (trainers.first(), trainers.last()) {
        (Some(first), Some(last)) if several => {
            let id = |spec: &ProcessSpec| spec.place.as_ref().map_or(0, |p| p.trainer_id);
            format!("trainers {}-{}", id(first), id(last))
        }
        _ => label(Role::Trainer),
    };
    let trainer = !trainers.is_empty();
    // Collective ranks wait for one another at every step: a pod is judged by any of them.
    let ranks = match config.topology.protocol {
        Protocol::Collective => progress::Ranks::Lockstep,
        _ => progress::Ranks::Alone,
    };
    let pod_label = trainer_label.clone();
    let (mut machine, first) = Lifecycle::start(Setup {
        pserver: plan.process(Role::Pserver).is_some(),
        trainer,
        gate_on_pservers: trainer && !plan.pserver_endpoints.is_empty(),
        protocol: config.topology.protocol,
        linger: config.timing.linger,
        trainer_label,
        trainers: trainers.len(),
        trainer_names: match several {
            true => trainers.iter().map(|spec| process_name(spec)).collect(),
            false => Vec::new(),
        },
        pserver_label: label(Role::Pserver),
        // A pserver-only pod too: preempted, it serves the job's checkpoint through its window.
        checkpoint: config.timing.checkpoint(),
        waits_for_the_job: !trainer && channel.is_some(),
    });
    let mut commands: VecDeque<Command> = first.into();
    // The supervisor's child index of each started process: its role and local rank.
    let mut children: Vec<(Role, usize, usize)> = Vec::new();
    let mut probe: Option<BoxFuture<'static, Input>> = None;
    let mut linger: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut stack_dump: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut window: Option<Pin<Box<tokio::time::Sleep>>> = None;
    // The job asks for a checkpoint (a member is preempted): at most once an attempt.
    let mut checkpoint_asked = channel
        .filter(|_| config.timing.checkpoint().is_some())
        .map(Channel::checkpoint_asked);
    // While the trainer runs and a hang timeout is set: its processes' clocks, the next look.
    let mut watch: Option<HangWatch> = None;
    loop {
        while let Some(command) = commands.pop_front() {
            let input = match command {
                Command::Spawn(role) => {
                    // The progress files' watch starts before the trainer: its first look is
                    // the time an earlier attempt left.
                    let limits = config.timing.hang_timeout.map(|timeout| progress::Limits {
                        timeout,
                        first_window: config.timing.hang_first_window,
                    });
                    let specs: Vec<&ProcessSpec> = match role {
                        Role::Trainer => trainers.clone(),
                        Role::Pserver => plan.process(role).into_iter().collect(),
                    };
                    let mut failed = None;
                    let mut watched = Vec::new();
                    for (local, spec) in specs.into_iter().enumerate() {
                        let file = limits.filter(|_| role == Role::Trainer).map(|limits| {
                            let every = progress::check_every(limits);
                            let path = spec.place.as_ref().map_or_else(
                                || config.workspace.progress_file.clone(),
                                |place| place.progress_file.clone(),
                            );
                            ProgressFileClock::start(path, every)
                        });
                        match spawn(sup, spec) {
                            Ok(child) => {
                                children.push((role, local, child));
                                if let Some(file) = file {
                                    let output = sup.output_clock(child);
                                    watched.push(Watched {
                                        local,
                                        ended: None,
                                        trainer_id: spec
                                            .place
                                            .as_ref()
                                            .filter(|_| several)
                                            .map(|p| p.trainer_id as u32),
                                        output,
                                        file,
                                        label: process_name(spec),
                                    });
                                }
                            }
                            Err(error) => {
                                failed = Some(Input::SpawnFailed { role, local, error });
                                break;
                            }
                        }
                    }
                    if let (Some(limits), false) = (limits, watched.is_empty()) {
                        let margin = control::progress_margin(
                            config.control.heartbeat_timeout,
                            progress_check(config),
                        );
                        watch = Some(HangWatch::new(
                            watched,
                            limits,
                            margin,
                            (ranks, pod_label.clone()),
                        ));
                    }
                    failed
                }
                Command::Forward(sig) => {
                    sup.forward(sig);
                    None
                }
                Command::ProbePservers => {
                    let endpoints = plan.pserver_endpoints.clone();
                    probe = Some(probe_pservers(endpoints, config.timing.pserver_timeout).boxed());
                    None
                }
                Command::Linger(how_long) => {
                    linger = Some(Box::pin(sleep(how_long)));
                    None
                }
                Command::TellHang(reason) => {
                    if let Some(channel) = channel {
                        channel.tell_hang(&format!("{who} at {}: {reason}", now_utc()));
                    }
                    None
                }
                Command::TellFailed {
                    reason,
                    restartable,
                } => {
                    match channel {
                        Some(channel) => {
                            let said = format!("{who} at {}: {reason}", now_utc());
                            // Heard by the job before the siblings' stop can fail another pod
                            // first (the runtime has one thread: a frame queued is not yet
                            // sent). What happens meanwhile, a stop signal above all, goes to
                            // the lifecycle as it comes, not left for the stop to misread.
                            let told = channel.failed(&said, restartable, false, TOLD_BEFORE_STOP);
                            tokio::select! {
                                _ = told => None,
                                event = sup.next_event() => input_of(event, &children, &mut watch),
                            }
                        }
                        None => None,
                    }
                }
                Command::TellPreempted(reason) => {
                    if let Some(channel) = channel {
                        channel.preempted(&format!("{who} at {}: {reason}", now_utc()));
                    }
                    None
                }
                Command::TellLeaving(reason) => {
                    if let Some(channel) = channel {
                        channel.leaving(&format!("{who} at {}: {reason}", now_utc()));
                    }
                    None
                }
                Command::AskCheckpoint => {
                    let trainer: Vec<usize> = children
                        .iter()
                        .filter(|(role, _, _)| *role == Role::Trainer)
                        .map(|(_, _, child)| *child)
                        .collect();
                    let signal = config.timing.checkpoint_signal.unwrap_or(0);
                    match sup.signal_handlers(&trainer, signal) {
                        0 => Some(Input::CheckpointUnheeded),
                        _ => None,
                    }
                }
                Command::Window(how_long) => {
                    window = Some(Box::pin(sleep(how_long)));
                    None
                }
                Command::DumpStacks => {
                    watch = None;
                    let trainer: Vec<usize> = children
                        .iter()
                        .filter(|(role, _, _)| *role == Role::Trainer)
                        .map(|(_, _, child)| *child)
                        .collect();
                    sup.signal(&trainer, progress::STACK_SIGNAL);
                    stack_dump = Some(Box::pin(sleep(lifecycle::STACK_DUMP_WAIT)));
                    None
                }
                Command::Stop { roles, signal } => {
                    probe = None;
                    linger = None;
                    stack_dump = None;
                    window = None;
                    watch = None;
                    let stopping: Vec<usize> = children
                        .iter()
                        .filter(|(role, _, _)| roles.contains(role))
                        .map(|(_, _, child)| *child)
                        .collect();
                    sup.stop(&stopping, signal).await;
                    Some(Input::Stopped)
                }
                Command::Log(line) => {
                    info!("{line}");
                    None
                }
                Command::TellDone => {
                    if let Some(channel) = channel {
                        channel.done();
                    }
                    None
                }
                Command::Finish(result) => return result,
            };
            if let Some(input) = input {
                commands.extend(machine.step(input));
            }
        }
        let input = tokio::select! {
            // What happened to the processes first: a trainer's exit already queued is seen
            // before a timer or a hang check says anything of it.
            biased;
            event = sup.next_event() => match input_of(event, &children, &mut watch) {
                Some(input) => input,
                None => continue,
            },
            input = or_never(probe.as_mut()), if probe.is_some() => {
                probe = None;
                input
            }
            _ = or_never(linger.as_mut()), if linger.is_some() => {
                linger = None;
                Input::LingerOver
            }
            _ = or_never(stack_dump.as_mut()), if stack_dump.is_some() => {
                stack_dump = None;
                Input::DumpOver
            }
            _ = or_never(window.as_mut()), if window.is_some() => {
                window = None;
                Input::WindowOver
            }
            reason = or_never(checkpoint_asked.as_mut()), if checkpoint_asked.is_some() => {
                checkpoint_asked = None;
                Input::CheckpointAsked(reason)
            }
            hung = HangWatch::next_hang_of(watch.as_mut(), channel), if watch.is_some() => {
                watch = None;
                Input::Hung(hung)
            }
        };
        commands.extend(machine.step(input));
    }
}

/// What a supervisor's event means to the lifecycle; None for a child it did not start. A
/// trainer process that ended is judged no more (its siblings are, and the pserver may linger).
fn input_of(
    event: Event,
    children: &[(Role, usize, usize)],
    watch: &mut Option<HangWatch>,
) -> Option<Input> {
    Some(match event {
        Event::Signal(sig) => Input::Signal(sig),
        Event::Exited { child, ended } => {
            let &(role, local, _) = children.iter().find(|(_, _, c)| *c == child)?;
            if role == Role::Trainer {
                if let Some(w) = watch.as_mut() {
                    w.ended(local);
                    if w.processes.iter().all(|p| p.ended.is_some()) {
                        *watch = None;
                    }
                }
            }
            Input::Exited { role, local, ended }
        }
        Event::PeerLost(Loss { reason, hang: true }) => Input::JobHung(reason),
        Event::PeerLost(Loss { reason, .. }) => Input::PeerLost(reason),
        Event::JobDone(done) => Input::JobDone(done),
    })
}

/// The shell's side of hang detection for the pod's trainer processes: looks at each one's
/// last output and progress file's time every `check_every`, and asks the rule
/// (`progress::judge`).
struct HangWatch {
    processes: Vec<Watched>,
    started: std::time::Instant,
    limits: progress::Limits,
    every: tokio::time::Interval,
    /// How much older a process that writes no step must be to be the one reported.
    margin: Duration,
    /// How the processes are judged, and the pod's processes' name ("trainers 2-3") for a
    /// hang judged in lockstep, which is the pod's.
    ranks: progress::Ranks,
    pod_label: String,
}

/// One trainer process under watch.
struct Watched {
    local: usize,
    /// When it ended, in a lockstep pod (its siblings are judged from then); an ended
    /// process of a pod judged alone leaves the watch.
    ended: Option<std::time::Instant>,
    /// Its trainer id, when the pod runs several.
    trainer_id: Option<u32>,
    output: OutputClock,
    file: ProgressFileClock,
    label: String,
}

/// When the progress file last changed, noted by a thread of its own: a stat that hangs on a
/// stalled network filesystem must not stop the launcher's only runtime thread (heartbeats,
/// signals), and counts as no progress. Any change of the file's time is progress, timed by
/// this machine's clock: the file server's clock may be ahead or behind.
struct ProgressFileClock {
    changed: OutputClock,
    /// The step its last change said (`progress::step_of`); `NO_STEP` when none.
    step: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

const NO_STEP: u64 = u64::MAX;
/// How much of the progress file's end is read for its step: a line, with room to spare.
const STEP_READ: u64 = 4096;

impl ProgressFileClock {
    /// Starts looking, every `every`, from the file's time now (taken before the trainer
    /// starts, so that an earlier attempt's file is no progress).
    fn start(path: PathBuf, every: Duration) -> ProgressFileClock {
        let changed = OutputClock::new();
        let step = Arc::new(AtomicU64::new(NO_STEP));
        let stop = Arc::new(AtomicBool::new(false));
        let (clock, said, stopped) = (changed.clone(), step.clone(), stop.clone());
        // Without a thread (the pod's process limit), the file is not watched: output still is.
        let looked = std::thread::Builder::new().spawn(move || {
            let time_of = || std::fs::metadata(&path).and_then(|m| m.modified()).ok();
            let mut last = time_of();
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(every);
                let now = time_of();
                if now.is_some() && now != last {
                    clock.now();
                    last = now;
                    // Read between the writer's truncation and its write, the file says
                    // nothing: the step it said before stands (a touch-only file, or one with
                    // no number, keeps none; its time alone is progress).
                    if let Some(step) = step_in(&path) {
                        said.store(step, Ordering::Relaxed);
                    }
                }
            }
        });
        if let Err(e) = looked {
            warn!("cannot watch the progress file ({e}): the trainer's output alone shows its progress");
        }
        ProgressFileClock {
            changed,
            step,
            stop,
        }
    }

    /// The step the file last said, if a number.
    fn step(&self) -> Option<u64> {
        Some(self.step.load(Ordering::Relaxed)).filter(|s| *s != NO_STEP)
    }
}

/// The step at the end of the progress file: its last `STEP_READ` bytes are read, however
/// long the file has grown (a trainer may append a line a step).
fn step_in(path: &std::path::Path) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(STEP_READ)))
        .ok()?;
    let mut tail = Vec::new();
    file.take(STEP_READ).read_to_end(&mut tail).ok()?;
    progress::step_of(&String::from_utf8_lossy(&tail))
}

impl Drop for ProgressFileClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl HangWatch {
    fn new(
        processes: Vec<Watched>,
        limits: progress::Limits,
        margin: Duration,
        (ranks, pod_label): (progress::Ranks, String),
    ) -> HangWatch {
        let mut every = tokio::time::interval(progress::check_every(limits));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        HangWatch {
            processes,
            started: std::time::Instant::now(),
            limits,
            every,
            margin,
            ranks,
            pod_label,
        }
    }

    /// A process ended: judged no more, nor reported; in lockstep its end stays the pod's
    /// progress (`progress::ended`).
    fn ended(&mut self, local: usize) {
        match self.ranks {
            progress::Ranks::Alone => self.processes.retain(|p| p.local != local),
            progress::Ranks::Lockstep => {
                let now = std::time::Instant::now();
                for process in self.processes.iter_mut().filter(|p| p.local == local) {
                    process.ended.get_or_insert(now);
                }
            }
        }
    }

    /// The reason once a trainer process of `watch` is judged hung; never without one.
    async fn next_hang_of(watch: Option<&mut HangWatch>, channel: Option<&Channel>) -> String {
        match watch {
            Some(watch) => watch.next_hang(channel).await,
            None => std::future::pending().await,
        }
    }

    /// Resolves with the reason once a trainer process is judged hung: the one whose progress
    /// is oldest is judged first. Each look is also reported to the job's channel (the pod's
    /// process furthest behind: its step and its last progress), whose coordinator names the
    /// rank a hang points at.
    async fn next_hang(&mut self, channel: Option<&Channel>) -> String {
        loop {
            self.every.tick().await;
            let now = std::time::Instant::now();
            let looks: Vec<(progress::Observed, &Watched)> = self
                .processes
                .iter()
                .map(|process| {
                    let seen = progress::Observed {
                        started: self.started,
                        now,
                        last_output: process.output.last(),
                        file_written: process.file.changed.last(),
                    };
                    let seen = match process.ended {
                        Some(at) => progress::ended(seen, at),
                        None => seen,
                    };
                    (seen, process)
                })
                .collect();
            let last =
                |seen: &progress::Observed| progress::last_progress(seen).0.unwrap_or(self.started);
            // The process furthest behind, reported whole (its own step, time and id), of
            // those still running.
            let running: Vec<&(progress::Observed, &Watched)> =
                looks.iter().filter(|(_, p)| p.ended.is_none()).collect();
            let marks: Vec<(Option<u64>, std::time::Instant)> = running
                .iter()
                .map(|(seen, p)| (p.file.step(), last(seen)))
                .collect();
            let behind = progress::furthest_behind(&marks, self.margin, self.ranks)
                .map(|(i, step)| (running[i], step));
            if let (Some(channel), Some(((seen, process), step))) = (channel, behind) {
                channel.report_progress(step, Instant::from_std(last(seen)), process.trainer_id);
            }
            let seen: Vec<progress::Observed> = looks.iter().map(|(seen, _)| *seen).collect();
            if let Some((i, mut hung)) = progress::judge_pod(self.limits, self.ranks, &seen) {
                // In lockstep the pod's processes were judged together: said of them all.
                let label = match (self.ranks, seen.len()) {
                    (progress::Ranks::Lockstep, 2..) => {
                        hung.by = match hung.by {
                            "output" => "their output",
                            _ => "their progress files",
                        };
                        &self.pod_label
                    }
                    _ => &looks[i].1.label,
                };
                return hung_reason(label, &hung);
            }
        }
    }
}

/// "trainer-0 made no progress for 31 s (...)": the line a hang is reported with.
fn hung_reason(label: &str, hung: &progress::Hung) -> String {
    use crate::config::{HANG_FIRST_WINDOW, HANG_TIMEOUT};
    if hung.never {
        format!(
            "{label} made no progress in the {} s after its start ({HANG_FIRST_WINDOW}): no output, no write to its progress file",
            hung.limit.as_secs()
        )
    } else {
        format!(
            "{label} made no progress for {} s ({HANG_TIMEOUT} = {} s): nothing new from {}",
            hung.silent.as_secs(),
            hung.limit.as_secs(),
            hung.by
        )
    }
}

/// Probes every endpoint until all accept a TCP connection, or the limit passes.
async fn probe_pservers(endpoints: Vec<SocketAddr>, limit: Duration) -> Input {
    let started = Instant::now();
    let mut waiting = endpoints.clone();
    let mut pause = PROBE_PAUSE_FIRST;
    info!(
        "waiting for {} pserver endpoints to accept connections",
        waiting.len()
    );
    loop {
        tokio::select! {
            refused = unreachable(&waiting) => {
                waiting = refused;
                if waiting.is_empty() {
                    info!("all {} pserver endpoints are up after {:.2} s", endpoints.len(), started.elapsed().as_secs_f64());
                    return Input::PserversUp;
                }
                sleep(pause).await;
                pause = (pause * 2).min(PROBE_PAUSE_LAST);
            }
            _ = sleep_until(started + limit) => {
                return Input::PserversTimedOut {
                    waiting: waiting.iter().map(ToString::to_string).collect(),
                    total: endpoints.len(),
                    limit_s: limit.as_secs(),
                };
            }
        }
    }
}

/// The endpoints that do not accept a connection right now, probed concurrently.
async fn unreachable(endpoints: &[SocketAddr]) -> Vec<SocketAddr> {
    let probes = endpoints.iter().map(|&ep| async move {
        let up = matches!(
            timeout(CONNECT_TIMEOUT, TcpStream::connect(ep)).await,
            Ok(Ok(_))
        );
        (!up).then_some(ep)
    });
    futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect()
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
            crate::protocol::tests::config(|a| {
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
        assert_eq!(join_grace(&config("120", true), true), s(120));
        // Shorter than a member's stop: the stop.
        assert_eq!(join_grace(&config("5", true), true), s(10 + 20));
        let usual = JOIN_GRACE + s(20);
        assert_eq!(join_grace(&config("120", true), false), usual);
        assert_eq!(join_grace(&config("120", false), true), usual);
        let elastic = config("120", true);
        let coordinator = ControlRole::Coordinator {
            listen: "10.0.0.1:6171".parse().unwrap(),
        };
        let follower = ControlRole::Follower {
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

    /// The JOB_PATH warning compares paths as written, `.` and `..` resolved: a progress file
    /// reached through them is still under the shared directory, a sibling is not.
    #[test]
    fn paths_compare_with_dots_resolved() {
        let under = |file: &str, dir: &str| {
            lexically(std::path::Path::new(file)).starts_with(lexically(std::path::Path::new(dir)))
        };
        assert!(under("/mnt/job/./x/../progress", "/mnt/job"));
        assert!(under("/mnt/other/../job/progress", "/mnt/job/."));
        assert!(!under("/mnt/job/../jobs/progress", "/mnt/job"));
        assert!(!under("/mnt/jobpath/progress", "/mnt/job"));
    }

    /// The pod's last line: its own failure names the pod and when, after "job stopped: ";
    /// after the job's first cause when another pod's (the coordinator's word may be this
    /// pod's own, cut to fit a frame: then it is this pod's); a success, a loss told by
    /// another, and a stop signal are left as they are.
    #[test]
    fn the_pods_last_line_names_the_jobs_first_cause_first() {
        let failed = || Ok(Outcome::new(3, "trainer-0 exited with status 3"));
        let who = "pod p-1 at 2026-11-26T10:00:00Z";
        let said = format!("{who}: trainer-0 exited with status 3");
        let line = |result, cause: Option<&str>| {
            for_the_job(result, who, &said, cause.map(String::from)).reason
        };
        assert_eq!(
            line(failed(), None),
            format!("{JOB_STOPPED}{who}: trainer-0 exited with status 3")
        );
        assert_eq!(
            line(failed(), Some("pod p-2 at t: trainer-0 exited with status 1")),
            format!("{JOB_STOPPED}pod p-2 at t: trainer-0 exited with status 1; on this pod: trainer-0 exited with status 3")
        );
        assert_eq!(
            line(failed(), Some(&said[..20])),
            format!("{JOB_STOPPED}{who}: trainer-0 exited with status 3"),
            "this pod's own cause, cut"
        );
        let success = Ok(Outcome::new(exit::SUCCESS, "trainer exited with status 0"));
        assert_eq!(line(success, Some("x")), "trainer exited with status 0");
        let told = Ok(Outcome::new(78, format!("{JOB_STOPPED}pod p-2: lost")));
        assert_eq!(line(told, None), format!("{JOB_STOPPED}pod p-2: lost"));
        let stopped = Err(Error::Stopped {
            signal: nix::libc::SIGTERM,
            doing: "training".into(),
        });
        assert!(!line(stopped, Some("pod p-2: x")).starts_with(JOB_STOPPED));
    }

    /// After restarts the outcome says how many; a first run's says nothing of them.
    /// The count moves on after an attempt: a failure spends (no free restart more), a
    /// preemption is one more free restart, a growth one more free restart that is a grow (a
    /// grow flag without a free end counts nothing).
    #[test]
    fn the_count_after_an_attempt_counts_grows_among_the_free_restarts() {
        let count = |c: Count| (c.next_epoch, c.preemptions, c.grows);
        let rows = [
            ((false, false), (4, 2, 1)),
            ((true, false), (4, 3, 1)),
            ((true, true), (4, 3, 2)),
            ((false, true), (4, 2, 1)),
        ];
        for ((preempted, grown), expected) in rows {
            let after = Count::after_attempt((3, 2, 1), preempted, grown);
            assert_eq!(count(after), expected, "{preempted} {grown}");
        }
    }

    /// What the Job records moves a fresh count on: the next epoch one more than the one
    /// recorded, the most preemptions and grows either knows, no more grows than preemptions
    /// and no more preemptions than restarts (a record anyone may edit).
    #[test]
    fn the_count_goes_on_from_what_the_job_records() {
        let count = |c: Count| (c.next_epoch, c.preemptions, c.grows);
        let fresh = Count {
            next_epoch: 0,
            preemptions: 0,
            grows: 0,
        };
        assert_eq!(count(fresh.after_record((4, 2, 1))), (5, 2, 1));
        assert_eq!(count(fresh.after_record((4, 2, 9))), (5, 2, 2));
        assert_eq!(count(fresh.after_record((1, 9, 9))), (2, 2, 2));
        let known = Count {
            next_epoch: 7,
            preemptions: 3,
            grows: 2,
        };
        assert_eq!(count(known.after_record((4, 1, 0))), (7, 3, 2));
    }

    #[test]
    fn an_outcome_after_restarts_says_how_many() {
        let outcome = || Outcome::new(0, "trainer exited with status 0");
        assert_eq!(
            after_restarts(outcome(), 0).reason,
            "trainer exited with status 0"
        );
        assert_eq!(
            after_restarts(outcome(), 1).reason,
            "trainer exited with status 0 (after 1 restart of the job)"
        );
    }

    /// A failed launcher waits for the verdict as long as the others may take to stop their
    /// children and say so, a silent one's link judged, and a margin; an ending one, its grace
    /// and a round trip.
    #[test]
    fn the_verdict_is_waited_for_as_long_as_the_others_may_take() {
        let config = crate::protocol::tests::config(|args| {
            args.grace_period = Some("7".into());
            args.heartbeat_timeout = Some("11".into());
        });
        let limits = verdict_limits(&config);
        assert_eq!(limits.recoverable, Duration::from_secs(7 + 11 + 5));
        assert_eq!(limits.ending, Duration::from_secs(7 + 3));
    }

    /// Before a collective trainer starts, every other pod's trainer endpoint is checked: not
    /// this pod's own address (host network), not an IPv6 link-local one, and nothing for
    /// other protocols, without --check-peers, or on a pod without a trainer.
    #[test]
    fn the_peers_checked_are_the_other_pods_trainer_endpoints() {
        let entry = |name: &str, ip: &str| crate::plan::PodEntry {
            name: name.into(),
            ip: ip.parse().unwrap(),
            rank: 0,
            role: "both",
        };
        let pods = vec![
            entry("p-0", "10.0.0.1"),
            entry("p-1", "10.0.0.2"),
            entry("p-2", "10.0.0.1"),
            entry("p-3", "fe80::1"),
            entry("p-4", "10.0.0.3"),
        ];
        let plan = crate::plan::tests::plan_of(Vec::new(), pods, "10.0.0.1".parse().unwrap());
        let collective = |edit: fn(&mut JobArgs)| {
            crate::protocol::tests::config(|args| {
                args.protocol = Some("collective".into());
                args.entry = Some("python train.py".into());
                args.trainer_port = Some("6200".into());
                edit(args);
            })
        };
        let checked = peers_to_check(&plan, &collective(|_| {}));
        let expected: Vec<SocketAddr> = ["10.0.0.2:6200", "10.0.0.3:6200"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(checked, expected);
        let off = collective(|args| args.check_peers = Some("false".into()));
        assert!(peers_to_check(&plan, &off).is_empty());
        let v1 = crate::protocol::tests::config(|_| {});
        assert!(peers_to_check(&plan, &v1).is_empty());
        let mut pserver_only = plan.clone();
        pserver_only.trainer_id = None;
        assert!(peers_to_check(&pserver_only, &collective(|_| {})).is_empty());
    }

    /// A refusal is served for a heartbeat timeout and time to gather again, never past the
    /// pod's grace period less a margin (a stop meanwhile is not heard), 25 s at most.
    #[test]
    fn a_refusal_is_served_within_the_pods_grace_period() {
        let s = Duration::from_secs;
        let served = |heartbeat: &str, grace: Option<&str>| {
            refusal_served(&crate::protocol::tests::config(|args| {
                args.heartbeat_timeout = Some(heartbeat.into());
                args.pod_grace_period = grace.map(String::from);
            }))
        };
        assert_eq!(served("5", None), s(20));
        assert_eq!(served("10", None), s(25));
        assert_eq!(served("10", Some("10")), s(7));
        assert_eq!(served("5", Some("60")), s(20));
        assert_eq!(served("5", Some("2")), s(0));
    }

    /// A loss told while the attempt prepares (its workspace, the peer check) ends that step
    /// at once with the loss, so the trainer is never started in a lost attempt; a wait that
    /// is not the attempt's keeps the loss for the next one to see.
    #[tokio::test(flavor = "current_thread")]
    async fn a_loss_ends_the_steps_before_the_start_and_only_those() {
        let _reaping = crate::supervise::REAPING.lock().await;
        let mut sup = Supervisor::new(Signals::install().unwrap(), Duration::from_secs(1));
        let lost = || {
            futures::future::ready(Loss {
                reason: "peer pod p-2 was deleted".into(),
                hang: false,
            })
            .boxed()
        };
        sup.watch_peers(lost());
        let never = std::future::pending::<()>();
        let ended = timeout(
            Duration::from_secs(5),
            interruptible(
                Some(&mut sup),
                "checking the peers",
                Breaks::AlsoLoss,
                never,
            ),
        )
        .await
        .expect("the loss did not end the peer check");
        match ended {
            Err(Error::PeerLost { reason, .. }) => assert_eq!(reason, "peer pod p-2 was deleted"),
            other => panic!("not the loss: {other:?}"),
        }

        sup.watch_peers(lost());
        let waited = interruptible(
            Some(&mut sup),
            "waiting for the verdict",
            Breaks::StopOnly,
            sleep(Duration::from_millis(200)),
        )
        .await;
        assert!(waited.is_ok(), "{waited:?}");
        let kept = timeout(Duration::from_secs(1), sup.next_event()).await;
        assert!(
            matches!(kept, Ok(Event::PeerLost(_))),
            "the loss was not kept"
        );
        sup.finish();
    }
}
