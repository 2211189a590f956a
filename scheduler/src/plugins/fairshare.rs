//! Hierarchical fair share: per queue, deserved quota, hard limit, over-quota weight and
//! reclaimable flag. Each cycle it computes every queue's demand and fair share (see
//! [`crate::share_division`]) and lowers each leaf queue's share to the capacity its waiting
//! gangs can use (see [`count_only_usable_capacity`]), orders sibling queues most-deprived
//! first, keeps allocations within limits and (in the fair pass) within fair shares, keeps
//! non-preemptible work within deserved quota, admits pod groups only when their queue can
//! hold their minimum, and decides which reclaim victims may be taken (KAI's rule, see
//! [`reclaimable_from`]): from queues over fair share first, never from a queue at or below
//! its deserved quota, and never from non-reclaimable queues (except their elastic pods while
//! they are overused). The pod count is node capacity, not quota: it has no fair-share bound
//! here.

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;

use crate::config::{FairShareArgs, TimeBasedArgs};
use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::plugin::{Blocker, EvictMode, Plugin, Rule, ShareBound, Subject, Verdict, Victim, Why};
use crate::queue_state::queue_state;
use crate::res::{Res, UNLIMITED};
use crate::session::Session;
use crate::share_division::{divide, Claim, PastUsage};

mod usable;
use crate::snapshot::{JobId, JobPhase, QueueId, Snapshot, ROOT};
use usable::count_only_usable_capacity;

/// The fair-share plugin.
pub struct FairShare {
    args: FairShareArgs,
    defer_queue_order: bool,
    /// With time-based fair share, per queue, the largest part of the cluster it used lately
    /// in any resource: of two queues equally served, the one that used less goes first.
    past: TiVec<QueueId, f64>,
    jobs_by_queue: TiVec<QueueId, Vec<JobId>>,
    /// Per queue, the running elastic pods (above their job's minimum) of its whole subtree,
    /// at the start of the cycle: free capacity for admission (Volcano's elastic rule).
    elastic_subtree: TiVec<QueueId, Res>,
    /// Per job, its last worked-out request, keyed by its running and pipelined pod counts
    /// (fixed while these are): reclaim asks about many victims for one reclaimer in a row,
    /// and the queue order asks about every queue's next job.
    needs: RefCell<TiVec<JobId, Option<(NeedKey, Need)>>>,
    /// Per queue (any level), the jobs of its subtree that had pending pods when the cycle
    /// opened, highest priority first, then oldest: the first one still waiting is the
    /// queue's next job.
    waiting: TiVec<QueueId, Vec<JobId>>,
    /// Per queue, how many of its first `waiting` jobs are known to have no pod left to place
    /// this cycle (placed or pipelined).
    placed: TiVec<QueueId, Cell<usize>>,
    /// Per queue, its fair share before [`count_only_usable_capacity`] lowered it: a refusal
    /// by a lowered share says so.
    full_share: TiVec<QueueId, Res>,
    /// Reclaim asks about every queue for one job in a row; see [`PartingVerdicts`].
    reclaim_from: RefCell<PartingVerdicts>,
}

/// [`reclaimable_from`]'s verdicts for one reclaiming job on one session state, by the
/// sibling queue where the paths part: every queue below that sibling gets the same verdict,
/// so with thousands of queues in a few levels only a few dozen are worked out.
#[derive(Default)]
struct PartingVerdicts {
    /// The session's version and the job they are worked out for.
    key: Option<(u64, JobId)>,
    /// Counts the keys: a verdict stamped with an older round is not current.
    round: u64,
    /// Per sibling queue, its verdict and the round it was worked out in.
    by_sibling: TiVec<QueueId, (u64, Result<(), Blocker>)>,
}

/// A job's running and pipelined pod counts: its request is fixed while these are.
type NeedKey = (u32, u32);

/// What a job asks room for: its gang's minimum, or one elastic pod once the minimum runs.
#[derive(Clone)]
struct Need {
    request: Res,
    elastic: bool,
}

impl FairShare {
    /// A plugin dividing spare capacity as `args` say; `defer_queue_order` lets DRF order
    /// queues.
    pub fn new(args: FairShareArgs, defer_queue_order: bool) -> FairShare {
        FairShare {
            args,
            defer_queue_order,
            past: TiVec::new(),
            jobs_by_queue: TiVec::new(),
            elastic_subtree: TiVec::new(),
            needs: RefCell::new(TiVec::new()),
            waiting: TiVec::new(),
            placed: TiVec::new(),
            full_share: TiVec::new(),
            reclaim_from: RefCell::default(),
        }
    }
}

/// Computes demand and fair share of every queue into the session; `past` is every queue's
/// normalized past usage when time-based fair share is on ([`past_usage`]).
pub fn compute_shares(
    ssn: &mut Session,
    jobs_by_queue: &TiSlice<QueueId, Vec<JobId>>,
    args: &FairShareArgs,
    past: Option<&TiSlice<QueueId, Vec<f64>>>,
) {
    let snap = ssn.snap;
    let n = snap.resources.len();
    let mut demand = ti_vec![Res::zero(n); snap.queues.len()];
    for (q, jobs) in jobs_by_queue.iter_enumerated() {
        for &j in jobs {
            for t in &snap.jobs[j].tasks {
                demand[q].add(&t.requests.times(t.pods.len() as i64));
            }
        }
    }
    fill_demand(snap, ROOT, &mut demand);
    let mut fair = ti_vec![Res::zero(n); snap.queues.len()];
    fair[ROOT] = snap.capacity.clone();
    let mut stack = vec![ROOT];
    while let Some(p) = stack.pop() {
        let children = &snap.queues[p].children;
        for r in 0..n {
            let claims: Vec<Claim> = children
                .iter()
                .map(|&c| Claim {
                    deserved: snap.queues[c].deserved[r],
                    demand: demand[c][r],
                    weight: snap.queues[c].over_quota_weight,
                })
                .collect();
            let usage: Vec<f64> = past.map(|u| children.iter().map(|&c| u[c][r]).collect()).unwrap_or_default();
            let past = past.is_some().then_some(PastUsage { k_value: args.time_based.k_value, usage: &usage });
            for (&c, share) in children.iter().zip(divide(fair[p][r], &claims, args.mode, past)) {
                fair[c][r] = share;
            }
        }
        stack.extend(children.iter().copied());
    }
    // The pod count is node capacity, not something queues share: no fair-share bound on it.
    for share in &mut fair {
        share[snap.pods_resource] = UNLIMITED;
    }
    ssn.demand = demand;
    ssn.fair_share = fair;
}

/// With time-based fair share on, per queue and resource, its past usage as a part of what
/// the cluster's capacity could have given over the remembered time (0 where the cluster has
/// none of the resource); `None` when it is off.
fn past_usage(snap: &Snapshot, time_based: TimeBasedArgs) -> Option<TiVec<QueueId, Vec<f64>>> {
    if !time_based.enabled {
        return None;
    }
    let memory = crate::usage::memory_seconds(&time_based);
    let part = |q: QueueId, r: usize| {
        let used = snap.past_usage.get(q).and_then(|u| u.get(r)).copied().unwrap_or(0.0);
        let could = snap.capacity[r] as f64 * memory;
        if could > 0.0 && used.is_finite() {
            (used / could).max(0.0)
        } else {
            0.0
        }
    };
    Some(snap.queues.keys().map(|q| (0..snap.resources.len()).map(|r| part(q, r)).collect()).collect())
}

fn fill_demand(snap: &Snapshot, q: QueueId, demand: &mut TiSlice<QueueId, Res>) {
    for &c in &snap.queues[q].children {
        fill_demand(snap, c, demand);
        let child = demand[c].clone();
        demand[q].add(&child);
    }
    let limit = &snap.queues[q].limit;
    for r in 0..limit.len() {
        demand[q][r] = demand[q][r].min(limit[r]);
    }
}

/// How far a queue is from being served: queues below their deserved quota first, then the
/// smallest dominant ratio of allocation to fair share.
fn deprivation(ssn: &Session, q: QueueId) -> (bool, f64) {
    let alloc = &ssn.queue_alloc[q];
    let fair = &ssn.fair_share[q];
    let deserved = &ssn.snap.queues[q].deserved;
    let demand = &ssn.demand[q];
    let mut below_deserved = false;
    let mut ratio: f64 = 0.0;
    for r in 0..alloc.len() {
        if demand[r] == 0 || r == ssn.snap.pods_resource {
            continue;
        }
        if alloc[r] < deserved[r].min(demand[r]) {
            below_deserved = true;
        }
        let x = if fair[r] > 0 {
            alloc[r] as f64 / fair[r] as f64
        } else if alloc[r] > 0 {
            f64::INFINITY
        } else {
            0.0
        };
        ratio = ratio.max(x);
    }
    (!below_deserved, ratio)
}

/// Adds to `into` the requests of the job's pods above its gang minimum that are running.
fn add_elastic_running(ssn: &Session, job: JobId, into: &mut Res) {
    let j = &ssn.snap.jobs[job];
    let mut surplus = ssn.job_running[job].saturating_sub(j.min_member);
    for (t, task) in j.tasks.iter().enumerate().rev() {
        if surplus == 0 {
            break;
        }
        let spare = ssn.task_running[job][t].saturating_sub(task.min_available).min(surplus);
        into.add_times(&task.requests, i64::from(spare));
        surplus -= spare;
    }
}

impl FairShare {
    /// Calls `f` with what `job` asks room for — its gang's minimum, or one elastic pod once
    /// the minimum runs — worked out once per job and state.
    fn with_need<T>(&self, ssn: &Session, job: JobId, f: impl FnOnce(&Need) -> T) -> T {
        let key = (ssn.job_running[job], ssn.job_pipelined[job]);
        let mut needs = self.needs.borrow_mut();
        if needs.len() <= job.0 {
            needs.resize(ssn.snap.jobs.len().max(job.0 + 1), None);
        }
        let need = match &mut needs[job] {
            Some((k, need)) if *k == key => need,
            slot => {
                // A job at its minimum asks for one elastic pod at a time.
                let mut pods = ssn.gang_pods(job);
                let elastic = pods.is_empty();
                if elastic {
                    pods.extend(ssn.pending_pods(job).take(1));
                }
                &slot.insert((key, Need { request: ssn.sum_requests(&pods), elastic })).1
            }
        };
        f(need)
    }

    /// The queue's next job: the first job of its subtree, highest priority first, then
    /// oldest, that is admitted, not pipelined and has a pod to place.
    fn next_job(&self, ssn: &Session, q: QueueId) -> Option<JobId> {
        let list = &self.waiting[q];
        // Between queue comparisons pods only leave the pending state and jobs only become
        // pipelined, so a job with no pod left to place, or pipelined, stays so for the rest
        // of the cycle and is not looked at again.
        let done = |j: JobId| ssn.job_pipelined[j] > 0 || ssn.pending_pods(j).next().is_none();
        let mut start = self.placed[q].get();
        while start < list.len() && done(list[start]) {
            start += 1;
        }
        self.placed[q].set(start);
        list[start..].iter().copied().find(|&j| ssn.job_phase[j] != JobPhase::Pending && !done(j))
    }

    /// KAI's first question in its queue order: whether the queue stays within its deserved
    /// quota (in every quota resource) with its next job's request. Such a queue
    /// is served before one that would go over quota, so that the capacity a reclaim frees
    /// for a queue below its deserved quota is not handed back to the victim's queue, which
    /// would go over its own quota again to take it (no reclaim ping-pong).
    fn within_deserved_with_next_job(&self, ssn: &Session, q: QueueId) -> bool {
        let Some(job) = self.next_job(ssn, q) else { return false };
        self.with_need(ssn, job, |need| within_deserved_with(ssn, q, &need.request).is_ok())
    }

    /// What the job could free in its own queue: elastic pods of any job, and the running
    /// pods of lower-priority preemptible jobs (it may preempt both).
    fn freeable_for(&self, ssn: &Session, job: JobId) -> Res {
        let j = &ssn.snap.jobs[job];
        let mut free = Res::zero(ssn.snap.resources.len());
        for &other in &self.jobs_by_queue[j.queue] {
            let o = &ssn.snap.jobs[other];
            if other == job || ssn.job_running[other] == 0 {
                continue;
            }
            if o.preemptible && o.priority < j.priority {
                for (t, task) in o.tasks.iter().enumerate() {
                    free.add_times(&task.requests, i64::from(ssn.task_running[other][t]));
                }
            } else {
                add_elastic_running(ssn, other, &mut free);
            }
        }
        free
    }
}

/// The first resource where `have + req` exceeds a finite `cap`: (resource, would be, cap).
fn exceeding(req: &Res, have: &Res, cap: &Res) -> Option<(usize, i64, i64)> {
    (0..req.len())
        .find(|&r| req[r] > 0 && cap[r] != UNLIMITED && have[r].saturating_add(req[r]) > cap[r])
        .map(|r| (r, have[r] + req[r], cap[r]))
}

/// Whether queue `q` stays within its deserved quota in every quota resource
/// ([`Snapshot::quota_resources`]) with `req` added: KAI's question both in the queue order
/// and, for the reclaimer, in reclaim. One measure for both keeps a queue that reclaimed
/// on the strength of its deserved quota first in line for what it freed.
fn within_deserved_with<'s>(ssn: &Session<'s>, q: QueueId, req: &Res) -> Verdict<'s> {
    let (deserved, alloc) = (&ssn.snap.queues[q].deserved, &ssn.queue_alloc[q]);
    match (0..req.len()).find(|&r| ssn.snap.quota_resources[r] && alloc[r] + req[r] > deserved[r]) {
        Some(r) => {
            Err(Why::exceeding(ssn.snap, Rule::OverDeserved, Subject::Queue(q), (r, alloc[r] + req[r], deserved[r])))
        }
        None => Ok(()),
    }
}

/// Whether queue `q` stays within its fair share with `req` added; a refusal by a share
/// lowered to the capacity the queue's waiting work can use (`full`: the share before) says so.
fn within_fair_share_with<'s>(ssn: &Session<'s>, full: &TiSlice<QueueId, Res>, q: QueueId, req: &Res) -> Verdict<'s> {
    match exceeding(req, &ssn.queue_alloc[q], &ssn.fair_share[q]) {
        Some(e) => {
            let lowered = full.get(q).is_some_and(|f| f[e.0] > ssn.fair_share[q][e.0]);
            let rule = if lowered { Rule::UsableShare } else { Rule::FairShare };
            Err(Why::exceeding(ssn.snap, rule, Subject::Queue(q), e))
        }
        None => Ok(()),
    }
}

/// KAI's reclaim rule, judged on the sibling queues where the reclaimer's and the victim's
/// paths part and on the state left by the units already taken: the victim side must be
/// above its deserved quota in a quota resource the reclaimer needs (a queue at or below its
/// deserved quota is never a victim), and either above its fair share in a resource the
/// reclaimer needs — meaning above the larger of fair share and deserved, as fair shares
/// shrink when quotas are over-subscribed — or the reclaimer side must stay within its own
/// deserved quota with the request. Deserved quotas are compared in the quota resources
/// only, where a queue that declares none deserves 0; `pods` never counts.
fn reclaimable_from<'s>(ssn: &Session<'s>, mine: QueueId, theirs: QueueId, need: &Res) -> Verdict<'s> {
    let snap = ssn.snap;
    let wanted = |r: usize| r != snap.pods_resource && need[r] > 0;
    if !(0..need.len()).any(|r| wanted(r) && snap.quota_resources[r]) {
        return Err(Why::new(snap, Rule::OutsideQuota, Subject::Cluster));
    }
    let alloc = &ssn.queue_alloc[theirs];
    let deserved = &snap.queues[theirs].deserved;
    let above_deserved = (0..need.len()).any(|r| wanted(r) && snap.quota_resources[r] && alloc[r] > deserved[r]);
    if !above_deserved {
        return Err(Why::new(snap, Rule::NotAboveDeserved, Subject::Queue(theirs)));
    }
    let fair = &ssn.fair_share[theirs];
    let above_fair = (0..need.len()).any(|r| wanted(r) && alloc[r] > fair[r].max(deserved[r]));
    if above_fair {
        return Ok(());
    }
    within_deserved_with(ssn, mine, need)
}

/// Whether the victim side `theirs`, after losing the unit `v`, could not take back even
/// the first piece of it within its fair share, in some resource the unit uses. Allocation
/// serves gang minimums, then elastic pods, within fair share before any work beyond it, so
/// a unit whose first piece fits the victim's fair share again would start again ahead of
/// the reclaimer in the next cycle, and be reclaimed again (ping-pong). An elastic unit
/// comes back as itself (so its queue must be above its fair share before losing it); a
/// whole job comes back first as its gang minimum, counted here at its smallest.
fn cannot_take_back(ssn: &Session, theirs: QueueId, v: &Victim) -> bool {
    let (alloc, fair) = (&ssn.queue_alloc[theirs], &ssn.fair_share[theirs]);
    let back = |r: usize| if v.elastic { v.freed[r] } else { smallest_gang(ssn, v.job, r) };
    (0..alloc.len()).any(|r| r != ssn.snap.pods_resource && v.freed[r] > 0 && alloc[r] - v.freed[r] + back(r) > fair[r])
}

/// The least of resource `r` that any gang minimum of `job` can ask for: every task's own
/// minimum, and the rest of `minMember` as the job's smallest pods.
fn smallest_gang(ssn: &Session, job: JobId, r: usize) -> i64 {
    let j = &ssn.snap.jobs[job];
    let by_tasks: i64 = j.tasks.iter().map(|t| i64::from(t.min_available) * t.requests[r]).sum();
    let counted: u32 = j.tasks.iter().map(|t| t.min_available).sum();
    let smallest = j.tasks.iter().map(|t| t.requests[r]).min().unwrap_or(0);
    by_tasks + i64::from(j.min_member.saturating_sub(counted)) * smallest
}

impl Plugin for FairShare {
    fn name(&self) -> &'static str {
        "fairshare"
    }

    fn hooks(&self) -> Vec<crate::plugin::Hook> {
        use crate::plugin::Hook::*;
        vec![
            QueueOrder,
            Allocatable,
            Enqueueable,
            WithinFairShare,
            MayReclaim,
            WithinDeserved,
            MayEvict,
            MayReclaimFrom,
        ]
    }

    fn on_open(&mut self, ssn: &mut Session) {
        let mut by_queue = ti_vec![Vec::new(); ssn.snap.queues.len()];
        for (j, job) in ssn.snap.jobs.iter_enumerated() {
            by_queue[job.queue].push(j);
        }
        let snap = ssn.snap;
        let past = past_usage(snap, self.args.time_based);
        compute_shares(ssn, &by_queue, &self.args, past.as_deref());
        self.full_share = count_only_usable_capacity(ssn, &by_queue);
        self.past = match past {
            Some(parts) => parts
                .iter()
                .map(|u| (0..u.len()).filter(|&r| r != snap.pods_resource).map(|r| u[r]).fold(0.0, f64::max))
                .collect(),
            None => TiVec::new(),
        };
        let mut elastic = ti_vec![Res::zero(snap.resources.len()); snap.queues.len()];
        for (q, jobs) in by_queue.iter_enumerated() {
            let mut sum = Res::zero(snap.resources.len());
            for &j in jobs {
                add_elastic_running(ssn, j, &mut sum);
            }
            for a in snap.ancestry(q) {
                elastic[a].add(&sum);
            }
        }
        self.elastic_subtree = elastic;
        let mut waiting = ti_vec![Vec::new(); snap.queues.len()];
        for (q, jobs) in by_queue.iter_enumerated() {
            for &j in jobs.iter().filter(|&&j| ssn.pending_pods(j).next().is_some()) {
                for a in snap.ancestry(q) {
                    waiting[a].push(j);
                }
            }
        }
        for list in &mut waiting {
            list.sort_by(|&a, &b| {
                let (ja, jb) = (&snap.jobs[a], &snap.jobs[b]);
                jb.priority.cmp(&ja.priority).then(ja.created_at.cmp(&jb.created_at)).then(a.cmp(&b))
            });
        }
        self.placed = waiting.iter().map(|_| Cell::new(0)).collect();
        self.waiting = waiting;
        self.needs = RefCell::new(ti_vec![None; snap.jobs.len()]);
        self.reclaim_from = RefCell::default();
        self.jobs_by_queue = by_queue;
    }

    fn queue_order(&self, ssn: &Session, a: QueueId, b: QueueId) -> Ordering {
        // A queue that stays within its deserved quota with its next job comes first, also
        // when DRF orders the rest: this is what keeps reclaimed capacity from going back.
        let (wa, wb) = (self.within_deserved_with_next_job(ssn, a), self.within_deserved_with_next_job(ssn, b));
        let first = wb.cmp(&wa);
        if self.defer_queue_order {
            return first;
        }
        let (da, db) = (deprivation(ssn, a), deprivation(ssn, b));
        let order = first.then(da.0.cmp(&db.0)).then(da.1.total_cmp(&db.1));
        match (self.past.get(a), self.past.get(b)) {
            (Some(pa), Some(pb)) => order.then(pa.total_cmp(pb)),
            _ => order,
        }
    }

    fn allocatable<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res, bound: ShareBound) -> Verdict<'s> {
        let snap = ssn.snap;
        let j = &snap.jobs[job];
        for q in snap.ancestry(j.queue) {
            if let Some(e) = exceeding(req, &ssn.queue_alloc[q], &snap.queues[q].limit) {
                return Err(Why::exceeding(snap, Rule::Limit, Subject::Queue(q), e));
            }
            if !j.preemptible {
                let (alloc, deserved) = (&ssn.queue_alloc_np[q], &snap.queues[q].deserved);
                let covered = |r: usize| snap.queues[q].quota_covers(r) && req[r] > 0;
                if let Some(r) = (0..req.len()).find(|&r| covered(r) && alloc[r] + req[r] > deserved[r]) {
                    let e = (r, alloc[r] + req[r], deserved[r]);
                    return Err(Why::exceeding(snap, Rule::NonPreemptibleDeserved, Subject::Queue(q), e));
                }
            }
            if bound == ShareBound::FairShare {
                within_fair_share_with(ssn, &self.full_share, q, req)?;
            }
        }
        Ok(())
    }

    fn enqueueable<'s>(&self, ssn: &Session<'s>, job: JobId, reserved: Option<&TiSlice<QueueId, Res>>) -> Verdict<'s> {
        let snap = ssn.snap;
        let j = &snap.jobs[job];
        let min = ssn.gang_request(job);
        if let Some(r) = min.first_exceeding(&snap.capacity) {
            let e = (r, min[r], snap.capacity[r]);
            return Err(Why::exceeding(snap, Rule::ClusterCapacity, Subject::Cluster, e));
        }
        // What the path already holds against its limits; nothing when the gang is judged alone.
        let holding = reserved.map(|reserved| (reserved, self.freeable_for(ssn, job)));
        for q in snap.ancestry(j.queue) {
            let queue = &snap.queues[q];
            let used = match &holding {
                Some((reserved, freeable)) => {
                    // Above the job's own queue, elastic pods anywhere in the subtree are free too.
                    let below = self.elastic_subtree[q].minus(&self.elastic_subtree[j.queue]);
                    let mut used = ssn.queue_alloc[q].minus(freeable).minus(&below).plus(&reserved[q]);
                    used.clamp_non_negative();
                    used
                }
                None => Res::zero(min.len()),
            };
            if let Some(e) = exceeding(&min, &used, &queue.limit) {
                return Err(Why::exceeding(snap, Rule::LimitForGang, Subject::Queue(q), e));
            }
            if !j.preemptible {
                if let Some(r) = (0..min.len()).find(|&r| queue.quota_covers(r) && min[r] > queue.deserved[r]) {
                    let e = (r, min[r], queue.deserved[r]);
                    return Err(Why::exceeding(snap, Rule::NonPreemptibleGangDeserved, Subject::Queue(q), e));
                }
            }
        }
        Ok(())
    }

    fn within_fair_share<'s>(&self, ssn: &Session<'s>, queue: QueueId) -> Verdict<'s> {
        let (alloc, fair) = (&ssn.queue_alloc[queue], &ssn.fair_share[queue]);
        match alloc.first_exceeding(fair) {
            Some(r) => {
                Err(Why::exceeding(ssn.snap, Rule::OverFairShare, Subject::Queue(queue), (r, alloc[r], fair[r])))
            }
            None => Ok(()),
        }
    }

    /// A queue over its fair share in any resource reclaims nothing: it sits out allocation's
    /// fair-share passes, so what it reclaimed would go to whichever queue uses idle capacity
    /// first, the victim's maybe, and be reclaimed again next cycle (Volcano's reclaim skips
    /// such queues too). Nor may the job's own queue go over its fair share with `req` (its
    /// ancestors are checked once victims are chosen: their allocation then drops by what is
    /// reclaimed below them).
    fn may_reclaim<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res) -> Verdict<'s> {
        let q = ssn.snap.jobs[job].queue;
        self.within_fair_share(ssn, q)?;
        within_fair_share_with(ssn, &self.full_share, q, req)
    }

    fn within_deserved<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res) -> Verdict<'s> {
        within_deserved_with(ssn, ssn.snap.jobs[job].queue, req)
    }

    fn may_evict<'s>(&self, ssn: &Session<'s>, mode: EvictMode, preemptor: JobId, v: &Victim) -> Verdict<'s> {
        if mode == EvictMode::Preempt {
            return Ok(());
        }
        let snap = ssn.snap;
        let (pq, vq) = (snap.jobs[preemptor].queue, snap.jobs[v.job].queue);
        let Some((mine, theirs)) = snap.split(pq, vq) else {
            return Err(Why::new(snap, Rule::SameQueue, Subject::Queue(vq)));
        };
        self.with_need(ssn, preemptor, |need| {
            reclaimable_from(ssn, mine, theirs, &need.request)?;
            // A gang minimum that keeps its queue within its deserved quota is served first
            // next cycle (the queue order's first question); anything else takes only what
            // the victim cannot take back within its fair share.
            let on_own_quota = if need.elastic {
                Err(Why::new(snap, Rule::ElasticBeyondFairShare, Subject::Queue(theirs)))
            } else {
                within_deserved_with(ssn, mine, &need.request)
            };
            if on_own_quota.is_ok() || cannot_take_back(ssn, theirs, v) {
                Ok(())
            } else {
                on_own_quota
            }
        })?;
        let fence = snap
            .ancestry(vq)
            .take_while(|&q| q != snap.queues[theirs].parent.unwrap_or(ROOT))
            .find(|&q| !snap.queues[q].reclaimable);
        match fence {
            Some(q) if !(v.elastic && self.within_fair_share(ssn, vq).is_err()) => {
                Err(Why::new(snap, Rule::NotReclaimable, Subject::Queue(q)))
            }
            _ => Ok(()),
        }
    }

    fn may_reclaim_from<'s>(&self, ssn: &Session<'s>, preemptor: JobId, queue: QueueId) -> Verdict<'s> {
        let snap = ssn.snap;
        let Some((mine, theirs)) = snap.split(snap.jobs[preemptor].queue, queue) else {
            return Err(Why::new(snap, Rule::SameQueue, Subject::Queue(queue)));
        };
        let mut memo = self.reclaim_from.borrow_mut();
        let key = Some((ssn.version, preemptor));
        if memo.key != key {
            memo.key = key;
            memo.round += 1;
            memo.by_sibling.resize(snap.queues.len(), (0, Ok(())));
        }
        let round = memo.round;
        let (at, verdict) = &mut memo.by_sibling[theirs];
        if *at != round {
            *at = round;
            *verdict = self
                .with_need(ssn, preemptor, |need| reclaimable_from(ssn, mine, theirs, &need.request))
                .map_err(Blocker::from);
        }
        verdict.map_err(|b| b.why(snap))
    }

    fn victim_rank_precedence(&self) -> Option<u8> {
        Some(0)
    }

    fn victim_rank(&self, ssn: &Session, mode: EvictMode, v: &Victim) -> i64 {
        match mode {
            EvictMode::Preempt => 0,
            EvictMode::Reclaim => 2 - queue_state(ssn, ssn.snap.jobs[v.job].queue) as i64,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use drover_api::{ResourceList, GPU, PODS};

    use super::*;
    use crate::session::{EvictReason, Statement};
    use crate::snapshot::{self, JobInput, JobPhase, PodPhaseInput};
    use crate::test_cluster::{job, node, queue};

    fn gpus(n: i64) -> ResourceList {
        ResourceList(BTreeMap::from([(GPU.to_string(), n), (PODS.to_string(), 110)]))
    }

    /// Department `d2` (deserved 4 GPUs) runs 6 in its leaves `b` and `c`; leaf `a` of `d1`
    /// waits for 2. Both of `d2`'s leaves are judged by `d2`, once per session state: once
    /// two of `b`'s pods are evicted, `d2` is at its deserved quota and neither may lose more.
    #[test]
    fn reclaim_from_a_sibling_is_judged_again_once_the_session_changes() {
        let queues = [
            queue("d1", None, gpus(4)),
            queue("d2", None, gpus(4)),
            queue("a", Some("d1"), gpus(4)),
            queue("b", Some("d2"), gpus(2)),
            queue("c", Some("d2"), gpus(2)),
        ];
        let bound = |name: &str, queue: &str| job(name, queue, gpus(1), vec![PodPhaseInput::Bound("n".into()); 3]);
        let waiting = JobInput {
            min_member: 2,
            phase: JobPhase::Inqueue,
            ..job("x", "a", gpus(1), vec![PodPhaseInput::Pending; 2])
        };
        let jobs = [waiting, bound("y", "b"), bound("z", "c")];
        let nodes = [node("n", gpus(6), BTreeMap::new())];
        let snap = snapshot::build_with_topologies(&nodes, &queues, &[], &jobs).expect("a valid cluster");
        let id = |name: &str| snap.queues.keys().find(|&q| snap.queues[q].name == name).expect("queue");
        let (x, y) = (JobId::from(0), JobId::from(1));
        let mut ssn = Session::open(&snap);
        let mut plugin = FairShare::new(FairShareArgs::default(), false);
        plugin.on_open(&mut ssn);
        for leaf in ["b", "c"] {
            assert!(plugin.may_reclaim_from(&ssn, x, id(leaf)).is_ok(), "{leaf}: d2 holds 6 GPUs above its 4");
        }
        let mut st = Statement::new();
        for pod in ssn.running_pods(y).take(2).collect::<Vec<_>>() {
            ssn.evict(&mut st, pod, EvictReason::Reclaim, x);
        }
        for leaf in ["b", "c"] {
            let why = plugin.may_reclaim_from(&ssn, x, id(leaf)).expect_err("d2 is at its deserved quota");
            assert_eq!((why.rule, why.subject), (Rule::NotAboveDeserved, Subject::Queue(id("d2"))), "{leaf}");
        }
    }
}
