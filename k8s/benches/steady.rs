//! The scheduler's work in a cycle with nothing new, without the API server: the store
//! contents of the real-API scale bench (5,000 nodes of 8 GPUs; 5,000 gangs of 10 one-GPU pods
//! over 50 queues, 4,000 of them bound and charged, 1,000 waiting for room) turned into a
//! snapshot (cold, then again with nothing new, then after heartbeats of 500 nodes), the core
//! run on it, and the PodGroup statuses worked out, each timed.
//!
//! `cargo bench -p drover-k8s --bench steady` (`DROVER_BENCH_RUNS=N`, default 5).

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_k8s::charge::{Charge, CHARGE_ANNOTATION};
use drover_k8s::convert::{ObjectLists, Reuse, POD_GROUP_ANNOTATION};
use drover_k8s::scheduler::wanted_group_statuses;
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use serde_json::json;

const NODES: u32 = 5000;
const GANGS: u32 = 5000;
const PER_GANG: u32 = 10;
const QUEUES: u32 = 50;

fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("a valid object"))
}

/// The store contents: gangs placed on whole nodes in order until the GPUs run out.
fn store() -> ObjectLists {
    let nodes = (0..NODES)
        .map(|n| {
            object(json!({"metadata": {"name": format!("node-{n}"), "uid": format!("n{n}"), "resourceVersion": "1"},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}))
        })
        .collect();
    let queues = (0..QUEUES)
        .map(|q| {
            object(json!({"metadata": {"name": format!("team-{q}"), "uid": format!("q{q}"), "resourceVersion": "1"},
                "spec": {"deserved": {"nvidia.com/gpu": (NODES * 8 / QUEUES).to_string()}, "overQuotaWeight": 1, "reclaimable": true}}))
        })
        .collect::<Vec<Arc<Queue>>>();
    let mut pods = Vec::new();
    let mut groups = Vec::new();
    let mut gpu = 0;
    for g in 0..GANGS {
        let queue = format!("team-{}", g % QUEUES);
        let group = format!("gang-{g}");
        groups.push(object::<PodGroup>(json!({
            "metadata": {"name": group, "namespace": "default", "uid": format!("g{g}"), "resourceVersion": "1",
                         "creationTimestamp": "2026-09-21T00:00:00Z"},
            "spec": {"minMember": PER_GANG, "queue": queue}})));
        for i in 0..PER_GANG {
            let bound = gpu < NODES * 8;
            let charge = Charge { queue: queue.clone(), group: group.clone(), priority_class: String::new() };
            let mut annotations = json!({POD_GROUP_ANNOTATION: group});
            if bound {
                annotations[CHARGE_ANNOTATION] = json!(charge.message());
            }
            pods.push(object::<Pod>(json!({
                "metadata": {"name": format!("gang-{g}-{i}"), "namespace": "default", "uid": format!("p{g}-{i}"),
                             "resourceVersion": "1", "creationTimestamp": "2026-09-21T00:00:00Z",
                             "annotations": annotations},
                "spec": {"schedulerName": "drover", "nodeName": bound.then(|| format!("node-{}", gpu / 8)),
                         "containers": [{"name": "main", "image": "app",
                            "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"phase": if bound { "Running" } else { "Pending" }}})));
            gpu += u32::from(bound);
        }
    }
    ObjectLists {
        nodes,
        pods,
        pod_groups: groups,
        queues,
        namespaces: vec![object::<Namespace>(json!({"metadata": {"name": "default"}}))],
        ..ObjectLists::default()
    }
}

/// The store after a heartbeat of every tenth node: new Node objects the conversion reads alike.
fn heartbeats(store: &ObjectLists) -> ObjectLists {
    let mut next = store.clone();
    for node in next.nodes.iter_mut().step_by(10) {
        let mut beat = (**node).clone();
        let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
        for c in beat.status.as_mut().and_then(|s| s.conditions.as_mut()).into_iter().flatten() {
            c.last_heartbeat_time = Some(at.clone());
        }
        *node = Arc::new(beat);
    }
    next
}

fn main() {
    let runs: usize = std::env::var("DROVER_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    let store = store();
    let beaten = heartbeats(&store);
    let config = SchedulerConfig::default();
    let now = 1_790_000_100;
    let mut times: [Vec<Duration>; 5] = Default::default();
    for _ in 0..runs {
        let mut reuse = Reuse::default();
        let t = Instant::now();
        let (converted, snap) = reuse.convert(&store, "drover", now);
        times[0].push(t.elapsed());
        let t = Instant::now();
        let (again, _) = reuse.convert(&store, "drover", now + 1);
        times[1].push(t.elapsed());
        let t = Instant::now();
        let (beat, _) = reuse.convert(&beaten, "drover", now + 2);
        times[2].push(t.elapsed());
        assert!(
            Arc::ptr_eq(&converted, &again) && Arc::ptr_eq(&converted, &beat),
            "nothing the conversion reads changed"
        );
        let snap = snap.expect("a snapshot");
        let t = Instant::now();
        let outcome = run_cycle(&snap, &config);
        times[3].push(t.elapsed());
        assert!(outcome.decisions.binds.is_empty(), "nothing fits: the cluster is full");
        let t = Instant::now();
        let wanted = wanted_group_statuses(&store.pod_groups, &snap, &converted, &outcome, Duration::from_secs(1));
        times[4].push(t.elapsed());
        assert_eq!(wanted.len(), GANGS as usize);
    }
    println!(
        "{NODES} nodes, {} pods ({} bound), {GANGS} gangs, {QUEUES} queues; best of {runs}:",
        GANGS * PER_GANG,
        NODES * 8
    );
    let names = [
        "convert and snapshot, cold",
        "convert and snapshot, nothing new",
        "the same after node heartbeats",
        "core cycle",
        "group statuses",
    ];
    for (name, t) in names.iter().zip(&times) {
        let best = t.iter().min().copied().unwrap_or_default();
        println!("  {name:<34} {:>8.1} ms", best.as_secs_f64() * 1000.0);
    }
}
