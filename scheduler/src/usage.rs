//! Time-based fair share's memory: per queue, how much of each resource it used lately, as
//! decayed resource-seconds. The ledger moves only at tick boundaries (multiples of the tick
//! on the snapshot's clock), so every cycle within a tick, and a new leader reading the ledger
//! back from Queue status, computes the same fair shares. The fair-share plugin reads it from
//! the snapshot ([`Snapshot::past_usage`]); the callers that keep it between cycles (the
//! scheduler binary in Queue status, the simulator in memory) advance it before each cycle.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::TimeBasedArgs;
use crate::ids::{ti_vec, TiVec};
use crate::res::Res;
use crate::snapshot::{PodPhase, QueueId, Snapshot};

/// One queue's entry: its decayed usage as of the tick `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueUsage {
    /// The tick the entry is as of, in seconds on the snapshot's clock.
    pub at: i64,
    /// Per resource name, decayed resource-seconds (in the units the scheduler counts:
    /// GPUs, CPU millicores, memory bytes).
    pub resources: BTreeMap<String, f64>,
}

/// Every queue's entry, by queue name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageLedger {
    /// Entries by queue name.
    pub queues: BTreeMap<String, QueueUsage>,
}

impl UsageLedger {
    /// Brings the entry of every queue of `snap` to the last tick at or before the snapshot's time:
    /// each tick it missed decays its usage and adds what its subtree holds now (bound pods)
    /// for the tick's length; a tumbling window that began since its last tick clears it
    /// first. A queue without an entry starts with none at the current tick; entries of
    /// queues that are gone are dropped. Returns the names of the queues whose entry changed.
    pub fn advance(&mut self, snap: &Snapshot, args: &TimeBasedArgs) -> Vec<String> {
        let tick = i64::from(args.tick_seconds.max(1));
        let now = snap.clock.tick_start(tick);
        let window = i64::from(args.window_seconds);
        let window_start = |t: i64| if window > 0 { t.div_euclid(window) * window } else { i64::MIN };
        let d = decay_per_tick(args);
        let held = holdings(snap);
        let names: BTreeSet<&str> = snap.queues.iter().skip(1).map(|q| q.name.as_str()).collect();
        self.queues.retain(|name, _| names.contains(name.as_str()));
        let mut changed = Vec::new();
        for (q, queue) in snap.queues.iter_enumerated().skip(1) {
            let entry = self
                .queues
                .entry(queue.name.clone())
                .or_insert_with(|| QueueUsage { at: now, resources: BTreeMap::new() });
            if entry.at == now {
                continue;
            }
            // An entry from the future (a clock that went back, a hand-edited status) restarts
            // its ticks now.
            let from = if entry.at > now {
                now
            } else if window_start(entry.at) != window_start(now) {
                entry.resources.clear();
                window_start(now)
            } else {
                entry.at
            };
            let ticks = (now - from) / tick;
            let kept = d.powf(ticks as f64);
            let added = tick as f64 * geometric(d, ticks as f64);
            for v in entry.resources.values_mut() {
                *v *= kept;
            }
            for (r, name) in snap.resources.iter().enumerate() {
                if r != snap.pods_resource && held[q][r] > 0 {
                    *entry.resources.entry(name.clone()).or_insert(0.0) += held[q][r] as f64 * added;
                }
            }
            entry.resources.retain(|_, v| *v > 0.0);
            entry.at = now;
            changed.push(queue.name.clone());
        }
        changed
    }

    /// The step every edge takes before a cycle: the ledger brought to `snap`'s time
    /// ([`UsageLedger::advance`]) and the snapshot given the past usage the core reads
    /// ([`UsageLedger::for_snapshot`]).
    pub fn step(&mut self, snap: &mut Snapshot, args: &TimeBasedArgs) {
        self.advance(snap, args);
        snap.past_usage = self.for_snapshot(snap);
    }

    /// The ledger as the core reads it: per queue of `snap`, per resource id, its decayed
    /// usage (0 where it has none).
    pub fn for_snapshot(&self, snap: &Snapshot) -> TiVec<QueueId, Vec<f64>> {
        snap.queues
            .iter()
            .map(|queue| {
                let entry = self.queues.get(&queue.name);
                snap.resources
                    .iter()
                    .map(|name| entry.and_then(|e| e.resources.get(name)).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect()
    }
}

/// What usage decays to over one tick: `0.5^(tick / half-life)`, 1 without a half-life.
fn decay_per_tick(args: &TimeBasedArgs) -> f64 {
    if args.half_life_seconds == 0 {
        1.0
    } else {
        0.5f64.powf(f64::from(args.tick_seconds) / f64::from(args.half_life_seconds))
    }
}

/// `1 + d + d^2 + ... + d^(n-1)`.
fn geometric(d: f64, n: f64) -> f64 {
    if d >= 1.0 {
        n
    } else {
        (1.0 - d.powf(n)) / (1.0 - d)
    }
}

/// Seconds of full use that the ledger can remember at most: the decayed length of a whole
/// window (or of all time, without one). A queue's usage divided by this times the cluster's
/// capacity is the part of the cluster it used lately (KAI normalizes to cluster capacity
/// over the period, so that using an idle cluster costs little).
pub fn memory_seconds(args: &TimeBasedArgs) -> f64 {
    let d = decay_per_tick(args);
    let tick = f64::from(args.tick_seconds.max(1));
    if args.window_seconds == 0 {
        tick / (1.0 - d)
    } else {
        tick * geometric(d, (f64::from(args.window_seconds) / tick).floor())
    }
}

/// Per queue, what its subtree's bound pods request.
fn holdings(snap: &Snapshot) -> TiVec<QueueId, Res> {
    let mut held = ti_vec![Res::zero(snap.resources.len()); snap.queues.len()];
    for pod in snap.pods.iter().filter(|p| matches!(p.phase, PodPhase::Bound(_))) {
        let job = &snap.jobs[pod.job];
        for q in snap.ancestry(job.queue) {
            held[q].add(&job.tasks[pod.task].requests);
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{
        build, Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueBounds, QueueInput, QueueingStrategy,
    };
    use drover_api::{ResourceList, GPU};

    /// Queues `a` and `b` on one 8-GPU node; `a` runs a one-GPU pod when `running`.
    fn two_queues(running: bool) -> Snapshot {
        let gpus = |n: i64| ResourceList(BTreeMap::from([(GPU.to_string(), n)]));
        let node = NodeInput {
            name: "n".into(),
            allocatable: gpus(8),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            unschedulable: false,
        };
        let queue = |name: &str| QueueInput {
            name: name.into(),
            parent: None,
            deserved: ResourceList::default(),
            limit: None,
            over_quota_weight: 1,
            reclaimable: true,
            strategy: QueueingStrategy::BestEffortFifo,
            bounds: QueueBounds::default(),
            owner: None,
        };
        let pod = if running { PodPhaseInput::Bound("n".into()) } else { PodPhaseInput::Pending };
        let job = JobInput {
            name: "j".into(),
            namespace: "ns".into(),
            queue: "a".into(),
            priority_class: "train".into(),
            priority: 0,
            preemptible: true,
            min_member: 1,
            min_resources: None,
            created_at: 0,
            phase: JobPhase::Running,
            tasks: vec![crate::snapshot::TaskInput {
                name: "w".into(),
                min_available: 0,
                requests: gpus(1),
                constraints: Constraints::default(),
                pods: vec![pod],
                topology: None,
                slices: None,
            }],
            run_time: None,
            ends_at: None,
            preempted_at: None,
            started_at: None,
            topology: None,
            resize: None,
        };
        build(&[node], &[queue("a"), queue("b")], &[job]).expect("a valid cluster")
    }

    fn args(half_life: u32, window: u32) -> TimeBasedArgs {
        TimeBasedArgs {
            enabled: true,
            half_life_seconds: half_life,
            window_seconds: window,
            tick_seconds: 60,
            k_value: 1.0,
        }
    }

    fn gpu_seconds(ledger: &UsageLedger, queue: &str) -> f64 {
        ledger.queues[queue].resources.get("nvidia.com/gpu").copied().unwrap_or(0.0)
    }

    #[test]
    fn usage_moves_only_at_tick_boundaries_and_halves_each_half_life() {
        let snap = two_queues(true);
        let args = args(600, 0);
        let mut ledger = UsageLedger::default();
        ledger.advance(&snap.clone().at(30), &args);
        assert_eq!(ledger.queues["a"].at, 0);
        assert_eq!(gpu_seconds(&ledger, "a"), 0.0);
        assert!(ledger.advance(&snap.clone().at(59), &args).is_empty(), "frozen within the tick");
        assert_eq!(ledger.advance(&snap.clone().at(61), &args), ["a", "b"]);
        assert!((gpu_seconds(&ledger, "a") - 60.0).abs() < 1e-9);
        assert_eq!(gpu_seconds(&ledger, "b"), 0.0);
        let before = ledger.clone();
        ledger.advance(&two_queues(false).at(60 + 600), &args);
        assert!((gpu_seconds(&ledger, "a") - gpu_seconds(&before, "a") / 2.0).abs() < 1e-9);
    }

    #[test]
    fn missed_ticks_count_what_is_held_now_as_if_advanced_tick_by_tick() {
        let snap = two_queues(true);
        let args = args(600, 0);
        let (mut stepped, mut jumped) = (UsageLedger::default(), UsageLedger::default());
        stepped.advance(&snap.clone().at(0), &args);
        jumped.advance(&snap.clone().at(0), &args);
        for t in 1..=30 {
            stepped.advance(&snap.clone().at(t * 60), &args);
        }
        jumped.advance(&snap.clone().at(30 * 60 + 5), &args);
        let (s, j) = (gpu_seconds(&stepped, "a"), gpu_seconds(&jumped, "a"));
        assert!((s - j).abs() < 1e-6 * s, "{s} vs {j}");
        // Thirty one-minute ticks over three half-lives: 60 * (1 - 1/8) / (1 - 2^-0.1).
        assert!((s - 783.9).abs() < 0.1, "{s}");
    }

    #[test]
    fn a_new_window_forgets_the_last() {
        let snap = two_queues(true);
        let args = args(0, 3600);
        let mut ledger = UsageLedger::default();
        ledger.advance(&snap.clone().at(0), &args);
        ledger.advance(&snap.clone().at(3540), &args);
        assert!((gpu_seconds(&ledger, "a") - 3540.0).abs() < 1e-9, "no decay without a half-life");
        ledger.advance(&snap.clone().at(3600 + 120), &args);
        assert!((gpu_seconds(&ledger, "a") - 120.0).abs() < 1e-9, "only the new window's two ticks");
    }

    #[test]
    fn entries_from_the_future_restart_and_gone_queues_are_dropped() {
        let snap = two_queues(true);
        let args = args(600, 0);
        let mut ledger = UsageLedger::default();
        let future = QueueUsage { at: 1 << 40, resources: BTreeMap::from([("nvidia.com/gpu".into(), 5.0)]) };
        ledger.queues.insert("a".into(), future);
        ledger.queues.insert("gone".into(), QueueUsage { at: 0, resources: BTreeMap::new() });
        ledger.advance(&snap.clone().at(120), &args);
        assert_eq!(ledger.queues["a"].at, 120);
        assert!(!ledger.queues.contains_key("gone"));
        ledger.advance(&snap.clone().at(180), &args);
        assert!(gpu_seconds(&ledger, "a") > 5.0, "it counts again from there");
    }

    #[test]
    fn memory_is_the_decayed_length_of_the_window() {
        assert!((memory_seconds(&args(0, 3600)) - 3600.0).abs() < 1e-9);
        let forever = memory_seconds(&args(3600, 0));
        assert!((forever - 3600.0 / std::f64::consts::LN_2).abs() < 60.0, "{forever}");
    }
}
