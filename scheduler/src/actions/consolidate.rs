//! Consolidation (KAI's action): a starving gang that the idle capacity of the nodes it may
//! use could hold in total, but that fits on no set of them because the capacity is split
//! across nodes, gets room by moving preemptible pods elsewhere. A move is an eviction whose
//! pod's controller re-creates it; the move is decided only when every moved pod has a new
//! home on idle capacity of another node, held for the rest of the cycle, and the gang then
//! fits what the moves free (it is pipelined there). Non-preemptible pods never move; units
//! with the fewest pods are tried first, and a working set is pruned of every move it does not
//! need. At most [`MAX_GANGS`] gangs and [`MAX_MOVED_PODS`] moved pods per cycle. A gang
//! that requires a topology level is seated inside one domain of it: the first whose idle
//! capacity holds it in total, by moving pods off that domain's nodes.
//!
//! Off by default: a moved pod's new home and the gang's claim hold within the cycle that
//! decides them; the next cycle places the re-created pods and the gang afresh, and usually
//! in the same way, but nothing keeps another job from taking that capacity first.

use std::cmp::Reverse;

use crate::placement::Avail;
use crate::plugin::{ShareBound, Victim};
use crate::session::{EvictReason, Statement};
use crate::snapshot::{JobId, NodeId, PodId};

use super::victim_solver::usable_nodes;
use super::{evicting_jobs, fits_without_eviction, try_place_all, victim_units, Ctx};
use crate::topology_placement::required_domains;

/// Gangs consolidation tries to seat per cycle.
pub const MAX_GANGS: usize = 4;
/// Pods consolidation may move per cycle.
pub const MAX_MOVED_PODS: usize = 8;

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    let mut budget = MAX_MOVED_PODS;
    let mut tried = 0;
    let mut jobs: Vec<JobId> = evicting_jobs(ctx).into_iter().flatten().collect();
    jobs.sort_by(|&a, &b| ctx.fw.job_order(ctx.ssn, a, b));
    for job in jobs {
        if tried == MAX_GANGS || budget == 0 {
            break;
        }
        if !super::starving(ctx, job) {
            continue;
        }
        let gang = ctx.ssn.gang_pods(job);
        let need = ctx.ssn.sum_requests(&gang);
        let fits = |c: &Ctx| c.fw.allocatable(c.ssn, job, &need, ShareBound::Idle).is_ok();
        if !fits(ctx) || fits_without_eviction(ctx, &gang, &fits) {
            continue;
        }
        let Some(within) = fragmented(ctx, job, &gang) else { continue };
        tried += 1;
        if let Some(moved) = seat(ctx, job, &gang, budget, &within) {
            budget -= moved;
        }
    }
}

/// The nodes the gang may use whose idle capacity holds its request in total: all of them,
/// or, for a gang that requires a topology level, those of the first domain of that level
/// where they do; `None` when nowhere.
fn fragmented(ctx: &mut Ctx, job: JobId, gang: &[PodId]) -> Option<Vec<NodeId>> {
    let need = ctx.ssn.sum_requests(gang);
    let usable = usable_nodes(ctx, gang);
    let group = ctx.placer.groups(ctx.ssn.snap, ctx.fw, job);
    let domains = match group.and_then(|g| required_domains(ctx.ssn, &g)) {
        Some(required) => required.domains.iter().map(|&d| required.nodes(ctx.ssn.snap, d)).collect(),
        None => vec![usable.clone()],
    };
    let ssn = &ctx.ssn;
    domains.into_iter().find_map(|domain| {
        let nodes: Vec<NodeId> = domain.into_iter().filter(|n| usable.binary_search(n).is_ok()).collect();
        let mut idle = crate::res::Res::zero(need.len());
        for &n in nodes.iter().filter(|&&n| !ssn.snap.nodes[n].unschedulable) {
            idle.add(&ssn.idle(n));
        }
        need.fits_in(&idle).then_some(nodes)
    })
}

/// Moves as few pods as it can off the nodes `within` (sorted), at most `budget`, so that
/// the gang fits; returns how many moved, or `None` (nothing changed) when no set of moves
/// works.
fn seat(ctx: &mut Ctx, job: JobId, gang: &[PodId], budget: usize, within: &[NodeId]) -> Option<usize> {
    let units = movable_units(ctx, job, within);
    let mut chosen: Vec<&Victim> = Vec::new();
    let mut moved = 0;
    for unit in &units {
        // A job's elastic pods and its whole-job unit overlap: one of them at a time.
        let overlaps = || chosen.iter().any(|c| c.pods.iter().any(|p| unit.pods.contains(p)));
        if moved + unit.pods.len() > budget || overlaps() {
            continue;
        }
        chosen.push(unit);
        match plan(ctx, gang, &chosen) {
            Err(Missing::Home) => {
                chosen.pop();
            }
            Err(Missing::Room) => moved += unit.pods.len(),
            Ok(st) => {
                ctx.ssn.discard(st);
                let kept = prune(ctx, gang, chosen);
                let st = plan(ctx, gang, &kept).ok()?;
                let count = kept.iter().map(|u| u.pods.len()).sum();
                ctx.ssn.commit(st);
                ctx.ssn.set_reason(job, format!("waiting for {count} pod(s) moved by consolidation to terminate"));
                return Some(count);
            }
        }
    }
    None
}

/// Running units of other preemptible jobs with a pod on one of the nodes `usable` (sorted;
/// a unit is one pod above its job's minimum or the whole job, so no gang is left below its
/// minimum), in the order they are tried: fewest pods first, elastic pods before whole jobs,
/// then newest job.
fn movable_units(ctx: &mut Ctx, job: JobId, usable: &[NodeId]) -> Vec<Victim> {
    let ssn = &ctx.ssn;
    let on_usable = |v: &Victim| {
        v.pods.iter().any(|&p| ssn.pod_state[p].running_on().is_some_and(|n| usable.binary_search(&n).is_ok()))
    };
    let mut units: Vec<Victim> = ssn
        .snap
        .jobs
        .keys()
        .filter(|&o| o != job && ssn.snap.jobs[o].preemptible && ssn.job_running[o] > 0)
        .flat_map(|o| victim_units(ssn, o))
        .filter(on_usable)
        .collect();
    units.sort_by_key(|v| (v.pods.len(), !v.elastic, Reverse(ssn.snap.jobs[v.job].created_at), v.pods[0]));
    units
}

/// Why a plan failed.
enum Missing {
    /// A moved pod has no other node to go to.
    Home,
    /// Every pod has a home, but the gang still does not fit.
    Room,
}

/// Moves `units` (evicting their pods and holding a home for each on another node) and
/// pipelines the gang onto what they free; on failure everything is undone.
fn plan(ctx: &mut Ctx, gang: &[PodId], units: &[&Victim]) -> Result<Statement, Missing> {
    let mut st = Statement::new();
    let mut freed: Vec<NodeId> = Vec::new();
    let for_job = ctx.ssn.snap.pods[gang[0]].job;
    for unit in units {
        for &p in &unit.pods {
            let node = ctx.ssn.pod_state[p].running_on().expect("units hold running pods");
            if let Err(at) = freed.binary_search(&node) {
                freed.insert(at, node);
            }
            ctx.ssn.evict(&mut st, p, EvictReason::Consolidate, for_job);
        }
    }
    for unit in units {
        for &p in &unit.pods {
            match home(ctx, p, &freed) {
                Some(n) => ctx.ssn.hold(&mut st, p, n),
                None => {
                    ctx.ssn.discard(st);
                    return Err(Missing::Home);
                }
            }
        }
    }
    match try_place_all(ctx, gang, Avail::Future(&freed)) {
        Some(pipe) => {
            ctx.ssn.absorb(&mut st, pipe);
            Ok(st)
        }
        None => {
            ctx.ssn.discard(st);
            Err(Missing::Room)
        }
    }
}

/// A node, other than those being freed, whose idle capacity holds the pod now: the one
/// with the least idle capacity of the pod's key resource that still fits (bin-packing the
/// moved pods keeps the freed space whole).
fn home(ctx: &mut Ctx, pod: PodId, freed: &[NodeId]) -> Option<NodeId> {
    let feas = ctx.placer.feasibility(ctx.ssn, ctx.fw, pod);
    let ssn = &ctx.ssn;
    let req = ssn.requests(pod);
    let key = ssn.snap.key_resource(ssn.snap.jobs[ssn.snap.pods[pod].job].tasks[ssn.snap.pods[pod].task].gpu);
    feas.nodes
        .iter()
        .copied()
        .filter(|n| freed.binary_search(n).is_err() && ssn.fits_idle(*n, req, None))
        .min_by_key(|&n| (ssn.idle_of(n, key), n))
}

/// Drops every unit the gang does not need (latest first), keeping a set that still works.
fn prune<'v>(ctx: &mut Ctx, gang: &[PodId], mut chosen: Vec<&'v Victim>) -> Vec<&'v Victim> {
    for k in (0..chosen.len()).rev() {
        if chosen.len() == 1 {
            break;
        }
        let without: Vec<&Victim> = chosen.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, &u)| u).collect();
        if let Ok(st) = plan(ctx, gang, &without) {
            ctx.ssn.discard(st);
            chosen = without;
        }
    }
    chosen
}
