//! Enqueue: admit pending pod groups whose queue can hold their minimum resources. Admitted
//! groups (phase `Inqueue`) reserve their minimum in their queues until placed, so that a
//! queue does not admit more than its limit can ever run. Elastic pods, and work the group
//! could preempt in its own queue, count as free (they can be taken back). A group admitted
//! but not started is judged again alone every cycle, and goes back to pending when it could
//! never start (see [`crate::plugin::Plugin::enqueueable`]).

use crate::ids::{ti_vec, TiSlice};
use crate::res::Res;
use crate::snapshot::{JobId, JobPhase, QueueId, ROOT};

use super::Ctx;

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let n = snap.resources.len();
    let mut reserved = ti_vec![Res::zero(n); snap.queues.len()];
    let mut pending: Vec<JobId> = Vec::new();
    for j in snap.jobs.keys() {
        match ctx.ssn.job_phase[j] {
            JobPhase::Pending if !ctx.fw.job_ready(ctx.ssn, j) => pending.push(j),
            JobPhase::Inqueue if ctx.ssn.job_running[j] == 0 => match ctx.fw.enqueueable(ctx.ssn, j, None) {
                Ok(()) => reserve(ctx, j, &mut reserved),
                Err(why) => {
                    ctx.ssn.job_phase[j] = JobPhase::Pending;
                    ctx.ssn.set_refusal(j, format!("not admitted: {why}"), Some(why.into()));
                }
            },
            JobPhase::Inqueue => reserve(ctx, j, &mut reserved),
            _ => {}
        }
    }
    pending.sort_by(|&a, &b| ctx.fw.job_order(ctx.ssn, a, b));
    for j in pending {
        match ctx.fw.enqueueable(ctx.ssn, j, Some(&reserved)) {
            Ok(()) => {
                ctx.ssn.job_phase[j] = JobPhase::Inqueue;
                reserve(ctx, j, &mut reserved);
            }
            Err(why) => ctx.ssn.set_refusal(j, format!("not admitted: {why}"), Some(why.into())),
        }
    }
}

/// Adds the unplaced part of a job's minimum to its queue chain's reservations.
fn reserve(ctx: &Ctx, job: JobId, reserved: &mut TiSlice<QueueId, Res>) {
    let min = ctx.ssn.gang_request(job);
    let snap = ctx.ssn.snap;
    for q in snap.ancestry(snap.jobs[job].queue).chain(std::iter::once(ROOT)) {
        reserved[q].add(&min);
    }
}
