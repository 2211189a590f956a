//! Property tests of the controllers' readers of tenant-written input (issue 9, part 5):
//! a plain pod's queue annotation and node-pool selector ([`choose_queue`]), the pool and
//! queue names made from Project and Department specs, a Job's task templates (stored by
//! the API server as written, read through [`TaskTemplate`]), and the task, index and retry
//! labels and annotations of a Job's pods ([`PodView`] and the state machine [`plan`]).
//!
//! The property everywhere: nothing panics, and a bad value either yields an error naming
//! the field or is ignored in the way `docs/security.md` and the module docs say. Case counts
//! are bounded (a few hundred) so the whole file runs in seconds. The one-pod group's name
//! length, which only the running controller checks, is proven on a real API server in
//! `plain_pods.rs`.

use std::collections::{BTreeMap, BTreeSet};

use drover_api::crd::job::Job;
use drover_api::crd::project::Project;
use drover_api::crd::task_template::TaskTemplate;
use drover_controllers::job::{self, Phase, PodView, JOB_NAME_LABEL, RETRY_ANNOTATION, TASK_INDEX_LABEL, TASK_LABEL};
use drover_controllers::queues::{
    choose_queue, department_queue_name, project_queue_name, valid_pool_name, QueueChoice, DEFAULT_QUEUE,
};
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Value};

/// Strings chosen to break a naive reader, next to random ones.
const HOSTILE: &[&str] = &[
    "",
    " ",
    "\t",
    "-1",
    "+1",
    "+0",
    "007",
    "1.0",
    "1e3",
    "0x10",
    "4294967295",
    "4294967296",
    "99999999999999999999",
    "１",
    "٣",
    "1\n",
    " 1",
    "null",
    "🙂",
    "a.b",
    "..",
    "default",
    "team-b",
    "team-b ",
    " team-b",
    "kube-system",
    "a/b",
    "A",
    "a_b",
    "-a",
    "a-",
];

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => select(HOSTILE).prop_map(str::to_string),
        2 => "[a-z0-9.-]{0,12}",
        1 => any::<String>(),
        1 => any::<u32>().prop_map(|n| n.to_string()),
    ]
    .boxed()
}

fn opt_text() -> BoxedStrategy<Option<String>> {
    prop::option::of(text()).boxed()
}

/// A Project as the API server could store it (the schema bounds pool names to 1..=63
/// characters, nothing more).
fn project() -> BoxedStrategy<Project> {
    ("[a-z][a-z0-9-]{0,10}", prop::collection::vec(prop_oneof!["[a-z0-9-]{1,8}", text()], 0..4))
        .prop_map(|(name, pools)| {
            let pools: Vec<Value> = pools.into_iter().map(|p| json!({"name": p, "gpu": "1"})).collect();
            serde_json::from_value(json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Project",
                "metadata": {"name": name}, "spec": {"department": "d", "namespaces": ["ns"], "nodePools": pools}}))
            .expect("a Project")
        })
        .boxed()
}

/// Any JSON value, nested a little.
fn any_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    select(&["spec", "metadata", "containers", "name", "image", "labels", "env"][..])
                        .prop_map(str::to_string),
                    text()
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

/// A readable template.
fn good_template() -> Value {
    json!({"metadata": {"labels": {"app": "train"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer",
            "args": ["--epochs", "3"], "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]}]}})
}

/// Fields of [`good_template`] (as paths) and values of the wrong type for them.
const TYPED_FIELDS: &[(&[&str], &str)] = &[
    (&["spec"], "object"),
    (&["metadata"], "object"),
    (&["metadata", "labels"], "object"),
    (&["spec", "containers"], "array"),
    (&["spec", "restartPolicy"], "string"),
    (&["spec", "containers", "0"], "object"),
    (&["spec", "containers", "0", "name"], "string"),
    (&["spec", "containers", "0", "image"], "string"),
    (&["spec", "containers", "0", "args"], "array"),
    (&["spec", "containers", "0", "env"], "array"),
    (&["spec", "containers", "0", "ports", "0", "containerPort"], "integer"),
];

fn wrong_value(kind: &str) -> BoxedStrategy<Value> {
    let object = Just(json!({"x": 1}));
    let array = Just(json!([1, "a"]));
    let string = text().prop_map(Value::String);
    let number = any::<i64>().prop_map(Value::from);
    let boolean = any::<bool>().prop_map(Value::Bool);
    match kind {
        "object" => prop_oneof![array, string, number, boolean].boxed(),
        "array" => prop_oneof![object, string, number, boolean].boxed(),
        "string" => prop_oneof![object, array, number, boolean].boxed(),
        _ => prop_oneof![object, array, string, boolean].boxed(),
    }
}

/// `serde_path_to_error`'s spelling of a path: `spec.containers[0].name`.
fn spelled(path: &[&str]) -> String {
    let mut out = String::new();
    for part in path {
        if part.parse::<usize>().is_ok() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

fn set_at(value: &mut Value, path: &[&str], new: Value) {
    let mut at = value;
    for part in path {
        at = match part.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[*part],
        };
    }
    *at = new;
}

/// A Job of `tasks` (name, replicas), each with `template`.
fn job_with(tasks: &[(&str, u32)], template: &Value) -> Job {
    let tasks: Vec<Value> =
        tasks.iter().map(|(n, r)| json!({"name": n, "replicas": r, "template": template.clone()})).collect();
    serde_json::from_value(json!({"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a", "uid": "job-uid", "generation": 1},
        "spec": {"tasks": tasks}}))
    .expect("a Job")
}

/// A pod of job `j` as a tenant may have edited it: labels and annotations anything.
#[derive(Debug, Clone)]
struct HostilePod {
    name: String,
    task: Option<String>,
    index: Option<String>,
    retry: Option<String>,
    phase: Option<String>,
    deleting: bool,
}

impl HostilePod {
    fn to_pod(&self) -> Pod {
        let mut labels = BTreeMap::from([(JOB_NAME_LABEL.to_string(), "j".to_string())]);
        if let Some(t) = &self.task {
            labels.insert(TASK_LABEL.into(), t.clone());
        }
        if let Some(i) = &self.index {
            labels.insert(TASK_INDEX_LABEL.into(), i.clone());
        }
        let annotations: BTreeMap<String, String> =
            self.retry.iter().map(|r| (RETRY_ANNOTATION.to_string(), r.clone())).collect();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": "team-a", "uid": format!("uid-{}", self.name),
                "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "main"}]}});
        if let Some(phase) = &self.phase {
            pod["status"] = json!({"phase": phase});
        }
        if self.deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        serde_json::from_value(pod).expect("a Pod")
    }
}

/// Pods of job `j` (tasks `worker` × 3 and `ps` × 1): names and labels right, wrong, or
/// anything.
fn hostile_pod() -> BoxedStrategy<HostilePod> {
    let name = prop_oneof![
        select(&["j-worker-0", "j-worker-1", "j-worker-2", "j-worker-3", "j-ps-0", "j-ps-1", "j-worker-01"][..])
            .prop_map(str::to_string),
        text().prop_map(|t| format!("j-{t}")),
    ];
    let task = prop::option::of(prop_oneof![select(&["worker", "ps", "chief"][..]).prop_map(str::to_string), text()]);
    let index = prop::option::of(prop_oneof![(0u32..5).prop_map(|i| i.to_string()), text()]);
    let phase = prop::option::of(prop_oneof![
        select(&["Pending", "Running", "Succeeded", "Failed", "Unknown"][..]).prop_map(str::to_string),
        text()
    ]);
    (name, task, index, opt_text(), phase, any::<bool>())
        .prop_map(|(name, task, index, retry, phase, deleting)| HostilePod {
            name,
            task,
            index,
            retry,
            phase,
            deleting,
        })
        .boxed()
}

/// The pod a Job `j` with `worker` × 3 and `ps` × 1 counts as its own: named
/// `j-<task>-<index>` and labelled with that task and index.
fn is_current(p: &PodView) -> bool {
    let replicas = match p.task.as_str() {
        "worker" => 3,
        "ps" => 1,
        _ => return false,
    };
    p.index.is_some_and(|i| i < replicas && p.name == job::pod_name("j", &p.task, i))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    /// The `scheduling.drover.dev/queue` annotation is a request passed on as written
    /// (trimmed): the scheduler, not this reader, decides whether the namespace may use the
    /// queue. A blank one is ignored. Without one, a pod only ever lands in a queue of its own
    /// namespace's project (for the pool it selects, else the project's first) or in
    /// `default`, and a pool the project has no quota in is reported by the choice
    /// (`PoolNotInProject`, a Warning Event), never turned into another project's queue.
    #[test]
    fn a_queue_annotation_is_a_request_and_without_one_a_pod_stays_in_its_project(
        annotation in opt_text(), project in prop::option::of(project()), pool in opt_text(),
    ) {
        let choice = choose_queue(annotation.as_deref(), project.as_ref(), pool.as_deref());
        let asked = annotation.as_deref().map(str::trim).filter(|a| !a.is_empty());
        if let Some(asked) = asked {
            prop_assert_eq!(&choice, &QueueChoice::Annotated(asked.to_string()));
            prop_assert_eq!(choice.queue(), asked);
            return Ok(());
        }
        let Some(project) = project else {
            prop_assert_eq!(choice, QueueChoice::Default);
            return Ok(());
        };
        let name = project.metadata.name.clone().unwrap_or_default();
        let pools: Vec<&str> = project.spec.node_pools.iter().map(|p| p.name.as_str()).collect();
        match &choice {
            QueueChoice::Project(q) => {
                let used = q.strip_prefix(&format!("{name}.")).unwrap_or_else(|| panic!("{q} is not of {name}"));
                prop_assert!(pools.contains(&used), "{q}: pool {used:?} is not one of {pools:?}");
                match pool.as_deref() {
                    Some(p) => prop_assert_eq!(used, p, "the selected pool"),
                    None => prop_assert_eq!(used, pools[0], "the project's first pool"),
                }
            }
            QueueChoice::PoolNotInProject { project: p, pool: selected } => {
                prop_assert_eq!(p, &name);
                prop_assert_eq!(Some(selected.as_str()), pool.as_deref());
                prop_assert!(!pools.contains(&selected.as_str()));
                prop_assert_eq!(choice.queue(), DEFAULT_QUEUE);
            }
            QueueChoice::Default => prop_assert!(pool.is_none() && pools.is_empty(), "{choice:?}"),
            QueueChoice::Annotated(_) => prop_assert!(false, "a blank annotation was taken: {choice:?}"),
        }
    }

    /// Node pools from Project and Department specs: a name is a pool only if it is a DNS
    /// label (anything else is `InvalidQueueName` and gets no queue), and then the queue
    /// names `<project>.<pool>` and `<department>.<pool>` give the pool back as the part after
    /// the last dot, so two projects (or two departments) never share a queue name.
    #[test]
    fn pool_names_are_dns_labels_and_queue_names_never_collide(
        a in ("[a-z0-9.-]{1,12}", text()), b in ("[a-z0-9.-]{1,12}", text()),
    ) {
        for pool in [&a.1, &b.1] {
            let dns_label = !pool.is_empty() && pool.len() <= 63
                && pool.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !pool.starts_with('-') && !pool.ends_with('-');
            prop_assert_eq!(valid_pool_name(pool), dns_label, "{:?}", pool);
        }
        if valid_pool_name(&a.1) && valid_pool_name(&b.1) {
            let (qa, qb) = (project_queue_name(&a.0, &a.1), project_queue_name(&b.0, &b.1));
            prop_assert_eq!(qa.rsplit('.').next(), Some(a.1.as_str()));
            prop_assert_eq!(qa == qb, a == b, "{} and {}", qa, qb);
            let (da, db) = (department_queue_name(&a.0, &a.1), department_queue_name(&b.0, &b.1));
            prop_assert_eq!(da == db, a == b, "{} and {}", da, db);
        }
    }

    /// Any object in `spec.tasks[].template` (the CRD keeps it as written): the Job still
    /// reads, so one tenant's Job never fails a list of everyone's; the template either
    /// reads as a pod template (and reads the same again once written) or carries a
    /// non-empty reason and is written back exactly as it was stored.
    #[test]
    fn any_template_leaves_its_job_readable_and_an_unreadable_one_unchanged(template in any_json()) {
        let job = job_with(&[("worker", 1)], &template);
        let read = &job.spec.tasks[0].template;
        let written = serde_json::to_value(&job).expect("a Job serializes");
        let written = &written["spec"]["tasks"][0]["template"];
        match read.get() {
            Err(error) => {
                prop_assert!(!error.is_empty());
                prop_assert_eq!(written, &template, "an unreadable template is written back as stored");
            }
            Ok(pod_template) => {
                let again = TaskTemplate::from_value(written.clone());
                prop_assert_eq!(again.get().ok(), Some(pod_template), "a readable template changes when written");
            }
        }
    }

    /// A readable template with one field of the wrong type: the reason starts with that
    /// field's path (`spec.containers[0].image: invalid type: ...`), which the Job
    /// controller puts in the Job's `Valid=False InvalidTemplate` condition.
    #[test]
    fn a_wrong_field_in_a_template_is_named(
        (field, value) in select(TYPED_FIELDS).prop_flat_map(|(path, kind)| (Just(path), wrong_value(kind))),
    ) {
        let mut template = good_template();
        set_at(&mut template, field, value.clone());
        let read = TaskTemplate::from_value(template);
        let error = read.get().expect_err("a wrong type does not read");
        let path = spelled(field);
        prop_assert!(error.starts_with(&format!("{path}: ")), "{:?} at {}: {}", value, path, error);
    }

    /// The Job controller's view of a pod whose labels and annotations the tenant edited:
    /// reading it never panics; an index label is read only as a whole non-negative integer
    /// (else none); a `retry-count` that does not read as one is 0; an unknown phase is
    /// `Pending`.
    #[test]
    fn a_pods_labels_and_annotations_are_read_or_ignored(pod in hostile_pod()) {
        let view = PodView::of(&pod.to_pod());
        prop_assert_eq!(view.index, pod.index.as_deref().and_then(|i| i.parse::<u32>().ok()));
        prop_assert_eq!(view.retry, pod.retry.as_deref().and_then(|r| r.parse::<u32>().ok()).unwrap_or(0));
        let phase = match pod.phase.as_deref() {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            _ => Phase::Pending,
        };
        prop_assert_eq!(view.phase, phase);
        prop_assert_eq!(view.task, pod.task.clone().unwrap_or_default());
    }

    /// A Job's pods with any task and index labels: the state machine never panics; it
    /// deletes every live pod that is not `j-<task>-<index>` labelled with that task and an
    /// index below the task's replicas; it never deletes one that is (while the Job is
    /// pending and its own pods are pending or running); and it creates exactly the pods whose
    /// names are missing. A wrong label thus costs the tenant its own pod, nothing else.
    #[test]
    fn pods_with_wrong_task_or_index_labels_are_replaced_and_the_right_ones_kept(
        pods in prop::collection::vec(hostile_pod(), 0..8),
    ) {
        let job = job_with(&[("worker", 3), ("ps", 1)], &good_template());
        let mut seen = BTreeSet::new();
        let views: Vec<PodView> = pods
            .iter()
            .filter(|p| seen.insert(p.name.clone()))
            .map(|p| PodView::of(&p.to_pod()))
            // The Job's own pods fail or succeed in other tests; here they wait or run.
            .filter(|v| !is_current(v) || matches!(v.phase, Phase::Pending | Phase::Running))
            .collect();
        let now = jiff::Timestamp::from_second(1_700_000_000).expect("a time");
        let plan = job::plan(&job, &views, &[], Ok(()), None, now);
        let deleted: BTreeSet<&str> = plan.delete.iter().map(|d| d.name.as_str()).collect();
        for v in &views {
            let want = !v.deleting && !is_current(v);
            prop_assert_eq!(deleted.contains(v.name.as_str()), want, "{:?} in {:?}", v, plan.delete);
        }
        let names: BTreeSet<&str> = views.iter().map(|v| v.name.as_str()).collect();
        let mut missing = Vec::new();
        for (pos, (task, replicas)) in [("worker", 3u32), ("ps", 1)].into_iter().enumerate() {
            for i in 0..replicas {
                if !names.contains(job::pod_name("j", task, i).as_str()) {
                    missing.push((pos, i));
                }
            }
        }
        prop_assert_eq!(plan.create, missing);
    }
}
