//! One tenant floods, another team measures: team A keeps [`Flood::waiting`] one-GPU groups
//! waiting behind its queue's limit (each a forecast the scheduler could rewrite), team B starts
//! a 4-pod gang every few seconds within its deserved quota, and the run counts what the API
//! server sees: PodGroup status writes, Events, and B's time from creating a gang to its last
//! binding. First at rest (A's running groups never end), then under churn (they end, A's
//! waiting groups start, run 20-40 s, teach the queue their run times and are replaced by new
//! ones, so that as many wait). Shared by the bench `benches/flood.rs` and the test
//! `tests/flood.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use drover_api::crd::podgroup::{PodGroup, PodGroupPhase, PodGroupStatus};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use serde_json::{json, Value};

use crate::{eventually_result, Cluster};

/// Team A's running groups (its queue's limit, in GPUs).
pub const A_RUNNING: u32 = 48;
/// Team B's deserved quota, in GPUs: the rest of a cluster of 8 nodes of 8 GPUs.
pub const B_DESERVED: u32 = 16;
/// The nodes the flood needs.
pub const NODES: u32 = 8;

/// What one phase of the run saw.
#[derive(Debug, Clone, Default)]
pub struct PhaseReport {
    /// Seconds measured.
    pub seconds: f64,
    /// Every PodGroup write in team A's namespace.
    pub a_group_writes: u64,
    /// Those on groups that waited before and after the write (no phase change, no bind
    /// intent): what the waiting groups cost.
    pub a_waiting_writes: u64,
    /// Events Drover emitted (both namespaces).
    pub drover_events: u64,
    /// Team B's gangs, seconds from creating the group to its last pod bound, sorted.
    pub b_latencies: Vec<f64>,
    /// What the waiting groups' writes changed (status fields, `forecast.*` and conditions by
    /// type), most frequent first.
    pub waiting_changes: Vec<(String, u64)>,
    /// Drover's Events by kind and reason, most frequent first.
    pub event_reasons: Vec<(String, u64)>,
}

impl PhaseReport {
    /// A quantile (0..=1) of B's latencies, in seconds.
    pub fn b_latency(&self, q: f64) -> f64 {
        let n = self.b_latencies.len();
        if n == 0 {
            return f64::NAN;
        }
        self.b_latencies[((n - 1) as f64 * q).round() as usize]
    }

    /// Waiting groups' status writes a second.
    pub fn waiting_writes_per_second(&self) -> f64 {
        self.a_waiting_writes as f64 / self.seconds
    }

    /// One line for people, then what the waiting groups' writes changed and the Events.
    pub fn line(&self, name: &str) -> String {
        let top = |list: &[(String, u64)]| {
            list.iter().take(6).map(|(what, n)| format!("{what} {n}")).collect::<Vec<_>>().join(", ")
        };
        let changes = top(&self.waiting_changes);
        let events = top(&self.event_reasons);
        format!(
            "{name:6} {:5.0} s: team A PodGroup writes {:6.2}/s (waiting groups {:5.2}/s), Drover Events {:5.2}/s, \
             team B gang bound in median {:.0} ms, p90 {:.0} ms ({} gangs)\n       waiting groups' writes changed: \
             {changes}\n       Events: {events}",
            self.seconds,
            self.a_group_writes as f64 / self.seconds,
            self.waiting_writes_per_second(),
            self.drover_events as f64 / self.seconds,
            self.b_latency(0.5) * 1000.0,
            self.b_latency(0.9) * 1000.0,
            self.b_latencies.len()
        )
    }
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct Report {
    pub rest: PhaseReport,
    pub churn: PhaseReport,
    /// Team A's runs that completed during the churn.
    pub completed: u64,
    /// Events Drover emitted more than once for the same object, reason and message.
    pub repeated_events: Vec<String>,
}

/// The run's shape.
#[derive(Debug, Clone)]
pub struct Flood {
    /// Team A's groups kept waiting.
    pub waiting: u32,
    /// Seconds at rest.
    pub rest: Duration,
    /// Seconds under churn (after A's first runs end).
    pub churn: Duration,
    /// Seconds between team B's gangs.
    pub b_every: Duration,
}

/// Counters the watches fill.
#[derive(Default)]
struct Counts {
    a_group_writes: u64,
    a_waiting_writes: u64,
    drover_events: u64,
    waiting_changes: HashMap<String, u64>,
    event_reasons: HashMap<String, u64>,
    events: HashMap<(String, String, String), u32>,
    completed: u64,
}

/// What differs between two statuses: top-level fields, `forecast.*` fields, and conditions
/// by type.
fn changed(before: Option<&PodGroupStatus>, after: Option<&PodGroupStatus>) -> String {
    let value = |s: Option<&PodGroupStatus>| serde_json::to_value(s).unwrap_or_default();
    let (b, a) = (value(before), value(after));
    let empty = serde_json::Map::new();
    let (b, a) = (b.as_object().unwrap_or(&empty), a.as_object().unwrap_or(&empty));
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        let (x, y) = (b.get(k), a.get(k));
        if x == y {
            continue;
        }
        match k.as_str() {
            "forecast" => {
                let fields = |v: Option<&Value>| v.and_then(Value::as_object).cloned().unwrap_or_default();
                let (fx, fy) = (fields(x), fields(y));
                let mut names: Vec<&String> = fx.keys().chain(fy.keys()).filter(|n| fx.get(*n) != fy.get(*n)).collect();
                names.sort();
                names.dedup();
                out.extend(names.into_iter().map(|n| format!("forecast.{n}")));
            }
            "conditions" => {
                let types =
                    |v: Option<&Value>| -> Vec<Value> { v.and_then(Value::as_array).cloned().unwrap_or_default() };
                let (cx, cy) = (types(x), types(y));
                for c in &cy {
                    let t = c["type"].as_str().unwrap_or_default();
                    let old = cx.iter().find(|o| o["type"] == c["type"]);
                    if old.is_none_or(|o| o["message"] != c["message"] || o["status"] != c["status"]) {
                        let was = old.and_then(|o| o["message"].as_str()).unwrap_or_default();
                        let now = c["message"].as_str().unwrap_or_default();
                        out.push(format!("condition {t} ({was:?} -> {now:?})"));
                    }
                }
            }
            other => out.push(other.to_string()),
        }
    }
    if out.is_empty() {
        "metadata only".into()
    } else {
        out.join("+")
    }
}

fn sorted(map: &HashMap<String, u64>, before: &HashMap<String, u64>) -> Vec<(String, u64)> {
    let mut list: Vec<(String, u64)> = map
        .iter()
        .map(|(k, &n)| (k.clone(), n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    list
}

fn waiting(status: Option<&PodGroupStatus>) -> bool {
    status
        .is_some_and(|s| matches!(s.phase, PodGroupPhase::Pending | PodGroupPhase::Inqueue) && s.bind_intent.is_none())
}

fn group(name: &str, queue: &str, min: u32) -> Value {
    json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name}, "spec": {"minMember": min, "queue": queue}})
}

fn pod(name: &str, group: &str, seconds: Option<u32>) -> Value {
    let mut annotations = json!({"scheduling.drover.dev/pod-group": group});
    if let Some(s) = seconds {
        annotations["sim.drover.dev/duration"] = json!(s.to_string());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer", "resources": {
            "requests": {"nvidia.com/gpu": "1", "cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}})
}

async fn create<K>(api: &Api<K>, manifest: Value) -> anyhow::Result<()>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize,
{
    let object: K = serde_json::from_value(manifest)?;
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

/// Creates one of team A's groups with its pod, running `seconds` (forever: `None`).
async fn a_group(client: &Client, name: String, seconds: Option<u32>) -> anyhow::Result<()> {
    create(&Api::<PodGroup>::namespaced(client.clone(), "team-a"), group(&name, "team-a", 1)).await?;
    create(&Api::<Pod>::namespaced(client.clone(), "team-a"), pod(&name, &name, seconds)).await
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// A run time between 20 and 40 s, spread by the group's number.
fn run_seconds(i: u32) -> u32 {
    20 + (i * 7) % 21
}

impl Flood {
    /// Runs the flood on `cluster` (Drover's processes already started, its CRDs and charge
    /// guard installed, [`NODES`] nodes).
    pub async fn run(&self, cluster: &Cluster) -> anyhow::Result<Report> {
        let client = cluster.client.clone();
        setup(&client).await?;
        let counts = Arc::new(Mutex::new(Counts::default()));
        let watches = [
            tokio::spawn(count_group_writes(client.clone(), counts.clone())),
            tokio::spawn(count_events(client.clone(), "team-a", counts.clone())),
            tokio::spawn(count_events(client.clone(), "team-b", counts.clone())),
        ];
        futures::stream::iter(0..A_RUNNING)
            .map(|i| a_group(&client, format!("blocker-{i}"), None))
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
        eventually_result(120, "team A's running groups bound", || async {
            let list = pods.list(&Default::default()).await.ok()?;
            let bound = list.items.iter().filter(|p| node_of(p).is_some()).count();
            (bound == A_RUNNING as usize).then_some(())
        })
        .await?;
        futures::stream::iter(0..self.waiting)
            .map(|i| a_group(&client, format!("wait-{i}"), Some(run_seconds(i))))
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
        // Every waiting group's first status, before measuring.
        let groups: Api<PodGroup> = Api::namespaced(client.clone(), "team-a");
        eventually_result(120, "team A's waiting groups have their first status", || async {
            let list = groups.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|g| g.status.as_ref().is_some_and(|s| s.forecast.is_some() || !waiting(Some(s))))
                .then_some(())
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let rest = self.phase(&client, &counts, self.rest, "rest").await?;
        let refill = tokio::spawn(refill(client.clone(), counts.clone(), self.waiting));
        futures::stream::iter(0..A_RUNNING)
            .map(|i| {
                let pods = pods.clone();
                async move { pods.delete(&format!("blocker-{i}"), &DeleteParams::default()).await.map(|_| ()) }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
        let churn = self.phase(&client, &counts, self.churn, "churn").await?;
        refill.abort();
        for w in watches {
            w.abort();
        }
        let counts = counts.lock().expect("counts");
        let repeated_events = counts
            .events
            .iter()
            .filter(|(_, &n)| n > 1)
            .map(|((object, reason, message), n)| format!("{n}x {object} {reason}: {message}"))
            .collect();
        Ok(Report { rest, churn, completed: counts.completed, repeated_events })
    }

    /// Measures for `length`, team B starting a gang every `b_every`.
    async fn phase(
        &self,
        client: &Client,
        counts: &Arc<Mutex<Counts>>,
        length: Duration,
        name: &str,
    ) -> anyhow::Result<PhaseReport> {
        let before = snapshot(counts);
        let started = Instant::now();
        let mut gangs = Vec::new();
        let mut n = 0;
        while started.elapsed() < length {
            let gang = format!("{name}-{n}");
            n += 1;
            gangs.push(tokio::spawn(b_gang(client.clone(), gang)));
            tokio::time::sleep(self.b_every).await;
        }
        let mut b_latencies = Vec::new();
        for g in gangs {
            b_latencies.push(g.await.context("team B's gang")??);
        }
        let seconds = started.elapsed().as_secs_f64();
        let after = snapshot(counts);
        b_latencies.sort_by(f64::total_cmp);
        Ok(PhaseReport {
            seconds,
            a_group_writes: after.group_writes - before.group_writes,
            a_waiting_writes: after.waiting_writes - before.waiting_writes,
            drover_events: after.events - before.events,
            b_latencies,
            waiting_changes: sorted(&after.changes, &before.changes),
            event_reasons: sorted(&after.reasons, &before.reasons),
        })
    }
}

/// The counters at one moment.
struct Tally {
    group_writes: u64,
    waiting_writes: u64,
    events: u64,
    changes: HashMap<String, u64>,
    reasons: HashMap<String, u64>,
}

fn snapshot(counts: &Arc<Mutex<Counts>>) -> Tally {
    let c = counts.lock().expect("counts");
    Tally {
        group_writes: c.a_group_writes,
        waiting_writes: c.a_waiting_writes,
        events: c.drover_events,
        changes: c.waiting_changes.clone(),
        reasons: c.event_reasons.clone(),
    }
}

/// The namespaces, their default ServiceAccounts and the two queues.
async fn setup(client: &Client) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["team-a", "team-b"] {
        create(&namespaces, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        eventually_result(30, "the namespace's default ServiceAccount", || async {
            accounts.get_opt("default").await.ok()?.map(|_| ())
        })
        .await?;
    }
    let queues: Api<drover_api::crd::queue::Queue> = Api::all(client.clone());
    let queue = |name: &str, deserved: u32, limit: Option<u32>| {
        let mut spec = json!({"deserved": {"nvidia.com/gpu": deserved.to_string()},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}});
        if let Some(l) = limit {
            spec["limit"] = json!({"nvidia.com/gpu": l.to_string()});
        }
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})
    };
    create(&queues, queue("team-a", A_RUNNING, Some(A_RUNNING))).await?;
    create(&queues, queue("team-b", B_DESERVED, None)).await
}

/// Counts team A's PodGroup writes, and those on waiting groups.
async fn count_group_writes(client: Client, counts: Arc<Mutex<Counts>>) -> anyhow::Result<()> {
    let api: Api<PodGroup> = Api::namespaced(client, "team-a");
    let mut last: HashMap<String, PodGroup> = HashMap::new();
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.try_next().await? {
        let (watcher::Event::Apply(g) | watcher::Event::InitApply(g)) = event else { continue };
        let name = g.metadata.name.clone().unwrap_or_default();
        if let Some(before) = last.get(&name) {
            if before.metadata.resource_version != g.metadata.resource_version {
                let mut c = counts.lock().expect("counts");
                c.a_group_writes += 1;
                let same_phase = before.status.as_ref().map(|s| s.phase) == g.status.as_ref().map(|s| s.phase);
                if same_phase && waiting(before.status.as_ref()) && waiting(g.status.as_ref()) {
                    c.a_waiting_writes += 1;
                    *c.waiting_changes.entry(changed(before.status.as_ref(), g.status.as_ref())).or_default() += 1;
                }
            }
        }
        last.insert(name, g);
    }
    Ok(())
}

/// Counts the Events Drover emits in `namespace`, by object, reason and message.
async fn count_events(client: Client, namespace: &str, counts: Arc<Mutex<Counts>>) -> anyhow::Result<()> {
    let api: Api<Event> = Api::namespaced(client, namespace);
    let mut seen = std::collections::HashSet::new();
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.try_next().await? {
        let (watcher::Event::Apply(e) | watcher::Event::InitApply(e)) = event else { continue };
        let component = e.reporting_component.clone().or(e.source.as_ref().and_then(|s| s.component.clone()));
        if !component.is_some_and(|c| c.starts_with("drover")) || !seen.insert(e.metadata.name.clone()) {
            continue;
        }
        let object = format!(
            "{}/{}",
            e.involved_object.kind.clone().unwrap_or_default(),
            e.involved_object.name.clone().unwrap_or_default()
        );
        let key = (object, e.reason.clone().unwrap_or_default(), e.message.clone().unwrap_or_default());
        let mut c = counts.lock().expect("counts");
        c.drover_events += 1;
        let kind = e.involved_object.kind.clone().unwrap_or_default();
        *c.event_reasons.entry(format!("{kind} {}", e.reason.clone().unwrap_or_default())).or_default() += 1;
        *c.events.entry(key).or_default() += 1;
    }
    Ok(())
}

/// Team A's tenant: a new waiting group for each of its runs that completes.
async fn refill(client: Client, counts: Arc<Mutex<Counts>>, from: u32) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    let mut done = std::collections::HashSet::new();
    let mut next = from;
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.try_next().await? {
        let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else { continue };
        let succeeded = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
        if succeeded && done.insert(p.metadata.name.clone()) {
            counts.lock().expect("counts").completed += 1;
            a_group(&client, format!("wait-{next}"), Some(run_seconds(next))).await?;
            next += 1;
        }
    }
    Ok(())
}

/// Creates team B's gang `name` (4 pods of one GPU, running 3 s) and returns the seconds
/// until its last pod is bound.
async fn b_gang(client: Client, name: String) -> anyhow::Result<f64> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-b");
    let mut stream = watcher(pods.clone(), watcher::Config::default().labels(&format!("gang={name}"))).boxed();
    let started = Instant::now();
    create(&Api::<PodGroup>::namespaced(client.clone(), "team-b"), group(&name, "team-b", 4)).await?;
    for i in 0..4 {
        let mut manifest = pod(&format!("{name}-{i}"), &name, Some(3));
        manifest["metadata"]["labels"] = json!({"gang": name});
        create(&pods, manifest).await?;
    }
    let mut bound = std::collections::HashSet::new();
    while bound.len() < 4 {
        let event = tokio::time::timeout(Duration::from_secs(120), stream.try_next())
            .await
            .with_context(|| format!("team B's gang {name} not bound in 120 s"))??;
        let Some(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else { continue };
        if node_of(&p).is_some() {
            bound.insert(p.metadata.name.clone());
        }
    }
    Ok(started.elapsed().as_secs_f64())
}
