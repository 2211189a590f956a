//! Claiming capacity that evictions are freeing, within allocate.
//!
//! Preempt and reclaim pipeline a job onto the nodes whose pods they evict, and evicted pods
//! may take several cycles to terminate. Until they do, the job cannot be placed: the
//! capacity is not idle yet. Without a claim, allocation would hand the idle rest of those
//! nodes, and then the freed capacity itself, to other work first, and the job would need
//! more victims (in another domain, for a gang that asks for one); with slow termination,
//! the same job could lose pods to reclaim again and again.
//!
//! **Kept claims** ([`keep`]) come first. A pipelined pod comes to the next cycle nominated
//! to its node (the scheduler keeps the nominations in the PodGroup's status, so a new
//! leader has them too). Before anything else is placed, each job's nominated pods are
//! placed again as one statement, each on its own node when that node still passes the
//! pod's filters, will have room for it and keeps the job's topology requirements, else on
//! the same nodes in whatever order the usual placement finds: bound there once the
//! victims are gone, pipelined again while they terminate. Pods whose nodes have room
//! already bind at once when they complete the gang without the others (a job's elastic
//! pods, or a gang whose minimum runs), so a claim never holds back work that could start.
//! A claim is dropped, and its pods wait like any others, only when it can no longer be met:
//! its nodes no longer hold its pods, its queue's fair share no longer allows them, or they
//! no longer complete the gang (its minimum grew). And a job whose victims have not all
//! terminated starts at once wherever its pods fit idle capacity now, rather than wait for
//! them (once every claim holds its nodes, so it takes no other job's claim).
//!
//! **Claims found again** ([`run`]), for jobs that wait without a kept claim (a claim that
//! could not be met, or nominations lost): after the fair-share passes, jobs that still wait
//! within their fair share claim the capacity being freed, in queue order. Gang minimums come
//! first, then each job's elastic pods (all it may have within its fair share at once, else
//! pod by pod). A claim takes capacity being freed first and idle
//! capacity for the rest of a gang (as the reclaim that freed it pipelined the gang), and only
//! where the job fits without evicting anything. Jobs that may not evict claim nothing: in a
//! `StrictFIFO` queue only the first waiting job of each class claims (as in preempt and
//! reclaim), and queues over their fair share claim nothing.

use crate::ids::{JobId, NodeId, PodId, QueueId, TiSlice};
use crate::placement::Avail;
use crate::plugin::ShareBound;
use crate::session::{PodState, Statement};
use crate::snapshot::JobPhase;

use super::{
    elastic_evicting_jobs, elastic_waiting, evicting_jobs, jobs_by_queue, serve_elastic_need, serve_in_queue_order,
    starving, try_place_all, Ctx,
};

/// Why a job with pipelined pods still waits.
const WAITING_FOR_VICTIMS: &str = "waiting for evicted pods to terminate on the nodes it will use";

/// Places every job's nominated pods again on their nodes, in queue order, then starts
/// those that must still wait for their victims on idle capacity elsewhere if they fit there
/// now (see the module documentation); allocate calls it before anything else.
pub fn keep(ctx: &mut Ctx) {
    let ssn = &ctx.ssn;
    let snap = ssn.snap;
    let mut claimed = vec![false; snap.jobs.len()];
    for (p, pod) in snap.pods.iter_enumerated() {
        if pod.nominated.is_some() && ssn.pod_state[p] == PodState::Pending {
            claimed[pod.job.0] = true;
        }
    }
    if !claimed.contains(&true) {
        return;
    }
    let by_queue = jobs_by_queue(ctx, |j| claimed[j.0] && ctx.ssn.job_phase[j] != JobPhase::Pending);
    let unclaimed = |c: &Ctx, j: JobId| c.ssn.job_pipelined[j] == 0;
    // Pipelined claims stay uncommitted until every claim holds its nodes, so that a job
    // moving to idle capacity cannot take capacity another job's claim was about to keep.
    let mut waiting: Vec<(JobId, Statement)> = Vec::new();
    serve_in_queue_order(ctx, &by_queue, &unclaimed, &|_, _| true, &mut |ctx, job| {
        if let Some(pipe) = keep_claim(ctx, job) {
            waiting.push((job, pipe));
        }
    });
    for (job, pipe) in waiting {
        start_elsewhere_or_wait(ctx, job, pipe);
    }
}

/// Places the job's nominated pods on their nodes: binds them there (committed) when every
/// one fits there now, else returns the uncommitted statement pipelining those that must
/// still wait, after binding the others when they complete the gang on their own (an elastic
/// job starts each pod as soon as its victims are gone); `None` when all bound, or when the
/// claim can no longer be met.
fn keep_claim(ctx: &mut Ctx, job: JobId) -> Option<Statement> {
    let ssn = &ctx.ssn;
    let nominated: Vec<(PodId, NodeId)> =
        ssn.pending_pods(job).filter_map(|p| ssn.snap.pods[p].nominated.map(|n| (p, n))).collect();
    let pods: Vec<PodId> = nominated.iter().map(|&(p, _)| p).collect();
    let mut nodes: Vec<NodeId> = nominated.iter().map(|&(_, n)| n).collect();
    nodes.sort_unstable();
    nodes.dedup();
    if !completes_gang(ctx, job, &pods) {
        return None;
    }
    let need = ctx.ssn.sum_requests(&pods);
    if ctx.fw.allocatable(ctx.ssn, job, &need, ShareBound::FairShare).is_err() {
        return None;
    }
    let pipe = match on_nominated_nodes(ctx, job, &nominated) {
        Some(pipe) => pipe,
        None => try_place_all(ctx, &pods, Avail::Releasing(&nodes))?,
    };
    let placed = pipelined(ctx, job);
    ctx.ssn.discard(pipe);
    let mut bind = Statement::new();
    let mut later = Vec::new();
    for &(p, n) in &placed {
        if ctx.ssn.fits_idle(n, ctx.ssn.requests(p), None) {
            ctx.ssn.allocate(&mut bind, p, n);
        } else {
            later.push((p, n));
        }
    }
    if later.is_empty() {
        ctx.ssn.commit(bind);
        return None;
    }
    // The pods bound now count as running: the job is ready when they complete its gang.
    if later.len() == placed.len() || !ctx.fw.job_ready(ctx.ssn, job) {
        ctx.ssn.discard(bind);
        return Some(pipeline(ctx, &placed));
    }
    ctx.ssn.commit(bind);
    Some(pipeline(ctx, &later))
}

/// Pipelines each nominated pod onto its own node, when the node still passes the pod's
/// filters and will have room for it, and the job's topology requirements still hold there;
/// `None` otherwise (the caller then looks for room on the same nodes in any order).
fn on_nominated_nodes(ctx: &mut Ctx, job: JobId, nominated: &[(PodId, NodeId)]) -> Option<Statement> {
    if let Some(group) = ctx.placer.groups(ctx.ssn.snap, ctx.fw, job) {
        let ssn = &ctx.ssn;
        let node_of =
            |p: PodId| nominated.iter().find(|&&(q, _)| q == p).map(|&(_, n)| n).or(ssn.pod_state[p].running_on());
        if !group.holds(ssn.snap, &node_of) {
            return None;
        }
    }
    let mut st = Statement::new();
    for &(p, n) in nominated {
        let fits = ctx.placer.feasibility(ctx.ssn, ctx.fw, p).ok(n) && ctx.ssn.fits_future(n, ctx.ssn.requests(p));
        if !fits {
            ctx.ssn.discard(st);
            return None;
        }
        ctx.ssn.pipeline(&mut st, p, n);
    }
    Some(st)
}

/// Binds a job whose claim still waits for its victims wherever its pods fit idle capacity
/// now, or commits the claim (`pipe`) when they fit nowhere.
fn start_elsewhere_or_wait(ctx: &mut Ctx, job: JobId, pipe: Statement) {
    let placed = pipelined(ctx, job);
    let pods: Vec<PodId> = placed.iter().map(|&(p, _)| p).collect();
    ctx.ssn.discard(pipe);
    match try_place_all(ctx, &pods, Avail::Idle(None)) {
        Some(start) => ctx.ssn.commit(start),
        None => {
            let pipe = pipeline(ctx, &placed);
            ctx.ssn.commit(pipe);
            ctx.ssn.set_reason(job, WAITING_FOR_VICTIMS.into());
        }
    }
}

/// The job's pipelined pods and their nodes.
fn pipelined(ctx: &Ctx, job: JobId) -> Vec<(PodId, NodeId)> {
    let ssn = &ctx.ssn;
    let pods = ssn.snap.jobs[job].tasks.iter().flat_map(|t| t.pods.iter().copied());
    pods.filter_map(|p| match ssn.pod_state[p] {
        PodState::Pipelined(n) => Some((p, n)),
        _ => None,
    })
    .collect()
}

/// Pipelines each pod onto its node (where a placement just found room for it).
fn pipeline(ctx: &mut Ctx, placed: &[(PodId, NodeId)]) -> Statement {
    let mut st = Statement::new();
    for &(p, n) in placed {
        ctx.ssn.pipeline(&mut st, p, n);
    }
    st
}

/// Whether placing `pods` brings the job to its gang minimum, overall and per task (always,
/// for a job that has it running already).
fn completes_gang(ctx: &Ctx, job: JobId, pods: &[PodId]) -> bool {
    let ssn = &ctx.ssn;
    if ctx.fw.job_ready(ssn, job) {
        return true;
    }
    let j = &ssn.snap.jobs[job];
    let mut per_task = ssn.task_running[job].clone();
    for &p in pods {
        per_task[ssn.snap.pods[p].task] += 1;
    }
    per_task.iter().sum::<u32>() >= j.min_member
        && j.tasks.iter().zip(&per_task).all(|(task, &have)| have >= task.min_available)
}

/// Finds claims again; allocate calls it between its fair-share passes and its idle ones.
pub fn run(ctx: &mut Ctx) {
    let ssn = &ctx.ssn;
    let terminating = |n: NodeId| (0..ssn.snap.resources.len()).any(|r| ssn.node_releasing[n][r] > 0);
    let releasing: Vec<NodeId> = ssn.snap.nodes.keys().filter(|&n| terminating(n)).collect();
    if releasing.is_empty() {
        return;
    }
    let minimums = evicting_jobs(ctx);
    claim(ctx, &minimums, &releasing, &starving, &|c, job, releasing| {
        let gang = c.ssn.gang_pods(job);
        claim_pods(c, job, &gang, releasing);
    });
    // Each job's whole elastic need at once, else pod by pod while they fit (as reclaim).
    let elastic = elastic_evicting_jobs(ctx);
    claim(ctx, &elastic, &releasing, &elastic_waiting, &|c, job, releasing| {
        serve_elastic_need(c, job, &mut |c, pods, _| claim_pods(c, job, pods, releasing));
    });
}

/// Serves the jobs listed per queue that still `want` room, most deprived queue first, each
/// once, by `claims`, in queues within their fair share.
fn claim(
    ctx: &mut Ctx,
    by_queue: &TiSlice<QueueId, Vec<JobId>>,
    releasing: &[NodeId],
    wants: &dyn Fn(&Ctx, JobId) -> bool,
    claims: &dyn Fn(&mut Ctx, JobId, &[NodeId]),
) {
    let within_share = |c: &Ctx, q: QueueId| c.fw.within_fair_share(c.ssn, q).is_ok();
    serve_in_queue_order(ctx, by_queue, wants, &within_share, &mut |ctx, job| claims(ctx, job, releasing));
}

/// Pipelines `pods` of a job onto `releasing` nodes, the rest onto idle capacity, when they
/// fit within the job's fair share; whether they did.
fn claim_pods(ctx: &mut Ctx, job: JobId, pods: &[PodId], releasing: &[NodeId]) -> bool {
    if pods.is_empty() {
        return false;
    }
    let need = ctx.ssn.sum_requests(pods);
    if ctx.fw.allocatable(ctx.ssn, job, &need, ShareBound::FairShare).is_err() {
        return false;
    }
    let Some(st) = try_place_all(ctx, pods, Avail::Future(releasing)) else { return false };
    ctx.ssn.commit(st);
    ctx.ssn.set_reason(job, WAITING_FOR_VICTIMS.into());
    true
}
