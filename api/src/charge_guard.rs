//! The charge guard: the admission policy that keeps a bound pod's charge record
//! ([`CHARGE_ANNOTATION`]) as the scheduler's binding wrote it.
//!
//! A pod's annotations are the tenant's to edit, so the record is trusted only because the
//! API server refuses every other write of it. The policy is defined once, here
//! (`charge_guard.yaml`, inside this crate); the chart installs the same bytes
//! (`charts/drover/templates/charge-guard.yaml`, not templated, kept equal by the chart test),
//! and [`check`] says whether the objects a cluster holds guard as this one does.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};

pub use crate::labels::CHARGE_ANNOTATION;

/// The name of the policy and of its binding (cluster-scoped: one guard per cluster).
pub const NAME: &str = "drover-charge-guard";

const MANIFEST: &str = include_str!("charge_guard.yaml");

/// The policy and its binding as the chart's YAML, for `kubectl apply` without the chart.
pub fn manifest() -> &'static str {
    MANIFEST
}

/// The policy and its binding as the chart installs them.
pub fn objects() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let mut docs = MANIFEST.split("\n---\n");
    let policy = serde_yaml::from_str(docs.next().unwrap_or_default()).expect("the chart's charge guard policy parses");
    let binding =
        serde_yaml::from_str(docs.next().unwrap_or_default()).expect("the chart's charge guard binding parses");
    (policy, binding)
}

/// `Ok` when `policy` and `binding`, as read from a cluster, guard the annotation as the
/// chart's do: the same match, variables and validations, failing closed, bound with `Deny`
/// to every namespace and object. Otherwise what differs, for the scheduler to say why it
/// does not bind.
pub fn check(
    policy: Option<&ValidatingAdmissionPolicy>,
    binding: Option<&ValidatingAdmissionPolicyBinding>,
) -> Result<(), String> {
    let (want, want_binding) = objects();
    let Some(policy) = policy else { return Err(format!("the ValidatingAdmissionPolicy {NAME} is missing")) };
    let Some(binding) = binding else {
        return Err(format!("the ValidatingAdmissionPolicyBinding {NAME} is missing"));
    };
    let (spec, want) = (policy.spec.clone().unwrap_or_default(), want.spec.unwrap_or_default());
    if spec.failure_policy.as_deref().is_some_and(|p| p != "Fail") {
        return Err(format!("the ValidatingAdmissionPolicy {NAME} does not fail closed (failurePolicy)"));
    }
    if spec.variables != want.variables || spec.validations != want.validations {
        return Err(format!(
            "the ValidatingAdmissionPolicy {NAME} differs from the chart's (variables or validations)"
        ));
    }
    if spec.match_conditions.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(format!("the ValidatingAdmissionPolicy {NAME} has matchConditions, which narrow what it guards"));
    }
    let rules = |m: Option<&k8s_openapi::api::admissionregistration::v1::MatchResources>| {
        m.and_then(|m| m.resource_rules.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                (r.api_groups, r.api_versions, r.operations, r.resources, r.resource_names.filter(|n| !n.is_empty()))
            })
            .collect::<Vec<_>>()
    };
    let constraints = spec.match_constraints.as_ref();
    let narrowed = |m: Option<&k8s_openapi::api::admissionregistration::v1::MatchResources>| {
        m.is_some_and(|m| {
            m.exclude_resource_rules.as_ref().is_some_and(|r| !r.is_empty())
                || m.namespace_selector.as_ref().is_some_and(|s| *s != Default::default())
                || m.object_selector.as_ref().is_some_and(|s| *s != Default::default())
        })
    };
    if rules(constraints) != rules(want.match_constraints.as_ref()) || narrowed(constraints) {
        return Err(format!("the ValidatingAdmissionPolicy {NAME} does not match what the chart's matches"));
    }
    let (bspec, want_binding) = (&binding.spec, want_binding.spec);
    if bspec.policy_name != want_binding.policy_name || !bspec.validation_actions.iter().any(|a| a == "Deny") {
        return Err(format!("the ValidatingAdmissionPolicyBinding {NAME} does not bind {NAME} with Deny"));
    }
    let binding_rules =
        bspec.match_resources.as_ref().and_then(|m| m.resource_rules.as_ref()).is_some_and(|r| !r.is_empty());
    if narrowed(bspec.match_resources.as_ref()) || binding_rules || bspec.param_ref.is_some() {
        return Err(format!("the ValidatingAdmissionPolicyBinding {NAME} narrows what the policy guards"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_guard_passes_its_own_check_and_a_weakened_one_does_not() {
        let (policy, binding) = objects();
        assert_eq!(policy.metadata.name.as_deref(), Some(NAME));
        assert_eq!(check(Some(&policy), Some(&binding)), Ok(()));
        assert!(check(None, Some(&binding))
            .unwrap_err()
            .contains("ValidatingAdmissionPolicy drover-charge-guard is missing"));
        assert!(check(Some(&policy), None).unwrap_err().contains("Binding drover-charge-guard is missing"));

        let mut allow_all = policy.clone();
        allow_all.spec.as_mut().unwrap().validations.as_mut().unwrap()[1].expression = "true".into();
        assert!(check(Some(&allow_all), Some(&binding)).unwrap_err().contains("variables or validations"));

        let mut ignoring = policy.clone();
        ignoring.spec.as_mut().unwrap().failure_policy = Some("Ignore".into());
        assert!(check(Some(&ignoring), Some(&binding)).unwrap_err().contains("fail closed"));

        let mut create_only = policy.clone();
        let rules =
            create_only.spec.as_mut().unwrap().match_constraints.as_mut().unwrap().resource_rules.as_mut().unwrap();
        rules[0].operations = Some(vec!["CREATE".into()]);
        assert!(check(Some(&create_only), Some(&binding)).unwrap_err().contains("does not match"));

        let mut warn_only = binding.clone();
        warn_only.spec.validation_actions = vec!["Warn".into()];
        assert!(check(Some(&policy), Some(&warn_only)).unwrap_err().contains("with Deny"));

        let mut one_namespace = binding.clone();
        one_namespace.spec.match_resources = Some(k8s_openapi::api::admissionregistration::v1::MatchResources {
            namespace_selector: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("team".to_string(), "a".to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(check(Some(&policy), Some(&one_namespace)).unwrap_err().contains("narrows"));
    }
}
