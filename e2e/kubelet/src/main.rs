//! `drover-kubelet`: the fake kubelet as a process, against any API server. It registers the
//! nodes and runs the pods bound to them until SIGTERM or Ctrl-C, then exits 0.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use drover_kubelet::{flags, KubeletConfig, MAX_NODES};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::signal::unix::{signal, SignalKind};

/// A fake kubelet: registers GPU nodes and "runs" the pods bound to them for their simulated
/// time (annotation `sim.drover.dev/duration`), through the Kubernetes API.
#[derive(Parser, Debug)]
#[command(name = "drover-kubelet", version)]
struct Args {
    /// The kubeconfig to use; without it, KUBECONFIG, ~/.kube/config or the in-cluster
    /// service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// How many nodes to register.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_NODES)))]
    nodes: u32,
    /// Node names are `<prefix><index>`.
    #[arg(long, value_name = "PREFIX", default_value = "node-", value_parser = flags::parse_name_prefix)]
    name_prefix: String,
    /// Capacity and allocatable of every node, `name=quantity,...` (`pods` is 110 unless given).
    #[arg(long, value_name = "RESOURCES", default_value = "cpu=32,memory=256Gi,nvidia.com/gpu=8", value_parser = flags::parse_allocatable)]
    node_allocatable: BTreeMap<String, String>,
    /// Labels of every node, `key=value,...`.
    #[arg(long, value_name = "LABELS", default_value = "", value_parser = flags::parse_labels)]
    node_labels: BTreeMap<String, String>,
}

/// A client from `--kubeconfig`, else from the usual places.
async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).with_context(|| format!("--kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => Config::infer().await.context(
            "no --kubeconfig given, and neither KUBECONFIG, ~/.kube/config nor an in-cluster service account works",
        )?,
    };
    let url = config.cluster_url.clone();
    let client = Client::try_from(config)?;
    client.apiserver_version().await.with_context(|| format!("cannot reach the API server at {url}"))?;
    Ok(client)
}

/// Completes on SIGTERM or Ctrl-C.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
    let mut terminate = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("stopping");
    })
}

async fn run(args: Args) -> anyhow::Result<()> {
    // A signal while the API server is still being reached stops the process cleanly too.
    let shutdown = shutdown_signal()?;
    tokio::pin!(shutdown);
    let client = tokio::select! {
        client = client(args.kubeconfig.as_deref()) => client?,
        () = &mut shutdown => return Ok(()),
    };
    let config = KubeletConfig {
        nodes: args.nodes,
        name_prefix: args.name_prefix,
        allocatable: args.node_allocatable,
        labels: args.node_labels,
    };
    drover_kubelet::run(client, config, shutdown).await
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("drover-kubelet: {error:#}");
            ExitCode::FAILURE
        }
    }
}
