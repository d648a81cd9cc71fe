//! How the coordinator ends an attempt: a member's failure, loss or preemption told to all, the
//! one verdict decided once every member has stopped, a success that ends the job.

use super::*;

impl Core {
    pub(super) fn stop_when_done(&mut self, effects: &mut Vec<Effect>) {
        let all_told = self.ending && self.others.iter().all(|pod| self.told.contains(pod));
        let all_reported =
            self.own_success && (self.lost.is_some() || self.waiting_for().is_empty());
        if all_told || all_reported || self.trainers_succeeded_without_me() {
            self.stop(effects);
        }
    }

    /// This launcher has no trainer (a pserver pod named by --coordinator), and every trainer
    /// of the job has succeeded, with nothing lost: the job's success, which it tells.
    pub(super) fn trainers_succeeded_without_me(&self) -> bool {
        self.serving.contains(&self.me)
            && self.lost.is_none()
            && matches!(self.stage, Stage::Running { .. })
            && !self.done.is_empty()
            && self.waiting_for().is_empty()
    }

    /// Last words: goodbye after a success nobody spoiled, else what is queued (a Lost).
    pub(super) fn stop(&mut self, effects: &mut Vec<Effect>) {
        if self.stopped {
            return;
        }
        if self.own_success && self.lost.is_none() {
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
            effects.push(Effect::JobSucceeded);
        }
        self.stopped = true;
        effects.push(Effect::Stop);
    }

    pub(super) fn own(&mut self, request: Request, effects: &mut Vec<Effect>) {
        match request {
            Request::Failed {
                reason,
                restartable,
                hang,
            } => {
                let me = self.me.clone();
                self.lose(reason, &me, false, restartable, hang, effects)
            }
            Request::PodLost(reason) => match self.stage {
                Stage::Gathering { .. } => self.regather(reason, effects),
                // Seen through the API: no member said it.
                Stage::Running { .. } => self.lose(reason, "", true, true, false, effects),
                Stage::Closing => {}
            },
            Request::Done => self.own_done(effects),
            Request::Preempted(reason) => {
                let me = self.me.clone();
                self.preempted(me, reason, effects)
            }
            Request::Stopped => {
                if self.lost.is_some() {
                    self.own_stopped = true;
                    self.decide_when_stopped(effects);
                }
            }
            Request::Finish { succeeded: true }
                if matches!(self.stage, Stage::Running { .. }) && self.lost.is_none() =>
            {
                self.own_done(effects);
                let waiting = self.waiting_for();
                if !waiting.is_empty() {
                    info!(
                        "control channel: waiting for {} to report their outcome: {}",
                        crate::vocabulary::count(waiting.len(), "launcher"),
                        waiting.join(", ")
                    );
                }
            }
            // A failure, the end of an attempt, or the launcher is gone: close.
            Request::Finish { .. } => self.stop(effects),
        }
    }

    /// The job lost a member, or one failed: everyone stops, once. `from`: the member it is
    /// about (empty: seen through the API). `tell_self`: false for this launcher's own report
    /// (it knows). `restartable`: false for a failure a restart
    /// would repeat. `hang`: a trainer was judged hung; the loss names the rank the progress
    /// reports point at, first (a reason is cut to fit a frame).
    pub(super) fn lose(
        &mut self,
        reason: String,
        from: &str,
        tell_self: bool,
        restartable: bool,
        hang: bool,
        effects: &mut Vec<Effect>,
    ) {
        let grown = std::mem::take(&mut self.losing_by_growth);
        if self.lost.is_some() || matches!(self.stage, Stage::Closing) {
            return;
        }
        // A loss inside the growth's checkpoint window (a trainer that ends once it has
        // checkpointed, as a program may on the signal; a member preempted meanwhile) ends the
        // attempt the growth was ending anyway, with the arrivals: free as the growth is, and
        // said after it. Only while the growth stands: not once a member finished (the job
        // ends as that says). Arrivals that left meanwhile change nothing: the growth's
        // restart comes all the same, free (a grow is told only with an arrival there; one
        // that comes and goes costs the job a free restart, documented), and a loss in its
        // window is judged as that restart would be, by the coordinator and by a follower
        // cut off from it alike.
        let in_growth =
            !grown && self.growing.is_some() && self.done.is_empty() && !self.own_success;
        let reason = match (&self.preempted, hang) {
            // The preempted pod's own end says it all; another's comes after the preemption.
            (Some((pod, _)), _) if pod == from => reason,
            (Some((_, said)), _) => after_preemption(said, &reason),
            (None, true) if !in_growth => {
                format!("the job hangs: {}; found by {reason}", self.suspect())
            }
            (None, _) => reason,
        };
        let reason = match &self.growing {
            Some((_, growth)) if in_growth => after_preemption(growth, &reason),
            _ => reason,
        };
        let hang = hang && self.preempted.is_none() && !in_growth;
        // Beyond the free preemptions, a preemption is a failure like any other; the job's
        // growth spends nothing, whatever the allowance (told as a free restart that is a
        // grow: the launchers count it among the free restarts, not the free preemptions).
        let grown = grown || in_growth;
        let (preempted, reason) = match (&self.preempted, &self.stage) {
            _ if grown => (true, reason),
            (Some(_), Stage::Running(ledger)) => judge_preemption(reason, *ledger),
            _ => (false, reason),
        };
        // What every pod's last line will say, the same on all: printable (it reaches logs,
        // termination messages and events), and cut to fit a frame here too.
        let printable: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let reason = cut(&printable);
        let member_finished = !self.done.is_empty() || self.own_success;
        let restart = match self.stage {
            Stage::Running(ledger) => verdict(&Standing {
                spent: ledger.spent(),
                max_restarts: ledger.max_restarts,
                member_finished,
                restartable,
                preempted,
            })
            .is_ok(),
            // Nothing started: there is nothing to restart, only to gather again.
            _ => restartable && !member_finished,
        };
        warn!("control channel: {reason}");
        effects.push(Effect::Broadcast(Message::Lost {
            reason: reason.clone(),
            restart,
            hang,
            preempted,
            grown,
        }));
        effects.push(if tell_self {
            Effect::Hear(Heard::Lost {
                reason: reason.clone(),
                restart,
                hang,
                preempted,
                grown,
            })
        } else {
            Effect::KnowsLost {
                restart,
                reason: reason.clone(),
                hang,
                preempted,
                grown,
            }
        });
        self.lost = Some((reason, restart));
        self.lost_hang = hang;
        self.lost_preempted = preempted;
        self.lost_grown = grown;
        self.awaiting = self
            .links
            .keys()
            .filter(|pod| !self.served.contains(*pod))
            .cloned()
            .collect();
        // "No restart" can never turn into "restart": final at once, waiting for nobody (a
        // member that finished and lingers would never say it stopped).
        if !restart {
            self.decide(false, effects);
        }
        // Before the start, the gathering is over: those still to join must not be started
        // (the simulation found a `Go` after a `Lost` here).
        if matches!(self.stage, Stage::Gathering { .. }) {
            self.stage = Stage::Closing;
        }
    }

    /// Once every member has stopped (or is gone) and this launcher too, the loss's verdict is
    /// final: whether a restart is allowed by then, every success there was counted.
    pub(super) fn decide_when_stopped(&mut self, effects: &mut Vec<Effect>) {
        let Some((_, restart)) = &self.lost else {
            return;
        };
        // Only a started attempt has children to stop (a loss while gathering ends it: its
        // members gather again or end, and later joiners never heard of it).
        let started = matches!(self.stage, Stage::Running { .. });
        if self.decided.is_some() || !self.own_stopped || !self.awaiting.is_empty() || !started {
            return;
        }
        let restart = *restart;
        self.decide(restart, effects);
    }

    /// The verdict, once: to everyone joined, this launcher, and the members that joined after
    /// the loss and were held until now (a provisional "restart" would send them gathering for
    /// a job that may yet end).
    pub(super) fn decide(&mut self, restart: bool, effects: &mut Vec<Effect>) {
        if self.decided.is_some() {
            return;
        }
        if restart {
            info!("control channel: every launcher has stopped: the job restarts");
        } else {
            info!("control channel: the loss is final: the job ends");
        }
        self.decided = Some(restart);
        // The held joiners first: a `Lost` is the first thing a member that never started
        // must hear of the loss (the `Verdict` after it only confirms it).
        for (pod, link) in std::mem::take(&mut self.held) {
            if self.links.get(&pod) == Some(&link) {
                let message = self.loss_told(restart);
                effects.push(Effect::Send { link, message });
                self.told.insert(pod);
            }
        }
        for (_, link) in std::mem::take(&mut self.arrivals) {
            let message = self.loss_told(restart);
            effects.push(Effect::Send { link, message });
        }
        effects.push(Effect::Broadcast(Message::Verdict { restart }));
        effects.push(Effect::KnowsVerdict { restart });
    }

    /// The job's loss with the verdict `restart`, as a pod that ran nothing in this attempt
    /// hears it (a member joining after the loss, a held one, an arrival).
    pub(super) fn loss_told(&self, restart: bool) -> Message {
        Message::Lost {
            reason: cut(self.lost.as_ref().map_or("", |(reason, _)| reason.as_str())),
            restart,
            hang: self.lost_hang,
            preempted: self.lost_preempted,
            grown: self.lost_grown,
        }
    }

    /// This launcher's trainer succeeded.
    pub(super) fn own_done(&mut self, effects: &mut Vec<Effect>) {
        if !matches!(self.stage, Stage::Running { .. }) || self.own_success {
            return;
        }
        // A coordinator without a trainer (a pserver pod named by --coordinator): its
        // pserver's end is no trainer's success either.
        if self.serving.contains(&self.me) {
            let me = self.me.clone();
            return self.serve(me, effects);
        }
        if self.done.is_empty() {
            effects.push(Effect::Broadcast(Message::Finished {
                pod: self.me.clone(),
            }));
        }
        self.own_success = true;
        let me = self.me.clone();
        self.finished_after_loss(&me, effects);
    }

    /// A member without a trainer has served its part: told once to everyone.
    pub(super) fn serve(&mut self, pod: String, effects: &mut Vec<Effect>) {
        if self.served.insert(pod.clone()) {
            effects.push(Effect::Broadcast(Message::Served { pod: pod.clone() }));
            effects.push(Effect::Served(pod));
        }
    }

    /// A member finished after a loss went out as one the job may restart from: it cannot
    /// now (the member will not rejoin), and everyone still deciding must hear it.
    pub(super) fn finished_after_loss(&mut self, pod: &str, effects: &mut Vec<Effect>) {
        let Some((reason, true)) = &self.lost else {
            return;
        };
        if self.decided.is_some() {
            return;
        }
        let reason = cut(&format!(
            "{reason}; {pod} had already finished, so the job cannot start again"
        ));
        warn!("control channel: {reason}");
        effects.push(Effect::Broadcast(Message::Lost {
            reason: reason.clone(),
            restart: false,
            hang: self.lost_hang,
            preempted: self.lost_preempted,
            grown: self.lost_grown,
        }));
        effects.push(Effect::KnowsLost {
            restart: false,
            reason: reason.clone(),
            hang: self.lost_hang,
            preempted: self.lost_preempted,
            grown: self.lost_grown,
        });
        self.lost = Some((reason, false));
        self.decide(false, effects);
    }

    /// A member's launcher (this one's too) was told to stop while its trainer runs: every
    /// other trainer is asked for a checkpoint at once, while every rank is still there for
    /// its collectives; the attempt's end that follows is the preemption's. The first
    /// preemption of an attempt is the one told: later ones find every trainer asked already.
    pub(super) fn preempted(&mut self, pod: String, reason: String, effects: &mut Vec<Effect>) {
        let running = matches!(self.stage, Stage::Running { .. });
        if !running || self.preempted.is_some() || self.lost.is_some() {
            return;
        }
        let printable: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let reason = cut(&printable);
        // The job's growth asked every trainer for a checkpoint already: once is enough.
        if self.growing.is_some() {
            warn!("control channel: {reason}: every trainer was asked for a checkpoint already, for the job's growth");
        } else {
            warn!("control channel: {reason}: asking every trainer for a checkpoint");
            effects.push(Effect::Broadcast(Message::Checkpoint {
                reason: reason.clone(),
            }));
            if pod != self.me {
                effects.push(Effect::Checkpoint(reason.clone()));
            }
        }
        self.preempted = Some((pod, reason));
    }

    /// The rank the members' progress reports point at, by their last reports: those of the
    /// live links (not a replaced connection's), of members still training (one that finished
    /// stopped progressing for good, and is no suspect).
    pub(super) fn suspect(&self) -> String {
        let live = |pod: &String, report: &Progress| match report.link {
            None => *pod == self.me && !self.own_success,
            Some(link) => self.links.get(pod) == Some(&link) && !self.done.contains(pod),
        };
        let reports: Vec<Report> = self
            .progress
            .iter()
            .filter(|(pod, report)| live(pod, report))
            .map(|(pod, report)| Report {
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
