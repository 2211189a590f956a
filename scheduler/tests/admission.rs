//! An admitted group is judged again, alone, every cycle until it runs: a PodGroup admitted
//! while its pods were not yet seen (or whose queue's limit was lowered since) and that can
//! never start goes back to pending with the reason, and stops holding its queue's limit.
//! Scenario files cannot start a job admitted but without running pods, so the case is
//! built here. The cluster: one node with 8 CPUs; queue `team` is capped at 4 CPUs.

use std::collections::BTreeMap;

use drover_api::{ResourceList, CPU, PODS};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueBounds, QueueInput, QueueingStrategy,
    TaskInput,
};

fn cpus(n: i64) -> ResourceList {
    ResourceList(BTreeMap::from([(CPU.to_string(), n * 1000)]))
}

/// A job of `pods` pending pods of `cpu` CPUs each, all in its gang minimum.
fn job(name: &str, phase: JobPhase, pods: usize, cpu: i64, created_at: i64) -> JobInput {
    JobInput {
        name: name.into(),
        namespace: "ns".into(),
        queue: "team".into(),
        priority_class: "train".into(),
        priority: 50,
        preemptible: true,
        min_member: pods as u32,
        min_resources: None,
        created_at,
        phase,
        tasks: vec![TaskInput {
            name: "w".into(),
            min_available: 0,
            requests: cpus(cpu),
            constraints: Constraints::default(),
            pods: vec![PodPhaseInput::Pending; pods],
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

fn run(jobs: Vec<JobInput>) -> (snapshot::Snapshot, CycleOutcome) {
    let node = NodeInput {
        name: "n1".into(),
        allocatable: ResourceList(BTreeMap::from([(CPU.to_string(), 8_000), (PODS.to_string(), 110)])),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        unschedulable: false,
    };
    let team = QueueInput {
        name: "team".into(),
        parent: None,
        deserved: cpus(4),
        limit: Some(cpus(4)),
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    };
    let snap = snapshot::build(&[node], &[team], &jobs).expect("a valid cluster");
    let out = run_cycle(&snap, &SchedulerConfig::default());
    (snap, out)
}

fn find(snap: &snapshot::Snapshot, name: &str) -> drover_scheduler::ids::JobId {
    snap.jobs.iter_enumerated().find(|(_, j)| j.name == name).map(|(id, _)| id).expect("the job")
}

#[test]
fn an_admitted_group_that_can_never_start_goes_back_to_pending_and_frees_its_queue() {
    // `big` was admitted before its pods were seen; they ask for 2 x 4 = 8 CPUs, twice the limit.
    let (snap, out) = run(vec![job("big", JobPhase::Inqueue, 2, 4, 0), job("small", JobPhase::Pending, 1, 2, 5)]);
    let big = find(&snap, "big");
    assert_eq!(out.job_phase[big], JobPhase::Pending);
    let reason = out.reasons[big].as_deref().unwrap_or_default();
    assert!(reason.starts_with("not admitted: ") && reason.contains("limit (cpu 8 > 4)"), "{reason}");
    // `big` no longer reserves the limit: `small` is admitted and runs.
    let small = find(&snap, "small");
    assert_eq!(out.job_phase[small], JobPhase::Running, "{:?}", out.reasons[small]);
}

#[test]
fn an_admitted_group_that_fits_its_bounds_stays_admitted_while_it_waits() {
    // `fits` (2 x 2 CPUs) starts; `waits` (4 CPUs) fits the limit alone but not beside `fits`:
    // it stays admitted, waiting for room, and is not sent back.
    let (snap, out) = run(vec![job("fits", JobPhase::Inqueue, 2, 2, 0), job("waits", JobPhase::Inqueue, 1, 4, 5)]);
    assert_eq!(out.job_phase[find(&snap, "fits")], JobPhase::Running);
    let waits = find(&snap, "waits");
    assert_eq!(out.job_phase[waits], JobPhase::Inqueue, "{:?}", out.reasons[waits]);
}

#[test]
fn a_group_refused_before_its_pods_exist_says_why() {
    // A PodGroup seen before its pods declares 8 CPUs, twice the limit: refused, and the
    // refusal is its reason (a job with no pod was taken for one whose pods all run).
    let mut early = job("early", JobPhase::Pending, 0, 1, 0);
    early.min_member = 2;
    early.min_resources = Some(cpus(8));
    let (snap, out) = run(vec![early]);
    let early = find(&snap, "early");
    assert_eq!(out.job_phase[early], JobPhase::Pending);
    let reason = out.reasons[early].as_deref().unwrap_or_default();
    assert!(reason.starts_with("not admitted: ") && reason.contains("limit (cpu 8 > 4)"), "{reason:?}");
}
