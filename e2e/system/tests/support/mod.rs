//! The set-up shared by the tests tried as a tenant (`tenant.rs`, `tenant_accounting.rs`): a
//! control plane with the chart installed, two teams' namespaces and queues, team A's
//! ServiceAccount `alice`, and the manifests and checks the tests use.

// Each test file compiles its own copy of this module and uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_e2e::chart::{helm, run_as_chart, HelmAction, Running};
use drover_e2e::{eventually, Cluster};
use drover_envtest::Options;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};

pub const GROUP: &str = "scheduling.drover.dev/pod-group";
pub const QUEUE: &str = "scheduling.drover.dev/queue";
/// Scheduling cycles (1 s each with the chart's configuration) to wait for anything wrong to
/// happen before checking that it did not.
pub const CYCLES: Duration = Duration::from_secs(6);

/// A cluster with the chart installed, namespaces `team-a` and `team-b`, their queues, and
/// team A's tenant `alice`.
pub struct Tenancy {
    pub cluster: Cluster,
    /// Drover's processes (stopped on drop), when the test runs them.
    _drover: Vec<Running>,
    /// `alice`: `edit` in `team-a`, nothing else.
    pub alice: Client,
    /// Where the control plane's and Drover's logs are, for failure messages.
    pub logs: String,
}

/// Whether a test needs Drover's processes (a test of RBAC or admission alone does not).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Drover {
    Running,
    Off,
}

impl Tenancy {
    /// Installs the chart (with its PriorityClasses) on a new control plane with one node of
    /// 8 GPUs, makes the namespaces, the queues `team-a` (4 GPUs deserved), `team-a-small`
    /// (1 GPU deserved, limit 1) and `team-b` (4 GPUs), each admitting its team's namespace
    /// only, and `alice`. `None`: skipped (no control plane or no Helm).
    pub async fn start(drover: Drover) -> Option<Tenancy> {
        let queues = [
            queue("team-a", "team-a", "4", None),
            queue("team-a-small", "team-a", "1", Some("1")),
            queue("team-b", "team-b", "4", None),
        ];
        Tenancy::start_with(drover, &queues).await
    }

    /// [`Tenancy::start`] with the Queue manifests `queues` instead of the usual three.
    pub async fn start_with(drover: Drover, queues: &[Value]) -> Option<Tenancy> {
        Tenancy::start_with_values(drover, queues, "").await
    }

    /// [`Tenancy::start`] with `namespace` exempted from the chart's admission policy (an
    /// admin's choice), so that its pods may be put on a node by name.
    pub async fn start_exempting(drover: Drover, namespace: &str) -> Option<Tenancy> {
        let queues = [
            queue("team-a", "team-a", "4", None),
            queue("team-a-small", "team-a", "1", Some("1")),
            queue("team-b", "team-b", "4", None),
        ];
        let values = format!("admissionPolicy:\n  exemptNamespaces: [{namespace}]\n");
        Tenancy::start_with_values(drover, &queues, &values).await
    }

    async fn start_with_values(drover: Drover, queues: &[Value], values_yaml: &str) -> Option<Tenancy> {
        if !drover_envtest::tools::helm_available() {
            return None;
        }
        let cluster = Cluster::start_without_drover(1, Options::default()).await?;
        let admin = cluster.client.clone();
        let logs = cluster.logs().display().to_string();
        let values = cluster.logs().join("values.yaml");
        std::fs::write(&values, format!("priorityClasses:\n  enabled: true\n{values_yaml}")).expect("values written");
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
        let queue_api: Api<Queue> = Api::all(admin.clone());
        for manifest in queues {
            create(&queue_api, manifest.clone()).await.expect("a queue");
        }
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

    pub fn admin(&self) -> Client {
        self.cluster.client.clone()
    }

    /// `kind` objects of `namespace`, as alice sees them.
    pub fn alice_api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.alice.clone(), namespace)
    }

    /// `kind` objects of `namespace`, as the admin sees them.
    pub fn admin_api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.admin(), namespace)
    }

    /// Waits for the `Valid=False` condition of the Job `name` in `team-a`.
    pub async fn job_refusal(&self, name: &str) -> Condition {
        let jobs: Api<Job> = self.admin_api("team-a");
        eventually(60, &format!("Valid=False on Job {name} (logs in {})", self.logs), || async {
            let status = jobs.get(name).await.ok()?.status?;
            status.conditions.into_iter().find(|c| c.type_ == "Valid" && c.status == "False")
        })
        .await
    }

    /// Waits for the `Valid=False` condition of the PodGroup `name` in `team-a`.
    pub async fn group_refusal(&self, name: &str) -> Condition {
        let groups: Api<PodGroup> = self.admin_api("team-a");
        eventually(60, &format!("Valid=False on PodGroup {name} (logs in {})", self.logs), || async {
            let status = groups.get(name).await.ok()?.status?;
            status.conditions.into_iter().find(|c| c.type_ == "Valid" && c.status == "False")
        })
        .await
    }

    /// Waits for a Warning Event `reason` about the `kind` object `name` in `team-a`.
    pub async fn warning(&self, kind: &str, name: &str, reason: &str) -> Event {
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
    pub async fn bound_pod(&self, namespace: &str, name: &str) -> String {
        let pods: Api<Pod> = self.admin_api(namespace);
        eventually(60, &format!("pod {namespace}/{name} bound (logs in {})", self.logs), || async {
            pods.get(name).await.ok()?.spec?.node_name
        })
        .await
    }

    /// Waits until `n` pods of the Job `job` in `namespace` run; returns their uids.
    pub async fn running_job(&self, namespace: &str, job: &str, n: usize) -> BTreeSet<String> {
        let pods: Api<Pod> = self.admin_api(namespace);
        eventually(60, &format!("{n} pods of {namespace}/{job} running (logs in {})", self.logs), || async {
            let uids = running_uids(&pods, job).await;
            (uids.len() == n).then_some(uids)
        })
        .await
    }

    /// Checks, after several scheduling cycles, that none of `pods` (namespace, name) is bound.
    pub async fn assert_never_bound(&self, pods: &[(&str, &str)], why: &str) {
        tokio::time::sleep(CYCLES).await;
        for (namespace, name) in pods {
            let api: Api<Pod> = self.admin_api(namespace);
            let bound = bound(&api).await;
            assert!(!bound.contains(*name), "{why}: pod {namespace}/{name} was bound (logs in {})", self.logs);
        }
    }
}

pub async fn create<K>(api: &Api<K>, manifest: Value) -> Result<K, kube::Error>
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
pub fn code<T>(result: Result<T, kube::Error>) -> u16 {
    match result {
        Ok(_) => 0,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("not an API answer: {other}"),
    }
}

pub fn job(namespace: &str, name: &str, queue: &str, priority: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": replicas, "queue": queue, "priorityClassName": priority,
            "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {"containers": [
                {"name": "main", "image": "trainer", "resources": {
                    "requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]}
    })
}

pub fn pod_group(namespace: &str, name: &str, queue: &str, min: u32) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": min, "queue": queue}})
}

/// A pod for Drover in `namespace`, in the PodGroup `group`, asking for `gpus` GPUs.
pub fn pod(namespace: &str, name: &str, group: &str, gpus: &str) -> Value {
    let mut pod = plain_pod(namespace, name, gpus);
    pod["metadata"]["annotations"] = json!({GROUP: group});
    pod
}

/// A pod for Drover in `namespace` without a group (the controllers give it one), asking for
/// `gpus` GPUs.
pub fn plain_pod(namespace: &str, name: &str, gpus: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer", "resources": {
            "requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}}]}})
}

pub fn queue(name: &str, namespace: &str, deserved: &str, limit: Option<&str>) -> Value {
    let mut spec = json!({"deserved": {"nvidia.com/gpu": deserved},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}});
    if let Some(limit) = limit {
        spec["limit"] = json!({"nvidia.com/gpu": limit});
    }
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})
}

/// The pods of `pods`' namespace bound to a node, by name.
pub async fn bound(pods: &Api<Pod>) -> BTreeSet<String> {
    let list = pods.list(&ListParams::default()).await.expect("pods listed");
    list.items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Running pods of `job`, by uid.
pub async fn running_uids(pods: &Api<Pod>, job: &str) -> BTreeSet<String> {
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
pub async fn tenant_client(cluster: &Cluster, name: &str, role: &str) -> Client {
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
    let path = cluster.server().kubeconfig_for_token(name, token.status.unwrap().token.as_deref().unwrap()).unwrap();
    client_from(&path).await
}

async fn client_from(path: &Path) -> Client {
    let file = Kubeconfig::read_from(path).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await.expect("config");
    Client::try_from(config).expect("client")
}
