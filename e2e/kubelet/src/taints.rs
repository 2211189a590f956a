//! Lifting the `node.kubernetes.io/not-ready:NoSchedule` taint from the fleet's Ready nodes.
//!
//! A real API server's admission (`TaintNodesByCondition`) puts that taint on every new Node,
//! and the node lifecycle controller in kube-controller-manager lifts it once the node is
//! Ready. Tests often run without kube-controller-manager, so the fake kubelet lifts it from
//! its own nodes the same way: only that taint, with the node's resourceVersion in the patch
//! (a concurrent writer makes it fail with 409), read again and retried on conflict. With
//! kube-controller-manager running both may try; whoever is second finds nothing to do.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt as _;
use serde_json::json;

use crate::retry::{classify, Failure};

/// The taint key admission adds to new nodes until they are Ready.
pub(crate) const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// How many times the patch is tried when other writers keep changing the node.
const ATTEMPTS: u32 = 5;

fn is_not_ready_no_schedule(taint: &Taint) -> bool {
    taint.key == NOT_READY_TAINT && taint.effect == "NoSchedule"
}

fn is_ready(node: &Node) -> bool {
    node.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The taints to keep if `node` is Ready and carries the not-ready `NoSchedule` taint.
fn taints_to_keep(node: &Node) -> Option<Vec<Taint>> {
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    if !is_ready(node) || !taints.iter().any(is_not_ready_no_schedule) {
        return None;
    }
    Some(taints.iter().filter(|t| !is_not_ready_no_schedule(t)).cloned().collect())
}

/// Removes the not-ready `NoSchedule` taint from `node` (as last read) if it is Ready and
/// tainted, guarded by its resourceVersion; a conflict makes it read the node and try again.
pub(crate) async fn lift_not_ready(api: &Api<Node>, mut node: Node) -> Result<(), kube::Error> {
    let name = node.name_any();
    let mut attempt = 1;
    loop {
        let Some(keep) = taints_to_keep(&node) else {
            return Ok(());
        };
        let patch = json!({
            "metadata": { "resourceVersion": node.resource_version() },
            "spec": { "taints": if keep.is_empty() { None } else { Some(keep) } },
        });
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::debug!(node = %name, "lifted the not-ready taint");
                return Ok(());
            }
            Err(error) if classify(&error) == Failure::Conflict && attempt < ATTEMPTS => {
                attempt += 1;
                node = api.get(&name).await?;
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), ..Default::default() }
    }

    fn node(ready: &str, taints: Vec<Taint>) -> Node {
        Node {
            spec: Some(NodeSpec { taints: Some(taints), ..Default::default() }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_not_ready_no_schedule_taint_of_a_ready_node_goes() {
        let dedicated = taint("example.com/dedicated", "NoSchedule");
        let tainted = node(
            "True",
            vec![taint(NOT_READY_TAINT, "NoSchedule"), dedicated.clone(), taint(NOT_READY_TAINT, "NoExecute")],
        );
        assert_eq!(taints_to_keep(&tainted), Some(vec![dedicated.clone(), taint(NOT_READY_TAINT, "NoExecute")]));
        assert_eq!(taints_to_keep(&node("True", vec![taint(NOT_READY_TAINT, "NoSchedule")])), Some(vec![]));
        assert_eq!(taints_to_keep(&node("False", vec![taint(NOT_READY_TAINT, "NoSchedule")])), None);
        assert_eq!(taints_to_keep(&node("True", vec![dedicated])), None);
    }
}
