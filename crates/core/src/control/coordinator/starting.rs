//! How the coordinator starts an attempt: the members' hellos, the agreement on the ledger and
//! the processes per pod, `Go`, and an elastic job's arrivals and growth.

use super::*;

impl Core {
    /// Everyone (this launcher too) discovers the job again. The members that said hello in
    /// the gathering that ends are alive, for the next round's rule (`Effect::Alive`).
    pub fn regather(&mut self, reason: String, effects: &mut Vec<Effect>) {
        self.info(format!(
            "control channel: {reason}: discovering the job again"
        ));
        if let Stage::Gathering { ready, .. } = &self.stage {
            let mut alive: Vec<String> = ready.keys().cloned().collect();
            alive.push(self.me.clone());
            alive.sort_unstable();
            effects.push(Effect::Know(Known::Alive(alive)));
        }
        effects.push(Effect::Broadcast(Message::Regather {
            reason: cut(&reason),
        }));
        effects.push(Effect::Hear(Heard::Regather(reason)));
        self.stage = Stage::Closing(None);
    }

    pub fn joined(
        &mut self,
        link: u64,
        pod: String,
        view: String,
        terms: Terms,
        effects: &mut Vec<Effect>,
    ) {
        if !self.is_other.contains(&pod) {
            if pod != self.me && self.growth.is_some() && self.started() {
                match self.differs(&pod, &terms) {
                    Some(why) => self.turn_away(&[(pod, link)], &why, effects),
                    None => self.arrive(link, pod, effects),
                }
            } else {
                effects.push(Effect::Close(link));
            }
            return;
        }
        if let Stage::Refused(reason) = &self.stage {
            let message = Message::Refused {
                reason: reason.clone(),
            };
            effects.push(Effect::Send { link, message });
            self.told.insert(pod);
            self.stop_when_done(effects);
            return;
        }
        if self.links.contains_key(&pod) {
            self.warn(format!(
                "control channel: closed a second connection of {pod}: it is already connected"
            ));
            effects.push(Effect::Close(link));
            return;
        }
        self.info(format!("control channel: {pod} joined"));
        self.links.insert(pod.clone(), link);
        match &mut self.stage {
            // An empty view: a follower that takes the membership from `Go`.
            Stage::Gathering { ready, .. } if view == self.view || view.is_empty() => {
                ready.insert(pod, terms);
                self.start_when_ready(effects);
            }
            Stage::Gathering { .. } => self.regather(
                format!("{pod} found other pods than this launcher"),
                effects,
            ),
            // It ran nothing in this attempt: it hears the verdict, once there is one.
            Stage::Decided(loss) => {
                let message = loss_told(loss);
                effects.push(Effect::Send { link, message });
                self.told.insert(pod);
            }
            Stage::Lost { .. } => {
                self.held.insert(pod, link);
            }
            // A pod that had served its part, back (its container restarted in place, or
            // replaced under the same name): nothing for it in this attempt; it hears how the
            // attempt ends.
            Stage::Running { .. } if self.served.contains(&pod) => {
                self.info(format!("control channel: {pod}, which had served its part, joined again: it waits for the attempt's end"));
                self.held.insert(pod, link);
            }
            // Its earlier connection ended, which already counted as a loss.
            Stage::Running { .. } => {
                let reason = format!("the launcher of peer pod {pod} joined again (it restarted)");
                self.lose(&pod, Loss::of_pod(reason), effects)
            }
            _ => {}
        }
    }

    pub fn start_when_ready(&mut self, effects: &mut Vec<Effect>) {
        let Stage::Gathering { ready, .. } = &self.stage else {
            return;
        };
        // Only members are ever ready (`joined` turns away the others).
        if ready.len() < self.others.len() {
            return;
        }
        let own = self.own;
        // Ranks, world size and endpoints follow from it: a job whose pods disagree cannot start
        // (status 2 everywhere), nor could gathering again change it. An elastic job turns away
        // the pods that differ from its coordinator and goes on without them.
        let mut others: Vec<(String, Terms)> = ready
            .iter()
            .filter(|(_, terms)| terms.nproc_per_pod != own.nproc_per_pod)
            .map(|(pod, terms)| (pod.clone(), *terms))
            .collect();
        others.sort_by(|a, b| a.0.cmp(&b.0));
        // Only a coordinator whose count most pods share speaks for the job: one that is the
        // odd one out (its replacement on a node with fewer GPUs) refuses as any job does.
        let agreeing = 1 + ready.len() - others.len();
        let speaks_for_the_job = 2 * agreeing > 1 + ready.len();
        if let (Some(_), false, true) = (self.growth, others.is_empty(), speaks_for_the_job) {
            let why = self.differs(&others[0].0, &others[0].1).unwrap_or_default();
            let odd: Vec<(String, u64)> = others
                .iter()
                .filter_map(|(pod, _)| Some((pod.clone(), *self.links.get(pod)?)))
                .collect();
            self.turn_away(&odd, &why, effects);
            let names: Vec<&str> = others.iter().map(|(pod, _)| pod.as_str()).collect();
            let reason = format!("{} turned away: {why}", names.join(", "));
            self.regather(reason, effects);
            return;
        }
        if let Some((pod, terms)) = others.first() {
            let reason = self.differs(pod, terms).unwrap_or_default();
            self.warn(format!("control channel: {reason}"));
            effects.push(Effect::Broadcast(Message::Refused {
                reason: reason.clone(),
            }));
            effects.push(Effect::Hear(Heard::Refused(reason.clone())));
            // Served on to whoever joins again (a link that broke before the word reached
            // it), until every member has heard it: closed its link once told, or been told
            // as it joined again.
            self.stage = Stage::Refused(reason);
            return;
        }
        let ledger = own.ledger.agree(ready.values().map(|member| member.ledger));
        let differ =
            |of: fn(&Ledger) -> u32| ready.values().any(|r| of(&r.ledger) != of(&own.ledger));
        let budgets_differ = differ(|ledger| ledger.max_restarts);
        let preemptions_differ = differ(|ledger| ledger.max_preemptions);
        self.go(ledger, budgets_differ, preemptions_differ, effects);
    }

    /// Every member is here and agrees: the attempt of `ledger` starts. The launchers' budgets
    /// may have differed: the job has the smallest (said).
    fn go(
        &mut self,
        ledger: Ledger,
        budgets_differ: bool,
        preemptions_differ: bool,
        effects: &mut Vec<Effect>,
    ) {
        if budgets_differ {
            self.warn(format!("control channel: the launchers were given different restart budgets (PADDLE_LAUNCHER_MAX_RESTARTS): the job has the smallest, {}", ledger.max_restarts));
        }
        if preemptions_differ {
            self.warn(format!("control channel: the launchers were given different numbers of free preemptions (PADDLE_LAUNCHER_MAX_PREEMPTIONS): the job has the smallest, {}", crate::verdict::describe_max_preemptions(ledger.max_preemptions)));
        }
        self.info(format!(
            "control channel: all {} are here: starting restart epoch {}",
            crate::vocabulary::count(self.others.len() + 1, "launcher"),
            ledger.epoch
        ));
        effects.push(Effect::Broadcast(Message::Go {
            membership: self.membership.clone(),
            ledger,
        }));
        self.stage = Stage::Running {
            ledger,
            preempted: None,
            growing: GrowthState::No,
        };
        effects.push(Effect::Hear(Heard::Go {
            membership: None,
            ledger,
        }));
    }

    /// A pod that is no member said hello while the elastic job trains. After the verdict on a
    /// loss it hears it at once (it gathers with the others); else it is held until the
    /// attempt ends, and the first arrival opens the window in which others may follow.
    pub fn arrive(&mut self, link: u64, pod: String, effects: &mut Vec<Effect>) {
        if let Stage::Decided(loss) = &self.stage {
            let message = loss_told(loss);
            effects.push(Effect::Send { link, message });
            return;
        }
        if let Some(earlier) = self.arrivals.insert(pod.clone(), link) {
            effects.push(Effect::Close(earlier));
        }
        let window = match (&mut self.stage, self.growth) {
            (
                Stage::Running {
                    growing: growing @ GrowthState::No,
                    ..
                },
                Some(growth),
            ) => {
                *growing = GrowthState::Since(self.now);
                Some(growth.window)
            }
            _ => None,
        };
        self.info(match window {
            Some(window) => format!(
                "control channel: {pod} arrived to join the job: it grows in {} s, with any pod that arrives meanwhile",
                window.as_secs()
            ),
            None => format!("control channel: {pod} arrived to join the job: it joins at the next start"),
        });
    }

    /// Why `pod`, which says `terms`, cannot train with this launcher's pod: it runs another
    /// number of trainer processes (ranks, world size and endpoints follow from it).
    pub fn differs(&self, pod: &str, terms: &Terms) -> Option<String> {
        let own = self.own.nproc_per_pod;
        if terms.nproc_per_pod == own {
            return None;
        }
        let processes = |n: u32| match n {
            1 => "1 trainer process".to_string(),
            n => format!("{n} trainer processes"),
        };
        Some(cut(&format!(
            "pod {pod} runs {} and {} {} ({}): every pod of the job must run as many",
            processes(terms.nproc_per_pod),
            self.who.get(&self.me).unwrap_or(&self.me),
            processes(own),
            crate::config::NPROC_PER_POD
        )))
    }

    /// An elastic job's pods (each on its link) that cannot join: each is told why (it waits
    /// and asks again, the job goes on without it), its link let go, and the launcher told to
    /// leave them out.
    pub fn turn_away(&mut self, pods: &[(String, u64)], why: &str, effects: &mut Vec<Effect>) {
        for (pod, link) in pods {
            self.warn(format!(
                "control channel: {pod} cannot join the job, turned away: {why}"
            ));
            let message = Message::Refused {
                reason: cut(&format!("{TURNED_AWAY}: {why}")),
            };
            effects.push(Effect::Send {
                link: *link,
                message,
            });
            effects.push(Effect::Close(*link));
        }
        let names = pods.iter().map(|(pod, _)| pod.clone()).collect();
        effects.push(Effect::Know(Known::TurnedAway(names)));
    }

    /// The window after the first arrival is over: every trainer is asked for a checkpoint
    /// and given its time, then the attempt ends as a free restart with the arrivals. Not
    /// once a member has finished: the job is ending, and a restart could not include it.
    pub fn grow_when_due(&mut self, now: Instant, effects: &mut Vec<Effect>) {
        let Some(growth) = self.growth else {
            return;
        };
        // A member finished (the job is ending, and the arrivals hear how), or was preempted
        // (a preemption asked every trainer for a checkpoint already: its end restarts the
        // job, with the arrivals), or the attempt is lost: no growth.
        let Stage::Running {
            preempted: None,
            growing,
            ..
        } = &self.stage
        else {
            return;
        };
        if !self.done.is_empty() {
            return;
        }
        if let GrowthState::Since(first) = *growing {
            if now.saturating_duration_since(first) < growth.window || self.arrivals.is_empty() {
                return;
            }
            let mut pods: Vec<&str> = self.arrivals.keys().map(String::as_str).collect();
            pods.sort_unstable();
            let reason = cut(&format!(
                "{GROWS}: {} joined ({})",
                pods.join(", "),
                crate::vocabulary::count(pods.len(), "pod")
            ));
            if !growth.checkpoint_window.is_zero() {
                self.warn(format!("control channel: {reason}: asking every trainer for a checkpoint, {} s before the restart", growth.checkpoint_window.as_secs()));
                effects.push(Effect::Broadcast(Message::Checkpoint {
                    reason: reason.clone(),
                }));
                effects.push(Effect::Know(Known::Checkpoint(reason.clone())));
            }
            if let Stage::Running { growing, .. } = &mut self.stage {
                let at = now + growth.checkpoint_window;
                *growing = GrowthState::Due { at, reason };
            }
        }
        if let Stage::Running {
            growing: GrowthState::Due { at, reason },
            ..
        } = &self.stage
        {
            if now >= *at {
                let growth = Loss {
                    reason: reason.clone(),
                    restart: true,
                    kind: Kind::Growth,
                };
                self.lose("", growth, effects);
            }
        }
    }

    /// While gathering, the members that have not joined yet.
    pub fn not_joined(&self) -> Vec<&str> {
        let Stage::Gathering { ready, .. } = &self.stage else {
            return Vec::new();
        };
        self.others
            .iter()
            .filter(|pod| !ready.contains_key(*pod))
            .map(String::as_str)
            .collect()
    }
}
