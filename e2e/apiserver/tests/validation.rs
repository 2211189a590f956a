//! Custom resource validation, defaulting and pruning against CRD schemas shaped like the ones
//! kube-rs (`#[derive(CustomResource, JsonSchema)]`) generates for Drover's `Job` and `Queue`.

#![recursion_limit = "256"]

use drover_apiserver::validation::{
    default_and_prune, default_and_prune_reporting, unchecked_rules, unchecked_rules_detailed, validate, FieldError,
};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A `Job` CRD version's `openAPIV3Schema`, as kube-rs + schemars emit it (plus rules).
fn job_schema() -> Value {
    json!({
        "description": "Auto-generated derived type for JobSpec via `CustomResource`",
        "title": "Job",
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["queue", "tasks"],
                "properties": {
                    "queue": {
                        "type": "string", "minLength": 1, "maxLength": 63,
                        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
                    },
                    "priority": {
                        "type": "integer", "format": "int32", "default": 0,
                        "minimum": -1000.0, "maximum": 1000.0
                    },
                    "minAvailable": {"type": "integer", "format": "int32", "nullable": true, "minimum": 0.0},
                    "policy": {"type": "string", "enum": ["Gang", "BestEffort"], "default": "Gang"},
                    "weight": {
                        "type": "number", "format": "double", "default": 0.5,
                        "minimum": 0.0, "exclusiveMinimum": true, "maximum": 1.0
                    },
                    "labels": {
                        "type": "object", "maxProperties": 3,
                        "additionalProperties": {"type": "string", "maxLength": 10}
                    },
                    "tags": {
                        "type": "array", "maxItems": 3, "x-kubernetes-list-type": "set",
                        "items": {"type": "string"}
                    },
                    "restartPolicy": {
                        "type": "object", "default": {},
                        "properties": {
                            "maxRetries": {"type": "integer", "format": "uint32", "default": 3, "minimum": 0.0},
                            "backoffSeconds": {"type": "integer", "format": "uint32", "default": 10, "minimum": 0.0}
                        }
                    },
                    "tasks": {
                        "type": "array", "minItems": 1,
                        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "required": ["name", "replicas", "template"],
                            "properties": {
                                "name": {"type": "string"},
                                "replicas": {"type": "integer", "format": "int32", "minimum": 0.0},
                                "minAvailable": {"type": "integer", "format": "int32", "nullable": true},
                                "resources": {
                                    "type": "object",
                                    "additionalProperties": {
                                        "x-kubernetes-int-or-string": true,
                                        "anyOf": [{"type": "integer"}, {"type": "string"}]
                                    }
                                },
                                "template": {
                                    "description": "A pod template, kept as is.",
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": true
                                },
                                "backoff": {
                                    "description": "Fixed or exponential backoff (an enum of structs).",
                                    "type": "object",
                                    "nullable": true,
                                    "properties": {
                                        "fixed": {"type": "integer", "format": "int32"},
                                        "exponential": {
                                            "type": "object",
                                            "properties": {"base": {"type": "integer", "format": "int32"}}
                                        }
                                    },
                                    "oneOf": [{"required": ["fixed"]}, {"required": ["exponential"]}]
                                }
                            },
                            "x-kubernetes-validations": [{
                                "rule": "!has(self.minAvailable) || self.minAvailable <= self.replicas",
                                "message": "minAvailable must not exceed replicas",
                                "fieldPath": ".minAvailable"
                            }]
                        }
                    }
                },
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.minAvailable) || self.minAvailable <= self.tasks.map(t, t.replicas).sum()",
                        "message": "minAvailable must not exceed the total replicas"
                    },
                    {"rule": "self.queue == oldSelf.queue", "message": "queue is immutable"},
                    {
                        "rule": "self.tasks.all(t, t.name != self.queue)",
                        "messageExpression": "'a task is named after queue ' + self.queue",
                        "reason": "FieldValueForbidden"
                    }
                ]
            },
            "status": {
                "type": "object",
                "nullable": true,
                "properties": {
                    "phase": {"type": "string", "enum": ["Pending", "Running", "Completed", "Failed"]},
                    "running": {"type": "integer", "format": "int32"}
                }
            }
        }
    })
}

/// A `Queue` CRD version's schema, with a root-level rule using `metadata.name`.
fn queue_schema() -> Value {
    json!({
        "title": "Queue",
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "weight": {"type": "integer", "format": "int32", "default": 1, "minimum": 1.0},
                    "parent": {"type": "string", "nullable": true},
                    "capability": {
                        "type": "object", "nullable": true,
                        "additionalProperties": {"x-kubernetes-int-or-string": true}
                    },
                    "reclaimable": {"type": "boolean", "default": true}
                },
                "x-kubernetes-validations": [{
                    "rule": "!has(self.parent) || self.parent != 'root'",
                    "message": "must not be root",
                    "fieldPath": ".parent"
                }]
            },
            "status": {"type": "object", "nullable": true, "properties": {"admitted": {"type": "integer"}}}
        },
        "x-kubernetes-validations": [{
            "rule": "!has(self.spec.parent) || self.spec.parent != self.metadata.name",
            "message": "a queue cannot be its own parent"
        }]
    })
}

fn job() -> Value {
    json!({
        "apiVersion": "drover.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {
            "queue": "research",
            "minAvailable": 2,
            "tasks": [
                {"name": "ps", "replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
                {"name": "worker", "replicas": 3, "minAvailable": 1, "resources": {"cpu": "500m", "gpus": 1},
                 "template": {"metadata": {"labels": {"a": "b"}}}}
            ]
        }
    })
}

/// Prunes/defaults `obj`, then validates it as a create.
fn create(schema: &Value, mut obj: Value) -> Vec<FieldError> {
    default_and_prune(schema, &mut obj);
    validate(schema, &obj, None).err().unwrap_or_default()
}

fn update(schema: &Value, old: Value, mut new: Value) -> Vec<FieldError> {
    let mut old = old;
    default_and_prune(schema, &mut old);
    default_and_prune(schema, &mut new);
    validate(schema, &new, Some(&old)).err().unwrap_or_default()
}

/// Asserts `errors` has exactly one error at `field`, with `reason` and exactly `message`.
#[track_caller]
fn expect(errors: &[FieldError], field: &str, reason: &str, message: &str) {
    let at: Vec<&FieldError> = errors.iter().filter(|e| e.field == field).collect();
    assert!(
        at.iter().any(|e| e.reason == reason && e.message == message),
        "no {reason} {message:?} at {field}; errors: {errors:#?}"
    );
}

/// `job()` with `f` applied to its spec.
fn job_with(f: impl FnOnce(&mut Value)) -> Value {
    let mut j = job();
    f(&mut j["spec"]);
    j
}

#[test]
fn a_valid_job_and_queue_pass() {
    assert_eq!(create(&job_schema(), job()), vec![]);
    let q = json!({"apiVersion": "drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "research"},
                   "spec": {"parent": "org", "capability": {"cpu": 8, "memory": "64Gi"}}});
    assert_eq!(create(&queue_schema(), q), vec![]);
}

#[test]
fn required_fields() {
    let errs = create(
        &job_schema(),
        job_with(|s| {
            s.as_object_mut().unwrap().remove("queue");
            s["tasks"][1].as_object_mut().unwrap().remove("replicas");
        }),
    );
    expect(&errs, "spec.queue", "FieldValueRequired", "Required value");
    expect(&errs, "spec.tasks[1].replicas", "FieldValueRequired", "Required value");

    let errs =
        create(&job_schema(), json!({"apiVersion": "drover.dev/v1alpha1", "kind": "Job", "metadata": {"name": "x"}}));
    assert_eq!(
        errs,
        vec![FieldError {
            field: "spec".into(),
            reason: "FieldValueRequired".into(),
            message: "Required value".into()
        }]
    );
}

#[test]
fn minimum_maximum_and_exclusive_bounds() {
    let errs = create(
        &job_schema(),
        job_with(|s| {
            s["tasks"][0]["replicas"] = json!(-1);
            s["priority"] = json!(5000);
            s["weight"] = json!(0);
        }),
    );
    expect(
        &errs,
        "spec.tasks[0].replicas",
        "FieldValueInvalid",
        "Invalid value: -1: spec.tasks[0].replicas in body should be greater than or equal to 0",
    );
    expect(
        &errs,
        "spec.priority",
        "FieldValueInvalid",
        "Invalid value: 5000: spec.priority in body should be less than or equal to 1000",
    );
    expect(&errs, "spec.weight", "FieldValueInvalid", "Invalid value: 0: spec.weight in body should be greater than 0");

    let errs = create(&job_schema(), job_with(|s| s["weight"] = json!(1.5)));
    expect(
        &errs,
        "spec.weight",
        "FieldValueInvalid",
        "Invalid value: 1.5: spec.weight in body should be less than or equal to 1",
    );
    let errs = create(&job_schema(), job_with(|s| s["weight"] = json!(1)));
    assert_eq!(errs, vec![], "maximum is inclusive");

    let exclusive_max = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "x": {"type": "number", "maximum": 2.5, "exclusiveMaximum": true, "multipleOf": 0.5}}}}});
    let errs = create(&exclusive_max, json!({"spec": {"x": 2.5}}));
    expect(&errs, "spec.x", "FieldValueInvalid", "Invalid value: 2.5: spec.x in body should be less than 2.5");
    let errs = create(&exclusive_max, json!({"spec": {"x": 0.7}}));
    expect(&errs, "spec.x", "FieldValueInvalid", "Invalid value: 0.7: spec.x in body should be a multiple of 0.5");
    assert_eq!(create(&exclusive_max, json!({"spec": {"x": 1.5}})), vec![]);
}

#[test]
fn types_are_checked() {
    let errs = create(
        &job_schema(),
        job_with(|s| {
            s["tasks"][0]["replicas"] = json!("string");
            s["tasks"][1]["replicas"] = json!(1.5);
            s["queue"] = json!(7);
            s["tags"] = json!({"a": 1});
        }),
    );
    expect(
        &errs,
        "spec.tasks[0].replicas",
        "FieldValueTypeInvalid",
        "Invalid value: \"string\": spec.tasks[0].replicas in body must be of type integer: \"string\"",
    );
    expect(
        &errs,
        "spec.tasks[1].replicas",
        "FieldValueTypeInvalid",
        "Invalid value: \"number\": spec.tasks[1].replicas in body must be of type integer: \"number\"",
    );
    expect(
        &errs,
        "spec.queue",
        "FieldValueTypeInvalid",
        "Invalid value: \"integer\": spec.queue in body must be of type string: \"integer\"",
    );
    expect(
        &errs,
        "spec.tags",
        "FieldValueTypeInvalid",
        "Invalid value: \"object\": spec.tags in body must be of type array: \"object\"",
    );
    // A whole float is an integer, as the API server decodes it to int64.
    assert_eq!(create(&job_schema(), job_with(|s| s["tasks"][0]["replicas"] = json!(2.0))), vec![]);
    // A boolean where an object is expected.
    let errs = create(&job_schema(), job_with(|s| s["restartPolicy"] = json!(true)));
    expect(
        &errs,
        "spec.restartPolicy",
        "FieldValueTypeInvalid",
        "Invalid value: \"boolean\": spec.restartPolicy in body must be of type object: \"boolean\"",
    );
}

#[test]
fn enums() {
    let errs = create(&job_schema(), job_with(|s| s["policy"] = json!("Foo")));
    expect(
        &errs,
        "spec.policy",
        "FieldValueNotSupported",
        "Unsupported value: \"Foo\": supported values: \"Gang\", \"BestEffort\"",
    );
    let ints = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "level": {"type": "integer", "enum": [1, 2]}}}}});
    let errs = create(&ints, json!({"spec": {"level": 3}}));
    expect(&errs, "spec.level", "FieldValueNotSupported", "Unsupported value: 3: supported values: \"1\", \"2\"");
    assert_eq!(create(&ints, json!({"spec": {"level": 2}})), vec![]);
}

#[test]
fn int_or_string() {
    assert_eq!(
        create(&job_schema(), job_with(|s| s["tasks"][1]["resources"] = json!({"cpu": 2, "memory": "1Gi"}))),
        vec![]
    );
    let errs = create(&job_schema(), job_with(|s| s["tasks"][1]["resources"] = json!({"cpu": true})));
    expect(
        &errs,
        "spec.tasks[1].resources.cpu",
        "FieldValueTypeInvalid",
        "Invalid value: \"boolean\": spec.tasks[1].resources.cpu in body must be of type integer,string: \"boolean\"",
    );
    let errs = create(&queue_schema(), json!({"metadata": {"name": "q"}, "spec": {"capability": {"cpu": 1.5}}}));
    expect(
        &errs,
        "spec.capability.cpu",
        "FieldValueTypeInvalid",
        "Invalid value: \"number\": spec.capability.cpu in body must be of type integer,string: \"number\"",
    );
}

#[test]
fn nullable() {
    // Nullable fields accept null, and keep it.
    let mut obj = job_with(|s| s["tasks"][0]["backoff"] = Value::Null);
    default_and_prune(&job_schema(), &mut obj);
    assert_eq!(obj["spec"]["tasks"][0]["backoff"], Value::Null);
    assert_eq!(validate(&job_schema(), &obj, None), Ok(()));
    let mut with_status = job();
    with_status["status"] = Value::Null;
    assert_eq!(create(&job_schema(), with_status), vec![]);

    // Without pruning, a null for a non-nullable field is a type error.
    let obj = job_with(|s| s["queue"] = Value::Null);
    let errs = validate(&job_schema(), &obj, None).unwrap_err();
    expect(
        &errs,
        "spec.queue",
        "FieldValueTypeInvalid",
        "Invalid value: \"null\": spec.queue in body must be of type string: \"null\"",
    );
    // Pruning drops it (it has no default), so it is then missing.
    let errs = create(&job_schema(), job_with(|s| s["queue"] = Value::Null));
    expect(&errs, "spec.queue", "FieldValueRequired", "Required value");
}

#[test]
fn strings_length_and_pattern() {
    let errs = create(&job_schema(), job_with(|s| s["queue"] = json!("")));
    expect(
        &errs,
        "spec.queue",
        "FieldValueInvalid",
        "Invalid value: \"\": spec.queue in body should be at least 1 chars long",
    );
    expect(
        &errs,
        "spec.queue",
        "FieldValueInvalid",
        "Invalid value: \"\": spec.queue in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    );
    let errs = create(&job_schema(), job_with(|s| s["queue"] = json!("Bad_Name")));
    expect(
        &errs,
        "spec.queue",
        "FieldValueInvalid",
        "Invalid value: \"Bad_Name\": spec.queue in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    );
    let errs = create(&job_schema(), job_with(|s| s["queue"] = json!("a".repeat(64))));
    expect(&errs, "spec.queue", "FieldValueTooLong", "Too long: may not be more than 63 bytes");
}

#[test]
fn additional_properties_and_property_counts() {
    let errs = create(&job_schema(), job_with(|s| s["labels"] = json!({"team": "a-very-long-team"})));
    expect(&errs, "spec.labels.team", "FieldValueTooLong", "Too long: may not be more than 10 bytes");
    let errs = create(&job_schema(), job_with(|s| s["labels"] = json!({"a": "1", "b": "2", "c": "3", "d": "4"})));
    expect(&errs, "spec.labels", "FieldValueTooMany", "Too many: 4: must have at most 3 items");

    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "minProperties": 2,
        "additionalProperties": {"type": "integer"}},
        "closed": {"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}}}});
    let errs = validate(&schema, &json!({"spec": {"a": 1}, "closed": {"a": "x", "b": 1}}), None).unwrap_err();
    expect(&errs, "spec", "FieldValueInvalid", "Invalid value: 1: spec in body should have at least 2 properties");
    expect(&errs, "closed", "FieldValueInvalid", "Invalid value: \"b\": closed.b in body is a forbidden property");
    let errs = validate(&schema, &json!({"spec": {"a": 1, "b": "x"}}), None).unwrap_err();
    expect(
        &errs,
        "spec.b",
        "FieldValueTypeInvalid",
        "Invalid value: \"string\": spec.b in body must be of type integer: \"string\"",
    );
}

#[test]
fn list_sizes_sets_and_maps() {
    let errs = create(&job_schema(), job_with(|s| s["tasks"] = json!([])));
    expect(
        &errs,
        "spec.tasks",
        "FieldValueInvalid",
        "Invalid value: 0: spec.tasks in body should have at least 1 items",
    );
    let errs = create(&job_schema(), job_with(|s| s["tags"] = json!(["a", "b", "c", "d"])));
    expect(&errs, "spec.tags", "FieldValueTooMany", "Too many: 4: must have at most 3 items");

    let errs = create(&job_schema(), job_with(|s| s["tags"] = json!(["a", "b", "a"])));
    assert_eq!(
        errs,
        vec![FieldError {
            field: "spec.tags[2]".into(),
            reason: "FieldValueDuplicate".into(),
            message: "Duplicate value: \"a\"".into()
        }]
    );

    let errs = create(&job_schema(), job_with(|s| s["tasks"][1]["name"] = json!("ps")));
    expect(&errs, "spec.tasks[1]", "FieldValueDuplicate", "Duplicate value: {\"name\":\"ps\"}");

    let unique = json!({"type": "object", "properties": {"spec": {"type": "array", "uniqueItems": true, "items": {"type": "integer"}}}});
    let errs = validate(&unique, &json!({"spec": [1, 2, 1]}), None).unwrap_err();
    expect(&errs, "spec", "FieldValueInvalid", "Invalid value: \"\": spec in body shouldn't contain duplicates");
}

#[test]
fn one_of_for_enums_of_structs() {
    let errs = create(&job_schema(), job_with(|s| s["tasks"][0]["backoff"] = json!({})));
    expect(
        &errs,
        "<nil>",
        "FieldValueInvalid",
        "Invalid value: \"\": \"spec.tasks[0].backoff\" must validate one and only one schema (oneOf). Found none valid",
    );
    expect(&errs, "spec.tasks[0].backoff.fixed", "FieldValueRequired", "Required value");

    let errs =
        create(&job_schema(), job_with(|s| s["tasks"][0]["backoff"] = json!({"fixed": 1, "exponential": {"base": 2}})));
    expect(
        &errs,
        "<nil>",
        "FieldValueInvalid",
        "Invalid value: \"\": \"spec.tasks[0].backoff\" must validate one and only one schema (oneOf). Found 2 valid alternatives",
    );
    assert_eq!(create(&job_schema(), job_with(|s| s["tasks"][0]["backoff"] = json!({"fixed": 5}))), vec![]);
    assert_eq!(create(&job_schema(), job_with(|s| s["tasks"][0]["backoff"] = Value::Null)), vec![]);
}

#[test]
fn any_of_all_of_and_not() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": true,
                 "anyOf": [{"type": "integer", "minimum": 1.0}, {"type": "string", "pattern": "^[a-z]+$"}]},
        "size": {"type": "integer", "allOf": [{"minimum": 1.0}, {"maximum": 10.0}]},
        "mode": {"type": "string", "not": {"enum": ["legacy"]}}
    }}}});
    assert_eq!(validate(&schema, &json!({"spec": {"port": 80, "size": 5, "mode": "new"}}), None), Ok(()));
    assert_eq!(validate(&schema, &json!({"spec": {"port": "http"}}), None), Ok(()));

    let errs = validate(&schema, &json!({"spec": {"port": "HTTP"}}), None).unwrap_err();
    expect(
        &errs,
        "<nil>",
        "FieldValueInvalid",
        "Invalid value: \"\": \"spec.port\" must validate at least one schema (anyOf)",
    );
    let errs = validate(&schema, &json!({"spec": {"size": 11}}), None).unwrap_err();
    expect(
        &errs,
        "spec.size",
        "FieldValueInvalid",
        "Invalid value: 11: spec.size in body should be less than or equal to 10",
    );
    expect(
        &errs,
        "<nil>",
        "FieldValueInvalid",
        "Invalid value: \"\": \"spec.size\" must validate all the schemas (allOf)",
    );
    let errs = validate(&schema, &json!({"spec": {"mode": "legacy"}}), None).unwrap_err();
    expect(
        &errs,
        "<nil>",
        "FieldValueInvalid",
        "Invalid value: \"\": \"spec.mode\" must not validate the schema (not)",
    );
}

#[test]
fn embedded_resources() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "object": {"type": "object", "x-kubernetes-embedded-resource": true,
                   "properties": {"data": {"type": "object", "properties": {"k": {"type": "string"}}}}}}}}});
    let mut obj = json!({"spec": {"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
        "data": {"k": "v", "unknown": 1}, "extra": true}}});
    default_and_prune(&schema, &mut obj);
    assert_eq!(
        obj["spec"]["object"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "v"}})
    );
    assert_eq!(validate(&schema, &obj, None), Ok(()));
    let errs = create(&schema, json!({"spec": {"object": {"kind": ""}}}));
    expect(&errs, "spec.object.apiVersion", "FieldValueRequired", "Required value: must not be empty");
    expect(&errs, "spec.object.kind", "FieldValueInvalid", "Invalid value: \"\": must not be empty");
}

#[test]
fn defaults_are_applied_including_nested_ones() {
    let mut obj = job();
    default_and_prune(&job_schema(), &mut obj);
    let spec = &obj["spec"];
    assert_eq!(spec["priority"], json!(0));
    assert_eq!(spec["policy"], json!("Gang"));
    assert_eq!(spec["weight"], json!(0.5));
    // `restartPolicy` defaults to {}, and then its own properties' defaults apply.
    assert_eq!(spec["restartPolicy"], json!({"maxRetries": 3, "backoffSeconds": 10}));

    // Nested defaults inside an object that is present.
    let mut obj = job_with(|s| s["restartPolicy"] = json!({"maxRetries": 5}));
    default_and_prune(&job_schema(), &mut obj);
    assert_eq!(obj["spec"]["restartPolicy"], json!({"maxRetries": 5, "backoffSeconds": 10}));

    // A null for a non-nullable field with a default gets the default; one without is dropped;
    // a nullable field keeps its null and gets no default.
    let mut obj = job_with(|s| {
        s["priority"] = Value::Null;
        s["labels"] = Value::Null;
        s["minAvailable"] = Value::Null;
    });
    obj["status"] = json!({"running": null, "phase": "Running"});
    default_and_prune(&job_schema(), &mut obj);
    assert_eq!(obj["spec"]["priority"], json!(0));
    assert!(obj["spec"].get("labels").is_none());
    assert_eq!(obj["spec"]["minAvailable"], Value::Null);
    assert_eq!(obj["status"], json!({"phase": "Running"}));

    // Defaults are not applied to the metadata the server owns, and values set are kept.
    let mut obj = job_with(|s| s["policy"] = json!("BestEffort"));
    default_and_prune(&job_schema(), &mut obj);
    assert_eq!(obj["spec"]["policy"], json!("BestEffort"));
    assert_eq!(obj["metadata"], json!({"name": "train", "namespace": "default"}));

    // Defaults in additionalProperties and items replace nulls.
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "m": {"type": "object", "additionalProperties": {"type": "integer", "default": 7}},
        "l": {"type": "array", "items": {"type": "string", "default": "d"}}}}}});
    let mut obj = json!({"spec": {"m": {"a": null, "b": 1}, "l": [null, "x"]}});
    default_and_prune(&schema, &mut obj);
    assert_eq!(obj, json!({"spec": {"m": {"a": 7, "b": 1}, "l": ["d", "x"]}}));
}

#[test]
fn unknown_fields_are_pruned_except_where_preserved() {
    let mut obj = job_with(|s| {
        s["foo"] = json!(1);
        s["tasks"][0]["extra"] = json!({"x": 1});
        s["labels"] = json!({"any-key": "kept"});
    });
    obj["topLevel"] = json!("dropped");
    let pruned = default_and_prune_reporting(&job_schema(), &mut obj);
    assert_eq!(pruned, vec!["topLevel".to_string(), "spec.foo".to_string(), "spec.tasks[0].extra".to_string()]);
    assert!(obj["spec"].get("foo").is_none());
    assert!(obj["spec"]["tasks"][0].get("extra").is_none());
    assert!(obj.get("topLevel").is_none());
    assert_eq!(obj["spec"]["labels"], json!({"any-key": "kept"}));
    // The pod template preserves unknown fields, however deep.
    assert_eq!(
        obj["spec"]["tasks"][0]["template"],
        json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    );
    // apiVersion, kind and metadata are never pruned at the root.
    assert_eq!(obj["apiVersion"], json!("drover.dev/v1alpha1"));
    assert_eq!(obj["kind"], json!("Job"));
    assert_eq!(obj["metadata"]["namespace"], json!("default"));

    // Known properties inside a preserve-unknown-fields object are still pruned and defaulted.
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"known": {"type": "object", "properties": {"a": {"type": "integer", "default": 1}}}}}}});
    let mut obj = json!({"spec": {"other": {"z": 1}, "known": {"b": 2}}});
    default_and_prune(&schema, &mut obj);
    assert_eq!(obj, json!({"spec": {"other": {"z": 1}, "known": {"a": 1}}}));
}

#[test]
fn cel_rules_with_field_path_and_messages() {
    // A rule on the task items with a fieldPath.
    let errs = create(&job_schema(), job_with(|s| s["tasks"][1]["minAvailable"] = json!(5)));
    assert_eq!(
        errs,
        vec![FieldError {
            field: "spec.tasks[1].minAvailable".into(),
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: minAvailable must not exceed replicas".into()
        }]
    );
    // A rule summing a list (Kubernetes' list library).
    let errs = create(&job_schema(), job_with(|s| s["minAvailable"] = json!(5)));
    expect(&errs, "spec", "FieldValueInvalid", "Invalid value: minAvailable must not exceed the total replicas");
    assert_eq!(create(&job_schema(), job_with(|s| s["minAvailable"] = json!(4))), vec![]);
    // messageExpression and reason.
    let errs = create(&job_schema(), job_with(|s| s["tasks"][0]["name"] = json!("research")));
    expect(&errs, "spec", "FieldValueForbidden", "Forbidden: a task is named after queue research");
}

#[test]
fn cel_root_rules_see_metadata_name() {
    let errs = create(&queue_schema(), json!({"metadata": {"name": "q"}, "spec": {"parent": "q"}}));
    expect(&errs, "<nil>", "FieldValueInvalid", "Invalid value: a queue cannot be its own parent");
    let errs = create(&queue_schema(), json!({"metadata": {"name": "q"}, "spec": {"parent": "root"}}));
    expect(&errs, "spec.parent", "FieldValueInvalid", "Invalid value: must not be root");
}

#[test]
fn cel_transition_rules_run_on_updates_only() {
    let schema = job_schema();
    let moved = job_with(|s| s["queue"] = json!("other"));
    // On create there is no oldSelf: the immutability rule does not run.
    assert_eq!(create(&schema, moved.clone()), vec![]);
    let errs = update(&schema, job(), moved);
    assert_eq!(
        errs,
        vec![FieldError {
            field: "spec".into(),
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: queue is immutable".into()
        }]
    );
    assert_eq!(update(&schema, job(), job_with(|s| s["priority"] = json!(3))), vec![]);

    // A transition rule on a scalar, and optionalOldSelf.
    let scalar = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "size": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self >= oldSelf", "message": "may only grow"}]},
        "name": {"type": "string", "x-kubernetes-validations": [
            {"rule": "!oldSelf.hasValue() || self == oldSelf.value()", "optionalOldSelf": true, "message": "is immutable"},
            {"rule": "self.startsWith('n')"}]}}}}});
    assert_eq!(validate(&scalar, &json!({"spec": {"size": 1, "name": "n1"}}), None), Ok(()));
    let errs = validate(
        &scalar,
        &json!({"spec": {"size": 1, "name": "n2"}}),
        Some(&json!({"spec": {"size": 2, "name": "n1"}})),
    )
    .unwrap_err();
    assert_eq!(
        errs,
        vec![
            FieldError {
                field: "spec.name".into(),
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"n2\": is immutable".into()
            },
            FieldError {
                field: "spec.size".into(),
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: 1: may only grow".into()
            },
        ]
    );
    let errs = validate(&scalar, &json!({"spec": {"name": "x"}}), None).unwrap_err();
    expect(&errs, "spec.name", "FieldValueInvalid", "Invalid value: \"x\": failed rule: self.startsWith('n')");
}

#[test]
fn cel_reasons_runtime_errors_and_types() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
    "properties": {
        "replicas": {"type": "integer"},
        "ratio": {"type": "number"},
        "x-y": {"type": "integer"},
        "namespace": {"type": "string"},
        "items": {"type": "array", "items": {"type": "string"}}
    },
    "x-kubernetes-validations": [
        {"rule": "type(self.replicas) == int && self.replicas + 1 > 1", "message": "replicas is an int"},
        {"rule": "type(self.ratio) == double", "message": "ratio is a double"},
        {"rule": "self.x__dash__y == 1", "message": "escaped name", "reason": "FieldValueRequired"},
        {"rule": "self.__namespace__ != 'kube-system'", "reason": "FieldValueDuplicate"},
        {"rule": "self.missing > 0"},
        {"rule": "size(self.items) < 3", "message": "too many", "reason": "FieldValueForbidden", "fieldPath": ".items"}
    ]}}});
    let ok = json!({"spec": {"replicas": 2.0, "ratio": 1, "x-y": 1, "namespace": "a", "items": []}});
    let errs = validate(&schema, &ok, None).unwrap_err();
    // Only the runtime error of the rule reading an absent field.
    assert_eq!(
        errs,
        vec![FieldError {
            field: "spec".into(),
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: \"object\": no such key: missing evaluating rule: self.missing > 0".into()
        }]
    );
    let bad =
        json!({"spec": {"replicas": 2, "ratio": 1.5, "x-y": 2, "namespace": "kube-system", "items": ["a", "b", "c"]}});
    let errs = validate(&schema, &bad, None).unwrap_err();
    expect(&errs, "spec", "FieldValueRequired", "Required value: escaped name");
    expect(&errs, "spec", "FieldValueDuplicate", "Duplicate value");
    expect(&errs, "spec.items", "FieldValueForbidden", "Forbidden: too many");
}

#[test]
fn unchecked_rules_are_listed_and_skipped() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"cpu": {"x-kubernetes-int-or-string": true,
            "x-kubernetes-validations": [{"rule": "quantity(self).isGreaterThan(quantity('1'))"}]},
            "name": {"type": "string", "pattern": "(?=lookahead)"}},
        "x-kubernetes-validations": [
            {"rule": "self.cpu == request.cpu"},
            {"rule": "self.name =="},
            {"rule": "has(self.name)", "fieldPath": ".nope"},
            {"rule": "has(self.name)"}
        ],
        "allOf": [{"x-kubernetes-validations": [{"rule": "true"}]}]}}});
    assert_eq!(
        unchecked_rules(&schema),
        vec![
            "self.cpu == request.cpu".to_string(),
            "self.name ==".to_string(),
            "has(self.name)".to_string(),
            "quantity(self).isGreaterThan(quantity('1'))".to_string(),
            "true".to_string(),
        ]
    );
    let detailed = unchecked_rules_detailed(&schema);
    assert!(
        detailed.iter().any(|u| u.path == "spec.cpu" && u.reason.contains("isGreaterThan, quantity")),
        "{detailed:#?}"
    );
    assert!(detailed.iter().any(|u| u.reason.contains("unknown variable(s): request")), "{detailed:#?}");
    assert!(detailed.iter().any(|u| u.reason.contains("does not compile")), "{detailed:#?}");
    assert!(detailed.iter().any(|u| u.reason.starts_with("fieldPath \".nope\"")), "{detailed:#?}");
    assert!(detailed.iter().any(|u| u.rule == "pattern: (?=lookahead)" && u.path == "spec.name"), "{detailed:#?}");
    // None of them rejects anything: only the supported `has(self.name)` is enforced.
    assert_eq!(validate(&schema, &json!({"spec": {"cpu": "500m", "name": "x"}}), None), Ok(()));
    let errs = validate(&schema, &json!({"spec": {"cpu": "500m"}}), None).unwrap_err();
    expect(&errs, "spec", "FieldValueInvalid", "Invalid value: failed rule: has(self.name)");
    assert!(unchecked_rules(&job_schema()).is_empty());
    assert!(unchecked_rules(&queue_schema()).is_empty());
}

#[test]
fn updates_ratchet_unchanged_invalid_values() {
    let schema = job_schema();
    // Stored before a stricter schema: replicas -1 stays acceptable while unchanged.
    let old = job_with(|s| s["tasks"][0]["replicas"] = json!(-1));
    assert_eq!(
        update(
            &schema,
            old.clone(),
            job_with(|s| {
                s["tasks"][0]["replicas"] = json!(-1);
                s["priority"] = json!(7);
            })
        ),
        vec![]
    );
    // Changing it to another invalid value is rejected.
    let errs = update(&schema, old, job_with(|s| s["tasks"][0]["replicas"] = json!(-2)));
    expect(
        &errs,
        "spec.tasks[0].replicas",
        "FieldValueInvalid",
        "Invalid value: -2: spec.tasks[0].replicas in body should be greater than or equal to 0",
    );
    // Map-list items correlate by key, not position.
    let old = job_with(|s| s["tasks"][1]["minAvailable"] = json!(9));
    let new = job_with(|s| {
        s["tasks"][1]["minAvailable"] = json!(9);
        let t = s["tasks"].as_array_mut().unwrap();
        t.reverse();
    });
    assert_eq!(update(&schema, old, new), vec![]);
}

#[test]
fn errors_are_sorted_by_path() {
    let mut tasks = Vec::new();
    for i in 0..12 {
        tasks
            .push(json!({"name": format!("t{i}"), "replicas": if i == 2 || i == 10 { -1 } else { 1 }, "template": {}}));
    }
    let errs = create(
        &job_schema(),
        job_with(|s| {
            s["tasks"] = Value::Array(tasks);
            s["policy"] = json!("Nope");
            s.as_object_mut().unwrap().remove("queue");
        }),
    );
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    // `spec` first: a rule reading the missing `queue` fails to evaluate.
    assert_eq!(fields, vec!["spec", "spec.policy", "spec.queue", "spec.tasks[2].replicas", "spec.tasks[10].replicas"]);
    // Deterministic: the same input gives the same errors.
    let again = create(
        &job_schema(),
        job_with(|s| {
            s["policy"] = json!("Nope");
            s.as_object_mut().unwrap().remove("queue");
        }),
    );
    assert_eq!(
        again,
        create(
            &job_schema(),
            job_with(|s| {
                s["policy"] = json!("Nope");
                s.as_object_mut().unwrap().remove("queue");
            })
        )
    );
}

#[test]
fn garbage_schemas_and_objects_do_not_panic() {
    let schemas = [
        json!(null),
        json!(true),
        json!({"type": 5, "properties": [], "items": "x", "required": {}, "enum": "a"}),
        json!({"type": "object", "properties": {"spec": {"minimum": "x", "maxLength": -1, "pattern": "(",
            "x-kubernetes-validations": [1, {"rule": 2}, {"rule": "self.a", "fieldPath": 3}, {"rule": "1 / 0 == 1"}]}}}),
        json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [1, "k"], "items": {}}),
    ];
    let objects =
        [json!(null), json!([1, null, {"k": []}]), json!({"spec": {"a": [1, 2], "b": null}}), json!("s"), json!(1e300)];
    for s in &schemas {
        for o in &objects {
            let _ = validate(s, o, Some(o));
            let mut o = o.clone();
            default_and_prune(s, &mut o);
            let _ = unchecked_rules(s);
        }
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z]{0,4}".prop_map(Value::String),
        prop_oneof![Just("research"), Just("Gang"), Just("ps"), Just("500m")].prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("name".to_string()),
            Just("replicas".to_string()),
            Just("minAvailable".to_string()),
            Just("template".to_string()),
            Just("resources".to_string()),
            Just("backoff".to_string()),
            Just("fixed".to_string()),
            "[a-z]{1,3}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A random `spec` (mostly Job-shaped) for the Job schema.
fn arb_spec() -> impl Strategy<Value = Value> {
    let task = (arb_json(), arb_json(), arb_json(), arb_json()).prop_map(|(name, replicas, min, extra)| {
        json!({"name": name, "replicas": replicas, "minAvailable": min, "template": extra.clone(), "backoff": extra})
    });
    (arb_json(), arb_json(), prop::collection::vec(task, 0..4), arb_json(), arb_json()).prop_map(
        |(queue, min, tasks, labels, junk)| {
            json!({"queue": queue, "minAvailable": min, "tasks": tasks, "labels": labels, "policy": junk.clone(), "junk": junk})
        },
    )
}

/// Random schema-like JSON: schema keywords as keys, type names and rules as strings.
fn arb_schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        (-3i64..5).prop_map(|i| json!(i)),
        prop_oneof![
            Just("object"),
            Just("array"),
            Just("integer"),
            Just("string"),
            Just("number"),
            Just("boolean"),
            Just("map"),
            Just("set"),
            Just("name"),
            Just("^[a-z]+$"),
            Just("self.a > 1"),
            Just("self == oldSelf"),
            Just("self.all(x, x > 0)"),
            Just(".a"),
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 64, 5, |inner| {
        let keys = prop_oneof![
            Just("type"),
            Just("properties"),
            Just("items"),
            Just("required"),
            Just("enum"),
            Just("minimum"),
            Just("maxLength"),
            Just("pattern"),
            Just("default"),
            Just("nullable"),
            Just("additionalProperties"),
            Just("oneOf"),
            Just("anyOf"),
            Just("x-kubernetes-validations"),
            Just("rule"),
            Just("fieldPath"),
            Just("x-kubernetes-list-type"),
            Just("x-kubernetes-list-map-keys"),
            Just("x-kubernetes-int-or-string"),
            Just("x-kubernetes-preserve-unknown-fields"),
            Just("a"),
            Just("name"),
        ]
        .prop_map(str::to_string);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_objects_never_panic(spec in arb_spec(), old_spec in arb_spec(), raw in arb_json()) {
        let schema = job_schema();
        let mut obj = json!({"apiVersion": "drover.dev/v1alpha1", "kind": "Job", "metadata": {"name": "n"}, "spec": spec});
        let old = json!({"apiVersion": "drover.dev/v1alpha1", "kind": "Job", "metadata": {"name": "n"}, "spec": old_spec});
        let first = validate(&schema, &obj, Some(&old));
        prop_assert_eq!(&first, &validate(&schema, &obj, Some(&old)), "validation is deterministic");
        default_and_prune(&schema, &mut obj);
        let defaulted = obj.clone();
        default_and_prune(&schema, &mut obj);
        prop_assert_eq!(&defaulted, &obj, "defaulting and pruning are idempotent");
        let _ = validate(&schema, &obj, None);
        // Any JSON as the object, and as the schema.
        let _ = validate(&schema, &raw, None);
        let _ = validate(&raw, &obj, Some(&raw));
        let mut r = raw.clone();
        default_and_prune(&raw, &mut r);
        let _ = unchecked_rules(&raw);
    }

    #[test]
    fn random_schemas_never_panic(schema in arb_schema(), obj in arb_schema(), old in arb_json()) {
        let _ = validate(&schema, &obj, Some(&old));
        let _ = validate(&schema, &obj, None);
        let mut o = obj.clone();
        default_and_prune(&schema, &mut o);
        let _ = validate(&schema, &o, Some(&obj));
        let _ = unchecked_rules_detailed(&schema);
    }
}
