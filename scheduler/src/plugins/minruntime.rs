//! Minimum run time: a job that started less than its queue's minimum run time ago is not
//! preempted (`preemptMinRuntimeSeconds`) or reclaimed (`reclaimMinRuntimeSeconds`), so
//! that work just started does not lose its start-up for nothing (KAI's `preemptMinRuntime`
//! and `reclaimMinRuntime`). The times are the victim's queue's, inherited down the queue
//! tree; absent, nothing is protected. A job's start is when its earliest running pod
//! started, as the kubelet reports it: a tenant cannot make its job look younger without
//! giving up every pod it runs.

use std::fmt;

use crate::plugin::{EvictMode, Hook, Plugin, Rule, Subject, Verdict, Victim, Why};
use crate::session::Session;
use crate::snapshot::JobId;
use crate::why::Ending;

/// The minimum run time plugin.
pub struct MinRuntime;

impl Plugin for MinRuntime {
    fn name(&self) -> &'static str {
        "minruntime"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::MayEvict]
    }

    fn may_evict<'s>(&self, ssn: &Session<'s>, mode: EvictMode, _preemptor: JobId, v: &Victim) -> Verdict<'s> {
        let snap = ssn.snap;
        let job = &snap.jobs[v.job];
        let bounds = &snap.queues[job.queue].bounds;
        let minimum = match mode {
            EvictMode::Preempt => bounds.preempt_min_runtime,
            EvictMode::Reclaim => bounds.reclaim_min_runtime,
        };
        let (Some(minimum), Some(started)) = (minimum, job.started_at) else { return Ok(()) };
        let until = started.saturating_add(i64::from(minimum));
        if !snap.clock.reached(until) {
            return Err(Why::until(snap, Rule::MinRuntime, Subject::Job(v.job), until));
        }
        Ok(())
    }
}

/// The words for the minimum run time (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    if why.rule != Rule::MinRuntime {
        return None;
    }
    Some(Ending::figures(match why.until {
        Some(t) => write!(f, "job {s} is protected until {} by its queue's minimum run time", why.snap().time(t)),
        None => write!(f, "job {s} has not run its queue's minimum run time"),
    }))
}
