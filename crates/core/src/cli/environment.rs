//! The launcher's own environment variables: which it reads, which it does not know (a near miss
//! named), and the table of every option with its variable for the docs.

use clap::Args;

use super::{Cli, JobArgs};

/// Variables of the launcher's own prefixes that no option reads: most often a misspelt name
/// (`CONF_PADDLE_GRADIENT_NUMS`), whose setting would silently not apply. One warning each,
/// with the nearest name the launcher does read when one is close.
pub fn unread_in_environment() -> Vec<String> {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect();
    unread_variables(names.iter().map(String::as_str))
}

/// The first variable of the launcher's prefixes that no option reads but that is a near miss
/// of one that does (`PADDLE_LAUNCHER_NPROC_PER_NODE` for `..._PER_POD`): an error, since the
/// setting meant would silently not apply (a job of 8 GPUs run as 1 process). A name far from
/// every known one stays a warning (`unread_in_environment`). Its value is not echoed when
/// the name looks like a secret's.
pub fn near_miss_in_environment() -> Option<crate::error::ConfigError> {
    let known = known_variables();
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value)))
        .filter(|(name, _)| !is_service_link(name))
        .find_map(|(name, value)| {
            let nearest = unread_in(&name, &known)??;
            // A misspelt secret's name is near a secret's: neither's value is shown.
            let secret = ["SECRET", "TOKEN", "PASSWORD", "KEY"]
                .iter()
                .any(|word| name.contains(word) || nearest.contains(word));
            let value = match secret {
                true => "(hidden)".to_string(),
                false => value.to_string_lossy().into_owned(),
            };
            Some(crate::error::ConfigError::new(
                &name,
                &value,
                format!("a variable the launcher reads: did you mean {nearest}? (unset {name}, or rename it)"),
            ))
        })
}

/// A variable Kubernetes gives every pod for each Service of its namespace (service links:
/// `<SERVICE>_PORT`, `<SERVICE>_SERVICE_HOST`, `<SERVICE>_PORT_6171_TCP_ADDR`, ...): a
/// Service named `paddle-launcher` gives `PADDLE_LAUNCHER_PORT`, near `PADDLE_LAUNCHER_LOG`. No
/// error for those (a warning, as for any name no option reads).
fn is_service_link(name: &str) -> bool {
    name.ends_with("_PORT")
        || name.contains("_SERVICE_HOST")
        || name.contains("_SERVICE_PORT")
        || name
            .split_once("_PORT_")
            .is_some_and(|(_, rest)| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// `unread_in_environment`'s rule, for the given names.
pub fn unread_variables<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let known = known_variables();
    names
        .filter_map(|name| {
            Some(match unread_in(name, &known)? {
                Some(k) => format!("{name} is set but no option reads it: did you mean {k}?"),
                None => format!("{name} is set but no option reads it"),
            })
        })
        .collect()
}

/// Paddle's own variables within two letters of the launcher's prefix: they are read, by
/// Paddle (`PADDLE_LAUNCH_WITH_ARGS`: `paddle.distributed.launch`'s), so no warning.
const PADDLES_OWN: &[&str] = &["PADDLE_LAUNCH_WITH_ARGS"];

pub fn unread_in(name: &str, known: &[String]) -> Option<Option<String>> {
    let read = known.iter().any(|k| k == name) || PADDLES_OWN.contains(&name);
    if !has_our_prefix(name) || read {
        return None;
    }
    let nearest = known
        .iter()
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 3)
        .min();
    Some(nearest.map(|(_, k)| k.clone()))
}

/// Every variable the launcher reads: its options', the log filter, and what it gives its
/// children.
pub fn known_variables() -> Vec<String> {
    const OTHERS: &[&str] = &[
        "PADDLE_LAUNCHER_LOG",
        "PADDLE_LAUNCHER_RESTART_COUNT",
        "PADDLE_LAUNCHER_FULL_WORLD_SIZE",
    ];
    let cli = <Cli as clap::CommandFactory>::command();
    let mut known: Vec<String> = cli
        .get_arguments()
        .chain(cli.get_subcommands().flat_map(|s| s.get_arguments()))
        .filter_map(|a| Some(a.get_env()?.to_string_lossy().into_owned()))
        .collect();
    known.extend(OTHERS.iter().map(|s| s.to_string()));
    known
}

/// The launcher's own prefixes, spelt right or within two letters of it
/// (`PADDLE_LAUNCHR_PROTOCOL`): a misspelt prefix hides a setting as surely as a misspelt name.
pub fn has_our_prefix(name: &str) -> bool {
    const PREFIXES: [&str; 2] = ["CONF_PADDLE_", "PADDLE_LAUNCHER_"];
    PREFIXES.iter().any(|prefix| {
        (prefix.len().saturating_sub(2)..=prefix.len() + 2)
            .filter_map(|cut| name.get(..cut))
            .any(|head| head.ends_with('_') && edit_distance(head, prefix) <= 2)
    })
}

/// The subcommand a mistyped first argument was meant to be (`docter`: `doctor`), if one is
/// within two letters. The root command takes `run`'s options and no word of its own, so
/// clap only says "unexpected argument".
pub fn near_subcommand(first: &str) -> Option<String> {
    if first.starts_with('-') {
        return None;
    }
    let cli = <Cli as clap::CommandFactory>::command();
    cli.get_subcommands()
        .map(|s| s.get_name())
        .filter(|name| *name != first)
        .map(|name| (edit_distance(first, name), name))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, name)| name.to_string())
}

/// Levenshtein distance, for "did you mean".
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// Each option of `run`: (id, environment variable, --flag, help text), in definition order.
pub fn definitions() -> &'static [(String, String, String, String)] {
    static DEFINITIONS: std::sync::OnceLock<Vec<(String, String, String, String)>> =
        std::sync::OnceLock::new();
    DEFINITIONS.get_or_init(|| {
        let run = <JobArgs as Args>::augment_args(clap::Command::new("run"));
        run.get_arguments()
            .filter_map(|arg| {
                let env = arg.get_env()?.to_string_lossy().to_string();
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                Some((
                    arg.get_id().to_string(),
                    env,
                    format!("--{}", arg.get_long()?),
                    help,
                ))
            })
            .collect()
    })
}

/// The options table of docs/configuration.md, generated from the clap definitions (a test
/// keeps the page equal to it): variable, flag, default (the help text's `[default: ...]`),
/// meaning.
pub fn options_table() -> String {
    let run = <JobArgs as Args>::augment_args(clap::Command::new("run"));
    let heading_of = |id: &str| {
        run.get_arguments()
            .find(|arg| arg.get_id() == id)
            .and_then(|arg| arg.get_help_heading())
            .unwrap_or("Other")
            .to_string()
    };
    let mut out = String::new();
    let mut heading = String::new();
    for (id, env, flag, help) in definitions() {
        // One table per task, in the order `--help` shows them.
        if heading_of(id) != heading {
            heading = heading_of(id);
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!(
                "#### {heading}\n\n| env | flag | default | meaning |\n|---|---|---|---|\n"
            ));
        }
        let (meaning, default) = match help.rsplit_once(" [default: ") {
            Some((meaning, default)) => (meaning, default.trim_end_matches(']')),
            None => (help.as_str(), ""),
        };
        let meaning = meaning.split_whitespace().collect::<Vec<_>>().join(" ");
        let meaning = meaning.trim_end_matches('.');
        let default = if default.is_empty() { "—" } else { default };
        out.push_str(&format!("| `{env}` | `{flag}` | {default} | {meaning} |\n"));
    }
    out
}
