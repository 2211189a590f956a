//! End-to-end tests of the Kubernetes scheduler loop against a real kube-apiserver (through
//! drover-envtest's fault proxy) with a fake kubelet.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_api::crd::podgroup::{PodGroup, PodGroupPhase, PodGroupSpec};
use drover_api::crd::queue::{Queue, QueueSpec};
use drover_envtest::{eventually, Server};
use drover_k8s::charge::{Charge, CHARGE_ANNOTATION};
use drover_k8s::convert::POD_GROUP_ANNOTATION;
use drover_k8s::scheduler::{
    self, CycleObserver, CycleReport, NoopObserver, SchedulerOptions, IGNORED_BIND_INTENT_ANNOTATION, UNSCHEDULABLE,
};
use drover_kubelet::{self as kubelet, KubeletConfig};
use k8s_openapi::api::core::v1::{Binding, Event, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::oneshot;

const NS: &str = "default";
const GPU: &str = "nvidia.com/gpu";

struct Env {
    server: Server,
    client: Client,
    leader: Arc<AtomicBool>,
    stops: Vec<oneshot::Sender<()>>,
}

impl Env {
    /// A real API server with Drover's CRDs, the charge guard and a fake kubelet with `nodes`
    /// nodes of 8 GPUs; `None` when the test is skipped (no control-plane binaries).
    async fn new(nodes: u32) -> Option<Env> {
        let env = Env::unguarded(nodes).await?;
        drover_k8s::charge::install_guard(&env.client, "drover-test").await.expect("the charge guard is accepted");
        Some(env)
    }

    /// [`Env::new`] without the charge guard.
    async fn unguarded(nodes: u32) -> Option<Env> {
        let server = Server::start().await?;
        let client = server.client();
        drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
        let mut env = Env { server, client, leader: Arc::new(AtomicBool::new(true)), stops: Vec::new() };
        let (tx, rx) = oneshot::channel::<()>();
        env.stops.push(tx);
        let config = KubeletConfig::gpu_nodes(nodes);
        let kc = env.client.clone();
        tokio::spawn(async move {
            let _ = kubelet::run(kc, config, async {
                let _ = rx.await;
            })
            .await;
        });
        let node_api: Api<Node> = Api::all(env.client.clone());
        wait_for("nodes registered", Duration::from_secs(20), || async {
            node_api.list(&ListParams::default()).await.map(|l| l.items.len() == nodes as usize).unwrap_or(false)
        })
        .await;
        Some(env)
    }

    /// Starts the scheduler (period 200 ms).
    fn start_scheduler(&mut self) {
        self.start_scheduler_observed(Arc::new(NoopObserver));
    }

    /// Starts the scheduler (period 200 ms), reporting its cycles to `observer`.
    fn start_scheduler_observed(&mut self, observer: Arc<dyn CycleObserver>) {
        let (tx, rx) = oneshot::channel::<()>();
        self.stops.push(tx);
        let leader = self.leader.clone();
        let options = SchedulerOptions { period: Duration::from_millis(200), ..SchedulerOptions::default() };
        let client = self.client.clone();
        tokio::spawn(async move {
            let r = scheduler::run(client, options, move || leader.load(Ordering::SeqCst), observer, async {
                let _ = rx.await;
            })
            .await;
            if let Err(e) = r {
                panic!("scheduler failed: {e}");
            }
        });
    }

    async fn stop(self) {
        for s in self.stops {
            let _ = s.send(());
        }
        self.server.stop().await;
    }

    async fn queue(&self, name: &str, deserved_gpus: Option<u32>) {
        let mut spec = QueueSpec { over_quota_weight: 1, reclaimable: true, ..QueueSpec::default() };
        if let Some(g) = deserved_gpus {
            spec.deserved.insert(GPU.into(), Quantity(g.to_string()));
        }
        let api: Api<Queue> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &Queue::new(name, spec)).await.expect("queue created");
    }

    async fn group(&self, name: &str, queue: &str, min: u32, class: Option<&str>) {
        let mut pg = PodGroup::new(
            name,
            PodGroupSpec {
                min_member: min,
                queue: Some(queue.into()),
                priority_class_name: class.map(str::to_string),
                ..PodGroupSpec::default()
            },
        );
        pg.metadata.namespace = Some(NS.into());
        let api: Api<PodGroup> = Api::namespaced(self.client.clone(), NS);
        api.create(&PostParams::default(), &pg).await.expect("pod group created");
    }

    /// Creates pods `{group}-0..n`, each requesting `gpus` GPUs.
    async fn pods(&self, group: &str, n: u32, gpus: u32) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        for i in 0..n {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{group}-{i}"), "annotations": {POD_GROUP_ANNOTATION: group}},
                "spec": {
                    "schedulerName": "drover",
                    "containers": [{
                        "name": "main",
                        "image": "busybox",
                        "resources": {
                            "requests": {"cpu": "1", GPU: gpus.to_string()},
                            "limits": {GPU: gpus.to_string()},
                        },
                    }],
                },
            }))
            .expect("pod json");
            api.create(&PostParams::default(), &pod).await.expect("pod created");
        }
    }

    async fn gang(&self, name: &str, queue: &str, pods: u32, min: u32, gpus: u32, class: Option<&str>) {
        self.group(name, queue, min, class).await;
        self.pods(name, pods, gpus).await;
    }

    /// Pods of a group that exist: name -> node (None when unbound).
    async fn members(&self, group: &str) -> BTreeMap<String, Option<String>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let Ok(list) = api.list(&ListParams::default()).await else { return BTreeMap::new() };
        list.items
            .into_iter()
            .filter(|p| {
                p.metadata.annotations.as_ref().and_then(|a| a.get(POD_GROUP_ANNOTATION)).map(String::as_str)
                    == Some(group)
            })
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p.spec.and_then(|s| s.node_name)))
            .collect()
    }

    async fn bound(&self, group: &str) -> usize {
        self.members(group).await.values().filter(|n| n.is_some()).count()
    }

    async fn pod_group(&self, name: &str) -> PodGroup {
        let api: Api<PodGroup> = Api::namespaced(self.client.clone(), NS);
        api.get(name).await.expect("pod group exists")
    }

    /// GPUs requested by live pods per node; panics if a node is over-committed.
    async fn assert_no_overcommit(&self) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let list = api.list(&ListParams::default()).await.expect("pods list");
        let mut per_node: BTreeMap<String, i64> = BTreeMap::new();
        for p in list.items {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
            if matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
                continue;
            }
            let gpus: i64 = p
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(GPU)?.0.parse::<i64>().ok())
                .sum();
            *per_node.entry(node).or_default() += gpus;
        }
        for (node, gpus) in per_node {
            assert!(gpus <= 8, "node {node} over-committed: {gpus} GPUs");
        }
    }

    async fn bind_manually(&self, pod: &str, node: &str) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let binding = Binding {
            metadata: ObjectMeta { name: Some(pod.into()), ..ObjectMeta::default() },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..ObjectReference::default()
            },
        };
        api.create_subresource::<_, serde_json::Value>("binding", pod, &PostParams::default(), &binding)
            .await
            .expect("manual binding");
    }

    /// Writes a bind intent into the group's status, as a scheduler that crashed after
    /// writing it would have left it (or as someone allowed to write status could forge it).
    async fn write_intent(&self, group: &str, pods: &[(&str, &str)]) {
        let map: BTreeMap<&str, &str> = pods.iter().copied().collect();
        let api: Api<PodGroup> = Api::namespaced(self.client.clone(), NS);
        let patch = json!({"status": {"bindIntent": {"pods": map}}});
        api.patch_status(group, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("intent written");
    }

    /// Taints a node `key=value:NoSchedule`.
    async fn taint(&self, node: &str, key: &str, value: &str) {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"taints": [{"key": key, "value": value, "effect": "NoSchedule"}]}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("node tainted");
    }

    /// Creates a Queue from its spec as JSON (for fields the typed helpers do not set).
    async fn queue_from(&self, name: &str, spec: serde_json::Value) {
        let queue: Queue =
            serde_json::from_value(json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue",
                "metadata": {"name": name}, "spec": spec}))
            .expect("queue json");
        let api: Api<Queue> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &queue).await.expect("queue created");
    }

    /// Creates the pod `name` of `group` asking for `gpus` GPUs, with `extra` merged into its
    /// spec (a node selector, an affinity).
    async fn pod_with(&self, name: &str, group: &str, gpus: u32, extra: serde_json::Value) {
        let mut manifest = json!({
            "metadata": {"name": name, "annotations": {POD_GROUP_ANNOTATION: group}},
            "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "busybox",
                "resources": {"requests": {"cpu": "1", GPU: gpus.to_string()}, "limits": {GPU: gpus.to_string()}}}]},
        });
        if let (Some(spec), Some(extra)) = (manifest["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let pod: Pod = serde_json::from_value(manifest).expect("pod json");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        api.create(&PostParams::default(), &pod).await.expect("pod created");
    }

    /// Labels a node `key=value`.
    async fn label(&self, node: &str, key: &str, value: &str) {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"labels": {key: value}}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("node labelled");
    }

    /// The node a pod is bound to (None: unbound or gone).
    async fn node_of(&self, pod: &str) -> Option<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        api.get_opt(pod).await.ok().flatten()?.spec?.node_name
    }

    async fn events(&self, reason: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), NS);
        api.list(&ListParams::default())
            .await
            .map(|l| l.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).collect())
            .unwrap_or_default()
    }
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn condition<'a>(
    pg: &'a PodGroup,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    pg.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

fn has_intent(pg: &PodGroup) -> bool {
    pg.status.as_ref().is_some_and(|s| s.bind_intent.is_some())
}

const T: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gang_is_bound_all_or_nothing_with_status() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", None).await;
    env.start_scheduler();
    // 4 of the 16 GPUs taken: 12 free, but no node has 8 free twice.
    env.gang("filler", "q", 1, 1, 4, None).await;
    wait_for("filler bound", T, || async { env.bound("filler").await == 1 }).await;
    env.gang("big", "q", 2, 2, 8, None).await;
    // Several cycles: never one pod of the gang alone.
    for _ in 0..15 {
        assert_eq!(env.bound("big").await, 0, "a gang must not be bound partially");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for("unschedulable condition", T, || async {
        let pg = env.pod_group("big").await;
        condition(&pg, UNSCHEDULABLE).is_some_and(|c| c.status == "True")
    })
    .await;
    let pg = env.pod_group("big").await;
    let status = pg.status.clone().expect("status written");
    assert_eq!(status.phase, PodGroupPhase::Inqueue);
    let c = condition(&pg, UNSCHEDULABLE).expect("condition");
    assert_eq!(c.reason, "Unschedulable");
    assert!(c.message.contains("gang of 2 pods") && c.message.contains(GPU), "core's reason: {}", c.message);
    assert_eq!(status.observed_generation, pg.metadata.generation);

    // Free the capacity: the whole gang binds.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    pods.delete("filler-0", &DeleteParams::default()).await.expect("filler deleted");
    wait_for("gang bound", T, || async { env.bound("big").await == 2 }).await;
    env.assert_no_overcommit().await;
    wait_for("running status", T, || async {
        let pg = env.pod_group("big").await;
        let s = pg.status.clone().unwrap_or_default();
        s.phase == PodGroupPhase::Running
            && s.running == 2
            && condition(&pg, UNSCHEDULABLE).is_some_and(|c| c.status == "False")
    })
    .await;
    assert!(!has_intent(&env.pod_group("big").await));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_status_shows_allocated_deserved_and_fair_share() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("team-a", Some(8)).await;
    env.queue("team-b", Some(8)).await;
    env.start_scheduler();
    env.gang("train", "team-a", 2, 2, 4, None).await;
    wait_for("gang bound", T, || async { env.bound("train").await == 2 }).await;
    let api: Api<Queue> = Api::all(env.client.clone());
    wait_for("queue status", T, || async {
        let q = api.get("team-a").await.expect("queue");
        q.status.is_some_and(|s| s.allocated.get(GPU).map(|q| q.0.as_str()) == Some("8"))
    })
    .await;
    let s = api.get("team-a").await.expect("queue").status.expect("status");
    assert_eq!(s.allocated.get("cpu").map(|q| q.0.as_str()), Some("2"));
    assert_eq!(s.deserved.get(GPU).map(|q| q.0.as_str()), Some("8"));
    let share: i64 = s.fair_share.get(GPU).expect("fair share of GPUs").0.parse().expect("canonical integer");
    assert!(share >= 8, "fair share {share}");
    assert_eq!(s.queue_state.as_deref(), Some("InQuota"));
    let b = api.get("team-b").await.expect("queue").status.expect("team-b status");
    assert!(!b.allocated.contains_key(GPU), "{b:?}");
    assert_eq!(b.deserved.get(GPU).map(|q| q.0.as_str()), Some("8"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preemption_evicts_lower_priority_gang_then_binds_preemptor() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", None).await;
    env.start_scheduler();
    env.gang("low", "q", 2, 2, 8, Some("train")).await;
    wait_for("low bound", T, || async { env.bound("low").await == 2 }).await;
    env.gang("high", "q", 2, 2, 8, Some("interactive-preemptible")).await;
    wait_for("preemptor bound", T, || async { env.bound("high").await == 2 }).await;
    assert_eq!(env.members("low").await.len(), 0, "victims evicted");
    let events = env.events("Preempted").await;
    let said = format!("by pod group {NS}/high of higher priority");
    assert!(
        events.iter().any(|e| e.involved_object.name.as_deref().is_some_and(|n| n.starts_with("low-"))
            && e.message.as_deref().is_some_and(|m| m.contains(&said))),
        "Preempted events naming {said:?}: {events:?}"
    );
    env.assert_no_overcommit().await;
    env.stop().await;
}

/// An elastic pod preempted for a gang minimum of its own priority is told so, not that the
/// preemptor had a higher priority.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preemption_of_an_elastic_pod_by_equal_priority_says_so() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", None).await;
    env.start_scheduler();
    env.gang("elastic", "q", 2, 1, 8, Some("train")).await;
    wait_for("elastic bound", T, || async { env.bound("elastic").await == 2 }).await;
    env.gang("peer", "q", 1, 1, 8, Some("train")).await;
    wait_for("peer bound", T, || async { env.bound("peer").await == 1 }).await;
    let events = env.events("Preempted").await;
    let said = format!("by pod group {NS}/peer of equal priority");
    assert!(
        events.iter().any(|e| e.involved_object.name.as_deref().is_some_and(|n| n.starts_with("elastic-"))
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains(&said) && m.contains("elastic pods yield to gang minimums"))),
        "Preempted events naming {said:?}: {events:?}"
    );
    assert!(!events.iter().any(|e| e.message.as_deref().is_some_and(|m| m.contains("higher priority"))), "{events:?}");
    // The preemption is recorded where a new leader reads it: the regrow rule holds the
    // victim's elastic pods back for a minute.
    wait_for("preemptedAt recorded", T, || async {
        env.pod_group("elastic").await.status.is_some_and(|s| s.preempted_at.is_some())
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reclaim_across_queues() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("a", Some(8)).await;
    env.queue("b", Some(8)).await;
    env.start_scheduler();
    // Queue a runs 16 GPUs, twice its quota, with one elastic pod.
    env.gang("elastic", "a", 2, 1, 8, None).await;
    wait_for("a's pods bound", T, || async { env.bound("elastic").await == 2 }).await;
    env.gang("claim", "b", 1, 1, 8, None).await;
    wait_for("b's pod bound", T, || async { env.bound("claim").await == 1 }).await;
    assert_eq!(env.bound("elastic").await, 1, "a keeps its deserved quota");
    let events = env.events("Reclaimed").await;
    assert!(
        events.iter().any(|e| e.involved_object.name.as_deref().is_some_and(|n| n.starts_with("elastic-"))),
        "Reclaimed events: {events:?}"
    );
    env.assert_no_overcommit().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_written_while_not_leader() {
    let Some(mut env) = Env::new(2).await else { return };
    env.leader.store(false, Ordering::SeqCst);
    env.queue("q", Some(8)).await;
    env.start_scheduler();
    env.gang("g", "q", 2, 2, 4, None).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(env.bound("g").await, 0);
    let pg = env.pod_group("g").await;
    assert!(pg.status.is_none() || pg.status == Some(Default::default()), "{:?}", pg.status);
    assert!(!has_intent(&pg));
    let q = Api::<Queue>::all(env.client.clone()).get("q").await.expect("queue");
    assert!(q.status.as_ref().is_none_or(|s| s.allocated.is_empty() && s.queue_state.is_none()), "{:?}", q.status);
    // Leadership gained: it schedules.
    env.leader.store(true, Ordering::SeqCst);
    wait_for("bound after gaining leadership", T, || async { env.bound("g").await == 2 }).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_completes_a_half_bound_gang() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", None).await;
    env.gang("rec", "q", 4, 4, 4, None).await;
    // A crashed leader: intent written, half the pods bound.
    let plan = [("rec-0", "node-1"), ("rec-1", "node-1"), ("rec-2", "node-0"), ("rec-3", "node-0")];
    env.write_intent("rec", &plan).await;
    env.bind_manually("rec-0", "node-1").await;
    env.bind_manually("rec-2", "node-0").await;
    env.start_scheduler();
    wait_for("gang completed", T, || async { env.bound("rec").await == 4 }).await;
    let members = env.members("rec").await;
    for (pod, node) in plan {
        assert_eq!(members[pod].as_deref(), Some(node), "{pod} bound per the intent");
    }
    wait_for("intent cleared", T, || async { !has_intent(&env.pod_group("rec").await) }).await;
    env.assert_no_overcommit().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_rolls_back_when_a_node_vanished() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", None).await;
    env.gang("rb", "q", 4, 4, 4, None).await;
    let plan = [("rb-0", "node-0"), ("rb-1", "node-0"), ("rb-2", "node-gone"), ("rb-3", "node-gone")];
    env.write_intent("rb", &plan).await;
    env.bind_manually("rb-0", "node-0").await;
    env.bind_manually("rb-1", "node-0").await;
    env.start_scheduler();
    wait_for("gang rolled back", T, || async {
        let m = env.members("rb").await;
        !m.contains_key("rb-0") && !m.contains_key("rb-1")
    })
    .await;
    wait_for("intent cleared", T, || async { !has_intent(&env.pod_group("rb").await) }).await;
    // The two pods left cannot make the minimum of 4: nothing of the gang stays bound.
    for _ in 0..10 {
        assert_eq!(env.bound("rb").await, 0, "no gang below its minimum");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn binding_faults_neither_double_bind_nor_strand_a_gang() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", None).await;
    env.start_scheduler();
    let faults = env.server.faults();
    for (i, (resource, status)) in
        [("pods/binding", 409), ("pods/binding", 500), ("podgroups", 409), ("pods/binding", 429)]
            .into_iter()
            .enumerate()
    {
        let name = format!("f{i}");
        env.group(&name, "q", 4, None).await;
        faults.fail_next_writes(resource, 2, status);
        env.pods(&name, 4, 1).await;
        wait_for(&format!("{name} bound despite {status} on {resource}"), T, || async { env.bound(&name).await == 4 })
            .await;
        wait_for("intent cleared", T, || async { !has_intent(&env.pod_group(&name).await) }).await;
        env.assert_no_overcommit().await;
        faults.clear();
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_gang_binds_fully() {
    let Some(mut env) = Env::new(8).await else { return };
    env.queue("q", None).await;
    env.start_scheduler();
    env.gang("huge", "q", 64, 64, 1, None).await;
    wait_for("64 pods bound", Duration::from_secs(15), || async { env.bound("huge").await == 64 }).await;
    env.assert_no_overcommit().await;
    wait_for("running", T, || async {
        env.pod_group("huge").await.status.is_some_and(|s| s.phase == PodGroupPhase::Running)
    })
    .await;
    env.stop().await;
}

/// The hole a tenant found: an intent in a PodGroup annotation (which anyone who may edit the
/// group can write) placing 8 GPUs in a queue limited to 1, on a node whose taint the pods do
/// not tolerate. The annotation is never read: nothing is bound, and the group gets a Warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bind_intent_annotation_is_ignored_and_reported() {
    let Some(mut env) = Env::new(2).await else { return };
    let limited =
        QueueSpec { limit: Some(BTreeMap::from([(GPU.to_string(), Quantity("1".into()))])), ..QueueSpec::default() };
    let queues: Api<Queue> = Api::all(env.client.clone());
    queues.create(&PostParams::default(), &Queue::new("small", limited)).await.expect("queue created");
    env.taint("node-1", "dedicated", "inference").await;
    env.gang("forged", "small", 2, 2, 4, None).await;
    let value = json!({"pods": {"forged-0": "node-1", "forged-1": "node-1"}, "at": "2020-01-01T00:00:00Z"}).to_string();
    let groups: Api<PodGroup> = Api::namespaced(env.client.clone(), NS);
    let patch = json!({"metadata": {"annotations": {IGNORED_BIND_INTENT_ANNOTATION: value}}});
    groups.patch("forged", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotated");
    env.start_scheduler();
    wait_for("the ignored annotation reported", T, || async { !env.events("BindIntentIgnored").await.is_empty() })
        .await;
    for _ in 0..15 {
        assert_eq!(env.bound("forged").await, 0, "a forged intent was obeyed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = env.events("BindIntentIgnored").await;
    assert_eq!(events.len(), 1, "reported once, not every cycle: {events:?}");
    env.stop().await;
}

/// An intent in status (a crashed leader's, or one forged by someone wrongly allowed to write
/// status) is checked like a new decision: a binding onto a node whose taint the pod does not
/// tolerate, or beyond the queue's limit, is refused and reported, and a gang that cannot
/// reach its minimum without it is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_refuses_bindings_that_break_a_taint_or_a_queue_limit() {
    let Some(mut env) = Env::new(2).await else { return };
    let limited =
        QueueSpec { limit: Some(BTreeMap::from([(GPU.to_string(), Quantity("4".into()))])), ..QueueSpec::default() };
    let queues: Api<Queue> = Api::all(env.client.clone());
    queues.create(&PostParams::default(), &Queue::new("small", limited)).await.expect("queue created");
    env.queue("open", None).await;
    env.taint("node-1", "dedicated", "inference").await;
    // Over the limit: two pods of 4 GPUs in a queue limited to 4.
    env.gang("greedy", "small", 2, 2, 4, None).await;
    env.write_intent("greedy", &[("greedy-0", "node-0"), ("greedy-1", "node-0")]).await;
    // Onto the tainted node.
    env.gang("tainted", "open", 1, 1, 4, None).await;
    env.write_intent("tainted", &[("tainted-0", "node-1")]).await;
    env.start_scheduler();
    wait_for("both intents resolved", T, || async {
        !has_intent(&env.pod_group("greedy").await) && !has_intent(&env.pod_group("tainted").await)
    })
    .await;
    let refusals: Vec<String> = env.events("BindIntentRefused").await.into_iter().filter_map(|e| e.message).collect();
    assert!(
        refusals.iter().any(|m| m.contains("greedy-1") && m.contains("limit")),
        "the binding over the limit is reported: {refusals:?}"
    );
    assert!(
        refusals.iter().any(|m| m.contains("tainted-0") && m.contains("taint")),
        "the binding onto the tainted node is reported: {refusals:?}"
    );
    let tainted = env.members("tainted").await;
    assert_ne!(tainted["tainted-0"].as_deref(), Some("node-1"), "bound onto a node it does not tolerate");
    // The greedy gang cannot have both pods in its queue, and one alone is not a gang.
    for _ in 0..15 {
        assert_eq!(env.bound("greedy").await, 0, "the queue's limit was broken");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.stop().await;
}

/// A PodGroup whose `spec.queue` names a queue whose `namespaceSelector` does not select the
/// group's namespace is never scheduled: it gets `Valid=False` (reason `QueueNotAllowed`, the
/// namespace and the queue named) and one Warning Event, while a group of the same namespace
/// in a queue that admits it, and a group in a queue without a selector, are scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_group_naming_a_queue_its_namespace_may_not_use_is_refused_and_others_schedule() {
    let Some(mut env) = Env::new(2).await else { return };
    let only = |ns: &str| json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    env.queue_from("team-b", json!({"deserved": {GPU: "8"}, "namespaceSelector": only("team-b")})).await;
    env.queue_from("own", json!({"deserved": {GPU: "4"}, "namespaceSelector": only(NS)})).await;
    env.queue("open", None).await;
    env.start_scheduler();
    env.gang("steal", "team-b", 2, 2, 1, None).await;
    env.gang("mine", "own", 1, 1, 1, None).await;
    env.gang("shared", "open", 1, 1, 1, None).await;
    wait_for("the groups in queues that admit the namespace bound", T, || async {
        env.bound("mine").await == 1 && env.bound("shared").await == 1
    })
    .await;
    wait_for("Valid=False on the group naming team B's queue", T, || async {
        condition(&env.pod_group("steal").await, "Valid").is_some_and(|c| c.status == "False")
    })
    .await;
    let pg = env.pod_group("steal").await;
    let valid = condition(&pg, "Valid").expect("a Valid condition");
    assert_eq!(valid.reason, "QueueNotAllowed", "{valid:?}");
    assert!(
        valid.message.contains(&format!("{NS:?}")) && valid.message.contains("\"team-b\""),
        "the message names the namespace and the queue: {valid:?}"
    );
    // Many cycles (200 ms each): the group stays out, and it is reported once, not every cycle.
    for _ in 0..15 {
        assert_eq!(env.bound("steal").await, 0, "a group was scheduled in a queue its namespace may not use");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let warnings: Vec<Event> = env
        .events("QueueNotAllowed")
        .await
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("PodGroup"))
        .collect();
    assert_eq!(warnings.len(), 1, "one Warning Event on the PodGroup: {warnings:?}");
    let event = &warnings[0];
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.involved_object.name.as_deref(), Some("steal"));
    assert!(event.message.as_deref().is_some_and(|m| m.contains("team-b")), "{event:?}");
    for group in ["mine", "shared"] {
        let pg = env.pod_group(group).await;
        assert!(
            condition(&pg, "Valid").is_none_or(|c| c.status == "True"),
            "{group} was marked invalid: {:?}",
            pg.status
        );
    }
    env.stop().await;
}

/// Recovery checks node selectors and required node affinity like a new decision: an intent
/// binding a pod onto a node whose labels its `nodeSelector` or `requiredDuringScheduling`
/// affinity does not match is refused and reported, and the pod is then scheduled where it
/// may run. An intent naming a pod that is not a member of the intent's group (it belongs to
/// another group) is refused for that pod too, and the pod stays where its own group puts it
/// (unbound: its gang is one member short); the group's own member is bound per the intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_refuses_bindings_that_break_a_node_selector_or_affinity_or_name_a_stranger() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", None).await;
    let pool = "drover.test/pool";
    env.label("node-1", pool, "a").await;
    // A node selector only node-1 matches; the intent says node-0.
    env.group("picky", "q", 1, None).await;
    env.pod_with("picky-0", "picky", 1, json!({"nodeSelector": {pool: "a"}})).await;
    env.write_intent("picky", &[("picky-0", "node-0")]).await;
    // Required node affinity only node-1 matches; the intent says node-0.
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": pool, "operator": "In", "values": ["a"]}]}]}}}});
    env.group("affine", "q", 1, None).await;
    env.pod_with("affine-0", "affine", 1, affinity).await;
    env.write_intent("affine", &[("affine-0", "node-0")]).await;
    // A pod of another group (a gang of 2 with one pod: it never starts on its own) named in
    // the intent of group `host`, next to the host's own member.
    env.group("other", "q", 2, None).await;
    env.pod_with("stranger-0", "other", 1, json!({})).await;
    env.group("host", "q", 1, None).await;
    env.pod_with("host-0", "host", 1, json!({})).await;
    env.write_intent("host", &[("host-0", "node-0"), ("stranger-0", "node-0")]).await;
    env.start_scheduler();
    wait_for("every intent resolved", T, || async {
        let mut open = 0;
        for g in ["picky", "affine", "host"] {
            open += usize::from(has_intent(&env.pod_group(g).await));
        }
        open == 0
    })
    .await;
    let refusals: Vec<String> = env.events("BindIntentRefused").await.into_iter().filter_map(|e| e.message).collect();
    for pod in ["picky-0", "affine-0"] {
        assert!(
            refusals.iter().any(|m| m.contains(pod) && m.contains("node affinity/selector")),
            "the binding of {pod} onto a node it does not select is reported: {refusals:?}"
        );
    }
    assert!(
        refusals.iter().any(|m| m.contains("stranger-0") && m.contains("not a member")),
        "the binding of a pod of another group is reported: {refusals:?}"
    );
    // Refused, then scheduled normally: onto node-1, the node the pods select.
    wait_for("picky-0 and affine-0 scheduled", T, || async {
        env.node_of("picky-0").await.is_some() && env.node_of("affine-0").await.is_some()
    })
    .await;
    for pod in ["picky-0", "affine-0"] {
        assert_eq!(env.node_of(pod).await.as_deref(), Some("node-1"), "{pod} bound onto a node it does not select");
    }
    wait_for("host-0 bound per the intent", T, || async { env.node_of("host-0").await.is_some() }).await;
    assert_eq!(env.node_of("host-0").await.as_deref(), Some("node-0"), "the group's own member follows the intent");
    for _ in 0..15 {
        assert_eq!(env.node_of("stranger-0").await, None, "a pod of another group was bound through this intent");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.stop().await;
}

impl Env {
    /// A gang of `n` pods of `gpus` GPUs each in queue `q`, whose pods declare `deadline`
    /// seconds (`activeDeadlineSeconds`, the run time reservations plan with).
    async fn timed_gang(&self, name: &str, n: u32, gpus: u32, deadline: i64) {
        self.group(name, "q", n, None).await;
        self.pods(name, n, gpus).await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        for i in 0..n {
            let patch = json!({"spec": {"activeDeadlineSeconds": deadline}});
            api.patch(&format!("{name}-{i}"), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("deadline set");
        }
    }

    /// The node a pod is bound to, waiting until it is.
    async fn bound_node(&self, pod: &str) -> String {
        eventually(T.as_secs(), &format!("{pod} bound"), || self.node_of(pod)).await
    }
}

/// Runtime-aware backfill on the real API server: a gang that cannot start shows the nodes
/// reserved for it and its expected start (from the pods' `activeDeadlineSeconds` and
/// `startTime`) in `status.reservation`; a pod that would still run then stays off the
/// reserved capacity, one that ends before it starts at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_gang_reserves_nodes_and_shows_them_in_status() {
    let Some(mut env) = Env::new(2).await else { return };
    env.queue("q", Some(16)).await;
    env.start_scheduler();
    env.timed_gang("long", 1, 8, 3600).await;
    let long_node = env.bound_node("long-0").await;
    env.timed_gang("brief", 1, 4, 600).await;
    let brief_node = env.bound_node("brief-0").await;
    assert_ne!(long_node, brief_node, "8 GPUs fill one node");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let long_start = eventually(T.as_secs(), "the kubelet starts long-0", || async {
        pods.get("long-0").await.ok().and_then(|p| p.status?.start_time).map(|t| t.0.as_second())
    })
    .await;

    env.timed_gang("big", 2, 8, 100).await;
    let reservation = eventually(T.as_secs(), "big shows its reservation", || async {
        env.pod_group("big").await.status?.reservation
    })
    .await;
    let mut both = vec![long_node.clone(), brief_node.clone()];
    both.sort();
    assert_eq!(reservation.nodes, both);
    let start: jiff::Timestamp = reservation.start_time.parse().expect("RFC 3339");
    assert_eq!(start.as_second(), long_start + 3600, "big starts when long's deadline ends it");

    // 4 GPUs idle on brief's node: a pod running 7200 s would still hold them at the start.
    env.timed_gang("small-long", 1, 4, 7200).await;
    env.timed_gang("small-short", 1, 4, 600).await;
    assert_eq!(env.bound_node("small-short-0").await, brief_node, "what ends before the start runs now");
    for _ in 0..10 {
        assert_eq!(env.bound("small-long").await, 0, "a pod outlasting the start took reserved capacity");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.stop().await;
}

/// A group in a closed queue is left out of the cycle; its reason column (the
/// `Unschedulable` condition's message) says why instead of staying empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_closed_queue_shows_in_the_groups_reason() {
    let Some(mut env) = Env::new(1).await else { return };
    env.queue_from("shut", json!({"state": "Closed", "overQuotaWeight": 1})).await;
    env.start_scheduler();
    env.gang("waits", "shut", 1, 1, 1, None).await;
    wait_for("the reason names the closed queue", T, || async {
        let pg = env.pod_group("waits").await;
        condition(&pg, UNSCHEDULABLE)
            .is_some_and(|c| c.status == "True" && c.reason == "QueueClosed" && c.message.contains("is closed"))
    })
    .await;
    assert_eq!(env.bound("waits").await, 0);
    env.stop().await;
}

/// Counts the cycles a scheduler runs and skips.
#[derive(Default)]
struct Cycles {
    run: AtomicUsize,
    skipped: AtomicUsize,
}

impl CycleObserver for Cycles {
    fn on_cycle(&self, _report: &CycleReport<'_>) {
        self.run.fetch_add(1, Ordering::SeqCst);
    }

    fn on_skipped(&self) {
        self.skipped.fetch_add(1, Ordering::SeqCst);
    }
}

impl Cycles {
    fn counts(&self) -> (usize, usize) {
        (self.run.load(Ordering::SeqCst), self.skipped.load(Ordering::SeqCst))
    }

    /// Waits until the scheduler has skipped `n` cycles in a row, running none.
    async fn wait_quiet(&self, what: &str, n: usize) {
        let deadline = Instant::now() + T;
        let mut from = self.counts();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.counts();
            if now.0 != from.0 {
                from = now;
            } else if now.1 >= from.1 + n {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: (run, skipped) {from:?} -> {now:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_scheduler_skips_cycles_until_something_changes_a_write_fails_or_it_leads_again() {
    let Some(mut env) = Env::new(1).await else { return };
    let cycles = Arc::new(Cycles::default());
    env.queue("q", None).await;
    env.start_scheduler_observed(cycles.clone());
    env.gang("small", "q", 2, 2, 4, None).await;
    wait_for("small bound", T, || async { env.bound("small").await == 2 }).await;
    env.gang("big", "q", 1, 1, 8, None).await;
    // Everything settled (small running, big waiting and saying why): cycles are skipped.
    cycles.wait_quiet("a quiet scheduler", 5).await;
    assert!(condition(&env.pod_group("big").await, UNSCHEDULABLE).is_some(), "big says why it waits");

    // A change runs a cycle: a new waiting gang gets its status, through failed writes,
    // which are retried every cycle rather than skipped.
    let (run, _) = cycles.counts();
    env.server.faults().fail_next_writes("podgroups/status", 3, 500);
    env.gang("late", "q", 1, 1, 8, None).await;
    wait_for("late says why it waits", T, || async {
        condition(&env.pod_group("late").await, UNSCHEDULABLE).is_some()
    })
    .await;
    assert!(
        cycles.counts().0 >= run + 4,
        "three failed status writes and the one that succeeded: {:?}",
        cycles.counts()
    );
    cycles.wait_quiet("quiet again", 5).await;

    // Leading again runs a full cycle although nothing changed.
    env.leader.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (run, _) = cycles.counts();
    env.leader.store(true, Ordering::SeqCst);
    wait_for("a cycle on leading again", T, || async { cycles.counts().0 > run }).await;
    cycles.wait_quiet("quiet after leading again", 5).await;

    // Capacity freed is a change: big starts once small is gone.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    for i in 0..2 {
        pods.delete(&format!("small-{i}"), &DeleteParams::default()).await.expect("small's pod deleted");
    }
    wait_for("big bound", T, || async { env.bound("big").await == 1 }).await;
    env.assert_no_overcommit().await;
    env.stop().await;
}

/// The scheduler schedules only while the charge guard holds. Without it a gang waits,
/// nothing bound; once the guard is installed the gang binds, each pod carrying its charge
/// record from its Binding, which no update may then change or remove (not even an admin's:
/// the guard binds everyone), and which no new pod may carry. Other annotations stay editable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_binds_only_under_the_charge_guard_which_keeps_each_record_as_bound() {
    let Some(mut env) = Env::unguarded(1).await else { return };
    env.queue("team", None).await;
    env.gang("train", "team", 2, 2, 1, None).await;
    env.start_scheduler();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    for name in ["train-0", "train-1"] {
        let pod = pods.get(name).await.expect("the pod");
        assert_eq!(pod.spec.and_then(|s| s.node_name), None, "{name} bound without the charge guard");
    }

    drover_k8s::charge::install_guard(&env.client, "drover-test").await.expect("the charge guard is accepted");
    let want = Charge { queue: "team".into(), group: "train".into(), priority_class: "train".into() };
    for name in ["train-0", "train-1"] {
        let pod = eventually(30, &format!("{name} bound under the guard"), || async {
            pods.get(name).await.ok().filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        })
        .await;
        assert_eq!(Charge::of(&pod), Some(want.clone()), "{name}'s record");
    }

    let patch = |value: serde_json::Value| json!({"metadata": {"annotations": {CHARGE_ANNOTATION: value}}});
    for (what, value) in [("changed", json!("queue=other podGroup=train priorityClass=")), ("removed", json!(null))] {
        let refused = pods.patch("train-0", &PatchParams::default(), &Patch::Merge(&patch(value))).await;
        let message = refused.expect_err(&format!("the record {what}")).to_string();
        assert!(message.contains("may not be added, changed or removed"), "{what}: {message}");
    }
    let other = json!({"metadata": {"annotations": {"team.example/note": "fine"}}});
    pods.patch("train-0", &PatchParams::default(), &Patch::Merge(&other))
        .await
        .expect("other annotations are editable");
    assert_eq!(Charge::of(&pods.get("train-0").await.expect("the pod")), Some(want));

    let mut forged = pods.get("train-1").await.expect("the pod");
    forged.metadata = ObjectMeta {
        name: Some("forged".into()),
        annotations: Some([(CHARGE_ANNOTATION.to_string(), "queue=team podGroup=x priorityClass=".into())].into()),
        ..ObjectMeta::default()
    };
    forged.spec.as_mut().expect("a spec").node_name = None;
    forged.status = None;
    let refused = pods.create(&PostParams::default(), &forged).await.expect_err("a pod created with a record");
    assert!(refused.to_string().contains("may not be created with the annotation"), "{refused}");
    env.stop().await;
}
