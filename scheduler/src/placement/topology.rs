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
//! bin-pack, fills the fullest domains first, top down, so that empty racks stay empty.

use foldhash::{HashMap, HashSet};
use std::rc::Rc;

use crate::config::PlacementStrategy;
use crate::framework::Framework;
use crate::ids::{JobId, NodeId, PodId};
use crate::node_index::Class;
use crate::session::{PodState, Session, Statement};
use crate::snapshot::{DomainId, Level, Snapshot, Topology};

use super::{Avail, Feasibility, Placer};

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
pub(super) type ShapeKey =
    (Vec<(usize, crate::res::Res, i64, Option<(i64, Level)>)>, usize, Level, Vec<(usize, Place)>);

/// What one task of the request needs: how many pods, of what size, where they may go.
struct Need {
    task: usize,
    pods: i64,
    feasibility: Rc<Feasibility>,
    /// Slices of the task in the group's topology: (size, level).
    slices: Option<(i64, Level)>,
}

/// Why a group found no domain: the group, and the scope it was looked for in.
pub struct Miss {
    group: Group,
    scope: Vec<(usize, Place)>,
}

/// Nodes being freed inside one place, so that no place's nodes are summed one by one.
#[derive(Default)]
struct Freeing {
    /// What they add to the place's idle room, in GPUs and CPU.
    room: [i64; 2],
    /// Which they are, ascending (kept for labelled domains only).
    nodes: Vec<NodeId>,
}

/// The nodes being freed inside a place, if any. Most placements free nothing: the map is
/// then not looked up (hashing the place costs more than the rest of a child's room).
fn freeing_at(freeing: &HashMap<(usize, Place), Freeing>, t: usize, place: Place) -> Option<&Freeing> {
    if freeing.is_empty() {
        None
    } else {
        freeing.get(&(t, place))
    }
}

/// One gang's placement inside the hierarchy.
pub struct Placing<'a, 'c, 's> {
    ssn: &'a mut Session<'s>,
    fw: &'a Framework,
    placer: &'a mut Placer,
    avail: Avail<'c>,
    /// The pods asked for, ascending.
    asked: Vec<PodId>,
    /// Per topology and place, the nodes being freed there that the placement may use.
    freeing: HashMap<(usize, Place), Freeing>,
    /// How the pods' pools place their work: which of the domains that hold it comes first.
    strategy: PlacementStrategy,
}

impl<'a, 'c, 's> Placing<'a, 'c, 's> {
    /// A placement of `pods` (of one job) within `avail`.
    pub fn new(
        ssn: &'a mut Session<'s>,
        fw: &'a Framework,
        placer: &'a mut Placer,
        pods: &[PodId],
        avail: Avail<'c>,
    ) -> Self {
        let mut asked = pods.to_vec();
        asked.sort_unstable();
        let freeing = freeing(ssn, avail);
        let strategy = placer.strategy(ssn, fw, &asked);
        Placing { ssn, fw, placer, avail, asked, freeing, strategy }
    }

    /// Places every asked pod inside `group`'s domains, or none; on failure, why.
    pub fn place(&mut self, group: &Group) -> Result<Statement, Miss> {
        let mut st = Statement::new();
        let mut scope = Vec::new();
        match self.place_group(group, &mut scope, &mut st) {
            Ok(()) if self.asked.iter().all(|&p| self.ssn.pod_state[p] != PodState::Pending) => Ok(st),
            Ok(()) => {
                self.ssn.discard(st);
                Err(Miss { group: group.clone(), scope: Vec::new() })
            }
            Err(miss) => {
                self.ssn.discard(st);
                Err(miss)
            }
        }
    }

    fn waiting(&self, pod: PodId) -> bool {
        self.asked.binary_search(&pod).is_ok() && self.ssn.pod_state[pod] == PodState::Pending
    }

    /// The pods of `pods` still waiting to be placed, in order (sized once: placement asks
    /// this at every level it descends).
    fn still_waiting(&self, pods: &[PodId]) -> Vec<PodId> {
        let mut waiting = Vec::with_capacity(pods.len());
        waiting.extend(pods.iter().copied().filter(|&p| self.waiting(p)));
        waiting
    }

    fn place_group(&mut self, g: &Group, scope: &mut Vec<(usize, Place)>, st: &mut Statement) -> Result<(), Miss> {
        let todo = self.still_waiting(&g.members);
        if todo.is_empty() {
            return Ok(());
        }
        let pinned = pin(self.ssn, g);
        if let Some(pin) = pinned {
            scope.push((g.topology, pin));
        }
        let result = self.place_pinned(g, &todo, scope, st);
        if pinned.is_some() {
            scope.pop();
        }
        result
    }

    fn place_pinned(
        &mut self,
        g: &Group,
        todo: &[PodId],
        scope: &mut Vec<(usize, Place)>,
        st: &mut Statement,
    ) -> Result<(), Miss> {
        let needs = self.needs(g, todo);
        let miss = |scope: &Vec<(usize, Place)>| Miss { group: g.clone(), scope: scope.clone() };
        let candidates = self.choose(g, &needs, scope).ok_or_else(|| miss(scope))?;
        for place in candidates {
            scope.push((g.topology, place));
            let mut sub = Statement::new();
            let mut ok = true;
            for inner in &g.inner {
                if self.place_group(inner, scope, &mut sub).is_err() {
                    ok = false;
                    break;
                }
            }
            if ok {
                let rest = self.still_waiting(todo);
                let compact = g.asks_for_placement();
                self.fill(g.topology, place, &rest, compact, &mut sub);
                ok = rest.iter().all(|&p| self.ssn.pod_state[p] != PodState::Pending);
            }
            scope.pop();
            if ok {
                self.ssn.absorb(st, sub);
                return Ok(());
            }
            self.ssn.discard(sub);
        }
        Err(miss(scope))
    }

    fn needs(&mut self, g: &Group, todo: &[PodId]) -> Vec<Need> {
        let snap = self.ssn.snap;
        let mut needs: Vec<Need> = Vec::new();
        for &p in todo {
            let task = snap.pods[p].task;
            match needs.iter_mut().find(|n| n.task == task) {
                Some(n) => n.pods += 1,
                None => {
                    let job = &snap.jobs[snap.pods[p].job];
                    let slices = job.tasks[task]
                        .slices
                        .filter(|s| s.topology == g.topology)
                        .map(|s| (i64::from(s.size), s.level));
                    let feasibility = self.placer.feasibility(self.ssn, self.fw, p);
                    needs.push(Need { task, pods: 1, feasibility, slices });
                }
            }
        }
        needs
    }

    /// Candidate places for the group, best first; `None` when no domain of its required level
    /// holds it.
    fn choose(&mut self, g: &Group, needs: &[Need], scope: &[(usize, Place)]) -> Option<Vec<Place>> {
        let snap = self.ssn.snap;
        let topo = &snap.topologies[g.topology];
        let within = innermost(scope, g.topology);
        let Some(start) = g.preferred.or(g.required) else { return Some(vec![within]) };
        let stop = g.required.unwrap_or(0);
        for level in (stop..=start).rev() {
            if level_of(topo, within) >= level as isize {
                // The scope already lies inside one domain of this level.
                return self.holds(g.topology, within, needs, scope).then(|| vec![within]);
            }
            let holders = self.holders(g.topology, level, needs, scope);
            if !holders.is_empty() {
                return Some(holders);
            }
        }
        g.required.is_none().then(|| vec![within])
    }

    /// Up to three domains of `level` within the scope that hold every need, by fit: tightest
    /// first, emptiest first when spreading.
    fn holders(&mut self, t: usize, level: Level, needs: &[Need], scope: &[(usize, Place)]) -> Vec<Place> {
        const KEEP: usize = 3;
        let shape = self.shape(t, level, needs, scope);
        let version = self.ssn.version;
        if shape.as_ref().and_then(|s| self.placer.topology_misses.get(s)).is_some_and(|(v, _)| *v == version) {
            return Vec::new();
        }
        let mut found: Vec<(i64, Place)> = Vec::new();
        let key = self.key_need(needs, self.class(needs));
        for place in self.candidates(t, level, needs, key, scope) {
            if !found.is_empty() && !self.freeing.is_empty() && !self.freeing.contains_key(&(t, place)) {
                // A domain being freed holds it: the idle ones after it are not needed.
                break;
            }
            let counts = self.counts(t, place, needs, scope);
            if needs.iter().zip(&counts).all(|(n, &c)| c >= n.pods) {
                found.push((counts.iter().sum(), place));
                if found.len() == KEEP {
                    // Visited freeing domains first, then by fit: the rest fit worse.
                    break;
                }
            }
        }
        if let Some(shape) = shape.filter(|_| found.is_empty()) {
            self.placer.topology_misses.insert(shape, (version, None));
        }
        let spread = self.strategy == PlacementStrategy::Spread;
        found.sort_by_key(|&(c, _)| if spread { -c } else { c });
        found.into_iter().take(KEEP).map(|(_, p)| p).collect()
    }

    /// What makes two groups fail alike on an unchanged session: their needs (constraints,
    /// requests, counts, slices) and where they are sought; `None` (nothing to reuse) unless
    /// the placement uses plain idle capacity.
    fn shape(&self, t: usize, level: Level, needs: &[Need], scope: &[(usize, Place)]) -> Option<ShapeKey> {
        if !matches!(self.avail, Avail::Idle(None)) {
            return None;
        }
        let snap = self.ssn.snap;
        let job = &snap.jobs[snap.pods[self.asked[0]].job];
        let needs = needs
            .iter()
            .map(|n| (Rc::as_ptr(&n.feasibility) as usize, job.tasks[n.task].requests.clone(), n.pods, n.slices))
            .collect();
        Some((needs, t, level, scope.to_vec()))
    }

    /// Places of `level` within the scope that might have room, least idle first where the
    /// indexes tell (most idle first when spreading).
    fn candidates(&mut self, t: usize, level: Level, needs: &[Need], key: i64, scope: &[(usize, Place)]) -> Vec<Place> {
        let snap = self.ssn.snap;
        let topo = &snap.topologies[t];
        let class = self.class(needs);
        let in_scope = |place: Place| first_node(topo, place).is_some_and(|n| in_scope(snap, scope, n));
        let idle_only = matches!(self.avail, Avail::Idle(_));
        if level == topo.node_level() {
            let nodes: Vec<NodeId> = match innermost(scope, t) {
                Place::Root if idle_only => {
                    let mut pools: Vec<usize> =
                        needs.iter().flat_map(|n| n.feasibility.pools.iter().copied()).collect();
                    pools.sort_unstable();
                    pools.dedup();
                    pools.iter().flat_map(|&pool| self.ssn.index.candidates(pool, class, key, self.strategy)).collect()
                }
                place => nodes_of(snap, topo, place),
            };
            return nodes.into_iter().filter(|&n| in_scope(Place::Node(n))).map(Place::Node).collect();
        }
        let releasing = match self.avail {
            Avail::Idle(_) => &[][..],
            Avail::Future(ns) | Avail::Releasing(ns) => ns,
        };
        let mut out: Vec<Place> = Vec::new();
        let mut seen: HashSet<Place> = HashSet::default();
        // Domains with capacity being freed first: where evictions make room.
        for &n in releasing {
            if let Some(place) = place_at(topo, level, n).filter(|&p| in_scope(p) && seen.insert(p)) {
                out.push(place);
            }
        }
        let idle = self.ssn.domains.at_least(t, level, class, key).map(|d| Place::Domain(level, d));
        let idle: Box<dyn Iterator<Item = Place>> =
            if self.strategy == PlacementStrategy::Spread { Box::new(idle.rev()) } else { Box::new(idle) };
        out.extend(idle.filter(|&p| in_scope(p) && !seen.contains(&p)));
        out
    }

    /// How many pods of each need the place takes, slices rounded down per slice domain.
    fn counts(&mut self, t: usize, place: Place, needs: &[Need], scope: &[(usize, Place)]) -> Vec<i64> {
        needs.iter().map(|need| self.count(t, place, need, scope)).collect()
    }

    /// How many pods of one need the place takes: from the domain's idle-slot sums and the
    /// nodes being freed in it where it can, else node by node.
    fn count(&mut self, t: usize, place: Place, need: &Need, scope: &[(usize, Place)]) -> i64 {
        let snap = self.ssn.snap;
        let topo = &snap.topologies[t];
        let req = &snap.jobs[snap.pods[self.asked[0]].job].tasks[need.task].requests;
        let sliced = need.slices.filter(|&(_, level)| level as isize > level_of(topo, place));
        // Places are sought inside the scope, so a scope of this topology only holds the
        // place's ancestors and excludes none of its nodes.
        let summable = sliced.is_none() && scope.iter().all(|&(st, _)| st == t);
        let freed = freeing_at(&self.freeing, t, place).map_or(&[][..], |f| &f.nodes[..]);
        let ok = |n: &&NodeId| need.feasibility.ok(**n);
        match (place, self.avail) {
            (Place::Domain(..), Avail::Releasing(_)) if summable => {
                return freed.iter().filter(ok).map(|&n| self.ssn.future_slots(n, req)).sum();
            }
            (Place::Domain(level, d), Avail::Idle(None) | Avail::Future(_)) if summable => {
                let walk = topo.domains[level][d].nodes.len();
                if let Some(sums) = self.placer.slot_sums(self.ssn, t, &need.feasibility, req, walk) {
                    let gained: i64 =
                        freed.iter().filter(ok).map(|&n| self.ssn.future_slots(n, req) - sums.node(n)).sum();
                    return sums.domain(level, d) + gained;
                }
            }
            _ => {}
        }
        let nodes = nodes_of(snap, topo, place);
        let per_node = nodes
            .iter()
            .filter(|&&n| need.feasibility.ok(n) && in_scope(snap, scope, n))
            .map(|&n| (n, self.slots(n, req)));
        match sliced {
            Some((size, level)) => {
                let mut by_slice: Vec<(Place, i64)> = Vec::new();
                for (n, k) in per_node {
                    let Some(slice) = place_at(topo, level, n) else { continue };
                    match by_slice.iter_mut().find(|(p, _)| *p == slice) {
                        Some((_, c)) => *c += k,
                        None => by_slice.push((slice, k)),
                    }
                }
                by_slice.iter().map(|(_, c)| c / size * size).sum()
            }
            None => per_node.map(|(_, k)| k).sum(),
        }
    }

    fn holds(&mut self, t: usize, place: Place, needs: &[Need], scope: &[(usize, Place)]) -> bool {
        needs.iter().zip(self.counts(t, place, needs, scope)).all(|(n, c)| c >= n.pods)
    }

    /// How many pods asking `req` a node takes within the placement's capacity.
    fn slots(&self, n: NodeId, req: &crate::res::Res) -> i64 {
        let freed = |ns: &[NodeId]| ns.binary_search(&n).is_ok();
        match self.avail {
            Avail::Idle(hold) => self.ssn.idle_slots(n, req, hold.map(|h| &h[n])),
            Avail::Future(ns) | Avail::Releasing(ns) if freed(ns) => self.ssn.future_slots(n, req),
            Avail::Future(_) => self.ssn.idle_slots(n, req, None),
            Avail::Releasing(_) => 0,
        }
    }

    fn class(&self, needs: &[Need]) -> Class {
        let snap = self.ssn.snap;
        let job = &snap.jobs[snap.pods[self.asked[0]].job];
        if snap.gpu.is_some() && needs.iter().any(|n| job.tasks[n.task].gpu) {
            Class::Gpu
        } else {
            Class::Cpu
        }
    }

    /// What the needs ask in total of the class's key resource.
    fn key_need(&self, needs: &[Need], class: Class) -> i64 {
        let snap = self.ssn.snap;
        let job = &snap.jobs[snap.pods[self.asked[0]].job];
        let r = key_resource(snap, class);
        needs.iter().map(|n| n.pods * job.tasks[n.task].requests[r]).sum()
    }

    /// A place's room in the class's key resource, for ordering children.
    fn room(&self, t: usize, place: Place, class: Class) -> i64 {
        let idle = match (self.avail, place) {
            (Avail::Releasing(_), _) | (_, Place::Root) => 0,
            (_, Place::Domain(level, d)) => self.ssn.domains.idle(t, level, d, class),
            (_, Place::Node(n)) => self.ssn.index.keys(n).map_or(0, |k| k[class as usize]),
        };
        idle + freeing_at(&self.freeing, t, place).map_or(0, |f| f.room[class as usize])
    }

    /// Places `pods` inside `place`, descending: children that hold the rest first (tightest,
    /// or emptiest when spreading), then the roomiest (`compact`: the fewest children) or the
    /// fullest (packing).
    fn fill(&mut self, t: usize, place: Place, pods: &[PodId], compact: bool, st: &mut Statement) {
        let snap = self.ssn.snap;
        let mut rest = self.still_waiting(pods);
        if rest.is_empty() {
            return;
        }
        if let Place::Node(n) = place {
            self.fill_node(n, &rest, st);
            return;
        }
        let topo = &snap.topologies[t];
        let job = &snap.jobs[snap.pods[rest[0]].job];
        let class = if snap.gpu.is_some() && rest.iter().any(|&p| job.tasks[snap.pods[p].task].gpu) {
            Class::Gpu
        } else {
            Class::Cpu
        };
        let r = key_resource(snap, class);
        let smallest = rest.iter().map(|&p| job.tasks[snap.pods[p].task].requests[r]).min().unwrap_or(0);
        let places = children(topo, place);
        let mut children: Vec<(i64, Place)> = Vec::with_capacity(places.len());
        children.extend(places.into_iter().map(|c| (self.room(t, c, class), c)).filter(|&(room, _)| room >= smallest));
        let wanted: i64 = rest.iter().map(|&p| job.tasks[snap.pods[p].task].requests[r]).sum();
        let spread = self.strategy == PlacementStrategy::Spread;
        children.sort_by_key(|&(room, _)| {
            let holds = room >= wanted;
            let roomiest = if holds { spread } else { compact };
            (!holds, if roomiest { -room } else { room })
        });
        for (_, child) in children {
            self.fill(t, child, &rest, compact, st);
            rest.retain(|&p| self.waiting(p));
            if rest.is_empty() {
                return;
            }
        }
    }

    /// Places on node `n` every pod of `pods` that fits there, in order.
    fn fill_node(&mut self, n: NodeId, pods: &[PodId], st: &mut Statement) {
        let snap = self.ssn.snap;
        let mut failed_tasks: Vec<usize> = Vec::new();
        for &p in pods {
            let task = snap.pods[p].task;
            if failed_tasks.contains(&task) {
                continue;
            }
            let feasible = self.placer.feasibility(self.ssn, self.fw, p).ok(n);
            if !feasible || self.slots(n, self.ssn.requests(p)) < 1 {
                failed_tasks.push(task);
                continue;
            }
            match self.avail {
                Avail::Idle(_) => self.ssn.allocate(st, p, n),
                Avail::Future(_) | Avail::Releasing(_) => self.ssn.pipeline(st, p, n),
            }
        }
    }
}

impl Placing<'_, '_, '_> {
    /// Why `miss`'s group fits no domain, in one line whatever the number of domains: the
    /// requirement, the best domain and how much of the group it holds, how many domains were
    /// checked, the nodes excluded and why, and whether the room is there but fragmented.
    pub fn explain(&mut self, miss: &Miss) -> String {
        let (g, scope) = (&miss.group, &miss.scope);
        let snap = self.ssn.snap;
        let topo = &snap.topologies[g.topology];
        let todo: Vec<PodId> = g.members.iter().copied().filter(|&p| self.waiting(p)).collect();
        if todo.is_empty() {
            return "its pods do not fit together".to_string();
        }
        let needs = self.needs(g, &todo);
        let level = g.required.unwrap_or(topo.node_level());
        let shape = self.shape(g.topology, level, &needs, scope);
        if let Some((version, Some(text))) = shape.as_ref().and_then(|s| self.placer.topology_misses.get(s)) {
            if *version == self.ssn.version {
                return text.clone();
            }
        }
        let text = self.describe(g, &needs, level, scope);
        if let Some(shape) = shape {
            self.placer.topology_misses.insert(shape, (self.ssn.version, Some(text.clone())));
        }
        text
    }

    fn describe(&mut self, g: &Group, needs: &[Need], level: Level, scope: &[(usize, Place)]) -> String {
        let snap = self.ssn.snap;
        let topo = &snap.topologies[g.topology];
        let job = &snap.jobs[snap.pods[self.asked[0]].job];
        let class = self.class(needs);
        let r = key_resource(snap, class);
        let name = &topo.levels[level];
        let total: i64 = needs.iter().map(|n| n.pods).sum();
        let size = |n: &Need| snap.amount(r, job.tasks[n.task].requests[r]);
        let what = match needs {
            [one] => format!("{} pod(s) x {} {}", one.pods, size(one), snap.resources[r]),
            many => {
                let parts: Vec<String> = many.iter().map(|n| format!("{} x {}", n.pods, size(n))).collect();
                format!("{total} pods ({}) of {}", parts.join(", "), snap.resources[r])
            }
        };
        let smallest = needs.iter().map(|n| job.tasks[n.task].requests[r]).min().unwrap_or(0);
        let within = innermost(scope, g.topology);
        let checked = count_places(snap, topo, level, within, scope);
        let mut best: Option<(i64, i64, Place)> = None;
        let mut together = 0;
        for place in self.candidates(g.topology, level, needs, smallest.max(1), scope) {
            let counts = self.counts(g.topology, place, needs, scope);
            let fill: i64 = needs.iter().zip(&counts).map(|(n, &c)| c.min(n.pods)).sum();
            together += counts.iter().sum::<i64>();
            let room = self.room(g.topology, place, class);
            if best.is_none_or(|(f, rm, _)| (fill, room) > (f, rm)) {
                best = Some((fill, room, place));
            }
        }
        let pinned = level_of(topo, within) == level as isize && g.required == Some(level);
        let mut text = format!("needs {what} within one {name}");
        match best {
            Some((fill, _, place)) if fill > 0 => {
                let primary = needs.iter().max_by_key(|n| job.tasks[n.task].requests[r]).expect("needs are not empty");
                let req = &job.tasks[primary.task].requests;
                let nodes = nodes_of(snap, topo, place);
                let with_room = nodes.iter().filter(|&&n| primary.feasibility.ok(n) && self.slots(n, req) >= 1).count();
                let free = snap.amount(r, self.room(g.topology, place, class));
                let label = place_name(snap, topo, place);
                let there = if pinned { " (where its running pods are)" } else { "" };
                if fill >= total {
                    text += &format!(": {name} {label}{there} has room for all {total} by count, but its pods do not fit together on its nodes");
                } else {
                    text += &format!(
                        ": best {name} {label}{there} holds {fill} of {total} ({free} {} free, but only {with_room} node(s) have {} free)",
                        snap.resources[r],
                        size(primary)
                    );
                }
            }
            _ => text += &format!(": no {name} has room for one of its pods"),
        }
        text += &format!("; {checked} {name}(s) checked");
        if !pinned && checked > 1 && together >= total && best.is_some_and(|(f, _, _)| f < total) {
            text += &format!("; the room is there in total but fragmented across {name}s");
        }
        let excluded = self.placer.excluded(snap, &needs[0].feasibility, g.topology, level, within);
        if !excluded.is_empty() {
            text += &format!("; excluded: {excluded}");
        }
        text
    }
}

/// How many places of `level` lie within the scope.
fn count_places(snap: &Snapshot, topo: &Topology, level: Level, within: Place, scope: &[(usize, Place)]) -> usize {
    if level == topo.node_level() {
        return nodes_of(snap, topo, within).into_iter().filter(|&n| in_scope(snap, scope, n)).count();
    }
    (0..topo.domains[level].len())
        .filter(|&d| first_node(topo, Place::Domain(level, d)).is_some_and(|n| in_scope(snap, scope, n)))
        .count()
}

/// A place's name for people: its label path, or the node's name.
fn place_name(snap: &Snapshot, topo: &Topology, place: Place) -> String {
    match place {
        Place::Root => "the cluster".to_string(),
        Place::Domain(level, d) => topo.domains[level][d].name.clone(),
        Place::Node(n) => snap.nodes[n].name.clone(),
    }
}

/// Nodes of a place excluded for a task, by reason, and those lacking the label of `level`:
/// `6 node(s) had untolerated taint {dedicated}, 2 node(s) without a rack label`.
pub(super) fn excluded_nodes(
    snap: &Snapshot,
    feasibility: &Feasibility,
    t: usize,
    level: Level,
    within: Place,
) -> String {
    let topo = &snap.topologies[t];
    let mut counts: Vec<(usize, String)> = Vec::new();
    let mut unlabelled = 0;
    for n in nodes_of(snap, topo, within) {
        if let Some(i) = feasibility.excluded[n] {
            match counts.iter_mut().find(|(_, r)| *r == feasibility.reasons[i]) {
                Some((c, _)) => *c += 1,
                None => counts.push((1, feasibility.reasons[i].clone())),
            }
        } else if level < topo.node_level() && topo.domain_of(level, n).is_none() {
            unlabelled += 1;
        }
    }
    counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut parts: Vec<String> = counts.into_iter().map(|(c, r)| format!("{c} {r}")).collect();
    if unlabelled > 0 {
        parts.push(format!("{unlabelled} node(s) without a {} label", topo.levels[level]));
    }
    parts.join(", ")
}

/// The domain of the group's required level its running (or pipelined) pods are in, the one
/// holding most of them.
fn pin(ssn: &Session, g: &Group) -> Option<Place> {
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

/// Per topology and place (every level, the nodes included), the nodes being freed there
/// under `avail`, and the room they add to its idle room in GPUs and CPU: their capacity once
/// freed, less what is idle on them now where idle capacity also counts.
fn freeing(ssn: &Session, avail: Avail) -> HashMap<(usize, Place), Freeing> {
    let (nodes, idle_too) = match avail {
        Avail::Idle(_) => return HashMap::default(),
        Avail::Future(ns) => (ns, true),
        Avail::Releasing(ns) => (ns, false),
    };
    let snap = ssn.snap;
    let mut out: HashMap<(usize, Place), Freeing> = HashMap::default();
    for &n in nodes {
        let extra = [Class::Gpu, Class::Cpu].map(|class| {
            let r = key_resource(snap, class);
            let idle = if idle_too { ssn.idle_of(n, r) } else { 0 };
            (ssn.future_of(n, r) - idle).max(0)
        });
        for (t, topo) in snap.topologies.iter().enumerate() {
            let places = (0..topo.labels.len()).filter_map(|l| place_at(topo, l, n)).chain([Place::Node(n)]);
            for place in places {
                let e = out.entry((t, place)).or_default();
                e.room[0] += extra[0];
                e.room[1] += extra[1];
                if matches!(place, Place::Domain(..)) {
                    e.nodes.push(n);
                }
            }
        }
    }
    out
}

/// The resource a class is keyed by.
fn key_resource(snap: &Snapshot, class: Class) -> usize {
    super::key_resource(snap, class == Class::Gpu)
}

/// The innermost place of topology `t` in the scope (the root when none).
fn innermost(scope: &[(usize, Place)], t: usize) -> Place {
    scope.iter().rev().find(|(st, _)| *st == t).map_or(Place::Root, |(_, p)| *p)
}

/// Whether a node lies inside every place of the scope.
fn in_scope(snap: &Snapshot, scope: &[(usize, Place)], n: NodeId) -> bool {
    scope.iter().all(|&(t, place)| match place {
        Place::Root => true,
        Place::Domain(level, d) => snap.topologies[t].domain_of(level, n) == Some(d),
        Place::Node(m) => m == n,
    })
}

/// How deep a place is: -1 for the root, its level otherwise.
fn level_of(topo: &Topology, place: Place) -> isize {
    match place {
        Place::Root => -1,
        Place::Domain(level, _) => level as isize,
        Place::Node(_) => topo.node_level() as isize,
    }
}

/// The node's place at `level` (`None`: it lacks that level's label).
fn place_at(topo: &Topology, level: Level, node: NodeId) -> Option<Place> {
    if level == topo.node_level() {
        return Some(Place::Node(node));
    }
    topo.domain_of(level, node).map(|d| Place::Domain(level, d))
}

fn first_node(topo: &Topology, place: Place) -> Option<NodeId> {
    match place {
        Place::Root => None,
        Place::Domain(level, d) => topo.domains[level][d].nodes.first().copied(),
        Place::Node(n) => Some(n),
    }
}

/// The nodes of a place.
fn nodes_of(snap: &Snapshot, topo: &Topology, place: Place) -> Vec<NodeId> {
    match place {
        Place::Root => snap.nodes.keys().collect(),
        Place::Domain(level, d) => topo.domains[level][d].nodes.clone(),
        Place::Node(n) => vec![n],
    }
}

/// The places one level below a place: the top domains and the unlabelled nodes under the
/// root, child domains or, at the finest labelled level, nodes.
fn children(topo: &Topology, place: Place) -> Vec<Place> {
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
