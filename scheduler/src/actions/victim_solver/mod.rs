//! The victim solver: the one search that preempt, reclaim and consolidation call to make
//! room for a gang by evicting units in a [`VictimOrder`], inside one topology domain at a
//! time when the gang requires a level, pruning the units it turns out not to need.

mod domain_cost;
mod domain_rank;
mod domain_room;
mod prune;
mod shortfall;
mod victims;

pub use shortfall::{shortfall, usable_nodes};
pub use victims::{victim_units, VictimOrder, VictimPool};

use super::{append_reason, try_place_all, Ctx};
use crate::placement::Avail;
use crate::plugin::{EvictMode, Victim};
use crate::session::{EvictReason, Session, Statement};
use crate::snapshot::{JobId, NodeId, PodId};
use crate::topology_placement::required_domains;
use domain_cost::Estimates;
use domain_rank::{key_need, key_resource, victim_domains};
use domain_room::{cluster_could_hold, DomainRoom};
use prune::spare_unneeded;
use shortfall::gang_feasibility;
use std::borrow::Cow;

/// Why evicting the units that may be evicted (given) would not make room, for the reason.
pub type Failure<'f> = dyn Fn(&mut Ctx, &[&Victim]) -> String + 'f;

/// Evicts units in `order` that make room for `pods` of `job` (its gang, or elastic pods),
/// and pipelines them; or, when nothing works, adds `failure` (given every unit of the order
/// that may be evicted), if any, to the job's reason. On success, returns where its
/// evictions start in the session's decisions.
pub fn make_room(
    ctx: &mut Ctx,
    job: JobId,
    pods: &[PodId],
    mut order: VictimOrder,
    mode: EvictMode,
    fits: &dyn Fn(&Ctx) -> bool,
    failure: Option<&Failure>,
) -> Option<usize> {
    match evict_for(ctx, job, pods, &mut order, (mode, true), fits) {
        Some(st) => {
            let since = ctx.ssn.decisions.evictions.len();
            let evicted_now = st.len() > pods.len();
            ctx.ssn.commit(st);
            let evicted = if evicted_now { ctx.ssn.evicted_for[job] } else { 0 };
            ctx.ssn.set_reason(job, waiting_for_victims(mode, evicted));
            Some(since)
        }
        None => {
            if let Some(failure) = failure {
                let candidates: Vec<&Victim> =
                    order.units().filter(|v| ctx.fw.may_evict(ctx.ssn, mode, job, v).is_ok()).collect();
                let why = failure(ctx, &candidates);
                append_reason(ctx, job, &why);
            }
            None
        }
    }
}

/// Why a job for which `evicted` pods were evicted by `mode` this cycle (none: its pods were
/// pipelined onto capacity already being freed) waits.
fn waiting_for_victims(mode: EvictMode, evicted: u32) -> String {
    let what = match mode {
        EvictMode::Preempt => "preempted",
        EvictMode::Reclaim => "reclaimed",
    };
    if evicted == 0 {
        "waiting for evicted pods to terminate on the nodes it will use".to_string()
    } else {
        format!("waiting for {evicted} {what} pod(s) to terminate")
    }
}

/// At most this many domains are searched for victims for one gang that requires a level.
const MAX_VICTIM_DOMAINS: usize = 8;

/// Tries to make room for `gang` (pods of `job`) by evicting units in `order`, then
/// pipelines it onto the freed capacity. Only victims on nodes some pod of the gang may use
/// count. A gang that requires a topology level looks for victims inside one domain of that
/// level at a time (the one its running pods pin it to, else those with the most capacity
/// idle and evictable, at most [`MAX_VICTIM_DOMAINS`]), and evicts in the domain where that
/// costs least: the lowest priority taken, then the fewest gangs broken, then the least
/// freed. Returns the statement holding evictions and pipelined pods, or `None` when no set
/// of units helps. `judged`: whether only units the rules let `mode` evict count (a search
/// that ignores them tells a waiting gang which victims the rules forbid; see [`forbidden`]).
pub(super) fn evict_for(
    ctx: &mut Ctx,
    job: JobId,
    gang: &[PodId],
    order: &mut VictimOrder,
    (mode, judged): (EvictMode, bool),
    fits: &dyn Fn(&Ctx) -> bool,
) -> Option<Statement> {
    let feasible = gang_feasibility(ctx, gang);
    let usable = |n: NodeId| feasible.iter().any(|f| f.ok(n));
    let group = ctx.placer.groups(ctx.ssn.snap, ctx.fw, job);
    let Some(required) = group.and_then(|g| required_domains(ctx.ssn, &g)) else {
        let all = Within { usable: &usable, domain: None, give_up_at: None, judged };
        return evict_within(ctx, job, gang, order, mode, fits, all).map(|(st, ..)| st);
    };
    let ranked = victim_domains(ctx, gang, order, &required);
    let topo = &ctx.ssn.snap.topologies[required.topology];
    let in_domain = |i: usize, n: NodeId| topo.domain_at(required.level, n) == Some(ranked[i].0) && usable(n);
    // Domains are searched in the order of what making room there is estimated to cost,
    // counted without evicting; a domain whose estimate costs more than the best set found
    // so far is not searched. Domains are compared by the victims their search takes, ties
    // going to the domain ranked first; only the chosen one's set is pruned (pruning tries
    // the gang once per victim). A search stops once its victims cost as much as the best
    // domain's (more, for a domain ranked before it).
    let key = key_resource(ctx.ssn, gang);
    let rooms: Vec<DomainRoom> = ranked
        .iter()
        .enumerate()
        .map(|(i, (_, nodes))| DomainRoom::new(ctx.ssn, gang, nodes, &|n| in_domain(i, n)))
        .collect();
    let walks = ranked
        .iter()
        .zip(&rooms)
        .map(|(&(d, ref nodes), room)| {
            (order.within(ctx.ssn, (required.topology, required.level, d), nodes), room.clone())
        })
        .collect();
    let mut estimates = Estimates::new(ctx, (job, (mode, judged), key), walks, &in_domain);
    let mut best: Option<(EvictionCost, usize, Vec<&Victim>)> = None;
    while let Some(i) = estimates.next(ctx, best.as_ref().map(|&(c, b, _)| (c, b))) {
        let (d, ref nodes) = ranked[i];
        let inside = |n: NodeId| in_domain(i, n);
        let give_up_at = best.as_ref().map(|&(c, b, _)| if i < b { (c.0, c.1, c.2 + 1) } else { c });
        let domain = Within { usable: &inside, domain: Some((nodes, rooms[i].clone())), give_up_at, judged };
        let mut within = order.within(ctx.ssn, (required.topology, required.level, d), nodes);
        let found = evict_within(ctx, job, gang, &mut within, mode, fits, domain);
        if let Some((st, cost, victims)) = found {
            ctx.ssn.discard(st);
            if best.as_ref().is_none_or(|&(c, b, _)| (cost, i) < (c, b)) {
                best = Some((cost, i, victims));
            }
        }
    }
    let (_, i, victims) = best?;
    let inside = |n: NodeId| in_domain(i, n);
    let domain = (&ranked[i].1[..], rooms[i].clone(), &inside as &dyn Fn(NodeId) -> bool);
    spare_unneeded(ctx, gang, victims, (evict_reason(mode), job), fits, Some(domain)).map(|(st, _)| st)
}

/// Why pods evicted by `mode` go.
fn evict_reason(mode: EvictMode) -> EvictReason {
    match mode {
        EvictMode::Preempt => EvictReason::Preempt,
        EvictMode::Reclaim => EvictReason::Reclaim,
    }
}

/// What evicting a victim set costs, compared lexicographically: the highest priority taken,
/// the whole jobs (gangs) broken, the key resource freed. Each part only grows as victims are
/// added, so a set costing at least a bound already can only end above it.
type EvictionCost = (i32, usize, i64);

/// The cost of a victim set with one more victim (`key`: the resource freed that counts).
fn with_victim(cost: EvictionCost, snap: &crate::snapshot::Snapshot, v: &Victim, key: usize) -> EvictionCost {
    (cost.0.max(snap.jobs[v.job].priority), cost.1 + usize::from(!v.elastic), cost.2 + v.freed[key])
}

/// The cost of nothing evicted.
const NO_COST: EvictionCost = (i32::MIN, 0, 0);

/// Where a victim search looks, and when it gives up.
struct Within<'w, 's> {
    /// The nodes whose pods count as victims.
    usable: &'w dyn Fn(NodeId) -> bool,
    /// The domain those nodes form, when the gang must fit inside one, and its room for the
    /// gang before anything is evicted.
    domain: Option<(&'w [NodeId], DomainRoom<'w, 's>)>,
    /// A cost at which the search gives up (another domain's victims cost no more).
    give_up_at: Option<EvictionCost>,
    /// Whether only units the rules let the mode evict count.
    judged: bool,
}

/// Whether a victim search for `job` may take `v`: the rules decide, unless the search is not
/// `judged` (it asks which victims the rules forbid).
fn may_take(ctx: &Ctx, (mode, judged): (EvictMode, bool), job: JobId, v: &Victim) -> bool {
    !judged || ctx.fw.may_evict(ctx.ssn, mode, job, v).is_ok()
}

/// Evicts units in `order` on nodes `within` allows until the gang fits, and returns the
/// statement, what it costs and the units taken. A unit's queue is ranked again after each
/// eviction from it (in reclaim, a queue that drops below its fair share stops coming first).
/// Outside a domain, the units that turn out unnecessary are spared; inside one, the set is
/// returned whole, to be compared with other domains' (the chosen one is pruned after), and
/// the gang is tried only once the domain could hold it by count (see [`DomainRoom`]).
fn evict_within<'p>(
    ctx: &mut Ctx,
    job: JobId,
    gang: &[PodId],
    order: &mut VictimOrder<'p>,
    mode: EvictMode,
    fits: &dyn Fn(&Ctx) -> bool,
    within: Within,
) -> Option<(Statement, EvictionCost, Vec<&'p Victim>)> {
    let usable = within.usable;
    let reason = evict_reason(mode);
    let (domain, mut room) = within.domain.map_or((None, None), |(nodes, room)| (Some(nodes), Some(room)));
    let need = key_need(ctx.ssn, gang);
    let key = need.1;
    let mut cost = NO_COST;
    let mut chosen: Vec<&Victim> = Vec::new();
    let mut nodes: Vec<NodeId> = Vec::new();
    let mut st = Statement::new();
    while let Some(v) = order.next(ctx.ssn, ctx.fw) {
        if !v.pods.iter().any(|&p| ctx.ssn.pod_state[p].running_on().is_some_and(usable)) {
            continue;
        }
        // Taking units only ever makes the rest less evictable (queues drop, jobs shrink),
        // so a unit refused now would have been refused before the first eviction too.
        if !may_take(ctx, (mode, within.judged), job, v) {
            continue;
        }
        let touched: Vec<NodeId> = match room {
            Some(_) => v.pods.iter().filter_map(|&p| ctx.ssn.pod_state[p].running_on()).collect(),
            None => Vec::new(),
        };
        evict_unit(ctx.ssn, &mut st, v, (reason, job), &mut nodes);
        chosen.push(v);
        order.rerank(ctx.ssn.snap.jobs[v.job].queue);
        cost = with_victim(cost, ctx.ssn.snap, v, key);
        if within.give_up_at.is_some_and(|bound| cost >= bound) {
            break;
        }
        if let Some(room) = room.as_mut() {
            touched.into_iter().for_each(|n| room.update(ctx.ssn, n, usable));
        }
        let could_hold = match room.as_ref() {
            Some(room) => room.could_hold(),
            None => cluster_could_hold(ctx.ssn, need, &nodes),
        };
        if !could_hold || !fits(ctx) {
            continue;
        }
        if let Some(pipe) = try_place_all(ctx, gang, Avail::Future(&freed_within(&nodes, domain))) {
            let (st, kept) = if domain.is_none() {
                ctx.ssn.discard(pipe);
                ctx.ssn.discard(st);
                spare_unneeded(ctx, gang, chosen, (reason, job), fits, None)?
            } else {
                ctx.ssn.absorb(&mut st, pipe);
                (st, chosen)
            };
            let cost = kept.iter().fold(NO_COST, |c, v| with_victim(c, ctx.ssn.snap, v, key));
            return Some((st, cost, kept));
        }
    }
    ctx.ssn.discard(st);
    None
}

/// The freed nodes a placement after evictions may use: inside the domain the victims were
/// sought in, when there is one (victims whose gangs span domains free capacity elsewhere
/// too, which that search did not pay for).
fn freed_within<'n>(nodes: &'n [NodeId], domain: Option<&[NodeId]>) -> Cow<'n, [NodeId]> {
    match domain {
        Some(domain) => nodes.iter().copied().filter(|n| domain.binary_search(n).is_ok()).collect(),
        None => Cow::Borrowed(nodes),
    }
}

/// Evicts a victim unit for a job, adding the nodes it frees to `nodes` (kept sorted, no
/// duplicates).
fn evict_unit(
    ssn: &mut Session,
    st: &mut Statement,
    v: &Victim,
    (reason, for_job): (EvictReason, JobId),
    nodes: &mut Vec<NodeId>,
) {
    let pods: Vec<PodId> = if v.elastic {
        vec![v.pods[0]]
    } else {
        // Sized by the unit: the job's pods running when it was formed, at most.
        let mut pods = Vec::with_capacity(v.pods.len());
        pods.extend(ssn.running_pods(v.job));
        pods
    };
    for p in pods {
        if let Some(n) = ssn.pod_state[p].running_on() {
            if let Err(at) = nodes.binary_search(&n) {
                nodes.insert(at, n);
            }
        }
        ssn.evict(st, p, reason, for_job);
    }
}
