//! One tenant's flood of waiting groups against another team's bind latency, on a real API
//! server with the real binaries (`drover_e2e::flood`): team A keeps `--waiting` one-GPU groups
//! waiting behind its queue's limit while its runs churn; the bench prints, at rest and under
//! churn, team A's PodGroup writes a second (all, and those on waiting groups), the Events
//! Drover emits a second, team B's gang bind latency (median and p90), and any Event emitted
//! twice for the same state. It exits non-zero when the bounds of issue 47 do not hold
//! (waiting groups at most 5 writes/s, B's median within 1.5x of rest, no repeated Event).
//!
//! `cargo build --release --bin drover && cargo bench -p drover-e2e --bench flood` (about 5
//! minutes); `-- --waiting N --rest S --churn S` for other sizes.

use std::time::Duration;

use anyhow::{bail, Context};
use drover_e2e::flood::{Flood, NODES};
use drover_e2e::Cluster;
use drover_envtest::Options;

fn args() -> anyhow::Result<Flood> {
    let mut flood = Flood {
        waiting: 300,
        rest: Duration::from_secs(60),
        churn: Duration::from_secs(120),
        b_every: Duration::from_secs(3),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |what: &str| -> anyhow::Result<u64> {
            it.next().with_context(|| format!("{what} N"))?.parse().with_context(|| format!("{what} N"))
        };
        match a.as_str() {
            "--waiting" => flood.waiting = number("--waiting")? as u32,
            "--rest" => flood.rest = Duration::from_secs(number("--rest")?),
            "--churn" => flood.churn = Duration::from_secs(number("--churn")?),
            "--bench" => {}
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(flood)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flood = args()?;
    let Some(mut cluster) = Cluster::start_without_drover(NODES, Options::default()).await else { return Ok(()) };
    cluster.guard_charges().await;
    cluster.spawn_drover("controllers", &[])?;
    cluster.spawn_drover("scheduler", &[])?;
    println!(
        "{} waiting groups of team A, {NODES} nodes x 8 GPUs; logs in {}",
        flood.waiting,
        cluster.logs().display()
    );
    let report = flood.run(&cluster).await?;
    println!("{}\n{}", report.rest.line("rest"), report.churn.line("churn"));
    println!("team A runs completed under churn: {}", report.completed);
    let ratio = report.churn.b_latency(0.5) / report.rest.b_latency(0.5);
    println!("team B median under churn / at rest = {ratio:.2}x");
    for e in &report.repeated_events {
        println!("repeated Event: {e}");
    }
    if report.churn.waiting_writes_per_second() > 5.0 || ratio > 1.5 || !report.repeated_events.is_empty() {
        bail!("a bound of issue 47 does not hold");
    }
    Ok(())
}
