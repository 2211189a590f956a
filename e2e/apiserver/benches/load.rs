//! Emulator benchmark: how long 1,000 nodes and 10,000 pods take to load (created through the
//! API by a local kube-rs client, and restored from a state file), and how soon a watch event
//! arrives after the write that caused it.
//!
//! Run with `cargo bench -p drover-apiserver --bench load`. Timings are printed, never
//! asserted; the bench asserts only that every object arrived.

use std::time::{Duration, Instant};

use drover_apiserver::{start, ServerConfig};
use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const NODES: usize = 1_000;
const PODS: usize = 10_000;
const IN_FLIGHT: usize = 64;
const WATCH_SAMPLES: usize = 500;

fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i:04}"), "labels": {"drover.dev/node-pool": "a100"}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}}
    }))
    .expect("node")
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{i:05}"), "namespace": "default", "labels": {"job": format!("job-{}", i / 10)}},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}
    }))
    .expect("pod")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let state = std::env::temp_dir().join(format!("drover-apiserver-bench-{}.json", std::process::id()));
    let server =
        start(ServerConfig { state_file: Some(state.clone()), ..ServerConfig::default() }).await.expect("start");
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let t = Instant::now();
    stream::iter(0..NODES)
        .map(|i| {
            let nodes = nodes.clone();
            async move { nodes.create(&PostParams::default(), &node(i)).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .expect("nodes created");
    stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod(i)).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .expect("pods created");
    let created = t.elapsed();
    let t = Instant::now();
    let listed = pods.list(&ListParams::default()).await.expect("list").items.len();
    let list_time = t.elapsed();
    assert_eq!(listed, PODS);
    println!("create {NODES} nodes + {PODS} pods through the API ({IN_FLIGHT} in flight): {:.0} ms", ms(created));
    println!("list {PODS} pods: {:.0} ms", ms(list_time));

    server.stop().await.expect("stop saves the state");
    let t = Instant::now();
    let server =
        start(ServerConfig { state_file: Some(state.clone()), ..ServerConfig::default() }).await.expect("restart");
    let restored = t.elapsed();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    assert_eq!(pods.list(&ListParams::default()).await.expect("list").items.len(), PODS);
    println!("restore {NODES} nodes + {PODS} pods from the state file: {:.0} ms", ms(restored));

    let mut watch = pods.watch(&WatchParams::default(), "0").await.expect("watch").boxed();
    let mut latencies = Vec::with_capacity(WATCH_SAMPLES);
    for i in 0..WATCH_SAMPLES {
        let name = format!("pod-{:05}", i);
        let patch = Patch::Merge(json!({"metadata": {"labels": {"round": i.to_string()}}}));
        let t = Instant::now();
        let written = pods.patch(&name, &PatchParams::default(), &patch).await.expect("patch");
        let rv = written.metadata.resource_version.clone();
        loop {
            match watch.try_next().await.expect("watch event").expect("watch open") {
                WatchEvent::Modified(p) if p.metadata.resource_version == rv => break,
                _ => continue,
            }
        }
        latencies.push(t.elapsed());
    }
    latencies.sort();
    let pct = |p: usize| ms(latencies[(latencies.len() * p / 100).min(latencies.len() - 1)]);
    println!(
        "write -> watch event ({WATCH_SAMPLES} samples, includes the write's round trip): median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(50),
        pct(99),
        ms(*latencies.last().expect("samples"))
    );
    server.stop().await.expect("stop");
    let _ = std::fs::remove_file(state);
}
