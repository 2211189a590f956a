//! Whether a domain could hold a gang by count, kept up to date as a victim search takes
//! units there: for each request size of the gang, how many pods of that size the domain's
//! usable nodes take, on their idle capacity, or, once the search took units on a node, on
//! what the node has once its releasing pods terminate (the capacity a placement after
//! evictions may use). A search tries to place the gang only once this holds, instead of
//! after every unit taken.

use crate::ids::{NodeId, PodId};
use crate::node_index::Class;
use crate::res::Res;
use crate::session::Session;

/// Slots per request size of the gang on the nodes of one domain.
#[derive(Clone)]
pub struct DomainRoom<'d, 's> {
    /// The domain's nodes, ascending.
    nodes: &'d [NodeId],
    /// Each distinct request of the gang, with how many of its pods ask it.
    wants: Vec<(&'s Res, i64)>,
    /// Per request, the slots of each node (0 where the gang may not go).
    slots: Vec<Vec<i64>>,
    /// Per request, the slots of the domain.
    total: Vec<i64>,
}

impl<'d, 's> DomainRoom<'d, 's> {
    /// The room of the domain's `nodes` for `gang` before any unit is taken, counting only
    /// nodes it may use.
    pub fn new(ssn: &Session<'s>, gang: &[PodId], nodes: &'d [NodeId], usable: &dyn Fn(NodeId) -> bool) -> Self {
        let mut wants: Vec<(&'s Res, i64)> = Vec::new();
        for &p in gang {
            let req = ssn.requests(p);
            match wants.iter_mut().find(|(r, _)| *r == req) {
                Some((_, n)) => *n += 1,
                None => wants.push((req, 1)),
            }
        }
        let slots: Vec<Vec<i64>> = wants
            .iter()
            .map(|(req, _)| nodes.iter().map(|&n| if usable(n) { ssn.idle_slots_indexed(n, req) } else { 0 }).collect())
            .collect();
        let total = slots.iter().map(|s| s.iter().sum()).collect();
        DomainRoom { nodes, wants, slots, total }
    }

    /// Counts units taken on `node`.
    pub fn update(&mut self, ssn: &Session, node: NodeId, usable: &dyn Fn(NodeId) -> bool) {
        self.recount(node, usable, |req| ssn.future_slots(node, req));
    }

    /// Counts `node` as if pods asking `freed` in all were evicted there (nothing is).
    pub fn update_freed(&mut self, ssn: &Session, node: NodeId, freed: &Res, usable: &dyn Fn(NodeId) -> bool) {
        self.recount(node, usable, |req| ssn.future_slots_with(node, req, freed));
    }

    fn recount(&mut self, node: NodeId, usable: &dyn Fn(NodeId) -> bool, slots: impl Fn(&Res) -> i64) {
        let Ok(at) = self.nodes.binary_search(&node) else { return };
        if !usable(node) {
            return;
        }
        for (w, (req, _)) in self.wants.iter().enumerate() {
            let now = slots(req);
            self.total[w] += now - self.slots[w][at];
            self.slots[w][at] = now;
        }
    }

    /// Whether the domain could still hold the gang by count were the evictions `taken_back`
    /// (pods with the nodes they release) undone; nothing is undone. Undoing an eviction
    /// takes exactly its pod's requests from its node's capacity once releasing pods
    /// terminate, so this is what counting again after undoing them would give.
    pub fn could_hold_without(
        &self,
        ssn: &Session,
        taken_back: impl Iterator<Item = (PodId, NodeId)>,
        usable: &dyn Fn(NodeId) -> bool,
    ) -> bool {
        // Per usable node of the domain: its place in `nodes`, and the requests taken back
        // there, negated.
        let mut back: Vec<(usize, NodeId, Res)> = Vec::new();
        for (pod, node) in taken_back.filter(|&(_, n)| usable(n)) {
            let Ok(at) = self.nodes.binary_search(&node) else { continue };
            let req = ssn.requests(pod);
            match back.iter_mut().find(|(a, ..)| *a == at) {
                Some((.., minus)) => minus.sub(req),
                None => back.push((at, node, Res::zero(req.len()).minus(req))),
            }
        }
        self.wants.iter().enumerate().all(|(w, &(req, pods))| {
            let lost: i64 =
                back.iter().map(|(at, n, minus)| self.slots[w][*at] - ssn.future_slots_with(*n, req, minus)).sum();
            self.total[w] - lost >= pods
        })
    }

    /// Whether every request size of the gang has as many slots as pods asking it (needed
    /// for the gang to fit, not enough: sizes share nodes).
    pub fn could_hold(&self) -> bool {
        self.wants.iter().zip(&self.total).all(|((_, pods), &slots)| slots >= *pods)
    }
}

/// Whether `need` of a gang's key resource (`key`, of `class`) could be had on idle capacity
/// anywhere plus what the `freed` nodes (where evictions were made) will have beyond their
/// idle capacity: the room a placement after evictions may use, summed. Needed for the gang
/// to fit there, not enough (pods do not split over nodes); a search outside any domain
/// tries to place the gang only once it holds.
pub fn cluster_could_hold(ssn: &Session, (class, key, need): (Class, usize, i64), freed: &[NodeId]) -> bool {
    let mut room = ssn.index.total(class);
    for &n in freed {
        room += (ssn.future_of(n, key) - ssn.idle_of(n, key).max(0)).max(0);
        if room >= need {
            return true;
        }
    }
    room >= need
}
