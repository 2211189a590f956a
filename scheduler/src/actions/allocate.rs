//! Allocate: place admitted pod groups on idle capacity, serving the most deprived queue
//! first and, within it, jobs in priority order.
//!
//! First, jobs keep the claims an earlier cycle's evictions made for them (see
//! [`super::claim::keep`]). Then four passes, each over all queues: gang minimums within fair
//! share, then elastic pods within fair share, then gang minimums and elastic pods on idle
//! capacity beyond fair share (capacity no queue within its fair share could use). Between the
//! fair-share passes and the idle ones, work still waiting within its fair share claims the
//! capacity evictions are freeing (see [`super::claim`]). Queues that plugins find overused sit
//! out the fair-share passes. A gang's minimum is placed as one statement or not at all. A
//! `StrictFIFO` queue serves its jobs strictly in order: each job's minimum and elastic pods
//! before the next job, and a job with a pod that cannot be placed stops later jobs of the same
//! class (GPU or CPU-only) for the rest of the pass. Its elastic pods, and so the later jobs,
//! wait for the elastic pass like every queue's elastic pods: otherwise a strict queue's
//! elastic pods would take capacity that reclaim freed for another queue's minimum, and be
//! reclaimed again (ping-pong).
//! A gang that finds no room may reserve the nodes where it will start soonest (see
//! [`crate::reservation`]); jobs served after it leave that capacity alone unless they are
//! declared to end before the reservation starts.

use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::placement::Avail;
use crate::plugin::{Blocker, ShareBound};
use crate::reservation::Reservations;
use crate::session::{EvictReason, Statement};
use crate::snapshot::{JobId, JobPhase, QueueId};

use super::queue_choice::QueueChoice;
use super::{class, jobs_by_queue, place_all, strict, Ctx};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tier {
    Minimum,
    Elastic,
}

/// Runs the action.
pub fn run(ctx: &mut Ctx) {
    super::claim::keep(ctx);
    let queues = jobs_by_queue(ctx, |j| {
        ctx.ssn.job_phase[j] != JobPhase::Pending
            && ctx.ssn.job_pipelined[j] == 0
            && ctx.ssn.pending_pods(j).next().is_some()
    });
    run_pass(ctx, &queues, Tier::Minimum, ShareBound::FairShare);
    run_pass(ctx, &queues, Tier::Elastic, ShareBound::FairShare);
    super::claim::run(ctx);
    run_pass(ctx, &queues, Tier::Minimum, ShareBound::Idle);
    run_pass(ctx, &queues, Tier::Elastic, ShareBound::Idle);
}

struct Pass<'q> {
    queues: &'q TiSlice<QueueId, Vec<JobId>>,
    cursor: TiVec<QueueId, usize>,
    done: TiVec<JobId, bool>,
    blocker: TiVec<QueueId, [Option<JobId>; 2]>,
}

fn run_pass(ctx: &mut Ctx, queues: &TiSlice<QueueId, Vec<JobId>>, tier: Tier, bound: ShareBound) {
    let mut pass = Pass {
        queues,
        cursor: ti_vec![0; queues.len()],
        done: ti_vec![false; ctx.ssn.snap.jobs.len()],
        blocker: ti_vec![[None, None]; queues.len()],
    };
    let mut heads: TiVec<QueueId, Option<JobId>> = queues.keys().map(|q| pass.head(ctx, q, tier)).collect();
    let fair = bound == ShareBound::FairShare;
    let over = |c: &Ctx, q: QueueId| fair && c.fw.within_fair_share(c.ssn, q).is_err();
    let mut choice = QueueChoice::new(ctx);
    while let Some(q) = choice.next(ctx, &|q| heads[q].is_some() && !over(ctx, q)) {
        let job = heads[q].expect("selected queues have a head job");
        let placed = match tier {
            Tier::Minimum if strict(ctx, q) => place_strict_minimum(ctx, job, bound),
            Tier::Minimum => place_minimum(ctx, job, bound),
            Tier::Elastic if strict(ctx, q) => place_whole_turn(ctx, job, bound),
            Tier::Elastic => place_one_elastic(ctx, job, bound),
        };
        match placed {
            Ok(more) => {
                if !more {
                    pass.done[job] = true;
                } else if strict(ctx, q) {
                    // Its elastic pods come in the elastic pass, and the later jobs of its
                    // class after them.
                    pass.done[job] = true;
                    pass.blocker[q][class(ctx, job)] = Some(job);
                }
            }
            Err((reason, by)) => {
                ctx.ssn.set_refusal(job, reason, by);
                pass.done[job] = true;
                if strict(ctx, q) {
                    pass.blocker[q][class(ctx, job)] = Some(job);
                }
            }
        }
        heads[q] = pass.head(ctx, q, tier);
        choice.changed(ctx.ssn.snap, q);
    }
}

impl Pass<'_> {
    /// The next job of queue `q` this pass should try, skipping finished, inapplicable and
    /// strictly blocked jobs (which get a reason naming the job they wait behind).
    fn head(&mut self, ctx: &mut Ctx, q: QueueId, tier: Tier) -> Option<JobId> {
        while let Some(&job) = self.queues[q].get(self.cursor[q]) {
            let ready = ctx.fw.job_ready(ctx.ssn, job);
            let applicable = !self.done[job]
                && ctx.ssn.pending_pods(job).next().is_some()
                && match (tier, strict(ctx, q)) {
                    (_, true) => true,
                    (Tier::Minimum, false) => !ready && ctx.ssn.min_reachable(job),
                    (Tier::Elastic, false) => ready,
                };
            if applicable {
                if let Some(blocker) = self.blocker[q][class(ctx, job)] {
                    if tier == Tier::Minimum {
                        let b = ctx.ssn.snap.jobs[blocker].key();
                        let name = &ctx.ssn.snap.queues[q].name;
                        ctx.ssn.set_reason(job, format!("waiting behind {b} in StrictFIFO queue {name}"));
                    }
                } else {
                    return Some(job);
                }
            }
            self.cursor[q] += 1;
        }
        None
    }
}

/// A strictly ordered job's turn in a minimum pass: its minimum, if not running yet;
/// `Ok(true)` when elastic pods remain, which then wait for the elastic pass like every
/// other queue's (every queue's minimums before any elastic pod), and so do the later jobs
/// of its class.
fn place_strict_minimum(ctx: &mut Ctx, job: JobId, bound: ShareBound) -> Result<bool, Waits> {
    if !ctx.fw.job_ready(ctx.ssn, job) {
        place_minimum(ctx, job, bound)?;
    }
    Ok(ctx.ssn.pending_pods(job).next().is_some())
}

/// A strictly ordered job's whole turn in an elastic pass: its minimum if needed, then every
/// elastic pod, before any later job of its queue. An elastic pod that cannot be placed ends
/// the turn as a failure, which blocks the later jobs (Determined's priority scheduler: while
/// higher-priority work waits, nothing of lower priority starts).
fn place_whole_turn(ctx: &mut Ctx, job: JobId, bound: ShareBound) -> Result<bool, Waits> {
    if !ctx.fw.job_ready(ctx.ssn, job) {
        place_minimum(ctx, job, bound)?;
    }
    while ctx.ssn.pending_pods(job).next().is_some() {
        place_one_elastic(ctx, job, bound)?;
    }
    Ok(false)
}

/// Why a job's turn failed: the reason, and the structured refusal that gave it, if any.
type Waits = (String, Option<Blocker>);

/// Places the job's gang minimum; `Ok(false)`: the job needs nothing more this pass.
fn place_minimum(ctx: &mut Ctx, job: JobId, bound: ShareBound) -> Result<bool, Waits> {
    if !ctx.ssn.min_reachable(job) {
        return Err(("waiting for evicted pods to terminate before the gang can start again".into(), None));
    }
    let pods = ctx.ssn.gang_pods(job);
    let req = ctx.ssn.sum_requests(&pods);
    if let Err(refusal) = ctx.fw.allocatable(ctx.ssn, job, &req, bound) {
        let why = refusal.to_string();
        // Beyond its fair share now, but within its queue's hard bounds: once capacity frees
        // the gang may start, so its own queue's later work must not take that capacity.
        let may_start_later = bound == ShareBound::FairShare
            && ctx.reservations.open(ctx.fw)
            && ctx.fw.allocatable(ctx.ssn, job, &req, ShareBound::Idle).is_ok();
        let why = if may_start_later { with_reservation(ctx, job, why) } else { why };
        return Err((why, Some(refusal.into())));
    }
    let holds = ctx.reservations.holds_for(ctx.ssn, ctx.fw, job, bound);
    let st = match place_all(ctx, &pods, Avail::Idle(holds.as_deref())) {
        Ok(st) => st,
        Err(why) => return Err((with_reservation(ctx, job, why), None)),
    };
    ctx.ssn.commit(st);
    record_loan(ctx, job);
    ctx.ssn.job_phase[job] = JobPhase::Running;
    ctx.ssn.clear_reason(job);
    Ok(false)
}

/// Places one more pod of a ready job; `Ok(true)` while pods remain.
fn place_one_elastic(ctx: &mut Ctx, job: JobId, bound: ShareBound) -> Result<bool, Waits> {
    let pod = ctx.ssn.pending_pods(job).next().expect("heads have pending pods");
    let req = ctx.ssn.requests(pod).clone();
    let waits = |why: &dyn std::fmt::Display| format!("elastic pods wait: {why}");
    ctx.fw.allocatable(ctx.ssn, job, &req, bound).map_err(|why| (waits(&why), Some(why.into())))?;
    let holds = ctx.reservations.holds_for(ctx.ssn, ctx.fw, job, bound);
    let st = place_all(ctx, &[pod], Avail::Idle(holds.as_deref())).map_err(|why| (waits(&why), None))?;
    ctx.ssn.commit(st);
    record_loan(ctx, job);
    Ok(ctx.ssn.pending_pods(job).next().is_some())
}

/// Reserves for a gang that found no room the nodes where it will start soonest (when the
/// plugins allow and its start can be known) and says so after `why`. A gang that is due
/// (its start is now) but finds jobs there that borrowed the capacity on a learned run time
/// and overran it evicts them.
fn with_reservation(ctx: &mut Ctx, job: JobId, why: String) -> String {
    let Some(r) = ctx.reservations.reserve(ctx.ssn, ctx.fw, ctx.placer, job) else { return why };
    let snap = ctx.ssn.snap;
    let names: Vec<&str> = r.nodes.iter().map(|(n, _)| snap.nodes[*n].name.as_str()).collect();
    let said = format!("{why}; reserved {}, expected to start in {} s", names.join(", "), r.start - snap.clock.now());
    let overdue = if snap.clock.reached(r.start) { Reservations::overdue_borrowers(ctx.ssn, r) } else { Vec::new() };
    if overdue.is_empty() {
        return said;
    }
    let mut st = Statement::new();
    for &p in &overdue {
        ctx.ssn.evict(&mut st, p, EvictReason::Overrun, job);
    }
    ctx.ssn.commit(st);
    format!("{said}; evicting jobs that overran the learned run times they borrowed its nodes on")
}

/// Records a loan when `job`, just placed, took capacity reserved for another gang on a
/// learned run time.
fn record_loan(ctx: &mut Ctx, job: JobId) {
    if let Some(until) = ctx.reservations.loan(ctx.ssn, job) {
        ctx.ssn.decisions.loans.push((job, until));
    }
}
