//! The Job controller against a real kube-apiserver (drover-envtest, through its fault proxy):
//! children, status and state machine, elastic scaling, lifecycle policies, bad input, TTL,
//! idempotence, API faults and garbage collection. The tests bind pods themselves (standing in
//! for the scheduler); the fake kubelet runs and finishes bound pods, and finishes the graceful
//! deletion of bound pods as a real kubelet does.
//!
//! Each test starts its own control plane; without the control-plane binaries it says it is
//! skipped and passes.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use drover_api::crd::job::{Job, JobState, JobStatus};
use drover_api::crd::podgroup::PodGroup;
use drover_controllers::job::{
    self, JOB_NAME_LABEL, POD_GROUP_ANNOTATION, RETRY_ANNOTATION, TASK_INDEX_LABEL, TASK_LABEL,
};
use drover_envtest::{Options, Server};
use drover_kubelet::{self as kubelet, KubeletConfig};
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use tokio::sync::oneshot;

const NS: &str = "default";
const NODE: &str = "node-0";
/// How often the tests and the stand-in scheduler poll the API server.
const POLL: Duration = Duration::from_millis(100);

/// A real API server with Drover's CRDs, the Job controller and optionally a fake kubelet and
/// a stand-in scheduler that binds every unbound `drover` pod to `node-0`.
struct Cluster {
    server: Server,
    client: Client,
    stops: Vec<oneshot::Sender<()>>,
}

fn stopper() -> (oneshot::Sender<()>, impl Future<Output = ()> + Send + 'static) {
    let (tx, rx) = oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}

impl Cluster {
    /// `None` when the test is skipped (no control-plane binaries).
    async fn start(kubelet: bool, binder: bool) -> Option<Cluster> {
        Self::start_with(&Options::default(), kubelet, binder).await
    }

    async fn start_with(options: &Options, kubelet: bool, binder: bool) -> Option<Cluster> {
        let server = Server::start_with(options).await?;
        let client = server.client();
        drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
        if options.controller_manager {
            // The ServiceAccount admission plugin refuses pods until the namespace has one.
            let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
            eventually(60, "the default ServiceAccount", || async {
                let found = accounts.get_opt("default").await.map_err(|e| e.to_string())?.is_some();
                ensure(found, || "not yet".into())
            })
            .await;
        }
        let mut stops = vec![];
        let (tx, stop) = stopper();
        stops.push(tx);
        tokio::spawn(job::run(client.clone(), stop));
        if kubelet {
            let (tx, stop) = stopper();
            stops.push(tx);
            let config = KubeletConfig {
                nodes: 1,
                name_prefix: "node-".into(),
                allocatable: BTreeMap::from([("cpu".into(), "32".into()), ("memory".into(), "256Gi".into())]),
                labels: BTreeMap::new(),
            };
            tokio::spawn(kubelet::run(client.clone(), config, stop));
            let nodes: Api<Node> = Api::all(client.clone());
            eventually(30, "node-0 registered", || async {
                let found = nodes.get_opt(NODE).await.map_err(|e| e.to_string())?.is_some();
                ensure(found, || "not yet".into())
            })
            .await;
        }
        if binder {
            let (tx, stop) = stopper();
            stops.push(tx);
            let c = client.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = stop => {}
                    () = async { loop { bind_all(&c).await; tokio::time::sleep(POLL).await; } } => {}
                }
            });
        }
        Some(Cluster { server, client, stops })
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create_job(&self, spec: Value) -> Job {
        let job: Job = serde_json::from_value(spec).expect("a Job");
        self.jobs().create(&PostParams::default(), &job).await.expect("job created")
    }

    async fn status(&self, name: &str) -> JobStatus {
        self.jobs().get(name).await.expect("job exists").status.unwrap_or_default()
    }

    /// The job's pods by name.
    async fn job_pods(&self, name: &str) -> BTreeMap<String, Pod> {
        let lp = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={name}"));
        self.pods().list(&lp).await.expect("pods list").items.into_iter().map(|p| (p.name_any(), p)).collect()
    }

    async fn events(&self, job: &str) -> Vec<(String, String, String)> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), NS);
        api.list(&ListParams::default())
            .await
            .expect("events list")
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(job))
            .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect()
    }

    async fn stop(self) {
        for s in self.stops {
            let _ = s.send(());
        }
        self.server.stop().await;
    }
}

/// Binds every unbound pod scheduled by `drover` to `node-0`.
async fn bind_all(client: &Client) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let Ok(list) = pods.list(&ListParams::default()).await else { return };
    for p in list.items {
        let spec = p.spec.as_ref().expect("pod spec");
        if spec.node_name.is_none()
            && spec.scheduler_name.as_deref() == Some("drover")
            && p.metadata.deletion_timestamp.is_none()
        {
            let _ = bind(client, &p.name_any()).await;
        }
    }
}

async fn bind(client: &Client, pod: &str) -> kube::Result<Value> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod, "namespace": NS},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    });
    pods.create_subresource("binding", pod, &PostParams::default(), &binding).await
}

/// Waits until `check` holds, polling; fails the test after `secs` seconds with the last error.
async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match check().await {
            Ok(()) => return,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

fn container(extra: Value) -> Value {
    let mut c =
        json!({"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}});
    if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    c
}

/// A task with one container; `annotations` go on the pod template.
fn task(name: &str, replicas: u32, annotations: Value) -> Value {
    json!({
        "name": name,
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [container(json!({}))]},
        },
    })
}

fn job_json(name: &str, tasks: Vec<Value>, extra: Value) -> Value {
    let mut j = json!({
        "apiVersion": "batch.drover.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"tasks": tasks},
    });
    if let (Some(spec), Some(e)) = (j["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(e.clone());
    }
    j
}

fn env(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

async fn wait_state(c: &Cluster, job: &str, state: JobState, secs: u64) -> JobStatus {
    eventually(secs, &format!("job {job} reaches {state:?}"), || async {
        let s = c.status(job).await;
        ensure(s.state == state, || format!("status {s:?}"))
    })
    .await;
    c.status(job).await
}

fn condition<'a>(
    s: &'a JobStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == type_)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_have_names_labels_env_and_owners() {
    let Some(c) = Cluster::start(false, false).await else { return };
    let mut master = task("master", 1, json!({}));
    master["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 29500}]);
    let mut worker = task("my-worker", 2, json!({}));
    worker["minAvailable"] = json!(1);
    let created =
        c.create_job(job_json("train", vec![master, worker], json!({"minAvailable": 2, "queue": "default"}))).await;
    let uid = created.uid().unwrap();

    eventually(30, "3 pods", || async {
        let n = c.job_pods("train").await.len();
        ensure(n == 3, || format!("{n} pods"))
    })
    .await;
    let pods = c.job_pods("train").await;
    let names: Vec<&String> = pods.keys().collect();
    assert_eq!(names, ["train-master-0", "train-my-worker-0", "train-my-worker-1"]);
    let hosts = "train-my-worker-0.train.default.svc,train-my-worker-1.train.default.svc";
    for (rank, (name, pod)) in [("train-master-0", 0), ("train-my-worker-0", 1), ("train-my-worker-1", 2)]
        .iter()
        .map(|(n, r)| (r, (n, &pods[*n])))
    {
        let labels = pod.labels();
        assert_eq!(labels[JOB_NAME_LABEL], "train");
        let (task, index) = name.strip_prefix("train-").unwrap().rsplit_once('-').unwrap();
        assert_eq!(labels[TASK_LABEL], task);
        assert_eq!(labels[TASK_INDEX_LABEL], index);
        assert_eq!(pod.annotations()[POD_GROUP_ANNOTATION], "train");
        assert_eq!(pod.annotations()[RETRY_ANNOTATION], "0");
        let owner = &pod.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Job", "train", uid.as_str()));
        assert_eq!(owner.controller, Some(true));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.scheduler_name.as_deref(), Some("drover"));
        assert_eq!(spec.hostname.as_deref(), Some(*name));
        assert_eq!(spec.subdomain.as_deref(), Some("train"));
        let e = env(pod);
        assert_eq!(e["RANK"], rank.to_string(), "{name}");
        assert_eq!(e["WORLD_SIZE"], "3");
        assert_eq!(e["MASTER_ADDR"], "train-master-0.train.default.svc");
        assert_eq!(e["MASTER_PORT"], "29500");
        assert_eq!(e["DROVER_HOSTS_MY_WORKER"], hosts);
        assert_eq!(e["DROVER_HOSTS_MASTER"], "train-master-0.train.default.svc");
        assert_eq!(e["DROVER_JOB_NAME"], "train");
        assert_eq!(e["DROVER_TASK_NAME"], task);
        assert_eq!(e["DROVER_TASK_INDEX"], index);
    }

    let pg = Api::<PodGroup>::namespaced(c.client.clone(), NS).get("train").await.expect("podgroup");
    assert_eq!(pg.spec.min_member, 2);
    assert_eq!(pg.spec.min_task_member, [("my-worker".to_string(), 1)].into());
    assert_eq!(pg.spec.queue.as_deref(), Some("default"));
    // The minimum: one worker (its own minimum) and then the master: 1 cpu, 2Gi.
    let min = pg.spec.min_resources.as_ref().expect("minResources");
    assert_eq!((min["cpu"].0.as_str(), min["memory"].0.as_str()), ("1", "2Gi"));
    assert_eq!(pg.owner_references()[0].uid, uid);

    let svc = Api::<Service>::namespaced(c.client.clone(), NS).get("train").await.expect("service");
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.selector.as_ref().unwrap()[JOB_NAME_LABEL], "train");
    assert_eq!(svc.owner_references()[0].uid, uid);

    eventually(30, "status counts 3 pending", || async {
        let s = c.status("train").await;
        ensure(s.pending == 3 && s.state == JobState::Pending && s.observed_generation == Some(1), || format!("{s:?}"))
    })
    .await;
    let s = c.status("train").await;
    assert_eq!(condition(&s, "Valid").map(|c| c.status.as_str()), Some("True"));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_goes_pending_running_completed() {
    let Some(c) = Cluster::start(true, false).await else { return };
    c.create_job(job_json("run", vec![task("w", 2, json!({"sim.drover.dev/duration": "1.5"}))], json!({}))).await;
    eventually(30, "2 pods", || async {
        let n = c.job_pods("run").await.len();
        ensure(n == 2, || format!("{n} pods"))
    })
    .await;
    assert_eq!(c.status("run").await.state, JobState::Pending);
    bind(&c.client, "run-w-0").await.expect("bind");
    eventually(30, "one running, still pending", || async {
        let s = c.status("run").await;
        ensure(s.running == 1 && s.pending == 1 && s.state == JobState::Pending, || format!("{s:?}"))
    })
    .await;
    bind(&c.client, "run-w-1").await.expect("bind");
    let s = wait_state(&c, "run", JobState::Running, 30).await;
    assert!(s.running + s.succeeded == 2, "{s:?}");
    let s = wait_state(&c, "run", JobState::Completed, 30).await;
    assert_eq!((s.succeeded, s.running, s.pending, s.failed), (2, 0, 0, 0));
    let finished = condition(&s, "Finished").expect("Finished condition");
    assert_eq!((finished.status.as_str(), finished.reason.as_str()), ("True", "Completed"));
    // The Event follows the status write.
    eventually(30, "a Completed event", || async {
        let ev = c.events("run").await;
        ensure(ev.iter().any(|(t, r, _)| t == "Normal" && r == "Completed"), || format!("{ev:?}"))
    })
    .await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elastic_scale_up_and_down() {
    let Some(c) = Cluster::start(false, false).await else { return };
    c.create_job(job_json("el", vec![task("w", 2, json!({}))], json!({"minAvailable": 1}))).await;
    let count = |n: usize| {
        let c = &c;
        move || async move {
            let pods = c.job_pods("el").await;
            ensure(pods.len() == n, || format!("pods {:?}", pods.keys().collect::<Vec<_>>()))
        }
    };
    eventually(30, "2 pods", count(2)).await;
    let pp = PatchParams::default();
    let up = json!({"spec": {"minAvailable": 3, "tasks": [task("w", 4, json!({}))]}});
    c.jobs().patch("el", &pp, &Patch::Merge(&up)).await.expect("scale up");
    eventually(30, "4 pods", count(4)).await;
    let pods = c.job_pods("el").await;
    assert_eq!(env(&pods["el-w-3"])["WORLD_SIZE"], "4");
    assert_eq!(env(&pods["el-w-3"])["RANK"], "3");
    let pgs: Api<PodGroup> = Api::namespaced(c.client.clone(), NS);
    eventually(30, "minMember 3", || async {
        let m = pgs.get("el").await.unwrap().spec.min_member;
        ensure(m == 3, || format!("minMember {m}"))
    })
    .await;

    let down = json!({"spec": {"minAvailable": 1, "tasks": [task("w", 1, json!({}))]}});
    c.jobs().patch("el", &pp, &Patch::Merge(&down)).await.expect("scale down");
    eventually(30, "1 pod", count(1)).await;
    assert!(c.job_pods("el").await.contains_key("el-w-0"), "the lowest index stays");
    eventually(30, "minMember 1", || async {
        let m = pgs.get("el").await.unwrap().spec.min_member;
        ensure(m == 1, || format!("minMember {m}"))
    })
    .await;
    eventually(30, "status follows", || async {
        let s = c.status("el").await;
        ensure(s.pending == 1 && s.observed_generation == Some(3), || format!("{s:?}"))
    })
    .await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_failed_restarts_job_until_max_retry() {
    let Some(c) = Cluster::start(true, true).await else { return };
    let failing = json!({"sim.drover.dev/duration": "0.2", "sim.drover.dev/outcome": "Failed"});
    let spec = json!({"maxRetry": 2, "policies": [{"event": "PodFailed", "action": "RestartJob"}]});
    c.create_job(job_json("flaky", vec![task("w", 2, failing)], spec)).await;
    let s = wait_state(&c, "flaky", JobState::Failed, 60).await;
    assert_eq!(s.retry_count, 2, "{s:?}");
    let finished = condition(&s, "Finished").expect("Finished");
    assert_eq!(finished.reason, "MaxRetryExceeded");
    let events = c.events("flaky").await;
    let restarts = events.iter().filter(|(t, r, _)| t == "Warning" && r == "RestartJob").count();
    assert_eq!(restarts, 2, "{events:?}");
    assert!(events.iter().any(|(_, r, _)| r == "MaxRetryExceeded"), "{events:?}");
    // The last generation of pods was made at retry 2.
    for p in c.job_pods("flaky").await.values() {
        assert_eq!(p.annotations()[RETRY_ANNOTATION], "2");
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_evicted_restarts_task() {
    let Some(c) = Cluster::start(true, true).await else { return };
    let mut worker = task("worker", 2, json!({}));
    worker["policies"] = json!([{"event": "PodEvicted", "action": "RestartTask"}]);
    c.create_job(job_json("ev", vec![task("ps", 1, json!({})), worker], json!({}))).await;
    let all_running = || async {
        let pods = c.job_pods("ev").await;
        let running =
            pods.values().filter(|p| phase(p) == "Running" && p.metadata.deletion_timestamp.is_none()).count();
        let s = c.status("ev").await;
        ensure(running == 3 && s.state == JobState::Running && s.running == 3, || format!("{running} running; {s:?}"))
    };
    eventually(30, "all running", all_running).await;
    let before = c.job_pods("ev").await;
    c.pods().evict("ev-worker-1", &EvictParams::default()).await.expect("evict");

    eventually(30, "task restarted", || async {
        let s = c.status("ev").await;
        let pods = c.job_pods("ev").await;
        let fresh = ["ev-worker-0", "ev-worker-1"]
            .iter()
            .all(|n| pods.get(*n).is_some_and(|p| p.uid() != before[*n].uid() && phase(p) == "Running"));
        ensure(s.retry_count == 1 && s.state == JobState::Running && fresh, || format!("{s:?}"))
    })
    .await;
    let after = c.job_pods("ev").await;
    assert_eq!(after["ev-ps-0"].uid(), before["ev-ps-0"].uid(), "the other task is untouched");
    assert_eq!(after["ev-worker-0"].annotations()[RETRY_ANNOTATION], "1");
    let s = c.status("ev").await;
    let restarting = condition(&s, "Restarting").expect("Restarting condition");
    assert_eq!((restarting.status.as_str(), restarting.reason.as_str()), ("False", "Restarted"));
    let events = c.events("ev").await;
    assert!(events.iter().any(|(t, r, m)| t == "Warning" && r == "RestartTask" && m.contains("evicted")), "{events:?}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_completed_completes_job() {
    let Some(c) = Cluster::start(true, true).await else { return };
    let mut launcher = task("launcher", 1, json!({"sim.drover.dev/duration": "0.5"}));
    launcher["policies"] = json!([{"event": "TaskCompleted", "action": "CompleteJob"}]);
    c.create_job(job_json("tc", vec![launcher, task("worker", 2, json!({}))], json!({}))).await;
    let s = wait_state(&c, "tc", JobState::Completed, 30).await;
    assert_eq!(condition(&s, "Finished").unwrap().reason, "Completed");
    eventually(30, "workers stopped", || async {
        let pods = c.job_pods("tc").await;
        ensure(pods.len() == 1 && phase(&pods["tc-launcher-0"]) == "Succeeded", || format!("{:?}", pods.keys()))
    })
    .await;
    let events = c.events("tc").await;
    assert!(
        events.iter().any(|(t, r, m)| t == "Normal" && r == "Completing" && m.contains("TaskCompleted")),
        "{events:?}"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_policy_aborts_before_job_policy() {
    let Some(c) = Cluster::start(true, true).await else { return };
    let mut bad = task("bad", 1, json!({"sim.drover.dev/duration": "0.3", "sim.drover.dev/outcome": "Failed"}));
    bad["policies"] = json!([{"event": "Any", "action": "AbortJob"}]);
    let spec = json!({"policies": [{"event": "PodFailed", "action": "RestartJob"}]});
    c.create_job(job_json("ab", vec![bad, task("good", 2, json!({}))], spec)).await;
    let s = wait_state(&c, "ab", JobState::Aborted, 30).await;
    assert_eq!(s.retry_count, 0, "the task's policy wins over the job's");
    assert_eq!(condition(&s, "Finished").unwrap().reason, "Aborted");
    eventually(30, "running pods deleted, the failed one kept", || async {
        let pods = c.job_pods("ab").await;
        ensure(pods.len() == 1 && phase(&pods["ab-bad-0"]) == "Failed", || format!("{:?}", pods.keys()))
    })
    .await;
    let events = c.events("ab").await;
    assert!(events.iter().any(|(t, r, _)| t == "Warning" && r == "Aborted"), "{events:?}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_policy_job_fails_when_min_available_is_unreachable() {
    let Some(c) = Cluster::start(true, true).await else { return };
    let mut bad = task("bad", 1, json!({"sim.drover.dev/duration": "0.3", "sim.drover.dev/outcome": "Failed"}));
    bad["minAvailable"] = json!(1);
    c.create_job(job_json("nf", vec![bad, task("good", 2, json!({}))], json!({}))).await;
    let s = wait_state(&c, "nf", JobState::Failed, 30).await;
    assert_eq!(condition(&s, "Finished").unwrap().reason, "MinAvailableUnreachable");
    assert_eq!(s.retry_count, 0);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_queue_is_reported_until_created() {
    let Some(c) = Cluster::start(false, false).await else { return };
    c.create_job(job_json("q", vec![task("w", 2, json!({}))], json!({"queue": "research"}))).await;
    c.create_job(job_json("ok", vec![task("w", 1, json!({}))], json!({}))).await;
    eventually(30, "Valid=False QueueNotFound", || async {
        let s = c.status("q").await;
        let v = condition(&s, "Valid").cloned();
        ensure(v.as_ref().is_some_and(|v| v.status == "False" && v.reason == "QueueNotFound"), || format!("{s:?}"))
    })
    .await;
    eventually(30, "warning event", || async {
        let ev = c.events("q").await;
        ensure(ev.iter().any(|(t, r, _)| t == "Warning" && r == "QueueNotFound"), || format!("{ev:?}"))
    })
    .await;
    eventually(30, "the other job is unaffected", || async {
        ensure(c.job_pods("ok").await.len() == 1, || "no pod for ok".into())
    })
    .await;
    assert!(c.job_pods("q").await.is_empty(), "no pods while the queue is missing");
    assert!(Api::<PodGroup>::namespaced(c.client.clone(), NS).get_opt("q").await.unwrap().is_none());

    let queue = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "research"}, "spec": {}});
    let queues: Api<drover_api::crd::queue::Queue> = Api::all(c.client.clone());
    queues.create(&PostParams::default(), &serde_json::from_value(queue).unwrap()).await.expect("queue created");
    eventually(30, "pods once the queue exists", || async {
        let s = c.status("q").await;
        let valid = condition(&s, "Valid").is_some_and(|v| v.status == "True");
        let n = c.job_pods("q").await.len();
        ensure(valid && n == 2, || format!("{n} pods; {s:?}"))
    })
    .await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_fenced_to_other_namespaces_is_refused_until_it_admits_the_jobs() {
    let Some(c) = Cluster::start(false, false).await else { return };
    let queues: Api<drover_api::crd::queue::Queue> = Api::all(c.client.clone());
    let queue = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team-b"},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}}}});
    queues.create(&PostParams::default(), &serde_json::from_value(queue).unwrap()).await.expect("queue created");
    c.create_job(job_json("spend", vec![task("w", 1, json!({}))], json!({"queue": "team-b"}))).await;
    eventually(30, "Valid=False QueueNotAllowed with a Warning", || async {
        let s = c.status("spend").await;
        let ev = c.events("spend").await;
        let v = condition(&s, "Valid")
            .is_some_and(|v| v.status == "False" && v.reason == "QueueNotAllowed" && v.message.contains("team-b"));
        let warned = ev.iter().any(|(t, r, _)| t == "Warning" && r == "QueueNotAllowed");
        ensure(v && warned, || format!("{s:?} {ev:?}"))
    })
    .await;
    assert!(c.job_pods("spend").await.is_empty(), "no pod in a queue the namespace may not use");
    assert!(Api::<PodGroup>::namespaced(c.client.clone(), NS).get_opt("spend").await.unwrap().is_none());

    let admit = json!({"spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}});
    queues.patch("team-b", &PatchParams::default(), &Patch::Merge(&admit)).await.expect("queue changed");
    eventually(30, "pods once the queue admits the namespace", || async {
        let s = c.status("spend").await;
        let valid = condition(&s, "Valid").is_some_and(|v| v.status == "True");
        ensure(valid && c.job_pods("spend").await.len() == 1, || format!("{s:?}"))
    })
    .await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_namespaces_job_goes_to_its_project_queue_and_default_is_refused() {
    let Some(c) = Cluster::start(false, false).await else { return };
    let admin = c.client.clone();
    // The project "vision" lists the namespace, which carries its label; its first node
    // pool's queue is "vision.gpu" (made here as the queue-tree controller would make it).
    let project = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project", "metadata": {"name": "vision"},
        "spec": {"department": "research", "namespaces": [NS], "nodePools": [{"name": "gpu", "gpu": "8"}]}});
    Api::<drover_api::crd::project::Project>::all(admin.clone())
        .create(&PostParams::default(), &serde_json::from_value(project).unwrap())
        .await
        .expect("project created");
    let label = json!({"metadata": {"labels": {"scheduling.drover.dev/project": "vision"}}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .patch(NS, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("namespace labelled");
    let queue = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "vision.gpu"},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}});
    Api::<drover_api::crd::queue::Queue>::all(admin.clone())
        .create(&PostParams::default(), &serde_json::from_value(queue).unwrap())
        .await
        .expect("queue created");
    c.create_job(job_json("unnamed", vec![task("w", 1, json!({}))], json!({}))).await;
    let groups: Api<PodGroup> = Api::namespaced(admin.clone(), NS);
    eventually(30, "the PodGroup in the project's queue", || async {
        let group = groups.get_opt("unnamed").await.map_err(|e| e.to_string())?;
        let queue = group.as_ref().and_then(|g| g.spec.queue.clone());
        ensure(queue.as_deref() == Some("vision.gpu"), || format!("{group:?}"))
    })
    .await;
    // Naming `default` (no Queue object has that name) from the project's namespace is refused:
    // the project's work must stay in its queues, within its limit.
    c.create_job(job_json("in-default", vec![task("w", 1, json!({}))], json!({"queue": "default"}))).await;
    wait_invalid(&c, "in-default", "QueueNotAllowed", "may not use queue \"default\"").await;
    assert!(c.job_pods("in-default").await.is_empty(), "no pods for a Job refused its queue");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_priority_class_is_reported_until_created() {
    let Some(c) = Cluster::start(false, false).await else { return };
    c.create_job(job_json("pc", vec![task("w", 1, json!({}))], json!({"priorityClassName": "train"}))).await;
    eventually(30, "Valid=False PriorityClassNotFound", || async {
        let s = c.status("pc").await;
        let ev = c.events("pc").await;
        let v = condition(&s, "Valid").is_some_and(|v| v.status == "False" && v.reason == "PriorityClassNotFound");
        let warned = ev.iter().any(|(t, r, _)| t == "Warning" && r == "PriorityClassNotFound");
        ensure(v && warned, || format!("{s:?} {ev:?}"))
    })
    .await;
    assert!(c.job_pods("pc").await.is_empty());
    let pcs: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(c.client.clone());
    let pc = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "train"}, "value": 50});
    pcs.create(&PostParams::default(), &serde_json::from_value(pc).unwrap()).await.expect("class created");
    eventually(30, "pod with the class", || async {
        let pods = c.job_pods("pc").await;
        let ok = pods
            .get("pc-w-0")
            .is_some_and(|p| p.spec.as_ref().unwrap().priority_class_name.as_deref() == Some("train"));
        ensure(ok, || format!("{:?}", pods.keys()))
    })
    .await;
    let pg = Api::<PodGroup>::namespaced(c.client.clone(), NS).get("pc").await.expect("podgroup");
    assert_eq!(pg.spec.priority_class_name.as_deref(), Some("train"));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_job_is_deleted_after_its_ttl() {
    let Some(c) = Cluster::start(true, true).await else { return };
    let spec = json!({"ttlSecondsAfterFinished": 1});
    c.create_job(job_json("ttl", vec![task("w", 1, json!({"sim.drover.dev/duration": "0.2"}))], spec)).await;
    wait_state(&c, "ttl", JobState::Completed, 30).await;
    let finished_at = std::time::Instant::now();
    eventually(30, "job deleted", || async {
        let gone = c.jobs().get_opt("ttl").await.unwrap().is_none();
        ensure(gone, || "job still there".into())
    })
    .await;
    assert!(finished_at.elapsed() >= Duration::from_millis(500), "deleted too early");
    c.stop().await;
}

fn rv<K: kube::Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_is_idempotent() {
    let Some(c) = Cluster::start(false, false).await else { return };
    c.create_job(job_json("idem", vec![task("a", 1, json!({})), task("b", 2, json!({}))], json!({}))).await;
    eventually(30, "settled", || async {
        let s = c.status("idem").await;
        ensure(s.pending == 3, || format!("{s:?}"))
    })
    .await;
    let snapshot = || async {
        let job = rv(&c.jobs().get("idem").await.unwrap());
        let pods: Vec<String> = c.job_pods("idem").await.values().map(rv).collect();
        let pg = rv(&Api::<PodGroup>::namespaced(c.client.clone(), NS).get("idem").await.unwrap());
        let svc = rv(&Api::<Service>::namespaced(c.client.clone(), NS).get("idem").await.unwrap());
        (job, pods, pg, svc)
    };
    let before = snapshot().await;
    job::reconcile_once(c.client.clone(), NS, "idem").await.expect("reconcile");
    job::reconcile_once(c.client.clone(), NS, "idem").await.expect("reconcile");
    assert_eq!(snapshot().await, before, "reconciling a settled job writes nothing");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_faults_neither_duplicate_pods_nor_double_count_retries() {
    let Some(c) = Cluster::start(true, true).await else { return };
    let faults = c.server.faults();
    faults.fail_next_writes("pods", 2, 500);
    faults.fail_next_writes("podgroups", 1, 409);
    faults.fail_next_writes("jobs/status", 2, 409);
    let spec = json!({"maxRetry": 3, "policies": [{"event": "PodFailed", "action": "RestartJob"}]});
    c.create_job(job_json("f", vec![task("w", 3, json!({}))], spec)).await;
    eventually(30, "running with 3 pods", || async {
        let s = c.status("f").await;
        let n = c.job_pods("f").await.len();
        ensure(n == 3 && s.state == JobState::Running && s.running == 3, || format!("{n} pods; {s:?}"))
    })
    .await;

    // One pod fails while status writes conflict and pod writes error.
    faults.fail_next_writes("jobs/status", 2, 409);
    faults.fail_next_writes("pods", 2, 500);
    let failed = json!({"status": {"phase": "Failed"}});
    c.pods().patch_status("f-w-1", &PatchParams::default(), &Patch::Merge(&failed)).await.expect("mark failed");
    eventually(40, "restarted once", || async {
        let s = c.status("f").await;
        let pods = c.job_pods("f").await;
        let fresh =
            pods.len() == 3 && pods.values().all(|p| p.annotations()[RETRY_ANNOTATION] == "1" && phase(p) == "Running");
        ensure(s.state == JobState::Running && fresh, || format!("{s:?}"))
    })
    .await;
    assert_eq!(c.status("f").await.retry_count, 1);
    let restarts = c.events("f").await.into_iter().filter(|(_, r, _)| r == "RestartJob").count();
    assert_eq!(restarts, 1);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_job_lets_the_garbage_collector_delete_its_children() {
    let options = Options { controller_manager: true, ..Options::default() };
    let Some(c) = Cluster::start_with(&options, false, false).await else { return };
    let created = c.create_job(job_json("gc", vec![task("w", 1, json!({}))], json!({}))).await;
    let uid = created.uid().unwrap();
    let groups: Api<PodGroup> = Api::namespaced(c.client.clone(), NS);
    let services: Api<Service> = Api::namespaced(c.client.clone(), NS);
    eventually(30, "pod, group and service", || async {
        let pods = c.job_pods("gc").await;
        let group = groups.get_opt("gc").await.map_err(|e| e.to_string())?;
        let service = services.get_opt("gc").await.map_err(|e| e.to_string())?;
        ensure(pods.len() == 1 && group.is_some() && service.is_some(), || format!("{:?}", pods.keys()))
    })
    .await;
    assert_eq!(c.job_pods("gc").await["gc-w-0"].owner_references()[0].uid, uid);
    c.jobs().delete("gc", &DeleteParams::default()).await.expect("delete job");
    // No finalizer: the Job goes at once, and kube-controller-manager's garbage collector
    // deletes what it owns (after discovering the CRDs, which may take it up to 30 s).
    assert!(c.jobs().get_opt("gc").await.unwrap().is_none());
    eventually(120, "children garbage-collected", || async {
        let pods = c.job_pods("gc").await;
        let group = groups.get_opt("gc").await.map_err(|e| e.to_string())?;
        let service = services.get_opt("gc").await.map_err(|e| e.to_string())?;
        ensure(pods.is_empty() && group.is_none() && service.is_none(), || {
            format!("pods {:?}, group {}, service {}", pods.keys(), group.is_some(), service.is_some())
        })
    })
    .await;
    c.stop().await;
}

/// Creates a Queue from its JSON `metadata` and `spec`.
async fn make_queue(c: &Cluster, metadata: Value, spec: Value) {
    let queue =
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": metadata, "spec": spec});
    Api::<drover_api::crd::queue::Queue>::all(c.client.clone())
        .create(&PostParams::default(), &serde_json::from_value(queue).expect("a Queue"))
        .await
        .expect("queue created");
}

async fn wait_invalid(c: &Cluster, job: &str, reason: &str, says: &str) {
    eventually(30, &format!("{job}: Valid=False {reason} with a Warning"), || async {
        let s = c.status(job).await;
        let ev = c.events(job).await;
        let v = condition(&s, "Valid")
            .is_some_and(|v| v.status == "False" && v.reason == reason && v.message.contains(says));
        let warned = ev.iter().any(|(t, r, _)| t == "Warning" && r == reason);
        ensure(v && warned, || format!("{s:?} {ev:?}"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_naming_a_parent_or_a_department_queue_is_not_leaf_until_it_is_a_leaf() {
    let Some(c) = Cluster::start(false, false).await else { return };
    make_queue(&c, json!({"name": "research"}), json!({})).await;
    make_queue(&c, json!({"name": "vision"}), json!({"parent": "research"})).await;
    // A Department's queue, as the queue-tree controller makes it (owned by the Department),
    // before any project has one.
    let department: drover_api::crd::department::Department = serde_json::from_value(json!({
        "apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Department", "metadata": {"name": "ml"},
        "spec": {"nodePools": [{"name": "gpu", "gpu": "8"}]}}))
    .expect("a Department");
    let department = Api::all(c.client.clone()).create(&PostParams::default(), &department).await.expect("created");
    let owner = json!([{"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Department", "name": "ml",
        "uid": department.metadata.uid, "controller": true}]);
    make_queue(&c, json!({"name": "ml.gpu", "ownerReferences": owner}), json!({})).await;
    c.create_job(job_json("parent", vec![task("w", 1, json!({}))], json!({"queue": "research"}))).await;
    c.create_job(job_json("dept", vec![task("w", 1, json!({}))], json!({"queue": "ml.gpu"}))).await;
    c.create_job(job_json("leaf", vec![task("w", 1, json!({}))], json!({"queue": "vision"}))).await;
    wait_invalid(&c, "parent", "QueueNotLeaf", "queue \"research\" has child queues (\"vision\"").await;
    wait_invalid(&c, "dept", "QueueNotLeaf", "queue \"ml.gpu\" is a Department's queue").await;
    eventually(30, "the job in the leaf queue gets its pod", || async {
        ensure(c.job_pods("leaf").await.len() == 1, || "no pod yet".into())
    })
    .await;
    for job in ["parent", "dept"] {
        assert!(c.job_pods(job).await.is_empty(), "{job}: no pods in a queue that is not a leaf");
        assert!(Api::<PodGroup>::namespaced(c.client.clone(), NS).get_opt(job).await.unwrap().is_none(), "{job}");
    }

    // Once its child is gone the parent is a leaf; the queue watch reconciles the Job.
    let queues: Api<drover_api::crd::queue::Queue> = Api::all(c.client.clone());
    queues.delete("vision", &DeleteParams::default()).await.expect("child queue deleted");
    eventually(30, "pods once the queue is a leaf", || async {
        let s = c.status("parent").await;
        let valid = condition(&s, "Valid").is_some_and(|v| v.status == "True");
        ensure(valid && c.job_pods("parent").await.len() == 1, || format!("{s:?}"))
    })
    .await;
    c.stop().await;
}

/// The API server's message refusing `job`.
async fn refused(c: &Cluster, job: Value) -> String {
    let job: Job = serde_json::from_value(job).expect("a Job");
    match c.jobs().create(&PostParams::default(), &job).await {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("job {} is stored: {other:?}", job.name_any()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_a_job_above_max_pods_naming_the_field() {
    use drover_api::crd::job::MAX_PODS;
    let Some(c) = Cluster::start(false, false).await else { return };
    let huge = refused(&c, job_json("huge", vec![task("w", u32::MAX, json!({}))], json!({}))).await;
    assert!(huge.contains(&format!("spec.tasks[0].replicas: Invalid value: {}", u32::MAX)), "{huge}");
    assert!(huge.contains(&format!("less than or equal to {MAX_PODS}")), "{huge}");
    let tasks = vec![task("a", MAX_PODS, json!({})), task("b", 1, json!({}))];
    let total = refused(&c, job_json("total", tasks, json!({}))).await;
    assert!(total.contains(&format!("the tasks' replicas must total at most {MAX_PODS} pods")), "{total}");
    let largest = vec![task("a", MAX_PODS - 1, json!({})), task("b", 1, json!({}))];
    c.jobs()
        .create(&PostParams::default(), &serde_json::from_value(job_json("largest", largest, json!({}))).unwrap())
        .await
        .expect("a Job of exactly MAX_PODS pods is accepted");
    c.stop().await;
}

/// The Job mirrors its PodGroup's forecast (the scheduler writes the group's, here the test),
/// and drops it when the group no longer shows one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_mirrors_its_groups_forecast() {
    let Some(c) = Cluster::start(false, false).await else { return };
    c.create_job(job_json("waits", vec![task("worker", 2, json!({}))], json!({}))).await;
    let groups: Api<PodGroup> = Api::namespaced(c.client.clone(), NS);
    eventually(30, "the job's PodGroup", || async {
        ensure(groups.get_opt("waits").await.map_err(|e| e.to_string())?.is_some(), || "not yet".into())
    })
    .await;
    let forecast = json!({"queuePosition": 2, "position": 5, "expectedStart": "2030-01-01T00:00:00Z",
        "basis": "DeclaredRunTimes", "toStart": "raise queue q's limit"});
    let patch = Patch::Merge(json!({"status": {"phase": "Inqueue", "forecast": forecast}}));
    groups.patch_status("waits", &PatchParams::default(), &patch).await.expect("group status written");
    eventually(30, "the job shows the forecast", || async {
        let f = c.status("waits").await.forecast;
        let shown = f.as_ref().is_some_and(|f| (f.queue_position, f.position) == (2, 5) && f.to_start.is_some());
        ensure(shown, || format!("{f:?}"))
    })
    .await;
    let patch = Patch::Merge(json!({"status": {"forecast": null}}));
    groups.patch_status("waits", &PatchParams::default(), &patch).await.expect("group status written");
    eventually(30, "the job drops the forecast", || async {
        let f = c.status("waits").await.forecast;
        ensure(f.is_none(), || format!("{f:?}"))
    })
    .await;
    c.stop().await;
}
