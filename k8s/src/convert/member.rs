//! A pod of a job being built: the pod, its phase in the snapshot and its order in its task.
//! Building the job's tasks, priority and run times all read it.

use drover_scheduler::snapshot::PodPhaseInput;

use super::PodInfo;

/// A pod placed in a task, with its phase.
pub(super) struct Member<'a> {
    pub(super) info: PodInfo<'a>,
    pub(super) phase: PodPhaseInput,
    pub(super) index: Option<u32>,
    pub(super) created: i64,
}
