//! `drover_k8s::convert`: Kubernetes objects (built as JSON) to snapshot inputs.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::World;
use drover_api::{
    NodeSelectorOperator, NodeSelectorRequirement, ResourceList, TaintEffect, Toleration, TolerationOperator,
};
use drover_k8s::convert::{
    Converted, PodCounts, DEFAULT_QUEUE, DEFAULT_TASK, POD_GROUP_ANNOTATION, PREEMPTIBLE_ANNOTATION, TASK_INDEX_LABEL,
    TASK_LABEL,
};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::ids::PodId;
use drover_scheduler::snapshot::{JobInput, JobPhase, PodPhaseInput, QueueingStrategy, Snapshot};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// Object builders

fn node(name: &str, cpu: &str, gpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110", "nvidia.com/gpu": gpu}}})
}

/// A Drover pod of group `group` in namespace `ns` requesting `cpu`.
fn dpod(name: &str, group: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "7",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "annotations": {"scheduling.drover.dev/pod-group": group}},
        "spec": {"schedulerName": "drover", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})
}

/// A pod of another scheduler, bound to `node`.
fn foreign(name: &str, node: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Running"}})
}

fn group(name: &str, min: u32) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2024-01-01T00:00:10Z"},
        "spec": {"minMember": min}})
}

fn queue(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})
}

fn class(name: &str, value: i32, preemptible: Option<&str>) -> Value {
    let mut v = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
        "value": value});
    if let Some(p) = preemptible {
        v["metadata"]["annotations"] = json!({"scheduling.drover.dev/preemptible": p});
    }
    v
}

fn labels(mut pod: Value, task: &str, index: Option<&str>) -> Value {
    pod["metadata"]["labels"]["scheduling.drover.dev/task"] = json!(task);
    if let Some(i) = index {
        pod["metadata"]["labels"]["scheduling.drover.dev/task-index"] = json!(i);
    }
    pod
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

/// An empty cluster but for namespace `ns`, where the builders put their objects: the
/// scheduler refuses the implicit `default` queue to namespaces it has not seen.
fn world() -> World {
    World { namespaces: vec![namespace("ns", json!({}))], ..World::default() }
}

fn list(pairs: &[(&str, i64)]) -> ResourceList {
    ResourceList(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
}

fn job<'c>(c: &'c Converted, name: &str) -> &'c JobInput {
    c.jobs.iter().find(|j| j.name == name).unwrap_or_else(|| panic!("job {name} in {:?}", c.jobs))
}

fn has_problem(c: &Converted, kind: &str, name: &str, reason: &str) -> bool {
    c.problems.iter().any(|p| p.kind == kind && p.name == name && p.reason == reason)
}

fn build(c: &Converted) -> Snapshot {
    let snap = c.snapshot().expect("converted inputs always build");
    assert_eq!(snap.pods.len(), c.pods.len(), "one PodRef per snapshot pod");
    snap
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn exported_names_are_the_documented_ones() {
    assert_eq!(POD_GROUP_ANNOTATION, "scheduling.drover.dev/pod-group");
    assert_eq!(TASK_LABEL, "scheduling.drover.dev/task");
    assert_eq!(TASK_INDEX_LABEL, "scheduling.drover.dev/task-index");
    assert_eq!(PREEMPTIBLE_ANNOTATION, "scheduling.drover.dev/preemptible");
    assert_eq!(DEFAULT_QUEUE, "default");
}

#[test]
fn requests_follow_kube_scheduler_arithmetic() {
    let mut p = dpod("p", "g", "0");
    p["spec"] = json!({"schedulerName": "drover",
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "2"}}}],
        "initContainers": [
            {"name": "big-init", "resources": {"requests": {"cpu": "3", "memory": "512Mi"}}},
            {"name": "small-init", "resources": {"requests": {"cpu": "100m"}}}],
        "overhead": {"cpu": "250m", "memory": "64Mi"}});
    let w = World { pods: vec![p], groups: vec![group("g", 1)], ..world() };
    let c = w.convert();
    // cpu: max(500m + 1500m, 3) + 250m; memory: max(2Gi, 512Mi) + 64Mi; GPU from the limit.
    assert_eq!(
        job(&c, "g").tasks[0].requests,
        list(&[("cpu", 3250), ("memory", (2 << 30) + (64 << 20)), ("nvidia.com/gpu", 2), ("pods", 1)])
    );
    assert!(c.problems.is_empty(), "{:?}", c.problems);
}

#[test]
fn sidecars_add_to_containers_and_later_init_containers() {
    let mut p = dpod("p", "g", "0");
    p["spec"] = json!({"schedulerName": "drover",
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            {"name": "setup", "resources": {"requests": {"cpu": "2"}}}]});
    let mut q = dpod("q", "g2", "0");
    q["spec"]["resources"] = json!({"requests": {"cpu": "4"}});
    q["spec"]["containers"] = json!([{"name": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]);
    let w = World { pods: vec![p, q], groups: vec![group("g", 1), group("g2", 1)], ..world() };
    let c = w.convert();
    // max(1 + 500m, 2 + 500m)
    assert_eq!(job(&c, "g").tasks[0].requests, list(&[("cpu", 2500), ("pods", 1)]));
    // pod-level resources replace the cpu sum, extended resources stay per container
    assert_eq!(job(&c, "g2").tasks[0].requests, list(&[("cpu", 4000), ("nvidia.com/gpu", 1), ("pods", 1)]));
}

#[test]
fn usage_of_pods_not_handed_to_the_core_is_subtracted_from_nodes() {
    let mut done = foreign("done", "n1", "2");
    done["status"]["phase"] = json!("Succeeded");
    let mut unbound = foreign("unbound", "n1", "2");
    unbound["spec"]["nodeName"] = Value::Null;
    let mut no_group = dpod("no-group", "x", "1");
    no_group["metadata"]["annotations"] = json!({});
    no_group["spec"]["nodeName"] = json!("n1");
    let mut finished_group_pod = dpod("fin-0", "fin", "500m");
    finished_group_pod["spec"]["nodeName"] = json!("n1");
    let mut fin = group("fin", 1);
    fin["status"] = json!({"phase": "Completed"});
    let mut ours = dpod("ours", "g", "4");
    ours["spec"]["nodeName"] = json!("n1");
    let w = World {
        nodes: vec![node("n1", "8", "0"), node("n2", "2", "0")],
        pods: vec![
            foreign("ds", "n1", "1"),
            foreign("hog", "n2", "16"),
            foreign("elsewhere", "gone", "1"),
            done,
            unbound,
            no_group,
            finished_group_pod,
            ours,
        ],
        groups: vec![group("g", 1), fin],
        ..world()
    };
    let c = w.convert();
    let n1 = &c.nodes[0];
    assert_eq!(n1.name, "n1");
    // 8 - ds 1; the Drover pods stay in the core's hands: `ours` in its group, and the bound
    // `no-group` and `fin-0`, which no handed-over group holds, charged to `default` as
    // detached work (named after their group, or the pod when it names none).
    assert_eq!(n1.allocatable.get("cpu"), 7000);
    assert_eq!(n1.allocatable.get("pods"), 109);
    for (detached, pod) in [("fin#default", "fin-0"), ("no-group#default", "no-group")] {
        let job = job(&c, detached);
        assert_eq!((job.queue.as_str(), job.min_member), ("default", 1), "{detached}");
        assert_eq!(job.tasks[0].pods, vec![PodPhaseInput::Bound("n1".into())], "{pod}");
    }
    assert_eq!(n1.allocatable.get("memory"), (64 << 30) - (1 << 30));
    assert_eq!(c.nodes[1].allocatable.get("cpu"), 0, "never below zero");
    assert_eq!(job(&c, "g").tasks[0].pods, vec![PodPhaseInput::Bound("n1".into())]);
    assert!(c.jobs.iter().all(|j| j.name != "fin"), "finished groups are left out");
    build(&c);
}

#[test]
fn a_group_seen_before_its_pods_carries_its_declared_size() {
    // The Job controller makes the group first, with minResources from the Job's tasks; the
    // scheduler may see it before any pod. An invalid entry is reported and left out.
    let mut early = group("early", 4);
    early["spec"]["minResources"] = json!({"nvidia.com/gpu": "16", "cpu": "8", "memory": "lots"});
    let w = World { nodes: vec![node("n1", "8", "8")], groups: vec![early, group("plain", 1)], ..world() };
    let c = w.convert();
    let early = job(&c, "early");
    assert!(early.tasks.iter().all(|t| t.pods.is_empty()), "no pods yet: {:?}", early.tasks);
    assert_eq!(early.min_resources, Some(list(&[("nvidia.com/gpu", 16), ("cpu", 8000)])));
    assert!(has_problem(&c, "PodGroup", "early", "InvalidQuantity"), "{:?}", c.problems);
    assert_eq!(job(&c, "plain").min_resources, None);
    let snap = build(&c);
    let gpu = snap.resources.iter().position(|r| r == "nvidia.com/gpu").expect("the GPU resource");
    let early = snap.jobs.iter().find(|j| j.name == "early").expect("early");
    assert_eq!(early.min_resources[gpu], 16, "the snapshot keeps the declared size");
}

#[test]
fn the_last_preemption_comes_from_the_groups_status() {
    // The scheduler writes `status.preemptedAt` when it evicts pods of the group; the regrow
    // rule reads it back from there (the spec, which tenants write, cannot set it).
    let mut preempted = group("preempted", 1);
    preempted["status"] = json!({"phase": "Running", "preemptedAt": "2024-01-01T00:01:40Z"});
    let mut claims = group("claims", 1);
    claims["spec"]["preemptedAt"] = json!("2024-01-01T00:01:40Z");
    let w = World { nodes: vec![node("n1", "8", "8")], groups: vec![preempted, claims], ..world() };
    let c = w.convert();
    assert_eq!(job(&c, "preempted").preempted_at, Some(1_704_067_300));
    assert_eq!(job(&c, "claims").preempted_at, None);
}

#[test]
fn a_groups_kept_claim_comes_from_its_status() {
    // The scheduler writes the pods it pipelined into `status.nominations`; the next cycle
    // reads them back from there. A nomination to a node that is gone is dropped, and one in
    // the spec (which tenants write) is not a claim.
    let mut claimed = group("claimed", 3);
    claimed["status"] = json!({"phase": "Inqueue", "nominations": [
        {"pod": "c0", "node": "n1"}, {"pod": "c1", "node": "gone"}, {"pod": "elsewhere", "node": "n1"}]});
    let mut forged = group("forged", 1);
    forged["spec"]["nominations"] = json!([{"pod": "f0", "node": "n1"}]);
    let pods = vec![
        dpod("c0", "claimed", "1"),
        dpod("c1", "claimed", "1"),
        dpod("c2", "claimed", "1"),
        dpod("f0", "forged", "1"),
    ];
    let w = World { nodes: vec![node("n1", "8", "8")], groups: vec![claimed, forged], pods, ..world() };
    let c = w.convert();
    let phases: Vec<&PodPhaseInput> = job(&c, "claimed").tasks.iter().flat_map(|t| &t.pods).collect();
    assert_eq!(
        phases,
        [&PodPhaseInput::Nominated("n1".into()), &PodPhaseInput::Pending, &PodPhaseInput::Pending],
        "{:?}",
        c.problems
    );
    assert_eq!(job(&c, "forged").tasks[0].pods, [PodPhaseInput::Pending]);
    let snap = build(&c);
    let nominated: Vec<Option<&str>> =
        snap.pods.iter().map(|p| p.nominated.map(|n| snap.nodes[n].name.as_str())).collect();
    assert_eq!(nominated.iter().filter(|n| n.is_some()).count(), 1, "{nominated:?}");
}

#[test]
fn a_finished_group_with_a_new_unbound_pod_is_pending_again() {
    // A restarted job: its group was marked Failed when every pod failed; the job controller
    // deleted them and made new ones.
    let mut restarted = group("restarted", 2);
    restarted["status"] = json!({"phase": "Failed"});
    let mut done = group("done", 1);
    done["status"] = json!({"phase": "Failed"});
    let mut old_bound = dpod("done-0", "done", "1");
    old_bound["spec"]["nodeName"] = json!("n1");
    let mut still_going = dpod("done-1", "done", "1");
    still_going["metadata"]["deletionTimestamp"] = json!("2024-01-01T01:00:00Z");
    let w = World {
        nodes: vec![node("n1", "8", "0")],
        pods: vec![
            dpod("restarted-0", "restarted", "1"),
            dpod("restarted-1", "restarted", "1"),
            old_bound,
            still_going,
        ],
        groups: vec![restarted, done],
        ..world()
    };
    let c = w.convert();
    let job = job(&c, "restarted");
    assert_eq!(job.phase, JobPhase::Pending);
    assert_eq!(job.tasks[0].pods, vec![PodPhaseInput::Pending, PodPhaseInput::Pending]);
    assert!(
        c.jobs.iter().all(|j| j.name != "done"),
        "a finished group with only bound or deleting pods stays finished"
    );
}

#[test]
fn pod_phases_and_counts() {
    let bound = |name: &str, node: &str| {
        let mut p = dpod(name, "g", "1");
        p["spec"]["nodeName"] = json!(node);
        p["status"] = json!({"phase": "Running"});
        p
    };
    let mut releasing = bound("p2-releasing", "n1");
    releasing["metadata"]["deletionTimestamp"] = json!("2024-01-01T01:00:00Z");
    let mut succeeded = bound("p3-succeeded", "n1");
    succeeded["status"]["phase"] = json!("Succeeded");
    let mut failed = dpod("p4-failed", "g", "1");
    failed["status"] = json!({"phase": "Failed"});
    let mut deleting_unbound = dpod("p5-deleting", "g", "1");
    deleting_unbound["metadata"]["deletionTimestamp"] = json!("2024-01-01T01:00:00Z");
    let mut gated = dpod("p6-gated", "g", "1");
    gated["spec"]["schedulingGates"] = json!([{"name": "wait"}]);
    let lost = bound("p7-lost", "ghost");
    let w = World {
        nodes: vec![node("n1", "8", "0")],
        pods: vec![
            dpod("p0-pending", "g", "1"),
            bound("p1-bound", "n1"),
            releasing,
            succeeded,
            failed,
            deleting_unbound,
            gated,
            lost,
        ],
        groups: vec![group("g", 1)],
        ..world()
    };
    let c = w.convert();
    let g = job(&c, "g");
    assert_eq!(g.tasks.len(), 1);
    assert_eq!(
        g.tasks[0].pods,
        vec![PodPhaseInput::Pending, PodPhaseInput::Bound("n1".into()), PodPhaseInput::Releasing("n1".into())]
    );
    let names: Vec<&str> = c.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["p0-pending", "p1-bound", "p2-releasing"]);
    assert_eq!(c.pods[PodId(1)].uid.as_deref(), Some("uid-p1-bound"));
    assert_eq!(c.pods[PodId(1)].resource_version.as_deref(), Some("7"));
    assert_eq!(
        c.groups[&("ns".to_string(), "g".to_string())].counts,
        PodCounts { total: 8, running: 3, succeeded: 1, failed: 1 },
        "all 8 pods are the group's; p1, p2 and p7 run"
    );
    assert!(has_problem(&c, "Pod", "p7-lost", "NodeNotFound"));
    build(&c);
}

/// A group's facts: every pod the conversion made its member (a bound pod by its charge
/// record, whatever its annotation says now), and its gang minimum reached by bound members
/// that have not ended, with the pods a binding would add.
#[test]
fn group_facts_hold_the_members_and_answer_for_the_gang_minimum() {
    let bound = |name: &str, task: &str| {
        let mut p = labels(dpod(name, "g", "1"), task, None);
        p["spec"]["nodeName"] = json!("n1");
        p["status"] = json!({"phase": "Running"});
        p
    };
    let mut moved = bound("w1", "worker");
    moved["metadata"]["annotations"]["scheduling.drover.dev/pod-group"] = json!("other");
    moved["metadata"]["annotations"]["scheduling.drover.dev/charge"] =
        json!("queue=default podGroup=g priorityClass=train");
    let mut ended = bound("w2", "worker");
    ended["metadata"]["deletionTimestamp"] = json!("2024-01-01T01:00:00Z");
    let mut g = group("g", 3);
    g["spec"]["minTaskMember"] = json!({"worker": 2});
    let w = World {
        nodes: vec![node("n1", "8", "0")],
        pods: vec![
            bound("w0", "worker"),
            moved,
            ended,
            labels(dpod("w3", "g", "1"), "worker", None),
            dpod("m0", "g", "1"),
        ],
        groups: vec![g, group("other", 1)],
        ..world()
    };
    let c = w.convert();
    let facts = &c.groups[&("ns".to_string(), "g".to_string())];
    let members: Vec<&str> = facts.members.keys().map(String::as_str).collect();
    assert_eq!(members, ["m0", "w0", "w1", "w2", "w3"], "w1 stays g's by its charge record");
    assert!(c.groups[&("ns".to_string(), "other".to_string())].members.is_empty());
    assert_eq!((facts.members["w1"].task.as_str(), facts.members["m0"].task.as_str()), ("worker", DEFAULT_TASK));
    assert!(facts.members["w2"].ended && !facts.members["w0"].ended);
    assert!(!facts.ready_with(&BTreeSet::new()), "w0 and w1 are 2 of 3: w2 is being deleted");
    assert!(facts.ready_with(&BTreeSet::from(["m0"])), "3 of 3, 2 of them workers");
    assert!(facts.ready_with(&BTreeSet::from(["w3"])));
}

#[test]
fn pods_of_one_task_with_different_shapes_are_split() {
    let worker = |name: &str, cpu: &str| labels(dpod(name, "g", cpu), "worker", None);
    let mut tainted = worker("w4", "1");
    tainted["spec"]["tolerations"] = json!([{"key": "gpu", "operator": "Exists"}]);
    let mut g = group("g", 6);
    g["spec"]["minTaskMember"] = json!({"worker": 4, "ps": 1, "launcher": 1});
    let w = World {
        pods: vec![
            worker("w0", "1"),
            worker("w1", "2"),
            worker("w2", "1"),
            worker("w3", "2"),
            tainted,
            labels(dpod("ps0", "g", "1"), "ps", None),
            labels(dpod("extra", "g", "1"), "worker#2", None),
        ],
        groups: vec![g],
        ..world()
    };
    let c = w.convert();
    let j = job(&c, "g");
    let shape: Vec<(&str, u32, usize, i64)> =
        j.tasks.iter().map(|t| (t.name.as_str(), t.min_available, t.pods.len(), t.requests.get("cpu"))).collect();
    // `worker#2` is taken by a real task, so the split parts are `worker#3` and `worker#4`.
    assert_eq!(
        shape,
        [
            ("launcher", 1, 0, 0),
            ("ps", 1, 1, 1000),
            ("worker", 2, 2, 1000),
            ("worker#3", 2, 2, 2000),
            ("worker#4", 0, 1, 1000),
            ("worker#2", 0, 1, 1000)
        ]
    );
    assert_eq!(j.tasks[4].constraints.tolerations.len(), 1);
    let names: Vec<&str> = c.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["ps0", "w0", "w2", "w1", "w3", "w4", "extra"]);
    build(&c);
}

#[test]
fn task_minimum_larger_than_the_pods_stays_on_the_first_part() {
    let mut g = group("g", 3);
    g["spec"]["minTaskMember"] = json!({"main": 3});
    let w = World { pods: vec![dpod("a", "g", "1"), dpod("b", "g", "2")], groups: vec![g], ..world() };
    let c = w.convert();
    let mins: Vec<u32> = job(&c, "g").tasks.iter().map(|t| t.min_available).collect();
    assert_eq!(mins, [2, 1]);
}

#[test]
fn pod_index_order_and_pod_refs_match_the_snapshot() {
    let at = |mut p: Value, ts: &str| {
        p["metadata"]["creationTimestamp"] = json!(ts);
        p
    };
    let w = World {
        nodes: vec![node("n1", "64", "0")],
        pods: vec![
            // task "w" by index label, out of store order, one without a label
            labels(dpod("w-b", "g1", "1"), "w", Some("1")),
            labels(dpod("w-z", "g1", "1"), "w", None),
            labels(dpod("w-a", "g1", "1"), "w", Some("0")),
            labels(dpod("w-c", "g1", "1"), "w", Some("10")),
            labels(dpod("w-d", "g1", "1"), "w", Some("2")),
            // task "main" by creation time, then name
            at(dpod("m-late", "g1", "1"), "2024-01-02T00:00:00Z"),
            at(dpod("m-early-b", "g1", "1"), "2024-01-01T00:00:00Z"),
            at(dpod("m-early-a", "g1", "1"), "2024-01-01T00:00:00Z"),
            dpod("other", "g0", "1"),
        ],
        groups: vec![group("g1", 1), group("g0", 1)],
        ..world()
    };
    let c = w.convert();
    let snap = build(&c);
    let expected: BTreeMap<(&str, &str, u32), &str> = [
        (("g0", "main", 0), "other"),
        (("g1", "main", 0), "m-early-a"),
        (("g1", "main", 1), "m-early-b"),
        (("g1", "main", 2), "m-late"),
        (("g1", "w", 0), "w-a"),
        (("g1", "w", 1), "w-b"),
        (("g1", "w", 2), "w-d"),
        (("g1", "w", 3), "w-c"),
        (("g1", "w", 4), "w-z"),
    ]
    .into();
    assert_eq!(snap.pods.len(), expected.len());
    for (id, pod) in snap.pods.iter_enumerated() {
        let j = &snap.jobs[pod.job];
        let key = (j.name.as_str(), j.tasks[pod.task].name.as_str(), pod.index);
        assert_eq!(c.pods[id].name, expected[&key], "pod id {id:?} = {key:?}");
        assert_eq!(c.pods[id].namespace, j.namespace);
    }
}

#[test]
fn priority_resolution() {
    let with_class = |name: &str, class: &str| {
        let mut g = group(name, 1);
        g["spec"]["priorityClassName"] = json!(class);
        g
    };
    let pod_with = |name: &str, group: &str, class: Option<&str>, prio: Option<i32>| {
        let mut p = dpod(name, group, "1");
        if let Some(c) = class {
            p["spec"]["priorityClassName"] = json!(c);
        }
        if let Some(v) = prio {
            p["spec"]["priority"] = json!(v);
        }
        p
    };
    let w = World {
        classes: vec![
            class("high", 1000, None),
            class("high-but-preemptible", 1000, Some("true")),
            class("low-but-protected", 10, Some("False")),
            class("train", 60, None),
        ],
        groups: vec![
            with_class("a-object", "high"),
            with_class("b-annotated", "high-but-preemptible"),
            with_class("c-protected", "low-but-protected"),
            with_class("d-builtin", "inference"),
            with_class("e-object-over-builtin", "train"),
            with_class("f-unknown", "nope"),
            group("g-pod-class", 1),
            group("h-pod-priority", 1),
            group("i-default", 1),
            group("j-pod-gone-class", 1),
            group("k-pod-unknown-class", 1),
        ],
        pods: vec![
            pod_with("g0", "g-pod-class", None, Some(0)),
            pod_with("g1", "g-pod-class", Some("high"), Some(1000)),
            pod_with("h0", "h-pod-priority", None, Some(150)),
            pod_with("i0", "i-default", None, Some(0)),
            pod_with("j0", "j-pod-gone-class", Some("deleted"), Some(90)),
            pod_with("k0", "k-pod-unknown-class", Some("deleted"), None),
        ],
        ..world()
    };
    let c = w.convert();
    let p = |name: &str| {
        let j = job(&c, name);
        (j.priority_class.as_str(), j.priority, j.preemptible)
    };
    assert_eq!(p("a-object"), ("high", 1000, false));
    assert_eq!(p("b-annotated"), ("high-but-preemptible", 1000, true));
    assert_eq!(p("c-protected"), ("low-but-protected", 10, false));
    assert_eq!(p("d-builtin"), ("inference", 125, false));
    assert_eq!(p("e-object-over-builtin"), ("train", 60, true));
    assert_eq!(p("g-pod-class"), ("high", 1000, false));
    assert_eq!(p("h-pod-priority"), ("", 150, false));
    assert_eq!(p("i-default"), ("train", 60, true), "the lowest built-in class, as its object defines it");
    assert_eq!(p("j-pod-gone-class"), ("deleted", 90, true));
    assert!(has_problem(&c, "PodGroup", "f-unknown", "PriorityClassNotFound"));
    assert!(has_problem(&c, "PodGroup", "k-pod-unknown-class", "PriorityClassNotFound"));
    assert!(c.jobs.iter().all(|j| j.name != "f-unknown" && j.name != "k-pod-unknown-class"));
    assert_eq!(c.problems.len(), 2, "{:?}", c.problems);

    let bare = World { groups: vec![group("x", 1)], ..world() }.convert();
    assert_eq!(
        (bare.jobs[0].priority_class.as_str(), bare.jobs[0].priority, bare.jobs[0].preemptible),
        ("train", 50, true)
    );
}

#[test]
fn invalid_preemptible_annotation_is_reported_and_ignored() {
    let mut g = group("g", 1);
    g["spec"]["priorityClassName"] = json!("odd");
    let w = World { classes: vec![class("odd", 200, Some("maybe"))], groups: vec![g], ..world() };
    let c = w.convert();
    assert!(has_problem(&c, "PriorityClass", "odd", "InvalidAnnotation"));
    assert!(!job(&c, "g").preemptible);
}

#[test]
fn queue_problems_leave_out_queues_descendants_and_groups() {
    let in_queue = |name: &str, q: &str| {
        let mut g = group(name, 1);
        g["spec"]["queue"] = json!(q);
        g
    };
    let w = World {
        queues: vec![
            queue("org", json!({})),
            queue(
                "team",
                json!({"parent": "org", "deserved": {"cpu": "4", "nvidia.com/gpu": "half"},
                "limit": {"cpu": "-1", "memory": "8Gi"}}),
            ),
            queue("orphan", json!({"parent": "missing"})),
            queue("orphan-child", json!({"parent": "orphan"})),
            queue("loop-a", json!({"parent": "loop-b"})),
            queue("loop-b", json!({"parent": "loop-a"})),
            queue("self", json!({"parent": "self"})),
            queue("below-loop", json!({"parent": "loop-a"})),
        ],
        groups: vec![
            in_queue("ok", "team"),
            in_queue("in-parent", "org"),
            in_queue("no-queue", "nope"),
            in_queue("in-orphan-child", "orphan-child"),
            in_queue("in-loop", "loop-b"),
        ],
        ..world()
    };
    let c = w.convert();
    let names: Vec<&str> = c.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["default", "org", "team"]);
    let team = &c.queues[2];
    assert_eq!(team.parent.as_deref(), Some("org"));
    assert_eq!(team.deserved, list(&[("cpu", 4000)]), "invalid entries are ignored, not zero");
    assert_eq!(team.limit, Some(list(&[("memory", 8 << 30)])));
    let jobs: Vec<&str> = c.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(jobs, ["ok"]);
    for (kind, name, reason) in [
        ("Queue", "team", "InvalidQuantity"),
        ("Queue", "orphan", "ParentNotFound"),
        ("Queue", "orphan-child", "ParentInvalid"),
        ("Queue", "loop-a", "QueueCycle"),
        ("Queue", "loop-b", "QueueCycle"),
        ("Queue", "self", "QueueCycle"),
        ("Queue", "below-loop", "ParentInvalid"),
        ("PodGroup", "in-parent", "QueueNotLeaf"),
        ("PodGroup", "no-queue", "QueueNotFound"),
        ("PodGroup", "in-orphan-child", "QueueInvalid"),
        ("PodGroup", "in-loop", "QueueInvalid"),
    ] {
        assert!(has_problem(&c, kind, name, reason), "{kind} {name} {reason}: {:#?}", c.problems);
    }
    assert_eq!(c.problems.iter().filter(|p| p.name == "team").count(), 2, "one per invalid entry");
    build(&c);
}

#[test]
fn object_problems_on_nodes_and_pods() {
    let mut bad_node = node("n1", "lots", "1");
    bad_node["spec"] = json!({"taints": [{"key": "t", "effect": "Sometimes"}], "unschedulable": true});
    let mut affinity = dpod("aff", "g", "1");
    affinity["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                  {"key": "gen", "operator": "Around", "values": ["5"]}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}});
    affinity["spec"]["tolerations"] = json!([{"key": "a", "operator": "Maybe"}, {"key": "b", "effect": "Never"},
        {"key": "c", "value": "v", "effect": "NoExecute"}]);
    let mut bad_quantity = dpod("qty", "g2", "1");
    bad_quantity["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("a lot");
    let mut bad_index = labels(dpod("idx", "g3", "1"), "main", Some("first"));
    bad_index["spec"]["nodeName"] = json!("n1");
    let w = World {
        nodes: vec![bad_node],
        pods: vec![affinity, bad_quantity, bad_index, dpod("lonely", "missing-group", "1")],
        groups: vec![group("g", 1), group("g2", 1), group("g3", 1)],
        ..world()
    };
    let c = w.convert();
    for (kind, name, reason) in [
        ("Node", "n1", "InvalidQuantity"),
        ("Node", "n1", "InvalidTaint"),
        ("Pod", "aff", "UnsupportedAffinity"),
        ("Pod", "aff", "InvalidAffinity"),
        ("Pod", "aff", "InvalidToleration"),
        ("Pod", "qty", "InvalidQuantity"),
        ("Pod", "idx", "InvalidTaskIndex"),
        ("Pod", "lonely", "PodGroupNotFound"),
    ] {
        assert!(has_problem(&c, kind, name, reason), "{kind} {name} {reason}: {:#?}", c.problems);
    }
    assert_eq!(c.problems.iter().filter(|p| p.reason == "UnsupportedAffinity").count(), 2, "terms and matchFields");
    let n = &c.nodes[0];
    assert_eq!(n.allocatable.get("cpu"), 0);
    assert!(n.unschedulable);
    assert_eq!(n.taints[0].effect, TaintEffect::NoSchedule, "unknown effects are taken as NoSchedule");
    let t = &job(&c, "g").tasks[0].constraints;
    assert_eq!(
        t.affinity,
        [NodeSelectorRequirement { key: "zone".into(), operator: NodeSelectorOperator::In, values: vec!["a".into()] }]
    );
    assert_eq!(
        t.tolerations,
        [Toleration {
            key: "c".into(),
            operator: TolerationOperator::Equal,
            value: "v".into(),
            effect: Some(TaintEffect::NoExecute)
        }]
    );
    assert_eq!(job(&c, "g2").tasks[0].requests, list(&[("cpu", 1000), ("pods", 1)]));
    assert!(c.jobs.iter().all(|j| j.name != "missing-group"));
    build(&c);
}

#[test]
fn constraints_come_from_the_pod_spec() {
    let mut p = dpod("p", "g", "1");
    p["spec"]["nodeSelector"] = json!({"drover.dev/node-pool": "a100"});
    p["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]},
            {"key": "spot", "operator": "DoesNotExist"}]}]}}});
    let c = World { pods: vec![p], groups: vec![group("g", 1)], ..world() }.convert();
    let t = &job(&c, "g").tasks[0].constraints;
    assert_eq!(t.node_selector, BTreeMap::from([("drover.dev/node-pool".to_string(), "a100".to_string())]));
    assert_eq!(t.tolerations, [Toleration { operator: TolerationOperator::Exists, ..Default::default() }]);
    assert_eq!(t.affinity.len(), 2);
    assert_eq!(t.affinity[1].operator, NodeSelectorOperator::DoesNotExist);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
}

#[test]
fn implicit_default_queue_unless_one_exists() {
    let c = World { pods: vec![dpod("p", "g", "1")], groups: vec![group("g", 1)], ..world() }.convert();
    assert_eq!(c.queues.len(), 1);
    let q = &c.queues[0];
    assert_eq!((q.name.as_str(), q.parent.as_deref(), q.over_quota_weight, q.reclaimable), ("default", None, 1, true));
    assert!(q.deserved.0.is_empty() && q.limit.is_none());
    assert_eq!(job(&c, "g").queue, "default");

    let own = queue("default", json!({"overQuotaWeight": 3, "queueingStrategy": "StrictFIFO", "reclaimable": false}));
    let c = World { groups: vec![group("g", 1)], queues: vec![own], ..world() }.convert();
    assert_eq!(c.queues.len(), 1);
    assert_eq!(c.queues[0].over_quota_weight, 3);
    assert_eq!(c.queues[0].strategy, QueueingStrategy::StrictFifo);
    assert!(!c.queues[0].reclaimable);

    // A broken `default` queue is not replaced by the implicit one.
    let broken = queue("default", json!({"parent": "nowhere"}));
    let c = World { groups: vec![group("g", 1)], queues: vec![broken], ..world() }.convert();
    assert!(c.queues.is_empty() && c.jobs.is_empty());
    assert!(has_problem(&c, "PodGroup", "g", "QueueInvalid"));
}

#[test]
fn closed_queues_keep_running_groups_and_admit_nothing_new() {
    let in_queue = |name: &str, q: &str, phase: Option<&str>| {
        let mut g = group(name, 1);
        g["spec"]["queue"] = json!(q);
        if let Some(p) = phase {
            g["status"] = json!({"phase": p});
        }
        g
    };
    let w = World {
        queues: vec![
            queue("closed", json!({"state": "Closed"})),
            queue("dept", json!({"state": "Closed"})),
            queue("proj", json!({"parent": "dept"})),
        ],
        groups: vec![
            in_queue("new", "closed", None),
            in_queue("pending", "closed", Some("Pending")),
            in_queue("admitted", "closed", Some("Inqueue")),
            in_queue("running", "closed", Some("Running")),
            in_queue("new-below", "proj", None),
        ],
        ..world()
    };
    let c = w.convert();
    let jobs: Vec<(&str, JobPhase)> = c.jobs.iter().map(|j| (j.name.as_str(), j.phase)).collect();
    assert_eq!(jobs, [("admitted", JobPhase::Inqueue), ("running", JobPhase::Running)]);
    for g in ["new", "pending", "new-below"] {
        assert!(has_problem(&c, "PodGroup", g, "QueueClosed"), "{g}");
    }
}

#[test]
fn a_queue_admits_only_the_namespaces_its_selectors_and_its_ancestors_select() {
    let in_queue = |name: &str, ns: &str, q: &str, phase: Option<&str>| {
        let mut g = group(name, 1);
        g["metadata"]["namespace"] = json!(ns);
        g["spec"]["queue"] = json!(q);
        if let Some(p) = phase {
            g["status"] = json!({"phase": p});
        }
        g
    };
    let project = |p: &str| json!({"matchLabels": {"scheduling.drover.dev/project": p}});
    let w = World {
        namespaces: vec![
            namespace("team-a", json!({"scheduling.drover.dev/project": "a", "tier": "prod"})),
            namespace("team-b", json!({"scheduling.drover.dev/project": "b"})),
            namespace("loose", json!({"tier": "prod"})),
        ],
        queues: vec![
            queue(
                "dept",
                json!({"namespaceSelector": {"matchExpressions": [
                {"key": "scheduling.drover.dev/project", "operator": "Exists"}]}}),
            ),
            queue("a", json!({"parent": "dept", "namespaceSelector": project("a")})),
            queue("open", json!({})),
            queue("fenced-by-parent", json!({"parent": "dept"})),
            queue(
                "broken",
                json!({"namespaceSelector": {"matchExpressions": [
                {"key": "tier", "operator": "Equals", "values": ["prod"]}]}}),
            ),
        ],
        groups: vec![
            in_queue("own", "team-a", "a", None),
            in_queue("stolen", "team-b", "a", None),
            in_queue("stolen-running", "team-b", "a", Some("Running")),
            in_queue("anyone", "loose", "open", None),
            in_queue("outside-dept", "loose", "fenced-by-parent", None),
            in_queue("inside-dept", "team-b", "fenced-by-parent", None),
            in_queue("unknown-namespace", "nowhere", "a", None),
            in_queue("malformed", "team-a", "broken", None),
        ],
        ..world()
    };
    let c = w.convert();
    let mut jobs: Vec<&str> = c.jobs.iter().map(|j| j.name.as_str()).collect();
    jobs.sort();
    assert_eq!(jobs, ["anyone", "inside-dept", "own"]);
    for g in ["stolen", "stolen-running", "outside-dept", "unknown-namespace", "malformed"] {
        assert!(has_problem(&c, "PodGroup", g, "QueueNotAllowed"), "{g}: {:?}", c.problems);
    }
    let stolen = c.problems.iter().find(|p| p.name == "stolen").expect("a problem");
    assert!(stolen.message.contains("team-b") && stolen.message.contains("\"a\""), "{}", stolen.message);
    assert!(has_problem(&c, "Queue", "broken", "InvalidNamespaceSelector"), "{:?}", c.problems);
}

#[test]
fn a_department_queue_takes_no_group_even_before_it_has_project_queues() {
    let in_queue = |name: &str, q: &str| {
        let mut g = group(name, 1);
        g["spec"]["queue"] = json!(q);
        g
    };
    let owned_by = |mut q: Value, kind: &str, owner: &str| {
        q["metadata"]["ownerReferences"] = json!([{"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": kind,
            "name": owner, "uid": format!("uid-{owner}"), "controller": true}]);
        q
    };
    let w = World {
        queues: vec![
            owned_by(queue("empty.a100", json!({})), "Department", "empty"),
            owned_by(queue("ml.a100", json!({})), "Department", "ml"),
            owned_by(queue("vision.a100", json!({"parent": "ml.a100"})), "Project", "vision"),
            queue("plain", json!({})),
        ],
        groups: vec![
            in_queue("in-empty-department", "empty.a100"),
            in_queue("in-department", "ml.a100"),
            in_queue("in-project", "vision.a100"),
            in_queue("in-plain", "plain"),
        ],
        ..world()
    };
    let c = w.convert();
    let mut jobs: Vec<&str> = c.jobs.iter().map(|j| j.name.as_str()).collect();
    jobs.sort();
    assert_eq!(jobs, ["in-plain", "in-project"], "{:?}", c.problems);
    for g in ["in-empty-department", "in-department"] {
        assert!(has_problem(&c, "PodGroup", g, "QueueNotLeaf"), "{g}: {:?}", c.problems);
        let p = c.problems.iter().find(|p| p.name == g).expect("a problem");
        assert!(p.message.contains("is a Department's queue"), "{}", p.message);
    }
}

#[test]
fn the_implicit_default_queue_refuses_project_namespaces() {
    let in_namespace = |name: &str, ns: &str, q: Option<&str>| {
        let mut g = group(name, 1);
        g["metadata"]["namespace"] = json!(ns);
        if let Some(q) = q {
            g["spec"]["queue"] = json!(q);
        }
        g
    };
    let namespaces = vec![
        namespace("team-a", json!({"scheduling.drover.dev/project": "a"})),
        namespace("tools", json!({"team": "platform"})),
    ];
    let groups = vec![
        in_namespace("no-queue", "team-a", None),
        in_namespace("named-default", "team-a", Some("default")),
        in_namespace("shared", "tools", None),
        in_namespace("shared-named", "tools", Some("default")),
    ];
    let w = World { namespaces: namespaces.clone(), groups: groups.clone(), ..world() };
    let c = w.convert();
    let mut jobs: Vec<(&str, &str)> = c.jobs.iter().map(|j| (j.name.as_str(), j.queue.as_str())).collect();
    jobs.sort();
    assert_eq!(jobs, [("shared", "default"), ("shared-named", "default")], "{:?}", c.problems);
    for g in ["no-queue", "named-default"] {
        assert!(has_problem(&c, "PodGroup", g, "QueueNotAllowed"), "{g}: {:?}", c.problems);
        let p = c.problems.iter().find(|p| p.name == g).expect("a problem");
        assert!(p.message.contains("team-a") && p.message.contains("\"default\""), "{}", p.message);
        assert!(p.message.ends_with("work of project \"a\" uses its queues, and it has none yet"), "{}", p.message);
    }

    // An admin's own `default` keeps the selector the admin gives it (here none).
    let w = World { namespaces, groups, queues: vec![queue("default", json!({}))], ..world() };
    let c = w.convert();
    assert_eq!(c.jobs.len(), 4, "{:?}", c.problems);
}

#[test]
fn group_fields_and_other_schedulers_pods() {
    let mut g = group("g", 2);
    g["status"] = json!({"phase": "Inqueue"});
    let mut not_ours = dpod("not-ours", "g", "1");
    not_ours["spec"]["schedulerName"] = json!("default-scheduler");
    let c = World {
        nodes: vec![node("n1", "4", "0")],
        pods: vec![dpod("a", "g", "1"), not_ours],
        groups: vec![g, group("empty", 1)],
        ..world()
    }
    .convert();
    let j = job(&c, "g");
    assert_eq!((j.min_member, j.phase, j.created_at, j.namespace.as_str()), (2, JobPhase::Inqueue, 1704067210, "ns"));
    assert_eq!(j.tasks.iter().map(|t| t.pods.len()).sum::<usize>(), 1, "pods of other schedulers are never members");
    assert!(job(&c, "empty").tasks.is_empty(), "groups without pods are handed over for admission");
    assert_eq!(c.pods.len(), 1);
    assert_eq!(c.groups.len(), 2);
}

fn cluster() -> World {
    let mut gang = Vec::new();
    for i in 0..2 {
        let mut p = labels(dpod(&format!("train-{i}"), "train", "8"), "worker", Some(&i.to_string()));
        p["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "8"});
        gang.push(p);
    }
    let mut too_big = dpod("huge-0", "huge", "1");
    too_big["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "16"});
    let mut train = group("train", 2);
    train["spec"]["queue"] = json!("research");
    let mut huge = group("huge", 1);
    huge["spec"]["queue"] = json!("research");
    World {
        nodes: vec![node("gpu-a", "32", "8"), node("gpu-b", "32", "8"), node("cpu", "4", "0")],
        pods: [gang, vec![too_big, foreign("ds-a", "gpu-a", "1"), foreign("ds-b", "gpu-b", "1")]].concat(),
        groups: vec![train, huge],
        queues: vec![queue("research", json!({"deserved": {"nvidia.com/gpu": "16"}}))],
        classes: vec![class("train", 50, None)],
        namespaces: vec![namespace("ns", json!({}))],
        topologies: vec![],
    }
}

#[test]
fn end_to_end_a_gang_gets_bound() {
    let c = cluster().convert();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    let snap = build(&c);
    let outcome = run_cycle(&snap, &SchedulerConfig::default());
    let mut bound: Vec<(String, String)> = outcome
        .decisions
        .binds
        .iter()
        .map(|&(pod, node)| (c.pods[pod].name.clone(), snap.nodes[node].name.clone()))
        .collect();
    bound.sort();
    assert_eq!(bound.len(), 2, "{bound:?} {:?}", outcome.reasons);
    assert_eq!((bound[0].0.as_str(), bound[1].0.as_str()), ("train-0", "train-1"));
    assert_ne!(bound[0].1, bound[1].1, "8 GPUs each: one pod per GPU node");
    let huge = snap.jobs.position(|j| j.name == "huge").unwrap();
    assert!(outcome.reasons[huge].is_some(), "the 16-GPU pod waits with a reason");
}

/// A deterministic permutation of `v` from `seed`.
fn shuffle<T: Clone>(v: &[T], mut seed: u64) -> Vec<T> {
    let mut out = v.to_vec();
    for i in (1..out.len()).rev() {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.swap(i, (seed >> 33) as usize % (i + 1));
    }
    out
}

fn fingerprint(c: &Converted) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        c.nodes, c.queues, c.topologies, c.jobs, c.pods, c.groups, c.problems
    )
}

fn shuffled(w: &World, seed: u64) -> World {
    World {
        nodes: shuffle(&w.nodes, seed),
        pods: shuffle(&w.pods, seed ^ 1),
        groups: shuffle(&w.groups, seed ^ 2),
        queues: shuffle(&w.queues, seed ^ 3),
        classes: shuffle(&w.classes, seed ^ 4),
        namespaces: shuffle(&w.namespaces, seed ^ 5),
        topologies: shuffle(&w.topologies, seed ^ 6),
    }
}

#[test]
fn same_objects_in_any_order_give_the_same_inputs() {
    let mut w = cluster();
    w.pods.extend((0..6).map(|i| labels(dpod(&format!("e-{i}"), "elastic", "1"), "main", None)));
    w.groups.push(group("elastic", 2));
    w.queues.push(queue("other", json!({})));
    let expected = fingerprint(&w.convert());
    for seed in 0..20 {
        assert_eq!(fingerprint(&shuffled(&w, seed).convert()), expected, "seed {seed}");
    }
}

// ---------------------------------------------------------------------------------------
// Property test: random objects never panic and always build.

mod random {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::select;

    fn quantity() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            8 => select(vec!["1", "2", "500m", "8", "16", "0", "64Gi", "1e3"]),
            1 => select(vec!["-1", "lots", "0.5", "9223372036854775807"]),
        ]
    }

    fn opt<T: Clone + std::fmt::Debug + 'static>(s: impl Strategy<Value = T> + 'static) -> BoxedStrategy<Option<T>> {
        prop_oneof![Just(None), s.prop_map(Some)].boxed()
    }

    /// Mostly absent.
    fn rarely<T: Clone + std::fmt::Debug + 'static>(s: impl Strategy<Value = T> + 'static) -> BoxedStrategy<Option<T>> {
        prop_oneof![3 => Just(None), 1 => s.prop_map(Some)].boxed()
    }

    prop_compose! {
        fn a_node()(name in select(vec!["n0", "n1", "n2"]), cpu in quantity(), gpu in quantity(),
                    effect in rarely(select(vec!["NoSchedule", "NoExecute", "PreferNoSchedule", "Bogus"])),
                    cordoned in prop::bool::weighted(0.1)) -> Value {
            let mut n = node(name, cpu, gpu);
            if let Some(e) = effect { n["spec"]["taints"] = json!([{"key": "t", "effect": e}]); }
            n["spec"]["unschedulable"] = json!(cordoned);
            n
        }
    }

    prop_compose! {
        fn a_queue()(name in select(vec!["default", "q0", "q1", "q2", "q3"]),
                     parent in rarely(select(vec!["default", "q0", "q1", "q2", "q3", "ghost"])),
                     deserved in quantity(), limit in rarely(quantity()), closed in prop::bool::weighted(0.15),
                     weight in 0u32..4) -> Value {
            let mut spec = json!({"deserved": {"nvidia.com/gpu": deserved}, "overQuotaWeight": weight,
                "state": if closed { "Closed" } else { "Open" }});
            if let Some(p) = parent { spec["parent"] = json!(p); }
            if let Some(l) = limit { spec["limit"] = json!({"cpu": l}); }
            queue(name, spec)
        }
    }

    prop_compose! {
        fn a_group()(name in select(vec!["g0", "g1", "g2", "g3"]), ns in select(vec!["ns", "ns", "ns", "other"]),
                     min in 1u32..5, task_min in opt((select(vec!["main", "w", "ps"]), 0u32..4)),
                     queue in rarely(select(vec!["default", "q0", "q1", "q2", "q3", "ghost"])),
                     class in rarely(select(vec!["c-low", "c-high", "train", "unknown"])),
                     phase in rarely(select(vec!["Pending", "Inqueue", "Running", "Completed", "Failed"]))) -> Value {
            let mut g = group(name, min);
            g["metadata"]["namespace"] = json!(ns);
            if let Some((t, m)) = task_min { g["spec"]["minTaskMember"] = json!({t: m}); }
            if let Some(q) = queue { g["spec"]["queue"] = json!(q); }
            if let Some(c) = class { g["spec"]["priorityClassName"] = json!(c); }
            if let Some(p) = phase { g["status"] = json!({"phase": p}); }
            g
        }
    }

    prop_compose! {
        fn a_pod()(i in 0u32..12, ns in select(vec!["ns", "ns", "ns", "other"]), ours in prop::bool::weighted(0.85),
                   group in prop_oneof![1 => Just(None), 6 => select(vec!["g0", "g1", "g2", "g3", "gone"]).prop_map(Some)],
                   task in opt(select(vec!["main", "w", "ps", ""])), index in opt(select(vec!["0", "1", "2", "x"])),
                   node in rarely(select(vec!["n0", "n1", "n2", "ghost"])),
                   phase in rarely(select(vec!["Pending", "Running", "Succeeded", "Failed", "Unknown"])),
                   deleting in prop::bool::weighted(0.1), cpu in quantity(), gpu in opt(quantity()), init in rarely(quantity()),
                   terms in select(vec![0usize, 0, 0, 1, 2]), operator in select(vec!["In", "NotIn", "Gt", "Bogus"]),
                   toleration in rarely(select(vec!["Exists", "Equal", "Bogus"])),
                   class in rarely(select(vec!["c-low", "c-high", "unknown"])), priority in rarely(-5i32..200),
                   created in 0i64..3) -> Value {
            let mut p = dpod(&format!("p{i}"), group.unwrap_or("g0"), cpu);
            p["metadata"]["namespace"] = json!(ns);
            p["metadata"]["creationTimestamp"] = json!(format!("2024-01-01T00:00:0{created}Z"));
            if group.is_none() { p["metadata"]["annotations"] = json!({}); }
            if !ours { p["spec"]["schedulerName"] = json!("other"); }
            if let Some(t) = task { p["metadata"]["labels"]["scheduling.drover.dev/task"] = json!(t); }
            if let Some(x) = index { p["metadata"]["labels"]["scheduling.drover.dev/task-index"] = json!(x); }
            if let Some(n) = node { p["spec"]["nodeName"] = json!(n); }
            if let Some(ph) = phase { p["status"] = json!({"phase": ph}); }
            if deleting { p["metadata"]["deletionTimestamp"] = json!("2024-01-01T01:00:00Z"); }
            if let Some(g) = gpu { p["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": g}); }
            if let Some(c) = init {
                p["spec"]["initContainers"] = json!([{"name": "i", "resources": {"requests": {"cpu": c}}}]);
            }
            let term = json!({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": operator, "values": ["n1"]}]});
            if terms > 0 {
                p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": vec![term; terms]}}});
            }
            if let Some(op) = toleration { p["spec"]["tolerations"] = json!([{"key": "t", "operator": op}]); }
            if let Some(c) = class { p["spec"]["priorityClassName"] = json!(c); }
            if let Some(v) = priority { p["spec"]["priority"] = json!(v); }
            p
        }
    }

    prop_compose! {
        fn a_world()(nodes in prop::collection::vec(a_node(), 0..5),
                     queues in prop::collection::vec(a_queue(), 0..6),
                     groups in prop::collection::vec(a_group(), 0..6),
                     pods in prop::collection::vec(a_pod(), 0..20),
                     annotation in opt(select(vec!["true", "false", "maybe"]))) -> World {
            let mut low = class("c-low", 10, None);
            if let Some(a) = annotation { low["metadata"]["annotations"] = json!({"scheduling.drover.dev/preemptible": a}); }
            // A sane base that random objects add to (and sometimes collide with).
            let nodes = [vec![node("base-0", "32", "8"), node("base-1", "32", "8")], nodes].concat();
            let groups = [vec![group("g0", 1), group("g1", 2)], groups].concat();
            let namespaces = vec![namespace("ns", json!({}))];
            World {
                nodes,
                pods,
                groups,
                queues,
                classes: vec![low, class("c-high", 500, None)],
                namespaces,
                topologies: vec![],
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn random_objects_convert_build_and_schedule(w in a_world(), seed in any::<u64>()) {
            let c = w.convert();
            let snap = c.snapshot();
            prop_assert!(snap.is_ok(), "{:?}", snap.err());
            let snap = snap.unwrap();
            prop_assert_eq!(snap.pods.len(), c.pods.len());
            let mut seen = std::collections::BTreeSet::new();
            for (id, pod) in snap.pods.iter_enumerated() {
                let (r, j) = (&c.pods[id], &snap.jobs[pod.job]);
                prop_assert_eq!(&r.namespace, &j.namespace);
                prop_assert!(seen.insert((r.namespace.clone(), r.name.clone())), "{:?} twice", r);
                // Some input pod of that name is one of the group's (a bound pod whose group is
                // missing or left out is one of the detached job `<group>#<queue>`; one that
                // names no group, of `<pod>#<queue>`).
                let detached = j.name.split_once('#').map(|(g, _)| g);
                let group = detached.unwrap_or(j.name.as_str());
                prop_assert!(w.pods.iter().any(|p| p["metadata"]["name"] == json!(r.name)
                    && p["metadata"]["namespace"] == json!(r.namespace)
                    && (p["metadata"]["annotations"]["scheduling.drover.dev/pod-group"] == json!(group)
                        || (detached == Some(r.name.as_str()) && p["spec"]["nodeName"].is_string()))
                    && p["spec"]["schedulerName"] == json!("drover")));
            }
            for n in &c.nodes {
                prop_assert!(n.allocatable.0.values().all(|v| *v >= 0));
            }
            prop_assert_eq!(fingerprint(&shuffled(&w, seed).convert()), fingerprint(&c));
            let outcome = run_cycle(&snap, &SchedulerConfig::default());
            prop_assert_eq!(outcome.pod_state.len(), c.pods.len());
        }
    }
}

#[test]
fn a_groups_start_is_its_earliest_bound_pods_start_time() {
    // Minimum run times count from the kubelet's `status.startTime` (tenants cannot write
    // pod status); a pod being evicted does not count, nor does a pod's own annotation.
    let started = |name: &str, at: &str| {
        let mut p = dpod(name, "g", "1");
        p["spec"]["nodeName"] = json!("n1");
        p["status"] = json!({"phase": "Running", "startTime": at});
        p["metadata"]["annotations"]["scheduling.drover.dev/started-at"] = json!("2020-01-01T00:00:00Z");
        p
    };
    let mut leaving = started("p0", "2024-01-01T00:00:00Z");
    leaving["metadata"]["deletionTimestamp"] = json!("2024-01-01T01:00:00Z");
    let w = World {
        nodes: vec![node("n1", "8", "0")],
        pods: vec![leaving, started("p1", "2024-01-01T00:10:00Z"), started("p2", "2024-01-01T00:05:00Z")],
        groups: vec![group("g", 1)],
        ..world()
    };
    let c = w.convert();
    assert_eq!(job(&c, "g").started_at, Some(1_704_067_500));
    let none = World {
        nodes: vec![node("n1", "8", "0")],
        pods: vec![dpod("p", "g", "1")],
        groups: vec![group("g", 1)],
        ..world()
    };
    assert_eq!(job(&none.convert(), "g").started_at, None, "a group with no bound pod has not started");
}

#[test]
fn running_limits_and_minimum_run_times_come_from_the_queue() {
    let spec = json!({"maxRunningJobs": 3, "maxRunningPods": 40, "preemptMinRuntimeSeconds": 600});
    let child = json!({"parent": "team", "reclaimMinRuntimeSeconds": 1800});
    let w = World { queues: vec![queue("team", spec), queue("team-a", child)], ..world() };
    let snap = build(&w.convert());
    let bounds = |name: &str| snap.queues.iter().find(|q| q.name == name).expect("queue").bounds;
    let team = bounds("team");
    assert_eq!((team.max_running_jobs, team.max_running_pods), (Some(3), Some(40)));
    assert_eq!((team.preempt_min_runtime, team.reclaim_min_runtime), (Some(600), None));
    let child = bounds("team-a");
    assert_eq!((child.max_running_jobs, child.max_running_pods), (None, None), "limits bound the subtree, not copied");
    assert_eq!((child.preempt_min_runtime, child.reclaim_min_runtime), (Some(600), Some(1800)), "run times inherited");
}

/// A job that declares no run time plans with what its queue's learned run times (Queue
/// `status.runTimes`) predict for its name in its namespace: a running one, given how long it
/// has run, ending then; a declared `activeDeadlineSeconds` wins; another namespace's history
/// is not used; a loan recorded in the group's status is due when it says.
#[test]
fn jobs_without_a_declared_run_time_plan_with_their_queues_learned_run_times() {
    use drover_scheduler::run_times::HistoryKey;
    use drover_scheduler::snapshot::RunTime;

    let now = 1_900_000_000;
    let at = |t: i64| jiff::Timestamp::from_second(t).expect("a time").to_string();
    let mut q = queue("q", json!({}));
    q["status"] = json!({"runTimes": [
        {"namespace": "ns", "name": "train", "seconds": [600, 700, 4000], "updated": at(now - 100)},
        {"namespace": "other", "seconds": [5, 5], "updated": at(now - 100)},
    ]});
    let gpu_pod = |name: &str, group: &str, node: Option<&str>| {
        let mut p = dpod(name, group, "1");
        p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1", "nvidia.com/gpu": "8"}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
            p["status"] = json!({"phase": "Running", "startTime": at(now - 650)});
        }
        p
    };
    let in_q = |name: &str, owner: Option<&str>| {
        let mut g = group(name, 1);
        g["spec"]["queue"] = json!("q");
        if let Some(o) = owner {
            g["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job", "name": o, "uid": "u", "controller": true}]);
        }
        g
    };
    let mut declared = gpu_pod("declared-0", "declared", None);
    declared["spec"]["activeDeadlineSeconds"] = json!(60);
    let mut borrowing = in_q("train-2", Some("train"));
    borrowing["status"] = json!({"phase": "Running", "borrowedUntil": at(now + 30)});
    let w = World {
        nodes: vec![node("n1", "32", "8"), node("n2", "32", "8")],
        queues: vec![q],
        groups: vec![in_q("train-2", Some("train")), in_q("train", None), in_q("declared", None), in_q("new", None)],
        pods: vec![
            gpu_pod("train-2-0", "train-2", Some("n1")),
            gpu_pod("train-0", "train", None),
            declared,
            gpu_pod("new-0", "new", None),
        ],
        ..world()
    };
    let c = w.convert();
    let snap = c.snapshot_at(now).expect("a snapshot");
    let job = |name: &str| snap.jobs.iter().find(|j| j.name == name).expect(name);
    assert_eq!(job("train").run_time, Some(RunTime::Learned(700)), "median of the runs of jobs named train");
    let running = job("train-2");
    assert_eq!(running.run_time, Some(RunTime::Learned(700)), "its owner Job names it train; it ran 650 s of them");
    assert_eq!(running.ends_at, Some(now - 650 + 700), "a running job ends when its prediction does");
    assert_eq!(job("declared").run_time, Some(RunTime::Declared(60)), "a declared run time wins");
    assert_eq!(job("new").run_time, None, "no run of its name, shape or namespace in its queue");
    let predictions = c.predictions(&snap);
    let (j, p) = predictions.iter_enumerated().find(|(_, p)| p.is_some()).expect("a prediction");
    assert_eq!(
        p.as_ref().map(|p| (&p.key, p.samples)),
        Some((&HistoryKey::Name { namespace: "ns".into(), name: "train".into() }, 3))
    );
    assert!(snap.jobs[j].name.starts_with("train"));
    assert_eq!(
        c.snapshot().expect("a snapshot").jobs.iter().find(|j| j.name == "train").and_then(|j| j.run_time),
        None,
        "the plain inputs hold no prediction"
    );

    let w = World { groups: vec![borrowing, in_q("train", None), in_q("declared", None), in_q("new", None)], ..w };
    let snap = w.convert().snapshot_at(now).expect("a snapshot");
    let borrower = snap.jobs.iter().find(|j| j.name == "train-2").expect("train-2");
    assert_eq!(borrower.borrowed_until, Some(now + 30), "the loan its status records");
}
