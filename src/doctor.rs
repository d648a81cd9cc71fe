//! `doctor`: why would this job not start right now? One look, in plain words: the
//! configuration, this pod's address, the cluster connection and RBAC, and each group of pods
//! with the reason every missing one gives. Nothing is started and nothing is waited for.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::address::{own_ip, Interfaces};
use crate::cli::JobArgs;
use crate::config::{Config, Discovery, GroupKind};
use crate::error::Error;
use crate::exit::{self, Outcome};
use crate::membership::{bound_deletions, current, judge, rank, Membership, PodView, Readiness};
use crate::peers::{kubernetes, static_list};
use crate::vocabulary::count;

/// What a SIGTERM while training does, as set.
fn preemption_said(timing: &crate::config::Timing) -> String {
    let grace = timing.grace_period.as_secs();
    match (timing.checkpoint(), timing.checkpoint_signal) {
        (Some(checkpoint), _) => format!(
            "a SIGTERM while training sends {} to the trainer's processes that handle it{}, gives it {} s to checkpoint ({}), then stops the children ({grace} s before SIGKILL)",
            crate::exit::signal_name(checkpoint.signal),
            if timing.channel { " and to every other trainer of the job" } else { "" },
            checkpoint.window.as_secs(),
            crate::config::CHECKPOINT_WINDOW,
        ),
        (None, Some(signal)) => format!(
            "no checkpoint window ({}; {} sets one): a SIGTERM stops the children at once ({grace} s before SIGKILL); the trainer is told {} in {}",
            match timing.channel {
                true => "the pod's grace period leaves no room after the children's and the launcher's exit",
                false => "without a control channel no other trainer could join the checkpoint",
            },
            crate::config::CHECKPOINT_WINDOW,
            crate::exit::signal_name(signal),
            crate::config::CHECKPOINT_SIGNAL.env(),
        ),
        (None, None) => format!(
            "no checkpoint signal ({} = none): a SIGTERM stops the children at once ({grace} s before SIGKILL)",
            crate::config::CHECKPOINT_SIGNAL.env()
        ),
    }
}

/// The report's lines and the outcome: 0 when the job would start now.
/// `doctor` given no program (`kubectl exec <pod> -- paddle-launcher doctor`) judges the one
/// the pod's own launcher runs: PID 1's, when PID 1 is the launcher (`pid1`: its command line).
/// The arguments to judge, and the line that says where the program came from.
pub fn with_the_pods_program(args: &JobArgs, pid1: &[String]) -> (JobArgs, Option<String>) {
    use clap::Parser;
    let own = !args.trainer_args.is_empty() || args.entry.is_some();
    let is_launcher = pid1
        .first()
        .and_then(|argv0| std::path::Path::new(argv0).file_name())
        .is_some_and(|name| name == "paddle-launcher");
    if own || !is_launcher {
        return (args.clone(), None);
    }
    let theirs = match crate::cli::Cli::try_parse_from(pid1) {
        Ok(crate::cli::Cli {
            command: Some(crate::cli::Command::Run(theirs)),
            ..
        }) => theirs,
        Ok(crate::cli::Cli {
            command: None, job, ..
        }) => job,
        _ => return (args.clone(), None),
    };
    if theirs.trainer_args.is_empty() && theirs.entry.is_none() {
        return (args.clone(), None);
    }
    // Its options too (a hand-written container's `--protocol collective`, say): judged as it
    // runs. Only the program is said, not the command line, which may hold --job-secret.
    let program = match &theirs.entry {
        Some(entry) => format!("--entry {entry:?}"),
        None => crate::supervise::quoted(&theirs.trainer_args),
    };
    let said =
        format!("program and options: the pod's launcher's, from PID 1's command line ({program})");
    (theirs, Some(said))
}

/// PID 1's command line, when it can be read.
pub fn pid1_command_line() -> Vec<String> {
    std::fs::read("/proc/1/cmdline")
        .map(|bytes| {
            bytes
                .split(|&b| b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub async fn doctor(
    args: &JobArgs,
    interfaces: &Interfaces,
    hostname_ip: impl Fn() -> Option<std::net::IpAddr>,
) -> (Vec<String>, Outcome) {
    let mut lines = Vec::new();
    // A misspelt variable would not apply in `run` either: a near miss ends `run` at once.
    if let Some(near_miss) = crate::cli::near_miss_in_environment() {
        return (lines, configuration(&near_miss, exit::INVALID_CONFIG));
    }
    lines.extend(crate::cli::unread_in_environment());
    let mut problems = Problems::default();
    match configured(args, interfaces, &hostname_ip, &mut lines, &mut problems).await {
        Ok((config, my_ip)) => {
            let peers = peers_said(&config, my_ip, &mut lines, &mut problems).await;
            problems.add(peers);
        }
        Err(outcome) => problems.add(outcome),
    }
    (lines, problems.outcome())
}

/// Every problem doctor finds, not only the first: each would stop `run` on its own. A
/// configuration that cannot be read ends the look there (nothing after it can be judged).
#[derive(Default)]
struct Problems {
    found: Vec<Outcome>,
    /// What a success says (the last one given).
    fine: Option<Outcome>,
}

impl Problems {
    /// An outcome: a problem unless it is a success.
    fn add(&mut self, outcome: Outcome) {
        match outcome.code {
            exit::SUCCESS => self.fine = Some(outcome),
            _ => self.found.push(outcome),
        }
    }

    /// The first problem's status, with every problem said (one: as it is); else the success.
    fn outcome(self) -> Outcome {
        match self.found.as_slice() {
            [] => self
                .fine
                .unwrap_or_else(|| Outcome::new(exit::SUCCESS, "the job would start now")),
            [one] => one.clone(),
            [first, ..] => {
                let said: Vec<String> = self
                    .found
                    .iter()
                    .enumerate()
                    .map(|(i, p)| format!("({}) {}", i + 1, p.reason))
                    .collect();
                let reason = format!("{} problems: {}", self.found.len(), said.join("; "));
                Outcome::new(first.code, reason)
            }
        }
    }
}

/// "configuration: {e}", with the error's status.
fn configuration(e: impl std::fmt::Display, code: i32) -> Outcome {
    Outcome::new(code, format!("configuration: {e}"))
}

/// The configuration as `run` completes it (the coordinator, the devices, this pod's address
/// and sockets), each step said; the first that fails is the outcome.
async fn configured(
    args: &JobArgs,
    interfaces: &Interfaces,
    hostname_ip: &impl Fn() -> Option<std::net::IpAddr>,
    lines: &mut Vec<String>,
    problems: &mut Problems,
) -> Result<(Config, IpAddr), Outcome> {
    let mut config = crate::discover::configure(args, interfaces, hostname_ip)
        .await
        .map_err(|e| configuration(&e, e.exit_code()))?;
    if let Some(runtime) = &config.runtime {
        for setting in &runtime.settings {
            lines.push(format!("batch system {}: {setting}", runtime.system.name()));
        }
    }
    // In `run`'s order: the coordinator while the configuration is built, then what `run`
    // waits for about the channel.
    if config.control.is_on() {
        crate::launch::derive_coordinator(&mut config);
    }
    crate::coordination::elastic_needs_a_named_coordinator(&config)
        .map_err(|e| configuration(e, exit::INVALID_CONFIG))?;
    // A secret still missing is one problem; the rest can still be judged.
    if let Err(missing) = secret_file_said(&config, lines) {
        problems.add(missing);
    }
    lines.push(format!(
        "configuration: OK (job {}, {}, {}, protocol {})",
        config.topology.job_name,
        count(config.topology.trainers as usize, "trainer"),
        count(config.topology.pservers as usize, "pserver"),
        config.topology.protocol
    ));
    if let Some(elastic) = config.control.elastic {
        lines.push(elastic_line(elastic));
    }
    let seen = crate::devices::seen();
    crate::devices::resolve(&mut config, &seen)
        .map_err(|e| configuration(e, exit::INVALID_CONFIG))?;
    if !config.topology.processes.found.is_empty() {
        lines.push(format!("processes: {}", config.topology.processes.found));
    }
    let my_ip = own_ip(&config, interfaces, hostname_ip)
        .map_err(|e| Outcome::new(e.exit_code(), format!("this pod's address: {e}")))?;
    lines.push(this_pod_line(&config, my_ip));
    config.ports.sockets = crate::address::sockets(&config, my_ip, interfaces);
    for setting in &config.ports.sockets {
        lines.push(format!("network: {}", crate::address::said(setting)));
    }
    lines.push(format!("preemption: {}", preemption_said(&config.timing)));
    Ok((config, my_ip))
}

/// Whether the job secret's file (when one is named) is there to read.
fn secret_file_said(config: &Config, lines: &mut Vec<String>) -> Result<(), Outcome> {
    let Some(path) = &config.control.secret_file else {
        return Ok(());
    };
    match crate::launch::read_secret_file(path) {
        Ok(Some(_)) => {
            lines.push(format!(
                "control channel: the job secret at {} is readable",
                path.display()
            ));
            Ok(())
        }
        Ok(None) => {
            let reason = format!(
                "the job would not start: no job secret at {} yet; `run` waits for it (--wait-timeout), then exits 2: create the Secret mounted there (`{}`)",
                path.display(),
                crate::launch::create_secret_command(config)
            );
            Err(Outcome::new(exit::INVALID_CONFIG, reason))
        }
        Err(e) => Err(configuration(&e, e.exit_code())),
    }
}

/// "this pod: p-0 on 10.0.0.1 (Paddle's --nics eth0)".
fn this_pod_line(config: &Config, my_ip: IpAddr) -> String {
    // The NIC is what v1 and v2 give Paddle (--nics); the other protocols' interfaces are
    // NCCL's and gloo's, said below.
    let nic = match config.topology.protocol {
        crate::vocabulary::Protocol::V1 | crate::vocabulary::Protocol::V2 => {
            format!(" (Paddle's --nics {})", config.ports.nic)
        }
        _ => String::new(),
    };
    format!(
        "this pod: {} on {my_ip}{nic}",
        config
            .topology
            .pod_name
            .as_deref()
            .unwrap_or("(no POD_NAME)"),
    )
}

/// The peers as `run` would find them now, and whether the job would start.
async fn peers_said(
    config: &Config,
    my_ip: IpAddr,
    lines: &mut Vec<String>,
    problems: &mut Problems,
) -> Outcome {
    match &config.topology.discovery {
        Discovery::Static { ips } => {
            lines.push(format!(
                "peers: a static list of {}, no Kubernetes needed",
                count(ips.len(), "address")
            ));
            let members = static_list::members(&config.topology.job_name, ips);
            let membership =
                Membership::from_groups(config.topology.protocol, vec![(GroupKind::Job, members)]);
            would_start(config, &membership, my_ip, lines, problems)
        }
        Discovery::Dns { name, server } => {
            lines.push(format!(
                "peers: the DNS records of {name} (no Kubernetes API, no RBAC needed)"
            ));
            dns_said(config, name, *server, my_ip, lines, problems).await
        }
        Discovery::Kubernetes { groups } => {
            kubernetes_said(config, groups, my_ip, lines, problems).await
        }
    }
}

/// The job's DNS name resolved once: every pod's address, this one's among them, or what
/// the job would wait for.
async fn dns_said(
    config: &Config,
    name: &str,
    server: Option<SocketAddr>,
    my_ip: IpAddr,
    lines: &mut Vec<String>,
    problems: &mut Problems,
) -> Outcome {
    let expected = config.topology.trainers as usize;
    match crate::peers::dns::resolve_once(name, server).await {
        Err(e) => e.into(),
        Ok(Ok(ips)) if ips.len() == expected && ips.contains(&my_ip) => {
            lines.push(format!("{name} resolves to all {expected} addresses"));
            let members = crate::peers::dns::members(name, &ips);
            let membership =
                Membership::from_groups(config.topology.protocol, vec![(GroupKind::Job, members)]);
            would_start(config, &membership, my_ip, lines, problems)
        }
        Ok(Ok(ips)) => {
            let list: Vec<String> = ips.iter().map(ToString::to_string).collect();
            let why = if ips.contains(&my_ip) {
                ""
            } else {
                "; this pod's address is not among them"
            };
            let reason = format!(
                "{name} resolves to {} of {expected} addresses [{}]{why}: the job would not start yet",
                ips.len(),
                list.join(", ")
            );
            Outcome::new(exit::PEERS_TIMEOUT, reason)
        }
        Ok(Err(e)) => Outcome::new(exit::PEERS_TIMEOUT, e),
    }
}

/// The job's pods listed once through the API, judged by the rule of `run`'s wait.
async fn kubernetes_said(
    config: &Config,
    groups: &[crate::config::Group],
    my_ip: IpAddr,
    lines: &mut Vec<String>,
    problems: &mut Problems,
) -> Outcome {
    if let Some(verdict) = follower_check(config, my_ip, lines).await {
        return verdict;
    }
    let server = match kubernetes::connect(config.topology.namespace.as_deref()).await {
        Ok(server) => server,
        Err(e) => return e.into(),
    };
    let lists = match kubernetes::list_once(&server, groups).await {
        Ok(lists) => lists,
        Err(e) => return e.into(),
    };
    lines.push(format!(
        "Kubernetes: {} reachable; pods can be listed in namespace {}",
        server.url, server.namespace
    ));
    // The same rule as the wait of `run`, so that doctor's verdict is the launcher's.
    let now = kubernetes::seconds_since_epoch();
    let mut seen = lists.concat();
    bound_deletions(&mut seen, &mut Default::default(), now);
    let lists: Vec<Vec<PodView>> = groups
        .iter()
        .zip(lists)
        .map(|(group, pods)| current(pods, &group.ranking))
        .collect();
    let verdict = judge(
        groups,
        &lists,
        config.topology.max_failed_trainers,
        &[],
        &seen,
        now,
    );
    lines.extend(verdict.held_by());
    readiness_said(groups, &verdict, lines);
    if let Some((failed, max)) = verdict.too_many_failed {
        return Error::TooManyFailures { failed, max }.into();
    }
    let Some(ready) = verdict.ready() else {
        return Outcome::new(
            exit::PEERS_TIMEOUT,
            "the job would not start yet: see above",
        );
    };
    let ranked = groups
        .iter()
        .zip(ready)
        .map(|(group, pods)| (group.kind, rank(&pods)))
        .collect();
    let membership = Membership::from_groups(config.topology.protocol, ranked);
    would_start(config, &membership, my_ip, lines, problems)
}

/// Each group's readiness, a line each (and what a group short of pods lacks).
fn readiness_said(
    groups: &[crate::config::Group],
    verdict: &crate::membership::Verdict,
    lines: &mut Vec<String>,
) {
    for (group, readiness) in groups.iter().zip(&verdict.groups) {
        let name = kubernetes::describe_group(group.kind);
        match readiness {
            Readiness::Ready(_) => lines.push(format!(
                "{name} `{}`: all {} Running with an IP",
                group.selector, group.expected
            )),
            Readiness::Waiting(wait) => {
                lines.push(format!("{name} `{}`: {wait}", group.selector));
                if wait.live < wait.expected {
                    lines.push(format!(
                        "  {} of {} pods do not exist yet: check the Job's parallelism and `kubectl describe job`",
                        wait.expected - wait.live,
                        wait.expected
                    ));
                }
            }
        }
    }
}

/// "trainer id 5 of 8 (local rank 1): endpoint 10.0.0.2:6172, GPU 1 of CUDA_VISIBLE_DEVICES,
/// progress file /w/progress.1".
fn place_line(place: &crate::plan::TrainerPlace) -> String {
    let device = match &place.device {
        Some(index) => format!("GPU {index} of CUDA_VISIBLE_DEVICES"),
        None => "no GPU".to_string(),
    };
    format!(
        "{}: endpoint {}, {device}, progress file {}",
        place.named(),
        place.endpoint.as_deref().unwrap_or("-"),
        place.progress_file.display()
    )
}

/// With every pod found: what `plan` and `run` would say next, by the same rules — this pod's
/// place among them (each listener on its own address, this pod among the members), its ranks,
/// the channel, and whether the commands it would start exist.
fn would_start(
    config: &Config,
    membership: &Membership,
    my_ip: IpAddr,
    lines: &mut Vec<String>,
    problems: &mut Problems,
) -> Outcome {
    let me = match crate::launch::locate_self(config, membership, my_ip) {
        Ok(me) => me,
        Err(e) => return e.into(),
    };
    let id = |r: Option<usize>| r.map_or("-".to_string(), |r| r.to_string());
    lines.push(format!(
        "this pod would be trainer {} / pserver {}",
        id(me.trainer_rank),
        id(me.pserver_rank)
    ));
    lines.push(control_line(config, membership, &me));
    let no_files = crate::protocol::InputFiles {
        train: None,
        test: None,
    };
    let plan = crate::protocol::plan(config, membership, &me, &no_files);
    if config.topology.processes.several() {
        lines.extend(
            plan.trainers()
                .filter_map(|p| p.place.as_ref())
                .map(place_line),
        );
    }
    for process in &plan.processes {
        let Some(command) = process.argv.first() else {
            continue;
        };
        let path = process
            .env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok());
        // A relative path with a `/` is found from the process's directory, as exec does.
        let command_path = match process.cwd.join(command) {
            joined if command.contains('/') && process.cwd.is_dir() => joined,
            _ => std::path::PathBuf::from(command),
        };
        let missing = missing_command(&command_path.to_string_lossy(), path.as_deref());
        if let Some((code, why)) = missing {
            let option = match process.role {
                crate::plan::Role::Pserver => crate::config::PSERVER_CMD,
                crate::plan::Role::Trainer => crate::config::TRAINER_CMD,
            };
            let reason = format!(
                "cannot start the {} command `{command}`: {why} (the command is {option}, or the program after --)",
                process.name
            );
            // Each command that cannot start is a problem of its own.
            problems.add(Outcome::new(code, reason));
        }
    }
    Outcome::new(exit::SUCCESS, "the job would start now")
}

/// Why `command` would not start with `path`, and the status `run` would end with (127: not
/// found, 126: not executable), if so.
fn missing_command(command: &str, path: Option<&str>) -> Option<(i32, String)> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let candidates: Vec<std::path::PathBuf> = if command.contains('/') {
        vec![command.into()]
    } else {
        path.unwrap_or_default()
            .split(':')
            .filter(|dir| !dir.is_empty())
            .map(|dir| std::path::Path::new(dir).join(command))
            .collect()
    };
    if candidates.iter().any(|c| executable(c)) {
        return None;
    }
    if let Some(file) = candidates.iter().find(|c| c.is_file()) {
        let why = format!("{} is not executable", file.display());
        return Some((exit::CANNOT_EXECUTE, why));
    }
    Some(match command.contains('/') {
        true => (exit::NOT_FOUND, format!("{command} does not exist")),
        false => (exit::NOT_FOUND, crate::error::not_on_path(command, path)),
    })
}

/// Where this pod stands in the control channel, in plain words.
/// An elastic job's range, as `doctor` says it.
fn elastic_line(elastic: crate::config::Elastic) -> String {
    format!(
        "elastic: trains with {} to {} pods, waiting {} s for a lost pod's replacement (--elastic-wait), gathering arrivals as long",
        elastic.min_pods,
        elastic.max_pods,
        elastic.wait.as_secs()
    )
}

fn control_line(config: &Config, membership: &Membership, me: &crate::membership::Me) -> String {
    match crate::plan::ControlPlan::new(config, membership, me) {
        None => "control channel: off (no PADDLE_LAUNCHER_JOB_SECRET or _FILE)".to_string(),
        Some(plan) => {
            let role = match plan.this_pod_coordinates {
                Some(true) => "this pod coordinates",
                Some(false) => "this pod follows",
                None => "who coordinates is decided by resolving the name at the launch",
            };
            let restarts = match plan.max_restarts {
                0 => "no group restarts (the first failure ends every pod)".to_string(),
                n => format!("up to {n} group restarts"),
            };
            let preemptions = match plan.max_preemptions {
                None => "every preemption restarts the job for free".to_string(),
                Some(0) => "a preemption counts as a failure".to_string(),
                Some(n) => format!("the first {n} preemption(s) restart the job for free"),
            };
            format!(
                "control channel: coordinator {}, {role}; heartbeat timeout {} s; {restarts}; {preemptions}",
                plan.coordinator, plan.heartbeat_timeout_s
            )
        }
    }
}

/// A follower of a named coordinator makes no API request: what it needs is the coordinator.
/// None when this pod is the coordinator (or there is none): the API checks follow.
async fn follower_check(
    config: &Config,
    my_ip: IpAddr,
    lines: &mut Vec<String>,
) -> Option<Outcome> {
    let (host, port) = config.control.coordinator.as_ref()?;
    if config.own_group() != GroupKind::Job || !config.control.is_on() {
        return None;
    }
    let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => match crate::peers::dns::resolve_once(host, config.control.dns_server).await {
            Ok(Ok(ips)) => ips.into_iter().collect(),
            Ok(Err(why)) => {
                lines.push(format!("coordinator {host}:{port}: {why}"));
                let pod = crate::launch::why_unreached(config).await;
                let pod = pod.map_or(" its pod may not exist yet".into(), |why| format!(" {why}"));
                return Some(Outcome::new(
                    exit::PEERS_TIMEOUT,
                    format!("the coordinator's name {host} does not resolve yet:{pod}"),
                ));
            }
            Err(e) => return Some(e.into()),
        },
    };
    if addresses.contains(&my_ip) {
        lines.push(format!(
            "coordinator {host}:{port}: this pod (it finds the pods through the API for everyone)"
        ));
        return None;
    }
    let Some(&ip) = addresses.first() else {
        let why = crate::launch::why_unreached(config).await;
        let why = why.map_or(String::new(), |why| format!(": {why}"));
        return Some(Outcome::new(
            exit::PEERS_TIMEOUT,
            format!("the coordinator's name {host} has no address yet{why}"),
        ));
    };
    lines.push(format!(
        "peers: from the coordinating launcher at {host}:{port} ({ip}); this pod makes no Kubernetes API request"
    ));
    let address = SocketAddr::new(ip, *port);
    let unreached = match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(address)).await {
        Ok(Ok(_)) => return Some(Outcome::new(
            exit::SUCCESS,
            format!("the coordinator at {address} accepts connections: the job would start once it has every pod"),
        )),
        Ok(Err(e)) => format!("the coordinator at {address} does not accept connections ({e}): it listens once it has found every pod, or its pod is not running"),
        Err(_) => format!("the coordinator at {address} did not answer within 2 s"),
    };
    // Why, as a waiting follower finds out: what the coordinator keeps on its Job, else its
    // own pod (one or two small requests).
    let reason = match crate::launch::why_unreached(config).await {
        Some(why) => {
            lines.push(format!("the coordinator: {why}"));
            format!("{unreached}; {why}")
        }
        None => unreached,
    };
    Some(Outcome::new(exit::PEERS_TIMEOUT, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    /// Given no program, doctor judges the pod's launcher's own (PID 1's, when PID 1 is the
    /// launcher, with `run` or without), and says so; a program given, or another PID 1,
    /// leaves the arguments alone.
    #[test]
    fn doctor_without_a_program_takes_the_pods_own() {
        let none = JobArgs::default();
        for pid1 in [
            argv(&[
                "/usr/local/bin/paddle-launcher",
                "run",
                "--",
                "python",
                "/w/t.py",
            ]),
            argv(&["paddle-launcher", "--", "python", "/w/t.py"]),
        ] {
            let (judged, said) = with_the_pods_program(&none, &pid1);
            assert_eq!(judged.trainer_args, ["python", "/w/t.py"]);
            assert!(said.unwrap().contains("PID 1's command line"));
        }
        let entry = argv(&["paddle-launcher", "run", "--entry", "python /w/ps.py"]);
        let (judged, _) = with_the_pods_program(&none, &entry);
        assert_eq!(judged.entry.as_deref(), Some("python /w/ps.py"));
        // Its options too; and the line says the program, never a secret of the command line.
        let options = argv(&[
            "paddle-launcher",
            "run",
            "--protocol",
            "collective",
            "--nproc-per-pod",
            "8",
            "--job-secret",
            "s3cret-0123456789abcdef0123456789",
            "--",
            "python",
            "/w/t.py",
        ]);
        let (judged, said) = with_the_pods_program(&none, &options);
        assert_eq!(judged.protocol.as_deref(), Some("collective"));
        assert_eq!(judged.nproc_per_pod.as_deref(), Some("8"));
        let said = said.unwrap();
        assert!(
            said.contains("python /w/t.py") && !said.contains("s3cret"),
            "{said}"
        );
        let (judged, said) = with_the_pods_program(&none, &argv(&["python", "/w/t.py"]));
        assert!(
            judged.trainer_args.is_empty() && said.is_none(),
            "PID 1 is not the launcher"
        );
        let given = JobArgs {
            trainer_args: argv(&["python", "/mine.py"]),
            ..JobArgs::default()
        };
        let (judged, said) = with_the_pods_program(&given, &entry);
        assert_eq!(judged.trainer_args, ["python", "/mine.py"]);
        assert!(said.is_none());
        let (_, said) = with_the_pods_program(&none, &argv(&["paddle-launcher", "manifest"]));
        assert!(said.is_none(), "not a launcher that runs a job");
    }
}
