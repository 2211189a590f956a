//! Learning run times from the jobs that complete (see [`crate::run_times`]).
//!
//! A PodGroup whose status the scheduler has made `Completed` (every pod finished, and none
//! failed or at least its gang minimum succeeded) is a finished run of its job. Its run time
//! is from its earliest pod's `status.startTime` to its latest succeeded pod's containers'
//! `state.terminated.finishedAt`: both written by the kubelet through `pods/status`, which
//! tenants cannot write, so a team cannot make its jobs look shorter than they ran. It is
//! recorded in the history of the queue its succeeded pods were charged to as members of it
//! (their charge record, which only the scheduler's binding writes), in that Queue's
//! `status.runTimes`; never from the group's `spec.queue`, which the tenant writes, so a group
//! the scheduler refused or never bound (its pods placed by another scheduler) teaches no
//! queue anything, and no team can feed another team's history. It is read fresh, fed, and written back
//! carrying the resourceVersion it was read at, so a concurrent writer makes it try again
//! next cycle rather than lose a run. Then the group's `status.recordedRunTimeSeconds` says
//! it was recorded, and groups that say so are never recorded again, whichever scheduler
//! leads. A group whose queue was written but whose mark failed is marked next cycle without
//! being recorded again; only a crash or a change of leader between the two writes counts a
//! run twice. Queues without a Queue object (the implicit `default`) keep no history.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use drover_api::crd::podgroup::{PodGroup, PodGroupPhase};
use drover_api::crd::queue::Queue;
use drover_scheduler::run_times::JobFeatures;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

use super::cache::{key_of, Key, Overlay};
use super::Writer;
use crate::charge::Charge;
use crate::convert::{gpus_requested, Converted, ObjectLists};
use crate::run_times;

/// Completed groups recorded per cycle at most, so that the groups of a whole history found
/// at once (a first start on an old cluster) spread over a few cycles.
const PER_CYCLE: usize = 64;

/// Runs recorded in their queue's history whose group is not marked yet: group uid to the
/// run time recorded.
#[derive(Debug, Default)]
pub(super) struct Unmarked(HashMap<String, i64>);

/// One completed run to record.
struct Run<'g> {
    group: &'g Arc<PodGroup>,
    name: String,
    gpus: i64,
    seconds: i64,
    finished: i64,
}

/// Records the runs of the groups that completed and are not recorded yet, and marks them.
/// Returns the writes it tried (none: every completed run it can record is recorded).
pub(super) async fn record(
    writer: &Writer<'_>,
    unmarked: &mut Unmarked,
    overlay: &mut Overlay,
    g: &ObjectLists,
    converted: &Converted,
) -> usize {
    let completed: Vec<&Arc<PodGroup>> = g
        .pod_groups
        .iter()
        .filter(|pg| {
            pg.status
                .as_ref()
                .is_some_and(|s| s.phase == PodGroupPhase::Completed && s.recorded_run_time_seconds.is_none())
        })
        .collect();
    let uid = |pg: &PodGroup| pg.metadata.uid.clone().unwrap_or_default();
    let live: HashSet<String> = completed.iter().map(|pg| uid(pg)).collect();
    unmarked.0.retain(|u, _| live.contains(u));
    if completed.is_empty() {
        return 0;
    }
    let pods = g.pods_by_key();
    let queues: HashSet<&str> = g.queues.iter().filter_map(|q| q.metadata.name.as_deref()).collect();
    let mut marks: Vec<(&Arc<PodGroup>, i64)> = Vec::new();
    let mut runs: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    // Groups that cannot be recorded are passed over before the cap, so that no number of
    // them holds back the runs of others.
    let recordable = completed.into_iter().filter_map(|group| match unmarked.0.get(&uid(group)) {
        Some(&seconds) => Some(Err((group, seconds))),
        None => {
            let (queue, run) = run_of(group, converted, &pods)?;
            queues.contains(queue.as_str()).then_some(Ok((queue, run)))
        }
    });
    for found in recordable.take(PER_CYCLE) {
        match found {
            Err(mark) => marks.push(mark),
            Ok((queue, run)) => runs.entry(queue).or_default().push(run),
        }
    }
    let mut tried = runs.len();
    let api: Api<Queue> = Api::all(writer.client.clone());
    for (queue, list) in runs {
        match learn(&api, &queue, &list).await {
            Ok(()) => {
                for run in list {
                    unmarked.0.insert(uid(run.group), run.seconds);
                    marks.push((run.group, run.seconds));
                }
            }
            Err(e) => tracing::debug!(queue, error = %e, "learned run times not written; retrying next cycle"),
        }
    }
    tried += marks.len();
    for (group, seconds) in marks {
        let (namespace, name) = key_of(&group.metadata);
        let groups: Api<PodGroup> = Api::namespaced(writer.client.clone(), &namespace);
        let patch = json!({"status": {"recordedRunTimeSeconds": seconds}});
        match groups.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(new) => {
                overlay.group_written(group.metadata.resource_version.clone(), new);
                unmarked.0.remove(&uid(group));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                unmarked.0.remove(&uid(group));
            }
            Err(e) => tracing::debug!(%namespace, group = %name, error = %e, "run not marked recorded; retrying"),
        }
    }
    tried
}

/// The completed run of `group` and the queue to record it in: the queue its succeeded pods
/// were charged to as its members. None when no such pod carries a charge record (the
/// scheduler never bound it as this group's) or the run's start or end is unknown.
fn run_of<'g>(
    group: &'g Arc<PodGroup>,
    converted: &Converted,
    pods: &HashMap<Key, &Arc<Pod>>,
) -> Option<(String, Run<'g>)> {
    let facts = converted.groups.get(&key_of(&group.metadata))?;
    let members: Vec<&Pod> = facts
        .members
        .values()
        .filter_map(|m| pods.get(&(m.pod.namespace.clone(), m.pod.name.clone())).map(|p| p.as_ref()))
        .collect();
    let (seconds, finished) = finished_run(&members)?;
    let name = group.metadata.name.as_deref()?;
    let charge = members
        .iter()
        .filter(|p| phase(p) == Some("Succeeded"))
        .filter_map(|p| Charge::of(p))
        .find(|c| c.group == name)?;
    let gpus = members.iter().map(|p| gpus_requested(p)).sum();
    Some((charge.queue, Run { group, name: facts.job_name.clone(), gpus, seconds, finished }))
}

/// Feeds `runs` into queue `name`'s history, read fresh and written back at the version read.
async fn learn(api: &Api<Queue>, name: &str, runs: &[Run<'_>]) -> Result<(), kube::Error> {
    let listed = api.list(&ListParams::default().fields(&format!("metadata.name={name}"))).await?;
    let Some(queue) = listed.items.into_iter().next() else { return Ok(()) };
    let mut history = run_times::history(&queue);
    for run in runs {
        let namespace = run.group.metadata.namespace.as_deref().unwrap_or_default();
        let features = JobFeatures { namespace, name: Some(&run.name), gpus: run.gpus };
        history.learn(&features, run.seconds, run.finished);
    }
    let patch = json!({
        "metadata": {"resourceVersion": queue.metadata.resource_version},
        "status": {"runTimes": run_times::status(&history)},
    });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// A finished run's seconds and end (Unix seconds): from the earliest `startTime` of `pods`
/// to the latest `finishedAt` of a succeeded pod's containers. None when either is unknown.
fn finished_run(pods: &[&Pod]) -> Option<(i64, i64)> {
    let started = pods.iter().filter_map(|p| Some(p.status.as_ref()?.start_time.as_ref()?.0.as_second())).min()?;
    let finished = pods
        .iter()
        .filter(|p| phase(p) == Some("Succeeded"))
        .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
        .filter_map(|c| Some(c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()?.0.as_second()))
        .max()?;
    (finished >= started).then_some((finished - started, finished))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, start: Option<&str>, finished: &[&str]) -> Pod {
        let containers: Vec<_> = finished
            .iter()
            .map(|t| json!({"name": "c", "image": "i", "ready": false, "restartCount": 0, "imageID": "", "state": {"terminated": {"exitCode": 0, "finishedAt": t}}}))
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": {"phase": phase, "startTime": start, "containerStatuses": containers}}))
            .expect("a pod")
    }

    #[test]
    fn a_run_is_from_the_first_start_to_the_last_success() {
        let a = pod("Succeeded", Some("2030-01-01T00:00:00Z"), &["2030-01-01T00:10:00Z", "2030-01-01T00:09:00Z"]);
        let b = pod("Succeeded", Some("2030-01-01T00:01:00Z"), &["2030-01-01T00:12:00Z"]);
        let failed = pod("Failed", Some("2030-01-01T00:00:30Z"), &["2030-01-01T01:00:00Z"]);
        let (seconds, end) = finished_run(&[&a, &b, &failed]).expect("a run");
        assert_eq!(seconds, 12 * 60, "a failed pod's end is not the job's");
        assert_eq!(end, a.status.as_ref().and_then(|s| s.start_time.as_ref()).map_or(0, |t| t.0.as_second()) + 720);
        assert_eq!(finished_run(&[&failed]), None, "no pod succeeded");
        assert_eq!(finished_run(&[&pod("Succeeded", None, &["2030-01-01T00:10:00Z"])]), None, "no start known");
    }
}
