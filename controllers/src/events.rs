//! Kubernetes Events on Drover's objects, so `kubectl describe` shows what the controllers
//! did and why something cannot work. Written as core/v1 Events, which every API server
//! (and the emulator) serves.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource, ResourceExt};

/// Whether an event is routine or a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something happened as expected.
    Normal,
    /// Something is wrong and needs a user's attention.
    Warning,
}

/// Records an event about `object`. Failures are logged, never returned: an event that cannot
/// be written must not stop a reconcile.
pub async fn publish<K>(client: &Client, controller: &str, object: &K, kind: EventType, reason: &str, message: &str)
where
    K: Resource<DynamicType = ()>,
{
    let namespace = object.namespace().unwrap_or_else(|| "default".to_string());
    let now = jiff_now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", object.name_any())),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(object.name_any()),
            namespace: object.namespace(),
            uid: object.uid(),
            resource_version: object.resource_version(),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(match kind {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        source: Some(EventSource { component: Some(controller.to_string()), host: None }),
        reporting_component: Some(controller.to_string()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        action: Some(reason.to_string()),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::warn!(reason, object = %object.name_any(), error = %e, "could not record an event");
    }
}

fn jiff_now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}
