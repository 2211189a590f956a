//! Node registration and heartbeats.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use futures::{StreamExt as _, TryStreamExt as _};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::time::{Instant, MissedTickBehavior};

use crate::admission::{self, Amounts};
use crate::names::{is_dns_subdomain, is_label_value, is_qualified_name};
use crate::retry::{classify, Backoff, Failure};
use crate::taints;
use crate::{KubeletConfig, DEFAULT_MAX_PODS, MAX_NODES, NODE_LEASE_NAMESPACE};

/// How often each node's Lease is renewed.
pub(crate) const LEASE_RENEW_PERIOD: Duration = Duration::from_secs(10);
/// The Lease duration written (as a real kubelet: 4 renew periods).
const LEASE_DURATION_SECONDS: i32 = 40;
/// How often the node status heartbeat is refreshed while Leases carry the heartbeat.
const NODE_STATUS_PERIOD: Duration = Duration::from_secs(300);
/// Heartbeats are spread over this many slots per renew period.
const SLOTS: u32 = 100;
/// Node registrations in flight at once.
const REGISTER_CONCURRENCY: usize = 16;
/// Heartbeat requests in flight at once.
const HEARTBEAT_CONCURRENCY: usize = 8;

/// The nodes one fake kubelet owns, and what it registers for them.
#[derive(Debug)]
pub(crate) struct Fleet {
    prefix: String,
    count: u32,
    resources: BTreeMap<String, Quantity>,
    /// `resources` in the kubelet's units, for admission.
    allocatable: Amounts,
    labels: BTreeMap<String, String>,
    /// When this kubelet started: the transition time of the node conditions.
    started: Timestamp,
    boot_id: String,
    /// False once the API server turned out not to serve Leases: node status heartbeats then.
    leases: AtomicBool,
}

impl Fleet {
    pub(crate) fn new(config: &KubeletConfig) -> anyhow::Result<Self> {
        if config.nodes > MAX_NODES {
            bail!("{} nodes requested; at most {MAX_NODES} are supported", config.nodes);
        }
        if config.nodes > 0 {
            for index in [0, config.nodes - 1] {
                let name = format!("{}{index}", config.name_prefix);
                if !is_dns_subdomain(&name) {
                    bail!("node name {name:?} (prefix {:?}) is not a valid DNS subdomain", config.name_prefix);
                }
            }
        }
        let mut resources: BTreeMap<String, Quantity> =
            config.allocatable.iter().map(|(name, value)| (name.clone(), Quantity(value.clone()))).collect();
        resources.entry("pods".to_owned()).or_insert_with(|| Quantity(DEFAULT_MAX_PODS.to_owned()));
        let allocatable = resources
            .iter()
            .map(|(name, value)| Ok((name.clone(), allocatable_amount(name, &value.0)?)))
            .collect::<Result<Amounts, String>>()
            .map_err(anyhow::Error::msg)?;
        for (key, value) in &config.labels {
            if !is_qualified_name(key) || !is_label_value(value) {
                bail!("node label {key}={value:?} is not a valid Kubernetes label");
            }
        }
        let mut labels = BTreeMap::from([
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ]);
        labels.extend(config.labels.clone());
        let started = Timestamp::now();
        Ok(Self {
            prefix: config.name_prefix.clone(),
            count: config.nodes,
            resources,
            allocatable,
            labels,
            started,
            boot_id: format!("fake-{}", started.as_millisecond()),
            leases: AtomicBool::new(true),
        })
    }

    /// What every node offers to pods, in the kubelet's units.
    pub(crate) fn allocatable(&self) -> &Amounts {
        &self.allocatable
    }

    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    pub(crate) fn name(&self, index: u32) -> String {
        format!("{}{index}", self.prefix)
    }

    /// The index of the node called `name`, if this kubelet owns it.
    pub(crate) fn index_of(&self, name: &str) -> Option<u32> {
        let digits = name.strip_prefix(self.prefix.as_str())?;
        // Canonical decimal only: "node-01" is not node 1.
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let index: u32 = digits.parse().ok()?;
        (index < self.count).then_some(index)
    }

    /// The node's InternalIP: number `i + 1` in `172.16.0.0/12` (`node-0` is `172.16.0.1`).
    pub(crate) fn node_ip(&self, index: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(172, 16, 0, 0)) + index + 1)
    }

    /// The node's pod subnet `10.a.b.0/24` as `[10, a, b]`: `a = 1 + i / 256`, `b = i % 256`.
    pub(crate) fn pod_subnet(&self, index: u32) -> [u8; 3] {
        [10, 1 + (index >> 8) as u8, index as u8]
    }

    fn pod_cidr(&self, index: u32) -> String {
        let [a, b, c] = self.pod_subnet(index);
        format!("{a}.{b}.{c}.0/24")
    }

    fn node_labels(&self, name: &str) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert("kubernetes.io/hostname".to_owned(), name.to_owned());
        labels
    }

    fn conditions(&self, now: Timestamp) -> Vec<NodeCondition> {
        let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time: Some(Time(self.started)),
        };
        vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status (fake kubelet)"),
        ]
    }

    fn status(&self, index: u32, now: Timestamp) -> NodeStatus {
        let name = self.name(index);
        NodeStatus {
            capacity: Some(self.resources.clone()),
            allocatable: Some(self.resources.clone()),
            conditions: Some(self.conditions(now)),
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".to_owned(), address: self.node_ip(index).to_string() },
                NodeAddress { type_: "Hostname".to_owned(), address: name.clone() },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".to_owned(),
                boot_id: self.boot_id.clone(),
                container_runtime_version: "fake://1.0".to_owned(),
                kernel_version: "fake".to_owned(),
                kube_proxy_version: "fake".to_owned(),
                kubelet_version: "fake".to_owned(),
                machine_id: format!("fake-{name}"),
                operating_system: "linux".to_owned(),
                os_image: "fake".to_owned(),
                system_uuid: format!("fake-{name}"),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn node(&self, index: u32, now: Timestamp) -> Node {
        let name = self.name(index);
        Node {
            metadata: ObjectMeta { labels: Some(self.node_labels(&name)), name: Some(name), ..Default::default() },
            spec: Some(NodeSpec {
                pod_cidr: Some(self.pod_cidr(index)),
                pod_cidrs: Some(vec![self.pod_cidr(index)]),
                ..Default::default()
            }),
            status: Some(self.status(index, now)),
        }
    }

    /// Whether `resources` (as the API server canonicalised them) are the configured ones.
    fn same_resources(&self, resources: Option<&BTreeMap<String, Quantity>>) -> bool {
        let amounts: Option<Amounts> = resources
            .into_iter()
            .flatten()
            .map(|(name, q)| Some((name.clone(), admission::amount(name, &q.0)?)))
            .collect();
        amounts.as_ref() == Some(&self.allocatable)
    }

    /// Whether `node` already has the status this kubelet registers (resources, kubelet
    /// version, every condition with its status and reason).
    fn status_current(&self, node: &Node) -> bool {
        let Some(status) = &node.status else {
            return false;
        };
        self.same_resources(status.capacity.as_ref())
            && self.same_resources(status.allocatable.as_ref())
            && status.node_info.as_ref().is_some_and(|info| info.kubelet_version == "fake")
            && self.conditions(self.started).iter().all(|wanted| {
                status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == wanted.type_ && c.status == wanted.status && c.reason == wanted.reason)
            })
    }
}

/// Checks one allocatable resource as the API server would (a qualified name, a non-negative
/// quantity, a whole number for `pods` and extended resources) and returns its amount in the
/// kubelet's units.
pub(crate) fn allocatable_amount(name: &str, value: &str) -> Result<i64, String> {
    if !is_qualified_name(name) {
        return Err(format!("{name:?} is not a valid resource name"));
    }
    let quantity = drover_api::Quantity::parse(value).map_err(|e| format!("{name}: {e}"))?;
    if quantity.is_negative() {
        return Err(format!("{name}: {value:?} is negative"));
    }
    let whole = name == "pods" || (name.contains('/') && !name.contains("kubernetes.io/"));
    if whole && quantity.nanos() % 1_000_000_000 != 0 {
        return Err(format!("{name}: {value:?} is not a whole number"));
    }
    admission::amount(name, value).ok_or_else(|| format!("{name}: {value:?} is too large"))
}

/// Registers every node, then keeps their heartbeats forever.
pub(crate) async fn run(client: Client, fleet: Arc<Fleet>) -> anyhow::Result<()> {
    futures::stream::iter(0..fleet.count())
        .map(|index| register(&client, &fleet, index))
        .buffer_unordered(REGISTER_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    tracing::info!(nodes = fleet.count(), "fake kubelet registered its nodes");
    if fleet.count() == 0 {
        return Ok(());
    }
    heartbeats(client, fleet).await;
    Ok(())
}

/// Creates node `index`, or adopts it if it exists, retrying transient failures.
async fn register(client: &Client, fleet: &Fleet, index: u32) -> anyhow::Result<()> {
    let mut backoff = Backoff::new();
    loop {
        match register_once(client, fleet, index).await {
            Ok(_) => return Ok(()),
            Err(error) if classify(&error) == Failure::Rejected => {
                bail!("the API server rejected node {}: {error}", fleet.name(index));
            }
            Err(error) => {
                tracing::debug!(node = %fleet.name(index), %error, "node registration failed; retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// Creates or adopts node `index` (adding its labels, and its pod CIDR if it has none),
/// writes its status if it is not current and lifts the not-ready taint; returns the node as
/// last written.
async fn register_once(client: &Client, fleet: &Fleet, index: u32) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let name = fleet.name(index);
    let desired = fleet.node(index, Timestamp::now());
    let post = PostParams::default();
    let node = match api.get_opt(&name).await? {
        None => api.create(&post, &desired).await?,
        Some(mut existing) => {
            let labels = existing.metadata.labels.get_or_insert_with(BTreeMap::new);
            let wanted = desired.metadata.labels.clone().unwrap_or_default();
            let relabel = wanted.iter().any(|(k, v)| labels.get(k) != Some(v));
            labels.extend(wanted);
            // A pod CIDR can be set once; pod IPs come from this one whatever the node says.
            let spec = existing.spec.get_or_insert_with(NodeSpec::default);
            let give_cidr = spec.pod_cidr.is_none();
            if give_cidr {
                spec.pod_cidr = Some(fleet.pod_cidr(index));
                spec.pod_cidrs = Some(vec![fleet.pod_cidr(index)]);
            }
            if relabel || give_cidr {
                existing = api.replace(&name, &post, &existing).await?;
            }
            existing
        }
    };
    let node = if fleet.status_current(&node) {
        node
    } else {
        let mut node = node;
        node.status = desired.status;
        api.replace_status(&name, &post, &node).await?
    };
    taints::lift_not_ready(&api, node.clone()).await?;
    Ok(node)
}

/// Renews every node's heartbeat once per period, spread evenly over the period.
async fn heartbeats(client: Client, fleet: Arc<Fleet>) {
    let mut tick = tokio::time::interval(LEASE_RENEW_PERIOD / SLOTS);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let started = Instant::now();
    // When each node's status heartbeat was last written (registration wrote it).
    let mut status_written = vec![started; fleet.count() as usize];
    let mut slot: u32 = 0;
    loop {
        tick.tick().await;
        let now = Instant::now();
        let due: Vec<(u32, bool)> = (slot..fleet.count())
            .step_by(SLOTS as usize)
            .map(|index| {
                let status_due = !fleet.leases.load(Ordering::Relaxed)
                    || now.duration_since(status_written[index as usize]) >= NODE_STATUS_PERIOD;
                (index, status_due)
            })
            .collect();
        let written: Vec<Option<u32>> = futures::stream::iter(due)
            .map(|(index, status_due)| heartbeat(&client, &fleet, index, status_due))
            .buffer_unordered(HEARTBEAT_CONCURRENCY)
            .collect()
            .await;
        for index in written.into_iter().flatten() {
            status_written[index as usize] = now;
        }
        slot = (slot + 1) % SLOTS;
    }
}

/// One node's heartbeat; returns the index if its node status was written.
async fn heartbeat(client: &Client, fleet: &Fleet, index: u32, status_due: bool) -> Option<u32> {
    if fleet.leases.load(Ordering::Relaxed) {
        if let Err(error) = renew_lease(client, fleet, index).await {
            tracing::debug!(node = %fleet.name(index), %error, "lease renewal failed; next period retries");
        }
    }
    if !status_due {
        return None;
    }
    match patch_node_heartbeat(client, fleet, index).await {
        Ok(()) => Some(index),
        Err(error) => {
            tracing::debug!(node = %fleet.name(index), %error, "node heartbeat failed; next period retries");
            None
        }
    }
}

/// Refreshes the node conditions' heartbeat time (a strategic merge by condition type, so
/// other writers' conditions stay) and lifts a not-ready taint found on the node;
/// re-registers the node if it is gone.
async fn patch_node_heartbeat(client: &Client, fleet: &Fleet, index: u32) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let name = fleet.name(index);
    let patch = json!({ "status": { "conditions": fleet.conditions(Timestamp::now()) } });
    match api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
        Ok(node) => taints::lift_not_ready(&api, node).await,
        Err(error) if classify(&error) == Failure::NotFound => {
            tracing::info!(node = %name, "node disappeared; registering it again");
            register_once(client, fleet, index).await.map(drop)
        }
        Err(error) => Err(error),
    }
}

/// Renews the node's Lease, creating it (owned by the node, so that garbage collection
/// deletes it with the node) when missing, and its namespace and the node if they are gone.
async fn renew_lease(client: &Client, fleet: &Fleet, index: u32) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let name = fleet.name(index);
    let spec = LeaseSpec {
        holder_identity: Some(name.clone()),
        lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
        renew_time: Some(MicroTime(Timestamp::now())),
        ..Default::default()
    };
    let patch = json!({ "spec": spec });
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => return Ok(()),
        Err(error) if classify(&error) == Failure::NotFound => {}
        Err(error) => return Err(error),
    }
    // No lease: the node may be gone as well (deleted, and its lease with it).
    let nodes: Api<Node> = Api::all(client.clone());
    let node = match nodes.get_opt(&name).await? {
        Some(node) => node,
        None => {
            tracing::info!(node = %name, "node disappeared; registering it again");
            register_once(client, fleet, index).await?
        }
    };
    let owner = OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Node".to_owned(),
        name: name.clone(),
        uid: node.uid().unwrap_or_default(),
        ..Default::default()
    };
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NODE_LEASE_NAMESPACE.to_owned()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(LeaseSpec { acquire_time: spec.renew_time.clone(), ..spec }),
    };
    let post = PostParams::default();
    match api.create(&post, &lease).await {
        Ok(_) => return Ok(()),
        Err(error) => match classify(&error) {
            Failure::Conflict => return Ok(()),
            Failure::NotFound => {}
            _ => return Err(error),
        },
    }
    // 404 on create: the namespace is missing, or Leases are not served at all.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta { name: Some(NODE_LEASE_NAMESPACE.to_owned()), ..Default::default() },
        ..Default::default()
    };
    match namespaces.create(&post, &namespace).await {
        Ok(_) => {}
        Err(error) => match classify(&error) {
            Failure::Conflict => {}
            // Not allowed to create it (RBAC): a problem to report, not a missing API.
            Failure::Transient | Failure::Rejected => return Err(error),
            Failure::NotFound => return leases_unsupported(fleet, error),
        },
    }
    match api.create(&post, &lease).await {
        Ok(_) => Ok(()),
        Err(error) => match classify(&error) {
            Failure::Conflict => Ok(()),
            Failure::NotFound => leases_unsupported(fleet, error),
            _ => Err(error),
        },
    }
}

fn leases_unsupported(fleet: &Fleet, error: kube::Error) -> Result<(), kube::Error> {
    if fleet.leases.swap(false, Ordering::Relaxed) {
        tracing::warn!(%error, "the API server does not serve node Leases; the fake kubelet heartbeats through node status instead");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(nodes: u32, prefix: &str) -> anyhow::Result<Fleet> {
        Fleet::new(&KubeletConfig {
            nodes,
            name_prefix: prefix.to_owned(),
            allocatable: BTreeMap::from([
                ("cpu".to_owned(), "32".to_owned()),
                ("memory".to_owned(), "1024Mi".to_owned()),
            ]),
            labels: BTreeMap::from([("pool".to_owned(), "a".to_owned())]),
        })
    }

    #[test]
    fn node_names_round_trip_and_reject_strangers() {
        let fleet = fleet(12, "node-").unwrap();
        assert_eq!(fleet.name(3), "node-3");
        assert_eq!(fleet.index_of("node-3"), Some(3));
        assert_eq!(fleet.index_of("node-11"), Some(11));
        assert_eq!(fleet.index_of("node-12"), None);
        assert_eq!(fleet.index_of("node-03"), None);
        assert_eq!(fleet.index_of("node-"), None);
        assert_eq!(fleet.index_of("node-+1"), None);
        assert_eq!(fleet.index_of("other-1"), None);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(fleet(1, "Node-").is_err());
        assert!(fleet(1, "-n").is_err());
        assert!(fleet(MAX_NODES + 1, "n").is_err());
        assert!(fleet(0, "").is_ok());
        assert!(fleet(MAX_NODES, "n").is_ok());
        let with = |name: &str, value: &str| {
            let config = KubeletConfig {
                nodes: 1,
                name_prefix: "n".to_owned(),
                allocatable: BTreeMap::from([(name.to_owned(), value.to_owned())]),
                ..Default::default()
            };
            Fleet::new(&config).map_err(|e| e.to_string())
        };
        assert!(with("nvidia.com/gpu", "8").is_ok());
        assert!(with("cpu", "500m").is_ok());
        assert!(with("cpu", "lots").unwrap_err().contains("cpu"));
        assert!(with("memory", "-1Gi").unwrap_err().contains("negative"));
        assert!(with("nvidia.com/gpu", "0.5").unwrap_err().contains("whole number"));
        assert!(with("pods", "1.5").unwrap_err().contains("whole number"));
        assert!(with("Bad Name", "1").unwrap_err().contains("resource name"));
        let labelled = |key: &str, value: &str| {
            Fleet::new(&KubeletConfig {
                nodes: 1,
                name_prefix: "n".to_owned(),
                labels: BTreeMap::from([(key.to_owned(), value.to_owned())]),
                ..Default::default()
            })
        };
        assert!(labelled("example.com/pool", "a-1").is_ok());
        assert!(labelled("pool", "no spaces").is_err());
        assert!(labelled("-pool", "a").is_err());
    }

    #[test]
    fn addresses_are_distinct_per_node() {
        let fleet = fleet(MAX_NODES, "n").unwrap();
        assert_eq!(fleet.node_ip(0), Ipv4Addr::new(172, 16, 0, 1));
        assert_eq!(fleet.node_ip(300), Ipv4Addr::new(172, 16, 1, 45));
        assert_eq!(fleet.pod_cidr(0), "10.1.0.0/24");
        assert_eq!(fleet.pod_cidr(MAX_NODES - 1), "10.254.255.0/24");
    }

    #[test]
    fn registered_node_carries_resources_labels_and_ready() {
        let fleet = fleet(2, "node-").unwrap();
        let node = fleet.node(1, Timestamp::now());
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "node-1");
        assert_eq!(labels["pool"], "a");
        let status = node.status.as_ref().unwrap();
        assert_eq!(status.capacity.as_ref().unwrap()["pods"], Quantity("110".into()));
        assert_eq!(status.allocatable.as_ref().unwrap()["cpu"], Quantity("32".into()));
        assert!(fleet.status_current(&node));
        // The API server writes quantities back in canonical form: still current.
        let mut canonical = node.clone();
        let status = canonical.status.as_mut().unwrap();
        for list in [&mut status.capacity, &mut status.allocatable] {
            list.as_mut().unwrap().insert("memory".to_owned(), Quantity("1Gi".into()));
        }
        assert!(fleet.status_current(&canonical));
        let mut resized = node.clone();
        resized.status.as_mut().unwrap().allocatable.as_mut().unwrap().insert("cpu".to_owned(), Quantity("16".into()));
        assert!(!fleet.status_current(&resized));
        // Ready alone, as someone else wrote it, is refreshed with the kubelet's conditions.
        let mut bare = node;
        bare.status.as_mut().unwrap().conditions =
            Some(vec![NodeCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() }]);
        assert!(!fleet.status_current(&bare));
    }
}
