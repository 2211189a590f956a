//! Hostile input for the parsers every tenant- or admin-written value goes through:
//! `Quantity::parse`, `ResourceList::parse_amount` and `label_selector::{validate, selects}`.
//! Tenants write quantities into pods and PodGroups, admins into Queues and Nodes, and
//! selectors into Queues; whatever they write, these parsers must return a value or an
//! error (never panic), keep exact values exact, and never let a malformed selector open a
//! queue (issue 9, part 5).

use std::collections::BTreeMap;

use drover_api::label_selector::{selects, validate};
use drover_api::{format_amount, Quantity, QuantityError, ResourceError, ResourceKind, ResourceList};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use proptest::prelude::*;
use proptest::sample::select;

const NANOS: i128 = 1_000_000_000;

/// Values seen in the wild or chosen to break a naive parser.
const HOSTILE: &[&str] = &[
    "",
    " ",
    "-1",
    "-0",
    "+0",
    "1e400",
    "1e-400",
    "1e999",
    "1E+3",
    "99999999999999999999Ei",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "9223372036854775807Ki",
    "8Ei",
    "7.99999999999Ei",
    "1.5.3",
    "1..5",
    "NaN",
    "nan",
    "inf",
    "Infinity",
    "-Infinity",
    "0x10",
    "1_000",
    "1,5",
    "１２",
    "१२३",
    "٣",
    "1\u{0}",
    "\u{feff}1",
    "1\n",
    "\t1",
    "{\"cpu\": 1}",
    "[1, 2]",
    "null",
    "true",
    "🙂",
    "1🙂",
    "1Gb",
    "1KI",
    "1ki",
    "1e",
    "1e+",
    "e3",
    ".",
    "+",
    "-",
    "--1",
    "+-1",
    "1m1",
    "1Ki1",
    "0.000000000000000000000000000000000000000000001",
    "000000000000000000000000000000000000000000001",
    "123456789012345678901234567890123",
];

/// Any string: curated hostile values, long runs, arbitrary unicode.
fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(HOSTILE).prop_map(str::to_string),
        3 => ".{0,24}",
        2 => "[-+0-9.eEKMGTPinum]{0,16}",
        1 => any::<String>(),
        1 => ("[0-9]{1,3}", 20usize..400).prop_map(|(d, n)| d.repeat(n)),
        1 => (0usize..60, "[1-9]").prop_map(|(n, d)| format!("0.{}{d}", "0".repeat(n))),
    ]
}

const SUFFIXES: &[&str] = &["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// A string in the Kubernetes quantity grammar, with parts small enough that an i128
/// reference computation cannot overflow: (text, sign, integer digits, fraction digits,
/// suffix, exponent).
fn grammatical() -> impl Strategy<Value = (String, bool, String, String, &'static str, Option<i32>)> {
    (
        any::<bool>(),
        "[0-9]{0,7}",
        prop_oneof![Just(None), "[0-9]{0,9}".prop_map(Some)],
        select(SUFFIXES),
        prop_oneof![3 => Just(None), 1 => (-20i32..20).prop_map(Some)],
    )
        .prop_filter("needs a digit", |(_, int, frac, _, _)| {
            !int.is_empty() || frac.as_ref().is_some_and(|f| !f.is_empty())
        })
        .prop_map(|(negative, int, frac, suffix, exp)| {
            // An exponent replaces the suffix (the grammar allows one or the other).
            let suffix = if exp.is_some() { "" } else { suffix };
            let mut text = String::from(if negative { "-" } else { "" });
            text.push_str(&int);
            if let Some(f) = &frac {
                text.push('.');
                text.push_str(f);
            }
            text.push_str(suffix);
            if let Some(e) = exp {
                text.push_str(&format!("e{e}"));
            }
            (text, negative, int, frac.unwrap_or_default(), suffix, exp)
        })
}

/// The exact value in nanos of a grammatical quantity, rounded away from zero, or `None`
/// when it exceeds what Drover keeps (an i64 of units).
fn reference_nanos(negative: bool, int: &str, frac: &str, suffix: &str, exp: Option<i32>) -> Option<i128> {
    let digits: i128 = format!("0{int}{frac}").parse().expect("digits");
    let (pow10, pow1024) = match suffix {
        "" => (exp.unwrap_or(0), 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        binary => (0, ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].iter().position(|s| *s == binary).expect("suffix") + 1),
    };
    let mut num = digits.checked_mul(1024i128.checked_pow(pow1024 as u32)?)?;
    let scale = 9 + pow10 - frac.len() as i32;
    let magnitude = if scale >= 0 {
        num = num.checked_mul(10i128.checked_pow(scale as u32)?)?;
        num
    } else {
        let d = 10i128.pow(scale.unsigned_abs());
        num / d + i128::from(num % d != 0)
    };
    if magnitude > NANOS * i128::from(i64::MAX) {
        return None;
    }
    Some(if negative { -magnitude } else { magnitude })
}

fn ceil_div(a: i128, b: i128) -> i128 {
    a.div_euclid(b) + i128::from(a.rem_euclid(b) != 0)
}

// ---------------------------------------------------------------------------------------
// Named cases (each was, or guards against, a wrong answer)

#[test]
fn hostile_quantities_are_errors_of_the_right_kind() {
    use QuantityError::{Empty, Overflow, Syntax};
    let kind = |s: &str| match Quantity::parse(s) {
        Ok(_) => "ok",
        Err(Empty) => "empty",
        Err(Syntax(t)) => {
            assert_eq!(t, s, "the error quotes the input");
            "syntax"
        }
        Err(Overflow(t)) => {
            assert_eq!(t, s, "the error quotes the input");
            "overflow"
        }
    };
    for (input, want) in [
        ("", "empty"),
        ("NaN", "syntax"),
        ("1.5.3", "syntax"),
        ("1e4000", "syntax"),
        ("1e400", "overflow"),
        ("0x10", "syntax"),
        ("１２", "syntax"),
        ("{\"cpu\": 1}", "syntax"),
        ("99999999999999999999Ei", "overflow"),
        ("9223372036854775808", "overflow"),
        ("1e999", "overflow"),
        ("-1", "ok"),
        ("9223372036854775807", "ok"),
        ("7Ei", "ok"),
        ("8Ei", "overflow"),
    ] {
        assert_eq!(kind(input), want, "{input:?}");
    }
}

#[test]
fn digits_beyond_nano_precision_round_up_instead_of_overflowing() {
    // Kubernetes keeps these (rounding to nano-units); 31 or more significant digits must
    // not be called "too large" when the value is small.
    let one = "1.".to_string() + &"0".repeat(40);
    assert_eq!(Quantity::parse(&one).map(Quantity::nanos), Ok(NANOS));
    let just_above = "1.".to_string() + &"0".repeat(40) + "1";
    assert_eq!(Quantity::parse(&just_above).map(Quantity::nanos), Ok(NANOS + 1));
    let long_integer = "1".to_string() + &"0".repeat(34) + "e-30";
    assert_eq!(Quantity::parse(&long_integer).map(Quantity::nanos), Ok(10_000 * NANOS));
    assert_eq!(ResourceList::parse_amount("cpu", &one), Ok(1000));
    assert!(matches!(Quantity::parse(&("1".to_string() + &"0".repeat(40))), Err(QuantityError::Overflow(_))));
}

#[test]
fn parse_amount_names_why_an_entry_is_refused() {
    assert!(matches!(ResourceList::parse_amount("cpu", "-1"), Err(ResourceError::Negative(_))));
    assert!(matches!(ResourceList::parse_amount("nvidia.com/gpu", "0.5"), Err(ResourceError::Fractional(..))));
    assert!(matches!(ResourceList::parse_amount("cpu", "9223372036854775807"), Err(ResourceError::TooLarge(_))));
    assert_eq!(ResourceList::parse_amount("memory", "9223372036854775807"), Ok(i64::MAX));
    assert!(matches!(ResourceList::parse_amount("memory", "NaN"), Err(ResourceError::Quantity(_))));
    let err = ResourceList::parse_amount("nvidia.com/gpu", "1.5").unwrap_err().to_string();
    assert!(err.contains("1.5") && err.contains("nvidia.com/gpu"), "{err}");
}

fn requirement(key: &str, operator: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
    }
}

#[test]
fn selectors_kubernetes_refuses_never_match() {
    let anything: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
    for (e, why) in [
        (requirement("team", "In", Some(&[])), "needs values"),
        (requirement("team", "In", None), "needs values"),
        (requirement("team", "Exists", Some(&["a"])), "takes no values"),
        (requirement("team", "in", Some(&["a"])), "unknown operator"),
        (requirement("team", "", None), "unknown operator"),
        (requirement("", "DoesNotExist", None), "key must not be empty"),
        // Keys and values Kubernetes refuses: a NotIn or DoesNotExist on them would match
        // every namespace, opening the queue.
        (requirement("team name", "NotIn", Some(&["b"])), "invalid label key"),
        (requirement("Team.Example.com/x", "DoesNotExist", None), "invalid label key"),
        (requirement("a/b/c", "DoesNotExist", None), "invalid label key"),
        (requirement(&"k".repeat(64), "DoesNotExist", None), "invalid label key"),
        (requirement("team", "NotIn", Some(&["not a value"])), "invalid label value"),
        (requirement("team", "NotIn", Some(&[&"v".repeat(64)])), "invalid label value"),
    ] {
        let selector = LabelSelector { match_expressions: Some(vec![e.clone()]), ..LabelSelector::default() };
        let err = selects(&selector, &anything).expect_err(&format!("{e:?} is malformed"));
        assert!(err.contains(why), "{e:?}: {err}");
        assert!(err.contains("matchExpressions[0]"), "the error names the expression: {err}");
        assert_eq!(validate(&selector), Err(err));
    }
    let by_label = LabelSelector {
        match_labels: Some([("bad key".to_string(), "a".to_string())].into()),
        ..LabelSelector::default()
    };
    let err = validate(&by_label).expect_err("an invalid matchLabels key");
    assert!(err.contains("matchLabels") && err.contains("bad key"), "{err}");
    // Valid forms stay valid.
    for key in ["team", "scheduling.drover.dev/project", "kubernetes.io/metadata.name", "a_b.c-d", "A9"] {
        let selector = LabelSelector {
            match_expressions: Some(vec![requirement(key, "Exists", None)]),
            ..LabelSelector::default()
        };
        assert_eq!(validate(&selector), Ok(()), "{key}");
    }
    let empty_value = LabelSelector {
        match_expressions: Some(vec![requirement("team", "In", Some(&[""]))]),
        match_labels: Some([("tier".to_string(), String::new())].into()),
    };
    assert_eq!(validate(&empty_value), Ok(()), "the empty label value is valid");
}

// ---------------------------------------------------------------------------------------
// Properties

/// Label keys and values: valid ones (so selectors do match) and hostile ones.
fn label_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(vec!["team", "tier", "x", "scheduling.drover.dev/project", "a.b/c"]).prop_map(str::to_string),
        2 => select(vec!["a", "b", "prod", ""]).prop_map(str::to_string),
        2 => hostile_string(),
    ]
}

fn requirement_strategy() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        label_text(),
        prop_oneof![
            6 => select(vec!["In", "NotIn", "Exists", "DoesNotExist"]).prop_map(str::to_string),
            1 => select(vec!["in", "Gt", "Lt", "", "EXISTS", "Equals", "!="]).prop_map(str::to_string),
            1 => hostile_string(),
        ],
        prop_oneof![Just(None), prop::collection::vec(label_text(), 0..3).prop_map(Some)],
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement { key, operator, values })
}

fn selector_strategy() -> impl Strategy<Value = LabelSelector> {
    (
        prop_oneof![Just(None), prop::collection::btree_map(label_text(), label_text(), 0..3).prop_map(Some)],
        prop_oneof![Just(None), prop::collection::vec(requirement_strategy(), 0..4).prop_map(Some)],
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector { match_labels, match_expressions })
}

/// Kubernetes' rule for a label name part: at most 63 of `[A-Za-z0-9_.-]`, alphanumeric at
/// both ends.
fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn key_ok(key: &str) -> bool {
    match key.split_once('/') {
        None => name_part_ok(key),
        Some((prefix, name)) => {
            name_part_ok(name)
                && prefix.len() <= 253
                && prefix.split('.').all(|l| {
                    let b = l.as_bytes();
                    !b.is_empty()
                        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                        && b[0] != b'-'
                        && b[b.len() - 1] != b'-'
                })
        }
    }
}

fn value_ok(v: &str) -> bool {
    v.is_empty() || name_part_ok(v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn quantity_parse_never_panics_and_errors_quote_the_input(s in hostile_string()) {
        match Quantity::parse(&s) {
            Ok(q) => {
                // Whatever is accepted fits Drover's range and displays to something
                // that parses back to the same value.
                prop_assert!(q.nanos().abs() <= NANOS * i128::from(i64::MAX));
                prop_assert_eq!(Quantity::parse(&q.to_string()), Ok(q));
            }
            Err(QuantityError::Empty) => prop_assert!(s.is_empty()),
            Err(QuantityError::Syntax(t) | QuantityError::Overflow(t)) => prop_assert_eq!(t, s),
        }
    }

    #[test]
    fn grammatical_quantities_are_exact((text, negative, int, frac, suffix, exp) in grammatical()) {
        let want = reference_nanos(negative, &int, &frac, suffix, exp);
        let got = Quantity::parse(&text);
        match want {
            Some(nanos) => {
                let q = got.map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
                prop_assert_eq!(q.nanos(), nanos, "{:?}", text);
                prop_assert_eq!(q.milli_value(), ceil_div(nanos, 1_000_000), "{:?}", text);
                prop_assert_eq!(q.value(), ceil_div(nanos, NANOS), "{:?}", text);
                prop_assert_eq!(q.is_negative(), nanos < 0);
                // Display is canonical: printing a reparsed value gives the same text.
                let shown = q.to_string();
                prop_assert_eq!(Quantity::parse(&shown), Ok(q));
                prop_assert_eq!(Quantity::parse(&shown).map(|p| p.to_string()), Ok(shown));
            }
            None => prop_assert!(
                matches!(got, Err(QuantityError::Overflow(_))),
                "{:?} exceeds the range but gave {:?}", text, got
            ),
        }
    }

    #[test]
    fn large_exact_values_round_trip(n in -(NANOS * i128::from(i64::MAX))..=(NANOS * i128::from(i64::MAX))) {
        // Every representable value: build it from its nanos and print it.
        let text = format!("{n}n");
        let q = Quantity::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(q.nanos(), n);
        prop_assert_eq!(Quantity::parse(&q.to_string()), Ok(q));
    }

    #[test]
    fn parse_amount_never_panics_and_agrees_with_the_quantity(
        name in prop_oneof![
            select(vec!["cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage", "hugepages-2Mi", "example.com/fpga"])
                .prop_map(str::to_string),
            hostile_string(),
        ],
        text in prop_oneof![hostile_string(), grammatical().prop_map(|g| g.0)],
    ) {
        let result = ResourceList::parse_amount(&name, &text);
        let kind = ResourceKind::of(&name);
        match Quantity::parse(&text) {
            Err(e) => prop_assert_eq!(result, Err(ResourceError::Quantity(e))),
            Ok(q) if q.is_negative() => prop_assert_eq!(result, Err(ResourceError::Negative(text.clone()))),
            Ok(q) => {
                let unit = if kind == ResourceKind::Milli { q.milli_value() } else { q.value() };
                match result {
                    Ok(v) => {
                        prop_assert!(v >= 0);
                        let extended = kind == ResourceKind::Count && name != "pods" && name.contains('/');
                        prop_assert!(!extended || q.nanos() % NANOS == 0, "{:?} {:?} is fractional", name, text);
                        prop_assert_eq!(i128::from(v), unit);
                        // The canonical text of an amount reads back as the same amount.
                        let shown = format_amount(&name, v);
                        prop_assert_eq!(ResourceList::parse_amount(&name, &shown), Ok(v), "{}", shown);
                    }
                    Err(ResourceError::TooLarge(t)) => {
                        prop_assert_eq!(t, text);
                        prop_assert!(i64::try_from(unit).is_err());
                    }
                    Err(ResourceError::Fractional(t, n)) => {
                        prop_assert_eq!((t, n), (text, name.clone()));
                        prop_assert!(kind == ResourceKind::Count && name.contains('/'));
                        prop_assert!(q.nanos() % NANOS != 0);
                    }
                    Err(other) => prop_assert!(false, "{:?} {:?}: {:?}", name, text, other),
                }
            }
        }
    }

    #[test]
    fn selectors_are_valid_exactly_when_kubernetes_accepts_them_and_then_match_like_it(
        selector in selector_strategy(),
        labels in prop::collection::btree_map(label_text(), label_text(), 0..4),
    ) {
        let expressions = selector.match_expressions.clone().unwrap_or_default();
        let accepted = selector.match_labels.iter().flatten().all(|(k, v)| key_ok(k) && value_ok(v))
            && expressions.iter().all(|e| {
                let values = e.values.clone().unwrap_or_default();
                key_ok(&e.key)
                    && values.iter().all(|v| value_ok(v))
                    && match e.operator.as_str() {
                        "In" | "NotIn" => !values.is_empty(),
                        "Exists" | "DoesNotExist" => values.is_empty(),
                        _ => false,
                    }
            });
        let checked = validate(&selector);
        prop_assert_eq!(checked.is_ok(), accepted, "{:?}: {:?}", selector, checked);
        let result = selects(&selector, &labels);
        match (&checked, &result) {
            (Err(e), Err(f)) => {
                prop_assert_eq!(e, f);
                prop_assert!(e.contains("matchExpressions[") || e.contains("matchLabels"), "{}", e);
            }
            (Ok(()), Ok(matched)) => {
                let want = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v))
                    && expressions.iter().all(|e| {
                        let value = labels.get(&e.key);
                        let listed = value.is_some_and(|v| e.values.iter().flatten().any(|x| x == v));
                        match e.operator.as_str() {
                            "In" => listed,
                            "NotIn" => !listed,
                            "Exists" => value.is_some(),
                            _ => value.is_none(),
                        }
                    });
                prop_assert_eq!(*matched, want);
            }
            _ => prop_assert!(false, "validate {:?} but selects {:?}", checked, result),
        }
    }
}
