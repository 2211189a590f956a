//! `drover scheduler` and `drover controllers`: the Kubernetes-facing processes. Each elects a
//! leader with a Lease (so 2+ replicas can run), serves `/metrics`, `/healthz` and `/readyz`,
//! and stops cleanly on SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use drover_k8s::leader::{self, LeaderConfig, LeaderStatus};
use drover_k8s::metrics::{self, Health, Metrics};
use drover_k8s::scheduler::{self, SchedulerOptions};
use futures::future::{FutureExt, Shared};

/// Options both processes share.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Elect a leader with a coordination.k8s.io Lease (turn off only for a single replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "drover-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (default: hostname and process id).
    #[arg(long)]
    pub identity: Option<String>,
}

/// Options of `drover scheduler`.
#[derive(clap::Args, Debug, Clone)]
pub struct SchedulerArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Address of the /metrics, /healthz and /readyz endpoint (the controllers default to
    /// the next port, so both run side by side on one machine).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Scheduler configuration file (default: the bundled config/scheduler.yaml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Pods with this `spec.schedulerName` are Drover's.
    #[arg(long, default_value = drover_api::labels::SCHEDULER_NAME)]
    scheduler_name: String,
    /// Seconds between scheduling cycles (a cycle also starts at once when new work arrives).
    #[arg(long, default_value_t = 1.0)]
    period: f64,
    /// Gangs bound at once: half of this; each gang's bindings, and evictions, up to this many at once.
    #[arg(long, default_value_t = 128)]
    bind_concurrency: usize,
}

/// Options of `drover controllers`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Address of the /metrics, /healthz and /readyz endpoint (the scheduler defaults to 8080).
    #[arg(long, default_value = "0.0.0.0:8081")]
    metrics_addr: SocketAddr,
}

type Stop = Shared<futures::future::BoxFuture<'static, ()>>;

/// Completes on SIGTERM or Ctrl-C.
fn termination() -> Stop {
    async {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler can be installed");
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
    }
    .boxed()
    .shared()
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Starts leader election (or a fixed "always leader" status without it) and mirrors the
/// status into the `drover_leader` gauge.
fn elect(client: &kube::Client, common: &CommonArgs, component: &str, metrics: &Arc<Metrics>) -> Election {
    if !common.leader_elect {
        metrics.set_leader(component, true);
        return Election { handle: None, status: None };
    }
    let mut config = LeaderConfig::new(format!("drover-{component}"), common.lease_namespace.clone());
    if let Some(identity) = &common.identity {
        config.identity = identity.clone();
    }
    let handle = leader::spawn(client.clone(), config);
    let mut changes = handle.subscribe();
    let (metrics, component) = (metrics.clone(), component.to_string());
    tokio::spawn(async move {
        loop {
            let leading = *changes.borrow_and_update();
            metrics.set_leader(&component, leading);
            tracing::info!(component, leading, "leadership");
            if changes.changed().await.is_err() {
                break;
            }
        }
    });
    let status = handle.status();
    Election { handle: Some(handle), status: Some(status) }
}

struct Election {
    handle: Option<leader::LeaderHandle>,
    status: Option<LeaderStatus>,
}

impl Election {
    fn is_leader(&self) -> impl Fn() -> bool + Send + Sync + Clone + 'static {
        let status = self.status.clone();
        move || status.as_ref().is_none_or(LeaderStatus::is_leader)
    }

    async fn stop(self) {
        if let Some(handle) = self.handle {
            handle.stop().await;
        }
    }
}

/// Runs `drover scheduler` until SIGTERM.
pub async fn scheduler(args: SchedulerArgs) -> anyhow::Result<()> {
    init_logging();
    let config = crate::scheduler_config(args.config.as_deref()).map_err(anyhow::Error::msg)?;
    let client = kube::Client::try_default().await.context("connecting to Kubernetes")?;
    let metrics = Arc::new(Metrics::new());
    let health = Health::new();
    let endpoint = metrics::serve(args.metrics_addr, metrics.clone(), health.clone()).await?;
    let election = elect(&client, &args.common, "scheduler", &metrics);
    let options = SchedulerOptions {
        scheduler_name: args.scheduler_name,
        period: Duration::from_secs_f64(args.period.max(0.01)),
        config,
        bind_concurrency: args.bind_concurrency,
    };
    health.set_ready(true);
    let result = scheduler::run(client, options, election.is_leader(), metrics, termination()).await;
    election.stop().await;
    endpoint.stop().await;
    result
}

/// Runs `drover controllers` until SIGTERM: all controllers while this replica leads.
pub async fn controllers(args: ControllerArgs) -> anyhow::Result<()> {
    init_logging();
    let client = kube::Client::try_default().await.context("connecting to Kubernetes")?;
    let metrics = Arc::new(Metrics::new());
    let health = Health::new();
    let endpoint = metrics::serve(args.metrics_addr, metrics.clone(), health.clone()).await?;
    let election = elect(&client, &args.common, "controllers", &metrics);
    let is_leader = election.is_leader();
    let stop = termination();
    health.set_ready(true);
    loop {
        tokio::select! {
            _ = stop.clone() => break,
            _ = until(is_leader.clone(), true) => {}
        }
        let term = {
            let (stop, is_leader) = (stop.clone(), is_leader.clone());
            async move {
                tokio::select! {
                    _ = stop => {}
                    _ = until(is_leader, false) => {}
                }
            }
            .boxed()
            .shared()
        };
        tracing::info!("leading: starting the controllers");
        let all = futures::future::try_join(
            futures::future::try_join5(
                drover_controllers::job::run(client.clone(), term.clone()),
                drover_controllers::queues::run_queue_tree(client.clone(), term.clone()),
                drover_controllers::queues::run_pod_groups(client.clone(), term.clone()),
                drover_controllers::queues::run_queue_status(client.clone(), term.clone()),
                drover_controllers::topology::run_topology_status(client.clone(), term.clone()),
            ),
            drover_controllers::gangs::workload_status::run_workload_status(client.clone(), term.clone()),
        );
        if let Err(e) = all.await {
            tracing::error!(error = %e, "a controller stopped with an error");
        }
        if stop.clone().now_or_never().is_some() {
            break;
        }
    }
    election.stop().await;
    endpoint.stop().await;
    Ok(())
}

/// Completes once `is_leader()` equals `want` (polled; leadership changes are rare).
async fn until(is_leader: impl Fn() -> bool + Send + 'static, want: bool) {
    while is_leader() != want {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
