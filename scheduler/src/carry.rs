//! Carrying a cycle's outcome into the next cycle's inputs, for callers that rebuild the
//! snapshot from inputs each cycle (the simulator, the property tests). In a cluster the
//! API server does this: bindings take effect, evicted pods terminate.

use crate::cycle::CycleOutcome;
use crate::session::PodState;
use crate::snapshot::{JobInput, JobPhase, NodeId, PodPhase, PodPhaseInput, Snapshot};

/// How long pods evicted in a cycle take to terminate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// At once: they are pending again in the next cycle.
    Immediate,
    /// Over a cycle: pods that were bound are still releasing their node in the next cycle.
    Slow,
}

/// Writes `outcome` (of the cycle that ran on `snap`, built from `jobs`) into `jobs`: bound and
/// newly allocated pods are bound, pipelined pods pending and nominated to their node (the next
/// cycle places them there: their gang's kept claim), evicted pods pending or releasing as
/// `termination` says; each job takes the phase the cycle decided, and a job with a declared
/// run time that starts running now is expected to end that long after the cycle's time (one
/// that stops running has no end). A job that lost pods to preemption or reclaim was preempted
/// at the cycle's time. An elastic job the cycle resized restarts at its new size.
pub fn carry(jobs: &mut [JobInput], snap: &Snapshot, outcome: &CycleOutcome, termination: Termination) {
    for (p, state) in outcome.pod_state.iter_enumerated() {
        let pod = &snap.pods[p];
        let name = |n: NodeId| snap.nodes[n].name.clone();
        jobs[pod.job.0].tasks[pod.task].pods[pod.index as usize] = match *state {
            PodState::Bound(n) | PodState::Allocated(n) => PodPhaseInput::Bound(name(n)),
            PodState::Releasing(n) if termination == Termination::Slow && matches!(pod.phase, PodPhase::Bound(_)) => {
                PodPhaseInput::Releasing(name(n))
            }
            PodState::Pipelined(n) => PodPhaseInput::Nominated(name(n)),
            PodState::Releasing(_) | PodState::Pending => PodPhaseInput::Pending,
        };
    }
    for job in outcome.decisions.preempted_jobs(snap) {
        jobs[job.0].preempted_at = Some(snap.clock.now());
    }
    for (job, phase) in jobs.iter_mut().zip(&outcome.job_phase) {
        job.phase = *phase;
        let running = job.tasks.iter().flat_map(|t| &t.pods).any(|p| matches!(p, PodPhaseInput::Bound(_)));
        if !running {
            job.ends_at = None;
        } else if job.ends_at.is_none() {
            job.ends_at = job.run_time.map(|d| snap.clock.now().saturating_add(d.seconds()));
        }
    }
    for resize in &outcome.decisions.resizes {
        restart_at(&mut jobs[resize.job.0], resize.to);
    }
}

/// Restarts an elastic job with `pods` pods, all pending (what its controller does: its pods
/// read their number at start); its gang is all of them.
fn restart_at(job: &mut JobInput, pods: u32) {
    let task = &mut job.tasks[0];
    task.pods = vec![PodPhaseInput::Pending; pods as usize];
    task.min_available = task.min_available.min(pods);
    job.min_member = pods;
    job.phase = JobPhase::Inqueue;
    job.ends_at = None;
    job.started_at = None;
}
