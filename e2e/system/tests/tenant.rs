//! Tenant isolation, tried as a tenant on the real API server with RBAC on (issue 9, part 4).
//! Each test installs the chart with Helm on its own control plane, runs `drover scheduler`
//! and `drover controllers` as the chart's ServiceAccounts when the attempt needs them, and
//! gives team A a ServiceAccount `alice` holding Kubernetes' `edit` role in its namespace
//! `team-a` (into which the chart aggregates its user role) and nothing else. Each test is one
//! attempt to get more than team A's queues, quotas and nodes allow, and fails on its own if
//! that hole reopens:
//!
//! - forging a bind intent (in status, in the body of a create, or in the annotation older
//!   versions trusted);
//! - submitting to team B's queue through a Job, a PodGroup's `spec.queue` or a plain pod's
//!   `scheduling.drover.dev/queue` annotation;
//! - raising its queue's quota or limit, creating a Queue, a Project or a Department;
//! - writing Job or PodGroup status;
//! - joining team B's gang with a pod of team A's namespace;
//! - evicting or deleting team B's pods, directly or through a higher-priority job;
//! - bypassing Drover with GPU pods for another scheduler or with `spec.nodeName` (the
//!   chart's admission policy), and stalling everyone's Jobs with an unreadable pod template.
//!
//! A last test checks the chart's aggregation into `view`: a ServiceAccount bound to `view`
//! reads Drover's Jobs, PodGroups and Queues and creates none.
//!
//! Without helm-python-sdk the tests print SKIPPED; `DROVER_REQUIRE_HELM` (set in CI) forbids
//! that. A test takes 5-20 s, most of it the control plane and the Helm install; the file
//! about a minute with two at a time.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use drover_api::crd::department::Department;
use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::project::Project;
use drover_api::crd::queue::Queue;
use drover_e2e::chart::{helm, run_as_chart, HelmAction, Running};
use drover_e2e::{eventually, Cluster};
use drover_envtest::Options;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};

const GROUP: &str = "scheduling.drover.dev/pod-group";
const QUEUE: &str = "scheduling.drover.dev/queue";
/// Scheduling cycles (1 s each with the chart's configuration) to wait for anything wrong to
/// happen before checking that it did not.
const CYCLES: Duration = Duration::from_secs(6);

// ---------------------------------------------------------------------------------------
// Shared set-up

/// A cluster with the chart installed, namespaces `team-a` and `team-b`, their queues, and
/// team A's tenant `alice`.
struct Tenancy {
    cluster: Cluster,
    /// Drover's processes (stopped on drop), when the test runs them.
    _drover: Vec<Running>,
    /// `alice`: `edit` in `team-a`, nothing else.
    alice: Client,
    /// Where the control plane's and Drover's logs are, for failure messages.
    logs: String,
}

/// Whether a test needs Drover's processes (a test of RBAC or admission alone does not).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Drover {
    Running,
    Off,
}

impl Tenancy {
    /// Installs the chart (with its PriorityClasses) on a new control plane with one node of
    /// 8 GPUs, makes the namespaces, the queues `team-a` (4 GPUs deserved), `team-a-small`
    /// (1 GPU deserved, limit 1) and `team-b` (4 GPUs), each admitting its team's namespace
    /// only, and `alice`. `None`: skipped (no control plane or no Helm).
    async fn start(drover: Drover) -> Option<Tenancy> {
        if !drover_envtest::tools::helm_available() {
            return None;
        }
        let cluster = Cluster::start_without_drover(1, Options::default()).await?;
        let admin = cluster.client.clone();
        let logs = cluster.logs().display().to_string();
        let values = cluster.logs().join("values.yaml");
        std::fs::write(&values, "priorityClasses:\n  enabled: true\n").expect("values written");
        helm(&cluster.server().kubeconfig(), HelmAction::Install(Some(&values))).expect("helm install");
        let mut processes = Vec::new();
        if drover == Drover::Running {
            for component in ["scheduler", "controllers"] {
                let log = cluster.logs().join(format!("chart-{component}.log"));
                processes.push(run_as_chart(&cluster, component, &log).await.expect(component));
            }
        }
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        for ns in ["team-a", "team-b"] {
            create(&namespaces, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .await
                .expect("namespace created");
            let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
            eventually(30, &format!("the default ServiceAccount of {ns}"), || async {
                accounts.get_opt("default").await.ok().flatten()
            })
            .await;
        }
        let queues: Api<Queue> = Api::all(admin.clone());
        create(&queues, queue("team-a", "team-a", "4", None)).await.expect("queue team-a");
        create(&queues, queue("team-a-small", "team-a", "1", Some("1"))).await.expect("queue team-a-small");
        create(&queues, queue("team-b", "team-b", "4", None)).await.expect("queue team-b");
        let alice = tenant_client(&cluster, "alice", "edit").await;
        // The chart's user role reaches alice through `edit` once kube-controller-manager has
        // aggregated it; a dry-run create of a PodGroup shows when it has.
        let probe: PodGroup = serde_json::from_value(pod_group("team-a", "probe", "team-a", 1)).expect("a PodGroup");
        let groups: Api<PodGroup> = Api::namespaced(alice.clone(), "team-a");
        let dry_run = PostParams { dry_run: true, ..PostParams::default() };
        eventually(60, "alice may create PodGroups through edit (the chart's aggregated role)", || async {
            groups.create(&dry_run, &probe).await.ok()
        })
        .await;
        Some(Tenancy { cluster, _drover: processes, alice, logs })
    }

    fn admin(&self) -> Client {
        self.cluster.client.clone()
    }

    /// `kind` objects of `namespace`, as alice sees them.
    fn alice_api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.alice.clone(), namespace)
    }

    /// `kind` objects of `namespace`, as the admin sees them.
    fn admin_api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.admin(), namespace)
    }

    /// Waits for the `Valid=False` condition of the Job `name` in `team-a`.
    async fn job_refusal(&self, name: &str) -> Condition {
        let jobs: Api<Job> = self.admin_api("team-a");
        eventually(60, &format!("Valid=False on Job {name} (logs in {})", self.logs), || async {
            let status = jobs.get(name).await.ok()?.status?;
            status.conditions.into_iter().find(|c| c.type_ == "Valid" && c.status == "False")
        })
        .await
    }

    /// Waits for the `Valid=False` condition of the PodGroup `name` in `team-a`.
    async fn group_refusal(&self, name: &str) -> Condition {
        let groups: Api<PodGroup> = self.admin_api("team-a");
        eventually(60, &format!("Valid=False on PodGroup {name} (logs in {})", self.logs), || async {
            let status = groups.get(name).await.ok()?.status?;
            status.conditions.into_iter().find(|c| c.type_ == "Valid" && c.status == "False")
        })
        .await
    }

    /// Waits for a Warning Event `reason` about the `kind` object `name` in `team-a`.
    async fn warning(&self, kind: &str, name: &str, reason: &str) -> Event {
        let events: Api<Event> = self.admin_api("team-a");
        eventually(60, &format!("a Warning {reason} on {kind} {name} (logs in {})", self.logs), || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.type_.as_deref() == Some("Warning")
                    && e.involved_object.kind.as_deref() == Some(kind)
                    && e.involved_object.name.as_deref() == Some(name)
            })
        })
        .await
    }

    /// Waits until the pod `name` of `namespace` is bound; returns its node.
    async fn bound_pod(&self, namespace: &str, name: &str) -> String {
        let pods: Api<Pod> = self.admin_api(namespace);
        eventually(60, &format!("pod {namespace}/{name} bound (logs in {})", self.logs), || async {
            pods.get(name).await.ok()?.spec?.node_name
        })
        .await
    }

    /// Waits until `n` pods of the Job `job` in `namespace` run; returns their uids.
    async fn running_job(&self, namespace: &str, job: &str, n: usize) -> BTreeSet<String> {
        let pods: Api<Pod> = self.admin_api(namespace);
        eventually(60, &format!("{n} pods of {namespace}/{job} running (logs in {})", self.logs), || async {
            let uids = running_uids(&pods, job).await;
            (uids.len() == n).then_some(uids)
        })
        .await
    }

    /// Checks, after several scheduling cycles, that none of `pods` (namespace, name) is bound.
    async fn assert_never_bound(&self, pods: &[(&str, &str)], why: &str) {
        tokio::time::sleep(CYCLES).await;
        for (namespace, name) in pods {
            let api: Api<Pod> = self.admin_api(namespace);
            let bound = bound(&api).await;
            assert!(!bound.contains(*name), "{why}: pod {namespace}/{name} was bound (logs in {})", self.logs);
        }
    }
}

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

fn pod_group(namespace: &str, name: &str, queue: &str, min: u32) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": min, "queue": queue}})
}

/// A pod for Drover in `namespace`, in the PodGroup `group`, asking for `gpus` GPUs.
fn pod(namespace: &str, name: &str, group: &str, gpus: &str) -> Value {
    let mut pod = plain_pod(namespace, name, gpus);
    pod["metadata"]["annotations"] = json!({GROUP: group});
    pod
}

/// A pod for Drover in `namespace` without a group (the controllers give it one), asking for
/// `gpus` GPUs.
fn plain_pod(namespace: &str, name: &str, gpus: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
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

/// The pods of `pods`' namespace bound to a node, by name.
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

/// A client for a new ServiceAccount `name` of `team-a` bound to the ClusterRole `role` in
/// `team-a` only.
async fn tenant_client(cluster: &Cluster, name: &str, role: &str) -> Client {
    let admin = cluster.client.clone();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team-a");
    create(&accounts, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}))
        .await
        .expect("ServiceAccount created");
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "team-a"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{name}-{role}"), "namespace": "team-a"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "team-a"}]}),
    )
    .await
    .expect("ServiceAccount bound");
    let token = accounts.create_token_request(name, &PostParams::default(), &TokenRequest::default()).await.unwrap();
    let path = cluster.server().kubeconfig_for_token(name, &token.status.unwrap().token).unwrap();
    client_from(&path).await
}

async fn client_from(path: &Path) -> Client {
    let file = Kubeconfig::read_from(path).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await.expect("config");
    Client::try_from(config).expect("client")
}

// ---------------------------------------------------------------------------------------
// The attempts

/// A forged bind intent for two pods of 2 GPUs each, in a queue limited to 1 GPU: a status in
/// the body of a create is dropped, a write to `/status` is refused, and the annotation older
/// versions trusted is ignored and reported (`BindIntentIgnored`); the pods stay unbound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forging_a_bind_intent_is_dropped_refused_or_ignored() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let groups: Api<PodGroup> = t.alice_api("team-a");
    let forged = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "forged", "namespace": "team-a", "annotations": {
            "scheduling.drover.dev/bind-intent": r#"{"pods":{"f0":"node-0","f1":"node-0"},"at":"2020-01-01T00:00:00Z"}"#}},
        "spec": {"minMember": 2, "queue": "team-a-small"},
        "status": {"phase": "Inqueue", "bindIntent": {"pods": {"f0": "node-0", "f1": "node-0"}, "at": "2020-01-01T00:00:00Z"}}});
    let created = create(&groups, forged).await.expect("alice creates a PodGroup");
    assert!(
        created.status.as_ref().and_then(|s| s.bind_intent.as_ref()).is_none(),
        "a status in the body of a create is kept: {:?}",
        created.status
    );
    let intent =
        json!({"status": {"bindIntent": {"pods": {"f0": "node-0", "f1": "node-0"}, "at": "2020-01-01T00:00:00Z"}}});
    assert_eq!(
        code(groups.patch_status("forged", &PatchParams::default(), &Patch::Merge(&intent)).await),
        403,
        "a tenant wrote a bind intent into status"
    );
    let pods: Api<Pod> = t.alice_api("team-a");
    for name in ["f0", "f1"] {
        create(&pods, pod("team-a", name, "forged", "2")).await.expect("alice creates her pods");
    }
    t.warning("PodGroup", "forged", "BindIntentIgnored").await;
    t.assert_never_bound(&[("team-a", "f0"), ("team-a", "f1")], "a forged bind intent was obeyed").await;
    let group = t.admin_api::<PodGroup>("team-a").get("forged").await.expect("the group");
    assert!(group.status.as_ref().and_then(|s| s.bind_intent.as_ref()).is_none(), "{:?}", group.status);
}

/// A Job naming team B's queue is `Valid=False QueueNotAllowed` with a Warning, and gets no
/// pods; alice's Job in her own queue runs meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_naming_another_teams_queue_is_refused() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let jobs: Api<Job> = t.alice_api("team-a");
    create(&jobs, job("team-a", "a-steal", "team-b", "train", 1)).await.expect("the API server accepts the Job");
    create(&jobs, job("team-a", "a-ok", "team-a", "train", 1)).await.expect("alice submits a Job");
    t.running_job("team-a", "a-ok", 1).await;
    let refusal = t.job_refusal("a-steal").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    assert!(refusal.message.contains("\"team-b\""), "the queue is named: {refusal:?}");
    t.warning("Job", "a-steal", "QueueNotAllowed").await;
    tokio::time::sleep(CYCLES).await;
    let pods: Api<Pod> = t.admin_api("team-a");
    let made = pods.list(&ListParams::default().labels("batch.drover.dev/job-name=a-steal")).await.expect("pods");
    assert!(made.items.is_empty(), "the refused Job got pods (logs in {}): {:?}", t.logs, made.items);
}

/// A PodGroup whose `spec.queue` is team B's queue is `Valid=False QueueNotAllowed` with a
/// Warning, and its pod stays unbound; alice's group in her own queue is scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_group_naming_another_teams_queue_is_refused() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let groups: Api<PodGroup> = t.alice_api("team-a");
    let pods: Api<Pod> = t.alice_api("team-a");
    create(&groups, pod_group("team-a", "steal", "team-b", 1)).await.expect("the API server accepts the group");
    create(&pods, pod("team-a", "steal-0", "steal", "1")).await.expect("alice creates a pod");
    create(&groups, pod_group("team-a", "own", "team-a", 1)).await.expect("alice creates a group");
    create(&pods, pod("team-a", "own-0", "own", "1")).await.expect("alice creates a pod");
    t.bound_pod("team-a", "own-0").await;
    let refusal = t.group_refusal("steal").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    assert!(
        refusal.message.contains("\"team-a\"") && refusal.message.contains("\"team-b\""),
        "the namespace and the queue are named: {refusal:?}"
    );
    t.warning("PodGroup", "steal", "QueueNotAllowed").await;
    t.assert_never_bound(&[("team-a", "steal-0")], "a group was scheduled in another team's queue").await;
}

/// A plain pod annotated `scheduling.drover.dev/queue: team-b` gets a one-pod group in that
/// queue (the annotation is a request), which is `Valid=False QueueNotAllowed` with a
/// Warning; the pod stays unbound while alice's plain pod asking for her own queue binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_pod_annotated_with_another_teams_queue_is_refused() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let pods: Api<Pod> = t.alice_api("team-a");
    for (name, queue) in [("sneak", "team-b"), ("honest", "team-a")] {
        let mut manifest = plain_pod("team-a", name, "1");
        manifest["metadata"]["annotations"] = json!({QUEUE: queue});
        create(&pods, manifest).await.expect("alice creates a plain pod");
    }
    t.bound_pod("team-a", "honest").await;
    let refusal = t.group_refusal("pod-sneak").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    assert!(refusal.message.contains("\"team-b\""), "the queue is named: {refusal:?}");
    t.warning("PodGroup", "pod-sneak", "QueueNotAllowed").await;
    t.assert_never_bound(&[("team-a", "sneak")], "a plain pod was scheduled in another team's queue").await;
}

/// Queues, Projects and Departments are the admins': alice may read Queues (for `drover
/// explain`), not change their quota, limit or status, delete them, or create any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_its_queues_quota_or_limit_is_refused() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    let queues: Api<Queue> = Api::all(t.alice.clone());
    let listed = queues.list(&ListParams::default()).await.expect("tenants may read queues (drover explain)");
    assert!(listed.items.iter().any(|q| q.metadata.name.as_deref() == Some("team-a-small")));
    let raise = json!({"spec": {"deserved": {"nvidia.com/gpu": "8"}, "limit": null}});
    assert_eq!(code(queues.patch("team-a-small", &PatchParams::default(), &Patch::Merge(&raise)).await), 403);
    let fake = json!({"status": {"allocated": {}}});
    assert_eq!(code(queues.patch_status("team-a-small", &PatchParams::default(), &Patch::Merge(&fake)).await), 403);
    assert_eq!(code(queues.delete("team-b", &DeleteParams::default()).await), 403);
    assert_eq!(code(create(&queues, queue("mine", "team-a", "8", None)).await), 403);
    let projects = Api::<Project>::all(t.alice.clone());
    let project = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project", "metadata": {"name": "mine"},
        "spec": {"department": "research", "namespaces": ["team-a"], "nodePools": [{"name": "gpu", "gpu": "8"}]}});
    assert_eq!(code(create(&projects, project).await), 403);
    let departments = Api::<Department>::all(t.alice.clone());
    let department = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Department",
        "metadata": {"name": "mine"}, "spec": {"nodePools": [{"name": "gpu", "gpu": "8"}]}});
    assert_eq!(code(create(&departments, department).await), 403);
    let kept = Api::<Queue>::all(t.admin()).get("team-a-small").await.expect("the queue");
    assert_eq!(kept.spec.limit.and_then(|l| l.get("nvidia.com/gpu").map(|q| q.0.clone())).as_deref(), Some("1"));
}

/// Job and PodGroup status are Drover's: a status in the body of a create is dropped, and a
/// write to `/status` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_job_or_pod_group_status_is_refused() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    let jobs: Api<Job> = t.alice_api("team-a");
    let mut done = job("team-a", "a-done", "team-a", "train", 1);
    done["status"] = json!({"state": "Completed", "succeeded": 1});
    let created = create(&jobs, done).await.expect("alice submits a Job");
    assert!(
        created.status.as_ref().is_none_or(|s| s.succeeded == 0),
        "a Job status in the body of a create is kept: {:?}",
        created.status
    );
    let completed = json!({"status": {"state": "Completed"}});
    assert_eq!(
        code(jobs.patch_status("a-done", &PatchParams::default(), &Patch::Merge(&completed)).await),
        403,
        "a tenant wrote Job status"
    );
    let groups: Api<PodGroup> = t.alice_api("team-a");
    let mut running = pod_group("team-a", "g", "team-a", 2);
    running["status"] = json!({"phase": "Running", "running": 2});
    let created = create(&groups, running).await.expect("alice creates a PodGroup");
    assert!(
        created.status.as_ref().is_none_or(|s| s.running == 0),
        "a PodGroup status in the body of a create is kept: {:?}",
        created.status
    );
    let phase = json!({"status": {"phase": "Running", "running": 2}});
    assert_eq!(
        code(groups.patch_status("g", &PatchParams::default(), &Patch::Merge(&phase)).await),
        403,
        "a tenant wrote PodGroup status"
    );
}

/// Pods of team A naming team B's gang (`b-gang`, or `team-b/b-gang`) join no gang: team B's
/// gang of two stays one member short, and starts once team B adds its own second pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_its_namespace_cannot_join_another_teams_gang() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let b_groups: Api<PodGroup> = t.admin_api("team-b");
    let b_pods: Api<Pod> = t.admin_api("team-b");
    create(&b_groups, pod_group("team-b", "b-gang", "team-b", 2)).await.expect("team B's gang");
    create(&b_pods, pod("team-b", "b-gang-0", "b-gang", "1")).await.expect("team B's pod");
    let alice_pods: Api<Pod> = t.alice_api("team-a");
    for (name, group) in [("join-0", "b-gang"), ("join-1", "team-b/b-gang")] {
        create(&alice_pods, pod("team-a", name, group, "1")).await.expect("the API server accepts the pod");
    }
    let members = [("team-b", "b-gang-0"), ("team-a", "join-0"), ("team-a", "join-1")];
    t.assert_never_bound(&members, "team B's gang started with a member from team A's namespace").await;
    // The gang was one member short, nothing else: team B's own second pod starts it.
    create(&b_pods, pod("team-b", "b-gang-1", "b-gang", "1")).await.expect("team B's second pod");
    for name in ["b-gang-0", "b-gang-1"] {
        t.bound_pod("team-b", name).await;
    }
}

/// Alice may not delete or evict team B's pods, and a job of hers at a higher priority, which
/// needs team B's GPUs, does not get them while team B is within its deserved quota (only
/// reclaim acts across queues): team B's pods keep running, the job waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_or_deleting_another_teams_pods_is_refused_directly_and_through_drover() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let b_jobs: Api<Job> = t.admin_api("team-b");
    create(&b_jobs, job("team-b", "b-work", "team-b", "train", 4)).await.expect("team B's job");
    let b_running = t.running_job("team-b", "b-work", 4).await;

    let alice_b_pods: Api<Pod> = t.alice_api("team-b");
    let victim = "b-work-worker-0";
    assert_eq!(code(alice_b_pods.delete(victim, &DeleteParams::default()).await), 403, "alice deleted team B's pod");
    assert_eq!(code(alice_b_pods.evict(victim, &EvictParams::default()).await), 403, "alice evicted team B's pod");

    // 6 GPUs at the highest priority: only 4 are free, the rest are team B's deserved quota.
    let jobs: Api<Job> = t.alice_api("team-a");
    create(&jobs, job("team-a", "a-big", "team-a", "inference", 6)).await.expect("alice submits a big job");
    let groups: Api<PodGroup> = t.admin_api("team-a");
    eventually(
        60,
        &format!("the scheduler sees alice's big job and says why it waits (logs in {})", t.logs),
        || async {
            let status = groups.get("a-big").await.ok()?.status?;
            status.conditions.iter().any(|c| c.type_ == "Unschedulable" && c.status == "True").then_some(())
        },
    )
    .await;
    tokio::time::sleep(CYCLES).await;
    let a_pods: Api<Pod> = t.admin_api("team-a");
    let a_bound = bound(&a_pods).await;
    assert!(!a_bound.iter().any(|p| p.starts_with("a-big")), "{a_bound:?} (logs in {})", t.logs);
    let b_pods: Api<Pod> = t.admin_api("team-b");
    assert_eq!(running_uids(&b_pods, "b-work").await, b_running, "team B's pods were evicted (logs in {})", t.logs);
}

/// Pods that would bypass Drover (GPUs from another scheduler, or a node named up front) are
/// refused by the chart's admission policy; a pod without GPUs may use another scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_pods_that_would_bypass_drover_are_refused() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    let pods: Api<Pod> = t.alice_api("team-a");
    let mut other_scheduler = plain_pod("team-a", "elsewhere", "1");
    other_scheduler["spec"]["schedulerName"] = json!("default-scheduler");
    // The API server loads a new policy within a few seconds; dry runs show when it is in force.
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let candidate: Pod = serde_json::from_value(other_scheduler.clone()).expect("manifest parses");
    let refused = eventually(30, "the chart's admission policy is in force", || async {
        pods.create(&dry_run, &candidate).await.err().filter(|e| e.to_string().contains("spec.schedulerName"))
    })
    .await;
    assert!(refused.to_string().contains("must set spec.schedulerName: drover"), "{refused}");
    create(&pods, other_scheduler).await.expect_err("a GPU pod for another scheduler");
    let mut pinned = plain_pod("team-a", "pinned", "1");
    pinned["spec"]["nodeName"] = json!("node-0");
    let refused = create(&pods, pinned).await.expect_err("a GPU pod with spec.nodeName");
    assert!(refused.to_string().contains("may not set spec.nodeName"), "{refused}");
    let cpu_only = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu-only", "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "tool", "resources": {"requests": {"cpu": "1"}}}]}});
    create(&pods, cpu_only).await.expect("a pod without GPUs may use another scheduler");
}

/// A Job whose template is not a pod template (the CRD keeps templates as written) is refused
/// on its own (`Valid=False InvalidTemplate`, the field named); alice's next Job and team B's
/// run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_job_template_stalls_no_one_else() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let jobs: Api<Job> = t.alice_api("team-a");
    let mut broken = job("team-a", "a-broken", "team-a", "train", 1);
    broken["spec"]["tasks"][0]["template"] = json!({"spec": {"containers": 5}});
    create(&jobs, broken).await.expect("the API server stores any template object");
    create(&jobs, job("team-a", "a-ok", "team-a", "train", 1)).await.expect("alice submits a job");
    create(&t.admin_api::<Job>("team-b"), job("team-b", "b-work", "team-b", "train", 2)).await.expect("team B's job");
    t.running_job("team-a", "a-ok", 1).await;
    t.running_job("team-b", "b-work", 2).await;
    let refusal = t.job_refusal("a-broken").await;
    assert_eq!(refusal.reason, "InvalidTemplate");
    assert!(
        refusal.message.contains("spec.tasks[0].template") && refusal.message.contains("spec.containers"),
        "{refusal:?}"
    );
}

/// The chart aggregates its read role into `view`: a ServiceAccount bound to `view` in
/// `team-a` gets and lists Drover Jobs and PodGroups there and lists Queues (the chart's
/// queue viewers are every authenticated user), but creates, changes and deletes none, and
/// reads nothing in `team-b`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_drover_objects_and_creates_none() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    create(&t.admin_api::<Job>("team-a"), job("team-a", "a-job", "team-a", "train", 1)).await.expect("a Job");
    create(&t.admin_api::<PodGroup>("team-a"), pod_group("team-a", "a-group", "team-a", 1)).await.expect("a group");
    let bob = tenant_client(&t.cluster, "bob", "view").await;
    let jobs: Api<Job> = Api::namespaced(bob.clone(), "team-a");
    let groups: Api<PodGroup> = Api::namespaced(bob.clone(), "team-a");
    // Aggregation into `view` is kube-controller-manager's work: wait for it.
    let listed = eventually(60, "bob may list Drover Jobs through view (the chart's aggregated role)", || async {
        jobs.list(&ListParams::default()).await.ok()
    })
    .await;
    assert_eq!(listed.items.len(), 1, "{:?}", listed.items);
    jobs.get("a-job").await.expect("a viewer gets a Job");
    assert_eq!(groups.list(&ListParams::default()).await.expect("a viewer lists PodGroups").items.len(), 1);
    groups.get("a-group").await.expect("a viewer gets a PodGroup");
    let queues: Api<Queue> = Api::all(bob.clone());
    assert_eq!(queues.list(&ListParams::default()).await.expect("a viewer lists Queues").items.len(), 3);
    queues.get("team-a").await.expect("a viewer gets a Queue");

    assert_eq!(code(create(&jobs, job("team-a", "b-job", "team-a", "train", 1)).await), 403, "a viewer made a Job");
    assert_eq!(code(create(&groups, pod_group("team-a", "b-group", "team-a", 1)).await), 403, "a viewer made a group");
    assert_eq!(code(create(&queues, queue("bobs", "team-a", "1", None)).await), 403, "a viewer made a Queue");
    let scale = json!({"spec": {"minMember": 5}});
    assert_eq!(code(groups.patch("a-group", &PatchParams::default(), &Patch::Merge(&scale)).await), 403);
    assert_eq!(code(jobs.delete("a-job", &DeleteParams::default()).await), 403, "a viewer deleted a Job");
    let elsewhere: Api<Job> = Api::namespaced(bob, "team-b");
    assert_eq!(code(elsewhere.list(&ListParams::default()).await), 403, "view in team-a reaches team-b");
}
