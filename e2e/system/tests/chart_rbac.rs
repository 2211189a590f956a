//! Least privilege, proven on the real API server with RBAC on and its audit log written:
//! the chart is installed with Helm, `drover scheduler` and `drover controllers` run as the
//! chart's ServiceAccounts with its Deployments' arguments, environment and configuration,
//! and a workload runs through them: a Department with Projects (one changed, then deleted),
//! a gang Job that meets a binding conflict and is deleted by its TTL, a preemption, a
//! reclaim, an elastic scale-down and a plain pod. Then the audit log must show that no
//! request of either ServiceAccount was refused, that each request is one the chart's rules
//! allow, and that every rule the chart grants was used (except those [`rare`]
//! lists: used only on failure paths a test cannot provoke deterministically, or with other
//! operators' workloads). Without
//! helm-python-sdk the test prints SKIPPED; `DROVER_REQUIRE_HELM` (set in CI) forbids that.

use std::collections::BTreeSet;

use drover_api::crd::department::Department;
use drover_api::crd::job::Job;
use drover_api::crd::project::Project;
use drover_api::crd::queue::Queue;
use drover_api::crd::topology::Topology;
use drover_e2e::chart::{helm, run_as_chart, HelmAction, NAMESPACE};
use drover_e2e::{eventually, Cluster};
use drover_envtest::Options;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

/// Rules used only on failure paths, with the path: (ServiceAccount, group, resource, verb, why).
const FAILURE_PATHS: [(&str, &str, &str, &str, &str); 2] = [
    (
        "drover-scheduler",
        "",
        "pods",
        "delete",
        "rolling back a gang whose crash-recovery record can no longer be completed",
    ),
    (
        "drover-controllers",
        "scheduling.drover.dev",
        "podgroups",
        "delete",
        "replacing a plain pod's PodGroup left by an earlier pod of the same name",
    ),
];

/// Why the controllers hold the rules [`operator_rules`] lists.
const WITH_OPERATORS: &str =
    "workloads of other operators and the Workload API, tested as admin in k8s/tests/workloads.rs";

/// Rules used only where workload operators or the Workload API run (none do here): `get` on
/// every owner kind the PodGroup controller walks (from its own table, so a kind added there
/// without a chart grant fails this test), on Volcano's and the Workload API's PodGroups, and
/// `update` on the latter's status.
fn operator_rules() -> Vec<(&'static str, &'static str, &'static str, &'static str, &'static str)> {
    let mut rules: Vec<_> = drover_controllers::gangs::kinds::KINDS
        .iter()
        .map(|k| ("drover-controllers", k.group, k.plural, "get", WITH_OPERATORS))
        .collect();
    rules.push(("drover-controllers", "scheduling.volcano.sh", "podgroups", "get", WITH_OPERATORS));
    rules.push(("drover-controllers", "scheduling.k8s.io", "podgroups", "get", WITH_OPERATORS));
    rules.push(("drover-controllers", "scheduling.k8s.io", "podgroups/status", "update", WITH_OPERATORS));
    rules
}

/// Every rule a run of this test need not use: [`FAILURE_PATHS`] and [`operator_rules`].
fn rare() -> Vec<(&'static str, &'static str, &'static str, &'static str, &'static str)> {
    FAILURE_PATHS.into_iter().chain(operator_rules()).collect()
}

/// Creates an object from its JSON manifest.
async fn create<K>(api: &Api<K>, manifest: Value) -> K
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize,
{
    let object: K = serde_json::from_value(manifest).expect("manifest parses");
    api.create(&PostParams::default(), &object).await.expect("object created")
}

/// A Job of `replicas` one-GPU pods in `namespace`, running `duration` seconds (for ever if `None`).
/// Without a queue the Job takes its namespace's project's.
fn job(
    namespace: &str,
    name: &str,
    queue: Option<&str>,
    priority: &str,
    replicas: u32,
    min: u32,
    duration: Option<&str>,
) -> Value {
    let annotations = duration.map(|d| json!({"sim.drover.dev/duration": d})).unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": min, "queue": queue, "priorityClassName": priority, "ttlSecondsAfterFinished": 0,
            "tasks": [{"name": "worker", "replicas": replicas, "template": {
                "metadata": {"annotations": annotations},
                "spec": {"containers": [{"name": "main", "image": "trainer", "resources": {
                    "requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]}
    })
}

/// How many of `job`'s pods run (and are not being deleted).
async fn running(pods: &Api<Pod>, job: &str) -> Option<usize> {
    let list = pods.list(&ListParams::default().labels(&format!("batch.drover.dev/job-name={job}"))).await.ok()?;
    Some(
        list.items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count(),
    )
}

/// One request from the audit log, reduced to what RBAC decides on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Request {
    verb: String,
    group: String,
    /// The resource, with `/subresource` if any.
    resource: String,
    namespace: Option<String>,
    /// The object's name, if the request named one.
    name: Option<String>,
    code: i64,
}

/// The requests `user` made that reached a resource, from the audit log.
fn requests_of(audit: &str, user: &str) -> Vec<Request> {
    audit
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["user"]["username"] == user)
        // A watch is logged as complete only once it ends; its start is enough here.
        .filter(|e| e["stage"] == "ResponseComplete" || (e["stage"] == "ResponseStarted" && e["verb"] == "watch"))
        .filter(|e| e["objectRef"]["resource"].is_string())
        .map(|e| {
            let o = &e["objectRef"];
            let resource = match o["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", o["resource"].as_str().unwrap_or_default()),
                None => o["resource"].as_str().unwrap_or_default().to_string(),
            };
            Request {
                verb: e["verb"].as_str().unwrap_or_default().to_string(),
                group: o["apiGroup"].as_str().unwrap_or_default().to_string(),
                resource,
                namespace: o["namespace"].as_str().map(str::to_string),
                name: o["name"].as_str().map(str::to_string),
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
            }
        })
        .collect()
}

/// A granted permission: (group, resource, verb, the namespace it is limited to, the names it
/// is limited to).
type Grant = (String, String, String, Option<String>, Option<Vec<String>>);

fn grants(rules: &[PolicyRule], namespace: Option<&str>) -> Vec<Grant> {
    let mut out = Vec::new();
    for rule in rules {
        assert!(rule.non_resource_urls.is_none(), "unexpected rule {rule:?}");
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    assert!(group != "*" && resource != "*" && verb != "*", "a wildcard rule: {rule:?}");
                    let names = rule.resource_names.clone();
                    out.push((group.clone(), resource.clone(), verb.clone(), namespace.map(str::to_string), names));
                }
            }
        }
    }
    out
}

fn allows(grant: &Grant, request: &Request) -> bool {
    grant.0 == request.group
        && grant.1 == request.resource
        && grant.2 == request.verb
        && (grant.3.is_none() || grant.3 == request.namespace)
        && grant.4.as_ref().is_none_or(|names| request.name.as_ref().is_some_and(|n| names.contains(n)))
}

/// The chart's rules for the ServiceAccount `name`: its ClusterRole and its Role.
async fn chart_grants(client: &Client, name: &str) -> Vec<Grant> {
    let cluster_role = Api::<ClusterRole>::all(client.clone()).get(name).await.expect("the ClusterRole");
    let role = Api::<Role>::namespaced(client.clone(), NAMESPACE).get(name).await.expect("the Role");
    let mut all = grants(&cluster_role.rules.unwrap_or_default(), None);
    all.extend(grants(&role.rules.unwrap_or_default(), Some(NAMESPACE)));
    all
}

/// Compares what `account` did with what it is granted; returns the problems found.
fn least_privilege_problems(account: &str, requests: &[Request], granted: &[Grant]) -> Vec<String> {
    let mut problems = Vec::new();
    let refused: BTreeSet<_> = requests.iter().filter(|r| r.code == 403).collect();
    if !refused.is_empty() {
        problems.push(format!("{account}: requests refused: {refused:?}"));
    }
    let outside: BTreeSet<_> =
        requests.iter().filter(|r| r.code != 403 && !granted.iter().any(|g| allows(g, r))).collect();
    if !outside.is_empty() {
        problems.push(format!("{account}: requests no chart rule allows: {outside:?}"));
    }
    let rare_rules = rare();
    for grant in granted {
        let rare =
            rare_rules.iter().any(|(a, g, r, v, _)| *a == account && *g == grant.0 && *r == grant.1 && *v == grant.2);
        let used = requests.iter().any(|r| allows(grant, r));
        match (used, rare) {
            (false, false) => problems.push(format!("{account}: granted but never used: {grant:?}")),
            (true, true) => problems
                .push(format!("{account}: {grant:?} is listed as rare but was used; drop it from the rare rules")),
            _ => {}
        }
    }
    for (a, g, r, v, why) in rare_rules {
        if a == account && !granted.iter().any(|x| x.0 == g && x.1 == r && x.2 == v) {
            problems.push(format!("{account}: the chart does not grant {v} {g}/{r}, needed for {why}"));
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_runs_a_gang_a_preemption_and_a_reclaim_as_the_charts_service_accounts_with_every_rule_used() {
    if !drover_envtest::tools::helm_available() {
        return;
    }
    let options = Options { audit: true, ..Options::default() };
    let Some(cluster) = Cluster::start_without_drover(1, options).await else { return };
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let values = cluster.logs().join("values.yaml");
    std::fs::write(&values, "priorityClasses:\n  enabled: true\n").expect("values written");
    helm(&cluster.server().kubeconfig(), HelmAction::Install(Some(&values))).expect("helm install");

    let scheduler_log = cluster.logs().join("chart-scheduler.log");
    let controllers_log = cluster.logs().join("chart-controllers.log");
    let processes = [
        run_as_chart(&cluster, "scheduler", &scheduler_log).await.expect("the scheduler starts"),
        run_as_chart(&cluster, "controllers", &controllers_log).await.expect("the controllers start"),
    ];

    // Two team namespaces, each a Project of one Department with 4 of its 8 GPUs.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["team-a", "team-b"] {
        create(&namespaces, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        eventually(30, &format!("the default ServiceAccount of {ns}"), || async {
            accounts.get_opt("default").await.ok().flatten()
        })
        .await;
    }
    let departments: Api<Department> = Api::all(client.clone());
    create(
        &departments,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Department", "metadata": {"name": "research"},
            "spec": {"nodePools": [{"name": "gpu", "gpu": "8"}, {"name": "spare", "gpu": "0"}]}}),
    )
    .await;
    let projects: Api<Project> = Api::all(client.clone());
    for (name, ns) in [("proj-a", "team-a"), ("proj-b", "team-b")] {
        create(
            &projects,
            json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project", "metadata": {"name": name},
                "spec": {"department": "research", "namespaces": [ns], "nodePools": [{"name": "gpu", "gpu": "4"}]}}),
        )
        .await;
    }
    // A third project gets two queues, loses one when its spec changes, and the other when
    // it is deleted.
    create(
        &projects,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project", "metadata": {"name": "proj-c"},
            "spec": {"department": "research", "namespaces": ["team-c"],
                "nodePools": [{"name": "gpu", "gpu": "2"}, {"name": "spare", "gpu": "0"}]}}),
    )
    .await;
    let queues: Api<Queue> = Api::all(client.clone());
    eventually(30, &format!("the project queues exist (logs in {logs})"), || async {
        for q in ["research.gpu", "proj-a.gpu", "proj-b.gpu", "proj-c.gpu", "proj-c.spare"] {
            queues.get(q).await.ok()?;
        }
        Some(())
    })
    .await;
    let change = json!({"spec": {"nodePools": [{"name": "gpu", "gpu": "1"}]}});
    projects.patch("proj-c", &PatchParams::default(), &Patch::Merge(&change)).await.expect("project changed");
    eventually(30, &format!("the changed project's queues follow (logs in {logs})"), || async {
        let gpu = queues.get("proj-c.gpu").await.ok()?;
        let deserved = gpu.spec.deserved.get("nvidia.com/gpu")?.0.clone();
        (queues.get_opt("proj-c.spare").await.ok()?.is_none() && deserved == "1").then_some(())
    })
    .await;
    projects.delete("proj-c", &DeleteParams::default()).await.expect("project deleted");
    // Kubernetes' garbage collector deletes it (its owner is gone); it learns of new CRDs on a
    // 30 s discovery cycle, so the first deletion of a kind can take that long.
    eventually(90, &format!("the deleted project's queue goes (logs in {logs})"), || async {
        queues.get_opt("proj-c.gpu").await.ok()?.is_none().then_some(())
    })
    .await;

    // A gang whose first binding meets a conflict; deleted by its TTL once it completes.
    let jobs_a: Api<Job> = Api::namespaced(client.clone(), "team-a");
    let pods_a: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    // A Topology of hosts (which the controllers report on); the gang prefers one host, so the
    // scheduler annotates each of its pods with its domain.
    let topologies: Api<Topology> = Api::all(client.clone());
    create(
        &topologies,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Topology", "metadata": {"name": "default"},
            "spec": {"levels": [{"name": "host", "nodeLabel": "kubernetes.io/hostname"}]}}),
    )
    .await;
    eventually(30, &format!("the Topology is Ready (logs in {logs})"), || async {
        let status = topologies.get("default").await.ok()?.status?;
        status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await;
    cluster.faults().fail_next_writes("pods/binding", 1, 409);
    let mut gang = job("team-a", "gang", None, "train", 2, 2, Some("0.5"));
    gang["spec"]["topology"] = json!({"preferred": "host"});
    create(&jobs_a, gang).await;
    eventually(90, &format!("the gang completes and its TTL deletes it (logs in {logs})"), || async {
        jobs_a.get_opt("gang").await.ok()?.is_none().then_some(())
    })
    .await;

    // A plain notebook pod for Drover: the controllers give it a PodGroup.
    create(
        &pods_a,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": "team-a"},
            "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "jupyter",
                "resources": {"requests": {"cpu": "1"}}}]}}),
    )
    .await;

    // Preemption: train fills the node, chat (higher priority, same queue) takes two GPUs.
    create(&jobs_a, job("team-a", "train", Some("proj-a.gpu"), "train", 8, 1, None)).await;
    eventually(60, &format!("train runs 8 pods (logs in {logs})"), || async {
        (running(&pods_a, "train").await? == 8).then_some(())
    })
    .await;
    create(&jobs_a, job("team-a", "chat", Some("proj-a.gpu"), "interactive-preemptible", 2, 2, None)).await;
    eventually(60, &format!("chat preempts its way in (logs in {logs})"), || async {
        (running(&pods_a, "chat").await? == 2).then_some(())
    })
    .await;

    // Reclaim: project B takes back its deserved 4 GPUs from project A.
    let jobs_b: Api<Job> = Api::namespaced(client.clone(), "team-b");
    let pods_b: Api<Pod> = Api::namespaced(client.clone(), "team-b");
    create(&jobs_b, job("team-b", "b", Some("proj-b.gpu"), "train", 4, 4, None)).await;
    eventually(60, &format!("project B reclaims its 4 GPUs (logs in {logs})"), || async {
        (running(&pods_b, "b").await? == 4).then_some(())
    })
    .await;
    eventually(30, &format!("the notebook runs (logs in {logs})"), || async {
        let pod = pods_a.get("notebook").await.ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    // An elastic scale-down: the controllers delete the extra pods and update the PodGroup.
    let shrink = json!({"spec": {"minAvailable": 2, "tasks": [{"name": "worker", "replicas": 2, "template": {
        "spec": {"containers": [{"name": "main", "image": "trainer", "resources": {
            "requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]}});
    jobs_a.patch("train", &PatchParams::default(), &Patch::Merge(&shrink)).await.expect("train scaled down");
    eventually(60, &format!("train shrinks to 2 pods (logs in {logs})"), || async {
        let list = pods_a.list(&ListParams::default().labels("batch.drover.dev/job-name=train")).await.ok()?;
        (list.items.len() <= 2).then_some(())
    })
    .await;
    // Both leaders renew their Lease at least once.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    eventually(60, "both leaders renewed their Lease", || async {
        for name in ["drover-scheduler", "drover-controllers"] {
            let spec = leases.get(name).await.ok()?.spec?;
            (spec.renew_time? != spec.acquire_time?).then_some(())?;
        }
        Some(())
    })
    .await;
    drop(processes);

    for log in [&scheduler_log, &controllers_log] {
        let text = std::fs::read_to_string(log).expect("log readable");
        assert!(!text.to_lowercase().contains("forbidden"), "{} shows a refused request", log.display());
    }
    let audit = std::fs::read_to_string(cluster.server().plane().dir().join("audit.log")).expect("audit log");
    let mut problems = Vec::new();
    for account in ["drover-scheduler", "drover-controllers"] {
        let user = format!("system:serviceaccount:{NAMESPACE}:{account}");
        let requests = requests_of(&audit, &user);
        assert!(!requests.is_empty(), "no request of {user} in the audit log");
        problems.extend(least_privilege_problems(account, &requests, &chart_grants(&client, account).await));
    }
    assert!(problems.is_empty(), "least privilege does not hold (logs in {logs}):\n{}", problems.join("\n"));
}

#[test]
fn the_comparison_finds_unused_and_missing_rules() {
    let request = |verb: &str, resource: &str, code| Request {
        verb: verb.into(),
        group: String::new(),
        resource: resource.into(),
        namespace: Some("team".into()),
        name: None,
        code,
    };
    let grant = |resource: &str, verb: &str| (String::new(), resource.to_string(), verb.to_string(), None, None);
    let granted = vec![grant("pods", "list"), grant("pods", "watch"), grant("nodes", "list")];
    let requests = vec![request("list", "pods", 200), request("watch", "pods", 200), request("get", "pods", 403)];
    let problems = least_privilege_problems("someone", &requests, &granted);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("refused"), "{problems:?}");
    assert!(problems[1].contains("never used") && problems[1].contains("nodes"), "{problems:?}");
}
