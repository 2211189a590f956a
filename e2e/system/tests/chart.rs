//! The Helm chart installed for real (the Helm v4 SDK through PyPI's `helm-python-sdk`) on the
//! real API server with RBAC on: both binaries then run as the chart's ServiceAccounts, with
//! the arguments, environment and configuration of its Deployments, and run a gang Job with no
//! request refused; `helm upgrade` to another values file and `helm uninstall` work, and
//! uninstalling leaves only the CRDs (Helm never deletes what `crds/` installed). Without
//! helm-python-sdk the test prints SKIPPED; `DROVER_REQUIRE_HELM` (set in CI) forbids that.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use drover_api::crd::job::{Job, JobState};
use drover_e2e::{binary, eventually, Cluster};
use drover_envtest::Options;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

const NAMESPACE: &str = "drover-system";
const INSTANCE: &str = "app.kubernetes.io/instance=drover";

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/drover")
}

/// Runs one Helm action (`install`, `upgrade` with an optional values file, `uninstall`) of
/// the release `drover` through `kubeconfig`.
fn helm(kubeconfig: &Path, action: &str, values: Option<&Path>) {
    let script = r#"
import sys, helm_python as helm
kubeconfig, action, chart = sys.argv[1], sys.argv[2], sys.argv[3]
values = helm.values_from_yaml(open(sys.argv[4]).read()) if len(sys.argv) > 4 else None
cfg = helm.Config(kubeconfig_path=kubeconfig, namespace="drover-system")
if action == "install":
    cfg.install(chart, "drover", values, namespace="drover-system", create_namespace=True, timeout=120)
elif action == "upgrade":
    cfg.upgrade(chart, "drover", values, namespace="drover-system", timeout=120)
else:
    cfg.uninstall("drover", timeout=120)
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).arg(kubeconfig).arg(action).arg(chart());
    if let Some(v) = values {
        cmd.arg(v);
    }
    let out = cmd.output().expect("python3 runs");
    assert!(out.status.success(), "helm {action} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary of the chart's Deployment `component` as its ServiceAccount: the
/// container's arguments (the metrics address made local, the configuration file taken
/// from the chart's ConfigMap) and environment.
async fn run_as_chart(cluster: &Cluster, client: &Client, component: &str, log: &Path) -> Running {
    let name = format!("drover-{component}");
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get(&name).await.expect("deployment");
    let pod = deployment.spec.expect("spec").template.spec.expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(name.as_str()));
    let container = &pod.containers[0];
    let config = cluster.logs().join(format!("{component}.yaml"));
    let mut args = Vec::new();
    for arg in container.args.clone().unwrap_or_default() {
        if arg.starts_with("--metrics-addr=") {
            args.push("--metrics-addr=127.0.0.1:0".to_string());
        } else if let Some(path) = arg.strip_prefix("--config=") {
            let file = Path::new(path).file_name().and_then(|f| f.to_str()).expect("a file name").to_string();
            let map = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE).get(&name).await.expect("configmap");
            let text = map.data.and_then(|d| d.get(&file).cloned()).expect("the configuration in the ConfigMap");
            std::fs::write(&config, text).expect("configuration written");
            args.push(format!("--config={}", config.display()));
        } else {
            args.push(arg);
        }
    }
    let request = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_token_request(&name, &PostParams::default(), &request)
        .await
        .expect("a token for the ServiceAccount")
        .status
        .expect("token status")
        .token;
    let kubeconfig = cluster.server().kubeconfig_for_token(&name, &token).expect("kubeconfig written");
    let mut cmd = Command::new(binary("drover").expect("drover is built"));
    cmd.args(&args).env("KUBECONFIG", kubeconfig).env_remove("RUST_LOG");
    for var in container.env.clone().unwrap_or_default() {
        let value = match (var.value, var.value_from) {
            (Some(v), _) => v,
            (None, Some(from)) if from.field_ref.as_ref().is_some_and(|f| f.field_path == "metadata.namespace") => {
                NAMESPACE.to_string()
            }
            (_, from) => panic!("unexpected env {} from {from:?}", var.name),
        };
        cmd.env(var.name, value);
    }
    let child =
        cmd.stdout(Stdio::null()).stderr(std::fs::File::create(log).expect("log file")).spawn().expect("drover starts");
    Running(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_runs_drover_as_its_service_accounts_upgrades_and_uninstalls() {
    if !drover_envtest::tools::helm_available() {
        return;
    }
    let Some(cluster) = Cluster::start_without_drover(1, Options::default()).await else { return };
    let client = cluster.client.clone();
    let kubeconfig = cluster.server().kubeconfig();
    let logs = cluster.logs().display().to_string();
    helm(&kubeconfig, "install", None);

    let scheduler_log = cluster.logs().join("chart-scheduler.log");
    let controllers_log = cluster.logs().join("chart-controllers.log");
    let processes = [
        run_as_chart(&cluster, &client, "scheduler", &scheduler_log).await,
        run_as_chart(&cluster, &client, "controllers", &controllers_log).await,
    ];
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": "gang", "namespace": "default"},
        "spec": {"minAvailable": 2, "tasks": [{"name": "worker", "replicas": 2, "template": {
            "metadata": {"annotations": {"sim.drover.dev/duration": "0.5"}},
            "spec": {"containers": [{"name": "main", "image": "trainer", "resources": {
                "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]}
    }))
    .expect("job manifest");
    jobs.create(&PostParams::default(), &job).await.expect("job created");
    eventually(90, &format!("the gang job completes under the chart's ServiceAccounts (logs in {logs})"), || async {
        let status = jobs.get("gang").await.ok()?.status?;
        (status.state == JobState::Completed).then_some(())
    })
    .await;
    drop(processes);
    for log in [&scheduler_log, &controllers_log] {
        let text = std::fs::read_to_string(log).expect("log readable");
        assert!(!text.to_lowercase().contains("forbidden"), "{} shows a refused request", log.display());
    }

    helm(&kubeconfig, "upgrade", Some(&chart().join("ci/minimal-values.yaml")));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let replicas = deployments.get("drover-scheduler").await.expect("deployment").spec.and_then(|s| s.replicas);
    assert_eq!(replicas, Some(1), "the upgrade applied the new values");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAMESPACE);
    assert!(budgets.list(&ListParams::default().labels(INSTANCE)).await.expect("listed").items.is_empty());

    helm(&kubeconfig, "uninstall", None);
    eventually(30, "the release's objects are gone", || async {
        let deployments = deployments.list(&ListParams::default().labels(INSTANCE)).await.ok()?.items.len();
        let accounts = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
            .list(&ListParams::default().labels(INSTANCE))
            .await
            .ok()?
            .items
            .len();
        let roles = Api::<ClusterRole>::all(client.clone())
            .list(&ListParams::default().labels(INSTANCE))
            .await
            .ok()?
            .items
            .len();
        (deployments == 0 && accounts == 0 && roles == 0).then_some(())
    })
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds.get_opt("jobs.batch.drover.dev").await.expect("read").is_some(), "Helm keeps the CRDs");
}
