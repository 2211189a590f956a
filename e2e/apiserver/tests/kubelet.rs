//! The fake kubelet against the in-process API emulator: node registration, the pod
//! lifecycle (start, completion, failure, deletion), what it must leave alone, and its
//! resilience to dropped watches, injected errors and restarts.
//!
//! Every wait is a bounded poll; a test takes a few seconds at most.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use drover_apiserver::kubelet::{self, KubeletConfig, DURATION_ANNOTATION, OUTCOME_ANNOTATION};
use drover_apiserver::{ServerConfig, ServerHandle};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Binding, Container, Node, ObjectReference, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(5);

/// A fake kubelet running in the background, stopped through its shutdown future.
struct Kubelet {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Kubelet {
    fn start(client: Client, nodes: u32) -> Self {
        Self::start_with(client, config(nodes))
    }

    fn start_with(client: Client, config: KubeletConfig) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(kubelet::run(client, config, async {
            let _ = stopped.await;
        }));
        Kubelet { stop, task }
    }

    /// Stops it and checks that `run` returned `Ok` promptly.
    async fn stop(self) {
        let _ = self.stop.send(());
        let result = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the kubelet did not stop within 5 s")
            .expect("the kubelet task panicked");
        result.expect("the kubelet returned an error");
    }
}

fn config(nodes: u32) -> KubeletConfig {
    KubeletConfig {
        nodes,
        name_prefix: "node-".to_owned(),
        allocatable: BTreeMap::from([
            ("cpu".to_owned(), "32".to_owned()),
            ("memory".to_owned(), "256Gi".to_owned()),
            ("nvidia.com/gpu".to_owned(), "8".to_owned()),
        ]),
        labels: BTreeMap::from([("pool".to_owned(), "gpu-a".to_owned())]),
    }
}

async fn server() -> ServerHandle {
    drover_apiserver::start(ServerConfig::default()).await.expect("the API emulator starts")
}

/// A server and a kubelet with `nodes` nodes, all of them registered and Ready.
async fn cluster(nodes: u32) -> (ServerHandle, Kubelet) {
    let server = server().await;
    let kubelet = Kubelet::start(server.client(), nodes);
    wait_nodes_ready(&server.client(), nodes).await;
    (server, kubelet)
}

/// Polls `probe` every 20 ms until it gives a value; panics after `timeout`.
async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_nodes_ready(client: &Client, count: u32) -> Vec<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(WAIT, "the nodes to be Ready", || async {
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let ready = list
            .items
            .iter()
            .filter(|node| {
                let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref());
                condition_true(conditions.unwrap_or_default(), "Ready").is_some()
            })
            .count();
        (ready == count as usize).then_some(list.items)
    })
    .await
}

fn condition_true<C: AsCondition>(conditions: &[C], type_: &str) -> Option<()> {
    conditions.iter().any(|c| c.type_() == type_ && c.status() == "True").then_some(())
}

trait AsCondition {
    fn type_(&self) -> &str;
    fn status(&self) -> &str;
}

impl AsCondition for k8s_openapi::api::core::v1::NodeCondition {
    fn type_(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
}

impl AsCondition for k8s_openapi::api::core::v1::PodCondition {
    fn type_(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
}

fn pods(client: &Client) -> Api<Pod> {
    Api::namespaced(client.clone(), "default")
}

/// Creates a pod with two containers and the given annotations, unbound.
async fn create_pod(client: &Client, name: &str, annotations: &[(&str, &str)]) -> Pod {
    let container = |name: &str| Container {
        name: name.to_owned(),
        image: Some("registry.example/worker:1".to_owned()),
        ..Default::default()
    };
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container("main"), container("sidecar")],
            restart_policy: Some("Never".to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    };
    pods(client).create(&PostParams::default(), &pod).await.expect("pod created")
}

/// Binds the pod to `node` through the `binding` subresource, as a scheduler does.
async fn bind(client: &Client, name: &str, node: &str) {
    let binding = Binding {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        target: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(node.to_owned()),
            ..Default::default()
        },
    };
    pods(client)
        .create_subresource::<_, serde_json::Value>("binding", name, &PostParams::default(), &binding)
        .await
        .expect("pod bound");
}

async fn run_pod(client: &Client, name: &str, node: &str, annotations: &[(&str, &str)]) {
    create_pod(client, name, annotations).await;
    bind(client, name, node).await;
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Waits until the pod is in `wanted` phase; returns it and when it was first seen so.
async fn wait_phase(client: &Client, name: &str, wanted: &str, timeout: Duration) -> (Pod, Instant) {
    let api = pods(client);
    let pod = eventually(timeout, &format!("pod {name} to be {wanted}"), || async {
        let pod = api.get_opt(name).await.ok()??;
        (phase(&pod) == wanted).then_some(pod)
    })
    .await;
    (pod, Instant::now())
}

async fn wait_gone(client: &Client, name: &str) {
    let api = pods(client);
    eventually(WAIT, &format!("pod {name} to disappear"), || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

fn terminated(pod: &Pod) -> Vec<(String, i32, String)> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| {
            let t = c.state.as_ref().and_then(|s| s.terminated.as_ref()).expect("container terminated");
            (c.name.clone(), t.exit_code, t.reason.clone().unwrap_or_default())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_registered_with_capacity_labels_and_ready() {
    let (server, kubelet) = cluster(3).await;
    let client = server.client();
    let nodes = wait_nodes_ready(&client, 3).await;
    let mut names: Vec<String> = nodes.iter().map(|n| n.metadata.name.clone().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["node-0", "node-1", "node-2"]);
    for node in &nodes {
        let name = node.metadata.name.as_deref().unwrap();
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], name);
        assert_eq!(labels["pool"], "gpu-a");
        let status = node.status.as_ref().unwrap();
        for resources in [status.capacity.as_ref().unwrap(), status.allocatable.as_ref().unwrap()] {
            let resources: BTreeMap<&str, &str> = resources.iter().map(|(k, v)| (k.as_str(), v.0.as_str())).collect();
            assert_eq!(
                resources,
                BTreeMap::from([("cpu", "32"), ("memory", "256Gi"), ("nvidia.com/gpu", "8"), ("pods", "110")]),
                "{name}"
            );
        }
        let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert!(ready.last_heartbeat_time.is_some());
        assert_eq!(status.node_info.as_ref().unwrap().kubelet_version, "fake");
        let addresses = status.addresses.as_ref().unwrap();
        assert!(addresses.iter().any(|a| a.type_ == "InternalIP" && a.address.starts_with("172.16.")));
        assert!(addresses.iter().any(|a| a.type_ == "Hostname" && a.address == name));
        assert!(node.spec.as_ref().unwrap().pod_cidr.is_some());
    }
    // The heartbeat: one Lease per node in kube-node-lease, held by the node.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for name in &names {
        let lease =
            eventually(WAIT, &format!("the lease of {name}"), || async { leases.get_opt(name).await.ok()? }).await;
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(name.as_str()));
        assert!(spec.renew_time.is_some());
        assert_eq!(spec.lease_duration_seconds, Some(40));
    }
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_runs_with_a_kubelet_status() {
    let (server, kubelet) = cluster(2).await;
    let client = server.client();
    run_pod(&client, "web", "node-1", &[]).await;
    let (pod, _) = wait_phase(&client, "web", "Running", WAIT).await;
    let status = pod.status.as_ref().unwrap();
    let conditions = status.conditions.as_deref().unwrap();
    for type_ in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(condition_true(conditions, type_).is_some(), "{type_} is not True: {conditions:?}");
    }
    assert!(status.start_time.is_some());
    assert_eq!(status.host_ip.as_deref(), Some("172.16.0.2"));
    let pod_ip = status.pod_ip.as_deref().unwrap();
    assert!(pod_ip.starts_with("10.1.1."), "{pod_ip}");
    let containers = status.container_statuses.as_deref().unwrap();
    assert_eq!(containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["main", "sidecar"]);
    for c in containers {
        assert!(c.ready);
        assert_eq!(c.started, Some(true));
        assert!(c.state.as_ref().unwrap().running.as_ref().unwrap().started_at.is_some());
    }
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_ips_are_unique() {
    let (server, kubelet) = cluster(2).await;
    let client = server.client();
    let names: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        run_pod(&client, name, &format!("node-{}", i % 2), &[]).await;
    }
    let mut ips = HashSet::new();
    for name in &names {
        let (pod, _) = wait_phase(&client, name, "Running", WAIT).await;
        ips.insert(pod.status.unwrap().pod_ip.unwrap());
    }
    assert_eq!(ips.len(), names.len(), "{ips:?}");
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_duration_succeeds_after_it() {
    let (server, kubelet) = cluster(1).await;
    let client = server.client();
    let bound = Instant::now();
    run_pod(&client, "job", "node-0", &[(DURATION_ANNOTATION, "0.5")]).await;
    let (_, running) = wait_phase(&client, "job", "Running", WAIT).await;
    let (pod, done) = wait_phase(&client, "job", "Succeeded", WAIT).await;
    assert!(done - bound >= Duration::from_millis(500), "succeeded after {:?}", done - bound);
    assert!(done - running < Duration::from_millis(1500), "ran {:?}", done - running);
    assert_eq!(
        terminated(&pod),
        [("main".to_owned(), 0, "Completed".to_owned()), ("sidecar".to_owned(), 0, "Completed".to_owned())]
    );
    let ready = pod.status.as_ref().unwrap().conditions.iter().flatten().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False");
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_failed_makes_the_pod_fail() {
    let (server, kubelet) = cluster(1).await;
    let client = server.client();
    run_pod(&client, "flaky", "node-0", &[(DURATION_ANNOTATION, "0.2"), (OUTCOME_ANNOTATION, "Failed")]).await;
    let (pod, _) = wait_phase(&client, "flaky", "Failed", WAIT).await;
    assert_eq!(
        terminated(&pod),
        [("main".to_owned(), 1, "Error".to_owned()), ("sidecar".to_owned(), 1, "Error".to_owned())]
    );
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_pod_removes_it() {
    let (server, kubelet) = cluster(1).await;
    let client = server.client();
    run_pod(&client, "gone", "node-0", &[(DURATION_ANNOTATION, "30")]).await;
    wait_phase(&client, "gone", "Running", WAIT).await;
    pods(&client).delete("gone", &DeleteParams::default()).await.unwrap();
    wait_gone(&client, "gone").await;

    // With a finalizer the pod is stopped (terminal status) and kept until the finalizer goes.
    run_pod(&client, "kept", "node-0", &[(DURATION_ANNOTATION, "30")]).await;
    wait_phase(&client, "kept", "Running", WAIT).await;
    let finalizer = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    pods(&client).patch("kept", &PatchParams::default(), &Patch::Merge(&finalizer)).await.unwrap();
    pods(&client).delete("kept", &DeleteParams::default()).await.unwrap();
    let (pod, _) = wait_phase(&client, "kept", "Failed", WAIT).await;
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert!(terminated(&pod).iter().all(|(_, code, _)| *code == 143), "{:?}", terminated(&pod));
    let clear = json!({"metadata": {"finalizers": null}});
    pods(&client).patch("kept", &PatchParams::default(), &Patch::Merge(&clear)).await.unwrap();
    wait_gone(&client, "kept").await;
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_changed_by_someone_else_cancels_the_timer() {
    let (server, kubelet) = cluster(1).await;
    let client = server.client();
    run_pod(&client, "evicted", "node-0", &[(DURATION_ANNOTATION, "0.3")]).await;
    wait_phase(&client, "evicted", "Running", WAIT).await;
    let failed = json!({"status": {"phase": "Failed", "reason": "Evicted"}});
    pods(&client).patch_status("evicted", &PatchParams::default(), &Patch::Merge(&failed)).await.unwrap();
    // A later pod with a longer duration completing proves the first timer's time has passed.
    run_pod(&client, "witness", "node-0", &[(DURATION_ANNOTATION, "0.6")]).await;
    wait_phase(&client, "witness", "Succeeded", WAIT).await;
    let pod = pods(&client).get("evicted").await.unwrap();
    assert_eq!(phase(&pod), "Failed");
    assert_eq!(pod.status.unwrap().reason.as_deref(), Some("Evicted"));
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_pods_and_pods_of_other_nodes_are_left_alone() {
    let (server, kubelet) = cluster(2).await;
    let client = server.client();
    create_pod(&client, "unbound", &[(DURATION_ANNOTATION, "0.1")]).await;
    run_pod(&client, "elsewhere", "other-node-0", &[(DURATION_ANNOTATION, "0.1")]).await;
    run_pod(&client, "beyond", "node-2", &[]).await;
    let before: Vec<Pod> = futures::future::join_all(["unbound", "elsewhere", "beyond"].map(|name| {
        let api = pods(&client);
        async move { api.get(name).await.unwrap() }
    }))
    .await;
    // The kubelet handles pod events in order: once a later pod has run to completion,
    // the earlier ones were seen (and must have been skipped).
    run_pod(&client, "control", "node-0", &[(DURATION_ANNOTATION, "0.1")]).await;
    wait_phase(&client, "control", "Succeeded", WAIT).await;
    for old in before {
        let name = old.metadata.name.as_deref().unwrap();
        let now = pods(&client).get(name).await.unwrap();
        assert_eq!(phase(&now), "Pending", "{name}");
        assert_eq!(now.metadata.resource_version, old.metadata.resource_version, "{name} was written");
    }
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_and_injected_errors_lose_no_transition() {
    let (server, kubelet) = cluster(1).await;
    let client = server.client();
    let faults = server.faults();
    // The start write fails twice with 500, then once with 409 (a stale read).
    faults.fail_next_writes("pods/status", 2, 500);
    run_pod(&client, "tough", "node-0", &[(DURATION_ANNOTATION, "0.5")]).await;
    wait_phase(&client, "tough", "Running", WAIT).await;
    faults.fail_next_writes("pods/status", 1, 409);
    faults.drop_watches();
    faults.fail_next_writes("pods/status", 1, 429);
    faults.fail_next_writes("pods/status", 2, 503);
    let (pod, _) = wait_phase(&client, "tough", "Succeeded", WAIT).await;
    assert_eq!(terminated(&pod).len(), 2);

    // A pod bound while the watch is down is picked up when it resumes.
    faults.drop_watches();
    run_pod(&client, "late", "node-0", &[(DURATION_ANNOTATION, "0.2")]).await;
    faults.drop_watches();
    wait_phase(&client, "late", "Succeeded", WAIT).await;

    // Conflicts on the start write: the kubelet re-reads and retries.
    faults.fail_next_writes("pods/status", 3, 409);
    run_pod(&client, "contended", "node-0", &[]).await;
    wait_phase(&client, "contended", "Running", WAIT).await;
    kubelet.stop().await;
}

/// Checks that a pod seen Running at `running` with run time `run` ended (`done`) on time:
/// not early, and not late unless the server was down when it was due (it came `back`
/// then), in which case the kubelet's retry backoff (at most 2.5 s) may delay it.
fn assert_on_time(running: Instant, run: Duration, back: Instant, done: Instant) {
    let due = running + run;
    assert!(done + Duration::from_millis(100) >= due, "ended {:?} early", due - done);
    let limit = if back > due { back + Duration::from_millis(2600) } else { due + Duration::from_millis(600) };
    assert!(done < limit, "ended {:?} after it was due", done - due);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emulator_restart_keeps_completions_on_time() {
    let (mut server, kubelet) = cluster(1).await;
    let client = server.client();
    run_pod(&client, "long", "node-0", &[(DURATION_ANNOTATION, "1")]).await;
    let (_, running) = wait_phase(&client, "long", "Running", WAIT).await;
    server.restart().await.unwrap();
    let back = Instant::now();
    let (_, done) = wait_phase(&client, "long", "Succeeded", WAIT).await;
    assert_on_time(running, Duration::from_secs(1), back, done);
    // A pod bound after the restart still runs.
    run_pod(&client, "after", "node-0", &[(DURATION_ANNOTATION, "0.2")]).await;
    wait_phase(&client, "after", "Succeeded", WAIT).await;
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_restart_adopts_nodes_and_rederives_timers() {
    let (server, kubelet) = cluster(2).await;
    let client = server.client();
    let uids: BTreeMap<String, String> = wait_nodes_ready(&client, 2)
        .await
        .into_iter()
        .map(|n| (n.metadata.name.unwrap(), n.metadata.uid.unwrap()))
        .collect();
    run_pod(&client, "long", "node-0", &[(DURATION_ANNOTATION, "1")]).await;
    let (_, running) = wait_phase(&client, "long", "Running", WAIT).await;
    kubelet.stop().await;
    // Down long enough that timing from the restart would be visibly late.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kubelet = Kubelet::start(client.clone(), 2);
    let (_, done) = wait_phase(&client, "long", "Succeeded", WAIT).await;
    let ran = done - running;
    assert!(ran < Duration::from_millis(1450), "ran {ran:?}: the timer was restarted");
    // A pod overdue while no kubelet ran is finished as soon as a kubelet sees it.
    run_pod(&client, "overdue", "node-1", &[(DURATION_ANNOTATION, "0.2")]).await;
    wait_phase(&client, "overdue", "Running", WAIT).await;
    kubelet.stop().await;
    let kubelet = Kubelet::start(client.clone(), 2);
    wait_phase(&client, "overdue", "Succeeded", WAIT).await;
    // The same nodes, adopted rather than re-created.
    let adopted: BTreeMap<String, String> = wait_nodes_ready(&client, 2)
        .await
        .into_iter()
        .map(|n| (n.metadata.name.unwrap(), n.metadata.uid.unwrap()))
        .collect();
    assert_eq!(adopted, uids);
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfiguration_is_an_error() {
    let server = server().await;
    let mut config = config(1);
    config.name_prefix = "Bad_Prefix".to_owned();
    let result = tokio::time::timeout(WAIT, kubelet::run(server.client(), config, std::future::pending()))
        .await
        .expect("run returns at once");
    assert!(result.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pods_on_many_nodes() {
    let (server, kubelet) = cluster(50).await;
    let client = server.client();
    let count = 300;
    let names: Vec<String> = (0..count).map(|i| format!("w{i}")).collect();
    let started = Instant::now();
    futures::future::join_all(names.iter().enumerate().map(|(i, name)| {
        let client = client.clone();
        async move {
            run_pod(&client, name, &format!("node-{}", i % 50), &[(DURATION_ANNOTATION, "0.3")]).await;
        }
    }))
    .await;
    let api = pods(&client);
    eventually(Duration::from_secs(15), "every pod to succeed", || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list.items.iter().filter(|p| phase(p) == "Succeeded").count();
        (done == count).then_some(())
    })
    .await;
    eprintln!("{count} pods on 50 nodes ran to completion in {:?}", started.elapsed());
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_a_state_file_keeps_nodes_and_completions() {
    let state = std::env::temp_dir().join(format!("drover-kubelet-test-{}.state", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let with_state = || ServerConfig { state_file: Some(state.clone()), ..ServerConfig::default() };
    let server = drover_apiserver::start(with_state()).await.unwrap();
    let kubelet = Kubelet::start(server.client(), 2);
    wait_nodes_ready(&server.client(), 2).await;
    run_pod(&server.client(), "long", "node-0", &[(DURATION_ANNOTATION, "1")]).await;
    let (_, running) = wait_phase(&server.client(), "long", "Running", WAIT).await;
    // The whole emulator process goes: kubelet and server; the state file stays.
    kubelet.stop().await;
    server.stop().await.unwrap();
    let server = drover_apiserver::start(with_state()).await.unwrap();
    let client = server.client();
    let kubelet = Kubelet::start(client.clone(), 2);
    let back = Instant::now();
    let (_, done) = wait_phase(&client, "long", "Succeeded", WAIT).await;
    assert_on_time(running, Duration::from_secs(1), back, done);
    assert_eq!(wait_nodes_ready(&client, 2).await.len(), 2);
    kubelet.stop().await;
    server.stop().await.unwrap();
    let _ = std::fs::remove_file(&state);
}

/// The scale the kubelet is built for: 1,000 nodes and 10,000 pods. Slow (it creates and
/// binds 10,000 pods through the API), so run it on demand:
/// `cargo test --release -p drover-apiserver --test kubelet -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale run, a minute or so"]
async fn ten_thousand_pods_on_a_thousand_nodes() {
    let server = server().await;
    let client = server.client();
    let started = Instant::now();
    let kubelet = Kubelet::start(client.clone(), 1000);
    wait_nodes_ready(&client, 1000).await;
    eprintln!("1000 nodes registered in {:?}", started.elapsed());
    let count = 10_000;
    let started = Instant::now();
    futures::stream::iter(0..count)
        .for_each_concurrent(32, |i| {
            let client = client.clone();
            async move {
                run_pod(&client, &format!("w{i}"), &format!("node-{}", i % 1000), &[(DURATION_ANNOTATION, "2")]).await;
            }
        })
        .await;
    eprintln!("{count} pods created and bound in {:?}", started.elapsed());
    let api = pods(&client);
    eventually(Duration::from_secs(120), "every pod to succeed", || async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list.items.iter().filter(|p| phase(p) == "Succeeded").count();
        (done == count).then_some(())
    })
    .await;
    eprintln!("{count} pods ran to completion {:?} after the first was bound", started.elapsed());
    kubelet.stop().await;
}
