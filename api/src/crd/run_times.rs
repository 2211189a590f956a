//! A queue's learned run times as its status keeps them: the run times of the queue's recently
//! finished jobs, per kind of job, from which the scheduler predicts how long a job that
//! declares none will run. In status, written only by the scheduler, so that a new leader
//! predicts what the old one did and no tenant can write it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Kinds of job one queue's history holds at most (the scheduler's `run_times::KEYS`).
pub const MAX_KINDS: u32 = 256;
/// Run times kept per kind of job (the scheduler's `run_times::SAMPLES`).
pub const MAX_SAMPLES: u32 = 8;

/// The recent run times of one kind of job in a queue: the jobs of one name in a namespace,
/// the jobs of one GPU count in a namespace (`gpus`), or all of a namespace's jobs (neither).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("!(has(self.name) && has(self.gpus))").message("a kind of job is a name or a GPU count, not both"))]
#[serde(rename_all = "camelCase")]
pub struct RunTimeSamples {
    /// The namespace the jobs ran in: a namespace's predictions come from its own jobs only.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The jobs' name (a Job's, or its PodGroup's when no controller owns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// The jobs' GPUs, all pods together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpus: Option<i64>,
    /// Run times in seconds, oldest first.
    #[schemars(length(min = 1, max = MAX_SAMPLES), inner(range(min = 0)))]
    pub seconds: Vec<i64>,
    /// When the latest of them finished: the least recently fed kind goes first when the
    /// history is full.
    pub updated: Time,
}
