//! The actions of a scheduling cycle, from least to most disruptive, and the helpers they
//! share: choosing the most deprived queue, placing a gang as one statement, and forming and
//! trying eviction victims.

pub mod allocate;
pub mod backfill;
pub mod claim;
pub mod consolidate;
mod domain_cost;
mod domain_room;
pub mod enqueue;
pub mod forbidden;
pub mod preempt;
mod prune;
mod queue_choice;
pub mod reclaim;
pub mod resize;
pub mod victims;

pub use victims::{victim_units, VictimOrder, VictimPool};

use crate::framework::Framework;
use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::plugin::{EvictMode, ShareBound, Victim};
use domain_cost::Estimates;
use domain_room::{cluster_could_hold, DomainRoom};
use prune::spare_unneeded;
use queue_choice::QueueChoice;
use std::borrow::Cow;
use std::rc::Rc;

use crate::node_index::Class;
use crate::placement::topology::{required_domains, Placing, RequiredDomains};
use crate::placement::{Avail, Feasibility, Placer};
use crate::res::Res;
use crate::reservation::Reservations;
use crate::session::{EvictReason, PodState, Session, Statement};
use crate::snapshot::{JobId, JobPhase, Level, NodeId, PodId, QueueId, QueueingStrategy};

/// Everything an action works with.
pub struct Ctx<'a, 's> {
    /// The cycle's state.
    pub ssn: &'a mut Session<'s>,
    /// The plugins.
    pub fw: &'a Framework,
    /// The node finder.
    pub placer: &'a mut Placer,
    /// Capacity set aside for gangs that cannot start yet.
    pub reservations: &'a mut Reservations,
}

/// Whether a job is admitted and below its gang minimum with pods to place.
pub fn starving(ctx: &Ctx, job: JobId) -> bool {
    let ssn = &ctx.ssn;
    ssn.job_phase[job] != JobPhase::Pending
        && ssn.job_pipelined[job] == 0
        && !ctx.fw.job_ready(ssn, job)
        && ssn.pending_pods(job).next().is_some()
        && ssn.min_reachable(job)
}

/// The starving jobs of each leaf queue that may evict for their gang, in job order: every
/// starving job, except that in a `StrictFIFO` queue only the first waiting job of each class
/// (GPU, CPU-only) may, as nothing passes it there.
pub fn evicting_jobs(ctx: &Ctx) -> TiVec<QueueId, Vec<JobId>> {
    let firsts = first_waiting(ctx);
    jobs_by_queue(ctx, |j| starving(ctx, j) && in_turn(ctx, &firsts, j))
}

/// A job with pending elastic pods: its minimum runs, or is pipelined (then its elastic pods
/// may be served in the same cycle as its minimum, and in the cycles its victims take to
/// terminate).
pub fn elastic_waiting(ctx: &Ctx, job: JobId) -> bool {
    let ssn = &ctx.ssn;
    let ready = match ssn.job_pipelined[job] {
        0 => ctx.fw.job_ready(ssn, job),
        _ => ssn.minimum_placed(job),
    };
    ready && ssn.pending_pods(job).next().is_some()
}

/// Serves a job's elastic pods: its whole elastic need (see [`elastic_request`]) by `try_pods`
/// in one go (`whole` true); when that fails, pod by pod, up to as many, while `try_pods`
/// succeeds. Reclaim and claims both grow a job this way.
pub fn serve_elastic_need(ctx: &mut Ctx, job: JobId, try_pods: &mut dyn FnMut(&mut Ctx, &[PodId], bool) -> bool) {
    let request = elastic_request(ctx, job);
    if request.len() > 1 && try_pods(ctx, &request, true) {
        return;
    }
    for _ in 0..request.len() {
        let Some(pod) = ctx.ssn.pending_pods(job).next() else { break };
        if !try_pods(ctx, &[pod], false) {
            break;
        }
    }
}

/// A job's whole elastic need as one request: the longest run of its pending pods, in order,
/// that the plugins allow its queue within fair share (and every other bound), or else its
/// first pending pod alone (to be refused with a reason). Reclaim and claims ask for it in
/// one attempt, so that a queue gets what it is owed in one cycle, not a pod per cycle; the
/// fair share bounds the reclaimer as the victims' fair shares bound what they lose.
pub fn elastic_request(ctx: &Ctx, job: JobId) -> Vec<PodId> {
    let mut pods: Vec<PodId> = ctx.ssn.pending_pods(job).collect();
    let mut sum = Res::zero(ctx.ssn.snap.resources.len());
    let totals: Vec<Res> = pods
        .iter()
        .map(|&p| {
            sum.add(ctx.ssn.requests(p));
            sum.clone()
        })
        .collect();
    let allowed = totals.partition_point(|t| ctx.fw.allocatable(ctx.ssn, job, t, ShareBound::FairShare).is_ok());
    pods.truncate(allowed.max(1));
    pods
}

/// The jobs of each leaf queue whose elastic pods may evict, in job order, by the same
/// `StrictFIFO` rule as [`evicting_jobs`]: a later job's elastic pods could not use what is
/// freed there (nothing passes the waiting job), and the victim would take it back.
pub fn elastic_evicting_jobs(ctx: &Ctx) -> TiVec<QueueId, Vec<JobId>> {
    let firsts = first_waiting(ctx);
    jobs_by_queue(ctx, |j| elastic_waiting(ctx, j) && in_turn(ctx, &firsts, j))
}

/// Per leaf queue, its first admitted job with a pending pod in job order, per class (GPU,
/// CPU-only): in a `StrictFIFO` queue only these jobs' turn has come.
fn first_waiting(ctx: &Ctx) -> TiVec<QueueId, [Option<JobId>; 2]> {
    let waiting =
        jobs_by_queue(ctx, |j| ctx.ssn.job_phase[j] != JobPhase::Pending && ctx.ssn.pending_pods(j).next().is_some());
    waiting
        .iter()
        .map(|jobs| {
            let mut firsts = [None; 2];
            for &j in jobs {
                firsts[class(ctx, j)].get_or_insert(j);
            }
            firsts
        })
        .collect()
}

/// Whether a job's turn has come in its queue: always, except in a `StrictFIFO` queue
/// (see [`first_waiting`]).
fn in_turn(ctx: &Ctx, firsts: &TiSlice<QueueId, [Option<JobId>; 2]>, job: JobId) -> bool {
    let q = ctx.ssn.snap.jobs[job].queue;
    !strict(ctx, q) || firsts[q][class(ctx, job)] == Some(job)
}

/// Serves the jobs listed per leaf queue, most deprived `eligible` queue first, each job
/// once. Jobs that no longer `want` to be served are skipped for good: the callers only
/// pipeline and evict, so a job that stopped wanting room (pipelined, or lost its minimum)
/// does not want it again within the action.
pub fn serve_in_queue_order(
    ctx: &mut Ctx,
    by_queue: &TiSlice<QueueId, Vec<JobId>>,
    wants: &dyn Fn(&Ctx, JobId) -> bool,
    eligible: &dyn Fn(&Ctx, QueueId) -> bool,
    serve: &mut dyn FnMut(&mut Ctx, JobId),
) {
    let mut cursor = ti_vec![0usize; by_queue.len()];
    let head = |c: &Ctx, cursor: &mut TiVec<QueueId, usize>, q: QueueId| {
        while by_queue[q].get(cursor[q]).is_some_and(|&j| !wants(c, j)) {
            cursor[q] += 1;
        }
        by_queue[q].get(cursor[q]).copied()
    };
    let mut heads: TiVec<QueueId, Option<JobId>> = by_queue.keys().map(|q| head(ctx, &mut cursor, q)).collect();
    let mut choice = QueueChoice::new(ctx);
    // Whether a job wants room depends on its own pods only, so a queue's head changes only
    // when the session changes its jobs or it is served.
    let mut seen = ctx.ssn.changed_queues.len();
    let mut touched = ti_vec![false; by_queue.len()];
    while let Some(q) = choice.next(ctx, &|q| heads[q].is_some() && eligible(ctx, q)) {
        let job = heads[q].expect("selected queue has a job to serve");
        cursor[q] += 1;
        serve(ctx, job);
        let mut changed: Vec<QueueId> = vec![q];
        touched[q] = true;
        for &c in &ctx.ssn.changed_queues[seen..] {
            if !std::mem::replace(&mut touched[c], true) {
                changed.push(c);
            }
        }
        seen = ctx.ssn.changed_queues.len();
        for c in changed {
            touched[c] = false;
            let now = head(ctx, &mut cursor, c);
            if std::mem::replace(&mut heads[c], now) != now || c == q {
                choice.changed(ctx.ssn.snap, c);
            }
        }
    }
}

/// Whether the queue starts its jobs strictly in order.
pub fn strict(ctx: &Ctx, q: QueueId) -> bool {
    ctx.ssn.snap.queues[q].strategy == QueueingStrategy::StrictFifo
}

/// 0 for GPU jobs, 1 for CPU-only jobs: StrictFIFO holds each class separately.
pub fn class(ctx: &Ctx, job: JobId) -> usize {
    usize::from(!ctx.ssn.snap.jobs[job].tasks.iter().any(|t| t.gpu))
}

/// Jobs of each leaf queue matching `keep`, in the framework's job order.
pub fn jobs_by_queue(ctx: &Ctx, keep: impl Fn(JobId) -> bool) -> TiVec<QueueId, Vec<JobId>> {
    let mut by_queue = ti_vec![Vec::new(); ctx.ssn.snap.queues.len()];
    for j in ctx.ssn.snap.jobs.keys() {
        if keep(j) {
            by_queue[ctx.ssn.snap.jobs[j].queue].push(j);
        }
    }
    for list in &mut by_queue {
        list.sort_by(|&a, &b| ctx.fw.job_order(ctx.ssn, a, b));
    }
    by_queue
}

/// Places every pod of `pods` (in task order) or none. On failure, returns why.
///
/// A gang minimum is a count, not a list: when a pod of one job cannot be placed and its
/// task's own minimum does not need it, another pending pod of the same job stands in for it
/// (in task order; see [`StandIns`]), and the rest of the failed task is skipped, its pods
/// being alike.
pub fn place_all(ctx: &mut Ctx, pods: &[PodId], avail: Avail) -> Result<Statement, String> {
    place_or_explain(ctx, pods, avail, true).map_err(|why| why.unwrap_or_default())
}

/// Like [`place_all`], without working out why when it fails (for trial placements).
pub fn try_place_all(ctx: &mut Ctx, pods: &[PodId], avail: Avail) -> Option<Statement> {
    place_or_explain(ctx, pods, avail, false).ok()
}

fn place_or_explain(ctx: &mut Ctx, pods: &[PodId], avail: Avail, explain: bool) -> Result<Statement, Option<String>> {
    if let Some(result) = place_in_topology(ctx, pods, avail, explain) {
        return result;
    }
    let mut st = Statement::new();
    let mut ordered = pods.to_vec();
    ordered.sort_by(|&a, &b| ctx.fw.task_order(ctx.ssn, a, b));
    let mut stand_ins = StandIns::new(ctx.ssn, &ordered);
    let mut placed = 0;
    let mut first_miss = None;
    for &pod in &ordered {
        if stand_ins.try_place(ctx, &mut st, pod, avail) {
            placed += 1;
            continue;
        }
        first_miss.get_or_insert(pod);
        if stand_ins.replace(ctx, &mut st, pod, avail) {
            placed += 1;
            continue;
        }
        let why = explain.then(|| {
            let hold = match avail {
                Avail::Idle(h) => h,
                Avail::Future(_) | Avail::Releasing(_) => None,
            };
            let nodes = ctx.placer.explain(ctx.ssn, ctx.fw, first_miss.unwrap_or(pod), hold);
            if ordered.len() > 1 {
                format!("gang of {} pods: only {placed} fit; {nodes}", ordered.len())
            } else {
                nodes
            }
        });
        ctx.ssn.discard(st);
        return Err(why);
    }
    Ok(st)
}

/// Places the pods of one job by its topology groups (see [`crate::placement::topology`]),
/// when a topology applies to it; `None` when none does. A job that asks for no topology
/// packs by the default topology only into idle capacity, and where that finds no room (and
/// for evictions) it is placed, or told why not, as any job.
fn place_in_topology(
    ctx: &mut Ctx,
    pods: &[PodId],
    avail: Avail,
    explain: bool,
) -> Option<Result<Statement, Option<String>>> {
    let job = ctx.ssn.snap.pods[*pods.first()?].job;
    if pods.iter().any(|&p| ctx.ssn.snap.pods[p].job != job) {
        return None;
    }
    let group = ctx.placer.groups(ctx.ssn.snap, ctx.fw, job)?;
    if !group.asks_for_placement() && !matches!(avail, Avail::Idle(_)) {
        return None;
    }
    let mut placing = Placing::new(ctx.ssn, ctx.fw, ctx.placer, pods, avail);
    match placing.place(&group) {
        Ok(st) => Some(Ok(st)),
        // Packing found no room: the flat search (with stand-ins) tries and explains.
        Err(_) if !group.asks_for_placement() => None,
        Err(miss) => Some(Err(explain.then(|| placing.explain(&miss)))),
    }
}

/// Places `pod` on the node the placer finds, as an allocation or a pipelined claim.
fn place_one(ctx: &mut Ctx, st: &mut Statement, pod: PodId, avail: Avail) -> bool {
    let Some(node) = ctx.placer.find(ctx.ssn, ctx.fw, pod, avail) else { return false };
    match avail {
        Avail::Idle(_) => ctx.ssn.allocate(st, pod, node),
        Avail::Future(_) | Avail::Releasing(_) => ctx.ssn.pipeline(st, pod, node),
    }
    true
}

/// The other pending pods of a job that may stand in for pods of it that cannot be placed.
/// A stand-in never asks for more than the pod it replaces, so every quota check made for
/// the requested pods still holds; a pod its task's own minimum needs has no stand-in; once a
/// pod of a task fails, so would the task's other pods (same requests and constraints), and
/// the task is skipped. Requests spanning several jobs get no stand-ins.
struct StandIns {
    /// The job, when every requested pod belongs to it.
    job: Option<JobId>,
    /// Pending pods of the job outside the request, in task order; taken ones become `None`.
    spare: Vec<Option<PodId>>,
    /// Per task: running pods before this placement, pods placed by it, and whether a pod of
    /// it found no node.
    running: Vec<u32>,
    placed: Vec<u32>,
    failed: Vec<bool>,
}

impl StandIns {
    fn new(ssn: &Session, pods: &[PodId]) -> StandIns {
        let job =
            pods.first().map(|&p| ssn.snap.pods[p].job).filter(|&j| pods.iter().all(|&p| ssn.snap.pods[p].job == j));
        let Some(j) = job else {
            return StandIns { job, spare: Vec::new(), running: Vec::new(), placed: Vec::new(), failed: Vec::new() };
        };
        let tasks = ssn.snap.jobs[j].tasks.len();
        StandIns {
            job,
            spare: ssn.pending_pods(j).filter(|p| !pods.contains(p)).map(Some).collect(),
            running: ssn.task_running[j].clone(),
            placed: vec![0; tasks],
            failed: vec![false; tasks],
        }
    }

    /// Places `pod` unless its task already failed; records the outcome.
    fn try_place(&mut self, ctx: &mut Ctx, st: &mut Statement, pod: PodId, avail: Avail) -> bool {
        let task = ctx.ssn.snap.pods[pod].task;
        if self.job.is_some() && self.failed[task] {
            return false;
        }
        let ok = place_one(ctx, st, pod, avail);
        if self.job.is_some() {
            if ok {
                self.placed[task] += 1;
            } else {
                self.failed[task] = true;
            }
        }
        ok
    }

    /// Places a stand-in for `pod`, which found no node; false when none may or can.
    fn replace(&mut self, ctx: &mut Ctx, st: &mut Statement, pod: PodId, avail: Avail) -> bool {
        let Some(job) = self.job else { return false };
        let task = ctx.ssn.snap.pods[pod].task;
        if self.running[task] + self.placed[task] < ctx.ssn.snap.jobs[job].tasks[task].min_available {
            return false;
        }
        let req = ctx.ssn.requests(pod);
        for i in 0..self.spare.len() {
            let Some(other) = self.spare[i] else { continue };
            let other_task = ctx.ssn.snap.pods[other].task;
            if self.failed[other_task] || !ctx.ssn.requests(other).fits_in(req) {
                continue;
            }
            if self.try_place(ctx, st, other, avail) {
                self.spare[i] = None;
                return true;
            }
        }
        false
    }
}

/// Adds `why` to the job's reason for waiting (after what an earlier action said).
pub fn append_reason(ctx: &mut Ctx, job: JobId, why: &str) {
    // The first refusal keeps giving the reason when the reason keeps its words.
    let (joined, by) = match ctx.ssn.reasons[job].as_deref() {
        Some(prior) if !prior.is_empty() && !prior.contains(why) => {
            (format!("{prior}; {why}"), ctx.ssn.blocked_by[job])
        }
        _ => (why.to_string(), None),
    };
    ctx.ssn.set_refusal(job, joined, by);
}

/// Whether `pods` (a gang, or one elastic pod) already fit idle capacity within the action's
/// bound: then nothing is evicted for them (the next allocation places them).
pub fn fits_without_eviction(ctx: &mut Ctx, pods: &[PodId], fits: &dyn Fn(&Ctx) -> bool) -> bool {
    if !fits(ctx) {
        return false;
    }
    match try_place_all(ctx, pods, Avail::Idle(None)) {
        Some(st) => {
            ctx.ssn.discard(st);
            true
        }
        None => false,
    }
}

/// A request of a queue that found no room in an action: later requests of the queue at
/// least as large are not tried again, unless they may spread where it could not (it had to
/// fit inside one domain of a level they do not require).
#[derive(Clone)]
pub struct NoRoom {
    need: Res,
    required: Option<(usize, Level)>,
}

impl NoRoom {
    /// `job`'s request of `need` found no room.
    pub fn new(ctx: &mut Ctx, job: JobId, need: Res) -> NoRoom {
        NoRoom { need, required: required_level(ctx, job) }
    }

    /// Whether `job`'s request of `need` would find none either.
    pub fn covers(&self, ctx: &mut Ctx, job: JobId, need: &Res) -> bool {
        self.need.fits_in(need) && (self.required.is_none() || self.required == required_level(ctx, job))
    }
}

/// The topology level a job's gang must fit inside one domain of, if any.
fn required_level(ctx: &mut Ctx, job: JobId) -> Option<(usize, Level)> {
    ctx.placer.groups(ctx.ssn.snap, ctx.fw, job).and_then(|g| g.required_level())
}

/// Why evicting the units that may be evicted (given) would not make room, for the reason.
pub type Failure<'f> = dyn Fn(&mut Ctx, &[&Victim]) -> String + 'f;

/// Evicts units in `order` that make room for `pods` of `job` (its gang, or elastic pods),
/// and pipelines them; or, when nothing works, adds `failure` (given every unit of the order
/// that may be evicted), if any, to the job's reason. On success, returns where its
/// evictions start in the session's decisions.
pub fn make_room(
    ctx: &mut Ctx,
    job: JobId,
    pods: &[PodId],
    mut order: VictimOrder,
    mode: EvictMode,
    fits: &dyn Fn(&Ctx) -> bool,
    failure: Option<&Failure>,
) -> Option<usize> {
    match evict_for(ctx, job, pods, &mut order, (mode, true), fits) {
        Some(st) => {
            let since = ctx.ssn.decisions.evictions.len();
            let evicted_now = st.len() > pods.len();
            ctx.ssn.commit(st);
            let evicted = if evicted_now { ctx.ssn.evicted_for[job] } else { 0 };
            ctx.ssn.set_reason(job, waiting_for_victims(mode, evicted));
            Some(since)
        }
        None => {
            if let Some(failure) = failure {
                let candidates: Vec<&Victim> =
                    order.units().filter(|v| ctx.fw.may_evict(ctx.ssn, mode, job, v).is_ok()).collect();
                let why = failure(ctx, &candidates);
                append_reason(ctx, job, &why);
            }
            None
        }
    }
}

/// Why a job for which `evicted` pods were evicted by `mode` this cycle (none: its pods were
/// pipelined onto capacity already being freed) waits.
fn waiting_for_victims(mode: EvictMode, evicted: u32) -> String {
    let what = match mode {
        EvictMode::Preempt => "preempted",
        EvictMode::Reclaim => "reclaimed",
    };
    if evicted == 0 {
        "waiting for evicted pods to terminate on the nodes it will use".to_string()
    } else {
        format!("waiting for {evicted} {what} pod(s) to terminate")
    }
}

/// Why evicting every candidate would not seat the gang: the first resource the gang needs
/// more of than the idle and freeable capacity of the nodes its pods may use, or else that
/// the capacity is split across nodes so that no placement fits.
pub fn shortfall(ctx: &mut Ctx, gang: &[PodId], candidates: &[&Victim], action: &str) -> String {
    let snap = ctx.ssn.snap;
    let feasible = gang_feasibility(ctx, gang);
    let usable = |n: NodeId| feasible.iter().any(|f| f.ok(n));
    let need = ctx.ssn.sum_requests(gang);
    // What every node will have, less what the nodes the gang may not use will have (none,
    // when some pod of it may use every node).
    let mut have = ctx.ssn.future_total.clone();
    if !feasible.iter().any(|f| f.nodes.len() == snap.nodes.len()) {
        for n in snap.nodes.keys().filter(|&n| !usable(n)) {
            for r in 0..need.len() {
                have[r] -= ctx.ssn.future_of(n, r);
            }
        }
    }
    for v in candidates {
        for &p in &v.pods {
            if ctx.ssn.pod_state[p].running_on().is_some_and(usable) {
                have.add(ctx.ssn.requests(p));
            }
        }
    }
    match (0..need.len()).find(|&r| need[r] > have[r].max(0)) {
        Some(r) => format!(
            "{action}: idle and evictable capacity on nodes the gang can use gives {} of {} {}",
            snap.amount(r, have[r].max(0)),
            snap.amount(r, need[r]),
            snap.resources[r]
        ),
        None => format!(
            "{action}: enough could be freed in total, but not on nodes where the gang's {} pod(s) fit together",
            gang.len()
        ),
    }
}

/// The feasibility of each distinct task constraints of `gang` and of the pending pods that
/// may stand in for its pods (see [`StandIns`]): a node is usable by the gang when one of
/// them allows it.
fn gang_feasibility(ctx: &mut Ctx, gang: &[PodId]) -> Vec<Rc<Feasibility>> {
    let ssn = &ctx.ssn;
    let stand_ins: Vec<PodId> = match gang.first().map(|&p| ssn.snap.pods[p].job) {
        Some(job) => ssn.snap.jobs[job]
            .tasks
            .iter()
            .filter_map(|t| t.pods.iter().copied().find(|&p| ssn.pod_state[p] == PodState::Pending))
            .filter(|&p| !gang.contains(&p) && gang.iter().any(|&g| ssn.requests(p).fits_in(ssn.requests(g))))
            .collect(),
        None => Vec::new(),
    };
    let mut out: Vec<Rc<Feasibility>> = Vec::new();
    for &p in gang.iter().chain(&stand_ins) {
        let f = ctx.placer.feasibility(ctx.ssn, ctx.fw, p);
        if !out.iter().any(|o| Rc::ptr_eq(o, &f)) {
            out.push(f);
        }
    }
    out
}

/// The nodes any pod of `gang` may use (sorted).
fn usable_nodes(ctx: &mut Ctx, gang: &[PodId]) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = gang_feasibility(ctx, gang).iter().flat_map(|f| f.nodes.iter().copied()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// At most this many domains are searched for victims for one gang that requires a level.
const MAX_VICTIM_DOMAINS: usize = 8;

/// Tries to make room for `gang` (pods of `job`) by evicting units in `order`, then
/// pipelines it onto the freed capacity. Only victims on nodes some pod of the gang may use
/// count. A gang that requires a topology level looks for victims inside one domain of that
/// level at a time (the one its running pods pin it to, else those with the most capacity
/// idle and evictable, at most [`MAX_VICTIM_DOMAINS`]), and evicts in the domain where that
/// costs least: the lowest priority taken, then the fewest gangs broken, then the least
/// freed. Returns the statement holding evictions and pipelined pods, or `None` when no set
/// of units helps. `judged`: whether only units the rules let `mode` evict count (a search
/// that ignores them tells a waiting gang which victims the rules forbid; see [`forbidden`]).
fn evict_for(
    ctx: &mut Ctx,
    job: JobId,
    gang: &[PodId],
    order: &mut VictimOrder,
    (mode, judged): (EvictMode, bool),
    fits: &dyn Fn(&Ctx) -> bool,
) -> Option<Statement> {
    let feasible = gang_feasibility(ctx, gang);
    let usable = |n: NodeId| feasible.iter().any(|f| f.ok(n));
    let group = ctx.placer.groups(ctx.ssn.snap, ctx.fw, job);
    let Some(required) = group.and_then(|g| required_domains(ctx.ssn, &g)) else {
        let all = Within { usable: &usable, domain: None, give_up_at: None, judged };
        return evict_within(ctx, job, gang, order, mode, fits, all).map(|(st, ..)| st);
    };
    let ranked = victim_domains(ctx, gang, order, &required);
    let topo = &ctx.ssn.snap.topologies[required.topology];
    let in_domain = |i: usize, n: NodeId| topo.domain_at(required.level, n) == Some(ranked[i].0) && usable(n);
    // Domains are searched in the order of what making room there is estimated to cost,
    // counted without evicting; a domain whose estimate costs more than the best set found
    // so far is not searched. Domains are compared by the victims their search takes, ties
    // going to the domain ranked first; only the chosen one's set is pruned (pruning tries
    // the gang once per victim). A search stops once its victims cost as much as the best
    // domain's (more, for a domain ranked before it).
    let key = key_resource(ctx.ssn, gang);
    let rooms: Vec<DomainRoom> = ranked
        .iter()
        .enumerate()
        .map(|(i, (_, nodes))| DomainRoom::new(ctx.ssn, gang, nodes, &|n| in_domain(i, n)))
        .collect();
    let walks = ranked
        .iter()
        .zip(&rooms)
        .map(|(&(d, ref nodes), room)| {
            (order.within(ctx.ssn, (required.topology, required.level, d), nodes), room.clone())
        })
        .collect();
    let mut estimates = Estimates::new(ctx, (job, (mode, judged), key), walks, &in_domain);
    let mut best: Option<(EvictionCost, usize, Vec<&Victim>)> = None;
    while let Some(i) = estimates.next(ctx, best.as_ref().map(|&(c, b, _)| (c, b))) {
        let (d, ref nodes) = ranked[i];
        let inside = |n: NodeId| in_domain(i, n);
        let give_up_at = best.as_ref().map(|&(c, b, _)| if i < b { (c.0, c.1, c.2 + 1) } else { c });
        let domain = Within { usable: &inside, domain: Some((nodes, rooms[i].clone())), give_up_at, judged };
        let mut within = order.within(ctx.ssn, (required.topology, required.level, d), nodes);
        let found = evict_within(ctx, job, gang, &mut within, mode, fits, domain);
        if let Some((st, cost, victims)) = found {
            ctx.ssn.discard(st);
            if best.as_ref().is_none_or(|&(c, b, _)| (cost, i) < (c, b)) {
                best = Some((cost, i, victims));
            }
        }
    }
    let (_, i, victims) = best?;
    let inside = |n: NodeId| in_domain(i, n);
    let domain = (&ranked[i].1[..], rooms[i].clone(), &inside as &dyn Fn(NodeId) -> bool);
    spare_unneeded(ctx, gang, victims, (evict_reason(mode), job), fits, Some(domain)).map(|(st, _)| st)
}

/// Why pods evicted by `mode` go.
fn evict_reason(mode: EvictMode) -> EvictReason {
    match mode {
        EvictMode::Preempt => EvictReason::Preempt,
        EvictMode::Reclaim => EvictReason::Reclaim,
    }
}

/// What evicting a victim set costs, compared lexicographically: the highest priority taken,
/// the whole jobs (gangs) broken, the key resource freed. Each part only grows as victims are
/// added, so a set costing at least a bound already can only end above it.
type EvictionCost = (i32, usize, i64);

/// The cost of a victim set with one more victim (`key`: the resource freed that counts).
fn with_victim(cost: EvictionCost, snap: &crate::snapshot::Snapshot, v: &Victim, key: usize) -> EvictionCost {
    (cost.0.max(snap.jobs[v.job].priority), cost.1 + usize::from(!v.elastic), cost.2 + v.freed[key])
}

/// The cost of nothing evicted.
const NO_COST: EvictionCost = (i32::MIN, 0, 0);

/// The domains worth searching for victims for `gang`, most capacity being freed and held by
/// the order's units (in the gang's key resource) first, those that could hold it at all, at
/// most [`MAX_VICTIM_DOMAINS`]. Per-domain sums rank them, whatever the gang's node
/// constraints (the search itself keeps to the nodes it may use).
fn victim_domains(
    ctx: &Ctx,
    gang: &[PodId],
    order: &VictimOrder,
    required: &RequiredDomains,
) -> Vec<(usize, Vec<NodeId>)> {
    let ssn = &ctx.ssn;
    let (class, key, need) = key_need(ssn, gang);
    let (t, level) = (required.topology, required.level);
    let held = order.held_per_domain(ssn, t, level);
    let at_nodes = level == ssn.snap.topologies[t].node_level();
    let future = |d: usize| match at_nodes {
        true => ssn.future_of(NodeId::from(d), key).max(0),
        false => ssn.domains.future(t, level, d, class),
    };
    let mut ranked: Vec<(std::cmp::Reverse<i64>, usize)> = required
        .domains
        .iter()
        .map(|&d| (std::cmp::Reverse(future(d) + held[d][class as usize]), d))
        .filter(|&(f, _)| f.0 >= need)
        .collect();
    // The first few of hundreds of domains, in order, without sorting the rest.
    if ranked.len() > MAX_VICTIM_DOMAINS {
        ranked.select_nth_unstable(MAX_VICTIM_DOMAINS);
        ranked.truncate(MAX_VICTIM_DOMAINS);
    }
    ranked.sort_unstable();
    ranked.into_iter().map(|(_, d)| (d, required.nodes(ssn.snap, d))).collect()
}

/// A gang's key resource, its class, and how much of it the gang asks in all.
fn key_need(ssn: &Session, gang: &[PodId]) -> (Class, usize, i64) {
    let key = key_resource(ssn, gang);
    let class = if Some(key) == ssn.snap.gpu { Class::Gpu } else { Class::Cpu };
    (class, key, gang.iter().map(|&p| ssn.requests(p)[key]).sum())
}

/// The resource a gang's placement is keyed by: GPUs when it asks for any, else CPU.
fn key_resource(ssn: &Session, gang: &[PodId]) -> usize {
    let gpu = gang.iter().any(|&p| ssn.snap.jobs[ssn.snap.pods[p].job].tasks[ssn.snap.pods[p].task].gpu);
    crate::placement::key_resource(ssn.snap, gpu)
}

/// Where a victim search looks, and when it gives up.
struct Within<'w, 's> {
    /// The nodes whose pods count as victims.
    usable: &'w dyn Fn(NodeId) -> bool,
    /// The domain those nodes form, when the gang must fit inside one, and its room for the
    /// gang before anything is evicted.
    domain: Option<(&'w [NodeId], DomainRoom<'w, 's>)>,
    /// A cost at which the search gives up (another domain's victims cost no more).
    give_up_at: Option<EvictionCost>,
    /// Whether only units the rules let the mode evict count.
    judged: bool,
}

/// Whether a victim search for `job` may take `v`: the rules decide, unless the search is not
/// `judged` (it asks which victims the rules forbid).
fn may_take(ctx: &Ctx, (mode, judged): (EvictMode, bool), job: JobId, v: &Victim) -> bool {
    !judged || ctx.fw.may_evict(ctx.ssn, mode, job, v).is_ok()
}

/// Evicts units in `order` on nodes `within` allows until the gang fits, and returns the
/// statement, what it costs and the units taken. A unit's queue is ranked again after each
/// eviction from it (in reclaim, a queue that drops below its fair share stops coming first).
/// Outside a domain, the units that turn out unnecessary are spared; inside one, the set is
/// returned whole, to be compared with other domains' (the chosen one is pruned after), and
/// the gang is tried only once the domain could hold it by count (see [`DomainRoom`]).
fn evict_within<'p>(
    ctx: &mut Ctx,
    job: JobId,
    gang: &[PodId],
    order: &mut VictimOrder<'p>,
    mode: EvictMode,
    fits: &dyn Fn(&Ctx) -> bool,
    within: Within,
) -> Option<(Statement, EvictionCost, Vec<&'p Victim>)> {
    let usable = within.usable;
    let reason = evict_reason(mode);
    let (domain, mut room) = within.domain.map_or((None, None), |(nodes, room)| (Some(nodes), Some(room)));
    let need = key_need(ctx.ssn, gang);
    let key = need.1;
    let mut cost = NO_COST;
    let mut chosen: Vec<&Victim> = Vec::new();
    let mut nodes: Vec<NodeId> = Vec::new();
    let mut st = Statement::new();
    while let Some(v) = order.next(ctx.ssn, ctx.fw) {
        if !v.pods.iter().any(|&p| ctx.ssn.pod_state[p].running_on().is_some_and(usable)) {
            continue;
        }
        // Taking units only ever makes the rest less evictable (queues drop, jobs shrink),
        // so a unit refused now would have been refused before the first eviction too.
        if !may_take(ctx, (mode, within.judged), job, v) {
            continue;
        }
        let touched: Vec<NodeId> = match room {
            Some(_) => v.pods.iter().filter_map(|&p| ctx.ssn.pod_state[p].running_on()).collect(),
            None => Vec::new(),
        };
        evict_unit(ctx.ssn, &mut st, v, (reason, job), &mut nodes);
        chosen.push(v);
        order.rerank(ctx.ssn.snap.jobs[v.job].queue);
        cost = with_victim(cost, ctx.ssn.snap, v, key);
        if within.give_up_at.is_some_and(|bound| cost >= bound) {
            break;
        }
        if let Some(room) = room.as_mut() {
            touched.into_iter().for_each(|n| room.update(ctx.ssn, n, usable));
        }
        let could_hold = match room.as_ref() {
            Some(room) => room.could_hold(),
            None => cluster_could_hold(ctx.ssn, need, &nodes),
        };
        if !could_hold || !fits(ctx) {
            continue;
        }
        if let Some(pipe) = try_place_all(ctx, gang, Avail::Future(&freed_within(&nodes, domain))) {
            let (st, kept) = if domain.is_none() {
                ctx.ssn.discard(pipe);
                ctx.ssn.discard(st);
                spare_unneeded(ctx, gang, chosen, (reason, job), fits, None)?
            } else {
                ctx.ssn.absorb(&mut st, pipe);
                (st, chosen)
            };
            let cost = kept.iter().fold(NO_COST, |c, v| with_victim(c, ctx.ssn.snap, v, key));
            return Some((st, cost, kept));
        }
    }
    ctx.ssn.discard(st);
    None
}

/// The freed nodes a placement after evictions may use: inside the domain the victims were
/// sought in, when there is one (victims whose gangs span domains free capacity elsewhere
/// too, which that search did not pay for).
fn freed_within<'n>(nodes: &'n [NodeId], domain: Option<&[NodeId]>) -> Cow<'n, [NodeId]> {
    match domain {
        Some(domain) => nodes.iter().copied().filter(|n| domain.binary_search(n).is_ok()).collect(),
        None => Cow::Borrowed(nodes),
    }
}

/// Evicts a victim unit for a job, adding the nodes it frees to `nodes` (kept sorted, no
/// duplicates).
fn evict_unit(
    ssn: &mut Session,
    st: &mut Statement,
    v: &Victim,
    (reason, for_job): (EvictReason, JobId),
    nodes: &mut Vec<NodeId>,
) {
    let pods: Vec<PodId> = if v.elastic {
        vec![v.pods[0]]
    } else {
        // Sized by the unit: the job's pods running when it was formed, at most.
        let mut pods = Vec::with_capacity(v.pods.len());
        pods.extend(ssn.running_pods(v.job));
        pods
    };
    for p in pods {
        if let Some(n) = ssn.pod_state[p].running_on() {
            if let Err(at) = nodes.binary_search(&n) {
                nodes.insert(at, n);
            }
        }
        ssn.evict(st, p, reason, for_job);
    }
}
