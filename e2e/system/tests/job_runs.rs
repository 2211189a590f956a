//! A Drover Job submitted to a real API server runs end to end through the real binaries: the
//! controllers make its pods and PodGroup, the scheduler binds the gang, the fake kubelet runs
//! and completes the pods, and the Job ends Completed.

use drover_api::crd::job::{Job, JobState};
use drover_e2e::{eventually, Cluster};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};

const JOB: &str = r#"{
  "apiVersion": "batch.drover.dev/v1alpha1",
  "kind": "Job",
  "metadata": {"name": "train", "namespace": "default"},
  "spec": {
    "minAvailable": 4,
    "tasks": [{
      "name": "worker",
      "replicas": 4,
      "template": {
        "metadata": {"annotations": {"sim.drover.dev/duration": "1"}},
        "spec": {"containers": [{"name": "main", "image": "trainer",
          "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}}]}
      }
    }]
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_job_runs_to_completion() {
    let Some(cluster) = Cluster::start(2).await else { return };
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    let job: Job = serde_json::from_str(JOB).expect("job manifest");
    jobs.create(&PostParams::default(), &job).await.expect("job created");

    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let logs = cluster.logs().display().to_string();
    eventually(60, &format!("4 pods bound (logs in {logs})"), || async {
        let list = pods.list(&ListParams::default().labels("batch.drover.dev/job-name=train")).await.ok()?;
        let bound = list.items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
        (list.items.len() == 4 && bound == 4).then_some(())
    })
    .await;
    eventually(60, &format!("the job completes (logs in {logs})"), || async {
        let job = jobs.get("train").await.ok()?;
        (job.status?.state == JobState::Completed).then_some(())
    })
    .await;
}
