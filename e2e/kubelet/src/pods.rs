//! Running the pods bound to the fake kubelet's nodes.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, HostIP, Pod,
    PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::admission::{self, Ledger, Rejection};
use crate::events;
use crate::nodes::Fleet;
use crate::retry::{classify, Backoff, Failure};
use crate::{DURATION_ANNOTATION, OUTCOME_ANNOTATION, STOP_ANNOTATION};

/// Pod writes in flight at once, over all pods.
const WRITE_CONCURRENCY: usize = 32;
/// How long to wait before retrying a write the API server rejected (4xx), absent news.
const REJECTED_RETRY: Duration = Duration::from_secs(10);
/// The field selector tried first, so that unbound pods are not even sent.
const BOUND_SELECTOR: &str = "spec.nodeName!=";
/// Exit code of a container stopped because its pod was deleted (SIGTERM).
const KILLED_EXIT_CODE: i32 = 143;

/// Watches all pods and runs those on the fleet's nodes, forever.
pub(crate) async fn run(client: Client, fleet: Arc<Fleet>) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::all(client.clone());
    let mut config = watcher::Config::default();
    if let Some(selector) = bound_selector(&api).await {
        config = config.fields(selector);
    }
    let (synced, _) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        client,
        fleet,
        writes: Semaphore::new(WRITE_CONCURRENCY),
        ips: Mutex::new(IpPool::default()),
        admitted: Mutex::new(Ledger::default()),
        synced,
    });
    let mut router = Router { ctx: ctx.clone(), tracked: HashMap::new(), tasks: JoinSet::new(), epoch: 0 };
    let mut events = pin!(watcher(api, config));
    let mut backoff = Backoff::new();
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => {
                    backoff.reset();
                    router.handle(event);
                }
                Some(Err(error)) => {
                    tracing::debug!(%error, "pod watch failed; resuming");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                None => anyhow::bail!("the pod watch ended"),
            },
            Some(joined) = router.tasks.join_next(), if !router.tasks.is_empty() => {
                if let Err(error) = joined {
                    if error.is_panic() {
                        tracing::error!(%error, "a fake kubelet pod task panicked");
                    }
                }
            }
        }
    }
}

/// Whether the API server filters on `spec.nodeName!=`; the kubelet filters anyway.
async fn bound_selector(api: &Api<Pod>) -> Option<&'static str> {
    let mut backoff = Backoff::new();
    loop {
        match api.list(&ListParams::default().fields(BOUND_SELECTOR).limit(1)).await {
            Ok(_) => return Some(BOUND_SELECTOR),
            Err(error) if classify(&error) == Failure::Transient => {
                tracing::debug!(%error, "pod list failed; retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(error) => {
                tracing::info!(%error, "the API server refused the field selector {BOUND_SELECTOR:?}; watching all pods");
                return None;
            }
        }
    }
}

/// What the pod tasks share.
struct Ctx {
    client: Client,
    fleet: Arc<Fleet>,
    writes: Semaphore,
    ips: Mutex<IpPool>,
    /// The pods admitted on each node: those found running, and those this kubelet started.
    admitted: Mutex<Ledger>,
    /// True once the first complete pod list was seen, so that every pod IP in use and every
    /// running pod is known before any pod is admitted.
    synced: watch::Sender<bool>,
}

/// Routes watch events to one task per live pod of the fleet.
struct Router {
    ctx: Arc<Ctx>,
    /// By pod uid: the latest version seen, and the list epoch it was last seen in.
    tracked: HashMap<String, (watch::Sender<Arc<Pod>>, u64)>,
    tasks: JoinSet<()>,
    epoch: u64,
}

impl Router {
    fn handle(&mut self, event: watcher::Event<Pod>) {
        match event {
            watcher::Event::Init => self.epoch += 1,
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => self.observe(pod),
            watcher::Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.forget(uid);
                }
            }
            watcher::Event::InitDone => {
                let epoch = self.epoch;
                let gone: Vec<String> =
                    self.tracked.iter().filter(|(_, (_, seen))| *seen != epoch).map(|(uid, _)| uid.clone()).collect();
                for uid in gone {
                    self.forget(&uid);
                }
                self.ctx.synced.send_replace(true);
            }
        }
    }

    fn observe(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref());
        let Some(node) = node.and_then(|name| self.ctx.fleet.index_of(name)) else {
            // Not ours (node names never change, but a uid must not leak).
            self.forget(&uid);
            return;
        };
        let live = !is_terminal(&pod);
        {
            let mut ips = self.ctx.ips.lock().unwrap_or_else(|e| e.into_inner());
            match pod_ip(&pod) {
                Some(ip) if live => ips.record(&uid, node, ip, &self.ctx.fleet),
                _ if !live => ips.release(&uid),
                _ => {}
            }
        }
        {
            let mut admitted = self.ctx.admitted.lock().unwrap_or_else(|e| e.into_inner());
            if !live {
                admitted.release(&uid);
            } else if phase(&pod) != "Pending" {
                admitted.record(node, &uid, &admission::pod_request(&pod));
            }
        }
        let wanted = live || pod.metadata.deletion_timestamp.is_some();
        match self.tracked.get_mut(&uid) {
            Some((sender, seen)) if wanted => {
                sender.send_replace(Arc::new(pod));
                *seen = self.epoch;
            }
            Some(_) => {
                // Terminal and not being deleted: nothing left to do; dropping the sender
                // ends the task.
                self.tracked.remove(&uid);
            }
            None if wanted => {
                let (sender, receiver) = watch::channel(Arc::new(pod));
                self.tracked.insert(uid, (sender, self.epoch));
                self.tasks.spawn(pod_task(self.ctx.clone(), node, receiver));
            }
            None => {}
        }
    }

    fn forget(&mut self, uid: &str) {
        self.tracked.remove(uid);
        self.ctx.ips.lock().unwrap_or_else(|e| e.into_inner()).release(uid);
        self.ctx.admitted.lock().unwrap_or_else(|e| e.into_inner()).release(uid);
    }
}

/// Pod IPs handed out, per node, from the node's `/24` (hosts .2 to .254).
#[derive(Debug, Default)]
struct IpPool {
    by_node: HashMap<u32, BTreeMap<u8, String>>,
    by_uid: HashMap<String, (u32, u8)>,
}

impl IpPool {
    /// Notes that pod `uid` on node `node` uses `ip` (if it is in the node's subnet).
    fn record(&mut self, uid: &str, node: u32, ip: Ipv4Addr, fleet: &Fleet) {
        let octets = ip.octets();
        if octets[..3] != fleet.pod_subnet(node) || self.by_uid.get(uid) == Some(&(node, octets[3])) {
            return;
        }
        let hosts = self.by_node.entry(node).or_default();
        if hosts.contains_key(&octets[3]) {
            return; // Someone else's already: keep the first owner.
        }
        hosts.insert(octets[3], uid.to_owned());
        if let Some((old_node, old_host)) = self.by_uid.insert(uid.to_owned(), (node, octets[3])) {
            self.free(old_node, old_host, uid);
        }
    }

    /// The pod's IP: the one it has, or the lowest free one of its node.
    fn allocate(&mut self, uid: &str, node: u32, fleet: &Fleet) -> Ipv4Addr {
        let [a, b, c] = fleet.pod_subnet(node);
        if let Some(&(owned_node, host)) = self.by_uid.get(uid) {
            if owned_node == node {
                return Ipv4Addr::new(a, b, c, host);
            }
        }
        let hosts = self.by_node.entry(node).or_default();
        let host = (2..=254u8).find(|host| !hosts.contains_key(host));
        let Some(host) = host else {
            tracing::warn!(node, "no free pod IP on the node; reusing one");
            return Ipv4Addr::new(a, b, c, 2 + (self.by_uid.len() % 253) as u8);
        };
        hosts.insert(host, uid.to_owned());
        self.by_uid.insert(uid.to_owned(), (node, host));
        Ipv4Addr::new(a, b, c, host)
    }

    fn release(&mut self, uid: &str) {
        if let Some((node, host)) = self.by_uid.remove(uid) {
            self.free(node, host, uid);
        }
    }

    fn free(&mut self, node: u32, host: u8, uid: &str) {
        if let Some(hosts) = self.by_node.get_mut(&node) {
            if hosts.get(&host).map(String::as_str) == Some(uid) {
                hosts.remove(&host);
            }
        }
    }
}

/// What the kubelet does next for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    /// Mark it Running.
    Start,
    /// Write a terminal status.
    Finish(Ending),
    /// Delete it with grace period 0.
    Delete,
    /// Nothing until the pod changes, or until the given time.
    Wait(Option<Timestamp>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Succeeded,
    Failed,
    /// Stopped because the pod is being deleted.
    Killed,
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|status| status.phase.as_deref()).unwrap_or("Pending")
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn pod_ip(pod: &Pod) -> Option<Ipv4Addr> {
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

/// Parses a [`DURATION_ANNOTATION`] value: non-negative seconds, integer or decimal.
fn parse_duration(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let seconds: f64 = value.parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// The pod's run time from its annotation: `None` without one, `Some(None)` if unparsable.
fn run_time(pod: &Pod) -> Option<Option<Duration>> {
    pod.annotations().get(DURATION_ANNOTATION).map(|value| parse_duration(value))
}

/// When a pod being deleted has stopped, by its [`STOP_ANNOTATION`]: that long after the
/// deletion was requested (its `deletionTimestamp` less its grace period), at the latest when
/// the grace period ends. `None` without a (parsable) annotation or deletion: at once.
fn stopped_at(pod: &Pod) -> Option<Timestamp> {
    let stop = parse_duration(pod.annotations().get(STOP_ANNOTATION)?)?;
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = SignedDuration::from_secs(pod.metadata.deletion_grace_period_seconds.unwrap_or(0));
    let requested = deadline.checked_sub(grace).ok()?;
    let stopped = SignedDuration::try_from(stop).ok().and_then(|d| requested.checked_add(d).ok());
    Some(stopped.map_or(deadline, |s| s.min(deadline)))
}

fn ending(pod: &Pod) -> Ending {
    match pod.annotations().get(OUTCOME_ANNOTATION).map(|v| v.trim()) {
        Some(outcome) if outcome.eq_ignore_ascii_case("failed") => Ending::Failed,
        _ => Ending::Succeeded,
    }
}

/// The fake container ID, which carries the start time to the millisecond.
fn container_id(pod_uid: &str, container: &str, started: Timestamp) -> String {
    format!("fake://{pod_uid}/{container}/{}", started.as_millisecond())
}

/// When the pod started running: the millisecond start from the fake container ID when it
/// agrees with `status.startTime` (whole seconds), else `status.startTime`.
fn started_at(pod: &Pod) -> Option<Timestamp> {
    let status = pod.status.as_ref()?;
    let coarse = status.start_time.as_ref().map(|time| time.0);
    let precise = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.container_id.as_deref()?.strip_prefix("fake://"))
        .filter_map(|id| id.rsplit('/').next()?.parse::<i64>().ok())
        .find_map(|ms| Timestamp::from_millisecond(ms).ok());
    match (coarse, precise) {
        (Some(coarse), Some(precise))
            if precise >= coarse && precise.duration_since(coarse) < SignedDuration::from_secs(1) =>
        {
            Some(precise)
        }
        (Some(coarse), _) => Some(coarse),
        (None, precise) => precise,
    }
}

fn decide(pod: &Pod, now: Timestamp) -> Action {
    let terminal = is_terminal(pod);
    if pod.metadata.deletion_timestamp.is_some() {
        if let Some(stopped) = stopped_at(pod).filter(|&at| !terminal && now < at) {
            return Action::Wait(Some(stopped));
        }
        let has_finalizers = !pod.finalizers().is_empty();
        if has_finalizers && !terminal {
            return Action::Finish(Ending::Killed);
        }
        if has_finalizers && pod.metadata.deletion_grace_period_seconds == Some(0) {
            // Deleted already; the API server waits for the finalizers.
            return Action::Wait(None);
        }
        return Action::Delete;
    }
    match phase(pod) {
        "Pending" => Action::Start,
        "Running" => {
            let (Some(Some(run_time)), Some(started)) = (run_time(pod), started_at(pod)) else {
                return Action::Wait(None);
            };
            let deadline = SignedDuration::try_from(run_time)
                .ok()
                .and_then(|d| started.checked_add(d).ok())
                .unwrap_or(Timestamp::MAX);
            if now >= deadline {
                Action::Finish(ending(pod))
            } else {
                Action::Wait(Some(deadline))
            }
        }
        _ => Action::Wait(None),
    }
}

/// True if `incoming` is an older version than `current` (resource versions compared as
/// integers when both are; otherwise the incoming one is taken as newer).
fn is_older(incoming: &Pod, current: &Pod) -> bool {
    let version = |pod: &Pod| pod.metadata.resource_version.as_deref()?.parse::<u64>().ok();
    matches!((version(incoming), version(current)), (Some(a), Some(b)) if a < b)
}

fn condition(type_: &str, status: &str, reason: Option<&str>, now: Timestamp) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.map(str::to_owned),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    }
}

/// Sets the given conditions, keeping the others (and the transition time of those whose
/// status does not change).
fn set_conditions(status: &mut PodStatus, wanted: Vec<PodCondition>) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    for new in wanted {
        match conditions.iter_mut().find(|c| c.type_ == new.type_) {
            Some(old) if old.status == new.status => {
                old.reason = new.reason;
                old.message = new.message;
            }
            Some(old) => *old = new,
            None => conditions.push(new),
        }
    }
}

/// The status of a pod that starts running now.
fn running_status(pod: &Pod, host_ip: Ipv4Addr, pod_ip: Ipv4Addr, now: Timestamp) -> PodStatus {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let mut status = pod.status.clone().unwrap_or_default();
    status.phase = Some("Running".to_owned());
    status.start_time = Some(Time(now));
    status.host_ip = Some(host_ip.to_string());
    status.host_ips = Some(vec![HostIP { ip: host_ip.to_string() }]);
    status.pod_ip = Some(pod_ip.to_string());
    status.pod_ips = Some(vec![PodIP { ip: pod_ip.to_string() }]);
    set_conditions(
        &mut status,
        ["PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"]
            .into_iter()
            .map(|type_| condition(type_, "True", None, now))
            .collect(),
    );
    let spec = pod.spec.as_ref();
    status.init_container_statuses = spec.and_then(|s| s.init_containers.as_ref()).map(|inits| {
        inits
            .iter()
            .map(|c| {
                let terminated = ContainerStateTerminated {
                    container_id: Some(container_id(uid, &c.name, now)),
                    exit_code: 0,
                    reason: Some("Completed".to_owned()),
                    started_at: Some(Time(now)),
                    finished_at: Some(Time(now)),
                    ..Default::default()
                };
                started_container(
                    uid,
                    c,
                    now,
                    false,
                    ContainerState { terminated: Some(terminated), ..Default::default() },
                )
            })
            .collect()
    });
    status.container_statuses = Some(
        spec.map(|s| s.containers.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let running = ContainerStateRunning { started_at: Some(Time(now)) };
                started_container(uid, c, now, true, ContainerState { running: Some(running), ..Default::default() })
            })
            .collect(),
    );
    status
}

/// A ready container's status in `state` (init containers have run and are not `started`).
fn started_container(
    uid: &str,
    c: &Container,
    now: Timestamp,
    started: bool,
    state: ContainerState,
) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: c.image.clone().unwrap_or_default(),
        container_id: Some(container_id(uid, &c.name, now)),
        ready: true,
        started: Some(started),
        state: Some(state),
        ..Default::default()
    }
}

/// The status of a pod the kubelet refuses to start, as the real kubelet writes it: `Failed`
/// with the rejection's reason and message.
fn rejected_status(pod: &Pod, rejection: &Rejection, now: Timestamp) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    status.phase = Some("Failed".to_owned());
    status.reason = Some(rejection.reason.clone());
    status.message = Some(rejection.message.clone());
    status.start_time.get_or_insert(Time(now));
    status
}

/// The status of a pod that ends now.
fn terminal_status(pod: &Pod, ending: Ending, now: Timestamp) -> PodStatus {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let mut status = pod.status.clone().unwrap_or_default();
    let started = started_at(pod).unwrap_or(now);
    let (phase, exit_code, reason, message, pod_reason) = match ending {
        Ending::Succeeded => ("Succeeded", 0, "Completed", None, "PodCompleted"),
        Ending::Failed => ("Failed", 1, "Error", None, "PodFailed"),
        Ending::Killed => {
            ("Failed", KILLED_EXIT_CODE, "Error", Some("stopped by the fake kubelet: the pod was deleted"), "PodFailed")
        }
    };
    status.phase = Some(phase.to_owned());
    set_conditions(
        &mut status,
        ["ContainersReady", "Ready"]
            .into_iter()
            .map(|type_| condition(type_, "False", Some(pod_reason), now))
            .collect(),
    );
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let previous = status.container_statuses.take().unwrap_or_default();
    status.container_statuses = Some(
        containers
            .iter()
            .map(|c| {
                let old = previous.iter().find(|s| s.name == c.name);
                let id =
                    old.and_then(|s| s.container_id.clone()).unwrap_or_else(|| container_id(uid, &c.name, started));
                ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    image_id: c.image.clone().unwrap_or_default(),
                    container_id: Some(id.clone()),
                    ready: false,
                    started: Some(false),
                    restart_count: old.map_or(0, |s| s.restart_count),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            container_id: Some(id),
                            exit_code,
                            reason: Some(reason.to_owned()),
                            message: message.map(str::to_owned),
                            started_at: Some(Time(started)),
                            finished_at: Some(Time(now)),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            })
            .collect(),
    );
    status
}

impl Ctx {
    fn pods(&self, pod: &Pod) -> Api<Pod> {
        Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"))
    }

    async fn write_status(&self, pod: &Pod, status: PodStatus) -> Result<Pod, kube::Error> {
        let _permit = self.writes.acquire().await.expect("the semaphore is never closed");
        let mut body = pod.clone();
        body.status = Some(status);
        self.pods(pod).replace_status(&pod.name_any(), &PostParams::default(), &body).await
    }

    /// Deletes the pod with grace period 0: the pod if it is kept (finalizers), else `None`.
    async fn delete(&self, pod: &Pod) -> Result<Option<Pod>, kube::Error> {
        let _permit = self.writes.acquire().await.expect("the semaphore is never closed");
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        Ok(self.pods(pod).delete(&pod.name_any(), &params).await?.left())
    }

    /// Admits the pod on `node` if it fits beside the pods admitted there.
    fn admit(&self, node: u32, pod: &Pod) -> Result<(), Rejection> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let request = admission::pod_request(pod);
        self.admitted.lock().unwrap_or_else(|e| e.into_inner()).admit(node, uid, &request, self.fleet.allocatable())
    }

    /// Marks the pod `Failed` for `rejection` and records a Warning Event about it.
    async fn reject(&self, node: u32, pod: &Pod, rejection: &Rejection) -> Result<Pod, kube::Error> {
        let node = self.fleet.name(node);
        tracing::info!(pod = %pod.name_any(), %node, reason = %rejection.reason, "pod rejected on admission");
        let written = self.write_status(pod, rejected_status(pod, rejection, Timestamp::now())).await?;
        events::warn(&self.client, &written, &node, &rejection.reason, &rejection.message).await;
        Ok(written)
    }

    async fn get(&self, pod: &Pod) -> Result<Option<Pod>, kube::Error> {
        self.pods(pod).get_opt(&pod.name_any()).await
    }
}

/// Waits for a newer version of the pod (taken into `latest`) or for `until`; false once
/// the pod is gone (the router dropped the channel).
async fn wait(receiver: &mut watch::Receiver<Arc<Pod>>, latest: &mut Arc<Pod>, until: Option<Timestamp>) -> bool {
    let sleep = async {
        match until {
            Some(until) => {
                let left = until.duration_since(Timestamp::now());
                let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
                tokio::time::sleep(left).await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        changed = receiver.changed() => {
            if changed.is_err() {
                return false;
            }
            let incoming = receiver.borrow_and_update().clone();
            if !is_older(&incoming, latest) {
                *latest = incoming;
            }
            true
        }
        () = sleep => true,
    }
}

/// Drives one pod of the fleet until the router drops it.
async fn pod_task(ctx: Arc<Ctx>, node: u32, mut receiver: watch::Receiver<Arc<Pod>>) {
    let mut latest = receiver.borrow_and_update().clone();
    let mut backoff = Backoff::new();
    loop {
        let action = decide(&latest, Timestamp::now());
        let result = match action {
            Action::Wait(until) => {
                if !wait(&mut receiver, &mut latest, until).await {
                    return;
                }
                continue;
            }
            Action::Start => {
                // Every pod IP in use and every running pod is known once the first full list
                // was seen.
                let mut synced = ctx.synced.subscribe();
                if synced.wait_for(|synced| *synced).await.is_err() {
                    return;
                }
                match ctx.admit(node, &latest) {
                    Ok(()) => {
                        let uid = latest.metadata.uid.as_deref().unwrap_or_default();
                        let pod_ip = ctx.ips.lock().unwrap_or_else(|e| e.into_inner()).allocate(uid, node, &ctx.fleet);
                        let status = running_status(&latest, ctx.fleet.node_ip(node), pod_ip, Timestamp::now());
                        ctx.write_status(&latest, status).await.map(Some)
                    }
                    Err(rejection) => ctx.reject(node, &latest, &rejection).await.map(Some),
                }
            }
            Action::Finish(ending) => {
                let status = terminal_status(&latest, ending, Timestamp::now());
                ctx.write_status(&latest, status).await.map(Some)
            }
            Action::Delete => ctx.delete(&latest).await,
        };
        match result {
            Ok(Some(updated)) => {
                backoff.reset();
                latest = Arc::new(updated);
            }
            Ok(None) => {
                // Deleted: wait for the router to drop the pod.
                while wait(&mut receiver, &mut latest, None).await {}
                return;
            }
            Err(error) => {
                let failure = classify(&error);
                tracing::debug!(pod = %latest.name_any(), ?action, %error, ?failure, "pod write failed");
                let retry_at = match failure {
                    Failure::Conflict => match ctx.get(&latest).await {
                        Ok(Some(fresh)) if fresh.metadata.uid == latest.metadata.uid => {
                            latest = Arc::new(fresh);
                            continue;
                        }
                        Ok(_) => None, // Gone, or replaced: the router will drop this task.
                        Err(_) => Some(backoff.next_delay()),
                    },
                    Failure::NotFound => None,
                    Failure::Transient => Some(backoff.next_delay()),
                    Failure::Rejected => {
                        tracing::warn!(pod = %latest.name_any(), ?action, %error, "the API server rejected a fake kubelet write");
                        Some(REJECTED_RETRY)
                    }
                };
                let until = retry_at.map(|delay| {
                    Timestamp::now()
                        .checked_add(SignedDuration::try_from(delay).unwrap_or(SignedDuration::ZERO))
                        .unwrap_or(Timestamp::MAX)
                });
                if until.is_none() && action == Action::Delete {
                    // Delete found nothing: gone already.
                    while wait(&mut receiver, &mut latest, None).await {}
                    return;
                }
                if !wait(&mut receiver, &mut latest, until).await {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                resource_version: Some("5".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-0".into()),
                containers: vec![
                    Container { name: "main".into(), image: Some("busybox".into()), ..Default::default() },
                    Container { name: "side".into(), ..Default::default() },
                ],
                ..Default::default()
            }),
            status: Some(PodStatus { phase: Some("Pending".into()), ..Default::default() }),
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap()
    }

    #[test]
    fn durations_parse_as_seconds() {
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        for bad in ["", "-1", "1s", "abc", "inf", "NaN", "1e3", "."] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_pending_pod_starts_and_completes_after_its_duration() {
        let start = at(1_700_000_000_250);
        let mut p = pod(&[(DURATION_ANNOTATION, "0.5")]);
        assert_eq!(decide(&p, start), Action::Start);
        let status = running_status(&p, Ipv4Addr::new(172, 16, 0, 0), Ipv4Addr::new(10, 1, 0, 2), start);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.container_statuses.as_ref().unwrap().len(), 2);
        let ready = status.conditions.as_ref().unwrap();
        assert!(ready.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        p.status = Some(status);
        // Precise start, despite startTime's whole seconds.
        assert_eq!(started_at(&p), Some(start));
        let deadline = at(1_700_000_000_750);
        assert_eq!(decide(&p, at(1_700_000_000_300)), Action::Wait(Some(deadline)));
        assert_eq!(decide(&p, deadline), Action::Finish(Ending::Succeeded));
        let done = terminal_status(&p, Ending::Succeeded, deadline);
        assert_eq!(done.phase.as_deref(), Some("Succeeded"));
        let main = &done.container_statuses.as_ref().unwrap()[0];
        let terminated = main.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (0, Some("Completed")));
        p.status = Some(done);
        assert_eq!(decide(&p, deadline), Action::Wait(None));
    }

    #[test]
    fn outcome_failed_ends_failed_and_no_duration_runs_forever() {
        let start = at(1_700_000_000_000);
        let mut p = pod(&[(DURATION_ANNOTATION, "1"), (OUTCOME_ANNOTATION, "Failed")]);
        p.status = Some(running_status(&p, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, start));
        assert_eq!(decide(&p, at(1_700_000_001_000)), Action::Finish(Ending::Failed));
        let failed = terminal_status(&p, Ending::Failed, at(1_700_000_001_000));
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
        let main = &failed.container_statuses.as_ref().unwrap()[0];
        assert_eq!(main.state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 1);

        let mut forever = pod(&[]);
        forever.status = Some(running_status(&forever, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, start));
        assert_eq!(decide(&forever, at(1_800_000_000_000)), Action::Wait(None));
        let mut bad = pod(&[(DURATION_ANNOTATION, "soon")]);
        bad.status = forever.status.clone();
        assert_eq!(decide(&bad, at(1_800_000_000_000)), Action::Wait(None));
    }

    #[test]
    fn start_time_falls_back_to_whole_seconds() {
        let mut p = pod(&[(DURATION_ANNOTATION, "2")]);
        let mut status = running_status(&p, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, at(1_700_000_000_400));
        // As read back from the API: startTime truncated to the second.
        status.start_time = Some(Time(at(1_700_000_000_000)));
        for c in status.container_statuses.iter_mut().flatten() {
            c.container_id = Some("containerd://abc".into());
        }
        p.status = Some(status);
        assert_eq!(started_at(&p), Some(at(1_700_000_000_000)));
        assert_eq!(decide(&p, at(1_700_000_002_000)), Action::Finish(Ending::Succeeded));
    }

    #[test]
    fn a_rejected_pod_fails_with_the_reason_and_never_runs() {
        let p = pod(&[(DURATION_ANNOTATION, "1")]);
        let rejection = Rejection { reason: "OutOfcpu".into(), message: "Pod was rejected: ...".into() };
        let status = rejected_status(&p, &rejection, at(1_700_000_000_000));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some("OutOfcpu"));
        assert_eq!(status.message.as_deref(), Some("Pod was rejected: ..."));
        assert!(status.start_time.is_some() && status.container_statuses.is_none());
        let mut rejected = p;
        rejected.status = Some(status);
        assert_eq!(decide(&rejected, at(1_800_000_000_000)), Action::Wait(None));
    }

    #[test]
    fn deletion_is_finished_respecting_finalizers() {
        let mut p = pod(&[]);
        p.status = Some(running_status(&p, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, at(0)));
        p.metadata.deletion_timestamp = Some(Time(at(1000)));
        p.metadata.deletion_grace_period_seconds = Some(30);
        assert_eq!(decide(&p, at(1000)), Action::Delete);
        p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        assert_eq!(decide(&p, at(1000)), Action::Finish(Ending::Killed));
        p.status = Some(terminal_status(&p, Ending::Killed, at(1000)));
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Failed"));
        assert_eq!(decide(&p, at(1000)), Action::Delete);
        p.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(decide(&p, at(1000)), Action::Wait(None));
    }

    #[test]
    fn a_pod_with_a_stop_duration_runs_on_until_it_has_stopped() {
        let mut p = pod(&[(STOP_ANNOTATION, "20")]);
        p.status = Some(running_status(&p, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, at(0)));
        // Deleted at 1,000 s with a 30 s grace period: it stops at 1,020 s.
        p.metadata.deletion_timestamp = Some(Time(at(1_030_000)));
        p.metadata.deletion_grace_period_seconds = Some(30);
        assert_eq!(decide(&p, at(1_000_000)), Action::Wait(Some(at(1_020_000))));
        assert_eq!(decide(&p, at(1_020_000)), Action::Delete);
        // Never beyond its grace period.
        p.metadata.annotations = Some([(STOP_ANNOTATION.to_string(), "600".to_string())].into());
        assert_eq!(decide(&p, at(1_000_000)), Action::Wait(Some(at(1_030_000))));
        // Told to stop now, it does.
        p.metadata.annotations = Some([(STOP_ANNOTATION.to_string(), "0".to_string())].into());
        assert_eq!(decide(&p, at(1_000_000)), Action::Delete);
        // With finalizers it is made terminal once stopped, not before.
        p.metadata.annotations = Some([(STOP_ANNOTATION.to_string(), "20".to_string())].into());
        p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        assert_eq!(decide(&p, at(1_000_000)), Action::Wait(Some(at(1_020_000))));
        assert_eq!(decide(&p, at(1_025_000)), Action::Finish(Ending::Killed));
    }

    #[test]
    fn stale_versions_are_recognised() {
        let newer = pod(&[]);
        let mut older = pod(&[]);
        older.metadata.resource_version = Some("4".into());
        assert!(is_older(&older, &newer));
        assert!(!is_older(&newer, &older));
        older.metadata.resource_version = Some("opaque".into());
        assert!(!is_older(&older, &newer));
    }

    #[test]
    fn pod_ips_are_unique_per_node_and_reused_after_release() {
        let fleet =
            Fleet::new(&crate::KubeletConfig { nodes: 2, name_prefix: "node-".into(), ..Default::default() }).unwrap();
        let mut pool = IpPool::default();
        pool.record("running", 0, Ipv4Addr::new(10, 1, 0, 2), &fleet);
        let a = pool.allocate("a", 0, &fleet);
        assert_eq!(a, Ipv4Addr::new(10, 1, 0, 3));
        assert_eq!(pool.allocate("a", 0, &fleet), a);
        assert_eq!(pool.allocate("b", 1, &fleet), Ipv4Addr::new(10, 1, 1, 2));
        pool.release("running");
        assert_eq!(pool.allocate("c", 0, &fleet), Ipv4Addr::new(10, 1, 0, 2));
        // An IP outside the node's subnet is not recorded.
        pool.record("d", 0, Ipv4Addr::new(192, 0, 2, 1), &fleet);
        assert!(!pool.by_uid.contains_key("d"));
    }
}
