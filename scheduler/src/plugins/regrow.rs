//! Regrow: a job that lost pods to preemption or reclaim does not grow elastic pods again
//! until a minute has passed. Without it, an elastic job's evicted pods are re-created and
//! take back the capacity they were evicted from as soon as it is idle for a moment (before
//! the gang they made room for binds, or when a neighbour ends), only to be preempted again:
//! the same pods evicted over and over for nothing. Its gang minimum is not held back: a
//! job preempted whole starts again as soon as it fits.

use std::fmt;

use crate::plugin::{Hook, Plugin, Rule, ShareBound, Subject, Verdict, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::JobId;
use crate::why::{AdviceFacts, Ending};

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

/// The words for the regrow rule (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    if why.rule != Rule::RegrowDelay {
        return None;
    }
    let (snap, delay) = (why.snap(), REGROW_DELAY_SECONDS);
    let Subject::Job(j) = why.subject else {
        return Some(Ending::said(write!(f, "no elastic pods grow until {delay} s after a preemption")));
    };
    // Absolute times: a reason that counts seconds would change every cycle.
    let Some(at) = snap.jobs[j].preempted_at else {
        return Some(Ending::said(write!(
            f,
            "job {s} grows no elastic pods until {delay} s after it lost pods to preemption"
        )));
    };
    let (lost, grows) = (snap.time(at), snap.time(at.saturating_add(delay)));
    Some(Ending::figures(write!(
        f,
        "job {s} lost pods to preemption or reclaim at {lost} and grows no elastic pods until {grows}"
    )))
}

/// The regrow rule's advice (see [`crate::why::Advice`]): when its elastic pods may grow again.
pub(crate) fn advice(a: &AdviceFacts) -> Option<String> {
    let (Rule::RegrowDelay, Subject::Job(j)) = (a.blocker.rule, a.blocker.subject) else { return None };
    let snap = a.snap;
    let lost = snap.jobs[j].preempted_at.unwrap_or(snap.clock.now());
    let grows = snap.time(lost.saturating_add(REGROW_DELAY_SECONDS));
    Some(format!("time: its elastic pods may grow again at {grows}, if the other rules then allow"))
}
