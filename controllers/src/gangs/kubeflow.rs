//! Kubeflow's training jobs (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob): one
//! gang per job, of every replica of every role, or `runPolicy.schedulingPolicy.minAvailable`
//! pods when the job sets it (then roles have no minimum of their own).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::shape::{at, count, pod_label, task_name, total, BadField, Shape};

/// The pod label the training operator sets to the pod's role (`master`, `worker`…).
const REPLICA_TYPE_LABEL: &str = "training.kubeflow.org/replica-type";
/// The role label of the MPI operator's v2 pods (`launcher`, `worker`).
const JOB_ROLE_LABEL: &str = "training.kubeflow.org/job-role";

/// The gang of a Kubeflow job whose roles are under `spec.<specs>` (e.g. `pytorchReplicaSpecs`).
pub fn shape(job: &Value, specs: &str, pod: &Pod) -> Result<Shape, BadField> {
    let field = format!("spec.{specs}");
    let roles = at(job, &field)
        .and_then(Value::as_object)
        .ok_or_else(|| BadField::new(&field, "is missing: the job names no roles"))?;
    let mut min_task_member = BTreeMap::new();
    for (role, spec) in roles {
        let replicas = count(spec, "replicas", 1, &format!("{field}.{role}"))?;
        *min_task_member.entry(task_name(role)).or_insert(0) += replicas;
    }
    let all = total(min_task_member.values(), &field)?;
    let declared = count(job, "spec.runPolicy.schedulingPolicy.minAvailable", all, "")?;
    let min_member = declared.clamp(1, all.max(1));
    if min_member < all {
        min_task_member.clear();
    }
    min_task_member.retain(|_, n| *n > 0);
    let task = pod_label(pod, REPLICA_TYPE_LABEL).or_else(|| pod_label(pod, JOB_ROLE_LABEL)).map(task_name);
    Ok(Shape { min_member, min_task_member, task, instance: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(role: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": {REPLICA_TYPE_LABEL: role}}})).unwrap()
    }

    #[test]
    fn a_pytorchjob_of_a_master_and_three_workers_is_one_gang_of_four_with_a_minimum_per_role() {
        let job = json!({"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}}});
        let s = shape(&job, "pytorchReplicaSpecs", &pod("worker")).unwrap();
        assert_eq!(s.min_member, 4);
        assert_eq!(s.min_task_member, BTreeMap::from([("master".into(), 1), ("worker".into(), 3)]));
        assert_eq!(s.task.as_deref(), Some("worker"));
    }

    #[test]
    fn min_available_lowers_the_gang_and_drops_per_role_minimums() {
        let job = json!({"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
            "pytorchReplicaSpecs": {"Master": {}, "Worker": {"replicas": 3}}}});
        let s = shape(&job, "pytorchReplicaSpecs", &pod("master")).unwrap();
        assert_eq!((s.min_member, s.min_task_member.len()), (2, 0));
    }

    #[test]
    fn a_bad_replica_count_is_refused_with_its_field() {
        let job = json!({"spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": "x"}}}});
        let err = shape(&job, "mpiReplicaSpecs", &pod("worker")).unwrap_err();
        assert_eq!(err.field, "spec.mpiReplicaSpecs.Worker.replicas");
        let none = shape(&json!({"spec": {}}), "tfReplicaSpecs", &pod("worker")).unwrap_err();
        assert_eq!(none.field, "spec.tfReplicaSpecs");
    }
}
