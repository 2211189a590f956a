//! A job from its shape and pods: pod phases, tasks (split by requests and constraints, with
//! the minimums spread over them), priority and run times.

use super::elastic::Elastic;
use super::facts::task_of;
use super::member::Member;
use super::pod;
use super::pod::Finding;
use super::priority::resolve_priority;
use super::priority::Resolved;
use super::run_time::{run_times, started_at};
use super::topology::Requests;
use super::{created, Lookup, PodInfo, PodRef, Problem, TASK_INDEX_LABEL};
use drover_api::crd::podgroup::PodGroup;
use drover_api::ResourceList;
use drover_scheduler::snapshot::{Constraints, JobInput, JobPhase, PodPhaseInput, RunTime, TaskInput};
use std::collections::{BTreeMap, BTreeSet};

/// Where a job's priority comes from.
pub(super) enum PriorityFrom<'g> {
    /// Decided already: an admission or a detached charge.
    Decided(Resolved),
    /// The group's spec, else its pods (see "Priority" in docs/conversion.md).
    Group(&'g PodGroup),
}

/// What a job is, apart from its pods.
pub(super) struct Shape<'m> {
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) queue: String,
    pub(super) priority: PriorityFrom<'m>,
    pub(super) min_member: u32,
    pub(super) min_resources: Option<ResourceList>,
    pub(super) min_task_member: &'m BTreeMap<String, u32>,
    pub(super) created_at: i64,
    pub(super) preempted_at: Option<i64>,
    /// The group's kept claim: pod name to the node the scheduler nominated it to.
    pub(super) nominations: BTreeMap<&'m str, &'m str>,
    pub(super) phase: JobPhase,
    pub(super) topology: Requests,
    pub(super) elastic: Elastic,
}

/// A job from its shape and pods: phases, tasks, priority and run times. Fails (handing the
/// pods back) only when the priority must be resolved and cannot be.
pub(super) fn build_job<'a>(
    shape: Shape,
    pods: Vec<PodInfo<'a>>,
    lookup: &Lookup,
    problems: &mut Vec<Problem>,
) -> Result<(JobInput, Vec<PodRef>), (String, Vec<PodInfo<'a>>)> {
    let nodes = lookup.nodes;
    // Phases; pods that cannot take part are dropped here.
    let mut by_task: BTreeMap<String, Vec<Member<'a>>> = BTreeMap::new();
    for t in shape.min_task_member.keys() {
        by_task.entry(t.clone()).or_default();
    }
    for info in pods {
        let spec = info.pod.spec.as_ref();
        let phase = match &info.node {
            Some(node) if !nodes.contains_key(node) => {
                problems.push(info.problem(
                    "NodeNotFound",
                    format!("bound to node {node:?}, which the scheduler does not know (yet); pod left out"),
                ));
                continue;
            }
            Some(node) if info.deleting => PodPhaseInput::Releasing(node.clone()),
            Some(node) => PodPhaseInput::Bound(node.clone()),
            None if info.deleting || shape.elastic == Elastic::Restarting => continue,
            None if spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty()) => continue,
            None => match shape.nominations.get(info.name.as_str()) {
                Some(&node) if nodes.contains_key(node) => PodPhaseInput::Nominated(node.to_string()),
                _ => PodPhaseInput::Pending,
            },
        };
        let index_label = info.pod.metadata.labels.as_ref().and_then(|l| l.get(TASK_INDEX_LABEL));
        let index = index_label.and_then(|i| i.trim().parse::<u32>().ok());
        if let (Some(text), None) = (index_label, index) {
            problems.push(info.problem(
                "InvalidTaskIndex",
                format!("{TASK_INDEX_LABEL} {text:?} is not a non-negative integer; ordered by creation time"),
            ));
        }
        let created = created(&info.pod.metadata);
        let member = Member { info, phase, index, created };
        by_task.entry(task_of(member.info.pod)).or_default().push(member);
    }

    // Tasks: order, split by requests and constraints, spread minimums.
    let mut taken: BTreeSet<String> = by_task.keys().cloned().collect();
    let mut tasks = Vec::new();
    let mut members: Vec<Member<'a>> = Vec::new();
    for (task, mut list) in by_task {
        list.sort_by(|a, b| {
            (a.index.is_none(), a.index, a.created, &a.info.name).cmp(&(
                b.index.is_none(),
                b.index,
                b.created,
                &b.info.name,
            ))
        });
        let mut parts: Vec<(BTreeMap<String, i64>, Constraints, Vec<Member<'a>>)> = Vec::new();
        let mut reported: Vec<Vec<Finding>> = Vec::new();
        for m in list {
            let mut findings = m.info.findings.clone();
            let constraints = pod::constraints(m.info.pod, &mut findings);
            if !findings.is_empty() && !reported.contains(&findings) {
                for (reason, message) in &findings {
                    problems.push(m.info.problem(reason, message.clone()));
                }
                reported.push(findings);
            }
            match parts.iter_mut().find(|(r, c, _)| *r == m.info.requests && *c == constraints) {
                Some(part) => part.2.push(m),
                None => parts.push((m.info.requests.clone(), constraints, vec![m])),
            }
        }
        let mut minimum = shape.min_task_member.get(&task).copied().unwrap_or(0);
        let (topology, slices) = shape.topology.tasks.get(&task).cloned().unwrap_or_default();
        if parts.is_empty() {
            if minimum > 0 {
                tasks.push(TaskInput {
                    name: task.clone(),
                    min_available: minimum,
                    requests: ResourceList::default(),
                    constraints: Constraints::default(),
                    pods: Vec::new(),
                    topology,
                    slices,
                });
            }
            continue;
        }
        let first_task = tasks.len();
        let mut suffix = 1;
        for (i, (requests, constraints, part)) in parts.into_iter().enumerate() {
            let task_name = if i == 0 {
                task.clone()
            } else {
                loop {
                    suffix += 1;
                    let candidate = format!("{task}#{suffix}");
                    if taken.insert(candidate.clone()) {
                        break candidate;
                    }
                }
            };
            let take = minimum.min(part.len() as u32);
            minimum -= take;
            tasks.push(TaskInput {
                name: task_name,
                min_available: take,
                requests: ResourceList(requests),
                constraints,
                pods: part.iter().map(|m| m.phase.clone()).collect(),
                topology: topology.clone(),
                slices: slices.clone(),
            });
            members.extend(part);
        }
        tasks[first_task].min_available += minimum;
    }

    let priority = match shape.priority {
        PriorityFrom::Decided(p) => p,
        PriorityFrom::Group(group) => match resolve_priority(group, &members, lookup.classes) {
            Ok(p) => p,
            Err(message) => return Err((message, members.into_iter().map(|m| m.info).collect())),
        },
    };
    let (run_time, ends_at) = run_times(&members);
    let started_at = started_at(&members);
    let refs = members.into_iter().map(|m| PodRef::of(m.info.pod)).collect();
    let job = JobInput {
        name: shape.name,
        namespace: shape.namespace,
        queue: shape.queue,
        priority_class: priority.class,
        priority: priority.value,
        preemptible: priority.preemptible,
        min_member: shape.min_member,
        min_resources: shape.min_resources,
        created_at: shape.created_at,
        phase: shape.phase,
        tasks,
        run_time: run_time.map(RunTime::Declared),
        ends_at,
        preempted_at: shape.preempted_at,
        started_at,
        topology: shape.topology.job,
        resize: match shape.elastic {
            Elastic::Resizable(policy) => Some(policy),
            Elastic::Fixed | Elastic::Restarting => None,
        },
    };
    Ok((job, refs))
}
