//! A Job task's pod template, read leniently.
//!
//! The Job CRD cannot describe a whole pod spec (that schema would exceed what the API server
//! accepts for a CRD), so the API server stores whatever object a tenant writes there. Read
//! strictly, one unreadable template (`containers: 5`) would make every list of Jobs fail to
//! decode and stall the Job controller for every tenant. Read through this type, it stays a
//! value of its own Job: the controller marks that Job `Valid=False` with the field named.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A pod template as written in `spec.tasks[].template`: either a readable
/// [`PodTemplateSpec`] or the raw object with the reason it does not read as one.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskTemplate {
    /// The template read as a pod template.
    Valid(Box<PodTemplateSpec>),
    /// The object as stored, and what is wrong with it (the field path and the problem).
    Unreadable {
        /// The stored object, written back unchanged.
        raw: serde_json::Value,
        /// Where and why it does not read, e.g. `spec.containers: invalid type: ...`.
        error: String,
    },
}

impl TaskTemplate {
    /// The pod template, or the reason the stored object is not one.
    pub fn get(&self) -> Result<&PodTemplateSpec, &str> {
        match self {
            TaskTemplate::Valid(t) => Ok(t),
            TaskTemplate::Unreadable { error, .. } => Err(error),
        }
    }

    /// Reads a stored template, keeping an unreadable one with its reason.
    pub fn from_value(raw: serde_json::Value) -> TaskTemplate {
        match serde_path_to_error::deserialize::<_, PodTemplateSpec>(&raw) {
            Ok(t) => TaskTemplate::Valid(Box::new(t)),
            Err(e) => {
                let path = e.path().to_string();
                let error = if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) };
                TaskTemplate::Unreadable { raw, error }
            }
        }
    }
}

impl Default for TaskTemplate {
    fn default() -> Self {
        TaskTemplate::Valid(Box::default())
    }
}

impl From<PodTemplateSpec> for TaskTemplate {
    fn from(t: PodTemplateSpec) -> Self {
        TaskTemplate::Valid(Box::new(t))
    }
}

impl Serialize for TaskTemplate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TaskTemplate::Valid(t) => t.serialize(s),
            TaskTemplate::Unreadable { raw, .. } => raw.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for TaskTemplate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(TaskTemplate::from_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_readable_template_reads_and_round_trips() {
        let raw = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let t: TaskTemplate = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(t.get().unwrap().spec.as_ref().unwrap().containers[0].name, "c");
        assert_eq!(serde_json::to_value(&t).unwrap(), raw);
    }

    #[test]
    fn an_unreadable_template_names_the_field_and_is_written_back_unchanged() {
        let raw = json!({"spec": {"containers": 5}});
        let t: TaskTemplate = serde_json::from_value(raw.clone()).unwrap();
        let error = t.get().unwrap_err();
        assert!(error.starts_with("spec.containers: invalid type: integer `5`"), "{error}");
        assert_eq!(serde_json::to_value(&t).unwrap(), raw);
    }

    #[test]
    fn a_template_that_is_not_an_object_is_unreadable() {
        let t: TaskTemplate = serde_json::from_value(json!("x")).unwrap();
        assert!(t.get().unwrap_err().contains("invalid type: string"), "{t:?}");
    }
}
