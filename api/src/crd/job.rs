//! `Job` (`batch.drover.dev`): an elastic batch job of one or more tasks. The controller makes
//! its pods, a PodGroup and a headless Service; replicas above `minAvailable` are elastic and
//! may be scaled by patching a task's replicas. Lifecycle policies map pod and task events to
//! job actions.

use super::elasticity::Elasticity;
use super::forecast::Forecast;
use super::task_template::TaskTemplate;
use super::topology::{TaskTopologyConstraint, TopologyConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::{json_schema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// The most tasks a Job may have. Bounded so that the API server can estimate the cost of the
/// CEL rule summing the tasks' replicas; real jobs have a handful (master, worker, ps, ...).
pub const MAX_TASKS: u32 = 64;

/// The most pods a Job may have: in one task (the schema's `maximum` on `replicas`) and in all
/// its tasks together (a CEL rule over at most [`MAX_TASKS`] numbers, which the Job controller
/// checks again for Jobs stored before the bound existed). The largest training jobs run on a
/// few thousand 8-GPU nodes, i.e. a few thousand pods, and a whole Kubernetes cluster is
/// supported up to 5,000 nodes and 150,000 pods: 10,000 pods leaves room for any gang a cluster
/// can run at once, while one Job can no longer make the Job controller hold millions of pods
/// (`replicas: 4294967295` once took it past its memory limit in seconds). Larger array-style
/// work is split into several Jobs.
pub const MAX_PODS: u32 = 10_000;

/// Desired state of a job.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "batch.drover.dev",
    version = "v1alpha1",
    kind = "Job",
    plural = "jobs",
    shortname = "djob",
    category = "drover",
    namespaced,
    status = "JobStatus",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Min", type_ = "integer", json_path = ".status.minAvailable"),
    printcolumn(name = "Running", type_ = "integer", json_path = ".status.running"),
    printcolumn(name = "Succeeded", type_ = "integer", json_path = ".status.succeeded"),
    printcolumn(name = "Retries", type_ = "integer", json_path = ".status.retryCount"),
    printcolumn(name = "Queue", type_ = "string", json_path = ".spec.queue"),
    printcolumn(name = "Size", type_ = "integer", json_path = ".status.replicas", priority = 1),
    printcolumn(name = "Position", type_ = "integer", json_path = ".status.forecast.queuePosition"),
    printcolumn(name = "ETA", type_ = "string", json_path = ".status.forecast.eta"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason")
)]
#[x_kube(validation = Rule::new("!has(self.minAvailable) || self.minAvailable <= self.tasks.map(t, t.replicas).sum()").message("minAvailable must not exceed the total replicas of the tasks"))]
#[x_kube(validation = Rule::new(format!("self.tasks.map(t, t.replicas).sum() <= {MAX_PODS}")).message(format!("the tasks' replicas must total at most {MAX_PODS} pods; split larger work into several Jobs").as_str()))]
#[x_kube(validation = Rule::new("!has(self.elasticity) || (size(self.tasks) == 1 && !has(self.minAvailable) && !has(self.tasks[0].minAvailable))").message("elasticity applies to a Job of one task whose gang is all its pods: leave out minAvailable"))]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// Pods that must run together (the gang size); absent = all replicas. Replicas above it
    /// are elastic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_available: Option<u32>,
    /// The leaf queue; absent = the namespace's project queue, else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The priority class of the job's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// The tasks: groups of identical pods, at most [`MAX_TASKS`], names unique (a list map
    /// keyed by name, so the API server refuses duplicates itself).
    #[schemars(length(min = 1, max = MAX_TASKS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub tasks: Vec<TaskSpec>,
    /// Event -> action rules for the whole job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<LifecyclePolicy>,
    /// Restarts allowed before the job fails.
    #[serde(default = "three")]
    pub max_retry: u32,
    /// Seconds after finishing before the job is deleted; absent = kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<u32>,
    /// Where the whole job's pods must or should go together; copied into its PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyConstraint>,
    /// Run:ai's elasticity: restarted with half its pods (down to `minGPUs`) when its gang
    /// cannot be placed, and with twice as many (up to its replicas) when spare capacity
    /// allows. A one-task Job without `minAvailable` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elasticity: Option<Elasticity>,
}

fn three() -> u32 {
    3
}

/// A group of identical pods within a job.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.minAvailable) || self.minAvailable <= self.replicas").message("minAvailable must not exceed replicas"))]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Task name; pods are named `<job>-<task>-<index>`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Number of pods, at most [`MAX_PODS`].
    #[schemars(range(min = 0, max = MAX_PODS))]
    pub replicas: u32,
    /// Pods of this task that must run for the job to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<u32>,
    /// The pod template (read leniently: see [`TaskTemplate`]).
    #[schemars(schema_with = "pod_template_schema")]
    pub template: TaskTemplate,
    /// Event -> action rules for this task (before the job's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<LifecyclePolicy>,
    /// Where this task's pods go together inside the job's domain, and its slices; copied
    /// into the PodGroup's `taskTopology`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TaskTopologyConstraint>,
}

/// Pod templates are validated by the API server when pods are created, not in the CRD; the Job
/// controller refuses a Job whose template does not read as one.
fn pod_template_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// An event -> action rule.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct LifecyclePolicy {
    /// What happened.
    pub event: JobEvent,
    /// What to do about it.
    pub action: JobAction,
}

/// Events a lifecycle policy reacts to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum JobEvent {
    /// A pod failed.
    PodFailed,
    /// A pod was evicted (preempted or reclaimed).
    PodEvicted,
    /// Every pod of a task succeeded.
    TaskCompleted,
    /// Any of the above.
    Any,
}

/// Actions a lifecycle policy takes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum JobAction {
    /// Delete every pod and start again (counts as a retry).
    RestartJob,
    /// Recreate the pods of the task (counts as a retry).
    RestartTask,
    /// Stop the job, keep it Aborted.
    AbortJob,
    /// Stop the remaining pods and mark the job Completed.
    CompleteJob,
    /// Stop the job and mark it Failed.
    TerminateJob,
}

/// Lifecycle state of a job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum JobState {
    /// Waiting for its pod group to be scheduled.
    #[default]
    Pending,
    /// At least its minimum runs.
    Running,
    /// Pods are being recreated after a restart action.
    Restarting,
    /// Remaining pods are being stopped after a complete action.
    Completing,
    /// Finished successfully.
    Completed,
    /// Stopped by an abort action.
    Aborted,
    /// Failed: out of retries, or terminated.
    Failed,
}

/// Observed state of a job, written by the job controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Lifecycle state.
    #[serde(default)]
    pub state: JobState,
    /// Pods waiting for a node.
    #[serde(default)]
    pub pending: u32,
    /// Running pods.
    #[serde(default)]
    pub running: u32,
    /// Pods that succeeded.
    #[serde(default)]
    pub succeeded: u32,
    /// Pods that failed.
    #[serde(default)]
    pub failed: u32,
    /// Restarts so far.
    #[serde(default)]
    pub retry_count: u32,
    /// The gang minimum in force: `spec.minAvailable`, else every replica.
    #[serde(default)]
    pub min_available: u32,
    /// Why the job waits or cannot work: its `Valid=False` message, else its PodGroup's
    /// reason (`Unschedulable`), mirrored; absent when nothing holds it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// For an elastic Job, the pods it runs with now (its pods' `WORLD_SIZE`): its replicas
    /// until the scheduler resizes it; absent for other Jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// While the job waits: its PodGroup's forecast (position, expected start, what would let
    /// it start), mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
    /// Conditions, e.g. `Valid` false with the reason a job cannot work.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_schema_bounds_each_task_and_the_whole_job_to_max_pods() {
        let crd = serde_json::to_value(Job::crd()).expect("the CRD serializes");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let replicas = &spec["properties"]["tasks"]["items"]["properties"]["replicas"];
        assert_eq!(replicas["maximum"].as_f64(), Some(f64::from(MAX_PODS)), "{replicas}");
        let rules = spec["x-kubernetes-validations"].to_string();
        assert!(rules.contains(&format!("self.tasks.map(t, t.replicas).sum() <= {MAX_PODS}")), "{rules}");
    }
}
