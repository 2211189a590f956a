//! API errors rendered as Kubernetes `Status` objects, so clients see the same bodies a real
//! API server sends.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// One cause of an `Invalid` (422) error, as in `Status.details.causes[]`.
#[derive(Debug, Clone)]
pub struct Cause {
    /// A `FieldValue*` reason such as `FieldValueRequired`.
    pub reason: String,
    /// The human message, usually starting with `Invalid value:` or `Required value`.
    pub message: String,
    /// The field path, e.g. `spec.tasks[0].replicas`.
    pub field: String,
}

/// An error answered to the client as a `Status` with the given HTTP code and reason.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, when the real server sends one.
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429).
    pub retry_after: Option<u32>,
}

/// The result type of every API operation.
pub type ApiResult<T> = Result<T, ApiError>;

/// Names the resource in messages and `details`, as the real server does (`pods`, `jobs.batch.x`).
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// API group; empty for core.
    pub group: &'a str,
    /// Plural resource name.
    pub plural: &'a str,
}

impl Subject<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn details(&self, name: &str) -> Value {
        let mut d = json!({"name": name, "kind": self.plural});
        if !self.group.is_empty() {
            d["group"] = json!(self.group);
        }
        d
    }
}

impl ApiError {
    /// An error with no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError { code, reason: reason.to_string(), message: message.into(), details: None, retry_after: None }
    }

    /// 400 BadRequest: a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 for a path or resource this server does not serve.
    pub fn no_route() -> Self {
        let mut e = Self::new(404, "NotFound", "the server could not find the requested resource");
        e.details = Some(json!({}));
        e
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({what})"),
        )
    }

    /// 415 for a body type this server cannot decode.
    pub fn unsupported_media(ct: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {ct:?})"))
    }

    /// 404 NotFound for a named object.
    pub fn not_found(subject: Subject<'_>, name: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("{} \"{}\" not found", subject.qualified(), name));
        e.details = Some(subject.details(name));
        e
    }

    /// 409 AlreadyExists on create.
    pub fn already_exists(subject: Subject<'_>, name: &str) -> Self {
        let mut e = Self::new(409, "AlreadyExists", format!("{} \"{}\" already exists", subject.qualified(), name));
        e.details = Some(subject.details(name));
        e
    }

    /// 409 Conflict, with the real server's message prefix.
    pub fn conflict(subject: Subject<'_>, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{}\": {}", subject.qualified(), name, why),
        );
        e.details = Some(subject.details(name));
        e
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(subject: Subject<'_>, name: &str) -> Self {
        Self::conflict(
            subject,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 403 Forbidden, as admission plugins answer.
    pub fn forbidden(subject: Subject<'_>, name: &str, why: &str) -> Self {
        let mut e = Self::new(403, "Forbidden", format!("{} \"{}\" is forbidden: {}", subject.qualified(), name, why));
        e.details = Some(subject.details(name));
        e
    }

    /// 410 Gone with reason Expired, for a resourceVersion older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 422 Invalid, listing every cause; `kind_group` is like `Job.batch.drover.dev` or `Pod`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let kind_group = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let parts: Vec<String> = causes
            .iter()
            .map(|c| if c.field.is_empty() { c.message.clone() } else { format!("{}: {}", c.field, c.message) })
            .collect();
        let summary = if parts.len() == 1 { parts[0].clone() } else { format!("[{}]", parts.join(", ")) };
        let mut e = Self::new(422, "Invalid", format!("{kind_group} \"{name}\" is invalid: {summary}"));
        let causes: Vec<Value> =
            causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect();
        let mut details = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        e.details = Some(details);
        e
    }

    /// An injected failure with the given code (fault injection).
    pub fn injected(code: u16, resource: &str) -> Self {
        let reason = match code {
            409 => "Conflict",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            400 => "BadRequest",
            403 => "Forbidden",
            404 => "NotFound",
            _ => "Unknown",
        };
        let mut e = Self::new(code, reason, format!("injected fault: {resource} write failed with {code}"));
        if code == 429 {
            e.retry_after = Some(1);
            e.details = Some(json!({"retryAfterSeconds": 1}));
        }
        e
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = crate::server::json_response(code, &self.status());
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert("retry-after", HeaderValue::from(secs));
        }
        resp
    }
}
