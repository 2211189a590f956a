//! Whether a Job may use the queue it names, by the scheduler's rules, so that a Job the
//! scheduler would leave out says why before its pods exist: the queue exists, is a leaf (no
//! child queues, and not a Department's queue) and its `namespaceSelector`, and its
//! ancestors', select the Job's namespace.

use std::collections::BTreeMap;

use drover_api::crd::department::is_department_queue;
use drover_api::crd::queue::{implicit_default_selector, namespace_refusal, Queue, QueueSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::validity::Validity;
use super::DEFAULT_QUEUE;

/// Queue ancestors read when checking namespace selectors (a parent cycle stops here).
const MAX_QUEUE_DEPTH: usize = 32;
/// Queues read per page when looking for child queues.
const PAGE: u32 = 500;

/// Checks `queue` for a Job in `namespace`: `QueueNotFound` (a missing queue other than
/// [`DEFAULT_QUEUE`], which the scheduler adds when no Queue object has its name, with
/// [`implicit_default_selector`]), `QueueNotLeaf` or `QueueNotAllowed`.
pub async fn check(client: &Client, namespace: &str, queue: &str) -> Result<Validity, kube::Error> {
    let found = match Api::<Queue>::all(client.clone()).get_opt(queue).await? {
        Some(found) => found,
        None if queue == DEFAULT_QUEUE => {
            let spec = QueueSpec { namespace_selector: Some(implicit_default_selector()), ..QueueSpec::default() };
            Queue::new(DEFAULT_QUEUE, spec)
        }
        None => return Ok(Err(("QueueNotFound".into(), format!("queue {queue:?} does not exist")))),
    };
    if let Some(why) = not_leaf(client, &found).await? {
        return Ok(Err(("QueueNotLeaf".into(), format!("queue {queue:?} {why}; a Job must name a leaf queue"))));
    }
    if let Some(why) = refusal(client, namespace, found).await? {
        let message = format!("namespace {namespace:?} may not use queue {queue:?}: {why}");
        return Ok(Err(("QueueNotAllowed".into(), message)));
    }
    Ok(Ok(()))
}

/// Why `queue` is not a leaf, if it is not: it is a Department's queue (the parent of its
/// projects' queues, even before it has any), or another queue names it as its parent.
async fn not_leaf(client: &Client, queue: &Queue) -> Result<Option<String>, kube::Error> {
    if is_department_queue(&queue.metadata) {
        return Ok(Some("is a Department's queue (its projects' queues are the leaves)".into()));
    }
    let name = queue.name_any();
    let api: Api<Queue> = Api::all(client.clone());
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        if let Some(child) = page.items.iter().find(|q| q.spec.parent.as_deref() == Some(name.as_str())) {
            return Ok(Some(format!("has child queues ({:?} names it as its parent)", child.name_any())));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(None),
        }
    }
}

/// Why `namespace` may not use `queue`, if it may not, by [`namespace_refusal`] over the
/// `namespaceSelector`s of the queue and its ancestors. The scheduler applies the same rule;
/// this puts the reason on the Job before its pods exist.
async fn refusal(client: &Client, namespace: &str, queue: Queue) -> Result<Option<String>, kube::Error> {
    let queues: Api<Queue> = Api::all(client.clone());
    let mut fences: Vec<(String, LabelSelector)> = Vec::new();
    let mut current = Some(queue);
    for _ in 0..MAX_QUEUE_DEPTH {
        let Some(q) = current.take() else { break };
        if let Some(selector) = &q.spec.namespace_selector {
            fences.push((q.name_any(), selector.clone()));
        }
        if let Some(parent) = q.spec.parent.as_deref() {
            current = queues.get_opt(parent).await?;
        }
    }
    if fences.is_empty() {
        return Ok(None);
    }
    let ns = Api::<Namespace>::all(client.clone()).get_opt(namespace).await?;
    let labels: BTreeMap<String, String> = ns.and_then(|n| n.metadata.labels).unwrap_or_default();
    Ok(namespace_refusal(fences.iter().map(|(name, selector)| (name.as_str(), selector)), Some(&labels)))
}
