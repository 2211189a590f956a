//! Learned run times on Kubernetes: each queue's history ([`RunTimeHistory`]) as its Queue's
//! `status.runTimes` keeps it, the name a group's runs are learned and predicted by, and the
//! predictions the snapshot plans with for jobs that declare no run time. The scheduler and
//! `drover explain` both read histories and predict through here, so they predict the same.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_api::crd::run_times::RunTimeSamples;
use drover_scheduler::ids::TiVec;
use drover_scheduler::run_times::{HistoryKey, JobFeatures, Prediction, RunTimeHistory, Samples};
use drover_scheduler::snapshot::{Job, JobId, RunTime, Snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A queue's learned run times, as its status keeps them.
pub fn history(queue: &Queue) -> RunTimeHistory {
    let entries = queue.status.iter().flat_map(|s| &s.run_times).map(|e| {
        let key = match (&e.name, e.gpus) {
            (Some(name), _) => HistoryKey::Name { namespace: e.namespace.clone(), name: name.clone() },
            (None, Some(gpus)) => HistoryKey::Shape { namespace: e.namespace.clone(), gpus },
            (None, None) => HistoryKey::Namespace { namespace: e.namespace.clone() },
        };
        (key, Samples { seconds: e.seconds.clone(), updated: e.updated.0.as_second() })
    });
    RunTimeHistory::from_entries(entries)
}

/// Every queue's learned run times, by queue name.
pub fn histories(queues: &[Arc<Queue>]) -> BTreeMap<String, RunTimeHistory> {
    queues
        .iter()
        .filter_map(|q| Some((q.metadata.name.clone()?, history(q))))
        .filter(|(_, h)| *h != RunTimeHistory::default())
        .collect()
}

/// A history as Queue status keeps it.
pub fn status(history: &RunTimeHistory) -> Vec<RunTimeSamples> {
    history
        .entries()
        .map(|(key, samples)| {
            let (name, gpus) = match key {
                HistoryKey::Name { name, .. } => (Some(name.clone()), None),
                HistoryKey::Shape { gpus, .. } => (None, Some(*gpus)),
                HistoryKey::Namespace { .. } => (None, None),
            };
            let updated = jiff::Timestamp::from_second(samples.updated).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            RunTimeSamples {
                namespace: key.namespace().to_string(),
                name,
                gpus,
                seconds: samples.seconds.clone(),
                updated: Time(updated),
            }
        })
        .collect()
}

/// The name a group's runs are learned and predicted by: the name of the object controlling
/// it (a Drover Job, a PyTorchJob, a JobSet, the batch Job of a plain pod...), which a team
/// submits again and again under one name, else the group's own.
pub fn job_name(group: &PodGroup) -> String {
    let owners = group.metadata.owner_references.iter().flatten();
    let controller = owners.filter(|r| r.controller == Some(true) && !r.name.is_empty()).map(|r| &r.name).next();
    controller.or(group.metadata.name.as_ref()).cloned().unwrap_or_default()
}

/// GPUs of all of a snapshot job's pods.
fn gpus(snap: &Snapshot, job: &Job) -> i64 {
    let Some(g) = snap.gpu else { return 0 };
    job.tasks.iter().map(|t| t.requests[g].saturating_mul(t.pods.len() as i64)).sum()
}

/// What `histories` (by queue name) predict for each job of `snap` that declares no run time,
/// by the name `name_of` gives it (none for a job of no group): for a running job, given how
/// long it has run.
pub fn predict<'a>(
    snap: &Snapshot,
    histories: &BTreeMap<String, RunTimeHistory>,
    name_of: impl Fn(&Job) -> Option<&'a str>,
) -> TiVec<JobId, Option<Prediction>> {
    snap.jobs
        .iter()
        .map(|job| {
            if job.run_time.and_then(RunTime::declared).is_some() {
                return None;
            }
            let history = histories.get(&snap.queues[job.queue].name)?;
            let features = JobFeatures { namespace: &job.namespace, name: name_of(job), gpus: gpus(snap, job) };
            let Some(started) = job.started_at else { return history.predict(&features, 0) };
            let elapsed = snap.clock.unnoted().saturating_sub(started).max(0);
            let prediction = history.predict(&features, elapsed);
            // The prediction depends on the time only through the run so far: it holds until
            // that reaches where the prediction changes.
            if let Some(p) = &prediction {
                snap.clock.holds_only_until(p.changes_at.map_or(i64::MIN, |at| started.saturating_add(at)));
            }
            prediction
        })
        .collect()
}

/// Gives each job its prediction as a learned run time with its range, and a running job whose
/// end is not declared the end it predicts.
pub fn apply(snap: &mut Snapshot, predictions: &TiVec<JobId, Option<Prediction>>) {
    for (job, p) in snap.jobs.iter_mut().zip(predictions.iter()) {
        let Some(p) = p else { continue };
        job.run_time = Some(RunTime::Learned(p.seconds));
        job.run_time_range = Some(p.range);
        if job.ends_at.is_none() {
            job.ends_at = job.started_at.map(|s| s.saturating_add(p.seconds));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_scheduler::run_times::{KEYS, SAMPLES};
    use serde_json::json;

    #[test]
    fn the_api_bounds_are_the_histories_bounds() {
        assert_eq!(drover_api::crd::run_times::MAX_SAMPLES as usize, SAMPLES);
        assert_eq!(drover_api::crd::run_times::MAX_KINDS as usize, KEYS);
    }

    #[test]
    fn a_history_reads_back_as_it_was_written() {
        let mut h = RunTimeHistory::default();
        let train = JobFeatures { namespace: "team-a", name: Some("train"), gpus: 8 };
        h.learn(&train, 600, 1_800_000_000);
        h.learn(&train, 700, 1_800_000_100);
        let mut queue: Queue = serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {}})).expect("a Queue");
        queue.status = Some(drover_api::crd::queue::QueueStatus { run_times: status(&h), ..Default::default() });
        let written = serde_json::to_value(&queue.status).expect("serializes");
        assert_eq!(written["runTimes"].as_array().map(Vec::len), Some(3), "name, shape and namespace: {written}");
        assert_eq!(written["runTimes"][0]["name"], "train");
        assert_eq!(history(&queue), h);
        assert_eq!(histories(&[Arc::new(queue)]).get("q"), Some(&h));
    }

    #[test]
    fn a_group_is_learned_by_the_name_of_its_controller_else_its_own() {
        let group = |owners: serde_json::Value| -> PodGroup {
            serde_json::from_value(
                json!({"metadata": {"name": "pg", "ownerReferences": owners}, "spec": {"minMember": 1}}),
            )
            .expect("a PodGroup")
        };
        let owner = |name: &str, controller: bool| json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job", "name": name, "uid": "u", "controller": controller});
        assert_eq!(job_name(&group(json!([owner("train", true)]))), "train");
        assert_eq!(job_name(&group(json!([owner("other", false)]))), "pg", "only a controller names the job");
        assert_eq!(job_name(&group(json!([owner("", true)]))), "pg", "a plain pod's group has an empty owner");
        assert_eq!(job_name(&group(json!(null))), "pg");
    }
}
