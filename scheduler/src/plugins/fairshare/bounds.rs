//! The bounds an allocation keeps: every queue on its path within its limit, non-preemptible
//! work within deserved quota, and (in the fair pass) within fair share.

use super::FairShare;
use crate::ids::TiSlice;
use crate::plugin::{Rule, ShareBound, Subject, Verdict, Why};
use crate::res::{Res, UNLIMITED};
use crate::session::Session;
use crate::snapshot::{JobId, QueueId};

/// The first resource where `have + req` exceeds a finite `cap`: (resource, would be, cap).
pub(super) fn exceeding(req: &Res, have: &Res, cap: &Res) -> Option<(usize, i64, i64)> {
    (0..req.len())
        .find(|&r| req[r] > 0 && cap[r] != UNLIMITED && have[r].saturating_add(req[r]) > cap[r])
        .map(|r| (r, have[r] + req[r], cap[r]))
}

/// Whether queue `q` stays within its deserved quota in every quota resource
/// ([`Snapshot::quota_resources`]) with `req` added: KAI's question both in the queue order
/// and, for the reclaimer, in reclaim. One measure for both keeps a queue that reclaimed
/// on the strength of its deserved quota first in line for what it freed.
pub(super) fn within_deserved_with<'s>(ssn: &Session<'s>, q: QueueId, req: &Res) -> Verdict<'s> {
    let (deserved, alloc) = (&ssn.snap.queues[q].deserved, &ssn.queue_alloc[q]);
    match (0..req.len()).find(|&r| ssn.snap.quota_resources[r] && alloc[r] + req[r] > deserved[r]) {
        Some(r) => {
            Err(Why::exceeding(ssn.snap, Rule::OverDeserved, Subject::Queue(q), (r, alloc[r] + req[r], deserved[r])))
        }
        None => Ok(()),
    }
}

/// Whether queue `q` stays within its fair share with `req` added; a refusal by a share
/// lowered to the capacity the queue's waiting work can use (`full`: the share before) says so.
pub(super) fn within_fair_share_with<'s>(
    ssn: &Session<'s>,
    full: &TiSlice<QueueId, Res>,
    q: QueueId,
    req: &Res,
) -> Verdict<'s> {
    match exceeding(req, &ssn.queue_alloc[q], &ssn.fair_share[q]) {
        Some(e) => {
            let lowered = full.get(q).is_some_and(|f| f[e.0] > ssn.fair_share[q][e.0]);
            let rule = if lowered { Rule::UsableShare } else { Rule::FairShare };
            Err(Why::exceeding(ssn.snap, rule, Subject::Queue(q), e))
        }
        None => Ok(()),
    }
}

impl FairShare {
    /// Whether `req` for `job` keeps every queue on its path within these bounds.
    pub(super) fn within_bounds<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res, bound: ShareBound) -> Verdict<'s> {
        let snap = ssn.snap;
        let j = &snap.jobs[job];
        for q in snap.ancestry(j.queue) {
            if let Some(e) = exceeding(req, &ssn.queue_alloc[q], &snap.queues[q].limit) {
                return Err(Why::exceeding(snap, Rule::Limit, Subject::Queue(q), e));
            }
            if !j.preemptible {
                let (alloc, deserved) = (&ssn.queue_alloc_np[q], &snap.queues[q].deserved);
                let covered = |r: usize| snap.queues[q].quota_covers(r) && req[r] > 0;
                if let Some(r) = (0..req.len()).find(|&r| covered(r) && alloc[r] + req[r] > deserved[r]) {
                    let e = (r, alloc[r] + req[r], deserved[r]);
                    return Err(Why::exceeding(snap, Rule::NonPreemptibleDeserved, Subject::Queue(q), e));
                }
            }
            if bound == ShareBound::FairShare {
                within_fair_share_with(ssn, &self.full_share, q, req)?;
            }
        }
        Ok(())
    }
}
