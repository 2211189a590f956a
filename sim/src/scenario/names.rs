//! The names a scenario's references may use (its nodes, its leaf queues), gathered once and
//! checked with an error that lists what exists: read by the model's and the expectations'
//! validation alike.

use std::collections::{HashMap, HashSet};

use drover_scheduler::snapshot::QueueInput;

use super::de::Step;
use super::locate::{listing, steps, Doc};
use super::{Scenario, ScenarioError};

/// The scenario's node names, looked up once per running pod (a large cluster lists tens of
/// thousands of them).
pub(super) struct NodeNames<'s>(HashSet<&'s str>);

impl<'s> NodeNames<'s> {
    pub(super) fn of(s: &'s Scenario) -> NodeNames<'s> {
        NodeNames(s.nodes.iter().map(|n| n.name.as_str()).collect())
    }

    /// Checks that `node` names one of the scenario's nodes.
    pub(super) fn check(&self, doc: &Doc, at: &[Step], s: &Scenario, node: &str) -> Result<(), ScenarioError> {
        if self.0.contains(node) {
            return Ok(());
        }
        Err(doc.error(at, format!("names no node {node:?}; nodes: {}", listing(s.nodes.iter().map(|n| &n.name)))))
    }
}

/// The scenario's queue names, each with whether it has child queues, looked up once per job
/// (a large scenario has thousands of queues and tens of thousands of jobs).
pub(super) struct QueueNames<'s>(HashMap<&'s str, bool>);

impl<'s> QueueNames<'s> {
    pub(super) fn of(queues: &'s [QueueInput]) -> QueueNames<'s> {
        let mut names: HashMap<&str, bool> = queues.iter().map(|q| (q.name.as_str(), false)).collect();
        for parent in queues.iter().filter_map(|q| q.parent.as_deref()) {
            if let Some(has_children) = names.get_mut(parent) {
                *has_children = true;
            }
        }
        QueueNames(names)
    }

    /// Checks that the queue of job `j` is one of the scenario's, and a leaf: jobs go to leaf
    /// queues only.
    pub(super) fn check(&self, doc: &Doc, j: usize, s: &Scenario, queue: &str) -> Result<(), ScenarioError> {
        let message = match self.0.get(queue) {
            Some(false) => return Ok(()),
            None => format!("names no queue {queue:?}; queues: {}", listing(s.queues.iter().map(|q| q.name.as_str()))),
            Some(true) => {
                let children = s.queues.iter().filter(|q| q.parent.as_deref() == Some(queue)).map(|q| q.name.as_str());
                format!("queue {queue} has child queues ({}); jobs must be in leaf queues", listing(children))
            }
        };
        Err(doc.error(steps!["jobs", j, "queue"], message))
    }
}
