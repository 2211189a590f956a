//! Why no set of victims would seat a gang, and which nodes the gang (or pods standing in for
//! its pods) may use at all.

use crate::actions::Ctx;
use crate::placement::Feasibility;
use crate::plugin::Victim;
use crate::session::PodState;
use crate::snapshot::{NodeId, PodId};
use std::rc::Rc;

/// Why evicting every candidate would not seat the gang: the first resource the gang needs
/// more of than the idle and freeable capacity of the nodes its pods may use, or else that
/// the capacity is split across nodes so that no placement fits.
pub fn shortfall(ctx: &mut Ctx, gang: &[PodId], candidates: &[&Victim], action: &str) -> String {
    let snap = ctx.ssn.snap;
    let feasible = gang_feasibility(ctx, gang);
    let usable = |n: NodeId| feasible.iter().any(|f| f.ok(n));
    let need = ctx.ssn.sum_requests(gang);
    // What every node will have, less what the nodes the gang may not use will have (none,
    // when some pod of it may use every node).
    let mut have = ctx.ssn.future_total.clone();
    if !feasible.iter().any(|f| f.nodes.len() == snap.nodes.len()) {
        for n in snap.nodes.keys().filter(|&n| !usable(n)) {
            for r in 0..need.len() {
                have[r] -= ctx.ssn.future_of(n, r);
            }
        }
    }
    for v in candidates {
        for &p in &v.pods {
            if ctx.ssn.pod_state[p].running_on().is_some_and(usable) {
                have.add(ctx.ssn.requests(p));
            }
        }
    }
    match (0..need.len()).find(|&r| need[r] > have[r].max(0)) {
        Some(r) => format!(
            "{action}: idle and evictable capacity on nodes the gang can use gives {} of {} {}",
            snap.amount(r, have[r].max(0)),
            snap.amount(r, need[r]),
            snap.resources[r]
        ),
        None => format!(
            "{action}: enough could be freed in total, but not on nodes where the gang's {} pod(s) fit together",
            gang.len()
        ),
    }
}

/// The feasibility of each distinct task constraints of `gang` and of the pending pods that
/// may stand in for its pods (see [`crate::actions::gang_place`]): a node is usable by the gang when one of
/// them allows it.
pub(super) fn gang_feasibility(ctx: &mut Ctx, gang: &[PodId]) -> Vec<Rc<Feasibility>> {
    let ssn = &ctx.ssn;
    let stand_ins: Vec<PodId> = match gang.first().map(|&p| ssn.snap.pods[p].job) {
        Some(job) => ssn.snap.jobs[job]
            .tasks
            .iter()
            .filter_map(|t| t.pods.iter().copied().find(|&p| ssn.pod_state[p] == PodState::Pending))
            .filter(|&p| !gang.contains(&p) && gang.iter().any(|&g| ssn.requests(p).fits_in(ssn.requests(g))))
            .collect(),
        None => Vec::new(),
    };
    let mut out: Vec<Rc<Feasibility>> = Vec::new();
    for &p in gang.iter().chain(&stand_ins) {
        let f = ctx.placer.feasibility(ctx.ssn, ctx.fw, p);
        if !out.iter().any(|o| Rc::ptr_eq(o, &f)) {
            out.push(f);
        }
    }
    out
}

/// The nodes any pod of `gang` may use (sorted).
pub fn usable_nodes(ctx: &mut Ctx, gang: &[PodId]) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = gang_feasibility(ctx, gang).iter().flat_map(|f| f.nodes.iter().copied()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}
