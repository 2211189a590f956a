//! Topologies on a cluster: Topology objects and the topology blocks of PodGroups (their spec,
//! or the KAI and Kueue annotations users migrate with) read into the core's requests; a group
//! naming what does not exist waits with the reason; the NVLink annotation; where a placed
//! group sits, as its status says.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::World;
use drover_api::crd::podgroup::PodGroup;
use drover_k8s::convert::Converted;
use drover_k8s::scheduler::wanted_group_statuses;
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::snapshot::{JobInput, SlicesInput, TopologyRequestInput};
use serde_json::{json, Value};

const BLOCK: &str = "example.com/block";
const RACK: &str = "example.com/rack";

fn node(name: &str, block: &str, rack: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, BLOCK: block, RACK: rack}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}})
}

fn topology(name: &str, levels: Value) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Topology", "metadata": {"name": name},
        "spec": {"levels": levels}})
}

fn racks(name: &str) -> Value {
    topology(name, json!([{"name": "block", "nodeLabel": BLOCK}, {"name": "rack", "nodeLabel": RACK}]))
}

fn group(name: &str, min: u32, spec: Value) -> Value {
    let mut g = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2024-01-01T00:00:10Z"},
        "spec": {"minMember": min}});
    for (k, v) in spec.as_object().expect("an object") {
        g["spec"][k] = v.clone();
    }
    g
}

/// Pod `i` of task `task` of group `group`, asking 8 GPUs, with `annotations` added.
fn pod(group: &str, task: &str, i: u32, annotations: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{group}-{task}-{i}"), "namespace": "ns", "uid": format!("uid-{group}-{task}-{i}"),
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"scheduling.drover.dev/task": task, "scheduling.drover.dev/task-index": i.to_string()},
            "annotations": {"scheduling.drover.dev/pod-group": group}},
        "spec": {"schedulerName": "drover",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}}}]}});
    for (k, v) in annotations.as_object().expect("an object") {
        p["metadata"]["annotations"][k] = v.clone();
    }
    p
}

fn world() -> World {
    World {
        namespaces: vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})],
        queues: vec![json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "default"}, "spec": {}})],
        nodes: vec![node("n1", "b1", "r1"), node("n2", "b1", "r1"), node("n3", "b1", "r2"), node("n4", "b2", "r3")],
        topologies: vec![racks("default")],
        ..World::default()
    }
}

fn job<'c>(c: &'c Converted, name: &str) -> &'c JobInput {
    c.jobs.iter().find(|j| j.name == name).unwrap_or_else(|| panic!("job {name} in {:?}", c.problems))
}

fn request(topology: &str, required: Option<&str>, preferred: Option<&str>) -> Option<TopologyRequestInput> {
    Some(TopologyRequestInput {
        topology: topology.into(),
        required: required.map(str::to_string),
        preferred: preferred.map(str::to_string),
    })
}

/// The message of the group's problem with `reason`, which must exist.
fn problem(c: &Converted, kind: &str, name: &str, reason: &str) -> String {
    let p = c.problems.iter().find(|p| p.kind == kind && p.name == name && p.reason == reason);
    p.unwrap_or_else(|| panic!("{kind} {name} {reason} in {:?}", c.problems)).message.clone()
}

/// Converts and builds the snapshot the way the scheduler does: never refused.
fn convert(w: &World) -> Converted {
    let c = w.convert();
    c.snapshot().unwrap_or_else(|e| panic!("converted inputs always build: {e}"));
    c
}

#[test]
fn spec_blocks_become_the_jobs_and_tasks_requests() {
    let mut w = world();
    w.topologies.push(racks("fabric"));
    w.groups.push(group(
        "train",
        4,
        json!({"topology": {"name": "fabric", "required": "block", "preferred": "rack"},
            "taskTopology": {"worker": {"preferred": "node", "slices": {"size": 2, "required": "rack"}}}}),
    ));
    w.pods.extend((0..4).map(|i| pod("train", "worker", i, json!({}))));
    let c = convert(&w);
    assert_eq!(c.topologies.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["default", "fabric"]);
    let j = job(&c, "train");
    assert_eq!(j.topology, request("fabric", Some("block"), Some("rack")));
    assert_eq!(j.tasks[0].topology, request("fabric", None, Some("node")));
    assert_eq!(j.tasks[0].slices, Some(SlicesInput { size: 2, required: "rack".into() }));
}

#[test]
fn a_group_without_a_block_asks_nothing() {
    let mut w = world();
    w.groups.push(group("plain", 1, json!({})));
    w.pods.push(pod("plain", "main", 0, json!({})));
    let c = convert(&w);
    assert_eq!(job(&c, "plain").topology, None);
    assert_eq!(job(&c, "plain").tasks[0].topology, None);
}

#[test]
fn a_missing_topology_or_level_leaves_the_group_waiting_with_the_valid_names() {
    let mut w = world();
    w.groups.push(group("typo", 1, json!({"topology": {"required": "rak"}})));
    w.groups.push(group("nowhere", 1, json!({"topology": {"name": "fabric", "required": "rack"}})));
    w.groups.push(group("subtypo", 1, json!({"taskTopology": {"main": {"slices": {"size": 1, "required": "row"}}}})));
    for g in ["typo", "nowhere", "subtypo"] {
        w.pods.push(pod(g, "main", 0, json!({})));
    }
    let c = convert(&w);
    assert!(c.jobs.is_empty(), "no group is placed without its constraint: {:?}", c.jobs);
    let typo = problem(&c, "PodGroup", "typo", "TopologyLevelNotFound");
    assert!(typo.contains("spec.topology.required: \"rak\"") && typo.contains("(levels: block, rack, node)"), "{typo}");
    let nowhere = problem(&c, "PodGroup", "nowhere", "TopologyNotFound");
    assert!(nowhere.contains("\"fabric\" does not exist (topologies: default)"), "{nowhere}");
    let sub = problem(&c, "PodGroup", "subtypo", "TopologyLevelNotFound");
    assert!(sub.contains("spec.taskTopology.main.slices.required: \"row\""), "{sub}");
}

#[test]
fn a_topology_the_core_cannot_build_is_left_out_and_its_groups_wait() {
    let mut w = world();
    w.topologies = vec![topology("default", json!([{"name": "node", "nodeLabel": RACK}]))];
    w.groups.push(group("train", 1, json!({"topology": {"required": "node"}})));
    w.pods.push(pod("train", "main", 0, json!({})));
    let c = convert(&w);
    assert!(c.topologies.is_empty());
    assert!(problem(&c, "Topology", "default", "ReservedLevelName").contains("implicit last level"));
    assert!(problem(&c, "PodGroup", "train", "TopologyNotReady").contains("cannot be used"));
}

#[test]
fn kai_annotations_name_a_topology_and_node_labels_on_the_group_or_its_pods() {
    let mut w = world();
    w.topologies.push(racks("fabric"));
    let mut on_group = group("kai", 2, json!({}));
    on_group["metadata"]["annotations"] = json!({"kai.scheduler/topology": "fabric",
        "kai.scheduler/topology-required-placement": BLOCK, "kai.scheduler/topology-preferred-placement": RACK});
    w.groups.push(on_group);
    w.groups.push(group("kai-pods", 1, json!({})));
    w.pods.extend((0..2).map(|i| pod("kai", "main", i, json!({}))));
    w.pods.push(pod(
        "kai-pods",
        "main",
        0,
        json!({"kai.scheduler/topology-required-placement": "kubernetes.io/hostname"}),
    ));
    let c = convert(&w);
    assert_eq!(job(&c, "kai").topology, request("fabric", Some("block"), Some("rack")));
    assert_eq!(job(&c, "kai-pods").topology, request("default", Some("node"), None));
}

#[test]
fn the_spec_wins_over_annotations() {
    let mut w = world();
    let mut g = group("both", 1, json!({"topology": {"required": "rack"}}));
    g["metadata"]["annotations"] = json!({"kai.scheduler/topology-required-placement": BLOCK});
    w.groups.push(g);
    w.pods.push(pod("both", "main", 0, json!({})));
    assert_eq!(job(&convert(&w), "both").topology, request("default", Some("rack"), None));
}

#[test]
fn kueue_pod_annotations_are_per_task_and_checked() {
    let mut w = world();
    w.groups.push(group("kueue", 3, json!({})));
    let sliced = json!({"kueue.x-k8s.io/podset-required-topology": BLOCK,
        "kueue.x-k8s.io/podset-slice-required-topology": RACK, "kueue.x-k8s.io/podset-slice-size": "2"});
    w.pods.extend((0..2).map(|i| pod("kueue", "worker", i, sliced.clone())));
    w.pods.push(pod("kueue", "launcher", 0, json!({"kueue.x-k8s.io/podset-preferred-topology": RACK})));
    for (name, annotations) in [
        ("unknown-label", json!({"kueue.x-k8s.io/podset-required-topology": "example.com/row"})),
        (
            "bad-size",
            json!({"kueue.x-k8s.io/podset-slice-required-topology": RACK, "kueue.x-k8s.io/podset-slice-size": "0"}),
        ),
        ("size-alone", json!({"kueue.x-k8s.io/podset-slice-size": "4"})),
    ] {
        w.groups.push(group(name, 1, json!({})));
        w.pods.push(pod(name, "main", 0, annotations));
    }
    let c = convert(&w);
    let j = job(&c, "kueue");
    assert_eq!(j.topology, request("default", None, None), "the group's topology is the default one");
    let task = |name: &str| j.tasks.iter().find(|t| t.name == name).expect("the task");
    assert_eq!(task("worker").topology, request("default", Some("block"), None));
    assert_eq!(task("worker").slices, Some(SlicesInput { size: 2, required: "rack".into() }));
    assert_eq!(task("launcher").topology, request("default", None, Some("rack")));
    assert_eq!(task("launcher").slices, None);
    let unknown = problem(&c, "PodGroup", "unknown-label", "TopologyLevelNotFound");
    assert!(
        unknown.contains("node label \"example.com/row\"")
            && unknown.contains("example.com/block (block), example.com/rack (rack), kubernetes.io/hostname (node)")
            && unknown.contains("on pod unknown-label-main-0"),
        "{unknown}"
    );
    assert!(problem(&c, "PodGroup", "bad-size", "InvalidTopologyAnnotation").contains("\"0\" is not a positive"));
    assert!(problem(&c, "PodGroup", "size-alone", "InvalidTopologyAnnotation").contains("needs"));
}

#[test]
fn the_nvlink_annotation_is_a_constraint_and_a_bad_value_names_the_pod() {
    let mut w = world();
    w.groups.push(group("nv", 1, json!({})));
    w.pods.push(pod("nv", "main", 0, json!({"gpu-topology.my.company.com/min-nvlink-gpus": "4"})));
    w.groups.push(group("bad", 1, json!({})));
    w.pods.push(pod("bad", "main", 0, json!({"gpu-topology.my.company.com/min-nvlink-gpus": "many"})));
    let c = convert(&w);
    assert_eq!(job(&c, "nv").tasks[0].constraints.min_nvlink_gpus, Some(4));
    assert_eq!(job(&c, "bad").tasks[0].constraints.min_nvlink_gpus, None);
    let message = problem(&c, "Pod", "bad-main-0", "InvalidAnnotation");
    assert!(
        message.contains("gpu-topology.my.company.com/min-nvlink-gpus") && message.contains("\"many\""),
        "{message}"
    );
}

#[test]
fn a_placed_group_reports_the_finest_domain_holding_its_pods() {
    let mut w = world();
    w.groups.push(group("rack", 2, json!({"topology": {"required": "rack"}})));
    w.groups.push(group("spread", 2, json!({"topology": {"preferred": "rack"}})));
    w.groups.push(group("flat", 1, json!({})));
    let bound = |mut p: Value, node: &str| {
        p["spec"]["nodeName"] = json!(node);
        p["status"] = json!({"phase": "Running"});
        p
    };
    w.pods.push(bound(pod("rack", "main", 0, json!({})), "n1"));
    w.pods.push(bound(pod("rack", "main", 1, json!({})), "n2"));
    w.pods.push(bound(pod("spread", "main", 0, json!({})), "n3"));
    w.pods.push(bound(pod("spread", "main", 1, json!({})), "n4"));
    w.pods.push(bound(pod("flat", "main", 0, json!({})), "n3"));
    let c = convert(&w);
    let snap = c.snapshot().expect("a snapshot");
    let outcome = run_cycle(&snap, &SchedulerConfig::default());
    let groups: Vec<Arc<PodGroup>> =
        w.groups.iter().map(|g| Arc::new(serde_json::from_value(g.clone()).expect("a PodGroup"))).collect();
    let wanted = wanted_group_statuses(&groups, &snap, &c, &outcome, Duration::from_secs(1));
    let placed = |name: &str| {
        let (_, status) = wanted.iter().find(|(g, _)| g.metadata.name.as_deref() == Some(name)).expect("a status");
        status.topology.clone().map(|t| (t.name, t.level, t.domain))
    };
    let some = |s: &str| Some(s.to_string());
    assert_eq!(placed("rack"), Some(("default".into(), some("rack"), some("b1/r1"))));
    assert_eq!(placed("spread"), Some(("default".into(), None, None)), "r2 and r3 share no block");
    assert_eq!(placed("flat"), None, "a group that asks for no topology has no placement");
}
