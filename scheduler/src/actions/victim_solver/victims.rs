//! Eviction victims: the units a running job can lose without breaking its gang, and the
//! order in which preempt and reclaim take them.
//!
//! Units are formed once per job and action, and each leaf queue's units are sorted once.
//! An attempt then merges the queues it may take from, choosing at each step the head with
//! the lowest [`Framework::victim_key`] now. A key's ranks may follow the state of the
//! victim's queue (fair-share tiers do), which changes as units are taken, but they never
//! reorder the units of one queue; so only the heads are compared again, and only the head
//! of the queue that just lost a unit is ranked again. This is the same order as sorting
//! every candidate and sorting the rest again after each eviction, without doing either.

use foldhash::HashMap;
use std::cell::{OnceCell, RefCell};
use std::rc::Rc;

use crate::framework::{Framework, VictimKey};
use crate::ids::{ti_vec, JobId, NodeId, PodId, QueueId, TiVec};
use crate::node_index::Class;
use crate::plugin::{EvictMode, Victim};
use crate::session::{PodState, Session};
use crate::snapshot::Level;

/// Eviction units of a running job: its pods above the gang minimum one by one (newest
/// index first), then all of it. Pods bound by this very cycle are never victims: a binding
/// the cycle decided stands.
pub fn victim_units(ssn: &Session, job: JobId) -> Vec<Victim> {
    let running: Vec<PodId> = ssn.running_pods(job).collect();
    let bound_before = |p: &PodId| matches!(ssn.pod_state[*p], PodState::Bound(_));
    if running.is_empty() {
        return Vec::new();
    }
    let j = &ssn.snap.jobs[job];
    let mut surplus = ssn.job_running[job].saturating_sub(j.min_member);
    let mut spare: Vec<u32> = j
        .tasks
        .iter()
        .enumerate()
        .map(|(t, task)| ssn.task_running[job][t].saturating_sub(task.min_available))
        .collect();
    let mut units = Vec::new();
    for &pod in running.iter().rev().filter(|p| bound_before(p)) {
        let t = ssn.snap.pods[pod].task;
        if surplus > 0 && spare[t] > 0 {
            surplus -= 1;
            spare[t] -= 1;
            units.push(Victim { job, pods: vec![pod], elastic: true, freed: ssn.requests(pod).clone() });
        }
    }
    if running.iter().all(bound_before) {
        let freed = ssn.sum_requests(&running);
        units.push(Victim { job, pods: running, elastic: false, freed });
    }
    units
}

/// The victim units of one action (preempt or reclaim): per job, formed on first use and
/// formed again after the job loses pods, and per leaf queue in eviction order.
pub struct VictimPool {
    mode: EvictMode,
    /// Jobs with running pods when the action started, per leaf queue.
    running: TiVec<QueueId, Vec<JobId>>,
    units: TiVec<JobId, Option<Vec<Victim>>>,
    /// Per leaf queue, its units as (job, index in the job's units) in eviction order;
    /// `None` until sorted.
    sorted: TiVec<QueueId, Option<Vec<(JobId, usize)>>>,
    /// Per leaf queue, its jobs that lost pods since it was sorted: their units are formed
    /// again and put back in order on the next [`VictimPool::prepare`].
    stale: TiVec<QueueId, Vec<JobId>>,
    /// Per leaf queue, and per topology and level, what its pods bound before the cycle hold
    /// per domain (see [`VictimOrder::held_per_domain`]), made on first use and kept as pods
    /// are evicted.
    held: TiVec<QueueId, RefCell<HeldCache>>,
    /// Per node, the jobs with pods bound there when first asked (sorted): a superset of the
    /// jobs whose units can free it for the rest of the action, as no pod binds there again
    /// within the cycle.
    jobs_on: OnceCell<JobsOn>,
    /// Per domain searched (topology, level, domain), the jobs with pods bound there, from
    /// `jobs_on`: many gangs search the same few domains.
    jobs_within: RefCell<HashMap<(usize, Level, usize), Rc<JobSet>>>,
    /// Per list of queues, topology and level, the sum of those queues' `held`, kept as pods
    /// are evicted: the gangs of one queue rank domains over the same queues.
    merged: RefCell<MergedCache>,
}

/// Per domain of one level, GPUs and CPU.
type HeldPerDomain = Vec<[i64; 2]>;

/// Per topology and level, what one queue's units hold per domain.
type HeldCache = HashMap<(usize, Level), Rc<HeldPerDomain>>;

/// Per list of queues, topology and level, what those queues' units hold per domain.
struct MergedCache {
    /// Each entry's place in `sums`.
    index: HashMap<(Vec<QueueId>, usize, Level), usize>,
    /// Per entry, its topology and level and the sums.
    sums: Vec<((usize, Level), HeldPerDomain)>,
    /// Per queue, the entries whose lists include it (brought up to date when it loses pods).
    of_queue: TiVec<QueueId, Vec<usize>>,
}

impl VictimPool {
    /// A pool for `mode` over the jobs that run in each leaf queue.
    pub fn new(mode: EvictMode, running: TiVec<QueueId, Vec<JobId>>, jobs: usize) -> VictimPool {
        let queues = running.len();
        VictimPool {
            mode,
            running,
            units: ti_vec![None; jobs],
            sorted: ti_vec![None; queues],
            stale: ti_vec![Vec::new(); queues],
            held: (0..queues).map(|_| RefCell::default()).collect(),
            jobs_on: OnceCell::new(),
            jobs_within: RefCell::default(),
            merged: RefCell::new(MergedCache {
                index: HashMap::default(),
                sums: Vec::new(),
                of_queue: ti_vec![Vec::new(); queues],
            }),
        }
    }

    /// Whether jobs of the queue ran when the action started.
    pub fn has_running(&self, q: QueueId) -> bool {
        !self.running[q].is_empty()
    }

    /// Forms and sorts the units of these queues where that is not done yet, and puts the
    /// units of jobs that lost pods back in order. Taking units never reorders the others of
    /// their queue (see the module's comment), so each new unit goes where a binary search by
    /// its key in the current state puts it: the order a full sort would give.
    pub fn prepare(&mut self, ssn: &Session, fw: &Framework, queues: &[QueueId]) {
        for &q in queues {
            if self.sorted[q].is_some() {
                self.reorder_stale(ssn, fw, q);
                continue;
            }
            for &j in &self.running[q] {
                if self.units[j].is_none() {
                    self.units[j] = Some(victim_units(ssn, j));
                }
            }
            let units = &self.units;
            let mut order: Vec<(JobId, usize)> = self.running[q]
                .iter()
                .flat_map(|&j| (0..units[j].as_ref().map_or(0, Vec::len)).map(move |i| (j, i)))
                .collect();
            order.sort_by_cached_key(|&(j, i)| fw.victim_key(ssn, self.mode, self.unit(j, i)));
            self.sorted[q] = Some(order);
            self.stale[q].clear();
        }
    }

    /// Forms the units of queue `q`'s stale jobs again and inserts them in its sorted list.
    fn reorder_stale(&mut self, ssn: &Session, fw: &Framework, q: QueueId) {
        let stale = std::mem::take(&mut self.stale[q]);
        if stale.is_empty() {
            return;
        }
        let mut order = self.sorted[q].take().expect("only sorted queues have stale jobs");
        order.retain(|(j, _)| !stale.contains(j));
        for &j in &stale {
            self.units[j] = Some(victim_units(ssn, j));
            for i in 0..self.unit_count(j) {
                let key = fw.victim_key(ssn, self.mode, self.unit(j, i));
                let at = order.partition_point(|&(oj, oi)| fw.victim_key(ssn, self.mode, self.unit(oj, oi)) < key);
                order.insert(at, (j, i));
            }
        }
        self.sorted[q] = Some(order);
    }

    fn unit_count(&self, job: JobId) -> usize {
        self.units[job].as_ref().map_or(0, Vec::len)
    }

    /// What the pods of queue `q` bound before the cycle hold per domain of `level` in
    /// topology `t`, made on first use.
    fn held(&self, ssn: &Session, q: QueueId, t: usize, level: Level) -> Rc<HeldPerDomain> {
        let mut cache = self.held[q].borrow_mut();
        let held = cache.entry((t, level)).or_insert_with(|| {
            let mut sums = vec![[0, 0]; domain_count(ssn, t, level)];
            for &j in &self.running[q] {
                add_job(ssn, j, (t, level), &mut sums, 1);
            }
            Rc::new(sums)
        });
        held.clone()
    }

    fn unit(&self, job: JobId, i: usize) -> &Victim {
        &self.units[job].as_ref().expect("units are formed before use")[i]
    }

    /// The units of these (prepared) queues, except those of `skip`, in eviction order.
    pub fn order<'p>(&'p self, queues: &[QueueId], skip: JobId) -> VictimOrder<'p> {
        let heads = queues.iter().map(|&queue| Head { queue, at: 0, key: None }).collect();
        VictimOrder { pool: self, skip, only: None, heads }
    }

    /// Marks the units of jobs that lost pods in decisions from index `since` on to be formed
    /// again, and put back in order in their queue's list.
    pub fn forget_evicted(&mut self, ssn: &Session, since: usize) {
        for &(pod, ..) in &ssn.decisions.evictions[since..] {
            let job = ssn.snap.pods[pod].job;
            let q = ssn.snap.jobs[job].queue;
            if self.sorted[q].is_some() && !self.stale[q].contains(&job) {
                self.stale[q].push(job);
            } else if self.sorted[q].is_none() {
                self.units[job] = None;
            }
            // Victims are pods bound before the cycle, now releasing their nodes.
            let PodState::Releasing(n) = ssn.pod_state[pod] else { continue };
            for (&(t, level), sums) in self.held[q].borrow_mut().iter_mut() {
                take_pod(ssn, pod, n, (t, level), Rc::<HeldPerDomain>::make_mut(sums));
            }
            let merged = &mut *self.merged.borrow_mut();
            for &at in &merged.of_queue[q] {
                let (level, sums) = &mut merged.sums[at];
                take_pod(ssn, pod, n, *level, sums);
            }
        }
    }
}

/// Where the merge stands in one queue's list.
#[derive(Clone)]
struct Head {
    queue: QueueId,
    at: usize,
    /// The key of the unit at `at`, once computed for the current state of the queue.
    key: Option<VictimKey>,
}

/// The units of some queues of a [`VictimPool`] in eviction order, taken one at a time
/// (cloned to search again from the same point, e.g. in another domain).
#[derive(Clone)]
pub struct VictimOrder<'p> {
    pool: &'p VictimPool,
    skip: JobId,
    /// When set, the only jobs whose units the order yields.
    only: Option<Rc<JobSet>>,
    heads: Vec<Head>,
}

impl<'p> VictimOrder<'p> {
    /// The unit with the lowest key in the current state; ties go to the queue listed first.
    pub fn next(&mut self, ssn: &Session, fw: &Framework) -> Option<&'p Victim> {
        let pool = self.pool;
        let mut best: Option<(usize, VictimKey)> = None;
        for (h, head) in self.heads.iter_mut().enumerate() {
            let list = pool.sorted[head.queue].as_deref().unwrap_or(&[]);
            while list.get(head.at).is_some_and(|&(j, _)| !yields(self.skip, &self.only, j)) {
                head.at += 1;
            }
            let Some(&(j, i)) = list.get(head.at) else { continue };
            let key = *head.key.get_or_insert_with(|| fw.victim_key(ssn, pool.mode, pool.unit(j, i)));
            if best.as_ref().is_none_or(|(_, b)| key < *b) {
                best = Some((h, key));
            }
        }
        let (h, _) = best?;
        let head = &mut self.heads[h];
        let (j, i) = pool.sorted[head.queue].as_deref().expect("listed queues are prepared")[head.at];
        head.at += 1;
        head.key = None;
        Some(pool.unit(j, i))
    }

    /// Every unit of the order's queues (taken or not, except those of the skipped job), in
    /// no particular order.
    pub fn units(&self) -> impl Iterator<Item = &'p Victim> + '_ {
        let pool = self.pool;
        self.heads
            .iter()
            .flat_map(move |h| pool.sorted[h.queue].as_deref().unwrap_or(&[]))
            .filter(|&&(j, _)| yields(self.skip, &self.only, j))
            .map(move |&(j, i)| pool.unit(j, i))
    }

    /// Per domain of `level` in topology `t` (per node at its node level), the GPUs and CPU
    /// that the pods of the order's queues bound before the cycle (those of the skipped job
    /// excepted) run with there: what its units could free, at most.
    pub fn held_per_domain(&self, ssn: &Session, t: usize, level: Level) -> HeldPerDomain {
        let pool = self.pool;
        let queues: Vec<QueueId> = self.heads.iter().map(|h| h.queue).collect();
        let mut sums = {
            let merged = &mut *pool.merged.borrow_mut();
            let key = (queues, t, level);
            let at = match merged.index.get(&key) {
                Some(&at) => at,
                None => {
                    let at = merged.sums.len();
                    let mut sums = vec![[0, 0]; domain_count(ssn, t, level)];
                    for &q in &key.0 {
                        for (total, held) in sums.iter_mut().zip(pool.held(ssn, q, t, level).iter()) {
                            total[0] += held[0];
                            total[1] += held[1];
                        }
                        merged.of_queue[q].push(at);
                    }
                    merged.sums.push(((t, level), sums));
                    merged.index.insert(key, at);
                    at
                }
            };
            merged.sums[at].1.clone()
        };
        if self.heads.iter().any(|h| h.queue == ssn.snap.jobs[self.skip].queue) {
            add_job(ssn, self.skip, (t, level), &mut sums, -1);
        }
        sums
    }

    /// The same order from where it stands, restricted to the units of jobs with pods on
    /// `nodes`, the nodes of `domain` (topology, level, domain): the units a search inside
    /// one domain looks at, found without ranking the rest. Skipping units changes no
    /// queue's state, so these come in the same order as in this one.
    pub fn within(&self, ssn: &Session, domain: (usize, Level, usize), nodes: &[NodeId]) -> VictimOrder<'p> {
        let jobs_on = self.pool.jobs_on.get_or_init(|| JobsOn::new(ssn));
        let mut cache = self.pool.jobs_within.borrow_mut();
        let jobs = cache.entry(domain).or_insert_with(|| {
            let mut jobs = JobSet::new(ssn.snap.jobs.len());
            nodes.iter().flat_map(|&n| jobs_on.of(n)).for_each(|&j| jobs.insert(j));
            Rc::new(jobs)
        });
        VictimOrder { only: Some(jobs.clone()), ..self.clone() }
    }

    /// The state of `queue` changed (a unit of it was taken): its head is ranked again.
    pub fn rerank(&mut self, queue: QueueId) {
        for head in self.heads.iter_mut().filter(|h| h.queue == queue) {
            head.key = None;
        }
    }
}

/// Whether an order skipping `skip` and keeping to `only` yields the units of `job`.
fn yields(skip: JobId, only: &Option<Rc<JobSet>>, job: JobId) -> bool {
    job != skip && only.as_ref().is_none_or(|only| only.contains(job))
}

/// Per node, the jobs with pods bound there, each once, in job order, all in one list (no
/// list per node to grow).
struct JobsOn {
    /// Where each node's jobs start in `jobs`, and how many there are.
    ranges: TiVec<NodeId, (usize, usize)>,
    jobs: Vec<JobId>,
}

impl JobsOn {
    fn new(ssn: &Session) -> JobsOn {
        let bound = || {
            ssn.pod_state.iter_enumerated().filter_map(|(p, state)| match *state {
                PodState::Bound(n) => Some((n, ssn.snap.pods[p].job)),
                _ => None,
            })
        };
        let mut ranges: TiVec<NodeId, (usize, usize)> = ti_vec![(0, 0); ssn.snap.nodes.len()];
        bound().for_each(|(n, _)| ranges[n].1 += 1);
        let mut start = 0;
        for range in ranges.iter_mut() {
            (range.0, start) = (start, start + range.1);
            range.1 = 0;
        }
        let mut jobs = vec![JobId(0); start];
        // Pods are in job order, so a job's pods on a node come one after another.
        for (n, job) in bound() {
            let (at, len) = &mut ranges[n];
            if *len == 0 || jobs[*at + *len - 1] != job {
                jobs[*at + *len] = job;
                *len += 1;
            }
        }
        JobsOn { ranges, jobs }
    }

    fn of(&self, n: NodeId) -> &[JobId] {
        let (at, len) = self.ranges[n];
        &self.jobs[at..at + len]
    }
}

/// A set of jobs, one bit each: a search inside a domain asks it of every unit it passes.
struct JobSet(Vec<u64>);

impl JobSet {
    fn new(jobs: usize) -> JobSet {
        JobSet(vec![0; jobs.div_ceil(64)])
    }

    fn insert(&mut self, job: JobId) {
        self.0[usize::from(job) / 64] |= 1 << (usize::from(job) % 64);
    }

    fn contains(&self, job: JobId) -> bool {
        self.0[usize::from(job) / 64] & (1 << (usize::from(job) % 64)) != 0
    }
}

/// How many domains a level of topology `t` has (nodes, at its node level).
fn domain_count(ssn: &Session, t: usize, level: Level) -> usize {
    let topo = &ssn.snap.topologies[t];
    if level == topo.node_level() {
        ssn.snap.nodes.len()
    } else {
        topo.domains[level].len()
    }
}

/// Adds (`sign` 1) or takes away (-1) the GPUs and CPU of a job's pods bound before the
/// cycle and still running, per domain of `level` in topology `t` (each task's requests
/// looked up once).
fn add_job(ssn: &Session, job: JobId, (t, level): (usize, Level), sums: &mut [[i64; 2]], sign: i64) {
    let topo = &ssn.snap.topologies[t];
    for task in &ssn.snap.jobs[job].tasks {
        let keys = Class::keys(ssn.snap, |r| task.requests[r]);
        for &p in &task.pods {
            let PodState::Bound(n) = ssn.pod_state[p] else { continue };
            if let Some(d) = topo.domain_at(level, n) {
                sums[d][0] += sign * keys[0];
                sums[d][1] += sign * keys[1];
            }
        }
    }
}

/// Takes away the GPUs and CPU of a pod that ran on `node` from its domain of `level` in
/// topology `t`.
fn take_pod(ssn: &Session, pod: PodId, node: NodeId, (t, level): (usize, Level), sums: &mut [[i64; 2]]) {
    if let Some(d) = ssn.snap.topologies[t].domain_at(level, node) {
        let req = ssn.requests(pod);
        let keys = Class::keys(ssn.snap, |r| req[r]);
        sums[d][0] -= keys[0];
        sums[d][1] -= keys[1];
    }
}
