//! Reclaim: across queues, give a starving pod group of a queue below its fair share the
//! resources other queues use beyond their deserved quota. Priority plays no part; victims
//! come from queues over fair share first, then over quota, never below a queue's deserved
//! quota, never non-preemptible work, and from non-reclaimable queues only their elastic
//! pods while overused. The group is pipelined onto the freed capacity.

use crate::framework::{EvictMode, ShareBound, Victim};
use crate::res::Res;
use crate::snapshot::JobId;

use super::{jobs_by_queue, make_room, select_queue, starving, Ctx, VictimCache};

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let by_queue = jobs_by_queue(ctx, |j| starving(ctx, j));
    let running = jobs_by_queue(ctx, |j| ctx.ssn.job_running[j] > 0);
    let mut cache = VictimCache::new(snap.jobs.len());
    let mut cursor = vec![0usize; by_queue.len()];
    let mut failed: Vec<Option<Res>> = vec![None; by_queue.len()];
    loop {
        let head =
            |c: &Ctx, q: usize, cursor: &[usize]| by_queue[q][cursor[q]..].iter().copied().find(|&j| starving(c, j));
        let Some(q) = select_queue(ctx, &|q| head(ctx, q, &cursor).is_some()) else { break };
        let job: JobId = head(ctx, q, &cursor).expect("selected queue has a starving job");
        cursor[q] = by_queue[q].iter().position(|&j| j == job).expect("job is listed") + 1;
        let gang = ctx.ssn.gang_pods(job);
        let need = ctx.ssn.sum_requests(&gang);
        if failed[q].as_ref().is_some_and(|r| r.fits_in(&need)) {
            continue;
        }
        let within_share =
            (0..need.len()).all(|r| need[r] == 0 || ctx.ssn.queue_alloc[q][r] + need[r] <= ctx.ssn.fair_share[q][r]);
        if !within_share {
            continue;
        }
        let others = || {
            (0..running.len())
                .filter(|&v| v != q && !running[v].is_empty() && snap.queues[v].over_quota(&ctx.ssn.queue_alloc[v]))
                .flat_map(|v| running[v].iter().copied())
                .filter(|&o| ctx.ssn.job_running[o] > 0)
        };
        cache.fill(ctx.ssn, others());
        let candidates: Vec<&Victim> = others()
            .flat_map(|o| cache.of(o))
            .filter(|v| ctx.fw.may_evict(ctx.ssn, EvictMode::Reclaim, job, v))
            .collect();
        if candidates.is_empty() {
            failed[q] = Some(need);
            continue;
        }
        let fits = |c: &Ctx| c.fw.allocatable(c.ssn, job, &need, ShareBound::FairShare).is_ok();
        let failure = "reclaiming from other queues would not let it start";
        match make_room(ctx, job, candidates, EvictMode::Reclaim, &fits, failure) {
            Some(since) => cache.forget_evicted(ctx.ssn, since),
            None => failed[q] = Some(need),
        }
    }
}
