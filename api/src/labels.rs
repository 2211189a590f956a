//! The labels and annotations through which Drover's components and users tie objects
//! together. Defined once, here, so the controllers, the scheduler and the docs agree.

/// Pod annotation naming the pod's PodGroup (same namespace).
pub const POD_GROUP_ANNOTATION: &str = "scheduling.drover.dev/pod-group";
/// Pod label naming the pod's task within its group.
pub const TASK_LABEL: &str = "scheduling.drover.dev/task";
/// Pod label giving the pod's index within its task.
pub const TASK_INDEX_LABEL: &str = "scheduling.drover.dev/task-index";
/// Label the Job controller sets on a Job's pods, PodGroup and Service, naming the Job.
pub const JOB_NAME_LABEL: &str = "batch.drover.dev/job-name";
/// Pod annotation choosing the queue of a plain pod's one-pod PodGroup.
pub const QUEUE_ANNOTATION: &str = "scheduling.drover.dev/queue";
/// PriorityClass annotation overriding whether the class is preemptible (`"true"`/`"false"`).
pub const PREEMPTIBLE_ANNOTATION: &str = "scheduling.drover.dev/preemptible";
/// Pod annotation recording what a bound pod is charged to: the queue, PodGroup and priority
/// class, as `queue=<q> podGroup=<g> priorityClass=<c>`. Only the scheduler's Binding sets it
/// (the API server copies a Binding's annotations onto the pod in the write that binds it),
/// and the charge guard ([`crate::charge_guard`]) refuses any other write of it, so editing
/// the pod or deleting its group after binding changes nothing in the accounting.
pub const CHARGE_ANNOTATION: &str = "scheduling.drover.dev/charge";
/// Label naming a Project, set by the controllers on the Project's namespaces and on the
/// Queues made from it.
pub const PROJECT_LABEL: &str = "scheduling.drover.dev/project";

/// Queue label: the node pool a Queue made from a Project or Department is for (set by the
/// controllers with the queue). Not the node label naming a node's pool
/// ([`crate::NODE_POOL_LABEL`]).
pub const QUEUE_NODE_POOL_LABEL: &str = "scheduling.drover.dev/node-pool";
/// The `spec.schedulerName` of pods Drover schedules (unless configured otherwise).
pub const SCHEDULER_NAME: &str = "drover";
