//! `drover queue open|close NAME`: whether a queue accepts new pod groups. A closed queue
//! keeps running what it has; its waiting groups stay waiting until it opens again.

use drover_api::crd::queue::{Queue, QueueOpenState};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde::Serialize;
use serde_json::json;

use crate::connect::Failure;

/// Writes that lose a race with another writer are retried this many times.
const ATTEMPTS: usize = 5;

/// What `open`/`close` did.
#[derive(Serialize, Debug)]
pub struct StateChange {
    /// The queue.
    pub queue: String,
    /// Its state now: `Open` or `Closed`.
    pub state: String,
    /// False when the queue already was in that state.
    pub changed: bool,
}

/// Sets the queue's `spec.state`, guarded by its resourceVersion so that a concurrent edit
/// is never overwritten with stale fields (the patch touches `spec.state` only).
pub async fn set(client: &Client, name: &str, state: QueueOpenState) -> Result<StateChange, Failure> {
    let api: Api<Queue> = Api::all(client.clone());
    let object = format!("queue {name:?}");
    let label = match state {
        QueueOpenState::Open => "Open",
        QueueOpenState::Closed => "Closed",
    };
    for _ in 0..ATTEMPTS {
        let live = api.get(name).await.map_err(|e| Failure::from_api(&object, e))?;
        if live.spec.state == state {
            return Ok(StateChange { queue: name.to_string(), state: label.to_string(), changed: false });
        }
        let patch = json!({
            "metadata": {"resourceVersion": live.metadata.resource_version},
            "spec": {"state": label},
        });
        let params = PatchParams { field_manager: Some("drover-cli".into()), ..PatchParams::default() };
        match api.patch(name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(StateChange { queue: name.to_string(), state: label.to_string(), changed: true }),
            Err(kube::Error::Api(status)) if status.is_conflict() => continue,
            Err(e) => return Err(Failure::from_api(&object, e)),
        }
    }
    Err(Failure::Cluster(format!("{object}: changed by others {ATTEMPTS} times while being set to {label}; try again")))
}

/// The result for people.
pub fn table(change: &StateChange) -> String {
    let what = match (change.state.as_str(), change.changed) {
        ("Open", true) => "opened: it accepts new pod groups again",
        ("Open", false) => "is already open",
        (_, true) => "closed: it accepts no new pod groups; running work continues",
        (_, false) => "is already closed",
    };
    format!("queue {} {what}\n", change.queue)
}
