//! Predicates: whether a pod can ever run on a node (cordon, taints, node selector including
//! the node-pool label, required node affinity) and whether it fits the node's idle
//! resources now (every requested resource, including the pod count).

use drover_api::tolerates_all;

use crate::plugin::Plugin;
use crate::res::Res;
use crate::snapshot::{JobId, NodeId, Snapshot};

/// The predicates plugin.
pub struct Predicates;

impl Plugin for Predicates {
    fn name(&self) -> &'static str {
        "predicates"
    }

    fn node_filter(&self, snap: &Snapshot, job: JobId, task: usize, node: NodeId) -> Result<(), String> {
        let n = &snap.nodes[node];
        let c = &snap.jobs[job].tasks[task].constraints;
        if n.unschedulable {
            return Err("node(s) were unschedulable".into());
        }
        if let Err(key) = tolerates_all(&c.tolerations, &n.taints) {
            return Err(format!("node(s) had untolerated taint {{{key}}}"));
        }
        let selector_ok = c.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v));
        if !selector_ok || !c.affinity.iter().all(|r| r.matches(&n.labels)) {
            return Err("node(s) didn't match Pod's node affinity/selector".into());
        }
        Ok(())
    }
}

/// The first resource a request does not fit in `idle`, if any.
pub fn insufficient(req: &Res, idle: &Res) -> Option<usize> {
    req.first_exceeding(idle)
}
