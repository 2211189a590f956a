//! The scheduler at scale on a real API server: 5,000 nodes, 50,000 pending pods in 5,000
//! gangs over 50 queues, a leader killed mid-run, and kube-scheduler on the same cluster.
//!
//! Drover first: a fresh control plane (drover-envtest) and a fake kubelet whose nodes keep
//! their Leases fresh and whose bound pods turn Running. The queues, PodGroups and pods are
//! created before any scheduler starts. Replica `a` of `drover scheduler` starts (leader
//! election on, cold caches); replica `b` starts once `a` has bound its first pod, as a
//! standby. When the bench's watch has seen a quarter of the bindings (it lags the API
//! server under this load: the kill lands mid-run), the Lease holder is killed with SIGKILL.
//! Binding times are the API server's own stamps (each pod's `PodScheduled` condition, whole
//! seconds, given as upper bounds). The bench reports the time from `a`'s start to the
//! first and the last binding, the binding rate up to the kill, the time from the kill to `b`
//! taking the Lease (the lease duration) and from then to `b`'s first binding, cycle
//! durations (p50/p99 of all cycles run, and of the steady cycles after the last binding, when
//! nothing new arrives: those skipped because they would repeat the last, and those run,
//! each counted), each replica's peak RSS, and whether any gang is left half bound or
//! any node holds more than its GPUs. For each scheduler it also reports the API server's
//! load per bound pod, from its own `/metrics`: write requests by resource (the kubelets'
//! Leases and Nodes left out), CPU time above its rate before the scheduler started, and the
//! time spent serving each kind of request. Then the same pods as plain pods for
//! kube-scheduler on a control plane and nodes of their own, started the same way (see the
//! throughput bench for why not the same one), and the ratio of the two binding rates.
//!
//! `cargo bench -p drover-e2e --bench scale` (about 15 minutes); `-- --nodes N --gangs G
//! --pods-per-gang K --queues Q` for other sizes, `-- --only drover|kube-scheduler`, `-- --keep`
//! to keep the logs, `-- --bind-concurrency N` for the schedulers' `--bind-concurrency`,
//! `-- --single` for one replica without a failover (rate and load from start to the last
//! binding).

mod support;

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use drover_api::crd::podgroup::{PodGroup, PodGroupSpec};
use drover_api::crd::queue::{Queue, QueueSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::{bed, create_all, next_binding, node_of, pod, pod_watch, Bed, Killed, GPU, NS};

/// How many cycles with nothing new (skipped, or run reusing the last conversion) the bench
/// times after the last binding.
const STEADY_CYCLES: usize = 20;
/// The longest wait for any one binding before the bench gives up.
const STALL: Duration = Duration::from_secs(300);
/// How long the API server's idle CPU is sampled before a scheduler starts.
const IDLE_SAMPLE: Duration = Duration::from_secs(10);

struct Args {
    nodes: u32,
    gangs: u32,
    per_gang: u32,
    queues: u32,
    only: Option<String>,
    keep: bool,
    /// `drover scheduler --bind-concurrency`, when given.
    bind_concurrency: Option<u32>,
    /// One replica and no failover: what the standby costs the API server.
    single: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        nodes: 5000,
        gangs: 5000,
        per_gang: 10,
        queues: 50,
        only: None,
        keep: false,
        bind_concurrency: None,
        single: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |flag: &str| -> anyhow::Result<u32> {
            it.next().with_context(|| format!("{flag} N"))?.parse().with_context(|| format!("{flag} N"))
        };
        match a.as_str() {
            "--nodes" => args.nodes = number("--nodes")?,
            "--gangs" => args.gangs = number("--gangs")?,
            "--pods-per-gang" => args.per_gang = number("--pods-per-gang")?,
            "--queues" => args.queues = number("--queues")?,
            "--only" => args.only = Some(it.next().context("--only drover|kube-scheduler")?),
            "--keep" => args.keep = true,
            "--single" => args.single = true,
            "--bind-concurrency" => args.bind_concurrency = Some(number("--bind-concurrency")?),
            "--bench" => {}
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

impl Args {
    fn pods(&self) -> usize {
        (self.gangs * self.per_gang) as usize
    }

    /// Pods that fit: whole gangs of one-GPU pods on the cluster's GPUs.
    fn bindable(&self) -> usize {
        let gangs = (self.nodes * 8 / self.per_gang).min(self.gangs);
        (gangs * self.per_gang) as usize
    }
}

/// One replica of `drover scheduler`.
struct Replica {
    identity: &'static str,
    process: Killed,
    log: std::path::PathBuf,
}

impl Replica {
    fn start(bed: &Bed, identity: &'static str, bind_concurrency: Option<u32>) -> anyhow::Result<Replica> {
        let log = bed.log_path(&format!("drover-{identity}.log"));
        let concurrency = bind_concurrency.map(|n| ["--bind-concurrency".to_string(), n.to_string()]);
        let process = Command::new(drover_e2e::binary("drover")?)
            .args(["scheduler", "--identity", identity, "--metrics-addr", "127.0.0.1:0"])
            .args(concurrency.iter().flatten())
            .env("KUBECONFIG", &bed.kubeconfig)
            .env("RUST_LOG", "info,drover_k8s::scheduler=debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        Ok(Replica { identity, process: Killed(process), log })
    }

    /// Peak resident memory so far, in MiB.
    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.0.id())).unwrap_or_default();
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
        kib.unwrap_or(0.0) / 1024.0
    }
}

/// One cycle a replica logged: run, or skipped because it would have repeated the last.
struct Cycle {
    /// Microseconds: a run cycle's are logged in whole milliseconds.
    us: u64,
    /// For a run cycle, the cycles so far that reused an earlier cycle's conversion.
    reused: Option<u64>,
}

/// Each cycle a replica logged so far.
fn cycles(log: &std::path::Path) -> Vec<Cycle> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split_whitespace().find_map(|w| w.strip_prefix(name)).and_then(|v| v.parse().ok())
    };
    text.lines()
        .filter_map(|l| {
            if l.contains("cycle done") {
                Some(Cycle { us: field(l, "ms=")? * 1000, reused: Some(field(l, "reused=")?) })
            } else if l.contains("cycle skipped") {
                Some(Cycle { us: field(l, "us=")?, reused: None })
            } else {
                None
            }
        })
        .collect()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Count, p50, p99 and max of cycle times in microseconds, shown in milliseconds.
fn summary(cycles: &[u64]) -> String {
    let mut sorted = cycles.to_vec();
    sorted.sort_unstable();
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "{} cycles, p50 {} ms, p99 {} ms, max {} ms",
        sorted.len(),
        ms(percentile(&sorted, 0.5)),
        ms(percentile(&sorted, 0.99)),
        ms(sorted.last().copied().unwrap_or(0))
    )
}

/// The queues, groups and pods of the run: gang `g` in queue `g % queues`, each queue
/// deserving an equal part of the cluster's GPUs.
async fn create_workload(args: &Args, bed: &Bed) -> anyhow::Result<()> {
    let created = Instant::now();
    let queues: Api<Queue> = Api::all(bed.client.clone());
    let part = args.nodes * 8 / args.queues;
    let all = (0..args.queues)
        .map(|q| {
            let mut spec = QueueSpec { over_quota_weight: 1, reclaimable: true, ..QueueSpec::default() };
            spec.deserved.insert(GPU.into(), Quantity(part.to_string()));
            Queue::new(&format!("team-{q}"), spec)
        })
        .collect();
    create_all(&queues, all).await?;
    let groups = (0..args.gangs)
        .map(|g| {
            let queue = format!("team-{}", g % args.queues);
            let spec = PodGroupSpec { min_member: args.per_gang, queue: Some(queue), ..PodGroupSpec::default() };
            PodGroup::new(&format!("gang-{g}"), spec)
        })
        .collect();
    create_all(&Api::namespaced(bed.client.clone(), NS), groups).await?;
    let pods = (0..args.gangs)
        .flat_map(|g| {
            (0..args.per_gang).map(move |i| pod(&format!("gang-{g}-{i}"), "drover", Some(&format!("gang-{g}"))))
        })
        .collect();
    create_all(&Api::namespaced(bed.client.clone(), NS), pods).await?;
    println!(
        "{} queues, {} PodGroups and {} pods created in {:.1} s",
        args.queues,
        args.gangs,
        args.pods(),
        created.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the API server has served since it started: its write requests and the time spent
/// serving requests (watches left out: theirs is how long they stay open), both by verb and
/// resource, and the CPU it used.
struct ServerLoad {
    writes: BTreeMap<String, f64>,
    serving: BTreeMap<String, f64>,
    cpu_seconds: f64,
    at: Instant,
}

/// Reads [`ServerLoad`] from the API server's `/metrics` (`apiserver_request_total`,
/// `apiserver_request_duration_seconds_sum`, `process_cpu_seconds_total`). Leases and
/// Nodes are left out: they are the kubelets' traffic, the same whichever scheduler runs.
async fn server_load(bed: &Bed) -> anyhow::Result<ServerLoad> {
    let text = bed.client.request_text(http::Request::get("/metrics").body(Vec::new())?).await?;
    let mut load =
        ServerLoad { writes: BTreeMap::new(), serving: BTreeMap::new(), cpu_seconds: 0.0, at: Instant::now() };
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("process_cpu_seconds_total ") {
            load.cpu_seconds = v.trim().parse()?;
        }
        let Some((metric, rest)) = line.split_once('{') else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let label = |key: &str| {
            labels.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"')).unwrap_or("")
        };
        let (verb, resource) = (label("verb"), label("resource"));
        if matches!(resource, "leases" | "nodes") || verb == "WATCH" {
            continue;
        }
        let resource = match label("subresource") {
            "" => resource.to_string(),
            sub => format!("{resource}/{sub}"),
        };
        let (into, key) = match metric {
            "apiserver_request_total" if !matches!(verb, "GET" | "LIST" | "CONNECT") => (&mut load.writes, resource),
            "apiserver_request_duration_seconds_sum" => (&mut load.serving, format!("{verb} {resource}")),
            _ => continue,
        };
        *into.entry(key).or_default() += value.trim().parse::<f64>()?;
    }
    Ok(load)
}

/// The API server's load from `before` to now per bound pod, its CPU counted above `idle`
/// (cores used before the scheduler started): one line for people.
async fn load_per_pod(bed: &Bed, before: &ServerLoad, idle: f64, pods: usize) -> anyhow::Result<String> {
    let now = server_load(bed).await?;
    let pods = pods.max(1) as f64;
    let since = |now: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>| -> Vec<(String, f64)> {
        now.iter()
            .map(|(k, n)| (k.clone(), n - before.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, n)| *n > 0.0)
            .collect()
    };
    let writes = since(&now.writes, &before.writes);
    let total: f64 = writes.iter().map(|(_, n)| n).sum();
    let parts: Vec<String> =
        writes.iter().filter(|(_, n)| *n >= 1.0).map(|(k, n)| format!("{k} {:.2}", n / pods)).collect();
    let mut serving = since(&now.serving, &before.serving);
    serving.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<String> =
        serving.iter().take(6).map(|(k, secs)| format!("{k} {:.2} ms", secs * 1000.0 / pods)).collect();
    let busy = now.cpu_seconds - before.cpu_seconds - idle * now.at.duration_since(before.at).as_secs_f64();
    Ok(format!(
        "{:.2} writes per bound pod ({}); API server CPU above idle {:.1} ms per bound pod; time serving, \
         per bound pod, the most: {}",
        total / pods,
        parts.join(", "),
        busy.max(0.0) * 1000.0 / pods,
        top.join(", ")
    ))
}

/// The cores the API server uses with no scheduler running (the kubelets' Leases), over a
/// few seconds, and the load at the end of them.
async fn idle_load(bed: &Bed) -> anyhow::Result<(f64, ServerLoad)> {
    let first = server_load(bed).await?;
    tokio::time::sleep(IDLE_SAMPLE).await;
    let then = server_load(bed).await?;
    let idle = (then.cpu_seconds - first.cpu_seconds) / then.at.duration_since(first.at).as_secs_f64();
    Ok((idle, then))
}

/// The Lease holder's identity, if any.
async fn holder(bed: &Bed) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(bed.client.clone(), "drover-system");
    leases.get_opt("drover-scheduler").await.ok().flatten()?.spec?.holder_identity
}

/// What the API server shows at the end.
struct Books {
    /// Groups with some but not all of their pods bound.
    half: Vec<String>,
    /// Nodes holding more one-GPU pods than their 8 GPUs.
    over: Vec<String>,
    /// When the API server accepted each binding (`PodScheduled`, whole seconds), sorted.
    scheduled: Vec<Timestamp>,
}

/// An error naming every gang half bound and every node overcommitted, if any is.
fn balanced(half: &[String], over: &[String]) -> anyhow::Result<()> {
    if !half.is_empty() || !over.is_empty() {
        bail!(
            "{} gangs half bound: {}; {} nodes overcommitted: {}",
            half.len(),
            half.join(", "),
            over.len(),
            over.join(", ")
        );
    }
    Ok(())
}

async fn books(args: &Args, bed: &Bed) -> anyhow::Result<Books> {
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), NS);
    let mut bound: BTreeMap<String, u32> = BTreeMap::new();
    let mut on_node: BTreeMap<String, u32> = BTreeMap::new();
    let mut scheduled = Vec::new();
    for p in pods.list(&ListParams::default()).await?.items {
        let group = p.metadata.annotations.as_ref().and_then(|a| a.get("scheduling.drover.dev/pod-group"));
        let count = bound.entry(group.cloned().unwrap_or_default()).or_default();
        if let Some(node) = node_of(&p) {
            *count += 1;
            *on_node.entry(node.to_string()).or_default() += 1;
        }
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        let at = conditions.into_iter().flatten().find(|c| c.type_ == "PodScheduled" && c.status == "True");
        scheduled.extend(at.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0));
    }
    scheduled.sort();
    Ok(Books {
        half: bound
            .into_iter()
            .filter(|(_, n)| *n > 0 && *n < args.per_gang)
            .map(|(g, n)| format!("{g} ({n})"))
            .collect(),
        over: on_node.into_iter().filter(|(_, n)| *n > 8).map(|(node, n)| format!("{node} ({n} GPUs)")).collect(),
        scheduled,
    })
}

/// Seconds from `from` to the end of the whole second `t` falls in: an upper bound of the
/// time to an event the API server stamped `t`.
fn until_end_of(t: Timestamp, from: Timestamp) -> f64 {
    t.duration_since(from).as_secs_f64() + 1.0
}

/// Drover's binding rate before the kill, in pods/s.
async fn drover(args: &Args, bed: &Bed) -> anyhow::Result<f64> {
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "drover-system"}}))?)
        .await?;
    create_workload(args, bed).await?;
    let bindable = args.bindable();
    // The bench's own watch lags the API server under this load, so the kill is triggered
    // early by what it has seen; the figures come from the API server's own times.
    let kill_at = bindable / 4;
    let mut stream = pod_watch(&bed.client).await?;
    let (idle, load_before) = idle_load(bed).await?;
    let start = Timestamp::now();
    let mut replicas = vec![Replica::start(bed, "a", args.bind_concurrency)?];
    let mut bound: HashSet<String> = HashSet::new();
    let mut standby = false;
    let (mut victim_rss, mut dead_log, mut killed) = (0.0, std::path::PathBuf::new(), None);
    while bound.len() < bindable {
        next_binding(&mut stream, &mut bound, STALL).await?;
        if !standby && !args.single {
            replicas.push(Replica::start(bed, "b", args.bind_concurrency)?);
            standby = true;
        }
        if killed.is_none() && bound.len() >= kill_at && !args.single {
            let leader = holder(bed).await.context("no Lease holder mid-run")?;
            let index = replicas.iter().position(|r| r.identity == leader).context("the holder is no replica")?;
            let victim = replicas.remove(index);
            victim_rss = victim.peak_rss_mib();
            drop(victim.process);
            dead_log = victim.log;
            killed = Some((Timestamp::now(), leader));
        }
    }
    if args.single {
        return single_replica(args, bed, start, (idle, &load_before)).await;
    }
    let Some((kill, dead)) = killed else { bail!("the run ended before the leader was killed") };
    let waited = Instant::now();
    while holder(bed).await.is_none_or(|h| h == dead) {
        if waited.elapsed() > STALL {
            bail!("nobody took the Lease over");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let leases: Api<Lease> = Api::namespaced(bed.client.clone(), "drover-system");
    let lease = leases.get("drover-scheduler").await?.spec.unwrap_or_default();
    let acquired = lease.acquire_time.context("the Lease has no acquireTime")?.0;
    let survivor = &replicas[0];
    // Steady: cycles with nothing new, which are skipped when they would repeat the last, or
    // else reuse the last conversion (the first cycles after the last binding still write
    // statuses and mark waiting pods).
    let cycles_before = cycles(&survivor.log).len();
    let steady_from = Instant::now();
    let (skipped, run, settling) = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = cycles(&survivor.log).split_off(cycles_before.saturating_sub(1));
        let skipped: Vec<u64> = after.iter().filter(|c| c.reused.is_none()).map(|c| c.us).collect();
        let run_cycles: Vec<&Cycle> = after.iter().filter(|c| c.reused.is_some()).collect();
        let run: Vec<u64> = run_cycles.windows(2).filter(|w| w[1].reused > w[0].reused).map(|w| w[1].us).collect();
        if skipped.len() + run.len() >= STEADY_CYCLES || steady_from.elapsed() > 2 * STALL {
            break (skipped, run, after.len());
        }
    };
    let steady: Vec<u64> = skipped.iter().chain(&run).copied().collect();
    let survivor_cycles = cycles(&survivor.log);
    let dead_cycles = cycles(&dead_log);
    let logged = || dead_cycles.iter().chain(&survivor_cycles);
    let all: Vec<u64> = logged().filter(|c| c.reused.is_some()).map(|c| c.us).collect();
    let all_skipped = logged().filter(|c| c.reused.is_none()).count();
    let load = load_per_pod(bed, &load_before, idle, bindable).await?;
    let Books { half, over, scheduled } = books(args, bed).await?;
    let (Some(&first), Some(&last)) = (scheduled.first(), scheduled.last()) else { bail!("nothing bound") };
    let before_kill = scheduled.iter().filter(|t| **t < kill).count();
    let rate = before_kill as f64 / kill.duration_since(start).as_secs_f64();
    // The new leader's first binding: the first stamped in or after the second it took over.
    let after = scheduled.iter().find(|t| t.as_second() >= acquired.as_second());
    println!("drover (times by the API server's binding stamps, to the whole second):");
    println!("drover: first binding within {:.0} s of the start (cold caches)", until_end_of(first, start));
    println!(
        "drover: {before_kill} pods bound in the {:.1} s before the kill = {rate:.0} pods/s",
        kill.duration_since(start).as_secs_f64()
    );
    let taken = acquired.duration_since(kill).as_secs_f64();
    match after {
        Some(&t) => println!(
            "drover: failover: Lease taken {taken:.1} s after the kill (lease duration), first binding within {:.0} s after that",
            until_end_of(t, acquired)
        ),
        None => println!("drover: failover: Lease taken {taken:.1} s after the kill; nothing was left to bind"),
    }
    println!("drover: last of {bindable} bindings within {:.0} s of the start", until_end_of(last, start));
    println!("drover: all cycles run: {}; {all_skipped} skipped", summary(&all));
    println!(
        "drover: steady cycles (nothing new; reached {settling} cycles and {:.0} s after the last binding): {}",
        steady_from.elapsed().as_secs_f64(),
        summary(&steady)
    );
    println!("drover: of which skipped (they would repeat the last): {}", summary(&skipped));
    println!("drover: of which run, reusing the last conversion: {}", summary(&run));
    println!("drover: peak RSS: killed leader {victim_rss:.0} MiB, survivor {:.0} MiB", survivor.peak_rss_mib());
    println!("drover: from the start to the last steady cycle: {load}");
    balanced(&half, &over)?;
    println!("drover: no gang half bound, no node overcommitted");
    Ok(rate)
}

/// The figures of a run with one replica and no failover (`--single`): the binding rate from
/// the start to the last binding, and the API server's load per bound pod.
async fn single_replica(
    args: &Args,
    bed: &Bed,
    start: Timestamp,
    (idle, load_before): (f64, &ServerLoad),
) -> anyhow::Result<f64> {
    let bindable = args.bindable();
    let load = load_per_pod(bed, load_before, idle, bindable).await?;
    let Books { half, over, scheduled } = books(args, bed).await?;
    let Some(&last) = scheduled.last() else { bail!("nothing bound") };
    let rate = scheduled.len() as f64 / until_end_of(last, start);
    println!(
        "drover, one replica: {} pods bound within {:.0} s = {rate:.0} pods/s",
        scheduled.len(),
        until_end_of(last, start)
    );
    println!("drover, one replica: from the start to the last binding: {load}");
    balanced(&half, &over)?;
    println!("drover, one replica: no gang half bound, no node overcommitted");
    Ok(rate)
}

/// kube-scheduler's binding rate: the same pods as plain pods, its client limits raised.
async fn kube_scheduler(args: &Args, bed: &mut Bed) -> anyhow::Result<f64> {
    let plain = (0..args.pods()).map(|i| pod(&format!("plain-{i}"), "default-scheduler", None)).collect();
    create_all(&Api::namespaced(bed.client.clone(), NS), plain).await?;
    let bindable = args.bindable();
    let mut stream = pod_watch(&bed.client).await?;
    let (idle, load_before) = idle_load(bed).await?;
    let start = Timestamp::now();
    bed.server.plane_mut().start_kube_scheduler(&["--kube-api-qps=5000".into(), "--kube-api-burst=5000".into()])?;
    let mut bound: HashSet<String> = HashSet::new();
    while bound.len() < bindable {
        next_binding(&mut stream, &mut bound, STALL).await?;
    }
    bed.server.plane_mut().stop_kube_scheduler();
    let load = load_per_pod(bed, &load_before, idle, bindable).await?;
    let Some(&last) = books(args, bed).await?.scheduled.last() else { bail!("nothing bound") };
    let secs = until_end_of(last, start);
    let rate = bindable as f64 / secs;
    println!("kube-scheduler: {bindable} pods bound within {secs:.0} s (API server stamps) = {rate:.0} pods/s");
    println!("kube-scheduler: from the start to the last binding: {load}");
    Ok(rate)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    println!(
        "{} nodes x 8 GPUs, {} pods in {} gangs of {} over {} queues ({} fit)",
        args.nodes,
        args.pods(),
        args.gangs,
        args.per_gang,
        args.queues,
        args.bindable()
    );
    let mut rates = BTreeMap::new();
    for side in ["drover", "kube-scheduler"] {
        if args.only.as_deref().is_some_and(|o| o != side) {
            continue;
        }
        let Some(mut bed) = bed(args.nodes).await? else { return Ok(()) };
        let rate = match side {
            "drover" => drover(&args, &bed).await,
            _ => kube_scheduler(&args, &mut bed).await,
        };
        if args.keep {
            println!("logs kept in {}", bed.server.plane().dir().display());
            bed.server.plane_mut().keep_files();
        }
        rates.insert(side, rate?);
    }
    if let (Some(d), Some(k)) = (rates.get("drover"), rates.get("kube-scheduler")) {
        println!("drover / kube-scheduler = {:.2}x", d / k);
    }
    Ok(())
}
