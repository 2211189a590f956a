//! Scale benchmark of one full scheduling cycle (enqueue, allocate, preempt, reclaim,
//! backfill) on the synthetic clusters of [`drover_sim::synthetic`].
//!
//! Run with `cargo bench -p drover-sim --bench cycle` (optionally followed by `-- A`, `-- B`, `-- C`,
//! `-- T` or `-- G` to run some sizes only; `DROVER_BENCH_RUNS=n` sets the number of timed
//! runs). Sizes `T` and `G` are the topology sizes of [`topology`]. The
//! cluster is generated as a scenario file and read the way `drover sim` reads it; then the
//! bench times snapshot building and `run_cycle` separately and prints min/median/max
//! milliseconds, the decisions of the cycle, the time of each action in one cycle, and a
//! one-line summary per size. Timings are reported, never asserted; the bench only asserts
//! that the cycle made progress (binds > 0) and that runs agree, so a broken engine is
//! noticed.

use std::time::{Duration, Instant};

use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, run_cycle_observed};
use drover_scheduler::snapshot::{self, Snapshot};
use drover_sim::synthetic::Tree;
use drover_sim::{scenario, synthetic};

#[path = "support/topology.rs"]
mod topology;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (min, median, max) in milliseconds.
fn stats(samples: &[Duration]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = samples.iter().copied().map(ms).collect();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// One cycle with each action's time and the decisions it added.
fn instrumented_cycle(snap: &Snapshot, config: &SchedulerConfig) -> Vec<(String, Duration)> {
    let mut phases = Vec::new();
    let mut before = (0, 0, 0);
    run_cycle_observed(snap, config, &mut |action, took, d| {
        let now = (d.binds.len(), d.evictions.len(), d.pipelined.len());
        let label = format!(
            "{action:?} (+{} binds, +{} evictions, +{} pipelined)",
            now.0 - before.0,
            now.1 - before.1,
            now.2 - before.2
        );
        phases.push((label.to_lowercase(), took));
        before = now;
    });
    phases
}

#[derive(Clone, Copy)]
struct Size {
    label: &'static str,
    nodes: usize,
    running: usize,
    pending: usize,
    tree: synthetic::Tree,
    runs: usize,
}

fn bench(size: &Size, config: &SchedulerConfig) -> f64 {
    let t = Instant::now();
    let plan = synthetic::plan(size.nodes, size.running, size.pending, size.tree).expect("the sizes fit");
    let text = plan.to_yaml(&format!("bench-{}", size.label));
    let parsed = scenario::parse(&text, "synthetic").expect("the synthetic scenario is valid");
    let inputs = parsed;
    println!(
        "size {}: {} nodes x {} GPUs, {} queues, {} jobs, {} running pods, {} pending pods \
         (generated and parsed in {:.1} ms)",
        size.label,
        size.nodes,
        synthetic::GPUS_PER_NODE,
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
        Size { label: "A", nodes: 1_000, running: 5_000, pending: 10_000, tree: Tree::DEPARTMENTS, runs: 5 },
        Size { label: "B", nodes: 5_000, running: 25_000, pending: 50_000, tree: Tree::DEPARTMENTS, runs: 3 },
        Size { label: "C", nodes: 10_000, running: 50_000, pending: 100_000, tree: Tree::DIVISIONS, runs: 3 },
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
    let runs_or = |n| runs.unwrap_or(n);
    if wanted.is_empty() || wanted.iter().any(|w| w.eq_ignore_ascii_case("T")) {
        let (with, without) = topology::racks(runs_or(7), &config);
        summary.push(format!(
            "size T: cycle median {with:.1} ms with topology, {without:.1} ms without ({:.2}x)",
            with / without
        ));
        println!();
    }
    if wanted.is_empty() || wanted.iter().any(|w| w.eq_ignore_ascii_case("G")) {
        let (slices, tasks) = topology::gang(runs_or(5), &config);
        summary.push(format!("size G: cycle median {slices:.1} ms as slices, {tasks:.1} ms as tasks"));
        println!();
    }
    for line in summary {
        println!("{line}");
    }
}
