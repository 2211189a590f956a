//! HTTP front: routing, body decoding, content negotiation (JSON or `meta.k8s.io/v1 Table`)
//! and the mapping of verbs to [`crate::ops`]. Handlers never hold the store lock across an
//! await.

pub mod admin;
mod route;
mod table;
mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::faults::Faults;
use crate::ops;
use crate::patch::PatchType;
use crate::registry::{Builtin, ResourceType};
use crate::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::store::Store;
use route::{ResourcePath, Route};

/// Everything the handlers share: the store, the fault switches and the state file.
pub struct Shared {
    /// The cluster state; lock briefly, never across an await.
    pub store: Mutex<Store>,
    /// Fault injection switches.
    pub faults: Faults,
    /// Where state is saved on stop and on `POST /_emulator/persist`.
    pub state_file: Option<PathBuf>,
}

impl Shared {
    /// Locks the store (a poisoned lock is recovered: every operation commits atomically).
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The axum app serving the API.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// A JSON response with `Content-Type: application/json`.
pub fn json_response(code: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (code, [(CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding response: {e}")).into_response(),
    }
}

fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

const MAX_BODY: usize = 3 * 1024 * 1024;

async fn read_body(body: Body) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::new(413, "RequestEntityTooLarge", format!("reading the request body: {e}")))
}

fn header(parts: &Parts, name: axum::http::HeaderName) -> &str {
    parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// Decodes a JSON (or YAML) request body.
fn decode(parts: &Parts, body: &[u8]) -> ApiResult<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    let ct = header(parts, CONTENT_TYPE);
    let media = ct.split(';').next().unwrap_or_default().trim();
    match media {
        "" | "application/json" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding the request body: {e}"))),
        "application/yaml" | "application/x-yaml" => {
            serde_yaml::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
        }
        other => Err(ApiError::unsupported_media(other)),
    }
}

async fn handle(State(sh): State<Arc<Shared>>, req: Request) -> Response {
    let latency = sh.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let (parts, body) = req.into_parts();
    let resp = dispatch(&sh, &parts, body).await.unwrap_or_else(IntoResponse::into_response);
    tracing::debug!(method = %parts.method, uri = %parts.uri, status = resp.status().as_u16(), "request");
    resp
}

async fn dispatch(sh: &Arc<Shared>, parts: &Parts, body: Body) -> ApiResult<Response> {
    let route = route::parse(parts.uri.path());
    let read_only = parts.method == Method::GET || parts.method == Method::HEAD;
    let ok = |v: Option<Value>| v.map(|v| json_response(StatusCode::OK, &v)).ok_or_else(ApiError::no_route);
    match route {
        Route::Resource(rp) => resource(sh, parts, body, rp).await,
        Route::Admin(what) => {
            let bytes = read_body(body).await?;
            admin::handle(sh, &parts.method, &what, &bytes).await
        }
        Route::Unknown => Err(ApiError::no_route()),
        _ if !read_only => Err(ApiError::method_not_allowed(&format!("{} {}", parts.method, parts.uri.path()))),
        Route::Version => ok(Some(crate::discovery::version())),
        Route::Health => Ok((StatusCode::OK, "ok").into_response()),
        Route::CoreVersions => ok(Some(crate::discovery::core_versions(header(parts, axum::http::header::HOST)))),
        Route::Groups => ok(Some(crate::discovery::groups(&sh.lock().registry))),
        Route::Group(g) => ok(crate::discovery::group(&sh.lock().registry, &g)),
        Route::Resources(g, v) => ok(crate::discovery::resources(&sh.lock().registry, &g, &v)),
        Route::OpenApiRoot => ok(Some(crate::openapi::root(&sh.lock().registry))),
        Route::OpenApi(gv) => ok(crate::openapi::group_version(&sh.lock().registry, &gv)),
    }
}

/// Query parameters of a resource request.
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|v| !v.is_empty())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }

    fn selectors(&self, rt: &ResourceType) -> ApiResult<Selectors> {
        Ok(Selectors {
            labels: LabelSelector::parse(self.get("labelSelector").unwrap_or_default())?,
            fields: FieldSelector::parse(self.get("fieldSelector").unwrap_or_default(), rt.builtin)?,
        })
    }
}

fn object_response(code: StatusCode, rt: &ResourceType, obj: &Value) -> Response {
    json_response(code, &*ops::served(obj, rt))
}

#[derive(Serialize)]
struct ListOut<'a> {
    kind: &'a str,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: Value,
    items: Vec<std::borrow::Cow<'a, Value>>,
}

async fn resource(sh: &Arc<Shared>, parts: &Parts, body: Body, rp: ResourcePath) -> ApiResult<Response> {
    let params = Params(
        Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?
            .0,
    );
    let rt = sh.lock().registry.find(&rp.group, &rp.version, &rp.plural).ok_or_else(ApiError::no_route)?;
    let sub = rp.sub.as_deref();
    let sub_ok = match sub {
        None => true,
        Some("status") => rt.status,
        Some("binding" | "eviction") => rt.builtin == Builtin::Pod,
        Some(_) => false,
    };
    if !sub_ok
        || (!rt.namespaced && rp.namespace.is_some())
        || (rt.namespaced && rp.name.is_some() && rp.namespace.is_none())
    {
        return Err(ApiError::no_route());
    }
    let method = parts.method.clone();
    if matches!(method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
        if params.get("dryRun").is_some() {
            return Err(ApiError::bad_request("dryRun is not supported by this emulator"));
        }
        if let Some(code) = sh.faults.take_write_fault(&rt.group, &rt.plural, sub) {
            return Err(ApiError::injected(code, &rt.plural));
        }
    }
    let ns = rp.namespace.clone().unwrap_or_default();
    let accept = header(parts, ACCEPT);
    let as_table = table::wants_table(accept);
    let strict = match params.get("fieldValidation") {
        None | Some("Ignore" | "Warn") => false,
        Some("Strict") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, got {other:?}"
            )))
        }
    };
    let mode = ops::Mode { status_only: sub == Some("status"), strict };
    match (&method, rp.name.as_deref(), sub) {
        (&Method::GET, None, None) => {
            let sel = params.selectors(&rt)?;
            if rp.watch_prefix || params.flag("watch") {
                return watch::start(sh, rt, rp.namespace, sel, &params, as_table);
            }
            let (items, rv) = {
                let store = sh.lock();
                if params.get("resourceVersionMatch") == Some("Exact")
                    && params.get("resourceVersion").is_some_and(|v| v != store.rv().to_string())
                {
                    return Err(ApiError::expired("the exact resourceVersion asked for is no longer available; this server lists only the latest state"));
                }
                ops::list(&store, &rt, rp.namespace.as_deref(), &sel)
            };
            if as_table {
                let refs: Vec<&Value> = items.iter().map(|o| &**o).collect();
                return Ok(json_response(StatusCode::OK, &table::table(&rt, &refs, rv, params.get("includeObject"))));
            }
            let out = ListOut {
                kind: &rt.list_kind,
                api_version: rt.api_version(),
                metadata: json!({"resourceVersion": rv.to_string()}),
                items: items.iter().map(|o| ops::served(o, &rt)).collect(),
            };
            Ok(json_response(StatusCode::OK, &out))
        }
        (&Method::GET, Some(name), None | Some("status")) => {
            let obj = ops::get(&sh.lock(), &rt, &ns, name)?;
            if as_table {
                let rv = crate::meta::meta_str(&obj, "resourceVersion").parse().unwrap_or(0);
                return Ok(json_response(StatusCode::OK, &table::table(&rt, &[&obj], rv, params.get("includeObject"))));
            }
            Ok(object_response(StatusCode::OK, &rt, &obj))
        }
        (&Method::POST, None, None) => {
            if rt.namespaced && rp.namespace.is_none() {
                return Err(ApiError::method_not_allowed("create needs a namespace in the path"));
            }
            let obj = decode(parts, &read_body(body).await?)?;
            let created = ops::create(&mut sh.lock(), &rt, &ns, obj, strict)?;
            Ok(object_response(StatusCode::CREATED, &rt, &created))
        }
        (&Method::POST, Some(name), Some(s @ ("binding" | "eviction"))) => {
            let obj = decode(parts, &read_body(body).await?)?;
            if s == "binding" {
                ops::bind(&mut sh.lock(), &rt, &ns, name, &obj)?;
            } else {
                ops::evict(&mut sh.lock(), &rt, &ns, name, &obj)?;
            }
            Ok(json_response(StatusCode::CREATED, &success_status(201)))
        }
        (&Method::PUT, Some(name), None | Some("status")) => {
            let obj = decode(parts, &read_body(body).await?)?;
            let (out, created) = ops::update(&mut sh.lock(), &rt, &ns, name, obj, mode)?;
            let code = if created { StatusCode::CREATED } else { StatusCode::OK };
            Ok(object_response(code, &rt, &out))
        }
        (&Method::PATCH, Some(name), None | Some("status")) => {
            let kind = PatchType::from_content_type(header(parts, CONTENT_TYPE))?;
            let bytes = read_body(body).await?;
            if kind == PatchType::Apply {
                let manager = params.get("fieldManager").ok_or_else(|| {
                    ApiError::bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
                })?;
                let (out, created) = ops::apply(&mut sh.lock(), &rt, &ns, name, &bytes, manager, mode)?;
                let code = if created { StatusCode::CREATED } else { StatusCode::OK };
                return Ok(object_response(code, &rt, &out));
            }
            let out = ops::patch(&mut sh.lock(), &rt, &ns, name, kind, &bytes, mode)?;
            Ok(object_response(StatusCode::OK, &rt, &out))
        }
        (&Method::DELETE, Some(name), None) => {
            let bytes = read_body(body).await?;
            let opts = if bytes.iter().all(u8::is_ascii_whitespace) { json!({}) } else { decode(parts, &bytes)? };
            let grace = match params.get("gracePeriodSeconds") {
                None => None,
                Some(g) => {
                    Some(g.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?)
                }
            };
            let out = ops::delete(&mut sh.lock(), &rt, &ns, name, &ops::DeleteOptions::from_body(&opts, grace))?;
            Ok(object_response(StatusCode::OK, &rt, &out))
        }
        (&Method::DELETE, None, None) => {
            let sel = params.selectors(&rt)?;
            let deleted = ops::delete_collection(&mut sh.lock(), &rt, rp.namespace.as_deref(), &sel);
            let out = ListOut {
                kind: &rt.list_kind,
                api_version: rt.api_version(),
                metadata: json!({"resourceVersion": sh.lock().rv().to_string()}),
                items: deleted.iter().map(|o| ops::served(o, &rt)).collect(),
            };
            Ok(json_response(StatusCode::OK, &out))
        }
        _ => Err(ApiError::method_not_allowed(&format!(
            "{method} on {}{}",
            rt.plural,
            sub.map(|s| format!("/{s}")).unwrap_or_default()
        ))),
    }
}
