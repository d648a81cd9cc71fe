//! How the coordinator ends an attempt: a member's failure, loss or preemption told to all, the
//! one verdict decided once every member has stopped, a success that ends the job.

use super::*;

/// What a member said, fit for every pod's last line: printable (it reaches logs, termination
/// messages and events) and cut to fit a frame.
fn printable(said: &str) -> String {
    let printable: String = said
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    cut(&printable)
}

impl Core {
    pub fn stop_when_done(&mut self, effects: &mut Vec<Effect>) {
        let tells_the_end = self.ended || matches!(self.stage, Stage::Refused(_));
        let all_told = tells_the_end && self.others.iter().all(|pod| self.told.contains(pod));
        let all_reported =
            self.done.contains(&self.me) && (!self.training() || self.waiting_for().is_empty());
        if all_told || all_reported || self.trainers_succeeded_without_me() {
            self.stop(effects);
        }
    }

    /// This launcher has no trainer (a pserver pod named by --coordinator), and every trainer
    /// of the job has succeeded, with nothing lost: the job's success, which it tells.
    pub fn trainers_succeeded_without_me(&self) -> bool {
        self.serving.contains(&self.me)
            && self.training()
            && !self.done.is_empty()
            && self.waiting_for().is_empty()
    }

    /// Last words: goodbye after a success nobody spoiled, else what is queued (a Lost).
    pub fn stop(&mut self, effects: &mut Vec<Effect>) {
        if self.stopped() {
            return;
        }
        if self.done.contains(&self.me) && self.training() {
            effects.push(Effect::Broadcast(Message::Bye));
            // A pod that arrived too late to train: the job it came for has succeeded.
            for link in self.arrivals.values() {
                let link = *link;
                effects.push(Effect::Send {
                    link,
                    message: Message::Bye,
                });
            }
        } else if self.trainers_succeeded_without_me() {
            effects.push(Effect::Broadcast(Message::Bye));
            // It ends as the pservers it tells do.
            effects.push(Effect::Know(Known::Succeeded));
        }
        let last = std::mem::replace(&mut self.stage, Stage::Closing(None));
        self.stage = Stage::Stopped(Box::new(last));
        effects.push(Effect::Stop);
    }

    pub fn own(&mut self, request: Request, effects: &mut Vec<Effect>) {
        match request {
            Request::Failed(loss) => {
                let me = self.me.clone();
                self.lose(&me, loss, effects)
            }
            Request::PodLost(reason) => match self.stage {
                Stage::Gathering { .. } => self.regather(reason, effects),
                // Seen through the API: no member said it.
                Stage::Running { .. } => self.lose("", Loss::of_pod(reason), effects),
                _ => {}
            },
            Request::Done => self.own_done(effects),
            Request::Preempted(reason) => {
                let me = self.me.clone();
                self.preempted(me, reason, effects)
            }
            Request::Stopped => {
                if let Stage::Lost { own_stopped, .. } = &mut self.stage {
                    *own_stopped = true;
                    self.decide_when_stopped(effects);
                }
            }
            Request::Finish { succeeded: true } if self.training() => {
                self.own_done(effects);
                let waiting = self.waiting_for();
                if !waiting.is_empty() {
                    self.info(format!(
                        "control channel: waiting for {} to report their outcome: {}",
                        crate::vocabulary::count(waiting.len(), "launcher"),
                        waiting.join(", ")
                    ));
                }
            }
            // A failure, the end of an attempt, or the launcher is gone: close.
            Request::Finish { .. } => self.stop(effects),
        }
    }

    /// The job lost a member, or one failed (`ending`: the end as the member told it, or as
    /// this launcher saw it): everyone stops, once. `from`: the member it is about (empty: seen
    /// through the API; this launcher's own: it knows, and is not told).
    pub fn lose(&mut self, from: &str, ending: Loss, effects: &mut Vec<Effect>) {
        if !matches!(self.stage, Stage::Gathering { .. } | Stage::Running { .. }) {
            return;
        }
        let loss = self.judged(from, ending);
        self.warn(format!("control channel: {}", loss.reason));
        effects.push(Effect::Broadcast(Message::Lost(loss.clone())));
        effects.push(if from == self.me {
            Effect::Know(Known::Lost(loss.clone()))
        } else {
            Effect::Hear(Heard::Lost(loss.clone()))
        });
        // Before the start, the gathering is over: those still to join must not be started
        // (the simulation found a `Go` after a `Lost` here).
        if matches!(self.stage, Stage::Gathering { .. }) {
            self.stage = Stage::Closing(Some(loss.clone()));
            if !loss.restart {
                self.tell_verdict(&loss, effects);
            }
            return;
        }
        let restart = loss.restart;
        self.stage = Stage::Lost {
            loss,
            awaiting: self
                .links
                .keys()
                .filter(|pod| !self.served.contains(*pod))
                .cloned()
                .collect(),
            own_stopped: false,
        };
        // "No restart" can never turn into "restart": final at once, waiting for nobody (a
        // member that finished and lingers would never say it stopped).
        if !restart {
            self.decide(effects);
        }
    }

    /// The loss an ending makes, the same on every pod: its reason (a hang's names the rank
    /// the progress reports point at, first), its kind, and whether the job may restart.
    fn judged(&self, from: &str, ending: Loss) -> Loss {
        let (ledger, preempted, growing) = match &self.stage {
            Stage::Running {
                ledger,
                preempted,
                growing,
            } => (Some(*ledger), preempted.as_ref(), Some(growing)),
            _ => (None, None, None),
        };
        let Loss {
            reason,
            restart: restartable,
            kind,
        } = ending;
        // A member's own end is a failure or a hang (its Failed frame carries no more); a
        // preemption is free only as the coordinator recorded it, and a growth only as its own.
        let kind = match kind {
            Kind::Preemption => Kind::Failure,
            kind => kind,
        };
        // A loss inside the growth's checkpoint window (a trainer that ends once it has
        // checkpointed, as a program may on the signal; a member preempted meanwhile) ends the
        // attempt the growth was ending anyway, with the arrivals: free as the growth is, and
        // said after it. Only while the growth stands: not once a member finished (the job
        // ends as that says). Arrivals that left meanwhile change nothing: the growth's
        // restart comes all the same, free (a grow is told only with an arrival there; one
        // that comes and goes costs the job a free restart, documented), and a loss in its
        // window is judged as that restart would be, by the coordinator and by a follower
        // cut off from it alike.
        let due = match growing {
            Some(GrowthState::Due { reason, .. })
                if kind != Kind::Growth && self.done.is_empty() =>
            {
                Some(reason)
            }
            _ => None,
        };
        let hang = kind == Kind::Hang;
        let reason = match (preempted, hang) {
            // The preempted pod's own end says it all; another's comes after the preemption.
            (Some(preempted), _) if preempted.pod == from => reason,
            (Some(preempted), _) => after_preemption(&preempted.reason, &reason),
            (None, true) if due.is_none() => {
                format!("the job hangs: {}; found by {reason}", self.suspect())
            }
            (None, _) => reason,
        };
        let reason = match due {
            Some(growth) => after_preemption(growth, &reason),
            None => reason,
        };
        // Beyond the free preemptions, a preemption is a failure like any other; the job's
        // growth spends nothing, whatever the allowance (told as a free restart that is a
        // grow: the launchers count it among the free restarts, not the free preemptions).
        // A hang within a preemption's or a growth's window is theirs.
        let judged = match (preempted, ledger) {
            _ if kind == Kind::Growth || due.is_some() => Loss {
                reason,
                restart: true,
                kind: Kind::Growth,
            },
            (Some(_), Some(ledger)) => judge_preemption(reason, ledger),
            _ => Loss {
                reason,
                restart: true,
                kind,
            },
        };
        // What every pod's last line will say, the same on all.
        let reason = printable(&judged.reason);
        let member_finished = !self.done.is_empty();
        let restart = match ledger {
            Some(ledger) => verdict(&Standing {
                spent: ledger.spent(),
                max_restarts: ledger.max_restarts,
                member_finished,
                restartable,
                preempted: judged.kind.is_free(),
            })
            .is_ok(),
            // Nothing started: there is nothing to restart, only to gather again.
            None => restartable && !member_finished,
        };
        Loss {
            reason,
            restart,
            kind: judged.kind,
        }
    }

    /// A member stopped its children after the loss, or left: the verdict may be due.
    pub fn stopped_or_gone(&mut self, pod: &str, effects: &mut Vec<Effect>) {
        if let Stage::Lost { awaiting, .. } = &mut self.stage {
            if awaiting.remove(pod) {
                self.decide_when_stopped(effects);
            }
        }
    }

    /// Once every member has stopped (or is gone) and this launcher too, the loss's verdict is
    /// final: whether a restart is allowed by then, every success there was counted.
    pub fn decide_when_stopped(&mut self, effects: &mut Vec<Effect>) {
        if let Stage::Lost {
            awaiting,
            own_stopped: true,
            ..
        } = &self.stage
        {
            if awaiting.is_empty() {
                self.decide(effects);
            }
        }
    }

    /// The verdict on the loss as it stands, once: told, and final.
    pub fn decide(&mut self, effects: &mut Vec<Effect>) {
        let Stage::Lost { loss, .. } = &self.stage else {
            return;
        };
        let loss = loss.clone();
        self.tell_verdict(&loss, effects);
        self.stage = Stage::Decided(loss);
    }

    /// The verdict (`loss.restart`): to everyone joined, this launcher, and the members that
    /// joined after the loss and were held until now (a provisional "restart" would send them
    /// gathering for a job that may yet end).
    fn tell_verdict(&mut self, loss: &Loss, effects: &mut Vec<Effect>) {
        let restart = loss.restart;
        self.info(if restart {
            "control channel: every launcher has stopped: the job restarts".to_string()
        } else {
            "control channel: the loss is final: the job ends".to_string()
        });
        // The held joiners first: a `Lost` is the first thing a member that never started
        // must hear of the loss (the `Verdict` after it only confirms it).
        for (pod, link) in std::mem::take(&mut self.held) {
            if self.links.get(&pod) == Some(&link) {
                let message = loss_told(loss);
                effects.push(Effect::Send { link, message });
                self.told.insert(pod);
            }
        }
        let mut alive: Vec<String> = self.links.keys().cloned().collect();
        alive.extend(self.arrivals.keys().cloned());
        alive.push(self.me.clone());
        alive.sort_unstable();
        alive.dedup();
        for (_, link) in std::mem::take(&mut self.arrivals) {
            let message = loss_told(loss);
            effects.push(Effect::Send { link, message });
        }
        effects.push(Effect::Know(Known::Alive(alive)));
        effects.push(Effect::Broadcast(Message::Verdict { restart }));
        effects.push(Effect::Know(Known::Verdict(restart)));
    }

    /// This launcher's trainer succeeded.
    pub fn own_done(&mut self, effects: &mut Vec<Effect>) {
        let me = self.me.clone();
        if !self.started() || self.done.contains(&me) {
            return;
        }
        // A coordinator without a trainer (a pserver pod named by --coordinator): its
        // pserver's end is no trainer's success either.
        if self.serving.contains(&me) {
            return self.serve(me, effects);
        }
        if self.done.is_empty() {
            effects.push(Effect::Broadcast(Message::Finished { pod: me.clone() }));
        }
        self.done.insert(me.clone());
        self.finished_after_loss(&me, effects);
    }

    /// A member without a trainer has served its part: told once to everyone.
    pub fn serve(&mut self, pod: String, effects: &mut Vec<Effect>) {
        if self.served.insert(pod.clone()) {
            effects.push(Effect::Broadcast(Message::Served { pod: pod.clone() }));
            effects.push(Effect::Served(pod));
        }
    }

    /// A member finished after a loss went out as one the job may restart from: it cannot
    /// now (the member will not rejoin), and everyone still deciding must hear it.
    pub fn finished_after_loss(&mut self, pod: &str, effects: &mut Vec<Effect>) {
        let Stage::Lost { loss, .. } = &self.stage else {
            return;
        };
        if !loss.restart {
            return;
        }
        let reason = cut(&format!(
            "{}; {pod} had already finished, so the job cannot start again",
            loss.reason
        ));
        let loss = loss.retold(reason, false);
        self.warn(format!("control channel: {}", loss.reason));
        effects.push(Effect::Broadcast(Message::Lost(loss.clone())));
        effects.push(Effect::Know(Known::Lost(loss.clone())));
        if let Stage::Lost { loss: told, .. } = &mut self.stage {
            *told = loss;
        }
        self.decide(effects);
    }

    /// A member's launcher (this one's too) was told to stop while its trainer runs: every
    /// other trainer is asked for a checkpoint at once, while every rank is still there for
    /// its collectives; the attempt's end that follows is the preemption's. The first
    /// preemption of an attempt is the one told: later ones find every trainer asked already.
    pub fn preempted(&mut self, pod: String, reason: String, effects: &mut Vec<Effect>) {
        let Stage::Running {
            preempted: None,
            growing,
            ..
        } = &self.stage
        else {
            return;
        };
        let reason = printable(&reason);
        // The job's growth asked every trainer for a checkpoint already: once is enough.
        if matches!(growing, GrowthState::Due { .. }) {
            self.warn(format!("control channel: {reason}: every trainer was asked for a checkpoint already, for the job's growth"));
        } else {
            self.warn(format!(
                "control channel: {reason}: asking every trainer for a checkpoint"
            ));
            effects.push(Effect::Broadcast(Message::Checkpoint {
                reason: reason.clone(),
            }));
            if pod != self.me {
                effects.push(Effect::Know(Known::Checkpoint(reason.clone())));
            }
        }
        if let Stage::Running { preempted, .. } = &mut self.stage {
            *preempted = Some(Preempted { pod, reason });
        }
    }

    /// The rank the members' progress reports point at, by their last reports: those of the
    /// live links (not a replaced connection's), of members still training (one that finished
    /// stopped progressing for good, and is no suspect).
    pub fn suspect(&self) -> String {
        let live = |pod: &String, report: &Reported| {
            let linked = match report.link {
                None => *pod == self.me,
                Some(link) => self.links.get(pod) == Some(&link),
            };
            linked && !self.done.contains(pod)
        };
        let reports: Vec<LastProgress> = self
            .progress
            .iter()
            .filter(|(pod, report)| live(pod, report))
            .map(|(pod, report)| LastProgress {
                who: {
                    let who = self.who.get(pod).cloned();
                    let who = who.unwrap_or_else(|| format!("pod {pod}"));
                    // A pod of several processes: the one its launcher saw furthest behind.
                    match report.behind {
                        Some(id) => format!("trainer id {id} on {who}"),
                        None => who,
                    }
                },
                step: report.step,
                quiet: report.quiet + self.now.saturating_duration_since(report.at),
            })
            .collect();
        suspect(&reports, self.progress_margin)
    }
}

/// The job's loss as a pod that ran nothing in this attempt hears it (a member joining after
/// the loss, a held one, an arrival).
pub fn loss_told(loss: &Loss) -> Message {
    Message::Lost(Loss {
        reason: cut(&loss.reason),
        ..loss.clone()
    })
}
