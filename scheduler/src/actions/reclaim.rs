//! Reclaim: across queues, give a starving pod group of a queue that stays within its fair
//! share the resources other queues use beyond their deserved quota. Priority plays no
//! part. Which units may be taken is the fair-share plugin's rule (KAI's: judged on the
//! sibling queues where the two paths part); victims come from queues over fair share
//! first, ranked again after each eviction, never non-preemptible work, and from
//! non-reclaimable queues only their elastic pods while overused. Nothing is evicted for a
//! group that already fits idle capacity, and in a StrictFIFO queue only the first waiting
//! job of each class may evict (for its minimum or its elastic pods). The group is
//! pipelined onto the freed capacity.

use crate::framework::{EvictMode, ShareBound, Victim};
use crate::res::Res;
use crate::snapshot::{JobId, JobPhase, PodId, QueueId, ROOT};

use super::{
    append_reason, class, evicting_jobs, fits_without_eviction, jobs_by_queue, make_room, select_queue, shortfall,
    starving, strict, Ctx, VictimPool,
};

/// Runs the action: first for gang minimums, then for elastic pods.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let running = jobs_by_queue(ctx, |j| ctx.ssn.job_running[j] > 0);
    let mut state = Reclaim {
        pool: VictimPool::new(EvictMode::Reclaim, running, snap.jobs.len()),
        failed: vec![None; snap.queues.len()],
    };
    let minimums = evicting_jobs(ctx);
    serve(ctx, &mut state, &minimums, &starving, &|c, j| c.ssn.gang_pods(j));
    // Then pending pods above the minimum, one pod per job per attempt (Run:ai: reclaim
    // "balances fairness" too), by the same rule.
    // In a StrictFIFO queue only the first waiting job of its class may evict, as for gang
    // minimums: a later job's elastic pods could not use what is freed (nothing passes the
    // waiting job there), and the victim would take it back next cycle.
    state.failed.fill(None);
    let firsts = first_waiting(ctx);
    let elastic = jobs_by_queue(ctx, |j| {
        let q = snap.jobs[j].queue;
        elastic_waiting(ctx, j) && (!strict(ctx, q) || firsts[q][class(ctx, j)] == Some(j))
    });
    serve(ctx, &mut state, &elastic, &elastic_waiting, &|c, j| c.ssn.pending_pods(j).take(1).collect());
}

/// A running job (at least its minimum) with pending elastic pods and none pipelined.
fn elastic_waiting(ctx: &Ctx, job: JobId) -> bool {
    ctx.ssn.job_pipelined[job] == 0 && ctx.fw.job_ready(ctx.ssn, job) && ctx.ssn.pending_pods(job).next().is_some()
}

/// Per leaf queue, its first admitted job with a pending pod in job order, per class (GPU,
/// CPU-only).
pub(super) fn first_waiting(ctx: &Ctx) -> Vec<[Option<JobId>; 2]> {
    let waiting =
        jobs_by_queue(ctx, |j| ctx.ssn.job_phase[j] != JobPhase::Pending && ctx.ssn.pending_pods(j).next().is_some());
    waiting
        .iter()
        .map(|jobs| {
            let mut firsts = [None; 2];
            for &j in jobs {
                firsts[class(ctx, j)].get_or_insert(j);
            }
            firsts
        })
        .collect()
}

/// What the attempts of one run share.
struct Reclaim {
    /// The units other queues may lose.
    pool: VictimPool,
    /// Per queue, a request that found no room: larger ones are not tried again.
    failed: Vec<Option<Res>>,
}

/// Serves the jobs listed per queue that still `want` room, most deprived queue first, each
/// job once; `pods` says which pods a job asks room for.
fn serve(
    ctx: &mut Ctx,
    state: &mut Reclaim,
    by_queue: &[Vec<JobId>],
    wants: &dyn Fn(&Ctx, JobId) -> bool,
    pods: &dyn Fn(&Ctx, JobId) -> Vec<PodId>,
) {
    let mut cursor = vec![0usize; by_queue.len()];
    loop {
        // Skip, for good, the listed jobs that no longer want room: reclaim only pipelines
        // and evicts, so a job that stopped wanting room (pipelined, or lost its minimum)
        // does not want it again within the action.
        let mut head = |c: &Ctx, q: usize| {
            while by_queue[q].get(cursor[q]).is_some_and(|&j| !wants(c, j)) {
                cursor[q] += 1;
            }
            by_queue[q].get(cursor[q]).copied()
        };
        let heads: Vec<Option<JobId>> = (0..by_queue.len()).map(|q| head(ctx, q)).collect();
        let Some(q) = select_queue(ctx, &|q| heads[q].is_some()) else { break };
        let job = heads[q].expect("selected queue has a job to serve");
        cursor[q] += 1;
        let wanted = pods(ctx, job);
        if !wanted.is_empty() {
            attempt(ctx, state, job, &wanted);
        }
    }
}

/// One reclaim attempt for `pods` of `job`.
fn attempt(ctx: &mut Ctx, state: &mut Reclaim, job: JobId, pods: &[PodId]) {
    let snap = ctx.ssn.snap;
    let q = snap.jobs[job].queue;
    let need = ctx.ssn.sum_requests(pods);
    if state.failed[q].as_ref().is_some_and(|r| r.fits_in(&need)) {
        return;
    }
    let fits = |c: &Ctx| c.fw.allocatable(c.ssn, job, &need, ShareBound::FairShare).is_ok();
    // The job's own queue must stay within its fair share; its ancestors are checked once
    // the victims are chosen (their allocation then drops by what is reclaimed below them).
    let (alloc, share) = (&ctx.ssn.queue_alloc[q], &ctx.ssn.fair_share[q]);
    // A queue already over its fair share in any resource sits out allocation's fair-share
    // passes, so what it reclaimed would go to whichever queue uses idle capacity first, the
    // victim's maybe, and be reclaimed again next cycle (Volcano's reclaim skips such queues
    // too).
    if ctx.fw.overused(ctx.ssn, q) {
        let over = (0..alloc.len()).find(|&r| r != snap.pods_resource && alloc[r] > share[r]);
        let why = match over {
            Some(r) => format!(
                "reclaim: queue {} is over its fair share ({} {} > {})",
                snap.queues[q].name,
                snap.resources[r],
                snap.amount(r, alloc[r]),
                snap.amount(r, share[r])
            ),
            None => format!("reclaim: queue {} is over its fair share", snap.queues[q].name),
        };
        append_reason(ctx, job, &why);
        return;
    }
    if let Some(r) = (0..need.len()).find(|&r| need[r] > 0 && alloc[r] + need[r] > share[r]) {
        let why = format!(
            "reclaim: queue {} would exceed its fair share ({} {} > {})",
            snap.queues[q].name,
            snap.resources[r],
            snap.amount(r, alloc[r] + need[r]),
            snap.amount(r, share[r])
        );
        append_reason(ctx, job, &why);
        return;
    }
    if fits_without_eviction(ctx, pods, &fits) {
        return;
    }
    // Whether the job's queue would go over its deserved quota with the request (in a
    // resource its quota governs), for the reason: then it may only take from queues above
    // their fair share.
    let own_over = {
        let (queue, alloc) = (&snap.queues[q], &ctx.ssn.queue_alloc[q]);
        (0..need.len()).any(|r| {
            r != snap.pods_resource && need[r] > 0 && queue.quota_covers(r) && alloc[r] + need[r] > queue.deserved[r]
        })
    };
    let pool = &mut state.pool;
    let queues: Vec<QueueId> = (0..snap.queues.len())
        .filter(|&v| v != q && v != ROOT && pool.has_running(v) && ctx.fw.may_reclaim_from(ctx.ssn, job, v))
        .collect();
    pool.prepare(ctx.ssn, ctx.fw, &queues);
    if !pool.units_of(&queues, job).any(|v| ctx.fw.may_evict(ctx.ssn, EvictMode::Reclaim, job, v)) {
        let why = no_victims(ctx, job, &need, own_over);
        append_reason(ctx, job, &why);
        state.failed[q] = Some(need);
        return;
    }
    let failure = |c: &mut Ctx, victims: &[&Victim]| shortfall(c, pods, victims, "reclaim");
    let outcome = make_room(ctx, job, pods, state.pool.order(&queues, job), EvictMode::Reclaim, &fits, &failure);
    match outcome {
        Some(since) => state.pool.forget_evicted(ctx.ssn, since),
        None => state.failed[q] = Some(need),
    }
}

/// Why no unit of another queue may be reclaimed for `job`; `own_over`: its queue would go
/// over its deserved quota with the request.
fn no_victims(ctx: &Ctx, job: JobId, need: &Res, own_over: bool) -> String {
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
    } else if own_over {
        format!(
            "reclaim: queue {} would go over its deserved quota and no other queue is above its fair share in {}",
            snap.queues[q].name,
            wanted.join(", ")
        )
    } else if ctx.fw.job_ready(ctx.ssn, job) {
        format!(
            "reclaim: elastic pods take only from queues above their fair share, and no other queue is above it in {}",
            wanted.join(", ")
        )
    } else {
        "reclaim: the work above other queues' deserved quota is non-preemptible or in non-reclaimable queues".into()
    }
}
