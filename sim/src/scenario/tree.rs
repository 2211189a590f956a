//! A read YAML document as [`De`] and [`Doc`] see it: serde_yaml's `Value` (any YAML), or
//! the [`quick`] reader's [`Node`] (the plain subset scenario files are written in, read many
//! times faster). Both are read through [`Tree`], so a file means the same whichever read it.
//!
//! [`De`]: super::de::De
//! [`Doc`]: super::locate::Doc
//! [`quick`]: super::quick

use std::borrow::Cow;

use serde::de::Visitor;
use serde::Deserializer as _;
use serde_yaml::value::TaggedValue;
use serde_yaml::{Mapping, Number, Value};

/// A YAML value of the quick reader: serde_yaml's `Value` without what the subset leaves out
/// (floats, tags, keys other than strings), its strings borrowed from the text where they can be.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node<'t> {
    Null,
    Bool(bool),
    /// A whole number, as serde_yaml keeps it (`u64` from 0 up, `i64` below).
    Number(Number),
    Str(Cow<'t, str>),
    Seq(Vec<Node<'t>>),
    /// Entries in the text's order; every key is a [`Node::Str`], no two alike.
    Map(Vec<(Node<'t>, Node<'t>)>),
}

impl Node<'_> {
    /// The same value as serde_yaml's: what errors are located in, and what types with their
    /// own serde definition are read from.
    pub(super) fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::Str(s) => Value::String(s.to_string()),
            Node::Seq(items) => Value::Sequence(items.iter().map(Node::to_value).collect()),
            Node::Map(entries) => {
                let mut mapping = Mapping::with_capacity(entries.len());
                for (key, value) in entries {
                    mapping.insert(key.to_value(), value.to_value());
                }
                Value::Mapping(mapping)
            }
        }
    }
}

/// What a YAML value is, for reading it the same way from either tree.
pub(super) enum View<'v, T: Tree<'v>> {
    Null,
    Bool(bool),
    Number(&'v Number),
    Str(&'v str),
    Seq(T::Items),
    Map(T::Entries),
    Tagged(&'v TaggedValue),
}

/// A YAML value of either tree.
pub(super) trait Tree<'v>: Copy {
    /// The entries of a list.
    type Items: Iterator<Item = Self>;
    /// The keys and values of a mapping, in the text's order.
    type Entries: Iterator<Item = (Self, Self)>;

    /// What the value is; a tagged value is [`View::Tagged`].
    fn view(self) -> View<'v, Self>;

    /// The value a tagged value tags (the value itself when untagged), which serde_yaml's
    /// `as_str`, `as_mapping`, `get` and the like look through to.
    fn untag(self) -> Self;

    /// Reads the value with `visitor` as serde_yaml reads a `Value` (for types that have their
    /// own serde definition, whose errors are kept as serde_yaml words them).
    fn any<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, serde_yaml::Error>;

    /// Reads the value with `visitor` as serde_yaml reads a newtype struct holding it.
    fn newtype<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, serde_yaml::Error>;

    /// The value of the mapping's entry `key` (an untagged string), as `Value::get` finds it.
    fn get(self, key: &str) -> Option<Self> {
        match self.untag().view() {
            View::Map(mut entries) => {
                entries.find(|(k, _)| matches!(k.view(), View::Str(s) if s == key)).map(|(_, v)| v)
            }
            _ => None,
        }
    }

    /// The string the value is, if it is one, as `Value::as_str` finds it.
    fn as_str(self) -> Option<&'v str> {
        match self.untag().view() {
            View::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl<'v> Tree<'v> for &'v Value {
    type Items = std::slice::Iter<'v, Value>;
    type Entries = serde_yaml::mapping::Iter<'v>;

    fn view(self) -> View<'v, Self> {
        match self {
            Value::Null => View::Null,
            Value::Bool(b) => View::Bool(*b),
            Value::Number(n) => View::Number(n),
            Value::String(s) => View::Str(s),
            Value::Sequence(items) => View::Seq(items.iter()),
            Value::Mapping(entries) => View::Map(entries.iter()),
            Value::Tagged(t) => View::Tagged(t),
        }
    }

    fn untag(self) -> Self {
        let mut value = self;
        while let Value::Tagged(t) = value {
            value = &t.value;
        }
        value
    }

    fn any<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, serde_yaml::Error> {
        self.deserialize_any(visitor)
    }

    fn newtype<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, serde_yaml::Error> {
        visitor.visit_newtype_struct(self)
    }
}

/// A mapping entry of a [`Node`] as a pair of references.
type EntryRef<'v, 't> = fn(&'v (Node<'t>, Node<'t>)) -> (&'v Node<'t>, &'v Node<'t>);

impl<'v, 't> Tree<'v> for &'v Node<'t> {
    type Items = std::slice::Iter<'v, Node<'t>>;
    type Entries = std::iter::Map<std::slice::Iter<'v, (Node<'t>, Node<'t>)>, EntryRef<'v, 't>>;

    fn view(self) -> View<'v, Self> {
        match self {
            Node::Null => View::Null,
            Node::Bool(b) => View::Bool(*b),
            Node::Number(n) => View::Number(n),
            Node::Str(s) => View::Str(s),
            Node::Seq(items) => View::Seq(items.iter()),
            Node::Map(entries) => View::Map(entries.iter().map((|(k, v)| (k, v)) as EntryRef<'v, 't>)),
        }
    }

    fn untag(self) -> Self {
        self
    }

    fn any<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, serde_yaml::Error> {
        self.to_value().deserialize_any(visitor)
    }

    fn newtype<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, serde_yaml::Error> {
        visitor.visit_newtype_struct(self.to_value())
    }
}

/// A value as errors describe it: `number 7`, `string "x"`, `a list`.
pub(super) fn describe<'v>(v: impl Tree<'v>) -> String {
    match v.view() {
        View::Null => "null".into(),
        View::Bool(b) => format!("boolean {b}"),
        View::Number(n) => format!("number {n}"),
        View::Str(s) => format!("string {s:?}"),
        View::Seq(_) => "a list".into(),
        View::Map(_) => "a mapping".into(),
        View::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

/// The string keys of the mapping at `path` from `root`, in the text's order.
pub(super) fn keys_at<'v>(root: impl Tree<'v>, path: &[&str]) -> Vec<&'v str> {
    let found = path.iter().try_fold(root, |v, key| v.get(key));
    match found.map(|v| v.untag().view()) {
        Some(View::Map(entries)) => entries.filter_map(|(k, _)| k.as_str()).collect(),
        _ => Vec::new(),
    }
}
