//! CustomResourceDefinition rules: the checks a CRD must pass before its resources are served,
//! and the status the real apiextensions controllers would set (names accepted, established).

use serde_json::{json, Value};

use crate::error::Cause;
use crate::meta::now_rfc3339;
use crate::registry::Registry;

fn required(field: &str) -> Cause {
    Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: field.into() }
}

fn invalid(field: &str, value: &Value, why: &str) -> Cause {
    Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: {value}: {why}"), field: field.into() }
}

/// The problems that make the real server reject this CRD (a subset of its checks).
pub fn check(crd: &Value, registry: &Registry, is_update: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    if group.is_empty() {
        causes.push(required("spec.group"));
    } else if !group.contains('.') {
        causes.push(invalid("spec.group", &spec["group"], "should be a domain with at least one dot"));
    }
    if plural.is_empty() {
        causes.push(required("spec.names.plural"));
    }
    if spec["names"]["kind"].as_str().unwrap_or_default().is_empty() {
        causes.push(required("spec.names.kind"));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        None => causes.push(required("spec.scope")),
        Some(_) => causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"", spec["scope"]),
            field: "spec.scope".into(),
        }),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(required("spec.versions"));
    }
    for (i, v) in versions.iter().enumerate() {
        if v["name"].as_str().unwrap_or_default().is_empty() {
            causes.push(required(&format!("spec.versions[{i}].name")));
        }
        if v.get("schema").and_then(|s| s.get("openAPIV3Schema")).is_none() {
            causes.push(required(&format!("spec.versions[{i}].schema.openAPIV3Schema")));
        }
    }
    let storage = versions.iter().filter(|v| v["storage"].as_bool() == Some(true)).count();
    if !versions.is_empty() && storage != 1 {
        causes.push(invalid(
            "spec.versions",
            &json!(versions.len()),
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions.is_empty() && !versions.iter().any(|v| v["served"].as_bool() == Some(true)) {
        causes.push(invalid(
            "spec.versions",
            &json!(versions.len()),
            "must have at least one version marked as served",
        ));
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(invalid("metadata.name", &json!(name), "must be spec.names.plural+\".\"+spec.group"));
    }
    if !is_update && registry.all().iter().any(|t| t.group == group && t.plural == plural) {
        causes.push(invalid("spec.names.plural", &json!(plural), "is already served by this server"));
    }
    causes
}

/// Sets `status.acceptedNames`, the `NamesAccepted`/`Established` conditions and
/// `storedVersions`, keeping transition times of conditions already true.
pub fn set_established(crd: &mut Value, old: Option<&Value>) {
    let names = &crd["spec"]["names"];
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    let mut accepted = names.clone();
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let now = now_rfc3339();
    let since = |t: &str| -> String {
        old.and_then(|o| o["status"]["conditions"].as_array())
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map_or_else(|| now.clone(), str::to_string)
    };
    let mut stored: Vec<Value> =
        old.and_then(|o| o["status"]["storedVersions"].as_array().cloned()).unwrap_or_default();
    if let Some(v) = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
        .map(|v| v["name"].clone())
    {
        if !stored.contains(&v) {
            stored.push(v);
        }
    }
    crd["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": since("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": since("Established")},
        ],
        "storedVersions": stored,
    });
}
