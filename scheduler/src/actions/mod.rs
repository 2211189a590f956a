//! The actions of a scheduling cycle, from least to most disruptive, and the helpers they
//! share: choosing the most deprived queue, placing a gang as one statement, and forming and
//! trying eviction victims.

pub mod allocate;
pub mod backfill;
pub mod enqueue;
pub mod preempt;
pub mod reclaim;

use crate::framework::{EvictMode, Framework, Victim};
use crate::placement::{Avail, Placer};
use crate::session::{EvictReason, PodState, Session, Statement};
use crate::snapshot::{JobId, JobPhase, NodeId, PodId, QueueId, ROOT};

/// Everything an action works with.
pub struct Ctx<'a, 's> {
    /// The cycle's state.
    pub ssn: &'a mut Session<'s>,
    /// The plugins.
    pub fw: &'a Framework,
    /// The node finder.
    pub placer: &'a mut Placer,
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

/// Jobs of each leaf queue matching `keep`, in the framework's job order.
pub fn jobs_by_queue(ctx: &Ctx, keep: impl Fn(JobId) -> bool) -> Vec<Vec<JobId>> {
    let mut by_queue = vec![Vec::new(); ctx.ssn.snap.queues.len()];
    for j in 0..ctx.ssn.snap.jobs.len() {
        if keep(j) {
            by_queue[ctx.ssn.snap.jobs[j].queue].push(j);
        }
    }
    for list in &mut by_queue {
        list.sort_by(|&a, &b| ctx.fw.job_order(ctx.ssn, a, b));
    }
    by_queue
}

/// The most deprived leaf queue among those `eligible`, descending from the root and
/// choosing at each level the child that the queue order serves first.
pub fn select_queue(ctx: &Ctx, eligible: &dyn Fn(QueueId) -> bool) -> Option<QueueId> {
    select_below(ctx, ROOT, eligible)
}

fn select_below(ctx: &Ctx, q: QueueId, eligible: &dyn Fn(QueueId) -> bool) -> Option<QueueId> {
    let children = &ctx.ssn.snap.queues[q].children;
    if children.is_empty() {
        return (q != ROOT && eligible(q)).then_some(q);
    }
    children
        .iter()
        .filter_map(|&c| select_below(ctx, c, eligible).map(|leaf| (c, leaf)))
        .min_by(|a, b| ctx.fw.queue_order(ctx.ssn, a.0, b.0))
        .map(|(_, leaf)| leaf)
}

/// Places every pod of `pods` (in task order) or none. On failure, returns why.
pub fn place_all(ctx: &mut Ctx, pods: &[PodId], avail: Avail) -> Result<Statement, String> {
    place_or_explain(ctx, pods, avail, true).map_err(|why| why.unwrap_or_default())
}

/// Like [`place_all`], without working out why when it fails (for trial placements).
pub fn try_place_all(ctx: &mut Ctx, pods: &[PodId], avail: Avail) -> Option<Statement> {
    place_or_explain(ctx, pods, avail, false).ok()
}

fn place_or_explain(ctx: &mut Ctx, pods: &[PodId], avail: Avail, explain: bool) -> Result<Statement, Option<String>> {
    let mut st = Statement::new();
    let mut ordered = pods.to_vec();
    ordered.sort_by(|&a, &b| ctx.fw.task_order(ctx.ssn, a, b));
    for (placed, &pod) in ordered.iter().enumerate() {
        match ctx.placer.find(ctx.ssn, ctx.fw, pod, avail) {
            Some(node) => match avail {
                Avail::Idle(_) => ctx.ssn.allocate(&mut st, pod, node),
                Avail::Future(_) => ctx.ssn.pipeline(&mut st, pod, node),
            },
            None => {
                let why = explain.then(|| {
                    let hold = match avail {
                        Avail::Idle(h) => h,
                        Avail::Future(_) => None,
                    };
                    let nodes = ctx.placer.explain(ctx.ssn, ctx.fw, pod, hold);
                    if ordered.len() > 1 {
                        format!("gang of {} pods: only {placed} fit; {nodes}", ordered.len())
                    } else {
                        nodes
                    }
                });
                ctx.ssn.discard(st);
                return Err(why);
            }
        }
    }
    Ok(st)
}

/// Eviction units of a running job: its pods above the gang minimum one by one (newest
/// index first), then all of it. Pods bound by this very cycle are never victims: a binding
/// the cycle decided stands.
pub fn victim_units(ssn: &Session, job: JobId) -> Vec<Victim> {
    let running: Vec<PodId> = ssn.running_pods(job).collect();
    let bound_before = |p: &PodId| matches!(ssn.pod_state[*p], PodState::Bound(_));
    if running.is_empty() {
        return Vec::new();
    }
    let j = &ssn.snap.jobs[job];
    let mut surplus = ssn.job_running[job].saturating_sub(j.min_member);
    let mut spare: Vec<u32> = j
        .tasks
        .iter()
        .enumerate()
        .map(|(t, task)| ssn.task_running[job][t].saturating_sub(task.min_available))
        .collect();
    let mut units = Vec::new();
    for &pod in running.iter().rev().filter(|p| bound_before(p)) {
        let t = ssn.snap.pods[pod].task;
        if surplus > 0 && spare[t] > 0 {
            surplus -= 1;
            spare[t] -= 1;
            units.push(Victim { job, pods: vec![pod], elastic: true, freed: ssn.requests(pod).clone() });
        }
    }
    if running.iter().all(bound_before) {
        let freed = ssn.sum_requests(&running);
        units.push(Victim { job, pods: running, elastic: false, freed });
    }
    units
}

/// Eviction units per job, formed on first use and formed again after the job loses pods.
#[derive(Default)]
pub struct VictimCache {
    units: Vec<Option<Vec<Victim>>>,
}

impl VictimCache {
    /// A cache for the session's jobs.
    pub fn new(jobs: usize) -> VictimCache {
        VictimCache { units: vec![None; jobs] }
    }

    /// Forms the units of these jobs if not yet formed.
    pub fn fill(&mut self, ssn: &Session, jobs: impl Iterator<Item = JobId>) {
        for j in jobs {
            if self.units[j].is_none() {
                self.units[j] = Some(victim_units(ssn, j));
            }
        }
    }

    /// The units of a job (empty unless filled).
    pub fn of(&self, job: JobId) -> &[Victim] {
        self.units[job].as_deref().unwrap_or(&[])
    }

    /// Forgets the units of jobs that lost pods in decisions from index `since` on.
    pub fn forget_evicted(&mut self, ssn: &Session, since: usize) {
        for &(pod, _) in &ssn.decisions.evictions[since..] {
            self.units[ssn.snap.pods[pod].job] = None;
        }
    }
}

/// Sorts the candidates, evicts what makes room for `job`'s gang and pipelines the gang, or,
/// when nothing works, adds `failure` to the job's reason. On success, returns where its
/// evictions start in the session's decisions.
pub fn make_room(
    ctx: &mut Ctx,
    job: JobId,
    mut candidates: Vec<&Victim>,
    mode: EvictMode,
    fits: &dyn Fn(&Ctx) -> bool,
    failure: &str,
) -> Option<usize> {
    ctx.fw.sort_victims(ctx.ssn, mode, &mut candidates);
    let gang = ctx.ssn.gang_pods(job).len();
    match evict_for(ctx, job, &candidates, mode, fits) {
        Some(st) => {
            let evicted = st.len() - gang;
            let since = ctx.ssn.decisions.evictions.len();
            ctx.ssn.commit(st);
            let what = match mode {
                EvictMode::Preempt => "preempted",
                EvictMode::Reclaim => "reclaimed",
            };
            ctx.ssn.set_reason(job, format!("waiting for {evicted} {what} pod(s) to terminate"));
            Some(since)
        }
        None => {
            let prior = ctx.ssn.reasons[job].clone().unwrap_or_default();
            ctx.ssn.set_reason(job, format!("{prior}; {failure}"));
            None
        }
    }
}

/// Tries to make room for `job`'s gang by evicting candidates in order, then pipelines the
/// gang onto the freed capacity. Victims that turn out unnecessary are spared. Returns the
/// statement holding evictions and pipelined pods, or `None` when no set of candidates helps.
fn evict_for(
    ctx: &mut Ctx,
    job: JobId,
    candidates: &[&Victim],
    mode: EvictMode,
    fits: &dyn Fn(&Ctx) -> bool,
) -> Option<Statement> {
    let gang = ctx.ssn.gang_pods(job);
    let feas = ctx.placer.feasibility(ctx.ssn, ctx.fw, gang[0]);
    let reason = match mode {
        EvictMode::Preempt => EvictReason::Preempt,
        EvictMode::Reclaim => EvictReason::Reclaim,
    };
    let mut chosen: Vec<usize> = Vec::new();
    let mut nodes: Vec<NodeId> = Vec::new();
    let mut st = Statement::new();
    for (i, v) in candidates.iter().enumerate() {
        if !v.pods.iter().any(|&p| ctx.ssn.pod_state[p].running_on().is_some_and(|n| feas.ok(n))) {
            continue;
        }
        if !ctx.fw.may_evict(ctx.ssn, mode, job, v) {
            continue;
        }
        evict_unit(ctx.ssn, &mut st, v, reason, &mut nodes);
        chosen.push(i);
        if !fits(ctx) {
            continue;
        }
        if let Some(pipe) = try_place_all(ctx, &gang, Avail::Future(&nodes)) {
            ctx.ssn.discard(pipe);
            ctx.ssn.discard(st);
            return spare_unneeded(ctx, &gang, candidates, chosen, reason, fits);
        }
    }
    ctx.ssn.discard(st);
    None
}

/// Evicts a victim unit, adding the nodes it frees to `nodes` (kept sorted, no duplicates).
fn evict_unit(ssn: &mut Session, st: &mut Statement, v: &Victim, reason: EvictReason, nodes: &mut Vec<NodeId>) {
    let pods: Vec<PodId> = if v.elastic { vec![v.pods[0]] } else { ssn.running_pods(v.job).collect() };
    for p in pods {
        if let Some(n) = ssn.pod_state[p].running_on() {
            if let Err(at) = nodes.binary_search(&n) {
                nodes.insert(at, n);
            }
        }
        ssn.evict(st, p, reason);
    }
}

/// Re-applies a working victim set without each victim in turn (latest first), keeping the
/// smaller set whenever the gang still fits.
fn spare_unneeded(
    ctx: &mut Ctx,
    gang: &[PodId],
    candidates: &[&Victim],
    mut chosen: Vec<usize>,
    reason: EvictReason,
    fits: &dyn Fn(&Ctx) -> bool,
) -> Option<Statement> {
    const MAX_PRUNE: usize = 32;
    let attempt = |ctx: &mut Ctx, set: &[usize]| -> Option<Statement> {
        let mut st = Statement::new();
        let mut nodes = Vec::new();
        for &i in set {
            let v = candidates[i];
            let still = if v.elastic {
                ctx.ssn.pod_state[v.pods[0]].running_on().is_some()
                    && ctx.ssn.can_lose_one(v.job, ctx.ssn.snap.pods[v.pods[0]].task)
            } else {
                ctx.ssn.running_pods(v.job).next().is_some()
            };
            if still {
                evict_unit(ctx.ssn, &mut st, v, reason, &mut nodes);
            }
        }
        if fits(ctx) {
            if let Some(pipe) = try_place_all(ctx, gang, Avail::Future(&nodes)) {
                ctx.ssn.absorb(&mut st, pipe);
                return Some(st);
            }
        }
        ctx.ssn.discard(st);
        None
    };
    if chosen.len() > 1 && chosen.len() <= MAX_PRUNE {
        for k in (0..chosen.len() - 1).rev() {
            let without: Vec<usize> = chosen.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, &c)| c).collect();
            if let Some(st) = attempt(ctx, &without) {
                ctx.ssn.discard(st);
                chosen = without;
            }
        }
    }
    attempt(ctx, &chosen)
}
