//! Runs the scheduling core on a scenario for a number of cycles. Between cycles, bindings
//! take effect, evicted pods release their resources and return to pending, and pods
//! pipelined behind evictions return to pending (the next cycle places them). Nothing in the
//! core knows it is simulated.

use drover_scheduler::carry::{carry, Termination};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::session::{EvictReason, PodState};
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueInput, Snapshot, SnapshotError, TaskInput,
};

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

/// The state after the last cycle, plus the run's history of evictions.
pub struct SimResult {
    /// Cycles run.
    pub cycles: u32,
    /// The snapshot the last cycle ran on (names, queues, capacities).
    pub snapshot: Snapshot,
    /// The last cycle's outcome.
    pub last: CycleOutcome,
    /// Fate of every pod, indexed like `snapshot.pods`.
    pub fates: Vec<PodFate>,
    /// Every eviction, in cycle order and by name within a cycle.
    pub evictions: Vec<Eviction>,
}

/// A scenario's cluster as inputs of `snapshot::build`.
pub struct Inputs {
    /// Nodes.
    pub nodes: Vec<NodeInput>,
    /// Queues.
    pub queues: Vec<QueueInput>,
    /// Jobs with their pods' initial phases.
    pub jobs: Vec<JobInput>,
}

/// Converts a scenario's cluster into snapshot inputs.
pub fn inputs(scenario: &Scenario) -> Inputs {
    Inputs { nodes: node_inputs(scenario), queues: queue_inputs(scenario), jobs: job_inputs(scenario) }
}

/// Runs `cycles` cycles of `config` on the scenario.
pub fn simulate(scenario: &Scenario, config: &SchedulerConfig, cycles: u32) -> Result<SimResult, SnapshotError> {
    let Inputs { nodes, queues, mut jobs } = inputs(scenario);
    let mut evictions = Vec::new();
    let mut cycle = 0;
    loop {
        cycle += 1;
        let snap = snapshot::build(&nodes, &queues, &jobs)?.at(scenario.now);
        let outcome = run_cycle(&snap, config);
        let node = |n: usize| snap.nodes[n].name.clone();
        let fates: Vec<PodFate> = outcome
            .pod_state
            .iter()
            .map(|state| match *state {
                PodState::Bound(n) | PodState::Allocated(n) => PodFate::Bound(node(n)),
                PodState::Releasing(n) => PodFate::Evicted(node(n)),
                PodState::Pending | PodState::Pipelined(_) => PodFate::Pending,
            })
            .collect();
        let mut cycle_evictions: Vec<Eviction> = outcome
            .decisions
            .evictions
            .iter()
            .map(|&(p, reason)| Eviction { cycle, pod: pod_key(&snap, p), reason })
            .collect();
        cycle_evictions.sort_by(|a, b| a.pod.cmp(&b.pod));
        evictions.extend(cycle_evictions);
        if cycle >= cycles {
            return Ok(SimResult { cycles, snapshot: snap, last: outcome, fates, evictions });
        }
        carry(&mut jobs, &snap, &outcome, Termination::Immediate);
    }
}

/// The pod's `namespace/<job>-<task>-<index>` name.
pub fn pod_key(snap: &Snapshot, pod: usize) -> String {
    let p = &snap.pods[pod];
    let job = &snap.jobs[p.job];
    format!("{}/{}", job.namespace, crate::scenario::pod_name(&job.name, &job.tasks[p.task].name, p.index))
}

fn node_inputs(s: &Scenario) -> Vec<NodeInput> {
    s.nodes
        .iter()
        .map(|n| NodeInput {
            name: n.name.clone(),
            allocatable: n.allocatable.clone(),
            labels: n.labels.clone(),
            taints: n.taints.clone(),
            unschedulable: n.unschedulable,
        })
        .collect()
}

fn queue_inputs(s: &Scenario) -> Vec<QueueInput> {
    s.queues
        .iter()
        .map(|q| QueueInput {
            name: q.name.clone(),
            parent: q.parent.clone(),
            deserved: q.deserved.clone(),
            limit: q.limit.clone(),
            over_quota_weight: q.over_quota_weight,
            reclaimable: q.reclaimable,
            strategy: q.queueing_strategy,
        })
        .collect()
}

fn job_inputs(s: &Scenario) -> Vec<JobInput> {
    s.jobs
        .iter()
        .map(|j| {
            let class = s.priority_classes.iter().find(|c| c.name == j.priority_class);
            let tasks: Vec<TaskInput> = j
                .tasks
                .iter()
                .map(|t| TaskInput {
                    name: t.name.clone(),
                    min_available: t.min_available.unwrap_or(0),
                    requests: t.requests.clone(),
                    constraints: Constraints {
                        node_selector: t.node_selector.clone(),
                        tolerations: t.tolerations.clone(),
                        affinity: t.affinity.clone(),
                    },
                    pods: (0..t.replicas as usize)
                        .map(|i| t.running.get(i).map_or(PodPhaseInput::Pending, |n| PodPhaseInput::Bound(n.clone())))
                        .collect(),
                })
                .collect();
            let running: u32 = j.tasks.iter().map(|t| t.running.len() as u32).sum();
            let tasks_ready = j.tasks.iter().all(|t| t.running.len() as u32 >= t.min_available.unwrap_or(0));
            let phase = if running >= j.min_member && tasks_ready {
                JobPhase::Running
            } else if running > 0 {
                JobPhase::Inqueue
            } else {
                JobPhase::Pending
            };
            JobInput {
                name: j.name.clone(),
                namespace: j.namespace.clone(),
                queue: j.queue.clone(),
                priority_class: j.priority_class.clone(),
                priority: class.map_or(0, |c| c.value),
                preemptible: class.is_none_or(|c| c.preemptible),
                min_member: j.min_member,
                created_at: j.created_at,
                phase,
                tasks,
                run_time: j.duration.map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
                ends_at: j
                    .duration
                    .filter(|_| running > 0)
                    .map(|d| j.started_at.unwrap_or(s.now).saturating_add(i64::try_from(d).unwrap_or(i64::MAX))),
            }
        })
        .collect()
}
