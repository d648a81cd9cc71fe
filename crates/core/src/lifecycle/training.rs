//! The trainers' phases of a pod's attempt: waiting for the pservers, training, a checkpoint
//! asked, a preemption's window, the pserver lingering after the trainer, and the stacks of a
//! hang.

use super::*;

impl Lifecycle {
    pub fn waiting_for_pservers(&mut self, input: Input) -> Vec<Command> {
        match input {
            Input::PserversUp => {
                self.phase = Phase::Training;
                vec![self.spawn(Role::Trainer)]
            }
            Input::Exited {
                role: Role::Pserver,
                ended,
                ..
            } => self.finish(Err(Error::PserverDied {
                ended: ended.describe(),
                when: "before the trainer started",
                hint: pserver_hint(self.setup.protocol, ended),
            })),
            Input::PeerLost(reason) => self.stop_then(
                vec![Role::Pserver],
                libc_term(),
                Err(Error::PeerLost {
                    reason,
                    stopped: "the pserver".into(),
                }),
            ),
            Input::PserversTimedOut {
                waiting,
                total,
                limit_s,
            } => self.stop_then(
                vec![Role::Pserver],
                libc_term(),
                Err(Error::PserversNotReady {
                    waiting,
                    total,
                    limit_s,
                }),
            ),
            _ => self.stay(Phase::WaitingForPservers),
        }
    }

    pub fn training(&mut self, input: Input) -> Vec<Command> {
        let all = self.started();
        match input {
            Input::Exited {
                role: Role::Trainer,
                local,
                ended,
            } => self.ended_while_training(local, ended),
            // Stopped by the job itself: Paddle's trainer 0 ends a parameter-server job with
            // `stop_server` once every trainer is done, while the others are still exiting.
            // Only the trainer can tell whether that was too early: its end decides.
            // (v1/v2's `paddle pserver` never ends by itself: an exit there is a death.)
            Input::Exited {
                role: Role::Pserver,
                ended,
                ..
            } if ended.exit_code() == 0 && self.setup.protocol == Protocol::Fleet => {
                let line = format!(
                    "pserver {} while the trainer runs (stopped by the job): the trainer's end decides, within {} s",
                    ended.describe(),
                    PSERVER_GONE_WAIT.as_secs()
                );
                self.phase = Phase::PserverGone;
                vec![Command::Log(line), Command::Linger(PSERVER_GONE_WAIT)]
            }
            Input::Exited {
                role: Role::Pserver,
                ended,
                ..
            } => self.stop_then(
                vec![Role::Trainer],
                libc_term(),
                Err(Error::PserverDied {
                    ended: ended.describe(),
                    when: "while the trainer was running; the trainer was stopped",
                    hint: "",
                }),
            ),
            Input::PeerLost(reason) => {
                let stopped = self.names(&all);
                self.stop_then(all, libc_term(), Err(Error::PeerLost { reason, stopped }))
            }
            Input::Hung(reason) => self.ask_for_stacks(reason, false),
            Input::JobHung(reason) => self.ask_for_stacks(reason, true),
            input => {
                let commands = self.checkpoint_asked(input);
                self.phase = Phase::Training;
                commands
            }
        }
    }

    /// A trainer process ended while training: a success is told to the job (and the pserver
    /// may linger to serve the others); a failure is told first, then the pod's processes are
    /// stopped, the trainer's end deciding the attempt's.
    pub fn ended_while_training(&mut self, local: usize, ended: Ended) -> Vec<Command> {
        let trainer = Outcome::new(
            ended.exit_code(),
            trainer_ended(self.trainer_name(local), ended),
        );
        let succeeded = ended.exit_code() == 0;
        let mut commands = Vec::new();
        if succeeded {
            commands.push(Command::TellDone);
        }
        let pserver_serves = self.running.contains(&Role::Pserver);
        if succeeded && pserver_serves && !self.setup.linger.is_zero() {
            let seconds = self.setup.linger.as_secs();
            self.phase = Phase::Lingering { trainer };
            commands.extend([
                Command::Log(format!(
                    "trainer finished; the pserver keeps serving for {seconds} s"
                )),
                Command::Linger(self.setup.linger),
            ]);
            return commands;
        }
        // A failed process's siblings too: they would wait for it in a collective. The
        // job hears of the failure first.
        if !succeeded && self.running.contains(&Role::Trainer) {
            commands.push(Command::TellEnd {
                end: Loss::of_pod(trainer.reason.clone()),
                heard_first: true,
            });
        }
        let rest = vec![Role::Trainer, Role::Pserver];
        commands.extend(self.stop_then(rest, libc_term(), Ok(trainer)));
        commands
    }

    /// A trainer running on is asked for a checkpoint when the job asks for one; one that does
    /// not handle the signal is not sent it (it would die of it), and the log says so.
    pub fn checkpoint_asked(&self, input: Input) -> Vec<Command> {
        let Some(checkpoint) = self.setup.checkpoint else {
            return Vec::new();
        };
        let trainer = &self.setup.trainer_label;
        let signal = crate::exit::signal_name(checkpoint.signal);
        match input {
            Input::CheckpointAsked(reason) => vec![
                Command::Log(format!(
                    "{reason}: asking {trainer} for a checkpoint ({signal})"
                )),
                Command::AskCheckpoint,
            ],
            Input::CheckpointUnheeded => vec![Command::Log(unheeded(trainer, &signal))],
            _ => Vec::new(),
        }
    }

    /// Told to stop while training (or, a pserver pod of the split layout, serving): this pod
    /// is preempted, drained or deleted. The trainer is asked for a checkpoint, and so, through
    /// the channel, is every other trainer of the job (a checkpoint's collectives need every
    /// rank, and a parameter server's checkpoint its pservers); the processes stop at the
    /// window's end.
    pub fn preempted(&mut self, signal: i32) -> Vec<Command> {
        let Some(checkpoint) = self.setup.checkpoint else {
            return Vec::new();
        };
        let received = crate::exit::signal_name(signal);
        let asked = crate::exit::signal_name(checkpoint.signal);
        let window = self.checkpoint_window().unwrap_or(checkpoint.window);
        let whom = match self.setup.trainer {
            true => format!("{} and the job's other trainers", self.setup.trainer_label),
            false => "the job's trainers, its pserver serving them meanwhile,".to_string(),
        };
        let line = format!(
            "{received}: this pod is being stopped (preempted, drained or deleted): asking {whom} for a checkpoint ({asked}); stopping in at most {} ({})",
            seconds_said(window),
            crate::config::CHECKPOINT_WINDOW
        );
        self.phase = Phase::Checkpointing { signal };
        let mut commands = vec![
            Command::Log(line),
            Command::TellPreempted(self.preempted_while(signal)),
        ];
        if self.setup.trainer {
            commands.push(Command::AskCheckpoint);
        }
        commands.push(Command::Window(window));
        commands
    }

    /// "preempted (SIGTERM while training)": what the job is told of this pod's preemption.
    pub fn preempted_while(&self, signal: i32) -> String {
        let doing = match self.setup.trainer {
            true => "training",
            false => "serving",
        };
        format!(
            "preempted ({} while {doing})",
            crate::exit::signal_name(signal)
        )
    }

    /// A preempted pod's checkpoint window: it ends when the trainer has ended (its checkpoint
    /// is saved), when the window is over, or when waiting is pointless (the trainer cannot
    /// checkpoint, a peer is gone, another stop signal); the job is told before anything stops.
    pub fn checkpointing(&mut self, signal: i32, input: Input) -> Vec<Command> {
        let window = seconds_said(self.checkpoint_window().unwrap_or_default());
        let trainer = self.setup.trainer_label.clone();
        let why = match input {
            Input::Exited {
                role: Role::Trainer,
                ended,
                ..
            } => format!(
                "{trainer} {} within its checkpoint window",
                ended.describe()
            ),
            Input::WindowOver => format!("its checkpoint window ({window}) is over"),
            Input::CheckpointUnheeded => {
                let asked = self.setup.checkpoint.map_or(0, |c| c.signal);
                unheeded(&trainer, &crate::exit::signal_name(asked))
            }
            Input::Signal(_) => "a second stop signal ended its checkpoint window".to_string(),
            Input::PeerLost(reason) | Input::JobHung(reason) => {
                format!("{reason} during its checkpoint window")
            }
            Input::Hung(reason) => format!("{reason} during its checkpoint window"),
            Input::Exited {
                role: Role::Pserver,
                ended,
                ..
            } => format!(
                "the pserver {} during its checkpoint window",
                ended.describe()
            ),
            _ => return self.stay(Phase::Checkpointing { signal }),
        };
        let roles: Vec<Role> = self
            .started()
            .into_iter()
            .filter(|role| self.running.contains(role))
            .collect();
        let doing = match roles.is_empty() {
            true => format!("; {why}"),
            false => format!("; {why}; stopped {}", self.names(&roles)),
        };
        let mut commands = vec![
            Command::Log(format!("preempted: {why}: stopping")),
            Command::TellEnd {
                end: Loss::of_pod(format!("{}: {why}", self.preempted_while(signal))),
                heard_first: false,
            },
        ];
        commands.extend(self.stop_then(roles, signal, Err(Error::stopped(signal, &doing))));
        commands
    }

    pub fn lingering(&mut self, trainer: Outcome, input: Input) -> Vec<Command> {
        match input {
            Input::Exited {
                role: Role::Pserver,
                ..
            } => self.finish(Ok(trainer)),
            Input::LingerOver => self.stop_then(vec![Role::Pserver], libc_term(), Ok(trainer)),
            // This trainer is done: a peer failing now is its own pod's failure.
            Input::PeerLost(reason) => {
                self.phase = Phase::Lingering { trainer };
                vec![Command::Log(format!(
                    "{reason} (ignored: this trainer already succeeded)"
                ))]
            }
            _ => self.stay(Phase::Lingering { trainer }),
        }
    }

    /// Once the hung trainer has had its time to write its stacks, every process stops and the
    /// pod's outcome is the hang.
    pub fn dumping_stacks(&mut self, reason: String, job: bool, input: Input) -> Vec<Command> {
        match input {
            // No handler for the stack signal (not Python, `python -I`, a binary): it died of
            // it without stacks; the log says so. (A success queued before the judgement is seen
            // first: the shell polls the processes before the hang check.)
            Input::Exited {
                role: Role::Trainer,
                ended: Ended::Signal(crate::progress::STACK_SIGNAL),
                ..
            } => {
                let line = "the trainer died of SIGUSR2 without a handler: no Python stacks (not a Python trainer under the launcher's sitecustomize; its last output is in the log)";
                self.phase = Phase::DumpingStacks { reason, job };
                vec![Command::Log(line.to_string())]
            }
            // The leader's end is not the dump's: a shell under `sh -c` dies of the signal at
            // once while the program in its group is still writing its stacks. The dump's time
            // runs out, then every group of the pod is stopped, by group.
            Input::DumpOver => {
                let roles = self.started();
                let ending = match job {
                    true => Error::JobHung {
                        reason,
                        stopped: self.names(&roles),
                    },
                    false => Error::Hung { reason },
                };
                self.phase = Phase::Stopping(Some(Err(ending)));
                vec![Command::Stop {
                    roles,
                    signal: libc_term(),
                }]
            }
            // The job's verdict on the hang supersedes this pod's own judgement: the pod ends
            // with the job's cause, which names the suspect.
            Input::JobHung(cause) => {
                let line = format!("{cause} (while asking the hung trainer for its stacks)");
                self.phase = Phase::DumpingStacks {
                    reason: cause,
                    job: true,
                };
                vec![Command::Log(line)]
            }
            Input::PeerLost(lost) => {
                let line = format!("{lost} (while asking the hung trainer for its stacks)");
                self.phase = Phase::DumpingStacks { reason, job };
                vec![Command::Log(line)]
            }
            _ => self.stay(Phase::DumpingStacks { reason, job }),
        }
    }

    /// The trainer is hung (`job`: the job's verdict; else this pod's own judgement): ask it
    /// for its stacks, then stop every process (`DumpOver`).
    pub fn ask_for_stacks(&mut self, reason: String, job: bool) -> Vec<Command> {
        // Several processes are judged together (ranks in lockstep): all of them hang.
        let (whom, whose) = match self.setup.trainers > 1 {
            true => ("them", "their"),
            false => ("it", "its"),
        };
        let line = match job {
            true => format!(
                "{reason}: asking {} for {whose} threads' stacks (SIGUSR2)",
                self.setup.trainer_label
            ),
            false => format!("{reason}: asking {whom} for {whose} threads' stacks (SIGUSR2)"),
        };
        let mut commands = Vec::new();
        if !job {
            // Told at once, before the dump and the stop: stopping this trainer ends the
            // others' collectives, and their failures must not become the job's cause.
            commands.push(Command::TellEnd {
                end: Loss {
                    reason: reason.clone(),
                    restart: true,
                    kind: Kind::Hang,
                },
                heard_first: false,
            });
        }
        self.phase = Phase::DumpingStacks { reason, job };
        commands.extend([Command::Log(line), Command::DumpStacks]);
        commands
    }
}

/// "12 s", or "2.4 s" for a window a short deletion cut.
fn seconds_said(window: Duration) -> String {
    match window.subsec_millis() {
        0 => format!("{} s", window.as_secs()),
        _ => format!("{:.1} s", window.as_secs_f32()),
    }
}
