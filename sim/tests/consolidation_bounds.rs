//! Consolidation's per-cycle bounds (`MAX_GANGS` gangs tried and `MAX_MOVED_PODS` pods moved
//! per cycle), on clusters built from the constants so that one more gang or move would
//! work: each bound, and nothing else, stops consolidation.

use drover_scheduler::actions::consolidate::{MAX_GANGS, MAX_MOVED_PODS};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::session::EvictReason;
use drover_sim::{run, scenario};

/// A cluster of `gangs` pool-`g` nodes `a{i}` (8 GPUs) each running `moves` one-pod, one-GPU
/// preemptible jobs, and `gangs` pool-`s` nodes `s{i}` (8 GPUs, 5 taken by a non-preemptible
/// pod, so 3 idle); `gangs` pending gangs `g{i}` each need one 8-GPU pod in pool `g`. No
/// `a` node has 8 idle GPUs, so each gang needs the `moves` pods of one `a` node moved; the
/// `s` nodes, having the least idle capacity, take every moved pod (3 each), so every gang
/// could be seated if the bounds allowed it. One more pool-`g` node `ax` has 7 idle GPUs
/// beside a non-preemptible pod: it can never be freed, but keeps the idle capacity of pool
/// `g` above 8 GPUs in total for every gang (consolidation only helps a gang whose request
/// the idle capacity holds in total). Preempt and reclaim are off.
fn fragmented(gangs: usize, moves: usize) -> String {
    let mut y = String::from(
        "name: consolidation-bounds\nconfig: {actions: [enqueue, allocate, consolidation]}\n\
         priorityClasses:\n  - {name: train, value: 50, preemptible: true}\n  - {name: serve, value: 100, preemptible: false}\n\
         queues: [{name: q}]\nnodes:\n",
    );
    for i in 0..gangs {
        y += &format!(
            "  - {{name: a{i}, allocatable: {{cpu: \"64\", memory: 256Gi, nvidia.com/gpu: \"8\"}}, labels: {{drover.dev/node-pool: g}}}}\n\
             \x20 - {{name: s{i}, allocatable: {{cpu: \"64\", memory: 256Gi, nvidia.com/gpu: \"8\"}}, labels: {{drover.dev/node-pool: s}}}}\n"
        );
    }
    y += "  - {name: ax, allocatable: {cpu: \"64\", memory: 256Gi, nvidia.com/gpu: \"8\"}, labels: {drover.dev/node-pool: g}}\n";
    y += "jobs:\n";
    y += "  - {name: fillx, queue: q, priorityClass: serve, createdAt: 0,\n     \
          tasks: [{name: w, replicas: 1, requests: {nvidia.com/gpu: \"1\"}, running: [ax]}]}\n";
    for i in 0..gangs {
        y += &format!(
            "  - {{name: fill{i}, queue: q, priorityClass: serve, createdAt: 0,\n     \
             tasks: [{{name: w, replicas: 1, requests: {{nvidia.com/gpu: \"5\"}}, running: [s{i}]}}]}}\n"
        );
        for m in 0..moves {
            // Later pairs' jobs are newer: consolidation tries the newest first, so it takes
            // the pods of one `a` node in a row.
            y += &format!(
                "  - {{name: m{i}-{m}, queue: q, priorityClass: train, createdAt: {},\n     \
                 tasks: [{{name: w, replicas: 1, requests: {{nvidia.com/gpu: \"1\"}}, running: [a{i}]}}]}}\n",
                1 + i * moves + m
            );
        }
        y += &format!(
            "  - {{name: g{i}, queue: q, priorityClass: train, createdAt: 1000,\n     \
             tasks: [{{name: w, replicas: 1, requests: {{nvidia.com/gpu: \"8\"}}, nodeSelector: {{drover.dev/node-pool: g}}}}]}}\n"
        );
    }
    y
}

/// Gangs seated (pipelined) and pods moved in one cycle of `fragmented(gangs, moves)`.
fn consolidate(gangs: usize, moves: usize) -> (usize, usize) {
    let s = scenario::parse(&fragmented(gangs, moves), "consolidation-bounds.yaml").expect("a valid scenario");
    let mut config = SchedulerConfig::default();
    config.apply(&s.config);
    let result = run::simulate(&s, &config, 1).expect("builds");
    let mut seated: Vec<_> =
        result.last.decisions.pipelined.iter().map(|&(p, _)| result.snapshot.pods[p].job).collect();
    seated.sort_unstable();
    seated.dedup();
    let moved = result.evictions.iter().filter(|e| e.reason == EvictReason::Consolidate).count();
    (seated.len(), moved)
}

#[test]
fn each_gang_needs_its_moves_and_no_more_when_the_bounds_allow() {
    // Within both bounds every gang is seated with exactly its own moves: the cluster works
    // as the other tests assume.
    assert_eq!(consolidate(2, 1), (2, 2));
    assert_eq!(consolidate(2, 3), (2, 6));
}

#[test]
fn at_most_max_gangs_gangs_are_seated_per_cycle() {
    const { assert!(MAX_GANGS < MAX_MOVED_PODS, "one move per gang stays within the pod bound") };
    assert_eq!(consolidate(MAX_GANGS + 1, 1), (MAX_GANGS, MAX_GANGS));
}

#[test]
fn at_most_max_moved_pods_pods_move_per_cycle() {
    const { assert!(MAX_MOVED_PODS / 3 < MAX_GANGS, "the pod bound, not the gang bound, stops consolidation here") };
    let fit = MAX_MOVED_PODS / 3;
    assert_eq!(consolidate(fit + 1, 3), (fit, 3 * fit));
}
