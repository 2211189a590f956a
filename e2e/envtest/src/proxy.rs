//! A fault-injecting HTTPS proxy in front of the real API server: it makes the faults a real
//! server does not make on its own, when a test asks for them: writes that fail with 409, 429
//! or 500, watches dropped mid-stream, and latency. Everything else passes through untouched
//! (requests, bearer tokens, streaming watch bodies), so clients of the proxy talk to the real
//! server. It serves a certificate of the cluster's CA, so a kubeconfig pointing at it
//! verifies TLS like one pointing at the server.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::pki::{Authority, CertPair};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;
type Upstream = HttpClient<hyper_rustls::HttpsConnector<HttpConnector>, Incoming>;

/// The faults a test switches on; cloned handles share them.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<FaultState>,
}

struct FaultState {
    writes: Mutex<HashMap<String, (u32, u16)>>,
    latency: Mutex<Duration>,
    watch_generation: watch::Sender<u64>,
}

impl Faults {
    fn new() -> Faults {
        let (watch_generation, _) = watch::channel(0);
        Faults {
            inner: Arc::new(FaultState {
                writes: Mutex::new(HashMap::new()),
                latency: Mutex::new(Duration::ZERO),
                watch_generation,
            }),
        }
    }

    /// Makes the next `count` writes (POST, PUT, PATCH, DELETE) to `resource` fail with
    /// `status` without reaching the server. `resource` is a plural (`pods`, `leases`), a
    /// plural with its subresource (`pods/binding`, `jobs/status`), or either qualified by
    /// the group (`jobs.batch.drover.dev/status`). A new fault for a resource replaces the
    /// one it had; count 0 removes it.
    pub fn fail_next_writes(&self, resource: &str, count: u32, status: u16) {
        let mut writes = lock(&self.inner.writes);
        if count == 0 {
            writes.remove(resource);
        } else {
            writes.insert(resource.to_string(), (count, status));
        }
    }

    /// Delays every request by `latency` (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        *lock(&self.inner.latency) = latency;
    }

    /// Breaks the connection of every watch open now.
    pub fn drop_watches(&self) {
        self.inner.watch_generation.send_modify(|g| *g += 1);
    }

    /// Removes every pending write failure and the latency.
    pub fn clear(&self) {
        lock(&self.inner.writes).clear();
        self.set_latency(Duration::ZERO);
    }

    fn take_write_fault(&self, resource: &Resource) -> Option<u16> {
        let mut writes = lock(&self.inner.writes);
        let key = resource.keys().into_iter().find(|k| writes.contains_key(k))?;
        let (remaining, status) = writes.get_mut(&key)?;
        *remaining -= 1;
        let status = *status;
        if *remaining == 0 {
            writes.remove(&key);
        }
        Some(status)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The resource a request path addresses: `/api/v1/namespaces/ns/pods/p/binding` is
/// `pods` with subresource `binding` in the core group.
#[derive(Debug, PartialEq)]
struct Resource {
    group: String,
    plural: String,
    subresource: Option<String>,
}

impl Resource {
    fn parse(path: &str) -> Option<Resource> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => (String::new(), rest),
            ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
            _ => return None,
        };
        let rest: Vec<&str> = match rest {
            // A namespace's own subresources: `/api/v1/namespaces/NAME/status`.
            ["namespaces", name, sub @ ("status" | "finalize")] => vec!["namespaces", name, sub],
            ["namespaces", _ns, inner @ ..] if !inner.is_empty() => inner.to_vec(),
            other => other.to_vec(),
        };
        let (plural, tail) = rest.split_first()?;
        Some(Resource { group, plural: plural.to_string(), subresource: tail.get(1).map(|s| s.to_string()) })
    }

    /// The names a fault may use for this resource.
    fn keys(&self) -> Vec<String> {
        let sub = self.subresource.as_ref().map(|s| format!("/{s}")).unwrap_or_default();
        let mut keys = vec![format!("{}{sub}", self.plural)];
        if !self.group.is_empty() {
            keys.push(format!("{}.{}{sub}", self.plural, self.group));
        }
        keys
    }
}

/// A running proxy; it stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    faults: Faults,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (an `https://` URL served
    /// with a certificate of `ca`).
    pub async fn start(upstream: &str, ca: &Authority) -> anyhow::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(server_config(&ca.serving()?)?));
        let client = upstream_client(&ca.cert_pem())?;
        let faults = Faults::new();
        let upstream: Arc<str> = Arc::from(upstream.trim_end_matches('/'));
        let state = faults.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let (acceptor, client, upstream, faults) =
                    (acceptor.clone(), client.clone(), upstream.clone(), state.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service =
                        service_fn(move |request| forward(request, client.clone(), upstream.clone(), faults.clone()));
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        Ok(FaultProxy { addr, faults, task })
    }

    /// `https://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The faults of this proxy.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    request: Request<Incoming>,
    client: Upstream,
    upstream: Arc<str>,
    faults: Faults,
) -> Result<Response<ProxyBody>, BoxError> {
    let latency = *lock(&faults.inner.latency);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let is_write = matches!(*request.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
    if is_write {
        if let Some(status) = Resource::parse(request.uri().path()).and_then(|r| faults.take_write_fault(&r)) {
            return Ok(injected(status));
        }
    }
    let is_watch = request.uri().query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    parts.uri = format!("{upstream}{path}").parse()?;
    parts.headers.remove(http::header::HOST);
    let response = client.request(Request::from_parts(parts, body)).await?;
    let (parts, body) = response.into_parts();
    let body: ProxyBody = if is_watch {
        let generation = faults.inner.watch_generation.subscribe();
        Droppable { inner: body, dropped: Box::pin(changed(generation)) }.boxed_unsync()
    } else {
        body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync()
    };
    Ok(Response::from_parts(parts, body))
}

async fn changed(mut generation: watch::Receiver<u64>) {
    let _ = generation.changed().await;
}

/// A watch response body that fails (so the connection breaks) when the watches are dropped.
struct Droppable {
    inner: Incoming,
    dropped: Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl Body for Droppable {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.dropped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err("watch dropped by the fault proxy".into())));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(|e| -> BoxError { Box::new(e) })
    }
}

/// A `Status` response like the API server's own for `status`.
fn injected(status: u16) -> Response<ProxyBody> {
    let reason = match status {
        409 => "Conflict",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "Unknown",
    };
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by the fault proxy: {reason}"), "reason": reason, "code": status,
    });
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(http::header::CONTENT_TYPE, "application/json");
    if status == 429 {
        response = response.header(http::header::RETRY_AFTER, "1");
    }
    let body = Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed_unsync();
    response.body(body).expect("a valid response")
}

fn server_config(cert: &CertPair) -> anyhow::Result<rustls::ServerConfig> {
    let certs = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the proxy's serving certificate")
}

fn upstream_client(ca_pem: &str) -> anyhow::Result<Upstream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only().enable_http1().build();
    Ok(HttpClient::builder(TokioExecutor::new()).build(connector))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> Resource {
        Resource::parse(path).expect(path)
    }

    #[test]
    fn paths_name_their_resource_and_subresource() {
        let binding = resource("/api/v1/namespaces/ns/pods/p/binding");
        assert_eq!(binding.keys(), vec!["pods/binding"]);
        assert_eq!(resource("/api/v1/namespaces/ns/pods").keys(), vec!["pods"]);
        assert_eq!(resource("/api/v1/namespaces").keys(), vec!["namespaces"]);
        assert_eq!(resource("/api/v1/namespaces/ns").keys(), vec!["namespaces"]);
        assert_eq!(resource("/api/v1/nodes/n1/status").keys(), vec!["nodes/status"]);
        assert_eq!(
            resource("/apis/batch.drover.dev/v1alpha1/namespaces/ns/jobs/j/status").keys(),
            vec!["jobs/status", "jobs.batch.drover.dev/status"]
        );
        assert_eq!(resource("/apis/scheduling.drover.dev/v1alpha1/queues/q").keys()[0], "queues");
        assert!(Resource::parse("/healthz").is_none());
    }

    #[test]
    fn a_write_fault_fires_exactly_count_times() {
        let faults = Faults::new();
        faults.fail_next_writes("pods", 2, 500);
        let pods = resource("/api/v1/namespaces/ns/pods");
        let binding = resource("/api/v1/namespaces/ns/pods/p/binding");
        assert_eq!(faults.take_write_fault(&binding), None, "a subresource is its own resource");
        assert_eq!(faults.take_write_fault(&pods), Some(500));
        assert_eq!(faults.take_write_fault(&pods), Some(500));
        assert_eq!(faults.take_write_fault(&pods), None);
    }
}
