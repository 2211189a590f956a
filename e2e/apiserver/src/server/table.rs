//! `meta.k8s.io/v1 Table` output for `kubectl get`: Name, the type's printer columns (a CRD's
//! `additionalPrinterColumns`, or a short default for built-ins) and Age.

use serde_json::{json, Value};

use crate::registry::{Builtin, PrinterColumn, ResourceType};

/// Whether the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|m| m.contains("as=Table") && m.contains("g=meta.k8s.io"))
}

/// Kubernetes' human duration (`duration.HumanDuration`), as in the Age column.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    let (mins, hours) = (secs / 60, secs / 3600);
    let days = hours / 24;
    if secs < 120 {
        format!("{secs}s")
    } else if mins < 10 {
        if secs % 60 == 0 {
            format!("{mins}m")
        } else {
            format!("{mins}m{}s", secs % 60)
        }
    } else if mins < 180 {
        format!("{mins}m")
    } else if hours < 8 {
        if mins % 60 == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{}m", mins % 60)
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        if hours % 24 == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{}h", hours % 24)
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        if days % 365 == 0 {
            format!("{}y", days / 365)
        } else {
            format!("{}y{}d", days / 365, days % 365)
        }
    } else {
        format!("{}y", days / 365)
    }
}

/// Evaluates the JSONPath subset `.a.b[0].c` (no filters or wildcards).
fn eval_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    let mut cur = obj;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (field, index) = match part.split_once('[') {
            Some((f, rest)) => (f, Some(rest.trim_end_matches(']').parse::<usize>().ok()?)),
            None => (part, None),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        if let Some(i) = index {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

fn age(ts: &str) -> Value {
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => json!(human_duration(jiff::Timestamp::now().as_second() - t.as_second())),
        Err(_) => json!("<unknown>"),
    }
}

fn cell(obj: &Value, col: &PrinterColumn) -> Value {
    match eval_path(obj, &col.json_path) {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(s)) if col.type_ == "date" => age(s),
        Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => v.clone(),
        Some(v) => json!(v.to_string()),
    }
}

fn columns(rt: &ResourceType) -> Vec<PrinterColumn> {
    let age = PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: "CreationTimestamp is a timestamp representing the server time when this object was created."
            .into(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    };
    let mut cols = rt.columns.clone();
    if rt.builtin != Builtin::Custom || cols.is_empty() {
        cols.push(age);
    }
    cols
}

/// The Table for these objects; `include_object` is `None`, `Metadata` (default) or `Object`.
pub fn table(rt: &ResourceType, objs: &[&Value], rv: u64, include_object: Option<&str>) -> Value {
    let cols = columns(rt);
    let mut defs = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace."
    })];
    defs.extend(cols.iter().map(|c| {
        json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
    }));
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut cells = vec![json!(crate::meta::meta_str(o, "name"))];
            cells.extend(cols.iter().map(|c| cell(o, c)));
            let object = match include_object {
                Some("None") => Value::Null,
                Some("Object") => crate::ops::served(o, rt).into_owned(),
                _ => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_kubernetes() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
    }

    #[test]
    fn json_path_subset() {
        let v = json!({"status": {"conditions": [{"type": "Ready"}]}});
        assert_eq!(eval_path(&v, ".status.conditions[0].type"), Some(&json!("Ready")));
        assert_eq!(eval_path(&v, ".spec.x"), None);
    }
}
