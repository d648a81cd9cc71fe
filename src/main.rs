//! Parse the command line, run one command, map the outcome to an exit status.

use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches};
use nix::sys::signal::Signal;
use tracing::{error, info, Instrument};

use paddle_launcher::cli::{Cli, Command, JobArgs};
use paddle_launcher::config::{own_ip, Config, Discovery, DEFAULT_TERMINATION_LOG};
use paddle_launcher::exit::{self, Outcome};
use paddle_launcher::membership::{check_distinct_ips, find_self};
use paddle_launcher::supervise::{
    signal_name, write_termination_message, Event, Signals, Supervisor,
};
use paddle_launcher::{launch, local, peers, protocol, workspace};

fn main() {
    let command = Cli::command();
    let matches = command.clone().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PADDLE_LAUNCHER_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => finish(
            Outcome::new(exit::INTERNAL, format!("cannot start the runtime: {e}")),
            None,
        ),
    };
    let (outcome, termination_log) = match &cli.command {
        Some(Command::Local(args)) => {
            let sub = matches.subcommand_matches("local").unwrap_or(&matches);
            let local_command = command.find_subcommand("local").unwrap_or(&command);
            (
                runtime.block_on(local::local(args, sub, local_command)),
                None,
            )
        }
        Some(Command::Plan(args)) => (runtime.block_on(launch_or_plan(args, true)), None),
        Some(Command::Run(args)) => run(&runtime, args),
        None => run(&runtime, &cli.job),
    };
    finish(outcome, termination_log)
}

fn run(runtime: &tokio::runtime::Runtime, args: &JobArgs) -> (Outcome, Option<PathBuf>) {
    let pod = args
        .pod_name
        .clone()
        .or(args.pod_ip.clone())
        .unwrap_or_default();
    let span = tracing::info_span!("launcher", pod = %pod);
    let outcome = runtime.block_on(launch_or_plan(args, false).instrument(span));
    let log = match args.termination_log.as_deref() {
        None => Some(PathBuf::from(DEFAULT_TERMINATION_LOG)),
        Some("") => None,
        Some(path) => Some(PathBuf::from(path)),
    };
    (outcome, log)
}

fn finish(outcome: Outcome, termination_log: Option<PathBuf>) -> ! {
    if outcome.code == 0 {
        info!("{}", outcome.reason);
    } else {
        error!("exiting with status {}: {}", outcome.code, outcome.reason);
    }
    if let Some(path) = termination_log {
        write_termination_message(&path, &outcome.reason);
    }
    std::process::exit(outcome.code)
}

/// Everything up to the launch; then print the plan (`plan_only`) or carry it out.
async fn launch_or_plan(args: &JobArgs, plan_only: bool) -> Outcome {
    let invalid =
        |e: paddle_launcher::config::ConfigError| Outcome::new(exit::INVALID_CONFIG, e.to_string());
    info!(
        "paddle-launcher {} starting as pid {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    let mut config = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => return invalid(e),
    };
    let interfaces = local_ip_address::list_afinet_netifas().unwrap_or_default();
    let my_ip = match own_ip(&config, &interfaces, hostname_ip()) {
        Ok(ip) => ip,
        Err(e) => return invalid(e),
    };
    // Installed before waiting, so a TERM during the wait ends it at once, and zombies are
    // reaped from the start when we are PID 1.
    let mut supervisor = if plan_only {
        None
    } else {
        match Signals::install() {
            Ok(signals) => Some(Supervisor::new(signals, config.grace_period)),
            Err(e) => {
                return Outcome::new(
                    exit::INTERNAL,
                    format!("cannot install signal handlers: {e}"),
                )
            }
        }
    };
    let found = {
        let discovery = peers::discover(&config);
        tokio::pin!(discovery);
        loop {
            let Some(supervisor) = supervisor.as_mut() else {
                break discovery.await;
            };
            tokio::select! {
                found = &mut discovery => break found,
                event = supervisor.next_event() => match event {
                    Event::Signal(sig @ (Signal::SIGUSR1 | Signal::SIGUSR2)) => {
                        info!("ignoring {sig}: no child to forward it to yet")
                    }
                    Event::Signal(sig) => return Outcome::new(
                        exit::by_signal(sig as i32),
                        format!("received {} while waiting for the job's pods", signal_name(sig as i32)),
                    ),
                    Event::Exited { .. } => {}
                },
            }
        }
    };
    let (members, namespace) = match found {
        Ok(found) => found,
        Err(e) => return e.outcome(),
    };
    if namespace.is_some() {
        config.namespace = namespace;
    }
    let membership_error = |e: paddle_launcher::membership::MembershipError| {
        Outcome::new(exit::MEMBERSHIP, e.to_string())
    };
    if let Err(e) = check_distinct_ips(&members) {
        return membership_error(e);
    }
    // Static members have made-up names: only a real pod list can be searched by name.
    let own_name = match config.discovery {
        Discovery::Kubernetes { .. } => config.pod_name.as_deref(),
        Discovery::Static { .. } => None,
    };
    let me = match find_self(&members, own_name, my_ip) {
        Ok(me) => me.clone(),
        Err(e) => return membership_error(e),
    };
    let plan = protocol::plan(&config, &members, &me);
    info!(
        "trainer id {} of {}",
        plan.trainer_id, plan.num_gradient_servers
    );
    if plan_only {
        println!("{}", plan.to_json());
        return Outcome::new(exit::SUCCESS, "plan printed");
    }
    if let Err(outcome) = workspace::prepare(&plan) {
        return outcome;
    }
    match supervisor {
        Some(mut supervisor) => launch::run_plan(&plan, &config, &mut supervisor).await,
        None => Outcome::new(exit::INTERNAL, "no signal handlers"),
    }
}

/// The hostname's address, the last fallback for the own IP (what start_paddle.py used).
fn hostname_ip() -> Option<IpAddr> {
    let host = nix::unistd::gethostname().ok()?.into_string().ok()?;
    (host.as_str(), 0)
        .to_socket_addrs()
        .ok()?
        .map(|a| a.ip())
        .next()
}
