//! Speed of trace mode: replays the two bundled real traces (`../shared/traces`) at the
//! cluster sizes that make contention (ITP cluster04 on 64 nodes x 8 GPUs, Helios Venus on 90
//! x 8), once per policy, and prints the wall time of each replay with its cycle count.
//!
//! Run with `cargo bench -p drover-sim --bench trace` (optionally `-- itp` or `-- venus`, and
//! `-- POLICY` to replay one policy). Timings are reported, never asserted; the bench asserts
//! only that every GPU job of a gang policy finished, so a broken replay is noticed.

use std::path::PathBuf;
use std::time::Instant;

use drover_sim::trace::{self, policy, replay::Cluster, rows};

fn main() {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    // Every filter must name the trace or the policy: `-- itp drover` replays one.
    let wanted =
        |label: &str, policy: &str| filters.iter().all(|f| label.contains(f.as_str()) || policy.contains(f.as_str()));
    let traces = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
    for (label, file, nodes) in
        [("itp", "msft_itp_cluster04_2021-03-04_60d.csv", 64), ("venus", "helios_venus_2020-05-28_20d.csv", 90)]
    {
        let path = traces.join(file);
        let jobs = match rows::load(&path) {
            Ok(jobs) => jobs,
            Err(e) => {
                eprintln!("{label}: skipped: {e}");
                continue;
            }
        };
        let cluster = Cluster::uniform(nodes, 8, trace::default_cpus_per_node(&jobs, 8));
        for p in policy::ALL {
            if !wanted(label, p.name()) {
                continue;
            }
            let started = Instant::now();
            let run = trace::run(&jobs, &cluster, &[p]).expect("the trace replays");
            let took = started.elapsed();
            let s = &run[0].summary;
            println!(
                "{label:<6} {:<14} {:>7.1} s  {:>6} cycles  {} of {} GPU jobs finished",
                p.name(),
                took.as_secs_f64(),
                s.cycles,
                s.finished,
                s.jobs
            );
            if p != policy::Policy::Greedy {
                assert_eq!(s.finished, s.jobs, "{label} {}: every GPU job finishes", p.name());
            }
        }
    }
}
