//! The plumbing shared by the queue controllers: kube-runtime's `applier` fed by reflector
//! and watcher streams of our choosing (stores that are current when a trigger arrives),
//! retries with per-object backoff, and a cloneable shutdown signal.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::controller::{Action, ReconcileRequest};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{applier, watcher, Config};
use kube::Resource;
use serde::Serialize;

use super::Error;

/// A shutdown signal every controller of a `run_*` function can wait on.
pub(crate) type Shutdown = Shared<BoxFuture<'static, ()>>;

pub(crate) fn shutdown_signal(f: impl Future<Output = ()> + Send + 'static) -> Shutdown {
    f.boxed().shared()
}

/// Reconcile triggers of a controller of `K`.
pub(crate) type Triggers<K> = Vec<BoxStream<'static, Result<ReconcileRequest<K>, watcher::Error>>>;

/// Failures in a row per object, for the retry backoff.
#[derive(Default)]
pub(crate) struct Retries {
    failures: Mutex<HashMap<String, u32>>,
}

impl Retries {
    fn reset(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// The delay before retrying after a failure: conflicts at once (100 ms), other errors
    /// 250 ms doubling up to 30 s.
    fn delay(&self, key: &str, conflict: bool) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        if conflict && *n <= 5 {
            return Duration::from_millis(100);
        }
        Duration::from_millis(250u64.saturating_mul(1 << (*n - 1).min(7))).min(Duration::from_secs(30))
    }
}

/// What every controller context offers the runner.
pub(crate) trait Context: Send + Sync + 'static {
    fn retries(&self) -> &Retries;
}

/// Runs one controller until `shutdown` resolves and its running reconciles finish.
pub(crate) async fn drive<K, C, F, Fut>(
    name: &'static str,
    store: Store<K>,
    triggers: Triggers<K>,
    mut reconcile: F,
    ctx: Arc<C>,
    shutdown: Shutdown,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    C: Context,
    F: FnMut(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let reconciler = move |obj: Arc<K>, ctx: Arc<C>| {
        let key = ObjectRef::from_obj(&*obj).to_string();
        let fut = reconcile(obj, ctx.clone());
        Box::pin(async move {
            let result = fut.await;
            if result.is_ok() {
                ctx.retries().reset(&key);
            }
            result
        })
    };
    let error_policy = move |obj: Arc<K>, err: &Error, ctx: Arc<C>| {
        let key = ObjectRef::from_obj(&*obj).to_string();
        let delay = ctx.retries().delay(&key, err.is_conflict());
        if err.is_conflict() {
            tracing::debug!(controller = name, object = %key, "conflict; retrying");
        } else {
            tracing::warn!(controller = name, object = %key, error = %err, ?delay, "reconcile failed; retrying");
        }
        Action::requeue(delay)
    };
    let queue = futures::stream::select_all(triggers).take_until(shutdown);
    applier(reconciler, error_policy, ctx, store, queue, Config::default())
        .for_each(|result| {
            if let Err(e) = result {
                match e {
                    kube::runtime::controller::Error::ObjectNotFound(_) => {
                        tracing::trace!(controller = name, error = %e, "object gone")
                    }
                    kube::runtime::controller::Error::ReconcilerFailed(..) => {}
                    e => tracing::warn!(controller = name, error = %e, "controller error"),
                }
            }
            futures::future::ready(())
        })
        .await;
    tracing::info!(controller = name, "stopped");
}

/// A digest of `value` (its JSON), to tell changes that matter from ones that do not.
pub(crate) fn digest<T: Serialize + ?Sized>(value: &T) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(value).unwrap_or_default().hash(&mut hasher);
    hasher.finish()
}

/// The objects of a watcher event stream whose `key` changed, and every deleted object.
/// Initial listings count as changes; errors pass through.
pub(crate) fn changes<K, S>(events: S, key: fn(&K) -> u64) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut seen: HashMap<String, u64> = HashMap::new();
    let id = |obj: &K| {
        format!(
            "{}/{}/{}",
            obj.meta().namespace.as_deref().unwrap_or(""),
            obj.meta().name.as_deref().unwrap_or(""),
            obj.meta().uid.as_deref().unwrap_or("")
        )
    };
    events.filter_map(move |event| {
        let out = match event {
            Err(e) => Some(Err(e)),
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let digest = key(&obj);
                match seen.insert(id(&obj), digest) {
                    Some(old) if old == digest => None,
                    _ => Some(Ok(obj)),
                }
            }
            Ok(watcher::Event::Delete(obj)) => {
                seen.remove(&id(&obj));
                Some(Ok(obj))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
        };
        futures::future::ready(out)
    })
}

/// Whether a store has finished its first listing.
pub(crate) fn ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store.wait_until_ready().now_or_never().is_some_and(|r| r.is_ok())
}

/// What the controllers that read the Project cache share: the client, the cache and the
/// per-object retry state.
pub(crate) struct ProjectsCtx {
    /// The API client.
    pub(crate) client: kube::Client,
    /// The Project cache.
    pub(crate) projects: kube::runtime::reflector::Store<drover_api::crd::project::Project>,
    /// Retry backoff per object.
    pub(crate) retries: Retries,
}

impl Context for ProjectsCtx {
    fn retries(&self) -> &Retries {
        &self.retries
    }
}
