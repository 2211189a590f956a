//! Kubernetes' Workload API (`scheduling.k8s.io/v1alpha2`, KEP-4671): a pod whose
//! `spec.schedulingGroup.podGroupName` names a PodGroup of that API is in the Drover PodGroup
//! `k8s-<name>` made from it: its gang policy's `minCount` (a `basic` policy schedules each
//! pod alone), its topology constraint (a node label, mapped to the Topology level that uses
//! it) and its priority class. Drover's group stays the one the scheduler reads;
//! [`super::workload_status`] reports back on the upstream PodGroup.

use std::time::Duration;

use drover_api::crd::topology::{Topology, TopologyConstraint};
use drover_api::topology::NODE_LEVEL;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1alpha2::PodGroup as K8sPodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};

use super::shape::MAX_COUNT;
use super::{requested_queue, GroupPlan, Plan};

/// Prefix of the Drover PodGroups made from the Workload API's.
pub const PREFIX: &str = "k8s";
/// [`super::SOURCE_LABEL`] of those groups.
pub const SOURCE: &str = "k8s-podgroup";
/// The node label kube-scheduler's topology keys use for a single node.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The Workload-API PodGroup the pod names, if any.
pub fn group_name(pod: &Pod) -> Option<&str> {
    let group = pod.spec.as_ref()?.scheduling_group.as_ref()?.pod_group_name.as_deref()?;
    Some(group).filter(|g| !g.is_empty())
}

/// The pod's group, from the Workload-API PodGroup `group`.
pub async fn plan(client: &Client, pod: &Pod, group: &str) -> Result<Plan, kube::Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let what = format!("PodGroup {namespace}/{group} (scheduling.k8s.io/v1alpha2)");
    let api: Api<K8sPodGroup> = Api::namespaced(client.clone(), &namespace);
    let found = match api.get_opt(group).await {
        Ok(found) => found,
        // The API is not served (its feature gate is off): nothing to read.
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => return Err(e),
    };
    let Some(found) = found else {
        return Ok(Plan::Wait {
            reason: "PodGroupNotFound",
            message: format!("{what}, which the pod's spec.schedulingGroup names, does not exist (yet); the pod waits"),
            retry: Duration::from_secs(10),
        });
    };
    let Some(gang) = found.spec.scheduling_policy.gang.as_ref() else { return Ok(Plan::Alone) };
    let min_count = u64::try_from(gang.min_count).ok().filter(|n| (1..=MAX_COUNT).contains(n));
    let Some(min_member) = min_count else {
        return Ok(Plan::Wait {
            reason: "InvalidGangSpec",
            message: format!("{what}: spec.schedulingPolicy.gang.minCount must be from 1 to {MAX_COUNT}"),
            retry: Duration::from_secs(60),
        });
    };
    let key = found.spec.scheduling_constraints.as_ref().and_then(|c| c.topology.as_ref()?.first()).map(|t| &t.key);
    let topology = match key {
        None => None,
        Some(key) => match level_of(client, key).await? {
            Some(t) => Some(t),
            None => {
                return Ok(Plan::Wait {
                    reason: "TopologyKeyNotALevel",
                    message: format!(
                        "{what}: spec.schedulingConstraints.topology key {key:?} is the node label of no level of \
                         any Topology; the pod waits until a Topology has such a level"
                    ),
                    retry: Duration::from_secs(30),
                })
            }
        },
    };
    Ok(Plan::Shared(Box::new(GroupPlan {
        name: format!("{PREFIX}-{group}"),
        owner: reference(&found),
        source: SOURCE.into(),
        min_member: min_member as u32,
        min_task_member: Default::default(),
        task: None,
        requested_queue: requested_queue(&[&found.metadata, &pod.metadata]),
        priority_class: found
            .spec
            .priority_class_name
            .clone()
            .or_else(|| pod.spec.as_ref().and_then(|s| s.priority_class_name.clone())),
        topology,
    })))
}

fn reference(group: &K8sPodGroup) -> OwnerReference {
    OwnerReference {
        api_version: K8sPodGroup::api_version(&()).into_owned(),
        kind: K8sPodGroup::kind(&()).into_owned(),
        name: group.name_any(),
        uid: group.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// The Topology level whose node label is `key` (the `default` Topology first, then by name);
/// the hostname label is any Topology's `node` level.
async fn level_of(client: &Client, key: &str) -> Result<Option<TopologyConstraint>, kube::Error> {
    let mut topologies = Api::<Topology>::all(client.clone()).list(&ListParams::default()).await?.items;
    topologies.sort_by_key(|t| (t.name_any() != "default", t.name_any()));
    Ok(topologies.iter().find_map(|t| {
        let level = if key == HOSTNAME_LABEL {
            NODE_LEVEL.to_string()
        } else {
            t.spec.levels.iter().find(|l| l.node_label == key)?.name.clone()
        };
        Some(TopologyConstraint { name: Some(t.name_any()), required: Some(level), preferred: None })
    }))
}
