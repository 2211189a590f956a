//! JobSet (and Kubeflow's TrainJob, which runs one): one gang per JobSet, of every pod its
//! replicated jobs run at once (`replicas` × the job template's `parallelism`), with a
//! minimum per replicated job.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::shape::{at, count, pod_label, total, BadField, Shape, MAX_COUNT};

/// The label the JobSet controller sets on a pod: the name of its replicated job.
const REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// The gang of a JobSet.
pub fn shape(jobset: &Value, pod: &Pod) -> Result<Shape, BadField> {
    let field = "spec.replicatedJobs";
    let jobs = at(jobset, field)
        .and_then(Value::as_array)
        .filter(|jobs| !jobs.is_empty())
        .ok_or_else(|| BadField::new(field, "is missing or empty: the JobSet runs no pods"))?;
    let mut min_task_member = BTreeMap::new();
    for (i, job) in jobs.iter().enumerate() {
        let at_i = format!("{field}[{i}]");
        let name = job
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| BadField::new(format!("{at_i}.name"), "is missing"))?;
        let replicas = count(job, "replicas", 1, &at_i)?;
        let parallelism = count(job, "template.spec.parallelism", 1, &at_i)?;
        let pods = u64::from(replicas) * u64::from(parallelism);
        if pods > MAX_COUNT {
            return Err(BadField::new(at_i, format!("runs {pods} pods at once, more than {MAX_COUNT}")));
        }
        *min_task_member.entry(name.to_string()).or_insert(0) += pods as u32;
    }
    let min_member = total(min_task_member.values(), field)?.max(1);
    min_task_member.retain(|_, n| *n > 0);
    let task = pod_label(pod, REPLICATED_JOB_LABEL).map(str::to_string);
    Ok(Shape { min_member, min_task_member, task, instance: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn two_replicated_jobs_of_four_pods_are_one_gang_of_eight() {
        let js = json!({"spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 4}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2}}}]}});
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"labels": {REPLICATED_JOB_LABEL: "workers"}}})).unwrap();
        let s = shape(&js, &pod).unwrap();
        assert_eq!(s.min_member, 8);
        assert_eq!(s.min_task_member, BTreeMap::from([("driver".into(), 4), ("workers".into(), 4)]));
        assert_eq!(s.task.as_deref(), Some("workers"));
    }

    #[test]
    fn a_replicated_job_too_large_is_refused_with_its_index() {
        let js = json!({"spec": {"replicatedJobs": [
            {"name": "w", "replicas": 100000, "template": {"spec": {"parallelism": 100}}}]}});
        assert_eq!(shape(&js, &Pod::default()).unwrap_err().field, "spec.replicatedJobs[0]");
    }
}
