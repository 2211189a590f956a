//! The cluster a replay runs on ([`Cluster`]: identical nodes, the queues users are hashed
//! into, what jobs declare) and its nodes and queues as the scheduler's inputs.

use std::collections::BTreeMap;

use drover_api::{ResourceList, CPU, GPU, MEMORY, PODS};
use drover_scheduler::snapshot::{NodeInput, QueueBounds, QueueInput};

use drover_scheduler::config::SchedulerConfig;

use super::policy::Policy;
use super::racks::Racks;

/// Memory per node: plenty, so that memory never decides (the traces do not record it).
const MEMORY_PER_CPU: i64 = 8 << 30;

/// The simulated cluster and how jobs map to queues.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Identical nodes.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// CPUs per node.
    pub cpus_per_node: u32,
    /// Queues; users (or, without users, job ids) are hashed into them.
    pub queues: u32,
    /// What each queue deserves.
    pub quota: QueueQuota,
    /// Seconds between scheduling cycles.
    pub period: i64,
    /// The configuration the `drover` policy runs (`config/scheduler.yaml` unless the user
    /// gives another); the baselines derive theirs from it.
    pub config: SchedulerConfig,
    /// Racks the nodes are grouped into (`--nodes-per-rack`), if any.
    pub racks: Option<Racks>,
    /// Whether jobs tell the scheduler their run time (`--declared-runtimes`).
    pub declared_runtimes: DeclaredRuntimes,
}

/// What jobs tell the scheduler of their run time, as the `activeDeadlineSeconds` of their
/// pods would in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeclaredRuntimes {
    /// The trace's `duration_s`, exactly (the policies that declare at all: Drover's).
    #[default]
    Exact,
    /// Nothing: no policy but the `sjf` oracle knows a duration before the job ends.
    None,
}

impl Cluster {
    /// `nodes` identical nodes with the defaults of `drover sim --trace`: one queue, a 10 s
    /// period, the default configuration, no racks.
    pub fn uniform(nodes: u32, gpus_per_node: u32, cpus_per_node: u32) -> Cluster {
        Cluster {
            nodes,
            gpus_per_node,
            cpus_per_node,
            queues: 1,
            quota: QueueQuota::default(),
            period: 10,
            config: SchedulerConfig::default(),
            racks: None,
            declared_runtimes: DeclaredRuntimes::default(),
        }
    }
}

/// What the trace's queues deserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueQuota {
    /// Each an equal part of the cluster.
    #[default]
    Equal,
    /// Nothing: the whole cluster is shared by over-quota weight (1 each).
    None,
}

/// The queue of a user or job id: FNV-1a of the key, modulo the number of queues.
pub fn queue_name(cluster: &Cluster, key: &str) -> String {
    if cluster.queues <= 1 {
        return "trace".into();
    }
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("q{}", hash % u64::from(cluster.queues))
}

/// The cluster's identical nodes, with the rack labels of its racks when the scheduler is
/// told of them.
pub fn node_inputs(cluster: &Cluster) -> Vec<NodeInput> {
    let cpus = i64::from(cluster.cpus_per_node);
    (0..cluster.nodes)
        .map(|i| NodeInput {
            name: format!("node-{i:04}"),
            allocatable: ResourceList(BTreeMap::from([
                (CPU.to_string(), cpus * 1000),
                (MEMORY.to_string(), cpus * MEMORY_PER_CPU),
                (GPU.to_string(), i64::from(cluster.gpus_per_node)),
                (PODS.to_string(), 110),
            ])),
            labels: cluster.racks.filter(|r| r.aware).map(|r| r.labels(i as usize)).unwrap_or_default(),
            taints: Vec::new(),
            unschedulable: false,
        })
        .collect()
}

/// One queue deserving the whole cluster, or `queues` queues deserving equal parts of it
/// (or nothing, as `cluster.quota` says).
pub fn queue_inputs(cluster: &Cluster, policy: Policy) -> Vec<QueueInput> {
    let n = i64::from(cluster.queues.max(1));
    let gpus = i64::from(cluster.nodes * cluster.gpus_per_node);
    let cpus = i64::from(cluster.nodes * cluster.cpus_per_node) * 1000;
    let deserved = match cluster.quota {
        QueueQuota::Equal => ResourceList(BTreeMap::from([(GPU.to_string(), gpus / n), (CPU.to_string(), cpus / n)])),
        QueueQuota::None => ResourceList::default(),
    };
    let names: Vec<String> = if n == 1 { vec!["trace".into()] } else { (0..n).map(|q| format!("q{q}")).collect() };
    names
        .into_iter()
        .map(|name| QueueInput {
            name,
            parent: None,
            deserved: deserved.clone(),
            limit: None,
            over_quota_weight: 1,
            reclaimable: true,
            strategy: policy.strategy(),
            bounds: QueueBounds::default(),
            owner: None,
        })
        .collect()
}
