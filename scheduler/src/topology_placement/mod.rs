//! Placing a gang inside the network hierarchy. The pods of a job that asks for a topology go
//! inside one domain of its required level, into as few domains of its preferred level as
//! they can, and its tasks and slices inside domains of their own levels within the job's.
//! One pass per group, no dry run per domain:
//!
//! 1. pods of the group that already run pin it to their domain of its required level;
//! 2. from the preferred level up to the required one, the first level where a domain can
//!    hold the group, counting how many of each task's pods each node takes (slices rounded
//!    down per slice domain), and there the domain chosen by fit: where the group's pools
//!    bin-pack, the tightest such domain, so that large empty domains stay for large gangs
//!    (Kueue's BestFit, Volcano's hypernode bin-packing); where they spread, the emptiest;
//!    domains are visited least idle first (most idle first when spreading) through the
//!    session's domain index, so only domains with room are counted;
//! 3. the inner groups (tasks, slices) in turn inside it, then its other pods in index order,
//!    descending into the children that hold the rest (the tightest when bin-packing, the
//!    emptiest when spreading; else the fewest children), with the exact per-node fit
//!    checks, so that consecutive ranks share the lowest domain.
//!
//! A job that asks for nothing, in a cluster with a `default` topology where its pools

mod explain;
mod placing;
mod tree;

pub(crate) use explain::excluded_nodes;
pub use placing::Placing;

use crate::config::PlacementStrategy;
use crate::framework::Framework;
use crate::ids::{JobId, NodeId, PodId};
use crate::session::{PodState, Session};
use crate::snapshot::{DomainId, Level, Snapshot};
use tree::place_at;

/// A place in one topology: the whole cluster, a labelled domain, or one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// Every node.
    Root,
    /// A domain of a labelled level.
    Domain(Level, DomainId),
    /// One node (the implicit finest level).
    Node(NodeId),
}

/// Pods that must (or should) share a domain, with the groups nested inside it.
#[derive(Debug, Clone)]
pub struct Group {
    topology: usize,
    required: Option<Level>,
    preferred: Option<Level>,
    /// Every pod of the group, placed or not, in task and index order.
    members: Vec<PodId>,
    inner: Vec<Group>,
}

impl Group {
    /// Whether the group asks for anything (a level, or inner groups that do), rather than
    /// packing by the default topology.
    pub fn asks_for_placement(&self) -> bool {
        self.required.is_some() || self.preferred.is_some() || !self.inner.is_empty()
    }

    /// The topology and level the whole group must fit inside one domain of, if any.
    pub fn required_level(&self) -> Option<(usize, Level)> {
        self.required.map(|level| (self.topology, level))
    }

    /// Whether the members placed so far (`node_of`: bound or nominated) keep the group's
    /// requirement and its inner groups': each group's placed members inside one domain of
    /// its required level. How a kept claim is checked against topology that changed since.
    pub fn holds(&self, snap: &Snapshot, node_of: &dyn Fn(PodId) -> Option<NodeId>) -> bool {
        if !self.inner.iter().all(|g| g.holds(snap, node_of)) {
            return false;
        }
        let Some(level) = self.required else { return true };
        let topo = &snap.topologies[self.topology];
        let mut domains = self.members.iter().filter_map(|&p| node_of(p)).map(|n| topo.domain_at(level, n));
        match domains.next() {
            None => true,
            Some(None) => false,
            Some(first) => domains.all(|d| d == first),
        }
    }
}

/// The groups a job's pods are placed by, when a topology applies to it: its own request and
/// its tasks' and slices', or, for a job that asks for none, the `default` topology when
/// every pool bin-packs its class of work.
pub fn groups(snap: &Snapshot, fw: &Framework, job: JobId) -> Option<Group> {
    let j = &snap.jobs[job];
    let mut inner = Vec::new();
    for task in &j.tasks {
        let slices = task.slices.iter().flat_map(|s| {
            task.pods.chunks(s.size as usize).map(move |chunk| Group {
                topology: s.topology,
                required: Some(s.level),
                preferred: None,
                members: chunk.to_vec(),
                inner: Vec::new(),
            })
        });
        match task.topology {
            Some(r) => inner.push(Group {
                topology: r.topology,
                required: r.required,
                preferred: r.preferred,
                members: task.pods.clone(),
                inner: slices.collect(),
            }),
            None => inner.extend(slices),
        }
    }
    let (topology, required, preferred) = match (j.topology, inner.first()) {
        (Some(r), _) => (r.topology, r.required, r.preferred),
        (None, Some(first)) => (first.topology, None, None),
        (None, None) => {
            let gpu = j.tasks.iter().any(|t| t.gpu);
            let packs = snap.pools.iter().all(|p| fw.placement(p, gpu) == PlacementStrategy::Binpack);
            (snap.default_topology().filter(|_| packs)?, None, None)
        }
    };
    let members = j.tasks.iter().flat_map(|t| t.pods.iter().copied()).collect();
    Some(Group { topology, required, preferred, members, inner })
}

/// The domains of a group's required level, where preempt and reclaim look for victims one
/// domain at a time.
pub struct RequiredDomains {
    /// The topology of the level.
    pub topology: usize,
    /// The level (the topology's node level when it requires one node).
    pub level: Level,
    /// Each domain's index at the level (the node's, at the node level).
    pub domains: Vec<usize>,
}

impl RequiredDomains {
    /// The nodes of one of the domains, ascending.
    pub fn nodes(&self, snap: &Snapshot, domain: usize) -> Vec<NodeId> {
        let topo = &snap.topologies[self.topology];
        match self.level == topo.node_level() {
            true => vec![NodeId::from(domain)],
            false => topo.domains[self.level][domain].nodes.clone(),
        }
    }
}

/// The domains of the group's required level that could hold it (only the one its running
/// pods pin it to, if they do); `None` when it requires no level.
pub fn required_domains(ssn: &Session, g: &Group) -> Option<RequiredDomains> {
    let level = g.required?;
    let snap = ssn.snap;
    let topo = &snap.topologies[g.topology];
    let domains = match pin(ssn, g) {
        Some(Place::Domain(_, d)) => vec![d],
        Some(Place::Node(n)) => vec![usize::from(n)],
        _ if level == topo.node_level() => snap.nodes.keys().map(usize::from).collect(),
        _ => (0..topo.domains[level].len()).collect(),
    };
    Some(RequiredDomains { topology: g.topology, level, domains })
}

/// See [`Placing::shape`].
pub(crate) type ShapeKey =
    (Vec<(usize, crate::res::Res, i64, Option<(i64, Level)>)>, usize, Level, Vec<(usize, Place)>);

/// Why a group found no domain: the group, and the scope it was looked for in.
pub struct Miss {
    pub(super) group: Group,
    pub(super) scope: Vec<(usize, Place)>,
}

/// The domain of the group's required level its running (or pipelined) pods are in, the one
/// holding most of them.
pub(super) fn pin(ssn: &Session, g: &Group) -> Option<Place> {
    let level = g.required?;
    let topo = &ssn.snap.topologies[g.topology];
    let mut seen: Vec<(Place, usize)> = Vec::new();
    for &p in &g.members {
        let node = match ssn.pod_state[p] {
            PodState::Bound(n) | PodState::Allocated(n) | PodState::Pipelined(n) => n,
            _ => continue,
        };
        let Some(place) = place_at(topo, level, node) else { continue };
        match seen.iter_mut().find(|(pl, _)| *pl == place) {
            Some((_, c)) => *c += 1,
            None => seen.push((place, 1)),
        }
    }
    seen.iter().max_by_key(|(_, c)| *c).map(|(p, _)| *p)
}
