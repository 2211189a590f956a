//! Fair-share arithmetic: how a parent queue's share of one resource is divided among its
//! children. Exact integer math; remainders go to the largest fractional parts, ties to the
//! earlier child, so results are deterministic and never exceed the total.
//!
//! Each child first gets its guaranteed part, `min(deserved, demand)`. If those exceed what
//! the parent has (over-subscription), the parent's share is divided in proportion to
//! deserved quota instead. What is left is divided among children with unmet demand:
//! `maxMin` water-fills it by over-quota weight, never past a child's demand;
//! `demandProportional` divides it in proportion to weight x unmet demand (Determined's
//! fair-share scheduler). A child with weight 0 gets no part of the leftover.

use crate::config::FairShareMode;

/// One child's inputs for one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Guaranteed quota.
    pub deserved: i64,
    /// What the child's workloads request in total (already capped by its limit).
    pub demand: i64,
    /// Over-quota weight.
    pub weight: u32,
}

/// Time-based fair share's input to one division: how much past usage weighs, and each
/// child's past usage of the resource as a part of what the cluster could have given it over
/// the remembered time (0 to 1, in the claims' order).
#[derive(Debug, Clone, Copy)]
pub struct PastUsage<'a> {
    /// KAI's `kValue`.
    pub k_value: f64,
    /// Per child, its normalized past usage.
    pub usage: &'a [f64],
}

/// Divides `total` among `claims`; returns each child's fair share. With `past`, the part
/// left after guaranteed quotas goes by weights corrected for past usage ([`corrected`]).
pub fn divide(total: i64, claims: &[Claim], mode: FairShareMode, past: Option<PastUsage>) -> Vec<i64> {
    let total = total.max(0);
    let guaranteed: Vec<i64> = claims.iter().map(|c| c.deserved.min(c.demand).max(0)).collect();
    let sum: i128 = guaranteed.iter().map(|&g| i128::from(g)).sum();
    if sum > i128::from(total) {
        let weights: Vec<i128> = claims.iter().map(|c| i128::from(c.deserved.max(0))).collect();
        return water_fill(total, &weights, &guaranteed);
    }
    let left = total - sum as i64;
    let unmet: Vec<i64> = claims.iter().zip(&guaranteed).map(|(c, g)| (c.demand - g).max(0)).collect();
    let weights: Vec<i128> = match mode {
        FairShareMode::MaxMin => claims.iter().map(|c| i128::from(c.weight)).collect(),
        FairShareMode::DemandProportional => {
            claims.iter().zip(&unmet).map(|(c, u)| i128::from(c.weight) * i128::from(*u)).collect()
        }
    };
    let weights = match past {
        Some(past) => corrected(&weights, &unmet, past),
        None => weights,
    };
    let extra = water_fill(left, &weights, &unmet);
    guaranteed.iter().zip(extra).map(|(g, e)| g + e).collect()
}

/// KAI's time-aware portions: among the children that want more, each child's weight as a
/// part of theirs, `w`, becomes `max(w + k * (w - u), 0)` where `u` is its normalized past
/// usage: a child that used more than its part lately gets less of what is left, one that
/// used less gets more, and with no usage anywhere the split is the plain one. The portions
/// are fixed once per division (water-filling keeps their ratios among the children not yet
/// satisfied). When every portion would be 0, the plain weights stand.
fn corrected(weights: &[i128], unmet: &[i64], past: PastUsage) -> Vec<i128> {
    const SCALE: f64 = (1u64 << 40) as f64;
    let wants = |i: usize| weights[i] > 0 && unmet[i] > 0;
    let sum: f64 = (0..weights.len()).filter(|&i| wants(i)).map(|i| weights[i] as f64).sum();
    let portions: Vec<i128> = (0..weights.len())
        .map(|i| {
            if !wants(i) {
                return 0;
            }
            let w = weights[i] as f64 / sum;
            let u = past.usage.get(i).copied().unwrap_or(0.0);
            ((w + past.k_value * (w - u)).max(0.0) * SCALE).round() as i128
        })
        .collect();
    if portions.iter().all(|&p| p == 0) {
        weights.to_vec()
    } else {
        portions
    }
}

/// Distributes `total` in proportion to `weights`, never giving a child more than its cap;
/// what a capped child cannot take is redistributed among the others.
pub fn water_fill(total: i64, weights: &[i128], caps: &[i64]) -> Vec<i64> {
    let weights = &bounded(weights, total, caps);
    let mut out = vec![0i64; caps.len()];
    let mut remaining = i128::from(total.max(0));
    let mut active: Vec<usize> = (0..caps.len()).filter(|&i| weights[i] > 0 && caps[i] > 0).collect();
    while remaining > 0 && !active.is_empty() {
        let w: i128 = active.iter().map(|&i| weights[i]).sum();
        let (saturated, open): (Vec<usize>, Vec<usize>) =
            active.iter().partition(|&&i| i128::from(caps[i]) * w <= remaining * weights[i]);
        if !saturated.is_empty() {
            for i in saturated {
                remaining -= i128::from(caps[i]);
                out[i] = caps[i];
            }
            active = open;
            continue;
        }
        let mut given = 0i128;
        let mut remainders = Vec::with_capacity(active.len());
        for &i in &active {
            let share = remaining * weights[i] / w;
            out[i] = share as i64;
            given += share;
            remainders.push((remaining * weights[i] % w, i));
        }
        remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let left = (remaining - given) as usize;
        for &(_, i) in remainders.iter().take(left) {
            out[i] += 1;
        }
        break;
    }
    out
}

/// `weights`, scaled down (rounding up, so that no positive weight becomes 0) just enough
/// that `water_fill`'s products fit in an i128: a cap or the total times the sum of the
/// weights. Realistic weights come back unchanged; only those of absurd amounts (quotas or
/// demands near 2^63, which would otherwise overflow and hand out more than the total) lose
/// precision.
fn bounded(weights: &[i128], total: i64, caps: &[i64]) -> Vec<i128> {
    let largest = i128::from(caps.iter().copied().chain([total]).max().unwrap_or(0).max(1));
    let mut shift = 0;
    loop {
        let scaled: Vec<i128> = weights.iter().map(|&w| if w > 0 { ((w - 1) >> shift) + 1 } else { w }).collect();
        let sum = scaled.iter().filter(|&&w| w > 0).try_fold(0i128, |a, &w| a.checked_add(w));
        if sum.and_then(|s| s.checked_mul(largest)).is_some() {
            return scaled;
        }
        shift += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(deserved: i64, demand: i64, weight: u32) -> Claim {
        Claim { deserved, demand, weight }
    }

    #[test]
    fn determined_demand_proportional_example() {
        let split = divide(8, &[claim(0, 10, 1), claim(0, 30, 1)], FairShareMode::DemandProportional, None);
        assert_eq!(split, [2, 6]);
        let weighted = divide(8, &[claim(0, 10, 3), claim(0, 30, 1)], FairShareMode::DemandProportional, None);
        assert_eq!(weighted, [4, 4]);
    }

    #[test]
    fn runai_formula_example_quota_six_weight_three_of_six_with_twenty_unused() {
        let claims = [claim(14, 100, 2), claim(6, 100, 3), claim(0, 100, 1)];
        let split = divide(40, &claims, FairShareMode::MaxMin, None);
        assert_eq!(split[1], 16);
        assert_eq!(split.iter().sum::<i64>(), 40);
        assert_eq!(split, [21, 16, 3]);
    }

    #[test]
    fn max_min_never_exceeds_demand_and_redistributes() {
        let split = divide(10, &[claim(0, 2, 1), claim(0, 100, 1), claim(0, 100, 2)], FairShareMode::MaxMin, None);
        assert_eq!(split, [2, 3, 5]);
    }

    #[test]
    fn zero_weight_gets_only_its_guarantee() {
        let split = divide(10, &[claim(2, 50, 0), claim(0, 50, 1)], FairShareMode::MaxMin, None);
        assert_eq!(split, [2, 8]);
    }

    #[test]
    fn leftover_nobody_wants_stays_unassigned() {
        let split = divide(10, &[claim(4, 1, 1), claim(0, 3, 1)], FairShareMode::MaxMin, None);
        assert_eq!(split, [1, 3]);
    }

    #[test]
    fn over_subscribed_quotas_are_scaled_by_deserved() {
        let split = divide(8, &[claim(8, 8, 1), claim(8, 8, 1)], FairShareMode::MaxMin, None);
        assert_eq!(split, [4, 4]);
        let split = divide(9, &[claim(12, 12, 1), claim(6, 6, 1)], FairShareMode::MaxMin, None);
        assert_eq!(split, [6, 3]);
    }

    #[test]
    fn past_usage_moves_the_leftover_to_the_queue_that_used_less() {
        let claims = [claim(0, 16, 1), claim(0, 16, 1)];
        let split = |k_value: f64, usage: &[f64]| {
            divide(16, &claims, FairShareMode::MaxMin, Some(PastUsage { k_value, usage }))
        };
        assert_eq!(split(1.0, &[0.0, 0.0]), [8, 8], "no usage anywhere: the plain split");
        // Portions w + k(w - u): 0.5 + (0.5 - 0.5) = 0.5 against 0.5 + 0.5 = 1.0.
        assert_eq!(split(1.0, &[0.5, 0.0]), [5, 11]);
        assert_eq!(split(1.0, &[1.0, 0.0]), [0, 16], "a queue that used everything gets no leftover");
        assert_eq!(split(0.0, &[0.5, 0.0]), [8, 8], "kValue 0: usage weighs nothing");
        assert_eq!(split(1.0, &[3.0, 3.0]), [8, 8], "every portion 0: the plain split");
    }

    #[test]
    fn past_usage_leaves_guaranteed_quota_alone() {
        let claims = [claim(6, 16, 1), claim(2, 16, 1)];
        let split = divide(16, &claims, FairShareMode::MaxMin, Some(PastUsage { k_value: 1.0, usage: &[1.0, 0.0] }));
        assert_eq!(split, [6, 10], "the first keeps its deserved 6 and gets none of the 8 left");
    }

    proptest::proptest! {
        #[test]
        fn shares_never_exceed_total_or_demand(
            total in 0i64..1_000_000,
            raw in proptest::collection::vec((0i64..100_000, 0i64..100_000, 0u32..5), 1..8),
            proportional in proptest::bool::ANY,
        ) {
            let claims: Vec<Claim> = raw.iter().map(|&(d, m, w)| claim(d, m, w)).collect();
            let mode = if proportional { FairShareMode::DemandProportional } else { FairShareMode::MaxMin };
            let split = divide(total, &claims, mode, None);
            proptest::prop_assert!(split.iter().sum::<i64>() <= total);
            for (s, c) in split.iter().zip(&claims) {
                proptest::prop_assert!(*s >= 0 && *s <= c.demand);
            }
            let guaranteed: i64 = claims.iter().map(|c| c.deserved.min(c.demand)).sum();
            if guaranteed <= total {
                for (s, c) in split.iter().zip(&claims) {
                    proptest::prop_assert!(*s >= c.deserved.min(c.demand));
                }
            }
        }
    }
}
