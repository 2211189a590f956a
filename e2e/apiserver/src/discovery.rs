//! The discovery documents (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/{g}/{v}`), built
//! from the registry so they list exactly what is served. Aggregated discovery is not served:
//! the plain forms come back as `application/json`, which kubectl and client-go fall back to.

use std::cmp::Ordering;

use serde_json::{json, Value};

use crate::registry::{Builtin, Registry, ResourceType};

/// The Kubernetes version this server emulates.
pub const EMULATED_MINOR: &str = "33";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": EMULATED_MINOR,
        "gitVersion": format!("v1.{EMULATED_MINOR}.0-drover-emulator"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "none (drover-apiserver emulator)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

/// The architecture as Go names it (what `platform` shows on a real server).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// `/api`.
pub fn core_versions(host: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    })
}

/// Kubernetes version priority: GA before beta before alpha, higher numbers first.
fn version_priority(a: &str, b: &str) -> Ordering {
    fn key(v: &str) -> (u8, u64, u64) {
        let Some(rest) = v.strip_prefix('v') else { return (0, 0, 0) };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(major) = digits.parse::<u64>() else { return (0, 0, 0) };
        let tail = &rest[digits.len()..];
        let (level, minor) = if tail.is_empty() {
            (3, 0)
        } else if let Some(n) = tail.strip_prefix("beta") {
            (2, n.parse().unwrap_or(0))
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (1, n.parse().unwrap_or(0))
        } else {
            (0, 0)
        };
        (level, major, minor)
    }
    key(b).cmp(&key(a)).then_with(|| a.cmp(b))
}

/// The served groups (not core), each with its versions in priority order.
fn group_versions(reg: &Registry) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in reg.all().iter().filter(|t| !t.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, vs)) if !vs.contains(&t.version) => vs.push(t.version.clone()),
            Some(_) => {}
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    for (_, vs) in &mut out {
        vs.sort_by(|a, b| version_priority(a, b));
    }
    out
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = group_versions(reg).iter().map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if served.
pub fn group(reg: &Registry, group: &str) -> Option<Value> {
    let (g, vs) = group_versions(reg).into_iter().find(|(g, _)| g == group)?;
    let mut v = group_json(&g, &vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

const VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

fn resource_entries(t: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": t.plural,
        "singularName": t.singular,
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": VERBS,
    });
    if !t.short_names.is_empty() {
        main["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        main["categories"] = json!(t.categories);
    }
    let mut out = vec![main];
    if t.status {
        out.push(json!({
            "name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
            "kind": t.kind, "verbs": ["get", "patch", "update"],
        }));
    }
    if t.builtin == Builtin::Pod {
        out.push(json!({
            "name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"],
        }));
        out.push(json!({
            "name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1",
            "kind": "Eviction", "verbs": ["create"],
        }));
    }
    out
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resources(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = reg.all().iter().filter(|t| t.group == group && t.version == version).collect();
    if types.is_empty() {
        return None;
    }
    let mut resources: Vec<Value> = types.iter().flat_map(|t| resource_entries(t)).collect();
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": crate::registry::api_version(group, version),
        "resources": resources,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority_orders_like_kubernetes() {
        let mut vs = vec!["v1alpha1", "v1beta1", "v2", "v1", "v1beta2", "foo"];
        vs.sort_by(|a, b| version_priority(a, b));
        assert_eq!(vs, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
