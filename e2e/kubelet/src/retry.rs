//! Error classification and backoff for the fake kubelet's API calls.

use std::time::Duration;

/// How the kubelet reacts to a failed API call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// 404: the object (or, for a create, its namespace or kind) does not exist.
    NotFound,
    /// 409: a conflict (stale resourceVersion, or already exists on create).
    Conflict,
    /// Worth retrying as is: 429, 5xx, 410, connection and decoding errors.
    Transient,
    /// Any other 4xx: the request itself is wrong; retrying it unchanged will not help.
    Rejected,
}

pub(crate) fn classify(error: &kube::Error) -> Failure {
    match error {
        kube::Error::Api(status) => match status.code {
            404 => Failure::NotFound,
            409 => Failure::Conflict,
            408 | 410 | 429 => Failure::Transient,
            400..=499 => Failure::Rejected,
            _ => Failure::Transient,
        },
        _ => Failure::Transient,
    }
}

/// Exponential backoff with jitter: 50 ms doubling up to 2 s.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(2);

    pub(crate) fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// The delay before the next attempt (with up to 25% jitter added).
    pub(crate) fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        base + base.mul_f64(jitter() * 0.25)
    }

    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// A cheap pseudo-random number in [0, 1), good enough to spread retries.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default(),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_and_resets() {
        let mut backoff = Backoff::new();
        let first = backoff.next_delay();
        assert!(first >= Backoff::FIRST && first <= Backoff::FIRST.mul_f64(1.25));
        for _ in 0..10 {
            backoff.next_delay();
        }
        let capped = backoff.next_delay();
        assert!(capped >= Backoff::MAX && capped <= Backoff::MAX.mul_f64(1.25));
        backoff.reset();
        assert!(backoff.next_delay() <= Backoff::FIRST.mul_f64(1.25));
    }

    #[test]
    fn api_errors_are_classified_by_code() {
        let api = |code| kube::Error::Api(Box::new(kube::core::Status { code, ..Default::default() }));
        assert_eq!(classify(&api(404)), Failure::NotFound);
        assert_eq!(classify(&api(409)), Failure::Conflict);
        assert_eq!(classify(&api(429)), Failure::Transient);
        assert_eq!(classify(&api(500)), Failure::Transient);
        assert_eq!(classify(&api(503)), Failure::Transient);
        assert_eq!(classify(&api(422)), Failure::Rejected);
        assert_eq!(classify(&api(400)), Failure::Rejected);
    }
}
