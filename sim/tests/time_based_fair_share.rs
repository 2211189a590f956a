//! Time-based fair share on the two-queue case: one 8-GPU node, two queues that
//! deserve nothing and weigh 1 each, each with 100 one-pod jobs asking for the whole cluster
//! (10 minutes each), all submitted at once. Without memory the first queue in name order
//! holds the cluster until its 100 jobs are done; with it, the queues take turns.

use drover_scheduler::config::SchedulerConfig;
use drover_sim::trace::policy::Policy;
use drover_sim::trace::replay::{self, Cluster, QueueQuota};
use drover_sim::trace::rows;

/// Users `a` and `b` hash to queues q0 and q1 of two.
fn trace() -> Vec<rows::TraceJob> {
    let mut text = String::from("job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user\n");
    for user in ["a", "b"] {
        for i in 0..100 {
            text.push_str(&format!("{user}{i:03},0,600,1,8,1,{user}\n"));
        }
    }
    rows::parse("alternation.csv", &text).expect("a valid trace")
}

/// The users of the jobs in the order they finished, and the pods evicted.
fn run(time_based: bool) -> (String, u32) {
    let mut config = SchedulerConfig::default();
    if time_based {
        config.enable_time_based();
    }
    let cluster = Cluster { queues: 2, quota: QueueQuota::None, config, ..Cluster::uniform(1, 8, 96) };
    let jobs = trace();
    let replay = replay::replay(&jobs, &cluster, Policy::Drover).expect("the replay runs");
    let mut finished: Vec<(i64, &str)> =
        replay.jobs.iter().map(|r| (r.finish.expect("every job finishes"), &jobs[r.job].user[..])).collect();
    finished.sort();
    let order = finished.iter().map(|(_, user)| *user).collect();
    (order, replay.jobs.iter().map(|r| r.evicted_pods).sum())
}

#[test]
fn without_memory_one_queue_holds_the_cluster_until_its_work_is_done() {
    let (order, evicted) = run(false);
    assert_eq!(order, "a".repeat(100) + &"b".repeat(100));
    assert_eq!(evicted, 0);
}

#[test]
fn with_memory_the_queues_take_turns() {
    let (order, evicted) = run(true);
    assert_eq!(order, "ab".repeat(100), "each job ends and the queue that used less lately goes next");
    assert_eq!(evicted, 0, "turns come as jobs end: a fair share that moves slowly takes nothing back");
}
