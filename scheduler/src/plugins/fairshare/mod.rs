//! Hierarchical fair share: per queue, deserved quota, hard limit, over-quota weight and
//! reclaimable flag, in named parts:
//! - [`shares`]: every queue's demand and fair share, each cycle;
//! - [`usable`]: a leaf's share lowered to the capacity its waiting gangs can use;
//! - [`queue_order`]: sibling queues most deprived first;
//! - [`bounds`]: allocations within limits, non-preemptible work within deserved quota and,
//!   in the fair pass, within fair share;
//! - [`admission`]: pod groups admitted only when their queues can hold their minimum;
//! - [`reclaim`]: which reclaim victims may be taken (KAI's rule): from queues over fair
//!   share first, never from a queue at or below its deserved quota, never from
//!   non-reclaimable queues (except their elastic pods while they are overused).
//!
//! "Over fair share" has one meaning, [`crate::queue_state::over_fair_share`]. The pod count
//! is node capacity, not quota: it has no fair-share bound here.

mod admission;
mod bounds;
mod need;
mod queue_order;
mod reclaim;
mod shares;
mod usable;
mod words;

use std::cmp::Ordering;

use crate::config::FairShareArgs;
use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::plugin::{EvictMode, Plugin, Rule, ShareBound, Subject, Verdict, Victim, Why};
use crate::queue_state::{over_fair_share, queue_state};
use crate::res::Res;
use crate::session::{Session, Slot};
use crate::snapshot::{JobId, QueueId};
use admission::add_elastic_running;
use bounds::{within_deserved_with, within_fair_share_with};
use need::Needs;
use reclaim::PartingVerdicts;
use shares::{compute_shares, past_usage};
use usable::count_only_usable_capacity;
pub(crate) use words::{advice, words};

/// The fair-share plugin.
pub struct FairShare {
    args: FairShareArgs,
    defer_queue_order: bool,
    /// With time-based fair share, per queue, the largest part of the cluster it used lately
    /// in any resource: of two queues equally served, the one that used less goes first.
    past: TiVec<QueueId, f64>,
    jobs_by_queue: TiVec<QueueId, Vec<JobId>>,
    /// Per queue, the running elastic pods (above their job's minimum) of its whole subtree,
    /// at the start of the cycle: free capacity for admission (Volcano's elastic rule).
    elastic_subtree: TiVec<QueueId, Res>,
    /// Per job, its last worked-out request, keyed by its running and pipelined pod counts
    /// (fixed while these are): reclaim asks about many victims for one reclaimer in a row,
    /// and the queue order asks about every queue's next job.
    needs: Slot<Needs>,
    /// Per queue (any level), the jobs of its subtree that had pending pods when the cycle
    /// opened, highest priority first, then oldest: the first one still waiting is the
    /// queue's next job.
    waiting: TiVec<QueueId, Vec<JobId>>,
    /// Per queue, how many of its first `waiting` jobs are known to have no pod left to place
    /// this cycle (placed or pipelined).
    placed: Slot<TiVec<QueueId, usize>>,
    /// Per queue, its fair share before [`count_only_usable_capacity`] lowered it: a refusal
    /// by a lowered share says so.
    full_share: TiVec<QueueId, Res>,
    /// Reclaim asks about every queue for one job in a row; see [`PartingVerdicts`].
    reclaim_from: Slot<PartingVerdicts>,
}

impl FairShare {
    /// A plugin dividing spare capacity as `args` say; `defer_queue_order` lets DRF order
    /// queues.
    pub fn new(args: FairShareArgs, defer_queue_order: bool) -> FairShare {
        FairShare {
            args,
            defer_queue_order,
            past: TiVec::new(),
            jobs_by_queue: TiVec::new(),
            elastic_subtree: TiVec::new(),
            needs: Slot::default(),
            waiting: TiVec::new(),
            placed: Slot::default(),
            full_share: TiVec::new(),
            reclaim_from: Slot::default(),
        }
    }
}

impl Plugin for FairShare {
    fn name(&self) -> &'static str {
        "fairshare"
    }

    fn hooks(&self) -> Vec<crate::plugin::Hook> {
        use crate::plugin::Hook::*;
        vec![
            QueueOrder,
            Allocatable,
            Enqueueable,
            WithinFairShare,
            MayReclaim,
            WithinDeserved,
            MayEvict,
            MayReclaimFrom,
        ]
    }

    fn on_open(&mut self, ssn: &mut Session) {
        let mut by_queue = ti_vec![Vec::new(); ssn.snap.queues.len()];
        for (j, job) in ssn.snap.jobs.iter_enumerated() {
            by_queue[job.queue].push(j);
        }
        let snap = ssn.snap;
        let past = past_usage(snap, self.args.time_based);
        compute_shares(ssn, &by_queue, &self.args, past.as_deref());
        self.full_share = count_only_usable_capacity(ssn, &by_queue);
        self.past = match past {
            Some(parts) => parts
                .iter()
                .map(|u| (0..u.len()).filter(|&r| r != snap.pods_resource).map(|r| u[r]).fold(0.0, f64::max))
                .collect(),
            None => TiVec::new(),
        };
        let mut elastic = ti_vec![Res::zero(snap.resources.len()); snap.queues.len()];
        for (q, jobs) in by_queue.iter_enumerated() {
            let mut sum = Res::zero(snap.resources.len());
            for &j in jobs {
                add_elastic_running(ssn, j, &mut sum);
            }
            for a in snap.ancestry(q) {
                elastic[a].add(&sum);
            }
        }
        self.elastic_subtree = elastic;
        let mut waiting = ti_vec![Vec::new(); snap.queues.len()];
        for (q, jobs) in by_queue.iter_enumerated() {
            for &j in jobs.iter().filter(|&&j| ssn.pending_pods(j).next().is_some()) {
                for a in snap.ancestry(q) {
                    waiting[a].push(j);
                }
            }
        }
        for list in &mut waiting {
            list.sort_by(|&a, &b| {
                let (ja, jb) = (&snap.jobs[a], &snap.jobs[b]);
                jb.priority.cmp(&ja.priority).then(ja.created_at.cmp(&jb.created_at)).then(a.cmp(&b))
            });
        }
        self.placed = ssn.scratch.slot(ti_vec![0; waiting.len()]);
        self.waiting = waiting;
        self.needs = ssn.scratch.slot(ti_vec![None; snap.jobs.len()]);
        self.reclaim_from = ssn.scratch.slot(PartingVerdicts::default());
        self.jobs_by_queue = by_queue;
    }

    fn queue_order(&self, ssn: &Session, a: QueueId, b: QueueId) -> Ordering {
        self.order_queues(ssn, a, b)
    }

    fn allocatable<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res, bound: ShareBound) -> Verdict<'s> {
        self.within_bounds(ssn, job, req, bound)
    }

    fn enqueueable<'s>(&self, ssn: &Session<'s>, job: JobId, reserved: Option<&TiSlice<QueueId, Res>>) -> Verdict<'s> {
        self.admit(ssn, job, reserved)
    }

    fn within_fair_share<'s>(&self, ssn: &Session<'s>, queue: QueueId) -> Verdict<'s> {
        let (alloc, fair) = (&ssn.queue_alloc[queue], &ssn.fair_share[queue]);
        match over_fair_share(ssn.snap, alloc, fair) {
            Some(r) => {
                Err(Why::exceeding(ssn.snap, Rule::OverFairShare, Subject::Queue(queue), (r, alloc[r], fair[r])))
            }
            None => Ok(()),
        }
    }

    /// A queue over its fair share in any resource reclaims nothing: it sits out allocation's
    /// fair-share passes, so what it reclaimed would go to whichever queue uses idle capacity
    /// first, the victim's maybe, and be reclaimed again next cycle (Volcano's reclaim skips
    /// such queues too). Nor may the job's own queue go over its fair share with `req` (its
    /// ancestors are checked once victims are chosen: their allocation then drops by what is
    /// reclaimed below them).
    fn may_reclaim<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res) -> Verdict<'s> {
        let q = ssn.snap.jobs[job].queue;
        self.within_fair_share(ssn, q)?;
        within_fair_share_with(ssn, &self.full_share, q, req)
    }

    fn within_deserved<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res) -> Verdict<'s> {
        within_deserved_with(ssn, ssn.snap.jobs[job].queue, req)
    }

    fn may_evict<'s>(&self, ssn: &Session<'s>, mode: EvictMode, preemptor: JobId, v: &Victim) -> Verdict<'s> {
        match mode {
            EvictMode::Preempt => Ok(()),
            EvictMode::Reclaim => self.may_take_in_reclaim(ssn, preemptor, v),
        }
    }

    fn may_reclaim_from<'s>(&self, ssn: &Session<'s>, preemptor: JobId, queue: QueueId) -> Verdict<'s> {
        self.may_reclaim_from_queue(ssn, preemptor, queue)
    }

    fn victim_rank_precedence(&self) -> Option<u8> {
        Some(0)
    }

    fn victim_rank(&self, ssn: &Session, mode: EvictMode, v: &Victim) -> i64 {
        match mode {
            EvictMode::Preempt => 0,
            EvictMode::Reclaim => 2 - queue_state(ssn, ssn.snap.jobs[v.job].queue) as i64,
        }
    }
}
