//! "When will my job start?" against a real kube-apiserver with a fake kubelet: a waiting
//! gang's `status.forecast` from declared run times (exact, within a cycle), from run times
//! learned from completed jobs (Unknown until two runs of a name have completed), the queue's
//! learned history in `status.runTimes`, recorded once per run whichever scheduler leads, and
//! the range a start falls in, from the spread of another namespace's learned runs.

use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::forecast::{eta, ForecastBasis};
use drover_api::crd::podgroup::{PodGroup, PodGroupPhase, PodGroupSpec};
use drover_api::crd::queue::{Queue, QueueSpec};
use drover_envtest::{eventually, Server};
use drover_k8s::convert::POD_GROUP_ANNOTATION;
use drover_k8s::scheduler::{self, NoopObserver, SchedulerOptions};
use drover_kubelet::{self as kubelet, KubeletConfig, DURATION_ANNOTATION};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::oneshot;

const NS: &str = "default";
/// Seconds to wait for what the scheduler does within a few cycles.
const T: u64 = 15;
/// The scheduler's period in these tests.
const PERIOD: Duration = Duration::from_millis(200);

struct Env {
    server: Server,
    client: Client,
    kubelet: oneshot::Sender<()>,
}

impl Env {
    /// A real API server with Drover's CRDs, `nodes` fake nodes of 8 GPUs and queue `q`;
    /// `None` when the test is skipped (no control-plane binaries).
    async fn new(nodes: u32) -> Option<Env> {
        let server = Server::start().await?;
        let client = server.client();
        drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
        drover_k8s::charge::install_guard(&client, "drover-test").await.expect("the charge guard is accepted");
        let (kubelet, stop) = oneshot::channel::<()>();
        let kc = client.clone();
        tokio::spawn(async move {
            let _ = kubelet::run(kc, KubeletConfig::gpu_nodes(nodes), async {
                let _ = stop.await;
            })
            .await;
        });
        let api: Api<Node> = Api::all(client.clone());
        eventually(T, "the nodes registered", || async {
            api.list(&ListParams::default()).await.ok().filter(|l| l.items.len() == nodes as usize)
        })
        .await;
        let mut spec = QueueSpec { over_quota_weight: 1, reclaimable: true, ..QueueSpec::default() };
        spec.deserved.insert("nvidia.com/gpu".into(), Quantity((8 * nodes).to_string()));
        Api::<Queue>::all(client.clone()).create(&PostParams::default(), &Queue::new("q", spec)).await.expect("queue");
        Some(Env { server, client, kubelet })
    }

    /// Starts a scheduler; it runs until the returned sender is dropped or sent to.
    fn start_scheduler(&self) -> oneshot::Sender<()> {
        let (tx, rx) = oneshot::channel::<()>();
        let options = SchedulerOptions { period: PERIOD, ..SchedulerOptions::default() };
        let client = self.client.clone();
        tokio::spawn(async move {
            let stop = async {
                let _ = rx.await;
            };
            scheduler::run(client, options, || true, Arc::new(NoopObserver), stop).await.expect("the scheduler runs");
        });
        tx
    }

    /// A gang `name` of one pod of 8 GPUs in queue `q`, its pod declaring `deadline`
    /// (`activeDeadlineSeconds`) and running `duration` seconds on the fake kubelet (forever
    /// when none).
    async fn gang(&self, name: &str, deadline: Option<i64>, duration: Option<&str>) {
        self.gang_of(name, 1, deadline, duration).await;
    }

    /// A gang `name` of `n` pods `{name}-{i}` of 8 GPUs each, as [`Env::gang`].
    async fn gang_of(&self, name: &str, n: u32, deadline: Option<i64>, duration: Option<&str>) {
        let spec = PodGroupSpec { min_member: n, queue: Some("q".into()), ..PodGroupSpec::default() };
        let mut group = PodGroup::new(name, spec);
        group.metadata.namespace = Some(NS.into());
        self.groups().create(&PostParams::default(), &group).await.expect("group created");
        let mut annotations = json!({POD_GROUP_ANNOTATION: name});
        if let Some(d) = duration {
            annotations[DURATION_ANNOTATION] = json!(d);
        }
        for i in 0..n {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-{i}"), "annotations": annotations},
                "spec": {"schedulerName": "drover", "activeDeadlineSeconds": deadline, "containers": [{
                    "name": "main", "image": "trainer",
                    "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
                }]},
            }))
            .expect("pod json");
            self.pods().create(&PostParams::default(), &pod).await.expect("pod created");
        }
    }

    fn groups(&self) -> Api<PodGroup> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// The pod's start (Unix seconds), once the kubelet has started it.
    async fn started(&self, pod: &str) -> i64 {
        eventually(T, &format!("{pod} started"), || async {
            Some(self.pods().get(pod).await.ok()?.status?.start_time?.0.as_second())
        })
        .await
    }

    /// Deletes the gang `name` and its pod, waiting until both are gone.
    async fn remove(&self, name: &str) {
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
        let _ = self.pods().delete(&format!("{name}-0"), &now).await;
        let _ = self.groups().delete(name, &DeleteParams::default()).await;
        eventually(T, &format!("{name} gone"), || async {
            let pod = self.pods().get_opt(&format!("{name}-0")).await.ok()?;
            let group = self.groups().get_opt(name).await.ok()?;
            (pod.is_none() && group.is_none()).then_some(())
        })
        .await;
    }

    /// The run time recorded for the completed gang `name`, once recorded.
    async fn recorded(&self, name: &str) -> i64 {
        eventually(T, &format!("{name} completed and recorded"), || async {
            let status = self.groups().get(name).await.ok()?.status?;
            (status.phase == PodGroupPhase::Completed).then_some(status.recorded_run_time_seconds?)
        })
        .await
    }

    /// Queue `q`'s learned run times of jobs named `name`.
    async fn samples(&self, name: &str) -> Vec<i64> {
        let queue = Api::<Queue>::all(self.client.clone()).get("q").await.expect("queue q");
        let entries = queue.status.map(|s| s.run_times).unwrap_or_default();
        entries.into_iter().find(|e| e.name.as_deref() == Some(name)).map(|e| e.seconds).unwrap_or_default()
    }

    async fn stop(self) {
        let _ = self.kubelet.send(());
        self.server.stop().await;
    }
}

/// A gang behind one that declares its run time shows when that run ends as its expected
/// start (within a cycle: the end is declared, so exactly), its position, and the basis
/// `DeclaredRunTimes`; a gang behind it that declares one too is expected when both have run.
/// A gang that starts loses its forecast, and the next moves up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_behind_a_declared_run_time_expects_its_end() {
    let Some(env) = Env::new(1).await else { return };
    let _scheduler = env.start_scheduler();
    env.gang("long", Some(3600), None).await;
    let started = env.started("long-0").await;
    env.gang("next", Some(600), None).await;
    env.gang("third", None, None).await;
    let forecast = |name: &'static str| {
        let env = &env;
        async move { env.groups().get(name).await.ok()?.status?.forecast }
    };
    let next = eventually(T, "next shows its forecast", || forecast("next")).await;
    assert_eq!((next.queue_position, next.position, next.basis), (1, 1, ForecastBasis::DeclaredRunTimes));
    let eta = next.expected_start.expect("an expected start").0.as_second();
    let cycle = PERIOD.as_secs().max(1) as i64;
    assert!((eta - (started + 3600)).abs() <= cycle, "next starts when long's deadline ends it: {eta} vs {started}");
    assert!(next.to_start.is_some_and(|t| !t.is_empty()), "what would let it start now");
    let third = eventually(T, "third shows its forecast", || async {
        forecast("third").await.filter(|f| f.expected_start.is_some())
    })
    .await;
    assert_eq!((third.queue_position, third.position, third.basis), (2, 2, ForecastBasis::DeclaredRunTimes));
    let eta = third.expected_start.expect("an expected start").0.as_second();
    assert!((eta - (started + 3600 + 600)).abs() <= cycle, "third starts after next's declared 600 s: {eta}");

    env.remove("long").await;
    eventually(T, "next runs and shows no forecast", || async {
        let status = env.groups().get("next").await.ok()?.status?;
        (status.phase == PodGroupPhase::Running && status.forecast.is_none()).then_some(())
    })
    .await;
    let third = eventually(T, "third moves up", || async { forecast("third").await.filter(|f| f.position == 1) }).await;
    assert_eq!(third.queue_position, 1);
    env.stop().await;
}

/// A gang behind a job that declares no run time has no known start until two runs of that
/// job's name have completed: each completed run is recorded once in the queue's
/// `status.runTimes` (its pods' kubelet-written start and finish), marked on its group, and not
/// recorded again by a new scheduler; then a gang behind the third run shows
/// `LearnedRunTimes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_behind_a_job_run_twice_before_expects_its_learned_end() {
    let Some(env) = Env::new(1).await else { return };
    let scheduler = env.start_scheduler();
    env.gang("train", None, Some("2")).await;
    let first = env.recorded("train").await;
    assert!((1..=4).contains(&first), "a 2 s run recorded as {first} s");
    assert_eq!(env.samples("train").await, vec![first]);
    env.remove("train").await;

    env.gang("train", None, Some("3")).await;
    env.started("train-0").await;
    env.gang("after", None, Some("1")).await;
    let unknown =
        eventually(T, "after shows its forecast", || async { env.groups().get("after").await.ok()?.status?.forecast })
            .await;
    assert_eq!(unknown.basis, ForecastBasis::Unknown, "one run of train is not enough: {unknown:?}");
    assert_eq!(unknown.expected_start, None);
    let second = env.recorded("train").await;
    assert_eq!(env.samples("train").await, vec![first, second]);
    env.recorded("after").await;

    // A new leader records nothing twice.
    drop(scheduler);
    let _scheduler = env.start_scheduler();
    tokio::time::sleep(PERIOD * 5).await;
    assert_eq!(env.samples("train").await, vec![first, second], "a run is recorded once");
    env.remove("train").await;

    env.gang("train", None, None).await;
    let started = env.started("train-0").await;
    env.gang("later", None, None).await;
    let learned = eventually(T, "later shows a learned forecast", || async {
        env.groups().get("later").await.ok()?.status?.forecast.filter(|f| f.basis == ForecastBasis::LearnedRunTimes)
    })
    .await;
    let eta = learned.expected_start.expect("a learned start").0.as_second();
    assert!(eta >= started, "after train's third run has begun: {eta} vs {started}");
    assert_eq!((learned.queue_position, learned.position), (1, 1));
    env.stop().await;
}

/// A learned run time is a loan, not a right: a job admitted on one into capacity reserved for
/// a gang gets `status.borrowedUntil` (the gang's start), keeps it while it runs, and when it
/// still runs then it is evicted (`Overran`) and the gang starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_admitted_into_reserved_capacity_on_a_learned_run_time_gives_it_back_when_due() {
    let Some(env) = Env::new(2).await else { return };
    let _scheduler = env.start_scheduler();
    for _ in 0..2 {
        env.gang("quick", None, Some("1")).await;
        env.recorded("quick").await;
        env.remove("quick").await;
    }
    // long holds one node until its declared end; big needs both, and reserves them from then.
    env.gang("long", Some(12), Some("12")).await;
    let due = env.started("long-0").await + 12;
    env.gang_of("big", 2, None, None).await;
    eventually(T, "big reserves both nodes", || async {
        let r = env.groups().get("big").await.ok()?.status?.reservation?;
        (r.nodes.len() == 2).then_some(())
    })
    .await;
    // quick, expected to end in a second or two, borrows the idle reserved node.
    env.gang("quick", None, None).await;
    let until = eventually(T, "quick runs on a loan", || async {
        let status = env.groups().get("quick").await.ok()?.status?;
        (status.phase == PodGroupPhase::Running).then_some(status.borrowed_until?.0.as_second())
    })
    .await;
    assert!((until - due).abs() <= 1, "the loan is due when big is: {until} vs {due}");
    eventually(T + 12, "quick evicted for big once due", || async {
        let gone = env.pods().get_opt("quick-0").await.ok()?.is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        let big = env.groups().get("big").await.ok()?.status?;
        (gone && big.phase == PodGroupPhase::Running).then_some(())
    })
    .await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.client.clone(), NS);
    let listed = events.list(&ListParams::default()).await.expect("events");
    assert!(listed.items.iter().any(|e| e.reason.as_deref() == Some("Overran")), "an Overran Event says why");
    env.stop().await;
}

/// A gang behind a job of another namespace whose runs were learned as 100 s, 600 s and 3600 s
/// expects that job's median end, within the range its runs spread over (the latest a period
/// later, when the next cycle would start it), says it rests on another namespace's learned
/// run times, and shows all of it in the `ETA` column's field.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_behind_another_namespaces_learned_run_expects_it_within_the_runs_spread() {
    let Some(env) = Env::new(1).await else { return };
    let team_b: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-b"}})).expect("a namespace");
    Api::<Namespace>::all(env.client.clone()).create(&PostParams::default(), &team_b).await.expect("team-b");
    let updated = jiff::Timestamp::now().to_string();
    let history = json!({"status": {"runTimes": [
        {"namespace": "team-b", "name": "train", "seconds": [100, 600, 3600], "updated": updated}]}});
    let queues: Api<Queue> = Api::all(env.client.clone());
    queues.patch_status("q", &PatchParams::default(), &Patch::Merge(history)).await.expect("the history is written");
    let _scheduler = env.start_scheduler();

    let groups: Api<PodGroup> = Api::namespaced(env.client.clone(), "team-b");
    let spec = PodGroupSpec { min_member: 1, queue: Some("q".into()), ..PodGroupSpec::default() };
    groups.create(&PostParams::default(), &PodGroup::new("train", spec)).await.expect("group created");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train-0", "annotations": {POD_GROUP_ANNOTATION: "train"}},
        "spec": {"schedulerName": "drover", "containers": [{"name": "main", "image": "trainer",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]},
    }))
    .expect("pod json");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "team-b");
    pods.create(&PostParams::default(), &pod).await.expect("pod created");
    let started = eventually(T, "train started", || async {
        Some(pods.get("train-0").await.ok()?.status?.start_time?.0.as_second())
    })
    .await;

    env.gang("after", None, None).await;
    let f = eventually(T, "after shows a ranged forecast", || async {
        env.groups().get("after").await.ok()?.status?.forecast.filter(|f| f.latest_start.is_some())
    })
    .await;
    assert_eq!(f.basis, ForecastBasis::OtherNamespacesRunTimes, "{f:?}");
    let second =
        |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| t.as_ref().expect("a time").0.as_second();
    let (expected, earliest, latest) = (second(&f.expected_start), second(&f.earliest_start), second(&f.latest_start));
    let cycle = PERIOD.as_secs().max(1) as i64;
    assert!((expected - (started + 600)).abs() <= cycle, "the median run: {expected} vs {started}");
    assert!((earliest - (started + 100)).abs() <= cycle, "the shortest run: {earliest} vs {started}");
    assert!((latest - (started + 3600 + cycle)).abs() <= cycle, "the longest run and a period: {latest} vs {started}");
    let shown = eta(
        f.expected_start.as_ref().expect("a start"),
        f.earliest_start.as_ref().expect("an earliest"),
        f.latest_start.as_ref().expect("a latest"),
    );
    assert_eq!(f.eta.as_deref(), Some(shown.as_str()), "the ETA column's text");
    env.stop().await;
}
