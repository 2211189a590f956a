//! CustomResourceDefinitions: served after create (Established), schema defaulting, pruning and
//! validation through the validation module, the status subresource, printer columns in
//! Table output, discovery, and deletion taking the objects with it.

mod api_support;

use std::time::Duration;

use api_support::{get, http, send_json, server};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams, WatchEvent, WatchParams};
use kube::runtime::{conditions, wait::await_condition};
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const JOBS: &str = "/apis/batch.drover.dev/v1alpha1/namespaces/default/jobs";
const TABLE: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobs.batch.drover.dev"},
        "spec": {
            "group": "batch.drover.dev",
            "scope": "Namespaced",
            "names": {"plural": "jobs", "singular": "job", "kind": "Job", "shortNames": ["dj"], "categories": ["drover"]},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
                    {"name": "Min", "type": "integer", "jsonPath": ".spec.minAvailable"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["queue"],
                            "properties": {
                                "queue": {"type": "string"},
                                "minAvailable": {"type": "integer", "minimum": 1, "default": 1}
                            }
                        },
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                    }
                }}
            }]
        }
    })
}

fn job(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn crd_is_established_and_served_then_gone_after_delete() {
    let s = server().await;
    let a = s.addr();
    assert_eq!(get(a, JOBS).await.status, 404, "not served before the CRD");
    let created = send_json(a, "POST", CRDS, &crd()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let crds: Api<CustomResourceDefinition> = Api::all(s.client());
    tokio::time::timeout(
        Duration::from_secs(5),
        await_condition(crds, "jobs.batch.drover.dev", conditions::is_crd_established()),
    )
    .await
    .unwrap()
    .unwrap();
    let c = get(a, &format!("{CRDS}/jobs.batch.drover.dev")).await.json();
    assert_eq!(c["status"]["acceptedNames"]["kind"], "Job");
    assert_eq!(c["status"]["acceptedNames"]["listKind"], "JobList");
    let conds: Vec<(&str, &str)> = c["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert!(conds.contains(&("Established", "True")) && conds.contains(&("NamesAccepted", "True")));

    let gvk = GroupVersionKind::gvk("batch.drover.dev", "v1alpha1", "Job");
    let jobs: Api<DynamicObject> = Api::default_namespaced_with(s.client(), &ApiResource::from_gvk(&gvk));
    let obj: DynamicObject = serde_json::from_value(job("j1", json!({"queue": "q"}))).unwrap();
    let j = jobs.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(j.data["spec"]["minAvailable"], 1, "schema default applied");
    let mut watch = jobs.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Added(_)))));

    let del = http(a, "DELETE", &format!("{CRDS}/jobs.batch.drover.dev"), &[], "").await;
    assert_eq!(del.status, 200);
    assert!(matches!(watch.next().await, Some(Ok(WatchEvent::Deleted(_)))), "objects go with the CRD");
    assert_eq!(get(a, JOBS).await.status, 404);
    assert_eq!(get(a, "/apis/batch.drover.dev/v1alpha1").await.status, 404);
    send_json(a, "POST", CRDS, &crd()).await;
    assert!(get(a, JOBS).await.json()["items"].as_array().unwrap().is_empty(), "no object survives a re-create");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn custom_resources_are_validated_pruned_and_status_split() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", CRDS, &crd()).await;
    let invalid = send_json(a, "POST", JOBS, &job("bad", json!({"queue": "q", "minAvailable": 0}))).await;
    assert_eq!(invalid.status, 422, "{}", invalid.body);
    let st = invalid.json();
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(st["details"]["kind"], "Job");
    assert_eq!(st["details"]["group"], "batch.drover.dev");
    assert_eq!(st["details"]["causes"][0]["field"], "spec.minAvailable");
    assert!(
        st["message"].as_str().unwrap().starts_with("Job.batch.drover.dev \"bad\" is invalid: spec.minAvailable: "),
        "{st}"
    );
    let missing = send_json(a, "POST", JOBS, &job("bad", json!({}))).await;
    assert_eq!(missing.status, 422);
    assert_eq!(missing.json()["details"]["causes"][0]["reason"], "FieldValueRequired");

    let mut extra = job("j", json!({"queue": "q", "unknown": 1}));
    extra["status"] = json!({"phase": "Done"});
    let created = send_json(a, "POST", JOBS, &extra).await.json();
    assert!(created["spec"].get("unknown").is_none(), "unknown fields pruned");
    assert!(created.get("status").is_none(), "status dropped on create with a status subresource");
    let strict =
        send_json(a, "POST", &format!("{JOBS}?fieldValidation=Strict"), &job("k", json!({"queue": "q", "x": 1}))).await;
    assert_eq!(strict.status, 400);
    assert!(strict.json()["message"].as_str().unwrap().contains("unknown field \"spec.x\""), "{}", strict.body);

    let status = http(
        a,
        "PATCH",
        &format!("{JOBS}/j/status"),
        &[("Content-Type", "application/merge-patch+json")],
        r#"{"status":{"phase":"Running"},"spec":{"queue":"other"}}"#,
    )
    .await
    .json();
    assert_eq!(status["status"]["phase"], "Running");
    assert_eq!(status["spec"]["queue"], "q");
    assert_eq!(status["metadata"]["generation"], 1);
    let bad_update = http(
        a,
        "PATCH",
        &format!("{JOBS}/j"),
        &[("Content-Type", "application/merge-patch+json")],
        r#"{"spec":{"minAvailable":-3}}"#,
    )
    .await;
    assert_eq!(bad_update.status, 422, "updates are validated too");
    let smp = http(
        a,
        "PATCH",
        &format!("{JOBS}/j"),
        &[("Content-Type", "application/strategic-merge-patch+json")],
        r#"{"spec":{"queue":"x"}}"#,
    )
    .await;
    assert_eq!(smp.status, 415, "no strategic merge patch on custom resources");
    let mut no_rv = created.clone();
    no_rv["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let put = send_json(a, "PUT", &format!("{JOBS}/j"), &no_rv).await;
    assert_eq!(put.status, 422, "custom resources need a resourceVersion on PUT");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn invalid_crds_are_rejected() {
    let s = server().await;
    let a = s.addr();
    let mut bad = crd();
    bad["metadata"]["name"] = json!("wrong.name.io");
    let r = send_json(a, "POST", CRDS, &bad).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["details"]["causes"][0]["field"], "metadata.name");
    let mut no_storage = crd();
    no_storage["spec"]["versions"][0]["storage"] = json!(false);
    assert_eq!(send_json(a, "POST", CRDS, &no_storage).await.status, 422);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn table_output_uses_printer_columns() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", CRDS, &crd()).await;
    send_json(a, "POST", JOBS, &job("j1", json!({"queue": "gpu", "minAvailable": 4}))).await;
    let t = http(a, "GET", JOBS, &[("Accept", TABLE)], "").await.json();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let cols: Vec<&str> =
        t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cols, ["Name", "Queue", "Min", "Phase", "Age"]);
    let cells = &t["rows"][0]["cells"];
    assert_eq!((&cells[0], &cells[1], &cells[2], &cells[3]), (&json!("j1"), &json!("gpu"), &json!(4), &Value::Null));
    assert!(cells[4].as_str().unwrap().ends_with('s'));
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let one = http(a, "GET", &format!("{JOBS}/j1"), &[("Accept", TABLE)], "").await.json();
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    let pods = http(a, "GET", "/api/v1/namespaces/default/pods", &[("Accept", TABLE)], "").await.json();
    let cols: Vec<&str> =
        pods["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cols, ["Name", "Status", "Node", "Priority", "Age"]);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn discovery_lists_exactly_the_served_resources() {
    let s = server().await;
    let a = s.addr();
    let core = get(a, "/api").await.json();
    assert_eq!(core["versions"], json!(["v1"]));
    let v1 = get(a, "/api/v1").await.json();
    let names: Vec<&str> = v1["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "configmaps",
            "events",
            "namespaces",
            "namespaces/status",
            "nodes",
            "nodes/status",
            "pods",
            "pods/binding",
            "pods/eviction",
            "pods/status",
            "services",
            "services/status"
        ]
    );
    let pods = v1["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["singularName"], "pod");
    assert_eq!(pods["namespaced"], true);
    assert!(pods["verbs"].as_array().unwrap().contains(&json!("watch")));

    send_json(a, "POST", CRDS, &crd()).await;
    let groups = get(a, "/apis").await.json();
    let gnames: Vec<&str> = groups["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(gnames, ["apiextensions.k8s.io", "coordination.k8s.io", "scheduling.k8s.io", "batch.drover.dev"]);
    let g = get(a, "/apis/batch.drover.dev").await.json();
    assert_eq!(g["preferredVersion"]["groupVersion"], "batch.drover.dev/v1alpha1");
    let rl = get(a, "/apis/batch.drover.dev/v1alpha1").await.json();
    assert_eq!(rl["resources"][0]["name"], "jobs");
    assert_eq!(rl["resources"][0]["shortNames"], json!(["dj"]));
    assert_eq!(rl["resources"][0]["categories"], json!(["drover"]));
    assert_eq!(rl["resources"][1]["name"], "jobs/status");
    let aggregated = http(
        a,
        "GET",
        "/apis",
        &[("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")],
        "",
    )
    .await;
    assert_eq!(aggregated.header("content-type"), Some("application/json"), "plain form so clients fall back");
    let version = get(a, "/version").await.json();
    assert_eq!((version["major"].as_str(), version["minor"].as_str()), (Some("1"), Some("33")));
    let info = s.client().apiserver_version().await.unwrap();
    assert_eq!(info.minor, "33");
    s.stop().await.unwrap();
}
