//! The queue controllers against a real kube-apiserver (drover-envtest, through its fault
//! proxy): the Department/Project queue tree, namespace labels, one-pod PodGroups, Queue
//! status, idempotence and API faults.
//!
//! Each test starts its own control plane (API server and etcd only: no garbage collector, no
//! ServiceAccount admission); without the control-plane binaries it says it is skipped and
//! passes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_api::crd::department::Department;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::project::Project;
use drover_api::crd::queue::{PodGroupCounts, Queue};
use drover_controllers::queues::{self, reasons};
use drover_envtest::{eventually, Server};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(30);

/// A real API server with Drover's CRDs; `None` when the test is skipped (no control-plane
/// binaries).
async fn server() -> Option<(Server, Client)> {
    let server = Server::start().await?;
    let client = server.client();
    drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
    Some((server, client))
}

/// The three controllers, running until [`Controllers::stop`].
struct Controllers {
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
}

fn start(client: &Client) -> Controllers {
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    let mut signal = || {
        let (tx, rx) = oneshot::channel::<()>();
        stops.push(tx);
        async move {
            let _ = rx.await;
        }
    };
    tasks.push(tokio::spawn(queues::run_queue_tree(client.clone(), signal())));
    tasks.push(tokio::spawn(queues::run_pod_groups(client.clone(), signal())));
    tasks.push(tokio::spawn(queues::run_queue_status(client.clone(), signal())));
    Controllers { stops, tasks }
}

impl Controllers {
    async fn stop(self) {
        for s in self.stops {
            let _ = s.send(());
        }
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("controller stops in time")
                .expect("controller task")
                .expect("controller returns Ok");
        }
    }
}

fn obj<K: DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("test object deserializes")
}

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &obj::<K>(v)).await.expect("create")
}

fn pool(name: &str, quota: Value) -> Value {
    let mut p = quota;
    p["name"] = json!(name);
    p
}

async fn department(client: &Client, name: &str, pools: Vec<Value>) -> Department {
    create(&Api::all(client.clone()), json!({"metadata": {"name": name}, "spec": {"nodePools": pools}})).await
}

async fn project(client: &Client, name: &str, dept: &str, namespaces: &[&str], pools: Vec<Value>) -> Project {
    let spec = json!({"department": dept, "namespaces": namespaces, "nodePools": pools});
    create(&Api::all(client.clone()), json!({"metadata": {"name": name}, "spec": spec})).await
}

async fn namespace(client: &Client, name: &str) {
    create::<Namespace>(&Api::all(client.clone()), json!({"metadata": {"name": name}})).await;
}

async fn get<K>(api: &Api<K>, name: &str) -> Option<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.expect("get")
}

fn valid(conditions: &[Condition]) -> Option<(String, String)> {
    conditions.iter().find(|c| c.type_ == "Valid").map(|c| (c.status.clone(), c.reason.clone()))
}

fn project_valid(p: &Project) -> Option<(String, String)> {
    p.status.as_ref().and_then(|s| valid(&s.conditions))
}

async fn wait_project(client: &Client, name: &str, status: &str, reason: &str) -> Project {
    let api: Api<Project> = Api::all(client.clone());
    eventually(WAIT.as_secs(), &format!("project {name} Valid={status} {reason}"), || async {
        let p = get(&api, name).await?;
        (project_valid(&p) == Some((status.into(), reason.into()))
            && p.status.as_ref()?.observed_generation == p.metadata.generation)
            .then_some(p)
    })
    .await
}

async fn queue_names(client: &Client, selector: &str) -> Vec<String> {
    let api: Api<Queue> = Api::all(client.clone());
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list")
        .items
        .iter()
        .map(|q| q.name_any())
        .collect();
    names.sort();
    names
}

async fn wait_queues(client: &Client, selector: &str, want: &[&str]) {
    eventually(WAIT.as_secs(), &format!("queues {selector} = {want:?}"), || async {
        (queue_names(client, selector).await == want).then_some(())
    })
    .await
}

async fn warning_event(client: &Client, object: &str, reason: &str) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let selector = format!("involvedObject.name={object},reason={reason}");
    eventually(WAIT.as_secs(), &format!("a {reason} event on {object}"), || async {
        api.list(&ListParams::default().fields(&selector)).await.ok()?.items.into_iter().next()
    })
    .await
}

fn quantities(pairs: &[(&str, &str)]) -> Value {
    pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>().into()
}

fn as_json<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

/// `kind/namespace/name` -> resourceVersion of every object of `api`.
async fn versions<K>(api: Api<K>, kind: &str) -> BTreeMap<String, String>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let list = api.list(&ListParams::default()).await.expect("list");
    list.items
        .iter()
        .map(|o| {
            let key = format!("{kind}/{}/{}", o.namespace().unwrap_or_default(), o.name_any());
            (key, o.resource_version().unwrap_or_default())
        })
        .collect()
}

/// The resourceVersion of every object of the kinds the controllers write (any create, update
/// or delete changes it). Not the list resourceVersion: a real API server's is etcd's
/// revision, which the server's own lease renewals move too.
async fn written(client: &Client) -> BTreeMap<String, String> {
    let mut all = versions(Api::<Queue>::all(client.clone()), "queue").await;
    all.extend(versions(Api::<Project>::all(client.clone()), "project").await);
    all.extend(versions(Api::<Department>::all(client.clone()), "department").await);
    all.extend(versions(Api::<Namespace>::all(client.clone()), "namespace").await);
    all.extend(versions(Api::<Pod>::all(client.clone()), "pod").await);
    all.extend(versions(Api::<PodGroup>::all(client.clone()), "podgroup").await);
    all.extend(versions(Api::<Event>::all(client.clone()), "event").await);
    all
}

/// Waits until the controllers have written nothing for `quiet`.
async fn settle(client: &Client, quiet: Duration) -> BTreeMap<String, String> {
    let mut last = written(client).await;
    let deadline = Instant::now() + WAIT;
    loop {
        tokio::time::sleep(quiet).await;
        let now = written(client).await;
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "the cluster never settles");
        last = now;
    }
}

async fn research_tree(client: &Client) -> (Department, Project, Project) {
    let dept = department(
        client,
        "research",
        vec![
            pool(
                "a100",
                json!({"gpu": "8", "cpu": "64", "memory": "256Gi", "overQuotaWeight": 2, "gpuLimit": "12",
                    "maxRunningJobs": 20, "maxRunningPods": 300, "preemptMinRuntimeSeconds": 600,
                    "reclaimMinRuntimeSeconds": 1800}),
            ),
            pool("h100", json!({"gpu": "4"})),
        ],
    )
    .await;
    let vision = project(
        client,
        "vision",
        "research",
        &["team-vision"],
        vec![pool("a100", json!({"gpu": "4", "overQuotaWeight": 3})), pool("h100", json!({"gpu": "2"}))],
    )
    .await;
    let nlp = project(client, "nlp", "research", &[], vec![pool("a100", json!({"gpu": "2", "cpu": "16"}))]).await;
    (dept, vision, nlp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn departments_and_projects_become_the_queue_tree() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    let (dept, vision, _nlp) = research_tree(&client).await;
    wait_queues(&client, queues::LABEL_DEPARTMENT, &["research.a100", "research.h100"]).await;
    wait_queues(&client, queues::LABEL_PROJECT, &["nlp.a100", "vision.a100", "vision.h100"]).await;

    let api: Api<Queue> = Api::all(client.clone());
    let top = get(&api, "research.a100").await.unwrap();
    assert_eq!(top.spec.parent, None);
    assert_eq!(as_json(&top.spec.deserved), quantities(&[("cpu", "64"), ("memory", "256Gi"), ("nvidia.com/gpu", "8")]));
    assert_eq!(top.spec.limit.as_ref().map(as_json), Some(quantities(&[("nvidia.com/gpu", "12")])));
    assert_eq!(top.spec.over_quota_weight, 2);
    let run = &top.spec.run_bounds;
    assert_eq!((run.max_running_jobs, run.max_running_pods), (Some(20), Some(300)));
    assert_eq!((run.preempt_min_runtime_seconds, run.reclaim_min_runtime_seconds), (Some(600), Some(1800)));
    assert!(top.spec.reclaimable);
    assert_eq!(top.labels().get(queues::LABEL_NODE_POOL).map(String::as_str), Some("a100"));
    assert_eq!(top.labels().get(queues::LABEL_DEPARTMENT).map(String::as_str), Some("research"));
    let owner = &top.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Department", "research", Some(true)));
    assert_eq!(Some(&owner.uid), dept.uid().as_ref());
    assert_eq!(owner.api_version, "scheduling.drover.dev/v1alpha1");

    let leaf = get(&api, "vision.h100").await.unwrap();
    assert_eq!(leaf.spec.parent.as_deref(), Some("research.h100"));
    assert_eq!(as_json(&leaf.spec.deserved), quantities(&[("nvidia.com/gpu", "2")]));
    assert_eq!(leaf.spec.limit, None);
    assert_eq!(leaf.spec.over_quota_weight, 1);
    assert_eq!(leaf.labels().get(queues::LABEL_PROJECT).map(String::as_str), Some("vision"));
    assert_eq!(leaf.labels().get(queues::LABEL_NODE_POOL).map(String::as_str), Some("h100"));
    assert!(!leaf.labels().contains_key(queues::LABEL_DEPARTMENT));
    let fence = serde_json::to_value(&leaf.spec.namespace_selector).unwrap();
    assert_eq!(
        fence,
        serde_json::json!({"matchLabels": {queues::LABEL_PROJECT: "vision"}}),
        "only vision's namespaces"
    );
    wait_fence(
        &client,
        "research.a100",
        json!([{"key": queues::LABEL_PROJECT, "operator": "In", "values": ["nlp", "vision"]}]),
    )
    .await;
    let owner = &leaf.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Project", "vision", Some(true)));
    assert_eq!(Some(&owner.uid), vision.uid().as_ref());
    assert_eq!(get(&api, "vision.a100").await.unwrap().spec.over_quota_weight, 3);
    assert_eq!(get(&api, "nlp.a100").await.unwrap().spec.parent.as_deref(), Some("research.a100"));

    let vision = wait_project(&client, "vision", "True", reasons::QUEUES_READY).await;
    let status = vision.status.unwrap();
    assert_eq!(status.queues, ["vision.a100", "vision.h100"]);
    assert_eq!(status.observed_generation, Some(1));
    let depts: Api<Department> = Api::all(client.clone());
    let dept = eventually(WAIT.as_secs(), "department status", || async {
        let d = get(&depts, "research").await?;
        (d.status.as_ref()?.queues.len() == 2).then_some(d)
    })
    .await;
    let status = dept.status.unwrap();
    assert_eq!(status.queues, ["research.a100", "research.h100"]);
    assert_eq!(valid(&status.conditions), Some(("True".into(), reasons::QUEUES_READY.into())));
    assert_eq!(status.observed_generation, Some(1));
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_changes_update_queues_and_removed_pools_delete_them() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    research_tree(&client).await;
    wait_queues(&client, queues::LABEL_PROJECT, &["nlp.a100", "vision.a100", "vision.h100"]).await;
    let projects: Api<Project> = Api::all(client.clone());
    let queues_api: Api<Queue> = Api::all(client.clone());

    let patch = json!({"spec": {"nodePools": [
        pool("a100", json!({"gpu": "6", "overQuotaWeight": 3, "gpuLimit": "10"})),
        pool("h100", json!({"gpu": "2"})),
    ]}});
    projects.patch("vision", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually(WAIT.as_secs(), "vision.a100 with the new quota", || async {
        let q = get(&queues_api, "vision.a100").await?;
        (as_json(&q.spec.deserved) == quantities(&[("nvidia.com/gpu", "6")])
            && q.spec.limit.as_ref().map(as_json) == Some(quantities(&[("nvidia.com/gpu", "10")])))
        .then_some(())
    })
    .await;

    let patch = json!({"spec": {"nodePools": [pool("a100", json!({"gpu": "6", "overQuotaWeight": 3}))]}});
    projects.patch("vision", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_queues(&client, queues::LABEL_PROJECT, &["nlp.a100", "vision.a100"]).await;
    let vision = wait_project(&client, "vision", "True", reasons::QUEUES_READY).await;
    assert_eq!(vision.status.as_ref().unwrap().queues, ["vision.a100"]);
    assert_eq!(vision.status.unwrap().observed_generation, Some(3));
    let limit = get(&queues_api, "vision.a100").await.unwrap().spec.limit;
    assert_eq!(limit, None, "a removed gpuLimit removes the queue's limit");

    let depts: Api<Department> = Api::all(client.clone());
    let patch = json!({"spec": {"nodePools": [pool("a100", json!({"gpu": "8"}))]}});
    depts.patch("research", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_queues(&client, queues::LABEL_DEPARTMENT, &["research.a100"]).await;
    let top = get(&queues_api, "research.a100").await.unwrap();
    assert_eq!(top.spec.limit, None);
    assert_eq!(top.spec.over_quota_weight, 1);
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_without_its_department_is_invalid_until_it_exists() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    project(&client, "orphan", "ghost", &[], vec![pool("a100", json!({"gpu": "1"}))]).await;
    let p = wait_project(&client, "orphan", "False", reasons::DEPARTMENT_NOT_FOUND).await;
    assert!(p.status.unwrap().queues.is_empty());
    let event = warning_event(&client, "orphan", reasons::DEPARTMENT_NOT_FOUND).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.involved_object.kind.as_deref(), Some("Project"));
    assert!(event.message.unwrap().contains("ghost"));
    assert!(queue_names(&client, queues::LABEL_PROJECT).await.is_empty());

    // A project naming a pool its department lacks gets the other pools only.
    project(&client, "wide", "ghost", &[], vec![pool("a100", json!({})), pool("b200", json!({}))]).await;
    department(&client, "ghost", vec![pool("a100", json!({"gpu": "2"}))]).await;
    let p = wait_project(&client, "orphan", "True", reasons::QUEUES_READY).await;
    assert_eq!(p.status.unwrap().queues, ["orphan.a100"]);
    let q = get(&Api::<Queue>::all(client.clone()), "orphan.a100").await.unwrap();
    assert_eq!(q.spec.parent.as_deref(), Some("ghost.a100"));
    let wide = wait_project(&client, "wide", "False", reasons::NODE_POOL_NOT_IN_DEPARTMENT).await;
    assert_eq!(wide.status.unwrap().queues, ["wide.a100"]);
    warning_event(&client, "wide", reasons::NODE_POOL_NOT_IN_DEPARTMENT).await;
    wait_queues(&client, queues::LABEL_PROJECT, &["orphan.a100", "wide.a100"]).await;

    // Without the department again, the project queues go.
    Api::<Department>::all(client.clone()).delete("ghost", &DeleteParams::default()).await.unwrap();
    wait_project(&client, "orphan", "False", reasons::DEPARTMENT_NOT_FOUND).await;
    wait_queues(&client, queues::LABEL_PROJECT, &[]).await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_are_labelled_and_a_second_claim_is_refused() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    for ns in ["team-a", "team-b", "shared"] {
        namespace(&client, ns).await;
    }
    department(&client, "d", vec![pool("p", json!({}))]).await;
    project(&client, "alpha", "d", &["team-a", "shared", "not-there"], vec![pool("p", json!({}))]).await;
    project(&client, "beta", "d", &["team-b", "shared"], vec![pool("p", json!({}))]).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let label_of = |name: &'static str| {
        let namespaces = namespaces.clone();
        async move { get(&namespaces, name).await.and_then(|ns| ns.labels().get(queues::LABEL_PROJECT).cloned()) }
    };
    let beta = wait_project(&client, "beta", "False", reasons::NAMESPACE_CLAIMED).await;
    let message = &beta.status.unwrap().conditions[0].message;
    assert!(message.contains("\"shared\"") && message.contains("alpha"), "{message}");
    warning_event(&client, "beta", reasons::NAMESPACE_CLAIMED).await;
    wait_project(&client, "alpha", "True", reasons::QUEUES_READY).await;
    eventually(WAIT.as_secs(), "labels", || async {
        (label_of("team-a").await.as_deref() == Some("alpha")
            && label_of("shared").await.as_deref() == Some("alpha")
            && label_of("team-b").await.as_deref() == Some("beta"))
        .then_some(())
    })
    .await;
    assert!(get(&namespaces, "not-there").await.is_none(), "namespaces are never created");

    // alpha lets go of "shared": beta gets it and is valid.
    let patch = json!({"spec": {"namespaces": ["team-a"]}});
    Api::<Project>::all(client.clone()).patch("alpha", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_project(&client, "beta", "True", reasons::QUEUES_READY).await;
    eventually(WAIT.as_secs(), "shared labelled beta", || async {
        (label_of("shared").await.as_deref() == Some("beta")).then_some(())
    })
    .await;
    // beta drops team-b: the label goes.
    let patch = json!({"spec": {"namespaces": ["shared"]}});
    Api::<Project>::all(client.clone()).patch("beta", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually(WAIT.as_secs(), "team-b unlabelled", || async { label_of("team-b").await.is_none().then_some(()) })
        .await;
    controllers.stop().await;
}

fn pod(name: &str, scheduler: &str, extra: Value) -> Value {
    let mut p = json!({
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "busybox"}]},
    });
    json_patch_merge(&mut p, extra);
    p
}

fn json_patch_merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                json_patch_merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

async fn plain_pod_setup(client: &Client) {
    namespace(client, "team-a").await;
    department(client, "research", vec![pool("a100", json!({})), pool("h100", json!({}))]).await;
    project(client, "vision", "research", &["team-a"], vec![pool("a100", json!({})), pool("h100", json!({}))]).await;
    create::<PriorityClass>(&Api::all(client.clone()), json!({"metadata": {"name": "train"}, "value": 50})).await;
    wait_project(client, "vision", "True", reasons::QUEUES_READY).await;
}

async fn wait_group(client: &Client, namespace: &str, pod: &str) -> (PodGroup, Pod) {
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    eventually(WAIT.as_secs(), &format!("a group for {namespace}/{pod}"), || async {
        let p = get(&pods, pod).await?;
        p.annotations().get(queues::ANNOTATION_POD_GROUP)?;
        Some((get(&groups, &format!("pod-{pod}")).await?, p))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_pods_get_one_pod_groups_in_their_project_queue() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    plain_pod_setup(&client).await;
    let team: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    let default: Api<Pod> = Api::namespaced(client.clone(), "default");
    let selector = json!({"spec": {"nodeSelector": {"drover.dev/node-pool": "h100"}, "priorityClassName": "train"}});
    let p1 = create(&team, pod("on-h100", "drover", selector)).await;
    create(&team, pod("anywhere", "drover", json!({}))).await;
    let annotated = json!({"metadata": {"annotations": {"scheduling.drover.dev/queue": "special"}}});
    create(&team, pod("override", "drover", annotated)).await;
    create(&default, pod("homeless", "drover", json!({}))).await;
    create(&team, pod("other-scheduler", "default-scheduler", json!({}))).await;
    create(&team, pod("job-pod", "drover", json!({"metadata": {"labels": {"batch.drover.dev/job-name": "j"}}}))).await;
    let grouped = json!({"metadata": {"annotations": {"scheduling.drover.dev/pod-group": "mine"}}});
    create(&team, pod("pre-grouped", "drover", grouped)).await;

    let (g1, pod1) = wait_group(&client, "team-a", "on-h100").await;
    assert_eq!(g1.spec.queue.as_deref(), Some("vision.h100"));
    assert_eq!(g1.spec.min_member, 1);
    assert_eq!(g1.spec.priority_class_name.as_deref(), Some("train"));
    let owner = &g1.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Pod", "on-h100", Some(true)));
    assert_eq!(Some(&owner.uid), p1.uid().as_ref());
    assert_eq!(pod1.annotations().get(queues::ANNOTATION_POD_GROUP).map(String::as_str), Some("pod-on-h100"));
    let (g2, _) = wait_group(&client, "team-a", "anywhere").await;
    assert_eq!(g2.spec.queue.as_deref(), Some("vision.a100"), "no pool selected: the project's first pool");
    assert_eq!(g2.spec.priority_class_name, None);
    let (g3, _) = wait_group(&client, "team-a", "override").await;
    assert_eq!(g3.spec.queue.as_deref(), Some("special"));
    let (g4, _) = wait_group(&client, "default", "homeless").await;
    assert_eq!(g4.spec.queue.as_deref(), Some("default"));

    // A pool the project lacks: the default queue and a Warning.
    let selector = json!({"spec": {"nodeSelector": {"drover.dev/node-pool": "tpu"}}});
    create(&team, pod("on-tpu", "drover", selector)).await;
    let (g5, _) = wait_group(&client, "team-a", "on-tpu").await;
    assert_eq!(g5.spec.queue.as_deref(), Some("default"));
    let events: Api<Event> = Api::namespaced(client.clone(), "team-a");
    let selector = format!("involvedObject.name=on-tpu,reason={}", reasons::NODE_POOL_NOT_IN_PROJECT);
    assert_eq!(events.list(&ListParams::default().fields(&selector)).await.unwrap().items.len(), 1);

    settle(&client, Duration::from_millis(300)).await;
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), "team-a");
    for untouched in ["other-scheduler", "job-pod", "pre-grouped"] {
        assert!(get(&groups, &format!("pod-{untouched}")).await.is_none(), "{untouched} has no group");
        let p = get(&team, untouched).await.unwrap();
        let want = (untouched == "pre-grouped").then_some("mine");
        assert_eq!(p.annotations().get(queues::ANNOTATION_POD_GROUP).map(String::as_str), want, "{untouched}");
    }
    assert_eq!(groups.list(&ListParams::default()).await.unwrap().items.len(), 4);
    controllers.stop().await;
}

/// Waits until queue `name`'s `namespaceSelector` is exactly `matchExpressions: want`.
async fn wait_fence(client: &Client, name: &str, want: Value) {
    let api: Api<Queue> = Api::all(client.clone());
    let want = json!({"matchExpressions": want});
    eventually(WAIT.as_secs(), &format!("queue {name} selects {want}"), || async {
        let q = get(&api, name).await?;
        (serde_json::to_value(&q.spec.namespace_selector).ok()? == want).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_department_queue_admits_exactly_its_projects_namespaces() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    let key = queues::LABEL_PROJECT;
    department(&client, "research", vec![pool("a100", json!({})), pool("h100", json!({}))]).await;
    department(&client, "other", vec![pool("a100", json!({}))]).await;
    // No project yet: the label both absent and present, which no namespace is.
    let none = json!([{"key": key, "operator": "DoesNotExist"}, {"key": key, "operator": "Exists"}]);
    wait_fence(&client, "research.a100", none.clone()).await;
    wait_fence(&client, "research.h100", none.clone()).await;

    project(&client, "vision", "research", &["team-vision"], vec![pool("a100", json!({}))]).await;
    project(&client, "nlp", "research", &["team-nlp"], vec![pool("a100", json!({})), pool("h100", json!({}))]).await;
    project(&client, "outsider", "other", &["team-out"], vec![pool("a100", json!({}))]).await;
    wait_fence(&client, "research.a100", json!([{"key": key, "operator": "In", "values": ["nlp", "vision"]}])).await;
    wait_fence(&client, "research.h100", json!([{"key": key, "operator": "In", "values": ["nlp"]}])).await;
    wait_fence(&client, "other.a100", json!([{"key": key, "operator": "In", "values": ["outsider"]}])).await;

    // What the selector means, on namespaces labelled as the controllers label them.
    let api: Api<Queue> = Api::all(client.clone());
    let selector = get(&api, "research.a100").await.unwrap().spec.namespace_selector.unwrap();
    for (project, admitted) in [("vision", true), ("nlp", true), ("outsider", false)] {
        let labels = BTreeMap::from([(key.to_string(), project.to_string())]);
        assert_eq!(drover_api::label_selector::selects(&selector, &labels), Ok(admitted), "{project}");
    }
    assert_eq!(drover_api::label_selector::selects(&selector, &BTreeMap::new()), Ok(false), "no project");

    // A project that leaves takes its namespaces out; the last one leaves none.
    Api::<Project>::all(client.clone()).delete("vision", &DeleteParams::default()).await.unwrap();
    wait_fence(&client, "research.a100", json!([{"key": key, "operator": "In", "values": ["nlp"]}])).await;
    let moved = json!({"spec": {"department": "other"}});
    Api::<Project>::all(client.clone()).patch("nlp", &PatchParams::default(), &Patch::Merge(&moved)).await.unwrap();
    wait_fence(&client, "research.a100", none.clone()).await;
    wait_fence(&client, "other.a100", json!([{"key": key, "operator": "In", "values": ["nlp", "outsider"]}])).await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_grouped_before_its_project_moves_to_the_project_queue() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    namespace(&client, "team-late").await;
    department(&client, "research", vec![pool("a100", json!({}))]).await;
    let team: Api<Pod> = Api::namespaced(client.clone(), "team-late");
    create(&team, pod("early", "drover", json!({}))).await;
    let (g, _) = wait_group(&client, "team-late", "early").await;
    assert_eq!(g.spec.queue.as_deref(), Some("default"), "no project yet");

    project(&client, "late", "research", &["team-late"], vec![pool("a100", json!({}))]).await;
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), "team-late");
    eventually(WAIT.as_secs(), "the group moves to late.a100", || async {
        (get(&groups, "pod-early").await?.spec.queue.as_deref() == Some("late.a100")).then_some(())
    })
    .await;
    controllers.stop().await;
}

async fn queue(client: &Client, name: &str, parent: Option<&str>) -> Queue {
    create(&Api::all(client.clone()), json!({"metadata": {"name": name}, "spec": {"parent": parent}})).await
}

async fn group(client: &Client, name: &str, queue: &str, phase: Option<&str>) {
    let api: Api<PodGroup> = Api::namespaced(client.clone(), "default");
    create(&api, json!({"metadata": {"name": name}, "spec": {"minMember": 1, "queue": queue}})).await;
    if let Some(phase) = phase {
        set_phase(client, name, phase).await;
    }
}

async fn set_phase(client: &Client, name: &str, phase: &str) {
    let api: Api<PodGroup> = Api::namespaced(client.clone(), "default");
    let patch = json!({"status": {"phase": phase}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

async fn wait_counts(client: &Client, name: &str, want: PodGroupCounts) -> Queue {
    let api: Api<Queue> = Api::all(client.clone());
    eventually(WAIT.as_secs(), &format!("queue {name} counts {want:?}"), || async {
        let q = get(&api, name).await?;
        (q.status.as_ref()?.pod_groups == want).then_some(q)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_status_counts_follow_pod_group_phases() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    queue(&client, "q", None).await;
    queue(&client, "other", None).await;
    // The scheduler's fields, which the controller must keep.
    let scheduler = json!({"status": {"allocated": {"cpu": "1"}, "queueState": "InQuota"}});
    let queues_api: Api<Queue> = Api::all(client.clone());
    queues_api.patch_status("q", &PatchParams::default(), &Patch::Merge(&scheduler)).await.unwrap();
    group(&client, "g1", "q", None).await;
    group(&client, "g2", "q", Some("Running")).await;
    group(&client, "g3", "q", Some("Completed")).await;
    group(&client, "g4", "other", Some("Failed")).await;
    let q =
        wait_counts(&client, "q", PodGroupCounts { pending: 1, running: 1, completed: 1, ..Default::default() }).await;
    let status = q.status.unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(valid(&status.conditions), Some(("True".into(), reasons::QUEUE_VALID.into())));
    assert_eq!(as_json(&status.allocated), quantities(&[("cpu", "1")]));
    assert_eq!(status.queue_state.as_deref(), Some("InQuota"));
    wait_counts(&client, "other", PodGroupCounts { failed: 1, ..Default::default() }).await;

    set_phase(&client, "g1", "Inqueue").await;
    wait_counts(&client, "q", PodGroupCounts { inqueue: 1, running: 1, completed: 1, ..Default::default() }).await;
    Api::<PodGroup>::namespaced(client.clone(), "default").delete("g3", &DeleteParams::default()).await.unwrap();
    wait_counts(&client, "q", PodGroupCounts { inqueue: 1, running: 1, ..Default::default() }).await;
    // A group moving queues leaves one and joins the other.
    let patch = json!({"spec": {"queue": "other"}});
    Api::<PodGroup>::namespaced(client.clone(), "default")
        .patch("g2", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_counts(&client, "q", PodGroupCounts { inqueue: 1, ..Default::default() }).await;
    let other = wait_counts(&client, "other", PodGroupCounts { running: 1, failed: 1, ..Default::default() }).await;
    assert_eq!(other.status.unwrap().queue_state, None);
    let q = get(&queues_api, "q").await.unwrap().status.unwrap();
    assert_eq!(as_json(&q.allocated), quantities(&[("cpu", "1")]), "the scheduler's fields stay");
    controllers.stop().await;
}

async fn wait_queue_valid(client: &Client, name: &str, status: &str, reason: &str) -> Queue {
    let api: Api<Queue> = Api::all(client.clone());
    eventually(WAIT.as_secs(), &format!("queue {name} Valid={status} {reason}"), || async {
        let q = get(&api, name).await?;
        (valid(&q.status.as_ref()?.conditions) == Some((status.into(), reason.into()))).then_some(q)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_parents_and_cycles_make_queues_invalid() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    queue(&client, "child", Some("nope")).await;
    wait_queue_valid(&client, "child", "False", reasons::PARENT_NOT_FOUND).await;
    let event = warning_event(&client, "child", reasons::PARENT_NOT_FOUND).await;
    assert_eq!(event.involved_object.kind.as_deref(), Some("Queue"));
    queue(&client, "nope", None).await;
    wait_queue_valid(&client, "child", "True", reasons::QUEUE_VALID).await;

    queue(&client, "a", Some("b")).await;
    queue(&client, "b", Some("a")).await;
    queue(&client, "below", Some("a")).await;
    let a = wait_queue_valid(&client, "a", "False", reasons::QUEUE_CYCLE).await;
    let message = &a.status.unwrap().conditions[0].message;
    assert!(message.contains("a -> b -> a"), "{message}");
    wait_queue_valid(&client, "b", "False", reasons::QUEUE_CYCLE).await;
    wait_queue_valid(&client, "below", "False", reasons::PARENT_INVALID).await;
    warning_event(&client, "b", reasons::QUEUE_CYCLE).await;

    let patch = json!({"spec": {"parent": null}});
    Api::<Queue>::all(client.clone()).patch("b", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    for name in ["a", "b", "below"] {
        wait_queue_valid(&client, name, "True", reasons::QUEUE_VALID).await;
    }
    let b = get(&Api::<Queue>::all(client.clone()), "b").await.unwrap();
    assert_eq!(b.status.unwrap().observed_generation, Some(2));
    controllers.stop().await;
}

/// Everything the three controllers write, converged.
async fn converge_everything(client: &Client) {
    namespace(client, "team-vision").await;
    research_tree(client).await;
    // A pod that arrives before its namespace's project goes to `default`.
    wait_project(client, "vision", "True", reasons::QUEUES_READY).await;
    create::<Pod>(&Api::namespaced(client.clone(), "team-vision"), pod("worker", "drover", json!({}))).await;
    wait_converged(client).await;
}

/// Waits for what [`converge_everything`] makes.
async fn wait_converged(client: &Client) {
    wait_queues(client, queues::LABEL_PROJECT, &["nlp.a100", "vision.a100", "vision.h100"]).await;
    wait_project(client, "vision", "True", reasons::QUEUES_READY).await;
    wait_project(client, "nlp", "True", reasons::QUEUES_READY).await;
    let (g, _) = wait_group(client, "team-vision", "worker").await;
    assert_eq!(g.spec.queue.as_deref(), Some("vision.a100"));
    wait_counts(client, "vision.a100", PodGroupCounts { pending: 1, ..Default::default() }).await;
    for q in ["research.a100", "research.h100", "vision.h100", "nlp.a100"] {
        wait_queue_valid(client, q, "True", reasons::QUEUE_VALID).await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually(WAIT.as_secs(), "team-vision labelled", || async {
        let ns = get(&namespaces, "team-vision").await?;
        (ns.labels().get(queues::LABEL_PROJECT)? == "vision").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_reconcile_writes_nothing() {
    let Some((_server, client)) = server().await else { return };
    let controllers = start(&client);
    converge_everything(&client).await;
    let before = settle(&client, Duration::from_millis(500)).await;
    controllers.stop().await;

    // Fresh controllers reconcile everything again from their initial lists.
    let controllers = start(&client);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(written(&client).await, before, "restarted controllers wrote something");
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_and_server_errors_are_survived() {
    let Some((server, client)) = server().await else { return };
    // The test's own writes come before the faults (and the controllers: the pod controller
    // waits for its project store, so the pod goes to its project's queue).
    namespace(&client, "team-vision").await;
    research_tree(&client).await;
    create::<Pod>(&Api::namespaced(client.clone(), "team-vision"), pod("worker", "drover", json!({}))).await;
    let faults = server.faults();
    faults.fail_next_writes("queues", 3, 409);
    faults.fail_next_writes("projects/status", 2, 500);
    faults.fail_next_writes("departments/status", 1, 409);
    faults.fail_next_writes("namespaces", 1, 409);
    faults.fail_next_writes("podgroups", 2, 500);
    faults.fail_next_writes("pods", 1, 409);
    faults.fail_next_writes("queues/status", 2, 500);
    let controllers = start(&client);
    tokio::time::sleep(Duration::from_millis(100)).await;
    faults.drop_watches();
    wait_converged(&client).await;

    // A conflict while updating a queue: the new quota still lands.
    faults.fail_next_writes("queues", 2, 409);
    let patch = json!({"spec": {"nodePools": [pool("a100", json!({"gpu": "5"}))]}});
    Api::<Project>::all(client.clone()).patch("nlp", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let api: Api<Queue> = Api::all(client.clone());
    eventually(WAIT.as_secs(), "nlp.a100 updated", || async {
        let q = get(&api, "nlp.a100").await?;
        (as_json(&q.spec.deserved) == quantities(&[("nvidia.com/gpu", "5")])).then_some(())
    })
    .await;

    // Every injected fault was met by a controller write (none is left for these probes).
    let nothing = Patch::Merge(json!({}));
    let pp = PatchParams::default();
    api.patch("nlp.a100", &pp, &nothing).await.expect("no queue fault left");
    api.patch_status("nlp.a100", &pp, &nothing).await.expect("no queue status fault left");
    Api::<Project>::all(client.clone()).patch_status("nlp", &pp, &nothing).await.expect("no project status fault left");
    let depts = Api::<Department>::all(client.clone());
    depts.patch_status("research", &pp, &nothing).await.expect("no department status fault left");
    Api::<Namespace>::all(client.clone()).patch("team-vision", &pp, &nothing).await.expect("no namespace fault left");
    let pods = Api::<Pod>::namespaced(client.clone(), "team-vision");
    pods.patch("worker", &pp, &nothing).await.expect("no pod fault left");
    let groups = Api::<PodGroup>::namespaced(client.clone(), "team-vision");
    groups.patch("pod-worker", &pp, &nothing).await.expect("no pod group fault left");
    controllers.stop().await;
}
