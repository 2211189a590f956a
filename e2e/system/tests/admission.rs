//! Admission on a gang's declared size, through the real API with the real binaries: a
//! PodGroup created before its pods is judged on its `minMember` and `minResources`, never on
//! the pods seen so far. One larger than its queue's limit, and one larger than the whole
//! cluster, stay `Pending` with the "not admitted: ..." reason, before and after their pods
//! come, and hold nothing of their queue (a later small group in the same queue runs); one
//! that fits is admitted while it has no pods and runs once they are made.

use std::time::{Duration, Instant};

use drover_api::crd::podgroup::{PodGroup, PodGroupPhase};
use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, Cluster};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{json, Value};

const NS: &str = "default";

/// A PodGroup of `min` pods in `queue` declaring `gpus` GPUs as its minimum.
fn group(name: &str, queue: &str, min: u32, gpus: u32) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minMember": min, "queue": queue, "minResources": {"nvidia.com/gpu": gpus.to_string()}}})
}

/// Pod `index` of the group `group`, asking for `gpus` GPUs.
fn member(group: &str, index: u32, gpus: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{group}-{index}"), "namespace": NS,
            "annotations": {"scheduling.drover.dev/pod-group": group}},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer", "resources": {
            "requests": {"nvidia.com/gpu": gpus.to_string()}, "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}})
}

/// The group's phase and the message of its `Unschedulable` condition (empty if none).
async fn state(groups: &Api<PodGroup>, name: &str) -> Option<(PodGroupPhase, String)> {
    let status = groups.get(name).await.ok()?.status?;
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Unschedulable" && c.status == "True")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    Some((status.phase, reason))
}

/// Waits until the group is `Pending` with a "not admitted" reason containing `cause`.
async fn refused(groups: &Api<PodGroup>, name: &str, cause: &str, logs: &str) -> String {
    let mut last = None;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        last = state(groups, name).await;
        if let Some((PodGroupPhase::Pending, reason)) = &last {
            if reason.starts_with("not admitted: ") && reason.contains(cause) {
                return reason.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{name} was never Pending, not admitted because {cause}; last {last:?} (logs in {logs})")
}

/// Checks, for `period`, that none of `names` is ever admitted.
async fn never_admitted(groups: &Api<PodGroup>, names: &[&str], period: Duration, logs: &str) {
    let until = Instant::now() + period;
    while Instant::now() < until {
        for name in names {
            let (phase, reason) = state(groups, name).await.expect("a status");
            assert_eq!(phase, PodGroupPhase::Pending, "{name} was admitted (reason {reason:?}; logs in {logs})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn bound(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_admitted_on_their_declared_size_before_their_pods_exist() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let queues: Api<Queue> = Api::all(client.clone());
    create(
        &queues,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "capped"},
            "spec": {"deserved": {"nvidia.com/gpu": "4"}, "limit": {"nvidia.com/gpu": "4"}}}),
    )
    .await;

    // One node of 8 GPUs; the groups come first, without pods.
    create(&groups, group("over-limit", "capped", 2, 8)).await;
    create(&groups, group("over-cluster", "default", 2, 16)).await;
    create(&groups, group("fits", "capped", 2, 2)).await;

    let limit = refused(&groups, "over-limit", "limit", &logs).await;
    // (The figure counts what the queue already holds for admitted groups, `fits` included.)
    assert!(
        limit.contains("limit (nvidia.com/gpu ") && limit.ends_with(" > 4)"),
        "the reason quotes the limit: {limit:?}"
    );
    let cluster_reason = refused(&groups, "over-cluster", "whole cluster", &logs).await;
    assert!(cluster_reason.contains("nvidia.com/gpu 16 > 8"), "the reason quotes the cluster: {cluster_reason:?}");
    eventually(30, &format!("fits admitted with no pods yet (logs in {logs})"), || async {
        (state(&groups, "fits").await?.0 == PodGroupPhase::Inqueue).then_some(())
    })
    .await;
    never_admitted(&groups, &["over-limit", "over-cluster"], Duration::from_secs(3), &logs).await;

    // The pods come: the refused groups stay refused, the admitted one runs.
    for i in 0..2 {
        create(&pods, member("over-limit", i, 4)).await;
        create(&pods, member("over-cluster", i, 8)).await;
        create(&pods, member("fits", i, 1)).await;
    }
    eventually(30, &format!("fits' pods bound (logs in {logs})"), || async {
        let a = pods.get("fits-0").await.ok()?;
        let b = pods.get("fits-1").await.ok()?;
        (bound(&a) && bound(&b)).then_some(())
    })
    .await;
    never_admitted(&groups, &["over-limit", "over-cluster"], Duration::from_secs(3), &logs).await;

    // The refused group holds nothing of its queue: a later group of 2 GPUs fits beside
    // fits' 2 under the limit of 4.
    create(&groups, group("later", "capped", 1, 2)).await;
    create(&pods, member("later", 0, 2)).await;
    eventually(30, &format!("the later group in the limited queue runs (logs in {logs})"), || async {
        bound(&pods.get("later-0").await.ok()?).then_some(())
    })
    .await;
    for name in ["over-limit-0", "over-limit-1", "over-cluster-0", "over-cluster-1"] {
        let pod = pods.get(name).await.expect("pod");
        assert!(!bound(&pod), "{name} of a refused group was bound (logs in {logs})");
    }
}
