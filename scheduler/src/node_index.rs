//! Nodes indexed by idle capacity of the resource that decides placement (GPUs for GPU
//! pods, CPU for CPU-only pods), per node pool, so that finding the best-fitting node for a
//! pod touches only nodes that can hold it instead of scanning the whole cluster.

use std::collections::BTreeSet;

use crate::config::PlacementStrategy;
use crate::ids::{ti_vec, NodeId, TiVec};
use crate::snapshot::Snapshot;

/// Which key a search uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Idle GPUs.
    Gpu = 0,
    /// Idle CPU millicores.
    Cpu = 1,
}

impl Class {
    /// An amount given per resource, as the indexes key it per class: GPUs (none in a cluster
    /// without a GPU resource), then CPU.
    pub fn keys(snap: &Snapshot, amount: impl Fn(usize) -> i64) -> [i64; 2] {
        [snap.gpu.map_or(0, &amount), amount(snap.cpu)]
    }
}

/// Ordered sets of (idle amount, node) per pool and class.
#[derive(Debug, Clone, Default)]
pub struct NodeIndex {
    keys: TiVec<NodeId, Option<[i64; 2]>>,
    pools: Vec<[BTreeSet<(i64, NodeId)>; 2]>,
    node_pool: TiVec<NodeId, usize>,
    /// Per class, the sum of the indexed nodes' keys (negative keys counted as 0).
    totals: [i64; 2],
}

impl NodeIndex {
    /// An empty index for `nodes` nodes spread over `pools` pools.
    pub fn new(node_pool: TiVec<NodeId, usize>, pools: usize) -> NodeIndex {
        NodeIndex {
            keys: ti_vec![None; node_pool.len()],
            pools: (0..pools).map(|_| [BTreeSet::new(), BTreeSet::new()]).collect(),
            node_pool,
            totals: [0; 2],
        }
    }

    /// The idle amount of a class over every indexed node (every schedulable node).
    pub fn total(&self, class: Class) -> i64 {
        self.totals[class as usize]
    }

    /// A node's keys (idle GPUs, idle CPU), `None` when it is not indexed.
    pub fn keys(&self, node: NodeId) -> Option<[i64; 2]> {
        self.keys[node]
    }

    /// Sets a node's keys (idle GPUs, idle CPU); `None` removes it from the index.
    pub fn set(&mut self, node: NodeId, keys: Option<[i64; 2]>) {
        if self.keys[node] == keys {
            return;
        }
        let sets = &mut self.pools[self.node_pool[node]];
        if let Some(old) = self.keys[node] {
            sets[0].remove(&(old[0], node));
            sets[1].remove(&(old[1], node));
            self.totals[0] -= old[0].max(0);
            self.totals[1] -= old[1].max(0);
        }
        if let Some(new) = keys {
            sets[0].insert((new[0], node));
            sets[1].insert((new[1], node));
            self.totals[0] += new[0].max(0);
            self.totals[1] += new[1].max(0);
        }
        self.keys[node] = keys;
    }

    /// Nodes of a pool whose key is at least `min`, in placement preference order:
    /// bin-pack = least idle first; spread = most idle first. Ties go to the lower node id.
    pub fn candidates(
        &self,
        pool: usize,
        class: Class,
        min: i64,
        strategy: PlacementStrategy,
    ) -> Box<dyn Iterator<Item = NodeId> + '_> {
        let set = &self.pools[pool][class as usize];
        match strategy {
            PlacementStrategy::Binpack => Box::new(set.range((min, NodeId(0))..).map(|&(_, n)| n)),
            PlacementStrategy::Spread => {
                let mut upper: Option<i64> = None;
                Box::new(
                    std::iter::from_fn(move || {
                        let (key, _) = match upper {
                            None => set.iter().next_back()?,
                            Some(u) => set.range(..(u, NodeId(0))).next_back()?,
                        };
                        if *key < min {
                            return None;
                        }
                        upper = Some(*key);
                        Some(set.range((*key, NodeId(0))..=(*key, NodeId(usize::MAX))).map(|&(_, n)| n))
                    })
                    .flatten(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binpack_prefers_least_idle_and_spread_most_idle() {
        let mut ix = NodeIndex::new(vec![0, 0, 0, 0].into(), 1);
        ix.set(NodeId(0), Some([8, 1000]));
        ix.set(NodeId(1), Some([2, 1000]));
        ix.set(NodeId(2), Some([8, 1000]));
        ix.set(NodeId(3), Some([0, 1000]));
        let bin: Vec<_> = ix.candidates(0, Class::Gpu, 1, PlacementStrategy::Binpack).collect();
        assert_eq!(bin, [1, 0, 2].map(NodeId));
        let spread: Vec<_> = ix.candidates(0, Class::Gpu, 1, PlacementStrategy::Spread).collect();
        assert_eq!(spread, [0, 2, 1].map(NodeId));
        ix.set(NodeId(0), Some([1, 1000]));
        ix.set(NodeId(2), None);
        let bin: Vec<_> = ix.candidates(0, Class::Gpu, 2, PlacementStrategy::Binpack).collect();
        assert_eq!(bin, [NodeId(1)]);
        assert_eq!(ix.total(Class::Gpu), 3);
        assert_eq!(ix.total(Class::Cpu), 3000);
    }
}
