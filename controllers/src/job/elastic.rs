//! Elastic Jobs (`spec.elasticity`, Run:ai's rule): the sizes a Job may run at, the size it
//! should run at now, and the Job as its children see it at a size. The scheduler decides a
//! resize (the PodGroup's `status.resize`); this module only reads it, and the plan restarts
//! the Job's pods at the new size, since their code reads `WORLD_SIZE` once, at start.

use drover_api::crd::elasticity::{floor_pods, GroupElasticity};
use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroupStatus;
use drover_api::{ResourceList, GPU};

use super::validity::Validity;

/// Where an elastic Job's size stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    /// The fewest pods it may run with (from `minGPUs`).
    pub floor: u32,
    /// The most: its task's replicas.
    pub ceiling: u32,
    /// The size its pods were made for (`status.replicas`; its replicas at first).
    pub current: u32,
    /// The size it should run at: the scheduler's last resize within its bounds, else its
    /// replicas.
    pub target: u32,
    /// Why it should run at `target`, for its status and Events.
    pub why: String,
}

impl Sizing {
    /// The sizing of `job` (`None` unless it is elastic and valid), given its PodGroup's status
    /// as last read.
    pub fn of(job: &Job, group: Option<&PodGroupStatus>) -> Option<Sizing> {
        job.spec.elasticity.as_ref()?;
        let (floor, ceiling) = bounds(job).ok()?;
        let current = job.status.as_ref().and_then(|s| s.replicas).unwrap_or(ceiling);
        // A decision above its replicas (they were lowered since) counts as none.
        let (target, why) = match group.and_then(|g| g.resize.as_ref()).filter(|r| r.replicas <= ceiling) {
            None => (ceiling, format!("its task's replicas are {ceiling}")),
            Some(r) if r.replicas < floor => (floor, format!("its floor (minGPUs) is {floor} pods")),
            Some(r) => (r.replicas, r.reason.clone()),
        };
        Some(Sizing { floor, ceiling, current, target, why })
    }

    /// The sizes its PodGroup may be resized to.
    pub fn group_bounds(&self) -> GroupElasticity {
        GroupElasticity { min_member: self.floor, max_member: self.ceiling }
    }
}

/// `Err(("InvalidElasticity", message naming the field))` when an elastic Job cannot be
/// resized: more than one task, a `minAvailable`, or a `minGPUs` its pods cannot meet. (The
/// CRD refuses the first two; the controller does not rely on it.)
pub fn check(job: &Job) -> Validity {
    if job.spec.elasticity.is_none() {
        return Ok(());
    }
    bounds(job).map(|_| ()).map_err(|message| ("InvalidElasticity".to_string(), message))
}

/// `(floor, ceiling)` of an elastic Job, or why it has none.
fn bounds(job: &Job) -> Result<(u32, u32), String> {
    let min_gpus = job.spec.elasticity.as_ref().and_then(|e| e.min_gpus);
    let [task] = job.spec.tasks.as_slice() else {
        return Err("spec.elasticity applies to a Job of one task".into());
    };
    if job.spec.min_available.is_some() || task.min_available.is_some() {
        return Err("spec.elasticity applies to a Job whose gang is all its pods: leave out minAvailable".into());
    }
    let floor = floor_pods(task.replicas.max(1), gpus_per_pod(job), min_gpus)
        .map_err(|why| format!("spec.elasticity.minGPUs {why}"))?;
    Ok((floor, task.replicas.max(floor)))
}

/// The GPUs one pod of the Job's task requests (its containers' requests together).
fn gpus_per_pod(job: &Job) -> i64 {
    let Some(spec) = job.spec.tasks.first().and_then(|t| t.template.get().ok()?.spec.as_ref()) else { return 0 };
    spec.containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(GPU))
        .filter_map(|q| ResourceList::parse_amount(GPU, &q.0).ok())
        .sum()
}

/// `job` with its one task at `size` pods: what its pods, PodGroup and environment are made
/// from while it runs at that size.
pub fn at_size(job: &Job, size: u32) -> Job {
    let mut sized = job.clone();
    if let Some(task) = sized.spec.tasks.first_mut() {
        task.replicas = size;
    }
    sized
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_api::crd::elasticity::{Elasticity, ResizeStatus};
    use drover_api::crd::job::{JobSpec, JobStatus, TaskSpec};
    use drover_api::crd::task_template::TaskTemplate;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn job(replicas: u32, gpus: &str, min_gpus: Option<u32>) -> Job {
        let requests = [(GPU.to_string(), Quantity(gpus.into()))].into();
        let container = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements { requests: Some(requests), ..Default::default() }),
            ..Default::default()
        };
        let template = PodTemplateSpec {
            spec: Some(PodSpec { containers: vec![container], ..Default::default() }),
            ..Default::default()
        };
        let task =
            TaskSpec { name: "w".into(), replicas, template: TaskTemplate::from(template), ..TaskSpec::default() };
        let elasticity = Some(Elasticity { min_gpus, ..Elasticity::default() });
        Job::new("e", JobSpec { tasks: vec![task], elasticity, ..JobSpec::default() })
    }

    fn resized(replicas: u32) -> PodGroupStatus {
        let resize = ResizeStatus { from: 16, replicas, reason: "no room".into(), decided_at: None };
        PodGroupStatus { resize: Some(resize), ..PodGroupStatus::default() }
    }

    #[test]
    fn an_elastic_job_runs_at_the_schedulers_size_within_its_bounds() {
        let mut j = job(16, "1", Some(2));
        let fresh = Sizing::of(&j, None).expect("elastic");
        assert_eq!((fresh.floor, fresh.ceiling, fresh.current, fresh.target), (2, 16, 16, 16));
        j.status = Some(JobStatus { replicas: Some(16), ..JobStatus::default() });
        let shrunk = Sizing::of(&j, Some(&resized(4))).expect("elastic");
        assert_eq!((shrunk.current, shrunk.target, shrunk.why.as_str()), (16, 4, "no room"));
        assert_eq!(Sizing::of(&j, Some(&resized(1))).map(|s| s.target), Some(2), "never below its floor");
        assert_eq!(Sizing::of(&j, Some(&resized(64))).map(|s| s.target), Some(16), "never above its replicas");
        j.spec.elasticity = None;
        assert_eq!(Sizing::of(&j, Some(&resized(4))), None, "a job that does not ask is never resized");
    }

    #[test]
    fn a_floor_its_pods_cannot_meet_makes_the_job_invalid_with_the_field_named() {
        assert_eq!(check(&job(4, "2", Some(8))), Ok(()));
        let (reason, message) = check(&job(4, "2", Some(9))).unwrap_err();
        assert_eq!(reason, "InvalidElasticity");
        assert!(message.contains("spec.elasticity.minGPUs") && message.contains("5 pods"), "{message}");
        let no_gpu = check(&job(4, "0", Some(1))).unwrap_err().1;
        assert!(no_gpu.contains("request no GPU"), "{no_gpu}");
        let mut gang = job(4, "1", None);
        gang.spec.min_available = Some(2);
        assert!(check(&gang).unwrap_err().1.contains("leave out minAvailable"));
    }

    #[test]
    fn the_sized_job_has_its_task_at_the_size() {
        assert_eq!(at_size(&job(16, "1", None), 4).spec.tasks[0].replicas, 4);
    }
}
