//! Membership and charge of pods no handed-over group holds: what each is charged to (its
//! own record, its group's admission, its project's queue, else `default`) and the job they form.

use super::elastic::Elastic;
use super::job::{build_job, PriorityFrom, Shape};
use super::queue::QueueState;
use super::topology::Requests;
use super::{created, unique, Lookup, PodInfo, PodRef, Problem};
use super::{valid_leaf, DEFAULT_QUEUE};
use crate::charge::Charge;
use drover_api::crd::queue::Queue;
use drover_api::labels::PROJECT_LABEL;
use drover_scheduler::snapshot::{JobInput, JobPhase};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Detached pods by (namespace, group, queue), with the priority class of the first.
#[derive(Default)]
pub(super) struct Detached<'a>(pub(super) BTreeMap<(String, String, String), (String, Vec<PodInfo<'a>>)>);

impl<'a> Detached<'a> {
    /// Adds a pod that no handed-over group holds, charged by
    /// [`Lookup::detached_charge`]; hands it back when nothing can be charged for it.
    pub(super) fn add(
        &mut self,
        lookup: &Lookup,
        info: PodInfo<'a>,
        group: &str,
        admitted: Option<&(String, String)>,
    ) -> Option<PodInfo<'a>> {
        let Some(charge) = lookup.detached_charge(&info, group, admitted) else { return Some(info) };
        let key = (info.namespace.clone(), charge.group, charge.queue);
        self.0.entry(key).or_insert_with(|| (charge.priority_class, Vec::new())).1.push(info);
        None
    }
}

/// Per project, its valid leaf queues by name: Queues carry the project label the controllers
/// set (Queues are admin-only, so the label is trusted).
pub(super) fn project_queues(
    queues: &[Arc<Queue>],
    state: &BTreeMap<String, QueueState>,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((_, name), q) in unique(queues, |q| &q.metadata) {
        let Some(project) = q.metadata.labels.as_ref().and_then(|l| l.get(PROJECT_LABEL)) else { continue };
        if valid_leaf(state, &name) {
            out.entry(project.clone()).or_default().push(name);
        }
    }
    out
}

/// The job of the pods charged to `charge` that no handed-over group holds (its group is
/// gone, left out, or another than the one they were charged as): named `<group>#<queue>`,
/// which no PodGroup can be named, running, gang minimum 1, so the queue's usage counts them
/// and preempt and reclaim may take them pod by pod.
pub(super) fn detached_job<'a>(
    namespace: &str,
    charge: &Charge,
    pods: Vec<PodInfo<'a>>,
    lookup: &Lookup,
    problems: &mut Vec<Problem>,
) -> Result<(JobInput, Vec<PodRef>), Vec<PodInfo<'a>>> {
    let priority = lookup.classes.resolve(&charge.priority_class).unwrap_or_else(|| lookup.classes.default_class());
    let created = pods.iter().map(|p| created(&p.pod.metadata)).min().unwrap_or(0);
    let shape = Shape {
        name: format!("{}#{}", charge.group, charge.queue),
        namespace: namespace.to_string(),
        queue: charge.queue.clone(),
        priority: PriorityFrom::Decided(priority),
        min_member: 1,
        min_resources: None,
        min_task_member: &BTreeMap::new(),
        created_at: created,
        preempted_at: None,
        nominations: BTreeMap::new(),
        phase: JobPhase::Running,
        topology: Requests::default(),
        elastic: Elastic::Fixed,
    };
    build_job(shape, pods, lookup, problems).map_err(|(_, pods)| pods)
}

impl Lookup<'_> {
    /// What a bound pod of this scheduler that no handed-over group holds is charged to (see
    /// "Detached pods" in docs/conversion.md): its own record, else the admission of the group it
    /// was left out with, else its namespace's project queue, else `default`. `None` for pods
    /// not bound, of other schedulers, or when no such queue exists.
    pub(super) fn detached_charge(
        &self,
        info: &PodInfo,
        group: &str,
        admitted: Option<&(String, String)>,
    ) -> Option<Charge> {
        if !info.ours || info.node.is_none() {
            return None;
        }
        let recorded = info.charge.clone().or_else(|| {
            admitted.map(|(queue, class)| Charge {
                queue: queue.clone(),
                group: group.to_string(),
                priority_class: class.clone(),
            })
        });
        if let Some(charge) = recorded.as_ref().filter(|c| valid_leaf(self.queue_state, &c.queue)) {
            return Some(charge.clone());
        }
        let project = self.namespaces.get(info.namespace.as_str()).and_then(|l| l.get(PROJECT_LABEL));
        let queue = project
            .and_then(|p| self.project_queues.get(p))
            .and_then(|qs| qs.first().cloned())
            .or_else(|| valid_leaf(self.queue_state, DEFAULT_QUEUE).then(|| DEFAULT_QUEUE.to_string()))?;
        let priority_class = recorded.map(|c| c.priority_class).unwrap_or_default();
        Some(Charge { queue, group: group.to_string(), priority_class })
    }
}
