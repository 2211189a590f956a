//! Label and field selectors for list and watch, parsed as the real server parses them and
//! refused with 400 when malformed or (for fields) not supported for the resource.

use serde_json::Value;

use crate::error::ApiError;
use crate::meta::get_path;
use crate::registry::Builtin;

#[derive(Debug, Clone)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default)]
pub struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && k.matches('/').count() <= 1
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63 && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn bad(sel: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {why} (in label selector {sel:?})"))
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h,n>3`.
    pub fn parse(sel: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if sel.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for part in split_top_level(sel) {
            let part = part.trim();
            if part.is_empty() {
                return Err(bad(sel, "empty requirement"));
            }
            let (key, op) = if let Some(k) = part.strip_prefix('!') {
                (k.trim().to_string(), LabelOp::NotExists)
            } else if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), LabelOp::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==") {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once('=') {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once('>') {
                let n =
                    v.trim().parse().map_err(|_| bad(sel, "for 'Gt', 'Lt' operators, the value must be an integer"))?;
                (k.trim().to_string(), LabelOp::Gt(n))
            } else if let Some((k, v)) = part.split_once('<') {
                let n =
                    v.trim().parse().map_err(|_| bad(sel, "for 'Gt', 'Lt' operators, the value must be an integer"))?;
                (k.trim().to_string(), LabelOp::Lt(n))
            } else if let Some(open) = part.find('(') {
                let head: Vec<&str> = part[..open].split_whitespace().collect();
                let Some(inner) = part[open + 1..].strip_suffix(')') else {
                    return Err(bad(sel, "found '(' without a closing ')'"));
                };
                let values: Vec<String> =
                    inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
                if values.iter().any(|v| !valid_value(v)) {
                    return Err(bad(sel, "invalid label value"));
                }
                match head.as_slice() {
                    [k, "in"] => (k.to_string(), LabelOp::In(values)),
                    [k, "notin"] => (k.to_string(), LabelOp::NotIn(values)),
                    _ => return Err(bad(sel, "expected 'in' or 'notin'")),
                }
            } else {
                (part.to_string(), LabelOp::Exists)
            };
            if !valid_key(&key) {
                return Err(bad(sel, &format!("invalid label key {key:?}")));
            }
            if let LabelOp::Eq(v) | LabelOp::NotEq(v) = &op {
                if !valid_value(v) {
                    return Err(bad(sel, &format!("invalid label value {v:?}")));
                }
            }
            reqs.push((key, op));
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether the object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        self.reqs.iter().all(|(k, op)| {
            let v = labels.and_then(|l| l.get(k)).and_then(Value::as_str);
            match op {
                LabelOp::Eq(want) => v == Some(want.as_str()),
                LabelOp::NotEq(want) => v != Some(want.as_str()),
                LabelOp::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::NotIn(set) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
                LabelOp::Exists => v.is_some(),
                LabelOp::NotExists => v.is_none(),
                LabelOp::Gt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|x| x > *n),
                LabelOp::Lt(n) => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|x| x < *n),
            }
        })
    }
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// The field labels a resource supports besides `metadata.name` and `metadata.namespace`.
fn extra_fields(b: Builtin) -> &'static [&'static str] {
    match b {
        Builtin::Pod => &[
            "spec.nodeName",
            "spec.schedulerName",
            "spec.restartPolicy",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        Builtin::Node => &["spec.unschedulable"],
        Builtin::Namespace => &["status.phase"],
        Builtin::Event => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `f=v,f==v,f!=v`, refusing fields the resource does not support.
    pub fn parse(sel: &str, builtin: Builtin) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if sel.trim().is_empty() {
            return Ok(FieldSelector { reqs });
        }
        for part in sel.split(',') {
            let part = part.trim();
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{sel}'; can't understand '{part}'")));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" && !extra_fields(builtin).contains(&field) {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether the object satisfies every requirement (missing fields read as "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(field, eq, want)| {
            let got = match get_path(obj, field) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None if field == "spec.unschedulable" => "false".to_string(),
                Some(Value::Null) | None => String::new(),
                Some(Value::Object(o)) if field == "source" => {
                    o.get("component").and_then(Value::as_str).unwrap_or_default().to_string()
                }
                Some(v) => v.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

/// Both selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether the object matches both.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}
