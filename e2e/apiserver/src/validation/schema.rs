//! The OpenAPI v3 (structural schema) validator, driving the CEL rules at each node.

use super::cel::{self, Evaluator};
use super::format::{bad_value, go_float, go_quote, is_integer, json_type_name};
use super::{reason, FieldError, Path, Seg, UncheckedRule};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Root properties the server validates itself.
const ROOT_META: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Validates `new` against `schema`, returning the errors sorted by path.
pub(super) fn validate(schema: &Value, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let evaluator = Evaluator::new();
    let mut w = Walker { errors: Vec::new(), cel: Some(&evaluator) };
    w.node(schema, new, old, &Path::default(), false, true);
    let mut errors = w.errors;
    // Stable: errors at one path keep the order they were found in.
    errors.sort_by(|a, b| a.0.cmp(&b.0));
    errors.into_iter().map(|(_, e)| e).collect()
}

pub(super) struct Walker<'a> {
    errors: Vec<(Vec<Seg>, FieldError)>,
    cel: Option<&'a Evaluator>,
}

impl Walker<'_> {
    pub(super) fn push(&mut self, sort: &Path, field: String, reason: &str, message: String) {
        self.errors.push((sort.sort_key(), FieldError { field, reason: reason.to_string(), message }));
    }

    /// An error from the OpenAPI validator: named by its OpenAPI path.
    fn openapi(&mut self, path: &Path, reason: &str, message: String, ratchet: bool) {
        if !ratchet {
            self.push(path, path.openapi(), reason, message);
        }
    }

    /// `field.Invalid(path, value, detail)` from the OpenAPI validator.
    fn invalid(&mut self, path: &Path, value: &str, detail: String, ratchet: bool) {
        self.openapi(path, reason::INVALID, format!("Invalid value: {value}: {detail}"), ratchet);
    }

    /// Validates the value `v` (old value `old`, when correlatable) at `path` against the schema
    /// node `s`. `ratchet` drops the errors other than transition rules'.
    fn node(&mut self, s: &Value, v: &Value, old: Option<&Value>, path: &Path, ratchet: bool, root: bool) {
        let Some(so) = s.as_object() else {
            return;
        };
        let ratchet = ratchet || old.is_some_and(|o| o == v);
        let p = path.openapi();
        let types = schema_types(so);

        if v.is_null() {
            if !flag(so, "nullable") && !types.is_empty() {
                let t = types.join(",");
                self.openapi(
                    path,
                    reason::TYPE_INVALID,
                    format!("Invalid value: \"null\": {p} in body must be of type {t}: \"null\""),
                    ratchet,
                );
            }
            // CEL rules only see non-null values.
            return;
        }
        if !types.is_empty() && !types.iter().any(|t| type_matches(t, v)) {
            let actual = json_type_name(v);
            let t = types.join(",");
            self.openapi(
                path,
                reason::TYPE_INVALID,
                format!("Invalid value: \"{actual}\": {p} in body must be of type {t}: \"{actual}\""),
                ratchet,
            );
            return;
        }

        match v {
            Value::Object(m) => self.object(so, m, old, path, ratchet, root),
            Value::Array(a) => self.array(so, a, old, path, ratchet),
            Value::String(st) => self.string(so, st, path, ratchet),
            Value::Number(n) => self.number(so, n, path, ratchet),
            Value::Bool(_) | Value::Null => {}
        }

        if let Some(Value::Array(values)) = so.get("enum") {
            if !values.is_empty() && !values.iter().any(|e| json_eq(e, v)) {
                let supported: Vec<String> = values
                    .iter()
                    .map(|e| match e {
                        Value::String(s) => go_quote(s),
                        other => go_quote(&serde_json::to_string(other).unwrap_or_default()),
                    })
                    .collect();
                self.openapi(
                    path,
                    reason::NOT_SUPPORTED,
                    format!("Unsupported value: {}: supported values: {}", bad_value(v), supported.join(", ")),
                    ratchet,
                );
            }
        }

        self.composition(so, v, path, ratchet);

        if let (Some(Value::Array(rules)), Some(ev)) = (so.get("x-kubernetes-validations"), self.cel) {
            ev.eval_node(self, rules, s, v, old, path, ratchet, root);
        }
    }

    fn object(
        &mut self,
        so: &Map<String, Value>,
        m: &Map<String, Value>,
        old: Option<&Value>,
        path: &Path,
        ratchet: bool,
        root: bool,
    ) {
        let p = path.openapi();
        let embedded = flag(so, "x-kubernetes-embedded-resource");
        let skip = |k: &str| (root || embedded) && ROOT_META.contains(&k);
        if embedded {
            self.embedded_resource(m, path, ratchet);
        }
        let old_map = old.and_then(Value::as_object);
        let props = so.get("properties").and_then(Value::as_object);

        let count = m.len() as u64;
        if let Some(min) = uint(so, "minProperties") {
            if count < min {
                self.invalid(
                    path,
                    &count.to_string(),
                    format!("{p} in body should have at least {min} properties"),
                    ratchet,
                );
                return;
            }
        }
        if let Some(max) = uint(so, "maxProperties") {
            if count > max {
                self.openapi(path, reason::TOO_MANY, format!("Too many: {count}: {}", must_have_at_most(max)), ratchet);
                return;
            }
        }

        let additional = so.get("additionalProperties");
        for (k, val) in m {
            if skip(k) {
                continue;
            }
            let old_val = old_map.and_then(|o| o.get(k));
            if let Some(ps) = props.and_then(|props| props.get(k)) {
                self.node(ps, val, old_val, &path.child(k), ratchet, false);
                continue;
            }
            match additional {
                Some(Value::Bool(false)) => {
                    self.invalid(path, &go_quote(k), format!("{p}.{k} in body is a forbidden property"), ratchet)
                }
                Some(ap @ Value::Object(_)) => {
                    self.node(ap, val, old_val, &path.key(k), ratchet, false);
                }
                _ => {}
            }
        }

        if let Some(Value::Array(required)) = so.get("required") {
            for k in required.iter().filter_map(Value::as_str) {
                if !m.contains_key(k) && !skip(k) {
                    self.openapi(&path.child(k), reason::REQUIRED, "Required value".to_string(), ratchet);
                }
            }
        }
    }

    /// `x-kubernetes-embedded-resource`: `apiVersion` and `kind` must be non-empty strings.
    fn embedded_resource(&mut self, m: &Map<String, Value>, path: &Path, ratchet: bool) {
        for k in ["apiVersion", "kind"] {
            let child = path.child(k);
            let message = match m.get(k) {
                None => {
                    if !ratchet {
                        self.push_field(&child, reason::REQUIRED, "Required value: must not be empty");
                    }
                    continue;
                }
                Some(Value::String(s)) if s.is_empty() => "Invalid value: \"\": must not be empty".to_string(),
                Some(Value::String(_)) => continue,
                Some(other) => format!("Invalid value: {}: must be a string", bad_value(other)),
            };
            if !ratchet {
                self.push(&child, child.field_path(), reason::INVALID, message);
            }
        }
    }

    fn push_field(&mut self, path: &Path, reason: &str, message: &str) {
        self.push(path, path.field_path(), reason, message.to_string());
    }

    fn array(&mut self, so: &Map<String, Value>, a: &[Value], old: Option<&Value>, path: &Path, ratchet: bool) {
        let p = path.openapi();
        let list_type = so.get("x-kubernetes-list-type").and_then(Value::as_str);
        let map_keys: Vec<&str> = so
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|ks| ks.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let items = so.get("items");
        let old_list = old.and_then(Value::as_array);

        if let Some(items) = items {
            for (i, item) in a.iter().enumerate() {
                let old_item = old_list.and_then(|ol| match list_type {
                    Some("map") if !map_keys.is_empty() => {
                        let key = list_map_key(items, item, &map_keys)?;
                        ol.iter().find(|o| list_map_key(items, o, &map_keys).as_ref() == Some(&key))
                    }
                    Some("set") => ol.iter().find(|o| json_eq(o, item)),
                    _ => None,
                });
                self.node(items, item, old_item, &path.index(i), ratchet, false);
            }
        }

        let len = a.len() as u64;
        if let Some(min) = uint(so, "minItems") {
            if len < min {
                self.invalid(path, &len.to_string(), format!("{p} in body should have at least {min} items"), ratchet);
            }
        }
        if let Some(max) = uint(so, "maxItems") {
            if len > max {
                self.openapi(path, reason::TOO_MANY, format!("Too many: {len}: {}", must_have_at_most(max)), ratchet);
            }
        }
        if flag(so, "uniqueItems") && has_duplicates(a) {
            self.invalid(path, "\"\"", format!("{p} in body shouldn't contain duplicates"), ratchet);
        }

        match list_type {
            Some("set") => {
                for (i, item) in a.iter().enumerate() {
                    if a[..i].iter().any(|prev| json_eq(prev, item)) && !ratchet {
                        let child = path.index(i);
                        self.push(
                            &child,
                            child.field_path(),
                            reason::DUPLICATE,
                            format!("Duplicate value: {}", bad_value(item)),
                        );
                    }
                }
            }
            Some("map") if !map_keys.is_empty() => {
                let mut seen: Vec<Value> = Vec::new();
                for (i, item) in a.iter().enumerate() {
                    // An item missing a key without a default fails `required` instead.
                    let Some(key) = items.and_then(|it| list_map_key(it, item, &map_keys)) else {
                        continue;
                    };
                    if seen.iter().any(|s| json_eq(s, &key)) {
                        if !ratchet {
                            let child = path.index(i);
                            self.push(
                                &child,
                                child.field_path(),
                                reason::DUPLICATE,
                                format!("Duplicate value: {}", bad_value(&key)),
                            );
                        }
                    } else {
                        seen.push(key);
                    }
                }
            }
            _ => {}
        }
    }

    fn string(&mut self, so: &Map<String, Value>, st: &str, path: &Path, ratchet: bool) {
        let p = path.openapi();
        let chars = st.chars().count() as u64;
        if let Some(max) = uint(so, "maxLength") {
            if chars > max {
                let unit = if max == 1 { "byte" } else { "bytes" };
                self.openapi(path, reason::TOO_LONG, format!("Too long: may not be more than {max} {unit}"), ratchet);
            }
        }
        if let Some(min) = uint(so, "minLength") {
            if chars < min {
                self.invalid(path, &go_quote(st), format!("{p} in body should be at least {min} chars long"), ratchet);
            }
        }
        if let Some(pattern) = so.get("pattern").and_then(Value::as_str) {
            if let Some(re) = compiled_pattern(pattern) {
                if !re.is_match(st) {
                    self.invalid(path, &go_quote(st), format!("{p} in body should match '{pattern}'"), ratchet);
                }
            }
        }
    }

    fn number(&mut self, so: &Map<String, Value>, n: &serde_json::Number, path: &Path, ratchet: bool) {
        let p = path.openapi();
        let Some(f) = n.as_f64() else {
            return;
        };
        let int = is_integer(n);
        // The Go validator prints bounds as int64 for integer data, as float64 otherwise.
        let bound = |b: f64| {
            if int && b.is_finite() && b.abs() < 9.2e18 {
                (b.trunc() as i64).to_string()
            } else {
                go_float(b)
            }
        };
        let value = bad_value(&Value::Number(n.clone()));
        if let Some(min) = so.get("minimum").and_then(Value::as_f64) {
            let exclusive = flag(so, "exclusiveMinimum");
            if f < min || (exclusive && f == min) {
                let op = if exclusive { "greater than" } else { "greater than or equal to" };
                let detail = format!("{p} in body should be {op} {}", bound(min));
                self.invalid(path, &value, detail, ratchet);
            }
        }
        if let Some(max) = so.get("maximum").and_then(Value::as_f64) {
            let exclusive = flag(so, "exclusiveMaximum");
            if f > max || (exclusive && f == max) {
                let op = if exclusive { "less than" } else { "less than or equal to" };
                let detail = format!("{p} in body should be {op} {}", bound(max));
                self.invalid(path, &value, detail, ratchet);
            }
        }
        if let Some(m) = so.get("multipleOf").and_then(Value::as_f64) {
            if m > 0.0 {
                let q = f / m;
                if (q - q.round()).abs() > 1e-9 * q.abs().max(1.0) {
                    let detail = format!("{p} in body should be a multiple of {}", bound(m));
                    self.invalid(path, &value, detail, ratchet);
                }
            }
        }
    }

    /// `allOf`, `anyOf`, `oneOf` and `not`, as the kube-openapi validator reports them.
    fn composition(&mut self, so: &Map<String, Value>, v: &Value, path: &Path, ratchet: bool) {
        let quoted = go_quote(&path.openapi());
        let composite = |w: &mut Self, message: String| {
            if !ratchet {
                w.push(path, "<nil>".to_string(), reason::INVALID, format!("Invalid value: \"\": {message}"));
            }
        };
        let branches = |key: &str| -> Vec<Vec<(Vec<Seg>, FieldError)>> {
            match so.get(key) {
                Some(Value::Array(bs)) => bs.iter().map(|b| branch_errors(b, v, path)).collect(),
                _ => Vec::new(),
            }
        };

        let any = branches("anyOf");
        if !any.is_empty() && !any.iter().any(Vec::is_empty) {
            composite(self, format!("{quoted} must validate at least one schema (anyOf)"));
            if let Some(best) = any.into_iter().min_by_key(Vec::len) {
                self.extend(best, ratchet);
            }
        }

        let one = branches("oneOf");
        if !one.is_empty() {
            let valid = one.iter().filter(|e| e.is_empty()).count();
            if valid == 0 {
                composite(self, format!("{quoted} must validate one and only one schema (oneOf). Found none valid"));
                if let Some(best) = one.into_iter().min_by_key(Vec::len) {
                    self.extend(best, ratchet);
                }
            } else if valid > 1 {
                composite(
                    self,
                    format!("{quoted} must validate one and only one schema (oneOf). Found {valid} valid alternatives"),
                );
            }
        }

        let all = branches("allOf");
        if !all.is_empty() {
            let valid = all.iter().filter(|e| e.is_empty()).count();
            let total = all.len();
            for errs in all {
                self.extend(errs, ratchet);
            }
            if valid != total {
                let none = if valid == 0 { ". None validated" } else { "" };
                composite(self, format!("{quoted} must validate all the schemas (allOf){none}"));
            }
        }

        if let Some(not) = so.get("not") {
            if not.is_object() && branch_errors(not, v, path).is_empty() {
                composite(self, format!("{quoted} must not validate the schema (not)"));
            }
        }
    }

    fn extend(&mut self, errs: Vec<(Vec<Seg>, FieldError)>, ratchet: bool) {
        if !ratchet {
            self.errors.extend(errs);
        }
    }
}

/// The errors of validating `v` against a branch of `allOf`/`anyOf`/`oneOf`/`not` (without CEL).
fn branch_errors(branch: &Value, v: &Value, path: &Path) -> Vec<(Vec<Seg>, FieldError)> {
    let mut w = Walker { errors: Vec::new(), cel: None };
    w.node(branch, v, None, path, false, false);
    w.errors
}

fn must_have_at_most(max: u64) -> String {
    let unit = if max == 1 { "item" } else { "items" };
    format!("must have at most {max} {unit}")
}

/// The types a node accepts: its `type`, `integer` and `string` for
/// `x-kubernetes-int-or-string`, `object` for an embedded resource; none if unconstrained.
pub(super) fn schema_types(so: &Map<String, Value>) -> Vec<&str> {
    if flag(so, "x-kubernetes-int-or-string") {
        return vec!["integer", "string"];
    }
    match so.get("type") {
        Some(Value::String(t)) if !t.is_empty() => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if flag(so, "x-kubernetes-embedded-resource") => vec!["object"],
        _ => Vec::new(),
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match (t, v) {
        ("object", Value::Object(_)) => true,
        ("array", Value::Array(_)) => true,
        ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) => true,
        ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => is_integer(n),
        ("null", Value::Null) => true,
        // An unknown type name constrains nothing we can check.
        (other, _) => !matches!(other, "object" | "array" | "string" | "boolean" | "number" | "integer" | "null"),
    }
}

pub(super) fn flag(so: &Map<String, Value>, key: &str) -> bool {
    so.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn uint(so: &Map<String, Value>, key: &str) -> Option<u64> {
    let v = so.get(key)?;
    v.as_u64().or_else(|| v.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64))
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| json_eq(a, b)))
        }
        _ => a == b,
    }
}

fn has_duplicates(a: &[Value]) -> bool {
    a.iter().enumerate().any(|(i, x)| a[..i].iter().any(|y| json_eq(x, y)))
}

/// The key of a `map` list item: the values of the map keys (defaults when absent), as an
/// object; `None` if the item is not an object or a key is missing without a default.
fn list_map_key(items: &Value, item: &Value, keys: &[&str]) -> Option<Value> {
    let obj = item.as_object()?;
    let mut key = Map::new();
    for k in keys {
        let v = match obj.get(*k) {
            Some(v) => v.clone(),
            None => items.get("properties").and_then(|ps| ps.get(*k)).and_then(|ks| ks.get("default"))?.clone(),
        };
        key.insert((*k).to_string(), v);
    }
    Some(Value::Object(key))
}

type PatternCache = Mutex<HashMap<String, Option<Arc<regex::Regex>>>>;

/// A `pattern`, compiled once; `None` if the `regex` crate cannot compile it.
pub(super) fn compiled_pattern(pattern: &str) -> Option<Arc<regex::Regex>> {
    static CACHE: OnceLock<PatternCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(re) = cache.get(pattern) {
        return re.clone();
    }
    if cache.len() > 4096 {
        cache.clear();
    }
    let re = regex::RegexBuilder::new(pattern).size_limit(1 << 20).build().ok().map(Arc::new);
    cache.insert(pattern.to_string(), re.clone());
    re
}

/// Collects the rules and patterns of the schema node `s` (at `path`) and below that are not
/// enforced. `spine` is false inside `allOf`/`anyOf`/`oneOf`/`not`, where rules are not run.
pub(super) fn collect_unchecked(s: &Value, path: &str, spine: bool, out: &mut Vec<UncheckedRule>) {
    let Some(so) = s.as_object() else {
        return;
    };
    let shown = if path.is_empty() { "<root>" } else { path };
    if let Some(Value::Array(rules)) = so.get("x-kubernetes-validations") {
        for rule in rules {
            let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
            let why = if !spine {
                Some("rules inside allOf/anyOf/oneOf/not are not evaluated".to_string())
            } else {
                cel::unsupported_reason(rule, s)
            };
            if let Some(reason) = why {
                out.push(UncheckedRule { path: shown.to_string(), rule: text.to_string(), reason });
            }
        }
    }
    if let Some(pattern) = so.get("pattern").and_then(Value::as_str) {
        if compiled_pattern(pattern).is_none() {
            out.push(UncheckedRule {
                path: shown.to_string(),
                rule: format!("pattern: {pattern}"),
                reason: "the regex crate cannot compile this pattern".to_string(),
            });
        }
    }
    if let Some(Value::Object(props)) = so.get("properties") {
        for (k, ps) in props {
            let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            collect_unchecked(ps, &p, spine, out);
        }
    }
    if let Some(items) = so.get("items") {
        collect_unchecked(items, &format!("{path}[*]"), spine, out);
    }
    if let Some(ap @ Value::Object(_)) = so.get("additionalProperties") {
        collect_unchecked(ap, &format!("{path}[*]"), spine, out);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(bs)) = so.get(key) {
            for b in bs {
                collect_unchecked(b, path, false, out);
            }
        }
    }
    if let Some(not) = so.get("not") {
        collect_unchecked(not, path, false, out);
    }
}
