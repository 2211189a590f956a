//! The fake kubelet: registers nodes and "runs" the pods bound to them, in the spirit of
//! [kwok](https://kwok.sigs.k8s.io/). It is an ordinary API client (kube-rs): everything it
//! does goes through the HTTP API, so it works against any API server (a real kube-apiserver
//! included) and what it writes is what any other client sees. Run it in-process with [`run`]
//! or as the `drover-kubelet` binary.
//!
//! No container is ever started. A pod is "run" by writing the status a real kubelet would
//! write, and "finished" by writing a terminal status after a simulated run time.
//!
//! # Nodes
//!
//! [`run`] registers `nodes` Node objects named `{name_prefix}{index}` (`node-0`, `node-1`,
//! ...), or adopts them if they already exist (a kubelet restart). Each node gets:
//!
//! - labels: the configured ones plus `kubernetes.io/hostname: <name>`,
//!   `kubernetes.io/os: linux` and `kubernetes.io/arch: amd64` (the configured labels win for
//!   `os` and `arch`; `hostname` is always the node name);
//! - `spec.podCIDR`: node `i` owns `10.(1 + i / 256).(i % 256).0/24`; pod IPs come from it;
//! - `status.capacity` = `status.allocatable` = the configured resources, with `pods: 110`
//!   added unless given;
//! - `status.conditions`: `Ready=True` (reason `KubeletReady`) and `MemoryPressure`,
//!   `DiskPressure`, `PIDPressure` all `False`;
//! - `status.nodeInfo` (`kubeletVersion: fake`, `containerRuntimeVersion: fake://1.0`,
//!   `operatingSystem: linux`, `architecture: amd64`) and `status.addresses` (`InternalIP`
//!   the `i + 1`-th address of `172.16.0.0/12`, so `node-0` is `172.16.0.1`; `Hostname`).
//!
//! A real API server taints every new Node `node.kubernetes.io/not-ready:NoSchedule`; the node
//! lifecycle controller (kube-controller-manager) lifts it once the node is Ready. Since tests
//! often run without it, the fake kubelet lifts that taint from its own Ready nodes the same
//! way (only that taint, guarded by resourceVersion, retried on conflict) when it registers or
//! adopts a node and at every node status heartbeat. Other taints are left alone.
//!
//! Heartbeat, as a real kubelet does it: one `coordination.k8s.io/v1` Lease per node in the
//! namespace `kube-node-lease` (created if missing), named after the node and owned by it,
//! renewed every 10 s (`leaseDurationSeconds: 40`); the renewals are spread evenly over the
//! 10 s, so 1,000 nodes cost 100 small requests a second. The node status (`Ready` heartbeat
//! time) is refreshed every 5 minutes. If the API server does not serve Leases, the node
//! status is refreshed every 10 s instead. A node deleted with its Lease is registered again
//! at its next Lease renewal, within 10 s; a node deleted on its own, at its next node status
//! refresh.
//!
//! # Pods
//!
//! One watch on all pods. A pod counts as the kubelet's when its `spec.nodeName` is one of
//! its nodes; other pods (unbound, or bound to a node it does not own) are never touched.
//!
//! - **Admission.** Before a `Pending` pod starts, the kubelet checks that it fits beside the
//!   pods already admitted on its node, as the real kubelet does (the scheduler's resource fit
//!   over `status.allocatable`, and the `pods` count). A pod that does not fit never starts:
//!   it is marked `Failed` with reason `OutOf<resource>` (`OutOfcpu`, `OutOfnvidia.com/gpu`,
//!   `OutOfpods`) and the message `Pod was rejected: Node didn't have enough resource: ...`,
//!   and a Warning Event with the same reason is recorded. So two schedulers racing for a node
//!   never over-commit it among running pods. See the `admission` module for the arithmetic.
//! - **Start.** An admitted pod becomes `Running` at once, through the `status` subresource:
//!   conditions `PodScheduled`, `Initialized`, `PodReadyToStartContainers`, `ContainersReady`
//!   and `Ready` all `True`; `startTime`; `hostIP`/`hostIPs` (the node's IP); `podIP`/`podIPs`
//!   (from the node's `podCIDR`, unique among live pods); one `containerStatuses` entry per
//!   container (`ready: true`, `started: true`, `state.running.startedAt`), init containers
//!   terminated with exit code 0.
//! - **Completion.** With the annotation [`DURATION_ANNOTATION`] (`sim.drover.dev/duration`,
//!   seconds, integer or decimal: `"2"`, `"0.5"`), the pod is finished once it has been
//!   `Running` that long: `Succeeded`, every container terminated with exit code 0 and reason
//!   `Completed`. With [`OUTCOME_ANNOTATION`] (`sim.drover.dev/outcome`) set to `Failed`, it
//!   ends `Failed` instead (exit code 1, reason `Error`), to exercise restart policies. Without
//!   a duration the pod runs until it is deleted. An unparsable duration is logged and the
//!   pod runs forever.
//! - **Deletion.** A pod of its nodes being deleted gracefully (`deletionTimestamp` set: the
//!   API server does that for every bound pod that is not terminal) is finished by deleting it
//!   with `gracePeriodSeconds: 0`, at once or, with [`STOP_ANNOTATION`]
//!   (`sim.drover.dev/stop-duration`, seconds), once it has taken that long to stop (within
//!   its grace period; it stays `Running` meanwhile). If it has finalizers, its status is
//!   first made terminal (`Failed`, containers terminated with exit code 143, reason
//!   `Error`) and the API server
//!   keeps it until the finalizers are removed. A pod's completion timer is cancelled when it
//!   is deleted or its phase changes (e.g. someone else marks it `Failed`).
//! - **Not emulated**: container restarts (`restartPolicy` is ignored: a finished pod stays
//!   finished, whatever its policy; a controller makes a new pod), probes, images, volumes,
//!   resource enforcement, eviction under pressure, and the admission checks other than
//!   resources (node affinity, taints, host ports).
//!
//! Timers are derived from the pod itself, never from memory alone: the completion time is
//! the container start time plus the duration. The precise start (milliseconds) is carried in
//! the fake container ID, `fake://<pod-uid>/<container>/<start-unix-ms>`; `status.startTime`
//! (whole seconds) is the fallback. So a restart of the API server or of the kubelet neither
//! extends nor loses a completion: an overdue pod is finished as soon as it is seen again.
//! Likewise the admitted pods are the running ones the first pod list shows, so a restarted
//! kubelet admits nothing before it knows what already runs.
//!
//! # Permissions
//!
//! One client serves every node, so it cannot use node credentials (the Node authorizer
//! limits `system:node:<name>` to its own node, and NodeRestriction forbids a node to change
//! its own taints). It needs the cluster-wide permissions of the ClusterRole in this crate's
//! `rbac.yaml`: nodes (get, create, update, patch) and their status, pods (get, list, watch,
//! delete) and their status, Leases in `kube-node-lease`, Events (create), and namespaces
//! (create, only if `kube-node-lease` is missing, which no real API server lets happen).
//!
//! # Failures
//!
//! Watch drops are resumed (re-listing when needed). Failed writes (429, 5xx, connection
//! errors) are retried with a small backoff (50 ms doubling up to 2 s); a 409 Conflict makes
//! the kubelet read the pod again and decide afresh. [`run`] returns `Ok(())` when its
//! `shutdown` future completes, and an error only for a misconfiguration it cannot recover
//! from (an invalid node name, label or resource, too many nodes, or the API server rejecting
//! the node object).
//!
//! # Cost
//!
//! One pod watch in total, pod writes limited to 32 in flight, node registration 16 at a time,
//! heartbeats spread over their period; a pod costs one write to start, one to finish.

mod admission;
mod events;
pub mod flags;
mod names;
mod nodes;
mod pods;
mod retry;
mod taints;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;

/// Pod annotation: how long the pod runs, in seconds (integer or decimal, e.g. `"2"` or
/// `"0.5"`), counted from when the fake kubelet marked it `Running`. After that the pod ends
/// `Succeeded` (or `Failed`, see [`OUTCOME_ANNOTATION`]). Without it the pod runs until it is
/// deleted.
pub const DURATION_ANNOTATION: &str = "sim.drover.dev/duration";

/// Pod annotation: how the pod ends when its [`DURATION_ANNOTATION`] has elapsed. `Failed`
/// makes it end `Failed` (containers exit code 1, reason `Error`); anything else, or no
/// annotation, means `Succeeded` (exit code 0, reason `Completed`). It has no effect without a
/// duration.
pub const OUTCOME_ANNOTATION: &str = "sim.drover.dev/outcome";

/// Pod annotation: how long the pod takes to stop once its deletion is requested, in seconds
/// (as [`DURATION_ANNOTATION`]), like a trainer that checkpoints on SIGTERM: it stays
/// `Running` with its `deletionTimestamp` set until then, or until its grace period ends if
/// that comes first. Counted from the deletion request, so changing the annotation of a pod
/// being deleted (to `"0"`: stop now) takes effect at once. Without it the pod stops at once.
pub const STOP_ANNOTATION: &str = "sim.drover.dev/stop-duration";

/// The namespace holding the node heartbeat Leases, as in Kubernetes.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The number of pods a node accepts when `allocatable` does not say (Kubernetes' default).
pub const DEFAULT_MAX_PODS: &str = "110";

/// The most nodes one fake kubelet can own (one pod `/24` each within `10.1.0.0`–`10.254.255.0`).
pub const MAX_NODES: u32 = 254 * 256;

/// What the fake kubelet registers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletConfig {
    /// How many nodes to register.
    pub nodes: u32,
    /// Node names are `{name_prefix}{index}`, e.g. `node-0`.
    pub name_prefix: String,
    /// Each node's capacity and allocatable resources, as Kubernetes quantities (`cpu: 32`,
    /// `memory: 256Gi`, `nvidia.com/gpu: 8`). `pods` defaults to 110 if absent.
    pub allocatable: BTreeMap<String, String>,
    /// Labels added to every node (besides `kubernetes.io/hostname` and friends).
    pub labels: BTreeMap<String, String>,
}

impl KubeletConfig {
    /// `nodes` nodes `node-0`, `node-1`, ... of 32 CPUs, 256 GiB and 8 GPUs each, with no extra
    /// labels: the GPU node most tests want.
    pub fn gpu_nodes(nodes: u32) -> KubeletConfig {
        let allocatable = [("cpu", "32"), ("memory", "256Gi"), ("nvidia.com/gpu", "8")];
        KubeletConfig {
            nodes,
            name_prefix: "node-".into(),
            allocatable: allocatable.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            labels: BTreeMap::new(),
        }
    }
}

/// Registers the nodes, keeps their heartbeat and runs the pods bound to them until
/// `shutdown` completes. See the [module documentation](self) for the behaviour.
///
/// Returns `Ok(())` on shutdown; an error only for a misconfiguration that retrying cannot
/// fix (an invalid node name, label or resource, more than [`MAX_NODES`] nodes, or the API
/// server rejecting the node objects with a 4xx other than 404/409/429).
pub async fn run(
    client: kube::Client,
    config: KubeletConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let fleet = Arc::new(nodes::Fleet::new(&config).context("invalid fake kubelet configuration")?);
    tracing::info!(nodes = config.nodes, prefix = %config.name_prefix, "fake kubelet starting");
    let work = async {
        // Pods are watched from the start; the heartbeat loop registers the nodes first.
        let heartbeat = nodes::run(client.clone(), fleet.clone());
        let pods = pods::run(client.clone(), fleet.clone());
        tokio::try_join!(heartbeat, pods).map(|_| ())
    };
    tokio::select! {
        result = work => result,
        () = shutdown => {
            tracing::info!("fake kubelet stopped");
            Ok(())
        }
    }
}
