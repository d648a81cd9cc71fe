//! The job's secret: read from its file (or the variable), waited for while the Secret is not
//! yet mounted, and the one-line error that says how to create it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::{sleep, Instant};
use tracing::{info, warn};

use crate::config::{Config, Control, Secret, JOB_SECRET_FILE, MIN_SECRET_LEN};
use crate::error::ConfigError;
use crate::error::Error;
use crate::supervise::Supervisor;

use super::waits::{interruptible, Breaks};

/// The job secret as this pod has it.
pub(super) enum JobSecret {
    /// No channel: neither the secret nor its file is set.
    None,
    Read(Secret),
    /// The file is set but does not exist (yet): a Secret nobody created, or one the kubelet
    /// has not put in place.
    Missing(PathBuf),
}

/// The job secret: given, or read from its file (a mounted Secret). A file that does not exist
/// is never "no channel" for this pod, or the pods started after the Secret would wait for a
/// channel this one never joins: it is waited for (`wait_for_secret_file`).
pub(super) fn job_secret(control: &Control) -> Result<JobSecret, Error> {
    if let Some(secret) = &control.secret {
        return Ok(JobSecret::Read(secret.clone()));
    }
    let Some(path) = &control.secret_file else {
        return Ok(JobSecret::None);
    };
    Ok(match read_secret_file(path)? {
        Some(secret) => JobSecret::Read(secret),
        None => JobSecret::Missing(path.clone()),
    })
}

/// How often a missing secret file is looked for, and how often the wait is said again.
pub(super) const SECRET_LOOK_EVERY: Duration = Duration::from_secs(1);

pub(super) const SECRET_SAY_EVERY: Duration = Duration::from_secs(30);

/// Waits for the job secret's file within --wait-timeout, saying what it waits for: a Secret
/// created after the pods is mounted by the kubelet within a minute or so (the volume is
/// optional, so the pod runs and can say this instead of hanging in ContainerCreating).
pub(super) async fn wait_for_secret_file(
    path: &std::path::Path,
    limit: Option<Duration>,
    create: &str,
    supervisor: &mut Supervisor,
) -> Result<Secret, Error> {
    let began = Instant::now();
    let mut said: Option<Instant> = None;
    loop {
        // A file being written may be caught short: only a short file at the end is an error.
        let read = read_secret_file(path);
        let timed_out = limit.is_some_and(|limit| began.elapsed() >= limit);
        let read = match read {
            Err(Error::Config(_)) if !timed_out => Ok(None),
            read => read,
        };
        if let Some(secret) = read? {
            if said.is_some() {
                info!(
                    "found the job secret at {} after {:.1} s",
                    path.display(),
                    began.elapsed().as_secs_f64()
                );
            }
            return Ok(secret);
        }
        if timed_out {
            let waited = format!(
                " after waiting {} s (--wait-timeout)",
                began.elapsed().as_secs()
            );
            return Err(missing_secret(path, &waited, create).into());
        }
        if said.is_none_or(|at| at.elapsed() >= SECRET_SAY_EVERY) {
            warn!(
                "waiting for the job secret at {} ({} {}): the Secret mounted there does not exist yet, or has no key `secret`; create it with `{create}`",
                path.display(),
                JOB_SECRET_FILE,
                limit.map_or("no time limit".to_string(), |l| format!("at most {} s", l.as_secs()))
            );
            said = Some(Instant::now());
        }
        interruptible(
            Some(&mut *supervisor),
            "waiting for the job secret",
            Breaks::AlsoHup,
            sleep(SECRET_LOOK_EVERY),
        )
        .await?;
    }
}

pub(super) fn missing_secret(path: &std::path::Path, waited: &str, create: &str) -> ConfigError {
    ConfigError::new(
        JOB_SECRET_FILE,
        &path.display().to_string(),
        format!("a file that exists{waited}: create the Secret mounted there (`{create}`), or unset the variable to run without the control channel"),
    )
}

/// The command that creates the Secret `manifest` mounts for this job (`<job>-launcher`), in
/// this pod's namespace when it knows it.
pub(crate) fn create_secret_command(config: &Config) -> String {
    let namespace = config
        .topology
        .namespace
        .as_deref()
        .unwrap_or("<namespace>");
    format!(
        "kubectl create secret generic {}-launcher -n {namespace} --from-literal=secret=$(openssl rand -hex 16)",
        config.topology.job_name
    )
}

/// The secret in `path`; None when the file does not exist.
pub(crate) fn read_secret_file(path: &std::path::Path) -> Result<Option<Secret>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            if text.len() < MIN_SECRET_LEN {
                return Err(ConfigError::new(
                    JOB_SECRET_FILE,
                    &path.display().to_string(),
                    format!("a file holding at least {MIN_SECRET_LEN} characters"),
                )
                .into());
            }
            Ok(Some(Secret(text.into_bytes())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(
            format!("cannot read the job secret {}", path.display()),
            e,
        )),
    }
}
