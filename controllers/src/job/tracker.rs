//! Eviction detection. A pod disappearing (or starting to disappear) while it was placed and
//! not finished, when the controller did not delete it, was evicted: by the scheduler
//! (preemption, reclaim: the Eviction API), a drain, or a user. The pod may be gone by the time
//! the Job is reconciled, so the pod watch feeding the controller records evictions here as it
//! sees them, and the next reconcile of the Job consumes them.
//!
//! This memory is in-process: evictions that happen while the controller is down are seen only
//! if the pod is still terminating when it starts (a missing pod is then simply recreated).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::ResourceExt;

use super::{JOB_NAME_LABEL, TASK_INDEX_LABEL, TASK_LABEL};

/// An evicted pod of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// Pod uid.
    pub uid: String,
    /// Pod name.
    pub pod: String,
    /// Its task.
    pub task: String,
    /// Its index in the task.
    pub index: u32,
}

type JobKey = (String, String);

#[derive(Default)]
struct Inner {
    /// Uids of pods this controller deletes: their disappearance is not an eviction.
    ours: HashSet<String>,
    /// Evictions not yet handled, per job, by pod uid.
    evicted: HashMap<JobKey, BTreeMap<String, Eviction>>,
    /// Uids of evicted pods already handled, until the pod is gone (a terminating pod is seen
    /// several times).
    handled: HashSet<String>,
}

/// Evictions seen on the pod watch, and the pods the controller itself deletes.
#[derive(Default)]
pub struct Tracker {
    inner: Mutex<Inner>,
}

fn placed_and_unfinished(pod: &Pod) -> bool {
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

impl Tracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The controller is about to delete the pod with this uid.
    pub fn deleting(&self, uid: &str) {
        self.lock().ours.insert(uid.to_string());
    }

    /// The delete of this uid did not happen after all.
    pub fn not_deleting(&self, uid: &str) {
        self.lock().ours.remove(uid);
    }

    /// Looks at one event of the pod watch.
    pub fn observe(&self, event: &watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                if pod.metadata.deletion_timestamp.is_some() {
                    self.consider(pod, false);
                }
            }
            watcher::Event::Delete(pod) => self.consider(pod, true),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    fn consider(&self, pod: &Pod, gone: bool) {
        let uid = pod.uid().unwrap_or_default();
        let mut inner = self.lock();
        if gone && (inner.ours.remove(&uid) | inner.handled.remove(&uid)) {
            return;
        }
        if inner.handled.contains(&uid) {
            return;
        }
        if inner.ours.contains(&uid) || !placed_and_unfinished(pod) {
            return;
        }
        let labels = pod.labels();
        let (Some(job), Some(task), Some(index)) = (
            labels.get(JOB_NAME_LABEL),
            labels.get(TASK_LABEL),
            labels.get(TASK_INDEX_LABEL).and_then(|i| i.parse().ok()),
        ) else {
            return;
        };
        let key = (pod.namespace().unwrap_or_default(), job.clone());
        let eviction = Eviction { uid: uid.clone(), pod: pod.name_any(), task: task.clone(), index };
        inner.evicted.entry(key).or_default().entry(uid).or_insert(eviction);
    }

    /// The unhandled evictions of a job's pods.
    pub fn evictions(&self, namespace: &str, job: &str) -> Vec<Eviction> {
        let key = (namespace.to_string(), job.to_string());
        self.lock().evicted.get(&key).map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// These evictions were taken into account by a reconcile that succeeded.
    pub fn handled(&self, namespace: &str, job: &str, evictions: &[Eviction]) {
        let key = (namespace.to_string(), job.to_string());
        let mut inner = self.lock();
        if let Some(m) = inner.evicted.get_mut(&key) {
            for e in evictions {
                m.remove(&e.uid);
            }
            if m.is_empty() {
                inner.evicted.remove(&key);
            }
        }
        inner.handled.extend(evictions.iter().map(|e| e.uid.clone()));
    }
}
