//! The plugin framework: the hooks through which plugins supply policy, and the session-wide
//! combination of those hooks that actions call.

use std::cmp::Ordering;

use crate::config::{PlacementStrategy, PluginConfig, SchedulerConfig};
use crate::plugins;
use crate::res::Res;
use crate::reservation::Reservation;
use crate::session::Session;
use crate::snapshot::{JobId, NodeId, PodId, QueueId, Snapshot};

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

/// A policy component. Every hook has a neutral default; a plugin overrides what it decides.
pub trait Plugin {
    /// The plugin's configuration name.
    fn name(&self) -> &'static str;

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
    fn may_evict(&self, _ssn: &Session, _mode: EvictMode, _preemptor: JobId, _victim: &Victim) -> bool {
        true
    }

    /// Whether some work of leaf queue `queue` may be reclaimed for `preemptor`: a cheap
    /// filter, by queue, before victim units are formed ([`Plugin::may_evict`] still judges
    /// each unit).
    fn may_reclaim_from(&self, _ssn: &Session, _preemptor: JobId, _queue: QueueId) -> bool {
        true
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
    /// already claim per queue.
    fn enqueueable(&self, _ssn: &Session, _job: JobId, _reserved: &[Res]) -> Result<(), String> {
        Ok(())
    }

    /// Whether the job's queue chain may take `req` more.
    fn allocatable(&self, _ssn: &Session, _job: JobId, _req: &Res, _bound: ShareBound) -> Result<(), String> {
        Ok(())
    }

    /// Whether a queue uses more than it should (more than its fair share).
    fn overused(&self, _ssn: &Session, _queue: QueueId) -> bool {
        false
    }

    /// How many gangs that cannot start now may each reserve, per cycle, the nodes where they
    /// will start soonest (0: none).
    fn max_reservations(&self) -> usize {
        0
    }

    /// Whether a gang that cannot start now may reserve nodes (within
    /// [`Plugin::max_reservations`]).
    fn may_reserve(&self, _ssn: &Session, _job: JobId) -> bool {
        true
    }

    /// Whether `job`, placed within `bound`, may use the capacity reservation `r` holds.
    fn may_use_reserved(&self, _ssn: &Session, _job: JobId, _bound: ShareBound, _r: &Reservation) -> bool {
        false
    }
}

/// The plugins that rank victims, in precedence order.
const RANKING_PLUGINS: [&str; 3] = ["fairshare", "gang", "priority"];

/// How many ranks a victim's sort key holds (one per ranking plugin).
pub const MAX_RANKS: usize = RANKING_PLUGINS.len();

/// A victim's place in eviction order: see [`Framework::victim_key`].
pub type VictimKey = ([i64; MAX_RANKS], std::cmp::Reverse<i64>, std::cmp::Reverse<usize>, std::cmp::Reverse<PodId>);

/// The enabled plugins, combined.
pub struct Framework {
    plugins: Vec<Box<dyn Plugin>>,
    victim_precedence: Vec<usize>,
    job_name_rank: Vec<usize>,
}

impl Framework {
    /// Instantiates the plugins a configuration enables, in its order.
    pub fn new(config: &SchedulerConfig) -> Framework {
        let drf_queue_order = config.plugins.iter().any(|p| matches!(p, PluginConfig::Drf(d) if d.queue_order));
        let plugins: Vec<Box<dyn Plugin>> = config
            .plugins
            .iter()
            .map(|p| -> Box<dyn Plugin> {
                match p {
                    PluginConfig::Priority => Box::new(plugins::priority::Priority),
                    PluginConfig::Gang => Box::new(plugins::gang::Gang),
                    PluginConfig::Fairshare(args) => {
                        Box::new(plugins::fairshare::FairShare::new(args.mode, drf_queue_order))
                    }
                    PluginConfig::Drf(args) => Box::new(plugins::drf::Drf::new(*args)),
                    PluginConfig::Predicates => Box::new(plugins::predicates::Predicates),
                    PluginConfig::Nodeorder(args) => Box::new(plugins::nodeorder::NodeOrder::new(args.clone())),
                    PluginConfig::Reservation(args) => Box::new(plugins::reservation::Reservation::new(*args)),
                    PluginConfig::Shortestfirst(args) => Box::new(plugins::shortestfirst::ShortestFirst::new(*args)),
                }
            })
            .collect();
        let mut victim_precedence = Vec::new();
        for name in RANKING_PLUGINS {
            victim_precedence.extend(plugins.iter().position(|p| p.name() == name));
        }
        Framework { plugins, victim_precedence, job_name_rank: Vec::new() }
    }

    /// Runs every plugin's `on_open`.
    pub fn open(&mut self, ssn: &mut Session) {
        let jobs = &ssn.snap.jobs;
        let mut by_name: Vec<usize> = (0..jobs.len()).collect();
        by_name.sort_by(|&a, &b| (&jobs[a].namespace, &jobs[a].name).cmp(&(&jobs[b].namespace, &jobs[b].name)));
        self.job_name_rank = vec![0; jobs.len()];
        for (rank, &j) in by_name.iter().enumerate() {
            self.job_name_rank[j] = rank;
        }
        for p in &mut self.plugins {
            p.on_open(ssn);
        }
    }

    /// Combined queue order; ties broken by name.
    pub fn queue_order(&self, ssn: &Session, a: QueueId, b: QueueId) -> Ordering {
        self.first(|p| p.queue_order(ssn, a, b)).then_with(|| ssn.snap.queues[a].name.cmp(&ssn.snap.queues[b].name))
    }

    /// Combined job order; ties broken by creation time, then namespace/name.
    pub fn job_order(&self, ssn: &Session, a: JobId, b: JobId) -> Ordering {
        let (ja, jb) = (&ssn.snap.jobs[a], &ssn.snap.jobs[b]);
        self.first(|p| p.job_order(ssn, a, b))
            .then(ja.created_at.cmp(&jb.created_at))
            .then_with(|| (&ja.namespace, &ja.name).cmp(&(&jb.namespace, &jb.name)))
    }

    /// Combined task order; ties broken by task, then pod index.
    pub fn task_order(&self, ssn: &Session, a: PodId, b: PodId) -> Ordering {
        let (pa, pb) = (&ssn.snap.pods[a], &ssn.snap.pods[b]);
        self.first(|p| p.task_order(ssn, a, b)).then((pa.task, pa.index).cmp(&(pb.task, pb.index)))
    }

    /// All node filters; the first failure's reason.
    pub fn node_filter(&self, snap: &Snapshot, job: JobId, task: usize, node: NodeId) -> Result<(), String> {
        self.plugins.iter().try_for_each(|p| p.node_filter(snap, job, task, node))
    }

    /// The placement strategy for a pool and class (bin-pack when no plugin says).
    pub fn placement(&self, pool: &str, gpu: bool) -> PlacementStrategy {
        self.plugins.iter().find_map(|p| p.placement(pool, gpu)).unwrap_or_default()
    }

    /// Whether every plugin lets the victim be evicted.
    pub fn may_evict(&self, ssn: &Session, mode: EvictMode, preemptor: JobId, v: &Victim) -> bool {
        self.plugins.iter().all(|p| p.may_evict(ssn, mode, preemptor, v))
    }

    /// Whether every plugin lets some work of `queue` be reclaimed for `preemptor`.
    pub fn may_reclaim_from(&self, ssn: &Session, preemptor: JobId, queue: QueueId) -> bool {
        self.plugins.iter().all(|p| p.may_reclaim_from(ssn, preemptor, queue))
    }

    /// A victim's ranks by the ranking plugins, in precedence order (the first part of
    /// [`Framework::sort_victims`]'s key); at most [`MAX_RANKS`] plugins rank.
    pub fn victim_ranks(&self, ssn: &Session, mode: EvictMode, v: &Victim) -> [i64; MAX_RANKS] {
        let mut ranks = [0; MAX_RANKS];
        for (slot, &i) in ranks.iter_mut().zip(&self.victim_precedence) {
            *slot = self.plugins[i].victim_rank(ssn, mode, v);
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
        self.plugins.iter().find_map(|p| p.job_ready(ssn, job)).unwrap_or(ssn.job_running[job] > 0)
    }

    /// Whether every plugin admits the job.
    pub fn enqueueable(&self, ssn: &Session, job: JobId, reserved: &[Res]) -> Result<(), String> {
        self.plugins.iter().try_for_each(|p| p.enqueueable(ssn, job, reserved))
    }

    /// Whether every plugin lets the job's queue take `req` more.
    pub fn allocatable(&self, ssn: &Session, job: JobId, req: &Res, bound: ShareBound) -> Result<(), String> {
        self.plugins.iter().try_for_each(|p| p.allocatable(ssn, job, req, bound))
    }

    /// Whether any plugin finds the queue overused.
    pub fn overused(&self, ssn: &Session, queue: QueueId) -> bool {
        self.plugins.iter().any(|p| p.overused(ssn, queue))
    }

    /// How many gangs may hold a reservation each cycle: the most any plugin allows.
    pub fn max_reservations(&self) -> usize {
        self.plugins.iter().map(|p| p.max_reservations()).max().unwrap_or(0)
    }

    /// Whether every plugin lets the gang reserve nodes.
    pub fn may_reserve(&self, ssn: &Session, job: JobId) -> bool {
        self.plugins.iter().all(|p| p.may_reserve(ssn, job))
    }

    /// Whether some plugin lets `job`, placed within `bound`, use the capacity reservation `r`
    /// holds.
    pub fn may_use_reserved(&self, ssn: &Session, job: JobId, bound: ShareBound, r: &Reservation) -> bool {
        self.plugins.iter().any(|p| p.may_use_reserved(ssn, job, bound, r))
    }

    fn first(&self, f: impl Fn(&dyn Plugin) -> Ordering) -> Ordering {
        self.plugins.iter().map(|p| f(p.as_ref())).find(|o| *o != Ordering::Equal).unwrap_or(Ordering::Equal)
    }
}
