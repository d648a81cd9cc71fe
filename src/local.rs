//! `local`: a whole job on one machine. Each simulated pod is a real launcher process (`run`)
//! on its own loopback IP with static membership, supervised like the pserver and trainer are.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::ArgMatches;
use nix::libc::SIGTERM;
use tracing::info;

use crate::cli::{LocalArgs, Opt};
use crate::config::{
    present, Config, GRADIENT_NUM, ID_DIR, JOB_SECRET, LOG_DIR, NIC, PEERS, POD_IP, POD_NAME,
    PROGRESS_FILE, SELECTOR, TERMINATION_LOG, WORKDIR,
};
use crate::error::ConfigError;
use crate::error::Error;
use crate::exit::Outcome;
use crate::lifecycle::{restarts_read, restarts_said, LocalCommand, LocalInput, LocalPods};
use crate::supervise::{Event, Output, Signals, SpawnSpec, Supervisor};

/// 127.0.0.2 .. 127.0.0.201: all on `lo`, none of them 127.0.0.1 (which other services use).
pub const MAX_LOCAL_PODS: u64 = 200;
/// The options local mode sets for each simulated pod: refused when given (status 2), and left
/// out of `local --help`, which lists only what a user may set.
const SET_PER_POD: [Opt; 7] = [
    POD_IP,
    POD_NAME,
    PEERS,
    GRADIENT_NUM,
    SELECTOR,
    PROGRESS_FILE,
    LOG_DIR,
];

/// The command line with `local`'s help leaving out the options it sets itself (they still
/// parse, so that giving one is refused with a clear line rather than clap's "unexpected").
pub fn hide_set_per_pod(command: clap::Command) -> clap::Command {
    command.mut_subcommand("local", |local| {
        SET_PER_POD
            .into_iter()
            .fold(local, |local, opt| local.mut_arg(opt.0, |a| a.hide(true)))
    })
}

/// The file in each simulated pod's directory that takes its termination message.
const TERMINATION_LOG_FILE: &str = "termination-log";

/// The IP of simulated pod `index`.
pub fn pod_ip(index: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + index as u8))
}

/// The environment each instance gets: every option the user gave as a flag (so the instance
/// sees the same configuration), plus what local mode decides per pod.
fn instance_env(
    args: &LocalArgs,
    matches: &ArgMatches,
    command: &clap::Command,
    trainers: usize,
) -> Result<Vec<BTreeMap<String, String>>, ConfigError> {
    let mut shared = BTreeMap::new();
    for arg in command.get_arguments() {
        let (Some(env), id) = (arg.get_env(), arg.get_id().as_str()) else {
            continue;
        };
        let env = env.to_string_lossy().to_string();
        let given_as_flag = matches.value_source(id) == Some(ValueSource::CommandLine);
        let set_per_pod = SET_PER_POD.into_iter().find(|opt| opt.0 == id);
        if let (Some(opt), true) = (set_per_pod, given_as_flag) {
            return Err(ConfigError::new(
                opt,
                matches.get_one::<String>(id).map_or("", String::as_str),
                "nothing: local mode sets it for each simulated pod",
            ));
        }
        if given_as_flag {
            if let Some(value) = matches.get_one::<String>(id) {
                shared.insert(env, value.clone());
            }
        }
    }
    let job = &args.job;
    let defaults = [(NIC.env(), job.nic.is_none(), "lo")];
    for (env, unset, value) in defaults {
        if unset {
            shared.insert(env.to_string(), value.to_string());
        }
    }
    // Restarts are agreed over the control channel, which needs a secret: one for this run.
    let restarts = present(&job.max_restarts).is_some_and(|n| n != "0");
    // A secret the user gave by variable too: the launchers never pass it on by inheritance.
    if let Some(secret) = present(&job.job_secret) {
        shared.insert(JOB_SECRET.env().to_string(), secret.to_string());
    } else if restarts && present(&job.job_secret_file).is_none() {
        shared.insert(JOB_SECRET.env().to_string(), random_secret()?);
    }
    let ips: Vec<String> = (0..trainers).map(|i| pod_ip(i).to_string()).collect();
    shared.insert(PEERS.env().into(), ips.join(","));
    shared.insert(GRADIENT_NUM.env().into(), trainers.to_string());
    let job_name = job.job_name.clone().unwrap_or_default();
    Ok((0..trainers)
        .map(|i| {
            let mut env = shared.clone();
            env.insert(POD_IP.env().into(), ips[i].clone());
            env.insert(POD_NAME.env().into(), format!("{job_name}-{i}"));
            // Each simulated pod has its own work directory (data copies, id files, lists),
            // as each real pod has its own filesystem.
            let base = PathBuf::from(job.workdir.as_deref().unwrap_or("."));
            let dir = base.join("paddle-local").join(format!("{job_name}-{i}"));
            env.insert(WORKDIR.env().into(), dir.display().to_string());
            // Each pod's outcome line, as Kubernetes would keep it: `local` reads them back.
            if present(&job.termination_log).is_none() {
                let log = dir.join(TERMINATION_LOG_FILE);
                env.insert(TERMINATION_LOG.env().into(), log.display().to_string());
            }
            if job.id_dir.is_none() {
                env.insert(ID_DIR.env().into(), dir.display().to_string());
            }
            env
        })
        .collect())
}

/// 32 random bytes, hex: a job secret nobody else knows.
fn random_secret() -> Result<String, ConfigError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ConfigError::new(JOB_SECRET, "(generated)", "random bytes from the system"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub async fn local(args: &LocalArgs, matches: &ArgMatches, command: &clap::Command) -> Outcome {
    // Once here, not in each simulated pod's launcher.
    if let Some(near_miss) = crate::cli::near_miss_in_environment() {
        return Outcome::from(Error::from(near_miss));
    }
    run_instances(args, matches, command)
        .await
        .unwrap_or_else(Outcome::from)
}

async fn run_instances(
    args: &LocalArgs,
    matches: &ArgMatches,
    command: &clap::Command,
) -> Result<Outcome, Error> {
    let trainers = match args.trainers.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_LOCAL_PODS).contains(&n) => n as usize,
        _ => {
            return Err(ConfigError::new(
                "--trainers",
                &args.trainers,
                format!("a number of simulated pods from 1 to {MAX_LOCAL_PODS}"),
            )
            .into())
        }
    };
    let envs = instance_env(args, matches, command, trainers)?;
    // Validate once here, with what instance 0 will see, instead of N times in the instances.
    let mut probe = args.job.clone();
    probe.peers = envs[0].get(PEERS.env()).cloned();
    probe.gradient_num = Some(trainers.to_string());
    probe.pod_ip = envs[0].get(POD_IP.env()).cloned();
    probe.job_secret = envs[0].get(JOB_SECRET.env()).cloned();
    let config = Config::from_args(&probe)?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("cannot find the launcher's own executable", e))?
        .display()
        .to_string();
    let signals = Signals::install().map_err(|e| Error::io("cannot install signal handlers", e))?;
    // The instances need their own grace period to stop their children first.
    let mut sup = Supervisor::new(
        signals,
        config.timing.grace_period + std::time::Duration::from_secs(5),
    );
    let mut argv = vec![exe, "run".to_string(), "--".to_string()];
    argv.extend(args.job.trainer_args.iter().cloned());
    let cwd = PathBuf::from(".");
    // The launcher writes its termination message into an existing file only (Kubernetes
    // creates /dev/termination-log): made empty here, so that an old one is never read back.
    for env in &envs {
        if let Some(log) = env.get(TERMINATION_LOG.env()).filter(|p| !p.is_empty()) {
            let log = PathBuf::from(log);
            let made = log
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&log, ""));
            made.map_err(|e| Error::io(format!("cannot create {}", log.display()), e))?;
        }
    }
    let mut instances = Vec::new();
    for (i, env) in envs.iter().enumerate() {
        let spec = SpawnSpec {
            label: format!("pod {}", env[POD_NAME.env()]),
            argv: &argv,
            env,
            cwd: &cwd,
            output: Output::Inherit,
            unset: &[],
            inherits_settings: true,
        };
        match sup.spawn(spec) {
            Ok(child) => instances.push(child),
            Err(e) => {
                sup.stop(&instances, SIGTERM).await;
                return Err(e);
            }
        }
        info!("simulated pod {i} on {}", env[POD_IP.env()]);
    }
    // What a pod's launcher may take to end after another's failure: its grace period for its
    // children, and its wait for the job's verdict.
    let settle = config.timing.grace_period
        + config.control.heartbeat_timeout
        + std::time::Duration::from_secs(5);
    let outcome = watch_instances(&mut sup, &instances, settle).await;
    sup.finish();
    outcome
        .map(|outcome| with_restarts(outcome, &envs, present(&args.job.termination_log).is_none()))
}

/// A success says whether the job restarted on the way, as the pods' own outcome lines say.
fn with_restarts(
    mut outcome: Outcome,
    envs: &[BTreeMap<String, String>],
    own_logs: bool,
) -> Outcome {
    if outcome.code != crate::exit::SUCCESS || !own_logs {
        return outcome;
    }
    let restarts = envs
        .iter()
        .filter_map(|env| std::fs::read_to_string(env.get(TERMINATION_LOG.env())?).ok())
        .filter_map(|line| restarts_read(&line))
        .max();
    if let Some(count) = restarts {
        outcome.reason = format!("{} ({} of the job)", outcome.reason, restarts_said(count));
    }
    outcome
}

/// Carries out the `LocalPods` machine's commands until it finishes: every decision (which
/// status, when to stop the others) is the machine's.
async fn watch_instances(
    sup: &mut Supervisor,
    instances: &[usize],
    settle: std::time::Duration,
) -> Result<Outcome, Error> {
    let mut machine = LocalPods::new(instances.len());
    let mut commands = Vec::new();
    let mut settled_at = None;
    loop {
        for command in std::mem::take(&mut commands) {
            match command {
                LocalCommand::Forward(sig) => sup.forward(sig),
                LocalCommand::SettleFor => {
                    info!(
                        "waiting up to {} s for the other simulated pods to end on their own",
                        settle.as_secs()
                    );
                    settled_at = Some(tokio::time::Instant::now() + settle);
                }
                LocalCommand::StopAll(sig) => {
                    sup.stop(instances, sig).await;
                    commands.extend(machine.step(LocalInput::Stopped));
                }
                LocalCommand::Finish(result) => return result,
            }
        }
        if commands.is_empty() {
            let deadline = async {
                match settled_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = sup.next_event() => commands.extend(step_with(&mut machine, sup, event)),
                () = deadline => {
                    settled_at = None;
                    commands.extend(machine.step(LocalInput::Settled));
                }
            }
        }
    }
}

fn step_with(machine: &mut LocalPods, sup: &Supervisor, event: Event) -> Vec<LocalCommand> {
    match event {
        Event::Signal(sig) => machine.step(LocalInput::Signal(sig)),
        Event::Exited { child, ended } => machine.step(LocalInput::Exited {
            label: sup.label(child).to_string(),
            ended,
        }),
        // Simulated pods have static membership: no peer watch.
        Event::PeerLost(_) | Event::JobDone(_) => Vec::new(),
    }
}
