//! Migration from Volcano: a pod annotated `scheduling.k8s.io/group-name: <g>` is in the gang
//! that Volcano's PodGroup `<g>` (`scheduling.volcano.sh/v1beta1`) describes: its
//! `minMember`, `minTaskMember` (tasks are the pods' `volcano.sh/task-spec` label), `queue`
//! and `priorityClassName`. Without that PodGroup the pod waits, as it would under Volcano.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::kinds::{Owner, OwnerKind};
use super::shape::{at, count, pod_label, BadField};
use super::{requested_queue, GroupPlan, Plan};

/// The pod annotation naming its Volcano PodGroup.
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// The label Volcano's job controller sets on a pod: its task.
const TASK_SPEC_LABEL: &str = "volcano.sh/task-spec";
/// Prefix of the Drover PodGroups made from Volcano's.
pub const PREFIX: &str = "volcano";
/// Volcano's PodGroup, as the owner of the Drover group made from it.
const KIND: OwnerKind = OwnerKind { group: "scheduling.volcano.sh", kind: "PodGroup", plural: "podgroups", gang: None };

/// The Volcano PodGroup the pod names, if any.
pub fn group_name(pod: &Pod) -> Option<&str> {
    pod.annotations().get(GROUP_NAME_ANNOTATION).map(|g| g.trim()).filter(|g| !g.is_empty())
}

fn resource() -> ApiResource {
    ApiResource {
        group: "scheduling.volcano.sh".into(),
        version: "v1beta1".into(),
        api_version: "scheduling.volcano.sh/v1beta1".into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    }
}

/// The pod's group, from Volcano's PodGroup `group`.
pub async fn plan(client: &Client, pod: &Pod, group: &str) -> Result<Plan, kube::Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource());
    let Some(found) = api.get_opt(group).await? else {
        return Ok(Plan::Wait {
            reason: "VolcanoPodGroupNotFound",
            message: format!(
                "the Volcano PodGroup {namespace}/{group} (scheduling.volcano.sh/v1beta1) that the pod's \
                 {GROUP_NAME_ANNOTATION} annotation names does not exist; the pod waits for it, as under Volcano"
            ),
            retry: Duration::from_secs(30),
        });
    };
    let owner = Owner { kind: &KIND, api_version: resource().api_version, meta: found.metadata, data: found.data };
    Ok(from_podgroup(&owner, pod).unwrap_or_else(|bad| Plan::refused(&format!("Volcano PodGroup {group}"), bad)))
}

/// The pod's group from a Volcano PodGroup.
fn from_podgroup(pg: &Owner, pod: &Pod) -> Result<Plan, BadField> {
    let spec = &pg.data;
    let min_member = count(spec, "spec.minMember", 1, "")?.max(1);
    let mut min_task_member = BTreeMap::new();
    if let Some(tasks) = at(spec, "spec.minTaskMember").and_then(Value::as_object) {
        for (task, n) in tasks {
            let field = format!("spec.minTaskMember.{task}");
            let n = n.as_u64().filter(|n| *n <= super::shape::MAX_COUNT).ok_or_else(|| {
                BadField::new(&field, format!("must be an integer from 0 to {}", super::shape::MAX_COUNT))
            })?;
            if n > 0 {
                min_task_member.insert(task.clone(), n as u32);
            }
        }
    }
    let string = |path: &str| at(spec, path).and_then(Value::as_str).map(str::to_string).filter(|s| !s.is_empty());
    let requested = string("spec.queue").or_else(|| requested_queue(&[&pod.metadata]));
    Ok(Plan::Shared(Box::new(GroupPlan {
        name: format!("{PREFIX}-{}", pg.name()),
        owner: pg.reference(),
        source: PREFIX.into(),
        min_member,
        min_task_member,
        task: pod_label(pod, TASK_SPEC_LABEL).map(str::to_string),
        requested_queue: requested,
        priority_class: string("spec.priorityClassName")
            .or_else(|| pod.spec.as_ref().and_then(|s| s.priority_class_name.clone())),
        topology: None,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn podgroup(spec: Value) -> Owner {
        Owner {
            kind: &KIND,
            api_version: "scheduling.volcano.sh/v1beta1".into(),
            meta: serde_json::from_value(json!({"name": "train", "uid": "u1"})).unwrap(),
            data: json!({ "spec": spec }),
        }
    }

    #[test]
    fn a_volcano_group_keeps_its_minimums_queue_and_priority() {
        let pg = podgroup(json!({"minMember": 4, "minTaskMember": {"ps": 1, "worker": 3},
            "queue": "research", "priorityClassName": "high"}));
        let pod: Pod = serde_json::from_value(json!({"metadata": {"labels": {TASK_SPEC_LABEL: "worker"}}})).unwrap();
        let Ok(Plan::Shared(g)) = from_podgroup(&pg, &pod) else { panic!("a shared group") };
        assert_eq!((g.name.as_str(), g.min_member, g.task.as_deref()), ("volcano-train", 4, Some("worker")));
        assert_eq!(g.min_task_member, BTreeMap::from([("ps".into(), 1), ("worker".into(), 3)]));
        assert_eq!((g.requested_queue.as_deref(), g.priority_class.as_deref()), (Some("research"), Some("high")));
        assert_eq!(g.owner.uid, "u1");
    }

    #[test]
    fn a_bad_task_minimum_is_refused_with_its_field() {
        let pg = podgroup(json!({"minMember": 2, "minTaskMember": {"worker": -2}}));
        assert_eq!(from_podgroup(&pg, &Pod::default()).unwrap_err().field, "spec.minTaskMember.worker");
    }
}
