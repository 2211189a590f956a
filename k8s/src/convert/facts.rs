//! What the conversion found of every PodGroup: its members by the membership rule (the only
//! one), their counts and its gang minimums, for status, bindings and bind-intent recovery.

use super::{PodRef, DEFAULT_TASK, POD_GROUP_ANNOTATION, TASK_LABEL};
use crate::charge::Charge;
use crate::run_times;
use drover_api::crd::podgroup::PodGroup;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};

/// Pods of one PodGroup by outcome, for its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Pods of the group, in any phase (a bound pod counts in the group it was charged as).
    pub total: u32,
    /// Pods in phase `Running`.
    pub running: u32,
    /// Pods in phase `Succeeded`.
    pub succeeded: u32,
    /// Pods in phase `Failed`.
    pub failed: u32,
}

/// One PodGroup as the conversion found it: its members (by the membership rule above, the
/// only one), their counts and its gang minimums. The status writer, the bindings and the
/// recovery of bind intents read it instead of looking at pods again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFacts {
    /// Its pods by outcome.
    pub counts: PodCounts,
    /// Its pods, in any phase, by name.
    pub members: BTreeMap<String, GroupMember>,
    /// `spec.minMember`.
    pub(super) min_member: u32,
    /// `spec.minTaskMember`.
    pub(super) min_task_member: BTreeMap<String, u32>,
    /// The name its runs are learned and predicted by ([`crate::run_times::job_name`]).
    pub job_name: String,
    /// When its loan of capacity reserved for another gang is due, as its status records it.
    pub borrowed_until: Option<i64>,
}

/// A pod of a PodGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The pod.
    pub pod: PodRef,
    /// Its task (see "Tasks").
    pub task: String,
    /// The node it is bound to.
    pub node: Option<String>,
    /// Finished (`Succeeded`/`Failed`) or being deleted.
    pub ended: bool,
}

impl GroupFacts {
    pub(super) fn of(group: &PodGroup) -> GroupFacts {
        GroupFacts {
            min_member: group.spec.min_member,
            min_task_member: group.spec.min_task_member.clone(),
            job_name: run_times::job_name(group),
            borrowed_until: group.status.as_ref().and_then(|s| s.borrowed_until.as_ref()).map(|t| t.0.as_second()),
            ..GroupFacts::default()
        }
    }

    pub(super) fn add(&mut self, pod: &Pod, node: Option<&String>, phase: &str) {
        self.counts.total += 1;
        match phase {
            "Running" => self.counts.running += 1,
            "Succeeded" => self.counts.succeeded += 1,
            "Failed" => self.counts.failed += 1,
            _ => {}
        }
        let ended = pod.metadata.deletion_timestamp.is_some() || matches!(phase, "Succeeded" | "Failed");
        let member = GroupMember { pod: PodRef::of(pod), task: task_of(pod), node: node.cloned(), ended };
        self.members.insert(member.pod.name.clone(), member);
    }

    /// Whether the group has its gang minimum (overall and per task) of bound members that
    /// have not ended, when the members named in `adding` are bound too.
    pub fn ready_with(&self, adding: &BTreeSet<&str>) -> bool {
        let mut total = 0u32;
        let mut per_task: BTreeMap<&str, u32> = BTreeMap::new();
        for (name, m) in &self.members {
            if (m.node.is_some() && !m.ended) || adding.contains(name.as_str()) {
                total += 1;
                *per_task.entry(m.task.as_str()).or_default() += 1;
            }
        }
        total >= self.min_member
            && self.min_task_member.iter().all(|(task, min)| per_task.get(task.as_str()).copied().unwrap_or(0) >= *min)
    }
}

/// A pod's task: its label [`TASK_LABEL`], else [`DEFAULT_TASK`].
pub(super) fn task_of(pod: &Pod) -> String {
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get(TASK_LABEL)).filter(|t| !t.is_empty());
    label.cloned().unwrap_or_else(|| DEFAULT_TASK.to_string())
}

/// The membership rule, the only one, for every edge that asks which PodGroup a pod belongs to:
/// a pod of this scheduler (`scheduler_name`) bound to a node belongs to the group its charge
/// record names (the record is returned too); else to the group its
/// [`POD_GROUP_ANNOTATION`] names, which the tenant may edit at any time and which therefore
/// decides only for pods not charged yet. Pods of other schedulers belong to none.
pub fn membership(pod: &Pod, scheduler_name: &str) -> (Option<Charge>, Option<String>) {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.scheduler_name.as_deref()) != Some(scheduler_name) {
        return (None, None);
    }
    let bound = spec.and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let charge = if bound { Charge::of(pod) } else { None };
    let annotations = pod.metadata.annotations.as_ref();
    let annotated = annotations.and_then(|a| a.get(POD_GROUP_ANNOTATION)).filter(|g| !g.is_empty()).cloned();
    let group = charge.as_ref().map(|c| c.group.clone()).or(annotated);
    (charge, group)
}
