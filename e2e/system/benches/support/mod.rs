//! What the real-API benches share: a fresh control plane with fake GPU nodes, pods, and
//! child processes that die with the bench.

use std::collections::HashSet;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use drover_envtest::{Credentials, Server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

/// The GPU resource every bench pod asks for.
pub const GPU: &str = "nvidia.com/gpu";
/// The namespace of every bench pod and group.
pub const NS: &str = "default";

/// A one-GPU pod for `scheduler`, a member of `group` when given.
pub fn pod(name: &str, scheduler: &str, group: Option<&str>) -> Pod {
    let annotations = group.map(|g| json!({"scheduling.drover.dev/pod-group": g})).unwrap_or(json!({}));
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "app",
            "resources": {"requests": {GPU: "1", "cpu": "100m"}, "limits": {GPU: "1"}}}]}
    }))
    .expect("pod json")
}

/// Creates `objects` in `api`, 64 requests in flight.
pub async fn create_all<K>(api: &Api<K>, objects: Vec<K>) -> anyhow::Result<()>
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh control plane with the fake kubelet's nodes ready: each scheduler is measured on
/// one of its own, so neither inherits the other's deleted pods, Events and etcd history.
pub struct Bed {
    /// The control plane.
    pub server: Server,
    /// An admin client talking to the API server directly.
    pub client: Client,
    /// The admin kubeconfig, for child processes.
    pub kubeconfig: std::path::PathBuf,
    kubelet: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.kubelet.abort();
    }
}

impl Bed {
    /// A log file's path in the control plane's folder (kept with `keep_files`).
    pub fn log_path(&self, name: &str) -> std::path::PathBuf {
        self.server.plane().dir().join(name)
    }
}

/// Starts a control plane with Drover's CRDs and `nodes` fake nodes of 8 GPUs, and waits
/// until every node is ready (untainted). `None`: no control-plane binaries (skipped).
pub async fn bed(nodes: u32) -> anyhow::Result<Option<Bed>> {
    let Some(server) = Server::start().await else { return Ok(None) };
    let plane = server.plane();
    let client = plane.direct_client(&Credentials::Token(plane.admin_token())).await?;
    let kubeconfig = plane.admin_kubeconfig();
    drover_envtest::install_crds(&client, &drover_api::crd::all()).await?;
    drover_k8s::charge::install_guard(&client, "drover-bench").await?;
    let config = drover_kubelet::KubeletConfig {
        nodes,
        name_prefix: "node-".into(),
        allocatable: [("cpu", "64"), ("memory", "512Gi"), (GPU, "8"), ("pods", "110")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        labels: Default::default(),
    };
    let kubelet_client = client.clone();
    let kubelet =
        tokio::spawn(async move { drover_kubelet::run(kubelet_client, config, std::future::pending()).await });
    let api: Api<Node> = Api::all(client.clone());
    let ready = Instant::now();
    loop {
        let list = api.list(&ListParams::default()).await?.items;
        let untainted = list
            .iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none_or(|t| t.is_empty()))
            .count();
        if untainted == nodes as usize {
            break;
        }
        if ready.elapsed() > Duration::from_secs(600) {
            bail!("only {untainted} of {nodes} nodes ready after 10 minutes");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("{nodes} nodes x 8 GPUs ready in {:.1} s", ready.elapsed().as_secs_f64());
    Ok(Some(Bed { server, client, kubeconfig, kubelet }))
}

/// A watch of the pods of `NS`.
pub type PodEvents =
    futures::stream::BoxStream<'static, kube::runtime::watcher::Result<kube::runtime::watcher::Event<Pod>>>;

/// A watch of the pods of `NS`, its initial list consumed (so that a scheduler started after
/// it is seen from its first binding).
pub async fn pod_watch(client: &Client) -> anyhow::Result<PodEvents> {
    use kube::runtime::watcher;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.try_next().await? {
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    Ok(stream)
}

/// Waits for the next pod the watch shows bound that `bound` does not hold yet, and adds it;
/// an error if none comes within `stall`.
pub async fn next_binding(stream: &mut PodEvents, bound: &mut HashSet<String>, stall: Duration) -> anyhow::Result<()> {
    use kube::runtime::watcher;
    loop {
        let event = tokio::time::timeout(stall, stream.try_next())
            .await
            .with_context(|| format!("no binding for {stall:?} at {} bound", bound.len()))??;
        let Some(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else { continue };
        if node_of(&p).is_some() && bound.insert(p.metadata.name.unwrap_or_default()) {
            return Ok(());
        }
    }
}

/// The pod's node, if bound.
pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}
