//! The user commands (`drover explain job|pg|pod`, `drover queue tree|open|close`) as a user runs
//! them: the `drover` binary through a kubeconfig against the real kube-apiserver, reading
//! what the scheduler wrote in status, with the exit codes and object-naming errors the CLI
//! documents, and RBAC refusals reported as such.

mod support;

use std::path::Path;

use drover_api::crd::job::{Job, JobSpec, JobStatus, TaskSpec};
use drover_api::crd::podgroup::{PodGroup, PodGroupPhase, PodGroupSpec, PodGroupStatus};
use drover_api::crd::queue::{Queue, QueueOpenState};
use drover_envtest::{install_crds, Server};
use drover_k8s::convert::POD_GROUP_ANNOTATION;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use support::{drover, gpus, namespace, node, queue, stdout};

/// A PodGroup of `pods` pods of 1 GPU each in `queue`, in `phase`; the pods are bound to
/// `node` and running when it is given, else pending.
async fn group(client: &Client, namespace: &str, name: &str, queue: &str, pods: u32, node: Option<&str>) {
    let spec = PodGroupSpec { min_member: pods, queue: Some(queue.into()), ..PodGroupSpec::default() };
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
    groups.create(&PostParams::default(), &PodGroup::new(name, spec)).await.unwrap();
    let phase = if node.is_some() { PodGroupPhase::Running } else { PodGroupPhase::Inqueue };
    let status = PodGroupStatus { phase, ..PodGroupStatus::default() };
    groups.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await.unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for i in 0..pods {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-{i}"), "annotations": {POD_GROUP_ANNOTATION: name}},
            "spec": {"schedulerName": "drover", "nodeName": node, "containers": [{"name": "w", "image": "trainer",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        }))
        .unwrap();
        api.create(&PostParams::default(), &pod).await.unwrap();
    }
}

/// A Job and its PodGroup of `pods` pending pods, admitted and waiting.
async fn waiting_job(client: &Client, namespace: &str, name: &str, queue: &str, pods: u32) {
    let template =
        serde_json::from_value(json!({"spec": {"containers": [{"name": "w", "image": "trainer"}]}})).unwrap();
    let spec = JobSpec {
        queue: Some(queue.into()),
        tasks: vec![TaskSpec { name: "worker".into(), replicas: pods, template, ..TaskSpec::default() }],
        ..JobSpec::default()
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    jobs.create(&PostParams::default(), &Job::new(name, spec)).await.unwrap();
    let status = JobStatus { pending: pods, ..JobStatus::default() };
    jobs.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await.unwrap();
    group(client, namespace, name, queue, pods, None).await;
}

/// A kubeconfig for a ServiceAccount that holds no role at all.
async fn kubeconfig_without_rights(server: &Server, namespace: &str) -> std::path::PathBuf {
    let accounts: Api<ServiceAccount> = Api::namespaced(server.client(), namespace);
    let mut account = ServiceAccount::default();
    account.metadata.name = Some("nobody".into());
    accounts.create(&PostParams::default(), &account).await.unwrap();
    let token =
        accounts.create_token_request("nobody", &PostParams::default(), &TokenRequest::default()).await.unwrap();
    server.kubeconfig_for_token("nobody", token.status.unwrap().token.as_deref().unwrap()).unwrap()
}

/// A kubeconfig for a tenant who may read Jobs and PodGroups in `namespace`, and nothing
/// cluster-wide.
async fn tenant_kubeconfig(server: &Server, namespace: &str) -> std::path::PathBuf {
    let client = server.client();
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "reader"}, "rules": [{
        "apiGroups": ["batch.drover.dev", "scheduling.drover.dev"], "resources": ["*"], "verbs": ["get", "list"]}]}))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), namespace).create(&PostParams::default(), &role).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let mut account = ServiceAccount::default();
    account.metadata.name = Some("tenant".into());
    accounts.create(&PostParams::default(), &account).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({"metadata": {"name": "tenant-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]}))
    .unwrap();
    Api::<RoleBinding>::namespaced(client, namespace).create(&PostParams::default(), &binding).await.unwrap();
    let token =
        accounts.create_token_request("tenant", &PostParams::default(), &TokenRequest::default()).await.unwrap();
    server.kubeconfig_for_token("tenant", token.status.unwrap().token.as_deref().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_and_queue_commands_read_and_change_the_cluster_with_documented_exit_codes() {
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    install_crds(&client, &drover_api::crd::all()).await.unwrap();
    namespace(&client, "team-a").await;
    node(&client, "gpu-1").await;
    queue(&client, "research", None, "8", None).await;
    queue(&client, "vision", Some("research"), "4", None).await;
    queue(&client, "nlp", Some("research"), "4", Some("2")).await;
    group(&client, "team-a", "busy", "vision", 6, Some("gpu-1")).await;
    group(&client, "team-a", "warm", "nlp", 2, Some("gpu-1")).await;
    waiting_job(&client, "team-a", "train", "vision", 4).await;
    waiting_job(&client, "team-a", "finetune", "nlp", 1).await;
    let kubeconfig = server.kubeconfig();

    // explain: the core's answer — the fair share of the job's queue blocks it (lowered to what
    // it can use: the only node is not ready, so it can use what it holds); the queue limit
    // blocks the other job.
    let table = stdout(&drover(&kubeconfig, &["explain", "job", "team-a/train"]));
    let refusal = "queue vision would exceed its fair share, which counts only capacity its waiting gangs can start on (cpu 10 > 6)";
    assert!(table.contains(refusal), "{table}");
    assert!(table.contains("What would let it start:"), "{table}");
    let limited = stdout(&drover(&kubeconfig, &["explain", "job", "team-a/finetune"]));
    assert!(limited.contains("queue nlp would exceed its limit (nvidia.com/gpu 3 > 2)"), "{limited}");

    // -o json and -o yaml carry the same facts.
    let json: Value =
        serde_json::from_str(&stdout(&drover(&kubeconfig, &["explain", "job", "team-a/train", "-o", "json"]))).unwrap();
    let yaml: Value =
        serde_yaml::from_str(&stdout(&drover(&kubeconfig, &["explain", "job", "team-a/train", "-o", "yaml"]))).unwrap();
    assert_eq!(json, yaml);
    assert_eq!(json["verdict"], "Waiting");
    assert_eq!(json["queuePath"][0]["name"], "vision");
    assert_eq!(json["queuePath"][1]["name"], "research");
    assert_eq!(json["queuePath"][0]["resources"]["nvidia.com/gpu"]["fairShare"], "6");
    assert_eq!(json["queuePath"][0]["resources"]["nvidia.com/gpu"]["needs"], "4");
    assert_eq!(json["queuePath"][0]["queueState"], "OverQuota");

    // queue tree: the whole tree, children under their parent, per resource, as the
    // scheduler wrote it in status.
    let status = json!({"status": {"allocated": gpus("6"), "deserved": gpus("4"), "fairShare": gpus("6")}});
    Api::<Queue>::all(client.clone())
        .patch_status("vision", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
    let tree: Value = serde_json::from_str(&stdout(&drover(&kubeconfig, &["queue", "tree", "-o", "json"]))).unwrap();
    let names: Vec<(&str, u64)> = tree["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["name"].as_str().unwrap(), q["depth"].as_u64().unwrap()))
        .collect();
    assert_eq!(names, [("research", 0), ("nlp", 1), ("vision", 1)]);
    assert_eq!(tree["queues"][1]["resources"]["nvidia.com/gpu"]["limit"], "2");
    let yaml_tree: Value = serde_yaml::from_str(&stdout(&drover(&kubeconfig, &["queue", "tree", "-o", "yaml"])))
        .expect("queue tree -o yaml prints YAML");
    assert_eq!(yaml_tree, tree, "queue tree: -o yaml and -o json differ");
    let table = stdout(&drover(&kubeconfig, &["queue", "tree"]));
    assert!(table.lines().any(|l| l.starts_with("  vision") && l.contains("nvidia.com/gpu")), "{table}");

    // close and open: the spec changes, a second close changes nothing, and explain says so.
    let queues: Api<Queue> = Api::all(client.clone());
    let closed = stdout(&drover(&kubeconfig, &["queue", "close", "vision"]));
    assert!(closed.contains("queue vision closed"), "{closed}");
    assert_eq!(queues.get("vision").await.unwrap().spec.state, QueueOpenState::Closed);
    let again: Value =
        serde_json::from_str(&stdout(&drover(&kubeconfig, &["queue", "close", "vision", "-o", "json"]))).unwrap();
    assert_eq!(again, json!({"queue": "vision", "state": "Closed", "changed": false}));
    // A group not admitted yet waits for the closed queue to open.
    let pending = json!({"status": {"phase": "Pending"}});
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), "team-a");
    groups.patch_status("train", &PatchParams::default(), &Patch::Merge(pending)).await.unwrap();
    let table = stdout(&drover(&kubeconfig, &["explain", "job", "team-a/train"]));
    assert!(table.contains("Waiting") && table.contains("`drover queue open vision`"), "{table}");
    let opened = stdout(&drover(&kubeconfig, &["queue", "open", "vision"]));
    assert!(opened.contains("queue vision opened"), "{opened}");
    assert_eq!(queues.get("vision").await.unwrap().spec.state, QueueOpenState::Open);

    // -o yaml of open and close: the same record as -o json, for a change and for none.
    let state = |args: &[&str]| -> Value {
        let out = stdout(&drover(&kubeconfig, args));
        serde_yaml::from_str(&out).unwrap_or_else(|e| panic!("drover {args:?} printed no YAML ({e}): {out}"))
    };
    let open_again = state(&["queue", "open", "vision", "-o", "yaml"]);
    assert_eq!(open_again, json!({"queue": "vision", "state": "Open", "changed": false}), "open an open queue");
    let close = state(&["queue", "close", "vision", "-o", "yaml"]);
    assert_eq!(close, json!({"queue": "vision", "state": "Closed", "changed": true}), "close -o yaml");
    assert_eq!(queues.get("vision").await.unwrap().spec.state, QueueOpenState::Closed, "close -o yaml closed it");
    let open = state(&["queue", "open", "vision", "-o", "yaml"]);
    assert_eq!(open, json!({"queue": "vision", "state": "Open", "changed": true}), "open -o yaml");
    assert_eq!(queues.get("vision").await.unwrap().spec.state, QueueOpenState::Open, "open -o yaml opened it");

    // Errors name the object, and each kind has its exit code.
    let missing = drover(&kubeconfig, &["explain", "job", "team-a/nope"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("job team-a/nope not found"));
    let missing = drover(&kubeconfig, &["queue", "close", "nope"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("queue \"nope\" not found"));
    let bad = drover(&kubeconfig, &["explain", "job", "a/b/c"]);
    assert_eq!(bad.status.code(), Some(2));
    let bad = drover(Path::new("/nonexistent/kubeconfig"), &["queue", "tree"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent/kubeconfig"));
    let nobody = kubeconfig_without_rights(&server, "team-a").await;
    let refused = drover(&nobody, &["queue", "close", "vision"]);
    assert_eq!(refused.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("queue \"vision\": access refused"));
    assert_eq!(queues.get("vision").await.unwrap().spec.state, QueueOpenState::Open);

    // A tenant who may not list what the scheduler reads is told which permission is missing
    // and shown what the PodGroup's status says.
    let tenant = tenant_kubeconfig(&server, "team-a").await;
    let out: Value =
        serde_json::from_str(&stdout(&drover(&tenant, &["explain", "job", "team-a/train", "-o", "json"]))).unwrap();
    assert_eq!(out["verdict"], "Waiting", "{out}");
    assert_eq!(out["podGroup"]["phase"], "Pending", "{out}");
    let missing = out["missingPermissions"].to_string();
    assert!(missing.contains("list nodes cluster-wide") && missing.contains("list pods cluster-wide"), "{out}");
}

/// A pod of `scheduler` in `namespace` asking for one GPU, with `annotations`.
async fn pod(client: &Client, namespace: &str, name: &str, scheduler: &str, annotations: Value) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "w", "image": "server",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), namespace).create(&PostParams::default(), &pod).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_pg_and_pod_give_the_answer_of_the_group_the_scheduler_schedules() {
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    install_crds(&client, &drover_api::crd::all()).await.unwrap();
    namespace(&client, "team-a").await;
    node(&client, "gpu-1").await;
    queue(&client, "research", None, "8", None).await;
    queue(&client, "vision", Some("research"), "4", None).await;
    queue(&client, "nlp", Some("research"), "4", Some("2")).await;
    group(&client, "team-a", "busy", "vision", 6, Some("gpu-1")).await;
    group(&client, "team-a", "warm", "nlp", 2, Some("gpu-1")).await;
    waiting_job(&client, "team-a", "train", "vision", 4).await;
    let kubeconfig = server.kubeconfig();
    let json = |args: &[&str]| -> Value {
        let out = stdout(&drover(&kubeconfig, &[args, &["-o", "json"]].concat()));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("drover {args:?} printed no JSON ({e}): {out}"))
    };
    let same_answer = |a: &Value, b: &Value| {
        for key in ["verdict", "queue", "queuePath", "blockers", "toStart"] {
            assert_eq!(a[key], b[key], "{key}: {a} vs {b}");
        }
    };

    // The Job's PodGroup and one of its pods get the Job's answer: the scheduler schedules the
    // group, whichever object is asked about.
    let job = json(&["explain", "job", "team-a/train"]);
    assert_eq!(job["verdict"], "Waiting", "{job}");
    assert!(!job["blockers"].as_array().unwrap().is_empty(), "{job}");
    let pg = json(&["explain", "pg", "team-a/train"]);
    same_answer(&job, &pg);
    assert_eq!(
        (&pg["kind"], &pg["job"], &pg["state"]),
        (&json!("PodGroup"), &json!("team-a/train"), &json!("Inqueue"))
    );
    assert_eq!(pg["pods"]["pending"], 4, "{pg}");
    let member = json(&["explain", "pod", "team-a/train-0"]);
    same_answer(&job, &member);
    assert_eq!((&member["kind"], &member["job"]), (&json!("Pod"), &json!("team-a/train")), "{member}");
    assert_eq!(member["pod"], json!({"name": "team-a/train-0", "phase": "Pending"}), "{member}");
    let table = stdout(&drover(&kubeconfig, &["explain", "pod", "team-a/train-0"]));
    assert!(table.starts_with("Pod:       team-a/train-0 (Pending, not bound yet"), "{table}");
    assert!(table.contains("PodGroup:  team-a/train (Waiting, Inqueue)"), "{table}");
    let table = stdout(&drover(&kubeconfig, &["explain", "pg", "team-a/train"]));
    assert!(
        table.starts_with("PodGroup:  team-a/train (Waiting, Inqueue)") && table.contains("Why it waits:"),
        "{table}"
    );

    // A bound pod: its own fact (the node) beside its group's verdict.
    let bound = json(&["explain", "pod", "team-a/busy-0"]);
    assert_eq!(bound["pod"]["node"], "gpu-1", "{bound}");
    assert_eq!(bound["job"], "team-a/busy", "{bound}");
    let table = stdout(&drover(&kubeconfig, &["explain", "pod", "team-a/busy-0"]));
    assert!(table.contains("bound to node gpu-1: it no longer waits"), "{table}");

    // A plain pod in the one-pod group the controllers made for it is explained through that
    // group: queue nlp's limit holds it.
    pod(&client, "team-a", "web", "drover", json!({POD_GROUP_ANNOTATION: "pod-web"})).await;
    let spec = PodGroupSpec { min_member: 1, queue: Some("nlp".into()), ..PodGroupSpec::default() };
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), "team-a");
    groups.create(&PostParams::default(), &PodGroup::new("pod-web", spec)).await.unwrap();
    let web = json(&["explain", "pod", "team-a/web"]);
    same_answer(&json(&["explain", "pg", "team-a/pod-web"]), &web);
    assert_eq!((&web["job"], &web["queue"]), (&json!("team-a/pod-web"), &json!("nlp")), "{web}");
    assert!(web["blockers"].to_string().contains("nlp"), "{web}");

    // A pod whose annotation names a group that does not exist waits for it.
    pod(&client, "team-a", "stray", "drover", json!({POD_GROUP_ANNOTATION: "ghost"})).await;
    let stray = json(&["explain", "pod", "team-a/stray"]);
    assert_eq!(stray["verdict"], "Waiting", "{stray}");
    assert!(stray["blockers"][0].as_str().unwrap().contains("podgroup team-a/ghost"), "{stray}");
    assert!(stray["toStart"][0].as_str().unwrap().contains("create PodGroup ghost"), "{stray}");

    // Errors name the object: a pod the controllers have not grouped yet, another scheduler's
    // pod, objects that do not exist.
    pod(&client, "team-a", "plain", "drover", json!({})).await;
    let out = drover(&kubeconfig, &["explain", "pod", "team-a/plain"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pod team-a/plain belongs to no PodGroup yet") && err.contains("pod-plain"), "{err}");
    pod(&client, "team-a", "other", "default-scheduler", json!({})).await;
    let out = drover(&kubeconfig, &["explain", "pod", "team-a/other"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pod team-a/other is not Drover's to schedule"));
    for (kind, object) in [("pod", "pod team-a/nope"), ("pg", "podgroup team-a/nope")] {
        let out = drover(&kubeconfig, &["explain", kind, "team-a/nope"]);
        assert_eq!(out.status.code(), Some(3), "{kind}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{object} not found")), "{kind}: {err}");
    }
    let bad = drover(&kubeconfig, &["explain", "pod", "a/b/c"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("pod \"a/b/c\": expected NAMESPACE/NAME"));
}
