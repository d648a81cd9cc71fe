//! Ranks + config -> the processes to start. One module per contract with the framework.

pub mod v1;

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::Config;
use crate::membership::Member;
use crate::plan::{Copy, Plan};

/// Directory layout of the seed: `$JOB_PATH/$JOB_NAME/{output/node_<rank>, <rank>/data, <config>}`.
pub struct JobDir {
    pub root: PathBuf,
}

impl JobDir {
    pub fn new(config: &Config) -> Option<Self> {
        let root = config.job_path.as_ref()?.join(&config.job_name);
        Some(JobDir { root })
    }

    pub fn output(&self) -> PathBuf {
        self.root.join("output")
    }

    pub fn node_logs(&self, rank: usize) -> PathBuf {
        self.output().join(format!("node_{rank}"))
    }
}

/// Every pserver endpoint of the job: each member's IP x each pserver port, in rank order.
pub fn pserver_endpoints(config: &Config, members: &[Member]) -> Vec<SocketAddr> {
    members
        .iter()
        .flat_map(|m| config.ports.ports().map(move |p| SocketAddr::new(m.ip, p)))
        .collect()
}

/// The whole plan for the colocated layout (every pod runs a pserver and a trainer).
pub fn plan(config: &Config, members: &[Member], me: &Member) -> Plan {
    let job_dir = JobDir::new(config);
    let mut copies = Vec::new();
    if let Some(dir) = &job_dir {
        if let Some(sub) = &config.train_config_dir {
            copies.push(Copy {
                from: dir.root.join(sub),
                to: config.workdir.clone(),
            });
        }
        copies.push(Copy {
            from: dir.root.join(me.rank.to_string()).join("data"),
            to: config.workdir.join("data"),
        });
    }
    Plan {
        job: config.job_name.clone(),
        namespace: config.namespace.clone(),
        trainer_id: me.rank,
        num_gradient_servers: config.gradient_num,
        pod_ip: me.ip,
        pods: members.to_vec(),
        pserver_endpoints: pserver_endpoints(config, members),
        copies,
        processes: v1::processes(config, members, me, job_dir.as_ref()),
    }
}
