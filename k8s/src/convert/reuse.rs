//! The last cycle's conversion and snapshot, kept while the objects they were made from have
//! not changed in anything the conversion reads, so that a cycle with nothing new does not
//! convert tens of thousands of objects again.
//!
//! **Unchanged** means: every kind lists the very same objects (the same `Arc`s, which the
//! reflector stores keep until an object is replaced), in the same order, except that a Node
//! replaced by a version that differs only where the conversion does not read (its heartbeat
//! conditions, say: at 5,000 nodes several arrive every second) also counts as unchanged
//! ([`node_reads_alike`]). The kept objects are held, so no new object can reuse an old one's
//! address. Anything else converts everything again: reuse is an optimisation of the pure
//! [`super::convert`], never a different answer.

use std::sync::Arc;

use drover_scheduler::snapshot::{Snapshot, SnapshotError};
use k8s_openapi::api::core::v1::Node;

use super::{convert, Converted, ObjectLists};

/// A conversion and its snapshot (before the cycle's time is applied), with the objects
/// they were made from.
struct Kept {
    objects: ObjectLists,
    converted: Arc<Converted>,
    snapshot: Result<Snapshot, SnapshotError>,
}

/// The conversion of the last cycle, reused while its objects are unchanged.
#[derive(Default)]
pub struct Reuse {
    kept: Option<Kept>,
    reused: u64,
}

impl Reuse {
    /// The conversion of `objects` and its snapshot at `now` (seconds since the Unix epoch),
    /// as [`Converted::snapshot_at`] gives it: the last cycle's when nothing it read changed.
    pub fn convert(
        &mut self,
        objects: &ObjectLists,
        scheduler_name: &str,
        now: i64,
    ) -> (Arc<Converted>, Result<Snapshot, SnapshotError>) {
        let reusable = self.kept.as_ref().is_some_and(|k| unchanged(&k.objects, objects));
        if reusable {
            self.reused += 1;
        } else {
            let converted = Arc::new(convert(&objects.objects(), scheduler_name));
            let snapshot = converted.snapshot();
            self.kept = Some(Kept { objects: ObjectLists::default(), converted, snapshot });
        }
        let kept = self.kept.as_mut().expect("kept above");
        kept.objects = objects.clone();
        let snapshot = kept.snapshot.clone().map(|s| kept.converted.at(s, now));
        (kept.converted.clone(), snapshot)
    }

    /// Whether `nodes` read as the kept conversion's Nodes did (false when none is kept): a
    /// change of Nodes alone that the conversion would not see.
    pub fn nodes_read_alike(&self, nodes: &[Arc<Node>]) -> bool {
        self.kept.as_ref().is_some_and(|k| nodes_alike(&k.objects.nodes, nodes))
    }

    /// How many cycles reused the conversion of an earlier one.
    pub fn reused(&self) -> u64 {
        self.reused
    }
}

fn unchanged(old: &ObjectLists, new: &ObjectLists) -> bool {
    same(&old.pods, &new.pods)
        && same(&old.pod_groups, &new.pod_groups)
        && same(&old.queues, &new.queues)
        && same(&old.classes, &new.classes)
        && same(&old.namespaces, &new.namespaces)
        && same(&old.topologies, &new.topologies)
        && nodes_alike(&old.nodes, &new.nodes)
}

fn nodes_alike(old: &[Arc<Node>], new: &[Arc<Node>]) -> bool {
    old.len() == new.len() && old.iter().zip(new).all(|(a, b)| Arc::ptr_eq(a, b) || node_reads_alike(a, b))
}

fn same<T>(old: &[Arc<T>], new: &[Arc<T>]) -> bool {
    old.len() == new.len() && old.iter().zip(new).all(|(a, b)| Arc::ptr_eq(a, b))
}

/// Whether two versions of a Node agree in everything the conversion reads of a node (kept
/// next to what reads it: `convert_nodes` and `unique`): name, uid, labels, allocatable,
/// taints and the unschedulable flag.
pub(super) fn node_reads_alike(a: &Node, b: &Node) -> bool {
    let spec = |n: &Node| n.spec.as_ref().map(|s| (s.taints.clone(), s.unschedulable));
    a.metadata.name == b.metadata.name
        && a.metadata.uid == b.metadata.uid
        && a.metadata.labels == b.metadata.labels
        && a.status.as_ref().map(|s| &s.allocatable) == b.status.as_ref().map(|s| &s.allocatable)
        && spec(a) == spec(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn node(labels: serde_json::Value, heartbeat: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "uid": "u1", "labels": labels},
                "status": {"allocatable": {"cpu": "4", "pods": "9", "nvidia.com/gpu": "8"},
                           "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}
            }))
            .expect("a node"),
        )
    }

    /// Another scheduler's pod on `n1`: the conversion takes its request off the node.
    fn pod(gpus: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "a", "namespace": "ns", "uid": "p1"},
                "spec": {"schedulerName": "default-scheduler", "nodeName": "n1", "containers": [
                    {"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}}
                ]}
            }))
            .expect("a pod"),
        )
    }

    fn lists(node: Arc<Node>, pod: Arc<Pod>) -> ObjectLists {
        ObjectLists { nodes: vec![node], pods: vec![pod], ..ObjectLists::default() }
    }

    #[test]
    fn a_heartbeat_is_not_a_change_but_a_label_is() {
        let before = node(json!({"zone": "a"}), "2026-11-29T00:00:00Z");
        assert!(node_reads_alike(&before, &node(json!({"zone": "a"}), "2026-11-29T00:05:00Z")));
        assert!(!node_reads_alike(&before, &node(json!({"zone": "b"}), "2026-11-29T00:00:00Z")));
    }

    #[test]
    fn the_conversion_is_kept_until_an_object_it_reads_changes() {
        let mut reuse = Reuse::default();
        let first = lists(node(json!({}), "2026-11-29T00:00:00Z"), pod("1"));
        let (converted, _) = reuse.convert(&first, "drover", 100);
        let beat = lists(node(json!({}), "2026-11-29T00:05:00Z"), first.pods[0].clone());
        let (kept, snap) = reuse.convert(&beat, "drover", 101);
        assert!(Arc::ptr_eq(&converted, &kept), "only a heartbeat changed");
        assert_eq!(snap.expect("a snapshot").clock.unnoted(), 101, "the kept snapshot is brought to the cycle's time");
        // The same pod, made again: whatever it says, it is converted again.
        let (changed, snap) = reuse.convert(&lists(beat.nodes[0].clone(), pod("2")), "drover", 102);
        assert!(!Arc::ptr_eq(&converted, &changed));
        let snap = snap.expect("a snapshot");
        let node = snap.nodes.iter().next().expect("the node");
        assert_eq!(snap.to_list(&node.allocatable).0.get("nvidia.com/gpu"), Some(&6), "the new request is seen");
        assert_eq!(reuse.reused(), 1);
    }
}
