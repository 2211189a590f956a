//! The test control plane itself: authentication forms, RBAC, the fault proxy's faults, and an
//! API server outage with etcd kept.

use std::time::{Duration, Instant};

use drover_envtest::{Credentials, Options, Server};
use futures::StreamExt as _;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::Client;

async fn whoami(client: &Client) -> (String, Vec<String>) {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api.create(&PostParams::default(), &SelfSubjectReview::default()).await.expect("self-subject review");
    let user = review.status.and_then(|s| s.user_info).expect("user info");
    (user.username.unwrap_or_default(), user.groups.unwrap_or_default())
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() }, ..ConfigMap::default() }
}

#[tokio::test]
async fn tokens_client_certificates_and_exec_plugins_authenticate_and_rbac_authorizes() {
    let Some(server) = Server::start().await else { return };
    let plane = server.plane();
    let (admin, groups) = whoami(&server.client()).await;
    assert_eq!(admin, "admin");
    assert!(groups.iter().any(|g| g == "system:masters"), "{groups:?}");

    let cert = plane.authority().client("alice", &["team-a"]).expect("client certificate");
    let alice = plane.direct_client(&Credentials::Certificate(&cert)).await.expect("client");
    let (user, groups) = whoami(&alice).await;
    assert_eq!(user, "alice");
    assert!(groups.iter().any(|g| g == "team-a"), "{groups:?}");
    // Authenticated but not authorized: RBAC is on.
    let denied = Api::<ConfigMap>::namespaced(alice, "default").create(&PostParams::default(), &config_map("x")).await;
    assert!(matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403), "{denied:?}");

    let script = plane.dir().join("credential.sh");
    let credential = format!(
        r#"{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{{"token":"{}"}}}}"#,
        plane.admin_token()
    );
    std::fs::write(&script, format!("#!/bin/sh\necho '{credential}'\n")).expect("script written");
    let exec = ["sh".to_string(), script.display().to_string()];
    let exec_client = plane.direct_client(&Credentials::Exec(&exec)).await.expect("client");
    assert_eq!(whoami(&exec_client).await.0, "admin");

    let wrong = plane.direct_client(&Credentials::Token("not-a-token")).await.expect("client");
    let refused =
        Api::<SelfSubjectReview>::all(wrong).create(&PostParams::default(), &SelfSubjectReview::default()).await;
    assert!(matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 401), "{refused:?}");
}

#[tokio::test]
async fn the_proxy_fails_writes_adds_latency_and_drops_watches() {
    let Some(server) = Server::start().await else { return };
    let faults = server.faults();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");

    faults.fail_next_writes("configmaps", 2, 409);
    for _ in 0..2 {
        let err = api.create(&PostParams::default(), &config_map("a")).await.expect_err("injected conflict");
        assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"), "{err:?}");
    }
    api.create(&PostParams::default(), &config_map("a")).await.expect("the third write reaches the server");
    assert!(api.get_opt("a").await.expect("get").is_some());

    faults.set_latency(Duration::from_millis(300));
    let start = Instant::now();
    api.get("a").await.expect("get");
    assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
    faults.clear();

    let mut stream = api.watch(&WatchParams::default().timeout(60), "0").await.expect("watch").boxed();
    let first = stream.next().await.expect("an event").expect("not an error");
    assert!(matches!(first, WatchEvent::Added(_)), "{first:?}");
    faults.drop_watches();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch survived drop_watches");
}

#[tokio::test]
async fn an_api_server_restart_keeps_the_data_in_etcd() {
    let Some(mut server) = Server::start().await else { return };
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &config_map("kept")).await.expect("created");
    server.plane_mut().kill_apiserver();
    assert!(api.get("kept").await.is_err(), "no API server, no answer");
    server.restart().await.expect("restarted");
    assert!(api.get_opt("kept").await.expect("get").is_some(), "etcd kept the object");
}

#[tokio::test]
async fn the_controller_manager_creates_default_service_accounts() {
    let options = Options { controller_manager: true, ..Options::default() };
    let Some(server) = Server::start_with(&options).await else { return };
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(server.client(), "kube-public");
    let deadline = Instant::now() + Duration::from_secs(30);
    while accounts.get_opt("default").await.expect("get").is_none() {
        assert!(Instant::now() < deadline, "no default ServiceAccount after 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
