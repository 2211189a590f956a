//! One Job as large as the CRD allows cannot take the controllers down for everyone (issue 19):
//! the real `drover controllers` process makes the pods of a Job of `MAX_PODS` pods in
//! batches, its peak resident memory (`VmHWM` in `/proc/<pid>/status`, the kernel's high-water
//! mark, so no peak between two looks is missed) stays under the memory the chart requests
//! for it, and meanwhile another team's Job gets its pods, which the real scheduler binds and
//! the fake kubelet runs.

use std::process::Child;

use drover_api::crd::job::{Job, JobState, MAX_PODS};
use drover_e2e::{chart, eventually, Cluster};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{json, Value};

/// The other team's namespace.
const TEAM_B: &str = "team-b";

/// Kills the controllers process when the test ends, however it ends.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The controllers' memory request in the chart's values, in bytes.
fn memory_request() -> u64 {
    let path = chart::chart_dir().join("values.yaml");
    let values: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&path).expect("the chart's values")).expect("values.yaml reads");
    let request = values["controllers"]["resources"]["requests"]["memory"].as_str().expect("a memory request");
    let (number, unit) = request.split_at(request.find(|c: char| !c.is_ascii_digit()).unwrap_or(request.len()));
    let scale = match unit {
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "" => 1,
        other => panic!("memory request {request:?}: unit {other:?} not read by this test"),
    };
    number.parse::<u64>().expect("a number of bytes") * scale
}

/// A field of `/proc/<pid>/status` given in kB, in bytes.
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the controllers process is alive");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in {status}"));
    let kb: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number of kB");
    kb * 1024
}

fn job(name: &str, namespace: &str, queue: &str, replicas: u32) -> Job {
    let container = json!({"name": "main", "image": "trainer",
        "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}});
    serde_json::from_value(json!({
        "apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queue": queue, "tasks": [{"name": "worker", "replicas": replicas,
            "template": {"metadata": {"annotations": {"sim.drover.dev/duration": "600"}},
                "spec": {"containers": [container]}}}]},
    }))
    .expect("a Job")
}

async fn pending_pods(jobs: &Api<Job>, name: &str) -> u32 {
    jobs.get(name).await.ok().and_then(|j| j.status).map_or(0, |s| s.pending)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_job_stays_within_the_controllers_memory_while_another_team_runs() {
    let Some(mut cluster) = Cluster::start_without_drover(2, Default::default()).await else { return };
    cluster.guard_charges().await;
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    for queue in ["team-a", TEAM_B] {
        let q = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": queue},
            "spec": {"deserved": {"nvidia.com/gpu": "8"}}});
        Api::<drover_api::crd::queue::Queue>::all(client.clone())
            .create(&PostParams::default(), &serde_json::from_value(q).unwrap())
            .await
            .expect("queue created");
    }
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM_B}});
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(ns).unwrap())
        .await
        .expect("namespace created");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), TEAM_B);
    eventually(60, "team-b's default ServiceAccount", || async { accounts.get_opt("default").await.ok()?.map(|_| ()) })
        .await;

    let log = cluster.logs().join("controllers-bounds.log");
    let controllers = Process(cluster.drover_command("controllers", &log).unwrap().spawn().expect("controllers start"));
    let pid = controllers.0.id();
    cluster.spawn_drover("scheduler", &["--period", "0.5"]).expect("drover scheduler starts");

    // Team A: the largest Job the schema allows, a gang of MAX_PODS one-GPU pods that never
    // fits the cluster's 16 GPUs.
    let team_a: Api<Job> = Api::namespaced(client.clone(), "default");
    team_a.create(&PostParams::default(), &job("huge", "default", "team-a", MAX_PODS)).await.expect("accepted");
    eventually(120, &format!("the controllers working on the large job (logs in {logs})"), || async {
        (pending_pods(&team_a, "huge").await >= 1_000).then_some(())
    })
    .await;

    // Team B's Job gets its pods, bound and running, while the large one is still being made.
    let team_b: Api<Job> = Api::namespaced(client.clone(), TEAM_B);
    team_b.create(&PostParams::default(), &job("small", TEAM_B, TEAM_B, 2)).await.expect("accepted");
    let pods: Api<Pod> = Api::namespaced(client.clone(), TEAM_B);
    eventually(120, &format!("team-b's pods running (logs in {logs})"), || async {
        let list = pods.list(&ListParams::default().labels("batch.drover.dev/job-name=small")).await.ok()?;
        let running = |p: &&Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        (list.items.iter().filter(running).count() == 2).then_some(())
    })
    .await;
    let made_by_then = pending_pods(&team_a, "huge").await;
    eventually(120, "team-b's Job Running", || async {
        (team_b.get("small").await.ok()?.status?.state == JobState::Running).then_some(())
    })
    .await;

    // Every pod of the large Job is made in the end, and counted in its status.
    eventually(900, &format!("all {MAX_PODS} pods of the large job (logs in {logs})"), || async {
        (pending_pods(&team_a, "huge").await == MAX_PODS).then_some(())
    })
    .await;
    let peak = proc_status_bytes(pid, "VmHWM:");
    let request = memory_request();
    eprintln!(
        "controllers: peak RSS {} MiB, request {} MiB; team-b ran when {made_by_then} of {MAX_PODS} pods existed",
        peak >> 20,
        request >> 20
    );
    assert!(peak < request, "the controllers' peak RSS {peak} B exceeds their memory request {request} B");
    let mut controllers = controllers;
    assert!(controllers.0.try_wait().expect("process state").is_none(), "the controllers exited (logs in {logs})");
}
