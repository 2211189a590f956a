//! Why one job waits, as the core itself answers it: [`explain`] runs a real cycle on the
//! snapshot with the configuration the scheduler runs and reads the answer off the outcome —
//! whether the job starts, the reason it waits, its queue path with each queue's figures and
//! state, what would let it start, and its forecast (position and expected start). Nothing
//! here judges a rule again, so `drover explain` cannot disagree with the scheduler.

use crate::actions::forbidden::Forbidden;
use crate::config::SchedulerConfig;
use crate::cycle::{run_cycle, CycleOutcome};
use crate::forecast::Forecast;
use crate::plugins;
use crate::queue_state::QueueOutcome;
use crate::res::Res;
use crate::session::{PodState, Session};
use crate::snapshot::{JobId, JobPhase, QueueId, Snapshot};
use crate::why::{AdviceFacts, Blocker, Subject};

/// Where a job stands after the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its gang minimum does not run.
    Waiting,
    /// The cycle starts its gang minimum.
    Starting,
    /// Its gang minimum ran already (pods above it may still wait).
    Running,
}

impl Verdict {
    /// The verdict's name as the command line shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Waiting => "Waiting",
            Verdict::Starting => "Starting",
            Verdict::Running => "Running",
        }
    }
}

/// One queue of the job's path, as the cycle left it.
#[derive(Debug, Clone)]
pub struct PathQueue {
    /// The queue.
    pub queue: QueueId,
    /// Its state and figures after the cycle.
    pub outcome: QueueOutcome,
    /// Hard cap (`UNLIMITED` where none).
    pub limit: Res,
}

/// The core's answer about one job.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// Where the job stands.
    pub verdict: Verdict,
    /// Why pods of the job still wait (the reason the scheduler writes), if any do.
    pub reason: Option<String>,
    /// What the job asks for next: its gang minimum, or one more pod once that runs.
    pub needs: Res,
    /// The job's queue and its ancestors, leaf first.
    pub path: Vec<PathQueue>,
    /// What would let its waiting pods start.
    pub to_start: Vec<String>,
    /// While its gang waits: its positions and expected start.
    pub forecast: Option<Forecast>,
}

/// Runs one cycle of `config` on `snap` and explains `job` from its outcome.
pub fn explain(snap: &Snapshot, config: &SchedulerConfig, job: JobId) -> Explanation {
    let outcome = run_cycle(snap, config);
    let verdict = match (snap.jobs[job].phase, outcome.job_phase[job]) {
        (JobPhase::Running, JobPhase::Running) => Verdict::Running,
        (_, JobPhase::Running) => Verdict::Starting,
        _ => Verdict::Waiting,
    };
    let path = snap
        .ancestry(snap.jobs[job].queue)
        .map(|q| PathQueue { queue: q, outcome: outcome.queues[q].clone(), limit: snap.queues[q].limit.clone() })
        .collect();
    let needs = next_request(snap, job);
    let forbidden = outcome.forbidden[job].as_ref();
    let to_start = outcome.reasons[job].as_ref().map(|_| advice(snap, outcome.blocked_by[job], &needs, forbidden));
    Explanation {
        verdict,
        reason: outcome.reasons[job].clone(),
        needs,
        path,
        to_start: to_start.into_iter().collect(),
        forecast: outcome.forecasts[job],
    }
}

/// What would let a job that waits after the cycle `outcome` of `snap` start (what its status
/// shows every cycle): the same advice as [`explain`]'s, judged on the pods still waiting.
pub fn to_start(snap: &Snapshot, outcome: &CycleOutcome, job: JobId) -> Option<String> {
    outcome.reasons[job].as_ref()?;
    let mut waiting = Res::zero(snap.resources.len());
    for task in &snap.jobs[job].tasks {
        for &p in &task.pods {
            if matches!(outcome.pod_state[p], PodState::Pending | PodState::Pipelined(_)) {
                waiting.add(&task.requests);
            }
        }
    }
    Some(advice(snap, outcome.blocked_by[job], &waiting, outcome.forbidden[job].as_ref()))
}

/// What the job asks for at the start of the cycle: the pods that bring it to its gang
/// minimum, or its next pending pod once the minimum runs.
fn next_request(snap: &Snapshot, job: JobId) -> Res {
    let ssn = Session::open(snap);
    let mut pods = ssn.gang_pods(job);
    if pods.is_empty() {
        pods.extend(ssn.pending_pods(job).take(1));
    }
    ssn.sum_requests(&pods)
}

/// What would let the job's waiting pods start, from the refusal that gave its reason and
/// what the job asks for: concrete for a queue's or the cluster's bound, else the victims
/// the rules forbid when the cycle found some, else about nodes.
fn advice(snap: &Snapshot, by: Option<Blocker>, need: &Res, forbidden: Option<&Forbidden>) -> String {
    let nodes = match forbidden {
        Some(f) => forbidden_victims(snap, f),
        None => "room on nodes its pods fit: running pods finish or are evicted for it, or nodes are added".to_string(),
    };
    let Some(blocker) = by else { return nodes };
    let (queue, limit, deserved) = match (blocker.subject, blocker.excess) {
        (Subject::Queue(id), Some(e)) => {
            let [limit, deserved] = [true, false].map(|limit| setting(snap, id, e.resource, limit));
            (snap.queues[id].name.as_str(), limit, deserved)
        }
        _ => ("", String::new(), String::new()),
    };
    plugins::advice(&AdviceFacts { snap, blocker, need, queue, limit, deserved }).unwrap_or(nodes)
}

/// The setting that governs queue `q`'s limit (`limit`) or deserved quota of `resource`, as
/// advice names it: the node pool field of the Project or Department the queue is made from
/// (the controllers put back any edit of the queue itself), else the queue's own.
fn setting(snap: &Snapshot, q: crate::snapshot::QueueId, resource: usize, limit: bool) -> String {
    let queue = &snap.queues[q];
    let r = &snap.resources[resource];
    let field = match (limit, Some(resource) == snap.gpu, r.as_str()) {
        (true, true, _) => Some("gpuLimit"),
        (false, true, _) => Some("gpu"),
        (false, false, "cpu") => Some("cpu"),
        (false, false, "memory") => Some("memory"),
        _ => None,
    };
    match (&queue.owner, field) {
        (Some(o), Some(field)) => {
            format!("{} {}'s node pool {} {field} (queue {} is made from it)", o.kind, o.name, o.pool, queue.name)
        }
        _ if limit => format!("queue {}'s limit of {r}", queue.name),
        _ => format!("queue {}'s deserved {r}", queue.name),
    }
}

/// At most this many victim jobs are named; the rest are counted.
const NAMED_VICTIMS: usize = 3;

/// "Evicting these would seat it, but this rule says no."
fn forbidden_victims(snap: &Snapshot, f: &Forbidden) -> String {
    let mut jobs: Vec<String> = f.jobs.iter().take(NAMED_VICTIMS).map(|&j| snap.jobs[j].key()).collect();
    if f.jobs.len() > NAMED_VICTIMS {
        jobs.push(format!("{} more", f.jobs.len() - NAMED_VICTIMS));
    }
    let place = f.domain.as_ref().map(|(level, d)| format!(" in {level} {d}")).unwrap_or_default();
    format!(
        "evicting {} pod(s) of {} would let it start now{place}, but the rules forbid it ({})",
        f.pods,
        jobs.join(", "),
        f.why
    )
}
