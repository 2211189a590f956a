//! One scheduling cycle: open a session on a snapshot, let plugins prepare (fair shares),
//! run the configured actions in order, and return what was decided and why the rest waits.

use std::time::{Duration, Instant};

use crate::actions::forbidden::Forbidden;
use crate::actions::{self, Ctx};
use crate::config::{ActionName, SchedulerConfig};
use crate::forecast::{self, Forecast};
use crate::framework::Framework;
use crate::ids::TiVec;
use crate::placement::Placer;
use crate::plugin::{Blocker, Reservation, ShareBound};
use crate::plugins;
use crate::queue_state::{self, QueueOutcome};
use crate::reservation::Reservations;
use crate::session::{Decisions, PodState, Session};
use crate::snapshot::{JobId, JobPhase, PodId, QueueId, Snapshot};

/// Everything a cycle produced.
#[derive(Debug, Clone)]
pub struct CycleOutcome {
    /// Bindings, evictions and pipelined pods.
    pub decisions: Decisions,
    /// Final state of every pod.
    pub pod_state: TiVec<PodId, PodState>,
    /// Phase of every job after the cycle.
    pub job_phase: TiVec<JobId, JobPhase>,
    /// Why each job with waiting pods waits.
    pub reasons: TiVec<JobId, Option<String>>,
    /// Per job, the structured refusal that gave its reason, where one did.
    pub blocked_by: TiVec<JobId, Option<Blocker>>,
    /// Every queue as the cycle left it: state, fair share, deserved quota, allocation.
    pub queues: TiVec<QueueId, QueueOutcome>,
    /// Gangs that wait with nodes reserved for them, and when they are expected to start.
    pub reservations: Vec<Reservation>,
    /// Per job, for gangs that still wait: their position and expected start.
    pub forecasts: TiVec<JobId, Option<Forecast>>,
    /// Per job, for the first gangs that wait for room: victims that would seat them now,
    /// which the rules forbid taking.
    pub forbidden: TiVec<JobId, Option<Forbidden>>,
}

/// Runs one cycle of `config` on `snap`.
pub fn run_cycle(snap: &Snapshot, config: &SchedulerConfig) -> CycleOutcome {
    run_cycle_observed(snap, config, &mut |_, _, _| {})
}

/// Runs one cycle, telling `observe` after each action how long it took and the decisions so
/// far (for per-action latency metrics and benchmarks).
pub fn run_cycle_observed(
    snap: &Snapshot,
    config: &SchedulerConfig,
    observe: &mut dyn FnMut(ActionName, Duration, &Decisions),
) -> CycleOutcome {
    let mut fw = Framework::new(plugins::build(config));
    let mut ssn = Session::open(snap);
    fw.open(&mut ssn);
    if !config.actions.contains(&ActionName::Enqueue) {
        for phase in &mut ssn.job_phase {
            if *phase == JobPhase::Pending {
                *phase = JobPhase::Inqueue;
            }
        }
    }
    let mut placer = Placer::default();
    let mut reservations = Reservations::default();
    for &action in &config.actions {
        let started = Instant::now();
        let mut ctx = Ctx { ssn: &mut ssn, fw: &fw, placer: &mut placer, reservations: &mut reservations };
        match action {
            ActionName::Enqueue => actions::enqueue::run(&mut ctx),
            ActionName::Allocate => actions::allocate::run(&mut ctx),
            ActionName::Preempt => actions::preempt::run(&mut ctx),
            ActionName::Reclaim => actions::reclaim::run(&mut ctx),
            ActionName::Backfill => actions::backfill::run(&mut ctx),
            ActionName::Consolidation => actions::consolidate::run(&mut ctx),
            ActionName::Resize => actions::resize::run(&mut ctx),
        }
        observe(action, started.elapsed(), &ssn.decisions);
    }
    let mut ctx = Ctx { ssn: &mut ssn, fw: &fw, placer: &mut placer, reservations: &mut reservations };
    let forbidden = actions::forbidden::run(&mut ctx, &config.actions);
    close(&fw, ssn, reservations, forbidden)
}

/// What keeps a waiting job's next pod off the cluster, for a job no action gave a reason:
/// its queue's bound (and that refusal), else the nodes' conditions.
fn blocker(fw: &Framework, ssn: &Session, job: JobId) -> (String, Option<Blocker>) {
    let Some(pod) = ssn.pending_pods(job).next() else {
        return ("waiting for its pods to be re-created".to_string(), None);
    };
    match fw.allocatable(ssn, job, ssn.requests(pod), ShareBound::Idle) {
        Err(why) => (why.to_string(), Some(why.into())),
        Ok(()) => (Placer::default().explain(ssn, fw, pod, None), None),
    }
}

fn close(
    fw: &Framework,
    mut ssn: Session,
    reservations: Reservations,
    forbidden: TiVec<JobId, Option<Forbidden>>,
) -> CycleOutcome {
    let snap = ssn.snap;
    for j in snap.jobs.keys() {
        let states = || snap.jobs[j].tasks.iter().flat_map(|t| &t.pods).map(|&p| ssn.pod_state[p]);
        // A group with no pods yet has none waiting, but one refused admission still waits.
        let refused = ssn.job_phase[j] == JobPhase::Pending && states().next().is_none();
        if !refused && states().all(|s| s.running_on().is_some()) {
            ssn.clear_reason(j);
        } else if ssn.reasons[j].is_none() {
            let admission = format!("not admitted yet to queue {}", snap.queues[snap.jobs[j].queue].name);
            let why = match ssn.job_phase[j] {
                JobPhase::Pending => admission.as_str(),
                _ if ssn.job_pipelined[j] > 0 => "waiting for evicted pods to terminate",
                _ if states().any(|s| matches!(s, PodState::Releasing(_))) => "evicted pods are terminating",
                _ => "",
            };
            let (why, by) = match (why, ssn.gang_shortfall(j)) {
                ("", Some((short, by))) => (short, Some(by)),
                ("", None) => blocker(fw, &ssn, j),
                (why, _) => (why.to_string(), None),
            };
            ssn.set_refusal(j, why, by);
        }
        if fw.job_ready(&ssn, j) {
            ssn.job_phase[j] = JobPhase::Running;
        } else if ssn.job_phase[j] == JobPhase::Running {
            ssn.job_phase[j] = if ssn.job_running[j] == 0 { JobPhase::Pending } else { JobPhase::Inqueue };
        }
    }
    let queues = queue_state::outcomes(&ssn);
    let reservations = reservations.into_list();
    let forecasts = forecast::plan(fw, &ssn, &reservations);
    CycleOutcome {
        decisions: ssn.decisions,
        pod_state: ssn.pod_state,
        job_phase: ssn.job_phase,
        reasons: ssn.reasons,
        blocked_by: ssn.blocked_by,
        queues,
        reservations,
        forecasts,
        forbidden,
    }
}
