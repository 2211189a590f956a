//! Fault injection for tests: failing the next writes of a resource, dropping every open
//! watch, and adding latency before every response. Shared by the library API
//! ([`crate::ServerHandle::faults`]) and the `/_emulator/faults` admin endpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// A handle on the server's fault switches; clones share them.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Inner>,
}

struct Inner {
    writes: Mutex<Vec<WriteFault>>,
    latency_us: AtomicU64,
    kill: watch::Sender<u64>,
}

struct WriteFault {
    resource: String,
    remaining: u32,
    status: u16,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            inner: Arc::new(Inner {
                writes: Mutex::new(Vec::new()),
                latency_us: AtomicU64::new(0),
                kill: watch::Sender::new(0),
            }),
        }
    }
}

impl Faults {
    /// Ends every open watch now (clients see the stream close, as on a network cut).
    pub fn drop_watches(&self) {
        self.inner.kill.send_modify(|n| *n += 1);
        tracing::info!("fault: dropped all watches");
    }

    /// Makes the next `count` writes (POST, PUT, PATCH, DELETE) to `resource` fail with
    /// `status` (e.g. 409, 429, 500) and change nothing. `resource` is a plural (`pods`), a
    /// plural with subresource (`pods/binding`, `pods/status`), or a group-qualified plural
    /// (`jobs.batch.drover.dev`); a bare plural also matches custom resources of any group.
    pub fn fail_next_writes(&self, resource: &str, count: u32, status: u16) {
        let mut writes = self.inner.writes.lock().unwrap_or_else(|e| e.into_inner());
        writes.retain(|w| w.resource != resource);
        if count > 0 {
            writes.push(WriteFault { resource: resource.to_string(), remaining: count, status });
        }
        tracing::info!(resource, count, status, "fault: failing next writes");
    }

    /// Adds `latency` before every response (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        self.inner.latency_us.store(latency.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// Clears every fault (pending write failures and latency).
    pub fn clear(&self) {
        self.inner.writes.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.set_latency(Duration::ZERO);
    }

    /// The latency currently added before responses.
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_micros(self.inner.latency_us.load(Ordering::Relaxed))
    }

    /// Consumes one pending failure for a write to `group`/`plural`[/`sub`], if any.
    pub(crate) fn take_write_fault(&self, group: &str, plural: &str, sub: Option<&str>) -> Option<u16> {
        let qualified = crate::registry::storage_key(group, plural);
        let with_sub = |base: &str| match sub {
            Some(s) => format!("{base}/{s}"),
            None => base.to_string(),
        };
        let names = [with_sub(&qualified), with_sub(plural)];
        let mut writes = self.inner.writes.lock().unwrap_or_else(|e| e.into_inner());
        let idx = writes.iter().position(|w| names.contains(&w.resource))?;
        let status = writes[idx].status;
        writes[idx].remaining -= 1;
        if writes[idx].remaining == 0 {
            writes.remove(idx);
        }
        Some(status)
    }

    /// A receiver that changes whenever watches must end.
    pub(crate) fn watch_killer(&self) -> watch::Receiver<u64> {
        self.inner.kill.subscribe()
    }
}
