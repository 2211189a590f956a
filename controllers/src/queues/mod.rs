//! The queue controllers: Run:ai's Department → Project hierarchy becomes a tree of
//! [`Queue`]s per node pool, plain pods get [`PodGroup`]s (their workload's gang, else one
//! per pod), and every Queue's status
//! carries its pod-group counts and a `Valid` condition.
//!
//! Three controllers, each a `run_*` function that runs until its shutdown future resolves:
//!
//! - [`run_queue_tree`]: Departments and Projects → Queues, Namespaces → Projects.
//! - [`run_pod_groups`]: plain pods with `schedulerName: drover` → their gang's PodGroup
//!   ([`crate::gangs`]), else a one-pod one.
//! - [`run_queue_status`]: `status.podGroups`, `observedGeneration` and `Valid` of every Queue.
//!
//! # Queue naming
//!
//! One queue per (department, node pool) and per (project, node pool), as Run:ai does:
//!
//! | object | queue name | parent |
//! | --- | --- | --- |
//! | Department `d`, pool `p` | `d.p` ([`department_queue_name`]) | none (top level) |
//! | Project `x` of department `d`, pool `p` | `x.p` ([`project_queue_name`]) | `d.p` |
//!
//! A node pool name must be a DNS label (lower-case letters, digits, `-`; at most 63
//! characters), so it never contains a dot and the pool is always the part after the last
//! dot: two projects (or two departments) can never produce the same queue name. A
//! department and a project of the same name *can* (department `ml` and project `ml` both
//! want `ml.a100`); the queue then belongs to whichever object created it first (its
//! controller ownerReference says which) and the other one gets `Valid=False`, reason
//! `QueueNameConflict`. A pool name that is not a DNS label, or a queue name longer than
//! 253 characters, gets `Valid=False`, reason `InvalidQueueName`, and no queue.
//!
//! A managed queue carries the labels [`LABEL_NODE_POOL`] and [`LABEL_PROJECT`] or
//! [`LABEL_DEPARTMENT`], and a controller ownerReference to its Project or Department. The
//! controller owns `spec.parent`, `spec.deserved` (`nvidia.com/gpu`, `cpu`, `memory` from
//! the pool's `gpu`, `cpu`, `memory`; absent ones are left out), `spec.limit`
//! (`nvidia.com/gpu` from `gpuLimit`, absent without one), `spec.overQuotaWeight` and the
//! running limits and minimum run times (`maxRunningJobs`, `maxRunningPods`,
//! `preemptMinRuntimeSeconds`, `reclaimMinRuntimeSeconds`, as the pool gives them); it sets
//! `reclaimable: true` when it creates a queue and then leaves `reclaimable`,
//! `queueingStrategy` and `state` to the administrator. An edit of the fields it owns is put
//! back with a Warning Event `ManagedQueue` on the Queue naming the object to edit instead
//! (the queue records the owner generation it was made from, so an edit of the queue is told
//! apart from a change of its owner); the scheduler's advice names the owner's field too.
//!
//! A queue admits only the namespaces of the projects it is for (its `namespaceSelector`):
//! `x.p` the namespaces labelled [`LABEL_PROJECT`]`=x`, `d.p` those of the department's
//! projects that have a queue in pool `p`, and no namespace while there is none. Pod groups go
//! in project queues only: the scheduler leaves out a group placed directly in a department's
//! queue (`QueueNotLeaf`), even one with no project queue under it yet.
//!
//! # Node pools
//!
//! A project queue for pool `p` is meant for pods on nodes labelled `drover.dev/node-pool=p`
//! ([`NODE_POOL_LABEL`]). The scheduler restricts a pod to a pool through the pod's own
//! `nodeSelector`; the PodGroup controller therefore puts a pod that selects pool `p` into
//! its project's queue `x.p`. A pod that selects no pool goes to the queue of the project's
//! *first* pool; nothing stops the scheduler from placing it on another pool's node unless
//! the scheduler also honours the queue's [`LABEL_NODE_POOL`] label (pod specs are
//! immutable, so the controller cannot add the selector).
//!
//! # Namespaces
//!
//! A Project lists `spec.namespaces`; each existing namespace gets the label
//! [`LABEL_PROJECT`]`=<project>` (namespaces are never created). A namespace listed by
//! several projects belongs to the one created first (ties: the smaller name); the others
//! get `Valid=False`, reason `NamespaceClaimed`, and a Warning Event. A project removes its
//! label from namespaces it no longer lists.
//!
//! # What is not done
//!
//! No finalizers: deleting a Project or Department relies on the garbage collector to
//! delete its queues through their ownerReferences. A deleted
//! project's namespace label stays until another project claims the namespace. Pods of the
//! same ReplicaSet/StatefulSet are not grouped together unless a workload kind that defines a
//! gang owns them (docs/workloads.md).

mod podgroups;
pub(crate) mod runner;
mod status;
mod tree;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub use podgroups::{choose_queue, namespace_queue, run_pod_groups, QueueChoice};
pub use status::run_queue_status;
pub use tree::run_queue_tree;

#[allow(unused_imports)] // for the doc links above
use drover_api::crd::{podgroup::PodGroup, queue::Queue};

/// Queue and Namespace label: the Project the queue was made for, or the Project a namespace
/// belongs to (set by the queue-tree controller).
pub const LABEL_PROJECT: &str = drover_api::labels::PROJECT_LABEL;
/// Queue label: the Department the queue was made for.
pub const LABEL_DEPARTMENT: &str = "scheduling.drover.dev/department";
/// Queue label: the node pool of the queue.
pub use drover_api::labels::QUEUE_NODE_POOL_LABEL as LABEL_NODE_POOL;
pub use drover_api::labels::SCHEDULER_NAME;
pub use drover_api::labels::{
    JOB_NAME_LABEL as LABEL_JOB_NAME, POD_GROUP_ANNOTATION as ANNOTATION_POD_GROUP,
    QUEUE_ANNOTATION as ANNOTATION_QUEUE,
};
pub use drover_api::NODE_POOL_LABEL;
/// Prefix of the names of one-pod PodGroups: `pod-<pod name>`.
pub const POD_GROUP_PREFIX: &str = "pod-";
pub use drover_api::crd::queue::DEFAULT_QUEUE;
/// The GPU resource name in queue quotas.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Condition type on Projects, Departments and Queues.
pub const CONDITION_VALID: &str = "Valid";

/// Reasons of the `Valid` condition (and of the Warning Events that accompany them).
pub mod reasons {
    /// Valid=True on Projects and Departments: every queue exists as specified.
    pub const QUEUES_READY: &str = "QueuesReady";
    /// Valid=True on Queues.
    pub const QUEUE_VALID: &str = "Valid";
    /// The Project's department does not exist; none of its queues exist.
    pub const DEPARTMENT_NOT_FOUND: &str = "DepartmentNotFound";
    /// The Project names a node pool its department has no quota in; no queue for it.
    pub const NODE_POOL_NOT_IN_DEPARTMENT: &str = "NodePoolNotInDepartment";
    /// A namespace the Project lists belongs to a project created earlier.
    pub const NAMESPACE_CLAIMED: &str = "NamespaceClaimed";
    /// A queue name the object needs belongs to another object.
    pub const QUEUE_NAME_CONFLICT: &str = "QueueNameConflict";
    /// Warning on a Queue made from a Project or Department: its edit was put back.
    pub const MANAGED_QUEUE: &str = "ManagedQueue";
    /// A node pool name is not a DNS label, or the queue name would be too long.
    pub const INVALID_QUEUE_NAME: &str = "InvalidQueueName";
    /// The project name is longer than a label value (63), so namespaces cannot be labelled.
    pub const PROJECT_NAME_TOO_LONG: &str = "ProjectNameTooLong";
    /// The Queue's parent names no Queue.
    pub const PARENT_NOT_FOUND: &str = "ParentNotFound";
    /// The Queue is on a parent cycle.
    pub const QUEUE_CYCLE: &str = "QueueCycle";
    /// An ancestor of the Queue is invalid (its parent is missing or it is on a cycle).
    pub const PARENT_INVALID: &str = "ParentInvalid";
    /// A pod names a node pool its project has no queue for; its group goes to `default`.
    pub const NODE_POOL_NOT_IN_PROJECT: &str = "NodePoolNotInProject";
    /// `pod-<name>` exists and belongs to something else.
    pub const POD_GROUP_NAME_CONFLICT: &str = "PodGroupNameConflict";
}

/// The queue of department `department` in node pool `pool`: `<department>.<pool>`.
pub fn department_queue_name(department: &str, pool: &str) -> String {
    format!("{department}.{pool}")
}

/// The queue of project `project` in node pool `pool`: `<project>.<pool>`.
pub fn project_queue_name(project: &str, pool: &str) -> String {
    format!("{project}.{pool}")
}

/// Whether `pool` can be part of a queue name: a DNS label.
pub fn valid_pool_name(pool: &str) -> bool {
    let bytes = pool.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Errors of a reconcile; all of them are retried.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Retry(String),
}

impl Error {
    /// Whether it is an optimistic-concurrency conflict (409), retried at once.
    fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(e) if api_code(e) == Some(409))
    }
}

/// The HTTP status of an API error.
pub(crate) fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A one-line problem that makes an object `Valid=False`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub reason: &'static str,
    pub message: String,
}

impl Problem {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Problem { reason, message: message.into() }
    }
}

/// The `Valid` condition for `problems` (the first problem's reason, every message), keeping
/// the transition time of `previous` when the status did not change.
pub(crate) fn valid_condition(
    previous: Option<&Condition>,
    problems: &[Problem],
    ok_reason: &str,
    ok_message: String,
    generation: Option<i64>,
) -> Condition {
    let (status, reason, message) = match problems.first() {
        None => ("True", ok_reason.to_string(), ok_message),
        Some(first) => (
            "False",
            first.reason.to_string(),
            problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("; "),
        ),
    };
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(jiff::Timestamp::now()),
    };
    Condition {
        type_: CONDITION_VALID.to_string(),
        status: status.to_string(),
        reason,
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// Whether two conditions say the same thing (the transition time aside).
pub(crate) fn same_condition(a: Option<&Condition>, b: &Condition) -> bool {
    a.is_some_and(|a| {
        a.type_ == b.type_
            && a.status == b.status
            && a.reason == b.reason
            && a.message == b.message
            && a.observed_generation == b.observed_generation
    })
}

/// `conditions` with the condition of `new`'s type replaced by (or extended with) `new`.
pub(crate) fn put_condition(conditions: &[Condition], new: Condition) -> Vec<Condition> {
    let mut out: Vec<Condition> = conditions.iter().filter(|c| c.type_ != new.type_).cloned().collect();
    out.push(new);
    out
}

/// The `Valid` condition among `conditions`.
pub(crate) fn find_valid(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == CONDITION_VALID)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names_are_dns_labels() {
        assert!(valid_pool_name("a100"));
        assert!(valid_pool_name("h100-east"));
        for bad in ["", "A100", "a.b", "-a", "a-", "a_b", &"x".repeat(64)] {
            assert!(!valid_pool_name(bad), "{bad}");
        }
    }

    #[test]
    fn valid_condition_keeps_transition_time_while_status_holds() {
        let first = valid_condition(None, &[], "Ok", "fine".into(), Some(1));
        let problems = [Problem::new("A", "one"), Problem::new("B", "two")];
        let bad = valid_condition(Some(&first), &problems, "Ok", String::new(), Some(2));
        assert_eq!((bad.status.as_str(), bad.reason.as_str(), bad.message.as_str()), ("False", "A", "one; two"));
        let mut old = first.clone();
        old.last_transition_time = Time(jiff::Timestamp::UNIX_EPOCH);
        let again = valid_condition(Some(&old), &[], "Ok", "fine".into(), Some(1));
        assert_eq!(again.last_transition_time, old.last_transition_time);
        assert!(same_condition(Some(&first), &again));
        assert!(!same_condition(Some(&first), &bad));
    }
}
