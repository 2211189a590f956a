//! Tenant isolation, tried as a tenant on the real API server with RBAC on (issue 9, part 4).
//! Each test installs the chart with Helm on its own control plane, runs `drover scheduler`
//! and `drover controllers` as the chart's ServiceAccounts when the attempt needs them, and
//! gives team A a ServiceAccount `alice` holding Kubernetes' `edit` role in its namespace
//! `team-a` (into which the chart aggregates its user role) and nothing else. Each test is one
//! attempt to get more than team A's queues, quotas and nodes allow, and fails on its own if
//! that hole reopens:
//!
//! - forging a bind intent (in status, in the body of a create, or in the annotation older
//!   versions trusted);
//! - submitting to team B's queue through a Job, a PodGroup's `spec.queue` or a plain pod's
//!   `scheduling.drover.dev/queue` annotation;
//! - raising its queue's quota or limit, creating a Queue, a Project or a Department;
//! - writing Job or PodGroup status;
//! - joining team B's gang with a pod of team A's namespace;
//! - evicting or deleting team B's pods, directly or through a higher-priority job;
//! - bypassing Drover with pods for another scheduler or with `spec.nodeName`, GPU or not (the
//!   chart's admission policy), and stalling everyone's Jobs with an unreadable pod template.
//!
//! A last test checks the chart's aggregation into `view`: a ServiceAccount bound to `view`
//! reads Drover's Jobs, PodGroups and Queues and creates none.
//!
//! Without helm-python-sdk the tests print SKIPPED; `DROVER_REQUIRE_HELM` (set in CI) forbids
//! that. A test takes 5-20 s, most of it the control plane and the Helm install; the file
//! about a minute with two at a time. The set-up is in `support/mod.rs`, shared with
//! `tenant_accounting.rs` (attempts to get out of quota accounting).

mod support;

use drover_api::crd::department::Department;
use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::project::Project;
use drover_api::crd::queue::Queue;
use drover_e2e::eventually;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{
    bound, code, create, job, plain_pod, pod, pod_group, queue, running_uids, tenant_client, Drover, Tenancy, CYCLES,
    QUEUE,
};

// ---------------------------------------------------------------------------------------
// The attempts

/// A forged bind intent for two pods of 2 GPUs each, in a queue limited to 1 GPU: a status in
/// the body of a create is dropped, a write to `/status` is refused, and the annotation older
/// versions trusted is ignored and reported (`BindIntentIgnored`); the pods stay unbound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forging_a_bind_intent_is_dropped_refused_or_ignored() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let groups: Api<PodGroup> = t.alice_api("team-a");
    let forged = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "forged", "namespace": "team-a", "annotations": {
            "scheduling.drover.dev/bind-intent": r#"{"pods":{"f0":"node-0","f1":"node-0"},"at":"2020-01-01T00:00:00Z"}"#}},
        "spec": {"minMember": 2, "queue": "team-a-small"},
        "status": {"phase": "Inqueue", "bindIntent": {"pods": {"f0": "node-0", "f1": "node-0"}, "at": "2020-01-01T00:00:00Z"}}});
    let created = create(&groups, forged).await.expect("alice creates a PodGroup");
    assert!(
        created.status.as_ref().and_then(|s| s.bind_intent.as_ref()).is_none(),
        "a status in the body of a create is kept: {:?}",
        created.status
    );
    let intent =
        json!({"status": {"bindIntent": {"pods": {"f0": "node-0", "f1": "node-0"}, "at": "2020-01-01T00:00:00Z"}}});
    assert_eq!(
        code(groups.patch_status("forged", &PatchParams::default(), &Patch::Merge(&intent)).await),
        403,
        "a tenant wrote a bind intent into status"
    );
    let pods: Api<Pod> = t.alice_api("team-a");
    for name in ["f0", "f1"] {
        create(&pods, pod("team-a", name, "forged", "2")).await.expect("alice creates her pods");
    }
    t.warning("PodGroup", "forged", "BindIntentIgnored").await;
    t.assert_never_bound(&[("team-a", "f0"), ("team-a", "f1")], "a forged bind intent was obeyed").await;
    let group = t.admin_api::<PodGroup>("team-a").get("forged").await.expect("the group");
    assert!(group.status.as_ref().and_then(|s| s.bind_intent.as_ref()).is_none(), "{:?}", group.status);
}

/// A Job naming team B's queue is `Valid=False QueueNotAllowed` with a Warning, and gets no
/// pods; alice's Job in her own queue runs meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_naming_another_teams_queue_is_refused() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let jobs: Api<Job> = t.alice_api("team-a");
    create(&jobs, job("team-a", "a-steal", "team-b", "train", 1)).await.expect("the API server accepts the Job");
    create(&jobs, job("team-a", "a-ok", "team-a", "train", 1)).await.expect("alice submits a Job");
    t.running_job("team-a", "a-ok", 1).await;
    let refusal = t.job_refusal("a-steal").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    assert!(refusal.message.contains("\"team-b\""), "the queue is named: {refusal:?}");
    t.warning("Job", "a-steal", "QueueNotAllowed").await;
    tokio::time::sleep(CYCLES).await;
    let pods: Api<Pod> = t.admin_api("team-a");
    let made = pods.list(&ListParams::default().labels("batch.drover.dev/job-name=a-steal")).await.expect("pods");
    assert!(made.items.is_empty(), "the refused Job got pods (logs in {}): {:?}", t.logs, made.items);
}

/// A PodGroup whose `spec.queue` is team B's queue is `Valid=False QueueNotAllowed` with a
/// Warning, and its pod stays unbound; alice's group in her own queue is scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_group_naming_another_teams_queue_is_refused() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let groups: Api<PodGroup> = t.alice_api("team-a");
    let pods: Api<Pod> = t.alice_api("team-a");
    create(&groups, pod_group("team-a", "steal", "team-b", 1)).await.expect("the API server accepts the group");
    create(&pods, pod("team-a", "steal-0", "steal", "1")).await.expect("alice creates a pod");
    create(&groups, pod_group("team-a", "own", "team-a", 1)).await.expect("alice creates a group");
    create(&pods, pod("team-a", "own-0", "own", "1")).await.expect("alice creates a pod");
    t.bound_pod("team-a", "own-0").await;
    let refusal = t.group_refusal("steal").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    assert!(
        refusal.message.contains("\"team-a\"") && refusal.message.contains("\"team-b\""),
        "the namespace and the queue are named: {refusal:?}"
    );
    t.warning("PodGroup", "steal", "QueueNotAllowed").await;
    t.assert_never_bound(&[("team-a", "steal-0")], "a group was scheduled in another team's queue").await;
}

/// A plain pod annotated `scheduling.drover.dev/queue: team-b` gets a one-pod group in that
/// queue (the annotation is a request), which is `Valid=False QueueNotAllowed` with a
/// Warning; the pod stays unbound while alice's plain pod asking for her own queue binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_pod_annotated_with_another_teams_queue_is_refused() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let pods: Api<Pod> = t.alice_api("team-a");
    for (name, queue) in [("sneak", "team-b"), ("honest", "team-a")] {
        let mut manifest = plain_pod("team-a", name, "1");
        manifest["metadata"]["annotations"] = json!({QUEUE: queue});
        create(&pods, manifest).await.expect("alice creates a plain pod");
    }
    t.bound_pod("team-a", "honest").await;
    let refusal = t.group_refusal("pod-sneak").await;
    assert_eq!(refusal.reason, "QueueNotAllowed", "{refusal:?}");
    assert!(refusal.message.contains("\"team-b\""), "the queue is named: {refusal:?}");
    t.warning("PodGroup", "pod-sneak", "QueueNotAllowed").await;
    t.assert_never_bound(&[("team-a", "sneak")], "a plain pod was scheduled in another team's queue").await;
}

/// Queues, Projects and Departments are the admins': alice may read Queues (for `drover
/// explain`), not change their quota, limit or status, delete them, or create any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_its_queues_quota_or_limit_is_refused() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    let queues: Api<Queue> = Api::all(t.alice.clone());
    let listed = queues.list(&ListParams::default()).await.expect("tenants may read queues (drover explain)");
    assert!(listed.items.iter().any(|q| q.metadata.name.as_deref() == Some("team-a-small")));
    let raise = json!({"spec": {"deserved": {"nvidia.com/gpu": "8"}, "limit": null}});
    assert_eq!(code(queues.patch("team-a-small", &PatchParams::default(), &Patch::Merge(&raise)).await), 403);
    let fake = json!({"status": {"allocated": {}}});
    assert_eq!(code(queues.patch_status("team-a-small", &PatchParams::default(), &Patch::Merge(&fake)).await), 403);
    assert_eq!(code(queues.delete("team-b", &DeleteParams::default()).await), 403);
    assert_eq!(code(create(&queues, queue("mine", "team-a", "8", None)).await), 403);
    let projects = Api::<Project>::all(t.alice.clone());
    let project = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project", "metadata": {"name": "mine"},
        "spec": {"department": "research", "namespaces": ["team-a"], "nodePools": [{"name": "gpu", "gpu": "8"}]}});
    assert_eq!(code(create(&projects, project).await), 403);
    let departments = Api::<Department>::all(t.alice.clone());
    let department = json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Department",
        "metadata": {"name": "mine"}, "spec": {"nodePools": [{"name": "gpu", "gpu": "8"}]}});
    assert_eq!(code(create(&departments, department).await), 403);
    let kept = Api::<Queue>::all(t.admin()).get("team-a-small").await.expect("the queue");
    assert_eq!(kept.spec.limit.and_then(|l| l.get("nvidia.com/gpu").map(|q| q.0.clone())).as_deref(), Some("1"));
}

/// Job and PodGroup status are Drover's: a status in the body of a create is dropped, and a
/// write to `/status` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_job_or_pod_group_status_is_refused() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    let jobs: Api<Job> = t.alice_api("team-a");
    let mut done = job("team-a", "a-done", "team-a", "train", 1);
    done["status"] = json!({"state": "Completed", "succeeded": 1});
    let created = create(&jobs, done).await.expect("alice submits a Job");
    assert!(
        created.status.as_ref().is_none_or(|s| s.succeeded == 0),
        "a Job status in the body of a create is kept: {:?}",
        created.status
    );
    let completed = json!({"status": {"state": "Completed"}});
    assert_eq!(
        code(jobs.patch_status("a-done", &PatchParams::default(), &Patch::Merge(&completed)).await),
        403,
        "a tenant wrote Job status"
    );
    let groups: Api<PodGroup> = t.alice_api("team-a");
    let mut running = pod_group("team-a", "g", "team-a", 2);
    running["status"] = json!({"phase": "Running", "running": 2});
    let created = create(&groups, running).await.expect("alice creates a PodGroup");
    assert!(
        created.status.as_ref().is_none_or(|s| s.running == 0),
        "a PodGroup status in the body of a create is kept: {:?}",
        created.status
    );
    let phase = json!({"status": {"phase": "Running", "running": 2}});
    assert_eq!(
        code(groups.patch_status("g", &PatchParams::default(), &Patch::Merge(&phase)).await),
        403,
        "a tenant wrote PodGroup status"
    );
}

/// Pods of team A naming team B's gang (`b-gang`, or `team-b/b-gang`) join no gang: team B's
/// gang of two stays one member short, and starts once team B adds its own second pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_its_namespace_cannot_join_another_teams_gang() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let b_groups: Api<PodGroup> = t.admin_api("team-b");
    let b_pods: Api<Pod> = t.admin_api("team-b");
    create(&b_groups, pod_group("team-b", "b-gang", "team-b", 2)).await.expect("team B's gang");
    create(&b_pods, pod("team-b", "b-gang-0", "b-gang", "1")).await.expect("team B's pod");
    let alice_pods: Api<Pod> = t.alice_api("team-a");
    for (name, group) in [("join-0", "b-gang"), ("join-1", "team-b/b-gang")] {
        create(&alice_pods, pod("team-a", name, group, "1")).await.expect("the API server accepts the pod");
    }
    let members = [("team-b", "b-gang-0"), ("team-a", "join-0"), ("team-a", "join-1")];
    t.assert_never_bound(&members, "team B's gang started with a member from team A's namespace").await;
    // The gang was one member short, nothing else: team B's own second pod starts it.
    create(&b_pods, pod("team-b", "b-gang-1", "b-gang", "1")).await.expect("team B's second pod");
    for name in ["b-gang-0", "b-gang-1"] {
        t.bound_pod("team-b", name).await;
    }
}

/// Alice may not delete or evict team B's pods, and a job of hers at a higher priority, which
/// needs team B's GPUs, does not get them while team B is within its deserved quota (only
/// reclaim acts across queues): team B's pods keep running, the job waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_or_deleting_another_teams_pods_is_refused_directly_and_through_drover() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let b_jobs: Api<Job> = t.admin_api("team-b");
    create(&b_jobs, job("team-b", "b-work", "team-b", "train", 4)).await.expect("team B's job");
    let b_running = t.running_job("team-b", "b-work", 4).await;

    let alice_b_pods: Api<Pod> = t.alice_api("team-b");
    let victim = "b-work-worker-0";
    assert_eq!(code(alice_b_pods.delete(victim, &DeleteParams::default()).await), 403, "alice deleted team B's pod");
    assert_eq!(code(alice_b_pods.evict(victim, &EvictParams::default()).await), 403, "alice evicted team B's pod");

    // 6 GPUs at the highest priority: only 4 are free, the rest are team B's deserved quota.
    let jobs: Api<Job> = t.alice_api("team-a");
    create(&jobs, job("team-a", "a-big", "team-a", "inference", 6)).await.expect("alice submits a big job");
    let groups: Api<PodGroup> = t.admin_api("team-a");
    eventually(
        60,
        &format!("the scheduler sees alice's big job and says why it waits (logs in {})", t.logs),
        || async {
            let status = groups.get("a-big").await.ok()?.status?;
            status.conditions.iter().any(|c| c.type_ == "Unschedulable" && c.status == "True").then_some(())
        },
    )
    .await;
    tokio::time::sleep(CYCLES).await;
    let a_pods: Api<Pod> = t.admin_api("team-a");
    let a_bound = bound(&a_pods).await;
    assert!(!a_bound.iter().any(|p| p.starts_with("a-big")), "{a_bound:?} (logs in {})", t.logs);
    let b_pods: Api<Pod> = t.admin_api("team-b");
    assert_eq!(running_uids(&b_pods, "b-work").await, b_running, "team B's pods were evicted (logs in {})", t.logs);
}

/// Pods that would bypass Drover (from another scheduler, or with a node named up front) are
/// refused by the chart's admission policy whatever they request: a pod with no GPU but a
/// node's CPU, put on a GPU node, would idle its GPUs for every team. A CPU-only pod for
/// Drover is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_would_bypass_drover_are_refused_whatever_they_request() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    let pods: Api<Pod> = t.alice_api("team-a");
    let mut other_scheduler = plain_pod("team-a", "elsewhere", "1");
    other_scheduler["spec"]["schedulerName"] = json!("default-scheduler");
    // The API server loads a new policy within a few seconds; dry runs show when it is in force.
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let candidate: Pod = serde_json::from_value(other_scheduler.clone()).expect("manifest parses");
    let refused = eventually(30, "the chart's admission policy is in force", || async {
        pods.create(&dry_run, &candidate).await.err().filter(|e| e.to_string().contains("spec.schedulerName"))
    })
    .await;
    assert!(refused.to_string().contains("must set spec.schedulerName: drover"), "{refused}");
    create(&pods, other_scheduler).await.expect_err("a GPU pod for another scheduler");
    let mut pinned = plain_pod("team-a", "pinned", "1");
    pinned["spec"]["nodeName"] = json!("node-0");
    let refused = create(&pods, pinned).await.expect_err("a GPU pod with spec.nodeName");
    assert!(refused.to_string().contains("may not set spec.nodeName"), "{refused}");
    let cpu = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"containers": [{"name": "main", "image": "tool", "resources": {"requests": {"cpu": "62"}}}]}})
    };
    let refused = create(&pods, cpu("cpu-elsewhere")).await.expect_err("a CPU-only pod for kube-scheduler");
    assert!(refused.to_string().contains("must set spec.schedulerName: drover"), "{refused}");
    let mut cpu_pinned = cpu("cpu-pinned");
    cpu_pinned["spec"]["schedulerName"] = json!("drover");
    cpu_pinned["spec"]["nodeName"] = json!("node-0");
    let refused = create(&pods, cpu_pinned).await.expect_err("a CPU-only pod with spec.nodeName");
    assert!(refused.to_string().contains("may not set spec.nodeName"), "{refused}");
    let mut for_drover = cpu("cpu-for-drover");
    for_drover["spec"]["schedulerName"] = json!("drover");
    create(&pods, for_drover).await.expect("a CPU-only pod for Drover is admitted");
}

/// A Job whose template is not a pod template (the CRD keeps templates as written) is refused
/// on its own (`Valid=False InvalidTemplate`, the field named); alice's next Job and team B's
/// run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_job_template_stalls_no_one_else() {
    let Some(t) = Tenancy::start(Drover::Running).await else { return };
    let jobs: Api<Job> = t.alice_api("team-a");
    let mut broken = job("team-a", "a-broken", "team-a", "train", 1);
    broken["spec"]["tasks"][0]["template"] = json!({"spec": {"containers": 5}});
    create(&jobs, broken).await.expect("the API server stores any template object");
    create(&jobs, job("team-a", "a-ok", "team-a", "train", 1)).await.expect("alice submits a job");
    create(&t.admin_api::<Job>("team-b"), job("team-b", "b-work", "team-b", "train", 2)).await.expect("team B's job");
    t.running_job("team-a", "a-ok", 1).await;
    t.running_job("team-b", "b-work", 2).await;
    let refusal = t.job_refusal("a-broken").await;
    assert_eq!(refusal.reason, "InvalidTemplate");
    assert!(
        refusal.message.contains("spec.tasks[0].template") && refusal.message.contains("spec.containers"),
        "{refusal:?}"
    );
}

/// The chart aggregates its read role into `view`: a ServiceAccount bound to `view` in
/// `team-a` gets and lists Drover Jobs and PodGroups there and lists Queues (the chart's
/// queue viewers are every authenticated user), but creates, changes and deletes none, and
/// reads nothing in `team-b`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_drover_objects_and_creates_none() {
    let Some(t) = Tenancy::start(Drover::Off).await else { return };
    create(&t.admin_api::<Job>("team-a"), job("team-a", "a-job", "team-a", "train", 1)).await.expect("a Job");
    create(&t.admin_api::<PodGroup>("team-a"), pod_group("team-a", "a-group", "team-a", 1)).await.expect("a group");
    let bob = tenant_client(&t.cluster, "bob", "view").await;
    let jobs: Api<Job> = Api::namespaced(bob.clone(), "team-a");
    let groups: Api<PodGroup> = Api::namespaced(bob.clone(), "team-a");
    // Aggregation into `view` is kube-controller-manager's work: wait for it.
    let listed = eventually(60, "bob may list Drover Jobs through view (the chart's aggregated role)", || async {
        jobs.list(&ListParams::default()).await.ok()
    })
    .await;
    assert_eq!(listed.items.len(), 1, "{:?}", listed.items);
    jobs.get("a-job").await.expect("a viewer gets a Job");
    assert_eq!(groups.list(&ListParams::default()).await.expect("a viewer lists PodGroups").items.len(), 1);
    groups.get("a-group").await.expect("a viewer gets a PodGroup");
    let queues: Api<Queue> = Api::all(bob.clone());
    assert_eq!(queues.list(&ListParams::default()).await.expect("a viewer lists Queues").items.len(), 3);
    queues.get("team-a").await.expect("a viewer gets a Queue");

    assert_eq!(code(create(&jobs, job("team-a", "b-job", "team-a", "train", 1)).await), 403, "a viewer made a Job");
    assert_eq!(code(create(&groups, pod_group("team-a", "b-group", "team-a", 1)).await), 403, "a viewer made a group");
    assert_eq!(code(create(&queues, queue("bobs", "team-a", "1", None)).await), 403, "a viewer made a Queue");
    let scale = json!({"spec": {"minMember": 5}});
    assert_eq!(code(groups.patch("a-group", &PatchParams::default(), &Patch::Merge(&scale)).await), 403);
    assert_eq!(code(jobs.delete("a-job", &DeleteParams::default()).await), 403, "a viewer deleted a Job");
    let elsewhere: Api<Job> = Api::namespaced(bob, "team-b");
    assert_eq!(code(elsewhere.list(&ListParams::default()).await), 403, "view in team-a reaches team-b");
}
