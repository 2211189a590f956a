//! What the cluster autoscaler and Karpenter see of Drover's waiting gangs, on the real
//! control plane with the real binaries: the pods of a gang that cannot start carry
//! `PodScheduled=False`, reason `Unschedulable`, the gang's reason as message, all of them;
//! a gang its queue's limit holds is marked `WaitingForQuota`, which neither autoscaler acts
//! on; when nodes are added the gang binds, its pods are `PodScheduled=True` and the
//! autoscalers see nothing more. Each filter below is the autoscaler's own rule, read from
//! its source and cited where it is written.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, Cluster, NODE_ALLOCATABLE};
use k8s_openapi::api::core::v1::{Event, Pod, PodCondition};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const NS: &str = "default";

/// A gang Job of `replicas` pods of `gpus` GPUs each, all needed to start, running for ever.
fn gang(name: &str, queue: &str, replicas: u32, gpus: u32) -> Value {
    json!({
        "apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minAvailable": replicas, "queue": queue, "tasks": [{"name": "worker", "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "main", "image": "trainer", "resources": {
                "requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "1"},
                "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}]}
    })
}

fn pod_scheduled(pod: &Pod) -> Option<&PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")
}

fn node_name(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

/// The pods the cluster autoscaler scales up for, as it picks them (kubernetes/autoscaler,
/// `cluster-autoscaler/utils/kubernetes/listers.go`): `AllPodLister` leaves out `Succeeded`
/// and `Failed` pods, then `UnschedulablePods` keeps those with an empty `spec.nodeName`, no
/// `deletionTimestamp`, and a `PodScheduled` condition whose status is `False` and reason is
/// `Unschedulable`. The scheduler's name does not matter unless `--allowed-scheduler-names`
/// is set (it must then include `drover`); pods of a scheduler in `--bypassed-scheduler-names`
/// would also count without any condition, which Drover does not need.
fn cluster_autoscaler_sees(pod: &Pod) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed")
        && node_name(pod).is_empty()
        && pod.metadata.deletion_timestamp.is_none()
        && pod_scheduled(pod).is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
}

/// The pods Karpenter provisions for (kubernetes-sigs/karpenter, `pkg/utils/pod/scheduling.go`,
/// `IsProvisionable`): a `PodScheduled` condition with reason `Unschedulable`
/// (`FailedToSchedule`), an empty `spec.nodeName`, an empty `status.nominatedNodeName`, and not
/// owned by a DaemonSet or a Node.
fn karpenter_sees(pod: &Pod) -> bool {
    let owned_by = |kind: &str| {
        pod.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == kind && matches!(o.api_version.as_str(), "apps/v1" | "v1"))
    };
    pod_scheduled(pod).is_some_and(|c| c.reason.as_deref() == Some("Unschedulable"))
        && node_name(pod).is_empty()
        && pod.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()).unwrap_or_default().is_empty()
        && !owned_by("DaemonSet")
        && !owned_by("Node")
}

/// The names of the pods `filter` keeps, with their `PodScheduled` message.
async fn view(pods: &Api<Pod>, filter: fn(&Pod) -> bool) -> BTreeMap<String, String> {
    let list = pods.list(&ListParams::default()).await.expect("pods listed");
    list.items
        .iter()
        .filter(|p| filter(p))
        .map(|p| {
            let message = pod_scheduled(p).and_then(|c| c.message.clone()).unwrap_or_default();
            (p.metadata.name.clone().unwrap_or_default(), message)
        })
        .collect()
}

/// The job's pods by name.
async fn job_pods(pods: &Api<Pod>, job: &str) -> BTreeMap<String, Pod> {
    let selector = format!("batch.drover.dev/job-name={job}");
    let list = pods.list(&ListParams::default().labels(&selector)).await.expect("pods listed");
    list.items.into_iter().map(|p| (p.metadata.name.clone().unwrap_or_default(), p)).collect()
}

/// The group's reason, as its `Unschedulable` condition states it.
async fn group_reason(groups: &Api<PodGroup>, name: &str) -> Option<String> {
    let status = groups.get(name).await.ok()?.status?;
    let c = status.conditions.into_iter().find(|c| c.type_ == "Unschedulable" && c.status == "True")?;
    Some(c.message)
}

/// `FailedScheduling` Warnings on the pod `name`.
async fn failed_scheduling(events: &Api<Event>, name: &str) -> Vec<Event> {
    let fields = format!("involvedObject.name={name},involvedObject.kind=Pod");
    let list = events.list(&ListParams::default().fields(&fields)).await.expect("events listed");
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling") && e.type_.as_deref() == Some("Warning"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscalers_see_whole_waiting_gangs_until_nodes_come() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let queues: Api<Queue> = Api::all(client.clone());
    create(
        &queues,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "capped"},
            "spec": {"deserved": {"nvidia.com/gpu": "4"}, "limit": {"nvidia.com/gpu": "4"}}}),
    )
    .await;

    // One node of 8 GPUs. `big` needs 16 at once: more nodes would let it start. `capped`
    // needs 8 in a queue limited to 4: more nodes would not.
    create(&jobs, gang("big", "default", 4, 4)).await;
    create(&jobs, gang("capped", "capped", 2, 4)).await;

    let expected =
        eventually(60, &format!("the autoscalers see big's 4 pods with its reason (logs in {logs})"), || async {
            let reason = group_reason(&groups, "big").await?;
            let big: BTreeMap<String, String> =
                job_pods(&pods, "big").await.into_keys().map(|name| (name, reason.clone())).collect();
            (big.len() == 4 && view(&pods, cluster_autoscaler_sees).await == big).then_some(big)
        })
        .await;
    assert_eq!(view(&pods, karpenter_sees).await, expected, "Karpenter sees the same pods (logs in {logs})");

    // The limited gang is marked too, with its own reason, but not for the autoscalers.
    let capped = eventually(30, &format!("capped's pods marked WaitingForQuota (logs in {logs})"), || async {
        let reason = group_reason(&groups, "capped").await?;
        let list = job_pods(&pods, "capped").await;
        let marked = list.values().all(|p| {
            pod_scheduled(p).is_some_and(|c| {
                c.status == "False"
                    && c.reason.as_deref() == Some("WaitingForQuota")
                    && c.message.as_deref() == Some(reason.as_str())
            })
        });
        (list.len() == 2 && marked).then_some(reason)
    })
    .await;
    assert!(capped.contains("limit"), "capped waits for its queue's limit: {capped:?}");

    // A FailedScheduling Warning on each waiting pod says the gang's reason once; over many
    // cycles with the reason unchanged, neither the pods nor the events are written again.
    let reason = expected.values().next().expect("a pod").clone();
    let versions = |list: &BTreeMap<String, Pod>| -> BTreeMap<String, Option<String>> {
        list.iter().map(|(n, p)| (n.clone(), p.metadata.resource_version.clone())).collect()
    };
    for name in expected.keys() {
        let found = eventually(20, &format!("a FailedScheduling Warning on {name} (logs in {logs})"), || async {
            let list = failed_scheduling(&events, name).await;
            (!list.is_empty()).then_some(list)
        })
        .await;
        assert!(found.iter().all(|e| e.message.as_deref() == Some(reason.as_str())), "{name}: {found:?}");
    }
    let before = versions(&job_pods(&pods, "big").await);
    tokio::time::sleep(Duration::from_secs(4)).await; // 20 scheduling periods
    assert_eq!(group_reason(&groups, "big").await.as_deref(), Some(reason.as_str()), "the reason did not change");
    assert_eq!(versions(&job_pods(&pods, "big").await), before, "waiting pods were rewritten (logs in {logs})");
    for name in expected.keys() {
        assert_eq!(failed_scheduling(&events, name).await.len(), 1, "{name}: one Event for one reason");
    }

    // The API server itself marks a pod scheduled when it accepts a binding, which is why
    // Drover writes nothing then: a pod of another scheduler, marked unschedulable, bound by hand.
    let probe: Pod = create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
            "spec": {"schedulerName": "someone-else", "containers": [{"name": "main", "image": "x"}]}}),
    )
    .await;
    let unschedulable = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "no room"}]}});
    pods.patch_status("probe", &PatchParams::default(), &Patch::Strategic(&unschedulable)).await.expect("marked");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "probe", "uid": probe.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "nowhere"}});
    pods.create_subresource::<_, Value>("binding", "probe", &PostParams::default(), &binding).await.expect("bound");
    let probe = pods.get("probe").await.expect("probe");
    let c = pod_scheduled(&probe).expect("a PodScheduled condition");
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", None), "the binding marks the pod: {c:?}");
    pods.delete("probe", &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() })
        .await
        .expect("probe deleted");

    // The autoscaler adds a node: the gang starts, every pod is PodScheduled=True, and neither
    // autoscaler sees a pod any more (the limited gang's pods still wait, unseen).
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = drover_kubelet::KubeletConfig {
        nodes: 1,
        name_prefix: "added-".into(),
        allocatable: NODE_ALLOCATABLE.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        labels: BTreeMap::new(),
    };
    let kubelet_client = client.clone();
    let kubelet = tokio::spawn(async move {
        drover_kubelet::run(kubelet_client, config, async {
            let _ = stopped.await;
        })
        .await
    });
    eventually(60, &format!("big's 4 pods bound once a node is added (logs in {logs})"), || async {
        let list = job_pods(&pods, "big").await;
        (list.len() == 4 && list.values().all(|p| !node_name(p).is_empty())).then_some(())
    })
    .await;
    for (name, pod) in job_pods(&pods, "big").await {
        let c = pod_scheduled(&pod).unwrap_or_else(|| panic!("{name} has no PodScheduled condition"));
        assert_eq!(c.status, "True", "{name}: {c:?}");
    }
    assert_eq!(view(&pods, cluster_autoscaler_sees).await, BTreeMap::new(), "the cluster autoscaler sees nothing");
    assert_eq!(view(&pods, karpenter_sees).await, BTreeMap::new(), "Karpenter sees nothing");
    let still: BTreeSet<String> = job_pods(&pods, "capped")
        .await
        .into_iter()
        .filter(|(_, p)| pod_scheduled(p).is_some_and(|c| c.reason.as_deref() == Some("WaitingForQuota")))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(still.len(), 2, "the limited gang still waits, marked for people only (logs in {logs})");
    let _ = stop.send(());
    kubelet.await.expect("kubelet task").expect("kubelet stopped cleanly");
}
