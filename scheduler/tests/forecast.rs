//! The forecast of every waiting gang: its positions, its expected start and the range it
//! falls in, planned from the ends of what runs and of the gangs served before it, and what
//! that start rests on.
//! The cluster: one node of 8 GPUs, one queue per team. And loans: work admitted into
//! another gang's reserved capacity on a learned run time, evicted if it overruns.

use std::collections::BTreeMap;

use drover_api::{ResourceList, CPU, GPU, PODS};
use drover_scheduler::clock::Clock;
use drover_scheduler::config::{ActionName, SchedulerConfig};
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::forecast::{Basis, Forecast};
use drover_scheduler::run_times::{JobFeatures, RunTimeHistory};
use drover_scheduler::session::EvictReason;
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueBounds, QueueInput, QueueingStrategy,
    RunTime, RunTimeRange, Snapshot, TaskInput,
};

const NOW: i64 = 10_000;

fn gpus(n: i64) -> ResourceList {
    ResourceList(BTreeMap::from([(GPU.to_string(), n), (CPU.to_string(), 1000)]))
}

/// A one-pod job of `gpu` GPUs in `queue`, created at `created_at`.
fn job(name: &str, queue: &str, gpu: i64, created_at: i64, run_time: Option<RunTime>, running: bool) -> JobInput {
    JobInput {
        name: name.into(),
        namespace: "ns".into(),
        queue: queue.into(),
        priority_class: "train".into(),
        priority: 0,
        preemptible: true,
        min_member: 1,
        min_resources: None,
        created_at,
        phase: if running { JobPhase::Running } else { JobPhase::Pending },
        tasks: vec![TaskInput {
            name: "w".into(),
            min_available: 0,
            requests: gpus(gpu),
            constraints: Constraints::default(),
            pods: vec![if running { PodPhaseInput::Bound("n1".into()) } else { PodPhaseInput::Pending }],
            topology: None,
            slices: None,
        }],
        run_time,
        ends_at: run_time.filter(|_| running).map(|r| created_at + r.seconds()),
        preempted_at: None,
        started_at: running.then_some(created_at),
        topology: None,
        resize: None,
    }
}

/// An 8-GPU node.
fn node(name: &str) -> NodeInput {
    NodeInput {
        name: name.into(),
        allocatable: ResourceList(BTreeMap::from([
            (GPU.to_string(), 8),
            (CPU.to_string(), 64_000),
            (PODS.to_string(), 110),
        ])),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        unschedulable: false,
    }
}

fn queue(name: &str) -> QueueInput {
    QueueInput {
        name: name.into(),
        parent: None,
        deserved: ResourceList::default(),
        limit: None,
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    }
}

fn forecasts(jobs: &[JobInput]) -> BTreeMap<String, Forecast> {
    forecasts_at(jobs, NOW, &[])
}

/// The forecasts at `now`, the jobs named in `ranges` given those learned ranges.
fn forecasts_at(jobs: &[JobInput], now: i64, ranges: &[(&str, RunTimeRange)]) -> BTreeMap<String, Forecast> {
    let mut snap: Snapshot = snapshot::build(&[node("n1")], &[queue("a"), queue("b")], jobs).expect("a valid cluster");
    snap.clock = Clock::at(now);
    for job in snap.jobs.iter_mut() {
        job.run_time_range = ranges.iter().find(|(name, _)| *name == job.name).map(|&(_, r)| r);
    }
    // Allocation only: the waiting gangs must not reclaim the running one's GPUs.
    let config =
        SchedulerConfig { actions: vec![ActionName::Enqueue, ActionName::Allocate], ..SchedulerConfig::default() };
    let out = run_cycle(&snap, &config);
    snap.jobs.iter_enumerated().filter_map(|(j, job)| Some((job.name.clone(), out.forecasts[j]?))).collect()
}

#[test]
fn waiting_gangs_start_one_after_another_as_declared_and_learned_ends_free_the_gpus() {
    let f = forecasts(&[
        job("running", "a", 8, NOW - 600, Some(RunTime::Declared(1600)), true),
        job("first", "a", 8, NOW - 300, Some(RunTime::Learned(500)), false),
        job("second", "b", 4, NOW - 200, None, false),
        job("third", "a", 4, NOW - 100, None, false),
    ]);
    assert!(!f.contains_key("running"), "a running job has no forecast");
    let first = f["first"];
    assert_eq!((first.position, first.queue_position), (1, 1));
    assert_eq!((first.start, first.basis), (Some(NOW + 1000), Basis::Declared), "when the declared run ends");
    let second = f["second"];
    assert_eq!((second.position, second.queue_position), (2, 1), "first in its own queue, second overall");
    assert_eq!(
        (second.start, second.basis),
        (Some(NOW + 1500), Basis::Learned),
        "after `first`, whose end was learned"
    );
    let third = f["third"];
    assert_eq!((third.position, third.queue_position), (3, 2));
    assert_eq!(third.start, Some(NOW + 1500), "beside `second`: 4 + 4 GPUs fit once `first` ends");
}

#[test]
fn a_gang_behind_work_with_no_known_end_has_no_start_and_says_so() {
    let f = forecasts(&[job("running", "a", 8, NOW - 600, None, true), job("waiting", "a", 2, NOW - 60, None, false)]);
    assert_eq!((f["waiting"].start, f["waiting"].basis), (None, Basis::Unknown));
}

#[test]
fn a_gang_larger_than_the_cluster_is_told_it_never_starts_and_takes_nothing_from_the_plan() {
    let f = forecasts(&[
        job("huge", "a", 16, NOW - 120, None, false),
        job("running", "a", 8, NOW - 600, Some(RunTime::Declared(1600)), true),
        job("next", "a", 8, NOW - 60, None, false),
    ]);
    assert_eq!((f["huge"].start, f["huge"].basis), (None, Basis::Never));
    assert_eq!(f["huge"].position, 1, "it keeps its place in the order");
    assert_eq!(f["next"].start, Some(NOW + 1000), "the gang behind it starts when the GPUs free");
}

/// Two 8-GPU nodes; `big` (16 GPUs) waits behind `long` (8 GPUs, declared to end at NOW +
/// 1000) and reserves both nodes from then. `small` (8 GPUs) may use the idle node only if
/// it ends before: with a learned run time of 500 s it borrows it.
fn borrowing_cluster(small: Option<RunTime>, borrowed_until: Option<i64>, now: i64) -> (Snapshot, CycleOutcome) {
    let mut long = job("long", "a", 8, NOW - 600, Some(RunTime::Declared(1600)), true);
    long.tasks[0].pods = vec![PodPhaseInput::Bound("n1".into())];
    let mut big = job("big", "a", 8, NOW - 300, None, false);
    big.tasks[0].pods = vec![PodPhaseInput::Pending, PodPhaseInput::Pending];
    big.min_member = 2;
    let mut small_job = job("small", "a", 8, NOW - 200, small, borrowed_until.is_some());
    if borrowed_until.is_some() {
        small_job.tasks[0].pods = vec![PodPhaseInput::Bound("n2".into())];
        small_job.started_at = Some(NOW);
        small_job.ends_at = small.map(|r| NOW + r.seconds().max(now - NOW + 1));
    }
    let mut snap = snapshot::build(&[node("n1"), node("n2")], &[queue("a")], &[long, big, small_job]).unwrap();
    snap.clock = Clock::at(now);
    let small_id = snap.jobs.iter_enumerated().find(|(_, j)| j.name == "small").map(|(id, _)| id).unwrap();
    snap.jobs[small_id].borrowed_until = borrowed_until;
    let out = run_cycle(&snap, &SchedulerConfig::from_yaml(include_str!("../../config/scheduler.yaml")).unwrap());
    (snap, out)
}

#[test]
fn work_on_a_learned_run_time_borrows_reserved_capacity_and_is_evicted_when_it_overruns() {
    let (snap, out) = borrowing_cluster(Some(RunTime::Learned(500)), None, NOW);
    let small = snap.jobs.iter_enumerated().find(|(_, j)| j.name == "small").map(|(id, _)| id).unwrap();
    assert_eq!(out.decisions.binds.len(), 1, "small starts on the reserved node");
    assert_eq!(out.decisions.loans, vec![(small, NOW + 1000)], "a loan until big is due");

    let (_, out) = borrowing_cluster(None, None, NOW);
    assert!(out.decisions.binds.is_empty(), "without a run time, small may not use big's node");

    // At NOW + 1000 `long` is due to end as declared and `small`, learned to run 500 s,
    // still runs: it is evicted for `big`.
    let (snap, out) = borrowing_cluster(Some(RunTime::Learned(500)), Some(NOW + 1000), NOW + 1000);
    let evicted: Vec<(&str, EvictReason)> =
        out.decisions.evictions.iter().map(|&(p, r, _)| (snap.jobs[snap.pods[p].job].name.as_str(), r)).collect();
    assert!(evicted.contains(&("small", EvictReason::Overrun)), "evicted: {evicted:?}");

    // Before its loan is due it keeps running.
    let (_, out) = borrowing_cluster(Some(RunTime::Learned(500)), Some(NOW + 1000), NOW + 999);
    assert!(out.decisions.evictions.is_empty());
}

#[test]
fn a_gang_that_waits_beside_free_capacity_starts_no_sooner_than_the_next_end() {
    // Queue `a` is capped at 4 GPUs and runs 4 until NOW + 300: `capped` (2 GPUs) waits
    // although 4 GPUs are idle. Nothing changes before the running job ends.
    let running = job("running", "a", 4, NOW - 100, Some(RunTime::Declared(400)), true);
    let capped = job("capped", "a", 2, NOW - 50, None, false);
    let mut a = queue("a");
    a.limit = Some(gpus(4));
    let mut snap = snapshot::build(&[node("n1")], &[a], &[running, capped]).unwrap();
    snap.clock = Clock::at(NOW);
    let out = run_cycle(&snap, &SchedulerConfig::default());
    let j = snap.jobs.iter_enumerated().find(|(_, j)| j.name == "capped").map(|(id, _)| id).unwrap();
    let f = out.forecasts[j].expect("it waits");
    assert_eq!((f.start, f.basis), (Some(NOW + 300), Basis::Declared));
}

#[test]
fn the_range_of_a_start_plans_every_end_it_waits_for_early_and_late() {
    let f = forecasts_at(
        &[
            job("running", "a", 8, NOW - 600, Some(RunTime::Learned(1000)), true),
            job("first", "a", 8, NOW - 300, Some(RunTime::Learned(500)), false),
            job("second", "a", 8, NOW - 200, None, false),
        ],
        NOW,
        &[("running", RunTimeRange { low: 700, high: 3000 }), ("first", RunTimeRange { low: 200, high: 900 })],
    );
    let first = f["first"];
    assert_eq!(first.start, Some(NOW + 400), "the median end");
    assert_eq!((first.earliest, first.latest), (Some(NOW + 100), Some(NOW + 2400)), "its shortest and longest runs");
    let second = f["second"];
    assert_eq!(second.start, Some(NOW + 900));
    assert_eq!((second.earliest, second.latest), (Some(NOW + 300), Some(NOW + 3300)), "first's range added on");

    let declared = forecasts(&[
        job("running", "a", 8, NOW - 600, Some(RunTime::Declared(1000)), true),
        job("next", "a", 8, NOW - 300, None, false),
    ]);
    let next = declared["next"];
    assert_eq!((next.earliest, next.start, next.latest), (Some(NOW + 400), Some(NOW + 400), Some(NOW + 400)));
}

/// A gang behind a job that outlives its learned runs is never told, look after look, that it
/// starts in moments: the range reaches at least as far ahead as the job has run.
#[test]
fn behind_a_job_that_outlived_its_learned_runs_the_latest_start_moves_away() {
    let mut history = RunTimeHistory::default();
    let features = JobFeatures { namespace: "ns", name: Some("long"), gpus: 8 };
    for secs in [100, 100, 100, 1000] {
        history.learn(&features, secs, 0);
    }
    let started = NOW - 2000;
    for elapsed in [50, 500, 990, 999, 1001, 1500, 4000, 20_000] {
        let p = history.predict(&features, elapsed).expect("four runs");
        let mut long = job("long", "a", 8, started, Some(RunTime::Learned(p.seconds)), true);
        long.ends_at = Some(started + p.seconds);
        let now = started + elapsed;
        let f = forecasts_at(&[long, job("next", "a", 8, started + 1, None, false)], now, &[("long", p.range)]);
        let next = f["next"];
        let latest = next.latest.expect("a range");
        assert!(latest - now >= elapsed, "after {elapsed} s: latest {} s ahead", latest - now);
        assert!(next.earliest <= next.start && next.start <= next.latest, "{next:?}");
    }
}

#[test]
fn a_start_resting_on_another_namespaces_learned_run_times_says_so() {
    let in_team_b = |mut j: JobInput| {
        j.namespace = "team-b".into();
        j
    };
    let theirs = || in_team_b(job("theirs", "a", 8, NOW - 600, Some(RunTime::Learned(1000)), true));
    let f = forecasts(&[theirs(), job("mine", "a", 8, NOW - 300, None, false)]);
    assert_eq!((f["mine"].start, f["mine"].basis), (Some(NOW + 400), Basis::OtherNamespaces), "team-b's runs");
    let f = forecasts(&[theirs(), in_team_b(job("ours", "a", 8, NOW - 300, None, false))]);
    assert_eq!(f["ours"].basis, Basis::Learned, "its own team's runs");
}
