//! What the command-line tests against the real kube-apiserver share: running the `drover`
//! binary on a kubeconfig, and creating the nodes, namespaces and queues they start from.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use drover_api::crd::queue::{Queue, QueueSpec};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

/// Runs `drover` with `args` on `kubeconfig` (and not on `$KUBECONFIG`).
pub fn drover(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("the drover binary runs")
}

/// What a run that must succeed printed.
pub fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// `v` GPUs, as a resource list.
pub fn gpus(v: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([("nvidia.com/gpu".to_string(), Quantity(v.into()))])
}

/// Creates a queue deserving `deserved` GPUs, under `parent` and capped at `limit` when given.
pub async fn queue(client: &Client, name: &str, parent: Option<&str>, deserved: &str, limit: Option<&str>) {
    let api: Api<Queue> = Api::all(client.clone());
    let spec = QueueSpec {
        parent: parent.map(String::from),
        deserved: gpus(deserved),
        limit: limit.map(gpus),
        over_quota_weight: 1,
        reclaimable: true,
        ..QueueSpec::default()
    };
    api.create(&PostParams::default(), &Queue::new(name, spec)).await.unwrap();
}

/// A node with 8 GPUs, as a kubelet registers it.
pub async fn node(client: &Client, name: &str) {
    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &node).await.unwrap();
    let status =
        json!({"status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

/// Creates the namespace `name`.
pub async fn namespace(client: &Client, name: &str) {
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}
