//! The individual API writes of the scheduler: bindings, evictions, deletions, Events, pod
//! conditions and PodGroup status patches. Each returns what happened; none panics, and none retries
//! (the next cycle does).

use std::collections::BTreeMap;

use drover_api::crd::podgroup::{BindIntent, PodGroup};
use drover_kubeutil::events::{self, EventType};
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod, PodCondition};
use kube::api::{DeleteParams, EvictParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;

use crate::convert::PodRef;

/// The HTTP status of an API error, if the server answered one.
pub(super) fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Binds a pod to a node, with `annotations` (its charge record and, in a topology, its
/// domain) that the API server copies onto the pod in the same write: no pod is ever bound
/// without them, nor carries them unbound. A 409 is success when the pod turns out to be
/// bound to that very node already (a retried or recovered binding).
pub(super) async fn bind(
    client: &Client,
    pod: &PodRef,
    node: &str,
    annotations: BTreeMap<String, String>,
) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: pod.uid.clone(),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        },
    };
    match api.create_subresource::<_, serde_json::Value>("binding", &pod.name, &PostParams::default(), &binding).await {
        Ok(_) => Ok(()),
        Err(e) if code(&e) == Some(409) => match api.get_opt(&pod.name).await {
            Ok(Some(p))
                if p.metadata.uid == pod.uid && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) =>
            {
                Ok(())
            }
            Ok(_) => Err(format!("binding {}/{} to {node}: {e}", pod.namespace, pod.name)),
            Err(e2) => Err(format!("binding {}/{} to {node}: {e}; reading it back: {e2}", pod.namespace, pod.name)),
        },
        Err(e) => Err(format!("binding {}/{} to {node}: {e}", pod.namespace, pod.name)),
    }
}

/// Sets one condition of a pod's status (a strategic merge patch of `pods/status` replacing
/// only the condition of its type) on the pod as the cache showed it: the patch carries the
/// pod's uid and resourceVersion, so it fails with 409 if the pod changed meanwhile (bound,
/// say) and nothing is written over a newer state.
pub(super) async fn set_pod_condition(client: &Client, pod: &PodRef, condition: &PodCondition) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let patch = json!({
        "metadata": { "uid": pod.uid, "resourceVersion": pod.resource_version },
        "status": { "conditions": [condition] },
    });
    match api.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("setting {} on {}/{}: {e}", condition.type_, pod.namespace, pod.name)),
    }
}

fn uid_precondition(pod: &PodRef) -> Option<Preconditions> {
    pod.uid.as_ref().map(|uid| Preconditions { uid: Some(uid.clone()), resource_version: None })
}

/// Whether a write removed (or started removing) the pod, or found it gone already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// The API accepted it.
    Done,
    /// 404: already gone.
    Gone,
}

/// Evicts a pod through the Eviction API (graceful, as the pod asks).
pub(super) async fn evict(client: &Client, pod: &PodRef) -> Result<Removal, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams { preconditions: uid_precondition(pod), ..DeleteParams::default() }),
        post_options: PostParams::default(),
    };
    match api.evict(&pod.name, &params).await {
        Ok(_) => Ok(Removal::Done),
        Err(e) if code(&e) == Some(404) => Ok(Removal::Gone),
        Err(e) => Err(format!("evicting {}/{}: {e}", pod.namespace, pod.name)),
    }
}

/// Deletes a pod at once (`gracePeriodSeconds: 0`), as a gang rollback does.
pub(super) async fn delete_now(client: &Client, pod: &PodRef) -> Result<Removal, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let params =
        DeleteParams { grace_period_seconds: Some(0), preconditions: uid_precondition(pod), ..DeleteParams::default() };
    match api.delete(&pod.name, &params).await {
        Ok(_) => Ok(Removal::Done),
        Err(e) if code(&e) == Some(404) => Ok(Removal::Gone),
        Err(e) => Err(format!("deleting {}/{}: {e}", pod.namespace, pod.name)),
    }
}

/// Records a core/v1 Event on a pod. Failures are logged only.
pub(super) async fn pod_event(
    client: &Client,
    component: &str,
    pod: &PodRef,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    let involved = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name.clone()),
        namespace: Some(pod.namespace.clone()),
        uid: pod.uid.clone(),
        ..ObjectReference::default()
    };
    events::publish_for(client, component, involved, kind, reason, message).await;
}

/// Writes (`Some`) or removes (`None`) the group's `status.bindIntent` with a merge patch of
/// the status subresource carrying the group's resourceVersion, so that it fails with 409 if
/// the group changed meanwhile. Tenants who may edit PodGroups cannot write their status.
pub(super) async fn write_intent(
    client: &Client,
    group: &PodGroup,
    intent: Option<&BindIntent>,
) -> Result<PodGroup, kube::Error> {
    let namespace = group.metadata.namespace.clone().unwrap_or_default();
    let name = group.metadata.name.clone().unwrap_or_default();
    let api: Api<PodGroup> = Api::namespaced(client.clone(), &namespace);
    let patch = json!({
        "metadata": { "resourceVersion": group.metadata.resource_version },
        "status": { "bindIntent": intent },
    });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await
}
