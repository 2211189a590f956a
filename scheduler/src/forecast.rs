//! Forecast: for every gang still waiting after a cycle, where it stands — its position in its
//! queue and among all waiting gangs, in the order the scheduler serves them — and when it is
//! expected to start, with what that expectation rests on. "Why is my job pending?" has an
//! answer in the reasons; this answers "when will it start?".
//!
//! The start is planned on the cluster's total capacity of the resource the gang waits for
//! (GPUs for a GPU job, else CPU): the gangs start one after another in serving order, each
//! when enough of that resource is free, and capacity comes back when the running pods (and
//! the gangs planned before) end as their declared or learned run times say. A gang holding a
//! reservation starts when its reservation plans, which knows the nodes. The plan ignores
//! work that has not arrived yet and jobs that backfill ahead, so it is an estimate, and says
//! so: its [`Basis`] is `Declared` only when every end it waited for was declared.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::framework::Framework;
use crate::ids::{ti_vec, JobId, TiVec};
use crate::plugin::Reservation;
use crate::session::{PodState, Session};
use crate::snapshot::{QueueId, RunTime};

/// What a waiting gang's expected start rests on, from the surest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Basis {
    /// Every end it waits for is declared (`activeDeadlineSeconds`).
    Declared,
    /// Some end it waits for was learned from finished jobs.
    Learned,
    /// Something it waits for has no known end: no start can be given.
    Unknown,
}

impl Basis {
    /// How status and `drover explain` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Declared => "DeclaredRunTimes",
            Basis::Learned => "LearnedRunTimes",
            Basis::Unknown => "Unknown",
        }
    }
}

/// One waiting gang's forecast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forecast {
    /// 1 for the gang its queue serves first.
    pub queue_position: u32,
    /// 1 for the gang the scheduler serves first, counting every queue's waiting gangs.
    pub position: u32,
    /// Expected start, on the snapshot's clock; none when [`Basis::Unknown`].
    pub start: Option<i64>,
    /// What the start rests on.
    pub basis: Basis,
}

/// Capacity of one resource coming back over time.
struct Pool {
    free: i64,
    capacity: i64,
    /// (end, amount, whether the end was learned), earliest first.
    ends: BinaryHeap<Reverse<(i64, i64, bool)>>,
    /// No gang planned from here on starts before this (they start in serving order).
    clock: i64,
    learned: bool,
    now: i64,
}

impl Pool {
    fn new(capacity: i64, now: i64) -> Pool {
        Pool { free: capacity, capacity, ends: BinaryHeap::new(), clock: now, learned: false, now }
    }

    fn hold_until(&mut self, amount: i64, end: Option<(i64, bool)>) {
        self.free -= amount;
        if let Some((t, learned)) = end {
            self.ends.push(Reverse((t, amount, learned)));
        }
    }

    /// When `need` is free, given the ends so far, and whether any end waited for was
    /// learned; holds it from then until `run` ends it. A gang that waits after the cycle
    /// although the capacity is free (its queue's bounds, the order, the shape of the free
    /// capacity hold it) starts no sooner than the next end: until something ends, the
    /// next cycle decides as this one did. None (and nothing held) when the capacity never
    /// comes back.
    fn plan(&mut self, need: i64, at_least: i64, run: Option<RunTime>) -> Option<(i64, Basis)> {
        if need > self.capacity {
            return None;
        }
        while self.free < need || self.clock == self.now {
            let Reverse((t, amount, learned)) = self.ends.pop()?;
            self.clock = self.clock.max(t);
            self.free += amount;
            self.learned |= learned;
        }
        let start = self.clock.max(at_least);
        self.hold_until(need, run.map(|r| (start.saturating_add(r.seconds()), matches!(r, RunTime::Learned(_)))));
        Some((start, if self.learned { Basis::Learned } else { Basis::Declared }))
    }
}

/// The forecast of every gang that waits after the cycle (none of its pods runs, some wait),
/// by job.
pub fn plan(fw: &Framework, ssn: &Session, reservations: &[Reservation]) -> TiVec<JobId, Option<Forecast>> {
    let snap = ssn.snap;
    let mut out = ti_vec![None; snap.jobs.len()];
    let resource = |job: JobId| match snap.gpu {
        Some(g) if snap.jobs[job].tasks.iter().any(|t| t.gpu) => g,
        _ => snap.cpu,
    };
    let clock = &snap.clock;
    // Every start planned lies beyond the pool's starting point (the time), which therefore
    // shapes the plan only through the ends, each noted as `Clock::at_least_now` reads it.
    let now = clock.unnoted();
    let mut pools: Vec<Option<Pool>> = (0..snap.resources.len()).map(|_| None).collect();
    let mut waiting: Vec<JobId> = Vec::new();
    for (j, job) in snap.jobs.iter_enumerated() {
        let r = resource(j);
        let pods = || job.tasks.iter().flat_map(|t| &t.pods).map(|&p| (p, ssn.pod_state[p]));
        let held: i64 = pods().filter(|(_, s)| s.running_on().is_some()).map(|(p, _)| ssn.requests(p)[r]).sum();
        if pods().any(|(_, s)| s.running_on().is_some()) {
            let end = job.ends_at.or_else(|| job.run_time.map(|d| clock.now().saturating_add(d.seconds())));
            let learned = matches!(job.run_time, Some(RunTime::Learned(_)));
            let pool = pools[r].get_or_insert_with(|| Pool::new(snap.capacity[r], now));
            pool.hold_until(held, end.map(|t| (clock.at_least_now(t), learned)));
        } else if pods().any(|(_, s)| matches!(s, PodState::Pending | PodState::Pipelined(_))) {
            waiting.push(j);
        }
    }
    waiting.sort_by(|&a, &b| fw.job_order(ssn, a, b));
    let mut in_queue: TiVec<QueueId, u32> = ti_vec![0; snap.queues.len()];
    for (i, &j) in waiting.iter().enumerate() {
        let job = &snap.jobs[j];
        in_queue[job.queue] += 1;
        let r = resource(j);
        let need: i64 = job.tasks.iter().map(|t| t.requests[r] * t.pods.len() as i64).sum();
        let reserved = reservations.iter().find(|res| res.job == j).map_or(now, |res| res.start);
        let pool = pools[r].get_or_insert_with(|| Pool::new(snap.capacity[r], now));
        let planned = pool.plan(need, reserved, job.run_time);
        out[j] = Some(Forecast {
            queue_position: in_queue[job.queue],
            position: i as u32 + 1,
            start: planned.map(|(t, _)| t),
            basis: planned.map_or(Basis::Unknown, |(_, b)| b),
        });
    }
    out
}
