//! CRUD, error bodies, generation/resourceVersion rules, the status split, finalizers,
//! preconditions, patches and server-side apply.

mod api_support;

use api_support::{get, http, pod, send_json, server};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn create_get_list_replace_delete_with_exact_status_bodies() {
    let s = server().await;
    let a = s.addr();
    let created = send_json(a, "POST", PODS, &pod("p1")).await;
    assert_eq!(created.status, 201);
    assert_eq!(created.header("content-type"), Some("application/json"));
    let c = created.json();
    assert_eq!(c["metadata"]["generation"], 1);
    assert!(c["metadata"]["uid"].as_str().unwrap().len() == 36);
    assert!(c["metadata"]["creationTimestamp"].as_str().unwrap().ends_with('Z'));

    let dup = send_json(a, "POST", PODS, &pod("p1")).await;
    assert_eq!(dup.status, 409);
    assert_eq!(dup.json()["reason"], "AlreadyExists");
    assert_eq!(dup.json()["message"], "pods \"p1\" already exists");

    let missing = get(a, &format!("{PODS}/x")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found",
               "reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404})
    );

    let list = get(a, PODS).await.json();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert!(rv(&list) >= rv(&c));

    let mut changed = c.clone();
    changed["metadata"]["labels"] = json!({"x": "y"});
    let put = send_json(a, "PUT", &format!("{PODS}/p1"), &changed).await;
    assert_eq!(put.status, 200);
    assert!(rv(&put.json()) > rv(&c));
    let stale = send_json(a, "PUT", &format!("{PODS}/p1"), &changed).await;
    assert_eq!(stale.status, 409);
    assert_eq!(stale.json()["reason"], "Conflict");
    assert!(stale.json()["message"].as_str().unwrap().contains("the object has been modified"));

    let del = http(a, "DELETE", &format!("{PODS}/p1"), &[], "").await;
    assert_eq!(del.status, 200);
    assert_eq!(get(a, &format!("{PODS}/p1")).await.status, 404);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn malformed_and_unsupported_requests_get_status_errors() {
    let s = server().await;
    let a = s.addr();
    let bad = http(a, "POST", PODS, &[("Content-Type", "application/json")], "{not json").await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["reason"], "BadRequest");
    let wrong_kind =
        send_json(a, "POST", PODS, &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}})).await;
    assert_eq!(wrong_kind.status, 400);
    let unknown = get(a, "/api/v1/namespaces/default/widgets").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["kind"], "Status");
    let no_group = get(a, "/apis/nope.example.com/v1").await;
    assert_eq!(no_group.status, 404);
    let post_named = send_json(a, "POST", &format!("{PODS}/p1"), &pod("p1")).await;
    assert_eq!(post_named.status, 405);
    assert_eq!(post_named.json()["reason"], "MethodNotAllowed");
    let no_name = send_json(a, "POST", PODS, &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}})).await;
    assert_eq!(no_name.status, 422);
    assert_eq!(no_name.json()["details"]["causes"][0]["field"], "metadata.name");
    let no_containers = send_json(a, "POST", PODS, &json!({"metadata": {"name": "q"}, "spec": {}})).await;
    assert_eq!(no_containers.status, 422);
    assert_eq!(no_containers.json()["message"], "Pod \"q\" is invalid: spec.containers: Required value");
    let bad_ns = send_json(a, "POST", "/api/v1/namespaces/nope/pods", &pod("p")).await;
    assert_eq!(bad_ns.status, 404);
    assert_eq!(bad_ns.json()["message"], "namespaces \"nope\" not found");
    let bad_name = send_json(a, "POST", PODS, &pod("Bad_Name")).await;
    assert_eq!(bad_name.status, 422);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn generate_name_and_cluster_wide_resource_version() {
    let s = server().await;
    let a = s.addr();
    let mut p = pod("");
    p["metadata"] = json!({"generateName": "work-"});
    let one = send_json(a, "POST", PODS, &p).await.json();
    let two = send_json(a, "POST", PODS, &p).await.json();
    let (n1, n2) = (one["metadata"]["name"].as_str().unwrap(), two["metadata"]["name"].as_str().unwrap());
    assert!(n1.starts_with("work-") && n1.len() == 10 && n1 != n2);
    let cm = send_json(
        a,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}),
    )
    .await
    .json();
    assert!(rv(&one) < rv(&two) && rv(&two) < rv(&cm), "one counter across resources");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn generation_bumps_only_outside_metadata_and_status() {
    let s = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(s.client());
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(cm.metadata.generation, Some(1));
    let labelled = cms
        .patch("c", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"l": "v"}}})))
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1));
    let data = cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "2"}}))).await.unwrap();
    assert_eq!(data.metadata.generation, Some(2));
    let same = cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "2"}}))).await.unwrap();
    assert_eq!(same.metadata.resource_version, data.metadata.resource_version, "a no-op write is not a write");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn status_subresource_split() {
    let s = server().await;
    let a = s.addr();
    let created = send_json(a, "POST", PODS, &pod("p")).await.json();
    assert_eq!(created["status"]["phase"], "Pending");
    let mut with_status = created.clone();
    with_status["status"]["phase"] = json!("Running");
    with_status["spec"]["activeDeadlineSeconds"] = json!(100);
    let main = send_json(a, "PUT", &format!("{PODS}/p"), &with_status).await.json();
    assert_eq!(main["status"]["phase"], "Pending", "main resource writes ignore status");
    assert_eq!(main["spec"]["activeDeadlineSeconds"], 100);
    assert_eq!(main["metadata"]["generation"], 2);
    let patch = http(
        a,
        "PATCH",
        &format!("{PODS}/p/status"),
        &[("Content-Type", "application/merge-patch+json")],
        r#"{"status":{"phase":"Running"},"spec":{"activeDeadlineSeconds":5},"metadata":{"labels":{"x":"y"}}}"#,
    )
    .await
    .json();
    assert_eq!(patch["status"]["phase"], "Running");
    assert_eq!(patch["spec"]["activeDeadlineSeconds"], 100, "status writes change only status");
    assert!(patch["metadata"].get("labels").is_none());
    assert_eq!(patch["metadata"]["generation"], 2, "status writes do not bump generation");
    assert_eq!(get(a, &format!("{PODS}/p/status")).await.json()["status"]["phase"], "Running");
    let nodes = get(a, "/api/v1/nodes/n/status").await;
    assert_eq!(nodes.status, 404);
    let cm_status = get(a, "/api/v1/namespaces/default/configmaps/c/status").await;
    assert_eq!(cm_status.status, 404, "no status subresource on configmaps");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn pod_spec_is_immutable_except_allowed_fields() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", PODS, &pod("p")).await;
    let r = http(
        a,
        "PATCH",
        &format!("{PODS}/p"),
        &[("Content-Type", "application/merge-patch+json")],
        r#"{"spec":{"nodeName":"n1"}}"#,
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["details"]["causes"][0]["reason"], "FieldValueForbidden");
    let image = http(
        a,
        "PATCH",
        &format!("{PODS}/p"),
        &[("Content-Type", "application/json-patch+json")],
        r#"[{"op":"replace","path":"/spec/containers/0/image","value":"alpine"}]"#,
    )
    .await;
    assert_eq!(image.status, 200);
    assert_eq!(image.json()["spec"]["containers"][0]["image"], "alpine");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn finalizers_keep_a_deleted_object_until_removed() {
    let s = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(s.client());
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}})).unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let deleting = cms.get("f").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(deleting.metadata.generation, Some(2));
    let add = cms
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "x.io/more"]}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(&add, kube::Error::Api(st) if st.code == 422), "{add:?}");
    let again = cms.delete("f", &DeleteParams::default()).await.unwrap();
    assert!(again.is_left(), "a second delete returns the object still deleting");
    cms.patch("f", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    let gone = cms.get_opt("f").await.unwrap();
    assert!(gone.is_none(), "removing the last finalizer deletes the object");
    drop(cm);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn delete_preconditions() {
    let s = server().await;
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let p = pods.create(&PostParams::default(), &serde_json::from_value(pod("p")).unwrap()).await.unwrap();
    let wrong_uid = DeleteParams::default()
        .preconditions(kube::api::Preconditions { uid: Some("nope".into()), resource_version: None });
    let err = pods.delete("p", &wrong_uid).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(st) if st.code == 409 && st.message.contains("Precondition failed: UID")),
        "{err:?}"
    );
    let wrong_rv = pods
        .delete(
            "p",
            &DeleteParams::default()
                .preconditions(kube::api::Preconditions { uid: None, resource_version: Some("1".into()) }),
        )
        .await
        .unwrap_err();
    assert!(matches!(&wrong_rv, kube::Error::Api(st) if st.code == 409), "{wrong_rv:?}");
    let ok = DeleteParams::default().preconditions(kube::api::Preconditions {
        uid: p.metadata.uid.clone(),
        resource_version: p.metadata.resource_version.clone(),
    });
    pods.delete("p", &ok).await.unwrap();
    assert!(pods.get_opt("p").await.unwrap().is_none());
    s.stop().await.unwrap();
}

#[tokio::test]
async fn merge_and_json_patch_with_resource_version_checks() {
    let s = server().await;
    let a = s.addr();
    let path = "/api/v1/namespaces/default/configmaps";
    let cm = send_json(a, "POST", path, &json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}})).await.json();
    let merge = http(
        a,
        "PATCH",
        &format!("{path}/c"),
        &[("Content-Type", "application/merge-patch+json")],
        r#"{"data":{"a":null,"c":"3"}}"#,
    )
    .await
    .json();
    assert_eq!(merge["data"], json!({"b": "2", "c": "3"}));
    let stale = http(
        a,
        "PATCH",
        &format!("{path}/c"),
        &[("Content-Type", "application/merge-patch+json")],
        &json!({"metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]}, "data": {"d": "4"}}).to_string(),
    )
    .await;
    assert_eq!(stale.status, 409);
    let jp = http(
        a,
        "PATCH",
        &format!("{path}/c"),
        &[("Content-Type", "application/json-patch+json")],
        r#"[{"op":"add","path":"/data/e","value":"5"},{"op":"remove","path":"/data/b"}]"#,
    )
    .await
    .json();
    assert_eq!(jp["data"], json!({"c": "3", "e": "5"}));
    let failed_test = http(
        a,
        "PATCH",
        &format!("{path}/c"),
        &[("Content-Type", "application/json-patch+json")],
        r#"[{"op":"test","path":"/data/e","value":"nope"}]"#,
    )
    .await;
    assert_eq!(failed_test.status, 422);
    let strategic = http(
        a,
        "PATCH",
        &format!("{path}/c"),
        &[("Content-Type", "application/strategic-merge-patch+json")],
        r#"{"data":{"f":"6"}}"#,
    )
    .await;
    assert_eq!(strategic.status, 200);
    let pods = "/api/v1/namespaces/default/pods";
    let mut two = api_support::pod("two");
    two["spec"]["containers"] = json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]);
    send_json(a, "POST", pods, &two).await;
    let smp = http(
        a,
        "PATCH",
        &format!("{pods}/two"),
        &[("Content-Type", "application/strategic-merge-patch+json")],
        r#"{"spec":{"$setElementOrder/containers":[{"name":"a"},{"name":"b"}],"containers":[{"name":"b","image":"y2"}]}}"#,
    )
    .await;
    assert_eq!(smp.status, 200, "{}", smp.body);
    let patched = smp.json();
    let images: Vec<&str> =
        patched["spec"]["containers"].as_array().unwrap().iter().map(|c| c["image"].as_str().unwrap()).collect();
    assert_eq!(images, ["x", "y2"], "containers merge by name");
    let bad_type = http(a, "PATCH", &format!("{path}/c"), &[("Content-Type", "text/plain")], "x").await;
    assert_eq!(bad_type.status, 415);
    let missing =
        http(a, "PATCH", &format!("{path}/zz"), &[("Content-Type", "application/merge-patch+json")], "{}").await;
    assert_eq!(missing.status, 404);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn server_side_apply_creates_then_merges_and_records_managers() {
    let s = server().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(s.client());
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}});
    let created = cms.patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(created.data.as_ref().unwrap()["a"], "1");
    let second = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"b": "2"}});
    let merged = cms.patch("ssa", &PatchParams::apply("mgr-b").force(), &Patch::Apply(&second)).await.unwrap();
    let data = merged.data.unwrap();
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("1", "2"));
    let managers: Vec<String> =
        merged.metadata.managed_fields.unwrap().iter().filter_map(|m| m.manager.clone()).collect();
    assert_eq!(managers, ["mgr-a", "mgr-b"]);
    let no_manager = http(
        s.addr(),
        "PATCH",
        "/api/v1/namespaces/default/configmaps/ssa",
        &[("Content-Type", "application/apply-patch+yaml")],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n",
    )
    .await;
    assert_eq!(no_manager.status, 400);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn cluster_scoped_resources_and_default_namespaces() {
    let s = server().await;
    let a = s.addr();
    let ns = get(a, "/api/v1/namespaces").await.json();
    let names: Vec<&str> =
        ns["items"].as_array().unwrap().iter().map(|n| n["metadata"]["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"default") && names.contains(&"kube-system"));
    let node = send_json(
        a,
        "POST",
        "/api/v1/nodes",
        &json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}}),
    )
    .await;
    assert_eq!(node.status, 201);
    assert_eq!(node.json()["status"]["capacity"]["cpu"], "4", "node status may be set on create");
    assert!(node.json()["metadata"].get("namespace").is_none());
    assert_eq!(get(a, "/api/v1/namespaces/default/nodes/n1").await.status, 404);
    let lease = send_json(
        a,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        &json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}),
    )
    .await;
    assert_eq!(lease.status, 201);
    let pcs = get(a, "/apis/scheduling.k8s.io/v1/priorityclasses").await.json();
    assert_eq!(pcs["items"].as_array().unwrap().len(), 2, "the two system priority classes exist");
    s.stop().await.unwrap();
}

#[tokio::test]
async fn namespace_deletion_removes_its_objects() {
    let s = server().await;
    let a = s.addr();
    send_json(a, "POST", "/api/v1/namespaces", &json!({"metadata": {"name": "team"}})).await;
    send_json(a, "POST", "/api/v1/namespaces/team/configmaps", &json!({"metadata": {"name": "c"}})).await;
    assert_eq!(http(a, "DELETE", "/api/v1/namespaces/team", &[], "").await.status, 200);
    assert_eq!(get(a, "/api/v1/namespaces/team/configmaps/c").await.status, 404);
    assert_eq!(
        send_json(a, "POST", "/api/v1/namespaces/team/configmaps", &json!({"metadata": {"name": "c"}})).await.status,
        404
    );
    s.stop().await.unwrap();
}
