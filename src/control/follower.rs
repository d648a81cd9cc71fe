//! A follower's side of one attempt's channel: connect to the coordinator, say hello, then beat
//! and listen until this launcher finishes.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::time::{sleep, timeout, Instant};
use tracing::info;

use super::wire::*;
use super::{Ends, Heard, Joining, Recheck, Request, RECHECK_FIRST, RECHECK_LAST};

/// A follower's side of one attempt: connect (retrying while the coordinator is not up yet),
/// say hello, wait for `Go`, then beat and listen until this launcher finishes.
pub(super) async fn follow(
    joining: Joining,
    coordinator: SocketAddr,
    recheck: Option<Recheck>,
    mut ends: Ends,
) {
    let limit = joining.heartbeat_timeout;
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut last_said = None;
    let mut last_recheck = Instant::now();
    let mut recheck_every = RECHECK_FIRST;
    let (challenge, reader, mut writer) = loop {
        // A stop (the launcher closing the channel) ends every wait here, even a connect that
        // takes its whole timeout.
        let Some(connected) = unless_finished(&mut ends, handshake(&joining, coordinator)).await
        else {
            return;
        };
        let why = match connected {
            Ok(connected) => break connected,
            Err(why) => why,
        };
        if let Some(recheck) = recheck
            .as_ref()
            .filter(|_| last_recheck.elapsed() >= recheck_every)
        {
            let Some(answer) = unless_finished(&mut ends, recheck()).await else {
                return;
            };
            last_recheck = Instant::now();
            recheck_every = (recheck_every * 2).min(RECHECK_LAST);
            // Only a definite answer moves the follower: a failed lookup keeps it knocking at
            // the address it has.
            let moved = answer.and_then(|ips| moved_to(coordinator, &ips));
            if let Some(moved) = moved {
                ends.hear(Heard::Regather(format!(
                    "the coordinating launcher at {coordinator} cannot be reached ({why}) and {moved}"
                )));
                return;
            }
        }
        if started.elapsed() > joining.join_grace {
            ends.hear(Heard::Regather(format!(
                "the coordinating launcher at {coordinator} could not be reached for {} s ({why})",
                joining.join_grace.as_secs()
            )));
            return;
        }
        // The first refusal and then one line in ten seconds: it may take a while.
        if last_said.is_none_or(|at: Instant| at.elapsed() > Duration::from_secs(10)) {
            info!("control channel: waiting for the coordinator at {coordinator} ({why})");
            last_said = Some(Instant::now());
        }
        tokio::select! {
            _ = sleep(pause) => {}
            request = ends.requests.recv() => match request {
                Some(Request::Finish { .. }) | None => return,
                // Only a coordinator's launcher routes the pods it sees lost to its channel.
                Some(Request::Failed { .. } | Request::Done | Request::PodLost(_) | Request::Stopped | Request::Preempted(_)) => {}
            },
        }
        pause = (pause * 2).min(Duration::from_millis(250));
    };
    ends.said_hello.send_replace(true);
    let mut out = Session::new(&joining.secret, challenge, false);
    out.sent = 1; // the hello
    let (mut incoming, _reader) = frames(Session::new(&joining.secret, challenge, false), reader);
    let mut beat = tokio::time::interval(limit / 3);
    let mut heard_until = Instant::now() + limit;
    let mut running = false;
    let mut said_done = false;
    // Set once the coordinator said Lost or Bye: the link's end is no news after that.
    let mut told = false;
    let broken = loop {
        tokio::select! {
            frame = incoming.recv() => match frame {
                Some(Ok(Message::Beat)) => heard_until = Instant::now() + limit,
                Some(Ok(Message::Go { epoch, membership, max_restarts, preemptions })) if !running => {
                    running = true;
                    heard_until = Instant::now() + limit;
                    ends.hear(Heard::Go { epoch, membership, max_restarts, preemptions });
                }
                Some(Ok(Message::Checkpoint { reason })) if running => {
                    heard_until = Instant::now() + limit;
                    ends.checkpoint(reason);
                }
                Some(Ok(Message::Regather { reason })) if !running => {
                    ends.hear(Heard::Regather(reason));
                    told = true;
                    break None;
                }
                Some(Ok(Message::Lost { reason, restart, hang, preempted })) => {
                    ends.hear(Heard::Lost { reason, restart, hang, preempted });
                    told = true;
                    break None;
                }
                Some(Ok(Message::Bye)) => {
                    info!("control channel: the coordinator finished");
                    ends.may_restart.send_replace(false);
                    told = true;
                    break None;
                }
                // Also before `Go`: a member joining after a loss hears of a success too.
                Some(Ok(Message::Finished { pod })) => {
                    heard_until = Instant::now() + limit;
                    if ends.may_restart.send_replace(false) {
                        info!("control channel: the trainer of {pod} succeeded: the job cannot start again as a whole");
                    }
                }
                Some(Ok(Message::Verdict { restart })) => {
                    // Before any `Lost` (never sent so, but a launcher must not wait on it).
                    ends.hear(Heard::Lost {
                        reason: "the coordinator decided the job's loss".into(),
                        restart,
                        hang: false,
                        preempted: false,
                    });
                    ends.knows_verdict(restart);
                    told = true;
                    break None;
                }
                Some(Ok(other)) => break Some(format!("unexpected {other:?}")),
                Some(Err(e)) => break Some(e.to_string()),
                None => break Some("closed".into()),
            },
            _ = tokio::time::sleep_until(heard_until) => {
                break Some(format!("sent no heartbeat for {} s (frozen, or its node is gone)", limit.as_secs()));
            }
            _ = beat.tick() => {
                if let Err(e) = out.write(&mut writer, &beat_of(&ends), limit).await {
                    break Some(e.to_string());
                }
            }
            request = ends.requests.recv() => match request {
                Some(Request::Failed { reason, restartable, hang }) => {
                    let _ = out.write(&mut writer, &Message::Failed { reason, restartable, hang }, limit).await;
                }
                Some(Request::PodLost(_)) => {}
                Some(Request::Preempted(reason)) => {
                    if running {
                        let _ = out.write(&mut writer, &Message::Preempted { reason }, limit).await;
                    }
                }
                Some(Request::Stopped) => {
                    let _ = out.write(&mut writer, &Message::Stopped, limit).await;
                }
                Some(Request::Done) => {
                    if running && !said_done {
                        said_done = true;
                        let _ = out.write(&mut writer, &Message::Done, limit).await;
                    }
                }
                Some(Request::Finish { succeeded }) => {
                    if succeeded && running && !said_done {
                        let _ = out.write(&mut writer, &Message::Done, limit).await;
                    }
                    close_gracefully(&mut writer, &mut incoming).await;
                    return;
                }
                None => return,
            },
        }
    };
    let mut listening = broken.is_none();
    if let (Some(why), false) = (broken, told) {
        let reason = match why.strip_prefix("sent no heartbeat") {
            Some(_) => format!("the coordinating launcher at {coordinator} {why}"),
            None => {
                format!("lost the connection to the coordinating launcher at {coordinator} ({why})")
            }
        };
        let restart = *ends.may_restart.borrow();
        ends.hear(if running {
            Heard::Lost {
                reason,
                restart,
                hang: false,
                preempted: false,
            }
        } else {
            Heard::Regather(reason)
        });
        // No coordinator to decide: what this launcher knows is its verdict.
        ends.knows_verdict(restart);
    }
    // Stay until this launcher is done with the attempt, beating and saying whatever it still
    // says: a trainer that succeeded as the loss was told must still say so (before it says
    // its children are stopped), and the coordinator's verdict comes once everyone has.
    loop {
        tokio::select! {
            request = ends.requests.recv() => {
                let message = match request {
                    Some(Request::Failed { reason, restartable, hang }) => Message::Failed { reason, restartable, hang },
                    Some(Request::Done) if running && !said_done => {
                        said_done = true;
                        Message::Done
                    }
                    Some(Request::Stopped) => Message::Stopped,
                    // After the loss: the attempt is over, there is nothing to checkpoint for.
                    Some(Request::Done | Request::PodLost(_) | Request::Preempted(_)) => continue,
                    Some(Request::Finish { .. }) | None => break,
                };
                let _ = out.write(&mut writer, &message, limit).await;
            }
            _ = beat.tick(), if listening => {
                if out.write(&mut writer, &beat_of(&ends), limit).await.is_err() {
                    listening = false;
                    // Read first: a borrow held while the same channel is written deadlocks.
                    let restart = *ends.may_restart.borrow();
                    ends.knows_verdict(restart);
                }
            }
            frame = incoming.recv(), if listening => match frame {
                Some(Ok(Message::Lost { restart: false, .. })) => ends.knows_lost(false),
                Some(Ok(Message::Bye | Message::Finished { .. })) => {
                    ends.may_restart.send_replace(false);
                }
                Some(Ok(Message::Verdict { restart })) => ends.knows_verdict(restart),
                Some(Ok(_)) => {}
                // The coordinator is gone: what this launcher knows is its verdict.
                Some(Err(_)) | None => {
                    listening = false;
                    // Read first: a borrow held while the same channel is written deadlocks.
                    let restart = *ends.may_restart.borrow();
                    ends.knows_verdict(restart);
                }
            },
        }
    }
    close_gracefully(&mut writer, &mut incoming).await;
}

/// A heartbeat: with the trainer's progress when this launcher reports it (hang detection on),
/// so that the coordinator can name the rank a hang points at.
fn beat_of(ends: &Ends) -> Message {
    match *ends.progress.borrow() {
        Some((step, last)) => Message::Progress {
            step,
            quiet_ms: last.elapsed().as_millis().min(u64::MAX as u128) as u64,
        },
        None => Message::Beat,
    }
}

/// What the coordinator's name says now, when that is not `coordinator` alone.
fn moved_to(coordinator: SocketAddr, ips: &BTreeSet<std::net::IpAddr>) -> Option<String> {
    match ips.iter().collect::<Vec<_>>().as_slice() {
        [ip] if **ip == coordinator.ip() => None,
        [] => Some("the coordinator's name has no address now".to_string()),
        [ip] => Some(format!("the coordinator's name now points at {ip}")),
        several => Some(format!(
            "the coordinator's name now has {} addresses",
            several.len()
        )),
    }
}

/// `work`, unless this launcher finishes the channel first (None). Other requests have nothing
/// to act on before the connection exists.
async fn unless_finished<F: std::future::Future>(ends: &mut Ends, work: F) -> Option<F::Output> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            done = &mut work => return Some(done),
            request = ends.requests.recv() => match request {
                Some(Request::Finish { .. }) | None => return None,
                Some(
                    Request::Failed { .. }
                    | Request::Done
                    | Request::PodLost(_)
                    | Request::Stopped
                    | Request::Preempted(_),
                ) => {}
            },
        }
    }
}

/// Connects from this pod's own address (the coordinator admits member addresses only),
/// exchanges challenges and says hello.
pub(super) async fn handshake(
    joining: &Joining,
    coordinator: SocketAddr,
) -> Result<
    (
        Challenge,
        tokio::net::tcp::OwnedReadHalf,
        tokio::net::tcp::OwnedWriteHalf,
    ),
    String,
> {
    let socket = match coordinator {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(|e| e.to_string())?;
    socket
        .bind(SocketAddr::new(joining.me.ip, 0))
        .map_err(|e| format!("cannot use {}: {e}", joining.me.ip))?;
    let stream = timeout(HANDSHAKE, socket.connect(coordinator))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| e.to_string())?;
    let (mut reader, mut writer) = stream.into_split();
    let mut server = [0u8; NONCE_LEN];
    timeout(HANDSHAKE, reader.read_exact(&mut server))
        .await
        .map_err(|_| "no challenge".to_string())?
        .map_err(|e| format!("no challenge: {e}"))?;
    let client = nonce().map_err(|e| e.to_string())?;
    let challenge = both(server, client);
    let mut hello = Session::new(&joining.secret, challenge, false);
    let mut first = client.to_vec();
    first.extend(hello.seal(&Message::Hello {
        pod: joining.me.name.clone(),
        next_epoch: joining.next_epoch,
        view: joining.view.clone(),
        max_restarts: joining.max_restarts,
        heartbeat_ms: joining.heartbeat_timeout.as_millis() as u64,
        who: cut(&joining.who),
        preemptions: joining.preemptions,
    }));
    timeout(HANDSHAKE, writer.write_all(&first))
        .await
        .map_err(|_| "cannot say hello".to_string())?
        .map_err(|e| e.to_string())?;
    Ok((challenge, reader, writer))
}
