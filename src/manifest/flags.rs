//! `manifest`'s flags read and checked: each bad value one line naming the flag, what it got and
//! what it expects (status 2), before anything is generated.

use crate::cli::{JobArgs, ManifestArgs, ManifestRuntime};
use crate::config::Config;
use crate::error::ConfigError;
use crate::selector::is_dns_subdomain;

use super::pod::{container_env, container_trainer_args, expand, toleration, FROM_DOWNWARD_API};
use super::pod::{is_label_value, is_qualified_name, options_from_flags};
use super::{jobset_name_field, replicated_job_name, runtime_name, task_name};
use super::{pod_kinds, PodKind, SECRET_DIR, WORKDIR};

pub(super) fn invalid(flag: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError::new(flag, value, expected)
}

/// What a resource option takes, as the API server parses it.
pub(super) const QUANTITY: &str = "a Kubernetes quantity above 0: a number and an optional suffix, e.g. 4, 500m or 1.5 CPUs, 8Gi, 512Mi or 8G bytes (Ki Mi Gi Ti Pi Ei are powers of 1024, k M G T P E of 1000)";

/// A quantity as the API server parses it (`resource.Quantity`: a signed decimal number, then
/// a binary suffix Ki..Ei, a decimal one m, k, M..E, or an exponent e/E and an integer), and
/// above 0, as a request must be: "8GB" and "2cores" are not.
pub(super) fn is_positive_quantity(text: &str) -> bool {
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    let number_end = unsigned
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let digits = number.chars().filter(char::is_ascii_digit).count();
    let well_formed = digits > 0 && number.matches('.').count() <= 1;
    let exponent = |rest: &str| {
        let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
    };
    let suffix_ok = match suffix {
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        _ => suffix.strip_prefix(['e', 'E']).is_some_and(exponent),
    };
    well_formed && suffix_ok && number.chars().any(|c| ('1'..='9').contains(&c))
}

/// `--job-path` is mounted only with `--volume-claim`: it must be an absolute directory of its
/// own, neither one of the pod's other mounts nor over the training program.
pub(super) fn check_job_path(request: &ManifestArgs) -> Result<(), ConfigError> {
    if request.volume_claim.is_none() {
        return Ok(());
    }
    let path = request.job_path.trim_end_matches('/');
    let within =
        |inner: &str, outer: &str| inner == outer || inner.starts_with(&format!("{outer}/"));
    let reserved = ["/tmp", WORKDIR, SECRET_DIR];
    let program = program_path(request);
    let clash = !path.starts_with('/')
        || path.is_empty()
        || path.split('/').any(|c| c == "..")
        || reserved.iter().any(|r| within(path, r) || within(r, path))
        || program.is_some_and(|p| within(&p, path));
    if clash {
        return Err(invalid(
            "--job-path",
            &request.job_path,
            "an absolute directory of its own for the claim: not /, not /tmp, /var/lib/paddle-launcher or /etc/paddle-launcher, and not above the training program",
        ));
    }
    Ok(())
}

/// The training program's path: the first absolute path in the program after `--`, or in
/// --entry. A volume mounted over it would hide it.
pub(super) fn program_path(request: &ManifestArgs) -> Option<String> {
    let words: Vec<String> = match &request.entry {
        Some(entry) => entry.split_whitespace().map(str::to_string).collect(),
        None => request.trainer_args.clone(),
    };
    words
        .into_iter()
        .find(|w| w.starts_with('/'))
        .map(|w| w.trim_end_matches('/').to_string())
}

/// Runs the launcher's own validation (`Config::from_args`, what `run` does in each pod) on
/// the environment and arguments of this kind's container, so that `manifest` accepts exactly
/// what the pods will.
pub(super) fn validate_pods(request: &ManifestArgs, kind: &PodKind) -> Result<(), ConfigError> {
    // Only the downward API knows these; the validation needs them to be well-formed only.
    let placeholder = |path: &str| match path {
        "metadata.namespace" => request.namespace.clone(),
        "metadata.name" => format!("{}-0", request.job_name),
        path if path == jobset_name_field() => request.job_name.clone(),
        // An address of the documentation range (RFC 5737): never a real pod's.
        _ => "192.0.2.1".to_string(),
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for var in container_env(request, kind) {
        let Some(name) = var["name"].as_str() else {
            continue;
        };
        let value = match var["value"].as_str() {
            // As the kubelet expands it: `$(NAME)` of a variable defined before.
            Some(value) => expand(value, &pairs),
            None => match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some(path) => placeholder(path),
                None => continue,
            },
        };
        pairs.push((name.to_string(), value));
    }
    let args = JobArgs::from_env_pairs(
        pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        &container_trainer_args(request, kind),
    )
    .map_err(|e| {
        use clap::CommandFactory;
        match crate::cli::clap_refusal(&e, &crate::cli::Cli::command()) {
            // As the pods will refuse it, named as the manifest's user gave it.
            Some(refused) => as_manifest_error(request, refused),
            None => {
                let reason = e.to_string();
                let first_line = reason.lines().next().unwrap_or_default();
                invalid(
                    "the pods' options",
                    first_line,
                    "options the launcher accepts",
                )
            }
        }
    })?;
    // The pods read the batch system's choice before the rest (`batch::discover`).
    crate::batch::parse_choice(crate::config::present(&args.runtime))
        .map_err(|e| as_manifest_error(request, e))?;
    let args = as_detected(request, kind, args)?;
    match Config::from_args(&args) {
        Ok(_) => Ok(()),
        Err(e) => Err(as_manifest_error(request, e)),
    }
}

/// Under JobSet and Volcano: the options with what the pod's launcher will read from the
/// system filled in, by the launcher's own detection from the names and variables the system
/// gives this manifest's pods.
pub(super) fn as_detected(
    request: &ManifestArgs,
    kind: &PodKind,
    args: JobArgs,
) -> Result<JobArgs, ConfigError> {
    use crate::batch::{detect, fill, Choice, Facts, Step};
    use crate::vocabulary::System;
    let kinds = pod_kinds(request);
    let job = &request.job_name;
    let (system, facts) = match request.runtime {
        ManifestRuntime::Job => return Ok(args),
        ManifestRuntime::Jobset | ManifestRuntime::Trainer => {
            let own = [
                (crate::batch::jobset::JOBSET_NAME, job.clone()),
                (
                    crate::batch::jobset::JOBSET_REPLICATED_JOB,
                    replicated_job_name(request, kind).to_string(),
                ),
            ];
            let facts = Facts {
                own: Some(own.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
                jobset: Some(
                    kinds
                        .iter()
                        .map(|k| (replicated_job_name(request, k).to_string(), k.count))
                        .collect(),
                ),
                ..Facts::default()
            };
            (System::JobSet, facts)
        }
        ManifestRuntime::Volcano => {
            let mut env = std::collections::BTreeMap::new();
            env.insert("VC_TASK_INDEX".to_string(), "0".to_string());
            env.insert(
                "HOSTNAME".to_string(),
                format!("{job}-{}-0", task_name(kind)),
            );
            for k in &kinds {
                let task = task_name(k);
                let hosts: Vec<String> = (0..k.count)
                    .map(|i| format!("{job}-{task}-{i}.{job}"))
                    .collect();
                let key = task.to_uppercase();
                env.insert(format!("VC_{key}_HOSTS"), hosts.join(","));
                env.insert(format!("VC_{key}_NUM"), k.count.to_string());
            }
            (
                System::Volcano,
                Facts {
                    env,
                    ..Facts::default()
                },
            )
        }
    };
    match detect(Choice::Only(system), &facts, true)? {
        Step::Done(Some(detected)) => Ok(fill(&detected, &args).0),
        other => Err(invalid(
            "--runtime",
            runtime_name(request),
            &format!("pods whose launcher can read the job (it would ask for {other:?})"),
        )),
    }
}

/// The `manifest` flag whose value the pods' variable holds, if one does.
pub(super) fn flag_of(request: &ManifestArgs, variable: &str) -> Option<&'static str> {
    let kinds = pod_kinds(request);
    let from_flags = kinds
        .iter()
        .flat_map(|kind| options_from_flags(request, kind))
        .map(|(opt, flag, _)| (opt, Some(flag)));
    let from_api = FROM_DOWNWARD_API.iter().map(|(opt, _, flag)| (*opt, *flag));
    from_flags
        .chain(from_api)
        .find(|(opt, _)| opt.env() == variable)
        .and_then(|(_, flag)| flag)
}

/// The launcher's error, in the terms of the `manifest` flag that set the value.
pub(super) fn as_manifest_error(request: &ManifestArgs, e: ConfigError) -> ConfigError {
    // "CONF_PADDLE_PORT (--port)" -> CONF_PADDLE_PORT
    let variable = e.variable.split(" (").next().unwrap_or_default();
    let by_env = request.envs.iter().any(|pair| {
        pair.split_once('=')
            .is_some_and(|(name, _)| name == variable)
    });
    let flag = if by_env {
        format!("--env {variable}")
    } else if let Some(flag) = flag_of(request, variable) {
        flag.to_string()
    } else {
        // Already in words that fit `manifest` too, e.g. "trainer argument (after --)".
        return e;
    };
    invalid(
        &flag,
        &e.value,
        &format!("{} (the pods' {variable})", e.expected),
    )
}

/// The placement and size options, each refused with one line as the API server would refuse it.
pub(super) fn check_placement(request: &ManifestArgs) -> Result<(), ConfigError> {
    if let Some(size) = request
        .shm_size
        .as_deref()
        .filter(|s| !is_positive_quantity(s))
    {
        return Err(invalid("--shm-size", size, QUANTITY));
    }
    for pair in &request.node_selectors {
        let fits = pair
            .split_once('=')
            .is_some_and(|(key, value)| is_qualified_name(key) && is_label_value(value));
        if !fits {
            return Err(invalid(
                "--node-selector",
                pair,
                "KEY=VALUE with a label key (an optional DNS prefix and /, then up to 63 letters, digits, -, _ or .) and a label value",
            ));
        }
    }
    if let Some(taint) = request.tolerations.iter().find(|t| toleration(t).is_none()) {
        return Err(invalid(
            "--toleration",
            taint,
            "KEY[=VALUE][:EFFECT] with a label key and value, the effect NoSchedule, PreferNoSchedule or NoExecute",
        ));
    }
    if let Some(class) = request
        .priority_class
        .as_deref()
        .filter(|c| !is_dns_subdomain(c))
    {
        return Err(invalid(
            "--priority-class",
            class,
            "a PriorityClass name: lowercase letters, digits, - and ., at most 253",
        ));
    }
    Ok(())
}

/// The names `manifest` writes into objects: each a valid Kubernetes name.
pub(super) fn check_names(request: &ManifestArgs) -> Result<(), ConfigError> {
    if !(request.job_name.len() <= 52 && is_dns_subdomain(&request.job_name)) {
        // 52 leaves room for the "-pserver"/"-launcher" suffixes within 63.
        return Err(invalid(
            "--job-name",
            &request.job_name,
            "a job name of 1-52 lowercase letters, digits, '-' or '.'",
        ));
    }
    if request.image.is_empty() || request.image.contains(char::is_whitespace) {
        return Err(invalid(
            "--image",
            &request.image,
            "an image reference such as example.com/team/paddle-job:v1",
        ));
    }
    if let Some(queue) = &request.queue {
        if !(queue.len() <= 63 && is_dns_subdomain(queue)) {
            return Err(invalid(
                "--queue",
                queue,
                "a queue name: 1-63 lowercase letters, digits, '-' or '.'",
            ));
        }
    }
    Ok(())
}

/// The layout asked for: its options must fit together.
pub(super) fn check_layout(request: &ManifestArgs) -> Result<(), ConfigError> {
    if request.split && request.dns {
        return Err(invalid(
            "--dns",
            "true",
            "the one-Job layout (the split layout is found through the Kubernetes API)",
        ));
    }
    if request.split && request.runtime == ManifestRuntime::Trainer {
        return Err(invalid(
            "--split",
            "true",
            "the one-kind layout with --runtime trainer (Trainer v2 runs one `node` replicated job; use --runtime jobset or volcano for the split layout)",
        ));
    }
    if let (Some(asked), true) = (&request.nproc_per_pod, request.gpu > 0) {
        let n: u32 = asked.trim().parse().unwrap_or(0);
        if n > request.gpu {
            return Err(invalid(
                "--nproc-per-pod",
                asked,
                &format!(
                    "at most --gpu {}: one trainer process per GPU, or auto",
                    request.gpu
                ),
            ));
        }
    }
    if request.split && (request.pservers == 0 || !request.protocol().has_pservers()) {
        return Err(invalid(
            "--split",
            "true",
            "--pservers of at least 1 and a protocol with pservers (v1, v2, fleet)",
        ));
    }
    if request.split && request.max_restarts > 0 {
        return Err(invalid(
            "--max-restarts",
            &request.max_restarts.to_string(),
            "0 with --split (group restarts are generated for the one-Job layout)",
        ));
    }
    if request.runtime != ManifestRuntime::Job && (request.dns || request.indexed) {
        return Err(invalid(
            "--runtime",
            runtime_name(request),
            "job with --dns or --indexed (under JobSet, Trainer v2 and Volcano the system's own indexes rank the pods and its own DNS names them)",
        ));
    }
    if let (Some(min), true) = (request.min_pods, request.runtime != ManifestRuntime::Job) {
        return Err(invalid(
            "--min-pods",
            &min.to_string(),
            "unset with --runtime jobset, trainer or volcano (elastic jobs are generated as an Indexed Job, whose success policy lets a shrunk job complete)",
        ));
    }
    if let (Some(min), 0) = (request.min_pods, request.max_restarts) {
        return Err(invalid(
            "--min-pods",
            &min.to_string(),
            "--max-restarts of at least 1 too: every time the job goes on with fewer pods it spends a restart",
        ));
    }
    if !request.split && request.pservers != 0 {
        return Err(invalid(
            "--pservers",
            &request.pservers.to_string(),
            "--split too (without it every pod runs a pserver)",
        ));
    }
    Ok(())
}

/// `--env`: a NAME=VALUE the manifest does not set itself, and no misspelt launcher variable.
pub(super) fn check_envs(request: &ManifestArgs, kinds: &[PodKind]) -> Result<(), ConfigError> {
    // The variables the manifest sets itself: an --env of the same name would be a second
    // entry, and the last one wins (JOB_NAME=other would make the pods wait for other pods).
    let without_envs = ManifestArgs {
        envs: Vec::new(),
        ..request.clone()
    };
    let own: Vec<String> = kinds
        .iter()
        .flat_map(|kind| container_env(&without_envs, kind))
        .filter_map(|entry| entry["name"].as_str().map(str::to_string))
        .collect();
    for pair in &request.envs {
        match pair.split_once('=') {
            Some((name, _)) if own.iter().any(|o| o == name) => {
                return Err(invalid(
                    "--env",
                    pair,
                    "a variable the manifest does not set itself (set the launcher's own options with their manifest flags)",
                ))
            }
            Some((name, _)) if !name.is_empty() && !name.contains(char::is_whitespace) => {}
            _ => return Err(invalid("--env", pair, "NAME=VALUE")),
        }
    }
    for pair in &request.envs {
        let name = pair.split_once('=').map_or("", |(name, _)| name);
        if let Some(near) = crate::cli::unread(name) {
            let expected = match near {
                Some(known) => {
                    format!("a variable the launcher reads: {name} is none; did you mean {known}?")
                }
                None => format!(
                    "a variable the launcher reads: {name} is none (docs/configuration.md lists them)"
                ),
            };
            return Err(invalid("--env", pair, &expected));
        }
    }
    Ok(())
}

/// The requests asked for: each a positive Kubernetes quantity.
pub(super) fn check_resources(request: &ManifestArgs) -> Result<(), ConfigError> {
    for (flag, value) in [
        ("--cpu", &request.cpu),
        ("--memory", &request.memory),
        ("--pscpu", &request.pscpu),
        ("--psmemory", &request.psmemory),
    ] {
        if !is_positive_quantity(value) {
            return Err(invalid(flag, value, QUANTITY));
        }
    }
    Ok(())
}
