//! Admission: a pod group is admitted only when its gang minimum fits the cluster, its path's
//! limits (counting what the queue could free: elastic pods, lower-priority preemptible work)
//! and, when non-preemptible, its queues' deserved quota.

use super::bounds::exceeding;
use super::FairShare;
use crate::ids::TiSlice;
use crate::plugin::{Rule, Subject, Verdict, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, QueueId};

/// Adds to `into` the requests of the job's pods above its gang minimum that are running.
pub(super) fn add_elastic_running(ssn: &Session, job: JobId, into: &mut Res) {
    let j = &ssn.snap.jobs[job];
    let mut surplus = ssn.job_running[job].saturating_sub(j.min_member);
    for (t, task) in j.tasks.iter().enumerate().rev() {
        if surplus == 0 {
            break;
        }
        let spare = ssn.task_running[job][t].saturating_sub(task.min_available).min(surplus);
        into.add_times(&task.requests, i64::from(spare));
        surplus -= spare;
    }
}

impl FairShare {
    /// What the job could free in its own queue: elastic pods of any job, and the running
    /// pods of lower-priority preemptible jobs (it may preempt both).
    fn freeable_for(&self, ssn: &Session, job: JobId) -> Res {
        let j = &ssn.snap.jobs[job];
        let mut free = Res::zero(ssn.snap.resources.len());
        for &other in &self.jobs_by_queue[j.queue] {
            let o = &ssn.snap.jobs[other];
            if other == job || ssn.job_running[other] == 0 {
                continue;
            }
            if o.preemptible && o.priority < j.priority {
                for (t, task) in o.tasks.iter().enumerate() {
                    free.add_times(&task.requests, i64::from(ssn.task_running[other][t]));
                }
            } else {
                add_elastic_running(ssn, other, &mut free);
            }
        }
        free
    }

    /// Whether `job` may be admitted (see the module).
    pub(super) fn admit<'s>(
        &self,
        ssn: &Session<'s>,
        job: JobId,
        reserved: Option<&TiSlice<QueueId, Res>>,
    ) -> Verdict<'s> {
        let snap = ssn.snap;
        let j = &snap.jobs[job];
        let min = ssn.gang_request(job);
        if let Some(r) = min.first_exceeding(&snap.capacity) {
            let e = (r, min[r], snap.capacity[r]);
            return Err(Why::exceeding(snap, Rule::ClusterCapacity, Subject::Cluster, e));
        }
        // What the path already holds against its limits; nothing when the gang is judged alone.
        let holding = reserved.map(|reserved| (reserved, self.freeable_for(ssn, job)));
        for q in snap.ancestry(j.queue) {
            let queue = &snap.queues[q];
            let used = match &holding {
                Some((reserved, freeable)) => {
                    // Above the job's own queue, elastic pods anywhere in the subtree are free too.
                    let below = self.elastic_subtree[q].minus(&self.elastic_subtree[j.queue]);
                    let mut used = ssn.queue_alloc[q].minus(freeable).minus(&below).plus(&reserved[q]);
                    used.clamp_non_negative();
                    used
                }
                None => Res::zero(min.len()),
            };
            if let Some(e) = exceeding(&min, &used, &queue.limit) {
                return Err(Why::exceeding(snap, Rule::LimitForGang, Subject::Queue(q), e));
            }
            if !j.preemptible {
                if let Some(r) = (0..min.len()).find(|&r| queue.quota_covers(r) && min[r] > queue.deserved[r]) {
                    let e = (r, min[r], queue.deserved[r]);
                    return Err(Why::exceeding(snap, Rule::NonPreemptibleGangDeserved, Subject::Queue(q), e));
                }
            }
        }
        Ok(())
    }
}
