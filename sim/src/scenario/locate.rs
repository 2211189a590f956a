//! Where an error is: the file, the object (`node n1`, `job default/j1 task worker`), the
//! field's path inside it, and its line and column in the text.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor};
use serde_yaml::Value;

use super::de::Step;
use super::tree::{keys_at, Node};
use super::ScenarioError;

/// A path from the document root, written as its steps: `steps!["jobs", 0, "queue"]`.
macro_rules! steps {
    ($($step:expr),*) => { &[$($crate::scenario::de::Step::from($step)),*] };
}
pub(super) use steps;

/// The text being parsed, the name errors give it, and the YAML it holds.
pub(super) struct Doc<'a> {
    pub(super) text: &'a str,
    pub(super) file: &'a str,
    pub(super) root: Root<'a>,
}

/// A document as the reader that read it keeps it.
#[derive(Clone, Copy)]
pub(super) enum Root<'a> {
    /// Read by serde_yaml.
    Yaml(&'a Value),
    /// Read by the [`quick`](super::quick) reader.
    Quick(&'a Node<'a>),
}

impl<'a> Doc<'a> {
    /// The string keys of the mapping at `path`, in the text's order.
    pub(super) fn keys(&self, path: &[&str]) -> Vec<&'a str> {
        match self.root {
            Root::Yaml(value) => keys_at(value, path),
            Root::Quick(node) => keys_at(node, path),
        }
    }

    /// An error about the value at `path`, reported against the object it lies in.
    pub(super) fn error(&self, path: &[Step], message: impl fmt::Display) -> ScenarioError {
        self.error_in(path, path, message)
    }

    /// An error about the value at `path`, reported against the object `within` lies in (a
    /// job, for a duplicate in its list of tasks).
    pub(super) fn error_in(&self, within: &[Step], path: &[Step], message: impl fmt::Display) -> ScenarioError {
        let root = match self.root {
            Root::Yaml(value) => Cow::Borrowed(value),
            Root::Quick(node) => Cow::Owned(node.to_value()),
        };
        let (object, depth) = object(&root, within);
        let mut message = message.to_string();
        if let Some((line, column)) = locate(self.text, &root, path) {
            let _ = write!(message, " (line {line}, column {column})");
        }
        ScenarioError { file: self.file.to_string(), object, field: render(&path[depth..]), message }
    }
}

/// The object a path lies in, as errors name it, and the length of the object's own path: an
/// entry of `nodes`, `topologies`, `queues`, `priorityClasses` or `jobs` (by its name when it has a usable
/// one, else by its position), a job's task, `expect`, or else the scenario.
fn object(root: &Value, path: &[Step]) -> (String, usize) {
    fn text<'v>(v: Option<&'v Value>, key: &str) -> Option<&'v str> {
        v.and_then(|v| v.get(key)).and_then(Value::as_str)
    }
    let named = |entry: Option<&Value>, kind: String, position: String| match text(entry, "name") {
        Some(name) if !name.is_empty() => kind + name,
        _ => position,
    };
    let [Step::Key(section), Step::Index(index), rest @ ..] = path else {
        let expect = matches!(path.first(), Some(Step::Key(k)) if k == "expect");
        return if expect { ("expect".into(), 1) } else { ("scenario".into(), 0) };
    };
    let entry = root.get(section.as_str()).and_then(|list| list.get(index));
    let kind = match section.as_str() {
        "nodes" => "node ".to_string(),
        "topologies" => "topology ".into(),
        "queues" => "queue ".into(),
        "priorityClasses" => "priority class ".into(),
        "jobs" => format!("job {}/", text(entry, "namespace").unwrap_or("default")),
        _ => return ("scenario".into(), 0),
    };
    let object = named(entry, kind, format!("{section}[{index}]"));
    match rest {
        [Step::Key(tasks), Step::Index(t), ..] if tasks == "tasks" && section == "jobs" => {
            let task = entry.and_then(|v| v.get("tasks")).and_then(|list| list.get(t));
            (named(task, format!("{object} task "), format!("{object} tasks[{t}]")), 4)
        }
        _ => (object, 2),
    }
}

/// A field path as people write it: `tasks[0].requests.cpu`.
fn render(path: &[Step]) -> String {
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

// ---------------------------------------------------------------------------------------------
// Locations: serde_yaml keeps no positions in a `Value`, so the text is replayed along the
// path of the faulty field, failing on purpose there; serde_yaml then says where that was.

/// Marks the error the location probe raises on purpose when it reaches its target.
const PROBE_HIT: &str = "drover-scenario-location-probe";

/// The line and column of `path` (of its last key, or its last list entry), or of its closest
/// ancestor present in the text.
fn locate(text: &str, root: &Value, path: &[Step]) -> Option<(usize, usize)> {
    let mut value = root;
    let mut positions = Vec::new();
    for step in path {
        let entry = match step {
            Step::Key(key) => value.as_mapping().and_then(|m| {
                m.iter().enumerate().find(|(_, (k, _))| k.as_str() == Some(key)).map(|(i, (_, v))| (i, v))
            }),
            Step::Index(i) => value.as_sequence().and_then(|s| s.get(*i)).map(|v| (*i, v)),
        };
        let Some((position, next)) = entry else { break };
        positions.push(position);
        value = next;
    }
    let error = Probe(&positions).deserialize(serde_yaml::Deserializer::from_str(text)).err()?;
    let location = error.location().filter(|_| !positions.is_empty() && error.to_string().contains(PROBE_HIT))?;
    Some((location.line(), location.column()))
}

/// Follows a path of entry positions (in mappings and lists, as they are in the text) through
/// the YAML events and fails at its end: on the key of a mapping entry, on a list entry.
struct Probe<'p>(&'p [usize]);

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
        let Some((want, rest)) = self.0.split_first() else {
            return Err(de::Error::invalid_type(Unexpected::Map, &self));
        };
        for _ in 0..*want {
            map.next_entry::<IgnoredAny, IgnoredAny>()?;
        }
        if rest.is_empty() {
            return map.next_key_seed(Probe(rest)).map(|_| ());
        }
        map.next_key::<IgnoredAny>()?;
        map.next_value_seed(Probe(rest))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((want, rest)) = self.0.split_first() else {
            return Err(de::Error::invalid_type(Unexpected::Seq, &self));
        };
        for _ in 0..*want {
            seq.next_element::<IgnoredAny>()?;
        }
        seq.next_element_seed(Probe(rest)).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_finds_keys_and_entries_in_block_and_flow_style() {
        let text = "a:\n  - {b: 1, c: [x, y]}\n  - d: 2\n";
        let root: Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(locate(text, &root, steps!["a", 0, "c"]), Some((2, 12)));
        assert_eq!(locate(text, &root, steps!["a", 0, "c", 1]), Some((2, 19)));
        assert_eq!(locate(text, &root, steps!["a", 1, "d"]), Some((3, 5)));
        assert_eq!(locate(text, &root, steps!["a", 1, "zz"]), Some((3, 5)));
        assert_eq!(locate(text, &root, steps!["a", 2]), Some((1, 1)));
        assert_eq!(locate(text, &root, steps![]), None);
    }
}
