//! Time-based fair share's ledger through the real binaries (real kube-apiserver + fake
//! kubelet, `drover controllers`, `drover scheduler`): the scheduler keeps each Queue's past
//! usage in its status, moved once per tick, and a new leader goes on from what the old one
//! wrote instead of starting from nothing. Without decay the ledger is a plain integral, so
//! every figure is exact: a queue running 2 GPUs gains 2 GPU-seconds per second.

use drover_api::crd::queue::Queue;
use drover_e2e::{create, eventually, lease_holder, Cluster};
use drover_envtest::Options;
use kube::api::Api;
use serde_json::json;

/// Time-based fair share on, ticking every second, without decay: the window (2^31 s from
/// the epoch) does not end before 2038.
const CONFIG: &str = "actions: [enqueue, allocate, preempt, reclaim, backfill]
plugins:
  - name: priority
  - name: gang
  - name: fairshare
    arguments: {timeBased: {enabled: true, tickSeconds: 1, halfLifeSeconds: 0, windowSeconds: 2147483648}}
  - name: predicates
  - name: nodeorder
    arguments: {}
";

/// The queue's ledger entry: (tick in Unix seconds, GPU-seconds), once it has one.
async fn usage(queues: &Api<Queue>, name: &str) -> Option<(i64, f64)> {
    let usage = queues.get(name).await.ok()?.status?.usage?;
    Some((usage.tick.0.as_second(), usage.resources.get("nvidia.com/gpu").copied().unwrap_or(0.0)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_lives_in_queue_status_and_a_new_leader_goes_on_from_it() {
    let Some(mut cluster) = Cluster::start_without_drover(1, Options::default()).await else { return };
    cluster.guard_charges().await;
    let config = cluster.logs().join("time-based.yaml");
    std::fs::write(&config, CONFIG).expect("the configuration is written");
    let config = config.display().to_string();
    cluster.spawn_drover("controllers", &[]).expect("drover controllers starts");
    let mut first = cluster.spawn_replica("scheduler", "first", &["--period", "0.2", "--config", &config]);
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let queues: Api<Queue> = Api::all(client.clone());
    create(
        &queues,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "qa"},
        "spec": {}}),
    )
    .await;
    let jobs: Api<drover_api::crd::job::Job> = Api::namespaced(client.clone(), "default");
    create(
        &jobs,
        json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"queue": "qa", "tasks": [{"name": "worker", "replicas": 1, "template": {"spec": {"containers": [
            {"name": "main", "image": "trainer",
             "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}}]}}}]}}),
    )
    .await;

    // Running: two ticks apart, the ledger grew by exactly 2 GPUs times the seconds between.
    let (t1, u1) = eventually(40, &format!("qa's ledger counts its GPUs (logs in {logs})"), || async {
        usage(&queues, "qa").await.filter(|&(_, gpu)| gpu > 0.0)
    })
    .await;
    let (t2, u2) =
        eventually(20, "qa's ledger moves on", || async { usage(&queues, "qa").await.filter(|&(t, _)| t >= t1 + 2) })
            .await;
    assert_eq!(u2 - u1, 2.0 * (t2 - t1) as f64, "2 GPUs for {} s", t2 - t1);

    // The leader dies; a new one takes the lease and goes on from the status, counting the
    // ticks it missed with what runs now: still exactly 2 GPU-seconds per second.
    first.kill9();
    let (t3, u3) = usage(&queues, "qa").await.expect("the ledger is still there");
    let _second = cluster.spawn_replica("scheduler", "second", &["--period", "0.2", "--config", &config]);
    eventually(40, "the second scheduler leads", || async {
        lease_holder(&client, "drover-scheduler").await.filter(|h| h == "second")
    })
    .await;
    let (t4, u4) = eventually(20, "the new leader moves the ledger on", || async {
        usage(&queues, "qa").await.filter(|&(t, _)| t > t3)
    })
    .await;
    assert!(t4 - t3 >= 1);
    assert_eq!(u4 - u3, 2.0 * (t4 - t3) as f64, "no reset, no double count across the failover");
}
