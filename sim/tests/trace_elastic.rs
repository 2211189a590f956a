//! Trace mode's `drover-elastic` policy on traces small enough to work out by hand: an elastic
//! gang starts smaller when only part of it fits and grows back as capacity frees, its run
//! time scales with its size (a job at half size takes twice as long for the work it has
//! left), the run time it declares to reservations is that of its new size, and the other
//! policies replay exactly as before it existed.

use drover_sim::trace::{
    self,
    metrics::summarize,
    policy::{Policy, ALL},
    replay::{self, Cluster, Replay},
    rows,
};
use serde_json::Value;

fn cluster(nodes: u32) -> Cluster {
    Cluster::uniform(nodes, 8, 96)
}

fn replay(text: &str, nodes: u32, policy: Policy) -> Replay {
    let jobs = rows::parse("hand.csv", text).unwrap();
    replay::replay(&jobs, &cluster(nodes), policy).unwrap()
}

fn finishes(run: &Replay) -> Vec<Option<i64>> {
    run.jobs.iter().map(|r| r.finish).collect()
}

/// Two 8-GPU nodes: `a1` (one 8-GPU pod, 100 s) fills one, `a2` (one 4-GPU pod, 50 s) half
/// the other, and `b` asks 16 GPUs (four 4-GPU pods) for 100 s: 400 pod-seconds of work.
const PART_FREE: &str = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod
a1,0,100,1,8
a2,0,50,1,4
b,0,100,4,4
";

#[test]
fn a_gang_that_does_not_fit_starts_smaller_grows_back_and_finishes_earlier() {
    // drover: b waits for all 16 GPUs, free when a1 ends: it runs 100-200.
    let rigid = replay(PART_FREE, 2, Policy::Drover);
    assert_eq!(finishes(&rigid), [Some(100), Some(50), Some(200)]);
    // drover-elastic: at 0 only 4 GPUs are free, so b restarts with 1 pod (halving 4 -> 2
    // -> 1), which starts at 10 (40 pod-seconds by 50). When a2 ends at 50 one more pod fits:
    // it restarts with 2 at 60 (80 pod-seconds by 100). When a1 ends at 100 it restarts with
    // all 4 at 110, and its 280 pod-seconds left take 70 s: it ends at 180.
    let elastic = replay(PART_FREE, 2, Policy::DroverElastic);
    assert_eq!(finishes(&elastic), [Some(100), Some(50), Some(180)]);
    let b = &elastic.jobs[2];
    assert_eq!((b.shrinks, b.grows), (1, 2), "{b:?}");
    // The cluster's GPUs over time: a1 and a2 hold 12; b's pods add 4 from 10, 8 from 60
    // (a2 gone) and 16 from 110 (a1 gone), and none while it restarts (50-60, 100-110).
    assert_eq!(elastic.allocation, [(0, 0), (0, 12), (10, 16), (50, 8), (60, 16), (100, 0), (110, 16), (180, 0)]);
    // It ran 40 + 40 + 70 s; the rest of its 180 s was waiting: before its first start and
    // during its two restarts.
    let jobs = rows::parse("hand.csv", PART_FREE).unwrap();
    assert_eq!((b.ran, b.queue_delay(0)), (150, Some(30)));
    let s = summarize(&jobs, &elastic, 16);
    assert!((s.queue.avg - 10.0).abs() < 1e-9, "queueing delays 0, 0, 30: {s:?}");
    assert_eq!(s.elastic.map(|e| (e.jobs_shrunk, e.shrinks, e.grows)), Some((1, 1, 2)));
    assert_eq!(summarize(&jobs, &rigid, 16).elastic, None, "drover's jobs are rigid");
}

#[test]
fn a_job_at_half_its_size_takes_twice_as_long() {
    // One 8-GPU node, half of it held for 1000 s. b asks two 4-GPU pods for 100 s: it runs
    // with one, from 10, so its 200 pod-seconds take 200 s (it never grows: the node stays
    // half full until long after).
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\na,0,1000,1,4\nb,0,100,2,4\n";
    assert_eq!(finishes(&replay(text, 1, Policy::Drover)), [Some(1000), Some(1100)]);
    let elastic = replay(text, 1, Policy::DroverElastic);
    assert_eq!(finishes(&elastic), [Some(1000), Some(210)]);
    assert_eq!((elastic.jobs[1].shrinks, elastic.jobs[1].grows), (1, 0));
}

#[test]
fn a_shrunk_job_declares_the_run_time_of_its_new_size_to_reservations() {
    // Two 8-GPU nodes: a (8 GPUs, 100 s) fills one, h (4 GPUs, 60 s) half the other. r (8
    // GPUs, 100 s) waits and reserves the second node from 60, when h ends. e asks two 4-GPU
    // pods for 25 s and arrives at 10: it shrinks to one pod, which would fit the idle half
    // node before the reservation if it still took 25 s, but at half size it takes 50 s and
    // would end at 70, after r's start: it waits. r runs 60-160 as under drover; e starts
    // with one pod when a ends (100), grows to two at once and runs them 110-135.
    let text =
        "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\na,0,100,1,8\nh,0,60,1,4\nr,0,100,1,8\ne,10,25,2,4\n";
    assert_eq!(finishes(&replay(text, 2, Policy::Drover)), [Some(100), Some(60), Some(160), Some(125)]);
    let elastic = replay(text, 2, Policy::DroverElastic);
    assert_eq!(finishes(&elastic), [Some(100), Some(60), Some(160), Some(135)]);
    assert_eq!((elastic.jobs[3].shrinks, elastic.jobs[3].grows), (1, 1));
}

#[test]
fn cpu_only_gangs_stay_rigid() {
    // One node of 96 CPUs: a holds 50 of them for 100 s. d, a CPU-only gang of two 40-CPU
    // pods, would fit the 46 left with one pod; it waits for both, under both policies, and
    // runs 100-150.
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod\na,0,100,1,0,50\nd,0,50,2,0,40\n";
    let elastic = replay(text, 1, Policy::DroverElastic);
    assert_eq!(finishes(&elastic), [Some(100), Some(150)]);
    assert_eq!(elastic.jobs, replay(text, 1, Policy::Drover).jobs);
}

/// Three 8-GPU nodes, users hashed into two queues: gangs, a CPU-only job, and reclaim.
const MIXED: &str = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user
a,0,300,2,8,,u1
b,0,100,1,8,,u1
c,20,50,2,4,,u2
d,30,10,1,0,4,u2
e,40,200,3,4,,u3
f,50,30,1,2,,u4
g,60,80,4,2,,u5
h,70,40,2,4,,u6
";

/// `drover sim --trace mixed.csv --nodes 3 --cpus-per-node 96 --queues 2 --output json` before
/// `drover-elastic` existed (at 7a2a9f7), one policy a line.
const MIXED_BEFORE: &str = r#"{"cluster":{"cpusPerNode":96,"gpusPerNode":8,"nodes":3,"periodSeconds":10,"queues":2},"policies":{
"drover":{"avgJctSeconds":218.6,"avgQueueSeconds":104.3,"cpuOnly":{"avgJctSeconds":10.0,"avgQueueSeconds":0.0,"finished":1,"jobs":1},"cycles":14,"deadlocks":0,"evictedPods":3,"finished":7,"gpuAllocation":0.7813,"gpuHoursLost":0.3,"jobs":7,"makespanSeconds":620,"p50JctSeconds":180.0,"p50QueueSeconds":80.0,"p95JctSeconds":580.0,"p95QueueSeconds":380.0,"p99JctSeconds":580.0,"p99QueueSeconds":380.0,"queueBySize":{"2-4":{"avgQueueSeconds":10.0,"jobs":1,"p95QueueSeconds":10.0},"5-8":{"avgQueueSeconds":55.0,"jobs":4,"p95QueueSeconds":120.0},"9-16":{"avgQueueSeconds":250.0,"jobs":2,"p95QueueSeconds":380.0}},"queues":{"q0":{"fairShare":0.0938,"fairShareError":0.0125,"share":0.0813},"q1":{"fairShare":0.7729,"fairShareError":0.0729,"share":0.7}}},
"fifo-backfill":{"avgJctSeconds":215.7,"avgQueueSeconds":101.4,"cpuOnly":{"avgJctSeconds":10.0,"avgQueueSeconds":0.0,"finished":1,"jobs":1},"cycles":13,"deadlocks":0,"evictedPods":0,"finished":7,"gpuAllocation":0.9732,"gpuHoursLost":0.0,"jobs":7,"makespanSeconds":500,"p50JctSeconds":150.0,"p50QueueSeconds":100.0,"p95JctSeconds":460.0,"p95QueueSeconds":260.0,"p99JctSeconds":460.0,"p99QueueSeconds":260.0,"queueBySize":{"2-4":{"avgQueueSeconds":100.0,"jobs":1,"p95QueueSeconds":100.0},"5-8":{"avgQueueSeconds":87.5,"jobs":4,"p95QueueSeconds":160.0},"9-16":{"avgQueueSeconds":130.0,"jobs":2,"p95QueueSeconds":260.0}},"queues":{"q0":{"fairShare":0.3006,"fairShareError":0.1845,"share":0.1161},"q1":{"fairShare":0.6994,"fairShareError":0.1577,"share":0.8571}}},
"fifo-strict":{"avgJctSeconds":227.1,"avgQueueSeconds":112.9,"cpuOnly":{"avgJctSeconds":10.0,"avgQueueSeconds":0.0,"finished":1,"jobs":1},"cycles":14,"deadlocks":0,"evictedPods":0,"finished":7,"gpuAllocation":0.878,"gpuHoursLost":0.0,"jobs":7,"makespanSeconds":500,"p50JctSeconds":150.0,"p50QueueSeconds":100.0,"p95JctSeconds":460.0,"p95QueueSeconds":260.0,"p99JctSeconds":460.0,"p99QueueSeconds":260.0,"queueBySize":{"2-4":{"avgQueueSeconds":100.0,"jobs":1,"p95QueueSeconds":100.0},"5-8":{"avgQueueSeconds":107.5,"jobs":4,"p95QueueSeconds":240.0},"9-16":{"avgQueueSeconds":130.0,"jobs":2,"p95QueueSeconds":260.0}},"queues":{"q0":{"fairShare":0.3006,"fairShareError":0.1845,"share":0.1161},"q1":{"fairShare":0.6994,"fairShareError":0.253,"share":0.7619}}},
"greedy":{"avgJctSeconds":292.9,"avgQueueSeconds":178.6,"cpuOnly":{"avgJctSeconds":10.0,"avgQueueSeconds":0.0,"finished":1,"jobs":1},"cycles":14,"deadlocks":0,"evictedPods":0,"finished":7,"gpuAllocation":1.0,"gpuHoursLost":0.0,"jobs":7,"makespanSeconds":550,"p50JctSeconds":320.0,"p50QueueSeconds":280.0,"p95JctSeconds":510.0,"p95QueueSeconds":330.0,"p99JctSeconds":510.0,"p99QueueSeconds":330.0,"queueBySize":{"2-4":{"avgQueueSeconds":50.0,"jobs":1,"p95QueueSeconds":50.0},"5-8":{"avgQueueSeconds":222.5,"jobs":4,"p95QueueSeconds":330.0},"9-16":{"avgQueueSeconds":155.0,"jobs":2,"p95QueueSeconds":310.0}},"queues":{"q0":{"fairShare":0.464,"fairShareError":0.2635,"share":0.2005},"q1":{"fairShare":0.536,"fairShareError":0.2635,"share":0.7995}}},
"sjf":{"avgJctSeconds":211.4,"avgQueueSeconds":97.1,"cpuOnly":{"avgJctSeconds":10.0,"avgQueueSeconds":0.0,"finished":1,"jobs":1},"cycles":13,"deadlocks":0,"evictedPods":0,"finished":7,"gpuAllocation":0.9732,"gpuHoursLost":0.0,"jobs":7,"makespanSeconds":500,"p50JctSeconds":200.0,"p50QueueSeconds":60.0,"p95JctSeconds":460.0,"p95QueueSeconds":260.0,"p99JctSeconds":460.0,"p99QueueSeconds":260.0,"queueBySize":{"2-4":{"avgQueueSeconds":50.0,"jobs":1,"p95QueueSeconds":50.0},"5-8":{"avgQueueSeconds":92.5,"jobs":4,"p95QueueSeconds":160.0},"9-16":{"avgQueueSeconds":130.0,"jobs":2,"p95QueueSeconds":260.0}},"queues":{"q0":{"fairShare":0.3036,"fairShareError":0.1875,"share":0.1161},"q1":{"fairShare":0.6964,"fairShareError":0.1607,"share":0.8571}}}
}}"#;

#[test]
fn the_other_policies_replay_exactly_as_before() {
    let jobs = rows::parse("mixed.csv", MIXED).unwrap();
    let cluster = Cluster { nodes: 3, queues: 2, ..cluster(3) };
    let now: Value =
        serde_json::from_str(&trace::to_json(&cluster, &trace::run(&jobs, &cluster, &ALL).unwrap())).unwrap();
    let mut before: Value = serde_json::from_str(MIXED_BEFORE).unwrap();
    assert!(now["policies"]["drover-elastic"].is_object(), "every policy runs by default");
    assert!(before["policies"]["drover-elastic"].is_null());
    before["policies"]["drover-elastic"] = now["policies"]["drover-elastic"].clone();
    assert_eq!(now, before);
    assert!(now["policies"]["drover"].get("elastic").is_none(), "only the elastic policy reports resizes");
}
