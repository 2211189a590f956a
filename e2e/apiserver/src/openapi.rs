//! A minimal OpenAPI v3 (`/openapi/v3`, `/openapi/v3/{api/v1 | apis/g/v}`): per resource only
//! the PATCH operation of its object path, tagged with its group-version-kind and listing the
//! `fieldValidation` query parameter. That is what kubectl reads to learn that the server
//! validates fields itself (so it sends `fieldValidation=Strict` instead of downloading schemas
//! to validate client-side). No schemas are served, so `kubectl explain` does not work.

use serde_json::{json, Map, Value};

use crate::registry::{Registry, ResourceType};

fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the group-versions and where their documents are.
pub fn root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for t in reg.all() {
        let key = gv_key(&t.group, &t.version);
        paths.entry(key.clone()).or_insert_with(|| json!({"serverRelativeURL": format!("/openapi/v3/{key}")}));
    }
    json!({"paths": paths})
}

fn object_path(t: &ResourceType) -> String {
    let prefix = if t.group.is_empty() { "/api/v1".to_string() } else { format!("/apis/{}/{}", t.group, t.version) };
    if t.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
    } else {
        format!("{prefix}/{}/{{name}}", t.plural)
    }
}

/// `/openapi/v3/{gv}` for a served group-version (`api/v1`, `apis/g/v`), if any.
pub fn group_version(reg: &Registry, gv: &str) -> Option<Value> {
    let types: Vec<_> = reg.all().iter().filter(|t| gv_key(&t.group, &t.version) == gv).collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    for t in types {
        let patch = json!({
            "operationId": format!("patch{}", t.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version, "kind": t.kind},
            "parameters": [
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(object_path(t), json!({"patch": patch}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (drover-apiserver emulator)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
