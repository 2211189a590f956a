//! What making room for a gang inside one domain would cost, counted before anything is
//! evicted: the victim order kept to the domain is walked, each unit's pods there counted as
//! freed on their nodes, until the domain could hold the gang by count (see [`DomainRoom`]).
//! The victim search then searches the domains for real in the order of this estimate, and
//! skips those whose estimate already costs more than the best set found.

use crate::ids::{JobId, NodeId, PodId};
use crate::plugin::EvictMode;
use crate::res::Res;

use super::domain_room::DomainRoom;
use super::{with_victim, Ctx, EvictionCost, VictimOrder, NO_COST};

/// The cost of the units `order` yields (from where it stands) up to the first with which
/// the domain could hold the gang of `job` by count, starting from the domain's `room` for
/// it; `None` when they never could. Units with no pod on a node the gang may use there, or
/// that may not be evicted for `job` now, are passed over, as the search passes them.
pub fn estimate(
    ctx: &Ctx,
    job: JobId,
    mut order: VictimOrder,
    mode: EvictMode,
    (mut room, usable): (DomainRoom, &dyn Fn(NodeId) -> bool),
    key: usize,
) -> Option<EvictionCost> {
    let ssn = &*ctx.ssn;
    let mut freed: Vec<(NodeId, Res)> = Vec::new();
    let mut cost = NO_COST;
    while let Some(v) = order.next(ssn, ctx.fw) {
        let on = |p: &PodId| ssn.pod_state[*p].running_on().filter(|&n| usable(n));
        if !v.pods.iter().any(|p| on(p).is_some()) || ctx.fw.may_evict(ssn, mode, job, v).is_err() {
            continue;
        }
        cost = with_victim(cost, ssn.snap, v, key);
        for (p, n) in v.pods.iter().filter_map(|p| on(p).map(|n| (*p, n))) {
            let at = match freed.iter().position(|(m, _)| *m == n) {
                Some(at) => at,
                None => {
                    freed.push((n, Res::zero(ssn.snap.resources.len())));
                    freed.len() - 1
                }
            };
            freed[at].1.add(ssn.requests(p));
            room.update_freed(ssn, n, &freed[at].1, usable);
        }
        if room.could_hold() {
            return Some(cost);
        }
    }
    None
}
