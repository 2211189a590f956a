//! The cluster part of a scenario: what the file holds (nodes and queues straight into the
//! core's inputs), and the one validation pass that checks what serde cannot (references
//! between objects, uniqueness, the queue tree, pod names) and builds the core's inputs.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::Hash;

use drover_api::topology::{min_nvlink_gpus, MIN_NVLINK_GPUS_ANNOTATION};
use drover_api::{
    NodeSelectorRequirement, PriorityClass, ResourceList, Taint, Toleration, BUILTIN_PRIORITY_CLASSES, GPU, PODS,
};
use drover_scheduler::config::ConfigOverrides;
use drover_scheduler::snapshot::{
    Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueBounds, QueueInput, QueueingStrategy, Resize,
    RunTime, TaskInput, TopologyRequestInput,
};
use drover_scheduler::usage::{QueueUsage, UsageLedger};
use serde::{Deserialize, Deserializer};

use super::de::{foreign, foreign_list, name, resources};
use super::expect::{self, Expect};
use super::locate::{listing, steps, Doc};
use super::names::{NodeNames, QueueNames};
use super::topology::{self, Hierarchy, JobTopology, Names, Slices, TaskTopology};
use super::{Scenario, ScenarioError};

/// Pods per node when `allocatable` does not say (the Kubernetes default).
const DEFAULT_MAX_PODS: i64 = 110;

/// A scenario file as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct File {
    name: String,
    description: Option<String>,
    cycles: Option<u32>,
    now: Option<i64>,
    #[serde(default, deserialize_with = "foreign")]
    config: ConfigOverrides,
    nodes: Option<Vec<Node>>,
    topologies: Option<Vec<Hierarchy>>,
    queues: Option<Vec<Queue>>,
    priority_classes: Option<Vec<Class>>,
    jobs: Option<Vec<Job>>,
    expect: Option<Expect>,
}

#[derive(Deserialize)]
struct Node(#[serde(with = "NodeFields")] NodeInput);

/// A node as the file writes it: the core's input (`remote` derives a reader of `NodeInput`).
#[derive(Deserialize)]
#[serde(remote = "NodeInput")]
struct NodeFields {
    #[serde(deserialize_with = "name")]
    name: String,
    #[serde(deserialize_with = "allocatable")]
    allocatable: ResourceList,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "foreign_list")]
    taints: Vec<Taint>,
    #[serde(default)]
    unschedulable: bool,
}

/// A queue as the file writes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Queue {
    #[serde(deserialize_with = "name")]
    name: String,
    parent: Option<String>,
    #[serde(default, deserialize_with = "resources")]
    deserved: ResourceList,
    #[serde(default, deserialize_with = "resources")]
    limit: Option<ResourceList>,
    #[serde(default = "one")]
    over_quota_weight: u32,
    #[serde(default = "yes")]
    reclaimable: bool,
    #[serde(default, deserialize_with = "foreign")]
    queueing_strategy: QueueingStrategy,
    max_running_jobs: Option<u32>,
    max_running_pods: Option<u32>,
    preempt_min_runtime_seconds: Option<u32>,
    reclaim_min_runtime_seconds: Option<u32>,
    #[serde(default)]
    usage: BTreeMap<String, f64>,
}

impl Queue {
    /// The core's input; a parent "" is the root, as when absent.
    fn input(self) -> QueueInput {
        QueueInput {
            name: self.name,
            parent: self.parent.filter(|p| !p.is_empty()),
            deserved: self.deserved,
            limit: self.limit,
            over_quota_weight: self.over_quota_weight,
            reclaimable: self.reclaimable,
            strategy: self.queueing_strategy,
            bounds: QueueBounds {
                max_running_jobs: self.max_running_jobs,
                max_running_pods: self.max_running_pods,
                preempt_min_runtime: self.preempt_min_runtime_seconds,
                reclaim_min_runtime: self.reclaim_min_runtime_seconds,
            },
            owner: None,
        }
    }
}

#[derive(Deserialize)]
struct Class {
    #[serde(deserialize_with = "name")]
    name: String,
    value: i32,
    preemptible: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Job {
    #[serde(deserialize_with = "name")]
    name: String,
    #[serde(default, deserialize_with = "name")]
    namespace: Option<String>,
    queue: String,
    priority_class: Option<String>,
    min_member: Option<u32>,
    #[serde(default, deserialize_with = "resources")]
    min_resources: Option<ResourceList>,
    created_at: Option<i64>,
    duration: Option<u64>,
    started_at: Option<i64>,
    preempted_at: Option<i64>,
    topology: Option<JobTopology>,
    elasticity: Option<Elasticity>,
    tasks: Vec<Task>,
}

/// *Drover*: Run:ai's elasticity for a one-task job (see [`Resize`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Elasticity {
    /// How it shrinks: `halve`, the only way.
    shrink: String,
    /// Fewest GPUs it may run with (default: one pod's).
    #[serde(rename = "minGPUs")]
    min_gpus: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Task {
    #[serde(deserialize_with = "name")]
    name: String,
    replicas: u32,
    min_available: Option<u32>,
    #[serde(default, deserialize_with = "resources")]
    requests: ResourceList,
    node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "foreign_list")]
    tolerations: Vec<Toleration>,
    #[serde(default, deserialize_with = "foreign_list")]
    affinity: Vec<NodeSelectorRequirement>,
    running: Option<Vec<String>>,
    topology: Option<TaskTopology>,
    slices: Option<Slices>,
    annotations: Option<BTreeMap<String, String>>,
}

fn allocatable<'de, D: Deserializer<'de>>(d: D) -> Result<ResourceList, D::Error> {
    let mut list: ResourceList = resources(d)?;
    list.0.entry(PODS.to_string()).or_insert(DEFAULT_MAX_PODS);
    Ok(list)
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

/// Checks a scenario file and builds the scenario from it.
pub(super) fn validate(doc: &Doc, file: File) -> Result<Scenario, ScenarioError> {
    if file.name.is_empty() {
        return Err(doc.error(steps!["name"], "must not be empty"));
    }
    let cycles = file.cycles.unwrap_or(1);
    if cycles == 0 {
        return Err(doc.error(steps!["cycles"], "must be at least 1"));
    }
    let priority_classes = match file.priority_classes {
        None => BUILTIN_PRIORITY_CLASSES.iter().map(|(name, value)| PriorityClass::new(name, *value, None)).collect(),
        Some(classes) if classes.is_empty() => {
            let message = "must list at least one class (leave the field out to use the built-in classes)";
            return Err(doc.error(steps!["priorityClasses"], message));
        }
        Some(classes) => classes.into_iter().map(|c| PriorityClass::new(&c.name, c.value, c.preemptible)).collect(),
    };
    let queues: Vec<Queue> = file.queues.into_iter().flatten().collect();
    let mut ledger = UsageLedger::default();
    for (i, q) in queues.iter().enumerate() {
        if let Some((resource, _)) = q.usage.iter().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
            let message = "must be a number of resource-seconds, at least 0";
            return Err(doc.error(steps!["queues", i, "usage", resource.as_str()], message));
        }
        if !q.usage.is_empty() {
            let entry = QueueUsage { at: file.now.unwrap_or(0), resources: q.usage.clone() };
            ledger.queues.insert(q.name.clone(), entry);
        }
    }
    let queues = queues.into_iter().map(Queue::input);
    let mut scenario = Scenario {
        name: file.name,
        description: file.description.unwrap_or_default(),
        cycles,
        now: file.now.unwrap_or(0),
        config: file.config,
        nodes: file.nodes.into_iter().flatten().map(|n| n.0).collect(),
        topologies: topology::hierarchies(doc, file.topologies.unwrap_or_default())?,
        queues: queues.collect(),
        usage: ledger,
        priority_classes,
        jobs: Vec::new(),
        expect: None,
    };
    unique(doc, "priorityClasses", "priority class", scenario.priority_classes.iter().map(|c| c.name.as_str()))?;
    unique(doc, "nodes", "node", scenario.nodes.iter().map(|n| n.name.as_str()))?;
    unique(doc, "topologies", "topology", scenario.topologies.iter().map(|t| t.name.as_str()))?;
    unique(doc, "queues", "queue", scenario.queues.iter().map(|q| q.name.as_str()))?;
    check_queue_tree(doc, &scenario.queues)?;
    let names = (NodeNames::of(&scenario), QueueNames::of(&scenario.queues));
    let jobs = file.jobs.into_iter().flatten().enumerate().map(|(j, job)| self::job(doc, &scenario, &names, j, job));
    scenario.jobs = jobs.collect::<Result<_, _>>()?;
    unique(doc, "jobs", "job", scenario.jobs.iter().map(JobInput::key))?;
    check_pod_names(doc, &scenario.jobs)?;
    if let Some(expect) = file.expect {
        expect::check(doc, &expect, &scenario)?;
        scenario.expect = Some(expect);
    }
    Ok(scenario)
}

/// Rejects the second of two entries of a top-level list that share a name.
fn unique<N: Hash + Eq + fmt::Display>(
    doc: &Doc,
    section: &str,
    kind: &str,
    names: impl ExactSizeIterator<Item = N>,
) -> Result<(), ScenarioError> {
    let mut seen: HashMap<N, usize> = HashMap::with_capacity(names.len());
    for (index, name) in names.enumerate() {
        match seen.entry(name) {
            Entry::Occupied(first) => {
                let message = format!("duplicate {kind}: {section}[{}] is also {}", first.get(), first.key());
                return Err(doc.error(steps![section, index, "name"], message));
            }
            Entry::Vacant(entry) => {
                entry.insert(index);
            }
        }
    }
    Ok(())
}

/// Every parent exists and following parents always reaches the root.
fn check_queue_tree(doc: &Doc, queues: &[QueueInput]) -> Result<(), ScenarioError> {
    let parents: BTreeMap<&str, Option<&str>> = queues.iter().map(|q| (q.name.as_str(), q.parent.as_deref())).collect();
    for (index, q) in queues.iter().enumerate() {
        if let Some(parent) = q.parent.as_deref().filter(|p| !parents.contains_key(p)) {
            let message = format!("names no queue {parent:?}; queues: {}", listing(parents.keys()));
            return Err(doc.error(steps!["queues", index, "parent"], message));
        }
    }
    for (index, q) in queues.iter().enumerate() {
        let mut chain = vec![q.name.as_str()];
        let mut next = q.parent.as_deref();
        while let Some(parent) = next.filter(|_| chain.len() <= queues.len()) {
            chain.push(parent);
            if parent == q.name {
                let message = format!("the queue tree has a cycle: {}", chain.join(" -> "));
                return Err(doc.error(steps!["queues", index, "parent"], message));
            }
            next = parents.get(parent).copied().flatten();
        }
    }
    Ok(())
}

fn job(
    doc: &Doc,
    s: &Scenario,
    (nodes, queues): &(NodeNames, QueueNames),
    j: usize,
    job: Job,
) -> Result<JobInput, ScenarioError> {
    queues.check(doc, j, s, &job.queue)?;
    // The job's priority class: the one it names, else the lowest-valued one.
    let classes = &s.priority_classes;
    let class = match job.priority_class.as_deref() {
        None => classes.iter().min_by_key(|c| c.value),
        Some(name) => Some(classes.iter().find(|c| c.name == name).ok_or_else(|| {
            let message =
                format!("names no priority class {name:?}; classes: {}", listing(classes.iter().map(|c| &c.name)));
            doc.error(steps!["jobs", j, "priorityClass"], message)
        })?),
    };
    if let Some(t) = job.started_at.filter(|&t| t > s.now) {
        return Err(doc.error(steps!["jobs", j, "startedAt"], format!("{t} is after the scenario's `now` ({})", s.now)));
    }
    if let Some(t) = job.preempted_at.filter(|&t| t > s.now) {
        return Err(
            doc.error(steps!["jobs", j, "preemptedAt"], format!("{t} is after the scenario's `now` ({})", s.now))
        );
    }
    if job.tasks.is_empty() {
        return Err(doc.error(steps!["jobs", j, "tasks"], "a job needs at least one task"));
    }
    let topology = job.topology.map(|block| Names(&s.topologies).job(doc, j, block)).transpose()?;
    let tasks =
        job.tasks.into_iter().enumerate().map(|(t, task)| self::task(doc, (s, nodes), j, t, task, topology.as_ref()));
    let tasks = tasks.collect::<Result<Vec<_>, _>>()?;
    for (t, task) in tasks.iter().enumerate() {
        if let Some(first) = tasks[..t].iter().position(|other| other.name == task.name) {
            let message = format!("duplicate task: tasks[{first}] is also {}", task.name);
            return Err(doc.error_in(steps!["jobs", j], steps!["jobs", j, "tasks", t, "name"], message));
        }
    }
    // The gang size: `minMember` when given (between 1 and the job's pods), else all pods.
    let total: u64 = tasks.iter().map(|t| t.pods.len() as u64).sum();
    let at = steps!["jobs", j, "minMember"];
    let min_member = match job.min_member {
        Some(0) if total > 0 => return Err(doc.error(at, "must be at least 1")),
        Some(m) if u64::from(m) > total => {
            return Err(doc.error(at, format!("is {m}, more than the job's {total} replicas")))
        }
        Some(m) => m,
        None => u32::try_from(total).map_err(|_| {
            doc.error(steps!["jobs", j, "tasks"], format!("the job has {total} replicas, more than {}", u32::MAX))
        })?,
    };
    let bound = |t: &TaskInput| t.pods.iter().filter(|p| matches!(p, PodPhaseInput::Bound(_))).count() as u32;
    let running: u32 = tasks.iter().map(bound).sum();
    let phase = if running >= min_member && tasks.iter().all(|t| bound(t) >= t.min_available) {
        JobPhase::Running
    } else if running > 0 {
        JobPhase::Inqueue
    } else {
        JobPhase::Pending
    };
    let resize = match job.elasticity {
        None => None,
        Some(e) => {
            if e.shrink != "halve" {
                let message = format!("is {:?}; the only way to shrink is \"halve\"", e.shrink);
                return Err(doc.error(steps!["jobs", j, "elasticity", "shrink"], message));
            }
            let at = steps!["jobs", j, "elasticity"];
            if tasks.len() != 1 {
                return Err(doc.error(at, "applies to a job of one task"));
            }
            if min_member as usize != tasks[0].pods.len() {
                return Err(doc.error(at, "applies to a job whose gang is all its pods (leave minMember out)"));
            }
            let gpus = tasks[0].requests.0.get(GPU).copied().unwrap_or(0);
            let policy = Resize::from_min_gpus(min_member, gpus, e.min_gpus);
            Some(policy.map_err(|why| doc.error(steps!["jobs", j, "elasticity", "minGPUs"], why))?)
        }
    };
    let run_time = job.duration.map(|d| i64::try_from(d).unwrap_or(i64::MAX));
    Ok(JobInput {
        name: job.name,
        namespace: job.namespace.unwrap_or_else(|| "default".into()),
        queue: job.queue,
        priority_class: class.map(|c| c.name.clone()).unwrap_or_default(),
        priority: class.map_or(0, |c| c.value),
        preemptible: class.is_none_or(|c| c.preemptible),
        min_member,
        min_resources: job.min_resources,
        created_at: job.created_at.unwrap_or(0),
        phase,
        tasks,
        run_time: run_time.map(RunTime::Declared),
        ends_at: run_time.filter(|_| running > 0).map(|d| job.started_at.unwrap_or(s.now).saturating_add(d)),
        preempted_at: job.preempted_at,
        started_at: job.started_at.filter(|_| running > 0),
        topology,
        resize,
    })
}

/// A task of job `j`, whose own topology block (if any) is `job_topology`.
fn task(
    doc: &Doc,
    (s, names): (&Scenario, &NodeNames),
    j: usize,
    t: usize,
    task: Task,
    job_topology: Option<&TopologyRequestInput>,
) -> Result<TaskInput, ScenarioError> {
    let (replicas, min_available, running) = (task.replicas, task.min_available.unwrap_or(0), task.running);
    if min_available > replicas {
        let message = format!("is {min_available}, more than the task's {replicas} replicas");
        return Err(doc.error(steps!["jobs", j, "tasks", t, "minAvailable"], message));
    }
    let running = running.unwrap_or_default();
    for (i, node) in running.iter().enumerate() {
        names.check(doc, steps!["jobs", j, "tasks", t, "running", i], s, node)?;
    }
    if running.len() > replicas as usize {
        let message = format!("lists {} running pods but the task has {replicas} replicas", running.len());
        return Err(doc.error(steps!["jobs", j, "tasks", t, "running"], message));
    }
    for (i, requirement) in task.affinity.iter().enumerate() {
        requirement.validate().map_err(|m| doc.error(steps!["jobs", j, "tasks", t, "affinity", i], m))?;
    }
    let mut pods: Vec<PodPhaseInput> = running.into_iter().map(PodPhaseInput::Bound).collect();
    pods.resize(replicas as usize, PodPhaseInput::Pending);
    let node_selector = task.node_selector.unwrap_or_default();
    // Of the pods' annotations only the NVLink minimum means anything to the scheduler.
    let nvlink = min_nvlink_gpus(&task.annotations.unwrap_or_default())
        .map_err(|m| doc.error(steps!["jobs", j, "tasks", t, "annotations", MIN_NVLINK_GPUS_ANNOTATION], m))?;
    let constraints =
        Constraints { node_selector, tolerations: task.tolerations, affinity: task.affinity, min_nvlink_gpus: nvlink };
    let names = Names(&s.topologies);
    let at = steps!["jobs", j, "tasks", t];
    let topology = task.topology.map(|block| names.task(doc, at, job_topology, block)).transpose()?;
    let slices = task.slices.map(|slices| names.slices(doc, at, job_topology, slices)).transpose()?;
    Ok(TaskInput { name: task.name, min_available, requests: task.requests, constraints, pods, topology, slices })
}

/// Pod names (`<job>-<task>-<index>`) must not collide within a namespace: expectations use them.
fn check_pod_names(doc: &Doc, jobs: &[JobInput]) -> Result<(), ScenarioError> {
    let mut owners: HashMap<(&str, String), (usize, usize)> = HashMap::with_capacity(jobs.len());
    for (j, job) in jobs.iter().enumerate() {
        for (t, task) in job.tasks.iter().enumerate() {
            let prefix = format!("{}-{}", job.name, task.name);
            match owners.entry((job.namespace.as_str(), prefix)) {
                Entry::Occupied(owner) => {
                    let (other, other_task) = *owner.get();
                    let other = format!("job {} task {}", jobs[other].key(), jobs[other].tasks[other_task].name);
                    let message = format!("its pods would be named {}-<index>, like those of {other}", owner.key().1);
                    return Err(doc.error(steps!["jobs", j, "tasks", t, "name"], message));
                }
                Entry::Vacant(entry) => {
                    entry.insert((j, t));
                }
            }
        }
    }
    Ok(())
}
