//! A Kubernetes API emulator for hermetic end-to-end tests and a local playground.
//!
//! It serves, over plain HTTP on loopback, the subset of the Kubernetes API that Drover and
//! kubectl use, faithfully or not at all (a request outside the subset gets a clear error).
//! A fake kubelet registers nodes and runs bound pods. See `docs/apiserver.md` for exactly
//! what is emulated. Drover itself targets real Kubernetes and must not depend on anything
//! only this emulator does.
//!
//! Start it in-process with [`start`]; the returned [`ServerHandle`] gives a kube-rs client,
//! fault injection, restart and stop.


pub mod validation;

mod crd;
mod discovery;
pub mod error;
mod faults;
mod kubeconfig;
mod meta;
mod openapi;
mod ops;
mod patch;
mod persist;
mod registry;
mod selectors;
mod server;
mod smp;
mod store;
mod strategy;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use faults::Faults;
use server::Shared;
use store::Store;

/// How the server is started.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port. Must be a loopback address.
    pub listen: SocketAddr,
    /// State loaded at start (if the file exists) and saved on stop.
    pub state_file: Option<PathBuf>,
    /// Where to write a kubeconfig once the server is ready.
    pub kubeconfig: Option<PathBuf>,
    /// Events kept for watch resume; a watch from an older resourceVersion gets 410 Gone.
    pub watch_history: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            state_file: None,
            kubeconfig: None,
            watch_history: 10_000,
        }
    }
}

struct Serving {
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// A running server. Dropping it without [`ServerHandle::stop`] leaves the serving task
/// running until the runtime ends.
pub struct ServerHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    client: kube::Client,
    serving: Option<Serving>,
}

/// Namespaces a fresh cluster has.
const INITIAL_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates what a fresh real cluster has: the standard namespaces and the two system
/// PriorityClasses. Objects already present (from a state file) are kept.
fn seed(store: &mut Store) -> anyhow::Result<()> {
    let ns_rt = store.registry.find("", "v1", "namespaces").context("namespaces type missing")?;
    for ns in INITIAL_NAMESPACES {
        if store.get("namespaces", "", ns).is_none() {
            ops::create(store, &ns_rt, "", json!({"metadata": {"name": ns}}), false)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    let pc_rt =
        store.registry.find("scheduling.k8s.io", "v1", "priorityclasses").context("priorityclasses type missing")?;
    for (name, value) in [("system-cluster-critical", 2_000_000_000), ("system-node-critical", 2_000_001_000)] {
        if store.get(&pc_rt.storage_key(), "", name).is_none() {
            let pc = json!({
                "metadata": {"name": name},
                "value": value,
                "description": "Used for system critical pods that must not be moved from their current node.",
            });
            ops::create(store, &pc_rt, "", pc, false).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    Ok(())
}

fn serve(shared: Arc<Shared>, listener: TcpListener) -> Serving {
    let (tx, rx) = oneshot::channel::<()>();
    let app = server::router(shared);
    let task = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "server stopped with an error");
        }
    });
    Serving { shutdown: tx, task }
}

/// Starts the server and returns once it accepts connections.
pub async fn start(config: ServerConfig) -> anyhow::Result<ServerHandle> {
    if !config.listen.ip().is_loopback() {
        anyhow::bail!("refusing to listen on {}: the emulator serves loopback addresses only", config.listen);
    }
    let mut store = Store::new(config.watch_history);
    if let Some(path) = config.state_file.as_deref().filter(|p| p.exists()) {
        persist::load(&mut store, path)?;
    }
    seed(&mut store)?;
    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let shared =
        Arc::new(Shared { store: Mutex::new(store), faults: Faults::default(), state_file: config.state_file });
    let url = format!("http://{addr}");
    let kube_config = kube::Config::new(url.parse().with_context(|| format!("parsing {url}"))?);
    let client = kube::Client::try_from(kube_config).context("building the kube client")?;
    let handle = ServerHandle { serving: Some(serve(shared.clone(), listener)), shared, addr, client };
    if let Some(path) = &config.kubeconfig {
        handle.write_kubeconfig(path)?;
    }
    tracing::info!(%url, "drover-apiserver serving");
    Ok(handle)
}

impl ServerHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube-rs client for this server (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The fault switches (cheap clone).
    pub fn faults(&self) -> Faults {
        self.shared.faults.clone()
    }

    /// Writes a kubeconfig for this server.
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        kubeconfig::write(path, &self.url())
    }

    /// Saves the state file now (no-op without one).
    pub async fn persist(&self) -> anyhow::Result<()> {
        match &self.shared.state_file {
            Some(path) => persist::save(&self.shared, path).await,
            None => Ok(()),
        }
    }

    async fn stop_serving(&mut self) {
        let Some(serving) = self.serving.take() else { return };
        let _ = serving.shutdown.send(());
        self.shared.faults.drop_watches();
        let abort = serving.task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(5), serving.task).await.is_err() {
            tracing::warn!("open requests did not finish within 5s; aborting them");
            abort.abort();
        }
    }

    /// Stops serving gracefully (open watches end) and saves the state file if configured.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stop_serving().await;
        self.persist().await
    }

    /// Stops serving and serves again on the same port with the same state, as a real API
    /// server restart would (watches end; the event history is kept, like etcd's).
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop_serving().await;
        self.persist().await?;
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    tracing::debug!(error = %e, "rebinding after restart");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("rebinding {} on restart", self.addr)),
            }
        };
        self.serving = Some(serve(self.shared.clone(), listener));
        tracing::info!(url = %self.url(), "drover-apiserver restarted");
        Ok(())
    }
}
