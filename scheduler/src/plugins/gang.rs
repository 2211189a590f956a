//! Gang: a pod group is ready only with `minMember` pods (and each task's `minAvailable`)
//! running. Placement of a gang's minimum is all-or-nothing (see the allocate action), and
//! eviction never leaves a gang running below its minimum: a victim is either one pod above
//! the minimum (elastic) or every running pod of the job.

use std::fmt;

use crate::plugin::{EvictMode, Hook, Plugin, Rule, Subject, Verdict, Victim, Why};
use crate::session::Session;
use crate::snapshot::JobId;
use crate::why::{AdviceFacts, Ending};

/// The gang plugin.
pub struct Gang;

impl Plugin for Gang {
    fn name(&self) -> &'static str {
        "gang"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::JobReady, Hook::MayEvict]
    }

    fn job_ready(&self, ssn: &Session, job: JobId) -> Option<bool> {
        Some(ssn.job_ready(job))
    }

    fn may_evict<'s>(&self, ssn: &Session<'s>, _mode: EvictMode, _preemptor: JobId, v: &Victim) -> Verdict<'s> {
        let whole = if v.elastic {
            v.pods.len() == 1 && ssn.can_lose_one(v.job, ssn.snap.pods[v.pods[0]].task)
        } else {
            // The unit's pods are distinct: holding as many running pods as the job runs,
            // all of them running, it is the whole job.
            v.pods.len() == ssn.job_running[v.job] as usize
                && v.pods.iter().all(|&p| ssn.pod_state[p].running_on().is_some())
        };
        if whole {
            Ok(())
        } else {
            Err(Why::new(ssn.snap, Rule::BreaksGang, Subject::Job(v.job)))
        }
    }

    fn victim_rank_precedence(&self) -> Option<u8> {
        Some(1)
    }

    fn victim_rank(&self, _ssn: &Session, _mode: EvictMode, v: &Victim) -> i64 {
        i64::from(!v.elastic)
    }
}

/// The words for the gang rules (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    match why.rule {
        Rule::BreaksGang => Some(Ending::figures(write!(f, "evicting it would leave job {s} below its gang minimum"))),
        Rule::GangShortOfPods => {
            let Some(e) = why.excess else {
                return Some(Ending::said(write!(f, "job {s} has fewer pods than its gang minimum")));
            };
            let more = e.bound - e.amount;
            let plural = if more == 1 { "" } else { "s" };
            Some(Ending::said(write!(
                f,
                "job {s} has {} of the {} pods its gang minimum needs: {more} more pod{plural} must be created",
                e.amount, e.bound
            )))
        }
        _ => None,
    }
}

/// The gang rules' advice (see [`crate::why::Advice`]): the pods it lacks.
pub(crate) fn advice(a: &AdviceFacts) -> Option<String> {
    let e = a.blocker.excess?;
    if a.blocker.rule != Rule::GangShortOfPods {
        return None;
    }
    let more = e.bound - e.amount;
    Some(format!(
        "{more} more pod{} of it (a controller may still be making them), or a gang minimum of at most {}",
        if more == 1 { "" } else { "s" },
        e.amount
    ))
}
