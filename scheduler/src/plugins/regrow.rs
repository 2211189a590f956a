//! Regrow: a job that lost pods to preemption or reclaim does not grow elastic pods again
//! until a minute has passed. Without it, an elastic job's evicted pods are re-created and
//! take back the capacity they were evicted from as soon as it is idle for a moment (before
//! the gang they made room for binds, or when a neighbour ends), only to be preempted again:
//! the same pods evicted over and over for nothing. Its gang minimum is not held back: a
//! job preempted whole starts again as soon as it fits.

use crate::plugin::{Hook, Plugin, Rule, ShareBound, Subject, Verdict, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::JobId;

/// How long after losing pods to preemption or reclaim a job's elastic pods wait.
pub const REGROW_DELAY_SECONDS: i64 = 60;

/// The regrow plugin.
pub struct Regrow;

impl Plugin for Regrow {
    fn name(&self) -> &'static str {
        "regrow"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::Allocatable, Hook::MayReclaim]
    }

    fn allocatable<'s>(&self, ssn: &Session<'s>, job: JobId, _req: &Res, _bound: ShareBound) -> Verdict<'s> {
        regrow(ssn, job)
    }

    fn may_reclaim<'s>(&self, ssn: &Session<'s>, job: JobId, _req: &Res) -> Verdict<'s> {
        regrow(ssn, job)
    }
}

/// Refuses more pods for a job whose gang minimum runs while its last preemption is recent.
fn regrow<'s>(ssn: &Session<'s>, job: JobId) -> Verdict<'s> {
    let snap = ssn.snap;
    let recent =
        snap.jobs[job].preempted_at.is_some_and(|t| !snap.clock.reached(t.saturating_add(REGROW_DELAY_SECONDS)));
    if recent && ssn.job_ready(job) {
        return Err(Why::new(snap, Rule::RegrowDelay, Subject::Job(job)));
    }
    Ok(())
}
