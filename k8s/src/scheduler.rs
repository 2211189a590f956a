//! The Kubernetes scheduler loop: reflector caches in, scheduling cycles of the pure core,
//! decisions written back to the API.
//!
//! [`run`] watches Nodes, Pods (all of them: the conversion subtracts foreign usage),
//! PodGroups, Queues and PriorityClasses into reflector stores (without the field managers'
//! records and `kubectl apply`'s copy of each object, which it never reads) and waits until
//! every store has listed once. Then, every [`SchedulerOptions::period`], and about 50 ms after a pending
//! pod of the scheduler, a new PodGroup or a new Node appears or a bound pod is deleted (a
//! claim waiting for its victims starts as soon as they are gone), it runs a cycle — only while
//! `is_leader()` says so. A cycle reads only its stores (but the one Queue it adds completed runs
//! to, read fresh): it converts the store contents once
//! ([`crate::convert`]: jobs, and each PodGroup's members and counts), builds a snapshot
//! ([`crate::convert::Converted::snapshot_at`]: learned run times and loans included) — or
//! takes the last cycle's conversion and snapshot when no object changed in anything the
//! conversion reads ([`crate::convert::Reuse`]), and brings it to the cycle's time —
//! runs the core synchronously (after recovery) and writes, in this order:
//!
//! 1. **Recovery** of bind intents left by a previous leader, a crash, or an earlier cycle
//!    whose bindings failed (`scheduler/recovery.rs`: completed where every binding still
//!    passes the rules a new decision would, else the gang rolled back), on the cycle's
//!    conversion and snapshot, before the core runs: the snapshot then shows what it did.
//! 2. **Evictions** through `pods/{name}/eviction` (policy/v1, uid precondition), with a
//!    `Preempted` or `Reclaimed` Event on the pod. 404 is fine (already gone).
//! 3. **Bindings, gang-safe.** Half of `bind_concurrency` gangs at a time; for each, first
//!    the group's `status.bindIntent` = `{"pods": {"<pod>": "<node>"}, "id": .., "at": ..}`
//!    by a merge patch of the status subresource carrying the group's resourceVersion (any
//!    error, 409 included, skips the group this cycle); then `pods/{name}/binding` for each
//!    pod, `bind_concurrency` at a time, the Binding carrying the pod's charge record
//!    ([`crate::charge`]) and, in a topology, its domain, which the API server sets on the pod
//!    as it binds it (a 409 is fine when the pod is already on that node);
//!    then the intent is removed. If a binding fails, the intent stays and the next cycle's
//!    recovery finishes the job. Only the scheduler writes PodGroup status; the annotation
//!    [`IGNORED_BIND_INTENT_ANNOTATION`], where intents once lived, is never read (a group
//!    carrying it gets a Warning Event).
//! 4. **Status** where it changed, `bind_concurrency` writes at once, on the objects as the writes above returned them: PodGroup phase, counts, `observedGeneration` and the
//!    `Unschedulable`/`Valid` conditions, a waiting gang's `forecast` (`scheduler/forecast.rs`)
//!    and a loan's `borrowedUntil`; then the runs of groups that completed, recorded in their
//!    queue's learned run times (`scheduler/learn.rs`); Queue `allocated`, `deserved`,
//!    `fairShare`, `queueState`.
//! 5. **Waiting pods**: the pending pods of every group that cannot start get
//!    `PodScheduled=False` with the group's reason, and a `FailedScheduling` Event when the
//!    reason changes, rate-limited (`scheduler/waiting.rs`), so `kubectl describe pod`, the
//!    cluster autoscaler and Karpenter see them.
//!
//! PodGroup writes that only report (forecast, a reason's figures) are paced and Events
//! emitted once per state (`scheduler/pace.rs`), so that no tenant's waiting work floods the
//! API server.
//!
//! **Cycles that would repeat.** A cycle that decided nothing, found every status and pod
//! mark current and saw no bind intent would be repeated exactly by the next one, unless an
//! object changed or the time reached something its answers depended on (a loan's end, a
//! minimum run time, a forecast's next end: the snapshot's clock notes each). So the next
//! cycles are skipped (logged `cycle skipped`, counted in the metrics) until a watch event
//! arrives — other than a Node's that the conversion does not read — or that time comes.
//! Taking over as leader always runs a full cycle.
//!
//! **Stale stores.** Writes the stores have not shown yet (bindings, evictions, PodGroup
//! patches) are laid over the store contents until the store shows a newer version of the
//! object, so a cycle started right after another does not decide again on the same pods;
//! a binding, until the store shows the pod on a node (another write, a waiting mark say, may
//! make a newer version that is still unbound).
//!
//! **The charge guard.** The leader schedules only while the admission policy that keeps each
//! pod's charge record as its binding wrote it is installed as the chart ships it
//! (`scheduler/guard.rs`); otherwise it runs no cycle, and says why in its log, on every
//! pending pod (`PodScheduled=False`, reason `SchedulingHalted`, one Event) and in every
//! Queue's `status.halted` (`scheduler/halted.rs`), as it does when it cannot build a snapshot.
//!
//! **Taking over.** A process that has followed another leader waits, before its first cycle
//! as leader, until its Pod and PodGroup watches have reached the API server's revision of
//! that moment (`scheduler/catch_up.rs`), so that it never decides on a store that does not
//! show the previous leader's last bindings yet.
//!
//! **Failures.** An API error on one object is logged and retried next cycle; it never
//! stops the cycle or the loop. Nothing here panics. Every problem the conversion finds in
//! an object (a value it cannot use, a missing reference) is logged as a warning naming the
//! object, once, in the cycle it first appears; a PodGroup's also becomes its `Valid`
//! condition.

mod api;
mod bind;
mod cache;
mod catch_up;
mod evict;
mod forecast;
mod guard;
mod halted;
mod intents;
mod learn;
mod pace;
mod placement;
mod queue_status;
mod recovery;
mod status;
mod waiting;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_scheduler::config::{ActionName, SchedulerConfig};
use drover_scheduler::cycle::{run_cycle_observed, CycleOutcome};
use drover_scheduler::snapshot::Snapshot;
use kube::Client;
use tokio::sync::Notify;

use crate::convert;
use cache::{Cache, Overlay};
use intents::Intents;

pub use intents::IGNORED_BIND_INTENT_ANNOTATION;
pub use status::{wanted_group_statuses, UNSCHEDULABLE, VALID};

/// The leadership check, shared.
type Leader = Arc<dyn Fn() -> bool + Send + Sync>;

/// The API client and the settings every write of a cycle needs.
struct Writer<'a> {
    client: &'a Client,
    config: &'a SchedulerConfig,
    scheduler_name: &'a str,
    /// API writes in flight at once.
    concurrency: usize,
    /// How old another process's bind intent must be before recovery takes it over.
    period: Duration,
}

/// How long after a trigger the cycle starts, so that a burst of objects makes one cycle.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// How the scheduler runs.
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// The `spec.schedulerName` of the pods it schedules.
    pub scheduler_name: String,
    /// Time between cycles when nothing triggers one earlier.
    pub period: Duration,
    /// Actions and plugins of the core.
    pub config: SchedulerConfig,
    /// Bindings (and evictions, deletions) in flight at once.
    pub bind_concurrency: usize,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            scheduler_name: drover_api::labels::SCHEDULER_NAME.into(),
            period: Duration::from_secs(1),
            config: SchedulerConfig::default(),
            bind_concurrency: 128,
        }
    }
}

/// What one cycle did, for metrics: the snapshot and the core's outcome, with the times.
pub struct CycleReport<'a> {
    /// The whole cycle: conversion, core, and writes.
    pub duration: Duration,
    /// Each action of the core and its duration.
    pub actions: &'a [(ActionName, Duration)],
    /// Pods bound by recovering other leaders' unfinished gangs.
    pub recovered_binds: usize,
    /// The snapshot the core ran on.
    pub snapshot: &'a Snapshot,
    /// The core's decisions, reasons and queue figures.
    pub outcome: &'a CycleOutcome,
}

/// Receives a report after every cycle (metrics). Called on the scheduler's task: keep it
/// quick and never block.
pub trait CycleObserver: Send + Sync {
    /// One cycle finished.
    fn on_cycle(&self, report: &CycleReport<'_>);

    /// A cycle was skipped: it would have repeated the last one.
    fn on_skipped(&self) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl CycleObserver for NoopObserver {
    fn on_cycle(&self, _report: &CycleReport<'_>) {}
}

/// Runs the scheduler until `shutdown` completes; see the module docs. Returns an error
/// only when the caches cannot start.
pub async fn run(
    client: Client,
    options: SchedulerOptions,
    is_leader: impl Fn() -> bool + Send + Sync + 'static,
    observer: Arc<dyn CycleObserver>,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let trigger = Arc::new(Notify::new());
    let cache = Cache::start(&client, &options.scheduler_name, trigger.clone());
    let is_leader: Leader = Arc::new(is_leader);
    tokio::select! {
        r = schedule(client, options, cache, trigger, is_leader, observer) => r,
        () = shutdown => {
            tracing::info!("scheduler stopped");
            Ok(())
        }
    }
}

async fn schedule(
    client: Client,
    options: SchedulerOptions,
    cache: Cache,
    trigger: Arc<Notify>,
    is_leader: Leader,
    observer: Arc<dyn CycleObserver>,
) -> anyhow::Result<()> {
    cache.wait_ready().await?;
    tracing::info!(scheduler = %options.scheduler_name, "caches synced; scheduling");
    let mut state = State {
        overlay: Overlay::default(),
        intents: Intents::default(),
        marked: waiting::Marked::default(),
        group_pace: status::GroupPace::default(),
        halted: halted::Halted::default(),
        reported: BTreeSet::new(),
        unmarked: learn::Unmarked::default(),
        reuse: convert::Reuse::default(),
        quiet: None,
        skipped: 0,
    };
    let period = options.period.max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Whether this process has followed another leader since it last caught up.
    let mut followed = false;
    let mut guard = guard::Guard::default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = trigger.notified() => tokio::time::sleep(DEBOUNCE).await,
        }
        if !is_leader() {
            followed = true;
            continue;
        }
        if std::mem::take(&mut followed) {
            cache.catch_up(&client).await;
            state.quiet = None;
            guard.forget();
        }
        if !guard.holds(&client).await {
            let why = guard.why_not().unwrap_or_default();
            state.quiet = None;
            state.halted.report(&client, &options.scheduler_name, &cache, &mut state.overlay, &why).await;
            continue;
        }
        state.cycle(&client, &options, &cache, &is_leader, observer.as_ref()).await;
    }
}

struct State {
    overlay: Overlay,
    intents: Intents,
    /// When the pods of each waiting group were last marked.
    marked: waiting::Marked,
    /// The forecast-write budget and the Events emitted on PodGroups.
    group_pace: status::GroupPace,
    /// What a halt of scheduling has told the pods and Queues.
    halted: halted::Halted,
    /// The conversion's problems of the last cycle, so that each is logged once.
    reported: BTreeSet<convert::Problem>,
    /// Completed runs recorded in their queue's learned run times, their group not marked yet.
    unmarked: learn::Unmarked,
    /// The last conversion, reused while the objects are unchanged.
    reuse: convert::Reuse,
    /// Set by a cycle the next would repeat, while it still would.
    quiet: Option<Quiet>,
    /// Cycles skipped so far.
    skipped: u64,
}

/// What a cycle that would repeat itself leaves the next: it decided nothing, wrote
/// nothing and left nothing for later (no status or mark out of date, no bind intent, no
/// completed run unrecorded), so the next cycle comes out the same, and is skipped, while
/// the stores apply no watch event (but Node changes the conversion does not read) and the
/// time has not reached the first moment an answer the cycle read from the clock changes
/// ([`drover_scheduler::clock::Clock`]).
struct Quiet {
    /// The watch events applied before the cycle gathered its objects.
    events: cache::Events,
    /// Unix seconds.
    holds_until: i64,
}

impl State {
    async fn cycle(
        &mut self,
        client: &Client,
        options: &SchedulerOptions,
        cache: &Cache,
        is_leader: &Leader,
        observer: &dyn CycleObserver,
    ) {
        let started = Instant::now();
        if self.still_quiet(cache) {
            self.skipped += 1;
            observer.on_skipped();
            tracing::debug!(
                us = started.elapsed().as_micros() as u64,
                skipped = self.skipped,
                "cycle skipped: it would repeat the last"
            );
            return;
        }
        self.quiet = None;
        let events = cache.events();
        let writer = Writer {
            client,
            config: &options.config,
            scheduler_name: &options.scheduler_name,
            concurrency: options.bind_concurrency.max(1),
            period: options.period,
        };
        let mut g = cache.gather(&mut self.overlay);
        let now = jiff::Timestamp::now().as_second();
        let (converted, snap) = self.reuse.convert(&g, &options.scheduler_name, now);
        let problems: BTreeSet<convert::Problem> = converted.problems.iter().cloned().collect();
        for p in problems.difference(&self.reported) {
            let namespace = p.namespace.as_deref().unwrap_or("");
            tracing::warn!(kind = p.kind, namespace, name = %p.name, reason = %p.reason, "{}", p.message);
        }
        self.reported = problems;
        let mut snap = match snap {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "could not build the snapshot; skipping the cycle");
                let why = format!("it cannot build its snapshot of the cluster: {e}");
                self.halted.report(client, &options.scheduler_name, cache, &mut self.overlay, &why).await;
                return;
            }
        };
        let converted_at = started.elapsed();
        let (intents, overlay) = (&mut self.intents, &mut self.overlay);
        let recovery = recovery::recover(&writer, intents, overlay, &g, &converted, &mut snap, is_leader).await;
        if recovery.wrote {
            g = cache.gather(&mut self.overlay);
        }
        // Time-based fair share: the ledger from Queue status, brought to the current tick.
        let ledger = options.config.time_based().map(|time_based| {
            let mut ledger = converted.ledger.clone();
            ledger.step(&mut snap, &time_based);
            ledger
        });
        let core_from = started.elapsed();
        let mut actions = Vec::new();
        let outcome = run_cycle_observed(&snap, &options.config, &mut |a, d, _| actions.push((a, d)));
        let decided_at = started.elapsed();
        let mut evictions = 0;
        let mut binds = recovery.bound;
        // Writes wanted (made or failed) and work left for later, after the decisions.
        let mut outstanding = 0;
        if is_leader() {
            let d = &outcome.decisions;
            evictions = evict::evict_decisions(&writer, &mut self.overlay, &snap, &converted, &d.evictions).await;
        }
        if is_leader() {
            binds += bind::bind_decisions(
                &writer,
                &mut self.intents,
                &mut self.overlay,
                &g,
                &snap,
                &converted,
                &outcome.decisions.binds,
                &recovery.blocked,
                is_leader,
            )
            .await;
        }
        if is_leader() {
            // Bindings rewrote PodGroups (intent written and removed): status patches must
            // carry the versions those writes returned, or they fail with 409.
            if binds > 0 || evictions > 0 {
                g = cache.gather(&mut self.overlay);
            }
            let (overlay, pace) = (&mut self.overlay, &mut self.group_pace);
            outstanding += status::write_groups(&writer, overlay, pace, &g, &snap, &converted, &outcome).await;
            outstanding += learn::record(&writer, &mut self.unmarked, &mut self.overlay, &g, &converted).await;
            outstanding += queue_status::write_queues(&writer, &g, &snap, &outcome, ledger.as_ref()).await;
            outstanding +=
                waiting::mark(&writer, &mut self.marked, &mut self.overlay, &g, &snap, &converted, &outcome).await;
            self.halted.resumed(client, &options.scheduler_name, cache, &mut self.overlay).await;
            let report = CycleReport {
                duration: started.elapsed(),
                actions: &actions,
                recovered_binds: recovery.bound,
                snapshot: &snap,
                outcome: &outcome,
            };
            observer.on_cycle(&report);
            let repeats = outcome.decisions.is_empty() && !recovery.seen && !recovery.wrote && outstanding == 0;
            if repeats && is_leader() {
                self.quiet = Some(Quiet { events, holds_until: snap.clock.holds_until() });
            }
        }
        tracing::debug!(
            binds,
            evictions,
            ms = started.elapsed().as_millis() as u64,
            convert_ms = converted_at.as_millis() as u64,
            reused = self.reuse.reused(),
            core_ms = (decided_at - core_from).as_millis() as u64,
            "cycle done"
        );
    }

    /// Whether the last cycle left a [`Quiet`] that still holds. Node events alone do not end
    /// it when the Nodes still read as the last conversion's did.
    fn still_quiet(&mut self, cache: &Cache) -> bool {
        let Some(quiet) = self.quiet.as_mut() else { return false };
        let events = cache.events();
        if events.others != quiet.events.others || jiff::Timestamp::now().as_second() >= quiet.holds_until {
            return false;
        }
        if events.nodes != quiet.events.nodes {
            if !self.reuse.nodes_read_alike(&cache.nodes()) {
                return false;
            }
            quiet.events.nodes = events.nodes;
        }
        true
    }
}
