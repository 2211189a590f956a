//! The undo log: every change of placement goes through a [`Statement`], applied at once and
//! undone by [`Session::discard`], so a gang's placements (or a preemption's evictions) commit
//! or roll back as one.

use crate::res::Res;
use crate::snapshot::{JobId, NodeId, PodId};

use super::{EvictReason, PodState, Session};

/// One reversible change.
#[derive(Debug, Clone, Copy)]
enum Op {
    Allocate(PodId, NodeId),
    Pipeline(PodId, NodeId),
    Evict(PodId, NodeId, PodState, EvictReason, JobId),
    Hold(PodId, NodeId),
}

/// A transaction over the session: changes apply immediately and are undone by `discard`.
#[derive(Debug, Default)]
#[must_use = "a statement must be committed or discarded"]
pub struct Statement {
    ops: Vec<Op>,
}

impl Statement {
    /// A new, empty statement.
    pub fn new() -> Statement {
        Statement::default()
    }

    /// A new, empty statement with room for `changes` changes.
    pub fn with_capacity(changes: usize) -> Statement {
        Statement { ops: Vec::with_capacity(changes) }
    }

    /// Whether nothing was done.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Number of changes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// The pods the statement evicts, with the nodes they release.
    pub fn evicted(&self) -> impl Iterator<Item = (PodId, NodeId)> + '_ {
        self.ops.iter().filter_map(|op| match *op {
            Op::Evict(pod, node, ..) => Some((pod, node)),
            _ => None,
        })
    }

    /// The pods the statement pipelines, with the nodes they go to.
    pub fn pipelined(&self) -> impl Iterator<Item = (PodId, NodeId)> + '_ {
        self.ops.iter().filter_map(|op| match *op {
            Op::Pipeline(pod, node) => Some((pod, node)),
            _ => None,
        })
    }
}

impl<'s> Session<'s> {
    /// Places a pending pod on a node.
    pub fn allocate(&mut self, st: &mut Statement, pod: PodId, node: NodeId) {
        debug_assert_eq!(self.pod_state[pod], PodState::Pending);
        self.record(st, Op::Allocate(pod, node));
    }

    /// Promises a pending pod a node that evictions are freeing.
    pub fn pipeline(&mut self, st: &mut Statement, pod: PodId, node: NodeId) {
        debug_assert_eq!(self.pod_state[pod], PodState::Pending);
        self.record(st, Op::Pipeline(pod, node));
    }

    /// Evicts a running pod to make room for `for_job`; its resources stay held until it
    /// terminates.
    pub fn evict(&mut self, st: &mut Statement, pod: PodId, reason: EvictReason, for_job: JobId) {
        let prev = self.pod_state[pod];
        let node = prev.running_on().expect("only running pods are evicted");
        self.record(st, Op::Evict(pod, node, prev, reason, for_job));
    }

    /// Sets capacity of a node aside, for the rest of the cycle, for the pod that will replace
    /// a pod moved by consolidation (the pod itself is releasing its old node).
    pub fn hold(&mut self, st: &mut Statement, pod: PodId, node: NodeId) {
        self.record(st, Op::Hold(pod, node));
    }

    fn record(&mut self, st: &mut Statement, op: Op) {
        self.apply(op, true);
        st.ops.push(op);
    }

    /// Undoes every change of the statement, newest first. Statements over distinct pods may
    /// be discarded in any order: every change they make to the books is a sum.
    pub fn discard(&mut self, st: Statement) {
        for op in st.ops.into_iter().rev() {
            self.apply(op, false);
        }
    }

    /// Makes the change `op` (`forward`) or undoes it: the one place node usage, pod states
    /// and queue and job accounting change once the session is open.
    fn apply(&mut self, op: Op, forward: bool) {
        let (Op::Allocate(pod, node) | Op::Pipeline(pod, node) | Op::Evict(pod, node, ..) | Op::Hold(pod, node)) = op;
        let req = self.requests(pod);
        let change = |r: &mut Res| if forward { r.add(req) } else { r.sub(req) };
        // Evicting frees future capacity; every other change takes it.
        if matches!(op, Op::Evict(..)) == forward {
            self.future_total.add(req);
        } else {
            self.future_total.sub(req);
        }
        match op {
            Op::Allocate(..) => {
                change(&mut self.node_used[node]);
                self.pod_state[pod] = if forward { PodState::Allocated(node) } else { PodState::Pending };
                self.account_running(pod, forward);
            }
            Op::Pipeline(..) => {
                change(&mut self.node_pipelined[node]);
                self.pod_state[pod] = if forward { PodState::Pipelined(node) } else { PodState::Pending };
                self.account_queues(pod, forward);
                let pipelined = &mut self.job_pipelined[self.snap.pods[pod].job];
                *pipelined = if forward { *pipelined + 1 } else { *pipelined - 1 };
            }
            Op::Evict(_, _, prev, _, for_job) => {
                change(&mut self.node_releasing[node]);
                let evicted = &mut self.evicted_for[for_job];
                *evicted = if forward { *evicted + 1 } else { *evicted - 1 };
                self.pod_state[pod] = if forward { PodState::Releasing(node) } else { prev };
                self.account_running(pod, !forward);
            }
            Op::Hold(..) => change(&mut self.node_used[node]),
        }
        self.changed_queues.push(self.snap.jobs[self.snap.pods[pod].job].queue);
        self.reindex(node);
    }

    /// Moves another statement's changes into `st` (they stay applied).
    pub fn absorb(&self, st: &mut Statement, other: Statement) {
        st.ops.extend(other.ops);
    }

    /// Makes the statement's changes decisions of the cycle.
    pub fn commit(&mut self, st: Statement) {
        for op in st.ops {
            match op {
                Op::Allocate(pod, node) => self.decisions.binds.push((pod, node)),
                Op::Pipeline(pod, node) => self.decisions.pipelined.push((pod, node)),
                Op::Evict(pod, _, _, reason, for_job) => self.decisions.evictions.push((pod, reason, for_job)),
                Op::Hold(..) => {}
            }
        }
    }
}
