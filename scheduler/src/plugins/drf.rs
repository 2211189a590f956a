//! Dominant resource fairness: where enabled, jobs of equal priority in a queue and/or
//! sibling queues are ordered by their dominant share (largest fraction of any cluster
//! resource they hold), smallest first.

use std::cmp::Ordering;

use crate::config::DrfConfig;
use crate::plugin::{Hook, Plugin};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, QueueId};

/// The DRF plugin: its orders are hooks only where the configuration enables them.
pub struct Drf {
    config: DrfConfig,
}

impl Drf {
    /// A plugin with these switches.
    pub fn new(config: DrfConfig) -> Drf {
        Drf { config }
    }
}

/// The largest fraction of cluster capacity `alloc` holds of any resource.
pub fn dominant_share(alloc: &Res, capacity: &Res) -> f64 {
    (0..alloc.len()).filter(|&i| capacity[i] > 0).map(|i| alloc[i] as f64 / capacity[i] as f64).fold(0.0, f64::max)
}

fn job_alloc(ssn: &Session, job: JobId) -> Res {
    let mut r = Res::zero(ssn.snap.resources.len());
    for (t, task) in ssn.snap.jobs[job].tasks.iter().enumerate() {
        r.add(&task.requests.times(i64::from(ssn.task_running[job][t])));
    }
    r
}

impl Plugin for Drf {
    fn name(&self) -> &'static str {
        "drf"
    }

    fn hooks(&self) -> Vec<Hook> {
        let DrfConfig { job_order, queue_order } = self.config;
        [(job_order, Hook::JobOrder), (queue_order, Hook::QueueOrder)]
            .into_iter()
            .filter_map(|(on, h)| on.then_some(h))
            .collect()
    }

    fn job_order(&self, ssn: &Session, a: JobId, b: JobId) -> Ordering {
        let cap = &ssn.snap.capacity;
        dominant_share(&job_alloc(ssn, a), cap).total_cmp(&dominant_share(&job_alloc(ssn, b), cap))
    }

    fn queue_order(&self, ssn: &Session, a: QueueId, b: QueueId) -> Ordering {
        let cap = &ssn.snap.capacity;
        dominant_share(&ssn.queue_alloc[a], cap).total_cmp(&dominant_share(&ssn.queue_alloc[b], cap))
    }
}
