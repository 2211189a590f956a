//! Topology status: what each Topology covers on the cluster's nodes (nodes, domains per
//! level, nodes excluded for lacking a level's label) and whether jobs can be placed by it
//! (`Ready`). Nodes are read with `drover_api::topology::domain_path`, as the scheduler reads
//! them, so the counts here are the domains the scheduler places gangs in.
//!
//! `Ready` is `False` with reason `NoLevels`, `ReservedLevelName`, `EmptyNodeLabel`,
//! `DuplicateLevel` or `DuplicateNodeLabel` (the scheduler leaves such a topology out:
//! [`TopologySpec::refusal`]) or `NoLabelledNodes` (no node has the top level's label, so
//! every gang requiring a level waits), with a Warning Event; `True` (reason `Ready`)
//! otherwise. A request naming a missing topology or level is reported by the scheduler on
//! the PodGroup (and mirrored into its Job), where it decides.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::conditions;
use drover_api::crd::topology::{LevelStatus, Topology, TopologySpec, TopologyStatus, READY};
use drover_api::topology::domain_path;
use drover_kubeutil::events::{self, EventType};
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{trigger_with, Action};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::queues::runner::{changes, digest, drive, ready, shutdown_signal, Context, Retries, Triggers};
use crate::queues::Error;

const CONTROLLER: &str = "drover-topology-status";
const RESYNC: Duration = Duration::from_secs(300);

/// Runs the Topology status controller until `shutdown` resolves: every Topology's status
/// follows its spec and the nodes' labels, written (a merge patch of the status subresource
/// carrying the resourceVersion it read) only when it changed.
pub async fn run_topology_status(
    client: Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shutdown = shutdown_signal(shutdown);
    let (topologies, writer) = reflector::store::<Topology>();
    let topology_events = reflector::reflector(
        writer,
        watcher(Api::<Topology>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let (nodes, node_writer) = reflector::store::<Node>();
    let node_events = reflector::reflector(
        node_writer,
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default()).backoff(watch_backoff()),
    );
    let all = topologies.clone();
    let triggers: Triggers<Topology> = vec![
        trigger_with(changes(topology_events, topology_key), |t: Topology| [ObjectRef::from_obj(&t)]).boxed(),
        // A node's labels can change any topology's domains.
        trigger_with(changes(node_events, node_key), move |_: Node| {
            all.state().iter().map(|t| ObjectRef::from_obj(t.as_ref())).collect::<Vec<_>>()
        })
        .boxed(),
    ];
    let ctx = Arc::new(Stores { client, nodes, retries: Retries::default() });
    drive("topology-status", topologies, triggers, reconcile, ctx, shutdown).await;
    Ok(())
}

/// What the reconciler reads: the Node store, and its retry state.
struct Stores {
    client: Client,
    nodes: Store<Node>,
    retries: Retries,
}

impl Context for Stores {
    fn retries(&self) -> &Retries {
        &self.retries
    }
}

fn topology_key(t: &Topology) -> u64 {
    digest(&(&t.metadata.generation, &t.status))
}

fn node_key(n: &Node) -> u64 {
    digest(&n.metadata.labels)
}

/// The status `spec` has over nodes with `labels` (its conditions aside), and why jobs
/// cannot be placed by it, if they cannot.
pub fn observe<'a>(
    spec: &TopologySpec,
    labels: impl IntoIterator<Item = &'a std::collections::BTreeMap<String, String>>,
) -> (TopologyStatus, Option<(&'static str, String)>) {
    let keys: Vec<String> = spec.levels.iter().map(|l| l.node_label.clone()).collect();
    let mut domains: Vec<BTreeSet<Vec<&str>>> = vec![BTreeSet::new(); keys.len()];
    let mut excluded = vec![0u32; keys.len()];
    let (mut nodes, mut short) = (0u32, 0u32);
    for node in labels {
        nodes += 1;
        let path = domain_path(&keys, node);
        short += u32::from(path.len() < keys.len());
        for (level, set) in domains.iter_mut().enumerate() {
            if level < path.len() {
                set.insert(path[..=level].to_vec());
            } else {
                excluded[level] += 1;
            }
        }
    }
    let levels = spec
        .levels
        .iter()
        .zip(domains.iter().zip(&excluded))
        .map(|(l, (d, &x))| LevelStatus { name: l.name.clone(), domains: d.len() as u32, excluded_nodes: x })
        .collect();
    let status = TopologyStatus { nodes, excluded_nodes: short, levels, ..TopologyStatus::default() };
    let refusal = spec.refusal().or_else(|| {
        domains.first().is_some_and(BTreeSet::is_empty).then(|| {
            ("NoLabelledNodes", format!("no node has the label {:?} of level {:?}", keys[0], spec.levels[0].name))
        })
    });
    (status, refusal)
}

/// The `Ready=True` message: what the topology offers.
fn summary(status: &TopologyStatus) -> String {
    let levels: Vec<String> = status.levels.iter().map(|l| format!("{} {}", l.domains, l.name)).collect();
    let mut text = format!("{} nodes in {}", status.nodes, levels.join(", "));
    if status.excluded_nodes > 0 {
        text.push_str(&format!("; {} nodes lack a level's label", status.excluded_nodes));
    }
    text
}

async fn reconcile(t: Arc<Topology>, ctx: Arc<Stores>) -> Result<Action, Error> {
    if !ready(&ctx.nodes) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let nodes = ctx.nodes.state();
    let empty = Default::default();
    let (mut want, refusal) = observe(&t.spec, nodes.iter().map(|n| n.metadata.labels.as_ref().unwrap_or(&empty)));
    let current = t.status.clone().unwrap_or_default();
    let generation = t.metadata.generation;
    want.observed_generation = generation;
    want.conditions = current.conditions.clone();
    let (ok, reason, message) = match &refusal {
        None => (true, "Ready", summary(&want)),
        Some((reason, message)) => (false, *reason, message.clone()),
    };
    let news = conditions::set(&mut want.conditions, READY, ok, reason, &message, jiff::Timestamp::now(), generation);
    let same = |a: &TopologyStatus, b: &TopologyStatus| {
        let ready = |s: &TopologyStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == READY)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        (a.nodes, a.excluded_nodes, &a.levels, a.observed_generation, ready(a))
            == (b.nodes, b.excluded_nodes, &b.levels, b.observed_generation, ready(b))
    };
    if same(&current, &want) {
        return Ok(Action::requeue(RESYNC));
    }
    let patch = json!({"metadata": {"resourceVersion": t.resource_version()}, "status": want});
    Api::<Topology>::all(ctx.client.clone())
        .patch_status(&t.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    if news && !ok {
        events::publish(&ctx.client, CONTROLLER, &*t, EventType::Warning, reason, &message).await;
    }
    Ok(Action::requeue(RESYNC))
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_api::crd::topology::TopologyLevel;
    use std::collections::BTreeMap;

    fn spec(levels: &[(&str, &str)]) -> TopologySpec {
        TopologySpec {
            levels: levels
                .iter()
                .map(|(n, l)| TopologyLevel { name: n.to_string(), node_label: l.to_string() })
                .collect(),
        }
    }

    fn node(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn counts_nodes_domains_per_level_and_nodes_lacking_a_label() {
        let nodes = [
            node(&[("block", "b1"), ("rack", "r1")]),
            node(&[("block", "b1"), ("rack", "r1")]),
            node(&[("block", "b1"), ("rack", "r2")]),
            node(&[("block", "b2"), ("rack", "r1")]), // another block's r1: another rack
            node(&[("block", "b2")]),
            node(&[("rack", "r9")]), // a rack without its block names no rack
        ];
        let (status, refusal) = observe(&spec(&[("block", "block"), ("rack", "rack")]), &nodes);
        assert_eq!(refusal, None);
        assert_eq!((status.nodes, status.excluded_nodes), (6, 2));
        let levels: Vec<(&str, u32, u32)> =
            status.levels.iter().map(|l| (l.name.as_str(), l.domains, l.excluded_nodes)).collect();
        assert_eq!(levels, [("block", 2, 1), ("rack", 3, 2)]);
        assert_eq!(summary(&status), "6 nodes in 2 block, 3 rack; 2 nodes lack a level's label");
    }

    #[test]
    fn not_ready_without_usable_levels_or_labelled_nodes() {
        let nodes = [node(&[("zone", "a")])];
        assert_eq!(observe(&spec(&[("rack", "rack")]), &nodes).1.map(|r| r.0), Some("NoLabelledNodes"));
        assert_eq!(observe(&spec(&[]), &nodes).1.map(|r| r.0), Some("NoLevels"));
        assert_eq!(observe(&spec(&[("node", "zone")]), &nodes).1.map(|r| r.0), Some("ReservedLevelName"));
        assert_eq!(observe(&spec(&[("zone", "zone")]), &nodes).1, None);
    }
}
