//! `drover explain` answers "when will it start?" against the real kube-apiserver, as a user
//! runs it: a gang behind a run that declares its end is expected then, from declared run
//! times; a gang behind a run that declares none is expected when the queue's learned run
//! times (Queue `status.runTimes`, as the scheduler writes them) say that run ends, within
//! the range those runs spread over, and explain names the earlier runs it learned from.

mod support;

use std::path::Path;

use drover_api::crd::podgroup::{PodGroup, PodGroupPhase, PodGroupSpec, PodGroupStatus};
use drover_api::crd::queue::Queue;
use drover_envtest::{install_crds, Server};
use drover_k8s::convert::POD_GROUP_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use support::{drover, namespace, node, queue, stdout};

const NS: &str = "team-a";

fn explain(kubeconfig: &Path, args: &[&str]) -> String {
    stdout(&drover(kubeconfig, &[&["explain"], args].concat()))
}

/// A gang `name` of one pod of 8 GPUs in queue `q` declaring `deadline`: running on `node`
/// since `started` (Unix seconds) when given, else waiting.
async fn gang(client: &Client, name: &str, deadline: Option<i64>, running: Option<(&str, i64)>) {
    let spec = PodGroupSpec { min_member: 1, queue: Some("q".into()), ..PodGroupSpec::default() };
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), NS);
    groups.create(&PostParams::default(), &PodGroup::new(name, spec)).await.unwrap();
    let phase = if running.is_some() { PodGroupPhase::Running } else { PodGroupPhase::Inqueue };
    let status = PodGroupStatus { phase, ..PodGroupStatus::default() };
    groups.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-0"), "annotations": {POD_GROUP_ANNOTATION: name}},
        "spec": {"schedulerName": "drover", "nodeName": running.map(|(n, _)| n), "activeDeadlineSeconds": deadline,
            "containers": [{"name": "w", "image": "trainer",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    if let Some((_, started)) = running {
        let at = Timestamp::from_second(started).unwrap().to_string();
        let status = json!({"status": {"phase": "Running", "startTime": at}});
        pods.patch_status(&format!("{name}-0"), &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    }
}

/// The expected start `drover explain` gives the waiting gang `group` of team-a, which it must
/// say rests on `basis` and is `position` in its queue and among all waiting gangs, in JSON
/// and in the table.
fn forecast(kubeconfig: &Path, group: &str, basis: &str, position: u64) -> Timestamp {
    let target = format!("{NS}/{group}");
    let json: Value = serde_json::from_str(&explain(kubeconfig, &["pg", &target, "-o", "json"])).unwrap();
    let forecast = &json["forecast"];
    assert_eq!(forecast["basis"], basis, "{json}");
    assert_eq!((forecast["queuePosition"].as_u64(), forecast["position"].as_u64()), (Some(position), Some(position)));
    let table = explain(kubeconfig, &["pg", &target]);
    let said = format!("Position:  {position} in queue q, {position} among all waiting gangs");
    assert!(table.contains(&said), "{table}");
    forecast["expectedStart"].as_str().expect("an expected start").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_when_a_gang_starts_from_declared_and_from_learned_run_times() {
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    install_crds(&client, &drover_api::crd::all()).await.unwrap();
    namespace(&client, NS).await;
    node(&client, "gpu-1").await;
    node(&client, "gpu-2").await;
    queue(&client, "q", None, "16", None).await;
    let queues: Api<Queue> = Api::all(client.clone());
    // Two runs of `train` completed in team-a, as the scheduler records them.
    let now = Timestamp::now().as_second();
    let history = json!({"status": {"runTimes": [{"namespace": NS, "name": "train", "seconds": [600, 700],
        "updated": Timestamp::from_second(now - 3600).unwrap().to_string()}]}});
    queues.patch_status("q", &PatchParams::default(), &Patch::Merge(history)).await.unwrap();
    // `long` ends in 100 s, as it declares; `train` declares nothing, and has run 100 s of
    // the 600 s its name's runs took.
    gang(&client, "long", Some(3600), Some(("gpu-1", now - 3500))).await;
    gang(&client, "train", None, Some(("gpu-2", now - 100))).await;
    // Created in the same second, they are served in name order: early, then late.
    gang(&client, "early", Some(600), None).await;
    gang(&client, "late", None, None).await;
    let kubeconfig = server.kubeconfig();

    let eta = forecast(&kubeconfig, "early", "DeclaredRunTimes", 1);
    assert_eq!(eta.as_second(), now - 3500 + 3600, "when long's deadline ends it");
    let table = explain(&kubeconfig, &["pg", "team-a/early"]);
    assert!(table.contains(&format!("Start:     expected at {eta} (from declared run times)")), "{table}");

    let eta = forecast(&kubeconfig, "late", "LearnedRunTimes", 2);
    assert_eq!(eta.as_second(), now - 100 + 600, "when train's learned run time ends it");
    let table = explain(&kubeconfig, &["pg", "team-a/late"]);
    let latest = Timestamp::from_second(eta.as_second() + 100).unwrap();
    let said = format!(
        "Start:     expected at {eta}, 80% likely between {eta} and {latest} (learned from 2 earlier runs of jobs \
         named train in team-a)"
    );
    assert!(table.contains(&said), "train's runs of 600 s and 700 s: {table}");
    let json: Value = serde_json::from_str(&explain(&kubeconfig, &["pg", "team-a/late", "-o", "json"])).unwrap();
    assert_eq!(json["forecast"]["latestStart"], latest.to_string(), "{json}");
    server.stop().await;
}
