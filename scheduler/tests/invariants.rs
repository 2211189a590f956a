//! Property tests of the scheduling core. Random clusters (nodes with taints, cordons and
//! node pools), queue trees, priority classes and gang workloads, partly running already,
//! are scheduled for a few cycles; between cycles the outcome is carried into the next
//! cycle's inputs the way the simulator does it (bindings take effect, evicted and pipelined
//! pods return to pending; in half the cases evicted pods terminate only after one more
//! cycle, as in a real cluster). After every cycle one safety invariant of the engine is
//! checked; each invariant is its own test so that a failure names the broken rule.

use std::collections::BTreeMap;
use std::fmt;

use drover_api::{
    format_amount, tolerates_all, PriorityClass, ResourceList, Taint, TaintEffect, Toleration, TolerationOperator, CPU,
    GPU, MEMORY, NODE_POOL_LABEL, PODS,
};
use drover_scheduler::carry::{carry, Termination};
use drover_scheduler::config::{
    ActionName, ConfigOverrides, DrfConfig, FairShareMode, PlacementConfig, PlacementOverride, PlacementStrategy,
    PoolPlacement, SchedulerConfig, TimeBasedArgs,
};
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::ids::{ti_vec, JobId, NodeId, PodId, QueueId, TiVec};
use drover_scheduler::res::Res;
use drover_scheduler::session::{EvictReason, PodState};
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, LevelInput, NodeInput, PodPhase, PodPhaseInput, QueueBounds, QueueInput,
    QueueingStrategy, Snapshot, TaskInput, TopologyInput, TopologyRequestInput, ROOT,
};
use drover_scheduler::usage::memory_seconds;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

/// Cycles run per generated case.
const CYCLES: u32 = 3;
/// Cycles run per case by the reclaim ping-pong property: enough for an eviction, its pods'
/// termination (a cycle later with slow termination), a restart and a second eviction.
const PING_PONG_CYCLES: u32 = 6;
/// Bytes in a GiB.
const GIB: i64 = 1 << 30;
/// Deepest level of the generated queue tree (children of the root are at depth 1).
const MAX_DEPTH: usize = 3;
/// Node pools, as values of the node-pool label.
const POOLS: [&str; 2] = ["a", "b"];
/// The node label naming a node's rack.
const RACK_LABEL: &str = "rack";

/// A generated scenario: the scheduler's inputs before the first cycle and its configuration.
#[derive(Clone)]
struct Case {
    nodes: Vec<NodeInput>,
    queues: Vec<QueueInput>,
    jobs: Vec<JobInput>,
    overrides: ConfigOverrides,
    /// Evicted pods stay terminating (releasing their node) through the next cycle, as in a
    /// real cluster, instead of returning to pending at once as in the simulator.
    slow_termination: bool,
    /// Whether nodes' rack labels form a `default` topology (and jobs may require a rack).
    racks: bool,
    /// With time-based fair share, per queue in input order, its past usage of every
    /// resource in percent of what the cluster could have given it.
    past: Vec<u32>,
}

impl Case {
    /// The case's topologies: racks, when it has them.
    fn topologies(&self) -> Vec<TopologyInput> {
        let racks = TopologyInput {
            name: "default".into(),
            levels: vec![LevelInput { name: "rack".into(), node_label: RACK_LABEL.into() }],
        };
        if self.racks {
            vec![racks]
        } else {
            Vec::new()
        }
    }

    /// The snapshot of the case with `jobs`.
    fn build(&self, jobs: &[JobInput]) -> Result<Snapshot, snapshot::SnapshotError> {
        let mut snap = snapshot::build_with_topologies(&self.nodes, &self.queues, &self.topologies(), jobs)?;
        if let Some(time_based) = self.overrides.time_based {
            let memory = memory_seconds(&time_based);
            let past = |name: &str| {
                let i = self.queues.iter().position(|q| q.name == name);
                f64::from(i.and_then(|i| self.past.get(i)).copied().unwrap_or(0)) / 100.0
            };
            snap.past_usage = snap
                .queues
                .iter()
                .map(|q| snap.capacity.0.iter().map(|&c| past(&q.name) * c as f64 * memory).collect())
                .collect();
        }
        Ok(snap)
    }
}

/// One line per object, so that a shrunk failing case reads like a small scenario.
impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(f, "nodes:")?;
        for n in &self.nodes {
            let pool = n.labels.get(NODE_POOL_LABEL).map_or("", String::as_str);
            let taints: Vec<String> =
                n.taints.iter().map(|t| format!("{}={}:{:?}", t.key, t.value, t.effect)).collect();
            let rack = n.labels.get(RACK_LABEL).map_or("-", String::as_str);
            writeln!(
                f,
                "  {} [{}] pool {pool} rack {rack} taints {taints:?} cordoned {}",
                n.name,
                compact(&n.allocatable),
                n.unschedulable
            )?;
        }
        writeln!(f, "queues:")?;
        for (i, q) in self.queues.iter().enumerate() {
            if let Some(t) = self.overrides.time_based {
                let past = self.past.get(i).copied().unwrap_or(0);
                writeln!(f, "  (time-based, kValue {}: {} past usage {past}%)", t.k_value, q.name)?;
            }
            writeln!(
                f,
                "  {} parent {} deserved [{}] limit [{}] weight {} reclaimable {} {:?}",
                q.name,
                q.parent.as_deref().unwrap_or("-"),
                compact(&q.deserved),
                q.limit.as_ref().map_or("-".into(), compact),
                q.over_quota_weight,
                q.reclaimable,
                q.strategy
            )?;
        }
        writeln!(f, "jobs:")?;
        for j in &self.jobs {
            writeln!(
                f,
                "  {} queue {} priority {} preemptible {} minMember {} {:?} topology {:?}",
                j.name, j.queue, j.priority, j.preemptible, j.min_member, j.phase, j.topology
            )?;
            for t in &j.tasks {
                let pods: Vec<&str> = t
                    .pods
                    .iter()
                    .map(|p| match p {
                        PodPhaseInput::Bound(n) | PodPhaseInput::Releasing(n) => n.as_str(),
                        PodPhaseInput::Nominated(_) | PodPhaseInput::Pending => "-",
                    })
                    .collect();
                let c = &t.constraints;
                let tolerations: Vec<String> =
                    c.tolerations.iter().map(|t| format!("{}:{:?}={}", t.key, t.operator, t.value)).collect();
                writeln!(
                    f,
                    "    {} minAvailable {} [{}] selector {:?} tolerations {tolerations:?} pods {pods:?}",
                    t.name,
                    t.min_available,
                    compact(&t.requests),
                    c.node_selector
                )?;
            }
        }
        write!(f, "config: {:?}, slow termination {}, racks {}", self.overrides, self.slow_termination, self.racks)
    }
}

/// `cpu 4, memory 16Gi, …` in canonical amounts.
fn compact(list: &ResourceList) -> String {
    let parts: Vec<String> = list.0.iter().map(|(k, v)| format!("{k} {}", format_amount(k, *v))).collect();
    parts.join(", ")
}

/// A job before it is tied to a leaf queue, a priority class and an initial state.
#[derive(Debug, Clone)]
struct JobSpec {
    queue: Index,
    class: Index,
    min_member: Index,
    start: bool,
    extra: u32,
    offset: Index,
    tasks: Vec<TaskInput>,
    /// Where it asks to go when the case has racks: 0-1 one rack, 2 one node, 3 preferably
    /// one rack, else anywhere.
    topology: u8,
}

/// One cycle's inputs and outcome, as handed to an invariant.
struct Cycle<'a> {
    case: &'a Case,
    config: &'a SchedulerConfig,
    jobs: &'a [JobInput],
    snap: &'a Snapshot,
    out: &'a CycleOutcome,
    /// The earlier cycles of the run, oldest first: their snapshots and outcomes (object
    /// indices are the same in every cycle, as the inputs keep their order).
    earlier: &'a [(Snapshot, CycleOutcome)],
}

/// An invariant: `Err` describes the violation.
type Invariant = fn(&Cycle) -> Result<(), String>;

/// The taints a node may carry.
fn taint_choices() -> Vec<Taint> {
    let taint = |key: &str, value: &str, effect| Taint { key: key.into(), value: value.into(), effect };
    vec![
        taint("dedicated", "infer", TaintEffect::NoSchedule),
        taint("dedicated", "train", TaintEffect::NoSchedule),
        taint("gpu", "", TaintEffect::NoExecute),
        taint("soft", "", TaintEffect::PreferNoSchedule),
    ]
}

/// The tolerations a task may carry.
fn toleration_choices() -> Vec<Toleration> {
    let exists = |key: &str| Toleration { key: key.into(), operator: TolerationOperator::Exists, ..Default::default() };
    vec![
        Toleration { key: "dedicated".into(), value: "infer".into(), ..Default::default() },
        exists("dedicated"),
        exists("gpu"),
        exists(""),
    ]
}

/// A resource list from `(name, amount)` pairs, skipping absent amounts.
fn list(entries: &[(&str, Option<i64>)]) -> ResourceList {
    ResourceList(entries.iter().filter_map(|(k, v)| v.map(|v| (k.to_string(), v))).collect())
}

/// A node (named later): 4-64 cores, 0/4/8 GPUs, 4-110 pod slots, maybe a taint, maybe
/// cordoned, in one of two pools.
fn node() -> impl Strategy<Value = NodeInput> {
    (
        4i64..=64,
        16i64..=512,
        prop_oneof![Just(0i64), Just(4), Just(8)],
        4i64..=110,
        prop::option::weighted(0.3, 0..taint_choices().len()),
        prop::bool::weighted(0.15),
        0..POOLS.len(),
        prop::option::weighted(0.85, 0..3usize),
    )
        .prop_map(|(cores, mem, gpus, pods, taint, cordoned, pool, rack)| NodeInput {
            name: String::new(),
            allocatable: list(&[
                (CPU, Some(cores * 1000)),
                (MEMORY, Some(mem * GIB)),
                (GPU, (gpus > 0).then_some(gpus)),
                (PODS, Some(pods)),
            ]),
            labels: std::iter::once((NODE_POOL_LABEL.to_string(), POOLS[pool].to_string()))
                .chain(rack.map(|r| (RACK_LABEL.to_string(), format!("r{r}"))))
                .collect(),
            taints: taint.map(|t| taint_choices()[t].clone()).into_iter().collect(),
            unschedulable: cordoned,
        })
}

/// A queue (named and linked later) with the pick of its parent: random deserved quota over
/// a random subset of resources, optional limit, weight 0-3, reclaimable, strategy.
fn queue() -> impl Strategy<Value = (Index, QueueInput)> {
    let deserved = (
        prop::option::of((0i64..=128).prop_map(|c| c * 1000)),
        prop::option::of((0i64..=1024).prop_map(|m| m * GIB)),
        prop::option::of(0i64..=16),
    );
    let limit = prop::option::weighted(
        0.4,
        (prop::option::of((4i64..=256).prop_map(|c| c * 1000)), prop::option::of(0i64..=32)),
    );
    (any::<Index>(), deserved, limit, 0u32..=3, any::<bool>(), any::<bool>()).prop_map(
        |(parent, (cpu, mem, gpu), limit, weight, reclaimable, strict)| {
            let queue = QueueInput {
                name: String::new(),
                parent: None,
                deserved: list(&[(CPU, cpu), (MEMORY, mem), (GPU, gpu)]),
                limit: limit.map(|(cpu, gpu)| list(&[(CPU, cpu), (GPU, gpu)])),
                over_quota_weight: weight,
                reclaimable,
                strategy: if strict { QueueingStrategy::StrictFifo } else { QueueingStrategy::BestEffortFifo },
                bounds: QueueBounds::default(),
                owner: None,
            };
            (parent, queue)
        },
    )
}

/// A priority class value on either side of the non-preemptible threshold, and sometimes an
/// explicit preemptibility overriding the threshold.
fn class() -> impl Strategy<Value = (i32, Option<bool>)> {
    (0i32..200, prop::option::weighted(0.2, any::<bool>()))
}

/// A task (named later): 1-8 replicas, optional minAvailable, 0-4 GPUs or CPU only, optional
/// pool selector and toleration.
fn task() -> impl Strategy<Value = TaskInput> {
    (
        1usize..=8,
        prop::option::of(any::<Index>()),
        (1i64..=32).prop_map(|c| c * 500),
        1i64..=64,
        prop_oneof![3 => Just(0i64), 2 => 1i64..=4],
        prop::option::weighted(0.3, 0..POOLS.len()),
        prop::option::weighted(0.4, 0..toleration_choices().len()),
    )
        .prop_map(|(replicas, min_available, cpu, mem, gpus, pool, toleration)| TaskInput {
            name: String::new(),
            min_available: min_available.map_or(0, |i| i.index(replicas + 1) as u32),
            requests: list(&[(CPU, Some(cpu)), (MEMORY, Some(mem * GIB)), (GPU, (gpus > 0).then_some(gpus))]),
            constraints: Constraints {
                node_selector: pool.map(|p| (NODE_POOL_LABEL.to_string(), POOLS[p].to_string())).into_iter().collect(),
                tolerations: toleration.map(|t| toleration_choices()[t].clone()).into_iter().collect(),
                affinity: Vec::new(),
                min_nvlink_gpus: None,
            },
            pods: vec![PodPhaseInput::Pending; replicas],
            topology: None,
            slices: None,
        })
}

/// A job of one or two tasks, with whether (and how far beyond its minimum) it runs initially.
fn job() -> impl Strategy<Value = JobSpec> {
    (
        any::<Index>(),
        any::<Index>(),
        any::<Index>(),
        prop::bool::weighted(0.5),
        0u32..4,
        any::<Index>(),
        vec(task(), 1..=2),
        0u8..8,
    )
        .prop_map(|(queue, class, min_member, start, extra, offset, tasks, topology)| JobSpec {
            queue,
            class,
            min_member,
            start,
            extra,
            offset,
            tasks,
            topology,
        })
}

/// The configuration overrides: fair-share mode, placement per workload class, DRF ordering.
fn overrides() -> impl Strategy<Value = ConfigOverrides> {
    let strategy = || prop_oneof![Just(PlacementStrategy::Binpack), Just(PlacementStrategy::Spread)];
    (any::<bool>(), strategy(), strategy(), any::<bool>(), any::<bool>(), any::<bool>(), 0u8..4).prop_map(
        |(proportional, gpu, cpu, job_order, queue_order, consolidation, k)| ConfigOverrides {
            // Half the cases also run consolidation (off by default), after allocate as KAI does.
            actions: consolidation.then(|| {
                use ActionName::*;
                vec![Enqueue, Allocate, Consolidation, Preempt, Reclaim, Backfill]
            }),
            placement: Some(PlacementOverride::Full(PlacementConfig {
                default: PoolPlacement { gpu, cpu },
                pools: BTreeMap::new(),
            })),
            fair_share: Some(if proportional { FairShareMode::DemandProportional } else { FairShareMode::MaxMin }),
            drf: Some(DrfConfig { job_order, queue_order }),
            // Half the cases run time-based fair share, with kValue 0.5 to 2 (their queues'
            // past usage is drawn with the case).
            time_based: (k > 1).then(|| TimeBasedArgs {
                enabled: true,
                k_value: if k == 2 { 0.5 } else { 2.0 },
                ..TimeBasedArgs::default()
            }),
        },
    )
}

/// A whole case: 1-12 nodes, 1-6 queues, 0-8 priority classes, 1-15 jobs.
fn case() -> impl Strategy<Value = Case> {
    (
        vec(node(), 1..=12),
        vec(queue(), 1..=6),
        vec(class(), 0..=8),
        vec(job(), 1..=15),
        overrides(),
        any::<bool>(),
        any::<bool>(),
        vec(0u32..=100, 6),
    )
        .prop_map(|(nodes, queues, classes, jobs, overrides, slow, racks, past)| Case {
            past,
            ..assemble(nodes, queues, &classes, jobs, overrides, (slow, racks))
        })
}

/// Names the generated objects, links the queue tree, ties jobs to leaf queues and classes,
/// and starts some jobs on nodes where they fit.
fn assemble(
    mut nodes: Vec<NodeInput>,
    queues: Vec<(Index, QueueInput)>,
    classes: &[(i32, Option<bool>)],
    specs: Vec<JobSpec>,
    overrides: ConfigOverrides,
    (slow_termination, racks): (bool, bool),
) -> Case {
    for (i, n) in nodes.iter_mut().enumerate() {
        n.name = format!("n{i}");
    }
    let queues = link_queues(queues);
    let leaves: Vec<&QueueInput> =
        queues.iter().filter(|q| !queues.iter().any(|c| c.parent.as_ref() == Some(&q.name))).collect();
    let classes: Vec<PriorityClass> =
        classes.iter().enumerate().map(|(i, &(value, p))| PriorityClass::new(&format!("p{i}"), value, p)).collect();
    let mut usage = Usage { nodes: vec![ResourceList::default(); nodes.len()], queues: BTreeMap::new() };
    let mut jobs = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        let class = (!classes.is_empty()).then(|| &classes[spec.class.index(classes.len())]);
        let mut tasks = spec.tasks;
        for (t, task) in tasks.iter_mut().enumerate() {
            task.name = format!("t{t}");
        }
        let total: usize = tasks.iter().map(|t| t.pods.len()).sum();
        let mut job = JobInput {
            name: format!("j{i}"),
            namespace: "ns".into(),
            queue: leaves[spec.queue.index(leaves.len())].name.clone(),
            priority_class: class.map_or("default".into(), |c| c.name.clone()),
            priority: class.map_or(0, |c| c.value),
            preemptible: class.is_none_or(|c| c.preemptible),
            min_member: 1 + spec.min_member.index(total) as u32,
            min_resources: None,
            created_at: i as i64,
            phase: JobPhase::Pending,
            tasks,
            run_time: None,
            ends_at: None,
            preempted_at: None,
            started_at: None,
            topology: racks.then(|| topology_request(spec.topology)).flatten(),
            resize: None,
        };
        if spec.start {
            let counts = start_counts(&job, spec.extra);
            start_job(&mut job, &counts, &nodes, &queues, &mut usage, spec.offset.index(nodes.len()));
        }
        jobs.push(job);
    }
    Case { nodes, queues, jobs, overrides, slow_termination, racks, past: Vec::new() }
}

/// A job's topology request by its generated pick (see [`JobSpec::topology`]).
fn topology_request(pick: u8) -> Option<TopologyRequestInput> {
    let (required, preferred) = match pick {
        0 | 1 => (Some("rack"), None),
        2 => (Some("node"), None),
        3 => (None, Some("rack")),
        _ => return None,
    };
    Some(TopologyRequestInput {
        topology: "default".into(),
        required: required.map(String::from),
        preferred: preferred.map(String::from),
    })
}

/// Names queues `q0..` and hangs each under the root or an earlier queue (its pick), falling
/// back to the root where the tree would get deeper than `MAX_DEPTH`.
fn link_queues(specs: Vec<(Index, QueueInput)>) -> Vec<QueueInput> {
    let mut depth: Vec<usize> = Vec::with_capacity(specs.len());
    let mut out = Vec::with_capacity(specs.len());
    for (i, (pick, mut q)) in specs.into_iter().enumerate() {
        let parent = pick.index(i + 1).checked_sub(1).filter(|&p| depth[p] < MAX_DEPTH);
        depth.push(parent.map_or(1, |p| depth[p] + 1));
        q.name = format!("q{i}");
        q.parent = parent.map(|p| format!("q{p}"));
        out.push(q);
    }
    out
}

/// Resources held while the initial state is built: per node, and per queue name.
struct Usage {
    nodes: Vec<ResourceList>,
    queues: BTreeMap<String, ResourceList>,
}

/// Adds `b` to `a`, resource by resource.
fn add_list(a: &mut ResourceList, b: &ResourceList) {
    for (k, v) in &b.0 {
        *a.0.entry(k.clone()).or_insert(0) += v;
    }
}

/// Whether `used + req` stays within `cap`; a resource `cap` does not name counts as `missing`.
fn within(used: &ResourceList, req: &ResourceList, cap: &ResourceList, missing: i64) -> bool {
    req.0
        .iter()
        .all(|(k, v)| *v == 0 || used.0.get(k).copied().unwrap_or(0) + v <= cap.0.get(k).copied().unwrap_or(missing))
}

/// Whether a node admits pods with these constraints: not cordoned, taints tolerated,
/// node selector and required affinity matched.
fn admits(unschedulable: bool, labels: &BTreeMap<String, String>, taints: &[Taint], c: &Constraints) -> bool {
    !unschedulable
        && tolerates_all(&c.tolerations, taints).is_ok()
        && c.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        && c.affinity.iter().all(|r| r.matches(labels))
}

/// Pods to start per task: each task's minAvailable, then more in task order up to the
/// job's minMember, then up to `extra` elastic pods.
fn start_counts(job: &JobInput, extra: u32) -> Vec<u32> {
    let mut counts: Vec<u32> = job.tasks.iter().map(|t| t.min_available).collect();
    let mut have: u32 = counts.iter().sum();
    let want = job.min_member.max(have) + extra;
    for (t, task) in job.tasks.iter().enumerate() {
        let add = want.saturating_sub(have).min(task.pods.len() as u32 - counts[t]);
        counts[t] += add;
        have += add;
    }
    counts
}

/// Binds `counts[t]` pods of each task first-fit on nodes that admit them (starting at node
/// `offset`), within node allocatable and the limit of every queue on the job's path. The
/// job becomes Running when every pod fits and stays Pending (all pods pending) otherwise.
fn start_job(
    job: &mut JobInput,
    counts: &[u32],
    nodes: &[NodeInput],
    queues: &[QueueInput],
    usage: &mut Usage,
    offset: usize,
) {
    let path = queue_path(queues, &job.queue);
    let mut nodes_used = usage.nodes.clone();
    let mut queues_used = usage.queues.clone();
    let mut placed: Vec<Vec<PodPhaseInput>> = Vec::with_capacity(job.tasks.len());
    for (task, &count) in job.tasks.iter().zip(counts) {
        let mut req = task.requests.clone();
        req.0.insert(PODS.into(), 1);
        let mut pods = vec![PodPhaseInput::Pending; task.pods.len()];
        for pod in pods.iter_mut().take(count as usize) {
            let queues_ok = path.iter().all(|q| {
                let limit = q.limit.clone().unwrap_or_default();
                within(queues_used.get(&q.name).unwrap_or(&ResourceList::default()), &req, &limit, i64::MAX)
            });
            let node = (0..nodes.len()).map(|i| (i + offset) % nodes.len()).find(|&i| {
                let n = &nodes[i];
                admits(n.unschedulable, &n.labels, &n.taints, &task.constraints)
                    && within(&nodes_used[i], &req, &n.allocatable, 0)
            });
            let Some(node) = node.filter(|_| queues_ok) else {
                return;
            };
            add_list(&mut nodes_used[node], &req);
            for q in &path {
                add_list(queues_used.entry(q.name.clone()).or_default(), &req);
            }
            *pod = PodPhaseInput::Bound(nodes[node].name.clone());
        }
        placed.push(pods);
    }
    for (task, pods) in job.tasks.iter_mut().zip(placed) {
        task.pods = pods;
    }
    job.phase = JobPhase::Running;
    usage.nodes = nodes_used;
    usage.queues = queues_used;
}

/// The queue named `leaf` and its ancestors.
fn queue_path<'q>(queues: &'q [QueueInput], leaf: &str) -> Vec<&'q QueueInput> {
    let by_name = |name: &str| queues.iter().find(|q| q.name == name);
    std::iter::successors(by_name(leaf), |q| q.parent.as_deref().and_then(by_name)).collect()
}

/// The scheduler configuration of a case.
fn config_of(case: &Case) -> SchedulerConfig {
    let mut config = SchedulerConfig::default();
    config.apply(&case.overrides);
    config
}

/// Runs `CYCLES` cycles of the case, checking `invariant` after each and carrying each
/// outcome into the next cycle's inputs.
fn run_checked(case: &Case, invariant: Invariant) -> Result<(), TestCaseError> {
    run_checked_for(case, invariant, CYCLES)
}

/// Runs `cycles` cycles of the case, checking `invariant` after each (with the earlier
/// cycles at hand) and carrying each outcome into the next cycle's inputs.
fn run_checked_for(case: &Case, invariant: Invariant, cycles: u32) -> Result<(), TestCaseError> {
    let config = config_of(case);
    let mut jobs = case.jobs.clone();
    let mut earlier: Vec<(Snapshot, CycleOutcome)> = Vec::new();
    for number in 1..=cycles {
        let snap =
            case.build(&jobs).map_err(|e| TestCaseError::fail(format!("generated inputs are inconsistent: {e}")))?;
        let out = run_cycle(&snap, &config);
        let cycle = Cycle { case, config: &config, jobs: &jobs, snap: &snap, out: &out, earlier: &earlier };
        invariant(&cycle).map_err(|e| TestCaseError::fail(format!("cycle {number}: {e}")))?;
        carry(&mut jobs, &snap, &out, termination(case));
        earlier.push((snap, out));
    }
    Ok(())
}

/// How the case's evicted pods terminate.
fn termination(case: &Case) -> Termination {
    if case.slow_termination {
        Termination::Slow
    } else {
        Termination::Immediate
    }
}

/// Requests of one pod (including its pod slot).
fn requests(snap: &Snapshot, pod: PodId) -> &Res {
    let p = &snap.pods[pod];
    &snap.jobs[p.job].tasks[p.task].requests
}

/// `namespace/job-task-index` of a pod.
fn pod_name(snap: &Snapshot, pod: PodId) -> String {
    let p = &snap.pods[pod];
    let job = &snap.jobs[p.job];
    format!("{}-{}-{}", job.key(), job.tasks[p.task].name, p.index)
}

/// Per node and resource: requests of pods holding it (bound, allocated, releasing) plus
/// pipelined requests beyond what releasing pods free, never above allocatable.
fn nodes_not_over_committed(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    let zero: TiVec<NodeId, Res> = ti_vec![Res::zero(snap.resources.len()); snap.nodes.len()];
    let (mut held, mut releasing, mut pipelined) = (zero.clone(), zero.clone(), zero);
    for (p, state) in c.out.pod_state.iter_enumerated() {
        let req = requests(snap, p);
        match *state {
            PodState::Bound(n) | PodState::Allocated(n) => held[n].add(req),
            PodState::Releasing(n) => {
                held[n].add(req);
                releasing[n].add(req);
            }
            PodState::Pipelined(n) => pipelined[n].add(req),
            PodState::Pending => {}
        }
    }
    for (n, node) in snap.nodes.iter_enumerated() {
        for r in 0..snap.resources.len() {
            let committed = held[n][r] + (pipelined[n][r] - releasing[n][r]).max(0);
            if committed > node.allocatable[r] {
                return Err(format!(
                    "node {} over-committed in {}: {} held + {} pipelined - {} releasing > {} allocatable",
                    node.name, snap.resources[r], held[n][r], pipelined[n][r], releasing[n][r], node.allocatable[r]
                ));
            }
        }
    }
    Ok(())
}

/// Running (bound or allocated) pods per job and per task after the cycle.
fn running_counts(snap: &Snapshot, out: &CycleOutcome) -> TiVec<JobId, Vec<u32>> {
    let mut counts: TiVec<JobId, Vec<u32>> = snap.jobs.iter().map(|j| vec![0; j.tasks.len()]).collect();
    for (p, state) in out.pod_state.iter_enumerated() {
        if state.running_on().is_some() {
            counts[snap.pods[p].job][snap.pods[p].task] += 1;
        }
    }
    counts
}

/// Every job with a running pod after the cycle (evictions counted) runs at least minMember
/// pods, and each of its tasks at least minAvailable.
fn gangs_at_or_above_minimum(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    for (j, tasks) in running_counts(snap, c.out).iter_enumerated() {
        let job = &snap.jobs[j];
        let running: u32 = tasks.iter().sum();
        if running == 0 {
            continue;
        }
        let evicted = c.out.decisions.evictions.iter().filter(|(p, ..)| snap.pods[*p].job == j).count();
        let short_task = job.tasks.iter().zip(tasks).find(|(t, &n)| n < t.min_available);
        if running < job.min_member || short_task.is_some() {
            return Err(format!(
                "job {} runs {running} pods per task {tasks:?} (minMember {}, minAvailable {:?}) after {evicted} eviction(s)",
                job.key(),
                job.min_member,
                job.tasks.iter().map(|t| t.min_available).collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// No pod of a non-preemptible job is evicted.
fn only_preemptible_evicted(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    // Non-preemptible work beyond its queue's deserved quota is a victim like any other.
    let mut np = ti_vec![Res::zero(snap.resources.len()); snap.queues.len()];
    for (p, pod) in snap.pods.iter_enumerated() {
        let job = &snap.jobs[pod.job];
        if !job.preemptible && matches!(pod.phase, PodPhase::Bound(_)) {
            np[job.queue].add(requests(snap, p));
        }
    }
    // A unit is one pod or a whole job: judged here on what any pod of the job asks for.
    let beyond_deserved = |p: PodId| {
        let job = &snap.jobs[snap.pods[p].job];
        let (used, deserved) = (&np[job.queue], &snap.queues[job.queue].deserved);
        let asks = |r: usize| job.tasks.iter().any(|t| t.requests[r] > 0);
        (0..used.len()).any(|r| snap.quota_resources[r] && asks(r) && used[r] > deserved[r])
    };
    let wrong = c.out.decisions.evictions.iter().find(|(p, ..)| {
        let job = &snap.jobs[snap.pods[*p].job];
        !job.preemptible && !beyond_deserved(*p)
    });
    match wrong {
        Some(&(p, reason, _)) => {
            let job = &snap.jobs[snap.pods[p].job];
            Err(format!(
                "{reason:?} evicted {} of non-preemptible job {} (priority {}) within its queue's deserved quota",
                pod_name(snap, p),
                job.key(),
                job.priority
            ))
        }
        None => Ok(()),
    }
}

/// The resources of running pods of every queue, including its descendants' (index 0: all).
fn queue_usage(snap: &Snapshot, out: &CycleOutcome) -> TiVec<QueueId, Res> {
    let mut usage = ti_vec![Res::zero(snap.resources.len()); snap.queues.len()];
    for (p, state) in out.pod_state.iter_enumerated() {
        if state.running_on().is_some() {
            let leaf = snap.jobs[snap.pods[p].job].queue;
            for q in snap.ancestry(leaf).chain([ROOT]) {
                usage[q].add(requests(snap, p));
            }
        }
    }
    usage
}

/// No queue's running pods (its own and its descendants') exceed its limit.
fn queues_within_limits(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    for (q, used) in queue_usage(snap, c.out).iter_enumerated() {
        let limit = &snap.queues[q].limit;
        if let Some(r) = used.first_exceeding(limit) {
            return Err(format!(
                "queue {} runs {} {} > limit {}",
                snap.queues[q].name, snap.resources[r], used[r], limit[r]
            ));
        }
    }
    Ok(())
}

/// Fair shares nest: children's shares sum to at most their parent's, the root's to at most
/// the allocatable of schedulable nodes, and no queue's share exceeds its limit.
fn fair_shares_consistent(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    let fair: TiVec<QueueId, &Res> = c.out.queues.iter().map(|o| &o.fair_share).collect();
    let mut capacity = Res::zero(snap.resources.len());
    for node in snap.nodes.iter().filter(|n| !n.unschedulable) {
        capacity.add(&node.allocatable);
    }
    // The pod count is node capacity, not shared by fair share (unbounded there by design).
    let exceeding = |a: &Res, b: &Res| (0..a.len()).find(|&r| r != snap.pods_resource && a[r] > b[r]);
    if let Some(r) = exceeding(fair[ROOT], &capacity) {
        return Err(format!("root fair share {} {} > capacity {}", snap.resources[r], fair[ROOT][r], capacity[r]));
    }
    for (q, queue) in snap.queues.iter_enumerated() {
        let mut children = Res::zero(snap.resources.len());
        for &child in &queue.children {
            children.add(fair[child]);
        }
        if let Some(r) = exceeding(&children, fair[q]) {
            return Err(format!(
                "children of queue {:?} share {} {} > its fair share {}",
                queue.name, snap.resources[r], children[r], fair[q][r]
            ));
        }
        if let Some(r) = exceeding(fair[q], &queue.limit) {
            return Err(format!(
                "queue {} fair share {} {} > limit {}",
                queue.name, snap.resources[r], fair[q][r], queue.limit[r]
            ));
        }
    }
    Ok(())
}

/// Every newly bound or pipelined pod's node is schedulable, its taints tolerated and its
/// labels matching the task's node selector.
fn placements_respect_predicates(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    let placed = c
        .out
        .decisions
        .binds
        .iter()
        .map(|b| ("bound", b))
        .chain(c.out.decisions.pipelined.iter().map(|b| ("pipelined", b)));
    for (how, &(p, n)) in placed {
        let pod = &snap.pods[p];
        let constraints = &snap.jobs[pod.job].tasks[pod.task].constraints;
        let node = &snap.nodes[n];
        if !admits(node.unschedulable, &node.labels, &node.taints, constraints) {
            return Err(format!(
                "{} {how} to node {} (cordoned {}, taints {:?}, labels {:?}) against its constraints {constraints:?}",
                pod_name(snap, p),
                node.name,
                node.unschedulable,
                node.taints,
                node.labels
            ));
        }
    }
    Ok(())
}

/// Every pod a job that requires a topology level gets in a cycle (bound or pipelined) lies
/// in one domain of that level, on a node that has the level's label, and in the domain of
/// its pods that ran before the cycle and still run, when they all share one. A job whose
/// running pods already span domains (its request was edited after they bound) is pinned to
/// the domain holding most of them when it is placed, and evictions later in the cycle may
/// empty that one, so its new pods need only go where some of them ran. Pods on nodes
/// without the level's label pin nothing: a job left with only such pods once evictions
/// took the others is placed afresh.
fn gangs_stay_in_their_domain(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    let domain = |t: usize, level: usize, n: NodeId| {
        let topo = &snap.topologies[t];
        if level == topo.node_level() {
            Some(n.0)
        } else {
            topo.domain_of(level, n)
        }
    };
    for (j, job) in snap.jobs.iter_enumerated() {
        let Some((t, level)) = job.topology.and_then(|r| Some((r.topology, r.required?))) else { continue };
        let name = &snap.topologies[t].levels[level];
        // Domains of the pods that ran before the cycle, and whether each still runs after it
        // (a job that lost them all, or keeps only pods outside any domain, starts afresh,
        // anywhere).
        let ran: Vec<(Option<usize>, bool)> = snap
            .pods
            .iter_enumerated()
            .filter(|(_, p)| p.job == j)
            .filter_map(|(id, p)| match p.phase {
                PodPhase::Bound(n) => Some((domain(t, level, n), matches!(c.out.pod_state[id], PodState::Bound(_)))),
                _ => None,
            })
            .collect();
        let allowed: Vec<usize> = if ran.iter().any(|&(d, still)| still && d.is_some()) {
            let mut ds: Vec<usize> = ran.iter().filter_map(|&(d, _)| d).collect();
            ds.sort_unstable();
            ds.dedup();
            ds
        } else {
            Vec::new()
        };
        let placed =
            c.out.decisions.binds.iter().chain(&c.out.decisions.pipelined).filter(|(p, _)| snap.pods[*p].job == j);
        let mut seen: Option<usize> = None;
        for &(p, n) in placed {
            let Some(d) = domain(t, level, n) else {
                return Err(format!(
                    "{} went to node {} without a {name} label",
                    pod_name(snap, p),
                    snap.nodes[n].name
                ));
            };
            if seen.is_some_and(|s| s != d) || (!allowed.is_empty() && !allowed.contains(&d)) {
                return Err(format!(
                    "{} went to another {name} than its job's other pods; decisions:\n{}",
                    pod_name(snap, p),
                    history(c)
                ));
            }
            seen = Some(d);
        }
    }
    Ok(())
}

/// Every bound pod was pending at the start of the cycle and is bound once.
fn binds_unique_and_from_pending(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    let mut seen: TiVec<PodId, bool> = ti_vec![false; snap.pods.len()];
    for &(p, n) in &c.out.decisions.binds {
        let name = pod_name(snap, p);
        if std::mem::replace(&mut seen[p], true) {
            return Err(format!("{name} bound twice"));
        }
        if snap.pods[p].phase != PodPhase::Pending {
            return Err(format!("{name} bound to {} while {:?} at the start", snap.nodes[n].name, snap.pods[p].phase));
        }
    }
    Ok(())
}

/// Every pod bound by the cycle ends it allocated to that node: no pod is bound and then
/// evicted (or moved) within one cycle.
fn binds_stand(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    for &(p, n) in &c.out.decisions.binds {
        if c.out.pod_state[p] != PodState::Allocated(n) {
            let evictions: Vec<_> = c.out.decisions.evictions.iter().filter(|(e, ..)| *e == p).collect();
            return Err(format!(
                "{} bound to {} but ends {:?} (evictions {evictions:?})",
                pod_name(snap, p),
                snap.nodes[n].name,
                c.out.pod_state[p]
            ));
        }
    }
    Ok(())
}

/// The same inputs, built into a fresh snapshot and scheduled again, give the same outcome.
fn deterministic(c: &Cycle) -> Result<(), String> {
    let snap = c.case.build(c.jobs).map_err(|e| e.to_string())?;
    let again = run_cycle(&snap, c.config);
    let parts = |o: &CycleOutcome| {
        [
            ("binds", format!("{:?}", o.decisions.binds)),
            ("evictions", format!("{:?}", o.decisions.evictions)),
            ("pipelined", format!("{:?}", o.decisions.pipelined)),
            ("pod states", format!("{:?}", o.pod_state)),
            ("job phases", format!("{:?}", o.job_phase)),
            ("reasons", format!("{:?}", o.reasons)),
        ]
    };
    for ((what, first), (_, second)) in parts(c.out).into_iter().zip(parts(&again)) {
        if first != second {
            return Err(format!("{what} differ between two runs: {first} vs {second}"));
        }
    }
    Ok(())
}

/// Every job with a waiting pod says why, in words a user can act on: never empty, never
/// a dangling `; `, and naming a queue, a resource or a node condition (nodes, or pods still
/// terminating on them); naming only a rule (`not admitted yet`) is not enough.
fn reasons_name_what_blocks(c: &Cycle) -> Result<(), String> {
    let snap = c.snap;
    for (j, job) in snap.jobs.iter_enumerated() {
        let waiting = job
            .tasks
            .iter()
            .flat_map(|t| &t.pods)
            .any(|&p| !matches!(c.out.pod_state[p], PodState::Bound(_) | PodState::Allocated(_)));
        if !waiting {
            continue;
        }
        let reason = c.out.reasons[j].as_deref().unwrap_or("");
        let names_queue = snap.queues.iter().any(|q| reason.contains(&format!("queue {}", q.name)));
        let names_resource = snap.resources.iter().any(|r| reason.contains(r.as_str()));
        let names_node_condition = reason.contains("node") || reason.contains("terminat");
        let names_something = names_queue || names_resource || names_node_condition;
        if reason.is_empty() || reason.starts_with(';') || reason.contains("; ;") || !names_something {
            return Err(format!("job {} waits with the reason {reason:?}", job.key()));
        }
    }
    Ok(())
}

/// Whether the job runs its gang minimum (overall and per task) in `out`.
fn ready(snap: &Snapshot, out: &CycleOutcome, job: JobId) -> bool {
    let counts = &running_counts(snap, out)[job];
    let j = &snap.jobs[job];
    counts.iter().sum::<u32>() >= j.min_member && j.tasks.iter().zip(counts).all(|(t, &n)| n >= t.min_available)
}

/// The one job every eviction of the cycle was made for, when there is one: each eviction
/// (preemption, reclaim or consolidation move) pipelines the job it makes room for, so when
/// a single job is pipelined and pods were evicted, they were evicted for it.
fn lone_evictor(snap: &Snapshot, out: &CycleOutcome) -> Option<JobId> {
    if out.decisions.evictions.is_empty() {
        return None;
    }
    let mut evictors: Vec<JobId> = out.decisions.pipelined.iter().map(|&(p, _)| snap.pods[p].job).collect();
    evictors.sort_unstable();
    evictors.dedup();
    match evictors[..] {
        [evictor] => Some(evictor),
        _ => None,
    }
}

/// Running (bound or allocated) pods of a job after the cycle.
fn running_of(snap: &Snapshot, out: &CycleOutcome, job: JobId) -> u32 {
    running_counts(snap, out)[job].iter().sum()
}

/// Nothing is evicted for a job that could have been placed without it. When one job is
/// the evictor of every eviction of a cycle (see [`lone_evictor`]) — by preemption, by
/// reclaim (for its gang or for one elastic pod) or by consolidation — the same cycle
/// without the evicting actions (allocate and backfill alone, on the same state the first
/// evicting action saw, as nothing else was pipelined) must not run more pods of that job
/// than the real cycle did: otherwise the job fitted idle capacity and the evictions were
/// needless.
fn evictions_needed(c: &Cycle) -> Result<(), String> {
    let (snap, out) = (c.snap, c.out);
    let Some(evictor) = lone_evictor(snap, out) else { return Ok(()) };
    let mut calm = c.config.clone();
    calm.actions.retain(|a| !matches!(a, ActionName::Preempt | ActionName::Reclaim | ActionName::Consolidation));
    let (real, without) = (running_of(snap, out, evictor), running_of(snap, &run_cycle(snap, &calm), evictor));
    if without > real {
        let victims: Vec<String> =
            out.decisions.evictions.iter().map(|&(p, r, _)| format!("{} ({r:?})", pod_name(snap, p))).collect();
        return Err(format!(
            "{victims:?} evicted for {}, which runs {without} pods without them (and {real} with them)",
            snap.jobs[evictor].key()
        ));
    }
    Ok(())
}

/// The leaf queue that every reclaim of the cycle was made for, when the cycle reclaimed
/// and every pipelined job is in that one queue (a reclaim pipelines the job it reclaims
/// for); `None` when the cycle reclaimed nothing or its reclaimers cannot be told apart.
fn reclaimed_for(snap: &Snapshot, out: &CycleOutcome) -> Option<QueueId> {
    if !out.decisions.evictions.iter().any(|&(_, r, _)| r == EvictReason::Reclaim) {
        return None;
    }
    let mut queues: Vec<QueueId> =
        out.decisions.pipelined.iter().map(|&(p, _)| snap.jobs[snap.pods[p].job].queue).collect();
    queues.sort_unstable();
    queues.dedup();
    match queues[..] {
        [q] => Some(q),
        _ => None,
    }
}

/// Jobs that lost pods to reclaim in the cycle.
fn reclaim_victims(snap: &Snapshot, out: &CycleOutcome) -> Vec<JobId> {
    let mut jobs: Vec<JobId> = out
        .decisions
        .evictions
        .iter()
        .filter(|&&(_, r, _)| r == EvictReason::Reclaim)
        .map(|&(p, ..)| snap.pods[p].job)
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    jobs
}

/// No reclaim ping-pong: a job that lost pods to reclaim for queue Q in cycle k and then ran
/// pods again (a pod of it bound in a later cycle, or in this one before reclaim) is not
/// evicted by reclaim for Q again while Q gained nothing from the first eviction, that is
/// while every pod of Q bound at the start of this cycle, or bound by this cycle, was
/// already bound at the start of cycle k. (The capacity went back to the victim and Q takes it again.) Only cycles whose
/// reclaims were all made for one queue are judged (see [`reclaimed_for`]); the simulated
/// world changes only by the scheduler's decisions, so nothing else changed in between.
fn no_reclaim_ping_pong(c: &Cycle) -> Result<(), String> {
    let (snap, out) = (c.snap, c.out);
    let Some(q) = reclaimed_for(snap, out) else { return Ok(()) };
    let bound = |s: &Snapshot, p: PodId| matches!(s.pods[p].phase, PodPhase::Bound(_));
    for job in reclaim_victims(snap, out) {
        let first =
            c.earlier.iter().rposition(|(s, o)| reclaimed_for(s, o) == Some(q) && reclaim_victims(s, o).contains(&job));
        let Some(k) = first else { continue };
        let later = c.earlier[k + 1..].iter().map(|(s, o)| (s, o)).chain([(snap, out)]);
        let restarted = later.into_iter().any(|(s, o)| o.decisions.binds.iter().any(|&(p, _)| s.pods[p].job == job));
        let before = &c.earlier[k].0;
        let of_q = |p: PodId| snap.jobs[snap.pods[p].job].queue == q;
        let gained = snap.pods.keys().any(|p| of_q(p) && bound(snap, p) && !bound(before, p))
            || out.decisions.binds.iter().any(|&(p, _)| of_q(p) && !bound(before, p));
        if restarted && !gained {
            return Err(format!(
                "job {} was reclaimed for queue {} in cycle {}, ran again, and is reclaimed for it again; \
                 decisions per cycle:\n{}",
                snap.jobs[job].key(),
                snap.queues[q].name,
                k + 1,
                history(c)
            ));
        }
    }
    Ok(())
}

/// Every cycle's decisions so far, one line per cycle, and the reasons of waiting jobs after
/// the last one: what a failure message needs to be followed by hand.
fn history(c: &Cycle) -> String {
    let cycles = c.earlier.iter().map(|(s, o)| (s, o)).chain([(c.snap, c.out)]);
    let mut lines: Vec<String> = cycles
        .enumerate()
        .map(|(i, (s, o))| {
            let d = &o.decisions;
            let placed = |list: &[(PodId, NodeId)]| {
                list.iter().map(|&(p, n)| format!("{}@{}", pod_name(s, p), s.nodes[n].name)).collect::<Vec<_>>()
            };
            let evicted: Vec<String> =
                d.evictions.iter().map(|&(p, r, _)| format!("{} ({r:?})", pod_name(s, p))).collect();
            format!(
                "  cycle {}: binds {:?}; evictions {:?}; pipelined {:?}",
                i + 1,
                placed(&d.binds),
                evicted,
                placed(&d.pipelined)
            )
        })
        .collect();
    for (j, why) in c.out.reasons.iter_enumerated() {
        if let Some(why) = why {
            lines.push(format!("  {} waits: {why}", c.snap.jobs[j].key()));
        }
    }
    lines.join("\n")
}

/// 256 cases per property (`PROPTEST_CASES` overrides, for longer soak runs), and no
/// regression files written next to the sources.
fn proptest_config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn nodes_are_never_over_committed(case in case()) {
        run_checked(&case, nodes_not_over_committed)?;
    }

    #[test]
    fn gangs_never_run_below_their_minimum(case in case()) {
        run_checked(&case, gangs_at_or_above_minimum)?;
    }

    #[test]
    fn non_preemptible_pods_within_deserved_quota_are_never_evicted(case in case()) {
        run_checked(&case, only_preemptible_evicted)?;
    }

    #[test]
    fn queues_never_exceed_their_limit(case in case()) {
        run_checked(&case, queues_within_limits)?;
    }

    #[test]
    fn fair_shares_nest_within_capacity_and_limits(case in case()) {
        run_checked(&case, fair_shares_consistent)?;
    }

    #[test]
    fn placements_respect_node_predicates(case in case()) {
        run_checked(&case, placements_respect_predicates)?;
    }

    #[test]
    fn pods_are_bound_once_and_only_from_pending(case in case()) {
        run_checked(&case, binds_unique_and_from_pending)?;
    }

    #[test]
    fn pods_bound_in_a_cycle_are_not_evicted_in_it(case in case()) {
        run_checked(&case, binds_stand)?;
    }

    #[test]
    fn every_waiting_job_says_what_blocks_it(case in case()) {
        run_checked(&case, reasons_name_what_blocks)?;
    }

    #[test]
    fn cycles_are_deterministic(case in case()) {
        run_checked(&case, deterministic)?;
    }

    #[test]
    fn gangs_that_require_a_domain_stay_inside_one(case in case()) {
        run_checked(&case, gangs_stay_in_their_domain)?;
    }

    #[test]
    fn nothing_is_evicted_for_a_job_that_fits_without_it(case in case()) {
        run_checked(&case, evictions_needed)?;
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Drawn from random seeds, as the other properties are. Before kept claims, random
    /// draws found a ping-pong in about one generated cluster in 2,000 to 12,000 (a gang
    /// pipelined onto other nodes in the next cycle), so it ran from a fixed seed; with them,
    /// five runs in a row of 20,000 cases hold.
    #[test]
    fn no_job_is_reclaimed_again_for_the_same_queue(case in case()) {
        run_checked_for(&case, no_reclaim_ping_pong, PING_PONG_CYCLES)?;
    }
}

/// Guards against vacuous properties: over as many cases as each property runs (drawn with
/// a fixed seed), the generated workloads must bind, pipeline and evict pods, start some jobs
/// initially, preempt and reclaim for a lone job, reclaim for one queue and move pods by
/// consolidation.
#[test]
fn generated_cases_exercise_binding_and_eviction() {
    // A fixed seed: the counts are the same on every run, so the check cannot flake.
    let rng = proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(proptest_config(), rng);
    let strategy = case();
    let (mut started, mut binds, mut pipelined, mut evictions) = (0, 0, 0, 0);
    // Cycles the needless-eviction property judges (one evictor), by the evictions' kind, and
    // cycles whose reclaims the ping-pong property can attribute to one queue.
    let (mut lone_preemptions, mut lone_reclaims, mut attributed_reclaims) = (0, 0, 0);
    let mut moves = 0;
    for _ in 0..proptest_config().cases {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        started += case.jobs.iter().filter(|j| j.phase == JobPhase::Running).count();
        let config = config_of(&case);
        let mut jobs = case.jobs.clone();
        for _ in 0..CYCLES {
            let snap = case.build(&jobs).expect("consistent inputs");
            let out = run_cycle(&snap, &config);
            binds += out.decisions.binds.len();
            pipelined += out.decisions.pipelined.len();
            evictions += out.decisions.evictions.len();
            let reasons: Vec<EvictReason> = out.decisions.evictions.iter().map(|&(_, r, _)| r).collect();
            if lone_evictor(&snap, &out).is_some() {
                lone_preemptions += usize::from(reasons.contains(&EvictReason::Preempt));
                lone_reclaims += usize::from(reasons.contains(&EvictReason::Reclaim));
            }
            attributed_reclaims += usize::from(reclaimed_for(&snap, &out).is_some());
            moves += reasons.iter().filter(|&&r| r == EvictReason::Consolidate).count();
            carry(&mut jobs, &snap, &out, termination(&case));
        }
    }
    eprintln!(
        "started {started} jobs; {binds} binds, {pipelined} pipelined, {evictions} evictions; \
         {lone_preemptions} cycles with one preemptor, {lone_reclaims} with one reclaimer, \
         {attributed_reclaims} with reclaims for one queue, {moves} pods moved by consolidation"
    );
    assert!(started > 0 && binds > 0 && pipelined > 0 && evictions > 0);
    assert!(lone_preemptions > 0 && lone_reclaims > 0 && attributed_reclaims > 0 && moves > 0);
}

/// A hand-made case: one node in pool `a`, one queue limited to 2 CPUs, and a
/// non-preemptible gang of five 1-CPU pods (minMember 2) that selects pool `b`.
fn tiny_case() -> Case {
    Case {
        nodes: vec![NodeInput {
            name: "n0".into(),
            allocatable: list(&[(CPU, Some(4000)), (PODS, Some(8))]),
            labels: BTreeMap::from([(NODE_POOL_LABEL.to_string(), "a".to_string())]),
            taints: Vec::new(),
            unschedulable: false,
        }],
        queues: vec![QueueInput {
            name: "q0".into(),
            parent: None,
            deserved: list(&[(CPU, Some(4000))]),
            limit: Some(list(&[(CPU, Some(2000))])),
            over_quota_weight: 1,
            reclaimable: true,
            strategy: QueueingStrategy::BestEffortFifo,
            bounds: QueueBounds::default(),
            owner: None,
        }],
        jobs: vec![JobInput {
            name: "j0".into(),
            namespace: "ns".into(),
            queue: "q0".into(),
            priority_class: "build".into(),
            priority: 100,
            preemptible: false,
            min_member: 2,
            min_resources: None,
            created_at: 0,
            phase: JobPhase::Pending,
            tasks: vec![TaskInput {
                name: "t0".into(),
                min_available: 0,
                requests: list(&[(CPU, Some(1000))]),
                constraints: Constraints {
                    node_selector: BTreeMap::from([(NODE_POOL_LABEL.to_string(), "b".to_string())]),
                    ..Constraints::default()
                },
                pods: vec![PodPhaseInput::Pending; 5],
                topology: None,
                slices: None,
            }],
            run_time: None,
            ends_at: None,
            preempted_at: None,
            started_at: None,
            topology: None,
            resize: None,
        }],
        overrides: ConfigOverrides::default(),
        slow_termination: false,
        racks: false,
        past: Vec::new(),
    }
}

/// Pods of a job that requires a rack placed in two racks in one cycle are caught.
#[test]
fn a_gang_split_across_racks_is_detected() {
    let mut case = tiny_case();
    case.racks = true;
    let first = case.nodes[0].clone();
    case.nodes = (0..2)
        .map(|i| {
            let mut n = first.clone();
            n.name = format!("n{i}");
            n.labels.insert(RACK_LABEL.into(), format!("r{i}"));
            n
        })
        .collect();
    case.jobs[0].topology = topology_request(0);
    let config = config_of(&case);
    let snap = case.build(&case.jobs).expect("consistent inputs");
    let clean = run_cycle(&snap, &config);
    let check = |out: &CycleOutcome| {
        gangs_stay_in_their_domain(&Cycle {
            case: &case,
            config: &config,
            jobs: &case.jobs,
            snap: &snap,
            out,
            earlier: &[],
        })
    };
    assert_eq!(check(&clean), Ok(()));
    let mut split = clean.clone();
    split.decisions.binds.extend([(PodId(0), NodeId(0)), (PodId(1), NodeId(1))]);
    assert!(check(&split).is_err(), "a gang in two racks passes");
}

/// An eviction of any kind (preemption, reclaim, consolidation move) recorded for a job that
/// fits idle capacity is caught as needless.
#[test]
fn a_needless_eviction_is_detected() {
    let mut case = tiny_case();
    case.jobs[0].tasks[0].constraints = Constraints::default();
    let config = config_of(&case);
    let snap = case.build(&case.jobs).expect("consistent inputs");
    let clean = run_cycle(&snap, &config);
    let check = |out: &CycleOutcome| {
        evictions_needed(&Cycle { case: &case, config: &config, jobs: &case.jobs, snap: &snap, out, earlier: &[] })
    };
    assert!(ready(&snap, &clean, JobId(0)), "the job starts on idle capacity");
    assert_eq!(check(&clean), Ok(()));
    for reason in [EvictReason::Preempt, EvictReason::Reclaim, EvictReason::Consolidate] {
        // The job's pods pipelined instead of placed, as if an eviction had been made for it.
        let mut bad = clean.clone();
        bad.pod_state.fill(PodState::Pending);
        bad.decisions.binds.clear();
        bad.decisions.evictions.push((PodId(4), reason, JobId(0)));
        for p in [PodId(0), PodId(1)] {
            bad.pod_state[p] = PodState::Pipelined(NodeId(0));
            bad.decisions.pipelined.push((p, NodeId(0)));
        }
        assert!(check(&bad).is_err(), "a {reason:?} eviction for a job that starts without it passes");
    }
}

/// An invariant's name, the invariant, and a change to an outcome that must break it.
type Corruption = (&'static str, Invariant, fn(&mut CycleOutcome));

/// Every invariant holds on a clean outcome and fails on one corrupted to break it, so no
/// property above can pass vacuously.
#[test]
fn every_invariant_detects_a_violation() {
    let case = tiny_case();
    let config = config_of(&case);
    let snap = case.build(&case.jobs).expect("consistent inputs");
    let clean = run_cycle(&snap, &config);
    // Two earlier cycles for the ping-pong property: j0 lost pod 0 to a reclaim made for
    // its queue q0 (the pipelined pod 1 is the reclaimer's), then pod 0 was bound again.
    let mut reclaimed = clean.clone();
    reclaimed.decisions.evictions.push((PodId(0), EvictReason::Reclaim, JobId(0)));
    reclaimed.decisions.pipelined.push((PodId(1), NodeId(0)));
    let mut restarted = clean.clone();
    restarted.decisions.binds.push((PodId(0), NodeId(0)));
    let build = || case.build(&case.jobs).expect("consistent inputs");
    let earlier = [(build(), reclaimed), (build(), restarted)];
    let corruptions: [Corruption; 12] = [
        ("over-commit", nodes_not_over_committed, |o| o.pod_state.fill(PodState::Allocated(NodeId(0)))),
        ("gang below minimum", gangs_at_or_above_minimum, |o| o.pod_state[PodId(0)] = PodState::Bound(NodeId(0))),
        ("non-preemptible eviction", only_preemptible_evicted, |o| {
            o.decisions.evictions.push((PodId(0), EvictReason::Preempt, JobId(0)))
        }),
        ("queue over limit", queues_within_limits, |o| o.pod_state.fill(PodState::Allocated(NodeId(0)))),
        ("fair share over parent", fair_shares_consistent, |o| {
            o.queues[QueueId(1)].fair_share = o.queues[ROOT].fair_share.times(2)
        }),
        ("predicate ignored", placements_respect_predicates, |o| o.decisions.binds.push((PodId(0), NodeId(0)))),
        ("double bind", binds_unique_and_from_pending, |o| {
            o.decisions.binds.extend([(PodId(0), NodeId(0)), (PodId(0), NodeId(0))])
        }),
        ("bind undone", binds_stand, |o| o.decisions.binds.push((PodId(0), NodeId(0)))),
        ("nondeterminism", deterministic, |o| o.decisions.binds.push((PodId(0), NodeId(0)))),
        ("reason missing", reasons_name_what_blocks, |o| {
            o.pod_state.fill(PodState::Pending);
            o.reasons.fill(Some("; something".into()));
        }),
        ("reason names nothing", reasons_name_what_blocks, |o| {
            o.pod_state.fill(PodState::Pending);
            o.reasons.fill(Some("not admitted yet".into()));
        }),
        ("reclaim ping-pong", no_reclaim_ping_pong, |o| {
            o.decisions.evictions.push((PodId(0), EvictReason::Reclaim, JobId(0)));
            o.decisions.pipelined.push((PodId(1), NodeId(0)));
        }),
    ];
    for (what, invariant, corrupt) in corruptions {
        let check = |out: &CycleOutcome| {
            invariant(&Cycle { case: &case, config: &config, jobs: &case.jobs, snap: &snap, out, earlier: &earlier })
        };
        assert_eq!(check(&clean), Ok(()), "{what}: the clean outcome violates the invariant");
        let mut bad = clean.clone();
        corrupt(&mut bad);
        assert!(check(&bad).is_err(), "{what}: the corrupted outcome passes");
    }
}
