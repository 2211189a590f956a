//! The topology part of a scenario: the hierarchies of node labels (`topologies`), the
//! `topology` blocks of jobs and tasks and the `slices` of tasks, as the file writes them,
//! and their checks against each other (called from the one validation pass in [`model`]).
//!
//! [`model`]: super::model

use drover_api::topology::{DEFAULT_TOPOLOGY, NODE_LEVEL};
use drover_scheduler::snapshot::{LevelInput, SlicesInput, TopologyInput, TopologyRequestInput};
use serde::Deserialize;

use super::de::{name, Step};
use super::locate::{listing, Doc};
use super::ScenarioError;

/// A hierarchy as written: levels coarse to fine (the node is the implicit finest).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Hierarchy {
    #[serde(deserialize_with = "name")]
    name: String,
    levels: Vec<Level>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Level {
    #[serde(deserialize_with = "name")]
    name: String,
    node_label: String,
}

/// A job's `topology` block: which hierarchy, and the levels its pods must and should share.
#[derive(Deserialize)]
pub(super) struct JobTopology {
    #[serde(default, deserialize_with = "name")]
    name: Option<String>,
    required: Option<String>,
    preferred: Option<String>,
}

/// A task's `topology` block: a sub-group inside the job's domain, in the job's hierarchy.
#[derive(Deserialize)]
pub(super) struct TaskTopology {
    required: Option<String>,
    preferred: Option<String>,
}

/// A task's `slices`: consecutive pods in groups of `size`, each inside one domain of `required`.
#[derive(Deserialize)]
pub(super) struct Slices {
    size: u32,
    required: String,
}

/// The path `at` extended by `more`.
fn under(at: &[Step], more: &[&str]) -> Vec<Step> {
    at.iter().cloned().chain(more.iter().map(|&k| Step::from(k))).collect()
}

/// Checks each hierarchy's levels (names unique, none named `node`, labels given) and turns
/// them into the core's inputs. Duplicate hierarchy names are the caller's check.
pub(super) fn hierarchies(doc: &Doc, list: Vec<Hierarchy>) -> Result<Vec<TopologyInput>, ScenarioError> {
    let mut out = Vec::with_capacity(list.len());
    for (i, h) in list.into_iter().enumerate() {
        for (l, level) in h.levels.iter().enumerate() {
            let at = |field: &str| [Step::from("topologies"), i.into(), "levels".into(), l.into(), field.into()];
            if level.name == NODE_LEVEL {
                let message = "`node` is the implicit finest level of every topology; name this level otherwise";
                return Err(doc.error(&at("name"), message));
            }
            if let Some(first) = h.levels[..l].iter().position(|o| o.name == level.name) {
                let message = format!("duplicate level: levels[{first}] is also {}", level.name);
                return Err(doc.error(&at("name"), message));
            }
            if level.node_label.is_empty() {
                return Err(doc.error(&at("nodeLabel"), "must not be empty"));
            }
        }
        let levels = h.levels.into_iter().map(|l| LevelInput { name: l.name, node_label: l.node_label }).collect();
        out.push(TopologyInput { name: h.name, levels });
    }
    Ok(out)
}

/// The hierarchies a scenario defines, for resolving the names jobs and tasks use.
pub(super) struct Names<'a>(pub(super) &'a [TopologyInput]);

impl Names<'_> {
    /// The hierarchy named `name`; `at` and `why` say where the name came from when it is missing.
    fn find(&self, doc: &Doc, at: &[Step], name: &str, why: &str) -> Result<&TopologyInput, ScenarioError> {
        self.0.iter().find(|t| t.name == name).ok_or_else(|| {
            let known = listing(self.0.iter().map(|t| &t.name));
            doc.error(at, format!("{why} topology {name:?}, which the scenario does not define; topologies: {known}"))
        })
    }

    /// A job's block, checked: its hierarchy exists and has the levels it names.
    pub(super) fn job(&self, doc: &Doc, j: usize, block: JobTopology) -> Result<TopologyRequestInput, ScenarioError> {
        let at = [Step::from("jobs"), j.into(), "topology".into()];
        let topology = match &block.name {
            Some(name) => self.find(doc, &under(&at, &["name"]), name, "names")?,
            None => self.find(doc, &at, DEFAULT_TOPOLOGY, "names no topology, so it uses")?,
        };
        levels(doc, &at, topology, block.required.as_deref(), block.preferred.as_deref())?;
        Ok(TopologyRequestInput {
            topology: topology.name.clone(),
            required: block.required,
            preferred: block.preferred,
        })
    }

    /// The hierarchy a task's block or slices use: its job's (already checked), else `default`.
    fn of_task(
        &self,
        doc: &Doc,
        at: &[Step],
        job: Option<&TopologyRequestInput>,
    ) -> Result<&TopologyInput, ScenarioError> {
        match job {
            Some(request) => self.find(doc, at, &request.topology, "uses"),
            None => self.find(doc, at, DEFAULT_TOPOLOGY, "its job names no topology, so it uses"),
        }
    }

    /// A task's block, checked against its job's hierarchy.
    pub(super) fn task(
        &self,
        doc: &Doc,
        at: &[Step],
        job: Option<&TopologyRequestInput>,
        block: TaskTopology,
    ) -> Result<TopologyRequestInput, ScenarioError> {
        let at = under(at, &["topology"]);
        let topology = self.of_task(doc, &at, job)?;
        levels(doc, &at, topology, block.required.as_deref(), block.preferred.as_deref())?;
        Ok(TopologyRequestInput {
            topology: topology.name.clone(),
            required: block.required,
            preferred: block.preferred,
        })
    }

    /// A task's slices, checked against its job's hierarchy.
    pub(super) fn slices(
        &self,
        doc: &Doc,
        at: &[Step],
        job: Option<&TopologyRequestInput>,
        slices: Slices,
    ) -> Result<SlicesInput, ScenarioError> {
        let at = under(at, &["slices"]);
        if slices.size == 0 {
            return Err(doc.error(&under(&at, &["size"]), "must be at least 1"));
        }
        let topology = self.of_task(doc, &at, job)?;
        level(doc, &under(&at, &["required"]), topology, &slices.required)?;
        Ok(SlicesInput { size: slices.size, required: slices.required })
    }
}

/// The index of level `name` in `topology` (the implicit `node` last), or an error at `at`
/// listing the levels it has.
fn level(doc: &Doc, at: &[Step], topology: &TopologyInput, name: &str) -> Result<usize, ScenarioError> {
    let names: Vec<&str> = topology.levels.iter().map(|l| l.name.as_str()).chain([NODE_LEVEL]).collect();
    names.iter().position(|l| *l == name).ok_or_else(|| {
        let message = format!("names no level {name:?} of topology {}; levels: {}", topology.name, names.join(", "));
        doc.error(at, message)
    })
}

/// Checks the `required` and `preferred` levels of the block at `at`. A preferred level
/// coarser than the required one is refused: it could never apply, and most likely the two
/// were swapped.
fn levels(
    doc: &Doc,
    at: &[Step],
    topology: &TopologyInput,
    required: Option<&str>,
    preferred: Option<&str>,
) -> Result<(), ScenarioError> {
    let required = required.map(|r| level(doc, &under(at, &["required"]), topology, r).map(|i| (i, r))).transpose()?;
    let Some(p) = preferred else { return Ok(()) };
    let preferred = level(doc, &under(at, &["preferred"]), topology, p)?;
    match required {
        Some((r, name)) if preferred < r => {
            let message = format!(
                "level {p} is coarser than the required level {name}; a preferred level must be the required one or finer"
            );
            Err(doc.error(&under(at, &["preferred"]), message))
        }
        _ => Ok(()),
    }
}
