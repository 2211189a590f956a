//! Reclaim of elastic pods end to end through the real binaries (real kube-apiserver + fake
//! kubelet, `drover controllers`, `drover scheduler`): queue qa (deserved 64 GPUs) runs an
//! elastic Job on all 128 GPUs of 16 nodes, and queue qb (deserved 64) submits an elastic Job
//! of 64 one-GPU pods. The scheduler must ask for qb's whole elastic need in one attempt, so
//! that qb runs all 64 pods one grace period (its victims take all of it to stop) and two
//! cycles after its submission, not one pod at a time; and exactly 64 of qa's pods are
//! evicted, none more later (no oscillation between the queues).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use drover_api::crd::job::Job;
use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, Cluster};
use drover_envtest::Options;
use drover_kubelet::STOP_ANNOTATION;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use serde_json::{json, Value};

const NS: &str = "default";
/// The pods' `terminationGracePeriodSeconds`; evicted pods take all of it to stop.
const GRACE_SECONDS: u64 = 30;
/// The scheduler's `--period`.
const CYCLE: Duration = Duration::from_millis(200);
/// 16 nodes of 8 GPUs: 128 GPUs, 64 deserved by each queue.
const NODES: u32 = 16;

/// A queue deserving `gpus` GPUs.
fn queue(name: &str, gpus: u32) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name},
        "spec": {"deserved": {"nvidia.com/gpu": gpus.to_string()}}})
}

/// An elastic Job (minimum 1) of `replicas` one-GPU pods in `queue`, whose pods, when evicted,
/// take their whole grace period to stop (a trainer checkpointing on SIGTERM).
fn elastic_job(name: &str, queue: &str, replicas: u32) -> Value {
    json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
        "spec": {"queue": queue, "minAvailable": 1, "tasks": [{"name": "worker", "replicas": replicas, "template": {
            "metadata": {"annotations": {STOP_ANNOTATION: GRACE_SECONDS.to_string()}},
            "spec": {"terminationGracePeriodSeconds": GRACE_SECONDS, "containers": [{"name": "main", "image": "trainer",
                "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]}})
}

/// Running and not being deleted.
fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && pod.metadata.deletion_timestamp.is_none()
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The uids of `job`'s running pods.
async fn running_uids(pods: &Api<Pod>, job: &str) -> BTreeSet<String> {
    let selector = format!("batch.drover.dev/job-name={job}");
    let list = pods.list(&ListParams::default().labels(&selector)).await.expect("pods listed").items;
    list.iter().filter(|p| running(p)).map(uid_of).collect()
}

/// The uids of the pods the scheduler evicted so far, by the Event it records on each.
async fn evicted_uids(events: &Api<Event>) -> BTreeSet<String> {
    let list = events.list(&ListParams::default()).await.expect("events listed").items;
    list.into_iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("Preempted" | "Reclaimed" | "Consolidated")))
        .filter_map(|e| e.involved_object.uid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_job_reclaims_its_fair_share_within_one_grace_period() {
    let Some(mut cluster) = Cluster::start_without_drover(NODES, Options::default()).await else { return };
    cluster.guard_charges().await;
    cluster.spawn_drover("controllers", &[]).expect("drover controllers starts");
    let period = CYCLE.as_secs_f64().to_string();
    cluster.spawn_drover("scheduler", &["--period", &period]).expect("drover scheduler starts");
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let queues: Api<Queue> = Api::all(client.clone());
    create(&queues, queue("qa", 64)).await;
    create(&queues, queue("qb", 64)).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);

    // qa takes the whole cluster while nobody else asks.
    create(&jobs, elastic_job("a", "qa", 128)).await;
    let a_first = eventually(120, &format!("128 pods of a running (logs in {logs})"), || async {
        Some(running_uids(&pods, "a").await).filter(|uids| uids.len() == 128)
    })
    .await;

    // qb submits; at every look qa keeps its fair share and nothing but qa's first pods is
    // evicted, no more than 64 of them.
    let submitted = Instant::now();
    create(&jobs, elastic_job("b", "qb", 64)).await;
    let check = |a_running: &BTreeSet<String>, evicted: &BTreeSet<String>| {
        assert!(a_running.len() >= 64, "qa was cut below its fair share: {} pods (logs in {logs})", a_running.len());
        assert!(evicted.len() <= 64, "{} pods evicted, more than qb's 64 (logs in {logs})", evicted.len());
        assert!(evicted.is_subset(&a_first), "pods evicted other than qa's first ones (logs in {logs})");
    };
    let settle = GRACE_SECONDS + 60;
    let evictions_seen = eventually(settle, &format!("64 pods of a evicted (logs in {logs})"), || async {
        let (a_running, evicted) = (running_uids(&pods, "a").await, evicted_uids(&events).await);
        check(&a_running, &evicted);
        (evicted.len() == 64).then(|| submitted.elapsed())
    })
    .await;
    eventually(settle, &format!("64 pods of b running (logs in {logs})"), || async {
        let (a_running, evicted) = (running_uids(&pods, "a").await, evicted_uids(&events).await);
        check(&a_running, &evicted);
        (running_uids(&pods, "b").await.len() == 64).then_some(())
    })
    .await;
    let all_running = submitted.elapsed();
    eprintln!(
        "b submitted: 64 of a's pods evicted within {:.2} s, all 64 of b's running after {:.2} s",
        evictions_seen.as_secs_f64(),
        all_running.as_secs_f64()
    );

    // The slack is the API latency on the way, outside the cycles, as measured on a busy
    // 2-core machine: the controllers create b's pods 16 at a time (0.2-0.4 s; a first cycle
    // may see only some of them and evict for the rest in the next one, whose victims then
    // stop a second later when a second boundary falls between the two: the API server gives
    // deletionTimestamp to the second), the 64 evictions and their Events (0.3-0.4 s a cycle),
    // the fake kubelet deleting the stopped victims (0.1-0.3 s), the bindings (a charge and a
    // binding per pod, 0.25-0.75 s for 32 to 64 pods; the claim binds each pod as soon as its
    // victims are gone, and a victim's deletion starts a cycle), the kubelet starting b's pods
    // (0.2-0.4 s) and this test's 0.1 s polling. Locally that sums to 31.4-32.0 s in all; a
    // loaded CI host measured 32.55 and 32.87 s. Reclaim asking one pod at a time, as it did
    // before, evicts one victim per grace period here, and fails the wait for the 64 evictions.
    let slack = Duration::from_secs(3);
    let bound = Duration::from_secs(GRACE_SECONDS) + 2 * CYCLE + slack;
    assert!(
        all_running <= bound,
        "b's 64 pods ran {:.2} s after its submission, more than one grace period, two cycles and the slack ({:.2} s) (logs in {logs})",
        all_running.as_secs_f64(),
        bound.as_secs_f64()
    );

    // Many cycles later nothing has changed: qa keeps 64 of its first pods (its replacements
    // wait), qb runs 64, and no pod was evicted since.
    tokio::time::sleep(15 * CYCLE).await;
    let a_running = running_uids(&pods, "a").await;
    let evicted = evicted_uids(&events).await;
    assert_eq!(a_running.len(), 64, "qa's running pods (logs in {logs})");
    assert!(a_running.is_subset(&a_first), "qa's replacement pods took GPUs (logs in {logs})");
    assert_eq!(evicted.len(), 64, "pods evicted in all (logs in {logs})");
    assert!(evicted.is_disjoint(&a_running), "an evicted pod still runs (logs in {logs})");
    assert_eq!(running_uids(&pods, "b").await.len(), 64, "qb's running pods (logs in {logs})");
}
