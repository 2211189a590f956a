//! LeaderWorkerSet: one gang per group (a leader and its workers, `leaderWorkerTemplate.size`
//! pods), not per LeaderWorkerSet: its groups are replicas that start and fail on their own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::shape::{count, pod_label, BadField, Shape};

/// The label the LeaderWorkerSet controller sets on a pod: the index of its group.
const GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// The label with the pod's index in its group; `0` is the leader.
const WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";

/// The gang of the pod's group of a LeaderWorkerSet.
pub fn shape(lws: &Value, pod: &Pod) -> Result<Shape, BadField> {
    let size = count(lws, "spec.leaderWorkerTemplate.size", 1, "")?.max(1);
    let instance =
        pod_label(pod, GROUP_INDEX_LABEL).filter(|i| i.bytes().all(|b| b.is_ascii_digit())).ok_or_else(|| {
            BadField::new(
                format!("pod label {GROUP_INDEX_LABEL}"),
                "is missing or not a number: the pod is in no group",
            )
        })?;
    let task = pod_label(pod, WORKER_INDEX_LABEL).map(|i| if i == "0" { "leader" } else { "worker" });
    let mut min_task_member = BTreeMap::from([("leader".to_string(), 1)]);
    if size > 1 {
        min_task_member.insert("worker".into(), size - 1);
    }
    Ok(Shape { min_member: size, min_task_member, task: task.map(str::to_string), instance: Some(instance.into()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_group_of_size_four_is_a_gang_of_a_leader_and_three_workers() {
        let lws = json!({"spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4}}});
        let worker: Pod =
            serde_json::from_value(json!({"metadata": {"labels": {GROUP_INDEX_LABEL: "1", WORKER_INDEX_LABEL: "2"}}}))
                .unwrap();
        let s = shape(&lws, &worker).unwrap();
        assert_eq!((s.min_member, s.instance.as_deref(), s.task.as_deref()), (4, Some("1"), Some("worker")));
        assert_eq!(s.min_task_member, BTreeMap::from([("leader".into(), 1), ("worker".into(), 3)]));
        assert!(shape(&lws, &Pod::default()).is_err(), "a pod without a group index is refused");
    }
}
