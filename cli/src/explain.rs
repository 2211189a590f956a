//! `drover explain job NS/NAME`: why a job waits and what would let it start, as the scheduler
//! itself answers it (PodGroups and pods get the same answer, through [`crate::explain_group`]).
//! It lists the objects the scheduler's cache holds, converts them with the scheduler's
//! conversion, and runs one real cycle of the scheduler's configuration on them
//! ([`drover_scheduler::explain`]); what it says of the job's queues and blockers is the
//! core's answer, not a copy of its rules. What is not a scheduling rule — the Job is invalid
//! or finished, its PodGroup is missing, the conversion left the group out — comes from the
//! objects and the conversion's problems. A user who may not list what the scheduler reads is
//! told which permission is missing and shown what the PodGroup's status says. It reads only.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use drover_api::crd::job::{Job, JobState};
use drover_api::crd::podgroup::{PodGroup, PodGroupPhase};
use drover_api::crd::queue::QueueOpenState;
use drover_k8s::convert::{self, ObjectLists, DEFAULT_QUEUE};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::explain::Verdict;
use drover_scheduler::res::UNLIMITED;
use drover_scheduler::snapshot::Snapshot;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::connect::Failure;
use crate::explain_forecast::ForecastFacts;
use crate::output::columns;

/// Everything `explain` found, and its conclusions.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// What was asked about: `Job`, `PodGroup` or `Pod`.
    pub kind: String,
    /// `namespace/name` of the Job or PodGroup: the job the scheduler schedules (for a pod,
    /// its PodGroup).
    pub job: String,
    /// The pod asked about, for `explain pod`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodFacts>,
    /// `Waiting`, `Starting`, `Running`, `Finished` or `Invalid`.
    pub verdict: String,
    /// The Job's lifecycle state, or the PodGroup's phase.
    pub state: String,
    /// The Job's (or PodGroup's) pods by state.
    pub pods: PodCounts,
    /// The PodGroup, if the controllers made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_group: Option<GroupSummary>,
    /// The queue the job is in (empty when a pod's group does not exist).
    pub queue: String,
    /// The job's queue and its ancestors, leaf first, as the scheduler's cycle left them.
    pub queue_path: Vec<PathQueue>,
    /// While its gang waits: where it stands and when it is expected to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast: Option<ForecastFacts>,
    /// What keeps the job from starting (empty when nothing does).
    pub blockers: Vec<String>,
    /// What would let it start.
    pub to_start: Vec<String>,
    /// Permissions the user lacks to see what the scheduler sees (then the verdict is the
    /// PodGroup's status, as the scheduler last wrote it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_permissions: Vec<String>,
}

/// The facts of the pod `explain pod` was asked about that are its own, not its group's.
#[derive(Serialize, Debug)]
pub struct PodFacts {
    /// `namespace/name` of the pod.
    pub name: String,
    /// Its phase.
    pub phase: String,
    /// The node it is bound to; a bound pod no longer waits, whatever its group's verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
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

/// The PodGroup as the scheduler last wrote it.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct GroupSummary {
    /// Its phase.
    pub phase: String,
    /// The gang minimum: this many pods start together or none does.
    pub min_member: u32,
    /// Running pods.
    pub running: u32,
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
    /// `InQuota`, `OverQuota` or `OverFairShare`, as the cycle leaves it.
    pub queue_state: String,
    /// The resource that decided the queue state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_resource: Option<String>,
    /// Figures for each resource the job asks for.
    pub resources: BTreeMap<String, PathFigures>,
}

/// A queue's figures for one resource, beside what the job asks for.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PathFigures {
    /// The job's next request: its gang minimum, or one more pod once that runs.
    pub needs: String,
    /// In use by the queue and its descendants.
    pub allocated: String,
    /// Guaranteed quota.
    pub deserved: String,
    /// What the queue may use in this cycle.
    pub fair_share: String,
    /// The hard cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

/// Splits the `NS/NAME` of a `kind` (a bare NAME means the `default` namespace, as kubectl's
/// default).
pub fn parse_target(kind: &str, target: &str) -> Result<(String, String), Failure> {
    let (ns, name) = match target.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("default", target),
    };
    if ns.is_empty() || name.is_empty() || name.contains('/') {
        return Err(Failure::BadInput(format!("{kind} {target:?}: expected NAMESPACE/NAME")));
    }
    Ok((ns.to_string(), name.to_string()))
}

/// Lists every `K` in the cluster; a refusal is recorded in `refused`, not a failure.
async fn list<K>(client: &Client, kind: &str, refused: &mut Vec<String>) -> Result<Vec<Arc<K>>, Failure>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match Api::<K>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => Ok(list.items.into_iter().map(Arc::new).collect()),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            refused.push(format!("list {kind} cluster-wide (the scheduler reads them all): {}", status.message));
            Ok(Vec::new())
        }
        Err(e) => Err(Failure::from_api(kind, e)),
    }
}

/// Reads the Job, its PodGroup and what the scheduler reads, and explains.
pub async fn fetch(
    client: &Client,
    namespace: &str,
    name: &str,
    config: &SchedulerConfig,
    scheduler_name: &str,
) -> Result<Explanation, Failure> {
    let object = format!("job {namespace}/{name}");
    let job =
        Api::<Job>::namespaced(client.clone(), namespace).get(name).await.map_err(|e| Failure::from_api(&object, e))?;
    let group = get_group(client, namespace, name).await?;
    let (listed, refused) = list_cluster(client).await?;
    let cluster = refused.is_empty().then_some(&listed);
    let mut explanation = explain(&job, group.as_ref(), cluster, config, scheduler_name);
    explanation.missing_permissions = refused;
    Ok(explanation)
}

/// The PodGroup `namespace/name`, if it exists.
pub async fn get_group(client: &Client, namespace: &str, name: &str) -> Result<Option<PodGroup>, Failure> {
    Api::<PodGroup>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| Failure::from_api(&format!("podgroup {namespace}/{name}"), e))
}

/// Lists what the scheduler reads, and the lists the user may not read.
pub async fn list_cluster(client: &Client) -> Result<(ObjectLists, Vec<String>), Failure> {
    let mut refused = Vec::new();
    let listed = ObjectLists {
        nodes: list(client, "nodes", &mut refused).await?,
        pods: list(client, "pods", &mut refused).await?,
        pod_groups: list(client, "podgroups", &mut refused).await?,
        queues: list(client, "queues", &mut refused).await?,
        classes: list(client, "priorityclasses", &mut refused).await?,
        namespaces: list(client, "namespaces", &mut refused).await?,
        topologies: list(client, "topologies", &mut refused).await?,
    };
    Ok((listed, refused))
}

impl Explanation {
    /// An explanation of the `kind` `job` (`namespace/name`) before any verdict, its queue the
    /// group's, else `queue`, else the default queue.
    pub fn new(
        kind: &str,
        job: String,
        state: String,
        pods: PodCounts,
        group: Option<&PodGroup>,
        queue: Option<String>,
    ) -> Self {
        Explanation {
            kind: kind.into(),
            job,
            pod: None,
            verdict: String::new(),
            state,
            pods,
            pod_group: group.map(summary),
            queue: group
                .and_then(|g| g.spec.queue.clone())
                .or(queue)
                .filter(|q| !q.is_empty())
                .unwrap_or_else(|| DEFAULT_QUEUE.to_string()),
            queue_path: Vec::new(),
            forecast: None,
            blockers: Vec::new(),
            to_start: Vec::new(),
            missing_permissions: Vec::new(),
        }
    }
}

/// Explains `job` from its group and, when the user may read it, what the scheduler reads.
pub fn explain(
    job: &Job,
    group: Option<&PodGroup>,
    cluster: Option<&ObjectLists>,
    config: &SchedulerConfig,
    scheduler_name: &str,
) -> Explanation {
    let status = job.status.clone().unwrap_or_default();
    let (namespace, name) = (job.namespace().unwrap_or_default(), job.name_any());
    let pods = PodCounts {
        pending: status.pending,
        running: status.running,
        succeeded: status.succeeded,
        failed: status.failed,
    };
    let state = format!("{:?}", status.state);
    let mut out = Explanation::new("Job", format!("{namespace}/{name}"), state, pods, group, job.spec.queue.clone());
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
    judge(out, group, cluster, config, scheduler_name)
}

/// Explains the scheduler's job `out.job` (the PodGroup `group`) as the core judges it when
/// the user may read what the scheduler reads, else from the group's status.
pub fn judge(
    mut out: Explanation,
    group: &PodGroup,
    cluster: Option<&ObjectLists>,
    config: &SchedulerConfig,
    scheduler_name: &str,
) -> Explanation {
    let (namespace, name) = (group.namespace().unwrap_or_default(), group.name_any());
    let Some(listed) = cluster else {
        return from_status(out, group);
    };
    let objects = listed.objects();
    let converted = convert::convert(&objects, scheduler_name);
    let snap = match converted.snapshot_at(k8s_openapi::jiff::Timestamp::now().as_second()) {
        Ok(s) => s,
        Err(e) => {
            out.verdict = "Waiting".into();
            out.blockers.push(format!("the scheduler cannot build its snapshot of the cluster: {e}"));
            return out;
        }
    };
    let Some(j) = snap.jobs.position(|j| j.namespace == namespace && j.name == name) else {
        return left_out(out, &converted.problems, listed, &snap);
    };
    let core = drover_scheduler::explain::explain(&snap, config, j);
    out.verdict = core.verdict.as_str().into();
    out.queue = snap.queues[snap.jobs[j].queue].name.clone();
    let shown: Vec<usize> =
        (0..snap.resources.len()).filter(|&r| r != snap.pods_resource && core.needs[r] > 0).collect();
    out.queue_path = core.path.iter().map(|q| path_queue(&snap, &core.needs, &shown, q)).collect();
    if let Some(reason) = core.reason {
        out.blockers.push(match core.verdict {
            Verdict::Waiting => reason,
            _ => format!("pods above the gang minimum wait: {reason}"),
        });
    }
    out.to_start = core.to_start;
    out.forecast = core.forecast.map(|f| crate::explain_forecast::facts(&snap, &converted, j, &f));
    out
}

/// The explanation of a group the conversion left out: its problem says why.
fn left_out(mut out: Explanation, problems: &[convert::Problem], listed: &ObjectLists, snap: &Snapshot) -> Explanation {
    let (namespace, name) = out.job.split_once('/').unwrap_or_default();
    let Some(p) =
        problems.iter().find(|p| p.kind == "PodGroup" && p.namespace.as_deref() == Some(namespace) && p.name == name)
    else {
        out.verdict = "Finished".into();
        out.blockers.push("the scheduler no longer schedules the group: it has finished".into());
        return out;
    };
    out.blockers.push(p.message.clone());
    if p.reason != "QueueClosed" {
        out.verdict = "Invalid".into();
        out.to_start.push(invalid_remedy(&p.reason, &out.queue));
        return out;
    }
    // A closed queue is a wait, not a fault: name the closed queues on the way up.
    out.verdict = "Waiting".into();
    let closed = |q: &str| listed.queues.iter().any(|o| o.name_any() == q && o.spec.state == QueueOpenState::Closed);
    let leaf = snap.queues.position(|q| q.name == out.queue);
    for q in leaf.into_iter().flat_map(|l| snap.ancestry(l)).map(|q| &snap.queues[q].name) {
        if closed(q) {
            out.to_start.push(format!("a cluster admin opens queue {q}: `drover queue open {q}`"));
        }
    }
    out
}

/// The explanation from the PodGroup's status alone, for a user who may not read the rest.
fn from_status(mut out: Explanation, group: &PodGroup) -> Explanation {
    let status = group.status.clone().unwrap_or_default();
    out.verdict = if status.phase == PodGroupPhase::Running { "Running" } else { "Waiting" }.into();
    if let Some(c) = invalid(&status.conditions) {
        out.blockers.push(format!("the scheduler cannot use the group: {}: {}", c.reason, c.message));
    }
    if let Some(says) = out.pod_group.as_ref().and_then(|g| g.scheduler_says.clone()) {
        out.blockers.push(format!("the scheduler said in its last cycle: {says}"));
    }
    if let Some(f) = status.forecast.as_ref() {
        out.forecast = Some(crate::explain_forecast::from_status(f));
        if let Some(help) = &f.to_start {
            out.to_start.push(format!("the scheduler said in its last cycle: {help}"));
        }
    }
    out.to_start.push(
        "to see what the scheduler sees and what would let the job start, ask a cluster admin for the permissions \
         named below (or ask them to run `drover explain`)"
            .into(),
    );
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

/// The PodGroup as its status says.
pub fn summary(group: &PodGroup) -> GroupSummary {
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
        scheduler_says,
    }
}

/// One queue of the core's path, with its figures in `shown` resources.
fn path_queue(
    snap: &Snapshot,
    needs: &drover_scheduler::res::Res,
    shown: &[usize],
    q: &drover_scheduler::explain::PathQueue,
) -> PathQueue {
    let amount = |r: usize, v: i64| snap.amount(r, v);
    let resources = shown
        .iter()
        .map(|&r| {
            let figures = PathFigures {
                needs: amount(r, needs[r]),
                allocated: amount(r, q.outcome.allocated[r]),
                deserved: amount(r, q.outcome.deserved[r]),
                fair_share: amount(r, q.outcome.fair_share[r]),
                limit: (q.limit[r] != UNLIMITED).then(|| amount(r, q.limit[r])),
            };
            (snap.resources[r].clone(), figures)
        })
        .collect();
    PathQueue {
        name: snap.queues[q.queue].name.clone(),
        queue_state: q.outcome.state.as_str().into(),
        state_resource: q.outcome.decided_by.map(|r| snap.resources[r].clone()),
        resources,
    }
}

/// The explanation for people.
pub fn table(e: &Explanation) -> String {
    let mut out = String::new();
    if let Some(p) = &e.pod {
        let place = match &p.node {
            Some(node) => format!("bound to node {node}: it no longer waits; what follows is its group's"),
            None => "not bound yet: it starts with its group, as follows".into(),
        };
        out.push_str(&format!("Pod:       {} ({}, {place})\n", p.name, p.phase));
    }
    let kind = if e.kind == "Job" { "Job" } else { "PodGroup" };
    out.push_str(&format!("{:<11}{} ({}, {})\n", format!("{kind}:"), e.job, e.verdict, e.state));
    out.push_str(&format!(
        "Pods:      {} running, {} pending, {} succeeded, {} failed\n",
        e.pods.running, e.pods.pending, e.pods.succeeded, e.pods.failed
    ));
    match &e.pod_group {
        Some(g) if kind == "Job" => {
            out.push_str(&format!("PodGroup:  {}, gang minimum {} pod(s)\n", g.phase, g.min_member))
        }
        Some(g) => out.push_str(&format!("Gang:      minimum {} pod(s)\n", g.min_member)),
        None => {}
    }
    if !e.queue.is_empty() {
        out.push_str(&format!("Queue:     {}\n", e.queue));
    }
    if let Some(f) = &e.forecast {
        let (q, all) = (f.queue_position, f.position);
        out.push_str(&format!("Position:  {q} in queue {}, {all} among all waiting gangs\n", e.queue));
        out.push_str(&format!("Start:     {}\n", f.start));
    }
    let rows: Vec<Vec<String>> = e
        .queue_path
        .iter()
        .flat_map(|q| {
            q.resources.iter().map(|(r, f)| {
                let limit = f.limit.clone().unwrap_or_else(|| "-".into());
                let cells = [&q.name, &q.queue_state, r, &f.needs, &f.allocated, &f.deserved, &f.fair_share, &limit];
                cells.map(String::clone).to_vec()
            })
        })
        .collect();
    if !rows.is_empty() {
        let header = ["QUEUE", "QUEUE STATE", "RESOURCE", "NEEDS", "ALLOCATED", "DESERVED", "FAIR SHARE", "LIMIT"];
        out.push_str("\nQueues, the job's first:\n");
        out.push_str(&columns(&header, &rows));
    }
    for (title, lines) in [
        ("Why it waits", &e.blockers),
        ("What would let it start", &e.to_start),
        ("Missing permissions", &e.missing_permissions),
    ] {
        if !lines.is_empty() {
            out.push_str(&format!("\n{title}:\n"));
            for l in lines {
                out.push_str(&format!("  - {l}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_need_a_namespace_and_a_name() {
        assert_eq!(parse_target("job", "team-a/train").unwrap(), ("team-a".into(), "train".into()));
        assert_eq!(parse_target("job", "train").unwrap(), ("default".into(), "train".into()));
        assert!(matches!(parse_target("pod", "a/b/c"), Err(Failure::BadInput(m)) if m.contains("pod \"a/b/c\"")));
        assert!(parse_target("job", "/x").is_err());
    }
}
