//! The acid test of the emulator: kube-runtime's `watcher`, `reflector` and `Controller`, as
//! Drover's binaries use them, run against it through a dropped watch, a 410 Gone and a
//! server restart, and neither miss nor duplicate anything:
//!
//! - the reflector's store always converges to exactly the server's objects (nothing missing,
//!   nothing stale, no object twice);
//! - outside of relists, the watch never delivers the same object version twice and never
//!   delivers versions out of order;
//! - a controller that mirrors every source ConfigMap into a `mirror-` ConfigMap ends with
//!   every mirror holding its source's latest data.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_apiserver::{start, ServerConfig, ServerHandle};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;

const NS: &str = "default";

fn source(name: &str, value: u32) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("role".into(), "source".into())].into()),
            ..Default::default()
        },
        data: Some([("value".to_string(), value.to_string())].into()),
        ..Default::default()
    }
}

/// Creates or updates source `name` to `value`.
async fn write(api: &Api<ConfigMap>, name: &str, value: u32) {
    let patch = Patch::Apply(source(name, value));
    api.patch(name, &PatchParams::apply("acid-test").force(), &patch).await.expect("write source");
}

/// What the watch delivered, per object name: the resourceVersions seen outside relists.
#[derive(Default)]
struct Seen {
    live: BTreeMap<String, Vec<u64>>,
    relists: u32,
}

fn rv(cm: &ConfigMap) -> u64 {
    cm.resource_version().and_then(|v| v.parse().ok()).expect("numeric resourceVersion")
}

/// Waits until `check` holds, polling; fails the test after `secs` seconds.
async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(()) => return,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The store holds exactly the server's source objects, at the server's versions.
async fn store_matches(api: &Api<ConfigMap>, store: &Store<ConfigMap>) -> Result<(), String> {
    let server: BTreeMap<String, String> = api
        .list(&ListParams::default().labels("role=source"))
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .map(|c| (c.name_any(), c.resource_version().unwrap_or_default()))
        .collect();
    let cached: Vec<(String, String)> =
        store.state().iter().map(|c| (c.name_any(), c.resource_version().unwrap_or_default())).collect();
    let unique: BTreeMap<String, String> = cached.iter().cloned().collect();
    if unique.len() != cached.len() {
        return Err(format!("an object is twice in the store: {cached:?}"));
    }
    if unique != server {
        return Err(format!("store {unique:?} != server {server:?}"));
    }
    Ok(())
}

/// Every mirror holds its source's data.
async fn mirrors_match(api: &Api<ConfigMap>) -> Result<(), String> {
    let all = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
    let by_name: BTreeMap<String, &ConfigMap> = all.iter().map(|c| (c.name_any(), c)).collect();
    for (name, cm) in &by_name {
        if name.starts_with("src-") {
            let mirror = by_name.get(&format!("mirror-{name}")).ok_or(format!("no mirror of {name}"))?;
            if mirror.data != cm.data {
                return Err(format!("mirror of {name} has {:?}, source {:?}", mirror.data, cm.data));
            }
        }
    }
    Ok(())
}

/// Mirrors a source ConfigMap.
async fn reconcile(cm: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>) -> Result<Action, kube::Error> {
    let mirror = ConfigMap {
        metadata: ObjectMeta { name: Some(format!("mirror-{}", cm.name_any())), ..Default::default() },
        data: cm.data.clone(),
        ..Default::default()
    };
    api.patch(&mirror.name_any(), &PatchParams::apply("acid-mirror").force(), &Patch::Apply(&mirror)).await?;
    Ok(Action::await_change())
}

fn retry(_: Arc<ConfigMap>, _: &kube::Error, _: Arc<Api<ConfigMap>>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_and_controller_survive_drops_gone_and_restart() {
    let mut server: ServerHandle =
        start(ServerConfig { watch_history: 40, ..ServerConfig::default() }).await.expect("server starts");
    let client = server.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for i in 0..10 {
        write(&api, &format!("src-{i}"), 0).await;
    }

    let (store, writer) = reflector::store::<ConfigMap>();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen_in = seen.clone();
    let config = watcher::Config::default().labels("role=source");
    let stream = reflector::reflector(writer, watcher::watcher(api.clone(), config)).default_backoff();
    // The test holds `gate` to stop the watch stream from being polled, so that it can write
    // while the watcher is unable to reconnect.
    let gate = Arc::new(tokio::sync::Mutex::new(()));
    let gate_in = gate.clone();
    let watching = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            drop(gate_in.lock().await);
            let mut seen = seen_in.lock().unwrap();
            match event {
                Ok(Event::Apply(cm)) | Ok(Event::Delete(cm)) => {
                    seen.live.entry(cm.name_any()).or_default().push(rv(&cm))
                }
                Ok(Event::Init) => seen.relists += 1,
                Ok(_) | Err(_) => {}
            }
        }
    });

    let mirror_api = Arc::new(api.clone());
    let controller = tokio::spawn(
        Controller::new(api.clone(), watcher::Config::default().labels("role=source"))
            .run(reconcile, retry, mirror_api)
            .for_each(|_| async {}),
    );

    eventually(10, "initial sync", || store_matches(&api, &store)).await;

    // A dropped watch: writes during and after the drop all arrive.
    for round in 1..=3u32 {
        server.faults().drop_watches();
        for i in 0..10 {
            write(&api, &format!("src-{i}"), round).await;
        }
    }
    eventually(10, "after dropped watches", || store_matches(&api, &store)).await;

    // 410 Gone: the watcher reconnects only after more writes than the server keeps history of.
    let relists_before = seen.lock().unwrap().relists;
    let paused = gate.lock().await;
    write(&api, "src-0", 99).await;
    server.faults().drop_watches();
    for i in 0..60 {
        let cm = ConfigMap {
            metadata: ObjectMeta { name: Some(format!("filler-{i}")), ..Default::default() },
            ..Default::default()
        };
        api.create(&PostParams::default(), &cm).await.expect("filler");
    }
    write(&api, "src-0", 100).await;
    drop(paused);
    eventually(10, "after 410 Gone", || store_matches(&api, &store)).await;
    assert!(seen.lock().unwrap().relists > relists_before, "a too-old resourceVersion made the watcher relist");

    // A restart: the server stops and serves again on the same port with the same state.
    server.restart().await.expect("restart");
    for i in 0..10 {
        write(&api, &format!("src-{i}"), 200).await;
    }
    write(&api, "src-new", 7).await;
    eventually(15, "after restart", || store_matches(&api, &store)).await;
    eventually(15, "controller mirrors", || mirrors_match(&api)).await;

    // Outside relists, versions of an object arrive once each and in order.
    let live = seen.lock().unwrap().live.clone();
    for (name, versions) in &live {
        let mut sorted = versions.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(&sorted, versions, "{name}: watch delivered versions out of order or twice");
    }
    let names: BTreeSet<&String> = live.keys().collect();
    assert!(names.contains(&"src-new".to_string()), "the object created after the restart was delivered");

    watching.abort();
    controller.abort();
    server.stop().await.expect("stop");
}
