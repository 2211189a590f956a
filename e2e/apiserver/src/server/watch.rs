//! Watch streams: newline-delimited JSON events, resumed from a resourceVersion out of the
//! kept history (410 Expired as an ERROR event when it is too old), optional bookmarks, the
//! streaming-list initial events, `timeoutSeconds`, and an end on `drop_watches` or stop.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};
use tokio::time::{Instant, Interval};

use super::{table, Params, Shared};
use crate::error::{ApiError, ApiResult, Cause};
use crate::ops::served;
use crate::registry::ResourceType;
use crate::selectors::Selectors;
use crate::store::{Event, EventType};

/// How often bookmarks are sent when asked for.
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

#[derive(Serialize)]
struct WireEvent<'a> {
    #[serde(rename = "type")]
    type_: &'a str,
    object: &'a Value,
}

struct WatchStream {
    rt: Arc<ResourceType>,
    key: String,
    namespace: Option<String>,
    sel: Selectors,
    as_table: bool,
    pending: VecDeque<Bytes>,
    rx: Option<broadcast::Receiver<Arc<Event>>>,
    last_rv: u64,
    bookmarks: Option<Interval>,
    deadline: Option<Instant>,
    kill: watch::Receiver<u64>,
}

impl WatchStream {
    fn line(&self, type_: &str, obj: &Value) -> Bytes {
        let object = if type_ == "ERROR" {
            obj.clone()
        } else if self.as_table {
            let rv = crate::meta::meta_str(obj, "resourceVersion").parse().unwrap_or(self.last_rv);
            table::table(&self.rt, &[obj], rv, None)
        } else {
            served(obj, &self.rt).into_owned()
        };
        let mut out = serde_json::to_vec(&WireEvent { type_, object: &object }).unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": self.last_rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": meta});
        let mut out = serde_json::to_vec(&WireEvent { type_: "BOOKMARK", object: &obj }).unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }

    /// The event as this watcher sees it, given its namespace and selectors.
    fn translate(&self, ev: &Event) -> Option<Bytes> {
        if *ev.key != *self.key || self.namespace.as_ref().is_some_and(|ns| *ns != ev.namespace) {
            return None;
        }
        let now = self.sel.matches(&ev.object);
        match ev.kind {
            EventType::Added | EventType::Deleted => now.then(|| self.line(ev.kind.as_str(), &ev.object)),
            EventType::Modified => {
                let before = ev.prev.as_ref().is_some_and(|p| self.sel.matches(p));
                match (before, now) {
                    (true, true) => Some(self.line("MODIFIED", &ev.object)),
                    (false, true) => Some(self.line("ADDED", &ev.object)),
                    (true, false) => {
                        let mut gone = ev.prev.as_deref().cloned().unwrap_or_default();
                        crate::meta::metadata_mut(&mut gone).insert("resourceVersion".into(), json!(ev.rv.to_string()));
                        Some(self.line("DELETED", &gone))
                    }
                    (false, false) => None,
                }
            }
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            let rx = self.rx.as_mut()?;
            let deadline = self.deadline;
            let has_bookmarks = self.bookmarks.is_some();
            let bookmarks = self.bookmarks.as_mut();
            tokio::select! {
                biased;
                _ = self.kill.changed() => return None,
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => {
                    return None
                }
                r = rx.recv() => match r {
                    Ok(ev) => {
                        self.last_rv = self.last_rv.max(ev.rv);
                        if let Some(b) = self.translate(&ev) {
                            return Some(b);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, resource = %self.key, "watcher fell behind; closing its watch");
                        return None;
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = async { if let Some(b) = bookmarks { b.tick().await; } }, if has_bookmarks => {
                    return Some(self.bookmark(false));
                }
            }
        }
    }
}

fn invalid_param(field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "ListOptions",
        "meta.k8s.io",
        "",
        vec![Cause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {message}"),
            field: field.into(),
        }],
    )
}

/// Starts a watch response.
pub(super) fn start(
    sh: &Arc<Shared>,
    rt: Arc<ResourceType>,
    namespace: Option<String>,
    sel: Selectors,
    params: &Params,
    as_table: bool,
) -> ApiResult<Response> {
    let send_initial = params.flag("sendInitialEvents");
    let allow_bookmarks = params.flag("allowWatchBookmarks");
    if send_initial {
        if !allow_bookmarks {
            return Err(invalid_param(
                "allowWatchBookmarks",
                "allowWatchBookmarks must be set to true when sendInitialEvents is true",
            ));
        }
        if params.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(invalid_param(
                "resourceVersionMatch",
                "sendInitialEvents requires resourceVersionMatch=NotOlderThan",
            ));
        }
    }
    let rv = match params.get("resourceVersion") {
        None => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}")))?),
    };
    let timeout = match params.get("timeoutSeconds") {
        None => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}")))?),
    };
    let key = rt.storage_key();
    let mut stream = WatchStream {
        rt: rt.clone(),
        key: key.clone(),
        namespace,
        sel,
        as_table,
        pending: VecDeque::new(),
        rx: None,
        last_rv: 0,
        bookmarks: None,
        deadline: timeout.map(|t| Instant::now() + Duration::from_secs(t)),
        kill: sh.faults.watch_killer(),
    };
    {
        let store = sh.lock();
        stream.last_rv = store.rv();
        if send_initial || matches!(rv, None | Some(0)) {
            let objs: Vec<Arc<Value>> =
                store.list(&key, stream.namespace.as_deref()).filter(|o| stream.sel.matches(o)).cloned().collect();
            stream.rx = Some(store.subscribe());
            drop(store);
            for o in objs {
                let line = stream.line("ADDED", &o);
                stream.pending.push_back(line);
            }
            if send_initial {
                let end = stream.bookmark(true);
                stream.pending.push_back(end);
            }
        } else {
            let since = rv.unwrap_or(0);
            match store.watch_from(since) {
                Ok((events, rx)) => {
                    stream.rx = Some(rx);
                    drop(store);
                    for ev in events {
                        if let Some(b) = stream.translate(&ev) {
                            stream.pending.push_back(b);
                        }
                    }
                }
                Err(too_old) => {
                    drop(store);
                    let status =
                        ApiError::expired(format!("too old resource version: {since} ({})", too_old.oldest)).status();
                    let line = stream.line("ERROR", &status);
                    stream.pending.push_back(line);
                }
            }
        }
    }
    if allow_bookmarks {
        let mut iv = tokio::time::interval_at(Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        stream.bookmarks = Some(iv);
    }
    let body =
        futures::stream::unfold(stream, |mut s| async move { s.next().await.map(|b| (Ok::<Bytes, Infallible>(b), s)) });
    Ok((StatusCode::OK, [(CONTENT_TYPE, "application/json")], Body::from_stream(body)).into_response())
}
