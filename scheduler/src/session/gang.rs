//! A job's gang as the session stands: whether it is ready, what it still lacks, its pending
//! and running pods, the pods its minimum still needs and what they ask.

use crate::res::Res;
use crate::snapshot::{JobId, PodId};
use crate::why::{Blocker, Rule, Subject, Why};

use super::{PodState, Session};

impl<'s> Session<'s> {
    /// Whether the job has at least its gang minimum running (overall and per task).
    pub fn job_ready(&self, job: JobId) -> bool {
        let j = &self.snap.jobs[job];
        self.job_running[job] >= j.min_member
            && j.tasks.iter().enumerate().all(|(t, task)| self.task_running[job][t] >= task.min_available)
    }

    /// Why the job's pods cannot reach its gang minimum even if all were placed: the pods it
    /// has (running or pending) against the minimum, overall (`minMember`) or of the first
    /// task short of its own (`minAvailable`), as a [`Rule::GangShortOfPods`] refusal with
    /// the minimum named; `None` when they can. Pods still terminating count as missing.
    pub fn gang_shortfall(&self, job: JobId) -> Option<(String, Blocker)> {
        let j = &self.snap.jobs[job];
        let refusal = |have: u32, need: u32, which: String| {
            let e = (self.snap.pods_resource, i64::from(have), i64::from(need));
            let why = Why::exceeding(self.snap, Rule::GangShortOfPods, Subject::Job(job), e);
            (format!("{why} ({which})"), Blocker::from(why))
        };
        let mut total = 0;
        for (t, task) in j.tasks.iter().enumerate() {
            let pending = task.pods.iter().filter(|&&p| self.pod_state[p] == PodState::Pending).count() as u32;
            let have = self.task_running[job][t] + pending;
            if have < task.min_available {
                return Some(refusal(have, task.min_available, format!("task {}'s minimum", task.name)));
            }
            total += have;
        }
        (total < j.min_member).then(|| refusal(total, j.min_member, "minMember".into()))
    }

    /// Whether the job's pending pods, with its running ones, can reach its gang minimum
    /// (they cannot while some of its pods are still terminating).
    pub fn min_reachable(&self, job: JobId) -> bool {
        self.gang_shortfall(job).is_none()
    }

    /// Whether the job would stay at or above its minimum after losing one pod of `task`.
    pub fn can_lose_one(&self, job: JobId, task: usize) -> bool {
        let j = &self.snap.jobs[job];
        self.job_running[job] > j.min_member && self.task_running[job][task] > j.tasks[task].min_available
    }

    /// Pending pods of a job, in task order then index.
    pub fn pending_pods(&self, job: JobId) -> impl Iterator<Item = PodId> + '_ {
        self.snap.jobs[job]
            .tasks
            .iter()
            .flat_map(|t| t.pods.iter().copied())
            .filter(|&p| self.pod_state[p] == PodState::Pending)
    }

    /// Running pods of a job.
    pub fn running_pods(&self, job: JobId) -> impl Iterator<Item = PodId> + '_ {
        self.snap.jobs[job]
            .tasks
            .iter()
            .flat_map(|t| t.pods.iter().copied())
            .filter(|&p| self.pod_state[p].running_on().is_some())
    }

    /// The pods needed to bring the job to its gang minimum: first each task's own minimum,
    /// then further pods in task order until `minMember` is reached. Pipelined pods count as
    /// placed: a job whose minimum waits for its victims to terminate needs only elastic pods.
    pub fn gang_pods(&self, job: JobId) -> Vec<PodId> {
        let j = &self.snap.jobs[job];
        let mut chosen = Vec::new();
        let mut total = (self.job_running[job] + self.job_pipelined[job]) as usize;
        for (t, task) in j.tasks.iter().enumerate() {
            let need = task.min_available.saturating_sub(self.placed_in_task(job, t)) as usize;
            let picked: Vec<PodId> =
                task.pods.iter().copied().filter(|&p| self.pod_state[p] == PodState::Pending).take(need).collect();
            total += picked.len();
            chosen.extend(picked);
        }
        let min = j.min_member as usize;
        if total < min {
            let extra: Vec<PodId> = self.pending_pods(job).filter(|p| !chosen.contains(p)).take(min - total).collect();
            chosen.extend(extra);
        }
        chosen
    }

    /// Whether the job's gang minimum (overall and per task) is running or pipelined.
    pub fn minimum_placed(&self, job: JobId) -> bool {
        let j = &self.snap.jobs[job];
        self.job_running[job] + self.job_pipelined[job] >= j.min_member
            && (0..j.tasks.len()).all(|t| self.placed_in_task(job, t) >= j.tasks[t].min_available)
    }

    /// The running and pipelined pods of one task of a job.
    fn placed_in_task(&self, job: JobId, t: usize) -> u32 {
        let pipelined = match self.job_pipelined[job] {
            0 => 0,
            _ => self.snap.jobs[job].tasks[t]
                .pods
                .iter()
                .filter(|&&p| matches!(self.pod_state[p], PodState::Pipelined(_)))
                .count(),
        };
        self.task_running[job][t] + pipelined as u32
    }

    /// What a job's gang minimum still needs: the requests of its unplaced minimum pods, and,
    /// while none of its pods runs, at least what the group declares (`minResources`), so that
    /// a group seen before its pods is not judged as empty.
    pub fn gang_request(&self, job: JobId) -> Res {
        let mut need = self.sum_requests(&self.gang_pods(job));
        if self.job_running[job] == 0 {
            need.max_with(&self.snap.jobs[job].min_resources);
        }
        need
    }

    /// Sum of requests of a set of pods.
    pub fn sum_requests(&self, pods: &[PodId]) -> Res {
        let mut r = Res::zero(self.snap.resources.len());
        for &p in pods {
            r.add(self.requests(p));
        }
        r
    }
}
