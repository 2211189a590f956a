//! Leader election against a real kube-apiserver (through the fault proxy of drover-envtest): one leader among candidates, fast
//! handover on stop, handover only after expiry on a crash, step-down before expiry when
//! renewals fail, no two leaders across an API server restart.
//!
//! Short durations throughout: a 1 s lease renewed every 300 ms, so a leader acts until 700 ms
//! after its last successful renewal.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_envtest::Server;
use drover_k8s::leader::{self, LeaderConfig, LeaderHandle, LeaderStatus};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};

const LEASE: Duration = Duration::from_secs(1);
const RENEW: Duration = Duration::from_millis(300);
const NS: &str = "kube-system";

fn config(name: &str, identity: &str) -> LeaderConfig {
    LeaderConfig {
        lease_name: name.to_string(),
        namespace: NS.to_string(),
        identity: identity.to_string(),
        lease_duration: LEASE,
        renew_period: RENEW,
    }
}

/// A real API server; `None` when the test is skipped (no control-plane binaries).
async fn server() -> Option<Server> {
    Server::start().await
}

async fn lease(server: &Server, name: &str) -> LeaseSpec {
    let api: Api<Lease> = Api::namespaced(server.client(), NS);
    api.get(name).await.expect("lease readable").spec.expect("lease has a spec")
}

/// Polls `f` every 5 ms until it holds or `limit` passes; returns the time it took.
async fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    f().then(|| start.elapsed())
}

/// Samples candidates' `is_leader()` every 10 ms on its own thread.
struct Sampler {
    stop: Arc<AtomicBool>,
    overlaps: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(statuses: Vec<LeaderStatus>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(AtomicUsize::new(0));
        let (s, o, n) = (stop.clone(), overlaps.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let leaders = statuses.iter().filter(|st| st.is_leader()).count();
                if leaders > 1 {
                    o.fetch_add(1, Ordering::Relaxed);
                }
                n.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Sampler { stop, overlaps, samples, thread }
    }

    /// Stops sampling; returns (samples with two or more leaders, samples).
    fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler thread");
        (self.overlaps.load(Ordering::Relaxed), self.samples.load(Ordering::Relaxed))
    }
}

/// Spawns `a`, waits until it leads, then spawns `b` (so the leader is known).
async fn leader_and_follower(server: &Server, name: &str) -> (LeaderHandle, LeaderHandle) {
    let a = leader::spawn(server.client(), config(name, "a"));
    wait_until(Duration::from_secs(5), || a.is_leader()).await.expect("a leads");
    let b = leader::spawn(server.client(), config(name, "b"));
    tokio::time::sleep(RENEW).await;
    assert!(a.is_leader() && !b.is_leader(), "a keeps the lease, b follows");
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_one_of_two_leads_and_the_record_is_kept() {
    let Some(server) = server().await else { return };
    let a = leader::spawn(server.client(), config("two", "a"));
    let b = leader::spawn(server.client(), config("two", "b"));
    wait_until(Duration::from_secs(5), || a.is_leader() || b.is_leader()).await.expect("someone leads");
    let sampler = Sampler::start(vec![a.status(), b.status()]);
    let (leader, follower) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    let first = lease(&server, "two").await;
    // Several renew periods: the same one leads throughout.
    for _ in 0..30 {
        assert!(leader.is_leader(), "the leader keeps leading");
        assert!(!follower.is_leader(), "the follower never leads");
        assert!(leader.flag().load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (overlaps, samples) = sampler.finish();
    assert_eq!(overlaps, 0, "two leaders at once in {overlaps} of {samples} samples");
    let later = lease(&server, "two").await;
    assert_eq!(later.holder_identity.as_deref(), Some(leader.identity()));
    assert_eq!(later.lease_duration_seconds, Some(1));
    assert_eq!(later.lease_transitions, Some(0), "created by the leader: no transition yet");
    assert_eq!(later.acquire_time, first.acquire_time, "acquireTime stays while renewing");
    assert!(later.renew_time > first.renew_time, "renewTime advances");
    assert!(later.acquire_time.is_some());
    a.stop().await;
    b.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_the_leader_releases_and_hands_over_before_the_lease_could_expire() {
    let Some(server) = server().await else { return };
    let (a, b) = leader_and_follower(&server, "handover").await;
    let mut changes = a.subscribe();
    let started = Instant::now();
    a.stop().await;
    assert!(!*changes.borrow_and_update(), "a no longer leads once stopped");
    let released = lease(&server, "handover").await;
    // b may already have taken it; if not, the lease is released.
    assert!(released.holder_identity.is_none() || released.holder_identity.as_deref() == Some("b"));
    let took = wait_until(Duration::from_secs(3), || b.is_leader()).await.expect("b takes over");
    let total = started.elapsed();
    // Faster than any expiry-based takeover could be: the release, not the lease running out,
    // handed it over (the follower polls every half renew period).
    assert!(total < LEASE - RENEW, "handover took {total:?} (b saw the release after {took:?})");
    let spec = lease(&server, "handover").await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    b.stop().await;
    let spec = lease(&server, "handover").await;
    assert_eq!(spec.holder_identity, None, "stop clears holderIdentity");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_leader_is_replaced_only_after_its_lease_expires() {
    let Some(server) = server().await else { return };
    let (a, b) = leader_and_follower(&server, "crash").await;
    let a_status = a.status();
    let sampler = Sampler::start(vec![a.status(), b.status()]);
    let killed = Instant::now();
    a.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let last = lease(&server, "crash").await;
    assert_eq!(last.holder_identity.as_deref(), Some("a"));
    let stepped = wait_until(Duration::from_secs(2), || !a_status.is_leader()).await.expect("a's deadline passes");
    assert!(stepped <= LEASE - RENEW + Duration::from_millis(100), "a stopped acting {stepped:?} after the kill");
    wait_until(Duration::from_secs(5), || b.is_leader()).await.expect("b takes over");
    let handover = killed.elapsed();
    let (overlaps, samples) = sampler.finish();
    assert_eq!(overlaps, 0, "two leaders at once in {overlaps} of {samples} samples");
    let now = lease(&server, "crash").await;
    assert_eq!(now.holder_identity.as_deref(), Some("b"));
    assert_eq!(now.lease_transitions, Some(1));
    let expired_at = last.renew_time.expect("renewTime").0 + SignedDuration::from_secs(1);
    let acquired = now.acquire_time.expect("acquireTime").0;
    assert!(acquired >= expired_at, "b acquired at {acquired}, before a's lease expired at {expired_at}");
    assert!(handover < LEASE + 2 * RENEW, "handover after a crash took {handover:?}");
    b.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_renewals_fail_steps_down_before_its_lease_expires() {
    let Some(server) = server().await else { return };
    let (a, b) = leader_and_follower(&server, "failing").await;
    let sampler = Sampler::start(vec![a.status(), b.status()]);
    let mut changes = a.subscribe();
    changes.borrow_and_update();
    server.faults().fail_next_writes("leases", 100_000, 500);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), changes.changed()).await.expect("a steps down").unwrap();
    let stepped_wall = Timestamp::now();
    let stepped = started.elapsed();
    assert!(!a.is_leader() && !*changes.borrow());
    let spec = lease(&server, "failing").await; // reads are not faulted
    assert_eq!(spec.holder_identity.as_deref(), Some("a"), "nobody could write the lease");
    let expires = spec.renew_time.expect("renewTime").0 + SignedDuration::from_secs(1);
    assert!(stepped_wall < expires, "stepped down at {stepped_wall}, after the lease expired at {expires}");
    assert!(stepped <= LEASE - RENEW + Duration::from_millis(100), "stepped down {stepped:?} after the failures began");
    // Writes work again: exactly one leads (a resumes, or b took the expired lease).
    server.faults().clear();
    wait_until(Duration::from_secs(5), || a.is_leader() || b.is_leader()).await.expect("someone leads again");
    tokio::time::sleep(RENEW).await;
    let (overlaps, samples) = sampler.finish();
    assert_eq!(overlaps, 0, "two leaders at once in {overlaps} of {samples} samples");
    assert!(a.is_leader() ^ b.is_leader());
    a.stop().await;
    b.stop().await;
    server.stop().await;
}

/// 500s and conflicts are retried at once; a 429 is retried by kube's client itself after the
/// server's `Retry-After` (1 s here), so this test uses a 6 s lease renewed every 2 s (acting
/// deadline 4 s after a renewal), leaving room for a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_few_failed_renewals_are_retried_within_the_deadline() {
    let Some(server) = server().await else { return };
    let slow = |identity: &str| LeaderConfig {
        lease_duration: Duration::from_secs(6),
        renew_period: Duration::from_secs(2),
        ..config("blips", identity)
    };
    let a = leader::spawn(server.client(), slow("a"));
    wait_until(Duration::from_secs(5), || a.is_leader()).await.expect("a leads");
    let b = leader::spawn(server.client(), slow("b"));
    let mut changes = a.subscribe();
    changes.borrow_and_update();
    for (count, status) in [(3, 500), (1, 409), (1, 429)] {
        server.faults().fail_next_writes("leases", count, status);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(a.is_leader() && !b.is_leader(), "a kept leading through {count} × {status}");
    }
    assert!(!changes.has_changed().unwrap(), "leadership never flapped");
    let spec = lease(&server, "blips").await;
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(0));
    a.stop().await;
    b.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_beyond_the_deadline_makes_the_leader_step_down_in_time() {
    let Some(server) = server().await else { return };
    let (a, b) = leader_and_follower(&server, "slow").await;
    let sampler = Sampler::start(vec![a.status(), b.status()]);
    let mut changes = a.subscribe();
    changes.borrow_and_update();
    server.faults().set_latency(Duration::from_millis(1500));
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), changes.changed()).await.expect("a steps down").unwrap();
    let stepped = started.elapsed();
    assert!(!a.is_leader());
    // The last renewal that succeeded was sent before the latency began.
    assert!(stepped <= LEASE - RENEW + Duration::from_millis(100), "stepped down {stepped:?} after the latency began");
    server.faults().clear();
    wait_until(Duration::from_secs(5), || a.is_leader() || b.is_leader()).await.expect("someone leads again");
    tokio::time::sleep(RENEW).await;
    let (overlaps, samples) = sampler.finish();
    assert_eq!(overlaps, 0, "two leaders at once in {overlaps} of {samples} samples");
    assert!(a.is_leader() ^ b.is_leader());
    a.stop().await;
    b.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_api_server_restart_does_not_make_two_leaders() {
    let Some(mut server) = server().await else { return };
    let (a, b) = leader_and_follower(&server, "restart").await;
    let sampler = Sampler::start(vec![a.status(), b.status()]);
    for _ in 0..3 {
        server.restart().await.expect("restart");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    tokio::time::sleep(LEASE).await;
    let (overlaps, samples) = sampler.finish();
    assert_eq!(overlaps, 0, "two leaders at once in {overlaps} of {samples} samples");
    wait_until(Duration::from_secs(5), || a.is_leader() || b.is_leader()).await.expect("someone leads");
    assert!(a.is_leader() ^ b.is_leader());
    let spec = lease(&server, "restart").await;
    let leader = if a.is_leader() { "a" } else { "b" };
    assert_eq!(spec.holder_identity.as_deref(), Some(leader));
    a.stop().await;
    b.stop().await;
    server.stop().await;
}

/// A lease left by a holder that is gone: taken at once if its renewTime is long past, after
/// one lease duration if it looks fresh (never renewed again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abandoned_leases_are_taken_over_when_expired() {
    let Some(server) = server().await else { return };
    let api: Api<Lease> = Api::namespaced(server.client(), NS);
    let ghost = |name: &str, renewed: Timestamp| Lease {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some("ghost".into()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(MicroTime(renewed)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(4),
            ..Default::default()
        }),
    };
    let long_ago = Timestamp::now() - SignedDuration::from_secs(3600);
    api.create(&PostParams::default(), &ghost("stale", long_ago)).await.unwrap();
    api.create(&PostParams::default(), &ghost("fresh", Timestamp::now())).await.unwrap();
    let stale = leader::spawn(server.client(), config("stale", "a"));
    let fresh = leader::spawn(server.client(), config("fresh", "a"));
    let took = wait_until(Duration::from_secs(3), || stale.is_leader()).await.expect("stale lease taken");
    assert!(took < RENEW, "an expired lease is taken at once ({took:?})");
    assert!(!fresh.is_leader(), "a fresh lease is respected");
    let took = wait_until(Duration::from_secs(3), || fresh.is_leader()).await.expect("fresh lease taken after expiry");
    assert!(took >= Duration::from_millis(500), "taken after {took:?}, before it could have expired");
    for name in ["stale", "fresh"] {
        let spec = lease(&server, name).await;
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(5), "{name}: one more transition");
    }
    stale.stop().await;
    fresh.stop().await;
    server.stop().await;
}

#[test]
fn configuration_is_checked() {
    let mut c = LeaderConfig::new("drover-scheduler", "drover-system");
    assert_eq!(c.lease_duration, Duration::from_secs(15));
    assert_eq!(c.renew_period, Duration::from_secs(5));
    assert!(c.identity.contains(&std::process::id().to_string()));
    assert!(c.validate().is_ok());
    c.renew_period = c.lease_duration;
    assert!(c.validate().is_err());
}
