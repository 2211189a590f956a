//! Reservation: runtime-aware backfill. A gang that cannot start now reserves the nodes where
//! it will start soonest, judged from the run times of the pods running there, declared or
//! learned from finished jobs. Work served after it may use that capacity only if its run
//! time ends before the reservation starts. A declared run time is enforced by the kubelet; a
//! learned one is not, so work admitted on one borrows the capacity: only preemptible work
//! may, and if it still runs when the gang is due it is evicted for it (the loan is the
//! mechanism's, [`crate::reservation`]). Big gangs then wait a bounded time instead of
//! starving behind a stream of small jobs, while small jobs keep the GPUs busy. Other queues'
//! work within its fair share is not held back: a reservation orders the gang's own queue and
//! work beyond fair shares, never another queue's guaranteed share. This plugin decides how
//! many gangs reserve and who may use what they reserved.

use std::fmt;

use crate::config::ReservationArgs;
use crate::plugin::{Hook, Plugin, Reservation, Rule, ShareBound, Subject, Verdict, Why};
use crate::session::Session;
use crate::snapshot::{JobId, RunTime};
use crate::why::Ending;

/// The reservation plugin.
pub struct ReservationPolicy {
    max_gangs: usize,
    min_wait: i64,
}

impl ReservationPolicy {
    /// At most `maxGangs` waiting gangs reserve nodes each cycle, first in serving order, once
    /// they have waited `minWaitSeconds`.
    pub fn new(args: ReservationArgs) -> ReservationPolicy {
        ReservationPolicy { max_gangs: args.max_gangs as usize, min_wait: i64::from(args.min_wait_seconds) }
    }
}

impl Plugin for ReservationPolicy {
    fn name(&self) -> &'static str {
        "reservation"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::MaxReservations, Hook::MayReserve, Hook::MayUseReserved]
    }

    fn max_reservations(&self) -> usize {
        self.max_gangs
    }

    fn may_reserve<'s>(&self, ssn: &Session<'s>, job: JobId) -> Verdict<'s> {
        if self.min_wait == 0 || ssn.snap.clock.reached(ssn.snap.jobs[job].created_at.saturating_add(self.min_wait)) {
            Ok(())
        } else {
            Err(Why::new(ssn.snap, Rule::TooEarlyToReserve, Subject::Job(job)))
        }
    }

    fn may_use_reserved<'s>(&self, ssn: &Session<'s>, job: JobId, bound: ShareBound, r: &Reservation) -> Verdict<'s> {
        let snap = ssn.snap;
        let other_queue_within_share = bound == ShareBound::FairShare && snap.jobs[job].queue != snap.jobs[r.job].queue;
        let j = &snap.jobs[job];
        // Ends by the start (now + d <= start) until start - d + 1 comes.
        let ends_in_time = |d: i64| !snap.clock.reached(r.start.saturating_sub(d).saturating_add(1));
        // A learned end is a loan: the job may be evicted if it overruns it, so only work
        // that may be evicted borrows.
        let ends_before = match j.run_time {
            Some(RunTime::Declared(d)) => ends_in_time(d),
            Some(RunTime::Learned(d)) => j.preemptible && ends_in_time(d),
            None => false,
        };
        if r.job == job || other_queue_within_share || ends_before {
            Ok(())
        } else {
            Err(Why::new(snap, Rule::Reserved, Subject::Job(r.job)))
        }
    }
}

/// The words for the reservation rules (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    let written = match why.rule {
        Rule::TooEarlyToReserve => write!(f, "job {s} has not waited long enough to reserve nodes"),
        Rule::Reserved => write!(f, "the capacity is reserved for job {s}"),
        _ => return None,
    };
    Some(Ending::figures(written))
}
