//! The charge record of a bound pod: which queue, PodGroup and priority class the scheduler
//! charged it to when it bound it.
//!
//! The scheduler writes it as the pod condition [`CHARGED_CONDITION`] through `pods/status`
//! just before the pod's binding. Tenants may edit a pod's annotations and labels, and may
//! delete or change its PodGroup, but cannot write a pod's status: so the accounting of a
//! bound pod follows this record, never the links a tenant can still change (see the rules
//! in [`crate::convert`]). The message is `queue=<q> podGroup=<g> priorityClass=<c>`, readable
//! by people (`kubectl describe pod`) and parsed here only.

use drover_scheduler::snapshot::{JobId, Snapshot};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub use drover_api::labels::CHARGED_CONDITION;

/// What a bound pod is charged to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Charge {
    /// The leaf queue.
    pub queue: String,
    /// The PodGroup (in the pod's namespace) the pod was bound as a member of.
    pub group: String,
    /// The priority class the group was admitted with (empty: none).
    pub priority_class: String,
}

impl Charge {
    /// What the pods of the snapshot's `job` are charged to when bound: its queue, group
    /// and priority class as the core scheduled it.
    pub fn for_job(snap: &Snapshot, job: JobId) -> Charge {
        let j = &snap.jobs[job];
        Charge {
            queue: snap.queues[j.queue].name.clone(),
            group: j.name.clone(),
            priority_class: j.priority_class.clone(),
        }
    }

    /// The record's condition message.
    pub fn message(&self) -> String {
        format!("queue={} podGroup={} priorityClass={}", self.queue, self.group, self.priority_class)
    }

    /// Reads a record's message; `None` unless it names a queue and a group.
    pub fn parse(message: &str) -> Option<Charge> {
        let mut charge = Charge { queue: String::new(), group: String::new(), priority_class: String::new() };
        for field in message.split_whitespace() {
            match field.split_once('=') {
                Some(("queue", v)) => charge.queue = v.to_string(),
                Some(("podGroup", v)) => charge.group = v.to_string(),
                Some(("priorityClass", v)) => charge.priority_class = v.to_string(),
                _ => {}
            }
        }
        (!charge.queue.is_empty() && !charge.group.is_empty()).then_some(charge)
    }

    /// The pod condition that records this charge.
    pub fn condition(&self, now: jiff::Timestamp) -> PodCondition {
        PodCondition {
            type_: CHARGED_CONDITION.to_string(),
            status: "True".into(),
            reason: Some("Charged".into()),
            message: Some(self.message()),
            last_transition_time: Some(Time(now)),
            ..PodCondition::default()
        }
    }

    /// The charge recorded on a pod, if the scheduler wrote one.
    pub fn of(pod: &Pod) -> Option<Charge> {
        let conditions = pod.status.as_ref()?.conditions.as_ref()?;
        let record = conditions.iter().find(|c| c.type_ == CHARGED_CONDITION && c.status == "True")?;
        Charge::parse(record.message.as_deref()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_a_partial_one_is_no_record() {
        let charge = Charge { queue: "team-a".into(), group: "train".into(), priority_class: "inference".into() };
        assert_eq!(Charge::parse(&charge.message()), Some(charge));
        let classless = Charge { queue: "q".into(), group: "g".into(), priority_class: String::new() };
        assert_eq!(Charge::parse(&classless.message()), Some(classless));
        assert_eq!(Charge::parse("queue=q"), None);
        assert_eq!(Charge::parse("podGroup=g priorityClass=x"), None);
        assert_eq!(Charge::parse(""), None);
    }
}
