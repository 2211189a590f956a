//! The simulator's output: a JSON document with sorted keys (identical bytes on every run)
//! and a table for people that says, per job and per queue, what runs, what waits and why.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write;

use drover_api::PODS;
use drover_scheduler::ids::{ti_vec, JobId, TiVec};
use drover_scheduler::res::{Res, UNLIMITED};
use drover_scheduler::session::EvictReason;
use drover_scheduler::snapshot::{JobPhase, Snapshot, ROOT};
use serde::Serialize;

use crate::run::{pod_key, Eviction, PodFate, SimResult};

/// One pod's result.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PodReport {
    /// The node it is bound to or was evicted from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `Bound`, `Pending` or `Evicted`.
    pub state: &'static str,
}

/// One job's result.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct JobReport {
    /// Evictions of the job's pods over the whole run (the entries of `evictions`).
    pub evicted: u32,
    /// Pods waiting for a node.
    pub pending: u32,
    /// `Pending`, `Inqueue` or `Running`.
    pub phase: &'static str,
    /// The job's queue.
    pub queue: String,
    /// Why pods still wait ("" when none wait).
    pub reason: String,
    /// *Drover*: the nodes reserved for the waiting gang in the last cycle and when it is
    /// expected to start (absent when none are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationReport>,
    /// Bound pods.
    pub running: u32,
}

/// A waiting gang's reservation.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReservationReport {
    /// The reserved nodes, in name order.
    pub nodes: Vec<String>,
    /// When the gang is expected to start, on the scenario's clock (seconds).
    pub start: i64,
}

/// One queue's result.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct QueueReport {
    /// Resources of running pods (descendants included).
    pub allocated: BTreeMap<String, String>,
    /// Declared guaranteed quota.
    pub deserved: BTreeMap<String, String>,
    /// Fair share computed in the last cycle.
    pub fair_share: BTreeMap<String, String>,
    /// Hard cap, for the resources the queue limits (absent when it limits none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limit: BTreeMap<String, String>,
    /// `InQuota`, `OverQuota` or `OverFairShare`.
    pub state: &'static str,
    /// The resource that put the queue over its fair share or quota.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_resource: Option<String>,
}

/// The whole result.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Report {
    /// Cycles run.
    pub cycles: u32,
    /// Why each eviction happened, parallel to `evictions`.
    #[serde(rename = "evictionReasons")]
    pub eviction_reasons: Vec<&'static str>,
    /// Every eviction of the run, cycle by cycle.
    pub evictions: Vec<String>,
    /// Per job, by `namespace/name`.
    pub jobs: BTreeMap<String, JobReport>,
    /// Per pod, by `namespace/name` (empty in a [`summary`]).
    pub pods: BTreeMap<String, PodReport>,
    /// Per queue, by name.
    pub queues: BTreeMap<String, QueueReport>,
    /// *Drover*: every restart of an elastic job at another size (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resizes: Vec<ResizeReport>,
    /// Scenario name.
    pub scenario: String,
}

/// One restart of an elastic job at another size.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ResizeReport {
    /// Cycle number, from 1.
    pub cycle: u32,
    /// Pods before.
    pub from: u32,
    /// `namespace/job`.
    pub job: String,
    /// Why.
    pub reason: String,
    /// Pods after.
    pub to: u32,
}

fn phase_name(p: JobPhase) -> &'static str {
    match p {
        JobPhase::Pending => "Pending",
        JobPhase::Inqueue => "Inqueue",
        JobPhase::Running => "Running",
    }
}

fn named(snap: &Snapshot, r: &Res) -> BTreeMap<String, String> {
    let mut list = snap.to_list(r);
    list.0.remove(PODS);
    list.to_strings()
}

/// Builds the report of a run.
pub fn report(name: &str, result: &SimResult) -> Report {
    build(name, result, true)
}

/// The report without its per-pod map, for the table, which shows none: at 150,000 pods,
/// naming every pod is a tenth of the run.
pub fn summary(name: &str, result: &SimResult) -> Report {
    build(name, result, false)
}

fn build(name: &str, result: &SimResult, with_pods: bool) -> Report {
    let snap = &result.snapshot;
    let mut counts: TiVec<JobId, (u32, u32, u32)> = ti_vec![(0, 0, 0); snap.jobs.len()];
    for (p, fate) in result.fates.iter_enumerated() {
        match fate {
            PodFate::Bound(_) => counts[snap.pods[p].job].0 += 1,
            PodFate::Pending => counts[snap.pods[p].job].1 += 1,
            PodFate::Evicted(_) => {}
        }
    }
    for (j, times) in evictions_by_job(snap, &result.evictions) {
        counts[j].2 += times;
    }
    let pods = if with_pods { pod_reports(result) } else { BTreeMap::new() };
    let jobs = snap
        .jobs
        .iter_enumerated()
        .map(|(j, job)| {
            let (running, pending, evicted) = counts[j];
            let report = JobReport {
                phase: phase_name(result.last.job_phase[j]),
                queue: snap.queues[job.queue].name.clone(),
                running,
                pending,
                evicted,
                reason: result.last.reasons[j].clone().unwrap_or_default(),
                reservation: result.last.reservations.iter().find(|r| r.job == j).map(|r| {
                    let mut nodes: Vec<String> = r.nodes.iter().map(|(n, _)| snap.nodes[*n].name.clone()).collect();
                    nodes.sort();
                    ReservationReport { nodes, start: r.start }
                }),
            };
            (job.key(), report)
        })
        .collect();
    let queues = snap
        .queues
        .iter_enumerated()
        .filter(|&(q, _)| q != ROOT)
        .map(|(q, queue)| {
            let outcome = &result.last.queues[q];
            let mut deserved = snap.to_list(&queue.deserved);
            deserved
                .0
                .retain(|k, _| snap.resources.iter().position(|r| r == k).is_some_and(|i| queue.deserved_declared[i]));
            let report = QueueReport {
                allocated: named(snap, &outcome.allocated),
                deserved: deserved.to_strings(),
                fair_share: named(snap, &outcome.fair_share),
                limit: (0..snap.resources.len())
                    .filter(|&r| r != snap.pods_resource && queue.limit[r] != UNLIMITED)
                    .map(|r| (snap.resources[r].clone(), snap.amount(r, queue.limit[r])))
                    .collect(),
                state: outcome.state.as_str(),
                state_resource: outcome.decided_by.map(|r| snap.resources[r].clone()),
            };
            (queue.name.clone(), report)
        })
        .collect();
    Report {
        scenario: name.to_string(),
        cycles: result.cycles,
        pods,
        jobs,
        queues,
        evictions: result.evictions.iter().map(|e| e.pod.clone()).collect(),
        eviction_reasons: result
            .evictions
            .iter()
            .map(|e| match e.reason {
                EvictReason::Preempt => "preempt",
                EvictReason::Reclaim => "reclaim",
                EvictReason::Consolidate => "consolidate",
                EvictReason::Overrun => "overrun",
            })
            .collect(),
        resizes: result
            .resizes
            .iter()
            .map(|r| ResizeReport { cycle: r.cycle, job: r.job.clone(), from: r.from, to: r.to, reason: r.why.clone() })
            .collect(),
    }
}

/// Every pod's result, by `namespace/name`.
fn pod_reports(result: &SimResult) -> BTreeMap<String, PodReport> {
    let snap = &result.snapshot;
    result
        .fates
        .iter_enumerated()
        .map(|(p, fate)| {
            let (node, state) = match fate {
                PodFate::Bound(n) => (Some(n.clone()), "Bound"),
                PodFate::Pending => (None, "Pending"),
                PodFate::Evicted(n) => (Some(n.clone()), "Evicted"),
            };
            (pod_key(snap, p), PodReport { node, state })
        })
        .collect()
}

/// Each job's evictions over the whole run, as the `evictions` list names its pods: an
/// evicted name counts for the job of the last pod of that name in the final snapshot. Only
/// the pods of jobs whose `namespace/name-` begins an evicted name are named.
fn evictions_by_job(snap: &Snapshot, evictions: &[Eviction]) -> Vec<(JobId, u32)> {
    if evictions.is_empty() {
        return Vec::new();
    }
    let mut evicted: HashMap<&str, (u32, Option<JobId>)> = HashMap::new();
    for e in evictions {
        evicted.entry(e.pod.as_str()).or_default().0 += 1;
    }
    let mut names: Vec<&str> = evicted.keys().copied().collect();
    names.sort_unstable();
    let candidate: TiVec<JobId, bool> = snap
        .jobs
        .iter()
        .map(|job| {
            let prefix = format!("{}/{}-", job.namespace, job.name);
            names.get(names.partition_point(|n| *n < prefix.as_str())).is_some_and(|n| n.starts_with(&prefix))
        })
        .collect();
    for (p, pod) in snap.pods.iter_enumerated().filter(|(_, pod)| candidate[pod.job]) {
        if let Some((_, of)) = evicted.get_mut(pod_key(snap, p).as_str()) {
            *of = Some(pod.job);
        }
    }
    evicted.into_values().filter_map(|(times, job)| Some((job?, times))).collect()
}

/// The report as JSON with every object's keys sorted: the maps are sorted, and every
/// struct declares its fields in the order of their names (a test holds them to it), so
/// the report is written straight, without building a tree of values to sort.
pub fn to_json(report: &Report) -> String {
    let mut text = Vec::new();
    write_json(report, &mut text).expect("writing to memory does not fail");
    String::from_utf8(text).expect("JSON is UTF-8")
}

/// Writes [`to_json`]'s text to `out`, as it is made (a 150,000-pod report is 18 MB).
pub fn write_json(report: &Report, mut out: impl Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut out, report)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// The report as aligned text tables.
pub fn to_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "scenario {} after {} cycle(s)\n", report.scenario, report.cycles);
    let job_rows: Vec<Vec<String>> = report
        .jobs
        .iter()
        .map(|(k, j)| {
            vec![
                k.clone(),
                j.queue.clone(),
                j.phase.to_string(),
                j.running.to_string(),
                j.pending.to_string(),
                j.evicted.to_string(),
                j.reason.clone(),
            ]
        })
        .collect();
    table(&mut out, &["JOB", "QUEUE", "PHASE", "RUNNING", "PENDING", "EVICTED", "WHY PODS WAIT"], &job_rows);
    out.push('\n');
    let list = |m: &BTreeMap<String, String>| {
        if m.is_empty() {
            "-".to_string()
        } else {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
        }
    };
    let queue_rows: Vec<Vec<String>> = report
        .queues
        .iter()
        .map(|(k, q)| {
            let state = match &q.state_resource {
                Some(r) => format!("{} ({r})", q.state),
                None => q.state.to_string(),
            };
            vec![k.clone(), state, list(&q.allocated), list(&q.deserved), list(&q.fair_share)]
        })
        .collect();
    table(&mut out, &["QUEUE", "STATE", "ALLOCATED", "DESERVED", "FAIR SHARE"], &queue_rows);
    if !report.evictions.is_empty() {
        out.push_str("\nevictions:\n");
        for (pod, why) in report.evictions.iter().zip(&report.eviction_reasons) {
            let _ = writeln!(out, "  {pod} ({why})");
        }
    }
    if !report.resizes.is_empty() {
        out.push_str("\nresizes:\n");
        for r in &report.resizes {
            let _ = writeln!(out, "  cycle {}: {} {} -> {} pods ({})", r.cycle, r.job, r.from, r.to, r.reason);
        }
    }
    out
}

fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |out: &mut String, cells: Vec<&str>| {
        let last = cells.len() - 1;
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                let _ = writeln!(out, "{cell}");
            } else {
                let _ = write!(out, "{cell:<width$}  ", width = widths[i]);
            }
        }
    };
    line(out, header.to_vec());
    for row in rows {
        line(out, row.iter().map(String::as_str).collect());
    }
}
