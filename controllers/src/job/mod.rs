//! The Job controller: a `batch.drover.dev` Job becomes a PodGroup, a headless Service and one
//! pod per replica, and its status follows its pods through a Volcano-like state machine with
//! lifecycle policies.
//!
//! # Children
//!
//! For a Job `j` in namespace `ns`, all owned by the Job (controller owner reference):
//!
//! - PodGroup `j`: `minMember` = the job's `minAvailable` (default: all replicas),
//!   `minTaskMember` = the tasks' explicit `minAvailable`, `queue` and `priorityClassName`
//!   copied, `minResources` = the requests of the minimum's pods (each task's minimum first,
//!   then pods in task order).
//! - Service `j`: headless (`clusterIP: None`), selecting the job's pods, publishing
//!   not-ready addresses, so every pod is `<pod>.j.ns.svc` as soon as it exists.
//! - Pods `j-<task>-<index>` for every replica (elastic pods above the minimum included: the
//!   scheduler decides which run), from the task template, with `schedulerName: drover` unless
//!   the template names one, the job's `priorityClassName`, `hostname`/`subdomain`, the
//!   labels [`JOB_NAME_LABEL`], [`TASK_LABEL`], [`TASK_INDEX_LABEL`], the annotations
//!   [`POD_GROUP_ANNOTATION`] and [`RETRY_ANNOTATION`], and the environment `DROVER_JOB_NAME`,
//!   `DROVER_TASK_NAME`, `DROVER_TASK_INDEX`, `RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
//!   `MASTER_PORT` and `DROVER_HOSTS_<TASK>` in every container (a variable the template sets
//!   itself is kept; the host lists are left out when together they would pass 64 KiB).
//!   Pod environments are fixed at creation: after elastic scaling, older pods keep the
//!   `WORLD_SIZE` and host lists they were created with.
//!   An elastic Job (`spec.elasticity`, see `elastic.rs`) is different: its one task runs at
//!   the size the scheduler chose (the PodGroup's `status.resize`, within its floor and
//!   replicas), recorded in `status.replicas`; the [`WORLD_SIZE_ANNOTATION`] every pod carries
//!   tells the pods made for another size. A new size restarts the Job (state `Restarting`, reason
//!   `Resize`, no retry spent): every pod is deleted, and the new ones are made once they are
//!   gone. The PodGroup's `minMember` follows `status.replicas`, so it changes only then.
//!
//! Children are created when missing; the PodGroup's spec is replaced when it differs (elastic
//! scaling changes `minMember`). Changing a task template does not replace existing pods. One
//! reconcile creates at most `BATCH` (500) pods (in task and index order) and deletes at
//! most as many, and is followed at once by the next: however large a Job, the controller
//! plans one batch at a time, and reads the Job's pods a page at a time into small views.
//!
//! # State machine
//!
//! `Pending` until `running + succeeded >= minAvailable`, then `Running`. Without policies a
//! failed pod just stays failed (as in Volcano); the job fails when failed pods make
//! `minAvailable` unreachable (`replicas - failed < minAvailable`, remaining pods are stopped),
//! and when every pod has finished it is `Completed` if at least `minAvailable` succeeded,
//! else `Failed`. An evicted pod without a policy is recreated.
//!
//! Lifecycle policies (the task's first, then the job's; `Any` matches every event) react to
//! `PodFailed` (a pod's phase is Failed), `PodEvicted` (a placed, unfinished pod is deleted by
//! someone else than this controller: the scheduler's Eviction API, a drain, a user) and
//! `TaskCompleted` (every pod of a task succeeded):
//!
//! - `RestartJob` / `RestartTask`: `retryCount += 1`, state `Restarting` (condition
//!   `Restarting`), every pod of the job / task is deleted; when they are gone, new ones are
//!   made and the state goes back to `Pending`. With `retryCount == maxRetry` the job is
//!   `Failed` (reason `MaxRetryExceeded`) instead.
//! - `AbortJob`: `Aborted`; `TerminateJob`: `Failed`; `CompleteJob`: `Completing` until the
//!   remaining pods are gone, then `Completed`. Pending and running pods are deleted; finished
//!   pods are kept for their logs.
//!
//! Finished jobs (`Completed`, `Failed`, `Aborted`) carry the condition `Finished`; with
//! `ttlSecondsAfterFinished` the Job is deleted that long after it.
//!
//! The status also carries, for `kubectl get djob`, `minAvailable` (the gang minimum in force,
//! all replicas when the spec leaves it out) and `reason` (`plan::reason`: why the job cannot
//! work, else why its PodGroup waits, mirrored from the group's `Unschedulable` condition; the
//! group's changes reconcile the Job) and `forecast` (the group's, mirrored while the Job is not
//! finished: its position and expected start, which `kubectl get djob` shows).
//!
//! A Job that names no queue goes to its namespace's project queue (the Project listing the
//! namespace and named by its `scheduling.drover.dev/project` label; its first node pool's
//! queue), else to `default`.
//!
//! # Bad input
//!
//! A Job naming a queue (other than `default`) or a PriorityClass that does not exist, a
//! queue that is not a leaf (it has child queues, or is a Department's queue:
//! `drover_api::crd::department::is_department_queue`), or a queue whose `namespaceSelector` (or
//! an ancestor's, or for the implicit `default` queue
//! `drover_api::crd::queue::implicit_default_selector`) does not select the Job's namespace, gets the
//! condition `Valid=False` (reason `QueueNotFound` / `PriorityClassNotFound` /
//! `QueueNotLeaf` / `QueueNotAllowed`) and a Warning Event, and nothing is created until that
//! changes (Queues, their children and PriorityClasses are watched; the job is also retried
//! every [`INVALID_REQUEUE`]). So does a Job with more than `MAX_PODS` replicas in a task or
//! in all (reason `TooManyReplicas`): the CRD refuses those, but the API server does not
//! validate Jobs stored before the bound again. So does
//! a task template that does not read as a pod template (reason `InvalidTemplate`, the field
//! named); such a Job is read on its own and never stops the controller reading the others.
//! A pod the API server refuses (a template that reads but is invalid) gives a Warning Event
//! `FailedCreatePod` and a retry after [`INVALID_REQUEUE`].
//!
//! # Consistency
//!
//! Every reconcile reads the Job and its pods from the API server (not the watch cache), writes
//! the status first (only if it changed, with the Job's resourceVersion: a conflict retries
//! the reconcile) and then deletes and creates pods, so a decision (a retry counted, a state
//! reached) is durable before it is acted on, and repeating a reconcile changes nothing. Pod
//! names are deterministic, so a retried create can never duplicate a pod.
//!
//! There is no finalizer: children are owned by the Job and deleted by Kubernetes' garbage
//! collector when it is.

mod bounds;
mod build;
mod elastic;
mod plan;
mod queue;
mod tracker;
mod validity;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::job::Job;
use drover_api::crd::podgroup::{PodGroup, PodGroupStatus};
use drover_api::crd::queue::Queue;
use drover_kubeutil::events::{self, EventType};
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};

pub use build::{hosts_var, pod_host, pod_name};
pub use elastic::Sizing;
pub use plan::action_for;
// The state machine's inputs and output, public so that property tests can feed it pods with
// tenant-written labels and annotations (controllers/tests/tenant_input.rs).
pub use plan::{plan, Phase, Plan, PodView};
pub use tracker::Eviction;
pub use validity::Validity;

use tracker::Tracker;

/// The controller's name: field manager and Event source.
pub const CONTROLLER_NAME: &str = "drover-job-controller";
pub use drover_api::labels::SCHEDULER_NAME;
pub use drover_api::labels::{JOB_NAME_LABEL, POD_GROUP_ANNOTATION, TASK_INDEX_LABEL, TASK_LABEL};
/// Pod annotation: the Job's `retryCount` when the pod was made (tells a restart's old pods
/// from its new ones).
pub const RETRY_ANNOTATION: &str = "batch.drover.dev/retry-count";
/// Pod annotation: the `WORLD_SIZE` the pod was made with (tells an elastic job's pods made
/// for another size, which a resize restarts).
pub const WORLD_SIZE_ANNOTATION: &str = "batch.drover.dev/world-size";
pub use drover_api::crd::queue::DEFAULT_QUEUE;
/// `MASTER_PORT` when the first task's containers declare no port.
pub const DEFAULT_MASTER_PORT: i32 = 23456;
/// Condition: whether the Job is valid (at most `MAX_PODS` pods, readable templates, a leaf
/// queue that admits it, an existing priority class).
pub const CONDITION_VALID: &str = "Valid";
/// Condition: a restart is in progress (True) or was done (False).
pub const CONDITION_RESTARTING: &str = "Restarting";
/// Condition: the Job finished (reason `Completed`, `Failed`, `Aborted`, ...); its transition
/// time starts the TTL.
pub const CONDITION_FINISHED: &str = "Finished";
/// How often a Job that cannot work (missing queue or class, refused pods) is retried.
pub const INVALID_REQUEUE: Duration = Duration::from_secs(30);
/// Retry delay after a transient API error (conflict, server error).
const ERROR_REQUEUE: Duration = Duration::from_millis(300);
/// Resync period of a quiet Job.
const RESYNC: Duration = Duration::from_secs(300);

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed (retried soon).
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The API server refuses a pod of the job (retried after [`INVALID_REQUEUE`]).
    #[error("pod {0} is refused: {1}")]
    PodRefused(String, String),
}

struct Context {
    client: Client,
    tracker: Tracker,
}

/// Runs the Job controller until `shutdown` completes.
pub async fn run(client: Client, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    let ctx = Arc::new(Context { client: client.clone(), tracker: Tracker::default() });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown_task = tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(());
    });
    let children = watcher::Config::default().labels(JOB_NAME_LABEL);
    let pod_events = {
        let ctx = ctx.clone();
        watcher(Api::<Pod>::all(client.clone()), children.clone())
            .backoff(watch_backoff())
            .map_ok(move |event| {
                ctx.tracker.observe(&event);
                event
            })
            .touched_objects()
    };
    let controller = Controller::new(Api::<Job>::all(client.clone()), watcher::Config::default());
    let store = controller.store();
    let by_queue = store.clone();
    controller
        .owns_stream(pod_events)
        .owns(Api::<PodGroup>::all(client.clone()), children.clone())
        .owns(Api::<Service>::all(client.clone()), children)
        .watches(Api::<Queue>::all(client.clone()), watcher::Config::default(), move |q: Queue| {
            // A queue's change, or a child queue's (which makes it a parent), may change whether
            // the Jobs naming it are valid.
            let (name, parent) = (q.name_any(), q.spec.parent.clone());
            jobs_naming(&by_queue, |j| {
                j.spec.queue.as_deref().is_some_and(|n| n == name || Some(n) == parent.as_deref())
            })
        })
        .watches(Api::<PriorityClass>::all(client.clone()), watcher::Config::default(), move |pc: PriorityClass| {
            jobs_naming(&store, |j| j.spec.priority_class_name.as_deref() == Some(pc.name_any().as_str()))
        })
        .trigger_backoff(watch_backoff())
        .graceful_shutdown_on(async move {
            let _ = rx.await;
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((job, _)) => tracing::debug!(%job, "job reconciled"),
                Err(e) => tracing::warn!(error = %e, "job controller"),
            }
        })
        .await;
    shutdown_task.abort();
    Ok(())
}

/// Reconciles one Job once, outside the controller loop (for tools and tests). Evictions are
/// not known here (they are seen on the controller's pod watch).
pub async fn reconcile_once(client: Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let ctx = Context { client, tracker: Tracker::default() };
    reconcile_job(&ctx, namespace, name).await?;
    Ok(())
}

fn jobs_naming(store: &Store<Job>, pred: impl Fn(&Job) -> bool) -> Vec<ObjectRef<Job>> {
    store.state().iter().filter(|j| pred(j)).map(|j| ObjectRef::from_obj(j.as_ref())).collect()
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = job.namespace().unwrap_or_default();
    reconcile_job(&ctx, &namespace, &job.name_any()).await
}

fn error_policy(job: Arc<Job>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::info!(job = %job.name_any(), %error, "job reconcile failed; retrying");
    match error {
        Error::PodRefused(..) => Action::requeue(INVALID_REQUEUE),
        Error::Kube(_) => Action::requeue(ERROR_REQUEUE),
    }
}

fn is_status(e: &kube::Error, code: u16, reason: Option<&str>) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code && reason.is_none_or(|r| s.reason == r))
}

/// Whether `obj` is controlled by the Job with `uid`.
fn owned_by<K: Resource>(obj: &K, uid: &str) -> bool {
    obj.meta().owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == uid)
}

async fn validate(client: &Client, job: &Job, queue: &str) -> Result<Validity, kube::Error> {
    if let Err(refusal) = bounds::check(job).and_then(|()| elastic::check(job)) {
        return Ok(Err(refusal));
    }
    for (i, task) in job.spec.tasks.iter().enumerate() {
        if let Err(error) = task.template.get() {
            let message = format!("spec.tasks[{i}].template (task {:?}) is not a pod template: {error}", task.name);
            return Ok(Err(("InvalidTemplate".into(), message)));
        }
    }
    if let Err(refusal) = queue::check(client, &job.namespace().unwrap_or_default(), queue).await? {
        return Ok(Err(refusal));
    }
    if let Some(pc) = job.spec.priority_class_name.as_deref() {
        if Api::<PriorityClass>::all(client.clone()).get_opt(pc).await?.is_none() {
            return Ok(Err(("PriorityClassNotFound".into(), format!("PriorityClass {pc:?} does not exist"))));
        }
    }
    Ok(Ok(()))
}

/// The PodGroup named after a job, as stored.
enum Group {
    /// The job's own (`None`: not created yet).
    Own(Option<Box<PodGroup>>),
    /// Another's, left alone.
    Foreign,
}

impl Group {
    fn status(&self) -> Option<&PodGroupStatus> {
        match self {
            Group::Own(live) => live.as_ref()?.status.as_ref(),
            Group::Foreign => None,
        }
    }
}

/// Reads the PodGroup named after the job (a Warning Event when it is another's).
async fn read_group(ctx: &Context, job: &Job, uid: &str) -> Result<Group, Error> {
    let api: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    match api.get_opt(&job.name_any()).await? {
        Some(live) if !owned_by(&live, uid) => {
            let message = format!("PodGroup {} exists and is not this job's; leaving it alone", live.name_any());
            events::publish(&ctx.client, CONTROLLER_NAME, job, EventType::Warning, "PodGroupNotOwned", &message).await;
            Ok(Group::Foreign)
        }
        live => Ok(Group::Own(live.map(Box::new))),
    }
}

/// Creates the job's PodGroup, or replaces its spec when it differs from `desired`.
async fn ensure_pod_group(ctx: &Context, group: Group, desired: PodGroup) -> Result<(), Error> {
    let namespace = desired.namespace().unwrap_or_default();
    let api: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &namespace);
    match group {
        Group::Own(None) => match api.create(&PostParams::default(), &desired).await {
            Err(e) if !is_status(&e, 409, Some("AlreadyExists")) => Err(e.into()),
            _ => Ok(()),
        },
        Group::Own(Some(mut live)) if live.spec != desired.spec => {
            live.spec = desired.spec;
            api.replace(&live.name_any(), &PostParams::default(), &live).await?;
            Ok(())
        }
        Group::Own(Some(_)) | Group::Foreign => Ok(()),
    }
}

async fn ensure_service(ctx: &Context, job: &Job) -> Result<(), Error> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    if api.get_opt(&job.name_any()).await?.is_none() {
        match api.create(&PostParams::default(), &build::service(job)).await {
            Err(e) if !is_status(&e, 409, Some("AlreadyExists")) => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}

/// The views of the pods `uid` (the Job `name`) controls, read a page of [`bounds::BATCH`] at a
/// time so that only the small views of a large Job's pods are held, never all its pods.
async fn pod_views(pods: &Api<Pod>, name: &str, uid: &str) -> Result<Vec<plan::PodView>, kube::Error> {
    let mut params = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={name}")).limit(bounds::BATCH as u32);
    let mut views = Vec::new();
    loop {
        let page = pods.list(&params).await?;
        views.extend(page.items.iter().filter(|p| owned_by(*p, uid)).map(plan::PodView::of));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(views),
        }
    }
}

/// Creates the pods the plan lists ([`bounds::CONCURRENT_CREATES`] at a time). A pod the API
/// server refuses stops the batch with a Warning Event `FailedCreatePod`.
async fn create_pods(ctx: &Context, job: &Job, plan: &plan::Plan) -> Result<(), Error> {
    let env = build::JobEnv::of(job);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let created = futures::stream::iter(plan.create.iter().map(Ok))
        .try_for_each_concurrent(bounds::CONCURRENT_CREATES, |&(task, index)| {
            let pod = build::pod(job, &env, task, index, plan.status.retry_count);
            let pods = &pods;
            async move {
                match pods.create(&PostParams::default(), &pod).await {
                    Ok(_) => Ok(()),
                    Err(e) if is_status(&e, 409, Some("AlreadyExists")) => Ok(()),
                    Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
                        Err(Error::PodRefused(pod.name_any(), s.message))
                    }
                    Err(e) => Err(e.into()),
                }
            }
        })
        .await;
    if let Err(Error::PodRefused(pod, why)) = &created {
        let message = format!("pod {pod} is refused by the API server: {why}");
        events::publish(&ctx.client, CONTROLLER_NAME, job, EventType::Warning, "FailedCreatePod", &message).await;
    }
    created
}

async fn reconcile_job(ctx: &Context, namespace: &str, name: &str) -> Result<Action, Error> {
    let client = &ctx.client;
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    // Fresh from the API server: the watch cache may not have our last status write yet.
    let Some(job) = jobs.get_opt(name).await? else { return Ok(Action::await_change()) };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uid = job.uid().unwrap_or_default();
    let state = job.status.as_ref().map(|s| s.state).unwrap_or_default();
    let finished = matches!(
        state,
        drover_api::crd::job::JobState::Completed
            | drover_api::crd::job::JobState::Failed
            | drover_api::crd::job::JobState::Aborted
    );
    // A Job that names no queue goes to its namespace's project queue, else `default`.
    let queue = match job.spec.queue.as_deref() {
        Some(q) => q.to_string(),
        None => crate::queues::namespace_queue(client, namespace, None).await?,
    };
    let validity = if finished { Ok(()) } else { validate(client, &job, &queue).await? };
    let working = validity.is_ok() && !finished;
    let group = if working { read_group(ctx, &job, &uid).await? } else { Group::Own(None) };
    // An elastic job is planned at the size it should run at.
    let sizing = Sizing::of(&job, group.status());
    let sized = sizing.as_ref().map(|s| elastic::at_size(&job, s.target));

    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let views = pod_views(&pods, name, &uid).await?;
    let evictions = ctx.tracker.evictions(namespace, name);
    let now = jiff::Timestamp::now();
    let mut plan = plan::plan(sized.as_ref().unwrap_or(&job), &views, &evictions, validity, sizing.as_ref(), now);
    plan.status.reason = plan::reason(&plan.status, group.status());
    plan.status.forecast = plan::forecast(&plan.status, group.status());
    tracing::debug!(job = name, pods = views.len(), state = ?plan.status.state, delete = plan.delete.len(),
        create = plan.create.len(), requeue = ?plan.requeue, "job planned");

    if job.status.as_ref() != Some(&plan.status) {
        let mut updated = job.clone();
        updated.status = Some(plan.status.clone());
        jobs.replace_status(name, &PostParams::default(), &updated).await?;
    }
    if working {
        // The group's gang is the size the job's pods are made for: while a resize restart
        // deletes the old pods, still the old size.
        let (in_force, bounds) = match (&sizing, plan.status.replicas) {
            (Some(s), Some(size)) => (Some(elastic::at_size(&job, size)), Some(s.group_bounds())),
            _ => (None, None),
        };
        ensure_pod_group(ctx, group, build::pod_group(in_force.as_ref().unwrap_or(&job), &queue, bounds)).await?;
        ensure_service(ctx, &job).await?;
    }
    for note in &plan.notes {
        events::publish(client, CONTROLLER_NAME, &job, note.kind, &note.reason, &note.message).await;
    }
    for victim in &plan.delete {
        ctx.tracker.deleting(&victim.uid);
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(victim.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        match pods.delete(&victim.name, &dp).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404, None) => ctx.tracker.not_deleting(&victim.uid),
            Err(e) => {
                ctx.tracker.not_deleting(&victim.uid);
                return Err(e.into());
            }
        }
    }
    create_pods(ctx, sized.as_ref().unwrap_or(&job), &plan).await?;
    ctx.tracker.handled(namespace, name, &evictions);
    if plan.delete_job {
        let ttl = job.spec.ttl_seconds_after_finished.unwrap_or(0);
        let message = format!("deleting the job {ttl}s after it finished (ttlSecondsAfterFinished)");
        events::publish(client, CONTROLLER_NAME, &job, EventType::Normal, "TTLExpired", &message).await;
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::default()
        };
        match jobs.delete(name, &dp).await {
            Err(e) if !is_status(&e, 404, None) => return Err(e.into()),
            _ => return Ok(Action::await_change()),
        }
    }
    Ok(Action::requeue(plan.requeue.unwrap_or(RESYNC)))
}
