//! What a replay means for users: completion times and queueing delays (overall and by job
//! size), how busy the GPUs were while work waited, work lost to evictions, deadlocks and the
//! makespan, and each queue's share of the GPUs against its fair share while work waits.
//!
//! A job's completion time (JCT) is its finish minus its submission; its queueing delay is
//! its JCT minus the time it ran towards its finish: all the time it was not making progress,
//! waiting before its start (and between an elastic job's restarts) and redoing work an
//! eviction threw away. For a job that never resizes that is its JCT minus its duration.

use serde_json::{json, Map, Value};

use super::eta_accuracy::EtaAccuracy;
use super::replay::Replay;
use super::rows::TraceJob;

/// Job-size buckets, by total GPUs (`num_pods × gpus_per_pod`), as `(label, upper bound)`.
pub const SIZES: [(&str, u32); 6] = [("1", 1), ("2-4", 4), ("5-8", 8), ("9-16", 16), ("17-64", 64), ("65+", u32::MAX)];

/// Average and percentiles of a set of durations, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spread {
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Spread {
    /// The spread of `values` (nearest-rank percentiles); all zero when empty.
    pub fn of(values: &mut [i64]) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_unstable();
        let rank = |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1] as f64;
        let avg = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
        Spread { avg, p50: rank(0.50), p95: rank(0.95), p99: rank(0.99) }
    }
}

/// The figures of one policy's replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// GPU jobs in the trace.
    pub jobs: usize,
    /// GPU jobs that finished.
    pub finished: usize,
    /// Completion times of finished GPU jobs.
    pub jct: Spread,
    /// Queueing delays of finished GPU jobs.
    pub queue: Spread,
    /// Queueing delays by job size, for the sizes present.
    pub queue_by_size: Vec<(&'static str, usize, Spread)>,
    /// Average fraction of GPUs allocated while a GPU job that fits an empty cluster waited
    /// (1 when no such job ever waited).
    pub gpu_allocation: f64,
    /// Jobs that ended holding part of their gang without ever running.
    pub deadlocks: usize,
    /// Pods evicted, and GPU-hours of work they lost.
    pub evicted_pods: u64,
    /// GPU-hours of work thrown away by evictions.
    pub gpu_hours_lost: f64,
    /// Last finish minus first submission.
    pub makespan: i64,
    /// CPU-only jobs: count, finished, completion times and queueing delays.
    pub cpu_only: (usize, usize, Spread, Spread),
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Per queue, over the time some job waited, as fractions of the cluster's GPUs: average
    /// allocation, average fair share, and the average distance between them (fair-share
    /// error).
    pub queues: Vec<(String, f64, f64, f64)>,
    /// With an elastic policy: how often its GPU jobs were resized.
    pub elastic: Option<Resizes>,
    /// How well the start forecasts of GPU jobs that waited long foretold their start.
    pub eta: EtaAccuracy,
}

/// The elastic restarts of a replay's GPU jobs, to tell how often jobs ran below their size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resizes {
    /// Restarts with fewer pods.
    pub shrinks: u64,
    /// Restarts with more pods.
    pub grows: u64,
    /// Jobs that shrank at least once.
    pub jobs_shrunk: usize,
}

/// Sums up a replay of `trace` on a cluster of `total_gpus` GPUs.
pub fn summarize(trace: &[TraceJob], replay: &Replay, total_gpus: u32) -> Summary {
    let (mut jct, mut queue, mut cpu_jct, mut cpu_queue) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut by_size: Vec<Vec<i64>> = vec![Vec::new(); SIZES.len()];
    let (mut gpu_jobs, mut cpu_jobs, mut deadlocks, mut evicted, mut lost) = (0, 0, 0, 0u64, 0.0);
    let mut resizes = Resizes::default();
    for r in &replay.jobs {
        let job = &trace[r.job];
        let gpus = job.pods * job.gpus_per_pod;
        deadlocks += usize::from(r.deadlocked);
        evicted += u64::from(r.evicted_pods);
        lost += r.work_lost as f64 * f64::from(job.gpus_per_pod) / 3600.0;
        let done = r.finish.map(|f| f - job.submit).zip(r.queue_delay(job.submit));
        if gpus == 0 {
            cpu_jobs += 1;
            if let Some((c, q)) = done {
                cpu_jct.push(c);
                cpu_queue.push(q);
            }
            continue;
        }
        gpu_jobs += 1;
        resizes.shrinks += u64::from(r.shrinks);
        resizes.grows += u64::from(r.grows);
        resizes.jobs_shrunk += usize::from(r.shrinks > 0);
        if let Some((c, q)) = done {
            jct.push(c);
            queue.push(q);
            let bucket = SIZES.iter().position(|&(_, max)| gpus <= max).expect("the last bucket is unbounded");
            by_size[bucket].push(q);
        }
    }
    let first = trace.iter().map(|j| j.submit).min().unwrap_or(0);
    let last = replay.jobs.iter().filter_map(|r| r.finish).max().unwrap_or(first);
    let (busy, waited) = replay.busy_while_waiting;
    let gpu_allocation =
        if waited == 0 || total_gpus == 0 { 1.0 } else { busy as f64 / (waited as f64 * f64::from(total_gpus)) };
    let finished = jct.len();
    let cpu_finished = cpu_jct.len();
    Summary {
        jobs: gpu_jobs,
        finished,
        jct: Spread::of(&mut jct),
        queue: Spread::of(&mut queue),
        queue_by_size: SIZES
            .iter()
            .zip(&mut by_size)
            .filter(|(_, v)| !v.is_empty())
            .map(|(&(label, _), v)| (label, v.len(), Spread::of(v)))
            .collect(),
        gpu_allocation,
        deadlocks,
        evicted_pods: evicted,
        gpu_hours_lost: lost,
        makespan: last - first,
        cpu_only: (cpu_jobs, cpu_finished, Spread::of(&mut cpu_jct), Spread::of(&mut cpu_queue)),
        cycles: replay.cycles,
        queues: replay
            .queue_shares
            .iter()
            .map(|(name, q)| {
                let norm = replay.contended as f64 * f64::from(total_gpus.max(1));
                let of = |x: f64| if norm > 0.0 { x / norm } else { 0.0 };
                (name.clone(), of(q.allocated), of(q.fair), of(q.error))
            })
            .collect(),
        elastic: replay.elastic.then_some(resizes),
        eta: EtaAccuracy::of(trace, replay),
    }
}

/// Rounds for output, so that the same figures always print the same bytes.
fn r1(x: f64) -> Value {
    json!((x * 10.0).round() / 10.0)
}

impl Summary {
    /// The JSON object of `scenario-format.md` (its keys, plus Drover's).
    pub fn to_json(&self) -> Value {
        let mut sizes = Map::new();
        for (label, n, s) in &self.queue_by_size {
            sizes.insert(
                (*label).to_string(),
                json!({"jobs": n, "avgQueueSeconds": r1(s.avg), "p95QueueSeconds": r1(s.p95)}),
            );
        }
        let (cpu_jobs, cpu_finished, cpu_jct, cpu_queue) = &self.cpu_only;
        let r4 = |x: f64| json!((x * 10000.0).round() / 10000.0);
        let mut queues = Map::new();
        for (name, share, fair, error) in &self.queues {
            queues.insert(
                name.clone(),
                json!({"share": r4(*share), "fairShare": r4(*fair), "fairShareError": r4(*error)}),
            );
        }
        let mut figures = json!({
            "jobs": self.jobs,
            "finished": self.finished,
            "avgJctSeconds": r1(self.jct.avg),
            "p50JctSeconds": r1(self.jct.p50),
            "p95JctSeconds": r1(self.jct.p95),
            "p99JctSeconds": r1(self.jct.p99),
            "avgQueueSeconds": r1(self.queue.avg),
            "p50QueueSeconds": r1(self.queue.p50),
            "p95QueueSeconds": r1(self.queue.p95),
            "p99QueueSeconds": r1(self.queue.p99),
            "queueBySize": sizes,
            "gpuAllocation": json!((self.gpu_allocation * 10000.0).round() / 10000.0),
            "deadlocks": self.deadlocks,
            "evictedPods": self.evicted_pods,
            "gpuHoursLost": r1(self.gpu_hours_lost),
            "makespanSeconds": self.makespan,
            "cycles": self.cycles,
            "queues": queues,
            "cpuOnly": {"jobs": cpu_jobs, "finished": cpu_finished,
                "avgJctSeconds": r1(cpu_jct.avg), "avgQueueSeconds": r1(cpu_queue.avg)},
        });
        if let Some(eta) = self.eta.to_json() {
            figures["eta"] = eta;
        }
        if let Some(e) = self.elastic {
            figures["elastic"] = json!({"shrinks": e.shrinks, "grows": e.grows, "jobsShrunk": e.jobs_shrunk});
        }
        figures
    }
}
