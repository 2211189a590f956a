//! Placing a gang as one statement: every pod or none, by its topology groups when a
//! topology applies, with stand-ins for pods its minimum does not need, and why it failed.

use super::Ctx;
use crate::placement::Avail;
use crate::res::Res;
use crate::session::{Session, Statement};
use crate::snapshot::{JobId, Level, PodId};
use crate::topology_placement::Placing;

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

/// Places the pods of one job by its topology groups (see [`crate::topology_placement`]),
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
