//! A Kubernetes Indexed Job (batch/v1): the Job controller's labels, and its pod 0 as the
//! coordinator when the Job has a headless Service (subdomain).

use std::collections::BTreeMap;

use super::*;

pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// The coordinator an Indexed Job with a headless Service implies: pod 0 of the job by its DNS
/// name, `<job>-0.<subdomain>` (a pod's hostname is `<job>-<index>`, and with `subdomain` the
/// kubelet writes its FQDN `<job>-<index>.<subdomain>.<ns>.svc...` into /etc/hosts). None
/// without a completion index or a subdomain: there is no stable name to derive.
pub fn coordinator(
    completion_index: Option<&str>,
    hostname: &str,
    etc_hosts: &str,
    job_name: &str,
    port: u16,
) -> Option<(String, u16)> {
    let index: u32 = completion_index?.trim().parse().ok()?;
    // This pod's Job must be the job (JOB_NAME): under JobSet a child Job is only a part.
    let job = hostname
        .strip_suffix(&format!("-{index}"))
        .filter(|job| *job == job_name)?;
    let fqdn = etc_hosts
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .find(|field| field.starts_with(&format!("{hostname}.")))?;
    let subdomain = fqdn.split('.').nth(1).filter(|s| !s.is_empty())?;
    Some((format!("{job}-0.{subdomain}"), port))
}

/// A pod of a plain Job: its name's label gives the job and its pods.
pub fn from_labels(own: &BTreeMap<String, String>) -> Option<Detected> {
    let name = own.get(JOB_NAME)?;
    Some(Detected {
        system: System::Job,
        job_name: name.clone(),
        layout: Layout::Colocated(Task {
            name: name.clone(),
            selector: format!("job-name={name}"),
            pods: None,
        }),
        ranking: Ranking::default(),
        coordinator: None,
        sources: vec![format!("Job {name} (label {JOB_NAME})")],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_indexed_job_with_a_subdomain_implies_its_pod_0_as_coordinator() {
        let hosts = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.1.2.3\ttrain-2.train-pods.team-a.svc.cluster.local\ttrain-2\n";
        let derive = |index, hostname, hosts, job| coordinator(index, hostname, hosts, job, 6171);
        assert_eq!(
            derive(Some("2"), "train-2", hosts, "train"),
            Some(("train-0.train-pods".to_string(), 6171))
        );
        // No index (not an Indexed Job), a hostname of another index, no subdomain: nothing.
        assert_eq!(derive(None, "train-2", hosts, "train"), None);
        assert_eq!(derive(Some("3"), "train-2", hosts, "train"), None);
        let bare = "127.0.0.1\tlocalhost\n10.1.2.3\ttrain-2\n";
        assert_eq!(derive(Some("2"), "train-2", bare, "train"), None);
        // A JobSet's child Job `train-workers-1` of job `train`: its pod 0 is not the job's.
        let child =
            "10.1.2.4\ttrain-workers-1-2.train.team-a.svc.cluster.local\ttrain-workers-1-2\n";
        assert_eq!(derive(Some("2"), "train-workers-1-2", child, "train"), None);
    }
}
