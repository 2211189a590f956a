//! Node order: bin-pack (fill used nodes first) or spread (prefer empty nodes), chosen per
//! node pool and separately for GPU and CPU-only workloads.

use crate::config::{PlacementConfig, PlacementStrategy};
use crate::plugin::{Hook, Plugin};

/// The node-order plugin.
pub struct NodeOrder {
    config: PlacementConfig,
}

impl NodeOrder {
    /// A plugin with these strategies.
    pub fn new(config: PlacementConfig) -> NodeOrder {
        NodeOrder { config }
    }
}

impl Plugin for NodeOrder {
    fn name(&self) -> &'static str {
        "nodeorder"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::Placement]
    }

    fn placement(&self, pool: &str, gpu: bool) -> Option<PlacementStrategy> {
        Some(self.config.strategy(pool, gpu))
    }
}
