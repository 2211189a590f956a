//! Writes a large synthetic scenario: the cluster of the scheduler's scale benchmark
//! (`scheduler/benches/cycle.rs`) as a scenario file, so that `drover sim` can be timed end
//! to end, parsing and validation included.
//!
//! ```text
//! cargo run --release -p drover-sim --example gen_scale_scenario -- \
//!     --nodes 1000 --running 5000 --pending 10000 --out /tmp/scale-1k.yaml
//! time ./target/release/drover sim /tmp/scale-1k.yaml --output json > /dev/null
//! ```
//!
//! The cycle bench's size C is `--nodes 10000 --running 50000 --pending 100000 --tree
//! divisions`.
//!
//! The cluster: `--nodes` nodes of 8 GPUs (cpu 64, memory 512Gi, pods 110); a queue tree,
//! `--tree departments` (the default: 5 departments x 10 projects) or `--tree divisions` (10
//! divisions x 10 departments x 19 projects), whose deserved GPU quotas add up to the cluster
//! (weight 1, root 4 and project 5 of each parent with limits); `--running` running one-GPU
//! pods as jobs of 10
//! spread over the nodes without over-committing any, mostly in small-quota projects that
//! borrowed beyond their quota; `--pending` pending one-GPU pods in gangs of 10
//! (minMember 10) spread over the projects in proportion to quota, 30% of them at priority
//! 75 (`interactive-preemptible`) and the rest at 50 (`train`). Generation is deterministic.

use std::process::ExitCode;

use drover_sim::synthetic;

const USAGE: &str =
    "usage: gen_scale_scenario --nodes N --running R --pending P [--tree departments|divisions] --out FILE";

fn main() -> ExitCode {
    let mut nodes = None;
    let mut running = None;
    let mut pending = None;
    let mut out = None;
    let mut tree = synthetic::Tree::DEPARTMENTS;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("error: {flag} needs a value\n{USAGE}");
            return ExitCode::from(2);
        };
        let number = || value.parse::<usize>().map_err(|e| format!("{flag} {value:?}: {e}"));
        let parsed = match flag.as_str() {
            "--nodes" => number().map(|n| nodes = Some(n)),
            "--running" => number().map(|n| running = Some(n)),
            "--pending" => number().map(|n| pending = Some(n)),
            "--tree" => synthetic::Tree::named(&value)
                .map(|t| tree = t)
                .ok_or_else(|| format!("--tree {value:?}: expected departments or divisions")),
            "--out" => {
                out = Some(value.clone());
                Ok(())
            }
            _ => Err(format!("unknown argument {flag:?}")),
        };
        if let Err(e) = parsed {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let (Some(nodes), Some(running), Some(pending), Some(out)) = (nodes, running, pending, out) else {
        eprintln!("error: every argument is required\n{USAGE}");
        return ExitCode::from(2);
    };
    let plan = match synthetic::plan(nodes, running, pending, tree) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let text = plan.to_yaml(&format!("scale-{nodes}-nodes-{running}-running-{pending}-pending"));
    if let Err(e) = std::fs::write(&out, &text) {
        eprintln!("error: {out}: {e}");
        return ExitCode::from(2);
    }
    eprintln!("wrote {out}: {} nodes, {} queues, {} jobs, {} bytes", nodes, plan.queues(), plan.jobs(), text.len());
    ExitCode::SUCCESS
}
