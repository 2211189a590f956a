//! A scheduler that schedules nothing says so where users look: started without the charge
//! guard, `drover scheduler` marks every pending pod `PodScheduled=False` (reason
//! `SchedulingHalted`, the missing policy and the command that applies it in the message) with
//! one Event, writes why into every Queue's `status.halted`, and `drover queue tree` heads its
//! table with it; once the guard is applied, the pod binds and the Queue no longer says so.

use std::time::Duration;

use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, Cluster};
use drover_envtest::Options;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use serde_json::json;

fn scheduled(pod: &Pod) -> Option<(String, String)> {
    let c = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?;
    Some((c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_charge_guard_the_pods_the_queues_and_the_queue_tree_say_scheduling_is_halted() {
    let Some(mut cluster) = Cluster::start_without_drover(1, Options::default()).await else { return };
    cluster.spawn_drover("controllers", &[]).expect("drover controllers starts");
    cluster.spawn_drover("scheduler", &[]).expect("drover scheduler starts");
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let queues: Api<Queue> = Api::all(client.clone());
    create(
        &queues,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "research"},
            "spec": {"deserved": {"nvidia.com/gpu": "8"}}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train",
                "annotations": {"scheduling.drover.dev/queue": "research"}},
            "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}),
    )
    .await;
    let (reason, message) = eventually(60, "the pod says scheduling is halted", || async {
        scheduled(&pods.get("train").await.ok()?).filter(|(r, _)| r == "SchedulingHalted")
    })
    .await;
    assert!(message.contains("drover-charge-guard is missing"), "{reason}: {message}");
    assert!(message.contains("drover manifests"), "the message says how to fix it: {message}");
    let halted = eventually(30, "the Queue says scheduling is halted", || async {
        queues.get("research").await.ok()?.status?.halted
    })
    .await;
    assert!(halted.contains("drover-charge-guard"), "{halted}");
    let tree = std::process::Command::new(drover_e2e::binary("drover").expect("drover is built"))
        .args(["queue", "tree"])
        .env("KUBECONFIG", cluster.server().kubeconfig())
        .output()
        .expect("drover queue tree runs");
    let text = String::from_utf8_lossy(&tree.stdout);
    assert!(text.starts_with("SCHEDULING HALTED: "), "drover queue tree:\n{text}");
    // Rounds go on (the guard is checked every 5 s); the pod is told once.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let told: Vec<String> = events
        .list(&ListParams::default().fields("involvedObject.name=train"))
        .await
        .expect("events listed")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .filter_map(|e| e.message)
        .collect();
    assert_eq!(told.len(), 1, "one Event for the halt, not one a round: {told:#?}; logs in {logs}");
    assert!(told[0].contains("schedules nothing"), "{told:?}");

    cluster.guard_charges().await;
    eventually(60, "the pod is bound once the guard holds", || async { pods.get("train").await.ok()?.spec?.node_name })
        .await;
    eventually(30, "the Queue no longer says scheduling is halted", || async {
        queues.get("research").await.ok()?.status.is_some_and(|s| s.halted.is_none()).then_some(())
    })
    .await;
}
