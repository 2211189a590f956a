//! Topologies end to end through the real binaries (real kube-apiserver + fake kubelet,
//! `drover controllers`, `drover scheduler`), on fake 8-GPU nodes labelled into two racks of
//! one block and one node left unlabelled: the Topology's status counts its domains; a Job
//! naming a level the Topology does not have waits with the valid levels named; a gang of
//! 2 x 8 GPUs that requires a rack lands inside one rack (the one that can hold it, not the
//! emptiest nodes across racks), its PodGroup says where and each pod carries its domain. And
//! with three racks and two scheduler replicas: a preempting gang evicts inside one rack only,
//! and when the leader is killed while its victims are still stopping, the new leader binds the
//! gang in that same rack without evicting anything more.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use drover_api::crd::job::Job;
use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_api::crd::topology::Topology;
use drover_e2e::{create, eventually, lease_holder, Cluster};
use drover_envtest::Options;
use drover_kubelet::STOP_ANNOTATION;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::{json, Value};

const NS: &str = "default";
const BLOCK: &str = "example.com/block";
const RACK: &str = "example.com/rack";

/// A Job of `replicas` pods of `gpus` GPUs, with `spec` added (topology blocks).
fn job(name: &str, replicas: u32, gpus: u32, spec: Value, pod_spec: Value) -> Value {
    let mut pod = json!({"containers": [{"name": "main", "image": "trainer",
        "resources": {"requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "1"},
            "limits": {"nvidia.com/gpu": gpus.to_string()}}}]});
    for (k, v) in pod_spec.as_object().expect("an object") {
        pod[k] = v.clone();
    }
    let mut j = json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": pod}}]}});
    for (k, v) in spec.as_object().expect("an object") {
        j["spec"][k] = v.clone();
    }
    j
}

async fn running_pods(pods: &Api<Pod>, job: &str, n: usize) -> Option<Vec<Pod>> {
    let selector = format!("batch.drover.dev/job-name={job}");
    let list = pods.list(&ListParams::default().labels(&selector)).await.ok()?.items;
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    (list.iter().filter(|p| running(p)).count() == n).then_some(list)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_are_placed_within_a_rack_and_bad_levels_are_named() {
    let Some(cluster) = Cluster::start(5).await else { return };
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    let topologies = racks(&client, &[("r1", &["node-0", "node-1"]), ("r2", &["node-2", "node-3"])]).await;

    // The controllers count the domains: 5 nodes, 1 block, 2 racks, node-4 without labels.
    eventually(30, &format!("the Topology's status (logs in {logs})"), || async {
        let status = topologies.get("default").await.ok()?.status?;
        let levels: Vec<(String, u32, u32)> =
            status.levels.iter().map(|l| (l.name.clone(), l.domains, l.excluded_nodes)).collect();
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        (status.nodes == 5
            && status.excluded_nodes == 1
            && levels == [("block".to_string(), 1, 1), ("rack".to_string(), 2, 1)]
            && ready.status == "True")
            .then_some(())
    })
    .await;

    // A level the topology does not have: the group waits, and says which levels exist.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), NS);
    create(&jobs, job("typo", 1, 1, json!({"topology": {"required": "rak"}}), json!({}))).await;
    let message = eventually(30, &format!("PodGroup typo names the valid levels (logs in {logs})"), || async {
        let status = groups.get("typo").await.ok()?.status?;
        let c = status.conditions.iter().find(|c| c.type_ == "Unschedulable" && c.status == "True")?;
        (c.reason == "TopologyLevelNotFound").then(|| c.message.clone())
    })
    .await;
    assert!(message.contains("\"rak\"") && message.contains("levels: block, rack, node"), "{message}");
    eventually(30, &format!("Job typo mirrors the reason (logs in {logs})"), || async {
        jobs.get("typo").await.ok()?.status?.reason.filter(|r| r.contains("levels: block, rack, node")).map(|_| ())
    })
    .await;

    // Rack r1 has 12 GPUs free (node-1 half used), r2 has 16: a 2 x 8 gang that requires a
    // rack can only run in r2, though node-0 is as empty as r2's nodes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let on_node_1 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}});
    create(&jobs, job("filler", 1, 4, json!({}), on_node_1)).await;
    eventually(30, &format!("the filler runs (logs in {logs})"), || running_pods(&pods, "filler", 1)).await;
    create(&jobs, job("gang", 2, 8, json!({"topology": {"required": "rack"}}), json!({}))).await;
    let gang = eventually(60, &format!("the gang runs (logs in {logs})"), || running_pods(&pods, "gang", 2)).await;
    let mut placed: Vec<(String, String)> = gang
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let domain = p.metadata.annotations.as_ref().and_then(|a| a.get("topology.drover.dev/domain")).cloned();
            (node, domain.unwrap_or_default())
        })
        .collect();
    placed.sort();
    assert_eq!(
        placed,
        [("node-2".into(), "b1/r2/node-2".into()), ("node-3".into(), "b1/r2/node-3".into())],
        "the gang is in rack r2, each pod annotated with its domain (logs in {logs})"
    );
    eventually(30, &format!("PodGroup gang says where it runs (logs in {logs})"), || async {
        let t = groups.get("gang").await.ok()?.status?.topology?;
        (t.name == "default" && t.level.as_deref() == Some("rack") && t.domain.as_deref() == Some("b1/r2"))
            .then_some(())
    })
    .await;
}

/// Sets the pod template's annotations of a Job made by [`job`].
fn annotated(mut job: Value, annotations: Value) -> Value {
    job["spec"]["tasks"][0]["template"]["metadata"] = json!({"annotations": annotations});
    job
}

/// Pods that take `STOP` to stop when evicted (a trainer checkpointing on SIGTERM, within its
/// grace period), until the test tells them to stop at once.
fn slow_to_stop(job: Value) -> Value {
    annotated(job, json!({STOP_ANNOTATION: STOP}))
}

/// How long an evicted filler pod keeps running: longer than the test.
const STOP: &str = "300";

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && pod.metadata.deletion_timestamp.is_none()
}

/// Every pod of the namespace.
async fn all_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default()).await.expect("pods listed").items
}

/// The pods evicted so far (by the `Preempted` or `Reclaimed` Events the scheduler records on
/// each), by name.
async fn evicted(client: &kube::Client) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let list = events.list(&ListParams::default()).await.expect("events listed").items;
    let mut names: Vec<String> = list
        .into_iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("Preempted" | "Reclaimed")))
        .filter_map(|e| e.involved_object.name)
        .collect();
    names.sort();
    names
}

/// Labels each rack's nodes into block `b1` and that rack, and creates the `default` Topology
/// (block, rack) over those labels.
async fn racks(client: &kube::Client, racks: &[(&str, &[&str])]) -> Api<Topology> {
    let nodes: Api<Node> = Api::all(client.clone());
    for (rack, members) in racks {
        for node in *members {
            let patch = json!({"metadata": {"labels": {BLOCK: "b1", RACK: rack}}});
            nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("node labelled");
        }
    }
    let topologies: Api<Topology> = Api::all(client.clone());
    create(
        &topologies,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Topology", "metadata": {"name": "default"},
            "spec": {"levels": [{"name": "block", "nodeLabel": BLOCK}, {"name": "rack", "nodeLabel": RACK}]}}),
    )
    .await;
    topologies
}

/// The rack and domain a PodGroup's status says its pods are (or will be) in.
async fn group_domain(groups: &Api<PodGroup>, name: &str) -> Option<(String, String)> {
    let t = groups.get(name).await.ok()?.status?.topology?;
    Some((t.level?, t.domain?))
}

// A rack full of priority-30 pods (r1), two racks each with an 8-GPU pod of priority 90 and
// four priority-30 pods, 4 GPUs free. A gang of 12 x 1 GPU at priority 65 that requires a rack
// fits only in r1, after 12 evictions (r2 and r3 could give it 8 GPUs at most; a placement
// blind to racks would take their 8 free GPUs and evict 4 pods). The victims take long to
// stop, and the gang's claim (its pods nominated to r1's nodes) is in its PodGroup's status.
// Then r2 starts freeing room for the gang too (its 8-GPU pod's Job is deleted, and the pod
// stops slowly), and the leading scheduler is killed; the other replica takes over: it must
// keep the gang's claim in r1 without evicting anything more, and keep the GPUs freed by the
// first victims to stop for the gang while the others still stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempting_gangs_domain_survives_a_leader_kill() {
    let Some(mut cluster) = Cluster::start_without_drover(6, Options::default()).await else { return };
    cluster.guard_charges().await;
    cluster.spawn_drover("controllers", &[]).expect("drover controllers starts");
    let mut replicas = [
        cluster.spawn_replica("scheduler", "own-a", &["--period", "0.2"]),
        cluster.spawn_replica("scheduler", "own-b", &["--period", "0.2"]),
    ];
    let logs = cluster.logs().display().to_string();
    let client = cluster.client.clone();
    const R1: [&str; 2] = ["node-0", "node-1"];
    let topologies = racks(&client, &[("r1", &R1), ("r2", &["node-2", "node-3"]), ("r3", &["node-4", "node-5"])]).await;
    let r1 = |node: &str| R1.contains(&node);
    eventually(30, &format!("the Topology counts 3 racks (logs in {logs})"), || async {
        let status = topologies.get("default").await.ok()?.status?;
        status.levels.iter().any(|l| l.name == "rack" && l.domains == 3 && l.excluded_nodes == 0).then_some(())
    })
    .await;
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("low", 30), ("urgent", 65), ("steady", 90)] {
        create(
            &classes,
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}),
        )
        .await;
    }
    let queues: Api<Queue> = Api::all(client.clone());
    create(
        &queues,
        json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team"},
            "spec": {"deserved": {"nvidia.com/gpu": "48"}}}),
    )
    .await;
    let leader = eventually(30, &format!("a scheduler leads (logs in {logs})"), || async {
        lease_holder(&client, "drover-scheduler").await
    })
    .await;

    // The fillers, each pinned where the scenario wants it; the 30s elastic (minimum 1), so
    // that the fewest victims are single pods.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let on = |key: &str, value: &str| json!({"nodeSelector": {key: value}});
    let low = |name: &str, replicas: u32, at: Value| {
        slow_to_stop(job(
            name,
            replicas,
            1,
            json!({"queue": "team", "priorityClassName": "low", "minAvailable": 1}),
            at,
        ))
    };
    let steady = |name: &str, node: &str| {
        job(name, 1, 8, json!({"queue": "team", "priorityClassName": "steady"}), on("kubernetes.io/hostname", node))
    };
    for filler in [
        low("low-r1", 16, on(RACK, "r1")),
        slow_to_stop(steady("steady-r2", "node-2")),
        low("low-r2", 4, on("kubernetes.io/hostname", "node-3")),
        steady("steady-r3", "node-4"),
        low("low-r3", 4, on("kubernetes.io/hostname", "node-5")),
    ] {
        create(&jobs, filler).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let before = eventually(60, &format!("the 26 fillers run (logs in {logs})"), || async {
        let list = all_pods(&pods).await;
        (list.iter().filter(|p| is_running(p)).count() == 26).then_some(list)
    })
    .await;

    // The gang: preempt evicts 12 pods of r1 and pipelines the gang there.
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), NS);
    create(
        &jobs,
        job(
            "gang",
            12,
            1,
            json!({"queue": "team", "priorityClassName": "urgent", "topology": {"required": "rack"}}),
            json!({}),
        ),
    )
    .await;
    let deleting = |list: &[Pod]| -> Vec<Pod> {
        list.iter().filter(|p| p.metadata.deletion_timestamp.is_some()).cloned().collect()
    };
    let victims = eventually(30, &format!("12 pods are evicted for the gang (logs in {logs})"), || async {
        let list = deleting(&all_pods(&pods).await);
        (list.len() >= 12).then_some(list)
    })
    .await;
    let victim_uids: BTreeSet<String> = victims.iter().map(uid_of).collect();
    let outside: Vec<(String, String)> =
        victims.iter().filter(|p| !r1(&node_of(p))).map(|p| (p.name_any(), node_of(p))).collect();
    assert!(outside.is_empty(), "victims outside rack r1: {outside:?} (logs in {logs})");
    assert_eq!(victims.len(), 12, "the fewest victims (logs in {logs})");
    let mut victim_names: Vec<String> = victims.iter().map(|p| p.name_any()).collect();
    victim_names.sort();
    eventually(20, &format!("one eviction Event per victim (logs in {logs})"), || async {
        (evicted(&client).await == victim_names).then_some(())
    })
    .await;
    eventually(20, &format!("PodGroup gang nominates rack b1/r1 (logs in {logs})"), || async {
        (group_domain(&groups, "gang").await? == ("rack".to_string(), "b1/r1".to_string())).then_some(())
    })
    .await;
    let nominations = |groups: Api<PodGroup>| async move {
        let status = groups.get("gang").await.ok()?.status?;
        Some(status.nominations.into_iter().map(|n| (n.pod, n.node)).collect::<Vec<_>>())
    };
    let claim = eventually(20, &format!("PodGroup gang keeps its claim in status (logs in {logs})"), || async {
        nominations(groups.clone()).await.filter(|n| n.len() == 12)
    })
    .await;
    assert!(claim.iter().all(|(_, n)| r1(n)), "the claim is in r1: {claim:?} (logs in {logs})");

    // Another rack starts freeing room for the gang: steady-r2's Job is deleted, and its pod
    // stops slowly. Once it has, r2 (node-2's 8 GPUs and node-3's 4 free) holds the gang too.
    // (Its pod is deleted here too, not left to the garbage collector, which may not watch
    // Drover's Jobs yet.)
    jobs.delete("steady-r2", &DeleteParams::default()).await.expect("steady-r2 deleted");
    for pod in all_pods(&pods).await.iter().filter(|p| p.name_any().starts_with("steady-r2")) {
        pods.delete(&pod.name_any(), &DeleteParams::default()).await.expect("steady-r2's pod deleted");
    }
    eventually(30, &format!("steady-r2's pod is stopping (logs in {logs})"), || async {
        deleting(&all_pods(&pods).await).iter().any(|p| p.name_any().starts_with("steady-r2")).then_some(())
    })
    .await;

    // Checked at every look from now on: nothing but the first victims is ever being deleted,
    // and no gang pod is bound outside r1.
    let check = |list: &[Pod], stage: &str| {
        let extra: Vec<String> = deleting(list)
            .iter()
            .filter(|p| !victim_uids.contains(&uid_of(p)) && !p.name_any().starts_with("steady-r2"))
            .map(|p| format!("{} on {}", p.name_any(), node_of(p)))
            .collect();
        assert!(extra.is_empty(), "{stage}: pods evicted beyond the first victims: {extra:?} (logs in {logs})");
        let astray: Vec<String> = list
            .iter()
            .filter(|p| p.name_any().starts_with("gang-") && !node_of(p).is_empty() && !r1(&node_of(p)))
            .map(|p| format!("{} on {}", p.name_any(), node_of(p)))
            .collect();
        assert!(astray.is_empty(), "{stage}: gang pods bound outside r1: {astray:?} (logs in {logs})");
    };

    // The victims still run (stopping): the leader dies, the other replica takes the lease.
    replicas.iter_mut().find(|r| r.identity == leader).expect("the leader is ours").kill9();
    let successor =
        eventually(60, &format!("another scheduler takes the lease from {leader} (logs in {logs})"), || async {
            lease_holder(&client, "drover-scheduler").await.filter(|h| *h != leader)
        })
        .await;
    eprintln!("killed the leader {leader} while the victims were stopping; {successor} leads");
    // Many cycles of the new leader (0.2 s each) with the victims still stopping: it keeps the
    // gang waiting for r1 (binds none of it: r1's GPUs are not free yet) and evicts nothing more.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let list = all_pods(&pods).await;
        check(&list, "after the failover, victims stopping");
        let bound: Vec<String> = list
            .iter()
            .filter(|p| p.name_any().starts_with("gang-") && !node_of(p).is_empty())
            .map(|p| p.name_any())
            .collect();
        assert!(bound.is_empty(), "gang pods bound before the victims stopped: {bound:?} (logs in {logs})");
        let gone: Vec<&String> =
            victim_uids.iter().filter(|u| !deleting(&list).iter().any(|p| uid_of(p) == **u)).collect();
        assert!(gone.is_empty(), "victims stopped early: {gone:?} (the test needs them stopping)");
        assert_eq!(evicted(&client).await, victim_names, "pods evicted after the failover (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        group_domain(&groups, "gang").await,
        Some(("rack".to_string(), "b1/r1".to_string())),
        "the gang's nominated rack after the failover to {successor} (logs in {logs})"
    );
    assert_eq!(
        nominations(groups.clone()).await,
        Some(claim.clone()),
        "the claim the new leader {successor} keeps (logs in {logs})"
    );

    // Half the victims stop, and their Job replaces them (pods that can only run in r1, at
    // priority 30): the new leader keeps r1's freed GPUs for the gang, the replacements wait.
    let stop_now = json!({"metadata": {"annotations": {STOP_ANNOTATION: "0"}}});
    let (first_half, second_half) = victims.split_at(6);
    for victim in first_half {
        let _ = pods.patch(&victim.name_any(), &PatchParams::default(), &Patch::Merge(&stop_now)).await;
    }
    let replaced = |list: &[Pod]| -> Vec<Pod> {
        let replacement =
            |p: &Pod| first_half.iter().any(|v| v.name_any() == p.name_any()) && !victim_uids.contains(&uid_of(p));
        list.iter().filter(|p| replacement(p)).cloned().collect()
    };
    eventually(30, &format!("the first 6 victims stop and are replaced (logs in {logs})"), || async {
        (replaced(&all_pods(&pods).await).len() == 6).then_some(())
    })
    .await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let list = all_pods(&pods).await;
        check(&list, "half the victims stopped");
        let taken: Vec<String> = replaced(&list)
            .iter()
            .filter(|p| !node_of(p).is_empty())
            .map(|p| format!("{} on {}", p.name_any(), node_of(p)))
            .collect();
        assert!(taken.is_empty(), "replacements took the gang's GPUs: {taken:?} (logs in {logs})");
        assert_eq!(evicted(&client).await, victim_names, "pods evicted, half the victims stopped (logs in {logs})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The other victims stop; the new leader binds the gang in r1.
    for victim in second_half {
        let _ = pods.patch(&victim.name_any(), &PatchParams::default(), &Patch::Merge(&stop_now)).await;
    }
    let gang = eventually(60, &format!("the gang runs (logs in {logs})"), || async {
        let list = all_pods(&pods).await;
        check(&list, "after the victims stopped");
        let gang: Vec<Pod> = list.into_iter().filter(|p| p.name_any().starts_with("gang-") && is_running(p)).collect();
        (gang.len() == 12).then_some(gang)
    })
    .await;
    let nodes_used: BTreeSet<String> = gang.iter().map(node_of).collect();
    assert!(nodes_used.iter().all(|n| r1(n)), "the gang runs on {nodes_used:?}, not in r1 (logs in {logs})");
    assert_eq!(group_domain(&groups, "gang").await, Some(("rack".to_string(), "b1/r1".to_string())));

    // Exactly the first victims were evicted, once each; every other filler still runs (but the
    // deleted steady-r2).
    assert_eq!(evicted(&client).await, victim_names, "pods evicted (logs in {logs})");
    let now = all_pods(&pods).await;
    check(&now, "at the end");
    let lost: Vec<String> = before
        .iter()
        .filter(|p| !victim_uids.contains(&uid_of(p)) && !p.name_any().starts_with("steady-r2"))
        .filter(|p| !now.iter().any(|q| uid_of(q) == uid_of(p) && is_running(q)))
        .map(|p| p.name_any())
        .collect();
    assert!(lost.is_empty(), "fillers that no longer run: {lost:?} (logs in {logs})");
}
