//! Which domains of a required level are worth searching for victims, and the resource a
//! gang's need is counted in.

use super::MAX_VICTIM_DOMAINS;
use crate::actions::Ctx;
use crate::node_index::Class;
use crate::session::Session;
use crate::snapshot::{NodeId, PodId};
use crate::topology_placement::RequiredDomains;

use super::VictimOrder;

/// The domains worth searching for victims for `gang`, most capacity being freed and held by
/// the order's units (in the gang's key resource) first, those that could hold it at all, at
/// most [`MAX_VICTIM_DOMAINS`]. Per-domain sums rank them, whatever the gang's node
/// constraints (the search itself keeps to the nodes it may use).
pub(super) fn victim_domains(
    ctx: &Ctx,
    gang: &[PodId],
    order: &VictimOrder,
    required: &RequiredDomains,
) -> Vec<(usize, Vec<NodeId>)> {
    let ssn = &ctx.ssn;
    let (class, key, need) = key_need(ssn, gang);
    let (t, level) = (required.topology, required.level);
    let held = order.held_per_domain(ssn, t, level);
    let at_nodes = level == ssn.snap.topologies[t].node_level();
    let future = |d: usize| match at_nodes {
        true => ssn.future_of(NodeId::from(d), key).max(0),
        false => ssn.domains.future(t, level, d, class),
    };
    let mut ranked: Vec<(std::cmp::Reverse<i64>, usize)> = required
        .domains
        .iter()
        .map(|&d| (std::cmp::Reverse(future(d) + held[d][class as usize]), d))
        .filter(|&(f, _)| f.0 >= need)
        .collect();
    // The first few of hundreds of domains, in order, without sorting the rest.
    if ranked.len() > MAX_VICTIM_DOMAINS {
        ranked.select_nth_unstable(MAX_VICTIM_DOMAINS);
        ranked.truncate(MAX_VICTIM_DOMAINS);
    }
    ranked.sort_unstable();
    ranked.into_iter().map(|(_, d)| (d, required.nodes(ssn.snap, d))).collect()
}

/// A gang's key resource, its class, and how much of it the gang asks in all.
pub(super) fn key_need(ssn: &Session, gang: &[PodId]) -> (Class, usize, i64) {
    let key = key_resource(ssn, gang);
    let class = if Some(key) == ssn.snap.gpu { Class::Gpu } else { Class::Cpu };
    (class, key, gang.iter().map(|&p| ssn.requests(p)[key]).sum())
}

/// The resource a gang's placement is keyed by: GPUs when it asks for any, else CPU.
pub(super) fn key_resource(ssn: &Session, gang: &[PodId]) -> usize {
    let gpu = gang.iter().any(|&p| ssn.snap.jobs[ssn.snap.pods[p].job].tasks[ssn.snap.pods[p].task].gpu);
    ssn.snap.key_resource(gpu)
}
