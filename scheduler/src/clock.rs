//! The time of a cycle, read only through questions that note how long their answer holds.
//!
//! A scheduler whose objects have not changed since a cycle that decided and wrote nothing
//! may skip the next cycle only if it would come out the same. With the same objects, only
//! the time can make it differ, and only through the answers the cycle got from the clock:
//! "has this loan come due?" stays no until the loan's end, "how long ago was it preempted?"
//! changes every second. Every read of the time goes through [`Clock`], which notes the
//! earliest moment any answer it gave could change ([`Clock::holds_until`]). The rule "is
//! the last cycle's outcome still current?" is therefore exact and lives here, not in each
//! reader.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A cycle's time (seconds on the clock of the snapshot's jobs), with the earliest time at
/// which an answer read from it may change. Clones share that note: a cycle that reads the
/// time of a copy of its snapshot still notes it.
#[derive(Debug, Clone)]
pub struct Clock {
    now: i64,
    holds_until: Arc<AtomicI64>,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::at(0)
    }
}

impl Clock {
    /// The clock at `now`, with nothing read from it yet.
    pub fn at(now: i64) -> Clock {
        Clock { now, holds_until: Arc::new(AtomicI64::new(i64::MAX)) }
    }

    /// The time itself, for an answer that may change with every second: a duration shown to
    /// people, an end reckoned from now.
    pub fn now(&self) -> i64 {
        self.note(self.now.saturating_add(1));
        self.now
    }

    /// Whether `t` has come (`t <= now`): once it has, it stays so; until then the answer
    /// holds until `t`.
    pub fn reached(&self, t: i64) -> bool {
        let reached = t <= self.now;
        if !reached {
            self.note(t);
        }
        reached
    }

    /// `t`, or now once `t` has come (an end that is overdue ends now): the same until `t`,
    /// then moving with every second.
    pub fn at_least_now(&self, t: i64) -> i64 {
        if self.reached(t) {
            self.now()
        } else {
            t
        }
    }

    /// The start of the `tick`-second period that holds now (a ledger's tick), which holds
    /// until the next period starts.
    pub fn tick_start(&self, tick: i64) -> i64 {
        let tick = tick.max(1);
        let start = self.now.div_euclid(tick) * tick;
        self.note(start.saturating_add(tick));
        start
    }

    /// Notes that an answer worked out from [`Clock::unnoted`] holds only until `t` (or the
    /// next second, when `t` has come already).
    pub fn holds_only_until(&self, t: i64) {
        self.note(t.max(self.now.saturating_add(1)));
    }

    /// The time, not noted: only for a reader whose answer depends on it solely through
    /// reads it notes itself (the forecast's starting point, which every planned start lies
    /// beyond; see `forecast.rs`), or through [`Clock::holds_only_until`].
    pub fn unnoted(&self) -> i64 {
        self.now
    }

    /// The earliest time at which an answer read so far may change; `i64::MAX` when none can.
    pub fn holds_until(&self) -> i64 {
        self.holds_until.load(Ordering::Relaxed)
    }

    fn note(&self, t: i64) {
        self.holds_until.fetch_min(t, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_holds_until_it_could_change() {
        let clock = Clock::at(100);
        assert_eq!(clock.holds_until(), i64::MAX, "nothing read");
        assert!(clock.reached(100), "a time that has come stays come");
        assert_eq!(clock.holds_until(), i64::MAX);
        assert!(!clock.reached(160));
        assert_eq!(clock.holds_until(), 160, "not yet, until 160");
        assert!(!clock.reached(200));
        assert_eq!(clock.holds_until(), 160, "the earliest change counts");
        assert_eq!(clock.at_least_now(180), 180, "an end still to come");
        assert_eq!(clock.holds_until(), 160);
        assert_eq!(clock.tick_start(60), 60);
        assert_eq!(clock.holds_until(), 120, "the next tick starts at 120");
        let copy = clock.clone();
        assert_eq!(copy.now(), 100);
        assert_eq!(clock.holds_until(), 101, "a copy's reads count; the time itself changes next second");
        assert_eq!(Clock::at(100).holds_until(), i64::MAX, "a new clock starts afresh");
        let overdue = Clock::at(100);
        assert_eq!(overdue.at_least_now(90), 100, "an overdue end ends now");
        assert_eq!(overdue.holds_until(), 101);
        let worked_out = Clock::at(100);
        worked_out.holds_only_until(130);
        assert_eq!(worked_out.holds_until(), 130);
        worked_out.holds_only_until(50);
        assert_eq!(worked_out.holds_until(), 101, "a time that has come holds for this second only");
    }
}
