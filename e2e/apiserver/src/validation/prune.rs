//! Pruning of unknown fields and defaulting, as the API server does when decoding a custom
//! resource (`structuralpruning.Prune`, then `PruneNonNullableNullsWithoutDefaults` and
//! `Default`).

use super::schema::flag;
use super::Path;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Properties kept in the root object and in embedded resources whatever the schema says.
const META: [&str; 3] = ["apiVersion", "kind", "metadata"];

pub(super) fn default_and_prune(schema: &Value, obj: &mut Value, mut report: Option<&mut Vec<String>>) {
    walk(schema, obj, &Path::default(), true, &mut report);
}

fn nullable(s: &Value) -> bool {
    s.as_object().is_some_and(|so| flag(so, "nullable"))
}

/// The properties that keep a field from being pruned: the node's own, and (for non-structural
/// schemas schemars can emit) those its `allOf`/`anyOf`/`oneOf` branches declare. The boolean
/// tells an own property (defaulted and recursed into) from a branch's (only kept).
fn known_properties(so: &Map<String, Value>) -> BTreeMap<&str, (&Value, bool)> {
    let mut known = BTreeMap::new();
    if let Some(Value::Object(props)) = so.get("properties") {
        for (k, ps) in props {
            known.insert(k.as_str(), (ps, true));
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = so.get(key) {
            for b in branches {
                if let Some(Value::Object(props)) = b.get("properties") {
                    for (k, ps) in props {
                        known.entry(k.as_str()).or_insert((ps, false));
                    }
                }
            }
        }
    }
    known
}

fn walk(s: &Value, v: &mut Value, path: &Path, root: bool, report: &mut Option<&mut Vec<String>>) {
    let Some(so) = s.as_object() else {
        return;
    };
    match v {
        Value::Object(m) => {
            let keep_meta = root || flag(so, "x-kubernetes-embedded-resource");
            let is_meta = |k: &str| keep_meta && META.contains(&k);
            let known = known_properties(so);
            let additional = match so.get("additionalProperties") {
                Some(ap @ Value::Object(_)) => Some(ap),
                _ => None,
            };
            let keep_unknown = flag(so, "x-kubernetes-preserve-unknown-fields")
                || additional.is_some()
                || matches!(so.get("additionalProperties"), Some(Value::Bool(true)));

            // Unknown fields.
            if !keep_unknown {
                let unknown: Vec<String> =
                    m.keys().filter(|k| !known.contains_key(k.as_str()) && !is_meta(k)).cloned().collect();
                for k in unknown {
                    m.remove(&k);
                    if let Some(r) = report.as_deref_mut() {
                        r.push(path.child(&k).openapi());
                    }
                }
            }

            // Nulls of non-nullable fields without a default.
            let nulls: Vec<String> = m
                .iter()
                .filter(|(k, val)| val.is_null() && !is_meta(k))
                .filter(|(k, _)| {
                    let ks = match known.get(k.as_str()) {
                        Some((ps, _)) => Some(*ps),
                        None => additional,
                    };
                    ks.is_some_and(|ks| !nullable(ks) && ks.get("default").is_none())
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in nulls {
                m.remove(&k);
            }

            // Defaults of absent (or null non-nullable) properties.
            for (k, (ps, own)) in &known {
                if !own || is_meta(k) {
                    continue;
                }
                let Some(default) = ps.get("default") else {
                    continue;
                };
                let apply = match m.get(*k) {
                    None => true,
                    Some(Value::Null) => !nullable(ps),
                    Some(_) => false,
                };
                if apply {
                    m.insert((*k).to_string(), default.clone());
                }
            }

            // Recurse.
            for (k, val) in m.iter_mut() {
                if is_meta(k) {
                    continue;
                }
                match known.get(k.as_str()) {
                    Some((ps, true)) => walk(ps, val, &path.child(k), false, report),
                    Some((_, false)) => {}
                    None => {
                        if let Some(ap) = additional {
                            if val.is_null() && !nullable(ap) {
                                if let Some(d) = ap.get("default") {
                                    *val = d.clone();
                                }
                            }
                            walk(ap, val, &path.key(k), false, report);
                        }
                    }
                }
            }
        }
        Value::Array(items_vec) => {
            if let Some(items) = so.get("items") {
                for (i, item) in items_vec.iter_mut().enumerate() {
                    if item.is_null() && !nullable(items) {
                        if let Some(d) = items.get("default") {
                            *item = d.clone();
                        }
                    }
                    walk(items, item, &path.index(i), false, report);
                }
            }
        }
        _ => {}
    }
}
