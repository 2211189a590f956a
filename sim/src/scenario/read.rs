//! The YAML toolkit scenario readers share: where an error is (the file, the object, the
//! field's path, and its line and column in the text) and readers that turn one YAML value
//! into a typed value or an error in those terms.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use drover_api::ResourceList;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor};
use serde_yaml::{Mapping, Value};

use super::ScenarioError;

// ---------------------------------------------------------------------------------------------
// Error context: the document, the object an error concerns and the path of its field.

/// One step of a path from the document root to a value.
#[derive(Debug, Clone)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// The text being parsed and the name errors give it.
pub(super) struct Doc<'a> {
    pub(super) text: &'a str,
    pub(super) file: &'a str,
}

impl Doc<'_> {
    /// An error about the file as a whole.
    pub(super) fn error(&self, message: impl fmt::Display) -> ScenarioError {
        ScenarioError {
            file: self.file.to_string(),
            object: String::new(),
            field: String::new(),
            message: message.to_string(),
        }
    }
}

/// The object errors are reported against: its label and where it sits in the document.
pub(super) struct Object<'a> {
    doc: &'a Doc<'a>,
    pub(super) label: String,
    root: Vec<Step>,
}

impl<'a> Object<'a> {
    pub(super) fn new(doc: &'a Doc<'a>, label: impl Into<String>, root: Vec<Step>) -> Object<'a> {
        Object { doc, label: label.into(), root }
    }

    pub(super) fn at(&'a self) -> At<'a> {
        At { object: self, path: Vec::new() }
    }
}

/// A field of an object, by its path relative to the object.
#[derive(Clone)]
pub(super) struct At<'a> {
    object: &'a Object<'a>,
    path: Vec<Step>,
}

impl<'a> At<'a> {
    pub(super) fn key(&self, key: &str) -> At<'a> {
        self.step(Step::Key(key.to_string()))
    }

    pub(super) fn index(&self, index: usize) -> At<'a> {
        self.step(Step::Index(index))
    }

    fn step(&self, step: Step) -> At<'a> {
        let mut path = self.path.clone();
        path.push(step);
        At { object: self.object, path }
    }

    pub(super) fn absolute(&self) -> Vec<Step> {
        self.object.root.iter().chain(&self.path).cloned().collect()
    }

    /// An error about this field, located in the text when possible.
    pub(super) fn error(&self, message: impl fmt::Display) -> ScenarioError {
        let mut message = message.to_string();
        if let Some((line, column)) = locate_nearest(self.object.doc.text, &self.absolute()) {
            let _ = write!(message, " (line {line}, column {column})");
        }
        ScenarioError {
            file: self.object.doc.file.to_string(),
            object: self.object.label.clone(),
            field: render(&self.path),
            message,
        }
    }
}

/// A field path as people write it: `tasks[0].requests.cpu`.
pub(super) fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// How a list entry is labelled in errors: `label(name)` when it has a usable name, else `fallback`.
pub(super) fn entry_label(v: &Value, fallback: String, label: impl FnOnce(&str) -> String) -> String {
    match v.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        Some(name) => label(name),
        None => fallback,
    }
}

/// The path of entry `index` of a top-level list.
pub(super) fn item(section: &str, index: usize) -> Vec<Step> {
    vec![Step::Key(section.to_string()), Step::Index(index)]
}

/// A short human-readable list of names, for "expected one of" hints.
pub(super) fn listing<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> String {
    const SHOWN: usize = 10;
    let names: Vec<S> = names.into_iter().collect();
    if names.is_empty() {
        return "(none)".into();
    }
    let mut out = names.iter().take(SHOWN).map(AsRef::as_ref).collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        let _ = write!(out, ", ... ({} in all)", names.len());
    }
    out
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

// ---------------------------------------------------------------------------------------------
// Field readers: each turns one YAML value into a typed value or an error naming the field.

/// The fields of one YAML mapping, checked against the names the object allows.
pub(super) struct Fields<'a> {
    pub(super) at: At<'a>,
    map: &'a Mapping,
}

impl<'a> Fields<'a> {
    pub(super) fn open(at: At<'a>, value: &'a Value, known: &[&str]) -> Result<Fields<'a>, ScenarioError> {
        let map = mapping(&at, value)?;
        for key in map.keys() {
            let name = key
                .as_str()
                .ok_or_else(|| at.error(format!("field names must be strings, found {}", describe(key))))?;
            if !known.contains(&name) {
                return Err(at.key(name).error(unknown_field(name, known)));
            }
        }
        Ok(Fields { at, map })
    }

    /// The value of a field; an explicit `null` counts as absent.
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn opt<T>(
        &self,
        key: &str,
        read: impl FnOnce(&At<'a>, &'a Value) -> Result<T, ScenarioError>,
    ) -> Result<Option<T>, ScenarioError> {
        self.get(key).map(|v| read(&self.at.key(key), v)).transpose()
    }

    pub(super) fn req<T>(
        &self,
        key: &str,
        read: impl FnOnce(&At<'a>, &'a Value) -> Result<T, ScenarioError>,
    ) -> Result<T, ScenarioError> {
        match self.get(key) {
            Some(v) => read(&self.at.key(key), v),
            None => Err(self.at.key(key).error("is required")),
        }
    }
}

fn unknown_field(name: &str, known: &[&str]) -> String {
    let expected: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
    let mut message = format!("unknown field `{name}`, expected one of {}", expected.join(", "));
    let closest = known.iter().map(|k| (edit_distance(name, k), k)).min();
    if let Some((_, suggestion)) = closest.filter(|(d, _)| *d <= 2 && *d < name.chars().count()) {
        let _ = write!(message, "; did you mean `{suggestion}`?");
    }
    message
}

/// Levenshtein distance, ignoring case, to suggest the field a typo meant.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

fn mapping<'v>(at: &At, v: &'v Value) -> Result<&'v Mapping, ScenarioError> {
    v.as_mapping().ok_or_else(|| at.error(format!("expected a mapping, found {}", describe(v))))
}

pub(super) fn list<'v, T>(
    at: &At,
    v: &'v Value,
    mut read: impl FnMut(&At, &'v Value) -> Result<T, ScenarioError>,
) -> Result<Vec<T>, ScenarioError> {
    let seq = v.as_sequence().ok_or_else(|| at.error(format!("expected a list, found {}", describe(v))))?;
    seq.iter().enumerate().map(|(i, v)| read(&at.index(i), v)).collect()
}

/// A mapping whose keys are names (of jobs, pods, queues, labels, ...).
pub(super) fn keyed<'v, T>(
    at: &At,
    v: &'v Value,
    mut read: impl FnMut(&At, &'v str, &'v Value) -> Result<T, ScenarioError>,
) -> Result<BTreeMap<String, T>, ScenarioError> {
    let mut out = BTreeMap::new();
    for (key, value) in mapping(at, v)? {
        let key = key.as_str().ok_or_else(|| at.error(format!("keys must be strings, found {}", describe(key))))?;
        out.insert(key.to_string(), read(&at.key(key), key, value)?);
    }
    Ok(out)
}

pub(super) fn string(at: &At, v: &Value) -> Result<String, ScenarioError> {
    v.as_str().map(str::to_string).ok_or_else(|| at.error(format!("expected a string, found {}", describe(v))))
}

/// An object name: a non-empty string without `/` (which separates namespaces in keys).
pub(super) fn name(at: &At, v: &Value) -> Result<String, ScenarioError> {
    let name = string(at, v)?;
    if name.is_empty() {
        return Err(at.error("must not be empty"));
    }
    if name.contains('/') {
        return Err(at.error(format!("{name:?} must not contain `/`")));
    }
    Ok(name)
}

pub(super) fn boolean(at: &At, v: &Value) -> Result<bool, ScenarioError> {
    v.as_bool().ok_or_else(|| at.error(format!("expected true or false, found {}", describe(v))))
}

pub(super) fn int<T: TryFrom<i128>>(at: &At, v: &Value) -> Result<T, ScenarioError> {
    let whole = match v {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    };
    let n = whole.ok_or_else(|| at.error(format!("expected a whole number, found {}", describe(v))))?;
    T::try_from(n).map_err(|_| {
        if n < 0 && T::try_from(-1).is_err() {
            at.error(format!("must not be negative, found {n}"))
        } else {
            at.error(format!("{n} is out of range"))
        }
    })
}

pub(super) fn resources(at: &At, v: &Value) -> Result<ResourceList, ScenarioError> {
    let mut list = ResourceList::default();
    for (key, quantity) in mapping(at, v)? {
        let name = key
            .as_str()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| at.error(format!("resource names must be non-empty strings, found {}", describe(key))))?;
        let at = at.key(name);
        let text = match quantity {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(at.error(format!("expected a quantity such as 2, 500m or 4Gi, found {}", describe(other))))
            }
        };
        let amount = ResourceList::parse_amount(name, &text).map_err(|e| at.error(e))?;
        list.0.insert(name.to_string(), amount);
    }
    Ok(list)
}

pub(super) fn string_map(at: &At, v: &Value) -> Result<BTreeMap<String, String>, ScenarioError> {
    keyed(at, v, |at, _, v| string(at, v))
}

/// A value of a type that has its own serde definition (taints, tolerations, config, ...).
pub(super) fn typed<T: DeserializeOwned>(at: &At, v: &Value) -> Result<T, ScenarioError> {
    T::deserialize(v).map_err(|e| {
        let message = e.to_string();
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
            .filter(|key| v.get(*key).is_some());
        match unknown {
            Some(key) => at.key(key).error(message.as_str()),
            None => at.error(message.as_str()),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Locations: serde_yaml keeps no positions in a `Value`, so the text is replayed along the
// path of the faulty field, failing on purpose there; serde_yaml then says where that was.

/// Marks the error the location probe raises on purpose when it reaches its target.
const PROBE_HIT: &str = "drover-scenario-location-probe";

/// The line and column of `path`, or of its closest ancestor present in the text.
fn locate_nearest(text: &str, path: &[Step]) -> Option<(usize, usize)> {
    (1..=path.len()).rev().find_map(|n| locate(text, &path[..n]))
}

fn locate(text: &str, path: &[Step]) -> Option<(usize, usize)> {
    let error = Probe(path).deserialize(serde_yaml::Deserializer::from_str(text)).err()?;
    let location = error.location().filter(|_| error.to_string().contains(PROBE_HIT))?;
    Some((location.line(), location.column()))
}

/// Follows a path through the YAML events and fails at its end (a key or a value).
struct Probe<'p>(&'p [Step]);

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { PROBE_HIT } else { "a mapping or a list" })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Step::Key(want), rest)) = self.0.split_first() else {
            return Err(de::Error::invalid_type(Unexpected::Map, &self));
        };
        while let Some(found) = map.next_key_seed(KeyProbe { want, last: rest.is_empty() })? {
            if found {
                return map.next_value_seed(Probe(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Step::Index(want), rest)) = self.0.split_first() else {
            return Err(de::Error::invalid_type(Unexpected::Seq, &self));
        };
        for _ in 0..*want {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Probe(rest)).map(|_| ())
    }
}

/// Reads one mapping key: whether it is the wanted one, failing on it when it ends the path.
struct KeyProbe<'p> {
    want: &'p str,
    last: bool,
}

impl<'de> DeserializeSeed<'de> for KeyProbe<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyProbe<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        match key == self.want {
            true if self.last => Err(E::custom(PROBE_HIT)),
            found => Ok(found),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(steps: &[&str]) -> Vec<Step> {
        steps.iter().map(|s| s.parse().map_or_else(|_| Step::Key(s.to_string()), Step::Index)).collect()
    }

    #[test]
    fn field_paths_render_like_code() {
        assert_eq!(render(&path(&["tasks", "2", "requests", "cpu"])), "tasks[2].requests.cpu");
        assert_eq!(render(&path(&["0", "name"])), "[0].name");
    }

    #[test]
    fn edit_distance_ignores_case() {
        assert_eq!(edit_distance("replica", "replicas"), 1);
        assert_eq!(edit_distance("overquotaweight", "overQuotaWeight"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn locate_finds_keys_and_entries_in_block_and_flow_style() {
        let text = "a:\n  - {b: 1, c: [x, y]}\n  - d: 2\n";
        assert_eq!(locate(text, &path(&["a", "0", "c"])), Some((2, 12)));
        assert_eq!(locate(text, &path(&["a", "0", "c", "1"])), Some((2, 19)));
        assert_eq!(locate(text, &path(&["a", "1", "d"])), Some((3, 5)));
        assert_eq!(locate(text, &path(&["a", "2"])), None);
        assert_eq!(locate(text, &path(&["a", "1", "zz"])), None);
        assert_eq!(locate_nearest(text, &path(&["a", "1", "zz"])), Some((3, 5)));
    }
}
