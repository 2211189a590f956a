//! Scheduling semantics end to end through the real binaries (real kube-apiserver + fake kubelet,
//! `drover controllers`, `drover scheduler`): gangs are all-or-nothing, priority preempts
//! within a queue, fair share reclaims across projects, and elastic jobs scale both ways.

use std::time::{Duration, Instant};

use drover_api::crd::department::Department;
use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::project::Project;
use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, Cluster};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

const NS: &str = "default";

/// A task of `replicas` pods of `gpus` GPUs each, running `duration` seconds (forever if `None`).
fn task(name: &str, replicas: u32, gpus: u32, duration: Option<&str>) -> Value {
    let annotations = match duration {
        Some(d) => json!({"sim.drover.dev/duration": d}),
        None => json!({}),
    };
    json!({
        "name": name,
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "trainer",
                "resources": {"requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "1"},
                    "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
        }
    })
}

/// A Job manifest with one task.
fn job(name: &str, min_available: u32, task: Value, queue: Option<&str>, priority_class: Option<&str>) -> Value {
    let mut spec = json!({"minAvailable": min_available, "tasks": [task]});
    if let Some(q) = queue {
        spec["queue"] = json!(q);
    }
    if let Some(pc) = priority_class {
        spec["priorityClassName"] = json!(pc);
    }
    json!({
        "apiVersion": "batch.drover.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec
    })
}

async fn priority_class(cluster: &Cluster, name: &str, value: i32) {
    let api: Api<PriorityClass> = Api::all(cluster.client.clone());
    create(
        &api,
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}),
    )
    .await;
}

/// The job's pods, or `None` if the list fails.
async fn job_pods(pods: &Api<Pod>, job: &str) -> Option<Vec<Pod>> {
    let selector = format!("batch.drover.dev/job-name={job}");
    Some(pods.list(&ListParams::default().labels(&selector)).await.ok()?.items)
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Bound to a node, not being deleted, not finished.
fn bound(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        && !deleting(pod)
        && !matches!(phase(pod), "Succeeded" | "Failed")
}

/// Running and not being deleted.
fn running(pod: &Pod) -> bool {
    phase(pod) == "Running" && !deleting(pod)
}

fn count(pods: &[Pod], f: fn(&Pod) -> bool) -> usize {
    pods.iter().filter(|p| f(p)).count()
}

/// Waits until `n` pods of `job` run; returns them.
async fn wait_running(pods: &Api<Pod>, job: &str, n: usize, secs: u64, logs: &str) -> Vec<Pod> {
    eventually(secs, &format!("{n} pods of {job} running (logs in {logs})"), || async {
        let list = job_pods(pods, job).await?;
        (count(&list, running) == n).then_some(list)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_all_or_nothing() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let logs = cluster.logs().display().to_string();
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let groups: Api<PodGroup> = Api::namespaced(cluster.client.clone(), NS);

    // 2 x 6 GPUs cannot fit 8 GPUs as a gang; one pod alone would.
    create(&jobs, job("big", 2, task("worker", 2, 6, None), None, None)).await;
    create(&jobs, job("small", 1, task("worker", 1, 1, None), None, None)).await;

    wait_running(&pods, "small", 1, 30, &logs).await;
    eventually(20, &format!("PodGroup big Unschedulable=True (logs in {logs})"), || async {
        let pg = groups.get("big").await.ok()?;
        let conditions = pg.status?.conditions;
        conditions.iter().any(|c| c.type_ == "Unschedulable" && c.status == "True").then_some(())
    })
    .await;

    // For a few seconds (many scheduler periods), not one pod of the gang is bound.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let list = job_pods(&pods, "big").await.expect("pods list");
        let bound_pods: Vec<_> = list.iter().filter(|p| bound(p)).map(|p| p.metadata.name.clone()).collect();
        assert!(bound_pods.is_empty(), "gang pods bound: {bound_pods:?} (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let list = job_pods(&pods, "big").await.expect("pods list");
    assert_eq!(list.len(), 2, "the controller made both gang pods");
    let small = job_pods(&pods, "small").await.expect("pods list");
    assert_eq!(count(&small, running), 1, "the small job still runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_within_a_queue() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let logs = cluster.logs().display().to_string();
    priority_class(&cluster, "train", 50).await;
    priority_class(&cluster, "interactive-preemptible", 75).await;
    let queues: Api<Queue> = Api::all(cluster.client.clone());
    create(
        &queues,
        json!({
            "apiVersion": "scheduling.drover.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "team"},
            "spec": {"deserved": {"nvidia.com/gpu": "8"}}
        }),
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);

    create(&jobs, job("train", 4, task("worker", 4, 2, None), Some("team"), Some("train"))).await;
    let victims = wait_running(&pods, "train", 4, 30, &logs).await;
    let victim_uids: Vec<String> = victims.iter().filter_map(|p| p.metadata.uid.clone()).collect();

    create(&jobs, job("chat", 2, task("worker", 2, 4, None), Some("team"), Some("interactive-preemptible"))).await;
    wait_running(&pods, "chat", 2, 30, &logs).await;

    let train = job_pods(&pods, "train").await.expect("pods list");
    let survivors: Vec<_> = train
        .iter()
        .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| victim_uids.contains(u)) && !deleting(p))
        .map(|p| p.metadata.name.clone())
        .collect();
    assert!(survivors.is_empty(), "original train pods not evicted: {survivors:?} (logs in {logs})");
    assert_eq!(count(&train, bound), 0, "no train pod holds a node (logs in {logs})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_across_projects() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let logs = cluster.logs().display().to_string();
    let departments: Api<Department> = Api::all(cluster.client.clone());
    let projects: Api<Project> = Api::all(cluster.client.clone());
    let queues: Api<Queue> = Api::all(cluster.client.clone());
    create(
        &departments,
        json!({
            "apiVersion": "scheduling.drover.dev/v1alpha1",
            "kind": "Department",
            "metadata": {"name": "research"},
            "spec": {"nodePools": [{"name": "gpu", "gpu": "8"}]}
        }),
    )
    .await;
    // Each project's queue admits only the project's namespace.
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    for (name, ns) in [("proj-a", "team-a"), ("proj-b", "team-b")] {
        create(&namespaces, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
        let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns);
        eventually(30, &format!("the default ServiceAccount of {ns}"), || async {
            accounts.get_opt("default").await.ok().flatten()
        })
        .await;
        create(
            &projects,
            json!({
                "apiVersion": "scheduling.drover.dev/v1alpha1",
                "kind": "Project",
                "metadata": {"name": name},
                "spec": {"department": "research", "namespaces": [ns], "nodePools": [{"name": "gpu", "gpu": "4"}]}
            }),
        )
        .await;
    }
    eventually(20, &format!("project queues exist (logs in {logs})"), || async {
        for q in ["research.gpu", "proj-a.gpu", "proj-b.gpu"] {
            queues.get(q).await.ok()?;
        }
        Some(())
    })
    .await;

    let in_namespace = |mut manifest: Value, ns: &str| {
        manifest["metadata"]["namespace"] = json!(ns);
        manifest
    };
    let jobs_a: Api<Job> = Api::namespaced(cluster.client.clone(), "team-a");
    let jobs_b: Api<Job> = Api::namespaced(cluster.client.clone(), "team-b");
    let pods_a: Api<Pod> = Api::namespaced(cluster.client.clone(), "team-a");
    let pods_b: Api<Pod> = Api::namespaced(cluster.client.clone(), "team-b");
    create(&jobs_a, in_namespace(job("a", 1, task("worker", 8, 1, None), Some("proj-a.gpu"), None), "team-a")).await;
    wait_running(&pods_a, "a", 8, 30, &logs).await;

    create(&jobs_b, in_namespace(job("b", 4, task("worker", 4, 1, None), Some("proj-b.gpu"), None), "team-b")).await;
    // While B's gang starts, A never drops below its deserved 4.
    eventually(30, &format!("B's gang runs and A keeps 4 (logs in {logs})"), || async {
        let a = job_pods(&pods_a, "a").await?;
        let a_running = count(&a, running);
        assert!(a_running >= 4, "project A was cut below its deserved 4 GPUs: {a_running} (logs in {logs})");
        let b = job_pods(&pods_b, "b").await?;
        (count(&b, running) == 4 && a_running == 4).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elastic_scale_up_and_down() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let logs = cluster.logs().display().to_string();
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);

    create(&jobs, job("elastic", 1, task("worker", 2, 1, None), None, None)).await;
    wait_running(&pods, "elastic", 2, 30, &logs).await;

    // A merge patch replaces the whole tasks list, so the patch carries the full task.
    let scale = |replicas: u32| json!({"spec": {"tasks": [task("worker", replicas, 1, None)]}});
    jobs.patch("elastic", &PatchParams::default(), &Patch::Merge(&scale(4))).await.expect("scaled up");
    wait_running(&pods, "elastic", 4, 20, &logs).await;

    jobs.patch("elastic", &PatchParams::default(), &Patch::Merge(&scale(1))).await.expect("scaled down");
    eventually(20, &format!("elastic scaled down to 1 pod (logs in {logs})"), || async {
        let list = job_pods(&pods, "elastic").await?;
        (list.len() == 1 && count(&list, running) == 1).then_some(())
    })
    .await;
}
