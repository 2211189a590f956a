//! Preempt: within one queue, make room for a starving pod group (admitted, below its gang
//! minimum) by evicting elastic pods (of jobs of equal or lower priority) and then whole
//! lower-priority preemptible jobs, lowest priority and newest first. Evictions happen only
//! when they let the starving group reach its minimum, never for a group that already fits
//! idle capacity, and in a StrictFIFO queue only for the first waiting job; the group is then
//! pipelined onto the capacity being freed and bound in a later cycle.

use super::{
    append_reason, evicting_jobs, fits_without_eviction, jobs_by_queue, make_room, shortfall, starving, Ctx, NoRoom,
    VictimPool,
};
use crate::plugin::{EvictMode, Rule, ShareBound, Victim};

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let starving_jobs = evicting_jobs(ctx);
    let running = jobs_by_queue(ctx, |j| ctx.ssn.job_running[j] > 0);
    let mut pool = VictimPool::new(EvictMode::Preempt, running, snap.jobs.len());
    for (q, jobs) in starving_jobs.iter_enumerated() {
        let mut failed: Option<(NoRoom, i32)> = None;
        for &job in jobs {
            if !starving(ctx, job) {
                continue;
            }
            let gang = ctx.ssn.gang_pods(job);
            let need = ctx.ssn.sum_requests(&gang);
            let priority = snap.jobs[job].priority;
            if failed.as_ref().is_some_and(|(f, p)| priority <= *p && f.covers(ctx, job, &need)) {
                continue;
            }
            let fits = |c: &Ctx| c.fw.allocatable(c.ssn, job, &need, ShareBound::Idle).is_ok();
            if fits_without_eviction(ctx, &gang, &fits) {
                continue;
            }
            let queues = [q];
            pool.prepare(ctx.ssn, ctx.fw, &queues);
            let order = pool.order(&queues, job);
            let mut protected = None;
            let mut evictable = |v: &Victim| match ctx.fw.may_evict(ctx.ssn, EvictMode::Preempt, job, v) {
                Ok(()) => true,
                Err(why) => {
                    if why.rule == Rule::MinRuntime {
                        protected.get_or_insert(why.to_string());
                    }
                    false
                }
            };
            if !order.units().any(&mut evictable) {
                // Work that only its minimum run time keeps is worth naming: it lapses.
                if let Some(why) = protected {
                    append_reason(ctx, job, &format!("preempt: {why}"));
                }
                failed = Some((NoRoom::new(ctx, job, need), priority));
                continue;
            }
            let failure = |c: &mut Ctx, victims: &[&Victim]| shortfall(c, &gang, victims, "preempt");
            match make_room(ctx, job, &gang, order, EvictMode::Preempt, &fits, Some(&failure)) {
                Some(since) => pool.forget_evicted(ctx.ssn, since),
                None => failed = Some((NoRoom::new(ctx, job, need), priority)),
            }
        }
    }
}
