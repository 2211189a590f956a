//! Pod specifics: create defaults, priority admission, the binding and eviction
//! subresources, and graceful deletion of pods on a node.

mod api_support;

use api_support::{get, http, pod, send_json, server};
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/default/pods";

fn binding(pod: &str, node: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod}, "target": {"kind": "Node", "name": node}})
}

#[tokio::test]
async fn create_defaults_phase_scheduler_and_priority() {
    let s = server().await;
    let a = s.addr();
    let mut p = pod("p");
    p["status"] = json!({"phase": "Running"});
    let c = send_json(a, "POST", PODS, &p).await.json();
    assert_eq!(c["status"]["phase"], "Pending", "client status is reset on create");
    assert_eq!(c["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(c["spec"]["priority"], 0);
    let mut custom = pod("q");
    custom["spec"]["schedulerName"] = json!("drover");
    custom["spec"]["priorityClassName"] = json!("system-node-critical");
    let c = send_json(a, "POST", PODS, &custom).await.json();
    assert_eq!(c["spec"]["schedulerName"], "drover");
    assert_eq!(c["spec"]["priority"], 2_000_001_000);
    assert_eq!(c["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    let mut missing = pod("r");
    missing["spec"]["priorityClassName"] = json!("nope");
    let r = send_json(a, "POST", PODS, &missing).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["message"], "pods \"r\" is forbidden: no PriorityClass with name nope was found");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn binding_sets_node_once_and_conflicts_after() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &pod("p")).await;
    let r = send_json(a, "POST", &format!("{PODS}/p/binding"), &binding("p", "n1")).await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["status"], "Success");
    let bound = get(a, &format!("{PODS}/p")).await.json();
    assert_eq!(bound["spec"]["nodeName"], "n1");
    let cond = &bound["status"]["conditions"][0];
    assert_eq!((cond["type"].as_str(), cond["status"].as_str()), (Some("PodScheduled"), Some("True")));
    let again = send_json(a, "POST", &format!("{PODS}/p/binding"), &binding("p", "n2")).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.json()["reason"], "Conflict");
    assert!(again.json()["message"].as_str().unwrap().contains("already assigned to node \"n1\""));
    let missing = send_json(a, "POST", &format!("{PODS}/zz/binding"), &binding("zz", "n1")).await;
    assert_eq!(missing.status, 404);
    let no_target = send_json(a, "POST", &format!("{PODS}/p/binding"), &json!({"metadata": {"name": "p"}})).await;
    assert_eq!(no_target.status, 422);
    let get_binding = get(a, &format!("{PODS}/p/binding")).await;
    assert_eq!(get_binding.status, 405);
    let on_node = get(a, "/api/v1/nodes/n1/binding").await;
    assert_eq!(on_node.status, 404, "binding exists only on pods");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn eviction_deletes_the_pod_honouring_finalizers() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &pod("p")).await;
    let ev = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "default"}});
    let r = send_json(a, "POST", &format!("{PODS}/p/eviction"), &ev).await;
    assert_eq!(r.status, 201);
    assert_eq!(get(a, &format!("{PODS}/p")).await.status, 404);
    let mut held = pod("h");
    held["metadata"]["finalizers"] = json!(["example.com/keep"]);
    send_json(a, "POST", PODS, &held).await;
    let ev = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "h"}});
    assert_eq!(send_json(a, "POST", &format!("{PODS}/h/eviction"), &ev).await.status, 201);
    let h = get(a, &format!("{PODS}/h")).await.json();
    assert!(h["metadata"]["deletionTimestamp"].is_string());
    let ev = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "zz"}});
    let missing = send_json(a, "POST", &format!("{PODS}/zz/eviction"), &ev).await;
    assert_eq!(missing.status, 404);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn pods_on_a_node_are_deleted_gracefully_until_confirmed() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &pod("p")).await;
    send_json(a, "POST", &format!("{PODS}/p/binding"), &binding("p", "n1")).await;
    let d = http(a, "DELETE", &format!("{PODS}/p"), &[], "").await.json();
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(get(a, &format!("{PODS}/p")).await.status, 200, "kept until the kubelet confirms");
    let confirm = send_json(a, "DELETE", &format!("{PODS}/p"), &json!({"gracePeriodSeconds": 0})).await;
    assert_eq!(confirm.status, 200);
    assert_eq!(get(a, &format!("{PODS}/p")).await.status, 404);
    send_json(a, "POST", PODS, &pod("unbound")).await;
    http(a, "DELETE", &format!("{PODS}/unbound"), &[], "").await;
    assert_eq!(get(a, &format!("{PODS}/unbound")).await.status, 404, "a pod on no node goes at once");
    s.stop().await.unwrap();
}
