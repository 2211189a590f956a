//! The `/_emulator/` admin endpoint: fault injection and saving state over HTTP, for tests
//! that run the emulator as a separate process.
//!
//! - `POST /_emulator/faults` with any of `{"dropWatches": true}`,
//!   `{"failWrites": {"resource": "pods", "count": 2, "status": 500}}`, `{"latencyMs": 50}`,
//!   `{"clear": true}` (fields may be combined).
//! - `POST /_emulator/persist` saves the state file now.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::{json_response, Shared};
use crate::error::{ApiError, ApiResult};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FaultRequest {
    #[serde(default)]
    clear: bool,
    #[serde(default)]
    drop_watches: bool,
    fail_writes: Option<FailWrites>,
    latency_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailWrites {
    resource: String,
    count: u32,
    status: u16,
}

/// Handles `/_emulator/{what}`.
pub async fn handle(sh: &Arc<Shared>, method: &Method, what: &str, body: &[u8]) -> ApiResult<Response> {
    if method != Method::POST {
        return Err(ApiError::method_not_allowed("the admin endpoint takes POST"));
    }
    match what {
        "faults" => {
            let req: FaultRequest = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid fault request: {e}")))?;
            if let Some(fw) = &req.fail_writes {
                if !(400..=599).contains(&fw.status) {
                    return Err(ApiError::bad_request("failWrites.status must be an HTTP error code (400-599)"));
                }
            }
            if req.clear {
                sh.faults.clear();
            }
            if let Some(fw) = req.fail_writes {
                sh.faults.fail_next_writes(&fw.resource, fw.count, fw.status);
            }
            if let Some(ms) = req.latency_ms {
                sh.faults.set_latency(Duration::from_millis(ms));
            }
            if req.drop_watches {
                sh.faults.drop_watches();
            }
            Ok(json_response(StatusCode::OK, &json!({"ok": true})))
        }
        "persist" => {
            let path = sh.state_file.clone().ok_or_else(|| ApiError::bad_request("no --state-file is configured"))?;
            crate::persist::save(sh, &path).await.map_err(|e| ApiError::internal(format!("{e:#}")))?;
            Ok(json_response(StatusCode::OK, &json!({"ok": true, "path": path})))
        }
        _ => Err(ApiError::no_route()),
    }
}
