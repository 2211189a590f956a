//! Plain pods (no Drover Job, `schedulerName: drover`) with tenant-written input that Drover
//! must refuse. A plain pod whose `scheduling.drover.dev/queue` annotation names a queue its
//! namespace may not use, on a real kube-apiserver
//! (drover-envtest) with the real PodGroup controller and the real scheduler loop: the
//! controller gives the pod its one-pod PodGroup in the queue the annotation names (a queue
//! name is a request, not a right), the scheduler refuses that group (`Valid=False`, reason
//! `QueueNotAllowed`, and a Warning Event) and never binds the pod, and the namespace's other
//! plain pods, in queues that admit it, are scheduled meanwhile.
//!
//! A second test gives a plain pod a name too long for its group's (`pod-<name>` would pass
//! 253 characters): the pod is reported (`PodGroupNameTooLong`) and left ungrouped, and the
//! controller goes on grouping other pods.
//!
//! Each test starts its own control plane (API server and etcd, no ServiceAccount admission);
//! without the control-plane binaries it says it is skipped and passes.

use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_controllers::queues::{self, ANNOTATION_POD_GROUP, ANNOTATION_QUEUE, POD_GROUP_PREFIX};
use drover_envtest::eventually;
use drover_k8s::scheduler::{self, NoopObserver, SchedulerOptions};
use drover_kubelet::KubeletConfig;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TENANT: &str = "team-a";
const GPU: &str = "nvidia.com/gpu";
const WAIT: Duration = Duration::from_secs(30);

async fn create<K>(api: &Api<K>, manifest: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + serde::Serialize,
{
    let object: K = serde_json::from_value(manifest).expect("manifest parses");
    api.create(&PostParams::default(), &object).await.expect("object created")
}

/// A plain GPU pod for Drover in [`TENANT`], asking for `queue` by annotation.
fn plain_pod(name: &str, queue: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": TENANT, "annotations": {ANNOTATION_QUEUE: queue}},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer",
            "resources": {"requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}}}]}})
}

/// A Queue admitting only the namespace `namespace`.
fn queue_for(name: &str, namespace: &str) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name},
        "spec": {"deserved": {GPU: "4"},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}})
}

fn valid(pg: &PodGroup) -> Option<&Condition> {
    pg.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Valid")
}

/// Pod `sneak` of `team-a` asks for team B's queue by annotation, pod `honest` for team A's:
/// `sneak`'s one-pod group takes the queue asked for and is refused (`Valid=False
/// QueueNotAllowed` naming namespace and queue, a Warning Event on the group), `sneak` stays
/// unbound for many cycles, and `honest` is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_pod_annotated_with_a_queue_its_namespace_may_not_use_stays_unscheduled() {
    let Some(server) = drover_envtest::Server::start().await else { return };
    let client = server.client();
    drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
    drover_k8s::charge::install_guard(&client, "drover-test").await.expect("the charge guard is accepted");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [TENANT, "team-b"] {
        create(&namespaces, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    }
    let queues: Api<Queue> = Api::all(client.clone());
    create(&queues, queue_for("team-b", "team-b")).await;
    create(&queues, queue_for("team-a", TENANT)).await;

    let mut stops = Vec::new();
    let mut signal = || {
        let (tx, rx) = oneshot::channel::<()>();
        stops.push(tx);
        async move {
            let _ = rx.await;
        }
    };
    let kubelet = KubeletConfig::gpu_nodes(1);
    tokio::spawn(drover_kubelet::run(client.clone(), kubelet, signal()));
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(WAIT.as_secs(), "node-0 registered", || async { nodes.get_opt("node-0").await.ok().flatten() }).await;
    tokio::spawn(queues::run_pod_groups(client.clone(), signal()));
    let options = SchedulerOptions { period: Duration::from_millis(200), ..SchedulerOptions::default() };
    tokio::spawn(scheduler::run(client.clone(), options, || true, Arc::new(NoopObserver), signal()));

    let pods: Api<Pod> = Api::namespaced(client.clone(), TENANT);
    create(&pods, plain_pod("sneak", "team-b")).await;
    create(&pods, plain_pod("honest", "team-a")).await;

    // The controller does what the annotation asks: a one-pod group in team B's queue.
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), TENANT);
    let group = format!("{POD_GROUP_PREFIX}sneak");
    let made = eventually(WAIT.as_secs(), "the one-pod group of the annotated pod", || async {
        groups.get_opt(&group).await.ok().flatten()
    })
    .await;
    assert_eq!(made.spec.queue.as_deref(), Some("team-b"), "the group takes the queue the annotation names");
    assert_eq!(made.spec.min_member, 1);
    eventually(WAIT.as_secs(), "the pod annotated with its group", || async {
        let pod = pods.get("sneak").await.ok()?;
        (pod.metadata.annotations?.get(ANNOTATION_POD_GROUP)? == &group).then_some(())
    })
    .await;

    // The scheduler refuses the group, and schedules the namespace's pod in its own queue.
    eventually(WAIT.as_secs(), "the honest pod bound", || async { pods.get("honest").await.ok()?.spec?.node_name })
        .await;
    let refusal = eventually(WAIT.as_secs(), "Valid=False on the one-pod group naming team B's queue", || async {
        valid(&groups.get(&group).await.ok()?).filter(|c| c.status == "False").cloned()
    })
    .await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    assert!(
        refusal.message.contains("\"team-a\"") && refusal.message.contains("\"team-b\""),
        "the message names the namespace and the queue: {refusal:?}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), TENANT);
    let warning = eventually(WAIT.as_secs(), "a Warning Event on the refused group", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("QueueNotAllowed") && e.involved_object.name.as_deref() == Some(group.as_str())
        })
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"), "{warning:?}");
    assert_eq!(warning.involved_object.kind.as_deref(), Some("PodGroup"), "{warning:?}");
    // Many cycles (200 ms each) for anything wrong to happen.
    for _ in 0..20 {
        let pod = pods.get("sneak").await.expect("the refused pod exists");
        assert_eq!(
            pod.spec.and_then(|s| s.node_name),
            None,
            "a pod was bound through a queue its namespace may not use"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let honest_group = groups.get(&format!("{POD_GROUP_PREFIX}honest")).await.expect("the honest pod's group");
    assert!(valid(&honest_group).is_none_or(|c| c.status == "True"), "{:?}", honest_group.status);

    for stop in stops {
        let _ = stop.send(());
    }
    server.stop().await;
}

/// A pod name of 251 characters (the most a name may have is 253) makes `pod-<name>` too long
/// for a PodGroup: a Warning `PodGroupNameTooLong` on the pod, no group, and the next pod is
/// grouped as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_pod_whose_group_name_would_be_too_long_is_reported_and_others_are_grouped() {
    let Some(server) = drover_envtest::Server::start().await else { return };
    let client = server.client();
    drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(&namespaces, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT}})).await;
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(queues::run_pod_groups(client.clone(), async {
        let _ = stopped.await;
    }));
    // Four DNS labels of 62 characters: a valid pod name of 251 characters.
    let long = ["a"; 4].map(|c| c.repeat(62)).join(".");
    assert_eq!(long.len(), 251);
    let pods: Api<Pod> = Api::namespaced(client.clone(), TENANT);
    create(&pods, plain_pod(&long, "team-a")).await;
    create(&pods, plain_pod("after", "team-a")).await;
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), TENANT);
    eventually(WAIT.as_secs(), "the next pod grouped", || async { groups.get_opt("pod-after").await.ok().flatten() })
        .await;
    let events: Api<Event> = Api::namespaced(client.clone(), TENANT);
    let warning = eventually(WAIT.as_secs(), "a Warning PodGroupNameTooLong on the pod", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("PodGroupNameTooLong") && e.involved_object.name.as_deref() == Some(&long)
        })
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"), "{warning:?}");
    assert_eq!(warning.involved_object.kind.as_deref(), Some("Pod"), "{warning:?}");
    assert!(warning.message.as_deref().is_some_and(|m| m.contains("253")), "{warning:?}");
    let listed = groups.list(&ListParams::default()).await.expect("groups listed");
    let names: Vec<String> = listed.items.into_iter().filter_map(|g| g.metadata.name).collect();
    assert_eq!(names, ["pod-after"], "only the pod with a short enough name is grouped");
    let pod = pods.get(&long).await.expect("the pod");
    assert!(
        !pod.metadata.annotations.unwrap_or_default().contains_key(ANNOTATION_POD_GROUP),
        "the pod was annotated with a group"
    );
    let _ = stop.send(());
    server.stop().await;
}
