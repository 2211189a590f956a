//! Trace mode on traces small enough to work out by hand: every policy's completion times and
//! queueing delays are checked exactly, and the same input always gives the same bytes.

use drover_sim::trace::{self, metrics::summarize, policy::Policy, replay, replay::Cluster, rows};

/// Two 8-GPU nodes. `a` (one 8-GPU pod, 100 s) and `b` (two 8-GPU pods, 50 s) arrive at 0,
/// `c` (one 4-GPU pod, 10 s) at 10, the CPU-only `d` (4 CPUs, 10 s) at 20. Cycles every 10 s.
const TRACE: &str =
    "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user,queue,priority_or_qos,status
a,0,100,1,8,,,,,
b,0,50,2,8,,,,,
c,10,10,1,4,,,,,
d,20,10,1,0,4,,,,
";

fn cluster() -> Cluster {
    Cluster::uniform(2, 8, 96)
}

/// Finish times of a, b, c, d under a policy.
fn finishes(policy: Policy) -> Vec<Option<i64>> {
    let jobs = rows::parse("hand.csv", TRACE).unwrap();
    let run = replay::replay(&jobs, &cluster(), policy).unwrap();
    run.jobs.iter().map(|r| r.finish).collect()
}

#[test]
fn each_policy_finishes_the_jobs_when_worked_out_by_hand() {
    // fifo-strict: a starts at 0; b (16 GPUs) waits for a, and c waits behind b although 8
    // GPUs are idle; d is CPU-only, a class of its own, and runs at its first cycle (20).
    // a ends at 100, b runs 100-150, c 150-160.
    assert_eq!(finishes(Policy::FifoStrict), [Some(100), Some(150), Some(160), Some(30)]);
    // fifo-backfill: c passes the waiting b on the idle node at 10 and ends at 20.
    assert_eq!(finishes(Policy::FifoBackfill), [Some(100), Some(150), Some(20), Some(30)]);
    // greedy: b's first pod takes the idle node at 0 and holds it while its second waits;
    // when a ends (100), c's first pod goes before b's second (minimums before elastic pods),
    // so b's second pod binds only at 110, when c has ended: b runs 110-160.
    assert_eq!(finishes(Policy::Greedy), [Some(100), Some(160), Some(110), Some(30)]);
    // sjf: b (50 s) goes before a (100 s) at 0 and runs 0-50; at 50, c (10 s) and then a start
    // together (4 + 8 GPUs): c ends 60, a 150.
    assert_eq!(finishes(Policy::Sjf), [Some(150), Some(50), Some(60), Some(30)]);
    // drover (default): like fifo-backfill here: one queue, one priority, nothing to evict.
    assert_eq!(finishes(Policy::Drover), [Some(100), Some(150), Some(20), Some(30)]);
}

#[test]
fn summaries_follow_from_the_finish_times() {
    let jobs = rows::parse("hand.csv", TRACE).unwrap();
    let run = replay::replay(&jobs, &cluster(), Policy::FifoStrict).unwrap();
    let s = summarize(&jobs, &run, 16);
    assert_eq!((s.jobs, s.finished, s.deadlocks), (3, 3, 0));
    // JCTs 100, 150, 150; queueing delays 0, 100, 140.
    assert!((s.jct.avg - 400.0 / 3.0).abs() < 1e-9, "{s:?}");
    assert!((s.queue.avg - 80.0).abs() < 1e-9, "{s:?}");
    assert_eq!((s.queue.p50, s.queue.p95), (100.0, 140.0));
    // While b waits (0-100) 8 of 16 GPUs are allocated; while c waits (100-150), 16.
    assert!((s.gpu_allocation - (8.0 * 100.0 + 16.0 * 50.0) / (16.0 * 150.0)).abs() < 1e-9, "{s:?}");
    assert_eq!(s.makespan, 160);
    assert_eq!(s.cpu_only.0, 1);
}

#[test]
fn gangs_split_by_per_pod_placement_deadlock() {
    // One 8-GPU node; a and b each need two 4-GPU pods. Placed per pod (greedy), each gets
    // its first pod, the node is full, and both wait forever for their second: 2 deadlocks.
    // As gangs, a runs 0-10 and b 10-20.
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\na,0,10,2,4\nb,0,10,2,4\n";
    let jobs = rows::parse("dead.csv", text).unwrap();
    let one = Cluster { nodes: 1, ..cluster() };
    let greedy = summarize(&jobs, &replay::replay(&jobs, &one, Policy::Greedy).unwrap(), 8);
    let gang = summarize(&jobs, &replay::replay(&jobs, &one, Policy::FifoBackfill).unwrap(), 8);
    assert_eq!((greedy.deadlocks, greedy.finished), (2, 0), "{greedy:?}");
    assert_eq!((gang.deadlocks, gang.finished, gang.makespan), (0, 2, 20), "{gang:?}");
}

#[test]
fn the_same_trace_gives_the_same_bytes() {
    let jobs = rows::parse("hand.csv", TRACE).unwrap();
    let once = trace::to_json(&cluster(), &trace::run(&jobs, &cluster(), &trace::policy::ALL).unwrap());
    let again = trace::to_json(&cluster(), &trace::run(&jobs, &cluster(), &trace::policy::ALL).unwrap());
    assert_eq!(once, again);
    for key in [
        "avgJctSeconds",
        "avgQueueSeconds",
        "p95QueueSeconds",
        "p99QueueSeconds",
        "gpuAllocation",
        "deadlocks",
        "jobs",
        "makespanSeconds",
        "cpuOnly",
    ] {
        assert!(once.contains(&format!("\"{key}\"")), "{key} missing from {once}");
    }
}

#[test]
fn reservations_keep_a_big_gang_from_starving_behind_later_jobs() {
    // Two 8-GPU nodes. a (8 GPUs, 100 s) and the gang b (2 x 8 GPUs, 50 s) arrive at 0; c
    // (8 GPUs, 200 s) at 10; d (8 GPUs, 50 s) at 20.
    let text =
        "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\na,0,100,1,8\nb,0,50,2,8\nc,10,200,1,8\nd,20,50,1,8\n";
    let jobs = rows::parse("starve.csv", text).unwrap();
    let finish = |policy| -> Vec<Option<i64>> {
        replay::replay(&jobs, &cluster(), policy).unwrap().jobs.iter().map(|r| r.finish).collect()
    };
    // fifo-backfill: c takes the idle node at 10 (ends 210); when a ends at 100, d passes b
    // on a's node (ends 150); b starts only when c ends: 210-260.
    assert_eq!(finish(Policy::FifoBackfill), [Some(100), Some(260), Some(210), Some(150)]);
    // drover: b reserves both nodes from 100, when a ends. c would still run then: it waits.
    // d ends at 70, before the reservation starts: it runs now on the idle node. b runs
    // 100-150, then c 150-350.
    assert_eq!(finish(Policy::Drover), [Some(100), Some(150), Some(350), Some(70)]);
}

#[test]
fn without_declared_run_times_reservations_cannot_hold_work_back() {
    // Two 8-GPU nodes: a (8 GPUs, 100 s) fills one, h (4 GPUs, 60 s) half the other; r (8
    // GPUs, 100 s) waits; s (4 GPUs, 200 s) arrives at 10. With exact run times r reserves
    // the second node from 60, when h ends, and s, which would still run then, waits for a's
    // node (100-300) while r runs 60-160. Declaring nothing, no end is known: nothing is
    // reserved, s takes the idle half at 10 (10-210), and r waits for a's node (100-200).
    // The sjf oracle knows durations either way and is unchanged.
    let text =
        "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\na,0,100,1,8\nh,0,60,1,4\nr,0,100,1,8\ns,10,200,1,4\n";
    let jobs = rows::parse("hand.csv", text).unwrap();
    let blind = Cluster { declared_runtimes: replay::DeclaredRuntimes::None, ..cluster() };
    let ends = |c: &Cluster, p| -> Vec<Option<i64>> {
        replay::replay(&jobs, c, p).unwrap().jobs.iter().map(|r| r.finish).collect()
    };
    assert_eq!(ends(&cluster(), Policy::Drover), [Some(100), Some(60), Some(160), Some(300)]);
    assert_eq!(ends(&blind, Policy::Drover), [Some(100), Some(60), Some(200), Some(210)]);
    assert_eq!(ends(&blind, Policy::Sjf), ends(&cluster(), Policy::Sjf));
    let json: serde_json::Value =
        serde_json::from_str(&trace::to_json(&blind, &trace::run(&jobs, &blind, &[Policy::Drover]).unwrap())).unwrap();
    assert_eq!(json["cluster"]["declaredRuntimes"], "none");
    let exact: serde_json::Value =
        serde_json::from_str(&trace::to_json(&cluster(), &trace::run(&jobs, &cluster(), &[Policy::Drover]).unwrap()))
            .unwrap();
    assert!(exact["cluster"].get("declaredRuntimes").is_none(), "the default output is as before");
}

#[test]
fn without_declared_run_times_shortest_first_orders_by_run_times_learned_from_each_users_finished_jobs() {
    // One 8-GPU node, every job one 8-GPU pod. x (100 s) runs first; user `quick`'s q1 and q2
    // (10 s) run 100-120, user `slow`'s s1 and s2 (200 s) 120-520: by 520 each user has two
    // finished runs. s3 (slow, 200 s) arrives at 500 and q3 (quick, 10 s) at 510, both behind
    // s2. Declaring nothing, shortest-first orders them by what their users' runs took: q3
    // runs 520-530, then s3 530-730. The default order (first come, first served) runs s3
    // first, 520-720, and q3 720-730.
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user\n\
        x,0,100,1,8,,long\nq1,0,10,1,8,,quick\nq2,0,10,1,8,,quick\ns1,0,200,1,8,,slow\ns2,0,200,1,8,,slow\n\
        s3,500,200,1,8,,slow\nq3,510,10,1,8,,quick\n";
    let jobs = rows::parse("hand.csv", text).unwrap();
    let shortest_first =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../config/scheduler-shortest-first.yaml"))
            .expect("the bundled shortest-first configuration");
    let config = drover_scheduler::config::SchedulerConfig::from_yaml(&shortest_first).unwrap();
    let blind = Cluster { declared_runtimes: replay::DeclaredRuntimes::None, config, ..Cluster::uniform(1, 8, 96) };
    let ends = |c: &Cluster| -> Vec<Option<i64>> {
        replay::replay(&jobs, c, Policy::Drover).unwrap().jobs.iter().map(|r| r.finish).collect()
    };
    let before = [Some(100), Some(110), Some(120), Some(320), Some(520)];
    assert_eq!(ends(&blind)[..5], before);
    assert_eq!(ends(&blind)[5..], [Some(730), Some(530)], "q3 goes first on its user's history");
    let fifo = Cluster { config: Default::default(), ..blind.clone() };
    assert_eq!(ends(&fifo)[5..], [Some(720), Some(730)], "first come, first served");
}

#[test]
fn without_declared_run_times_a_waiting_job_is_given_the_range_its_users_runs_spread_over() {
    // One 8-GPU node, every job one 8-GPU pod of user u: w1 (600 s) runs 0-600, w2 (1200 s)
    // 600-1800, w3 (1200 s) 1800-3000; w4 arrives at 1700 and waits until 3000. At 1800, with
    // u's runs of 600 s and 1200 s learned, w4 is expected when w3's median run ends (2400),
    // within the runs' spread: from 2400 to 3000, and a period for the cycle that starts it.
    // That is the forecast w4 has at half its wait (2350), and it starts at 3000, inside it.
    // w2 (600 s of wait) and w3 (1800 s) waited while one run was all that was known: no
    // range, so they count outside it.
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user\n\
        w1,0,600,1,8,,u\nw2,0,1200,1,8,,u\nw3,0,1200,1,8,,u\nw4,1700,800,1,8,,u\n";
    let jobs = rows::parse("hand.csv", text).unwrap();
    let blind = Cluster { declared_runtimes: replay::DeclaredRuntimes::None, ..Cluster::uniform(1, 8, 96) };
    let run = replay::replay(&jobs, &blind, Policy::Drover).unwrap();
    let w4 = &run.jobs[3];
    assert_eq!(w4.first_start, Some(3000));
    let eta = w4.eta_at_half_wait.expect("a forecast by half its wait");
    assert_eq!((eta.given_at, eta.start, eta.range), (1800, Some(2400), Some((2400, 3010))));
    let json: serde_json::Value =
        serde_json::from_str(&trace::to_json(&blind, &trace::run(&jobs, &blind, &[Policy::Drover]).unwrap())).unwrap();
    let half = &json["policies"]["drover"]["eta"]["atHalfWait"];
    assert_eq!(json["policies"]["drover"]["eta"]["jobs"], 3, "{half}");
    assert_eq!(half["inRange"], 0.333, "w4 of w2, w3, w4: {half}");
    assert_eq!(half["medianRangeSeconds"], 610);
    assert_eq!(half["medianWaitSeconds"], 1300, "waits of 600, 1300 and 1800 s");
    assert!(half.get("medianRelativeError").is_some(), "the keys before stay: {half}");
}
