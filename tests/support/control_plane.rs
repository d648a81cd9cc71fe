//! The real Kubernetes control plane (docs/development.md, "A real control plane"): etcd,
//! kube-apiserver with RBAC, kube-controller-manager, kube-scheduler and the JobSet controller,
//! built from the official Go modules by tests/cluster/build.sh and started here once per test
//! binary on free loopback ports, with certificates made at start.
//!
//! Every process is spawned by one thread that lives as long as the test binary, with
//! PR_SET_PDEATHSIG: when the test binary ends, however it ends, the kernel kills them (Linux
//! sends the signal when the spawning *thread* ends, so no test's thread may spawn them).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a component may take to answer ready: a cold API server on 2 busy cores takes
/// about 20 s; the limit guards against a component that never comes up.
const READY_LIMIT: Duration = Duration::from_secs(180);

/// The binaries tests/cluster/build.sh makes.
pub fn binary(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/cluster/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run `bash tests/cluster/build.sh` (it builds the control plane from the \
         Go modules; needs Go 1.26 or later on PATH: https://go.dev/dl/)",
        path.display()
    );
    path
}

/// `argv` spawned, its output appended to `log`.
fn spawn_logged(argv: &[std::ffi::OsString], log: &Path) -> Child {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    spawn(command)
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `command` from the one long-lived spawning thread, its death signal SIGKILL.
pub fn spawn(mut command: Command) -> Child {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::spawn(move || {
            for (mut command, reply) in rx {
                // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
                unsafe {
                    command.pre_exec(|| {
                        if nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                let _ = reply.send(command.spawn());
            }
        });
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    command.stdin(Stdio::null());
    sender.lock().unwrap().send((command, tx)).unwrap();
    rx.recv().unwrap().expect("spawn a control plane process")
}

/// One running component: its process and its log.
pub struct Component {
    pub name: &'static str,
    pub child: Mutex<Child>,
    pub log: PathBuf,
    /// Its program and arguments, to start it again.
    argv: Vec<std::ffi::OsString>,
}

impl Component {
    fn start(name: &'static str, dir: &Path, command: Command) -> Component {
        let log = dir.join(format!("{name}.log"));
        let mut argv = vec![command.get_program().to_os_string()];
        argv.extend(command.get_args().map(|a| a.to_os_string()));
        let child = Mutex::new(spawn_logged(&argv, &log));
        Component {
            name,
            child,
            log,
            argv,
        }
    }

    /// Stops it (SIGTERM, as a node's shutdown does; SIGKILL after 30 s) and starts it again
    /// with the same arguments, its log going on in the same file.
    pub fn restart(&self) {
        let mut child = self.child.lock().unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        *child = spawn_logged(&self.argv, &self.log);
    }

    /// Its log's errors (klog's E and F lines) and last lines, for a failure message.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let errors: Vec<&str> = lines
            .iter()
            .filter(|l| l.starts_with('E') || l.starts_with('F'))
            .copied()
            .collect();
        let errors = &errors[errors.len().saturating_sub(10)..];
        let last = &lines[lines.len().saturating_sub(20)..];
        format!(
            "errors:\n{}\nlast lines:\n{}",
            errors.join("\n"),
            last.join("\n")
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// Waits until it answers ready again (after `restart`).
    pub fn wait_ready(&self, ready: impl Fn() -> bool) {
        wait_ready(self, ready);
    }

    /// Fails the test with the log's tail when the component has exited.
    fn assert_alive(&self) {
        if let Some(status) = self.child.lock().unwrap().try_wait().unwrap() {
            panic!(
                "{} exited ({status}); its log ({}):\n{}",
                self.name,
                self.log.display(),
                self.tail()
            );
        }
    }
}

/// The control plane of this test binary.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub api_port: u16,
    /// A kubeconfig with the admin client certificate (system:masters).
    pub admin: PathBuf,
    pub ca: PathBuf,
    /// The API server's audit log: one JSON line per request of a ServiceAccount.
    pub audit_log: PathBuf,
    pub components: Vec<Component>,
}

/// The control plane, started on first use.
pub fn control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(ControlPlane::start)
}

impl ControlPlane {
    fn start() -> ControlPlane {
        let dir = cluster_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let [etcd_port, etcd_peer, api_port, cm_port, sched_port] = five_free_ports();
        let certs = Certificates::make(&dir, api_port);
        let mut plane = ControlPlane {
            dir: dir.clone(),
            api_port,
            admin: certs.admin_kubeconfig.clone(),
            ca: certs.ca.clone(),
            audit_log: certs.audit_log.clone(),
            components: Vec::new(),
        };

        let mut etcd = Command::new(binary("etcd"));
        etcd.arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
            ))
            .arg(format!(
                "--initial-cluster=default=http://127.0.0.1:{etcd_peer}"
            ))
            // A test's data dies with it: no fsync, as envtest runs it.
            .arg("--unsafe-no-fsync");
        plane.components.push(Component::start("etcd", &dir, etcd));
        wait_ready(&plane.components[0], || http_get_ok(etcd_port, "/health"));

        let apiserver = apiserver_args(
            Command::new(binary("kube-apiserver")),
            &certs,
            etcd_port,
            api_port,
        );
        plane
            .components
            .push(Component::start("kube-apiserver", &dir, apiserver));
        wait_ready(&plane.components[1], || {
            plane.kubectl_ok(&["get", "--raw", "/readyz"])
        });

        let mut cm = Command::new(binary("kube-controller-manager"));
        cm.arg(format!("--kubeconfig={}", certs.admin_kubeconfig.display()))
            .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
            .arg(format!("--secure-port={cm_port}"))
            .arg(
                "--controllers=job-controller,garbage-collector-controller,namespace-controller,\
                 ttl-after-finished-controller,node-lifecycle-controller,serviceaccount-controller,\
                 taint-eviction-controller,pod-garbage-collector-controller",
            )
            // The node lifecycle controller's clock, shortened (docs/development.md): a node
            // whose Lease is not renewed for 20 s is NotReady (Kubernetes: 50 s). Longer than
            // the launchers' heartbeat timeout (10 s), as the default is: a peer's silence is
            // found before the API says its node is gone, in that order as in a cluster.
            .args([
                "--node-monitor-period=1s",
                "--node-monitor-grace-period=20s",
            ])
            .arg(format!("--root-ca-file={}", certs.ca.display()))
            .arg(format!(
                "--service-account-private-key-file={}",
                certs.sa_key.display()
            ));
        plane
            .components
            .push(Component::start("kube-controller-manager", &dir, cm));

        let mut scheduler = Command::new(binary("kube-scheduler"));
        scheduler
            .arg(format!("--kubeconfig={}", certs.admin_kubeconfig.display()))
            .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
            .arg(format!("--secure-port={sched_port}"));
        plane
            .components
            .push(Component::start("kube-scheduler", &dir, scheduler));

        // Each serves /healthz on its secure port to anyone (--authorization-always-allow-paths).
        wait_ready(&plane.components[2], || https_get_ok(cm_port, "/healthz"));
        wait_ready(&plane.components[3], || {
            https_get_ok(sched_port, "/healthz")
        });
        plane
    }

    /// The real kubectl built with the control plane, as the admin.
    pub fn kubectl(&self, args: &[&str]) -> (i32, String, String) {
        self.kubectl_as(&self.admin, args)
    }

    /// The real kubectl with `kubeconfig`.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(binary("kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("kube-cache"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// The API server answers ready.
    pub fn api_ready(&self) -> bool {
        self.kubectl_ok(&["get", "--raw", "/readyz"])
    }

    /// The API server stopped and started again on the same port and etcd, ready again.
    pub fn restart_api_server(&self) {
        let apiserver = &self.components[1];
        apiserver.restart();
        apiserver.wait_ready(|| self.api_ready());
    }

    fn kubectl_ok(&self, args: &[&str]) -> bool {
        self.kubectl(args).0 == 0
    }

    /// kubectl that must succeed; its stdout.
    #[track_caller]
    pub fn kubectl_must(&self, args: &[&str]) -> String {
        let (code, out, err) = self.kubectl(args);
        assert_eq!(code, 0, "kubectl {args:?}: {err}{out}");
        out
    }

    /// kubectl apply of `yaml` (from stdin), as the admin.
    #[track_caller]
    pub fn apply(&self, yaml: &str, extra: &[&str]) -> (i32, String, String) {
        let file = self.dir.join(format!("apply-{}.yaml", unique()));
        std::fs::write(&file, yaml).unwrap();
        let mut args = vec!["apply", "-f", file.to_str().unwrap()];
        args.extend(extra);
        self.kubectl(&args)
    }

    /// Applies the CustomResourceDefinition in `file` and waits until it is Established.
    pub fn register_crd(&self, file: &Path) {
        let out = self.kubectl_must(&[
            "apply",
            "--server-side",
            "-o",
            "name",
            "-f",
            file.to_str().unwrap(),
        ]);
        let name = out.trim();
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            let (_, established, _) = self.kubectl(&[
                "get",
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
            ]);
            if established == "True" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not established after {READY_LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A namespace of its own for one test.
    pub fn namespace(&self, prefix: &str) -> String {
        let name = format!("{prefix}-{}", unique());
        self.kubectl_must(&["create", "namespace", &name]);
        name
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.api_port)
    }
}

/// The control plane's directory, under /var/tmp: not under /tmp (nor under the repository,
/// which may be under /tmp), as the generated pods mount an emptyDir over /tmp and a test's
/// program there would be hidden from them, as it would be in a container (the node agent
/// translates paths under a mount). Those of test binaries that have ended are removed first.
fn cluster_dir() -> PathBuf {
    let root = Path::new("/var/tmp/paddle-launcher-real-cluster");
    std::fs::create_dir_all(root).unwrap();
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !Path::new(&format!("/proc/{name}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = root.join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A number no other call of this test binary gets.
pub fn unique() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn apiserver_args(
    mut command: Command,
    certs: &Certificates,
    etcd_port: u16,
    port: u16,
) -> Command {
    let p = |path: &PathBuf| path.display().to_string();
    command
        .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
        .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        // No `kubernetes` Service endpoints: a loopback address may not be advertised in them,
        // and nothing here reaches the API server through the Service (envtest does the same).
        .arg("--endpoint-reconciler-type=none")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--tls-cert-file={}", p(&certs.serving)))
        .arg(format!("--tls-private-key-file={}", p(&certs.serving_key)))
        .arg(format!("--client-ca-file={}", p(&certs.ca)))
        .arg(format!("--service-account-issuer=https://127.0.0.1:{port}"))
        .arg(format!("--service-account-key-file={}", p(&certs.sa_pub)))
        .arg(format!(
            "--service-account-signing-key-file={}",
            p(&certs.sa_key)
        ))
        .arg("--service-cluster-ip-range=10.0.0.0/24")
        .arg("--authorization-mode=Node,RBAC")
        // Every request of a ServiceAccount (the launchers'), one line each: what the scale
        // bench counts (`/metrics` cannot tell them from the controllers' and the agent's).
        .arg(format!("--audit-policy-file={}", p(&certs.audit_policy)))
        .arg(format!("--audit-log-path={}", p(&certs.audit_log)))
        // The tolerations the DefaultTolerationSeconds admission gives every pod for the
        // not-ready and unreachable taints, shortened (Kubernetes: 300 s): a dead node's pods
        // are evicted 15 s after it turns NotReady.
        .args([
            "--default-not-ready-toleration-seconds=15",
            "--default-unreachable-toleration-seconds=15",
        ])
        .arg("--allow-privileged=true");
    command
}

/// Waits until `ready` answers, the component alive, for READY_LIMIT at most.
fn wait_ready(component: &Component, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + READY_LIMIT;
    loop {
        component.assert_alive();
        if ready() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} not ready after {READY_LIMIT:?}; its log ({}):\n{}",
            component.name,
            component.log.display(),
            component.tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A plain HTTP GET on loopback answered 200.
fn http_get_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.take(4096).read_to_string(&mut answer);
    answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
}

/// An HTTPS GET on loopback (the component's self-signed certificate not checked) answered 200:
/// openssl's s_client, as no TLS client is among the test's crates.
fn https_get_ok(port: u16, path: &str) -> bool {
    use std::io::Write;
    let Ok(mut child) = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let _ = child.stdin.take().unwrap().write_all(request.as_bytes());
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).starts_with("HTTP/1.0 200")
}

fn five_free_ports() -> [u16; 5] {
    let listeners: Vec<std::net::TcpListener> = (0..5)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    [ports[0], ports[1], ports[2], ports[3], ports[4]]
}

/// The certificates a cluster needs, made with openssl at start: a CA, the API server's serving
/// certificate for 127.0.0.1 and localhost, an admin client certificate (O=system:masters), the
/// service accounts' signing key pair; and the admin kubeconfig.
pub struct Certificates {
    pub ca: PathBuf,
    pub ca_key: PathBuf,
    pub serving: PathBuf,
    pub serving_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    pub admin_kubeconfig: PathBuf,
    pub audit_policy: PathBuf,
    pub audit_log: PathBuf,
}

impl Certificates {
    fn make(dir: &Path, api_port: u16) -> Certificates {
        let f = |name: &str| dir.join(name);
        let (ca, ca_key) = (f("ca.crt"), f("ca.key"));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=paddle-launcher-test-ca",
            "-keyout",
            s(&ca_key),
            "-out",
            s(&ca),
        ]);
        let (serving, serving_key) = (f("serving.crt"), f("serving.key"));
        signed(
            dir,
            &ca,
            &ca_key,
            &serving,
            &serving_key,
            "/CN=kube-apiserver",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
        );
        let (admin, admin_key) = (f("admin.crt"), f("admin.key"));
        signed(
            dir,
            &ca,
            &ca_key,
            &admin,
            &admin_key,
            "/O=system:masters/CN=admin",
            "extendedKeyUsage=clientAuth",
        );
        let (sa_key, sa_pub) = (f("sa.key"), f("sa.pub"));
        openssl(&["genrsa", "-out", s(&sa_key), "2048"]);
        openssl(&["rsa", "-in", s(&sa_key), "-pubout", "-out", s(&sa_pub)]);
        let admin_kubeconfig = f("admin.kubeconfig");
        std::fs::write(
            &admin_kubeconfig,
            kubeconfig_text(
                &format!("https://127.0.0.1:{api_port}"),
                &ca,
                &format!(
                    "client-certificate: {}\n    client-key: {}",
                    s(&admin),
                    s(&admin_key)
                ),
                "default",
            ),
        )
        .unwrap();
        let audit_policy = f("audit-policy.yaml");
        std::fs::write(
            &audit_policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\n\
             rules:\n- level: Metadata\n  userGroups: [\"system:serviceaccounts\"]\n- level: None\n",
        )
        .unwrap();
        Certificates {
            audit_policy,
            audit_log: f("audit.log"),
            ca,
            ca_key,
            serving,
            serving_key,
            sa_key,
            sa_pub,
            admin_kubeconfig,
        }
    }
}

/// A kubeconfig for the API server at `server` trusting `ca`, its user's fields `user` (already
/// indented), its namespace `namespace`.
pub fn kubeconfig_text(server: &str, ca: &Path, user: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    \
         certificate-authority: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    \
         user: test\n    namespace: {namespace}\ncurrent-context: test\nusers:\n- name: test\n  \
         user:\n    {user}\n",
        ca.display()
    )
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A key and a certificate for `subject` signed by the CA, with the extensions `extensions`.
fn signed(
    dir: &Path,
    ca: &Path,
    ca_key: &Path,
    cert: &Path,
    key: &Path,
    subject: &str,
    extensions: &str,
) {
    let csr = dir.join("request.csr");
    let ext = dir.join("extensions.cnf");
    std::fs::write(&ext, extensions).unwrap();
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        s(key),
        "-out",
        s(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        s(&csr),
        "-CA",
        s(ca),
        "-CAkey",
        s(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        s(&ext),
        "-out",
        s(cert),
    ]);
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is needed for the real-cluster tests (.ci/run installs Debian's openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JobSet controller (sigs.k8s.io/jobset, built by tests/cluster/build.sh), started on first
/// use: its CRD applied from the module, its webhook server on loopback with a certificate made
/// here (internal cert management off: it would write a Secret for an in-cluster Service), and
/// its webhook configurations from the module pointed at it by URL, as envtest does.
pub fn jobset_controller() -> &'static Component {
    static JOBSET: OnceLock<Component> = OnceLock::new();
    JOBSET.get_or_init(|| {
        let plane = control_plane();
        let files = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cluster/jobset");
        let crd = files.join("jobset.x-k8s.io_jobsets.yaml");
        assert!(crd.exists(), "{} is missing: run `bash tests/cluster/build.sh`", crd.display());
        plane.register_crd(&crd);
        let dir = plane.dir.join("jobset");
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = plane.dir.join("ca.key");
        signed(&dir, &plane.ca, &ca_key, &dir.join("tls.crt"), &dir.join("tls.key"), "/CN=jobset-webhook",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth");
        let [webhook, health, _, _, _] = five_free_ports();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n\
                 internalCertManagement: {{enable: false}}\nleaderElection: {{leaderElect: false}}\n\
                 webhook: {{host: 127.0.0.1, port: {webhook}, certDir: {}}}\n\
                 metrics: {{bindAddress: \"0\"}}\nhealth: {{healthProbeBindAddress: \"127.0.0.1:{health}\"}}\n",
                dir.display()
            ),
        )
        .unwrap();
        let mut command = Command::new(binary("jobset"));
        command
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", plane.admin.display()))
            .env_clear();
        let component = Component::start("jobset", &plane.dir, command);
        wait_ready(&component, || http_get_ok(health, "/readyz"));
        let hooks = std::fs::read_to_string(files.join("manifests.yaml")).unwrap();
        let ca = std::fs::read(&plane.ca).unwrap();
        for mut object in hooks
            .split("\n---")
            .filter(|d| d.contains("kind:"))
            .map(|d| serde_saphyr::from_str::<serde_json::Value>(d).unwrap())
        {
            object["metadata"]["name"] = format!("jobset-{}", object["metadata"]["name"].as_str().unwrap()).into();
            for hook in object["webhooks"].as_array_mut().unwrap() {
                let path = hook["clientConfig"]["service"]["path"].as_str().unwrap().to_string();
                hook["clientConfig"] = serde_json::json!({
                    "url": format!("https://127.0.0.1:{webhook}{path}"),
                    // k8s-openapi's ByteString serializes as the API wants bytes: base64.
                    "caBundle": k8s_openapi::ByteString(ca.clone()),
                });
                if path.ends_with("-v1-pod") {
                    // config/components/webhook/patches: JobSet's pods only.
                    hook["objectSelector"] = serde_json::json!({"matchExpressions": [
                        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]});
                }
            }
            let (code, out, err) = plane.apply(&object.to_string(), &["--server-side"]);
            assert_eq!(code, 0, "webhook configuration: {err}{out}");
        }
        // /readyz does not wait for the webhook server's paths: a JobSet created at once was
        // refused ("failed calling webhook ... could not find the requested resource"). A
        // server-side dry run goes through the webhooks: wait until they answer.
        let probe = serde_json::json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "probe"}]}}}}}]}
        });
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            // Accepted or refused for what it says, the webhooks answered.
            let (_, _, err) = plane.apply(&probe.to_string(), &["--dry-run=server"]);
            if !err.contains("failed calling webhook") {
                break;
            }
            assert!(Instant::now() < deadline, "JobSet's webhooks never answered: {err}\n{}", component.tail());
            std::thread::sleep(Duration::from_millis(200));
        }
        component
    })
}
