//! Restarting resized jobs in the snapshot the replay keeps from cycle to cycle: what the Job
//! controller does in a cluster when the scheduler decides a resize (and what
//! [`drover_scheduler::carry::carry`] does to inputs), done in place, since the replay does not
//! rebuild its snapshot from inputs.

use std::collections::BTreeMap;

use drover_scheduler::ids::TiVec;
use drover_scheduler::snapshot::{JobId, JobPhase, Pod, PodPhase, Snapshot};

/// Restarts each job of `sizes` with its new number of pods, all pending: its pods read their
/// number at start, so a new size is a new gang of all of them, admitted, with no run under
/// way. Pod ids are renumbered as if the snapshot had been built with the new sizes.
pub fn restart(snap: &mut Snapshot, sizes: &BTreeMap<JobId, u32>) {
    let old = std::mem::take(&mut snap.pods);
    let mut pods = TiVec::with_capacity(old.len());
    for (id, job) in snap.jobs.iter_mut_enumerated() {
        let Some(&to) = sizes.get(&id) else {
            for p in job.tasks.iter_mut().flat_map(|t| &mut t.pods) {
                *p = pods.push_and_get_key(old[*p].clone());
            }
            continue;
        };
        let task = &mut job.tasks[0];
        task.pods = (0..to)
            .map(|index| {
                pods.push_and_get_key(Pod { job: id, task: 0, index, phase: PodPhase::Pending, nominated: None })
            })
            .collect();
        task.min_available = task.min_available.min(to);
        job.min_member = to;
        job.phase = JobPhase::Inqueue;
        job.ends_at = None;
        job.started_at = None;
    }
    snap.pods = pods;
}
