//! "When will it start?" in `drover explain`: the waiting gang's positions, expected start and
//! the range it starts in with 80% confidence from the core's forecast, said with what the
//! start rests on — declared run times, the learned run times it waited for (which runs of
//! which jobs, in which namespaces, they come from, as the queues' histories predict them for
//! the scheduler, through the same conversion), or nothing known.
//! A user who may not read what the scheduler reads gets the forecast its status shows.

use drover_api::crd::forecast::{Forecast as StatusForecast, ForecastBasis};
use drover_k8s::convert::Converted;
use drover_scheduler::forecast::{Basis, Forecast};
use drover_scheduler::run_times::{HistoryKey, Prediction, MIN_SAMPLES};
use drover_scheduler::snapshot::{JobId, RunTime, Snapshot};

use serde::Serialize;

/// Where a waiting gang stands and when it is expected to start.
#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ForecastFacts {
    /// 1 for the gang its queue serves first.
    pub queue_position: u32,
    /// 1 for the gang the scheduler serves first, counting every queue's waiting gangs.
    pub position: u32,
    /// When it is expected to start (RFC 3339), when that is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<String>,
    /// The earliest and the latest start of the range it starts in with 80% confidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earliest_start: Option<String>,
    /// See `earliest_start`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_start: Option<String>,
    /// What that rests on: `DeclaredRunTimes`, `LearnedRunTimes`, `OtherNamespacesRunTimes` or
    /// `Unknown`.
    pub basis: String,
    /// The expected start and what it rests on, for people.
    pub start: String,
}

/// Why a start is unknown (the fewest runs a prediction learns from: [`MIN_SAMPLES`]).
fn unknown() -> String {
    format!(
        "unknown: work it waits for has no known end (its pods declare no activeDeadlineSeconds, and fewer than \
         {MIN_SAMPLES} earlier runs of jobs like it have completed in its queue)"
    )
}

/// Why a gang never starts as it is.
const NEVER: &str = "never, as it is: no place it may use can hold it (its reason says why); it must ask for less";

/// The facts of `job`'s forecast `f` in `snap`, the snapshot `converted` gave.
pub fn facts(snap: &Snapshot, converted: &Converted, job: JobId, f: &Forecast) -> ForecastFacts {
    let [expected_start, earliest_start, latest_start] =
        [f.start, f.earliest, f.latest].map(|t| t.map(|t| snap.time(t)));
    let start = match (f.start, f.basis) {
        (_, Basis::Never) => NEVER.to_string(),
        (Some(_), Basis::Unknown) | (None, _) => unknown(),
        (Some(t), basis) => {
            let from = match basis {
                Basis::Declared => "from declared run times".to_string(),
                _ => learned(snap, converted, job, t),
            };
            expected(&expected_start, &earliest_start, &latest_start, &from)
        }
    };
    ForecastFacts {
        queue_position: f.queue_position,
        position: f.position,
        expected_start,
        earliest_start,
        latest_start,
        basis: f.basis.as_str().into(),
        start,
    }
}

/// "expected at T, 80% likely between E and L (from ...)"; a range of one point (every end
/// exact) goes without saying.
fn expected(at: &Option<String>, earliest: &Option<String>, latest: &Option<String>, from: &str) -> String {
    match (at, earliest, latest) {
        (Some(t), Some(e), Some(l)) if !(e == t && l == t) => {
            format!("expected at {t}, 80% likely between {e} and {l} ({from})")
        }
        _ => format!("expected at {} ({from})", at.as_deref().unwrap_or_default()),
    }
}

/// Where the learned run times a start at `start` rests on come from: the predictions of the
/// running jobs that end by then (the latest first), else of every other job with one.
fn learned(snap: &Snapshot, converted: &Converted, job: JobId, start: i64) -> String {
    let predictions = converted.predictions(snap);
    let learned = |j: JobId| matches!(snap.jobs[j].run_time, Some(RunTime::Learned(_))) && j != job;
    let mut waited: Vec<(i64, &Prediction)> = predictions
        .iter_enumerated()
        .filter(|&(j, _)| learned(j))
        .filter_map(|(j, p)| Some((snap.jobs[j].ends_at.filter(|&end| end <= start)?, p.as_ref()?)))
        .collect();
    waited.sort_by_key(|&(end, _)| std::cmp::Reverse(end));
    let mut from: Vec<&Prediction> = waited.into_iter().map(|(_, p)| p).collect();
    if from.is_empty() {
        from = predictions.iter_enumerated().filter(|&(j, _)| learned(j)).filter_map(|(_, p)| p.as_ref()).collect();
    }
    let mut said: Vec<String> = Vec::new();
    for p in from {
        let text = describe(p);
        if !said.contains(&text) {
            said.push(text);
        }
    }
    said.truncate(3);
    if said.is_empty() {
        return "from learned run times".into();
    }
    said.join("; ")
}

/// "learned from 3 earlier runs of jobs named train in team-a".
fn describe(p: &Prediction) -> String {
    let namespace = p.key.namespace();
    match &p.key {
        HistoryKey::Namespace { .. } => format!("learned from {} earlier runs of jobs in {namespace}", p.samples),
        key => format!("learned from {} earlier runs of {} in {namespace}", p.samples, key.describe()),
    }
}

/// The facts of the forecast a PodGroup's status shows (the scheduler's last).
pub fn from_status(f: &StatusForecast) -> ForecastFacts {
    let [expected_start, earliest_start, latest_start] =
        [&f.expected_start, &f.earliest_start, &f.latest_start].map(|t| t.as_ref().map(|t| t.0.to_string()));
    let said = |from: &str| expected(&expected_start, &earliest_start, &latest_start, from);
    let (basis, start) = match (&expected_start, f.basis) {
        (Some(_), ForecastBasis::DeclaredRunTimes) => ("DeclaredRunTimes", said("from declared run times")),
        (Some(_), ForecastBasis::LearnedRunTimes) => ("LearnedRunTimes", said("from learned run times")),
        (Some(_), ForecastBasis::OtherNamespacesRunTimes) => {
            ("OtherNamespacesRunTimes", said("from learned run times, some of other namespaces"))
        }
        (_, ForecastBasis::Never) => ("Never", NEVER.to_string()),
        _ => ("Unknown", unknown()),
    };
    ForecastFacts {
        queue_position: f.queue_position,
        position: f.position,
        expected_start,
        earliest_start,
        latest_start,
        basis: basis.into(),
        start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_scheduler::snapshot::RunTimeRange;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_status_forecast_says_what_its_start_rests_on() {
        let at = Time(k8s_openapi::jiff::Timestamp::from_second(1_900_000_000).expect("a time"));
        let f = StatusForecast {
            queue_position: 2,
            position: 5,
            expected_start: Some(at.clone()),
            basis: ForecastBasis::DeclaredRunTimes,
            ..StatusForecast::default()
        };
        let facts = from_status(&f);
        assert_eq!(facts.start, "expected at 2030-03-17T17:46:40Z (from declared run times)");
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_900_003_600).expect("a time"));
        let ranged = StatusForecast {
            earliest_start: Some(at),
            latest_start: Some(later),
            basis: ForecastBasis::OtherNamespacesRunTimes,
            ..f.clone()
        };
        assert_eq!(
            from_status(&ranged).start,
            "expected at 2030-03-17T17:46:40Z, 80% likely between 2030-03-17T17:46:40Z and 2030-03-17T18:46:40Z \
             (from learned run times, some of other namespaces)"
        );
        assert_eq!((facts.queue_position, facts.position), (2, 5));
        let unknown = from_status(&StatusForecast { expected_start: None, basis: ForecastBasis::Unknown, ..f });
        assert!(unknown.start.starts_with("unknown: "), "{}", unknown.start);
        assert_eq!(unknown.expected_start, None);
    }

    #[test]
    fn a_prediction_names_its_runs_and_jobs() {
        let range = RunTimeRange { low: 300, high: 900 };
        let p = |key| Prediction { seconds: 600, key, samples: 2, changes_at: None, range };
        let named = p(HistoryKey::Name { namespace: "team-a".into(), name: "train".into() });
        assert_eq!(describe(&named), "learned from 2 earlier runs of jobs named train in team-a");
        let shape = p(HistoryKey::Shape { namespace: "team-a".into(), gpus: 8 });
        assert_eq!(describe(&shape), "learned from 2 earlier runs of 8-GPU jobs in team-a");
        let all = p(HistoryKey::Namespace { namespace: "team-a".into() });
        assert_eq!(describe(&all), "learned from 2 earlier runs of jobs in team-a");
    }
}
