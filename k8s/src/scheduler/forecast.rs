//! The forecast a waiting group's status shows: the core's [`drover_scheduler::forecast`]
//! (positions, expected start and its range on the snapshot's clock, basis) with what would
//! let it start ([`drover_scheduler::explain::to_start`]), in wall time. The range's latest
//! start is a period after the plan's: a gang starts at the first cycle after its capacity
//! frees. What barely moved is not news, so that a waiting gang's status is not rewritten every
//! cycle, nor every waiting gang's on every start ahead of it: the status keeps the forecast it
//! shows while its starts moved by at most a scheduler period or a quarter of the time still to
//! wait, and its positions stayed in the same [`position_step`].

use std::time::Duration;

use drover_api::crd::forecast::{eta, Forecast, ForecastBasis};
use drover_scheduler::clock::Clock;
use drover_scheduler::cycle::CycleOutcome;
use drover_scheduler::explain::to_start;
use drover_scheduler::forecast::Basis;
use drover_scheduler::ids::TiVec;
use drover_scheduler::snapshot::{JobId, Snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A time on the snapshot's clock (Unix seconds) as the API writes it.
fn time(t: i64) -> Time {
    Time(jiff::Timestamp::from_second(t).unwrap_or(jiff::Timestamp::MAX))
}

/// The forecast of every job that waits after the cycle, as status shows it, for a scheduler
/// whose cycles run every `period`.
pub(super) fn forecasts(snap: &Snapshot, outcome: &CycleOutcome, period: Duration) -> TiVec<JobId, Option<Forecast>> {
    let period = (period.as_secs_f64().ceil() as i64).max(1);
    outcome
        .forecasts
        .iter_enumerated()
        .map(|(j, f)| {
            let f = f.as_ref()?;
            let [expected_start, earliest_start, latest_start] =
                [f.start, f.earliest, f.latest.map(|t| t.saturating_add(period))].map(|t| t.map(time));
            let eta = match (&expected_start, &earliest_start, &latest_start) {
                (Some(s), Some(e), Some(l)) => Some(eta(s, e, l)),
                _ => None,
            };
            Some(Forecast {
                queue_position: f.queue_position,
                position: f.position,
                expected_start,
                earliest_start,
                latest_start,
                eta,
                basis: match f.basis {
                    Basis::Declared => ForecastBasis::DeclaredRunTimes,
                    Basis::Learned => ForecastBasis::LearnedRunTimes,
                    Basis::OtherNamespaces => ForecastBasis::OtherNamespacesRunTimes,
                    Basis::Unknown => ForecastBasis::Unknown,
                    Basis::Never => ForecastBasis::Never,
                },
                to_start: to_start(snap, outcome, j),
            })
        })
        .collect()
}

/// The step of a position that a status write is news for: each of 1 to 10, then 20, 50, 100,
/// 200, 500, 1000, ... (a position counts in the step it does not exceed). A gang far back
/// learns that it moved from 143rd to 101st only when it reaches 100.
pub(super) fn position_step(position: u32) -> u32 {
    if position <= 10 {
        return position;
    }
    let mut decade: u64 = 10;
    loop {
        for mantissa in [2, 5, 10] {
            let step = decade * mantissa;
            if u64::from(position) <= step {
                return u32::try_from(step).unwrap_or(u32::MAX);
            }
        }
        decade *= 10;
    }
}

/// The forecast a group's status should show at the `clock`'s time (Unix seconds), given the
/// one it shows (`current`) and the cycle's (`new`): `current` while only its starts (the
/// expected one and its range's ends) moved, each by at most `period` or a quarter of the
/// time left until it, and its positions stayed in their steps ([`position_step`]).
pub(super) fn settle(current: Option<&Forecast>, new: Forecast, clock: &Clock, period: Duration) -> Forecast {
    let Some(current) = current else { return new };
    let same_but_start = position_step(current.queue_position) == position_step(new.queue_position)
        && position_step(current.position) == position_step(new.position)
        && current.basis == new.basis
        && current.to_start == new.to_start;
    let tolerance = (period.as_secs_f64().ceil() as i64).max(1);
    let close = |a: &Option<Time>, b: &Option<Time>| match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            let (a, b) = (a.0.as_second(), b.0.as_second());
            (a - b).abs() <= tolerance.max((a - clock.now()) / 4)
        }
        _ => false,
    };
    let close = close(&current.expected_start, &new.expected_start)
        && close(&current.earliest_start, &new.earliest_start)
        && close(&current.latest_start, &new.latest_start);
    if same_but_start && close {
        current.clone()
    } else {
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Option<i64>) -> Forecast {
        Forecast {
            queue_position: 1,
            position: 2,
            expected_start: start.map(time),
            basis: ForecastBasis::LearnedRunTimes,
            to_start: Some("wait".into()),
            ..Forecast::default()
        }
    }

    fn ranged(start: i64, earliest: i64, latest: i64) -> Forecast {
        let [s, e, l] = [start, earliest, latest].map(time);
        Forecast {
            earliest_start: Some(e.clone()),
            latest_start: Some(l.clone()),
            eta: Some(eta(&s, &e, &l)),
            ..at(Some(start))
        }
    }

    #[test]
    fn a_range_that_barely_moved_keeps_what_status_shows_and_one_that_moved_is_news() {
        let period = Duration::from_secs(1);
        let now = Clock::at(0);
        let shown = ranged(1000, 500, 5000);
        assert_eq!(settle(Some(&shown), ranged(1200, 620, 6200), &now, period), shown, "each within a quarter");
        let later = ranged(1200, 620, 9000);
        assert_eq!(settle(Some(&shown), later.clone(), &now, period), later, "the latest start moved");
        let unranged = at(Some(1000));
        assert_eq!(settle(Some(&shown), unranged.clone(), &now, period), unranged, "a range that was lost");
    }

    #[test]
    fn a_start_that_barely_moved_keeps_what_status_shows() {
        let period = Duration::from_secs(1);
        let shown = at(Some(1000));
        assert_eq!(settle(Some(&shown), at(Some(1001)), &Clock::at(990), period), shown, "within a period");
        assert_eq!(
            settle(Some(&shown), at(Some(1003)), &Clock::at(990), period),
            at(Some(1003)),
            "beyond a period and a quarter of the 10 s left"
        );
        assert_eq!(settle(Some(&shown), at(Some(1200)), &Clock::at(0), period), shown, "a quarter of the 1000 s left");
        assert_eq!(settle(Some(&shown), at(Some(1251)), &Clock::at(0), period), at(Some(1251)));
        assert_eq!(settle(Some(&shown), at(None), &Clock::at(0), period), at(None), "a start that became unknown");
        let moved_up = Forecast { queue_position: 1, position: 1, ..at(Some(1000)) };
        assert_eq!(settle(Some(&shown), moved_up.clone(), &Clock::at(0), period), moved_up, "a new position is news");
        assert_eq!(settle(None, shown.clone(), &Clock::at(0), period), shown);
    }

    #[test]
    fn positions_are_news_only_when_they_enter_a_new_step() {
        let steps: Vec<u32> =
            [1, 10, 11, 20, 21, 50, 51, 100, 143, 200, 201, 500, 999, 1000, 1001].map(position_step).into();
        assert_eq!(steps, [1, 10, 20, 20, 50, 50, 100, 100, 200, 200, 500, 500, 1000, 1000, 2000]);
        assert_eq!(position_step(u32::MAX), u32::MAX);
        let period = Duration::from_secs(1);
        let far = |position| Forecast { position, ..at(Some(1000)) };
        let shown = far(143);
        assert_eq!(settle(Some(&shown), far(101), &Clock::at(0), period), shown, "still in the step of 200");
        assert_eq!(settle(Some(&shown), far(100), &Clock::at(0), period), far(100), "it reached 100");
        let near = far(3);
        assert_eq!(settle(Some(&near), far(2), &Clock::at(0), period), far(2), "every step near the front");
    }
}
