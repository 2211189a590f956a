//! Ray (KubeRay's RayCluster and RayJob): one gang of the head and the workers the cluster
//! starts with: each worker group's `replicas` (kept within `minReplicas..=maxReplicas`), or
//! only its `minReplicas` when the Ray autoscaler runs (`enableInTreeAutoscaling`), times
//! `numOfHosts`. A RayJob's gang is that of the cluster it describes; its submitter pod joins
//! the gang beyond the minimum.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::shape::{at, count, pod_label, total, BadField, Shape, MAX_COUNT};

/// The label KubeRay sets on a pod: `head` or `worker`.
const NODE_TYPE_LABEL: &str = "ray.io/node-type";
/// The label KubeRay sets on a worker pod: its worker group's name.
const GROUP_LABEL: &str = "ray.io/group";

/// The gang of a RayCluster whose spec is at `spec_path` (`spec`, or a RayJob's
/// `spec.rayClusterSpec`).
pub fn shape(owner: &Value, spec_path: &str, pod: &Pod) -> Result<Shape, BadField> {
    let spec = at(owner, spec_path).ok_or_else(|| BadField::new(spec_path, "is missing"))?;
    let autoscaling = at(spec, "enableInTreeAutoscaling").and_then(Value::as_bool).unwrap_or(false);
    let mut min_task_member = BTreeMap::from([("head".to_string(), 1)]);
    let groups = at(spec, "workerGroupSpecs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (i, group) in groups.iter().enumerate() {
        let field = format!("{spec_path}.workerGroupSpecs[{i}]");
        let name = group
            .get("groupName")
            .and_then(Value::as_str)
            .ok_or_else(|| BadField::new(format!("{field}.groupName"), "is missing"))?;
        if at(group, "suspend").and_then(Value::as_bool).unwrap_or(false) {
            continue;
        }
        let min = count(group, "minReplicas", 0, &field)?;
        let max = count(group, "maxReplicas", MAX_COUNT as u32, &field)?.max(min);
        let replicas = if autoscaling { min } else { count(group, "replicas", min, &field)?.clamp(min, max) };
        let hosts = count(group, "numOfHosts", 1, &field)?;
        let pods = u64::from(replicas) * u64::from(hosts);
        if pods > MAX_COUNT {
            return Err(BadField::new(field, format!("starts {pods} pods, more than {MAX_COUNT}")));
        }
        *min_task_member.entry(name.to_string()).or_insert(0) += pods as u32;
    }
    let min_member = total(min_task_member.values(), spec_path)?;
    min_task_member.retain(|_, n| *n > 0);
    let task = match pod_label(pod, NODE_TYPE_LABEL) {
        Some("head") => Some("head".to_string()),
        Some("worker") => pod_label(pod, GROUP_LABEL).map(str::to_string),
        _ => Some("submitter".to_string()),
    };
    Ok(Shape { min_member, min_task_member, task, instance: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn worker() -> Pod {
        serde_json::from_value(json!({"metadata": {"labels": {NODE_TYPE_LABEL: "worker", GROUP_LABEL: "gpu"}}}))
            .unwrap()
    }

    #[test]
    fn a_raycluster_with_two_workers_is_a_gang_of_three() {
        let rc = json!({"spec": {"headGroupSpec": {}, "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 2, "minReplicas": 1, "maxReplicas": 4}]}});
        let s = shape(&rc, "spec", &worker()).unwrap();
        assert_eq!(s.min_member, 3);
        assert_eq!(s.min_task_member, BTreeMap::from([("head".into(), 1), ("gpu".into(), 2)]));
        assert_eq!(s.task.as_deref(), Some("gpu"));
    }

    #[test]
    fn with_the_autoscaler_the_gang_is_the_minimum_and_hosts_multiply() {
        let rj = json!({"spec": {"rayClusterSpec": {"enableInTreeAutoscaling": true, "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 5, "minReplicas": 2, "numOfHosts": 2},
            {"groupName": "off", "replicas": 3, "suspend": true}]}}});
        let s = shape(&rj, "spec.rayClusterSpec", &Pod::default()).unwrap();
        assert_eq!(s.min_member, 5);
        assert_eq!(s.task.as_deref(), Some("submitter"), "a pod that is neither head nor worker is the submitter");
    }
}
