//! What an owner's spec says about its gang, and the checked reads of tenant-written
//! numbers that every kind's rule shares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::Value;

/// The largest count a rule accepts from a spec: more pods than any cluster runs in one gang.
/// A bigger number is refused (it could only make the gang unschedulable, or overflow a sum).
pub const MAX_COUNT: u64 = 100_000;

/// The gang an owner's spec asks for, before it is named and queued.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shape {
    /// Pods that must be placed together before any of them binds.
    pub min_member: u32,
    /// Per role (the pods' task label): how many of the minimum each role must have.
    pub min_task_member: BTreeMap<String, u32>,
    /// The pod's role, when the kind names roles.
    pub task: Option<String>,
    /// Which of the owner's gangs the pod is in, when an owner runs several (a
    /// LeaderWorkerSet's group index); part of the group's name.
    pub instance: Option<String>,
}

/// A refusal: the field of the owner's spec (a JSON path) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadField {
    /// Where in the owner, e.g. `spec.pytorchReplicaSpecs.Worker.replicas`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl BadField {
    /// A refusal of `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> BadField {
        BadField { field: field.into(), problem: problem.into() }
    }
}

/// The value at `path` (dot-separated keys) under `root`, if present and not null.
pub fn at<'v>(root: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(root, |v, key| v.get(key)).filter(|v| !v.is_null())
}

/// The count at `path` (relative to `root`, reported as `field_prefix.path`): absent means
/// `default`; anything but an integer in `0..=MAX_COUNT` is refused.
pub fn count(root: &Value, path: &str, default: u32, field_prefix: &str) -> Result<u32, BadField> {
    let field = if field_prefix.is_empty() { path.to_string() } else { format!("{field_prefix}.{path}") };
    match at(root, path) {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_COUNT => Ok(n as u32),
            _ => Err(BadField::new(field, format!("must be an integer from 0 to {MAX_COUNT}, not {v}"))),
        },
    }
}

/// Sums counts, refusing a total above [`MAX_COUNT`] (reported against `field`).
pub fn total<'a>(counts: impl IntoIterator<Item = &'a u32>, field: &str) -> Result<u32, BadField> {
    let sum: u64 = counts.into_iter().map(|&c| u64::from(c)).sum();
    if sum > MAX_COUNT {
        return Err(BadField::new(field, format!("asks for {sum} pods in one gang, more than {MAX_COUNT}")));
    }
    Ok(sum as u32)
}

/// A task name from a role name: lower case, as a label value allows (roles are written
/// `Master`, `Worker`… in specs and `master`, `worker`… in the operators' pod labels).
pub fn task_name(role: &str) -> String {
    role.to_ascii_lowercase()
}

/// The value of the pod's label `key`, if set and not empty.
pub fn pod_label<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.labels().get(key).map(String::as_str).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_count_is_an_integer_within_bounds_or_a_refusal_naming_its_field() {
        let spec = json!({"a": {"replicas": 3}, "b": {"replicas": -1}, "c": {"replicas": "4"}, "d": {"replicas": 1e9}});
        assert_eq!(count(&spec, "a.replicas", 1, "spec"), Ok(3));
        assert_eq!(count(&spec, "z.replicas", 1, "spec"), Ok(1));
        for bad in ["b", "c", "d"] {
            let err = count(&spec, &format!("{bad}.replicas"), 1, "spec").unwrap_err();
            assert_eq!(err.field, format!("spec.{bad}.replicas"));
        }
        assert!(total(&[MAX_COUNT as u32, 1], "spec").is_err(), "a sum above the bound is refused");
    }
}
