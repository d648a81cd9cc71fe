//! Kubernetes Events: what a user sees of the job with `kubectl describe job` and `kubectl get
//! events`, besides the pods' logs: the job started (attempt, size), each restart (its cause),
//! a hang (its suspect, where the stacks are), the end (the job's first cause).
//!
//! One launcher posts them: the coordinator with a control channel, rank 0 without one, and
//! only one that already talks to the API (followers of a named coordinator make no request).
//! Posting never delays the launcher: a task of its own sends them one by one, each bounded by
//! a timeout; a refusal (a Role without `create` on events) is said once and the job goes on.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, PostParams, TypeMeta};
use kube::Api;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tracing::warn;

use crate::peers::kubernetes::ApiServer;
use crate::vocabulary::EventKind;

/// How long one request may take: an API server that hangs must not keep the launcher.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most events one launcher posts in its life: a job restarting many times must not flood
/// the API server (each attempt posts at most three or four).
const MAX_EVENTS: usize = 40;
/// Events carry a short message (events.k8s.io limits it to 1 kB): longer ones are cut.
const MAX_MESSAGE: usize = 1000;
/// The component named as the events' source.
const COMPONENT: &str = "paddle-launcher";

/// One event to post.
#[derive(Debug, Clone)]
struct QueuedEvent {
    kind: EventKind,
    reason: &'static str,
    message: String,
}

/// The job's events, posted by a task of their own.
pub struct JobEvents {
    queue: Option<mpsc::Sender<QueuedEvent>>,
    task: Option<JoinHandle<()>>,
    queued: usize,
}

impl JobEvents {
    /// Starts the task that posts for pod `pod`: on the object that owns it (its Job), found
    /// with the first post, or on the pod itself when it has no owner.
    pub fn start(api: ApiServer, pod: String, node: Option<String>) -> JobEvents {
        let (queue, postings) = mpsc::channel(MAX_EVENTS);
        let task = tokio::spawn(post_all(api, pod, node, postings));
        JobEvents {
            queue: Some(queue),
            task: Some(task),
            queued: 0,
        }
    }

    /// Queues an event; never waits. Past `MAX_EVENTS` (less one, kept for the end), dropped.
    pub fn post(&mut self, kind: EventKind, reason: &'static str, message: &str) {
        if self.queued + 1 >= MAX_EVENTS {
            return;
        }
        self.queue(kind, reason, message);
    }

    /// The job's end: always queued, however many restarts were posted before it.
    pub fn post_final(&mut self, kind: EventKind, reason: &'static str, message: &str) {
        self.queue(kind, reason, message);
    }

    fn queue(&mut self, kind: EventKind, reason: &'static str, message: &str) {
        self.queued += 1;
        let message = message.chars().take(MAX_MESSAGE).collect();
        if let Some(queue) = &self.queue {
            let _ = queue.try_send(QueuedEvent {
                kind,
                reason,
                message,
            });
        }
    }

    /// Lets what is queued go out, for at most `limit` (the launcher is about to exit).
    pub async fn flush(&mut self, limit: Duration) {
        self.queue = None;
        if let Some(mut task) = self.task.take() {
            if timeout(limit, &mut task).await.is_err() {
                // Said where a user looks: `kubectl describe` will miss the job's end.
                warn!(
                    "Kubernetes events: not all were posted within {} s (the API server is slow or unreachable); the job's last events are missing from `kubectl describe`",
                    limit.as_secs()
                );
                task.abort();
            }
        }
    }
}

impl Drop for JobEvents {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn post_all(
    api: ApiServer,
    pod: String,
    node: Option<String>,
    mut postings: mpsc::Receiver<QueuedEvent>,
) {
    // Untyped: the Event type's own (de)serialising code would cost the static binary more than
    // these few fields.
    let resource = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    let events: Api<DynamicObject> =
        Api::namespaced_with(api.client.clone(), &api.namespace, &resource);
    let mut involved: Option<Value> = None;
    let mut refused = false;
    while let Some(posting) = postings.recv().await {
        if refused {
            continue;
        }
        let about = match &involved {
            Some(about) => about.clone(),
            None => {
                let about = owner_of(&api, &pod).await;
                involved = Some(about.clone());
                about
            }
        };
        let event = event(&api.namespace, &about, &pod, node.as_deref(), posting);
        match timeout(
            REQUEST_TIMEOUT,
            events.create(&PostParams::default(), &event),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                warn!(
                    "Kubernetes events: the API refused to create them ({}); the job goes on without. To see the job's events, allow `create` on `events` in the launcher's Role (`paddle-launcher manifest` does)",
                    status.message
                );
                refused = true;
            }
            Ok(Err(e)) => warn!("Kubernetes events: cannot post one: {e}"),
            Err(_) => warn!(
                "Kubernetes events: the API server did not answer within {} s",
                REQUEST_TIMEOUT.as_secs()
            ),
        }
    }
}

/// What the events are about (an ObjectReference): the pod's controller (its Job, whose
/// `kubectl describe` then lists them), else the pod itself.
async fn owner_of(api: &ApiServer, pod: &str) -> Value {
    let pods: Api<Pod> = Api::namespaced(api.client.clone(), &api.namespace);
    let itself =
        json!({"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": api.namespace});
    let found = match timeout(REQUEST_TIMEOUT, pods.get(pod)).await {
        Ok(Ok(found)) => found,
        Ok(Err(kube::Error::Api(status))) if matches!(status.code, 401 | 403) => {
            // Events on the pod are not listed by `kubectl describe job`: say why, once.
            warn!(
                "Kubernetes events: the API refused to get this pod ({}), so the job's events \
                 go on the pod instead of its Job; allow `get` on `pods` in the launcher's Role \
                 (`paddle-launcher manifest` grants it)",
                status.message
            );
            return itself;
        }
        _ => return itself,
    };
    let controller = found
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .find(|owner| owner.controller == Some(true));
    match controller {
        Some(owner) => json!({
            "apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name,
            "namespace": api.namespace, "uid": owner.uid,
        }),
        None => {
            let mut itself = itself;
            itself["uid"] = json!(found.metadata.uid);
            itself
        }
    }
}

fn event(
    namespace: &str,
    about: &Value,
    pod: &str,
    node: Option<&str>,
    posting: QueuedEvent,
) -> DynamicObject {
    let now = format!("{:.0}", Timestamp::now());
    let name = about["name"].as_str().unwrap_or(pod);
    let mut source = json!({"component": COMPONENT});
    if let Some(node) = node {
        source["host"] = json!(node);
    }
    DynamicObject {
        types: Some(TypeMeta {
            api_version: "v1".into(),
            kind: "Event".into(),
        }),
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        data: json!({
            "involvedObject": about,
            "type": match posting.kind {
                EventKind::Normal => "Normal",
                EventKind::Warning => "Warning",
            },
            "reason": posting.reason,
            "message": posting.message,
            "source": source,
            "reportingComponent": COMPONENT,
            "reportingInstance": pod,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }),
    }
}
