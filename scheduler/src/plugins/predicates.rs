//! Predicates: whether a pod can ever run on a node (cordon, taints, node selector including
//! the node-pool label, required node affinity) and whether it fits the node's idle
//! resources now (every requested resource, including the pod count). A gang with a pod
//! larger than every schedulable node is not admitted: no eviction, finishing job or wait
//! would ever seat it, and admitting it would hold its queue's reservation for nothing.

use drover_api::tolerates_all;

use crate::ids::TiSlice;
use crate::plugin::{Plugin, Rule, Subject, Verdict, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, NodeId, QueueId, Snapshot};

/// The predicates plugin.
pub struct Predicates;

impl Plugin for Predicates {
    fn name(&self) -> &'static str {
        "predicates"
    }

    fn enqueueable<'s>(&self, ssn: &Session<'s>, job: JobId, _: Option<&TiSlice<QueueId, Res>>) -> Verdict<'s> {
        let snap = ssn.snap;
        for p in ssn.gang_pods(job) {
            let req = ssn.requests(p);
            if let Some(r) = req.first_exceeding(&snap.largest_node) {
                let e = (r, req[r], snap.largest_node[r]);
                return Err(Why::exceeding(snap, Rule::LargerThanAnyNode, Subject::Cluster, e));
            }
        }
        Ok(())
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
