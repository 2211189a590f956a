//! Tenant isolation, tried as a tenant on the real API server with RBAC on: the chart is
//! installed with Helm, `drover scheduler` and `drover controllers` run as its
//! ServiceAccounts, and a ServiceAccount of team A holds Kubernetes' `edit` role in its own
//! namespace (into which the chart aggregates its user role) and nothing else. Each attempt
//! to get more than team A's queues, quotas and nodes allow must fail: forging a bind intent
//! (in status, in the body of a create, or in the annotation older versions trusted),
//! changing a queue, writing Job or PodGroup status, submitting to team B's queue, joining
//! team B's gang from team A's namespace, evicting or deleting team B's pods, directly or
//! through a higher-priority job, and bypassing Drover with GPU pods for another scheduler or
//! with `spec.nodeName` set (the chart's admission policy), and stalling everyone's Jobs with a
//! Job whose pod template does not read. Without helm-python-sdk the test prints SKIPPED;
//! `DROVER_REQUIRE_HELM` (set in CI) forbids that.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_e2e::chart::{helm, run_as_chart, HelmAction};
use drover_e2e::{eventually, Cluster};
use drover_envtest::Options;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};

const GROUP: &str = "scheduling.drover.dev/pod-group";

async fn create<K>(api: &Api<K>, manifest: Value) -> Result<K, kube::Error>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize,
{
    let object: K = serde_json::from_value(manifest).expect("manifest parses");
    api.create(&PostParams::default(), &object).await
}

/// The HTTP status of a refused request (0 when it succeeded).
fn code<T>(result: Result<T, kube::Error>) -> u16 {
    match result {
        Ok(_) => 0,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("not an API answer: {other}"),
    }
}

fn job(namespace: &str, name: &str, queue: &str, priority: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": replicas, "queue": queue, "priorityClassName": priority,
            "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {"containers": [
                {"name": "main", "image": "trainer", "resources": {
                    "requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]}
    })
}

/// A pod for Drover in `namespace`, in the PodGroup `group`, asking for `gpus` GPUs.
fn pod(namespace: &str, name: &str, group: &str, gpus: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {GROUP: group}},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer", "resources": {
            "requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}}]}})
}

fn queue(name: &str, namespace: &str, deserved: &str, limit: Option<&str>) -> Value {
    let mut spec = json!({"deserved": {"nvidia.com/gpu": deserved},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}});
    if let Some(limit) = limit {
        spec["limit"] = json!({"nvidia.com/gpu": limit});
    }
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})
}

/// The pods of `namespace` bound to a node, by name.
async fn bound(pods: &Api<Pod>) -> BTreeSet<String> {
    let list = pods.list(&ListParams::default()).await.expect("pods listed");
    list.items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Running pods of `job`, by uid.
async fn running_uids(pods: &Api<Pod>, job: &str) -> BTreeSet<String> {
    let list = pods.list(&ListParams::default().labels(&format!("batch.drover.dev/job-name={job}"))).await.unwrap();
    list.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.uid)
        .collect()
}

/// A client for the ServiceAccount `alice` of `team-a`, which holds `edit` there.
async fn tenant_client(cluster: &Cluster) -> Client {
    let admin = cluster.client.clone();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team-a");
    create(&accounts, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice"}}))
        .await
        .expect("alice created");
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "team-a"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice-edit", "namespace": "team-a"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "team-a"}]}),
    )
    .await
    .expect("alice bound to edit");
    let token = accounts.create_token_request("alice", &PostParams::default(), &TokenRequest::default()).await.unwrap();
    let path = cluster.server().kubeconfig_for_token("alice", &token.status.unwrap().token).unwrap();
    client_from(&path).await
}

async fn client_from(path: &Path) -> Client {
    let file = Kubeconfig::read_from(path).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await.expect("config");
    Client::try_from(config).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_edit_in_its_namespace_gets_nothing_beyond_its_queues_quotas_and_nodes() {
    if !drover_envtest::tools::helm_available() {
        return;
    }
    let Some(cluster) = Cluster::start_without_drover(1, Options::default()).await else { return };
    let admin = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let values = cluster.logs().join("values.yaml");
    std::fs::write(&values, "priorityClasses:\n  enabled: true\n").expect("values written");
    helm(&cluster.server().kubeconfig(), HelmAction::Install(Some(&values))).expect("helm install");
    let _processes = [
        run_as_chart(&cluster, "scheduler", &cluster.logs().join("chart-scheduler.log")).await.expect("scheduler"),
        run_as_chart(&cluster, "controllers", &cluster.logs().join("chart-controllers.log"))
            .await
            .expect("controllers"),
    ];
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for ns in ["team-a", "team-b"] {
        create(&namespaces, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await.unwrap();
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
        eventually(30, &format!("the default ServiceAccount of {ns}"), || async {
            accounts.get_opt("default").await.ok().flatten()
        })
        .await;
    }
    let queues: Api<Queue> = Api::all(admin.clone());
    create(&queues, queue("team-a", "team-a", "4", None)).await.unwrap();
    create(&queues, queue("team-a-small", "team-a", "1", Some("1"))).await.unwrap();
    create(&queues, queue("team-b", "team-b", "4", None)).await.unwrap();

    let alice = tenant_client(&cluster).await;
    let alice_groups: Api<PodGroup> = Api::namespaced(alice.clone(), "team-a");
    let alice_pods: Api<Pod> = Api::namespaced(alice.clone(), "team-a");
    let alice_jobs: Api<Job> = Api::namespaced(alice.clone(), "team-a");
    // The chart's user role reaches alice through `edit` once kube-controller-manager has
    // aggregated it; her first PodGroup is the proof.
    let forged_group = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "forged", "namespace": "team-a", "annotations": {
            "scheduling.drover.dev/bind-intent": r#"{"pods":{"f0":"node-0","f1":"node-0"},"at":"2020-01-01T00:00:00Z"}"#}},
        "spec": {"minMember": 2, "queue": "team-a-small"},
        "status": {"phase": "Inqueue", "bindIntent": {"pods": {"f0": "node-0", "f1": "node-0"}, "at": "2020-01-01T00:00:00Z"}}});
    let created = eventually(60, "alice may create PodGroups through edit (the chart's aggregated role)", || async {
        create(&alice_groups, forged_group.clone()).await.ok()
    })
    .await;
    assert!(
        created.status.as_ref().and_then(|s| s.bind_intent.as_ref()).is_none(),
        "a status in the body of a create is dropped"
    );

    // A forged bind intent: the status subresource is closed to her, the annotation is ignored.
    let intent =
        json!({"status": {"bindIntent": {"pods": {"f0": "node-0", "f1": "node-0"}, "at": "2020-01-01T00:00:00Z"}}});
    assert_eq!(code(alice_groups.patch_status("forged", &PatchParams::default(), &Patch::Merge(&intent)).await), 403);
    for name in ["f0", "f1"] {
        create(&alice_pods, pod("team-a", name, "forged", "2")).await.expect("alice creates her pods");
    }
    let events: Api<Event> = Api::namespaced(admin.clone(), "team-a");
    eventually(60, &format!("the scheduler reports the forged annotation (logs in {logs})"), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.iter().any(|e| e.reason.as_deref() == Some("BindIntentIgnored")).then_some(())
    })
    .await;

    // Pods that would bypass Drover: another scheduler, or a node named up front. The chart's
    // admission policy refuses them; a pod without GPUs may use any scheduler.
    let mut other_scheduler = pod("team-a", "elsewhere", "none", "1");
    other_scheduler["spec"]["schedulerName"] = json!("default-scheduler");
    // The API server loads a new policy within a few seconds; dry runs show when it is in force.
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let candidate: Pod = serde_json::from_value(other_scheduler).expect("manifest parses");
    let refused = eventually(30, "the chart's admission policy is in force", || async {
        alice_pods.create(&dry_run, &candidate).await.err().filter(|e| e.to_string().contains("spec.schedulerName"))
    })
    .await;
    assert!(refused.to_string().contains("must set spec.schedulerName: drover"), "{refused}");
    let mut pinned = pod("team-a", "pinned", "none", "1");
    pinned["spec"]["nodeName"] = json!("node-0");
    let refused = create(&alice_pods, pinned).await.expect_err("a GPU pod with spec.nodeName");
    assert!(refused.to_string().contains("may not set spec.nodeName"), "{refused}");
    let cpu_only = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu-only", "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "tool", "resources": {"requests": {"cpu": "1"}}}]}});
    create(&alice_pods, cpu_only).await.expect("a pod without GPUs may use another scheduler");

    // Queues and quotas: she may read them, not change or add them.
    let alice_queues: Api<Queue> = Api::all(alice.clone());
    assert!(alice_queues.list(&ListParams::default()).await.is_ok(), "tenants may read queues (drover explain)");
    let raise = json!({"spec": {"deserved": {"nvidia.com/gpu": "8"}, "limit": null}});
    assert_eq!(code(alice_queues.patch("team-a-small", &PatchParams::default(), &Patch::Merge(&raise)).await), 403);
    assert_eq!(code(create(&alice_queues, queue("mine", "team-a", "8", None)).await), 403);
    let projects = Api::<drover_api::crd::project::Project>::all(alice.clone());
    let project = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project", "metadata": {"name": "mine"},
        "spec": {"department": "research", "namespaces": ["team-a"], "nodePools": [{"name": "gpu", "gpu": "8"}]}});
    assert_eq!(code(create(&projects, project).await), 403);

    // A Job whose template is not a pod template (the CRD keeps templates as written): it is
    // refused on its own, and every Job after it (hers and team B's) is still served.
    let mut broken = job("team-a", "a-broken", "team-a", "train", 1);
    broken["spec"]["tasks"][0]["template"] = json!({"spec": {"containers": 5}});
    create(&alice_jobs, broken).await.expect("the API server stores any template object");

    // Status is Drover's: neither a Job's nor a PodGroup's.
    create(&alice_jobs, job("team-a", "a-ok", "team-a", "train", 1)).await.expect("alice submits a job");
    let done = json!({"status": {"state": "Completed"}});
    assert_eq!(code(alice_jobs.patch_status("a-ok", &PatchParams::default(), &Patch::Merge(&done)).await), 403);
    let running = json!({"status": {"phase": "Running", "running": 2}});
    assert_eq!(code(alice_groups.patch_status("forged", &PatchParams::default(), &Patch::Merge(&running)).await), 403);

    // Team B runs 4 GPUs (its deserved quota) and waits for a second member of its gang.
    let b_jobs: Api<Job> = Api::namespaced(admin.clone(), "team-b");
    let b_pods: Api<Pod> = Api::namespaced(admin.clone(), "team-b");
    create(&b_jobs, job("team-b", "b-work", "team-b", "train", 4)).await.unwrap();
    let b_groups: Api<PodGroup> = Api::namespaced(admin.clone(), "team-b");
    create(
        &b_groups,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "b-gang", "namespace": "team-b"}, "spec": {"minMember": 2, "queue": "team-b"}}),
    )
    .await
    .unwrap();
    create(&b_pods, pod("team-b", "b-gang-0", "b-gang", "1")).await.unwrap();
    let b_running = eventually(60, &format!("team B's job runs (logs in {logs})"), || async {
        let uids = running_uids(&b_pods, "b-work").await;
        (uids.len() == 4).then_some(uids)
    })
    .await;

    // Alice tries team B's queue, team B's gang, and a high-priority job to push team B out.
    create(&alice_jobs, job("team-a", "a-steal", "team-b", "train", 1)).await.expect("the API accepts the job");
    for (name, group) in [("join-0", "b-gang"), ("join-1", "team-b/b-gang")] {
        create(&alice_pods, pod("team-a", name, group, "1")).await.expect("the API accepts the pod");
    }
    create(&alice_jobs, job("team-a", "a-big", "team-a", "inference", 6)).await.expect("alice submits a big job");
    let a_pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    eventually(60, &format!("alice's own job in her own queue runs (logs in {logs})"), || async {
        (running_uids(&a_pods, "a-ok").await.len() == 1).then_some(())
    })
    .await;
    let a_jobs: Api<Job> = Api::namespaced(admin.clone(), "team-a");
    eventually(60, &format!("the job naming team B's queue is refused (logs in {logs})"), || async {
        let status = a_jobs.get("a-steal").await.ok()?.status?;
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Valid" && c.status == "False" && c.reason == "QueueNotAllowed")
            .then_some(())
    })
    .await;
    let refusal =
        eventually(60, &format!("the job with an unreadable template is refused (logs in {logs})"), || async {
            let status = a_jobs.get("a-broken").await.ok()?.status?;
            status.conditions.into_iter().find(|c| c.type_ == "Valid" && c.status == "False")
        })
        .await;
    assert_eq!(refusal.reason, "InvalidTemplate");
    assert!(
        refusal.message.contains("spec.tasks[0].template") && refusal.message.contains("spec.containers"),
        "{refusal:?}"
    );
    // Several more scheduling cycles (1 s each) for anything wrong to happen.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let a_bound = bound(&a_pods).await;
    for name in ["f0", "f1", "join-0", "join-1"] {
        assert!(!a_bound.contains(name), "alice's pod {name} was bound (logs in {logs})");
    }
    assert!(
        !a_bound.iter().any(|p| p.starts_with("a-steal") || p.starts_with("a-big")),
        "{a_bound:?} (logs in {logs})"
    );
    assert!(!bound(&b_pods).await.contains("b-gang-0"), "team B's gang started with a member from team A");
    assert_eq!(running_uids(&b_pods, "b-work").await, b_running, "team B's pods were evicted (logs in {logs})");

    // Nor can she evict or delete team B's pods herself.
    let alice_b_pods: Api<Pod> = Api::namespaced(alice.clone(), "team-b");
    let victim = "b-work-worker-0";
    assert_eq!(code(alice_b_pods.delete(victim, &DeleteParams::default()).await), 403);
    assert_eq!(code(alice_b_pods.evict(victim, &EvictParams::default()).await), 403);
    assert_eq!(running_uids(&b_pods, "b-work").await, b_running);
}
