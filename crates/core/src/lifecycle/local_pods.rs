//! `local`'s simulated pods, as a pure machine: which pod starts, and how the run ends.

use super::*;

/// `local`: the simulated pods (each a launcher process) as one machine. The first pod that
/// fails stops the others and its status is the run's; a stop signal stops them all. A pod
/// that ended because of another (78: its peer was lost, or the job stopped for another's
/// failure) is not the cause: the others, which are ending on their own, get a while to say
/// theirs, and the first cause among them is the run's status (else the 78).
pub struct LocalPods {
    total: usize,
    running: usize,
    failure: Option<Outcome>,
    /// The first failure was a consequence, and the others were given until `Settled`.
    settling: bool,
    /// Waiting for `Stopped`, then finishing with this.
    stopping: Option<Result<Outcome, Error>>,
    done: bool,
}

#[derive(Debug)]
pub enum LocalInput {
    Signal(i32),
    /// A simulated pod's launcher ended (its label, e.g. "pod demo-1").
    Exited {
        label: String,
        ended: Ended,
    },
    /// Every pod of the last `StopAll` is gone.
    Stopped,
    /// The while given after a consequence (`SettleFor`) is over.
    Settled,
}

#[derive(Debug)]
pub enum LocalCommand {
    Forward(i32),
    StopAll(i32),
    /// Say `Settled` after this long (the pods' grace period and a margin).
    SettleFor,
    Finish(Result<Outcome, Error>),
}

impl LocalPods {
    pub fn new(pods: usize) -> LocalPods {
        LocalPods {
            total: pods,
            running: pods,
            failure: None,
            settling: false,
            stopping: None,
            done: false,
        }
    }

    pub fn step(&mut self, input: LocalInput) -> Vec<LocalCommand> {
        if self.done {
            return Vec::new();
        }
        match input {
            LocalInput::Signal(sig) if !is_stop_signal(sig) => vec![LocalCommand::Forward(sig)],
            LocalInput::Signal(sig) if self.stopping.is_none() => {
                self.stopping = Some(Err(Error::stopped(sig, "; stopped every simulated pod")));
                vec![LocalCommand::StopAll(sig)]
            }
            LocalInput::Signal(_) => Vec::new(),
            LocalInput::Exited { label, ended } => {
                self.running = self.running.saturating_sub(1);
                let code = ended.exit_code();
                let first_cause = self.failure.is_none() || self.settling;
                if code != 0 && first_cause && self.stopping.is_none() {
                    let consequence = code == exit::PEER_LOST;
                    if consequence && self.failure.is_some() {
                        return self.settled_if_all_ended();
                    }
                    let failure = Outcome::new(
                        code,
                        format!("{label} {}; stopped the other pods", ended.describe()),
                    );
                    self.failure = Some(failure.clone());
                    if consequence && self.running > 0 {
                        self.settling = true;
                        return vec![LocalCommand::SettleFor];
                    }
                    self.settling = false;
                    if self.running > 0 {
                        self.stopping = Some(Ok(failure));
                        return vec![LocalCommand::StopAll(libc_term())];
                    }
                }
                if self.running == 0 && self.stopping.is_none() {
                    return self.finish(Ok(self.failure.clone().unwrap_or_else(|| {
                        Outcome::new(
                            exit::SUCCESS,
                            format!("all {} simulated pods succeeded", self.total),
                        )
                    })));
                }
                Vec::new()
            }
            LocalInput::Stopped => match self.stopping.take() {
                Some(then) => self.finish(then),
                None => Vec::new(),
            },
            LocalInput::Settled if self.settling && self.stopping.is_none() => {
                self.settling = false;
                self.stopping = self.failure.clone().map(Ok);
                vec![LocalCommand::StopAll(libc_term())]
            }
            LocalInput::Settled => Vec::new(),
        }
    }

    fn settled_if_all_ended(&mut self) -> Vec<LocalCommand> {
        match (self.running, self.failure.clone()) {
            (0, Some(failure)) => self.finish(Ok(failure)),
            _ => Vec::new(),
        }
    }

    fn finish(&mut self, result: Result<Outcome, Error>) -> Vec<LocalCommand> {
        self.done = true;
        vec![LocalCommand::Finish(result)]
    }
}
