//! Patch formats: JSON merge patch, strategic merge patch (see [`crate::smp`]), JSON patch,
//! and the simplified server-side apply merge with its `managedFields` bookkeeping.

use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::meta::{metadata_mut, now_rfc3339};

/// The patch body formats, from the request's Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json` (built-in types only).
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type of a Content-Type header value.
    pub fn from_content_type(ct: &str) -> ApiResult<Self> {
        match ct.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/apply-patch+yaml" => Ok(PatchType::Apply),
            other => Err(ApiError::unsupported_media(other)),
        }
    }
}

/// Applies a merge or JSON patch body to `target`.
pub fn apply_patch(kind: PatchType, target: &mut Value, body: &[u8]) -> ApiResult<()> {
    match kind {
        PatchType::Merge | PatchType::Strategic => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if !patch.is_object() {
                return Err(ApiError::bad_request("error decoding patch: the patch must be a JSON object"));
            }
            if kind == PatchType::Strategic {
                return crate::smp::apply(target, &patch);
            }
            json_patch::merge(target, &patch);
            Ok(())
        }
        PatchType::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(target, &patch).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })
        }
        PatchType::Apply => Err(ApiError::internal("apply is not a body patch")),
    }
}

/// Parses an apply body (YAML or JSON) into an object.
pub fn parse_apply(body: &[u8]) -> ApiResult<Value> {
    let v: Value =
        serde_yaml::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("error decoding YAML: the applied configuration must be an object"));
    }
    Ok(v)
}

/// The simplified apply merge: maps merge recursively, every other value (lists included)
/// replaces the live one, and `null` removes the field.
pub fn apply_merge(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    l.remove(k);
                } else if let Some(existing) = l.get_mut(k).filter(|e| e.is_object() && v.is_object()) {
                    apply_merge(existing, v);
                } else {
                    l.insert(k.clone(), v.clone());
                }
            }
        }
        (live, applied) => *live = applied.clone(),
    }
}

/// The `fieldsV1` set of an applied object: every map key as `f:<key>`; lists are atomic.
fn fields_v1(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, child) in m {
                out.insert(format!("f:{k}"), fields_v1(child));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// Records (or refreshes) a `managedFields` entry for `manager` with the fields it applied.
pub fn record_manager(obj: &mut Value, applied: &Value, manager: &str, api_version: &str, subresource: Option<&str>) {
    let mut fields = applied.clone();
    if let Some(m) = fields.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["name", "namespace", "resourceVersion", "uid", "managedFields", "creationTimestamp"] {
                meta.remove(k);
            }
        }
    }
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(&fields),
    });
    if let Some(sub) = subresource {
        entry["subresource"] = json!(sub);
    }
    let meta = metadata_mut(obj);
    let list = meta.entry("managedFields").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let arr = list.as_array_mut().expect("array ensured above");
    arr.retain(|e| {
        !(e["manager"] == manager
            && e["operation"] == "Apply"
            && e.get("subresource").and_then(Value::as_str) == subresource)
    });
    arr.push(entry);
}
