//! `Topology`: a hierarchy of node labels (block, rack, NVLink domain, ...), coarse to fine,
//! that gangs may ask to be placed within. Cluster-scoped; the node is its implicit last
//! level. The blocks that ask for it on PodGroups and Jobs live here too, so that both read
//! the same shape.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::topology::NODE_LEVEL;

/// The most levels a Topology may have: far more than any network hierarchy (block, rack,
/// NVLink domain, ...), and a bound on the list.
pub const MAX_LEVELS: u32 = 16;

/// Desired state of a topology: its levels.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "scheduling.drover.dev",
    version = "v1alpha1",
    kind = "Topology",
    plural = "topologies",
    shortname = "topo",
    category = "drover",
    status = "TopologyStatus",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodes"),
    printcolumn(name = "Excluded", type_ = "integer", json_path = ".status.excludedNodes"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    /// Levels, coarse to fine (e.g. block, then rack); names unique (a list map keyed by
    /// name). The node is the implicit finest level after them, named `node`.
    #[schemars(length(min = 1, max = MAX_LEVELS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub levels: Vec<TopologyLevel>,
}

/// One level of a topology.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// The level's name, which jobs name in `required` and `preferred` (e.g. `rack`).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// The node label whose value names a node's domain at this level.
    #[schemars(length(min = 1, max = 317))]
    pub node_label: String,
}

/// Condition type of a Topology: whether jobs can be placed by it.
pub const READY: &str = "Ready";

/// Observed state of a topology, written by the controllers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyStatus {
    /// Nodes in the cluster.
    #[serde(default)]
    pub nodes: u32,
    /// Nodes lacking the label of some level (or of one above it): no place for work that
    /// requires that level.
    #[serde(default)]
    pub excluded_nodes: u32,
    /// Per level, coarse to fine: its domains and the nodes without one.
    #[serde(default)]
    pub levels: Vec<LevelStatus>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions: `Ready`, false with the reason jobs cannot use the topology.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// What one level of a topology covers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LevelStatus {
    /// The level's name.
    pub name: String,
    /// Its domains (distinct label-value paths from the top level down).
    pub domains: u32,
    /// Nodes with no domain at this level.
    pub excluded_nodes: u32,
}

impl TopologySpec {
    /// Why jobs cannot be placed by these levels, as a CamelCase reason and a message; `None`
    /// when they can. The scheduler leaves such a topology out and the controllers report it.
    pub fn refusal(&self) -> Option<(&'static str, String)> {
        if self.levels.is_empty() {
            return Some(("NoLevels", "the topology has no levels".to_string()));
        }
        for (i, level) in self.levels.iter().enumerate() {
            if level.name == NODE_LEVEL {
                return Some(("ReservedLevelName", format!("level {NODE_LEVEL:?} is the implicit last level")));
            }
            if level.node_label.is_empty() {
                return Some(("EmptyNodeLabel", format!("level {:?} names no node label", level.name)));
            }
            if let Some(other) = self.levels[..i].iter().find(|o| o.name == level.name) {
                return Some(("DuplicateLevel", format!("level {:?} appears twice", other.name)));
            }
            if let Some(other) = self.levels[..i].iter().find(|o| o.node_label == level.node_label) {
                return Some((
                    "DuplicateNodeLabel",
                    format!("levels {:?} and {:?} both use node label {:?}", other.name, level.name, level.node_label),
                ));
            }
        }
        None
    }

    /// The level names jobs may name, coarse to fine, ending with `node`.
    pub fn level_names(&self) -> Vec<&str> {
        self.levels.iter().map(|l| l.name.as_str()).chain([NODE_LEVEL]).collect()
    }
}

/// Where a whole job's (or PodGroup's) pods must or should go together.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// The Topology; absent = `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// Every pod inside one domain of this level (hard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub required: Option<String>,
    /// As few domains of this level as possible (soft).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub preferred: Option<String>,
}

/// Where one task's pods must or should go together, inside the job's domain (a sub-group),
/// in the job's topology.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskTopologyConstraint {
    /// Every pod of the task inside one domain of this level (hard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub required: Option<String>,
    /// As few domains of this level as possible (soft).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub preferred: Option<String>,
    /// The task's pods in groups of consecutive indexes, each group inside one domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<SliceConstraint>,
}

/// Slices of a task: pods of consecutive indexes in groups of `size`, each group inside one
/// domain of level `required`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SliceConstraint {
    /// Pods per slice.
    #[schemars(range(min = 1))]
    pub size: u32,
    /// The level each slice must fit in.
    #[schemars(length(min = 1, max = 63))]
    pub required: String,
}

/// Per-task topology blocks, by task name (the pods' task label, as in `minTaskMember`).
pub type TaskTopologies = BTreeMap<String, TaskTopologyConstraint>;

/// Where a job's pods sit in a topology, as the scheduler last placed or nominated them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyPlacement {
    /// The Topology.
    pub name: String,
    /// The finest level holding every placed pod (`node` when they share one); absent when
    /// they span domains of the top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// That domain's path of label values from the top level down (e.g. `b1/r7`), the node's
    /// name last at the `node` level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(levels: &[(&str, &str)]) -> TopologySpec {
        TopologySpec {
            levels: levels
                .iter()
                .map(|(n, l)| TopologyLevel { name: n.to_string(), node_label: l.to_string() })
                .collect(),
        }
    }

    #[test]
    fn a_topology_is_refused_for_what_the_snapshot_cannot_build() {
        assert_eq!(spec(&[("block", "b"), ("rack", "r")]).refusal(), None);
        assert_eq!(spec(&[]).refusal().unwrap().0, "NoLevels");
        assert_eq!(spec(&[("node", "n")]).refusal().unwrap().0, "ReservedLevelName");
        assert_eq!(spec(&[("rack", "r"), ("rack", "x")]).refusal().unwrap().0, "DuplicateLevel");
        assert_eq!(spec(&[("a", "r"), ("b", "r")]).refusal().unwrap().0, "DuplicateNodeLabel");
        assert_eq!(spec(&[("a", "")]).refusal().unwrap().0, "EmptyNodeLabel");
        assert_eq!(spec(&[("block", "b"), ("rack", "r")]).level_names(), ["block", "rack", "node"]);
    }
}
