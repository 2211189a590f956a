//! One tenant's flood of waiting groups costs the API server, and another team, little: team A
//! keeps 300 one-GPU groups waiting behind its queue's limit while its runs churn, and team B's
//! gangs still bind about as fast as at rest, team A's waiting groups cost a few status writes
//! a second, and no Event is emitted twice for the same state (`drover_e2e::flood`).

use std::time::Duration;

use drover_e2e::flood::{Flood, NODES};
use drover_e2e::Cluster;
use drover_envtest::Options;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenants_waiting_groups_neither_flood_the_api_nor_slow_another_team() {
    let Some(mut cluster) = Cluster::start_without_drover(NODES, Options::default()).await else { return };
    cluster.guard_charges().await;
    cluster.spawn_drover("controllers", &[]).expect("drover controllers starts");
    cluster.spawn_drover("scheduler", &[]).expect("drover scheduler starts");
    let flood = Flood {
        waiting: 300,
        rest: Duration::from_secs(30),
        churn: Duration::from_secs(60),
        b_every: Duration::from_secs(3),
    };
    let logs = cluster.logs().display().to_string();
    let report = flood.run(&cluster).await.unwrap_or_else(|e| panic!("the flood: {e:#}; logs in {logs}"));
    println!("{}\n{}", report.rest.line("rest"), report.churn.line("churn"));
    assert!(report.completed >= 20, "team A's runs churned: {} completed; logs in {logs}", report.completed);
    assert!(
        report.churn.waiting_writes_per_second() <= 5.0,
        "team A's waiting groups cost at most a few status writes a second: {}; logs in {logs}",
        report.churn.line("churn")
    );
    assert!(
        report.repeated_events.is_empty(),
        "Events emitted twice for the same state: {:#?}",
        report.repeated_events
    );
    let (rest, churn) = (report.rest.b_latency(0.5), report.churn.b_latency(0.5));
    assert!(
        churn <= 1.5 * rest,
        "team B's gangs bind within 1.5x of their latency at rest: {:.0} ms against {:.0} ms; logs in {logs}",
        churn * 1000.0,
        rest * 1000.0
    );
}
