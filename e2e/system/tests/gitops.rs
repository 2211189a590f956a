//! GitOps: the samples in `config/samples/`, applied with the real kubectl while Drover's
//! controllers and scheduler run, show no drift afterwards (`kubectl diff --server-side`
//! finds nothing to change: the controllers write only status and fields they own), and a
//! second apply changes no object's spec. Without kubectl the test prints SKIPPED;
//! `DROVER_REQUIRE_KUBECTL` (set in CI) forbids that.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use drover_api::crd::job::Job;
use drover_e2e::{eventually, Cluster};
use kube::api::{Api, ListParams};

fn samples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/samples")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl runs")
}

/// Every Job's generation: it moves only when the spec changes.
async fn generations(jobs: &Api<Job>) -> Vec<(String, Option<i64>)> {
    let mut list: Vec<_> = jobs
        .list(&ListParams::default())
        .await
        .expect("jobs listed")
        .items
        .into_iter()
        .map(|j| (j.metadata.name.unwrap_or_default(), j.metadata.generation))
        .collect();
    list.sort();
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_samples_show_no_drift_after_the_controllers_reconcile() {
    if !drover_envtest::tools::kubectl_available() {
        return;
    }
    let Some(cluster) = Cluster::start(2).await else { return };
    let kubeconfig = cluster.server().kubeconfig();
    let logs = cluster.logs().display().to_string();
    let dir = samples().display().to_string();
    let first = kubectl(&kubeconfig, &["apply", "--server-side", "-f", &dir]);
    assert!(first.status.success(), "first apply: {}", String::from_utf8_lossy(&first.stderr));

    let jobs: Api<Job> = Api::all(cluster.client.clone());
    eventually(60, &format!("the controllers reconcile every sample Job (logs in {logs})"), || async {
        let list = jobs.list(&ListParams::default()).await.ok()?.items;
        (!list.is_empty() && list.iter().all(|j| j.status.is_some())).then_some(())
    })
    .await;
    let before = generations(&jobs).await;

    let diff = kubectl(&kubeconfig, &["diff", "--server-side", "-f", &dir]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "kubectl diff after reconciling:\n{}{}",
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );
    let second = kubectl(&kubeconfig, &["apply", "--server-side", "-f", &dir]);
    assert!(second.status.success(), "second apply: {}", String::from_utf8_lossy(&second.stderr));
    assert_eq!(generations(&jobs).await, before, "the second apply changed a Job's spec");
}
