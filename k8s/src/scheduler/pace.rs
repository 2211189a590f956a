//! The writes that report rather than decide, paced so that no tenant can make the scheduler
//! flood the API server for everyone else:
//!
//! - **Report-only status writes** (a waiting gang whose status changes in nothing but its
//!   `forecast` and the figures its `Unschedulable` message quotes) draw on a [`ForecastBudget`]: [`FORECAST_WRITES_PER_SECOND`] on average, at
//!   most [`FORECAST_BURST`] at once, the gangs nearest the front first. The others keep the
//!   forecast they show until a later cycle. Every other status change (a phase, a condition,
//!   an admission) is written at once: those change only when the cluster does.
//! - **Events** are emitted once per state ([`EventMemory`]): the same reason and message on the
//!   same object is not emitted again while the first is still in the API (the API server's
//!   default `--event-ttl`, an hour), even when the object left that state and came back. A
//!   message that differs only in the figures it quotes (a queue's use, `49 > 48` then
//!   `50 > 48`) is the same state.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use super::cache::Key;

/// Forecast-only PodGroup status writes a second, on average, whatever the number of gangs.
pub const FORECAST_WRITES_PER_SECOND: f64 = 2.0;
/// Forecast-only writes one cycle may make after a quiet spell.
pub const FORECAST_BURST: f64 = 20.0;
/// How long an emitted Event is remembered: the API server's default `--event-ttl`.
pub const EVENT_MEMORY: Duration = Duration::from_secs(3600);
/// States remembered per object: an object cycling through more emits again.
const STATES_PER_OBJECT: usize = 16;

/// What forecast-only writes may still be made, refilled with time.
#[derive(Debug)]
pub(super) struct ForecastBudget {
    tokens: f64,
    at: Option<Instant>,
}

impl Default for ForecastBudget {
    fn default() -> Self {
        ForecastBudget { tokens: FORECAST_BURST, at: None }
    }
}

impl ForecastBudget {
    /// How many of `wanted` forecast-only writes may be made at `now`; they are spent.
    pub(super) fn take(&mut self, wanted: usize, now: Instant) -> usize {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * FORECAST_WRITES_PER_SECOND;
            self.tokens = (self.tokens + refill).min(FORECAST_BURST);
        }
        self.at = Some(now);
        let granted = (self.tokens.floor() as usize).min(wanted);
        self.tokens -= granted as f64;
        granted
    }
}

/// The Events emitted lately, per object, as hashes of their type, reason and message.
#[derive(Debug, Default)]
pub(super) struct EventMemory {
    seen: HashMap<(&'static str, Key), Vec<(u64, Instant)>>,
}

impl EventMemory {
    /// Whether an Event of `reason` and `message` on the object of `kind` and `key` would be
    /// new at `now` (none the same emitted within [`EVENT_MEMORY`]).
    pub(super) fn is_new(&self, kind: &'static str, key: &Key, reason: &str, message: &str, now: Instant) -> bool {
        let hash = state_hash(reason, message);
        self.seen
            .get(&(kind, key.clone()))
            .is_none_or(|states| !states.iter().any(|&(h, at)| h == hash && now.duration_since(at) < EVENT_MEMORY))
    }

    /// Notes that the Event was emitted at `now`.
    pub(super) fn emitted(&mut self, kind: &'static str, key: &Key, reason: &str, message: &str, now: Instant) {
        let hash = state_hash(reason, message);
        let states = self.seen.entry((kind, key.clone())).or_default();
        states.retain(|&(h, at)| h != hash && now.duration_since(at) < EVENT_MEMORY);
        if states.len() >= STATES_PER_OBJECT {
            states.remove(0);
        }
        states.push((hash, now));
    }

    /// Forgets what no longer counts: Events older than [`EVENT_MEMORY`].
    pub(super) fn forget_expired(&mut self, now: Instant) {
        self.seen.retain(|_, states| {
            states.retain(|&(_, at)| now.duration_since(at) < EVENT_MEMORY);
            !states.is_empty()
        });
    }
}

/// The state an Event tells: its reason and its message's words, without the figures.
fn state_hash(reason: &str, message: &str) -> u64 {
    let mut h = DefaultHasher::new();
    reason.hash(&mut h);
    message.chars().filter(|c| !c.is_ascii_digit()).for_each(|c| c.hash(&mut h));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_grants_a_burst_then_its_rate() {
        let start = Instant::now();
        let mut budget = ForecastBudget::default();
        assert_eq!(budget.take(300, start), FORECAST_BURST as usize, "a burst at first");
        assert_eq!(budget.take(300, start), 0, "nothing left in the same instant");
        let later = start + Duration::from_secs(3);
        assert_eq!(budget.take(300, later), (3.0 * FORECAST_WRITES_PER_SECOND) as usize, "the rate after");
        assert_eq!(budget.take(1, later + Duration::from_secs(3600)), 1, "no more than wanted");
        assert_eq!(budget.take(300, later + Duration::from_secs(3600)), FORECAST_BURST as usize - 1, "capped");
    }

    #[test]
    fn an_event_is_new_once_per_state_until_it_expires() {
        let now = Instant::now();
        let key: Key = ("ns".into(), "g".into());
        let mut memory = EventMemory::default();
        assert!(memory.is_new("PodGroup", &key, "Unschedulable", "a", now));
        memory.emitted("PodGroup", &key, "Unschedulable", "a", now);
        memory.emitted("PodGroup", &key, "Unschedulable", "b", now);
        assert!(!memory.is_new("PodGroup", &key, "Unschedulable", "a", now), "back to a state already told");
        assert!(memory.is_new("Pod", &key, "Unschedulable", "a", now), "another object");
        assert!(memory.is_new("PodGroup", &key, "Unschedulable", "c", now), "a new state");
        memory.emitted("PodGroup", &key, "Unschedulable", "limit (gpu 49 > 48)", now);
        assert!(!memory.is_new("PodGroup", &key, "Unschedulable", "limit (gpu 50 > 48)", now), "only figures moved");
        let expired = now + EVENT_MEMORY;
        assert!(memory.is_new("PodGroup", &key, "Unschedulable", "a", expired), "the first Event is gone");
        memory.forget_expired(expired);
        assert!(memory.seen.is_empty());
    }
}
