//! Reservations, the mechanism of runtime-aware backfill (the policy is the `reservation`
//! plugin's). When a gang cannot start, [`Reservations::reserve`] finds the earliest time at
//! which it would fit if the pods running on the nodes it may use ended when their run times
//! (declared or learned) say, and the nodes it would take then. Until that time, work the
//! plugins do not exempt must leave those nodes enough idle capacity that the gang still fits
//! once the pods due to end by then have ended: the capacity *held* now on a node is what the
//! gang needs there less what will be freed there by its start. Each node is reserved for one
//! gang at most. Reservations live for one cycle and are planned anew in the next, so they
//! follow the cluster as it changes and nothing has to be stored or recovered after a failover.

use std::rc::Rc;

use crate::framework::Framework;
use crate::ids::{ti_vec, JobId, NodeId, PodId, TiSlice, TiVec};
use crate::placement::{Feasibility, Holds, Placer};
use crate::plugin::{Reservation, ShareBound};
use crate::res::Res;
use crate::session::{PodState, Session};
use crate::snapshot::RunTime;
use crate::topology_placement::required_domains;

/// Plans a cycle may try per gang it may reserve for (plans fail for gangs whose start cannot
/// be known, e.g. behind pods without a declared run time).
const PLANS_PER_RESERVATION: usize = 4;

/// The reservations of one cycle.
#[derive(Debug, Default)]
pub struct Reservations {
    list: Vec<Reservation>,
    /// Per node, whether a reservation holds it (empty until the first reservation).
    taken: TiVec<NodeId, bool>,
    /// Plans tried so far.
    plans: usize,
    /// Whether any job declares a run time or an end (without one no start can be planned),
    /// worked out at the first request.
    timed: Option<bool>,
    /// The holds of every reservation together, for work none exempts.
    all: Option<Rc<Holds>>,
}

impl Reservations {
    /// Hands the reservations over (to the cycle's outcome).
    pub fn into_list(self) -> Vec<Reservation> {
        self.list
    }

    /// Reserves for `job`, a gang that cannot start now, the nodes where it will start
    /// soonest, unless it holds a reservation already, the plugins allow no more, or its start
    /// cannot be known. Returns the reservation it holds.
    pub fn reserve(&mut self, ssn: &Session, fw: &Framework, placer: &mut Placer, job: JobId) -> Option<&Reservation> {
        if let Some(i) = self.list.iter().position(|r| r.job == job) {
            return Some(&self.list[i]);
        }
        if !self.open(fw) {
            return None;
        }
        let timed = *self
            .timed
            .get_or_insert_with(|| ssn.snap.jobs.iter().any(|j| j.run_time.is_some() || j.ends_at.is_some()));
        if !timed || fw.may_reserve(ssn, job).is_err() {
            return None;
        }
        self.plans += 1;
        if self.taken.is_empty() {
            self.taken = ti_vec![false; ssn.snap.nodes.len()];
        }
        let r = plan(ssn, fw, placer, job, &self.taken)?;
        for &(n, _) in &r.nodes {
            self.taken[n] = true;
        }
        self.all = None;
        self.list.push(r);
        self.list.last()
    }

    /// When `job`, just placed, must leave capacity reserved for another gang if it runs on a
    /// learned run time: the earliest start of the reservations holding nodes it took. Such a
    /// job borrows the capacity ([`crate::snapshot::Job::borrowed_until`]).
    pub fn loan(&self, ssn: &Session, job: JobId) -> Option<i64> {
        if !matches!(ssn.snap.jobs[job].run_time, Some(RunTime::Learned(_))) {
            return None;
        }
        let nodes: Vec<NodeId> = ssn.snap.jobs[job]
            .tasks
            .iter()
            .flat_map(|t| &t.pods)
            .filter_map(|&p| match ssn.pod_state[p] {
                PodState::Allocated(n) => Some(n),
                _ => None,
            })
            .collect();
        self.list
            .iter()
            .filter(|r| r.job != job && r.held.iter().any(|(n, _)| nodes.contains(n)))
            .map(|r| r.start)
            .min()
    }

    /// The running pods on `r`'s nodes of jobs whose loan is due: evicted when `r`'s gang is.
    pub fn overdue_borrowers(ssn: &Session, r: &Reservation) -> Vec<PodId> {
        let snap = ssn.snap;
        let due = |j: JobId| snap.jobs[j].borrowed_until.is_some_and(|t| snap.clock.reached(t));
        let mut jobs: Vec<JobId> = ssn
            .pod_state
            .iter_enumerated()
            .filter_map(|(p, s)| Some((snap.pods[p].job, s.running_on()?)))
            .filter(|&(j, n)| due(j) && r.nodes.iter().any(|&(m, _)| m == n))
            .map(|(j, _)| j)
            .collect();
        jobs.sort_unstable();
        jobs.dedup();
        jobs.iter()
            .flat_map(|&j| snap.jobs[j].tasks.iter().flat_map(|t| &t.pods))
            .copied()
            .filter(|&p| ssn.pod_state[p].running_on().is_some())
            .collect()
    }

    /// Whether another reservation may still be planned this cycle.
    pub fn open(&self, fw: &Framework) -> bool {
        let max = fw.max_reservations();
        self.list.len() < max && self.plans < max * PLANS_PER_RESERVATION && self.timed != Some(false)
    }

    /// The capacity `job`, placed within `bound`, must leave idle on each node: the holds of
    /// every reservation the plugins do not let it use; `None` when there are none.
    pub fn holds_for(&mut self, ssn: &Session, fw: &Framework, job: JobId, bound: ShareBound) -> Option<Rc<Holds>> {
        let binds: Vec<bool> = self.list.iter().map(|r| fw.may_use_reserved(ssn, job, bound, r).is_err()).collect();
        if !binds.contains(&true) {
            return None;
        }
        let sum = |keep: &dyn Fn(usize) -> bool| {
            let mut holds = ti_vec![Res::zero(ssn.snap.resources.len()); ssn.snap.nodes.len()];
            for (_, r) in self.list.iter().enumerate().filter(|(i, _)| keep(*i)) {
                for (n, amount) in &r.held {
                    holds[*n].add(amount);
                }
            }
            Rc::new(holds)
        };
        if binds.iter().all(|b| *b) {
            return Some(self.all.get_or_insert_with(|| sum(&|_| true)).clone());
        }
        Some(sum(&|i| binds[i]))
    }
}

/// The earliest start of the gang's pending minimum on nodes no other gang reserved, and the
/// nodes it takes then; `None` when even every pod with a known end ending would not make
/// room for it. A gang that requires a topology level reserves inside one domain of it: the
/// one where it starts soonest.
fn plan(
    ssn: &Session,
    fw: &Framework,
    placer: &mut Placer,
    job: JobId,
    taken: &TiSlice<NodeId, bool>,
) -> Option<Reservation> {
    let pods = ssn.gang_pods(job);
    if pods.is_empty() {
        return None;
    }
    let feasible: Vec<Rc<Feasibility>> = pods.iter().map(|&p| placer.feasibility(ssn, fw, p)).collect();
    let group = placer.groups(ssn.snap, fw, job);
    let Some(required) = group.and_then(|g| required_domains(ssn, &g)) else {
        return plan_within(ssn, job, &pods, &feasible, &|n| !taken[n]);
    };
    let need = ssn.sum_requests(&pods);
    required
        .domains
        .iter()
        .map(|&d| required.nodes(ssn.snap, d))
        .filter(|nodes| {
            let mut capacity = Res::zero(need.len());
            nodes.iter().for_each(|&n| capacity.add(&ssn.snap.nodes[n].allocatable));
            need.fits_in(&capacity)
        })
        .filter_map(|nodes| plan_within(ssn, job, &pods, &feasible, &|n| !taken[n] && nodes.binary_search(&n).is_ok()))
        .min_by_key(|r| r.start)
}

/// [`plan`] on the nodes `allowed` admits.
fn plan_within(
    ssn: &Session,
    job: JobId,
    pods: &[PodId],
    feasible: &[Rc<Feasibility>],
    allowed: &dyn Fn(NodeId) -> bool,
) -> Option<Reservation> {
    let snap = ssn.snap;
    // Dense slots for the usable nodes, so that each trial copies only their capacity.
    const NONE: usize = usize::MAX;
    let mut slot = ti_vec![NONE; snap.nodes.len()];
    let mut nodes: Vec<NodeId> = Vec::new();
    for f in feasible {
        for &n in &f.nodes {
            if slot[n] == NONE && allowed(n) && !snap.nodes[n].unschedulable {
                slot[n] = nodes.len();
                nodes.push(n);
            }
        }
    }
    // Free capacity once releasing pods are gone, and the pods with a known end, earliest first.
    let base: Vec<Res> = nodes
        .iter()
        .map(|&n| {
            let mut gone = ssn.node_releasing[n].minus(&ssn.node_pipelined[n]);
            gone.clamp_non_negative();
            ssn.idle(n).plus(&gone)
        })
        .collect();
    let clock = &snap.clock;
    let mut ends: Vec<(i64, usize, PodId)> = Vec::new();
    for (p, state) in ssn.pod_state.iter_enumerated() {
        let j = &snap.jobs[snap.pods[p].job];
        let (node, end) = match *state {
            // A loan that is due ends now: the borrower is evicted if it still runs.
            PodState::Bound(n) if j.borrowed_until.is_some_and(|t| clock.reached(t)) => (n, Some(clock.now())),
            PodState::Bound(n) => (n, j.ends_at),
            PodState::Allocated(n) => (n, j.run_time.map(|d| clock.now().saturating_add(d.seconds()))),
            _ => continue,
        };
        if let (Some(end), true) = (end, slot[node] != NONE) {
            ends.push((clock.at_least_now(end), slot[node], p));
        }
    }
    ends.sort_unstable();
    let fit = |k: usize| fit_after(ssn, pods, feasible, &slot, &base, &ends[..k]);
    // Trials only at the boundaries between distinct end times, earliest fitting one found by
    // bisection (more ended pods never make a fit harder).
    let mut cuts = vec![0];
    cuts.extend((1..=ends.len()).filter(|&k| k == ends.len() || ends[k].0 != ends[k - 1].0));
    fit(*cuts.last().expect("cuts holds 0"))?;
    let (mut lo, mut hi) = (0, cuts.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fit(cuts[mid]).is_some() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let k = cuts[hi];
    let placed = fit(k).expect("the bisection ends on a fitting cut");
    let start = if k == 0 { clock.now() } else { ends[k - 1].0 };

    let mut need: Vec<(NodeId, Res)> = Vec::new();
    for (i, &s) in placed.iter().enumerate() {
        match need.iter_mut().find(|(n, _)| *n == nodes[s]) {
            Some((_, r)) => r.add(ssn.requests(pods[i])),
            None => need.push((nodes[s], ssn.requests(pods[i]).clone())),
        }
    }
    need.sort_by_key(|(n, _)| *n);
    let held = need
        .iter()
        .map(|(n, amount)| {
            let mut freed = base[slot[*n]].minus(&ssn.idle(*n));
            for &(_, s, p) in &ends[..k] {
                if s == slot[*n] {
                    freed.add(ssn.requests(p));
                }
            }
            let mut h = amount.minus(&freed);
            h.clamp_non_negative();
            (*n, h)
        })
        .collect();
    Some(Reservation { job, start, nodes: need, held })
}

/// Where the gang's pods go (as node slots) once the pods of `ended` have ended, bin-packing
/// on each pod's key resource; `None` when some pod does not fit.
fn fit_after(
    ssn: &Session,
    pods: &[PodId],
    feasible: &[Rc<Feasibility>],
    slot: &TiSlice<NodeId, usize>,
    base: &[Res],
    ended: &[(i64, usize, PodId)],
) -> Option<Vec<usize>> {
    let snap = ssn.snap;
    let mut free = base.to_vec();
    for &(_, s, p) in ended {
        free[s].add(ssn.requests(p));
    }
    let mut placed = Vec::with_capacity(pods.len());
    for (i, &p) in pods.iter().enumerate() {
        let req = ssn.requests(p);
        let task = &snap.jobs[snap.pods[p].job].tasks[snap.pods[p].task];
        let key = snap.key_resource(task.gpu);
        let s = feasible[i]
            .nodes
            .iter()
            .map(|&n| slot[n])
            .filter(|&s| s != usize::MAX && req.fits_in(&free[s]))
            .min_by_key(|&s| (free[s][key], s))?;
        free[s].sub(req);
        placed.push(s);
    }
    Some(placed)
}
