//! What a cycle decided: bindings, pipelined claims, evictions and resizes, in order.

use crate::snapshot::{JobId, NodeId, PodId, Snapshot};

use super::EvictReason;

/// What a cycle decided.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    /// New bindings, in decision order.
    pub binds: Vec<(PodId, NodeId)>,
    /// Evictions, in decision order: the pod, why, and the job it makes room for (whose
    /// pods are pipelined onto what it frees), so that events name the real beneficiary.
    pub evictions: Vec<(PodId, EvictReason, JobId)>,
    /// Pods nominated to nodes that evictions are freeing.
    pub pipelined: Vec<(PodId, NodeId)>,
    /// Elastic jobs to restart with another number of pods (see [`crate::snapshot::Resize`]).
    pub resizes: Vec<JobResize>,
    /// Jobs started in capacity reserved for another gang on a learned run time, with when
    /// that gang is due: kept by the caller as [`crate::snapshot::Job::borrowed_until`].
    pub loans: Vec<(JobId, i64)>,
}

impl Decisions {
    /// Whether the cycle decided nothing at all.
    pub fn is_empty(&self) -> bool {
        self.binds.is_empty()
            && self.evictions.is_empty()
            && self.pipelined.is_empty()
            && self.resizes.is_empty()
            && self.loans.is_empty()
    }
}

/// A decision to restart an elastic job with `pods` pods, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobResize {
    /// The job.
    pub job: JobId,
    /// Its pods before.
    pub from: u32,
    /// Its pods after.
    pub to: u32,
    /// Why, for people.
    pub why: String,
}

impl Decisions {
    /// The jobs that lost pods to preemption or reclaim (a consolidation move is no loss: the
    /// pod comes back elsewhere at once), once per evicted pod: what the regrow rule records.
    pub fn preempted_jobs<'a>(&'a self, snap: &'a Snapshot) -> impl Iterator<Item = JobId> + 'a {
        self.evictions.iter().filter(|e| e.1 != EvictReason::Consolidate).map(|e| snap.pods[e.0].job)
    }
}
