//! Runs the scheduling core on a scenario for a number of cycles. Between cycles, bindings
//! take effect, evicted pods release their resources and return to pending, pods
//! pipelined behind evictions return to pending (the next cycle places them), and elastic
//! jobs the cycle resized restart at their new size. Nothing in the
//! core knows it is simulated.

use std::borrow::Cow;

use drover_scheduler::carry::{carry, Termination};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::ids::{NodeId, PodId, TiVec};
use drover_scheduler::session::{EvictReason, PodState};
use drover_scheduler::snapshot::{self, Snapshot, SnapshotError};

use crate::scenario::Scenario;

/// What happened to a pod in the last cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodFate {
    /// Bound to the node.
    Bound(String),
    /// Waiting.
    Pending,
    /// Evicted in the last cycle from the node.
    Evicted(String),
}

/// One eviction over the whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// Cycle number, from 1.
    pub cycle: u32,
    /// `namespace/pod`.
    pub pod: String,
    /// Preempt or reclaim.
    pub reason: EvictReason,
}

/// One restart of an elastic job at another size over the whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    /// Cycle number, from 1.
    pub cycle: u32,
    /// `namespace/job`.
    pub job: String,
    /// Pods before.
    pub from: u32,
    /// Pods after.
    pub to: u32,
    /// Why.
    pub why: String,
}

/// The state after the last cycle, plus the run's history of evictions and resizes.
pub struct SimResult {
    /// Cycles run.
    pub cycles: u32,
    /// The snapshot the last cycle ran on (names, queues, capacities).
    pub snapshot: Snapshot,
    /// The last cycle's outcome.
    pub last: CycleOutcome,
    /// Fate of every pod, indexed like `snapshot.pods`.
    pub fates: TiVec<PodId, PodFate>,
    /// Every eviction, in cycle order and by name within a cycle.
    pub evictions: Vec<Eviction>,
    /// Every resize of an elastic job, in cycle order and by job within a cycle.
    pub resizes: Vec<Resized>,
}

/// Runs `cycles` cycles of `config` on the scenario.
pub fn simulate(scenario: &Scenario, config: &SchedulerConfig, cycles: u32) -> Result<SimResult, SnapshotError> {
    // The scenario's jobs, copied once a cycle's decisions are carried into them.
    let mut jobs = Cow::Borrowed(&scenario.jobs);
    let mut evictions = Vec::new();
    let mut resizes = Vec::new();
    let mut cycle = 0;
    loop {
        cycle += 1;
        let mut snap = snapshot::build_with_topologies(&scenario.nodes, &scenario.queues, &scenario.topologies, &jobs)?
            .at(scenario.now);
        if config.time_based().is_some() {
            // The scenario's clock stands still: the ledger stays as the file gives it.
            snap.past_usage = scenario.usage.for_snapshot(&snap);
        }
        let outcome = run_cycle(&snap, config);
        let mut cycle_evictions: Vec<Eviction> = outcome
            .decisions
            .evictions
            .iter()
            .map(|&(p, reason, _)| Eviction { cycle, pod: pod_key(&snap, p), reason })
            .collect();
        cycle_evictions.sort_by(|a, b| a.pod.cmp(&b.pod));
        evictions.extend(cycle_evictions);
        resizes.extend(outcome.decisions.resizes.iter().map(|r| Resized {
            cycle,
            job: snap.jobs[r.job].key(),
            from: r.from,
            to: r.to,
            why: r.why.clone(),
        }));
        if cycle >= cycles {
            let node = |n: NodeId| snap.nodes[n].name.clone();
            let fates: TiVec<PodId, PodFate> = outcome
                .pod_state
                .iter()
                .map(|state| match *state {
                    PodState::Bound(n) | PodState::Allocated(n) => PodFate::Bound(node(n)),
                    PodState::Releasing(n) => PodFate::Evicted(node(n)),
                    PodState::Pending | PodState::Pipelined(_) => PodFate::Pending,
                })
                .collect();
            return Ok(SimResult { cycles, snapshot: snap, last: outcome, fates, evictions, resizes });
        }
        carry(jobs.to_mut(), &snap, &outcome, Termination::Immediate);
    }
}

/// The pod's `namespace/<job>-<task>-<index>` name (the namespace and the scenario's
/// [`pod_name`](crate::scenario::pod_name)).
pub fn pod_key(snap: &Snapshot, pod: PodId) -> String {
    let p = &snap.pods[pod];
    let job = &snap.jobs[p.job];
    let task = &job.tasks[p.task].name;
    let mut index = itoa::Buffer::new();
    let index = index.format(p.index);
    let mut key = String::with_capacity(job.namespace.len() + job.name.len() + task.len() + index.len() + 3);
    for part in [&job.namespace, "/", &job.name, "-", task, "-", index] {
        key.push_str(part);
    }
    key
}
