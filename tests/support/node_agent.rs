//! The node agent: the one stand-in of the real-cluster tests, playing the kubelet of a few
//! nodes (docs/development.md, "A real control plane"). The real scheduler binds the pods that
//! the real controllers create to these nodes; the agent then does what a kubelet does for them,
//! through the real API:
//! - registers each Node (capacity as a kubelet reports it, `nvidia.com/gpu` where asked) and
//!   renews its Lease in `kube-node-lease` (the node lifecycle controller reads it);
//! - runs a bound pod's one container as a process (argv from `command`/`args`, the image's
//!   entrypoint being the launcher the tests built), on an address of its own (127.x.y.z), its
//!   environment resolved as the kubelet does (`value` with `$(VAR)` expansion, `fieldRef`,
//!   `secretKeyRef`, `configMapKeyRef`), Secret and emptyDir volumes as directories;
//! - reports `Running` with `podIP`/`podIPs` and the container's state, and on exit `terminated`
//!   with the exit code, the reason and the termination message file's text; honours
//!   `restartPolicy` (a restart in place counts in `restartCount`);
//! - on deletion sends SIGTERM to the process, waits the grace period, then SIGKILL to its
//!   process group, reports the terminal phase and finishes the deletion (grace 0).
//!
//! What a container runtime gives that processes on one machine cannot have is translated, and
//! only that: a path under a volume's `mountPath` (in the environment, the argv or `workingDir`)
//! is the volume's directory; the ServiceAccount token the kubelet projects (a TokenRequest for
//! the pod's ServiceAccount, bound to the pod) is in a kubeconfig named by `KUBECONFIG`, with
//! the cluster's CA, as `/var/run/secrets/kubernetes.io/serviceaccount` cannot be mounted per
//! process; the termination message path is named by `PADDLE_LAUNCHER_TERMINATION_LOG`.
//!
//! A node's death: the agent stops renewing its Lease and reporting its pods, and freezes their
//! processes (SIGSTOP to each process group: no FIN, no RST), as a dead kubelet does nothing.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use super::control_plane::{control_plane, kubeconfig_text, spawn, ControlPlane};

/// How often the agent looks at its pods and processes (a kubelet reacts to watch events; this
/// polls the real API instead, which only delays it by up to this).
const TICK: Duration = Duration::from_millis(250);
/// How often a live node's Lease is renewed (kubelet: every 10 s of a 40 s lease).
const LEASE_RENEW: Duration = Duration::from_secs(2);
/// The pause before a container is restarted in place (kubelet: 10 s backoff at first).
const RESTART_DELAY: Duration = Duration::from_secs(1);
/// What a kubelet keeps of a termination message (4096 bytes, `terminationMessagePath`).
const MESSAGE_MAX: usize = 4096;

/// Where the pods' kubeconfigs send them instead of the API server (`route_pods_through`).
static ROUTE: Mutex<Option<String>> = Mutex::new(None);

/// The pods admitted from now on reach the API server at `url` (a counting proxy in front of
/// it, with the same certificate), or directly again with None.
pub fn route_pods_through(url: Option<String>) {
    *ROUTE.lock().unwrap() = url;
}

fn api_url(plane: &ControlPlane) -> String {
    ROUTE.lock().unwrap().clone().unwrap_or_else(|| plane.url())
}

/// The label and taint of a test's own nodes (`NodeAgent::add_pool_node`).
pub const POOL: &str = "paddle-launcher.test/pool";

/// The agent of this test binary and its nodes.
pub struct NodeAgent {
    shared: Arc<Mutex<Shared>>,
    pub dir: PathBuf,
    /// The cluster's DNS as the pods see it (CoreDNS's part: `dns_records`).
    pub dns: Arc<super::dnsmasq::Dnsmasq>,
}

#[derive(Default)]
struct Shared {
    /// Node name -> alive (a dead node's kubelet does nothing).
    nodes: BTreeMap<String, NodeState>,
    /// Pods the agent runs, by uid.
    pods: BTreeMap<String, PodRun>,
    next_ip: u32,
    /// Which pods' processes were frozen with their node.
    errors: Vec<String>,
}

struct NodeState {
    alive: bool,
    gpus: u32,
    /// A test's own pool: the node's label and NoSchedule taint `POOL=<pool>`, so that only
    /// that test's pods (given the toleration and the node selector) run there.
    pool: Option<String>,
    /// How many pods it takes (a kubelet's `pods` capacity).
    max_pods: u32,
    registered: bool,
    frozen: bool,
}

/// The processes of session `session` (from /proc: a stat line's sixth field).
fn session_members(session: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.get(3).and_then(|f| f.parse::<i32>().ok()) == Some(session) {
            pids.push(pid);
        }
    }
    pids
}

/// One pod this agent runs.
struct PodRun {
    namespace: String,
    name: String,
    uid: String,
    node: String,
    ip: String,
    dir: PathBuf,
    pod: Pod,
    child: Option<Child>,
    /// The session of the container's processes (its first process's pid).
    session: Option<i32>,
    restarts: u32,
    started_at: String,
    /// When the container may start again (restart in place).
    restart_at: Option<Instant>,
    /// A status the API did not take, sent again at the next look.
    unreported: Option<Value>,
    /// The cluster DNS's port (the pod's resolv.conf).
    dns_port: u16,
    /// The deletion's SIGKILL time, once SIGTERM was sent.
    kill_at: Option<Instant>,
    /// Terminal: nothing more runs; a deletion is still finished.
    done: bool,
}

/// The agent, its control plane and two nodes without GPUs started on first use.
pub fn agent() -> &'static NodeAgent {
    static AGENT: OnceLock<NodeAgent> = OnceLock::new();
    AGENT.get_or_init(|| {
        let plane = control_plane();
        let dir = plane.dir.join("nodes");
        std::fs::create_dir_all(&dir).unwrap();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let dns = Arc::new(super::dnsmasq::Dnsmasq::start_with(&plane.dir, spawn));
        let agent = NodeAgent { shared, dir, dns };
        agent.add_node("node-a", 0);
        agent.add_node("node-b", 0);
        let shared = agent.shared.clone();
        let dir = agent.dir.clone();
        let dns = agent.dns.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(run(plane, shared, dir, dns));
        });
        agent.wait_nodes_registered();
        agent
    })
}

impl NodeAgent {
    /// A node with `gpus` GPUs (its `nvidia.com/gpu` capacity), registered by the agent's next
    /// round.
    pub fn add_node(&self, name: &str, gpus: u32) {
        self.insert_node(name, gpus, None, 110);
    }

    /// A node of `pool` for one test (labelled and tainted `POOL=<pool>`) taking `max_pods`
    /// pods, registered before this returns.
    pub fn add_pool_node(&self, name: &str, pool: &str, max_pods: u32) {
        self.insert_node(name, 0, Some(pool.to_string()), max_pods);
        self.wait_nodes_registered();
    }

    fn insert_node(&self, name: &str, gpus: u32, pool: Option<String>, max_pods: u32) {
        let node = NodeState {
            alive: true,
            gpus,
            pool,
            max_pods,
            registered: false,
            frozen: false,
        };
        self.shared
            .lock()
            .unwrap()
            .nodes
            .insert(name.to_string(), node);
    }

    /// The node dies: its Lease is no longer renewed, its pods no longer reported, their
    /// processes frozen.
    pub fn kill_node(&self, name: &str) {
        self.shared
            .lock()
            .unwrap()
            .nodes
            .get_mut(name)
            .unwrap()
            .alive = false;
    }

    fn wait_nodes_registered(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            {
                let s = self.shared.lock().unwrap();
                if s.nodes.values().all(|n| n.registered) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "nodes not registered: {:?}",
                    s.errors
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Everything a pod's container wrote, all its runs.
    pub fn logs(&self, namespace: &str, pod: &str) -> String {
        let dir = self.dir.join(namespace).join(pod);
        let mut runs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        runs.retain(|p| p.extension().is_some_and(|e| e == "log"));
        runs.sort();
        runs.iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    }

    /// Every pod's output of `namespace`, each under its name, for a failure message.
    pub fn all_logs(&self, namespace: &str) -> String {
        let dir = self.dir.join(namespace);
        let mut pods: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default();
        pods.sort();
        pods.iter()
            .map(|p| format!("=== {p}\n{}", self.logs(namespace, p)))
            .collect()
    }

    /// What went wrong in the agent itself (an API call refused), for a failure message.
    pub fn errors(&self) -> Vec<String> {
        self.shared.lock().unwrap().errors.clone()
    }
}

async fn run(
    plane: &'static ControlPlane,
    shared: Arc<Mutex<Shared>>,
    dir: PathBuf,
    dns: Arc<super::dnsmasq::Dnsmasq>,
) {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&plane.admin).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let client = Client::try_from(config).unwrap();
    let mut last_lease = Instant::now() - LEASE_RENEW;
    let mut records = Vec::new();
    loop {
        match dns_records(&client).await {
            Ok(now) if now != records => {
                let pairs: Vec<(&str, &str)> = now
                    .iter()
                    .map(|(ip, name)| (ip.as_str(), name.as_str()))
                    .collect();
                dns.set_records(&pairs);
                records = now;
            }
            Ok(_) => {}
            Err(e) => shared.lock().unwrap().errors.push(format!("dns: {e}")),
        }
        if last_lease.elapsed() >= LEASE_RENEW {
            last_lease = Instant::now();
            if let Err(e) = nodes_round(&client, &shared).await {
                shared.lock().unwrap().errors.push(format!("nodes: {e}"));
            }
        }
        if let Err(e) = pods_round(&client, plane, &shared, &dir, dns.port).await {
            shared.lock().unwrap().errors.push(format!("pods: {e}"));
        }
        tokio::time::sleep(TICK).await;
    }
}

/// The records CoreDNS serves for headless Services: `<hostname>.<service>.<namespace>.svc.
/// cluster.local` for each pod the Service selects that has an address and a hostname, whose
/// subdomain is the Service (not-ready pods only when the Service publishes them, none being
/// deleted), and the same name without `.<namespace>.svc.cluster.local`, as the pod's
/// resolv.conf search path completes it (the launcher is given this DNS server, not a
/// resolv.conf): a short name is the same in every namespace, so the tests give their jobs
/// names of their own. CoreDNS reads them from the EndpointSlices, which the real controller cannot
/// write here: the API refuses loopback addresses in them (`ValidateEndpointIP`), so the agent
/// applies the endpoint slice controller's rule itself.
async fn dns_records(client: &Client) -> Result<Vec<(String, String)>, kube::Error> {
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let pods = pods.list(&ListParams::default()).await?.items;
    let mut records = Vec::new();
    for service in services.list(&ListParams::default()).await?.items {
        let Some(spec) = &service.spec else { continue };
        let (Some(selector), Some("None")) = (&spec.selector, spec.cluster_ip.as_deref()) else {
            continue;
        };
        let name = service.metadata.name.clone().unwrap_or_default();
        let namespace = service.metadata.namespace.clone().unwrap_or_default();
        let publish_not_ready = spec.publish_not_ready_addresses.unwrap_or(false);
        for pod in &pods {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let selected = pod.metadata.namespace.as_deref() == Some(namespace.as_str())
                && selector.iter().all(|(k, v)| labels.get(k) == Some(v));
            let pod_spec = pod.spec.as_ref().unwrap();
            let (Some(host), Some(subdomain)) = (&pod_spec.hostname, &pod_spec.subdomain) else {
                continue;
            };
            let status = pod.status.clone().unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let Some(ip) = status.pod_ip else { continue };
            // endpointslice's ShouldPodBeInEndpoints: a pod that has ended for good is out; its
            // podToEndpoint: ready when the Service publishes not-ready addresses (a pod being
            // deleted included), else when Ready and not being deleted; CoreDNS serves the ready.
            let policy = pod_spec.restart_policy.as_deref().unwrap_or("Always");
            let ended = match status.phase.as_deref() {
                Some("Failed") => policy == "Never",
                Some("Succeeded") => policy != "Always",
                _ => false,
            };
            let ready = publish_not_ready || (ready && pod.metadata.deletion_timestamp.is_none());
            if selected && *subdomain == name && !ended && ready {
                let short = format!("{host}.{name}");
                records.push((ip.clone(), format!("{short}.{namespace}.svc.cluster.local")));
                records.push((ip, short));
            }
        }
    }
    records.sort();
    Ok(records)
}

/// Registers new nodes and renews live nodes' Leases and Ready condition.
async fn nodes_round(client: &Client, shared: &Arc<Mutex<Shared>>) -> Result<(), kube::Error> {
    let nodes: Vec<(String, u32, bool, Option<String>, u32)> = {
        let s = shared.lock().unwrap();
        s.nodes
            .iter()
            .map(|(n, st)| (n.clone(), st.gpus, st.alive, st.pool.clone(), st.max_pods))
            .collect()
    };
    let api: Api<Node> = Api::all(client.clone());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    let now = now();
    for (name, gpus, alive, pool, max_pods) in nodes {
        if !alive {
            continue;
        }
        let mut node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        });
        if let Some(pool) = &pool {
            node["metadata"]["labels"][POOL] = json!(pool);
            node["spec"] =
                json!({"taints": [{"key": POOL, "value": pool, "effect": "NoSchedule"}]});
        }
        let node: Node = serde_json::from_value(node).unwrap();
        match api.create(&PostParams::default(), &node).await {
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        let mut capacity = json!({"cpu": "64", "memory": "256Gi", "pods": max_pods.to_string()});
        if gpus > 0 {
            capacity["nvidia.com/gpu"] = json!(gpus.to_string());
        }
        let status = json!({"status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status (node agent of the tests)",
                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name}],
            "nodeInfo": node_info(),
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
            .await?;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                "renewTime": now_micro()},
        });
        leases
            .patch(
                &name,
                &PatchParams::apply("node-agent").force(),
                &Patch::Apply(&lease),
            )
            .await?;
        shared
            .lock()
            .unwrap()
            .nodes
            .get_mut(&name)
            .unwrap()
            .registered = true;
    }
    Ok(())
}

fn node_info() -> Value {
    json!({"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
        "containerRuntimeVersion": "", "kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
        "operatingSystem": "linux", "architecture": "amd64"})
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn now_micro() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    format!(
        "{}.{:06}Z",
        now.strftime("%Y-%m-%dT%H:%M:%S"),
        now.subsec_microsecond()
    )
}

/// One look at the pods bound to this agent's nodes, and at their processes.
async fn pods_round(
    client: &Client,
    plane: &'static ControlPlane,
    shared: &Arc<Mutex<Shared>>,
    dir: &Path,
    dns_port: u16,
) -> Result<(), kube::Error> {
    let all: Api<Pod> = Api::all(client.clone());
    let listed = all.list(&ListParams::default()).await?;
    let alive: Vec<String> = {
        let mut s = shared.lock().unwrap();
        freeze_dead_nodes(&mut s);
        s.nodes
            .iter()
            .filter(|(_, n)| n.alive)
            .map(|(n, _)| n.clone())
            .collect()
    };
    let mut seen = std::collections::BTreeSet::new();
    for pod in listed.items {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        seen.insert(uid.clone());
        if !alive.contains(&node) {
            continue;
        }
        let known = shared.lock().unwrap().pods.contains_key(&uid);
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if !known && !terminal && pod.metadata.deletion_timestamp.is_none() {
            let run = admit(client, plane, shared, dir, pod.clone(), node, dns_port).await?;
            shared.lock().unwrap().pods.insert(uid.clone(), run);
        }
        if pod.metadata.deletion_timestamp.is_some() {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .unwrap_or(30)
                .max(0) as u64;
            let unknown = {
                let mut s = shared.lock().unwrap();
                match s.pods.get_mut(&uid) {
                    Some(run) if run.kill_at.is_none() => {
                        run.kill_at = Some(Instant::now() + Duration::from_secs(grace));
                        run.signal(nix::sys::signal::Signal::SIGTERM, false);
                        false
                    }
                    Some(_) => false,
                    None => true,
                }
            };
            if unknown {
                // Nothing of it runs here (terminal before the agent saw it): confirm.
                finish_deletion(client, &pod).await?;
            }
        }
    }
    let live: Vec<String> = {
        let mut s = shared.lock().unwrap();
        // A pod gone from the API: whatever still runs of it stops.
        let gone: Vec<String> = s
            .pods
            .keys()
            .filter(|u| !seen.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            let mut run = s.pods.remove(&uid).unwrap();
            run.signal(nix::sys::signal::Signal::SIGKILL, true);
            run.reap();
        }
        s.pods
            .iter()
            .filter(|(_, r)| alive.contains(&r.node))
            .map(|(u, _)| u.clone())
            .collect()
    };
    for uid in live {
        step(client, shared, &uid).await?;
    }
    Ok(())
}

/// Freezes the processes of every pod on a node that died since the last look.
fn freeze_dead_nodes(s: &mut Shared) {
    let dead: Vec<String> = s
        .nodes
        .iter_mut()
        .filter(|(_, n)| !n.alive && !n.frozen)
        .map(|(name, n)| {
            n.frozen = true;
            name.clone()
        })
        .collect();
    for run in s.pods.values_mut().filter(|r| dead.contains(&r.node)) {
        run.signal(nix::sys::signal::Signal::SIGSTOP, true);
    }
}

/// What one pod's process does since the last look: exits, restarts, deletion's SIGKILL.
async fn step(client: &Client, shared: &Arc<Mutex<Shared>>, uid: &str) -> Result<(), kube::Error> {
    enum Next {
        Nothing,
        Report(Value),
        Delete(Box<Pod>),
    }
    let next = {
        let mut s = shared.lock().unwrap();
        let run = s.pods.get_mut(uid).unwrap();
        if let Some(kill_at) = run.kill_at {
            if Instant::now() >= kill_at {
                run.signal(nix::sys::signal::Signal::SIGKILL, true);
            }
        }
        let exited = run.child.as_mut().and_then(|c| c.try_wait().unwrap());
        match exited {
            Some(status) => {
                run.child = None;
                // The container is PID 1 of its namespace: its end ends every process in it.
                run.signal(nix::sys::signal::Signal::SIGKILL, true);
                let code = status.code().unwrap_or_else(|| 128 + signal_of(status));
                let policy = run.restart_policy();
                let restart = run.kill_at.is_none()
                    && (policy == "Always" || (policy == "OnFailure" && code != 0));
                let status = run.terminated_status(code, restart);
                if restart {
                    run.restarts += 1;
                    run.restart_at = Some(Instant::now() + RESTART_DELAY);
                } else {
                    run.done = true;
                }
                Next::Report(status)
            }
            None if run.child.is_none() && run.done && run.kill_at.is_some() => {
                Next::Delete(Box::new(run.pod.clone()))
            }
            None if run.restart_at.is_some_and(|t| Instant::now() >= t)
                && run.kill_at.is_none() =>
            {
                run.restart_at = None;
                run.start();
                Next::Report(run.running_status())
            }
            // A report the API did not take is sent again, as the kubelet's status manager does.
            None => run.unreported.take().map_or(Nothing, Next::Report),
        }
    };
    let (namespace, name) = {
        let s = shared.lock().unwrap();
        let run = &s.pods[uid];
        (run.namespace.clone(), run.name.clone())
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    match next {
        Next::Nothing => {}
        Next::Report(status) => {
            let sent = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
                .await;
            if let Err(e) = sent {
                if let Some(run) = shared.lock().unwrap().pods.get_mut(uid) {
                    run.unreported = Some(status);
                }
                return Err(e);
            }
        }
        Next::Delete(pod) => {
            finish_deletion(client, &pod).await?;
            shared.lock().unwrap().pods.remove(uid);
        }
    }
    use Next::Nothing;
    Ok(())
}

fn signal_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().unwrap_or(0)
}

/// The kubelet's confirmation that nothing of the pod runs: a delete with grace 0, for this uid.
async fn finish_deletion(client: &Client, pod: &Pod) -> Result<(), kube::Error> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut params = DeleteParams::default().grace_period(0);
    params.preconditions = Some(kube::api::Preconditions {
        uid: pod.metadata.uid.clone(),
        resource_version: None,
    });
    match api.delete(&name, &params).await {
        Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(()),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The environment variable that gives a test process's node agent a block of pod addresses of
/// its own: a test that runs in a process of its own (with a control plane and agent of its own,
/// `in_a_control_plane_of_its_own`) runs beside the other tests' pods, and the same addresses
/// in both processes made two pods bind the same address and port (EADDRINUSE, a trainer
/// exiting with status 1 in CI).
pub const IP_BLOCK_ENV: &str = "PADDLE_LAUNCHER_TEST_IP_BLOCK";

/// This process's block of pod addresses: 0 unless `IP_BLOCK_ENV` says 1.
fn ip_block() -> u32 {
    match std::env::var(IP_BLOCK_ENV).as_deref() {
        Err(_) | Ok("0") => 0,
        Ok("1") => 1,
        Ok(other) => panic!("{IP_BLOCK_ENV}={other:?}: expected 0 or 1"),
    }
}

/// The `n`th pod address of `block`: 127.<240 + 5 block + n / 62500 % 5>.<n / 250 % 250>.<n %
/// 250 + 2>, so blocks 0 and 1 never share an address (312,500 addresses each).
fn pod_ip(block: u32, n: u32) -> String {
    format!(
        "127.{}.{}.{}",
        240 + 5 * block + n / 62500 % 5,
        n / 250 % 250,
        n % 250 + 2
    )
}

/// A pod newly bound to one of the agent's nodes: its directory, volumes, token and process.
async fn admit(
    client: &Client,
    plane: &'static ControlPlane,
    shared: &Arc<Mutex<Shared>>,
    dir: &Path,
    pod: Pod,
    node: String,
    dns_port: u16,
) -> Result<PodRun, kube::Error> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let pod_dir = dir.join(&namespace).join(&name);
    std::fs::create_dir_all(&pod_dir).unwrap();
    let ip = {
        let mut s = shared.lock().unwrap();
        s.next_ip += 1;
        pod_ip(ip_block(), s.next_ip)
    };
    volumes(client, &pod, &namespace, &pod_dir).await?;
    let automount = pod
        .spec
        .as_ref()
        .and_then(|s| s.automount_service_account_token);
    if automount != Some(false) {
        service_account_token(client, plane, &pod, &pod_dir).await?;
    }
    let mut run = PodRun {
        namespace,
        name,
        uid,
        node,
        ip,
        dir: pod_dir,
        pod,
        child: None,
        session: None,
        restarts: 0,
        started_at: String::new(),
        restart_at: None,
        unreported: None,
        dns_port,
        kill_at: None,
        done: false,
    };
    let env = resolve_env(client, &run).await?;
    std::fs::write(
        run.dir.join("env.json"),
        serde_json::to_string(&env).unwrap(),
    )
    .unwrap();
    run.start();
    let api: Api<Pod> = Api::namespaced(client.clone(), &run.namespace);
    let reported = api
        .patch_status(
            &run.name,
            &PatchParams::default(),
            &Patch::Strategic(&run.running_status()),
        )
        .await;
    if let Err(e) = reported {
        // Not admitted after all: nothing of it may run while the next round admits it again.
        run.signal(nix::sys::signal::Signal::SIGKILL, true);
        run.reap();
        return Err(e);
    }
    Ok(run)
}

/// Each Secret, ConfigMap and emptyDir volume as a directory `volumes/<name>` of the pod's.
async fn volumes(
    client: &Client,
    pod: &Pod,
    namespace: &str,
    pod_dir: &Path,
) -> Result<(), kube::Error> {
    let spec = pod.spec.as_ref().unwrap();
    for volume in spec.volumes.iter().flatten() {
        let at = pod_dir.join("volumes").join(&volume.name);
        std::fs::create_dir_all(&at).unwrap();
        let (data, items, optional) = if let Some(secret) = &volume.secret {
            let api: Api<k8s_openapi::api::core::v1::Secret> =
                Api::namespaced(client.clone(), namespace);
            let name = secret.secret_name.clone().unwrap_or_default();
            let data = api.get_opt(&name).await?.map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect::<BTreeMap<_, _>>()
            });
            (data, secret.items.clone(), secret.optional.unwrap_or(false))
        } else if let Some(map) = &volume.config_map {
            let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
                Api::namespaced(client.clone(), namespace);
            let data = api.get_opt(&map.name).await?.map(|m| {
                m.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect::<BTreeMap<_, _>>()
            });
            (data, map.items.clone(), map.optional.unwrap_or(false))
        } else {
            continue;
        };
        // A missing optional source is an empty directory; a missing required one would hold
        // the pod in ContainerCreating: the tests create theirs first.
        assert!(
            data.is_some() || optional,
            "volume {} of {namespace}/{:?}: no source",
            volume.name,
            pod.metadata.name
        );
        let data = data.unwrap_or_default();
        match items {
            Some(items) => {
                for item in items {
                    if let Some(bytes) = data.get(&item.key) {
                        std::fs::write(at.join(&item.path), bytes).unwrap();
                    }
                }
            }
            None => {
                for (key, bytes) in &data {
                    std::fs::write(at.join(key), bytes).unwrap();
                }
            }
        }
    }
    Ok(())
}

/// The token a kubelet projects for the pod's ServiceAccount (TokenRequest, bound to the pod),
/// in a kubeconfig with the cluster's CA and the pod's namespace.
async fn service_account_token(
    client: &Client,
    plane: &ControlPlane,
    pod: &Pod,
    pod_dir: &Path,
) -> Result<(), kube::Error> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".to_string());
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &namespace);
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
            "name": pod.metadata.name, "uid": pod.metadata.uid}},
    });
    let answer: k8s_openapi::api::authentication::v1::TokenRequest = api
        .create_subresource("token", &account, &PostParams::default(), &request)
        .await?;
    let token = pod_dir.join("token");
    std::fs::write(&token, answer.status.unwrap().token).unwrap();
    std::fs::write(
        pod_dir.join("kubeconfig"),
        kubeconfig_text(
            &api_url(plane),
            &plane.ca,
            &format!("tokenFile: {}", token.display()),
            &namespace,
        ),
    )
    .unwrap();
    Ok(())
}

/// The container's environment as the kubelet resolves it, in order, `$(VAR)` expanded from
/// the entries before it; paths under a volume's mountPath translated.
async fn resolve_env(client: &Client, run: &PodRun) -> Result<Vec<(String, String)>, kube::Error> {
    let container = run.container();
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => expand(value, &env),
            (None, Some(from)) => {
                if let Some(field) = &from.field_ref {
                    run.field(&field.field_path)
                } else if let Some(key) = &from.secret_key_ref {
                    let api: Api<k8s_openapi::api::core::v1::Secret> =
                        Api::namespaced(client.clone(), &run.namespace);
                    let secret = api.get_opt(&key.name).await?;
                    secret
                        .and_then(|s| s.data)
                        .and_then(|d| {
                            d.get(&key.key)
                                .map(|b| String::from_utf8_lossy(&b.0).to_string())
                        })
                        .unwrap_or_default()
                } else if let Some(key) = &from.config_map_key_ref {
                    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
                        Api::namespaced(client.clone(), &run.namespace);
                    let map = api.get_opt(&key.name).await?;
                    map.and_then(|m| m.data)
                        .and_then(|d| d.get(&key.key).cloned())
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            }
            (None, None) => String::new(),
        };
        env.retain(|(n, _)| *n != var.name);
        env.push((var.name.clone(), run.translate(&value)));
    }
    Ok(env)
}

/// `$(NAME)` replaced by an earlier entry's value (left as written when there is none), `$$`
/// an escaped `$`, as Kubernetes expands env values, command and args.
fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(close) = after.strip_prefix('(').and_then(|a| a.find(')')) {
            let name = &after[1..close + 1];
            match env.iter().rev().find(|(n, _)| n == name) {
                Some((_, value)) => out.push_str(value),
                None => out.push_str(&rest[at..at + close + 3]),
            }
            rest = &after[close + 2..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

impl PodRun {
    fn container(&self) -> &Container {
        &self.pod.spec.as_ref().unwrap().containers[0]
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .unwrap()
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into())
    }

    /// A `fieldRef`'s value, as the downward API gives it.
    fn field(&self, path: &str) -> String {
        let meta = &self.pod.metadata;
        let quoted = |prefix: &str| {
            path.strip_prefix(prefix)
                .and_then(|p| p.strip_suffix("']"))
                .map(str::to_string)
        };
        let entry = |map: &Option<std::collections::BTreeMap<String, String>>, key: String| {
            map.as_ref()
                .and_then(|m| m.get(&key).cloned())
                .unwrap_or_default()
        };
        if let Some(key) = quoted("metadata.labels['") {
            return entry(&meta.labels, key);
        }
        if let Some(key) = quoted("metadata.annotations['") {
            return entry(&meta.annotations, key);
        }
        match path {
            "metadata.name" => meta.name.clone().unwrap_or_default(),
            "metadata.namespace" => self.namespace.clone(),
            "metadata.uid" => self.uid.clone(),
            "status.podIP" | "status.podIPs" => self.ip.clone(),
            "status.hostIP" | "status.hostIPs" => "127.0.0.1".into(),
            "spec.nodeName" => self.node.clone(),
            "spec.serviceAccountName" => self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            other => panic!("fieldRef {other} is not played by the node agent"),
        }
    }

    /// A path under one of the container's mounts, as this machine sees it (the longest mount
    /// that holds it).
    fn translate(&self, value: &str) -> String {
        let container = self.container();
        let mut best: Option<(usize, PathBuf)> = None;
        for mount in container.volume_mounts.iter().flatten() {
            let root = mount.mount_path.trim_end_matches('/');
            let inside = value == root || value.starts_with(&format!("{root}/"));
            if inside && best.as_ref().is_none_or(|(len, _)| root.len() > *len) {
                let host = self.dir.join("volumes").join(&mount.name);
                let host = match &mount.sub_path {
                    Some(sub) if !sub.is_empty() => host.join(sub),
                    _ => host,
                };
                best = Some((
                    root.len(),
                    PathBuf::from(format!("{}{}", host.display(), &value[root.len()..])),
                ));
            }
        }
        best.map_or_else(|| value.to_string(), |(_, p)| p.display().to_string())
    }

    /// Starts the container's process: its own process group (the container's PID namespace),
    /// output to a log file per run.
    fn start(&mut self) {
        let env: Vec<(String, String)> =
            serde_json::from_str(&std::fs::read_to_string(self.dir.join("env.json")).unwrap())
                .unwrap();
        let container = self.container().clone();
        let mut argv: Vec<String> = match &container.command {
            Some(command) if !command.is_empty() => {
                command.iter().map(|a| expand(a, &env)).collect()
            }
            // The image's ENTRYPOINT is the launcher, its CMD `run` (README's Dockerfile).
            _ => vec![super::LAUNCHER.to_string()],
        };
        match &container.args {
            Some(args) => argv.extend(args.iter().map(|a| expand(a, &env))),
            None if container.command.is_none() => argv.push("run".into()),
            None => {}
        }
        let argv: Vec<String> = argv.iter().map(|a| self.translate(a)).collect();
        let program = if argv[0] == "paddle-launcher" || argv[0].ends_with("/paddle-launcher") {
            super::LAUNCHER.to_string()
        } else {
            argv[0].clone()
        };
        let log = self.dir.join(format!("run-{:03}.log", self.restarts));
        let file = std::fs::File::create(&log).unwrap();
        let message = self.dir.join("termination-log");
        std::fs::write(&message, "").unwrap();
        let workdir = container
            .working_dir
            .as_deref()
            .map_or_else(|| self.dir.clone(), |w| PathBuf::from(self.translate(w)));
        let mut command = Command::new(program);
        command
            .args(&argv[1..])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOSTNAME", self.hostname())
            .envs(
                // No token, no kubeconfig: `automountServiceAccountToken: false`.
                Some(self.dir.join("kubeconfig"))
                    .filter(|k| k.exists())
                    .map(|k| ("KUBECONFIG", k)),
            )
            .env("HOME", &self.dir)
            .env(
                "PADDLE_LAUNCHER_DNS_SERVER",
                format!("127.0.0.1:{}", self.dns_port),
            )
            .env("PADDLE_LAUNCHER_TERMINATION_LOG", &message)
            .envs(env)
            .current_dir(&workdir)
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let child = spawn(command);
        self.session = Some(child.id() as i32);
        self.child = Some(child);
        self.started_at = now();
    }

    fn hostname(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| self.name.clone())
    }

    /// `signal` to the container's first process, or with `all` to every process of the
    /// container: its session (the first process is its leader; the launcher gives its children
    /// process groups of their own, in the same session).
    fn signal(&mut self, signal: nix::sys::signal::Signal, all: bool) {
        let Some(session) = self.session else { return };
        let pids = if all {
            session_members(session)
        } else {
            vec![session]
        };
        for pid in pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn base_status(&self, ready: bool) -> Value {
        let ready = if ready { "True" } else { "False" };
        let now = now();
        let condition = |kind: &str, status: &str| json!({"type": kind, "status": status, "lastTransitionTime": now});
        json!({
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "startTime": self.started_at,
            "conditions": [condition("PodReadyToStartContainers", "True"),
                condition("Initialized", "True"), condition("Ready", ready),
                condition("ContainersReady", ready), condition("PodScheduled", "True")],
        })
    }

    fn container_status(&self, state: Value, ready: bool) -> Value {
        json!([{
            "name": self.container().name,
            "image": self.container().image.clone().unwrap_or_default(),
            "imageID": "", "containerID": format!("agent://{}-{}", self.uid, self.restarts),
            "ready": ready, "started": ready, "restartCount": self.restarts, "state": state,
        }])
    }

    fn running_status(&self) -> Value {
        let mut status = self.base_status(true);
        status["phase"] = json!("Running");
        status["containerStatuses"] =
            self.container_status(json!({"running": {"startedAt": self.started_at}}), true);
        json!({ "status": status })
    }

    /// The status after the process ended with `code`: still Running when it restarts in place,
    /// else the terminal phase.
    fn terminated_status(&self, code: i32, restarting: bool) -> Value {
        let message = self.termination_message(code);
        let terminated = json!({"exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "message": message, "startedAt": self.started_at, "finishedAt": now()});
        let mut status = self.base_status(false);
        if restarting {
            status["phase"] = json!("Running");
            let mut containers =
                self.container_status(json!({"waiting": {"reason": "CrashLoopBackOff"}}), false);
            containers[0]["lastState"] = json!({ "terminated": terminated });
            status["containerStatuses"] = containers;
        } else {
            status["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
            status["containerStatuses"] =
                self.container_status(json!({ "terminated": terminated }), false);
        }
        json!({ "status": status })
    }

    /// The termination message file's text, or with `FallbackToLogsOnError` and a failure, the
    /// log's last lines, as the kubelet takes them.
    fn termination_message(&self, code: i32) -> String {
        let file = std::fs::read(self.dir.join("termination-log")).unwrap_or_default();
        // The kubelet reads the file's last 4096 bytes (tail.ReadAtMost).
        let tail = &file[file.len().saturating_sub(MESSAGE_MAX)..];
        let mut text = String::from_utf8_lossy(tail).to_string();
        let fallback =
            self.container().termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        if text.is_empty() && fallback && code != 0 {
            let log =
                std::fs::read_to_string(self.dir.join(format!("run-{:03}.log", self.restarts)))
                    .unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            text = lines[lines.len().saturating_sub(80)..].join("\n");
            let mut from = text.len().saturating_sub(2048);
            while !text.is_char_boundary(from) {
                from += 1;
            }
            text = text[from..].to_string();
        }
        text
    }
}
