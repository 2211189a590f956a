//! Drover beside the default scheduler: kube-scheduler (the real one) places plain pods on the
//! same nodes while Drover places gangs. No node ever runs more than it has, every gang and
//! every plain pod runs to completion, and the API server's audit log shows that Drover bound
//! only its own pods and kube-scheduler only its own.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_e2e::Cluster;
use drover_envtest::{Credentials, Options};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{json, Value};

const GPU: &str = "nvidia.com/gpu";
const NODES: u32 = 3;
const JOBS: u32 = 6;
const PLAIN: u32 = 24;

fn gpus(pod: &Pod) -> i64 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(GPU)?.0.parse::<i64>().ok())
        .sum()
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

/// GPUs of running pods per node.
fn running_gpus(pods: &[Pod]) -> BTreeMap<String, i64> {
    let mut per_node = BTreeMap::new();
    for pod in pods.iter().filter(|p| phase(p) == "Running") {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per_node.entry(node).or_default() += gpus(pod);
        }
    }
    per_node
}

fn gang_job(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "batch.drover.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": 4, "tasks": [{"name": "worker", "replicas": 4, "template": {
            "metadata": {"annotations": {"sim.drover.dev/duration": "3"}},
            "spec": {"containers": [{"name": "main", "image": "trainer",
                "resources": {"requests": {GPU: "1", "cpu": "100m"}, "limits": {GPU: "1"}}}]}
        }}]}
    }))
    .expect("job json")
}

fn plain_pod(i: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("plain-{i}"), "annotations": {"sim.drover.dev/duration": "2"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "app",
            "resources": {"requests": {GPU: "1", "cpu": "100m"}, "limits": {GPU: "1"}}}]}
    }))
    .expect("pod json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_and_kube_scheduler_share_nodes_without_overcommit_or_foreign_bindings() {
    let options = Options { audit: true, ..Options::default() };
    let Some(mut cluster) = Cluster::start_without_drover(NODES, options).await else { return };
    cluster.guard_charges().await;
    cluster.server_mut().plane_mut().start_kube_scheduler(&[]).expect("kube-scheduler starts");
    // Drover runs as its own user, so that the audit log tells its requests apart.
    let plane = cluster.server().plane();
    let identity = plane.authority().client("drover", &["system:masters"]).expect("certificate");
    let kubeconfig = plane.write_kubeconfig("drover", &Credentials::Certificate(&identity)).expect("kubeconfig");
    let mut processes = Vec::new();
    for component in ["controllers", "scheduler"] {
        let log = cluster.logs().join(format!("{component}.log"));
        let mut cmd = cluster.drover_command(component, &log).expect("drover is built");
        cmd.env("KUBECONFIG", &kubeconfig).args(["--period", "0.2"].iter().filter(|_| component == "scheduler"));
        processes.push(KillOnDrop(cmd.spawn().expect("drover starts")));
    }
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch.drover.dev", "v1alpha1", "Job"), "jobs"),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Gangs and plain pods arrive interleaved, more than the 24 GPUs hold at once.
    for i in 0..PLAIN {
        if i % (PLAIN / JOBS) == 0 {
            jobs.create(&PostParams::default(), &gang_job(&format!("gang-{}", i / (PLAIN / JOBS)))).await.expect("job");
        }
        pods.create(&PostParams::default(), &plain_pod(i)).await.expect("plain pod");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut samples = 0;
    loop {
        let list = pods.list(&ListParams::default()).await.expect("pods").items;
        for (node, used) in running_gpus(&list) {
            assert!(used <= 8, "node {node} runs pods of {used} GPUs (logs in {logs})");
        }
        samples += 1;
        let plain_done = list
            .iter()
            .filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("plain-")) && phase(p) == "Succeeded")
            .count();
        let mut jobs_done = 0;
        for j in 0..JOBS {
            let job = jobs.get(&format!("gang-{j}")).await.expect("job");
            jobs_done += usize::from(job.data["status"]["state"] == "Completed");
        }
        if plain_done == PLAIN as usize && jobs_done == JOBS as usize {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done after 120 s: {plain_done}/{PLAIN} plain pods, {jobs_done}/{JOBS} jobs (logs in {logs})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(samples > 10, "too few samples of the nodes: {samples}");

    // Who bound what, from the audit log.
    let audit = std::fs::read_to_string(plane.dir().join("audit.log")).expect("audit log");
    let mut drover_bound = Vec::new();
    let mut others_bound = Vec::new();
    for line in audit.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        let object = &event["objectRef"];
        if event["stage"] != "ResponseComplete"
            || event["verb"] != "create"
            || object["resource"] != "pods"
            || object["subresource"] != "binding"
            || event["responseStatus"]["code"].as_i64().is_some_and(|c| c >= 300)
        {
            continue;
        }
        let pod = object["name"].as_str().unwrap_or_default().to_string();
        if event["user"]["username"] == "drover" {
            drover_bound.push(pod);
        } else {
            others_bound.push(pod);
        }
    }
    assert_eq!(drover_bound.len(), (JOBS * 4) as usize, "Drover's bindings: {drover_bound:?}");
    assert!(drover_bound.iter().all(|p| p.starts_with("gang-")), "Drover bound a pod not its own: {drover_bound:?}");
    assert_eq!(others_bound.len(), PLAIN as usize, "kube-scheduler's bindings: {others_bound:?}");
    assert!(
        others_bound.iter().all(|p| p.starts_with("plain-")),
        "kube-scheduler bound a Drover pod: {others_bound:?}"
    );
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    let rejected: Vec<_> = list
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.reason.as_deref()).is_some_and(|r| r.starts_with("OutOf")))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(rejected.is_empty(), "pods a kubelet rejected for want of room: {rejected:?}");
    drop(processes);
}

/// A child process killed on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
