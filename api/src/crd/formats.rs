//! Integer formats the Kubernetes API server understands. schemars names Rust's integer types
//! with formats such as `uint32`, which the API server does not know: it warns on every apply
//! and enforces nothing. This pass drops such formats and states the type's range with
//! `minimum` and `maximum` instead, so the server refuses what the Rust types could not read.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// The integer formats the API server recognizes.
const KNOWN_INTEGER_FORMATS: [&str; 2] = ["int32", "int64"];

/// Replaces, in every schema of `crd`, each integer format the API server does not know by the
/// range it stands for (keeping a narrower `minimum` or `maximum` the schema already has).
pub(crate) fn replace_unknown_integer_formats(crd: &mut CustomResourceDefinition) {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            walk(schema, &mut replace);
        }
    }
}

fn replace(schema: &mut JSONSchemaProps) {
    if schema.type_.as_deref() != Some("integer") {
        return;
    }
    let Some(format) = schema.format.take_if(|f| !KNOWN_INTEGER_FORMATS.contains(&f.as_str())) else {
        return;
    };
    let (min, max) = range(&format);
    if let Some(min) = min {
        schema.minimum = Some(schema.minimum.map_or(min, |m| m.max(min)));
    }
    if let Some(max) = max {
        schema.maximum = Some(schema.maximum.map_or(max, |m| m.min(max)));
    }
}

/// The range of the Rust integer type schemars names `format` (`uint32`, `int16`, `uint` for
/// `usize`, ...). Bounds that the API server's 64-bit integers already imply, or that a
/// float cannot state exactly, are left out; an unknown name gives none.
fn range(format: &str) -> (Option<f64>, Option<f64>) {
    let (unsigned, rest) = match format.strip_prefix('u') {
        Some(rest) => (true, rest),
        None => (false, format),
    };
    let bits = match rest.strip_prefix("int") {
        Some("") => 64,
        Some(digits) => digits.parse::<u32>().unwrap_or(0),
        None => 0,
    };
    let exact = (1..=32).contains(&bits);
    match (unsigned, exact) {
        (true, true) => (Some(0.0), Some(2f64.powi(bits as i32) - 1.0)),
        (true, false) if bits > 0 => (Some(0.0), None),
        (false, true) => (Some(-(2f64.powi(bits as i32 - 1))), Some(2f64.powi(bits as i32 - 1) - 1.0)),
        _ => (None, None),
    }
}

/// Calls `visit` on `schema` and every schema nested in it.
fn walk(schema: &mut JSONSchemaProps, visit: &mut impl FnMut(&mut JSONSchemaProps)) {
    visit(schema);
    let mut children: Vec<&mut JSONSchemaProps> = Vec::new();
    children.extend(schema.properties.iter_mut().flat_map(|p| p.values_mut()));
    match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => children.push(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => children.extend(items.iter_mut()),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &mut schema.additional_properties {
        children.push(values);
    }
    children.extend(schema.all_of.iter_mut().chain(&mut schema.any_of).chain(&mut schema.one_of).flatten());
    children.extend(schema.not.as_deref_mut());
    for child in children {
        walk(child, visit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Formats the API server recognizes (it warns `unrecognized format` about any other).
    const KUBERNETES_FORMATS: [&str; 29] = [
        "int32",
        "int64",
        "float",
        "double",
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
        "date-time",
    ];

    /// Every `format` in a JSON schema, with the path of the schema carrying it.
    fn formats(value: &Value, path: &str, found: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(format)) = map.get("format") {
                    found.push((path.to_string(), format.clone()));
                }
                for (key, child) in map {
                    formats(child, &format!("{path}.{key}"), found);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    formats(child, &format!("{path}[{i}]"), found);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn no_crd_schema_carries_a_format_the_api_server_does_not_know() {
        let mut found = Vec::new();
        for crd in super::super::all() {
            let kind = crd.spec.names.kind.clone();
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            formats(&schema, &kind, &mut found);
        }
        assert!(found.iter().any(|(_, f)| f == "date-time"), "the walk sees the conditions' formats: {found:?}");
        let unknown: Vec<_> = found.iter().filter(|(_, f)| !KUBERNETES_FORMATS.contains(&f.as_str())).collect();
        assert!(unknown.is_empty(), "formats the API server would warn about: {unknown:?}");
    }

    #[test]
    fn u32_fields_are_bounded_to_what_rust_reads() {
        let crds = super::super::all();
        let schema = |kind: &str| {
            let crd = crds.iter().find(|c| c.spec.names.kind == kind).expect("CRD exists");
            serde_json::to_value(&crd.spec.versions[0].schema).unwrap()["openAPIV3Schema"].clone()
        };
        let job = schema("Job");
        let spec = &job["properties"]["spec"]["properties"];
        assert_eq!(spec["maxRetry"]["minimum"].as_f64(), Some(0.0));
        assert_eq!(spec["maxRetry"]["maximum"].as_f64(), Some(4_294_967_295.0));
        assert_eq!(spec["maxRetry"]["type"], "integer");
        assert!(spec["maxRetry"].get("format").is_none());
        // A stricter minimum the type declares is kept.
        assert_eq!(spec["minAvailable"]["minimum"].as_f64(), Some(1.0));
        assert_eq!(spec["minAvailable"]["maximum"].as_f64(), Some(4_294_967_295.0));
        let pg = schema("PodGroup");
        let per_task = &pg["properties"]["spec"]["properties"]["minTaskMember"]["additionalProperties"];
        assert_eq!((per_task["minimum"].as_f64(), per_task["maximum"].as_f64()), (Some(0.0), Some(4_294_967_295.0)));
        let status = &pg["properties"]["status"]["properties"];
        assert_eq!(status["observedGeneration"]["format"], "int64", "known formats stay");
    }

    #[test]
    fn ranges_follow_the_rust_type() {
        assert_eq!(range("uint8"), (Some(0.0), Some(255.0)));
        assert_eq!(range("int16"), (Some(-32768.0), Some(32767.0)));
        assert_eq!(range("uint64"), (Some(0.0), None));
        assert_eq!(range("uint"), (Some(0.0), None));
        assert_eq!(range("int128"), (None, None));
        assert_eq!(range("decimal"), (None, None));
    }
}
