//! The Helm chart `charts/drover`: its CRDs are exactly what `drover crds` prints; it lints
//! clean and renders the same bytes on every run for the default values and every file in
//! `charts/drover/ci/` (GitOps tools see no drift); bad values fail at install with the field
//! named. Helm is the real Helm v4 SDK through PyPI's `helm-python-sdk`; without it the Helm
//! tests print SKIPPED, and fail when `DROVER_REQUIRE_HELM` is set, as CI does.

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

/// Prints every rendered manifest, in template order, for the values file given (or none).
const RENDER: &str = r##"
import sys, helm_python as helm
chart = helm.Chart.load(sys.argv[1])
values = helm.values_from_yaml(open(sys.argv[2]).read()) if len(sys.argv) > 2 else None
out = chart.render(values, name="drover", namespace="drover-system", is_install=True)
for path in sorted(out):
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
fn the_chart_lints_clean_and_renders_the_same_bytes_every_time() {
    let lint = r#"
import sys, helm_python as helm
report = helm.lint(sys.argv[1], strict=True)
for m in report["messages"]:
    if m["severity"] >= 2:
        print(m["path"], m["error"])
for e in report["errors"]:
    print(e)
"#;
    let Some(findings) = helm(lint, &[]) else { return };
    assert!(findings.trim().is_empty(), "helm lint --strict: {findings}");
    for values in values_files() {
        let args: Vec<&str> = values.iter().map(String::as_str).collect();
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
        (&minimal, "kind: ValidatingAdmissionPolicy", false),
    ] {
        assert_eq!(text.contains(kind), present, "{kind} present should be {present}");
    }
    assert!(all.contains("--bind-concurrency=32"), "the scheduler's flags come from values");
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
    ] {
        let Some(said) = helm(script, &[values]) else { return };
        assert!(!said.contains("ACCEPTED"), "{values} was accepted");
        assert!(said.contains(field), "{values}: the error does not name {field}: {said}");
    }
}
