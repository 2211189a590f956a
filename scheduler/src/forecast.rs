//! Forecast: for every gang still waiting after a cycle, where it stands — its position in its
//! queue and among all waiting gangs, in the order the scheduler serves them — and when it is
//! expected to start, within what range, with what that expectation rests on. "Why is my job
//! pending?" has an answer in the reasons; this answers "when will it start?".
//!
//! The start is planned on the cluster's total capacity of the resource the gang waits for
//! (GPUs for a GPU job, else CPU), over time ([`profile`]): capacity comes back when the
//! running pods end as their declared or learned run times say, and the waiting gangs, in
//! serving order, each take the earliest time from which their need stays free for as long as
//! they run, so a gang later in the order backfills a gap an earlier one cannot use but never
//! delays it. A gang holding a reservation starts no sooner than its reservation plans, which
//! knows the nodes. The plan ignores work that has not arrived yet and the shape of the free
//! capacity (whole nodes), so it is an estimate, and says so: its [`Basis`] is `Declared` only
//! when every end planned before its start was declared, and names the learned run times of
//! other namespaces when it rests on them.
//!
//! The range is the same plan made twice more, once with every end at the low end of its run
//! time's range and once at the high end ([`crate::snapshot::RunTimeRange`]: the spread of
//! the learned runs, widened for jobs that outlived them; a declared end is its own upper
//! bound), and always holds the expected start.

use std::collections::HashMap;

use crate::clock::Clock;
use crate::framework::Framework;
use crate::ids::{ti_vec, JobId, TiVec};
use crate::plugin::Reservation;
use crate::session::{PodState, Session};
use crate::snapshot::{Job, QueueId, RunTime, RunTimeRange};

mod profile;

use profile::{Hold, Profile};

/// What a waiting gang's expected start rests on, from the surest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Basis {
    /// Every end it waits for is declared (`activeDeadlineSeconds`).
    Declared,
    /// Some end it waits for was learned from finished jobs, all of its own namespace.
    Learned,
    /// Some end it waits for was learned from the finished jobs of another namespace (another
    /// team's history, which its own jobs do not shape).
    OtherNamespaces,
    /// Something it waits for has no known end: no start can be given.
    Unknown,
    /// It can never start as it is: a refusal no end of running work lifts holds it
    /// ([`crate::plugin::Rule::holds_forever`]); its reason says which.
    Never,
}

impl Basis {
    /// How status and `drover explain` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Declared => "DeclaredRunTimes",
            Basis::Learned => "LearnedRunTimes",
            Basis::OtherNamespaces => "OtherNamespacesRunTimes",
            Basis::Unknown => "Unknown",
            Basis::Never => "Never",
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
    /// The earliest start of its range (at most `start`), when it has a start.
    pub earliest: Option<i64>,
    /// The latest start of its range (at least `start`), when it has a start.
    pub latest: Option<i64>,
    /// What the start rests on.
    pub basis: Basis,
}

/// Whose learned run times the ends waited for so far come from, by namespace number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LearnedFrom {
    Nothing,
    One(u32),
    Several,
}

impl LearnedFrom {
    fn and(self, namespace: u32) -> LearnedFrom {
        match self {
            LearnedFrom::Nothing => LearnedFrom::One(namespace),
            LearnedFrom::One(n) if n == namespace => self,
            _ => LearnedFrom::Several,
        }
    }

    /// The basis of a start of a gang of `namespace` that waited for these ends.
    fn basis(self, namespace: u32) -> Basis {
        match self {
            LearnedFrom::Nothing => Basis::Declared,
            LearnedFrom::One(n) if n == namespace => Basis::Learned,
            _ => Basis::OtherNamespaces,
        }
    }
}

/// The three plans: every end early, as expected, late.
const LANES: usize = 3;
const EARLY: usize = 0;
const EXPECTED: usize = 1;
const LATE: usize = 2;

/// A run time in each plan: the low end of its range, itself, the high end.
fn lanes(run_time: RunTime, learned: Option<RunTimeRange>) -> [i64; LANES] {
    let range = RunTimeRange::of(run_time, learned);
    [range.low, run_time.seconds(), range.high]
}

/// When a running job's pods end in each plan, on `clock` (an overdue end ends now), if known:
/// its expected end, moved by how much sooner or later its run time's range says.
fn running_ends(job: &Job, clock: &Clock) -> Option<[i64; LANES]> {
    let expected = job.ends_at.or_else(|| job.run_time.map(|d| clock.now().saturating_add(d.seconds())))?;
    let offsets = job.run_time.map_or([0; LANES], |r| lanes(r, job.run_time_range).map(|t| t - r.seconds()));
    Some(offsets.map(|d| clock.at_least_now(expected.saturating_add(d))))
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
    let mut numbers: HashMap<&str, u32> = HashMap::new();
    let namespaces: TiVec<JobId, u32> = snap
        .jobs
        .iter()
        .map(|job| {
            let next = numbers.len() as u32;
            *numbers.entry(job.namespace.as_str()).or_insert(next)
        })
        .collect();
    let learned_from = |j: JobId| matches!(snap.jobs[j].run_time, Some(RunTime::Learned(_))).then_some(namespaces[j]);
    let mut holds: Vec<[Vec<Hold>; LANES]> = (0..snap.resources.len()).map(|_| Default::default()).collect();
    let mut waiting: Vec<JobId> = Vec::new();
    for (j, job) in snap.jobs.iter_enumerated() {
        let r = resource(j);
        let pods = || job.tasks.iter().flat_map(|t| &t.pods).map(|&p| (p, ssn.pod_state[p]));
        let held: i64 = pods().filter(|(_, s)| s.running_on().is_some()).map(|(p, _)| ssn.requests(p)[r]).sum();
        if pods().any(|(_, s)| s.running_on().is_some()) {
            let ends = running_ends(job, clock);
            for (lane, holds) in holds[r].iter_mut().enumerate() {
                holds.push(Hold { amount: held, until: ends.map(|e| e[lane]), learned: learned_from(j) });
            }
        } else if pods().any(|(_, s)| matches!(s, PodState::Pending | PodState::Pipelined(_))) {
            waiting.push(j);
        }
    }
    let mut profiles: Vec<Option<[Profile; LANES]>> = (0..snap.resources.len()).map(|_| None).collect();
    waiting.sort_by(|&a, &b| fw.job_order(ssn, a, b));
    let mut in_queue: TiVec<QueueId, u32> = ti_vec![0; snap.queues.len()];
    for (i, &j) in waiting.iter().enumerate() {
        let job = &snap.jobs[j];
        in_queue[job.queue] += 1;
        if ssn.blocked_by[j].is_some_and(|by| by.rule.holds_forever()) {
            // It takes no capacity in the plan: it never starts.
            let (queue_position, position) = (in_queue[job.queue], i as u32 + 1);
            let never =
                Forecast { queue_position, position, start: None, earliest: None, latest: None, basis: Basis::Never };
            out[j] = Some(never);
            continue;
        }
        let r = resource(j);
        let need: i64 = job.tasks.iter().map(|t| t.requests[r] * t.pods.len() as i64).sum();
        let reserved = reservations.iter().find(|res| res.job == j).map(|res| res.start);
        let runs = job.run_time.map(|t| lanes(t, job.run_time_range));
        let lanes = profiles[r]
            .get_or_insert_with(|| std::array::from_fn(|lane| Profile::new(snap.capacity[r], now, &holds[r][lane])));
        // A gang that waits after the cycle although its need is free (its queue's bounds, the
        // order, the shape of the free capacity hold it) starts no sooner than the next end:
        // until something ends, the next cycle decides as this one did. The reservation's
        // start rests on ends too: planned early, they may come sooner.
        let planned: [Option<i64>; LANES] = std::array::from_fn(|lane| {
            let profile = &mut lanes[lane];
            let next_end = profile.next_end()?;
            let at_least = if lane == EARLY { next_end } else { reserved.unwrap_or(next_end).max(next_end) };
            profile.place(need, at_least, runs.map(|t| t[lane]), learned_from(j))
        });
        let start = planned[EXPECTED];
        let learned = start.map_or(LearnedFrom::Nothing, |s| {
            lanes[EXPECTED].learned_until(s).fold(LearnedFrom::Nothing, LearnedFrom::and)
        });
        // The early plan runs out of ends only when those it waits for may come now (a job
        // that outran every learned run may end at once): then it may start at any moment.
        let earliest = start.map(|s| planned[EARLY].unwrap_or_else(|| clock.now()).min(s));
        let latest = start.map(|s| planned[LATE].map_or(s, |t| t.max(s)));
        out[j] = Some(Forecast {
            queue_position: in_queue[job.queue],
            position: i as u32 + 1,
            start,
            earliest,
            latest,
            basis: if start.is_some() { learned.basis(namespaces[j]) } else { Basis::Unknown },
        });
    }
    out
}
