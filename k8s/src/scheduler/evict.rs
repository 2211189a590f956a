//! The cycle's evictions, each through the Eviction API with an Event saying what it made
//! room for.

use std::collections::{BTreeMap, BTreeSet};

use drover_kubeutil::events::EventType;
use drover_scheduler::session::EvictReason;
use drover_scheduler::snapshot::{NodeId, PodId, QueueId, Snapshot};
use futures::StreamExt;

use super::api::{self, Removal};
use super::cache::Overlay;
use super::Writer;
use crate::convert::{Converted, PodRef};

fn names(list: &BTreeSet<String>) -> String {
    let mut v: Vec<&str> = list.iter().map(String::as_str).take(3).collect();
    if list.len() > 3 {
        v.push("...");
    }
    v.join(", ")
}

/// Evicts the cycle's victims through the Eviction API and records an Event on each.
/// Returns the number of pods evicted.
pub(super) async fn evict_decisions(
    writer: &Writer<'_>,
    overlay: &mut Overlay,
    snap: &Snapshot,
    converted: &Converted,
    evictions: &[(PodId, EvictReason)],
    pipelined: &[(PodId, NodeId)],
) -> usize {
    if evictions.is_empty() {
        return 0;
    }
    // The groups the evictions make room for, by queue.
    let mut waiting: BTreeMap<QueueId, BTreeSet<String>> = BTreeMap::new();
    for &(pod, _) in pipelined {
        let job = &snap.jobs[snap.pods[pod].job];
        waiting.entry(job.queue).or_default().insert(job.key());
    }
    let work: Vec<(PodRef, String, String)> = evictions
        .iter()
        .filter_map(|&(pod, reason)| {
            let r = converted.pods.get(pod)?.clone();
            let job = &snap.jobs[snap.pods[pod].job];
            let queue = &snap.queues[job.queue].name;
            Some(match reason {
                EvictReason::Preempt => {
                    let by = waiting.get(&job.queue).map(names).unwrap_or_default();
                    let by =
                        if by.is_empty() { "higher-priority work".to_string() } else { format!("pod group(s) {by}") };
                    (r, "Preempted".to_string(), format!("Preempted by {by} of higher priority in queue {queue}"))
                }
                EvictReason::Reclaim => {
                    let others: BTreeSet<String> = waiting
                        .iter()
                        .filter(|(q, _)| **q != job.queue)
                        .flat_map(|(_, groups)| groups.iter().cloned())
                        .collect();
                    let by = if others.is_empty() {
                        "another queue".to_string()
                    } else {
                        format!("pod group(s) {}", names(&others))
                    };
                    (
                        r,
                        "Reclaimed".to_string(),
                        format!("Reclaimed from queue {queue}, which runs over its deserved quota, for {by}"),
                    )
                }
                EvictReason::Consolidate => {
                    let by: BTreeSet<String> = waiting.values().flatten().cloned().collect();
                    let by = if by.is_empty() { "a waiting gang".to_string() } else { format!("pod group(s) {}", names(&by)) };
                    (
                        r,
                        "Consolidated".to_string(),
                        format!("Moved by consolidation: its replacement fits another node, and {by} fits the space it frees"),
                    )
                }
            })
        })
        .collect();
    let client = writer.client.clone();
    let component = writer.scheduler_name.to_string();
    let results: Vec<(PodRef, Result<Removal, String>)> = futures::stream::iter(work)
        .map(move |(pod, reason, message)| {
            let client = client.clone();
            let component = component.clone();
            async move {
                let r = api::evict(&client, &pod).await;
                if r == Ok(Removal::Done) {
                    api::pod_event(&client, &component, &pod, EventType::Normal, &reason, &message).await;
                }
                (pod, r)
            }
        })
        .buffer_unordered(writer.concurrency)
        .collect()
        .await;
    let mut evicted = 0;
    for (pod, r) in results {
        match r {
            Ok(Removal::Done) => {
                overlay.pod_deleting(&pod);
                evicted += 1;
            }
            Ok(Removal::Gone) => overlay.pod_deleted(&pod),
            Err(e) => tracing::warn!(error = %e, "eviction failed; retrying next cycle"),
        }
    }
    evicted
}
