//! A queue's state — in quota, over quota, over fair share — judged in one place: the
//! fair-share plugin ranks reclaim victims by it during the cycle, and the cycle's outcome
//! carries every queue's state at its end ([`QueueOutcome`]) for status, reports and
//! `drover explain`, so no consumer judges it again.

use crate::ids::TiVec;
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{Queue, QueueId, Snapshot};

/// The state a queue is in, from most to least deserving of more resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueState {
    /// Allocated at most its deserved quota.
    InQuota,
    /// Over quota but within fair share.
    OverQuota,
    /// Over fair share.
    OverFairShare,
}

impl QueueState {
    /// The state's name as shown in status and simulator output.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueState::InQuota => "InQuota",
            QueueState::OverQuota => "OverQuota",
            QueueState::OverFairShare => "OverFairShare",
        }
    }
}

/// One queue as a cycle left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOutcome {
    /// Its state.
    pub state: QueueState,
    /// The resource that decided its state (`None` while in quota).
    pub decided_by: Option<usize>,
    /// Fair share of the cycle.
    pub fair_share: Res,
    /// Guaranteed quota.
    pub deserved: Res,
    /// Resources of running pods of its subtree after the cycle.
    pub allocated: Res,
}

/// A queue's state in the session as it stands.
pub fn queue_state(ssn: &Session, q: QueueId) -> QueueState {
    classify(ssn.snap, &ssn.snap.queues[q], &ssn.queue_alloc[q], &ssn.fair_share[q]).0
}

/// Every queue's outcome from its allocation as the session stands and its fair share.
pub(crate) fn outcomes(ssn: &Session) -> TiVec<QueueId, QueueOutcome> {
    let snap = ssn.snap;
    let queues = snap.queues.iter().zip(ssn.running_alloc()).zip(ssn.fair_share.iter().cloned());
    queues
        .map(|((queue, allocated), fair_share)| {
            let (state, decided_by) = classify(snap, queue, &allocated, &fair_share);
            QueueOutcome { state, decided_by, fair_share, deserved: queue.deserved.clone(), allocated }
        })
        .collect()
}

/// The first resource in which a queue's allocation `alloc` is over its fair share `fair`, if
/// any: the one meaning of "over fair share", for the queue's state and for the fair-share
/// plugin's rules. The pod count is node capacity, not a share, and never counts.
pub fn over_fair_share(snap: &Snapshot, alloc: &Res, fair: &Res) -> Option<usize> {
    (0..alloc.len()).find(|&r| r != snap.pods_resource && alloc[r] > fair[r])
}

/// A queue's state and the resource that decided it: the first resource over its fair
/// share, else the first quota resource ([`Snapshot::quota_resources`]) over its deserved
/// quota (`None` while in quota). The pod count never decides.
fn classify(snap: &Snapshot, queue: &Queue, alloc: &Res, fair: &Res) -> (QueueState, Option<usize>) {
    if let Some(r) = over_fair_share(snap, alloc, fair) {
        (QueueState::OverFairShare, Some(r))
    } else if let Some(r) = (0..alloc.len()).find(|&r| snap.quota_resources[r] && alloc[r] > queue.deserved[r]) {
        (QueueState::OverQuota, Some(r))
    } else {
        (QueueState::InQuota, None)
    }
}
