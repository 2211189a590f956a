//! Kubernetes Events on Drover's objects, so `kubectl describe` shows what the controllers
//! and the scheduler did and why something cannot work. Written as core/v1 Events, which every
//! API server serves.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
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
    let involved = ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(object.name_any()),
        namespace: object.namespace(),
        uid: object.uid(),
        resource_version: object.resource_version(),
        ..ObjectReference::default()
    };
    publish_for(client, controller, involved, kind, reason, message).await;
}

/// Records an event about the object `involved` refers to. Cluster-scoped objects' events
/// go to the `default` namespace. `eventTime` stays unset: with it, the API server would
/// demand the events.k8s.io reporting fields.
pub async fn publish_for(
    client: &Client,
    controller: &str,
    involved: ObjectReference,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    let namespace = involved.namespace.clone().unwrap_or_else(|| "default".to_string());
    let name = involved.name.clone().unwrap_or_default();
    let now = Time(jiff::Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: involved,
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(match kind {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        source: Some(EventSource { component: Some(controller.to_string()), host: None }),
        reporting_component: Some(controller.to_string()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::warn!(reason, object = %name, error = %e, "could not record an event");
    }
}
