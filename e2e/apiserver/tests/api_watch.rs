//! List and watch: selectors, resume by resourceVersion, bookmarks, timeoutSeconds, 410 Gone,
//! the streaming-list initial events, kube-runtime's watcher, and delivery latency.

mod api_support;

use std::time::{Duration, Instant};

use api_support::{get, http, pod, send_json, server};
use drover_apiserver::{start, ServerConfig};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/default/pods";

fn labelled(name: &str, labels: serde_json::Value) -> serde_json::Value {
    let mut p = pod(name);
    p["metadata"]["labels"] = labels;
    p
}

#[tokio::test]
async fn label_selectors() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &labelled("a", json!({"app": "x", "tier": "web"}))).await;
    send_json(a, "POST", PODS, &labelled("b", json!({"app": "y"}))).await;
    send_json(a, "POST", PODS, &labelled("c", json!({"tier": "db"}))).await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let names = |sel: &'static str| {
        let pods = pods.clone();
        async move {
            let l = pods.list(&ListParams::default().labels(sel)).await.unwrap();
            l.items.into_iter().map(|p| p.metadata.name.unwrap()).collect::<Vec<_>>()
        }
    };
    assert_eq!(names("app=x").await, ["a"]);
    assert_eq!(names("app==y").await, ["b"]);
    assert_eq!(names("app!=x").await, ["b", "c"]);
    assert_eq!(names("app in (x,y)").await, ["a", "b"]);
    assert_eq!(names("app notin (x)").await, ["b", "c"]);
    assert_eq!(names("tier").await, ["a", "c"]);
    assert_eq!(names("!tier").await, ["b"]);
    assert_eq!(names("app,tier=web").await, ["a"]);
    let bad = get(a, &format!("{PODS}?labelSelector=app%20in%20(x")).await;
    assert_eq!(bad.status, 400);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn field_selectors() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &pod("a")).await;
    send_json(a, "POST", PODS, &pod("b")).await;
    let bind = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "a"}, "target": {"name": "n1"}});
    send_json(a, "POST", &format!("{PODS}/a/binding"), &bind).await;
    let pods: Api<Pod> = Api::all(s.client());
    let names = |sel: &'static str| {
        let pods = pods.clone();
        async move {
            let l = pods.list(&ListParams::default().fields(sel)).await.unwrap();
            l.items.into_iter().map(|p| p.metadata.name.unwrap()).collect::<Vec<_>>()
        }
    };
    assert_eq!(names("spec.nodeName=n1").await, ["a"]);
    assert_eq!(names("spec.nodeName=").await, ["b"]);
    assert_eq!(names("spec.nodeName!=").await, ["a"]);
    assert_eq!(names("metadata.name=b").await, ["b"]);
    assert_eq!(names("metadata.namespace=default,status.phase=Pending").await, ["a", "b"]);
    assert_eq!(names("spec.schedulerName=default-scheduler").await, ["a", "b"]);
    let unsupported = get(a, "/api/v1/pods?fieldSelector=spec.priority%3D1").await;
    assert_eq!(unsupported.status, 400);
    assert_eq!(unsupported.json()["message"], "field label not supported: spec.priority");
    let on_cm = get(a, "/api/v1/configmaps?fieldSelector=spec.nodeName%3Dx").await;
    assert_eq!(on_cm.status, 400);
    s.stop().await.unwrap();
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>> + Unpin),
) -> WatchEvent<Pod> {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .unwrap()
}

fn name_of(ev: &WatchEvent<Pod>) -> (String, String) {
    match ev {
        WatchEvent::Added(p) => ("ADDED".into(), p.metadata.name.clone().unwrap()),
        WatchEvent::Modified(p) => ("MODIFIED".into(), p.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(p) => ("DELETED".into(), p.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(b) => ("BOOKMARK".into(), b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR".into(), e.code.to_string()),
    }
}

#[tokio::test]
async fn watch_resumes_after_resource_version_and_translates_selector_transitions() {
    let s = server().await;
    let a = s.addr();
    let first = send_json(a, "POST", PODS, &pod("a")).await.json();
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    send_json(a, "POST", PODS, &pod("b")).await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut all = pods.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    assert_eq!(name_of(&next_event(&mut all).await), ("ADDED".into(), "b".into()), "only events after rv");
    let mut on_node = pods.watch(&WatchParams::default().fields("spec.nodeName=n1"), &rv).await.unwrap().boxed();
    let bind = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "a"}, "target": {"name": "n1"}});
    send_json(a, "POST", &format!("{PODS}/a/binding"), &bind).await;
    assert_eq!(
        name_of(&next_event(&mut on_node).await),
        ("ADDED".into(), "a".into()),
        "entering the selector is ADDED"
    );
    assert_eq!(name_of(&next_event(&mut all).await), ("MODIFIED".into(), "a".into()));
    http(a, "DELETE", &format!("{PODS}/a?gracePeriodSeconds=0"), &[], "").await;
    assert_eq!(name_of(&next_event(&mut on_node).await), ("DELETED".into(), "a".into()));
    assert_eq!(name_of(&next_event(&mut all).await), ("DELETED".into(), "a".into()));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_the_current_state() {
    let s = server().await;
    send_json(s.addr(), "POST", PODS, &pod("a")).await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut w = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert_eq!(name_of(&next_event(&mut w).await), ("ADDED".into(), "a".into()));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn bookmarks_carry_the_latest_resource_version() {
    let s = server().await;
    let a = s.addr();
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let list = pods.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut w = pods.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let created = send_json(a, "POST", PODS, &pod("a")).await.json();
    assert_eq!(name_of(&next_event(&mut w).await).0, "ADDED");
    let started = Instant::now();
    let (kind, bm_rv) = name_of(&next_event(&mut w).await);
    assert_eq!(kind, "BOOKMARK");
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert_eq!(bm_rv, created["metadata"]["resourceVersion"].as_str().unwrap());
    s.stop().await.unwrap();
}

#[tokio::test]
async fn timeout_seconds_closes_the_watch() {
    let s = server().await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let started = Instant::now();
    let mut w = pods.watch(&WatchParams::default().timeout(1).disable_bookmarks(), "0").await.unwrap().boxed();
    let end = tokio::time::timeout(Duration::from_secs(5), w.next()).await.expect("closed in time");
    assert!(end.is_none(), "stream ended");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "{took:?}");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn too_old_resource_version_is_410_expired_as_a_watch_error() {
    let s = start(ServerConfig { watch_history: 3, ..ServerConfig::default() }).await.unwrap();
    let a = s.addr();
    let first = send_json(a, "POST", PODS, &pod("a")).await.json();
    for n in 0..5 {
        send_json(a, "POST", PODS, &pod(&format!("x{n}"))).await;
    }
    let raw = http(
        a,
        "GET",
        &format!("{PODS}?watch=true&resourceVersion={}", first["metadata"]["resourceVersion"].as_str().unwrap()),
        &[],
        "",
    )
    .await;
    assert_eq!(raw.status, 200);
    let line: serde_json::Value = serde_json::from_str(raw.body.lines().next().unwrap()).unwrap();
    assert_eq!(line["type"], "ERROR");
    assert_eq!(line["object"]["kind"], "Status");
    assert_eq!(line["object"]["code"], 410);
    assert_eq!(line["object"]["reason"], "Expired");
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut w = pods
        .watch(&WatchParams::default(), first["metadata"]["resourceVersion"].as_str().unwrap())
        .await
        .unwrap()
        .boxed();
    assert_eq!(name_of(&next_event(&mut w).await), ("ERROR".into(), "410".into()));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn streaming_list_sends_initial_events_then_the_end_bookmark() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &pod("a")).await;
    let refused = get(a, &format!("{PODS}?watch=true&sendInitialEvents=true")).await;
    assert_eq!(refused.status, 422);
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let stream = watcher(pods, watcher::Config::default().streaming_lists());
    let mut stream = stream.boxed();
    let mut seen = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await.unwrap() {
        match ev {
            watcher::Event::InitApply(p) => seen.push(p.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, ["a"]);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn kube_runtime_watcher_lists_then_follows_changes() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &pod("a")).await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut stream = watcher(pods, watcher::Config::default()).boxed();
    let mut init = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await.unwrap().unwrap().unwrap() {
            watcher::Event::InitApply(p) => init.push(p.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(init, ["a"]);
    send_json(a, "POST", PODS, &pod("b")).await;
    match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await.unwrap().unwrap().unwrap() {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        other => panic!("unexpected {other:?}"),
    }
    s.stop().await.unwrap();
}

#[tokio::test]
async fn watch_events_arrive_within_milliseconds_of_the_write() {
    let s = server().await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut w = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let mut worst = Duration::ZERO;
    for n in 0..20 {
        let p: Pod = serde_json::from_value(pod(&format!("p{n}"))).unwrap();
        let sent = Instant::now();
        pods.create(&PostParams::default(), &p).await.unwrap();
        let ev = next_event(&mut w).await;
        assert_eq!(name_of(&ev).0, "ADDED");
        worst = worst.max(sent.elapsed());
    }
    assert!(worst < Duration::from_millis(50), "worst create+event round trip {worst:?}");
    s.stop().await.unwrap();
}
