//! `Queue`: a node of the hierarchical queue tree with guaranteed quota, a hard limit and a
//! share of unused capacity. Cluster-scoped.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, LabelSelectorRequirement, Time};
use kube::{CustomResource, KubeSchema};

use super::run_times::{RunTimeSamples, MAX_KINDS};
use crate::label_selector;
use crate::labels::PROJECT_LABEL;
use serde::{Deserialize, Serialize};

/// Desired state of a queue.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "scheduling.drover.dev",
    version = "v1alpha1",
    kind = "Queue",
    plural = "queues",
    shortname = "dq",
    category = "drover",
    status = "QueueStatus",
    printcolumn(name = "Parent", type_ = "string", json_path = ".spec.parent"),
    printcolumn(name = "State", type_ = "string", json_path = ".spec.state"),
    printcolumn(name = "Queue state", type_ = "string", json_path = ".status.queueState"),
    printcolumn(name = "Allocated/Deserved/Limit", type_ = "string", json_path = ".status.summary"),
    printcolumn(name = "Running", type_ = "integer", json_path = ".status.podGroups.running"),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.podGroups.pending"),
    printcolumn(name = "Inqueue", type_ = "integer", json_path = ".status.podGroups.inqueue", priority = 1),
    printcolumn(name = "Halted", type_ = "string", json_path = ".status.halted", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = Rule::new("!has(self.parent) || self.parent != ''").message("parent must be a queue name or absent"))]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// The parent queue (an object name, so at most 253 characters); absent for a top-level
    /// queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub parent: Option<String>,
    /// Guaranteed quota per resource (e.g. `nvidia.com/gpu: 8`); absent resources are 0.
    #[serde(default)]
    pub deserved: BTreeMap<String, Quantity>,
    /// Hard cap per resource; absent = no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<BTreeMap<String, Quantity>>,
    /// Share of unused capacity relative to sibling queues; 0 = none.
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub over_quota_weight: u32,
    /// Whether other queues may reclaim what this queue uses beyond its deserved quota.
    #[serde(default = "yes")]
    pub reclaimable: bool,
    /// Start order of the queue's jobs.
    #[serde(default)]
    pub queueing_strategy: QueueingStrategy,
    /// Open queues accept new pod groups; closed ones keep running what they have.
    #[serde(default)]
    pub state: QueueOpenState,
    /// The namespaces whose work may use this queue (a label selector over Namespace
    /// objects; `kubernetes.io/metadata.name` selects by name). Absent: every namespace, as
    /// a Volcano queue; queues made from a Project admit only that Project's namespaces. The
    /// selectors of the queue's ancestors must admit the namespace too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Running limits and minimum run times.
    #[serde(flatten)]
    pub run_bounds: RunBounds,
}

/// How much work a queue runs at once and how long a job runs before it may be evicted: on
/// a Queue, and on a Department's or Project's node-pool quota (copied to the pool's queue).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunBounds {
    /// Jobs the queue and the queues below it run at once (a job runs while it holds a
    /// pod); absent = no limit. Jobs beyond it wait, admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running_jobs: Option<u32>,
    /// Pods the queue and the queues below it run at once; absent = no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running_pods: Option<u32>,
    /// Seconds a job runs before preemption (by a job of its own queue) may take it;
    /// absent = the parent queue's, and none at the top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_min_runtime_seconds: Option<u32>,
    /// Seconds a job runs before reclaim (for another queue) may take it; absent = the
    /// parent queue's, and none at the top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_min_runtime_seconds: Option<u32>,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

/// How a queue orders the start of its jobs: the one definition the Queue object, the
/// scheduling core and scenario files share (written `BestEffortFIFO` and `StrictFIFO`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum QueueingStrategy {
    /// Later jobs may start when an earlier one cannot (Volcano's behaviour).
    #[default]
    #[serde(rename = "BestEffortFIFO")]
    BestEffortFifo,
    /// Nothing starts while an earlier job of the same class (GPU or CPU-only) waits
    /// (Determined's priority scheduler).
    #[serde(rename = "StrictFIFO")]
    StrictFifo,
}

/// Whether a queue accepts new work.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum QueueOpenState {
    /// Accepts new pod groups.
    #[default]
    Open,
    /// Accepts none; running work continues.
    Closed,
}

/// Observed state of a queue, written by the scheduler.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Resources of running pods of the queue and its descendants.
    #[serde(default)]
    pub allocated: BTreeMap<String, Quantity>,
    /// Guaranteed quota as the scheduler applies it.
    #[serde(default)]
    pub deserved: BTreeMap<String, Quantity>,
    /// Deserved quota plus the queue's share of unused capacity.
    #[serde(default)]
    pub fair_share: BTreeMap<String, Quantity>,
    /// `InQuota`, `OverQuota` or `OverFairShare`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_state: Option<String>,
    /// `allocated`, `deserved` and the spec's `limit` for people, one resource after the
    /// other, GPUs first, amounts rounded (`nvidia.com/gpu 12/16/24, cpu 40/0/-, memory
    /// 320Gi/0/-`; `-` is no limit), as `kubectl get dq` shows it. Written by the scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Pod groups of the queue by phase.
    #[serde(default)]
    pub pod_groups: PodGroupCounts,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions, e.g. `Valid` false when the parent is missing or the tree has a cycle.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Time-based fair share's memory of the queue (with it turned on in the scheduler
    /// configuration): written by the scheduler once per tick, read back by every cycle and
    /// by a new leader, so that all compute the same fair shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<QueueUsage>,
    /// The run times of the queue's recently completed jobs, per kind of job (name, GPU count
    /// or namespace), from which the scheduler predicts how long a job that declares no
    /// `activeDeadlineSeconds` will run: written by the scheduler when a job completes, read
    /// back by every cycle, by a new leader and by `drover explain`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_KINDS))]
    pub run_times: Vec<RunTimeSamples>,
    /// Why the scheduler schedules nothing at all, while it does not (the charge guard missing
    /// or weakened, say): written on every Queue when it stops, removed when it schedules again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub halted: Option<String>,
}

/// A queue's decayed past usage as of one tick.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueUsage {
    /// The tick the figures are as of.
    pub tick: Time,
    /// Per resource, the queue's (and its descendants') use over the remembered time, each
    /// tick's use decayed by the half-life since: resource-seconds in the units the scheduler
    /// counts (GPUs, CPU millicores, memory bytes).
    #[serde(default)]
    pub resources: BTreeMap<String, f64>,
}

/// A queue's allocated, deserved and limit amounts (exact units, as
/// [`crate::ResourceList`] counts them) as one line for people: `name allocated/deserved/limit`
/// per resource with any figure, GPUs first, then CPU, memory and the rest by name; amounts
/// rounded by [`crate::human_amount`]; `-` for no limit; the pod count left out; `-` alone
/// when no resource has a figure.
pub fn summary(
    allocated: &BTreeMap<String, i64>,
    deserved: &BTreeMap<String, i64>,
    limit: &BTreeMap<String, i64>,
) -> String {
    let mut names: Vec<&String> = allocated.keys().chain(deserved.keys()).chain(limit.keys()).collect();
    names.retain(|name| *name != crate::PODS);
    names.sort_by_key(|name| {
        let rank = if name.ends_with("/gpu") {
            0
        } else if *name == crate::CPU {
            1
        } else if *name == crate::MEMORY {
            2
        } else {
            3
        };
        (rank, *name)
    });
    names.dedup();
    let amount =
        |list: &BTreeMap<String, i64>, name: &str| crate::human_amount(name, list.get(name).copied().unwrap_or(0));
    let parts: Vec<String> = names
        .into_iter()
        .map(|name| {
            let cap = if limit.contains_key(name) { amount(limit, name) } else { "-".into() };
            format!("{name} {}/{}/{cap}", amount(allocated, name), amount(deserved, name))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// Counts of pod groups by phase.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCounts {
    /// Not yet admitted.
    #[serde(default)]
    pub pending: u32,
    /// Admitted, waiting for their minimum.
    #[serde(default)]
    pub inqueue: u32,
    /// At least their minimum runs.
    #[serde(default)]
    pub running: u32,
    /// Finished successfully.
    #[serde(default)]
    pub completed: u32,
    /// Finished unsuccessfully.
    #[serde(default)]
    pub failed: u32,
}

/// The queue that always exists: work that names no queue goes to it, and the scheduler adds
/// it when no Queue object has its name.
pub const DEFAULT_QUEUE: &str = "default";

/// The `namespaceSelector` of the implicit `default` queue (there when no Queue is named
/// `default`): namespaces of no project. A project's work must use the project's queues, so
/// that the project's quota and limit bound it. The scheduler and the Job controller both
/// apply it.
pub fn implicit_default_selector() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: PROJECT_LABEL.to_string(),
            operator: "DoesNotExist".to_string(),
            values: None,
        }]),
        match_labels: None,
    }
}

/// Why the namespace fences of a queue keep the work of a namespace out, if they do: the
/// first `namespaceSelector` in `fences` (the queue's, then its ancestors', as `(queue name,
/// selector)`) that does not select the namespace's `labels`, or is malformed. `labels` is
/// `None` for a namespace not known yet, which any fence keeps out until it is. The
/// scheduler and the Job controller both apply it.
pub fn namespace_refusal<'a>(
    fences: impl IntoIterator<Item = (&'a str, &'a LabelSelector)>,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    let mut fences = fences.into_iter().peekable();
    fences.peek()?;
    let Some(labels) = labels else {
        return Some("the namespace is not known to the scheduler yet".into());
    };
    fences.find_map(|(queue, selector)| match label_selector::selects(selector, labels) {
        Ok(true) => None,
        Ok(false) => Some(format!("the namespaceSelector of queue {queue:?} does not select it")),
        Err(e) => Some(format!("the namespaceSelector of queue {queue:?} is malformed ({e})")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(label: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([(label.to_string(), "yes".to_string())])),
            ..Default::default()
        }
    }

    #[test]
    fn the_summary_puts_gpus_first_in_human_units_and_marks_no_limit() {
        let list = |pairs: &[(&str, i64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let gi = 1i64 << 30;
        let allocated = list(&[("cpu", 40_000), ("memory", 320 * gi), ("nvidia.com/gpu", 12), ("pods", 5)]);
        let deserved = list(&[("nvidia.com/gpu", 16)]);
        let limit = list(&[("nvidia.com/gpu", 24)]);
        assert_eq!(summary(&allocated, &deserved, &limit), "nvidia.com/gpu 12/16/24, cpu 40/0/-, memory 320Gi/0/-");
        assert_eq!(summary(&list(&[]), &deserved, &list(&[])), "nvidia.com/gpu 0/16/-");
        assert_eq!(summary(&list(&[]), &list(&[]), &list(&[])), "-");
    }

    #[test]
    fn the_first_fence_that_does_not_select_the_namespace_refuses_it() {
        let (a, b) = (selector("a"), selector("b"));
        let labels = BTreeMap::from([("a".to_string(), "yes".to_string())]);
        let fences = || [("leaf", &a), ("parent", &b)];
        let why = namespace_refusal(fences(), Some(&labels));
        assert_eq!(why.as_deref(), Some("the namespaceSelector of queue \"parent\" does not select it"));
        let both = BTreeMap::from([("a".to_string(), "yes".to_string()), ("b".to_string(), "yes".to_string())]);
        assert_eq!(namespace_refusal(fences(), Some(&both)), None);
        let unknown = namespace_refusal(fences(), None);
        assert_eq!(unknown.as_deref(), Some("the namespace is not known to the scheduler yet"));
        assert_eq!(namespace_refusal([], None), None, "a queue without fences admits every namespace");
        let bad = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Sideways".into(),
                values: None,
            }]),
            match_labels: None,
        };
        let why = namespace_refusal([("odd", &bad)], Some(&labels)).unwrap_or_default();
        assert!(why.starts_with("the namespaceSelector of queue \"odd\" is malformed ("), "{why}");
    }
}
