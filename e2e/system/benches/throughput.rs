//! Scheduling throughput on a real API server, Drover against kube-scheduler, in one run.
//!
//! A real control plane (drover-envtest), a fake kubelet with 1,250 nodes of 8 GPUs, and
//! 10,000 one-GPU pods created at once — exactly the cluster's GPUs. Drover gets them as
//! 1,000 gangs of 10 (PodGroups with `minMember: 10`); kube-scheduler gets the same pods as
//! plain pods. Each scheduler runs on a control plane and nodes of its own, started the same
//! way, one after the other in the same run. For each: the time from starting its process
//! (pods already created) to the last binding, seen through a watch. kube-scheduler runs
//! with its client QPS and burst raised, so that the comparison is of schedulers, not of
//! client rate limits.
//!
//! `cargo bench -p drover-e2e --bench throughput` (about 4 minutes); `-- --nodes N --pods-per-gang K`
//! for other sizes, `-- --only drover|kube-scheduler` for one side, `-- --drover-arg ARG` (repeated)
//! for flags of `drover scheduler`, `-- --keep` to keep the logs.

mod support;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use drover_api::crd::podgroup::{PodGroup, PodGroupSpec};
use drover_api::crd::queue::{Queue, QueueSpec};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, PostParams};
use kube::Client;
use support::{bed, create_all, next_binding, pod, pod_watch, Bed, Killed, GPU, NS};

struct Args {
    nodes: u32,
    per_gang: u32,
    only: Option<String>,
    drover_args: Vec<String>,
    keep: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args { nodes: 1250, per_gang: 10, only: None, drover_args: Vec::new(), keep: false };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--nodes" => args.nodes = it.next().context("--nodes N")?.parse().context("--nodes N")?,
            "--pods-per-gang" => {
                args.per_gang = it.next().context("--pods-per-gang K")?.parse().context("--pods-per-gang K")?
            }
            "--only" => args.only = Some(it.next().context("--only drover|kube-scheduler")?),
            "--drover-arg" => args.drover_args.push(it.next().context("--drover-arg ARG")?),
            "--keep" => args.keep = true,
            "--bench" => {}
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

/// Starts `start` and returns the seconds until `count` pods are bound, watching them.
async fn time_to_bind(
    client: &Client,
    count: usize,
    start: impl FnOnce() -> anyhow::Result<Option<Child>>,
) -> anyhow::Result<(f64, Option<Killed>)> {
    let mut bound: HashSet<String> = HashSet::new();
    let mut stream = pod_watch(client).await?;
    let started = Instant::now();
    let child = start()?.map(Killed);
    while bound.len() < count {
        next_binding(&mut stream, &mut bound, Duration::from_secs(600)).await?;
    }
    Ok((started.elapsed().as_secs_f64(), child))
}

/// kube-scheduler's pods/s: the pods as plain pods, its client limits raised.
async fn kube_scheduler(bed: &mut Bed, pods: usize) -> anyhow::Result<f64> {
    let plain = (0..pods).map(|i| pod(&format!("plain-{i}"), "default-scheduler", None)).collect();
    create_all(&Api::namespaced(bed.client.clone(), NS), plain).await?;
    let server = &mut bed.server;
    let (secs, _) = time_to_bind(&bed.client, pods, || {
        server.plane_mut().start_kube_scheduler(&["--kube-api-qps=5000".into(), "--kube-api-burst=5000".into()])?;
        Ok(None)
    })
    .await?;
    bed.server.plane_mut().stop_kube_scheduler();
    println!("kube-scheduler: {pods} pods bound in {secs:.2} s = {:.0} pods/s", pods as f64 / secs);
    Ok(pods as f64 / secs)
}

/// Drover's pods/s: the pods as gangs of `--pods-per-gang` in one queue.
async fn drover(args: &Args, bed: &mut Bed, pods: usize) -> anyhow::Result<f64> {
    let queues: Api<Queue> = Api::all(bed.client.clone());
    let mut spec = QueueSpec { over_quota_weight: 1, reclaimable: true, ..QueueSpec::default() };
    spec.deserved.insert(GPU.into(), Quantity(pods.to_string()));
    queues.create(&PostParams::default(), &Queue::new("bench", spec)).await?;
    let groups: Api<PodGroup> = Api::namespaced(bed.client.clone(), NS);
    let gangs = pods as u32 / args.per_gang;
    futures::stream::iter(0..gangs)
        .map(|g| {
            let groups = groups.clone();
            async move {
                let spec =
                    PodGroupSpec { min_member: args.per_gang, queue: Some("bench".into()), ..PodGroupSpec::default() };
                groups.create(&PostParams::default(), &PodGroup::new(&format!("gang-{g}"), spec)).await.map(|_| ())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    let mut members = Vec::with_capacity(pods);
    for g in 0..gangs {
        for i in 0..args.per_gang {
            members.push(pod(&format!("gang-{g}-{i}"), "drover", Some(&format!("gang-{g}"))));
        }
    }
    create_all(&Api::namespaced(bed.client.clone(), NS), members).await?;
    let log = std::fs::File::create(bed.log_path("drover-scheduler.log"))?;
    let bin = std::env::current_exe()?.parent().and_then(|d| d.parent()).context("target folder")?.join("drover");
    let (secs, child) = time_to_bind(&bed.client, pods, || {
        Ok(Some(
            Command::new(&bin)
                .args(["scheduler", "--leader-elect", "false", "--metrics-addr", "127.0.0.1:0"])
                .args(&args.drover_args)
                .env("KUBECONFIG", &bed.kubeconfig)
                .env("RUST_LOG", "info,drover_k8s::scheduler=debug")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?,
        ))
    })
    .await?;
    drop(child);
    println!("drover:         {pods} pods bound in {secs:.2} s = {:.0} pods/s", pods as f64 / secs);
    Ok(pods as f64 / secs)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let pods = (args.nodes * 8) as usize;
    println!("{pods} one-GPU pods per scheduler, each scheduler on a fresh control plane");
    let mut results = Vec::new();
    for side in ["kube-scheduler", "drover"] {
        if args.only.as_deref().is_some_and(|o| o != side) {
            continue;
        }
        let Some(mut bed) = bed(args.nodes).await? else { return Ok(()) };
        let rate = match side {
            "kube-scheduler" => kube_scheduler(&mut bed, pods).await?,
            _ => drover(&args, &mut bed, pods).await?,
        };
        results.push(rate);
        if args.keep {
            bed.server.plane_mut().keep_files();
        }
    }
    if let [kube, drover] = results[..] {
        println!("drover / kube-scheduler = {:.2}x", drover / kube);
    }
    Ok(())
}
