//! The command line as operators use it: versions, completions, machine-readable logs.

mod support;

use std::process::Command;

use support::LAUNCHER;

/// The launcher run in a directory of its own (what it writes by default, the processes' log
/// directory among it, goes there), with only `env`.
fn launcher(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let cwd = tempfile::tempdir().unwrap();
    Command::new(LAUNCHER)
        .args(args)
        .current_dir(cwd.path())
        .env_clear()
        .env("PADDLE_LAUNCHER_TERMINATION_LOG", "")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn version_names_the_program_and_its_version() {
    let out = launcher(&["--version"], &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("paddle-launcher {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn completions_are_printed_for_bash_and_know_the_subcommands() {
    let out = launcher(&["completions", "bash"], &[]);
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("_paddle__launcher()"), "{script}");
    for word in ["local", "plan", "--trainer-port", "--watch-peers"] {
        assert!(script.contains(word), "no {word} in the completions");
    }
}

/// A log pipeline filters the JSON lines by their fields, not by parsing messages: every
/// line names the job and the pod, and once ranked the pod's rank and the restart; a process's
/// start and end name the process (and its pid, its status), the last line the launcher's
/// status.
#[test]
fn json_logs_carry_the_fields_a_log_pipeline_filters_by() {
    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().display().to_string();
    let env = [
        ("JOB_NAME", "fields"),
        ("PADDLE_LAUNCHER_PEERS", "127.0.0.51"),
        ("POD_IP", "127.0.0.51"),
        ("CONF_PADDLE_NIC", "lo"),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
        ("PADDLE_LAUNCHER_ID_DIR", ""),
        ("PADDLE_LAUNCHER_WORKDIR", workdir.as_str()),
        ("PADDLE_LAUNCHER_LOG_FORMAT", "json"),
    ];
    let out = launcher(&["run", "--", "sh", "-c", "echo hi; exit 3"], &env);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let with = |field: &str, value: serde_json::Value| -> &serde_json::Value {
        lines
            .iter()
            .find(|l| l["fields"][field] == value)
            .unwrap_or_else(|| panic!("no line with {field} = {value}: {stderr}"))
    };
    let started = with("process", "trainer-0".into());
    assert!(
        started["fields"]["pid"].as_u64().is_some_and(|p| p > 1),
        "{started}"
    );
    let ended = lines
        .iter()
        .find(|l| l["fields"]["process"] == "trainer-0" && l["fields"]["status"] == 3)
        .unwrap_or_else(|| panic!("no end of trainer-0 with its status: {stderr}"));
    let last = lines.last().unwrap();
    assert_eq!(
        (last["level"].as_str(), &last["fields"]["status"]),
        (Some("ERROR"), &3.into())
    );
    // The job's cause, as the termination message says it.
    let cause = last["fields"]["cause"].as_str().unwrap_or("");
    assert!(cause.ends_with("trainer exited with status 3"), "{last}");
    for line in [started, ended, last] {
        let span = &line["span"];
        assert_eq!(
            (
                &span["job"],
                &span["pod"],
                &span["pod_rank"],
                &span["restart"]
            ),
            (&"fields".into(), &"127.0.0.51".into(), &0.into(), &0.into()),
            "{line}"
        );
    }
    // The process's own log file, named as Paddle's launcher names it.
    let log = std::fs::read_to_string(dir.path().join("log/workerlog.0")).unwrap();
    assert_eq!(log, "hi\n");
}

#[test]
fn json_logs_are_one_object_per_line_with_the_pod() {
    let env = [
        ("JOB_NAME", "json"),
        ("PADDLE_LAUNCHER_PEERS", "127.0.0.50"),
        ("POD_IP", "127.0.0.50"),
        ("CONF_PADDLE_NIC", "lo"),
        ("PADDLE_LAUNCHER_LOG_FORMAT", "json"),
    ];
    let out = launcher(&["plan"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 3, "{stderr}");
    let planned = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("trainer id 0 of 1"))
        })
        .expect("the rank line");
    assert_eq!(planned["level"], "INFO");
    assert_eq!(planned["span"]["pod"], "127.0.0.50");
}

#[test]
fn an_unknown_log_format_is_a_usage_error() {
    let out = launcher(&["plan", "--log-format", "xml"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'xml' for '--log-format"),
        "{stderr}"
    );
}

/// Without JOB_NAME and without a cluster to ask, one line says what to set, naming the batch
/// systems `--runtime auto` would read, and nothing about a kubeconfig comes before it.
/// `--help` groups the options by task, in the order a user sets up a job.
#[test]
fn help_groups_the_options_by_task() {
    let out = launcher(&["run", "--help"], &[]);
    let help = String::from_utf8_lossy(&out.stdout);
    let headings: Vec<&str> = help
        .lines()
        .filter(|l| l.ends_with(':') && !l.starts_with(' '))
        .collect();
    assert_eq!(
        headings,
        [
            "Arguments:",
            "Options:",
            "Job and membership:",
            "Roles and protocol:",
            "Recovery:",
            "Hangs:",
            "Stopping and preemption:",
            "Network:",
            "Files and logs:"
        ],
        "{help}"
    );
    let section = |name: &str| {
        help.split(name)
            .nth(1)
            .unwrap()
            .split("\n\n")
            .next()
            .unwrap()
            .to_string()
    };
    assert!(section("Recovery:").contains("--max-restarts"), "{help}");
    assert!(section("Hangs:").contains("--hang-timeout"), "{help}");
}

/// A mistyped subcommand gets the one it was near, on one line, status 2; a word near none is
/// clap's own "unexpected argument".
#[test]
fn a_mistyped_subcommand_is_suggested() {
    let out = launcher(&["docter"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("did you mean 'doctor'?"), "{said}");
    // After the global options too.
    let out = launcher(&["--log-format", "json", "docter"], &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("unrecognized subcommand 'docter': did you mean 'doctor'?"),
        "{said}"
    );
    let out = launcher(&["python3"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("unexpected argument 'python3'"), "{said}");
}

#[test]
fn a_missing_job_name_is_one_line_naming_the_variable_and_the_runtime() {
    let dir = std::env::temp_dir().join(format!("pl-no-job-name-{}", std::process::id()));
    let missing = dir.join("no-kubeconfig");
    let out = launcher(
        &["run", "--", "python", "train.py"],
        &[
            ("CONF_PADDLE_GRADIENT_NUM", "2"),
            ("KUBECONFIG", missing.to_str().unwrap()),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Beside the start line, only the error.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("starting as pid"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("ERROR"), "{stderr}");
    assert!(lines[0].contains("JOB_NAME (--job-name)"), "{stderr}");
    assert!(
        lines[0].contains("PADDLE_LAUNCHER_RUNTIME (--runtime) auto"),
        "{stderr}"
    );
}

/// `doctor` with static peers says what `plan` and `run` would: this pod's rank, or the status
/// they would end with (73: this pod is not among the peers, or two share an address; 127: the
/// v1 `paddle` command is not on PATH) instead of "the job would start now".
#[test]
fn doctor_with_static_peers_judges_as_plan_and_run_do() {
    let standin = concat!(env!("CARGO_MANIFEST_DIR"), "/standins/paddle");
    let pserver = format!("{standin} pserver");
    let trainer = format!("{standin} train");
    let base = |peers: &'static str, pod_ip: &'static str| {
        vec![
            ("JOB_NAME", "doc".to_string()),
            ("PADDLE_LAUNCHER_PEERS", peers.to_string()),
            ("POD_IP", pod_ip.to_string()),
            ("CONF_PADDLE_NIC", "lo".to_string()),
            ("PADDLE_LAUNCHER_PSERVER_CMD", pserver.clone()),
            ("PADDLE_LAUNCHER_TRAINER_CMD", trainer.clone()),
            ("PATH", "/usr/bin:/bin".to_string()),
        ]
    };
    let doctor = |env: Vec<(&str, String)>| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = launcher(&["doctor", "--", "--config=x.py"], &env);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.code(), stdout)
    };
    let (code, out) = doctor(base("127.0.0.2,127.0.0.3", "127.0.0.3"));
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("this pod would be trainer 1 / pserver 1"),
        "{out}"
    );
    assert!(out.ends_with("the job would start now\n"), "{out}");
    assert!(out.contains("preemption: no checkpoint window (without a control channel no other trainer could join the checkpoint; PADDLE_LAUNCHER_CHECKPOINT_WINDOW (--checkpoint-window) sets one)"), "{out}");
    // With a channel the job checkpoints first, within what the pod's grace period leaves.
    let mut env = base("127.0.0.2,127.0.0.3", "127.0.0.3");
    env.extend([
        (
            "PADDLE_LAUNCHER_JOB_SECRET",
            "0123456789abcdef0123456789abcdef".to_string(),
        ),
        ("PADDLE_LAUNCHER_POD_GRACE_PERIOD", "30".to_string()),
    ]);
    let (_, out) = doctor(env);
    assert!(out.contains("preemption: a SIGTERM while training sends SIGUSR1 to the trainer's processes that handle it and to every other trainer of the job, gives it 12 s to checkpoint (PADDLE_LAUNCHER_CHECKPOINT_WINDOW (--checkpoint-window)), then stops the children (12 s before SIGKILL)"), "{out}");
    let (code, out) = doctor(base("127.0.0.2,127.0.0.3", "127.0.0.9"));
    assert_eq!(code, Some(73), "{out}");
    assert!(out.contains("is not among the job's pods"), "{out}");
    let (code, out) = doctor(base("127.0.0.2,127.0.0.2", "127.0.0.2"));
    assert_eq!(code, Some(73), "{out}");
    assert!(out.contains("share the IP 127.0.0.2"), "{out}");
    // The default commands, `paddle pserver` / `paddle train`, with no `paddle` on PATH.
    let mut env = base("127.0.0.2,127.0.0.3", "127.0.0.2");
    env.retain(|(k, _)| !k.ends_with("_CMD"));
    let (code, out) = doctor(env);
    assert_eq!(code, Some(127), "{out}");
    assert!(
        out.contains("command `paddle`: not found on PATH (/usr/bin:/bin)"),
        "{out}"
    );
    // Most often a current Paddle image not given its protocol: said which it needs.
    assert!(
        out.contains("a PaddlePaddle 2.x or 3.x image needs PADDLE_LAUNCHER_PROTOCOL=collective"),
        "{out}"
    );
    // Every problem, not the first only (issue 51): the job secret's file missing and both
    // commands missing are three, said together, with the first one's status.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-secret");
    let mut env = base("127.0.0.2,127.0.0.3", "127.0.0.2");
    env.retain(|(k, _)| !k.ends_with("_CMD"));
    env.push((
        "PADDLE_LAUNCHER_JOB_SECRET_FILE",
        missing.display().to_string(),
    ));
    let (code, out) = doctor(env);
    assert_eq!(code, Some(2), "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("3 problems: (1) the job would not start: no job secret at "),
        "{out}"
    );
    assert!(
        last.contains("(2) cannot start the pserver-0 command `paddle`"),
        "{out}"
    );
    assert!(
        last.contains("(3) cannot start the trainer-0 command `paddle`"),
        "{out}"
    );
}

/// `plan` shows exactly what runs: the Python settings the launcher adds at the start (unless
/// the pod sets them) and, with hang detection, the stack handler first on the trainer's path.
#[test]
fn plan_shows_the_variables_added_at_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let progress = dir.path().join("progress");
    let progress_s = progress.display().to_string();
    let plan = |extra: &[(&str, &str)]| {
        let mut env = vec![
            ("JOB_NAME", "p"),
            ("PADDLE_LAUNCHER_PEERS", "127.0.0.2"),
            ("POD_IP", "127.0.0.2"),
            ("CONF_PADDLE_NIC", "lo"),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
            ("PADDLE_LAUNCHER_HANG_TIMEOUT", "600"),
            ("PADDLE_LAUNCHER_PROGRESS_FILE", &progress_s),
        ];
        env.extend_from_slice(extra);
        let out = launcher(&["plan", "--", "train.py"], &env);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        plan["processes"][0]["env"].clone()
    };
    let env = plan(&[]);
    assert_eq!(env["PYTHONUNBUFFERED"], "1");
    assert_eq!(env["PYTHONFAULTHANDLER"], "1");
    let handler = dir
        .path()
        .join("paddle-launcher-python")
        .display()
        .to_string();
    assert_eq!(env["PYTHONPATH"], handler.as_str());
    let env = plan(&[("PYTHONUNBUFFERED", "0"), ("PYTHONPATH", "/opt/lib")]);
    assert!(env.get("PYTHONUNBUFFERED").is_none(), "{env}");
    assert_eq!(env["PYTHONPATH"], format!("{handler}:/opt/lib").as_str());
}

/// A misspelt variable near a known one would silently not apply (8 GPUs run as 1 process):
/// refused with status 2, naming it and the one it meant; a secret's value is not shown. A
/// name far from every known one is only warned of.
#[test]
fn a_misspelt_variable_gets_a_did_you_mean() {
    let base = [
        ("JOB_NAME", "typo"),
        ("PADDLE_LAUNCHER_PEERS", "127.0.0.2"),
        ("POD_IP", "127.0.0.2"),
        ("CONF_PADDLE_NIC", "lo"),
    ];
    let run = |extra: (&str, &str)| {
        let mut env = base.to_vec();
        env.push(extra);
        let out = launcher(&["plan", "--", "x.py"], &env);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(("PADDLE_LAUNCHER_NPROC_PER_NODE", "8"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid PADDLE_LAUNCHER_NPROC_PER_NODE: \"8\": expected a variable the launcher reads: did you mean PADDLE_LAUNCHER_NPROC_PER_POD?"),
        "{stderr}"
    );
    let (code, stderr) = run((
        "PADDLE_LAUNCHER_JOB_SECRT",
        "0123456789abcdef0123456789abcdef",
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("did you mean PADDLE_LAUNCHER_JOB_SECRET?"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("0123456789abcdef"),
        "the secret was shown: {stderr}"
    );
    // What Kubernetes gives a pod for a Service named paddle-launcher (service links) is near
    // PADDLE_LAUNCHER_LOG, and no misspelling: a warning.
    let (code, stderr) = run(("PADDLE_LAUNCHER_PORT", "tcp://10.0.0.1:80"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("PADDLE_LAUNCHER_PORT is set but no option reads it"),
        "{stderr}"
    );
    let (code, stderr) = run(("PADDLE_LAUNCHER_SOMETHING_ELSE_ENTIRELY", "1"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("PADDLE_LAUNCHER_SOMETHING_ELSE_ENTIRELY is set but no option reads it"),
        "{stderr}"
    );
}

/// A grace period for the children longer than the pod's own: the kubelet would kill them
/// first. Refused before anything starts, naming both.
#[test]
fn a_grace_period_longer_than_the_pods_is_refused() {
    let out = launcher(
        &["run", "--", "true"],
        &[
            ("JOB_NAME", "g"),
            ("PADDLE_LAUNCHER_PEERS", "127.0.0.2"),
            ("POD_IP", "127.0.0.2"),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
            ("PADDLE_LAUNCHER_GRACE_PERIOD", "40"),
            ("PADDLE_LAUNCHER_POD_GRACE_PERIOD", "30"),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid PADDLE_LAUNCHER_GRACE_PERIOD (--grace-period): \"40\": expected at most the pod's grace period, 30 s"),
        "{stderr}"
    );
}

/// A bound on free preemptions that is no number, or that nothing could enforce (no control
/// channel restarts a preempted job): refused in one line, status 2.
#[test]
fn a_bound_on_free_preemptions_that_cannot_work_is_refused() {
    let base = [
        ("JOB_NAME", "mp"),
        ("PADDLE_LAUNCHER_PEERS", "127.0.0.2"),
        ("POD_IP", "127.0.0.2"),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
    ];
    let secret = (
        "PADDLE_LAUNCHER_JOB_SECRET",
        "0123456789abcdef0123456789abcdef",
    );
    let refused: [(&[(&str, &str)], &str); 3] = [
        (
            &[("PADDLE_LAUNCHER_MAX_PREEMPTIONS", "1")],
            "invalid PADDLE_LAUNCHER_MAX_PREEMPTIONS (--max-preemptions): \"1\": expected unset without a job secret: only the control channel restarts a preempted job",
        ),
        (
            &[("PADDLE_LAUNCHER_MAX_PREEMPTIONS", "some"), secret],
            "invalid PADDLE_LAUNCHER_MAX_PREEMPTIONS (--max-preemptions): \"some\": expected a number of preemptions, an integer from 0 to 10000",
        ),
        (
            &[("PADDLE_LAUNCHER_MAX_PREEMPTIONS", "-1"), secret],
            "expected a number of preemptions, an integer from 0 to 10000",
        ),
    ];
    for (extra, said) in refused {
        refused_with(&base, extra, said);
    }
}

/// Runs the launcher with `base` and `extra`: it must refuse to start (status 2) in one error
/// line saying `said`.
fn refused_with(base: &[(&str, &str)], extra: &[(&str, &str)], said: &str) {
    let env: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
    let out = launcher(&["run", "--", "true"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
    assert!(stderr.contains(said), "{extra:?}: {stderr}");
    let errors = stderr.lines().filter(|line| line.contains("ERROR")).count();
    assert_eq!(errors, 1, "{stderr}");
}

/// A checkpoint signal the trainer could not handle, or that would stop it, and a window the
/// pod's grace period cannot hold: refused before anything starts, in one line naming the
/// option and the value. `none`, a name in any case and SIGUSR2 without hang detection run.
#[test]
fn a_checkpoint_signal_or_window_that_cannot_work_is_refused() {
    let base = [
        ("JOB_NAME", "c"),
        ("PADDLE_LAUNCHER_PEERS", "127.0.0.2"),
        ("POD_IP", "127.0.0.2"),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
    ];
    let refused: [(&[(&str, &str)], &str); 5] = [
        (
            &[("PADDLE_LAUNCHER_CHECKPOINT_SIGNAL", "SIGBOGUS")],
            "invalid PADDLE_LAUNCHER_CHECKPOINT_SIGNAL (--checkpoint-signal): \"SIGBOGUS\": expected a signal the trainer handles to checkpoint and go on, such as SIGUSR1, or none",
        ),
        (
            &[("PADDLE_LAUNCHER_CHECKPOINT_SIGNAL", "term")],
            "(SIGTERM cannot be: it asks the trainer to stop, not to go on)",
        ),
        (
            &[("PADDLE_LAUNCHER_CHECKPOINT_SIGNAL", "KILL")],
            "(SIGKILL cannot be: it cannot be handled)",
        ),
        (
            &[
                ("PADDLE_LAUNCHER_CHECKPOINT_SIGNAL", "usr2"),
                ("PADDLE_LAUNCHER_HANG_TIMEOUT", "60"),
            ],
            "(SIGUSR2 cannot be: it asks for the trainer's stacks while hangs are watched",
        ),
        (
            &[
                ("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "40"),
                ("PADDLE_LAUNCHER_POD_GRACE_PERIOD", "30"),
            ],
            "invalid PADDLE_LAUNCHER_CHECKPOINT_WINDOW (--checkpoint-window): \"40\": expected at most the pod's grace period, 30 s",
        ),
    ];
    for (extra, said) in refused {
        refused_with(&base, extra, said);
    }
    for accepted in ["none", "sigwinch", "USR2"] {
        let env: Vec<(&str, &str)> = base
            .iter()
            .copied()
            .chain([("PADDLE_LAUNCHER_CHECKPOINT_SIGNAL", accepted)])
            .collect();
        let out = launcher(&["run", "--", "true"], &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{accepted}: {stderr}");
    }
}

/// --nproc-per-pod that is no count, too many, or more processes than the GPUs listed, a
/// protocol with one trainer per pod, and a pod's own size that contradicts the launcher's:
/// refused before anything starts, status 2, in one line naming the value.
#[test]
fn processes_per_pod_that_cannot_work_are_refused() {
    let base = [
        ("JOB_NAME", "n"),
        ("PADDLE_LAUNCHER_PEERS", "127.0.0.2"),
        ("POD_IP", "127.0.0.2"),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
    ];
    let count = "expected trainer processes per pod, or auto, an integer from 1 to 1024";
    let refused: [(&[(&str, &str)], &str); 8] = [
        (
            &[
                ("PADDLE_LAUNCHER_NPROC_PER_POD", "2"),
                ("PADDLE_LAUNCHER_TRAIN_FILES", "/data/part-*"),
            ],
            "invalid PADDLE_LAUNCHER_TRAIN_FILES (--train-files): \"/data/part-*\": expected unset with 2 trainer processes per pod",
        ),
        (&[("PADDLE_LAUNCHER_NPROC_PER_POD", "0")], count),
        (&[("PADDLE_LAUNCHER_NPROC_PER_POD", "-1")], count),
        (&[("PADDLE_LAUNCHER_NPROC_PER_POD", "abc")], count),
        (&[("PADDLE_LAUNCHER_NPROC_PER_POD", "1025")], count),
        (
            &[
                ("PADDLE_LAUNCHER_NPROC_PER_POD", "2"),
                ("PADDLE_LAUNCHER_PROTOCOL", "v1"),
            ],
            "invalid PADDLE_LAUNCHER_NPROC_PER_POD (--nproc-per-pod): \"2\": expected 1 with --protocol v1: v1 trainers run their own --trainer_count threads",
        ),
        (
            &[
                ("PADDLE_LAUNCHER_NPROC_PER_POD", "8"),
                ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ],
            "invalid PADDLE_LAUNCHER_NPROC_PER_POD (--nproc-per-pod): \"8\": expected at most one process per GPU: CUDA_VISIBLE_DEVICES=0,1,2,3 lists 4",
        ),
        (
            &[
                ("PADDLE_LAUNCHER_NPROC_PER_POD", "2"),
                ("PADDLE_LOCAL_SIZE", "8"),
            ],
            "invalid PADDLE_LOCAL_SIZE: \"8\": expected unset or 2, the pod's trainer processes",
        ),
    ];
    for (extra, said) in refused {
        refused_with(&base, extra, said);
    }
}

/// `auto` runs one process per GPU listed, each told its index into CUDA_VISIBLE_DEVICES
/// (passed on unchanged), and says why; with nothing found, one process, said.
#[test]
fn auto_runs_one_process_per_listed_gpu_and_says_why() {
    let plan = |extra: &[(&str, &str)]| {
        let mut env = vec![
            ("JOB_NAME", "a"),
            ("PADDLE_LAUNCHER_PEERS", "127.0.0.2,127.0.0.3"),
            ("POD_IP", "127.0.0.3"),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
            ("PADDLE_LAUNCHER_NPROC_PER_POD", "auto"),
        ];
        env.extend(extra);
        let out = launcher(&["plan", "--", "python", "train.py"], &env);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (plan, stderr)
    };
    let (four, said) = plan(&[("CUDA_VISIBLE_DEVICES", "4,5,6,7")]);
    assert!(
        said.contains(
            "auto: CUDA_VISIBLE_DEVICES=4,5,6,7 lists 4; one trainer process per device, 4"
        ),
        "{said}"
    );
    let processes = four["processes"].as_array().unwrap();
    let row = |p: &serde_json::Value| {
        (
            p["place"]["trainer_id"].as_u64().unwrap(),
            p["env"]["FLAGS_selected_gpus"]
                .as_str()
                .unwrap()
                .to_string(),
            p["env"].get("CUDA_VISIBLE_DEVICES").is_none(),
        )
    };
    let rows: Vec<_> = processes.iter().map(row).collect();
    assert_eq!(
        rows,
        [
            (4, "0".to_string(), true),
            (5, "1".to_string(), true),
            (6, "2".to_string(), true),
            (7, "3".to_string(), true)
        ]
    );
    let (one, said) = plan(&[]);
    assert_eq!(one["processes"].as_array().unwrap().len(), 1);
    assert!(
        said.contains("no GPU") && said.contains("one trainer process"),
        "{said}"
    );
}

/// clap's "unexpected argument" alone leaves a newcomer guessing: a subcommand after the
/// options is told to come first, a program's words without `--` to go after it; both are
/// usage errors (status 2).
#[test]
fn a_misplaced_subcommand_or_program_gets_a_hint() {
    let out = launcher(&["--job-name", "j", "plan"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "hint: the subcommand comes first, then the options: `paddle-launcher plan [OPTIONS]`"
        ),
        "{stderr}"
    );
    // The log format, which every subcommand takes, may come first: `plan` runs, its lines
    // JSON (here its refusal of the missing job name).
    let out = launcher(&["--log-format", "json", "plan"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let line: serde_json::Value = serde_json::from_str(last).expect(last);
    assert!(
        line["fields"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("JOB_NAME"),
        "{stderr}"
    );
    let out = launcher(&["run", "python", "train.py", "--lr", "0.1"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hint: the training program and its own arguments go after `--`"),
        "{stderr}"
    );
}

/// The processes' log directory by default is best effort (a read-only work directory runs
/// the job without the files, and says so); one given that cannot be made is refused, status
/// 2, naming it.
#[test]
fn a_log_directory_that_cannot_be_made_is_said_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().join("work");
    std::fs::create_dir_all(&workdir).unwrap();
    // A file where the directory would be: no directory can be made there, even by root.
    std::fs::write(workdir.join("log"), "not a directory").unwrap();
    let workdir_s = workdir.display().to_string();
    let env = [
        ("JOB_NAME", "logs"),
        ("PADDLE_LAUNCHER_PEERS", "127.0.0.52"),
        ("POD_IP", "127.0.0.52"),
        ("CONF_PADDLE_NIC", "lo"),
        ("PADDLE_LAUNCHER_PROTOCOL", "collective"),
        ("PADDLE_LAUNCHER_ID_DIR", ""),
        ("PADDLE_LAUNCHER_WORKDIR", workdir_s.as_str()),
    ];
    let out = launcher(&["run", "--", "sh", "-c", "echo trained"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "no per-process log files: cannot create {workdir_s}/log"
        )),
        "{stderr}"
    );
    let given = format!("{workdir_s}/log");
    let mut refused = env.to_vec();
    refused.push(("PADDLE_LAUNCHER_LOG_DIR", given.as_str()));
    let out = launcher(&["run", "--", "true"], &refused);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("invalid PADDLE_LAUNCHER_LOG_DIR (--log-dir): \"{given}\": expected a directory the launcher can create")),
        "{stderr}"
    );
}

/// No protocol given on a pod that shows GPUs: the seed's v1 contract runs as the default,
/// with a warning that names the protocols a Paddle 2 or 3 program wants; none when v1 is
/// asked for, or no GPU is visible.
#[test]
fn the_default_v1_protocol_on_a_gpu_pod_is_warned_of() {
    let plan = |extra: &[(&str, &str)]| {
        let mut env = vec![
            ("JOB_NAME", "p"),
            ("PADDLE_LAUNCHER_PEERS", "127.0.0.2"),
            ("POD_IP", "127.0.0.2"),
            ("CONF_PADDLE_NIC", "lo"),
        ];
        env.extend_from_slice(extra);
        let out = launcher(&["plan"], &env);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        stderr
    };
    let gpus = ("CUDA_VISIBLE_DEVICES", "0,1");
    let warned = plan(&[gpus]);
    assert!(
        warned.contains("no protocol given")
            && warned.contains("PADDLE_LAUNCHER_PROTOCOL=collective"),
        "{warned}"
    );
    assert!(
        warned.contains("CUDA_VISIBLE_DEVICES=0,1 lists 2"),
        "{warned}"
    );
    let asked = plan(&[gpus, ("PADDLE_LAUNCHER_PROTOCOL", "v1")]);
    assert!(!asked.contains("no protocol given"), "{asked}");
    let cpu = plan(&[("CUDA_VISIBLE_DEVICES", "")]);
    assert!(!cpu.contains("no protocol given"), "{cpu}");
}
