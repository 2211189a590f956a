//! The cluster part of a scenario, read straight into the core's inputs: the header, the
//! priority classes, nodes, queues and jobs, each object checked against what it refers to.

use std::collections::{BTreeMap, BTreeSet};

use drover_api::{NodeSelectorRequirement, PriorityClass, Taint, Toleration, BUILTIN_PRIORITY_CLASSES, PODS};
use drover_scheduler::config::ConfigOverrides;
use drover_scheduler::snapshot::{
    Constraints, JobInput, JobPhase, NodeInput, PodPhaseInput, QueueInput, QueueingStrategy, TaskInput,
};
use serde_yaml::Value;

use super::read::{
    boolean, entry_label, int, item, list, listing, name, render, resources, string, string_map, typed, At, Doc,
    Fields, Object, Step,
};
use super::{Scenario, ScenarioError};

const TOP_FIELDS: &[&str] =
    &["name", "description", "cycles", "now", "config", "nodes", "queues", "priorityClasses", "jobs", "expect"];
const NODE_FIELDS: &[&str] = &["name", "allocatable", "labels", "taints", "unschedulable"];
const QUEUE_FIELDS: &[&str] =
    &["name", "parent", "deserved", "limit", "overQuotaWeight", "reclaimable", "queueingStrategy"];
const CLASS_FIELDS: &[&str] = &["name", "value", "preemptible"];
const JOB_FIELDS: &[&str] =
    &["name", "namespace", "queue", "priorityClass", "minMember", "createdAt", "duration", "startedAt", "tasks"];
const TASK_FIELDS: &[&str] =
    &["name", "replicas", "minAvailable", "requests", "nodeSelector", "tolerations", "affinity", "running"];

/// Pods per node when `allocatable` does not say (the Kubernetes default).
const DEFAULT_MAX_PODS: i64 = 110;

/// Reads everything but `expect` from the document's root.
pub(super) fn scenario(doc: &Doc, root: &Value) -> Result<Scenario, ScenarioError> {
    let top = Object::new(doc, "scenario", Vec::new());
    let fields = Fields::open(top.at(), root, TOP_FIELDS)?;
    let mut scenario = header(&fields)?;
    scenario.priority_classes = priority_classes(doc, &fields)?;
    scenario.nodes = objects(&fields, "nodes", |root, v| node(doc, root, v))?;
    check_unique(doc, "nodes", "node", scenario.nodes.iter().map(|n| n.name.clone()))?;
    scenario.queues = objects(&fields, "queues", |root, v| queue(doc, root, v))?;
    check_unique(doc, "queues", "queue", scenario.queues.iter().map(|q| q.name.clone()))?;
    check_queue_tree(doc, &scenario.queues)?;
    let catalog = Catalog::new(&scenario);
    let jobs = objects(&fields, "jobs", |root, v| job(doc, root, v, &catalog))?;
    scenario.jobs = jobs;
    check_unique(doc, "jobs", "job", scenario.jobs.iter().map(JobInput::key))?;
    check_pod_names(doc, &scenario.jobs)?;
    Ok(scenario)
}

fn header(f: &Fields) -> Result<Scenario, ScenarioError> {
    let cycles = f.opt("cycles", int::<u32>)?.unwrap_or(1);
    if cycles == 0 {
        return Err(f.at.key("cycles").error("must be at least 1"));
    }
    Ok(Scenario {
        name: f.req("name", |at, v| string(at, v).and_then(|s| non_empty(at, s)))?,
        description: f.opt("description", string)?.unwrap_or_default(),
        cycles,
        now: f.opt("now", int::<i64>)?.unwrap_or(0),
        config: f.opt("config", typed::<ConfigOverrides>)?.unwrap_or_default(),
        nodes: Vec::new(),
        queues: Vec::new(),
        priority_classes: Vec::new(),
        jobs: Vec::new(),
        expect: None,
    })
}

fn non_empty(at: &At, s: String) -> Result<String, ScenarioError> {
    if s.is_empty() {
        Err(at.error("must not be empty"))
    } else {
        Ok(s)
    }
}

/// Reads a top-level list whose entries are objects of their own.
fn objects<'v, T>(
    f: &Fields<'v>,
    section: &str,
    mut read: impl FnMut(Vec<Step>, &'v Value) -> Result<T, ScenarioError>,
) -> Result<Vec<T>, ScenarioError> {
    let Some(v) = f.get(section) else {
        return Ok(Vec::new());
    };
    list(&f.at.key(section), v, |at, v| read(at.absolute(), v))
}

fn priority_classes(doc: &Doc, f: &Fields) -> Result<Vec<PriorityClass>, ScenarioError> {
    if f.get("priorityClasses").is_none() {
        return Ok(BUILTIN_PRIORITY_CLASSES
            .iter()
            .map(|(name, value)| PriorityClass::new(name, *value, None))
            .collect());
    }
    let classes = objects(f, "priorityClasses", |root, v| priority_class(doc, root, v))?;
    if classes.is_empty() {
        let message = "must list at least one class (leave the field out to use the built-in classes)";
        return Err(f.at.key("priorityClasses").error(message));
    }
    check_unique(doc, "priorityClasses", "priority class", classes.iter().map(|c| c.name.clone()))?;
    Ok(classes)
}

fn priority_class(doc: &Doc, root: Vec<Step>, v: &Value) -> Result<PriorityClass, ScenarioError> {
    let object = Object::new(doc, entry_label(v, render(&root), |n| format!("priority class {n}")), root);
    let f = Fields::open(object.at(), v, CLASS_FIELDS)?;
    let name = f.req("name", name)?;
    let value = f.req("value", int::<i32>)?;
    let preemptible = f.opt("preemptible", boolean)?;
    Ok(PriorityClass::new(&name, value, preemptible))
}

fn node(doc: &Doc, root: Vec<Step>, v: &Value) -> Result<NodeInput, ScenarioError> {
    let object = Object::new(doc, entry_label(v, render(&root), |n| format!("node {n}")), root);
    let f = Fields::open(object.at(), v, NODE_FIELDS)?;
    let name = f.req("name", name)?;
    let mut allocatable = f.req("allocatable", resources)?;
    allocatable.0.entry(PODS.to_string()).or_insert(DEFAULT_MAX_PODS);
    Ok(NodeInput {
        name,
        allocatable,
        labels: f.opt("labels", string_map)?.unwrap_or_default(),
        taints: f.opt("taints", |at, v| list(at, v, typed::<Taint>))?.unwrap_or_default(),
        unschedulable: f.opt("unschedulable", boolean)?.unwrap_or(false),
    })
}

fn queue(doc: &Doc, root: Vec<Step>, v: &Value) -> Result<QueueInput, ScenarioError> {
    let object = Object::new(doc, entry_label(v, render(&root), |n| format!("queue {n}")), root);
    let f = Fields::open(object.at(), v, QUEUE_FIELDS)?;
    Ok(QueueInput {
        name: f.req("name", name)?,
        parent: f.opt("parent", string)?.filter(|p| !p.is_empty()),
        deserved: f.opt("deserved", resources)?.unwrap_or_default(),
        limit: f.opt("limit", resources)?,
        over_quota_weight: f.opt("overQuotaWeight", int::<u32>)?.unwrap_or(1),
        reclaimable: f.opt("reclaimable", boolean)?.unwrap_or(true),
        strategy: f.opt("queueingStrategy", typed::<QueueingStrategy>)?.unwrap_or_default(),
    })
}

/// Rejects the second of two entries of a top-level list that share a name.
fn check_unique(
    doc: &Doc,
    section: &str,
    kind: &str,
    names: impl Iterator<Item = String>,
) -> Result<(), ScenarioError> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (index, name) in names.enumerate() {
        if let Some(first) = seen.get(&name) {
            let object = Object::new(doc, format!("{kind} {name}"), item(section, index));
            return Err(object.at().key("name").error(format!("duplicate {kind}: {section}[{first}] is also {name}")));
        }
        seen.insert(name, index);
    }
    Ok(())
}

/// Every parent exists and following parents always reaches the root.
fn check_queue_tree(doc: &Doc, queues: &[QueueInput]) -> Result<(), ScenarioError> {
    let parents: BTreeMap<&str, Option<&str>> = queues.iter().map(|q| (q.name.as_str(), q.parent.as_deref())).collect();
    let queue_parent = |index: usize, q: &QueueInput, message: String| {
        let object = Object::new(doc, format!("queue {}", q.name), item("queues", index));
        object.at().key("parent").error(message)
    };
    for (index, q) in queues.iter().enumerate() {
        if let Some(parent) = q.parent.as_deref().filter(|p| !parents.contains_key(p)) {
            let message = format!("names no queue {parent:?}; queues: {}", listing(parents.keys()));
            return Err(queue_parent(index, q, message));
        }
    }
    for (index, q) in queues.iter().enumerate() {
        let mut chain = vec![q.name.as_str()];
        let mut next = q.parent.as_deref();
        while let Some(parent) = next.filter(|_| chain.len() <= queues.len()) {
            chain.push(parent);
            if parent == q.name {
                return Err(queue_parent(index, q, format!("the queue tree has a cycle: {}", chain.join(" -> "))));
            }
            next = parents.get(parent).copied().flatten();
        }
    }
    Ok(())
}

/// What jobs may refer to: the nodes, queues and priority classes of the scenario.
pub(super) struct Catalog<'s> {
    nodes: BTreeSet<&'s str>,
    pub(super) queues: &'s [QueueInput],
    classes: &'s [PriorityClass],
    now: i64,
}

impl<'s> Catalog<'s> {
    pub(super) fn new(scenario: &'s Scenario) -> Catalog<'s> {
        Catalog {
            nodes: scenario.nodes.iter().map(|n| n.name.as_str()).collect(),
            queues: &scenario.queues,
            classes: &scenario.priority_classes,
            now: scenario.now,
        }
    }

    pub(super) fn check_node(&self, at: &At, node: &str) -> Result<(), ScenarioError> {
        if self.nodes.contains(node) {
            Ok(())
        } else {
            Err(at.error(format!("names no node {node:?}; nodes: {}", listing(&self.nodes))))
        }
    }

    /// Jobs go to leaf queues only.
    fn check_queue(&self, at: &At, queue: &str) -> Result<(), ScenarioError> {
        if !self.queues.iter().any(|q| q.name == queue) {
            let names = self.queues.iter().map(|q| q.name.as_str());
            return Err(at.error(format!("names no queue {queue:?}; queues: {}", listing(names))));
        }
        let children: Vec<&str> =
            self.queues.iter().filter(|q| q.parent.as_deref() == Some(queue)).map(|q| q.name.as_str()).collect();
        if !children.is_empty() {
            let message =
                format!("queue {queue} has child queues ({}); jobs must be in leaf queues", listing(children));
            return Err(at.error(message));
        }
        Ok(())
    }

    /// The job's priority class: the one it names, else the lowest-valued one.
    fn priority_class(&self, f: &Fields) -> Result<Option<&'s PriorityClass>, ScenarioError> {
        let Some(class) = f.opt("priorityClass", string)? else {
            return Ok(self.classes.iter().min_by_key(|c| c.value));
        };
        if let Some(found) = self.classes.iter().find(|c| c.name == class) {
            return Ok(Some(found));
        }
        let names = self.classes.iter().map(|c| c.name.as_str());
        Err(f.at.key("priorityClass").error(format!("names no priority class {class:?}; classes: {}", listing(names))))
    }
}

fn job(doc: &Doc, root: Vec<Step>, v: &Value, catalog: &Catalog) -> Result<JobInput, ScenarioError> {
    let namespace = v.get("namespace").and_then(Value::as_str).unwrap_or("default");
    let label = entry_label(v, render(&root), |n| format!("job {namespace}/{n}"));
    let object = Object::new(doc, label, root);
    let f = Fields::open(object.at(), v, JOB_FIELDS)?;
    let name = f.req("name", name)?;
    let namespace = f.opt("namespace", self::name)?.unwrap_or_else(|| "default".to_string());
    let queue = f.req("queue", string)?;
    catalog.check_queue(&f.at.key("queue"), &queue)?;
    let class = catalog.priority_class(&f)?;
    let min_member = f.opt("minMember", int::<u32>)?;
    let created_at = f.opt("createdAt", int::<i64>)?.unwrap_or(0);
    let duration = f.opt("duration", int::<u64>)?;
    let started_at = f.opt("startedAt", int::<i64>)?;
    if started_at.is_some() && duration.is_none() {
        return Err(f.at.key("startedAt").error("needs `duration`, the run time after which the job ends"));
    }
    if let Some(t) = started_at.filter(|&t| t > catalog.now) {
        return Err(f.at.key("startedAt").error(format!("{t} is after the scenario's `now` ({})", catalog.now)));
    }
    let tasks = f.req("tasks", |at, v| list(at, v, |at, v| task(doc, &object.label, at.absolute(), v, catalog)))?;
    check_tasks(&f, &tasks)?;
    let min_member = gang_size(&f, &tasks, min_member)?;
    let bound = |t: &TaskInput| t.pods.iter().filter(|p| matches!(p, PodPhaseInput::Bound(_))).count() as u32;
    let running: u32 = tasks.iter().map(bound).sum();
    let phase = if running >= min_member && tasks.iter().all(|t| bound(t) >= t.min_available) {
        JobPhase::Running
    } else if running > 0 {
        JobPhase::Inqueue
    } else {
        JobPhase::Pending
    };
    let run_time = duration.map(|d| i64::try_from(d).unwrap_or(i64::MAX));
    Ok(JobInput {
        name,
        namespace,
        queue,
        priority_class: class.map(|c| c.name.clone()).unwrap_or_default(),
        priority: class.map_or(0, |c| c.value),
        preemptible: class.is_none_or(|c| c.preemptible),
        min_member,
        created_at,
        phase,
        tasks,
        run_time,
        ends_at: run_time.filter(|_| running > 0).map(|d| started_at.unwrap_or(catalog.now).saturating_add(d)),
    })
}

/// A job has at least one task, and its task names are unique.
fn check_tasks(f: &Fields, tasks: &[TaskInput]) -> Result<(), ScenarioError> {
    let at = f.at.key("tasks");
    if tasks.is_empty() {
        return Err(at.error("a job needs at least one task"));
    }
    for (index, task) in tasks.iter().enumerate() {
        if let Some(first) = tasks[..index].iter().position(|t| t.name == task.name) {
            let message = format!("duplicate task: tasks[{first}] is also {}", task.name);
            return Err(at.index(index).key("name").error(message));
        }
    }
    Ok(())
}

/// The gang size: `minMember` when given (between 1 and the job's pods), else all pods.
fn gang_size(f: &Fields, tasks: &[TaskInput], min_member: Option<u32>) -> Result<u32, ScenarioError> {
    let total: u64 = tasks.iter().map(|t| t.pods.len() as u64).sum();
    let at = f.at.key("minMember");
    match min_member {
        Some(0) if total > 0 => Err(at.error("must be at least 1")),
        Some(m) if u64::from(m) > total => Err(at.error(format!("is {m}, more than the job's {total} replicas"))),
        Some(m) => Ok(m),
        None => u32::try_from(total)
            .map_err(|_| f.at.key("tasks").error(format!("the job has {total} replicas, more than {}", u32::MAX))),
    }
}

fn task(doc: &Doc, job: &str, root: Vec<Step>, v: &Value, catalog: &Catalog) -> Result<TaskInput, ScenarioError> {
    let position = render(&root[root.len().saturating_sub(2)..]);
    let label = entry_label(v, format!("{job} {position}"), |n| format!("{job} task {n}"));
    let object = Object::new(doc, label, root);
    let f = Fields::open(object.at(), v, TASK_FIELDS)?;
    let name = f.req("name", name)?;
    let replicas = f.req("replicas", int::<u32>)?;
    let min_available = f.opt("minAvailable", int::<u32>)?;
    if let Some(m) = min_available.filter(|m| *m > replicas) {
        return Err(f.at.key("minAvailable").error(format!("is {m}, more than the task's {replicas} replicas")));
    }
    let running = f.opt("running", |at, v| list(at, v, |at, v| running_node(at, v, catalog)))?.unwrap_or_default();
    if running.len() > replicas as usize {
        let message = format!("lists {} running pods but the task has {replicas} replicas", running.len());
        return Err(f.at.key("running").error(message));
    }
    let requests = f.opt("requests", resources)?.unwrap_or_default();
    let constraints = Constraints {
        node_selector: f.opt("nodeSelector", string_map)?.unwrap_or_default(),
        tolerations: f.opt("tolerations", |at, v| list(at, v, typed::<Toleration>))?.unwrap_or_default(),
        affinity: f.opt("affinity", |at, v| list(at, v, affinity))?.unwrap_or_default(),
    };
    let mut pods: Vec<PodPhaseInput> = running.into_iter().map(PodPhaseInput::Bound).collect();
    pods.resize(replicas as usize, PodPhaseInput::Pending);
    Ok(TaskInput { name, min_available: min_available.unwrap_or(0), requests, constraints, pods })
}

fn running_node(at: &At, v: &Value, catalog: &Catalog) -> Result<String, ScenarioError> {
    let node = string(at, v)?;
    catalog.check_node(at, &node)?;
    Ok(node)
}

fn affinity(at: &At, v: &Value) -> Result<NodeSelectorRequirement, ScenarioError> {
    let requirement: NodeSelectorRequirement = typed(at, v)?;
    requirement.validate().map_err(|m| at.error(m))?;
    Ok(requirement)
}

/// Pod names (`<job>-<task>-<index>`) must not collide within a namespace: expectations use them.
fn check_pod_names(doc: &Doc, jobs: &[JobInput]) -> Result<(), ScenarioError> {
    let mut owners: BTreeMap<(&str, String), String> = BTreeMap::new();
    for (j, job) in jobs.iter().enumerate() {
        for (t, task) in job.tasks.iter().enumerate() {
            let prefix = format!("{}-{}", job.name, task.name);
            let owner = format!("job {} task {}", job.key(), task.name);
            if let Some(other) = owners.insert((job.namespace.as_str(), prefix.clone()), owner.clone()) {
                let mut root = item("jobs", j);
                root.extend([Step::Key("tasks".into()), Step::Index(t)]);
                let object = Object::new(doc, owner, root);
                let message = format!("its pods would be named {prefix}-<index>, like those of {other}");
                return Err(object.at().key("name").error(message));
            }
        }
    }
    Ok(())
}
