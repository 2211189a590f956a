//! The owner kinds the PodGroup controller knows, in one table: which it walks through to
//! find a pod's top owner, and which of them define a gang (with the rule that reads it).
//! Adding a kind is adding a row (and, for a gang, its rule and a ClusterRole `get` grant).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use super::shape::{BadField, Shape};
use super::{jobset, kubeflow, lws, ray};

/// One owner of a pod, as read.
#[derive(Debug, Clone)]
pub struct Owner {
    /// Its kind.
    pub kind: &'static OwnerKind,
    /// Its `apiVersion`, as the reference gave it.
    pub api_version: String,
    /// Its metadata (name, uid, labels, annotations).
    pub meta: ObjectMeta,
    /// Everything else (`spec`, `status`).
    pub data: Value,
}

impl Owner {
    /// A controller reference to it, for the PodGroup made for its gang (so the group goes
    /// when it goes).
    pub fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.kind.kind.to_string(),
            name: self.meta.name.clone().unwrap_or_default(),
            uid: self.meta.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or_default()
    }
}

/// An owner kind, as found in ownerReferences.
#[derive(Debug)]
pub struct OwnerKind {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Resource name, to read it.
    pub plural: &'static str,
    /// Its gang, for kinds that define one; `None` for kinds only walked through (a JobSet's
    /// Jobs, a LeaderWorkerSet's StatefulSets and leader pods).
    pub gang: Option<GangRule>,
}

/// How a kind defines its gang.
#[derive(Debug)]
pub struct GangRule {
    /// Group names are `<prefix>-<owner name>` (and `-<instance>` for owners of several gangs).
    pub prefix: &'static str,
    /// The gang, from the owner chain (the pod's owner first) and this owner's index in it.
    pub shape: fn(&[Owner], usize, &Pod) -> Result<Shape, BadField>,
}

const fn walked(group: &'static str, kind: &'static str, plural: &'static str) -> OwnerKind {
    OwnerKind { group, kind, plural, gang: None }
}

const fn gang(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    prefix: &'static str,
    shape: fn(&[Owner], usize, &Pod) -> Result<Shape, BadField>,
) -> OwnerKind {
    OwnerKind { group, kind, plural, gang: Some(GangRule { prefix, shape }) }
}

/// Every kind the controller knows.
pub const KINDS: &[OwnerKind] = &[
    walked("", "Pod", "pods"),
    walked("batch", "Job", "jobs"),
    walked("apps", "StatefulSet", "statefulsets"),
    gang("kubeflow.org", "PyTorchJob", "pytorchjobs", "pytorchjob", |c, i, p| {
        kubeflow::shape(&c[i].data, "pytorchReplicaSpecs", p)
    }),
    gang("kubeflow.org", "TFJob", "tfjobs", "tfjob", |c, i, p| kubeflow::shape(&c[i].data, "tfReplicaSpecs", p)),
    gang("kubeflow.org", "MPIJob", "mpijobs", "mpijob", |c, i, p| kubeflow::shape(&c[i].data, "mpiReplicaSpecs", p)),
    gang("kubeflow.org", "XGBoostJob", "xgboostjobs", "xgboostjob", |c, i, p| {
        kubeflow::shape(&c[i].data, "xgbReplicaSpecs", p)
    }),
    gang("kubeflow.org", "PaddleJob", "paddlejobs", "paddlejob", |c, i, p| {
        kubeflow::shape(&c[i].data, "paddleReplicaSpecs", p)
    }),
    gang("kubeflow.org", "JAXJob", "jaxjobs", "jaxjob", |c, i, p| kubeflow::shape(&c[i].data, "jaxReplicaSpecs", p)),
    gang("trainer.kubeflow.org", "TrainJob", "trainjobs", "trainjob", train_job),
    gang("jobset.x-k8s.io", "JobSet", "jobsets", "jobset", |c, i, p| jobset::shape(&c[i].data, p)),
    gang("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", "lws", |c, i, p| lws::shape(&c[i].data, p)),
    gang("ray.io", "RayCluster", "rayclusters", "raycluster", |c, i, p| ray::shape(&c[i].data, "spec", p)),
    gang("ray.io", "RayJob", "rayjobs", "rayjob", |c, i, p| ray::shape(&c[i].data, "spec.rayClusterSpec", p)),
];

/// A TrainJob's pods come from the JobSet it runs (its runtime decides the JobSet's shape), so
/// its gang is that JobSet's.
fn train_job(chain: &[Owner], i: usize, pod: &Pod) -> Result<Shape, BadField> {
    match i.checked_sub(1).map(|j| &chain[j]) {
        Some(inner) if inner.kind.kind == "JobSet" => jobset::shape(&inner.data, pod),
        _ => Err(BadField::new("metadata.ownerReferences", "the pod belongs to the TrainJob through no JobSet")),
    }
}

/// The kind of an ownerReference (`apiVersion` is `group/version`, or `version` for core).
pub fn find(api_version: &str, kind: &str) -> Option<&'static OwnerKind> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    KINDS.iter().find(|k| k.group == group && k.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_found_by_group_and_kind_whatever_the_version() {
        assert_eq!(find("kubeflow.org/v1", "PyTorchJob").map(|k| k.plural), Some("pytorchjobs"));
        assert_eq!(find("v1", "Pod").map(|k| k.plural), Some("pods"));
        assert!(find("apps/v1", "ReplicaSet").is_none(), "a Deployment's pods are not gangs");
        assert!(find("example.com/v1", "PyTorchJob").is_none(), "the group is part of the kind");
    }
}
