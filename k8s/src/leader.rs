//! Leader election on a `coordination.k8s.io/v1` Lease, for running the scheduler and the
//! controllers with several replicas.
//!
//! One elector per process: [`spawn`] starts a task that acquires and renews the lease and
//! tells, through the returned [`LeaderHandle`], whether this process may act.
//!
//! # Rules
//!
//! * The lease is **acquired** when it is absent (created), released (no `holderIdentity`), or
//!   expired. A lease held by another is expired when `renewTime + leaseDurationSeconds` is
//!   past by our clock, or when we have seen the same record (resourceVersion) unchanged for
//!   `leaseDurationSeconds` (client-go's rule, which does not trust the holder's clock).
//! * Every write is a PUT carrying the resourceVersion last read, so two candidates can never
//!   both win: the loser gets 409 Conflict. A 409 on a renewal re-reads the lease; the
//!   leader keeps going if it still holds it and has lost it otherwise.
//! * The leader renews every `renew_period`. It **acts** only until `t + lease_duration -
//!   renew_period`, where `t` is the instant it *sent* its last successful write (the
//!   `renewTime` it wrote is our wall clock at `t`). Others cannot take the lease before
//!   `renewTime + lease_duration`, so there is a margin of `renew_period` (minus request
//!   latency and clock skew) during which nobody acts. A leader that cannot renew in time
//!   (API errors, latency) steps down at that deadline; [`LeaderHandle::is_leader`] checks the
//!   deadline itself, so it turns false on time even if the election task were starved.
//! * A step-down for missed renewals is not final: if the next guarded write succeeds, nobody
//!   else wrote the lease meanwhile, and leadership resumes.
//! * [`LeaderHandle::stop`] stops acting first, then releases the lease (clears
//!   `holderIdentity`) so a successor takes over at its next poll instead of waiting for
//!   expiry.
//!
//! The record is kept as client-go's leader election keeps it: `holderIdentity`,
//! `leaseDurationSeconds`, `acquireTime` (set when the holder changes), `renewTime` (every
//! write) and `leaseTransitions` (incremented whenever the holder changes).
//!
//! Candidates poll the lease every `renew_period / 2` (with a little jitter), so a released
//! lease is taken within about half a renew period.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout};

/// What to elect on and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Name of the Lease object, e.g. `drover-scheduler`.
    pub lease_name: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// This candidate's identity, unique among the replicas (see [`default_identity`]).
    pub identity: String,
    /// How long a lease is valid after its last renewal (`leaseDurationSeconds`, rounded up to
    /// whole seconds in the Lease). Typically 15 s.
    pub lease_duration: Duration,
    /// How often the leader renews; must be shorter than `lease_duration`. The leader stops
    /// acting `renew_period` before its lease would expire. Typically 5 s.
    pub renew_period: Duration,
}

impl LeaderConfig {
    /// A configuration with the default identity, a 15 s lease and a 5 s renew period.
    pub fn new(lease_name: impl Into<String>, namespace: impl Into<String>) -> Self {
        LeaderConfig {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_period: Duration::from_secs(5),
        }
    }

    /// Checks the configuration: names and identity present, `0 < renew_period <
    /// lease_duration`.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_name.is_empty() || self.namespace.is_empty() {
            return Err("lease name and namespace must not be empty".into());
        }
        if self.identity.is_empty() {
            return Err("identity must not be empty".into());
        }
        if self.renew_period.is_zero() || self.renew_period >= self.lease_duration {
            return Err(format!(
                "renew period ({:?}) must be positive and shorter than the lease duration ({:?})",
                self.renew_period, self.lease_duration
            ));
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: the duration rounded up to whole seconds, at least 1.
    fn lease_duration_seconds(&self) -> i32 {
        let secs = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        secs.clamp(1, i32::MAX as u64) as i32
    }
}

/// `HOSTNAME` (the pod name in Kubernetes) or the kernel's hostname, then `_` and the process
/// id: unique per replica and readable in `kubectl get lease`.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    format!("{host}_{}", std::process::id())
}

/// State shared between the election task and the handles.
struct Shared {
    /// Set while leading; cleared by the task at the deadline, on loss and on stop.
    flag: Arc<AtomicBool>,
    /// Reference point of `deadline_ns`.
    base: Instant,
    /// Nanoseconds after `base` at which the leader must stop acting (0: not leading).
    deadline_ns: AtomicU64,
}

impl Shared {
    fn is_leader(&self) -> bool {
        if !self.flag.load(Ordering::Acquire) {
            return false;
        }
        let deadline = self.deadline_ns.load(Ordering::Acquire);
        deadline != 0 && (self.base.elapsed().as_nanos() as u64) < deadline
    }
}

/// A cheap, clonable view of the leadership state, usable from any thread.
#[derive(Clone)]
pub struct LeaderStatus {
    shared: Arc<Shared>,
}

impl LeaderStatus {
    /// Whether this process leads now (false once the acting deadline has passed, even if
    /// the election task has not run since).
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }
}

/// The running elector.
pub struct LeaderHandle {
    identity: String,
    shared: Arc<Shared>,
    changes: watch::Receiver<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl LeaderHandle {
    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this process leads now. Cheap: two atomic loads and a clock read.
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// A clonable, `Send + Sync` view for other threads and tasks.
    pub fn status(&self) -> LeaderStatus {
        LeaderStatus { shared: self.shared.clone() }
    }

    /// The flag the election task keeps (true while leading). It is cleared at the acting
    /// deadline by the task; prefer [`LeaderHandle::is_leader`] / [`LeaderStatus`], which
    /// also check the deadline themselves.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.shared.flag.clone()
    }

    /// A receiver of leadership changes (`true` when leadership starts, `false` when it
    /// ends). Use `changed()` / `wait_for(|l| *l)` on it.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.clone()
    }

    /// Waits for the next change of leadership and returns the new state. Returns `false`
    /// at once if the election task has ended.
    pub async fn changed(&mut self) -> bool {
        match self.changes.changed().await {
            Ok(()) => *self.changes.borrow_and_update(),
            Err(_) => false,
        }
    }

    /// Stops the elector: stops acting, then releases the lease if this process holds it, so
    /// a successor takes over without waiting for expiry. Bounded by about one renew period.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = (&mut self.task).await {
            if e.is_panic() {
                tracing::error!("leader election task panicked");
            }
        }
        self.shared.flag.store(false, Ordering::Release);
        self.shared.deadline_ns.store(0, Ordering::Release);
    }

    /// Kills the election task without releasing the lease, as a crash would. Nothing is
    /// cleared: [`LeaderHandle::is_leader`] turns false at the acting deadline. For tests.
    pub fn abort(mut self) {
        self.task.abort();
        // Keep the stop channel open so the task never sees a stop request.
        std::mem::forget(self.stop.take());
    }
}

impl Drop for LeaderHandle {
    fn drop(&mut self) {
        // Dropped without stop(): ask the task to release and end (best effort).
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts electing. Must be called within a Tokio runtime. An invalid configuration (see
/// [`LeaderConfig::validate`]) is logged and its renew period clamped to a third of the
/// lease duration.
pub fn spawn(client: kube::Client, mut config: LeaderConfig) -> LeaderHandle {
    if let Err(e) = config.validate() {
        tracing::error!(error = %e, "invalid leader election configuration; clamping the renew period");
        if config.renew_period.is_zero() || config.renew_period >= config.lease_duration {
            config.renew_period = (config.lease_duration / 3).max(Duration::from_millis(1));
        }
    }
    let shared = Arc::new(Shared {
        flag: Arc::new(AtomicBool::new(false)),
        base: Instant::now(),
        deadline_ns: AtomicU64::new(0),
    });
    let (tx, rx) = watch::channel(false);
    let (stop_tx, stop_rx) = oneshot::channel();
    let elector = Elector {
        api: Api::namespaced(client, &config.namespace),
        config: config.clone(),
        shared: shared.clone(),
        changes: tx,
        cached: None,
        observed: None,
        acting_until: None,
    };
    let task = tokio::spawn(elector.run(stop_rx));
    LeaderHandle { identity: config.identity, shared, changes: rx, stop: Some(stop_tx), task }
}

/// The last lease record read or written, and when we first saw it (local clock).
struct Observed {
    resource_version: String,
    seen_at: Instant,
}

struct Elector {
    api: Api<Lease>,
    config: LeaderConfig,
    shared: Arc<Shared>,
    changes: watch::Sender<bool>,
    /// The lease as last read or written (its resourceVersion guards the next write).
    cached: Option<Lease>,
    /// For the local expiry rule.
    observed: Option<Observed>,
    /// While leading: the instant until which we may act.
    acting_until: Option<Instant>,
}

/// What one attempt found.
enum Attempt {
    /// We hold the lease; our write was sent at this instant.
    Held(Instant),
    /// Someone else holds a valid lease.
    Other,
    /// The attempt failed (error, conflict, timeout); try again soon.
    Failed,
}

impl Elector {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let renew = self.config.renew_period;
        tracing::info!(
            lease = %self.config.lease_name,
            namespace = %self.config.namespace,
            identity = %self.config.identity,
            "starting leader election"
        );
        loop {
            let attempt = tokio::select! {
                biased;
                _ = &mut stop => break,
                _ = Self::sleep_until_opt(self.acting_until) => {
                    self.step_down("the lease could not be renewed in time");
                    continue;
                }
                a = self.attempt() => a,
            };
            let now = Instant::now();
            let next = match attempt {
                Attempt::Held(sent) => {
                    self.lead_until(sent + self.config.lease_duration - renew);
                    sent + renew
                }
                Attempt::Other => {
                    if self.acting_until.is_some() {
                        self.step_down("another candidate holds the lease");
                    }
                    now + self.poll_period()
                }
                Attempt::Failed if self.acting_until.is_some() => now + (renew / 4).max(Duration::from_millis(10)),
                Attempt::Failed => now + self.poll_period(),
            };
            tokio::select! {
                biased;
                _ = &mut stop => break,
                _ = Self::sleep_until_opt(self.acting_until) => {
                    self.step_down("the lease could not be renewed in time");
                }
                _ = sleep_until(next.into()) => {}
            }
        }
        let was_leading = self.acting_until.is_some();
        self.step_down("stopping");
        if let Err(e) = timeout(renew, self.release()).await.unwrap_or(Err("timed out".into())) {
            tracing::warn!(error = %e, was_leading, "could not release the lease");
        }
    }

    async fn sleep_until_opt(at: Option<Instant>) {
        match at {
            Some(at) => sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    }

    /// Candidates poll at half the renew period, with up to 20% jitter.
    fn poll_period(&self) -> Duration {
        let half = self.config.renew_period / 2;
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        half + half.mul_f64(f64::from(nanos % 1000) / 5000.0)
    }

    fn lead_until(&mut self, until: Instant) {
        let ns = until.saturating_duration_since(self.shared.base).as_nanos() as u64;
        self.shared.deadline_ns.store(ns.max(1), Ordering::Release);
        self.acting_until = Some(until);
        if !self.shared.flag.swap(true, Ordering::AcqRel) {
            tracing::info!(lease = %self.config.lease_name, identity = %self.config.identity, "became the leader");
            self.changes.send_replace(true);
        }
    }

    fn step_down(&mut self, why: &str) {
        self.acting_until = None;
        self.shared.flag.store(false, Ordering::Release);
        self.shared.deadline_ns.store(0, Ordering::Release);
        if *self.changes.borrow() {
            tracing::warn!(lease = %self.config.lease_name, identity = %self.config.identity, why, "stopped leading");
            self.changes.send_replace(false);
        }
    }

    /// Time left for a request: until the acting deadline while leading (so a slow request
    /// cannot keep us acting past it), else one renew period.
    fn request_budget(&self) -> Duration {
        match self.acting_until {
            Some(until) => until.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)),
            None => self.config.renew_period,
        }
    }

    fn holds(&self, lease: &Lease) -> bool {
        holder(lease) == Some(self.config.identity.as_str())
    }

    /// One acquire-or-renew attempt.
    async fn attempt(&mut self) -> Attempt {
        // A leader renews straight from its cached copy; on conflict it re-reads.
        if self.acting_until.is_some() {
            if let Some(lease) = self.cached.clone().filter(|l| self.holds(l)) {
                match self.write(&lease, false).await {
                    Ok(sent) => return Attempt::Held(sent),
                    Err(WriteError::Conflict) => {}
                    Err(WriteError::Other(e)) => {
                        tracing::warn!(error = %e, "renewing the lease failed; retrying");
                        return Attempt::Failed;
                    }
                }
            }
        }
        let budget = self.request_budget();
        let lease = match timeout(budget, self.api.get_opt(&self.config.lease_name)).await {
            Ok(Ok(lease)) => lease,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading the lease failed");
                return Attempt::Failed;
            }
            Err(_) => {
                tracing::warn!("reading the lease timed out");
                return Attempt::Failed;
            }
        };
        let Some(lease) = lease else {
            return self.create().await;
        };
        self.observe(&lease);
        let ours = self.holds(&lease);
        if !ours && !self.expired_or_released(&lease) {
            self.cached = Some(lease);
            return Attempt::Other;
        }
        match self.write(&lease, !ours).await {
            Ok(sent) => Attempt::Held(sent),
            Err(WriteError::Conflict) => Attempt::Failed,
            Err(WriteError::Other(e)) => {
                tracing::warn!(error = %e, "writing the lease failed");
                Attempt::Failed
            }
        }
    }

    fn observe(&mut self, lease: &Lease) {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|o| o.resource_version != rv) {
            self.observed = Some(Observed { resource_version: rv, seen_at: Instant::now() });
        }
        self.cached = Some(lease.clone());
    }

    fn expired_or_released(&self, lease: &Lease) -> bool {
        let Some(spec) = lease.spec.as_ref() else { return true };
        if holder(lease).is_none() {
            return true;
        }
        let secs = spec.lease_duration_seconds.unwrap_or(0).max(0);
        let duration = Duration::from_secs(secs as u64);
        // By the clock: renewTime + leaseDurationSeconds < now.
        let by_clock = match &spec.renew_time {
            Some(MicroTime(renewed)) => {
                let expires = renewed.checked_add(SignedDuration::from_secs(i64::from(secs))).ok();
                expires.is_none_or(|e| e < Timestamp::now())
            }
            None => true,
        };
        // Unchanged for a whole lease duration since we first saw it (skew-proof).
        let by_observation = self.observed.as_ref().is_some_and(|o| o.seen_at.elapsed() > duration);
        by_clock || by_observation
    }

    async fn create(&mut self) -> Attempt {
        let now = Timestamp::now();
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.lease_name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.lease_duration_seconds()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        let sent = Instant::now();
        match timeout(self.request_budget(), self.api.create(&PostParams::default(), &lease)).await {
            Ok(Ok(created)) => {
                self.observe(&created);
                Attempt::Held(sent)
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Attempt::Failed, // someone else created it
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "creating the lease failed");
                Attempt::Failed
            }
            Err(_) => Attempt::Failed,
        }
    }

    /// Writes `lease` (as read) with us as holder, guarded by its resourceVersion. `acquire`:
    /// the holder changes (new acquireTime, one more transition).
    async fn write(&mut self, lease: &Lease, acquire: bool) -> Result<Instant, WriteError> {
        let now = Timestamp::now();
        let mut new = Lease { metadata: lease.metadata.clone(), spec: lease.spec.clone() };
        new.metadata.managed_fields = None;
        let spec = new.spec.get_or_insert_with(Default::default);
        if acquire {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        } else if spec.acquire_time.is_none() {
            spec.acquire_time = Some(MicroTime(now));
        }
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds = Some(self.config.lease_duration_seconds());
        spec.renew_time = Some(MicroTime(now));
        if spec.lease_transitions.is_none() {
            spec.lease_transitions = Some(0);
        }
        let sent = Instant::now();
        let result =
            timeout(self.request_budget(), self.api.replace(&self.config.lease_name, &PostParams::default(), &new))
                .await;
        match result {
            Ok(Ok(written)) => {
                self.observe(&written);
                Ok(sent)
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                self.cached = None;
                Err(WriteError::Conflict)
            }
            Ok(Err(e)) => Err(WriteError::Other(e.to_string())),
            Err(_) => Err(WriteError::Other("timed out".into())),
        }
    }

    /// Clears `holderIdentity` if we hold the lease (guarded; one re-read on conflict).
    async fn release(&mut self) -> Result<(), String> {
        for _ in 0..2 {
            let lease = match self.cached.clone() {
                Some(l) => l,
                None => match self.api.get_opt(&self.config.lease_name).await {
                    Ok(Some(l)) => l,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(e.to_string()),
                },
            };
            if !self.holds(&lease) {
                return Ok(());
            }
            let now = Timestamp::now();
            let mut new = Lease { metadata: lease.metadata.clone(), spec: lease.spec.clone() };
            new.metadata.managed_fields = None;
            let spec = new.spec.get_or_insert_with(Default::default);
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(now));
            spec.acquire_time = Some(MicroTime(now));
            match self.api.replace(&self.config.lease_name, &PostParams::default(), &new).await {
                Ok(_) => {
                    tracing::info!(lease = %self.config.lease_name, identity = %self.config.identity, "released the lease");
                    self.cached = None;
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => self.cached = None,
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("conflicting writes while releasing".into())
    }
}

enum WriteError {
    Conflict,
    Other(String),
}

/// The lease's holder, `None` when empty or absent (released).
fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref().filter(|h| !h.is_empty())
}
