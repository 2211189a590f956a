//! Scenario files: a cluster, its queue tree and its workloads at one moment, and optionally
//! what the scheduler must decide (the contract is `scenario-format.md`).
//!
//! The text is first read as a `serde_yaml::Value`, then every object (node, queue, job, task,
//! ...) is read on its own, so that each error can name the file, the object (`job default/j1`)
//! and the field (`requests.cpu`). When an error is found, the text is replayed once more to
//! find the line and column of the field it concerns.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::Path;

use drover_api::{
    NodeSelectorRequirement, PriorityClass, ResourceList, Taint, Toleration, BUILTIN_PRIORITY_CLASSES, PODS,
};
use drover_scheduler::config::ConfigOverrides;
pub use drover_scheduler::snapshot::QueueingStrategy;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor};
use serde_yaml::{Mapping, Value};

/// A validated scenario: everything the simulator needs, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The scenario's name, printed in reports.
    pub name: String,
    /// Free text for people; empty when absent.
    pub description: String,
    /// Scheduling cycles to run (at least 1).
    pub cycles: u32,
    /// The time of the cycles, in seconds on the clock of `createdAt` and `startedAt`
    /// (Drover's extension; default 0).
    pub now: i64,
    /// Overrides of the default scheduler configuration.
    pub config: ConfigOverrides,
    /// The cluster's nodes.
    pub nodes: Vec<NodeSpec>,
    /// The queue tree, as a flat list with parent links.
    pub queues: Vec<QueueSpec>,
    /// The priority classes jobs may use (the built-in ones when the file lists none).
    pub priority_classes: Vec<PriorityClass>,
    /// The workloads; one job is one pod group.
    pub jobs: Vec<JobSpec>,
    /// What the scheduler must decide, if the file says.
    pub expect: Option<Expect>,
}

/// A node of the simulated cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// The node name, unique in the scenario.
    pub name: String,
    /// What pods may use; `pods` is 110 unless the file says otherwise.
    pub allocatable: ResourceList,
    /// Node labels, matched by node selectors and affinity.
    pub labels: BTreeMap<String, String>,
    /// Node taints, matched by tolerations.
    pub taints: Vec<Taint>,
    /// Whether new pods are kept off the node.
    pub unschedulable: bool,
}

/// A queue of the queue tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// The queue name, unique in the scenario.
    pub name: String,
    /// The parent queue; `None` for children of the root.
    pub parent: Option<String>,
    /// Guaranteed quota (zero for absent resources).
    pub deserved: ResourceList,
    /// Hard cap, if any.
    pub limit: Option<ResourceList>,
    /// Share of unused resources relative to sibling queues.
    pub over_quota_weight: u32,
    /// Whether the queue may lose resources it holds beyond its quota.
    pub reclaimable: bool,
    /// Whether a waiting job blocks later jobs of the queue.
    pub queueing_strategy: QueueingStrategy,
}

/// A job: one pod group and its pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// The job name, unique in its namespace.
    pub name: String,
    /// The job's namespace (`default` unless the file says).
    pub namespace: String,
    /// The leaf queue the job is submitted to.
    pub queue: String,
    /// The job's priority class (the lowest-valued class unless the file says).
    pub priority_class: String,
    /// The gang size: pods that must run together (all replicas unless the file says).
    pub min_member: u32,
    /// Submission time in seconds; FIFO order among equals.
    pub created_at: i64,
    /// Run time in seconds once `min_member` pods run: the replayed time in trace mode, the
    /// declared run time reservations plan with in a scenario.
    pub duration: Option<u64>,
    /// When the job's running pods started (default `now`); they end `duration` later.
    pub started_at: Option<i64>,
    /// The job's tasks (at least one).
    pub tasks: Vec<TaskSpec>,
}

/// A task of a job: a set of identical pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSpec {
    /// The task name, unique in its job.
    pub name: String,
    /// How many pods the task has.
    pub replicas: u32,
    /// Pods of this task that the gang needs, if the task has its own minimum.
    pub min_available: Option<u32>,
    /// What each pod requests.
    pub requests: ResourceList,
    /// Labels a node must have to run the pods.
    pub node_selector: BTreeMap<String, String>,
    /// Taints the pods tolerate.
    pub tolerations: Vec<Toleration>,
    /// Required node affinity; every requirement must hold.
    pub affinity: Vec<NodeSelectorRequirement>,
    /// Nodes of the pods already bound, in pod index order; the other pods are pending.
    pub running: Vec<String>,
}

/// What the scheduler must decide. Keys are kept as written in the file; every key was
/// checked to name exactly one job, pod or queue (see [`Scenario::find_jobs`] and
/// [`Scenario::find_pods`] to resolve them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expect {
    /// Per job (`name` or `namespace/name`): counts and state after the cycles.
    pub jobs: BTreeMap<String, JobExpect>,
    /// Per pod (`<job>-<task>-<index>`, optionally `namespace/`-prefixed): the node it must be on.
    pub placements: BTreeMap<String, String>,
    /// The exact set of pods that must be evicted, when given. Entries naming pods of the
    /// scenario's jobs were checked to exist; entries for other jobs (the format's own example
    /// has one) are kept as written and can never match.
    pub evicted: Option<Vec<String>>,
    /// Per queue: resource figures after the cycles.
    pub queues: BTreeMap<String, QueueExpect>,
}

/// The expected state of one job; absent fields are not checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobExpect {
    /// Pods bound.
    pub running: Option<u32>,
    /// Pods waiting.
    pub pending: Option<u32>,
    /// Pods evicted.
    pub evicted: Option<u32>,
    /// The pod group phase.
    pub phase: Option<String>,
    /// Text the job's pending reason must contain.
    pub reason: Option<String>,
}

/// The expected resource figures of one queue; absent fields are not checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueExpect {
    /// Resources held by the queue's pods.
    pub allocated: Option<ResourceList>,
    /// The queue's computed fair share.
    pub fair_share: Option<ResourceList>,
    /// The queue's quota.
    pub deserved: Option<ResourceList>,
}

/// One pod of a scenario, as expectations name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodRef<'s> {
    /// The pod's job.
    pub job: &'s JobSpec,
    /// The pod's task.
    pub task: &'s TaskSpec,
    /// The pod's index in its task.
    pub index: u32,
}

/// Why a scenario file cannot be used: which file, which object, which field, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file name given to [`parse`] or the path given to [`load`].
    pub file: String,
    /// The object, such as `node n1` or `job default/j1 task worker`; empty for file-level errors.
    pub object: String,
    /// The field path inside the object, such as `requests.cpu`; empty when the object itself is wrong.
    pub field: String,
    /// What is wrong, with the line and column when known.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file)?;
        if !self.object.is_empty() {
            write!(f, "{}: ", self.object)?;
        }
        if !self.field.is_empty() {
            write!(f, "field `{}`: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// The name of a pod of a job's task, as Drover creates it and expectations refer to it.
pub fn pod_name(job: &str, task: &str, index: u32) -> String {
    format!("{job}-{task}-{index}")
}

/// Reads and validates a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: file.clone(),
        object: String::new(),
        field: String::new(),
        message: format!("cannot read the file: {e}"),
    })?;
    parse(&text, &file)
}

/// Parses and validates scenario text; `file` names the text in errors.
pub fn parse(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
    let doc = Doc { text, file };
    let root: Value = serde_yaml::from_str(text).map_err(|e| doc.error(e))?;
    if root.is_null() {
        return Err(doc.error("the file is empty; a scenario needs at least a `name`"));
    }
    let top = Object::new(&doc, "scenario", Vec::new());
    let fields = Fields::open(top.at(), &root, TOP_FIELDS)?;
    let mut scenario = header(&fields)?;
    scenario.priority_classes = priority_classes(&fields)?;
    scenario.nodes = objects(&fields, "nodes", |root, v| node(&doc, root, v))?;
    check_unique(&doc, "nodes", "node", scenario.nodes.iter().map(|n| n.name.clone()))?;
    scenario.queues = objects(&fields, "queues", |root, v| queue(&doc, root, v))?;
    check_unique(&doc, "queues", "queue", scenario.queues.iter().map(|q| q.name.clone()))?;
    check_queue_tree(&doc, &scenario.queues)?;
    let catalog = Catalog::new(&scenario);
    let jobs = objects(&fields, "jobs", |root, v| job(&doc, root, v, &catalog))?;
    scenario.jobs = jobs;
    check_unique(&doc, "jobs", "job", scenario.jobs.iter().map(JobSpec::key))?;
    check_pod_names(&doc, &scenario.jobs)?;
    if let Some(v) = fields.get("expect") {
        scenario.expect = Some(expect(&doc, v, &scenario)?);
    }
    Ok(scenario)
}

impl JobSpec {
    /// The job's `namespace/name`, unique in a scenario.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn total_replicas(&self) -> u64 {
        self.tasks.iter().map(|t| u64::from(t.replicas)).sum()
    }
}

impl PodRef<'_> {
    /// The pod's `namespace/name`, unique in a scenario (the form reports use).
    pub fn key(&self) -> String {
        format!("{}/{}", self.job.namespace, pod_name(&self.job.name, &self.task.name, self.index))
    }
}

impl Scenario {
    /// The jobs an expectation key (`name` or `namespace/name`) can mean; several only when
    /// a bare name exists in more than one namespace.
    pub fn find_jobs(&self, key: &str) -> Vec<&JobSpec> {
        let (namespace, name) = split_key(key);
        self.jobs.iter().filter(|j| j.name == name && namespace.is_none_or(|ns| ns == j.namespace)).collect()
    }

    /// The pods an expectation key (`<job>-<task>-<index>`, optionally `namespace/`-prefixed)
    /// can mean; several only when a bare name exists in more than one namespace.
    pub fn find_pods(&self, key: &str) -> Vec<PodRef<'_>> {
        let (namespace, name) = split_key(key);
        let mut found = Vec::new();
        for job in self.jobs.iter().filter(|j| namespace.is_none_or(|ns| ns == j.namespace)) {
            for task in &job.tasks {
                let index = name
                    .strip_prefix(&format!("{}-{}-", job.name, task.name))
                    .and_then(|i| i.parse::<u32>().ok().filter(|n| n.to_string() == i));
                if let Some(index) = index.filter(|i| *i < task.replicas) {
                    found.push(PodRef { job, task, index });
                }
            }
        }
        found
    }
}

fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((namespace, name)) => (Some(namespace), name),
        None => (None, key),
    }
}

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
const EXPECT_FIELDS: &[&str] = &["jobs", "placements", "evicted", "queues"];
const JOB_EXPECT_FIELDS: &[&str] = &["running", "pending", "evicted", "phase", "reason"];
const QUEUE_EXPECT_FIELDS: &[&str] = &["allocated", "fairShare", "deserved"];

/// Pods per node when `allocatable` does not say (the Kubernetes default).
const DEFAULT_MAX_PODS: i64 = 110;

// ---------------------------------------------------------------------------------------------
// Error context: the document, the object an error concerns and the path of its field.

/// One step of a path from the document root to a value.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// The text being parsed and the name errors give it.
struct Doc<'a> {
    text: &'a str,
    file: &'a str,
}

impl Doc<'_> {
    /// An error about the file as a whole.
    fn error(&self, message: impl fmt::Display) -> ScenarioError {
        ScenarioError {
            file: self.file.to_string(),
            object: String::new(),
            field: String::new(),
            message: message.to_string(),
        }
    }
}

/// The object errors are reported against: its label and where it sits in the document.
struct Object<'a> {
    doc: &'a Doc<'a>,
    label: String,
    root: Vec<Step>,
}

impl<'a> Object<'a> {
    fn new(doc: &'a Doc<'a>, label: impl Into<String>, root: Vec<Step>) -> Object<'a> {
        Object { doc, label: label.into(), root }
    }

    fn at(&'a self) -> At<'a> {
        At { object: self, path: Vec::new() }
    }
}

/// A field of an object, by its path relative to the object.
#[derive(Clone)]
struct At<'a> {
    object: &'a Object<'a>,
    path: Vec<Step>,
}

impl<'a> At<'a> {
    fn key(&self, key: &str) -> At<'a> {
        self.step(Step::Key(key.to_string()))
    }

    fn index(&self, index: usize) -> At<'a> {
        self.step(Step::Index(index))
    }

    fn step(&self, step: Step) -> At<'a> {
        let mut path = self.path.clone();
        path.push(step);
        At { object: self.object, path }
    }

    fn absolute(&self) -> Vec<Step> {
        self.object.root.iter().chain(&self.path).cloned().collect()
    }

    /// An error about this field, located in the text when possible.
    fn error(&self, message: impl fmt::Display) -> ScenarioError {
        let mut message = message.to_string();
        if let Some((line, column)) = locate_nearest(self.object.doc.text, &self.absolute()) {
            let _ = write!(message, " (line {line}, column {column})");
        }
        ScenarioError {
            file: self.object.doc.file.to_string(),
            object: self.object.label.clone(),
            field: render(&self.path),
            message,
        }
    }
}

/// A field path as people write it: `tasks[0].requests.cpu`.
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// How a list entry is labelled in errors: `label(name)` when it has a usable name, else `fallback`.
fn entry_label(v: &Value, fallback: String, label: impl FnOnce(&str) -> String) -> String {
    match v.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        Some(name) => label(name),
        None => fallback,
    }
}

/// The path of entry `index` of a top-level list.
fn item(section: &str, index: usize) -> Vec<Step> {
    vec![Step::Key(section.to_string()), Step::Index(index)]
}

/// A short human-readable list of names, for "expected one of" hints.
fn listing<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> String {
    const SHOWN: usize = 10;
    let names: Vec<S> = names.into_iter().collect();
    if names.is_empty() {
        return "(none)".into();
    }
    let mut out = names.iter().take(SHOWN).map(AsRef::as_ref).collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        let _ = write!(out, ", ... ({} in all)", names.len());
    }
    out
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

// ---------------------------------------------------------------------------------------------
// Field readers: each turns one YAML value into a typed value or an error naming the field.

/// The fields of one YAML mapping, checked against the names the object allows.
struct Fields<'a> {
    at: At<'a>,
    map: &'a Mapping,
}

impl<'a> Fields<'a> {
    fn open(at: At<'a>, value: &'a Value, known: &[&str]) -> Result<Fields<'a>, ScenarioError> {
        let map = mapping(&at, value)?;
        for key in map.keys() {
            let name = key
                .as_str()
                .ok_or_else(|| at.error(format!("field names must be strings, found {}", describe(key))))?;
            if !known.contains(&name) {
                return Err(at.key(name).error(unknown_field(name, known)));
            }
        }
        Ok(Fields { at, map })
    }

    /// The value of a field; an explicit `null` counts as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn opt<T>(
        &self,
        key: &str,
        read: impl FnOnce(&At<'a>, &'a Value) -> Result<T, ScenarioError>,
    ) -> Result<Option<T>, ScenarioError> {
        self.get(key).map(|v| read(&self.at.key(key), v)).transpose()
    }

    fn req<T>(
        &self,
        key: &str,
        read: impl FnOnce(&At<'a>, &'a Value) -> Result<T, ScenarioError>,
    ) -> Result<T, ScenarioError> {
        match self.get(key) {
            Some(v) => read(&self.at.key(key), v),
            None => Err(self.at.key(key).error("is required")),
        }
    }
}

fn unknown_field(name: &str, known: &[&str]) -> String {
    let expected: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
    let mut message = format!("unknown field `{name}`, expected one of {}", expected.join(", "));
    let closest = known.iter().map(|k| (edit_distance(name, k), k)).min();
    if let Some((_, suggestion)) = closest.filter(|(d, _)| *d <= 2 && *d < name.chars().count()) {
        let _ = write!(message, "; did you mean `{suggestion}`?");
    }
    message
}

/// Levenshtein distance, ignoring case, to suggest the field a typo meant.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

fn mapping<'v>(at: &At, v: &'v Value) -> Result<&'v Mapping, ScenarioError> {
    v.as_mapping().ok_or_else(|| at.error(format!("expected a mapping, found {}", describe(v))))
}

fn list<'v, T>(
    at: &At,
    v: &'v Value,
    mut read: impl FnMut(&At, &'v Value) -> Result<T, ScenarioError>,
) -> Result<Vec<T>, ScenarioError> {
    let seq = v.as_sequence().ok_or_else(|| at.error(format!("expected a list, found {}", describe(v))))?;
    seq.iter().enumerate().map(|(i, v)| read(&at.index(i), v)).collect()
}

/// A mapping whose keys are names (of jobs, pods, queues, labels, ...).
fn keyed<'v, T>(
    at: &At,
    v: &'v Value,
    mut read: impl FnMut(&At, &'v str, &'v Value) -> Result<T, ScenarioError>,
) -> Result<BTreeMap<String, T>, ScenarioError> {
    let mut out = BTreeMap::new();
    for (key, value) in mapping(at, v)? {
        let key = key.as_str().ok_or_else(|| at.error(format!("keys must be strings, found {}", describe(key))))?;
        out.insert(key.to_string(), read(&at.key(key), key, value)?);
    }
    Ok(out)
}

fn string(at: &At, v: &Value) -> Result<String, ScenarioError> {
    v.as_str().map(str::to_string).ok_or_else(|| at.error(format!("expected a string, found {}", describe(v))))
}

/// An object name: a non-empty string without `/` (which separates namespaces in keys).
fn name(at: &At, v: &Value) -> Result<String, ScenarioError> {
    let name = string(at, v)?;
    if name.is_empty() {
        return Err(at.error("must not be empty"));
    }
    if name.contains('/') {
        return Err(at.error(format!("{name:?} must not contain `/`")));
    }
    Ok(name)
}

fn boolean(at: &At, v: &Value) -> Result<bool, ScenarioError> {
    v.as_bool().ok_or_else(|| at.error(format!("expected true or false, found {}", describe(v))))
}

fn int<T: TryFrom<i128>>(at: &At, v: &Value) -> Result<T, ScenarioError> {
    let whole = match v {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    };
    let n = whole.ok_or_else(|| at.error(format!("expected a whole number, found {}", describe(v))))?;
    T::try_from(n).map_err(|_| {
        if n < 0 && T::try_from(-1).is_err() {
            at.error(format!("must not be negative, found {n}"))
        } else {
            at.error(format!("{n} is out of range"))
        }
    })
}

fn resources(at: &At, v: &Value) -> Result<ResourceList, ScenarioError> {
    let mut list = ResourceList::default();
    for (key, quantity) in mapping(at, v)? {
        let name = key
            .as_str()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| at.error(format!("resource names must be non-empty strings, found {}", describe(key))))?;
        let at = at.key(name);
        let text = match quantity {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(at.error(format!("expected a quantity such as 2, 500m or 4Gi, found {}", describe(other))))
            }
        };
        let amount = ResourceList::parse_amount(name, &text).map_err(|e| at.error(e))?;
        list.0.insert(name.to_string(), amount);
    }
    Ok(list)
}

fn string_map(at: &At, v: &Value) -> Result<BTreeMap<String, String>, ScenarioError> {
    keyed(at, v, |at, _, v| string(at, v))
}

/// A value of a type that has its own serde definition (taints, tolerations, config, ...).
fn typed<T: DeserializeOwned>(at: &At, v: &Value) -> Result<T, ScenarioError> {
    T::deserialize(v).map_err(|e| {
        let message = e.to_string();
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
            .filter(|key| v.get(*key).is_some());
        match unknown {
            Some(key) => at.key(key).error(message.as_str()),
            None => at.error(message.as_str()),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Objects.

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

fn priority_classes(f: &Fields) -> Result<Vec<PriorityClass>, ScenarioError> {
    let doc = f.at.object.doc;
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

fn node(doc: &Doc, root: Vec<Step>, v: &Value) -> Result<NodeSpec, ScenarioError> {
    let object = Object::new(doc, entry_label(v, render(&root), |n| format!("node {n}")), root);
    let f = Fields::open(object.at(), v, NODE_FIELDS)?;
    let name = f.req("name", name)?;
    let mut allocatable = f.req("allocatable", resources)?;
    allocatable.0.entry(PODS.to_string()).or_insert(DEFAULT_MAX_PODS);
    Ok(NodeSpec {
        name,
        allocatable,
        labels: f.opt("labels", string_map)?.unwrap_or_default(),
        taints: f.opt("taints", |at, v| list(at, v, typed::<Taint>))?.unwrap_or_default(),
        unschedulable: f.opt("unschedulable", boolean)?.unwrap_or(false),
    })
}

fn queue(doc: &Doc, root: Vec<Step>, v: &Value) -> Result<QueueSpec, ScenarioError> {
    let object = Object::new(doc, entry_label(v, render(&root), |n| format!("queue {n}")), root);
    let f = Fields::open(object.at(), v, QUEUE_FIELDS)?;
    Ok(QueueSpec {
        name: f.req("name", name)?,
        parent: f.opt("parent", string)?.filter(|p| !p.is_empty()),
        deserved: f.opt("deserved", resources)?.unwrap_or_default(),
        limit: f.opt("limit", resources)?,
        over_quota_weight: f.opt("overQuotaWeight", int::<u32>)?.unwrap_or(1),
        reclaimable: f.opt("reclaimable", boolean)?.unwrap_or(true),
        queueing_strategy: f.opt("queueingStrategy", typed::<QueueingStrategy>)?.unwrap_or_default(),
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
fn check_queue_tree(doc: &Doc, queues: &[QueueSpec]) -> Result<(), ScenarioError> {
    let parents: BTreeMap<&str, Option<&str>> = queues.iter().map(|q| (q.name.as_str(), q.parent.as_deref())).collect();
    let queue_parent = |index: usize, q: &QueueSpec, message: String| {
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
struct Catalog<'s> {
    nodes: BTreeSet<&'s str>,
    queues: &'s [QueueSpec],
    classes: &'s [PriorityClass],
    now: i64,
}

impl<'s> Catalog<'s> {
    fn new(scenario: &'s Scenario) -> Catalog<'s> {
        Catalog {
            nodes: scenario.nodes.iter().map(|n| n.name.as_str()).collect(),
            queues: &scenario.queues,
            classes: &scenario.priority_classes,
            now: scenario.now,
        }
    }

    fn check_node(&self, at: &At, node: &str) -> Result<(), ScenarioError> {
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

    fn priority_class(&self, f: &Fields) -> Result<String, ScenarioError> {
        let Some(class) = f.opt("priorityClass", string)? else {
            let lowest = self.classes.iter().min_by_key(|c| c.value).map(|c| c.name.clone());
            return Ok(lowest.unwrap_or_default());
        };
        if self.classes.iter().any(|c| c.name == class) {
            return Ok(class);
        }
        let names = self.classes.iter().map(|c| c.name.as_str());
        Err(f.at.key("priorityClass").error(format!("names no priority class {class:?}; classes: {}", listing(names))))
    }
}

fn job(doc: &Doc, root: Vec<Step>, v: &Value, catalog: &Catalog) -> Result<JobSpec, ScenarioError> {
    let namespace = v.get("namespace").and_then(Value::as_str).unwrap_or("default");
    let label = entry_label(v, render(&root), |n| format!("job {namespace}/{n}"));
    let object = Object::new(doc, label, root);
    let f = Fields::open(object.at(), v, JOB_FIELDS)?;
    let name = f.req("name", name)?;
    let namespace = f.opt("namespace", self::name)?.unwrap_or_else(|| "default".to_string());
    let queue = f.req("queue", string)?;
    catalog.check_queue(&f.at.key("queue"), &queue)?;
    let priority_class = catalog.priority_class(&f)?;
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
    let mut job =
        JobSpec { name, namespace, queue, priority_class, min_member: 0, created_at, duration, started_at, tasks };
    check_tasks(&f, &job)?;
    job.min_member = gang_size(&f, &job, min_member)?;
    Ok(job)
}

/// A job has at least one task, and its task names are unique.
fn check_tasks(f: &Fields, job: &JobSpec) -> Result<(), ScenarioError> {
    let at = f.at.key("tasks");
    if job.tasks.is_empty() {
        return Err(at.error("a job needs at least one task"));
    }
    for (index, task) in job.tasks.iter().enumerate() {
        if let Some(first) = job.tasks[..index].iter().position(|t| t.name == task.name) {
            let message = format!("duplicate task: tasks[{first}] is also {}", task.name);
            return Err(at.index(index).key("name").error(message));
        }
    }
    Ok(())
}

/// The gang size: `minMember` when given (between 1 and the job's pods), else all pods.
fn gang_size(f: &Fields, job: &JobSpec, min_member: Option<u32>) -> Result<u32, ScenarioError> {
    let total = job.total_replicas();
    let at = f.at.key("minMember");
    match min_member {
        Some(0) if total > 0 => Err(at.error("must be at least 1")),
        Some(m) if u64::from(m) > total => Err(at.error(format!("is {m}, more than the job's {total} replicas"))),
        Some(m) => Ok(m),
        None => u32::try_from(total)
            .map_err(|_| f.at.key("tasks").error(format!("the job has {total} replicas, more than {}", u32::MAX))),
    }
}

fn task(doc: &Doc, job: &str, root: Vec<Step>, v: &Value, catalog: &Catalog) -> Result<TaskSpec, ScenarioError> {
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
    Ok(TaskSpec {
        name,
        replicas,
        min_available,
        requests: f.opt("requests", resources)?.unwrap_or_default(),
        node_selector: f.opt("nodeSelector", string_map)?.unwrap_or_default(),
        tolerations: f.opt("tolerations", |at, v| list(at, v, typed::<Toleration>))?.unwrap_or_default(),
        affinity: f.opt("affinity", |at, v| list(at, v, affinity))?.unwrap_or_default(),
        running,
    })
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
fn check_pod_names(doc: &Doc, jobs: &[JobSpec]) -> Result<(), ScenarioError> {
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

// ---------------------------------------------------------------------------------------------
// Expectations.

fn expect(doc: &Doc, v: &Value, scenario: &Scenario) -> Result<Expect, ScenarioError> {
    let object = Object::new(doc, "expect", vec![Step::Key("expect".into())]);
    let f = Fields::open(object.at(), v, EXPECT_FIELDS)?;
    let catalog = Catalog::new(scenario);
    let mut seen_jobs = BTreeMap::new();
    let mut seen_pods = BTreeMap::new();
    Ok(Expect {
        jobs: f
            .opt("jobs", |at, v| keyed(at, v, |at, key, v| expected_job(at, key, v, scenario, &mut seen_jobs)))?
            .unwrap_or_default(),
        placements: f
            .opt("placements", |at, v| {
                keyed(at, v, |at, key, v| placement(at, key, v, scenario, &catalog, &mut seen_pods))
            })?
            .unwrap_or_default(),
        evicted: f.opt("evicted", |at, v| evictions(at, v, scenario))?,
        queues: f
            .opt("queues", |at, v| keyed(at, v, |at, key, v| expected_queue(at, key, v, &catalog)))?
            .unwrap_or_default(),
    })
}

/// Rejects a second expectation about the same object written another way (`j1` and `default/j1`).
fn once(seen: &mut BTreeMap<String, String>, at: &At, canonical: String, written: &str) -> Result<(), ScenarioError> {
    match seen.insert(canonical.clone(), written.to_string()) {
        Some(other) => Err(at.error(format!("names {canonical}, which `{other}` already names"))),
        None => Ok(()),
    }
}

fn expected_job(
    at: &At,
    key: &str,
    v: &Value,
    scenario: &Scenario,
    seen: &mut BTreeMap<String, String>,
) -> Result<JobExpect, ScenarioError> {
    let found = scenario.find_jobs(key);
    match found.as_slice() {
        [job] => once(seen, at, job.key(), key)?,
        [] => {
            let jobs = listing(scenario.jobs.iter().map(JobSpec::key));
            return Err(at.error(format!("names no job; jobs: {jobs}")));
        }
        several => {
            let jobs = listing(several.iter().map(|j| j.key()));
            return Err(at.error(format!("is ambiguous: it names {jobs}; write namespace/name")));
        }
    }
    let f = Fields::open(at.clone(), v, JOB_EXPECT_FIELDS)?;
    Ok(JobExpect {
        running: f.opt("running", int::<u32>)?,
        pending: f.opt("pending", int::<u32>)?,
        evicted: f.opt("evicted", int::<u32>)?,
        phase: f.opt("phase", string)?,
        reason: f.opt("reason", string)?,
    })
}

/// The pod an expectation key names, if any.
fn resolve_pod<'s>(at: &At, key: &str, scenario: &'s Scenario) -> Result<Option<PodRef<'s>>, ScenarioError> {
    let found = scenario.find_pods(key);
    match found.as_slice() {
        [] => Ok(None),
        [pod] => Ok(Some(*pod)),
        several => {
            let pods = listing(several.iter().map(PodRef::key));
            Err(at.error(format!("is ambiguous: it names {pods}; write namespace/name")))
        }
    }
}

fn no_pod(at: &At) -> ScenarioError {
    at.error("names no pod; pods are named <job>-<task>-<index> (index below the task's replicas), optionally with a namespace/ prefix")
}

fn placement(
    at: &At,
    key: &str,
    v: &Value,
    scenario: &Scenario,
    catalog: &Catalog,
    seen: &mut BTreeMap<String, String>,
) -> Result<String, ScenarioError> {
    let pod = resolve_pod(at, key, scenario)?.ok_or_else(|| no_pod(at))?;
    once(seen, at, pod.key(), key)?;
    let node = string(at, v)?;
    catalog.check_node(at, &node)?;
    Ok(node)
}

/// Evicted pods of the scenario's jobs must exist; entries for jobs the scenario does not
/// define are kept as written (the format's own example has one), they can never match.
fn evictions(at: &At, v: &Value, scenario: &Scenario) -> Result<Vec<String>, ScenarioError> {
    let mut seen = BTreeMap::new();
    list(at, v, |at, v| {
        let key = string(at, v)?;
        let canonical = match resolve_pod(at, &key, scenario)? {
            Some(pod) => pod.key(),
            None if names_a_job(scenario, &key) => return Err(no_pod(at)),
            None => key.clone(),
        };
        once(&mut seen, at, canonical, &key)?;
        Ok(key)
    })
}

/// Whether a pod key starts with the name of one of the scenario's jobs (`<job>-...`).
fn names_a_job(scenario: &Scenario, key: &str) -> bool {
    let (namespace, name) = split_key(key);
    scenario
        .jobs
        .iter()
        .any(|j| namespace.is_none_or(|ns| ns == j.namespace) && name.starts_with(&format!("{}-", j.name)))
}

fn expected_queue(at: &At, key: &str, v: &Value, catalog: &Catalog) -> Result<QueueExpect, ScenarioError> {
    if !catalog.queues.iter().any(|q| q.name == key) {
        let queues = listing(catalog.queues.iter().map(|q| q.name.as_str()));
        return Err(at.error(format!("names no queue; queues: {queues}")));
    }
    let f = Fields::open(at.clone(), v, QUEUE_EXPECT_FIELDS)?;
    Ok(QueueExpect {
        allocated: f.opt("allocated", resources)?,
        fair_share: f.opt("fairShare", resources)?,
        deserved: f.opt("deserved", resources)?,
    })
}

// ---------------------------------------------------------------------------------------------
// Locations: serde_yaml keeps no positions in a `Value`, so the text is replayed along the
// path of the faulty field, failing on purpose there; serde_yaml then says where that was.

/// Marks the error the location probe raises on purpose when it reaches its target.
const PROBE_HIT: &str = "drover-scenario-location-probe";

/// The line and column of `path`, or of its closest ancestor present in the text.
fn locate_nearest(text: &str, path: &[Step]) -> Option<(usize, usize)> {
    (1..=path.len()).rev().find_map(|n| locate(text, &path[..n]))
}

fn locate(text: &str, path: &[Step]) -> Option<(usize, usize)> {
    let error = Probe(path).deserialize(serde_yaml::Deserializer::from_str(text)).err()?;
    let location = error.location().filter(|_| error.to_string().contains(PROBE_HIT))?;
    Some((location.line(), location.column()))
}

/// Follows a path through the YAML events and fails at its end (a key or a value).
struct Probe<'p>(&'p [Step]);

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { PROBE_HIT } else { "a mapping or a list" })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Step::Key(want), rest)) = self.0.split_first() else {
            return Err(de::Error::invalid_type(Unexpected::Map, &self));
        };
        while let Some(found) = map.next_key_seed(KeyProbe { want, last: rest.is_empty() })? {
            if found {
                return map.next_value_seed(Probe(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Step::Index(want), rest)) = self.0.split_first() else {
            return Err(de::Error::invalid_type(Unexpected::Seq, &self));
        };
        for _ in 0..*want {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Probe(rest)).map(|_| ())
    }
}

/// Reads one mapping key: whether it is the wanted one, failing on it when it ends the path.
struct KeyProbe<'p> {
    want: &'p str,
    last: bool,
}

impl<'de> DeserializeSeed<'de> for KeyProbe<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyProbe<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        match key == self.want {
            true if self.last => Err(E::custom(PROBE_HIT)),
            found => Ok(found),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(steps: &[&str]) -> Vec<Step> {
        steps.iter().map(|s| s.parse().map_or_else(|_| Step::Key(s.to_string()), Step::Index)).collect()
    }

    #[test]
    fn field_paths_render_like_code() {
        assert_eq!(render(&path(&["tasks", "2", "requests", "cpu"])), "tasks[2].requests.cpu");
        assert_eq!(render(&path(&["0", "name"])), "[0].name");
    }

    #[test]
    fn edit_distance_ignores_case() {
        assert_eq!(edit_distance("replica", "replicas"), 1);
        assert_eq!(edit_distance("overquotaweight", "overQuotaWeight"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn locate_finds_keys_and_entries_in_block_and_flow_style() {
        let text = "a:\n  - {b: 1, c: [x, y]}\n  - d: 2\n";
        assert_eq!(locate(text, &path(&["a", "0", "c"])), Some((2, 12)));
        assert_eq!(locate(text, &path(&["a", "0", "c", "1"])), Some((2, 19)));
        assert_eq!(locate(text, &path(&["a", "1", "d"])), Some((3, 5)));
        assert_eq!(locate(text, &path(&["a", "2"])), None);
        assert_eq!(locate(text, &path(&["a", "1", "zz"])), None);
        assert_eq!(locate_nearest(text, &path(&["a", "1", "zz"])), Some((3, 5)));
    }
}
