//! Writes a kubeconfig pointing at the emulator, which kube-rs and kubectl both accept.

use std::path::Path;

use anyhow::Context;
use serde_json::json;

/// The cluster, user and context name used in the written kubeconfig.
pub const CONTEXT: &str = "drover-emulator";

/// Writes the kubeconfig for `url` to `path` (atomically, so a watcher never reads half a file).
pub fn write(path: &Path, url: &str) -> anyhow::Result<()> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
        "current-context": CONTEXT,
        "preferences": {},
    });
    let text = serde_yaml::to_string(&config).context("encoding the kubeconfig")?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}
