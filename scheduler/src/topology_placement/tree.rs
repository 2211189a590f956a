//! Walking one topology's tree: places, their nodes and children, and scopes.

use super::Place;
use crate::ids::NodeId;
use crate::node_index::Class;
use crate::snapshot::{Level, Snapshot, Topology};

/// The resource a class is keyed by.
pub(super) fn key_resource(snap: &Snapshot, class: Class) -> usize {
    snap.key_resource(class == Class::Gpu)
}

/// The innermost place of topology `t` in the scope (the root when none).
pub(super) fn innermost(scope: &[(usize, Place)], t: usize) -> Place {
    scope.iter().rev().find(|(st, _)| *st == t).map_or(Place::Root, |(_, p)| *p)
}

/// Whether a node lies inside every place of the scope.
pub(super) fn in_scope(snap: &Snapshot, scope: &[(usize, Place)], n: NodeId) -> bool {
    scope.iter().all(|&(t, place)| match place {
        Place::Root => true,
        Place::Domain(level, d) => snap.topologies[t].domain_of(level, n) == Some(d),
        Place::Node(m) => m == n,
    })
}

/// How deep a place is: -1 for the root, its level otherwise.
pub(super) fn level_of(topo: &Topology, place: Place) -> isize {
    match place {
        Place::Root => -1,
        Place::Domain(level, _) => level as isize,
        Place::Node(_) => topo.node_level() as isize,
    }
}

/// The node's place at `level` (`None`: it lacks that level's label).
pub(super) fn place_at(topo: &Topology, level: Level, node: NodeId) -> Option<Place> {
    if level == topo.node_level() {
        return Some(Place::Node(node));
    }
    topo.domain_of(level, node).map(|d| Place::Domain(level, d))
}

pub(super) fn first_node(topo: &Topology, place: Place) -> Option<NodeId> {
    match place {
        Place::Root => None,
        Place::Domain(level, d) => topo.domains[level][d].nodes.first().copied(),
        Place::Node(n) => Some(n),
    }
}

/// The nodes of a place.
pub(super) fn nodes_of(snap: &Snapshot, topo: &Topology, place: Place) -> Vec<NodeId> {
    match place {
        Place::Root => snap.nodes.keys().collect(),
        Place::Domain(level, d) => topo.domains[level][d].nodes.clone(),
        Place::Node(n) => vec![n],
    }
}

/// The places one level below a place: the top domains and the unlabelled nodes under the
/// root, child domains or, at the finest labelled level, nodes.
pub(super) fn children(topo: &Topology, place: Place) -> Vec<Place> {
    match place {
        Place::Root => (0..topo.domains.first().map_or(0, Vec::len))
            .map(|d| Place::Domain(0, d))
            .chain(topo.unlabelled.iter().map(|&n| Place::Node(n)))
            .collect(),
        Place::Domain(level, d) if level + 1 < topo.labels.len() => {
            topo.domains[level][d].children.iter().map(|&c| Place::Domain(level + 1, c)).collect()
        }
        Place::Domain(level, d) => topo.domains[level][d].nodes.iter().map(|&n| Place::Node(n)).collect(),
        Place::Node(_) => Vec::new(),
    }
}
