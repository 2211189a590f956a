//! Priority: jobs of higher priority class value go first; within a queue, higher priority
//! may preempt lower priority preemptible work (and elastic pods of equal priority). Across
//! queues priority plays no part in who may be evicted (that is reclaim's fairness).
//! Non-preemptible work (by the class recorded when its group was admitted) is never a victim
//! of preemption, reclaim or consolidation, whatever its queue's quota: users read
//! "non-preemptible" as never evicted by the scheduler (Determined's notebooks, KAI's
//! interactive jobs). What keeps it from pinning borrowed capacity is admission, which places
//! new non-preemptible work only within deserved quota, and the admission record, which keeps
//! a tenant from raising a running group's class.

use std::fmt;

use crate::why::Ending;
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
        if !victim.preemptible {
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

/// The words for this plugin's rules (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    let written = match why.rule {
        Rule::OwnJob => write!(f, "a job is not its own victim"),
        Rule::NonPreemptible => write!(f, "job {s} is non-preemptible"),
        Rule::NotLowerPriority => write!(f, "job {s} does not have a lower priority"),
        _ => return None,
    };
    Some(Ending::figures(written))
}
