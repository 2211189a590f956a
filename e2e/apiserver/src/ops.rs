//! The API verbs on the store, independent of HTTP: create, get, list, update, patch, apply,
//! delete (with finalizers and preconditions) and the pod `binding`/`eviction` subresources.
//! Every function runs under the store lock and either commits fully or changes nothing.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Cause, Subject};
use crate::meta::{finalizers, is_deleting, meta_str, metadata_mut, name_suffix, new_uid, now_rfc3339, rfc3339_after};
use crate::patch::{apply_merge, apply_patch, parse_apply, record_manager, PatchType};
use crate::registry::{api_version, storage_key, Builtin, ResourceType};
use crate::selectors::Selectors;
use crate::store::Store;
use crate::strategy;

/// The object as served at the request's version (CRDs store one version; no conversion
/// beyond `apiVersion` is done).
pub fn served<'a>(obj: &'a Value, rt: &ResourceType) -> Cow<'a, Value> {
    if rt.version == rt.storage_version {
        Cow::Borrowed(obj)
    } else {
        let mut o = obj.clone();
        o["apiVersion"] = json!(rt.api_version());
        Cow::Owned(o)
    }
}

fn storage_api_version(rt: &ResourceType) -> String {
    api_version(&rt.group, &rt.storage_version)
}

/// Checks `apiVersion`/`kind` of a body against the URL, then sets them to the stored form.
fn check_type_meta(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    };
    if let Some(v) = map.get("apiVersion").and_then(Value::as_str) {
        if v != rt.api_version() {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                rt.api_version()
            )));
        }
    }
    if let Some(k) = map.get("kind").and_then(Value::as_str) {
        if k != rt.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    map.insert("apiVersion".into(), json!(storage_api_version(rt)));
    map.insert("kind".into(), json!(rt.kind));
    Ok(())
}

fn check_url_name_ns(rt: &ResourceType, obj: &mut Value, ns: &str, name: &str) -> ApiResult<()> {
    let meta = metadata_mut(obj);
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        _ => {
            meta.insert("name".into(), json!(name));
        }
    }
    if rt.namespaced {
        if let Some(n) = meta.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty() && *n != ns) {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({n}) does not match the namespace sent on the request ({ns})"
            )));
        }
    }
    Ok(())
}

/// Writes an object and keeps the registry in step with CRDs.
fn commit(store: &mut Store, rt: &ResourceType, obj: Value) -> Arc<Value> {
    let out = store.put(&rt.storage_key(), obj);
    if rt.builtin == Builtin::Crd {
        store.registry.register_crd(&out);
        for v in out["spec"]["versions"].as_array().into_iter().flatten() {
            let Some(schema) = v.get("schema").and_then(|s| s.get("openAPIV3Schema")) else { continue };
            let rules = crate::validation::unchecked_rules(schema);
            if !rules.is_empty() {
                tracing::warn!(crd = meta_str(&out, "name"), version = %v["name"], ?rules, "CEL rules this emulator does not enforce");
            }
        }
    }
    out
}

/// How an update-like write (PUT, PATCH, apply) treats the body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mode {
    /// The write goes to the `status` subresource: only `.status` changes.
    pub status_only: bool,
    /// `fieldValidation=Strict`: unknown fields of a custom resource are an error.
    pub strict: bool,
}

/// An object by name.
pub fn get(store: &Store, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Arc<Value>> {
    store.get(&rt.storage_key(), ns, name).cloned().ok_or_else(|| ApiError::not_found(rt.subject(), name))
}

/// The matching objects and the resourceVersion of the list.
pub fn list(store: &Store, rt: &ResourceType, ns: Option<&str>, sel: &Selectors) -> (Vec<Arc<Value>>, u64) {
    let items = store.list(&rt.storage_key(), ns).filter(|o| sel.matches(o)).cloned().collect();
    (items, store.rv())
}

/// POST: creates an object in `ns` ("" for cluster-scoped). `strict` is
/// `fieldValidation=Strict`: unknown fields of a custom resource are an error, not pruned.
pub fn create(store: &mut Store, rt: &ResourceType, ns: &str, mut obj: Value, strict: bool) -> ApiResult<Arc<Value>> {
    check_type_meta(rt, &mut obj)?;
    let key = rt.storage_key();
    let ns = if rt.namespaced { ns } else { "" };
    let meta = metadata_mut(&mut obj);
    if rt.namespaced {
        if let Some(n) = meta.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty() && *n != ns) {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({n}) does not match the namespace sent on the request ({ns})"
            )));
        }
        meta.insert("namespace".into(), json!(ns));
    } else {
        meta.remove("namespace");
    }
    let mut name = meta.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    if name.is_empty() {
        let prefix = meta.get("generateName").and_then(Value::as_str).unwrap_or_default().to_string();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                "",
                vec![Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
            ));
        }
        name = loop {
            let candidate = format!("{prefix}{}", name_suffix());
            if store.get(&key, ns, &candidate).is_none() {
                break candidate;
            }
        };
    }
    let meta = metadata_mut(&mut obj);
    meta.insert("name".into(), json!(name));
    meta.insert("uid".into(), json!(new_uid()));
    meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
    meta.insert("generation".into(), json!(1));
    for f in ["deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink"] {
        meta.remove(f);
    }
    strategy::check_name(rt, &name)?;
    if rt.namespaced {
        match store.get("namespaces", "", ns) {
            None => return Err(ApiError::not_found(Subject { group: "", plural: "namespaces" }, ns)),
            Some(n) if is_deleting(n) => {
                return Err(ApiError::forbidden(
                    rt.subject(),
                    &name,
                    &format!("unable to create new content in namespace {ns} because it is being terminated"),
                ))
            }
            Some(_) => {}
        }
    }
    if store.get(&key, ns, &name).is_some() {
        return Err(ApiError::already_exists(rt.subject(), &name));
    }
    strategy::prepare_create(store, rt, &mut obj, strict)?;
    Ok(commit(store, rt, obj))
}

/// PUT: replaces an object (or its status). Returns the object and whether it was created.
pub fn update(
    store: &mut Store,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    mut new: Value,
    mode: Mode,
) -> ApiResult<(Arc<Value>, bool)> {
    check_type_meta(rt, &mut new)?;
    check_url_name_ns(rt, &mut new, ns, name)?;
    let Some(old) = store.get(&rt.storage_key(), ns, name).cloned() else {
        if rt.create_on_update && !mode.status_only {
            return create(store, rt, ns, new, mode.strict).map(|o| (o, true));
        }
        return Err(ApiError::not_found(rt.subject(), name));
    };
    let rv = meta_str(&new, "resourceVersion");
    if rv.is_empty() {
        if !rt.unconditional_update {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                name,
                vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message: "Invalid value: 0x0: must be specified for an update".into(),
                    field: "metadata.resourceVersion".into(),
                }],
            ));
        }
    } else if rv != meta_str(&old, "resourceVersion") {
        return Err(ApiError::stale(rt.subject(), name));
    }
    commit_update(store, rt, &old, new, mode).map(|o| (o, false))
}

fn immutable(rt: &ResourceType, name: &str, field: &str, value: &str) -> ApiError {
    ApiError::invalid(
        &rt.kind,
        &rt.group,
        name,
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {value:?}: field is immutable"),
            field: format!("metadata.{field}"),
        }],
    )
}

/// Whether anything outside `metadata` (and `status`, when split off) differs.
fn spec_changed(a: &Value, b: &Value, skip_status: bool) -> bool {
    let skip = |k: &str| k == "metadata" || k == "apiVersion" || k == "kind" || (skip_status && k == "status");
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return a != b };
    a.iter().filter(|(k, _)| !skip(k)).any(|(k, v)| b.get(k) != Some(v))
        || b.keys().filter(|k| !skip(k)).any(|k| !a.contains_key(k))
}

/// The shared tail of PUT, patch and apply: status split, server-owned metadata, finalizer
/// rules, type checks, generation, then the write (or the final delete when the last
/// finalizer of a deleting object goes).
fn commit_update(
    store: &mut Store,
    rt: &ResourceType,
    old: &Arc<Value>,
    mut new: Value,
    mode: Mode,
) -> ApiResult<Arc<Value>> {
    let name = meta_str(old, "name").to_string();
    if !new.is_object() {
        return Err(ApiError::bad_request("the object must be a JSON object"));
    }
    for f in ["name", "namespace", "uid"] {
        let v = meta_str(&new, f);
        if !v.is_empty() && v != meta_str(old, f) {
            return Err(immutable(rt, &name, f, v));
        }
    }
    if mode.status_only {
        let mut merged = (**old).clone();
        match new.get("status") {
            Some(s) => merged["status"] = s.clone(),
            None => {
                merged.as_object_mut().map(|m| m.remove("status"));
            }
        }
        new = merged;
    } else if rt.status {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                new.as_object_mut().map(|m| m.remove("status"));
            }
        }
    }
    new["apiVersion"] = json!(storage_api_version(rt));
    new["kind"] = json!(rt.kind);
    let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
    let meta = metadata_mut(&mut new);
    for f in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match old_meta.get(f) {
            Some(v) => meta.insert(f.into(), v.clone()),
            None => meta.remove(f),
        };
    }
    if is_deleting(old) {
        let before = finalizers(old);
        let added: Vec<String> = finalizers(&new).into_iter().filter(|f| !before.contains(f)).collect();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                &name,
                vec![Cause {
                    reason: "FieldValueForbidden".into(),
                    message: format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                    field: "metadata.finalizers".into(),
                }],
            ));
        }
    }
    strategy::prepare_update(store, rt, &mut new, old, mode.strict)?;
    if spec_changed(&new, old, rt.status) {
        let gen = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        metadata_mut(&mut new).insert("generation".into(), json!(gen));
    }
    if new == **old {
        return Ok(old.clone());
    }
    let grace_over = new["metadata"]["deletionGracePeriodSeconds"].as_i64().is_none_or(|g| g == 0);
    if is_deleting(&new) && finalizers(&new).is_empty() && grace_over {
        return Ok(remove_now(store, rt, &new));
    }
    Ok(commit(store, rt, new))
}

/// PATCH with a merge, strategic (as merge) or JSON patch.
pub fn patch(
    store: &mut Store,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    kind: PatchType,
    body: &[u8],
    mode: Mode,
) -> ApiResult<Arc<Value>> {
    if kind == PatchType::Strategic && rt.builtin == Builtin::Custom {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let old = get(store, rt, ns, name)?;
    let mut new = served(&old, rt).into_owned();
    apply_patch(kind, &mut new, body)?;
    let rv = meta_str(&new, "resourceVersion");
    if !rv.is_empty() && rv != meta_str(&old, "resourceVersion") {
        return Err(ApiError::stale(rt.subject(), name));
    }
    commit_update(store, rt, &old, new, mode)
}

/// PATCH with `application/apply-patch+yaml`: the simplified server-side apply (creates a
/// missing object). Returns the object and whether it was created.
pub fn apply(
    store: &mut Store,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    body: &[u8],
    manager: &str,
    mode: Mode,
) -> ApiResult<(Arc<Value>, bool)> {
    let mut applied = parse_apply(body)?;
    for f in ["apiVersion", "kind"] {
        if applied.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!("{f} must be set in an applied configuration")));
        }
    }
    let mut typed = applied.clone();
    check_type_meta(rt, &mut typed)?;
    check_url_name_ns(rt, &mut applied, ns, name)?;
    let sub = mode.status_only.then_some("status");
    let Some(old) = store.get(&rt.storage_key(), ns, name).cloned() else {
        if mode.status_only {
            return Err(ApiError::not_found(rt.subject(), name));
        }
        let mut obj = applied.clone();
        record_manager(&mut obj, &applied, manager, &rt.api_version(), None);
        return create(store, rt, ns, obj, mode.strict).map(|o| (o, true));
    };
    let rv = meta_str(&applied, "resourceVersion");
    if !rv.is_empty() && rv != meta_str(&old, "resourceVersion") {
        return Err(ApiError::stale(rt.subject(), name));
    }
    let mut new = served(&old, rt).into_owned();
    apply_merge(&mut new, &applied);
    record_manager(&mut new, &applied, manager, &rt.api_version(), sub);
    commit_update(store, rt, &old, new, mode).map(|o| (o, false))
}

/// The parts of `DeleteOptions` that change the outcome.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `gracePeriodSeconds` (pods only; other types are deleted at once).
    pub grace: Option<i64>,
}

impl DeleteOptions {
    /// Reads a DeleteOptions body; `query_grace` is the `gracePeriodSeconds` query parameter.
    pub fn from_body(opts: &Value, query_grace: Option<i64>) -> Self {
        let p = &opts["preconditions"];
        DeleteOptions {
            uid: p["uid"].as_str().map(str::to_string),
            resource_version: p["resourceVersion"].as_str().map(str::to_string),
            grace: opts["gracePeriodSeconds"].as_i64().or(query_grace),
        }
    }
}

/// DELETE: removes the object, or marks it deleting while finalizers remain (or, for a pod
/// running on a node, until the kubelet confirms after the grace period).
pub fn delete(
    store: &mut Store,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> ApiResult<Arc<Value>> {
    let old = get(store, rt, ns, name)?;
    if let Some(uid) = &opts.uid {
        let actual = meta_str(&old, "uid");
        if uid != actual {
            return Err(ApiError::conflict(
                rt.subject(),
                name,
                &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
            ));
        }
    }
    if let Some(rv) = &opts.resource_version {
        let actual = meta_str(&old, "resourceVersion");
        if rv != actual {
            return Err(ApiError::conflict(
                rt.subject(),
                name,
                &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"),
            ));
        }
    }
    if opts.grace.is_some_and(|g| g < 0) {
        return Err(ApiError::invalid(
            "DeleteOptions",
            "",
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: must be >= 0".into(),
                field: "gracePeriodSeconds".into(),
            }],
        ));
    }
    Ok(delete_object(store, rt, &old, opts.grace))
}

/// The grace period of a pod deletion, as the pod strategy decides it: none for a pod not on
/// a node or already finished, else the asked one or `terminationGracePeriodSeconds`.
fn pod_grace(pod: &Value, asked: Option<i64>) -> i64 {
    let unbound = pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
    let finished = matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    if unbound || finished {
        return 0;
    }
    asked.unwrap_or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30)).max(0)
}

/// Deletes an existing object honouring finalizers and (for pods) the grace period.
fn delete_object(store: &mut Store, rt: &ResourceType, old: &Arc<Value>, grace: Option<i64>) -> Arc<Value> {
    let grace = if rt.builtin == Builtin::Pod { pod_grace(old, grace) } else { 0 };
    let has_finalizers = !finalizers(old).is_empty();
    if grace == 0 && !has_finalizers {
        return remove_now(store, rt, old);
    }
    let mut obj = (**old).clone();
    if is_deleting(old) {
        let current = old["metadata"]["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
        if grace >= current {
            return old.clone();
        }
    } else {
        let gen = obj["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        metadata_mut(&mut obj).insert("generation".into(), json!(gen));
    }
    let meta = metadata_mut(&mut obj);
    meta.insert("deletionTimestamp".into(), json!(rfc3339_after(grace)));
    meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
    commit(store, rt, obj)
}

/// Removes the object now and cascades: a CRD takes its custom resources with it, a
/// namespace deletes its contents.
fn remove_now(store: &mut Store, rt: &ResourceType, obj: &Value) -> Arc<Value> {
    let (ns, name) = (meta_str(obj, "namespace").to_string(), meta_str(obj, "name").to_string());
    let removed = store.remove(&rt.storage_key(), &ns, &name).unwrap_or_else(|| Arc::new(obj.clone()));
    match rt.builtin {
        Builtin::Crd => {
            let key = storage_key(
                removed["spec"]["group"].as_str().unwrap_or_default(),
                removed["spec"]["names"]["plural"].as_str().unwrap_or_default(),
            );
            let keys: Vec<(String, String)> = store
                .list(&key, None)
                .map(|o| (meta_str(o, "namespace").to_string(), meta_str(o, "name").to_string()))
                .collect();
            for (ns, name) in keys {
                store.remove(&key, &ns, &name);
            }
            store.registry.unregister(&key);
        }
        Builtin::Namespace => {
            let mut keys: Vec<String> =
                store.registry.all().iter().filter(|t| t.namespaced).map(|t| t.storage_key()).collect();
            keys.dedup();
            for key in keys {
                let Some(t) = store.registry.find_storage(&key) else { continue };
                let objs: Vec<Arc<Value>> = store.list(&key, Some(&name)).cloned().collect();
                for o in objs {
                    delete_object(store, &t, &o, None);
                }
            }
        }
        _ => {}
    }
    removed
}

/// DELETE on a collection: deletes every matching object. Returns the deleted objects.
pub fn delete_collection(store: &mut Store, rt: &ResourceType, ns: Option<&str>, sel: &Selectors) -> Vec<Arc<Value>> {
    let (items, _) = list(store, rt, ns, sel);
    items.iter().map(|o| delete_object(store, rt, o, None)).collect()
}

fn pod_subject(sub: &'static str) -> Subject<'static> {
    Subject { group: "", plural: sub }
}

/// POST `pods/{name}/binding`: assigns the pod to `target.name`.
pub fn bind(store: &mut Store, rt: &ResourceType, ns: &str, name: &str, body: &Value) -> ApiResult<()> {
    let target = body["target"]["name"].as_str().unwrap_or_default();
    if target.is_empty() {
        return Err(ApiError::invalid(
            "Binding",
            "",
            name,
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "target.name".into(),
            }],
        ));
    }
    let bname = meta_str(body, "name");
    if !bname.is_empty() && bname != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({bname}) does not match the name on the URL ({name})"
        )));
    }
    let old = get(store, rt, ns, name)?;
    if is_deleting(&old) {
        return Err(ApiError::conflict(
            pod_subject("pods/binding"),
            name,
            &format!("pod {name} is being deleted, cannot be assigned to a host"),
        ));
    }
    if let Some(node) = old["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(ApiError::conflict(
            pod_subject("pods/binding"),
            name,
            &format!("pod {name} is already assigned to node {node:?}"),
        ));
    }
    let mut pod = (*old).clone();
    pod["spec"]["nodeName"] = json!(target);
    if let Some(ann) = body["metadata"]["annotations"].as_object() {
        let meta = metadata_mut(&mut pod);
        let dst = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(dst) = dst.as_object_mut() {
            dst.extend(ann.clone());
        }
    }
    let conds = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
    conds.push(strategy::scheduled_condition());
    pod["status"]["conditions"] = json!(conds);
    commit(store, rt, pod);
    Ok(())
}

/// POST `pods/{name}/eviction`: deletes the pod as a DELETE with the eviction's options would.
pub fn evict(store: &mut Store, rt: &ResourceType, ns: &str, name: &str, body: &Value) -> ApiResult<()> {
    let bname = meta_str(body, "name");
    if !bname.is_empty() && bname != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({bname}) does not match the name on the URL ({name})"
        )));
    }
    delete(store, rt, ns, name, &DeleteOptions::from_body(&body["deleteOptions"], None))?;
    Ok(())
}
