//! Prometheus metrics of the scheduler and the controllers, and the HTTP endpoint serving
//! them with the health probes.
//!
//! [`Metrics`] holds one registry with every Drover metric family (both binaries register
//! all of them; a family a binary never records simply has no samples). [`serve`] exposes
//! `/metrics` (OpenMetrics text, which Prometheus scrapes natively), `/healthz` and
//! `/readyz`; anything else is 404.
//!
//! The families, their types and labels are listed for operators in `docs/operations.md`
//! ("Health and metrics"); a family added here is added there.
//!
//! Queue quantities are numbers: `cpu` in cores, `memory` in bytes, everything else in
//! whole units ([`resource_value`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use drover_scheduler::cycle::CycleOutcome;
use drover_scheduler::res::UNLIMITED;
use drover_scheduler::session::EvictReason;
use drover_scheduler::snapshot::Snapshot;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The pending-reason categories, in the order [`pending_reason_category`] tests them.
pub const PENDING_CATEGORIES: [&str; 9] =
    ["NotAdmitted", "Preempting", "StrictFIFO", "QueueLimit", "Quota", "FairShare", "Gang", "Unschedulable", "Other"];

/// Maps the reason a pod group waits (the scheduling core's sentence, see `docs/scheduling.md`,
/// "Why a job waits") to a short category for the `reason` label, so that the label has a
/// handful of values whatever the queue, resource and node names in the sentence:
///
/// | category | sentences |
/// | --- | --- |
/// | `NotAdmitted` | `not admitted: …`, `not admitted yet` (the enqueue action refused or has not run) |
/// | `Preempting` | `waiting for N preempted/reclaimed pod(s) to terminate`, `… evicted pods …` |
/// | `StrictFIFO` | `waiting behind NS/JOB in StrictFIFO queue Q` |
/// | `QueueLimit` | `queue Q would exceed its limit (…)` |
/// | `Quota` | `non-preemptible work may only use queue Q's deserved quota (…)` |
/// | `FairShare` | `queue Q would exceed its fair share (…)`, `reclaim: …` (no queue to reclaim from) |
/// | `Gang` | `gang of N pods: only K fit; …` |
/// | `Unschedulable` | `0/N nodes are available: …` (a single pod fits no node), `preempt: …` (evicting cannot free enough) |
/// | `Other` | anything else (unknown text) |
///
/// Only the first clause counts: the core appends later failures after `; ` (`gang of 4
/// pods: only 2 fit; 0/3 nodes are available: …; preempt: idle and evictable capacity …`),
/// and the first clause is the obstacle the job met first. `elastic pods wait: ` is looked
/// through (its remainder is categorised).
pub fn pending_reason_category(reason: &str) -> &'static str {
    let text = reason.trim();
    let text = text.strip_prefix("elastic pods wait:").map(str::trim_start).unwrap_or(text);
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("not admitted") {
        return "NotAdmitted";
    }
    if lower.starts_with("gang of ") {
        return "Gang";
    }
    let first = lower.split("; ").next().unwrap_or("");
    if first.contains("to terminate") || first.contains("evicted pods") {
        "Preempting"
    } else if first.starts_with("waiting behind") || first.contains("strictfifo") {
        "StrictFIFO"
    } else if first.contains("its limit") {
        "QueueLimit"
    } else if first.contains("deserved quota") && !first.starts_with("reclaim:") {
        "Quota"
    } else if first.contains("fair share") || first.starts_with("reclaim:") {
        "FairShare"
    } else if first.contains("nodes are available")
        || first.starts_with("preempt:")
        || first.contains("insufficient ")
        || first.contains("node(s) ")
        || first.contains("whole cluster")
    {
        "Unschedulable"
    } else {
        "Other"
    }
}

/// A resource amount of the scheduling core (`cpu` in millicores, everything else in whole
/// units) as a metric value: `cpu` in cores, others unchanged (memory in bytes, GPUs and
/// pods as counts).
pub fn resource_value(resource: &str, amount: i64) -> f64 {
    if resource == "cpu" {
        amount as f64 / 1000.0
    } else {
        amount as f64
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct QueueResourceLabels {
    queue: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabels {
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Buckets of the scheduler's durations: 1 ms to about 16 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Buckets of reconcile durations: 0.5 ms to about 8 s, doubling.
fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 15))
}

/// Which per-queue gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueGauge {
    /// `drover_queue_allocated`
    Allocated,
    /// `drover_queue_deserved`
    Deserved,
    /// `drover_queue_fair_share`
    FairShare,
}

/// Every Drover metric, in one registry. Share it as `Arc<Metrics>`; all methods take `&self`.
pub struct Metrics {
    registry: Registry,
    cycle_duration: Histogram,
    cycles_skipped: Counter,
    action_duration: HistogramFamily<ActionLabels>,
    binds: Counter,
    evictions: Family<ReasonLabels, Counter>,
    pending: Family<ReasonLabels, Gauge>,
    queue_allocated: Family<QueueResourceLabels, FloatGauge>,
    queue_deserved: Family<QueueResourceLabels, FloatGauge>,
    queue_fair_share: Family<QueueResourceLabels, FloatGauge>,
    /// (queue, resource) pairs set by the last [`Metrics::record_cycle`], to drop stale ones.
    queue_series: Mutex<BTreeSet<QueueResourceLabels>>,
    leader: Family<ComponentLabels, Gauge>,
    reconcile_total: Family<ControllerResultLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A registry with every family registered (no samples yet, except the pending
    /// categories and eviction reasons, which start at zero so dashboards see them).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let cycle_duration = latency_histogram();
        registry.register(
            "drover_scheduler_cycle_duration_seconds",
            "Duration of one scheduling cycle, from snapshot to decisions",
            cycle_duration.clone(),
        );
        let cycles_skipped = Counter::default();
        registry.register(
            "drover_scheduler_cycles_skipped",
            "Cycles not run because they would repeat the last one: nothing changed and nothing came due",
            cycles_skipped.clone(),
        );
        let action_duration = HistogramFamily::<ActionLabels>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register(
            "drover_scheduler_action_duration_seconds",
            "Duration of one action of a scheduling cycle",
            action_duration.clone(),
        );
        let binds = Counter::default();
        // The encoder appends `_total` to counters.
        registry.register("drover_scheduler_binds", "Pods bound by the scheduler", binds.clone());
        let evictions = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "drover_scheduler_evictions",
            "Pods evicted by the scheduler, by reason (preempt, reclaim)",
            evictions.clone(),
        );
        let pending = Family::<ReasonLabels, Gauge>::default();
        registry.register(
            "drover_scheduler_pending_podgroups",
            "Pod groups with waiting pods, by category of the reason they wait",
            pending.clone(),
        );
        let queue_allocated = Family::<QueueResourceLabels, FloatGauge>::default();
        registry.register(
            "drover_queue_allocated",
            "Resources of running pods of a queue (cpu in cores, memory in bytes, others as counts)",
            queue_allocated.clone(),
        );
        let queue_deserved = Family::<QueueResourceLabels, FloatGauge>::default();
        registry.register(
            "drover_queue_deserved",
            "Deserved quota of a queue (cpu in cores, memory in bytes, others as counts)",
            queue_deserved.clone(),
        );
        let queue_fair_share = Family::<QueueResourceLabels, FloatGauge>::default();
        registry.register(
            "drover_queue_fair_share",
            "Fair share of a queue in the last cycle (cpu in cores, memory in bytes, others as counts)",
            queue_fair_share.clone(),
        );
        let leader = Family::<ComponentLabels, Gauge>::default();
        registry.register("drover_leader", "1 while this replica is the leader of the component", leader.clone());
        let reconcile_total = Family::<ControllerResultLabels, Counter>::default();
        registry.register("drover_reconcile", "Reconciliations by controller and result", reconcile_total.clone());
        let reconcile_duration =
            HistogramFamily::<ControllerLabels>::new_with_constructor(reconcile_histogram as fn() -> _);
        registry.register(
            "drover_reconcile_duration_seconds",
            "Duration of one reconciliation",
            reconcile_duration.clone(),
        );
        for category in PENDING_CATEGORIES {
            pending.get_or_create(&ReasonLabels { reason: category.to_string() }).set(0);
        }
        for reason in ["preempt", "reclaim", "consolidate", "overrun"] {
            evictions.get_or_create(&ReasonLabels { reason: reason.to_string() }).inc_by(0);
        }
        Metrics {
            registry,
            cycle_duration,
            cycles_skipped,
            action_duration,
            binds,
            evictions,
            pending,
            queue_allocated,
            queue_deserved,
            queue_fair_share,
            queue_series: Mutex::new(BTreeSet::new()),
            leader,
            reconcile_total,
            reconcile_duration,
        }
    }

    /// The exposition, OpenMetrics text (ends with `# EOF`); its type is [`CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Records one scheduling cycle's duration.
    pub fn observe_cycle(&self, elapsed: Duration) {
        self.cycle_duration.observe(elapsed.as_secs_f64());
    }

    /// Counts a cycle skipped because it would have repeated the last one.
    pub fn inc_cycles_skipped(&self) {
        self.cycles_skipped.inc();
    }

    /// Records one action's duration (`action` as configured: `enqueue`, `allocate`, ...).
    pub fn observe_action(&self, action: &str, elapsed: Duration) {
        self.action_duration.get_or_create(&ActionLabels { action: action.to_string() }).observe(elapsed.as_secs_f64());
    }

    /// Counts `n` pods bound.
    pub fn inc_binds(&self, n: u64) {
        self.binds.inc_by(n);
    }

    /// Counts `n` pods evicted for `reason`.
    pub fn inc_evictions(&self, reason: EvictReason, n: u64) {
        let reason = match reason {
            EvictReason::Preempt => "preempt",
            EvictReason::Reclaim => "reclaim",
            EvictReason::Consolidate => "consolidate",
            EvictReason::Overrun => "overrun",
        };
        self.evictions.get_or_create(&ReasonLabels { reason: reason.to_string() }).inc_by(n);
    }

    /// Sets the pending pod groups from the reasons of every waiting group (each mapped by
    /// [`pending_reason_category`]); categories without a group are set to 0.
    pub fn set_pending_reasons<'a>(&self, reasons: impl IntoIterator<Item = &'a str>) {
        let mut counts: BTreeMap<&'static str, i64> = PENDING_CATEGORIES.iter().map(|c| (*c, 0)).collect();
        for reason in reasons {
            *counts.entry(pending_reason_category(reason)).or_default() += 1;
        }
        for (category, n) in counts {
            self.pending.get_or_create(&ReasonLabels { reason: category.to_string() }).set(n);
        }
    }

    /// Sets one per-queue gauge (`value` already converted, see [`resource_value`]).
    pub fn set_queue(&self, gauge: QueueGauge, queue: &str, resource: &str, value: f64) {
        let family = match gauge {
            QueueGauge::Allocated => &self.queue_allocated,
            QueueGauge::Deserved => &self.queue_deserved,
            QueueGauge::FairShare => &self.queue_fair_share,
        };
        family
            .get_or_create(&QueueResourceLabels { queue: queue.to_string(), resource: resource.to_string() })
            .set(value);
    }

    /// Sets `drover_leader{component}` to 1 or 0. A replica that stops leading also drops its
    /// per-queue series and pending counts: only the leader's figures are current, and two
    /// replicas exporting the same queue's series would disagree after a failover.
    pub fn set_leader(&self, component: &str, leading: bool) {
        self.leader.get_or_create(&ComponentLabels { component: component.to_string() }).set(i64::from(leading));
        if !leading {
            self.queue_allocated.clear();
            self.queue_deserved.clear();
            self.queue_fair_share.clear();
            self.queue_series.lock().unwrap_or_else(|e| e.into_inner()).clear();
            self.pending.clear();
        }
    }

    /// Records one reconciliation of `controller` (`result`: e.g. `success`, `error`,
    /// `requeue`) and its duration.
    pub fn observe_reconcile(&self, controller: &str, result: &str, elapsed: Duration) {
        self.reconcile_total
            .get_or_create(&ControllerResultLabels { controller: controller.to_string(), result: result.to_string() })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabels { controller: controller.to_string() })
            .observe(elapsed.as_secs_f64());
    }

    /// Records everything a cycle tells: its duration, binds and evictions, the pending
    /// categories, and per queue (the root excluded) allocated, deserved and fair share of
    /// every resource the snapshot knows (unlimited entries skipped). Series of queues or
    /// resources gone since the previous call are removed. Action durations are recorded
    /// separately ([`Metrics::observe_action`], e.g. from `run_cycle_observed`).
    pub fn record_cycle(&self, snap: &Snapshot, outcome: &CycleOutcome, elapsed: Duration) {
        self.observe_cycle(elapsed);
        self.inc_binds(outcome.decisions.binds.len() as u64);
        for reason in [EvictReason::Preempt, EvictReason::Reclaim, EvictReason::Consolidate, EvictReason::Overrun] {
            let n = outcome.decisions.evictions.iter().filter(|(_, r, _)| *r == reason).count();
            self.inc_evictions(reason, n as u64);
        }
        self.set_pending_reasons(outcome.reasons.iter().flatten().map(String::as_str));

        let mut series = BTreeSet::new();
        for (q, queue) in snap.queues.iter_enumerated() {
            if queue.parent.is_none() {
                continue; // the root
            }
            for (r, resource) in snap.resources.iter().enumerate() {
                let labels = QueueResourceLabels { queue: queue.name.clone(), resource: resource.clone() };
                let amount = |v: Option<&drover_scheduler::res::Res>| v.and_then(|v| v.0.get(r).copied());
                let pairs = [
                    (&self.queue_allocated, amount(outcome.queues.get(q).map(|o| &o.allocated))),
                    (&self.queue_deserved, amount(Some(&queue.deserved))),
                    (&self.queue_fair_share, amount(outcome.queues.get(q).map(|o| &o.fair_share))),
                ];
                for (family, value) in pairs {
                    match value {
                        Some(v) if v != UNLIMITED => {
                            family.get_or_create(&labels).set(resource_value(resource, v));
                        }
                        _ => {
                            family.remove(&labels);
                        }
                    }
                }
                series.insert(labels);
            }
        }
        let mut previous = self.queue_series.lock().unwrap_or_else(|e| e.into_inner());
        for gone in previous.difference(&series) {
            self.queue_allocated.remove(gone);
            self.queue_deserved.remove(gone);
            self.queue_fair_share.remove(gone);
        }
        *previous = series;
    }
}

/// Liveness and readiness, shared with the HTTP endpoint (cheap clone).
#[derive(Clone, Debug)]
pub struct Health {
    healthy: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Healthy, not ready.
    pub fn new() -> Self {
        Health { healthy: Arc::new(AtomicBool::new(true)), ready: Arc::new(AtomicBool::new(false)) }
    }

    /// Readiness (`/readyz` 200 when true): set once the caches are synced.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Liveness (`/healthz` 200 when true; true from the start). Set false when the process
    /// is wedged and should be restarted.
    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Release);
    }

    /// Whether `/healthz` answers 200.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }
}

/// The running HTTP endpoint.
pub struct ServeHandle {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl ServeHandle {
    /// The bound address (the real port when asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving (in-flight requests finish).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Health,
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` (port 0 picks a free port) until
/// [`ServeHandle::stop`] or the runtime ends. Returns once the socket is bound.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, health: Health) -> anyhow::Result<ServeHandle> {
    let listener = TcpListener::bind(addr).await.with_context(|| format!("binding the metrics endpoint {addr}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
        .with_state(AppState { metrics, health });
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "metrics endpoint stopped with an error");
        }
    });
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    Ok(ServeHandle { addr, shutdown: Some(tx), task })
}

async fn metrics_handler(State(state): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], state.metrics.encode()).into_response()
}

async fn healthz(State(state): State<AppState>) -> Response {
    probe(state.health.is_healthy(), "unhealthy\n")
}

async fn readyz(State(state): State<AppState>) -> Response {
    probe(state.health.is_ready(), "not ready\n")
}

fn probe(ok: bool, failure: &'static str) -> Response {
    if ok {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, failure).into_response()
    }
}

/// The scheduler reports every cycle it runs as leader to the metrics.
impl crate::scheduler::CycleObserver for Metrics {
    fn on_cycle(&self, report: &crate::scheduler::CycleReport<'_>) {
        self.record_cycle(report.snapshot, report.outcome, report.duration);
        for (action, took) in report.actions {
            self.observe_action(&format!("{action:?}").to_lowercase(), *took);
        }
        self.inc_binds(report.recovered_binds as u64);
    }

    fn on_skipped(&self) {
        self.inc_cycles_skipped();
    }
}
