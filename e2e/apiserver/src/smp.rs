//! Strategic merge patch for the built-in types, as `kubectl apply` (client-side) and
//! `kubectl edit` send it: lists named in the table below merge by their key, `finalizers` as a
//! set, every other list is replaced. Directives: `$patch: replace|delete|merge`,
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>`; `$setElementOrder/<field>` is accepted and
//! ignored (merged lists keep the live order, new elements are appended).
//!
//! The merge keys come from the Kubernetes types' `patchMergeKey` tags and are looked up by field
//! name only, not by full path (the served types have no two lists of the same name with
//! different keys, except `ports`, told apart by their elements).

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// The merge key of a list field, if it merges by key.
fn merge_key(field: &str, elems: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => "name",
        "ports" if elems.iter().any(|e| e.get("containerPort").is_some()) => "containerPort",
        "ports" => "port",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" | "addresses" => "type",
        "taints" => "key",
        "ownerReferences" => "uid",
        "topologySpreadConstraints" => "topologyKey",
        "podIPs" | "hostIPs" => "ip",
        _ => return None,
    })
}

/// Primitive lists merged as sets.
fn is_primitive_set(field: &str) -> bool {
    field == "finalizers"
}

fn unsupported(what: &str) -> ApiError {
    ApiError::bad_request(format!("strategic merge patch: unsupported {what}"))
}

/// Applies a strategic merge patch (a JSON object) to `target`.
pub fn apply(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let Some(patch) = patch.as_object() else {
        return Err(ApiError::bad_request("error decoding patch: the patch must be a JSON object"));
    };
    merge_map(target, patch)
}

fn strip_directives(m: &Map<String, Value>) -> Value {
    Value::Object(m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn merge_map(target: &mut Value, patch: &Map<String, Value>) -> ApiResult<()> {
    match patch.get("$patch").map(|v| v.as_str()) {
        None | Some(Some("merge")) => {}
        Some(Some("replace")) => {
            *target = strip_directives(patch);
            return Ok(());
        }
        Some(other) => return Err(unsupported(&format!("$patch value {other:?}"))),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("object ensured above");
    for (k, v) in patch {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(list) = map.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            return Err(unsupported(&format!("directive {k:?}")));
        }
        match v {
            Value::Null => {
                map.remove(k);
            }
            Value::Object(child) if child.get("$patch").and_then(Value::as_str) == Some("delete") => {
                map.remove(k);
            }
            Value::Object(child) => merge_map(map.entry(k.clone()).or_insert(Value::Null), child)?,
            Value::Array(items) => {
                let live = map.get(k).and_then(Value::as_array).cloned();
                let merged = match (live, merge_key(k, items)) {
                    (Some(live), Some(key)) => merge_keyed(live, items, key)?,
                    (Some(mut live), None) if is_primitive_set(k) => {
                        live.extend(items.iter().filter(|i| !live.contains(i)).cloned().collect::<Vec<_>>());
                        live
                    }
                    _ => items.iter().map(|i| i.as_object().map_or_else(|| i.clone(), strip_directives)).collect(),
                };
                map.insert(k.clone(), Value::Array(merged));
            }
            _ => {
                map.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        map.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    Ok(())
}

fn merge_keyed(mut live: Vec<Value>, items: &[Value], key: &str) -> ApiResult<Vec<Value>> {
    if items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace")) {
        return Ok(items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(|i| i.as_object().map_or_else(|| i.clone(), strip_directives))
            .collect());
    }
    for item in items {
        let Some(obj) = item.as_object() else { return Err(unsupported("non-object element in a keyed list")) };
        let id = obj.get(key).cloned().unwrap_or(Value::Null);
        let pos = live.iter().position(|l| l.get(key) == Some(&id));
        match (obj.get("$patch").and_then(Value::as_str), pos) {
            (Some("delete"), Some(p)) => {
                live.remove(p);
            }
            (Some("delete"), None) => {}
            (_, Some(p)) => merge_map(&mut live[p], obj)?,
            (_, None) => live.push(strip_directives(obj)),
        }
    }
    Ok(live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keyed_lists_merge_and_directives_apply() {
        let mut pod = json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]},
            {"name": "b", "image": "y"}
        ]}});
        let patch = json!({"metadata": {"finalizers": ["b"]}, "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "x2"}, {"name": "b", "$patch": "delete"}, {"name": "c", "image": "z"}]
        }});
        apply(&mut pod, &patch).unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            pod["spec"]["containers"],
            json!([{"name": "a", "image": "x2", "env": [{"name": "E", "value": "1"}]}, {"name": "c", "image": "z"}])
        );
        apply(&mut pod, &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})).unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["b"]));
        assert!(apply(&mut pod, &json!({"$bogus": 1})).is_err());
    }
}
