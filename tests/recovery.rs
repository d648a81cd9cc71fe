//! Recovery in place: group restarts agreed over the control channel. Real launcher processes
//! against the fake Kubernetes API, each simulated pod on a loopback address of its own, and the
//! test playing the kubelet and the Job controller: a pod whose launcher is killed turns Failed,
//! and a replacement pod (new name, new IP) is created and started.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::dnsmasq::Dnsmasq;
use support::fake_api::{job_object, job_pod};
use support::{
    assert_contains, free_ports, loopback_ip, paddle_python, Cluster, Launcher, DISCOVERS,
};

const LIMIT: Duration = Duration::from_secs(120);
/// A free preemption's status (`exit::PREEMPTED`), which the generated Job ignores: its
/// launcher was stopped while the job goes on without it for nothing.
const PREEMPTED: i32 = 83;
const SECRET: &str = "recovery-test-secret-0123456789abcdef";

/// The training program: prints what it was told, then works: for a long time in epoch 0
/// (until the test breaks something), briefly after a restart. `FAIL_ONCE_RANK` fails once.
const PROGRAM: &str = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT endpoints=$PADDLE_TRAINER_ENDPOINTS"
if [ "$PADDLE_LAUNCHER_RESTART_COUNT" = 0 ]; then
  if [ "$PADDLE_TRAINER_ID" = "$FAIL_ONCE_RANK" ]; then sleep 1; exit 3; fi
  exec sleep 120
fi
exec sleep 2"#;

/// A job of Kubernetes pods whose launchers the test starts, kills and replaces.
struct Job {
    cluster: Cluster,
    name: &'static str,
    pods: usize,
    control_port: u16,
    max_restarts: u32,
    fail_once_rank: Option<usize>,
    /// The container's command after `run --`.
    program: Vec<String>,
    extra_env: Vec<(&'static str, String)>,
    trainer_port: u16,
    /// The launchers name pod 0 their coordinator: only it uses the API.
    named_coordinator: bool,
    /// PADDLE_LAUNCHER_COORDINATOR as given (a DNS name), instead of pod 0's address.
    coordinator: Option<String>,
    /// The address the next pod gets, when the test needed it before the pod existed.
    reserved_ip: Option<String>,
    /// Every pod ever created: (pod name, IP, its launcher while it runs).
    created: Vec<(String, String, Option<Launcher>)>,
    /// The next pod created is given no job secret (a hand-written manifest's optional
    /// `secretKeyRef`, a second pod template).
    next_without_secret: bool,
}

impl Job {
    fn new(name: &'static str, pods: usize, max_restarts: u32) -> Job {
        Job {
            cluster: Cluster::new(),
            name,
            pods,
            control_port: free_ports(1),
            max_restarts,
            fail_once_rank: None,
            program: ["sh", "-c", PROGRAM].map(String::from).to_vec(),
            extra_env: Vec::new(),
            trainer_port: free_ports(1),
            named_coordinator: false,
            coordinator: None,
            reserved_ip: None,
            created: Vec::new(),
            next_without_secret: false,
        }
    }

    fn termination_log(&self, pod: &str) -> PathBuf {
        self.cluster.dir.path().join(format!("{pod}.termination"))
    }

    /// The Job controller creates a pod, the kubelet starts it: Running with a new IP, and the
    /// container's entrypoint (the launcher) starts.
    fn create_pod(&mut self) -> usize {
        let index = self.create_pending_pod();
        self.run_pod(index);
        index
    }

    /// The Job controller creates a pod that the scheduler cannot place yet: Pending.
    fn create_pending_pod(&mut self) -> usize {
        let index = self.created.len();
        let pod = format!("{}-{index}", self.name);
        let ip = self.reserved_ip.take().unwrap_or_else(loopback_ip);
        let api = &self.cluster.api;
        api.put_pod(job_pod(self.name, &pod));
        api.set_status("default", &pod, "Pending", None);
        self.created.push((pod, ip, None));
        index
    }

    /// The pod is placed and started: Running with its IP, and its launcher starts.
    fn run_pod(&mut self, index: usize) {
        let (pod, ip) = (self.created[index].0.clone(), self.created[index].1.clone());
        self.cluster
            .api
            .set_status("default", &pod, "Running", Some(&ip));
        let log = self.termination_log(&pod);
        std::fs::write(&log, "").unwrap();
        let mut env = self.cluster.env(self.name, self.pods);
        env.extend([
            ("POD_IP", ip.clone()),
            ("POD_NAME", pod.clone()),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
            (
                "PADDLE_LAUNCHER_TRAINER_PORT",
                self.trainer_port.to_string(),
            ),
            ("PADDLE_LAUNCHER_JOB_SECRET", SECRET.to_string()),
            (
                "PADDLE_LAUNCHER_MAX_RESTARTS",
                self.max_restarts.to_string(),
            ),
            (
                "PADDLE_LAUNCHER_CONTROL_PORT",
                self.control_port.to_string(),
            ),
            ("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "2".to_string()),
            ("PADDLE_LAUNCHER_GRACE_PERIOD", "3".to_string()),
            ("PADDLE_LAUNCHER_TERMINATION_LOG", log.display().to_string()),
            // The simulated pods share a directory: a progress file each.
            (
                "PADDLE_LAUNCHER_PROGRESS_FILE",
                self.cluster
                    .dir
                    .path()
                    .join(format!("progress-{pod}"))
                    .display()
                    .to_string(),
            ),
            (
                "FAIL_ONCE_RANK",
                self.fail_once_rank
                    .map_or("none".to_string(), |r| r.to_string()),
            ),
        ]);
        env.extend(self.extra_env.iter().cloned());
        if std::mem::take(&mut self.next_without_secret) {
            env.retain(|(name, _)| *name != "PADDLE_LAUNCHER_JOB_SECRET");
        }
        if let Some(coordinator) = &self.coordinator {
            env.push(("PADDLE_LAUNCHER_COORDINATOR", coordinator.clone()));
        } else if self.named_coordinator {
            let first = self.created.first().map_or(&ip, |pod| &pod.1);
            env.push((
                "PADDLE_LAUNCHER_COORDINATOR",
                format!("{first}:{}", self.control_port),
            ));
        }
        let mut args = vec!["run", "--"];
        args.extend(self.program.iter().map(String::as_str));
        let launcher = Launcher::start(self.cluster.dir.path(), &pod, &args, &env);
        self.created[index].2 = Some(launcher);
    }

    fn create_pods(&mut self, pods: usize) {
        for _ in 0..pods {
            self.create_pod();
        }
    }

    /// Creates `pods` pods and waits until each one's trainer runs in epoch 0.
    fn start_training(&mut self, pods: usize) {
        let first = self.created.len();
        self.create_pods(pods);
        for i in first..first + pods {
            self.launcher(i).wait_for_output("count=0 ", LIMIT);
        }
    }

    /// The launchers name their coordinator by `name`, resolved by a DNS server of the test's
    /// own (returned, to set its records).
    fn coordinator_named(&mut self, name: &str) -> Dnsmasq {
        let dns = Dnsmasq::start(self.cluster.dir.path());
        self.coordinator = Some(format!("{name}:{}", self.control_port));
        self.extra_env.push((
            "PADDLE_LAUNCHER_DNS_SERVER",
            format!("127.0.0.1:{}", dns.port),
        ));
        dns
    }

    /// The address the next pod will get.
    fn reserve_ip(&mut self) -> String {
        self.reserved_ip.get_or_insert_with(loopback_ip).clone()
    }

    fn stderr(&self, index: usize) -> String {
        let pod = &self.created[index].0;
        std::fs::read_to_string(self.cluster.dir.path().join(format!("{pod}.stderr"))).unwrap()
    }

    fn launcher(&self, index: usize) -> &Launcher {
        self.created[index]
            .2
            .as_ref()
            .expect("that pod's launcher is gone")
    }

    /// The node dies under a pod: its launcher is SIGKILLed (its children follow it), and the
    /// API reports the pod Failed.
    fn kill_pod(&mut self, index: usize) {
        self.end_pod(index, "Failed");
    }

    /// The pod's launcher ends without a word to the others (SIGKILL) and the API reports the
    /// pod in `phase`. Its name.
    fn end_pod(&mut self, index: usize, phase: &str) -> String {
        let launcher = self.created[index].2.take().unwrap();
        launcher.signal(Signal::SIGKILL);
        launcher.wait(LIMIT);
        let name = self.created[index].0.clone();
        self.cluster.api.set_status("default", &name, phase, None);
        name
    }

    /// Waits for every running launcher; each must exit 0. Their outputs.
    fn all_finish(&mut self) -> Vec<String> {
        let mut outputs = Vec::new();
        for (pod, _, launcher) in &mut self.created {
            let Some(launcher) = launcher.take() else {
                continue;
            };
            let done = launcher.wait(LIMIT);
            assert_eq!(done.code(), 0, "{pod}:\n{}\n{}", done.stdout, done.stderr);
            outputs.push(done.stdout);
        }
        outputs
    }

    /// `all_finish`, each trainer having run last in `epoch`.
    fn all_finish_in_epoch(&mut self, epoch: u32) -> Vec<String> {
        let outputs = self.all_finish();
        for out in &outputs {
            assert_contains(out, &format!("count={epoch} "));
        }
        outputs
    }

    fn ips(&self, pods: &[usize]) -> Vec<String> {
        pods.iter().map(|&i| self.created[i].1.clone()).collect()
    }
}

/// The lines a trainer printed in `epoch`, by rank: "rank=R count=E endpoints=...".
fn epoch_lines(outputs: &[String], epoch: u32) -> Vec<String> {
    let mut lines: Vec<String> = outputs
        .iter()
        .flat_map(|out| out.lines())
        .filter(|l| l.contains(&format!(" count={epoch} ")))
        .map(|l| l.split_once("] ").map_or(l, |(_, rest)| rest).to_string())
        .collect();
    lines.sort();
    lines
}

/// The endpoints list every trainer of a membership is told, in rank (IP) order.
fn endpoints(job: &Job, pods: &[usize]) -> Vec<String> {
    let mut ips = job.ips(pods);
    ips.sort_by_key(|ip| ip.parse::<std::net::Ipv4Addr>().unwrap());
    ips
}

fn assert_restarted_with(outputs: &[String], epoch: u32, members: &[String]) {
    let lines = epoch_lines(outputs, epoch);
    assert_eq!(lines.len(), members.len(), "{lines:?}");
    for (rank, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("rank={rank} count={epoch} endpoints=")),
            "{line}"
        );
        let told: Vec<&str> = line.rsplit_once('=').unwrap().1.split(',').collect();
        let ips: Vec<&str> = told.iter().map(|e| e.rsplit_once(':').unwrap().0).collect();
        assert_eq!(ips, members, "{line}");
    }
}

/// A trainer that fails once: every pod's trainer is restarted with count 1, no launcher exits
/// until the job is done, and every launcher then exits 0.
#[test]
fn a_trainer_failing_once_restarts_every_trainer_and_the_job_succeeds() {
    let mut job = Job::new("once", 3, 2);
    job.fail_once_rank = Some(1);
    job.create_pods(3);
    let outputs = job.all_finish_in_epoch(1);
    let everyone = endpoints(&job, &[0, 1, 2]);
    assert_restarted_with(&outputs, 1, &everyone);
    assert_eq!(
        epoch_lines(&outputs, 0).len(),
        3,
        "every trainer started in epoch 0"
    );
    // The failure was named on every pod.
    for out in &job.created {
        let stderr =
            std::fs::read_to_string(job.cluster.dir.path().join(format!("{}.stderr", out.0)))
                .unwrap();
        assert_contains(
            &stderr,
            "trainer exited with status 3: restarting the job (restart 1 of 2)",
        );
    }
}

/// Two trainer processes per pod: one process failing once stops its sibling and restarts
/// all four in place, each told its pod-major id and every process's endpoint, its output
/// marked with its trainer id; every pod names the failing process by trainer id and local
/// rank.
#[test]
fn a_process_failing_once_restarts_every_process_of_every_pod() {
    let mut job = Job::new("procs", 2, 1);
    job.fail_once_rank = Some(3);
    job.extra_env
        .push(("PADDLE_LAUNCHER_NPROC_PER_POD", "2".to_string()));
    job.create_pods(2);
    let outputs = job.all_finish_in_epoch(1);
    assert_eq!(epoch_lines(&outputs, 0).len(), 4, "{outputs:?}");
    let lines = epoch_lines(&outputs, 1);
    let ranks: Vec<&str> = lines.iter().map(|l| &l[..6]).collect();
    assert_eq!(ranks, ["rank=0", "rank=1", "rank=2", "rank=3"], "{lines:?}");
    let ips = endpoints(&job, &[0, 1]);
    let told = lines[0].rsplit_once('=').unwrap().1;
    let hosts: Vec<&str> = told
        .split(',')
        .map(|e| e.rsplit_once(':').unwrap().0)
        .collect();
    assert_eq!(hosts, [&ips[0], &ips[0], &ips[1], &ips[1]], "{told}");
    let all = outputs.concat();
    assert_contains(&all, "[trainer-3] rank=3 count=1 ");
    for (pod, _, _) in &job.created {
        let stderr =
            std::fs::read_to_string(job.cluster.dir.path().join(format!("{pod}.stderr"))).unwrap();
        assert_contains(
            &stderr,
            "trainer id 3 of 4 (local rank 1) exited with status 3: restarting the job (restart 1 of 1)",
        );
    }
}

/// One pod's workspace cannot be prepared (its work directory cannot be made): that pod ends
/// at once, as a pod that died, and the others restart in place around its replacement within
/// the budget, instead of taking a local fault for the job's end.
#[test]
fn a_pods_workspace_failure_is_a_loss_the_job_restarts_from() {
    let mut job = Job::new("wsfail", 2, 2);
    job.create_pod();
    job.extra_env
        .push(("PADDLE_LAUNCHER_WORKDIR", "/dev/null/w".to_string()));
    job.create_pod();
    let failed = job.created[1].2.take().unwrap().wait(LIMIT);
    assert_ne!(failed.code(), 0, "{}", failed.stderr);
    assert_contains(
        &failed.stderr,
        "cannot create the work directory /dev/null/w",
    );
    job.launcher(0)
        .wait_for_output("restarting the job (restart 1 of 2)", LIMIT);
}

/// A pod killed whole (launcher and children) and replaced by a pod with a new name and a new
/// IP: the survivors' launchers never exit; every trainer restarts with the new membership, the
/// replacement's in the survivors' epoch.
#[test]
fn a_pod_killed_and_replaced_rejoins_the_survivors_in_their_epoch() {
    let mut job = Job::new("killed", 3, 1);
    job.start_training(3);
    job.kill_pod(2);
    for i in 0..2 {
        job.launcher(i)
            .wait_for_output("restarting the job (restart 1 of 1)", LIMIT);
    }
    let replacement = job.create_pod();
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with(&outputs, 1, &endpoints(&job, &[0, 1, replacement]));
}

/// The coordinator's pod (rank 0) killed and replaced: the survivor that ranks first now
/// coordinates, learns the epoch from the others, and they restart together.
#[test]
fn the_coordinators_pod_killed_and_replaced() {
    let mut job = Job::new("coord", 3, 1);
    job.start_training(3);
    job.kill_pod(0);
    let replacement = job.create_pod();
    job.launcher(1)
        .wait_for_output("control channel: coordinating 3 launchers", LIMIT);
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with(&outputs, 1, &endpoints(&job, &[1, 2, replacement]));
}

/// A pod frozen with SIGSTOP while the API still says Running: the others stop their trainers
/// within the heartbeat timeout, wait, and restart once the pod is replaced.
#[test]
fn a_frozen_pod_stops_the_others_trainers_and_its_replacement_restarts_them() {
    let mut job = Job::new("frozen", 3, 1);
    job.start_training(3);
    job.launcher(1).signal(Signal::SIGSTOP);
    for i in [0, 2] {
        job.launcher(i)
            .wait_for_output("restarting the job (restart 1 of 1)", LIMIT);
    }
    assert_contains(
        &job.launcher(0).stderr_so_far(),
        "sent no heartbeat for 2 s (frozen, or its node is gone)",
    );
    // Stopped, not restarted: the frozen pod is still a member.
    for i in [0, 2] {
        let err = job.launcher(i).stderr_so_far();
        assert!(err.contains("was killed by SIGTERM"), "{err}");
        assert!(!err.contains("restart epoch 1"), "{err}");
    }
    job.kill_pod(1);
    let replacement = job.create_pod();
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with(&outputs, 1, &endpoints(&job, &[0, 2, replacement]));
}

/// The budget used up: every launcher ends non-zero within seconds, and every pod's termination
/// log names the first failure (pod, rank, what happened).
#[test]
fn an_exhausted_budget_ends_every_pod_naming_the_first_failure() {
    let mut job = Job::new("spent", 3, 1);
    job.start_training(3);
    job.kill_pod(2);
    let replacement = job.create_pod();
    job.launcher(replacement).wait_for_output("count=1 ", LIMIT);
    job.kill_pod(1);
    for i in [0, replacement] {
        let launcher = job.created[i].2.take().unwrap();
        let pod = job.created[i].0.clone();
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), 78, "{pod}: {}", done.stderr);
        let reason = std::fs::read_to_string(job.termination_log(&pod)).unwrap();
        assert_contains(&reason, "spent-1");
        assert_contains(
            &reason,
            "no restart left (all 1 of PADDLE_LAUNCHER_MAX_RESTARTS used)",
        );
    }
}

/// One root cause for the whole job: a trainer failing with 3 on pod 2 ends the job (no restart
/// allowed), and every pod's termination message names pod 2 and the status, not "peer lost".
#[test]
fn every_pod_names_the_failed_trainer_in_its_termination_message() {
    let mut job = Job::new("cause", 3, 0);
    job.fail_once_rank = Some(2);
    job.create_pods(3);
    for (i, code) in [(0, 78), (1, 78), (2, 3)] {
        let (pod, _, launcher) = &mut job.created[i];
        let done = launcher.take().unwrap().wait(LIMIT);
        assert_eq!(done.code(), code, "{pod}: {}", done.stderr);
        let pod = pod.clone();
        let reason = std::fs::read_to_string(job.termination_log(&pod)).unwrap();
        assert!(
            reason.starts_with("job stopped: pod cause-2 (trainer id 2 of 3) at 20"),
            "{pod}: {reason}"
        );
        assert_contains(&reason, ": trainer exited with status 3");
        if i != 2 {
            assert_contains(&reason, &format!("stopped trainer-{i}"));
        }
    }
}

/// A collective job of Python trainers that hangs in its first run: rank 1 never reaches step
/// 5's all-reduce, the others write step 5 and block in it. Steps are written to the progress
/// file as each begins, as the collective example does. After a restart it trains 3 steps.
/// The blocked ranks' file is touched meanwhile (as by a watchdog thread of their own), so
/// that only rank 1's launcher finds the hang: the others learn it from the coordinator.
const HANGING_JOB: &str = r#"
import os, threading, time
rank = int(os.environ["PADDLE_TRAINER_ID"])
restart = int(os.environ["PADDLE_LAUNCHER_RESTART_COUNT"])
progress = os.environ["PADDLE_LAUNCHER_PROGRESS_FILE"]
print(f"rank={rank} count={restart}", flush=True)
def never_reaches_the_all_reduce():
    threading.Event().wait()
def touching(step):
    while True:
        time.sleep(0.3)
        with open(progress, "w") as f:
            f.write(f"{step}\n")
def blocked_in_the_all_reduce():
    threading.Thread(target=touching, args=(5,), daemon=True).start()
    threading.Event().wait()
for step in range(1, 11 if restart == 0 else 4):
    if restart == 0 and rank == 1 and step == 5:
        never_reaches_the_all_reduce()
    with open(progress, "w") as f:
        f.write(f"{step}\n")
    if restart == 0 and step == 5:
        blocked_in_the_all_reduce()
    time.sleep(0.2)
print(f"rank={rank} done", flush=True)
"#;

fn hanging_job(name: &'static str, max_restarts: u32) -> Job {
    let mut job = Job::new(name, 3, max_restarts);
    job.program = ["python3", "-c", HANGING_JOB].map(String::from).to_vec();
    job.extra_env.extend([
        ("PADDLE_LAUNCHER_HANG_TIMEOUT", "2".to_string()),
        ("PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "30".to_string()),
        ("NODE_NAME", "n7".to_string()),
    ]);
    job.create_pods(3);
    job
}

/// The job hangs and no restart is allowed: rank 1's launcher finds it and tells the
/// coordinator at once, which names the rank furthest behind (rank 1, which never began step
/// 5) and tells every launcher; each asks its trainer for its stacks (the blocked ranks' show
/// the all-reduce they wait in), and every pod ends with the hang's status and a termination
/// message naming the suspect's pod and node.
#[test]
fn a_job_wide_hang_names_the_rank_behind_on_every_pod() {
    let mut job = hanging_job("jh", 0);
    for i in 0..3 {
        let (pod, _, launcher) = &mut job.created[i];
        let done = launcher.take().unwrap().wait(LIMIT);
        assert_eq!(done.code(), 80, "{pod}:\n{}\n{}", done.stdout, done.stderr);
        let pod = pod.clone();
        let reason = std::fs::read_to_string(job.termination_log(&pod)).unwrap();
        assert!(
            reason.starts_with("job stopped: the job hangs: suspect pod jh-1 on node n7 (trainer id 1 of 3): furthest behind, at step 4 (2 ranks at later steps)"),
            "{pod}: {reason}"
        );
        let frame = match i {
            1 => "in never_reaches_the_all_reduce",
            _ => "in blocked_in_the_all_reduce",
        };
        assert_contains(&format!("{}{}", done.stdout, done.stderr), frame);
        if i != 1 {
            // Told by the coordinator, not found by itself.
            let own = format!("trainer-{i} made no progress");
            assert!(!done.stderr.contains(&own), "{pod}: {}", done.stderr);
            assert_contains(&done.stderr, "asking trainer-");
        }
    }
    // `kubectl describe job` shows the hang, its suspect and where the stacks are, then the end.
    let events = job.cluster.api.events();
    let said: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["reason"].as_str().unwrap(),
                e["message"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        said[said.len() - 2].starts_with("Hang the job hangs: suspect pod jh-1 on node n7"),
        "{said:#?}"
    );
    assert_contains(
        &said[said.len() - 2],
        "every trainer's Python stacks are in its pod's log",
    );
    assert!(
        said[said.len() - 1].starts_with("Failed job stopped: the job hangs: suspect pod jh-1"),
        "{said:#?}"
    );
}

/// The same hang with a restart allowed: one verdict, one restart in place (count 1), and the
/// job completes.
#[test]
fn a_job_wide_hang_restarts_the_job_once() {
    let mut job = hanging_job("jr", 1);
    for (pod, _, launcher) in &mut job.created {
        let done = launcher.take().unwrap().wait(LIMIT);
        assert_eq!(done.code(), 0, "{pod}:\n{}\n{}", done.stdout, done.stderr);
        assert_contains(&done.stdout, "count=1");
        assert_contains(&done.stdout, "done");
        assert_contains(&done.stderr, "the job hangs: suspect pod jr-1 on node n7");
        assert_contains(&done.stderr, "restarting the job (restart 1 of 1)");
    }
}

/// The job's story in Kubernetes Events, as `kubectl get events` shows it: started, the
/// restart with its cause (the failed pod, its node, its status), started again, succeeded; on
/// the pods' Job, posted by the coordinator alone (its followers make no API request at all).
#[test]
fn the_coordinator_tells_the_jobs_story_in_kubernetes_events() {
    let mut job = Job::new("ev", 3, 1);
    job.named_coordinator = true;
    job.fail_once_rank = Some(2);
    job.extra_env.push(("NODE_NAME", "n7".to_string()));
    job.create_pods(3);
    for (pod, _, launcher) in &mut job.created {
        let done = launcher.take().unwrap().wait(LIMIT);
        assert_eq!(done.code(), 0, "{pod}: {}", done.stderr);
    }
    let events = job.cluster.api.events();
    let reasons: Vec<&str> = events
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        ["Started", "Restarting", "Started", "Succeeded"],
        "{events:#?}"
    );
    for event in &events {
        let about = &event["involvedObject"];
        assert_eq!(
            (&about["kind"], &about["name"], &about["uid"]),
            (&"Job".into(), &"ev".into(), &"c-1".into())
        );
        assert_eq!(event["reportingInstance"], "ev-0");
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, listed, stderr) = support::kubectl(
        &job.cluster.api,
        dir.path(),
        &[
            "get",
            "events",
            "-n",
            "default",
            "-o",
            "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(
        lines[0],
        "Normal Started: all 3 pods of the job found: training started"
    );
    assert!(
        lines[1].starts_with(
            "Warning Restarting: restart 1 of 1: pod ev-2 on node n7 (trainer id 2 of 3) at 20"
        ),
        "{listed}"
    );
    assert!(
        lines[1].ends_with("Z: trainer exited with status 3"),
        "{listed}"
    );
    assert_eq!(
        lines[2],
        "Normal Started: all 3 pods of the job found: training started (after 1 restart)"
    );
    assert!(lines[3].starts_with("Normal Succeeded: "), "{listed}");
    assert_only_coordinators_used_the_api(&job, &[0]);
}

/// A Role without `create` on events: said once, and the job goes on to its end.
#[test]
fn forbidden_events_are_said_once_and_the_job_goes_on() {
    let mut job = Job::new("noev", 2, 1);
    job.cluster.api.forbid_events();
    job.fail_once_rank = Some(1);
    job.create_pods(2);
    let mut warnings = 0;
    for (pod, _, launcher) in &mut job.created {
        let done = launcher.take().unwrap().wait(LIMIT);
        assert_eq!(done.code(), 0, "{pod}: {}", done.stderr);
        warnings += done
            .stderr
            .matches("Kubernetes events: the API refused to create them")
            .count();
    }
    assert_eq!(warnings, 1);
    assert!(job.cluster.api.events().is_empty());
}

/// A trainer that records the checkpoint signal (a handler, as a shell `trap`): it trains for
/// long in epoch 0 (a `sleep` of its own, which has no handler and must not be sent the
/// signal), briefly after a restart.
const CHECKPOINTING: &str = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT endpoints=$PADDLE_TRAINER_ENDPOINTS"
trap 'echo "checkpoint signal rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT at $(date +%s.%N)"' USR1
if [ "$PADDLE_LAUNCHER_RESTART_COUNT" = 0 ]; then
  end=$(( $(date +%s) + 120 ))
  while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done
fi
sleep 2"#;

impl Job {
    /// The pod is deleted with a grace period (preemption, a drain, `kubectl delete`): the API
    /// marks it terminating and the kubelet sends its launcher SIGTERM. The launcher's end,
    /// which the pod object outlives until then; its name.
    fn preempt_pod(&mut self, index: usize) -> support::Finished {
        let name = self.created[index].0.clone();
        let api = &self.cluster.api;
        api.mark_deleting("default", &name, 30);
        let launcher = self.created[index].2.take().unwrap();
        launcher.signal(Signal::SIGTERM);
        let done = launcher.wait(LIMIT);
        api.set_terminated("default", &name, done.code(), "Error", "preempted");
        api.delete_pod("default", &name);
        done
    }
}

/// Preemption without lost work, with no restart budget at all (--max-restarts 0): SIGTERM to
/// one pod's launcher while training (`preempted`: 0 is the coordinator's pod) asks every
/// trainer of the job for a checkpoint (SIGUSR1, only to the processes that handle it) before
/// any stops; the preempted launcher gives its trainer the checkpoint window, then exits 83 (a free preemption: the Job counts no failure);
/// the survivors keep their pods (the API's "terminating" is not their loss: the channel
/// tells), wait for the replacement, and every trainer restarts with count 1. When each
/// trainer got the signal, after the SIGTERM, is printed (measured, not asserted).
fn a_preempted_pod_checkpoints_the_whole_job_and_restarts_it_in_place(
    name: &'static str,
    preempted: usize,
) {
    let mut job = Job::new(name, 3, 0);
    job.program = ["sh", "-c", CHECKPOINTING].map(String::from).to_vec();
    job.extra_env
        .push(("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "3".to_string()));
    job.start_training(3);
    let sent = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let survivors: Vec<usize> = (0..3).filter(|&i| i != preempted).collect();
    let ended = job.preempt_pod(preempted);
    assert_eq!(
        ended.code(),
        PREEMPTED,
        "{}\n{}",
        ended.stdout,
        ended.stderr
    );
    // Its trainer was asked before it was stopped, and the job was told both.
    assert_contains(&ended.stdout, "checkpoint signal rank=");
    assert_contains(&ended.stderr, "asking trainer-");
    assert_contains(&ended.stderr, "its checkpoint window (3 s) is over");
    let mut latencies = vec![signal_after(&ended.stdout, sent)];
    for &i in &survivors {
        job.launcher(i)
            .wait_for_output("restarting the job (restart 1 after a preemption, which spends none of the 0 restarts)", LIMIT);
        let out = job.launcher(i).stdout_so_far();
        assert_contains(&out, "checkpoint signal rank=");
        latencies.push(signal_after(&out, sent));
        let err = job.stderr(i);
        assert!(!err.contains("is terminating"), "{err}");
        assert_contains(&err, "preempted (SIGTERM while training)");
    }
    println!("SIGTERM to the checkpoint signal, by trainer: {latencies:.3?} s");
    let replacement = job.create_pod();
    let outputs = job.all_finish_in_epoch(1);
    let mut members = survivors.clone();
    members.push(replacement);
    assert_restarted_with(&outputs, 1, &endpoints(&job, &members));
    // Only the trainers of epoch 0 were asked: nothing was preempted in epoch 1.
    for out in &outputs {
        assert!(!out.contains("checkpoint signal rank=0 count=1"), "{out}");
    }
}

/// How long after `sent` (seconds since the epoch) the trainer whose output this is printed
/// that it got the checkpoint signal.
fn signal_after(output: &str, sent: f64) -> f64 {
    let line = output
        .lines()
        .find(|l| l.contains("checkpoint signal rank="))
        .unwrap();
    let at: f64 = line.rsplit_once(" at ").unwrap().1.trim().parse().unwrap();
    at - sent
}

#[test]
fn a_preempted_follower_checkpoints_the_whole_job_and_restarts_it_in_place() {
    a_preempted_pod_checkpoints_the_whole_job_and_restarts_it_in_place("preempt", 2);
}

#[test]
fn a_preempted_coordinator_checkpoints_the_whole_job_and_restarts_it_in_place() {
    a_preempted_pod_checkpoints_the_whole_job_and_restarts_it_in_place("preemptc", 0);
}

/// The fleet program of the split layout's tests: a pserver listens on its endpoint until it is
/// stopped; a trainer records the checkpoint signal and trains `TRAIN_S` seconds in epoch 0,
/// then exits 0, unless trainer 1 is to fail (`FAIL_EXIT`): then it exits with that and the
/// others train on (long); after a restart the trainers train briefly.
const SPLIT_PROGRAM: &str = r#"echo "role=$TRAINING_ROLE id=${PADDLE_TRAINER_ID:--} count=$PADDLE_LAUNCHER_RESTART_COUNT"
if [ "$TRAINING_ROLE" = PSERVER ]; then
  life=300
  if [ "$POD_IP" = "$PS_EXITS_IP" ] && [ "$PADDLE_LAUNCHER_RESTART_COUNT" = 0 ]; then life=2; fi
  export life
  exec python3 -c 'import os, socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["POD_IP"], int(os.environ["PADDLE_PORT"])))
s.listen()
time.sleep(int(os.environ["life"]))'
fi
trap 'echo "checkpoint signal id=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT now"' USR1
if [ "$PADDLE_LAUNCHER_RESTART_COUNT" = 0 ]; then
  if [ "$FAIL_EXIT" != 0 ] && [ "$PADDLE_TRAINER_ID" != 1 ]; then TRAIN_S=120; fi
  end=$(( $(date +%s) + TRAIN_S ))
  while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done
  if [ "$PADDLE_TRAINER_ID" = 1 ]; then exit "$FAIL_EXIT"; fi
  exit 0
fi
sleep 1"#;

/// A split fleet job with a control channel: 2 pserver pods and 2 trainer pods (two Jobs,
/// found by their own selectors), each launcher running `SPLIT_PROGRAM`. `launchers`: ps-0,
/// ps-1, tr-0, tr-1. With `pserver_0_exits`, ps-0's pserver exits 0 two seconds into epoch 0
/// (as fleet's `stop_server` would make it).
struct SplitJob {
    cluster: Cluster,
    job: String,
    /// What every pod's launcher is given besides its own name, address and role.
    env: Vec<(&'static str, String)>,
    pods: Vec<(String, String)>,
    launchers: Vec<Option<Launcher>>,
}

impl SplitJob {
    fn start(job: &str, max_restarts: u32, train_s: u32, fail_exit: u8) -> SplitJob {
        SplitJob::start_with(job, max_restarts, train_s, fail_exit, false, false)
    }

    /// `pserver_0_coordinates`: every launcher is given ps-0's address as --coordinator.
    fn start_with(
        job: &str,
        max_restarts: u32,
        train_s: u32,
        fail_exit: u8,
        pserver_0_exits: bool,
        pserver_0_coordinates: bool,
    ) -> SplitJob {
        let mut split = SplitJob::put(
            job,
            max_restarts,
            train_s,
            fail_exit,
            pserver_0_exits,
            pserver_0_coordinates,
        );
        for i in 0..split.pods.len() {
            split.launch(i);
        }
        split
    }

    /// `start_with`, the four pods in the API but no launcher started yet (`launch`).
    fn put(
        job: &str,
        max_restarts: u32,
        train_s: u32,
        fail_exit: u8,
        pserver_0_exits: bool,
        pserver_0_coordinates: bool,
    ) -> SplitJob {
        let cluster = Cluster::new();
        let ips: Vec<String> = (0..4).map(|_| loopback_ip()).collect();
        let exits_ip = if pserver_0_exits {
            ips[0].clone()
        } else {
            String::new()
        };
        let control_port = free_ports(1);
        let mut env = cluster.env(job, 2);
        env.retain(|(k, _)| *k != "CONF_PADDLE_GRADIENT_NUM");
        if pserver_0_coordinates {
            let coordinator = format!("{}:{control_port}", ips[0]);
            env.push(("PADDLE_LAUNCHER_COORDINATOR", coordinator));
        }
        env.extend([
            ("PADDLE_LAUNCHER_PROTOCOL", "fleet".to_string()),
            ("PSERVERS", "2".to_string()),
            ("TRAINERS", "2".to_string()),
            ("PADDLE_LAUNCHER_PSERVER_SELECTOR", "role=ps".to_string()),
            ("PADDLE_LAUNCHER_TRAINER_SELECTOR", "role=tr".to_string()),
            ("CONF_PADDLE_PORT", free_ports(2).to_string()),
            ("PADDLE_LAUNCHER_TRAINER_PORT", free_ports(1).to_string()),
            ("PADDLE_LAUNCHER_JOB_SECRET", SECRET.to_string()),
            ("PADDLE_LAUNCHER_MAX_RESTARTS", max_restarts.to_string()),
            ("PADDLE_LAUNCHER_CONTROL_PORT", control_port.to_string()),
            ("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "2".to_string()),
            ("PADDLE_LAUNCHER_GRACE_PERIOD", "3".to_string()),
            ("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "3".to_string()),
            ("TRAIN_S", train_s.to_string()),
            ("FAIL_EXIT", fail_exit.to_string()),
            ("PS_EXITS_IP", exits_ip),
        ]);
        let mut split = SplitJob {
            cluster,
            job: job.to_string(),
            env,
            pods: Vec::new(),
            launchers: Vec::new(),
        };
        for (k, label) in ["ps", "tr"].iter().enumerate() {
            for i in 0..2 {
                split.put_pod(label, &format!("{job}-{label}-{i}"), &ips[2 * k + i]);
            }
        }
        split
    }

    /// The Job controller creates a pod of `label` (ps or tr), the kubelet runs it.
    fn add_pod(&mut self, label: &str, name: &str, ip: &str) -> usize {
        let i = self.put_pod(label, name, ip);
        self.launch(i);
        i
    }

    /// A pod of `label` (ps or tr) Running in the API, its launcher not started yet.
    fn put_pod(&mut self, label: &str, name: &str, ip: &str) -> usize {
        let mut pod = job_pod(&self.job, name);
        pod["metadata"]["labels"]["role"] = serde_json::json!(label);
        self.cluster.api.put_pod(pod);
        self.cluster
            .api
            .set_status("default", name, "Running", Some(ip));
        self.launchers.push(None);
        self.pods.push((name.to_string(), ip.to_string()));
        self.pods.len() - 1
    }

    fn launcher(&self, i: usize) -> &Launcher {
        self.launchers[i]
            .as_ref()
            .expect("that pod's launcher is not running")
    }

    /// Starts pod `i`'s launcher (its container's entrypoint).
    fn launch(&mut self, i: usize) {
        let (name, ip) = self.pods[i].clone();
        let role = if name.contains("-ps-") {
            "pserver"
        } else {
            "trainer"
        };
        let mut env = self.env.clone();
        env.extend([
            ("POD_IP", ip),
            ("POD_NAME", name.clone()),
            ("PADDLE_LAUNCHER_ROLE", role.to_string()),
        ]);
        let args = ["run", "--", "sh", "-c", SPLIT_PROGRAM];
        let launcher = Launcher::start(self.cluster.dir.path(), &name, &args, &env);
        self.launchers[i] = Some(launcher);
    }

    /// Waits for launcher `i`, which must exit `code`; as the kubelet, marks its pod ended.
    fn ends(&mut self, i: usize, code: i32) -> support::Finished {
        let done = self.launchers[i].take().unwrap().wait(LIMIT);
        let name = &self.pods[i].0;
        assert_eq!(
            done.code(),
            code,
            "{name}:\n{}\n{}",
            done.stdout,
            done.stderr
        );
        let phase = if code == 0 { "Succeeded" } else { "Failed" };
        self.cluster.api.set_status("default", name, phase, None);
        done
    }
}

/// The split layout with a control channel: pserver pods and trainer pods form one membership
/// with one coordinator, the first trainer. A trainer's failure restarts the whole job in
/// place, the pservers too (count 1 everywhere); the trainers' success ends the job, and every
/// launcher exits 0.
#[test]
fn the_split_layout_with_a_channel_restarts_pservers_and_trainers_as_one_job() {
    let mut job = SplitJob::start("splitch", 1, 1, 3);
    // The kubelet: a trainer pod whose launcher exited 0 has Succeeded.
    let mut outputs: Vec<_> = [2, 3, 0, 1].iter().map(|&i| job.ends(i, 0)).collect();
    outputs.rotate_left(2);
    for (i, done) in outputs.iter().enumerate() {
        let role = if i < 2 { "PSERVER" } else { "TRAINER" };
        assert_contains(&done.stdout, &format!("role={role} "));
        for count in [0, 1] {
            assert_contains(&done.stdout, &format!(" count={count}"));
        }
        assert_contains(
            &done.stderr,
            "trainer exited with status 3: restarting the job (restart 1 of 1)",
        );
    }
    // One coordinator for all: the first trainer, the pservers its followers.
    let coordinating = outputs
        .iter()
        .filter(|done| done.stderr.contains("control channel: coordinating"))
        .count();
    let stderrs: Vec<&str> = outputs.iter().map(|done| done.stderr.as_str()).collect();
    assert_eq!(coordinating, 1, "{stderrs:#?}");
}

/// A pserver pod of the split layout preempted while the trainers train: its pserver serves
/// through the checkpoint window while every trainer is asked for a checkpoint, then it leaves
/// (83: a free preemption), and the job restarts in place around its replacement without a restart budget.
#[test]
fn a_preempted_pserver_pod_serves_the_jobs_checkpoint_and_the_job_restarts_free() {
    let mut job = SplitJob::start("splitpre", 0, 120, 0);
    for i in [2, 3] {
        job.launcher(i).wait_for_output("role=TRAINER", LIMIT);
    }
    let name = job.pods[0].0.clone();
    job.cluster.api.mark_deleting("default", &name, 30);
    let preempted = job.launchers[0].take().unwrap();
    preempted.signal(Signal::SIGTERM);
    let done = preempted.wait(LIMIT);
    // As the kubelet reports it: its container ended, the pod goes.
    let api = &job.cluster.api;
    api.set_terminated("default", &name, done.code(), "Error", "preempted");
    api.delete_pod("default", &name);
    assert_eq!(done.code(), PREEMPTED, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "asking the job's trainers, its pserver serving them meanwhile, for a checkpoint (SIGUSR1)",
    );
    assert_contains(&done.stderr, "its checkpoint window (3 s) is over");
    for i in [2, 3] {
        let trainer = job.launcher(i);
        trainer.wait_for_output("checkpoint signal id=", LIMIT);
        trainer.wait_for_output("preempted (SIGTERM while serving)", LIMIT);
        trainer.wait_for_output(
            "restarting the job (restart 1 after a preemption, which spends none of the 0 restarts)",
            LIMIT,
        );
    }
}

/// A pserver pod whose pserver has served its part comes back under the same name (its
/// container restarted in place): the coordinator holds it until the attempt ends, and the
/// job's success ends it too.
#[test]
fn a_served_pserver_restarted_in_place_ends_with_the_job() {
    let mut job = SplitJob::start_with("splitback", 0, 20, 0, true, false);
    for i in [1, 2, 3] {
        job.launcher(i)
            .wait_for_output("splitback-ps-0 has served its part", LIMIT);
    }
    let old = job.launchers[0].take().unwrap();
    old.signal(Signal::SIGKILL);
    old.wait(LIMIT);
    let (name, ip) = job.pods[0].clone();
    let mut env = job.env.clone();
    env.extend([
        ("POD_IP", ip),
        ("POD_NAME", name.clone()),
        ("PADDLE_LAUNCHER_ROLE", "pserver".to_string()),
    ]);
    let args = ["run", "--", "sh", "-c", SPLIT_PROGRAM];
    let again = Launcher::start(job.cluster.dir.path(), "splitback-ps-0-again", &args, &env);
    job.launcher(2)
        .wait_for_output("which had served its part, joined again", LIMIT);
    for i in [2, 3, 1] {
        job.ends(i, 0);
    }
    let done = again.wait(LIMIT);
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert_contains(&done.stderr, "nothing left for this pod to start");
}

/// A pserver pod named as the coordinator (--coordinator): once every trainer has succeeded it
/// says goodbye to the other pservers and ends too, its pserver still serving or already
/// stopped by the trainers; either way the job completes.
#[test]
fn a_pserver_coordinator_ends_the_job_when_the_trainers_succeed() {
    for pserver_0_exits in [false, true] {
        let mut job = SplitJob::start_with("splitpsc", 0, 4, 0, pserver_0_exits, true);
        for i in [2, 3, 1, 0] {
            let done = job.ends(i, 0);
            assert!(
                !done.stderr.contains("restarting the job"),
                "{}",
                done.stderr
            );
        }
    }
}

/// A pserver pod whose pserver the trainers stopped (fleet's `stop_server`) is then deleted
/// while they still train: its end is no loss, for the coordinator and for every launcher that
/// watches its pod through the API (the coordinator tells them it has served); the trainers
/// train on and the job succeeds.
#[test]
fn a_served_pserver_pods_deletion_is_no_loss() {
    served_pserver_pod_ends(false);
}

/// ... and when the Job controller replaces it (a new name the running attempt does not know),
/// the replacement ends with the job's success instead of waiting for a gathering that cannot
/// come.
#[test]
fn a_served_pserver_pods_replacement_ends_with_the_jobs_success() {
    served_pserver_pod_ends(true);
}

fn served_pserver_pod_ends(replaced: bool) {
    let mut job = SplitJob::start_with("splitserved", 0, 25, 0, true, false);
    job.launcher(0).wait_for_output(
        "staying a member of the job until its trainers are done",
        LIMIT,
    );
    for i in [1, 2, 3] {
        job.launcher(i)
            .wait_for_output("splitserved-ps-0 has served its part", LIMIT);
    }
    let name = job.pods[0].0.clone();
    job.cluster.api.mark_deleting("default", &name, 30);
    let served = job.launchers[0].take().unwrap();
    served.signal(Signal::SIGTERM);
    let done = served.wait(LIMIT);
    let api = &job.cluster.api;
    api.set_terminated("default", &name, done.code(), "Error", "deleted");
    api.delete_pod("default", &name);
    let replacement = replaced.then(|| job.add_pod("ps", "splitserved-ps-9", &loopback_ip()));
    if let Some(i) = replacement {
        job.launcher(i)
            .wait_for_output("control channel: following", LIMIT);
    }
    // The trainers succeed, then the other pservers hear the job's success.
    for i in [2, 3, 1].into_iter().chain(replacement) {
        let done = job.ends(i, 0);
        assert!(
            !done.stderr.contains("restarting the job"),
            "{}",
            done.stderr
        );
        assert!(!done.stderr.contains("job stopped"), "{}", done.stderr);
    }
}

/// A fleet pserver stopped early (its pserver exits 0 while the trainers train) leaves its pod a
/// member of the job: a trainer's failure then restarts every pod, that one too, instead of a
/// restart that would find it Succeeded (or gone) and could never gather.
#[test]
fn a_pserver_that_ended_early_rejoins_the_restart() {
    let mut job = SplitJob::start_with("splitearly", 1, 4, 3, true, false);
    job.launcher(0).wait_for_output(
        "staying a member of the job until its trainers are done",
        LIMIT,
    );
    let outputs: Vec<_> = [2, 3, 0, 1].iter().map(|&i| job.ends(i, 0)).collect();
    for done in &outputs {
        assert_contains(&done.stdout, " count=1");
        assert_contains(
            &done.stderr,
            "trainer exited with status 3: restarting the job (restart 1 of 1)",
        );
    }
}

/// A trainer pod lost (its node gone: launcher and children killed) and replaced by a pod with
/// a new name and address: the pservers and the other trainer stop their processes, keep their
/// pods, and the whole job starts again with the replacement in epoch 1.
#[test]
fn the_split_layout_recovers_from_a_lost_trainer_pod() {
    let mut job = SplitJob::start("splitlost", 1, 120, 0);
    for i in [2, 3] {
        job.launcher(i).wait_for_output("role=TRAINER", LIMIT);
    }
    let lost = job.launchers[3].take().unwrap();
    lost.signal(Signal::SIGKILL);
    lost.wait(LIMIT);
    let name = job.pods[3].0.clone();
    job.cluster.api.set_status("default", &name, "Failed", None);
    for i in [0, 1, 2] {
        job.launcher(i)
            .wait_for_output("restarting the job (restart 1 of 1)", LIMIT);
    }
    let replacement = job.add_pod("tr", "splitlost-tr-9", &loopback_ip());
    let outputs: Vec<_> = [2, replacement, 0, 1]
        .iter()
        .map(|&i| job.ends(i, 0))
        .collect();
    for done in &outputs {
        assert_contains(&done.stdout, " count=1");
    }
}

/// The coordinator's goodbye ends the pserver pods: they do not wait for the API to show every
/// trainer pod Succeeded, which it never may (a Succeeded pod deleted first).
#[test]
fn the_pservers_end_when_the_coordinator_says_the_trainers_succeeded() {
    let mut job = SplitJob::start("splitbye", 0, 1, 0);
    let follower = if job.pods[2].1.parse::<std::net::Ipv4Addr>().unwrap()
        < job.pods[3].1.parse::<std::net::Ipv4Addr>().unwrap()
    {
        3
    } else {
        2
    };
    job.ends(follower, 0);
    job.cluster
        .api
        .delete_pod("default", &job.pods[follower].0.clone());
    job.ends(5 - follower, 0);
    for i in [0, 1] {
        let done = job.ends(i, 0);
        assert_contains(
            &done.stderr,
            "the coordinating launcher said every trainer of the job succeeded",
        );
    }
}

/// A preempted coordinator whose pod is killed inside its checkpoint window (a node shutdown
/// shorter than the pod's grace, `kubectl delete --grace-period=1`) says no word of its end:
/// the followers, asked for a checkpoint, take its silence for the preemption's end, and the
/// job restarts in place with no restart budget at all.
#[test]
fn a_preempted_coordinator_killed_inside_its_window_is_still_a_preemption() {
    let mut job = Job::new("prekill", 3, 0);
    job.program = ["sh", "-c", CHECKPOINTING].map(String::from).to_vec();
    job.extra_env
        .push(("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "20".to_string()));
    job.start_training(3);
    let name = job.created[0].0.clone();
    let api = &job.cluster.api;
    api.mark_deleting("default", &name, 1);
    let launcher = job.created[0].2.take().unwrap();
    launcher.signal(Signal::SIGTERM);
    // What the trainers print (" count=0 at "), not the command line the log shows.
    for i in [1, 2] {
        job.launcher(i).wait_for_output(" count=0 at ", LIMIT);
    }
    launcher.signal(Signal::SIGKILL);
    let done = launcher.wait(LIMIT);
    api.set_terminated("default", &name, done.code(), "Error", "killed");
    api.delete_pod("default", &name);
    for i in [1, 2] {
        job.launcher(i).wait_for_output(
            "restarting the job (restart 1 after a preemption, which spends none of the 0 restarts)",
            LIMIT,
        );
    }
    job.create_pod();
    job.all_finish_in_epoch(1);
}

/// A preempted coordinator frozen inside its checkpoint window (its node gone: no FIN, no
/// word) while a follower's trainer fails on the checkpoint signal: the follower does not judge
/// the attempt on what it knows two seconds after its trainer's end (no restart budget at
/// all: it would end 3), but waits for the coordinator's word or its silence, which is the
/// preemption's end, and the job restarts in place for free.
#[test]
fn a_preempted_coordinator_frozen_while_a_trainer_fails_is_still_a_preemption() {
    let program = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT endpoints=$PADDLE_TRAINER_ENDPOINTS"
trap 'echo "checkpoint signal rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT"; if [ "$PADDLE_TRAINER_ID" = 1 ]; then sleep 1; exit 3; fi' USR1
if [ "$PADDLE_LAUNCHER_RESTART_COUNT" = 0 ]; then
  end=$(( $(date +%s) + 120 ))
  while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done
fi
sleep 2"#;
    let mut job = Job::new("prefrozen", 2, 0);
    job.program = ["sh", "-c", program].map(String::from).to_vec();
    // The coordinator's silence is judged only well after the trainer's end is told (a 2 s
    // wait for the coordinator's word).
    job.extra_env.extend([
        ("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "20".to_string()),
        ("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "6".to_string()),
    ]);
    job.start_training(2);
    let name = job.created[0].0.clone();
    job.cluster.api.mark_deleting("default", &name, 30);
    let frozen = job.created[0].2.take().unwrap();
    frozen.signal(Signal::SIGTERM);
    job.launcher(1)
        .wait_for_output("checkpoint signal rank=1 count=0", LIMIT);
    frozen.signal(Signal::SIGSTOP);
    job.launcher(1).wait_for_output(
        "restarting the job (restart 1 after a preemption, which spends none of the 0 restarts)",
        LIMIT,
    );
    assert_contains(&job.stderr(1), "exited with status 3");
    frozen.signal(Signal::SIGKILL);
    let done = frozen.wait(LIMIT);
    let api = &job.cluster.api;
    api.set_terminated("default", &name, done.code(), "Error", "killed");
    api.delete_pod("default", &name);
    job.create_pod();
    job.all_finish_in_epoch(1);
}

/// One pod without the job secret while the others have it: it finds at once that the
/// coordinator serves a channel it cannot join and ends with status 2 naming the variable,
/// instead of training alone; the coordinator names the pod that never says hello within a
/// few heartbeats, instead of waiting silently for the join grace.
#[test]
fn a_pod_without_the_job_secret_ends_at_once_and_is_named_by_the_coordinator() {
    let mut job = Job::new("nosecret", 2, 0);
    job.create_pod();
    job.next_without_secret = true;
    job.create_pod();
    let secretless = job.created[1].2.take().unwrap().wait(LIMIT);
    assert_eq!(
        secretless.code(),
        2,
        "{}\n{}",
        secretless.stdout,
        secretless.stderr
    );
    assert_contains(&secretless.stderr, "invalid PADDLE_LAUNCHER_JOB_SECRET");
    assert_contains(&secretless.stderr, "serves the job's control channel");
    let silent = format!(
        "1 pod found Running has not said hello yet after 2 s: {}",
        job.created[1].0
    );
    job.launcher(0).wait_for_output(&silent, LIMIT);
    assert_contains(&job.stderr(0), "PADDLE_LAUNCHER_JOB_SECRET");
    job.kill_pod(0);
}

/// A preemption spends nothing, and the job remembers it: after one, a failure spends the
/// budget as if the preemption had not happened (restart 1 was free, restart 2 is the first of
/// --max-restarts 1), the replacement pod, which knows of none, included.
#[test]
fn a_failure_after_a_preemption_spends_the_budget_as_usual() {
    let program = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT end"
trap 'echo "checkpoint signal rank=$PADDLE_TRAINER_ID"' USR1
case "$PADDLE_LAUNCHER_RESTART_COUNT" in
0) end=$(( $(date +%s) + 120 )); while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done ;;
1) if [ "$PADDLE_TRAINER_ID" = 1 ]; then sleep 1; exit 3; fi; sleep 120 ;;
esac
sleep 2"#;
    let mut job = Job::new("prefail", 3, 1);
    job.program = ["sh", "-c", program].map(String::from).to_vec();
    job.extra_env
        .push(("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "2".to_string()));
    job.start_training(3);
    assert_eq!(job.preempt_pod(2).code(), PREEMPTED);
    job.create_pod();
    let outputs = job.all_finish_in_epoch(2);
    assert_eq!(outputs.len(), 3);
    assert_contains(
        &job.stderr(0),
        "trainer exited with status 3: restarting the job (restart 1 of 1, after 1 preemption that spent none)",
    );
}

/// A job that bounds its free preemptions (--max-preemptions 1, no restart budget): the first
/// preemption restarts the job in place for nothing; the second counts as a failure, which the
/// budget does not allow, so every pod ends saying why (a pod evicted for its own disk or
/// memory use is preempted again and again: it must not restart the job for ever).
#[test]
fn a_preemption_beyond_the_free_ones_spends_the_budget() {
    let program = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT end"
trap 'echo "checkpoint signal rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT"' USR1
end=$(( $(date +%s) + 120 ))
while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done"#;
    let mut job = Job::new("maxpre", 2, 0);
    job.program = ["sh", "-c", program].map(String::from).to_vec();
    job.extra_env.extend([
        ("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "2".to_string()),
        ("PADDLE_LAUNCHER_MAX_PREEMPTIONS", "1".to_string()),
    ]);
    job.start_training(2);
    assert_eq!(job.preempt_pod(1).code(), PREEMPTED);
    job.launcher(0).wait_for_output(
        "restarting the job (restart 1 after a preemption, which spends none of the 0 restarts)",
        LIMIT,
    );
    let replacement = job.create_pod();
    for i in [0, replacement] {
        job.launcher(i).wait_for_output("count=1 ", LIMIT);
    }
    // The second preemption: its trainers are asked for a checkpoint all the same.
    let second = job.preempt_pod(replacement);
    assert_eq!(second.code(), 143, "{}", second.stderr);
    assert_contains(&second.stdout, "checkpoint signal rank=");
    let survivor = job.created[0].2.take().unwrap().wait(LIMIT);
    assert_ne!(survivor.code(), 0, "{}", survivor.stderr);
    assert_contains(&survivor.stdout, "checkpoint signal rank=0 count=1");
    let why = "only the job's first preemption was free (PADDLE_LAUNCHER_MAX_PREEMPTIONS): this one counts as a failure";
    assert_contains(&survivor.stderr, why);
    let pod = job.created[0].0.clone();
    assert_contains(
        &std::fs::read_to_string(job.termination_log(&pod)).unwrap(),
        why,
    );
    assert!(
        !survivor.stderr.contains("restart 2"),
        "{}",
        survivor.stderr
    );
}

/// Where the coordinator records the job's restarts on a plain Job.
const RESTART_COUNT: &str = "paddle-launcher.paddlepaddle.org/restart-count";
const PREEMPTIONS: &str = "paddle-launcher.paddlepaddle.org/preemptions";

/// A whole-Job restart (every pod lost together, or Kueue suspending and resuming the Job)
/// creates pods that know nothing of the restarts before: the coordinator records each start
/// on the Job object, and the next coordinator goes on counting from it.
#[test]
fn a_job_restarted_whole_goes_on_counting_from_what_the_job_records() {
    let mut job = Job::new("whole", 2, 2);
    let api = job.cluster.api.clone();
    api.put_job(job_object("whole", 2, serde_json::json!({})));
    let recorded = || api.job_annotation("default", "whole", RESTART_COUNT);
    job.start_training(2);
    let deadline = std::time::Instant::now() + LIMIT;
    while recorded().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(recorded().as_deref(), Some("0"));
    // Every pod lost together: the Job controller creates two pods that know nothing.
    job.kill_pod(0);
    job.kill_pod(1);
    job.create_pods(2);
    let outputs = job.all_finish_in_epoch(1);
    assert_eq!(outputs.len(), 2);
    // Said by the new pods' coordinator, whichever it is.
    assert_contains(
        &format!("{}{}", job.stderr(2), job.stderr(3)),
        "Job whole records restart epoch 0 as started: the job was restarted whole since, so the restart count goes on at 1",
    );
    assert_eq!(recorded().as_deref(), Some("1"));
}

/// Kueue suspends a running Job (every pod gets SIGTERM at once) and resumes it: the pods
/// created again start the next epoch, and the preemption spends nothing there either (the
/// coordinator recorded it on the Job before leaving): a failure after it still restarts.
#[test]
fn a_job_suspended_whole_and_resumed_counts_its_preemption_as_free() {
    let program = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT end"
trap 'echo "checkpoint signal rank=$PADDLE_TRAINER_ID"' USR1
case "$PADDLE_LAUNCHER_RESTART_COUNT" in
0) end=$(( $(date +%s) + 120 )); while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done ;;
1) if [ "$PADDLE_TRAINER_ID" = 1 ]; then sleep 1; exit 3; fi; sleep 120 ;;
esac
sleep 2"#;
    let mut job = Job::new("suspended", 2, 1);
    job.program = ["sh", "-c", program].map(String::from).to_vec();
    job.extra_env
        .push(("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "2".to_string()));
    let api = job.cluster.api.clone();
    api.put_job(job_object("suspended", 2, serde_json::json!({})));
    job.start_training(2);
    // Kueue: both pods deleted at once with their grace period.
    let mut leaving = Vec::new();
    for i in [0, 1] {
        let name = job.created[i].0.clone();
        api.mark_deleting("default", &name, 30);
        let launcher = job.created[i].2.take().unwrap();
        launcher.signal(Signal::SIGTERM);
        leaving.push((name, launcher));
    }
    for (name, launcher) in leaving {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), PREEMPTED, "{name}: {}", done.stderr);
        api.set_terminated("default", &name, done.code(), "Error", "preempted");
        api.delete_pod("default", &name);
    }
    assert_eq!(
        api.job_annotation("default", "suspended", PREEMPTIONS)
            .as_deref(),
        Some("1"),
        "{}\n{}",
        job.stderr(0),
        job.stderr(1)
    );
    // Resumed: new pods, epoch 1 (the preemption's); rank 1 fails there, which spends the one
    // restart (restart 2 of the job, 1 of 1): epoch 2 ends it.
    job.create_pods(2);
    let outputs = job.all_finish_in_epoch(2);
    assert_eq!(outputs.len(), 2);
}

/// A preemption's record on the Job is waited for 2 s at most (the pod is within its grace
/// period): one the API server does not take in time is said, not silently lost.
#[test]
fn a_preemption_the_api_does_not_take_in_time_is_said_unrecorded() {
    let program = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT end"
trap 'echo "checkpoint signal rank=$PADDLE_TRAINER_ID"' USR1
end=$(( $(date +%s) + 120 )); while [ "$(date +%s)" -lt "$end" ]; do sleep 1 & wait $!; done"#;
    let mut job = Job::new("slowrec", 2, 1);
    job.program = ["sh", "-c", program].map(String::from).to_vec();
    job.extra_env
        .push(("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "2".to_string()));
    let api = job.cluster.api.clone();
    api.put_job(job_object("slowrec", 2, serde_json::json!({})));
    job.start_training(2);
    let deadline = std::time::Instant::now() + LIMIT;
    while api
        .job_annotation("default", "slowrec", RESTART_COUNT)
        .is_none()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Kueue suspends the Job while its API server answers in 3 s.
    api.set_delay(Duration::from_millis(3000));
    let mut leaving = Vec::new();
    for i in [0, 1] {
        let name = job.created[i].0.clone();
        api.mark_deleting("default", &name, 30);
        let launcher = job.created[i].2.take().unwrap();
        launcher.signal(Signal::SIGTERM);
        leaving.push((name, launcher));
    }
    let mut logs = String::new();
    for (name, launcher) in leaving {
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), PREEMPTED, "{name}: {}", done.stderr);
        logs.push_str(&done.stderr);
    }
    api.set_delay(Duration::ZERO);
    assert_eq!(
        api.job_annotation("default", "slowrec", PREEMPTIONS)
            .as_deref(),
        Some("0")
    );
    assert_contains(
        &logs,
        "the preemption may not be recorded on Job slowrec (no answer within 2 s): if every pod of the job is lost, its restart may spend a restart",
    );
}

/// A record no job reaches (1,000,000, which may be anyone's edit) is believed up to its
/// bound: the job goes on from it, but does not write a count it would not read back, which
/// would make the next whole-Job restart count from 0.
#[test]
fn a_restart_count_beyond_the_records_bound_is_not_written() {
    let mut job = Job::new("huge", 2, 1);
    let api = job.cluster.api.clone();
    api.put_job(job_object(
        "huge",
        2,
        serde_json::json!({ RESTART_COUNT: "1000000" }),
    ));
    job.create_pods(2);
    job.launcher(0).wait_for_output("count=1000001 ", LIMIT);
    let coordinator = job.created[0].0.clone();
    let said = "restart epoch 1000001 is beyond the 1000000 a record on Job huge is read up to: not recorded";
    let deadline = std::time::Instant::now() + LIMIT;
    while !job.stderr(0).contains(said) && !job.stderr(1).contains(said) {
        assert!(
            std::time::Instant::now() < deadline,
            "{coordinator}: {}",
            job.stderr(0)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        api.job_annotation("default", "huge", RESTART_COUNT)
            .as_deref(),
        Some("1000000")
    );
}

/// The record on the Job only goes forward: a restart in place never writes an epoch below the
/// one recorded (a slow write of an earlier coordinator, or the record of a Job restarted whole
/// before, stands), and a launcher reads it only when it starts.
#[test]
fn the_restart_count_on_the_job_only_goes_forward() {
    let mut job = Job::new("forward", 2, 2);
    job.fail_once_rank = Some(1);
    let api = job.cluster.api.clone();
    api.put_job(job_object("forward", 2, serde_json::json!({})));
    job.start_training(2);
    // Rank 1 fails a second into epoch 0; meanwhile the Job is recorded further on.
    let further_on = serde_json::json!({ RESTART_COUNT: "9" });
    api.put_job(job_object("forward", 2, further_on));
    let outputs = job.all_finish_in_epoch(1);
    assert_eq!(outputs.len(), 2);
    assert_eq!(
        api.job_annotation("default", "forward", RESTART_COUNT)
            .as_deref(),
        Some("9")
    );
}

/// Restarts without a secret cannot be agreed: refused before anything starts.
#[test]
fn restarts_without_a_job_secret_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let done = Launcher::start(
        dir.path(),
        "nosecret",
        &["run", "--", "true"],
        &[
            ("JOB_NAME", "j".to_string()),
            ("PADDLE_LAUNCHER_PEERS", "127.0.0.1".to_string()),
            ("PADDLE_LAUNCHER_PROTOCOL", "collective".to_string()),
            ("PADDLE_LAUNCHER_MAX_RESTARTS", "2".to_string()),
        ],
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "invalid PADDLE_LAUNCHER_MAX_RESTARTS (--max-restarts): \"2\": expected 0 without a job secret",
    );
}

/// `local` mode: a user watches a trainer that fails once get restarted, with every other.
#[test]
fn local_mode_restarts_a_trainer_that_fails_once() {
    let dir = tempfile::tempdir().unwrap();
    let done = Launcher::start(
        dir.path(),
        "local",
        &[
            "local",
            "--job-name",
            "loc",
            "--trainers",
            "3",
            "--protocol",
            "collective",
            "--max-restarts",
            "1",
            "--control-port",
            &free_ports(1).to_string(),
            "--trainer-port",
            &free_ports(1).to_string(),
            "--",
            "sh",
            "-c",
            PROGRAM,
        ],
        &[("FAIL_ONCE_RANK", "2".to_string())],
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    // The last line says the job got there by restarting.
    assert_contains(
        &done.stderr,
        "all 3 simulated pods succeeded (after 1 restart of the job)",
    );
    let outputs = [done.stdout];
    assert_eq!(epoch_lines(&outputs, 1).len(), 3, "{}", outputs[0]);
    assert_contains(&done.stderr, "pod loc-2 (trainer id 2 of 3) at 20");
    assert_contains(
        &done.stderr,
        "Z: trainer exited with status 3: restarting the job (restart 1 of 1)",
    );
}

impl Job {
    /// The collective example with real Paddle as the job's program, checkpointing every step
    /// into a directory the pods share, 0.2 s a step; the directory its results go to.
    fn run_collective_example(&mut self) -> PathBuf {
        let out = self.cluster.dir.path().join("out");
        let checkpoints = self.cluster.dir.path().join("checkpoints");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::create_dir_all(&checkpoints).unwrap();
        let train = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/collective/train.py");
        self.program = vec![
            paddle_python(),
            train.display().to_string(),
            out.display().to_string(),
            checkpoints.display().to_string(),
        ];
        self.extra_env.extend([
            ("STEP_SECONDS", "0.2".to_string()),
            ("PADDLE_DISTRI_BACKEND", "gloo".to_string()),
            ("HOME", self.cluster.dir.path().display().to_string()),
        ]);
        out
    }
}

/// The collective example's result-<rank>.json of each rank; a missing one fails with the
/// launchers' outputs.
fn example_results(out: &Path, ranks: usize, outputs: &[String]) -> Vec<Value> {
    (0..ranks)
        .map(|rank| {
            let text = std::fs::read_to_string(out.join(format!("result-{rank}.json")))
                .unwrap_or_else(|e| panic!("rank {rank}: {e}\n{outputs:?}"));
            serde_json::from_str(&text).unwrap()
        })
        .collect()
}

/// Every rank of the collective example ran in restart epoch 1 in a world of as many ranks,
/// resumed from a checkpoint taken after step 9 or later, converged, and ended with the same
/// parameters as every other rank (only a working all-reduce keeps them equal).
fn assert_resumed_from_the_checkpoint(results: &[Value], outputs: &[String]) {
    for (rank, result) in results.iter().enumerate() {
        assert_eq!(result["restart_count"], 1, "rank {rank}: {outputs:?}");
        assert_eq!(result["world"], results.len(), "rank {rank}: {outputs:?}");
        let resumed = result["resumed_after_step"].as_u64().unwrap();
        assert!(
            resumed >= 9,
            "rank {rank} resumed after step {resumed}: not from the checkpoint"
        );
        let last = result["last_loss"].as_f64().unwrap();
        assert!(last < 0.01, "rank {rank}: final loss {last}");
        assert_eq!(result["params"], results[0]["params"], "rank {rank}");
    }
}

/// Real PaddlePaddle (CPU, gloo): the collective example checkpoints every step; one pod is
/// killed mid-training and replaced; every rank resumes from the checkpoint in restart epoch 1,
/// the job finishes, and the final parameters are identical on every rank (each rank trains on
/// its own data: only a working all-reduce keeps them equal).
#[test]
fn real_paddle_resumes_from_its_checkpoint_after_a_pod_is_killed_and_replaced() {
    let mut job = Job::new("rp", 3, 1);
    let out = job.run_collective_example();
    job.create_pods(3);
    job.launcher(1).wait_for_output("rank 1: step 10 ", LIMIT);
    job.kill_pod(1);
    let replacement = job.create_pod();
    let outputs = job.all_finish();
    assert_resumed_from_the_checkpoint(&example_results(&out, 3, &outputs), &outputs);
    // The replacement trained too, in the survivors' epoch.
    let replaced = std::fs::read_to_string(
        job.cluster
            .dir
            .path()
            .join(format!("{}.stdout", job.created[replacement].0)),
    )
    .unwrap();
    assert_contains(&replaced, "restart 1, resuming after step");
}

/// Real PaddlePaddle (CPU, gloo), no restart budget: the collective example checkpoints only
/// when the launcher asks. One pod's launcher gets SIGTERM mid-training (a preemption): every
/// rank is asked, all checkpoint after the same step, the preempted pod leaves after its
/// window, its replacement joins, and every rank resumes from exactly that step in restart
/// epoch 1; the job completes with identical parameters on every rank.
#[test]
fn real_paddle_preempted_mid_training_resumes_from_the_step_it_checkpointed_on_the_signal() {
    let mut job = Job::new("pp", 3, 0);
    let out = job.run_collective_example();
    job.extra_env.extend([
        ("CHECKPOINT_EVERY", "0".to_string()),
        ("STEP_SECONDS", "0.3".to_string()),
        ("PADDLE_LAUNCHER_CHECKPOINT_WINDOW", "2".to_string()),
    ]);
    job.create_pods(3);
    job.launcher(1).wait_for_output("rank 1: step 8 ", LIMIT);
    let ended = job.preempt_pod(1);
    assert_eq!(
        ended.code(),
        PREEMPTED,
        "{}\n{}",
        ended.stdout,
        ended.stderr
    );
    let replacement = job.create_pod();
    let outputs = job.all_finish();
    let mut all = outputs.clone();
    all.push(ended.stdout.clone());
    let results = example_results(&out, 3, &all);
    // The step every rank checkpointed after, as the preempted trainer printed it too.
    let line = "rank 1: checkpoint after step ";
    let step: u64 = ended
        .stdout
        .split(line)
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "the preempted trainer did not checkpoint:\n{}",
                ended.stdout
            )
        });
    for output in &outputs[..2] {
        assert_contains(
            output,
            &format!(": checkpoint after step {step} (asked by SIGUSR1)"),
        );
    }
    for (rank, result) in results.iter().enumerate() {
        assert_eq!(result["restart_count"], 1, "rank {rank}: {outputs:?}");
        assert_eq!(result["resumed_after_step"], step, "rank {rank}");
        let last = result["last_loss"].as_f64().unwrap();
        assert!(last < 0.01, "rank {rank}: final loss {last}");
    }
    assert_eq!(results[0]["params"], results[1]["params"]);
    assert_eq!(results[0]["params"], results[2]["params"]);
    let replaced = std::fs::read_to_string(
        job.cluster
            .dir
            .path()
            .join(format!("{}.stdout", job.created[replacement].0)),
    )
    .unwrap();
    assert_contains(&replaced, &format!("restart 1, resuming after step {step}"));
}

/// Real PaddlePaddle (CPU, gloo): one rank stops before an all-reduce and every other blocks in
/// it, all alive, all silent. With --hang-timeout the launchers find it within seconds, the
/// stuck trainer's stacks go to its log, the job restarts once in place (count 1), every rank
/// resumes from the checkpoint, and the job completes with identical parameters everywhere.
#[test]
fn real_paddle_hang_is_found_restarted_and_resumed_from_its_checkpoint() {
    let mut job = Job::new("hang", 3, 1);
    let out = job.run_collective_example();
    job.extra_env.extend([
        ("HANG_RANK", "1".to_string()),
        ("HANG_AT_STEP", "10".to_string()),
        ("PADDLE_LAUNCHER_HANG_TIMEOUT", "3".to_string()),
        ("PADDLE_LAUNCHER_HANG_FIRST_WINDOW", "120".to_string()),
    ]);
    job.create_pods(3);
    let mut outputs = Vec::new();
    for (pod, _, launcher) in &mut job.created {
        let done = launcher.take().unwrap().wait(LIMIT);
        assert_eq!(done.code(), 0, "{pod}:\n{}\n{}", done.stdout, done.stderr);
        outputs.push(format!("{}\n{}", done.stdout, done.stderr));
    }
    let results = example_results(&out, 3, &outputs);
    for (rank, result) in results.iter().enumerate() {
        assert_eq!(result["restart_count"], 1, "rank {rank}: {outputs:?}");
        let resumed = result["resumed_after_step"].as_u64().unwrap();
        assert!(resumed >= 8, "rank {rank} resumed after step {resumed}");
    }
    assert_eq!(results[0]["params"], results[1]["params"]);
    assert_eq!(results[0]["params"], results[2]["params"]);
    let all = outputs.join("\n");
    assert_contains(&all, "made no progress for ");
    assert_contains(&all, "(--hang-timeout) = 3 s)");
    // Rank 1 never began step 10 (the example writes each step as it begins): named on every
    // pod, whichever launcher found the hang first.
    for output in &outputs {
        assert_contains(
            output,
            "the job hangs: suspect pod hang-1 (trainer id 1 of 3): furthest behind, at step 9",
        );
    }
    // The stacks of the trainer judged hung, with the frames of the program (Paddle's own
    // fatal-signal handler would have printed only its C++ state).
    assert_contains(&all, "(most recent call first):");
    assert_contains(&all, "train.py\", line");
}

/// Trainers that end at different moments: once one has succeeded, a later failure cannot be
/// recovered as a group; every launcher ends at once (none waits for a restart that cannot
/// come), the failed pod with its trainer's status, the others as lost peers, the one that
/// succeeded with 0.
#[test]
fn a_failure_after_another_pod_finished_ends_the_job_without_a_restart() {
    let mut job = Job::new("late", 3, 2);
    job.program = [
        "sh",
        "-c",
        r#"case "$PADDLE_TRAINER_ID" in
  0) sleep 1 ;;
  1) sleep 3; exit 5 ;;
  *) exec sleep 120 ;;
esac"#,
    ]
    .map(String::from)
    .to_vec();
    job.create_pods(3);
    let expected = [(0, 0), (1, 5), (2, 78)];
    for (i, code) in expected {
        let launcher = job.created[i].2.take().unwrap();
        let done = launcher.wait(LIMIT);
        assert_eq!(done.code(), code, "pod {i}: {}", done.stderr);
        if code != 0 {
            assert_contains(
                &done.stderr,
                "no restart: a pod of the job has already finished",
            );
        }
    }
    // The coordinator's own trainer succeeded, the job did not: its last event says the job's.
    let events = job.cluster.api.events();
    let last = events.last().expect("events");
    assert_eq!(
        (&last["type"], &last["reason"]),
        (&"Warning".into(), &"Failed".into()),
        "{events:#?}"
    );
    assert_contains(
        last["message"].as_str().unwrap(),
        "job stopped: pod late-1 (trainer id 1 of 3)",
    );
}

/// The parameter-server layout, where a trainer's success is not its launcher's end: the pod's
/// pserver keeps serving the others (--linger). A trainer that succeeds says so at once, so a
/// failure elsewhere during that linger ends the job instead of restarting it without this pod
/// (whose pod will have Succeeded, never to rejoin): the failed pod with its trainer's status,
/// the others as lost peers, the finished one with 0.
#[test]
fn a_trainer_that_succeeded_ends_the_restarts_while_its_pserver_still_serves() {
    // Fleet's entry command serves as pserver (listening, as Paddle's would) and as trainer.
    const PROGRAM: &str = r#"
import os, socket, sys, time
if os.environ["TRAINING_ROLE"] == "PSERVER":
    server = socket.socket()
    server.bind((os.environ["POD_IP"], int(os.environ["PADDLE_PORT"])))
    server.listen()
    time.sleep(600)
rank = os.environ["PADDLE_TRAINER_ID"]
print(f"rank={rank} count={os.environ['PADDLE_LAUNCHER_RESTART_COUNT']}", flush=True)
if rank == "1":
    sys.exit(0)
if rank == "0":
    time.sleep(3)
    sys.exit(5)
time.sleep(120)
"#;
    let mut job = Job::new("linger", 3, 2);
    job.program = ["python3", "-c", PROGRAM].map(String::from).to_vec();
    job.extra_env = vec![
        ("PADDLE_LAUNCHER_PROTOCOL", "fleet".to_string()),
        ("CONF_PADDLE_PORT", free_ports(1).to_string()),
        ("PADDLE_LAUNCHER_LINGER", "15".to_string()),
    ];
    job.create_pods(3);
    let mut by_rank = std::collections::BTreeMap::new();
    for (i, (pod, _, launcher)) in job.created.iter_mut().enumerate() {
        let done = launcher.take().unwrap().wait(LIMIT);
        let rank = (0..3)
            .find(|r| done.stdout.contains(&format!("rank={r} count=0")))
            .unwrap_or_else(|| panic!("pod {i} ({pod}) trained no rank:\n{}", done.stderr));
        by_rank.insert(rank, done);
    }
    for (rank, code) in [(0, 5), (1, 0), (2, 78)] {
        let done = &by_rank[&rank];
        assert_eq!(done.code(), code, "rank {rank}:\n{}", done.stderr);
        assert!(
            !done.stdout.contains("count=1"),
            "rank {rank} restarted:\n{}",
            done.stdout
        );
        if code != 0 {
            assert_contains(
                &done.stderr,
                "no restart: a pod of the job has already finished",
            );
        }
    }
    assert_contains(
        &by_rank[&1].stderr,
        "trainer finished; the pserver keeps serving for 15 s",
    );
}

/// A member that finished while the others decided to restart (here its launcher is gone
/// without a word, its pod Succeeded): the restart can never gather it again, so every
/// launcher ends at once, naming it, instead of waiting for it until --wait-timeout. A pod the
/// selector also matches that Succeeded before the job started (no member) changes nothing.
#[test]
fn a_restart_that_finds_a_member_succeeded_ends_at_once() {
    let mut job = Job::new("fin", 3, 1);
    let mut stale = job_pod("fin", "fin-stale");
    stale["status"] = serde_json::json!({"phase": "Succeeded"});
    job.cluster.api.put_pod(stale);
    job.start_training(3);
    a_member_succeeds_unseen_and_the_others_end(&mut job);
}

/// Pod 2 of three training ends unseen and Succeeded: the others restart, find it, and end
/// with 78, naming it.
fn a_member_succeeds_unseen_and_the_others_end(job: &mut Job) {
    let finished = job.end_pod(2, "Succeeded");
    for (pod, _, launcher) in &mut job.created[..2] {
        let done = launcher.take().unwrap().wait(LIMIT);
        assert_eq!(done.code(), 78, "{pod}:\n{}", done.stderr);
        assert_contains(
            &done.stderr,
            &format!("pod {finished} of the attempt that ended has Succeeded: the job cannot start again as a whole"),
        );
    }
}

/// The same with a named coordinator, the only launcher that watches the pods: it finds the
/// member Succeeded and tells the followers, which learn the job only from it, that the job
/// has ended; they end at once instead of waiting for it until --wait-timeout.
#[test]
fn a_named_coordinator_that_finds_a_member_succeeded_ends_its_followers_too() {
    let mut job = Job::new("finco", 3, 1);
    job.named_coordinator = true;
    job.start_training(3);
    a_member_succeeds_unseen_and_the_others_end(&mut job);
    // Both lists were the coordinator's: the first start's and the restart's.
    let (lists, _) = job.cluster.api.pod_requests();
    assert_eq!(lists, 2);
}

/// A coordinator named by DNS whose name gets no address (its pod is not coming back): the
/// launchers wait for it as for any gathering, within --wait-timeout (status 71, naming the
/// name), not a fixed minute that fails the pod with another status; and a stop signal ends
/// the wait at once.
#[test]
fn a_coordinator_name_without_an_address_is_waited_for_within_the_wait_timeout() {
    const NAME: &str = "gone-0.pods.paddle.test";
    let mut job = Job::new("gone", 2, 1);
    let dns = job.coordinator_named(NAME);
    dns.set_records(&[]);
    job.extra_env
        .push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "5".to_string()));
    job.create_pods(2);
    let stopped = job.created[1].2.take().unwrap();
    stopped.wait_for_output("waiting for the coordinator's address", LIMIT);
    stopped.signal(Signal::SIGTERM);
    let stopped = stopped.wait(Duration::from_secs(10));
    assert_eq!(stopped.code(), PREEMPTED, "{}", stopped.stderr);

    let timed_out = job.created[0].2.take().unwrap().wait(LIMIT);
    assert_eq!(timed_out.code(), 71, "{}", timed_out.stderr);
    assert_contains(
        &timed_out.stderr,
        &format!("the coordinating launcher's address: {NAME}"),
    );
}

/// With a named coordinator only it watches the pods: a follower's pod killed and replaced is
/// seen by the coordinator's watch, every trainer restarts with the new membership, and the
/// followers made no API request through it all.
#[test]
fn a_named_coordinator_restarts_the_job_around_a_replaced_follower() {
    let mut job = Job::new("named", 3, 1);
    job.named_coordinator = true;
    job.start_training(3);
    job.kill_pod(2);
    let replacement = job.create_pod();
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with(&outputs, 1, &endpoints(&job, &[0, 1, replacement]));
    assert_only_coordinators_used_the_api(&job, &[0]);
}

/// Every list the API served is one that a coordinator (`coordinators`) logged; no other
/// launcher logged one.
fn assert_only_coordinators_used_the_api(job: &Job, coordinators: &[usize]) {
    let discoveries = |i: usize| job.stderr(i).matches(DISCOVERS).count();
    let (lists, watches) = job.cluster.api.pod_requests();
    let by_coordinators: usize = coordinators.iter().map(|&i| discoveries(i)).sum();
    assert_eq!(lists, by_coordinators);
    assert_eq!(watches, lists);
    assert!(lists >= 2, "the job was not discovered again");
    for i in (0..job.created.len()).filter(|i| !coordinators.contains(i)) {
        assert_eq!(discoveries(i), 0, "{} used the API", job.created[i].0);
    }
}

/// With a coordinator named by DNS (an Indexed Job's `<job>-0.<service>`), its pod killed: the
/// name moves to the replacement, which coordinates (and is the only one to use the API), and
/// every trainer restarts in the survivors' epoch.
#[test]
fn a_named_coordinators_replacement_takes_over_at_the_same_name() {
    const NAME: &str = "dnsco-0.pods.paddle.test";
    let mut job = Job::new("dnsco", 3, 1);
    let dns = job.coordinator_named(NAME);
    let first = job.reserve_ip();
    dns.set_records(&[(&first, NAME)]);
    job.start_training(3);
    // The replacement's address is the name's before the old pod dies, as the Service's
    // endpoints would follow the new pod.
    let next = job.reserve_ip();
    dns.set_records(&[(&next, NAME)]);
    job.kill_pod(0);
    let replacement = job.create_pod();
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with(&outputs, 1, &endpoints(&job, &[1, 2, replacement]));
    assert_contains(
        &job.stderr(replacement),
        "control channel: coordinating 3 launchers",
    );
    assert_only_coordinators_used_the_api(&job, &[0, replacement]);
}

/// The job secret authenticates the launchers, and nothing else may see it: a training program
/// that prints its whole environment (as crash handlers and experiment trackers do) prints no
/// secret, neither the one a pod is given nor the one `local` makes up. Nor does it get the
/// launcher's other settings: of PADDLE_LAUNCHER_*, only the contract (the restart count, the
/// full world size, the progress file, the checkpoint signal). Its http_proxy is kept as http_proxy_original, as
/// Paddle's launcher keeps it.
#[test]
fn the_training_program_never_sees_the_job_secret() {
    let mut job = Job::new("nosee", 2, 1);
    job.program = ["sh", "-c", "env; echo count=$PADDLE_LAUNCHER_RESTART_COUNT"]
        .map(String::from)
        .to_vec();
    job.extra_env = vec![
        ("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "10".to_string()),
        // As Paddle's launcher does, a collective trainer's proxy is kept aside.
        ("http_proxy", "http://proxy.example:3128".to_string()),
    ];
    job.create_pods(2);
    const CONTRACT: [&str; 4] = [
        "PADDLE_LAUNCHER_RESTART_COUNT",
        "PADDLE_LAUNCHER_FULL_WORLD_SIZE",
        "PADDLE_LAUNCHER_PROGRESS_FILE",
        "PADDLE_LAUNCHER_CHECKPOINT_SIGNAL",
    ];
    for out in job.all_finish() {
        assert_contains(&out, "PADDLE_TRAINER_ID=");
        assert_contains(&out, "PADDLE_LAUNCHER_RESTART_COUNT=0");
        assert_contains(&out, "http_proxy_original=http://proxy.example:3128");
        assert!(!out.contains("http_proxy=http"), "{out}");
        assert!(!out.contains(SECRET), "{out}");
        assert!(!out.contains("PADDLE_LAUNCHER_JOB_SECRET"), "{out}");
        // Each line may carry the launcher's mark before the program's own text.
        let settings: Vec<&str> = out
            .lines()
            .filter_map(|line| line.find("PADDLE_LAUNCHER_").map(|at| &line[at..]))
            .filter_map(|text| text.split_once('=').map(|(name, _)| name))
            .filter(|name| !CONTRACT.contains(name))
            .collect();
        assert!(
            settings.is_empty(),
            "the launcher's settings reached the program: {settings:?}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let done = Launcher::start(
        dir.path(),
        "local",
        &[
            "local",
            "--job-name",
            "nosee",
            "--trainers",
            "2",
            "--protocol",
            "collective",
            "--max-restarts",
            "1",
            "--control-port",
            &free_ports(1).to_string(),
            "--trainer-port",
            &free_ports(1).to_string(),
            "--",
            "env",
        ],
        &[],
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    assert_contains(&done.stdout, "PADDLE_TRAINER_ID=1");
    assert!(
        !done.stdout.contains("PADDLE_LAUNCHER_JOB_SECRET"),
        "{}",
        done.stdout
    );
}

/// Launchers given different heartbeat timeouts (2 s on the coordinator, 30 s on a follower,
/// which then beats every 10 s): the link beats for the shorter and is judged by the longer, so
/// a healthy job runs to its end in epoch 0 instead of losing the follower 2 s after the start.
#[test]
fn launchers_with_different_heartbeat_timeouts_do_not_take_each_other_for_silent() {
    let mut job = Job::new("beats", 2, 1);
    job.program = [
        "sh",
        "-c",
        "echo count=$PADDLE_LAUNCHER_RESTART_COUNT done; sleep 7",
    ]
    .map(String::from)
    .to_vec();
    // Pod 0 has the lower address: it ranks first and coordinates.
    job.create_pod();
    job.extra_env = vec![("PADDLE_LAUNCHER_HEARTBEAT_TIMEOUT", "30".to_string())];
    job.create_pod();
    job.all_finish_in_epoch(0);
    let coordinator_log = job.stderr(0);
    assert_contains(
        &coordinator_log,
        "beats-1 was given a heartbeat timeout of 30.0 s and this launcher 2.0 s",
    );
    assert!(
        !coordinator_log.contains("sent no heartbeat"),
        "{coordinator_log}"
    );
}

/// A job restarted whole starts fresh launchers, and a batch system may not say it restarted
/// (a Job whose pods were all lost, Kueue's preemption and resume): the collective example
/// resumes from the checkpoint it finds whatever the restart count, instead of overwriting
/// its progress from step 1.
#[test]
fn real_paddle_example_resumes_from_a_checkpoint_it_finds_on_a_fresh_start() {
    let dir = tempfile::tempdir().unwrap();
    let (out, checkpoints) = (dir.path().join("out"), dir.path().join("checkpoints"));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&checkpoints).unwrap();
    let checkpoint = serde_json::json!({
        "step": 30,
        "params": {"weight": [[3.0], [-2.0]], "bias": [1.0]},
    });
    std::fs::write(checkpoints.join("checkpoint.json"), checkpoint.to_string()).unwrap();
    let train = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/collective/train.py");
    let done = Launcher::start(
        dir.path(),
        "local",
        &[
            "local",
            "--job-name",
            "fresh",
            "--trainers",
            "2",
            "--protocol",
            "collective",
            "--trainer-port",
            &free_ports(1).to_string(),
            "--",
            &paddle_python(),
            &train.display().to_string(),
            &out.display().to_string(),
            &checkpoints.display().to_string(),
        ],
        &[
            ("PADDLE_DISTRI_BACKEND", "gloo".to_string()),
            ("HOME", dir.path().display().to_string()),
        ],
    )
    .wait(LIMIT);
    assert_eq!(done.code(), 0, "{}\n{}", done.stdout, done.stderr);
    for (rank, result) in example_results(&out, 2, &[done.stdout]).iter().enumerate() {
        assert_eq!(result["restart_count"], 0);
        assert_eq!(result["resumed_after_step"], 30, "rank {rank}");
        // Resumed from the exact fit: no step starts from random weights.
        assert!(result["first_loss"].as_f64().unwrap() < 0.01, "{result}");
    }
}

/// The coordinator named by DNS is killed while its name still points at its old address (as
/// with `publishNotReadyAddresses` while the old pod terminates): the survivors, knocking at the
/// old address, look the name up again and gather anew as soon as it moves to the replacement,
/// instead of waiting out the whole join grace (a minute and more) first.
#[test]
fn followers_of_a_coordinator_name_follow_it_when_it_moves() {
    const NAME: &str = "moved-0.pods.paddle.test";
    let mut job = Job::new("moved", 3, 1);
    let dns = job.coordinator_named(NAME);
    let first = job.reserve_ip();
    dns.set_records(&[(&first, NAME)]);
    job.start_training(3);
    job.kill_pod(0);
    // The survivors stop their trainers and knock at the old address, which the name keeps.
    for i in [1, 2] {
        job.launcher(i)
            .wait_for_output("restarting the job (restart 1 of 1)", LIMIT);
        job.launcher(i)
            .wait_for_output("waiting for the coordinator at", LIMIT);
    }
    let next = job.reserve_ip();
    dns.set_records(&[(&next, NAME)]);
    let replacement = job.create_pod();
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with(&outputs, 1, &endpoints(&job, &[1, 2, replacement]));
    for i in [1, 2] {
        let log = job.stderr(i);
        assert_contains(&log, "and the coordinator's name now points at");
        assert!(!log.contains("could not be reached for"), "{log}");
    }
}

/// A split pserver pod whose watch of the trainer pods is refused while it gathers (a Role
/// being edited, a token rotating) watches them again when the attempt starts: it still ends
/// with the job's success, not serving for ever.
#[test]
fn a_trainer_watch_refused_while_gathering_is_started_again_for_the_attempt() {
    let mut job = SplitJob::put("splitrefused", 0, 15, 0, true, false);
    // ps-1's launcher starts last: the others gather meanwhile, and the API refuses them.
    for i in [0, 2, 3] {
        job.launch(i);
    }
    job.launcher(0)
        .wait_for_output("control channel: following", LIMIT);
    job.launcher(3)
        .wait_for_output("control channel: following", LIMIT);
    std::thread::sleep(Duration::from_secs(1));
    job.cluster.api.set_forbidden(true);
    job.cluster.api.end_watches();
    job.launcher(0).wait_for_output(
        "the trainer pods are watched again when the attempt starts",
        LIMIT,
    );
    job.cluster.api.set_forbidden(false);
    job.launch(1);
    job.launcher(0).wait_for_output(
        "staying a member of the job until its trainers are done",
        LIMIT,
    );
    for i in [2, 3, 1, 0] {
        job.ends(i, 0);
    }
}

/// An elastic job's trainer: what it was told, with its world now and at full size; trains
/// (sleeps) until the job has restarted twice, then ends.
const ELASTIC_PROGRAM: &str = r#"echo "rank=$PADDLE_TRAINER_ID count=$PADDLE_LAUNCHER_RESTART_COUNT endpoints=$PADDLE_TRAINER_ENDPOINTS world=$PADDLE_TRAINERS_NUM of=$PADDLE_LAUNCHER_FULL_WORLD_SIZE"
if [ "$PADDLE_LAUNCHER_RESTART_COUNT" -lt "${DONE_FROM:-2}" ]; then exec sleep 120; fi
exec sleep 2"#;

/// A job of 3 pods that may train with 2 (`--min-pods 2`), waiting 3 s for a replacement;
/// pod 0 is named the coordinator (by its address).
fn elastic_job(name: &'static str) -> Job {
    let mut job = Job::new(name, 3, 2);
    job.named_coordinator = true;
    job.program = ["sh", "-c", ELASTIC_PROGRAM].map(String::from).to_vec();
    job.extra_env.extend([
        ("PADDLE_LAUNCHER_MIN_PODS", "2".to_string()),
        ("PADDLE_LAUNCHER_ELASTIC_WAIT", "3".to_string()),
    ]);
    job
}

/// 3 pods, at least 2: a pod lost whose replacement stays Pending (Unschedulable) -> the 2
/// live pods train on as a 2-pod job (dense ranks, their endpoints, world 2 of 3, the restart
/// spent); the replacement scheduled -> it arrives, and the job grows back to 3 pods (a free
/// restart: two restarts in all, the budget of 2 not exceeded by the grow) and completes. The
/// Job records the grow as a free restart that is a grow (not among the free preemptions).
#[test]
fn an_elastic_job_trains_on_without_a_lost_pod_and_grows_back() {
    let mut job = elastic_job("elastic");
    let api = job.cluster.api.clone();
    api.put_job(job_object("elastic", 3, serde_json::json!({})));
    job.start_training(3);
    job.kill_pod(1);
    let replacement = job.create_pending_pod();
    for i in [0, 2] {
        job.launcher(i).wait_for_output("count=1 ", LIMIT);
    }
    let told = |i: usize| job.launcher(i).stdout_so_far();
    let two = endpoints(&job, &[0, 2]);
    for (rank, i) in [0, 2].into_iter().enumerate() {
        let line = epoch_lines(&[told(i)], 1).pop().unwrap();
        assert!(line.starts_with(&format!("rank={rank} count=1 ")), "{line}");
        assert!(line.ends_with(" world=2 of=3"), "{line}");
        let ips: Vec<&str> = line
            .split(" endpoints=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .split(',')
            .map(|e| e.rsplit_once(':').unwrap().0)
            .collect();
        assert_eq!(ips, two, "{line}");
    }
    assert_contains(&job.stderr(0), "elastic job: starting with 2 of 3 pods");
    job.run_pod(replacement);
    let outputs = job.all_finish_in_epoch(2);
    assert_restarted_with_world(&outputs, 2, &endpoints(&job, &[0, 2, replacement]));
    let coordinator = job.stderr(0);
    assert_contains(
        &coordinator,
        &format!("the job grows: elastic-{replacement} joined"),
    );
    assert_contains(
        &coordinator,
        "restarting the job (restart 2 with the pods that joined, which spends none of the 2 restarts)",
    );
    assert_only_coordinators_used_the_api(&job, &[0]);
    // The job's story in its events, told by the coordinator.
    let told: Vec<String> = job
        .cluster
        .api
        .events()
        .iter()
        .map(|e| {
            let field = |name: &str| e[name].as_str().unwrap_or_default().to_string();
            format!("{}: {}", field("reason"), field("message"))
        })
        .collect();
    let recorded = |key: &str| api.job_annotation("default", "elastic", key);
    assert_eq!(recorded(RESTART_COUNT).as_deref(), Some("2"));
    assert_eq!(recorded(PREEMPTIONS).as_deref(), Some("1"));
    assert_eq!(
        recorded("paddle-launcher.paddlepaddle.org/grows").as_deref(),
        Some("1")
    );
    for expected in [
        "Started: 2 of the job's 3 pods found (elastic, at least 2): training started (after 1 restart)".to_string(),
        "ScaledDown: from 3 of 3 to 2 of 3 pods: elastic-1 not Running again within the elastic wait of 3 s".to_string(),
        format!("ScaledUp: from 2 of 3 to 3 of 3 pods: elastic-{replacement} joined"),
    ] {
        assert!(told.contains(&expected), "{expected}\n{told:#?}");
    }
}

/// The elastic wait is a wait: 3 pods, at least 2, waiting 10 s; pod 1 lost, its replacement
/// Running 1 s later: the job restarts once with all 3 (no smaller start, no grow after it).
#[test]
fn an_elastic_job_waits_its_elastic_wait_for_a_replacement() {
    let mut job = elastic_job("elwait");
    job.extra_env.extend([
        ("PADDLE_LAUNCHER_ELASTIC_WAIT", "10".to_string()),
        ("DONE_FROM", "1".to_string()),
    ]);
    job.start_training(3);
    job.kill_pod(1);
    let replacement = job.create_pending_pod();
    std::thread::sleep(Duration::from_secs(1));
    job.run_pod(replacement);
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with_world(&outputs, 1, &endpoints(&job, &[0, 2, replacement]));
    let coordinator = job.stderr(0);
    assert!(
        !coordinator.contains("elastic job: starting with"),
        "{coordinator}"
    );
    assert!(!coordinator.contains("count=2 "), "{coordinator}");
}

/// An elastic job of 3 pods x 2 processes, at least 2 pods: every process is told its id of
/// the epoch's world and the job's full world (`PADDLE_LAUNCHER_FULL_WORLD_SIZE`, pods x
/// processes). Pod 1 lost, its replacement Pending: the 2 live pods train on as 4 ranks of 6.
/// A replacement given 1 process (a template edit) is turned away, saying why on both sides,
/// and the job trains on; one given 2 arrives and the job grows back to 6 ranks of 6.
#[test]
fn an_elastic_job_of_two_processes_per_pod_shrinks_turns_away_and_grows_back() {
    let mut job = elastic_job("elnp");
    job.extra_env
        .push(("PADDLE_LAUNCHER_NPROC_PER_POD", "2".to_string()));
    job.start_training(3);
    // Both of pod 0's processes have said what they were given.
    job.launcher(0).wait_for_output("rank=1 count=0 ", LIMIT);
    let first = epoch_lines(&[job.launcher(0).stdout_so_far()], 0);
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first[0].starts_with("rank=0 count=0 ") && first[0].ends_with(" world=6 of=6"));
    job.kill_pod(1);
    let odd = job.create_pending_pod();
    // Each process of the 2 pods left (ranks 0-3 now) has said what it was given.
    for (i, rank) in [(0, 0), (0, 1), (2, 2), (2, 3)] {
        job.launcher(i)
            .wait_for_output(&format!("rank={rank} count=1 "), LIMIT);
    }
    let told = |job: &Job, pods: &[usize], epoch: u32| -> Vec<String> {
        let outputs: Vec<String> = pods
            .iter()
            .map(|&i| job.launcher(i).stdout_so_far())
            .collect();
        epoch_lines(&outputs, epoch)
    };
    // Ranks 0-3, pod-major: each pod's endpoints side by side.
    let shrunk = told(&job, &[0, 2], 1);
    let pods = endpoints(&job, &[0, 2]);
    assert_eq!(shrunk.len(), 4, "{shrunk:?}");
    for (rank, line) in shrunk.iter().enumerate() {
        assert!(line.starts_with(&format!("rank={rank} count=1 ")), "{line}");
        assert!(line.ends_with(" world=4 of=6"), "{line}");
        let list = line
            .split(" endpoints=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let ips: Vec<&str> = list
            .split(',')
            .map(|e| e.rsplit_once(':').unwrap().0)
            .collect();
        assert_eq!(ips, [&pods[0], &pods[0], &pods[1], &pods[1]], "{line}");
    }
    // The replacement runs 1 process: turned away, the job trains on in epoch 1.
    job.extra_env
        .push(("PADDLE_LAUNCHER_NPROC_PER_POD", "1".to_string()));
    job.run_pod(odd);
    job.launcher(odd)
        .wait_for_output("turned away by the job's coordinating launcher", LIMIT);
    job.launcher(0).wait_for_output(
        &format!("elnp-{odd} cannot join the job, turned away"),
        LIMIT,
    );
    assert_contains(
        &job.stderr(odd),
        &format!("pod elnp-{odd} runs 1 trainer process and pod elnp-0"),
    );
    assert!(!job.launcher(0).stdout_so_far().contains("count=2 "));
    job.kill_pod(odd);
    job.extra_env.pop();
    let replacement = job.create_pod();
    let outputs = job.all_finish_in_epoch(2);
    let grown = epoch_lines(&outputs, 2);
    assert_eq!(grown.len(), 6, "{grown:?}");
    for (rank, line) in grown.iter().enumerate() {
        assert!(line.starts_with(&format!("rank={rank} count=2 ")), "{line}");
        assert!(line.ends_with(" world=6 of=6"), "{line}");
    }
    assert_contains(
        &job.stderr(0),
        &format!("the job grows: elnp-{replacement} joined"),
    );
}

/// Two of 3 pods lost with a minimum of 2: the survivor trains alone in no epoch; it says
/// what it waits for (the minimum, the Running count, the missing pods) while it waits, and
/// ends at the wait timeout.
#[test]
fn an_elastic_job_below_its_minimum_trains_nowhere() {
    let mut job = elastic_job("alone");
    job.extra_env
        .push(("PADDLE_LAUNCHER_WAIT_TIMEOUT", "8".to_string()));
    job.start_training(3);
    job.kill_pod(1);
    job.kill_pod(2);
    let done = job.created[0].2.take().unwrap().wait(LIMIT);
    assert_eq!(done.code(), 71, "{}", done.stderr);
    assert!(!done.stdout.contains("count=1 "), "{}", done.stdout);
    assert_contains(
        &done.stderr,
        "elastic (--min-pods 2): 1 Running, fewer than 2: no pod trains until 2 are",
    );
}

/// Real PaddlePaddle (CPU, gloo) in an elastic job: 3 pods, at least 2; the collective example
/// checkpoints every step; a pod is killed mid-training and its replacement stays Pending
/// (Unschedulable). The 2 live pods resume from the checkpoint as a 2-rank job (restart 1,
/// world 2 in Paddle's own count) and finish with identical parameters (each rank trains on
/// its own data: only a working all-reduce over the new world keeps them equal).
#[test]
fn real_paddle_resumes_as_a_smaller_job_when_a_lost_pods_replacement_cannot_run() {
    let mut job = elastic_job("relastic");
    let out = job.run_collective_example();
    job.create_pods(3);
    job.launcher(1).wait_for_output("rank 1: step 10 ", LIMIT);
    job.kill_pod(1);
    job.create_pending_pod();
    let outputs = job.all_finish();
    let results = example_results(&out, 2, &outputs);
    // The launchers' logs too, should it fail: why an attempt ended is said there.
    let mut said = outputs.clone();
    said.extend((0..3).map(|i| job.stderr(i)));
    assert_resumed_from_the_checkpoint(&results, &said);
    for (rank, result) in results.iter().enumerate() {
        assert_eq!(result["env_trainer_id"], rank, "rank {rank}");
    }
    // No third rank trained in the smaller job.
    assert!(!out.join("result-2.json").exists(), "{outputs:?}");
    assert_contains(&job.stderr(0), "elastic job: starting with 2 of 3 pods");
}

/// `assert_restarted_with`, each line also telling the world at full size.
fn assert_restarted_with_world(outputs: &[String], epoch: u32, members: &[String]) {
    let lines: Vec<String> = epoch_lines(outputs, epoch)
        .into_iter()
        .map(|l| {
            let (line, world) = l.rsplit_once(" world=").unwrap();
            assert_eq!(world, format!("{} of=3", members.len()), "{l}");
            line.to_string()
        })
        .collect();
    assert_restarted_with(&lines, epoch, members);
}

/// The coordinator named by DNS (as `manifest` names pod 0) and its pod lost: no survivor can
/// take its place (the name is the coordinator), so none trains while the name has no
/// address, past the elastic wait; its replacement, once Running at the name, coordinates and
/// the job goes on with every pod.
#[test]
fn an_elastic_job_waits_for_its_named_coordinators_replacement() {
    const NAME: &str = "eldns-0.pods.paddle.test";
    let mut job = elastic_job("eldns");
    job.extra_env.push(("DONE_FROM", "1".to_string()));
    let dns = job.coordinator_named(NAME);
    let first = job.reserve_ip();
    dns.set_records(&[(&first, NAME)]);
    job.start_training(3);
    dns.set_records(&[]);
    job.kill_pod(0);
    let next = job.reserve_ip();
    let replacement = job.create_pending_pod();
    job.launcher(1)
        .wait_for_output("waiting for the coordinator's address", LIMIT);
    std::thread::sleep(Duration::from_secs(5));
    for i in [1, 2] {
        let told = job.launcher(i).stdout_so_far();
        assert!(
            !told.contains("count=1 "),
            "pod {i} trained without its coordinator: {told}"
        );
    }
    dns.set_records(&[(&next, NAME)]);
    job.run_pod(replacement);
    let outputs = job.all_finish_in_epoch(1);
    assert_restarted_with_world(&outputs, 1, &endpoints(&job, &[1, 2, replacement]));
}

/// Without a named coordinator every launcher would decide the epoch on its own clock: an
/// elastic job without one is refused at the start, in one line naming --min-pods and what to
/// use.
#[test]
fn an_elastic_job_without_a_named_coordinator_is_refused() {
    let mut job = elastic_job("elnone");
    job.named_coordinator = false;
    job.create_pods(1);
    let done = job.created[0].2.take().unwrap().wait(LIMIT);
    assert_eq!(done.code(), 2, "{}", done.stderr);
    assert_contains(
        &done.stderr,
        "invalid PADDLE_LAUNCHER_MIN_PODS (--min-pods): \"2\": expected unset without a named coordinator: --coordinator HOST:PORT",
    );
}
