//! The workloads people already run, on a real kube-apiserver (drover-envtest) with the real
//! PodGroup controller, the Workload-API status mirror, the scheduler loop and a fake kubelet:
//! each operator's custom resource is created (its CRD from `tests/data/workload-crds.yaml`)
//! with the pods, and in between the Jobs, StatefulSets and leader pods, that its operator
//! would create. Every gang gets one PodGroup with the minimum its owner's spec gives and
//! binds all-or-nothing: with one pod missing nothing binds, with it every pod binds. A
//! Deployment's pods keep one-pod groups. The Workload API (`scheduling.k8s.io/v1alpha2`) is
//! served by turning its feature gate on.
//!
//! Each test starts its own control plane; without the control-plane binaries it says it is
//! skipped and passes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::podgroup::{PodGroup, PodGroupPhase, UNSCHEDULABLE};
use drover_api::crd::queue::Queue;
use drover_api::labels::{POD_GROUP_ANNOTATION, TASK_LABEL};
use drover_controllers::gangs::workload_status::{run_workload_status, SCHEDULED};
use drover_controllers::queues;
use drover_envtest::{eventually, Options, Server};
use drover_k8s::scheduler::{self, NoopObserver, SchedulerOptions};
use drover_kubelet::KubeletConfig;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1alpha2::PodGroup as K8sPodGroup;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TENANT: &str = "team-a";
const QUEUE: &str = "team-a";
const GPU: &str = "nvidia.com/gpu";
const WAIT: Duration = Duration::from_secs(30);

/// A control plane with Drover's and the operators' CRDs, a queue for [`TENANT`], two 8-GPU
/// nodes, and Drover's PodGroup controller, status mirror and scheduler running.
struct Cluster {
    server: Server,
    client: Client,
    stops: Vec<oneshot::Sender<()>>,
}

fn operator_crds() -> Vec<CustomResourceDefinition> {
    include_str!("data/workload-crds.yaml")
        .split("\n---\n")
        .skip(1)
        .map(|doc| serde_yaml::from_str(doc).expect("test CRD parses"))
        .collect()
}

impl Cluster {
    async fn start(apiserver_flags: &[&str]) -> Option<Cluster> {
        let options =
            Options { apiserver_flags: apiserver_flags.iter().map(|f| f.to_string()).collect(), ..Options::default() };
        let server = Server::start_with(&options).await?;
        let client = server.client();
        drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("Drover's CRDs are accepted");
        drover_k8s::charge::install_guard(&client, "drover-test").await.expect("the charge guard is accepted");
        drover_envtest::install_crds(&client, &operator_crds()).await.expect("the operators' CRDs are accepted");
        let mut cluster = Cluster { server, client: client.clone(), stops: Vec::new() };
        cluster.apply("v1", "Namespace", "namespaces", json!({"metadata": {"name": TENANT}}), false).await;
        let queues: Api<Queue> = Api::all(client.clone());
        let queue: Queue =
            serde_json::from_value(json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": QUEUE}, "spec": {"deserved": {GPU: "16"},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TENANT}}}}))
            .expect("queue");
        queues.create(&PostParams::default(), &queue).await.expect("queue created");
        let kubelet = KubeletConfig::gpu_nodes(2);
        let stop = cluster.signal();
        tokio::spawn(drover_kubelet::run(client.clone(), kubelet, stop));
        let nodes: Api<Node> = Api::all(client.clone());
        eventually(WAIT.as_secs(), "nodes registered", || async { nodes.get_opt("node-1").await.ok().flatten() }).await;
        let stop = cluster.signal();
        tokio::spawn(queues::run_pod_groups(client.clone(), stop));
        let stop = cluster.signal();
        tokio::spawn(run_workload_status(client.clone(), stop));
        let options = SchedulerOptions { period: Duration::from_millis(200), ..SchedulerOptions::default() };
        let stop = cluster.signal();
        tokio::spawn(scheduler::run(client.clone(), options, || true, Arc::new(NoopObserver), stop));
        Some(cluster)
    }

    fn signal(&mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (tx, rx) = oneshot::channel::<()>();
        self.stops.push(tx);
        async move {
            let _ = rx.await;
        }
    }

    async fn stop(self) {
        for stop in self.stops {
            let _ = stop.send(());
        }
        self.server.stop().await;
    }

    /// Creates an object of any kind (in [`TENANT`] when `namespaced`) and returns it as created.
    async fn apply(&self, api_version: &str, kind: &str, plural: &str, mut manifest: Value, namespaced: bool) -> Value {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        manifest["apiVersion"] = json!(api_version);
        manifest["kind"] = json!(kind);
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(self.client.clone(), TENANT, &resource)
        } else {
            Api::all_with(self.client.clone(), &resource)
        };
        let object: DynamicObject = serde_json::from_value(manifest).expect("manifest");
        let created =
            api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("{kind} created: {e}"));
        serde_json::to_value(created).expect("json")
    }

    /// Creates a pod of one GPU for Drover, with `metadata` (name, labels, ownerReferences…).
    async fn pod(&self, metadata: Value) -> Value {
        self.pod_with(metadata, json!({})).await
    }

    async fn pod_with(&self, mut metadata: Value, spec: Value) -> Value {
        metadata["namespace"] = json!(TENANT);
        let mut pod = json!({"metadata": metadata, "spec": {"schedulerName": "drover",
            "containers": [{"name": "main", "image": "trainer",
                "resources": {"requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}}}]}});
        if let (Some(s), Some(extra)) = (pod["spec"].as_object_mut(), spec.as_object()) {
            s.extend(extra.clone());
        }
        self.apply("v1", "Pod", "pods", pod, true).await
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), TENANT)
    }

    fn groups(&self) -> Api<PodGroup> {
        Api::namespaced(self.client.clone(), TENANT)
    }

    /// The group, once every pod in `pods` is annotated with it.
    async fn grouped(&self, group: &str, pods: &[&str]) -> PodGroup {
        for pod in pods {
            eventually(WAIT.as_secs(), &format!("pod {pod} in group {group}"), || async {
                let p = self.pods().get(pod).await.ok()?;
                (p.metadata.annotations?.get(POD_GROUP_ANNOTATION)? == group).then_some(())
            })
            .await;
        }
        self.groups().get(group).await.expect("the group exists")
    }

    /// Waits until the scheduler says the group has `have` of the `need` pods its gang (or
    /// the first task short of its minimum) needs, then checks over more cycles that none of
    /// `pods` is bound; returns the reason.
    async fn nothing_binds(&self, group: &str, pods: &[&str], have: usize, need: usize) -> String {
        let says = format!("has {have} of the {need} pods");
        let reason = eventually(WAIT.as_secs(), &format!("group {group} waiting: {says}"), || async {
            let g = self.groups().get(group).await.ok()?;
            let c = g.status?.conditions.into_iter().find(|c| c.type_ == UNSCHEDULABLE && c.status == "True")?;
            c.message.contains(&says).then_some(c.message)
        })
        .await;
        for _ in 0..10 {
            for pod in pods {
                let node = self.pods().get(pod).await.expect("pod").spec.and_then(|s| s.node_name);
                assert_eq!(node, None, "pod {pod} bound while its gang is incomplete ({reason})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        reason
    }

    async fn all_bind(&self, pods: &[&str]) {
        for pod in pods {
            eventually(WAIT.as_secs(), &format!("pod {pod} bound"), || async {
                self.pods().get(pod).await.ok()?.spec?.node_name
            })
            .await;
        }
    }
}

/// A controller ownerReference to `object` (as created).
fn owned_by(object: &Value) -> Value {
    json!([{"apiVersion": object["apiVersion"], "kind": object["kind"], "name": object["metadata"]["name"],
        "uid": object["metadata"]["uid"], "controller": true}])
}

/// The group has the minimum and per-role minimums the owner's spec gives, in the queue asked for.
fn assert_gang(group: &PodGroup, min: u32, per_task: &[(&str, u32)]) {
    assert_eq!(group.spec.min_member, min, "{:?}", group.spec);
    let want: BTreeMap<String, u32> = per_task.iter().map(|(t, n)| (t.to_string(), *n)).collect();
    assert_eq!(group.spec.min_task_member, want, "{:?}", group.spec);
    assert_eq!(group.spec.queue.as_deref(), Some(QUEUE), "the queue the owner asks for");
}

/// A PyTorchJob of 1 master + 3 workers (queue asked for with KAI's label): one group
/// `pytorchjob-<name>` of 4, a master and 3 workers; 3 pods wait, the 4th starts all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pytorchjob_of_a_master_and_three_workers_binds_as_one_gang() {
    let Some(c) = Cluster::start(&[]).await else { return };
    let job = c
        .apply(
            "kubeflow.org/v1",
            "PyTorchJob",
            "pytorchjobs",
            json!({"metadata": {"name": "bert",
            "labels": {"kai.scheduler/queue": QUEUE}}, "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {}}, "Worker": {"replicas": 3, "template": {}}}}}),
            true,
        )
        .await;
    let pod = |name: &str, role: &str| json!({"name": name, "labels": {"training.kubeflow.org/replica-type": role}, "ownerReferences": owned_by(&job)});
    for (name, role) in [("bert-master-0", "master"), ("bert-worker-0", "worker"), ("bert-worker-1", "worker")] {
        c.pod(pod(name, role)).await;
    }
    let first = ["bert-master-0", "bert-worker-0", "bert-worker-1"];
    let group = c.grouped("pytorchjob-bert", &first).await;
    assert_gang(&group, 4, &[("master", 1), ("worker", 3)]);
    let task = c.pods().get("bert-worker-0").await.unwrap().metadata.labels.unwrap().get(TASK_LABEL).cloned();
    assert_eq!(task.as_deref(), Some("worker"), "the pod's role becomes its task");
    c.nothing_binds("pytorchjob-bert", &first, 2, 3).await;
    c.pod(pod("bert-worker-2", "worker")).await;
    c.all_bind(&["bert-master-0", "bert-worker-0", "bert-worker-1", "bert-worker-2"]).await;
    c.stop().await;
}

/// A JobSet of a replicated job with 2 replicas of 4 pods: the JobSet's batch Jobs own the
/// pods; one group `jobset-<name>` of 8; 7 pods wait, the 8th starts all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_of_two_jobs_of_four_binds_as_one_gang() {
    let Some(c) = Cluster::start(&[]).await else { return };
    let set = c
        .apply(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            "jobsets",
            json!({"metadata": {"name": "llm",
            "annotations": {"scheduling.drover.dev/queue": QUEUE}}, "spec": {"replicatedJobs": [
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4,
                "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}}]}}),
            true,
        )
        .await;
    let mut names = Vec::new();
    for j in 0..2 {
        let job = c
            .apply(
                "batch/v1",
                "Job",
                "jobs",
                json!({"metadata": {"name": format!("llm-workers-{j}"),
                "ownerReferences": owned_by(&set)}, "spec": {"suspend": true, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}),
                true,
            )
            .await;
        for i in 0..4 {
            names.push((format!("llm-workers-{j}-{i}"), job.clone()));
        }
    }
    let pod = |name: &str, job: &Value| {
        json!({"name": name, "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "workers"},
            "ownerReferences": owned_by(job)})
    };
    for (name, job) in &names[..7] {
        c.pod(pod(name, job)).await;
    }
    let first: Vec<&str> = names[..7].iter().map(|(n, _)| n.as_str()).collect();
    let group = c.grouped("jobset-llm", &first).await;
    assert_gang(&group, 8, &[("workers", 8)]);
    c.nothing_binds("jobset-llm", &first, 7, 8).await;
    c.pod(pod(&names[7].0, &names[7].1)).await;
    let all: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    c.all_bind(&all).await;
    c.stop().await;
}

/// A LeaderWorkerSet of size 4: the leader StatefulSet owns the leader pod, which owns the
/// worker StatefulSet, which owns 3 workers (as the LWS controller makes them); one group
/// `lws-<name>-0` of a leader and 3 workers; the leader and 2 workers wait, the 3rd starts all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaderworkerset_group_of_four_binds_as_one_gang() {
    let Some(c) = Cluster::start(&[]).await else { return };
    let lws = c
        .apply(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "leaderworkersets",
            json!({"metadata": {
            "name": "serve", "labels": {"scheduling.drover.dev/queue": QUEUE}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 4}}}),
            true,
        )
        .await;
    let sts = |name: &str, owner: &Value| {
        json!({"metadata": {"name": name, "ownerReferences": owned_by(owner)}, "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": name}}, "serviceName": name, "template": {"metadata": {"labels":
            {"app": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    };
    let leader_set = c.apply("apps/v1", "StatefulSet", "statefulsets", sts("serve", &lws), true).await;
    let labels = |worker: u32| {
        json!({"leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": worker.to_string()})
    };
    let leader = c.pod(json!({"name": "serve-0", "labels": labels(0), "ownerReferences": owned_by(&leader_set)})).await;
    let worker_set = c.apply("apps/v1", "StatefulSet", "statefulsets", sts("serve-0", &leader), true).await;
    let worker =
        |i: u32| json!({"name": format!("serve-0-{i}"), "labels": labels(i), "ownerReferences": owned_by(&worker_set)});
    c.pod(worker(1)).await;
    c.pod(worker(2)).await;
    let first = ["serve-0", "serve-0-1", "serve-0-2"];
    let group = c.grouped("lws-serve-0", &first).await;
    assert_gang(&group, 4, &[("leader", 1), ("worker", 3)]);
    c.nothing_binds("lws-serve-0", &first, 2, 3).await;
    c.pod(worker(3)).await;
    c.all_bind(&["serve-0", "serve-0-1", "serve-0-2", "serve-0-3"]).await;
    c.stop().await;
}

/// A RayCluster with a head and 2 workers: one group `raycluster-<name>` of 3; the head and a
/// worker wait, the second worker starts all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raycluster_with_two_workers_binds_as_one_gang() {
    let Some(c) = Cluster::start(&[]).await else { return };
    let ray = c
        .apply(
            "ray.io/v1",
            "RayCluster",
            "rayclusters",
            json!({"metadata": {"name": "rc",
            "labels": {"kai.scheduler/queue": QUEUE}}, "spec": {"headGroupSpec": {"rayStartParams": {}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 0, "maxReplicas": 4}]}}),
            true,
        )
        .await;
    let pod = |name: &str, labels: Value| json!({"name": name, "labels": labels, "ownerReferences": owned_by(&ray)});
    c.pod(pod("rc-head", json!({"ray.io/node-type": "head"}))).await;
    c.pod(pod("rc-gpu-a", json!({"ray.io/node-type": "worker", "ray.io/group": "gpu"}))).await;
    let group = c.grouped("raycluster-rc", &["rc-head", "rc-gpu-a"]).await;
    assert_gang(&group, 3, &[("head", 1), ("gpu", 2)]);
    c.nothing_binds("raycluster-rc", &["rc-head", "rc-gpu-a"], 1, 2).await;
    c.pod(pod("rc-gpu-b", json!({"ray.io/node-type": "worker", "ray.io/group": "gpu"}))).await;
    c.all_bind(&["rc-head", "rc-gpu-a", "rc-gpu-b"]).await;
    c.stop().await;
}

/// A Deployment's pods (through its ReplicaSet) keep one-pod groups, and each binds alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_pods_stay_one_pod_groups() {
    let Some(c) = Cluster::start(&[]).await else { return };
    let template =
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let deployment = c
        .apply(
            "apps/v1",
            "Deployment",
            "deployments",
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 2,
            "selector": {"matchLabels": {"app": "web"}}, "template": template}}),
            true,
        )
        .await;
    let set = c
        .apply(
            "apps/v1",
            "ReplicaSet",
            "replicasets",
            json!({"metadata": {"name": "web-1",
            "ownerReferences": owned_by(&deployment)}, "spec": {"replicas": 2,
            "selector": {"matchLabels": {"app": "web"}}, "template": template}}),
            true,
        )
        .await;
    for name in ["web-1-a", "web-1-b"] {
        c.pod(json!({"name": name, "annotations": {"scheduling.drover.dev/queue": QUEUE},
            "ownerReferences": owned_by(&set)}))
            .await;
        let group = c.grouped(&format!("pod-{name}"), &[name]).await;
        assert_eq!(group.spec.min_member, 1);
    }
    c.all_bind(&["web-1-a", "web-1-b"]).await;
    c.stop().await;
}

/// Migration from Volcano: pods annotated `scheduling.k8s.io/group-name` join the Volcano
/// PodGroup's gang (its `minMember` of 3 and its queue); with 2 nothing binds, the 3rd starts all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_a_volcano_podgroup_bind_as_its_gang_in_its_queue() {
    let Some(c) = Cluster::start(&[]).await else { return };
    c.apply(
        "scheduling.volcano.sh/v1beta1",
        "PodGroup",
        "podgroups",
        json!({"metadata": {"name": "tf"},
        "spec": {"minMember": 3, "queue": QUEUE}}),
        true,
    )
    .await;
    let pod = |name: &str| json!({"name": name, "annotations": {"scheduling.k8s.io/group-name": "tf"}});
    c.pod(pod("tf-0")).await;
    c.pod(pod("tf-1")).await;
    let group = c.grouped("volcano-tf", &["tf-0", "tf-1"]).await;
    assert_gang(&group, 3, &[]);
    c.nothing_binds("volcano-tf", &["tf-0", "tf-1"], 2, 3).await;
    c.pod(pod("tf-2")).await;
    c.all_bind(&["tf-0", "tf-1", "tf-2"]).await;
    c.stop().await;
}

/// Kubernetes' Workload API, served with its feature gate: a Workload whose template has a
/// gang policy of 4, the PodGroup made from it, and pods that name that PodGroup. With 3 pods
/// nothing binds and the upstream PodGroup's `PodGroupScheduled` is False, reason
/// `Unschedulable`, with Drover's reason; the 4th pod starts all four and the condition turns True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_api_gang_of_four_binds_together_and_its_status_says_why_it_waits() {
    let flags = ["--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true"];
    let Some(c) = Cluster::start(&flags).await else { return };
    c.apply(
        "scheduling.k8s.io/v1alpha2",
        "Workload",
        "workloads",
        json!({"metadata": {"name": "train"},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]}}),
        true,
    )
    .await;
    c.apply(
        "scheduling.k8s.io/v1alpha2",
        "PodGroup",
        "podgroups",
        json!({"metadata": {"name": "train-workers",
        "labels": {"kai.scheduler/queue": QUEUE}}, "spec": {
        "podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "workers"}},
        "schedulingPolicy": {"gang": {"minCount": 4}}}}),
        true,
    )
    .await;
    let pod =
        |i: u32| (json!({"name": format!("train-{i}")}), json!({"schedulingGroup": {"podGroupName": "train-workers"}}));
    for i in 0..3 {
        let (meta, spec) = pod(i);
        let created = c.pod_with(meta, spec).await;
        assert_eq!(created["spec"]["schedulingGroup"]["podGroupName"], "train-workers", "the API keeps the field");
    }
    let first = ["train-0", "train-1", "train-2"];
    let group = c.grouped("k8s-train-workers", &first).await;
    assert_gang(&group, 4, &[]);
    let reason = c.nothing_binds("k8s-train-workers", &first, 3, 4).await;
    let upstream: Api<K8sPodGroup> = Api::namespaced(c.client.clone(), TENANT);
    let condition = |want: &'static str| {
        let upstream = upstream.clone();
        async move {
            let g = upstream.get("train-workers").await.ok()?;
            g.status?.conditions?.into_iter().find(|c| c.type_ == SCHEDULED && c.status == want)
        }
    };
    let waiting = eventually(WAIT.as_secs(), "PodGroupScheduled=False upstream", || condition("False")).await;
    assert_eq!(waiting.reason, "Unschedulable", "{waiting:?}");
    assert!(waiting.message.contains(&reason), "the upstream message carries Drover's reason {reason:?}: {waiting:?}");
    let (meta, spec) = pod(3);
    c.pod_with(meta, spec).await;
    c.all_bind(&["train-0", "train-1", "train-2", "train-3"]).await;
    let scheduled = eventually(WAIT.as_secs(), "PodGroupScheduled=True upstream", || condition("True")).await;
    assert_eq!(scheduled.reason, "Scheduled");
    let phase = c.groups().get("k8s-train-workers").await.unwrap().status.map(|s| s.phase);
    assert_eq!(phase, Some(PodGroupPhase::Running));
    c.stop().await;
}
