//! A follower's decisions once it is connected, as a pure state machine: what the coordinator
//! says (a frame, the link's end, its silence) and what this launcher asks go in; what the
//! follower says, what this launcher hears and what it knows come out. The task in
//! `follower.rs` carries them out over TCP (connecting, beating, the deadlines), so these
//! decisions are unit-tested and simulated (`simulation.rs`) without a socket.

use crate::ledger::Ledger;
use crate::loss::{Kind, Loss};

use super::coordinator::GROWS;
use super::heard::{after_preemption, judge_preemption, Heard, Known, LogLine, Request};
use super::message::Message;

/// What a connected follower is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A frame from the coordinator.
    Frame(Message),
    /// The coordinator sent nothing for this many seconds (frozen, or its node is gone).
    Silent(u64),
    /// The connection failed or closed (why): a read, or a heartbeat that could not be written.
    Broken(String),
    /// This launcher's request.
    Request(Request),
}

/// What the follower says or does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// To this launcher, in order with the attempt's start and end.
    Hear(Heard),
    /// To the coordinator.
    Say(Message),
    /// What this launcher knows now (the channel's state): a checkpoint asked, the verdict
    /// (the coordinator's, or this follower's last word on it when the coordinator is gone
    /// before saying it), that the job cannot restart, that every trainer succeeded (the
    /// coordinator's goodbye).
    Know(Known),
    /// A member has served its part: its pod's end is no loss.
    Served(String),
    /// Stop reading the coordinator and beating: the link is gone.
    StopListening,
    /// Close the connection (what is queued goes first) and end the task.
    Close,
    /// A line for the pod's log.
    Log(LogLine),
}

/// A follower's state on its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Following {
    /// The coordinator's address, for the reasons said.
    coordinator: String,
    /// `Go` was heard: this launcher's children run (or ran) in the coordinator's attempt.
    running: bool,
    /// This launcher said its trainer succeeded (at most once).
    said_done: bool,
    /// The attempt's end is known here: the coordinator's word, or the link's end made news.
    told: bool,
    /// The connection is still read and beaten.
    listening: bool,
    /// Whether the job may still restart, as this follower knows it.
    may_restart: bool,
    /// A member's preemption, told while running (its reason): the attempt's end, whatever
    /// ends it, is the preemption's, the coordinator's own end too (a preempted coordinator's
    /// pod may be killed before its window is over, with no word of it).
    preemption: Option<String>,
    /// The attempt's ledger (told with `Go`).
    ledger: Ledger,
}

/// A line for the pod's log, of the info level.
fn info(line: String) -> Effect {
    Effect::Log(LogLine::Info(line))
}

/// The job's news for every pod's log (a straggler named), without control characters: the
/// line is the coordinator's, the log this pod's.
fn noted(line: String) -> Effect {
    // As the coordinator says it: a warning (a straggler is news an operator acts on).
    Effect::Log(LogLine::Warn(
        line.chars().filter(|c| !c.is_control()).collect(),
    ))
}

impl Following {
    pub fn new(coordinator: String) -> Following {
        Following {
            coordinator,
            running: false,
            said_done: false,
            told: false,
            listening: true,
            may_restart: true,
            preemption: None,
            ledger: Ledger::first(0),
        }
    }

    /// Whether the connection is still read and beaten.
    pub fn listening(&self) -> bool {
        self.listening
    }

    /// Whether the attempt's end is known here.
    pub fn told(&self) -> bool {
        self.told
    }

    pub fn step(&mut self, input: Input) -> Vec<Effect> {
        match input {
            Input::Request(request) => self.asked(request),
            Input::Frame(message) if self.told => self.after_the_end(message),
            Input::Frame(message) => self.heard(message),
            Input::Silent(seconds) => self.broken(format!(
                "the coordinating launcher at {} sent no heartbeat for {seconds} s (frozen, or its node is gone)",
                self.coordinator
            )),
            Input::Broken(why) => self.broken(format!(
                "lost the connection to the coordinating launcher at {} ({why})",
                self.coordinator
            )),
        }
    }

    /// This launcher asks: what it says goes to the coordinator, in order on the one
    /// connection (a `Done` before the `Stopped` that follows it).
    fn asked(&mut self, request: Request) -> Vec<Effect> {
        let say = |message| vec![Effect::Say(message)];
        match request {
            Request::Failed(loss) => say(Message::Failed(loss)),
            Request::Stopped => say(Message::Stopped),
            Request::Done if self.running && !self.said_done => {
                self.said_done = true;
                say(Message::Done)
            }
            // A preemption asks the job for a checkpoint while its trainers run: not after
            // the attempt's end.
            Request::Preempted(reason) if self.running && !self.told => {
                say(Message::Preempted { reason })
            }
            Request::Finish { succeeded } => {
                let mut effects = Vec::new();
                if succeeded && self.running && !self.said_done && !self.told {
                    self.said_done = true;
                    effects.push(Effect::Say(Message::Done));
                }
                effects.push(Effect::Close);
                effects
            }
            // Only a coordinator's launcher routes the pods it sees lost to its channel.
            Request::Done | Request::PodLost(_) | Request::Preempted(_) => Vec::new(),
        }
    }

    /// What the coordinator says before the attempt's end is known here.
    fn heard(&mut self, message: Message) -> Vec<Effect> {
        match message {
            Message::Beat { note, .. } => note.map(noted).into_iter().collect(),
            Message::Go { membership, ledger } if !self.running => {
                self.running = true;
                self.ledger = ledger;
                vec![Effect::Hear(Heard::Go { membership, ledger })]
            }
            Message::Checkpoint { reason } if self.running => {
                self.preemption.get_or_insert(reason.clone());
                vec![Effect::Know(Known::Checkpoint(reason))]
            }
            // Nothing runs to checkpoint (never sent so).
            Message::Checkpoint { .. } => Vec::new(),
            Message::Regather { reason } if !self.running => {
                self.told = true;
                vec![Effect::Hear(Heard::Regather(reason))]
            }
            Message::Refused { reason } if !self.running => {
                self.told = true;
                vec![Effect::Hear(Heard::Refused(reason))]
            }
            Message::Lost(loss) => {
                self.told = true;
                self.may_restart &= loss.restart;
                vec![Effect::Hear(Heard::Lost(loss))]
            }
            Message::Bye => {
                self.told = true;
                self.may_restart = false;
                let line = info("control channel: the coordinator finished".into());
                vec![
                    line,
                    Effect::Know(Known::CannotRestart),
                    Effect::Know(Known::Succeeded),
                ]
            }
            Message::Served { pod } => vec![Effect::Served(pod)],
            // Also before `Go`: a member joining after a loss hears of a success too.
            Message::Finished { pod } => {
                let mut effects = Vec::new();
                if self.may_restart {
                    effects.push(info(format!("control channel: the trainer of {pod} succeeded: the job cannot start again as a whole")));
                }
                self.may_restart = false;
                effects.push(Effect::Know(Known::CannotRestart));
                effects
            }
            // Before any `Lost` (never sent so, but a launcher must not wait on it).
            Message::Verdict { restart } => {
                self.told = true;
                self.may_restart &= restart;
                vec![
                    Effect::Hear(Heard::Lost(Loss::failure(
                        "the coordinator decided the job's loss".into(),
                        restart,
                    ))),
                    Effect::Know(Known::Verdict(restart)),
                ]
            }
            other => self.broken(format!(
                "lost the connection to the coordinating launcher at {} (unexpected {other:?})",
                self.coordinator
            )),
        }
    }

    /// What the coordinator says once the attempt's end is known here: whether the job may
    /// restart after all (a member finished meanwhile), and the verdict.
    fn after_the_end(&mut self, message: Message) -> Vec<Effect> {
        match message {
            Message::Lost(loss) if !loss.restart => {
                self.may_restart = false;
                vec![Effect::Know(Known::Lost(loss))]
            }
            Message::Bye | Message::Finished { .. } => {
                self.may_restart = false;
                vec![Effect::Know(Known::CannotRestart)]
            }
            Message::Verdict { restart } => vec![Effect::Know(Known::Verdict(restart))],
            Message::Served { pod } => vec![Effect::Served(pod)],
            _ => Vec::new(),
        }
    }

    /// The link ended: before the attempt's end that is news (the job's loss once started,
    /// else gather again), and with no coordinator to decide, what this follower knows is its
    /// verdict. Once read no more, nothing is.
    fn broken(&mut self, reason: String) -> Vec<Effect> {
        if !self.listening {
            return Vec::new();
        }
        self.listening = false;
        let mut effects = vec![Effect::StopListening];
        if !self.told {
            self.told = true;
            effects.push(Effect::Hear(match (self.running, &self.preemption) {
                (true, None) => Heard::Lost(Loss::failure(reason, self.may_restart)),
                // As the coordinator would have said it: the preemption (or the growth) first.
                // The growth's window once a member finished: the growth is over (the job is
                // ending), the loss the job's own, as the coordinator would say it.
                (true, Some(said)) if said.starts_with(GROWS) && !self.may_restart => {
                    Heard::Lost(Loss::failure(reason, false))
                }
                (true, Some(said)) => {
                    let ended = after_preemption(said, &reason);
                    // The growth's checkpoint window: its restart, free whatever the allowance.
                    let judged = match said.starts_with(GROWS) {
                        true => Loss {
                            reason: ended,
                            restart: true,
                            kind: Kind::Growth,
                        },
                        false => judge_preemption(ended, self.ledger),
                    };
                    Heard::Lost(Loss {
                        restart: self.may_restart,
                        ..judged
                    })
                }
                (false, _) => Heard::Regather(reason),
            }));
        }
        effects.push(Effect::Know(Known::Verdict(self.may_restart)));
        effects
    }
}

/// A follower of no particular coordinator, for the shell's simulation's records.
#[cfg(any(test, feature = "testing"))]
impl Default for Following {
    fn default() -> Following {
        Following::new("coordinator".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go() -> Input {
        Input::Frame(Message::Go {
            membership: None,
            ledger: Ledger {
                epoch: 1,
                max_restarts: 2,
                preemptions: 0,
                max_preemptions: crate::verdict::UNBOUNDED_PREEMPTIONS,
                grows: 0,
            },
        })
    }

    fn lost(restart: bool) -> Message {
        Message::Lost(Loss {
            reason: "r".into(),
            restart,
            kind: Kind::Failure,
        })
    }

    /// Runs the inputs through a fresh follower; every effect, in order, but the lines for the
    /// log (`logged` reads those).
    fn run(inputs: Vec<Input>) -> Vec<Effect> {
        let mut following = Following::new("10.0.0.1:6171".into());
        inputs
            .into_iter()
            .flat_map(|input| following.step(input))
            .filter(|effect| !matches!(effect, Effect::Log(_)))
            .collect()
    }

    /// What the follower says for the pod's log: the coordinator's goodbye, and the first
    /// success that ends the job's restarts (not a later one: nothing is news then).
    #[test]
    fn logged() {
        let mut following = Following::new("10.0.0.1:6171".into());
        let logged = |effects: Vec<Effect>| -> Vec<LogLine> {
            effects
                .into_iter()
                .filter_map(|effect| match effect {
                    Effect::Log(line) => Some(line),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(logged(following.step(go())), []);
        let finished = |pod: &str| Input::Frame(Message::Finished { pod: pod.into() });
        assert_eq!(
            logged(following.step(finished("p-2"))),
            [LogLine::Info(
                "control channel: the trainer of p-2 succeeded: the job cannot start again as a whole".into()
            )]
        );
        assert_eq!(logged(following.step(finished("p-3"))), []);
        assert_eq!(
            logged(following.step(Input::Frame(Message::Bye))),
            [LogLine::Info(
                "control channel: the coordinator finished".into()
            )]
        );
    }

    /// The follower's whole table: one row per case.
    #[test]
    fn transitions() {
        use Effect::*;
        let heard_go = Hear(Heard::Go {
            membership: None,
            ledger: Ledger {
                epoch: 1,
                max_restarts: 2,
                preemptions: 0,
                max_preemptions: crate::verdict::UNBOUNDED_PREEMPTIONS,
                grows: 0,
            },
        });
        let request = Input::Request;
        let frame = Input::Frame;
        let rows: Vec<(&str, Vec<Input>, Vec<Effect>)> = vec![
            (
                "a checkpoint ask is heard while running; a second Go breaks the link, the preemption's end",
                vec![
                    go(),
                    frame(Message::Checkpoint { reason: "p-2".into() }),
                    go(),
                ],
                vec![
                    heard_go.clone(),
                    Know(Known::Checkpoint("p-2".into())),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "p-2; then: lost the connection to the coordinating launcher at 10.0.0.1:6171 (unexpected Go { membership: None, ledger: Ledger { epoch: 1, max_restarts: 2, preemptions: 0, max_preemptions: 4294967295, grows: 0 } })".into(),
                        restart: true,
                        kind: Kind::Preemption,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "a preempted coordinator killed in its window: its silence ends the attempt as the preemption's",
                vec![
                    go(),
                    frame(Message::Checkpoint { reason: "pod p-0: preempted (SIGTERM while training)".into() }),
                    Input::Silent(2),
                ],
                vec![
                    heard_go.clone(),
                    Know(Known::Checkpoint("pod p-0: preempted (SIGTERM while training)".into())),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "pod p-0: preempted (SIGTERM while training); then: the coordinating launcher at 10.0.0.1:6171 sent no heartbeat for 2 s (frozen, or its node is gone)".into(),
                        restart: true,
                        kind: Kind::Preemption,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "the growth's checkpoint, then the coordinator's silence: the growth's free restart, whatever the free preemptions left",
                vec![
                    Input::Frame(Message::Go {
                        membership: None,
                        ledger: Ledger { epoch: 3, max_restarts: 0, preemptions: 1, max_preemptions: 0, grows: 1 },
                    }),
                    frame(Message::Checkpoint { reason: "the job grows: p-3 joined (1 pod)".into() }),
                    Input::Silent(2),
                ],
                vec![
                    Hear(Heard::Go {
                        membership: None,
                        ledger: Ledger { epoch: 3, max_restarts: 0, preemptions: 1, max_preemptions: 0, grows: 1 },
                    }),
                    Know(Known::Checkpoint("the job grows: p-3 joined (1 pod)".into())),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "the job grows: p-3 joined (1 pod); then: the coordinating launcher at 10.0.0.1:6171 sent no heartbeat for 2 s (frozen, or its node is gone)".into(),
                        restart: true,
                        kind: Kind::Growth,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "the growth's checkpoint, a member finished, then the coordinator's silence: the growth is over, the loss the job's own",
                vec![
                    go(),
                    frame(Message::Checkpoint { reason: "the job grows: p-3 joined (1 pod)".into() }),
                    frame(Message::Finished { pod: "p-2".into() }),
                    Input::Silent(2),
                ],
                vec![
                    heard_go.clone(),
                    Know(Known::Checkpoint("the job grows: p-3 joined (1 pod)".into())),
                    Know(Known::CannotRestart),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "the coordinating launcher at 10.0.0.1:6171 sent no heartbeat for 2 s (frozen, or its node is gone)".into(),
                        restart: false,
                        kind: Kind::Failure,
                    })),
                    Know(Known::Verdict(false)),
                ],
            ),
            (
                "the job's grows are not among its free preemptions: one free, one grow before, the preemption is free",
                vec![
                    Input::Frame(Message::Go {
                        membership: None,
                        ledger: Ledger { epoch: 3, max_restarts: 2, preemptions: 1, max_preemptions: 1, grows: 1 },
                    }),
                    frame(Message::Checkpoint { reason: "pod p-0: preempted (SIGTERM while training)".into() }),
                    Input::Silent(2),
                ],
                vec![
                    Hear(Heard::Go {
                        membership: None,
                        ledger: Ledger { epoch: 3, max_restarts: 2, preemptions: 1, max_preemptions: 1, grows: 1 },
                    }),
                    Know(Known::Checkpoint("pod p-0: preempted (SIGTERM while training)".into())),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "pod p-0: preempted (SIGTERM while training); then: the coordinating launcher at 10.0.0.1:6171 sent no heartbeat for 2 s (frozen, or its node is gone)".into(),
                        restart: true,
                        kind: Kind::Preemption,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "past the job's free preemptions, the same silence ends the attempt as a failure",
                vec![
                    Input::Frame(Message::Go {
                        membership: None,
                        ledger: Ledger { epoch: 3, max_restarts: 2, preemptions: 1, max_preemptions: 1, grows: 0 },
                    }),
                    frame(Message::Checkpoint { reason: "pod p-0: preempted (SIGTERM while training)".into() }),
                    Input::Silent(2),
                ],
                vec![
                    Hear(Heard::Go {
                        membership: None,
                        ledger: Ledger { epoch: 3, max_restarts: 2, preemptions: 1, max_preemptions: 1, grows: 0 },
                    }),
                    Know(Known::Checkpoint("pod p-0: preempted (SIGTERM while training)".into())),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "pod p-0: preempted (SIGTERM while training); then: the coordinating launcher at 10.0.0.1:6171 sent no heartbeat for 2 s (frozen, or its node is gone); only the job's first preemption was free (PADDLE_LAUNCHER_MAX_PREEMPTIONS): this one counts as a failure".into(),
                        restart: true,
                        kind: Kind::Failure,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "a member that served its part is told, before the attempt's end and after it",
                vec![
                    go(),
                    frame(Message::Served { pod: "ps-0".into() }),
                    frame(lost(true)),
                    frame(Message::Served { pod: "ps-1".into() }),
                ],
                vec![
                    heard_go.clone(),
                    Served("ps-0".into()),
                    Hear(Heard::Lost(Loss {
                        reason: "r".into(),
                        restart: true,
                        kind: Kind::Failure,
                    })),
                    Served("ps-1".into()),
                ],
            ),
            (
                "no checkpoint before Go, and a regather only before it",
                vec![
                    frame(Message::Checkpoint { reason: "p-2".into() }),
                    go(),
                    frame(Message::Regather { reason: "x".into() }),
                ],
                vec![
                    heard_go.clone(),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "lost the connection to the coordinating launcher at 10.0.0.1:6171 (unexpected Regather { reason: \"x\" })".into(),
                        restart: true,
                        kind: Kind::Failure,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "Done is said once, and only after Go; Finish says it if not yet said",
                vec![
                    request(Request::Done),
                    go(),
                    request(Request::Done),
                    request(Request::Done),
                    request(Request::Finish { succeeded: true }),
                ],
                vec![heard_go.clone(), Say(Message::Done), Close],
            ),
            (
                "a success said only as the channel closes",
                vec![go(), request(Request::Finish { succeeded: true })],
                vec![heard_go.clone(), Say(Message::Done), Close],
            ),
            (
                "a preemption is said while running, not before Go nor after the loss",
                vec![
                    request(Request::Preempted("a".into())),
                    go(),
                    request(Request::Preempted("b".into())),
                    frame(lost(true)),
                    request(Request::Preempted("c".into())),
                ],
                vec![
                    heard_go.clone(),
                    Say(Message::Preempted { reason: "b".into() }),
                    Hear(Heard::Lost(Loss {
                        reason: "r".into(),
                        restart: true,
                        kind: Kind::Failure,
                    })),
                ],
            ),
            (
                "after the loss: a final word, then the verdict; the link's end is no news",
                vec![
                    go(),
                    frame(lost(true)),
                    request(Request::Stopped),
                    frame(Message::Finished { pod: "p-3".into() }),
                    frame(lost(false)),
                    frame(Message::Verdict { restart: false }),
                    Input::Broken("closed".into()),
                    request(Request::Finish { succeeded: false }),
                ],
                vec![
                    heard_go.clone(),
                    Hear(Heard::Lost(Loss {
                        reason: "r".into(),
                        restart: true,
                        kind: Kind::Failure,
                    })),
                    Say(Message::Stopped),
                    Know(Known::CannotRestart),
                    Know(Known::Lost(Loss::failure("r".into(), false))),
                    Know(Known::Verdict(false)),
                    StopListening,
                    Know(Known::Verdict(false)),
                    Close,
                ],
            ),
            (
                "a silent coordinator while running is the job's loss, restartable as known",
                vec![go(), Input::Silent(10), Input::Broken("closed".into())],
                vec![
                    heard_go.clone(),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "the coordinating launcher at 10.0.0.1:6171 sent no heartbeat for 10 s (frozen, or its node is gone)".into(),
                        restart: true,
                        kind: Kind::Failure,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "a member that finished before the coordinator was lost: no restart",
                vec![
                    go(),
                    frame(Message::Finished { pod: "p-3".into() }),
                    Input::Broken("closed".into()),
                ],
                vec![
                    heard_go.clone(),
                    Know(Known::CannotRestart),
                    StopListening,
                    Hear(Heard::Lost(Loss {
                        reason: "lost the connection to the coordinating launcher at 10.0.0.1:6171 (closed)".into(),
                        restart: false,
                        kind: Kind::Failure,
                    })),
                    Know(Known::Verdict(false)),
                ],
            ),
            (
                "before Go, the link's end means gathering again",
                vec![Input::Broken("closed".into())],
                vec![
                    StopListening,
                    Hear(Heard::Regather(
                        "lost the connection to the coordinating launcher at 10.0.0.1:6171 (closed)"
                            .into(),
                    )),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "goodbye: the job is over, nothing can restart it",
                vec![go(), frame(Message::Bye), request(Request::Done)],
                vec![heard_go.clone(), Know(Known::CannotRestart), Know(Known::Succeeded), Say(Message::Done)],
            ),
            (
                "a verdict without a loss still ends the attempt",
                vec![go(), frame(Message::Verdict { restart: true })],
                vec![
                    heard_go.clone(),
                    Hear(Heard::Lost(Loss {
                        reason: "the coordinator decided the job's loss".into(),
                        restart: true,
                        kind: Kind::Failure,
                    })),
                    Know(Known::Verdict(true)),
                ],
            ),
            (
                "a loss told without a restart, then the coordinator's silence: no restart is known",
                vec![
                    go(),
                    frame(Message::Lost(Loss {
                        reason: "pod p-2: trainer exited with status 3".into(),
                        restart: false,
                        kind: Kind::Failure,
                    })),
                    Input::Silent(10),
                ],
                vec![
                    heard_go.clone(),
                    Hear(Heard::Lost(Loss {
                        reason: "pod p-2: trainer exited with status 3".into(),
                        restart: false,
                        kind: Kind::Failure,
                    })),
                    StopListening,
                    Know(Known::Verdict(false)),
                ],
            ),
            (
                "a verdict of no restart, then the coordinator's silence: no restart is known",
                vec![
                    go(),
                    frame(Message::Verdict { restart: false }),
                    Input::Silent(10),
                ],
                vec![
                    heard_go,
                    Hear(Heard::Lost(Loss {
                        reason: "the coordinator decided the job's loss".into(),
                        restart: false,
                        kind: Kind::Failure,
                    })),
                    Know(Known::Verdict(false)),
                    StopListening,
                    Know(Known::Verdict(false)),
                ],
            ),
        ];
        for (name, inputs, expected) in rows {
            assert_eq!(run(inputs), expected, "{name}");
        }
    }
}
