//! The values of the `drover-kubelet` flags, parsed and checked before anything reaches the
//! API server. Each parser returns a message saying what is wrong with the value; clap puts the
//! flag's name in front of it.

use std::collections::BTreeMap;

use crate::names::{is_dns_subdomain, is_label_value, is_qualified_name};
use crate::nodes::allocatable_amount;

/// Splits `key=value,key=value` (spaces around items allowed; empty = no pairs).
fn pairs(value: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in value.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        let Some((key, val)) = item.split_once('=') else {
            return Err(format!("expected key=value, got {item:?}"));
        };
        let (key, val) = (key.trim(), val.trim());
        if key.is_empty() {
            return Err(format!("empty key in {item:?}"));
        }
        if out.insert(key.to_owned(), val.to_owned()).is_some() {
            return Err(format!("{key} is given twice"));
        }
    }
    Ok(out)
}

/// `--node-allocatable`: `name=quantity,...`, e.g. `cpu=64,memory=512Gi,nvidia.com/gpu=8`.
pub fn parse_allocatable(value: &str) -> Result<BTreeMap<String, String>, String> {
    let resources = pairs(value)?;
    for (name, quantity) in &resources {
        allocatable_amount(name, quantity)?;
    }
    Ok(resources)
}

/// `--node-labels`: `key=value,...`, e.g. `pool=a100,example.com/rack=r1`.
pub fn parse_labels(value: &str) -> Result<BTreeMap<String, String>, String> {
    let labels = pairs(value)?;
    for (key, val) in &labels {
        if !is_qualified_name(key) {
            return Err(format!("{key:?} is not a valid label key ([prefix/]name, name at most 63 characters)"));
        }
        if !is_label_value(val) {
            return Err(format!(
                "{key}: {val:?} is not a valid label value (at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends)"
            ));
        }
    }
    Ok(labels)
}

/// `--name-prefix`: node names are `<prefix><index>`, so `<prefix>0` must be a valid node name.
pub fn parse_name_prefix(value: &str) -> Result<String, String> {
    if is_dns_subdomain(&format!("{value}0")) {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "node names such as {:?} would not be valid (lowercase letters, digits, '-' and '.', starting with a letter or digit)",
            format!("{value}0")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocatable_pairs_are_parsed_and_checked() {
        let parsed = parse_allocatable(" cpu=64, memory=512Gi ,nvidia.com/gpu=8").unwrap();
        assert_eq!(parsed["memory"], "512Gi");
        assert_eq!(parsed["nvidia.com/gpu"], "8");
        assert!(parse_allocatable("").unwrap().is_empty());
        for (bad, why) in [
            ("cpu", "expected key=value"),
            ("=4", "empty key"),
            ("cpu=1,cpu=2", "given twice"),
            ("cpu=lots", "not a Kubernetes quantity"),
            ("nvidia.com/gpu=1.5", "whole number"),
            ("memory=-1", "negative"),
        ] {
            let error = parse_allocatable(bad).unwrap_err();
            assert!(error.contains(why), "{bad:?}: {error}");
        }
    }

    #[test]
    fn labels_and_prefixes_must_be_valid_kubernetes_names() {
        let labels = parse_labels("pool=a100,example.com/rack=r1,empty=").unwrap();
        assert_eq!(labels.len(), 3);
        assert!(parse_labels("pool=two words").unwrap_err().contains("label value"));
        assert!(parse_labels("bad key=x").unwrap_err().contains("label key"));
        assert_eq!(parse_name_prefix("gpu-").unwrap(), "gpu-");
        assert!(parse_name_prefix("GPU_").unwrap_err().contains("\"GPU_0\""));
    }
}
