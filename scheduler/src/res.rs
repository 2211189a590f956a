//! Dense resource vectors: one `i64` per resource name interned in the snapshot.
//!
//! The hot path compares and adds small fixed-length vectors instead of maps of strings.

use std::ops::{Index, IndexMut};

/// Amounts of every resource the snapshot knows, indexed by resource id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Res(pub Vec<i64>);

/// Sentinel for "no limit" in limit vectors.
pub const UNLIMITED: i64 = i64::MAX;

impl Res {
    /// A vector of zeros for `n` resources.
    pub fn zero(n: usize) -> Res {
        Res(vec![0; n])
    }

    /// A vector with every entry set to `v`.
    pub fn filled(n: usize, v: i64) -> Res {
        Res(vec![v; n])
    }

    /// Adds `other` entry-wise (saturating, so limits of `UNLIMITED` stay unlimited).
    pub fn add(&mut self, other: &Res) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = a.saturating_add(*b);
        }
    }

    /// Subtracts `other` entry-wise.
    pub fn sub(&mut self, other: &Res) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = a.saturating_sub(*b);
        }
    }

    /// `self + other`.
    pub fn plus(&self, other: &Res) -> Res {
        let mut r = self.clone();
        r.add(other);
        r
    }

    /// `self - other`.
    pub fn minus(&self, other: &Res) -> Res {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// Adds `other * k` entry-wise (saturating), without building `other * k`.
    pub fn add_times(&mut self, other: &Res, k: i64) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = a.saturating_add(b.saturating_mul(k));
        }
    }

    /// `self * k`.
    pub fn times(&self, k: i64) -> Res {
        Res(self.0.iter().map(|a| a.saturating_mul(k)).collect())
    }

    /// The first resource where `self` exceeds `avail`, if any.
    pub fn first_exceeding(&self, avail: &Res) -> Option<usize> {
        self.0.iter().zip(&avail.0).position(|(a, b)| a > b)
    }

    /// Whether every entry of `self` is at most the matching entry of `avail`.
    pub fn fits_in(&self, avail: &Res) -> bool {
        self.0.iter().zip(&avail.0).all(|(a, b)| a <= b)
    }

    /// Raises each entry to at least the matching entry of `other`.
    pub fn max_with(&mut self, other: &Res) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = (*a).max(*b);
        }
    }

    /// Entry-wise maximum with zero.
    pub fn clamp_non_negative(&mut self) {
        for a in &mut self.0 {
            *a = (*a).max(0);
        }
    }

    /// Number of resources.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the vector has no resources at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Index<usize> for Res {
    type Output = i64;
    fn index(&self, i: usize) -> &i64 {
        &self.0[i]
    }
}

impl IndexMut<usize> for Res {
    fn index_mut(&mut self, i: usize) -> &mut i64 {
        &mut self.0[i]
    }
}
