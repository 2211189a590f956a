//! Finding the control-plane binaries the way controller-runtime's envtest does: the folder
//! named by `KUBEBUILDER_ASSETS`, else the project's `../shared/envtest/` unpacked once.
//! Without them a test is skipped and says so, unless `DROVER_REQUIRE_ENVTEST` is set (CI sets
//! it), which turns the skip into a failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The variable naming the folder of `etcd`, `kube-apiserver`, ... (envtest's convention).
pub const ASSETS_VAR: &str = "KUBEBUILDER_ASSETS";
/// Set (to anything) to make missing binaries a failure instead of a skip.
pub const REQUIRE_VAR: &str = "DROVER_REQUIRE_ENVTEST";

const BINARIES: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

/// The folder holding the control-plane binaries, or why there is none.
pub fn find() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(locate).clone()
}

/// The folder of the binaries, or `None` after printing that the calling test is skipped.
///
/// # Panics
/// When the binaries are missing and [`REQUIRE_VAR`] is set.
pub fn require() -> Option<PathBuf> {
    match find() {
        Ok(dir) => Some(dir),
        Err(why) => {
            assert!(std::env::var_os(REQUIRE_VAR).is_none(), "{REQUIRE_VAR} is set but {why}");
            eprintln!("SKIPPED: no Kubernetes control plane for this test: {why}");
            None
        }
    }
}

fn locate() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(ASSETS_VAR) {
        let dir = PathBuf::from(dir);
        return complete(&dir).map(|()| dir);
    }
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/envtest");
    let unpack = shared.join("unpack");
    if !unpack.exists() {
        return Err(format!("{ASSETS_VAR} is unset and {} does not exist", shared.display()));
    }
    let target = std::env::temp_dir().join("drover-envtest-assets");
    if unpacked(&shared, &target) {
        return Ok(target);
    }
    // `unpack` writes each binary through a temporary name and a rename, so concurrent test
    // processes may call it at once.
    let out = Command::new(&unpack).arg(&target).output().map_err(|e| format!("running {}: {e}", unpack.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed: {}", unpack.display(), String::from_utf8_lossy(&out.stderr)));
    }
    complete(&target).map(|()| target)
}

/// Whether an earlier test process already unpacked (and checked) every binary.
fn unpacked(shared: &Path, target: &Path) -> bool {
    BINARIES.iter().all(|b| {
        let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        match (modified(target.join(b)), modified(shared.join(format!("{b}.xz")))) {
            (Some(binary), Some(archive)) => binary >= archive,
            _ => false,
        }
    })
}

fn complete(dir: &Path) -> Result<(), String> {
    match BINARIES.iter().find(|b| !dir.join(b).is_file()) {
        Some(missing) => Err(format!("{} has no {missing}", dir.display())),
        None => Ok(()),
    }
}
