//! Scenario parsing: the contract's example, defaults, one test per validation rule, and a
//! property test that random input never panics the parser.

use std::collections::BTreeMap;

use drover_api::{
    NodeSelectorOperator, NodeSelectorRequirement, PriorityClass, ResourceList, Taint, TaintEffect, Toleration,
    TolerationOperator,
};
use drover_scheduler::config::{ActionName, ConfigOverrides, FairShareMode, PlacementOverride, PlacementStrategy};
use drover_scheduler::snapshot::{
    self, Constraints, LevelInput, PodPhaseInput, SlicesInput, TopologyInput, TopologyRequestInput,
};
use drover_sim::scenario::{load, parse, pod_name, QueueingStrategy, Scenario, ScenarioError};
use proptest::prelude::*;
use serde_yaml::Value;

/// The example of `scenario-format.md`, verbatim.
const CONTRACT_EXAMPLE: &str = r#"name: reclaim-over-quota          # required
description: free text            # optional
cycles: 1                         # scheduling cycles to run (default 1); ignored in trace mode
config:                           # optional overrides of the default scheduler config
  actions: [enqueue, allocate, preempt, reclaim, backfill]
  placement: binpack              # binpack | spread
  fairShare: maxMin               # maxMin: unused capacity is water-filled by overQuotaWeight
                                  # demandProportional: split in proportion to weight x demand
nodes:
  - name: n1
    allocatable: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "8", pods: "110"}
    labels: {drover.dev/node-pool: default}
    taints: [{key: dedicated, value: infer, effect: NoSchedule}]
    unschedulable: false
queues:                           # a tree; parent "" (or absent) = child of the root
  - name: dept-a
    deserved: {nvidia.com/gpu: "4"}   # guaranteed quota (absent = 0)
    limit: {nvidia.com/gpu: "8"}      # hard cap (absent = none)
    overQuotaWeight: 1                # share of unused resources (default 1)
    reclaimable: true                 # may lose over-quota resources (default true)
    queueingStrategy: BestEffortFIFO  # or StrictFIFO: nothing starts while an earlier
                                      # job of this queue (in priority, then FIFO order) waits
  - name: proj-1
    parent: dept-a
    deserved: {nvidia.com/gpu: "2"}
priorityClasses:                  # optional; absent = the built-in defaults
  - {name: train, value: 50, preemptible: true}
jobs:                             # one job = one PodGroup and its pods
  - name: j1
    namespace: default            # default "default"
    queue: proj-1
    priorityClass: train          # default: the lowest built-in class
    minMember: 4                  # gang size (default: all replicas)
    createdAt: 0                  # seconds; FIFO order among equals
    duration: 3600                # trace mode only: run time once all minMember pods run
    tasks:
      - name: worker
        replicas: 4
        requests: {nvidia.com/gpu: "1", cpu: "1"}
        nodeSelector: {}
        tolerations: []
        running: [n1, n1]         # pods already bound, in index order; the rest are pending
expect:                           # optional; `drover sim --check` exits 1 on any mismatch
  jobs:
    j1: {running: 4}              # pods bound after the cycles (also: pending, evicted)
  placements:
    j1-worker-0: n1               # pod name = <job>-<task>-<index>
  evicted: [j2-worker-1]          # the exact set of evicted pods
"#;

/// A small valid scenario; error tests break it one field at a time.
const BASE: &str = r#"
name: base
nodes:
  - name: n1
    allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "4"}
    taints: [{key: dedicated, value: infer, effect: NoSchedule}]
  - name: n2
    allocatable: {cpu: "8", memory: 32Gi}
queues:
  - name: dept
  - name: proj-1
    parent: dept
jobs:
  - name: j1
    queue: proj-1
    tasks:
      - name: worker
        replicas: 2
        requests: {cpu: "1"}
"#;

const TASK: &str = "job default/j1 task worker";

/// The example of the contract's "Topology" section, verbatim; [`topology_scenario`] adds what
/// a whole scenario needs around it.
const CONTRACT_TOPOLOGY: &str = r#"topologies:                       # optional; each a hierarchy of node labels, coarse -> fine
  - name: default                 # a job that names no topology uses "default"
    levels:
      - {name: block, nodeLabel: network.drover.dev/block}
      - {name: rack,  nodeLabel: network.drover.dev/rack}
    # the node itself is always the implicit finest level, named "node"
jobs:
  - name: j1
    topology:                     # optional; where the job's pods may go, as one group
      name: default               # default "default"
      required: rack              # hard: every pod of the job inside one rack
      preferred: node             # soft: as few domains of this level as possible
    tasks:
      - name: worker
        replicas: 8
        topology: {required: rack}      # optional; this task's pods in one rack, inside the
                                        # job's own domain (a sub-group with its own constraint)
        slices: {size: 4, required: node}  # optional; pods of consecutive indexes in groups of
                                        # `size` (0-3, 4-7, ...), each group inside one domain
        annotations: {}                 # the pods' annotations
"#;

/// The contract's topology example as a whole scenario: a name, a node in rack b1/r1, a queue.
fn topology_scenario() -> String {
    let head = "name: topo\nnodes:\n  - {name: n1, allocatable: {nvidia.com/gpu: \"8\"}, \
                labels: {network.drover.dev/block: b1, network.drover.dev/rack: r1}}\nqueues: [{name: q}]\n";
    let example = CONTRACT_TOPOLOGY.replacen("  - name: j1\n", "  - name: j1\n    queue: q\n", 1);
    format!("{head}{example}")
}

/// The topology scenario with one text replaced (which must be present).
fn topo_edit(from: &str, to: &str) -> String {
    let base = topology_scenario();
    assert!(base.contains(from), "the topology scenario lacks {from:?}");
    base.replacen(from, to, 1)
}

/// A job of BASE's queue appended to the topology scenario, with a task of 2 pods and `extra`
/// (job fields at 4 spaces, `task` fields inline).
fn topo_job(extra: &str, task: &str) -> String {
    let sep = if task.is_empty() { "" } else { ", " };
    format!(
        "{}  - name: j2\n    queue: q\n{extra}    tasks: [{{name: w, replicas: 2{sep}{task}}}]\n",
        topology_scenario()
    )
}

const NVLINK: &str = "gpu-topology.my.company.com/min-nvlink-gpus";

fn ok(yaml: &str) -> Scenario {
    parse(yaml, "test.yaml").unwrap_or_else(|e| panic!("rejected: {e}"))
}

/// BASE with one text replaced (which must be present).
fn edit(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "BASE lacks {from:?}");
    BASE.replacen(from, to, 1)
}

/// BASE with text appended to its single task.
fn with_task(extra: &str) -> String {
    edit("        requests: {cpu: \"1\"}\n", &format!("        requests: {{cpu: \"1\"}}\n{extra}"))
}

/// BASE with an `expect:` section.
fn with_expect(expect: &str) -> String {
    format!("{BASE}expect:\n{expect}")
}

fn rejected(yaml: &str) -> ScenarioError {
    match parse(yaml, "test.yaml") {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => e,
    }
}

fn assert_rejected(yaml: &str, object: &str, field: &str, fragments: &[&str]) {
    let e = rejected(yaml);
    assert_eq!(e.file, "test.yaml");
    assert_eq!((e.object.as_str(), e.field.as_str()), (object, field), "error: {e}");
    for fragment in fragments {
        assert!(e.message.contains(fragment), "message of `{e}` lacks {fragment:?}");
    }
}

fn resources(entries: &[(&str, i64)]) -> ResourceList {
    ResourceList(entries.iter().map(|(k, v)| (k.to_string(), *v)).collect())
}

// ---------------------------------------------------------------------------------------------
// Valid scenarios.

#[test]
fn the_contract_example_parses() {
    let s = ok(CONTRACT_EXAMPLE);
    assert_eq!(s.name, "reclaim-over-quota");
    assert_eq!(s.description, "free text");
    assert_eq!(s.cycles, 1);
    assert_eq!(
        s.config,
        ConfigOverrides {
            actions: Some(vec![
                ActionName::Enqueue,
                ActionName::Allocate,
                ActionName::Preempt,
                ActionName::Reclaim,
                ActionName::Backfill
            ]),
            placement: Some(PlacementOverride::Strategy(PlacementStrategy::Binpack)),
            fair_share: Some(FairShareMode::MaxMin),
            drf: None,
            time_based: None,
        }
    );

    let [n1] = s.nodes.as_slice() else { panic!("one node expected") };
    assert_eq!(n1.name, "n1");
    assert_eq!(
        n1.allocatable,
        resources(&[("cpu", 32_000), ("memory", 256 << 30), ("nvidia.com/gpu", 8), ("pods", 110)])
    );
    assert_eq!(n1.labels, BTreeMap::from([("drover.dev/node-pool".to_string(), "default".to_string())]));
    assert_eq!(n1.taints, [Taint { key: "dedicated".into(), value: "infer".into(), effect: TaintEffect::NoSchedule }]);
    assert!(!n1.unschedulable);

    let [dept, proj] = s.queues.as_slice() else { panic!("two queues expected") };
    assert_eq!((dept.name.as_str(), dept.parent.as_deref()), ("dept-a", None));
    assert_eq!(dept.deserved, resources(&[("nvidia.com/gpu", 4)]));
    assert_eq!(dept.limit, Some(resources(&[("nvidia.com/gpu", 8)])));
    assert_eq!((dept.over_quota_weight, dept.reclaimable), (1, true));
    assert_eq!(dept.strategy, QueueingStrategy::BestEffortFifo);
    assert_eq!((proj.name.as_str(), proj.parent.as_deref()), ("proj-1", Some("dept-a")));
    assert_eq!(proj.deserved, resources(&[("nvidia.com/gpu", 2)]));
    assert_eq!(proj.limit, None);

    assert_eq!(s.priority_classes, [PriorityClass::new("train", 50, Some(true))]);

    let [j1] = s.jobs.as_slice() else { panic!("one job expected") };
    assert_eq!((j1.name.as_str(), j1.namespace.as_str(), j1.queue.as_str()), ("j1", "default", "proj-1"));
    assert_eq!((j1.priority_class.as_str(), j1.min_member, j1.created_at), ("train", 4, 0));
    assert_eq!(j1.run_time, Some(drover_scheduler::snapshot::RunTime::Declared(3600)));
    let [worker] = j1.tasks.as_slice() else { panic!("one task expected") };
    assert_eq!((worker.name.as_str(), worker.pods.len(), worker.min_available), ("worker", 4, 0));
    assert_eq!(worker.requests, resources(&[("nvidia.com/gpu", 1), ("cpu", 1000)]));
    assert_eq!(worker.constraints, Constraints::default());
    let n1 = || PodPhaseInput::Bound("n1".into());
    assert_eq!(worker.pods, [n1(), n1(), PodPhaseInput::Pending, PodPhaseInput::Pending]);

    let expect = s.expect.expect("the example has expectations");
    assert_eq!(expect.jobs["j1"].running, Some(4));
    assert_eq!((expect.jobs["j1"].pending, expect.jobs["j1"].evicted), (None, None));
    assert_eq!(expect.placements, BTreeMap::from([("j1-worker-0".to_string(), "n1".to_string())]));
    assert_eq!(expect.evicted, Some(vec!["j2-worker-1".to_string()]));
    assert!(expect.queues.is_empty());
}

#[test]
fn defaults_are_applied() {
    let s = ok(r#"
name: defaults
nodes:
  - name: n1
    allocatable: {cpu: "4"}
  - name: n2
    allocatable: {cpu: "4", pods: "20"}
queues:
  - name: q
    parent: ""
jobs:
  - name: j
    queue: q
    tasks:
      - {name: a, replicas: 2}
      - {name: b, replicas: 3}
"#);
    assert_eq!((s.description.as_str(), s.cycles), ("", 1));
    assert_eq!(s.config, ConfigOverrides::default());
    assert_eq!(s.nodes[0].allocatable, resources(&[("cpu", 4000), ("pods", 110)]));
    assert_eq!(s.nodes[1].allocatable, resources(&[("cpu", 4000), ("pods", 20)]));
    assert!(s.nodes[0].labels.is_empty() && s.nodes[0].taints.is_empty() && !s.nodes[0].unschedulable);
    let q = &s.queues[0];
    assert_eq!((q.parent.clone(), q.deserved.clone(), q.limit.clone()), (None, ResourceList::default(), None));
    assert_eq!((q.over_quota_weight, q.reclaimable, q.strategy), (1, true, QueueingStrategy::BestEffortFifo));
    let builtins: Vec<PriorityClass> =
        [("train", 50), ("interactive-preemptible", 75), ("build", 100), ("inference", 125)]
            .iter()
            .map(|(n, v)| PriorityClass::new(n, *v, None))
            .collect();
    assert_eq!(s.priority_classes, builtins);
    let j = &s.jobs[0];
    assert_eq!((j.namespace.as_str(), j.priority_class.as_str()), ("default", "train"));
    assert_eq!((j.min_member, j.created_at, j.run_time), (5, 0, None));
    let a = &j.tasks[0];
    assert!(a.requests.0.is_empty() && a.constraints.node_selector.is_empty());
    assert!(a.pods.iter().all(|p| *p == PodPhaseInput::Pending));
    assert_eq!(a.min_available, 0);
    assert_eq!(s.expect, None);
}

#[test]
fn explicit_values_override_defaults() {
    let s = ok(r#"
name: explicit
cycles: 3
nodes:
  - name: n1
    allocatable: {cpu: 1.5, memory: 1e3, nvidia.com/gpu: 8}
    unschedulable: true
queues:
  - name: q
    overQuotaWeight: 0
    reclaimable: false
    queueingStrategy: StrictFIFO
priorityClasses:
  - {name: high, value: 200}
  - {name: low, value: -5}
  - {name: mid, value: 10, preemptible: false}
jobs:
  - name: j
    namespace: team
    queue: q
    minMember: 2
    createdAt: -7
    tasks:
      - name: t
        replicas: 3
        minAvailable: 1
        nodeSelector: {zone: a}
        tolerations: [{operator: Exists}]
        affinity:
          - {key: gen, operator: Gt, values: ["4"]}
          - {key: zone, operator: Exists}
"#);
    assert_eq!(s.cycles, 3);
    assert_eq!(
        s.nodes[0].allocatable,
        resources(&[("cpu", 1500), ("memory", 1000), ("nvidia.com/gpu", 8), ("pods", 110)])
    );
    assert!(s.nodes[0].unschedulable);
    let q = &s.queues[0];
    assert_eq!((q.over_quota_weight, q.reclaimable, q.strategy), (0, false, QueueingStrategy::StrictFifo));
    assert!(!s.priority_classes[0].preemptible && !s.priority_classes[2].preemptible);
    let j = &s.jobs[0];
    assert_eq!((j.namespace.as_str(), j.priority_class.as_str()), ("team", "low"), "lowest-valued class by default");
    assert_eq!((j.min_member, j.created_at), (2, -7));
    let t = &j.tasks[0];
    assert_eq!(t.min_available, 1);
    assert_eq!(t.constraints.node_selector, BTreeMap::from([("zone".to_string(), "a".to_string())]));
    assert_eq!(t.constraints.tolerations, [Toleration { operator: TolerationOperator::Exists, ..Default::default() }]);
    assert_eq!(
        t.constraints.affinity,
        [
            NodeSelectorRequirement { key: "gen".into(), operator: NodeSelectorOperator::Gt, values: vec!["4".into()] },
            NodeSelectorRequirement { key: "zone".into(), operator: NodeSelectorOperator::Exists, values: vec![] },
        ]
    );
}

#[test]
fn expectations_accept_every_documented_form() {
    let yaml = format!(
        "{}{}",
        edit("jobs:\n", "jobs:\n  - {name: j1, namespace: team, queue: proj-1, tasks: [{name: w, replicas: 1}]}\n"),
        r#"expect:
  jobs:
    default/j1: {running: 2, pending: 0, evicted: 0, phase: Running, reason: ""}
    team/j1: {pending: 1, reason: "does not fit"}
  placements:
    default/j1-worker-1: n2
    team/j1-w-0: n1
  evicted: []
  queues:
    proj-1: {allocated: {cpu: "2"}, fairShare: {cpu: 1.5}, deserved: {}}
"#
    );
    let expect = ok(&yaml).expect.unwrap();
    let default_j1 = &expect.jobs["default/j1"];
    assert_eq!((default_j1.running, default_j1.pending, default_j1.evicted), (Some(2), Some(0), Some(0)));
    assert_eq!((default_j1.phase.as_deref(), default_j1.reason.as_deref()), (Some("Running"), Some("")));
    assert_eq!(expect.jobs["team/j1"].reason.as_deref(), Some("does not fit"));
    assert_eq!(expect.placements["team/j1-w-0"], "n1");
    assert_eq!(expect.evicted, Some(vec![]));
    let q = &expect.queues["proj-1"];
    assert_eq!(q.allocated, Some(resources(&[("cpu", 2000)])));
    assert_eq!(q.fair_share, Some(resources(&[("cpu", 1500)])));
    assert_eq!(q.deserved, Some(ResourceList::default()));
}

#[test]
fn expectation_keys_resolve_to_jobs_and_pods() {
    let s = ok(&edit(
        "jobs:\n",
        "jobs:\n  - {name: j1, namespace: team, queue: proj-1, tasks: [{name: w, replicas: 1}]}\n",
    ));
    assert_eq!(s.find_jobs("j1").len(), 2);
    assert_eq!(s.find_jobs("team/j1")[0].key(), "team/j1");
    assert!(s.find_jobs("other/j1").is_empty());
    let pods = s.find_pods("j1-worker-1");
    assert_eq!(pods.len(), 1);
    assert_eq!((pods[0].key(), pods[0].index), ("default/j1-worker-1".to_string(), 1));
    assert_eq!(s.find_pods("team/j1-w-0")[0].task.name, "w");
    for missing in ["j1-worker-2", "j1-worker-01", "j1-worker-+1", "j1-worker-", "team/j1-worker-0"] {
        assert!(s.find_pods(missing).is_empty(), "{missing}");
    }
}

#[test]
fn pod_names_join_job_task_and_index() {
    assert_eq!(pod_name("j1", "worker", 3), "j1-worker-3");
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let dir = std::env::temp_dir().join(format!("drover-scenario-parse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.yaml");
    std::fs::write(&good, BASE).unwrap();
    assert_eq!(load(&good).unwrap().name, "base");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, edit("name: base\n", "")).unwrap();
    let e = load(&bad).unwrap_err();
    assert_eq!((e.file, e.object, e.field), (bad.display().to_string(), "scenario".to_string(), "name".to_string()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_contract_topology_example_parses() {
    let s = ok(&topology_scenario());
    let level = |name: &str, label: &str| LevelInput { name: name.into(), node_label: label.into() };
    assert_eq!(
        s.topologies,
        [TopologyInput {
            name: "default".into(),
            levels: vec![level("block", "network.drover.dev/block"), level("rack", "network.drover.dev/rack")],
        }]
    );
    let request = |required: &str, preferred: Option<&str>| TopologyRequestInput {
        topology: "default".into(),
        required: Some(required.into()),
        preferred: preferred.map(String::from),
    };
    let j1 = &s.jobs[0];
    assert_eq!(j1.topology, Some(request("rack", Some("node"))));
    let worker = &j1.tasks[0];
    assert_eq!(worker.topology, Some(request("rack", None)));
    assert_eq!(worker.slices, Some(SlicesInput { size: 4, required: "node".into() }));
    assert_eq!(worker.constraints, Constraints::default());
    let snap = snapshot::build_with_topologies(&s.nodes, &s.queues, &s.topologies, &s.jobs).expect("it builds");
    assert_eq!(snap.topologies[0].levels, ["block", "rack", "node"]);
}

#[test]
fn topology_defaults() {
    // A job's block names "default" unless it names another; a task's block and slices use
    // the job's topology, else "default".
    let nvl = "  - {name: nvl, levels: [{name: clique, nodeLabel: nvidia.com/gpu.clique}]}\n";
    let two = topo_edit("jobs:\n", &format!("{nvl}jobs:\n"));
    let yaml = format!(
        "{two}  - {{name: j2, queue: q, topology: {{preferred: rack}}, tasks: [{{name: w, replicas: 1}}]}}\n\
         \x20 - {{name: j3, queue: q, topology: {{name: nvl}}, tasks: [{{name: w, replicas: 2, \
         topology: {{required: clique}}, slices: {{size: 1, required: clique}}}}]}}\n\
         \x20 - {{name: j4, queue: q, tasks: [{{name: w, replicas: 2, topology: {{preferred: block}}, \
         slices: {{size: 2, required: rack}}}}]}}\n"
    );
    let s = ok(&yaml);
    let request = |t: &str, required: Option<&str>, preferred: Option<&str>| {
        Some(TopologyRequestInput {
            topology: t.into(),
            required: required.map(String::from),
            preferred: preferred.map(String::from),
        })
    };
    assert_eq!(s.jobs[1].topology, request("default", None, Some("rack")));
    assert_eq!(s.jobs[2].topology, request("nvl", None, None));
    assert_eq!(s.jobs[2].tasks[0].topology, request("nvl", Some("clique"), None));
    assert_eq!(s.jobs[2].tasks[0].slices, Some(SlicesInput { size: 1, required: "clique".into() }));
    assert_eq!(s.jobs[3].topology, None);
    assert_eq!(s.jobs[3].tasks[0].topology, request("default", None, Some("block")));
    assert_eq!(s.jobs[3].tasks[0].slices, Some(SlicesInput { size: 2, required: "rack".into() }));
    snapshot::build_with_topologies(&s.nodes, &s.queues, &s.topologies, &s.jobs).expect("it builds");
}

#[test]
fn the_nvlink_annotation_sets_the_minimum_and_other_annotations_are_accepted() {
    let s = ok(&with_task(&format!("        annotations: {{{NVLINK}: \"4\", example.com/team: vision}}\n")));
    assert_eq!(s.jobs[0].tasks[0].constraints.min_nvlink_gpus, Some(4));
    let s = ok(&with_task("        annotations: {example.com/team: vision}\n"));
    assert_eq!(s.jobs[0].tasks[0].constraints.min_nvlink_gpus, None);
}

#[test]
fn a_preferred_level_equal_to_or_finer_than_the_required_one_is_accepted() {
    ok(&topo_job("    topology: {required: rack, preferred: rack}\n", ""));
    ok(&topo_job("    topology: {required: block, preferred: node}\n", ""));
}

// ---------------------------------------------------------------------------------------------
// Error reporting.

#[test]
fn errors_display_file_object_field_and_message() {
    let full = ScenarioError {
        file: "f.yaml".into(),
        object: "node n1".into(),
        field: "allocatable.cpu".into(),
        message: "bad".into(),
    };
    assert_eq!(full.to_string(), "f.yaml: node n1: field `allocatable.cpu`: bad");
    let no_object = ScenarioError { object: String::new(), ..full.clone() };
    assert_eq!(no_object.to_string(), "f.yaml: field `allocatable.cpu`: bad");
    let no_field = ScenarioError { field: String::new(), ..full.clone() };
    assert_eq!(no_field.to_string(), "f.yaml: node n1: bad");
    let boxed: Box<dyn std::error::Error> = Box::new(full);
    assert!(boxed.to_string().starts_with("f.yaml"));
}

#[test]
fn errors_give_the_line_and_column_of_the_field() {
    let yaml = edit("        replicas: 2\n", "        replica: 2\n");
    let line = yaml.lines().position(|l| l.contains("replica:")).unwrap() + 1;
    let e = rejected(&yaml);
    assert!(e.message.ends_with(&format!("(line {line}, column 9)")), "{e}");
    let yaml = edit("queue: proj-1", "queue: nope");
    let line = yaml.lines().position(|l| l.contains("queue: nope")).unwrap() + 1;
    assert!(rejected(&yaml).message.ends_with(&format!("(line {line}, column 5)")));
}

#[test]
fn a_missing_field_is_located_at_its_object() {
    let yaml = edit("  - name: n2\n", "  - labels: {}\n");
    let line = yaml.lines().position(|l| l.contains("labels: {}")).unwrap() + 1;
    assert_rejected(&yaml, "nodes[1]", "name", &["is required", &format!("line {line}")]);
}

// ---------------------------------------------------------------------------------------------
// Unknown fields.

#[test]
fn unknown_task_field() {
    assert_rejected(
        &edit("        replicas: 2\n", "        replica: 2\n"),
        TASK,
        "replica",
        &["unknown field `replica`", "`replicas`", "`minAvailable`", "did you mean `replicas`?"],
    );
}

#[test]
fn unknown_top_level_field() {
    assert_rejected(
        &format!("{BASE}nodez: []\n"),
        "scenario",
        "nodez",
        &["unknown field `nodez`", "did you mean `nodes`?"],
    );
}

#[test]
fn unknown_node_field() {
    assert_rejected(
        &edit("  - name: n2\n", "  - name: n2\n    label: {}\n"),
        "node n2",
        "label",
        &["unknown field `label`"],
    );
}

#[test]
fn unknown_queue_field() {
    assert_rejected(
        &edit("    parent: dept\n", "    parent: dept\n    overquotaweight: 2\n"),
        "queue proj-1",
        "overquotaweight",
        &["unknown field", "did you mean `overQuotaWeight`?"],
    );
}

#[test]
fn unknown_job_field() {
    assert_rejected(
        &edit("    queue: proj-1\n", "    queue: proj-1\n    priority: 3\n"),
        "job default/j1",
        "priority",
        &["unknown field `priority`"],
    );
}

#[test]
fn unknown_priority_class_field() {
    assert_rejected(
        &format!("{BASE}priorityClasses: [{{name: p, value: 1, preemptable: true}}]\n"),
        "priority class p",
        "preemptable",
        &["did you mean `preemptible`?"],
    );
}

#[test]
fn unknown_taint_field() {
    assert_rejected(
        &edit("effect: NoSchedule}", "efect: NoSchedule}"),
        "node n1",
        "taints[0].efect",
        &["unknown field `efect`", "`effect`"],
    );
}

#[test]
fn unknown_toleration_field() {
    assert_rejected(
        &with_task("        tolerations: [{key: dedicated, operater: Exists}]\n"),
        TASK,
        "tolerations[0].operater",
        &["unknown field `operater`"],
    );
}

#[test]
fn unknown_expect_field() {
    assert_rejected(&with_expect("  placement: {}\n"), "expect", "placement", &["did you mean `placements`?"]);
    assert_rejected(
        &with_expect("  jobs: {j1: {runing: 1}}\n"),
        "expect",
        "jobs.j1.runing",
        &["did you mean `running`?"],
    );
    assert_rejected(
        &with_expect("  queues: {proj-1: {fairshare: {}}}\n"),
        "expect",
        "queues.proj-1.fairshare",
        &["`fairShare`"],
    );
}

#[test]
fn unknown_config_field() {
    assert_rejected(
        &format!("{BASE}config: {{placment: spread}}\n"),
        "scenario",
        "config.placment",
        &["unknown field `placment`"],
    );
    assert_rejected(&format!("{BASE}config: {{placement: sideways}}\n"), "scenario", "config", &[]);
}

#[test]
fn unknown_enum_values() {
    assert_rejected(
        &edit("    parent: dept\n", "    parent: dept\n    queueingStrategy: FIFO\n"),
        "queue proj-1",
        "queueingStrategy",
        &["StrictFIFO"],
    );
    assert_rejected(&edit("effect: NoSchedule", "effect: NoWay"), "node n1", "taints[0]", &["unknown variant `NoWay`"]);
}

#[test]
fn unknown_topology_fields() {
    assert_rejected(
        &topo_edit("nodeLabel: network.drover.dev/block", "nodelabel: network.drover.dev/block"),
        "topology default",
        "levels[0].nodelabel",
        &["unknown field `nodelabel`", "did you mean `nodeLabel`?"],
    );
    assert_rejected(
        &topo_edit("  - name: default ", "  - nam: default\n    name: default "),
        "topology default",
        "nam",
        &["did you mean `name`?"],
    );
    assert_rejected(
        &topo_job("    topology: {requird: rack}\n", ""),
        "job default/j2",
        "topology.requird",
        &["unknown field `requird`", "did you mean `required`?"],
    );
    // A task's sub-group uses its job's topology: it names none of its own.
    assert_rejected(
        &topo_job("", "topology: {name: default, required: rack}"),
        "job default/j2 task w",
        "topology.name",
        &["unknown field `name`", "`required`, `preferred`"],
    );
    assert_rejected(
        &topo_job("", "slices: {sise: 2, required: node}"),
        "job default/j2 task w",
        "slices.sise",
        &["did you mean `size`?"],
    );
    assert_rejected(
        &topo_job("", "annotation: {}"),
        "job default/j2 task w",
        "annotation",
        &["did you mean `annotations`?"],
    );
}

// ---------------------------------------------------------------------------------------------
// Topologies.

#[test]
fn a_job_naming_a_missing_topology() {
    assert_rejected(
        &topo_job("    topology: {name: nvl, required: rack}\n", ""),
        "job default/j2",
        "topology.name",
        &["names topology \"nvl\", which the scenario does not define; topologies: default"],
    );
    let e =
        rejected(&with_task("").replace("    queue: proj-1\n", "    queue: proj-1\n    topology: {required: rack}\n"));
    assert_eq!((e.object.as_str(), e.field.as_str()), ("job default/j1", "topology"), "{e}");
    assert!(e.message.contains("names no topology, so it uses topology \"default\", which the scenario does not define; topologies: (none)"), "{e}");
}

#[test]
fn a_task_or_slices_without_a_topology_to_use() {
    assert_rejected(
        &with_task("        topology: {required: node}\n"),
        TASK,
        "topology",
        &["its job names no topology, so it uses topology \"default\", which the scenario does not define"],
    );
    assert_rejected(
        &with_task("        slices: {size: 2, required: node}\n"),
        TASK,
        "slices",
        &["topology \"default\", which the scenario does not define"],
    );
}

#[test]
fn a_level_its_topology_does_not_have() {
    let levels = "levels: block, rack, node";
    assert_rejected(
        &topo_job("    topology: {required: rak}\n", ""),
        "job default/j2",
        "topology.required",
        &["names no level \"rak\" of topology default", levels],
    );
    assert_rejected(
        &topo_job("    topology: {preferred: host}\n", ""),
        "job default/j2",
        "topology.preferred",
        &["names no level \"host\"", levels],
    );
    assert_rejected(
        &topo_job("", "topology: {required: zone}"),
        "job default/j2 task w",
        "topology.required",
        &["names no level \"zone\"", levels],
    );
    assert_rejected(
        &topo_job("", "slices: {size: 2, required: gpu}"),
        "job default/j2 task w",
        "slices.required",
        &["names no level \"gpu\"", levels],
    );
}

#[test]
fn a_preferred_level_coarser_than_the_required_one() {
    assert_rejected(
        &topo_job("    topology: {required: rack, preferred: block}\n", ""),
        "job default/j2",
        "topology.preferred",
        &["level block is coarser than the required level rack"],
    );
    assert_rejected(
        &topo_job("", "topology: {required: node, preferred: rack}"),
        "job default/j2 task w",
        "topology.preferred",
        &["coarser"],
    );
}

#[test]
fn bad_topology_levels() {
    assert_rejected(
        &topo_edit("{name: rack,  nodeLabel", "{name: node,  nodeLabel"),
        "topology default",
        "levels[1].name",
        &["`node` is the implicit finest level"],
    );
    assert_rejected(
        &topo_edit("{name: rack,  nodeLabel", "{name: block,  nodeLabel"),
        "topology default",
        "levels[1].name",
        &["duplicate level: levels[0] is also block"],
    );
    assert_rejected(
        &topo_edit("nodeLabel: network.drover.dev/rack", "nodeLabel: \"\""),
        "topology default",
        "levels[1].nodeLabel",
        &["must not be empty"],
    );
    assert_rejected(
        &topo_edit("    levels:\n", "    level:\n"),
        "topology default",
        "level",
        &["did you mean `levels`?"],
    );
}

#[test]
fn a_topology_defined_twice() {
    let twice = topo_edit("jobs:\n", "  - {name: default, levels: []}\njobs:\n");
    let line = twice.lines().position(|l| l.contains("levels: []")).unwrap() + 1;
    assert_rejected(
        &twice,
        "topology default",
        "name",
        &["duplicate topology: topologies[0] is also default", &format!("(line {line}, column 6)")],
    );
}

#[test]
fn slices_of_size_zero() {
    let yaml = topo_edit("slices: {size: 4,", "slices: {size: 0,");
    let line = yaml.lines().position(|l| l.contains("size: 0")).unwrap() + 1;
    assert_rejected(
        &yaml,
        "job default/j1 task worker",
        "slices.size",
        &["must be at least 1", &format!("line {line}")],
    );
    assert_rejected(
        &topo_edit("slices: {size: 4,", "slices: {size: -4,"),
        "job default/j1 task worker",
        "slices.size",
        &["must not be negative"],
    );
}

#[test]
fn bad_nvlink_minimum() {
    let field = format!("annotations.{NVLINK}");
    for bad in ["\"0\"", "\"four\"", "\"-2\""] {
        let yaml = with_task(&format!("        annotations: {{{NVLINK}: {bad}}}\n"));
        let line = yaml.lines().position(|l| l.contains("annotations")).unwrap() + 1;
        assert_rejected(
            &yaml,
            TASK,
            &field,
            &["is not a positive number of GPUs", &format!("(line {line}, column 23)")],
        );
    }
    assert_rejected(
        &with_task(&format!("        annotations: {{{NVLINK}: 4}}\n")),
        TASK,
        &field,
        &["expected a string, found number 4"],
    );
}

// ---------------------------------------------------------------------------------------------
// Quantities.

#[test]
fn unparseable_quantity() {
    assert_rejected(
        &edit("requests: {cpu: \"1\"}", "requests: {cpu: lots}"),
        TASK,
        "requests.cpu",
        &["\"lots\" is not a Kubernetes quantity"],
    );
    assert_rejected(
        &edit("requests: {cpu: \"1\"}", "requests: {cpu: [1]}"),
        TASK,
        "requests.cpu",
        &["expected a quantity", "a list"],
    );
    assert_rejected(&edit("requests: {cpu: \"1\"}", "requests: [cpu]"), TASK, "requests", &["expected a mapping"]);
}

#[test]
fn negative_quantity() {
    assert_rejected(
        &edit("memory: 32Gi, nvidia", "memory: -1Gi, nvidia"),
        "node n1",
        "allocatable.memory",
        &["negative"],
    );
    assert_rejected(
        &edit("requests: {cpu: \"1\"}", "requests: {cpu: -2}"),
        TASK,
        "requests.cpu",
        &["\"-2\" is negative"],
    );
}

#[test]
fn fractional_gpu() {
    assert_rejected(
        &edit("requests: {cpu: \"1\"}", "requests: {nvidia.com/gpu: 0.5}"),
        TASK,
        "requests.nvidia.com/gpu",
        &["whole units"],
    );
}

// ---------------------------------------------------------------------------------------------
// Queues.

#[test]
fn job_in_a_missing_queue() {
    assert_rejected(
        &edit("queue: proj-1", "queue: proj-9"),
        "job default/j1",
        "queue",
        &["names no queue \"proj-9\"", "dept, proj-1"],
    );
}

#[test]
fn queue_with_a_missing_parent() {
    assert_rejected(&edit("parent: dept", "parent: dpt"), "queue proj-1", "parent", &["names no queue \"dpt\""]);
}

#[test]
fn queue_cycle() {
    let yaml = edit("  - name: dept\n", "  - name: dept\n    parent: proj-1\n");
    assert_rejected(&yaml, "queue dept", "parent", &["cycle", "dept -> proj-1 -> dept"]);
    let own = edit("parent: dept", "parent: proj-1");
    assert_rejected(&own, "queue proj-1", "parent", &["proj-1 -> proj-1"]);
}

#[test]
fn job_in_a_queue_with_children() {
    assert_rejected(
        &edit("queue: proj-1", "queue: dept"),
        "job default/j1",
        "queue",
        &["child queues (proj-1)", "leaf"],
    );
}

// ---------------------------------------------------------------------------------------------
// Counts.

#[test]
fn bad_replica_counts() {
    assert_rejected(&edit("replicas: 2", "replicas: -1"), TASK, "replicas", &["must not be negative, found -1"]);
    assert_rejected(
        &edit("replicas: 2", "replicas: 1.5"),
        TASK,
        "replicas",
        &["expected a whole number, found number 1.5"],
    );
    assert_rejected(
        &edit("replicas: 2", "replicas: \"x\""),
        TASK,
        "replicas",
        &["expected a whole number, found string \"x\""],
    );
    assert_rejected(&edit("replicas: 2", "replicas: 5000000000"), TASK, "replicas", &["out of range"]);
}

#[test]
fn bad_min_member() {
    assert_rejected(
        &edit("queue: proj-1", "queue: proj-1\n    minMember: -1"),
        "job default/j1",
        "minMember",
        &["negative"],
    );
    assert_rejected(
        &edit("queue: proj-1", "queue: proj-1\n    minMember: 3"),
        "job default/j1",
        "minMember",
        &["more than the job's 2 replicas"],
    );
    assert_rejected(
        &edit("queue: proj-1", "queue: proj-1\n    minMember: 0"),
        "job default/j1",
        "minMember",
        &["at least 1"],
    );
}

#[test]
fn min_member_zero_is_allowed_for_a_job_without_pods() {
    let s = ok(&edit("replicas: 2", "replicas: 0").replace("queue: proj-1", "queue: proj-1\n    minMember: 0"));
    assert_eq!(s.jobs[0].min_member, 0);
}

#[test]
fn bad_min_available() {
    assert_rejected(&with_task("        minAvailable: 1.5\n"), TASK, "minAvailable", &["whole number"]);
    assert_rejected(
        &with_task("        minAvailable: 3\n"),
        TASK,
        "minAvailable",
        &["more than the task's 2 replicas"],
    );
}

#[test]
fn bad_cycles() {
    assert_rejected(&format!("{BASE}cycles: 0\n"), "scenario", "cycles", &["at least 1"]);
    assert_rejected(&format!("{BASE}cycles: -2\n"), "scenario", "cycles", &["negative"]);
    assert_rejected(&format!("{BASE}cycles: many\n"), "scenario", "cycles", &["whole number"]);
}

#[test]
fn bad_over_quota_weight() {
    let yaml = edit("parent: dept", "parent: dept\n    overQuotaWeight: -3");
    assert_rejected(&yaml, "queue proj-1", "overQuotaWeight", &["must not be negative, found -3"]);
    let yaml = edit("parent: dept", "parent: dept\n    overQuotaWeight: 0.5");
    assert_rejected(&yaml, "queue proj-1", "overQuotaWeight", &["whole number"]);
}

#[test]
fn a_job_without_tasks() {
    assert_rejected(
        &format!("{BASE}  - {{name: j2, queue: proj-1, tasks: []}}\n"),
        "job default/j2",
        "tasks",
        &["at least one task"],
    );
}

// ---------------------------------------------------------------------------------------------
// Running pods.

#[test]
fn running_on_a_missing_node() {
    assert_rejected(&with_task("        running: [n1, n3]\n"), TASK, "running[1]", &["names no node \"n3\"", "n1, n2"]);
}

#[test]
fn more_running_pods_than_replicas() {
    assert_rejected(&with_task("        running: [n1, n1, n2]\n"), TASK, "running", &["3 running pods", "2 replicas"]);
}

// ---------------------------------------------------------------------------------------------
// Required fields.

#[test]
fn missing_required_fields() {
    assert_rejected(&edit("name: base\n", ""), "scenario", "name", &["is required"]);
    assert_rejected(&edit("  - name: n2\n", "  - labels: {}\n"), "nodes[1]", "name", &["is required"]);
    assert_rejected(
        &edit("    allocatable: {cpu: \"8\", memory: 32Gi}\n", ""),
        "node n2",
        "allocatable",
        &["is required"],
    );
    assert_rejected(&edit("  - name: dept\n", "  - deserved: {}\n"), "queues[0]", "name", &["is required"]);
    assert_rejected(&edit("  - name: j1\n", "  - namespace: x\n"), "jobs[0]", "name", &["is required"]);
    assert_rejected(&edit("    queue: proj-1\n", ""), "job default/j1", "queue", &["is required"]);
    let no_tasks = format!("{BASE}  - {{name: j2, queue: proj-1}}\n");
    assert_rejected(&no_tasks, "job default/j2", "tasks", &["is required"]);
    assert_rejected(
        &edit("      - name: worker\n        replicas: 2\n", "      - replicas: 2\n"),
        "job default/j1 tasks[0]",
        "name",
        &["is required"],
    );
    assert_rejected(&edit("        replicas: 2\n", ""), TASK, "replicas", &["is required"]);
    assert_rejected(&format!("{BASE}priorityClasses: [{{name: p}}]\n"), "priority class p", "value", &["is required"]);
    assert_rejected(&edit("name: base", "name: ~"), "scenario", "name", &["is required"]);
}

#[test]
fn names_must_be_non_empty_strings_without_slashes() {
    assert_rejected(
        &edit("  - name: n2\n", "  - name: 7\n"),
        "nodes[1]",
        "name",
        &["expected a string, found number 7"],
    );
    assert_rejected(&edit("  - name: n2\n", "  - name: \"\"\n"), "nodes[1]", "name", &["must not be empty"]);
    assert_rejected(&edit("  - name: j1\n", "  - name: a/b\n"), "job default/a/b", "name", &["must not contain `/`"]);
}

// ---------------------------------------------------------------------------------------------
// Duplicates.

#[test]
fn duplicate_nodes() {
    assert_rejected(&edit("  - name: n2\n", "  - name: n1\n"), "node n1", "name", &["duplicate node", "nodes[0]"]);
}

#[test]
fn duplicate_queues() {
    assert_rejected(
        &edit("  - name: proj-1\n    parent: dept\n", "  - name: dept\n"),
        "queue dept",
        "name",
        &["duplicate queue"],
    );
}

#[test]
fn duplicate_jobs_in_one_namespace() {
    let same = format!("{BASE}  - {{name: j1, queue: proj-1, tasks: [{{name: w, replicas: 1}}]}}\n");
    assert_rejected(&same, "job default/j1", "name", &["duplicate job", "jobs[0]"]);
    let other_namespace =
        format!("{BASE}  - {{name: j1, namespace: b, queue: proj-1, tasks: [{{name: w, replicas: 1}}]}}\n");
    assert_eq!(ok(&other_namespace).jobs.len(), 2);
}

#[test]
fn duplicate_tasks() {
    assert_rejected(
        &with_task("      - {name: worker, replicas: 1}\n"),
        "job default/j1",
        "tasks[1].name",
        &["duplicate task"],
    );
}

#[test]
fn duplicate_priority_classes() {
    let yaml = format!("{BASE}priorityClasses: [{{name: p, value: 1}}, {{name: p, value: 2}}]\n");
    assert_rejected(&yaml, "priority class p", "name", &["duplicate priority class"]);
}

#[test]
fn duplicate_yaml_keys() {
    let e = rejected(&edit("        replicas: 2\n", "        replicas: 2\n        replicas: 3\n"));
    assert!(e.object.is_empty() && e.message.contains("duplicate"), "{e}");
}

#[test]
fn colliding_pod_names() {
    // Job j1-worker task x and job j1 task worker-x would both have a pod j1-worker-x-0.
    let clash = format!("{BASE}  - {{name: j1-worker, queue: proj-1, tasks: [{{name: x, replicas: 1}}]}}\n")
        .replace("      - name: worker\n", "      - name: worker-x\n");
    assert_rejected(
        &clash,
        "job default/j1-worker task x",
        "name",
        &["j1-worker-x-<index>", "job default/j1 task worker-x"],
    );
    let other_namespace = clash.replace("{name: j1-worker, queue", "{name: j1-worker, namespace: b, queue");
    assert_eq!(ok(&other_namespace).jobs.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Priority classes.

#[test]
fn unknown_priority_class() {
    assert_rejected(
        &edit("queue: proj-1", "queue: proj-1\n    priorityClass: urgent"),
        "job default/j1",
        "priorityClass",
        &["names no priority class \"urgent\"", "train"],
    );
}

#[test]
fn an_empty_priority_class_list() {
    assert_rejected(&format!("{BASE}priorityClasses: []\n"), "scenario", "priorityClasses", &["at least one class"]);
}

// ---------------------------------------------------------------------------------------------
// Node affinity.

#[test]
fn invalid_node_affinity() {
    assert_rejected(
        &with_task("        affinity: [{key: zone, operator: In}]\n"),
        TASK,
        "affinity[0]",
        &["In needs at least one value"],
    );
    assert_rejected(
        &with_task("        affinity: [{key: gen, operator: Gt, values: [x]}]\n"),
        TASK,
        "affinity[0]",
        &["integer"],
    );
    assert_rejected(
        &with_task("        affinity: [{key: gen, operator: Near, values: [x]}]\n"),
        TASK,
        "affinity[0]",
        &["unknown variant `Near`"],
    );
    assert_rejected(
        &with_task("        affinity: [{key: gen, operator: In, value: [x]}]\n"),
        TASK,
        "affinity[0].value",
        &["unknown field `value`"],
    );
}

// ---------------------------------------------------------------------------------------------
// Expectations.

#[test]
fn expectation_for_a_missing_job() {
    assert_rejected(&with_expect("  jobs: {j9: {running: 1}}\n"), "expect", "jobs.j9", &["names no job", "default/j1"]);
    assert_rejected(&with_expect("  jobs: {team/j1: {running: 1}}\n"), "expect", "jobs.team/j1", &["names no job"]);
}

#[test]
fn ambiguous_expectation_for_a_job() {
    let yaml = format!(
        "{}expect:\n  jobs: {{j1: {{running: 1}}}}\n",
        edit("jobs:\n", "jobs:\n  - {name: j1, namespace: team, queue: proj-1, tasks: [{name: w, replicas: 1}]}\n")
    );
    assert_rejected(&yaml, "expect", "jobs.j1", &["ambiguous", "default/j1", "team/j1"]);
}

#[test]
fn two_expectations_for_one_job() {
    let yaml = with_expect("  jobs: {j1: {running: 1}, default/j1: {pending: 1}}\n");
    assert_rejected(&yaml, "expect", "jobs.default/j1", &["default/j1", "`j1` already names"]);
}

#[test]
fn expectation_for_a_missing_queue() {
    assert_rejected(
        &with_expect("  queues: {proj-2: {allocated: {}}}\n"),
        "expect",
        "queues.proj-2",
        &["names no queue", "proj-1"],
    );
}

#[test]
fn placement_of_a_missing_pod_or_on_a_missing_node() {
    assert_rejected(
        &with_expect("  placements: {j1-worker-2: n1}\n"),
        "expect",
        "placements.j1-worker-2",
        &["names no pod"],
    );
    assert_rejected(
        &with_expect("  placements: {j2-worker-0: n1}\n"),
        "expect",
        "placements.j2-worker-0",
        &["names no pod"],
    );
    assert_rejected(
        &with_expect("  placements: {j1-worker-1: n7}\n"),
        "expect",
        "placements.j1-worker-1",
        &["names no node \"n7\""],
    );
    let both = with_expect("  placements: {j1-worker-1: n1, default/j1-worker-1: n2}\n");
    assert_rejected(&both, "expect", "placements.default/j1-worker-1", &["already names"]);
}

#[test]
fn evicted_pods_of_the_scenario_must_exist() {
    assert_rejected(&with_expect("  evicted: [j1-worker-0, j1-worker-5]\n"), "expect", "evicted[1]", &["names no pod"]);
    assert_rejected(&with_expect("  evicted: [j1-wroker-0]\n"), "expect", "evicted[0]", &["names no pod"]);
    assert_rejected(
        &with_expect("  evicted: [j1-worker-0, default/j1-worker-0]\n"),
        "expect",
        "evicted[1]",
        &["already names"],
    );
    assert_rejected(&with_expect("  evicted: [3]\n"), "expect", "evicted[0]", &["expected a string"]);
}

// ---------------------------------------------------------------------------------------------
// Whole files.

#[test]
fn a_file_that_cannot_be_read() {
    let e = load(std::path::Path::new("/nonexistent/drover/scenario.yaml")).unwrap_err();
    assert_eq!((e.file.as_str(), e.object.as_str(), e.field.as_str()), ("/nonexistent/drover/scenario.yaml", "", ""));
    assert!(e.message.contains("cannot read"), "{e}");
}

#[test]
fn text_that_is_not_yaml() {
    let e = rejected("name: [unclosed\nnodes: {");
    assert_eq!((e.object.as_str(), e.field.as_str()), ("", ""));
    assert!(e.message.contains("line"), "{e}");
}

#[test]
fn an_empty_file() {
    for text in ["", "   \n", "# only a comment\n", "~\n"] {
        let e = rejected(text);
        assert!(e.message.contains("empty"), "{e}");
    }
}

#[test]
fn a_document_that_is_not_a_mapping() {
    assert_rejected("- name: x\n", "scenario", "", &["expected a mapping, found a list"]);
    assert_rejected("just text\n", "scenario", "", &["found string"]);
}

#[test]
fn non_string_field_names() {
    assert_rejected(&format!("{BASE}1: x\n"), "scenario", "", &["field names must be strings"]);
}

// ---------------------------------------------------------------------------------------------
// Robustness: random input and random mutations of a valid scenario never panic.

/// One random change to a YAML tree, applied to the node at a random preorder position.
#[derive(Debug, Clone)]
enum Mutation {
    Replace(Value),
    RenameKey(String),
    Remove,
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "name",
            "replicas",
            "minMember",
            "minAvailable",
            "queue",
            "parent",
            "running",
            "requests",
            "tasks",
            "jobs",
            "nodes",
            "queues",
            "expect",
            "placements",
            "evicted",
            "priorityClass",
            "priorityClasses",
            "config",
            "allocatable",
            "cycles",
            "namespace",
            "affinity",
            "tolerations",
            "taints",
            "topologies",
            "topology",
            "levels",
            "nodeLabel",
            "required",
            "preferred",
            "slices",
            "size",
            "annotations",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z/.-]{0,10}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (-3i64..5).prop_map(Value::from),
        prop::sample::select(vec![
            "n1",
            "j1",
            "proj-1",
            "dept-a",
            "train",
            "j1-worker-0",
            "default/j1",
            "",
            "-1",
            "0.5",
            "1e30",
            "lots",
            "4Gi",
            "In",
            "Gt",
            "StrictFIFO",
            "x/y",
        ])
        .prop_map(|s| Value::String(s.to_string())),
        "\\PC{0,12}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Sequence),
            prop::collection::vec((field_name(), inner), 0..4)
                .prop_map(|entries| Value::Mapping(entries.into_iter().map(|(k, v)| (Value::String(k), v)).collect())),
        ]
    })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => value().prop_map(Mutation::Replace),
        2 => field_name().prop_map(Mutation::RenameKey),
        1 => Just(Mutation::Remove),
    ]
}

/// Applies `m` to the node at preorder position `target`; true once applied.
fn apply(v: &mut Value, target: &mut usize, m: &Mutation) -> bool {
    if *target == 0 {
        if let Mutation::Replace(new) = m {
            *v = new.clone();
        }
        return true;
    }
    *target -= 1;
    match v {
        Value::Mapping(map) => {
            let keys: Vec<Value> = map.keys().cloned().collect();
            for key in keys {
                if *target == 0 {
                    match m {
                        Mutation::RenameKey(name) => {
                            let child = map.remove(&key).unwrap();
                            map.insert(Value::String(name.clone()), child);
                            return true;
                        }
                        Mutation::Remove => {
                            map.remove(&key);
                            return true;
                        }
                        Mutation::Replace(_) => {}
                    }
                }
                if apply(map.get_mut(&key).unwrap(), target, m) {
                    return true;
                }
            }
        }
        Value::Sequence(seq) => {
            for i in 0..seq.len() {
                if *target == 0 && matches!(m, Mutation::Remove) {
                    seq.remove(i);
                    return true;
                }
                if apply(&mut seq[i], target, m) {
                    return true;
                }
            }
        }
        _ => {}
    }
    false
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Mapping(map) => map.values().map(count).sum(),
        Value::Sequence(seq) => seq.iter().map(count).sum(),
        _ => 0,
    }
}

/// Parses and checks what every outcome must satisfy.
fn parse_checked(text: &str) {
    match parse(text, "fuzz.yaml") {
        Ok(s) => {
            assert!(s.cycles >= 1 && !s.name.is_empty());
            let built = snapshot::build_with_topologies(&s.nodes, &s.queues, &s.topologies, &s.jobs);
            assert!(built.is_ok(), "a valid scenario must build: {:?}", built.err());
            for job in &s.jobs {
                let total: usize = job.tasks.iter().map(|t| t.pods.len()).sum();
                assert!(!job.tasks.is_empty() && job.min_member as usize <= total);
            }
        }
        Err(e) => {
            assert_eq!(e.file, "fuzz.yaml");
            assert!(!e.message.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        parse_checked(&text);
    }

    #[test]
    fn edited_text_never_panics(position in any::<prop::sample::Index>(), insert in "[ :\\-\\[\\]{},#&*!|>'\"a-z0-9\n]{0,6}", cut in 0usize..8) {
        let start = position.index(CONTRACT_EXAMPLE.len());
        let end = (start + cut).min(CONTRACT_EXAMPLE.len());
        let text = format!("{}{insert}{}", &CONTRACT_EXAMPLE[..start], &CONTRACT_EXAMPLE[end..]);
        parse_checked(&text);
    }

    #[test]
    fn mutated_scenarios_never_panic(
        base in prop::sample::select(vec![CONTRACT_EXAMPLE.to_string(), BASE.to_string(), topology_scenario()]),
        edits in prop::collection::vec((any::<prop::sample::Index>(), mutation()), 1..4),
    ) {
        let mut doc: Value = serde_yaml::from_str(&base).unwrap();
        for (position, m) in &edits {
            let mut target = position.index(count(&doc));
            apply(&mut doc, &mut target, m);
        }
        parse_checked(&serde_yaml::to_string(&doc).unwrap());
    }
}
