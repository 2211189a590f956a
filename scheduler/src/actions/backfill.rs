//! Backfill: after the other actions, start what fits in idle capacity without delaying
//! gangs ordered before it. Each gang that still cannot start holds the idle capacity it
//! could use now (on the nodes it would take); later jobs may only use what nobody ahead of
//! them holds. This is what lets CPU-only and small jobs run beside a waiting large gang. In
//! a StrictFIFO queue nothing passes a waiting job of its class (GPU or CPU-only), even one
//! that cannot fit at all: the queue stays strict. Capacity reserved for a gang (see
//! [`crate::reservation`]) is held too, for every job not declared to end before the
//! reservation starts.

use crate::ids::{ti_vec, TiSlice};
use crate::placement::{Avail, Holds};
use crate::plugin::ShareBound;
use crate::res::Res;
use crate::snapshot::{JobId, JobPhase, NodeId, PodId, QueueingStrategy};

use super::{class, place_all, starving, strict, Ctx};

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    let snap = ctx.ssn.snap;
    let n = snap.resources.len();
    let mut jobs: Vec<JobId> = snap.jobs.keys().filter(|&j| starving(ctx, j) || strict_waiting(ctx, j)).collect();
    jobs.sort_by(|&a, &b| ctx.fw.job_order(ctx.ssn, a, b));
    let mut hold = ti_vec![Res::zero(n); snap.nodes.len()];
    let mut free = Res::zero(n);
    for node in snap.nodes.keys() {
        if !snap.nodes[node].unschedulable {
            free.add(&ctx.ssn.idle(node));
        }
    }
    // Per queue and class: a StrictFIFO queue whose earlier job of that class still waits,
    // which nothing later of that class may pass.
    let mut blocked = ti_vec![[false; 2]; snap.queues.len()];
    for job in jobs {
        let (q, c) = (snap.jobs[job].queue, class(ctx, job));
        if blocked[q][c] {
            continue;
        }
        if strict_waiting(ctx, job) {
            let waiting: Vec<PodId> = ctx.ssn.pending_pods(job).collect();
            hold_for(ctx, &waiting, &mut hold, &mut free, key_resource(ctx, job));
            blocked[q][c] = true;
            continue;
        }
        let gang = ctx.ssn.gang_pods(job);
        let need = ctx.ssn.sum_requests(&gang);
        let key = key_resource(ctx, job);
        if free[key] <= 0 && need[key] > 0 || ctx.fw.allocatable(ctx.ssn, job, &need, ShareBound::Idle).is_err() {
            blocked[q][c] = strict(ctx, q);
            continue;
        }
        let reserved = ctx.reservations.holds_for(ctx.ssn, ctx.fw, job, ShareBound::Idle);
        let with_reserved: Option<Holds> =
            reserved.map(|r| hold.iter().zip(r.iter()).map(|(h, r)| h.plus(r)).collect());
        match place_all(ctx, &gang, Avail::Idle(Some(with_reserved.as_ref().unwrap_or(&hold)))) {
            Ok(st) => {
                ctx.ssn.commit(st);
                ctx.ssn.job_phase[job] = JobPhase::Running;
                ctx.ssn.clear_reason(job);
                free.sub(&need);
            }
            Err(_) => {
                hold_for(ctx, &gang, &mut hold, &mut free, key);
                blocked[q][c] = strict(ctx, q);
            }
        }
    }
}

/// A running job of a `StrictFIFO` queue whose elastic pods wait: later jobs of its queue
/// must not take the capacity it waits for.
fn strict_waiting(ctx: &Ctx, job: JobId) -> bool {
    let snap = ctx.ssn.snap;
    snap.queues[snap.jobs[job].queue].strategy == QueueingStrategy::StrictFifo
        && ctx.ssn.job_phase[job] != JobPhase::Pending
        && ctx.ssn.job_pipelined[job] == 0
        && ctx.fw.job_ready(ctx.ssn, job)
        && ctx.ssn.pending_pods(job).next().is_some()
}

/// Sets idle capacity aside for pods that cannot start yet.
fn hold_for(ctx: &mut Ctx, pods: &[PodId], hold: &mut TiSlice<NodeId, Res>, free: &mut Res, key: usize) {
    for &pod in pods {
        if free[key] <= 0 {
            return;
        }
        if let Some((node, amount)) = hold_site(ctx, pod, hold, key) {
            hold[node].add(&amount);
            free.sub(&amount);
        }
    }
}

/// The resource that decides placement for the job: GPUs if it asks for any, else CPU.
fn key_resource(ctx: &Ctx, job: JobId) -> usize {
    let snap = ctx.ssn.snap;
    match snap.gpu {
        Some(g) if snap.jobs[job].tasks.iter().any(|t| t.gpu) => g,
        _ => snap.cpu,
    }
}

/// Where a waiting pod would hold capacity, and how much: on the feasible node that could
/// ever hold it and has the most unheld idle capacity, as much of its request as is idle.
fn hold_site(ctx: &mut Ctx, pod: PodId, hold: &TiSlice<NodeId, Res>, key: usize) -> Option<(NodeId, Res)> {
    let feas = ctx.placer.feasibility(ctx.ssn, ctx.fw, pod);
    let req = ctx.ssn.requests(pod);
    let node = feas
        .nodes
        .iter()
        .copied()
        .filter(|&n| req.fits_in(&ctx.ssn.snap.nodes[n].allocatable))
        .map(|n| (ctx.ssn.idle(n).minus(&hold[n]), n))
        .filter(|(unheld, _)| unheld[key] > 0)
        .max_by(|a, b| a.0[key].cmp(&b.0[key]).then(b.1.cmp(&a.1)))?;
    let (mut unheld, n) = node;
    unheld.clamp_non_negative();
    let amount = Res((0..req.len()).map(|r| req[r].min(unheld[r])).collect());
    Some((n, amount))
}
