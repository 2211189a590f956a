//! The contract between plugins and actions: the [`Plugin`] hooks through which plugins
//! supply policy, the data they see (victims, share bounds, reservations) and [`Why`], the
//! structured answer every deciding hook gives when it says no. Actions form their reasons
//! only from these answers; the [`crate::framework`] combines the enabled plugins.

use std::cmp::Ordering;
use std::fmt;

use crate::config::PlacementStrategy;
use crate::ids::TiSlice;
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, Level, NodeId, PodId, QueueId, Snapshot};

/// A deciding hook's answer: `Ok` lets the thing happen, `Err` says which rule did not.
pub type Verdict<'s> = Result<(), Why<'s>>;

/// The rule a hook applied when it said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// A queue's hard limit.
    Limit,
    /// Admission: a queue's limit cannot hold the gang's minimum.
    LimitForGang,
    /// Allocation within fair share: the queue would exceed its fair share.
    FairShare,
    /// The queue already uses more than its fair share.
    OverFairShare,
    /// Allocation within fair share: the queue would exceed its fair share, lowered to the
    /// capacity its waiting work can use (free capacity none of its waiting gangs can start on
    /// is no part of it).
    UsableShare,
    /// Non-preemptible work only within its queue's deserved quota.
    NonPreemptibleDeserved,
    /// Admission: a non-preemptible gang larger than its queue's deserved quota.
    NonPreemptibleGangDeserved,
    /// Admission: a gang larger than the whole cluster.
    ClusterCapacity,
    /// Admission: a gang pod asks more of a resource than the largest node has.
    LargerThanAnyNode,
    /// Admission: a gang pod asks more of a resource than the largest node its node selector,
    /// affinity and tolerations allow has.
    LargerThanAnyAllowedNode,
    /// Admission: the gang's pods that may use only some nodes (by their node selector,
    /// affinity and tolerations) ask more of a resource than those nodes have in all.
    BeyondAllowedNodes,
    /// Admission: pods that must share one domain of a topology level ask more of a resource
    /// than the largest domain there has.
    LargerThanAnyDomain,
    /// Admission: a pod asks fewer GPUs than the NVLink-connected GPUs it requires (the
    /// seed's `min-nvlink-gpus`), which no node can give it.
    NvlinkBelowMinimum,
    /// Eviction: a job is never its own victim.
    OwnJob,
    /// Eviction: non-preemptible work, never a victim.
    NonPreemptible,
    /// Preemption: only lower priority (equal for elastic pods).
    NotLowerPriority,
    /// Eviction: a unit that would leave its job below its gang minimum.
    BreaksGang,
    /// Reclaim: only from a queue off the reclaimer's own path.
    SameQueue,
    /// Reclaim: the request uses no resource queue quotas cover.
    OutsideQuota,
    /// Reclaim: the victim side is not above its deserved quota in a resource the request
    /// needs.
    NotAboveDeserved,
    /// Reclaim: the reclaimer side would go over its deserved quota, so it takes only from
    /// queues above their fair share.
    OverDeserved,
    /// Reclaim: elastic pods take only what the victim side could not take back within its
    /// fair share.
    ElasticBeyondFairShare,
    /// Reclaim: the victim's queue is not reclaimable.
    NotReclaimable,
    /// Reservation: the gang has not waited long enough to reserve nodes.
    TooEarlyToReserve,
    /// Reservation: the capacity is held for another gang.
    Reserved,
    /// Regrow: a job's elastic pods wait a while after it lost pods to preemption or reclaim.
    RegrowDelay,
    /// Running limits: the queue's subtree runs as many jobs as it may.
    RunningJobs,
    /// Running limits: the queue's subtree would run more pods than it may.
    RunningPods,
    /// Eviction: the job has not yet run its queue's minimum run time.
    MinRuntime,
    /// Gang: the job has fewer pods than its gang minimum (overall or of a task), so no
    /// placement can start it until more are created.
    GangShortOfPods,
}

impl Rule {
    /// Whether more nodes could lift this refusal. A queue's own bounds (its limit, and the
    /// deserved quota non-preemptible work must stay within) and a job's wait after losing
    /// pods to preemption hold whatever the cluster's size, and so does a pod asking fewer GPUs
    /// than its own NVLink minimum; every other refusal comes down to
    /// capacity: the cluster's size and its largest node bound a gang, fair shares grow with
    /// the cluster, and victims are sought only because nodes are full.
    pub fn more_nodes_help(self) -> bool {
        !matches!(
            self,
            Rule::Limit
                | Rule::LimitForGang
                | Rule::NonPreemptibleDeserved
                | Rule::NonPreemptibleGangDeserved
                | Rule::RegrowDelay
                | Rule::NvlinkBelowMinimum
                | Rule::RunningJobs
                | Rule::RunningPods
                | Rule::GangShortOfPods
        )
    }

    /// Whether this refusal holds for as long as the gang is as it is: it asks more than any
    /// place it may use has (the cluster, its largest node or domain, the nodes its selectors
    /// allow) or fewer GPUs than its own NVLink minimum. No end of running work, eviction or
    /// wait lifts it, so it can never start as it is.
    pub fn holds_forever(self) -> bool {
        matches!(
            self,
            Rule::ClusterCapacity
                | Rule::LargerThanAnyNode
                | Rule::LargerThanAnyAllowedNode
                | Rule::BeyondAllowedNodes
                | Rule::LargerThanAnyDomain
                | Rule::NvlinkBelowMinimum
        )
    }
}

/// What a rule was applied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// The whole cluster.
    Cluster,
    /// A queue.
    Queue(QueueId),
    /// A job (pod group).
    Job(JobId),
}

/// The numbers behind a refusal: `amount` of `resource` would exceed `bound`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Excess {
    /// The resource (index into the snapshot's resources).
    pub resource: usize,
    /// What it would be.
    pub amount: i64,
    /// The bound it would exceed.
    pub bound: i64,
}

/// Why a hook said no: the rule, what it was applied to and, where a bound decided, the
/// resource and numbers. Displayed, it is the reason text the scheduler reports.
#[derive(Debug, Clone, Copy)]
pub struct Why<'s> {
    /// The rule that refused.
    pub rule: Rule,
    /// The queue, job or cluster it refused for.
    pub subject: Subject,
    /// The bound that decided, if one did.
    pub excess: Option<Excess>,
    /// The topology and level whose domains the bound is about, for topology rules.
    pub level: Option<(usize, Level)>,
    /// Until when the refusal holds, for rules that lapse (the clock of [`Snapshot::now`]).
    pub until: Option<i64>,
    snap: &'s Snapshot,
}

impl<'s> Why<'s> {
    /// A refusal by `rule` of `subject`, without numbers.
    pub fn new(snap: &'s Snapshot, rule: Rule, subject: Subject) -> Why<'s> {
        Why { rule, subject, excess: None, level: None, until: None, snap }
    }

    /// A refusal because `amount` of resource `resource` would exceed `bound`.
    pub fn exceeding(
        snap: &'s Snapshot,
        rule: Rule,
        subject: Subject,
        (resource, amount, bound): (usize, i64, i64),
    ) -> Why<'s> {
        Why { rule, subject, excess: Some(Excess { resource, amount, bound }), level: None, until: None, snap }
    }

    /// A refusal by `rule` of `subject` that holds until `until`.
    pub fn until(snap: &'s Snapshot, rule: Rule, subject: Subject, until: i64) -> Why<'s> {
        Why { until: Some(until), ..Why::new(snap, rule, subject) }
    }

    /// The same refusal, about the domains of `level` of topology `topology`.
    pub fn in_level(self, topology: usize, level: Level) -> Why<'s> {
        Why { level: Some((topology, level)), ..self }
    }
}

/// A refusal's parts without the snapshot, to keep past the cycle: what blocks a waiting job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocker {
    /// The rule that refused.
    pub rule: Rule,
    /// The queue, job or cluster it refused for.
    pub subject: Subject,
    /// The bound that decided, if one did.
    pub excess: Option<Excess>,
}

impl Blocker {
    /// The refusal again, to display with `snap` (without a topology level or an end, which a
    /// blocker does not keep).
    pub fn why(self, snap: &Snapshot) -> Why<'_> {
        Why { rule: self.rule, subject: self.subject, excess: self.excess, level: None, until: None, snap }
    }
}

impl From<Why<'_>> for Blocker {
    fn from(why: Why<'_>) -> Blocker {
        Blocker { rule: why.rule, subject: why.subject, excess: why.excess }
    }
}

impl fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.subject {
            Subject::Cluster => "the cluster".to_string(),
            Subject::Queue(q) => self.snap.queues[q].name.clone(),
            Subject::Job(j) => self.snap.jobs[j].key(),
        };
        match self.rule {
            Rule::Limit => write!(f, "queue {s} would exceed its limit"),
            Rule::LimitForGang => write!(f, "queue {s} cannot hold the gang's minimum within its limit"),
            Rule::FairShare => write!(f, "queue {s} would exceed its fair share"),
            Rule::UsableShare => write!(
                f,
                "queue {s} would exceed its fair share, which counts only capacity its waiting gangs can start on"
            ),
            Rule::OverFairShare => write!(f, "queue {s} is over its fair share"),
            Rule::NonPreemptibleDeserved => write!(f, "non-preemptible work may only use queue {s}'s deserved quota"),
            Rule::NonPreemptibleGangDeserved => write!(
                f,
                "non-preemptible work may only use queue {s}'s deserved quota, which is smaller than the gang"
            ),
            Rule::ClusterCapacity => write!(f, "the gang needs more than the whole cluster has"),
            Rule::LargerThanAnyNode => match self.excess {
                Some(e) => {
                    let (snap, r) = (self.snap, e.resource);
                    let (largest, asked) = (snap.amount(r, e.bound), snap.amount(r, e.amount));
                    return write!(
                        f,
                        "can never fit: largest node has {largest} {}, a pod asks {asked}",
                        snap.resources[r]
                    );
                }
                None => write!(f, "can never fit on any node"),
            },
            Rule::LargerThanAnyAllowedNode | Rule::BeyondAllowedNodes => {
                let Some(e) = self.excess else { return write!(f, "can never fit on the nodes its pods may use") };
                let (snap, r) = (self.snap, e.resource);
                let (has, asked) = (snap.amount(r, e.bound), snap.amount(r, e.amount));
                let res = &snap.resources[r];
                return if self.rule == Rule::LargerThanAnyAllowedNode {
                    write!(
                        f,
                        "can never fit: the largest node its node selector, affinity and tolerations allow has {has} {res}, a pod asks {asked}"
                    )
                } else {
                    write!(
                        f,
                        "can never fit: the nodes its pods' node selector, affinity and tolerations allow have {has} {res} in all, the gang's pods need {asked}"
                    )
                };
            }
            Rule::LargerThanAnyDomain => {
                let snap = self.snap;
                let level = self.level.map_or("domain", |(t, l)| snap.topologies[t].levels[l].as_str());
                let Some(e) = self.excess else { return write!(f, "can never fit in one {level}") };
                let r = e.resource;
                let (largest, asked) = (snap.amount(r, e.bound), snap.amount(r, e.amount));
                return write!(
                    f,
                    "can never fit: largest {level} has {largest} {}, the pods that must share one need {asked}",
                    snap.resources[r]
                );
            }
            Rule::NvlinkBelowMinimum => {
                let Some(e) = self.excess else { return write!(f, "requests fewer GPUs than it requires with NVLink") };
                return write!(f, "pod requests {} GPUs but requires {} with NVLink", e.amount, e.bound);
            }
            Rule::OwnJob => write!(f, "a job is not its own victim"),
            Rule::NonPreemptible => write!(f, "job {s} is non-preemptible"),
            Rule::NotLowerPriority => write!(f, "job {s} does not have a lower priority"),
            Rule::BreaksGang => write!(f, "evicting it would leave job {s} below its gang minimum"),
            Rule::SameQueue => write!(f, "queue {s} is on the reclaimer's own path"),
            Rule::OutsideQuota => write!(f, "the request uses no resource that queue quotas cover"),
            Rule::NotAboveDeserved => write!(f, "queue {s} is not above its deserved quota in what the request needs"),
            Rule::OverDeserved => write!(f, "queue {s} would go over its deserved quota"),
            Rule::ElasticBeyondFairShare => {
                write!(f, "elastic pods take only from queues above their fair share, and queue {s} is not above it")
            }
            Rule::NotReclaimable => write!(f, "queue {s} is not reclaimable"),
            Rule::TooEarlyToReserve => write!(f, "job {s} has not waited long enough to reserve nodes"),
            Rule::Reserved => write!(f, "the capacity is reserved for job {s}"),
            Rule::RegrowDelay => {
                let (snap, delay) = (self.snap, crate::plugins::regrow::REGROW_DELAY_SECONDS);
                let Subject::Job(j) = self.subject else {
                    return write!(f, "no elastic pods grow until {delay} s after a preemption");
                };
                // Absolute times: a reason that counts seconds would change every cycle.
                let Some(at) = snap.jobs[j].preempted_at else {
                    return write!(f, "job {s} grows no elastic pods until {delay} s after it lost pods to preemption");
                };
                let (lost, grows) = (snap.time(at), snap.time(at.saturating_add(delay)));
                write!(
                    f,
                    "job {s} lost pods to preemption or reclaim at {lost} and grows no elastic pods until {grows}"
                )
            }
            Rule::RunningJobs | Rule::RunningPods => {
                let what = if self.rule == Rule::RunningJobs { "job" } else { "pod" };
                let Some(e) = self.excess else { return write!(f, "queue {s} is at its limit of running {what}s") };
                let plural = if e.bound == 1 { "" } else { "s" };
                return write!(f, "queue {s} at its limit of {} running {what}{plural}", e.bound);
            }
            Rule::GangShortOfPods => {
                let Some(e) = self.excess else { return write!(f, "job {s} has fewer pods than its gang minimum") };
                let more = e.bound - e.amount;
                let plural = if more == 1 { "" } else { "s" };
                return write!(
                    f,
                    "job {s} has {} of the {} pods its gang minimum needs: {more} more pod{plural} must be created",
                    e.amount, e.bound
                );
            }
            Rule::MinRuntime => match self.until {
                Some(t) => {
                    write!(f, "job {s} is protected until {} by its queue's minimum run time", self.snap.time(t))
                }
                None => write!(f, "job {s} has not run its queue's minimum run time"),
            },
        }?;
        if let Some(e) = self.excess {
            let snap = self.snap;
            let r = e.resource;
            write!(f, " ({} {} > {})", snap.resources[r], snap.amount(r, e.amount), snap.amount(r, e.bound))?;
        }
        Ok(())
    }
}

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
