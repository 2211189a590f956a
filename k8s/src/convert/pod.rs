//! One pod: its requests (as kube-scheduler computes them) and its node constraints, in
//! Drover's own types.

use std::collections::BTreeMap;

use drover_api::{
    NodeSelectorOperator, NodeSelectorRequirement, ResourceList, TaintEffect, Toleration, TolerationOperator, CPU,
    MEMORY, PODS,
};
use drover_scheduler::snapshot::Constraints;
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A finding about one object, before it is attached to the object's name.
pub(super) type Finding = (&'static str, String);

/// Parses a quantity map into exact amounts; invalid entries are reported and count as 0.
pub(super) fn parse_list(
    map: Option<&BTreeMap<String, Quantity>>,
    what: &str,
    findings: &mut Vec<Finding>,
) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (name, q) in map.into_iter().flatten() {
        match ResourceList::parse_amount(name, &q.0) {
            Ok(v) => {
                out.insert(name.clone(), v);
            }
            Err(e) => {
                findings.push(("InvalidQuantity", format!("{what} {name}: {e}; counted as 0")));
                out.insert(name.clone(), 0);
            }
        }
    }
    out
}

fn add_into(acc: &mut BTreeMap<String, i64>, other: &BTreeMap<String, i64>) {
    for (k, v) in other {
        let e = acc.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

fn max_into(acc: &mut BTreeMap<String, i64>, other: &BTreeMap<String, i64>) {
    for (k, v) in other {
        let e = acc.entry(k.clone()).or_insert(0);
        *e = (*e).max(*v);
    }
}

/// Effective requests of a resource requirement: each request, and each limit whose request
/// is absent (the API server defaults a missing request to its limit).
fn effective(rr: Option<&ResourceRequirements>, what: &str, findings: &mut Vec<Finding>) -> BTreeMap<String, i64> {
    let Some(rr) = rr else { return BTreeMap::new() };
    let mut out = parse_list(rr.requests.as_ref(), &format!("{what} request"), findings);
    let limits = parse_list(rr.limits.as_ref(), &format!("{what} limit"), findings);
    for (k, v) in limits {
        out.entry(k).or_insert(v);
    }
    out
}

fn container_requests(c: &Container, findings: &mut Vec<Finding>) -> BTreeMap<String, i64> {
    effective(c.resources.as_ref(), &format!("container {}", c.name), findings)
}

/// What one pod requests, as kube-scheduler counts it: the larger of the sum of its
/// containers (plus sidecars, i.e. init containers with `restartPolicy: Always`) and each
/// regular init container (plus the sidecars started before it); pod-level `resources`
/// replace the cpu and memory sums when set; then `overhead`; then one `pods`. Zero entries
/// are dropped.
pub(super) fn requests(pod: &Pod, findings: &mut Vec<Finding>) -> BTreeMap<String, i64> {
    let mut reqs = BTreeMap::new();
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::from([(PODS.to_string(), 1)]);
    };
    for c in &spec.containers {
        add_into(&mut reqs, &container_requests(c, findings));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_max = BTreeMap::new();
    for ic in spec.init_containers.iter().flatten() {
        let r = container_requests(ic, findings);
        let mut tmp;
        if ic.restart_policy.as_deref() == Some("Always") {
            add_into(&mut reqs, &r);
            add_into(&mut sidecars, &r);
            tmp = sidecars.clone();
        } else {
            tmp = r;
            add_into(&mut tmp, &sidecars);
        }
        max_into(&mut init_max, &tmp);
    }
    max_into(&mut reqs, &init_max);
    let pod_level = effective(spec.resources.as_ref(), "pod-level", findings);
    for (k, v) in pod_level {
        if k == CPU || k == MEMORY || k.starts_with("hugepages-") {
            reqs.insert(k, v);
        }
    }
    add_into(&mut reqs, &parse_list(spec.overhead.as_ref(), "overhead", findings));
    reqs.retain(|_, v| *v != 0);
    reqs.insert(PODS.to_string(), 1);
    reqs
}

fn effect(text: &str) -> Option<TaintEffect> {
    match text {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

/// A node taint; an unknown effect is reported and taken as `NoSchedule` (the safe side).
pub(super) fn taint(t: &k8s_openapi::api::core::v1::Taint, findings: &mut Vec<Finding>) -> drover_api::Taint {
    let effect = effect(&t.effect).unwrap_or_else(|| {
        findings.push(("InvalidTaint", format!("taint {}: unknown effect {:?}; taken as NoSchedule", t.key, t.effect)));
        TaintEffect::NoSchedule
    });
    drover_api::Taint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect }
}

fn toleration(t: &k8s_openapi::api::core::v1::Toleration, findings: &mut Vec<Finding>) -> Option<Toleration> {
    let key = t.key.clone().unwrap_or_default();
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(other) => {
            findings.push(("InvalidToleration", format!("toleration {key:?}: unknown operator {other:?}; ignored")));
            return None;
        }
    };
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(text) => match effect(text) {
            Some(e) => Some(e),
            None => {
                findings.push(("InvalidToleration", format!("toleration {key:?}: unknown effect {text:?}; ignored")));
                return None;
            }
        },
    };
    Some(Toleration { key, operator, value: t.value.clone().unwrap_or_default(), effect })
}

fn operator(text: &str) -> Option<NodeSelectorOperator> {
    Some(match text {
        "In" => NodeSelectorOperator::In,
        "NotIn" => NodeSelectorOperator::NotIn,
        "Exists" => NodeSelectorOperator::Exists,
        "DoesNotExist" => NodeSelectorOperator::DoesNotExist,
        "Gt" => NodeSelectorOperator::Gt,
        "Lt" => NodeSelectorOperator::Lt,
        _ => return None,
    })
}

/// The node constraints of a pod: `nodeSelector`, tolerations, and the first term of its
/// required node affinity (further terms and `matchFields` are reported and ignored).
pub(super) fn constraints(pod: &Pod, findings: &mut Vec<Finding>) -> Constraints {
    let Some(spec) = pod.spec.as_ref() else { return Constraints::default() };
    let node_selector = spec.node_selector.clone().unwrap_or_default();
    let tolerations = spec.tolerations.iter().flatten().filter_map(|t| toleration(t, findings)).collect();
    let mut affinity = Vec::new();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|ns| ns.node_selector_terms.as_slice())
        .unwrap_or_default();
    if terms.len() > 1 {
        findings.push((
            "UnsupportedAffinity",
            format!(
                "required node affinity has {} ORed nodeSelectorTerms; only the first is used, so the pod may wait \
                 for nodes that only a later term allows",
                terms.len()
            ),
        ));
    }
    if let Some(term) = terms.first() {
        if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            findings.push((
                "UnsupportedAffinity",
                "required node affinity uses matchFields, which Drover does not evaluate; they are ignored".into(),
            ));
        }
        for e in term.match_expressions.iter().flatten() {
            let Some(op) = operator(&e.operator) else {
                findings.push((
                    "InvalidAffinity",
                    format!("node affinity on {:?}: unknown operator {:?}; ignored", e.key, e.operator),
                ));
                continue;
            };
            let req = NodeSelectorRequirement {
                key: e.key.clone(),
                operator: op,
                values: e.values.clone().unwrap_or_default(),
            };
            if let Err(why) = req.validate() {
                findings.push(("InvalidAffinity", format!("node affinity on {:?}: {why}; ignored", e.key)));
                continue;
            }
            affinity.push(req);
        }
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let min_nvlink_gpus = drover_api::topology::min_nvlink_gpus(&annotations).unwrap_or_else(|why| {
        findings.push(("InvalidAnnotation", format!("{why}; ignored")));
        None
    });
    Constraints { node_selector, tolerations, affinity, min_nvlink_gpus }
}
