//! PodGroups for pods that Drover schedules but no Drover Job owns: the gang their owner or
//! their Workload-API or Volcano group defines ([`crate::gangs`]), else one per pod.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_api::crd::podgroup::{PodGroup, PodGroupSpec};
use drover_api::crd::project::Project;
use drover_kubeutil::events::{self, EventType};
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{trigger_with, Action};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::runner::{changes, digest, drive, ready, shutdown_signal, Context, Retries, Triggers};
use super::tree::namespace_owner;
use super::{
    api_code, project_queue_name, reasons, Error, ANNOTATION_POD_GROUP, DEFAULT_QUEUE, LABEL_JOB_NAME, LABEL_PROJECT,
    NODE_POOL_LABEL, POD_GROUP_PREFIX, SCHEDULER_NAME,
};
use crate::gangs::{self, requested_queue, GroupPlan, Plan};
use drover_api::labels::TASK_LABEL;

const CONTROLLER: &str = "drover-pod-groups";

/// What the PodGroup controller reads and remembers.
struct Ctx {
    client: Client,
    projects: Store<Project>,
    retries: Retries,
    /// The last Warning reported per pod (by uid), so that a pod waiting on something is told
    /// once per reason and message, not at every retry.
    reported: Mutex<HashMap<String, String>>,
}

impl Context for Ctx {
    fn retries(&self) -> &Retries {
        &self.retries
    }
}

impl Ctx {
    /// A Warning Event on the pod, unless the same one was the last reported for it.
    async fn report(&self, pod: &Pod, reason: &str, message: &str) {
        let key = pod.uid().unwrap_or_default();
        let said = format!("{reason}: {message}");
        let new = {
            let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
            reported.insert(key, said.clone()).as_ref() != Some(&said)
        };
        if !new {
            return;
        }
        events::publish(&self.client, CONTROLLER, pod, EventType::Warning, reason, message).await;
    }

    /// Drops what was reported on the pod (it is grouped now).
    fn forget(&self, pod: &Pod) {
        self.reported.lock().unwrap_or_else(|e| e.into_inner()).remove(&pod.uid().unwrap_or_default());
    }
}

/// How the queue of a pod's one-pod group was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueChoice {
    /// The queue the pod (or its owner) asks for ([`crate::gangs::requested_queue`]).
    Annotated(String),
    /// The namespace's project's queue for the pod's node pool (its `nodeSelector`'s
    /// [`NODE_POOL_LABEL`], else the project's first pool).
    Project(String),
    /// [`DEFAULT_QUEUE`]: the namespace belongs to no project, or its project has no node
    /// pool. The scheduler refuses `default` to a project's namespaces, so a project's group
    /// waits there (`QueueNotAllowed`) until the project has a queue for it.
    Default,
    /// [`DEFAULT_QUEUE`], refused to the project's namespaces: the pod selects a node pool its
    /// project has no quota in, so it waits until the project has one there.
    PoolNotInProject {
        /// The namespace's project.
        project: String,
        /// The pool the pod selects.
        pool: String,
    },
}

impl QueueChoice {
    /// The queue.
    pub fn queue(&self) -> &str {
        match self {
            QueueChoice::Annotated(q) | QueueChoice::Project(q) => q,
            QueueChoice::Default | QueueChoice::PoolNotInProject { .. } => DEFAULT_QUEUE,
        }
    }
}

/// The queue of a pod (or a Job's group): the `annotation` if set, else the `project`'s
/// queue for `pool` (else for the project's first pool), else [`DEFAULT_QUEUE`].
pub fn choose_queue(annotation: Option<&str>, project: Option<&Project>, pool: Option<&str>) -> QueueChoice {
    if let Some(q) = annotation.map(str::trim).filter(|q| !q.is_empty()) {
        return QueueChoice::Annotated(q.to_string());
    }
    let Some(project) = project else { return QueueChoice::Default };
    let name = project.name_any();
    match pool {
        Some(pool) if project.spec.node_pools.iter().any(|p| p.name == pool) => {
            QueueChoice::Project(project_queue_name(&name, pool))
        }
        Some(pool) => QueueChoice::PoolNotInProject { project: name, pool: pool.to_string() },
        None => match project.spec.node_pools.first() {
            Some(first) => QueueChoice::Project(project_queue_name(&name, &first.name)),
            None => QueueChoice::Default,
        },
    }
}

/// The queue for work in `namespace` on `pool` (`None`: any pool), read from the API: the
/// project named by the namespace's [`LABEL_PROJECT`] label, if it lists the namespace, and
/// [`choose_queue`]. For other controllers (e.g. the Job controller) that have no store.
pub async fn namespace_queue(client: &Client, namespace: &str, pool: Option<&str>) -> Result<String, kube::Error> {
    let project = labelled_project(client, namespace).await?;
    Ok(choose_queue(None, project.as_ref(), pool).queue().to_string())
}

/// The project named by the namespace's [`LABEL_PROJECT`] label, if it lists the namespace.
async fn labelled_project(client: &Client, namespace: &str) -> Result<Option<Project>, kube::Error> {
    let ns = Api::<Namespace>::all(client.clone()).get_opt(namespace).await?;
    let Some(name) = ns.as_ref().and_then(|ns| ns.labels().get(LABEL_PROJECT).cloned()) else { return Ok(None) };
    let project = Api::<Project>::all(client.clone()).get_opt(&name).await?;
    Ok(project.filter(|p| p.spec.namespaces.iter().any(|n| n == namespace)))
}

/// Runs the PodGroup controller until `shutdown` resolves.
///
/// Every pod with `spec.schedulerName: drover`, no [`ANNOTATION_POD_GROUP`] annotation and
/// no [`LABEL_JOB_NAME`] label (the Job controller groups those), that is neither finished
/// nor being deleted, gets a PodGroup in its namespace and is annotated with its name (a merge
/// patch carrying the resourceVersion read), and labelled with its task when its gang has
/// roles. Which group is decided by [`gangs::plan`]: the group of the Workload-API PodGroup it
/// names, of the Volcano PodGroup it names, or of its owner's gang (a PyTorchJob, JobSet,
/// LeaderWorkerSet group, RayCluster…), created once, by the first pod of the gang, with a
/// controller ownerReference to what it was made from; else its own group `pod-<pod name>`
/// (`minMember: 1`, an ownerReference to the pod). A pod that names a group that does not
/// exist yet, or whose owner's spec is invalid, is not grouped: it gets one Warning Event per
/// reason and is looked at again later.
///
/// The group's queue is [`choose_queue`] of the queue asked for ([`gangs::requested_queue`]:
/// Drover's, KAI's or Volcano's spelling, the owner's before the pod's) and the namespace's
/// project: the one that owns it by the queue-tree controller's rule (earliest-created
/// project listing it), from the controller's Project store, else (the store may lag) the
/// project of the namespace's [`LABEL_PROJECT`] label read from the API.
///
/// A project's work runs in the project's queues only: the scheduler refuses `default` to
/// namespaces labelled [`LABEL_PROJECT`]. A one-pod group this controller put in `default` (the
/// pod arrived before its namespace's project, selects a pool the project has no quota in, or
/// the project has no pool) therefore waits, and is moved to the project's queue once there
/// is one for the pod: whenever the pod or a Project changes, as long as the pod is not bound.
pub async fn run_pod_groups(client: Client, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    let shutdown = shutdown_signal(shutdown);
    let (pods, writer) = reflector::store::<Pod>();
    let wc = watcher::Config::default()
        .fields(&format!("spec.schedulerName={SCHEDULER_NAME}"))
        .labels(&format!("!{LABEL_JOB_NAME}"));
    let pod_events =
        reflector::reflector(writer, watcher(Api::<Pod>::all(client.clone()), wc).backoff(watch_backoff()));
    let (projects, project_writer) = reflector::store::<Project>();
    let project_events = reflector::reflector(
        project_writer,
        watcher(Api::<Project>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let in_project = pods.clone();
    let triggers: Triggers<Pod> = vec![
        trigger_with(changes(pod_events, pod_key), |p: Pod| Some(ObjectRef::from_obj(&p))).boxed(),
        // The pods of a project's namespaces: a group waiting in `default` may now have a queue.
        trigger_with(changes(project_events, |p: &Project| digest(&p.metadata.generation)), move |p: Project| {
            in_project
                .state()
                .iter()
                .filter(|pod| pod.namespace().is_some_and(|ns| p.spec.namespaces.contains(&ns)))
                .map(|pod| ObjectRef::from_obj(&**pod))
                .collect::<Vec<_>>()
        })
        .boxed(),
    ];
    let ctx = Arc::new(Ctx { client, projects, retries: Retries::default(), reported: Mutex::default() });
    drive("pod-groups", pods, triggers, reconcile, ctx, shutdown).await;
    Ok(())
}

fn pod_key(p: &Pod) -> u64 {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    digest(&(&p.metadata.annotations, &p.metadata.labels, &p.metadata.deletion_timestamp, phase))
}

/// Whether the controller leaves the pod alone (apart from its group, if [`grouped`]).
fn skip(pod: &Pod) -> bool {
    let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    pod.annotations().contains_key(ANNOTATION_POD_GROUP)
        || pod.labels().contains_key(LABEL_JOB_NAME)
        || pod.metadata.deletion_timestamp.is_some()
        || finished
        || pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) != Some(SCHEDULER_NAME)
}

/// Whether the pod is in the one-pod group this controller made for it, chose its queue
/// (asks for no queue), and is still waiting to be bound.
fn grouped(pod: &Pod) -> bool {
    let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    let spec = pod.spec.as_ref();
    pod.annotations().get(ANNOTATION_POD_GROUP) == Some(&format!("{POD_GROUP_PREFIX}{}", pod.name_any()))
        && requested_queue(&[&pod.metadata]).is_none()
        && !pod.labels().contains_key(LABEL_JOB_NAME)
        && pod.metadata.deletion_timestamp.is_none()
        && !finished
        && spec.and_then(|s| s.scheduler_name.as_deref()) == Some(SCHEDULER_NAME)
        && spec.and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty)
}

/// The namespace's project: from the store, else (the store may not have seen a project
/// that the API and the namespace label already have: its watch is not ordered with the
/// pods' watch) from the API.
async fn project_of(ctx: &Ctx, namespace: &str) -> Result<Option<Arc<Project>>, Error> {
    Ok(match namespace_owner(&ctx.projects.state(), namespace) {
        Some(p) => Some(p.clone()),
        None => labelled_project(&ctx.client, namespace).await?.map(Arc::new),
    })
}

/// The node pool the pod selects, if any.
fn pod_pool(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_selector.as_ref()?.get(NODE_POOL_LABEL).map(String::as_str)
}

/// The queue of the pod's one-pod group ([`choose_queue`] with the queue it asks for and its pool).
fn pod_choice(pod: &Pod, project: Option<&Project>) -> QueueChoice {
    choose_queue(requested_queue(&[&pod.metadata]).as_deref(), project, pod_pool(pod))
}

/// Moves the pod's group from `default` to its project's queue once there is one.
async fn regroup(pod: &Pod, ctx: &Ctx) -> Result<Action, Error> {
    let (name, namespace) = (pod.name_any(), pod.namespace().unwrap_or_default());
    // The store only: a project it has not seen yet triggers this again when it arrives.
    let project = namespace_owner(&ctx.projects.state(), &namespace).cloned();
    let QueueChoice::Project(queue) = pod_choice(pod, project.as_deref()) else {
        return Ok(Action::await_change());
    };
    let groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &namespace);
    let group = format!("{POD_GROUP_PREFIX}{name}");
    let Some(mut live) = groups.get_opt(&group).await? else { return Ok(Action::await_change()) };
    let ours = live.owner_references().iter().any(|r| r.controller == Some(true) && Some(&r.uid) == pod.uid().as_ref());
    if !ours || live.spec.queue.as_deref() != Some(DEFAULT_QUEUE) {
        return Ok(Action::await_change());
    }
    live.spec.queue = Some(queue.clone());
    groups.replace(&group, &PostParams::default(), &live).await?;
    tracing::info!(pod = %name, %namespace, %queue, "moved pod group from the default queue to its project's queue");
    Ok(Action::await_change())
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let move_group = grouped(&pod);
    if skip(&pod) && !move_group {
        // Grouped, finishing or going: nothing more to tell about it.
        ctx.forget(&pod);
        return Ok(Action::await_change());
    }
    if !ready(&ctx.projects) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if move_group {
        return regroup(&pod, &ctx).await;
    }
    let plan = match gangs::plan(&ctx.client, &pod).await? {
        Plan::Shared(plan) => *plan,
        Plan::Alone => match one_pod_plan(&pod) {
            Some(plan) => plan,
            None => {
                let message =
                    format!("the PodGroup name {POD_GROUP_PREFIX}<pod name> would be longer than 253 characters");
                ctx.report(&pod, "PodGroupNameTooLong", &message).await;
                return Ok(Action::await_change());
            }
        },
        Plan::Wait { reason, message, retry } => {
            ctx.report(&pod, reason, &message).await;
            return Ok(Action::requeue(retry));
        }
    };
    let namespace = pod.namespace().unwrap_or_default();
    let project = project_of(&ctx, &namespace).await?;
    let choice = choose_queue(plan.requested_queue.as_deref(), project.as_deref(), pod_pool(&pod));
    if let QueueChoice::PoolNotInProject { project, pool } = &choice {
        let message = format!(
            "node pool {pool:?} is not a pool of project {project:?}; the pod's group waits in queue \
             {DEFAULT_QUEUE:?}, which the project's namespaces may not use, until the project has quota in that pool"
        );
        ctx.report(&pod, reasons::NODE_POOL_NOT_IN_PROJECT, &message).await;
    }
    if !ensure_group(&ctx, &pod, &plan, choice.queue()).await? {
        return Ok(Action::await_change());
    }
    ctx.forget(&pod);
    let mut metadata = json!({
        "resourceVersion": pod.resource_version(),
        "annotations": {ANNOTATION_POD_GROUP: plan.name},
    });
    if let Some(task) = plan.task.as_ref().filter(|_| !pod.labels().contains_key(TASK_LABEL)) {
        metadata["labels"] = json!({ TASK_LABEL: task });
    }
    Api::<Pod>::namespaced(ctx.client.clone(), &namespace)
        .patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&json!({ "metadata": metadata })))
        .await?;
    Ok(Action::await_change())
}

/// The pod's own group `pod-<name>` (`None` when that name would be too long).
fn one_pod_plan(pod: &Pod) -> Option<GroupPlan> {
    let name = format!("{POD_GROUP_PREFIX}{}", pod.name_any());
    (name.len() <= 253).then(|| GroupPlan {
        name,
        owner: pod.controller_owner_ref(&()).unwrap_or_default(),
        source: "pod".into(),
        min_member: 1,
        min_task_member: BTreeMap::new(),
        task: None,
        requested_queue: requested_queue(&[&pod.metadata]),
        priority_class: pod.spec.as_ref().and_then(|s| s.priority_class_name.clone()),
        topology: None,
    })
}

/// Creates the plan's PodGroup in `queue`, or finds it made already (by another pod of the
/// gang, or an earlier reconcile). Returns whether the pod may join it: `false` when a group
/// of that name belongs to something else (reported on the pod).
async fn ensure_group(ctx: &Ctx, pod: &Pod, plan: &GroupPlan, queue: &str) -> Result<bool, Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let mut pg = PodGroup::new(
        &plan.name,
        PodGroupSpec {
            min_member: plan.min_member,
            min_task_member: plan.min_task_member.clone(),
            queue: Some(queue.to_string()),
            priority_class_name: plan.priority_class.clone(),
            topology: plan.topology.clone(),
            ..PodGroupSpec::default()
        },
    );
    pg.metadata.namespace = Some(namespace.clone());
    pg.metadata.owner_references = Some(vec![plan.owner.clone()]);
    pg.metadata.labels = Some(BTreeMap::from([(gangs::SOURCE_LABEL.to_string(), plan.source.clone())]));
    let groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &namespace);
    let group = &plan.name;
    let e = match groups.create(&PostParams::default(), &pg).await {
        Ok(_) => {
            tracing::info!(pod = %pod.name_any(), %namespace, %group, queue, min = plan.min_member, "created pod group");
            return Ok(true);
        }
        Err(e) if api_code(&e) == Some(409) => e,
        Err(e) => return Err(e.into()),
    };
    let Some(live) = groups.get_opt(group).await? else { return Err(e.into()) };
    let controller = live.owner_references().iter().find(|r| r.controller == Some(true));
    match controller {
        Some(r) if r.uid == plan.owner.uid => Ok(true),
        // Left over from an earlier owner of the same name (no garbage collector yet).
        Some(r) if r.kind == plan.owner.kind && r.name == plan.owner.name => {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: live.uid(), resource_version: None }),
                ..DeleteParams::default()
            };
            match groups.delete(group, &params).await {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some(404) => {}
                Err(e) => return Err(e.into()),
            }
            Err(Error::Retry(format!("replaced the stale pod group {namespace}/{group}")))
        }
        _ => {
            let message = format!("PodGroup {group:?} exists and does not belong to this pod; the pod is not grouped");
            ctx.report(pod, reasons::POD_GROUP_NAME_CONFLICT, &message).await;
            Ok(false)
        }
    }
}
