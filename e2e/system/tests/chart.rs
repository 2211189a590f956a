//! The Helm chart installed for real (the Helm v4 SDK through PyPI's `helm-python-sdk`) on the
//! real API server with RBAC on, for the default values and for every values file under
//! `charts/drover/ci/`: each install creates what its values ask for, `helm upgrade` to
//! another values file applies it, and `helm uninstall` leaves only the CRDs (Helm never
//! deletes what `crds/` installed; docs/install.md says so). The CRD upgrade step of
//! docs/install.md, run as written with the real kubectl after a `helm install`, brings a
//! changed CRD to the API server. Without helm-python-sdk (or kubectl) the tests print
//! SKIPPED; `DROVER_REQUIRE_HELM` and `DROVER_REQUIRE_KUBECTL` (set in CI) forbid that.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use drover_e2e::chart::{chart_dir, helm, render, HelmAction, INSTANCE, NAMESPACE};
use drover_e2e::{binary, eventually, Cluster};
use drover_envtest::{Options, Server};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::Client;
use serde_json::json;

/// The values files CI installs: the defaults (`None`) and each file under `ci/`.
fn values_files() -> Vec<Option<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci"))
        .expect("charts/drover/ci is readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "charts/drover/ci has no values file");
    std::iter::once(None).chain(files.into_iter().map(Some)).collect()
}

/// What a values file asks for, read the way the chart reads it (defaults from values.yaml).
struct Expected {
    scheduler_replicas: i32,
    controllers_replicas: i32,
    budgets: bool,
    priority_classes: bool,
    service_monitors: bool,
    flow_schema: bool,
    admission_policy: bool,
    user_roles: bool,
    queue_viewers: bool,
    topology: bool,
}

fn expected(values: Option<&Path>) -> Expected {
    let text = values.map(|p| std::fs::read_to_string(p).expect("values readable")).unwrap_or_default();
    let v: serde_json::Value =
        if text.trim().is_empty() { json!({}) } else { serde_yaml::from_str(&text).expect("values parse") };
    let flag = |path: &[&str], default: bool| {
        path.iter().try_fold(&v, |at, key| at.get(key)).and_then(|x| x.as_bool()).unwrap_or(default)
    };
    let user_roles = flag(&["userRoles", "enabled"], true);
    Expected {
        scheduler_replicas: v["scheduler"]["replicas"].as_i64().unwrap_or(2) as i32,
        controllers_replicas: v["controllers"]["replicas"].as_i64().unwrap_or(2) as i32,
        budgets: flag(&["podDisruptionBudget", "enabled"], true),
        priority_classes: flag(&["priorityClasses", "enabled"], false),
        service_monitors: flag(&["metrics", "serviceMonitor", "enabled"], false),
        flow_schema: flag(&["flowSchema", "enabled"], true),
        admission_policy: flag(&["admissionPolicy", "enabled"], true),
        user_roles,
        // The default lists `system:authenticated`; an empty list binds no one.
        queue_viewers: user_roles && v["userRoles"]["queueViewers"].as_array().is_none_or(|l| !l.is_empty()),
        topology: flag(&["topology", "default", "enabled"], false),
    }
}

impl Expected {
    /// How many of the release's objects of each kind the values make, by kind: one
    /// Deployment, ServiceAccount, metrics Service, leader-Lease Role and RoleBinding,
    /// ClusterRole and ClusterRoleBinding per binary, the scheduler's ConfigMap, and the
    /// optional parts.
    fn counts(&self) -> Vec<(&'static str, usize)> {
        let n = |on: bool, count: usize| if on { count } else { 0 };
        vec![
            ("Deployment", 2),
            ("ServiceAccount", 2),
            ("ConfigMap", 1),
            ("Service", 2),
            ("PodDisruptionBudget", n(self.budgets, 2)),
            ("Role", 2),
            ("RoleBinding", 2),
            // drover-user-edit, drover-user-view, drover-queue-viewer
            ("ClusterRole", 2 + n(self.user_roles, 3)),
            ("ClusterRoleBinding", 2 + n(self.queue_viewers, 1)),
            ("PriorityClass", n(self.priority_classes, 4)),
            ("ServiceMonitor", n(self.service_monitors, 2)),
            ("FlowSchema", n(self.flow_schema, 1)),
            // The charge guard's always, and the guarded-pods policy's when on.
            ("ValidatingAdmissionPolicy", 1 + n(self.admission_policy, 1)),
            ("ValidatingAdmissionPolicyBinding", 1 + n(self.admission_policy, 1)),
            ("Topology", n(self.topology, 1)),
        ]
    }
}

/// How many objects of each kind the chart renders for `values`, in the order of
/// [`Expected::counts`]; a kind the chart renders that `counts` does not know fails, so that
/// a new kind in the chart cannot escape the install and uninstall checks.
fn rendered_counts(values: Option<&Path>, label: &str) -> Vec<(&'static str, usize)> {
    let text = render(values).unwrap_or_else(|e| panic!("{label}: {e:#}"));
    let mut counts = expected(values).counts();
    for n in counts.iter_mut() {
        n.1 = 0;
    }
    for doc in text.split("\n---") {
        let object: serde_json::Value =
            serde_yaml::from_str(doc).unwrap_or_else(|e| panic!("{label}: rendered YAML: {e}\n{doc}"));
        let Some(kind) = object.get("kind").and_then(|k| k.as_str()) else { continue };
        let slot = counts.iter_mut().find(|(k, _)| *k == kind);
        let slot = slot.unwrap_or_else(|| panic!("{label}: the chart renders a {kind}, which the test does not count"));
        slot.1 += 1;
    }
    counts
}

/// The Prometheus Operator's ServiceMonitor kind, which the monitoring values create. The
/// operator is not part of this control plane, so its CRD is installed here as a schemaless
/// stand-in: enough for the API server to store the chart's objects.
async fn install_service_monitor_crd(client: &Client) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
            "names": {"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor",
                "listKind": "ServiceMonitorList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("CRD manifest");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("ServiceMonitor CRD created");
    let monitors = service_monitors(client);
    eventually(30, "the ServiceMonitor CRD is served", || async { monitors.list(&ListParams::default()).await.ok() })
        .await;
}

fn service_monitors(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("monitoring.coreos.com", "v1", "ServiceMonitor");
    Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::from_gvk(&gvk))
}

/// How many of the release's objects of each kind exist now, by kind.
async fn release_objects(client: &Client) -> Vec<(&'static str, usize)> {
    let by_label = ListParams::default().labels(INSTANCE);
    // The charge guard is one per cluster, unlabelled (the scheduler reads its file as is).
    let name = drover_api::charge_guard::NAME;
    let guard = (
        usize::from(Api::<ValidatingAdmissionPolicy>::all(client.clone()).get_opt(name).await.ok().flatten().is_some()),
        usize::from(
            Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).get_opt(name).await.ok().flatten().is_some(),
        ),
    );
    macro_rules! count {
        ($api:expr) => {
            $api.list(&by_label).await.map(|l| l.items.len()).unwrap_or(usize::MAX)
        };
    }
    vec![
        ("Deployment", count!(Api::<Deployment>::namespaced(client.clone(), NAMESPACE))),
        ("ServiceAccount", count!(Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE))),
        ("ConfigMap", count!(Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE))),
        ("Service", count!(Api::<Service>::namespaced(client.clone(), NAMESPACE))),
        ("PodDisruptionBudget", count!(Api::<PodDisruptionBudget>::namespaced(client.clone(), NAMESPACE))),
        ("Role", count!(Api::<Role>::namespaced(client.clone(), NAMESPACE))),
        ("RoleBinding", count!(Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE))),
        ("ClusterRole", count!(Api::<ClusterRole>::all(client.clone()))),
        ("ClusterRoleBinding", count!(Api::<ClusterRoleBinding>::all(client.clone()))),
        ("PriorityClass", count!(Api::<PriorityClass>::all(client.clone()))),
        ("ServiceMonitor", count!(service_monitors(client))),
        ("FlowSchema", count!(Api::<FlowSchema>::all(client.clone()))),
        ("ValidatingAdmissionPolicy", count!(Api::<ValidatingAdmissionPolicy>::all(client.clone())) + guard.0),
        (
            "ValidatingAdmissionPolicyBinding",
            count!(Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())) + guard.1,
        ),
        ("Topology", count!(Api::<drover_api::crd::topology::Topology>::all(client.clone()))),
    ]
}

/// Checks that the installed release has exactly what `want` asks for: each Deployment's
/// replicas, and how many objects of each kind carry the release's label.
async fn check_install(client: &Client, want: &Expected, values: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, replicas) in
        [("drover-scheduler", want.scheduler_replicas), ("drover-controllers", want.controllers_replicas)]
    {
        let deployment = deployments.get(name).await.unwrap_or_else(|e| panic!("{values}: Deployment {name}: {e}"));
        assert_eq!(deployment.spec.and_then(|s| s.replicas), Some(replicas), "{values}: {name} replicas");
    }
    // Helm applies a release in one request per object, and they are there when it returns.
    let objects = release_objects(client).await;
    assert_eq!(objects, want.counts(), "{values}: the release's objects by kind (found, then expected)");
    if want.priority_classes {
        let classes: Api<PriorityClass> = Api::all(client.clone());
        for (name, value) in [("inference", 125), ("build", 100), ("interactive-preemptible", 75), ("train", 50)] {
            let class = classes.get(name).await.unwrap_or_else(|e| panic!("{values}: PriorityClass {name}: {e}"));
            assert_eq!(class.value, Some(value), "{values}: PriorityClass {name}");
        }
    }
}

/// Uninstalls and waits until none of the release's objects is left; the CRDs stay.
async fn uninstall(client: &Client, kubeconfig: &Path, values: &str) {
    helm(kubeconfig, HelmAction::Uninstall).unwrap_or_else(|e| panic!("{values}: {e:#}"));
    eventually(60, &format!("{values}: the release's objects are gone"), || async {
        let objects = release_objects(client).await;
        objects.iter().all(|(_, n)| *n == 0).then_some(())
    })
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in drover_api::crd::all() {
        let name = crd.metadata.name.expect("CRD name");
        assert!(crds.get_opt(&name).await.expect("read").is_some(), "{values}: Helm keeps the CRD {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_values_file_installs_upgrades_and_uninstalls() {
    if !drover_envtest::tools::helm_available() {
        return;
    }
    let Some(cluster) = Cluster::start_without_drover(1, Options::default()).await else { return };
    let client = cluster.client.clone();
    let kubeconfig = cluster.server().kubeconfig();
    install_service_monitor_crd(&client).await;

    for values in values_files() {
        let label = values.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "default values".into());
        assert_eq!(
            rendered_counts(values.as_deref(), &label),
            expected(values.as_deref()).counts(),
            "{label}: the objects the chart renders by kind (rendered, then what the values ask for)"
        );
        helm(&kubeconfig, HelmAction::Install(values.as_deref())).unwrap_or_else(|e| panic!("{label}: {e:#}"));
        check_install(&client, &expected(values.as_deref()), &label).await;
        uninstall(&client, &kubeconfig, &label).await;
    }

    // An upgrade from the defaults to the minimal values removes what those turn off.
    let minimal = chart_dir().join("ci/minimal-values.yaml");
    helm(&kubeconfig, HelmAction::Install(None)).expect("install");
    helm(&kubeconfig, HelmAction::Upgrade(Some(&minimal))).expect("upgrade");
    check_install(&client, &expected(Some(&minimal)), "upgrade to ci/minimal-values.yaml").await;
    uninstall(&client, &kubeconfig, "after the upgrade").await;
}

/// The CRD step of docs/install.md's Upgrade section: the arguments of the `kubectl` that
/// `drover crds` is piped into, read from the page so that the test runs what users are told.
fn documented_crd_step() -> Vec<String> {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/install.md");
    let text = std::fs::read_to_string(&page).expect("docs/install.md is readable");
    let upgrade = text.split("\n## Upgrade").nth(1).expect("docs/install.md has an Upgrade section");
    let upgrade = upgrade.split("\n## ").next().unwrap_or(upgrade);
    let line = upgrade
        .lines()
        .find(|l| l.trim_start().starts_with("drover crds |"))
        .expect("the Upgrade section has a `drover crds | kubectl ...` line");
    let command = line.split('#').next().unwrap_or(line);
    let (_, kubectl) = command.split_once('|').expect("a pipe");
    let mut words = kubectl.split_whitespace().map(str::to_string);
    assert_eq!(words.next().as_deref(), Some("kubectl"), "{line:?}: `drover crds` is piped into kubectl");
    words.collect()
}

/// Runs `kubectl <args>` with `manifests` on its standard input.
fn kubectl_with_input(kubeconfig: &Path, args: &[String], manifests: &str) -> Output {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child.stdin.take().expect("stdin").write_all(manifests.as_bytes()).expect("kubectl reads the CRDs");
    child.wait_with_output().expect("kubectl finishes")
}

/// What `drover crds` prints, with the Queue schema's top-level description replaced by
/// `description`: a harmless change of the kind a new Drover version brings.
fn changed_crds(description: &str) -> String {
    let out = Command::new(binary("drover").expect("drover is built")).arg("crds").output().expect("drover crds runs");
    assert!(out.status.success(), "drover crds: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let old = "description: Auto-generated derived type for QueueSpec via `CustomResource`";
    assert_eq!(text.matches(old).count(), 1, "`drover crds` no longer has the Queue schema description {old:?}");
    text.replace(old, &format!("description: {description}"))
}

/// The top-level schema description of the Queue CRD the API server serves now.
async fn queue_schema_description(client: &Client) -> Option<String> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get("queues.scheduling.drover.dev").await.ok()?;
    crd.spec.versions.first()?.schema.as_ref()?.open_api_v3_schema.as_ref()?.description.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_crd_upgrade_step_changes_crds_that_helm_installed() {
    if !drover_envtest::tools::helm_available() || !drover_envtest::tools::kubectl_available() {
        return;
    }
    // A bare control plane: the CRDs must be created by Helm from crds/, as on a new cluster.
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    let kubeconfig = server.kubeconfig();
    helm(&kubeconfig, HelmAction::Install(None)).expect("helm install");
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get("queues.scheduling.drover.dev")
        .await
        .expect("helm install created the Queue CRD from crds/");
    let managers: Vec<_> = crd.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert!(!managers.iter().any(|m| m == "kubectl"), "kubectl already manages the CRD before the step: {managers:?}");

    // Why the step needs --force-conflicts: Helm's field manager owns every field of the CRDs
    // it created, so a plain server-side apply of a changed field is refused as a conflict.
    let plain = ["apply", "--server-side", "-f", "-"].map(String::from);
    let refused = kubectl_with_input(&kubeconfig, &plain, &changed_crds("Changed without forcing."));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("conflict"),
        "a plain `kubectl apply --server-side` of a changed CRD was expected to conflict with Helm's \
         field manager (docs/install.md says so); it exited {:?}: {said}",
        refused.status.code()
    );
    assert_ne!(queue_schema_description(&client).await.as_deref(), Some("Changed without forcing."));

    // The step as docs/install.md writes it.
    let step = documented_crd_step();
    let wanted = "A Queue, as a newer Drover describes it.";
    let applied = kubectl_with_input(&kubeconfig, &step, &changed_crds(wanted));
    assert!(
        applied.status.success(),
        "docs/install.md's CRD step `drover crds | kubectl {}` failed after helm install: {}",
        step.join(" "),
        String::from_utf8_lossy(&applied.stderr)
    );
    eventually(30, "the API server serves the changed Queue CRD", || async {
        (queue_schema_description(&client).await.as_deref() == Some(wanted)).then_some(())
    })
    .await;

    // kubectl owns the CRDs' fields now: the next version's step conflicts no more, even
    // without the flag (docs/install.md says keeping it is harmless, not needed).
    let next = "A Queue, as the version after that describes it.";
    let again = kubectl_with_input(&kubeconfig, &plain, &changed_crds(next));
    assert!(
        again.status.success(),
        "a second CRD change after the forced step still conflicts: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    eventually(30, "the API server serves the second change", || async {
        (queue_schema_description(&client).await.as_deref() == Some(next)).then_some(())
    })
    .await;

    // The chart upgrade that follows leaves the new CRD alone (Helm never upgrades crds/).
    helm(&kubeconfig, HelmAction::Upgrade(None)).expect("helm upgrade after the CRD step");
    assert_eq!(
        queue_schema_description(&client).await.as_deref(),
        Some(next),
        "helm upgrade put back the CRD of the chart's crds/"
    );
}
