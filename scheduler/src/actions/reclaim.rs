//! Reclaim: across queues, give a starving pod group of a queue that stays within its fair
//! share the resources other queues use beyond their deserved quota. Priority plays no
//! part. Which units may be taken is the fair-share plugin's rule (KAI's: judged on the
//! sibling queues where the two paths part); victims come from queues over fair share
//! first, ranked again after each eviction, never non-preemptible work, and from
//! non-reclaimable queues only their elastic pods while overused. Nothing is evicted for a
//! group that already fits idle capacity. The group is pipelined onto the freed capacity.

use crate::framework::{EvictMode, ShareBound, Victim};
use crate::res::Res;
use crate::snapshot::{JobId, ROOT};

use super::{
    append_reason, evicting_jobs, fits_without_eviction, jobs_by_queue, make_room, select_queue, shortfall, starving,
    Ctx, VictimCache,
};

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let by_queue = evicting_jobs(ctx);
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
        let fits = |c: &Ctx| c.fw.allocatable(c.ssn, job, &need, ShareBound::FairShare).is_ok();
        // The job's own queue must stay within its fair share; its ancestors are checked once
        // the victims are chosen (their allocation then drops by what is reclaimed below them).
        let (alloc, share) = (&ctx.ssn.queue_alloc[q], &ctx.ssn.fair_share[q]);
        if let Some(r) = (0..need.len()).find(|&r| need[r] > 0 && alloc[r] + need[r] > share[r]) {
            let why = format!(
                "reclaim: queue {} would exceed its fair share ({} {} > {})",
                snap.queues[q].name,
                snap.resources[r],
                snap.amount(r, alloc[r] + need[r]),
                snap.amount(r, share[r])
            );
            append_reason(ctx, job, &why);
            continue;
        }
        if fits_without_eviction(ctx, job, &fits) {
            continue;
        }
        // Whether a queue is above its deserved quota in a resource the gang needs (a
        // resource a queue does not name counts as deserved 0), for the reason.
        let above_deserved = |a: usize| {
            let (alloc, deserved) = (&ctx.ssn.queue_alloc[a], &snap.queues[a].deserved);
            (0..need.len()).any(|r| r != snap.pods_resource && need[r] > 0 && alloc[r] > deserved[r])
        };
        let above = |v: usize| ctx.fw.may_reclaim_from(ctx.ssn, job, v);
        let others = || {
            (0..running.len())
                .filter(|&v| v != q && v != ROOT && !running[v].is_empty() && above(v))
                .flat_map(|v| running[v].iter().copied())
                .filter(|&o| ctx.ssn.job_running[o] > 0)
        };
        cache.fill(ctx.ssn, others());
        let candidates: Vec<&Victim> = others()
            .flat_map(|o| cache.of(o))
            .filter(|v| ctx.fw.may_evict(ctx.ssn, EvictMode::Reclaim, job, v))
            .collect();
        if candidates.is_empty() {
            let why = no_victims(ctx, job, &need, above_deserved(q));
            append_reason(ctx, job, &why);
            failed[q] = Some(need);
            continue;
        }
        let failure = |c: &mut Ctx, victims: &[&Victim]| shortfall(c, job, victims, "reclaim");
        match make_room(ctx, job, candidates, EvictMode::Reclaim, &fits, &failure) {
            Some(since) => cache.forget_evicted(ctx.ssn, since),
            None => failed[q] = Some(need),
        }
    }
}

/// Why no unit of another queue may be reclaimed for `job`.
fn no_victims(ctx: &Ctx, job: JobId, need: &Res, own_above: bool) -> String {
    let snap = ctx.ssn.snap;
    let wanted: Vec<&str> = (0..need.len())
        .filter(|&r| r != snap.pods_resource && need[r] > 0)
        .map(|r| snap.resources[r].as_str())
        .collect();
    let q = snap.jobs[job].queue;
    let any_above = (1..snap.queues.len()).any(|v| {
        v != q && snap.queues[v].children.is_empty() && {
            let (alloc, deserved) = (&ctx.ssn.queue_alloc[v], &snap.queues[v].deserved);
            (0..need.len()).any(|r| r != snap.pods_resource && need[r] > 0 && alloc[r] > deserved[r])
        }
    });
    if !any_above {
        format!("reclaim: no other queue is above its deserved quota in {}", wanted.join(", "))
    } else if own_above {
        format!(
            "reclaim: queue {} is above its deserved quota and no other queue is above its fair share in {}",
            snap.queues[q].name,
            wanted.join(", ")
        )
    } else {
        "reclaim: the work above other queues' deserved quota is non-preemptible or in non-reclaimable queues".into()
    }
}
