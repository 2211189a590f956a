//! Custom resource validation, defaulting and pruning against a CRD version's
//! `openAPIV3Schema`, as the real API server does it for structural schemas, including CEL
//! `x-kubernetes-validations` rules.
//!
//! The server calls, for a create or an update of a custom resource:
//! 1. [`default_and_prune`] on the decoded object (unknown fields dropped, non-nullable nulls
//!    dropped, `default`s applied);
//! 2. [`validate`] with the old object on updates, turning `Err` into a 422 `Invalid` Status
//!    whose causes are the [`FieldError`]s (`field`, `reason` as the cause type, `message`).
//!
//! Messages follow the API server's (`k8s.io/apiextensions-apiserver` with the kube-openapi
//! validator and the CEL validator), e.g. `Required value`,
//! `Invalid value: -1: spec.replicas in body should be greater than or equal to 0`.
//! On updates, validation ratchets like Kubernetes 1.30+ (`CRDValidationRatcheting`): errors in
//! parts of the object that did not change are dropped, except those of transition rules.
//! See `docs/apiserver.md` (section "Validation") for what is and is not checked.

mod cel;
mod format;
mod prune;
mod schema;

use serde_json::Value;

/// One invalid field, as a cause of a 422 Invalid Status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `spec.tasks[0].replicas` (`<nil>` for the object itself, as the
    /// real server reports root-level CEL failures and `anyOf`/`oneOf`/`allOf`/`not` failures).
    pub field: String,
    /// The cause type: one of the constants in [`reason`].
    pub reason: String,
    /// The cause message, e.g. `Required value`.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The cause types (`metav1.CauseType`) a [`FieldError`] can carry.
pub mod reason {
    /// A required field is missing.
    pub const REQUIRED: &str = "FieldValueRequired";
    /// A value is invalid.
    pub const INVALID: &str = "FieldValueInvalid";
    /// A value is not one of the `enum` values.
    pub const NOT_SUPPORTED: &str = "FieldValueNotSupported";
    /// A value has the wrong JSON type.
    pub const TYPE_INVALID: &str = "FieldValueTypeInvalid";
    /// A CEL rule with `reason: FieldValueForbidden` failed.
    pub const FORBIDDEN: &str = "FieldValueForbidden";
    /// A string is longer than `maxLength`.
    pub const TOO_LONG: &str = "FieldValueTooLong";
    /// A list or object has more than `maxItems` / `maxProperties` entries.
    pub const TOO_MANY: &str = "FieldValueTooMany";
    /// A duplicate in a `set` or `map` list, or a CEL rule with `reason: FieldValueDuplicate`.
    pub const DUPLICATE: &str = "FieldValueDuplicate";
}

/// A CEL rule (or a `pattern`) that is not enforced, with where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UncheckedRule {
    /// The schema node carrying it, e.g. `spec.tasks[*]` (`<root>` for the root).
    pub path: String,
    /// The rule's text (for a pattern: `pattern: <regex>`).
    pub rule: String,
    /// Why it is not enforced.
    pub reason: String,
}

/// Validates `new` (the whole object) against `schema` (a CRD version's `openAPIV3Schema`).
///
/// At the root only the declared properties other than `apiVersion`, `kind` and `metadata` are
/// validated (the server validates those). `old` is the stored object on updates: transition
/// rules (those using `oldSelf`) run only then, and unchanged parts are ratcheted. Errors are
/// sorted by field path. Never panics, whatever the schema or the object.
pub fn validate(schema: &Value, new: &Value, old: Option<&Value>) -> Result<(), Vec<FieldError>> {
    let errors = schema::validate(schema, new, old);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Prunes unknown fields, prunes `null`s of non-nullable fields without a default, and
/// applies `default`s, recursively, as the API server does when it decodes a custom resource
/// (and when it reads one back from storage). `apiVersion`, `kind` and `metadata` at the root
/// (and in `x-kubernetes-embedded-resource` objects) are left alone.
pub fn default_and_prune(schema: &Value, obj: &mut Value) {
    prune::default_and_prune(schema, obj, None);
}

/// Like [`default_and_prune`], and returns the paths of the unknown fields it dropped (e.g.
/// `spec.foo`), in the order found, for `fieldValidation=Warn|Strict` (the real server's
/// warning is `unknown field "spec.foo"`).
pub fn default_and_prune_reporting(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    prune::default_and_prune(schema, obj, Some(&mut pruned));
    pruned
}

/// The CEL rules in `schema` that are not enforced because the evaluator cannot compile them
/// or does not support a function, variable or construct they use (each rule's text once, in
/// schema order). The server logs them; `docs/apiserver.md` lists what is unsupported.
pub fn unchecked_rules(schema: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for u in unchecked_rules_detailed(schema) {
        if u.rule.starts_with("pattern: ") {
            continue;
        }
        if !out.contains(&u.rule) {
            out.push(u.rule);
        }
    }
    out
}

/// Every CEL rule and `pattern` in `schema` that is not enforced, with its schema path and the
/// reason, for logging.
pub fn unchecked_rules_detailed(schema: &Value) -> Vec<UncheckedRule> {
    let mut out = Vec::new();
    schema::collect_unchecked(schema, "", true, &mut out);
    out
}

/// One segment of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Seg {
    /// A property (`.name`).
    Field(String),
    /// A list index (`[3]`).
    Index(usize),
    /// A key of an `additionalProperties` map: `.key` in OpenAPI errors, `[key]` in CEL errors.
    Key(String),
}

/// A field path, rendered both ways the API server renders paths.
#[derive(Debug, Clone, Default)]
struct Path(Vec<Seg>);

impl Path {
    fn child(&self, name: &str) -> Path {
        let mut p = self.0.clone();
        p.push(Seg::Field(name.to_string()));
        Path(p)
    }

    fn index(&self, i: usize) -> Path {
        let mut p = self.0.clone();
        p.push(Seg::Index(i));
        Path(p)
    }

    fn key(&self, k: &str) -> Path {
        let mut p = self.0.clone();
        p.push(Seg::Key(k.to_string()));
        Path(p)
    }

    /// As the OpenAPI validator names a field: `spec.tasks[0].resources.cpu`.
    fn openapi(&self) -> String {
        let mut s = String::new();
        for seg in &self.0 {
            match seg {
                Seg::Field(n) | Seg::Key(n) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(n);
                }
                Seg::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        s
    }

    /// As `field.Path` renders: `spec.tasks[0].resources[cpu]`, `<nil>` for the root.
    fn field_path(&self) -> String {
        if self.0.is_empty() {
            return "<nil>".to_string();
        }
        let mut s = String::new();
        for seg in &self.0 {
            match seg {
                Seg::Field(n) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(n);
                }
                Seg::Key(k) => s.push_str(&format!("[{k}]")),
                Seg::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        s
    }

    /// The key errors are sorted by: segments in order, list indices numerically.
    fn sort_key(&self) -> Vec<Seg> {
        self.0
            .iter()
            .map(|s| match s {
                Seg::Key(k) => Seg::Field(k.clone()),
                other => other.clone(),
            })
            .collect()
    }
}
