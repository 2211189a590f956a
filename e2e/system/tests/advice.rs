//! Advice that works, on a real API server with the real binaries: the number a waiting gang
//! is told to change is named where it is set (a Project's node pool `gpuLimit`, not the queue
//! made from it), an edit of such a queue is put back with a Warning Event naming the Project,
//! a gang short of pods is told how many more it needs (and its pods do not ask autoscalers
//! for nodes), and a gang larger than the cluster, or than the nodes its node selector allows,
//! is told it never starts as it is.

use drover_api::crd::department::Department;
use drover_api::crd::forecast::ForecastBasis;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::project::Project;
use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, Cluster};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

fn group(name: &str, queue: Option<&str>, min: u32) -> Value {
    let mut spec = json!({"minMember": min});
    if let Some(q) = queue {
        spec["queue"] = json!(q);
    }
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec})
}

fn pod(name: &str, group: &str, gpus: u32, pool: Option<&str>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"scheduling.drover.dev/pod-group": group}},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer",
            "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}, "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}});
    if let Some(pool) = pool {
        pod["spec"]["nodeSelector"] = json!({POOL: pool});
    }
    pod
}

/// The node label a pod's `nodeSelector` names its node pool by.
const POOL: &str = drover_api::NODE_POOL_LABEL;

/// A gang of `pods` pods of `gpus` GPUs with minimum `min`, in `ns`.
async fn gang(cluster: &Cluster, ns: &str, name: &str, queue: Option<&str>, min: u32, pods: u32, gpus: u32) {
    pinned_gang(cluster, ns, name, queue, (min, pods, gpus), None).await;
}

/// [`gang`], its pods selecting node pool `pool`.
async fn pinned_gang(
    cluster: &Cluster,
    ns: &str,
    name: &str,
    queue: Option<&str>,
    (min, pods, gpus): (u32, u32, u32),
    pool: Option<&str>,
) {
    create(&Api::<PodGroup>::namespaced(cluster.client.clone(), ns), group(name, queue, min)).await;
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    for i in 0..pods {
        create(&api, pod(&format!("{name}-{i}"), name, gpus, pool)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advice_names_what_governs_the_number_and_what_a_gang_lacks() {
    let Some(cluster) = Cluster::start(2).await else { return };
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let _: Department = create(
        &Api::all(client.clone()),
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Department", "metadata": {"name": "research"},
            "spec": {"nodePools": [{"name": "gpu", "gpu": "8"}]}}),
    )
    .await;
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team-a");
    eventually(30, "team-a's default ServiceAccount", || async { accounts.get_opt("default").await.ok().flatten() })
        .await;
    let _: Project = create(
        &Api::all(client.clone()),
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project", "metadata": {"name": "vision"},
            "spec": {"department": "research", "namespaces": ["team-a"],
                "nodePools": [{"name": "gpu", "gpu": "2", "gpuLimit": "2"}]}}),
    )
    .await;
    let queues: Api<Queue> = Api::all(client.clone());
    let limit = |q: &Queue| q.spec.limit.as_ref().and_then(|l| l.get("nvidia.com/gpu")).map(|v| v.0.clone());
    eventually(30, &format!("queue vision.gpu with its Project's limit (logs in {logs})"), || async {
        queues.get("vision.gpu").await.ok().filter(|q| limit(q).as_deref() == Some("2"))
    })
    .await;

    // An edit of the managed queue is put back, and the Queue says why.
    let raise = json!({"spec": {"limit": {"nvidia.com/gpu": "8"}}});
    queues.patch("vision.gpu", &PatchParams::default(), &Patch::Merge(&raise)).await.expect("the edit is accepted");
    eventually(30, "the edit put back", || async {
        queues.get("vision.gpu").await.ok().filter(|q| limit(q).as_deref() == Some("2"))
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let warning = eventually(30, "a ManagedQueue Warning on the queue", || async {
        let list = events.list(&ListParams::default().fields("involvedObject.name=vision.gpu")).await.ok()?;
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("ManagedQueue"))
    })
    .await;
    let message = warning.message.unwrap_or_default();
    assert!(message.contains("Project vision's node pool gpu") && message.contains("spec.nodePools"), "{message}");

    // Over the Project's limit: the advice names the Project's gpuLimit.
    gang(&cluster, "team-a", "wide", Some("vision.gpu"), 3, 3, 1).await;
    let groups_a: Api<PodGroup> = Api::namespaced(client.clone(), "team-a");
    let to_start = eventually(30, &format!("wide's forecast says what would start it (logs in {logs})"), || async {
        groups_a.get("wide").await.ok()?.status?.forecast?.to_start.filter(|t| t.contains("gpuLimit"))
    })
    .await;
    assert!(
        to_start
            .contains("raise Project vision's node pool gpu gpuLimit (queue vision.gpu is made from it) to at least 3"),
        "{to_start}"
    );

    // Short of one pod: told so, and its pods wait for pods, not for nodes.
    gang(&cluster, "default", "short", None, 3, 2, 1).await;
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), "default");
    // Its pods arrive one by one: a reason written before the second exists counts one.
    let reason = eventually(30, "short's reason, once both its pods exist", || async {
        let status = groups.get("short").await.ok()?.status?;
        let condition = status.conditions.into_iter().find(|c| c.type_ == "Unschedulable" && c.status == "True")?;
        Some(condition.message).filter(|m| !m.contains("has 1 of the 3 pods"))
    })
    .await;
    assert!(reason.contains("has 2 of the 3 pods its gang minimum needs: 1 more pod must be created"), "{reason}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let marked = eventually(30, "short's pods marked", || async {
        let p = pods.get("short-0").await.ok()?;
        p.status?.conditions?.into_iter().find(|c| c.type_ == "PodScheduled")?.reason
    })
    .await;
    assert_eq!(marked, "WaitingForPods", "more nodes would not help a gang short of pods");

    // Larger than the cluster (two nodes of 8 GPUs): never, as it is.
    gang(&cluster, "default", "huge", None, 3, 3, 8).await;
    let forecast =
        // Its pods arrive one by one: until both exist it is a gang short of pods.
        eventually(30, "huge's forecast says never", || async {
            groups.get("huge").await.ok()?.status?.forecast.filter(|f| f.basis == ForecastBasis::Never)
        })
        .await;
    assert_eq!((forecast.basis, forecast.expected_start.clone()), (ForecastBasis::Never, None), "{forecast:?}");
    let explain = std::process::Command::new(drover_e2e::binary("drover").expect("drover is built"))
        .args(["explain", "pg", "default/huge"])
        .env("KUBECONFIG", cluster.server().kubeconfig())
        .output()
        .expect("drover explain runs");
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("never, as it is"),
        "drover explain pg default/huge:\n{text}\n{}",
        String::from_utf8_lossy(&explain.stderr)
    );

    // Larger than the one node its pool has (the other node is idle): never, as it is, and the
    // reason names the nodes its selector allows.
    let nodes: Api<Node> = Api::all(client.clone());
    let label = json!({"metadata": {"labels": {POOL: "small"}}});
    nodes.patch("node-1", &PatchParams::default(), &Patch::Merge(&label)).await.expect("node-1 labelled");
    pinned_gang(&cluster, "default", "pinned", None, (2, 2, 8), Some("small")).await;
    let pinned = eventually(30, "pinned's forecast says never", || async {
        let status = groups.get("pinned").await.ok()?.status?;
        status.forecast.as_ref().filter(|f| f.basis == ForecastBasis::Never)?;
        status.conditions.into_iter().find(|c| c.type_ == "Unschedulable" && c.status == "True").map(|c| c.message)
    })
    .await;
    assert!(
        pinned.contains("the nodes its pods' node selector, affinity and tolerations allow have 8 nvidia.com/gpu in all, the gang's pods need 16"),
        "{pinned}"
    );
}
