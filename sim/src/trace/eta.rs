//! Start forecasts in a replay: what each waiting job was told of its start (kept each time
//! it changed, until it started), the forecast that counts at half its wait, and how well the
//! forecasts of GPU jobs that waited long foretold their start: the relative error of the
//! expected start, and how often the start fell inside the forecast's 80% range.

use drover_scheduler::forecast::Forecast;
use serde_json::{json, Value};

use super::replay::{JobRecord, Replay};
use super::rows::TraceJob;

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

/// How well the forecasts given to GPU jobs that waited at least [`ETA_MIN_WAIT`] foretold
/// their first start, at submission and at half of their wait.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EtaAccuracy {
    /// Jobs that waited that long.
    pub jobs: usize,
    /// At submission.
    pub at_submission: EtaErrors,
    /// At half of the wait.
    pub at_half_wait: EtaErrors,
    /// The ranges given at half of the wait.
    pub ranges_at_half_wait: EtaRanges,
}

/// Relative errors of one set of forecasts: |forecast − start| / (start − when forecast).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EtaErrors {
    /// Jobs given a start (the others were told it is unknown).
    pub given: usize,
    /// Median relative error.
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
}

/// How well one set of forecasts' ranges held the starts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EtaRanges {
    /// Fraction of the jobs whose start fell inside the range they were given (a job given
    /// none counts as outside).
    pub in_range: f64,
    /// Median width of the ranges given, seconds.
    pub median_range: i64,
    /// Median wait of the jobs, seconds.
    pub median_wait: i64,
}

/// The nearest-rank `q` quantile of sorted `values`.
fn rank<T: Copy>(values: &[T], q: f64) -> T {
    values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1]
}

impl EtaErrors {
    fn of(etas: impl Iterator<Item = (Eta, i64)>) -> EtaErrors {
        let mut errors: Vec<f64> = etas
            .filter_map(|(eta, start)| {
                let forecast = eta.start?;
                Some((forecast - start).abs() as f64 / (start - eta.given_at).max(1) as f64)
            })
            .collect();
        if errors.is_empty() {
            return EtaErrors::default();
        }
        errors.sort_by(f64::total_cmp);
        EtaErrors { given: errors.len(), median: rank(&errors, 0.5), p90: rank(&errors, 0.9) }
    }

    fn to_json(self) -> Value {
        json!({"given": self.given, "medianRelativeError": r3(self.median), "p90RelativeError": r3(self.p90)})
    }
}

impl EtaRanges {
    /// Over jobs that waited from `submit` to `start`, each with the forecast it was given.
    fn of(jobs: &[(Option<Eta>, i64, i64)]) -> EtaRanges {
        if jobs.is_empty() {
            return EtaRanges::default();
        }
        let held = jobs
            .iter()
            .filter(|(eta, _, start)| eta.and_then(|e| e.range).is_some_and(|(lo, hi)| (lo..=hi).contains(start)))
            .count();
        let mut widths: Vec<i64> = jobs.iter().filter_map(|&(eta, _, _)| eta?.range.map(|(lo, hi)| hi - lo)).collect();
        widths.sort_unstable();
        let mut waits: Vec<i64> = jobs.iter().map(|&(_, submit, start)| start - submit).collect();
        waits.sort_unstable();
        EtaRanges {
            in_range: held as f64 / jobs.len() as f64,
            median_range: if widths.is_empty() { 0 } else { rank(&widths, 0.5) },
            median_wait: rank(&waits, 0.5),
        }
    }
}

fn r3(x: f64) -> Value {
    json!((x * 1000.0).round() / 1000.0)
}

impl EtaAccuracy {
    /// The forecasts of `replay`'s GPU jobs of `trace` that waited long.
    pub fn of(trace: &[TraceJob], replay: &Replay) -> EtaAccuracy {
        let waited: Vec<(&JobRecord, i64)> = replay
            .jobs
            .iter()
            .filter(|r| trace[r.job].gpus_per_pod > 0)
            .filter_map(|r| r.first_start.filter(|&s| s - trace[r.job].submit >= ETA_MIN_WAIT).map(|s| (r, s)))
            .collect();
        let halves: Vec<(Option<Eta>, i64, i64)> =
            waited.iter().map(|&(r, s)| (r.eta_at_half_wait, trace[r.job].submit, s)).collect();
        EtaAccuracy {
            jobs: waited.len(),
            at_submission: EtaErrors::of(waited.iter().filter_map(|&(r, s)| Some((r.eta_at_submission?, s)))),
            at_half_wait: EtaErrors::of(waited.iter().filter_map(|&(r, s)| Some((r.eta_at_half_wait?, s)))),
            ranges_at_half_wait: EtaRanges::of(&halves),
        }
    }

    /// `eta` in a policy's figures, when any start was forecast.
    pub fn to_json(&self) -> Option<Value> {
        if self.at_submission.given + self.at_half_wait.given == 0 {
            return None;
        }
        let mut half = self.at_half_wait.to_json();
        let ranges = self.ranges_at_half_wait;
        half["inRange"] = r3(ranges.in_range);
        half["medianRangeSeconds"] = json!(ranges.median_range);
        half["medianWaitSeconds"] = json!(ranges.median_wait);
        Some(json!({"jobs": self.jobs, "atSubmission": self.at_submission.to_json(), "atHalfWait": half}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eta(given_at: i64, range: Option<(i64, i64)>) -> Option<Eta> {
        Some(Eta { given_at, start: range.map(|(lo, _)| lo), range })
    }

    #[test]
    fn a_start_inside_its_range_counts_and_a_job_given_none_does_not() {
        let jobs = [
            (eta(500, Some((900, 1200))), 0, 1000),
            (eta(500, Some((900, 1200))), 0, 1200),
            (eta(500, Some((600, 800))), 0, 1000),
            (eta(500, None), 0, 3000),
        ];
        let r = EtaRanges::of(&jobs);
        assert_eq!(r.in_range, 0.5, "the first two of four");
        assert_eq!(r.median_range, 300, "widths 300, 300, 200: nearest rank");
        assert_eq!(r.median_wait, 1000, "waits 1000, 1200, 1000, 3000");
    }

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
