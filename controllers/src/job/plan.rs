//! The Job state machine and lifecycle policies, as a pure function: given a Job, its pods
//! and the evictions seen since the last reconcile, what its status should be and which pods
//! to create and delete. The reconciler (`mod.rs`) does the I/O.

use std::collections::BTreeSet;
use std::time::Duration;

use drover_api::crd::conditions;
use drover_api::crd::forecast::Forecast;
use drover_api::crd::job::{Job, JobAction, JobEvent, JobState, JobStatus};
use drover_api::crd::podgroup::PodGroupStatus;
use drover_kubeutil::events::EventType;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use super::bounds::BATCH;
use super::build::{min_available, pod_name, total_replicas};
use super::elastic::Sizing;
use super::tracker::Eviction;
use super::validity::Validity;
use super::{
    CONDITION_FINISHED, CONDITION_RESTARTING, CONDITION_VALID, INVALID_REQUEUE, RETRY_ANNOTATION, TASK_INDEX_LABEL,
    TASK_LABEL, WORLD_SIZE_ANNOTATION,
};

/// A pod's phase as the controller counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for a node or for its containers (also `Unknown`).
    Pending,
    /// Running.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully.
    Failed,
}

/// What the controller needs to know about one of its pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Pod uid (for delete preconditions).
    pub uid: String,
    /// Its task label.
    pub task: String,
    /// Its index label.
    pub index: Option<u32>,
    /// The job's retry count when it was made.
    pub retry: u32,
    /// The `WORLD_SIZE` it was made with, when it says.
    pub world_size: Option<u32>,
    /// Phase.
    pub phase: Phase,
    /// Deletion has started.
    pub deleting: bool,
}

impl PodView {
    /// Reads the parts of a pod the controller uses.
    pub fn of(pod: &Pod) -> PodView {
        let labels = pod.labels();
        let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            _ => Phase::Pending,
        };
        PodView {
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
            task: labels.get(TASK_LABEL).cloned().unwrap_or_default(),
            index: labels.get(TASK_INDEX_LABEL).and_then(|i| i.parse().ok()),
            retry: pod.annotations().get(RETRY_ANNOTATION).and_then(|r| r.parse().ok()).unwrap_or(0),
            world_size: pod.annotations().get(WORLD_SIZE_ANNOTATION).and_then(|r| r.parse().ok()),
            phase,
            deleting: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    fn active(&self) -> bool {
        matches!(self.phase, Phase::Pending | Phase::Running)
    }
}

/// A pod to delete (by name, guarded by its uid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
}

/// An Event to record about the Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub kind: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// What one reconcile does.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The status to write (written only if it differs from the stored one).
    pub status: JobStatus,
    /// Pods to delete.
    pub delete: Vec<PodRef>,
    /// Pods to create: (task position, index).
    pub create: Vec<(usize, u32)>,
    /// Events to record once the status is written.
    pub notes: Vec<Note>,
    /// Delete the Job itself (its TTL expired).
    pub delete_job: bool,
    /// Reconcile again after this long even if nothing changes.
    pub requeue: Option<Duration>,
}

fn is_terminal(s: JobState) -> bool {
    matches!(s, JobState::Completed | JobState::Failed | JobState::Aborted)
}

fn condition<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The task a running restart targets (`None`: the whole job), from the `Restarting`
/// condition written when the restart began.
fn restart_target(status: &JobStatus) -> Option<String> {
    let c = condition(status, CONDITION_RESTARTING).filter(|c| c.status == "True" && c.reason == "RestartTask")?;
    let rest = c.message.strip_prefix("restarting task \"")?;
    Some(rest[..rest.find('"')?].to_string())
}

/// The action lifecycle policies give for `event` in `task`: task policies first, then the
/// job's; `Any` matches every event.
pub fn action_for(job: &Job, task: &str, event: JobEvent) -> Option<JobAction> {
    let matches = |p: &&drover_api::crd::job::LifecyclePolicy| p.event == event || p.event == JobEvent::Any;
    let task_policies = job.spec.tasks.iter().find(|t| t.name == task).map(|t| t.policies.as_slice()).unwrap_or(&[]);
    task_policies.iter().find(matches).or_else(|| job.spec.policies.iter().find(matches)).map(|p| p.action)
}

struct Planner<'a> {
    job: &'a Job,
    pods: &'a [PodView],
    /// Condition timestamp: now, in whole seconds as the API stores it.
    now: jiff::Timestamp,
    /// The precise time, for the TTL.
    clock: jiff::Timestamp,
    plan: Plan,
}

impl Planner<'_> {
    fn note(&mut self, kind: EventType, reason: &str, message: String) {
        self.plan.notes.push(Note { kind, reason: reason.into(), message });
    }

    fn generation(&self) -> Option<i64> {
        self.job.metadata.generation
    }

    /// Plans deleting the pods not kept, up to [`BATCH`] per reconcile (the next reconcile,
    /// requeued at once, deletes the rest).
    fn delete_where(&mut self, keep: impl Fn(&Self, &PodView) -> bool) {
        let pods = self.pods;
        for p in pods {
            if p.deleting || keep(self, p) {
                continue;
            }
            if self.plan.delete.len() == BATCH {
                self.plan.requeue = Some(Duration::ZERO);
                return;
            }
            self.plan.delete.push(PodRef { name: p.name.clone(), uid: p.uid.clone() });
        }
    }

    /// Deletes the pods still pending or running (finished pods stay, for their logs).
    fn stop_active(&mut self) {
        self.delete_where(|_, p| !p.active());
    }

    fn finish(&mut self, state: JobState, reason: &str, message: String) {
        let kind = if state == JobState::Completed { EventType::Normal } else { EventType::Warning };
        self.plan.status.state = state;
        let (now, generation) = (self.now, self.generation());
        conditions::set(&mut self.plan.status.conditions, CONDITION_FINISHED, true, reason, &message, now, generation);
        self.clear_restarting();
        self.note(kind, reason, message);
    }

    fn clear_restarting(&mut self) {
        let (now, generation) = (self.now, self.generation());
        let conds = &mut self.plan.status.conditions;
        if let Some(c) = conds.iter().find(|c| c.type_ == CONDITION_RESTARTING && c.status == "True") {
            let message = c.message.clone();
            conditions::set(conds, CONDITION_RESTARTING, false, "Restarted", &message, now, generation);
        }
    }

    /// Whether pod `(task, index)` is part of the current spec.
    fn current(&self, p: &PodView) -> bool {
        let Some(t) = self.job.spec.tasks.iter().find(|t| t.name == p.task) else { return false };
        p.index.is_some_and(|i| i < t.replicas)
            && p.name == pod_name(&self.job.name_any(), &t.name, p.index.unwrap_or(0))
    }

    fn take_action(&mut self, action: JobAction, task: &str, why: String) {
        match action {
            JobAction::RestartJob | JobAction::RestartTask => {
                let max = self.job.spec.max_retry;
                if self.plan.status.retry_count >= max {
                    self.stop_active();
                    self.finish(
                        JobState::Failed,
                        "MaxRetryExceeded",
                        format!("{why}; no {action:?}: the job has used all {max} retries"),
                    );
                    return;
                }
                self.plan.status.retry_count += 1;
                self.plan.status.state = JobState::Restarting;
                let retry = self.plan.status.retry_count;
                let (message, target) = if action == JobAction::RestartTask {
                    (format!("restarting task \"{task}\": {why} (retry {retry} of {max})"), Some(task))
                } else {
                    (format!("restarting the job: {why} (retry {retry} of {max})"), None)
                };
                let reason = format!("{action:?}");
                let (now, generation) = (self.now, self.generation());
                let conds = &mut self.plan.status.conditions;
                conditions::set(conds, CONDITION_RESTARTING, true, &reason, &message, now, generation);
                self.delete_where(|_, p| target.is_some_and(|t| p.task != t));
                self.note(EventType::Warning, &reason, message);
            }
            JobAction::AbortJob => {
                self.stop_active();
                self.finish(JobState::Aborted, "Aborted", format!("{why}: AbortJob"));
            }
            JobAction::TerminateJob => {
                self.stop_active();
                self.finish(JobState::Failed, "Terminated", format!("{why}: TerminateJob"));
            }
            JobAction::CompleteJob => {
                self.stop_active();
                let message = format!("{why}: CompleteJob");
                if self.pods.iter().any(|p| p.active()) {
                    self.plan.status.state = JobState::Completing;
                    self.note(EventType::Normal, "Completing", message);
                } else {
                    self.finish(JobState::Completed, "Completed", message);
                }
            }
        }
    }

    /// Restarts an elastic job at the size the scheduler chose: every pod is deleted (its
    /// code read `WORLD_SIZE` at start), and the new ones are made once they are gone. Not a
    /// retry: the job did nothing wrong.
    fn resize(&mut self, sizing: &Sizing) {
        let (from, to) = (sizing.current, sizing.target);
        let message = format!("resizing from {from} to {to} pods: {}", sizing.why);
        self.plan.status.state = JobState::Restarting;
        let (now, generation) = (self.now, self.generation());
        conditions::set(
            &mut self.plan.status.conditions,
            CONDITION_RESTARTING,
            true,
            "Resize",
            &message,
            now,
            generation,
        );
        self.delete_where(|_, _| false);
        self.note(EventType::Normal, "Resized", message);
    }

    /// The first lifecycle event with an action: failed pods, then evicted pods, then
    /// completed tasks, in task order.
    fn triggered(&self, evictions: &[Eviction]) -> Option<(JobAction, String, String)> {
        let job = self.job;
        let current: Vec<&PodView> = self.pods.iter().filter(|p| self.current(p) && !p.deleting).collect();
        for t in &job.spec.tasks {
            for p in current.iter().filter(|p| p.task == t.name && p.phase == Phase::Failed) {
                if let Some(a) = action_for(job, &t.name, JobEvent::PodFailed) {
                    return Some((a, t.name.clone(), format!("pod {} failed (PodFailed)", p.name)));
                }
            }
        }
        for e in evictions {
            let Some(t) = job.spec.tasks.iter().find(|t| t.name == e.task) else { continue };
            if e.index >= t.replicas {
                continue;
            }
            if let Some(a) = action_for(job, &t.name, JobEvent::PodEvicted) {
                return Some((a, t.name.clone(), format!("pod {} was evicted (PodEvicted)", e.pod)));
            }
        }
        for t in job.spec.tasks.iter().filter(|t| t.replicas > 0) {
            let done = current.iter().filter(|p| p.task == t.name && p.phase == Phase::Succeeded).count();
            if done == t.replicas as usize {
                if let Some(a) = action_for(job, &t.name, JobEvent::TaskCompleted) {
                    return Some((a, t.name.clone(), format!("task {} completed (TaskCompleted)", t.name)));
                }
            }
        }
        None
    }

    /// Completion and failure without a policy, then Pending -> Running.
    fn progress(&mut self) -> bool {
        let total = total_replicas(self.job);
        let min = min_available(self.job);
        if total == 0 {
            return false;
        }
        let current: Vec<&PodView> = self.pods.iter().filter(|p| self.current(p) && !p.deleting).collect();
        let count = |ph: Phase| current.iter().filter(|p| p.phase == ph).count() as u32;
        let (running, succeeded, failed) = (count(Phase::Running), count(Phase::Succeeded), count(Phase::Failed));
        if succeeded + failed == total {
            if succeeded >= min {
                self.finish(JobState::Completed, "Completed", format!("{succeeded} of {total} pods succeeded"));
            } else {
                self.finish(
                    JobState::Failed,
                    "PodsFailed",
                    format!("all pods finished; {succeeded} succeeded, fewer than minAvailable {min}"),
                );
            }
            return true;
        }
        if total - failed < min {
            self.stop_active();
            self.finish(
                JobState::Failed,
                "MinAvailableUnreachable",
                format!("{failed} of {total} pods failed: minAvailable {min} can no longer be reached"),
            );
            return true;
        }
        if running + succeeded >= min && self.plan.status.state == JobState::Pending {
            self.plan.status.state = JobState::Running;
        }
        false
    }

    /// Creates missing pods of the spec, in task and index order, and deletes pods outside it
    /// (scale down): at most [`BATCH`] of each per reconcile, so that no Job, however large its
    /// spec, makes the controller plan more (the next reconcile, requeued at once, goes on).
    fn sync(&mut self) {
        let job_name = self.job.name_any();
        let present: BTreeSet<&str> = self.pods.iter().map(|p| p.name.as_str()).collect();
        'tasks: for (pos, t) in self.job.spec.tasks.iter().enumerate() {
            for i in 0..t.replicas {
                if !present.contains(pod_name(&job_name, &t.name, i).as_str()) {
                    if self.plan.create.len() == BATCH {
                        self.plan.requeue = Some(Duration::ZERO);
                        break 'tasks;
                    }
                    self.plan.create.push((pos, i));
                }
            }
        }
        self.delete_where(|planner, p| planner.current(p));
    }

    fn ttl(&mut self) {
        let Some(ttl) = self.job.spec.ttl_seconds_after_finished else { return };
        let finished = condition(&self.plan.status, CONDITION_FINISHED)
            .filter(|c| c.status == "True")
            .map_or(self.now, |c| c.last_transition_time.0);
        // The finish time is kept in whole seconds (rounded down): count from the second after,
        // so that a job is never deleted early.
        let due = finished + jiff::SignedDuration::from_secs(i64::from(ttl) + 1);
        if self.clock >= due {
            self.plan.delete_job = true;
        } else {
            let left = self.clock.duration_until(due).unsigned_abs();
            self.plan.requeue = Some(left.max(Duration::from_millis(10)));
        }
    }
}

/// Decides one reconcile of `job` from its pods, the evictions of its pods seen since the last
/// successful reconcile, whether it is valid (readable templates, a queue that admits it, an
/// existing priority class) and, for an elastic job, its [`Sizing`] (then `job` is the job at
/// its target size, [`super::elastic::at_size`]).
pub fn plan(
    job: &Job,
    pods: &[PodView],
    evictions: &[Eviction],
    validity: Validity,
    sizing: Option<&Sizing>,
    now: jiff::Timestamp,
) -> Plan {
    let old = job.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = job.metadata.generation;
    let live: Vec<&PodView> = pods.iter().filter(|p| !p.deleting).collect();
    let count = |ph: Phase| live.iter().filter(|p| p.phase == ph).count() as u32;
    status.pending = count(Phase::Pending);
    status.running = count(Phase::Running);
    status.succeeded = count(Phase::Succeeded);
    status.failed = count(Phase::Failed);
    status.min_available = min_available(job);
    status.replicas = sizing.map(|s| s.current);
    let plan = Plan { status, delete: vec![], create: vec![], notes: vec![], delete_job: false, requeue: None };
    let clock = now;
    let now = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
    let mut p = Planner { job, pods, now, clock, plan };
    let generation = p.generation();

    if is_terminal(old.state) {
        p.stop_active();
        p.ttl();
        return p.plan;
    }
    match validity {
        Err((reason, message)) => {
            if conditions::set(
                &mut p.plan.status.conditions,
                CONDITION_VALID,
                false,
                &reason,
                &message,
                now,
                generation,
            ) {
                p.note(EventType::Warning, &reason, format!("{message}; no pods are created until this is fixed"));
            }
            p.plan.requeue = Some(INVALID_REQUEUE);
            return p.plan;
        }
        Ok(()) => {
            let conds = &mut p.plan.status.conditions;
            let was_invalid = condition(&old, CONDITION_VALID).is_some_and(|c| c.status == "False");
            conditions::set(
                conds,
                CONDITION_VALID,
                true,
                "Valid",
                "within MAX_PODS; templates read; the leaf queue admits the namespace; the class exists",
                now,
                generation,
            );
            if was_invalid {
                p.note(EventType::Normal, "Valid", "the Job is valid now".into());
            }
        }
    }

    match old.state {
        JobState::Completing => {
            p.stop_active();
            if !pods.iter().any(|x| x.active()) {
                p.finish(JobState::Completed, "Completed", "the remaining pods stopped after CompleteJob".into());
                p.ttl();
            }
            return p.plan;
        }
        JobState::Restarting => {
            let target = restart_target(&old);
            let retry = old.retry_count;
            // Made before the restart, or (elastic) for another size than it restarts at.
            let resized = |x: &PodView| sizing.is_some_and(|s| x.world_size.is_some_and(|w| w != s.target));
            let stale = |x: &PodView| (target.as_ref().is_none_or(|t| &x.task == t) && x.retry < retry) || resized(x);
            if pods.iter().any(stale) {
                p.delete_where(|_, x| !stale(x));
                return p.plan;
            }
            p.plan.status.state = JobState::Pending;
            p.plan.status.replicas = sizing.map(|s| s.target);
            p.clear_restarting();
            let what = target.map_or("the job".to_string(), |t| format!("task {t}"));
            let size = sizing.map_or(String::new(), |s| format!(" ({} pods)", s.target));
            p.note(EventType::Normal, "Restarted", format!("{what}: old pods are gone; creating new ones{size}"));
        }
        _ => {
            if let Some((action, task, why)) = p.triggered(evictions) {
                p.take_action(action, &task, why);
                if is_terminal(p.plan.status.state) {
                    p.ttl();
                }
                return p.plan;
            }
            if let Some(sizing) = sizing.filter(|s| s.target != s.current) {
                p.resize(sizing);
                return p.plan;
            }
        }
    }
    if p.progress() {
        p.ttl();
        return p.plan;
    }
    p.sync();
    p.plan
}

/// The job's `status.reason`: its `Valid=False` message, else, while it is not finished, the
/// reason its PodGroup waits (`group`, the PodGroup's status as last read), so that
/// `kubectl get djob` says what `kubectl get pg -o wide` does.
pub fn reason(status: &JobStatus, group: Option<&PodGroupStatus>) -> Option<String> {
    if let Some(invalid) = condition(status, CONDITION_VALID).filter(|c| c.status == "False") {
        return Some(invalid.message.clone());
    }
    if is_terminal(status.state) {
        return None;
    }
    group.and_then(PodGroupStatus::waiting_reason).map(str::to_string)
}

/// The job's `status.forecast`: while it is not finished, its PodGroup's (`group`, as last
/// read), so that `kubectl get djob` shows the position and expected start `kubectl get pg`
/// does.
pub fn forecast(status: &JobStatus, group: Option<&PodGroupStatus>) -> Option<Forecast> {
    if is_terminal(status.state) {
        return None;
    }
    group.and_then(|g| g.forecast.clone())
}

#[cfg(test)]
mod tests;
