//! Small clusters for the unit tests: one with a topology for the indexes that follow the
//! session's changes, and the parts to build others from.

use std::collections::BTreeMap;

use drover_api::{ResourceList, CPU, GPU, PODS};

use crate::snapshot::{
    self, Constraints, JobInput, JobPhase, LevelInput, NodeInput, PodPhaseInput, QueueBounds, QueueInput,
    QueueingStrategy, Snapshot, TaskInput, TopologyInput,
};

fn resources(gpu: i64, cpu: i64) -> ResourceList {
    ResourceList(BTreeMap::from([(GPU.to_string(), gpu), (CPU.to_string(), cpu), (PODS.to_string(), 110)]))
}

/// A node without taints.
pub fn node(name: &str, allocatable: ResourceList, labels: BTreeMap<String, String>) -> NodeInput {
    NodeInput { name: name.into(), allocatable, labels, taints: Vec::new(), unschedulable: false }
}

/// A reclaimable best-effort queue with over-quota weight 1.
pub fn queue(name: &str, parent: Option<&str>, deserved: ResourceList) -> QueueInput {
    QueueInput {
        name: name.into(),
        parent: parent.map(Into::into),
        deserved,
        limit: None,
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    }
}

/// A preemptible running job in namespace `ns` with one task `w` of these pods, gang
/// minimum 1.
pub fn job(name: &str, queue: &str, requests: ResourceList, pods: Vec<PodPhaseInput>) -> JobInput {
    JobInput {
        name: name.into(),
        namespace: "ns".into(),
        queue: queue.into(),
        priority_class: "train".into(),
        priority: 0,
        preemptible: true,
        min_member: 1,
        min_resources: None,
        created_at: 0,
        phase: JobPhase::Running,
        tasks: vec![TaskInput {
            name: "w".into(),
            min_available: 0,
            requests,
            constraints: Constraints::default(),
            pods,
            topology: None,
            slices: None,
        }],
        run_time: None,
        ends_at: None,
        preempted_at: None,
        started_at: None,
        topology: None,
        resize: None,
    }
}

/// Six 8-GPU nodes in two blocks of racks (one node without labels); a job of 12 two-GPU
/// pods, the first 8 bound two per node.
pub fn cluster() -> Snapshot {
    let place = [("b1", "r1"), ("b1", "r1"), ("b1", "r2"), ("b2", "r3"), ("b2", "r3"), ("", "")];
    let nodes: Vec<NodeInput> = place
        .iter()
        .enumerate()
        .map(|(i, (block, rack))| {
            let labels = match block.is_empty() {
                true => BTreeMap::new(),
                false => BTreeMap::from([("block".into(), block.to_string()), ("rack".into(), rack.to_string())]),
            };
            node(&format!("n{i}"), resources(8, 64_000), labels)
        })
        .collect();
    let mut pods: Vec<PodPhaseInput> = (0..8).map(|i| PodPhaseInput::Bound(format!("n{}", i / 2))).collect();
    pods.resize(12, PodPhaseInput::Pending);
    let topology = TopologyInput {
        name: "default".into(),
        levels: vec![
            LevelInput { name: "block".into(), node_label: "block".into() },
            LevelInput { name: "rack".into(), node_label: "rack".into() },
        ],
    };
    let team = queue("team", None, ResourceList::default());
    let job = job("j", "team", resources(2, 4_000), pods);
    snapshot::build_with_topologies(&nodes, &[team], &[topology], &[job]).expect("a valid cluster")
}
