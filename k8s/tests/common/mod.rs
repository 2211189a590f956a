//! What the conversion tests share: a cluster of Kubernetes objects written as JSON, and its
//! conversion as the scheduler converts what its caches hold.

use std::sync::Arc;

use drover_k8s::convert::{convert, Converted, Objects};
use serde_json::Value;

/// The objects of a cluster, as manifests.
#[derive(Default, Clone, Debug)]
pub struct World {
    pub nodes: Vec<Value>,
    pub pods: Vec<Value>,
    pub groups: Vec<Value>,
    pub queues: Vec<Value>,
    pub classes: Vec<Value>,
    pub namespaces: Vec<Value>,
    pub topologies: Vec<Value>,
}

fn arcs<T: serde::de::DeserializeOwned>(values: &[Value]) -> Vec<Arc<T>> {
    values.iter().map(|v| Arc::new(serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}")))).collect()
}

impl World {
    /// The conversion of every object, for the scheduler named `drover`.
    pub fn convert(&self) -> Converted {
        let (nodes, pods, groups, queues) =
            (arcs(&self.nodes), arcs(&self.pods), arcs(&self.groups), arcs(&self.queues));
        let (classes, namespaces, topologies) = (arcs(&self.classes), arcs(&self.namespaces), arcs(&self.topologies));
        let objects = Objects {
            nodes: &nodes,
            pods: &pods,
            pod_groups: &groups,
            queues: &queues,
            priority_classes: &classes,
            namespaces: &namespaces,
            topologies: &topologies,
        };
        convert(&objects, "drover")
    }
}
