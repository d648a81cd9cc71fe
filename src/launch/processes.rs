//! Running an attempt's processes: the pure `Lifecycle` machine's commands carried out (spawn,
//! signal, probe the pservers, timers) and the supervisor's events fed back to it, with the
//! hang watch and the channel's word as inputs.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::net::TcpStream;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tracing::info;

use crate::config::Config;
use crate::control::{self, Channel};
use crate::error::Error;
use crate::exit::Outcome;
use crate::loss::{Kind, Loss};
use crate::metrics::{self, serve::SharedBoard};
use crate::plan::{Plan, ProcessSpec, Role};
use crate::supervise::{or_never, Event, Output, SpawnSpec, Supervisor};
use crate::vocabulary::Protocol;

use super::hang_watch::{HangWatch, ProgressFileClock, Watched};
use super::setup::now_utc;
use crate::lifecycle::{Command, Input, Lifecycle, Setup};
use crate::{lifecycle, progress};

/// How long a pod whose trainer process failed waits for the job to have heard it before it
/// stops the siblings: a round trip to the coordinator, kept short (the siblings still run).
pub(super) const TOLD_BEFORE_STOP: Duration = Duration::from_millis(500);

/// Between probe rounds, doubling from the first to the last: pservers that start in a few
/// milliseconds are seen at once, slow ones cost a round of connects every 100 ms.
pub(super) const PROBE_PAUSE_FIRST: Duration = Duration::from_millis(2);

pub(super) const PROBE_PAUSE_LAST: Duration = Duration::from_millis(100);

pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a progress file is looked at for the metrics alone (no hang detection): a stat
/// a second, and a read of its end when it changed.
const METRICS_CHECK: Duration = Duration::from_secs(1);

/// How often this pod's trainer's progress is looked at (zero with hang detection off).
pub(super) fn progress_check(config: &Config) -> Duration {
    config
        .timing
        .hang_timeout
        .map_or(Duration::ZERO, |timeout| {
            progress::check_every(progress::Limits {
                timeout,
                first_window: config.timing.hang_first_window,
                output_counts: config.timing.hang_output_counts,
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
        unset: &spec.unset,
        inherits_settings: false,
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
    board: Option<&SharedBoard>,
) -> Result<Outcome, Error> {
    let trainers: Vec<&ProcessSpec> = plan.trainers().collect();
    let mut driver = Driver {
        several: trainers.len() > 1,
        trainers,
        sup,
        plan,
        config,
        channel,
        who,
        board,
        children: Vec::new(),
        probe: None,
        linger: None,
        stack_dump: None,
        window: None,
        // The job asks for a checkpoint (a member is preempted): at most once an attempt.
        checkpoint_asked: channel
            .filter(|_| config.timing.checkpoint().is_some())
            .map(Channel::checkpoint_asked),
        watch: None,
        stop_at: None,
        deletion: None,
    };
    let (mut machine, first) = Lifecycle::start(driver.setup());
    let mut commands: VecDeque<Command> = first.into();
    loop {
        while let Some(command) = commands.pop_front() {
            let input = match command {
                Command::Finish(result) => return result,
                // A stop that comes before the deletion's read (no checkpoint window, or a
                // trainer that does not handle its signal, so the window closes at once): the
                // read, bounded, is awaited, so that the stop runs within what the deletion
                // gives.
                command @ Command::Stop { .. } if driver.deletion.is_some() => {
                    if let Some(deleting) = driver.deletion_read_now().await {
                        commands.push_front(command);
                        for cut in machine.step(deleting).into_iter().rev() {
                            commands.push_front(cut);
                        }
                        continue;
                    }
                    driver.execute(command).await
                }
                command => driver.execute(command).await,
            };
            if let Some(input) = input {
                commands.extend(machine.step(input));
            }
        }
        if let Some(input) = driver.next_input().await {
            commands.extend(machine.step(input));
        }
    }
}

/// What carries out the lifecycle's commands for one attempt, and what it waits on.
struct Driver<'a> {
    sup: &'a mut Supervisor,
    plan: &'a Plan,
    config: &'a Config,
    channel: Option<&'a Channel>,
    /// How this pod is named in what it tells the job.
    who: &'a str,
    /// The metrics' board, which shows each trainer process's progress, when they are on.
    board: Option<&'a SharedBoard>,
    trainers: Vec<&'a ProcessSpec>,
    several: bool,
    /// The supervisor's child index of each started process: its role and local rank.
    children: Vec<(Role, usize, usize)>,
    probe: Option<BoxFuture<'static, Input>>,
    linger: Option<Pin<Box<tokio::time::Sleep>>>,
    stack_dump: Option<Pin<Box<tokio::time::Sleep>>>,
    window: Option<Pin<Box<tokio::time::Sleep>>>,
    checkpoint_asked: Option<BoxFuture<'static, String>>,
    /// While the trainer runs and a hang timeout is set: its processes' clocks, the next look.
    watch: Option<HangWatch>,
    /// When the first stop signal came: a deletion's grace period counts from then.
    stop_at: Option<Instant>,
    /// The read of this pod's deletion's grace period, begun at the stop signal.
    deletion: Option<BoxFuture<'static, Option<Duration>>>,
}

/// How long the read of the pod's own deletion may take: it runs within the deletion's grace
/// period, which may be the kubelet's shortest, 2 s.
const DELETION_READ_LIMIT: Duration = Duration::from_secs(1);

impl Driver<'_> {
    fn label(&self, role: Role) -> String {
        self.plan
            .process(role)
            .map(|p| p.name.clone())
            .unwrap_or_default()
    }

    /// Each of several processes is named by its place in the job, where its end or hang is
    /// told.
    fn process_name(&self, spec: &ProcessSpec) -> String {
        match (&spec.place, self.several) {
            (Some(place), true) => place.named(),
            _ => self.label(Role::Trainer),
        }
    }

    /// "trainers 0-7" for several, else the trainer's name.
    fn trainer_label(&self) -> String {
        match (self.trainers.first(), self.trainers.last()) {
            (Some(first), Some(last)) if self.several => {
                let id = |spec: &ProcessSpec| spec.place.as_ref().map_or(0, |p| p.trainer_id);
                format!("trainers {}-{}", id(first), id(last))
            }
            _ => self.label(Role::Trainer),
        }
    }

    fn setup(&self) -> Setup {
        let trainer = !self.trainers.is_empty();
        Setup {
            pserver: self.plan.process(Role::Pserver).is_some(),
            trainer,
            gate_on_pservers: trainer && !self.plan.pserver_endpoints.is_empty(),
            protocol: self.config.topology.protocol,
            linger: self.config.timing.linger,
            trainer_label: self.trainer_label(),
            trainers: self.trainers.len(),
            trainer_names: match self.several {
                true => self.trainers.iter().map(|s| self.process_name(s)).collect(),
                false => Vec::new(),
            },
            pserver_label: self.label(Role::Pserver),
            // A pserver-only pod too: preempted, it serves the job's checkpoint through its
            // window.
            checkpoint: self.config.timing.checkpoint(),
            waits_for_the_job: !trainer && self.channel.is_some(),
            stop: self.config.timing.stop_times(self.sup.grace),
        }
    }

    /// What an event means to the lifecycle. The first stop signal of a pod found through the
    /// API also begins the read of the pod's deletion, whose grace period may be shorter than
    /// the pod's (`kubectl delete --grace-period`, a drain's, a force delete's): a checkpoint
    /// window opens at once and the read cuts it when it comes (`next_input`); a stop of the
    /// processes waits for it first (`drive`).
    fn input_of(&mut self, event: Event) -> Option<Input> {
        if let Event::Signal(sig) = event {
            if crate::exit::is_stop_signal(sig) && self.stop_at.is_none() {
                self.stop_at = Some(Instant::now());
                self.deletion = self.deletion_read();
            }
        }
        input_of(event, &self.children, &mut self.watch)
    }

    /// The pending read of this pod's deletion, awaited now (it is bounded): its grace period
    /// with how long ago the stop signal came, if the pod is being deleted.
    async fn deletion_read_now(&mut self) -> Option<Input> {
        let grace = self.deletion.take()?.await?;
        let since_stop = self.stop_at.map(|at| at.elapsed());
        Some(Input::Deleting { grace, since_stop })
    }

    /// The read of this pod's own deletion, when it has a name and the API to ask.
    fn deletion_read(&self) -> Option<BoxFuture<'static, Option<Duration>>> {
        let topology = &self.config.topology;
        if !matches!(
            topology.discovery,
            crate::config::Discovery::Kubernetes { .. }
        ) {
            return None;
        }
        let name = topology.pod_name.clone()?;
        let namespace = topology.namespace.clone();
        let read =
            crate::peers::kubernetes::own_deletion_grace(namespace, name, DELETION_READ_LIMIT);
        Some(read.boxed())
    }

    /// The supervisor's indexes of the processes of `roles`.
    fn children_of(&self, roles: &[Role]) -> Vec<usize> {
        self.children
            .iter()
            .filter(|(role, _, _)| roles.contains(role))
            .map(|(_, _, child)| *child)
            .collect()
    }

    /// "p-0 on node n7 at 12:00:00Z: why", as the job is told it.
    fn said(&self, reason: &str) -> String {
        crate::loss::said_by(self.who, &now_utc(), reason)
    }

    /// Carries out one command (not `Finish`, which ends the drive): what it made happen at
    /// once, if anything.
    async fn execute(&mut self, command: Command) -> Option<Input> {
        let channel = self.channel;
        match command {
            Command::Spawn(role) => self.spawn_role(role),
            Command::Forward(sig) => {
                self.sup.forward(sig);
                None
            }
            Command::ProbePservers => {
                let endpoints = self.plan.pserver_endpoints.clone();
                let timeout = self.config.timing.pserver_timeout;
                self.probe = Some(probe_pservers(endpoints, timeout).boxed());
                None
            }
            Command::Linger(how_long) => {
                self.linger = Some(Box::pin(sleep(how_long)));
                None
            }
            Command::TellEnd { end, heard_first } => {
                let channel = channel?;
                let ended = Loss {
                    reason: self.said(&end.reason),
                    ..end
                };
                // Sent now; what follows goes on at once (the stacks, a preempted pod's stop).
                if !heard_first {
                    drop(channel.tell_end(ended, Duration::ZERO));
                    return None;
                }
                // Heard by the job before what follows (the siblings' stop) can fail another
                // pod first (the runtime has one thread: a frame queued is not yet sent). What
                // happens meanwhile, a stop signal above all, goes to the lifecycle as it
                // comes, not left for the stop to misread.
                let told = channel.tell_end(ended, TOLD_BEFORE_STOP);
                tokio::select! {
                    _ = told => None,
                    event = self.sup.next_event() => self.input_of(event),
                }
            }
            Command::TellPreempted(_) | Command::TellDone => {
                self.tell(command);
                None
            }
            Command::AskCheckpoint => {
                let trainer = self.children_of(&[Role::Trainer]);
                let signal = self.config.timing.checkpoint_signal.unwrap_or(0);
                match self.sup.signal_handlers(&trainer, signal) {
                    0 => Some(Input::CheckpointUnheeded),
                    _ => None,
                }
            }
            Command::Window(how_long) => {
                self.window = Some(Box::pin(sleep(how_long)));
                None
            }
            Command::CutWindow(how_long) => {
                let at = Instant::now() + how_long;
                if let Some(window) = self.window.as_mut().filter(|w| at < w.deadline()) {
                    window.as_mut().reset(at);
                }
                None
            }
            Command::StopWithin(how_long) => {
                self.sup.grace = self.sup.grace.min(how_long);
                None
            }
            Command::DumpStacks => {
                self.watch = None;
                let trainer = self.children_of(&[Role::Trainer]);
                self.sup.signal(&trainer, progress::STACK_SIGNAL);
                self.stack_dump = Some(Box::pin(sleep(lifecycle::STACK_DUMP_WAIT)));
                None
            }
            Command::Stop { roles, signal } => {
                self.probe = None;
                self.linger = None;
                self.stack_dump = None;
                self.window = None;
                self.watch = None;
                let stopping = self.children_of(&roles);
                self.sup.stop(&stopping, signal).await;
                Some(Input::Stopped)
            }
            Command::Log(line) => {
                info!("{line}");
                None
            }
            // `drive` ends with it.
            Command::Finish(_) => None,
        }
    }

    /// Tells the job's channel, if there is one, what this pod's processes came to.
    fn tell(&self, command: Command) {
        let Some(channel) = self.channel else {
            return;
        };
        match command {
            Command::TellPreempted(reason) => channel.preempted(&self.said(&reason)),
            Command::TellDone => channel.done(),
            _ => {}
        }
    }

    /// How a trainer process's progress is followed: by the metrics (its source) and, with a
    /// hang timeout, by the hang watch, which then keeps its file's reader (else the board does).
    fn watched(
        &self,
        spec: &ProcessSpec,
        local: usize,
        child: usize,
        file: ProgressFileClock,
        hangs: bool,
    ) -> (metrics::Source, Option<Watched>) {
        let output = self.sup.output_clock(child);
        let mut source = metrics::Source {
            trainer_id: spec.place.as_ref().map_or(0, |p| p.trainer_id as u32),
            local_rank: local as u32,
            step: file.step.clone(),
            compute_ms: file.compute_ms.clone(),
            file: file.changed.clone(),
            output: output.clone(),
            started: std::time::Instant::now(),
            keep: None,
        };
        if !hangs {
            source.keep = Some(Arc::new(file));
            return (source, None);
        }
        let watch = Watched {
            local,
            ended: None,
            trainer_id: spec
                .place
                .as_ref()
                .filter(|_| self.several)
                .map(|p| p.trainer_id as u32),
            output,
            file,
            label: self.process_name(spec),
        };
        (source, Some(watch))
    }

    /// Starts the processes of `role`; the first that cannot start, as the lifecycle hears
    /// it. The progress files' watch starts before the trainer: its first look is the time an
    /// earlier attempt left.
    fn spawn_role(&mut self, role: Role) -> Option<Input> {
        let config = self.config;
        let limits = config.timing.hang_timeout.map(|timeout| progress::Limits {
            timeout,
            first_window: config.timing.hang_first_window,
            output_counts: config.timing.hang_output_counts,
        });
        let specs: Vec<&ProcessSpec> = match role {
            Role::Trainer => self.trainers.clone(),
            Role::Pserver => self.plan.process(role).into_iter().collect(),
        };
        let mut failed = None;
        let mut watched = Vec::new();
        let mut sources = Vec::new();
        // The progress files are read for hang detection, for the metrics, and for the job's
        // view on its channel (its table, its stragglers).
        // At least once a second: a long hang timeout looks seldom, the job's view needs
        // every window's steps.
        let every = limits.map_or(METRICS_CHECK, |l| {
            progress::check_every(l).min(METRICS_CHECK)
        });
        let read_files = limits.is_some() || self.board.is_some() || self.channel.is_some();
        for (local, spec) in specs.into_iter().enumerate() {
            let file = (read_files && role == Role::Trainer).then(|| {
                let path = spec.place.as_ref().map_or_else(
                    || config.workspace.progress_file.clone(),
                    |place| place.progress_file.clone(),
                );
                ProgressFileClock::start(path, every)
            });
            match spawn(self.sup, spec) {
                Ok(child) => {
                    self.children.push((role, local, child));
                    let Some(file) = file else { continue };
                    let (source, watch) = self.watched(spec, local, child, file, limits.is_some());
                    sources.push(source);
                    watched.extend(watch);
                }
                Err(error) => {
                    failed = Some(Input::SpawnFailed { role, local, error });
                    break;
                }
            }
        }
        if let (Some(channel), Role::Trainer) = (self.channel, role) {
            channel.watch_ranks(sources.iter().map(metrics::Source::gauge).collect());
        }
        if let (Some(board), Role::Trainer) = (self.board, role) {
            metrics::serve::lock(board).watch(sources);
        }
        if let (Some(limits), false) = (limits, watched.is_empty()) {
            let margin =
                control::progress_margin(config.control.heartbeat_timeout, progress_check(config));
            // Collective ranks wait for one another at every step: a pod is judged by any of
            // them.
            let ranks = match config.topology.protocol {
                Protocol::Collective => progress::Ranks::Lockstep,
                _ => progress::Ranks::Alone,
            };
            let label = self.trainer_label();
            self.watch = Some(HangWatch::new(watched, limits, margin, ranks, label));
        }
        failed
    }

    /// What happens next: to the processes first (a trainer's exit already queued is seen
    /// before a timer or a hang check says anything of it), then the timers, the job's
    /// checkpoint, a hang. None: an event of no child of this attempt.
    async fn next_input(&mut self) -> Option<Input> {
        Some(tokio::select! {
            biased;
            event = self.sup.next_event() => return self.input_of(event),
            grace = or_never(self.deletion.as_mut()), if self.deletion.is_some() => {
                self.deletion = None;
                let since_stop = self.stop_at.map(|at| at.elapsed());
                return grace.map(|grace| Input::Deleting { grace, since_stop });
            }
            input = or_never(self.probe.as_mut()), if self.probe.is_some() => {
                self.probe = None;
                input
            }
            _ = or_never(self.linger.as_mut()), if self.linger.is_some() => {
                self.linger = None;
                Input::LingerOver
            }
            _ = or_never(self.stack_dump.as_mut()), if self.stack_dump.is_some() => {
                self.stack_dump = None;
                Input::DumpOver
            }
            _ = or_never(self.window.as_mut()), if self.window.is_some() => {
                self.window = None;
                Input::WindowOver
            }
            reason = or_never(self.checkpoint_asked.as_mut()), if self.checkpoint_asked.is_some() => {
                self.checkpoint_asked = None;
                Input::CheckpointAsked(reason)
            }
            hung = HangWatch::next_hang_of(self.watch.as_mut(), self.channel), if self.watch.is_some() => {
                self.watch = None;
                Input::Hung(hung)
            }
        })
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
            reason,
            kind: Kind::Hang,
            ..
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
