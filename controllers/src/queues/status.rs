//! Queue status: pod-group counts by phase, `observedGeneration` and the `Valid` condition
//! (`ParentNotFound`, `QueueCycle`, `ParentInvalid`). The scheduler's fields (`allocated`,
//! `deserved`, `fairShare`, `queueState`) are never written.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_api::crd::podgroup::{PodGroup, PodGroupPhase};
use drover_api::crd::queue::{PodGroupCounts, Queue};
use drover_kubeutil::events::{self, EventType};
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{trigger_with, Action};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::runner::{changes, digest, drive, ready, shutdown_signal, Context, Retries, Triggers};
use super::{find_valid, put_condition, reasons, same_condition, valid_condition, Error, Problem};

const CONTROLLER: &str = "drover-queue-status";
const RESYNC: Duration = Duration::from_secs(300);

/// Runs the Queue status controller until `shutdown` resolves.
///
/// For every Queue it keeps `status.podGroups` (PodGroups whose `spec.queue` names the
/// queue, by `status.phase`; a group without a status counts as `pending`),
/// `status.observedGeneration` and a `Valid` condition: `False` with reason
/// `ParentNotFound` (the parent names no Queue), `QueueCycle` (the queue is on a parent
/// cycle) or `ParentInvalid` (an ancestor is one of those), with a Warning Event; `True`
/// otherwise. It writes (a merge patch of the status subresource, carrying the
/// resourceVersion it read) only when one of these changed.
pub async fn run_queue_status(
    client: Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shutdown = shutdown_signal(shutdown);
    let (queues, writer) = reflector::store::<Queue>();
    let queue_events = reflector::reflector(
        writer,
        watcher(Api::<Queue>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let (groups, group_writer) = reflector::store::<PodGroup>();
    let group_events = reflector::reflector(
        group_writer,
        watcher(Api::<PodGroup>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let tree = queues.clone();
    let group_store = groups.clone();
    // The queue each group was last seen in, so that a group moving queues updates both.
    let last_queue: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    let triggers: Triggers<Queue> = vec![
        // A queue's validity depends on its ancestors, so a change reaches its descendants.
        trigger_with(changes(queue_events, queue_key), move |q: Queue| {
            let mut refs = vec![ObjectRef::from_obj(&q)];
            refs.extend(descendants(&tree, &q.name_any()).into_iter().map(|n| ObjectRef::new(&n)));
            refs
        })
        .boxed(),
        trigger_with(changes(group_events, group_key), move |pg: PodGroup| {
            let key = format!("{}/{}", pg.namespace().unwrap_or_default(), pg.name_any());
            let now = pg.spec.queue.clone().filter(|q| !q.is_empty());
            let live = group_store.get(&ObjectRef::from_obj(&pg)).is_some_and(|s| s.uid() == pg.uid());
            let mut last = last_queue.lock().unwrap_or_else(|e| e.into_inner());
            let before = match (&now, live) {
                (Some(q), true) => last.insert(key, q.clone()),
                _ => last.remove(&key),
            };
            let names: BTreeSet<String> = before.into_iter().chain(now).collect();
            names.into_iter().map(|n| ObjectRef::<Queue>::new(&n)).collect::<Vec<_>>()
        })
        .boxed(),
    ];
    let ctx = Arc::new(StatusStores { client, queues: queues.clone(), groups, retries: Retries::default() });
    drive("queue-status", queues, triggers, reconcile, ctx, shutdown).await;
    Ok(())
}

/// What the queue-status reconciler reads: the Queue and PodGroup stores, and its retry state.
struct StatusStores {
    client: Client,
    queues: Store<Queue>,
    groups: Store<PodGroup>,
    retries: Retries,
}

impl Context for StatusStores {
    fn retries(&self) -> &Retries {
        &self.retries
    }
}

/// What a Queue change must differ in to matter here (not the scheduler's status fields).
fn queue_key(q: &Queue) -> u64 {
    let status = q.status.as_ref();
    digest(&(
        &q.metadata.generation,
        &q.spec.parent,
        &q.metadata.deletion_timestamp,
        status.map(|s| (&s.pod_groups, s.observed_generation, find_valid(&s.conditions))),
    ))
}

fn group_key(pg: &PodGroup) -> u64 {
    digest(&(&pg.spec.queue, pg.status.as_ref().map(|s| s.phase)))
}

/// The queues below `name` (any depth).
fn descendants(store: &Store<Queue>, name: &str) -> Vec<String> {
    let all = store.state();
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut frontier = vec![name.to_string()];
    while let Some(parent) = frontier.pop() {
        for q in all.iter().filter(|q| q.spec.parent.as_deref() == Some(parent.as_str())) {
            let n = q.name_any();
            if n != name && found.insert(n.clone()) {
                frontier.push(n);
            }
        }
    }
    found.into_iter().collect()
}

/// Why the queue is invalid, if it is.
fn validity(store: &Store<Queue>, q: &Queue) -> Option<Problem> {
    let mut chain = vec![q.name_any()];
    let mut parent = q.spec.parent.clone();
    while let Some(p) = parent {
        if let Some(pos) = chain.iter().position(|c| *c == p) {
            let mut cycle = chain[pos..].to_vec();
            cycle.push(p);
            return Some(if pos == 0 {
                Problem::new(reasons::QUEUE_CYCLE, format!("the queue is on a parent cycle: {}", cycle.join(" -> ")))
            } else {
                Problem::new(
                    reasons::PARENT_INVALID,
                    format!("ancestor {:?} is on a parent cycle: {}", chain[pos], cycle.join(" -> ")),
                )
            });
        }
        match store.get(&ObjectRef::new(&p)) {
            None if chain.len() == 1 => {
                return Some(Problem::new(reasons::PARENT_NOT_FOUND, format!("parent queue {p:?} does not exist")))
            }
            None => {
                return Some(Problem::new(
                    reasons::PARENT_INVALID,
                    format!("ancestor {:?} has a parent {p:?} that does not exist", chain[chain.len() - 1]),
                ))
            }
            Some(pq) => {
                parent = pq.spec.parent.clone();
                chain.push(p);
            }
        }
    }
    None
}

/// PodGroups of `queue` by phase.
fn count(groups: &[Arc<PodGroup>], queue: &str) -> PodGroupCounts {
    let mut counts = PodGroupCounts::default();
    for pg in groups.iter().filter(|pg| pg.spec.queue.as_deref() == Some(queue)) {
        let slot = match pg.status.as_ref().map(|s| s.phase).unwrap_or_default() {
            PodGroupPhase::Pending => &mut counts.pending,
            PodGroupPhase::Inqueue => &mut counts.inqueue,
            PodGroupPhase::Running => &mut counts.running,
            PodGroupPhase::Completed => &mut counts.completed,
            PodGroupPhase::Failed => &mut counts.failed,
        };
        *slot += 1;
    }
    counts
}

async fn reconcile(q: Arc<Queue>, ctx: Arc<StatusStores>) -> Result<Action, Error> {
    if !ready(&ctx.groups) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let name = q.name_any();
    let counts = count(&ctx.groups.state(), &name);
    let problems: Vec<Problem> = validity(&ctx.queues, &q).into_iter().collect();
    let generation = q.metadata.generation;
    let status = q.status.clone().unwrap_or_default();
    let previous = find_valid(&status.conditions);
    let ok = match &q.spec.parent {
        Some(p) => format!("parent {p:?} exists and the parent chain has no cycle"),
        None => "top-level queue".to_string(),
    };
    let condition = valid_condition(previous, &problems, reasons::QUEUE_VALID, ok, generation);
    if status.pod_groups == counts && status.observed_generation == generation && same_condition(previous, &condition) {
        return Ok(Action::requeue(RESYNC));
    }
    let news = previous.is_none_or(|p| p.status != condition.status || p.reason != condition.reason);
    let patch = json!({
        "metadata": {"resourceVersion": q.resource_version()},
        "status": {
            "podGroups": counts,
            "observedGeneration": generation,
            "conditions": put_condition(&status.conditions, condition.clone()),
        },
    });
    Api::<Queue>::all(ctx.client.clone()).patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    if news && condition.status == "False" {
        events::publish(&ctx.client, CONTROLLER, &*q, EventType::Warning, &condition.reason, &condition.message).await;
    }
    Ok(Action::requeue(RESYNC))
}
