//! Jobs in a snapshot: converting name-based job inputs against a snapshot's nodes, queues
//! and resources, and dropping jobs. [`super::build`] converts every job this way; the
//! simulator's trace mode keeps one snapshot across cycles and only adds the jobs submitted
//! and drops the jobs finished, instead of building everything again for each cycle.

use std::collections::HashMap;
use std::sync::Arc;

use drover_api::{ResourceList, GPU};

use crate::res::Res;

use super::{
    topology::Resolver, Constraints, Job, JobId, JobInput, NodeId, Pod, PodId, PodPhase, PodPhaseInput, QueueId,
    Snapshot, SnapshotError, Task, TiVec,
};

/// Looks up the names a job input refers to in one snapshot, and shares equal node
/// constraints between tasks (the placer evaluates each distinct set once).
pub struct JobConverter {
    resources: HashMap<String, usize>,
    queues: HashMap<String, QueueId>,
    nodes: HashMap<String, NodeId>,
    constraints: HashMap<Constraints, Arc<Constraints>>,
}

impl JobConverter {
    /// A converter for jobs of `snap` (its resources, leaf and inner queues, and nodes).
    pub fn new(snap: &Snapshot) -> JobConverter {
        JobConverter {
            resources: snap.resources.iter().enumerate().map(|(i, r)| (r.clone(), i)).collect(),
            queues: snap.queues.iter_enumerated().skip(1).map(|(i, q)| (q.name.clone(), i)).collect(),
            nodes: snap.nodes.iter_enumerated().map(|(i, n)| (n.name.clone(), i)).collect(),
            constraints: HashMap::new(),
        }
    }

    /// A job's resource list as a vector over the snapshot's `n` resources; a resource the
    /// snapshot does not have is an error naming `object` and `field`.
    fn amounts(
        &self,
        list: &ResourceList,
        n: usize,
        object: impl Fn() -> String,
        field: &'static str,
    ) -> Result<Res, SnapshotError> {
        let mut out = Res::zero(n);
        for (name, amount) in &list.0 {
            let r = *self.resources.get(name).ok_or_else(|| SnapshotError::Missing {
                object: object(),
                field,
                name: name.clone(),
            })?;
            out[r] = *amount;
        }
        Ok(out)
    }

    /// Adds a job and its pods to the end of `snap`; on error `snap` is unchanged.
    pub fn push(&mut self, snap: &mut Snapshot, job: &JobInput) -> Result<JobId, SnapshotError> {
        let job_id = snap.jobs.next_key();
        let object = || format!("job {}/{}", job.namespace, job.name);
        let queue = *self.queues.get(&job.queue).ok_or_else(|| SnapshotError::Missing {
            object: object(),
            field: "queue",
            name: job.queue.clone(),
        })?;
        let n = snap.resources.len();
        let empty = ResourceList::default();
        let min_resources = self.amounts(job.min_resources.as_ref().unwrap_or(&empty), n, object, "minResources")?;
        let resolver = Resolver { topologies: &snap.topologies };
        let topology = job.topology.as_ref().map(|t| resolver.request(t, &object)).transpose()?;
        let mut tasks = Vec::with_capacity(job.tasks.len());
        let mut pods = Vec::new();
        for (task_id, t) in job.tasks.iter().enumerate() {
            let mut requests = self.amounts(&t.requests, n, object, "requests")?;
            requests[snap.pods_resource] = 1;
            let gpu = self.resources.get(GPU).is_some_and(|&g| requests[g] > 0);
            let constraints = self
                .constraints
                .entry(t.constraints.clone())
                .or_insert_with(|| Arc::new(t.constraints.clone()))
                .clone();
            let task_object = || format!("job {}/{} task {}", job.namespace, job.name, t.name);
            let task_topology = t.topology.as_ref().map(|r| resolver.request(r, &task_object)).transpose()?;
            let topology_name = t.topology.as_ref().or(job.topology.as_ref()).map(|r| r.topology.as_str());
            let slices = t
                .slices
                .as_ref()
                .map(|s| {
                    resolver.slices(s, topology_name.unwrap_or(drover_api::topology::DEFAULT_TOPOLOGY), &task_object)
                })
                .transpose()?;
            let mut ids = Vec::with_capacity(t.pods.len());
            for (i, phase) in t.pods.iter().enumerate() {
                let lookup = |name: &String| {
                    self.nodes.get(name).copied().ok_or_else(|| SnapshotError::Missing {
                        object: object(),
                        field: "running",
                        name: name.clone(),
                    })
                };
                let (phase, nominated) = match phase {
                    PodPhaseInput::Pending => (PodPhase::Pending, None),
                    PodPhaseInput::Nominated(node) => (PodPhase::Pending, self.nodes.get(node).copied()),
                    PodPhaseInput::Bound(node) => (PodPhase::Bound(lookup(node)?), None),
                    PodPhaseInput::Releasing(node) => (PodPhase::Releasing(lookup(node)?), None),
                };
                ids.push(PodId(snap.pods.len() + pods.len()));
                pods.push(Pod { job: job_id, task: task_id, index: i as u32, phase, nominated });
            }
            tasks.push(Task {
                name: t.name.clone(),
                min_available: t.min_available,
                requests,
                gpu,
                constraints,
                pods: ids,
                topology: task_topology,
                slices,
            });
        }
        snap.jobs.push(Job {
            name: job.name.clone(),
            namespace: job.namespace.clone(),
            queue,
            priority_class: job.priority_class.clone(),
            priority: job.priority,
            preemptible: job.preemptible,
            min_member: job.min_member,
            min_resources,
            created_at: job.created_at,
            phase: job.phase,
            tasks,
            run_time: job.run_time,
            run_time_range: None,
            ends_at: job.ends_at,
            preempted_at: job.preempted_at,
            started_at: job.started_at,
            borrowed_until: None,
            topology,
            resize: job.resize.filter(|_| job.tasks.len() == 1),
        });
        snap.pods.extend(pods);
        Ok(job_id)
    }
}

impl Snapshot {
    /// Keeps only the jobs `keep` accepts (and their pods), in their order; job and pod ids
    /// are renumbered as if the kept jobs had been built alone.
    pub fn retain_jobs(&mut self, mut keep: impl FnMut(JobId) -> bool) {
        let mut pods = TiVec::with_capacity(self.pods.len());
        let mut jobs = TiVec::with_capacity(self.jobs.len());
        for (old, mut job) in std::mem::take(&mut self.jobs).into_iter_enumerated() {
            if !keep(old) {
                continue;
            }
            let id = jobs.next_key();
            for task in &mut job.tasks {
                for p in &mut task.pods {
                    let mut pod = self.pods[*p].clone();
                    pod.job = id;
                    *p = pods.push_and_get_key(pod);
                }
            }
            jobs.push(job);
        }
        self.jobs = jobs;
        self.pods = pods;
    }
}
