//! `Department`: the upper level of Run:ai's two-level quota hierarchy. Cluster-scoped. The
//! controller turns it into one queue per node pool.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::{CustomResource, KubeSchema, Resource};
use serde::{Deserialize, Serialize};

use super::project::{NodePoolQuota, MAX_NODE_POOLS};

/// Desired state of a department.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "scheduling.drover.dev",
    version = "v1alpha1",
    kind = "Department",
    plural = "departments",
    shortname = "dept",
    category = "drover",
    status = "DepartmentStatus",
    printcolumn(name = "Pools", type_ = "string", json_path = ".spec.nodePools[*].name"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct DepartmentSpec {
    /// Quota per node pool, at most [`MAX_NODE_POOLS`], names unique (a list map keyed by
    /// name, so the API server refuses duplicates itself).
    #[schemars(length(min = 1, max = MAX_NODE_POOLS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub node_pools: Vec<NodePoolQuota>,
}

/// Observed state of a department.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DepartmentStatus {
    /// Queues made for it, one per node pool.
    #[serde(default)]
    pub queues: Vec<String>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Whether a Queue was made from a Department: its controller ownerReference names a
/// Department of Drover's API group (what the queue-tree controller sets; Queues are
/// admin-only, so tenants cannot forge one). Such a queue is never a leaf, even before any
/// project queue is made under it: pod groups go in its projects' queues. The scheduler and
/// the Job controller both ask this.
pub fn is_department_queue(meta: &ObjectMeta) -> bool {
    let group = Department::group(&());
    meta.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.kind == Department::kind(&())
            && r.api_version.split_once('/').is_some_and(|(g, _)| g == group)
    })
}
