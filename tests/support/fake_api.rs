//! A fake Kubernetes API server speaking HTTP/1.1 like the real one, for the pods resource:
//! lists with resourceVersion and limit/continue, chunked watch streams (plain and streaming
//! list with the initial-events-end bookmark), periodic bookmarks, 410 Gone for compacted
//! resourceVersions, 403 Status bodies, label selectors, and the discovery endpoints kubectl
//! needs. It can also serve recorded responses verbatim.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paddle_launcher::LabelSelector;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

#[derive(Default)]
struct State {
    resource_version: u64,
    /// (namespace, name) -> pod object.
    pods: BTreeMap<(String, String), Value>,
    /// Every change: (resourceVersion, type, object), for watches resuming from a version.
    history: Vec<(u64, &'static str, Value)>,
    /// Watches from a resourceVersion below this get 410 Gone.
    oldest_watchable: u64,
    forbidden: bool,
    /// Path (without query) -> (status, body) served verbatim for GET.
    recorded: BTreeMap<String, (u16, String)>,
    /// Every request line seen: "GET /api/v1/...?...".
    requests: Vec<String>,
    /// Interval of BOOKMARK events on watches that allow them.
    bookmark_every: Duration,
    /// Bumped to end every open watch cleanly, as a watch timeout on the server does.
    watch_generation: u64,
    /// Bumped to cut every open watch's connection (TCP reset, no final chunk).
    reset_generation: u64,
    /// The next pods requests that fail: (status, Retry-After seconds).
    failures: std::collections::VecDeque<(u16, Option<u32>)>,
    /// Added before every answer.
    delay: Duration,
    /// Answers given after a delay.
    delayed: usize,
    /// Until then, every connection is reset as soon as it is accepted.
    down_until: Option<std::time::Instant>,
    /// Response bytes written, for measuring API cost.
    bytes_sent: u64,
    /// Events created (core/v1), in order.
    events: Vec<Value>,
    /// Creating events is forbidden (a Role without `create` on events).
    events_forbidden: bool,
    /// (namespace, name) -> Job object (batch/v1), read and merge-patched.
    jobs: BTreeMap<(String, String), Value>,
}

#[derive(Clone)]
pub struct FakeApi {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl FakeApi {
    /// Starts the server on 127.0.0.1 on its own thread and runtime.
    pub fn start() -> FakeApi {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let api = FakeApi {
            addr: std_listener.local_addr().unwrap(),
            state: Arc::new(Mutex::new(State {
                resource_version: 1000,
                bookmark_every: Duration::from_secs(2),
                ..State::default()
            })),
            changed: Arc::new(Notify::new()),
        };
        let server = api.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    // As Go's net package (the real API server) does: no Nagle delay on events.
                    let _ = stream.set_nodelay(true);
                    let server = server.clone();
                    tokio::spawn(async move { server.serve_connection(stream).await });
                }
            });
        });
        api
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at this server, with namespace `default`.
    pub fn write_kubeconfig(&self, path: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             current-context: fake\nusers:\n- name: fake\n  user:\n    token: fake-token\n",
            self.url()
        );
        std::fs::write(path, text).unwrap();
    }

    fn change(&self, kind: &'static str, mut pod: Value) {
        let mut s = self.state.lock().unwrap();
        s.resource_version += 1;
        let rv = s.resource_version;
        pod["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = (
            pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            pod["metadata"]["name"].as_str().unwrap().to_string(),
        );
        if kind == "DELETED" {
            s.pods.remove(&key);
        } else {
            s.pods.insert(key, pod.clone());
        }
        s.history.push((rv, kind, pod));
        drop(s);
        self.changed.notify_waiters();
    }

    /// Creates or replaces a pod (ADDED or MODIFIED event).
    pub fn put_pod(&self, pod: Value) {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        let exists = self.state.lock().unwrap().pods.contains_key(&(ns, name));
        self.change(if exists { "MODIFIED" } else { "ADDED" }, pod);
    }

    /// A pod deleted with a grace period (preemption, a drain, `kubectl delete`): marked
    /// terminating, as the API shows it until the kubelet has stopped its containers; its
    /// deletionTimestamp is when the grace period ends, in whole seconds, as the API server
    /// stamps it.
    pub fn mark_deleting(&self, namespace: &str, name: &str, grace_seconds: u32) {
        let mut pod = self.pod(namespace, name).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let stamp =
            k8s_openapi::jiff::Timestamp::from_second((now + u64::from(grace_seconds)) as i64)
                .unwrap();
        pod["metadata"]["deletionTimestamp"] = json!(stamp.to_string());
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace_seconds);
        self.put_pod(pod);
    }

    /// A Job object, as the user creates it (its pods are put apart).
    pub fn put_job(&self, job: Value) {
        let ns = job["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = job["metadata"]["name"].as_str().unwrap().to_string();
        self.state.lock().unwrap().jobs.insert((ns, name), job);
    }

    /// The value of one of a Job's annotations, if the Job has it.
    pub fn job_annotation(&self, namespace: &str, name: &str, key: &str) -> Option<String> {
        let job = self.job(namespace, name)?;
        job["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    }

    pub fn job(&self, namespace: &str, name: &str) -> Option<Value> {
        let key = (namespace.to_string(), name.to_string());
        self.state.lock().unwrap().jobs.get(&key).cloned()
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        let s = self.state.lock().unwrap();
        s.pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    pub fn delete_pod(&self, namespace: &str, name: &str) {
        if let Some(pod) = self.pod(namespace, name) {
            self.change("DELETED", pod);
        }
    }

    /// Sets a pod's phase and IP, as the kubelet reports them.
    pub fn set_status(&self, namespace: &str, name: &str, phase: &str, ip: Option<&str>) {
        let mut pod = self.pod(namespace, name).expect("no such pod");
        pod["status"]["phase"] = json!(phase);
        if let Some(ip) = ip {
            pod["status"]["podIP"] = json!(ip);
            pod["status"]["podIPs"] = json!([{ "ip": ip }]);
        }
        self.put_pod(pod);
    }

    /// The pod Failed as the kubelet reports it: its container `launcher` terminated with
    /// `exit_code`, the kubelet's `reason` and the container's termination message.
    pub fn set_terminated(
        &self,
        namespace: &str,
        name: &str,
        exit_code: i32,
        reason: &str,
        message: &str,
    ) {
        let mut pod = self.pod(namespace, name).expect("no such pod");
        pod["status"]["phase"] = json!("Failed");
        pod["status"]["containerStatuses"] = json!([{
            "name": "launcher",
            "image": "paddle-launcher",
            "imageID": "",
            "ready": false,
            "restartCount": 0,
            "state": {"terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "message": message,
            }},
        }]);
        self.put_pod(pod);
    }

    /// Every 401/403-able request gets a 403 Status, like a missing Role.
    pub fn set_forbidden(&self, forbidden: bool) {
        self.state.lock().unwrap().forbidden = forbidden;
    }

    /// Forgets history: watches from any earlier resourceVersion get 410 Gone, and open
    /// watches are ended.
    pub fn compact(&self) {
        let mut s = self.state.lock().unwrap();
        s.oldest_watchable = s.resource_version + 1;
        s.history.clear();
        drop(s);
        self.changed.notify_waiters();
    }

    /// The next `count` pods requests (lists or watches) fail with `status`, with a
    /// Retry-After header when given (429 Too Many Requests, 503).
    pub fn fail_next(&self, count: usize, status: u16, retry_after: Option<u32>) {
        let mut s = self.state.lock().unwrap();
        s.failures
            .extend(std::iter::repeat_n((status, retry_after), count));
    }

    /// Injected failures not yet served.
    pub fn pending_failures(&self) -> usize {
        self.state.lock().unwrap().failures.len()
    }

    /// Requests of pods: (lists, watches).
    pub fn pod_requests(&self) -> (usize, usize) {
        let requests = self.requests();
        // Collections only: a GET of one pod (the events' owner) is neither.
        let pods = requests.iter().filter(|r| {
            r.split('?')
                .next()
                .is_some_and(|path| path.ends_with("/pods"))
        });
        let watches = pods.clone().filter(|r| r.contains("watch=")).count();
        (pods.count() - watches, watches)
    }

    /// Cuts every open watch's connection mid-stream, as a crashed server or proxy does.
    pub fn reset_watches(&self) {
        self.state.lock().unwrap().reset_generation += 1;
        self.changed.notify_waiters();
    }

    pub fn set_delay(&self, delay: Duration) {
        self.state.lock().unwrap().delay = delay;
    }

    /// How many answers were given after a delay (`set_delay`).
    pub fn delayed_answers(&self) -> usize {
        self.state.lock().unwrap().delayed
    }

    /// For `how_long` from now, every connection is reset as soon as it is accepted.
    pub fn go_down_for(&self, how_long: Duration) {
        self.state.lock().unwrap().down_until = Some(std::time::Instant::now() + how_long);
    }

    pub fn bytes_sent(&self) -> u64 {
        self.state.lock().unwrap().bytes_sent
    }

    pub fn set_bookmark_interval(&self, every: Duration) {
        self.state.lock().unwrap().bookmark_every = every;
    }

    /// Ends every open watch cleanly (the end of a chunked body), as the server does when a
    /// watch's timeoutSeconds is over; clients resume from their last resourceVersion.
    pub fn end_watches(&self) {
        self.state.lock().unwrap().watch_generation += 1;
        self.changed.notify_waiters();
    }

    /// Serves `body` with `status` for GETs of `path` (any query), verbatim.
    pub fn record(&self, path: &str, status: u16, body: String) {
        self.state
            .lock()
            .unwrap()
            .recorded
            .insert(path.to_string(), (status, body));
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The events created so far, as the server stored them.
    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    /// Refuses event creation with 403, like a Role without `create` on events.
    pub fn forbid_events(&self) {
        self.state.lock().unwrap().events_forbidden = true;
    }

    async fn serve_connection(&self, stream: TcpStream) {
        let down = self.state.lock().unwrap().down_until;
        if down.is_some_and(|until| std::time::Instant::now() < until) {
            reset(&stream);
            return;
        }
        let mut reader = BufReader::new(stream);
        loop {
            let mut request_line = String::new();
            if !matches!(reader.read_line(&mut request_line).await, Ok(n) if n > 0) {
                return;
            }
            // Of the headers only `Connection: close` and a POST's `Content-Length` matter.
            let mut close = false;
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                match reader.read_line(&mut header).await {
                    Ok(n) if n > 0 && header != "\r\n" && header != "\n" => {
                        let lower = header.to_ascii_lowercase();
                        close |= lower.starts_with("connection: close");
                        if let Some(value) = lower.strip_prefix("content-length:") {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    Ok(n) if n > 0 => break,
                    _ => return,
                }
            }
            if length > 1 << 20 {
                return;
            }
            let mut body = vec![0u8; length];
            if tokio::io::AsyncReadExt::read_exact(&mut reader, &mut body)
                .await
                .is_err()
            {
                return;
            }
            let mut parts = request_line.split_whitespace();
            let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
            self.state
                .lock()
                .unwrap()
                .requests
                .push(format!("{method} {target}"));
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let query = parse_query(query);
            let delay = {
                let mut state = self.state.lock().unwrap();
                state.delayed += usize::from(!state.delay.is_zero());
                state.delay
            };
            tokio::time::sleep(delay).await;
            let failure = if path.ends_with("/pods") {
                self.state.lock().unwrap().failures.pop_front()
            } else {
                None
            };
            if let Some((status, retry_after)) = failure {
                let reason = if status == 429 {
                    "TooManyRequests"
                } else {
                    "InternalError"
                };
                let body = status_body(status, reason, "injected failure").to_string();
                let extra = retry_after.map_or(String::new(), |s| format!("Retry-After: {s}\r\n"));
                if !self
                    .write_json(reader.get_mut(), status, &body, &extra)
                    .await
                {
                    return;
                }
                continue;
            }
            let keep_open = match self.route(method, path, &query, &body) {
                Reply::Json(status, body) => {
                    self.write_json(reader.get_mut(), status, &body, "").await
                }
                Reply::Watch(watch) => {
                    self.stream_watch(reader.get_mut(), watch).await;
                    false
                }
            };
            if !keep_open || close {
                return;
            }
        }
    }

    fn route(
        &self,
        method: &str,
        path: &str,
        query: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Reply {
        let mut s = self.state.lock().unwrap();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method, &segments[..]) {
            ("POST", ["api", "v1", "namespaces", ns, "events"]) => {
                return create_event(&mut s, ns, body)
            }
            ("GET" | "PATCH", ["apis", "batch", "v1", "namespaces", ns, "jobs", name]) => {
                return job_reply(&mut s, method, ns, name, body)
            }
            ("GET", _) => {}
            _ => {
                return status_reply(
                    405,
                    "MethodNotAllowed",
                    "the fake API serves GET, POST of events and PATCH of jobs",
                )
            }
        }
        if let Some((status, body)) = s.recorded.get(path) {
            return Reply::Json(*status, body.clone());
        }
        match segments[..] {
            ["version"] => Reply::Json(200, json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-fake", "platform": "linux/amd64"}).to_string()),
            ["api"] => Reply::Json(200, json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.addr.to_string()}]}).to_string()),
            ["apis"] => Reply::Json(200, json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}).to_string()),
            ["api", "v1"] => Reply::Json(200, json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [{
                "name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                "verbs": ["get", "list", "watch"], "shortNames": ["po"], "categories": ["all"]}, {
                "name": "events", "singularName": "event", "namespaced": true, "kind": "Event",
                "verbs": ["create", "get", "list", "watch"], "shortNames": ["ev"]}]}).to_string()),
            ["api", "v1", "namespaces", ns, "events"] => {
                let items: Vec<&Value> = s.events.iter().filter(|e| e["metadata"]["namespace"] == ns).collect();
                Reply::Json(200, json!({"kind": "EventList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": s.resource_version.to_string()}, "items": items}).to_string())
            }
            ["api", "v1", "namespaces", ns, "pods"] => self.pods_reply(&s, Some(ns), query),
            ["api", "v1", "pods"] => self.pods_reply(&s, None, query),
            ["api", "v1", "namespaces", ns, "pods", name] => {
                if s.forbidden {
                    return forbidden_reply("get", Some(ns));
                }
                match s.pods.get(&(ns.to_string(), name.to_string())) {
                    Some(pod) => Reply::Json(200, pod.to_string()),
                    None => status_reply(404, "NotFound", &format!("pods \"{name}\" not found")),
                }
            }
            _ => status_reply(404, "NotFound", "the server could not find the requested resource"),
        }
    }

    fn pods_reply(&self, s: &State, ns: Option<&str>, query: &BTreeMap<String, String>) -> Reply {
        let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
        if s.forbidden {
            return forbidden_reply(if watching { "watch" } else { "list" }, ns);
        }
        let selector = match query.get("labelSelector").filter(|t| !t.is_empty()) {
            None => None,
            Some(text) => match LabelSelector::parse(text) {
                Ok(sel) => Some(sel),
                Err(e) => {
                    return status_reply(
                        400,
                        "BadRequest",
                        &format!("unable to parse requirement: {e}"),
                    )
                }
            },
        };
        // The pod fields the real server can select on that the launcher uses; any other is
        // refused as the real one refuses it.
        let mut fields = Vec::new();
        for term in query
            .get("fieldSelector")
            .map(String::as_str)
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty())
        {
            let (key, equal, value) = match term.split_once("!=") {
                Some((key, value)) => (key, false, value),
                None => match term.split_once('=') {
                    Some((key, value)) => (key, true, value.trim_start_matches('=')),
                    None => ("", true, ""),
                },
            };
            if !matches!(key, "status.podIP" | "metadata.name" | "status.phase") {
                return status_reply(
                    400,
                    "BadRequest",
                    &format!("\"{term}\" is not a known field selector: only \"metadata.name\", \"status.phase\", \"status.podIP\""),
                );
            }
            fields.push((key.to_string(), equal, value.to_string()));
        }
        let filter = Filter {
            namespace: ns.map(str::to_string),
            selector,
            fields,
        };
        if watching {
            let from = query.get("resourceVersion").cloned().unwrap_or_default();
            return Reply::Watch(Watch {
                filter,
                from,
                initial_events: query.get("sendInitialEvents").is_some_and(|v| v == "true"),
                bookmarks: query
                    .get("allowWatchBookmarks")
                    .is_some_and(|v| v == "true"),
                timeout: query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .map(Duration::from_secs),
            });
        }
        let items: Vec<&Value> = s.pods.values().filter(|p| filter.matches(p)).collect();
        let offset: usize = query
            .get("continue")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let limit: usize = query
            .get("limit")
            .and_then(|l| l.parse().ok())
            .filter(|&l| l > 0)
            .unwrap_or(usize::MAX);
        let page: Vec<&Value> = items.iter().skip(offset).take(limit).copied().collect();
        let mut metadata = json!({"resourceVersion": s.resource_version.to_string()});
        if offset + page.len() < items.len() {
            metadata["continue"] = json!((offset + page.len()).to_string());
            metadata["remainingItemCount"] = json!(items.len() - offset - page.len());
        }
        Reply::Json(
            200,
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": page})
                .to_string(),
        )
    }

    async fn write_json(
        &self,
        stream: &mut TcpStream,
        status: u16,
        body: &str,
        extra_headers: &str,
    ) -> bool {
        let reason = match status {
            200 => "OK",
            201 => "Created",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            410 => "Gone",
            422 => "Unprocessable Entity",
            429 => "Too Many Requests",
            _ => "Error",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{extra_headers}Content-Length: {}\r\n\r\n",
            body.len()
        );
        self.state.lock().unwrap().bytes_sent += (head.len() + body.len()) as u64;
        stream.write_all(head.as_bytes()).await.is_ok()
            && stream.write_all(body.as_bytes()).await.is_ok()
    }

    async fn write_chunk(&self, stream: &mut TcpStream, event: &Value) -> std::io::Result<()> {
        let line = format!("{event}\n");
        let chunk = format!("{:x}\r\n{line}\r\n", line.len());
        self.state.lock().unwrap().bytes_sent += chunk.len() as u64;
        stream.write_all(chunk.as_bytes()).await?;
        stream.flush().await
    }

    async fn stream_watch(&self, stream: &mut TcpStream, watch: Watch) {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let deadline = watch.timeout.map(|t| tokio::time::Instant::now() + t);
        let (mut sent_up_to, opening) = {
            let s = self.state.lock().unwrap();
            let from: Option<u64> = watch.from.parse().ok().filter(|&rv| rv > 0);
            match from {
                Some(rv) if rv < s.oldest_watchable => {
                    let gone = json!({"type": "ERROR", "object": status_body(410, "Expired",
                        &format!("too old resource version: {rv} ({})", s.oldest_watchable))});
                    (u64::MAX, vec![gone])
                }
                Some(rv) => (rv, vec![]),
                // No version: the current state as ADDED events, as the real server does.
                None => {
                    let mut events: Vec<Value> = s
                        .pods
                        .values()
                        .filter(|p| watch.filter.matches(p))
                        .map(|p| json!({"type": "ADDED", "object": p}))
                        .collect();
                    if watch.initial_events {
                        events.push(
                            json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                            "metadata": {"resourceVersion": s.resource_version.to_string(),
                                         "annotations": {"k8s.io/initial-events-end": "true"}}}}),
                        );
                    }
                    (s.resource_version, events)
                }
            }
        };
        for event in opening {
            if self.write_chunk(stream, &event).await.is_err() {
                return;
            }
        }
        if sent_up_to == u64::MAX {
            let _ = stream.write_all(b"0\r\n\r\n").await;
            return;
        }
        let (compacted_at, generation, resets, bookmark_every) = {
            let s = self.state.lock().unwrap();
            (
                s.oldest_watchable,
                s.watch_generation,
                s.reset_generation,
                s.bookmark_every,
            )
        };
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.lock().unwrap().reset_generation != resets {
                reset(stream);
                return;
            }
            let (events, current, ended) = {
                let s = self.state.lock().unwrap();
                let events: Vec<Value> = s
                    .history
                    .iter()
                    .filter(|(rv, _, pod)| *rv > sent_up_to && watch.filter.matches(pod))
                    .map(|(_, kind, pod)| json!({"type": kind, "object": pod}))
                    .collect();
                let ended = s.oldest_watchable != compacted_at || s.watch_generation != generation;
                (events, s.resource_version, ended)
            };
            if ended {
                // A timeout, or a dropped watch cache: the client must resume (and may get 410).
                let _ = stream.write_all(b"0\r\n\r\n").await;
                return;
            }
            for event in &events {
                if self.write_chunk(stream, event).await.is_err() {
                    return;
                }
            }
            sent_up_to = current;
            let bookmark = tokio::time::sleep(bookmark_every);
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = notified => {}
                _ = bookmark, if watch.bookmarks => {
                    let mark = json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": sent_up_to.to_string()}}});
                    if self.write_chunk(stream, &mark).await.is_err() {
                        return;
                    }
                }
                _ = timeout => {
                    let _ = stream.write_all(b"0\r\n\r\n").await;
                    return;
                }
            }
        }
    }
}

enum Reply {
    Json(u16, String),
    Watch(Watch),
}

struct Watch {
    filter: Filter,
    from: String,
    initial_events: bool,
    bookmarks: bool,
    timeout: Option<Duration>,
}

struct Filter {
    namespace: Option<String>,
    selector: Option<LabelSelector>,
    /// (field path, equal or not, value) of each term of a `fieldSelector`.
    fields: Vec<(String, bool, String)>,
}

impl Filter {
    fn matches(&self, pod: &Value) -> bool {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
        let labels: BTreeMap<String, String> = pod["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let field = |path: &str| match path {
            "status.podIP" => pod["status"]["podIP"].as_str().unwrap_or("").to_string(),
            "status.phase" => pod["status"]["phase"].as_str().unwrap_or("").to_string(),
            _ => pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
        };
        self.namespace.as_deref().is_none_or(|n| n == ns)
            && self.selector.as_ref().is_none_or(|s| s.matches(&labels))
            && self
                .fields
                .iter()
                .all(|(path, equal, value)| (field(path) == *value) == *equal)
    }
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// A Job read, or merge-patched (RFC 7386, what `kubectl patch --type merge` sends), as the
/// real server does: the whole object back, its resourceVersion bumped.
fn job_reply(s: &mut State, method: &str, ns: &str, name: &str, body: &[u8]) -> Reply {
    if s.forbidden {
        let verb = if method == "GET" { "get" } else { "patch" };
        return status_reply(403, "Forbidden", &format!(
            "jobs.batch \"{name}\" is forbidden: User \"system:serviceaccount:{ns}:trainer\" cannot {verb} resource \"jobs\" in API group \"batch\" in the namespace \"{ns}\""
        ));
    }
    let version = (s.resource_version + 1).to_string();
    let bump = method == "PATCH";
    let Some(job) = s.jobs.get_mut(&(ns.to_string(), name.to_string())) else {
        return status_reply(404, "NotFound", &format!("jobs.batch \"{name}\" not found"));
    };
    if method == "PATCH" {
        let Ok(patch) = serde_json::from_slice::<Value>(body) else {
            return status_reply(400, "BadRequest", "the body is not JSON");
        };
        // A resourceVersion in the patch is a precondition, as on the real server.
        let expected = &patch["metadata"]["resourceVersion"];
        if !expected.is_null() && *expected != job["metadata"]["resourceVersion"] {
            return status_reply(409, "Conflict", &format!(
                "Operation cannot be fulfilled on jobs.batch \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ));
        }
        merge_patch(job, &patch);
        job["metadata"]["resourceVersion"] = json!(version);
    }
    let reply = Reply::Json(200, job.to_string());
    if bump {
        s.resource_version += 1;
    }
    reply
}

fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (key, value) in fields {
        if value.is_null() {
            target.as_object_mut().unwrap().remove(key);
        } else {
            merge_patch(&mut target[key], value);
        }
    }
}

/// A core/v1 Event created as the real server validates the fields the launcher sets: a name
/// or generateName, the path's namespace (the object's and its involved object's), a type of
/// Normal or Warning, a reason; the stored object gets a name, uid, resourceVersion and time.
fn create_event(s: &mut State, ns: &str, body: &[u8]) -> Reply {
    if s.events_forbidden {
        return status_reply(403, "Forbidden", &format!(
            "events is forbidden: User \"system:serviceaccount:{ns}:trainer\" cannot create resource \"events\" in API group \"\" in the namespace \"{ns}\""
        ));
    }
    let Ok(mut event) = serde_json::from_slice::<Value>(body) else {
        return status_reply(400, "BadRequest", "the body is not JSON");
    };
    let invalid = |why: &str| status_reply(422, "Invalid", &format!("Event is invalid: {why}"));
    let meta = &event["metadata"];
    let name = match (meta["name"].as_str(), meta["generateName"].as_str()) {
        (Some(name), _) if !name.is_empty() => name.to_string(),
        (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{:05x}", s.events.len()),
        _ => return invalid("metadata.name: Required value: name or generateName is required"),
    };
    if meta["namespace"].as_str().is_some_and(|n| n != ns) {
        return invalid("metadata.namespace: does not match the namespace of the request");
    }
    let involved = &event["involvedObject"];
    if involved["namespace"].as_str().is_some_and(|n| n != ns) {
        return invalid("involvedObject.namespace: Invalid value: does not match event.namespace");
    }
    if involved["kind"].as_str().unwrap_or("").is_empty()
        || involved["name"].as_str().unwrap_or("").is_empty()
    {
        return invalid("involvedObject: kind and name are required");
    }
    if !matches!(event["type"].as_str(), Some("Normal" | "Warning")) {
        return invalid("type: Unsupported value: supported values: \"Normal\", \"Warning\"");
    }
    if event["reason"].as_str().unwrap_or("").is_empty() {
        return invalid("reason: Required value");
    }
    s.resource_version += 1;
    event["metadata"]["name"] = json!(name);
    event["metadata"]["namespace"] = json!(ns);
    event["metadata"]["uid"] = json!(format!("event-uid-{}", s.events.len()));
    event["metadata"]["resourceVersion"] = json!(s.resource_version.to_string());
    event["metadata"]["creationTimestamp"] = json!("2026-11-23T00:00:00Z");
    s.events.push(event.clone());
    Reply::Json(201, event.to_string())
}

fn status_reply(code: u16, reason: &str, message: &str) -> Reply {
    Reply::Json(code, status_body(code, reason, message).to_string())
}

fn forbidden_reply(verb: &str, ns: Option<&str>) -> Reply {
    let scope = ns.map_or("at the cluster scope".to_string(), |ns| {
        format!("in the namespace \"{ns}\"")
    });
    let ns = ns.unwrap_or("default");
    status_reply(403, "Forbidden", &format!(
        "pods is forbidden: User \"system:serviceaccount:{ns}:trainer\" cannot {verb} resource \"pods\" in API group \"\" {scope}"
    ))
}

/// Makes the coming close a TCP reset (SO_LINGER 0), as a crashed server's would be.
fn reset(stream: &TcpStream) {
    let linger = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::Linger, &linger);
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

/// A Job object of `pods` pods as the user creates it (its pods are put apart), with these
/// annotations.
pub fn job_object(name: &str, pods: u32, annotations: Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "uid": "c-1", "resourceVersion": "1",
                     "annotations": annotations},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {"containers": []}}}
    })
}

/// A pod of a Job as the Job controller creates it: labels `job-name` and
/// `batch.kubernetes.io/job-name`, phase Pending, no IP yet.
pub fn job_pod(job: &str, name: &str) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": {"job-name": job, "batch.kubernetes.io/job-name": job, "controller-uid": "c-1"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "c-1",
                                          "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [{"name": "trainer", "image": "paddle:test"}], "restartPolicy": "Never"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    })
}
