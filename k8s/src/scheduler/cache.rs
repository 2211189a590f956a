//! The scheduler's object cache: one reflector per kind, the triggers that start a cycle
//! early, and an overlay of the scheduler's own writes that the stores have not shown yet.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
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

use super::catch_up::{self, Progress};
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
    /// Watch events so far: of Nodes, and of every other kind.
    node_events: Arc<AtomicU64>,
    other_events: Arc<AtomicU64>,
    /// How far the Pod and PodGroup watches have got, for a new leader's catch-up.
    pods_progress: Arc<Progress>,
    groups_progress: Arc<Progress>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// How many watch events the stores have applied, by kind: equal counts mean equal store
/// contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Events {
    pub nodes: u64,
    pub others: u64,
}

fn reflect<K>(
    api: Api<K>,
    kind: &'static str,
    events: Arc<AtomicU64>,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default()).backoff(watch_backoff()).modify(slim).reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    // Counted after the store applied it: a count read before a gather
                    // never claims a change the gather has not seen.
                    events.fetch_add(1, Ordering::Release);
                    on_event(&event)
                }
                Err(e) => tracing::warn!(kind, error = %e, "watch failed; retrying"),
            }
        }
    });
    (reader, task)
}

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what the scheduler never reads and costs the most memory per object: the field
/// managers' records and `kubectl apply`'s copy of the object. At 50,000 pods these were most
/// of the scheduler's memory.
fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// `on_event`, noting each event's progress first.
fn tracked<K: Resource>(
    progress: Arc<Progress>,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> impl FnMut(&watcher::Event<K>) + Send + 'static {
    move |event| {
        let object = match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => Some(o),
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        progress.saw(object.and_then(|o| o.meta().resource_version.as_deref()));
        on_event(event)
    }
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
    /// PodGroup or a new Node appears, and when a bound pod is deleted (its capacity is free).
    pub(super) fn start(client: &Client, scheduler_name: &str, trigger: Arc<Notify>) -> Cache {
        let name = scheduler_name.to_string();
        let t = trigger.clone();
        let (pods_progress, groups_progress) = (Arc::new(Progress::default()), Arc::new(Progress::default()));
        let (node_events, other_events) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let others = || other_events.clone();
        let on_pod = move |event: &watcher::Event<Pod>| {
            if let watcher::Event::Delete(pod) = event {
                if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
                    t.notify_one(); // capacity freed: a claim waiting for its victims may bind now
                }
                return;
            }
            let Some(pod) = applied(event) else { return };
            let Some(spec) = pod.spec.as_ref() else { return };
            if spec.scheduler_name.as_deref() == Some(name.as_str())
                && spec.node_name.as_deref().is_none_or(str::is_empty)
                && pod.metadata.deletion_timestamp.is_none()
            {
                t.notify_one();
            }
        };
        let on_pod = tracked(pods_progress.clone(), on_pod);
        let (pods, pods_task) = reflect(Api::<Pod>::all(client.clone()), "Pod", others(), on_pod);
        let on_group = tracked(groups_progress.clone(), on_new(trigger.clone()));
        let (pod_groups, groups_task) = reflect(Api::<PodGroup>::all(client.clone()), "PodGroup", others(), on_group);
        let (nodes, nodes_task) =
            reflect(Api::<Node>::all(client.clone()), "Node", node_events.clone(), on_new(trigger));
        let (queues, queues_task) = reflect(Api::<Queue>::all(client.clone()), "Queue", others(), |_| {});
        let (classes, classes_task) =
            reflect(Api::<PriorityClass>::all(client.clone()), "PriorityClass", others(), |_| {});
        let (namespaces, namespaces_task) =
            reflect(Api::<Namespace>::all(client.clone()), "Namespace", others(), |_| {});
        let (topologies, topologies_task) = reflect(Api::<Topology>::all(client.clone()), "Topology", others(), |_| {});
        Cache {
            nodes,
            pods,
            pod_groups,
            queues,
            classes,
            namespaces,
            topologies,
            node_events,
            other_events,
            pods_progress,
            groups_progress,
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

    /// Waits until the Pod and PodGroup stores show what the API server holds now (see
    /// `catch_up.rs`): a new leader's first decisions must see the previous leader's writes.
    pub(super) async fn catch_up(&self, client: &Client) {
        catch_up::catch_up(client, &[&self.pods_progress, &self.groups_progress]).await;
    }

    /// The watch events applied so far. Read it before [`Cache::gather`]: the stores may then
    /// show more than it counts, never less.
    pub(super) fn events(&self) -> Events {
        Events { nodes: self.node_events.load(Ordering::Acquire), others: self.other_events.load(Ordering::Acquire) }
    }

    /// The Nodes the store holds now.
    pub(super) fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
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

/// What the scheduler did to a pod, besides binding it.
#[derive(Debug, Clone)]
enum PodChange {
    Deleting,
    Deleted,
    /// A status condition written (replacing the pod's condition of its type).
    Condition(PodCondition),
}

#[derive(Debug, Clone)]
struct PodEntry {
    uid: Option<String>,
    /// The node of a binding the store does not show yet.
    bound: Option<String>,
    /// The version `change` was made on.
    stale_rv: Option<String>,
    change: Option<PodChange>,
}

#[derive(Debug, Clone)]
struct GroupEntry {
    uid: Option<String>,
    stale_rvs: BTreeSet<Option<String>>,
    latest: Arc<PodGroup>,
}

/// The scheduler's own successful writes, applied over store contents that do not show them
/// yet, so that a cycle that starts right after another does not decide on pods it has just
/// bound or evicted. An entry is dropped when the store shows the object under another uid,
/// or not at all. Otherwise a binding is kept until the store shows the pod on a node: the
/// versions before that include the pod's charge record and domain annotation, written just
/// before the binding, and dropping it on them would show the pod pending and its node's
/// capacity free while the pod is bound there. Any other change is kept while the store shows
/// the version it was made on (the store has caught up, or someone else changed the object,
/// and the store is the truth again).
#[derive(Debug, Default)]
pub(super) struct Overlay {
    pods: HashMap<Key, PodEntry>,
    groups: HashMap<Key, GroupEntry>,
}

impl Overlay {
    pub(super) fn pod_bound(&mut self, pod: &PodRef, node: &str) {
        self.pod_entry(pod).bound = Some(node.to_string());
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

    /// The pod's entry: the one of its uid (a change recorded on top of a binding keeps the
    /// binding), else a new one.
    fn pod_entry(&mut self, pod: &PodRef) -> &mut PodEntry {
        let key = (pod.namespace.clone(), pod.name.clone());
        let fresh = || PodEntry { uid: pod.uid.clone(), bound: None, stale_rv: None, change: None };
        let e = self.pods.entry(key).or_insert_with(fresh);
        if e.uid != pod.uid {
            *e = fresh();
        }
        e
    }

    fn record_pod(&mut self, pod: &PodRef, change: PodChange) {
        let e = self.pod_entry(pod);
        // A second change on top of one the store has not shown yet keeps its version.
        if e.change.is_none() {
            e.stale_rv = pod.resource_version.clone();
        }
        e.change = Some(change);
    }

    /// Records the object a write to a PodGroup returned; `before` is the resourceVersion
    /// the write was made on.
    pub(super) fn group_written(&mut self, before: Option<String>, mut latest: PodGroup) {
        slim(&mut latest);
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
            let Some(e) = self.pods.get_mut(&key).filter(|e| e.uid == pod.metadata.uid) else {
                out.push(pod);
                continue;
            };
            if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
                e.bound = None;
            }
            if e.stale_rv != pod.metadata.resource_version {
                e.change = None;
            }
            if e.bound.is_none() && e.change.is_none() {
                out.push(pod);
                continue;
            }
            seen.insert(key);
            let mut p = (*pod).clone();
            if let Some(node) = &e.bound {
                p.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
            }
            match &e.change {
                None => {}
                Some(PodChange::Deleting) => {
                    p.metadata.deletion_timestamp.get_or_insert(Time(jiff::Timestamp::now()));
                }
                Some(PodChange::Deleted) => continue,
                Some(PodChange::Condition(c)) => {
                    let list = p.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new);
                    list.retain(|old| old.type_ != c.type_);
                    list.push(c.clone());
                }
            }
            out.push(Arc::new(p));
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

#[cfg(test)]
mod tests {
    use super::super::api;
    use super::*;
    use crate::charge::Charge;
    use crate::convert::{convert, Objects, POD_GROUP_ANNOTATION};
    use drover_scheduler::snapshot::{NodeId, PodPhase};
    use serde_json::json;

    fn object<T: DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("a valid object"))
    }

    /// Pod `a` of group `g` at resourceVersion `rv`, asking for a whole node of 8 GPUs.
    fn pod(uid: &str, rv: &str, node: Option<&str>, charged: bool) -> Arc<Pod> {
        let charge = Charge { queue: "q".into(), group: "g".into(), priority_class: String::new() };
        let mut annotations = json!({POD_GROUP_ANNOTATION: "g"});
        if charged {
            let (key, value) = charge.annotation();
            annotations[key] = json!(value);
        }
        object(json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": uid, "resourceVersion": rv, "annotations": annotations},
            "spec": {"schedulerName": "drover", "nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}
            ]},
        }))
    }

    /// The pod's phase in a snapshot of one node of 8 GPUs and `pods` (`None`: not in it).
    fn phase(pods: &[Arc<Pod>]) -> Option<PodPhase> {
        let objects = Objects {
            nodes: &[object(json!({"metadata": {"name": "n1"},
                                   "status": {"allocatable": {"cpu": "4", "pods": "9", "nvidia.com/gpu": "8"}}}))],
            pods,
            pod_groups: &[object(json!({"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 1}}))],
            namespaces: &[object(json!({"metadata": {"name": "ns"}}))],
            queues: &[],
            priority_classes: &[],
            topologies: &[],
        };
        let snap = convert(&objects, "drover").snapshot().expect("a snapshot");
        snap.pods.iter().next().map(|p| p.phase)
    }

    #[test]
    fn a_binding_holds_its_node_until_the_store_shows_the_pod_bound() {
        let mut overlay = Overlay::default();
        let seen = pod("u1", "1", None, false);
        overlay.pod_bound(&PodRef::of(&seen), "n1");
        assert_eq!(phase(&overlay.apply_pods(vec![seen])), Some(PodPhase::Bound(NodeId(0))), "the store is behind");
        // The charge record, written just before the binding, reaches the store first: a
        // newer version that is still unbound.
        let charged = pod("u1", "2", None, true);
        for cycle in 0..2 {
            let pods = overlay.apply_pods(vec![charged.clone()]);
            assert_eq!(phase(&pods), Some(PodPhase::Bound(NodeId(0))), "cycle {cycle}: the binding is not shown yet");
        }
        let bound = pod("u1", "3", Some("n1"), true);
        assert_eq!(phase(&overlay.apply_pods(vec![bound])), Some(PodPhase::Bound(NodeId(0))));
        assert!(overlay.pods.is_empty(), "the store shows the binding: nothing left to lay over it");
    }

    #[test]
    fn a_pod_evicted_before_the_store_shows_its_binding_still_holds_its_node() {
        let mut overlay = Overlay::default();
        overlay.pod_bound(&PodRef::of(&pod("u1", "1", None, false)), "n1");
        let charged = pod("u1", "2", None, true);
        let pods = overlay.apply_pods(vec![charged.clone()]);
        overlay.pod_deleting(&PodRef::of(&pods[0]));
        assert_eq!(phase(&overlay.apply_pods(vec![charged])), Some(PodPhase::Releasing(NodeId(0))));
    }

    #[test]
    fn a_binding_is_forgotten_when_its_pod_is_gone_or_made_again() {
        let mut overlay = Overlay::default();
        overlay.pod_bound(&PodRef::of(&pod("u1", "1", None, false)), "n1");
        assert_eq!(phase(&overlay.apply_pods(vec![pod("u2", "5", None, false)])), Some(PodPhase::Pending));
        assert!(overlay.pods.is_empty(), "another pod under the same name");
        overlay.pod_bound(&PodRef::of(&pod("u1", "1", None, false)), "n1");
        assert!(overlay.apply_pods(vec![]).is_empty());
        assert!(overlay.pods.is_empty(), "the pod was deleted");
    }

    /// The store's pod `a` in namespace `default`, as the watch shows it now.
    fn stored(cache: &Cache, overlay: &mut Overlay) -> Option<Arc<Pod>> {
        cache.gather(overlay).pods.into_iter().find(|p| key_of(&p.metadata) == ("default".into(), "a".into()))
    }

    fn node_of(pod: &Pod) -> Option<&str> {
        pod.spec.as_ref()?.node_name.as_deref()
    }

    /// The same order against a real API server and the cache's own watch: another write of
    /// the pod (here a waiting mark) reaches the store as a newer, unbound version before the
    /// binding, which then carries the pod's charge record onto the pod.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_real_newer_unbound_version_seen_before_the_binding_keeps_the_binding() {
        let Some(server) = drover_envtest::Server::start().await else { return };
        let client = server.client();
        drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
        let manifest = json!({
            "metadata": {"name": "a"},
            "spec": {"schedulerName": "drover", "containers": [{"name": "c", "image": "x"}]},
        });
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        api.create(&Default::default(), &serde_json::from_value(manifest).unwrap()).await.expect("pod created");
        let cache = Cache::start(&client, "drover", Arc::new(Notify::new()));
        cache.wait_ready().await.expect("caches synced");
        let seen = drover_envtest::eventually(10, "the pod in the store", || async {
            stored(&cache, &mut Overlay::default())
        })
        .await;
        let pod = PodRef::of(&seen);
        let mut overlay = Overlay::default();
        overlay.pod_bound(&pod, "node-1");
        let mark = PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            ..PodCondition::default()
        };
        api::set_pod_condition(&client, &pod, &mark).await.expect("pod marked");
        let marked = drover_envtest::eventually(10, "the mark in the store", || async {
            stored(&cache, &mut Overlay::default())
                .filter(|p| p.metadata.resource_version != seen.metadata.resource_version)
        })
        .await;
        assert_eq!(node_of(&marked), None, "the store shows the mark before the binding");
        let laid = stored(&cache, &mut overlay);
        assert_eq!(laid.as_deref().and_then(node_of), Some("node-1"), "the binding is laid over the unbound version");
        let charge = Charge { queue: "q".into(), group: "g".into(), priority_class: String::new() };
        api::bind(&client, &pod, "node-1", [charge.annotation()].into()).await.expect("bound");
        let bound = drover_envtest::eventually(10, "the binding in the store", || async {
            stored(&cache, &mut Overlay::default()).filter(|p| node_of(p).is_some())
        })
        .await;
        assert_eq!(Charge::of(&bound), Some(charge), "the binding set the charge record");
        assert_eq!(stored(&cache, &mut overlay).as_deref().and_then(node_of), Some("node-1"));
        assert!(overlay.pods.is_empty(), "the store shows the binding: nothing left to lay over it");
        server.stop().await;
    }
}
