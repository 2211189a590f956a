//! The Warning Events the fake kubelet records about pods, as the real kubelet does (core/v1
//! Events from the `kubelet` component of the node), so that `kubectl describe pod` explains
//! what happened. Recording is best effort: a failure is logged and otherwise ignored.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt as _};

/// Records a Warning Event `reason: message` about `pod` from the kubelet of `node`.
pub(crate) async fn warn(client: &Client, pod: &Pod, node: &str, reason: &str, message: &str) {
    let namespace = pod.namespace().unwrap_or_else(|| "default".to_owned());
    let now = Time(Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", pod.name_any())),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(pod.name_any()),
            namespace: Some(namespace.clone()),
            uid: pod.uid(),
            resource_version: pod.resource_version(),
            ..Default::default()
        },
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        type_: Some("Warning".to_owned()),
        source: Some(EventSource { component: Some("kubelet".to_owned()), host: Some(node.to_owned()) }),
        reporting_component: Some("kubelet".to_owned()),
        reporting_instance: Some(node.to_owned()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(error) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(pod = %pod.name_any(), reason, %error, "could not record an event");
    }
}
