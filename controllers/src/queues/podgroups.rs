//! One-pod PodGroups for pods that Drover schedules but no Drover Job owns.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::podgroup::{PodGroup, PodGroupSpec};
use drover_api::crd::project::Project;
use drover_kubeutil::events::{self, EventType};
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{trigger_with, Action};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::runner::{changes, digest, drive, ready, shutdown_signal, ProjectsCtx as Ctx, Retries, Triggers};
use super::tree::namespace_owner;
use super::{
    api_code, project_queue_name, reasons, Error, ANNOTATION_POD_GROUP, ANNOTATION_QUEUE, DEFAULT_QUEUE,
    LABEL_JOB_NAME, LABEL_PROJECT, NODE_POOL_LABEL, POD_GROUP_PREFIX, SCHEDULER_NAME,
};

const CONTROLLER: &str = "drover-pod-groups";

/// How the queue of a pod's one-pod group was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueChoice {
    /// The pod's [`ANNOTATION_QUEUE`] annotation.
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
/// nor being deleted, gets a PodGroup `pod-<pod name>` in its namespace: an ownerReference
/// to the pod (controller), `minMember: 1`, the pod's `priorityClassName`, and the queue of
/// [`choose_queue`]. The namespace's project is the one that owns it by the queue-tree
/// controller's rule (earliest-created project listing it), from the controller's Project
/// store, else (the store may lag) the project of the namespace's [`LABEL_PROJECT`] label
/// read from the API. The pod is then annotated with the group's name (a merge patch
/// carrying the resourceVersion read). Pods of the same owner are not grouped together.
///
/// A project's work runs in the project's queues only: the scheduler refuses `default` to
/// namespaces labelled [`LABEL_PROJECT`]. A group this controller put in `default` (the pod
/// arrived before its namespace's project, selects a pool the project has no quota in, or the
/// project has no pool) therefore waits, and is moved to the project's queue once there is one
/// for the pod: whenever the pod or a Project changes, as long as the pod is not bound.
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
    let ctx = Arc::new(Ctx { client, projects, retries: Retries::default() });
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
/// (no [`ANNOTATION_QUEUE`]), and is still waiting to be bound.
fn grouped(pod: &Pod) -> bool {
    let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    let spec = pod.spec.as_ref();
    pod.annotations().get(ANNOTATION_POD_GROUP) == Some(&format!("{POD_GROUP_PREFIX}{}", pod.name_any()))
        && pod.annotations().get(ANNOTATION_QUEUE).is_none_or(|q| q.trim().is_empty())
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

/// The queue of the pod's group ([`choose_queue`] with the pod's annotation and pool).
fn pod_choice(pod: &Pod, project: Option<&Project>) -> QueueChoice {
    let pool = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref()).and_then(|s| s.get(NODE_POOL_LABEL));
    choose_queue(pod.annotations().get(ANNOTATION_QUEUE).map(String::as_str), project, pool.map(String::as_str))
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
        return Ok(Action::await_change());
    }
    if !ready(&ctx.projects) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if move_group {
        return regroup(&pod, &ctx).await;
    }
    let (name, namespace) = (pod.name_any(), pod.namespace().unwrap_or_default());
    let group = format!("{POD_GROUP_PREFIX}{name}");
    if group.len() > 253 {
        let message = format!("the PodGroup name {POD_GROUP_PREFIX}<pod name> would be longer than 253 characters");
        events::publish(&ctx.client, CONTROLLER, &*pod, EventType::Warning, "PodGroupNameTooLong", &message).await;
        return Ok(Action::await_change());
    }
    let project = project_of(&ctx, &namespace).await?;
    let choice = pod_choice(&pod, project.as_deref());
    if let QueueChoice::PoolNotInProject { project, pool } = &choice {
        let message = format!(
            "node pool {pool:?} is not a pool of project {project:?}; the pod's group waits in queue \
             {DEFAULT_QUEUE:?}, which the project's namespaces may not use, until the project has quota in that pool"
        );
        events::publish(
            &ctx.client,
            CONTROLLER,
            &*pod,
            EventType::Warning,
            reasons::NODE_POOL_NOT_IN_PROJECT,
            &message,
        )
        .await;
    }
    let owner =
        pod.controller_owner_ref(&()).ok_or_else(|| Error::Retry(format!("pod {namespace}/{name} has no uid")))?;
    let mut pg = PodGroup::new(
        &group,
        PodGroupSpec {
            min_member: 1,
            queue: Some(choice.queue().to_string()),
            priority_class_name: pod.spec.as_ref().and_then(|s| s.priority_class_name.clone()),
            ..PodGroupSpec::default()
        },
    );
    pg.metadata.namespace = Some(namespace.clone());
    pg.metadata.owner_references = Some(vec![owner]);
    let groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &namespace);
    match groups.create(&PostParams::default(), &pg).await {
        Ok(_) => tracing::info!(pod = %name, %namespace, queue = choice.queue(), "created pod group"),
        Err(e) if api_code(&e) == Some(409) => {
            let Some(live) = groups.get_opt(&group).await? else { return Err(e.into()) };
            let controller = live.owner_references().iter().find(|r| r.controller == Some(true));
            match controller {
                Some(r) if Some(&r.uid) == pod.uid().as_ref() => {}
                // Left over from an earlier pod of the same name (no garbage collector yet).
                Some(r) if r.kind == "Pod" && r.name == name => {
                    let params = DeleteParams {
                        preconditions: Some(Preconditions { uid: live.uid(), resource_version: None }),
                        ..DeleteParams::default()
                    };
                    match groups.delete(&group, &params).await {
                        Ok(_) => {}
                        Err(e) if api_code(&e) == Some(404) => {}
                        Err(e) => return Err(e.into()),
                    }
                    return Err(Error::Retry(format!("replaced the stale pod group {namespace}/{group}")));
                }
                _ => {
                    let message =
                        format!("PodGroup {group:?} exists and does not belong to this pod; the pod is not grouped");
                    events::publish(
                        &ctx.client,
                        CONTROLLER,
                        &*pod,
                        EventType::Warning,
                        reasons::POD_GROUP_NAME_CONFLICT,
                        &message,
                    )
                    .await;
                    return Ok(Action::await_change());
                }
            }
        }
        Err(e) => return Err(e.into()),
    }
    let patch = json!({"metadata": {
        "resourceVersion": pod.resource_version(),
        "annotations": {ANNOTATION_POD_GROUP: group},
    }});
    Api::<Pod>::namespaced(ctx.client.clone(), &namespace)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Action::await_change())
}
