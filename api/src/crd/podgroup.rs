//! `PodGroup`: a gang of pods scheduled all-or-nothing, in a queue, with a priority class.
//! Namespaced. Jobs create one; the controller creates one-pod groups for plain pods.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::elasticity::{GroupElasticity, ResizeStatus};
use super::forecast::Forecast;
use super::topology::{TaskTopologies, TopologyConstraint, TopologyPlacement};

/// Desired state of a pod group.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "scheduling.drover.dev",
    version = "v1alpha1",
    kind = "PodGroup",
    plural = "podgroups",
    shortname = "pg",
    category = "drover",
    namespaced,
    status = "PodGroupStatus",
    printcolumn(name = "Queue", type_ = "string", json_path = ".spec.queue"),
    printcolumn(name = "Min", type_ = "integer", json_path = ".spec.minMember"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Admitted-Queue", type_ = "string", json_path = ".status.admission.queue", priority = 1),
    printcolumn(name = "Running", type_ = "integer", json_path = ".status.running"),
    printcolumn(name = "Position", type_ = "integer", json_path = ".status.forecast.queuePosition"),
    printcolumn(name = "ETA", type_ = "string", json_path = ".status.forecast.eta"),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Unschedulable\")].message",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Pods that must run together for the group to run (the gang size).
    #[schemars(range(min = 1))]
    pub min_member: u32,
    /// Per-task minimums (task name -> pods), within `minMember`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_task_member: BTreeMap<String, u32>,
    /// Resources of the minimum, for admission before the pods exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// The leaf queue; absent = the namespace's project queue, else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The priority class of the group's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Seconds the group may wait unschedulable before it is marked so in an Event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub schedule_timeout_seconds: Option<u32>,
    /// Where the whole group must or should go together (a Topology and its levels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyConstraint>,
    /// Per task (task name -> block, keyed as `minTaskMember`): where the task's pods go
    /// together inside the group's domain, and its slices.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub task_topology: TaskTopologies,
    /// The sizes the group may be restarted at, for an elastic job: the scheduler records a
    /// resize in `status.resize`, and the group's controller (the Job controller) restarts
    /// its pods at that size. Absent: never resized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elasticity: Option<GroupElasticity>,
}

/// Condition type carrying the reason a group waits (`True`, the reason as message), written
/// by the scheduler and mirrored into its Job's `status.reason`.
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// Lifecycle phase of a pod group.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum PodGroupPhase {
    /// Not yet admitted by the scheduler.
    #[default]
    Pending,
    /// Admitted; waiting for its minimum to be placed.
    Inqueue,
    /// At least its minimum runs.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished unsuccessfully.
    Failed,
}

/// Observed state of a pod group, written by the scheduler and the controllers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// Phase.
    #[serde(default)]
    pub phase: PodGroupPhase,
    /// Running pods.
    #[serde(default)]
    pub running: u32,
    /// Pods that succeeded.
    #[serde(default)]
    pub succeeded: u32,
    /// Pods that failed.
    #[serde(default)]
    pub failed: u32,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions; `Unschedulable` carries the reason the scheduler gives (the same reason
    /// `drover sim` prints).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The bindings the scheduler is writing for the gang, kept until all are written: a new
    /// leader completes or rolls them back after a crash. Lives in status because only the
    /// scheduler may write it (tenants who can edit a PodGroup cannot write its status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_intent: Option<BindIntent>,
    /// The nodes reserved for the waiting gang and when it is expected to start there, from
    /// the declared run times (`activeDeadlineSeconds`) of the pods running on them; work that
    /// does not end before then may not take that capacity. Absent when nothing is reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationStatus>,
    /// The queue and priority the group was admitted with, recorded by the scheduler when it
    /// admitted the group and kept while the group is `Inqueue` or `Running`: the group's pods
    /// are charged to this queue at this priority, whatever `spec.queue` or
    /// `spec.priorityClassName` say later. Changes of those take effect when the group is
    /// admitted again, once its pods have ended. Lives in status, which tenants cannot write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// When the scheduler last preempted or reclaimed pods of the group: its elastic pods
    /// wait a minute after it before regrowing (the `regrow` plugin). Lives in status, which
    /// tenants cannot write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_at: Option<Time>,
    /// Where the group's bound and nominated pods sit in its topology (the finest domain
    /// holding them all), written by the scheduler; absent for groups that ask for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyPlacement>,
    /// The gang's kept claim: its pods the scheduler pipelined onto nodes that evictions are
    /// freeing for it, each with its node, in pod name order. The next cycle, or a new
    /// leader, places them there before anything else may take that capacity, so the gang
    /// keeps its nodes and domain while its victims terminate. Lives in status, which tenants
    /// cannot write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4096))]
    pub nominations: Vec<Nomination>,
    /// The scheduler's latest resize of an elastic group (`spec.elasticity`): the size to
    /// restart its pods at, and why. Lives in status, which tenants cannot write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<ResizeStatus>,
    /// While the gang waits: its position in its queue and among all waiting gangs, when it
    /// is expected to start and on what that rests, and what would let it start (`kubectl get
    /// pg` shows the position in its queue and the expected start). Absent once it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
    /// The run time, in seconds, that the scheduler recorded in its queue's learned run times
    /// (`Queue status.runTimes`) when the group completed: present once recorded, so that a
    /// run is recorded once, whichever scheduler leads. Cleared when the group runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub recorded_run_time_seconds: Option<i64>,
    /// When the group runs in capacity reserved for another gang, admitted there on a learned
    /// run time (a loan): when that gang is due. If the group still runs then, it is evicted
    /// for the gang. Lives in status, which tenants cannot write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowed_until: Option<Time>,
}

/// A pending pod of a group and the node the scheduler nominated it to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub struct Nomination {
    /// The pod's name (in the group's namespace).
    pub pod: String,
    /// The node's name.
    pub node: String,
}

impl PodGroupStatus {
    /// Why the group waits, as the scheduler last said (its `Unschedulable=True` message; the
    /// `Reason` column of `kubectl get pg -o wide`); `None` when it does not wait.
    pub fn waiting_reason(&self) -> Option<&str> {
        self.conditions.iter().find(|c| c.type_ == UNSCHEDULABLE && c.status == "True").map(|c| c.message.as_str())
    }
}

/// What a group was admitted with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// The leaf queue the group's pods are charged to.
    pub queue: String,
    /// The priority class resolved at admission (empty: none).
    #[serde(default)]
    pub priority_class_name: String,
    /// Its value at admission.
    #[serde(default)]
    pub priority: i32,
    /// Whether the group's pods may be preempted and reclaimed.
    #[serde(default)]
    pub preemptible: bool,
}

/// A waiting gang's reservation, as the scheduler planned it in its latest cycle.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationStatus {
    /// The reserved nodes, in name order.
    #[schemars(length(max = 4096))]
    pub nodes: Vec<String>,
    /// When the gang is expected to start on them (RFC 3339).
    pub start_time: String,
}

/// The bindings of one gang that the scheduler is about to write: pod name (in the group's
/// namespace) to node name, with an id and the time it was written (RFC 3339).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub struct BindIntent {
    /// Pod name to node name.
    pub pods: BTreeMap<String, String>,
    /// Unique id of this intent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// When it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}
