//! Replays a trace on a virtual clock through the production scheduling core.
//!
//! Jobs arrive at their submission times. Scheduling cycles run on a grid of `period`
//! seconds, but only when something changed since the last cycle (a submission, a completion,
//! or evictions and pipelined pods that the next cycle settles): a cycle on unchanged input
//! decides nothing new, so skipping it keeps the result and saves the time (with time-based
//! fair share, whose shares move at each tick, a cycle also runs each tick while work waits).
//! A job starts its
//! `duration` when all its pods are bound and frees its pods at its exact end. An evicted job
//! loses its progress since it last started and waits again (the checkpoint-free worst case).
//! A job the cycle resizes (under `drover-elastic`) restarts at its new size, all its pods
//! pending, keeping the work it did (see [`super::work`] for how its run time scales).
//! With `--declared-runtimes none`, the Drover policies learn run times from the jobs that
//! finished, per queue, as Queue status keeps them in a cluster, and keep the loans the
//! cycles record ([`drover_scheduler::snapshot::Job::borrowed_until`]) as PodGroup status
//! would.

use std::collections::BTreeMap;

use drover_api::{ResourceList, CPU, GPU};
use drover_scheduler::clock::Clock;
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::ids::{ti_vec, JobId, TiSlice, TiVec};
use drover_scheduler::run_times::{JobFeatures, RunTimeHistory};
use drover_scheduler::session::PodState;
use drover_scheduler::snapshot::{
    self, Constraints, JobConverter, JobInput, JobPhase, PodPhase, PodPhaseInput, RunTime, Snapshot, SnapshotError,
    TaskInput,
};
use drover_scheduler::usage::UsageLedger;

use super::ends::Ends;
use super::eta::{Eta, EtaLog};
use super::inputs::{node_inputs, queue_inputs, queue_name};
pub use super::inputs::{Cluster, DeclaredRuntimes, QueueQuota};
use super::policy::Policy;
use super::racks::Racks;
pub use super::record::{JobRecord, QueueShare, Replay};
use super::restart::restart;
use super::rows::TraceJob;
use super::work::Work;

/// CPUs a pod requests when the trace does not record them.
const DEFAULT_POD_CPUS: u32 = 1;

/// A submitted job that has not finished; the snapshot holds the job itself, at the same
/// index.
struct Live {
    job: usize,
    queue: String,
    /// Its work left and the pods it runs with.
    work: Work,
    /// What the scheduler is told of its run time.
    told: Told,
    /// Its namespace (its user's, as a team's would be) and GPUs, which run times are learned by.
    namespace: String,
    gpus: i64,
    gpus_per_pod: u32,
    bound: u32,
    started: Option<i64>,
    /// When it was submitted.
    submit: i64,
    /// Until it first starts, the start forecast each time it changed.
    etas: EtaLog,
}

/// What the scheduler is told of a job's run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    /// The work it has left, declared.
    Declared,
    /// What the queue's history predicts, when it predicts anything.
    Learned(Option<i64>),
    /// Nothing.
    Nothing,
}

impl Live {
    /// The run time the scheduler is told at its present size: the work it has left when it
    /// declares it, else the prediction.
    fn run_time(&self) -> Option<RunTime> {
        match self.told {
            Told::Declared => Some(RunTime::Declared(self.work.run_time())),
            Told::Learned(p) => p.map(RunTime::Learned),
            Told::Nothing => None,
        }
    }

    fn features(&self) -> JobFeatures<'_> {
        JobFeatures { namespace: &self.namespace, name: None, gpus: self.gpus }
    }
}

/// The cluster as the scheduler sees it, kept from cycle to cycle: the live jobs are added
/// as they are submitted and dropped as they finish, and each cycle's outcome is written
/// into it, instead of building it anew for every cycle.
struct World {
    snap: Snapshot,
    converter: JobConverter,
    config: SchedulerConfig,
    racks: Option<Racks>,
    /// Time-based fair share's ledger, as Queue status would keep it.
    ledger: UsageLedger,
    /// Learned run times by queue name, as Queue status would keep them.
    histories: BTreeMap<String, RunTimeHistory>,
    /// Seconds between cycles.
    period: i64,
}

/// Replays `trace` under `policy` on `cluster`.
pub fn replay(trace: &[TraceJob], cluster: &Cluster, policy: Policy) -> Result<Replay, SnapshotError> {
    let topologies: Vec<_> = cluster.racks.filter(|r| r.aware).map(|r| r.topology()).into_iter().collect();
    let snap =
        snapshot::build_with_topologies(&node_inputs(cluster), &queue_inputs(cluster, policy), &topologies, &[])?;
    let converter = JobConverter::new(&snap);
    let config = policy.config(&cluster.config);
    // With time-based fair share, shares change at each tick even when no job comes or goes:
    // while work waits, a cycle runs at least once a tick, as the scheduler's would.
    let tick = config.time_based().map(|t| i64::from(t.tick_seconds));
    let mut world = World {
        snap,
        converter,
        config,
        racks: cluster.racks,
        ledger: UsageLedger::default(),
        histories: BTreeMap::new(),
        period: cluster.period,
    };
    let total_gpus = cluster.nodes * cluster.gpus_per_node;
    let fits_empty = |j: &TraceJob| {
        j.gpus_per_pod > 0 && j.gpus_per_pod <= cluster.gpus_per_node && j.pods * j.gpus_per_pod <= total_gpus
    };
    let mut order: Vec<usize> = (0..trace.len()).collect();
    order.sort_by_key(|&i| (trace[i].submit, i));
    let mut next_submit = 0;
    let mut records: Vec<JobRecord> = (0..trace.len())
        .map(|job| JobRecord {
            job,
            finish: None,
            deadlocked: false,
            evicted_pods: 0,
            work_lost: 0,
            ran: 0,
            shrinks: 0,
            grows: 0,
            racks: None,
            first_start: None,
            eta_at_submission: None,
            eta_at_half_wait: None,
        })
        .collect();
    let mut live: TiVec<JobId, Live> = TiVec::new();
    let mut ends = Ends::new(trace.len());
    let mut next_cycle: Option<i64> = None;
    let grid = |t: i64| {
        t.div_euclid(cluster.period) * cluster.period + if t % cluster.period == 0 { 0 } else { cluster.period }
    };
    let mut out = Replay {
        jobs: Vec::new(),
        allocation: vec![(0, 0)],
        busy_while_waiting: (0, 0),
        cycles: 0,
        queue_shares: BTreeMap::new(),
        contended: 0,
        elastic: policy.elastic(),
    };
    let mut fair: BTreeMap<String, i64> = BTreeMap::new();
    let mut now = order.first().map_or(0, |&i| trace[i].submit);

    loop {
        let submit_at = order.get(next_submit).map(|&i| trace[i].submit);
        let Some(t) = [submit_at, ends.next_end(), next_cycle].into_iter().flatten().min() else { break };
        let waiting_fits = live.iter().any(|l| l.started.is_none() && fits_empty(&trace[l.job]));
        account(&mut out, &live, &fair, t - now, waiting_fits);
        now = t;
        let mut changed = false;
        let mut finished = false;
        while let Some((j, end)) = ends.pop_due(now) {
            records[j].finish = Some(end);
            finished = true;
        }
        if finished {
            for l in live.iter() {
                let record = &mut records[l.job];
                if let (Some(end), Some(start)) = (record.finish, l.started) {
                    record.ran += end - start;
                    if matches!(l.told, Told::Learned(_)) {
                        let history = world.histories.entry(l.queue.clone()).or_default();
                        history.learn(&l.features(), record.ran, end);
                    }
                }
            }
            let keep: TiVec<JobId, bool> = live.iter().map(|l| records[l.job].finish.is_none()).collect();
            world.snap.retain_jobs(|j| keep[j]);
            live.retain(|l| records[l.job].finish.is_none());
            changed = true;
        }
        while let Some(&i) = order.get(next_submit).filter(|&&i| trace[i].submit <= now) {
            let (meta, input) = submit(&trace[i], i, cluster, policy);
            world.converter.push(&mut world.snap, &input)?;
            live.push(meta);
            next_submit += 1;
            changed = true;
        }
        if changed {
            let at = grid(now);
            next_cycle = Some(next_cycle.map_or(at, |c| c.min(at)));
        }
        if next_cycle == Some(now) {
            next_cycle = None;
            out.cycles += 1;
            if cycle(&mut live, &mut world, now, &mut records, &mut ends, &mut fair) {
                next_cycle = Some(now + cluster.period);
            } else if let Some(tick) = tick.filter(|_| live.iter().any(|l| l.started.is_none())) {
                next_cycle = Some(grid(now.div_euclid(tick) * tick + tick));
            }
        }
        let gpus = allocated(&live);
        if out.allocation.last().is_some_and(|&(_, g)| g != gpus) {
            out.allocation.push((now, gpus));
        }
    }
    for l in &live {
        records[l.job].deadlocked = l.bound > 0 && l.started.is_none();
    }
    out.jobs = records;
    Ok(out)
}

/// GPUs held by the live jobs' bound pods.
fn allocated(live: &TiSlice<JobId, Live>) -> u32 {
    live.iter().map(|l| l.bound * l.gpus_per_pod).sum()
}

/// Adds an interval of `dt` seconds, in the state it had, to the time integrals.
fn account(out: &mut Replay, live: &TiSlice<JobId, Live>, fair: &BTreeMap<String, i64>, dt: i64, waiting_fits: bool) {
    let dt = dt as u128;
    if waiting_fits {
        out.busy_while_waiting.0 += u128::from(allocated(live)) * dt;
        out.busy_while_waiting.1 += dt;
    }
    if !live.iter().any(|l| l.started.is_none()) {
        return;
    }
    out.contended += dt;
    let mut by_queue: BTreeMap<&str, i64> = fair.keys().map(|q| (q.as_str(), 0)).collect();
    for l in live {
        *by_queue.entry(l.queue.as_str()).or_default() += i64::from(l.bound * l.gpus_per_pod);
    }
    for (q, alloc) in by_queue {
        let f = fair.get(q).copied().unwrap_or(0);
        let share = out.queue_shares.entry(q.to_string()).or_default();
        share.allocated += alloc as f64 * dt as f64;
        share.fair += f as f64 * dt as f64;
        share.error += (alloc - f).abs() as f64 * dt as f64;
    }
}

/// Runs one cycle on the live jobs, writes its outcome into the world's snapshot (evicted
/// pods pending again, as if evictions ended at once, pipelined ones pending and
/// nominated to their node: their gang's kept claim, and the jobs it resized restarted at
/// their new size) and records the leaf queues' GPU fair shares in `fair`; true when
/// evictions, pipelined pods or restarts need another cycle to settle.
///
/// Not [`drover_scheduler::carry::carry`]: the replay keeps one snapshot and writes into it
/// (rebuilding it from inputs each cycle would dominate a long trace), and a trace job's run
/// time starts when all its pods run, not when the first one does, so its end comes from the
/// replay's own clock.
fn cycle(
    live: &mut TiSlice<JobId, Live>,
    world: &mut World,
    now: i64,
    records: &mut [JobRecord],
    ends: &mut Ends,
    fair: &mut BTreeMap<String, i64>,
) -> bool {
    world.snap.clock = Clock::at(now);
    predict(live, world, now);
    if let Some(time_based) = world.config.time_based() {
        world.ledger.step(&mut world.snap, &time_based);
    }
    let outcome = run_cycle(&world.snap, &world.config);
    let snap = &mut world.snap;
    if let Some(g) = snap.gpu {
        for (q, queue) in snap.queues.iter_enumerated().filter(|(_, q)| q.children.is_empty() && !q.name.is_empty()) {
            fair.insert(queue.name.clone(), outcome.queues[q].fair_share[g]);
        }
    }
    let mut evicted: TiVec<JobId, u32> = ti_vec![0; live.len()];
    let mut bound: TiVec<JobId, u32> = ti_vec![0; live.len()];
    for (pod, state) in snap.pods.iter_mut().zip(&outcome.pod_state) {
        pod.nominated = match *state {
            PodState::Pipelined(n) => Some(n),
            _ => None,
        };
        pod.phase = match *state {
            PodState::Bound(n) | PodState::Allocated(n) => {
                bound[pod.job] += 1;
                PodPhase::Bound(n)
            }
            PodState::Releasing(_) => {
                evicted[pod.job] += 1;
                PodPhase::Pending
            }
            PodState::Pending | PodState::Pipelined(_) => PodPhase::Pending,
        };
    }
    for &(j, until) in &outcome.decisions.loans {
        snap.jobs[j].borrowed_until = Some(until);
    }
    for (j, l) in live.iter_mut_enumerated() {
        snap.jobs[j].phase = outcome.job_phase[j];
        l.bound = bound[j];
        if let Some(f) = outcome.forecasts[j].filter(|_| records[l.job].first_start.is_none()) {
            let eta = Eta::of(&f, now, world.period);
            records[l.job].eta_at_submission.get_or_insert(eta);
            l.etas.note(eta);
        }
        if evicted[j] > 0 {
            snap.jobs[j].borrowed_until = None;
            let record = &mut records[l.job];
            record.evicted_pods += evicted[j];
            if let Some(start) = l.started.take() {
                record.work_lost += (now - start) * i64::from(l.work.pods());
                ends.cancel(l.job);
            }
        }
        if l.started.is_none() && l.bound == l.work.pods() {
            l.started = Some(now);
            if records[l.job].first_start.is_none() {
                first_started(l, &mut records[l.job], now);
            }
            ends.start(l.job, now + l.work.run_time());
            if let Some(racks) = &world.racks {
                records[l.job].racks = Some(racks_spanned(snap, j, racks));
            }
        }
        snap.jobs[j].ends_at = l.started.zip(l.run_time()).map(|(start, d)| start + d.seconds());
        snap.jobs[j].started_at = l.started;
    }
    let resizes = &outcome.decisions.resizes;
    if !resizes.is_empty() {
        let sizes: BTreeMap<JobId, u32> = resizes.iter().map(|r| (r.job, r.to)).collect();
        for (&j, &to) in &sizes {
            let l = &mut live[j];
            resize(l, &mut records[l.job], ends, now, to);
        }
        restart(snap, &sizes);
        for &j in sizes.keys() {
            snap.jobs[j].borrowed_until = None;
            snap.jobs[j].run_time = live[j].run_time();
        }
    }
    !outcome.decisions.evictions.is_empty() || !outcome.decisions.pipelined.is_empty() || !resizes.is_empty()
}

/// Records a job's first start and the forecast it had been given last before half of its
/// wait had passed.
fn first_started(l: &mut Live, record: &mut JobRecord, now: i64) {
    record.first_start = Some(now);
    record.eta_at_half_wait = l.etas.at_half_wait(l.submit, now);
}

/// Refreshes what the scheduler is told of the run time of the jobs that learn theirs, from
/// what their queue's history predicts now: for a running job, given how long it has run.
fn predict(live: &mut TiSlice<JobId, Live>, world: &mut World, now: i64) {
    for (j, l) in live.iter_mut_enumerated() {
        if !matches!(l.told, Told::Learned(_)) {
            continue;
        }
        let elapsed = l.started.map_or(0, |s| now - s);
        let predicted = world.histories.get(&l.queue).and_then(|h| h.predict(&l.features(), elapsed));
        l.told = Told::Learned(predicted.as_ref().map(|p| p.seconds));
        let job = &mut world.snap.jobs[j];
        job.run_time = l.run_time();
        job.run_time_range = predicted.map(|p| p.range);
        job.ends_at = l.started.zip(job.run_time).map(|(start, d)| start + d.seconds());
    }
}

/// Stops a job the cycle resized, keeping the work it did (a checkpoint), to start it again
/// with `to` pods once a cycle places them.
fn resize(l: &mut Live, record: &mut JobRecord, ends: &mut Ends, now: i64, to: u32) {
    if let Some(start) = l.started.take() {
        l.work.progress(now - start);
        record.ran += now - start;
        ends.cancel(l.job);
    }
    if to < l.work.pods() {
        record.shrinks += 1;
    } else {
        record.grows += 1;
    }
    l.work.resize(to);
    l.bound = 0;
}

/// The racks job `j`'s bound pods are in.
fn racks_spanned(snap: &Snapshot, j: JobId, racks: &Racks) -> u32 {
    let mut seen: Vec<usize> = snap.jobs[j]
        .tasks
        .iter()
        .flat_map(|t| &t.pods)
        .filter_map(|&p| match snap.pods[p].phase {
            PodPhase::Bound(n) => Some(racks.rack_of(n.into())),
            PodPhase::Pending | PodPhase::Releasing(_) => None,
        })
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len() as u32
}

/// A submitted job as the replay tracks it and as the scheduler sees it: one task of `pods`
/// identical pods, in the queue its user (or, without one, its id) hashes to.
fn submit(job: &TraceJob, index: usize, cluster: &Cluster, policy: Policy) -> (Live, JobInput) {
    let cpus = i64::from(job.cpus_per_pod.unwrap_or(DEFAULT_POD_CPUS));
    let mut requests = BTreeMap::from([(CPU.to_string(), cpus * 1000)]);
    if job.gpus_per_pod > 0 {
        requests.insert(GPU.to_string(), i64::from(job.gpus_per_pod));
    }
    let key = if job.user.is_empty() { &job.id } else { &job.user };
    let told = match (policy.declares_run_times(), cluster.declared_runtimes) {
        (false, _) => Told::Nothing,
        (true, DeclaredRuntimes::Exact) => Told::Declared,
        (true, DeclaredRuntimes::None) => Told::Learned(None),
    };
    let input = JobInput {
        name: format!("j{index}"),
        namespace: "trace".into(),
        queue: queue_name(cluster, key),
        priority_class: "trace".into(),
        priority: policy.priority(job.duration),
        preemptible: true,
        min_member: policy.min_member(job.pods),
        min_resources: None,
        created_at: job.submit,
        phase: JobPhase::Pending,
        tasks: vec![TaskInput {
            name: "w".into(),
            min_available: 0,
            requests: ResourceList(requests),
            constraints: Constraints::default(),
            pods: vec![PodPhaseInput::Pending; job.pods as usize],
            topology: None,
            slices: None,
        }],
        run_time: (told == Told::Declared).then_some(RunTime::Declared(job.duration)),
        ends_at: None,
        preempted_at: None,
        started_at: None,
        topology: cluster
            .racks
            .filter(|r| r.aware)
            .and_then(|r| r.request(job.pods * job.gpus_per_pod, cluster.nodes, cluster.gpus_per_node)),
        resize: policy.resize(job.pods, job.gpus_per_pod),
    };
    let live = Live {
        job: index,
        queue: input.queue.clone(),
        work: Work::new(job.duration, job.pods),
        told,
        namespace: if job.user.is_empty() { "trace".to_string() } else { job.user.clone() },
        gpus: i64::from(job.pods * job.gpus_per_pod),
        gpus_per_pod: job.gpus_per_pod,
        bound: 0,
        started: None,
        submit: job.submit,
        etas: EtaLog::default(),
    };
    (live, input)
}
