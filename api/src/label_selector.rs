//! Kubernetes label selectors (`matchLabels` and `matchExpressions`), evaluated the way the
//! API server does, for the namespaces a Queue admits. A selector that Kubernetes would refuse
//! (an unknown operator, `In` without values, `Exists` with values) is an error, never a
//! match: a mistyped fence must not open the queue.

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
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        let values = e.values.as_ref().map_or(0, Vec::len);
        let at = format!("matchExpressions[{i}] (key {:?})", e.key);
        if e.key.is_empty() {
            return Err(format!("matchExpressions[{i}]: key must not be empty"));
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
