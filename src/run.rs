//! The command line: parse it, run one command, map the outcome to an exit status.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches};
use tracing::{error, info, Instrument};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::cli::{Cli, Command, JobArgs, LogFormat, ManifestArgs};
use crate::config::termination_log;
use crate::error::Error;
use crate::exit::{self, Outcome};
use crate::supervise::write_termination_message;
use crate::{doctor, launch, local, manifest};

/// The whole program; `main.rs` only calls it, so every other module can stay crate-private.
pub fn main() -> ! {
    let command = local::hide_set_per_pod(Cli::command());
    let (matches, cli) = parse(&command);
    init_logs(cli.log_format);
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
    // Launcher logs carry the job, the pod's name or IP and its rank, and the restart, once
    // known: local mode interleaves several pods, and a log pipeline filters by them (JSON).
    let empty = tracing::field::Empty;
    let span = tracing::info_span!(
        "launcher",
        job = empty,
        pod = empty,
        pod_rank = empty,
        restart = empty
    );
    let launch = |args: &JobArgs, plan_only: bool| {
        runtime.block_on(launch::launch(args, plan_only).instrument(span.clone()))
    };
    let (outcome, reason_file) = match &cli.command {
        Some(Command::Local(args)) => {
            let sub = matches.subcommand_matches("local").unwrap_or(&matches);
            let local_command = command.find_subcommand("local").unwrap_or(&command);
            let outcome = runtime.block_on(local::local(args, sub, local_command));
            log_outcome(&outcome);
            (outcome, None)
        }
        Some(Command::Plan(args)) => (launch(args, true), None),
        Some(Command::Manifest(args)) => (print_manifest(args), None),
        Some(Command::Doctor(args)) => (runtime.block_on(run_doctor(args)), None),
        Some(Command::Status(args)) => {
            let (table, outcome) = crate::status::status(args);
            match table {
                Some(table) => print!("{table}"),
                None => eprintln!("error: {}", outcome.reason),
            }
            (outcome, None)
        }
        Some(Command::Completions { shell }) => {
            let mut command = Cli::command();
            let name = "paddle-launcher";
            clap_complete::generate(*shell, &mut command, name, &mut std::io::stdout());
            (Outcome::new(exit::SUCCESS, "completions printed"), None)
        }
        Some(Command::Run(args)) => (launch(args, false), termination_log(args)),
        None => (launch(&cli.job, false), termination_log(&cli.job)),
    };
    // local logs its own outcome; doctor's verdict is its last printed line, not a log line
    // too; completions print a script and nothing else.
    let logs_outcome = !matches!(
        cli.command,
        Some(
            Command::Local(_)
                | Command::Doctor(_)
                | Command::Completions { .. }
                | Command::Status(_)
        )
    );
    if logs_outcome {
        let _in_span = span.enter();
        log_outcome(&outcome);
    }
    finish(outcome, reason_file)
}

/// The command line, or clap's error (with a near subcommand named) and its exit.
fn parse(command: &clap::Command) -> (clap::ArgMatches, Cli) {
    let names: Vec<&str> = command.get_subcommands().map(|s| s.get_name()).collect();
    let args = global_after_subcommand(std::env::args_os().collect(), &names);
    let matches = match command.clone().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) => {
            let refusal = refused_run(&e, command);
            // "unexpected argument 'docter'" says nothing of `doctor`: clap suggests
            // subcommands only where the root takes no options of its own.
            // The word clap did not expect, wherever it is (`--log-format json docter`).
            let first = match e.get(clap::error::ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::String(word)) => word.clone(),
                _ => std::env::args().nth(1).unwrap_or_default(),
            };
            match (e.kind(), crate::cli::near_subcommand(&first)) {
                (clap::error::ErrorKind::UnknownArgument, Some(near)) => {
                    eprintln!("error: unrecognized subcommand '{first}': did you mean '{near}'? (--help lists them)");
                    std::process::exit(exit::INVALID_CONFIG);
                }
                _ if !e.use_stderr() => e.exit(),
                _ => {
                    let _ = e.print();
                    if let Some(hint) = usage_hint(&e, command) {
                        eprintln!("{hint}");
                    }
                    // The launcher's own line last, as every other refusal's is.
                    if let Some(line) = refusal {
                        eprintln!("error: {line}");
                    }
                    std::process::exit(e.exit_code());
                }
            }
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    (matches, cli)
}

/// `paddle-launcher --log-format json plan ...` as `paddle-launcher plan --log-format json
/// ...`: the one option every subcommand takes may come first, as a user writes it (the root's
/// own options, `run`'s, would otherwise forbid the subcommand after them).
fn global_after_subcommand(mut args: Vec<OsString>, subcommands: &[&str]) -> Vec<OsString> {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str()).unwrap_or("");
    let taken = match word(1) {
        "--log-format" => 2,
        w if w.starts_with("--log-format=") => 1,
        _ => return args,
    };
    if subcommands.contains(&word(1 + taken)) {
        let option: Vec<OsString> = args.drain(1..1 + taken).collect();
        args.splice(2..2, option);
    }
    args
}

/// A refusal of `run`'s command line or environment by clap (a value not among an option's
/// choices, an option it does not know) ends the pod as any bad input does: after clap's own
/// words, one line naming the variable or flag, the value and what is expected, which is also
/// the termination message (the README: the reason for status 2 is in the last line and in
/// /dev/termination-log). Other subcommands print their refusal only.
fn refused_run(e: &clap::Error, command: &clap::Command) -> Option<String> {
    if !e.use_stderr() {
        return None;
    }
    let words: Vec<String> = std::env::args()
        .skip(1)
        .take_while(|word| word != "--")
        .collect();
    let used = words
        .iter()
        .find(|word| command.get_subcommands().any(|sub| sub.get_name() == *word));
    if used.is_some_and(|used| used != "run") {
        return None;
    }
    // A subcommand mistyped (`kubectl exec POD -- paddle-launcher statsu`) is not the pod's
    // launcher refusing its configuration: the pod's termination message stays its own.
    let mistyped = words
        .iter()
        .any(|word| word != "run" && crate::cli::near_subcommand(word).is_some());
    if mistyped {
        return None;
    }
    let line = crate::cli::clap_refusal(e, command)
        .map_or_else(|| first_line_of(e), |refusal| refusal.to_string());
    // The flag wins over the variable, as clap takes them.
    let flag = words.iter().enumerate().find_map(|(i, word)| {
        match word.strip_prefix("--termination-log") {
            Some(rest) if rest.starts_with('=') => Some(rest[1..].to_string()),
            Some("") => words.get(i + 1).cloned(),
            _ => None,
        }
    });
    let given = flag.or_else(|| std::env::var("PADDLE_LAUNCHER_TERMINATION_LOG").ok());
    if let Some(path) = crate::config::termination_log_given(given.as_deref()) {
        write_termination_message(&path, &line);
    }
    Some(line)
}

/// Clap's first line, without its "error: ".
fn first_line_of(e: &clap::Error) -> String {
    let rendered = e.to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// What clap's bare "unexpected argument" does not say: a subcommand comes before the options
/// (`--log-format json plan`), and the program's own words go after `--` (`run python t.py`).
fn usage_hint(e: &clap::Error, command: &clap::Command) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    if command.get_subcommands().any(|sub| sub.get_name() == arg) {
        return Some(format!(
            "hint: the subcommand comes first, then the options: `paddle-launcher {arg} [OPTIONS]` (`paddle-launcher {arg} --help` lists them)"
        ));
    }
    // The subcommand in use, as the hint names it (`run` when none: the root runs it).
    let used = std::env::args()
        .skip(1)
        .find(|word| command.get_subcommands().any(|sub| sub.get_name() == word))
        .unwrap_or_else(|| "run".to_string());
    let takes_a_program = ["run", "plan", "local", "manifest"].contains(&used.as_str());
    (takes_a_program && !arg.starts_with('-')).then(|| {
        format!("hint: the training program and its own arguments go after `--`: `paddle-launcher {used} [OPTIONS] -- python train.py --lr 0.1` (an on/off flag takes no value)")
    })
}

/// The launcher's log on stderr, as text or JSON.
fn init_logs(format: LogFormat) {
    // kube's own lines repeat every retry at ERROR level without naming the server; the
    // launcher reports API failures itself (PADDLE_LAUNCHER_LOG=debug shows all). A plain
    // `target=level` list: a regex-capable filter would add about a megabyte to the binary.
    let filter: Targets = std::env::var("PADDLE_LAUNCHER_LOG")
        .ok()
        .filter(|text| !text.trim().is_empty())
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            Targets::new()
                .with_default(tracing::Level::INFO)
                .with_target("kube_client", LevelFilter::OFF)
                .with_target("kube_runtime", LevelFilter::OFF)
        });
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false);
    let registry = tracing_subscriber::registry();
    match format {
        LogFormat::Text => registry
            .with(logs.fmt_fields(TextFields).with_filter(filter))
            .init(),
        LogFormat::Json => registry
            .with(logs.json().with_current_span(true).with_filter(filter))
            .init(),
    }
}

/// The text log's fields: an event's message, the launcher's span's pod (local mode
/// interleaves several pods). The others (the job, the pod's rank, a process's name and
/// status) are for a log pipeline, in `--log-format json`: the text stays the sentence.
struct TextFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for TextFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut visitor = TextVisitor {
            writer: &mut writer,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }

    /// A field recorded later (the pod's name once known) is added only when it is shown:
    /// the others would leave the span's braces with blanks.
    fn add_fields(
        &self,
        current: &'w mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> std::fmt::Result {
        let mut more = String::new();
        self.format_fields(
            tracing_subscriber::fmt::format::Writer::new(&mut more),
            fields,
        )?;
        if !more.is_empty() && !current.fields.is_empty() {
            current.fields.push(' ');
        }
        current.fields.push_str(&more);
        Ok(())
    }
}

struct TextVisitor<'a, 'w> {
    writer: &'a mut tracing_subscriber::fmt::format::Writer<'w>,
    result: std::fmt::Result,
}

impl tracing::field::Visit for TextVisitor<'_, '_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if self.result.is_ok() {
            self.result = match field.name() {
                "message" => write!(self.writer, "{value:?}"),
                "pod" => write!(self.writer, "pod={value:?}"),
                _ => Ok(()),
            };
        }
    }
}

/// `doctor`: its lines, then its verdict as the last line.
async fn run_doctor(args: &JobArgs) -> Outcome {
    let interfaces = crate::address::host_interfaces();
    let pid1 = doctor::pid1_command_line();
    let (args, from) = doctor::with_the_pods_program(args, &pid1);
    if let Some(from) = from {
        println!("{from}");
    }
    let (lines, outcome) = doctor::doctor(&args, &interfaces, crate::address::hostname_ip).await;
    for line in lines {
        println!("{line}");
    }
    println!("{}", outcome.reason);
    outcome
}

fn print_manifest(args: &ManifestArgs) -> Outcome {
    match manifest::documents(args) {
        Ok(docs) => {
            let words: Vec<String> = std::env::args()
                .skip(1)
                .map(|w| {
                    if w.contains(char::is_whitespace) {
                        format!("{w:?}")
                    } else {
                        w
                    }
                })
                .collect();
            let command_line = format!("paddle-launcher {}", words.join(" "));
            print!("{}", manifest::to_yaml(args, &docs, &command_line));
            for note in manifest::notes(args) {
                eprintln!("{note}");
            }
            Outcome::new(exit::SUCCESS, format!("{} documents printed", docs.len()))
        }
        Err(e) => Error::from(e).into(),
    }
}

fn log_outcome(outcome: &Outcome) {
    let status = outcome.code;
    if status == 0 {
        info!(status, "{}", outcome.reason);
    } else {
        let cause = outcome.reason.as_str();
        error!(status, cause, "exiting with status {status}: {cause}");
    }
}

/// Exits with the outcome's status, after writing the termination message when there is one.
fn finish(outcome: Outcome, termination_log: Option<PathBuf>) -> ! {
    if let Some(path) = termination_log {
        write_termination_message(&path, &outcome.reason);
    }
    std::process::exit(outcome.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_format_may_come_before_the_subcommand() {
        let subcommands = ["run", "plan", "local"];
        let args = |words: &[&str]| -> Vec<OsString> { words.iter().map(OsString::from).collect() };
        assert_eq!(
            global_after_subcommand(
                args(&["pl", "--log-format", "json", "plan", "-x"]),
                &subcommands
            ),
            args(&["pl", "plan", "--log-format", "json", "-x"])
        );
        assert_eq!(
            global_after_subcommand(args(&["pl", "--log-format=json", "local"]), &subcommands),
            args(&["pl", "local", "--log-format=json"])
        );
        // Not before a subcommand (run's options at the root): as given.
        let root = args(&["pl", "--log-format", "json", "--", "python"]);
        assert_eq!(global_after_subcommand(root.clone(), &subcommands), root);
        let other = args(&["pl", "--job-name", "j", "plan"]);
        assert_eq!(global_after_subcommand(other.clone(), &subcommands), other);
    }
}
