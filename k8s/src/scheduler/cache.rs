//! The scheduler's object cache: one reflector per kind, the triggers that start a cycle
//! early, and an overlay of the scheduler's own writes that the stores have not shown yet.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_api::crd::topology::Topology;
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodCondition};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::convert::{ObjectLists, PodRef};

/// `(namespace, name)`; namespace is empty for cluster-scoped objects.
pub(super) type Key = (String, String);

pub(super) fn key_of(meta: &ObjectMeta) -> Key {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// Reflector stores of every kind the conversion reads.
pub(super) struct Cache {
    nodes: Store<Node>,
    pods: Store<Pod>,
    pod_groups: Store<PodGroup>,
    queues: Store<Queue>,
    classes: Store<PriorityClass>,
    namespaces: Store<Namespace>,
    topologies: Store<Topology>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn reflect<K>(
    api: Api<K>,
    kind: &'static str,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default()).backoff(watch_backoff()).reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => on_event(&event),
                Err(e) => tracing::warn!(kind, error = %e, "watch failed; retrying"),
            }
        }
    });
    (reader, task)
}

fn applied<K>(event: &watcher::Event<K>) -> Option<&K> {
    match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => Some(o),
        _ => None,
    }
}

/// Notifies `trigger` when an object whose uid it has not seen is added.
fn on_new<K: Resource>(trigger: Arc<Notify>) -> impl FnMut(&watcher::Event<K>) + Send + 'static {
    let mut seen: HashSet<String> = HashSet::new();
    let uid = |o: &K| o.meta().uid.clone().unwrap_or_default();
    move |event| {
        if let watcher::Event::Delete(o) = event {
            seen.remove(&uid(o));
        } else if applied(event).is_some_and(|o| seen.insert(uid(o))) {
            trigger.notify_one();
        }
    }
}

impl Cache {
    /// Starts the watches. `trigger` is notified when a pending pod of the scheduler, a new
    /// PodGroup or a new Node appears.
    pub(super) fn start(client: &Client, scheduler_name: &str, trigger: Arc<Notify>) -> Cache {
        let name = scheduler_name.to_string();
        let t = trigger.clone();
        let (pods, pods_task) = reflect(Api::<Pod>::all(client.clone()), "Pod", move |event| {
            let Some(pod) = applied(event) else { return };
            let Some(spec) = pod.spec.as_ref() else { return };
            if spec.scheduler_name.as_deref() == Some(name.as_str())
                && spec.node_name.as_deref().is_none_or(str::is_empty)
                && pod.metadata.deletion_timestamp.is_none()
            {
                t.notify_one();
            }
        });
        let (pod_groups, groups_task) =
            reflect(Api::<PodGroup>::all(client.clone()), "PodGroup", on_new(trigger.clone()));
        let (nodes, nodes_task) = reflect(Api::<Node>::all(client.clone()), "Node", on_new(trigger));
        let (queues, queues_task) = reflect(Api::<Queue>::all(client.clone()), "Queue", |_| {});
        let (classes, classes_task) = reflect(Api::<PriorityClass>::all(client.clone()), "PriorityClass", |_| {});
        let (namespaces, namespaces_task) = reflect(Api::<Namespace>::all(client.clone()), "Namespace", |_| {});
        let (topologies, topologies_task) = reflect(Api::<Topology>::all(client.clone()), "Topology", |_| {});
        Cache {
            nodes,
            pods,
            pod_groups,
            queues,
            classes,
            namespaces,
            topologies,
            tasks: vec![
                pods_task,
                groups_task,
                nodes_task,
                queues_task,
                classes_task,
                namespaces_task,
                topologies_task,
            ],
        }
    }

    /// Returns once every store has received its initial list.
    pub(super) async fn wait_ready(&self) -> anyhow::Result<()> {
        tokio::try_join!(
            self.nodes.wait_until_ready(),
            self.pods.wait_until_ready(),
            self.pod_groups.wait_until_ready(),
            self.queues.wait_until_ready(),
            self.classes.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.topologies.wait_until_ready(),
        )
        .map_err(|e| anyhow::anyhow!("a reflector stopped before its first list: {e}"))?;
        Ok(())
    }

    /// The store contents now, with the overlay applied.
    pub(super) fn gather(&self, overlay: &mut Overlay) -> ObjectLists {
        ObjectLists {
            nodes: self.nodes.state(),
            pods: overlay.apply_pods(self.pods.state()),
            pod_groups: overlay.apply_groups(self.pod_groups.state()),
            queues: self.queues.state(),
            classes: self.classes.state(),
            namespaces: self.namespaces.state(),
            topologies: self.topologies.state(),
        }
    }
}

impl ObjectLists {
    pub(super) fn pods_by_key(&self) -> HashMap<Key, &Arc<Pod>> {
        self.pods.iter().map(|p| (key_of(&p.metadata), p)).collect()
    }
}

/// What the scheduler did to a pod.
#[derive(Debug, Clone)]
enum PodChange {
    Bound(String),
    Deleting,
    Deleted,
    /// A status condition written (replacing the pod's condition of its type).
    Condition(PodCondition),
}

#[derive(Debug, Clone)]
struct PodEntry {
    uid: Option<String>,
    stale_rv: Option<String>,
    change: PodChange,
}

#[derive(Debug, Clone)]
struct GroupEntry {
    uid: Option<String>,
    stale_rvs: BTreeSet<Option<String>>,
    latest: Arc<PodGroup>,
}

/// The scheduler's own successful writes, applied over store contents that still show the
/// object as it was before the write (same uid and resourceVersion). An entry is dropped as
/// soon as the store shows any other version of the object, or none: the store has caught up
/// (or someone else changed the object, and the store is the truth again). This keeps a
/// cycle that starts right after another from deciding on pods it has just bound.
#[derive(Debug, Default)]
pub(super) struct Overlay {
    pods: HashMap<Key, PodEntry>,
    groups: HashMap<Key, GroupEntry>,
}

impl Overlay {
    pub(super) fn pod_bound(&mut self, pod: &PodRef, node: &str) {
        self.record_pod(pod, PodChange::Bound(node.to_string()));
    }

    pub(super) fn pod_deleting(&mut self, pod: &PodRef) {
        self.record_pod(pod, PodChange::Deleting);
    }

    pub(super) fn pod_deleted(&mut self, pod: &PodRef) {
        self.record_pod(pod, PodChange::Deleted);
    }

    pub(super) fn pod_condition(&mut self, pod: &PodRef, condition: PodCondition) {
        self.record_pod(pod, PodChange::Condition(condition));
    }

    fn record_pod(&mut self, pod: &PodRef, change: PodChange) {
        let key = (pod.namespace.clone(), pod.name.clone());
        let stale_rv = match self.pods.get(&key) {
            // A second change on top of one the store has not shown yet.
            Some(e) if e.uid == pod.uid => e.stale_rv.clone(),
            _ => pod.resource_version.clone(),
        };
        self.pods.insert(key, PodEntry { uid: pod.uid.clone(), stale_rv, change });
    }

    /// Records the object a write to a PodGroup returned; `before` is the resourceVersion
    /// the write was made on.
    pub(super) fn group_written(&mut self, before: Option<String>, latest: PodGroup) {
        let key = key_of(&latest.metadata);
        let uid = latest.metadata.uid.clone();
        let mut stale_rvs = BTreeSet::from([before]);
        if let Some(e) = self.groups.remove(&key) {
            if e.uid == uid {
                stale_rvs.extend(e.stale_rvs);
                stale_rvs.insert(e.latest.metadata.resource_version.clone());
            }
        }
        stale_rvs.remove(&latest.metadata.resource_version);
        self.groups.insert(key, GroupEntry { uid, stale_rvs, latest: Arc::new(latest) });
    }

    fn apply_pods(&mut self, pods: Vec<Arc<Pod>>) -> Vec<Arc<Pod>> {
        if self.pods.is_empty() {
            return pods;
        }
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(pods.len());
        for pod in pods {
            let key = key_of(&pod.metadata);
            if let Some(e) = self.pods.get(&key) {
                if e.uid == pod.metadata.uid && e.stale_rv == pod.metadata.resource_version {
                    seen.insert(key);
                    let mut p = (*pod).clone();
                    match &e.change {
                        PodChange::Bound(node) => {
                            p.spec.get_or_insert_with(Default::default).node_name = Some(node.clone())
                        }
                        PodChange::Deleting => {
                            p.metadata.deletion_timestamp.get_or_insert(Time(jiff::Timestamp::now()));
                        }
                        PodChange::Deleted => continue,
                        PodChange::Condition(c) => {
                            let list =
                                p.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new);
                            list.retain(|old| old.type_ != c.type_);
                            list.push(c.clone());
                        }
                    }
                    out.push(Arc::new(p));
                    continue;
                }
                self.pods.remove(&key);
            }
            out.push(pod);
        }
        self.pods.retain(|k, _| seen.contains(k));
        out
    }

    fn apply_groups(&mut self, groups: Vec<Arc<PodGroup>>) -> Vec<Arc<PodGroup>> {
        if self.groups.is_empty() {
            return groups;
        }
        let mut seen = HashSet::new();
        let out = groups
            .into_iter()
            .map(|g| {
                let key = key_of(&g.metadata);
                match self.groups.get(&key) {
                    Some(e) if e.uid == g.metadata.uid && e.stale_rvs.contains(&g.metadata.resource_version) => {
                        seen.insert(key);
                        e.latest.clone()
                    }
                    _ => g,
                }
            })
            .collect();
        self.groups.retain(|k, _| seen.contains(k));
        out
    }
}
