//! Bounds on the work one Job can make the controller do: how many pods it may have (the CRD's
//! [`MAX_PODS`], checked again here for Jobs stored before the CRD had the bound, which the API
//! server never validates again) and how many pods one reconcile creates or deletes
//! ([`BATCH`]).

use drover_api::crd::job::{Job, MAX_PODS};

use super::validity::Validity;

/// Pods one reconcile of a Job creates, and pods it deletes, at most; the Job is reconciled
/// again at once for the rest. The controller never holds more than this many planned pods.
pub const BATCH: usize = 500;

/// Pod creates of one reconcile in flight at once.
pub const CONCURRENT_CREATES: usize = 16;

/// `Err(("TooManyReplicas", message naming the field))` when a task, or the tasks together,
/// have more than [`MAX_PODS`] replicas.
pub fn check(job: &Job) -> Validity {
    let refuse = |message: String| Err(("TooManyReplicas".to_string(), message));
    for (i, task) in job.spec.tasks.iter().enumerate() {
        if task.replicas > MAX_PODS {
            let n = task.replicas;
            return refuse(format!("spec.tasks[{i}].replicas (task {:?}) is {n}; at most {MAX_PODS}", task.name));
        }
    }
    let total: u64 = job.spec.tasks.iter().map(|t| u64::from(t.replicas)).sum();
    if total > u64::from(MAX_PODS) {
        return refuse(format!("spec.tasks[*].replicas total {total} pods; a Job may have at most {MAX_PODS}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_api::crd::job::{JobSpec, TaskSpec};

    fn job(replicas: &[u32]) -> Job {
        let tasks = replicas
            .iter()
            .enumerate()
            .map(|(i, &replicas)| TaskSpec { name: format!("t{i}"), replicas, ..TaskSpec::default() })
            .collect();
        Job::new("big", JobSpec { tasks, ..JobSpec::default() })
    }

    #[test]
    fn a_job_up_to_max_pods_passes() {
        assert_eq!(check(&job(&[MAX_PODS])), Ok(()));
        assert_eq!(check(&job(&[MAX_PODS - 1, 1, 0])), Ok(()));
    }

    #[test]
    fn a_task_above_max_pods_is_refused_naming_the_task_field() {
        let (reason, message) = check(&job(&[1, u32::MAX])).unwrap_err();
        assert_eq!(reason, "TooManyReplicas");
        assert!(message.starts_with("spec.tasks[1].replicas (task \"t1\") is 4294967295"), "{message}");
    }

    #[test]
    fn tasks_totalling_above_max_pods_are_refused_without_overflow() {
        let (reason, message) = check(&job(&[MAX_PODS; 64])).unwrap_err();
        assert_eq!(reason, "TooManyReplicas");
        assert!(message.starts_with(&format!("spec.tasks[*].replicas total {} pods", 64 * MAX_PODS)), "{message}");
        assert!(check(&job(&[MAX_PODS, 1])).is_err());
    }
}
