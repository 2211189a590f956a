//! PodGroup status, written with merge patches on `/status` only when it differs from what
//! the group already has, and the Events its changes deserve; forecast-only writes and Events
//! are paced (`pace.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_api::crd::conditions;
use drover_api::crd::elasticity::ResizeStatus;
use drover_api::crd::forecast::Forecast;
use drover_api::crd::podgroup::{Admission, Nomination, PodGroup, PodGroupPhase, PodGroupStatus, ReservationStatus};
use drover_api::crd::topology::TopologyPlacement;
use drover_kubeutil::events::{self, EventType};
use drover_scheduler::cycle::CycleOutcome;
use drover_scheduler::ids::{ti_vec, TiVec};
use drover_scheduler::plugin::Reservation;
use drover_scheduler::session::JobResize;
use drover_scheduler::snapshot::{JobId, JobPhase, NodeId, PodPhase, Snapshot};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use super::cache::{key_of, Key, Overlay};
use super::forecast;
use super::pace::{EventMemory, ForecastBudget};
use super::placement::placement;
use super::Writer;
use crate::convert::{Converted, ObjectLists, PodCounts, Problem};

pub use drover_api::crd::podgroup::UNSCHEDULABLE;
/// Condition type saying whether the group could be read.
pub const VALID: &str = "Valid";

/// What the core decided for a group this cycle.
#[derive(Clone, Copy)]
struct Decided<'a> {
    phase: JobPhase,
    reason: Option<&'a str>,
    reservation: Option<&'a ReservationStatus>,
    /// The queue and priority the core scheduled the group's job with.
    charged: &'a Admission,
    /// Whether the cycle preempted or reclaimed pods of the group.
    preempted: bool,
    /// Where its bound and nominated pods sit in its topology.
    placement: Option<&'a TopologyPlacement>,
    /// Its pods pipelined this cycle, with their nodes (its kept claim).
    nominations: &'a [Nomination],
    /// The size the cycle resized it to, if it did (an elastic group).
    resize: Option<&'a JobResize>,
    /// While its gang waits: the forecast its status should show.
    forecast: Option<&'a Forecast>,
    /// When the loan of reserved capacity the cycle started it on is due, if it did.
    loan: Option<i64>,
}

/// The status the scheduler wants a group to have.
fn desired(group: &PodGroup, core: Option<Decided>, counts: PodCounts, problem: Option<&Problem>) -> PodGroupStatus {
    let current = group.status.clone().unwrap_or_default();
    let generation = group.metadata.generation;
    let mut status = current.clone();
    let all_finished = counts.total > 0 && counts.succeeded + counts.failed == counts.total;
    status.phase = match current.phase {
        // A finished group stays finished unless the core has it again (a restarted job).
        PodGroupPhase::Completed | PodGroupPhase::Failed if core.is_none() => current.phase,
        _ if all_finished => {
            if counts.failed == 0 || counts.succeeded >= group.spec.min_member {
                PodGroupPhase::Completed
            } else {
                PodGroupPhase::Failed
            }
        }
        phase => match core.map(|c| c.phase) {
            Some(JobPhase::Pending) => PodGroupPhase::Pending,
            Some(JobPhase::Inqueue) => PodGroupPhase::Inqueue,
            Some(JobPhase::Running) => PodGroupPhase::Running,
            None => phase,
        },
    };
    status.reservation = core.and_then(|c| c.reservation).cloned();
    if let Some(c) = core {
        status.topology = c.placement.cloned();
    }
    // A group left out of the cycle has no claim the next cycle could keep.
    status.nominations = core.map(|c| c.nominations.to_vec()).unwrap_or_default();
    let now = jiff::Timestamp::now();
    if core.is_some_and(|c| c.preempted) {
        status.preempted_at = Some(Time(now));
    }
    // A resize is kept until the next one: its controller restarts the group at that size.
    if let Some(r) = core.and_then(|c| c.resize) {
        if current.resize.as_ref().is_none_or(|old| (old.from, old.replicas) != (r.from, r.to)) {
            let reason = r.why.clone();
            status.resize = Some(ResizeStatus { from: r.from, replicas: r.to, reason, decided_at: Some(Time(now)) });
        }
    }
    // The admission is recorded once, when the group is admitted, and kept while it is
    // admitted: the group's pods stay charged to it whatever the spec says later.
    status.admission = match status.phase {
        PodGroupPhase::Inqueue | PodGroupPhase::Running => {
            current.admission.clone().or_else(|| core.map(|c| c.charged.clone()))
        }
        _ => None,
    };
    status.forecast = core.and_then(|c| c.forecast).cloned();
    // A loan is kept while the group runs on it, and ends with its run.
    status.borrowed_until = match core.and_then(|c| c.loan) {
        Some(due) => Some(Time(jiff::Timestamp::from_second(due).unwrap_or(jiff::Timestamp::MAX))),
        None if status.phase != PodGroupPhase::Running || core.is_some_and(|c| c.preempted) => None,
        None => current.borrowed_until.clone(),
    };
    // A run is recorded in its queue's learned run times once it completes; a group that
    // runs again is recorded again when that run completes.
    if status.phase != PodGroupPhase::Completed {
        status.recorded_run_time_seconds = None;
    }
    status.running = counts.running;
    status.succeeded = counts.succeeded;
    status.failed = counts.failed;
    status.observed_generation = generation;
    let finished = matches!(status.phase, PodGroupPhase::Completed | PodGroupPhase::Failed);
    match (core, problem) {
        (_, Some(p)) => {
            conditions::set(&mut status.conditions, VALID, false, &p.reason, &p.message, now, generation);
        }
        _ if status.conditions.iter().any(|c| c.type_ == VALID && c.status != "True") => {
            conditions::set(&mut status.conditions, VALID, true, "Valid", "", now, generation);
        }
        _ => {}
    }
    match (core.map(|c| c.reason), problem) {
        (Some(Some(reason)), _) if !finished => {
            conditions::set(&mut status.conditions, UNSCHEDULABLE, true, UNSCHEDULABLE, reason, now, generation);
        }
        (Some(_), _) => {
            conditions::set(&mut status.conditions, UNSCHEDULABLE, false, "Scheduled", "", now, generation);
        }
        // Left out of the cycle (a closed or missing queue, an invalid spec): that is why it
        // waits, and the reason column shows it.
        (None, Some(p)) if !finished => {
            conditions::set(&mut status.conditions, UNSCHEDULABLE, true, &p.reason, &p.message, now, generation);
        }
        (None, _) if finished && status.conditions.iter().any(|c| c.type_ == UNSCHEDULABLE && c.status == "True") => {
            conditions::set(&mut status.conditions, UNSCHEDULABLE, false, "Finished", "", now, generation);
        }
        (None, _) => {}
    }
    status
}

/// Every PodGroup whose status the cycle changes, with the status it should have: phase,
/// counts, conditions, reservation, the admission record, the forecast of a waiting gang (an
/// expected start that moved by less than `period` kept, see `forecast.rs`) and loans. The
/// scheduler writes these; a test can apply them to objects it holds.
pub fn wanted_group_statuses<'g>(
    pod_groups: &'g [Arc<PodGroup>],
    snap: &Snapshot,
    converted: &Converted,
    outcome: &CycleOutcome,
    period: Duration,
) -> Vec<(&'g Arc<PodGroup>, PodGroupStatus)> {
    let reservations: HashMap<JobId, ReservationStatus> =
        outcome.reservations.iter().map(|r| (r.job, reservation_status(snap, r))).collect();
    let charged: TiVec<JobId, Admission> = snap
        .jobs
        .iter()
        .map(|job| Admission {
            queue: snap.queues[job.queue].name.clone(),
            priority_class_name: job.priority_class.clone(),
            priority: job.priority,
            preemptible: job.preemptible,
        })
        .collect();
    let mut preempted: TiVec<JobId, bool> = ti_vec![false; snap.jobs.len()];
    for job in outcome.decisions.preempted_jobs(snap) {
        preempted[job] = true;
    }
    let placements = placements(snap, outcome);
    let mut nominations: TiVec<JobId, Vec<Nomination>> = ti_vec![Vec::new(); snap.jobs.len()];
    for &(p, n) in &outcome.decisions.pipelined {
        let pod = converted.pods[p].name.clone();
        nominations[snap.pods[p].job].push(Nomination { pod, node: snap.nodes[n].name.clone() });
    }
    for list in nominations.iter_mut() {
        list.sort_by(|a, b| a.pod.cmp(&b.pod));
    }
    let resizes: HashMap<JobId, &JobResize> = outcome.decisions.resizes.iter().map(|r| (r.job, r)).collect();
    let loans: HashMap<JobId, i64> = outcome.decisions.loans.iter().copied().collect();
    let shown: HashMap<Key, &Forecast> =
        pod_groups.iter().filter_map(|g| Some((key_of(&g.metadata), g.status.as_ref()?.forecast.as_ref()?))).collect();
    let forecasts: TiVec<JobId, Option<Forecast>> = forecast::forecasts(snap, outcome, period)
        .into_iter_enumerated()
        .map(|(j, f)| {
            let job = &snap.jobs[j];
            let current = shown.get(&(job.namespace.clone(), job.name.clone())).copied();
            f.map(|f| forecast::settle(current, f, &snap.clock, period))
        })
        .collect();
    let mut core: HashMap<Key, Decided> = HashMap::new();
    for (j, job) in snap.jobs.iter_enumerated() {
        let reason = outcome.reasons.get(j).and_then(|r| r.as_deref());
        let phase = outcome.job_phase.get(j).copied().unwrap_or(job.phase);
        let decided = Decided {
            phase,
            reason,
            reservation: reservations.get(&j),
            charged: &charged[j],
            preempted: preempted[j],
            placement: placements[j].as_ref(),
            nominations: &nominations[j],
            resize: resizes.get(&j).copied(),
            forecast: forecasts[j].as_ref(),
            loan: loans.get(&j).copied(),
        };
        core.insert((job.namespace.clone(), job.name.clone()), decided);
    }
    let mut problems: HashMap<Key, &Problem> = HashMap::new();
    for p in converted.problems.iter().filter(|p| p.kind == "PodGroup") {
        problems.entry((p.namespace.clone().unwrap_or_default(), p.name.clone())).or_insert(p);
    }
    let mut out = Vec::new();
    for group in pod_groups {
        let key = key_of(&group.metadata);
        let counts = converted.groups.get(&key).map(|f| f.counts).unwrap_or_default();
        let want = desired(group, core.get(&key).copied(), counts, problems.get(&key).copied());
        if group.status.as_ref() != Some(&want) {
            out.push((group, want));
        }
    }
    out
}

/// Per job, where its pods stay or go after the cycle (bound and not evicted, newly bound,
/// nominated) sit in its topology.
fn placements(snap: &Snapshot, outcome: &CycleOutcome) -> TiVec<JobId, Option<TopologyPlacement>> {
    let d = &outcome.decisions;
    let mut nodes: TiVec<JobId, Vec<NodeId>> = ti_vec![Vec::new(); snap.jobs.len()];
    let evicted: std::collections::HashSet<_> = d.evictions.iter().map(|e| e.0).collect();
    for (p, pod) in snap.pods.iter_enumerated() {
        if let PodPhase::Bound(n) = pod.phase {
            if !evicted.contains(&p) {
                nodes[pod.job].push(n);
            }
        }
    }
    for &(p, n) in d.binds.iter().chain(&d.pipelined) {
        nodes[snap.pods[p].job].push(n);
    }
    nodes.into_iter_enumerated().map(|(j, list)| placement(snap, j, list)).collect()
}

/// The merge patch turning a group's status into `want`, carrying the group's
/// resourceVersion (optimistic concurrency).
fn group_patch(group: &PodGroup, want: &PodGroupStatus) -> Option<Value> {
    let mut status = serde_json::to_value(want).ok()?;
    // A merge patch removes only what it sets to null.
    for (field, gone) in [
        ("reservation", want.reservation.is_none()),
        ("admission", want.admission.is_none()),
        ("nominations", want.nominations.is_empty()),
        ("forecast", want.forecast.is_none()),
        ("borrowedUntil", want.borrowed_until.is_none()),
        ("recordedRunTimeSeconds", want.recorded_run_time_seconds.is_none()),
    ] {
        if gone {
            status[field] = Value::Null;
        }
    }
    if let Some(Value::Object(f)) = status.get_mut("forecast") {
        // A merge patch keeps the fields it leaves out.
        for field in ["expectedStart", "earliestStart", "latestStart", "eta", "toStart"] {
            f.entry(field).or_insert(Value::Null);
        }
    }
    match &want.topology {
        None => status["topology"] = Value::Null,
        Some(t) => {
            status["topology"]["level"] = json!(t.level);
            status["topology"]["domain"] = json!(t.domain);
        }
    }
    Some(json!({"metadata": {"resourceVersion": group.metadata.resource_version}, "status": status}))
}

/// An Event a group's status change deserves.
struct GroupEvent {
    kind: EventType,
    reason: String,
    message: String,
}

/// Writes one group's status, then its Events; returns the group, the Events and the result.
async fn write_group(
    writer: &Writer<'_>,
    group: Arc<PodGroup>,
    patch: Value,
    events: Vec<GroupEvent>,
) -> (Arc<PodGroup>, Vec<GroupEvent>, kube::Result<PodGroup>) {
    let (namespace, name) = key_of(&group.metadata);
    let api: Api<PodGroup> = Api::namespaced(writer.client.clone(), &namespace);
    let result = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
    if result.is_ok() {
        for e in &events {
            events::publish(writer.client, "drover-scheduler", group.as_ref(), e.kind, &e.reason, &e.message).await;
        }
    }
    (group, events, result)
}

/// The Events a group's change from its status to `want` deserves that `memory` has not seen:
/// a new resize, and a condition that turned bad (`newly_failing`).
fn group_events(group: &PodGroup, want: &PodGroupStatus, memory: &EventMemory, now: Instant) -> Vec<GroupEvent> {
    let mut out = Vec::new();
    if let Some(resize) = want.resize.as_ref().filter(|r| Some(*r) != current_resize(group)) {
        let (from, to) = (resize.from, resize.replicas);
        let message = format!("restart with {to} pods instead of {from}: {}", resize.reason);
        out.push(GroupEvent { kind: EventType::Normal, reason: "Resized".into(), message });
    }
    if let Some((reason, message)) = newly_failing(group.status.as_ref(), want) {
        out.push(GroupEvent { kind: EventType::Warning, reason, message });
    }
    let key = key_of(&group.metadata);
    out.retain(|e| memory.is_new("PodGroup", &key, &e.reason, &e.message, now));
    out
}

/// Whether `want` differs from the group's status only in what reports rather than decides:
/// its forecast, and the message of an `Unschedulable` condition whose status and reason stay
/// (the figures a waiting gang's reason quotes, such as its queue's use, move with every start
/// and end in the queue).
fn report_only(group: &PodGroup, want: &PodGroupStatus) -> bool {
    let mut current = group.status.clone().unwrap_or_default();
    current.forecast.clone_from(&want.forecast);
    let wanted = want.conditions.iter().find(|c| c.type_ == UNSCHEDULABLE);
    if let (Some(c), Some(w)) = (current.conditions.iter_mut().find(|c| c.type_ == UNSCHEDULABLE), wanted) {
        if (&c.status, &c.reason) == (&w.status, &w.reason) {
            c.message.clone_from(&w.message);
            c.last_transition_time = w.last_transition_time.clone();
        }
    }
    current == *want
}

/// What pacing the group writes keeps from cycle to cycle (`pace.rs`).
#[derive(Debug, Default)]
pub(super) struct GroupPace {
    forecasts: ForecastBudget,
    events: EventMemory,
}

/// Writes every PodGroup status that changed, `writer.concurrency` at a time; changes that
/// only report (`report_only`) as `pace`'s budget allows, the gangs nearest the front first. Returns the number
/// that had changed, written or not (none: the statuses are current).
pub(super) async fn write_groups(
    writer: &Writer<'_>,
    overlay: &mut Overlay,
    pace: &mut GroupPace,
    g: &ObjectLists,
    snap: &Snapshot,
    converted: &Converted,
    outcome: &CycleOutcome,
) -> usize {
    let now = Instant::now();
    pace.events.forget_expired(now);
    let (mut forecasts, mut writes): (Vec<_>, Vec<_>) =
        wanted_group_statuses(&g.pod_groups, snap, converted, outcome, writer.period)
            .into_iter()
            .partition(|(group, want)| report_only(group, want));
    let wanted = writes.len() + forecasts.len();
    forecasts.sort_by_key(|(_, want)| want.forecast.as_ref().map_or(u32::MAX, |f| f.position));
    forecasts.truncate(pace.forecasts.take(forecasts.len(), now));
    writes.append(&mut forecasts);
    let writes: Vec<_> = writes
        .into_iter()
        .filter_map(|(group, want)| {
            let events = group_events(group, &want, &pace.events, now);
            Some((group.clone(), group_patch(group, &want)?, events))
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(writes)
        .map(|(group, patch, events)| write_group(writer, group, patch, events))
        .buffer_unordered(writer.concurrency)
        .collect()
        .await;
    for (group, events, result) in results {
        match result {
            Ok(new) => {
                let key = key_of(&group.metadata);
                for e in &events {
                    pace.events.emitted("PodGroup", &key, &e.reason, &e.message, now);
                }
                overlay.group_written(group.metadata.resource_version.clone(), new);
            }
            Err(e) => {
                let (namespace, name) = key_of(&group.metadata);
                tracing::debug!(%namespace, group = %name, error = %e, "pod group status not written; retrying next cycle")
            }
        }
    }
    wanted
}

fn current_resize(group: &PodGroup) -> Option<&ResizeStatus> {
    group.status.as_ref()?.resize.as_ref()
}

/// A reservation as PodGroup status shows it: node names in order and the start in RFC 3339.
fn reservation_status(snap: &Snapshot, r: &Reservation) -> ReservationStatus {
    let mut nodes: Vec<String> = r.nodes.iter().map(|(n, _)| snap.nodes[*n].name.clone()).collect();
    nodes.sort();
    let start = jiff::Timestamp::from_second(r.start).unwrap_or(jiff::Timestamp::MAX);
    ReservationStatus { nodes, start_time: start.to_string() }
}

/// The Warning a status change deserves: a condition (`Unschedulable` or `Valid`) that turned
/// bad, or whose message changed while bad. Reasons repeat in status every cycle; Events only
/// when something changed, so `kubectl describe` stays readable. A group that runs is not
/// warned that it is `Unschedulable`: that is about pods beyond its minimum, which it does
/// not need (its condition still says why they wait).
fn newly_failing(old: Option<&PodGroupStatus>, new: &PodGroupStatus) -> Option<(String, String)> {
    let runs = new.phase == PodGroupPhase::Running;
    let bad = |c: &Condition| {
        (c.type_ == UNSCHEDULABLE && c.status == "True" && !runs) || (c.type_ == VALID && c.status == "False")
    };
    new.conditions.iter().filter(|c| bad(c)).find_map(|c| {
        let before = old.and_then(|o| o.conditions.iter().find(|p| p.type_ == c.type_));
        let changed = before.is_none_or(|p| !bad(p) || p.message != c.message);
        changed.then(|| (c.reason.clone(), c.message.clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cycle's decision of `phase` for a job charged `charged`, with nothing else decided.
    fn decided(phase: JobPhase, charged: &Admission) -> Decided<'_> {
        Decided {
            phase,
            reason: None,
            reservation: None,
            charged,
            preempted: false,
            placement: None,
            nominations: &[],
            resize: None,
            forecast: None,
            loan: None,
        }
    }

    fn failed_group() -> PodGroup {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": 2}, "status": {"phase": "Failed"}
        }))
        .expect("a PodGroup")
    }

    #[test]
    fn a_finished_group_stays_finished_unless_the_core_schedules_it_again() {
        let group = failed_group();
        let idle = desired(&group, None, PodCounts::default(), None);
        assert_eq!(idle.phase, PodGroupPhase::Failed);
        let restarted = PodCounts { total: 2, ..PodCounts::default() };
        let charged = Admission::default();
        let waiting = Decided { reason: Some("waiting"), ..decided(JobPhase::Pending, &charged) };
        let again = desired(&group, Some(waiting), restarted, None);
        assert_eq!(again.phase, PodGroupPhase::Pending, "a restarted job's group is live again");
        let unschedulable = again.conditions.iter().find(|c| c.type_ == UNSCHEDULABLE).expect("a condition");
        assert_eq!((unschedulable.status.as_str(), unschedulable.message.as_str()), ("True", "waiting"));
    }

    #[test]
    fn a_resize_is_recorded_once_and_kept_until_the_next() {
        let mut group = failed_group();
        group.status = None;
        let charged = Admission::default();
        let shrink = JobResize { job: JobId(0), from: 16, to: 4, why: "no room".into() };
        let cycle = |resize| Decided { resize, ..decided(JobPhase::Pending, &charged) };
        let decided = desired(&group, Some(cycle(Some(&shrink))), PodCounts::default(), None);
        let recorded = decided.resize.clone().expect("the decision is recorded");
        assert_eq!((recorded.from, recorded.replicas, recorded.reason.as_str()), (16, 4, "no room"));
        group.status = Some(decided);
        let later = desired(&group, Some(cycle(None)), PodCounts::default(), None);
        assert_eq!(later.resize.as_ref(), Some(&recorded), "kept while nothing new is decided");
        let again = desired(&group, Some(cycle(Some(&shrink))), PodCounts::default(), None);
        assert_eq!(again.resize.as_ref(), Some(&recorded), "the same decision is not stamped again");
    }

    #[test]
    fn a_loan_is_kept_while_its_group_runs_and_a_forecast_while_it_waits() {
        let mut group = failed_group();
        group.status = Some(PodGroupStatus { phase: PodGroupPhase::Running, ..PodGroupStatus::default() });
        let charged = Admission::default();
        let forecast = Forecast { queue_position: 1, position: 1, ..Forecast::default() };
        let cycle =
            |phase, loan, preempted, forecast| Decided { loan, preempted, forecast, ..decided(phase, &charged) };
        let running = PodCounts { total: 2, running: 2, ..PodCounts::default() };
        let lent = desired(&group, Some(cycle(JobPhase::Running, Some(1_900_000_000), false, None)), running, None);
        let due = lent.borrowed_until.clone().map(|t| t.0.as_second());
        assert_eq!(due, Some(1_900_000_000), "the loan is recorded");
        group.status = Some(lent);
        let kept = desired(&group, Some(cycle(JobPhase::Running, None, false, None)), running, None);
        assert_eq!(kept.borrowed_until.map(|t| t.0.as_second()), due, "kept while the group runs");
        let evicted = desired(&group, Some(cycle(JobPhase::Running, None, true, None)), running, None);
        assert_eq!(evicted.borrowed_until, None, "a group evicted has given the capacity back");
        let waits = desired(&group, Some(cycle(JobPhase::Inqueue, None, false, Some(&forecast))), running, None);
        assert_eq!(waits.borrowed_until, None, "waiting again: no loan");
        assert_eq!(waits.forecast.as_ref(), Some(&forecast), "a waiting gang shows its forecast");
        group.status = Some(waits);
        let runs = desired(&group, Some(cycle(JobPhase::Running, None, false, None)), running, None);
        assert_eq!(runs.forecast, None, "a gang that runs has no forecast");
    }

    #[test]
    fn a_recorded_run_stays_recorded_until_the_group_runs_again() {
        let mut group = failed_group();
        let status = PodGroupStatus {
            phase: PodGroupPhase::Completed,
            recorded_run_time_seconds: Some(600),
            ..PodGroupStatus::default()
        };
        group.status = Some(status);
        let done = PodCounts { total: 1, succeeded: 1, ..PodCounts::default() };
        assert_eq!(desired(&group, None, done, None).recorded_run_time_seconds, Some(600));
        let charged = Admission::default();
        let again = Decided { reason: Some("waiting"), ..decided(JobPhase::Pending, &charged) };
        let restarted = PodCounts { total: 1, ..PodCounts::default() };
        let live = desired(&group, Some(again), restarted, None);
        assert_eq!((live.phase, live.recorded_run_time_seconds), (PodGroupPhase::Pending, None));
    }
}
