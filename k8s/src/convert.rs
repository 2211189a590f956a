//! Kubernetes objects to scheduling snapshot inputs.
//!
//! [`convert`] turns the contents of the scheduler's reflector stores (Nodes, Pods,
//! PodGroups, Queues, PriorityClasses) into the name-based inputs of
//! [`drover_scheduler::snapshot::build`], plus a [`PodRef`] for every pod it hands over (to
//! write decisions back), the facts of every PodGroup (its members, pod counts and gang
//! minimums, for its status, its bindings and the recovery of bind intents) and a list of
//! [`Problem`]s: objects it had to leave out or read only in part, with a CamelCase reason
//! for Events and conditions. It is pure and synchronous, never panics on any object, and
//! never produces inputs that `snapshot::build` rejects: one bad object is reported and left
//! out instead of breaking the cycle for everyone.
//!
//! The rules, object by object (membership, requests, phases, tasks, constraints, priority,
//! queues, detached pods, problems), are the user's reference in `docs/conversion.md`; a change
//! of behaviour here changes that page in the same commit.
//!
//! By concern: [`facts`] (what every PodGroup holds), `group` (a PodGroup to a job: phase,
//! queue, shape), `job` (pod phases, tasks and minimums), `detached` (membership and charge of
//! pods no group holds), `priority` and `run_time`, `nodes`, `pod` (requests and constraints),
//! `queue`, `topology`, `elastic`, `reuse` (the previous cycle's conversion).

mod detached;
mod elastic;
mod facts;
mod group;
mod job;
mod member;
mod nodes;
mod pod;
mod priority;
mod queue;
mod reuse;
mod run_time;
mod topology;

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;

use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_api::crd::topology::Topology;
use drover_api::labels::PROJECT_LABEL;
use drover_api::ResourceList;
use drover_scheduler::ids::{JobId, PodId, TiVec};
use drover_scheduler::run_times::{Prediction, RunTimeHistory};
use drover_scheduler::snapshot::{JobInput, NodeInput, QueueInput, Snapshot, SnapshotError, TopologyInput};
use drover_scheduler::usage::UsageLedger;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::charge::Charge;
use crate::run_times;
use pod::Finding;
use priority::Classes;
use queue::QueueState;
use topology::Catalog;

use detached::{detached_job, project_queues, Detached};
pub use facts::{membership, GroupFacts, GroupMember, PodCounts};
use group::{admission, group_job, group_queue, GroupAt};
use nodes::convert_nodes;
use nodes::NodeDraft;
pub use reuse::Reuse;

pub use drover_api::crd::queue::DEFAULT_QUEUE;
pub use drover_api::labels::{POD_GROUP_ANNOTATION, PREEMPTIBLE_ANNOTATION, TASK_INDEX_LABEL, TASK_LABEL};
/// The task of pods without the task label.
pub const DEFAULT_TASK: &str = "main";

/// The store contents of one cycle.
#[derive(Debug, Clone, Copy)]
pub struct Objects<'a> {
    /// Nodes.
    pub nodes: &'a [Arc<Node>],
    /// Pods: the scheduler's own and every pod bound to a node.
    pub pods: &'a [Arc<Pod>],
    /// PodGroups.
    pub pod_groups: &'a [Arc<PodGroup>],
    /// Queues.
    pub queues: &'a [Arc<Queue>],
    /// PriorityClasses.
    pub priority_classes: &'a [Arc<PriorityClass>],
    /// Namespaces, whose labels decide which queues their work may use.
    pub namespaces: &'a [Arc<Namespace>],
    /// Topologies, which groups may ask to be placed within.
    pub topologies: &'a [Arc<Topology>],
}

/// The objects of one cycle, owned: what the scheduler's cache gathers and what `drover
/// explain` lists, so both convert the same thing.
#[derive(Debug, Default, Clone)]
pub struct ObjectLists {
    /// Nodes.
    pub nodes: Vec<Arc<Node>>,
    /// Pods.
    pub pods: Vec<Arc<Pod>>,
    /// PodGroups.
    pub pod_groups: Vec<Arc<PodGroup>>,
    /// Queues.
    pub queues: Vec<Arc<Queue>>,
    /// PriorityClasses.
    pub classes: Vec<Arc<PriorityClass>>,
    /// Namespaces.
    pub namespaces: Vec<Arc<Namespace>>,
    /// Topologies.
    pub topologies: Vec<Arc<Topology>>,
}

impl ObjectLists {
    /// The lists as the conversion reads them.
    pub fn objects(&self) -> Objects<'_> {
        Objects {
            nodes: &self.nodes,
            pods: &self.pods,
            pod_groups: &self.pod_groups,
            queues: &self.queues,
            priority_classes: &self.classes,
            namespaces: &self.namespaces,
            topologies: &self.topologies,
        }
    }
}

/// The pod behind one pod of the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`, for preconditions on bindings and evictions.
    pub uid: Option<String>,
    /// `metadata.resourceVersion` the decision was made on.
    pub resource_version: Option<String>,
}

impl PodRef {
    /// The reference to `pod`.
    pub fn of(pod: &Pod) -> PodRef {
        PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
        }
    }
}

/// Something about an object that the conversion could not take as written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// `Node`, `Pod`, `PodGroup`, `Queue`, `PriorityClass` or `Topology`.
    pub kind: &'static str,
    /// Namespace of namespaced objects.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
    /// CamelCase reason, e.g. `QueueNotFound`.
    pub reason: String,
    /// Human-readable explanation.
    pub message: String,
}

/// The inputs of `snapshot::build`, and what is needed to act on its decisions.
#[derive(Debug, Clone, Default)]
pub struct Converted {
    /// Nodes, by name, with the usage of pods not handed to the core subtracted.
    pub nodes: Vec<NodeInput>,
    /// Queues, by name.
    pub queues: Vec<QueueInput>,
    /// The usable Topologies, by name.
    pub topologies: Vec<TopologyInput>,
    /// Jobs, by `namespace/name`.
    pub jobs: Vec<JobInput>,
    /// One per pod of `jobs`, in job, task, index order: index `i` is the snapshot's pod `i`.
    pub pods: TiVec<PodId, PodRef>,
    /// Every existing PodGroup (handed over or not), by (namespace, name).
    pub groups: BTreeMap<(String, String), GroupFacts>,
    /// Problems, sorted.
    pub problems: Vec<Problem>,
    /// Time-based fair share's ledger, as the Queues' status keeps it.
    pub ledger: UsageLedger,
    /// Each queue's learned run times, by queue name, as the Queues' status keeps them.
    pub run_times: BTreeMap<String, RunTimeHistory>,
}

impl Converted {
    /// The snapshot of these inputs (the conversion never hands over inputs it refuses).
    pub fn snapshot(&self) -> Result<Snapshot, SnapshotError> {
        drover_scheduler::snapshot::build_with_topologies(&self.nodes, &self.queues, &self.topologies, &self.jobs)
    }

    /// The snapshot at `now` (seconds since the Unix epoch), as the scheduler runs its cycle
    /// and `drover explain` runs its own: a job that declares no run time plans with what its
    /// queue's learned run times predict ([`Converted::predictions`]), and a job running on a
    /// loan of reserved capacity is due when its group's status says.
    pub fn snapshot_at(&self, now: i64) -> Result<Snapshot, SnapshotError> {
        Ok(self.at(self.snapshot()?, now))
    }

    /// `snap`, this conversion's [`Converted::snapshot`], brought to `now` as
    /// [`Converted::snapshot_at`] says.
    pub fn at(&self, snap: Snapshot, now: i64) -> Snapshot {
        let mut snap = snap.at_unix_time(now);
        let predicted = self.predictions(&snap);
        run_times::apply(&mut snap, &predicted);
        for job in snap.jobs.iter_mut() {
            let facts = self.groups.get(&(job.namespace.clone(), job.name.clone()));
            job.borrowed_until = facts.and_then(|f| f.borrowed_until);
        }
        snap
    }

    /// What the queues' learned run times predict for each job of `snap` that declares no run
    /// time, learned by its group's [`GroupFacts::job_name`].
    pub fn predictions(&self, snap: &Snapshot) -> TiVec<JobId, Option<Prediction>> {
        run_times::predict(snap, &self.run_times, |job| {
            self.groups.get(&(job.namespace.clone(), job.name.clone())).map(|f| f.job_name.as_str())
        })
    }
}

/// One non-terminated pod.
struct PodInfo<'a> {
    pod: &'a Pod,
    namespace: String,
    name: String,
    node: Option<String>,
    deleting: bool,
    requests: BTreeMap<String, i64>,
    findings: Vec<Finding>,
    /// The charge record the scheduler wrote before binding the pod (bound pods only).
    charge: Option<Charge>,
    /// Whether the pod names this scheduler.
    ours: bool,
}

impl PodInfo<'_> {
    fn problem(&self, reason: &str, message: String) -> Problem {
        Problem {
            kind: "Pod",
            namespace: Some(self.namespace.clone()),
            name: self.name.clone(),
            reason: reason.to_string(),
            message,
        }
    }
}

fn name_of(meta: &ObjectMeta) -> Option<&str> {
    meta.name.as_deref().filter(|n| !n.is_empty())
}

fn key_of(meta: &ObjectMeta) -> Option<(String, String)> {
    Some((meta.namespace.clone().unwrap_or_default(), name_of(meta)?.to_string()))
}

/// The objects by `(namespace, name)`, one per key (see "Determinism"); nameless ones are
/// dropped.
pub(crate) fn unique<T: Serialize>(
    objects: &[Arc<T>],
    meta: impl Fn(&T) -> &ObjectMeta,
) -> BTreeMap<(String, String), &T> {
    let mut out: BTreeMap<(String, String), &T> = BTreeMap::new();
    for o in objects {
        let Some(key) = key_of(meta(o)) else { continue };
        match out.entry(key) {
            Entry::Vacant(e) => {
                e.insert(o);
            }
            Entry::Occupied(mut e) => {
                let rank = |x: &T| {
                    let m = meta(x);
                    (m.uid.clone(), m.resource_version.clone(), serde_json::to_string(x).unwrap_or_default())
                };
                if rank(o) < rank(e.get()) {
                    e.insert(o);
                }
            }
        }
    }
    out
}

/// Amounts an object declares (a queue's quota or limit, a group's `minResources`). An invalid
/// entry is reported through `invalid` and left out rather than taken as 0: a 0 quota, limit
/// or size would mean something the author did not write.
fn declared_amounts(
    declared: &BTreeMap<String, Quantity>,
    what: &str,
    mut invalid: impl FnMut(String),
) -> ResourceList {
    let mut out = ResourceList::default();
    for (name, quantity) in declared {
        match ResourceList::parse_amount(name, &quantity.0) {
            Ok(amount) => {
                out.0.insert(name.clone(), amount);
            }
            Err(e) => invalid(format!("{what} {name}: {e}; entry ignored")),
        }
    }
    out
}

fn created(meta: &ObjectMeta) -> i64 {
    meta.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second())
}

/// Converts the store contents into snapshot inputs; see docs/conversion.md for the rules.
pub fn convert(objects: &Objects, scheduler_name: &str) -> Converted {
    let mut problems = Vec::new();
    let classes = Classes::new(objects.priority_classes, &mut problems);
    let mut nodes = convert_nodes(objects.nodes, &mut problems);
    let (queues, queue_state) = queue::convert(objects.queues, &mut problems);
    let ledger = queue::usage_ledger(objects.queues, &mut problems);
    let learned = run_times::histories(objects.queues);
    let (topologies, catalog) = topology::convert(objects.topologies, &mut problems);

    let groups = unique(objects.pod_groups, |g| &g.metadata);
    let pods = unique(objects.pods, |p| &p.metadata);

    let mut facts: BTreeMap<(String, String), GroupFacts> =
        groups.iter().map(|(k, g)| (k.clone(), GroupFacts::of(g))).collect();
    let mut members: BTreeMap<(String, String), Vec<PodInfo>> = BTreeMap::new();
    let mut orphans: Vec<(PodInfo, String)> = Vec::new();
    let mut foreign: Vec<PodInfo> = Vec::new();
    // Bound pods of this scheduler that name no group at all.
    let mut ungrouped: Vec<PodInfo> = Vec::new();
    for ((namespace, name), pod) in pods {
        let spec = pod.spec.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
        let ours = spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name);
        let node = spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
        let (charge, group) = membership(pod, scheduler_name);
        let group_key = group.map(|g| (namespace.clone(), g));
        if let Some(group) = group_key.as_ref().and_then(|k| facts.get_mut(k)) {
            group.add(pod, node.as_ref(), phase);
        }
        if phase == "Succeeded" || phase == "Failed" {
            continue;
        }
        let mut findings = Vec::new();
        let info = PodInfo {
            pod,
            node,
            deleting: pod.metadata.deletion_timestamp.is_some(),
            requests: pod::requests(pod, &mut findings),
            findings,
            charge,
            ours,
            namespace,
            name,
        };
        match group_key {
            Some(k) if groups.contains_key(&k) => members.entry(k).or_default().push(info),
            Some((_, group)) => orphans.push((info, group)),
            None if ours && info.node.is_some() => ungrouped.push(info),
            None => foreign.push(info),
        }
    }

    let empty = BTreeMap::new();
    let namespaces: BTreeMap<&str, &BTreeMap<String, String>> = objects
        .namespaces
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref().unwrap_or(&empty))))
        .collect();
    let lookup = Lookup {
        nodes: &nodes,
        queue_state: &queue_state,
        namespaces: &namespaces,
        project_queues: project_queues(objects.queues, &queue_state),
        classes: &classes,
        topologies: &catalog,
    };
    let mut jobs = Vec::new();
    let mut refs = TiVec::new();
    let mut detached = Detached::default();
    for (key, group) in &groups {
        // Bound pods charged to another queue than the group's stay charged there.
        let queue = group_queue(group);
        let (pods, strays): (Vec<PodInfo>, Vec<PodInfo>) = members
            .remove(key)
            .unwrap_or_default()
            .into_iter()
            .partition(|p| p.charge.as_ref().is_none_or(|c| c.queue == queue));
        foreign.extend(strays.into_iter().filter_map(|info| detached.add(&lookup, info, &key.1, None)));
        let at = GroupAt { group, namespace: &key.0, name: &key.1, queue, pods };
        match group_job(at, &lookup, &mut problems) {
            Ok((job, job_refs)) => {
                jobs.push(job);
                refs.extend(job_refs);
            }
            Err(left_out) => {
                let admitted = admission(group).map(|a| (a.queue.clone(), a.priority_class_name.clone()));
                for info in left_out {
                    foreign.extend(detached.add(&lookup, info, &key.1, admitted.as_ref()));
                }
            }
        }
    }
    for (info, group) in orphans {
        let missing = info.problem("PodGroupNotFound", format!("pod group {group:?} does not exist"));
        match detached.add(&lookup, info, &group, None) {
            None => problems.push(Problem {
                message: format!("{}; the bound pod stays charged to its queue as detached work", missing.message),
                ..missing
            }),
            Some(info) => {
                problems.push(Problem {
                    message: format!("{} (yet); the pod is not scheduled until it does", missing.message),
                    ..missing
                });
                foreign.push(info);
            }
        }
    }
    for info in ungrouped {
        let name = info.name.clone();
        foreign.extend(detached.add(&lookup, info, &name, None));
    }
    for ((namespace, group, queue), (class, pods)) in detached.0 {
        let charge = Charge { queue, group, priority_class: class };
        match detached_job(&namespace, &charge, pods, &lookup, &mut problems) {
            Ok((job, job_refs)) => {
                jobs.push(job);
                refs.extend(job_refs);
            }
            Err(pods) => foreign.extend(pods),
        }
    }

    for info in foreign {
        let Some(draft) = info.node.as_ref().and_then(|n| nodes.get_mut(n)) else { continue };
        for (reason, message) in &info.findings {
            problems.push(info.problem(reason, message.clone()));
        }
        for (resource, amount) in &info.requests {
            if let Some(free) = draft.allocatable.get_mut(resource) {
                *free = free.saturating_sub(*amount).max(0);
            }
        }
    }

    problems.sort();
    problems.dedup();
    Converted {
        nodes: nodes
            .into_iter()
            .map(|(name, d)| NodeInput {
                name,
                allocatable: ResourceList(d.allocatable),
                labels: d.labels,
                taints: d.taints,
                unschedulable: d.unschedulable,
            })
            .collect(),
        queues,
        topologies,
        jobs,
        pods: refs,
        groups: facts,
        problems,
        ledger,
        run_times: learned,
    }
}

/// GPUs a pod requests (0 when its requests do not read), for learning a finished group's shape.
pub(crate) fn gpus_requested(pod: &Pod) -> i64 {
    pod::requests(pod, &mut Vec::new()).get(drover_api::GPU).copied().unwrap_or(0)
}

/// What the conversion of one group looks things up in.
struct Lookup<'a> {
    nodes: &'a BTreeMap<String, NodeDraft>,
    queue_state: &'a BTreeMap<String, QueueState>,
    namespaces: &'a BTreeMap<&'a str, &'a BTreeMap<String, String>>,
    /// Per project, its valid leaf queues (from the Queues' project label), by name.
    project_queues: BTreeMap<String, Vec<String>>,
    classes: &'a Classes,
    topologies: &'a Catalog<'a>,
}

impl Lookup<'_> {
    /// For a namespace of a project: where its work goes instead of `default`.
    fn project_hint(&self, namespace: &str) -> Option<String> {
        let project = self.namespaces.get(namespace)?.get(PROJECT_LABEL)?;
        Some(match self.project_queues.get(project) {
            Some(queues) => format!("; work of project {project:?} uses its queues ({})", queues.join(", ")),
            None => format!("; work of project {project:?} uses its queues, and it has none yet"),
        })
    }
}

/// Whether `queue` is in the tree and takes pod groups.
fn valid_leaf(state: &BTreeMap<String, QueueState>, queue: &str) -> bool {
    matches!(state.get(queue), Some(QueueState::Valid { leaf: true, .. }))
}
