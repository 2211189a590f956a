//! Running limits: a queue runs at most `maxRunningJobs` jobs and `maxRunningPods` pods at
//! once, counted over its whole subtree (so a department's limit bounds its projects
//! together), as YuniKorn's `maxapplications` and Volcano users ask. A job counts as running
//! while it holds a pod, bound or pipelined; pods, likewise. A job beyond the limit stays
//! admitted and waits, saying which queue holds it back; a job already running may still
//! grow within the pod limit. Evicting a whole job frees its place, so priority preemption
//! within a queue at its limit swaps jobs rather than adding one.

use std::fmt;

use crate::plugin::{Hook, Plugin, Rule, ShareBound, Subject, Verdict, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, QueueId};
use crate::why::Ending;

/// The running limits plugin.
#[derive(Default)]
pub struct RunningLimits {
    /// Whether any queue sets a running limit this cycle (most clusters set none: then no
    /// request walks its queue's ancestry for them).
    any: bool,
}

impl Plugin for RunningLimits {
    fn name(&self) -> &'static str {
        "runninglimits"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::Allocatable, Hook::MayReclaim]
    }

    fn on_open(&mut self, ssn: &mut Session) {
        let limited = |b: &crate::snapshot::QueueBounds| b.max_running_jobs.is_some() || b.max_running_pods.is_some();
        self.any = ssn.snap.queues.iter().any(|q| limited(&q.bounds));
    }

    fn allocatable<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res, _bound: ShareBound) -> Verdict<'s> {
        if !self.any {
            return Ok(());
        }
        let queue = ssn.snap.jobs[job].queue;
        ssn.snap.ancestry(queue).try_for_each(|q| within_limits(ssn, q, job, req))
    }

    /// Reclaim takes only from other queues, so it frees nothing in the job's own queue: a
    /// job its own queue's limits hold back does not reclaim (one held back by a parent's
    /// may, from the parent's other queues).
    fn may_reclaim<'s>(&self, ssn: &Session<'s>, job: JobId, req: &Res) -> Verdict<'s> {
        if !self.any {
            return Ok(());
        }
        within_limits(ssn, ssn.snap.jobs[job].queue, job, req)
    }
}

/// Whether queue `q` may run `req` more of `job`: one more running job, when the job holds
/// no pod yet, and the pods.
fn within_limits<'s>(ssn: &Session<'s>, q: QueueId, job: JobId, req: &Res) -> Verdict<'s> {
    let snap = ssn.snap;
    let bounds = &snap.queues[q].bounds;
    if let Some(max) = bounds.max_running_jobs.filter(|_| !ssn.holds_pods(job)) {
        let jobs = i64::from(ssn.queue_jobs[q]) + 1;
        if jobs > i64::from(max) {
            let e = (snap.pods_resource, jobs, i64::from(max));
            return Err(Why::exceeding(snap, Rule::RunningJobs, Subject::Queue(q), e));
        }
    }
    if let Some(max) = bounds.max_running_pods {
        let pods = ssn.queue_alloc[q][snap.pods_resource] + req[snap.pods_resource];
        if pods > i64::from(max) {
            let e = (snap.pods_resource, pods, i64::from(max));
            return Err(Why::exceeding(snap, Rule::RunningPods, Subject::Queue(q), e));
        }
    }
    Ok(())
}

/// The words for the running limits (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    if !matches!(why.rule, Rule::RunningJobs | Rule::RunningPods) {
        return None;
    }
    let what = if why.rule == Rule::RunningJobs { "job" } else { "pod" };
    let Some(e) = why.excess else {
        return Some(Ending::said(write!(f, "queue {s} is at its limit of running {what}s")));
    };
    let plural = if e.bound == 1 { "" } else { "s" };
    Some(Ending::said(write!(f, "queue {s} at its limit of {} running {what}{plural}", e.bound)))
}
