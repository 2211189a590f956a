//! The state file: every object and the resourceVersion counter as one JSON document, loaded
//! at start and written on stop (atomically: a temporary file then a rename). The watch
//! history is not kept, so watches resuming from before a process restart get 410 Gone.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::registry::CRD_KEY;
use crate::server::Shared;
use crate::store::Store;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateFile<V> {
    resource_version: u64,
    /// Objects by storage key (`pods`, `jobs.batch.drover.dev`).
    resources: BTreeMap<String, Vec<V>>,
}

/// Writes the current state to `path`.
pub async fn save(shared: &Shared, path: &Path) -> anyhow::Result<()> {
    let snapshot: StateFile<Arc<Value>> = {
        let store = shared.lock();
        let resources = store
            .keys()
            .into_iter()
            .map(|k| {
                let objs: Vec<Arc<Value>> = store.list(&k, None).cloned().collect();
                (k, objs)
            })
            .filter(|(_, objs)| !objs.is_empty())
            .collect();
        StateFile { resource_version: store.rv(), resources }
    };
    let bytes = serde_json::to_vec(&snapshot).context("encoding the state")?;
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, &bytes).await.with_context(|| format!("writing {}", tmp.display()))?;
    tokio::fs::rename(&tmp, path).await.with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    tracing::info!(path = %path.display(), bytes = bytes.len(), "state saved");
    Ok(())
}

/// Loads a state file into an empty store: CRDs first (so their resources are served), then
/// every other object.
pub fn load(store: &mut Store, path: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut state: StateFile<Value> =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing state file {}", path.display()))?;
    if let Some(crds) = state.resources.remove(CRD_KEY) {
        for crd in crds {
            store.registry.register_crd(&crd);
            store.load(CRD_KEY, crd);
        }
    }
    for (key, objs) in state.resources {
        if !store.registry.has_key(&key) {
            bail!("state file {} holds {key}, which this server does not serve", path.display());
        }
        for obj in objs {
            store.load(&key, obj);
        }
    }
    store.set_loaded_rv(state.resource_version);
    tracing::info!(path = %path.display(), rv = state.resource_version, "state loaded");
    Ok(())
}
