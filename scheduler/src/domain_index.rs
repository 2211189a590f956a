//! Topology domains indexed by idle capacity (GPUs and CPU, as the node index keys nodes),
//! kept up to date as the session places and evicts pods, so that finding the domains that
//! could hold a gang touches only domains with room instead of every node of the cluster;
//! and each domain's capacity once releasing pods terminate, so that ranking domains for a
//! victim search does not sum their nodes.
//!
//! Sums change with every pod placed, evicted or undone; the order by idle capacity is put
//! right only when it is asked for, and only for the domains whose sums changed since: a
//! trial placement that is undone, or a gang that takes ten slots of one rack, moves a
//! domain in the order once or not at all.

use std::collections::BTreeSet;

use crate::node_index::Class;
use crate::snapshot::{DomainId, Level, NodeId, Snapshot};

/// Idle sums and their order for one level of one topology.
#[derive(Debug, Clone, Default)]
struct LevelIndex {
    idle: Vec<[i64; 2]>,
    future: Vec<[i64; 2]>,
    /// Per class, (idle, domain) as last ordered.
    sorted: [BTreeSet<(i64, DomainId)>; 2],
    /// Each domain's idle sums as `sorted` has them.
    ordered: Vec<[i64; 2]>,
    /// Domains whose idle sums changed since they were last ordered (each once).
    moved: Vec<DomainId>,
    /// Per domain, whether it is in `moved`.
    listed: Vec<bool>,
}

impl LevelIndex {
    fn empty(domains: usize) -> LevelIndex {
        let zero = vec![[0, 0]; domains];
        let set: BTreeSet<(i64, DomainId)> = (0..domains).map(|d| (0, d)).collect();
        LevelIndex {
            idle: zero.clone(),
            future: zero.clone(),
            sorted: [set.clone(), set],
            ordered: zero,
            moved: Vec::new(),
            listed: vec![false; domains],
        }
    }

    /// Puts the domains whose sums changed back in order.
    fn reorder(&mut self) {
        for d in std::mem::take(&mut self.moved) {
            self.listed[d] = false;
            for class in 0..2 {
                let (before, now) = (self.ordered[d][class], self.idle[d][class]);
                if before != now {
                    self.sorted[class].remove(&(before, d));
                    self.sorted[class].insert((now, d));
                }
            }
            self.ordered[d] = self.idle[d];
        }
    }
}

/// Per topology and labelled level, each domain's idle GPUs and CPU over its schedulable
/// nodes.
#[derive(Debug, Clone, Default)]
pub struct DomainIndex {
    levels: Vec<Vec<LevelIndex>>,
    /// Each node's future capacity as last counted in its domains.
    node_future: Vec<[i64; 2]>,
}

impl DomainIndex {
    /// An index of the snapshot's topologies with every domain empty.
    pub fn new(snap: &Snapshot) -> DomainIndex {
        let levels = snap
            .topologies
            .iter()
            .map(|t| t.domains.iter().map(|list| LevelIndex::empty(list.len())).collect())
            .collect();
        DomainIndex { levels, node_future: vec![[0, 0]; snap.nodes.len()] }
    }

    /// Moves a node's idle keys from `old` to `new`, and its future capacity (GPUs and CPU
    /// once its releasing pods terminate, less pipelined promises) to `future`, in every
    /// domain it belongs to.
    pub fn update(
        &mut self,
        snap: &Snapshot,
        node: NodeId,
        (old, new): (Option<[i64; 2]>, Option<[i64; 2]>),
        future: [i64; 2],
    ) {
        let (old, new) = (old.unwrap_or([0, 0]), new.unwrap_or([0, 0]));
        let future_before = std::mem::replace(&mut self.node_future[usize::from(node)], future);
        if old == new && future_before == future {
            return;
        }
        for (t, topology) in snap.topologies.iter().enumerate() {
            for (level, d) in topology.domains_of(node) {
                let ix = &mut self.levels[t][level];
                for class in 0..2 {
                    ix.future[d][class] += future[class] - future_before[class];
                    ix.idle[d][class] += new[class] - old[class];
                }
                if old != new && !ix.listed[d] {
                    ix.listed[d] = true;
                    ix.moved.push(d);
                }
            }
        }
    }

    /// A domain's idle amount of the class.
    pub fn idle(&self, topology: usize, level: Level, domain: DomainId, class: Class) -> i64 {
        self.levels[topology][level].idle[domain][class as usize]
    }

    /// A domain's future amount of the class (see [`DomainIndex::update`]).
    pub fn future(&self, topology: usize, level: Level, domain: DomainId, class: Class) -> i64 {
        self.levels[topology][level].future[domain][class as usize]
    }

    /// Domains of a level with at least `min` idle of the class, least idle first.
    pub fn at_least(
        &mut self,
        topology: usize,
        level: Level,
        class: Class,
        min: i64,
    ) -> impl DoubleEndedIterator<Item = DomainId> + '_ {
        let ix = &mut self.levels[topology][level];
        ix.reorder();
        ix.sorted[class as usize].range((min, 0)..).map(|&(_, d)| d)
    }
}

#[cfg(test)]
mod tests {
    use crate::ids::JobId;
    use crate::node_index::Class;
    use crate::session::{EvictReason, Session, Statement};
    use crate::snapshot::NodeId;
    use crate::test_cluster::cluster;

    /// Every level's sums and order must be what summing the node index's keys gives.
    fn assert_exact(ssn: &mut Session, when: &str) {
        let snap = ssn.snap;
        let topo = &snap.topologies[0];
        for (level, domains) in topo.domains.iter().enumerate() {
            for class in [Class::Gpu, Class::Cpu] {
                let idle = |d: usize| -> i64 {
                    let keys = domains[d].nodes.iter().map(|&n| ssn.index.keys(n).unwrap_or([0, 0])[class as usize]);
                    keys.sum()
                };
                let sums: Vec<(i64, usize)> = (0..domains.len()).map(|d| (idle(d), d)).collect();
                for &(sum, d) in &sums {
                    assert_eq!(ssn.domains.idle(0, level, d, class), sum, "{when}: level {level}, domain {d}");
                }
                for min in [0, 1, 2, 8, 9, 16, 64_000, 200_000] {
                    let mut expected: Vec<(i64, usize)> = sums.iter().copied().filter(|&(s, _)| s >= min).collect();
                    expected.sort_unstable();
                    let expected: Vec<usize> = expected.into_iter().map(|(_, d)| d).collect();
                    let got: Vec<usize> = ssn.domains.at_least(0, level, class, min).collect();
                    assert_eq!(got, expected, "{when}: level {level}, {class:?} at least {min}");
                }
            }
        }
    }

    #[test]
    fn order_follows_changes_asked_for_after_each_or_after_many() {
        let snap = cluster();
        let mut ssn = Session::open(&snap);
        let node = |name: &str| snap.nodes.keys().find(|&n| snap.nodes[n].name == name).expect("a node");
        let pods = &snap.jobs[JobId(0)].tasks[0].pods;
        assert_exact(&mut ssn, "at the start");

        let mut st = Statement::new();
        ssn.allocate(&mut st, pods[8], node("n4"));
        assert_exact(&mut ssn, "after one placement");
        ssn.allocate(&mut st, pods[9], node("n3"));
        ssn.evict(&mut st, pods[0], EvictReason::Preempt, JobId(0));
        ssn.pipeline(&mut st, pods[10], node("n0"));
        ssn.allocate(&mut st, pods[11], node("n2"));
        assert_exact(&mut ssn, "after several changes asked for at once");

        ssn.discard(st);
        assert_exact(&mut ssn, "after undoing them");

        // A change undone before the order is asked for leaves it as it was.
        let mut st = Statement::new();
        ssn.allocate(&mut st, pods[8], node("n2"));
        ssn.discard(st);
        let mut st = Statement::new();
        for (i, &pod) in pods[8..12].iter().enumerate() {
            ssn.allocate(&mut st, pod, NodeId(2 + i % 3));
        }
        assert_exact(&mut ssn, "after a placement undone and four made");
    }
}
