//! Hostile input through the scheduler's real path: Kubernetes objects carrying garbage in
//! every annotation, label and field Drover reads go through `convert` and one scheduling
//! cycle, next to one valid tenant. Tenants write Pods and PodGroups in their namespaces,
//! admins write Queues, PriorityClasses, Nodes and Namespaces; whatever they write, nothing
//! panics, every value Drover cannot use is reported as a `Problem` naming the object and
//! the field (or is one the module docs say is ignored), and the valid tenant's gang still
//! gets its nodes (issue 9, part 5).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::World;
use drover_api::label_selector;
use drover_api::topology::{
    KAI_PREFERRED, KAI_REQUIRED, KAI_TOPOLOGY, KUEUE_PREFERRED, KUEUE_REQUIRED, KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE,
    MIN_NVLINK_GPUS_ANNOTATION,
};
use drover_api::{NodeSelectorOperator, NodeSelectorRequirement, ResourceList, TaintEffect};
use drover_k8s::convert::{
    Converted, Problem, DEFAULT_QUEUE, POD_GROUP_ANNOTATION, PREEMPTIBLE_ANNOTATION, TASK_INDEX_LABEL, TASK_LABEL,
};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::ids::{ti_vec, NodeId, TiVec};
use drover_scheduler::snapshot::{PodPhase, Snapshot};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// The valid tenant

const GOOD_NS: &str = "good";
const GOOD_QUEUE: &str = "good-q";
const GOOD_GROUP: &str = "gang";
const GOOD_NODES: [&str; 2] = ["good-0", "good-1"];
const GOOD_PODS: [&str; 2] = ["gang-0", "gang-1"];
const TEAM_LABEL: &str = "drover.test/team";
const POOL_LABEL: &str = "drover.test/pool";
const RESERVED_TAINT: &str = "drover.test/reserved";
const HOSTILE_ROOT: &str = "h-root";
const BAD_NS: [&str; 2] = ["bad", "bad-unlisted"];
/// Names the hostile generators may not invent (they belong to the valid tenant, or are
/// the names hostile objects are given).
const RESERVED_NAMES: [&str; 7] = [GOOD_NS, GOOD_QUEUE, GOOD_GROUP, "good-0", "good-1", HOSTILE_ROOT, DEFAULT_QUEUE];

const QUEUE_REASONS: [&str; 5] = ["QueueNotFound", "QueueInvalid", "QueueNotLeaf", "QueueNotAllowed", "QueueClosed"];
/// The migration annotations the scheduler reads: KAI's on groups and pods, Kueue's on pods.
const KAI: [&str; 3] = [KAI_TOPOLOGY, KAI_REQUIRED, KAI_PREFERRED];
const KUEUE: [&str; 4] = [KUEUE_REQUIRED, KUEUE_PREFERRED, KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE];
/// Reasons a group waits for what its topology request names (docs/conversion.md, "Topology").
const TOPOLOGY_REASONS: [&str; 4] =
    ["TopologyNotFound", "TopologyNotReady", "TopologyLevelNotFound", "InvalidTopologyAnnotation"];

/// Adds `other`'s objects to `world`.
fn extend(world: &mut World, other: World) {
    world.nodes.extend(other.nodes);
    world.pods.extend(other.pods);
    world.groups.extend(other.groups);
    world.queues.extend(other.queues);
    world.classes.extend(other.classes);
    world.namespaces.extend(other.namespaces);
    world.topologies.extend(other.topologies);
}

fn good_world() -> World {
    let node = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {POOL_LABEL: "good", "kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": RESERVED_TAINT, "value": "good", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}}})
    };
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": GOOD_NS, "uid": format!("uid-{name}"),
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "annotations": {POD_GROUP_ANNOTATION: GOOD_GROUP}, "labels": {TASK_LABEL: "worker"}},
            "spec": {"schedulerName": "drover", "nodeSelector": {POOL_LABEL: "good"},
                "tolerations": [{"key": RESERVED_TAINT, "operator": "Equal", "value": "good", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"nvidia.com/gpu": "4"}}}]}})
    };
    World {
        nodes: GOOD_NODES.iter().map(|n| node(n)).collect(),
        pods: GOOD_PODS.iter().map(|p| pod(p)).collect(),
        groups: vec![json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": GOOD_GROUP, "namespace": GOOD_NS, "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"minMember": 2, "minTaskMember": {"worker": 2}, "queue": GOOD_QUEUE}})],
        queues: vec![
            json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": GOOD_QUEUE},
                "spec": {"deserved": {"nvidia.com/gpu": "8", "cpu": "4", "memory": "8Gi"},
                    "namespaceSelector": {"matchLabels": {TEAM_LABEL: "good"}}}}),
            // The admin's parent for the hostile queues (a valid queue with no quota).
            json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": HOSTILE_ROOT},
                "spec": {}}),
        ],
        classes: vec![],
        namespaces: vec![json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": GOOD_NS, "labels": {TEAM_LABEL: "good", "kubernetes.io/metadata.name": GOOD_NS}}})],
        topologies: vec![],
    }
}

// ---------------------------------------------------------------------------------------
// Hostile values

/// A usable topology, one the core could not build (a level named `node`), and one whose
/// levels share a label: groups name them, their levels and ones that do not exist.
fn hostile_topologies() -> Vec<Value> {
    let t = |name: &str, levels: Value| {
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": levels}})
    };
    vec![
        t("default", json!([{"name": "rack", "nodeLabel": POOL_LABEL}])),
        t("h-t-node", json!([{"name": "node", "nodeLabel": "x"}])),
        t("h-t-twice", json!([{"name": "a", "nodeLabel": "x"}, {"name": "b", "nodeLabel": "x"}])),
    ]
}

fn topology_name() -> impl Strategy<Value = String> {
    prop_oneof![select(vec!["default", "h-t-node", "h-t-twice", "missing-topology"]).prop_map(str::to_string), text()]
}

fn level_name() -> impl Strategy<Value = String> {
    prop_oneof![select(vec!["rack", "node", "a", "missing-level"]).prop_map(str::to_string), text()]
}

const HOSTILE_TEXT: &[&str] = &[
    "",
    " ",
    "-1",
    "1e400",
    "1e4000",
    "99999999999999999999Ei",
    "1.5.3",
    "NaN",
    "Infinity",
    "0x10",
    "１２",
    "٣",
    "\u{0}",
    "\u{feff}",
    "{\"cpu\": \"1\"}",
    "[1, 2]",
    "null",
    "true",
    "TRUE ",
    " false",
    "yes",
    "🙂",
    "a/b/c",
    "team name",
    "scheduling.drover.dev/pod-group",
    "4294967296",
    "-0",
    " 3 ",
    "3.0",
];

/// Any string: curated hostile values, short arbitrary unicode, long runs.
fn text() -> BoxedStrategy<String> {
    prop_oneof![
        5 => select(HOSTILE_TEXT).prop_map(str::to_string),
        3 => ".{0,12}",
        1 => any::<String>(),
        1 => (select(vec!["a", "9", "é", "-"]), 64usize..2000).prop_map(|(s, n)| s.repeat(n)),
    ]
    .boxed()
}

/// A hostile string that is not one of the valid tenant's names.
fn foreign_name() -> BoxedStrategy<String> {
    text().prop_filter("not a reserved name", |s| !RESERVED_NAMES.contains(&s.as_str())).boxed()
}

/// A quantity as written in JSON: a string (valid, huge, malformed) or a number.
fn quantity() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => select(vec!["1", "2", "500m", "4Gi", "0", "8", "100"]).prop_map(|s| json!(s)),
        4 => select(vec![
            "-1", "-500m", "1e400", "1e-400", "99999999999999999999Ei", "1.5.3", "", "NaN", "0.5", "1.5", "7Ei",
            "8Ei", "9223372036854775807", "9223372036854775808", "1e18", "8e18", ".", "1..2", "+", "1 ", "0x1",
        ])
        .prop_map(|s| json!(s)),
        2 => text().prop_map(Value::String),
        1 => prop_oneof![
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            select(vec![1.5f64, -1.0, 1e300, 1e-7, 0.1]).prop_map(|n| json!(n)),
        ],
    ]
    .boxed()
}

fn resource_name() -> BoxedStrategy<String> {
    prop_oneof![
        6 => select(vec!["cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage", "hugepages-2Mi", "example.com/fpga"])
            .prop_map(str::to_string),
        1 => text(),
    ]
    .boxed()
}

fn resources() -> BoxedStrategy<BTreeMap<String, Value>> {
    prop::collection::btree_map(resource_name(), quantity(), 0..4).boxed()
}

fn opt<T: std::fmt::Debug + Clone + 'static>(s: impl Strategy<Value = T> + 'static) -> BoxedStrategy<Option<T>> {
    prop_oneof![Just(None), s.prop_map(Some)].boxed()
}

fn labels() -> BoxedStrategy<BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop_oneof![
            select(vec!["team", "tier", POOL_LABEL, "zone"]).prop_map(str::to_string),
            // What the scheduler reads as topology requests and the NVLink constraint.
            select(vec![
                "kai.scheduler/topology",
                "kai.scheduler/topology-required-placement",
                "kueue.x-k8s.io/podset-required-topology",
                "kueue.x-k8s.io/podset-slice-required-topology",
                "kueue.x-k8s.io/podset-slice-size",
                "gpu-topology.my.company.com/min-nvlink-gpus",
            ])
            .prop_map(str::to_string),
            text()
        ],
        prop_oneof![
            select(vec!["a", "b", "prod", "", POOL_LABEL, "kubernetes.io/hostname", "2", "h-t-node"])
                .prop_map(str::to_string),
            text()
        ],
        0..3,
    )
    .boxed()
}

// ---------------------------------------------------------------------------------------
// Hostile objects (names are given by position afterwards)

prop_compose! {
    fn hostile_node()(allocatable in resources(), labels in labels(),
                      taints in prop::collection::vec((foreign_name(), opt(text()),
                          prop_oneof![select(vec!["NoSchedule", "NoExecute", "PreferNoSchedule"]).prop_map(str::to_string), text()]), 0..3),
                      cordoned in any::<bool>()) -> Value {
        let labels: BTreeMap<String, String> =
            labels.into_iter().filter(|(k, v)| !(k == POOL_LABEL && v == "good")).collect();
        let taints: Vec<Value> = taints.into_iter().map(|(key, value, effect)| {
            let mut t = json!({"key": key, "effect": effect});
            if let Some(v) = value { t["value"] = json!(v); }
            t
        }).collect();
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "", "labels": labels},
            "spec": {"taints": taints, "unschedulable": cordoned}, "status": {"allocatable": allocatable}})
    }
}

prop_compose! {
    fn hostile_class()(value in prop_oneof![any::<i32>(), select(vec![i32::MIN, -1, 0, 99, 100, i32::MAX])],
                       preemptible in opt(text()), named_train in prop::bool::weighted(0.1),
                       junk in labels()) -> (Value, bool) {
        let mut annotations = junk;
        if let Some(p) = preemptible { annotations.insert(PREEMPTIBLE_ANNOTATION.to_string(), p); }
        (json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "", "annotations": annotations}, "value": value}), named_train)
    }
}

/// Selectors, mostly malformed.
fn selector() -> BoxedStrategy<Value> {
    let expression = (
        prop_oneof![select(vec!["team", TEAM_LABEL, "kubernetes.io/metadata.name"]).prop_map(str::to_string), text()],
        prop_oneof![
            select(vec!["In", "NotIn", "Exists", "DoesNotExist"]).prop_map(str::to_string),
            select(vec!["in", "Gt", "", "Equals", "!="]).prop_map(str::to_string),
            text(),
        ],
        opt(prop::collection::vec(prop_oneof![select(vec!["bad", "good", ""]).prop_map(str::to_string), text()], 0..3)),
    )
        .prop_map(|(key, operator, values)| {
            let mut e = json!({"key": key, "operator": operator});
            if let Some(v) = values {
                e["values"] = json!(v);
            }
            e
        });
    (opt(labels()), opt(prop::collection::vec(expression, 0..3)))
        .prop_map(|(labels, expressions)| {
            let mut s = json!({});
            if let Some(l) = labels {
                s["matchLabels"] = json!(l);
            }
            if let Some(e) = expressions {
                s["matchExpressions"] = json!(e);
            }
            s
        })
        .boxed()
}

prop_compose! {
    fn hostile_queue()(parent in prop_oneof![
                           3 => Just(HOSTILE_ROOT.to_string()),
                           3 => (0usize..5).prop_map(|i| format!("h-q{i}")),
                           1 => Just(DEFAULT_QUEUE.to_string()),
                           1 => Just("missing-parent".to_string()),
                           1 => foreign_name().prop_filter("a parent", |p| !p.is_empty() && !p.starts_with("h-q")),
                       ],
                       deserved in resources(), limit in opt(resources()), selector in opt(selector()),
                       weight in prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()],
                       reclaimable in any::<bool>(), strict in any::<bool>(), closed in prop::bool::weighted(0.2)) -> Value {
        let mut spec = json!({"parent": parent, "deserved": deserved, "overQuotaWeight": weight,
            "reclaimable": reclaimable, "queueingStrategy": if strict { "StrictFIFO" } else { "BestEffortFIFO" },
            "state": if closed { "Closed" } else { "Open" }});
        if let Some(l) = limit { spec["limit"] = json!(l); }
        if let Some(s) = selector { spec["namespaceSelector"] = s; }
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": ""}, "spec": spec})
    }
}

fn bad_namespace() -> BoxedStrategy<&'static str> {
    prop_oneof![7 => Just(BAD_NS[0]), 1 => Just(BAD_NS[1])].boxed()
}

fn u32_extreme() -> BoxedStrategy<u32> {
    prop_oneof![Just(0u32), Just(1), Just(2), Just(u32::MAX), any::<u32>()].boxed()
}

prop_compose! {
    fn hostile_group()(ns in bad_namespace(), min_member in u32_extreme(),
                       min_task in prop::collection::btree_map(
                           prop_oneof![select(vec!["main", "worker", "ps", "missing-task", ""]).prop_map(str::to_string), text()],
                           u32_extreme(), 0..3),
                       min_resources in opt(resources()),
                       queue in opt(prop_oneof![
                           3 => (0usize..5).prop_map(|i| format!("h-q{i}")),
                           1 => select(vec![GOOD_QUEUE, HOSTILE_ROOT, DEFAULT_QUEUE, "missing-queue", ""]).prop_map(str::to_string),
                           1 => text(),
                       ]),
                       class in opt(prop_oneof![
                           (0usize..3).prop_map(|i| format!("h-pc{i}")),
                           select(vec!["train", "inference", "missing-class", ""]).prop_map(str::to_string),
                           text(),
                       ]),
                       timeout in opt(u32_extreme()),
                       phase in opt(select(vec!["Pending", "Inqueue", "Running", "Completed", "Failed"])),
                       annotations in labels(),
                       topology in opt((opt(topology_name()), opt(level_name()), opt(level_name()))),
                       task_topology in prop::collection::btree_map(
                           select(vec!["main", "worker", "missing-task"]).prop_map(str::to_string),
                           (opt(level_name()), opt((u32_extreme(), level_name()))), 0..2)) -> Value {
        let mut spec = json!({"minMember": min_member, "minTaskMember": min_task});
        if let Some((name, required, preferred)) = topology {
            spec["topology"] = json!({"name": name, "required": required, "preferred": preferred});
        }
        let blocks: BTreeMap<String, Value> = task_topology
            .into_iter()
            .map(|(task, (required, slices))| {
                let slices = slices.map(|(size, required)| json!({"size": size, "required": required}));
                (task, json!({"required": required, "slices": slices}))
            })
            .collect();
        spec["taskTopology"] = json!(blocks);
        if let Some(r) = min_resources { spec["minResources"] = json!(r); }
        if let Some(q) = queue { spec["queue"] = json!(q); }
        if let Some(c) = class { spec["priorityClassName"] = json!(c); }
        if let Some(t) = timeout { spec["scheduleTimeoutSeconds"] = json!(t); }
        let mut g = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "", "namespace": ns, "annotations": annotations,
                "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": spec});
        if let Some(p) = phase { g["status"] = json!({"phase": p}); }
        g
    }
}

fn container() -> BoxedStrategy<Value> {
    (prop_oneof![select(vec!["main", "side"]).prop_map(str::to_string), text()], resources(), resources())
        .prop_map(
            |(name, requests, limits)| json!({"name": name, "resources": {"requests": requests, "limits": limits}}),
        )
        .boxed()
}

fn toleration() -> BoxedStrategy<Value> {
    (
        opt(prop_oneof![select(vec!["gpu", "dedicated"]).prop_map(str::to_string), text()]),
        opt(prop_oneof![select(vec!["Equal", "Exists", ""]).prop_map(str::to_string), text()]),
        opt(text()),
        opt(prop_oneof![
            select(vec!["NoSchedule", "NoExecute", "PreferNoSchedule", ""]).prop_map(str::to_string),
            text()
        ]),
    )
        // Tolerating the valid tenant's nodes is allowed (tolerations steer, they do not
        // fence) but would let hostile pods compete for them; a named test covers it.
        .prop_filter("tolerates the reserved taint", |(key, op, _, _)| {
            let key = key.as_deref().unwrap_or("");
            key != RESERVED_TAINT && !(key.is_empty() && op.as_deref() == Some("Exists"))
        })
        .prop_map(|(key, operator, value, effect)| {
            let mut t = json!({});
            for (field, v) in [("key", key), ("operator", operator), ("value", value), ("effect", effect)] {
                if let Some(v) = v {
                    t[field] = json!(v);
                }
            }
            t
        })
        .boxed()
}

fn affinity() -> BoxedStrategy<Value> {
    let expression =
        (
            prop_oneof![select(vec!["zone", POOL_LABEL]).prop_map(str::to_string), text()],
            prop_oneof![
                select(vec!["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]).prop_map(str::to_string),
                text(),
            ],
            opt(prop::collection::vec(
                prop_oneof![select(vec!["1", "a", "-5"]).prop_map(str::to_string), text()],
                0..3,
            )),
        )
            .prop_map(|(key, operator, values)| {
                let mut e = json!({"key": key, "operator": operator});
                if let Some(v) = values {
                    e["values"] = json!(v);
                }
                e
            });
    let term = (prop::collection::vec(expression, 0..3), prop::bool::weighted(0.2)).prop_map(|(exprs, fields)| {
        let mut t = json!({"matchExpressions": exprs});
        if fields {
            t["matchFields"] = json!([{"key": "metadata.name", "operator": "In", "values": ["x"]}]);
        }
        t
    });
    prop::collection::vec(term, 0..3)
        .prop_map(|terms| {
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
        })
        .boxed()
}

/// Metadata of a hostile pod: namespace, annotations, labels, being deleted.
type PodMeta = (&'static str, BTreeMap<String, String>, BTreeMap<String, String>, bool);

fn pod_meta() -> BoxedStrategy<PodMeta> {
    let group = prop_oneof![
        1 => Just(None),
        6 => (0usize..2).prop_map(|i| Some(format!("h-g{i}"))),
        1 => select(vec![GOOD_GROUP, "good/gang", "missing-group", ""]).prop_map(|g| Some(g.to_string())),
        1 => text().prop_map(Some),
    ];
    let index = opt(prop_oneof![select(vec!["0", "1", "2"]).prop_map(str::to_string), text()]);
    // Few task names, so that pods of one group often share a task.
    let task = opt(prop_oneof![3 => select(vec!["main", "worker"]).prop_map(str::to_string), 1 => text()]);
    (bad_namespace(), group, opt(text()), labels(), task, index, labels(), prop::bool::weighted(0.1))
        .prop_map(|(ns, group, queue, mut annotations, task, index, mut labels, deleting)| {
            if let Some(g) = group {
                annotations.insert(POD_GROUP_ANNOTATION.to_string(), g);
            }
            if let Some(q) = queue {
                annotations.insert(drover_api::labels::QUEUE_ANNOTATION.to_string(), q);
            }
            if let Some(t) = task {
                labels.insert(TASK_LABEL.to_string(), t);
            }
            if let Some(i) = index {
                labels.insert(TASK_INDEX_LABEL.to_string(), i);
            }
            (ns, annotations, labels, deleting)
        })
        .boxed()
}

/// What a hostile pod asks for: scheduler, node, containers and requests.
fn pod_workload() -> BoxedStrategy<Value> {
    let scheduler =
        prop_oneof![6 => Just("drover".to_string()), 1 => Just("default-scheduler".to_string()), 1 => text()];
    let node = prop_oneof![
        6 => Just(None),
        1 => (0usize..3).prop_map(|i| Some(format!("h-n{i}"))),
        1 => Just(Some("missing-node".to_string())),
    ];
    let init = prop::collection::vec((container(), opt(prop_oneof![Just("Always".to_string()), text()])), 0..2);
    (scheduler, node, prop::collection::vec(container(), 1..3), init, opt(resources()), opt(resources()))
        .prop_map(|(scheduler, node, containers, init, pod_level, overhead)| {
            let init: Vec<Value> = init
                .into_iter()
                .map(|(mut c, policy)| {
                    if let Some(p) = policy {
                        c["restartPolicy"] = json!(p);
                    }
                    c
                })
                .collect();
            let mut spec = json!({"schedulerName": scheduler, "containers": containers, "initContainers": init});
            if let Some(n) = node {
                spec["nodeName"] = json!(n);
            }
            if let Some(r) = pod_level {
                spec["resources"] = json!({"requests": r});
            }
            if let Some(o) = overhead {
                spec["overhead"] = json!(o);
            }
            spec
        })
        .boxed()
}

prop_compose! {
    fn hostile_pod()((ns, annotations, labels, deleting) in pod_meta(), mut spec in pod_workload(),
                     node_selector in opt(labels()), tolerations in prop::collection::vec(toleration(), 0..3),
                     affinity in opt(affinity()),
                     class in opt(prop_oneof![(0usize..3).prop_map(|i| format!("h-pc{i}")), text()]),
                     priority in opt(prop_oneof![any::<i32>(), Just(0)]),
                     phase in prop_oneof![3 => Just(None), 1 => prop_oneof![select(vec!["Pending", "Running", "Succeeded", "Failed"]).prop_map(str::to_string), text()].prop_map(Some)],
                     gated in prop::bool::weighted(0.1),
                     plain in opt(select(vec!["1", "1.5.3", "-1", "NaN", "0.5"]))) -> Value {
        if let Some(cpu) = plain {
            // A plain pod: one container, one cpu request, no constraints; plain pods of one
            // task often share their requests (invalid amounts count as 0), and a bad value
            // on any of them must be reported.
            spec["containers"] = json!([{"name": "main", "resources": {"requests": {"cpu": cpu}}}]);
            spec["initContainers"] = json!([]);
            if let Some(s) = spec.as_object_mut() {
                s.remove("resources");
                s.remove("overhead");
            }
        } else {
            spec["tolerations"] = json!(tolerations);
            if let Some(s) = node_selector { spec["nodeSelector"] = json!(s); }
            if let Some(a) = affinity { spec["affinity"] = a; }
        }
        if let Some(c) = class { spec["priorityClassName"] = json!(c); }
        if let Some(p) = priority { spec["priority"] = json!(p); }
        if gated { spec["schedulingGates"] = json!([{"name": "wait"}]); }
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "", "namespace": ns, "annotations": annotations, "labels": labels,
                "creationTimestamp": "2024-01-01T00:00:01Z"},
            "spec": spec});
        if deleting { pod["metadata"]["deletionTimestamp"] = json!("2024-01-01T01:00:00Z"); }
        if let Some(p) = phase { pod["status"] = json!({"phase": p}); }
        pod
    }
}

fn named(objects: Vec<Value>, prefix: &str) -> Vec<Value> {
    objects
        .into_iter()
        .enumerate()
        .map(|(i, mut o)| {
            o["metadata"]["name"] = json!(format!("{prefix}{i}"));
            o
        })
        .collect()
}

prop_compose! {
    fn hostile_world()(nodes in prop::collection::vec(hostile_node(), 0..3),
                       classes in prop::collection::vec(hostile_class(), 0..3),
                       queues in prop::collection::vec(hostile_queue(), 0..5),
                       groups in prop::collection::vec(hostile_group(), 1..5),
                       pods in prop::collection::vec(hostile_pod(), 0..14),
                       bad_labels in labels()) -> World {
        let (classes, train): (Vec<Value>, Vec<bool>) = classes.into_iter().unzip();
        let mut classes = named(classes, "h-pc");
        // Sometimes an admin's class replaces the built-in class of work that names none.
        if let Some(i) = train.iter().position(|t| *t) {
            classes[i]["metadata"]["name"] = json!("train");
        }
        let bad_labels: BTreeMap<String, String> =
            bad_labels.into_iter().filter(|(k, v)| !(k == TEAM_LABEL && v == "good")).collect();
        World {
            nodes: named(nodes, "h-n"),
            pods: named(pods, "h-p"),
            groups: named(groups, "h-g"),
            queues: named(queues, "h-q"),
            classes,
            namespaces: vec![json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "bad", "labels": bad_labels}})],
            topologies: hostile_topologies(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The documented rules, as expectations

fn str_at<'v>(v: &'v Value, path: &[&str]) -> Option<&'v str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn name(v: &Value) -> &str {
    str_at(v, &["metadata", "name"]).unwrap_or("")
}

fn namespace(v: &Value) -> &str {
    str_at(v, &["metadata", "namespace"]).unwrap_or("")
}

/// The text of a quantity as the Kubernetes type reads it (numbers become their decimal text).
fn quantity_text(v: &Value) -> String {
    serde_json::from_value::<Quantity>(v.clone()).expect("a quantity").0
}

fn entries(v: Option<&Value>) -> Vec<(String, String)> {
    v.and_then(Value::as_object).into_iter().flatten().map(|(k, q)| (k.clone(), quantity_text(q))).collect()
}

fn problems_of<'c>(c: &'c Converted, kind: &str, ns: Option<&str>, name: &str) -> Vec<&'c Problem> {
    c.problems.iter().filter(|p| p.kind == kind && p.namespace.as_deref() == ns && p.name == name).collect()
}

/// Asserts a problem of `reason` on the object whose message contains every hint.
fn expect_problem(
    c: &Converted,
    kind: &str,
    ns: Option<&str>,
    name: &str,
    reason: &str,
    hints: &[&str],
) -> Result<(), TestCaseError> {
    let found = problems_of(c, kind, ns, name)
        .iter()
        .any(|p| p.reason == reason && hints.iter().all(|h| p.message.contains(h)));
    prop_assert!(
        found,
        "expected {} {:?}/{} {} mentioning {:?}; got {:#?}",
        kind,
        ns,
        name,
        reason,
        hints,
        problems_of(c, kind, ns, name)
    );
    Ok(())
}

/// Findings a pod's spec must produce: (reason, hints the message contains, is a request
/// finding).
fn pod_findings(pod: &Value) -> Vec<(&'static str, Vec<String>, bool)> {
    let mut out = Vec::new();
    let spec = &pod["spec"];
    let mut requirements = |rr: &Value, what: String| {
        for (field, kind) in [("requests", "request"), ("limits", "limit")] {
            for (res, text) in entries(rr.get(field)) {
                if ResourceList::parse_amount(&res, &text).is_err() {
                    out.push(("InvalidQuantity", vec![format!("{what} {kind} {res}:")], true));
                }
            }
        }
    };
    for c in spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten())
    {
        requirements(&c["resources"], format!("container {}", c["name"].as_str().unwrap_or("")));
    }
    requirements(&spec["resources"], "pod-level".to_string());
    for (res, text) in entries(spec.get("overhead")) {
        if ResourceList::parse_amount(&res, &text).is_err() {
            out.push(("InvalidQuantity", vec![format!("overhead {res}:")], true));
        }
    }
    for t in spec["tolerations"].as_array().into_iter().flatten() {
        let operator = t["operator"].as_str().unwrap_or("");
        let effect = t["effect"].as_str().unwrap_or("");
        if !["", "Equal", "Exists"].contains(&operator) {
            out.push(("InvalidToleration", vec![format!("unknown operator {operator:?}")], false));
        } else if !["", "NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            out.push(("InvalidToleration", vec![format!("unknown effect {effect:?}")], false));
        }
    }
    let terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if terms.len() > 1 {
        out.push(("UnsupportedAffinity", vec!["nodeSelectorTerms".to_string()], false));
    }
    if let Some(term) = terms.first() {
        if term["matchFields"].as_array().is_some_and(|f| !f.is_empty()) {
            out.push(("UnsupportedAffinity", vec!["matchFields".to_string()], false));
        }
        for e in term["matchExpressions"].as_array().into_iter().flatten() {
            let key = e["key"].as_str().unwrap_or("");
            // The operator names are the enum's serde names (Kubernetes' spelling).
            let operator = match serde_json::from_value::<NodeSelectorOperator>(e["operator"].clone()) {
                Ok(op) => op,
                Err(_) => {
                    let other = e["operator"].as_str().unwrap_or("");
                    out.push((
                        "InvalidAffinity",
                        vec![format!("{key:?}"), format!("unknown operator {other:?}")],
                        false,
                    ));
                    continue;
                }
            };
            let values =
                e["values"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect();
            let requirement = NodeSelectorRequirement { key: key.to_string(), operator, values };
            if requirement.validate().is_err() {
                out.push(("InvalidAffinity", vec![format!("{key:?}")], false));
            }
        }
    }
    out
}

/// Whether a queue's parent chain reaches the root (no missing parent, no cycle).
fn chain_ok(queues: &BTreeMap<String, &Value>, start: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut cur = start.to_string();
    loop {
        if !seen.insert(cur.clone()) {
            return false;
        }
        let Some(q) = queues.get(&cur) else { return false };
        match str_at(q, &["spec", "parent"]).filter(|p| !p.is_empty()) {
            None => return true,
            Some(p) => cur = p.to_string(),
        }
    }
}

/// Checks the conversion of `world` (the valid tenant plus `hostile`) against the rules in
/// the module docs of `drover_k8s::convert`.
fn check_conversion(world: &World, hostile: &World, c: &Converted) -> Result<(), TestCaseError> {
    // Every problem names an object of the input, by kind and (namespace, name).
    for p in &c.problems {
        let pool = match p.kind {
            "Node" => &world.nodes,
            "Pod" => &world.pods,
            "PodGroup" => &world.groups,
            "Queue" => &world.queues,
            "PriorityClass" => &world.classes,
            "Topology" => &world.topologies,
            other => return Err(TestCaseError::fail(format!("unknown kind {other}: {p:?}"))),
        };
        let namespaced = matches!(p.kind, "Pod" | "PodGroup");
        prop_assert_eq!(p.namespace.is_some(), namespaced, "{:?}", p);
        prop_assert!(
            pool.iter().any(|o| name(o) == p.name && (!namespaced || Some(namespace(o)) == p.namespace.as_deref())),
            "{:?} names no input object",
            p
        );
        prop_assert!(!p.message.is_empty() && !p.reason.is_empty(), "{:?}", p);
        prop_assert!(p.reason.chars().next().is_some_and(|c| c.is_ascii_uppercase()), "{:?}", p);
    }

    // Nodes: an invalid allocatable entry is reported and counts as 0; an unknown taint
    // effect is reported and taken as NoSchedule.
    let node_names: BTreeSet<&str> = world.nodes.iter().map(name).filter(|n| !n.is_empty()).collect();
    for node in &hostile.nodes {
        let n = name(node);
        let out = c.nodes.iter().find(|x| x.name == n).expect("every named node is kept");
        for (res, text) in entries(node["status"].get("allocatable")) {
            match ResourceList::parse_amount(&res, &text) {
                Err(_) => {
                    expect_problem(c, "Node", None, n, "InvalidQuantity", &[&format!("allocatable {res}:")])?;
                    prop_assert_eq!(out.allocatable.get(&res), 0, "{} {}: {:?} counts as 0", n, res, text);
                }
                Ok(v) => prop_assert!((0..=v).contains(&out.allocatable.get(&res))),
            }
        }
        for t in node["spec"]["taints"].as_array().into_iter().flatten() {
            let (key, effect) = (t["key"].as_str().unwrap_or(""), t["effect"].as_str().unwrap_or(""));
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
                expect_problem(c, "Node", None, n, "InvalidTaint", &[key, &format!("{effect:?}")])?;
                prop_assert!(out.taints.iter().any(|x| x.key == key && x.effect == TaintEffect::NoSchedule));
            }
        }
    }

    // PriorityClasses: a preemptible annotation other than true/false is reported.
    for class in &hostile.classes {
        if let Some(a) = str_at(class, &["metadata", "annotations", PREEMPTIBLE_ANNOTATION]) {
            if !["true", "false"].contains(&a.trim().to_ascii_lowercase().as_str()) {
                expect_problem(c, "PriorityClass", None, name(class), "InvalidAnnotation", &[PREEMPTIBLE_ANNOTATION])?;
            }
        }
    }

    // Queues: a broken parent chain leaves the queue out, reported; a valid queue ignores
    // (and reports) invalid quantities and reports a malformed namespaceSelector.
    let queues: BTreeMap<String, &Value> = world.queues.iter().map(|q| (name(q).to_string(), q)).collect();
    for q in &hostile.queues {
        let n = name(q);
        let out = c.queues.iter().find(|x| x.name == n);
        if !chain_ok(&queues, n) {
            prop_assert!(out.is_none(), "queue {} on a broken chain is left out", n);
            let reported = problems_of(c, "Queue", None, n)
                .iter()
                .any(|p| ["ParentNotFound", "ParentInvalid", "QueueCycle"].contains(&p.reason.as_str()));
            prop_assert!(reported, "queue {}: {:?}", n, problems_of(c, "Queue", None, n));
            continue;
        }
        let out = out.ok_or_else(|| TestCaseError::fail(format!("valid queue {n} is missing")))?;
        for (field, list) in [("deserved", Some(&out.deserved)), ("limit", out.limit.as_ref())] {
            for (res, text) in entries(q["spec"].get(field)) {
                match ResourceList::parse_amount(&res, &text) {
                    Err(_) => {
                        expect_problem(c, "Queue", None, n, "InvalidQuantity", &[&format!("{field} {res}:")])?;
                        prop_assert!(
                            list.is_some_and(|l| !l.0.contains_key(&res)),
                            "{} {} {} is ignored",
                            n,
                            field,
                            res
                        );
                    }
                    Ok(v) => prop_assert_eq!(list.map(|l| l.get(&res)), Some(v)),
                }
            }
        }
        if let Some(s) = q["spec"].get("namespaceSelector") {
            let selector: LabelSelector = serde_json::from_value(s.clone()).expect("a selector");
            if label_selector::validate(&selector).is_err() {
                expect_problem(c, "Queue", None, n, "InvalidNamespaceSelector", &["namespaceSelector"])?;
            }
        }
    }

    // PodGroups: handed over, or reported, or finished.
    let group_keys: BTreeSet<(&str, &str)> = world.groups.iter().map(|g| (namespace(g), name(g))).collect();
    let queue_names: BTreeSet<&str> = c.queues.iter().map(|q| q.name.as_str()).collect();
    let all_queue_names: BTreeSet<&str> = world.queues.iter().map(name).chain(std::iter::once(DEFAULT_QUEUE)).collect();
    fn member_of(pod: &Value) -> Option<(&str, &str)> {
        let group = str_at(pod, &["metadata", "annotations", POD_GROUP_ANNOTATION]).filter(|g| !g.is_empty())?;
        (str_at(pod, &["spec", "schedulerName"]) == Some("drover")).then_some((namespace(pod), group))
    }
    let phase_of = |pod: &Value| str_at(pod, &["status", "phase"]).unwrap_or("").to_string();
    let terminal = |pod: &Value| ["Succeeded", "Failed"].contains(&phase_of(pod).as_str());
    let mut passing: BTreeSet<(String, String)> = BTreeSet::new();
    for g in &hostile.groups {
        let (ns, n) = (namespace(g), name(g));
        let job = c.jobs.iter().find(|j| j.namespace == ns && j.name == n);
        let problems = problems_of(c, "PodGroup", Some(ns), n);
        let queue = str_at(g, &["spec", "queue"]).filter(|q| !q.is_empty()).unwrap_or(DEFAULT_QUEUE);
        let members: Vec<&Value> =
            world.pods.iter().filter(|p| member_of(p) == Some((ns, n)) && !terminal(p)).collect();
        let finished = matches!(str_at(g, &["status", "phase"]), Some("Completed" | "Failed"))
            && !members.iter().any(|p| {
                str_at(p, &["spec", "nodeName"]).is_none_or(str::is_empty)
                    && p["metadata"].get("deletionTimestamp").is_none()
            });
        if finished {
            prop_assert!(job.is_none() && problems.is_empty(), "finished group {}/{} is left out silently", ns, n);
            continue;
        }
        let queue_problem = problems.iter().find(|p| QUEUE_REASONS.contains(&p.reason.as_str()));
        // A group naming a topology or level that does not exist waits, never placed without it.
        let topology_problem = problems.iter().find(|p| TOPOLOGY_REASONS.contains(&p.reason.as_str()));
        if let Some(p) = queue_problem {
            prop_assert!(p.message.contains(&format!("{queue:?}")), "{:?} names the queue {:?}", p, queue);
        } else if topology_problem.is_none() {
            passing.insert((ns.to_string(), n.to_string()));
        }
        if !all_queue_names.contains(queue) {
            prop_assert_eq!(
                queue_problem.map(|p| p.reason.as_str()),
                Some("QueueNotFound"),
                "{}/{} in {:?}",
                ns,
                n,
                queue
            );
        } else if !queue_names.contains(queue) {
            prop_assert_eq!(
                queue_problem.map(|p| p.reason.as_str()),
                Some("QueueInvalid"),
                "{}/{} in {:?}",
                ns,
                n,
                queue
            );
        }
        if queue == GOOD_QUEUE {
            // The valid tenant's queue admits only its namespace.
            prop_assert_eq!(queue_problem.map(|p| p.reason.as_str()), Some("QueueNotAllowed"));
            prop_assert!(job.is_none());
        }
        match job {
            None => prop_assert!(!problems.is_empty(), "group {}/{} left out without a problem", ns, n),
            Some(job) => {
                prop_assert!(queue_problem.is_none() && topology_problem.is_none());
                prop_assert_eq!(job.queue.as_str(), queue);
                prop_assert_eq!(Some(u64::from(job.min_member)), g["spec"]["minMember"].as_u64());
                // minTaskMember: every minimum is kept (spread over the task's parts); one
                // naming a task without pods becomes an empty task the gang waits for.
                let wanted: u64 =
                    g["spec"]["minTaskMember"].as_object().into_iter().flatten().filter_map(|(_, m)| m.as_u64()).sum();
                prop_assert_eq!(job.tasks.iter().map(|t| u64::from(t.min_available)).sum::<u64>(), wanted);
                for (task, m) in g["spec"]["minTaskMember"].as_object().into_iter().flatten() {
                    let m = m.as_u64().unwrap_or(0);
                    let has_pods = job
                        .tasks
                        .iter()
                        .any(|t| (t.name == *task || t.name.starts_with(&format!("{task}#"))) && !t.pods.is_empty());
                    if m > 0 && !has_pods {
                        prop_assert!(
                            job.tasks
                                .iter()
                                .any(|t| t.name == *task && t.pods.is_empty() && u64::from(t.min_available) == m),
                            "minTaskMember {:?}: {} has no pods: {:?}",
                            task,
                            m,
                            job.tasks
                        );
                    }
                }
                if let Some(class) = str_at(g, &["spec", "priorityClassName"]).filter(|c| !c.is_empty()) {
                    prop_assert_eq!(job.priority_class.as_str(), class);
                }
            }
        }
    }

    // Pods.
    for pod in &hostile.pods {
        let (ns, n) = (namespace(pod), name(pod));
        if terminal(pod) {
            continue;
        }
        let node = str_at(pod, &["spec", "nodeName"]).filter(|x| !x.is_empty());
        let known_node = node.is_some_and(|x| node_names.contains(x));
        let findings = pod_findings(pod);
        let member = member_of(pod);
        let mut must_report: Vec<&(&str, Vec<String>, bool)> = Vec::new();
        match member {
            Some(key) if !group_keys.contains(&key) => {
                expect_problem(c, "Pod", Some(ns), n, "PodGroupNotFound", &[&format!("{:?}", key.1)])?;
                if known_node {
                    must_report.extend(findings.iter().filter(|f| f.2));
                }
            }
            Some((gns, g)) if passing.contains(&(gns.to_string(), g.to_string())) => {
                let deleting = pod["metadata"].get("deletionTimestamp").is_some();
                let gated = pod["spec"]["schedulingGates"].as_array().is_some_and(|x| !x.is_empty());
                if node.is_some() && !known_node {
                    expect_problem(c, "Pod", Some(ns), n, "NodeNotFound", &[&format!("{:?}", node.unwrap_or(""))])?;
                } else if node.is_none() && (deleting || gated) {
                    // Not schedulable now; left out of the job silently (as kube-scheduler does).
                } else {
                    must_report.extend(findings.iter());
                    if let Some(index) = str_at(pod, &["metadata", "labels", TASK_INDEX_LABEL]) {
                        if index.trim().parse::<u32>().is_err() {
                            expect_problem(c, "Pod", Some(ns), n, "InvalidTaskIndex", &[TASK_INDEX_LABEL])?;
                        }
                    }
                }
            }
            // Pods of groups left out, of other schedulers or of no group: their requests
            // matter only where they hold a node.
            _ => {
                if known_node {
                    must_report.extend(findings.iter().filter(|f| f.2));
                }
            }
        }
        for (reason, hints, _) in must_report {
            // Reported on this pod, or on an earlier pod of its task with the same value.
            let found = c.problems.iter().any(|p| {
                p.kind == "Pod"
                    && p.namespace.as_deref() == Some(ns)
                    && p.reason == *reason
                    && hints.iter().all(|h| p.message.contains(h.as_str()))
            });
            prop_assert!(found, "pod {}/{}: no {} mentioning {:?} in {:#?}", ns, n, reason, hints, c.problems);
        }
    }
    Ok(())
}

/// A stable rendering of a conversion.
fn fingerprint(c: &Converted) -> String {
    format!("{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}", c.nodes, c.queues, c.jobs, c.pods, c.groups, c.problems)
}

/// The world with every field the scheduler is documented not to read removed.
fn without_ignored_fields(w: &World) -> World {
    let mut w = w.clone();
    for g in &mut w.groups {
        if let Some(spec) = g["spec"].as_object_mut() {
            spec.remove("scheduleTimeoutSeconds");
        }
        g["metadata"]["annotations"] = keep(&g["metadata"]["annotations"], &KAI);
    }
    for p in &mut w.pods {
        let read = [&[POD_GROUP_ANNOTATION, MIN_NVLINK_GPUS_ANNOTATION][..], &KAI, &KUEUE].concat();
        p["metadata"]["annotations"] = keep(&p["metadata"]["annotations"], &read);
        p["metadata"]["labels"] = keep(&p["metadata"]["labels"], &[TASK_LABEL, TASK_INDEX_LABEL]);
    }
    for pc in &mut w.classes {
        pc["metadata"]["annotations"] = keep_one(&pc["metadata"]["annotations"], PREEMPTIBLE_ANNOTATION);
    }
    w
}

/// The entries of `map` under `keys`.
fn keep(map: &Value, keys: &[&str]) -> Value {
    let m = map.as_object().cloned().unwrap_or_default();
    Value::Object(m.into_iter().filter(|(k, _)| keys.contains(&k.as_str())).collect())
}

fn keep_one(map: &Value, key: &str) -> Value {
    let mut out = json!({});
    if let Some(v) = map.get(key) {
        out[key] = v.clone();
    }
    out
}

/// Builds the snapshot the way the scheduler does and runs one cycle of the default
/// configuration; checks what must hold whatever the input.
fn schedule(c: &Converted) -> Result<(Snapshot, CycleOutcome), TestCaseError> {
    let snap = c.snapshot().map_err(|e| TestCaseError::fail(format!("converted inputs must build: {e}")))?;
    prop_assert_eq!(snap.pods.len(), c.pods.len());
    let outcome = run_cycle(&snap, &SchedulerConfig::default());
    // Fair shares divide the cluster: no queue's share exceeds the capacity.
    for (q, share) in outcome.queues.iter_enumerated().map(|(q, o)| (q, &o.fair_share)) {
        for r in (0..snap.resources.len()).filter(|&r| r != snap.pods_resource) {
            prop_assert!(
                (0..=snap.capacity[r]).contains(&share[r]),
                "queue {} fair share of {} is {} with capacity {}",
                snap.queues[q].name,
                snap.resources[r],
                share[r],
                snap.capacity[r]
            );
        }
    }
    // New bindings never push a node that had room over its allocatable.
    let mut used: TiVec<NodeId, Vec<i64>> = ti_vec![vec![0i64; snap.resources.len()]; snap.nodes.len()];
    for pod in &snap.pods {
        let requests = &snap.jobs[pod.job].tasks[pod.task].requests;
        if let PodPhase::Bound(n) | PodPhase::Releasing(n) = pod.phase {
            for (r, u) in used[n].iter_mut().enumerate() {
                *u = u.saturating_add(requests[r]);
            }
        }
    }
    let fitted: TiVec<NodeId, bool> = used
        .iter_enumerated()
        .map(|(n, u)| u.iter().enumerate().all(|(r, v)| *v <= snap.nodes[n].allocatable[r]))
        .collect();
    for &(pod, node) in &outcome.decisions.binds {
        prop_assert_eq!(&snap.pods[pod].phase, &PodPhase::Pending);
        let p = &snap.pods[pod];
        for (r, u) in used[node].iter_mut().enumerate() {
            *u = u.saturating_add(snap.jobs[p.job].tasks[p.task].requests[r]);
        }
    }
    for (n, u) in used.iter_enumerated() {
        if fitted[n] {
            for (r, v) in u.iter().enumerate() {
                prop_assert!(
                    *v <= snap.nodes[n].allocatable[r],
                    "node {} over its {}",
                    snap.nodes[n].name,
                    snap.resources[r]
                );
            }
        }
    }
    Ok((snap, outcome))
}

/// The valid tenant's pods bound this cycle, with their nodes.
fn good_bindings(c: &Converted, snap: &Snapshot, outcome: &CycleOutcome) -> BTreeMap<String, String> {
    outcome
        .decisions
        .binds
        .iter()
        .filter(|&&(pod, _)| c.pods[pod].namespace == GOOD_NS)
        .map(|&(pod, node)| (c.pods[pod].name.clone(), snap.nodes[node].name.clone()))
        .collect()
}

fn check_good_tenant(world: &World, c: &Converted) -> Result<(), TestCaseError> {
    // The valid tenant's job and queue convert exactly as without the hostile objects.
    let alone = good_world().convert();
    let find = |c: &Converted| c.jobs.iter().find(|j| j.namespace == GOOD_NS && j.name == GOOD_GROUP).cloned();
    let (mut job, want) = (find(c), find(&alone));
    // An admin's PriorityClass named `train` sets the priority of work that names no class.
    if let (Some(j), Some(w), true) = (&mut job, &want, world.classes.iter().any(|pc| name(pc) == "train")) {
        (j.priority, j.preemptible) = (w.priority, w.preemptible);
    }
    prop_assert_eq!(format!("{job:?}"), format!("{want:?}"));
    let queue = |c: &Converted| format!("{:?}", c.queues.iter().find(|q| q.name == GOOD_QUEUE));
    prop_assert_eq!(queue(c), queue(&alone));
    let refs = |c: &Converted| c.pods.iter().filter(|p| p.namespace == GOOD_NS).cloned().collect::<Vec<_>>();
    prop_assert_eq!(refs(c), refs(&alone));
    prop_assert!(c.problems.iter().all(|p| p.namespace.as_deref() != Some(GOOD_NS)), "{:?}", c.problems);

    // And its gang gets nodes of its pool in this cycle.
    let (snap, outcome) = schedule(c)?;
    let bound = good_bindings(c, &snap, &outcome);
    prop_assert_eq!(bound.len(), GOOD_PODS.len(), "good pods bound: {:?}; reasons {:?}", bound, outcome.reasons);
    for node in bound.values() {
        let labels = &c.nodes.iter().find(|n| &n.name == node).expect("a node").labels;
        prop_assert_eq!(labels.get(POOL_LABEL).map(String::as_str), Some("good"), "{} has the pool label", node);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_objects_are_reported_and_never_block_a_valid_tenant(hostile in hostile_world()) {
        let mut world = good_world();
        extend(&mut world, hostile.clone());
        let c = world.convert();
        check_conversion(&world, &hostile, &c)?;
        check_good_tenant(&world, &c)?;
        // Fields the scheduler does not read change nothing.
        prop_assert_eq!(fingerprint(&without_ignored_fields(&world).convert()), fingerprint(&c));
    }
}

// ---------------------------------------------------------------------------------------
// Named cases

fn with_hostile(mut extra: World) -> (World, Converted) {
    let mut world = good_world();
    if extra.namespaces.is_empty() {
        // The namespace of the hostile objects, known to the scheduler: the implicit `default`
        // queue admits only namespaces it has seen (and none of a project).
        extra.namespaces.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bad"}}));
    }
    extend(&mut world, extra);
    let c = world.convert();
    (world, c)
}

fn bad_pod(name: &str, group: &str, spec: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bad", "annotations": {POD_GROUP_ANNOTATION: group},
            "creationTimestamp": "2024-01-01T00:00:01Z"},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main"}]}});
    for (k, v) in spec.as_object().into_iter().flatten() {
        p["spec"][k] = v.clone();
    }
    p
}

fn bad_group(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "bad", "creationTimestamp": "2024-01-01T00:00:00Z"}, "spec": spec})
}

fn bad_queue(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})
}

fn has(c: &Converted, kind: &str, name: &str, reason: &str) -> bool {
    c.problems.iter().any(|p| p.kind == kind && p.name == name && p.reason == reason)
}

#[test]
fn another_namespace_cannot_join_the_gang_or_use_the_queue() {
    let (_, c) = with_hostile(World {
        pods: vec![bad_pod("joiner", GOOD_GROUP, json!({})), bad_pod("qualified", "good/gang", json!({}))],
        groups: vec![bad_group("thief", json!({"minMember": 1, "queue": GOOD_QUEUE}))],
        ..World::default()
    });
    assert!(has(&c, "Pod", "joiner", "PodGroupNotFound"), "{:?}", c.problems);
    assert!(has(&c, "Pod", "qualified", "PodGroupNotFound"), "{:?}", c.problems);
    let thief = c.problems.iter().find(|p| p.name == "thief").expect("a problem");
    assert_eq!(thief.reason, "QueueNotAllowed");
    assert!(thief.message.contains("\"bad\"") && thief.message.contains("\"good-q\""), "{}", thief.message);
    assert!(c.jobs.iter().all(|j| j.name != "thief"));
    let gang = c.jobs.iter().find(|j| j.name == GOOD_GROUP).expect("the gang");
    assert_eq!(gang.tasks.iter().map(|t| t.pods.len()).sum::<usize>(), 2, "only its own two pods");
    let (snap, outcome) = schedule(&c).unwrap();
    assert_eq!(good_bindings(&c, &snap, &outcome).len(), 2);
}

#[test]
fn task_minimums_naming_missing_tasks_make_the_gang_wait() {
    let (_, c) = with_hostile(World {
        pods: vec![bad_pod("w0", "waiting", json!({}))],
        groups: vec![
            bad_group("waiting", json!({"minMember": 1, "minTaskMember": {"main": 1, "launcher": u32::MAX, "": 3}})),
            bad_group("huge", json!({"minMember": u32::MAX})),
            bad_group("zero", json!({"minMember": 0})),
        ],
        ..World::default()
    });
    let waiting = c.jobs.iter().find(|j| j.name == "waiting").expect("handed over");
    let shape: Vec<(&str, u32, usize)> =
        waiting.tasks.iter().map(|t| (t.name.as_str(), t.min_available, t.pods.len())).collect();
    assert_eq!(shape, [("", 3, 0), ("launcher", u32::MAX, 0), ("main", 1, 1)]);
    let (snap, outcome) = schedule(&c).unwrap();
    let id = snap.jobs.position(|j| j.name == "waiting").unwrap();
    assert!(outcome.reasons[id].is_some(), "the gang waits with a reason");
    assert!(outcome.decisions.binds.iter().all(|&(p, _)| snap.pods[p].job != id), "nothing of it binds");
    assert_eq!(good_bindings(&c, &snap, &outcome).len(), 2);
}

#[test]
fn a_bad_value_on_a_later_pod_of_a_task_is_still_reported() {
    // The first pod has no cpu request, the second an unparseable one (counted as 0): both
    // have the same requests and constraints, so they share a task part, but only the
    // second has anything to report and must be named.
    let first = bad_pod("p0", "g", json!({}));
    let mut second = bad_pod("p1", "g", json!({}));
    second["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1.5.3"}});
    second["spec"]["tolerations"] = json!([{"key": "x", "operator": "Sometimes"}]);
    second["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:02Z");
    let (_, c) = with_hostile(World {
        pods: vec![first, second],
        groups: vec![bad_group("g", json!({"minMember": 1}))],
        ..World::default()
    });
    assert!(has(&c, "Pod", "p1", "InvalidQuantity"), "{:#?}", c.problems);
    assert!(!has(&c, "Pod", "p0", "InvalidQuantity"), "{:#?}", c.problems);
    let p1 = c.problems.iter().find(|p| p.name == "p1" && p.reason == "InvalidQuantity").unwrap();
    assert!(p1.message.contains("container main request cpu") && p1.message.contains("1.5.3"), "{}", p1.message);
}

#[test]
fn fair_shares_of_huge_oversubscribed_quotas_stay_within_the_cluster() {
    // Three sibling queues that each deserve 7Ei of memory, each with a pod asking for
    // 7Ei: the parent's share (the cluster's memory) is divided in proportion to deserved
    // quota, with products far beyond 64 bits.
    let mut extra = World::default();
    for i in 0..3 {
        let q = format!("huge-{i}");
        extra.queues.push(bad_queue(&q, json!({"parent": HOSTILE_ROOT, "deserved": {"memory": "7Ei"}})));
        extra.groups.push(bad_group(&format!("g{i}"), json!({"minMember": 1, "queue": q})));
        let mut p = bad_pod(&format!("p{i}"), &format!("g{i}"), json!({}));
        p["spec"]["containers"][0]["resources"] = json!({"requests": {"memory": "7Ei"}});
        extra.pods.push(p);
    }
    let (_, c) = with_hostile(extra);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    let (snap, outcome) = schedule(&c).unwrap();
    let memory = snap.resources.iter().position(|r| r == "memory").unwrap();
    for i in 0..3 {
        let q = snap.queues.position(|q| q.name == format!("huge-{i}")).unwrap();
        let share = outcome.queues[q].fair_share[memory];
        assert!(share <= snap.capacity[memory], "{share}");
    }
    assert_eq!(good_bindings(&c, &snap, &outcome).len(), 2);
}

#[test]
fn hostile_queue_trees_are_left_out_with_reasons() {
    let (_, c) = with_hostile(World {
        queues: vec![
            bad_queue("h-q0", json!({"parent": "h-q1"})),
            bad_queue("h-q1", json!({"parent": "h-q0"})),
            bad_queue("h-q2", json!({"parent": "h-q0"})),
            bad_queue("h-q3", json!({"parent": "🙂"})),
            bad_queue(
                "h-q4",
                json!({"parent": HOSTILE_ROOT, "deserved": {"cpu": "1e400", "memory": "-1", "nvidia.com/gpu": "0.5", "pods": ""},
                    "limit": {"cpu": "NaN"},
                    "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": []},
                        {"key": "bad key", "operator": "DoesNotExist"}]}}),
            ),
        ],
        groups: vec![
            bad_group("in-cycle", json!({"minMember": 1, "queue": "h-q2"})),
            bad_group("fenced", json!({"minMember": 1, "queue": "h-q4"})),
        ],
        ..World::default()
    });
    for (name, reason) in [
        ("h-q0", "QueueCycle"),
        ("h-q1", "QueueCycle"),
        ("h-q2", "ParentInvalid"),
        ("h-q3", "ParentNotFound"),
        ("h-q4", "InvalidQuantity"),
        ("h-q4", "InvalidNamespaceSelector"),
    ] {
        assert!(has(&c, "Queue", name, reason), "{name} {reason}: {:#?}", c.problems);
    }
    assert_eq!(c.problems.iter().filter(|p| p.name == "h-q4" && p.reason == "InvalidQuantity").count(), 5);
    let h4 = c.queues.iter().find(|q| q.name == "h-q4").expect("kept");
    assert!(h4.deserved.0.is_empty() && h4.limit.as_ref().is_some_and(|l| l.0.is_empty()), "{h4:?}");
    assert!(has(&c, "PodGroup", "in-cycle", "QueueInvalid"));
    assert!(has(&c, "PodGroup", "fenced", "QueueNotAllowed"), "a malformed fence admits nobody");
    let (snap, outcome) = schedule(&c).unwrap();
    assert_eq!(good_bindings(&c, &snap, &outcome).len(), 2);
}

#[test]
fn a_toleration_of_everything_is_taken_as_written() {
    // Tolerations steer, they do not fence (docs/security.md, "Known limits"): a pod that
    // tolerates every taint may use the valid tenant's nodes when they have room.
    let mut p = bad_pod("everywhere", "g", json!({"tolerations": [{"operator": "Exists"}]}));
    p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
    let (_, c) = with_hostile(World {
        pods: vec![p],
        groups: vec![bad_group("g", json!({"minMember": 1}))],
        ..World::default()
    });
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    let (snap, outcome) = schedule(&c).unwrap();
    let bound: Vec<&str> = outcome
        .decisions
        .binds
        .iter()
        .filter(|&&(pod, _)| c.pods[pod].name == "everywhere")
        .map(|&(_, node)| snap.nodes[node].name.as_str())
        .collect();
    assert_eq!(bound.len(), 1);
    assert!(GOOD_NODES.contains(&bound[0]));
    assert_eq!(good_bindings(&c, &snap, &outcome).len(), 2, "there is room for both");
}
