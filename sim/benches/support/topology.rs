//! The topology sizes of the cycle bench, built in code from the synthetic cluster:
//!
//! - `T`: 10,000 nodes x 8 GPUs in 600 racks (16-17 nodes each) under 60 blocks under 4
//!   zones, 70,000 running one-GPU pods and 2,000 pending one-GPU gangs of 10, a quarter each
//!   requiring one rack, requiring one block and preferring one rack, preferring one rack,
//!   and asking nothing. The same cycle runs on the same cluster and jobs without topology
//!   (no topology, no requests), side by side, with the time of each action of both.
//!   `DROVER_BENCH_SIDE=with` (or `without`) times one side only, for a profiler or an
//!   instruction count.
//! - `G`: one gang of 1,000 pods x 8 GPUs on 1,000 empty nodes in 100 racks of 10, in 100
//!   sub-groups of 10 that each require one rack: once as slices of 10, once as 100 tasks
//!   of 10. Every rack holds exactly one sub-group, so the gang fits only if each lands whole.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_api::{ResourceList, CPU, GPU, MEMORY, PODS};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, run_cycle_observed, CycleOutcome};
use drover_scheduler::ids::JobId;
use drover_scheduler::session::PodState;
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, LevelInput, NodeInput, PodPhaseInput, QueueBounds, QueueInput,
    QueueingStrategy, SlicesInput, Snapshot, TaskInput, TopologyInput, TopologyRequest, TopologyRequestInput,
};
use drover_sim::{scenario, synthetic};

use super::{ms, stats};

const RACKS: usize = 600;
const RACKS_PER_BLOCK: usize = 10;
const BLOCKS_PER_ZONE: usize = 15;

fn rack_of(node: usize, nodes: usize, racks: usize) -> usize {
    node * racks / nodes
}

fn topology(levels: &[&str]) -> TopologyInput {
    TopologyInput {
        name: "default".into(),
        levels: levels.iter().map(|l| LevelInput { name: (*l).into(), node_label: format!("bench/{l}") }).collect(),
    }
}

fn request(required: Option<&str>, preferred: Option<&str>) -> Option<TopologyRequestInput> {
    Some(TopologyRequestInput {
        topology: "default".into(),
        required: required.map(String::from),
        preferred: preferred.map(String::from),
    })
}

/// How many distinct domains (by the function `domain` of a node index) job `j`'s placed
/// pods (bound, allocated or pipelined) are in.
fn domains_spanned(snap: &Snapshot, out: &CycleOutcome, j: JobId, domain: &dyn Fn(usize) -> usize) -> usize {
    let mut seen: Vec<usize> = snap.jobs[j]
        .tasks
        .iter()
        .flat_map(|t| &t.pods)
        .filter_map(|&p| match out.pod_state[p] {
            PodState::Bound(n) | PodState::Allocated(n) | PodState::Pipelined(n) => Some(domain(n.into())),
            _ => None,
        })
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Jobs requiring `level` whose placed pods are in more than one of its domains.
fn broken(snap: &Snapshot, out: &CycleOutcome, level: &str, domain: &dyn Fn(usize) -> usize) -> usize {
    let requires = |r: TopologyRequest| r.required.is_some_and(|l| snap.topologies[r.topology].levels[l] == level);
    snap.jobs
        .iter_enumerated()
        .filter(|(j, job)| job.topology.is_some_and(requires) && domains_spanned(snap, out, *j, domain) > 1)
        .count()
}

/// Each action's time in one cycle.
fn action_times(snap: &Snapshot, config: &SchedulerConfig) -> Vec<(String, Duration)> {
    let mut times = Vec::new();
    run_cycle_observed(snap, config, &mut |action, took, _| times.push((format!("{action:?}").to_lowercase(), took)));
    times
}

/// Times `runs` cycles of `snap`; returns the median and the outcome of the last.
fn time_cycles(label: &str, snap: &Snapshot, config: &SchedulerConfig, runs: usize) -> (f64, CycleOutcome) {
    time_alternating(&[(label, snap)], config, runs).pop().expect("one snapshot timed")
}

/// Times `runs` cycles of each snapshot, taking them in turn (so that a slower spell of the
/// host falls on all of them alike, not on whichever ran then); returns each one's median and
/// the outcome of its last cycle.
fn time_alternating(snaps: &[(&str, &Snapshot)], config: &SchedulerConfig, runs: usize) -> Vec<(f64, CycleOutcome)> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); snaps.len()];
    let mut last: Vec<Option<CycleOutcome>> = snaps.iter().map(|_| None).collect();
    for _ in 0..runs {
        for (i, &(label, snap)) in snaps.iter().enumerate() {
            let t = Instant::now();
            let out = run_cycle(snap, config);
            samples[i].push(t.elapsed());
            let counts =
                |o: &CycleOutcome| (o.decisions.binds.len(), o.decisions.evictions.len(), o.decisions.pipelined.len());
            if let Some(prev) = &last[i] {
                assert_eq!(counts(prev), counts(&out), "{label}: the cycle is not deterministic");
            }
            last[i] = Some(out);
        }
    }
    snaps
        .iter()
        .zip(samples)
        .zip(last)
        .map(|((&(label, _), samples), out)| {
            let (min, med, max) = stats(&samples);
            let out = out.expect("at least one run");
            let d = &out.decisions;
            println!(
                "  {label:<16} run_cycle min {min:8.1}  median {med:8.1}  max {max:8.1} ms; \
                 {} binds, {} evictions, {} pipelined",
                d.binds.len(),
                d.evictions.len(),
                d.pipelined.len()
            );
            (med, out)
        })
        .collect()
}

/// Size `T`: the median cycle with topology and without, in ms.
pub fn racks(runs: usize, config: &SchedulerConfig) -> (f64, f64) {
    let (nodes, running, pending) = (10_000, 70_000, 20_000);
    let plan = synthetic::plan(nodes, running, pending, synthetic::Tree::DEPARTMENTS).expect("the sizes fit");
    let flat = scenario::parse(&plan.to_yaml("bench-T"), "synthetic").expect("the synthetic scenario is valid");
    let mut labelled = flat.nodes.clone();
    for (i, node) in labelled.iter_mut().enumerate() {
        let rack = rack_of(i, nodes, RACKS);
        let block = rack / RACKS_PER_BLOCK;
        node.labels.insert("bench/zone".into(), format!("z{}", block / BLOCKS_PER_ZONE));
        node.labels.insert("bench/block".into(), format!("b{block:02}"));
        node.labels.insert("bench/rack".into(), format!("r{rack:03}"));
    }
    let kinds = [request(Some("rack"), None), request(Some("block"), Some("rack")), request(None, Some("rack")), None];
    let mut jobs = flat.jobs.clone();
    let gangs = jobs.iter_mut().filter(|j| j.tasks.iter().flat_map(|t| &t.pods).all(|p| *p == PodPhaseInput::Pending));
    for (k, job) in gangs.enumerate() {
        job.topology = kinds[k % kinds.len()].clone();
    }
    println!(
        "size T: {nodes} nodes x {} GPUs in {RACKS} racks, {} blocks, {} zones; {} jobs, {running} running pods, \
         {pending} pending pods in gangs of 10 (a quarter each: required rack; required block, preferred rack; \
         preferred rack; none)",
        synthetic::GPUS_PER_NODE,
        RACKS / RACKS_PER_BLOCK,
        RACKS / RACKS_PER_BLOCK / BLOCKS_PER_ZONE,
        jobs.len(),
    );
    let t = Instant::now();
    let with = snapshot::build_with_topologies(&labelled, &flat.queues, &[topology(&["zone", "block", "rack"])], &jobs)
        .expect("the cluster is valid");
    let built_with = t.elapsed();
    let t = Instant::now();
    let without = snapshot::build(&flat.nodes, &flat.queues, &flat.jobs).expect("the cluster is valid");
    println!("  snapshot build: {:.1} ms with topology, {:.1} ms without", ms(built_with), ms(t.elapsed()));
    match std::env::var("DROVER_BENCH_SIDE").as_deref() {
        Ok("with") => (time_cycles("with topology", &with, config, runs).0, f64::NAN),
        Ok("without") => (f64::NAN, time_cycles("without", &without, config, runs).0),
        _ => {
            let mut timed =
                time_alternating(&[("with topology", &with), ("without", &without)], config, runs).into_iter();
            let ((on, out), (off, _)) = (timed.next().expect("timed with"), timed.next().expect("timed without"));
            let rack = |n| rack_of(n, nodes, RACKS);
            assert_eq!(broken(&with, &out, "rack", &rack), 0, "a gang requiring one rack was placed over several");
            let block = |n| rack_of(n, nodes, RACKS) / RACKS_PER_BLOCK;
            assert_eq!(broken(&with, &out, "block", &block), 0, "a gang requiring one block was placed over several");
            println!("  one instrumented cycle, each action with topology / without:");
            for ((action, a), (_, b)) in action_times(&with, config).into_iter().zip(action_times(&without, config)) {
                println!("    {action:<10} {:>9.1} ms / {:>9.1} ms", ms(a), ms(b));
            }
            (on, off)
        }
    }
}

/// One node of 8 GPUs in rack `rack`.
fn gang_node(i: usize, rack: usize) -> NodeInput {
    let allocatable = ResourceList(BTreeMap::from([
        (GPU.to_string(), 8),
        (CPU.to_string(), 64_000),
        (MEMORY.to_string(), 512 << 30),
        (PODS.to_string(), 110),
    ]));
    NodeInput {
        name: format!("node-{i:04}"),
        allocatable,
        labels: BTreeMap::from([("bench/rack".to_string(), format!("r{rack:03}"))]),
        taints: Vec::new(),
        unschedulable: false,
    }
}

/// A task of `pods` pending pods of 8 GPUs.
fn gang_task(
    name: String,
    pods: usize,
    topology: Option<TopologyRequestInput>,
    slices: Option<SlicesInput>,
) -> TaskInput {
    TaskInput {
        name,
        min_available: 0,
        requests: ResourceList(BTreeMap::from([(GPU.to_string(), 8), (CPU.to_string(), 8_000)])),
        constraints: Constraints::default(),
        pods: vec![PodPhaseInput::Pending; pods],
        topology,
        slices,
    }
}

/// Size `G`: the median cycle placing the 1,000-pod gang as slices and as tasks, in ms.
pub fn gang(runs: usize, config: &SchedulerConfig) -> (f64, f64) {
    let (nodes, per_rack, group) = (1_000, 10, 10);
    let node_list: Vec<NodeInput> = (0..nodes).map(|i| gang_node(i, i / per_rack)).collect();
    let queue = QueueInput {
        name: "team".into(),
        parent: None,
        deserved: ResourceList(BTreeMap::from([(GPU.to_string(), 8 * nodes as i64)])),
        limit: None,
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    };
    let job = |tasks: Vec<TaskInput>| JobInput {
        name: "gang".into(),
        namespace: "bench".into(),
        queue: "team".into(),
        priority_class: "train".into(),
        priority: 50,
        preemptible: true,
        min_member: nodes as u32,
        min_resources: None,
        created_at: 0,
        phase: JobPhase::Pending,
        tasks,
        run_time: None,
        ends_at: None,
        preempted_at: None,
        started_at: None,
        topology: None,
        resize: None,
    };
    let slices = SlicesInput { size: group as u32, required: "rack".into() };
    let as_slices = job(vec![gang_task("w".into(), nodes, None, Some(slices))]);
    let as_tasks = job((0..nodes / group)
        .map(|t| gang_task(format!("w{t:02}"), group, request(Some("rack"), None), None))
        .collect());
    println!(
        "size G: one gang of {nodes} pods x 8 GPUs on {nodes} empty nodes in {} racks of {per_rack}, \
         {} sub-groups of {group} each requiring one rack",
        nodes / per_rack,
        nodes / group
    );
    let mut medians = Vec::new();
    for (label, input) in [("as slices", as_slices), ("as tasks", as_tasks)] {
        let snap =
            snapshot::build_with_topologies(&node_list, std::slice::from_ref(&queue), &[topology(&["rack"])], &[input])
                .expect("the cluster is valid");
        let (median, out) = time_cycles(label, &snap, config, runs);
        assert_eq!(out.decisions.binds.len(), nodes, "{label}: the gang was not placed whole");
        let job = &snap.jobs[JobId(0)];
        let pods: Vec<_> = job.tasks.iter().flat_map(|t| t.pods.iter().copied()).collect();
        for chunk in pods.chunks(group) {
            let mut racks: Vec<usize> = chunk
                .iter()
                .filter_map(|&p| match out.pod_state[p] {
                    PodState::Bound(n) | PodState::Allocated(n) => Some(usize::from(n) / per_rack),
                    _ => None,
                })
                .collect();
            racks.sort_unstable();
            racks.dedup();
            assert_eq!(racks.len(), 1, "{label}: a sub-group of {group} was placed over several racks");
        }
        medians.push(median);
    }
    (medians[0], medians[1])
}
