//! A pod's life after the launch decision, as pure state machines: `step(input) -> commands`.
//! The drivers (`launch`, `local`) turn commands into effects (spawn, signal, probe, timers,
//! stop) and effects back into inputs; the supervisor keeps only the process table, the reaper
//! and the signal source. Every way a run ends — and so every exit status — is decided here:
//! `Lifecycle` for one attempt of a pod (what its end means for the job is the attempt loop's:
//! `attempt_loop`), `LocalPods` for `local`'s simulated pods. The transitions are
//! tested as tables without a process.

mod local_pods;
mod serving;
mod training;

pub use local_pods::{LocalCommand, LocalInput, LocalPods};
use std::time::Duration;

use crate::config::KUBELET_MIN_GRACE;
use crate::error::Error;
use crate::exit::{self, Outcome};
use crate::exit::{is_stop_signal, Ended};
use crate::loss::{Kind, Loss};
use crate::plan::Role;
use crate::vocabulary::Protocol;

/// What happened.
#[derive(Debug)]
pub enum Input {
    /// A signal from outside (not consumed by a stop in progress).
    Signal(i32),
    /// A process ended: the pserver, or the trainer process of local rank `local` (0 when the
    /// pod runs one).
    Exited {
        role: Role,
        local: usize,
        ended: Ended,
    },
    /// A process could not be started: of the trainer's, the one of local rank `local` (those
    /// before it run, those after it were not started).
    SpawnFailed {
        role: Role,
        local: usize,
        error: Error,
    },
    /// Every pserver endpoint of the job accepts connections.
    PserversUp,
    /// Some pserver endpoints never accepted a connection within the timeout.
    PserversTimedOut {
        waiting: Vec<String>,
        total: usize,
        limit_s: u64,
    },
    LingerOver,
    /// A peer pod of the job was lost (the reason).
    PeerLost(String),
    /// Split layout: every trainer pod is done, or that can no longer be known.
    JobDone(Result<String, String>),
    /// The processes of the last `Command::Stop` are all gone.
    Stopped,
    /// The trainer made no progress within its limit (how long, by what).
    Hung(String),
    /// The job hangs, as the control channel told (the job's reason, naming the suspect):
    /// this pod's trainer is asked for its stacks too, then stopped.
    JobHung(String),
    /// The time given to the trainer to dump its stacks (`DumpStacks`) is over.
    DumpOver,
    /// The job asks for a checkpoint: a member pod is preempted (the reason).
    CheckpointAsked(String),
    /// The trainer does not handle the checkpoint signal (`AskCheckpoint` sent nothing): it
    /// would have died of it.
    CheckpointUnheeded,
    /// The checkpoint window of a preempted pod is over.
    WindowOver,
    /// This pod is being deleted with this grace period (`metadata.deletionGracePeriodSeconds`);
    /// `since_stop`: how long ago the stop signal came, if it has.
    Deleting {
        grace: Duration,
        since_stop: Option<Duration>,
    },
}

/// How long a pserver of the split layout may take to end by itself once every trainer pod
/// has Succeeded (at most --linger).
const SELF_STOP_WAIT: Duration = Duration::from_secs(5);
/// How long a trainer may run on after its pod's pserver was stopped by the job (fleet): the
/// trainers end within moments of trainer 0's `stop_server`; one still running is stuck.
const PSERVER_GONE_WAIT: Duration = Duration::from_secs(60);
/// How long a hung trainer is given to write its stacks before it is stopped: faulthandler
/// writes them at once, and the program goes on, so the wait always runs out.
pub const STACK_DUMP_WAIT: Duration = Duration::from_secs(2);

/// What to do, in order.
#[derive(Debug)]
pub enum Command {
    Spawn(Role),
    Forward(i32),
    /// Probe every pserver endpoint until all accept (`PserversUp`) or the timeout passes.
    ProbePservers,
    /// `LingerOver` after this long.
    Linger(Duration),
    /// Tell the job at once that this pod's trainer succeeded: from now on it cannot start
    /// again as a whole, since this pod will not be there to rejoin.
    TellDone,
    /// Stop these processes' groups with `signal`, SIGKILL after the grace period; `Stopped`
    /// follows.
    Stop {
        roles: Vec<Role>,
        signal: i32,
    },
    Log(String),
    /// Tell the job at once how this pod's attempt ends: a `Hang` of its trainer before the
    /// stacks are asked for (the coordinator names the suspect and has every pod dump its
    /// stacks); a trainer process's `Failure` before its siblings are stopped; a preempted pod
    /// leaving (a `Failure` the coordinator judges its preemption's) before its processes are
    /// stopped, so that the others stop theirs as it does. `heard_first`: what follows waits
    /// (briefly) until the job has heard it — the siblings' stop, which ends the other pods'
    /// collectives, whose failures must not become the job's cause; not the stacks, nor a
    /// preempted pod's stop, which its deletion's short time may not allow. The attempt loop's
    /// own telling after the run is this one said again, which the channel does not send twice.
    TellEnd {
        end: Loss,
        heard_first: bool,
    },
    /// Ask the trainer for every thread's stack in its log (`progress::STACK_SIGNAL`, which
    /// Python's faulthandler answers), then `DumpOver` after `STACK_DUMP_WAIT`.
    DumpStacks,
    /// Tell the job at once that this pod is preempted (the reason): every trainer of the job
    /// is asked for a checkpoint while every rank is still there.
    TellPreempted(String),
    /// Send the checkpoint signal to the trainer's processes that handle it, or answer
    /// `CheckpointUnheeded` when none does (the signal would kill it).
    AskCheckpoint,
    /// `WindowOver` after this long.
    Window(Duration),
    /// The window running ends at the latest this long from now.
    CutWindow(Duration),
    /// The children's time between the stop signal and SIGKILL is at most this from now on.
    StopWithin(Duration),
    /// The end of the pod's run: the child's own outcome, or the launcher's failure.
    Finish(Result<Outcome, Error>),
}

#[derive(Debug)]
enum Phase {
    /// The pserver runs; the trainer waits for every pserver endpoint.
    WaitingForPservers,
    Training,
    /// The trainer succeeded; the pserver keeps serving the peers for a while.
    Lingering {
        trainer: Outcome,
    },
    /// Split layout: this pod only serves.
    Serving,
    /// Fleet: the pserver ended with status 0 while the trainer runs: stopped by the job
    /// (Paddle's trainer 0 calls `stop_server` once every trainer is done). The trainer's own
    /// end decides, if it comes within `PSERVER_GONE_WAIT`.
    PserverGone,
    /// Split layout: every trainer pod Succeeded (`reason`); the pserver may end by itself.
    TrainersDone {
        reason: String,
    },
    /// Split layout with a channel: the pserver ended by itself (`ended`, stopped by the
    /// trainers) before the job's end; the pod stays a member until the trainers are done (its
    /// success) or the job is lost (it rejoins the restart).
    ServedOut {
        ended: Ended,
    },
    /// The hung trainer was asked for its stacks (`reason`: why it was judged hung; `job`: the
    /// job's verdict, not this pod's own judgement); `DumpOver` stops every process.
    DumpingStacks {
        reason: String,
        job: bool,
    },
    /// Told to stop (`signal`) while training: the trainer was asked for a checkpoint, and
    /// every process stops at the window's end, or as soon as the trainer has ended.
    Checkpointing {
        signal: i32,
    },
    /// Waiting for `Stopped`, then finishing with this.
    Stopping(Option<Result<Outcome, Error>>),
    Done,
}

/// What the machine needs to know of the plan.
#[derive(Debug, Clone)]
pub struct Setup {
    pub pserver: bool,
    pub trainer: bool,
    /// The trainer starts only once the job's pserver endpoints accept connections.
    pub gate_on_pservers: bool,
    pub protocol: Protocol,
    pub linger: Duration,
    /// The processes' names in messages ("trainer-0", "pserver-0"; "trainers 4-7").
    pub trainer_label: String,
    /// The trainer processes the pod runs (1, or --nproc-per-pod), and how each one's end is
    /// named ("trainer id 5 of 8 (local rank 1)"); none: "trainer".
    pub trainers: usize,
    pub trainer_names: Vec<String>,
    pub pserver_label: String,
    /// The checkpoint signal and window; None: a stop signal stops at once.
    pub checkpoint: Option<crate::config::Checkpoint>,
    /// A pserver-only pod with a control channel: a pserver that ends by itself (fleet's
    /// `stop_server`) leaves the pod waiting for the job's end, so that a restart finds it.
    pub waits_for_the_job: bool,
    /// What the pod's stop may take as configured; a shorter deletion cuts it (`Deleting`).
    pub stop: crate::config::StopTimes,
}

pub struct Lifecycle {
    setup: Setup,
    phase: Phase,
    /// Started and not yet seen to exit (the trainer: while any of its processes runs).
    running: Vec<Role>,
    /// The pod's trainer processes as one: how many still run, whether their end is decided,
    /// and the first that failed.
    trainers_left: usize,
    trainers_ended: bool,
    first_failure: Option<(usize, Ended)>,
    /// The pod's deletion's grace period, once seen.
    deletion: Option<Duration>,
    /// The stop's times cut to that grace, once applied.
    cut: Option<crate::config::StopTimes>,
}

impl Lifecycle {
    /// The machine and its first commands.
    pub fn start(setup: Setup) -> (Lifecycle, Vec<Command>) {
        let mut machine = Lifecycle {
            phase: Phase::Done,
            running: Vec::new(),
            trainers_left: 0,
            trainers_ended: false,
            first_failure: None,
            deletion: None,
            cut: None,
            setup,
        };
        let mut commands = Vec::new();
        if machine.setup.pserver {
            commands.push(machine.spawn(Role::Pserver));
        }
        machine.phase = match (machine.setup.trainer, machine.setup.pserver) {
            (true, _) if machine.setup.gate_on_pservers => {
                commands.push(Command::ProbePservers);
                Phase::WaitingForPservers
            }
            (true, _) => {
                commands.push(machine.spawn(Role::Trainer));
                Phase::Training
            }
            (false, true) => Phase::Serving,
            (false, false) => {
                let done = Outcome::new(exit::SUCCESS, "the plan has no process to run");
                commands.push(Command::Finish(Ok(done)));
                Phase::Done
            }
        };
        (machine, commands)
    }

    pub fn step(&mut self, input: Input) -> Vec<Command> {
        if let Input::Deleting { grace, since_stop } = input {
            return self.deleting(grace, since_stop);
        }
        // A stop whose deletion is already known runs within its grace: the children's time
        // is cut before anything is stopped, the window (`checkpoint_window`) as it opens.
        let stop_signal = matches!(input, Input::Signal(sig) if is_stop_signal(sig));
        let mut cut = match (stop_signal, self.deletion, self.cut) {
            (true, Some(grace), None) => self.cut_to(grace, grace.max(KUBELET_MIN_GRACE)),
            _ => Vec::new(),
        };
        cut.extend(self.step_phase(input));
        cut
    }

    /// The deletion's grace period seen: kept for the stop signal to come, or, when it came
    /// before (`since_stop`), what is left of it cuts the stop under way.
    fn deleting(&mut self, grace: Duration, since_stop: Option<Duration>) -> Vec<Command> {
        if self.deletion.is_some() {
            return Vec::new();
        }
        self.deletion = Some(grace);
        let Some(since) = since_stop else {
            return Vec::new();
        };
        let left = grace.max(KUBELET_MIN_GRACE).saturating_sub(since);
        let mut commands = self.cut_to(grace, left);
        if let (Some(cut), Phase::Checkpointing { .. }) = (self.cut, &self.phase) {
            commands.push(Command::CutWindow(cut.window));
        }
        commands
    }

    /// The stop's times cut to what the deletion leaves (`left` of its `grace`, and at least
    /// the kubelet's shortest), said once, when shorter than the pod's own.
    fn cut_to(&mut self, grace: Duration, left: Duration) -> Vec<Command> {
        let given = grace.max(KUBELET_MIN_GRACE);
        let Some(cut) = self.setup.stop.within(given, left) else {
            return Vec::new();
        };
        self.cut = Some(cut);
        let pod = self.setup.stop.pod.map_or(String::new(), |pod| {
            format!(", less than its own {} s", pod.as_secs())
        });
        let window = match self.setup.checkpoint {
            Some(_) => format!(
                "its checkpoint window cut to {} ms, ",
                cut.window.as_millis()
            ),
            None => String::new(),
        };
        let line = format!(
            "this pod's deletion gives it {} s (metadata.deletionGracePeriodSeconds: {} s){pod}: {window}its processes' stop to {} ms, so that it ends before the kubelet's SIGKILL",
            left.as_secs_f32(),
            grace.as_secs(),
            cut.children.as_millis()
        );
        vec![Command::Log(line), Command::StopWithin(cut.children)]
    }

    /// The checkpoint window a preemption opens: the configured one, or the cut one.
    fn checkpoint_window(&self) -> Option<Duration> {
        let window = self.setup.checkpoint?.window;
        Some(self.cut.map_or(window, |cut| cut.window.min(window)))
    }

    fn step_phase(&mut self, input: Input) -> Vec<Command> {
        let input = match input {
            Input::Exited {
                role: Role::Trainer,
                local,
                ended,
            } => match self.trainer_exited(local, ended) {
                Ok(input) => input,
                Err(commands) => return commands,
            },
            Input::Exited {
                role: Role::Pserver,
                ..
            } => {
                self.running.retain(|r| *r != Role::Pserver);
                input
            }
            input => input,
        };
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        match (phase, input) {
            // The checkpoint signal sent to the launcher (`kill -USR1 1`) asks for a checkpoint
            // the way a preemption does, only of processes that handle it: forwarded blindly it
            // would kill any process of the trainer's group that does not (a shell wrapper).
            (phase, Input::Signal(sig))
                if self.setup.trainer && self.setup.checkpoint.is_some_and(|c| c.signal == sig) =>
            {
                let trainer_runs = matches!(
                    phase,
                    Phase::Training | Phase::PserverGone | Phase::Checkpointing { .. }
                );
                self.phase = phase;
                let name = crate::exit::signal_name(sig);
                match trainer_runs {
                    true => vec![
                        Command::Log(format!(
                            "{name} received: asking {} for a checkpoint",
                            self.setup.trainer_label
                        )),
                        Command::AskCheckpoint,
                    ],
                    false => vec![Command::Log(format!(
                        "{name} received: no trainer runs to checkpoint; not forwarded"
                    ))],
                }
            }
            (phase, Input::Signal(sig)) if !is_stop_signal(sig) => {
                self.phase = phase;
                vec![Command::Forward(sig)]
            }
            (Phase::Stopping(then), Input::Stopped) => {
                vec![Command::Finish(then.unwrap_or_else(|| {
                    Ok(Outcome::new(exit::SUCCESS, "stopped"))
                }))]
            }
            (phase @ Phase::Stopping(_), _) | (phase @ Phase::Done, _) => {
                self.phase = phase;
                Vec::new()
            }
            (Phase::Checkpointing { signal }, input) => self.checkpointing(signal, input),
            (_, Input::SpawnFailed { role, local, error }) => {
                // The trainer processes started before the one that failed still run: the job
                // hears of the failure before they are stopped.
                let mut commands = Vec::new();
                let failed = Err(error);
                if role == Role::Trainer {
                    self.trainers_left = local;
                    if let (Err(error), true) = (&failed, local > 0) {
                        commands.push(Command::TellEnd {
                            end: Loss::failure(error.to_string(), others_may_restart(&failed)),
                            heard_first: true,
                        });
                    }
                }
                if role == Role::Pserver || local == 0 {
                    self.running.retain(|r| *r != role);
                }
                commands.extend(self.stop_then(self.running.clone(), libc_term(), failed));
                commands
            }
            // The kubelet's stop (preemption, a drain, a deletion); an interactive ^C is not.
            (Phase::Training | Phase::Serving, Input::Signal(sig))
                if sig == libc_term() && self.setup.checkpoint.is_some() =>
            {
                self.preempted(sig)
            }
            (phase, Input::Signal(sig)) => {
                let (roles, doing) = self.stopped_by_signal(&phase);
                let then = Err(Error::stopped(sig, &doing));
                // Before its trainer runs a preempted pod has nothing to checkpoint, but its
                // end is still a preemption, which spends no restart.
                if let (Phase::WaitingForPservers, true, Some(_)) =
                    (&phase, sig == libc_term(), self.setup.checkpoint)
                {
                    let reason = "preempted (SIGTERM before its trainer started)".to_string();
                    let mut commands = vec![Command::TellPreempted(reason)];
                    commands.extend(self.stop_then(roles, sig, then));
                    return commands;
                }
                match phase {
                    // By group, the trainer's too: its leader may be gone, its program not.
                    Phase::DumpingStacks { .. } => {
                        self.phase = Phase::Stopping(Some(then));
                        vec![Command::Stop { roles, signal: sig }]
                    }
                    _ => self.stop_then(roles, sig, then),
                }
            }
            // No trainer runs to ask for stacks: the job's hang is a loss like another.
            (phase, Input::JobHung(reason))
                if !matches!(
                    phase,
                    Phase::Training | Phase::PserverGone | Phase::DumpingStacks { .. }
                ) =>
            {
                self.phase = phase;
                self.step(Input::PeerLost(reason))
            }
            (Phase::WaitingForPservers, input) => self.waiting_for_pservers(input),
            (Phase::Training, input) => self.training(input),
            (Phase::Lingering { trainer }, input) => self.lingering(trainer, input),
            (Phase::Serving, input) => self.serving(input),
            (Phase::ServedOut { ended }, input) => self.served_out(ended, input),
            (Phase::PserverGone, input) => self.pserver_gone(input),
            (Phase::TrainersDone { reason }, input) => self.trainers_done(reason, input),
            (Phase::DumpingStacks { reason, job }, input) => {
                self.dumping_stacks(reason, job, input)
            }
        }
    }

    /// A trainer process ended: the pod's trainer ends with the first process that fails (its
    /// siblings are then stopped, as with any end of the trainer), or with the last one when
    /// all succeed. In a checkpoint window each process is left to save its own part: the
    /// trainer ends with the last one, the first failure its status. Err: the trainer has not
    /// ended (or had before), with what to say.
    fn trainer_exited(&mut self, local: usize, ended: Ended) -> Result<Input, Vec<Command>> {
        self.trainers_left = self.trainers_left.saturating_sub(1);
        if self.trainers_left == 0 {
            self.running.retain(|r| *r != Role::Trainer);
        }
        if self.trainers_ended {
            return Err(Vec::new());
        }
        let failed = ended.exit_code() != 0;
        if failed && self.first_failure.is_none() {
            self.first_failure = Some((local, ended));
        }
        let each_saves = matches!(self.phase, Phase::Checkpointing { .. });
        let (local, ended) = match (failed && !each_saves, self.trainers_left) {
            (true, _) => (local, ended),
            (false, 0) => self.first_failure.unwrap_or((local, ended)),
            (false, left) => {
                let line = format!(
                    "{} {}; {} of the pod's trainer processes still run",
                    self.trainer_name(local),
                    ended.describe(),
                    left
                );
                return Err(vec![Command::Log(line)]);
            }
        };
        self.trainers_ended = true;
        Ok(Input::Exited {
            role: Role::Trainer,
            local,
            ended,
        })
    }

    /// How the trainer process of local rank `local` is named where its end is told.
    fn trainer_name(&self, local: usize) -> &str {
        self.setup
            .trainer_names
            .get(local)
            .map_or("trainer", String::as_str)
    }

    /// What a stop signal stops in each phase (what runs there), and how the outcome says so.
    fn stopped_by_signal(&self, phase: &Phase) -> (Vec<Role>, String) {
        let pserver = || vec![Role::Pserver];
        match phase {
            Phase::WaitingForPservers => (pserver(), " while waiting for the pservers".into()),
            Phase::Training => {
                let all = self.started();
                let doing = format!("; stopped {}", self.names(&all));
                (all, doing)
            }
            Phase::Lingering { .. } => {
                (pserver(), " while the pserver lingered; stopped it".into())
            }
            Phase::Serving | Phase::TrainersDone { .. } => {
                (pserver(), "; stopped the pserver".into())
            }
            Phase::ServedOut { .. } => (Vec::new(), "; its pserver had ended".into()),
            Phase::PserverGone => (
                vec![Role::Trainer],
                format!("; stopped {}", self.setup.trainer_label),
            ),
            // Handled before: a signal there changes nothing.
            Phase::Checkpointing { .. } => (Vec::new(), String::new()),
            Phase::DumpingStacks { .. } => {
                let all = self.started();
                let doing = format!("; stopped {} (judged hung)", self.names(&all));
                (all, doing)
            }
            Phase::Stopping(_) | Phase::Done => (Vec::new(), String::new()),
        }
    }

    fn spawn(&mut self, role: Role) -> Command {
        self.running.push(role);
        if role == Role::Trainer {
            self.trainers_left = self.setup.trainers.max(1);
        }
        Command::Spawn(role)
    }

    fn stay(&mut self, phase: Phase) -> Vec<Command> {
        self.phase = phase;
        Vec::new()
    }

    fn finish(&mut self, result: Result<Outcome, Error>) -> Vec<Command> {
        self.phase = Phase::Done;
        vec![Command::Finish(result)]
    }

    /// Stops those of `roles` that still run, then finishes with `then`.
    fn stop_then(
        &mut self,
        roles: Vec<Role>,
        signal: i32,
        then: Result<Outcome, Error>,
    ) -> Vec<Command> {
        let roles: Vec<Role> = roles
            .into_iter()
            .filter(|r| self.running.contains(r))
            .collect();
        if roles.is_empty() {
            return self.finish(then);
        }
        self.phase = Phase::Stopping(Some(then));
        vec![Command::Stop { roles, signal }]
    }

    /// The processes this pod has, trainer first, as messages list them.
    fn started(&self) -> Vec<Role> {
        let mut roles = Vec::new();
        if self.setup.trainer {
            roles.push(Role::Trainer);
        }
        if self.setup.pserver {
            roles.push(Role::Pserver);
        }
        roles
    }

    fn names(&self, roles: &[Role]) -> String {
        roles
            .iter()
            .map(|role| match role {
                Role::Trainer => self.setup.trainer_label.as_str(),
                Role::Pserver => self.setup.pserver_label.as_str(),
            })
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// "after 1 restart", "after 3 restarts": how a pod's outcome says the job restarted, and how
/// `local` reads it back from the pods' termination logs.
pub fn restarts_said(count: u32) -> String {
    format!(
        "after {}",
        crate::vocabulary::count(count as usize, "restart")
    )
}

/// The restart count a pod's outcome line says (`restarts_said`), if any.
pub fn restarts_read(line: &str) -> Option<u32> {
    let after = line.rsplit_once("(after ")?.1;
    after.split(' ').next()?.parse().ok()
}

/// "trainer exited with status 3" ("trainer id 5 of 8 (local rank 1) exited with status 3"):
/// how a trainer's own end reads. A SIGKILL the launcher did
/// not send (it would be stopping) came from outside the pod's processes, most often the
/// kernel's OOM killer: the line says where to look.
fn trainer_ended(name: &str, ended: Ended) -> String {
    match ended {
        Ended::Signal(libc::SIGKILL) => format!(
            "{name} {} (not by the launcher: most often the kernel's out-of-memory killer; check the container's memory limit, `kubectl describe pod` and the node's kernel log)",
            ended.describe()
        ),
        ended => format!("{name} {}", ended.describe()),
    }
}

/// What the log says of a trainer that does not handle the checkpoint signal.
fn unheeded(trainer: &str, signal: &str) -> String {
    format!(
        "{trainer} does not handle {signal}: no checkpoint asked (it would have died of it; see docs/preemption.md)"
    )
}

fn libc_term() -> i32 {
    libc::SIGTERM
}

/// Why a pserver that ends at once with status 0 most likely did: PaddlePaddle >= 2 has no v1
/// parameter server, and its `paddle pserver` prints the version and exits 0.
fn pserver_hint(protocol: Protocol, ended: Ended) -> &'static str {
    match (protocol, ended) {
        (Protocol::V1 | Protocol::V2, Ended::Code(0)) => {
            ": the image's `paddle` is probably PaddlePaddle 2 or later, whose `paddle pserver` only prints its version; \
             the v1/v2 protocols need PaddlePaddle 0.x/1.x (see docs/roles-and-protocols.md), or use --protocol fleet \
             (parameter server, Paddle 2.x) or --protocol collective (data parallel)"
        }
        _ => "",
    }
}

/// The failure an attempt ended with, when a restart could end it otherwise; None for a
/// success, and for what would end the same way again or ends the pod itself.
pub fn recoverable_reason(result: &Result<Outcome, Error>) -> Option<String> {
    match result {
        Ok(outcome) if outcome.code == exit::SUCCESS => None,
        Ok(outcome) => Some(outcome.reason.clone()),
        Err(Error::PeerLost { reason, .. }) => Some(reason.clone()),
        Err(Error::JobHung { reason, .. }) => Some(reason.clone()),
        Err(
            e @ (Error::PserverDied { .. } | Error::PserversNotReady { .. } | Error::Hung { .. }),
        ) => Some(e.to_string()),
        Err(_) => None,
    }
}

/// Whether a restart could end this attempt's failure otherwise.
pub fn recoverable(result: &Result<Outcome, Error>) -> bool {
    recoverable_reason(result).is_some()
}

/// Whether the rest of the job may restart after this pod's failure: a stop signal ends this
/// pod (it is being deleted), but the pod that replaces it can rejoin; a command that is
/// missing or not executable is so on every pod (one image), unlike a fork that failed for
/// want of memory or processes.
pub fn others_may_restart(result: &Result<Outcome, Error>) -> bool {
    match result {
        Err(Error::Stopped { .. }) => true,
        Err(Error::Spawn { source, .. }) => !matches!(
            source.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
        ),
        _ => recoverable_reason(result).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libc::{SIGHUP, SIGINT, SIGTERM};

    fn setup(pserver: bool, trainer: bool) -> Setup {
        Setup {
            pserver,
            trainer,
            gate_on_pservers: pserver && trainer,
            protocol: Protocol::V1,
            linger: Duration::from_secs(30),
            trainer_label: "trainer-0".into(),
            trainers: 1,
            trainer_names: Vec::new(),
            pserver_label: "pserver-0".into(),
            checkpoint: None,
            waits_for_the_job: false,
            stop: crate::config::StopTimes {
                children: Duration::from_secs(12),
                window: Duration::from_secs(12),
                pod: Some(Duration::from_secs(30)),
                channel: true,
            },
        }
    }

    /// A compact picture of commands, so that a table row fits on a line.
    fn show(commands: &[Command]) -> Vec<String> {
        commands
            .iter()
            .map(|c| match c {
                Command::Spawn(role) => format!("spawn {}", role.as_str()),
                Command::Forward(sig) => format!("forward {sig}"),
                Command::ProbePservers => "probe".into(),
                Command::Linger(d) => format!("linger {}", d.as_secs()),
                Command::Stop { roles, signal } => format!(
                    "stop {} {signal}",
                    roles
                        .iter()
                        .map(|r| r.as_str())
                        .collect::<Vec<_>>()
                        .join("+")
                ),
                Command::Log(line) => format!("log {line}"),
                Command::TellDone => "tell done".into(),
                Command::DumpStacks => "dump stacks".into(),
                Command::TellEnd {
                    end:
                        Loss {
                            reason,
                            restart,
                            kind,
                        },
                    heard_first,
                } => {
                    let first = if *heard_first { ", heard first" } else { "" };
                    format!("tell {} {reason} (restart {restart}{first})", kind.name())
                }
                Command::TellPreempted(reason) => format!("tell preempted {reason}"),
                Command::AskCheckpoint => "ask checkpoint".into(),
                Command::Window(d) => format!("window {}", d.as_secs()),
                Command::CutWindow(d) => format!("cut window {} ms", d.as_millis()),
                Command::StopWithin(d) => format!("stop within {} ms", d.as_millis()),
                Command::Finish(Ok(o)) => format!("finish {} {}", o.code, o.reason),
                Command::Finish(Err(e)) => format!("fail {} {e}", e.exit_code()),
            })
            .collect()
    }

    /// Issue 52: a deletion shorter than the pod's grace period (`kubectl delete pod
    /// --grace-period=5`, a drain's, a force delete's 2 s) cuts the checkpoint window and the
    /// children's stop so that the launcher ends before the kubelet's SIGKILL, and says so —
    /// whether the API shows the deletion before the SIGTERM or after it. A deletion that
    /// leaves the pod all its time changes nothing.
    #[test]
    fn a_short_deletion_cuts_the_window_and_the_stop() {
        let checkpointing = || Setup {
            checkpoint: Some(crate::config::Checkpoint {
                signal: libc::SIGUSR1,
                window: Duration::from_secs(12),
            }),
            ..setup(false, true)
        };
        let deleting = |grace: u64, since_stop: Option<u64>| Input::Deleting {
            grace: Duration::from_secs(grace),
            since_stop: since_stop.map(Duration::from_secs),
        };
        // Seen before the SIGTERM: the window opens cut (5 s: 1 s for the launcher's exit,
        // 2 s for the children's stop, 2 s to checkpoint).
        let (mut machine, _) = Lifecycle::start(checkpointing());
        assert!(machine.step(deleting(5, None)).is_empty());
        let stop = show(&machine.step(Input::Signal(SIGTERM)));
        assert_eq!(stop[0], "log this pod's deletion gives it 5 s (metadata.deletionGracePeriodSeconds: 5 s), less than its own 30 s: its checkpoint window cut to 2000 ms, its processes' stop to 2000 ms, so that it ends before the kubelet's SIGKILL");
        assert_eq!(stop[1], "stop within 2000 ms");
        assert!(
            stop[2].ends_with(
                "stopping in at most 2 s (PADDLE_LAUNCHER_CHECKPOINT_WINDOW (--checkpoint-window))"
            ),
            "{stop:?}"
        );
        assert_eq!(stop.last().unwrap(), "window 2");
        // Seen 1 s after it: what is left (4 s) cuts the window already open.
        let (mut machine, _) = Lifecycle::start(checkpointing());
        let stop = show(&machine.step(Input::Signal(SIGTERM)));
        assert_eq!(stop.last().unwrap(), "window 12");
        let cut = show(&machine.step(deleting(5, Some(1))));
        assert_eq!(cut.len(), 3, "{cut:?}");
        assert!(
            cut[0].starts_with("log this pod's deletion gives it 4 s"),
            "{cut:?}"
        );
        assert_eq!(cut[1..], ["stop within 1600 ms", "cut window 1600 ms"]);
        assert!(machine.step(deleting(5, Some(1))).is_empty(), "said once");
        // A trainer that does not handle the checkpoint signal: the window closes at once and
        // the stop is under way when the read comes (the driver then runs the cut first).
        let (mut machine, _) = Lifecycle::start(checkpointing());
        machine.step(Input::Signal(SIGTERM));
        let stop = show(&machine.step(Input::CheckpointUnheeded));
        assert!(
            stop.iter().any(|c| c.starts_with("stop trainer")),
            "{stop:?}"
        );
        let cut = show(&machine.step(deleting(5, Some(0))));
        assert_eq!(cut[1..], ["stop within 2000 ms"], "{cut:?}");
        // A deletion that gives the pod all its grace, read a moment after: nothing cut.
        let (mut machine, _) = Lifecycle::start(checkpointing());
        machine.step(Input::Signal(SIGTERM));
        assert!(machine.step(deleting(30, Some(1))).is_empty());
        // A force delete (0 s) still leaves the kubelet's 2 s.
        let (mut machine, _) = Lifecycle::start(checkpointing());
        machine.step(deleting(0, None));
        let stop = show(&machine.step(Input::Signal(SIGTERM)));
        assert!(
            stop[0].starts_with(
                "log this pod's deletion gives it 2 s (metadata.deletionGracePeriodSeconds: 0 s)"
            ),
            "{stop:?}"
        );
        assert_eq!(stop[1], "stop within 1000 ms");
        // Without a window, the stop at once is cut before it begins.
        let (mut machine, _) = Lifecycle::start(setup(false, true));
        machine.step(deleting(3, None));
        let stop = show(&machine.step(Input::Signal(SIGTERM)));
        assert_eq!(
            stop[1..],
            ["stop within 1200 ms", "stop trainer 15"],
            "{stop:?}"
        );
        // The pod's own grace period or more: nothing to cut.
        let (mut machine, _) = Lifecycle::start(checkpointing());
        machine.step(deleting(30, None));
        let stop = show(&machine.step(Input::Signal(SIGTERM)));
        assert!(
            !stop.iter().any(|c| c.starts_with("stop within")),
            "{stop:?}"
        );
        assert_eq!(stop.last().unwrap(), "window 12");
    }

    fn exited(role: Role, code: i32) -> Input {
        Input::Exited {
            role,
            local: 0,
            ended: Ended::Code(code),
        }
    }

    /// A preempted pod gives its trainer the window to checkpoint, tells the job before and
    /// after, and ends 143 as any stopped pod; a pod whose peer is preempted asks its own
    /// trainer, only if it handles the signal.
    #[test]
    fn preemption_transitions() {
        let checkpointing = || Setup {
            checkpoint: Some(crate::config::Checkpoint {
                signal: libc::SIGUSR1,
                window: Duration::from_secs(12),
            }),
            ..setup(true, true)
        };
        let preempted = vec![
            "spawn pserver",
            "probe",
            "spawn trainer",
            "log SIGTERM: this pod is being stopped (preempted, drained or deleted): asking trainer-0 and the job's other trainers for a checkpoint (SIGUSR1); stopping in at most 12 s (PADDLE_LAUNCHER_CHECKPOINT_WINDOW (--checkpoint-window))",
            "tell preempted preempted (SIGTERM while training)",
            "ask checkpoint",
            "window 12",
        ];
        let then = |more: Vec<&'static str>| {
            let mut all = preempted.clone();
            all.extend(more);
            all
        };
        let term = || vec![Input::PserversUp, Input::Signal(SIGTERM)];
        let with = |more: Vec<Input>| {
            let mut all = term();
            all.extend(more);
            all
        };
        let cases: Vec<(&str, Setup, Vec<Input>, Vec<&str>)> = vec![
            (
                "the window's end stops every process, 143",
                checkpointing(),
                with(vec![Input::CheckpointAsked("echo".into()), Input::WindowOver, Input::Stopped]),
                then(vec![
                    "log preempted: its checkpoint window (12 s) is over: stopping",
                    "tell failure preempted (SIGTERM while training): its checkpoint window (12 s) is over (restart true)",
                    "stop trainer+pserver 15",
                    "fail 143 received SIGTERM; its checkpoint window (12 s) is over; stopped trainer-0 and pserver-0",
                ]),
            ),
            (
                "a trainer that ends in the window ends it; its 0 is no success of the job",
                checkpointing(),
                with(vec![exited(Role::Trainer, 0), Input::Stopped]),
                then(vec![
                    "log preempted: trainer-0 exited with status 0 within its checkpoint window: stopping",
                    "tell failure preempted (SIGTERM while training): trainer-0 exited with status 0 within its checkpoint window (restart true)",
                    "stop pserver 15",
                    "fail 143 received SIGTERM; trainer-0 exited with status 0 within its checkpoint window; stopped pserver-0",
                ]),
            ),
            (
                "a pserver that ends in the window ends it: its trainer has nothing to save to",
                checkpointing(),
                with(vec![exited(Role::Pserver, 1), Input::Stopped]),
                then(vec![
                    "log preempted: the pserver exited with status 1 during its checkpoint window: stopping",
                    "tell failure preempted (SIGTERM while training): the pserver exited with status 1 during its checkpoint window (restart true)",
                    "stop trainer 15",
                    "fail 143 received SIGTERM; the pserver exited with status 1 during its checkpoint window; stopped trainer-0",
                ]),
            ),
            (
                "a trainer without a handler is not waited for",
                checkpointing(),
                with(vec![Input::CheckpointUnheeded, Input::Stopped]),
                then(vec![
                    "log preempted: trainer-0 does not handle SIGUSR1: no checkpoint asked (it would have died of it; see docs/preemption.md): stopping",
                    "tell failure preempted (SIGTERM while training): trainer-0 does not handle SIGUSR1: no checkpoint asked (it would have died of it; see docs/preemption.md) (restart true)",
                    "stop trainer+pserver 15",
                    "fail 143 received SIGTERM; trainer-0 does not handle SIGUSR1: no checkpoint asked (it would have died of it; see docs/preemption.md); stopped trainer-0 and pserver-0",
                ]),
            ),
            (
                "a second stop signal ends the window, by the first signal",
                checkpointing(),
                with(vec![Input::Signal(libc::SIGINT), Input::Stopped]),
                then(vec![
                    "log preempted: a second stop signal ended its checkpoint window: stopping",
                    "tell failure preempted (SIGTERM while training): a second stop signal ended its checkpoint window (restart true)",
                    "stop trainer+pserver 15",
                    "fail 143 received SIGTERM; a second stop signal ended its checkpoint window; stopped trainer-0 and pserver-0",
                ]),
            ),
            (
                "the job's loss ends the window",
                checkpointing(),
                with(vec![Input::PeerLost("peer pod p-2 was deleted".into()), Input::Stopped]),
                then(vec![
                    "log preempted: peer pod p-2 was deleted during its checkpoint window: stopping",
                    "tell failure preempted (SIGTERM while training): peer pod p-2 was deleted during its checkpoint window (restart true)",
                    "stop trainer+pserver 15",
                    "fail 143 received SIGTERM; peer pod p-2 was deleted during its checkpoint window; stopped trainer-0 and pserver-0",
                ]),
            ),
            (
                "a peer's preemption asks this trainer, which goes on",
                checkpointing(),
                vec![
                    Input::PserversUp,
                    Input::CheckpointAsked("pod p-1 at T: preempted (SIGTERM while training)".into()),
                    exited(Role::Trainer, 0),
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "log pod p-1 at T: preempted (SIGTERM while training): asking trainer-0 for a checkpoint (SIGUSR1)",
                    "ask checkpoint",
                    "tell done",
                    "log trainer finished; the pserver keeps serving for 30 s",
                    "linger 30",
                ],
            ),
            (
                "a pserver pod of the split layout serves the job's checkpoint, then leaves",
                Setup {
                    gate_on_pservers: false,
                    ..Setup {
                        trainer: false,
                        ..checkpointing()
                    }
                },
                vec![Input::Signal(SIGTERM), Input::CheckpointAsked("echo".into()), Input::WindowOver, Input::Stopped],
                vec![
                    "spawn pserver",
                    "log SIGTERM: this pod is being stopped (preempted, drained or deleted): asking the job's trainers, its pserver serving them meanwhile, for a checkpoint (SIGUSR1); stopping in at most 12 s (PADDLE_LAUNCHER_CHECKPOINT_WINDOW (--checkpoint-window))",
                    "tell preempted preempted (SIGTERM while serving)",
                    "window 12",
                    "log preempted: its checkpoint window (12 s) is over: stopping",
                    "tell failure preempted (SIGTERM while serving): its checkpoint window (12 s) is over (restart true)",
                    "stop pserver 15",
                    "fail 143 received SIGTERM; its checkpoint window (12 s) is over; stopped pserver-0",
                ],
            ),
            (
                "a trainer that does not handle the signal is not sent it",
                checkpointing(),
                vec![
                    Input::PserversUp,
                    Input::CheckpointAsked("p-1 preempted".into()),
                    Input::CheckpointUnheeded,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "log p-1 preempted: asking trainer-0 for a checkpoint (SIGUSR1)",
                    "ask checkpoint",
                    "log trainer-0 does not handle SIGUSR1: no checkpoint asked (it would have died of it; see docs/preemption.md)",
                ],
            ),
            (
                "the checkpoint signal sent to the launcher asks the trainer, not forwarded blindly",
                checkpointing(),
                vec![Input::Signal(libc::SIGUSR1), Input::PserversUp, Input::Signal(libc::SIGUSR1)],
                vec![
                    "spawn pserver",
                    "probe",
                    "log SIGUSR1 received: no trainer runs to checkpoint; not forwarded",
                    "spawn trainer",
                    "log SIGUSR1 received: asking trainer-0 for a checkpoint",
                    "ask checkpoint",
                ],
            ),
            (
                "without a checkpoint signal nothing is asked and TERM stops at once",
                setup(true, true),
                with(vec![Input::CheckpointAsked("p-1 preempted".into())]),
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop trainer+pserver 15",
                ],
            ),
            (
                "an interactive ^C stops at once",
                checkpointing(),
                vec![Input::PserversUp, Input::Signal(libc::SIGINT), Input::Stopped],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop trainer+pserver 2",
                    "fail 130 received SIGINT; stopped trainer-0 and pserver-0",
                ],
            ),
            (
                "before the trainer runs, TERM stops at once, still a preemption",
                checkpointing(),
                vec![Input::Signal(SIGTERM), Input::Stopped],
                vec![
                    "spawn pserver",
                    "probe",
                    "tell preempted preempted (SIGTERM before its trainer started)",
                    "stop pserver 15",
                    "fail 143 received SIGTERM while waiting for the pservers",
                ],
            ),
        ];
        for (name, setup, inputs, expected) in cases {
            assert_eq!(run(setup, inputs), expected, "{name}");
        }
    }

    /// Runs the inputs and returns every command, rendered.
    fn run(setup: Setup, inputs: Vec<Input>) -> Vec<String> {
        let (mut machine, first) = Lifecycle::start(setup);
        let mut all = show(&first);
        for input in inputs {
            all.extend(show(&machine.step(input)));
        }
        all
    }

    /// A pod of several trainer processes (collective: no pserver) is one trainer: the first
    /// process that fails ends it with its own status and name, its siblings stopped; all
    /// succeeding is its success; in a checkpoint window each saves its part first.
    #[test]
    fn the_pods_trainer_processes_end_as_one() {
        let three = || Setup {
            trainers: 3,
            trainer_names: (0..3)
                .map(|l| format!("trainer id {} of 6 (local rank {l})", 3 + l))
                .collect(),
            trainer_label: "trainers 3-5".into(),
            protocol: Protocol::Collective,
            checkpoint: Some(crate::config::Checkpoint {
                signal: libc::SIGUSR1,
                window: Duration::from_secs(12),
            }),
            ..setup(false, true)
        };
        let ended = |local, code| Input::Exited {
            role: Role::Trainer,
            local,
            ended: Ended::Code(code),
        };
        let cases: Vec<(&str, Vec<Input>, Vec<&str>)> = vec![
            (
                "all succeed: the last one ends the trainer",
                vec![ended(1, 0), ended(0, 0), ended(2, 0)],
                vec![
                    "spawn trainer",
                    "log trainer id 4 of 6 (local rank 1) exited with status 0; 2 of the pod's trainer processes still run",
                    "log trainer id 3 of 6 (local rank 0) exited with status 0; 1 of the pod's trainer processes still run",
                    "tell done",
                    "finish 0 trainer id 5 of 6 (local rank 2) exited with status 0",
                ],
            ),
            (
                "one fails: the job is told, its siblings are stopped, its status and name are the pod's",
                vec![ended(0, 0), ended(2, 3), ended(1, 143), Input::Stopped],
                vec![
                    "spawn trainer",
                    "log trainer id 3 of 6 (local rank 0) exited with status 0; 2 of the pod's trainer processes still run",
                    "tell failure trainer id 5 of 6 (local rank 2) exited with status 3 (restart true, heard first)",
                    "stop trainer 15",
                    "finish 3 trainer id 5 of 6 (local rank 2) exited with status 3",
                ],
            ),
            (
                "the last one to fail finds no sibling to stop",
                vec![ended(0, 0), ended(1, 0), ended(2, 7)],
                vec![
                    "spawn trainer",
                    "log trainer id 3 of 6 (local rank 0) exited with status 0; 2 of the pod's trainer processes still run",
                    "log trainer id 4 of 6 (local rank 1) exited with status 0; 1 of the pod's trainer processes still run",
                    "finish 7 trainer id 5 of 6 (local rank 2) exited with status 7",
                ],
            ),
            (
                "preempted: a failure in the window stops no sibling; the last one ends it",
                vec![
                    Input::Signal(SIGTERM),
                    ended(1, 2),
                    ended(0, 0),
                    ended(2, 0),
                ],
                vec![
                    "spawn trainer",
                    "log SIGTERM: this pod is being stopped (preempted, drained or deleted): asking trainers 3-5 and the job's other trainers for a checkpoint (SIGUSR1); stopping in at most 12 s (PADDLE_LAUNCHER_CHECKPOINT_WINDOW (--checkpoint-window))",
                    "tell preempted preempted (SIGTERM while training)",
                    "ask checkpoint",
                    "window 12",
                    "log trainer id 4 of 6 (local rank 1) exited with status 2; 2 of the pod's trainer processes still run",
                    "log trainer id 3 of 6 (local rank 0) exited with status 0; 1 of the pod's trainer processes still run",
                    "log preempted: trainers 3-5 exited with status 2 within its checkpoint window: stopping",
                    "tell failure preempted (SIGTERM while training): trainers 3-5 exited with status 2 within its checkpoint window (restart true)",
                    "fail 143 received SIGTERM; trainers 3-5 exited with status 2 within its checkpoint window",
                ],
            ),
            (
                "a peer lost: every process is stopped by group",
                vec![Input::PeerLost("pod p-0 lost".into()), ended(0, 143)],
                vec![
                    "spawn trainer",
                    "stop trainer 15",
                ],
            ),
        ];
        for (name, inputs, expected) in cases {
            assert_eq!(run(three(), inputs), expected, "{name}");
        }
        // A spawn that fails for local rank 1: local rank 0 runs and is stopped.
        let spawn_failed = Input::SpawnFailed {
            role: Role::Trainer,
            local: 1,
            error: Error::Spawn {
                label: "trainer-4".into(),
                command: "nope".into(),
                why: "not found".into(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            },
        };
        let shown = run(three(), vec![spawn_failed, ended(0, 143), Input::Stopped]);
        assert!(
            shown[1].starts_with("tell failure ")
                && shown[1].ends_with("(restart false, heard first)"),
            "a command not found is so on every pod: {shown:?}"
        );
        assert_eq!(shown[2], "stop trainer 15", "{shown:?}");
        assert!(shown[3].starts_with("fail 127"), "{shown:?}");
    }

    #[test]
    fn transitions() {
        let both = || setup(true, true);
        // A trainer judged hung ("stuck") while training, then `inputs`; what follows the
        // request for its stacks.
        let stuck = |inputs: Vec<Input>| {
            let mut all = vec![Input::PserversUp, Input::Hung("stuck".into())];
            all.extend(inputs);
            all
        };
        let stuck_then = |commands: Vec<&'static str>| {
            let mut all = vec![
                "spawn pserver",
                "probe",
                "spawn trainer",
                "tell hang stuck (restart true)",
                "log stuck: asking it for its threads' stacks (SIGUSR2)",
                "dump stacks",
            ];
            all.extend(commands);
            all
        };
        let cases: Vec<(&str, Setup, Vec<Input>, Vec<&str>)> = vec![
            (
                "happy path with linger",
                both(),
                vec![
                    Input::PserversUp,
                    exited(Role::Trainer, 0),
                    Input::LingerOver,
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "tell done",
                    "log trainer finished; the pserver keeps serving for 30 s",
                    "linger 30",
                    "stop pserver 15",
                    "finish 0 trainer exited with status 0",
                ],
            ),
            (
                "the trainer's failure is the pod's status",
                both(),
                vec![Input::PserversUp, exited(Role::Trainer, 3), Input::Stopped],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop pserver 15",
                    "finish 3 trainer exited with status 3",
                ],
            ),
            (
                "TERM while training stops both, 143",
                both(),
                vec![Input::PserversUp, Input::Signal(SIGTERM), Input::Stopped],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop trainer+pserver 15",
                    "fail 143 received SIGTERM; stopped trainer-0 and pserver-0",
                ],
            ),
            (
                "other signals are forwarded in every phase",
                both(),
                vec![
                    Input::Signal(SIGHUP),
                    Input::PserversUp,
                    Input::Signal(SIGHUP),
                ],
                vec!["spawn pserver", "probe", "forward 1", "spawn trainer", "forward 1"],
            ),
            (
                "a pserver that exits 0 before the trainer is explained",
                both(),
                vec![exited(Role::Pserver, 0)],
                vec![
                    "spawn pserver",
                    "probe",
                    "fail 75 pserver exited with status 0 before the trainer started: the image's `paddle` is probably PaddlePaddle 2 or later, whose `paddle pserver` only prints its version; the v1/v2 protocols need PaddlePaddle 0.x/1.x (see docs/roles-and-protocols.md), or use --protocol fleet (parameter server, Paddle 2.x) or --protocol collective (data parallel)",
                ],
            ),
            (
                "the pserver dying under the trainer stops it, 75",
                both(),
                vec![Input::PserversUp, exited(Role::Pserver, 9), Input::Stopped],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop trainer 15",
                    "fail 75 pserver exited with status 9 while the trainer was running; the trainer was stopped",
                ],
            ),
            (
                "pservers that never listen, 74",
                both(),
                vec![
                    Input::PserversTimedOut {
                        waiting: vec!["10.0.0.2:7164".into()],
                        total: 2,
                        limit_s: 300,
                    },
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "stop pserver 15",
                    "fail 74 1 of 2 pserver endpoints never accepted a connection within 300 s (PADDLE_LAUNCHER_PSERVER_TIMEOUT): 10.0.0.2:7164",
                ],
            ),
            (
                "a lost peer stops both, 78; while lingering it is only logged",
                both(),
                vec![
                    Input::PserversUp,
                    exited(Role::Trainer, 0),
                    Input::PeerLost("peer pod p-1 has Failed".into()),
                    exited(Role::Pserver, 0),
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "tell done",
                    "log trainer finished; the pserver keeps serving for 30 s",
                    "linger 30",
                    "log peer pod p-1 has Failed (ignored: this trainer already succeeded)",
                    "finish 0 trainer exited with status 0",
                ],
            ),
            (
                "a lost peer while training",
                both(),
                vec![
                    Input::PserversUp,
                    Input::PeerLost("peer pod p-1 was deleted".into()),
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop trainer+pserver 15",
                    "fail 78 job stopped: peer pod p-1 was deleted; stopped trainer-0 and pserver-0 so that the Job can restart cleanly",
                ],
            ),
            (
                "collective: no pserver, no gate",
                setup(false, true),
                vec![Input::Signal(SIGINT), Input::Stopped],
                vec![
                    "spawn trainer",
                    "stop trainer 2",
                    "fail 130 received SIGINT; stopped trainer-0",
                ],
            ),
            (
                "split pserver: done when the trainers are, and it does not end by itself",
                setup(true, false),
                vec![
                    Input::JobDone(Ok("all 3 trainer pods `paddle-job=j` Succeeded".into())),
                    Input::LingerOver,
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "log all 3 trainer pods `paddle-job=j` Succeeded: the pserver may end by itself within 5 s, else it is stopped",
                    "linger 5",
                    "stop pserver 15",
                    "finish 0 all 3 trainer pods `paddle-job=j` Succeeded: stopped the pserver",
                ],
            ),
            (
                "split pserver: done when the trainers are, and stopped by them (stop_server)",
                setup(true, false),
                vec![
                    Input::JobDone(Ok("all 3 trainer pods `paddle-job=j` Succeeded".into())),
                    exited(Role::Pserver, 0),
                ],
                vec![
                    "spawn pserver",
                    "log all 3 trainer pods `paddle-job=j` Succeeded: the pserver may end by itself within 5 s, else it is stopped",
                    "linger 5",
                    "finish 0 all 3 trainer pods `paddle-job=j` Succeeded: the pserver ended by itself",
                ],
            ),
            (
                "split pserver: its own failure after the trainers are done is reported, not fatal",
                setup(true, false),
                vec![
                    Input::JobDone(Ok("all 3 Succeeded".into())),
                    Input::PeerLost("peer pod t-1 has Failed".into()),
                    exited(Role::Pserver, 1),
                ],
                vec![
                    "spawn pserver",
                    "log all 3 Succeeded: the pserver may end by itself within 5 s, else it is stopped",
                    "linger 5",
                    "log peer pod t-1 has Failed (ignored: every trainer pod Succeeded)",
                    "finish 0 all 3 Succeeded: the pserver exited with status 1 (ignored: the trainers are done)",
                ],
            ),
            (
                "split pserver: a signal while it may end by itself",
                setup(true, false),
                vec![
                    Input::JobDone(Ok("all 3 Succeeded".into())),
                    Input::Signal(SIGINT),
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "log all 3 Succeeded: the pserver may end by itself within 5 s, else it is stopped",
                    "linger 5",
                    "stop pserver 2",
                    "fail 130 received SIGINT; stopped the pserver",
                ],
            ),
            (
                "split pserver: the wait is at most --linger, none with 0",
                {
                    let mut short = setup(true, false);
                    short.linger = Duration::from_secs(2);
                    short
                },
                vec![Input::JobDone(Ok("all 3 Succeeded".into()))],
                vec![
                    "spawn pserver",
                    "log all 3 Succeeded: the pserver may end by itself within 2 s, else it is stopped",
                    "linger 2",
                ],
            ),
            (
                "split pserver, linger 0: stopped at once",
                {
                    let mut none = setup(true, false);
                    none.linger = Duration::ZERO;
                    none
                },
                vec![Input::JobDone(Ok("all 3 Succeeded".into())), Input::Stopped],
                vec![
                    "spawn pserver",
                    "stop pserver 15",
                    "finish 0 all 3 Succeeded: stopped the pserver",
                ],
            ),
            (
                "split pserver: no longer allowed to watch, 72",
                setup(true, false),
                vec![Input::JobDone(Err("403".into())), Input::Stopped],
                vec![
                    "spawn pserver",
                    "stop pserver 15",
                    "fail 72 stopped the pserver: it can no longer tell when the trainer pods are done: 403",
                ],
            ),
            (
                "a trainer SIGKILLed from outside is 137, with where to look for the OOM killer",
                both(),
                vec![
                    Input::PserversUp,
                    Input::Exited {
                        role: Role::Trainer,
                        ended: Ended::Signal(libc::SIGKILL),
                        local: 0,
                    },
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop pserver 15",
                    "finish 137 trainer was killed by SIGKILL (not by the launcher: most often the kernel's out-of-memory killer; check the container's memory limit, `kubectl describe pod` and the node's kernel log)",
                ],
            ),
            (
                "a hung trainer is asked for its stacks, then every group is stopped, status 80",
                both(),
                vec![
                    Input::PserversUp,
                    Input::Hung("trainer-0 made no progress for 30 s".into()),
                    // Nothing else is started or stopped meanwhile, not even by the end of the
                    // trainer's leader (a shell, while its program still writes the stacks).
                    Input::PeerLost("p-1 deleted".into()),
                    exited(Role::Trainer, 140),
                    Input::DumpOver,
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    // Told to the job before anything is stopped.
                    "tell hang trainer-0 made no progress for 30 s (restart true)",
                    "log trainer-0 made no progress for 30 s: asking it for its threads' stacks (SIGUSR2)",
                    "dump stacks",
                    "log p-1 deleted (while asking the hung trainer for its stacks)",
                    // The trainer's group too: its shell may have died with the program alive.
                    "stop trainer+pserver 15",
                    "fail 80 trainer-0 made no progress for 30 s",
                ],
            ),
            (
                "the job hangs (the channel's verdict): this pod's trainer is asked for its stacks too, status 80 naming the job's cause",
                both(),
                vec![
                    Input::PserversUp,
                    Input::JobHung("the job hangs: suspect pod p-1".into()),
                    Input::DumpOver,
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "log the job hangs: suspect pod p-1: asking trainer-0 for its threads' stacks (SIGUSR2)",
                    "dump stacks",
                    "stop trainer+pserver 15",
                    "fail 80 job stopped: the job hangs: suspect pod p-1; stopped trainer-0 and pserver-0 after asking for the stacks",
                ],
            ),
            (
                "the job's hang before this pod's trainer started is a loss like another",
                both(),
                vec![Input::JobHung("the job hangs: suspect pod p-1".into()), Input::Stopped],
                vec![
                    "spawn pserver",
                    "probe",
                    "stop pserver 15",
                    "fail 78 job stopped: the job hangs: suspect pod p-1; stopped the pserver so that the Job can restart cleanly",
                ],
            ),
            (
                "a stop signal after the trainer's shell died during the dump stops its group too",
                both(),
                stuck(vec![
                    exited(Role::Trainer, 140),
                    Input::Signal(SIGTERM),
                    Input::Stopped,
                ]),
                stuck_then(vec![
                    "stop trainer+pserver 15",
                    "fail 143 received SIGTERM; stopped trainer-0 and pserver-0 (judged hung)",
                ]),
            ),
            (
                "a trainer with no handler for the stack signal is said to have left no stacks",
                both(),
                stuck(vec![
                    Input::Exited {
                        role: Role::Trainer,
                        ended: Ended::Signal(libc::SIGUSR2),
                        local: 0,
                    },
                    Input::DumpOver,
                    Input::Stopped,
                ]),
                stuck_then(vec![
                    "log the trainer died of SIGUSR2 without a handler: no Python stacks (not a Python trainer under the launcher's sitecustomize; its last output is in the log)",
                    "stop trainer+pserver 15",
                    "fail 80 stuck",
                ]),
            ),
            (
                "a stop signal while the stacks are asked for stops every process, 143",
                both(),
                stuck(vec![
                    Input::Signal(SIGTERM),
                    Input::Stopped,
                ]),
                stuck_then(vec![
                    "stop trainer+pserver 15",
                    "fail 143 received SIGTERM; stopped trainer-0 and pserver-0 (judged hung)",
                ]),
            ),
            (
                "a hung trainer that goes on after its dump is stopped with the rest after the dump wait",
                both(),
                stuck(vec![
                    Input::DumpOver,
                    Input::Stopped,
                ]),
                stuck_then(vec![
                    "stop trainer+pserver 15",
                    "fail 80 stuck",
                ]),
            ),
            (
                "a command that cannot start stops what runs",
                both(),
                vec![
                    Input::PserversUp,
                    Input::SpawnFailed {
                        role: Role::Trainer,
                        local: 0,
                        error: Error::Spawn {
                            label: "trainer-0".into(),
                            command: "nope".into(),
                            why: "not found on PATH (/bin)".into(),
                            source: std::io::Error::from(std::io::ErrorKind::NotFound),
                        },
                    },
                    Input::Stopped,
                ],
                vec![
                    "spawn pserver",
                    "probe",
                    "spawn trainer",
                    "stop pserver 15",
                    "fail 127 cannot start the trainer-0 command `nope`: not found on PATH (/bin)",
                ],
            ),
            (
                "nothing happens after the end",
                setup(false, true),
                vec![
                    exited(Role::Trainer, 0),
                    Input::Stopped,
                    Input::Signal(SIGTERM),
                    exited(Role::Trainer, 1),
                ],
                vec![
                    "spawn trainer",
                    "tell done",
                    "finish 0 trainer exited with status 0",
                ],
            ),
        ];
        for (name, setup, inputs, expected) in cases {
            assert_eq!(run(setup, inputs), expected, "{name}");
        }
    }

    #[test]
    fn no_linger_without_a_running_pserver_or_with_zero() {
        let mut quick = setup(true, true);
        quick.linger = Duration::ZERO;
        assert_eq!(
            run(quick, vec![Input::PserversUp, exited(Role::Trainer, 0)]),
            [
                "spawn pserver",
                "probe",
                "spawn trainer",
                "tell done",
                "stop pserver 15"
            ]
        );
        assert_eq!(
            run(
                setup(true, true),
                vec![
                    Input::PserversUp,
                    exited(Role::Pserver, 9),
                    Input::Stopped,
                ]
            )
            .last()
            .map(String::as_str),
            Some("fail 75 pserver exited with status 9 while the trainer was running; the trainer was stopped")
        );
        // v1's `paddle pserver` never ends by itself: an exit 0 is a death too.
        assert_eq!(
            run(
                setup(true, true),
                vec![Input::PserversUp, exited(Role::Pserver, 0), Input::Stopped]
            )
            .last()
            .map(String::as_str),
            Some("fail 75 pserver exited with status 0 while the trainer was running; the trainer was stopped")
        );
        // fleet: a pserver that ends with status 0 was stopped by the job (Paddle's
        // stop_server): the trainer's own end decides, success or failure, within a minute.
        let fleet = || Setup {
            protocol: Protocol::Fleet,
            ..setup(true, true)
        };
        for (trainer_status, last) in [
            (
                0,
                &["tell done", "finish 0 trainer exited with status 0"][..],
            ),
            (3, &["finish 3 trainer exited with status 3"][..]),
        ] {
            let shown = run(
                fleet(),
                vec![
                    Input::PserversUp,
                    exited(Role::Pserver, 0),
                    exited(Role::Trainer, trainer_status),
                ],
            );
            assert_eq!(
                shown[3..5],
                [
                    "log pserver exited with status 0 while the trainer runs (stopped by the job): the trainer's end decides, within 60 s",
                    "linger 60",
                ]
            );
            assert_eq!(shown[5..], *last);
        }
        assert_eq!(
            run(
                fleet(),
                vec![
                    Input::PserversUp,
                    exited(Role::Pserver, 0),
                    Input::LingerOver,
                    Input::Stopped,
                ]
            )[5..],
            [
                "stop trainer 15",
                "fail 75 pserver exited with status 0 and the trainer had not ended a minute later; the trainer was stopped",
            ]
        );
        // The trainer still runs after its pserver ended: a hang, its own or the job's, is
        // judged as while training (its stacks asked for, status 80).
        for (hang, last) in [
            (Input::Hung("trainer-0 made no progress for 30 s".into()), "fail 80 trainer-0 made no progress for 30 s"),
            (Input::JobHung("the job hangs: suspect pod p-1".into()), "fail 80 job stopped: the job hangs: suspect pod p-1; stopped trainer-0 and pserver-0 after asking for the stacks"),
        ] {
            let shown = run(
                fleet(),
                vec![Input::PserversUp, exited(Role::Pserver, 0), hang, Input::DumpOver, Input::Stopped],
            );
            // Every group of the pod, the ended pserver's too (its children may outlive it).
            let at = shown.iter().position(|c| c == "dump stacks").unwrap();
            assert_eq!(shown[at..], ["dump stacks", "stop trainer+pserver 15", last], "{shown:?}");
        }
        assert_eq!(
            run(
                fleet(),
                vec![
                    Input::PserversUp,
                    exited(Role::Pserver, 0),
                    Input::Signal(SIGINT),
                    Input::Stopped,
                ]
            )[5..],
            [
                "stop trainer 2",
                "fail 130 received SIGINT; stopped trainer-0"
            ]
        );
        // A pserver pod of the split layout with a channel: its pserver stopped by the
        // trainers leaves it a member until the job's end, a success or a loss it rejoins from;
        // without a channel it ends with its pserver, as the API alone cannot tell a loss.
        let split = |waits_for_the_job| Setup {
            protocol: Protocol::Fleet,
            gate_on_pservers: false,
            waits_for_the_job,
            ..setup(true, false)
        };
        let served = "log pserver-0 exited with status 0: staying a member of the job until its trainers are done";
        let done = || Input::JobDone(Ok("all 2 trainer pods `paddle-job=j` Succeeded".into()));
        assert_eq!(
            run(split(true), vec![exited(Role::Pserver, 0), done()]),
            [
                "spawn pserver",
                served,
                "tell done",
                "finish 0 pserver exited with status 0; all 2 trainer pods `paddle-job=j` Succeeded",
            ]
        );
        let lost = Input::PeerLost("pod t-1: trainer exited with status 3".into());
        let shown = run(split(true), vec![exited(Role::Pserver, 0), lost]);
        assert_eq!(shown[1..3], [served, "tell done"]);
        assert!(shown[3].starts_with("fail "), "{shown:?}");
        assert!(
            shown[3].contains("trainer exited with status 3"),
            "{shown:?}"
        );
        // Its part is done (told, so that its end is no loss to the job): stopped, it asks
        // nothing of the others.
        let preempting = Setup {
            checkpoint: Some(crate::config::Checkpoint {
                signal: libc::SIGUSR1,
                window: Duration::from_secs(12),
            }),
            ..split(true)
        };
        assert_eq!(
            run(
                preempting,
                vec![exited(Role::Pserver, 0), Input::Signal(SIGTERM)]
            )[3..],
            ["fail 143 received SIGTERM; its pserver had ended"]
        );
        assert_eq!(
            run(split(false), vec![exited(Role::Pserver, 0), done()]),
            ["spawn pserver", "finish 0 pserver exited with status 0"]
        );
    }

    /// What a failed pod tells the others: whether they may restart without it, or with the
    /// pod that replaces it.
    #[test]
    fn a_failure_tells_the_others_whether_a_restart_could_help() {
        let cases: Vec<(Result<Outcome, Error>, bool)> = vec![
            (Ok(Outcome::new(3, "trainer exited with status 3")), true),
            (
                Err(Error::PeerLost {
                    reason: "peer pod p-1 was deleted".into(),
                    stopped: "trainer-0".into(),
                }),
                true,
            ),
            // Deleted, preempted, drained: the pod that replaces it can rejoin.
            (Err(Error::stopped(SIGTERM, "; stopped trainer-0")), true),
            // The same image on every pod: a command that cannot start never will.
            (
                Err(Error::Spawn {
                    label: "trainer-0".into(),
                    command: "nope".into(),
                    why: "not found on PATH (/bin)".into(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                }),
                false,
            ),
            // A fork that failed on this node (EAGAIN) says nothing of the others.
            (
                Err(Error::Spawn {
                    label: "trainer-0".into(),
                    command: "python".into(),
                    why: "not found on PATH (/bin)".into(),
                    source: std::io::Error::from_raw_os_error(libc::EAGAIN),
                }),
                true,
            ),
        ];
        for (result, expected) in cases {
            assert_eq!(others_may_restart(&result), expected, "{result:?}");
        }
    }

    #[test]
    fn a_restart_count_said_is_read_back() {
        for count in [1, 2, 17] {
            let line = format!(
                "trainer exited with status 0 ({} of the job)",
                restarts_said(count)
            );
            assert_eq!(restarts_read(&line), Some(count), "{line}");
        }
        assert_eq!(restarts_said(1), "after 1 restart");
        assert_eq!(restarts_read("trainer exited with status 0"), None);
    }

    #[test]
    fn local_pods() {
        let exited = |pod: &str, code| LocalInput::Exited {
            label: format!("pod {pod}"),
            ended: Ended::Code(code),
        };
        let run = |pods, inputs: Vec<LocalInput>| {
            let mut machine = LocalPods::new(pods);
            inputs
                .into_iter()
                .flat_map(|i| machine.step(i))
                .map(|c| match c {
                    LocalCommand::Forward(sig) => format!("forward {sig}"),
                    LocalCommand::StopAll(sig) => format!("stop all {sig}"),
                    LocalCommand::SettleFor => "settle".to_string(),
                    LocalCommand::Finish(Ok(o)) => format!("finish {} {}", o.code, o.reason),
                    LocalCommand::Finish(Err(e)) => format!("fail {} {e}", e.exit_code()),
                })
                .collect::<Vec<_>>()
        };
        let cases: Vec<(&str, usize, Vec<LocalInput>, Vec<&str>)> =
            vec![
            (
                "all succeed",
                2,
                vec![exited("a", 0), exited("b", 0)],
                vec!["finish 0 all 2 simulated pods succeeded"],
            ),
            (
                "the first failure stops the others and is the status",
                3,
                vec![
                    exited("a", 0),
                    exited("b", 4),
                    exited("c", 143),
                    LocalInput::Stopped,
                ],
                vec![
                    "stop all 15",
                    "finish 4 pod b exited with status 4; stopped the other pods",
                ],
            ),
            (
                "a pod ended by another's failure (78) is not the cause: the cause's status wins",
                3,
                vec![exited("a", 78), exited("b", 5), exited("c", 78), LocalInput::Stopped],
                vec![
                    "settle",
                    "stop all 15",
                    "finish 5 pod b exited with status 5; stopped the other pods",
                ],
            ),
            (
                "only consequences: the first 78, once all have ended",
                3,
                vec![exited("a", 78), exited("b", 78), exited("c", 78)],
                vec![
                    "settle",
                    "finish 78 pod a exited with status 78; stopped the other pods",
                ],
            ),
            (
                "a consequence whose cause never ends: stopped after the while",
                2,
                vec![exited("a", 78), LocalInput::Settled, LocalInput::Stopped],
                vec![
                    "settle",
                    "stop all 15",
                    "finish 78 pod a exited with status 78; stopped the other pods",
                ],
            ),
            (
                "the last pod failing needs no stop",
                2,
                vec![exited("a", 0), exited("b", 1)],
                vec!["finish 1 pod b exited with status 1; stopped the other pods"],
            ),
            (
                "TERM stops all; a second is nothing new; HUP is forwarded",
                2,
                vec![
                    LocalInput::Signal(SIGHUP),
                    LocalInput::Signal(SIGTERM),
                    LocalInput::Signal(SIGTERM),
                    exited("a", 143),
                    exited("b", 143),
                    LocalInput::Stopped,
                    exited("c", 1),
                ],
                vec![
                    "forward 1",
                    "stop all 15",
                    "fail 143 received SIGTERM; stopped every simulated pod",
                ],
            ),
        ];
        for (name, pods, inputs, expected) in cases {
            assert_eq!(run(pods, inputs), expected, "{name}");
        }
    }
}
