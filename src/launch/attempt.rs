//! The attempt loop's executor: the machine's commands (`attempt_loop`) carried out for a
//! real pod — an attempt begun (the job's record and story, the watches that may end it), run
//! (the workspace, the peer check, the pod's processes), its failure told, the verdict waited
//! for (a stop signal ends the wait), the restart in place, the channel closed and the pod's
//! end posted.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tracing::{debug, info, warn};

use super::ending::{self, EVENTS_FLUSH};
use super::peer_check::{named_peers, peers_to_check, silent_peers, PEER_CHECK_TIMEOUT};
use super::processes::drive;
use super::ready::{Attempt, UnjoinedCoordinator};
use super::record::{JobRecord, PREEMPTION_RECORD_WAIT};
use super::rendezvous::{channel_without_secret, UNJOINED_LOOK_UNBOUNDED};
use super::reporter::{Posting, Reporter};
use super::setup::{node_name, now_utc};
use super::waits::{interruptible, Breaks};
use crate::attempt_loop::{Begun, Command, Input, Post};
use crate::config::Config;
use crate::control::Channel;
use crate::control::ChannelState;
use crate::error::{ConfigError, Error};
use crate::events::JobEvents;
use crate::exit::Outcome;
use crate::ledger::Ledger;
use crate::ledger::Recorded;
use crate::lifecycle;
use crate::loss::Loss;
use crate::membership::PodAddress;
use crate::metrics::serve::SharedBoard;
use crate::metrics::{Size, State};
use crate::plan::{Plan, PodEntry};
use crate::supervise::Supervisor;
use crate::vocabulary::EventKind;
use crate::workspace;

/// What this launcher's executor carries from one attempt to the next.
pub(super) struct Attempts {
    /// The attempt begun, until its end is judged.
    running: Option<Running>,
    /// The workspace preparation of an attempt that was lost while it ran, if it may still run.
    preparing_before: Option<JoinHandle<Result<(), Error>>>,
    /// A preemption's record on the Job, while it is written.
    recording: Option<JoinHandle<()>>,
    /// The job's Kubernetes events, once this launcher is the one that posts them.
    events: Option<JobEvents>,
    /// What the metrics endpoint shows, when it is on.
    board: Option<SharedBoard>,
    /// The job's reports: where the channel's news go.
    pub(super) reporter: Reporter,
}

impl Attempts {
    /// The executor, and the ledger the loop starts from: where the batch system's own
    /// restarts of the job left it, with this launcher's allowances.
    pub fn new(config: &Config, board: Option<SharedBoard>) -> (Attempts, Ledger) {
        let ledger = Ledger {
            epoch: config.restarts_before(),
            max_preemptions: config.control.max_preemptions,
            ..Ledger::first(config.control.max_restarts)
        };
        if ledger.epoch > 0 {
            let n = ledger.epoch;
            info!(
                "the batch system has restarted the job {n} times: the restart count starts at {n}"
            );
        }
        let attempts = Attempts {
            running: None,
            preparing_before: None,
            recording: None,
            events: None,
            reporter: Reporter::start(config, board.clone()),
            board,
        };
        (attempts, ledger)
    }

    /// Writes on the metrics' board, if there is one.
    fn show(&self, write: impl FnOnce(&mut crate::metrics::Board)) {
        if let Some(board) = &self.board {
            write(&mut crate::metrics::serve::lock(board));
        }
    }

    fn channel(&self) -> Option<&Channel> {
        self.running.as_ref().and_then(|r| r.channel.as_ref())
    }

    /// What the job's channel has told this launcher so far.
    fn channel_state(&self) -> ChannelState {
        ending::state_of(self.channel())
    }
}

/// An attempt under way.
pub(super) struct Running {
    plan: Plan,
    /// "pod p-1 (trainer id 1 of 3)": who this launcher is, in what it tells the others.
    who: String,
    channel: Option<Channel>,
    /// Where the job's count is kept (the Job object), when this launcher coordinates.
    record: Option<JobRecord>,
    /// Set when this pod finds it cannot join the job's channel: it ends as bad configuration.
    unjoined: Arc<OnceLock<ConfigError>>,
}

impl Attempts {
    /// Begins an attempt: the job's record and its "Started" event (one launcher tells them), and
    /// the watches that may end it from here on — a peer's loss, the channel's, a coordinator this
    /// pod cannot join, and for a pserver pod the trainers' end.
    pub(super) fn begin(
        &mut self,
        attempt: Attempt,
        config: &Config,
        supervisor: &mut Supervisor,
        my_ip: IpAddr,
        members_before: &[PodAddress],
    ) -> Begun {
        let Attempt {
            plan,
            who,
            mut channel,
            peer_loss,
            trainers_done,
            ledger,
            api,
            coordinator_unjoined,
            ..
        } = attempt;
        // The log's fields from here on (JSON): this pod's rank and the attempt's restart.
        let span = tracing::Span::current();
        if let Some(rank) = plan.trainer_id {
            span.record("pod_rank", rank);
        }
        span.record("restart", plan.restart_count);
        let posts = match &channel {
            Some(channel) => channel.coordinates(),
            None => plan.trainer_id == Some(0),
        };
        let coordinates = channel.as_ref().is_some_and(Channel::coordinates);
        let record = JobRecord::of(config, api.as_ref()).filter(|_| coordinates);
        if let Some(record) = &record {
            // In the background: the start is not held back by it.
            drop(record.write(ledger.recorded()));
        }
        // POD_NAME, else the pod's name as found by its address (under hostNetwork pods share
        // one, so the name given wins).
        let own = plan.pods.iter().find(|entry| entry.ip == plan.pod_ip);
        let name = match (&config.topology.pod_name, own) {
            (Some(name), _) => name.clone(),
            (None, Some(entry)) => entry.name.clone(),
            (None, None) => my_ip.to_string(),
        };
        if let (true, Some(api)) = (coordinates, &api) {
            self.reporter.post_to(Posting {
                api: api.clone(),
                pod: name.clone(),
                job: crate::coordination::job_keeping_the_count(config).map(str::to_string),
            });
        }
        if let (true, None, Some(api)) = (posts, &self.events, api) {
            self.events = Some(JobEvents::start(api, name, node_name()));
        }
        if let Some(events) = self.events.as_mut().filter(|_| posts) {
            tell_the_start(events, &plan, config, members_before);
        }
        let unjoined = watch_the_attempt(
            peer_loss,
            trainers_done,
            coordinator_unjoined,
            &mut channel,
            config,
            supervisor,
            my_ip,
        );
        let begun = Begun {
            ledger,
            members: plan.pods.iter().map(PodEntry::address).collect(),
            channel: channel.is_some(),
            records: record.is_some(),
            posts,
            who: who.clone(),
            preemptible: channel.is_some() && config.timing.checkpoint().is_some(),
        };
        self.running = Some(Running {
            plan,
            who,
            channel,
            record,
            unjoined,
        });
        begun
    }
}

/// The attempt's start in the job's story: how many pods were found (an elastic job's of how
/// many), after how many restarts, and an elastic job's change of size.
fn tell_the_start(
    events: &mut JobEvents,
    plan: &Plan,
    config: &Config,
    members_before: &[PodAddress],
) {
    let restarted = match plan.restart_count {
        0 => String::new(),
        n => format!(" ({})", lifecycle::restarts_said(n)),
    };
    let found = match config.control.elastic {
        Some(elastic) if plan.pods.len() < elastic.max_pods as usize => format!(
            "{} of the job's {} pods found (elastic, at least {})",
            plan.pods.len(),
            elastic.max_pods,
            elastic.min_pods
        ),
        _ => format!("all {} pods of the job found", plan.pods.len()),
    };
    events.post(
        EventKind::Normal,
        "Started",
        &format!("{found}: training started{restarted}"),
    );
    if let Some((reason, message)) = resized(members_before, &plan.pods, config.control.elastic) {
        events.post(EventKind::Normal, reason, &message);
    }
}

/// The watches that may end the attempt from here on — a peer's loss, the channel's, a
/// coordinator this pod cannot join (what it found is set in the cell returned) — and for a
/// pserver pod the trainers' end.
fn watch_the_attempt(
    peer_loss: Option<BoxFuture<'static, String>>,
    trainers_done: Option<BoxFuture<'static, Result<String, String>>>,
    coordinator_unjoined: Option<UnjoinedCoordinator>,
    channel: &mut Option<Channel>,
    config: &Config,
    supervisor: &mut Supervisor,
    my_ip: IpAddr,
) -> Arc<OnceLock<ConfigError>> {
    let mut losses = Vec::new();
    if let (true, Some(loss)) = (config.topology.watch_peers, peer_loss) {
        losses.push(loss.map(Loss::of_pod).boxed());
    }
    if let Some(channel) = channel.as_mut() {
        losses.push(channel.losses());
    }
    let unjoined = Arc::new(OnceLock::new());
    if let Some(coordinator) = coordinator_unjoined {
        // As long as a coordinator would go on gathering, waiting for this pod's hello.
        let looking = config
            .timing
            .wait_timeout
            .unwrap_or(UNJOINED_LOOK_UNBOUNDED);
        let found = unjoined.clone();
        losses.push(channel_without_secret(my_ip, coordinator, looking, found).boxed());
    }
    supervisor.forget_watches();
    if !losses.is_empty() {
        let first = futures::future::select_all(losses).map(|(reason, _, _)| reason);
        supervisor.watch_peers(first.boxed());
    }
    // A pserver pod ends with the trainers: the API shows them all Succeeded, or the
    // coordinator says so first (a Succeeded pod the API no longer lists is never counted).
    if let Some(done) = trainers_done {
        let done = match channel.as_ref() {
            Some(channel) => {
                let said = channel.job_succeeded().map(Ok);
                futures::future::select(done, said)
                    .map(|either| either.factor_first().0)
                    .boxed()
            }
            None => done,
        };
        supervisor.end_when(done);
    }
    unjoined
}

/// Runs the attempt: the workspace prepared and the peers checked — the attempt's loss or a
/// stop meanwhile ends it there, before anything more is started — then the pod's processes,
/// supervised until they end. The attempt's end; or (the outer error) the workspace's own
/// failure, which ends this pod at once: its channel dropped, the others see a loss they may
/// restart from, as from a pod that died.
/// The job's size as this attempt has it, for the metrics: its trainer pods, its trainer
/// processes (every process knows the world's size), an elastic job's range.
fn size_of(plan: &Plan, config: &Config) -> Size {
    let pods = plan.num_gradient_servers;
    let ranks = plan
        .processes
        .iter()
        .find_map(|p| p.place.as_ref().map(|place| place.of));
    Size {
        pods,
        ranks: ranks.map_or(pods, |n| n as u32),
        elastic: config
            .control
            .elastic
            .as_ref()
            .map(|e| (e.min_pods, e.max_pods)),
    }
}

async fn run(
    running: &Running,
    preparing_before: &mut Option<JoinHandle<Result<(), Error>>>,
    config: &Config,
    supervisor: &mut Supervisor,
    my_ip: IpAddr,
    board: Option<&SharedBoard>,
) -> Result<Result<Outcome, Error>, Error> {
    let plan = &running.plan;
    let for_workspace = plan.clone();
    let mut preparing = tokio::task::spawn_blocking(move || workspace::prepare(&for_workspace));
    let doing = "preparing the workspace";
    let prepared = interruptible(Some(supervisor), doing, Breaks::AlsoLoss, &mut preparing);
    // The workspace's own failure ends the pod; a stop or the attempt's loss, the attempt.
    let prepared = match prepared.await {
        Ok(joined) => {
            joined.map_err(|e| Error::io(format!("{doing} failed"), e.into()))??;
            Ok(())
        }
        Err(lost @ Error::PeerLost { .. }) => {
            *preparing_before = Some(preparing);
            Err(lost)
        }
        Err(ended) => Err(ended),
    };
    let checked = match (prepared, peers_to_check(plan, config)) {
        (Err(ended), _) => Err(ended),
        (Ok(()), peers) if peers.is_empty() => Ok(Vec::new()),
        (Ok(()), peers) => {
            let doing = format!(
                "checking that every peer's trainer endpoint answers from {my_ip} ({}, at most {} s each)",
                crate::vocabulary::count(peers.len(), "peer"),
                PEER_CHECK_TIMEOUT.as_secs()
            );
            info!("{doing}");
            interruptible(
                Some(supervisor),
                &doing,
                Breaks::AlsoLoss,
                silent_peers(my_ip, peers),
            )
            .await
        }
    };
    let channel = running.channel.as_ref();
    let result = match checked {
        Ok(silent) if silent.is_empty() => {
            drive(supervisor, plan, config, channel, &running.who, board).await
        }
        Ok(silent) => Err(Error::PeersUnreachable {
            peers: named_peers(&silent),
            from: my_ip,
            limit_s: PEER_CHECK_TIMEOUT.as_secs(),
        }),
        // Stopped before the trainer started: told to the job like any end (a preemption
        // as such: the restart around the replacement spends nothing).
        Err(stopped) => {
            if let (Some(channel), Error::Stopped { signal, .. }) = (channel, &stopped) {
                if *signal == nix::libc::SIGTERM && config.timing.checkpoint().is_some() {
                    let reason = "preempted (SIGTERM before its trainer started)";
                    channel.preempted(&crate::loss::said_by(&running.who, &now_utc(), reason));
                }
            }
            Err(stopped)
        }
    };
    // A pod that cannot join the job's channel ends as bad configuration, whatever its
    // children did once stopped.
    Ok(match running.unjoined.get() {
        Some(error) => Err(Error::Config(error.clone())),
        None => result,
    })
}

impl Attempts {
    /// Carries out one of the machine's commands between the gathering and the pod's end
    /// (`Gather` and `Finish` are the caller's), and says what came of it. The outer error
    /// ends the pod at once (the workspace's own failure, a stop while a lost attempt's
    /// preparation is waited for).
    pub(super) async fn execute(
        &mut self,
        command: Command,
        config: &Config,
        supervisor: &mut Supervisor,
        my_ip: IpAddr,
    ) -> Result<Input, Error> {
        Ok(match command {
            Command::Run => {
                let Some(running) = self.running.as_ref() else {
                    return Err(out_of_order("a run with no attempt begun"));
                };
                self.show(|b| b.training(size_of(&running.plan, config)));
                let preparing = &mut self.preparing_before;
                let board = self.board.as_ref();
                let result = run(running, preparing, config, supervisor, my_ip, board).await?;
                let state = self.channel_state();
                Input::Ran {
                    result,
                    at: now_utc(),
                    state,
                }
            }
            Command::TellFailure(ended) => {
                if let Some(channel) = self.channel() {
                    ending::tell_failure(channel, ended).await;
                }
                Input::Told(self.channel_state())
            }
            Command::AwaitVerdict {
                limit,
                doing,
                record,
            } => {
                self.record(record, config);
                let verdict = match self.channel() {
                    Some(channel) => {
                        let waiting = channel.verdict(limit);
                        interruptible(Some(supervisor), &doing, Breaks::StopOnly, waiting).await
                    }
                    None => Ok(false),
                };
                let state = self.channel_state();
                Input::Verdict { verdict, state }
            }
            Command::ReadVerdict { stopped, record } => {
                self.record(record, config);
                let verdict = Ok(ending::read_verdict(self.channel(), stopped));
                let state = self.channel_state();
                Input::Verdict { verdict, state }
            }
            Command::Restart {
                line,
                posts,
                record,
                kind,
            } => {
                self.show(|b| b.restarting(kind));
                self.record(record, config);
                self.restart(&line, posts, supervisor).await?;
                Input::Restarted
            }
            Command::Close { succeeded, record } => {
                self.record(record, config);
                Input::Closed(self.close(succeeded, config, supervisor).await)
            }
            Command::Gather { .. } | Command::Finish { .. } => {
                return Err(out_of_order("a gathering or an end, which its caller does"));
            }
        })
    }

    /// A preemption recorded on the Job (the coordinator's, with an API): in the background,
    /// as soon as it is known — the pods created again count it, and it spends nothing there
    /// either. Only a pod that ends waits for it (`close`).
    fn record(&mut self, record: Option<Recorded>, config: &Config) {
        let (Some(record), Some(running)) = (record, self.running.as_ref()) else {
            return;
        };
        if let Some(job) = &running.record {
            debug!(
                "recording the preemption on Job {}",
                config.topology.job_name
            );
            self.recording = Some(job.write(record));
        }
    }

    /// The job restarts in place: said, told in the job's story, the channel closed, a lost
    /// attempt's workspace preparation waited for (the next one's must not run beside it).
    async fn restart(
        &mut self,
        line: &str,
        posts: Vec<Post>,
        supervisor: &mut Supervisor,
    ) -> Result<(), Error> {
        warn!("{line}");
        self.post(posts);
        // A preemption's record goes on in the background; only the attempt that ends the pod
        // waits for its own (`close`), not one left by an attempt restarted from.
        self.recording = None;
        if let Some(mut channel) = self.running.take().and_then(|r| r.channel) {
            channel.finish(false).await;
        }
        // Waited for before gathering, so that the job's wait for this pod is bounded as any
        // gathering is, and a stop signal ends this pod as it would while gathering.
        if let Some(earlier) = self.preparing_before.take() {
            let doing = "waiting for the workspace preparation of the attempt that was lost to end";
            info!("{doing}");
            let ended = interruptible(Some(supervisor), doing, Breaks::StopOnly, earlier);
            match ended.await? {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!("the lost attempt's workspace preparation: {e}"),
                Err(e) => debug!("the lost attempt's workspace preparation: {e}"),
            }
        }
        Ok(())
    }

    /// The pod ends: a preemption's record waited for (briefly), the others' reports waited
    /// for (a stop signal ends that wait; the pod's outcome stands); what the channel said
    /// last — a loss told while the others reported is the job's too.
    async fn close(
        &mut self,
        succeeded: bool,
        config: &Config,
        supervisor: &mut Supervisor,
    ) -> ChannelState {
        if let Some(written) = self.recording.take() {
            let job = &config.topology.job_name;
            let limit = PREEMPTION_RECORD_WAIT.as_secs();
            info!("waiting for the preemption's record on Job {job} (at most {limit} s)");
            if timeout(PREEMPTION_RECORD_WAIT, written).await.is_err() {
                warn!(
                    "the preemption may not be recorded on Job {job} (no answer within {limit} s): if every pod of the job is lost, its restart may spend a restart"
                );
            }
        }
        let Some(mut channel) = self.running.take().and_then(|r| r.channel) else {
            return ChannelState::default();
        };
        let _ = interruptible(
            Some(&mut *supervisor),
            "waiting for the other launchers to report",
            Breaks::StopOnly,
            channel.finish(succeeded),
        )
        .await;
        ending::state_of(Some(&channel))
    }

    /// The pod's end: what is left of its processes killed, the job's last events posted and
    /// let go out.
    pub(super) async fn finish(
        &mut self,
        outcome: Outcome,
        posts: Vec<Post>,
        supervisor: &mut Supervisor,
    ) -> Outcome {
        self.show(|b| b.set_state(State::Ending));
        supervisor.finish();
        let mut posts = posts;
        let (Some(last), Some(_)) = (posts.pop(), self.events.as_ref()) else {
            return outcome;
        };
        self.post(posts);
        if let Some(events) = self.events.as_mut() {
            // The job's end: posted even when the queue is full.
            events.post_final(last.kind, last.reason, &last.message);
            events.flush(EVENTS_FLUSH).await;
        }
        outcome
    }

    /// Posts the machine's events, when this launcher tells the job's story.
    fn post(&mut self, posts: Vec<Post>) {
        let Some(events) = self.events.as_mut() else {
            return;
        };
        for post in posts {
            events.post(post.kind, post.reason, &post.message);
        }
    }
}

/// The executor was asked what its caller does: a mistake in the code, said as one.
fn out_of_order(what: &str) -> Error {
    Error::io(
        "the attempt loop's executor",
        std::io::Error::other(format!("asked out of order: {what}")),
    )
}

/// An elastic job that starts with other pods than its last attempt: the event that says so
/// (its reason, its message), naming the pods that left or came. None for the first start and
/// for a job that is not elastic.
fn resized(
    before: &[PodAddress],
    now: &[PodEntry],
    elastic: Option<crate::config::Elastic>,
) -> Option<(&'static str, String)> {
    let elastic = elastic?;
    if before.is_empty() || before.len() == now.len() {
        return None;
    }
    let of = |pods: usize| format!("{pods} of {}", elastic.max_pods);
    let change = format!("from {} to {} pods", of(before.len()), of(now.len()));
    if now.len() < before.len() {
        let gone: Vec<&str> = before
            .iter()
            .filter(|b| !now.iter().any(|n| n.name == b.name))
            .map(|b| b.name.as_str())
            .collect();
        Some((
            "ScaledDown",
            format!(
                "{change}: {} not Running again within the elastic wait of {} s",
                gone.join(", "),
                elastic.wait.as_secs()
            ),
        ))
    } else {
        let came: Vec<&str> = now
            .iter()
            .filter(|n| !before.iter().any(|b| b.name == n.name))
            .map(|n| n.name.as_str())
            .collect();
        Some(("ScaledUp", format!("{change}: {} joined", came.join(", "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of an elastic job's size: down, naming the pods gone and the wait; up,
    /// naming the pods come; nothing at the first start, at the same size, or when not elastic.
    #[test]
    fn an_elastic_jobs_size_changes_are_told() {
        let pod = |name: &str, last: u8| PodAddress {
            name: name.into(),
            ip: std::net::IpAddr::from([10, 0, 0, last]),
        };
        let entry = |name: &str, last: u8| PodEntry {
            name: name.into(),
            ip: std::net::IpAddr::from([10, 0, 0, last]),
            rank: 0,
            role: "both",
        };
        let elastic = Some(crate::config::Elastic {
            min_pods: 2,
            max_pods: 3,
            wait: std::time::Duration::from_secs(180),
        });
        let three = [pod("j-0", 1), pod("j-1", 2), pod("j-2", 3)];
        let two = [entry("j-0", 1), entry("j-2", 3)];
        assert_eq!(
            resized(&three, &two, elastic),
            Some((
                "ScaledDown",
                "from 3 of 3 to 2 of 3 pods: j-1 not Running again within the elastic wait of 180 s".into()
            ))
        );
        let back = [entry("j-0", 1), entry("j-3", 4), entry("j-2", 3)];
        let before = [pod("j-0", 1), pod("j-2", 3)];
        assert_eq!(
            resized(&before, &back, elastic),
            Some(("ScaledUp", "from 2 of 3 to 3 of 3 pods: j-3 joined".into()))
        );
        assert_eq!(resized(&[], &two, elastic), None);
        assert_eq!(resized(&before, &two, elastic), None);
        assert_eq!(resized(&three, &two, None), None);
    }
}
