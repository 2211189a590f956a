//! How long Drover's watches wait before they retry after an error.
//!
//! kube-runtime's default waits from 0.8 s up to 30 s (up to 60 s with its jitter) and, in a
//! `Controller`, applies one backoff to all of the controller's watches together: after an API
//! server outage every watch fails a few times, each failure doubles the shared wait, and the
//! controller then sees nothing (not even a new Job) for a minute or more. Drover's watches
//! retry from 200 ms and never wait more than 5 s, so they are back within seconds of the API
//! server; a few requests every 5 s during an outage cost the server nothing.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};

/// The first wait after an error.
const FIRST: Duration = Duration::from_millis(200);
/// The longest wait.
const LONGEST: Duration = Duration::from_secs(5);
/// A quiet spell after which the waits start again from [`FIRST`].
const RESET_AFTER: Duration = Duration::from_secs(60);

/// The backoff for a watch or a controller's triggers: `.backoff(watch_backoff())` on a
/// watcher, `.trigger_backoff(watch_backoff())` on a `Controller`.
pub fn watch_backoff() -> ResetTimerBackoff<Doubling> {
    ResetTimerBackoff::new(Doubling { next: FIRST, jitter: RandomState::new(), count: 0 }, RESET_AFTER)
}

/// Waits that double from [`FIRST`] up to [`LONGEST`], each lengthened by up to a quarter so
/// many clients that failed together do not retry together.
pub struct Doubling {
    next: Duration,
    jitter: RandomState,
    count: u64,
}

impl Iterator for Doubling {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(LONGEST);
        self.count += 1;
        let quarter = wait.as_millis() as u64 / 4;
        let extra = self.jitter.hash_one(self.count) % (quarter + 1);
        Some(wait + Duration::from_millis(extra))
    }
}

impl Backoff for Doubling {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_five_seconds_and_start_again_after_a_reset() {
        let mut backoff = watch_backoff();
        let waits: Vec<Duration> = (0..8).map(|_| backoff.next().expect("never ends")).collect();
        let bases = [200, 400, 800, 1600, 3200, 5000, 5000, 5000].map(Duration::from_millis);
        for (wait, base) in waits.iter().zip(bases) {
            assert!(*wait >= base && *wait <= base + base / 4, "{wait:?} not within a quarter above {base:?}");
        }
        backoff.reset();
        let first = backoff.next().expect("never ends");
        assert!(first <= FIRST + FIRST / 4, "after a reset the wait starts again: {first:?}");
    }
}
