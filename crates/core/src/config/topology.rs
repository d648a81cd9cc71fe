//! Who is in the job and who this pod is: names, role, protocol, counts, and how the peers are
//! found — one Job whose pods all run both roles (colocated), or pserver and trainer pods
//! found apart (split).

use std::net::{IpAddr, SocketAddr};

use super::*;
use crate::cli::Opt;

impl Topology {
    pub fn from_args(args: &JobArgs) -> Result<Topology, ConfigError> {
        let job_name = job_name(args)?;
        let namespace = namespace(args)?;
        let (role, protocol) = (role(args)?, protocol(args)?);
        if role == PodRole::Pserver && !protocol.has_pservers() {
            return Err(ConfigError::new(
                ROLE,
                "pserver",
                "trainer or both: the collective protocol has no pservers",
            ));
        }
        let peers = present(&args.peers).map(parse_peers).transpose()?;
        let gradient_num = count(&args.gradient_num, GRADIENT_NUM)?;
        let pod_ip = present(&args.pod_ip)
            .map(|text| {
                text.parse::<IpAddr>().map_err(|_| {
                    ConfigError::new(POD_IP, text, "an IPv4 or IPv6 address, e.g. 10.1.2.3")
                })
            })
            .transpose()?;
        let pod_name = pod_name(args)?;
        let layout = if role == PodRole::Both {
            colocated(args, &job_name, protocol, gradient_num, peers)?
        } else {
            split(args, &job_name, role, protocol, gradient_num)?
        };
        let max_failed_trainers = present(&args.max_failed_trainers)
            .map(|text| parse_int(text, MAX_FAILED, 0, MAX_PODS as u64, "a number of pods"))
            .transpose()?
            .map(|n| n as u32);
        let processes = processes(args, protocol)?;
        Ok(Topology {
            job_name,
            namespace,
            role,
            protocol,
            trainers: layout.trainers,
            pservers: layout.pservers,
            max_failed_trainers,
            watch_peers: parse_bool(&args.watch_peers, WATCH_PEERS, true)?,
            trainers_to_finish: layout.trainers_to_finish,
            pod_ip,
            pod_name,
            discovery: layout.discovery,
            processes,
        })
    }
}

/// The job's name (--job-name): required, and a Kubernetes name.
fn job_name(args: &JobArgs) -> Result<String, ConfigError> {
    let job_name = required(
        &args.job_name,
        JOB_NAME,
        format!(
            "the job's name: set it, or run in a pod of a Job, JobSet, Volcano job, LeaderWorkerSet or PaddleJob, which {} auto reads",
            RUNTIME
        )
        .as_str(),
    )?;
    if !(job_name.len() <= 63 && is_dns_subdomain(&job_name)) {
        return Err(ConfigError::new(
            JOB_NAME,
            &job_name,
            "a Kubernetes job name: 1-63 lowercase letters, digits, '-' or '.', alphanumeric at both ends",
        ));
    }
    Ok(job_name)
}

/// --namespace: a namespace's name, if given.
fn namespace(args: &JobArgs) -> Result<Option<String>, ConfigError> {
    let namespace = match present(&args.namespace) {
        Some(ns) if !is_dns_label(ns) => {
            return Err(ConfigError::new(
                NAMESPACE,
                ns,
                "a namespace name: 1-63 lowercase letters, digits or '-'",
            ))
        }
        ns => ns.map(str::to_string),
    };
    Ok(namespace)
}

/// --role: both (the default), pserver or trainer.
fn role(args: &JobArgs) -> Result<PodRole, ConfigError> {
    let choices = [
        ("both", PodRole::Both),
        ("pserver", PodRole::Pserver),
        ("trainer", PodRole::Trainer),
    ];
    one_of(present(&args.role), ROLE, &choices)
}

/// --protocol: v1 (the default), v2, fleet or collective.
fn protocol(args: &JobArgs) -> Result<Protocol, ConfigError> {
    let choices = [
        ("v1", Protocol::V1),
        ("v2", Protocol::V2),
        ("fleet", Protocol::Fleet),
        ("collective", Protocol::Collective),
    ];
    one_of(present(&args.protocol), PROTOCOL, &choices)
}

/// The choice `given` names, the first when none is given; else "one of a, b, c".
fn one_of<T: Copy>(
    given: Option<&str>,
    option: impl std::fmt::Display,
    choices: &[(&str, T)],
) -> Result<T, ConfigError> {
    let text = given.unwrap_or(choices[0].0);
    match choices.iter().find(|(name, _)| *name == text) {
        Some((_, value)) => Ok(*value),
        None => {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            let expected = format!("one of {}", names.join(", "));
            Err(ConfigError::new(option, text, expected))
        }
    }
}

/// --pod-name: this pod's name, if given.
fn pod_name(args: &JobArgs) -> Result<Option<String>, ConfigError> {
    let pod_name = match present(&args.pod_name) {
        Some(name) if !is_dns_subdomain(name) => {
            return Err(ConfigError::new(
                POD_NAME,
                name,
                "a pod name: lowercase letters, digits, '-' and '.'",
            ))
        }
        name => name.map(str::to_string),
    };
    Ok(pod_name)
}

/// --nproc-per-pod: a count from 1 to `MAX_NPROC_PER_POD`, or `auto`; more than one only where
/// a protocol has several trainers per pod (collective: v1 has its own `--trainer_count`
/// threads, v2 and fleet one trainer per pod). Unset, a collective pod runs `auto`, as
/// Paddle's own launcher starts one process per visible device (one without GPUs).
fn processes(args: &JobArgs, protocol: Protocol) -> Result<Processes, ConfigError> {
    let Some(text) = present(&args.nproc_per_pod) else {
        return Ok(match protocol {
            Protocol::Collective => Processes {
                asked: PerPod::Auto,
                ..Processes::one()
            },
            _ => Processes::one(),
        });
    };
    let asked = match text {
        "auto" => PerPod::Auto,
        text => PerPod::Count(parse_int(
            text,
            NPROC_PER_POD,
            1,
            MAX_NPROC_PER_POD as u64,
            "trainer processes per pod, or auto",
        )? as u32),
    };
    if asked != PerPod::Count(1) && protocol != Protocol::Collective {
        let why = match protocol {
            Protocol::V1 => "v1 trainers run their own --trainer_count threads",
            _ => "its trainers are one per pod",
        };
        return Err(ConfigError::new(
            NPROC_PER_POD,
            text,
            format!(
                "1 with --protocol {protocol}: {why}; several processes per pod need --protocol collective"
            ),
        ));
    }
    Ok(Processes {
        asked,
        per_pod: match asked {
            PerPod::Count(n) => n,
            PerPod::Auto => 1,
        },
        ..Processes::one()
    })
}

fn parse_peers(text: &str) -> Result<Vec<IpAddr>, ConfigError> {
    text.split(',')
        .map(|ip| {
            ip.trim().parse::<IpAddr>().map_err(|_| {
                ConfigError::new(
                    PEERS,
                    text,
                    format!("comma-separated IP addresses, `{}` is not one", ip.trim()),
                )
            })
        })
        .collect()
}

/// What a layout decides: the counts, and how the pods are found.
struct LayoutDecided {
    trainers: u32,
    pservers: u32,
    trainers_to_finish: Option<Group>,
    discovery: Discovery,
}

/// One Job whose every pod runs both roles (the colocated layout), found through the API, DNS
/// or a static list.
fn colocated(
    args: &JobArgs,
    job_name: &str,
    protocol: Protocol,
    gradient_num: Option<u32>,
    peers: Option<Vec<IpAddr>>,
) -> Result<LayoutDecided, ConfigError> {
    let trainers = match (gradient_num, &peers) {
        (Some(n), _) => n,
        (None, Some(ips)) => ips.len() as u32,
        (None, None) => {
            return Err(ConfigError::new(
                GRADIENT_NUM,
                "",
                "the number of pods (= trainers) in the job, e.g. 3",
            ))
        }
    };
    let dns = dns_discovery(args)?;
    if let (Some(_), Some(text)) = (&dns, present(&args.peers)) {
        return Err(ConfigError::new(
            PEERS,
            text,
            "either --peers or --dns, not both",
        ));
    }
    let discovery = match (peers, dns) {
        (None, Some(dns)) => dns,
        (Some(ips), _) => {
            if ips.len() as u32 != trainers {
                return Err(ConfigError::new(
                    PEERS,
                    args.peers.as_deref().unwrap_or_default(),
                    format!(
                        "exactly CONF_PADDLE_GRADIENT_NUM = {trainers} addresses, got {}",
                        ips.len()
                    ),
                ));
            }
            if let Some(text) = present(&args.selector) {
                return Err(ConfigError::new(
                    SELECTOR,
                    text,
                    "no selector together with --peers (static membership uses no API)",
                ));
            }
            Discovery::Static { ips }
        }
        (None, None) => Discovery::Kubernetes {
            groups: vec![Group {
                kind: GroupKind::Job,
                selector: selector(&args.selector, SELECTOR, format!("job-name={job_name}"))?,
                expected: trainers,
                ranking: Ranking::default(),
            }],
        },
    };
    let pservers = if protocol.has_pservers() { trainers } else { 0 };
    Ok(LayoutDecided {
        trainers,
        pservers,
        trainers_to_finish: None,
        discovery,
    })
}

/// `--dns`: the job's pods found by a DNS name (checked as one), at the resolver given.
fn dns_discovery(args: &JobArgs) -> Result<Option<Discovery>, ConfigError> {
    present(&args.dns)
        .map(|name| {
            let bare = name.strip_suffix('.').unwrap_or(name);
            if bare.len() > 253 || !bare.split('.').all(crate::selector::is_dns_label) {
                return Err(ConfigError::new(
                    DNS,
                    name,
                    "a DNS name such as my-job-pods.default.svc.cluster.local",
                ));
            }
            let server = dns_server(args)?;
            Ok(Discovery::Dns {
                name: name.to_string(),
                server,
            })
        })
        .transpose()
}

/// PaddleCloud's split layout: pserver pods and trainer pods, each found by its own selector.
fn split(
    args: &JobArgs,
    job_name: &str,
    role: PodRole,
    protocol: Protocol,
    gradient_num: Option<u32>,
) -> Result<LayoutDecided, ConfigError> {
    if let Some(text) = present(&args.peers) {
        return Err(ConfigError::new(
                PEERS,
                text,
                "no static peers with --role pserver/trainer (the split layout is found through Kubernetes)",
            ));
    }
    if let Some(text) = present(&args.dns) {
        return Err(ConfigError::new(
                DNS,
                text,
                "no DNS membership with --role pserver/trainer (the split layout is found through Kubernetes)",
            ));
    }
    let expected_trainers = "the number of trainer pods (required with --role pserver/trainer)";
    let trainers = count(&args.trainer_count, TRAINER_COUNT)?
        .ok_or_else(|| ConfigError::new(TRAINER_COUNT, "", expected_trainers))?;
    if let Some(n) = gradient_num.filter(|&n| n != trainers) {
        return Err(ConfigError::new(
            GRADIENT_NUM,
            &n.to_string(),
            format!("the number of trainer pods, TRAINERS = {trainers} (or unset)"),
        ));
    }
    let mut trainers_to_finish = None;
    let mut groups = Vec::new();
    let mut pservers = 0;
    if protocol.has_pservers() {
        pservers = count(&args.pserver_count, PSERVER_COUNT)?.ok_or_else(|| {
            ConfigError::new(
                PSERVER_COUNT,
                "",
                "the number of pserver pods (required with --role pserver/trainer)",
            )
        })?;
        groups.push(Group {
            kind: GroupKind::Pservers,
            selector: selector(
                &args.pserver_selector,
                PSERVER_SELECTOR,
                format!("paddle-job-pserver={job_name}"),
            )?,
            expected: pservers,
            ranking: Ranking::default(),
        });
    }
    let trainer_group = Group {
        kind: GroupKind::Trainers,
        selector: selector(
            &args.trainer_selector,
            TRAINER_SELECTOR,
            format!("paddle-job={job_name}"),
        )?,
        expected: trainers,
        ranking: Ranking::default(),
    };
    // A pserver waits only for the pserver pods (its contract names no trainer); it
    // watches the trainer pods after the launch to know when the job is done. With a control
    // channel every pod waits for the whole job: one membership, one coordinator for all.
    if role == PodRole::Pserver {
        trainers_to_finish = Some(trainer_group.clone());
    }
    if role == PodRole::Trainer || channel_asked(args) {
        groups.push(trainer_group);
    }
    Ok(LayoutDecided {
        trainers,
        pservers,
        trainers_to_finish,
        discovery: Discovery::Kubernetes { groups },
    })
}

fn count(value: &Option<String>, variable: Opt) -> Result<Option<u32>, ConfigError> {
    present(value)
        .map(|text| parse_int(text, variable, 1, MAX_PODS as u64, "a number of pods"))
        .transpose()
        .map(|n| n.map(|n| n as u32))
}

fn selector(
    value: &Option<String>,
    variable: Opt,
    default: String,
) -> Result<LabelSelector, ConfigError> {
    let text = present(value).map(str::to_string).unwrap_or(default);
    LabelSelector::parse(&text).map_err(|expected| {
        ConfigError::new(variable, &text, format!("a label selector with {expected}"))
    })
}

/// --dns-server: for --dns, and for a coordinator named by DNS.
pub fn dns_server(args: &JobArgs) -> Result<Option<SocketAddr>, ConfigError> {
    present(&args.dns_server)
        .map(|text| {
            text.parse().map_err(|_| {
                ConfigError::new(
                    DNS_SERVER,
                    text,
                    "ip:port of a DNS server, e.g. 10.96.0.10:53",
                )
            })
        })
        .transpose()
}
