//! Fault injection (library API and admin endpoint), restart on the same port, persistence
//! to the state file, the binary's lifecycle, and load speed.

mod api_support;

use std::time::{Duration, Instant};

use api_support::{get, http, pod, send_json, server};
use drover_apiserver::{start, ServerConfig};
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/default/pods";

#[tokio::test]
async fn fail_next_writes_fails_exactly_that_many_writes_of_that_resource() {
    let s = server().await;
    let a = s.addr();
    s.faults().fail_next_writes("pods", 2, 500);
    assert_eq!(get(a, PODS).await.status, 200, "reads are not affected");
    let first = send_json(a, "POST", PODS, &pod("p")).await;
    assert_eq!(first.status, 500);
    assert_eq!(first.json()["reason"], "InternalError");
    assert_eq!(
        send_json(a, "POST", "/api/v1/namespaces/default/configmaps", &json!({"metadata": {"name": "c"}})).await.status,
        201
    );
    assert_eq!(send_json(a, "POST", PODS, &pod("p")).await.status, 500);
    assert_eq!(send_json(a, "POST", PODS, &pod("p")).await.status, 201);
    assert_eq!(get(a, &format!("{PODS}/p")).await.status, 200);

    s.faults().fail_next_writes("pods/binding", 1, 409);
    let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n"}});
    assert_eq!(send_json(a, "POST", &format!("{PODS}/p/binding"), &b).await.status, 409);
    assert_eq!(send_json(a, "POST", &format!("{PODS}/p/binding"), &b).await.status, 201);

    s.faults().fail_next_writes("pods", 1, 429);
    let throttled = send_json(a, "POST", PODS, &pod("q")).await;
    assert_eq!(throttled.status, 429);
    assert_eq!(throttled.header("retry-after"), Some("1"));
    assert_eq!(throttled.json()["reason"], "TooManyRequests");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn latency_is_added_before_responses() {
    let s = server().await;
    s.faults().set_latency(Duration::from_millis(150));
    let started = Instant::now();
    get(s.addr(), "/version").await;
    assert!(started.elapsed() >= Duration::from_millis(150));
    s.faults().set_latency(Duration::ZERO);
    let started = Instant::now();
    get(s.addr(), "/version").await;
    assert!(started.elapsed() < Duration::from_millis(100));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn drop_watches_ends_open_watches() {
    let s = server().await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut w = pods.watch(&WatchParams::default().disable_bookmarks(), "0").await.unwrap().boxed();
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.faults().drop_watches();
    let end = tokio::time::timeout(Duration::from_secs(2), w.next()).await.expect("ended in time");
    assert!(end.is_none());
    s.stop().await.unwrap();
}

#[tokio::test]
async fn admin_endpoint_sets_every_fault() {
    let s = server().await;
    let a = s.addr();
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut w = pods.watch(&WatchParams::default().disable_bookmarks(), "0").await.unwrap().boxed();
    let r = send_json(a, "POST", "/_emulator/faults", &json!({"dropWatches": true})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(tokio::time::timeout(Duration::from_secs(2), w.next()).await.unwrap().is_none());
    let fw = json!({"failWrites": {"resource": "pods", "count": 1, "status": 500}});
    assert_eq!(send_json(a, "POST", "/_emulator/faults", &fw).await.status, 200);
    assert_eq!(send_json(a, "POST", PODS, &pod("p")).await.status, 500);
    assert_eq!(send_json(a, "POST", PODS, &pod("p")).await.status, 201);
    assert_eq!(send_json(a, "POST", "/_emulator/faults", &json!({"latencyMs": 120})).await.status, 200);
    let started = Instant::now();
    get(a, "/version").await;
    assert!(started.elapsed() >= Duration::from_millis(120));
    assert_eq!(send_json(a, "POST", "/_emulator/faults", &json!({"clear": true})).await.status, 200);
    assert_eq!(send_json(a, "POST", "/_emulator/faults", &json!({"bogus": 1})).await.status, 400);
    assert_eq!(send_json(a, "POST", "/_emulator/persist", &json!({})).await.status, 400, "no state file configured");
    assert_eq!(get(a, "/_emulator/faults").await.status, 405);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn restart_keeps_state_and_port_and_drops_watches() {
    let mut s = server().await;
    let a = s.addr();
    let created = send_json(a, "POST", PODS, &pod("p")).await.json();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let mut w = pods.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
    s.restart().await.unwrap();
    assert_eq!(s.addr(), a);
    assert!(tokio::time::timeout(Duration::from_secs(2), w.next()).await.unwrap().is_none(), "watch dropped");
    assert_eq!(get(a, &format!("{PODS}/p")).await.json()["metadata"]["uid"], created["metadata"]["uid"]);
    send_json(a, "POST", PODS, &pod("q")).await;
    let mut resumed = pods.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
    match tokio::time::timeout(Duration::from_secs(2), resumed.next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("q")),
        other => panic!("expected q ADDED after the restart, got {other:?}"),
    }
    s.stop().await.unwrap();
}

#[tokio::test]
async fn state_file_round_trip_keeps_objects_crds_and_resource_version() {
    let dir = std::env::temp_dir().join(format!("drover-apiserver-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    let _ = std::fs::remove_file(&state);
    let config = ServerConfig { state_file: Some(state.clone()), ..ServerConfig::default() };
    let s = start(config.clone()).await.unwrap();
    let a = s.addr();
    let crd = json!({
        "metadata": {"name": "queues.drover.dev"},
        "spec": {"group": "drover.dev", "scope": "Cluster", "names": {"plural": "queues", "kind": "Queue"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    assert_eq!(send_json(a, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd).await.status, 201);
    let q = send_json(a, "POST", "/apis/drover.dev/v1/queues", &json!({"metadata": {"name": "q1"}, "spec": {"w": 1}}))
        .await;
    assert_eq!(q.status, 201, "{}", q.body);
    send_json(a, "POST", PODS, &pod("p")).await;
    assert_eq!(send_json(a, "POST", "/_emulator/persist", &json!({})).await.status, 200);
    let last_rv: u64 = get(a, PODS).await.json()["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    s.stop().await.unwrap();

    let s = start(config).await.unwrap();
    let a = s.addr();
    assert_eq!(get(a, &format!("{PODS}/p")).await.status, 200);
    assert_eq!(get(a, "/apis/drover.dev/v1/queues/q1").await.json()["spec"]["w"], 1);
    let next = send_json(a, "POST", PODS, &pod("after")).await.json();
    let next_rv: u64 = next["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(next_rv > last_rv, "resourceVersion keeps increasing across restarts");
    let old_watch = http(a, "GET", &format!("{PODS}?watch=true&resourceVersion={}", last_rv - 1), &[], "").await;
    assert!(old_watch.body.contains("\"code\":410"), "history is not persisted: {}", old_watch.body);
    s.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn refuses_non_loopback_listen_addresses() {
    let err = start(ServerConfig { listen: "0.0.0.0:0".parse().unwrap(), ..ServerConfig::default() }).await;
    assert!(err.is_err());
}

#[tokio::test]
async fn binary_writes_kubeconfig_stops_on_sigterm_and_restarts_from_its_state_file() {
    let dir = std::env::temp_dir().join(format!("drover-apiserver-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (kubeconfig, state) = (dir.join("kubeconfig"), dir.join("state.json"));
    let run = || {
        let _ = std::fs::remove_file(&kubeconfig);
        std::process::Command::new(env!("CARGO_BIN_EXE_drover-apiserver"))
            .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--state-file")
            .arg(&state)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let wait_config = || async {
        for _ in 0..200 {
            if let Ok(kc) = kube::config::Kubeconfig::read_from(&kubeconfig) {
                let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
                return kube::Client::try_from(config).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no kubeconfig written");
    };
    let stop = |child: &mut std::process::Child| {
        std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "clean exit on SIGTERM: {status:?}");
    };

    let mut child = run();
    let client = wait_config().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(&PostParams::default(), &serde_json::from_value(pod("kept")).unwrap()).await.unwrap();
    stop(&mut child);

    let mut child = run();
    let client = wait_config().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    assert!(pods.get_opt("kept").await.unwrap().is_some());
    stop(&mut child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_pods_and_a_thousand_nodes_load_fast() {
    let dir = std::env::temp_dir().join(format!("drover-apiserver-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = ServerConfig { state_file: Some(dir.join("state.json")), ..ServerConfig::default() };
    let _ = std::fs::remove_file(dir.join("state.json"));
    let s = start(config.clone()).await.unwrap();
    let client = s.client();
    let started = Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    let node_results: Vec<_> = stream::iter(0..1_000)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let n: Node = serde_json::from_value(json!({"metadata": {"name": format!("n{i}")}})).unwrap();
                nodes.create(&PostParams::default(), &n).await
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let pod_results: Vec<_> = stream::iter(0..10_000)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(pod(&format!("p{i}"))).unwrap();
                pods.create(&PostParams::default(), &p).await
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let took = started.elapsed();
    assert!(node_results.iter().all(Result::is_ok));
    assert!(pod_results.iter().all(Result::is_ok));
    let listed = pods.list(&Default::default()).await.unwrap().items.len();
    assert_eq!(listed, 10_000);
    eprintln!("created 1,000 nodes and 10,000 pods through the API in {took:?}");
    s.stop().await.unwrap();
    let started = Instant::now();
    let s = start(config).await.unwrap();
    let loaded = started.elapsed();
    eprintln!("loaded them from the state file in {loaded:?}");
    assert_eq!(Api::<Node>::all(s.client()).list(&Default::default()).await.unwrap().items.len(), 1_000);
    if !cfg!(debug_assertions) {
        assert!(took < Duration::from_secs(2), "took {took:?}");
        assert!(loaded < Duration::from_secs(2), "loading took {loaded:?}");
    }
    s.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
