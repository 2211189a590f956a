//! `drover explain pg NS/NAME` and `drover explain pod NS/NAME`: a PodGroup, or the PodGroup a
//! pod belongs to, explained by the core's answer as `drover explain job` gives it (the
//! scheduler schedules PodGroups; a Job is explained through its own). A pod belongs to the
//! group the scheduler's conversion says (`drover_k8s::convert::membership`): the one its charge record names once it is bound,
//! else the one its `scheduling.drover.dev/pod-group` annotation names (a Job's pods name the
//! Job's group; a plain pod gets its own one-pod group `pod-<name>` from the controllers).
//! What is the pod's own — its phase, the node it is bound to — is said beside its group's
//! verdict. It reads only.

use drover_api::crd::podgroup::{PodGroup, PodGroupPhase};
use drover_api::labels::{JOB_NAME_LABEL, POD_GROUP_ANNOTATION};
use drover_controllers::queues::POD_GROUP_PREFIX;
use drover_k8s::convert::{self, ObjectLists};
use drover_scheduler::config::SchedulerConfig;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::connect::Failure;
use crate::explain::{self, Explanation, PodCounts, PodFacts};

/// Reads the PodGroup and what the scheduler reads, and explains the group.
pub async fn fetch_group(
    client: &Client,
    namespace: &str,
    name: &str,
    config: &SchedulerConfig,
    scheduler_name: &str,
) -> Result<Explanation, Failure> {
    let Some(group) = explain::get_group(client, namespace, name).await? else {
        return Err(Failure::NotFound(format!("podgroup {namespace}/{name} not found")));
    };
    let (listed, refused) = explain::list_cluster(client).await?;
    Ok(explain_group(&group, &listed, refused, config, scheduler_name))
}

/// Reads the pod, its PodGroup and what the scheduler reads, and explains the pod through
/// its group.
pub async fn fetch_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    config: &SchedulerConfig,
    scheduler_name: &str,
) -> Result<Explanation, Failure> {
    let object = format!("pod {namespace}/{name}");
    let pod =
        Api::<Pod>::namespaced(client.clone(), namespace).get(name).await.map_err(|e| Failure::from_api(&object, e))?;
    let group_name = group_of(&pod, scheduler_name)?;
    let group = explain::get_group(client, namespace, &group_name).await?;
    let (listed, refused) = explain::list_cluster(client).await?;
    Ok(explain_pod(&pod, &group_name, group.as_ref(), &listed, refused, config, scheduler_name))
}

/// Explains `group` from what the scheduler reads (`listed`, complete unless some lists were
/// `refused`).
pub fn explain_group(
    group: &PodGroup,
    listed: &ObjectLists,
    refused: Vec<String>,
    config: &SchedulerConfig,
    scheduler_name: &str,
) -> Explanation {
    let (namespace, name) = (group.namespace().unwrap_or_default(), group.name_any());
    let status = group.status.clone().unwrap_or_default();
    let pods = PodCounts {
        pending: unbound_members(listed, &namespace, &name, scheduler_name),
        running: status.running,
        succeeded: status.succeeded,
        failed: status.failed,
    };
    let state = format!("{:?}", status.phase);
    let mut out = Explanation::new("PodGroup", format!("{namespace}/{name}"), state, pods, Some(group), None);
    if matches!(status.phase, PodGroupPhase::Completed | PodGroupPhase::Failed) {
        out.verdict = "Finished".into();
    } else {
        out = explain::judge(out, group, refused.is_empty().then_some(listed), config, scheduler_name);
    }
    out.missing_permissions = refused;
    out
}

/// Explains `pod` through its group `group_name` (`group`, if it exists).
pub fn explain_pod(
    pod: &Pod,
    group_name: &str,
    group: Option<&PodGroup>,
    listed: &ObjectLists,
    refused: Vec<String>,
    config: &SchedulerConfig,
    scheduler_name: &str,
) -> Explanation {
    let namespace = pod.namespace().unwrap_or_default();
    let mut out = match group {
        Some(group) => explain_group(group, listed, refused, config, scheduler_name),
        None => missing_group(pod, group_name, refused),
    };
    out.kind = "Pod".into();
    out.pod = Some(PodFacts {
        name: format!("{namespace}/{}", pod.name_any()),
        phase: pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into()),
        node: bound_node(pod),
    });
    out
}

/// The PodGroup the pod belongs to, as the scheduler's conversion decides it, or why it has
/// none.
fn group_of(pod: &Pod, scheduler_name: &str) -> Result<String, Failure> {
    let object = format!("pod {}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    let scheduler = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler");
    if scheduler != scheduler_name {
        return Err(Failure::BadInput(format!(
            "{object} is not Drover's to schedule: its spec.schedulerName is {scheduler:?}, not {scheduler_name:?}"
        )));
    }
    let node = bound_node(pod);
    convert::membership(pod, scheduler_name).1.ok_or_else(|| {
        Failure::NotFound(match node {
            Some(node) => format!(
                "{object} belongs to no PodGroup: it is bound to node {node} without one, and counts against its \
                 namespace's queue on its own"
            ),
            None => format!(
                "{object} belongs to no PodGroup yet: the controllers give a plain pod its own group {}{}; check \
                 that `drover controllers` runs",
                POD_GROUP_PREFIX,
                pod.name_any()
            ),
        })
    })
}

/// The explanation of a pod whose annotation names a PodGroup that does not exist.
fn missing_group(pod: &Pod, group_name: &str, refused: Vec<String>) -> Explanation {
    let namespace = pod.namespace().unwrap_or_default();
    let job = format!("{namespace}/{group_name}");
    let mut out = Explanation::new("Pod", job.clone(), "Missing".into(), PodCounts::default(), None, None);
    out.verdict = "Waiting".into();
    out.queue = String::new();
    out.blockers
        .push(format!("podgroup {job}, which the pod's annotation {POD_GROUP_ANNOTATION} names, does not exist"));
    let made_by_controllers =
        group_name == format!("{POD_GROUP_PREFIX}{}", pod.name_any()) || pod.labels().contains_key(JOB_NAME_LABEL);
    out.to_start.push(if made_by_controllers {
        "the controllers create it: check that `drover controllers` runs".into()
    } else {
        format!("create PodGroup {group_name} in namespace {namespace}, or name an existing one in the annotation")
    });
    out.missing_permissions = refused;
    out
}

/// The node the pod is bound to.
fn bound_node(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty())
}

/// The group's pods of this scheduler that wait for a node (not bound, not finished).
fn unbound_members(listed: &ObjectLists, namespace: &str, group: &str, scheduler_name: &str) -> u32 {
    let waiting = |p: &Pod| {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        p.namespace().as_deref() == Some(namespace)
            && bound_node(p).is_none()
            && convert::membership(p, scheduler_name).1.as_deref() == Some(group)
            && !matches!(phase, Some("Succeeded" | "Failed"))
    };
    listed.pods.iter().filter(|p| waiting(p)).count() as u32
}
