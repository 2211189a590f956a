//! The charge record of a bound pod: which queue, PodGroup and priority class the scheduler
//! charged it to when it bound it.
//!
//! The scheduler writes it as the annotation [`CHARGE_ANNOTATION`] on the pod's Binding, which
//! the API server copies onto the pod in the write that binds it. Tenants may edit a pod's
//! annotations and labels, and may delete or change its PodGroup, but the charge guard
//! ([`drover_api::charge_guard`]) refuses any write of this one annotation but the binding's:
//! so the accounting of a bound pod follows this record, never the links a tenant can still
//! change (see the rules in [`crate::convert`]). The value is `queue=<q> podGroup=<g>
//! priorityClass=<c>`, readable by people (`kubectl describe pod`) and parsed here only.

use drover_scheduler::snapshot::{JobId, Snapshot};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

pub use drover_api::labels::CHARGE_ANNOTATION;

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

    /// The record's value.
    pub fn message(&self) -> String {
        format!("queue={} podGroup={} priorityClass={}", self.queue, self.group, self.priority_class)
    }

    /// The record as the annotation a Binding carries.
    pub fn annotation(&self) -> (String, String) {
        (CHARGE_ANNOTATION.to_string(), self.message())
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

    /// The charge recorded on a pod, if the scheduler wrote one.
    pub fn of(pod: &Pod) -> Option<Charge> {
        Charge::parse(pod.metadata.annotations.as_ref()?.get(CHARGE_ANNOTATION)?)
    }
}

/// Applies the charge guard as the chart ships it (server-side, as `field_manager`): for
/// clusters set up without the chart, such as the test and playground control planes.
pub async fn install_guard(client: &Client, field_manager: &str) -> kube::Result<()> {
    let (policy, binding) = drover_api::charge_guard::objects();
    let params = PatchParams::apply(field_manager).force();
    let name = drover_api::charge_guard::NAME;
    Api::<ValidatingAdmissionPolicy>::all(client.clone()).patch(name, &params, &Patch::Apply(&policy)).await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).patch(name, &params, &Patch::Apply(&binding)).await?;
    Ok(())
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
