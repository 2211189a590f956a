//! The fake kubelet against a real kube-apiserver (drover-envtest): node registration, Leases,
//! Ready and the not-ready taint, the pod lifecycle (start, completion, failure, deletion),
//! admission (`OutOf<resource>`), what it must leave alone, and its resilience to dropped
//! watches, injected errors and restarts of the API server and of itself; then the
//! `drover-kubelet` binary with least-privilege credentials beside kube-controller-manager.
//!
//! Each test starts its own control plane and says SKIPPED when the binaries are missing.
//! Every wait is a bounded poll with a deadline generous enough for a loaded 2-core machine.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_envtest::{Options, Server};
use drover_kubelet::{self as kubelet, KubeletConfig, DURATION_ANNOTATION, OUTCOME_ANNOTATION};
use futures::StreamExt as _;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Binding, Container, Event, Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, ObjectReference, Pod,
    PodCondition, PodSpec, ResourceRequirements, ServiceAccount, Taint,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The usual deadline for something the kubelet does at once.
const WAIT: Duration = Duration::from_secs(20);

/// A fake kubelet running in the background, stopped through its shutdown future.
struct Kubelet {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Kubelet {
    fn start(client: Client, config: KubeletConfig) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(kubelet::run(client, config, async {
            let _ = stopped.await;
        }));
        Kubelet { stop, task }
    }

    /// Stops it and checks that `run` returned `Ok` promptly.
    async fn stop(self) {
        let _ = self.stop.send(());
        let result = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the kubelet did not stop within 5 s")
            .expect("the kubelet task panicked");
        result.expect("the kubelet returned an error");
    }
}

fn config(nodes: u32, allocatable: &[(&str, &str)]) -> KubeletConfig {
    KubeletConfig {
        nodes,
        name_prefix: "node-".to_owned(),
        allocatable: allocatable.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        labels: BTreeMap::from([("pool".to_owned(), "gpu-a".to_owned())]),
    }
}

const GPU_NODE: &[(&str, &str)] = &[("cpu", "32"), ("memory", "256Gi"), ("nvidia.com/gpu", "8")];

/// A control plane and a kubelet with `nodes` GPU nodes, all registered and Ready.
async fn cluster(nodes: u32) -> Option<(Server, Kubelet)> {
    let server = Server::start().await?;
    let kubelet = Kubelet::start(server.client(), config(nodes, GPU_NODE));
    wait_nodes_ready(&server.client(), nodes).await;
    Some((server, kubelet))
}

/// Polls `probe` every 50 ms until it gives a value; panics after `timeout`.
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn node_condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default()
}

/// Waits until `count` nodes are Ready and none has the not-ready taint; returns them.
async fn wait_nodes_ready(client: &Client, count: u32) -> Vec<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(WAIT, "the nodes to be Ready and untainted", || async {
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let ready = list
            .items
            .iter()
            .filter(|node| node_condition(node, "Ready").is_some_and(|c| c.status == "True"))
            .filter(|node| taints(node).iter().all(|t| t.key != "node.kubernetes.io/not-ready"))
            .count();
        (ready == count as usize).then_some(list.items)
    })
    .await
}

fn pods(client: &Client) -> Api<Pod> {
    Api::namespaced(client.clone(), "default")
}

/// A container requesting `requests`; extended resources (`nvidia.com/gpu`) get the same
/// limit, which the API server requires of resources that cannot be overcommitted.
fn container(name: &str, requests: &[(&str, &str)]) -> Container {
    let list = |pairs: &mut dyn Iterator<Item = &(&str, &str)>| -> BTreeMap<String, Quantity> {
        pairs.map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect()
    };
    Container {
        name: name.to_owned(),
        image: Some("registry.example/worker:1".to_owned()),
        resources: Some(ResourceRequirements {
            requests: Some(list(&mut requests.iter())),
            limits: Some(list(&mut requests.iter().filter(|(k, _)| k.contains('/')))),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An unbound pod with the given annotations and two containers: `main` with `requests`,
/// `sidecar` with none.
fn pod(name: &str, annotations: &[(&str, &str)], requests: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container("main", requests), container("sidecar", &[])],
            restart_policy: Some("Never".to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn create(client: &Client, pod: &Pod) -> Pod {
    pods(client).create(&PostParams::default(), pod).await.expect("pod created")
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

/// Creates the pod (see [`pod`]) and binds it to `node`.
async fn run_pod(client: &Client, name: &str, node: &str, annotations: &[(&str, &str)], requests: &[(&str, &str)]) {
    create(client, &pod(name, annotations, requests)).await;
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

/// Each container's (name, exit code, reason); panics if one is not terminated.
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

fn both(code: i32, reason: &str) -> Vec<(String, i32, String)> {
    vec![("main".to_owned(), code, reason.to_owned()), ("sidecar".to_owned(), code, reason.to_owned())]
}

/// A node as an earlier run of the kubelet left it (Ready, its resources and labels), with an
/// extra taint of the operator's: the API server adds `not-ready` on creation as for any node.
fn earlier_node(name: &str, allocatable: &[(&str, &str)]) -> Node {
    let mut resources: BTreeMap<String, Quantity> =
        allocatable.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect();
    resources.insert("pods".to_owned(), Quantity("110".to_owned()));
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_owned(), name.to_owned()),
                ("kubernetes.io/os".to_owned(), "linux".to_owned()),
                ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
                ("pool".to_owned(), "gpu-a".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "example.com/dedicated".to_owned(),
                value: Some("training".to_owned()),
                effect: "NoSchedule".to_owned(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..Default::default()
            }]),
            node_info: Some(NodeSystemInfo { kubelet_version: "fake".to_owned(), ..Default::default() }),
            ..Default::default()
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_register_ready_with_renewed_leases_and_lose_only_the_not_ready_taint() {
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    // node-1 exists already; the API server tainted it not-ready on creation.
    let earlier = nodes.create(&PostParams::default(), &earlier_node("node-1", GPU_NODE)).await.unwrap();
    let keys: Vec<String> = taints(&earlier).into_iter().map(|t| t.key).collect();
    assert_eq!(keys, ["example.com/dedicated", "node.kubernetes.io/not-ready"], "the API server's admission");
    // Conflicts and errors on node writes (creates, status, taint patches) are retried.
    server.faults().fail_next_writes("nodes", 3, 409);
    server.faults().fail_next_writes("nodes/status", 1, 500);
    let kubelet = Kubelet::start(client.clone(), config(3, GPU_NODE));

    let ready = wait_nodes_ready(&client, 3).await;
    let mut names: Vec<String> = ready.iter().map(|n| n.metadata.name.clone().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["node-0", "node-1", "node-2"]);
    for node in &ready {
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
        let ready = node_condition(node, "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("True", Some("KubeletReady")));
        assert!(ready.last_heartbeat_time.is_some());
        for pressure in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
            assert_eq!(node_condition(node, pressure).unwrap().status, "False", "{name} {pressure}");
        }
        assert_eq!(status.node_info.as_ref().unwrap().kubelet_version, "fake");
        let addresses = status.addresses.as_ref().unwrap();
        assert!(addresses.iter().any(|a| a.type_ == "InternalIP" && a.address.starts_with("172.16.")));
        assert!(addresses.iter().any(|a| a.type_ == "Hostname" && a.address == name));
        assert!(node.spec.as_ref().unwrap().pod_cidr.is_some());
        // Only the not-ready taint was lifted: the operator's taint on node-1 stays.
        let keys: Vec<String> = taints(node).into_iter().map(|t| t.key).collect();
        let expected: &[&str] = if name == "node-1" { &["example.com/dedicated"] } else { &[] };
        assert_eq!(keys, expected, "{name}");
    }
    let adopted = ready.iter().find(|n| n.metadata.name.as_deref() == Some("node-1")).unwrap();
    assert_eq!(adopted.metadata.uid, earlier.metadata.uid, "node-1 was adopted, not re-created");

    // The heartbeat: one Lease per node in kube-node-lease, held and owned by the node, and
    // renewed every 10 s.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut first_renewals = BTreeMap::new();
    for node in &ready {
        let name = node.metadata.name.clone().unwrap();
        let lease =
            eventually(WAIT, &format!("the lease of {name}"), || async { leases.get_opt(&name).await.ok()? }).await;
        let owner = &lease.metadata.owner_references.as_ref().expect("the lease has an owner")[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", name.as_str()));
        assert_eq!(Some(&owner.uid), node.metadata.uid.as_ref());
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(name.as_str()));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        first_renewals.insert(name, spec.renew_time.expect("renewed").0);
    }
    for (name, first) in &first_renewals {
        eventually(Duration::from_secs(30), &format!("the lease of {name} to be renewed"), || async {
            let renewed = leases.get(name).await.ok()?.spec?.renew_time?.0;
            (renewed > *first).then_some(())
        })
        .await;
    }
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_for_their_duration_end_succeeded_or_failed_and_finish_graceful_deletion() {
    let Some((server, kubelet)) = cluster(2).await else { return };
    let client = server.client();

    // A bound pod runs at once with the status a kubelet writes.
    run_pod(&client, "web", "node-1", &[], &[]).await;
    let (web, _) = wait_phase(&client, "web", "Running", WAIT).await;
    for type_ in ["PodScheduled", "Initialized", "PodReadyToStartContainers", "ContainersReady", "Ready"] {
        assert_eq!(pod_condition(&web, type_).map(|c| c.status.as_str()), Some("True"), "{type_}");
    }
    let status = web.status.as_ref().unwrap();
    assert!(status.start_time.is_some());
    assert_eq!(status.host_ip.as_deref(), Some("172.16.0.2"));
    assert!(status.pod_ip.as_deref().unwrap().starts_with("10.1.1."), "{:?}", status.pod_ip);
    let containers = status.container_statuses.as_deref().unwrap();
    assert_eq!(containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["main", "sidecar"]);
    for c in containers {
        assert!(c.ready);
        assert_eq!(c.started, Some(true));
        assert!(c.state.as_ref().unwrap().running.as_ref().unwrap().started_at.is_some());
    }

    // Pod IPs are unique among live pods.
    let names: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        run_pod(&client, name, &format!("node-{}", i % 2), &[], &[]).await;
    }
    let mut ips = HashSet::from([status.pod_ip.clone().unwrap()]);
    for name in &names {
        let (pod, _) = wait_phase(&client, name, "Running", WAIT).await;
        ips.insert(pod.status.unwrap().pod_ip.unwrap());
    }
    assert_eq!(ips.len(), names.len() + 1, "{ips:?}");

    // A duration: Succeeded once it has run that long, containers Completed.
    let bound = Instant::now();
    run_pod(&client, "job", "node-0", &[(DURATION_ANNOTATION, "1")], &[]).await;
    let (_, running) = wait_phase(&client, "job", "Running", WAIT).await;
    let (job, done) = wait_phase(&client, "job", "Succeeded", WAIT).await;
    assert!(done - bound >= Duration::from_secs(1), "succeeded after {:?}", done - bound);
    assert!(done - running < Duration::from_secs(4), "ran {:?}", done - running);
    assert_eq!(terminated(&job), both(0, "Completed"));
    assert_eq!(pod_condition(&job, "Ready").unwrap().status, "False");

    // Outcome Failed: the pod fails, containers exit 1.
    run_pod(&client, "flaky", "node-0", &[(DURATION_ANNOTATION, "0.2"), (OUTCOME_ANNOTATION, "Failed")], &[]).await;
    let (flaky, _) = wait_phase(&client, "flaky", "Failed", WAIT).await;
    assert_eq!(terminated(&flaky), both(1, "Error"));

    // Graceful deletion (the API server only marks a running bound pod): the kubelet
    // finishes it.
    run_pod(&client, "gone", "node-0", &[(DURATION_ANNOTATION, "300")], &[]).await;
    wait_phase(&client, "gone", "Running", WAIT).await;
    pods(&client).delete("gone", &DeleteParams::default()).await.unwrap();
    wait_gone(&client, "gone").await;

    // With a finalizer the pod is stopped (terminal status) and kept until the finalizer goes.
    run_pod(&client, "kept", "node-0", &[(DURATION_ANNOTATION, "300")], &[]).await;
    wait_phase(&client, "kept", "Running", WAIT).await;
    let finalizer = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    pods(&client).patch("kept", &PatchParams::default(), &Patch::Merge(&finalizer)).await.unwrap();
    pods(&client).delete("kept", &DeleteParams::default()).await.unwrap();
    let (kept, _) = wait_phase(&client, "kept", "Failed", WAIT).await;
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert_eq!(terminated(&kept), both(143, "Error"));
    let kept = eventually(WAIT, "the kubelet's delete of the kept pod", || async {
        let pod = pods(&client).get("kept").await.ok()?;
        (pod.metadata.deletion_grace_period_seconds == Some(0)).then_some(pod)
    })
    .await;
    assert_eq!(kept.metadata.finalizers.as_deref(), Some(&["example.com/keep".to_owned()][..]));
    let clear = json!({"metadata": {"finalizers": null}});
    pods(&client).patch("kept", &PatchParams::default(), &Patch::Merge(&clear)).await.unwrap();
    wait_gone(&client, "kept").await;
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_it_does_not_own_or_that_someone_else_ended_are_left_alone() {
    let Some((server, kubelet)) = cluster(2).await else { return };
    let client = server.client();
    create(&client, &pod("unbound", &[(DURATION_ANNOTATION, "0.1")], &[])).await;
    run_pod(&client, "elsewhere", "other-node-0", &[(DURATION_ANNOTATION, "0.1")], &[]).await;
    run_pod(&client, "beyond", "node-2", &[], &[]).await;
    let before: Vec<Pod> = futures::future::join_all(["unbound", "elsewhere", "beyond"].map(|name| {
        let api = pods(&client);
        async move { api.get(name).await.unwrap() }
    }))
    .await;

    // A phase set by someone else (an eviction) cancels the kubelet's timer.
    run_pod(&client, "evicted", "node-0", &[(DURATION_ANNOTATION, "0.5")], &[]).await;
    wait_phase(&client, "evicted", "Running", WAIT).await;
    let failed = json!({"status": {"phase": "Failed", "reason": "Evicted"}});
    pods(&client).patch_status("evicted", &PatchParams::default(), &Patch::Merge(&failed)).await.unwrap();

    // The kubelet handles pod events in order: once a later pod with a longer duration has run
    // to completion, the earlier ones were seen (and must have been skipped), and the evicted
    // pod's time has passed.
    run_pod(&client, "control", "node-0", &[(DURATION_ANNOTATION, "1")], &[]).await;
    wait_phase(&client, "control", "Succeeded", WAIT).await;
    for old in before {
        let name = old.metadata.name.as_deref().unwrap();
        let now = pods(&client).get(name).await.unwrap();
        assert_eq!(phase(&now), "Pending", "{name}");
        assert_eq!(now.metadata.resource_version, old.metadata.resource_version, "{name} was written");
    }
    let evicted = pods(&client).get("evicted").await.unwrap();
    assert_eq!(phase(&evicted), "Failed");
    assert_eq!(evicted.status.unwrap().reason.as_deref(), Some("Evicted"));
    kubelet.stop().await;
}

/// The pod's phase and reason, as `Running` or `Failed/OutOfcpu`.
fn outcome(pod: &Pod) -> String {
    match pod.status.as_ref().and_then(|s| s.reason.as_deref()) {
        Some(reason) => format!("{}/{reason}", phase(pod)),
        None => phase(pod).to_owned(),
    }
}

/// Waits until the pod has left `Pending`; returns it.
async fn wait_decided(client: &Client, name: &str) -> Pod {
    let api = pods(client);
    eventually(WAIT, &format!("pod {name} to be started or rejected"), || async {
        let pod = api.get_opt(name).await.ok()??;
        (phase(&pod) != "Pending").then_some(pod)
    })
    .await
}

/// The Warning Events recorded about pod `name`, as (reason, message, source host).
async fn warnings(client: &Client, name: &str) -> Vec<(String, String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default().fields(&format!("involvedObject.name={name}"))).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            let host = e.source.and_then(|s| s.host).unwrap_or_default();
            (e.reason.unwrap_or_default(), e.message.unwrap_or_default(), host)
        })
        .collect()
}

/// Checks that on every node the running pods fit the node: `pods` and every resource.
async fn assert_no_node_over_committed(client: &Client, allocatable: &[(&str, i64)]) {
    let all = pods(client).list(&ListParams::default()).await.unwrap();
    let mut used: BTreeMap<(String, String), i64> = BTreeMap::new();
    for pod in all.items.iter().filter(|p| phase(p) == "Running") {
        let spec = pod.spec.as_ref().unwrap();
        let node = spec.node_name.clone().unwrap();
        *used.entry((node.clone(), "pods".to_owned())).or_default() += 1;
        for c in &spec.containers {
            for (name, q) in c.resources.as_ref().and_then(|r| r.requests.as_ref()).into_iter().flatten() {
                let amount = if name == "cpu" { milli(&q.0) } else { q.0.parse::<i64>().unwrap_or(0) };
                *used.entry((node.clone(), name.clone())).or_default() += amount;
            }
        }
    }
    for ((node, resource), amount) in used {
        if let Some((_, capacity)) = allocatable.iter().find(|(name, _)| *name == resource) {
            assert!(amount <= *capacity, "{node} over-committed: {amount} {resource} of {capacity} in use");
        }
    }
}

/// Millicores of a cpu quantity written as `2` or `500m`.
fn milli(cpu: &str) -> i64 {
    match cpu.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => cpu.parse::<i64>().unwrap() * 1000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_rejects_pods_that_do_not_fit_beside_the_admitted_ones() {
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    let small = [("cpu", "4"), ("memory", "8Gi"), ("nvidia.com/gpu", "4"), ("pods", "4")];
    let kubelet = Kubelet::start(client.clone(), config(2, &small));
    wait_nodes_ready(&client, 2).await;

    // node-0: 3 of 4 GPUs taken, then a 2-GPU pod does not fit.
    run_pod(&client, "big", "node-0", &[], &[("cpu", "1"), ("nvidia.com/gpu", "3")]).await;
    wait_phase(&client, "big", "Running", WAIT).await;
    run_pod(&client, "greedy", "node-0", &[], &[("nvidia.com/gpu", "2")]).await;
    let greedy = wait_decided(&client, "greedy").await;
    let status = greedy.status.as_ref().unwrap();
    assert_eq!(outcome(&greedy), "Failed/OutOfnvidia.com/gpu");
    let message =
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 2, used: 3, capacity: 4";
    assert_eq!(status.message.as_deref(), Some(message));
    assert!(status.container_statuses.is_none(), "a rejected pod never started: {status:?}");
    let events = eventually(WAIT, "the rejection event", || async {
        let events = warnings(&client, "greedy").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events, [("OutOfnvidia.com/gpu".to_owned(), message.to_owned(), "node-0".to_owned())]);

    // The largest init container counts when it is more than the containers' sum.
    let mut setup = pod("setup", &[], &[("cpu", "1")]);
    setup.spec.as_mut().unwrap().init_containers = Some(vec![container("migrate", &[("cpu", "3500m")])]);
    create(&client, &setup).await;
    bind(&client, "setup", "node-0").await;
    let setup = wait_decided(&client, "setup").await;
    assert_eq!(outcome(&setup), "Failed/OutOfcpu");
    assert!(
        setup.status.unwrap().message.unwrap().ends_with("cpu, requested: 3500, used: 1000, capacity: 4000"),
        "cpu in millicores"
    );
    // An extended resource no node has is a cluster-level one: the kubelet ignores it.
    run_pod(&client, "licensed", "node-0", &[], &[("cpu", "500m"), ("example.com/licence", "1")]).await;
    assert_eq!(outcome(&wait_decided(&client, "licensed").await), "Running");
    // Deleting the big pod frees its GPUs.
    pods(&client).delete("big", &DeleteParams::default()).await.unwrap();
    wait_gone(&client, "big").await;
    run_pod(&client, "after-delete", "node-0", &[], &[("nvidia.com/gpu", "4")]).await;
    assert_eq!(outcome(&wait_decided(&client, "after-delete").await), "Running");

    // node-1: six 2-GPU pods bound at once (two schedulers racing): exactly two run.
    let racers: Vec<String> = (0..6).map(|i| format!("racer-{i}")).collect();
    for name in &racers {
        create(&client, &pod(name, &[(DURATION_ANNOTATION, "2")], &[("nvidia.com/gpu", "2")])).await;
    }
    futures::future::join_all(racers.iter().map(|name| bind(&client, name, "node-1"))).await;
    let mut outcomes = Vec::new();
    for name in &racers {
        outcomes.push(outcome(&wait_decided(&client, name).await));
    }
    let rejected = outcomes.iter().filter(|o| *o == "Failed/OutOfnvidia.com/gpu").count();
    let admitted = outcomes.iter().filter(|o| *o == "Running" || *o == "Succeeded").count();
    assert_eq!((admitted, rejected), (2, 4), "{outcomes:?}");
    assert_no_node_over_committed(&client, &[("pods", 4), ("cpu", 4000), ("nvidia.com/gpu", 4)]).await;
    // Pods that completed free their GPUs too.
    for name in &racers {
        let pod = pods(&client).get(name).await.unwrap();
        if phase(&pod) != "Failed" {
            wait_phase(&client, name, "Succeeded", WAIT).await;
        }
    }
    run_pod(&client, "after-completion", "node-1", &[], &[("nvidia.com/gpu", "4")]).await;
    assert_eq!(outcome(&wait_decided(&client, "after-completion").await), "Running");

    // The pod count: node-1 takes 4 pods, the fifth is refused whatever it requests.
    for name in ["small-1", "small-2", "small-3"] {
        run_pod(&client, name, "node-1", &[], &[]).await;
        assert_eq!(outcome(&wait_decided(&client, name).await), "Running", "{name}");
    }
    run_pod(&client, "one-too-many", "node-1", &[], &[]).await;
    let full = wait_decided(&client, "one-too-many").await;
    assert_eq!(outcome(&full), "Failed/OutOfpods");
    assert!(full.status.unwrap().message.unwrap().ends_with("pods, requested: 1, used: 4, capacity: 4"));
    assert_no_node_over_committed(&client, &[("pods", 4), ("cpu", 4000), ("nvidia.com/gpu", 4)]).await;
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_and_injected_errors_lose_no_transition() {
    let Some((server, kubelet)) = cluster(1).await else { return };
    let client = server.client();
    let faults = server.faults();
    // The start write fails twice with 500; the completion write meets a dropped watch and a 429.
    faults.fail_next_writes("pods/status", 2, 500);
    run_pod(&client, "tough", "node-0", &[(DURATION_ANNOTATION, "1")], &[]).await;
    wait_phase(&client, "tough", "Running", WAIT).await;
    faults.drop_watches();
    faults.fail_next_writes("pods/status", 2, 503);
    let (pod, _) = wait_phase(&client, "tough", "Succeeded", WAIT).await;
    assert_eq!(terminated(&pod), both(0, "Completed"));
    faults.fail_next_writes("pods/status", 1, 429);
    run_pod(&client, "throttled", "node-0", &[(DURATION_ANNOTATION, "0.2")], &[]).await;
    wait_phase(&client, "throttled", "Succeeded", WAIT).await;

    // A pod bound while the watch is down is picked up when it resumes.
    faults.drop_watches();
    run_pod(&client, "late", "node-0", &[(DURATION_ANNOTATION, "0.2")], &[]).await;
    faults.drop_watches();
    wait_phase(&client, "late", "Succeeded", WAIT).await;

    // Conflicts on the start write: the kubelet re-reads and retries.
    faults.fail_next_writes("pods/status", 3, 409);
    run_pod(&client, "contended", "node-0", &[], &[]).await;
    wait_phase(&client, "contended", "Running", WAIT).await;

    // A slow API server delays but loses nothing.
    faults.set_latency(Duration::from_millis(200));
    run_pod(&client, "slow", "node-0", &[(DURATION_ANNOTATION, "0.5")], &[]).await;
    wait_phase(&client, "slow", "Succeeded", WAIT).await;
    faults.clear();
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_the_kubelet_and_of_the_api_server_keep_nodes_and_completions_on_time() {
    let Some((mut server, kubelet)) = cluster(2).await else { return };
    let client = server.client();
    let uids = |nodes: Vec<Node>| -> BTreeMap<String, String> {
        nodes.into_iter().map(|n| (n.metadata.name.unwrap(), n.metadata.uid.unwrap())).collect()
    };
    let registered = uids(wait_nodes_ready(&client, 2).await);

    // A kubelet restart: the timer is derived from the pod, not restarted.
    run_pod(&client, "long", "node-0", &[(DURATION_ANNOTATION, "3")], &[]).await;
    let (_, running) = wait_phase(&client, "long", "Running", WAIT).await;
    kubelet.stop().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kubelet = Kubelet::start(client.clone(), config(2, GPU_NODE));
    let (_, done) = wait_phase(&client, "long", "Succeeded", WAIT).await;
    let ran = done - running;
    assert!(ran < Duration::from_millis(4500), "ran {ran:?}: the timer restarted with the kubelet");
    // A pod overdue while no kubelet ran is finished as soon as a kubelet sees it.
    run_pod(&client, "overdue", "node-1", &[(DURATION_ANNOTATION, "0.5")], &[]).await;
    wait_phase(&client, "overdue", "Running", WAIT).await;
    kubelet.stop().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kubelet = Kubelet::start(client.clone(), config(2, GPU_NODE));
    wait_phase(&client, "overdue", "Succeeded", WAIT).await;
    // The same nodes, adopted rather than re-created.
    assert_eq!(uids(wait_nodes_ready(&client, 2).await), registered);

    // An API server restart (etcd kept) while a pod is due: it completes once the server is
    // back, late only by the kubelet's retry backoff.
    run_pod(&client, "through-outage", "node-0", &[(DURATION_ANNOTATION, "1")], &[]).await;
    let (_, running) = wait_phase(&client, "through-outage", "Running", WAIT).await;
    server.restart().await.expect("kube-apiserver restarts");
    let back = Instant::now();
    let (_, done) = wait_phase(&client, "through-outage", "Succeeded", WAIT).await;
    assert!(done >= running + Duration::from_secs(1), "ended early");
    assert!(done < back + Duration::from_secs(8), "ended {:?} after the server was back", done - back);
    // A pod bound after the restart still runs.
    run_pod(&client, "after", "node-0", &[(DURATION_ANNOTATION, "0.2")], &[]).await;
    wait_phase(&client, "after", "Succeeded", WAIT).await;
    assert_eq!(uids(wait_nodes_ready(&client, 2).await), registered);
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pods_on_many_nodes() {
    let Some((server, kubelet)) = cluster(20).await else { return };
    let client = server.client();
    // Eight one-GPU pods per 8-GPU node: all are bound at once, so more would race their
    // neighbours' completion and be rejected by admission (OutOfnvidia.com/gpu) whenever the
    // machine is slow, which is admission working, not what this test measures.
    let count = 160;
    let started = Instant::now();
    futures::stream::iter(0..count)
        .for_each_concurrent(16, |i| {
            let client = client.clone();
            async move {
                let requests = [("cpu", "1"), ("nvidia.com/gpu", "1")];
                run_pod(
                    &client,
                    &format!("w{i}"),
                    &format!("node-{}", i % 20),
                    &[(DURATION_ANNOTATION, "0.5")],
                    &requests,
                )
                .await;
            }
        })
        .await;
    let api = pods(&client);
    eventually(Duration::from_secs(90), "every pod to succeed", || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list.items.iter().filter(|p| phase(p) == "Succeeded").count();
        (done == count).then_some(())
    })
    .await;
    eprintln!("{count} pods on 20 nodes ran to completion in {:?}", started.elapsed());
    kubelet.stop().await;
}

/// A client for an address where nothing listens.
fn unreachable_client() -> Client {
    Client::try_from(kube::Config::new("https://127.0.0.1:9".parse().unwrap())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfiguration_is_an_error_at_once() {
    let mut bad_prefix = config(1, GPU_NODE);
    bad_prefix.name_prefix = "Bad_Prefix".to_owned();
    let mut bad_cpu = config(1, GPU_NODE);
    bad_cpu.allocatable.insert("cpu".to_owned(), "lots".to_owned());
    let mut bad_label = config(1, GPU_NODE);
    bad_label.labels.insert("pool".to_owned(), "two words".to_owned());
    for (culprit, config) in [("Bad_Prefix", bad_prefix), ("lots", bad_cpu), ("two words", bad_label)] {
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            kubelet::run(unreachable_client(), config, std::future::pending()),
        )
        .await
        .expect("run returns at once");
        let error = format!("{:#}", result.expect_err(culprit));
        assert!(error.contains(culprit), "{error}");
    }
}

/// The `drover-kubelet` binary cargo built for these tests.
fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_drover-kubelet"))
}

#[test]
fn the_binary_refuses_bad_flags_naming_them() {
    for (args, flag) in [
        (&["--node-allocatable", "cpu=lots"][..], "--node-allocatable"),
        (&["--node-allocatable", "nvidia.com/gpu=0.5"], "--node-allocatable"),
        (&["--node-labels", "pool"], "--node-labels"),
        (&["--node-labels", "pool=two words"], "--node-labels"),
        (&["--name-prefix", "Node_"], "--name-prefix"),
        (&["--nodes", "0"], "--nodes"),
        (&["--nodes", "many"], "--nodes"),
    ] {
        let out = Command::new(binary()).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    let out = Command::new(binary()).args(["--kubeconfig", "/nonexistent/kubeconfig"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--kubeconfig /nonexistent/kubeconfig"), "{stderr}");
}

/// A kubeconfig for a ServiceAccount bound to the ClusterRole of `rbac.yaml`, and nothing else.
async fn least_privilege_kubeconfig(server: &Server) -> PathBuf {
    let client = server.client();
    let role: ClusterRole = serde_yaml::from_str(include_str!("../rbac.yaml")).expect("rbac.yaml is a ClusterRole");
    Api::<ClusterRole>::all(client.clone()).create(&PostParams::default(), &role).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    let account = ServiceAccount {
        metadata: ObjectMeta { name: Some("drover-kubelet".to_owned()), ..Default::default() },
        ..Default::default()
    };
    accounts.create(&PostParams::default(), &account).await.unwrap();
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta { name: Some("drover-kubelet".to_owned()), ..Default::default() },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "ClusterRole".to_owned(),
            name: role.metadata.name.clone().unwrap(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: "drover-kubelet".to_owned(),
            namespace: Some("kube-system".to_owned()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone()).create(&PostParams::default(), &binding).await.unwrap();
    let request = TokenRequest::default();
    let token = accounts.create_token_request("drover-kubelet", &PostParams::default(), &request).await.unwrap();
    server.kubeconfig_for_token("drover-kubelet", token.status.unwrap().token.as_deref().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_with_least_privilege_beside_kube_controller_manager_and_stops_on_sigterm() {
    let options = Options { controller_manager: true, ..Default::default() };
    let Some(server) = Server::start_with(&options).await else { return };
    let client = server.client();
    let kubeconfig = least_privilege_kubeconfig(&server).await;
    let log = server.plane().dir().join("drover-kubelet.log");
    let mut child = Command::new(binary())
        .args(["--kubeconfig".as_ref(), kubeconfig.as_os_str()])
        .args(["--nodes", "2", "--name-prefix", "gpu-", "--node-labels", "pool=a100,example.com/rack=r1"])
        .args(["--node-allocatable", "cpu=8,memory=64Gi,nvidia.com/gpu=4"])
        .env("RUST_LOG", "drover_kubelet=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("drover-kubelet starts");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // The node lifecycle controller and the kubelet may both lift the not-ready taint.
    let nodes = wait_nodes_ready(&client, 2).await;
    for node in &nodes {
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!((labels["pool"].as_str(), labels["example.com/rack"].as_str()), ("a100", "r1"));
        let allocatable = node.status.as_ref().unwrap().allocatable.as_ref().unwrap();
        assert_eq!(allocatable["nvidia.com/gpu"], Quantity("4".to_owned()));
        assert_eq!(allocatable["pods"], Quantity("110".to_owned()));
    }
    // Pods need the namespace's default ServiceAccount, which kube-controller-manager makes.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    eventually(WAIT, "the default ServiceAccount", || async { accounts.get_opt("default").await.ok()? }).await;
    run_pod(&client, "job", "gpu-0", &[(DURATION_ANNOTATION, "1")], &[("nvidia.com/gpu", "4")]).await;
    wait_phase(&client, "job", "Succeeded", WAIT).await;
    run_pod(&client, "too-big", "gpu-1", &[], &[("nvidia.com/gpu", "5")]).await;
    assert_eq!(outcome(&wait_decided(&client, "too-big").await), "Failed/OutOfnvidia.com/gpu");
    eventually(WAIT, "the rejection event", || async {
        (!warnings(&client, "too-big").await.is_empty()).then_some(())
    })
    .await;
    // The nodes are still Ready for the node lifecycle controller.
    let nodes = wait_nodes_ready(&client, 2).await;
    assert!(nodes.iter().all(|n| taints(n).is_empty()), "{:?}", nodes.iter().map(taints).collect::<Vec<_>>());

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = eventually(Duration::from_secs(10), "drover-kubelet to exit after SIGTERM", || {
        let exited = child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    let text = log_text();
    assert!(exit.success(), "exit {exit}: {text}");
    assert!(!text.to_lowercase().contains("forbidden"), "rbac.yaml lacks a permission:\n{text}");
}

/// The scale the kubelet is built for: 1,000 nodes and 10,000 pods. Slow (it creates and
/// binds 10,000 pods through the API), so run it on demand:
/// `cargo nextest run --release -p drover-kubelet --run-ignored only --no-capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale run, a few minutes"]
async fn ten_thousand_pods_on_a_thousand_nodes() {
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    let started = Instant::now();
    let kubelet = Kubelet::start(client.clone(), config(1000, GPU_NODE));
    wait_nodes_ready(&client, 1000).await;
    eprintln!("1000 nodes registered in {:?}", started.elapsed());
    let count = 10_000;
    let started = Instant::now();
    futures::stream::iter(0..count)
        .for_each_concurrent(32, |i| {
            let client = client.clone();
            async move {
                run_pod(&client, &format!("w{i}"), &format!("node-{}", i % 1000), &[(DURATION_ANNOTATION, "2")], &[])
                    .await;
            }
        })
        .await;
    eprintln!("{count} pods created and bound in {:?}", started.elapsed());
    let api = pods(&client);
    eventually(Duration::from_secs(300), "every pod to succeed", || async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list.items.iter().filter(|p| phase(p) == "Succeeded").count();
        (done == count).then_some(())
    })
    .await;
    eprintln!("{count} pods ran to completion {:?} after the first was bound", started.elapsed());
    kubelet.stop().await;
}
