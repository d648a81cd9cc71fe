//! The I/O around `runtime`: gathers the facts its detection asks for (the environment, this
//! pod's own object, its JobSet) and builds the configuration from the settings it fills in.

use std::collections::BTreeMap;
use tracing::{info, warn};

use crate::address::{own_ip, Interfaces};
use crate::batch::{jobset, volcano, Choice, Facts, Step};
use crate::cli::JobArgs;
use crate::config::{present, Config, Discovery, RuntimeReport};
use crate::error::Error;
use crate::peers::kubernetes;

/// The configuration of this pod: its settings, with what the batch system that created it
/// says filled in where they are unset. Every value the user gave is checked before any
/// request; in `auto`, a pod asks the API for its own labels only when the job lacks a
/// setting it needs (its name), so a fully configured pod makes no extra request.
pub async fn configure(
    args: &JobArgs,
    interfaces: &Interfaces,
    hostname_ip: impl Fn() -> Option<std::net::IpAddr>,
) -> Result<Config, Error> {
    let choice = crate::batch::parse_choice(present(&args.runtime))?;
    let given_membership = present(&args.peers).is_some() || present(&args.dns).is_some();
    if choice == Choice::Static || (choice == Choice::Auto && given_membership) {
        return Ok(Config::from_args(args)?);
    }
    // What detection may fill stands in as a placeholder while the rest is checked.
    let checked = Config::from_args(&with_placeholders(args))?;
    let need_own_pod = present(&args.job_name).is_none();
    let counts_given = present(&args.gradient_num).is_some()
        || (present(&args.trainer_count).is_some() && present(&args.pserver_count).is_some());
    let mut facts = Facts {
        env: crate::batch::system_env(),
        counts_given,
        ..Facts::default()
    };
    add_files_and_hostname(&mut facts.env);
    let mut server = None;
    loop {
        let step = match crate::batch::detect(choice, &facts, need_own_pod)? {
            Step::Done(None) => return Ok(Config::from_args(args)?),
            Step::Done(Some(detected)) => return configured(args, *detected),
            step => step,
        };
        let server = match &server {
            Some(server) => server,
            None => match kubernetes::connect(checked.topology.namespace.as_deref()).await {
                Ok(connected) => server.insert(connected),
                // In `auto`, no cluster means no batch system to ask: the settings alone.
                Err(e) if choice == Choice::Auto => {
                    // Incomplete settings: their one-line error says what to set; the
                    // client's (a kubeconfig path, twice) would only come before it.
                    let config = Config::from_args(args)?;
                    warn!("batch system: not asked, no Kubernetes API ({e})");
                    return Ok(config);
                }
                Err(e) => return Err(e),
            },
        };
        match step {
            Step::OwnPod => {
                let ip = own_ip(&checked, interfaces, &hostname_ip)?;
                let name = checked.topology.pod_name.as_deref();
                info!(
                    "batch system: reading this pod's labels ({}) from {}",
                    name.map_or(format!("IP {ip}"), |n| format!("POD_NAME {n}")),
                    server.url
                );
                facts.own = Some(kubernetes::own_marks(server, name, ip).await?);
            }
            Step::JobSet(name) => {
                info!("batch system: reading JobSet {name} for its number of pods");
                let object = kubernetes::jobset(server, &name).await?;
                facts.jobset = Some(jobset::jobset_pods(&object));
            }
            Step::Done(_) => unreachable!("handled above"),
        }
    }
}

/// What the environment lacks that detection reads: Volcano's host files and the hostname.
fn add_files_and_hostname(env: &mut BTreeMap<String, String>) {
    // The svc plugin's files stand in for its variables where the environment lacks them (only
    // in a Volcano pod, which its env plugin's task index marks).
    let files = match volcano::in_volcano(env) {
        true => read_volcano_host_files(std::path::Path::new(volcano::VOLCANO_HOSTS_DIR)),
        false => Vec::new(),
    };
    if !files.is_empty() {
        let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        info!(
            "batch system: Volcano's host files in {}: {}",
            volcano::VOLCANO_HOSTS_DIR,
            names.join(", ")
        );
        for (name, value) in volcano::host_files(&files) {
            env.entry(name).or_insert(value);
        }
    }
    if !env.contains_key("HOSTNAME") {
        if let Some(host) = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
        {
            env.insert("HOSTNAME".into(), host);
        }
    }
}

/// The `<task>.host` files of `dir`, (file name, contents) each, in name order; none when it
/// does not exist. A file is a ConfigMap key (at most 1 MiB): reads are bounded a little above.
fn read_volcano_host_files(dir: &std::path::Path) -> Vec<(String, String)> {
    use std::io::Read;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if !name.ends_with(".host") {
                return None;
            }
            let mut text = String::new();
            std::fs::File::open(entry.path())
                .ok()?
                .take(2 << 20)
                .read_to_string(&mut text)
                .ok()?;
            Some((name, text))
        })
        .collect();
    files.sort();
    files
}

fn configured(args: &JobArgs, detected: crate::batch::Detected) -> Result<Config, Error> {
    let (filled, notes) = crate::batch::fill(&detected, args);
    for note in &notes {
        info!("batch system {}: {note}", detected.system.name());
    }
    let mut config = Config::from_args(&filled)?;
    if let Discovery::Kubernetes { groups } = &mut config.topology.discovery {
        for group in groups {
            group.ranking = detected.ranking.clone();
        }
    }
    if let Some(group) = &mut config.topology.trainers_to_finish {
        group.ranking = detected.ranking.clone();
    }
    config.runtime = Some(RuntimeReport {
        system: detected.system,
        settings: notes,
    });
    Ok(config)
}

/// The settings with a stand-in for each one detection may fill, so that every other value
/// is checked before the first request.
fn with_placeholders(args: &JobArgs) -> JobArgs {
    let mut args = args.clone();
    let colocated = matches!(present(&args.role), None | Some("both"));
    if present(&args.job_name).is_none() {
        args.job_name = Some("placeholder".into());
    }
    if colocated && present(&args.gradient_num).is_none() {
        args.gradient_num = Some("1".into());
    }
    for count in [&mut args.trainer_count, &mut args.pserver_count] {
        if present(count).is_none() {
            *count = Some("1".into());
        }
    }
    args
}
