//! Resilience end to end, through the real binaries: leader failover in the middle of a gang's
//! bindings, a controllers crash and restart, API faults (failed writes, dropped watches), bad
//! input reported as conditions and Events, and schema rejections at apply time.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use drover_e2e::{eventually, lease_holder, Cluster};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{json, Value};

const JOB_LABEL: &str = "batch.drover.dev/job-name";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Sends a signal to the process whose pid ends a default identity (`<host>_<pid>`).
fn signal_identity(identity: &str, signal: &str) {
    let pid = identity.rsplit('_').next().expect("identity has a pid");
    assert!(pid.parse::<u32>().is_ok(), "identity {identity:?} does not end in a pid");
    let status = Command::new("kill").args([signal, pid]).status().expect("kill runs");
    assert!(status.success(), "kill {signal} {pid} failed");
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural)
}

fn jobs_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &resource("batch.drover.dev", "Job", "jobs"))
}

fn podgroups_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &resource("scheduling.drover.dev", "PodGroup", "podgroups"))
}

fn queues_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("scheduling.drover.dev", "Queue", "queues"))
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a valid object")
}

/// A one-task Job of `replicas` pods, each asking `gpus` GPUs and running `secs` seconds.
fn job(name: &str, replicas: u32, gpus: u32, secs: u32, extra_spec: Value) -> DynamicObject {
    let mut spec = json!({
        "minAvailable": replicas,
        "tasks": [{
            "name": "worker",
            "replicas": replicas,
            "template": {
                "metadata": {"annotations": {"sim.drover.dev/duration": secs.to_string()}},
                "spec": {"containers": [{"name": "main", "image": "trainer",
                    "resources": {"requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "100m"},
                        "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
            }
        }]
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    object(json!({
        "apiVersion": "batch.drover.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
}

async fn create(api: &Api<DynamicObject>, obj: &DynamicObject) {
    api.create(&PostParams::default(), obj).await.expect("object created");
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn phase_of(pod: &Pod) -> String {
    pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

async fn job_pods(pods: &Api<Pod>, job: &str) -> Option<Vec<Pod>> {
    Some(pods.list(&ListParams::default().labels(&format!("{JOB_LABEL}={job}"))).await.ok()?.items)
}

/// Watches a job's pods across polls: a pod (by uid) never changes node once bound, a name
/// never has two pods at once, and the job never has more than `max` pods.
struct Tracker {
    max: usize,
    nodes: HashMap<String, String>,
    uids: HashMap<String, Vec<String>>,
}

impl Tracker {
    fn new(max: usize) -> Tracker {
        Tracker { max, nodes: HashMap::new(), uids: HashMap::new() }
    }

    /// Checks one snapshot; returns the number of bound pods.
    fn observe(&mut self, pods: &[Pod]) -> usize {
        assert!(pods.len() <= self.max, "{} pods exist, at most {} expected", pods.len(), self.max);
        let mut names = std::collections::HashSet::new();
        let mut bound = 0;
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            assert!(names.insert(name.clone()), "two pods named {name}");
            let uids = self.uids.entry(name.clone()).or_default();
            if !uids.contains(&uid) {
                uids.push(uid.clone());
            }
            if let Some(node) = node_of(pod) {
                bound += 1;
                let first = self.nodes.entry(uid.clone()).or_insert_with(|| node.clone());
                assert_eq!(*first, node, "pod {name} ({uid}) moved from node {first} to {node}");
            }
        }
        bound
    }

    /// Pods (by name) that were replaced by a new object at least once.
    fn recreated(&self) -> Vec<String> {
        let mut names: Vec<String> = self.uids.iter().filter(|(_, u)| u.len() > 1).map(|(n, _)| n.clone()).collect();
        names.sort();
        names
    }
}

/// The condition `type_` of an object's status, as JSON.
fn condition(obj: &DynamicObject, type_: &str) -> Option<Value> {
    obj.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).cloned()
}

async fn job_state(jobs: &Api<DynamicObject>, name: &str) -> Option<String> {
    let job = jobs.get(name).await.ok()?;
    job.data["status"]["state"].as_str().map(str::to_string)
}

// ---------------------------------------------------------------------------------------------
// 1. Leader failover in the middle of a gang
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_mid_gang_leaves_no_half_bound_gang() {
    let Some(cluster) = Cluster::start(8).await else { return };
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let mut replicas = [
        // Eight bindings in flight: the gang's 64 take several round trips, so the kill lands mid-gang.
        cluster.spawn_replica("scheduler", "own-a", &["--period", "0.2", "--bind-concurrency", "8"]),
        cluster.spawn_replica("scheduler", "own-b", &["--period", "0.2", "--bind-concurrency", "8"]),
    ];

    // Make one of ours the leader: the harness's replica is stopped with SIGTERM (it
    // releases the lease) if it holds it.
    let first = eventually(20, "a scheduler leads", || async { lease_holder(&client, "drover-scheduler").await }).await;
    if !first.starts_with("own-") {
        signal_identity(&first, "-TERM");
    }
    let leader = eventually(20, &format!("one of our schedulers leads (logs in {logs})"), || async {
        lease_holder(&client, "drover-scheduler").await.filter(|h| h.starts_with("own-"))
    })
    .await;

    // Slow the API down a little so that the gang's 64 bindings take a while.
    cluster.faults().set_latency(Duration::from_millis(15));
    let jobs = jobs_api(&client);
    create(&jobs, &job("gang", 64, 1, 3, json!({}))).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut tracker = Tracker::new(64);
    let deadline = Instant::now() + Duration::from_secs(20);
    let bound_at_kill = loop {
        assert!(Instant::now() < deadline, "no pod of the gang was bound (logs in {logs})");
        if let Some(list) = job_pods(&pods, "gang").await {
            let bound = tracker.observe(&list);
            if bound > 0 {
                let victim = replicas.iter_mut().find(|r| r.identity == leader).expect("the leader is ours");
                victim.kill9();
                break bound;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    cluster.faults().clear();
    eprintln!("killed leader {leader} with {bound_at_kill}/64 pods bound");

    // Settle: the survivor takes the lease after expiry and either finishes the gang or
    // unbinds it (and then places it again). The end state must be the whole gang bound.
    let pgs = podgroups_api(&client);
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let list = job_pods(&pods, "gang").await.unwrap_or_default();
        let bound = tracker.observe(&list);
        let intent = pgs.get("gang").await.ok().map(|pg| !pg.data["status"]["bindIntent"].is_null());
        if list.len() == 64 && bound == 64 && intent == Some(false) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gang not settled: {bound}/{} pods bound, intent present: {intent:?} (logs in {logs})",
            list.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ... and stays so.
    for _ in 0..10 {
        let list = job_pods(&pods, "gang").await.unwrap_or_default();
        let bound = tracker.observe(&list);
        assert!(bound == 0 || bound == 64, "half-bound gang after settling: {bound}/64 (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Any other replica takes over once the killed leader's lease expires (the gang may have
    // settled before that): ours, or the harness's if it was not the first leader.
    eventually(40, &format!("another scheduler takes the lease from {leader} (logs in {logs})"), || async {
        lease_holder(&client, "drover-scheduler").await.filter(|h| *h != leader)
    })
    .await;
    eprintln!("recreated pods: {:?}", tracker.recreated());
}

// ---------------------------------------------------------------------------------------------
// 2. Controllers crash and restart
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_restart_keeps_jobs_consistent() {
    let Some(cluster) = Cluster::start(2).await else { return };
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let jobs = jobs_api(&client);
    create(&jobs, &job("train", 4, 2, 3, json!({}))).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut tracker = Tracker::new(4);
    eventually(20, &format!("the first pod exists (logs in {logs})"), || async {
        let list = job_pods(&pods, "train").await?;
        (!list.is_empty()).then_some(())
    })
    .await;
    let old =
        eventually(10, "the controllers lead", || async { lease_holder(&client, "drover-controllers").await }).await;
    signal_identity(&old, "-9");
    let _new = cluster.spawn_replica("controllers", "own-ctl", &[]);

    let deadline = Instant::now() + Duration::from_secs(50);
    let mut saw_new_leader = false;
    loop {
        if let Some(list) = job_pods(&pods, "train").await {
            tracker.observe(&list);
        }
        saw_new_leader |= lease_holder(&client, "drover-controllers").await.as_deref() == Some("own-ctl");
        if job_state(&jobs, "train").await.as_deref() == Some("Completed") {
            break;
        }
        assert!(Instant::now() < deadline, "the job did not complete (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = job_pods(&pods, "train").await.expect("pods listed");
    tracker.observe(&list);
    assert_eq!(list.len(), 4, "pods: {:?}", list.iter().map(|p| p.metadata.name.clone()).collect::<Vec<_>>());
    assert!(list.iter().all(|p| phase_of(p) == "Succeeded"), "every pod succeeded");
    assert!(tracker.recreated().is_empty(), "pods were recreated: {:?}", tracker.recreated());
    assert!(saw_new_leader || old.starts_with("own-"), "the new controllers never led");
}

// ---------------------------------------------------------------------------------------------
// 3. API faults
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_faults_do_not_lose_or_duplicate_decisions() {
    let Some(cluster) = Cluster::start(4).await else { return };
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();

    let faults = cluster.faults();
    faults.fail_next_writes("pods/binding", 3, 500);
    faults.fail_next_writes("podgroups", 3, 409);
    let jobs = jobs_api(&client);
    create(&jobs, &job("gang", 16, 2, 3, json!({}))).await;

    let dropper = tokio::spawn(async move {
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            faults.drop_watches();
        }
    });

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pgs = podgroups_api(&client);
    let mut tracker = Tracker::new(16);
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let list = job_pods(&pods, "gang").await.unwrap_or_default();
        let bound = tracker.observe(&list);
        let intent = pgs.get("gang").await.ok().map(|pg| !pg.data["status"]["bindIntent"].is_null());
        if list.len() == 16 && bound == 16 && intent == Some(false) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gang not bound: {bound}/{} bound, intent present: {intent:?} (logs in {logs})",
            list.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    dropper.await.expect("watch dropper ran");

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(list) = job_pods(&pods, "gang").await {
            tracker.observe(&list);
        }
        if job_state(&jobs, "gang").await.as_deref() == Some("Completed") {
            break;
        }
        assert!(Instant::now() < deadline, "the job did not complete (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = job_pods(&pods, "gang").await.expect("pods listed");
    assert_eq!(tracker.observe(&list), 16);
    assert_eq!(list.len(), 16);
    assert!(tracker.recreated().is_empty(), "pods were recreated: {:?}", tracker.recreated());
}

// ---------------------------------------------------------------------------------------------
// 3b. An API server outage: kube-apiserver killed and started again, etcd kept
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_outage_loses_nothing() {
    let Some(mut cluster) = Cluster::start(2).await else { return };
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let jobs = jobs_api(&client);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(&jobs, &job("before", 4, 2, 4, json!({}))).await;
    let mut tracker = Tracker::new(4);
    let deadline = Instant::now() + Duration::from_secs(60);
    while tracker.observe(&job_pods(&pods, "before").await.unwrap_or_default()) < 4 {
        assert!(Instant::now() < deadline, "the first job's gang was not bound (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    cluster.restart_apiserver().await.expect("kube-apiserver restarts");
    create(&jobs, &job("after", 4, 2, 3, json!({}))).await;

    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(list) = job_pods(&pods, "before").await {
            tracker.observe(&list);
        }
        let before = job_state(&jobs, "before").await;
        let after = job_state(&jobs, "after").await;
        if before.as_deref() == Some("Completed") && after.as_deref() == Some("Completed") {
            break;
        }
        assert!(Instant::now() < deadline, "after the outage: before {before:?}, after {after:?} (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(tracker.recreated().is_empty(), "pods were recreated: {:?}", tracker.recreated());
}

// ---------------------------------------------------------------------------------------------
// 4. Bad input
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_reported_not_fatal() {
    let Some(cluster) = Cluster::start(2).await else { return };
    let client = cluster.client.clone();
    let logs = cluster.logs().display().to_string();
    let jobs = jobs_api(&client);
    let queues = queues_api(&client);

    create(&jobs, &job("no-queue", 1, 1, 1, json!({"queue": "missing-queue"}))).await;
    create(&jobs, &job("no-pc", 1, 1, 1, json!({"priorityClassName": "missing-pc"}))).await;
    create(&jobs, &job("too-big", 3, 8, 1, json!({}))).await;
    let orphan = object(json!({
        "apiVersion": "scheduling.drover.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "orphan"},
        "spec": {"parent": "missing-parent"}
    }));
    create(&queues, &orphan).await;
    create(&jobs, &job("good", 2, 1, 1, json!({}))).await;

    for (job_name, reason) in [("no-queue", "QueueNotFound"), ("no-pc", "PriorityClassNotFound")] {
        eventually(20, &format!("{job_name} Valid=False {reason} (logs in {logs})"), || async {
            let job = jobs.get(job_name).await.ok()?;
            let valid = condition(&job, "Valid")?;
            (valid["status"] == "False" && valid["reason"] == reason).then_some(())
        })
        .await;
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        eventually(20, &format!("a {reason} Event on {job_name}"), || async {
            let list =
                events.list(&ListParams::default().fields(&format!("involvedObject.name={job_name}"))).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
                .then_some(())
        })
        .await;
    }

    eventually(20, &format!("queue orphan Valid=False ParentNotFound (logs in {logs})"), || async {
        let queue = queues.get("orphan").await.ok()?;
        let valid = condition(&queue, "Valid")?;
        (valid["status"] == "False" && valid["reason"] == "ParentNotFound").then_some(())
    })
    .await;

    let pgs = podgroups_api(&client);
    // The group is refused admission on its declared size (the Job controller writes
    // minResources), whether or not its pods exist yet: the reason names the cluster and the
    // resource it lacks.
    let seen = std::sync::Mutex::new(String::new());
    let settled = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(cond) = pgs.get("too-big").await.ok().and_then(|pg| condition(&pg, "Unschedulable")) {
                let message = cond["message"].as_str().unwrap_or_default().to_string();
                if cond["status"] == "True"
                    && message.contains("more than the whole cluster has")
                    && message.contains("nvidia.com/gpu 24 > 16")
                {
                    return;
                }
                *seen.lock().unwrap() = message;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "too-big's Unschedulable reason never named the cluster and the GPUs; last: {:?} (logs in {logs})",
        seen.lock().unwrap()
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    for (object, reason) in [("too-big", "Unschedulable"), ("orphan", "ParentNotFound")] {
        eventually(20, &format!("a {reason} Warning Event on {object}"), || async {
            let list =
                events.list(&ListParams::default().fields(&format!("involvedObject.name={object}"))).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
                .then_some(())
        })
        .await;
    }

    eventually(40, &format!("the good job completes (logs in {logs})"), || async {
        (job_state(&jobs, "good").await.as_deref() == Some("Completed")).then_some(())
    })
    .await;

    // Nothing was created for the invalid jobs, and nothing of the big gang was bound.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for bad in ["no-queue", "no-pc"] {
        let list = job_pods(&pods, bad).await.expect("pods listed");
        assert!(list.is_empty(), "{bad} has {} pods", list.len());
    }
    let big = job_pods(&pods, "too-big").await.expect("pods listed");
    assert!(big.iter().all(|p| node_of(p).is_none()), "a pod of the too-big gang was bound");
}

// ---------------------------------------------------------------------------------------------
// 5. Schema rejections
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_rejections_at_apply() {
    let Some(cluster) = Cluster::start(1).await else { return };
    let client = cluster.client.clone();
    let jobs = jobs_api(&client);
    let queues = queues_api(&client);

    let mut too_many = job("too-many", 2, 1, 1, json!({}));
    too_many.data["spec"]["minAvailable"] = json!(3);
    let mut negative = job("negative", 1, 1, 1, json!({}));
    negative.data["spec"]["tasks"][0]["replicas"] = json!(-1);
    negative.data["spec"].as_object_mut().expect("spec").remove("minAvailable");
    let strategy = object(json!({
        "apiVersion": "scheduling.drover.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "weird"},
        "spec": {"queueingStrategy": "Lottery"}
    }));

    for (api, obj, field) in
        [(&jobs, &too_many, "minAvailable"), (&jobs, &negative, "replicas"), (&queues, &strategy, "queueingStrategy")]
    {
        let name = obj.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => panic!("{name} was accepted"),
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}");
                assert!(status.message.contains(field), "{name}: message does not name {field}: {:?}", status.message);
            }
            Err(e) => panic!("{name}: unexpected error {e}"),
        }
        assert!(api.get_opt(&name).await.expect("get works").is_none(), "{name} was stored");
    }
}
