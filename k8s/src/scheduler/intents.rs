//! Bind intents: the ones this process wrote (so that recovery knows its own, and knows
//! which the stores have not shown removed yet), and the old annotation that is never read.

use std::collections::{HashSet, VecDeque};

use drover_kubeutil::events::{self, EventType};

use super::cache::key_of;
use super::Writer;
use crate::convert::ObjectLists;

/// The PodGroup annotation where bind intents once lived. Anyone who may edit a PodGroup can
/// write it, so it is never read as an intent: a group carrying it gets a Warning Event.
pub const IGNORED_BIND_INTENT_ANNOTATION: &str = "scheduling.drover.dev/bind-intent";

/// The intents this process wrote.
#[derive(Debug, Default)]
pub(super) struct Intents {
    /// Written, but some binding failed: recover next cycle, whatever their age.
    pub(super) own_pending: HashSet<String>,
    /// Completed and removed: if the store still shows them, it is behind.
    pub(super) cleared: HashSet<String>,
    cleared_order: VecDeque<String>,
    /// Groups (uid and annotation value) already reported for the ignored annotation.
    reported: HashSet<String>,
    seq: u64,
}

const CLEARED_KEPT: usize = 10_000;

impl Intents {
    /// A new intent id, unique to this process.
    pub(super) fn new_id(&mut self) -> String {
        self.seq += 1;
        format!("{:x}-{}", jiff::Timestamp::now().as_nanosecond(), self.seq)
    }

    /// Notes that intent `id` is left with a failed binding.
    pub(super) fn pending(&mut self, id: &str) {
        self.own_pending.insert(id.to_string());
    }

    /// Notes that intent `id` was removed.
    pub(super) fn cleared(&mut self, id: Option<&str>) {
        let Some(id) = id else { return };
        self.own_pending.remove(id);
        if self.cleared.insert(id.to_string()) {
            self.cleared_order.push_back(id.to_string());
            while self.cleared_order.len() > CLEARED_KEPT {
                if let Some(old) = self.cleared_order.pop_front() {
                    self.cleared.remove(&old);
                }
            }
        }
    }
}

/// Reports, once per group and value, a group carrying [`IGNORED_BIND_INTENT_ANNOTATION`].
pub(super) async fn report_ignored_annotations(writer: &Writer<'_>, intents: &mut Intents, g: &ObjectLists) {
    for pg in &g.pod_groups {
        let Some(value) = pg.metadata.annotations.as_ref().and_then(|a| a.get(IGNORED_BIND_INTENT_ANNOTATION)) else {
            continue;
        };
        let seen = format!("{}/{value}", pg.metadata.uid.as_deref().unwrap_or_default());
        if intents.reported.len() > CLEARED_KEPT {
            intents.reported.clear();
        }
        if !intents.reported.insert(seen) {
            continue;
        }
        let (namespace, name) = key_of(&pg.metadata);
        tracing::warn!(%namespace, group = %name, "ignoring the annotation {IGNORED_BIND_INTENT_ANNOTATION}: bind intents are read only from status");
        let message = format!(
            "the annotation {IGNORED_BIND_INTENT_ANNOTATION} is ignored: only the scheduler records bindings, in status.bindIntent"
        );
        events::publish(
            writer.client,
            "drover-scheduler",
            pg.as_ref(),
            EventType::Warning,
            "BindIntentIgnored",
            &message,
        )
        .await;
    }
}
