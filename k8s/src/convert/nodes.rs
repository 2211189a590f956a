//! Nodes as the conversion reads them, before the usage of foreign pods is subtracted.

use super::pod;
use super::{unique, Problem};
use k8s_openapi::api::core::v1::Node;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A node before the usage of foreign pods is subtracted.
pub(super) struct NodeDraft {
    pub(super) allocatable: BTreeMap<String, i64>,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) taints: Vec<drover_api::Taint>,
    pub(super) unschedulable: bool,
}

pub(super) fn convert_nodes(objects: &[Arc<Node>], problems: &mut Vec<Problem>) -> BTreeMap<String, NodeDraft> {
    let mut nodes = BTreeMap::new();
    for ((_, name), node) in unique(objects, |n| &n.metadata) {
        let name = name.as_str();
        let mut findings = Vec::new();
        let allocatable =
            pod::parse_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()), "allocatable", &mut findings);
        let spec = node.spec.as_ref();
        let taints = spec.and_then(|s| s.taints.as_ref()).into_iter().flatten().map(|t| pod::taint(t, &mut findings));
        let draft = NodeDraft {
            taints: taints.collect(),
            allocatable,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        };
        for (reason, message) in findings {
            problems.push(Problem {
                kind: "Node",
                namespace: None,
                name: name.to_string(),
                reason: reason.into(),
                message,
            });
        }
        nodes.insert(name.to_string(), draft);
    }
    nodes
}
