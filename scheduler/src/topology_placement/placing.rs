//! One gang's placement inside the hierarchy, one pass per group (see the parent module).

use foldhash::{HashMap, HashSet};
use std::rc::Rc;

use super::tree::{children, first_node, in_scope, innermost, key_resource, level_of, nodes_of, place_at};
use super::{pin, Group, Miss, Place, ShapeKey};
use crate::config::PlacementStrategy;
use crate::framework::Framework;
use crate::ids::{NodeId, PodId};
use crate::node_index::Class;
use crate::placement::{Avail, Feasibility, Placer};
use crate::session::{PodState, Session, Statement};
use crate::snapshot::Level;

/// What one task of the request needs: how many pods, of what size, where they may go.
pub(super) struct Need {
    pub(super) task: usize,
    pub(super) pods: i64,
    pub(super) feasibility: Rc<Feasibility>,
    /// Slices of the task in the group's topology: (size, level).
    pub(super) slices: Option<(i64, Level)>,
}

/// Nodes being freed inside one place, so that no place's nodes are summed one by one.
#[derive(Default)]
pub(super) struct Freeing {
    /// What they add to the place's idle room, in GPUs and CPU.
    pub(super) room: [i64; 2],
    /// Which they are, ascending (kept for labelled domains only).
    pub(super) nodes: Vec<NodeId>,
}

/// The nodes being freed inside a place, if any. Most placements free nothing: the map is
/// then not looked up (hashing the place costs more than the rest of a child's room).
pub(super) fn freeing_at(freeing: &HashMap<(usize, Place), Freeing>, t: usize, place: Place) -> Option<&Freeing> {
    if freeing.is_empty() {
        None
    } else {
        freeing.get(&(t, place))
    }
}

/// One gang's placement inside the hierarchy.
pub struct Placing<'a, 'c, 's> {
    pub(super) ssn: &'a mut Session<'s>,
    pub(super) fw: &'a Framework,
    pub(super) placer: &'a mut Placer,
    pub(super) avail: Avail<'c>,
    /// The pods asked for, ascending.
    pub(super) asked: Vec<PodId>,
    /// Per topology and place, the nodes being freed there that the placement may use.
    pub(super) freeing: HashMap<(usize, Place), Freeing>,
    /// How the pods' pools place their work: which of the domains that hold it comes first.
    pub(super) strategy: PlacementStrategy,
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

    pub(super) fn waiting(&self, pod: PodId) -> bool {
        self.asked.binary_search(&pod).is_ok() && self.ssn.pod_state[pod] == PodState::Pending
    }

    /// The pods of `pods` still waiting to be placed, in order (sized once: placement asks
    /// this at every level it descends).
    pub(super) fn still_waiting(&self, pods: &[PodId]) -> Vec<PodId> {
        let mut waiting = Vec::with_capacity(pods.len());
        waiting.extend(pods.iter().copied().filter(|&p| self.waiting(p)));
        waiting
    }

    pub(super) fn place_group(
        &mut self,
        g: &Group,
        scope: &mut Vec<(usize, Place)>,
        st: &mut Statement,
    ) -> Result<(), Miss> {
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

    pub(super) fn place_pinned(
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

    pub(super) fn needs(&mut self, g: &Group, todo: &[PodId]) -> Vec<Need> {
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
    pub(super) fn choose(&mut self, g: &Group, needs: &[Need], scope: &[(usize, Place)]) -> Option<Vec<Place>> {
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
    pub(super) fn holders(&mut self, t: usize, level: Level, needs: &[Need], scope: &[(usize, Place)]) -> Vec<Place> {
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
    pub(super) fn shape(&self, t: usize, level: Level, needs: &[Need], scope: &[(usize, Place)]) -> Option<ShapeKey> {
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
    pub(super) fn candidates(
        &mut self,
        t: usize,
        level: Level,
        needs: &[Need],
        key: i64,
        scope: &[(usize, Place)],
    ) -> Vec<Place> {
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
    pub(super) fn counts(&mut self, t: usize, place: Place, needs: &[Need], scope: &[(usize, Place)]) -> Vec<i64> {
        needs.iter().map(|need| self.count(t, place, need, scope)).collect()
    }

    /// How many pods of one need the place takes: from the domain's idle-slot sums and the
    /// nodes being freed in it where it can, else node by node.
    pub(super) fn count(&mut self, t: usize, place: Place, need: &Need, scope: &[(usize, Place)]) -> i64 {
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

    pub(super) fn holds(&mut self, t: usize, place: Place, needs: &[Need], scope: &[(usize, Place)]) -> bool {
        needs.iter().zip(self.counts(t, place, needs, scope)).all(|(n, c)| c >= n.pods)
    }

    /// How many pods asking `req` a node takes within the placement's capacity.
    pub(super) fn slots(&self, n: NodeId, req: &crate::res::Res) -> i64 {
        let freed = |ns: &[NodeId]| ns.binary_search(&n).is_ok();
        match self.avail {
            Avail::Idle(hold) => self.ssn.idle_slots(n, req, hold.map(|h| &h[n])),
            Avail::Future(ns) | Avail::Releasing(ns) if freed(ns) => self.ssn.future_slots(n, req),
            Avail::Future(_) => self.ssn.idle_slots(n, req, None),
            Avail::Releasing(_) => 0,
        }
    }

    pub(super) fn class(&self, needs: &[Need]) -> Class {
        let snap = self.ssn.snap;
        let job = &snap.jobs[snap.pods[self.asked[0]].job];
        if snap.gpu.is_some() && needs.iter().any(|n| job.tasks[n.task].gpu) {
            Class::Gpu
        } else {
            Class::Cpu
        }
    }

    /// What the needs ask in total of the class's key resource.
    pub(super) fn key_need(&self, needs: &[Need], class: Class) -> i64 {
        let snap = self.ssn.snap;
        let job = &snap.jobs[snap.pods[self.asked[0]].job];
        let r = key_resource(snap, class);
        needs.iter().map(|n| n.pods * job.tasks[n.task].requests[r]).sum()
    }

    /// A place's room in the class's key resource, for ordering children.
    pub(super) fn room(&self, t: usize, place: Place, class: Class) -> i64 {
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
    pub(super) fn fill(&mut self, t: usize, place: Place, pods: &[PodId], compact: bool, st: &mut Statement) {
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
    pub(super) fn fill_node(&mut self, n: NodeId, pods: &[PodId], st: &mut Statement) {
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

/// Per topology and place (every level, the nodes included), the nodes being freed there
/// under `avail`, and the room they add to its idle room in GPUs and CPU: their capacity once
/// freed, less what is idle on them now where idle capacity also counts.
pub(super) fn freeing(ssn: &Session, avail: Avail) -> HashMap<(usize, Place), Freeing> {
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
