//! What a job asks room for in fair share's questions (its gang minimum, or one elastic pod once
//! the minimum runs), worked out once per job and state.

use super::FairShare;
use crate::ids::{JobId, TiVec};
use crate::res::Res;
use crate::session::Session;

/// A job's running and pipelined pod counts: its request is fixed while these are.
pub(super) type NeedKey = (u32, u32);

/// Per job, its last worked-out need and the key it was worked out for.
pub(super) type Needs = TiVec<JobId, Option<(NeedKey, Need)>>;

/// What a job asks room for: its gang's minimum, or one elastic pod once the minimum runs.
#[derive(Clone)]
pub(super) struct Need {
    /// The request.
    pub(super) request: Res,
    /// Whether it is one elastic pod.
    pub(super) elastic: bool,
}

impl FairShare {
    /// Calls `f` with what `job` asks room for — its gang's minimum, or one elastic pod once
    /// the minimum runs — worked out once per job and state.
    pub(super) fn with_need<T>(&self, ssn: &Session, job: JobId, f: impl FnOnce(&Need) -> T) -> T {
        let key = (ssn.job_running[job], ssn.job_pipelined[job]);
        ssn.scratch.with(self.needs, |needs| {
            if needs.len() <= job.0 {
                needs.resize(ssn.snap.jobs.len().max(job.0 + 1), None);
            }
            let need = match &mut needs[job] {
                Some((k, need)) if *k == key => need,
                slot => {
                    // A job at its minimum asks for one elastic pod at a time.
                    let mut pods = ssn.gang_pods(job);
                    let elastic = pods.is_empty();
                    if elastic {
                        pods.extend(ssn.pending_pods(job).take(1));
                    }
                    &slot.insert((key, Need { request: ssn.sum_requests(&pods), elastic })).1
                }
            };
            f(need)
        })
    }
}
