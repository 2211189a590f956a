//! Resize: Run:ai's elasticity (seed `runai-scheduler-2020.txt`) for the jobs that ask for it
//! ([`Resize`]): a one-task job whose gang is all its pods, run at a size its code reads at
//! start (`WORLD_SIZE`), so a new size is a restart.
//!
//! - **Shrink.** A job none of whose pods runs, whose gang found no room this cycle (after
//!   allocation, preemption, reclaim and consolidation, which run before this action), restarts
//!   with half its pods: the largest of a half, a quarter… (not below its floor) whose gang fits
//!   idle capacity now within its queue's limits, as allocation's idle pass would take it (its
//!   queue's fair share counts only capacity its waiting gangs can start on, which the gang it
//!   is leaving cannot). If even the floor does not fit, it keeps its size and waits: a
//!   restart would gain nothing.
//! - **Grow.** A job that runs whole below what it asks for restarts with twice its pods (at
//!   most what it asks for) when the pods it would add fit idle capacity on the nodes its pods
//!   may use, within its queue's limits, and no other job has a pod waiting: growing never
//!   takes capacity somebody waits for. (Its fair share follows what it asks for now, so it may
//!   grow beyond it, into capacity nobody wants, which is reclaimed as usual once somebody does.)
//!
//! A job is resized only while it has exactly its gang's pods: while its controller makes or
//! removes pods (as it restarts the job), it is left alone.
//!
//! The action only decides ([`crate::session::Decisions::resizes`]); whoever runs the job
//! restarts it at the new size (the Job controller, the simulator), and a later cycle places it.

use crate::placement::Avail;
use crate::plugin::ShareBound;
use crate::session::JobResize;
use crate::snapshot::{JobId, PodId, Resize};

use super::{try_place_all, Ctx};

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let waiting: Vec<bool> = snap.jobs.keys().map(|j| ctx.ssn.pending_pods(j).next().is_some()).collect();
    let anyone_waits = waiting.iter().any(|&w| w);
    for job in snap.jobs.keys() {
        let Some(policy) = snap.jobs[job].resize else { continue };
        let size = snap.jobs[job].replicas() as u32;
        // Its pods are not all there: its controller is still making or removing them (a
        // restart at a new size under way). Nothing is decided on a partial job.
        if size != snap.jobs[job].min_member {
            continue;
        }
        let running = ctx.ssn.job_running[job];
        if running == 0 && ctx.ssn.job_pipelined[job] == 0 && waiting[job.0] && size > policy.floor {
            shrink(ctx, job, size, policy);
        } else if running == size && size < policy.ceiling && !anyone_waits {
            grow(ctx, job, size, policy);
        }
    }
}

/// The sizes a shrinking job of `size` tries, largest first: halves down to `floor`.
fn halvings(size: u32, floor: u32) -> impl Iterator<Item = u32> {
    let floor = floor.max(1);
    std::iter::successors(Some(size), move |&s| (s > floor).then(|| (s / 2).max(floor))).skip(1)
}

fn shrink(ctx: &mut Ctx, job: JobId, size: u32, policy: Resize) {
    let pods: Vec<PodId> = ctx.ssn.pending_pods(job).collect();
    for to in halvings(size, policy.floor) {
        let part = &pods[..(to as usize).min(pods.len())];
        let req = ctx.ssn.sum_requests(part);
        if ctx.fw.allocatable(ctx.ssn, job, &req, ShareBound::Idle).is_err() {
            continue;
        }
        if let Some(st) = try_place_all(ctx, part, Avail::Idle(None)) {
            ctx.ssn.discard(st);
            let why = format!(
                "elastic: its gang of {size} pods found no room, so it restarts with {to} (the most of its halvings \
                 down to {} that fit now)",
                policy.floor
            );
            ctx.ssn.set_reason(job, why.clone());
            ctx.ssn.decisions.resizes.push(JobResize { job, from: size, to, why });
            return;
        }
    }
}

fn grow(ctx: &mut Ctx, job: JobId, size: u32, policy: Resize) {
    let to = size.saturating_mul(2).min(policy.ceiling);
    let pods = &ctx.ssn.snap.jobs[job].tasks[0].pods;
    let Some(&first) = pods.first() else { return };
    let one = ctx.ssn.requests(first);
    let added = one.times(i64::from(to - size));
    // Its queue's fair share is capped by what it asks for now, so growing is bound by the
    // hard limits only: spare capacity that nobody waits for (and reclaimable once somebody does).
    if ctx.fw.allocatable(ctx.ssn, job, &added, ShareBound::Idle).is_err() {
        return;
    }
    let feasible = ctx.placer.feasibility(ctx.ssn, ctx.fw, first);
    let room: i64 = feasible.nodes.iter().map(|&n| ctx.ssn.idle_slots(n, one, None)).sum();
    if room >= i64::from(to - size) {
        let why =
            format!("elastic: {} more pods fit spare capacity and nothing waits, so it restarts with {to}", to - size);
        ctx.ssn.decisions.resizes.push(JobResize { job, from: size, to, why });
    }
}

#[cfg(test)]
mod tests {
    use super::halvings;

    #[test]
    fn a_job_halves_down_to_its_floor() {
        assert_eq!(halvings(16, 1).collect::<Vec<_>>(), [8, 4, 2, 1]);
        assert_eq!(halvings(16, 3).collect::<Vec<_>>(), [8, 4, 3]);
        assert_eq!(halvings(4, 4).count(), 0);
    }
}
