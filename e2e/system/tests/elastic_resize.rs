//! Run:ai's elasticity end to end through the real binaries (real kube-apiserver + fake
//! kubelet, `drover controllers`, `drover scheduler`), on two nodes of 8 GPUs with 10 GPUs
//! taken by two other Jobs (6 free):
//!
//! - a 16-GPU Job that does not ask for elasticity waits whole and is never resized;
//! - a 16-GPU elastic Job runs at 4 pods (8 does not fit), then at 8 when 4 GPUs free up and
//!   at 16 when the rest do; each time the Job controller restarts every pod with the new
//!   `WORLD_SIZE`, and the Job's status and Events say why.

use std::collections::BTreeMap;
use std::time::Duration;

use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, Cluster};
use drover_envtest::Options;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{json, Value};

const NS: &str = "default";
const QUEUE: &str = "research";

/// A Job of `replicas` one-GPU pods whose gang is all of them; elastic down to `min_gpus`
/// GPUs when given.
fn job(name: &str, replicas: u32, min_gpus: Option<u32>) -> Value {
    let mut spec = json!({"queue": QUEUE, "tasks": [{"name": "worker", "replicas": replicas, "template": {
        "spec": {"containers": [{"name": "main", "image": "trainer",
            "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]});
    if let Some(g) = min_gpus {
        spec["elasticity"] = json!({"shrink": "Halve", "minGPUs": g});
    }
    json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
        "spec": spec})
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && pod.metadata.deletion_timestamp.is_none()
}

/// A pod's environment as its controller made it.
fn env(pod: &Pod) -> BTreeMap<String, String> {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    let vars = containers.flat_map(|c| c.env.iter().flatten());
    vars.map(|v| (v.name.clone(), v.value.clone().unwrap_or_default())).collect()
}

/// The pods of `job`, live (not being deleted).
async fn live_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    let selector = format!("batch.drover.dev/job-name={job}");
    let list = pods.list(&ListParams::default().labels(&selector)).await.expect("pods listed").items;
    list.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// Waits until `job` runs exactly `size` pods, all made for that size: `WORLD_SIZE` is `size`
/// and the ranks are 0..size.
async fn runs_at(pods: &Api<Pod>, job: &str, size: usize, logs: &str) {
    eventually(90, &format!("{job} running with {size} pods (logs in {logs})"), || async {
        let live = live_pods(pods, job).await;
        if live.len() != size || !live.iter().all(running) {
            return None;
        }
        let envs: Vec<BTreeMap<String, String>> = live.iter().map(env).collect();
        let mut ranks: Vec<usize> = envs.iter().filter_map(|e| e.get("RANK")?.parse().ok()).collect();
        ranks.sort_unstable();
        let world = envs.iter().all(|e| e.get("WORLD_SIZE") == Some(&size.to_string()));
        (world && ranks == (0..size).collect::<Vec<_>>()).then_some(())
    })
    .await;
}

/// The messages of the Events recorded on `job` with `reason`.
async fn events(events: &Api<Event>, job: &str, reason: &str) -> Vec<String> {
    let list = events.list(&ListParams::default()).await.expect("events listed").items;
    list.into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Job") && e.involved_object.name.as_deref() == Some(job))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

async fn delete_job(jobs: &Api<Job>, pods: &Api<Pod>, name: &str) {
    jobs.delete(name, &DeleteParams::foreground()).await.expect("job deleted");
    eventually(60, &format!("the pods of {name} gone"), || async {
        live_pods(pods, name).await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_job_shrinks_to_what_fits_and_grows_back_a_fixed_one_never_does() {
    let Some(mut cluster) = Cluster::start_without_drover(2, Options::default()).await else { return };
    cluster.guard_charges().await;
    cluster.spawn_drover("controllers", &[]).expect("drover controllers starts");
    cluster.spawn_drover("scheduler", &["--period", "0.2"]).expect("drover scheduler starts");
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let queue = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": QUEUE},
        "spec": {"deserved": {"nvidia.com/gpu": "16"}}});
    create(&Api::<Queue>::all(client.clone()), queue).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), NS);
    let recorded: Api<Event> = Api::namespaced(client.clone(), NS);

    // 10 of the 16 GPUs taken: 6 free.
    create(&jobs, job("four", 4, None)).await;
    create(&jobs, job("six", 6, None)).await;
    runs_at(&pods, "four", 4, &logs).await;
    runs_at(&pods, "six", 6, &logs).await;

    // A Job that does not ask waits whole: 16 pods, none bound, its gang still 16, no resize.
    create(&jobs, job("fixed", 16, None)).await;
    eventually(60, &format!("fixed waits with its 16 pods (logs in {logs})"), || async {
        let group = groups.get("fixed").await.ok()?;
        let waits = group.status.as_ref()?.waiting_reason().is_some();
        (waits && live_pods(&pods, "fixed").await.len() == 16).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fixed = live_pods(&pods, "fixed").await;
    assert_eq!(fixed.len(), 16, "the fixed job's pods (logs in {logs})");
    assert!(fixed.iter().all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()), "none bound");
    let group = groups.get("fixed").await.expect("fixed's group");
    assert_eq!(group.spec.min_member, 16);
    assert_eq!(group.status.and_then(|s| s.resize), None, "a job that does not ask is never resized");
    assert!(events(&recorded, "fixed", "Resized").await.is_empty());
    delete_job(&jobs, &pods, "fixed").await;

    // The elastic Job: 8 does not fit the 6 free GPUs, 4 does.
    create(&jobs, job("elastic", 16, Some(2))).await;
    runs_at(&pods, "elastic", 4, &logs).await;
    let status = jobs.get("elastic").await.expect("the job").status.expect("its status");
    assert_eq!((status.replicas, status.retry_count), (Some(4), 0), "its size in status; no retry spent");
    let why = events(&recorded, "elastic", "Resized").await;
    assert!(why.iter().any(|m| m.contains("from 16 to 4 pods") && m.contains("found no room")), "{why:?}");
    let group = groups.get("elastic").await.expect("elastic's group");
    assert_eq!(group.spec.min_member, 4, "its gang is its size");

    // 4 GPUs free up: it doubles.
    delete_job(&jobs, &pods, "four").await;
    runs_at(&pods, "elastic", 8, &logs).await;
    // The rest free up: it runs as asked.
    delete_job(&jobs, &pods, "six").await;
    runs_at(&pods, "elastic", 16, &logs).await;
    let status = jobs.get("elastic").await.expect("the job").status.expect("its status");
    assert_eq!((status.replicas, status.retry_count), (Some(16), 0));
    let why = events(&recorded, "elastic", "Resized").await;
    for step in ["from 4 to 8 pods", "from 8 to 16 pods"] {
        assert!(why.iter().any(|m| m.contains(step) && m.contains("spare capacity")), "{step}: {why:?}");
    }
}
