//! Racks in trace mode (`--nodes-per-rack`, `--racks-per-block`): the replay's nodes labelled
//! into racks (and blocks) in index order, the `default` topology over those labels, what each
//! trace job asks of it, and where the multi-node gangs landed. The same racks can be hidden
//! from the scheduler (`aware: false`) to measure where gangs land when it does not know them.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use drover_api::topology::DEFAULT_TOPOLOGY;
use drover_scheduler::snapshot::{LevelInput, TopologyInput, TopologyRequestInput};

use super::record::Replay;
use super::rows::TraceJob;

/// The node label naming a node's rack.
pub const RACK_LABEL: &str = "network.drover.dev/rack";
/// The node label naming a node's block.
pub const BLOCK_LABEL: &str = "network.drover.dev/block";
const RACK: &str = "rack";
const BLOCK: &str = "block";

/// How the replay's nodes are grouped: consecutive nodes share a rack, consecutive racks a
/// block; the last rack or block takes what is left, so it may be smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Racks {
    /// Nodes per rack.
    pub nodes_per_rack: u32,
    /// Racks per block; `None`: no block level.
    pub racks_per_block: Option<u32>,
    /// Whether the scheduler is told: a `default` topology and the jobs' requests. When false
    /// the racks only measure where gangs landed.
    pub aware: bool,
}

impl Racks {
    /// The rack of node `index`.
    pub fn rack_of(&self, index: usize) -> usize {
        index / self.nodes_per_rack as usize
    }

    /// Racks in a cluster of `nodes` nodes.
    pub fn count(&self, nodes: u32) -> u32 {
        nodes.div_ceil(self.nodes_per_rack)
    }

    /// The labels of node `index`: its rack and, with blocks, its block.
    pub fn labels(&self, index: usize) -> BTreeMap<String, String> {
        let rack = self.rack_of(index);
        let mut labels = BTreeMap::from([(RACK_LABEL.to_string(), format!("r{rack:03}"))]);
        if let Some(per_block) = self.racks_per_block {
            labels.insert(BLOCK_LABEL.to_string(), format!("b{:02}", rack / per_block as usize));
        }
        labels
    }

    /// The `default` topology over the labels, coarse to fine.
    pub fn topology(&self) -> TopologyInput {
        let mut levels = Vec::new();
        if self.racks_per_block.is_some() {
            levels.push(LevelInput { name: BLOCK.into(), node_label: BLOCK_LABEL.into() });
        }
        levels.push(LevelInput { name: RACK.into(), node_label: RACK_LABEL.into() });
        TopologyInput { name: DEFAULT_TOPOLOGY.into(), levels }
    }

    /// GPUs of the largest rack of the cluster.
    fn rack_gpus(&self, nodes: u32, gpus_per_node: u32) -> u32 {
        self.nodes_per_rack.min(nodes) * gpus_per_node
    }

    /// What a job of `gpus` GPUs asks: nothing if one node holds it (it packs into the fullest
    /// racks); within one rack if one rack can; else, with blocks, within one block and as few
    /// racks as possible if a block can; else as few racks as possible, with no requirement.
    pub fn request(&self, gpus: u32, nodes: u32, gpus_per_node: u32) -> Option<TopologyRequestInput> {
        if gpus <= gpus_per_node {
            return None;
        }
        let ask = |required: Option<&str>, preferred: Option<&str>| {
            Some(TopologyRequestInput {
                topology: DEFAULT_TOPOLOGY.into(),
                required: required.map(String::from),
                preferred: preferred.map(String::from),
            })
        };
        let rack_gpus = self.rack_gpus(nodes, gpus_per_node);
        if gpus <= rack_gpus {
            return ask(Some(RACK), None);
        }
        match self.racks_per_block {
            Some(per_block) if gpus <= (rack_gpus * per_block).min(nodes * gpus_per_node) => {
                ask(Some(BLOCK), Some(RACK))
            }
            _ => ask(None, Some(RACK)),
        }
    }

    /// Where the multi-node gangs of a replay landed, each at its last start.
    pub fn placement(&self, trace: &[TraceJob], replay: &Replay, nodes: u32, gpus_per_node: u32) -> Placement {
        let rack_gpus = self.rack_gpus(nodes, gpus_per_node);
        let mut placement = Placement::default();
        for r in &replay.jobs {
            let job = &trace[r.job];
            let gpus = job.pods * job.gpus_per_pod;
            let Some(spanned) = r.racks.filter(|_| gpus > gpus_per_node) else { continue };
            if gpus > rack_gpus {
                placement.larger_than_rack += 1;
            } else {
                placement.gangs += 1;
                placement.within_rack += usize::from(spanned == 1);
            }
        }
        placement
    }
}

/// Where multi-node gangs (more GPUs than one node has) landed, counting each gang that
/// started, at its last start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Placement {
    /// Gangs that one rack could hold.
    pub gangs: usize,
    /// Of those, the ones placed within one rack.
    pub within_rack: usize,
    /// Gangs larger than any rack (never within one; not in the share).
    pub larger_than_rack: usize,
}

impl Placement {
    /// The share of the gangs one rack could hold that were placed within one (1 when none
    /// started).
    pub fn share(&self) -> f64 {
        if self.gangs == 0 {
            1.0
        } else {
            self.within_rack as f64 / self.gangs as f64
        }
    }

    /// The JSON object under a policy's `racks`.
    pub fn to_json(&self) -> Value {
        json!({
            "multiNodeGangs": self.gangs,
            "withinOneRack": (self.share() * 10000.0).round() / 10000.0,
            "largerThanRack": self.larger_than_rack,
        })
    }
}
