//! Named resource amounts in the exact integer units the scheduler compares.
//!
//! `cpu` is counted in millicores (Kubernetes' `MilliValue`), every other resource in whole
//! units rounded up (Kubernetes' `Value`): bytes for memory and storage, a count for `pods`,
//! `nvidia.com/gpu` and other extended resources.

use std::collections::BTreeMap;

use crate::quantity::{Quantity, QuantityError};

/// The CPU resource name.
pub const CPU: &str = "cpu";
/// The memory resource name.
pub const MEMORY: &str = "memory";
/// The pod-count resource name; every pod requests one.
pub const PODS: &str = "pods";
/// The NVIDIA GPU extended resource name.
pub const GPU: &str = "nvidia.com/gpu";
/// The node label naming a node's pool.
pub const NODE_POOL_LABEL: &str = "drover.dev/node-pool";

/// How a resource's amounts are counted and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// Millicores, printed as `2` or `500m`.
    Milli,
    /// Bytes, printed with the coarsest exact binary (`Gi`) or decimal (`M`) suffix.
    Bytes,
    /// A plain count (pods, GPUs, extended resources).
    Count,
}

impl ResourceKind {
    /// The kind of a resource, from its name.
    pub fn of(name: &str) -> ResourceKind {
        if name == CPU {
            ResourceKind::Milli
        } else if name == MEMORY || name.ends_with("storage") || name.starts_with("hugepages-") {
            ResourceKind::Bytes
        } else {
            ResourceKind::Count
        }
    }

    /// Converts a quantity to this kind's integer unit, rounding up.
    pub fn amount(self, q: Quantity) -> Option<i64> {
        let v = match self {
            ResourceKind::Milli => q.milli_value(),
            ResourceKind::Bytes | ResourceKind::Count => q.value(),
        };
        i64::try_from(v).ok()
    }
}

/// Formats an amount of a named resource in Kubernetes canonical form.
pub fn format_amount(name: &str, amount: i64) -> String {
    match ResourceKind::of(name) {
        ResourceKind::Milli => {
            if amount % 1000 == 0 {
                (amount / 1000).to_string()
            } else {
                format!("{amount}m")
            }
        }
        ResourceKind::Bytes => format_bytes(amount),
        ResourceKind::Count => amount.to_string(),
    }
}

fn format_bytes(amount: i64) -> String {
    if amount == 0 {
        return "0".into();
    }
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
    let mut best: Option<(i64, &str)> = None;
    let mut v = amount;
    for suffix in BINARY {
        if v % 1024 != 0 {
            break;
        }
        v /= 1024;
        best = Some((v, suffix));
    }
    if best.is_none() {
        let mut v = amount;
        for suffix in DECIMAL {
            if v % 1000 != 0 {
                break;
            }
            v /= 1000;
            best = Some((v, suffix));
        }
    }
    match best {
        Some((v, suffix)) => format!("{v}{suffix}"),
        None => amount.to_string(),
    }
}

/// Formats an amount of a named resource for people, rounded to one decimal: memory and
/// storage in the largest binary unit it reaches (`320Gi`, `1.5Ti`), CPU in cores (`12`,
/// `2.5`) or millicores below one core (`500m`), counts as they are. Exact values are
/// [`format_amount`]'s.
pub fn human_amount(name: &str, amount: i64) -> String {
    let one_decimal = |value: f64, unit: &str| {
        let text = format!("{value:.1}");
        format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text))
    };
    match ResourceKind::of(name) {
        ResourceKind::Milli if amount != 0 && amount.abs() < 1000 => format!("{amount}m"),
        ResourceKind::Milli => one_decimal(amount as f64 / 1000.0, ""),
        ResourceKind::Bytes => {
            let units = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            let power = (0..units.len()).rev().find(|&p| amount.unsigned_abs() >= 1u64 << (10 * p)).unwrap_or(0);
            one_decimal(amount as f64 / (1u64 << (10 * power)) as f64, units[power])
        }
        ResourceKind::Count => amount.to_string(),
    }
}

/// A map of resource name to exact amount, as written in a spec (`{cpu: "2", memory: 4Gi}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceList(pub BTreeMap<String, i64>);

/// Why one entry of a resource list is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// The quantity does not parse.
    #[error("{0}")]
    Quantity(#[from] QuantityError),
    /// The quantity is negative.
    #[error("{0:?} is negative")]
    Negative(String),
    /// The quantity does not fit the resource's integer unit.
    #[error("{0:?} is too large for this resource")]
    TooLarge(String),
    /// An extended resource (GPUs and the like) must be a whole number.
    #[error("{0:?} is not a whole number; {1} must be requested in whole units")]
    Fractional(String, String),
}

impl ResourceList {
    /// Parses one `name: quantity` entry into this list's unit for that name.
    pub fn parse_amount(name: &str, text: &str) -> Result<i64, ResourceError> {
        let q = Quantity::parse(text)?;
        if q.is_negative() {
            return Err(ResourceError::Negative(text.to_string()));
        }
        let kind = ResourceKind::of(name);
        if kind == ResourceKind::Count && name != PODS && name.contains('/') && q.nanos() % 1_000_000_000 != 0 {
            return Err(ResourceError::Fractional(text.to_string(), name.to_string()));
        }
        kind.amount(q).ok_or_else(|| ResourceError::TooLarge(text.to_string()))
    }

    /// The amount of a resource, zero when absent.
    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Renders the list as canonical quantity strings, sorted by name.
    pub fn to_strings(&self) -> BTreeMap<String, String> {
        self.0.iter().map(|(k, v)| (k.clone(), format_amount(k, *v))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_amounts_are_rounded_into_the_unit_people_read() {
        let gi = 1i64 << 30;
        assert_eq!(human_amount(MEMORY, 320 * gi), "320Gi");
        assert_eq!(human_amount(MEMORY, 3 * gi / 2), "1.5Gi");
        assert_eq!(human_amount(MEMORY, 2048 * gi + 1), "2Ti");
        assert_eq!(human_amount(MEMORY, 1_000_000_000), "953.7Mi");
        assert_eq!(human_amount(MEMORY, 0), "0");
        assert_eq!(human_amount(CPU, 12_000), "12");
        assert_eq!(human_amount(CPU, 2_500), "2.5");
        assert_eq!(human_amount(CPU, 500), "500m");
        assert_eq!(human_amount(CPU, 0), "0");
        assert_eq!(human_amount(GPU, 16), "16");
    }

    #[test]
    fn cpu_counts_millicores_and_others_whole_units() {
        assert_eq!(ResourceList::parse_amount(CPU, "500m").unwrap(), 500);
        assert_eq!(ResourceList::parse_amount(CPU, "1.5").unwrap(), 1500);
        assert_eq!(ResourceList::parse_amount(MEMORY, "2Gi").unwrap(), 2 << 30);
        assert_eq!(ResourceList::parse_amount(MEMORY, "100M").unwrap(), 100_000_000);
        assert_eq!(ResourceList::parse_amount(MEMORY, "1.5").unwrap(), 2);
        assert_eq!(ResourceList::parse_amount(GPU, "8").unwrap(), 8);
        assert_eq!(ResourceList::parse_amount(PODS, "1e2").unwrap(), 100);
    }

    #[test]
    fn rejects_negative_and_fractional_extended_resources() {
        assert!(matches!(ResourceList::parse_amount(CPU, "-1"), Err(ResourceError::Negative(_))));
        assert!(matches!(ResourceList::parse_amount(GPU, "0.5"), Err(ResourceError::Fractional(..))));
        assert!(matches!(ResourceList::parse_amount(GPU, "lots"), Err(ResourceError::Quantity(_))));
    }

    #[test]
    fn prints_canonical_forms() {
        assert_eq!(format_amount(CPU, 500), "500m");
        assert_eq!(format_amount(CPU, 32000), "32");
        assert_eq!(format_amount(MEMORY, 256 << 30), "256Gi");
        assert_eq!(format_amount(MEMORY, 1536), "1536");
        assert_eq!(format_amount(MEMORY, 3 << 10), "3Ki");
        assert_eq!(format_amount(MEMORY, 100_000_000), "100M");
        assert_eq!(format_amount(MEMORY, 1001), "1001");
        assert_eq!(format_amount(GPU, 8), "8");
        assert_eq!(format_amount(MEMORY, 0), "0");
    }
}
