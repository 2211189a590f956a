//! Why a rule said no: the vocabulary every deciding hook answers in ([`Why`], kept past the
//! cycle as a [`Blocker`]). The words for each rule live with the plugin that applies it (its
//! `words`, a [`Words`]); [`crate::plugins`] gathers them to display a `Why`. This module
//! imports no plugin and no session: plugins, the session and the actions all speak it.

use std::fmt;

use crate::snapshot::{JobId, Level, QueueId, Snapshot};

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

impl<'s> Why<'s> {
    /// The snapshot the refusal's names and amounts are read in.
    pub fn snap(&self) -> &'s Snapshot {
        self.snap
    }

    /// The subject's name for people: the cluster, a queue's name, a job's key.
    pub fn subject_name(&self) -> String {
        match self.subject {
            Subject::Cluster => "the cluster".to_string(),
            Subject::Queue(q) => self.snap.queues[q].name.clone(),
            Subject::Job(j) => self.snap.jobs[j].key(),
        }
    }

    /// The deciding bound's figures, as a reason ends with them: ` (nvidia.com/gpu 5 > 4)`.
    pub fn write_figures(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(e) = self.excess else { return Ok(()) };
        let (snap, r) = (self.snap, e.resource);
        write!(f, " ({} {} > {})", snap.resources[r], snap.amount(r, e.amount), snap.amount(r, e.bound))
    }
}

/// How a rule's words end: the refusal's figures follow them, or the words said them already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The figures of the deciding bound, if any, follow.
    Figures,
    /// The words are complete.
    Said,
}

impl Ending {
    /// Words after which the figures follow.
    pub fn figures(written: fmt::Result) -> Result<Ending, fmt::Error> {
        written.map(|()| Ending::Figures)
    }

    /// Words that are complete.
    pub fn said(written: fmt::Result) -> Result<Ending, fmt::Error> {
        written.map(|()| Ending::Said)
    }
}

/// A plugin's words for the rules it applies, given the refusal and its subject's name:
/// `None` for a rule that is not its own (then it writes nothing).
pub type Words = fn(&Why, &str, &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>>;

/// What `drover explain` knows when it advises on a refusal: the refusal kept past the
/// cycle, what the job asks for, and, for a queue's bound, the queue's name and the settings
/// that govern its limit and deserved quota (named by what sets them: a Project's or
/// Department's node pool, else the queue).
pub struct AdviceFacts<'a> {
    /// The snapshot the names and amounts are read in.
    pub snap: &'a Snapshot,
    /// The refusal that gave the job's reason.
    pub blocker: Blocker,
    /// What the job asks for (its gang's minimum, or one elastic pod).
    pub need: &'a crate::res::Res,
    /// The queue the refusal is about, if it is about one.
    pub queue: &'a str,
    /// The setting that governs the queue's limit of the refusal's resource.
    pub limit: String,
    /// The setting that governs the queue's deserved quota of it.
    pub deserved: String,
}

/// A plugin's advice on a refusal by one of its rules: what would let the job start; `None`
/// for a rule that is not its own, or when it has nothing better than the general advice.
pub type Advice = fn(&AdviceFacts) -> Option<String>;
