//! Start forecasts in a replay: what each waiting job was told of its start (kept each time
//! it changed, until it started), the forecast that counts at half its wait, and how well the
//! forecasts of GPU jobs that waited long foretold their start: the relative error of the
//! expected start, and how often the start fell inside the forecast's 80% range.

use drover_scheduler::forecast::Forecast;

/// Jobs must wait this long for their forecasts to count: a forecast of a start minutes away
/// is right or wrong by seconds, which says nothing.
pub const ETA_MIN_WAIT: i64 = 600;

/// A start the scheduler forecast for a waiting job ([`drover_scheduler::forecast`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eta {
    /// When the forecast was made.
    pub given_at: i64,
    /// The start it forecast, if it could give one.
    pub start: Option<i64>,
    /// The range it gave the start, earliest and latest, if it gave one.
    pub range: Option<(i64, i64)>,
}

impl Eta {
    /// The forecast `f`, made at `now` by a scheduler whose cycles run every `period` seconds:
    /// as a status shows it, the latest start a period after the plan's (a gang starts at the
    /// first cycle after its capacity frees).
    pub fn of(f: &Forecast, now: i64, period: i64) -> Eta {
        let range = f.earliest.zip(f.latest.map(|t| t.saturating_add(period)));
        Eta { given_at: now, start: f.start, range }
    }
}

/// The forecasts a job was given until it first started, each time they changed.
#[derive(Debug, Clone, Default)]
pub struct EtaLog {
    etas: Vec<Eta>,
}

impl EtaLog {
    /// Notes the forecast of a cycle, if it changed.
    pub fn note(&mut self, eta: Eta) {
        if self.etas.last().is_none_or(|last| (last.start, last.range) != (eta.start, eta.range)) {
            self.etas.push(eta);
        }
    }

    /// The last forecast given before half of the wait from `submit` to `start` had passed;
    /// the log is done with.
    pub fn at_half_wait(&mut self, submit: i64, start: i64) -> Option<Eta> {
        let half = submit + (start - submit) / 2;
        let eta = self.etas.iter().rev().find(|e| e.given_at <= half).copied();
        self.etas = Vec::new();
        eta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forecast_at_half_the_wait_is_the_last_one_given_by_then() {
        let mut log = EtaLog::default();
        for (at, lo) in [(0, 100), (10, 100), (40, 200), (60, 300)] {
            log.note(Eta { given_at: at, start: Some(lo), range: Some((lo, lo + 50)) });
        }
        assert_eq!(log.etas.len(), 3, "an unchanged forecast is not noted again");
        let half = log.at_half_wait(0, 100).expect("given before 50");
        assert_eq!((half.given_at, half.range), (40, Some((200, 250))));
        assert!(log.etas.is_empty());
    }
}
