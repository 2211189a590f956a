//! How well the start forecasts held: per job, the forecast at submission and at half its wait
//! against when it started, as errors and as ranges that held.

use serde_json::{json, Value};

use super::eta::{Eta, ETA_MIN_WAIT};
use super::record::{JobRecord, Replay};
use super::rows::TraceJob;

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
}
