//! The usable-capacity bound: each leaf queue's fair share lowered, once a cycle opens, to the
//! capacity its waiting work can use. Free capacity split into pieces that none of the queue's
//! waiting gangs can start on is no part of its share: counting it made the queue look
//! deprived of capacity no rule could give it. What the queue cannot use stays unassigned, as
//! demand nobody has does.
//!
//! The capacity a gang can start on is the free capacity (idle or being freed) together with
//! what reclaim itself would free for the queue: the running preemptible pods of the other
//! leaf queues that hold more than reclaim leaves them, on each node at most that excess.
//! Without the second part, a queue
//! short of one GPU that an over-quota queue holds could never reclaim it: its gang fits
//! nowhere until the GPU is freed, so the bound fell to what it held and refused every
//! reclaim that added anything.

use foldhash::HashMap;

use crate::ids::{TiSlice, TiVec};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, NodeId, PodId, QueueId, ROOT};

/// Lowers each leaf queue's fair share to the capacity its waiting work can use: what it
/// holds, plus what reclaim could take for it from other leaf queues, plus the free capacity
/// of the nodes where a pod of one of its waiting gangs fits, counted only when one of those
/// gangs fits whole on the capacity it can reach (see the module doc); never below its
/// guaranteed part, `min(deserved, demand)`.
///
/// A queue's waiting gang is each job's gang minimum still to place, or its next pod once
/// the minimum runs. The fit is counted on capacity alone (node selectors and taints are not
/// looked at), so the share may count capacity a gang still cannot use; it places the gang's
/// pods first fit, so a gang only a tighter packing would seat counts as not fitting. What
/// reclaim could take is what other leaf queues hold above their deserved quota while the
/// queue is within its own, else above the larger of their fair share and deserved quota
/// (KAI's rule, as the plugin's `reclaimable_from` judges it).
///
/// Returns every queue's fair share before it was lowered, so that a refusal can say which
/// bound refused.
pub fn count_only_usable_capacity(
    ssn: &mut Session,
    jobs_by_queue: &TiSlice<QueueId, Vec<JobId>>,
) -> TiVec<QueueId, Res> {
    let full = ssn.fair_share.clone();
    let fair = &full;
    let snap = ssn.snap;
    let n = snap.resources.len();
    let nodes = Nodes::of(ssn);
    let leaves: Vec<QueueId> =
        snap.queues.keys().filter(|&q| q != ROOT && snap.queues[q].children.is_empty()).collect();
    // What the leaves hold above their bar, summed once; a queue takes its own part out.
    let mut above = [vec![0i128; n], vec![0i128; n]];
    for &v in &leaves {
        for (within, sums) in [false, true].into_iter().zip(&mut above) {
            for (r, sum) in sums.iter_mut().enumerate() {
                *sum += held_above(ssn, fair, v, r, within);
            }
        }
    }
    // Per bar (the reclaimer beyond or within its deserved quota), the capacity reclaim could
    // free on each node; none when no leaf holds above that bar.
    let mut freeable = [false, true].map(|within| {
        let givers: Vec<QueueId> = leaves.iter().copied().filter(|&v| gives_back(ssn, fair, v, within)).collect();
        (!givers.is_empty()).then(|| {
            let mut reach = nodes.free.clone();
            for &v in &givers {
                for (at, freed) in nodes.reclaimable(ssn, fair, v, &jobs_by_queue[v], within) {
                    reach[at].add(&freed);
                }
            }
            View::new(reach)
        })
    });
    let mut plain = View::new(nodes.free.clone());
    let mut lowered = Vec::new();
    for &q in &leaves {
        let (alloc, deserved) = (&ssn.queue_alloc[q], &snap.queues[q].deserved);
        let within_deserved = (0..n).all(|r| !snap.quota_resources[r] || alloc[r] <= deserved[r]);
        let jobs = &jobs_by_queue[q];
        let reached = match &mut freeable[usize::from(within_deserved)] {
            None => plain.reachable(ssn, jobs, &nodes.free),
            // The queue's own pods are no capacity reclaim frees for it.
            Some(shared) if gives_back(ssn, fair, q, within_deserved) => {
                let mut reach = shared.capacity.clone();
                for (at, freed) in nodes.reclaimable(ssn, fair, q, jobs, within_deserved) {
                    reach[at].sub(&freed);
                }
                View::new(reach).reachable(ssn, jobs, &nodes.free)
            }
            Some(shared) => shared.reachable(ssn, jobs, &nodes.free),
        };
        let Some(reached) = reached else { continue };
        let mut usable = alloc.plus(&reached);
        let others = &above[usize::from(within_deserved)];
        for r in 0..n {
            let sum = i128::from(usable[r]) + others[r] - held_above(ssn, fair, q, r, within_deserved);
            usable[r] = sum.min(i128::from(i64::MAX)) as i64;
        }
        let mut share = fair[q].clone();
        for r in (0..n).filter(|&r| r != snap.pods_resource) {
            let guaranteed = deserved[r].min(ssn.demand[q][r]);
            share[r] = share[r].min(usable[r].max(guaranteed));
        }
        lowered.push((q, share));
    }
    for (q, share) in lowered {
        ssn.fair_share[q] = share;
    }
    full
}

/// What leaf `v` holds of resource `r` above what reclaim leaves it: its deserved quota
/// when the reclaiming queue stays `within` its own, else the larger of deserved quota and
/// its `fair` share.
fn held_above(ssn: &Session, fair: &TiSlice<QueueId, Res>, v: QueueId, r: usize, within: bool) -> i128 {
    let deserved = ssn.snap.queues[v].deserved[r];
    let bar = if within { deserved } else { deserved.max(fair[v][r]) };
    i128::from((ssn.queue_alloc[v][r] - bar).max(0))
}

/// Whether reclaim may take from leaf `v` for a queue `within` its deserved quota or not:
/// `v` is above its deserved quota in a quota resource and, for a reclaimer beyond its own,
/// above the larger of fair share and deserved quota; and nothing on its path is fenced.
fn gives_back(ssn: &Session, fair: &TiSlice<QueueId, Res>, v: QueueId, within: bool) -> bool {
    let snap = ssn.snap;
    let (alloc, deserved) = (&ssn.queue_alloc[v], &snap.queues[v].deserved);
    let counted = |r: usize| r != snap.pods_resource;
    let over_quota = (0..alloc.len()).any(|r| counted(r) && snap.quota_resources[r] && alloc[r] > deserved[r]);
    let over_share = within || (0..alloc.len()).any(|r| counted(r) && alloc[r] > deserved[r].max(fair[v][r]));
    over_quota && over_share && snap.ancestry(v).all(|a| snap.queues[a].reclaimable)
}

/// The schedulable nodes and their free capacity, in node order.
struct Nodes {
    /// Per node id, its place in `free` (none for an unschedulable node).
    position: Vec<Option<usize>>,
    free: Vec<Res>,
}

impl Nodes {
    fn of(ssn: &Session) -> Nodes {
        let snap = ssn.snap;
        let n = snap.resources.len();
        let mut position = vec![None; snap.nodes.len()];
        let mut free = Vec::with_capacity(snap.nodes.len());
        for node in snap.nodes.keys().filter(|&node| !snap.nodes[node].unschedulable) {
            position[node.0] = Some(free.len());
            free.push(Res((0..n).map(|r| ssn.future_of(node, r).max(0)).collect()));
        }
        Nodes { position, free }
    }

    /// What reclaiming leaf `v` (whose jobs are `jobs`) could free on each node (by its place
    /// in `free`) for a reclaimer `within` its deserved quota or not: the running pods of its
    /// preemptible jobs there, at most what `v` holds above what reclaim leaves it.
    fn reclaimable(
        &self,
        ssn: &Session,
        fair: &TiSlice<QueueId, Res>,
        v: QueueId,
        jobs: &[JobId],
        within: bool,
    ) -> Vec<(usize, Res)> {
        let n = ssn.snap.resources.len();
        let excess: Vec<i64> =
            (0..n).map(|r| held_above(ssn, fair, v, r, within).min(i128::from(i64::MAX)) as i64).collect();
        let mut held: HashMap<usize, Res> = HashMap::default();
        for &j in jobs.iter().filter(|&&j| ssn.snap.jobs[j].preemptible) {
            for p in ssn.running_pods(j) {
                let node: Option<NodeId> = ssn.pod_state[p].running_on();
                let Some(at) = node.and_then(|node| self.position[node.0]) else { continue };
                held.entry(at).or_insert_with(|| Res::zero(n)).add(ssn.requests(p));
            }
        }
        let mut freed: Vec<(usize, Res)> = held.into_iter().collect();
        for (_, amounts) in &mut freed {
            for (r, amount) in amounts.0.iter_mut().enumerate() {
                *amount = (*amount).min(excess[r]);
            }
        }
        freed
    }
}

/// Capacity per node that waiting gangs are fitted on, with what was fitted on it so far:
/// queues often wait with gangs of the same requests, so each is fitted, and each set of
/// requests' reachable capacity summed, once per view.
struct View<'s> {
    capacity: Vec<Res>,
    total: Res,
    fitted: HashMap<Vec<&'s Res>, bool>,
    reached: HashMap<Vec<&'s Res>, Res>,
}

impl<'s> View<'s> {
    fn new(capacity: Vec<Res>) -> View<'s> {
        let mut total = Res::zero(capacity.first().map_or(0, Res::len));
        capacity.iter().for_each(|c| total.add(c));
        View { capacity, total, fitted: HashMap::default(), reached: HashMap::default() }
    }

    /// The `free` capacity of the nodes where a pod of one of the waiting gangs of `jobs`
    /// that fit this view whole fits this view; `None` when no job waits.
    fn reachable(&mut self, ssn: &Session<'s>, jobs: &[JobId], free: &[Res]) -> Option<Res> {
        let pods = self.startable_pods(ssn, jobs)?;
        let capacity = &self.capacity;
        let sum = self.reached.entry(pods).or_insert_with_key(|pods| {
            let mut sum = Res::zero(ssn.snap.resources.len());
            let fits = |c: &Res| pods.iter().any(|r| r.fits_in(c));
            capacity.iter().zip(free).filter(|(c, _)| fits(c)).for_each(|(_, f)| sum.add(f));
            sum
        });
        Some(sum.clone())
    }

    /// The distinct pod requests of the waiting gangs among `jobs` that fit the view whole
    /// (none when no gang does); `None` when no job waits. A gang of alike pods that does not
    /// fit rules out every later gang of as many such pods or more; a gang of requests
    /// already fitted (for any queue) is not fitted again.
    fn startable_pods(&mut self, ssn: &Session<'s>, jobs: &[JobId]) -> Option<Vec<&'s Res>> {
        let mut waiting = false;
        let mut pods: Vec<&Res> = Vec::new();
        let mut too_big: Vec<(&Res, usize)> = Vec::new();
        for &j in jobs {
            let mut gang = ssn.gang_pods(j);
            if gang.is_empty() {
                gang.extend(ssn.pending_pods(j).take(1));
            }
            let Some(&first) = gang.first() else { continue };
            waiting = true;
            // Only the distinct requests count: a gang whose pods' requests are all in already
            // adds nothing, so it is not fitted again.
            if gang.iter().all(|&p| pods.contains(&ssn.requests(p))) {
                continue;
            }
            let first = ssn.requests(first);
            let alike = gang.iter().all(|&p| ssn.requests(p) == first);
            if alike && too_big.iter().any(|&(r, k)| r == first && k <= gang.len()) {
                continue;
            }
            let requests: Vec<&Res> = gang.iter().map(|&p| ssn.requests(p)).collect();
            let (capacity, total) = (&self.capacity, &self.total);
            let fits = *self
                .fitted
                .entry(requests)
                .or_insert_with(|| ssn.sum_requests(&gang).fits_in(total) && fits_whole(ssn, &gang, capacity));
            if fits {
                for &p in &gang {
                    let r = ssn.requests(p);
                    if !pods.contains(&r) {
                        pods.push(r);
                    }
                }
            } else if alike {
                too_big.push((first, gang.len()));
            }
        }
        waiting.then_some(pods)
    }
}

/// Whether the pods fit the nodes' `capacity` together, each on the first node with room
/// left.
fn fits_whole(ssn: &Session, pods: &[PodId], capacity: &[Res]) -> bool {
    let mut left = capacity.to_vec();
    pods.iter().all(|&p| {
        let r = ssn.requests(p);
        left.iter_mut().find(|f| r.fits_in(f)).map(|f| f.sub(r)).is_some()
    })
}
