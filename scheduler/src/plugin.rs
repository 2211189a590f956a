//! The contract between plugins and actions: the [`Plugin`] hooks through which plugins
//! supply policy, the data they see (victims, share bounds, reservations) and [`Why`] (see
//! [`crate::why`]), the structured answer every deciding hook gives when it says no. Actions form their reasons
//! only from these answers; the [`crate::framework`] combines the enabled plugins.

use std::cmp::Ordering;

use crate::config::PlacementStrategy;
use crate::ids::TiSlice;
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, NodeId, PodId, QueueId, Snapshot};
pub use crate::why::{Blocker, Excess, Rule, Subject, Verdict, Why};

/// Which action is looking for victims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictMode {
    /// Within the preemptor's queue, by priority.
    Preempt,
    /// Across queues, by fairness.
    Reclaim,
}

/// A unit that can be evicted without breaking a gang: one elastic pod, or every running pod
/// of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    /// The job that loses pods.
    pub job: JobId,
    /// The pods evicted together.
    pub pods: Vec<PodId>,
    /// Whether this is a single pod above the job's minimum.
    pub elastic: bool,
    /// What evicting the unit frees.
    pub freed: Res,
}

/// Which fair-share bound an allocation must respect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareBound {
    /// Stay within every queue's fair share.
    FairShare,
    /// Only hard limits and quota rules: idle capacity nobody else wants.
    Idle,
}

/// A gang's claim on the nodes where it will start soonest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The waiting gang.
    pub job: JobId,
    /// When it is expected to start, on the snapshot's clock.
    pub start: i64,
    /// The nodes it will take then, ascending, with what it needs on each.
    pub nodes: Vec<(NodeId, Res)>,
    /// What must stay idle now on each of those nodes (the mechanism's, not the plugins').
    pub(crate) held: Vec<(NodeId, Res)>,
}

/// A hook the framework walks for a decision or an order. A plugin declares those it
/// implements ([`Plugin::hooks`]) and the framework walks only the plugins that declare a
/// hook, so a plugin costs nothing in the hooks it leaves neutral.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// [`Plugin::queue_order`].
    QueueOrder,
    /// [`Plugin::job_order`].
    JobOrder,
    /// [`Plugin::task_order`].
    TaskOrder,
    /// [`Plugin::node_filter`].
    NodeFilter,
    /// [`Plugin::placement`].
    Placement,
    /// [`Plugin::may_evict`].
    MayEvict,
    /// [`Plugin::may_reclaim_from`].
    MayReclaimFrom,
    /// [`Plugin::may_reclaim`].
    MayReclaim,
    /// [`Plugin::within_deserved`].
    WithinDeserved,
    /// [`Plugin::job_ready`].
    JobReady,
    /// [`Plugin::enqueueable`].
    Enqueueable,
    /// [`Plugin::allocatable`].
    Allocatable,
    /// [`Plugin::within_fair_share`].
    WithinFairShare,
    /// [`Plugin::max_reservations`].
    MaxReservations,
    /// [`Plugin::may_reserve`].
    MayReserve,
    /// [`Plugin::may_use_reserved`].
    MayUseReserved,
}

impl Hook {
    /// How many hooks there are (the last one's index, plus one).
    pub const COUNT: usize = Hook::MayUseReserved as usize + 1;
}

/// A policy component. Every hook has a neutral default; a plugin overrides what it decides
/// and declares those hooks in [`Plugin::hooks`]. Every plugin's `on_open` is called, and
/// [`Plugin::victim_rank`] by the plugins that have a [`Plugin::victim_rank_precedence`].
pub trait Plugin {
    /// The plugin's configuration name.
    fn name(&self) -> &'static str;

    /// The hooks this plugin implements, as configured: the framework calls no other
    /// [`Hook`] of it.
    fn hooks(&self) -> Vec<Hook>;

    /// Called once per cycle before any action, e.g. to compute fair shares.
    fn on_open(&mut self, _ssn: &mut Session) {}

    /// Orders sibling queues: `Less` means `a` is served first.
    fn queue_order(&self, _ssn: &Session, _a: QueueId, _b: QueueId) -> Ordering {
        Ordering::Equal
    }

    /// Orders jobs of one queue: `Less` means `a` is served first.
    fn job_order(&self, _ssn: &Session, _a: JobId, _b: JobId) -> Ordering {
        Ordering::Equal
    }

    /// Orders pods of one job for placement: `Less` means `a` is placed first.
    fn task_order(&self, _ssn: &Session, _a: PodId, _b: PodId) -> Ordering {
        Ordering::Equal
    }

    /// Static node filter for a task: `Err` names the reason, in kube-scheduler's words.
    fn node_filter(&self, _snap: &Snapshot, _job: JobId, _task: usize, _node: NodeId) -> Result<(), String> {
        Ok(())
    }

    /// Placement strategy for a node pool and workload class.
    fn placement(&self, _pool: &str, _gpu: bool) -> Option<PlacementStrategy> {
        None
    }

    /// Whether a victim may be evicted for `preemptor` in this mode.
    fn may_evict<'s>(&self, _ssn: &Session<'s>, _mode: EvictMode, _preemptor: JobId, _victim: &Victim) -> Verdict<'s> {
        Ok(())
    }

    /// Whether some work of leaf queue `queue` may be reclaimed for `preemptor`: a cheap
    /// filter, by queue, before victim units are formed ([`Plugin::may_evict`] still judges
    /// each unit).
    fn may_reclaim_from<'s>(&self, _ssn: &Session<'s>, _preemptor: JobId, _queue: QueueId) -> Verdict<'s> {
        Ok(())
    }

    /// Whether `job`'s queue may reclaim `req` from other queues at all, before any victim is
    /// looked for.
    fn may_reclaim<'s>(&self, _ssn: &Session<'s>, _job: JobId, _req: &Res) -> Verdict<'s> {
        Ok(())
    }

    /// Whether `job`'s queue stays within its deserved quota with `req` added: a reclaimer
    /// that does may take from every queue above its deserved quota, one that does not only
    /// from queues above their fair share.
    fn within_deserved<'s>(&self, _ssn: &Session<'s>, _job: JobId, _req: &Res) -> Verdict<'s> {
        Ok(())
    }

    /// Where this plugin's [`Plugin::victim_rank`] stands among the ranking plugins' (lower
    /// is compared first), whatever the configured order; `None` for a plugin that does not
    /// rank victims.
    fn victim_rank_precedence(&self) -> Option<u8> {
        None
    }

    /// Rank of a victim (lower goes first) in this mode.
    fn victim_rank(&self, _ssn: &Session, _mode: EvictMode, _victim: &Victim) -> i64 {
        0
    }

    /// Whether a job is ready (has enough running pods to make progress).
    fn job_ready(&self, _ssn: &Session, _job: JobId) -> Option<bool> {
        None
    }

    /// Whether a pending job may be admitted; `reserved` is what admitted-but-unplaced jobs
    /// already claim per queue. Without `reserved`, the gang is judged alone, as if its queues
    /// ran nothing: an admitted group that could never start (its pods turned out larger than
    /// a limit, a limit was lowered, nodes left) is judged so every cycle until it runs.
    fn enqueueable<'s>(
        &self,
        _ssn: &Session<'s>,
        _job: JobId,
        _reserved: Option<&TiSlice<QueueId, Res>>,
    ) -> Verdict<'s> {
        Ok(())
    }

    /// Whether the job's queue chain may take `req` more.
    fn allocatable<'s>(&self, _ssn: &Session<'s>, _job: JobId, _req: &Res, _bound: ShareBound) -> Verdict<'s> {
        Ok(())
    }

    /// Whether a queue uses at most what it should (its fair share): a queue that uses more
    /// sits out fair-share allocation and reclaims nothing.
    fn within_fair_share<'s>(&self, _ssn: &Session<'s>, _queue: QueueId) -> Verdict<'s> {
        Ok(())
    }

    /// How many gangs that cannot start now may each reserve, per cycle, the nodes where they
    /// will start soonest (0: none).
    fn max_reservations(&self) -> usize {
        0
    }

    /// Whether a gang that cannot start now may reserve nodes (within
    /// [`Plugin::max_reservations`]).
    fn may_reserve<'s>(&self, _ssn: &Session<'s>, _job: JobId) -> Verdict<'s> {
        Ok(())
    }

    /// Whether `job`, placed within `bound`, may use the capacity reservation `r` holds (no,
    /// unless a plugin says so).
    fn may_use_reserved<'s>(&self, ssn: &Session<'s>, _job: JobId, _bound: ShareBound, r: &Reservation) -> Verdict<'s> {
        Err(Why::new(ssn.snap, Rule::Reserved, Subject::Job(r.job)))
    }
}
