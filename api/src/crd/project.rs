//! `Project`: the lower level of Run:ai's two-level quota hierarchy. Cluster-scoped. The
//! controller turns it into one queue per node pool under its department's queue, and maps
//! its namespaces to it so that pods and Jobs there land in its queue by default.

use super::queue::RunBounds;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The most node pools a Project or Department may name: far more kinds of nodes than a
/// cluster has, and a bound on the list for any rule that reads it.
pub const MAX_NODE_POOLS: u32 = 64;

/// Desired state of a project.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "scheduling.drover.dev",
    version = "v1alpha1",
    kind = "Project",
    plural = "projects",
    shortname = "proj",
    category = "drover",
    status = "ProjectStatus",
    printcolumn(name = "Department", type_ = "string", json_path = ".spec.department"),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ProjectSpec {
    /// The department the project belongs to.
    #[schemars(length(min = 1))]
    pub department: String,
    /// Namespaces whose pods and Jobs go to this project's queues by default.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Quota per node pool, at most [`MAX_NODE_POOLS`], names unique (a list map keyed by
    /// name, so the API server refuses duplicates itself).
    #[schemars(length(min = 1, max = MAX_NODE_POOLS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub node_pools: Vec<NodePoolQuota>,
}

/// Quota of a project or department in one node pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolQuota {
    /// The node pool (value of the `drover.dev/node-pool` node label, hence at most 63
    /// characters).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Guaranteed GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Quantity>,
    /// Guaranteed CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Guaranteed memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Share of the pool's unused resources; 0 = none.
    #[serde(default = "one")]
    pub over_quota_weight: u32,
    /// Hard cap on GPUs in the pool; absent = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_limit: Option<Quantity>,
    /// Running limits and minimum run times of the pool's queue (a department's limits bound
    /// its projects together; a project's absent minimum run times are the department's).
    #[serde(flatten)]
    pub run_bounds: RunBounds,
}

fn one() -> u32 {
    1
}

/// Observed state of a project.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectStatus {
    /// Queues made for it, one per node pool.
    #[serde(default)]
    pub queues: Vec<String>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions, e.g. `Valid` false when the department does not exist.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
