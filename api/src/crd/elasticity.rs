//! Run:ai's elasticity (seed `runai-scheduler-2020.txt`) as the API carries it: a Job asks for
//! it ([`Elasticity`]), its PodGroup tells the scheduler the sizes it may run at
//! ([`GroupElasticity`]), and the scheduler records its decision in the group's status
//! ([`ResizeStatus`]), which the Job controller applies by restarting the job at that size.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A Job's opt-in to being restarted smaller when its gang cannot be placed and larger when
/// spare capacity allows. Only for a one-task Job whose gang is all its pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Elasticity {
    /// How it shrinks: `Halve`, the only way (half, then a quarter, ... of its pods).
    pub shrink: Shrink,
    /// The fewest GPUs it may run with; absent = one pod's.
    #[serde(default, rename = "minGPUs", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_gpus: Option<u32>,
}

/// How an elastic job shrinks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum Shrink {
    /// Half its pods at a time, down to its floor.
    #[default]
    Halve,
}

/// The fewest pods of `gpus_per_pod` GPUs each that hold `min_gpus` GPUs (absent: one pod), for
/// a job of `replicas` pods. Refused (with why) when a GPU floor is asked of pods that request
/// no GPU, or needs more pods than the job has. The one place the floor is worked out: the Job
/// controller and the simulator both call it.
pub fn floor_pods(replicas: u32, gpus_per_pod: i64, min_gpus: Option<u32>) -> Result<u32, String> {
    let floor = match min_gpus {
        None => 1,
        Some(_) if gpus_per_pod <= 0 => return Err("is set, but the job's pods request no GPU".into()),
        Some(g) => u32::try_from((i64::from(g) + gpus_per_pod - 1) / gpus_per_pod).unwrap_or(u32::MAX).max(1),
    };
    if floor > replicas {
        return Err(format!("needs {floor} pods, more than the job's {replicas}"));
    }
    Ok(floor)
}

/// The sizes a PodGroup may be restarted at, in pods: written by the Job controller from its
/// Job's [`Elasticity`]. The group's gang (`minMember`) is its current size.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[x_kube(validation = Rule::new("self.minMember <= self.maxMember").message("minMember must not exceed maxMember"))]
#[serde(rename_all = "camelCase")]
pub struct GroupElasticity {
    /// The fewest pods it may run with.
    #[schemars(range(min = 1))]
    pub min_member: u32,
    /// The most pods it may run with (what its job asks for).
    #[schemars(range(min = 1))]
    pub max_member: u32,
}

/// The scheduler's latest resize of an elastic group: the size its pods should be restarted
/// at, and why. Lives in status, which only the scheduler writes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResizeStatus {
    /// The size it was decided at (its `minMember` then): while the group still has it, the
    /// restart has not happened yet.
    pub from: u32,
    /// The size to restart at.
    pub replicas: u32,
    /// Why, as the scheduler said it.
    pub reason: String,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Time>,
}

#[cfg(test)]
mod tests {
    use super::floor_pods;

    #[test]
    fn the_floor_is_the_fewest_pods_holding_the_gpus() {
        assert_eq!(floor_pods(4, 4, None), Ok(1));
        assert_eq!(floor_pods(4, 4, Some(6)), Ok(2));
        assert_eq!(floor_pods(4, 4, Some(16)), Ok(4));
        assert!(floor_pods(4, 4, Some(17)).unwrap_err().contains("more than the job's 4"));
        assert!(floor_pods(4, 0, Some(1)).unwrap_err().contains("request no GPU"));
    }
}
