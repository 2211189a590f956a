//! Trace mode (`drover sim --trace FILE.csv`): a real GPU-cluster job trace replayed through
//! the production scheduling core under several policies side by side, as the trace-mode
//! section of `scenario-format.md` specifies. [`rows`] reads the trace, [`policy`] names the
//! policies, [`inputs`] describes the cluster, [`replay`] runs the virtual clock (jumping to
//! the [`ends`] of running jobs), [`work`] says how long a job runs at the size it runs with,
//! [`restart`] restarts resized jobs, [`eta`] keeps and judges the start forecasts, [`metrics`]
//! sums up each run, [`racks`] groups the nodes into racks when asked and [`plot`] draws them.

pub mod ends;
pub mod eta;
pub mod eta_accuracy;
pub mod inputs;
pub mod metrics;
pub mod plot;
pub mod policy;
pub mod racks;
pub mod record;
pub mod replay;
pub mod restart;
pub mod rows;
pub mod work;

use serde_json::{json, Map};

use drover_scheduler::snapshot::SnapshotError;
use metrics::Summary;
use policy::Policy;
use racks::{Placement, Racks};
use replay::{Cluster, DeclaredRuntimes, QueueQuota, Replay};
use rows::TraceJob;

/// CPUs per GPU a node has when `--cpus-per-node` is not given (96 for 8 GPUs, as on common
/// 8-GPU servers), raised to fit the trace's largest pod.
pub const DEFAULT_CPUS_PER_GPU: u32 = 12;

/// The default CPUs per node for a trace: 12 per GPU, or the largest pod's request if more.
pub fn default_cpus_per_node(trace: &[TraceJob], gpus_per_node: u32) -> u32 {
    let largest = trace.iter().filter_map(|j| j.cpus_per_pod).max().unwrap_or(1);
    (DEFAULT_CPUS_PER_GPU * gpus_per_node).max(largest).max(1)
}

/// One policy's replay and its figures.
pub struct Run {
    /// The policy.
    pub policy: Policy,
    /// What happened.
    pub replay: Replay,
    /// The figures.
    pub summary: Summary,
    /// With racks: where the multi-node gangs landed, and the same replay with the scheduler
    /// blind to the racks.
    pub racks: Option<RackRun>,
}

/// A policy's replay with racks, beside the same replay without topology.
pub struct RackRun {
    /// Where multi-node gangs landed with the scheduler told about the racks.
    pub placement: Placement,
    /// The figures of the same replay with no topology and no requests.
    pub flat: Summary,
    /// Where multi-node gangs landed then (the same racks, unknown to the scheduler).
    pub flat_placement: Placement,
}

/// Replays the trace under each policy, in the order given; with racks, each policy twice:
/// with the racks as the `default` topology, and without topology.
pub fn run(trace: &[TraceJob], cluster: &Cluster, policies: &[Policy]) -> Result<Vec<Run>, SnapshotError> {
    let total = cluster.nodes * cluster.gpus_per_node;
    let placement =
        |racks: Racks, replay: &Replay| racks.placement(trace, replay, cluster.nodes, cluster.gpus_per_node);
    policies
        .iter()
        .map(|&policy| {
            let replay = replay::replay(trace, cluster, policy)?;
            let summary = metrics::summarize(trace, &replay, total);
            let racks = match cluster.racks {
                Some(racks) => {
                    let blind = Racks { aware: false, ..racks };
                    let flat = replay::replay(trace, &Cluster { racks: Some(blind), ..cluster.clone() }, policy)?;
                    Some(RackRun {
                        placement: placement(racks, &replay),
                        flat: metrics::summarize(trace, &flat, total),
                        flat_placement: placement(blind, &flat),
                    })
                }
                None => None,
            };
            Ok(Run { policy, replay, summary, racks })
        })
        .collect()
}

/// Writes the plots of the runs into `dir` (see [`plot`]); returns the paths written.
pub fn plots(
    dir: &std::path::Path,
    trace: &[TraceJob],
    cluster: &Cluster,
    runs: &[Run],
) -> Result<Vec<std::path::PathBuf>, String> {
    let pairs: Vec<(Policy, &Replay)> = runs.iter().map(|r| (r.policy, &r.replay)).collect();
    plot::write_all(dir, trace, cluster.nodes * cluster.gpus_per_node, &pairs)
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// The JSON report: `policies` maps each policy name to its figures; the cluster used is
/// echoed under `cluster`.
pub fn to_json(cluster: &Cluster, runs: &[Run]) -> String {
    let mut policies = Map::new();
    for r in runs {
        let mut figures = r.summary.to_json();
        if let Some(rr) = &r.racks {
            figures["racks"] = rr.placement.to_json();
            let mut flat = rr.flat.to_json();
            flat["racks"] = rr.flat_placement.to_json();
            figures["withoutTopology"] = flat;
        }
        policies.insert(r.policy.name().to_string(), figures);
    }
    let mut report = json!({
        "cluster": {"nodes": cluster.nodes, "gpusPerNode": cluster.gpus_per_node, "cpusPerNode": cluster.cpus_per_node,
            "queues": cluster.queues.max(1), "periodSeconds": cluster.period},
        "policies": policies,
    });
    if cluster.quota == QueueQuota::None {
        report["cluster"]["queueQuota"] = json!("none");
    }
    if cluster.declared_runtimes == DeclaredRuntimes::None {
        report["cluster"]["declaredRuntimes"] = json!("none");
    }
    if let Some(t) = cluster.config.time_based() {
        report["cluster"]["timeBasedFairShare"] = json!({"halfLifeSeconds": t.half_life_seconds,
            "windowSeconds": t.window_seconds, "tickSeconds": t.tick_seconds, "kValue": t.k_value});
    }
    if let Some(racks) = &cluster.racks {
        let c = &mut report["cluster"];
        c["nodesPerRack"] = json!(racks.nodes_per_rack);
        c["racks"] = json!(racks.count(cluster.nodes));
        if let Some(per_block) = racks.racks_per_block {
            c["racksPerBlock"] = json!(per_block);
        }
    }
    format!("{}\n", serde_json::to_string_pretty(&report).expect("a JSON value serializes"))
}

/// The table for people: one row per policy.
pub fn to_table(cluster: &Cluster, runs: &[Run]) -> String {
    let mut out = format!(
        "trace replay on {} nodes x {} GPUs ({} CPUs each), {} queue(s), a cycle every {} s{}\n\n",
        cluster.nodes,
        cluster.gpus_per_node,
        cluster.cpus_per_node,
        cluster.queues.max(1),
        cluster.period,
        if cluster.declared_runtimes == DeclaredRuntimes::None { ", no run times declared" } else { "" }
    );
    let header = [
        "POLICY",
        "GPU JOBS",
        "FINISHED",
        "AVG JCT",
        "AVG QUEUE",
        "P50 QUEUE",
        "P95 QUEUE",
        "P99 QUEUE",
        "GPU ALLOC",
        "DEADLOCKS",
        "EVICTED",
        "MAKESPAN",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for Run { policy, summary: s, .. } in runs {
        rows.push(vec![
            policy.name().to_string(),
            s.jobs.to_string(),
            s.finished.to_string(),
            human(s.jct.avg),
            human(s.queue.avg),
            human(s.queue.p50),
            human(s.queue.p95),
            human(s.queue.p99),
            format!("{:.1}%", s.gpu_allocation * 100.0),
            s.deadlocks.to_string(),
            s.evicted_pods.to_string(),
            human(s.makespan as f64),
        ]);
    }
    push_table(&mut out, rows);
    for run in runs {
        let eta = run.summary.eta;
        if eta.at_submission.given + eta.at_half_wait.given > 0 {
            out.push_str(&format!(
                "\n{}: start forecasts of the {} GPU jobs that waited 10 min or more: median error {:.0}% at submission, {:.0}% at half the wait (p90 {:.0}%, {:.0}%)\n",
                run.policy.name(),
                eta.jobs,
                eta.at_submission.median * 100.0,
                eta.at_half_wait.median * 100.0,
                eta.at_submission.p90 * 100.0,
                eta.at_half_wait.p90 * 100.0
            ));
            let ranges = eta.ranges_at_half_wait;
            out.push_str(&format!(
                "{}: at half the wait, {:.0}% started inside the 80% range given (median range {}, median wait {})\n",
                run.policy.name(),
                ranges.in_range * 100.0,
                human(ranges.median_range as f64),
                human(ranges.median_wait as f64)
            ));
        }
        if let Some(e) = run.summary.elastic {
            out.push_str(&format!(
                "\n{}: {} GPU jobs shrank; elastic restarts: {} with fewer pods, {} with more\n",
                run.policy.name(),
                e.jobs_shrunk,
                e.shrinks,
                e.grows
            ));
        }
    }
    if let Some(racks) = &cluster.racks {
        out.push_str(&rack_table(cluster, racks, runs));
    }
    out
}

/// The rack comparison for people: per policy, the replay with the racks as the `default`
/// topology and without topology.
fn rack_table(cluster: &Cluster, racks: &Racks, runs: &[Run]) -> String {
    let blocks = racks.racks_per_block.map(|b| format!(", {b} racks per block")).unwrap_or_default();
    let mut out = format!(
        "\nracks of {} nodes ({} racks{blocks}): multi-node gangs (more GPUs than a node) that one rack can hold, \
         placed within one rack, with the racks as topology (on) and without (off)\n\n",
        racks.nodes_per_rack,
        racks.count(cluster.nodes),
    );
    let header = [
        "POLICY",
        "TOPOLOGY",
        "GANGS",
        "IN ONE RACK",
        "LARGER THAN A RACK",
        "GPU ALLOC",
        "AVG JCT",
        "AVG QUEUE",
        "P95 QUEUE",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for run in runs {
        let Some(rr) = &run.racks else { continue };
        for (mode, s, p) in [("on", &run.summary, &rr.placement), ("off", &rr.flat, &rr.flat_placement)] {
            rows.push(vec![
                run.policy.name().to_string(),
                mode.to_string(),
                p.gangs.to_string(),
                format!("{:.1}%", p.share() * 100.0),
                p.larger_than_rack.to_string(),
                format!("{:.1}%", s.gpu_allocation * 100.0),
                human(s.jct.avg),
                human(s.queue.avg),
                human(s.queue.p95),
            ]);
        }
    }
    push_table(&mut out, rows);
    out
}

/// Appends rows as left-aligned columns two spaces apart.
fn push_table(out: &mut String, rows: Vec<Vec<String>>) {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
}

/// Seconds as people read them: `42s`, `3.5m`, `7.2h`, `2.1d`.
fn human(seconds: f64) -> String {
    match seconds {
        s if s < 60.0 => format!("{s:.0}s"),
        s if s < 3600.0 => format!("{:.1}m", s / 60.0),
        s if s < 86400.0 => format!("{:.1}h", s / 3600.0),
        s => format!("{:.1}d", s / 86400.0),
    }
}
