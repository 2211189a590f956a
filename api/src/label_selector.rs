//! Kubernetes label selectors (`matchLabels` and `matchExpressions`), evaluated the way the
//! API server does, for the namespaces a Queue admits. A selector that Kubernetes would refuse
//! (an unknown operator, `In` without values, `Exists` with values, a key or value that is not
//! a valid label key or value) is an error, never a match: a mistyped fence must not open the
//! queue (`NotIn` or `DoesNotExist` on a key no namespace can carry would match them all).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects an object with `labels`; `Err` names what is malformed.
/// An empty selector selects everything, as in Kubernetes.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    validate(selector)?;
    let by_labels = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let listed = e.values.iter().flatten().any(|v| Some(v) == value);
        match e.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            "Exists" => value.is_some(),
            _ => value.is_none(), // DoesNotExist; other operators are refused by `validate`
        }
    });
    Ok(by_labels && by_expressions)
}

/// Checks `selector` as the API server checks a LabelSelector.
pub fn validate(selector: &LabelSelector) -> Result<(), String> {
    for (key, value) in selector.match_labels.iter().flatten() {
        if let Some(why) = key_error(key) {
            return Err(format!("matchLabels: invalid label key {key:?}: {why}"));
        }
        if let Some(why) = value_error(value) {
            return Err(format!("matchLabels[{key:?}]: invalid label value {value:?}: {why}"));
        }
    }
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        let values = e.values.as_ref().map_or(0, Vec::len);
        let at = format!("matchExpressions[{i}] (key {:?})", e.key);
        if e.key.is_empty() {
            return Err(format!("matchExpressions[{i}]: key must not be empty"));
        }
        if let Some(why) = key_error(&e.key) {
            return Err(format!("{at}: invalid label key: {why}"));
        }
        if let Some((v, why)) = e.values.iter().flatten().find_map(|v| Some((v, value_error(v)?))) {
            return Err(format!("{at}: invalid label value {v:?}: {why}"));
        }
        match e.operator.as_str() {
            "In" | "NotIn" if values == 0 => return Err(format!("{at}: operator {} needs values", e.operator)),
            "Exists" | "DoesNotExist" if values > 0 => {
                return Err(format!("{at}: operator {} takes no values", e.operator))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => return Err(format!("{at}: unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)")),
        }
    }
    Ok(())
}

/// Why `name` is not a label name (the part after an optional prefix), or a non-empty label
/// value: at most 63 characters of `[A-Za-z0-9_.-]`, beginning and ending alphanumeric.
fn name_error(name: &str) -> Option<&'static str> {
    let b = name.as_bytes();
    if b.len() > 63 {
        Some("must be at most 63 characters")
    } else if !b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')) {
        Some("may contain only letters, digits, '-', '_' and '.'")
    } else if !b.first().is_some_and(u8::is_ascii_alphanumeric) || !b.last().is_some_and(u8::is_ascii_alphanumeric) {
        Some("must begin and end with a letter or digit")
    } else {
        None
    }
}

/// Why `key` is not a label key: an optional DNS subdomain prefix and `/`, then a name.
fn key_error(key: &str) -> Option<&'static str> {
    let Some((prefix, name)) = key.split_once('/') else { return name_error(key) };
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    if prefix.len() > 253 || !prefix.split('.').all(label_ok) {
        return Some("the prefix must be a lowercase DNS subdomain of at most 253 characters");
    }
    name_error(name)
}

/// Why `value` is not a label value (the empty value is one).
fn value_error(value: &str) -> Option<&'static str> {
    if value.is_empty() {
        None
    } else {
        name_error(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions_must_all_hold() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("team", "vision")])),
            match_expressions: Some(vec![expression("tier", "NotIn", &["prod"]), expression("gpu", "Exists", &[])]),
        };
        assert_eq!(selects(&selector, &labels(&[("team", "vision"), ("gpu", "yes")])), Ok(true));
        assert_eq!(selects(&selector, &labels(&[("team", "vision"), ("gpu", "yes"), ("tier", "prod")])), Ok(false));
        assert_eq!(selects(&selector, &labels(&[("team", "nlp"), ("gpu", "yes")])), Ok(false));
        assert_eq!(selects(&selector, &labels(&[("team", "vision")])), Ok(false));
    }

    #[test]
    fn an_empty_selector_selects_everything() {
        assert_eq!(selects(&LabelSelector::default(), &labels(&[])), Ok(true));
    }

    #[test]
    fn in_and_does_not_exist() {
        let selector = LabelSelector {
            match_expressions: Some(vec![
                expression("team", "In", &["a", "b"]),
                expression("banned", "DoesNotExist", &[]),
            ]),
            ..LabelSelector::default()
        };
        assert_eq!(selects(&selector, &labels(&[("team", "b")])), Ok(true));
        assert_eq!(selects(&selector, &labels(&[("team", "c")])), Ok(false));
        assert_eq!(selects(&selector, &labels(&[("team", "a"), ("banned", "")])), Ok(false));
    }

    #[test]
    fn malformed_selectors_are_errors_not_matches() {
        for (e, want) in [
            (expression("team", "In", &[]), "needs values"),
            (expression("team", "Exists", &["x"]), "takes no values"),
            (expression("team", "Equals", &["x"]), "unknown operator"),
            (expression("", "Exists", &[]), "key must not be empty"),
        ] {
            let selector = LabelSelector { match_expressions: Some(vec![e]), ..LabelSelector::default() };
            let err = selects(&selector, &labels(&[("team", "x")])).expect_err("malformed");
            assert!(err.contains(want), "{err}");
        }
    }
}
