//! The cycle's evictions, each through the Eviction API with an Event saying what it made
//! room for.

use drover_kubeutil::events::EventType;
use drover_scheduler::session::EvictReason;
use drover_scheduler::snapshot::{Job, JobId, PodId, Snapshot};
use futures::StreamExt;

use super::api::{self, Removal};
use super::cache::Overlay;
use super::Writer;
use crate::convert::{Converted, PodRef};

/// Evicts the cycle's victims through the Eviction API and records an Event on each, naming
/// the pod group the core evicted it for and how the two relate. Returns the number of pods
/// evicted.
pub(super) async fn evict_decisions(
    writer: &Writer<'_>,
    overlay: &mut Overlay,
    snap: &Snapshot,
    converted: &Converted,
    evictions: &[(PodId, EvictReason, JobId)],
) -> usize {
    if evictions.is_empty() {
        return 0;
    }
    let work: Vec<(PodRef, String, String)> = evictions
        .iter()
        .filter_map(|&(pod, reason, for_job)| {
            let r = converted.pods.get(pod)?.clone();
            let (victim, by) = (&snap.jobs[snap.pods[pod].job], &snap.jobs[for_job]);
            let queue = &snap.queues[victim.queue].name;
            let (kind, message) = match reason {
                EvictReason::Preempt => (
                    "Preempted",
                    format!("Preempted in queue {queue} by pod group {} {}", by.key(), relation(by, victim)),
                ),
                EvictReason::Reclaim => (
                    "Reclaimed",
                    format!(
                        "Reclaimed from queue {queue}, which runs over its deserved quota, for pod group {} of queue {}",
                        by.key(),
                        snap.queues[by.queue].name
                    ),
                ),
                EvictReason::Consolidate => (
                    "Consolidated",
                    format!(
                        "Moved by consolidation: its replacement fits another node, and pod group {} fits the space it frees",
                        by.key()
                    ),
                ),
                EvictReason::Overrun => (
                    "Overran",
                    format!(
                        "Ran past the learned run time it was admitted on into capacity reserved for pod group {}, which is due",
                        by.key()
                    ),
                ),
            };
            Some((r, kind.to_string(), message))
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

/// How a preemptor's priority stands to its victim's, as the event states it: preemption
/// takes whole jobs only of lower priority, and elastic pods (those above their job's gang
/// minimum) also of equal priority, for a group below its minimum.
fn relation(preemptor: &Job, victim: &Job) -> String {
    let (p, v) = (preemptor.priority, victim.priority);
    match p.cmp(&v) {
        std::cmp::Ordering::Greater => format!("of higher priority ({p} > {v})"),
        std::cmp::Ordering::Equal => format!("of equal priority ({p}): elastic pods yield to gang minimums"),
        std::cmp::Ordering::Less => format!("of priority {p}, below this pod's {v}"),
    }
}
