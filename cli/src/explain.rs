//! `drover explain job NS/NAME`: why a job waits. It reads the Job, its PodGroup and the
//! queue tree, and puts side by side what the scheduler said (the PodGroup's conditions),
//! the gang's minimum request and each queue's figures on the way up the tree (allocated,
//! deserved, fair share, limit), then says which of them blocks the job and what would let
//! it start. It reads only; every figure comes from what the scheduler and the controllers
//! last wrote.

use std::collections::{BTreeMap, BTreeSet};

use drover_api::crd::job::{Job, JobState};
use drover_api::crd::podgroup::{PodGroup, PodGroupPhase};
use drover_api::crd::queue::{Queue, QueueOpenState};
use drover_api::resources::{format_amount, ResourceList};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::connect::Failure;
use crate::output::columns;

/// The queue of work that names none (the scheduler's and the Job controller's default).
const DEFAULT_QUEUE: &str = "default";

/// Everything `explain` found, and its conclusions.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `namespace/name` of the Job.
    pub job: String,
    /// `Waiting`, `Running`, `Finished` or `Invalid`.
    pub verdict: String,
    /// The Job's lifecycle state.
    pub state: String,
    /// The Job's pods by state.
    pub pods: PodCounts,
    /// The PodGroup, if the controllers made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_group: Option<GroupSummary>,
    /// The queue the job is in.
    pub queue: String,
    /// The job's queue and its ancestors, leaf first.
    pub queue_path: Vec<PathQueue>,
    /// What keeps the job from starting (empty when nothing does).
    pub blockers: Vec<String>,
    /// What would let it start.
    pub to_start: Vec<String>,
}

/// A Job's pods by state.
#[derive(Serialize, Debug, Default)]
pub struct PodCounts {
    /// Waiting for a node.
    pub pending: u32,
    /// Running.
    pub running: u32,
    /// Succeeded.
    pub succeeded: u32,
    /// Failed.
    pub failed: u32,
}

/// The PodGroup as the scheduler sees it.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct GroupSummary {
    /// Its phase.
    pub phase: String,
    /// The gang minimum: this many pods start together or none does.
    pub min_member: u32,
    /// Running pods.
    pub running: u32,
    /// The minimum's resources (`spec.minResources`).
    pub min_resources: BTreeMap<String, String>,
    /// The scheduler's reason for the wait (the `Unschedulable` condition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_says: Option<String>,
}

/// One queue on the path from the job's queue to the root.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PathQueue {
    /// The queue.
    pub name: String,
    /// `Open` or `Closed`.
    pub state: String,
    /// `InQuota`, `OverQuota` or `OverFairShare`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_state: Option<String>,
    /// Figures for each resource the gang requests.
    pub resources: BTreeMap<String, PathFigures>,
}

/// A queue's figures for one resource, beside what the gang needs.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PathFigures {
    /// The gang minimum's request.
    pub needs: String,
    /// In use by the queue and its descendants.
    pub allocated: String,
    /// Guaranteed quota.
    pub deserved: String,
    /// What the queue may use now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<String>,
    /// The hard cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

/// Splits `NS/NAME` (a bare NAME means the `default` namespace, as kubectl's default).
pub fn parse_target(target: &str) -> Result<(String, String), Failure> {
    let (ns, name) = match target.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("default", target),
    };
    if ns.is_empty() || name.is_empty() || name.contains('/') {
        return Err(Failure::BadInput(format!("job {target:?}: expected NAMESPACE/NAME")));
    }
    Ok((ns.to_string(), name.to_string()))
}

/// Reads the Job, its PodGroup and the queues, and explains. Queues a user may not list are
/// left out of the figures with a note, not a failure.
pub async fn fetch(client: &Client, namespace: &str, name: &str) -> Result<Explanation, Failure> {
    let object = format!("job {namespace}/{name}");
    let job =
        Api::<Job>::namespaced(client.clone(), namespace).get(name).await.map_err(|e| Failure::from_api(&object, e))?;
    let group = Api::<PodGroup>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| Failure::from_api(&format!("podgroup {namespace}/{name}"), e))?;
    let (queues, unreadable) = match crate::queue_tree::fetch(client).await {
        Ok(q) => (q, None),
        Err(Failure::Cluster(why)) => (Vec::new(), Some(why)),
        Err(other) => return Err(other),
    };
    let mut explanation = explain(&job, group.as_ref(), &queues);
    if let Some(why) = unreadable {
        explanation.blockers.push(format!("the queue figures are missing: {why}"));
    }
    Ok(explanation)
}

/// Explains `job` from its group and the queue tree.
pub fn explain(job: &Job, group: Option<&PodGroup>, queues: &[Queue]) -> Explanation {
    let status = job.status.clone().unwrap_or_default();
    let queue = group
        .and_then(|g| g.spec.queue.clone())
        .or_else(|| job.spec.queue.clone())
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| DEFAULT_QUEUE.to_string());
    let mut out = Explanation {
        job: format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any()),
        verdict: String::new(),
        state: format!("{:?}", status.state),
        pods: PodCounts {
            pending: status.pending,
            running: status.running,
            succeeded: status.succeeded,
            failed: status.failed,
        },
        pod_group: group.map(summary),
        queue: queue.clone(),
        queue_path: Vec::new(),
        blockers: Vec::new(),
        to_start: Vec::new(),
    };
    if matches!(status.state, JobState::Completed | JobState::Aborted | JobState::Failed) {
        out.verdict = "Finished".into();
        return out;
    }
    if let Some(c) = invalid(&status.conditions) {
        out.verdict = "Invalid".into();
        out.blockers.push(format!("the Job is not valid: {}: {}", c.reason, c.message));
        out.to_start
            .push("fix the Job's spec as the message says (the controllers re-check it on every change)".into());
        return out;
    }
    let Some(group) = group else {
        out.verdict = "Waiting".into();
        out.blockers.push(format!("podgroup {} does not exist yet", out.job));
        out.to_start.push("the controllers create it: check that `drover controllers` runs".into());
        return out;
    };
    let group_status = group.status.clone().unwrap_or_default();
    // A closed queue is a wait, not a fault: the queue path below names which queue is closed.
    if let Some(c) = invalid(&group_status.conditions).filter(|c| c.reason != "QueueClosed") {
        out.verdict = "Invalid".into();
        out.blockers.push(format!("the scheduler cannot use podgroup {}: {}: {}", out.job, c.reason, c.message));
        out.to_start.push(invalid_remedy(&c.reason, &queue));
        return out;
    }
    let running = group_status.phase == PodGroupPhase::Running || status.state == JobState::Running;
    let needs = requests(group);
    out.queue_path = queue_path(&queue, queues, &needs, &mut out.blockers);
    if running {
        out.verdict = "Running".into();
        if status.pending > 0 {
            let why = out.pod_group.as_ref().and_then(|g| g.scheduler_says.clone());
            out.blockers.push(format!(
                "{} pod(s) above the gang minimum wait{}",
                status.pending,
                why.map(|w| format!(": {w}")).unwrap_or_default()
            ));
        }
        return out;
    }
    out.verdict = "Waiting".into();
    closed_queues(&out.queue_path, &mut out.blockers, &mut out.to_start);
    quota_blockers(queues, &out.queue_path, &needs, &mut out.blockers, &mut out.to_start);
    match out.pod_group.as_ref().and_then(|g| g.scheduler_says.clone()) {
        Some(says) => {
            if out.to_start.is_empty() {
                out.to_start.push(
                    "no queue bound blocks it: it starts when the cluster has room for the whole gang on nodes its pods \
                     may use (running work ends, or is preempted or reclaimed by the rules above)"
                        .into(),
                );
            }
            out.blockers.insert(0, format!("scheduler: {says}"));
        }
        None if out.blockers.is_empty() => {
            out.blockers.push("the scheduler has not judged the group yet".into());
            out.to_start
                .push("check that `drover scheduler` runs and that the Job's pods have `schedulerName: drover`".into());
        }
        None => {}
    }
    out
}

fn invalid(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == "Valid" && c.status == "False")
}

fn invalid_remedy(reason: &str, queue: &str) -> String {
    match reason {
        "QueueNotAllowed" => format!(
            "submit to a queue whose namespaceSelector admits this namespace, or ask a cluster admin to admit it to \
             queue {queue:?}"
        ),
        "QueueNotFound" => format!("create queue {queue:?}, or name an existing queue in the Job's spec.queue"),
        "QueueNotLeaf" => {
            format!("queue {queue:?} has child queues: name one of them (a leaf) in the Job's spec.queue")
        }
        _ => "fix what the message names; the scheduler re-reads the group every cycle".into(),
    }
}

fn summary(group: &PodGroup) -> GroupSummary {
    let status = group.status.clone().unwrap_or_default();
    let scheduler_says = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Unschedulable" && c.status == "True" && !c.message.is_empty())
        .map(|c| c.message.clone());
    GroupSummary {
        phase: format!("{:?}", status.phase),
        min_member: group.spec.min_member,
        running: status.running,
        min_resources: group
            .spec
            .min_resources
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
        scheduler_says,
    }
}

/// The gang minimum's request per resource, in the scheduler's units.
fn requests(group: &PodGroup) -> BTreeMap<String, i64> {
    group
        .spec
        .min_resources
        .iter()
        .flatten()
        .filter(|(name, _)| name.as_str() != "pods")
        .filter_map(|(name, q)| Some((name.clone(), ResourceList::parse_amount(name, &q.0).ok()?)))
        .filter(|(_, amount)| *amount > 0)
        .collect()
}

fn amount(list: &BTreeMap<String, Quantity>, resource: &str) -> Option<i64> {
    list.get(resource).and_then(|q| ResourceList::parse_amount(resource, &q.0).ok())
}

/// The job's queue and its ancestors, leaf first, with their figures for the resources
/// the gang requests. A missing queue ends the path with a blocker.
fn queue_path(
    leaf: &str,
    queues: &[Queue],
    needs: &BTreeMap<String, i64>,
    blockers: &mut Vec<String>,
) -> Vec<PathQueue> {
    let by_name: BTreeMap<String, &Queue> = queues.iter().map(|q| (q.name_any(), q)).collect();
    let mut path = Vec::new();
    let mut seen = BTreeSet::new();
    let mut next = Some(leaf.to_string());
    while let Some(name) = next.take() {
        if !seen.insert(name.clone()) {
            blockers.push(format!("queue {name:?} is on a parent cycle"));
            break;
        }
        let Some(q) = by_name.get(&name) else {
            if name != DEFAULT_QUEUE && !queues.is_empty() {
                blockers.push(format!("queue {name:?} does not exist"));
            }
            break;
        };
        let status = q.status.clone().unwrap_or_default();
        let limit = q.spec.limit.clone().unwrap_or_default();
        let shown = |list: &BTreeMap<String, Quantity>, r: &str| amount(list, r).map(|a| format_amount(r, a));
        let resources = needs
            .iter()
            .map(|(r, need)| {
                let figures = PathFigures {
                    needs: format_amount(r, *need),
                    allocated: shown(&status.allocated, r).unwrap_or_else(|| "0".into()),
                    deserved: shown(&status.deserved, r)
                        .or_else(|| shown(&q.spec.deserved, r))
                        .unwrap_or_else(|| "0".into()),
                    fair_share: shown(&status.fair_share, r),
                    limit: shown(&limit, r),
                };
                (r.clone(), figures)
            })
            .collect();
        path.push(PathQueue {
            name: name.clone(),
            state: match q.spec.state {
                QueueOpenState::Open => "Open",
                QueueOpenState::Closed => "Closed",
            }
            .into(),
            queue_state: status.queue_state.clone(),
            resources,
        });
        next = q.spec.parent.clone();
    }
    path
}

fn closed_queues(path: &[PathQueue], blockers: &mut Vec<String>, to_start: &mut Vec<String>) {
    for q in path.iter().filter(|q| q.state == "Closed") {
        blockers.push(format!("queue {} is closed: it admits no new pod groups", q.name));
        to_start.push(format!("a cluster admin opens it: `drover queue open {}`", q.name));
    }
}

/// Compares the gang's request with each queue's limit and fair share on the path.
fn quota_blockers(
    queues: &[Queue],
    path: &[PathQueue],
    needs: &BTreeMap<String, i64>,
    blockers: &mut Vec<String>,
    to_start: &mut Vec<String>,
) {
    let by_name: BTreeMap<String, &Queue> = queues.iter().map(|q| (q.name_any(), q)).collect();
    for pq in path {
        let Some(q) = by_name.get(&pq.name) else { continue };
        let status = q.status.clone().unwrap_or_default();
        let limits = q.spec.limit.clone().unwrap_or_default();
        for (r, &need) in needs {
            let used = amount(&status.allocated, r).unwrap_or(0);
            let show = |a: i64| format_amount(r, a);
            if let Some(limit) = amount(&limits, r).filter(|&l| used + need > l) {
                if need > limit {
                    blockers.push(format!(
                        "the gang minimum needs more {r} than queue {}'s limit ({} > {})",
                        pq.name,
                        show(need),
                        show(limit)
                    ));
                    to_start.push(format!(
                        "it can never start in queue {}: lower the Job's minAvailable, or a cluster admin raises the \
                         queue's limit on {r}",
                        pq.name
                    ));
                } else {
                    blockers.push(format!(
                        "queue {} would exceed its limit ({r} {} in use + {} needed > {})",
                        pq.name,
                        show(used),
                        show(need),
                        show(limit)
                    ));
                    to_start.push(format!(
                        "work in queue {} frees {} {r} (its use must drop to {})",
                        pq.name,
                        show(used + need - limit),
                        show(limit - need)
                    ));
                }
                continue;
            }
            let Some(fair) = amount(&status.fair_share, r).filter(|&f| used + need > f) else { continue };
            let deserved = amount(&status.deserved, r).or_else(|| amount(&q.spec.deserved, r)).unwrap_or(0);
            blockers.push(format!(
                "queue {} would exceed its fair share ({r} {} in use + {} needed > {})",
                pq.name,
                show(used),
                show(need),
                show(fair)
            ));
            let mut step = format!(
                "work in queue {} frees {} {r}, or other queues leave more {r} unused (its fair share grows)",
                pq.name,
                show(used + need - fair)
            );
            if used + need <= deserved {
                step.push_str(&format!(
                    "; within its deserved quota ({}), the queue reclaims it from queues above theirs",
                    show(deserved)
                ));
            }
            to_start.push(step);
        }
    }
}

/// The explanation for people.
pub fn table(e: &Explanation) -> String {
    let mut out = format!("Job:       {} ({}, {})\n", e.job, e.verdict, e.state);
    out.push_str(&format!(
        "Pods:      {} running, {} pending, {} succeeded, {} failed\n",
        e.pods.running, e.pods.pending, e.pods.succeeded, e.pods.failed
    ));
    if let Some(g) = &e.pod_group {
        let request: Vec<String> = g.min_resources.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "PodGroup:  {}, gang minimum {} pod(s){}\n",
            g.phase,
            g.min_member,
            if request.is_empty() { String::new() } else { format!(" requesting {}", request.join(", ")) }
        ));
    }
    out.push_str(&format!("Queue:     {}\n", e.queue));
    if e.queue_path.iter().any(|q| !q.resources.is_empty()) {
        let mut rows = Vec::new();
        for q in &e.queue_path {
            for (r, f) in &q.resources {
                rows.push(vec![
                    q.name.clone(),
                    q.state.clone(),
                    q.queue_state.clone().unwrap_or_else(|| "-".into()),
                    r.clone(),
                    f.needs.clone(),
                    f.allocated.clone(),
                    f.deserved.clone(),
                    f.fair_share.clone().unwrap_or_else(|| "-".into()),
                    f.limit.clone().unwrap_or_else(|| "-".into()),
                ]);
            }
        }
        let header =
            ["QUEUE", "STATE", "QUEUE STATE", "RESOURCE", "NEEDS", "ALLOCATED", "DESERVED", "FAIR SHARE", "LIMIT"];
        out.push_str("\nQueues, the job's first:\n");
        out.push_str(&columns(&header, &rows));
    }
    if !e.blockers.is_empty() {
        out.push_str("\nWhy it waits:\n");
        for b in &e.blockers {
            out.push_str(&format!("  - {b}\n"));
        }
    }
    if !e.to_start.is_empty() {
        out.push_str("\nWhat would let it start:\n");
        for s in &e.to_start {
            out.push_str(&format!("  - {s}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_api::crd::job::{JobSpec, JobStatus};
    use drover_api::crd::podgroup::{PodGroupSpec, PodGroupStatus};
    use drover_api::crd::queue::{QueueSpec, QueueStatus};

    fn gpus(v: &str) -> BTreeMap<String, Quantity> {
        BTreeMap::from([("nvidia.com/gpu".to_string(), Quantity(v.into()))])
    }

    fn job(queue: &str) -> Job {
        let mut j = Job::new("train", JobSpec { queue: Some(queue.into()), ..JobSpec::default() });
        j.metadata.namespace = Some("team-a".into());
        j.status = Some(JobStatus { pending: 4, ..JobStatus::default() });
        j
    }

    fn group(queue: &str, need: &str, says: &str) -> PodGroup {
        let mut g = PodGroup::new(
            "train",
            PodGroupSpec {
                min_member: 4,
                min_resources: Some(gpus(need)),
                queue: Some(queue.into()),
                ..PodGroupSpec::default()
            },
        );
        let mut status = PodGroupStatus { phase: PodGroupPhase::Inqueue, ..PodGroupStatus::default() };
        drover_api::crd::conditions::set(
            &mut status.conditions,
            "Unschedulable",
            true,
            "Unschedulable",
            says,
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            None,
        );
        g.status = Some(status);
        g
    }

    fn queue(name: &str, parent: Option<&str>, allocated: &str, fair: &str, limit: Option<&str>) -> Queue {
        let mut q = Queue::new(
            name,
            QueueSpec {
                parent: parent.map(String::from),
                deserved: gpus("4"),
                limit: limit.map(gpus),
                ..QueueSpec::default()
            },
        );
        q.status = Some(QueueStatus {
            allocated: gpus(allocated),
            deserved: gpus("4"),
            fair_share: gpus(fair),
            ..QueueStatus::default()
        });
        q
    }

    #[test]
    fn a_gang_over_its_queues_fair_share_is_told_how_much_must_be_freed() {
        let queues = [queue("vision", Some("research"), "6", "8", None), queue("research", None, "8", "12", None)];
        let e = explain(&job("vision"), Some(&group("vision", "4", "queue vision is over its fair share")), &queues);
        assert_eq!(e.verdict, "Waiting");
        assert_eq!(e.queue_path.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), ["vision", "research"]);
        assert_eq!(e.blockers[0], "scheduler: queue vision is over its fair share");
        assert!(
            e.blockers
                .contains(&"queue vision would exceed its fair share (nvidia.com/gpu 6 in use + 4 needed > 8)".into()),
            "{:?}",
            e.blockers
        );
        assert!(
            e.to_start.iter().any(|s| s.starts_with("work in queue vision frees 2 nvidia.com/gpu")),
            "{:?}",
            e.to_start
        );
        assert!(!e.blockers.iter().any(|b| b.contains("research")), "the parent has room: {:?}", e.blockers);
    }

    #[test]
    fn a_gang_larger_than_a_limit_is_told_it_can_never_start() {
        let queues = [queue("vision", None, "0", "8", Some("2"))];
        let e = explain(&job("vision"), Some(&group("vision", "4", "over the limit")), &queues);
        assert!(e.blockers.iter().any(|b| b.contains("needs more nvidia.com/gpu than queue vision's limit (4 > 2)")));
        assert!(e.to_start.iter().any(|s| s.contains("can never start")));
    }

    #[test]
    fn a_closed_ancestor_a_missing_queue_and_a_refused_namespace_are_named() {
        let mut research = queue("research", None, "0", "12", None);
        research.spec.state = QueueOpenState::Closed;
        let queues = [queue("vision", Some("research"), "0", "8", None), research];
        let mut g = group("vision", "1", "");
        let status = g.status.as_mut().unwrap();
        drover_api::crd::conditions::set(
            &mut status.conditions,
            "Valid",
            false,
            "QueueClosed",
            "queue \"vision\" is closed; the group is not admitted until it opens",
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            None,
        );
        let e = explain(&job("vision"), Some(&g), &queues);
        assert_eq!(e.verdict, "Waiting");
        assert!(
            e.blockers.contains(&"queue research is closed: it admits no new pod groups".into()),
            "{:?}",
            e.blockers
        );
        assert!(e.to_start.contains(&"a cluster admin opens it: `drover queue open research`".into()));

        let e = explain(&job("nope"), Some(&group("nope", "1", "no such queue")), &queues);
        assert!(e.blockers.contains(&"queue \"nope\" does not exist".into()), "{:?}", e.blockers);

        let mut g = group("vision", "1", "");
        let status = g.status.as_mut().unwrap();
        drover_api::crd::conditions::set(
            &mut status.conditions,
            "Valid",
            false,
            "QueueNotAllowed",
            "queue vision does not admit namespace team-a",
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            None,
        );
        let e = explain(&job("vision"), Some(&g), &queues);
        assert_eq!(e.verdict, "Invalid");
        assert!(e.to_start[0].contains("namespaceSelector"), "{:?}", e.to_start);
    }

    #[test]
    fn targets_need_a_namespace_and_a_name() {
        assert_eq!(parse_target("team-a/train").unwrap(), ("team-a".into(), "train".into()));
        assert_eq!(parse_target("train").unwrap(), ("default".into(), "train".into()));
        assert!(matches!(parse_target("a/b/c"), Err(Failure::BadInput(m)) if m.contains("a/b/c")));
        assert!(parse_target("/x").is_err());
    }
}
