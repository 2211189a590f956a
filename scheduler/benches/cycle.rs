//! Scale benchmark of one full scheduling cycle (enqueue, allocate, preempt, reclaim,
//! backfill) on synthetic clusters built in memory.
//!
//! Run with `cargo bench -p drover-scheduler --bench cycle` (optionally followed by `-- A` or
//! `-- B` to run one size only; `DROVER_BENCH_RUNS=n` sets the number of timed runs). It
//! prints min/median/max milliseconds of snapshot building and of `run_cycle`, the decisions
//! of the cycle, a per-action breakdown of one instrumented cycle, and a one-line summary per
//! size. Timings are reported, never asserted; the bench
//! only asserts that the cycle made progress (binds > 0), so a broken engine is noticed.
//!
//! The cluster generator is kept in step with `sim/examples/gen_scale_scenario.rs`, which
//! writes the same cluster as a scenario file for timing `drover sim` end to end.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_api::{ResourceList, CPU, GPU, MEMORY, PODS};
use drover_scheduler::actions::{self, Ctx};
use drover_scheduler::config::{ActionName, SchedulerConfig};
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::framework::Framework;
use drover_scheduler::placement::Placer;
use drover_scheduler::session::Session;
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueInput, QueueingStrategy, Snapshot, TaskInput,
};

// ---------------------------------------------------------------------------------------
// The synthetic cluster (same plan as sim/examples/gen_scale_scenario.rs).
// ---------------------------------------------------------------------------------------

const GPUS_PER_NODE: i64 = 8;
const DEPARTMENTS: usize = 5;
const PROJECTS: usize = 10;
const GANG: usize = 10;
/// Deserved GPU quota of the projects of a department, in twentieths of the department's.
const PROJECT_QUOTA: [i64; PROJECTS] = [4, 3, 3, 2, 2, 2, 1, 1, 1, 1];
/// How running jobs spread over the projects of a department: the small-quota projects 6-9
/// borrowed far beyond their quota (reclaim victims), projects 0-2 run nothing.
const RUNNING_WEIGHT: [u64; PROJECTS] = [0, 0, 0, 1, 1, 1, 5, 5, 5, 5];
/// How pending gangs spread over the projects of a department: in proportion to quota.
const PENDING_WEIGHT: [u64; PROJECTS] = [4, 3, 3, 2, 2, 2, 1, 1, 1, 1];

/// A small deterministic generator (Knuth's MMIX LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut x = self.below(weights.iter().sum());
        for (i, &w) in weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        unreachable!("x is below the sum of weights")
    }
}

struct PlanQueue {
    name: String,
    parent: Option<String>,
    deserved_gpu: i64,
    limit_gpu: Option<i64>,
}

struct PlanJob {
    name: String,
    queue: String,
    priority_class: &'static str,
    priority: i32,
    min_member: u32,
    created_at: i64,
    replicas: u32,
    /// Node index of each running pod, in pod index order (the rest are pending).
    running: Vec<usize>,
}

struct Plan {
    nodes: usize,
    queues: Vec<PlanQueue>,
    jobs: Vec<PlanJob>,
}

fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

fn leaf_name(d: usize, p: usize) -> String {
    format!("dept-{d}-proj-{p}")
}

/// `nodes` nodes of 8 GPUs, 5 departments x 10 projects whose deserved GPU quotas add up to
/// the cluster, `running` running one-GPU pods as jobs of 10 (no node over-committed) and
/// `pending` pending one-GPU pods in gangs of 10 (minMember 10).
fn plan(nodes: usize, running: usize, pending: usize) -> Plan {
    let total_gpu = nodes as i64 * GPUS_PER_NODE;
    assert!(running as i64 <= total_gpu, "{running} running one-GPU pods do not fit {nodes} nodes");
    let mut rng = Lcg(0x5eed_d20e);
    let mut queues = Vec::new();
    let dept_gpu = total_gpu / DEPARTMENTS as i64;
    for d in 0..DEPARTMENTS {
        let deserved = dept_gpu + if d == 0 { total_gpu % DEPARTMENTS as i64 } else { 0 };
        let name = format!("dept-{d}");
        // Department 4 may borrow at most half its quota again.
        let limit_gpu = (d == 4).then_some(deserved * 3 / 2);
        queues.push(PlanQueue { name: name.clone(), parent: None, deserved_gpu: deserved, limit_gpu });
        let shares: Vec<i64> = PROJECT_QUOTA.iter().map(|w| deserved * w / 20).collect();
        let rest = deserved - shares.iter().sum::<i64>();
        for (p, share) in shares.into_iter().enumerate() {
            let deserved_gpu = share + if p == 0 { rest } else { 0 };
            // Project 5 of every department is capped at twice its quota.
            let limit_gpu = (p == 5).then_some(deserved_gpu * 2);
            queues.push(PlanQueue { name: leaf_name(d, p), parent: Some(name.clone()), deserved_gpu, limit_gpu });
        }
    }

    let mut free = vec![GPUS_PER_NODE; nodes];
    let mut jobs = Vec::new();
    let running_jobs = running.div_ceil(GANG);
    for j in 0..running_jobs {
        let replicas = GANG.min(running - j * GANG);
        let d = j % DEPARTMENTS;
        let p = rng.weighted(&RUNNING_WEIGHT);
        let hot = rng.below(10) == 0;
        let elastic = rng.below(10) < 3;
        let mut on = Vec::with_capacity(replicas);
        for _ in 0..replicas {
            let mut n = rng.below(nodes as u64) as usize;
            while free[n] == 0 {
                n = (n + 1) % nodes;
            }
            free[n] -= 1;
            on.push(n);
        }
        jobs.push(PlanJob {
            name: format!("run-{j:05}"),
            queue: leaf_name(d, p),
            priority_class: if hot { "interactive-preemptible" } else { "train" },
            priority: if hot { 75 } else { 50 },
            min_member: if elastic { replicas.min(8) as u32 } else { replicas as u32 },
            created_at: j as i64,
            replicas: replicas as u32,
            running: on,
        });
    }
    for g in 0..pending.div_ceil(GANG) {
        let replicas = GANG.min(pending - g * GANG);
        let d = rng.below(DEPARTMENTS as u64) as usize;
        let p = rng.weighted(&PENDING_WEIGHT);
        let hot = rng.below(10) < 3;
        jobs.push(PlanJob {
            name: format!("gang-{g:05}"),
            queue: leaf_name(d, p),
            priority_class: if hot { "interactive-preemptible" } else { "train" },
            priority: if hot { 75 } else { 50 },
            min_member: replicas as u32,
            created_at: (running_jobs + g) as i64,
            replicas: replicas as u32,
            running: Vec::new(),
        });
    }
    Plan { nodes, queues, jobs }
}

// ---------------------------------------------------------------------------------------
// Plan -> snapshot inputs (what the simulator hands to `snapshot::build`).
// ---------------------------------------------------------------------------------------

fn list(entries: &[(&str, i64)]) -> ResourceList {
    ResourceList(entries.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>())
}

fn gpu_list(gpu: i64) -> ResourceList {
    list(&[(GPU, gpu)])
}

struct Inputs {
    nodes: Vec<NodeInput>,
    queues: Vec<QueueInput>,
    jobs: Vec<JobInput>,
}

fn inputs(plan: &Plan) -> Inputs {
    let allocatable = list(&[(CPU, 64_000), (MEMORY, 512 << 30), (GPU, GPUS_PER_NODE), (PODS, 110)]);
    let nodes = (0..plan.nodes)
        .map(|i| NodeInput {
            name: node_name(i),
            allocatable: allocatable.clone(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            unschedulable: false,
        })
        .collect();
    let queues = plan
        .queues
        .iter()
        .map(|q| QueueInput {
            name: q.name.clone(),
            parent: q.parent.clone(),
            deserved: gpu_list(q.deserved_gpu),
            limit: q.limit_gpu.map(gpu_list),
            over_quota_weight: 1,
            reclaimable: true,
            strategy: QueueingStrategy::BestEffortFifo,
        })
        .collect();
    let requests = list(&[(GPU, 1), (CPU, 6_000), (MEMORY, 48 << 30)]);
    let jobs = plan
        .jobs
        .iter()
        .map(|j| {
            let pods = (0..j.replicas as usize)
                .map(|i| j.running.get(i).map_or(PodPhaseInput::Pending, |&n| PodPhaseInput::Bound(node_name(n))))
                .collect();
            let running = j.running.len() as u32;
            JobInput {
                name: j.name.clone(),
                namespace: "default".into(),
                queue: j.queue.clone(),
                priority_class: j.priority_class.into(),
                priority: j.priority,
                preemptible: true,
                min_member: j.min_member,
                created_at: j.created_at,
                phase: if running >= j.min_member {
                    JobPhase::Running
                } else if running > 0 {
                    JobPhase::Inqueue
                } else {
                    JobPhase::Pending
                },
                tasks: vec![TaskInput {
                    name: "worker".into(),
                    min_available: 0,
                    requests: requests.clone(),
                    constraints: Constraints::default(),
                    pods,
                }],
            }
        })
        .collect();
    Inputs { nodes, queues, jobs }
}

// ---------------------------------------------------------------------------------------
// Timing.
// ---------------------------------------------------------------------------------------

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (min, median, max) in milliseconds.
fn stats(samples: &[Duration]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = samples.iter().copied().map(ms).collect();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// One cycle with the same steps as `cycle::run_cycle` (minus the closing bookkeeping),
/// timing session opening, plugin opening and each action separately.
fn instrumented_cycle(snap: &Snapshot, config: &SchedulerConfig) -> Vec<(String, Duration)> {
    let mut phases = Vec::new();
    let t = Instant::now();
    let mut fw = Framework::new(config);
    let mut ssn = Session::open(snap);
    phases.push(("session open".to_string(), t.elapsed()));
    let t = Instant::now();
    fw.open(&mut ssn);
    phases.push(("plugins open (fair share)".to_string(), t.elapsed()));
    if !config.actions.contains(&ActionName::Enqueue) {
        for phase in &mut ssn.job_phase {
            if *phase == JobPhase::Pending {
                *phase = JobPhase::Inqueue;
            }
        }
    }
    let mut placer = Placer::default();
    for action in &config.actions {
        let t = Instant::now();
        let (binds, evictions, pipelined) =
            (ssn.decisions.binds.len(), ssn.decisions.evictions.len(), ssn.decisions.pipelined.len());
        let mut ctx = Ctx { ssn: &mut ssn, fw: &fw, placer: &mut placer };
        match action {
            ActionName::Enqueue => actions::enqueue::run(&mut ctx),
            ActionName::Allocate => actions::allocate::run(&mut ctx),
            ActionName::Preempt => actions::preempt::run(&mut ctx),
            ActionName::Reclaim => actions::reclaim::run(&mut ctx),
            ActionName::Backfill => actions::backfill::run(&mut ctx),
        }
        let elapsed = t.elapsed();
        let d = &ssn.decisions;
        phases.push((
            format!(
                "{action:?} (+{} binds, +{} evictions, +{} pipelined)",
                d.binds.len() - binds,
                d.evictions.len() - evictions,
                d.pipelined.len() - pipelined
            )
            .to_lowercase(),
            elapsed,
        ));
    }
    phases
}

#[derive(Clone, Copy)]
struct Size {
    label: &'static str,
    nodes: usize,
    running: usize,
    pending: usize,
    runs: usize,
}

fn bench(size: &Size, config: &SchedulerConfig) -> f64 {
    let t = Instant::now();
    let plan = plan(size.nodes, size.running, size.pending);
    let inputs = inputs(&plan);
    println!(
        "size {}: {} nodes x {GPUS_PER_NODE} GPUs, {} queues, {} jobs, {} running pods, {} pending pods \
         (generated in {:.1} ms)",
        size.label,
        size.nodes,
        inputs.queues.len(),
        inputs.jobs.len(),
        size.running,
        size.pending,
        ms(t.elapsed())
    );
    let mut build = Vec::new();
    let mut cycle = Vec::new();
    let mut counts = None;
    for run in 0..size.runs {
        let t = Instant::now();
        let snap =
            snapshot::build(&inputs.nodes, &inputs.queues, &inputs.jobs).expect("the synthetic cluster is valid");
        build.push(t.elapsed());
        let t = Instant::now();
        let outcome = run_cycle(&snap, config);
        cycle.push(t.elapsed());
        let d = &outcome.decisions;
        let c = (d.binds.len(), d.evictions.len(), d.pipelined.len());
        println!("  run {}: build {:8.1} ms, cycle {:8.1} ms", run + 1, ms(build[run]), ms(cycle[run]));
        assert!(c.0 > 0, "size {}: the cycle bound nothing", size.label);
        if let Some(prev) = counts {
            assert_eq!(prev, c, "size {}: the cycle is not deterministic", size.label);
        }
        counts = Some(c);
    }
    let (binds, evictions, pipelined) = counts.expect("at least one run");
    let (bmin, bmed, bmax) = stats(&build);
    let (cmin, cmed, cmax) = stats(&cycle);
    println!("  snapshot build  min {bmin:8.1}  median {bmed:8.1}  max {bmax:8.1} ms");
    println!("  run_cycle       min {cmin:8.1}  median {cmed:8.1}  max {cmax:8.1} ms");
    println!("  decisions: {binds} binds, {evictions} evictions, {pipelined} pipelined");
    let snap = snapshot::build(&inputs.nodes, &inputs.queues, &inputs.jobs).expect("the synthetic cluster is valid");
    println!("  one instrumented cycle:");
    for (phase, d) in instrumented_cycle(&snap, config) {
        println!("    {:>9.1} ms  {phase}", ms(d));
    }
    cmed
}

fn main() {
    let sizes = [
        Size { label: "A", nodes: 1_000, running: 5_000, pending: 10_000, runs: 5 },
        Size { label: "B", nodes: 5_000, running: 25_000, pending: 50_000, runs: 3 },
    ];
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    // `DROVER_BENCH_RUNS=n` overrides the number of timed runs per size (e.g. 1 under a profiler).
    let runs: Option<usize> = std::env::var("DROVER_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).filter(|&r| r > 0);
    let config = SchedulerConfig::default();
    let mut summary = Vec::new();
    for size in &sizes {
        if !wanted.is_empty() && !wanted.iter().any(|w| w.eq_ignore_ascii_case(size.label)) {
            continue;
        }
        let size = Size { runs: runs.unwrap_or(size.runs), ..*size };
        let median = bench(&size, &config);
        summary.push(format!("size {}: cycle median {median:.1} ms", size.label));
        println!();
    }
    for line in summary {
        println!("{line}");
    }
}
