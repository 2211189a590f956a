//! `drover-playground`: a throwaway Kubernetes cluster on this machine to try Drover on — the
//! real control plane (etcd, kube-apiserver, kube-controller-manager from `KUBEBUILDER_ASSETS`
//! or `../shared/envtest`) and a fake kubelet with GPU nodes. Writes an admin kubeconfig and
//! runs until Ctrl-C or SIGTERM; then everything it started stops and its files are removed,
//! the kubeconfig included.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use drover_envtest::{Options, Server};
use drover_kubelet::flags;

/// A local cluster with fake GPU nodes, for trying Drover with kubectl.
#[derive(Parser, Debug)]
struct Args {
    /// Where to write the admin kubeconfig.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Number of fake nodes.
    #[arg(long, default_value_t = 4)]
    nodes: u32,
    /// Each node's resources, `name=quantity` separated by commas.
    #[arg(long, value_name = "RESOURCES", default_value = "cpu=32,memory=256Gi,nvidia.com/gpu=8", value_parser = flags::parse_allocatable)]
    node_allocatable: BTreeMap<String, String>,
    /// Labels of every node, `key=value` separated by commas, e.g. `drover.dev/node-pool=a100`
    /// (the node pool that Departments, Projects and node selectors name).
    #[arg(long, value_name = "LABELS", default_value = "", value_parser = flags::parse_labels)]
    node_labels: BTreeMap<String, String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The client's own errors while the API server starts are expected: not shown by default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kube_client=off"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let args = Args::parse();
    let options = Options { controller_manager: true, ..Options::default() };
    let Some(server) = Server::start_with(&options).await else {
        anyhow::bail!("no control-plane binaries: set KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver")
    };
    let plane = server.plane();
    std::fs::copy(plane.admin_kubeconfig(), &args.kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;
    let client = plane.direct_client(&drover_envtest::Credentials::Token(plane.admin_token())).await?;
    let config = drover_kubelet::KubeletConfig {
        nodes: args.nodes,
        name_prefix: "node-".into(),
        allocatable: args.node_allocatable,
        labels: args.node_labels,
    };
    println!(
        "API server {} with {} fake nodes; kubeconfig {}; Ctrl-C stops it",
        plane.url(),
        args.nodes,
        args.kubeconfig.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    drover_kubelet::run(client, config, async {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    })
    .await?;
    drop(server);
    // The kubeconfig names a server that is gone now.
    std::fs::remove_file(&args.kubeconfig).with_context(|| format!("removing {}", args.kubeconfig.display()))?;
    Ok(())
}
