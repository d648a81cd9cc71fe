//! The GPUs a pod sees, and so how many trainer processes `--nproc-per-pod auto` runs: read
//! from what the container is given (the user's CUDA_VISIBLE_DEVICES, the NVIDIA device
//! plugin's NVIDIA_VISIBLE_DEVICES, the device files it mounts), never from a driver, so that
//! a CPU-only image decides the same way. `detect` is the rule; `resolve` reads the pod.

use std::collections::BTreeMap;

use crate::config::{Config, PerPod, NPROC_PER_POD};
use crate::error::ConfigError;
use crate::vocabulary::Protocol;

/// What the container shows of its GPUs.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub cuda_visible_devices: Option<String>,
    pub nvidia_visible_devices: Option<String>,
    /// `/dev/nvidia0`, `/dev/nvidia1`, ...: the names of /dev that are a GPU's device file.
    pub device_files: Vec<String>,
    /// The pod's own values of the variables in `GIVEN`.
    pub given: BTreeMap<String, String>,
    /// When NVIDIA_VISIBLE_DEVICES is a path (the device plugin's volume-mounts mode): the
    /// entries of that directory, one per device given, or why it could not be read.
    pub mounted: Option<Result<u32, String>>,
}

/// Variables of the processes' contract a pod may set itself: the user's backend and thread
/// count win (and one process's GPUs); a size or a per-process value that contradicts the launcher's is refused.
pub const GIVEN: &[&str] = &[
    "PADDLE_DISTRI_BACKEND",
    "OMP_NUM_THREADS",
    "PADDLE_ENV_LIMIT_LEN",
    "PADDLE_TRAINERS_NUM",
    "PADDLE_GLOBAL_SIZE",
    "PADDLE_LOCAL_SIZE",
    "PADDLE_NNODES",
    "PADDLE_LOCAL_RANK",
    "PADDLE_RANK_IN_NODE",
    "FLAGS_selected_gpus",
];

/// The GPUs found, and where from (a log line's words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCount {
    pub devices: u32,
    pub from: String,
}

/// The entries of a comma-separated device list, as Paddle's launcher counts them.
fn entries(list: &str) -> u32 {
    list.split(',').filter(|e| !e.trim().is_empty()).count() as u32
}

/// The devices CUDA makes visible from a CUDA_VISIBLE_DEVICES list: the entries before the
/// first that names no device (CUDA ignores it and what follows, so `-1` is the usual "no GPU"
/// and an empty or blank value hides every GPU); a device is an index or a UUID (`GPU-...`,
/// `MIG-...`).
fn cuda_entries(list: &str) -> (u32, Option<&str>) {
    let is_device = |e: &str| {
        !e.is_empty()
            && (e.bytes().all(|b| b.is_ascii_digit())
                || e.starts_with("GPU-")
                || e.starts_with("MIG-"))
    };
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    let visible = entries.iter().take_while(|e| is_device(e)).count();
    (visible as u32, entries.get(visible).copied())
}

/// A GPU's device file in /dev: `nvidia` and a number (not nvidiactl, nvidia-uvm, ...).
pub fn is_gpu_device_file(name: &str) -> bool {
    name.strip_prefix("nvidia")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// CUDA_VISIBLE_DEVICES when set (what Paddle's launcher reads), as CUDA reads it
/// (`cuda_entries`: `-1`, empty or blank is no GPU), else NVIDIA_VISIBLE_DEVICES: a list
/// (indices or UUIDs) counts its entries, `none` is no GPU, a
/// path (the device plugin's volume-mounts mode) counts the devices mounted there, `all` and
/// `void` (what CDI sets while it injects the device files itself) count the device files;
/// else the device files.
pub fn detect(seen: &Seen) -> DeviceCount {
    let files = seen.device_files.len() as u32;
    let set = |value: &Option<String>| value.as_deref().map(str::trim).map(str::to_string);
    if let Some(raw) = &seen.cuda_visible_devices {
        let (devices, invalid) = cuda_entries(raw);
        let from = match (devices, invalid) {
            (0, _) => format!("CUDA_VISIBLE_DEVICES={raw:?} hides every GPU (CUDA sees no device in it)"),
            (_, Some(entry)) => format!(
                "CUDA_VISIBLE_DEVICES={raw} makes {devices} visible (CUDA ignores {entry:?} and what follows it)"
            ),
            (_, None) => format!("CUDA_VISIBLE_DEVICES={} lists {devices}", raw.trim()),
        };
        return DeviceCount { devices, from };
    }
    if let Some(value) = set(&seen.nvidia_visible_devices) {
        return match value.as_str() {
            "none" | "" => DeviceCount {
                devices: 0,
                from: format!("NVIDIA_VISIBLE_DEVICES={value:?} gives the container no GPU"),
            },
            path if path.starts_with('/') => match &seen.mounted {
                Some(Ok(devices)) => DeviceCount {
                    devices: *devices,
                    from: format!("NVIDIA_VISIBLE_DEVICES={path} mounts {devices}"),
                },
                // Not a silent 0: the device files are what the container was given.
                Some(Err(_)) | None => {
                    let why = match &seen.mounted {
                        Some(Err(why)) => why.as_str(),
                        _ => "not read",
                    };
                    DeviceCount {
                        devices: files,
                        from: format!(
                            "NVIDIA_VISIBLE_DEVICES={path} cannot be read ({why}), and /dev has {files} GPU device files"
                        ),
                    }
                }
            },
            "all" | "void" => DeviceCount {
                devices: files,
                from: format!(
                    "NVIDIA_VISIBLE_DEVICES={value} and /dev has {files} GPU device files (a privileged container sees the node's)"
                ),
            },
            list => {
                let devices = entries(list);
                DeviceCount {
                    devices,
                    from: format!("NVIDIA_VISIBLE_DEVICES={list} lists {devices}"),
                }
            }
        };
    }

    match files {
        0 => DeviceCount {
            devices: 0,
            from: "no GPU: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES are unset and /dev has no nvidiaN file".into(),
        },
        n => DeviceCount {
            devices: n,
            from: format!("/dev has {n} GPU device files"),
        },
    }
}

/// The processes per pod from what was asked and what was found: `auto` runs one per device
/// (one when none), a count runs that many, never more than the devices listed when there are
/// any. The line says what was found and why.
pub fn decide(asked: PerPod, found: &DeviceCount) -> Result<(u32, String), ConfigError> {
    let from = &found.from;
    match asked {
        PerPod::Auto if found.devices == 0 => Ok((
            1,
            format!("{NPROC_PER_POD} auto: {from}; one trainer process"),
        )),
        PerPod::Auto => Ok((
            found.devices,
            format!(
                "{NPROC_PER_POD} auto: {from}; one trainer process per device, {}",
                found.devices
            ),
        )),
        PerPod::Count(n) if found.devices > 0 && n > found.devices => Err(ConfigError::new(
            NPROC_PER_POD,
            &n.to_string(),
            format!(
                "at most one process per GPU: {from}; give {} or fewer, or auto",
                found.devices
            ),
        )),
        PerPod::Count(1) if found.devices > 1 => Ok((
            1,
            format!(
                "1 trainer process per pod; {from}: all given to it (FLAGS_selected_gpus), as Paddle's launcher gives them to one process"
            ),
        )),
        PerPod::Count(n) if found.devices > n => Ok((
            n,
            format!(
                "{n} trainer processes per pod; {from}: one each, as Paddle's launcher gives them; {} left unused",
                found.devices - n
            ),
        )),
        PerPod::Count(n) => Ok((n, format!("{n} trainer processes per pod; {from}"))),
    }
}

/// The seed's v1 contract by default (no --protocol given) on a pod that shows GPUs: most
/// likely a Paddle 2 or 3 program that will be started as `paddle train` with flags.
pub fn v1_on_gpus(protocol: Protocol, defaulted: bool, seen: &Seen) -> Option<String> {
    let found = detect(seen);
    (protocol == Protocol::V1 && defaulted && found.devices > 0).then(|| {
        format!(
            "no protocol given (PADDLE_LAUNCHER_PROTOCOL, --protocol), so v1 runs: PaddlePaddle 0.x/1.x's `paddle train` with flags, one process per pod; and {}: a Paddle 2 or 3 program wants PADDLE_LAUNCHER_PROTOCOL=collective (data parallel, one process per GPU) or fleet (parameter server)",
            found.from
        )
    })
}

/// What this container shows.
pub fn seen() -> Seen {
    let device_files = std::fs::read_dir("/dev")
        .map(|dir| {
            let mut names: Vec<String> = dir
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| is_gpu_device_file(n))
                .collect();
            names.sort();
            names
        })
        .unwrap_or_default();
    let given = GIVEN
        .iter()
        .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
        .collect();
    let nvidia = std::env::var("NVIDIA_VISIBLE_DEVICES").ok();
    let mounted = nvidia
        .as_deref()
        .map(str::trim)
        .filter(|v| v.starts_with('/'))
        .map(|dir| {
            std::fs::read_dir(dir)
                .map(|entries| entries.count() as u32)
                .map_err(|e| e.to_string())
        });
    Seen {
        cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
        nvidia_visible_devices: nvidia,
        device_files,
        given,
        mounted,
    }
}

/// Settles the pod's processes from what it shows (`seen`). One process of a protocol other
/// than collective (its only choice) looks at nothing: the seed's contract, byte for byte; one
/// collective process asked is given every GPU found, as Paddle's launcher gives it.
pub fn resolve(config: &mut Config, seen: &Seen) -> Result<(), ConfigError> {
    let collective = config.topology.protocol == crate::vocabulary::Protocol::Collective;
    let processes = &mut config.topology.processes;
    processes.given = seen.given.clone();
    if processes.asked == PerPod::Count(1) && !collective {
        return Ok(());
    }
    let found = detect(seen);
    let (per_pod, line) = decide(processes.asked, &found)?;
    processes.per_pod = per_pod;
    processes.devices = found.devices;
    processes.found = line;
    config.settle_trainer_ports()?;
    config.one_list_per_pod()?;
    contradictions(config)
}

/// A pod's own value of a variable the launcher gives each of several processes, where it
/// would contradict the launcher's: a size other than the job's, or a per-process value (the
/// pod's environment cannot give each process its own). Identities and addresses
/// (PADDLE_TRAINER_ID, PADDLE_MASTER, the endpoints) are replaced, as with one process.
pub fn contradictions(config: &Config) -> Result<(), ConfigError> {
    let processes = &config.topology.processes;
    if !processes.several() {
        return Ok(());
    }
    let n = processes.per_pod;
    let pods = config.topology.trainers;
    let world = crate::protocol::world_size(config).to_string();
    let sizes = [
        (
            "PADDLE_TRAINERS_NUM",
            world.clone(),
            "the job's trainer processes",
        ),
        ("PADDLE_GLOBAL_SIZE", world, "the job's trainer processes"),
        (
            "PADDLE_LOCAL_SIZE",
            n.to_string(),
            "the pod's trainer processes",
        ),
        ("PADDLE_NNODES", pods.to_string(), "the job's trainer pods"),
    ];
    for (name, ours, what) in sizes {
        if let Some(value) = processes.given.get(name).filter(|v| v.trim() != ours) {
            return Err(ConfigError::new(
                name,
                value,
                format!("unset or {ours}, {what} ({pods} pods x {n} processes, {NPROC_PER_POD})"),
            ));
        }
    }
    for name in [
        "PADDLE_LOCAL_RANK",
        "PADDLE_RANK_IN_NODE",
        "FLAGS_selected_gpus",
    ] {
        if let Some(value) = processes.given.get(name) {
            return Err(ConfigError::new(
                name,
                value,
                format!("unset: the launcher gives each of the pod's {n} processes its own ({NPROC_PER_POD})"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(cuda: Option<&str>, nvidia: Option<&str>, files: &[&str]) -> Seen {
        Seen {
            cuda_visible_devices: cuda.map(str::to_string),
            nvidia_visible_devices: nvidia.map(str::to_string),
            device_files: files.iter().map(|f| f.to_string()).collect(),
            given: BTreeMap::new(),
            mounted: None,
        }
    }

    #[test]
    fn devices_come_from_cuda_then_nvidia_then_the_device_files() {
        let four = ["nvidia0", "nvidia1", "nvidia2", "nvidia3"];
        // CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, the device files: the devices.
        type Case<'a> = (Option<&'a str>, Option<&'a str>, &'a [&'a str], u32);
        let cases: &[Case] = &[
            (Some("4,5,6,7"), None, &[], 4),
            // Listed is what Paddle's launcher counts: the files are not checked.
            (Some("0,1"), Some("all"), &four, 2),
            // As CUDA reads it: blank, empty or `-1` is no GPU, whatever else is set; the
            // entries before the first that names no device.
            (Some(" "), Some("0,1,2"), &four, 0),
            (Some(""), None, &four, 0),
            (Some("-1"), None, &four, 0),
            (Some("0,1,-1,2"), None, &four, 2),
            (Some("GPU-a1, MIG-b2"), None, &[], 2),
            (None, Some("GPU-a1,GPU-b2"), &[], 2),
            (None, Some("all"), &four, 4),
            // CDI: `void` while it injects the device files; `none` is no GPU, whatever /dev
            // shows (a privileged container sees the node's).
            (None, Some("void"), &four, 4),
            (None, Some("none"), &four, 0),
            (None, Some(""), &four, 0),
            // The volume-mounts mode: a path, whose entries are the devices; not read here,
            // so the device files tell.
            (None, Some("/var/run/nvidia-container-devices"), &four, 4),
            (None, None, &four[..2], 2),
            (None, None, &[], 0),
        ];
        // Said as set: a blank value is no unset one.
        let blank = detect(&seen(Some(" "), Some("0,1,2"), &four));
        assert!(blank.from.contains("hides every GPU"), "{}", blank.from);
        let cut = detect(&seen(Some("0,1,-1,2"), None, &[]));
        assert!(cut.from.contains("ignores \"-1\""), "{}", cut.from);
        for (cuda, nvidia, files, devices) in cases {
            let found = detect(&seen(*cuda, *nvidia, files));
            assert_eq!(
                found.devices, *devices,
                "{cuda:?} {nvidia:?} {files:?}: {found:?}"
            );
        }
    }

    /// The volume-mounts mode: one entry per device given in the directory it names.
    #[test]
    fn a_mounted_device_list_counts_its_entries() {
        let mut mounts = seen(
            None,
            Some("/var/run/nvidia-container-devices"),
            &["nvidia0"],
        );
        mounts.mounted = Some(Ok(3));
        assert_eq!(detect(&mounts).devices, 3);
        // A directory that cannot be read is said, and the device files count: never a
        // silent "no GPU" on a GPU pod.
        mounts.mounted = Some(Err("No such file or directory (os error 2)".into()));
        let found = detect(&mounts);
        assert_eq!(found.devices, 1);
        assert!(
            found.from.contains("cannot be read (No such file"),
            "{}",
            found.from
        );
    }

    #[test]
    fn only_numbered_nvidia_files_are_gpus() {
        let names = [
            "nvidia0",
            "nvidia12",
            "nvidiactl",
            "nvidia-uvm",
            "nvidia",
            "nvme0",
        ];
        let gpus: Vec<_> = names
            .into_iter()
            .filter(|n| is_gpu_device_file(n))
            .collect();
        assert_eq!(gpus, ["nvidia0", "nvidia12"]);
    }

    #[test]
    fn auto_runs_one_process_per_device_and_a_count_never_more_than_listed() {
        let four = detect(&seen(Some("4,5,6,7"), None, &[]));
        let none = detect(&seen(None, None, &[]));
        let (n, line) = decide(PerPod::Auto, &four).unwrap();
        assert_eq!(n, 4);
        assert!(line.contains("CUDA_VISIBLE_DEVICES=4,5,6,7"), "{line}");
        let (n, line) = decide(PerPod::Auto, &none).unwrap();
        assert_eq!(n, 1);
        assert!(
            line.contains("no GPU") && line.contains("one trainer process"),
            "{line}"
        );
        let (n, line) = decide(PerPod::Count(2), &four).unwrap();
        assert_eq!(n, 2);
        assert!(line.contains("2 left unused"), "{line}");
        // As many as listed: one each, nothing left unused, nothing refused.
        let (n, line) = decide(PerPod::Count(4), &four).unwrap();
        assert_eq!(n, 4);
        assert!(!line.contains("unused"), "{line}");
        assert_eq!(
            decide(PerPod::Count(8), &none).unwrap().0,
            8,
            "CPU processes"
        );
        let err = decide(PerPod::Count(8), &four).unwrap_err().to_string();
        assert!(
            err.contains("PADDLE_LAUNCHER_NPROC_PER_POD")
                && err.contains("\"8\"")
                && err.contains("lists 4"),
            "{err}"
        );
    }

    /// A collective pod runs one process per visible GPU unless told otherwise, as Paddle's
    /// launcher does; one asked is given them all; without GPUs it runs one; the seed's
    /// protocols look at nothing.
    #[test]
    fn a_collective_pod_runs_one_process_per_gpu_by_default() {
        let resolved = |protocol: &str, nproc: Option<&str>, cuda: Option<&str>| {
            let mut config = crate::protocol::testing::config(|args| {
                args.protocol = Some(protocol.into());
                args.entry = (protocol != "v1").then(|| "python train.py".into());
                args.nproc_per_pod = nproc.map(str::to_string);
            });
            resolve(&mut config, &seen(cuda, None, &[])).unwrap();
            let p = &config.topology.processes;
            (p.per_pod, p.devices, p.found.clone())
        };
        let (n, devices, line) = resolved("collective", None, Some("4,5,6,7"));
        assert_eq!((n, devices), (4, 4), "{line}");
        assert!(line.contains("auto"), "the plan says why: {line}");
        assert_eq!(resolved("collective", None, None).0, 1);
        let (n, devices, line) = resolved("collective", Some("1"), Some("4,5,6,7"));
        assert_eq!((n, devices), (1, 4));
        assert!(line.contains("all given to it"), "{line}");
        assert_eq!(
            resolved("fleet", None, Some("4,5,6,7")),
            (1, 0, String::new())
        );
        assert_eq!(resolved("v1", None, Some("0,1")), (1, 0, String::new()));
    }

    /// The pod's own values: a size that agrees, the backend and threads are the pod's to
    /// set; a size that differs, or any per-process value, is refused naming it. One process
    /// asked looks at nothing.
    #[test]
    fn a_pods_own_values_are_refused_only_where_they_contradict() {
        let resolved = |nproc: &str, given: &[(&str, &str)]| {
            let mut config = crate::protocol::testing::config(|args| {
                args.protocol = Some("collective".into());
                args.entry = Some("python train.py".into());
                args.nproc_per_pod = Some(nproc.into());
            });
            let mut pod = seen(None, None, &[]);
            pod.given = given
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            resolve(&mut config, &pod).map(|()| config.topology.processes.per_pod)
        };
        // 3 pods (the tutorial job) x 2 processes.
        assert_eq!(resolved("2", &[("PADDLE_TRAINERS_NUM", "6")]), Ok(2));
        assert_eq!(
            resolved(
                "2",
                &[("OMP_NUM_THREADS", "3"), ("PADDLE_DISTRI_BACKEND", "nccl")]
            ),
            Ok(2)
        );
        for (name, value) in [
            ("PADDLE_TRAINERS_NUM", "3"),
            ("PADDLE_LOCAL_SIZE", "1"),
            ("PADDLE_NNODES", "6"),
            ("PADDLE_LOCAL_RANK", "0"),
            ("FLAGS_selected_gpus", "0"),
        ] {
            let err = resolved("2", &[(name, value)]).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains(value), "{err}");
        }
        assert_eq!(resolved("1", &[("PADDLE_LOCAL_RANK", "0")]), Ok(1));
    }
}
