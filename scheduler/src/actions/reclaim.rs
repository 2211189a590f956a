//! Reclaim: across queues, give a starving pod group of a queue that stays within its fair
//! share the resources other queues use beyond their deserved quota. Priority plays no
//! part. Which units may be taken is the fair-share plugin's rule (KAI's: judged on the
//! sibling queues where the two paths part); victims come from queues over fair share
//! first, ranked again after each eviction, never non-preemptible work within its queue's
//! deserved quota (beyond it, it is taken like any other: see the priority plugin), and from
//! non-reclaimable queues only their elastic pods while overused. Nothing is evicted for a
//! group that already fits idle capacity, and in a StrictFIFO queue only the first waiting
//! job of each class may evict (for its minimum or its elastic pods). The group is
//! pipelined onto the freed capacity.

use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::plugin::{EvictMode, Rule, ShareBound, Subject, Victim, Why};
use crate::res::Res;
use crate::snapshot::{JobId, PodId, QueueId, ROOT};

use super::{
    append_reason, elastic_evicting_jobs, elastic_waiting, evicting_jobs, fits_without_eviction, jobs_by_queue,
    make_room, serve_elastic_need, serve_in_queue_order, shortfall, starving, Ctx, Failure, NoRoom, VictimPool,
};

/// Runs the action: first for gang minimums, then for elastic pods.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let running = jobs_by_queue(ctx, |j| ctx.ssn.job_running[j] > 0);
    let mut state = Reclaim {
        pool: VictimPool::new(EvictMode::Reclaim, running, snap.jobs.len()),
        failed: ti_vec![None; snap.queues.len()],
    };
    let minimums = evicting_jobs(ctx);
    serve(ctx, &mut state, &minimums, &starving, &|c, state, job| {
        let gang = c.ssn.gang_pods(job);
        if !gang.is_empty() {
            attempt(c, state, job, &gang, true);
        }
    });
    // Then pending pods above the minimum (of jobs whose minimum runs or was just pipelined),
    // by the same rule; Run:ai's reclaim "balances fairness" too.
    state.failed.fill(None);
    let elastic = elastic_evicting_jobs(ctx);
    serve(ctx, &mut state, &elastic, &elastic_waiting, &serve_elastic);
}

/// What the attempts of one run share.
struct Reclaim {
    /// The units other queues may lose.
    pool: VictimPool,
    /// Per queue, a request that found no room (see [`NoRoom`]).
    failed: TiVec<QueueId, Option<NoRoom>>,
}

/// Serves the jobs listed per queue that still `want` room, most deprived queue first, each
/// job once, by `attempts`.
fn serve(
    ctx: &mut Ctx,
    state: &mut Reclaim,
    by_queue: &TiSlice<QueueId, Vec<JobId>>,
    wants: &dyn Fn(&Ctx, JobId) -> bool,
    attempts: &dyn Fn(&mut Ctx, &mut Reclaim, JobId),
) {
    serve_in_queue_order(ctx, by_queue, wants, &|_, _| true, &mut |c, job| attempts(c, state, job));
}

/// Serves a job's elastic pods (see [`serve_elastic_need`]); each pod is judged by the same
/// rules either way: taking a batch only saves the cycles a pod per attempt would cost. A
/// whole request that fails is tried again in parts, so it does not add to the reason.
fn serve_elastic(ctx: &mut Ctx, state: &mut Reclaim, job: JobId) {
    serve_elastic_need(ctx, job, &mut |c, pods, whole| attempt(c, state, job, pods, !whole));
}

/// One reclaim attempt for `pods` of `job`; whether it made room. `explain`: whether a
/// failure adds to the job's reason (not for a request that is tried again in parts).
fn attempt<'s>(ctx: &mut Ctx<'_, 's>, state: &mut Reclaim, job: JobId, pods: &[PodId], explain: bool) -> bool {
    let snap = ctx.ssn.snap;
    let q = snap.jobs[job].queue;
    let need = ctx.ssn.sum_requests(pods);
    if state.failed[q].as_ref().is_some_and(|f| f.covers(ctx, job, &need)) {
        return false;
    }
    let fits = |c: &Ctx| c.fw.allocatable(c.ssn, job, &need, ShareBound::FairShare).is_ok();
    if let Err(why) = ctx.fw.may_reclaim(ctx.ssn, job, &need) {
        // A refusal the job's reason already gives is not said twice.
        if explain && ctx.ssn.blocked_by[job].map(|b| b.rule) != Some(why.rule) {
            append_reason(ctx, job, &format!("reclaim: {why}"));
        }
        return false;
    }
    if fits_without_eviction(ctx, pods, &fits) {
        return false;
    }
    // The furthest any queue or unit got before a plugin refused it, for the reason.
    let mut furthest: Option<Why> = None;
    let mut refused = |why: Why<'s>| {
        if furthest.is_none_or(|f| progress(f.rule) < progress(why.rule)) {
            furthest = Some(why);
        }
    };
    let pool = &mut state.pool;
    let queues: Vec<QueueId> = snap
        .queues
        .keys()
        .filter(|&v| v != q && v != ROOT && pool.has_running(v))
        .filter(|&v| ctx.fw.may_reclaim_from(ctx.ssn, job, v).map_err(&mut refused).is_ok())
        .collect();
    pool.prepare(ctx.ssn, ctx.fw, &queues);
    let order = pool.order(&queues, job);
    if !order.units().any(|v| ctx.fw.may_evict(ctx.ssn, EvictMode::Reclaim, job, v).map_err(&mut refused).is_ok()) {
        if explain {
            let why = no_victims(ctx, job, &need, furthest);
            append_reason(ctx, job, &why);
        }
        state.failed[q] = Some(NoRoom::new(ctx, job, need));
        return false;
    }
    let failure = |c: &mut Ctx, victims: &[&Victim]| shortfall(c, pods, victims, "reclaim");
    let failure = explain.then_some(&failure as &Failure);
    let outcome = make_room(ctx, job, pods, order, EvictMode::Reclaim, &fits, failure);
    match outcome {
        Some(since) => {
            state.pool.forget_evicted(ctx.ssn, since);
            true
        }
        None => {
            state.failed[q] = Some(NoRoom::new(ctx, job, need));
            false
        }
    }
}

/// How far a refusal by `rule` got towards taking a unit: whether the request uses a quota
/// resource at all, then whether the queue is above its deserved quota in one, then the
/// rest, and last a unit every other rule let go but that has not run its minimum run time.
fn progress(rule: Rule) -> u8 {
    match rule {
        Rule::OutsideQuota => 0,
        Rule::NotAboveDeserved => 1,
        Rule::MinRuntime => 3,
        _ => 2,
    }
}

/// Why no unit of another queue may be reclaimed for `job`'s request of `need`, from the
/// refusal that got furthest over every queue and unit (`None`: no other queue runs
/// anything) and, once some queue is above its deserved quota, from the rule that decides
/// which of them the job may take from.
fn no_victims(ctx: &Ctx, job: JobId, need: &Res, furthest: Option<Why>) -> String {
    let snap = ctx.ssn.snap;
    let names = |keep: &dyn Fn(usize) -> bool| {
        let list: Vec<&str> = (0..need.len()).filter(|&r| keep(r)).map(|r| snap.resources[r].as_str()).collect();
        list.join(", ")
    };
    let asked = |r: usize| r != snap.pods_resource && need[r] > 0;
    let wanted = names(&asked);
    let quota_wanted = names(&|r| asked(r) && snap.quota_resources[r]);
    match furthest.as_ref().map(|w| w.rule) {
        Some(Rule::MinRuntime) => format!("reclaim: {}", furthest.expect("a refusal")),
        Some(Rule::OutsideQuota) | None if quota_wanted.is_empty() => {
            let quota = names(&|r| snap.quota_resources[r]);
            format!("reclaim: queue quotas cover only {quota}, which the request ({wanted}) does not use")
        }
        None | Some(Rule::NotAboveDeserved) => {
            format!("reclaim: no other queue is above its deserved quota in {quota_wanted}")
        }
        _ => match ctx.fw.within_deserved(ctx.ssn, job, need) {
            Err(Why { subject: Subject::Queue(q), .. }) => format!(
                "reclaim: queue {} would go over its deserved quota and no other queue is above its fair share in {}",
                snap.queues[q].name, wanted
            ),
            _ if ctx.fw.job_ready(ctx.ssn, job) => format!(
                "reclaim: elastic pods take only from queues above their fair share, and no other queue is above it in {}",
                wanted
            ),
            _ => format!(
                "reclaim: the work above other queues' deserved quota in {quota_wanted} is non-preemptible or in \
                 non-reclaimable queues ({})",
                furthest.expect("a refusal")
            ),
        },
    }
}
