//! Departments and Projects → the queue tree (one queue per object and node pool), and
//! Projects → namespace labels. See the module docs of [`super`] for the naming.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::department::Department;
use drover_api::crd::project::{NodePoolQuota, Project};
use drover_api::crd::queue::{Queue, QueueSpec};
use drover_kubeutil::events::{self, EventType};
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{trigger_owners, trigger_with, Action};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::runner::{changes, digest, drive, ready, shutdown_signal, ProjectsCtx as Ctx, Retries, Shutdown, Triggers};
use super::{
    api_code, department_queue_name, find_valid, project_queue_name, put_condition, reasons, same_condition,
    valid_condition, valid_pool_name, Error, Problem, GPU_RESOURCE, LABEL_DEPARTMENT, LABEL_NODE_POOL, LABEL_PROJECT,
};

/// The name Events are reported under.
const CONTROLLER: &str = "drover-queue-tree";
/// Every object is reconciled again this often, whatever happens.
const RESYNC: Duration = Duration::from_secs(300);

/// Runs the queue-tree controllers (Departments and Projects → Queues, Projects → Namespace
/// labels) until `shutdown` resolves.
///
/// For every Department `d` and pool `p` of its `spec.nodePools` there is a top-level Queue
/// `d.p`; for every Project `x` and pool `p` a Queue `x.p` with parent `d.p`. Queues of pools
/// that are no longer listed are deleted. A queue's `namespaceSelector` admits only the
/// namespaces of the projects it is for: `x.p` those labelled `x`, `d.p` those of `d`'s
/// projects with a queue in `p` (none while there is no such project). `status.queues`, `status.observedGeneration` and a
/// `Valid` condition say what exists and what cannot (`DepartmentNotFound`,
/// `NodePoolNotInDepartment`, `NamespaceClaimed`, `QueueNameConflict`, `InvalidQueueName`);
/// each new problem also gets a Warning Event.
pub async fn run_queue_tree(client: Client, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    let shutdown = shutdown_signal(shutdown);
    futures::join!(run_projects(client.clone(), shutdown.clone()), run_departments(client, shutdown));
    Ok(())
}

/// What a change of a Project, Department or Queue must differ in to trigger a reconcile
/// (status writes, ours or the scheduler's, do not).
fn spec_key<K: Resource>(obj: &K) -> u64 {
    let m = obj.meta();
    digest(&(&m.generation, &m.deletion_timestamp, &m.labels, &m.owner_references))
}

fn queue_key(q: &Queue) -> u64 {
    digest(&(&q.spec, &q.metadata.labels, &q.metadata.owner_references, &q.metadata.deletion_timestamp))
}

async fn run_projects(client: Client, shutdown: Shutdown) {
    let (store, writer) = reflector::store::<Project>();
    let projects = reflector::reflector(
        writer,
        watcher(Api::<Project>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let related = store.clone();
    let by_department = store.clone();
    let by_namespace = store.clone();
    let departments =
        watcher(Api::<Department>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff());
    let queues = watcher(Api::<Queue>::all(client.clone()), watcher::Config::default().labels(LABEL_PROJECT))
        .backoff(watch_backoff());
    let namespaces =
        watcher(Api::<Namespace>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff());
    let triggers: Triggers<Project> = vec![
        // The project itself, and the projects that list one of its namespaces (a claim may
        // pass to them).
        trigger_with(changes(projects, spec_key::<Project>), move |p: Project| {
            let mut refs = vec![ObjectRef::from_obj(&p)];
            refs.extend(
                related
                    .state()
                    .iter()
                    .filter(|o| o.name_any() != p.name_any())
                    .filter(|o| o.spec.namespaces.iter().any(|n| p.spec.namespaces.contains(n)))
                    .map(|o| ObjectRef::from_obj(&**o)),
            );
            refs
        })
        .boxed(),
        trigger_with(changes(departments, spec_key::<Department>), move |d: Department| {
            let name = d.name_any();
            by_department
                .state()
                .iter()
                .filter(|p| p.spec.department == name)
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .boxed(),
        trigger_owners::<Project, _>(changes(queues, queue_key), (), ()).boxed(),
        trigger_with(changes(namespaces, |ns: &Namespace| digest(&ns.metadata.labels)), move |ns: Namespace| {
            let name = ns.name_any();
            let label = ns.labels().get(LABEL_PROJECT).cloned();
            by_namespace
                .state()
                .iter()
                .filter(|p| p.spec.namespaces.contains(&name) || label.as_deref() == Some(p.name_any().as_str()))
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .boxed(),
    ];
    let ctx = Arc::new(Ctx { client, projects: store.clone(), retries: Retries::default() });
    drive("projects", store, triggers, reconcile_project, ctx, shutdown).await;
}

async fn run_departments(client: Client, shutdown: Shutdown) {
    let (store, writer) = reflector::store::<Department>();
    let departments = reflector::reflector(
        writer,
        watcher(Api::<Department>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let queues = watcher(Api::<Queue>::all(client.clone()), watcher::Config::default().labels(LABEL_DEPARTMENT))
        .backoff(watch_backoff());
    // Projects decide which namespaces a department's queues admit.
    let (projects, project_writer) = reflector::store::<Project>();
    let project_events = reflector::reflector(
        project_writer,
        watcher(Api::<Project>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let every_department = store.clone();
    let triggers: Triggers<Department> = vec![
        trigger_with(changes(departments, spec_key::<Department>), |d: Department| Some(ObjectRef::from_obj(&d)))
            .boxed(),
        trigger_owners::<Department, _>(changes(queues, queue_key), (), ()).boxed(),
        // A project that joins, leaves or changes pools changes its old and new departments'
        // selectors; departments are few, so every one is checked.
        trigger_with(changes(project_events, spec_key::<Project>), move |_: Project| {
            every_department.state().iter().map(|d| ObjectRef::from_obj(&**d)).collect::<Vec<_>>()
        })
        .boxed(),
    ];
    let ctx = Arc::new(Ctx { client, projects, retries: Retries::default() });
    drive("departments", store, triggers, reconcile_department, ctx, shutdown).await;
}

/// The object a queue is made for.
struct Owner {
    kind: String,
    name: String,
    /// Its `metadata.generation`, which its queues record ([`MADE_FROM_GENERATION`]).
    generation: String,
    reference: OwnerReference,
    /// [`LABEL_PROJECT`] or [`LABEL_DEPARTMENT`].
    label: &'static str,
}

/// The namespaces of the projects named in `projects`, by the label the controllers put on a
/// project's namespaces (tenants cannot label namespaces). With no project it selects no
/// namespace: the label both absent and present.
fn projects_selector(projects: &BTreeSet<String>) -> LabelSelector {
    let requirement = |operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
        key: LABEL_PROJECT.to_string(),
        operator: operator.to_string(),
        values,
    };
    let match_expressions = if projects.is_empty() {
        vec![requirement("DoesNotExist", None), requirement("Exists", None)]
    } else {
        vec![requirement("In", Some(projects.iter().cloned().collect()))]
    };
    LabelSelector { match_expressions: Some(match_expressions), match_labels: None }
}

/// The projects of department `department` with a queue in `pool` (so below the department's
/// queue for it), not being deleted. A name longer than a label value (63) is left out: such
/// a project labels no namespace, and the value would make the selector invalid.
fn department_projects(projects: &[Arc<Project>], department: &str, pool: &str) -> BTreeSet<String> {
    projects
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.spec.department == department)
        .filter(|p| p.spec.node_pools.iter().any(|np| np.name == pool))
        .map(|p| p.name_any())
        .filter(|name| name.len() <= 63)
        .collect()
}

impl Owner {
    fn of<K: Resource<DynamicType = ()>>(obj: &K, label: &'static str) -> Result<Self, Error> {
        let reference = obj
            .controller_owner_ref(&())
            .ok_or_else(|| Error::Retry(format!("{} {} has no uid yet", K::kind(&()), obj.name_any())))?;
        let generation = obj.meta().generation.unwrap_or_default().to_string();
        Ok(Owner { kind: K::kind(&()).into_owned(), name: obj.name_any(), generation, reference, label })
    }

    /// The namespaces a Project's queues admit: the project's, by the label the controllers
    /// put on its namespaces (tenants cannot label namespaces).
    fn project_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([(LABEL_PROJECT.to_string(), self.name.clone())])),
            ..LabelSelector::default()
        }
    }

    /// Whether `meta`'s controller is this object (by kind and name: a recreated object
    /// takes over the queues of its predecessor).
    fn controls(&self, meta: &ObjectMeta) -> bool {
        controller_of(meta)
            .is_some_and(|r| r.kind == self.kind && r.name == self.name && r.api_version == self.reference.api_version)
    }
}

/// Queue annotation: the generation of the Project or Department the queue was last made
/// from, so that a difference from it while the owner is unchanged is known as an edit of
/// the queue itself.
const MADE_FROM_GENERATION: &str = "scheduling.drover.dev/made-from-generation";

/// The owner generation the queue was last made from.
fn made_from(q: &Queue) -> Option<&str> {
    q.metadata.annotations.as_ref()?.get(MADE_FROM_GENERATION).map(String::as_str)
}

fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

/// A queue that should exist.
struct Desired {
    name: String,
    pool: String,
    parent: Option<String>,
    quota: NodePoolQuota,
    /// The namespaces the queue admits.
    selector: LabelSelector,
}

impl Desired {
    /// Sets the fields the controller owns.
    fn apply(&self, q: &mut Queue, owner: &Owner) {
        let annotations = q.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(MADE_FROM_GENERATION.to_string(), owner.generation.clone());
        let labels = q.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(LABEL_NODE_POOL.to_string(), self.pool.clone());
        labels.insert(owner.label.to_string(), owner.name.clone());
        let refs = q.metadata.owner_references.get_or_insert_with(Vec::new);
        refs.retain(|r| r.controller != Some(true));
        refs.push(owner.reference.clone());
        q.spec.parent = self.parent.clone();
        q.spec.deserved = deserved(&self.quota);
        q.spec.limit = self.quota.gpu_limit.as_ref().map(|l| BTreeMap::from([(GPU_RESOURCE.to_string(), l.clone())]));
        q.spec.over_quota_weight = self.quota.over_quota_weight;
        q.spec.run_bounds = self.quota.run_bounds.clone();
        q.spec.namespace_selector = Some(self.selector.clone());
    }

    fn new_queue(&self, owner: &Owner) -> Queue {
        let mut q = Queue::new(&self.name, QueueSpec { reclaimable: true, ..QueueSpec::default() });
        self.apply(&mut q, owner);
        q
    }
}

fn deserved(quota: &NodePoolQuota) -> BTreeMap<String, Quantity> {
    [(GPU_RESOURCE, &quota.gpu), ("cpu", &quota.cpu), ("memory", &quota.memory)]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
        .collect()
}

/// A problem if `queue` (for `pool`) cannot be a queue name.
fn check_queue_name(queue: &str, pool: &str) -> Option<Problem> {
    if !valid_pool_name(pool) {
        return Some(Problem::new(
            reasons::INVALID_QUEUE_NAME,
            format!("node pool {pool:?} is not a DNS label (lower-case letters, digits and '-'); no queue for it"),
        ));
    }
    (queue.len() > 253).then(|| {
        Problem::new(reasons::INVALID_QUEUE_NAME, format!("queue name {queue:?} is longer than 253 characters"))
    })
}

async fn reconcile_project(p: Arc<Project>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = p.name_any();
    let owner = Owner::of(&*p, LABEL_PROJECT)?;
    let mut problems = Vec::new();
    let department = Api::<Department>::all(ctx.client.clone()).get_opt(&p.spec.department).await?;
    let mut desired = Vec::new();
    match &department {
        None => problems.push(Problem::new(
            reasons::DEPARTMENT_NOT_FOUND,
            format!("department {:?} does not exist; the project has no queues until it does", p.spec.department),
        )),
        Some(d) => {
            for pool in &p.spec.node_pools {
                let queue = project_queue_name(&name, &pool.name);
                if let Some(problem) = check_queue_name(&queue, &pool.name) {
                    problems.push(problem);
                } else if !d.spec.node_pools.iter().any(|dp| dp.name == pool.name) {
                    problems.push(Problem::new(
                        reasons::NODE_POOL_NOT_IN_DEPARTMENT,
                        format!(
                            "node pool {:?} is not a pool of department {:?}; no queue for it",
                            pool.name,
                            d.name_any()
                        ),
                    ));
                } else {
                    desired.push(Desired {
                        name: queue,
                        pool: pool.name.clone(),
                        parent: Some(department_queue_name(&d.name_any(), &pool.name)),
                        quota: pool.clone(),
                        selector: owner.project_selector(),
                    });
                }
            }
        }
    }
    let queues = sync_queues(&ctx.client, &owner, &desired, &mut problems).await?;
    sync_namespaces(&ctx, &p, &mut problems).await?;
    let status = p.status.as_ref().map(|s| (&s.queues[..], s.observed_generation, &s.conditions[..]));
    write_status(&ctx.client, &*p, status, queues, problems).await?;
    Ok(Action::requeue(RESYNC))
}

async fn reconcile_department(d: Arc<Department>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    // Without every project, a selector would shut out some project's namespaces.
    if !ready(&ctx.projects) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let name = d.name_any();
    let projects = ctx.projects.state();
    let mut problems = Vec::new();
    let mut desired = Vec::new();
    for pool in &d.spec.node_pools {
        let queue = department_queue_name(&name, &pool.name);
        match check_queue_name(&queue, &pool.name) {
            Some(problem) => problems.push(problem),
            None => desired.push(Desired {
                name: queue,
                pool: pool.name.clone(),
                parent: None,
                quota: pool.clone(),
                selector: projects_selector(&department_projects(&projects, &name, &pool.name)),
            }),
        }
    }
    let owner = Owner::of(&*d, LABEL_DEPARTMENT)?;
    let queues = sync_queues(&ctx.client, &owner, &desired, &mut problems).await?;
    let status = d.status.as_ref().map(|s| (&s.queues[..], s.observed_generation, &s.conditions[..]));
    write_status(&ctx.client, &*d, status, queues, problems).await?;
    Ok(Action::requeue(RESYNC))
}

/// Makes the owner's queues exactly `desired` (creating, updating and deleting queues it
/// controls) and returns the names of those that exist as desired, in order.
async fn sync_queues(
    client: &Client,
    owner: &Owner,
    desired: &[Desired],
    problems: &mut Vec<Problem>,
) -> Result<Vec<String>, Error> {
    let api: Api<Queue> = Api::all(client.clone());
    let listed = api.list(&ListParams::default().labels(&format!("{}={}", owner.label, owner.name))).await?;
    let mut ours: BTreeMap<String, Queue> =
        listed.items.into_iter().filter(|q| owner.controls(&q.metadata)).map(|q| (q.name_any(), q)).collect();
    let mut ensured = Vec::new();
    for d in desired {
        let live = match ours.remove(&d.name) {
            Some(q) => q,
            None => match api.create(&PostParams::default(), &d.new_queue(owner)).await {
                Ok(_) => {
                    tracing::info!(queue = %d.name, owner = %owner.name, "created queue");
                    ensured.push(d.name.clone());
                    continue;
                }
                Err(e) if api_code(&e) == Some(409) => match api.get_opt(&d.name).await? {
                    Some(q) => q,
                    // A conflict on create without an object: retry.
                    None => return Err(e.into()),
                },
                Err(e) => return Err(e.into()),
            },
        };
        if !owner.controls(&live.metadata) {
            let holder = controller_of(&live.metadata)
                .map(|r| format!("{} {:?}", r.kind, r.name))
                .unwrap_or_else(|| "no controller".to_string());
            problems.push(Problem::new(
                reasons::QUEUE_NAME_CONFLICT,
                format!("queue {:?} already exists and belongs to {holder}; it is left alone", d.name),
            ));
            continue;
        }
        let mut updated = live.clone();
        d.apply(&mut updated, owner);
        if updated.metadata != live.metadata || updated.spec != live.spec {
            api.replace(&d.name, &PostParams::default(), &updated).await?;
            tracing::info!(queue = %d.name, owner = %owner.name, "updated queue");
            if updated.spec != live.spec && made_from(&live) == Some(owner.generation.as_str()) {
                // The owner is as the queue was made from it: someone edited the queue.
                let message = format!(
                    "queue {} is made from {} {}'s node pool {}, so its edit was put back: edit the {}'s \
                     spec.nodePools instead",
                    d.name, owner.kind, owner.name, d.pool, owner.kind
                );
                events::publish(client, CONTROLLER, &updated, EventType::Warning, reasons::MANAGED_QUEUE, &message)
                    .await;
            }
        }
        ensured.push(d.name.clone());
    }
    for (name, q) in ours {
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: q.uid(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => tracing::info!(queue = %name, owner = %owner.name, "deleted queue"),
            Err(e) if api_code(&e) == Some(404) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(ensured)
}

/// The project a namespace belongs to: the earliest-created (then smallest-named) project,
/// not being deleted, that lists it.
pub(crate) fn namespace_owner<'a>(projects: &'a [Arc<Project>], namespace: &str) -> Option<&'a Arc<Project>> {
    projects
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.spec.namespaces.iter().any(|n| n == namespace))
        .min_by_key(|p| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), p.name_any()))
}

/// Labels the namespaces the project owns, reports those another project owns, and
/// unlabels the ones it no longer owns.
async fn sync_namespaces(ctx: &Ctx, p: &Project, problems: &mut Vec<Problem>) -> Result<(), Error> {
    let name = p.name_any();
    if name.len() > 63 {
        if !p.spec.namespaces.is_empty() {
            problems.push(Problem::new(
                reasons::PROJECT_NAME_TOO_LONG,
                "the project name is longer than 63 characters, so its namespaces cannot be labelled",
            ));
        }
        return Ok(());
    }
    let all = ctx.projects.state();
    let mut owned = BTreeSet::new();
    for ns in &p.spec.namespaces {
        match namespace_owner(&all, ns) {
            Some(other) if other.name_any() != name => problems.push(Problem::new(
                reasons::NAMESPACE_CLAIMED,
                format!("namespace {ns:?} belongs to project {:?}, created earlier", other.name_any()),
            )),
            _ => {
                owned.insert(ns.clone());
            }
        }
    }
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    for ns in &owned {
        let Some(live) = api.get_opt(ns).await? else { continue };
        if live.labels().get(LABEL_PROJECT) != Some(&name) {
            let patch =
                json!({"metadata": {"resourceVersion": live.resource_version(), "labels": {LABEL_PROJECT: name}}});
            api.patch(ns, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            tracing::info!(namespace = %ns, project = %name, "labelled namespace");
        }
    }
    let labelled = api.list(&ListParams::default().labels(&format!("{LABEL_PROJECT}={name}"))).await?;
    for live in labelled.items.iter().filter(|ns| !owned.contains(&ns.name_any())) {
        let patch = json!({"metadata": {"resourceVersion": live.resource_version(), "labels": {LABEL_PROJECT: null}}});
        api.patch(&live.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        tracing::info!(namespace = %live.name_any(), project = %name, "unlabelled namespace");
    }
    Ok(())
}

/// Writes `status.queues`, `observedGeneration` and `Valid` of a Project or Department when
/// they changed, with a Warning Event for a new problem.
async fn write_status<K>(
    client: &Client,
    obj: &K,
    current: Option<(&[String], Option<i64>, &[Condition])>,
    queues: Vec<String>,
    problems: Vec<Problem>,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let (old_queues, old_generation, old_conditions) = current.unwrap_or((&[], None, &[]));
    let generation = obj.meta().generation;
    let previous = find_valid(old_conditions);
    let ok_message = match queues.len() {
        0 => "no queues".to_string(),
        _ => format!("queues: {}", queues.join(", ")),
    };
    let condition = valid_condition(previous, &problems, reasons::QUEUES_READY, ok_message, generation);
    if old_queues == &queues[..] && old_generation == generation && same_condition(previous, &condition) {
        return Ok(());
    }
    let news = previous
        .is_none_or(|p| p.status != condition.status || p.reason != condition.reason || p.message != condition.message);
    let patch = json!({"status": {
        "queues": queues,
        "observedGeneration": generation,
        "conditions": put_condition(old_conditions, condition.clone()),
    }});
    Api::<K>::all(client.clone()).patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    if news && condition.status == "False" {
        events::publish(client, CONTROLLER, obj, EventType::Warning, &condition.reason, &condition.message).await;
    }
    Ok(())
}
