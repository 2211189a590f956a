//! Priority: jobs of higher priority class value go first; within a queue, higher priority
//! may preempt lower priority preemptible work (and elastic pods of equal priority). Across
//! queues priority plays no part in who may be evicted (that is reclaim's fairness).
//! Non-preemptible work is never a victim while its queue's non-preemptible work stays within
//! the queue's deserved quota; beyond it, however it got there, it is a victim like any other
//! ([`Session::non_preemptible_beyond_deserved`]).

use std::cmp::Ordering;

use crate::plugin::{EvictMode, Hook, Plugin, Rule, Subject, Verdict, Victim, Why};
use crate::session::Session;
use crate::snapshot::JobId;

/// The priority plugin.
pub struct Priority;

impl Plugin for Priority {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::JobOrder, Hook::MayEvict]
    }

    fn job_order(&self, ssn: &Session, a: JobId, b: JobId) -> Ordering {
        ssn.snap.jobs[b].priority.cmp(&ssn.snap.jobs[a].priority)
    }

    fn may_evict<'s>(&self, ssn: &Session<'s>, mode: EvictMode, preemptor: JobId, v: &Victim) -> Verdict<'s> {
        let victim = &ssn.snap.jobs[v.job];
        let refuse = |rule| Err(Why::new(ssn.snap, rule, Subject::Job(v.job)));
        if v.job == preemptor {
            return refuse(Rule::OwnJob);
        }
        if !victim.preemptible && !ssn.non_preemptible_beyond_deserved(victim.queue, &v.freed) {
            return refuse(Rule::NonPreemptible);
        }
        let p = ssn.snap.jobs[preemptor].priority;
        let lower = if v.elastic { victim.priority <= p } else { victim.priority < p };
        if mode == EvictMode::Preempt && !lower {
            return refuse(Rule::NotLowerPriority);
        }
        Ok(())
    }

    fn victim_rank_precedence(&self) -> Option<u8> {
        Some(2)
    }

    fn victim_rank(&self, ssn: &Session, _mode: EvictMode, v: &Victim) -> i64 {
        i64::from(ssn.snap.jobs[v.job].priority)
    }
}
