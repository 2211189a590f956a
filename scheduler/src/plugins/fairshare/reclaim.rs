//! KAI's reclaim rule: which queues a reclaiming job may take from ([`reclaimable_from`],
//! judged once per sibling queue where the paths part), which units it may take (what the
//! victim could not take back within its fair share, see [`cannot_take_back`]), and the
//! non-reclaimable fence.

use super::bounds::within_deserved_with;
use super::FairShare;
use crate::ids::TiVec;
use crate::plugin::{Blocker, Plugin, Rule, Subject, Verdict, Victim, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, QueueId, ROOT};

/// [`reclaimable_from`]'s verdicts for one reclaiming job on one session state, by the
/// sibling queue where the paths part: every queue below that sibling gets the same verdict,
/// so with thousands of queues in a few levels only a few dozen are worked out.
#[derive(Default)]
pub(super) struct PartingVerdicts {
    /// The session's version and the job they are worked out for.
    key: Option<(u64, JobId)>,
    /// Counts the keys: a verdict stamped with an older round is not current.
    round: u64,
    /// Per sibling queue, its verdict and the round it was worked out in.
    by_sibling: TiVec<QueueId, (u64, Result<(), Blocker>)>,
}

/// KAI's reclaim rule, judged on the sibling queues where the reclaimer's and the victim's
/// paths part and on the state left by the units already taken: the victim side must be
/// above its deserved quota in a quota resource the reclaimer needs (a queue at or below its
/// deserved quota is never a victim), and either above its fair share in a resource the
/// reclaimer needs — meaning above the larger of fair share and deserved, as fair shares
/// shrink when quotas are over-subscribed — or the reclaimer side must stay within its own
/// deserved quota with the request. Deserved quotas are compared in the quota resources
/// only, where a queue that declares none deserves 0; `pods` never counts.
fn reclaimable_from<'s>(ssn: &Session<'s>, mine: QueueId, theirs: QueueId, need: &Res) -> Verdict<'s> {
    let snap = ssn.snap;
    let wanted = |r: usize| r != snap.pods_resource && need[r] > 0;
    if !(0..need.len()).any(|r| wanted(r) && snap.quota_resources[r]) {
        return Err(Why::new(snap, Rule::OutsideQuota, Subject::Cluster));
    }
    let alloc = &ssn.queue_alloc[theirs];
    let deserved = &snap.queues[theirs].deserved;
    let above_deserved = (0..need.len()).any(|r| wanted(r) && snap.quota_resources[r] && alloc[r] > deserved[r]);
    if !above_deserved {
        return Err(Why::new(snap, Rule::NotAboveDeserved, Subject::Queue(theirs)));
    }
    if holds_beyond_share_and_quota(ssn, theirs, &wanted) {
        return Ok(());
    }
    within_deserved_with(ssn, mine, need)
}

/// Whether the victim side `theirs` holds more than the larger of its fair share and its
/// deserved quota in a resource the reclaimer `wants`: then it may lose work to any reclaimer
/// (fair shares shrink below deserved quotas when these are over-subscribed, so fair share
/// alone is not the line here).
fn holds_beyond_share_and_quota(ssn: &Session, theirs: QueueId, wants: &dyn Fn(usize) -> bool) -> bool {
    let (alloc, fair, deserved) =
        (&ssn.queue_alloc[theirs], &ssn.fair_share[theirs], &ssn.snap.queues[theirs].deserved);
    (0..alloc.len()).any(|r| wants(r) && alloc[r] > fair[r].max(deserved[r]))
}

/// Whether the victim side `theirs`, after losing the unit `v`, could not take back even
/// the first piece of it within its fair share, in some resource the unit uses. Allocation
/// serves gang minimums, then elastic pods, within fair share before any work beyond it, so
/// a unit whose first piece fits the victim's fair share again would start again ahead of
/// the reclaimer in the next cycle, and be reclaimed again (ping-pong). An elastic unit
/// comes back as itself (so its queue must be above its fair share before losing it); a
/// whole job comes back first as its gang minimum, counted here at its smallest.
fn cannot_take_back(ssn: &Session, theirs: QueueId, v: &Victim) -> bool {
    let (alloc, fair) = (&ssn.queue_alloc[theirs], &ssn.fair_share[theirs]);
    let back = |r: usize| if v.elastic { v.freed[r] } else { smallest_gang(ssn, v.job, r) };
    (0..alloc.len()).any(|r| r != ssn.snap.pods_resource && v.freed[r] > 0 && alloc[r] - v.freed[r] + back(r) > fair[r])
}

/// The least of resource `r` that any gang minimum of `job` can ask for: every task's own
/// minimum, and the rest of `minMember` as the job's smallest pods.
fn smallest_gang(ssn: &Session, job: JobId, r: usize) -> i64 {
    let j = &ssn.snap.jobs[job];
    let by_tasks: i64 = j.tasks.iter().map(|t| i64::from(t.min_available) * t.requests[r]).sum();
    let counted: u32 = j.tasks.iter().map(|t| t.min_available).sum();
    let smallest = j.tasks.iter().map(|t| t.requests[r]).min().unwrap_or(0);
    by_tasks + i64::from(j.min_member.saturating_sub(counted)) * smallest
}

impl FairShare {
    /// Whether reclaim for `preemptor` may take the unit `v`.
    pub(super) fn may_take_in_reclaim<'s>(&self, ssn: &Session<'s>, preemptor: JobId, v: &Victim) -> Verdict<'s> {
        let snap = ssn.snap;
        let (pq, vq) = (snap.jobs[preemptor].queue, snap.jobs[v.job].queue);
        let Some((mine, theirs)) = snap.split(pq, vq) else {
            return Err(Why::new(snap, Rule::SameQueue, Subject::Queue(vq)));
        };
        self.with_need(ssn, preemptor, |need| {
            reclaimable_from(ssn, mine, theirs, &need.request)?;
            // A gang minimum that keeps its queue within its deserved quota is served first
            // next cycle (the queue order's first question); anything else takes only what
            // the victim cannot take back within its fair share.
            let on_own_quota = if need.elastic {
                Err(Why::new(snap, Rule::ElasticBeyondFairShare, Subject::Queue(theirs)))
            } else {
                within_deserved_with(ssn, mine, &need.request)
            };
            if on_own_quota.is_ok() || cannot_take_back(ssn, theirs, v) {
                Ok(())
            } else {
                on_own_quota
            }
        })?;
        let fence = snap
            .ancestry(vq)
            .take_while(|&q| q != snap.queues[theirs].parent.unwrap_or(ROOT))
            .find(|&q| !snap.queues[q].reclaimable);
        match fence {
            Some(q) if !(v.elastic && self.within_fair_share(ssn, vq).is_err()) => {
                Err(Why::new(snap, Rule::NotReclaimable, Subject::Queue(q)))
            }
            _ => Ok(()),
        }
    }

    /// Whether reclaim for `preemptor` may take from `queue` at all.
    pub(super) fn may_reclaim_from_queue<'s>(
        &self,
        ssn: &Session<'s>,
        preemptor: JobId,
        queue: QueueId,
    ) -> Verdict<'s> {
        let snap = ssn.snap;
        let Some((mine, theirs)) = snap.split(snap.jobs[preemptor].queue, queue) else {
            return Err(Why::new(snap, Rule::SameQueue, Subject::Queue(queue)));
        };
        let verdict = ssn.scratch.with(self.reclaim_from, |memo| {
            let key = Some((ssn.version, preemptor));
            if memo.key != key {
                memo.key = key;
                memo.round += 1;
                memo.by_sibling.resize(snap.queues.len(), (0, Ok(())));
            }
            let round = memo.round;
            let (at, verdict) = &mut memo.by_sibling[theirs];
            if *at != round {
                *at = round;
                *verdict = self
                    .with_need(ssn, preemptor, |need| reclaimable_from(ssn, mine, theirs, &need.request))
                    .map_err(Blocker::from);
            }
            *verdict
        });
        verdict.map_err(|b| b.why(snap))
    }
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use drover_api::{ResourceList, GPU, PODS};

    use super::*;
    use crate::config::FairShareArgs;
    use crate::session::{EvictReason, Statement};
    use crate::snapshot::{self, JobInput, JobPhase, PodPhaseInput};
    use crate::test_cluster::{job, node, queue};

    fn gpus(n: i64) -> ResourceList {
        ResourceList(BTreeMap::from([(GPU.to_string(), n), (PODS.to_string(), 110)]))
    }

    /// Department `d2` (deserved 4 GPUs) runs 6 in its leaves `b` and `c`; leaf `a` of `d1`
    /// waits for 2. Both of `d2`'s leaves are judged by `d2`, once per session state: once
    /// two of `b`'s pods are evicted, `d2` is at its deserved quota and neither may lose more.
    #[test]
    fn reclaim_from_a_sibling_is_judged_again_once_the_session_changes() {
        let queues = [
            queue("d1", None, gpus(4)),
            queue("d2", None, gpus(4)),
            queue("a", Some("d1"), gpus(4)),
            queue("b", Some("d2"), gpus(2)),
            queue("c", Some("d2"), gpus(2)),
        ];
        let bound = |name: &str, queue: &str| job(name, queue, gpus(1), vec![PodPhaseInput::Bound("n".into()); 3]);
        let waiting = JobInput {
            min_member: 2,
            phase: JobPhase::Inqueue,
            ..job("x", "a", gpus(1), vec![PodPhaseInput::Pending; 2])
        };
        let jobs = [waiting, bound("y", "b"), bound("z", "c")];
        let nodes = [node("n", gpus(6), BTreeMap::new())];
        let snap = snapshot::build_with_topologies(&nodes, &queues, &[], &jobs).expect("a valid cluster");
        let id = |name: &str| snap.queues.keys().find(|&q| snap.queues[q].name == name).expect("queue");
        let (x, y) = (JobId::from(0), JobId::from(1));
        let mut ssn = Session::open(&snap);
        let mut plugin = FairShare::new(FairShareArgs::default(), false);
        plugin.on_open(&mut ssn);
        for leaf in ["b", "c"] {
            assert!(plugin.may_reclaim_from(&ssn, x, id(leaf)).is_ok(), "{leaf}: d2 holds 6 GPUs above its 4");
        }
        let mut st = Statement::new();
        for pod in ssn.running_pods(y).take(2).collect::<Vec<_>>() {
            ssn.evict(&mut st, pod, EvictReason::Reclaim, x);
        }
        for leaf in ["b", "c"] {
            let why = plugin.may_reclaim_from(&ssn, x, id(leaf)).expect_err("d2 is at its deserved quota");
            assert_eq!((why.rule, why.subject), (Rule::NotAboveDeserved, Subject::Queue(id("d2"))), "{leaf}");
        }
    }
}
