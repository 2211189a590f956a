//! Quota accounting that tenants cannot unmake (issue 19), tried as a tenant on the real API
//! server with RBAC on: the chart installed with Helm, `drover scheduler` and `drover
//! controllers` run as the chart's ServiceAccounts, and team A's ServiceAccount `alice`
//! holding `edit` in `team-a` only (the set-up of `tenant.rs`, in `support/mod.rs`). Each test
//! is one way alice tried to get more than her queue allows by changing, after her pods were
//! bound, what links them to the group and queue charged for them:
//!
//! - deleting the PodGroup of bound pods;
//! - re-annotating bound pods (`scheduling.drover.dev/pod-group`) with another group's name,
//!   existing or not, for plain pods and for a Drover Job's pods; rewriting or removing the
//!   charge record itself (`scheduling.drover.dev/charge`), or creating a pod that carries one,
//!   which the chart's charge guard refuses;
//! - changing a running group's `spec.queue` (to a missing queue, to `default`) or its
//!   `priorityClassName` (to a missing class);
//! - raising a running group's priority to a non-preemptible class to keep borrowed GPUs;
//! - placing work in a Department's queue, or in `default` from a Project's namespace;
//! - feeding team B's learned run times with a group that names team B's queue.
//!
//! Each test also shows what alice may still do (her edits are accepted, her work in her own
//! queue runs once her quota allows) and checks what a user would notice: which pods are
//! bound, what team B gets, conditions and the queue's `status.allocated`.
//!
//! Without helm-python-sdk the tests print SKIPPED; `DROVER_REQUIRE_HELM` (set in CI) forbids
//! that.

mod support;

use drover_api::crd::department::Department;
use drover_api::crd::job::Job;
use drover_api::crd::podgroup::{Admission, PodGroup};
use drover_api::crd::project::Project;
use drover_api::crd::queue::Queue;
use drover_api::labels::CHARGE_ANNOTATION;
use drover_e2e::eventually;
use drover_k8s::charge::Charge;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{json, Value};
use support::{bound, create, job, pod, pod_group, queue, Drover, Tenancy, GROUP};

/// Team A's queue `team-a` deserves and is limited to 2 GPUs; team B's deserves 4.
fn team_a_limited_to_two() -> [Value; 2] {
    [queue("team-a", "team-a", "2", Some("2")), queue("team-b", "team-b", "4", None)]
}

impl Tenancy {
    /// Alice's PodGroup `group` (gang of `n`) in `queue`, with `n` pods `<group>-<i>` of one
    /// GPU each; waits until they are bound and returns their names.
    async fn bound_gang(&self, group: &str, queue: &str, n: u32) -> Vec<String> {
        self.submit_gang(group, queue, n).await;
        let names: Vec<String> = (0..n).map(|i| format!("{group}-{i}")).collect();
        for name in &names {
            self.bound_pod("team-a", name).await;
        }
        names
    }

    /// Alice's PodGroup `group` (gang of `n`) in `queue`, with `n` pods `<group>-<i>` of one
    /// GPU each.
    async fn submit_gang(&self, group: &str, queue: &str, n: u32) {
        create(&self.alice_api::<PodGroup>("team-a"), pod_group("team-a", group, queue, n))
            .await
            .expect("alice creates a PodGroup");
        let pods: Api<Pod> = self.alice_api("team-a");
        for i in 0..n {
            create(&pods, pod("team-a", &format!("{group}-{i}"), group, "1")).await.expect("alice creates a pod");
        }
    }

    /// Alice deletes `pods` of `team-a`; waits until they are gone.
    async fn delete_pods(&self, pods: &[String]) {
        let api: Api<Pod> = self.alice_api("team-a");
        for name in pods {
            api.delete(name, &DeleteParams::default()).await.expect("alice deletes her pod");
        }
        eventually(60, &format!("{pods:?} gone (logs in {})", self.logs), || async {
            for name in pods {
                if api.get_opt(name).await.ok()?.is_some() {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }

    /// Alice merge-patches the spec of her PodGroup `group`, then waits until the scheduler has
    /// seen the change (the group's `status.observedGeneration`).
    async fn patch_group_spec(&self, group: &str, spec: Value) {
        let groups: Api<PodGroup> = self.alice_api("team-a");
        let patched = groups
            .patch(group, &PatchParams::default(), &Patch::Merge(&json!({"spec": spec})))
            .await
            .expect("alice may edit her PodGroup");
        let generation = patched.metadata.generation;
        eventually(60, &format!("the scheduler saw the edit of {group} (logs in {})", self.logs), || async {
            let seen = groups.get(group).await.ok()?.status?.observed_generation;
            (seen >= generation).then_some(())
        })
        .await;
    }

    /// The admission record of the PodGroup `group` in `team-a`, once the scheduler wrote one.
    async fn admission(&self, group: &str) -> Admission {
        let groups: Api<PodGroup> = self.admin_api("team-a");
        eventually(60, &format!("status.admission of {group} (logs in {})", self.logs), || async {
            groups.get(group).await.ok()?.status?.admission
        })
        .await
    }

    /// The GPUs the Queue `name`'s status says are allocated, once it says any.
    async fn allocated_gpus(&self, name: &str) -> String {
        let queues: Api<Queue> = Api::all(self.admin());
        eventually(60, &format!("status.allocated of queue {name} (logs in {})", self.logs), || async {
            let status = queues.get(name).await.ok()?.status?;
            status.allocated.get("nvidia.com/gpu").map(|q| q.0.clone())
        })
        .await
    }

    /// The scheduler's charge record on the pod `name` of `team-a`.
    async fn charge_record(&self, name: &str) -> String {
        let pod = self.admin_api::<Pod>("team-a").get(name).await.expect("the pod");
        let record = Charge::of(&pod).unwrap_or_else(|| panic!("pod {name} has no charge record"));
        record.message()
    }
}

/// Alice re-annotates her pod `name` with the PodGroup name `group`.
async fn re_annotate(t: &Tenancy, name: &str, group: &str) {
    let pods: Api<Pod> = t.alice_api("team-a");
    let patch = json!({"metadata": {"annotations": {GROUP: group}}});
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("alice may annotate her pod");
}

/// Alice tries to charge her bound pod `name` to team B's queue, to remove its charge record
/// and to create a pod carrying a record of her choosing: the charge guard refuses each,
/// saying why.
async fn rewriting_the_record_is_refused(t: &Tenancy, name: &str) {
    let pods: Api<Pod> = t.alice_api("team-a");
    let forged = "queue=team-b podGroup=first priorityClass=";
    for (what, value) in [("rewrite", json!(forged)), ("remove", Value::Null)] {
        let patch = json!({"metadata": {"annotations": {CHARGE_ANNOTATION: value}}});
        let refused = pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        let message = refused.expect_err(&format!("alice may not {what} the charge record")).to_string();
        assert!(message.contains("may not be added, changed or removed"), "{what}: {message}");
    }
    let mut forging = pod("team-a", "forged", "first", "1");
    forging["metadata"]["annotations"][CHARGE_ANNOTATION] = json!(forged);
    let message = create(&pods, forging).await.expect_err("alice may not create a charged pod").to_string();
    assert!(message.contains("may not be created with the annotation"), "{message}");
}

/// Names of `pods` of `team-a`'s pods.
fn team_a(pods: &[String]) -> Vec<(&str, &str)> {
    pods.iter().map(|p| ("team-a", p.as_str())).collect()
}

// ---------------------------------------------------------------------------------------
// The attempts

/// Deleting the PodGroup of 2 bound pods (team A limited to 2 GPUs) does not take them out of
/// the quota: 2 more pods in a new group stay unbound and the queue still shows 2 GPUs
/// allocated; once alice deletes the first pods, the new ones bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_group_of_bound_pods_keeps_them_charged() {
    let Some(t) = Tenancy::start_with(Drover::Running, &team_a_limited_to_two()).await else { return };
    let first = t.bound_gang("first", "team-a", 2).await;
    let groups: Api<PodGroup> = t.alice_api("team-a");
    groups.delete("first", &DeleteParams::default()).await.expect("alice may delete her PodGroup");
    eventually(30, "the PodGroup gone", || async { groups.get_opt("first").await.ok()?.is_none().then_some(()) }).await;

    t.submit_gang("second", "team-a", 2).await;
    let second = ["second-0".to_string(), "second-1".to_string()];
    t.assert_never_bound(&team_a(&second), "pods of a deleted group left the quota").await;
    assert_eq!(t.allocated_gpus("team-a").await, "2", "team A's queue status (logs in {})", t.logs);

    t.delete_pods(&first).await;
    for name in &second {
        t.bound_pod("team-a", name).await;
    }
}

/// Re-annotating 2 bound pods with another group's name (an existing group in `default`, and
/// a group that does not exist) does not take them out of team A's quota: their charge record
/// still names their group, and 2 more pods stay unbound until alice deletes the first two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_annotating_bound_pods_keeps_them_charged() {
    let Some(t) = Tenancy::start_with(Drover::Running, &team_a_limited_to_two()).await else { return };
    let first = t.bound_gang("first", "team-a", 2).await;
    create(&t.alice_api::<PodGroup>("team-a"), pod_group("team-a", "decoy", "default", 1))
        .await
        .expect("alice creates a group in default");
    re_annotate(&t, &first[0], "decoy").await;
    re_annotate(&t, &first[1], "nowhere").await;

    t.submit_gang("second", "team-a", 2).await;
    let second = ["second-0".to_string(), "second-1".to_string()];
    t.assert_never_bound(&team_a(&second), "re-annotated pods left the quota").await;
    for name in &first {
        let record = t.charge_record(name).await;
        assert!(record.contains("queue=team-a podGroup=first "), "pod {name}: {record}");
    }
    assert_eq!(t.allocated_gpus("team-a").await, "2", "team A's queue status (logs in {})", t.logs);
    rewriting_the_record_is_refused(&t, &first[0]).await;
    let record = t.charge_record(&first[0]).await;
    assert!(record.contains("queue=team-a podGroup=first "), "after alice's tries: {record}");

    t.delete_pods(&first).await;
    for name in &second {
        t.bound_pod("team-a", name).await;
    }
}

/// The same with a Drover Job's pods: alice's Job of 2 runs, she re-annotates its pods (to a
/// group in `default` and to a missing group), and her second Job of 2 gets no bound pod until
/// she deletes the first Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_annotating_a_jobs_pods_keeps_them_charged() {
    let Some(t) = Tenancy::start_with(Drover::Running, &team_a_limited_to_two()).await else { return };
    let jobs: Api<Job> = t.alice_api("team-a");
    create(&jobs, job("team-a", "first", "team-a", "train", 2)).await.expect("alice submits a Job");
    t.running_job("team-a", "first", 2).await;
    create(&t.alice_api::<PodGroup>("team-a"), pod_group("team-a", "decoy", "default", 1))
        .await
        .expect("alice creates a group in default");
    re_annotate(&t, "first-worker-0", "decoy").await;
    re_annotate(&t, "first-worker-1", "nowhere").await;

    create(&jobs, job("team-a", "second", "team-a", "train", 2)).await.expect("alice submits a second Job");
    tokio::time::sleep(support::CYCLES).await;
    let pods: Api<Pod> = t.admin_api("team-a");
    let bound_now = bound(&pods).await;
    assert!(
        !bound_now.iter().any(|p| p.starts_with("second-")),
        "a Job's re-annotated pods left the quota: {bound_now:?} (logs in {})",
        t.logs
    );
    assert_eq!(t.allocated_gpus("team-a").await, "2", "team A's queue status (logs in {})", t.logs);

    // The garbage collector may take half a minute to start on a new control plane: alice
    // deletes the first Job's pods herself once the Job is gone.
    jobs.delete("first", &DeleteParams::background()).await.expect("alice may delete her Job");
    eventually(30, "the first Job gone", || async { jobs.get_opt("first").await.ok()?.is_none().then_some(()) }).await;
    t.delete_pods(&["first-worker-0".to_string(), "first-worker-1".to_string()]).await;
    t.running_job("team-a", "second", 2).await;
}

/// Changing a running group's `spec.queue` to a queue that does not exist, then to `default`,
/// does not move its pods out of team A's queue: its `status.admission` still names `team-a`,
/// and 2 more pods stay unbound until alice deletes the first two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_a_running_groups_queue_keeps_it_charged() {
    let Some(t) = Tenancy::start_with(Drover::Running, &team_a_limited_to_two()).await else { return };
    let first = t.bound_gang("first", "team-a", 2).await;
    assert_eq!(t.admission("first").await.queue, "team-a");
    t.submit_gang("second", "team-a", 2).await;
    let second = ["second-0".to_string(), "second-1".to_string()];
    for queue in ["missing", "default"] {
        t.patch_group_spec("first", json!({"queue": queue})).await;
        t.assert_never_bound(&team_a(&second), &format!("a running group moved to queue {queue:?} left team-a")).await;
        assert_eq!(t.admission("first").await.queue, "team-a", "after the move to {queue:?}");
    }
    assert_eq!(t.allocated_gpus("team-a").await, "2", "team A's queue status (logs in {})", t.logs);

    t.delete_pods(&first).await;
    for name in &second {
        t.bound_pod("team-a", name).await;
    }
}

/// Changing a running group's `priorityClassName` to a class that does not exist does not
/// take it out of team A's queue: its `status.admission` keeps the class it was admitted with,
/// and 2 more pods stay unbound until alice deletes the first two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_a_running_groups_priority_class_to_a_missing_one_keeps_it_charged() {
    let Some(t) = Tenancy::start_with(Drover::Running, &team_a_limited_to_two()).await else { return };
    let first = t.bound_gang("first", "team-a", 2).await;
    let admitted = t.admission("first").await;
    t.submit_gang("second", "team-a", 2).await;
    let second = ["second-0".to_string(), "second-1".to_string()];
    t.patch_group_spec("first", json!({"priorityClassName": "missing"})).await;
    t.assert_never_bound(&team_a(&second), "a running group with a missing class left team-a").await;
    assert_eq!(t.admission("first").await, admitted);
    assert_eq!(t.allocated_gpus("team-a").await, "2", "team A's queue status (logs in {})", t.logs);

    t.delete_pods(&first).await;
    for name in &second {
        t.bound_pod("team-a", name).await;
    }
}

/// Raising a running group's priority to the non-preemptible `inference` does not pin the GPU
/// it borrowed: team A (deserving 1 GPU) runs a `train` group of 2 one-GPU pods beside team B's
/// 6 GPUs, on a cluster of 8; alice patches the group to `inference`; when team B (deserving
/// 7) asks for one more GPU, one of team A's pods is reclaimed and team B's pod binds, while
/// team A keeps its deserved GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_a_running_groups_priority_does_not_pin_borrowed_gpus() {
    let queues = [queue("team-a", "team-a", "1", Some("4")), queue("team-b", "team-b", "7", None)];
    let Some(t) = Tenancy::start_with(Drover::Running, &queues).await else { return };
    let b_groups: Api<PodGroup> = t.admin_api("team-b");
    let b_pods: Api<Pod> = t.admin_api("team-b");
    create(&b_groups, pod_group("team-b", "b-big", "team-b", 1)).await.expect("team B's group");
    create(&b_pods, pod("team-b", "b-big-0", "b-big", "6")).await.expect("team B's 6-GPU pod");
    t.bound_pod("team-b", "b-big-0").await;

    let mut train = pod_group("team-a", "train", "team-a", 1);
    train["spec"]["priorityClassName"] = json!("train");
    create(&t.alice_api::<PodGroup>("team-a"), train).await.expect("alice creates a train group");
    let pods: Api<Pod> = t.alice_api("team-a");
    let a_pods = ["train-0".to_string(), "train-1".to_string()];
    for name in &a_pods {
        create(&pods, pod("team-a", name, "train", "1")).await.expect("alice creates a pod");
    }
    for name in &a_pods {
        t.bound_pod("team-a", name).await;
    }
    t.patch_group_spec("train", json!({"priorityClassName": "inference"})).await;

    create(&b_groups, pod_group("team-b", "b-more", "team-b", 1)).await.expect("team B's second group");
    create(&b_pods, pod("team-b", "b-more-0", "b-more", "1")).await.expect("team B's 1-GPU pod");
    t.bound_pod("team-b", "b-more-0").await;
    let admin_pods: Api<Pod> = t.admin_api("team-a");
    let left = eventually(60, &format!("one of team A's pods reclaimed (logs in {})", t.logs), || async {
        let left = bound(&admin_pods).await;
        (left.len() == 1).then_some(left)
    })
    .await;
    assert!(left.iter().all(|p| a_pods.contains(p)), "{left:?}");
    let b_bound = bound(&b_pods).await;
    assert_eq!(b_bound.len(), 2, "team B's pods: {b_bound:?}");
}

/// A Department's queue is not a leaf: alice's group placed directly in it (`research.gpu`) is
/// `Valid=False QueueNotLeaf` and its pod never binds, and a group in `default` from her
/// Project's namespace is `Valid=False QueueNotAllowed`; her group in her Project's queue
/// (`vision.gpu`) binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departments_queue_and_default_are_closed_to_project_work() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let department = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Department",
        "metadata": {"name": "research"}, "spec": {"nodePools": [{"name": "gpu", "gpu": "8"}]}});
    create(&Api::<Department>::all(t.admin()), department).await.expect("the admin's Department");
    let project = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project",
        "metadata": {"name": "vision"},
        "spec": {"department": "research", "namespaces": ["team-a"], "nodePools": [{"name": "gpu", "gpu": "4"}]}});
    create(&Api::<Project>::all(t.admin()), project).await.expect("the admin's Project");
    let queues: Api<Queue> = Api::all(t.admin());
    let namespaces: Api<Namespace> = Api::all(t.admin());
    eventually(60, &format!("the Department's and Project's queues (logs in {})", t.logs), || async {
        queues.get_opt("research.gpu").await.ok()??;
        queues.get_opt("vision.gpu").await.ok()??;
        let labels = namespaces.get("team-a").await.ok()?.metadata.labels?;
        (labels.get("scheduling.drover.dev/project").map(String::as_str) == Some("vision")).then_some(())
    })
    .await;

    // The project queue works (and the scheduler has seen team-a as the project's namespace).
    t.bound_gang("front", "vision.gpu", 1).await;
    t.submit_gang("side", "research.gpu", 1).await;
    t.submit_gang("loose", "default", 1).await;
    let refusal = t.group_refusal("side").await;
    assert_eq!(refusal.reason, "QueueNotLeaf", "{refusal:?}");
    let refusal = t.group_refusal("loose").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    t.assert_never_bound(&[("team-a", "side-0"), ("team-a", "loose-0")], "project work ran outside its queues").await;
}

/// Team B's learned run times are team B's: alice's group naming team B's queue is refused
/// (`QueueNotAllowed`), and when its pod, put on the node by name in a namespace the admin
/// exempted from the admission policy, completes, team B's queue learns nothing; her group in
/// her own queue, bound by Drover, is recorded there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_groups_run_teaches_no_queue() {
    let Some(t) = Tenancy::start_exempting(Drover::Running, "team-a").await else { return };
    let groups: Api<PodGroup> = t.alice_api("team-a");
    let pods: Api<Pod> = t.alice_api("team-a");
    create(&groups, pod_group("team-a", "steal", "team-b", 1)).await.expect("alice's group");
    let mut pinned = pod("team-a", "steal-0", "steal", "1");
    pinned["metadata"]["annotations"]["sim.drover.dev/duration"] = json!("1");
    pinned["spec"]["nodeName"] = json!("node-0");
    create(&pods, pinned).await.expect("a pinned pod in an exempt namespace");
    create(&groups, pod_group("team-a", "own", "team-a", 1)).await.expect("alice's group");
    let mut own = pod("team-a", "own-0", "own", "1");
    own["metadata"]["annotations"]["sim.drover.dev/duration"] = json!("1");
    create(&pods, own).await.expect("alice's pod");
    let refusal = t.group_refusal("steal").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    let queues: Api<Queue> = Api::all(t.admin());
    let learned = |queue: &Queue| queue.status.as_ref().map_or(0, |s| s.run_times.len());
    eventually(60, &format!("alice's own run recorded in team-a (logs in {})", t.logs), || async {
        (learned(&queues.get("team-a").await.ok()?) > 0).then_some(())
    })
    .await;
    let admin_pods: Api<Pod> = t.admin_api("team-a");
    eventually(30, "the pinned pod finished", || async {
        let phase = admin_pods.get("steal-0").await.ok()?.status?.phase?;
        (phase == "Succeeded").then_some(())
    })
    .await;
    eventually(30, &format!("the refused group completed (logs in {})", t.logs), || async {
        let phase = t.admin_api::<PodGroup>("team-a").get("steal").await.ok()?.status?.phase;
        (phase == drover_api::crd::podgroup::PodGroupPhase::Completed).then_some(())
    })
    .await;
    tokio::time::sleep(support::CYCLES).await;
    let b = queues.get("team-b").await.expect("team B's queue");
    assert_eq!(learned(&b), 0, "alice's refused group fed team B's history: {:?}", b.status.map(|s| s.run_times));
}
