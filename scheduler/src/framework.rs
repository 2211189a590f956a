//! The plugin framework: the session-wide combination of every enabled plugin's hooks (see
//! [`crate::plugin`]) that actions call. Each hook walks only the plugins that declare it
//! ([`Plugin::hooks`]): most plugins decide a few hooks, and actions call hooks in their
//! innermost loops (orders in sorts, eviction checks per victim).

use std::cmp::Ordering;

use crate::config::PlacementStrategy;
use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::plugin::{EvictMode, Hook, Plugin, Reservation, Rule, ShareBound, Subject, Verdict, Victim, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, NodeId, PodId, QueueId, Snapshot};

/// How many ranks a victim's sort key holds: at most this many plugin kinds rank victims.
pub const MAX_RANKS: usize = 3;

/// A victim's place in eviction order: see [`Framework::victim_key`].
pub type VictimKey = ([i64; MAX_RANKS], std::cmp::Reverse<i64>, std::cmp::Reverse<usize>, std::cmp::Reverse<PodId>);

/// The enabled plugin set, combined.
pub struct Framework {
    enabled: Vec<Box<dyn Plugin>>,
    /// Per [`Hook`] (by its index), the enabled plugins that declare it, in their order.
    by_hook: [Vec<usize>; Hook::COUNT],
    victim_precedence: Vec<usize>,
    job_name_rank: TiVec<JobId, usize>,
}

impl Framework {
    /// Combines `enabled` (as the registry builds them from a configuration), in their order;
    /// victims are ranked by each [`Plugin`] that ranks them, in its precedence.
    pub fn new(enabled: Vec<Box<dyn Plugin>>) -> Framework {
        let mut victim_precedence: Vec<usize> =
            (0..enabled.len()).filter(|&i| enabled[i].victim_rank_precedence().is_some()).collect();
        victim_precedence.sort_by_key(|&i| enabled[i].victim_rank_precedence());
        assert!(victim_precedence.len() <= MAX_RANKS, "at most {MAX_RANKS} victim ranks");
        let mut by_hook: [Vec<usize>; Hook::COUNT] = Default::default();
        for (i, p) in enabled.iter().enumerate() {
            for hook in p.hooks() {
                by_hook[hook as usize].push(i);
            }
        }
        Framework { enabled, by_hook, victim_precedence, job_name_rank: TiVec::new() }
    }

    /// Runs every plugin's `on_open`.
    pub fn open(&mut self, ssn: &mut Session) {
        let jobs = &ssn.snap.jobs;
        let mut by_name: Vec<JobId> = jobs.keys().collect();
        by_name.sort_by(|&a, &b| (&jobs[a].namespace, &jobs[a].name).cmp(&(&jobs[b].namespace, &jobs[b].name)));
        self.job_name_rank = ti_vec![0; jobs.len()];
        for (rank, &j) in by_name.iter().enumerate() {
            self.job_name_rank[j] = rank;
        }
        for p in &mut self.enabled {
            p.on_open(ssn);
        }
    }

    /// Combined queue order; ties broken by name.
    pub fn queue_order(&self, ssn: &Session, a: QueueId, b: QueueId) -> Ordering {
        self.first(Hook::QueueOrder, |p| p.queue_order(ssn, a, b))
            .then_with(|| ssn.snap.queues[a].name.cmp(&ssn.snap.queues[b].name))
    }

    /// Combined job order; ties broken by creation time, then namespace/name.
    pub fn job_order(&self, ssn: &Session, a: JobId, b: JobId) -> Ordering {
        let (ja, jb) = (&ssn.snap.jobs[a], &ssn.snap.jobs[b]);
        self.first(Hook::JobOrder, |p| p.job_order(ssn, a, b))
            .then(ja.created_at.cmp(&jb.created_at))
            .then_with(|| (&ja.namespace, &ja.name).cmp(&(&jb.namespace, &jb.name)))
    }

    /// Combined task order; ties broken by task, then pod index.
    pub fn task_order(&self, ssn: &Session, a: PodId, b: PodId) -> Ordering {
        let (pa, pb) = (&ssn.snap.pods[a], &ssn.snap.pods[b]);
        self.first(Hook::TaskOrder, |p| p.task_order(ssn, a, b)).then((pa.task, pa.index).cmp(&(pb.task, pb.index)))
    }

    /// All node filters; the first failure's reason.
    pub fn node_filter(&self, snap: &Snapshot, job: JobId, task: usize, node: NodeId) -> Result<(), String> {
        self.declaring(Hook::NodeFilter).try_for_each(|p| p.node_filter(snap, job, task, node))
    }

    /// The placement strategy for a pool and class (bin-pack when no plugin says).
    pub fn placement(&self, pool: &str, gpu: bool) -> PlacementStrategy {
        self.declaring(Hook::Placement).find_map(|p| p.placement(pool, gpu)).unwrap_or_default()
    }

    /// Whether every plugin lets the victim be evicted; else the first refusal.
    pub fn may_evict<'s>(&self, ssn: &Session<'s>, mode: EvictMode, preemptor: JobId, v: &Victim) -> Verdict<'s> {
        self.declaring(Hook::MayEvict).try_for_each(|p| p.may_evict(ssn, mode, preemptor, v))
    }

    /// Whether every plugin lets some work of `queue` be reclaimed for `preemptor`.
    pub fn may_reclaim_from<'s>(&self, ssn: &Session<'s>, preemptor: JobId, queue: QueueId) -> Verdict<'s> {
        self.declaring(Hook::MayReclaimFrom).try_for_each(|p| p.may_reclaim_from(ssn, preemptor, queue))
    }

    /// Whether every plugin lets `job`'s queue reclaim `req` at all.
    pub fn may_reclaim<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res) -> Verdict<'s> {
        self.declaring(Hook::MayReclaim).try_for_each(|p| p.may_reclaim(ssn, job, req))
    }

    /// Whether every plugin finds `job`'s queue within its deserved quota with `req` added.
    pub fn within_deserved<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res) -> Verdict<'s> {
        self.declaring(Hook::WithinDeserved).try_for_each(|p| p.within_deserved(ssn, job, req))
    }

    /// A victim's ranks by each ranking plugin, in precedence order (the first part of
    /// [`Framework::sort_victims`]'s key); at most [`MAX_RANKS`] of them rank.
    pub fn victim_ranks(&self, ssn: &Session, mode: EvictMode, v: &Victim) -> [i64; MAX_RANKS] {
        let mut ranks = [0; MAX_RANKS];
        for (slot, &i) in ranks.iter_mut().zip(&self.victim_precedence) {
            *slot = self.enabled[i].victim_rank(ssn, mode, v);
        }
        ranks
    }

    /// A victim's place in eviction order (lower goes first): by fair-share tier, then gang
    /// (elastic pods first), then priority, then newest job first (ties by namespace/name,
    /// last first), then highest pod first. The ranks may follow the state of the victim's
    /// queue, which changes as victims are taken; the rest never changes.
    pub fn victim_key(&self, ssn: &Session, mode: EvictMode, v: &Victim) -> VictimKey {
        use std::cmp::Reverse;
        let ranks = self.victim_ranks(ssn, mode, v);
        let job = &ssn.snap.jobs[v.job];
        (ranks, Reverse(job.created_at), Reverse(self.job_name_rank[v.job]), Reverse(v.pods[0]))
    }

    /// Sorts victims by [`Framework::victim_key`], each victim's key computed once.
    pub fn sort_victims(&self, ssn: &Session, mode: EvictMode, victims: &mut [&Victim]) {
        victims.sort_by_cached_key(|v| self.victim_key(ssn, mode, v));
    }

    /// Whether the job is ready; without an opinion from any plugin, when anything runs.
    pub fn job_ready(&self, ssn: &Session, job: JobId) -> bool {
        self.declaring(Hook::JobReady).find_map(|p| p.job_ready(ssn, job)).unwrap_or(ssn.job_running[job] > 0)
    }

    /// Whether every plugin admits the job.
    pub fn enqueueable<'s>(
        &self,
        ssn: &Session<'s>,
        job: JobId,
        reserved: Option<&TiSlice<QueueId, Res>>,
    ) -> Verdict<'s> {
        self.declaring(Hook::Enqueueable).try_for_each(|p| p.enqueueable(ssn, job, reserved))
    }

    /// Whether every plugin lets the job's queue take `req` more.
    pub fn allocatable<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res, bound: ShareBound) -> Verdict<'s> {
        self.declaring(Hook::Allocatable).try_for_each(|p| p.allocatable(ssn, job, req, bound))
    }

    /// Whether every plugin finds the queue within its fair share.
    pub fn within_fair_share<'s>(&self, ssn: &Session<'s>, queue: QueueId) -> Verdict<'s> {
        self.declaring(Hook::WithinFairShare).try_for_each(|p| p.within_fair_share(ssn, queue))
    }

    /// How many gangs may hold a reservation each cycle: the most any plugin allows.
    pub fn max_reservations(&self) -> usize {
        self.declaring(Hook::MaxReservations).map(|p| p.max_reservations()).max().unwrap_or(0)
    }

    /// Whether every plugin lets the gang reserve nodes.
    pub fn may_reserve<'s>(&self, ssn: &Session<'s>, job: JobId) -> Verdict<'s> {
        self.declaring(Hook::MayReserve).try_for_each(|p| p.may_reserve(ssn, job))
    }

    /// Whether some plugin lets `job`, placed within `bound`, use the capacity reservation `r`
    /// holds; else that the capacity is reserved.
    pub fn may_use_reserved<'s>(
        &self,
        ssn: &Session<'s>,
        job: JobId,
        bound: ShareBound,
        r: &Reservation,
    ) -> Verdict<'s> {
        let reserved = Err(Why::new(ssn.snap, Rule::Reserved, Subject::Job(r.job)));
        self.declaring(Hook::MayUseReserved)
            .map(|p| p.may_use_reserved(ssn, job, bound, r))
            .find(Result::is_ok)
            .unwrap_or(reserved)
    }

    /// The enabled plugins that declare `hook`, in their order.
    fn declaring(&self, hook: Hook) -> impl Iterator<Item = &dyn Plugin> {
        self.by_hook[hook as usize].iter().map(|&i| self.enabled[i].as_ref())
    }

    /// The first order other than `Equal` that a plugin declaring `hook` gives.
    fn first(&self, hook: Hook, f: impl Fn(&dyn Plugin) -> Ordering) -> Ordering {
        self.declaring(hook).map(f).find(|o| *o != Ordering::Equal).unwrap_or(Ordering::Equal)
    }
}
