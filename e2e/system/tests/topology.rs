//! Topologies end to end through the real binaries (real kube-apiserver + fake kubelet,
//! `drover controllers`, `drover scheduler`), on fake 8-GPU nodes labelled into two racks of
//! one block and one node left unlabelled: the Topology's status counts its domains; a Job
//! naming a level the Topology does not have waits with the valid levels named; a gang of
//! 2 x 8 GPUs that requires a rack lands inside one rack (the one that can hold it, not the
//! emptiest nodes across racks), its PodGroup says where and each pod carries its domain.

use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::topology::Topology;
use drover_e2e::{create, eventually, Cluster};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

const NS: &str = "default";
const BLOCK: &str = "example.com/block";
const RACK: &str = "example.com/rack";

/// A Job of `replicas` pods of `gpus` GPUs, with `spec` added (topology blocks).
fn job(name: &str, replicas: u32, gpus: u32, spec: Value, pod_spec: Value) -> Value {
    let mut pod = json!({"containers": [{"name": "main", "image": "trainer",
        "resources": {"requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "1"},
            "limits": {"nvidia.com/gpu": gpus.to_string()}}}]});
    for (k, v) in pod_spec.as_object().expect("an object") {
        pod[k] = v.clone();
    }
    let mut j = json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": pod}}]}});
    for (k, v) in spec.as_object().expect("an object") {
        j["spec"][k] = v.clone();
    }
    j
}

async fn running_pods(pods: &Api<Pod>, job: &str, n: usize) -> Option<Vec<Pod>> {
    let selector = format!("batch.drover.dev/job-name={job}");
    let list = pods.list(&ListParams::default().labels(&selector)).await.ok()?.items;
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    (list.iter().filter(|p| running(p)).count() == n).then_some(list)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_are_placed_within_a_rack_and_bad_levels_are_named() {
    let Some(cluster) = Cluster::start(5).await else { return };
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    for (node, rack) in [("node-0", "r1"), ("node-1", "r1"), ("node-2", "r2"), ("node-3", "r2")] {
        let patch = json!({"metadata": {"labels": {BLOCK: "b1", RACK: rack}}});
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("node labelled");
    }
    let topologies: Api<Topology> = Api::all(client.clone());
    create(
        &topologies,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Topology", "metadata": {"name": "default"},
            "spec": {"levels": [{"name": "block", "nodeLabel": BLOCK}, {"name": "rack", "nodeLabel": RACK}]}}),
    )
    .await;

    // The controllers count the domains: 5 nodes, 1 block, 2 racks, node-4 without labels.
    eventually(30, &format!("the Topology's status (logs in {logs})"), || async {
        let status = topologies.get("default").await.ok()?.status?;
        let levels: Vec<(String, u32, u32)> =
            status.levels.iter().map(|l| (l.name.clone(), l.domains, l.excluded_nodes)).collect();
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        (status.nodes == 5
            && status.excluded_nodes == 1
            && levels == [("block".to_string(), 1, 1), ("rack".to_string(), 2, 1)]
            && ready.status == "True")
            .then_some(())
    })
    .await;

    // A level the topology does not have: the group waits, and says which levels exist.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), NS);
    create(&jobs, job("typo", 1, 1, json!({"topology": {"required": "rak"}}), json!({}))).await;
    let message = eventually(30, &format!("PodGroup typo names the valid levels (logs in {logs})"), || async {
        let status = groups.get("typo").await.ok()?.status?;
        let c = status.conditions.iter().find(|c| c.type_ == "Unschedulable" && c.status == "True")?;
        (c.reason == "TopologyLevelNotFound").then(|| c.message.clone())
    })
    .await;
    assert!(message.contains("\"rak\"") && message.contains("levels: block, rack, node"), "{message}");
    eventually(30, &format!("Job typo mirrors the reason (logs in {logs})"), || async {
        jobs.get("typo").await.ok()?.status?.reason.filter(|r| r.contains("levels: block, rack, node")).map(|_| ())
    })
    .await;

    // Rack r1 has 12 GPUs free (node-1 half used), r2 has 16: a 2 x 8 gang that requires a
    // rack can only run in r2, though node-0 is as empty as r2's nodes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let on_node_1 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}});
    create(&jobs, job("filler", 1, 4, json!({}), on_node_1)).await;
    eventually(30, &format!("the filler runs (logs in {logs})"), || running_pods(&pods, "filler", 1)).await;
    create(&jobs, job("gang", 2, 8, json!({"topology": {"required": "rack"}}), json!({}))).await;
    let gang = eventually(60, &format!("the gang runs (logs in {logs})"), || running_pods(&pods, "gang", 2)).await;
    let mut placed: Vec<(String, String)> = gang
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let domain = p.metadata.annotations.as_ref().and_then(|a| a.get("topology.drover.dev/domain")).cloned();
            (node, domain.unwrap_or_default())
        })
        .collect();
    placed.sort();
    assert_eq!(
        placed,
        [("node-2".into(), "b1/r2/node-2".into()), ("node-3".into(), "b1/r2/node-3".into())],
        "the gang is in rack r2, each pod annotated with its domain (logs in {logs})"
    );
    eventually(30, &format!("PodGroup gang says where it runs (logs in {logs})"), || async {
        let t = groups.get("gang").await.ok()?.status?.topology?;
        (t.name == "default" && t.level.as_deref() == Some("rack") && t.domain.as_deref() == Some("b1/r2"))
            .then_some(())
    })
    .await;
}
