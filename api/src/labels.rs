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
/// Pod condition type the scheduler writes (on the pod's status, which tenants cannot write)
/// just before it binds the pod: the queue, PodGroup and priority class the pod is charged
/// to, so that editing the pod's annotation or deleting its group after binding changes
/// nothing in the accounting. Its message reads `queue=<q> podGroup=<g> priorityClass=<c>`.
pub const CHARGED_CONDITION: &str = "scheduling.drover.dev/Charged";
/// Label naming a Project, set by the controllers on the Project's namespaces and on the
/// Queues made from it.
pub const PROJECT_LABEL: &str = "scheduling.drover.dev/project";
