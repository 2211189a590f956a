//! One PodGroup to a job: its phase, its queue (and why that queue leaves it out) and its shape
//! apart from its pods (admission's priority while it holds, minimums, claim, topology).

use super::elastic;
use super::job::{build_job, PriorityFrom, Shape};
use super::priority::Resolved;
use super::queue::QueueState;
use super::topology::Requests;
use super::{created, declared_amounts, Lookup, PodInfo, PodRef, Problem, DEFAULT_QUEUE};
use drover_api::crd::podgroup::{Admission, PodGroup, PodGroupPhase};
use drover_api::crd::queue::namespace_refusal;
use drover_scheduler::snapshot::{JobInput, JobPhase};

/// One PodGroup to convert: the group, its key, the queue its pods are charged to (its
/// [`group_queue`]) and the pods it holds.
pub(super) struct GroupAt<'g, 'a> {
    pub(super) group: &'g PodGroup,
    pub(super) namespace: &'g str,
    pub(super) name: &'g str,
    pub(super) queue: String,
    pub(super) pods: Vec<PodInfo<'a>>,
}

impl GroupAt<'_, '_> {
    pub(super) fn problem(&self, reason: &str, message: String) -> Problem {
        Problem {
            kind: "PodGroup",
            namespace: Some(self.namespace.to_string()),
            name: self.name.to_string(),
            reason: reason.to_string(),
            message,
        }
    }

    /// The job's phase from the group's; `None` for a finished group that was not restarted.
    pub(super) fn phase(&self) -> Option<JobPhase> {
        Some(match self.group.status.as_ref().map(|s| s.phase).unwrap_or_default() {
            PodGroupPhase::Pending => JobPhase::Pending,
            PodGroupPhase::Inqueue => JobPhase::Inqueue,
            PodGroupPhase::Running => JobPhase::Running,
            PodGroupPhase::Completed | PodGroupPhase::Failed if !restarted(&self.pods) => return None,
            PodGroupPhase::Completed | PodGroupPhase::Failed => JobPhase::Pending,
        })
    }

    /// Why the group's queue leaves it out, if it does (see "PodGroups → jobs").
    pub(super) fn queue_refusal(&self, phase: JobPhase, lookup: &Lookup) -> Option<Problem> {
        let (queue, namespace) = (&self.queue, self.namespace);
        match lookup.queue_state.get(queue) {
            None => Some(
                self.problem("QueueNotFound", format!("queue {queue:?} does not exist; the group is not scheduled")),
            ),
            Some(QueueState::Invalid(why)) => {
                Some(self.problem(
                    "QueueInvalid",
                    format!("queue {queue:?} is left out ({why}); the group is not scheduled"),
                ))
            }
            Some(QueueState::Valid { department: true, .. }) => Some(self.problem(
                "QueueNotLeaf",
                format!("queue {queue:?} is a Department's queue; pod groups go in the queues of its projects"),
            )),
            Some(QueueState::Valid { leaf: false, .. }) => Some(self.problem(
                "QueueNotLeaf",
                format!("queue {queue:?} has child queues; pod groups must be in a leaf queue"),
            )),
            Some(QueueState::Valid { fences, closed, .. }) => {
                let fences = fences.iter().map(|(q, selector)| (q.as_str(), selector));
                if let Some(why) = namespace_refusal(fences, lookup.namespaces.get(namespace).copied()) {
                    let hint = lookup.project_hint(namespace).filter(|_| queue == DEFAULT_QUEUE).unwrap_or_default();
                    let message = format!("namespace {namespace:?} may not use queue {queue:?}: {why}{hint}");
                    return Some(self.problem("QueueNotAllowed", message));
                }
                (*closed && phase == JobPhase::Pending).then(|| {
                    let message = format!("queue {queue:?} is closed; the group is not admitted until it opens");
                    self.problem("QueueClosed", message)
                })
            }
        }
    }

    /// What the group's job is apart from its pods: its admission's priority while that
    /// holds, else the group's own.
    pub(super) fn shape(&self, phase: JobPhase, topology: Requests, problems: &mut Vec<Problem>) -> Shape<'_> {
        let priority = match admission(self.group) {
            Some(a) => PriorityFrom::Decided(Resolved {
                class: a.priority_class_name.clone(),
                value: a.priority,
                preemptible: a.preemptible,
            }),
            None => PriorityFrom::Group(self.group),
        };
        Shape {
            name: self.name.to_string(),
            namespace: self.namespace.to_string(),
            queue: self.queue.clone(),
            priority,
            min_member: self.group.spec.min_member,
            min_resources: self.group.spec.min_resources.as_ref().map(|declared| {
                declared_amounts(declared, "minResources", |message| {
                    problems.push(self.problem("InvalidQuantity", message))
                })
            }),
            min_task_member: &self.group.spec.min_task_member,
            created_at: created(&self.group.metadata),
            preempted_at: self.group.status.as_ref().and_then(|s| s.preempted_at.as_ref()).map(|t| t.0.as_second()),
            nominations: self
                .group
                .status
                .iter()
                .flat_map(|s| &s.nominations)
                .map(|n| (n.pod.as_str(), n.node.as_str()))
                .collect(),
            phase,
            topology,
            elastic: elastic::of(self.group),
        }
    }
}

/// Builds a group's job, or hands back its pods (those holding a node are charged as
/// detached pods, or count as foreign usage) when the group is left out.
pub(super) fn group_job<'a>(
    mut at: GroupAt<'_, 'a>,
    lookup: &Lookup,
    problems: &mut Vec<Problem>,
) -> Result<(JobInput, Vec<PodRef>), Vec<PodInfo<'a>>> {
    let Some(phase) = at.phase() else { return Err(at.pods) };
    let pods = std::mem::take(&mut at.pods);
    if let Some(p) = at.queue_refusal(phase, lookup) {
        problems.push(p);
        return Err(pods);
    }
    let topology = match lookup.topologies.requests(at.group, at.name, &pods) {
        Ok(t) => t,
        Err((reason, message)) => {
            problems.push(at.problem(reason, message));
            return Err(pods);
        }
    };
    let shape = at.shape(phase, topology, problems);
    build_job(shape, pods, lookup, problems).map_err(|(message, members)| {
        problems.push(at.problem("PriorityClassNotFound", message));
        members
    })
}

/// The queue a group's pods are charged to: the admitted one while its admission holds,
/// else `spec.queue`, else `default`.
pub(super) fn group_queue(group: &PodGroup) -> String {
    match admission(group) {
        Some(a) => a.queue.clone(),
        None => group.spec.queue.clone().filter(|q| !q.is_empty()).unwrap_or_else(|| DEFAULT_QUEUE.to_string()),
    }
}

/// The admission the scheduler recorded for a group, while it holds: the group is `Inqueue`
/// or `Running` (a group admitted again starts from its spec).
pub(super) fn admission(group: &PodGroup) -> Option<&Admission> {
    let status = group.status.as_ref()?;
    matches!(status.phase, PodGroupPhase::Inqueue | PodGroupPhase::Running).then_some(status.admission.as_ref()?)
}

/// Whether a finished group has a new unbound pod (its job controller restarted the job).
pub(super) fn restarted(pods: &[PodInfo<'_>]) -> bool {
    pods.iter().any(|p| p.node.is_none() && !p.deleting)
}
