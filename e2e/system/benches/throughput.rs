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

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use drover_api::crd::podgroup::{PodGroup, PodGroupSpec};
use drover_api::crd::queue::{Queue, QueueSpec};
use drover_envtest::{Credentials, Server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use serde_json::json;

const GPU: &str = "nvidia.com/gpu";
const NS: &str = "default";

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

fn pod(name: &str, scheduler: &str, group: Option<&str>) -> Pod {
    let annotations = group.map(|g| json!({"scheduling.drover.dev/pod-group": g})).unwrap_or(json!({}));
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "app",
            "resources": {"requests": {GPU: "1", "cpu": "100m"}, "limits": {GPU: "1"}}}]}
    }))
    .expect("pod json")
}

async fn create_all(client: &Client, pods: Vec<Pod>) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    futures::stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await.map(|_| ()) }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Starts `start` and returns the seconds until `count` pods are bound, watching them.
async fn time_to_bind(
    client: &Client,
    count: usize,
    start: impl FnOnce() -> anyhow::Result<Option<Child>>,
) -> anyhow::Result<(f64, Option<Killed>)> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut bound: HashSet<String> = HashSet::new();
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    // Consume the initial list before starting the scheduler.
    while let Some(event) = stream.try_next().await? {
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    let started = Instant::now();
    let child = start()?.map(Killed);
    while bound.len() < count {
        let event = tokio::time::timeout(Duration::from_secs(600), stream.try_next())
            .await
            .context("no binding for 10 minutes")??;
        if let Some(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event {
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.insert(p.metadata.name.unwrap_or_default());
            }
        }
    }
    Ok((started.elapsed().as_secs_f64(), child))
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh control plane with the fake kubelet's nodes ready: each scheduler is measured on
/// one of its own, so neither inherits the other's deleted pods, Events and etcd history.
struct Bed {
    server: Server,
    client: Client,
    kubeconfig: std::path::PathBuf,
    kubelet: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.kubelet.abort();
    }
}

async fn bed(args: &Args) -> anyhow::Result<Option<Bed>> {
    let Some(server) = Server::start().await else { return Ok(None) };
    let plane = server.plane();
    let client = plane.direct_client(&Credentials::Token(plane.admin_token())).await?;
    let kubeconfig = plane.admin_kubeconfig();
    drover_envtest::install_crds(&client, &drover_api::crd::all()).await?;
    let config = drover_kubelet::KubeletConfig {
        nodes: args.nodes,
        name_prefix: "node-".into(),
        allocatable: [("cpu", "64"), ("memory", "512Gi"), (GPU, "8"), ("pods", "110")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        labels: Default::default(),
    };
    let kubelet_client = client.clone();
    let kubelet =
        tokio::spawn(async move { drover_kubelet::run(kubelet_client, config, std::future::pending()).await });
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = Instant::now();
    loop {
        let list = nodes.list(&ListParams::default()).await?.items;
        let untainted = list
            .iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none_or(|t| t.is_empty()))
            .count();
        if untainted == args.nodes as usize {
            break;
        }
        if ready.elapsed() > Duration::from_secs(300) {
            bail!("only {untainted} of {} nodes ready after 5 minutes", args.nodes);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("{} nodes x 8 GPUs ready in {:.1} s", args.nodes, ready.elapsed().as_secs_f64());
    Ok(Some(Bed { server, client, kubeconfig, kubelet }))
}

/// kube-scheduler's pods/s: the pods as plain pods, its client limits raised.
async fn kube_scheduler(bed: &mut Bed, pods: usize) -> anyhow::Result<f64> {
    let plain = (0..pods).map(|i| pod(&format!("plain-{i}"), "default-scheduler", None)).collect();
    create_all(&bed.client, plain).await?;
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
    create_all(&bed.client, members).await?;
    let log = plane_log(&bed.server, "drover-scheduler.log")?;
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
        let Some(mut bed) = bed(&args).await? else { return Ok(()) };
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

fn plane_log(server: &Server, name: &str) -> anyhow::Result<std::fs::File> {
    Ok(std::fs::File::create(server.plane().dir().join(name))?)
}
