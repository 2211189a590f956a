//! The pods of groups that cannot start, marked where Kubernetes users and tools look, as
//! kube-scheduler marks the pods it cannot place: the condition `PodScheduled=False` with the
//! core's reason for the group as its message (the text of the PodGroup's `Unschedulable`
//! condition), and a `FailedScheduling` Warning Event on the pod when that message changes to
//! one the pod was not told within the hour (`pace.rs`), unless its group runs: a running
//! group's pending pods are beyond its minimum, and their condition says why they wait.
//!
//! **Which pods.** Every pending pod (no node, not being deleted) of a job that the core gives
//! a reason and for which the cycle placed nothing (not even on capacity being freed), whether
//! its group is admitted or not. The condition's reason says whether more nodes could help,
//! as the core's refusal says ([`Rule::more_nodes_help`]): [`POD_UNSCHEDULABLE`], which the
//! cluster autoscaler and Karpenter scale up for, or [`WAITING_FOR_QUOTA`] when the group's
//! queue's own quota holds it (its limit, or the deserved quota non-preemptible work must
//! stay within) or its elastic pods wait out the regrow delay after a preemption, which they
//! ignore: nodes added for it would stay empty; [`WAITING_FOR_PODS`] when its gang has fewer
//! pods than its minimum.
//!
//! **All or none.** The pods of one group that need a write are written in the same cycle,
//! so an autoscaler sees a whole gang or none of it.
//!
//! **Rate.** Only what changed is written. At most [`PODS_PER_CYCLE`] pods a cycle, whole
//! groups (a group larger than that goes alone): groups needing a new status or reason
//! first, each kind by how long ago it was last marked (never first). A group whose pods
//! have the right status and reason but an older message (reasons quote numbers that move)
//! is rewritten at most every
//! [`MESSAGE_REFRESH`]; a new status or reason is written at once.
//!
//! **Binding** writes nothing here: the API server sets `PodScheduled=True` when it accepts a
//! binding (`e2e/system/tests/autoscaler_view.rs` checks it).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use drover_kubeutil::events::EventType;
use drover_scheduler::cycle::CycleOutcome;
use drover_scheduler::plugin::Rule;
use drover_scheduler::session::PodState;
use drover_scheduler::snapshot::{JobPhase, Snapshot};
use futures::StreamExt;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::api;
use super::cache::{Key, Overlay};
use super::pace::EventMemory;
use super::Writer;
use crate::convert::{Converted, ObjectLists, PodRef};

/// The condition type kube-scheduler reports on.
pub const POD_SCHEDULED: &str = "PodScheduled";
/// The reason of a pod more nodes could let start (kube-scheduler's, which autoscalers read).
pub const POD_UNSCHEDULABLE: &str = "Unschedulable";
/// The reason of a pod its queue's quota holds: more nodes would not let it start.
pub const WAITING_FOR_QUOTA: &str = "WaitingForQuota";
/// The reason of a pod whose gang has fewer pods than its minimum: more must be created, and
/// more nodes would not help.
pub const WAITING_FOR_PODS: &str = "WaitingForPods";
/// The Event reason kube-scheduler uses for a pod it cannot place.
pub const FAILED_SCHEDULING: &str = "FailedScheduling";
/// Pods marked per cycle at most.
pub const PODS_PER_CYCLE: usize = 256;
/// How often a group's pods are rewritten when only the message changed.
pub const MESSAGE_REFRESH: Duration = Duration::from_secs(300);

/// When each group's pods were last written, for the rate rule, and the Events emitted.
#[derive(Debug, Default)]
pub(super) struct Marked {
    at: HashMap<Key, Instant>,
    events: EventMemory,
}

/// One pod to write.
struct PodMark {
    pod: PodRef,
    condition: PodCondition,
    /// The message changed: an Event goes with the write.
    event: bool,
}

/// A waiting group and the writes its pods need.
struct GroupMarks {
    key: Key,
    pods: Vec<PodMark>,
    /// A pod lacks the status or reason (not only the message).
    urgent: bool,
}

/// Every waiting group, with what its pods need; Events only for a group that does not run
/// (the pods a running group waits for are beyond its minimum) and where `events` has not
/// seen the same one on the pod.
fn wanted(
    g: &ObjectLists,
    snap: &Snapshot,
    converted: &Converted,
    outcome: &CycleOutcome,
    events: &EventMemory,
    instant: Instant,
) -> Vec<GroupMarks> {
    let pods = g.pods_by_key();
    let now = Time(jiff::Timestamp::now());
    let mut out = Vec::new();
    for (j, job) in snap.jobs.iter_enumerated() {
        let Some(message) = outcome.reasons.get(j).and_then(|r| r.as_deref()).filter(|m| !m.is_empty()) else {
            continue;
        };
        let ids: Vec<_> = job.tasks.iter().flat_map(|t| &t.pods).copied().collect();
        if ids.iter().any(|&p| matches!(outcome.pod_state[p], PodState::Allocated(_) | PodState::Pipelined(_))) {
            continue;
        }
        let reason = match outcome.blocked_by[j] {
            Some(by) if by.rule == Rule::GangShortOfPods => WAITING_FOR_PODS,
            Some(by) if !by.rule.more_nodes_help() => WAITING_FOR_QUOTA,
            _ => POD_UNSCHEDULABLE,
        };
        let runs = outcome.job_phase.get(j).copied().unwrap_or(job.phase) == JobPhase::Running;
        let mut group = GroupMarks { key: (job.namespace.clone(), job.name.clone()), pods: Vec::new(), urgent: false };
        for p in ids.into_iter().filter(|&p| outcome.pod_state[p] == PodState::Pending) {
            let Some(r) = converted.pods.get(p) else { continue }; // a stand-in for a pod not made yet
            let Some(pod) = pods.get(&(r.namespace.clone(), r.name.clone())) else { continue };
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
            if pod.metadata.uid != r.uid || bound || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
            let current = conditions.iter().find(|c| c.type_ == POD_SCHEDULED);
            let unscheduled = current.filter(|c| c.status == "False");
            let same_reason = unscheduled.is_some_and(|c| c.reason.as_deref() == Some(reason));
            let same_message = current.is_some_and(|c| c.message.as_deref().unwrap_or_default() == message);
            if same_reason && same_message {
                continue;
            }
            group.urgent |= !same_reason;
            let condition = PodCondition {
                type_: POD_SCHEDULED.to_string(),
                status: "False".to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
                last_transition_time: Some(
                    unscheduled.and_then(|c| c.last_transition_time.clone()).unwrap_or(now.clone()),
                ),
                ..PodCondition::default()
            };
            let pod_key = (r.namespace.clone(), r.name.clone());
            let event = !same_message && !runs && events.is_new("Pod", &pod_key, FAILED_SCHEDULING, message, instant);
            group.pods.push(PodMark { pod: r.clone(), condition, event });
        }
        out.push(group);
    }
    out
}

/// The groups to write this cycle, by the rate rule of the module docs.
fn due(marked: &Marked, groups: Vec<GroupMarks>, now: Instant) -> Vec<GroupMarks> {
    let last = |g: &GroupMarks| marked.at.get(&g.key).copied();
    let mut due: Vec<GroupMarks> = groups
        .into_iter()
        .filter(|g| !g.pods.is_empty())
        .filter(|g| g.urgent || last(g).is_none_or(|t| now.duration_since(t) >= MESSAGE_REFRESH))
        .collect();
    due.sort_by_key(|g| (!g.urgent, last(g)));
    let mut budget = PODS_PER_CYCLE;
    let mut chosen = Vec::new();
    for g in due {
        if !chosen.is_empty() && g.pods.len() > budget {
            continue;
        }
        budget = budget.saturating_sub(g.pods.len());
        chosen.push(g);
    }
    chosen
}

/// Marks the pending pods of the groups that cannot start; see the module docs. Returns the
/// number of pods whose mark is not current, written now or left for a later cycle by the
/// rate rule (none: every waiting pod shows its group's reason).
pub(super) async fn mark(
    writer: &Writer<'_>,
    marked: &mut Marked,
    overlay: &mut Overlay,
    g: &ObjectLists,
    snap: &Snapshot,
    converted: &Converted,
    outcome: &CycleOutcome,
) -> usize {
    let now = Instant::now();
    marked.events.forget_expired(now);
    let groups = wanted(g, snap, converted, outcome, &marked.events, now);
    let stale = groups.iter().map(|g| g.pods.len()).sum();
    let waiting: HashSet<&Key> = groups.iter().map(|g| &g.key).collect();
    marked.at.retain(|k, _| waiting.contains(k));
    let chosen = due(marked, groups, now);
    let work: Vec<(Key, PodMark)> =
        chosen.into_iter().flat_map(|g| g.pods.into_iter().map(move |p| (g.key.clone(), p))).collect();
    let client = writer.client.clone();
    let component = writer.scheduler_name.to_string();
    let results: Vec<(Key, PodMark, Result<(), String>)> = futures::stream::iter(work)
        .map(move |(key, mark)| {
            let (client, component) = (client.clone(), component.clone());
            async move {
                let result = api::set_pod_condition(&client, &mark.pod, &mark.condition).await;
                if result.is_ok() && mark.event {
                    let message = mark.condition.message.as_deref().unwrap_or_default();
                    api::pod_event(&client, &component, &mark.pod, EventType::Warning, FAILED_SCHEDULING, message)
                        .await;
                }
                (key, mark, result)
            }
        })
        .buffer_unordered(writer.concurrency)
        .collect()
        .await;
    for (key, mark, result) in results {
        match result {
            Ok(()) => {
                if mark.event {
                    let message = mark.condition.message.as_deref().unwrap_or_default();
                    let pod_key = (mark.pod.namespace.clone(), mark.pod.name.clone());
                    marked.events.emitted("Pod", &pod_key, FAILED_SCHEDULING, message, now);
                }
                overlay.pod_condition(&mark.pod, mark.condition);
                marked.at.insert(key, now);
            }
            Err(e) => tracing::debug!(error = %e, "pod condition not written; retrying next cycle"),
        }
    }
    stale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, pods: usize, urgent: bool) -> GroupMarks {
        let mark = |i: usize| PodMark {
            pod: PodRef { namespace: "ns".into(), name: format!("{name}-{i}"), uid: None, resource_version: None },
            condition: PodCondition::default(),
            event: false,
        };
        GroupMarks { key: ("ns".into(), name.into()), pods: (0..pods).map(mark).collect(), urgent }
    }

    fn names(groups: &[GroupMarks]) -> Vec<&str> {
        groups.iter().map(|g| g.key.1.as_str()).collect()
    }

    #[test]
    fn whole_groups_within_the_cycle_budget_never_marked_first() {
        let now = Instant::now();
        let mut marked = Marked::default();
        marked.at.insert(("ns".into(), "old".into()), now - MESSAGE_REFRESH * 2);
        let groups = vec![
            group("old", 10, true),
            group("new", PODS_PER_CYCLE - 5, true),
            group("too-big-now", 10, true),
            group("small", 5, true),
        ];
        let chosen = due(&marked, groups, now);
        assert_eq!(names(&chosen), ["new", "small"], "groups that do not fit whole wait for the next cycle");
        assert!(chosen.iter().all(|g| g.pods.len() == 5 || g.pods.len() == PODS_PER_CYCLE - 5));
    }

    #[test]
    fn a_group_larger_than_the_budget_goes_alone() {
        let chosen = due(&Marked::default(), vec![group("huge", PODS_PER_CYCLE + 1, true)], Instant::now());
        assert_eq!(chosen[0].pods.len(), PODS_PER_CYCLE + 1);
    }

    #[test]
    fn a_new_message_alone_waits_for_the_refresh_interval() {
        let now = Instant::now();
        let mut marked = Marked::default();
        marked.at.insert(("ns".into(), "g".into()), now - MESSAGE_REFRESH / 2);
        assert!(due(&marked, vec![group("g", 2, false)], now).is_empty(), "only the message changed, too soon");
        assert_eq!(due(&marked, vec![group("g", 2, true)], now).len(), 1, "a new reason goes at once");
        marked.at.insert(("ns".into(), "g".into()), now - MESSAGE_REFRESH);
        assert_eq!(due(&marked, vec![group("g", 2, false)], now).len(), 1, "the message is refreshed in time");
    }
}
