//! Renders values the way the Go API server prints them in field errors (`fmt` verbs `%v`
//! and `%q`, and `k8s.io/apimachinery/pkg/util/validation/field`'s error bodies).

use serde_json::Value;

/// Go's `strconv.Quote`: a double-quoted string with Go escapes; printable Unicode is kept.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` for a `float64`: the shortest representation, in exponent form (`1e+06`) when
/// the exponent is below -4 or at least 6.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` is the shortest round-tripping representation: "1.5e6", "-2e-7".
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{f}");
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{f}")
    }
}

/// A JSON number as Go prints the `int64` or `float64` it decodes to.
pub(crate) fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        if f.fract() == 0.0 && f.abs() < 9.2e18 {
            // The API server decodes whole numbers to int64.
            (f as i64).to_string()
        } else {
            go_float(f)
        }
    }
}

/// The bad value of a field error, as `field.Error.ErrorBody` prints it: strings quoted,
/// numbers and booleans bare, `null` for null, and composite values as JSON.
pub(crate) fn bad_value(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => go_quote(s),
        Value::Array(_) | Value::Object(_) => serde_json::to_string(v).unwrap_or_else(|_| "<unprintable>".to_string()),
    }
}

/// The name of a JSON value's type, as the OpenAPI validator reports it.
pub(crate) fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) => {
            if is_integer(n) {
                "integer"
            } else {
                "number"
            }
        }
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether a JSON number is whole (the API server decodes those to `int64`).
pub(crate) fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_float_matches_go_fmt_v() {
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(5.0), "5");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1_000_000.0), "1e+06");
        assert_eq!(go_float(1_234_567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-2.5), "-2.5");
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(go_quote("é"), "\"é\"");
        assert_eq!(go_quote("\u{1}"), r#""\x01""#);
    }

    #[test]
    fn bad_values() {
        assert_eq!(bad_value(&serde_json::json!(-1)), "-1");
        assert_eq!(bad_value(&serde_json::json!(1.0)), "1");
        assert_eq!(bad_value(&serde_json::json!(1.5)), "1.5");
        assert_eq!(bad_value(&serde_json::json!("x")), "\"x\"");
        assert_eq!(bad_value(&serde_json::json!(null)), "null");
        assert_eq!(bad_value(&serde_json::json!({"a": 1})), "{\"a\":1}");
    }
}
