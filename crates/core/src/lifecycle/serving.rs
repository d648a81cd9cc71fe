//! The pserver's phases of a pod's attempt: serving until the trainers are done, its end, and
//! a pserver gone while its trainer runs.

use super::*;

impl Lifecycle {
    pub fn serving(&mut self, input: Input) -> Vec<Command> {
        match input {
            // A v1/v2 pserver never ends by itself: a 0 there is a pserver gone wrong (most
            // often the wrong Paddle), not a success that would end the job's restarts.
            Input::Exited {
                role: Role::Pserver,
                ended: ended @ Ended::Code(0),
                ..
            } if self.setup.protocol != Protocol::Fleet => self.finish(Err(Error::PserverDied {
                ended: ended.describe(),
                when: "while serving the trainers",
                hint: pserver_hint(self.setup.protocol, ended),
            })),
            Input::Exited {
                role: Role::Pserver,
                ended: ended @ Ended::Code(0),
                ..
            } if self.setup.waits_for_the_job => {
                let line = format!(
                    "{} {}: staying a member of the job until its trainers are done",
                    self.setup.pserver_label,
                    ended.describe()
                );
                self.phase = Phase::ServedOut { ended };
                // Its part is done: its end, whatever it is, is no loss to the job.
                vec![Command::Log(line), Command::TellDone]
            }
            Input::Exited {
                role: Role::Pserver,
                ended,
                ..
            } => self.finish(Ok(Outcome::new(
                ended.exit_code(),
                format!("pserver {}", ended.describe()),
            ))),
            Input::PeerLost(reason) => {
                let stopped = self.setup.pserver_label.clone();
                self.stop_then(
                    vec![Role::Pserver],
                    libc_term(),
                    Err(Error::PeerLost { reason, stopped }),
                )
            }
            // The split layout's trainers are all done: the pserver should end so that the Job
            // completes. Paddle's trainer 0 may be stopping it already (`stop_server`): it gets
            // a moment to end by itself, since a SIGTERM makes Paddle print a crash banner.
            Input::JobDone(Ok(reason)) => {
                let wait = self.setup.linger.min(SELF_STOP_WAIT);
                if wait.is_zero() {
                    return self.stop_then(
                        vec![Role::Pserver],
                        libc_term(),
                        Ok(Outcome::new(
                            exit::SUCCESS,
                            format!("{reason}: stopped the pserver"),
                        )),
                    );
                }
                let line = format!(
                    "{reason}: the pserver may end by itself within {} s, else it is stopped",
                    wait.as_secs()
                );
                self.phase = Phase::TrainersDone { reason };
                vec![Command::Log(line), Command::Linger(wait)]
            }
            // Serving on without knowing when the trainers are done would never end the Job.
            Input::JobDone(Err(refusal)) => self.stop_then(
                vec![Role::Pserver],
                libc_term(),
                Err(Error::WatchRefused { refusal }),
            ),
            _ => self.stay(Phase::Serving),
        }
    }

    /// The pserver ended by itself while the job runs: the trainers' success is this pod's,
    /// the job's loss too (nothing left to stop: it rejoins the restart).
    pub fn served_out(&mut self, ended: Ended, input: Input) -> Vec<Command> {
        match input {
            Input::JobDone(Ok(reason)) => self.finish(Ok(Outcome::new(
                exit::SUCCESS,
                format!("pserver {}; {reason}", ended.describe()),
            ))),
            Input::JobDone(Err(refusal)) => self.finish(Err(Error::WatchRefused { refusal })),
            Input::PeerLost(reason) => self.finish(Err(Error::PeerLost {
                reason,
                stopped: "nothing (its pserver had ended)".into(),
            })),
            _ => self.stay(Phase::ServedOut { ended }),
        }
    }

    pub fn pserver_gone(&mut self, input: Input) -> Vec<Command> {
        let trainer = self.setup.trainer_label.clone();
        match input {
            // The trainer still runs: a hang is judged as while training.
            Input::Hung(reason) => self.ask_for_stacks(reason, false),
            Input::JobHung(reason) => self.ask_for_stacks(reason, true),
            Input::Exited {
                role: Role::Trainer,
                local,
                ended,
            } => {
                let mut commands = Vec::new();
                if ended.exit_code() == 0 {
                    commands.push(Command::TellDone);
                }
                let said = trainer_ended(self.trainer_name(local), ended);
                let outcome = Ok(Outcome::new(ended.exit_code(), said));
                commands.extend(self.stop_then(vec![Role::Trainer], libc_term(), outcome));
                commands
            }
            // A trainer that outlives its stopped pserver this long is stuck on it.
            Input::LingerOver => self.stop_then(
                vec![Role::Trainer],
                libc_term(),
                Err(Error::PserverDied {
                    ended: "exited with status 0".into(),
                    when: "and the trainer had not ended a minute later; the trainer was stopped",
                    hint: "",
                }),
            ),
            Input::PeerLost(reason) => self.stop_then(
                vec![Role::Trainer],
                libc_term(),
                Err(Error::PeerLost {
                    reason,
                    stopped: trainer,
                }),
            ),
            input => {
                let commands = self.checkpoint_asked(input);
                self.phase = Phase::PserverGone;
                commands
            }
        }
    }

    pub fn trainers_done(&mut self, reason: String, input: Input) -> Vec<Command> {
        match input {
            // Every trainer succeeded: the job is done whatever the pserver's last status.
            Input::Exited {
                role: Role::Pserver,
                ended,
                ..
            } => {
                let how = match ended.exit_code() {
                    0 => "the pserver ended by itself".to_string(),
                    _ => format!(
                        "the pserver {} (ignored: the trainers are done)",
                        ended.describe()
                    ),
                };
                self.finish(Ok(Outcome::new(exit::SUCCESS, format!("{reason}: {how}"))))
            }
            Input::LingerOver => self.stop_then(
                vec![Role::Pserver],
                libc_term(),
                Ok(Outcome::new(
                    exit::SUCCESS,
                    format!("{reason}: stopped the pserver"),
                )),
            ),
            Input::PeerLost(lost) => {
                let line = format!("{lost} (ignored: every trainer pod Succeeded)");
                self.phase = Phase::TrainersDone { reason };
                vec![Command::Log(line)]
            }
            _ => self.stay(Phase::TrainersDone { reason }),
        }
    }
}
