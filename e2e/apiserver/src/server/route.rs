//! Parses request paths into what they address, following the real server's URL layout
//! (`/api/v1/namespaces/{ns}/{resource}/{name}/{subresource}`, `/apis/{group}/{version}/...`).

/// A resource URL, before the resource is looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// Namespace segment, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource, if any.
    pub sub: Option<String>,
    /// The legacy `/watch/` path prefix was used.
    pub watch_prefix: bool,
}

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`.
    Resources(String, String),
    /// A resource, collection or object.
    Resource(ResourcePath),
    /// `/openapi/v3`.
    OpenApiRoot,
    /// `/openapi/v3/{api/v1 | apis/g/v}`.
    OpenApi(String),
    /// `/_emulator/{what}`.
    Admin(String),
    /// Anything else.
    Unknown,
}

fn resource(group: &str, version: &str, rest: &[&str]) -> Route {
    let (watch_prefix, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !(tail.is_empty() && matches!(*plural, "status" | "finalize")) => {
            (Some(ns.to_string()), &rest[2..])
        }
        _ => (None, rest),
    };
    match rest {
        [plural, tail @ ..] if tail.len() <= 2 && !plural.is_empty() && tail.iter().all(|s| !s.is_empty()) => {
            Route::Resource(ResourcePath {
                group: group.to_string(),
                version: version.to_string(),
                plural: plural.to_string(),
                namespace,
                name: tail.first().map(|s| s.to_string()),
                sub: tail.get(1).map(|s| s.to_string()),
                watch_prefix,
            })
        }
        _ => Route::Unknown,
    }
}

/// Parses a URL path.
pub fn parse(path: &str) -> Route {
    let trimmed = path.trim_start_matches('/').trim_end_matches('/');
    let segs: Vec<&str> = trimmed.split('/').collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["_emulator", what] => Route::Admin(what.to_string()),
        ["openapi", "v3"] => Route::OpenApiRoot,
        ["openapi", "v3", rest @ ..] => Route::OpenApi(rest.join("/")),
        ["api"] => Route::CoreVersions,
        ["api", v] => Route::Resources(String::new(), v.to_string()),
        ["api", v, rest @ ..] => resource("", v, rest),
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group(g.to_string()),
        ["apis", g, v] => Route::Resources(g.to_string(), v.to_string()),
        ["apis", g, v, rest @ ..] => resource(g, v, rest),
        _ => Route::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(ns: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>) -> Route {
        Route::Resource(ResourcePath {
            group: String::new(),
            version: "v1".into(),
            plural: plural.into(),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            sub: sub.map(Into::into),
            watch_prefix: false,
        })
    }

    #[test]
    fn namespaced_and_namespace_paths() {
        assert_eq!(parse("/api/v1/namespaces/a/pods/p/binding"), rp(Some("a"), "pods", Some("p"), Some("binding")));
        assert_eq!(parse("/api/v1/namespaces/a/pods"), rp(Some("a"), "pods", None, None));
        assert_eq!(parse("/api/v1/namespaces/a"), rp(None, "namespaces", Some("a"), None));
        assert_eq!(parse("/api/v1/namespaces/a/status"), rp(None, "namespaces", Some("a"), Some("status")));
        assert_eq!(parse("/api/v1/pods"), rp(None, "pods", None, None));
        assert_eq!(parse("/api/v1/nodes/n1/status"), rp(None, "nodes", Some("n1"), Some("status")));
        assert_eq!(parse("/api/v1/namespaces/a/pods/p/x/y"), Route::Unknown);
        assert_eq!(parse("/apis/g.io/v1"), Route::Resources("g.io".into(), "v1".into()));
    }
}
