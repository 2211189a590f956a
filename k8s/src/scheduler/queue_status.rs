//! Queue status: the scheduler's fields (`allocated`, `deserved`, `fairShare`, `queueState`,
//! their `summary` and, with time-based fair share, `usage`), written with merge patches on
//! `/status` only where they differ from what the Queue already has.

use std::collections::{BTreeMap, HashMap};

use drover_api::crd::queue::{summary as queue_summary, Queue, QueueUsage as QueueUsageStatus};
use drover_scheduler::cycle::CycleOutcome;
use drover_scheduler::res::Res;
use drover_scheduler::snapshot::{QueueId, Snapshot};
use drover_scheduler::usage::{QueueUsage, UsageLedger};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Map, Value};

use super::Writer;
use crate::convert::ObjectLists;

/// A queue's figures as the status shows them: `pods` only where the queue declares it.
fn queue_lists(snap: &Snapshot, outcome: &CycleOutcome, q: QueueId) -> [BTreeMap<String, i64>; 3] {
    let queue = &snap.queues[q];
    let shown = |r: usize| r != snap.pods_resource || queue.deserved_declared[r];
    let list = |res: &Res| -> BTreeMap<String, i64> {
        snap.to_list(res)
            .0
            .into_iter()
            .filter(|(name, _)| name != &snap.resources[snap.pods_resource] || shown(snap.pods_resource))
            .collect()
    };
    let allocated = list(&outcome.queues[q].allocated);
    let fair_share = list(&outcome.queues[q].fair_share);
    let deserved = (0..snap.resources.len())
        .filter(|&r| queue.deserved_declared[r])
        .map(|r| (snap.resources[r].clone(), queue.deserved[r]))
        .collect();
    [allocated, deserved, fair_share]
}

/// The merge-patch value turning `current` into `want`: changed entries, and `null` for
/// entries that are gone. `None` when nothing changes.
fn map_patch(current: &BTreeMap<String, Quantity>, want: &BTreeMap<String, String>) -> Option<Value> {
    let mut m = Map::new();
    for (k, v) in want {
        if current.get(k).map(|q| &q.0) != Some(v) {
            m.insert(k.clone(), Value::String(v.clone()));
        }
    }
    for k in current.keys() {
        if !want.contains_key(k) {
            m.insert(k.clone(), Value::Null);
        }
    }
    (!m.is_empty()).then_some(Value::Object(m))
}

/// The merge-patch value turning the status's `usage` into the ledger's entry for the
/// queue; `None` when they agree (or the queue has no entry).
fn usage_patch(current: Option<&QueueUsageStatus>, want: Option<&QueueUsage>) -> Option<Value> {
    let want = want?;
    let unchanged = current.is_some_and(|c| c.tick.0.as_second() == want.at && c.resources == want.resources);
    if unchanged {
        return None;
    }
    let mut resources: Map<String, Value> = want.resources.iter().map(|(k, &v)| (k.clone(), json!(v))).collect();
    for k in current.iter().flat_map(|c| c.resources.keys()) {
        resources.entry(k.clone()).or_insert(Value::Null);
    }
    let tick = jiff::Timestamp::from_second(want.at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    Some(json!({ "tick": Time(tick), "resources": resources }))
}

/// Writes the scheduler's fields of every Queue status that changed (`allocated`,
/// `deserved`, `fairShare`, `queueState`, their `summary` for people and, with time-based
/// fair share, `usage` from `ledger`). Returns the number that had changed, written or not.
pub(super) async fn write_queues(
    writer: &Writer<'_>,
    g: &ObjectLists,
    snap: &Snapshot,
    outcome: &CycleOutcome,
    ledger: Option<&UsageLedger>,
) -> usize {
    let ids: HashMap<&str, QueueId> =
        snap.queues.iter_enumerated().skip(1).map(|(i, q)| (q.name.as_str(), i)).collect();
    let api: Api<Queue> = Api::all(writer.client.clone());
    let mut wanted = 0;
    for queue in &g.queues {
        let Some(name) = queue.metadata.name.as_deref() else { continue };
        let Some(&q) = ids.get(name) else { continue };
        let current = queue.status.clone().unwrap_or_default();
        let text = |m: BTreeMap<String, i64>| -> BTreeMap<String, String> {
            m.into_iter()
                .map(|(k, v)| {
                    let s = drover_api::format_amount(&k, v);
                    (k, s)
                })
                .collect()
        };
        let lists = queue_lists(snap, outcome, q);
        let summary = queue_summary(&lists[0], &lists[1], &snap.to_list(&snap.queues[q].limit).0);
        let [allocated, deserved, fair_share] = lists.map(text);
        let state = outcome.queues[q].state.as_str();
        let mut status = Map::new();
        for (field, cur, want) in [
            ("allocated", &current.allocated, &allocated),
            ("deserved", &current.deserved, &deserved),
            ("fairShare", &current.fair_share, &fair_share),
        ] {
            if let Some(v) = map_patch(cur, want) {
                status.insert(field.into(), v);
            }
        }
        if current.queue_state.as_deref() != Some(state) {
            status.insert("queueState".into(), Value::String(state.into()));
        }
        if current.summary.as_deref() != Some(summary.as_str()) {
            status.insert("summary".into(), Value::String(summary));
        }
        if let Some(usage) = usage_patch(current.usage.as_ref(), ledger.and_then(|l| l.queues.get(name))) {
            status.insert("usage".into(), usage);
        }
        if current.halted.is_some() {
            // Scheduling again (`halted.rs`).
            status.insert("halted".into(), Value::Null);
        }
        if status.is_empty() {
            continue;
        }
        let patch = json!({ "status": status });
        wanted += 1;
        if let Err(e) = api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(queue = name, error = %e, "queue status not written; retrying next cycle");
        }
    }
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usage_patch_writes_a_moved_entry_whole_and_clears_resources_gone() {
        let entry = QueueUsage { at: 120, resources: BTreeMap::from([("nvidia.com/gpu".into(), 960.5)]) };
        let written: QueueUsageStatus = serde_json::from_value(json!({
            "tick": "1970-01-01T00:02:00Z", "resources": {"nvidia.com/gpu": 960.5}
        }))
        .expect("a usage status");
        assert_eq!(usage_patch(Some(&written), Some(&entry)), None, "the same tick and figures: nothing to write");
        assert_eq!(usage_patch(Some(&written), None), None, "no ledger: the status is left alone");
        let stale: QueueUsageStatus = serde_json::from_value(json!({
            "tick": "1970-01-01T00:01:00Z", "resources": {"nvidia.com/gpu": 480.0, "cpu": 1000.0}
        }))
        .expect("a usage status");
        let patch = usage_patch(Some(&stale), Some(&entry)).expect("a moved entry is written");
        assert_eq!(patch, json!({"tick": "1970-01-01T00:02:00Z", "resources": {"nvidia.com/gpu": 960.5, "cpu": null}}));
        let first = usage_patch(None, Some(&entry)).expect("a first entry is written");
        assert_eq!(first["resources"], json!({"nvidia.com/gpu": 960.5}));
    }
}
