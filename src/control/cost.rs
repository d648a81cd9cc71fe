//! What coordinating costs at scale, without processes: the pure `Core` fed the hellos of a
//! big job, then a loss, with the fan-out's one encoding and one MAC per link, as the task
//! does them. For `cargo bench --bench launch -- coordinator`.

use std::time::{Duration, Instant};

use super::coordinator::{Core, Effect, Input, Setup, Terms};
use super::message::{Message, WireError};
use super::wire::{Encoded, Session};
use crate::config::Secret;
use crate::loss::{Kind, Loss};
use crate::membership::{Member, Membership};

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorCost {
    pub members: usize,
    /// CPU-bound time from the first hello to every `Go` sealed for its link.
    pub start: Duration,
    /// From a member's failure to every `Lost` sealed for its link.
    pub restart: Duration,
    /// The bytes of one `Go` frame (it carries the membership) and of one `Lost` frame.
    pub go_frame: usize,
    pub lost_frame: usize,
}

/// Hang detection's part of coordinating, measured on its own.
#[derive(Debug, Clone, Copy)]
pub struct ProgressCost {
    /// One heartbeat of every follower carrying its progress, each frame authenticated,
    /// parsed and noted by the core, as the links and the task do.
    pub round: Duration,
    /// The bytes of a heartbeat frame with progress, and without.
    pub progress_frame: usize,
    pub beat_frame: usize,
    /// From a member's hang report to every `Lost` sealed, the suspect named from every report.
    pub hang: Duration,
}

/// Measures a coordinator of `members` launchers (itself included).
pub fn measure_coordinator(members: usize) -> CoordinatorCost {
    let names: Vec<String> = (0..members).map(|i| format!("job-{i}")).collect();
    let membership = Membership {
        pservers: Vec::new(),
        trainers: names
            .iter()
            .enumerate()
            .map(|(rank, name)| Member {
                name: name.clone(),
                ip: std::net::IpAddr::from([10, (rank >> 16) as u8, (rank >> 8) as u8, rank as u8]),
                rank,
            })
            .collect(),
    };
    let secret = Secret(vec![7; 32]);
    let mut sessions: Vec<Session> = (1..members)
        .map(|_| Session::new(&secret, [3; 32], true))
        .collect();
    let began = Instant::now();
    let (mut core, mut effects) = started(&names, Some(membership));
    for (link, name) in names.iter().enumerate().skip(1) {
        effects.extend(core.step(hello(link, name, members)));
    }
    let go_frame = seal_broadcasts(&effects, &mut sessions);
    let start = began.elapsed();
    let began = Instant::now();
    let effects = core.step(Input::Ended {
        link: 1,
        pod: names[1].clone(),
        why: WireError::Closed,
    });
    let lost_frame = seal_broadcasts(&effects, &mut sessions);
    let restart = began.elapsed();
    CoordinatorCost {
        members,
        start,
        restart,
        go_frame,
        lost_frame,
    }
}

/// A job of `members` launchers whose followers all report progress once, then one reports a
/// hang.
pub fn measure_progress(members: usize) -> ProgressCost {
    let names: Vec<String> = (0..members).map(|i| format!("job-{i}")).collect();
    let secret = &Secret(vec![7; 32]);
    let now = Instant::now();
    let (mut core, _) = started(&names, None);
    for (link, name) in names.iter().enumerate().skip(1) {
        core.step(hello(link, name, names.len()));
    }
    // What the followers send: a step in the thousands, a few seconds of quiet.
    let mut frames = Vec::with_capacity(names.len());
    let mut beat_frame = 0;
    for i in 1..names.len() {
        let mut follower = Session::new(secret, [3; 32], false);
        let message = Message::Progress {
            step: Some(120_000 + i as u64 % 7),
            quiet_ms: 4_000 + i as u64,
            behind: None,
            ranks: Vec::new(),
        };
        frames.push(follower.seal(&message));
        beat_frame = Session::new(secret, [3; 32], false)
            .seal(&Message::beat())
            .len();
    }
    let progress_frame = frames.first().map_or(0, Vec::len);
    let began = Instant::now();
    for (i, frame) in frames.iter().enumerate() {
        let mut link = Session::new(secret, [3; 32], true);
        let length = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        let (payload, mac) = frame[4..].split_at(length);
        if let Ok(Message::Progress {
            step,
            quiet_ms,
            behind,
            ..
        }) = link.open(payload, mac)
        {
            core.step(Input::Progress {
                link: i as u64 + 1,
                pod: names[i + 1].clone(),
                step,
                quiet: Duration::from_millis(quiet_ms),
                at: now,
                behind,
            });
        }
    }
    let progress_round = began.elapsed();
    let mut sessions: Vec<Session> = (1..names.len())
        .map(|_| Session::new(secret, [3; 32], true))
        .collect();
    let began = Instant::now();
    let effects = core.step(Input::Said {
        link: 1,
        pod: names[1].clone(),
        message: Message::Failed(Loss {
            reason: "trainer-1 made no progress for 900 s".into(),
            restart: true,
            kind: Kind::Hang,
        }),
    });
    std::hint::black_box(seal_broadcasts(&effects, &mut sessions));
    ProgressCost {
        round: progress_round,
        progress_frame,
        beat_frame,
        hang: began.elapsed(),
    }
}

/// What a job's heartbeats cost once they carry every process's step.
#[derive(Debug, Clone, Copy)]
pub struct HeartbeatCost {
    /// A follower's beat: its processes' gauges read, the frame encoded and sealed.
    pub follower: Duration,
    /// The coordinator's part of one beat of every follower: opened, parsed, noted in its
    /// view of the job.
    pub coordinator: Duration,
    /// The bytes of one beat frame with the processes' steps, and without.
    pub frame: usize,
    pub bare_frame: usize,
}

/// Heartbeats of a job of `pods` pods of `per_pod` processes, each the mean of `rounds`.
pub fn measure_heartbeats(pods: u32, per_pod: u32, rounds: u32) -> HeartbeatCost {
    use super::news::{read, Gauges, RankGauge};
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    let secret = &Secret(vec![7; 32]);
    let gauges: Gauges = Default::default();
    *gauges.lock().unwrap() = (0..per_pod)
        .map(|i| RankGauge {
            trainer_id: i,
            step: Arc::new(AtomicU64::new(120_000 + u64::from(i))),
            compute_ms: Arc::new(AtomicU64::new(85 + u64::from(i))),
        })
        .collect();
    let mut follower = Session::new(secret, [3; 32], false);
    let began = Instant::now();
    let mut frame = Vec::new();
    for _ in 0..rounds {
        let beat = Message::Beat {
            ranks: read(&gauges),
            note: None,
        };
        frame = std::hint::black_box(follower.seal(&beat));
    }
    let follower_cost = began.elapsed() / rounds.max(1);
    let bare_frame = Session::new(secret, [3; 32], false)
        .seal(&Message::beat())
        .len();
    let start = Instant::now();
    let mut view = crate::job_view::JobView::new("bench", None, start);
    let names: Vec<String> = (1..pods).map(|p| format!("job-{p}")).collect();
    let mut links: Vec<Session> = (1..pods)
        .map(|_| Session::new(secret, [3; 32], true))
        .collect();
    let mut senders: Vec<Session> = (1..pods)
        .map(|_| Session::new(secret, [3; 32], false))
        .collect();
    let mut spent = Duration::ZERO;
    for _ in 0..rounds {
        let frames: Vec<Vec<u8>> = senders
            .iter_mut()
            .map(|s| {
                s.seal(&Message::Beat {
                    ranks: read(&gauges),
                    note: None,
                })
            })
            .collect();
        let began = Instant::now();
        for ((frame, link), pod) in frames.iter().zip(&mut links).zip(&names) {
            let length = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
            let (payload, mac) = frame[4..].split_at(length);
            if let Ok(Message::Beat { ranks, .. }) = link.open(payload, mac) {
                view.note(pod, pod, &ranks, start);
            }
        }
        spent += began.elapsed();
    }
    HeartbeatCost {
        follower: follower_cost,
        coordinator: spent / rounds.max(1),
        frame: frame.len(),
        bare_frame,
    }
}

/// A coordinator of `names` (itself the first), gathering, and what it says at once.
fn started(names: &[String], membership: Option<Membership>) -> (Core, Vec<Effect>) {
    let setup = Setup {
        me: names[0].clone(),
        others: names[1..].to_vec(),
        view: "v".into(),
        terms: Terms::first(3),
        join_grace: Duration::from_secs(60),
        membership,
        ended: None,
        who: String::new(),
        progress_margin: Duration::from_secs(20),
        hello_overdue: Duration::from_secs(30),
        growth: None,
    };
    Core::start(setup, Instant::now())
}

/// Member `link`'s hello, with the view and budget every member has.
fn hello(link: usize, name: &str, members: usize) -> Input {
    Input::Joined {
        link: link as u64,
        pod: name.to_string(),
        view: "v".into(),
        who: format!("pod {name} on node n{link} (trainer id {link} of {members})"),
        terms: Terms::first(3),
    }
}

/// Encodes each broadcast once and seals it for every link; the size of the last frame.
fn seal_broadcasts(effects: &[Effect], sessions: &mut [Session]) -> usize {
    let mut frame = 0;
    for effect in effects {
        if let Effect::Broadcast(message @ (Message::Go { .. } | Message::Lost(Loss { .. }))) =
            effect
        {
            let encoded = Encoded::new(message);
            for session in sessions.iter_mut() {
                // Kept, as a socket write would: the copy must not be optimised away.
                frame = std::hint::black_box(session.seal_encoded(&encoded)).len();
            }
        }
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measurements measure something: a `Go` that carries every member, a `Lost`, and a
    /// heartbeat with progress larger than one without.
    #[test]
    fn the_measurements_see_the_frames_they_time() {
        let cost = measure_coordinator(50);
        assert!(cost.go_frame > 50 * 10, "{cost:?}");
        assert!(cost.lost_frame > 0 && cost.lost_frame < cost.go_frame);
        let progress = measure_progress(50);
        assert!(
            progress.progress_frame > progress.beat_frame,
            "{progress:?}"
        );
    }
}
