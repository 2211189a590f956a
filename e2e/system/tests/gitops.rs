//! GitOps: the samples in `config/samples/`, applied with the real kubectl while Drover's
//! controllers and scheduler run, show no drift once every sample object is reconciled
//! (`kubectl diff --server-side` finds nothing to change: the controllers write only status
//! and fields they own), and a second apply changes no object at all (every sample object
//! keeps its resourceVersion). Without kubectl the test prints SKIPPED;
//! `DROVER_REQUIRE_KUBECTL` (set in CI) forbids that.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use drover_api::crd::podgroup::PodGroup;
use drover_e2e::{eventually, Cluster};
use kube::api::Api;
use serde_json::Value;

/// The annotation the controllers put on a plain pod they grouped.
const POD_GROUP_ANNOTATION: &str = "scheduling.drover.dev/pod-group";
/// The label the controllers put on a Project's namespaces.
const PROJECT_LABEL: &str = "scheduling.drover.dev/project";

fn samples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/samples")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl runs")
}

/// Every object the sample files hold, as written, in file order.
fn sample_objects() -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples())
        .expect("config/samples is readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("sample readable");
        for doc in text.split("\n---") {
            let object: Value = serde_yaml::from_str(doc).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if !object.is_null() {
                objects.push(object);
            }
        }
    }
    objects
}

/// `Kind namespace/name` of an object.
fn key(object: &Value) -> String {
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    match meta["namespace"].as_str() {
        Some(ns) => format!("{} {ns}/{name}", object["kind"].as_str().unwrap_or_default()),
        None => format!("{} {name}", object["kind"].as_str().unwrap_or_default()),
    }
}

/// Every sample object as the API server has it now, by [`key`]; panics unless each object of
/// the sample files is there.
fn live_samples(kubeconfig: &Path, wanted: usize) -> BTreeMap<String, Value> {
    let dir = samples().display().to_string();
    let out = kubectl(kubeconfig, &["get", "-f", &dir, "-o", "json", "--show-managed-fields"]);
    assert!(out.status.success(), "kubectl get -f config/samples: {}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).expect("kubectl prints JSON");
    let items = list["items"].as_array().cloned().unwrap_or_else(|| vec![list.clone()]);
    let live: BTreeMap<String, Value> = items.into_iter().map(|o| (key(&o), o)).collect();
    assert_eq!(live.len(), wanted, "kubectl get -f config/samples found {:?}", live.keys().collect::<Vec<_>>());
    live
}

/// Every sample object's resourceVersion, by [`key`].
fn versions(live: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    live.iter()
        .map(|(k, o)| (k.clone(), o["metadata"]["resourceVersion"].as_str().unwrap_or_default().into()))
        .collect()
}

/// What is not reconciled yet among the sample objects (empty: all of them are): a Project's
/// namespace without its label, a Project or Department whose status is not of its
/// generation, a Job or Queue without status, a `schedulerName: drover` pod without its
/// PodGroup.
async fn unreconciled(live: &BTreeMap<String, Value>, groups: &dyn Fn(&str) -> Api<PodGroup>) -> Vec<String> {
    let mut owners = BTreeMap::new();
    for project in live.values().filter(|o| o["kind"] == "Project") {
        for ns in project["spec"]["namespaces"].as_array().into_iter().flatten() {
            owners.insert(ns.as_str().unwrap_or_default().to_string(), project["metadata"]["name"].clone());
        }
    }
    let mut waiting = Vec::new();
    for (key, object) in live {
        let meta = &object["metadata"];
        let done = match object["kind"].as_str().unwrap_or_default() {
            "Namespace" => {
                let owner = owners.get(meta["name"].as_str().unwrap_or_default());
                owner.is_none_or(|project| &meta["labels"][PROJECT_LABEL] == project)
            }
            "Project" | "Department" => object["status"]["observedGeneration"] == meta["generation"],
            "Job" | "Queue" => object["status"].is_object(),
            "Pod" if object["spec"]["schedulerName"] == "drover" => {
                let ns = meta["namespace"].as_str().unwrap_or_default();
                let group = format!("pod-{}", meta["name"].as_str().unwrap_or_default());
                meta["annotations"][POD_GROUP_ANNOTATION] == group.as_str()
                    && groups(ns).get_opt(&group).await.ok().flatten().is_some()
            }
            _ => true,
        };
        if !done {
            waiting.push(key.clone());
        }
    }
    waiting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_samples_show_no_drift_after_the_controllers_reconcile() {
    if !drover_envtest::tools::kubectl_available() {
        return;
    }
    let objects = sample_objects();
    for kind in ["Namespace", "PriorityClass", "Department", "Project", "Queue", "Job", "Pod"] {
        assert!(objects.iter().any(|o| o["kind"] == kind), "config/samples has no {kind}: the checks below need one");
    }
    let Some(cluster) = Cluster::start(2).await else { return };
    let kubeconfig = cluster.server().kubeconfig();
    let logs = cluster.logs().display().to_string();
    let dir = samples().display().to_string();
    let first = kubectl(&kubeconfig, &["apply", "--server-side", "-f", &dir]);
    assert!(first.status.success(), "first apply: {}", String::from_utf8_lossy(&first.stderr));

    // Every sample object reconciled, and nothing written for a while (the controllers and
    // the scheduler have caught up), so that whatever moves next is the second apply's doing.
    let client = cluster.client.clone();
    let groups = move |ns: &str| Api::<PodGroup>::namespaced(client.clone(), ns);
    let mut last = BTreeMap::new();
    let mut quiet_since = std::time::Instant::now();
    let before =
        eventually(120, &format!("every sample object reconciled and then left alone (logs in {logs})"), || {
            let live = live_samples(&kubeconfig, objects.len());
            let now = versions(&live);
            if now != last {
                last = now.clone();
                quiet_since = std::time::Instant::now();
            }
            let groups = &groups;
            let quiet = quiet_since.elapsed() >= Duration::from_secs(3);
            async move {
                let waiting = unreconciled(&live, groups).await;
                (waiting.is_empty() && quiet).then_some(live)
            }
        })
        .await;

    let diff = kubectl(&kubeconfig, &["diff", "--server-side", "-f", &dir]);
    assert_eq!(
        diff.status.code(),
        Some(0),
        "kubectl diff after reconciling:\n{}{}",
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );
    let second = kubectl(&kubeconfig, &["apply", "--server-side", "-f", &dir]);
    assert!(second.status.success(), "second apply: {}", String::from_utf8_lossy(&second.stderr));
    let live = live_samples(&kubeconfig, objects.len());
    let (old, new) = (versions(&before), versions(&live));
    let changed: Vec<String> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(v))
        .map(|(k, _)| {
            let fields = |o: &BTreeMap<String, Value>| o[k]["metadata"]["managedFields"].to_string();
            format!("{k}: managedFields before {} after {}", fields(&before), fields(&live))
        })
        .collect();
    assert!(changed.is_empty(), "the second apply changed {} sample object(s): {changed:#?}", changed.len());
}
