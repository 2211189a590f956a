//! Whose turn it is: which jobs want room, in which order their queues are served, and the
//! `StrictFIFO` rule that only a queue's first waiting job may evict for its gang.

use super::queue_choice::QueueChoice;
use super::Ctx;
use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::plugin::ShareBound;
use crate::res::Res;
use crate::snapshot::{JobId, JobPhase, PodId, QueueId, QueueingStrategy};

/// Whether a job is admitted and below its gang minimum with pods to place.
pub fn starving(ctx: &Ctx, job: JobId) -> bool {
    let ssn = &ctx.ssn;
    ssn.job_phase[job] != JobPhase::Pending
        && ssn.job_pipelined[job] == 0
        && !ctx.fw.job_ready(ssn, job)
        && ssn.pending_pods(job).next().is_some()
        && ssn.min_reachable(job)
}

/// The starving jobs of each leaf queue that may evict for their gang, in job order: every
/// starving job, except that in a `StrictFIFO` queue only the first waiting job of each class
/// (GPU, CPU-only) may, as nothing passes it there.
pub fn evicting_jobs(ctx: &Ctx) -> TiVec<QueueId, Vec<JobId>> {
    let firsts = first_waiting(ctx);
    jobs_by_queue(ctx, |j| starving(ctx, j) && in_turn(ctx, &firsts, j))
}

/// A job with pending elastic pods: its minimum runs, or is pipelined (then its elastic pods
/// may be served in the same cycle as its minimum, and in the cycles its victims take to
/// terminate).
pub fn elastic_waiting(ctx: &Ctx, job: JobId) -> bool {
    let ssn = &ctx.ssn;
    let ready = match ssn.job_pipelined[job] {
        0 => ctx.fw.job_ready(ssn, job),
        _ => ssn.minimum_placed(job),
    };
    ready && ssn.pending_pods(job).next().is_some()
}

/// Serves a job's elastic pods: its whole elastic need (see [`elastic_request`]) by `try_pods`
/// in one go (`whole` true); when that fails, pod by pod, up to as many, while `try_pods`
/// succeeds. Reclaim and claims both grow a job this way.
pub fn serve_elastic_need(ctx: &mut Ctx, job: JobId, try_pods: &mut dyn FnMut(&mut Ctx, &[PodId], bool) -> bool) {
    let request = elastic_request(ctx, job);
    if request.len() > 1 && try_pods(ctx, &request, true) {
        return;
    }
    for _ in 0..request.len() {
        let Some(pod) = ctx.ssn.pending_pods(job).next() else { break };
        if !try_pods(ctx, &[pod], false) {
            break;
        }
    }
}

/// A job's whole elastic need as one request: the longest run of its pending pods, in order,
/// that the plugins allow its queue within fair share (and every other bound), or else its
/// first pending pod alone (to be refused with a reason). Reclaim and claims ask for it in
/// one attempt, so that a queue gets what it is owed in one cycle, not a pod per cycle; the
/// fair share bounds the reclaimer as the victims' fair shares bound what they lose.
pub fn elastic_request(ctx: &Ctx, job: JobId) -> Vec<PodId> {
    let mut pods: Vec<PodId> = ctx.ssn.pending_pods(job).collect();
    let mut sum = Res::zero(ctx.ssn.snap.resources.len());
    let totals: Vec<Res> = pods
        .iter()
        .map(|&p| {
            sum.add(ctx.ssn.requests(p));
            sum.clone()
        })
        .collect();
    let allowed = totals.partition_point(|t| ctx.fw.allocatable(ctx.ssn, job, t, ShareBound::FairShare).is_ok());
    pods.truncate(allowed.max(1));
    pods
}

/// The jobs of each leaf queue whose elastic pods may evict, in job order, by the same
/// `StrictFIFO` rule as [`evicting_jobs`]: a later job's elastic pods could not use what is
/// freed there (nothing passes the waiting job), and the victim would take it back.
pub fn elastic_evicting_jobs(ctx: &Ctx) -> TiVec<QueueId, Vec<JobId>> {
    let firsts = first_waiting(ctx);
    jobs_by_queue(ctx, |j| elastic_waiting(ctx, j) && in_turn(ctx, &firsts, j))
}

/// Per leaf queue, its first admitted job with a pending pod in job order, per class (GPU,
/// CPU-only): in a `StrictFIFO` queue only these jobs' turn has come.
fn first_waiting(ctx: &Ctx) -> TiVec<QueueId, [Option<JobId>; 2]> {
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

/// Whether a job's turn has come in its queue: always, except in a `StrictFIFO` queue
/// (see [`first_waiting`]).
fn in_turn(ctx: &Ctx, firsts: &TiSlice<QueueId, [Option<JobId>; 2]>, job: JobId) -> bool {
    let q = ctx.ssn.snap.jobs[job].queue;
    !strict(ctx, q) || firsts[q][class(ctx, job)] == Some(job)
}

/// Serves the jobs listed per leaf queue, most deprived `eligible` queue first, each job
/// once. Jobs that no longer `want` to be served are skipped for good: the callers only
/// pipeline and evict, so a job that stopped wanting room (pipelined, or lost its minimum)
/// does not want it again within the action.
pub fn serve_in_queue_order(
    ctx: &mut Ctx,
    by_queue: &TiSlice<QueueId, Vec<JobId>>,
    wants: &dyn Fn(&Ctx, JobId) -> bool,
    eligible: &dyn Fn(&Ctx, QueueId) -> bool,
    serve: &mut dyn FnMut(&mut Ctx, JobId),
) {
    let mut cursor = ti_vec![0usize; by_queue.len()];
    let head = |c: &Ctx, cursor: &mut TiVec<QueueId, usize>, q: QueueId| {
        while by_queue[q].get(cursor[q]).is_some_and(|&j| !wants(c, j)) {
            cursor[q] += 1;
        }
        by_queue[q].get(cursor[q]).copied()
    };
    let mut heads: TiVec<QueueId, Option<JobId>> = by_queue.keys().map(|q| head(ctx, &mut cursor, q)).collect();
    let mut choice = QueueChoice::new(ctx);
    // Whether a job wants room depends on its own pods only, so a queue's head changes only
    // when the session changes its jobs or it is served.
    let mut seen = ctx.ssn.changed_queues.len();
    let mut touched = ti_vec![false; by_queue.len()];
    while let Some(q) = choice.next(ctx, &|q| heads[q].is_some() && eligible(ctx, q)) {
        let job = heads[q].expect("selected queue has a job to serve");
        cursor[q] += 1;
        serve(ctx, job);
        let mut changed: Vec<QueueId> = vec![q];
        touched[q] = true;
        for &c in &ctx.ssn.changed_queues[seen..] {
            if !std::mem::replace(&mut touched[c], true) {
                changed.push(c);
            }
        }
        seen = ctx.ssn.changed_queues.len();
        for c in changed {
            touched[c] = false;
            let now = head(ctx, &mut cursor, c);
            if std::mem::replace(&mut heads[c], now) != now || c == q {
                choice.changed(ctx.ssn.snap, c);
            }
        }
    }
}

/// Whether the queue starts its jobs strictly in order.
pub fn strict(ctx: &Ctx, q: QueueId) -> bool {
    ctx.ssn.snap.queues[q].strategy == QueueingStrategy::StrictFifo
}

/// 0 for GPU jobs, 1 for CPU-only jobs: StrictFIFO holds each class separately.
pub fn class(ctx: &Ctx, job: JobId) -> usize {
    usize::from(!ctx.ssn.snap.jobs[job].tasks.iter().any(|t| t.gpu))
}

/// Jobs of each leaf queue matching `keep`, in the framework's job order.
pub fn jobs_by_queue(ctx: &Ctx, keep: impl Fn(JobId) -> bool) -> TiVec<QueueId, Vec<JobId>> {
    let mut by_queue = ti_vec![Vec::new(); ctx.ssn.snap.queues.len()];
    for j in ctx.ssn.snap.jobs.keys() {
        if keep(j) {
            by_queue[ctx.ssn.snap.jobs[j].queue].push(j);
        }
    }
    for list in &mut by_queue {
        list.sort_by(|&a, &b| ctx.fw.job_order(ctx.ssn, a, b));
    }
    by_queue
}
