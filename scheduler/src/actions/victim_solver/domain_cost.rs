//! What making room for a gang inside each candidate domain would cost, counted before
//! anything is evicted: the victim order kept to the domain is walked, each unit's pods there
//! counted as freed on their nodes, until the domain could hold the gang by count (see
//! [`DomainRoom`]). The victim search searches the domains for real in the order of these
//! estimates, and stops at the first whose estimate costs more than the best set found.
//!
//! Only that order is needed, so a walk is carried only as far as it tells: once its cost
//! is above the cheapest estimate known, it is paused, and taken up again only if the search
//! comes to need it (a walk's cost only grows, so a paused one is known to cost at least
//! what it reached). The domains searched, and their order, are those that walking every
//! domain to its end and sorting would give.

use crate::ids::{JobId, NodeId, PodId};
use crate::plugin::EvictMode;
use crate::res::Res;

use super::domain_room::DomainRoom;
use super::{may_take, with_victim, Ctx, EvictionCost, VictimOrder, NO_COST};

/// Where one domain's walk stands.
#[derive(Clone, Copy)]
enum Walked {
    /// The domain could hold the gang with the units walked: its estimate.
    Holds(EvictionCost),
    /// Paused at this cost, short of holding the gang: the estimate is at least this.
    AtLeast(EvictionCost),
    /// The units ran out before the domain could hold the gang.
    Never,
}

/// One domain's walk: the order kept to it, its room as the units walked would leave it,
/// what they free per node, and what they cost.
struct Walk<'o, 'd, 's> {
    order: VictimOrder<'o>,
    room: DomainRoom<'d, 's>,
    freed: Vec<(NodeId, Res)>,
    cost: EvictionCost,
}

/// The candidate domains of one gang's victim search (indexed as ranked) with their
/// estimates, worked out as far as choosing the next domain to search needs.
pub struct Estimates<'o, 'd, 's, 'u> {
    job: JobId,
    /// The mode, and whether only units the rules let it evict count.
    mode: (EvictMode, bool),
    /// The resource whose amount freed counts in the cost.
    key: usize,
    /// Whether a node of domain `i` is one the gang may use there.
    usable: &'u dyn Fn(usize, NodeId) -> bool,
    walks: Vec<Walk<'o, 'd, 's>>,
    walked: Vec<Walked>,
    searched: Vec<bool>,
}

impl<'o, 'd, 's, 'u> Estimates<'o, 'd, 's, 'u> {
    /// Walks each domain (given as its victim order and its room before any eviction) until
    /// it holds the gang of `job` or costs more than the cheapest estimate so far.
    pub fn new(
        ctx: &Ctx,
        (job, mode, key): (JobId, (EvictMode, bool), usize),
        domains: Vec<(VictimOrder<'o>, DomainRoom<'d, 's>)>,
        usable: &'u dyn Fn(usize, NodeId) -> bool,
    ) -> Self {
        let walks: Vec<Walk> =
            domains.into_iter().map(|(order, room)| Walk { order, room, freed: Vec::new(), cost: NO_COST }).collect();
        let n = walks.len();
        let mut estimates =
            Estimates { job, mode, key, usable, walks, walked: vec![Walked::Never; n], searched: vec![false; n] };
        let mut cheapest: Option<EvictionCost> = None;
        for i in 0..n {
            estimates.walked[i] = estimates.walk(ctx, i, cheapest);
            if let Walked::Holds(cost) = estimates.walked[i] {
                cheapest = Some(cheapest.map_or(cost, |c| c.min(cost)));
            }
        }
        estimates
    }

    /// The next domain to search: the one not searched yet with the lowest estimate (ties
    /// going to the one ranked first), unless that costs more than `bound` (the best set
    /// found so far, and the index of its domain). Paused walks that could come first are
    /// taken up until the answer is certain.
    pub fn next(&mut self, ctx: &Ctx, bound: Option<(EvictionCost, usize)>) -> Option<usize> {
        loop {
            let cheapest = (0..self.walks.len())
                .filter_map(|i| match self.walked[i] {
                    Walked::Holds(cost) if !self.searched[i] => Some((cost, i)),
                    _ => None,
                })
                .min();
            let limit = match (cheapest, bound) {
                (Some(c), Some(b)) => Some(c.min(b)),
                (c, b) => c.or(b),
            };
            let paused = (0..self.walks.len()).find(|&i| match self.walked[i] {
                Walked::AtLeast(cost) => limit.is_none_or(|l| (cost, i) <= l),
                _ => false,
            });
            if let Some(i) = paused {
                self.walked[i] = self.walk(ctx, i, limit.map(|(cost, _)| cost));
                continue;
            }
            let (cost, i) = cheapest?;
            if bound.is_some_and(|b| (cost, i) > b) {
                return None;
            }
            self.searched[i] = true;
            return Some(i);
        }
    }

    /// Takes domain `i`'s walk on: units with no pod on a node the gang may use there, or
    /// that may not be evicted for the job now, are passed over, as the search passes them;
    /// the walk pauses once its cost is above `cutoff`.
    fn walk(&mut self, ctx: &Ctx, i: usize, cutoff: Option<EvictionCost>) -> Walked {
        let ssn = &*ctx.ssn;
        let usable = |n: NodeId| (self.usable)(i, n);
        let w = &mut self.walks[i];
        while let Some(v) = w.order.next(ssn, ctx.fw) {
            let on = |p: &PodId| ssn.pod_state[*p].running_on().filter(|&n| usable(n));
            if !v.pods.iter().any(|p| on(p).is_some()) || !may_take(ctx, self.mode, self.job, v) {
                continue;
            }
            w.cost = with_victim(w.cost, ssn.snap, v, self.key);
            for (p, n) in v.pods.iter().filter_map(|p| on(p).map(|n| (*p, n))) {
                let at = match w.freed.iter().position(|(m, _)| *m == n) {
                    Some(at) => at,
                    None => {
                        w.freed.push((n, Res::zero(ssn.snap.resources.len())));
                        w.freed.len() - 1
                    }
                };
                w.freed[at].1.add(ssn.requests(p));
                w.room.update_freed(ssn, n, &w.freed[at].1, &usable);
            }
            if w.room.could_hold() {
                return Walked::Holds(w.cost);
            }
            if cutoff.is_some_and(|c| w.cost > c) {
                return Walked::AtLeast(w.cost);
            }
        }
        Walked::Never
    }
}
