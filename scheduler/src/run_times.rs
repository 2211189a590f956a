//! Learned run times: what a job that declares none will probably run for, learned from the
//! jobs of the same queue that finished. Most pods declare no `activeDeadlineSeconds`, and
//! without a run time neither shortest-first nor reservations can plan; the Helios study (SC
//! '21) found a user's recent jobs of the same name or size the best cheap predictor.
//!
//! One [`RunTimeHistory`] per queue keeps, for a few keys from the most to the least
//! specific — the job's name in its namespace, its GPU count in its namespace, its namespace —
//! the run times of the last [`SAMPLES`] jobs that finished, and predicts their median from
//! the most specific key with at least [`MIN_SAMPLES`], with the 80% range their spread gives
//! (widened for a job that has run long: see [`RunTimeHistory::predict`]). Its size is bounded (a namespace keeps
//! at most [`NAMES_PER_NAMESPACE`] names, the history at most [`KEYS`] keys, the least
//! recently fed going first), so it fits in the queue's status, where the scheduler keeps it
//! for the next leader. Keys are scoped to a namespace: a team's jobs predict only from that
//! team's own history, so no tenant can shift another's predictions.

use std::collections::BTreeMap;

use crate::snapshot::RunTimeRange;

/// Run times kept per key: the recent past, not the whole history.
pub const SAMPLES: usize = 8;
/// Finished jobs a key needs before it predicts.
pub const MIN_SAMPLES: usize = 2;
/// Keys one queue's history holds at most.
pub const KEYS: usize = 256;
/// Names one namespace keeps at most, so a namespace of one-off names cannot push the other
/// namespaces' keys out.
pub const NAMES_PER_NAMESPACE: usize = 32;

/// What a history entry is about, from the most to the least specific.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HistoryKey {
    /// Jobs of this name in this namespace (a job run again and again under one name).
    Name { namespace: String, name: String },
    /// Jobs of this many GPUs in this namespace.
    Shape { namespace: String, gpus: i64 },
    /// Every job of this namespace.
    Namespace { namespace: String },
}

impl HistoryKey {
    /// The namespace the key belongs to.
    pub fn namespace(&self) -> &str {
        match self {
            HistoryKey::Name { namespace, .. }
            | HistoryKey::Shape { namespace, .. }
            | HistoryKey::Namespace { namespace } => namespace,
        }
    }

    /// How it is described to users: "name train", "8-GPU jobs", "namespace".
    pub fn describe(&self) -> String {
        match self {
            HistoryKey::Name { name, .. } => format!("jobs named {name}"),
            HistoryKey::Shape { gpus, .. } => format!("{gpus}-GPU jobs"),
            HistoryKey::Namespace { .. } => "jobs".to_string(),
        }
    }
}

/// The features of a job the history learns and predicts by.
#[derive(Debug, Clone, Copy)]
pub struct JobFeatures<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name, when the name means something (a trace's generated ids do not).
    pub name: Option<&'a str>,
    /// GPUs of all its pods.
    pub gpus: i64,
}

impl JobFeatures<'_> {
    /// Its keys, most specific first.
    fn keys(&self) -> Vec<HistoryKey> {
        let namespace = self.namespace.to_string();
        let mut keys = Vec::with_capacity(3);
        if let Some(name) = self.name {
            keys.push(HistoryKey::Name { namespace: namespace.clone(), name: name.to_string() });
        }
        keys.push(HistoryKey::Shape { namespace: namespace.clone(), gpus: self.gpus });
        keys.push(HistoryKey::Namespace { namespace });
        keys
    }
}

/// The recent run times of one key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Samples {
    /// Run times in seconds, oldest first, at most [`SAMPLES`].
    pub seconds: Vec<i64>,
    /// When the last one was added (seconds on the snapshot's clock): the least recent key
    /// goes first when the history is full.
    pub updated: i64,
}

/// A predicted run time and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prediction {
    /// Seconds the job is expected to run in all (for a running job, given how long it has
    /// run already).
    pub seconds: i64,
    /// The key whose samples it came from.
    pub key: HistoryKey,
    /// How many samples that key holds.
    pub samples: usize,
    /// The 80% range of the run time it reaches (the forecast's range), from the same
    /// samples as `seconds`.
    pub range: RunTimeRange,
    /// The run so far (`elapsed`) at which the prediction first changes: when the job
    /// outruns the shortest sample it was still shorter than, or its range starts to widen
    /// with its age. None when it changes with every second (a job that has outrun every
    /// sample, or whose range widens already).
    pub changes_at: Option<i64>,
}

/// One queue's learned run times.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunTimeHistory {
    entries: BTreeMap<HistoryKey, Samples>,
}

impl RunTimeHistory {
    /// A history holding `entries` (read back from status), trimmed to the bounds.
    pub fn from_entries(entries: impl IntoIterator<Item = (HistoryKey, Samples)>) -> RunTimeHistory {
        let mut history = RunTimeHistory::default();
        for (key, mut samples) in entries {
            let excess = samples.seconds.len().saturating_sub(SAMPLES);
            samples.seconds.drain(..excess);
            samples.seconds.retain(|&s| s >= 0);
            if !samples.seconds.is_empty() {
                history.entries.insert(key, samples);
            }
        }
        history.trim(None);
        history
    }

    /// Its entries, in key order (for status).
    pub fn entries(&self) -> impl Iterator<Item = (&HistoryKey, &Samples)> {
        self.entries.iter()
    }

    /// Records that a job with `features` ran for `seconds`, finishing at `at`.
    pub fn learn(&mut self, features: &JobFeatures, seconds: i64, at: i64) {
        if seconds < 0 {
            return;
        }
        for key in features.keys() {
            let samples = self.entries.entry(key.clone()).or_default();
            if samples.seconds.len() == SAMPLES {
                samples.seconds.remove(0);
            }
            samples.seconds.push(seconds);
            samples.updated = at;
            self.trim(Some(&key));
        }
    }

    /// The run time a job with `features` that has run `elapsed` seconds so far (0 when it has
    /// not started) is expected to reach: the median of the most specific key's samples
    /// longer than `elapsed`, or twice `elapsed` when it has outrun them all (a job that has
    /// run long is likely to run long). None while no key holds [`MIN_SAMPLES`].
    ///
    /// Its range runs from the 10th to the 90th percentile (nearest rank) of those samples, and
    /// at least to twice `elapsed`: a job that outlived most of its history has an end that is
    /// uncertain and later, so the range widens with its age instead of promising an end in
    /// moments; one that outran every sample may end at once.
    pub fn predict(&self, features: &JobFeatures, elapsed: i64) -> Option<Prediction> {
        features.keys().into_iter().find_map(|key| {
            let samples = self.entries.get(&key).filter(|s| s.seconds.len() >= MIN_SAMPLES)?;
            let mut longer: Vec<i64> = samples.seconds.iter().copied().filter(|&s| s > elapsed).collect();
            longer.sort_unstable();
            let twice = elapsed.saturating_mul(2);
            let (seconds, range, changes_at) = match longer.len() {
                0 => (twice, RunTimeRange { low: elapsed, high: twice }, None),
                n => {
                    let rank = |tenths: usize| longer[(n * tenths).div_ceil(10).max(1) - 1];
                    let high = rank(9);
                    // Twice its age passes the 90th percentile once the age passes half of it.
                    let widens = (twice <= high).then_some(high / 2 + 1);
                    let changes_at = widens.map(|w| w.min(longer[0]));
                    (longer[(n - 1) / 2], RunTimeRange { low: rank(1), high: high.max(twice) }, changes_at)
                }
            };
            Some(Prediction { seconds, samples: samples.seconds.len(), key, changes_at, range })
        })
    }

    /// Drops the least recently fed keys beyond the bounds, never `keep` (the key just fed).
    fn trim(&mut self, keep: Option<&HistoryKey>) {
        if let Some(HistoryKey::Name { namespace, .. }) = keep {
            let names: Vec<(&HistoryKey, i64)> = self
                .entries
                .iter()
                .filter(|(k, _)| matches!(k, HistoryKey::Name { namespace: ns, .. } if ns == namespace))
                .map(|(k, s)| (k, s.updated))
                .collect();
            if names.len() > NAMES_PER_NAMESPACE {
                let oldest = least_recent(names.into_iter(), keep);
                self.entries.remove(&oldest);
            }
        }
        while self.entries.len() > KEYS {
            let oldest = least_recent(self.entries.iter().map(|(k, s)| (k, s.updated)), keep);
            self.entries.remove(&oldest);
        }
    }
}

/// The key fed longest ago (the first in key order among equals), other than `keep`.
fn least_recent<'k>(keys: impl Iterator<Item = (&'k HistoryKey, i64)>, keep: Option<&HistoryKey>) -> HistoryKey {
    keys.filter(|(k, _)| Some(*k) != keep)
        .min_by_key(|&(_, updated)| updated)
        .map(|(k, _)| k.clone())
        .expect("a history over its bound holds a key besides the one just fed")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job<'a>(namespace: &'a str, name: &'a str, gpus: i64) -> JobFeatures<'a> {
        JobFeatures { namespace, name: Some(name), gpus }
    }

    #[test]
    fn predicts_nothing_until_a_key_has_two_runs() {
        let mut h = RunTimeHistory::default();
        h.learn(&job("team-a", "train", 8), 600, 10);
        assert_eq!(h.predict(&job("team-a", "train", 8), 0), None);
        h.learn(&job("team-a", "train", 8), 1200, 20);
        let p = h.predict(&job("team-a", "train", 8), 0).expect("two runs of the name");
        assert_eq!((p.seconds, p.samples), (600, 2));
        assert_eq!(p.key, HistoryKey::Name { namespace: "team-a".into(), name: "train".into() });
    }

    #[test]
    fn the_most_specific_key_wins_and_others_fall_back() {
        let mut h = RunTimeHistory::default();
        for (name, gpus, secs) in
            [("a", 8, 100), ("a", 8, 100), ("b", 8, 5000), ("b", 8, 5000), ("c", 1, 40), ("c", 1, 40)]
        {
            h.learn(&job("ns", name, gpus), secs, 0);
        }
        assert_eq!(h.predict(&job("ns", "a", 8), 0).map(|p| p.seconds), Some(100));
        let unseen_name = h.predict(&job("ns", "new", 8), 0).expect("the 8-GPU jobs of ns");
        assert_eq!(unseen_name.key, HistoryKey::Shape { namespace: "ns".into(), gpus: 8 });
        assert_eq!(unseen_name.seconds, 100, "median of 100,100,5000,5000 (the lower middle)");
        let unseen_shape = h.predict(&job("ns", "new", 4), 0).expect("every job of ns");
        assert_eq!(unseen_shape.key, HistoryKey::Namespace { namespace: "ns".into() });
        assert_eq!(h.predict(&job("other", "a", 8), 0), None, "another namespace's history is not used");
    }

    #[test]
    fn a_running_job_is_expected_to_reach_the_median_of_the_longer_runs_or_twice_its_age() {
        let mut h = RunTimeHistory::default();
        for secs in [100, 200, 300, 4000] {
            h.learn(&job("ns", "x", 8), secs, 0);
        }
        assert_eq!(h.predict(&job("ns", "x", 8), 0).map(|p| p.seconds), Some(200));
        assert_eq!(h.predict(&job("ns", "x", 8), 250).map(|p| p.seconds), Some(300));
        assert_eq!(h.predict(&job("ns", "x", 8), 5000).map(|p| p.seconds), Some(10_000));
    }

    #[test]
    fn a_running_job_s_prediction_holds_until_it_outruns_the_next_sample() {
        let mut h = RunTimeHistory::default();
        for secs in [100, 200, 300, 4000] {
            h.learn(&job("ns", "x", 8), secs, 0);
        }
        let at = |elapsed| h.predict(&job("ns", "x", 8), elapsed).expect("four runs");
        for (elapsed, next) in [(0, 100), (150, 200), (250, 300), (1500, 2001)] {
            let p = at(elapsed);
            assert_eq!(p.changes_at, Some(next), "after {elapsed} s");
            assert_eq!(at(next - 1), p, "the same until {next} s");
            assert_ne!(at(next), p, "changed at {next} s");
        }
        assert_eq!(at(100).seconds, 300, "at 100 s it changed");
        assert_eq!(at(2001).range.high, 4002, "from 2001 s its range widens with its age");
        assert_eq!(at(3000).changes_at, None, "a range that widens changes every second");
        assert_eq!(at(5000).changes_at, None, "twice its age changes every second");
    }

    #[test]
    fn the_range_spans_the_spread_of_the_runs() {
        let mut h = RunTimeHistory::default();
        for secs in [300, 100, 900, 200, 500, 400, 700, 600] {
            h.learn(&job("ns", "x", 8), secs, 0);
        }
        let p = h.predict(&job("ns", "x", 8), 0).expect("eight runs");
        assert_eq!(p.seconds, 400);
        assert_eq!(p.range, RunTimeRange { low: 100, high: 900 }, "the 10th and 90th percentiles of 8 runs");
        let alike = RunTimeHistory::from_entries([(
            HistoryKey::Name { namespace: "ns".into(), name: "x".into() },
            Samples { seconds: vec![500; 8], updated: 0 },
        )]);
        let p = alike.predict(&job("ns", "x", 8), 0).expect("eight runs");
        assert_eq!(p.range, RunTimeRange { low: 500, high: 500 }, "runs alike: a narrow range");
    }

    #[test]
    fn a_job_that_outlived_its_runs_widens_its_range_with_its_age() {
        let mut h = RunTimeHistory::default();
        for secs in [100, 100, 100, 1000] {
            h.learn(&job("ns", "x", 8), secs, 0);
        }
        let at = |elapsed| h.predict(&job("ns", "x", 8), elapsed).expect("four runs").range;
        assert_eq!(at(0), RunTimeRange { low: 100, high: 1000 });
        assert_eq!(at(990), RunTimeRange { low: 1000, high: 1980 }, "one run left longer: not an end in 10 s");
        assert_eq!(at(5000), RunTimeRange { low: 5000, high: 10_000 }, "past every run: now, or twice its age");
        for elapsed in (0..20_000).step_by(7) {
            let r = at(elapsed);
            assert!(r.high >= 2 * elapsed && r.low <= r.high, "at {elapsed} s: {r:?}");
        }
    }

    #[test]
    fn keeps_only_the_recent_runs_of_a_key() {
        let mut h = RunTimeHistory::default();
        for i in 0..20 {
            h.learn(&job("ns", "x", 8), if i < 12 { 10 } else { 1000 }, i);
        }
        assert_eq!(h.predict(&job("ns", "x", 8), 0).map(|p| (p.seconds, p.samples)), Some((1000, SAMPLES)));
    }

    #[test]
    fn a_flood_of_one_off_names_stays_within_its_namespace_and_the_bound() {
        let mut h = RunTimeHistory::default();
        h.learn(&job("quiet", "nightly", 8), 3600, 0);
        h.learn(&job("quiet", "nightly", 8), 3600, 1);
        for i in 0..1000 {
            h.learn(&job("noisy", &format!("run-{i}"), 1), 5, 10 + i);
        }
        assert!(h.entries().count() <= KEYS);
        let noisy_names =
            h.entries().filter(|(k, _)| matches!(k, HistoryKey::Name { namespace, .. } if namespace == "noisy"));
        assert_eq!(noisy_names.count(), NAMES_PER_NAMESPACE);
        let quiet = h.predict(&job("quiet", "nightly", 8), 0).expect("the quiet team's history survives");
        assert_eq!(quiet.seconds, 3600);
    }

    #[test]
    fn history_read_back_is_trimmed_to_the_bounds() {
        let long = Samples { seconds: (0..50).collect(), updated: 0 };
        let h = RunTimeHistory::from_entries([(HistoryKey::Namespace { namespace: "ns".into() }, long)]);
        let (_, samples) = h.entries().next().expect("kept");
        assert_eq!(samples.seconds, (42..50).collect::<Vec<i64>>());
    }
}
