//! The Helm chart as the e2e tests use it: Helm actions through the Helm v4 SDK (PyPI's
//! `helm-python-sdk`) and Drover's binaries started the way the chart's Deployments start
//! them, authenticated as the chart's ServiceAccounts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, PostParams};

use crate::{binary, Cluster};

/// The namespace the tests install the release `drover` into.
pub const NAMESPACE: &str = "drover-system";

/// The label selecting the release's objects.
pub const INSTANCE: &str = "app.kubernetes.io/instance=drover";

/// The chart's folder in the repository.
pub fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/drover")
}

/// A Helm action on the release `drover` in [`NAMESPACE`].
pub enum HelmAction<'a> {
    /// `helm install`, with an optional values file.
    Install(Option<&'a Path>),
    /// `helm upgrade`, with an optional values file.
    Upgrade(Option<&'a Path>),
    /// `helm uninstall`.
    Uninstall,
}

/// Runs `action` through `kubeconfig` and waits for it (120 s at most).
pub fn helm(kubeconfig: &Path, action: HelmAction<'_>) -> anyhow::Result<()> {
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
    let (name, values) = match action {
        HelmAction::Install(v) => ("install", v),
        HelmAction::Upgrade(v) => ("upgrade", v),
        HelmAction::Uninstall => ("uninstall", None),
    };
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).arg(kubeconfig).arg(name).arg(chart_dir());
    if let Some(v) = values {
        cmd.arg(v);
    }
    let out = cmd.output().context("running python3")?;
    if !out.status.success() {
        bail!("helm {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The chart's templates rendered for the release `drover` in [`NAMESPACE`] with `values`
/// (the defaults when `None`), as Helm would install them: YAML documents separated by
/// `---`, without the CRDs of `crds/`.
pub fn render(values: Option<&Path>) -> anyhow::Result<String> {
    let script = r#"
import sys, helm_python as helm
chart = helm.Chart.load(sys.argv[1])
values = helm.values_from_yaml(open(sys.argv[2]).read()) if len(sys.argv) > 2 else None
out = chart.render(values, name="drover", namespace="drover-system", is_install=True)
for path in sorted(out):
    print("---")
    print(out[path])
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).arg(chart_dir());
    if let Some(v) = values {
        cmd.arg(v);
    }
    let out = cmd.output().context("running python3")?;
    if !out.status.success() {
        bail!("helm template failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A process killed when dropped.
pub struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary of the chart's Deployment `drover-<component>` as its ServiceAccount
/// (a token from the TokenRequest API, as `kubectl create token` gets one), with the
/// container's arguments (the metrics address made local, the configuration file taken from
/// the chart's ConfigMap) and environment; stderr goes to `log`.
pub async fn run_as_chart(cluster: &Cluster, component: &str, log: &Path) -> anyhow::Result<Running> {
    let client = cluster.client.clone();
    let name = format!("drover-{component}");
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE).get(&name).await?;
    let pod = deployment.spec.and_then(|s| s.template.spec).context("the Deployment has no pod spec")?;
    if pod.service_account_name.as_deref() != Some(name.as_str()) {
        bail!("Deployment {name} runs as {:?}, not as its own ServiceAccount", pod.service_account_name);
    }
    let container = pod.containers.first().context("the Deployment has no container")?;
    let mut args = Vec::new();
    for arg in container.args.clone().unwrap_or_default() {
        if arg.starts_with("--metrics-addr=") {
            args.push("--metrics-addr=127.0.0.1:0".to_string());
        } else if let Some(path) = arg.strip_prefix("--config=") {
            let file = Path::new(path).file_name().and_then(|f| f.to_str()).context("a config file name")?;
            let map = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE).get(&name).await?;
            let text = map.data.and_then(|d| d.get(file).cloned()).context("the configuration in the ConfigMap")?;
            let config = cluster.logs().join(format!("{component}.yaml"));
            std::fs::write(&config, text)?;
            args.push(format!("--config={}", config.display()));
        } else {
            args.push(arg);
        }
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { audiences: Some(vec![]), expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_token_request(&name, &PostParams::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .context("the TokenRequest has no token")?;
    let kubeconfig = cluster.server().kubeconfig_for_token(&name, &token)?;
    let mut cmd = Command::new(binary("drover")?);
    cmd.args(&args).env("KUBECONFIG", kubeconfig).env_remove("RUST_LOG");
    for var in container.env.clone().unwrap_or_default() {
        let value = match (var.value, var.value_from) {
            (Some(v), _) => v,
            (None, Some(from)) if from.field_ref.as_ref().is_some_and(|f| f.field_path == "metadata.namespace") => {
                NAMESPACE.to_string()
            }
            (_, from) => bail!("Deployment {name}: env {} from {from:?} is not supported here", var.name),
        };
        cmd.env(var.name, value);
    }
    let child = cmd.stdout(Stdio::null()).stderr(std::fs::File::create(log)?).spawn()?;
    Ok(Running(child))
}
