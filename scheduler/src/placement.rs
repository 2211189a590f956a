//! Finding a node for a pod: static feasibility (node filters) computed once per distinct
//! set of task constraints and cached for the cycle, then the idle-capacity index walked in
//! the pool's placement order until a node fits. When nothing fits, an explanation in
//! kube-scheduler's style counts why each node was rejected.

mod slot_sums;

use foldhash::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::config::PlacementStrategy;
use crate::framework::Framework;
use crate::ids::{JobId, NodeId, PodId, TiVec};
use crate::node_index::Class;
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{Level, Snapshot};

/// Capacity set aside on each node (for gangs ahead, and reservations).
pub type Holds = TiVec<NodeId, Res>;

/// Which capacity a search may use.
#[derive(Debug, Clone, Copy)]
pub enum Avail<'a> {
    /// Idle capacity now, less optional per-node holds (backfill reservations).
    Idle(Option<&'a Holds>),
    /// Capacity of these nodes once their releasing pods terminate (preempt and reclaim
    /// pipelining), else idle capacity anywhere.
    Future(&'a [NodeId]),
    /// Capacity of these nodes once their releasing pods terminate, and nothing else.
    Releasing(&'a [NodeId]),
}

/// Nodes a task may ever use.
#[derive(Debug)]
pub struct Feasibility {
    /// Per node: index into `reasons` of why it is excluded.
    excluded: TiVec<NodeId, Option<usize>>,
    reasons: Vec<String>,
    /// Feasible nodes, ascending.
    pub nodes: Vec<NodeId>,
    /// Pools with at least one feasible node, in name order.
    pub pools: Vec<usize>,
}

impl Feasibility {
    /// Whether the node passes every filter.
    pub fn ok(&self, node: NodeId) -> bool {
        self.excluded[node].is_none()
    }

    /// Why a node fails a filter (`None`: it passes every one).
    pub fn why_excluded(&self, node: NodeId) -> Option<&str> {
        self.excluded[node].map(|i| self.reasons[i].as_str())
    }
}

/// Below this many feasible nodes, a linear scan beats walking the index.
const LINEAR_SCAN_MAX: usize = 64;

/// The per-cycle node finder.
#[derive(Default)]
pub struct Placer {
    /// Per task constraints (and, where the NVLink rule makes the filter depend on it, the
    /// GPUs a pod asks): the nodes its pods may use.
    cache: HashMap<(usize, i64), Rc<Feasibility>>,
    explained: HashMap<(usize, Res, bool), (u64, String)>,
    /// Per constraints and request: the session version at which no node had idle room
    /// (nothing idle changes without a new version, and pods that fail alike fail in a row).
    missed: HashMap<(usize, Res), u64>,
    /// Per job: the groups its pods are placed by, when a topology applies.
    groups: HashMap<JobId, Option<Rc<crate::topology_placement::Group>>>,
    /// Per task constraints, topology, level and place: the nodes excluded there, for
    /// explanations.
    excluded: HashMap<(usize, usize, Level, crate::topology_placement::Place), String>,
    /// Per group shape: the session version at which no domain held it, and its explanation
    /// once made (groups that fail alike fail in a row).
    pub(crate) topology_misses: HashMap<crate::topology_placement::ShapeKey, (u64, Option<String>)>,
    /// Per topology and task constraints, per request: the idle slots of each domain.
    slot_sums: HashMap<(usize, usize), Vec<ShapeSums>>,
    /// How many shapes have their sums made this cycle.
    slot_sums_made: usize,
}

/// At most this many request shapes a cycle get idle-slot sums.
const MAX_SLOT_SUMS: usize = 64;

/// One request shape's idle-slot sums, and until they are made, how many nodes counting its
/// places one by one has walked.
struct ShapeSums {
    req: Res,
    walked: usize,
    sums: Option<slot_sums::SlotSums>,
}

impl Placer {
    /// The idle slots of topology `t`'s domains for pods asking `req` under `feasibility`,
    /// up to date with the session, once they are worth keeping; `None` before, and then the
    /// caller counts the `walk` nodes of its place one by one. They are made once a shape's
    /// counting has walked as many nodes as the cluster has (so a shape asked about a few
    /// times costs what counting costs), for at most [`MAX_SLOT_SUMS`] shapes a cycle (so
    /// requests of every size cost memory in proportion).
    pub(crate) fn slot_sums(
        &mut self,
        ssn: &Session,
        t: usize,
        feasibility: &Rc<Feasibility>,
        req: &Res,
        walk: usize,
    ) -> Option<&slot_sums::SlotSums> {
        let topo = &ssn.snap.topologies[t];
        let list = self.slot_sums.entry((t, Rc::as_ptr(feasibility) as usize)).or_default();
        let at = match list.iter().position(|s| s.req == *req) {
            Some(at) => at,
            None => {
                list.push(ShapeSums { req: req.clone(), walked: 0, sums: None });
                list.len() - 1
            }
        };
        let shape = &mut list[at];
        if shape.sums.is_none() {
            shape.walked += walk;
            if shape.walked < ssn.snap.nodes.len() || self.slot_sums_made == MAX_SLOT_SUMS {
                return None;
            }
            self.slot_sums_made += 1;
            shape.sums = Some(slot_sums::SlotSums::new(ssn, topo, feasibility.clone(), req));
        }
        let sums = shape.sums.as_mut().expect("made above");
        sums.catch_up(ssn, topo);
        Some(sums)
    }

    /// The groups a job's pods are placed by, when a topology applies to it.
    pub fn groups(
        &mut self,
        snap: &Snapshot,
        fw: &Framework,
        job: JobId,
    ) -> Option<Rc<crate::topology_placement::Group>> {
        self.groups.entry(job).or_insert_with(|| crate::topology_placement::groups(snap, fw, job).map(Rc::new)).clone()
    }

    /// The nodes of `within` excluded for a task, and those lacking `level`'s label
    /// (static for the cycle, so computed once).
    pub(crate) fn excluded(
        &mut self,
        snap: &Snapshot,
        feasibility: &Rc<Feasibility>,
        t: usize,
        level: Level,
        within: crate::topology_placement::Place,
    ) -> String {
        let key = (Rc::as_ptr(feasibility) as usize, t, level, within);
        self.excluded
            .entry(key)
            .or_insert_with(|| crate::topology_placement::excluded_nodes(snap, feasibility, t, level, within))
            .clone()
    }

    /// Static feasibility of a pod's task, computed once per distinct constraints (and GPU
    /// request, for the NVLink rule).
    pub fn feasibility(&mut self, ssn: &Session, fw: &Framework, pod: PodId) -> Rc<Feasibility> {
        let p = &ssn.snap.pods[pod];
        let task = &ssn.snap.jobs[p.job].tasks[p.task];
        let gpus = task.constraints.min_nvlink_gpus.and(ssn.snap.gpu).map_or(-1, |g| task.requests[g]);
        let key = (Arc::as_ptr(&task.constraints) as usize, gpus);
        self.cache
            .entry(key)
            .or_insert_with(|| {
                let mut reasons: Vec<String> = Vec::new();
                let mut excluded = TiVec::with_capacity(ssn.snap.nodes.len());
                let mut nodes = Vec::new();
                let mut pools = Vec::new();
                for (n, node) in ssn.snap.nodes.iter_enumerated() {
                    match fw.node_filter(ssn.snap, p.job, p.task, n) {
                        Ok(()) => {
                            excluded.push(None);
                            nodes.push(n);
                            if !pools.contains(&node.pool) {
                                pools.push(node.pool);
                            }
                        }
                        Err(reason) => {
                            let i = reasons.iter().position(|r| *r == reason).unwrap_or_else(|| {
                                reasons.push(reason);
                                reasons.len() - 1
                            });
                            excluded.push(Some(i));
                        }
                    }
                }
                pools.sort_unstable();
                Rc::new(Feasibility { excluded, reasons, nodes, pools })
            })
            .clone()
    }

    /// How the pools of `pods` place their class of work: spread only when every pool any of
    /// them may use spreads it.
    pub fn strategy(&mut self, ssn: &Session, fw: &Framework, pods: &[PodId]) -> PlacementStrategy {
        let snap = ssn.snap;
        let mut tasks: Vec<(JobId, usize)> = Vec::new();
        let mut pools: Vec<(usize, bool)> = Vec::new();
        for &p in pods {
            let pod = &snap.pods[p];
            if tasks.contains(&(pod.job, pod.task)) {
                continue;
            }
            tasks.push((pod.job, pod.task));
            let gpu = snap.gpu.is_some() && snap.jobs[pod.job].tasks[pod.task].gpu;
            for &pool in &self.feasibility(ssn, fw, p).pools {
                if !pools.contains(&(pool, gpu)) {
                    pools.push((pool, gpu));
                }
            }
        }
        let spreads = |&(pool, gpu): &(usize, bool)| fw.placement(&snap.pools[pool], gpu) == PlacementStrategy::Spread;
        if !pools.is_empty() && pools.iter().all(spreads) {
            PlacementStrategy::Spread
        } else {
            PlacementStrategy::Binpack
        }
    }

    /// The best node for a pod, or `None` when none fits.
    pub fn find(&mut self, ssn: &Session, fw: &Framework, pod: PodId, avail: Avail) -> Option<NodeId> {
        let p = &ssn.snap.pods[pod];
        let task = &ssn.snap.jobs[p.job].tasks[p.task];
        match avail {
            Avail::Future(nodes) => {
                self.find(ssn, fw, pod, Avail::Releasing(nodes)).or_else(|| self.find(ssn, fw, pod, Avail::Idle(None)))
            }
            Avail::Releasing(nodes) => {
                let feas = self.feasibility(ssn, fw, pod);
                let key_res = ssn.snap.key_resource(task.gpu);
                best_of(
                    nodes.iter().copied().filter(|&n| feas.ok(n) && ssn.fits_future(n, &task.requests)),
                    |n| ssn.future_of(n, key_res),
                    |n| fw.placement(&ssn.snap.pools[ssn.snap.nodes[n].pool], task.gpu),
                )
            }
            Avail::Idle(None) => {
                let key = (Arc::as_ptr(&task.constraints) as usize, task.requests.clone());
                if self.missed.get(&key) == Some(&ssn.version) {
                    return None;
                }
                let found = self.find_idle(ssn, fw, pod, None);
                if found.is_none() {
                    self.missed.insert(key, ssn.version);
                }
                found
            }
            Avail::Idle(hold) => self.find_idle(ssn, fw, pod, hold),
        }
    }

    /// The best node with idle room for a pod, less `hold` per node.
    fn find_idle(&mut self, ssn: &Session, fw: &Framework, pod: PodId, hold: Option<&Holds>) -> Option<NodeId> {
        let feas = self.feasibility(ssn, fw, pod);
        let p = &ssn.snap.pods[pod];
        let task = &ssn.snap.jobs[p.job].tasks[p.task];
        let req = &task.requests;
        let key_res = ssn.snap.key_resource(task.gpu);
        let held = |n: NodeId| hold.map(|h| &h[n]);
        if feas.nodes.len() <= LINEAR_SCAN_MAX || hold.is_some() {
            return best_of(
                feas.nodes.iter().copied().filter(|&n| ssn.fits_idle(n, req, held(n))),
                |n| ssn.idle_of(n, key_res) - held(n).map_or(0, |h| h[key_res]),
                |n| fw.placement(&ssn.snap.pools[ssn.snap.nodes[n].pool], task.gpu),
            );
        }
        let class = if task.gpu { Class::Gpu } else { Class::Cpu };
        feas.pools.iter().find_map(|&pool| {
            let s = fw.placement(&ssn.snap.pools[pool], task.gpu);
            ssn.index.candidates(pool, class, req[key_res], s).find(|&n| feas.ok(n) && ssn.fits_idle(n, req, None))
        })
    }

    /// Why no node fits the pod: `0/N nodes are available: 3 Insufficient nvidia.com/gpu, ...`.
    /// Reused while the session is unchanged, since gangs that fail alike fail in a row.
    pub fn explain(&mut self, ssn: &Session, fw: &Framework, pod: PodId, hold: Option<&Holds>) -> String {
        let feas = self.feasibility(ssn, fw, pod);
        let req = ssn.requests(pod);
        if hold.is_some() && !feas.nodes.iter().any(|&n| ssn.fits_idle(n, req, None)) {
            // No node fits even without the holds: they change nothing, and the explanation
            // without them is cached.
            return self.explain(ssn, fw, pod, None);
        }
        let key = (
            Arc::as_ptr(&ssn.snap.jobs[ssn.snap.pods[pod].job].tasks[ssn.snap.pods[pod].task].constraints) as usize,
            req.clone(),
            hold.is_some(),
        );
        if let Some((version, text)) = self.explained.get(&key) {
            if *version == ssn.version && hold.is_none() {
                return text.clone();
            }
        }
        let statics = feas.reasons.len();
        let resources = ssn.snap.resources.len();
        let mut counts = vec![0usize; statics + resources + 1];
        for n in ssn.snap.nodes.keys() {
            let slot = match feas.excluded[n] {
                Some(i) => i,
                None => match (0..resources).find(|&r| req[r] > ssn.idle_of(n, r)) {
                    Some(r) => statics + r,
                    None if hold.is_some_and(|h| !ssn.fits_idle(n, req, Some(&h[n]))) => statics + resources,
                    None => continue,
                },
            };
            counts[slot] += 1;
        }
        let label = |slot: usize| {
            if slot < statics {
                feas.reasons[slot].clone()
            } else if slot < statics + resources {
                format!("Insufficient {}", ssn.snap.resources[slot - statics])
            } else {
                "node(s) held for earlier gangs".to_string()
            }
        };
        let mut parts: Vec<(usize, String)> =
            counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(slot, &c)| (c, label(slot))).collect();
        parts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let list: Vec<String> = parts.into_iter().map(|(c, r)| format!("{c} {r}")).collect();
        let text = format!("0/{} nodes are available: {}", ssn.snap.nodes.len(), list.join(", "));
        self.explained.insert(key, (ssn.version, text.clone()));
        text
    }
}

fn best_of(
    nodes: impl Iterator<Item = NodeId>,
    key: impl Fn(NodeId) -> i64,
    strategy: impl Fn(NodeId) -> PlacementStrategy,
) -> Option<NodeId> {
    nodes
        .map(|n| {
            let k = key(n);
            let score = match strategy(n) {
                PlacementStrategy::Binpack => k,
                PlacementStrategy::Spread => -k,
            };
            (score, n)
        })
        .min()
        .map(|(_, n)| n)
}
