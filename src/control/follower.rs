//! A follower's side of one attempt's channel: connect to the coordinator, say hello, then beat
//! and listen until this launcher finishes.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{sleep, timeout, Instant};
use tracing::info;

use super::following::{Effect, Following, Input};
use super::message::*;
use super::net::{Net, Reader, Writer};
use super::wire::*;
use super::{Ends, Heard, Joining, Known, Recheck, Request, RECHECK_FIRST, RECHECK_LAST};

/// Connects to the coordinator and says hello, knocking again (at most every 250 ms, said
/// once in ten seconds) until it answers, its name moves to another pod, the join grace ends
/// (the job gathers again) or the launcher closes the channel (None).
async fn connect(
    joining: &Joining,
    coordinator: SocketAddr,
    recheck: Option<&Recheck>,
    ends: &mut Ends,
) -> Option<(Challenge, Reader, Writer)> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut last_said = None;
    let mut last_recheck = Instant::now();
    let mut recheck_every = RECHECK_FIRST;
    loop {
        // A stop (the launcher closing the channel) ends every wait here, even a connect that
        // takes its whole timeout.
        let connected = unless_finished(ends, handshake(joining, coordinator)).await?;
        let why = match connected {
            Ok(connected) => return Some(connected),
            Err(why) => why,
        };
        if let Some(recheck) = recheck.filter(|_| last_recheck.elapsed() >= recheck_every) {
            let answer = unless_finished(ends, recheck()).await?;
            last_recheck = Instant::now();
            recheck_every = (recheck_every * 2).min(RECHECK_LAST);
            // Only a definite answer moves the follower: a failed lookup keeps it knocking at
            // the address it has.
            let moved = answer.and_then(|ips| moved_to(coordinator, &ips));
            if let Some(moved) = moved {
                ends.hear(Heard::Regather(format!(
                    "the coordinating launcher at {coordinator} cannot be reached ({why}) and {moved}"
                )));
                return None;
            }
        }
        if started.elapsed() > joining.join_grace {
            ends.hear(Heard::Regather(format!(
                "the coordinating launcher at {coordinator} could not be reached for {} s ({why})",
                joining.join_grace.as_secs()
            )));
            return None;
        }
        // The first refusal and then one line in ten seconds: it may take a while.
        if last_said.is_none_or(|at: Instant| at.elapsed() > Duration::from_secs(10)) {
            info!("control channel: waiting for the coordinator at {coordinator} ({why})");
            last_said = Some(Instant::now());
        }
        tokio::select! {
            _ = sleep(pause) => {}
            request = ends.requests.recv() => match request {
                Some(Request::Finish { .. }) | None => return None,
                // Only a coordinator's launcher routes the pods it sees lost to its channel.
                Some(Request::Failed { .. } | Request::Done | Request::PodLost(_) | Request::Stopped | Request::Preempted(_)) => {}
            },
        }
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// A follower's side of one attempt: connect (retrying while the coordinator is not up yet),
/// say hello, wait for `Go`, then beat and listen until this launcher finishes.
pub(super) async fn follow(
    joining: Joining,
    coordinator: SocketAddr,
    recheck: Option<Recheck>,
    mut ends: Ends,
) {
    let limit = joining.heartbeat_timeout;
    let Some((challenge, reader, mut writer)) =
        connect(&joining, coordinator, recheck.as_ref(), &mut ends).await
    else {
        return;
    };
    ends.know(Known::SaidHello);
    let news = super::news::JobNews::CoordinatorAt(coordinator);
    joining.reporting.tell(news);
    let mut out = Session::new(&joining.secret, challenge, false);
    out.sent = 1; // the hello
    let (mut incoming, _reader) = frames(Session::new(&joining.secret, challenge, false), reader);
    let mut beat = tokio::time::interval(limit / 3);
    let mut heard_until = Instant::now() + limit;
    let mut following = Following::new(coordinator.to_string());
    loop {
        // The heartbeat deadline counts only until the attempt's end is known.
        let judged = following.listening() && !following.told();
        // What came in first: a launcher frozen past its heartbeat timeout reads the frames
        // already there (a refusal, a verdict) before it judges the silence.
        let input = tokio::select! {
            biased;
            frame = incoming.recv(), if following.listening() => match frame {
                Some(Ok(message)) => {
                    heard_until = Instant::now() + limit;
                    Input::Frame(message)
                }
                Some(Err(e)) => Input::Broken(e.to_string()),
                None => Input::Broken("closed".into()),
            },
            _ = tokio::time::sleep_until(heard_until), if judged => {
                Input::Silent(limit.as_secs())
            }
            _ = beat.tick(), if following.listening() => {
                match out.write(&mut writer, &beat_of(&ends), limit).await {
                    Ok(()) => continue,
                    Err(e) => Input::Broken(e.to_string()),
                }
            }
            request = ends.requests.recv() => match request {
                Some(request) => Input::Request(request),
                None => Input::Request(Request::Finish { succeeded: false }),
            },
        };
        for effect in following.step(input) {
            match effect {
                Effect::Hear(heard) => ends.hear(heard),
                // What this launcher says goes out even after the link failed: a write that
                // fails then changes nothing.
                Effect::Say(message) => {
                    let _ = out.write(&mut writer, &message, limit).await;
                }
                Effect::Know(known) => ends.know(known),
                Effect::Served(pod) => ends.served(&pod),
                Effect::StopListening => {}
                Effect::Log(line) => super::write_log(vec![line]),
                Effect::Close => {
                    close_gracefully(&mut writer, &mut incoming).await;
                    return;
                }
            }
        }
    }
}

/// A heartbeat: with the trainer's progress when this launcher reports it (hang detection on),
/// so that the coordinator can name the rank a hang points at.
/// With its processes' steps when it reads them (the coordinator's view of the job).
fn beat_of(ends: &Ends) -> Message {
    let ranks = super::news::read(&ends.gauges);
    match *ends.progress.borrow() {
        Some((step, last, behind)) => Message::Progress {
            step,
            quiet_ms: last.elapsed().as_millis().min(u64::MAX as u128) as u64,
            behind,
            ranks,
        },
        None => Message::Beat { ranks, note: None },
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

/// How long a launcher that sent its challenge is silent, waiting for the hello, before a
/// prober takes it for one (it waits `HANDSHAKE`).
const SILENT_AFTER_CHALLENGE: Duration = Duration::from_millis(500);

/// Whether a launcher serves a control channel at `at`, as a pod at `from` sees it: it accepts
/// a connection from that address, sends a challenge's bytes at once and then nothing (it waits
/// for the hello); a server that says more (an SSH banner) or closes is no launcher. How a pod
/// without the job secret finds that the others have one (it can say no hello, so it only
/// reads).
pub async fn serves_a_channel(
    network: &Net,
    from: IpAddr,
    at: SocketAddr,
    limit: Duration,
) -> bool {
    let challenged = async {
        let (mut reader, writer) = network.0.connect(from, at).await?;
        let mut challenge = [0u8; NONCE_LEN];
        reader.read_exact(&mut challenge).await?;
        Ok::<_, std::io::Error>((reader, writer))
    };
    let Ok(Ok((mut reader, _writer))) = timeout(limit, challenged).await else {
        return false;
    };
    let mut more = [0u8; 1];
    timeout(SILENT_AFTER_CHALLENGE, reader.read(&mut more))
        .await
        .is_err()
}

/// Connects from this pod's own address (the coordinator admits member addresses only),
/// exchanges challenges and says hello.
pub(super) async fn handshake(
    joining: &Joining,
    coordinator: SocketAddr,
) -> Result<(Challenge, Reader, Writer), String> {
    let (mut reader, mut writer) = timeout(
        HANDSHAKE,
        joining.network.0.connect(joining.me.ip, coordinator),
    )
    .await
    .map_err(|_| "no answer".to_string())?
    .map_err(|e| e.to_string())?;
    let mut server = [0u8; NONCE_LEN];
    timeout(HANDSHAKE, reader.read_exact(&mut server))
        .await
        .map_err(|_| "no challenge".to_string())?
        .map_err(|e| format!("no challenge: {e}"))?;
    let client = nonce().map_err(|e| e.to_string())?;
    let challenge = both(server, client);
    let mut hello = Session::new(&joining.secret, challenge, false);
    let mut first = client.to_vec();
    let ledger = joining.ledger;
    first.extend(hello.seal(&Message::Hello {
        pod: joining.me.name.clone(),
        next_epoch: ledger.epoch,
        view: joining.view.clone(),
        max_restarts: ledger.max_restarts,
        heartbeat_ms: joining.heartbeat_timeout.as_millis() as u64,
        who: cut(&joining.who),
        preemptions: ledger.preemptions,
        max_preemptions: ledger.max_preemptions,
        grows: ledger.grows,
        nproc_per_pod: joining.nproc_per_pod,
    }));
    timeout(HANDSHAKE, writer.write_all(&first))
        .await
        .map_err(|_| "cannot say hello".to_string())?
        .map_err(|e| e.to_string())?;
    Ok((challenge, reader, writer))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A coordinator's name that still gives its one address is no move; none, another or
    /// several are, each said.
    #[test]
    fn a_coordinators_name_moves_when_it_gives_anything_but_its_address() {
        let at: SocketAddr = "10.0.0.5:6171".parse().unwrap();
        let ips = |list: &[&str]| -> BTreeSet<IpAddr> {
            list.iter().map(|ip| ip.parse().unwrap()).collect()
        };
        assert_eq!(moved_to(at, &ips(&["10.0.0.5"])), None);
        assert_eq!(
            moved_to(at, &ips(&[])).as_deref(),
            Some("the coordinator's name has no address now")
        );
        assert_eq!(
            moved_to(at, &ips(&["10.0.0.9"])).as_deref(),
            Some("the coordinator's name now points at 10.0.0.9")
        );
        assert_eq!(
            moved_to(at, &ips(&["10.0.0.5", "10.0.0.9"])).as_deref(),
            Some("the coordinator's name now has 2 addresses")
        );
    }
}
