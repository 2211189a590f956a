//! The policies a trace is replayed under, each expressed as what production Drover is given
//! (a scheduler configuration, a queueing strategy, a job's gang minimum and priority), never
//! as a special path in the core.

use drover_scheduler::config::{ActionName, SchedulerConfig};
use drover_scheduler::snapshot::{QueueingStrategy, Resize};

/// A replay policy, named as `scenario-format.md` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    /// Gangs in submission order; nothing passes a waiting job (a `StrictFIFO` queue,
    /// allocate only).
    FifoStrict,
    /// Gangs; later jobs use what earlier waiting jobs cannot (`BestEffortFIFO`, allocate
    /// only).
    FifoBackfill,
    /// Per pod, no gangs, what kube-scheduler alone does: every pod is its own gang of one,
    /// so partial gangs hold GPUs; a job still runs only once all its pods run.
    Greedy,
    /// Shortest job first, an oracle that knows durations: priority from the duration
    /// (shorter first), with backfill and no preemption.
    Sjf,
    /// Drover's default configuration (`config/scheduler.yaml`), with each job's run time
    /// declared, so that gangs that cannot start reserve nodes (runtime-aware backfill).
    Drover,
    /// Drover's default configuration, as `Drover`, with every multi-pod GPU job elastic: it
    /// shrinks by halves down to [`ELASTIC_FLOOR_PODS`] when its gang finds no room and grows
    /// by doubling back up to what the trace asked when capacity is spare (Run:ai's
    /// elasticity, the `resize` action).
    DroverElastic,
}

/// Every policy, in the order they are reported.
pub const ALL: [Policy; 6] =
    [Policy::FifoStrict, Policy::FifoBackfill, Policy::Greedy, Policy::Sjf, Policy::Drover, Policy::DroverElastic];

/// The fewest pods an elastic job of `drover-elastic` runs with: one, Run:ai's default when a
/// job names no minimum. The trace does not say how far a job may shrink, so the policy lets
/// it go as far as the resize action allows.
pub const ELASTIC_FLOOR_PODS: u32 = 1;

impl Policy {
    /// The name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Policy::FifoStrict => "fifo-strict",
            Policy::FifoBackfill => "fifo-backfill",
            Policy::Greedy => "greedy",
            Policy::Sjf => "sjf",
            Policy::Drover => "drover",
            Policy::DroverElastic => "drover-elastic",
        }
    }

    /// The policy of a name.
    pub fn parse(name: &str) -> Result<Policy, String> {
        ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy {name:?}; expected one of {}", names.join(", "))
        })
    }

    /// The scheduler configuration the policy runs, derived from `drover`'s: the baselines
    /// keep its plugins, with their own actions and no reservations.
    pub fn config(self, drover: &SchedulerConfig) -> SchedulerConfig {
        use ActionName::*;
        let mut config = drover.clone();
        match self {
            Policy::FifoStrict | Policy::FifoBackfill | Policy::Greedy => config.actions = vec![Enqueue, Allocate],
            Policy::Sjf => config.actions = vec![Enqueue, Allocate, Backfill],
            Policy::Drover | Policy::DroverElastic => {}
        }
        if !self.declares_run_times() {
            config.plugins.retain(|p| p.name() != "reservation");
        }
        config
    }

    /// Whether jobs declare their run time to the scheduler (as the `activeDeadlineSeconds`
    /// of their pods would in a cluster): only Drover's policies plan reservations with them.
    pub fn declares_run_times(self) -> bool {
        matches!(self, Policy::Drover | Policy::DroverElastic)
    }

    /// Whether the policy makes the trace's multi-pod GPU jobs elastic.
    pub fn elastic(self) -> bool {
        self == Policy::DroverElastic
    }

    /// The elasticity a job of `pods` pods of `gpus_per_pod` GPUs asks for: under
    /// `drover-elastic`, every multi-pod GPU job shrinks down to [`ELASTIC_FLOOR_PODS`] and
    /// grows back to `pods`; otherwise none (the trace's gangs are rigid).
    pub fn resize(self, pods: u32, gpus_per_pod: u32) -> Option<Resize> {
        (self.elastic() && pods > 1 && gpus_per_pod > 0).then_some(Resize { floor: ELASTIC_FLOOR_PODS, ceiling: pods })
    }

    /// How the queues order their jobs.
    pub fn strategy(self) -> QueueingStrategy {
        match self {
            Policy::FifoStrict => QueueingStrategy::StrictFifo,
            _ => QueueingStrategy::BestEffortFifo,
        }
    }

    /// The gang minimum the scheduler is told for a job of `pods` pods.
    pub fn min_member(self, pods: u32) -> u32 {
        match self {
            Policy::Greedy => 1,
            _ => pods,
        }
    }

    /// The priority the scheduler is told for a job running `duration` seconds.
    pub fn priority(self, duration: i64) -> i32 {
        match self {
            Policy::Sjf => -i32::try_from(duration).unwrap_or(i32::MAX),
            _ => 0,
        }
    }
}
