//! One scheduling cycle's mutable view of the snapshot: node usage, queue allocations, gang
//! progress, fair shares, pending reasons and the decisions taken so far. Every change of
//! placement (node usage, pod states, queue and job counts) goes through a [`Statement`] so
//! that a gang's placements (or a preemption's evictions) commit or roll back as one; what
//! changes outside one says why it needs no undo.

mod decisions;
mod gang;
mod scratch;
mod statement;

pub use decisions::{Decisions, JobResize};
pub use scratch::{Scratch, Slot};
pub use statement::Statement;

use crate::domain_index::DomainIndex;
use crate::ids::{ti_vec, TiVec};
use crate::node_index::{Class, NodeIndex};
use crate::res::Res;
use crate::snapshot::{JobId, JobPhase, NodeId, PodId, PodPhase, QueueId, Snapshot};
use crate::why::Blocker;

/// A pod's state within the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    /// Waiting for a node.
    Pending,
    /// Bound before this cycle.
    Bound(NodeId),
    /// Placed by this cycle.
    Allocated(NodeId),
    /// Being evicted; its resources are freed once it terminates.
    Releasing(NodeId),
    /// Will take this node once pods evicted for it have terminated.
    Pipelined(NodeId),
}

impl PodState {
    /// The node the pod runs on (bound or newly allocated).
    pub fn running_on(self) -> Option<NodeId> {
        match self {
            PodState::Bound(n) | PodState::Allocated(n) => Some(n),
            _ => None,
        }
    }
}

/// Why a pod was evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EvictReason {
    /// Preempted by higher-priority work of the same queue.
    Preempt,
    /// Reclaimed by another queue.
    Reclaim,
    /// Moved by consolidation: evicted to be re-created on another node, so that a gang fits.
    Consolidate,
    /// Ran past the learned run time it was admitted into another gang's reserved capacity on,
    /// and that gang is due ([`crate::snapshot::Job::borrowed_until`]).
    Overrun,
}

/// How many times `req` fits a room given per resource (none when `closed`).
fn slots(closed: bool, req: &Res, room: impl Fn(usize) -> i64) -> i64 {
    if closed {
        return 0;
    }
    let asked = (0..req.len()).filter(|&r| req[r] > 0);
    asked.map(|r| (room(r) / req[r]).max(0)).min().unwrap_or(i64::MAX).min(i64::from(u32::MAX))
}

/// The per-cycle state.
pub struct Session<'s> {
    /// The cluster at the start of the cycle.
    pub snap: &'s Snapshot,
    /// State of every pod.
    pub pod_state: TiVec<PodId, PodState>,
    /// Resources held on each node (bound, allocated and releasing pods).
    pub node_used: TiVec<NodeId, Res>,
    /// Resources of releasing pods on each node.
    pub node_releasing: TiVec<NodeId, Res>,
    /// Resources promised to pipelined pods on each node.
    pub node_pipelined: TiVec<NodeId, Res>,
    /// The sum over nodes of [`Session::future_of`], kept as pods change state, so that what
    /// most of the cluster will have is a subtraction rather than a walk over every node.
    pub future_total: Res,
    /// Resources of running and pipelined pods per queue, including descendants (index 0 =
    /// whole cluster).
    pub queue_alloc: TiVec<QueueId, Res>,
    /// Same, counting only non-preemptible jobs.
    pub queue_alloc_np: TiVec<QueueId, Res>,
    /// Jobs holding pods (running or pipelined) per queue, including descendants; counted
    /// only when some queue limits its running jobs (`count_jobs`), else all 0.
    pub queue_jobs: TiVec<QueueId, u32>,
    count_jobs: bool,
    /// Running pods per job.
    pub job_running: TiVec<JobId, u32>,
    /// Pipelined pods per job.
    pub job_pipelined: TiVec<JobId, u32>,
    /// Per job, the pods evicted for it this cycle (its reason counts them).
    pub evicted_for: TiVec<JobId, u32>,
    /// Running pods per job and task.
    pub task_running: TiVec<JobId, Vec<u32>>,
    /// Phase of each job; changed outside statements, at admission and once a committed
    /// placement starts the gang, neither of which is undone within the cycle.
    pub job_phase: TiVec<JobId, JobPhase>,
    /// Fair share per queue (index 0 = cluster capacity); set by the plugins when the session
    /// opens, before any statement, and fixed after.
    pub fair_share: TiVec<QueueId, Res>,
    /// Demand per queue: requests of all pods of its jobs, capped by its limit; set with
    /// `fair_share`.
    pub demand: TiVec<QueueId, Res>,
    /// Why each job still waits, when it does.
    pub reasons: TiVec<JobId, Option<String>>,
    /// Per job, the structured refusal that gave its reason, where one did.
    pub blocked_by: TiVec<JobId, Option<Blocker>>,
    /// Idle capacity index for placement.
    pub index: NodeIndex,
    /// Idle capacity of topology domains, for placing gangs inside one.
    pub domains: DomainIndex,
    /// Bumped by every change, so that results computed on an unchanged state can be reused.
    pub version: u64,
    /// With topologies, the node of every change in order (undoing included), so that sums
    /// kept per domain catch up with only the nodes changed since they were last read.
    pub changed_nodes: Vec<NodeId>,
    /// The leaf queue of every change's pod in order (undoing included), so that choices
    /// kept per queue are made again only for the queues changed since (see
    /// `actions::queue_choice`).
    pub changed_queues: Vec<QueueId>,
    /// Decisions committed so far.
    pub decisions: Decisions,
    /// What plugins worked out and reuse within the session (see [`Scratch`]).
    pub scratch: Scratch,
}

impl<'s> Session<'s> {
    /// Opens a session on a snapshot.
    pub fn open(snap: &'s Snapshot) -> Session<'s> {
        let n = snap.resources.len();
        let mut s = Session {
            snap,
            pod_state: TiVec::with_capacity(snap.pods.len()),
            node_used: ti_vec![Res::zero(n); snap.nodes.len()],
            node_releasing: ti_vec![Res::zero(n); snap.nodes.len()],
            node_pipelined: ti_vec![Res::zero(n); snap.nodes.len()],
            future_total: Res::zero(n),
            queue_alloc: ti_vec![Res::zero(n); snap.queues.len()],
            queue_alloc_np: ti_vec![Res::zero(n); snap.queues.len()],
            queue_jobs: ti_vec![0; snap.queues.len()],
            count_jobs: snap.queues.iter().any(|q| q.bounds.max_running_jobs.is_some()),
            job_running: ti_vec![0; snap.jobs.len()],
            job_pipelined: ti_vec![0; snap.jobs.len()],
            evicted_for: ti_vec![0; snap.jobs.len()],
            task_running: snap.jobs.iter().map(|j| vec![0; j.tasks.len()]).collect(),
            job_phase: snap.jobs.iter().map(|j| j.phase).collect(),
            fair_share: ti_vec![snap.capacity.clone(); snap.queues.len()],
            demand: ti_vec![Res::zero(n); snap.queues.len()],
            reasons: ti_vec![None; snap.jobs.len()],
            blocked_by: ti_vec![None; snap.jobs.len()],
            scratch: Scratch::default(),
            index: NodeIndex::new(snap.nodes.iter().map(|n| n.pool).collect(), snap.pools.len().max(1)),
            domains: DomainIndex::new(snap),
            version: 0,
            changed_nodes: Vec::new(),
            changed_queues: Vec::new(),
            decisions: Decisions::default(),
        };
        for (pod_id, pod) in snap.pods.iter_enumerated() {
            let req = s.requests(pod_id);
            let state = match pod.phase {
                PodPhase::Pending => PodState::Pending,
                PodPhase::Bound(n) => {
                    s.node_used[n].add(req);
                    s.account_running(pod_id, true);
                    PodState::Bound(n)
                }
                PodPhase::Releasing(n) => {
                    s.node_used[n].add(req);
                    s.node_releasing[n].add(req);
                    PodState::Releasing(n)
                }
            };
            s.pod_state.push(state);
        }
        for n in snap.nodes.keys() {
            s.reindex(n);
            for r in 0..s.future_total.len() {
                s.future_total[r] += s.future_of(n, r);
            }
        }
        s
    }

    /// Requests of one pod.
    pub fn requests(&self, pod: PodId) -> &'s Res {
        let p = &self.snap.pods[pod];
        &self.snap.jobs[p.job].tasks[p.task].requests
    }

    /// Resources a node can give to new pods now.
    pub fn idle(&self, node: NodeId) -> Res {
        let mut idle = self.snap.nodes[node].allocatable.minus(&self.node_used[node]);
        let mut over = self.node_pipelined[node].minus(&self.node_releasing[node]);
        over.clamp_non_negative();
        idle.sub(&over);
        idle
    }

    /// Whether `req` fits the node's idle resources less `held` (capacity set aside).
    pub fn fits_idle(&self, node: NodeId, req: &Res, held: Option<&Res>) -> bool {
        let alloc = &self.snap.nodes[node].allocatable;
        let (used, rel, pip) = (&self.node_used[node], &self.node_releasing[node], &self.node_pipelined[node]);
        (0..req.len()).all(|r| {
            let idle = alloc[r] - used[r] - (pip[r] - rel[r]).max(0) - held.map_or(0, |h| h[r]);
            req[r] <= idle
        })
    }

    /// How many pods asking `req` fit the node's idle capacity less `held` (none on an
    /// unschedulable node; at most `u32::MAX`, so that sums over nodes cannot overflow).
    pub fn idle_slots(&self, node: NodeId, req: &Res, held: Option<&Res>) -> i64 {
        let closed = self.snap.nodes[node].unschedulable;
        slots(closed, req, |r| self.idle_of(node, r) - held.map_or(0, |h| h[r]))
    }

    /// [`Session::idle_slots`] without a hold, answered from the node index alone when the
    /// node is not indexed (unschedulable) or lacks the GPUs or CPU one pod asks: most nodes
    /// of a busy cluster, when a victim search counts a domain's room.
    pub fn idle_slots_indexed(&self, node: NodeId, req: &Res) -> i64 {
        let Some(keys) = self.index.keys(node) else { return 0 };
        let asks = Class::keys(self.snap, |r| req[r]);
        if (0..2).any(|c| asks[c] > 0 && keys[c] < asks[c]) {
            return 0;
        }
        self.idle_slots(node, req, None)
    }

    /// How many pods asking `req` fit what the node will have once releasing pods terminate,
    /// less pipelined promises (bounded as [`Session::idle_slots`]).
    pub fn future_slots(&self, node: NodeId, req: &Res) -> i64 {
        slots(self.snap.nodes[node].unschedulable, req, |r| self.future_of(node, r))
    }

    /// Like [`Session::future_slots`], as if pods asking `freed` more were evicted there too
    /// (a victim search that counts before it evicts).
    pub fn future_slots_with(&self, node: NodeId, req: &Res, freed: &Res) -> i64 {
        slots(self.snap.nodes[node].unschedulable, req, |r| self.future_of(node, r) + freed[r])
    }

    /// Whether `req` fits what the node will have once releasing pods terminate.
    pub fn fits_future(&self, node: NodeId, req: &Res) -> bool {
        let alloc = &self.snap.nodes[node].allocatable;
        let (used, rel, pip) = (&self.node_used[node], &self.node_releasing[node], &self.node_pipelined[node]);
        (0..req.len()).all(|r| req[r] <= alloc[r] - used[r] + rel[r] - pip[r])
    }

    /// Idle amount of one resource on a node now.
    pub fn idle_of(&self, node: NodeId, r: usize) -> i64 {
        let (rel, pip) = (self.node_releasing[node][r], self.node_pipelined[node][r]);
        self.snap.nodes[node].allocatable[r] - self.node_used[node][r] - (pip - rel).max(0)
    }

    /// Amount of one resource a node will have once releasing pods terminate, minus
    /// pipelined promises.
    #[inline(always)]
    pub fn future_of(&self, node: NodeId, r: usize) -> i64 {
        self.snap.nodes[node].allocatable[r] - self.node_used[node][r] + self.node_releasing[node][r]
            - self.node_pipelined[node][r]
    }

    fn reindex(&mut self, node: NodeId) {
        self.version += 1;
        let n = &self.snap.nodes[node];
        if n.unschedulable {
            return;
        }
        let keys = Some(Class::keys(self.snap, |r| self.idle_of(node, r)));
        let old = self.index.keys(node);
        self.index.set(node, keys);
        if !self.snap.topologies.is_empty() {
            let future = Class::keys(self.snap, |r| self.future_of(node, r).max(0));
            self.domains.update(self.snap, node, (old, keys), future);
            self.changed_nodes.push(node);
        }
    }

    /// Adds (or removes) a pod's requests to its queues' allocation: running pods, and
    /// pipelined pods, which have a claim on capacity being freed for them.
    fn account_queues(&mut self, pod: PodId, add: bool) {
        let p = &self.snap.pods[pod];
        let job = &self.snap.jobs[p.job];
        let req = &job.tasks[p.task].requests;
        let change = |r: &mut Res| if add { r.add(req) } else { r.sub(req) };
        for q in self.snap.ancestry(job.queue).chain(std::iter::once(crate::snapshot::ROOT)) {
            change(&mut self.queue_alloc[q]);
            if !job.preemptible {
                change(&mut self.queue_alloc_np[q]);
            }
        }
        // A job starts or stops counting as running in its queues (the callers change its
        // pod counts after this).
        let before = || self.job_running[p.job] + self.job_pipelined[p.job];
        if self.count_jobs && ((add && before() == 0) || (!add && before() == 1)) {
            for q in self.snap.ancestry(job.queue).chain(std::iter::once(crate::snapshot::ROOT)) {
                self.queue_jobs[q] = if add { self.queue_jobs[q] + 1 } else { self.queue_jobs[q] - 1 };
            }
        }
    }

    /// Whether the job holds pods (running or pipelined): it counts as running in its queues.
    pub fn holds_pods(&self, job: JobId) -> bool {
        self.job_running[job] + self.job_pipelined[job] > 0
    }

    fn account_running(&mut self, pod: PodId, add: bool) {
        self.account_queues(pod, add);
        let p = &self.snap.pods[pod];
        let step = |n: &mut u32| if add { *n += 1 } else { *n -= 1 };
        step(&mut self.job_running[p.job]);
        step(&mut self.task_running[p.job][p.task]);
    }

    /// Resources of running pods per queue: the allocation without pipelined claims.
    pub fn running_alloc(&self) -> TiVec<QueueId, Res> {
        let mut alloc = self.queue_alloc.clone();
        for (pod, state) in self.pod_state.iter_enumerated() {
            if let PodState::Pipelined(_) = state {
                let job = &self.snap.jobs[self.snap.pods[pod].job];
                for q in self.snap.ancestry(job.queue).chain(std::iter::once(crate::snapshot::ROOT)) {
                    alloc[q].sub(self.requests(pod));
                }
            }
        }
        alloc
    }

    /// Records why a job waits (the latest reason wins), given by no structured refusal. Like
    /// every reason, outside statements: per-cycle text, read only by later reasons and the
    /// outcome, never by a decision.
    pub fn set_reason(&mut self, job: JobId, reason: String) {
        self.set_refusal(job, reason, None);
    }

    /// Records why a job waits and the structured refusal, if any, that gave the reason (no
    /// undo: see [`Session::set_reason`]).
    pub fn set_refusal(&mut self, job: JobId, reason: String, by: Option<Blocker>) {
        self.reasons[job] = Some(reason);
        self.blocked_by[job] = by;
    }

    /// Forgets why a job waited, and the refusal behind it (it no longer waits for that; no
    /// undo: see [`Session::set_reason`]).
    pub fn clear_reason(&mut self, job: JobId) {
        self.reasons[job] = None;
        self.blocked_by[job] = None;
    }
}
