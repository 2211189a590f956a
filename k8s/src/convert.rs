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

mod elastic;
mod pod;
mod priority;
mod queue;
mod reuse;
mod topology;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use drover_api::crd::podgroup::{Admission, PodGroup, PodGroupPhase};
use drover_api::crd::queue::{namespace_refusal, Queue};
use drover_api::crd::topology::Topology;
use drover_api::labels::PROJECT_LABEL;
use drover_api::ResourceList;
use drover_scheduler::ids::{JobId, PodId, TiVec};
use drover_scheduler::run_times::{Prediction, RunTimeHistory};
use drover_scheduler::snapshot::{
    Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueInput, RunTime, Snapshot, SnapshotError, TaskInput,
    TopologyInput,
};
use drover_scheduler::usage::UsageLedger;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::charge::Charge;
use crate::run_times;
use elastic::Elastic;
use pod::Finding;
use priority::{Classes, Resolved};
use queue::QueueState;
use topology::{Catalog, Requests};

pub use reuse::Reuse;

pub use drover_api::labels::{POD_GROUP_ANNOTATION, PREEMPTIBLE_ANNOTATION, TASK_INDEX_LABEL, TASK_LABEL};
/// The queue of groups that name none.
pub const DEFAULT_QUEUE: &str = "default";
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

/// Pods of one PodGroup by outcome, for its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Pods of the group, in any phase (a bound pod counts in the group it was charged as).
    pub total: u32,
    /// Pods in phase `Running`.
    pub running: u32,
    /// Pods in phase `Succeeded`.
    pub succeeded: u32,
    /// Pods in phase `Failed`.
    pub failed: u32,
}

/// One PodGroup as the conversion found it: its members (by the membership rule above, the
/// only one), their counts and its gang minimums. The status writer, the bindings and the
/// recovery of bind intents read it instead of looking at pods again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFacts {
    /// Its pods by outcome.
    pub counts: PodCounts,
    /// Its pods, in any phase, by name.
    pub members: BTreeMap<String, GroupMember>,
    /// `spec.minMember`.
    min_member: u32,
    /// `spec.minTaskMember`.
    min_task_member: BTreeMap<String, u32>,
    /// The name its runs are learned and predicted by ([`crate::run_times::job_name`]).
    pub job_name: String,
    /// When its loan of capacity reserved for another gang is due, as its status records it.
    pub borrowed_until: Option<i64>,
}

/// A pod of a PodGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The pod.
    pub pod: PodRef,
    /// Its task (see "Tasks").
    pub task: String,
    /// The node it is bound to.
    pub node: Option<String>,
    /// Finished (`Succeeded`/`Failed`) or being deleted.
    pub ended: bool,
}

impl GroupFacts {
    fn of(group: &PodGroup) -> GroupFacts {
        GroupFacts {
            min_member: group.spec.min_member,
            min_task_member: group.spec.min_task_member.clone(),
            job_name: run_times::job_name(group),
            borrowed_until: group.status.as_ref().and_then(|s| s.borrowed_until.as_ref()).map(|t| t.0.as_second()),
            ..GroupFacts::default()
        }
    }

    fn add(&mut self, pod: &Pod, node: Option<&String>, phase: &str) {
        self.counts.total += 1;
        match phase {
            "Running" => self.counts.running += 1,
            "Succeeded" => self.counts.succeeded += 1,
            "Failed" => self.counts.failed += 1,
            _ => {}
        }
        let ended = pod.metadata.deletion_timestamp.is_some() || matches!(phase, "Succeeded" | "Failed");
        let member = GroupMember { pod: PodRef::of(pod), task: task_of(pod), node: node.cloned(), ended };
        self.members.insert(member.pod.name.clone(), member);
    }

    /// Whether the group has its gang minimum (overall and per task) of bound members that
    /// have not ended, when the members named in `adding` are bound too.
    pub fn ready_with(&self, adding: &BTreeSet<&str>) -> bool {
        let mut total = 0u32;
        let mut per_task: BTreeMap<&str, u32> = BTreeMap::new();
        for (name, m) in &self.members {
            if (m.node.is_some() && !m.ended) || adding.contains(name.as_str()) {
                total += 1;
                *per_task.entry(m.task.as_str()).or_default() += 1;
            }
        }
        total >= self.min_member
            && self.min_task_member.iter().all(|(task, min)| per_task.get(task.as_str()).copied().unwrap_or(0) >= *min)
    }
}

/// A pod's task: its label [`TASK_LABEL`], else [`DEFAULT_TASK`].
fn task_of(pod: &Pod) -> String {
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get(TASK_LABEL)).filter(|t| !t.is_empty());
    label.cloned().unwrap_or_else(|| DEFAULT_TASK.to_string())
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

/// A node before the usage of foreign pods is subtracted.
struct NodeDraft {
    allocatable: BTreeMap<String, i64>,
    labels: BTreeMap<String, String>,
    taints: Vec<drover_api::Taint>,
    unschedulable: bool,
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
        // A bound pod belongs to the group it was charged as; the annotation (which the tenant
        // may edit at any time) only decides for pods not bound yet.
        let charge = if ours && node.is_some() { Charge::of(pod) } else { None };
        let annotated = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_GROUP_ANNOTATION))
            .filter(|g| !g.is_empty() && ours)
            .cloned();
        let group = charge.as_ref().map(|c| c.group.clone()).or(annotated);
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

fn convert_nodes(objects: &[Arc<Node>], problems: &mut Vec<Problem>) -> BTreeMap<String, NodeDraft> {
    let mut nodes = BTreeMap::new();
    for ((_, name), node) in unique(objects, |n| &n.metadata) {
        let name = name.as_str();
        let mut findings = Vec::new();
        let allocatable =
            pod::parse_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()), "allocatable", &mut findings);
        let spec = node.spec.as_ref();
        let taints = spec.and_then(|s| s.taints.as_ref()).into_iter().flatten().map(|t| pod::taint(t, &mut findings));
        let draft = NodeDraft {
            taints: taints.collect(),
            allocatable,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        };
        for (reason, message) in findings {
            problems.push(Problem {
                kind: "Node",
                namespace: None,
                name: name.to_string(),
                reason: reason.into(),
                message,
            });
        }
        nodes.insert(name.to_string(), draft);
    }
    nodes
}

/// A pod placed in a task, with its phase.
struct Member<'a> {
    info: PodInfo<'a>,
    phase: PodPhaseInput,
    index: Option<u32>,
    created: i64,
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

    /// What a bound pod of this scheduler that no handed-over group holds is charged to (see
    /// "Detached pods" in docs/conversion.md): its own record, else the admission of the group it
    /// was left out with, else its namespace's project queue, else `default`. `None` for pods
    /// not bound, of other schedulers, or when no such queue exists.
    fn detached_charge(&self, info: &PodInfo, group: &str, admitted: Option<&(String, String)>) -> Option<Charge> {
        if !info.ours || info.node.is_none() {
            return None;
        }
        let recorded = info.charge.clone().or_else(|| {
            admitted.map(|(queue, class)| Charge {
                queue: queue.clone(),
                group: group.to_string(),
                priority_class: class.clone(),
            })
        });
        if let Some(charge) = recorded.as_ref().filter(|c| valid_leaf(self.queue_state, &c.queue)) {
            return Some(charge.clone());
        }
        let project = self.namespaces.get(info.namespace.as_str()).and_then(|l| l.get(PROJECT_LABEL));
        let queue = project
            .and_then(|p| self.project_queues.get(p))
            .and_then(|qs| qs.first().cloned())
            .or_else(|| valid_leaf(self.queue_state, DEFAULT_QUEUE).then(|| DEFAULT_QUEUE.to_string()))?;
        let priority_class = recorded.map(|c| c.priority_class).unwrap_or_default();
        Some(Charge { queue, group: group.to_string(), priority_class })
    }
}

/// Detached pods by (namespace, group, queue), with the priority class of the first.
#[derive(Default)]
struct Detached<'a>(BTreeMap<(String, String, String), (String, Vec<PodInfo<'a>>)>);

impl<'a> Detached<'a> {
    /// Adds a pod that no handed-over group holds, charged by
    /// [`Lookup::detached_charge`]; hands it back when nothing can be charged for it.
    fn add(
        &mut self,
        lookup: &Lookup,
        info: PodInfo<'a>,
        group: &str,
        admitted: Option<&(String, String)>,
    ) -> Option<PodInfo<'a>> {
        let Some(charge) = lookup.detached_charge(&info, group, admitted) else { return Some(info) };
        let key = (info.namespace.clone(), charge.group, charge.queue);
        self.0.entry(key).or_insert_with(|| (charge.priority_class, Vec::new())).1.push(info);
        None
    }
}

/// The queue a group's pods are charged to: the admitted one while its admission holds,
/// else `spec.queue`, else `default`.
fn group_queue(group: &PodGroup) -> String {
    match admission(group) {
        Some(a) => a.queue.clone(),
        None => group.spec.queue.clone().filter(|q| !q.is_empty()).unwrap_or_else(|| DEFAULT_QUEUE.to_string()),
    }
}

/// Whether `queue` is in the tree and takes pod groups.
fn valid_leaf(state: &BTreeMap<String, QueueState>, queue: &str) -> bool {
    matches!(state.get(queue), Some(QueueState::Valid { leaf: true, .. }))
}

/// Per project, its valid leaf queues by name: Queues carry the project label the controllers
/// set (Queues are admin-only, so the label is trusted).
fn project_queues(queues: &[Arc<Queue>], state: &BTreeMap<String, QueueState>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((_, name), q) in unique(queues, |q| &q.metadata) {
        let Some(project) = q.metadata.labels.as_ref().and_then(|l| l.get(PROJECT_LABEL)) else { continue };
        if valid_leaf(state, &name) {
            out.entry(project.clone()).or_default().push(name);
        }
    }
    out
}

/// The admission the scheduler recorded for a group, while it holds: the group is `Inqueue`
/// or `Running` (a group admitted again starts from its spec).
fn admission(group: &PodGroup) -> Option<&Admission> {
    let status = group.status.as_ref()?;
    matches!(status.phase, PodGroupPhase::Inqueue | PodGroupPhase::Running).then_some(status.admission.as_ref()?)
}

/// The job of the pods charged to `charge` that no handed-over group holds (its group is
/// gone, left out, or another than the one they were charged as): named `<group>#<queue>`,
/// which no PodGroup can be named, running, gang minimum 1, so the queue's usage counts them
/// and preempt and reclaim may take them pod by pod.
fn detached_job<'a>(
    namespace: &str,
    charge: &Charge,
    pods: Vec<PodInfo<'a>>,
    lookup: &Lookup,
    problems: &mut Vec<Problem>,
) -> Result<(JobInput, Vec<PodRef>), Vec<PodInfo<'a>>> {
    let priority = lookup.classes.resolve(&charge.priority_class).unwrap_or_else(|| lookup.classes.default_class());
    let created = pods.iter().map(|p| created(&p.pod.metadata)).min().unwrap_or(0);
    let shape = Shape {
        name: format!("{}#{}", charge.group, charge.queue),
        namespace: namespace.to_string(),
        queue: charge.queue.clone(),
        priority: PriorityFrom::Decided(priority),
        min_member: 1,
        min_resources: None,
        min_task_member: &BTreeMap::new(),
        created_at: created,
        preempted_at: None,
        nominations: BTreeMap::new(),
        phase: JobPhase::Running,
        topology: Requests::default(),
        elastic: Elastic::Fixed,
    };
    build_job(shape, pods, lookup, problems).map_err(|(_, pods)| pods)
}

/// One PodGroup to convert: the group, its key, the queue its pods are charged to (its
/// [`group_queue`]) and the pods it holds.
struct GroupAt<'g, 'a> {
    group: &'g PodGroup,
    namespace: &'g str,
    name: &'g str,
    queue: String,
    pods: Vec<PodInfo<'a>>,
}

impl GroupAt<'_, '_> {
    fn problem(&self, reason: &str, message: String) -> Problem {
        Problem {
            kind: "PodGroup",
            namespace: Some(self.namespace.to_string()),
            name: self.name.to_string(),
            reason: reason.to_string(),
            message,
        }
    }

    /// The job's phase from the group's; `None` for a finished group that was not restarted.
    fn phase(&self) -> Option<JobPhase> {
        Some(match self.group.status.as_ref().map(|s| s.phase).unwrap_or_default() {
            PodGroupPhase::Pending => JobPhase::Pending,
            PodGroupPhase::Inqueue => JobPhase::Inqueue,
            PodGroupPhase::Running => JobPhase::Running,
            PodGroupPhase::Completed | PodGroupPhase::Failed if !restarted(&self.pods) => return None,
            PodGroupPhase::Completed | PodGroupPhase::Failed => JobPhase::Pending,
        })
    }

    /// Why the group's queue leaves it out, if it does (see "PodGroups → jobs").
    fn queue_refusal(&self, phase: JobPhase, lookup: &Lookup) -> Option<Problem> {
        let (queue, namespace) = (&self.queue, self.namespace);
        match lookup.queue_state.get(queue) {
            None => Some(
                self.problem("QueueNotFound", format!("queue {queue:?} does not exist; the group is not scheduled")),
            ),
            Some(QueueState::Invalid(why)) => {
                Some(self.problem(
                    "QueueInvalid",
                    format!("queue {queue:?} is left out ({why}); the group is not scheduled"),
                ))
            }
            Some(QueueState::Valid { department: true, .. }) => Some(self.problem(
                "QueueNotLeaf",
                format!("queue {queue:?} is a Department's queue; pod groups go in the queues of its projects"),
            )),
            Some(QueueState::Valid { leaf: false, .. }) => Some(self.problem(
                "QueueNotLeaf",
                format!("queue {queue:?} has child queues; pod groups must be in a leaf queue"),
            )),
            Some(QueueState::Valid { fences, closed, .. }) => {
                let fences = fences.iter().map(|(q, selector)| (q.as_str(), selector));
                if let Some(why) = namespace_refusal(fences, lookup.namespaces.get(namespace).copied()) {
                    let hint = lookup.project_hint(namespace).filter(|_| queue == DEFAULT_QUEUE).unwrap_or_default();
                    let message = format!("namespace {namespace:?} may not use queue {queue:?}: {why}{hint}");
                    return Some(self.problem("QueueNotAllowed", message));
                }
                (*closed && phase == JobPhase::Pending).then(|| {
                    let message = format!("queue {queue:?} is closed; the group is not admitted until it opens");
                    self.problem("QueueClosed", message)
                })
            }
        }
    }

    /// What the group's job is apart from its pods: its admission's priority while that
    /// holds, else the group's own.
    fn shape(&self, phase: JobPhase, topology: Requests, problems: &mut Vec<Problem>) -> Shape<'_> {
        let priority = match admission(self.group) {
            Some(a) => PriorityFrom::Decided(Resolved {
                class: a.priority_class_name.clone(),
                value: a.priority,
                preemptible: a.preemptible,
            }),
            None => PriorityFrom::Group(self.group),
        };
        Shape {
            name: self.name.to_string(),
            namespace: self.namespace.to_string(),
            queue: self.queue.clone(),
            priority,
            min_member: self.group.spec.min_member,
            min_resources: self.group.spec.min_resources.as_ref().map(|declared| {
                declared_amounts(declared, "minResources", |message| {
                    problems.push(self.problem("InvalidQuantity", message))
                })
            }),
            min_task_member: &self.group.spec.min_task_member,
            created_at: created(&self.group.metadata),
            preempted_at: self.group.status.as_ref().and_then(|s| s.preempted_at.as_ref()).map(|t| t.0.as_second()),
            nominations: self
                .group
                .status
                .iter()
                .flat_map(|s| &s.nominations)
                .map(|n| (n.pod.as_str(), n.node.as_str()))
                .collect(),
            phase,
            topology,
            elastic: elastic::of(self.group),
        }
    }
}

/// Builds a group's job, or hands back its pods (those holding a node are charged as
/// detached pods, or count as foreign usage) when the group is left out.
fn group_job<'a>(
    mut at: GroupAt<'_, 'a>,
    lookup: &Lookup,
    problems: &mut Vec<Problem>,
) -> Result<(JobInput, Vec<PodRef>), Vec<PodInfo<'a>>> {
    let Some(phase) = at.phase() else { return Err(at.pods) };
    let pods = std::mem::take(&mut at.pods);
    if let Some(p) = at.queue_refusal(phase, lookup) {
        problems.push(p);
        return Err(pods);
    }
    let topology = match lookup.topologies.requests(at.group, at.name, &pods) {
        Ok(t) => t,
        Err((reason, message)) => {
            problems.push(at.problem(reason, message));
            return Err(pods);
        }
    };
    let shape = at.shape(phase, topology, problems);
    build_job(shape, pods, lookup, problems).map_err(|(message, members)| {
        problems.push(at.problem("PriorityClassNotFound", message));
        members
    })
}

/// Where a job's priority comes from.
enum PriorityFrom<'g> {
    /// Decided already: an admission or a detached charge.
    Decided(Resolved),
    /// The group's spec, else its pods (see "Priority" in docs/conversion.md).
    Group(&'g PodGroup),
}

/// What a job is, apart from its pods.
struct Shape<'m> {
    name: String,
    namespace: String,
    queue: String,
    priority: PriorityFrom<'m>,
    min_member: u32,
    min_resources: Option<ResourceList>,
    min_task_member: &'m BTreeMap<String, u32>,
    created_at: i64,
    preempted_at: Option<i64>,
    /// The group's kept claim: pod name to the node the scheduler nominated it to.
    nominations: BTreeMap<&'m str, &'m str>,
    phase: JobPhase,
    topology: Requests,
    elastic: Elastic,
}

/// A job from its shape and pods: phases, tasks, priority and run times. Fails (handing the
/// pods back) only when the priority must be resolved and cannot be.
fn build_job<'a>(
    shape: Shape,
    pods: Vec<PodInfo<'a>>,
    lookup: &Lookup,
    problems: &mut Vec<Problem>,
) -> Result<(JobInput, Vec<PodRef>), (String, Vec<PodInfo<'a>>)> {
    let nodes = lookup.nodes;
    // Phases; pods that cannot take part are dropped here.
    let mut by_task: BTreeMap<String, Vec<Member<'a>>> = BTreeMap::new();
    for t in shape.min_task_member.keys() {
        by_task.entry(t.clone()).or_default();
    }
    for info in pods {
        let spec = info.pod.spec.as_ref();
        let phase = match &info.node {
            Some(node) if !nodes.contains_key(node) => {
                problems.push(info.problem(
                    "NodeNotFound",
                    format!("bound to node {node:?}, which the scheduler does not know (yet); pod left out"),
                ));
                continue;
            }
            Some(node) if info.deleting => PodPhaseInput::Releasing(node.clone()),
            Some(node) => PodPhaseInput::Bound(node.clone()),
            None if info.deleting || shape.elastic == Elastic::Restarting => continue,
            None if spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty()) => continue,
            None => match shape.nominations.get(info.name.as_str()) {
                Some(&node) if nodes.contains_key(node) => PodPhaseInput::Nominated(node.to_string()),
                _ => PodPhaseInput::Pending,
            },
        };
        let index_label = info.pod.metadata.labels.as_ref().and_then(|l| l.get(TASK_INDEX_LABEL));
        let index = index_label.and_then(|i| i.trim().parse::<u32>().ok());
        if let (Some(text), None) = (index_label, index) {
            problems.push(info.problem(
                "InvalidTaskIndex",
                format!("{TASK_INDEX_LABEL} {text:?} is not a non-negative integer; ordered by creation time"),
            ));
        }
        let created = created(&info.pod.metadata);
        let member = Member { info, phase, index, created };
        by_task.entry(task_of(member.info.pod)).or_default().push(member);
    }

    // Tasks: order, split by requests and constraints, spread minimums.
    let mut taken: BTreeSet<String> = by_task.keys().cloned().collect();
    let mut tasks = Vec::new();
    let mut members: Vec<Member<'a>> = Vec::new();
    for (task, mut list) in by_task {
        list.sort_by(|a, b| {
            (a.index.is_none(), a.index, a.created, &a.info.name).cmp(&(
                b.index.is_none(),
                b.index,
                b.created,
                &b.info.name,
            ))
        });
        let mut parts: Vec<(BTreeMap<String, i64>, Constraints, Vec<Member<'a>>)> = Vec::new();
        let mut reported: Vec<Vec<Finding>> = Vec::new();
        for m in list {
            let mut findings = m.info.findings.clone();
            let constraints = pod::constraints(m.info.pod, &mut findings);
            if !findings.is_empty() && !reported.contains(&findings) {
                for (reason, message) in &findings {
                    problems.push(m.info.problem(reason, message.clone()));
                }
                reported.push(findings);
            }
            match parts.iter_mut().find(|(r, c, _)| *r == m.info.requests && *c == constraints) {
                Some(part) => part.2.push(m),
                None => parts.push((m.info.requests.clone(), constraints, vec![m])),
            }
        }
        let mut minimum = shape.min_task_member.get(&task).copied().unwrap_or(0);
        let (topology, slices) = shape.topology.tasks.get(&task).cloned().unwrap_or_default();
        if parts.is_empty() {
            if minimum > 0 {
                tasks.push(TaskInput {
                    name: task.clone(),
                    min_available: minimum,
                    requests: ResourceList::default(),
                    constraints: Constraints::default(),
                    pods: Vec::new(),
                    topology,
                    slices,
                });
            }
            continue;
        }
        let first_task = tasks.len();
        let mut suffix = 1;
        for (i, (requests, constraints, part)) in parts.into_iter().enumerate() {
            let task_name = if i == 0 {
                task.clone()
            } else {
                loop {
                    suffix += 1;
                    let candidate = format!("{task}#{suffix}");
                    if taken.insert(candidate.clone()) {
                        break candidate;
                    }
                }
            };
            let take = minimum.min(part.len() as u32);
            minimum -= take;
            tasks.push(TaskInput {
                name: task_name,
                min_available: take,
                requests: ResourceList(requests),
                constraints,
                pods: part.iter().map(|m| m.phase.clone()).collect(),
                topology: topology.clone(),
                slices: slices.clone(),
            });
            members.extend(part);
        }
        tasks[first_task].min_available += minimum;
    }

    let priority = match shape.priority {
        PriorityFrom::Decided(p) => p,
        PriorityFrom::Group(group) => match resolve_priority(group, &members, lookup.classes) {
            Ok(p) => p,
            Err(message) => return Err((message, members.into_iter().map(|m| m.info).collect())),
        },
    };
    let (run_time, ends_at) = run_times(&members);
    let started_at = started_at(&members);
    let refs = members.into_iter().map(|m| PodRef::of(m.info.pod)).collect();
    let job = JobInput {
        name: shape.name,
        namespace: shape.namespace,
        queue: shape.queue,
        priority_class: priority.class,
        priority: priority.value,
        preemptible: priority.preemptible,
        min_member: shape.min_member,
        min_resources: shape.min_resources,
        created_at: shape.created_at,
        phase: shape.phase,
        tasks,
        run_time: run_time.map(RunTime::Declared),
        ends_at,
        preempted_at: shape.preempted_at,
        started_at,
        topology: shape.topology.job,
        resize: match shape.elastic {
            Elastic::Resizable(policy) => Some(policy),
            Elastic::Fixed | Elastic::Restarting => None,
        },
    };
    Ok((job, refs))
}

/// A group's declared run time and the expected end of its running pods, from the pods'
/// `activeDeadlineSeconds`, which the kubelet enforces (a pod is stopped when it runs longer),
/// so a tenant cannot claim a shorter run than it gets. The run time is known when every pod
/// declares one (the longest); the end, when every running pod declares one and has started
/// (its start plus its deadline, the latest of them).
fn run_times(members: &[Member]) -> (Option<i64>, Option<i64>) {
    let deadline = |m: &Member| m.info.pod.spec.as_ref().and_then(|s| s.active_deadline_seconds).filter(|d| *d > 0);
    let latest = |v: Option<Vec<i64>>| v.and_then(|v| v.into_iter().max());
    let run_time = latest(members.iter().map(deadline).collect());
    let running: Vec<&Member> =
        members.iter().filter(|m| !matches!(m.phase, PodPhaseInput::Pending | PodPhaseInput::Nominated(_))).collect();
    let ends_at = if running.is_empty() {
        None
    } else {
        latest(
            running
                .iter()
                .map(|m| {
                    let started = m.info.pod.status.as_ref().and_then(|s| s.start_time.as_ref())?;
                    Some(started.0.as_second().saturating_add(deadline(m)?))
                })
                .collect(),
        )
    };
    (run_time, ends_at)
}

/// When the group's earliest bound pod started, from the pods' `status.startTime`, which
/// only the kubelet writes (a tenant cannot make its running work look younger than it is,
/// to stretch a minimum run time). Pods being evicted do not count.
fn started_at(members: &[Member]) -> Option<i64> {
    let bound = members.iter().filter(|m| matches!(m.phase, PodPhaseInput::Bound(_)));
    bound.filter_map(|m| Some(m.info.pod.status.as_ref()?.start_time.as_ref()?.0.as_second())).min()
}

fn resolve_priority(group: &PodGroup, members: &[Member], classes: &Classes) -> Result<Resolved, String> {
    if let Some(class) = group.spec.priority_class_name.as_deref().filter(|c| !c.is_empty()) {
        return classes
            .resolve(class)
            .ok_or_else(|| format!("priority class {class:?} does not exist; the group is not scheduled"));
    }
    let from_pod = members.iter().find_map(|m| {
        let spec = m.info.pod.spec.as_ref()?;
        let class = spec.priority_class_name.as_deref().filter(|c| !c.is_empty());
        (class.is_some() || spec.priority.is_some_and(|p| p != 0)).then_some((m, class, spec.priority))
    });
    match from_pod {
        None => Ok(classes.default_class()),
        Some((m, Some(class), value)) => match (classes.resolve(class), value) {
            (Some(resolved), _) => Ok(resolved),
            (None, Some(value)) => Ok(Classes::bare(class, value)),
            (None, None) => Err(format!(
                "pod {} names priority class {class:?}, which does not exist; the group is not scheduled",
                m.info.name
            )),
        },
        Some((_, None, value)) => Ok(Classes::bare("", value.unwrap_or(0))),
    }
}

/// Whether a finished group has a new unbound pod (its job controller restarted the job).
fn restarted(pods: &[PodInfo<'_>]) -> bool {
    pods.iter().any(|p| p.node.is_none() && !p.deleting)
}
