//! "When will my job start?" as the API carries it: the scheduler writes a waiting PodGroup's
//! [`Forecast`] into its status every cycle it changes, and the Job controller mirrors it into
//! its Job's status. Both live in status, which tenants cannot write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// Where a waiting gang stands and when it is expected to start, as the scheduler's latest
/// cycle that changed it saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// 1 for the gang its queue serves first.
    #[schemars(range(min = 1))]
    pub queue_position: u32,
    /// 1 for the gang the scheduler serves first, counting every queue's waiting gangs.
    #[schemars(range(min = 1))]
    pub position: u32,
    /// When it is expected to start; absent when that is unknown. Moves only when it moves by
    /// more than a scheduler period (or a tenth of the time left), so that status is not
    /// rewritten every cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<Time>,
    /// What `expectedStart` rests on.
    pub basis: ForecastBasis,
    /// What would let it start now (the scheduler's counterfactual, e.g. a queue limit to
    /// raise), when it waits on a rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub to_start: Option<String>,
}

/// What a forecast's expected start rests on, from the surest.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum ForecastBasis {
    /// Every end it waits for is declared by pods' `activeDeadlineSeconds`, which the kubelet
    /// enforces.
    DeclaredRunTimes,
    /// Some end it waits for was learned from the queue's finished jobs (`Queue
    /// status.runTimes`): an estimate.
    LearnedRunTimes,
    /// Something it waits for has no known end: no start can be given.
    #[default]
    Unknown,
}
