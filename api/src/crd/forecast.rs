//! "When will my job start?" as the API carries it: the scheduler writes a waiting PodGroup's
//! [`Forecast`] into its status every cycle it changes, and the Job controller mirrors it into
//! its Job's status. Both live in status, which tenants cannot write. The start comes with the
//! range it falls in with 80% confidence, and with [`eta`], the text the `ETA` column prints
//! (a column has one path, and kubectl cannot join fields).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// Where a waiting gang stands and when it is expected to start, as the scheduler's latest
/// cycle that changed it saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// 1 for the gang its queue serves first. Rewritten when it enters a new step (each of 1
    /// to 10, then 20, 50, 100, 200, 500, ...), so it may lag behind further back.
    #[schemars(range(min = 1))]
    pub queue_position: u32,
    /// 1 for the gang the scheduler serves first, counting every queue's waiting gangs;
    /// rewritten as `queuePosition` is.
    #[schemars(range(min = 1))]
    pub position: u32,
    /// When it is expected to start; absent when that is unknown. Moves only when it moves by
    /// more than a scheduler period (or a quarter of the time left), so that status is not
    /// rewritten every cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<Time>,
    /// The earliest start of the range the start falls in with 80% confidence (at most
    /// `expectedStart`): every end it waits for at the low end of its run time's range. Moves
    /// as `expectedStart` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest_start: Option<Time>,
    /// The latest start of that range (at least `expectedStart`): every end at the high end of
    /// its range, a declared one at its declared end, a job that outlived its learned run times
    /// at twice its age or more. Moves as `expectedStart` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_start: Option<Time>,
    /// The expected start and its range as the `ETA` column prints them, e.g.
    /// `2030-03-17T18:00:00Z (17:40:00Z to 19:10:00Z)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub eta: Option<String>,
    /// What `expectedStart` rests on.
    pub basis: ForecastBasis,
    /// What would let it start now (the scheduler's counterfactual, e.g. a queue limit to
    /// raise), when it waits on a rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub to_start: Option<String>,
}

/// What a forecast's expected start rests on, from the surest.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum ForecastBasis {
    /// Every end it waits for is declared by pods' `activeDeadlineSeconds`, which the kubelet
    /// enforces.
    DeclaredRunTimes,
    /// Some end it waits for was learned from the queue's finished jobs (`Queue
    /// status.runTimes`), all of the gang's own namespace: an estimate.
    LearnedRunTimes,
    /// Some end it waits for was learned from the finished jobs of another namespace: an
    /// estimate resting on another team's history, which the gang's own runs do not shape.
    OtherNamespacesRunTimes,
    /// Something it waits for has no known end: no start can be given.
    #[default]
    Unknown,
    /// It can never start as it is: it asks more than any place it may use has (the cluster,
    /// its largest node or topology domain), or fewer GPUs than its own NVLink minimum. Its
    /// `Unschedulable` condition says which; the gang must change.
    Never,
}

/// How the `ETA` column prints a start and its range: the expected start, then the earliest
/// and latest, without their date when they fall on the expected start's day (UTC).
pub fn eta(expected: &Time, earliest: &Time, latest: &Time) -> String {
    let expected = expected.0.to_string();
    let (day, _) = expected.split_once('T').unwrap_or((&expected, ""));
    let short = |t: &Time| {
        let t = t.0.to_string();
        match t.split_once('T') {
            Some((d, time)) if d == day => time.to_string(),
            _ => t,
        }
    };
    format!("{expected} ({} to {})", short(earliest), short(latest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(t).expect("a time"))
    }

    #[test]
    fn the_eta_column_gives_the_range_without_repeating_the_day() {
        let start = 1_900_000_000;
        assert_eq!(
            eta(&at(start), &at(start - 600), &at(start + 3600)),
            "2030-03-17T17:46:40Z (17:36:40Z to 18:46:40Z)"
        );
        assert_eq!(
            eta(&at(start), &at(start), &at(start + 86_400)),
            "2030-03-17T17:46:40Z (17:46:40Z to 2030-03-18T17:46:40Z)"
        );
    }
}
