//! The queue tree: Queue objects to `QueueInput`s, leaving out queues whose parent chain is
//! broken (missing parent, cycle) together with their descendants.
//!
//! Two rules keep project work inside its project's queues, so that a project's quota and
//! limit bound it:
//!
//! - A Department's queue ([`is_department_queue`]) is never a leaf, even before any project
//!   queue is made under it. Pod groups go in project queues only.
//! - The implicit `default` queue (added when no Queue named `default` exists) refuses
//!   namespaces labelled `scheduling.drover.dev/project`: a project's work must use the project's queues. An
//!   admin's own Queue named `default` keeps the selector the admin gives it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use drover_api::crd::department::is_department_queue;
use drover_api::crd::queue::{implicit_default_selector, Queue, QueueOpenState, QueueingStrategy};
use drover_api::label_selector;
use drover_api::ResourceList;
use drover_scheduler::snapshot::{QueueBounds, QueueInput, QueueOwner};
use drover_scheduler::usage::{QueueUsage, UsageLedger};

use super::{declared_amounts, Problem, DEFAULT_QUEUE};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// What a pod group finds when it looks up its queue.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum QueueState {
    /// In the tree.
    Valid {
        /// Has no child queue and is not a Department's queue.
        leaf: bool,
        /// Is a Department's queue.
        department: bool,
        /// Closed itself or below a closed queue.
        closed: bool,
        /// The namespace selectors of the queue and its ancestors (queue name, selector):
        /// each must admit a group's namespace.
        fences: Vec<(String, LabelSelector)>,
    },
    /// Left out; the message says why.
    Invalid(String),
}

/// Time-based fair share's ledger as the queues' status keeps it. A figure that is not a
/// finite, non-negative number (only a hand edit makes one) counts as none, with a problem.
pub(super) fn usage_ledger(queues: &[Arc<Queue>], problems: &mut Vec<Problem>) -> UsageLedger {
    let mut ledger = UsageLedger::default();
    for queue in queues {
        let (Some(name), Some(usage)) = (&queue.metadata.name, queue.status.as_ref().and_then(|s| s.usage.as_ref()))
        else {
            continue;
        };
        let mut resources = BTreeMap::new();
        for (resource, &v) in &usage.resources {
            if v.is_finite() && v >= 0.0 {
                resources.insert(resource.clone(), v);
            } else {
                problems.push(Problem {
                    kind: "Queue",
                    namespace: None,
                    name: name.clone(),
                    reason: "InvalidUsage".into(),
                    message: format!("status.usage.resources[{resource}] is {v}, not a usage; counted as 0"),
                });
            }
        }
        ledger.queues.insert(name.clone(), QueueUsage { at: usage.tick.0.as_second(), resources });
    }
    ledger
}

/// The queue inputs, the state of every queue name, and problems.
pub(super) fn convert(
    queues: &[Arc<Queue>],
    problems: &mut Vec<Problem>,
) -> (Vec<QueueInput>, BTreeMap<String, QueueState>) {
    let by_name: BTreeMap<String, &Queue> =
        super::unique(queues, |q| &q.metadata).into_iter().map(|((_, name), q)| (name, q)).collect();
    let parent_of = |name: &str| -> Option<&str> {
        by_name.get(name).and_then(|q| q.spec.parent.as_deref()).filter(|p| !p.is_empty())
    };
    let problem = |name: &str, reason: &'static str, message: String| Problem {
        kind: "Queue",
        namespace: None,
        name: name.to_string(),
        reason: reason.to_string(),
        message,
    };

    let mut state: BTreeMap<String, QueueState> = BTreeMap::new();
    for name in by_name.keys() {
        // Walk up the parent chain until the root, a missing parent or a repeat.
        let mut chain: Vec<&str> = vec![name.as_str()];
        let mut seen: BTreeSet<&str> = BTreeSet::from([name.as_str()]);
        let verdict = loop {
            let cur = *chain.last().expect("chain starts non-empty");
            let Some(parent) = parent_of(cur) else { break None };
            if !by_name.contains_key(parent) {
                break Some(if cur == name {
                    problem(name, "ParentNotFound", format!("parent queue {parent:?} does not exist; queue left out"))
                } else {
                    problem(
                        name,
                        "ParentInvalid",
                        format!("ancestor queue {cur:?} has a missing parent {parent:?}; queue left out"),
                    )
                });
            }
            if !seen.insert(parent) {
                break Some(if parent == name {
                    let path = chain.join(" -> ");
                    problem(name, "QueueCycle", format!("parent chain loops back: {path} -> {name}; queue left out"))
                } else {
                    problem(
                        name,
                        "ParentInvalid",
                        format!("ancestor queue {parent:?} is part of a parent cycle; queue left out"),
                    )
                });
            }
            chain.push(parent);
        };
        match verdict {
            Some(p) => {
                state.insert(name.clone(), QueueState::Invalid(p.message.clone()));
                problems.push(p);
            }
            None => {
                let closed = chain.iter().any(|q| by_name[*q].spec.state == QueueOpenState::Closed);
                let fences = chain
                    .iter()
                    .filter_map(|q| Some((q.to_string(), by_name[*q].spec.namespace_selector.clone()?)))
                    .collect();
                if let Some(Err(e)) =
                    by_name[name.as_str()].spec.namespace_selector.as_ref().map(label_selector::validate)
                {
                    problems.push(problem(
                        name,
                        "InvalidNamespaceSelector",
                        format!("namespaceSelector: {e}; the queue admits no namespace until it is fixed"),
                    ));
                }
                let department = is_department_queue(&by_name[name.as_str()].metadata);
                state.insert(name.clone(), QueueState::Valid { leaf: !department, department, closed, fences });
            }
        }
    }
    let valid: Vec<String> =
        state.iter().filter(|(_, s)| matches!(s, QueueState::Valid { .. })).map(|(n, _)| n.clone()).collect();
    let parents: Vec<&str> = valid.iter().filter_map(|name| parent_of(name)).collect();
    for name in parents {
        if let Some(QueueState::Valid { leaf, .. }) = state.get_mut(name) {
            *leaf = false;
        }
    }

    let mut inputs = Vec::with_capacity(valid.len() + 1);
    for name in &valid {
        let q = by_name[name.as_str()];
        let mut list = |map: &BTreeMap<String, Quantity>, what: &str| {
            declared_amounts(map, what, |message| problems.push(problem(name, "InvalidQuantity", message)))
        };
        let deserved = list(&q.spec.deserved, "deserved");
        let limit = q.spec.limit.as_ref().map(|l| list(l, "limit"));
        inputs.push(QueueInput {
            name: name.clone(),
            parent: parent_of(name).map(str::to_string),
            deserved,
            limit,
            over_quota_weight: q.spec.over_quota_weight,
            reclaimable: q.spec.reclaimable,
            strategy: q.spec.queueing_strategy,
            bounds: QueueBounds {
                max_running_jobs: q.spec.run_bounds.max_running_jobs,
                max_running_pods: q.spec.run_bounds.max_running_pods,
                preempt_min_runtime: q.spec.run_bounds.preempt_min_runtime_seconds,
                reclaim_min_runtime: q.spec.run_bounds.reclaim_min_runtime_seconds,
            },
            owner: owner_of(q),
        });
    }
    if !by_name.contains_key(DEFAULT_QUEUE) {
        inputs.push(implicit_default());
        let fences = vec![(DEFAULT_QUEUE.to_string(), implicit_default_selector())];
        state.insert(
            DEFAULT_QUEUE.to_string(),
            QueueState::Valid { leaf: true, department: false, closed: false, fences },
        );
        inputs.sort_by(|a, b| a.name.cmp(&b.name));
    }
    (inputs, state)
}

/// The Project or Department a queue is made from: its controller reference, with the node
/// pool its label names (both written by the controllers; Queues are cluster-scoped, so no
/// tenant writes them).
fn owner_of(q: &Queue) -> Option<QueueOwner> {
    let controller = q.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true))?;
    let ours = controller.api_version.starts_with("scheduling.drover.dev/");
    if !ours || !matches!(controller.kind.as_str(), "Project" | "Department") {
        return None;
    }
    let pool = q.metadata.labels.as_ref()?.get(drover_api::labels::QUEUE_NODE_POOL_LABEL)?;
    Some(QueueOwner { kind: controller.kind.clone(), name: controller.name.clone(), pool: pool.clone() })
}

/// The queue added when no Queue named `default` exists.
fn implicit_default() -> QueueInput {
    QueueInput {
        name: DEFAULT_QUEUE.to_string(),
        parent: None,
        deserved: ResourceList::default(),
        limit: None,
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn queue(name: &str, status: serde_json::Value) -> Arc<Queue> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue",
                "metadata": {"name": name}, "spec": {}, "status": status
            }))
            .expect("a Queue"),
        )
    }

    #[test]
    fn the_ledger_is_read_from_status_and_figures_that_are_no_usage_count_as_none() {
        let queues = [
            queue("a", json!({"usage": {"tick": "1970-01-01T00:02:00Z", "resources": {"nvidia.com/gpu": 960.5}}})),
            queue("b", json!({"usage": {"tick": "1970-01-01T00:02:00Z", "resources": {"nvidia.com/gpu": -3.0}}})),
            queue("c", json!({})),
        ];
        let mut problems = Vec::new();
        let ledger = usage_ledger(&queues, &mut problems);
        assert_eq!(
            ledger.queues["a"],
            QueueUsage { at: 120, resources: BTreeMap::from([("nvidia.com/gpu".into(), 960.5)]) }
        );
        assert!(ledger.queues["b"].resources.is_empty());
        assert!(!ledger.queues.contains_key("c"), "no status usage: no entry (it starts from none)");
        assert_eq!(problems.len(), 1);
        assert_eq!((problems[0].name.as_str(), problems[0].reason.as_str()), ("b", "InvalidUsage"));
    }
}
