//! Exact parsing of Kubernetes resource quantities.
//!
//! The quantity crates on crates.io parse the number through `f64` (losing exactness) or
//! reject valid suffixes such as `Ei`, so Drover parses the grammar of
//! `k8s.io/apimachinery/pkg/api/resource` itself: an optional sign, a decimal number, then
//! either a binary suffix (`Ki`..`Ei`), a decimal suffix (`n`, `u`, `m`, `k`, `M`..`E`) or a
//! decimal exponent (`e3`, `E-2`). The value is kept as an integer count of nano-units, which
//! is the finest precision Kubernetes keeps (finer values round up, as Kubernetes does).

use std::fmt;

/// A parsed quantity, exact to one nano-unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

/// Why a string is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string is empty.
    #[error("empty quantity")]
    Empty,
    /// The string does not follow the quantity grammar.
    #[error("{0:?} is not a Kubernetes quantity (examples: 500m, 1.5, 2Gi, 1e3, 100M)")]
    Syntax(String),
    /// The value is too large to represent.
    #[error("{0:?} is too large")]
    Overflow(String),
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;
const MAX_DIGITS: usize = 30;

impl Quantity {
    /// Parses a quantity string in any form Kubernetes accepts.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        if input.is_empty() {
            return Err(QuantityError::Empty);
        }
        let syntax = || QuantityError::Syntax(input.to_string());
        let overflow = || QuantityError::Overflow(input.to_string());
        let bytes = input.as_bytes();
        let mut pos = 0;
        let negative = match bytes[0] {
            b'-' => {
                pos = 1;
                true
            }
            b'+' => {
                pos = 1;
                false
            }
            _ => false,
        };
        let mut mantissa: i128 = 0;
        let mut frac_digits: i32 = 0;
        let mut digits = 0usize;
        let mut seen_point = false;
        let mut significant = 0usize;
        // Digits past MAX_DIGITS significant ones are worth less than a nano-unit of any
        // value in range: they are dropped, an integer one still scales the value, and a
        // nonzero one rounds the result up.
        let mut dropped_integer_digits: i32 = 0;
        let mut dropped_nonzero = false;
        while pos < bytes.len() {
            let c = bytes[pos];
            if c.is_ascii_digit() {
                digits += 1;
                if significant > 0 || c != b'0' {
                    significant += 1;
                }
                if significant > MAX_DIGITS {
                    dropped_nonzero |= c != b'0';
                    if !seen_point {
                        dropped_integer_digits = dropped_integer_digits.saturating_add(1);
                    }
                } else {
                    mantissa = mantissa * 10 + i128::from(c - b'0');
                    if seen_point {
                        frac_digits = frac_digits.saturating_add(1);
                    }
                }
            } else if c == b'.' && !seen_point {
                seen_point = true;
            } else {
                break;
            }
            pos += 1;
        }
        if digits == 0 {
            return Err(syntax());
        }
        let suffix = &input[pos..];
        let (exp10, binary_pow) = parse_suffix(suffix).ok_or_else(syntax)?;
        // value = mantissa * 10^(exp10 - frac_digits) * 1024^binary_pow, in nanos: * 10^9.
        let mut value = mantissa;
        for _ in 0..binary_pow {
            value = value.checked_mul(1024).ok_or_else(overflow)?;
        }
        let shift = (9 + exp10).saturating_add(dropped_integer_digits).saturating_sub(frac_digits);
        if shift >= 0 {
            // With dropped digits the value is at least 10^29 nano-units, out of range, so
            // they need no rounding here.
            for _ in 0..shift {
                value = value.checked_mul(10).ok_or_else(overflow)?;
            }
        } else {
            let divisor = 10i128.checked_pow(shift.unsigned_abs()).ok_or_else(overflow);
            value = match divisor {
                // Dropped nonzero digits make the exact value a little more than `value`.
                Ok(d) if dropped_nonzero => value / d + 1,
                Ok(d) => (value + d - 1) / d,
                // Dividing by more than 10^38 leaves at most one nano-unit.
                Err(_) => i128::from(value > 0 || dropped_nonzero),
            };
        }
        if value > NANOS_PER_UNIT * i128::from(i64::MAX) {
            return Err(overflow());
        }
        Ok(Quantity { nanos: if negative { -value } else { value } })
    }

    /// The exact value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// The value in thousandths, rounded up (Kubernetes' `MilliValue`).
    pub fn milli_value(self) -> i128 {
        div_ceil(self.nanos, 1_000_000)
    }

    /// The value in whole units, rounded up (Kubernetes' `Value`).
    pub fn value(self) -> i128 {
        div_ceil(self.nanos, NANOS_PER_UNIT)
    }

    /// True when the value is below zero.
    pub fn is_negative(self) -> bool {
        self.nanos < 0
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 {
        q + 1
    } else {
        q
    }
}

/// Returns (decimal exponent, power of 1024) for a suffix.
fn parse_suffix(suffix: &str) -> Option<(i32, u32)> {
    let decimal = |e: i32| Some((e, 0));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => Some((0, 1)),
        "Mi" => Some((0, 2)),
        "Gi" => Some((0, 3)),
        "Ti" => Some((0, 4)),
        "Pi" => Some((0, 5)),
        "Ei" => Some((0, 6)),
        _ => {
            let rest = suffix.strip_prefix('e').or_else(|| suffix.strip_prefix('E'))?;
            let (sign, digits) = match rest.as_bytes().first()? {
                b'-' => (-1, &rest[1..]),
                b'+' => (1, &rest[1..]),
                _ => (1, rest),
            };
            if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let exp: i32 = digits.parse().ok()?;
            decimal(sign * exp)
        }
    }
}

impl fmt::Display for Quantity {
    /// Prints the quantity in decimal form with the coarsest exact suffix (`1500m`, `2`, `10n`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n % NANOS_PER_UNIT == 0 {
            write!(f, "{}", n / NANOS_PER_UNIT)
        } else if n % 1_000_000 == 0 {
            write!(f, "{}m", n / 1_000_000)
        } else if n % 1_000 == 0 {
            write!(f, "{}u", n / 1_000)
        } else {
            write!(f, "{n}n")
        }
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(s: &str) -> i128 {
        Quantity::parse(s).unwrap().nanos()
    }

    #[test]
    fn parses_every_form_kubernetes_accepts() {
        let unit = NANOS_PER_UNIT;
        assert_eq!(nanos("500m"), unit / 2);
        assert_eq!(nanos("1.5"), unit * 3 / 2);
        assert_eq!(nanos(".5"), unit / 2);
        assert_eq!(nanos("1."), unit);
        assert_eq!(nanos("2Gi"), 2 * (1 << 30) * unit);
        assert_eq!(nanos("1e3"), 1000 * unit);
        assert_eq!(nanos("1E3"), 1000 * unit);
        assert_eq!(nanos("1e-3"), unit / 1000);
        assert_eq!(nanos("1e+2"), 100 * unit);
        assert_eq!(nanos("100M"), 100_000_000 * unit);
        assert_eq!(nanos("1k"), 1000 * unit);
        assert_eq!(nanos("1Ei"), (1i128 << 60) * unit);
        assert_eq!(nanos("1.5Ki"), 1536 * unit);
        assert_eq!(nanos("10n"), 10);
        assert_eq!(nanos("3u"), 3000);
        assert_eq!(nanos("+4"), 4 * unit);
        assert_eq!(nanos("-4"), -4 * unit);
        assert_eq!(nanos("0"), 0);
        assert_eq!(nanos("007"), 7 * unit);
    }

    #[test]
    fn rounds_below_a_nano_unit_up() {
        assert_eq!(nanos("1e-10"), 1);
        assert_eq!(nanos("0.0000000001"), 1);
        assert_eq!(nanos("1e-300"), 1);
    }

    #[test]
    fn milli_and_unit_values_round_up_like_kubernetes() {
        let q = Quantity::parse("1.0001").unwrap();
        assert_eq!(q.milli_value(), 1001);
        assert_eq!(q.value(), 2);
        assert_eq!(Quantity::parse("250m").unwrap().value(), 1);
        assert_eq!(Quantity::parse("-250m").unwrap().value(), 0);
    }

    #[test]
    fn rejects_malformed_input() {
        for bad in [
            "", "abc", "1 ", " 1", "1Gb", "1e", "1e1.5", "1..2", ".", "+", "1KI", "1ki", "1iK", "--1", "1e1234", "0x10",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn rejects_values_too_large_for_an_i64_of_units() {
        assert!(matches!(Quantity::parse("100Ei"), Err(QuantityError::Overflow(_))));
        assert!(matches!(Quantity::parse("1e30"), Err(QuantityError::Overflow(_))));
        assert!(Quantity::parse("9e18").is_ok());
    }

    #[test]
    fn displays_exactly() {
        for (input, shown) in
            [("1500m", "1500m"), ("1.5", "1500m"), ("2", "2"), ("10n", "10n"), ("1e3", "1000"), ("1Ki", "1024")]
        {
            assert_eq!(Quantity::parse(input).unwrap().to_string(), shown);
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_any_string(s in ".{0,40}") {
            let _ = Quantity::parse(&s);
        }

        #[test]
        fn display_round_trips(n in -1_000_000_000_000_000i128..1_000_000_000_000_000i128) {
            let q = Quantity { nanos: n };
            proptest::prop_assert_eq!(Quantity::parse(&q.to_string()).unwrap(), q);
        }
    }
}
