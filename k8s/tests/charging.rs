//! Charging that tenants cannot unmake (issue 19): a tenant edits its own objects after its
//! pods bound — deletes or re-annotates, moves groups to other queues or the `default` queue,
//! names missing or higher priority classes, adds pods and groups — and after every edit and
//! every scheduling cycle each queue is still charged exactly the GPUs its namespace's Drover
//! pods hold, and no queue holds more than its limit.
//!
//! The scheduler's path is the real one: the conversion of the objects, a cycle of the core,
//! and the writes the scheduler makes, applied here to the objects: each binding with the
//! charge record ([`Charge::for_job`]) its Binding carries, the PodGroup statuses
//! ([`wanted_group_statuses`]), evictions as deletions. Tenants' edits leave the record as it
//! is, as the charge guard makes the API server do (`k8s/tests/scheduler.rs`,
//! `the_scheduler_binds_only_under_the_charge_guard_which_keeps_each_record_as_bound`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::queue::Queue;
use drover_k8s::charge::Charge;
use drover_k8s::convert::{convert, Converted, Objects, POD_GROUP_ANNOTATION};
use drover_k8s::scheduler::wanted_group_statuses;
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::snapshot::PodPhaseInput;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use proptest::prelude::*;
use serde_json::json;

const GPU: &str = "nvidia.com/gpu";
/// Team A's namespace and queue: deserves 1 GPU, may use 2.
const NS_A: &str = "team-a";
const QUEUE_A: &str = "a.pool";
const LIMIT_A: i64 = 2;
/// Team B's: deserves 7, may use 8 (the whole cluster).
const NS_B: &str = "team-b";
const QUEUE_B: &str = "b.pool";
const LIMIT_B: i64 = 8;

/// A cluster as the scheduler's caches hold it.
#[derive(Clone)]
struct Cluster {
    nodes: Vec<Arc<Node>>,
    namespaces: Vec<Arc<Namespace>>,
    queues: Vec<Arc<Queue>>,
    groups: Vec<Arc<PodGroup>>,
    pods: Vec<Arc<Pod>>,
    /// Names given so far, so that every new object has a new name and uid.
    made: u32,
}

fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("a valid object"))
}

fn queue(name: &str, project: &str, deserved: i64, limit: i64) -> Arc<Queue> {
    from(json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": name, "labels": {"scheduling.drover.dev/project": project}},
        "spec": {"deserved": {GPU: deserved.to_string()}, "limit": {GPU: limit.to_string()},
            "namespaceSelector": {"matchLabels": {"scheduling.drover.dev/project": project}}}}))
}

impl Cluster {
    /// Two nodes of 4 GPUs; team A's and team B's project namespaces and queues.
    fn new() -> Cluster {
        let node = |name: &str| {
            from(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: "4"}}}))
        };
        let namespace = |name: &str, project: &str| {
            from(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
                "labels": {"kubernetes.io/metadata.name": name, "scheduling.drover.dev/project": project}}}))
        };
        Cluster {
            nodes: vec![node("n1"), node("n2")],
            namespaces: vec![namespace(NS_A, "a"), namespace(NS_B, "b")],
            queues: vec![queue(QUEUE_A, "a", 1, LIMIT_A), queue(QUEUE_B, "b", 7, LIMIT_B)],
            groups: Vec::new(),
            pods: Vec::new(),
            made: 0,
        }
    }

    fn convert(&self) -> Converted {
        let objects = Objects {
            nodes: &self.nodes,
            pods: &self.pods,
            pod_groups: &self.groups,
            queues: &self.queues,
            priority_classes: &[],
            namespaces: &self.namespaces,
            topologies: &[],
        };
        convert(&objects, "drover")
    }

    /// A group of `pods` one-GPU pods, gang minimum `min`, in `queue` with `class`.
    fn submit(&mut self, namespace: &str, min: u32, pods: u32, queue: &str, class: &str) -> String {
        self.made += 1;
        let name = format!("g{}", self.made);
        self.groups.push(from(json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"minMember": min, "queue": queue, "priorityClassName": class}})));
        for _ in 0..pods {
            self.add_pod(namespace, &name);
        }
        name
    }

    fn add_pod(&mut self, namespace: &str, group: &str) {
        self.made += 1;
        let name = format!("{group}-p{}", self.made);
        self.pods.push(from(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {POD_GROUP_ANNOTATION: group}},
            "spec": {"schedulerName": "drover",
                "containers": [{"name": "main", "resources": {"limits": {GPU: "1"}}}]}})));
    }

    /// One scheduling cycle, its writes applied as the scheduler makes them.
    fn cycle(&mut self) {
        let converted = self.convert();
        let snap = converted.snapshot().expect("a snapshot");
        let outcome = run_cycle(&snap, &SchedulerConfig::default());
        for &(p, ..) in &outcome.decisions.evictions {
            let victim = &converted.pods[p];
            self.pods.retain(|pod| pod.metadata.name.as_deref() != Some(victim.name.as_str()));
        }
        for &(p, n) in &outcome.decisions.binds {
            let target = &converted.pods[p];
            let charge = Charge::for_job(&snap, snap.pods[p].job);
            for pod in &mut self.pods {
                if pod.metadata.name.as_deref() == Some(target.name.as_str()) {
                    let pod = Arc::make_mut(pod);
                    pod.spec.as_mut().expect("a spec").node_name = Some(snap.nodes[n].name.clone());
                    let (key, value) = charge.annotation();
                    pod.metadata.annotations.get_or_insert_with(Default::default).insert(key, value);
                    pod.status.get_or_insert_with(Default::default).phase = Some("Running".into());
                }
            }
        }
        let wanted: Vec<(String, _)> =
            wanted_group_statuses(&self.groups, &snap, &converted, &outcome, Duration::from_secs(1))
                .into_iter()
                .map(|(g, status)| (g.metadata.name.clone().unwrap_or_default(), status))
                .collect();
        for (name, status) in wanted {
            if let Some(g) = self.groups.iter_mut().find(|g| g.metadata.name.as_deref() == Some(name.as_str())) {
                Arc::make_mut(g).status = Some(status);
            }
        }
    }

    /// GPUs held by bound Drover pods, per namespace.
    fn held(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for pod in &self.pods {
            if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                *out.entry(pod.metadata.namespace.clone().unwrap_or_default()).or_default() += 1;
            }
        }
        out
    }

    /// GPUs the next cycle charges, per (queue, namespace): the bound pods of every job.
    fn charged(&self) -> BTreeMap<(String, String), i64> {
        let mut out = BTreeMap::new();
        for job in self.convert().jobs {
            for task in &job.tasks {
                let bound = task
                    .pods
                    .iter()
                    .filter(|p| matches!(p, PodPhaseInput::Bound(_) | PodPhaseInput::Releasing(_)))
                    .count() as i64;
                if bound > 0 {
                    *out.entry((job.queue.clone(), job.namespace.clone())).or_default() +=
                        bound * task.requests.get(GPU);
                }
            }
        }
        out
    }

    /// The books balance: each team's queue is charged exactly what its namespace holds,
    /// nothing of a team is charged elsewhere, and no team holds more than its limit.
    fn check(&self, history: &[String]) {
        let held = self.held();
        let charged = self.charged();
        for (ns, queue, limit) in [(NS_A, QUEUE_A, LIMIT_A), (NS_B, QUEUE_B, LIMIT_B)] {
            let holds = held.get(ns).copied().unwrap_or(0);
            let own = charged.get(&(queue.to_string(), ns.to_string())).copied().unwrap_or(0);
            assert_eq!(own, holds, "queue {queue} is charged {own} GPUs, {ns} holds {holds}; after {history:#?}");
            assert!(holds <= limit, "{ns} holds {holds} GPUs, its limit is {limit}; after {history:#?}");
        }
        let elsewhere: Vec<_> = charged.keys().filter(|(q, _)| q != QUEUE_A && q != QUEUE_B).collect();
        assert!(elsewhere.is_empty(), "charged outside the teams' queues: {elsewhere:?}; after {history:#?}");
    }

    fn team_a_groups(&self) -> Vec<String> {
        self.groups
            .iter()
            .filter(|g| g.metadata.namespace.as_deref() == Some(NS_A))
            .filter_map(|g| g.metadata.name.clone())
            .collect()
    }

    fn team_a_pods(&self) -> Vec<String> {
        self.pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(NS_A))
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    fn edit_group(&mut self, name: &str, edit: impl FnOnce(&mut PodGroup)) {
        if let Some(g) = self.groups.iter_mut().find(|g| g.metadata.name.as_deref() == Some(name)) {
            edit(Arc::make_mut(g));
        }
    }
}

/// What a tenant with `edit` in team A's namespace does to its own objects.
#[derive(Debug, Clone)]
enum Edit {
    /// Deletes one of its PodGroups (its pods stay).
    DeleteGroup(usize),
    /// Points a pod's group annotation at another of its groups, or at none that exists.
    Reannotate { pod: usize, group: Option<usize> },
    /// Changes a group's `spec.queue`.
    SetQueue { group: usize, queue: &'static str },
    /// Changes a group's `spec.priorityClassName`.
    SetClass { group: usize, class: &'static str },
    /// Adds a pod to a group.
    AddPod(usize),
    /// Submits a new group.
    Submit { min: u32, pods: u32, queue: &'static str, class: &'static str },
    /// Deletes one of its pods.
    DeletePod(usize),
}

static QUEUES: [&str; 5] = [QUEUE_A, QUEUE_B, "default", "missing", ""];
static CLASSES: [&str; 4] = ["train", "inference", "build", "missing"];

fn edits() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0usize..8).prop_map(Edit::DeleteGroup),
        (0usize..16, proptest::option::of(0usize..8)).prop_map(|(pod, group)| Edit::Reannotate { pod, group }),
        (0usize..8, proptest::sample::select(&QUEUES[..])).prop_map(|(group, queue)| Edit::SetQueue { group, queue }),
        (0usize..8, proptest::sample::select(&CLASSES[..])).prop_map(|(group, class)| Edit::SetClass { group, class }),
        (0usize..8).prop_map(Edit::AddPod),
        (1u32..3, 1u32..4, proptest::sample::select(&QUEUES[..3]), proptest::sample::select(&CLASSES[..3]))
            .prop_map(|(min, pods, queue, class)| Edit::Submit { min: min.min(pods), pods, queue, class }),
        (0usize..16).prop_map(Edit::DeletePod),
    ]
}

impl Cluster {
    fn apply(&mut self, edit: &Edit) {
        let groups = self.team_a_groups();
        let pods = self.team_a_pods();
        let group = |i: usize| (!groups.is_empty()).then(|| groups[i % groups.len()].clone());
        let pod = |i: usize| (!pods.is_empty()).then(|| pods[i % pods.len()].clone());
        match edit {
            Edit::DeleteGroup(i) => {
                if let Some(name) = group(*i) {
                    self.groups.retain(|g| g.metadata.name.as_deref() != Some(name.as_str()));
                }
            }
            Edit::Reannotate { pod: p, group: g } => {
                let Some(name) = pod(*p) else { return };
                let target = g.and_then(group).unwrap_or_else(|| "nowhere".into());
                if let Some(p) = self.pods.iter_mut().find(|p| p.metadata.name.as_deref() == Some(name.as_str())) {
                    let annotations = Arc::make_mut(p).metadata.annotations.get_or_insert_with(Default::default);
                    annotations.insert(POD_GROUP_ANNOTATION.into(), target);
                }
            }
            Edit::SetQueue { group: g, queue } => {
                if let Some(name) = group(*g) {
                    self.edit_group(&name, |pg| pg.spec.queue = Some(queue.to_string()));
                }
            }
            Edit::SetClass { group: g, class } => {
                if let Some(name) = group(*g) {
                    self.edit_group(&name, |pg| pg.spec.priority_class_name = Some(class.to_string()));
                }
            }
            Edit::AddPod(g) => {
                if let Some(name) = group(*g) {
                    self.add_pod(NS_A, &name);
                }
            }
            Edit::Submit { min, pods, queue, class } => {
                self.submit(NS_A, *min, *pods, queue, class);
            }
            Edit::DeletePod(p) => {
                if let Some(name) = pod(*p) {
                    self.pods.retain(|x| x.metadata.name.as_deref() != Some(name.as_str()));
                }
            }
        }
    }
}

/// Team A runs two groups at its limit, team B a gang of 4 and waits for more.
fn busy_cluster() -> Cluster {
    let mut c = Cluster::new();
    c.submit(NS_A, 1, 1, QUEUE_A, "train");
    c.submit(NS_A, 1, 1, QUEUE_A, "train");
    c.submit(NS_B, 4, 4, QUEUE_B, "train");
    c.cycle();
    c.cycle();
    c
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// After every tenant edit and every cycle, the books balance and no limit is passed.
    #[test]
    fn no_tenant_edit_takes_gpus_out_of_the_books(steps in proptest::collection::vec((edits(), any::<bool>()), 1..16)) {
        let mut c = busy_cluster();
        let mut history = Vec::new();
        c.check(&history);
        for (edit, team_b_grows) in steps {
            history.push(format!("{edit:?}"));
            c.apply(&edit);
            if team_b_grows {
                history.push("team B submits a 1-GPU group".into());
                c.submit(NS_B, 1, 1, QUEUE_B, "train");
            }
            c.check(&history);
            c.cycle();
            c.check(&history);
            c.cycle();
            c.check(&history);
        }
    }
}

/// The attack of the issue, step by step: bind 2 at the limit, unlink them by each of the
/// tenant's means, submit 2 more. The queue stays charged 2 and the new pods wait.
#[test]
fn unlinking_bound_pods_from_their_group_frees_no_quota() {
    type Unlink = fn(&mut Cluster, &str);
    let unlinks: [(&str, Unlink); 6] = [
        ("delete the PodGroup", |c, g| c.groups.retain(|x| x.metadata.name.as_deref() != Some(g))),
        ("re-annotate the pods", |c, _| {
            for p in &mut c.pods {
                let a = Arc::make_mut(p).metadata.annotations.get_or_insert_with(Default::default);
                a.insert(POD_GROUP_ANNOTATION.into(), "elsewhere".into());
            }
        }),
        ("queue to one that does not exist", |c, g| c.edit_group(g, |pg| pg.spec.queue = Some("missing".into()))),
        ("queue to default", |c, g| c.edit_group(g, |pg| pg.spec.queue = Some("default".into()))),
        ("class to one that does not exist", |c, g| {
            c.edit_group(g, |pg| pg.spec.priority_class_name = Some("missing".into()))
        }),
        ("class to inference", |c, g| c.edit_group(g, |pg| pg.spec.priority_class_name = Some("inference".into()))),
    ];
    for (how, unlink) in unlinks {
        let mut c = Cluster::new();
        let first = c.submit(NS_A, 2, 2, QUEUE_A, "train");
        c.cycle();
        assert_eq!(c.held().get(NS_A), Some(&2), "{how}: the first gang binds");
        unlink(&mut c, &first);
        c.cycle();
        c.submit(NS_A, 2, 2, QUEUE_A, "train");
        c.cycle();
        c.cycle();
        assert_eq!(c.held().get(NS_A), Some(&2), "{how}: team A still holds only its limit");
        assert_eq!(c.charged().get(&(QUEUE_A.to_string(), NS_A.to_string())), Some(&2), "{how}: and is charged for it");
    }
}

/// A group admitted to one queue stays charged there: its later `spec.queue` is not obeyed
/// while it runs, and the status shows what it was admitted with.
#[test]
fn an_admitted_group_keeps_its_queue_and_class_until_admitted_again() {
    let mut c = Cluster::new();
    let g = c.submit(NS_A, 1, 1, QUEUE_A, "train");
    c.cycle();
    c.edit_group(&g, |pg| {
        pg.spec.queue = Some(QUEUE_B.into());
        pg.spec.priority_class_name = Some("inference".into());
    });
    c.cycle();
    let job = c.convert().jobs.into_iter().find(|j| j.name == g).expect("the group's job");
    assert_eq!((job.queue.as_str(), job.priority_class.as_str(), job.preemptible), (QUEUE_A, "train", true));
    let group = c.groups.iter().find(|x| x.metadata.name.as_deref() == Some(g.as_str())).expect("the group");
    let admission = group.status.as_ref().and_then(|s| s.admission.clone()).expect("an admission record");
    assert_eq!((admission.queue.as_str(), admission.priority_class_name.as_str()), (QUEUE_A, "train"));
}

/// Pods whose group is deleted stay charged to their queue and can be reclaimed there: team
/// B, within its deserved quota, gets the GPUs team A borrowed and then unlinked.
#[test]
fn detached_pods_are_reclaimable_as_their_queues_work() {
    let mut c = Cluster::new();
    c.queues = vec![queue(QUEUE_A, "a", 1, 8), queue(QUEUE_B, "b", 7, 8)];
    let borrowed = c.submit(NS_A, 1, 8, QUEUE_A, "train");
    c.cycle();
    assert_eq!(c.held().get(NS_A), Some(&8), "team A borrows the idle cluster");
    c.groups.retain(|x| x.metadata.name.as_deref() != Some(borrowed.as_str()));
    c.submit(NS_B, 7, 7, QUEUE_B, "train");
    for _ in 0..4 {
        c.cycle();
    }
    assert_eq!(c.held().get(NS_B), Some(&7), "team B gets its deserved quota back");
    assert_eq!(c.held().get(NS_A), Some(&1));
}
