//! The `expect` block: what the scheduler must decide. Every key must name exactly one job,
//! pod or queue of the scenario, every node one of its nodes.

use std::collections::BTreeMap;

use drover_api::ResourceList;
use drover_scheduler::snapshot::JobInput;
use serde_yaml::Value;

use super::model::Catalog;
use super::read::{int, keyed, list, listing, resources, string, At, Doc, Fields, Object, Step};
use super::{split_key, PodRef, Scenario, ScenarioError};

const EXPECT_FIELDS: &[&str] = &["jobs", "placements", "evicted", "queues"];
const JOB_EXPECT_FIELDS: &[&str] = &["running", "pending", "evicted", "phase", "reason"];
const QUEUE_EXPECT_FIELDS: &[&str] = &["allocated", "fairShare", "deserved"];

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

/// Reads the `expect` block of a scenario whose cluster is read.
pub(super) fn read(doc: &Doc, v: &Value, scenario: &Scenario) -> Result<Expect, ScenarioError> {
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
            let jobs = listing(scenario.jobs.iter().map(JobInput::key));
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
