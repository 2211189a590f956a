//! A new leader catches up with what the previous one wrote before it decides anything.
//!
//! A standby's stores follow the API server through watches, which lag under load (at
//! 5,000 nodes on a saturated API server, by more than a lease duration). A leader that
//! decided on such a store would see the previous leader's last bindings as pending pods and
//! their nodes as free: the API server refuses a second binding of a pod, but not a binding
//! to a node another pod already fills. So a process that has followed waits, before its
//! first cycle as leader, until its Pod and PodGroup watches have reached the revision the
//! API server is at once it holds the Lease (every write of the previous leader came before
//! that: it stops acting before its lease can expire). A watch has reached it when it showed
//! an object of that revision or later, or when it has shown nothing for [`IDLE`] (nothing
//! queued for it). Revisions compare as numbers, as etcd's are; one that does not parse
//! counts as not reached, so such a server waits for the idle rule. The wait ends after
//! [`LIMIT`] at the latest, with a warning.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drover_api::crd::podgroup::PodGroup;
use kube::api::{Api, ListParams};
use kube::Client;

/// A watch that has shown nothing for this long has nothing queued.
pub const IDLE: Duration = Duration::from_secs(1);
/// The longest a new leader waits for its watches.
pub const LIMIT: Duration = Duration::from_secs(30);

/// How far one watch has got: the highest revision of an object it showed, and when it last
/// showed anything.
#[derive(Debug)]
pub(super) struct Progress {
    since: Instant,
    revision: AtomicU64,
    /// Milliseconds after `since`.
    last_event: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress { since: Instant::now(), revision: AtomicU64::new(0), last_event: AtomicU64::new(0) }
    }
}

impl Progress {
    /// Notes an event, with the resourceVersion of its object if it has one.
    pub(super) fn saw(&self, resource_version: Option<&str>) {
        if let Some(r) = resource_version.and_then(|r| r.parse::<u64>().ok()) {
            self.revision.fetch_max(r, Ordering::Relaxed);
        }
        self.last_event.store(self.since.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Whether the watch has reached `revision` (see the module docs).
    pub(super) fn reached(&self, revision: u64) -> bool {
        let idle = self.since.elapsed().as_millis() as u64 - self.last_event.load(Ordering::Relaxed);
        self.revision.load(Ordering::Relaxed) >= revision || idle >= IDLE.as_millis() as u64
    }
}

/// The revision the API server is at now (a consistent read, one object long).
async fn current_revision(client: &Client) -> Result<u64, String> {
    let groups: Api<PodGroup> = Api::all(client.clone());
    let list = groups.list_metadata(&ListParams::default().limit(1)).await.map_err(|e| e.to_string())?;
    let revision = list.metadata.resource_version.unwrap_or_default();
    revision.parse().map_err(|_| format!("resourceVersion {revision:?} is not a number"))
}

/// Waits until every watch in `watches` has reached the API server's current revision.
pub(super) async fn catch_up(client: &Client, watches: &[&Progress]) {
    let started = Instant::now();
    let revision = match current_revision(client).await {
        Ok(r) => r,
        Err(error) => {
            tracing::warn!(%error, "could not read the API server's revision; waiting for the watches to go idle");
            u64::MAX
        }
    };
    while !watches.iter().all(|w| w.reached(revision)) {
        if started.elapsed() >= LIMIT {
            tracing::warn!(revision, "the watches did not catch up in time; scheduling on the stores as they are");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(revision, ms = started.elapsed().as_millis() as u64, "caught up with the previous leader's writes");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_has_caught_up_when_it_showed_the_revision_or_went_quiet() {
        let progress = Progress::default();
        progress.saw(Some("41"));
        assert!(!progress.reached(42), "behind, and it just showed something");
        progress.saw(Some("45"));
        assert!(progress.reached(42));
        let quiet = Progress { since: Instant::now() - IDLE * 2, ..Progress::default() };
        assert!(quiet.reached(42), "nothing shown for longer than IDLE: nothing queued");
        quiet.saw(Some("not-a-number"));
        assert!(!quiet.reached(42), "a revision that does not parse is not reached");
    }
}
