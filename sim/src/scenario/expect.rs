//! The `expect` block: what the scheduler must decide. Every key must name exactly one job,
//! pod or queue of the scenario, every node one of its nodes.

use std::collections::BTreeMap;

use drover_api::ResourceList;
use drover_scheduler::snapshot::JobInput;
use serde::Deserialize;

use super::de::{resources, Step};
use super::locate::{listing, steps, Doc};
use super::names::NodeNames;
use super::{split_key, PodRef, Scenario, ScenarioError};

/// What the scheduler must decide. Keys are kept as written in the file; every key was
/// checked to name exactly one job, pod or queue (see [`Scenario::find_jobs`] and
/// [`Scenario::find_pods`] to resolve them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
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
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct QueueExpect {
    /// Resources held by the queue's pods.
    #[serde(deserialize_with = "resources")]
    pub allocated: Option<ResourceList>,
    /// The queue's computed fair share.
    #[serde(deserialize_with = "resources")]
    pub fair_share: Option<ResourceList>,
    /// The queue's quota.
    #[serde(deserialize_with = "resources")]
    pub deserved: Option<ResourceList>,
}

/// Checks that every key of `expect` names one object of the scenario, and only once.
pub(super) fn check(doc: &Doc, expect: &Expect, s: &Scenario) -> Result<(), ScenarioError> {
    // Rejects a second expectation about the same object written another way (`j1` and `default/j1`).
    let once = |seen: &mut BTreeMap<String, String>, at: &[Step], canonical: String, written: &str| match seen
        .insert(canonical.clone(), written.to_string())
    {
        Some(other) => Err(doc.error(at, format!("names {canonical}, which `{other}` already names"))),
        None => Ok(()),
    };
    let mut seen = BTreeMap::new();
    for key in keys(doc, "jobs") {
        let at = steps!["expect", "jobs", key];
        match s.find_jobs(key).as_slice() {
            [job] => once(&mut seen, at, job.key(), key)?,
            [] => {
                return Err(doc.error(at, format!("names no job; jobs: {}", listing(s.jobs.iter().map(JobInput::key)))))
            }
            several => {
                let jobs = listing(several.iter().map(|j| j.key()));
                return Err(doc.error(at, format!("is ambiguous: it names {jobs}; write namespace/name")));
            }
        }
    }
    let mut seen = BTreeMap::new();
    let names = NodeNames::of(s);
    for key in keys(doc, "placements") {
        let at = steps!["expect", "placements", key];
        let pod = resolve_pod(doc, at, key, s)?.ok_or_else(|| no_pod(doc, at))?;
        once(&mut seen, at, pod.key(), key)?;
        names.check(doc, at, s, &expect.placements[key])?;
    }
    let mut seen = BTreeMap::new();
    for (i, key) in expect.evicted.iter().flatten().enumerate() {
        let at = steps!["expect", "evicted", i];
        let canonical = match resolve_pod(doc, at, key, s)? {
            Some(pod) => pod.key(),
            None if names_a_job(s, key) => return Err(no_pod(doc, at)),
            None => key.clone(),
        };
        once(&mut seen, at, canonical, key)?;
    }
    if let Some(key) = keys(doc, "queues").find(|key| !s.queues.iter().any(|q| q.name == *key)) {
        let queues = listing(s.queues.iter().map(|q| q.name.as_str()));
        return Err(doc.error(steps!["expect", "queues", key], format!("names no queue; queues: {queues}")));
    }
    Ok(())
}

/// The keys of a mapping of `expect` in the file's order, so that of two keys naming one
/// object, the later one is blamed.
fn keys<'d>(doc: &Doc<'d>, section: &str) -> impl Iterator<Item = &'d str> {
    doc.keys(&["expect", section]).into_iter()
}

/// The pod an expectation key names, if any.
fn resolve_pod<'s>(doc: &Doc, at: &[Step], key: &str, s: &'s Scenario) -> Result<Option<PodRef<'s>>, ScenarioError> {
    match s.find_pods(key).as_slice() {
        [] => Ok(None),
        [pod] => Ok(Some(*pod)),
        several => {
            let pods = listing(several.iter().map(PodRef::key));
            Err(doc.error(at, format!("is ambiguous: it names {pods}; write namespace/name")))
        }
    }
}

fn no_pod(doc: &Doc, at: &[Step]) -> ScenarioError {
    doc.error(at, "names no pod; pods are named <job>-<task>-<index> (index below the task's replicas), optionally with a namespace/ prefix")
}

/// Whether a pod key starts with the name of one of the scenario's jobs (`<job>-...`); other
/// keys of `evicted` are kept as written (the format's own example has one), they can never match.
fn names_a_job(s: &Scenario, key: &str) -> bool {
    let (namespace, name) = split_key(key);
    s.jobs.iter().any(|j| namespace.is_none_or(|ns| ns == j.namespace) && name.starts_with(&format!("{}-", j.name)))
}
