//! A pod's owners, read one controller ownerReference at a time (as unstructured objects, so
//! a kind whose CRD is not installed costs nothing) while they are kinds the controller knows.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Client, ResourceExt};

use super::kinds::{self, Owner};

/// No known chain is longer: a LeaderWorkerSet's worker pod → its StatefulSet → the leader
/// pod → the leader StatefulSet → the LeaderWorkerSet.
const MAX_DEPTH: usize = 6;

/// What walking a pod's owners found.
#[derive(Debug)]
pub enum Walk {
    /// The known owners, the pod's own first; empty when its owner is of no known kind.
    Chain(Vec<Owner>),
    /// An owner the references name is gone or was replaced (the pod is about to go too).
    Gone(String),
}

fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

/// Walks the pod's controller references up while their kinds are known.
pub async fn walk(client: &Client, pod: &Pod) -> Result<Walk, kube::Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let mut chain: Vec<Owner> = Vec::new();
    let mut next = controller_of(&pod.metadata).cloned();
    while let Some(reference) = next.take() {
        let Some(kind) = kinds::find(&reference.api_version, &reference.kind) else { break };
        if chain.len() == MAX_DEPTH {
            break;
        }
        let (group, version) = reference.api_version.rsplit_once('/').unwrap_or(("", &reference.api_version));
        let resource = ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
            plural: kind.plural.to_string(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        let what = format!("{} {namespace}/{}", reference.kind, reference.name);
        let Some(object) = api.get_opt(&reference.name).await? else {
            return Ok(Walk::Gone(format!("{what} does not exist")));
        };
        if object.metadata.uid.as_deref() != Some(reference.uid.as_str()) {
            return Ok(Walk::Gone(format!("{what} was replaced by another object of that name")));
        }
        next = controller_of(&object.metadata).cloned();
        chain.push(Owner { kind, api_version: reference.api_version, meta: object.metadata, data: object.data });
    }
    Ok(Walk::Chain(chain))
}
