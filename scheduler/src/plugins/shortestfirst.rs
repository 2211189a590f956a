//! Shortest first: within a priority, the job expected to need the least service — its run
//! time times its GPUs (CPU-only jobs count as one GPU) — goes first, the Helios study's
//! quasi-shortest-service-first. The run time is the declared one, else the one learned from
//! the queue's finished jobs ([`crate::run_times`]). Jobs with neither come after those with
//! one, in submission order. A job that has waited `agingSeconds` goes before every job that
//! has not, oldest first, so no job waits for ever behind a stream of shorter work; with the
//! reservation plugin, such a waiting gang is the first to reserve nodes. Off unless
//! configured: it replaces first-come-first-served within a priority, which users of FIFO
//! queues expect.

use std::cmp::Ordering;

use crate::config::ShortestFirstArgs;
use crate::ids::{JobId, TiVec};
use crate::plugin::{Hook, Plugin};
use crate::session::Session;

/// The shortest-first plugin.
pub struct ShortestFirst {
    aging: i64,
    /// Per job, worked out when the cycle opens: (has waited `aging`, expected service).
    keys: TiVec<JobId, (bool, Option<i64>)>,
}

impl ShortestFirst {
    /// Orders jobs by expected service until they have waited `agingSeconds`.
    pub fn new(args: ShortestFirstArgs) -> ShortestFirst {
        ShortestFirst { aging: i64::from(args.aging_seconds), keys: TiVec::new() }
    }
}

impl Plugin for ShortestFirst {
    fn name(&self) -> &'static str {
        "shortestfirst"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::JobOrder]
    }

    fn on_open(&mut self, ssn: &mut Session) {
        let snap = ssn.snap;
        self.keys = snap
            .jobs
            .iter()
            .map(|job| {
                let aged = snap.clock.reached(job.created_at.saturating_add(self.aging));
                let gpus: i64 = match snap.gpu {
                    Some(g) => job.tasks.iter().map(|t| t.requests[g] * t.pods.len() as i64).sum(),
                    None => 0,
                };
                (aged, job.run_time.map(|d| d.seconds().saturating_mul(gpus.max(1))))
            })
            .collect();
    }

    fn job_order(&self, _ssn: &Session, a: JobId, b: JobId) -> Ordering {
        let ((aged_a, service_a), (aged_b, service_b)) = (self.keys[a], self.keys[b]);
        aged_b.cmp(&aged_a).then_with(|| {
            if aged_a {
                return Ordering::Equal;
            }
            match (service_a, service_b) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            }
        })
    }
}
