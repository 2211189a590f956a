//! What a replay records: per trace job, what became of it, and over the replay, the GPUs
//! allocated, the cycles run and each queue's share.

use std::collections::BTreeMap;

use super::eta::Eta;

/// What became of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// Index in the trace.
    pub job: usize,
    /// When it finished; `None` if it never did.
    pub finish: Option<i64>,
    /// Whether it ended the replay holding some of its pods without ever running.
    pub deadlocked: bool,
    /// Pods of it evicted over the replay.
    pub evicted_pods: u32,
    /// Pod-seconds of work lost to evictions.
    pub work_lost: i64,
    /// Seconds it ran towards its finish: its runs, without those evictions threw away.
    pub ran: i64,
    /// Times it restarted with fewer pods (an elastic shrink).
    pub shrinks: u32,
    /// Times it restarted with more pods (an elastic growth).
    pub grows: u32,
    /// With racks: how many racks its pods spanned when it last started.
    pub racks: Option<u32>,
    /// When it first started.
    pub first_start: Option<i64>,
    /// The start the scheduler forecast at the first cycle that saw it wait.
    pub eta_at_submission: Option<Eta>,
    /// The start the scheduler forecast last before half of its wait had passed.
    pub eta_at_half_wait: Option<Eta>,
}

impl JobRecord {
    /// Its queueing delay, if it finished: all the time it was not making progress, its
    /// completion time (`finish - submit`) minus the time it ran towards its finish. For a
    /// job that never resized, its completion time minus its duration.
    pub fn queue_delay(&self, submit: i64) -> Option<i64> {
        self.finish.map(|f| f - submit - self.ran)
    }
}

/// The result of one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// One record per trace job, in trace order.
    pub jobs: Vec<JobRecord>,
    /// Allocated GPUs over time: `(time, GPUs)` at every change.
    pub allocation: Vec<(i64, u32)>,
    /// GPU-seconds allocated while some GPU job that fits an empty cluster waited, and the
    /// seconds such a job waited.
    pub busy_while_waiting: (u128, u128),
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Per queue (by name): the time integrals, while some job waits, of its allocated GPUs,
    /// its fair share of GPUs and their distance (GPU-seconds).
    pub queue_shares: BTreeMap<String, QueueShare>,
    /// Seconds during which some job waited.
    pub contended: u128,
    /// Whether the policy made the trace's gangs elastic.
    pub elastic: bool,
}

/// A queue's GPUs over the contended time of a replay, as GPU-seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueueShare {
    /// Allocated GPUs, integrated.
    pub allocated: f64,
    /// Fair share of GPUs (from the last cycle), integrated.
    pub fair: f64,
    /// Absolute difference of the two, integrated.
    pub error: f64,
}
