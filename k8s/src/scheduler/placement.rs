//! Where a group's pods sit in its topology, written for the people and launchers who read it:
//! each bound pod's domain path (its [`DOMAIN_ANNOTATION`]) and the finest domain holding all
//! of a group's placed pods (its PodGroup's `status.topology`). Both read a node's place with
//! `drover_api::topology::domain_path`, as the core does.

use drover_api::crd::topology::TopologyPlacement;
use drover_api::topology::domain_path;
use drover_scheduler::snapshot::{JobId, Node, NodeId, PodId, Snapshot, Topology};

pub use drover_api::topology::DOMAIN_ANNOTATION;

/// The topology a job's pods are placed in: the job's, else its first task's that names one.
fn job_topology(snap: &Snapshot, job: JobId) -> Option<&Topology> {
    let j = &snap.jobs[job];
    let task = || j.tasks.iter().find_map(|t| t.topology.map(|r| r.topology).or(t.slices.map(|s| s.topology)));
    let t = j.topology.map(|r| r.topology).or_else(task)?;
    snap.topologies.get(t)
}

/// A node's path: its label values from the top level down, then its name when it has every
/// level's label (a node lacking one has no place below it).
fn node_path<'a>(topology: &Topology, node: &'a Node) -> Vec<&'a str> {
    let mut path = domain_path(&topology.labels, &node.labels);
    if path.len() == topology.labels.len() {
        path.push(&node.name);
    }
    path
}

/// The domain annotation of a pod of `pod`'s job bound to `node`, when the job uses a topology.
pub(super) fn pod_domain(snap: &Snapshot, pod: PodId, node: NodeId) -> Option<String> {
    let topology = job_topology(snap, snap.pods[pod].job)?;
    Some(node_path(topology, &snap.nodes[node]).join("/"))
}

/// The finest domain holding every node in `nodes` (a job's bound and nominated pods), when
/// the job uses a topology and has pods placed.
pub(super) fn placement(
    snap: &Snapshot,
    job: JobId,
    nodes: impl IntoIterator<Item = NodeId>,
) -> Option<TopologyPlacement> {
    let topology = job_topology(snap, job)?;
    let mut common: Option<Vec<&str>> = None;
    for n in nodes {
        let path = node_path(topology, &snap.nodes[n]);
        common = Some(match common {
            None => path,
            Some(c) => c.iter().zip(&path).take_while(|(a, b)| a == b).map(|(a, _)| *a).collect(),
        });
    }
    let common = common?;
    let level = common.len().checked_sub(1).map(|l| topology.levels[l].clone());
    let domain = (!common.is_empty()).then(|| common.join("/"));
    Some(TopologyPlacement { name: topology.name.clone(), level, domain })
}
