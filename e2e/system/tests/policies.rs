//! Job lifecycle policies and queue-tree problems, end to end through the real binaries:
//! failing pods restart the job until `maxRetry`, a completed task completes the job, and a
//! queue cycle is reported on the queues without stopping other work.

use drover_api::crd::job::{Job, JobState};
use drover_api::crd::queue::Queue;
use drover_e2e::{eventually, eventually_result, Cluster};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn job(spec: serde_json::Value, name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch.drover.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("job manifest")
}

fn template(annotations: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "trainer", "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_pods_restart_the_job_until_max_retry() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    let spec = json!({
        "maxRetry": 1,
        "policies": [{"event": "PodFailed", "action": "RestartJob"}],
        "tasks": [{"name": "worker", "replicas": 2,
                   "template": template(json!({"sim.drover.dev/duration": "0.3", "sim.drover.dev/outcome": "Failed"}))}]
    });
    jobs.create(&PostParams::default(), &job(spec, "flaky")).await.expect("job created");
    let logs = cluster.logs().display().to_string();
    let failed = eventually_result(60, &format!("the job fails after its retry (logs in {logs})"), || async {
        let status = jobs.get("flaky").await.ok()?.status?;
        (status.state == JobState::Failed).then_some(status)
    })
    .await;
    let status = match failed {
        Ok(status) => status,
        Err(e) => {
            let job = jobs.get("flaky").await.map(|j| j.status);
            let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
            let listed = pods.list(&ListParams::default().labels("batch.drover.dev/job-name=flaky")).await;
            let pods: Vec<_> = listed
                .iter()
                .flat_map(|l| &l.items)
                .map(|p| {
                    let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                    (p.metadata.name.clone(), phase, p.metadata.deletion_timestamp.is_some())
                })
                .collect();
            panic!("{e}\njob status: {job:?}\npods (name, phase, deleting): {pods:?}");
        }
    };
    assert_eq!(status.retry_count, 1, "one restart, then maxRetry stops it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_task_completes_the_job() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    let spec = json!({
        "minAvailable": 3,
        "tasks": [
            {"name": "driver", "replicas": 1, "template": template(json!({"sim.drover.dev/duration": "0.5"})),
             "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}]},
            {"name": "worker", "replicas": 2, "template": template(json!({}))}
        ]
    });
    jobs.create(&PostParams::default(), &job(spec, "driven")).await.expect("job created");
    let logs = cluster.logs().display().to_string();
    eventually(60, &format!("the job completes when its driver does (logs in {logs})"), || async {
        let status = jobs.get("driven").await.ok()?.status?;
        (status.state == JobState::Completed).then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    eventually(30, "the workers are stopped", || async {
        let list = pods.list(&ListParams::default().labels("batch.drover.dev/job-name=driven")).await.ok()?;
        let running = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_cycle_is_reported_and_other_work_runs() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let queues: Api<Queue> = Api::all(cluster.client.clone());
    for (name, parent) in [("loop-a", "loop-b"), ("loop-b", "loop-a")] {
        let queue: Queue = serde_json::from_value(json!({
            "apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": name}, "spec": {"parent": parent}
        }))
        .expect("queue manifest");
        queues.create(&PostParams::default(), &queue).await.expect("queue created");
    }
    for name in ["loop-a", "loop-b"] {
        eventually(30, &format!("{name} is reported as part of a cycle"), || async {
            let status = queues.get(name).await.ok()?.status?;
            let valid = status.conditions.iter().find(|c| c.type_ == "Valid")?;
            (valid.status == "False" && valid.reason == "QueueCycle").then_some(())
        })
        .await;
    }
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    let spec = json!({"tasks": [{"name": "worker", "replicas": 2, "template": template(json!({"sim.drover.dev/duration": "0.3"}))}]});
    jobs.create(&PostParams::default(), &job(spec, "unaffected")).await.expect("job created");
    eventually(60, "a job in the default queue still completes", || async {
        let status = jobs.get("unaffected").await.ok()?.status?;
        (status.state == JobState::Completed).then_some(())
    })
    .await;
}
