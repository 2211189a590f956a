//! The API server's syntax rules for the names the fake kubelet writes (node names, label keys
//! and values, resource names), checked up front so that bad configuration fails with a clear
//! message instead of a rejected write.

/// A DNS-1123 subdomain: at most 253 lowercase alphanumerics, `-` and `.`, alphanumeric at
/// both ends.
pub(crate) fn is_dns_subdomain(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 253
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` and `.`, alphanumeric at both
/// ends.
pub(crate) fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.is_empty()
        || (bytes.len() <= 63
            && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric())
}

/// A qualified name (label keys, resource names): an optional DNS subdomain prefix and `/`,
/// then a non-empty name with the syntax of a label value.
pub(crate) fn is_qualified_name(name: &str) -> bool {
    let (prefix, local) = match name.split_once('/') {
        Some((prefix, local)) => (Some(prefix), local),
        None => (None, name),
    };
    prefix.is_none_or(is_dns_subdomain) && !local.is_empty() && is_label_value(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_api_server_rules() {
        assert!(is_dns_subdomain("gpu-node.rack-1"));
        for bad in ["", "Node", "-n", "n-", "a_b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
        assert!(is_label_value("") && is_label_value("A100_80GB.v2"));
        assert!(!is_label_value("-x") && !is_label_value("a b") && !is_label_value(&"a".repeat(64)));
        assert!(is_qualified_name("nvidia.com/gpu") && is_qualified_name("cpu") && is_qualified_name("Pool"));
        for bad in ["", "/gpu", "Nvidia.com/gpu", "nvidia.com/", "a/b/c", "gpu type"] {
            assert!(!is_qualified_name(bad), "{bad:?}");
        }
    }
}
