//! A serde `Deserializer` over a parsed YAML value that words its errors for people
//! ("expected a string, found number 7", "must not be negative, found -1", "is required",
//! "unknown field `x`, expected one of ...; did you mean ...?") and says where they are: the
//! path of the faulty value, from the value being read. Scenario objects refuse unknown
//! fields and take an explicit `null` for an absent field.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use drover_api::ResourceList;
use serde::de::value::MapDeserializer;
use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, Error as _, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::tree::{describe, Tree, View};

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

/// A YAML value of either [`Tree`], read for serde. Enums and the API's own types are read
/// with [`foreign`].
#[derive(Clone, Copy)]
pub(super) struct De<T>(pub(super) T);

impl<'de, T: Tree<'de>> De<T> {
    fn wrong(self, expected: &str) -> Error {
        Error::custom(format!("expected {expected}, found {}", describe(self.0)))
    }

    fn mapping(self) -> Result<T::Entries, Error> {
        match self.0.untag().view() {
            View::Map(entries) => Ok(entries),
            _ => Err(self.wrong("a mapping")),
        }
    }

    fn whole<N: TryFrom<i128>>(self) -> Result<N, Error> {
        let whole = match self.0.view() {
            View::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
            _ => None,
        };
        let n = whole.ok_or_else(|| self.wrong("a whole number"))?;
        N::try_from(n).map_err(|_| match n < 0 && N::try_from(-1).is_err() {
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

impl<'de, T: Tree<'de>> Deserializer<'de> for De<T> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.any(visitor).map_err(Error::custom)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.untag().view() {
            View::Bool(b) => visitor.visit_bool(b),
            _ => Err(self.wrong("true or false")),
        }
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
        match self.0.view() {
            View::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, Error> {
        match name {
            QUANTITIES => visitor.visit_newtype_struct(MapDeserializer::new(amounts(self.0)?.into_iter())),
            FOREIGN => self.0.newtype(visitor).map_err(|e| {
                let message = e.to_string();
                let unknown = message.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next());
                match unknown.filter(|key| self.0.get(key).is_some()) {
                    Some(key) => Error::custom(&message).within(key.into()),
                    None => Error::custom(message),
                }
            }),
            _ => visitor.visit_newtype_struct(self),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.untag().view() {
            View::Seq(items) => visitor.visit_seq(Seq(items.enumerate())),
            _ => Err(self.wrong("a list")),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Map::<T> { entries: self.mapping()?, value: None, skip_null: false })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        for (key, _) in self.mapping()? {
            let Some(name) = key.as_str() else {
                return Err(Error::custom(format!("field names must be strings, found {}", describe(key))));
            };
            if !fields.contains(&name) {
                return Err(Error::custom(unknown_field(name, fields)).within(name.into()));
            }
        }
        visitor.visit_map(Map::<T> { entries: self.mapping()?, value: None, skip_null: true })
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i128 u8 u16 u128 f32 f64 char bytes byte_buf unit unit_struct tuple tuple_struct enum identifier ignored_any
    }
}

/// The entries of a list, each read at its index.
struct Seq<I>(std::iter::Enumerate<I>);

impl<'de, T: Tree<'de>, I: Iterator<Item = T>> SeqAccess<'de> for Seq<I> {
    type Error = Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Error> {
        let Some((index, value)) = self.0.next() else {
            return Ok(None);
        };
        seed.deserialize(De(value)).map(Some).map_err(|e| e.within(index.into()))
    }
}

/// The entries of a mapping, each value read at its key; `skip_null` (for objects) leaves out
/// entries whose value is `null`, so that they count as absent.
struct Map<'v, T: Tree<'v>> {
    entries: T::Entries,
    value: Option<(&'v str, T)>,
    skip_null: bool,
}

impl<'de, T: Tree<'de>> MapAccess<'de> for Map<'de, T> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let skip_null = self.skip_null;
        let Some((key, value)) = self.entries.find(|(_, v)| !(skip_null && matches!(v.untag().view(), View::Null)))
        else {
            return Ok(None);
        };
        let Some(key) = key.as_str() else {
            return Err(Error::custom(format!("keys must be strings, found {}", describe(key))));
        };
        self.value = Some((key, value));
        let key: StrDeserializer<Error> = key.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let (key, value) = self.value.take().ok_or_else(|| Error::custom("a value without its key"))?;
        seed.deserialize(De(value)).map_err(|e| e.within(key.into()))
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
fn amounts<'v>(v: impl Tree<'v>) -> Result<Vec<(&'v str, i64)>, Error> {
    let mut amounts = Vec::new();
    for (key, quantity) in De(v).mapping()? {
        let Some(name) = key.as_str().filter(|k| !k.is_empty()) else {
            return Err(Error::custom(format!("resource names must be non-empty strings, found {}", describe(key))));
        };
        let text = match quantity.view() {
            View::Str(s) => Cow::Borrowed(s),
            View::Number(n) => Cow::Owned(n.to_string()),
            _ => {
                let message = format!("expected a quantity such as 2, 500m or 4Gi, found {}", describe(quantity));
                return Err(Error::custom(message).within(name.into()));
            }
        };
        let amount =
            ResourceList::parse_amount(name, &text).map_err(|e| Error::custom(e.to_string()).within(name.into()))?;
        amounts.push((name, amount));
    }
    Ok(amounts)
}
