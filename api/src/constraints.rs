//! Node constraints a pod carries: taints and tolerations, and required node affinity.
//! The semantics follow the Kubernetes core/v1 API.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New pods are not scheduled on the node.
    NoSchedule,
    /// The scheduler avoids the node; Drover treats it as a soft preference and ignores it.
    PreferNoSchedule,
    /// New pods are not scheduled and running ones are evicted by Kubernetes.
    NoExecute,
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    /// The taint key.
    pub key: String,
    /// The taint value (may be empty).
    #[serde(default)]
    pub value: String,
    /// The taint effect.
    pub effect: TaintEffect,
}

/// How a toleration compares its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Key and value must match.
    #[default]
    Equal,
    /// The key must match (any value); an empty key matches every taint.
    Exists,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toleration {
    /// The taint key to tolerate; empty with `Exists` tolerates everything.
    #[serde(default)]
    pub key: String,
    /// `Equal` (default) or `Exists`.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// The value to match with `Equal`.
    #[serde(default)]
    pub value: String,
    /// The effect to tolerate; absent tolerates every effect.
    #[serde(default)]
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Whether this toleration tolerates the taint.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect {
            if effect != taint.effect {
                return false;
            }
        }
        match self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == taint.key,
            TolerationOperator::Equal => self.key == taint.key && self.value == taint.value,
        }
    }
}

/// Whether a set of tolerations lets a pod be scheduled on a node with these taints.
pub fn tolerates_all(tolerations: &[Toleration], taints: &[Taint]) -> Result<(), String> {
    for taint in taints {
        if taint.effect == TaintEffect::PreferNoSchedule {
            continue;
        }
        if !tolerations.iter().any(|t| t.tolerates(taint)) {
            return Err(taint.key.clone());
        }
    }
    Ok(())
}

/// A node-selector operator of required node affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NodeSelectorOperator {
    /// The label value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label value, as an integer, is greater than the single value.
    Gt,
    /// The label value, as an integer, is less than the single value.
    Lt,
}

/// One expression of a node selector term.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSelectorRequirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: NodeSelectorOperator,
    /// The values the operator uses.
    #[serde(default)]
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    /// Whether a node's labels satisfy the requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let as_int = |s: &str| s.parse::<i64>().ok();
        match self.operator {
            NodeSelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            NodeSelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            NodeSelectorOperator::Exists => value.is_some(),
            NodeSelectorOperator::DoesNotExist => value.is_none(),
            NodeSelectorOperator::Gt | NodeSelectorOperator::Lt => {
                let (Some(v), Some(bound)) =
                    (value.and_then(|v| as_int(v)), self.values.first().and_then(|b| as_int(b)))
                else {
                    return false;
                };
                if self.operator == NodeSelectorOperator::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }

    /// A description of what is wrong with the requirement, if anything.
    pub fn validate(&self) -> Result<(), String> {
        match self.operator {
            NodeSelectorOperator::In | NodeSelectorOperator::NotIn if self.values.is_empty() => {
                Err(format!("{:?} needs at least one value", self.operator))
            }
            NodeSelectorOperator::Exists | NodeSelectorOperator::DoesNotExist if !self.values.is_empty() => {
                Err(format!("{:?} takes no values", self.operator))
            }
            NodeSelectorOperator::Gt | NodeSelectorOperator::Lt
                if self.values.len() != 1 || self.values[0].parse::<i64>().is_err() =>
            {
                Err(format!("{:?} needs exactly one integer value", self.operator))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint { key: key.into(), value: value.into(), effect }
    }

    #[test]
    fn tolerations_match_like_kubernetes() {
        let t = taint("dedicated", "infer", TaintEffect::NoSchedule);
        let equal = Toleration { key: "dedicated".into(), value: "infer".into(), ..Default::default() };
        let wrong = Toleration { key: "dedicated".into(), value: "train".into(), ..Default::default() };
        let exists = Toleration { key: "dedicated".into(), operator: TolerationOperator::Exists, ..Default::default() };
        let all = Toleration { operator: TolerationOperator::Exists, ..Default::default() };
        let other_effect = Toleration { effect: Some(TaintEffect::NoExecute), ..exists.clone() };
        assert!(equal.tolerates(&t) && exists.tolerates(&t) && all.tolerates(&t));
        assert!(!wrong.tolerates(&t) && !other_effect.tolerates(&t));
        assert!(tolerates_all(&[], &[taint("soft", "", TaintEffect::PreferNoSchedule)]).is_ok());
        assert_eq!(tolerates_all(&[wrong], &[t]), Err("dedicated".to_string()));
    }

    #[test]
    fn node_selector_operators() {
        let labels: BTreeMap<String, String> =
            [("zone".to_string(), "a".to_string()), ("gen".to_string(), "5".to_string())].into();
        let req = |key: &str, operator, values: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|s| s.to_string()).collect(),
        };
        use NodeSelectorOperator::*;
        assert!(req("zone", In, &["a", "b"]).matches(&labels));
        assert!(!req("zone", NotIn, &["a"]).matches(&labels));
        assert!(req("rack", NotIn, &["a"]).matches(&labels));
        assert!(req("zone", Exists, &[]).matches(&labels));
        assert!(req("rack", DoesNotExist, &[]).matches(&labels));
        assert!(req("gen", Gt, &["4"]).matches(&labels));
        assert!(!req("gen", Lt, &["4"]).matches(&labels));
        assert!(!req("zone", Gt, &["4"]).matches(&labels));
        assert!(req("gen", Gt, &["x"]).validate().is_err());
        assert!(req("zone", In, &[]).validate().is_err());
    }
}
