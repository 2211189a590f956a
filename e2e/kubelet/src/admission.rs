//! Kubelet admission: whether a pod bound to a node fits beside the pods already admitted
//! there, decided as the real kubelet decides it before starting a pod.
//!
//! A pod's request is what Kubernetes' `PodRequests` computes: the sum over its containers,
//! or the largest init container (plus the sidecars started before it) if that is more, plus
//! `spec.overhead`; pod-level `spec.resources.requests` for `cpu` and `memory` replace the
//! containers' figures. A container's request falls back to its limit, as API defaulting does.
//! Amounts are compared in the kubelet's units: millicores for `cpu`, whole units (rounded
//! up) for everything else.
//!
//! The checks are the scheduler's `NodeResourcesFit` filter that the kubelet runs on admission:
//! the pod count against `pods`, then every requested resource against what is left of the
//! node's allocatable (`cpu`, `memory`, `ephemeral-storage` first, then the others by name).
//! Extended resources (`nvidia.com/gpu`) the node does not have at all are ignored, as the
//! kubelet ignores them (cluster-level resources). The first failure names the rejection:
//! reason `OutOf<resource>`, message `Pod was rejected: Node didn't have enough resource: ...`.

use std::collections::{BTreeMap, HashMap};

use drover_api::{Quantity, ResourceKind};
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

/// Resource amounts in the kubelet's units, by resource name.
pub(crate) type Amounts = BTreeMap<String, i64>;

/// Why a pod was not admitted: the pod status `reason` and `message` the kubelet writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// `OutOf<resource>`, e.g. `OutOfcpu`, `OutOfnvidia.com/gpu`, `OutOfpods`.
    pub(crate) reason: String,
    /// `Pod was rejected: Node didn't have enough resource: <name>, requested: ..., used: ..., capacity: ...`.
    pub(crate) message: String,
}

impl Rejection {
    fn out_of(name: &str, requested: i64, used: i64, capacity: i64) -> Self {
        Self {
            reason: format!("OutOf{name}"),
            message: format!(
                "Pod was rejected: Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        }
    }
}

/// Converts a resource quantity to the kubelet's unit for `name`; `None` if unparsable.
pub(crate) fn amount(name: &str, quantity: &str) -> Option<i64> {
    ResourceKind::of(name).amount(Quantity::parse(quantity).ok()?)
}

/// Whether `name` is an extended resource (`example.com/foo`): qualified, outside the
/// `kubernetes.io` namespace.
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// Whether admission compares `name`: the scheduler's fit filter only knows these.
fn is_checked(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage")
        || name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || name.contains('/')
}

fn add(total: &mut Amounts, other: &Amounts) {
    for (name, value) in other {
        *total.entry(name.clone()).or_default() += value;
    }
}

fn max_into(total: &mut Amounts, other: &Amounts) {
    for (name, value) in other {
        let entry = total.entry(name.clone()).or_default();
        *entry = (*entry).max(*value);
    }
}

fn list_amounts(list: Option<&BTreeMap<String, ApiQuantity>>) -> Amounts {
    list.into_iter().flatten().filter_map(|(name, q)| Some((name.clone(), amount(name, &q.0)?))).collect()
}

/// A container's requests, each falling back to the limit of the same resource.
fn requirements(resources: Option<&ResourceRequirements>) -> Amounts {
    let mut amounts = list_amounts(resources.and_then(|r| r.limits.as_ref()));
    amounts.extend(list_amounts(resources.and_then(|r| r.requests.as_ref())));
    amounts
}

fn container_request(container: &Container) -> Amounts {
    requirements(container.resources.as_ref())
}

/// What the pod asks of its node (Kubernetes' `PodRequests`).
pub(crate) fn pod_request(pod: &Pod) -> Amounts {
    let Some(spec) = pod.spec.as_ref() else {
        return Amounts::new();
    };
    let mut request = Amounts::new();
    for container in &spec.containers {
        add(&mut request, &container_request(container));
    }
    let mut sidecars = Amounts::new();
    let mut init_peak = Amounts::new();
    for container in spec.init_containers.iter().flatten() {
        let own = container_request(container);
        let during = if container.restart_policy.as_deref() == Some("Always") {
            add(&mut request, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut during = own;
            add(&mut during, &sidecars);
            during
        };
        max_into(&mut init_peak, &during);
    }
    max_into(&mut request, &init_peak);
    let pod_level = requirements(spec.resources.as_ref());
    for name in ["cpu", "memory"] {
        if let Some(value) = pod_level.get(name) {
            request.insert(name.to_owned(), *value);
        }
    }
    add(&mut request, &list_amounts(spec.overhead.as_ref()));
    request
}

/// The pods admitted on each node and what they hold.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    by_uid: HashMap<String, (u32, Amounts)>,
    by_node: HashMap<u32, NodeUse>,
}

#[derive(Debug, Default)]
struct NodeUse {
    pods: i64,
    used: Amounts,
}

impl Ledger {
    /// Admits pod `uid` with `request` on `node` if it fits within `allocatable` beside the
    /// pods admitted there; a pod admitted already is admitted again.
    pub(crate) fn admit(
        &mut self,
        node: u32,
        uid: &str,
        request: &Amounts,
        allocatable: &Amounts,
    ) -> Result<(), Rejection> {
        if self.by_uid.get(uid).is_some_and(|(owner, _)| *owner == node) {
            return Ok(());
        }
        let current = self.by_node.get(&node);
        let pods = current.map_or(0, |u| u.pods);
        let allowed = allocatable.get("pods").copied().unwrap_or(0);
        if pods + 1 > allowed {
            return Err(Rejection::out_of("pods", 1, pods, allowed));
        }
        let first = ["cpu", "memory", "ephemeral-storage"];
        let names = first.iter().copied().chain(request.keys().map(String::as_str).filter(|n| !first.contains(n)));
        for name in names {
            let requested = request.get(name).copied().unwrap_or(0);
            if requested <= 0 || !is_checked(name) || (is_extended(name) && !allocatable.contains_key(name)) {
                continue;
            }
            let used = current.and_then(|u| u.used.get(name)).copied().unwrap_or(0);
            let capacity = allocatable.get(name).copied().unwrap_or(0);
            if requested > capacity - used {
                return Err(Rejection::out_of(name, requested, used, capacity));
            }
        }
        self.record(node, uid, request);
        Ok(())
    }

    /// Counts pod `uid` on `node` whether it fits or not (a pod found running already).
    pub(crate) fn record(&mut self, node: u32, uid: &str, request: &Amounts) {
        if self.by_uid.get(uid).is_some_and(|(owner, _)| *owner == node) {
            return;
        }
        self.release(uid);
        let usage = self.by_node.entry(node).or_default();
        usage.pods += 1;
        add(&mut usage.used, request);
        self.by_uid.insert(uid.to_owned(), (node, request.clone()));
    }

    /// Frees what pod `uid` held (it ended or is gone).
    pub(crate) fn release(&mut self, uid: &str) {
        let Some((node, request)) = self.by_uid.remove(uid) else {
            return;
        };
        if let Some(usage) = self.by_node.get_mut(&node) {
            usage.pods -= 1;
            for (name, value) in &request {
                if let Some(used) = usage.used.get_mut(name) {
                    *used -= value;
                }
            }
            if usage.pods == 0 {
                self.by_node.remove(&node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn resources(pairs: &[(&str, &str)]) -> Option<ResourceRequirements> {
        Some(ResourceRequirements {
            requests: Some(pairs.iter().map(|(k, v)| (k.to_string(), ApiQuantity(v.to_string()))).collect()),
            ..Default::default()
        })
    }

    fn container(name: &str, requests: &[(&str, &str)]) -> Container {
        Container { name: name.into(), resources: resources(requests), ..Default::default() }
    }

    fn amounts(pairs: &[(&str, i64)]) -> Amounts {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec { containers, init_containers: Some(init), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_requests_its_containers_sum_or_its_largest_init_container() {
        let p = pod(
            vec![container("a", &[("cpu", "500m"), ("nvidia.com/gpu", "1")]), container("b", &[("cpu", "1")])],
            vec![container("setup", &[("cpu", "2"), ("memory", "1Gi")])],
        );
        assert_eq!(pod_request(&p), amounts(&[("cpu", 2000), ("memory", 1 << 30), ("nvidia.com/gpu", 1)]));
    }

    #[test]
    fn sidecars_add_to_the_sum_and_to_later_init_containers() {
        let mut sidecar = container("proxy", &[("cpu", "1")]);
        sidecar.restart_policy = Some("Always".into());
        let p = pod(vec![container("main", &[("cpu", "1")])], vec![sidecar, container("migrate", &[("cpu", "2500m")])]);
        // Sum: main 1 + sidecar 1 = 2; peak: migrate 2.5 + sidecar 1 = 3.5.
        assert_eq!(pod_request(&p), amounts(&[("cpu", 3500)]));
    }

    #[test]
    fn limits_stand_in_for_requests_and_overhead_and_pod_level_requests_count() {
        let mut limited = container("main", &[]);
        limited.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("nvidia.com/gpu".to_string(), ApiQuantity("2".into()))])),
            ..Default::default()
        });
        let mut p = pod(vec![limited, container("side", &[("cpu", "1"), ("memory", "1Gi")])], vec![]);
        let spec = p.spec.as_mut().unwrap();
        spec.overhead = Some(BTreeMap::from([("cpu".to_string(), ApiQuantity("100m".into()))]));
        spec.resources = resources(&[("cpu", "3")]);
        assert_eq!(pod_request(&p), amounts(&[("cpu", 3100), ("memory", 1 << 30), ("nvidia.com/gpu", 2)]));
    }

    #[test]
    fn admission_rejects_what_does_not_fit_and_frees_on_release() {
        let node = amounts(&[("cpu", 8000), ("memory", 1 << 30), ("nvidia.com/gpu", 8), ("pods", 3)]);
        let mut ledger = Ledger::default();
        let six_gpus = amounts(&[("cpu", 1000), ("nvidia.com/gpu", 6)]);
        assert_eq!(ledger.admit(0, "a", &six_gpus, &node), Ok(()));
        assert_eq!(ledger.admit(0, "a", &six_gpus, &node), Ok(()), "admitting twice is harmless");
        let rejected = ledger.admit(0, "b", &amounts(&[("nvidia.com/gpu", 4)]), &node).unwrap_err();
        assert_eq!(rejected.reason, "OutOfnvidia.com/gpu");
        assert_eq!(
            rejected.message,
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 4, used: 6, capacity: 8"
        );
        // Another node is not affected.
        assert_eq!(ledger.admit(1, "b", &amounts(&[("nvidia.com/gpu", 4)]), &node), Ok(()));
        let cpu = ledger.admit(0, "c", &amounts(&[("cpu", 7001), ("nvidia.com/gpu", 9)]), &node).unwrap_err();
        assert_eq!(cpu.reason, "OutOfcpu", "cpu is checked before extended resources");
        ledger.release("a");
        assert_eq!(ledger.admit(0, "b2", &amounts(&[("nvidia.com/gpu", 8)]), &node), Ok(()));
    }

    #[test]
    fn the_pod_count_is_checked_first_and_unknown_extended_resources_are_ignored() {
        let node = amounts(&[("cpu", 1000), ("pods", 2)]);
        let mut ledger = Ledger::default();
        let nothing = Amounts::new();
        assert_eq!(ledger.admit(0, "a", &amounts(&[("example.com/cluster-licence", 5)]), &node), Ok(()));
        assert_eq!(ledger.admit(0, "b", &nothing, &node), Ok(()));
        let full = ledger.admit(0, "c", &amounts(&[("cpu", 5000)]), &node).unwrap_err();
        assert_eq!(full.reason, "OutOfpods");
        assert!(full.message.ends_with("pods, requested: 1, used: 2, capacity: 2"), "{}", full.message);
        ledger.record(0, "d", &amounts(&[("cpu", 900)]));
        ledger.release("a");
        ledger.release("b");
        let hugepages = ledger.admit(0, "e", &amounts(&[("hugepages-2Mi", 1)]), &node).unwrap_err();
        assert_eq!(hugepages.reason, "OutOfhugepages-2Mi", "a native resource the node lacks has capacity 0");
        assert_eq!(ledger.admit(0, "e", &amounts(&[("cpu", 100)]), &node), Ok(()));
    }
}
