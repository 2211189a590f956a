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
    /// Per node, the catch-up that last counted it again: a node changed many times since
    /// (a trial placement made and undone, a victim evicted and spared) is counted once.
    counted: TiVec<NodeId, u32>,
    catch_ups: u32,
}

impl SlotSums {
    /// The sums on the session as it is.
    pub fn new(ssn: &Session, topo: &Topology, feasibility: Rc<Feasibility>, req: &Res) -> SlotSums {
        let per_domain = topo.domains.iter().map(|level| vec![0; level.len()]).collect();
        let per_node = ti_vec![0; ssn.snap.nodes.len()];
        let counted = ti_vec![0; ssn.snap.nodes.len()];
        let mut sums = SlotSums { feasibility, req: req.clone(), per_node, per_domain, seen: 0, counted, catch_ups: 0 };
        sums.rebuild(ssn, topo);
        sums
    }

    /// Brings the sums up to date with the session: node by node for the nodes changed since
    /// the last call, or all over again when more changes than nodes were made.
    pub fn catch_up(&mut self, ssn: &Session, topo: &Topology) {
        let since = ssn.changed_nodes.len() - self.seen;
        if since > self.per_node.len() {
            self.rebuild(ssn, topo);
            return;
        }
        self.catch_ups += 1;
        for i in self.seen..ssn.changed_nodes.len() {
            let n = ssn.changed_nodes[i];
            if self.counted[n] != self.catch_ups {
                self.counted[n] = self.catch_ups;
                self.set(ssn, topo, n);
            }
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
        for (level, d) in topo.domains_of(n) {
            self.per_domain[level][d] += delta;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobId;
    use crate::session::{EvictReason, Statement};
    use crate::snapshot::Snapshot;
    use crate::test_cluster::cluster;

    /// Every node allowed but n4.
    fn all_but_n4(snap: &Snapshot) -> Rc<Feasibility> {
        let excluded: TiVec<NodeId, Option<usize>> =
            snap.nodes.keys().map(|n| (snap.nodes[n].name == "n4").then_some(0)).collect();
        let nodes = snap.nodes.keys().filter(|&n| excluded[n].is_none()).collect();
        Rc::new(Feasibility { excluded, reasons: vec!["excluded".into()], nodes, pools: vec![0] })
    }

    /// The sums must equal each domain's allowed nodes' idle slots counted one by one.
    fn assert_exact(sums: &SlotSums, ssn: &Session, feasibility: &Feasibility, req: &Res, when: &str) {
        let topo = &ssn.snap.topologies[0];
        for (level, domains) in topo.domains.iter().enumerate() {
            for (d, domain) in domains.iter().enumerate() {
                let allowed = domain.nodes.iter().filter(|&&n| feasibility.ok(n));
                let direct: i64 = allowed.map(|&n| ssn.idle_slots(n, req, None)).sum();
                assert_eq!(sums.domain(level, d), direct, "{when}: level {level}, domain {}", domain.name);
            }
        }
    }

    #[test]
    fn sums_follow_every_change_and_undo() {
        let snap = cluster();
        let topo = &snap.topologies[0];
        let mut ssn = Session::open(&snap);
        let feasibility = all_but_n4(&snap);
        let req = snap.jobs[JobId(0)].tasks[0].requests.clone();
        let mut sums = SlotSums::new(&ssn, topo, feasibility.clone(), &req);
        assert_exact(&sums, &ssn, &feasibility, &req, "at the start");
        let node = |name: &str| snap.nodes.keys().find(|&n| snap.nodes[n].name == name).expect("a node");
        let pods = &snap.jobs[JobId(0)].tasks[0].pods;

        let mut st = Statement::new();
        ssn.allocate(&mut st, pods[8], node("n4"));
        ssn.allocate(&mut st, pods[9], node("n3"));
        ssn.evict(&mut st, pods[0], EvictReason::Preempt, JobId(0));
        ssn.pipeline(&mut st, pods[10], node("n0"));
        sums.catch_up(&ssn, topo);
        assert_exact(&sums, &ssn, &feasibility, &req, "after placing, evicting and pipelining");

        ssn.discard(st);
        sums.catch_up(&ssn, topo);
        assert_exact(&sums, &ssn, &feasibility, &req, "after undoing them");

        // More changes than nodes: the sums are made again.
        let mut st = Statement::new();
        for (i, &pod) in pods[8..12].iter().enumerate() {
            ssn.allocate(&mut st, pod, node(&format!("n{}", i + 2)));
        }
        for &pod in &pods[2..6] {
            ssn.evict(&mut st, pod, EvictReason::Reclaim, JobId(0));
        }
        assert!(ssn.changed_nodes.len() - sums.seen > snap.nodes.len());
        sums.catch_up(&ssn, topo);
        assert_exact(&sums, &ssn, &feasibility, &req, "after many changes");
        assert_eq!(sums.node(node("n4")), 0, "an excluded node has no slots");
    }
}
