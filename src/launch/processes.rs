//! Running an attempt's processes: the pure `Lifecycle` machine's commands carried out (spawn,
//! signal, probe the pservers, timers) and the supervisor's events fed back to it, with the
//! hang watch and the channel's word as inputs.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::net::TcpStream;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tracing::{info, warn};

use crate::config::Config;
use crate::control::{self, Channel};
use crate::error::Error;
use crate::exit::Outcome;
use crate::loss::Loss;
use crate::plan::{Plan, ProcessSpec, Role};
use crate::supervise::{or_never, Event, Output, SpawnSpec, Supervisor};
use crate::vocabulary::Protocol;

use super::hang_watch::{HangWatch, ProgressFileClock, Watched};
use super::lifecycle::{Command, Input, Lifecycle, Setup};
use super::setup::now_utc;
use super::{lifecycle, progress};

/// How long a pod whose trainer process failed waits for the job to have heard it before it
/// stops the siblings: a round trip to the coordinator, kept short (the siblings still run).
pub(super) const TOLD_BEFORE_STOP: Duration = Duration::from_millis(500);

/// Between probe rounds, doubling from the first to the last: pservers that start in a few
/// milliseconds are seen at once, slow ones cost a round of connects every 100 ms.
pub(super) const PROBE_PAUSE_FIRST: Duration = Duration::from_millis(2);

pub(super) const PROBE_PAUSE_LAST: Duration = Duration::from_millis(100);

pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The pod's grace period as its spec says (read with the pods): the children's follows it,
/// unless --grace-period or --pod-grace-period said otherwise.
pub(super) fn grace_from_the_pod(
    config: &mut Config,
    supervisor: &mut Supervisor,
    pod_grace: Duration,
) {
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

/// How often this pod's trainer's progress is looked at (zero with hang detection off).
pub(super) fn progress_check(config: &Config) -> Duration {
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

pub(super) fn spawn(sup: &mut Supervisor, spec: &ProcessSpec) -> Result<usize, Error> {
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

/// Carries out the lifecycle's commands (spawn, signal, probe, timers, stop) and feeds it what
/// happened, until it finishes. All decisions are the lifecycle's; this only does I/O.
pub(super) async fn drive(
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
pub(super) fn input_of(
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
        Event::PeerLost(Loss {
            reason, hang: true, ..
        }) => Input::JobHung(reason),
        Event::PeerLost(Loss { reason, .. }) => Input::PeerLost(reason),
        Event::JobDone(done) => Input::JobDone(done),
    })
}

/// Probes every endpoint until all accept a TCP connection, or the limit passes.
pub(super) async fn probe_pservers(endpoints: Vec<SocketAddr>, limit: Duration) -> Input {
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
pub(super) async fn unreachable(endpoints: &[SocketAddr]) -> Vec<SocketAddr> {
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
