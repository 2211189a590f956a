//! `drover queue tree`: the whole queue tree with, per queue and resource, what it uses
//! (allocated), what it is guaranteed (deserved), what it may use now (fair share) and its
//! cap (limit), as the scheduler last wrote them in the Queues' status.

use std::collections::{BTreeMap, BTreeSet};

use drover_api::crd::queue::{Queue, QueueOpenState};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::connect::Failure;
use crate::output::columns;

/// The tree in display order (each queue after its parent, siblings by name).
#[derive(Serialize, Debug)]
pub struct QueueTree {
    /// Why the scheduler schedules nothing, while it does not (any Queue's `status.halted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// The queues, depth first.
    pub queues: Vec<QueueRow>,
}

/// One queue of the tree.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct QueueRow {
    /// The Queue's name.
    pub name: String,
    /// Its parent, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// 0 for a top-level queue.
    pub depth: usize,
    /// `Open` or `Closed` (the queue's own `spec.state`).
    pub state: String,
    /// `InQuota`, `OverQuota` or `OverFairShare`, as the scheduler last judged it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_state: Option<String>,
    /// Running pod groups of the queue.
    pub running: u32,
    /// Pod groups waiting to be admitted or to start.
    pub waiting: u32,
    /// Figures per resource.
    pub resources: BTreeMap<String, Figures>,
    /// Why the scheduler cannot use the queue (its `Valid=False` condition), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A queue's figures for one resource, as quantities.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// In use by running pods of the queue and its descendants.
    pub allocated: String,
    /// Guaranteed quota (0 when the queue does not name the resource).
    pub deserved: String,
    /// Deserved quota plus the queue's share of unused capacity.
    pub fair_share: String,
    /// The hard cap, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

/// Reads every Queue.
pub async fn fetch(client: &Client) -> Result<Vec<Queue>, Failure> {
    let api: Api<Queue> = Api::all(client.clone());
    api.list(&ListParams::default()).await.map(|l| l.items).map_err(|e| Failure::from_api("queues", e))
}

/// Arranges `queues` as a tree. Queues whose parent is missing, or that sit on a parent
/// cycle, are listed as top-level queues with the problem named.
pub fn build(queues: &[Queue]) -> QueueTree {
    let by_name: BTreeMap<String, &Queue> = queues.iter().map(|q| (q.name_any(), q)).collect();
    let mut children: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    for (name, q) in &by_name {
        let parent = q.spec.parent.clone().filter(|p| by_name.contains_key(p));
        children.entry(parent).or_default().push(name.clone());
    }
    let mut rows = Vec::new();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<(String, usize)> =
        children.get(&None).into_iter().flatten().rev().map(|n| (n.clone(), 0)).collect();
    let mut cycle_roots = by_name.keys().cloned();
    loop {
        let Some((name, depth)) = stack.pop() else {
            // Whatever is left is on a parent cycle: list it from its first member.
            match cycle_roots.find(|n| !seen.contains(n)) {
                Some(n) => stack.push((n, 0)),
                None => break,
            }
            continue;
        };
        if !seen.insert(name.clone()) {
            continue;
        }
        let q = by_name[&name];
        rows.push(row(q, depth, &by_name));
        for child in children.get(&Some(name.clone())).into_iter().flatten().rev() {
            stack.push((child.clone(), depth + 1));
        }
    }
    let halted = queues.iter().find_map(|q| q.status.as_ref()?.halted.clone());
    QueueTree { halted, queues: rows }
}

fn row(q: &Queue, depth: usize, by_name: &BTreeMap<String, &Queue>) -> QueueRow {
    let status = q.status.clone().unwrap_or_default();
    let limit = q.spec.limit.clone().unwrap_or_default();
    let names: BTreeSet<&String> = status
        .allocated
        .keys()
        .chain(status.deserved.keys())
        .chain(status.fair_share.keys())
        .chain(limit.keys())
        .collect();
    let text = |m: &BTreeMap<String, Quantity>, r: &str| m.get(r).map(|q| q.0.clone());
    let resources = names
        .into_iter()
        .map(|r| {
            let deserved = text(&status.deserved, r).or_else(|| text(&q.spec.deserved, r));
            let figures = Figures {
                allocated: text(&status.allocated, r).unwrap_or_else(|| "0".into()),
                deserved: deserved.unwrap_or_else(|| "0".into()),
                fair_share: text(&status.fair_share, r).unwrap_or_else(|| "0".into()),
                limit: text(&limit, r),
            };
            (r.clone(), figures)
        })
        .collect();
    let mut problem = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Valid" && c.status == "False")
        .map(|c| format!("{}: {}", c.reason, c.message));
    if let Some(parent) = q.spec.parent.as_ref().filter(|p| !by_name.contains_key(*p)) {
        problem.get_or_insert_with(|| format!("parent queue {parent:?} does not exist"));
    }
    let counts = &status.pod_groups;
    QueueRow {
        name: q.name_any(),
        parent: q.spec.parent.clone(),
        depth,
        state: match q.spec.state {
            QueueOpenState::Open => "Open",
            QueueOpenState::Closed => "Closed",
        }
        .to_string(),
        queue_state: status.queue_state.clone(),
        running: counts.running,
        waiting: counts.pending + counts.inqueue,
        resources,
        problem,
    }
}

/// The tree as a table: one line per queue and resource, names indented by depth.
pub fn table(tree: &QueueTree) -> String {
    let halted = tree.halted.as_ref().map(|why| format!("SCHEDULING HALTED: {why}\n")).unwrap_or_default();
    if tree.queues.is_empty() {
        return halted + "No queues.\n";
    }
    let mut rows = Vec::new();
    let mut notes = String::new();
    for q in &tree.queues {
        let name = format!("{}{}", "  ".repeat(q.depth), q.name);
        let head = vec![
            name,
            q.state.clone(),
            q.queue_state.clone().unwrap_or_else(|| "-".into()),
            q.running.to_string(),
            q.waiting.to_string(),
        ];
        if q.resources.is_empty() {
            rows.push(head.iter().cloned().chain(["-", "-", "-", "-", "-"].map(String::from)).collect());
        }
        for (i, (resource, f)) in q.resources.iter().enumerate() {
            let lead = if i == 0 { head.clone() } else { vec![String::new(); head.len()] };
            let figures = [
                resource.clone(),
                f.allocated.clone(),
                f.deserved.clone(),
                f.fair_share.clone(),
                f.limit.clone().unwrap_or_else(|| "-".into()),
            ];
            rows.push(lead.into_iter().chain(figures).collect());
        }
        if let Some(p) = &q.problem {
            notes.push_str(&format!("queue {}: {p}\n", q.name));
        }
    }
    let header = [
        "QUEUE",
        "STATE",
        "QUEUE STATE",
        "RUNNING",
        "WAITING",
        "RESOURCE",
        "ALLOCATED",
        "DESERVED",
        "FAIR SHARE",
        "LIMIT",
    ];
    halted + &columns(&header, &rows) + &notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_api::crd::queue::{QueueSpec, QueueStatus};

    fn queue(name: &str, parent: Option<&str>, gpus: (&str, &str, &str)) -> Queue {
        let mut q = Queue::new(name, QueueSpec { parent: parent.map(String::from), ..QueueSpec::default() });
        let list = |v: &str| BTreeMap::from([("nvidia.com/gpu".to_string(), Quantity(v.into()))]);
        q.status = Some(QueueStatus {
            allocated: list(gpus.0),
            deserved: list(gpus.1),
            fair_share: list(gpus.2),
            ..QueueStatus::default()
        });
        q
    }

    #[test]
    fn children_follow_their_parent_in_name_order_and_orphans_and_cycles_are_named() {
        let queues = vec![
            queue("vision", Some("research"), ("6", "4", "8")),
            queue("research", None, ("8", "8", "12")),
            queue("nlp", Some("research"), ("2", "4", "4")),
            queue("lost", Some("gone"), ("0", "0", "0")),
            queue("a", Some("b"), ("0", "0", "0")),
            queue("b", Some("a"), ("0", "0", "0")),
        ];
        let tree = build(&queues);
        let order: Vec<(&str, usize)> = tree.queues.iter().map(|q| (q.name.as_str(), q.depth)).collect();
        assert_eq!(order, [("lost", 0), ("research", 0), ("nlp", 1), ("vision", 1), ("a", 0), ("b", 1)]);
        assert_eq!(tree.queues[0].problem.as_deref(), Some("parent queue \"gone\" does not exist"));
        let vision = &tree.queues[3].resources["nvidia.com/gpu"];
        assert_eq!((vision.allocated.as_str(), vision.deserved.as_str(), vision.fair_share.as_str()), ("6", "4", "8"));
        let text = table(&tree);
        assert!(text.contains("  vision"), "{text}");
        assert!(text.contains("queue lost: parent queue \"gone\" does not exist"), "{text}");
        assert!(!text.contains("HALTED"), "{text}");
    }

    #[test]
    fn a_halted_scheduler_heads_the_tree() {
        let mut q = queue("research", None, ("0", "8", "8"));
        q.status.as_mut().expect("a status").halted = Some("the charge guard is missing".into());
        let tree = build(&[q]);
        assert_eq!(tree.halted.as_deref(), Some("the charge guard is missing"));
        assert!(table(&tree).starts_with("SCHEDULING HALTED: the charge guard is missing\n"), "{}", table(&tree));
    }
}
