//! `drover-apiserver`: the Kubernetes API emulator as a process, optionally with the fake
//! kubelet in-process. Stops cleanly (saving the state file) on SIGTERM or Ctrl-C.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use drover_kubelet::{self as kubelet, KubeletConfig};
use drover_apiserver::{start, ServerConfig};
use tokio::sync::watch;

/// A Kubernetes API emulator for hermetic tests (plain HTTP, loopback only). Not a real cluster:
/// see docs/apiserver.md.
#[derive(Parser, Debug)]
#[command(name = "drover-apiserver", version)]
struct Args {
    /// Address to listen on (loopback only; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write a kubeconfig for the server here once it is ready.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Load state from this file at start (if it exists) and save it on stop.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// Watch events kept for resume; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    watch_history: usize,
    /// Number of fake kubelet nodes (0 = no fake kubelet).
    #[arg(long, default_value_t = 0)]
    nodes: u32,
    /// Allocatable resources of every fake node, `name=quantity,...`.
    #[arg(long, default_value = "cpu=32,memory=256Gi,pods=110")]
    node_allocatable: String,
    /// Labels of every fake node, `key=value,...`.
    #[arg(long, default_value = "")]
    node_labels: String,
    /// Fake node names are `<prefix><index>`.
    #[arg(long, default_value = "node-")]
    node_name_prefix: String,
}

/// Parses `k=v,k2=v2` (empty string = empty map).
fn parse_pairs(flag: &str, s: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            bail!("--{flag}: expected key=value, got {part:?}");
        };
        if k.trim().is_empty() {
            bail!("--{flag}: empty key in {part:?}");
        }
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if !args.listen.ip().is_loopback() {
        bail!("--listen {}: the emulator serves plain HTTP and listens on loopback addresses only", args.listen);
    }
    let kubelet_config = KubeletConfig {
        nodes: args.nodes,
        name_prefix: args.node_name_prefix.clone(),
        allocatable: parse_pairs("node-allocatable", &args.node_allocatable)?,
        labels: parse_pairs("node-labels", &args.node_labels)?,
    };
    let server = start(ServerConfig {
        listen: args.listen,
        state_file: args.state_file,
        kubeconfig: args.kubeconfig,
        watch_history: args.watch_history,
    })
    .await?;
    println!("drover-apiserver listening on {}", server.url());

    let (stop_tx, stop_rx) = watch::channel(false);
    let kubelet_task = (args.nodes > 0).then(|| {
        let client = server.client();
        let mut rx = stop_rx.clone();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.wait_for(|stop| *stop).await;
            };
            kubelet::run(client, kubelet_config, shutdown).await
        })
    });

    let signal = shutdown_signal();
    tokio::pin!(signal);
    let kubelet_result = match kubelet_task {
        Some(mut task) => tokio::select! {
            r = &mut signal => {
                r?;
                let _ = stop_tx.send(true);
                Some(task.await)
            }
            r = &mut task => Some(r),
        },
        None => {
            signal.await?;
            None
        }
    };
    tracing::info!("stopping");
    let _ = stop_tx.send(true);
    server.stop().await?;
    match kubelet_result {
        Some(Ok(Ok(()))) | None => Ok(()),
        Some(Ok(Err(e))) => Err(e.context("fake kubelet failed")),
        Some(Err(e)) => Err(anyhow::anyhow!("fake kubelet task panicked: {e}")),
    }
}
