//! Capacity that evictions are freeing goes to the work it was freed for (the claim step of
//! allocate, `scheduler/src/actions/claim.rs`). Evicted pods may take several cycles to
//! terminate (Kubernetes' grace period); scenario files cannot express a pod still
//! terminating at the start of a cycle, so these cases are built here.
//!
//! The cluster: one node n1 with 16 CPUs. `train` (deserved 8 CPUs) runs a 4-CPU pod; the
//! pod of `idle`'s job `v` (8 CPUs, no quota, overQuotaWeight 0) is terminating there,
//! reclaimed for `train`'s 12-CPU job `a`, which fits once it is gone (16 - 4 = 12) but not
//! now (4 CPUs idle). `idle` also has a pending 4-CPU pod `s`, which only the passes beyond
//! fair share may place.

use std::collections::BTreeMap;

use drover_api::{ResourceList, CPU, PODS};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::ids::NodeId;
use drover_scheduler::session::PodState;
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueBounds, QueueInput, QueueingStrategy,
    Snapshot, TaskInput,
};

fn cpus(n: i64) -> ResourceList {
    ResourceList(BTreeMap::from([(CPU.to_string(), n * 1000)]))
}

fn job(name: &str, queue: &str, cpu: i64, pod: PodPhaseInput) -> JobInput {
    let running = matches!(pod, PodPhaseInput::Bound(_));
    JobInput {
        name: name.into(),
        namespace: "ns".into(),
        queue: queue.into(),
        priority_class: "train".into(),
        priority: 50,
        preemptible: true,
        min_member: 1,
        min_resources: None,
        created_at: 0,
        phase: if running { JobPhase::Running } else { JobPhase::Inqueue },
        tasks: vec![TaskInput {
            name: "w".into(),
            min_available: 1,
            requests: cpus(cpu),
            constraints: Constraints::default(),
            pods: vec![pod],
            topology: None,
            slices: None,
        }],
        run_time: None,
        ends_at: None,
        preempted_at: None,
        started_at: None,
        topology: None,
        resize: None,
    }
}

fn queue(name: &str, deserved: ResourceList, weight: u32) -> QueueInput {
    QueueInput {
        name: name.into(),
        parent: None,
        deserved,
        limit: None,
        over_quota_weight: weight,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    }
}

/// The nodes, queues and jobs of the cluster described above; `a_cpus` is what `a` asks for.
fn cluster_inputs(a_cpus: i64) -> (Vec<NodeInput>, Vec<QueueInput>, Vec<JobInput>) {
    let node = NodeInput {
        name: "n1".into(),
        allocatable: ResourceList(BTreeMap::from([(CPU.to_string(), 16_000), (PODS.to_string(), 110)])),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        unschedulable: false,
    };
    let queues = vec![queue("train", cpus(8), 1), queue("idle", ResourceList::default(), 0)];
    let jobs = vec![
        job("r", "train", 4, PodPhaseInput::Bound("n1".into())),
        job("v", "idle", 8, PodPhaseInput::Releasing("n1".into())),
        job("a", "train", a_cpus, PodPhaseInput::Pending),
        job("s", "idle", 4, PodPhaseInput::Pending),
    ];
    (vec![node], queues, jobs)
}

/// The cluster described above; `a_cpus` is what `a` asks for.
fn cluster(a_cpus: i64) -> Snapshot {
    let (nodes, queues, jobs) = cluster_inputs(a_cpus);
    snapshot::build(&nodes, &queues, &jobs).expect("the cluster is consistent")
}

/// The state of the one pod of the job named `name` after the cycle.
fn pod_of(snap: &Snapshot, out: &CycleOutcome, name: &str) -> PodState {
    let j = snap.jobs.position(|j| j.name == name).expect("the job exists");
    out.pod_state[snap.jobs[j].tasks[0].pods[0]]
}

#[test]
fn a_waiting_job_keeps_its_claim_on_capacity_being_freed() {
    let snap = cluster(12);
    let out = run_cycle(&snap, &SchedulerConfig::default());
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Pipelined(NodeId(0)), "a claims what v's termination frees");
    assert_eq!(pod_of(&snap, &out, "s"), PodState::Pending, "s may not take the idle rest of n1 that a needs");
    assert!(out.decisions.evictions.is_empty(), "nothing more is evicted: {:?}", out.decisions.evictions);
}

#[test]
fn a_claim_evicts_nothing_and_leaves_what_it_does_not_need() {
    // a fits the capacity being freed without the idle rest: s may still use that.
    let snap = cluster(8);
    let out = run_cycle(&snap, &SchedulerConfig::default());
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Pipelined(NodeId(0)));
    assert_eq!(pod_of(&snap, &out, "s"), PodState::Allocated(NodeId(0)), "the idle 4 CPUs a does not need go to s");
    assert!(out.decisions.evictions.is_empty());
}

#[test]
fn nothing_is_claimed_beyond_fair_share() {
    // 13 CPUs would take train over its fair share (16 CPUs, its demand being 4 + 13 = 17
    // of the node's 16): a claims nothing, and s uses the idle capacity.
    let snap = cluster(13);
    let out = run_cycle(&snap, &SchedulerConfig::default());
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Pending);
    assert_eq!(pod_of(&snap, &out, "s"), PodState::Allocated(NodeId(0)));
}

#[test]
fn a_gang_claims_idle_capacity_beside_the_capacity_being_freed() {
    // A second node n2 with 4 idle CPUs; `a` is now a gang of a 12-CPU pod, which fits only
    // where v is terminating, and a 4-CPU pod, which fits only n2's idle CPUs. The claim
    // takes both, so `s` cannot take n2 in the passes beyond fair share and leave the gang
    // short (it would need more victims next cycle).
    let mut snap_input = cluster_inputs(12);
    let mut n2 = NodeInput { name: "n2".into(), ..snap_input.0[0].clone() };
    n2.allocatable.0.insert(CPU.to_string(), 4_000);
    snap_input.0.push(n2);
    let a = snap_input.2.iter_mut().find(|j| j.name == "a").expect("a exists");
    a.min_member = 2;
    a.tasks.push(TaskInput {
        name: "x".into(),
        pods: vec![PodPhaseInput::Pending],
        requests: cpus(4),
        ..a.tasks[0].clone()
    });
    let snap = snapshot::build(&snap_input.0, &snap_input.1, &snap_input.2).expect("the cluster is consistent");
    let out = run_cycle(&snap, &SchedulerConfig::default());
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Pipelined(NodeId(0)), "a claims what v frees: {:?}", out.reasons);
    let a = snap.jobs.position(|j| j.name == "a").expect("a exists");
    let small = out.pod_state[snap.jobs[a].tasks[1].pods[0]];
    assert!(
        matches!(small, PodState::Pipelined(NodeId(1)) | PodState::Allocated(NodeId(1))),
        "a's small pod holds n2: {small:?}"
    );
    assert_eq!(pod_of(&snap, &out, "s"), PodState::Pending, "s may not take n2, which the gang needs");
    assert!(out.decisions.evictions.is_empty(), "nothing more is evicted: {:?}", out.decisions.evictions);
}

/// The cluster above with `a`'s 12-CPU pod nominated to n1 (the claim a cycle's reclaim made
/// for it) and another 12-CPU job `b` of `train`, earlier in the queue, that the claim step
/// would serve first.
fn claimed_cluster() -> (Vec<NodeInput>, Vec<QueueInput>, Vec<JobInput>) {
    let (nodes, queues, mut jobs) = cluster_inputs(12);
    jobs[2].tasks[0].pods = vec![PodPhaseInput::Nominated("n1".into())];
    let mut b = job("b", "train", 12, PodPhaseInput::Pending);
    b.created_at = -1;
    jobs.push(b);
    (nodes, queues, jobs)
}

fn run_inputs(inputs: &(Vec<NodeInput>, Vec<QueueInput>, Vec<JobInput>)) -> (Snapshot, CycleOutcome) {
    let snap = snapshot::build(&inputs.0, &inputs.1, &inputs.2).expect("the cluster is consistent");
    let out = run_cycle(&snap, &SchedulerConfig::default());
    (snap, out)
}

#[test]
fn a_kept_claim_holds_its_node_against_jobs_ahead_of_it() {
    let mut inputs = claimed_cluster();
    let (snap, out) = run_inputs(&inputs);
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Pipelined(NodeId(0)), "a keeps n1: {:?}", out.reasons);
    assert_eq!(pod_of(&snap, &out, "b"), PodState::Pending);
    assert!(out.decisions.evictions.is_empty(), "nothing more is evicted: {:?}", out.decisions.evictions);

    // Without the nomination, the claim goes to b, ahead of a in the queue.
    inputs.2[2].tasks[0].pods = vec![PodPhaseInput::Pending];
    let (snap, out) = run_inputs(&inputs);
    assert_eq!(pod_of(&snap, &out, "b"), PodState::Pipelined(NodeId(0)));
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Pending);
}

#[test]
fn a_kept_claim_binds_once_its_victims_are_gone() {
    let mut inputs = claimed_cluster();
    inputs.2.retain(|j| j.name != "v");
    let (snap, out) = run_inputs(&inputs);
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Allocated(NodeId(0)), "{:?}", out.reasons);
    assert_eq!(pod_of(&snap, &out, "b"), PodState::Pending);
}

#[test]
fn a_claim_that_starts_elsewhere_now_stops_waiting_for_its_victims() {
    // n2 has 12 idle CPUs: a starts there at once, and b may keep the claim step's capacity.
    let mut inputs = claimed_cluster();
    inputs.0.push(NodeInput { name: "n2".into(), ..inputs.0[0].clone() });
    inputs.0[1].allocatable.0.insert(CPU.to_string(), 12_000);
    let (snap, out) = run_inputs(&inputs);
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Allocated(NodeId(1)), "{:?}", out.reasons);
    assert!(out.decisions.evictions.is_empty(), "{:?}", out.decisions.evictions);
}

#[test]
fn a_claim_its_node_can_no_longer_hold_is_dropped() {
    // n1 was cordoned after the claim was made: a waits like any job, and b, ahead of it,
    // takes nothing either (no node is schedulable).
    let mut inputs = claimed_cluster();
    inputs.0[0].unschedulable = true;
    let (snap, out) = run_inputs(&inputs);
    assert_eq!(pod_of(&snap, &out, "a"), PodState::Pending);
    assert_eq!(pod_of(&snap, &out, "b"), PodState::Pending);
}

#[test]
fn a_claim_that_no_longer_completes_its_gang_is_dropped() {
    // The group's minimum grew to 2 after the claim was made for 1 pod, and n1's 12 idle CPUs
    // hold one 8-CPU pod, not two: binding the one nominated pod would start half a gang.
    let mut inputs = claimed_cluster();
    inputs.2.retain(|j| j.name != "v" && j.name != "b");
    let a = inputs.2.iter_mut().find(|j| j.name == "a").expect("a exists");
    a.min_member = 2;
    a.tasks[0].min_available = 2;
    a.tasks[0].requests = cpus(8);
    a.tasks[0].pods.push(PodPhaseInput::Pending);
    let (snap, out) = run_inputs(&inputs);
    let a = snap.jobs.position(|j| j.name == "a").expect("a exists");
    let states: Vec<PodState> = snap.jobs[a].tasks[0].pods.iter().map(|&p| out.pod_state[p]).collect();
    assert_eq!(states, [PodState::Pending, PodState::Pending], "never half a gang");
}

/// The cluster above with a second node n2 (8 idle CPUs) and `a` an elastic job of two
/// 8-CPU pods (minimum `min`), one nominated to n1, where v is still terminating (4 CPUs
/// idle), the other to n2, whose victims are gone.
fn half_freed_claim(min: u32) -> (Snapshot, CycleOutcome, Vec<PodState>) {
    let mut inputs = claimed_cluster();
    inputs.0.push(NodeInput { name: "n2".into(), ..inputs.0[0].clone() });
    inputs.0[1].allocatable.0.insert(CPU.to_string(), 8_000);
    inputs.2.retain(|j| j.name != "b" && j.name != "s");
    let a = inputs.2.iter_mut().find(|j| j.name == "a").expect("a exists");
    a.min_member = min;
    a.tasks[0].min_available = min;
    a.tasks[0].requests = cpus(8);
    a.tasks[0].pods = vec![PodPhaseInput::Nominated("n1".into()), PodPhaseInput::Nominated("n2".into())];
    let (snap, out) = run_inputs(&inputs);
    let a = snap.jobs.position(|j| j.name == "a").expect("a exists");
    let states = snap.jobs[a].tasks[0].pods.iter().map(|&p| out.pod_state[p]).collect();
    (snap, out, states)
}

#[test]
fn an_elastic_claim_starts_each_pod_whose_victims_are_gone() {
    let (_, out, states) = half_freed_claim(1);
    assert_eq!(
        states,
        [PodState::Pipelined(NodeId(0)), PodState::Allocated(NodeId(1))],
        "the pod on n2 starts now, the one on n1 keeps its claim: {:?}",
        out.reasons
    );
    assert!(out.decisions.evictions.is_empty(), "{:?}", out.decisions.evictions);
}

#[test]
fn a_gang_claim_starts_only_whole() {
    let (_, out, states) = half_freed_claim(2);
    assert_eq!(
        states,
        [PodState::Pipelined(NodeId(0)), PodState::Pipelined(NodeId(1))],
        "half the gang may not start: {:?}",
        out.reasons
    );
}
