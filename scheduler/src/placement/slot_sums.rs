//! Per request shape, how many of its pods each domain of a topology takes on idle capacity,
//! kept up to date from the session's journal of changed nodes. Asking whether a zone of
//! thousands of nodes could hold a gang is then a lookup, not a walk over its nodes; victim
//! searches ask it after every eviction.

use std::rc::Rc;

use crate::ids::{ti_vec, NodeId, TiVec};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{DomainId, Level, Topology};

use super::Feasibility;

/// Idle slots for pods asking one request under one set of constraints, per node and per
/// domain of one topology.
pub struct SlotSums {
    /// Held so that the pointer the sums are found by stays this feasibility's.
    feasibility: Rc<Feasibility>,
    req: Res,
    /// Idle slots of each node the constraints allow; 0 elsewhere.
    per_node: TiVec<NodeId, i64>,
    /// Per labelled level and domain, the sum over its nodes.
    per_domain: Vec<Vec<i64>>,
    /// How much of the session's journal of changed nodes the sums include.
    seen: usize,
}

impl SlotSums {
    /// The sums on the session as it is.
    pub fn new(ssn: &Session, topo: &Topology, feasibility: Rc<Feasibility>, req: &Res) -> SlotSums {
        let per_domain = topo.domains.iter().map(|level| vec![0; level.len()]).collect();
        let per_node = ti_vec![0; ssn.snap.nodes.len()];
        let mut sums = SlotSums { feasibility, req: req.clone(), per_node, per_domain, seen: 0 };
        sums.rebuild(ssn, topo);
        sums
    }

    /// Whether these are the sums for pods asking `req` under `feasibility`.
    pub fn is_for(&self, feasibility: &Rc<Feasibility>, req: &Res) -> bool {
        Rc::ptr_eq(&self.feasibility, feasibility) && self.req == *req
    }

    /// Brings the sums up to date with the session: node by node for the nodes changed since
    /// the last call, or all over again when more changes than nodes were made.
    pub fn catch_up(&mut self, ssn: &Session, topo: &Topology) {
        let since = ssn.changed_nodes.len() - self.seen;
        if since > self.per_node.len() {
            self.rebuild(ssn, topo);
            return;
        }
        for i in self.seen..ssn.changed_nodes.len() {
            let n = ssn.changed_nodes[i];
            self.set(ssn, topo, n);
        }
        self.seen = ssn.changed_nodes.len();
    }

    /// The idle slots of a domain's nodes.
    pub fn domain(&self, level: Level, d: DomainId) -> i64 {
        self.per_domain[level][d]
    }

    /// The idle slots of one node (0 where the constraints exclude it).
    pub fn node(&self, n: NodeId) -> i64 {
        self.per_node[n]
    }

    fn rebuild(&mut self, ssn: &Session, topo: &Topology) {
        self.per_domain.iter_mut().for_each(|level| level.fill(0));
        self.per_node.iter_mut().for_each(|s| *s = 0);
        for n in ssn.snap.nodes.keys() {
            self.set(ssn, topo, n);
        }
        self.seen = ssn.changed_nodes.len();
    }

    fn set(&mut self, ssn: &Session, topo: &Topology, n: NodeId) {
        let now = if self.feasibility.ok(n) { ssn.idle_slots(n, &self.req, None) } else { 0 };
        let delta = now - self.per_node[n];
        if delta == 0 {
            return;
        }
        self.per_node[n] = now;
        for (level, sums) in self.per_domain.iter_mut().enumerate() {
            let Some(d) = topo.domain_of(level, n) else { break };
            sums[d] += delta;
        }
    }
}
