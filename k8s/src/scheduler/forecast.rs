//! The forecast a waiting group's status shows: the core's [`drover_scheduler::forecast`]
//! (positions, expected start on the snapshot's clock, basis) with what would let it start
//! ([`drover_scheduler::explain::to_start`]), in wall time. An expected start that moved by
//! less than a scheduler period, or a tenth of the time still to wait, is not news: the status
//! keeps the one it shows, so that a waiting gang's status is not rewritten every cycle.

use std::time::Duration;

use drover_api::crd::forecast::{Forecast, ForecastBasis};
use drover_scheduler::clock::Clock;
use drover_scheduler::cycle::CycleOutcome;
use drover_scheduler::explain::to_start;
use drover_scheduler::forecast::Basis;
use drover_scheduler::ids::TiVec;
use drover_scheduler::snapshot::{JobId, Snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The forecast of every job that waits after the cycle, as status shows it.
pub(super) fn forecasts(snap: &Snapshot, outcome: &CycleOutcome) -> TiVec<JobId, Option<Forecast>> {
    outcome
        .forecasts
        .iter_enumerated()
        .map(|(j, f)| {
            let f = f.as_ref()?;
            Some(Forecast {
                queue_position: f.queue_position,
                position: f.position,
                expected_start: f.start.map(|t| Time(jiff::Timestamp::from_second(t).unwrap_or(jiff::Timestamp::MAX))),
                basis: match f.basis {
                    Basis::Declared => ForecastBasis::DeclaredRunTimes,
                    Basis::Learned => ForecastBasis::LearnedRunTimes,
                    Basis::Unknown => ForecastBasis::Unknown,
                },
                to_start: to_start(snap, outcome, j),
            })
        })
        .collect()
}

/// The forecast a group's status should show at the `clock`'s time (Unix seconds), given the
/// one it shows (`current`) and the cycle's (`new`): `current` while only its expected start
/// moved, by at most `period` or a tenth of the time left until it.
pub(super) fn settle(current: Option<&Forecast>, new: Forecast, clock: &Clock, period: Duration) -> Forecast {
    let Some(current) = current else { return new };
    let same_but_start = current.queue_position == new.queue_position
        && current.position == new.position
        && current.basis == new.basis
        && current.to_start == new.to_start;
    let close = match (&current.expected_start, &new.expected_start) {
        (None, None) => true,
        (Some(a), Some(b)) if a == b => true,
        (Some(a), Some(b)) => {
            let (a, b) = (a.0.as_second(), b.0.as_second());
            let tolerance = (period.as_secs_f64().ceil() as i64).max(1).max((a - clock.now()) / 10);
            (a - b).abs() <= tolerance
        }
        _ => false,
    };
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
            expected_start: start.map(|t| Time(jiff::Timestamp::from_second(t).expect("a time"))),
            basis: ForecastBasis::LearnedRunTimes,
            to_start: Some("wait".into()),
        }
    }

    #[test]
    fn a_start_that_barely_moved_keeps_what_status_shows() {
        let period = Duration::from_secs(1);
        let shown = at(Some(1000));
        assert_eq!(settle(Some(&shown), at(Some(1001)), &Clock::at(990), period), shown, "within a period");
        assert_eq!(
            settle(Some(&shown), at(Some(1002)), &Clock::at(990), period),
            at(Some(1002)),
            "beyond a period, near the start"
        );
        assert_eq!(settle(Some(&shown), at(Some(1050)), &Clock::at(0), period), shown, "a tenth of the 1000 s left");
        assert_eq!(settle(Some(&shown), at(Some(1101)), &Clock::at(0), period), at(Some(1101)));
        assert_eq!(settle(Some(&shown), at(None), &Clock::at(0), period), at(None), "a start that became unknown");
        let moved_up = Forecast { queue_position: 1, position: 1, ..at(Some(1000)) };
        assert_eq!(settle(Some(&shown), moved_up.clone(), &Clock::at(0), period), moved_up, "a new position is news");
        assert_eq!(settle(None, shown.clone(), &Clock::at(0), period), shown);
    }
}
