//! What coordinating costs at scale, without processes: the pure `Core` fed the hellos of a
//! big job, then a loss, with the fan-out's one encoding and one MAC per link, as the task
//! does them. For `cargo bench --bench launch -- coordinator`.

use std::time::{Duration, Instant};

use super::coordinator::{Core, Effect, Input, Setup};
use super::wire::{Encoded, Message, Session, WireError};
use crate::config::Secret;
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
    let (mut core, mut effects) = Core::start(
        Setup {
            me: names[0].clone(),
            others: names[1..].to_vec(),
            view: "v".into(),
            next_epoch: 0,
            max_restarts: 3,
            join_grace: Duration::from_secs(60),
            membership: Some(membership),
            ended: None,
            who: String::new(),
            report_every: Duration::from_secs(10),
        },
        tokio::time::Instant::now(),
    );
    for (i, name) in names.iter().enumerate().skip(1) {
        effects.extend(core.step(Input::Joined {
            link: i as u64,
            pod: name.clone(),
            next_epoch: 0,
            view: "v".into(),
            max_restarts: 3,
            who: format!("pod {name} on node n{i} (trainer id {i} of {members})"),
        }));
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

/// Encodes each broadcast once and seals it for every link; the size of the last frame.
fn seal_broadcasts(effects: &[Effect], sessions: &mut [Session]) -> usize {
    let mut frame = 0;
    for effect in effects {
        if let Effect::Broadcast(message @ (Message::Go { .. } | Message::Lost { .. })) = effect {
            let encoded = Encoded::new(message);
            for session in sessions.iter_mut() {
                // Kept, as a socket write would: the copy must not be optimised away.
                frame = std::hint::black_box(session.seal_encoded(&encoded)).len();
            }
        }
    }
    frame
}
