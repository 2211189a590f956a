//! The cluster at the start of a cycle: nodes, queues, priority classes, pod groups and pods,
//! as index-based arenas. Built once per cycle (by the simulator or the Kubernetes cache) and
//! never mutated by the core; per-cycle state lives in the session.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_api::{NodeSelectorRequirement, ResourceList, Taint, Toleration};

use crate::clock::Clock;
use crate::res::{Res, UNLIMITED};

mod build;
mod input;
mod jobs;
mod run_time;
mod topology;
pub use build::{build, build_with_topologies};
pub use input::{JobInput, NodeInput, PodPhaseInput, QueueInput, QueueOwner, Resize, SnapshotError, TaskInput};
pub use jobs::JobConverter;
pub use run_time::{RunTime, RunTimeRange};
pub use topology::{
    Domain, DomainId, Level, LevelInput, Slices, SlicesInput, Topology, TopologyInput, TopologyRequest,
    TopologyRequestInput,
};

use crate::ids::TiVec;
pub use crate::ids::{JobId, NodeId, PodId, QueueId};

/// The implicit root of the queue tree.
pub const ROOT: QueueId = QueueId(0);

pub use drover_api::crd::queue::QueueingStrategy;

/// A node as the scheduler sees it.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Allocatable resources.
    pub allocatable: Res,
    /// Labels, for selectors and affinity.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Cordoned: no new pods.
    pub unschedulable: bool,
    /// Index into `Snapshot::pools`.
    pub pool: usize,
}

/// A queue of the hierarchy.
#[derive(Debug, Clone)]
pub struct Queue {
    /// Queue name ("" for the root).
    pub name: String,
    /// Parent queue; `None` only for the root.
    pub parent: Option<QueueId>,
    /// Child queues, in name order.
    pub children: Vec<QueueId>,
    /// Queues above it up to the root (0 for the root, 1 for a top-level queue).
    pub depth: usize,
    /// Guaranteed quota (0 where not declared).
    pub deserved: Res,
    /// Which resources the queue declares a quota for.
    pub deserved_declared: Vec<bool>,
    /// Which resources the quota governs: those declared, or every one when none is; never
    /// `pods`, which is node capacity, not quota.
    pub governed: Vec<bool>,
    /// Hard cap (`UNLIMITED` where none).
    pub limit: Res,
    /// Share of unused capacity.
    pub over_quota_weight: u32,
    /// Whether over-quota resources may be reclaimed by other queues.
    pub reclaimable: bool,
    /// Start order policy.
    pub strategy: QueueingStrategy,
    /// How much work its subtree runs at once, and how long work runs before it may be
    /// evicted: the minimum run times are those in force (its own, else its nearest
    /// ancestor's); the running limits are its own, each bounding its whole subtree.
    pub bounds: QueueBounds,
    /// The object whose spec the queue's is made from, if another object manages it.
    pub owner: Option<QueueOwner>,
}

/// What a queue bounds besides resources: the jobs and pods its subtree runs at once, and
/// the least time a job of it runs before it may be preempted or reclaimed (seconds).
/// `None`: no bound (a minimum run time absent from a queue is its parent's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueBounds {
    /// Jobs of the subtree holding pods (bound or pipelined), at most.
    pub max_running_jobs: Option<u32>,
    /// Pods of the subtree bound or pipelined, at most.
    pub max_running_pods: Option<u32>,
    /// Seconds a job runs before preemption (within its queue) may take it.
    pub preempt_min_runtime: Option<u32>,
    /// Seconds a job runs before reclaim (for another queue) may take it.
    pub reclaim_min_runtime: Option<u32>,
}

impl Queue {
    /// Whether the queue's quota governs resource `r`: the resources it declares a deserved
    /// quota for, or every resource when it declares none (a queue without quota has a
    /// quota of zero); never the pod count.
    pub fn quota_covers(&self, r: usize) -> bool {
        self.governed[r]
    }
}

/// The constraints of a task that decide which nodes can ever host its pods.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Constraints {
    /// Required labels.
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Required node affinity (all must match).
    pub affinity: Vec<NodeSelectorRequirement>,
    /// The fewest GPUs the pod needs, all NVLink-connected (the seed's
    /// `min-nvlink-gpus` annotation), if it says.
    pub min_nvlink_gpus: Option<i64>,
}

/// A task: identical pods of one job.
#[derive(Debug, Clone)]
pub struct Task {
    /// Task name.
    pub name: String,
    /// Per-task gang minimum.
    pub min_available: u32,
    /// Requests of one pod (including one `pods`).
    pub requests: Res,
    /// Whether pods of the task request GPUs.
    pub gpu: bool,
    /// Node constraints, shared so that equal constraints are evaluated once.
    pub constraints: Arc<Constraints>,
    /// The pods, in index order.
    pub pods: Vec<PodId>,
    /// Where the task's pods must go together, inside the job's domain (a sub-group).
    pub topology: Option<TopologyRequest>,
    /// Consecutive pods grouped, each group inside one domain.
    pub slices: Option<Slices>,
}

/// Lifecycle phase of a pod group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobPhase {
    /// Not yet admitted by enqueue.
    Pending,
    /// Admitted, waiting for its minimum to be placed.
    Inqueue,
    /// At least its minimum is bound.
    Running,
}

/// A pod group.
#[derive(Debug, Clone)]
pub struct Job {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Leaf queue.
    pub queue: QueueId,
    /// Priority class name.
    pub priority_class: String,
    /// Priority value (higher first).
    pub priority: i32,
    /// Whether its pods may be preempted or reclaimed.
    pub preemptible: bool,
    /// Gang minimum.
    pub min_member: u32,
    /// What the gang minimum declares it needs (a PodGroup's `minResources`; zero where
    /// nothing is declared): admission holds a group to it even before its pods exist.
    pub min_resources: Res,
    /// Creation time, seconds.
    pub created_at: i64,
    /// Phase at the start of the cycle.
    pub phase: JobPhase,
    /// Tasks.
    pub tasks: Vec<Task>,
    /// How long the job runs once started, declared or learned, when known: reservations and
    /// shortest-first plan with it.
    pub run_time: Option<RunTime>,
    /// Within what its run time falls, as far as the learned runs of jobs like it tell: the
    /// forecast's range. Absent from the inputs: whoever predicts run times sets it.
    pub run_time_range: Option<RunTimeRange>,
    /// When its running pods are expected to end (the clock of [`Snapshot::clock`]), when known.
    pub ends_at: Option<i64>,
    /// When the scheduler last preempted or reclaimed pods of the job (the clock of
    /// [`Snapshot::clock`]), if it ever did: its elastic pods wait a while before regrowing.
    pub preempted_at: Option<i64>,
    /// When its earliest running pod started (the clock of [`Snapshot::clock`]), when known:
    /// minimum run times count from it.
    pub started_at: Option<i64>,
    /// When it runs in capacity reserved for another gang, admitted there on a learned run
    /// time (a loan, [`crate::session::Decisions::loans`]): when that gang is due. From then on,
    /// if it still runs, it is evicted for the gang ([`crate::session::EvictReason::Overrun`]).
    /// Absent from the inputs: whoever keeps loans between cycles sets it after the build.
    pub borrowed_until: Option<i64>,
    /// Where the job's pods must (or should) go together.
    pub topology: Option<TopologyRequest>,
    /// Whether it shrinks by halves and grows by doubling.
    pub resize: Option<Resize>,
}

impl Job {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Total pods.
    pub fn replicas(&self) -> usize {
        self.tasks.iter().map(|t| t.pods.len()).sum()
    }
}

/// Where a pod is at the start of a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    /// Not bound.
    Pending,
    /// Bound to a node.
    Bound(NodeId),
    /// Being evicted: still holds its node's resources.
    Releasing(NodeId),
}

/// A pod of a job.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Owning job.
    pub job: JobId,
    /// Task index within the job.
    pub task: usize,
    /// Index within the task.
    pub index: u32,
    /// Phase at the start of the cycle.
    pub phase: PodPhase,
    /// For a pending pod, the node an earlier cycle pipelined it onto (its gang's kept
    /// claim; see [`crate::actions::claim`]).
    pub nominated: Option<NodeId>,
}

/// The whole cluster at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Resource names; a resource id indexes every `Res`.
    pub resources: Vec<String>,
    /// Id of `nvidia.com/gpu`, when any object mentions it.
    pub gpu: Option<usize>,
    /// Id of `cpu`.
    pub cpu: usize,
    /// Id of `pods`.
    pub pods_resource: usize,
    /// Node pool names (values of `drover.dev/node-pool`; "" for unlabelled nodes).
    pub pools: Vec<String>,
    /// Nodes.
    pub nodes: TiVec<NodeId, Node>,
    /// Queues; index 0 is the root.
    pub queues: TiVec<QueueId, Queue>,
    /// Jobs.
    pub jobs: TiVec<JobId, Job>,
    /// Pods.
    pub pods: TiVec<PodId, Pod>,
    /// Sum of allocatable resources of schedulable nodes.
    pub capacity: Res,
    /// The most any one schedulable node has of each resource: a pod asking more of one can
    /// never run, however much the cluster frees.
    pub largest_node: Res,
    /// The resources queue quotas are about: those some queue declares a deserved quota for,
    /// or every one when no queue declares any; never `pods`. Queue state, the queue order's
    /// deserved-quota question and reclaim compare allocations with deserved quotas in these
    /// only (a queue that declares none of them deserves 0 there), all by the same measure,
    /// so that GPU-only quotas say nothing about CPU, and what one rule calls over quota no
    /// other calls within it.
    pub quota_resources: Vec<bool>,
    /// The hierarchies of node labels jobs may ask to be placed within.
    pub topologies: Vec<Topology>,
    /// The time of the cycle, in seconds on the clock of `created_at` and `ends_at`, read
    /// through questions that note how long their answers hold.
    pub clock: Clock,
    /// Whether that clock is Unix time (a cluster's) rather than a simulation's.
    pub unix_clock: bool,
    /// Per queue, per resource, its decayed past usage for time-based fair share
    /// ([`crate::usage::UsageLedger::for_snapshot`]); empty when nobody keeps a ledger.
    pub past_usage: TiVec<QueueId, Vec<f64>>,
}

impl Snapshot {
    /// The resource placement ranks nodes by and gangs are counted in: GPUs for GPU work (when
    /// the cluster has any), else CPU.
    pub fn key_resource(&self, gpu: bool) -> usize {
        if gpu {
            self.gpu.unwrap_or(self.cpu)
        } else {
            self.cpu
        }
    }

    /// The snapshot taken at `now` (seconds on the clock of the jobs' times); [`build`] leaves
    /// it at 0, which is right only for inputs without run times.
    pub fn at(mut self, now: i64) -> Snapshot {
        self.clock = Clock::at(now);
        self
    }

    /// The snapshot taken at `now`, in seconds since the Unix epoch (a cluster's clock).
    pub fn at_unix_time(self, now: i64) -> Snapshot {
        Snapshot { unix_clock: true, ..self.at(now) }
    }

    /// A time on the snapshot's clock, for people: RFC 3339 (UTC) on a Unix clock, else
    /// seconds of the simulation's clock.
    pub fn time(&self, t: i64) -> String {
        if !self.unix_clock {
            return format!("t={t} s");
        }
        let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
    }

    /// The two sibling queues where the paths from the root to `a` and to `b` part: (the
    /// one above `a`, the one above `b`); `None` when one queue is the other or its ancestor.
    pub fn split(&self, a: QueueId, b: QueueId) -> Option<(QueueId, QueueId)> {
        let (mut a, mut b) = (a, b);
        let (mut da, mut db) = (self.queues[a].depth, self.queues[b].depth);
        let up = |q: QueueId| self.queues[q].parent.unwrap_or(ROOT);
        while da > db {
            (a, da) = (up(a), da - 1);
        }
        while db > da {
            (b, db) = (up(b), db - 1);
        }
        if a == b {
            return None;
        }
        // Climb together until the parents meet; remember the children of the meeting point.
        while up(a) != up(b) {
            (a, b) = (up(a), up(b));
        }
        Some((a, b))
    }

    /// The chain from a queue up to (excluding) the root.
    pub fn ancestry(&self, q: QueueId) -> impl Iterator<Item = QueueId> + '_ {
        std::iter::successors(Some(q), move |&q| self.queues[q].parent).take_while(|&q| q != ROOT)
    }

    /// The topology jobs that name none use, if the snapshot has one named `default`.
    pub fn default_topology(&self) -> Option<usize> {
        self.topologies.iter().position(|t| t.name == drover_api::topology::DEFAULT_TOPOLOGY)
    }

    /// Amount of resource `i` in canonical text.
    pub fn amount(&self, i: usize, v: i64) -> String {
        drover_api::format_amount(&self.resources[i], v)
    }

    /// Converts a vector back to a named list, skipping zeros and unlimited entries.
    pub fn to_list(&self, r: &Res) -> ResourceList {
        ResourceList(
            (0..r.len())
                .filter(|&i| r[i] != 0 && r[i] != UNLIMITED)
                .map(|i| (self.resources[i].clone(), r[i]))
                .collect(),
        )
    }
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
