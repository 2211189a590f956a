//! The name-based inputs a snapshot is built from (by the simulator's scenarios and traces and
//! by the Kubernetes conversion), and why a build refuses them.

use std::collections::BTreeMap;

use drover_api::{ResourceList, Taint};

use super::{Constraints, JobPhase, QueueBounds, QueueingStrategy, RunTime, SlicesInput, TopologyRequestInput};

/// A job as handed to the builder.
#[derive(Debug, Clone)]
pub struct JobInput {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Leaf queue name.
    pub queue: String,
    /// Priority class name, resolved by the caller.
    pub priority_class: String,
    /// Priority value.
    pub priority: i32,
    /// Preemptible.
    pub preemptible: bool,
    /// Gang minimum.
    pub min_member: u32,
    /// Declared resources of the gang minimum (a PodGroup's `minResources`), if any.
    pub min_resources: Option<ResourceList>,
    /// Creation time.
    pub created_at: i64,
    /// Phase.
    pub phase: JobPhase,
    /// Tasks.
    pub tasks: Vec<TaskInput>,
    /// Run time once started, declared or learned.
    pub run_time: Option<RunTime>,
    /// When its running pods are expected to end.
    pub ends_at: Option<i64>,
    /// When the scheduler last preempted or reclaimed pods of the job.
    pub preempted_at: Option<i64>,
    /// When its earliest running pod started, when known.
    pub started_at: Option<i64>,
    /// Where the job's pods must (or should) go together.
    pub topology: Option<TopologyRequestInput>,
    /// Whether it shrinks by halves and grows by doubling (a one-task job only).
    pub resize: Option<Resize>,
}

/// Run:ai's elasticity for a one-task job whose gang is all its pods: when the gang cannot be
/// placed (after consolidation), it restarts with half its pods, again and again down to
/// `floor`; when spare capacity allows, it restarts with twice its pods, up to `ceiling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resize {
    /// Fewest pods it may run with.
    pub floor: u32,
    /// Most pods it may run with (what it asks for).
    pub ceiling: u32,
}

impl Resize {
    /// The policy of a job of `replicas` pods asking `gpus_per_pod` GPUs each that may run with
    /// no fewer than `min_gpus` GPUs (absent: one pod): its floor is the fewest pods holding
    /// that many GPUs. Refused (with why) when a floor is asked of pods that request no GPU, or
    /// is more than the job asks for.
    pub fn from_min_gpus(replicas: u32, gpus_per_pod: i64, min_gpus: Option<u32>) -> Result<Resize, String> {
        let floor = drover_api::crd::elasticity::floor_pods(replicas, gpus_per_pod, min_gpus)?;
        Ok(Resize { floor, ceiling: replicas })
    }
}

impl JobInput {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A task as handed to the builder.
#[derive(Debug, Clone)]
pub struct TaskInput {
    /// Name.
    pub name: String,
    /// Per-task minimum.
    pub min_available: u32,
    /// Requests of one pod.
    pub requests: ResourceList,
    /// Node constraints.
    pub constraints: Constraints,
    /// Phase of each pod, by index.
    pub pods: Vec<PodPhaseInput>,
    /// Where the task's pods must go together, inside the job's domain.
    pub topology: Option<TopologyRequestInput>,
    /// Consecutive pods grouped, each group inside one domain.
    pub slices: Option<SlicesInput>,
}

/// A pod's phase by node name, as handed to the builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodPhaseInput {
    /// Not bound.
    Pending,
    /// Bound to the named node.
    Bound(String),
    /// Being evicted from the named node.
    Releasing(String),
    /// Not bound; an earlier cycle pipelined it onto the named node, which evictions were
    /// freeing for it (a kept claim). A node the snapshot does not know drops the nomination.
    Nominated(String),
}

/// A queue as handed to the builder.
#[derive(Debug, Clone)]
pub struct QueueInput {
    /// Name.
    pub name: String,
    /// Parent name; `None` for a child of the root.
    pub parent: Option<String>,
    /// Guaranteed quota.
    pub deserved: ResourceList,
    /// Hard cap.
    pub limit: Option<ResourceList>,
    /// Over-quota weight.
    pub over_quota_weight: u32,
    /// Reclaimable.
    pub reclaimable: bool,
    /// Queueing strategy.
    pub strategy: QueueingStrategy,
    /// Running limits and minimum run times (as declared: inheritance is the builder's).
    pub bounds: QueueBounds,
    /// The object whose spec the queue's is made from, if another object manages it.
    pub owner: Option<QueueOwner>,
}

/// The object a managed queue is made from (a Project's or Department's node pool): the one
/// to edit, which advice names instead of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOwner {
    /// `Project` or `Department`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The node pool of its `spec.nodePools` the queue is for.
    pub pool: String,
}

/// A node as handed to the builder.
#[derive(Debug, Clone)]
pub struct NodeInput {
    /// Name.
    pub name: String,
    /// Allocatable.
    pub allocatable: ResourceList,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Cordoned.
    pub unschedulable: bool,
}

/// Why inputs do not form a consistent snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A name refers to nothing.
    #[error("{object}: {field} {name:?} does not exist")]
    Missing {
        /// The referring object.
        object: String,
        /// The referring field.
        field: &'static str,
        /// The missing name.
        name: String,
    },
    /// The queue tree has a cycle.
    #[error("queue {0}: parent chain loops back to itself")]
    Cycle(String),
    /// Two objects share a name.
    #[error("{0}: defined twice")]
    Duplicate(String),
}
