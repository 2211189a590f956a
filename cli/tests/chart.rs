//! The Helm chart `charts/drover`: its CRDs are exactly what `drover crds` prints; it lints
//! clean (`--strict`) and renders the same bytes on every run for the default values and every
//! file in `charts/drover/ci/` (GitOps tools see no drift); its Deployments run locked down
//! (non-root, read-only root, no privilege escalation, no capabilities, RuntimeDefault seccomp)
//! with requests, probes on `/healthz` and `/readyz` and two leader-elected replicas; its
//! default scheduler configuration is `config/scheduler.yaml`; its optional PriorityClasses are
//! those of `config/samples/`; bad values fail at install with the field named. Helm is the
//! real Helm v4 SDK through PyPI's `helm-python-sdk`; without it the Helm tests print SKIPPED,
//! and fail when `DROVER_REQUIRE_HELM` is set, as CI does.

use std::path::PathBuf;
use std::process::Command;

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/drover")
}

/// Runs `script` with `python3 -c` and the chart's path as its first argument; `None` when
/// helm-python-sdk is not installed.
fn helm(script: &str, args: &[&str]) -> Option<String> {
    if !drover_envtest::tools::helm_available() {
        return None;
    }
    let out = Command::new("python3").args(["-c", script]).arg(chart()).args(args).output().expect("python3 runs");
    assert!(out.status.success(), "helm script failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).expect("utf-8 output"))
}

/// Prints every rendered manifest, in template order, for the values file given (or none),
/// each template's output after a `---` line.
const RENDER: &str = r##"
import sys, helm_python as helm
chart = helm.Chart.load(sys.argv[1])
values = helm.values_from_yaml(open(sys.argv[2]).read()) if len(sys.argv) > 2 else None
out = chart.render(values, name="drover", namespace="drover-system", is_install=True)
for path in sorted(out):
    print("---")
    print("# " + path)
    print(out[path])
"##;

fn values_files() -> Vec<Option<String>> {
    let mut files: Vec<Option<String>> = std::fs::read_dir(chart().join("ci"))
        .expect("charts/drover/ci exists")
        .map(|e| Some(e.expect("a directory entry").path().display().to_string()))
        .collect();
    files.sort();
    files.insert(0, None);
    files
}

#[test]
fn the_charts_crds_are_drover_crds() {
    let printed = Command::new(env!("CARGO_BIN_EXE_drover")).arg("crds").output().expect("drover crds runs");
    assert!(printed.status.success());
    let in_chart = std::fs::read_to_string(chart().join("crds/drover.yaml")).expect("the chart's CRDs");
    assert!(
        in_chart == String::from_utf8_lossy(&printed.stdout),
        "charts/drover/crds/drover.yaml differs from `drover crds`: run `drover crds > charts/drover/crds/drover.yaml`"
    );
}

#[test]
fn the_charts_charge_guard_is_the_one_the_scheduler_checks() {
    let in_chart = std::fs::read_to_string(chart().join("templates/charge-guard.yaml")).expect("the chart's guard");
    assert!(
        in_chart == drover_api::charge_guard::manifest(),
        "charts/drover/templates/charge-guard.yaml differs from api/src/charge_guard.yaml: copy the one to the other"
    );
}

#[test]
fn the_chart_lints_clean_and_renders_the_same_bytes_every_time() {
    // `helm lint --strict [-f VALUES]`: warnings count as findings.
    let lint = r#"
import sys, helm_python as helm
values = helm.values_from_yaml(open(sys.argv[2]).read()) if len(sys.argv) > 2 else None
report = helm.lint(sys.argv[1], values, strict=True)
for m in report["messages"]:
    if m["severity"] >= 2:
        print(m["path"], m["error"])
for e in report["errors"]:
    print(e)
"#;
    for values in values_files() {
        let args: Vec<&str> = values.iter().map(String::as_str).collect();
        let Some(findings) = helm(lint, &args) else { return };
        assert!(findings.trim().is_empty(), "helm lint --strict with {values:?}: {findings}");
        let first = helm(RENDER, &args).expect("helm is installed");
        let second = helm(RENDER, &args).expect("helm is installed");
        assert_eq!(first, second, "two renders with {values:?} differ");
        for kind in ["kind: Deployment", "kind: ClusterRole", "kind: ConfigMap", "kind: ServiceAccount"] {
            assert!(first.contains(kind), "{values:?}: no {kind} rendered");
        }
    }
}

#[test]
fn optional_parts_follow_their_values() {
    let Some(default) = helm(RENDER, &[]) else { return };
    let all = chart().join("ci/monitoring-values.yaml").display().to_string();
    let minimal = chart().join("ci/minimal-values.yaml").display().to_string();
    let all = helm(RENDER, &[&all]).expect("helm is installed");
    let minimal = helm(RENDER, &[&minimal]).expect("helm is installed");
    for (text, kind, present) in [
        (&default, "kind: PodDisruptionBudget", true),
        (&default, "kind: FlowSchema", true),
        (&default, "kind: ServiceMonitor", false),
        (&default, "kind: PriorityClass", false),
        (&all, "kind: ServiceMonitor", true),
        (&all, "kind: PriorityClass", true),
        (&minimal, "kind: PodDisruptionBudget", false),
        (&minimal, "kind: FlowSchema", false),
        (&default, "rbac.authorization.k8s.io/aggregate-to-edit: \"true\"", true),
        (&default, "name: drover-queue-viewer", true),
        (&minimal, "rbac.authorization.k8s.io/aggregate-to-edit", false),
        (&default, "kind: ValidatingAdmissionPolicy", true),
        (&default, "kind: Topology", false),
        (&all, "kind: Topology", true),
        (&minimal, "name: drover-guarded-pods", false),
        (&minimal, "name: drover-charge-guard", true),
    ] {
        assert_eq!(text.contains(kind), present, "{kind} present should be {present}");
    }
    assert!(all.contains("--bind-concurrency=32"), "the scheduler's flags come from values");
    assert!(
        all.contains("- name: \"zone\"\n      nodeLabel: \"topology.kubernetes.io/zone\""),
        "the default Topology's levels come from values"
    );
    assert!(minimal.contains("replicas: 1"));
}

#[test]
fn bad_values_fail_at_install_with_the_field_named() {
    let script = r#"
import sys, json, helm_python as helm
chart = helm.Chart.load(sys.argv[1])
try:
    chart.render(json.loads(sys.argv[2]), name="drover", namespace="drover-system", is_install=True)
    print("ACCEPTED")
except helm.HelmError as e:
    print(e)
"#;
    for (values, field) in [
        (r#"{"scheduler": {"bindConcurrency": "lots"}}"#, "/scheduler/bindConcurrency"),
        (r#"{"scheduler": {"replicas": 0}}"#, "/scheduler/replicas"),
        (r#"{"image": {"pullPolicy": "Sometimes"}}"#, "/image/pullPolicy"),
        (r#"{"metrics": {"port": 70000}}"#, "/metrics/port"),
        (r#"{"schedulr": {}}"#, "schedulr"),
        (
            r#"{"userRoles": {"queueViewers": [{"kind": "ServiceAccount", "name": "x"}]}}"#,
            "/userRoles/queueViewers/0/kind",
        ),
        (
            r#"{"topology": {"default": {"enabled": true, "levels": [{"name": "node", "nodeLabel": "x"}]}}}"#,
            "/topology/default/levels/0/name",
        ),
    ] {
        let Some(said) = helm(script, &[values]) else { return };
        assert!(!said.contains("ACCEPTED"), "{values} was accepted");
        assert!(said.contains(field), "{values}: the error does not name {field}: {said}");
    }
}

/// The rendered objects for `values` (a file, or the defaults), parsed; `None` without Helm.
fn rendered(values: Option<&str>) -> Option<Vec<serde_json::Value>> {
    let text = helm(RENDER, values.as_slice())?;
    let mut objects = Vec::new();
    for doc in text.split("\n---") {
        let object: serde_json::Value =
            serde_yaml::from_str(doc).unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}\n{doc}"));
        if !object.is_null() {
            objects.push(object);
        }
    }
    Some(objects)
}

/// The rendered object of `kind` named `name`.
fn object<'a>(objects: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the chart renders no {kind} {name}"))
}

/// A YAML text parsed into a value, for comparing meaning rather than bytes and comments.
fn yaml(text: &str, what: &str) -> serde_json::Value {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{what} does not parse: {e}"))
}

#[test]
fn the_deployments_run_locked_down_with_probes_requests_and_two_leader_elected_replicas() {
    let Some(objects) = rendered(None) else { return };
    for component in ["scheduler", "controllers"] {
        let name = format!("drover-{component}");
        let deployment = object(&objects, "Deployment", &name);
        assert_eq!(deployment["spec"]["replicas"], 2, "{name}: 2 replicas by default (one leads, one waits)");
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], name.as_str(), "{name} runs as its own ServiceAccount");
        let containers = pod["containers"].as_array().expect("containers");
        assert_eq!(containers.len(), 1, "{name}: one container");
        let c = &containers[0];
        // A container's securityContext overrides the pod's for the fields both have.
        let effective = |field: &str| {
            let own = &c["securityContext"][field];
            if own.is_null() {
                pod["securityContext"][field].clone()
            } else {
                own.clone()
            }
        };
        assert_eq!(effective("runAsNonRoot"), true, "{name}: runAsNonRoot");
        assert_eq!(effective("seccompProfile")["type"], "RuntimeDefault", "{name}: seccomp profile");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{name}: read-only root filesystem");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false, "{name}: privilege escalation");
        assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]), "{name}: capabilities");
        assert!(effective("runAsUser").as_i64().is_some_and(|u| u != 0), "{name}: a non-root user id");
        for resource in ["cpu", "memory"] {
            assert!(
                c["resources"]["requests"][resource].is_string(),
                "{name}: no {resource} request: {}",
                c["resources"]
            );
        }

        // Probes: /healthz and /readyz on the port the binary serves them on (--metrics-addr).
        let args: Vec<&str> = c["args"].as_array().expect("args").iter().filter_map(|a| a.as_str()).collect();
        assert_eq!(args.first(), Some(&component), "{name}: runs `drover {component}`");
        let port: i64 = args
            .iter()
            .find_map(|a| a.strip_prefix("--metrics-addr="))
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no --metrics-addr=HOST:PORT in {args:?}"));
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"], path, "{name}: {probe} path");
            let probed = match &get["port"] {
                serde_json::Value::String(named) => c["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["name"] == named.as_str())
                    .and_then(|p| p["containerPort"].as_i64()),
                number => number.as_i64(),
            };
            assert_eq!(
                probed,
                Some(port),
                "{name}: {probe} probes port {:?}, the binary serves on {port}",
                get["port"]
            );
        }

        // Leader election: on unless an argument turns it off, and on by default in the binary;
        // the Lease goes in the pod's namespace (where the chart's Role grants it).
        assert!(
            !args.iter().any(|a| a.starts_with("--leader-elect")),
            "{name}: the chart sets --leader-elect ({args:?}); 2 replicas need it on"
        );
        let help = Command::new(env!("CARGO_BIN_EXE_drover")).args([component, "--help"]).output().expect("help runs");
        let help = String::from_utf8_lossy(&help.stdout);
        let flag = help.split("--leader-elect").nth(1).unwrap_or_default();
        let flag = flag.split("\n  -").next().unwrap_or_default();
        assert!(flag.contains("[default: true]"), "drover {component}: leader election is not on by default: {flag}");
        let env = c["env"].as_array().expect("env");
        let lease_ns = env.iter().find(|e| e["name"] == "POD_NAMESPACE").expect("POD_NAMESPACE is set");
        assert_eq!(lease_ns["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace", "{name}: POD_NAMESPACE");
        assert!(
            help.contains("POD_NAMESPACE"),
            "drover {component}: the Lease namespace is not read from POD_NAMESPACE"
        );
    }
}

#[test]
fn the_default_scheduler_configuration_is_config_scheduler_yaml() {
    let Some(objects) = rendered(None) else { return };
    let root = chart().join("../..");
    let file = std::fs::read_to_string(root.join("config/scheduler.yaml")).expect("config/scheduler.yaml");
    let file = yaml(&file, "config/scheduler.yaml");
    let values = std::fs::read_to_string(chart().join("values.yaml")).expect("values.yaml");
    let values = yaml(&values, "values.yaml");
    let in_values = values["scheduler"]["config"].as_str().expect("values.yaml has scheduler.config");
    assert_eq!(
        yaml(in_values, "values.yaml scheduler.config"),
        file,
        "values.yaml scheduler.config differs from config/scheduler.yaml"
    );
    let map = object(&objects, "ConfigMap", "drover-scheduler");
    let mounted = map["data"]["scheduler.yaml"].as_str().expect("the ConfigMap has scheduler.yaml");
    assert_eq!(
        yaml(mounted, "the ConfigMap's scheduler.yaml"),
        file,
        "the rendered ConfigMap differs from config/scheduler.yaml"
    );
}

#[test]
fn the_charts_priority_classes_are_the_samples() {
    let monitoring = chart().join("ci/monitoring-values.yaml").display().to_string();
    let Some(objects) = rendered(Some(&monitoring)) else { return };
    let samples = chart().join("../../config/samples/01-priority-classes.yaml");
    let text = std::fs::read_to_string(&samples).expect("config/samples/01-priority-classes.yaml");
    let mut sampled = Vec::new();
    for doc in text.split("\n---") {
        let class = yaml(doc, "01-priority-classes.yaml");
        if !class.is_null() {
            sampled.push(class);
        }
    }
    let charted: Vec<_> = objects.iter().filter(|o| o["kind"] == "PriorityClass").collect();
    assert_eq!(charted.len(), sampled.len(), "the chart and the samples have different numbers of PriorityClasses");
    // What a server-side apply of the samples and the chart would both set: the same values,
    // so that neither conflicts with the other on a cluster that has both.
    for sample in &sampled {
        let name = sample["metadata"]["name"].as_str().expect("a name");
        let class = object(&objects, "PriorityClass", name);
        for field in ["value", "globalDefault", "description", "preemptionPolicy"] {
            assert_eq!(class[field], sample[field], "PriorityClass {name}: {field} differs between chart and samples");
        }
        assert_eq!(
            class["metadata"]["annotations"], sample["metadata"]["annotations"],
            "PriorityClass {name}: annotations differ between chart and samples"
        );
    }
}
