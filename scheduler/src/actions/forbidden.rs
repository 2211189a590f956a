//! What the rules forbid that would let a waiting gang start now. After the cycle's actions,
//! the first few gangs that still wait for room although their queues' bounds would let them
//! start get the victim search preempt and reclaim run, taking any running unit, and are told
//! the first rule that refuses one of the victims it found: "evicting these would seat you,
//! but this rule says no". The search is undone, so nothing is evicted, and the refusal is
//! the rule's own (the same hooks preempt and reclaim ask), so the answer cannot disagree
//! with what the scheduler does.

use super::victim_solver::evict_for;
use super::{jobs_by_queue, starving, victim_units, Ctx, VictimPool};
use crate::config::ActionName;
use crate::ids::{ti_vec, TiVec};
use crate::plugin::{EvictMode, ShareBound, Victim};
use crate::res::Res;
use crate::snapshot::{JobId, NodeId, PodId, QueueId};
use crate::topology_placement::required_domains;

/// At most this many waiting gangs are searched for per cycle, in serving order (those next
/// to start); the others keep the general advice.
pub const MAX_GANGS: usize = 8;

/// Victims whose eviction would seat a waiting gang now, and what forbids taking them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    /// The jobs that would lose pods, in the order the search took them.
    pub jobs: Vec<JobId>,
    /// How many pods they would lose in all.
    pub pods: usize,
    /// The domain the gang's pods would share, as (level, domain), when it requires one.
    pub domain: Option<(String, String)>,
    /// The first refusal among the victims, with the action that asks it.
    pub why: String,
}

/// The victims the rules forbid for each of the first [`MAX_GANGS`] gangs that wait for
/// room, by job; `actions` are the ones the scheduler runs (a victim only an action it does
/// not run could take is refused for that).
pub fn run(ctx: &mut Ctx, actions: &[ActionName]) -> TiVec<JobId, Option<Forbidden>> {
    let snap = ctx.ssn.snap;
    let mut out = ti_vec![None; snap.jobs.len()];
    let mut waiting: Vec<JobId> = snap.jobs.keys().filter(|&j| starving(ctx, j)).collect();
    if waiting.is_empty() {
        return out;
    }
    let running = jobs_by_queue(ctx, |j| ctx.ssn.job_running[j] > 0);
    let queues: Vec<QueueId> = running.iter_enumerated().filter(|(_, jobs)| !jobs.is_empty()).map(|(q, _)| q).collect();
    if queues.is_empty() {
        return out;
    }
    waiting.sort_by(|&a, &b| ctx.fw.job_order(ctx.ssn, a, b));
    let mut pool = VictimPool::new(EvictMode::Reclaim, running, snap.jobs.len());
    let mut searched = 0;
    for job in waiting {
        if searched == MAX_GANGS {
            break;
        }
        let gang = ctx.ssn.gang_pods(job);
        let need = ctx.ssn.sum_requests(&gang);
        let fits = |c: &Ctx| c.fw.allocatable(c.ssn, job, &need, ShareBound::Idle).is_ok();
        // A gang its queues' bounds hold gets their numbers as advice instead.
        if gang.is_empty() || !fits(ctx) {
            continue;
        }
        if searched == 0 {
            // Formed for the first gang searched: often every waiting gang is held by its
            // queues' bounds, and forming every running job's units is then wasted.
            pool.prepare(ctx.ssn, ctx.fw, &queues);
        }
        searched += 1;
        let mut order = pool.order(&queues, job);
        let Some(st) = evict_for(ctx, job, &gang, &mut order, (EvictMode::Reclaim, false), &fits) else {
            continue;
        };
        let evicted: Vec<PodId> = st.evicted().map(|(p, _)| p).collect();
        let landing = st.pipelined().next().map(|(_, n)| n);
        ctx.ssn.discard(st);
        let mut jobs: Vec<JobId> = Vec::new();
        for &p in &evicted {
            if !jobs.contains(&snap.pods[p].job) {
                jobs.push(snap.pods[p].job);
            }
        }
        let Some(why) = refusal(ctx, actions, (job, &need), &jobs, &evicted) else { continue };
        let domain = landing.and_then(|n| domain_of(ctx, job, n));
        out[job] = Some(Forbidden { jobs, pods: evicted.len(), domain, why });
    }
    out
}

/// The first refusal of taking the `evicted` pods of `victims` for `job`, which needs `need`:
/// by preempt within its own queue, by reclaim from other queues. None when the rules allow
/// them all (something else holds the gang: its turn, a reservation).
fn refusal(
    ctx: &Ctx,
    actions: &[ActionName],
    (job, need): (JobId, &Res),
    victims: &[JobId],
    evicted: &[PodId],
) -> Option<String> {
    let snap = ctx.ssn.snap;
    for &v in victims {
        let same_queue = snap.jobs[v].queue == snap.jobs[job].queue;
        let (mode, action, name) = match same_queue {
            true => (EvictMode::Preempt, ActionName::Preempt, "preempt"),
            false => (EvictMode::Reclaim, ActionName::Reclaim, "reclaim"),
        };
        if !actions.contains(&action) {
            return Some(format!("the scheduler runs no {name} action"));
        }
        if !same_queue {
            let queue = snap.jobs[v].queue;
            if let Err(why) =
                ctx.fw.may_reclaim(ctx.ssn, job, need).and_then(|()| ctx.fw.may_reclaim_from(ctx.ssn, job, queue))
            {
                return Some(format!("{name}: {why}"));
            }
        }
        let taken = |u: &Victim| u.pods.iter().all(|p| evicted.contains(p));
        for unit in victim_units(ctx.ssn, v).iter().filter(|u| taken(u)) {
            if let Err(why) = ctx.fw.may_evict(ctx.ssn, mode, job, unit) {
                return Some(format!("{name}: {why}"));
            }
        }
    }
    None
}

/// The domain at the level `job` requires that holds `node`, as (level, domain).
fn domain_of(ctx: &mut Ctx, job: JobId, node: NodeId) -> Option<(String, String)> {
    let snap = ctx.ssn.snap;
    let group = ctx.placer.groups(snap, ctx.fw, job)?;
    let required = required_domains(ctx.ssn, &group)?;
    let topo = &snap.topologies[required.topology];
    let level = topo.levels.get(required.level).cloned().unwrap_or_else(|| "node".to_string());
    let name = match required.level == topo.node_level() {
        true => snap.nodes[node].name.clone(),
        false => topo.domains[required.level][topo.domain_of(required.level, node)?].name.clone(),
    };
    Some((level, name))
}
