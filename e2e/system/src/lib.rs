//! Harness for end-to-end tests: a real control plane (etcd, kube-apiserver and
//! kube-controller-manager from drover-envtest, behind its fault proxy), a fake kubelet with
//! GPU nodes, Drover's CRDs, and the real `drover controllers` and `drover scheduler`
//! processes from the workspace's target folder. Everything stops on drop.
//!
//! Without the control-plane binaries [`Cluster::start`] returns `None` after saying the test
//! is skipped (a failure in CI, see drover-envtest).

pub mod chart;
pub mod flood;
mod replica;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};
use drover_envtest::{Faults, Options, Server};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, ListParams};
use kube::Client;
use tokio::sync::oneshot;

/// Each fake node's resources.
pub const NODE_ALLOCATABLE: [(&str, &str); 4] =
    [("cpu", "64"), ("memory", "512Gi"), ("nvidia.com/gpu", "8"), ("pods", "110")];

/// A running cluster: the control plane, the fake kubelet and Drover's processes.
pub struct Cluster {
    server: Server,
    processes: Vec<Child>,
    kubelet_stop: Option<oneshot::Sender<()>>,
    /// An admin client (through the fault proxy).
    pub client: Client,
}

/// The folder holding the workspace's built binaries (the test binary lives in `deps/` below it).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// The path of a workspace binary, or an error saying how to build it.
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir().join(name);
    if !path.exists() {
        bail!("{} is not built: run `cargo build --release` (the workspace test run builds it)", path.display());
    }
    Ok(path)
}

impl Cluster {
    /// Starts the control plane, `nodes` fake nodes of 8 GPUs and the CRDs, then
    /// `drover controllers` and `drover scheduler`. `None`: skipped (no control plane).
    pub async fn start(nodes: u32) -> Option<Cluster> {
        let mut cluster = Self::start_without_drover(nodes, Options::default()).await?;
        cluster.guard_charges().await;
        cluster.spawn_drover("controllers", &[]).expect("drover controllers starts");
        cluster.spawn_drover("scheduler", &["--period", "0.2"]).expect("drover scheduler starts");
        Some(cluster)
    }

    /// The cluster without Drover's processes (a test starts them itself), with what
    /// `options` adds to the control plane (kube-controller-manager always runs).
    pub async fn start_without_drover(nodes: u32, options: Options) -> Option<Cluster> {
        let options = Options { controller_manager: true, ..options };
        let server = Server::start_with(&options).await?;
        let client = server.client();
        let mut cluster = Cluster { server, processes: Vec::new(), kubelet_stop: None, client };
        cluster
            .prepare(nodes)
            .await
            .unwrap_or_else(|e| panic!("preparing the cluster: {e:#}; logs in {}", cluster.logs().display()));
        Some(cluster)
    }

    async fn prepare(&mut self, nodes: u32) -> anyhow::Result<()> {
        drover_envtest::install_crds(&self.client, &drover_api::crd::all()).await.context("installing the CRDs")?;
        let config = drover_kubelet::KubeletConfig {
            nodes,
            name_prefix: "node-".into(),
            allocatable: NODE_ALLOCATABLE.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            labels: BTreeMap::new(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        self.kubelet_stop = Some(stop);
        let client = self.client.clone();
        tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = drover_kubelet::run(client, config, shutdown).await {
                eprintln!("fake kubelet failed: {e:#}");
            }
        });
        let node_api: Api<Node> = Api::all(self.client.clone());
        let untainted = |n: &Node| n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none_or(|t| t.is_empty());
        let ready = eventually_result(60, "fake nodes registered, Ready and untainted", || async {
            let list = node_api.list(&ListParams::default()).await.ok()?;
            (list.items.len() == nodes as usize && list.items.iter().all(untainted)).then_some(())
        })
        .await;
        ready?;
        // Pods need the namespace's `default` ServiceAccount (made by kube-controller-manager).
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), "default");
        eventually_result(30, "the default ServiceAccount", || async {
            accounts.get_opt("default").await.ok()?.map(|_| ())
        })
        .await
    }

    /// Installs the charge guard as the chart ships it, without which the scheduler schedules
    /// nothing: for tests that run the binaries without the chart.
    pub async fn guard_charges(&self) {
        drover_k8s::charge::install_guard(&self.client, "drover-e2e").await.expect("the charge guard is accepted");
    }

    /// Starts `drover <command>` through the fault proxy as admin, logging to `<command>-N.log`.
    pub fn spawn_drover(&mut self, command: &str, extra: &[&str]) -> anyhow::Result<()> {
        let log = self.logs().join(format!("{command}-{}.log", self.processes.len()));
        let child = self
            .drover_command(command, &log)?
            .args(extra)
            .spawn()
            .with_context(|| format!("starting drover {command}"))?;
        self.processes.push(child);
        Ok(())
    }

    /// A `drover <command>` ready to spawn against this cluster (admin, through the proxy),
    /// with the harness's flags, its stderr going to `log` (at the level `DROVER_E2E_LOG` names,
    /// `info` by default).
    pub fn drover_command(&self, command: &str, log: &Path) -> anyhow::Result<Command> {
        let mut cmd = Command::new(binary("drover")?);
        cmd.arg(command)
            .args(["--metrics-addr", "127.0.0.1:0", "--lease-namespace", "default"])
            .env("KUBECONFIG", self.server.kubeconfig())
            .env("RUST_LOG", std::env::var("DROVER_E2E_LOG").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?);
        Ok(cmd)
    }

    /// The faults the proxy between Drover and the API server injects.
    pub fn faults(&self) -> Faults {
        self.server.faults()
    }

    /// An API server outage: kube-apiserver is killed and started again (etcd kept).
    pub async fn restart_apiserver(&mut self) -> anyhow::Result<()> {
        self.server.restart().await
    }

    /// The control plane (for kube-scheduler, direct clients, certificates).
    pub fn server_mut(&mut self) -> &mut Server {
        &mut self.server
    }

    /// The control plane.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Where the processes' logs are, for failure messages.
    pub fn logs(&self) -> &Path {
        self.server.plane().dir()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.processes.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(stop) = self.kubelet_stop.take() {
            let _ = stop.send(());
        }
    }
}

pub use drover_envtest::{eventually, eventually_result};
pub use replica::{lease_holder, Replica};

/// Creates an object from its JSON manifest, failing the test if the API server refuses it:
/// the tests that drive the real binaries build their objects this way.
pub async fn create<K>(api: &Api<K>, manifest: serde_json::Value) -> K
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize,
{
    let object: K = serde_json::from_value(manifest).expect("manifest parses");
    api.create(&kube::api::PostParams::default(), &object).await.expect("object created")
}
