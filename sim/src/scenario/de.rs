//! A serde `Deserializer` over a parsed YAML value that words its errors for people
//! ("expected a string, found number 7", "must not be negative, found -1", "is required",
//! "unknown field `x`, expected one of ...; did you mean ...?") and says where they are: the
//! path of the faulty value, from the value being read. Scenario objects refuse unknown
//! fields and take an explicit `null` for an absent field.

use std::fmt::{self, Write as _};

use drover_api::ResourceList;
use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, Error as _, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_yaml::{Mapping, Value};

/// One step of a path from the document root to a value.
#[derive(Debug, Clone)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

impl From<&str> for Step {
    fn from(key: &str) -> Step {
        Step::Key(key.to_string())
    }
}

impl From<usize> for Step {
    fn from(index: usize) -> Step {
        Step::Index(index)
    }
}

/// What is wrong with a value, and the path to it from the value being read.
#[derive(Debug)]
pub(super) struct Error {
    pub(super) path: Vec<Step>,
    pub(super) message: String,
}

impl Error {
    fn within(mut self, step: Step) -> Error {
        self.path.insert(0, step);
        self
    }
}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Error {
        Error { path: Vec::new(), message: message.to_string() }
    }

    fn missing_field(field: &'static str) -> Error {
        Error::custom("is required").within(field.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The serde name of [`Foreign`], which [`De`] recognizes.
const FOREIGN: &str = "drover-scenario-foreign";

/// A value of a type that has its own serde definition (taints, tolerations, enums, config):
/// serde_yaml reads it, and its errors are kept as serde words them.
#[derive(Deserialize)]
#[serde(rename = "drover-scenario-foreign")]
struct Foreign<T>(T);

/// Reads a [`Foreign`] value (for `deserialize_with`).
pub(super) fn foreign<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Foreign::deserialize(d).map(|f| f.0)
}

/// Reads a list of [`Foreign`] values, each located on its own.
pub(super) fn foreign_list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Vec::<Foreign<T>>::deserialize(d)?.into_iter().map(|f| f.0).collect())
}

/// A YAML value, read for serde. Enums and the API's own types are read with [`foreign`].
#[derive(Clone, Copy)]
pub(super) struct De<'v>(pub(super) &'v Value);

impl<'de> De<'de> {
    fn wrong(self, expected: &str) -> Error {
        Error::custom(format!("expected {expected}, found {}", describe(self.0)))
    }

    fn mapping(self) -> Result<&'de Mapping, Error> {
        self.0.as_mapping().ok_or_else(|| self.wrong("a mapping"))
    }

    fn whole<T: TryFrom<i128>>(self) -> Result<T, Error> {
        let whole = match self.0 {
            Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
            _ => None,
        };
        let n = whole.ok_or_else(|| self.wrong("a whole number"))?;
        T::try_from(n).map_err(|_| match n < 0 && T::try_from(-1).is_err() {
            true => Error::custom(format!("must not be negative, found {n}")),
            false => Error::custom(format!("{n} is out of range")),
        })
    }
}

macro_rules! whole_numbers {
    ($($method:ident => $visit:ident),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.$visit(self.whole()?)
        }
    )*};
}

impl<'de> Deserializer<'de> for De<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_any(visitor).map_err(Error::custom)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_bool(self.0.as_bool().ok_or_else(|| self.wrong("true or false"))?)
    }

    whole_numbers!(deserialize_i32 => visit_i32, deserialize_i64 => visit_i64, deserialize_u32 => visit_u32,
        deserialize_u64 => visit_u64);

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.0.as_str().ok_or_else(|| self.wrong("a string"))?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, Error> {
        match name {
            QUANTITIES => visitor.visit_newtype_struct(amounts(self.0)?).map_err(Error::custom),
            FOREIGN => visitor.visit_newtype_struct(self.0).map_err(|e| {
                let message = e.to_string();
                let unknown = message.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next());
                match unknown.filter(|key| self.0.get(*key).is_some()) {
                    Some(key) => Error::custom(&message).within(key.into()),
                    None => Error::custom(message),
                }
            }),
            _ => visitor.visit_newtype_struct(self),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let seq = self.0.as_sequence().ok_or_else(|| self.wrong("a list"))?;
        visitor.visit_seq(Seq(seq.iter().enumerate()))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Map { entries: self.mapping()?.iter(), value: None, skip_null: false })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let map = self.mapping()?;
        for key in map.keys() {
            let Some(name) = key.as_str() else {
                return Err(Error::custom(format!("field names must be strings, found {}", describe(key))));
            };
            if !fields.contains(&name) {
                return Err(Error::custom(unknown_field(name, fields)).within(name.into()));
            }
        }
        visitor.visit_map(Map { entries: map.iter(), value: None, skip_null: true })
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i128 u8 u16 u128 f32 f64 char bytes byte_buf unit unit_struct tuple tuple_struct enum identifier ignored_any
    }
}

/// The entries of a list, each read at its index.
struct Seq<'v>(std::iter::Enumerate<std::slice::Iter<'v, Value>>);

impl<'de> SeqAccess<'de> for Seq<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        let Some((index, value)) = self.0.next() else {
            return Ok(None);
        };
        seed.deserialize(De(value)).map(Some).map_err(|e| e.within(index.into()))
    }
}

/// The entries of a mapping, each value read at its key; `skip_null` (for objects) leaves out
/// entries whose value is `null`, so that they count as absent.
struct Map<'v> {
    entries: serde_yaml::mapping::Iter<'v>,
    value: Option<(&'v str, &'v Value)>,
    skip_null: bool,
}

impl<'de> MapAccess<'de> for Map<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let skip_null = self.skip_null;
        let Some((key, value)) = self.entries.find(|(_, v)| !(skip_null && v.is_null())) else {
            return Ok(None);
        };
        let Some(key) = key.as_str() else {
            return Err(Error::custom(format!("keys must be strings, found {}", describe(key))));
        };
        self.value = Some((key, value));
        let key: StrDeserializer<Error> = key.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let (key, value) = self.value.take().ok_or_else(|| Error::custom("a value without its key"))?;
        seed.deserialize(De(value)).map_err(|e| e.within(key.into()))
    }
}

/// A value as errors describe it: `number 7`, `string "x"`, `a list`.
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

// ---------------------------------------------------------------------------------------------
// Readers for `deserialize_with`: their errors are located at the value they read.

/// An object name: a non-empty string without `/` (which separates namespaces in keys), for
/// a `String` or an `Option` of one.
pub(super) fn name<'de, D: Deserializer<'de>, R: From<String>>(d: D) -> Result<R, D::Error> {
    let name = String::deserialize(d)?;
    if name.is_empty() {
        return Err(D::Error::custom("must not be empty"));
    }
    match name.contains('/') {
        true => Err(D::Error::custom(format!("{name:?} must not contain `/`"))),
        false => Ok(R::from(name)),
    }
}

/// Resource quantities by name (`{cpu: 500m, memory: 4Gi}`), for a `ResourceList` or an
/// `Option` of one.
pub(super) fn resources<'de, D: Deserializer<'de>, R: From<ResourceList>>(d: D) -> Result<R, D::Error> {
    Quantities::deserialize(d).map(|q| R::from(ResourceList(q.0)))
}

/// The serde name of [`Quantities`], which [`De`] reads with [`amounts`].
const QUANTITIES: &str = "drover-scenario-quantities";

/// Amounts by resource name, read from their quantities by [`amounts`].
#[derive(Deserialize)]
#[serde(rename = "drover-scenario-quantities")]
struct Quantities(std::collections::BTreeMap<String, i64>);

/// Each quantity of a mapping turned into its amount (quantities parse by resource name).
fn amounts(v: &Value) -> Result<Value, Error> {
    let mut amounts = Mapping::new();
    for (key, quantity) in De(v).mapping()? {
        let Some(name) = key.as_str().filter(|k| !k.is_empty()) else {
            return Err(Error::custom(format!("resource names must be non-empty strings, found {}", describe(key))));
        };
        let text = match quantity {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                let message = format!("expected a quantity such as 2, 500m or 4Gi, found {}", describe(other));
                return Err(Error::custom(message).within(name.into()));
            }
        };
        let amount =
            ResourceList::parse_amount(name, &text).map_err(|e| Error::custom(e.to_string()).within(name.into()))?;
        amounts.insert(name.into(), amount.into());
    }
    Ok(Value::Mapping(amounts))
}
