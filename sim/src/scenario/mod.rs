//! Scenario files: a cluster, its queue tree and its workloads at one moment, and optionally
//! what the scheduler must decide (the contract is `scenario-format.md`).
//!
//! The cluster is read straight into the core's inputs ([`NodeInput`], [`QueueInput`],
//! [`JobInput`]); [`Scenario`] adds only what is not cluster state. The text is first read as
//! a YAML tree ([`tree`]): by the [`quick`] reader when it is plain YAML, else as a
//! `serde_yaml::Value`; then with serde through [`de`], which says where an error is, and
//! checked in one pass ([`model`], [`expect`]); each error names the file, the object (`job
//! default/j1`) and the field (`requests.cpu`), and the line and column of that field
//! ([`locate`]).

use std::fmt;
use std::path::Path;

use drover_api::PriorityClass;
use drover_scheduler::config::ConfigOverrides;
pub use drover_scheduler::snapshot::QueueingStrategy;
use drover_scheduler::snapshot::{JobInput, NodeInput, QueueInput, TaskInput, TopologyInput};
use drover_scheduler::usage::UsageLedger;
use serde::Deserialize;
use serde_yaml::Value;

use self::locate::Root;

mod de;
mod expect;
mod locate;
mod model;
mod names;
mod quick;
mod topology;
mod tree;

pub use expect::{Expect, JobExpect, QueueExpect};

/// A validated scenario: the cluster as the core's inputs, with defaults applied, and what
/// the simulator needs beyond it.
#[derive(Debug, Clone)]
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
    /// The cluster's nodes (`pods` is 110 where the file does not say).
    pub nodes: Vec<NodeInput>,
    /// The hierarchies of node labels jobs and tasks may ask to be placed within.
    pub topologies: Vec<TopologyInput>,
    /// The queue tree, as a flat list with parent links.
    pub queues: Vec<QueueInput>,
    /// The queues' past usage for time-based fair share (Drover's extension, a queue's
    /// `usage`: decayed resource-seconds, as Queue status keeps them), as of `now`.
    pub usage: UsageLedger,
    /// The priority classes jobs may use (the built-in ones when the file lists none).
    pub priority_classes: Vec<PriorityClass>,
    /// The workloads, one job per pod group; `running` pods are bound, the rest pending, and
    /// a running job with a `duration` ends that long after `startedAt` (default `now`).
    pub jobs: Vec<JobInput>,
    /// What the scheduler must decide, if the file says.
    pub expect: Option<Expect>,
}

/// One pod of a scenario, as expectations name it.
#[derive(Debug, Clone, Copy)]
pub struct PodRef<'s> {
    /// The pod's job.
    pub job: &'s JobInput,
    /// The pod's task.
    pub task: &'s TaskInput,
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
    let text = std::fs::read_to_string(path).map_err(|e| file_error(&file, format!("cannot read the file: {e}")))?;
    parse(&text, &file)
}

/// Parses and validates scenario text; `file` names the text in errors.
pub fn parse(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
    if let Some(node) = quick::read(text) {
        return build(text, file, Root::Quick(&node));
    }
    let value: Value = serde_yaml::from_str(text).map_err(|e| file_error(file, e))?;
    if value.is_null() {
        return Err(file_error(file, "the file is empty; a scenario needs at least a `name`"));
    }
    build(text, file, Root::Yaml(&value))
}

/// Reads and validates the scenario of a read YAML document.
fn build(text: &str, file: &str, root: Root) -> Result<Scenario, ScenarioError> {
    let raw = match root {
        Root::Yaml(value) => model::File::deserialize(de::De(value)),
        Root::Quick(node) => model::File::deserialize(de::De(node)),
    };
    let doc = locate::Doc { text, file, root };
    model::validate(&doc, raw.map_err(|e| doc.error(&e.path, e.message))?)
}

/// An error about a file as a whole.
fn file_error(file: &str, message: impl fmt::Display) -> ScenarioError {
    ScenarioError { file: file.to_string(), object: String::new(), field: String::new(), message: message.to_string() }
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
    pub fn find_jobs(&self, key: &str) -> Vec<&JobInput> {
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
                if let Some(index) = index.filter(|i| (*i as usize) < task.pods.len()) {
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
