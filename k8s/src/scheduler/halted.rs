//! While the leader schedules nothing (the charge guard missing or weakened, a snapshot it
//! cannot build), it says so where users look, instead of only in its log:
//!
//! - every pending pod of the scheduler gets `PodScheduled=False` with the reason
//!   [`SCHEDULING_HALTED`] and why as its message (not `Unschedulable`: nodes added would not
//!   help, so autoscalers leave it alone), and one `FailedScheduling` Warning Event
//!   ([`PODS_PER_ROUND`] pods a round at most);
//! - every Queue's `status.halted` says why (the `Halted` column of `kubectl get dq -o wide`
//!   and `drover queue tree` show it).
//!
//! When cycles run again, the Queues lose `halted` (`queue_status.rs`), and the pods that no
//! cycle marked or bound since are marked [`SCHEDULING_RESUMED`] once ([`Halted::resumed`]).

use std::time::Instant;

use drover_api::crd::queue::Queue;
use drover_kubeutil::events::EventType;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::api;
use super::cache::{Cache, Overlay};
use super::pace::EventMemory;
use super::waiting::{FAILED_SCHEDULING, POD_SCHEDULED};
use crate::convert::{ObjectLists, PodRef};

/// The reason of a pod's `PodScheduled=False` while the scheduler schedules nothing.
pub const SCHEDULING_HALTED: &str = "SchedulingHalted";
/// The reason it gets when scheduling resumed and no cycle has said more since.
pub const SCHEDULING_RESUMED: &str = "SchedulingResumed";
/// Pods marked a round at most.
pub const PODS_PER_ROUND: usize = 256;

/// What the halt has told so far.
#[derive(Debug, Default)]
pub(super) struct Halted {
    /// Whether the last round was halted (the first cycle after it sweeps).
    halted: bool,
    events: EventMemory,
}

/// What a round writes on pending pods: `reason` and `message` on every one that does not
/// show them yet, with an Event the pod was not given (`every_pod`), or only on those showing
/// [`SCHEDULING_HALTED`], without one.
struct Mark<'a> {
    reason: &'a str,
    message: &'a str,
    every_pod: bool,
}

/// A pending pod of `scheduler`: no node, not being deleted, not finished.
fn pending_of(pod: &Pod, scheduler: &str) -> bool {
    let spec = pod.spec.as_ref();
    let ours = spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler);
    let unbound = spec.and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    ours && unbound && phase == "Pending" && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's `PodScheduled` condition.
fn scheduled_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == POD_SCHEDULED)
}

impl Halted {
    /// One round of saying that nothing is scheduled and `why`: pods and Queues.
    pub(super) async fn report(
        &mut self,
        client: &Client,
        scheduler: &str,
        cache: &Cache,
        overlay: &mut Overlay,
        why: &str,
    ) {
        self.halted = true;
        let message = format!("{scheduler} schedules nothing: {why}");
        let g = cache.gather(overlay);
        let what = Mark { reason: SCHEDULING_HALTED, message: &message, every_pod: true };
        self.mark(client, scheduler, &g, overlay, what).await;
        let queues: Api<Queue> = Api::all(client.clone());
        for queue in &g.queues {
            let Some(name) = queue.metadata.name.as_deref() else { continue };
            if queue.status.as_ref().and_then(|s| s.halted.as_deref()) == Some(why) {
                continue;
            }
            let patch = json!({"status": {"halted": why}});
            if let Err(e) = queues.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                tracing::debug!(queue = name, error = %e, "queue status not written; retrying next round");
            }
        }
    }

    /// After a cycle that followed a halt: the pods still showing [`SCHEDULING_HALTED`]
    /// (no cycle marked or bound them since) are told that scheduling resumed.
    pub(super) async fn resumed(&mut self, client: &Client, scheduler: &str, cache: &Cache, overlay: &mut Overlay) {
        if !std::mem::take(&mut self.halted) {
            return;
        }
        let message = format!("{scheduler} schedules again; this pod's group has not been placed yet");
        let g = cache.gather(overlay);
        let what = Mark { reason: SCHEDULING_RESUMED, message: &message, every_pod: false };
        self.mark(client, scheduler, &g, overlay, what).await;
    }

    /// Writes `what` on pending pods (see [`Mark`]).
    async fn mark(&mut self, client: &Client, scheduler: &str, g: &ObjectLists, overlay: &mut Overlay, what: Mark<'_>) {
        let Mark { reason, message, every_pod: all } = what;
        let now = Instant::now();
        self.events.forget_expired(now);
        let stamp = Time(jiff::Timestamp::now());
        let work: Vec<(PodRef, PodCondition, bool)> = g
            .pods
            .iter()
            .filter(|p| pending_of(p, scheduler))
            .filter(|p| {
                let current = scheduled_condition(p);
                let shows = current.and_then(|c| c.reason.as_deref());
                let due = if all {
                    shows != Some(reason) || current.and_then(|c| c.message.as_deref()) != Some(message)
                } else {
                    shows == Some(SCHEDULING_HALTED)
                };
                due
            })
            .take(PODS_PER_ROUND)
            .map(|p| {
                let pod = PodRef::of(p);
                let key = (pod.namespace.clone(), pod.name.clone());
                let event = all && self.events.is_new("Pod", &key, FAILED_SCHEDULING, message, now);
                let condition = PodCondition {
                    type_: POD_SCHEDULED.to_string(),
                    status: "False".to_string(),
                    reason: Some(reason.to_string()),
                    message: Some(message.to_string()),
                    last_transition_time: Some(stamp.clone()),
                    ..PodCondition::default()
                };
                (pod, condition, event)
            })
            .collect();
        let results: Vec<_> = futures::stream::iter(work)
            .map(|(pod, condition, event)| async move {
                let result = api::set_pod_condition(client, &pod, &condition).await;
                if result.is_ok() && event {
                    api::pod_event(client, scheduler, &pod, EventType::Warning, FAILED_SCHEDULING, message).await;
                }
                (pod, condition, event, result)
            })
            .buffer_unordered(32)
            .collect()
            .await;
        for (pod, condition, event, result) in results {
            match result {
                Ok(()) => {
                    if event {
                        let key = (pod.namespace.clone(), pod.name.clone());
                        self.events.emitted("Pod", &key, FAILED_SCHEDULING, message, now);
                    }
                    overlay.pod_condition(&pod, condition);
                }
                Err(e) => tracing::debug!(error = %e, "pod condition not written; retrying next round"),
            }
        }
    }
}
