//! Topologies in a snapshot: each hierarchy of node labels turned into domains (a domain is
//! the path of label values from the top level down), with the nodes and capacity of each,
//! and the topology requests of jobs and tasks resolved to level indexes. Built once with the
//! snapshot; placement reads it, never changes it.

use std::collections::HashMap;

use drover_api::topology::{domain_path, NODE_LEVEL};

use crate::res::Res;

use super::{Node, NodeId, SnapshotError, TiVec};

/// A hierarchy as handed to the builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyInput {
    /// Name; jobs that name no topology use `default`.
    pub name: String,
    /// Levels, coarse to fine; the node is the implicit finest level after them.
    pub levels: Vec<LevelInput>,
}

/// A level of a hierarchy as handed to the builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelInput {
    /// Level name, e.g. `rack`.
    pub name: String,
    /// The node label whose value names a node's domain at this level.
    pub node_label: String,
}

/// Where a job's (or a task's) pods may go, by names, as handed to the builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyRequestInput {
    /// The topology (`default` unless named).
    pub topology: String,
    /// Hard: every pod inside one domain of this level.
    pub required: Option<String>,
    /// Soft: as few domains of this level as possible.
    pub preferred: Option<String>,
}

/// Slices of a task as handed to the builder: pods of consecutive indexes in groups of
/// `size`, each group inside one domain of level `required` (of the task's, else the job's,
/// else the default topology).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicesInput {
    /// Pods per slice.
    pub size: u32,
    /// The level each slice must fit in.
    pub required: String,
}

/// A level index of a topology: `0..labels.len()` are labelled levels, coarse to fine, and
/// `labels.len()` is the node level.
pub type Level = usize;

/// A domain id within one level of a topology.
pub type DomainId = usize;

/// A domain: one value path of the hierarchy down to its level.
#[derive(Debug, Clone)]
pub struct Domain {
    /// The path of label values, `b1/r7`.
    pub name: String,
    /// The domain one level up, if this is not the top level.
    pub parent: Option<DomainId>,
    /// Domains one level down (empty at the finest labelled level).
    pub children: Vec<DomainId>,
    /// Its nodes, ascending.
    pub nodes: Vec<NodeId>,
    /// Allocatable sum of its schedulable nodes.
    pub capacity: Res,
}

/// A node's place in `Topology::node_domain` at a level where it has no domain.
const NO_DOMAIN: u32 = u32::MAX;

/// A hierarchy of node labels over the snapshot's nodes.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Name.
    pub name: String,
    /// Level names, coarse to fine, ending with the implicit `node`.
    pub levels: Vec<String>,
    /// The node label of each labelled level.
    pub labels: Vec<String>,
    /// Per labelled level, its domains in name order.
    pub domains: Vec<Vec<Domain>>,
    /// Per node, its domain at each labelled level, the levels of a node side by side (one
    /// read of memory serves every level: placement and victim searches ask this of
    /// thousands of nodes); `NO_DOMAIN` where the node lacks the level's label or one above
    /// it, and is no place for work that requires the level.
    node_domain: Vec<u32>,
    /// Per level (the node level included): the most any one domain there has of each
    /// resource, over schedulable nodes; a gang asking more can never fit one.
    pub largest: Vec<Res>,
    /// Nodes without a label of the top level (all nodes when there are no labelled levels):
    /// places only for work that requires no level.
    pub unlabelled: Vec<NodeId>,
}

impl Topology {
    /// The node level's index.
    pub fn node_level(&self) -> Level {
        self.labels.len()
    }

    /// A level's index by name.
    pub fn level(&self, name: &str) -> Option<Level> {
        self.levels.iter().position(|l| l == name)
    }

    /// The node's domain at a labelled level.
    pub fn domain_of(&self, level: Level, node: NodeId) -> Option<DomainId> {
        let d = self.node_domain[usize::from(node) * self.labels.len() + level];
        (d != NO_DOMAIN).then_some(d as DomainId)
    }

    /// The node's domain at any level: a labelled one's, or at the node level the node's own
    /// index (the node is the domain there).
    pub fn domain_at(&self, level: Level, node: NodeId) -> Option<usize> {
        if level == self.node_level() {
            Some(usize::from(node))
        } else {
            self.domain_of(level, node)
        }
    }

    /// The node's domains, coarse to fine, down to the first labelled level it lacks a label
    /// of: the domains whose sums a change on the node moves.
    pub fn domains_of(&self, node: NodeId) -> impl Iterator<Item = (Level, DomainId)> + '_ {
        (0..self.labels.len()).map_while(move |level| Some((level, self.domain_of(level, node)?)))
    }

    /// Builds the domains of `input` over `nodes`, with `n` resources.
    pub fn build(input: &TopologyInput, nodes: &TiVec<NodeId, Node>, n: usize) -> Result<Topology, SnapshotError> {
        let object = || format!("topology {}", input.name);
        let mut levels: Vec<String> = Vec::with_capacity(input.levels.len() + 1);
        for l in &input.levels {
            if l.name == NODE_LEVEL || levels.contains(&l.name) {
                return Err(SnapshotError::Duplicate(format!("{}: level {}", object(), l.name)));
            }
            levels.push(l.name.clone());
        }
        levels.push(NODE_LEVEL.to_string());
        let labels: Vec<String> = input.levels.iter().map(|l| l.node_label.clone()).collect();
        let depth = labels.len();
        let mut ids: Vec<HashMap<Vec<&str>, DomainId>> = vec![HashMap::new(); depth];
        let mut node_domain = vec![TiVec::<NodeId, Option<DomainId>>::with_capacity(nodes.len()); depth];
        let mut paths: Vec<Vec<Vec<&str>>> = vec![Vec::new(); depth];
        for node in nodes.iter() {
            let path = domain_path(&labels, &node.labels);
            for (level, ids) in ids.iter_mut().enumerate() {
                let id = (level < path.len()).then(|| {
                    let key = path[..=level].to_vec();
                    *ids.entry(key.clone()).or_insert_with(|| {
                        paths[level].push(key);
                        paths[level].len() - 1
                    })
                });
                node_domain[level].push(id);
            }
        }
        // Renumber each level's domains in name order, so that ties break the same way
        // whatever order the nodes came in.
        let mut domains: Vec<Vec<Domain>> = Vec::with_capacity(depth);
        for level in 0..depth {
            let mut order: Vec<DomainId> = (0..paths[level].len()).collect();
            order.sort_by(|&a, &b| paths[level][a].cmp(&paths[level][b]));
            let mut renumber = vec![0; order.len()];
            for (new, &old) in order.iter().enumerate() {
                renumber[old] = new;
            }
            for d in node_domain[level].iter_mut().flatten() {
                *d = renumber[*d];
            }
            let mut list: Vec<Domain> = order
                .iter()
                .map(|&old| Domain {
                    name: paths[level][old].join("/"),
                    parent: None,
                    children: Vec::new(),
                    nodes: Vec::new(),
                    capacity: Res::zero(n),
                })
                .collect();
            for (node, d) in node_domain[level].iter_enumerated() {
                let Some(d) = *d else { continue };
                list[d].nodes.push(node);
                if !nodes[node].unschedulable {
                    list[d].capacity.add(&nodes[node].allocatable);
                }
            }
            if level > 0 {
                for (d, domain) in list.iter_mut().enumerate() {
                    let first = domain.nodes[0];
                    let parent = node_domain[level - 1][first].expect("a path has every level above it");
                    domain.parent = Some(parent);
                    domains[level - 1][parent].children.push(d);
                }
            }
            domains.push(list);
        }
        let mut largest: Vec<Res> = domains
            .iter()
            .map(|list| {
                let mut most = Res::zero(n);
                list.iter().for_each(|d| most.max_with(&d.capacity));
                most
            })
            .collect();
        let mut node_most = Res::zero(n);
        nodes.iter().filter(|n| !n.unschedulable).for_each(|n| node_most.max_with(&n.allocatable));
        largest.push(node_most);
        let unlabelled =
            nodes.keys().filter(|&node| node_domain.first().is_none_or(|top| top[node].is_none())).collect();
        let node_domain = nodes
            .keys()
            .flat_map(|node| node_domain.iter().map(move |level| level[node].map_or(NO_DOMAIN, |d| d as u32)))
            .collect();
        Ok(Topology { name: input.name.clone(), levels, labels, domains, node_domain, largest, unlabelled })
    }
}

/// A job's or task's topology request, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyRequest {
    /// Index into the snapshot's topologies.
    pub topology: usize,
    /// Hard bound: every pod inside one domain of this level.
    pub required: Option<Level>,
    /// Goal: as few domains of this level as possible.
    pub preferred: Option<Level>,
}

/// A task's slices, resolved: pods of consecutive indexes in groups of `size`, each inside
/// one domain of `level` of `topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slices {
    /// Index into the snapshot's topologies.
    pub topology: usize,
    /// Pods per slice.
    pub size: u32,
    /// The level each slice must fit in.
    pub level: Level,
}

/// Resolves names of topologies and levels against a snapshot's topologies.
pub(super) struct Resolver<'a> {
    pub(super) topologies: &'a [Topology],
}

impl Resolver<'_> {
    fn topology(&self, name: &str, object: &dyn Fn() -> String, field: &'static str) -> Result<usize, SnapshotError> {
        self.topologies.iter().position(|t| t.name == name).ok_or_else(|| SnapshotError::Missing {
            object: object(),
            field,
            name: name.to_string(),
        })
    }

    fn level(
        &self,
        topology: usize,
        name: &str,
        object: &dyn Fn() -> String,
        field: &'static str,
    ) -> Result<Level, SnapshotError> {
        self.topologies[topology].level(name).ok_or_else(|| SnapshotError::Missing {
            object: object(),
            field,
            name: name.to_string(),
        })
    }

    /// A request by names, resolved; `field` prefixes the fields named in errors.
    pub(super) fn request(
        &self,
        input: &TopologyRequestInput,
        object: &dyn Fn() -> String,
    ) -> Result<TopologyRequest, SnapshotError> {
        let topology = self.topology(&input.topology, object, "topology.name")?;
        let level =
            |name: &Option<String>, field| name.as_deref().map(|n| self.level(topology, n, object, field)).transpose();
        let required = level(&input.required, "topology.required")?;
        let preferred = level(&input.preferred, "topology.preferred")?;
        // A preferred level coarser than the required one says nothing more.
        let preferred = preferred.filter(|&p| required.is_none_or(|r| p > r));
        Ok(TopologyRequest { topology, required, preferred })
    }

    /// Slices by names, in the topology `topology` names (the task's or job's).
    pub(super) fn slices(
        &self,
        input: &SlicesInput,
        topology: &str,
        object: &dyn Fn() -> String,
    ) -> Result<Slices, SnapshotError> {
        let t = self.topology(topology, object, "slices")?;
        let level = self.level(t, &input.required, object, "slices.required")?;
        Ok(Slices { topology: t, size: input.size.max(1), level })
    }
}
