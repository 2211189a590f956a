//! Gangs for the workloads people already run. A pod that Drover schedules and no Drover Job
//! owns is grouped by what made it, before it falls back to a one-pod group:
//!
//! 1. `spec.schedulingGroup.podGroupName` (Kubernetes' Workload API): the gang policy of that
//!    `scheduling.k8s.io` PodGroup ([`workload`]);
//! 2. Volcano's `scheduling.k8s.io/group-name` annotation: the Volcano PodGroup it names
//!    ([`volcano`]);
//! 3. its owners: the outermost owner of a kind in [`kinds::KINDS`] that defines a gang
//!    (PyTorchJob, MPIJob, TrainJob, JobSet, LeaderWorkerSet, RayCluster, RayJob…).
//!
//! Everything read here is tenant-written: counts are checked ([`shape`]), a refusal names
//! the object and the field, and a queue asked for is only a request (the scheduler refuses a
//! queue the namespace may not use). docs/workloads.md has the table of kinds.

mod jobset;
pub mod kinds;
mod kubeflow;
mod lws;
pub mod owners;
mod ray;
pub mod shape;
pub mod volcano;
pub mod workload;
pub mod workload_status;

use std::collections::BTreeMap;
use std::time::Duration;

use drover_api::crd::topology::TopologyConstraint;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;

use kinds::Owner;
use owners::Walk;
use shape::BadField;

/// PodGroup label: what the group was made from (`pytorchjob`, `volcano`, `k8s-podgroup`…).
pub const SOURCE_LABEL: &str = "scheduling.drover.dev/source";

/// Where a pod may ask for a queue, in the order they are read on each object: Drover's own
/// annotation and label, KAI's labels (current and Run:ai's former one), Volcano's annotation.
const QUEUE_KEYS: [(Key, &str); 5] = [
    (Key::Annotation, drover_api::labels::QUEUE_ANNOTATION),
    (Key::Label, drover_api::labels::QUEUE_ANNOTATION),
    (Key::Label, "kai.scheduler/queue"),
    (Key::Label, "runai/queue"),
    (Key::Annotation, "scheduling.volcano.sh/queue-name"),
];

#[derive(Clone, Copy)]
enum Key {
    Annotation,
    Label,
}

/// The queue asked for on `objects` (read in order: the gang's owner before the pod), by the
/// first of [`QUEUE_KEYS`] set on the first object that sets one.
pub fn requested_queue(objects: &[&ObjectMeta]) -> Option<String> {
    objects.iter().find_map(|meta| {
        QUEUE_KEYS.iter().find_map(|(key, name)| {
            let map = match key {
                Key::Annotation => meta.annotations.as_ref(),
                Key::Label => meta.labels.as_ref(),
            };
            map?.get(*name).map(|q| q.trim()).filter(|q| !q.is_empty()).map(str::to_string)
        })
    })
}

/// A PodGroup that several pods share, as derived from what made them.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPlan {
    /// The PodGroup's name.
    pub name: String,
    /// The object the group belongs to (garbage-collected with it).
    pub owner: OwnerReference,
    /// [`SOURCE_LABEL`]'s value.
    pub source: String,
    /// `minMember`.
    pub min_member: u32,
    /// `minTaskMember`.
    pub min_task_member: BTreeMap<String, u32>,
    /// The pod's task label, if it has a role and no task label yet.
    pub task: Option<String>,
    /// The queue asked for, if any (else the namespace's project decides).
    pub requested_queue: Option<String>,
    /// `priorityClassName`.
    pub priority_class: Option<String>,
    /// `topology`.
    pub topology: Option<TopologyConstraint>,
}

/// How a pod is grouped.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A one-pod group: nothing defines a gang for it.
    Alone,
    /// A group it shares with the other pods of its gang.
    Shared(Box<GroupPlan>),
    /// Not grouped for now: the reason (an Event reason) and message, and when to look again.
    Wait {
        /// Event reason.
        reason: &'static str,
        /// What is missing or wrong, naming the object and field.
        message: String,
        /// When to look again.
        retry: Duration,
    },
}

impl Plan {
    fn refused(what: &str, bad: BadField) -> Plan {
        Plan::Wait {
            reason: "InvalidGangSpec",
            message: format!("{what}: {} {}; the pod is not grouped until it is fixed", bad.field, bad.problem),
            retry: Duration::from_secs(60),
        }
    }
}

/// The longest name a PodGroup may have.
const MAX_NAME: usize = 253;

/// How `pod` is grouped: by its Workload-API group, its Volcano group, or its owners.
pub async fn plan(client: &Client, pod: &Pod) -> Result<Plan, kube::Error> {
    if let Some(group) = workload::group_name(pod) {
        return workload::plan(client, pod, group).await;
    }
    if let Some(group) = volcano::group_name(pod) {
        return volcano::plan(client, pod, group).await;
    }
    match owners::walk(client, pod).await? {
        Walk::Gone(why) => Ok(Plan::Wait { reason: "OwnerGone", message: why, retry: Duration::from_secs(30) }),
        Walk::Chain(chain) => Ok(from_owners(&chain, pod)),
    }
}

/// The gang of the outermost owner that defines one.
fn from_owners(chain: &[Owner], pod: &Pod) -> Plan {
    let Some((i, rule)) = chain.iter().enumerate().rev().find_map(|(i, o)| Some((i, o.kind.gang.as_ref()?))) else {
        return Plan::Alone;
    };
    let owner = &chain[i];
    let what = format!("{} {}", owner.kind.kind, owner.name());
    let shape = match (rule.shape)(chain, i, pod) {
        Ok(s) => s,
        Err(bad) => return Plan::refused(&what, bad),
    };
    let mut name = format!("{}-{}", rule.prefix, owner.name());
    if let Some(instance) = &shape.instance {
        name = format!("{name}-{instance}");
    }
    if name.len() > MAX_NAME {
        return Plan::refused(
            &what,
            BadField::new("metadata.name", format!("makes a group name longer than {MAX_NAME}")),
        );
    }
    let metas: Vec<&ObjectMeta> = chain[..=i].iter().rev().map(|o| &o.meta).chain([&pod.metadata]).collect();
    Plan::Shared(Box::new(GroupPlan {
        name,
        owner: owner.reference(),
        source: rule.prefix.to_string(),
        min_member: shape.min_member,
        min_task_member: shape.min_task_member,
        task: shape.task,
        requested_queue: requested_queue(&metas),
        priority_class: pod.spec.as_ref().and_then(|s| s.priority_class_name.clone()),
        topology: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_owner_asks_for_the_queue_before_the_pod_and_every_scheduler_spelling_is_read() {
        let owner = meta(json!({"labels": {"kai.scheduler/queue": "team-a"}}));
        let pod = meta(json!({"annotations": {"scheduling.drover.dev/queue": "team-b"}}));
        assert_eq!(requested_queue(&[&owner, &pod]).as_deref(), Some("team-a"));
        let volcano = meta(json!({"annotations": {"scheduling.volcano.sh/queue-name": "research"}}));
        assert_eq!(requested_queue(&[&ObjectMeta::default(), &volcano]).as_deref(), Some("research"));
        let runai = meta(json!({"labels": {"runai/queue": "old"}}));
        assert_eq!(requested_queue(&[&runai]).as_deref(), Some("old"));
        let blank = meta(json!({"labels": {"kai.scheduler/queue": "  "}}));
        assert_eq!(requested_queue(&[&blank]), None);
    }
}
