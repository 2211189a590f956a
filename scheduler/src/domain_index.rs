//! Topology domains indexed by idle capacity (GPUs and CPU, as the node index keys nodes),
//! kept up to date as the session places and evicts pods, so that finding the domains that
//! could hold a gang touches only domains with room instead of every node of the cluster;
//! and each domain's capacity once releasing pods terminate, so that ranking domains for a
//! victim search does not sum their nodes.

use std::collections::BTreeSet;

use crate::node_index::Class;
use crate::snapshot::{DomainId, Level, NodeId, Snapshot};

/// Idle sums and their order for one level of one topology.
#[derive(Debug, Clone, Default)]
struct LevelIndex {
    idle: Vec<[i64; 2]>,
    sorted: [BTreeSet<(i64, DomainId)>; 2],
    future: Vec<[i64; 2]>,
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
            .map(|t| {
                t.domains
                    .iter()
                    .map(|list| {
                        let idle = vec![[0, 0]; list.len()];
                        let set: BTreeSet<(i64, DomainId)> = (0..list.len()).map(|d| (0, d)).collect();
                        LevelIndex { idle: idle.clone(), sorted: [set.clone(), set], future: idle }
                    })
                    .collect()
            })
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
                    if old == new {
                        continue;
                    }
                    let before = ix.idle[d][class];
                    let after = before - old[class] + new[class];
                    ix.sorted[class].remove(&(before, d));
                    ix.sorted[class].insert((after, d));
                    ix.idle[d][class] = after;
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
        &self,
        topology: usize,
        level: Level,
        class: Class,
        min: i64,
    ) -> impl Iterator<Item = DomainId> + '_ {
        self.levels[topology][level].sorted[class as usize].range((min, 0)..).map(|&(_, d)| d)
    }
}
