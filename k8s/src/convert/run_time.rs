//! A group's run times from what only Kubernetes writes: pods' `activeDeadlineSeconds` (which
//! the kubelet enforces) and `status.startTime`.

use super::member::Member;
use drover_scheduler::snapshot::PodPhaseInput;

/// A group's declared run time and the expected end of its running pods, from the pods'
/// `activeDeadlineSeconds`, which the kubelet enforces (a pod is stopped when it runs longer),
/// so a tenant cannot claim a shorter run than it gets. The run time is known when every pod
/// declares one (the longest); the end, when every running pod declares one and has started
/// (its start plus its deadline, the latest of them).
pub(super) fn run_times(members: &[Member]) -> (Option<i64>, Option<i64>) {
    let deadline = |m: &Member| m.info.pod.spec.as_ref().and_then(|s| s.active_deadline_seconds).filter(|d| *d > 0);
    let latest = |v: Option<Vec<i64>>| v.and_then(|v| v.into_iter().max());
    let run_time = latest(members.iter().map(deadline).collect());
    let running: Vec<&Member> =
        members.iter().filter(|m| !matches!(m.phase, PodPhaseInput::Pending | PodPhaseInput::Nominated(_))).collect();
    let ends_at = if running.is_empty() {
        None
    } else {
        latest(
            running
                .iter()
                .map(|m| {
                    let started = m.info.pod.status.as_ref().and_then(|s| s.start_time.as_ref())?;
                    Some(started.0.as_second().saturating_add(deadline(m)?))
                })
                .collect(),
        )
    };
    (run_time, ends_at)
}

/// When the group's earliest bound pod started, from the pods' `status.startTime`, which
/// only the kubelet writes (a tenant cannot make its running work look younger than it is,
/// to stretch a minimum run time). Pods being evicted do not count.
pub(super) fn started_at(members: &[Member]) -> Option<i64> {
    let bound = members.iter().filter(|m| matches!(m.phase, PodPhaseInput::Bound(_)));
    bound.filter_map(|m| Some(m.info.pod.status.as_ref()?.start_time.as_ref()?.0.as_second())).min()
}
