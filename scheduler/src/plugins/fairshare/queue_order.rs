//! Sibling queues, most deserving first: a queue that stays within its deserved quota with its
//! next job, then those below their deserved quota, then the smallest dominant ratio of
//! allocation to fair share, then (time-based) the one that used less lately.

use std::cmp::Ordering;

use super::bounds::within_deserved_with;
use super::FairShare;
use crate::session::Session;
use crate::snapshot::{JobId, JobPhase, QueueId};

/// How far a queue is from being served: queues below their deserved quota first, then the
/// smallest dominant ratio of allocation to fair share.
fn deprivation(ssn: &Session, q: QueueId) -> (bool, f64) {
    let alloc = &ssn.queue_alloc[q];
    let fair = &ssn.fair_share[q];
    let deserved = &ssn.snap.queues[q].deserved;
    let demand = &ssn.demand[q];
    let mut below_deserved = false;
    let mut ratio: f64 = 0.0;
    for r in 0..alloc.len() {
        if demand[r] == 0 || r == ssn.snap.pods_resource {
            continue;
        }
        if alloc[r] < deserved[r].min(demand[r]) {
            below_deserved = true;
        }
        let x = if fair[r] > 0 {
            alloc[r] as f64 / fair[r] as f64
        } else if alloc[r] > 0 {
            f64::INFINITY
        } else {
            0.0
        };
        ratio = ratio.max(x);
    }
    (!below_deserved, ratio)
}

impl FairShare {
    /// The queue's next job: the first job of its subtree, highest priority first, then
    /// oldest, that is admitted, not pipelined and has a pod to place.
    fn next_job(&self, ssn: &Session, q: QueueId) -> Option<JobId> {
        let list = &self.waiting[q];
        // Between queue comparisons pods only leave the pending state and jobs only become
        // pipelined, so a job with no pod left to place, or pipelined, stays so for the rest
        // of the cycle and is not looked at again.
        let done = |j: JobId| ssn.job_pipelined[j] > 0 || ssn.pending_pods(j).next().is_none();
        let start = ssn.scratch.with(self.placed, |placed| {
            let Some(start) = placed.get_mut(q) else { return 0 };
            while *start < list.len() && done(list[*start]) {
                *start += 1;
            }
            *start
        });
        list[start..].iter().copied().find(|&j| ssn.job_phase[j] != JobPhase::Pending && !done(j))
    }

    /// KAI's first question in its queue order: whether the queue stays within its deserved
    /// quota (in every quota resource) with its next job's request. Such a queue
    /// is served before one that would go over quota, so that the capacity a reclaim frees
    /// for a queue below its deserved quota is not handed back to the victim's queue, which
    /// would go over its own quota again to take it (no reclaim ping-pong).
    fn within_deserved_with_next_job(&self, ssn: &Session, q: QueueId) -> bool {
        let Some(job) = self.next_job(ssn, q) else { return false };
        self.with_need(ssn, job, |need| within_deserved_with(ssn, q, &need.request).is_ok())
    }

    /// The queue order (see the module).
    pub(super) fn order_queues(&self, ssn: &Session, a: QueueId, b: QueueId) -> Ordering {
        // A queue that stays within its deserved quota with its next job comes first, also
        // when DRF orders the rest: this is what keeps reclaimed capacity from going back.
        let (wa, wb) = (self.within_deserved_with_next_job(ssn, a), self.within_deserved_with_next_job(ssn, b));
        let first = wb.cmp(&wa);
        if self.defer_queue_order {
            return first;
        }
        let (da, db) = (deprivation(ssn, a), deprivation(ssn, b));
        let order = first.then(da.0.cmp(&db.0)).then(da.1.total_cmp(&db.1));
        match (self.past.get(a), self.past.get(b)) {
            (Some(pa), Some(pb)) => order.then(pa.total_cmp(pb)),
            _ => order,
        }
    }
}
