//! Drover's custom resources, as Rust types from which the CRDs are generated (kube derive +
//! schemars), with schema validation (types, enums, ranges, list maps keyed by name, CEL
//! rules over bounded lists) so that bad objects are refused at apply time with the field
//! named, and a real API server admits the CRDs within its CEL cost budget.

// kube's `printcolumn(name = .., type_ = ..)` attributes repeat their keys by design.
#![allow(clippy::duplicated_attributes)]

pub mod conditions;
pub mod department;
pub mod elasticity;
pub mod forecast;
mod formats;
pub mod job;
pub mod podgroup;
pub mod project;
pub mod queue;
pub mod run_times;
pub mod task_template;
pub mod topology;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::crd::merge_crds;
use kube::CustomResourceExt;

/// The API group of the scheduling resources.
pub const SCHEDULING_GROUP: &str = "scheduling.drover.dev";
/// The API group of the batch Job.
pub const BATCH_GROUP: &str = "batch.drover.dev";

/// Every Drover CRD, in installation order (queues before the objects that name them), in the
/// form a Kubernetes API server accepts without warnings.
pub fn all() -> Vec<CustomResourceDefinition> {
    let crds = vec![
        queue::Queue::crd(),
        department::Department::crd(),
        project::Project::crd(),
        podgroup::PodGroup::crd(),
        job::Job::crd(),
        topology::Topology::crd(),
    ];
    crds.into_iter()
        .map(|c| {
            let mut crd = merge_crds(vec![c], "v1alpha1").expect("one version per CRD");
            formats::replace_unknown_integer_formats(&mut crd);
            crd
        })
        .collect()
}

/// Every CRD as one multi-document YAML stream, as `drover crds` prints it for `kubectl apply -f -`.
pub fn all_yaml() -> String {
    all().iter().map(|crd| serde_yaml::to_string(crd).expect("CRDs serialize")).collect::<Vec<_>>().join("---\n")
}

/// Everything the cluster needs before Drover's binaries can schedule, as `drover manifests`
/// prints it for `kubectl apply --server-side -f -`: the CRDs and the charge guard
/// ([`crate::charge_guard`]), without which the scheduler schedules nothing.
pub fn manifests_yaml() -> String {
    format!("{}---\n{}", all_yaml(), crate::charge_guard::manifest())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn crd_json(kind: &str) -> Value {
        let crd = all().into_iter().find(|c| c.spec.names.kind == kind).expect("CRD exists");
        serde_json::to_value(crd).unwrap()
    }

    fn schema(kind: &str) -> Value {
        crd_json(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn every_crd_has_its_group_scope_names_and_status_subresource() {
        let expect = [
            ("Queue", SCHEDULING_GROUP, "Cluster", "dq"),
            ("PodGroup", SCHEDULING_GROUP, "Namespaced", "pg"),
            ("Project", SCHEDULING_GROUP, "Cluster", "proj"),
            ("Department", SCHEDULING_GROUP, "Cluster", "dept"),
            ("Job", BATCH_GROUP, "Namespaced", "djob"),
            ("Topology", SCHEDULING_GROUP, "Cluster", "topo"),
        ];
        for (kind, group, scope, short) in expect {
            let crd = crd_json(kind);
            assert_eq!(crd["spec"]["group"], group, "{kind}");
            assert_eq!(crd["spec"]["scope"], scope, "{kind}");
            assert_eq!(crd["spec"]["names"]["shortNames"][0], short, "{kind}");
            assert_eq!(crd["spec"]["names"]["categories"][0], "drover", "{kind}");
            assert!(
                crd["spec"]["versions"][0]["subresources"]["status"].is_object(),
                "{kind} has a status subresource"
            );
            assert!(
                crd["spec"]["versions"][0]["additionalPrinterColumns"].as_array().is_some_and(|c| c.len() >= 2),
                "{kind}"
            );
        }
    }

    #[test]
    fn schemas_carry_validation_rules_and_defaults() {
        let job = schema("Job");
        let rules = job["properties"]["spec"]["x-kubernetes-validations"].to_string();
        assert!(rules.contains("self.minAvailable <= self.tasks.map(t, t.replicas).sum()"), "{rules}");
        let tasks = &job["properties"]["spec"]["properties"]["tasks"];
        assert_eq!(tasks["maxItems"], job::MAX_TASKS, "the rule over tasks has a bounded cost");
        let task = &tasks["items"];
        assert!(task["x-kubernetes-validations"].to_string().contains("self.minAvailable <= self.replicas"), "{task}");
        assert_eq!(task["properties"]["template"]["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(job["properties"]["spec"]["properties"]["maxRetry"]["default"], 3);
        let queue = schema("Queue");
        let spec = &queue["properties"]["spec"]["properties"];
        assert_eq!(spec["overQuotaWeight"]["default"], 1);
        assert_eq!(spec["reclaimable"]["default"], true);
        assert_eq!(spec["queueingStrategy"]["enum"], serde_json::json!(["BestEffortFIFO", "StrictFIFO"]));
        let pg = schema("PodGroup");
        assert_eq!(pg["properties"]["spec"]["properties"]["minMember"]["minimum"].as_f64(), Some(1.0));
        assert_eq!(pg["properties"]["status"]["properties"]["phase"]["enum"].as_array().map(Vec::len), Some(5));
    }

    #[test]
    fn names_within_lists_are_unique_by_list_map_key() {
        let job = schema("Job");
        let tasks = &job["properties"]["spec"]["properties"]["tasks"];
        assert_eq!(tasks["x-kubernetes-list-type"], "map");
        assert_eq!(tasks["x-kubernetes-list-map-keys"], serde_json::json!(["name"]));
        assert!(tasks["items"]["required"].as_array().unwrap().contains(&"name".into()), "list map keys are required");
        for kind in ["Project", "Department"] {
            let spec = &schema(kind)["properties"]["spec"];
            let pools = &spec["properties"]["nodePools"];
            assert_eq!(pools["x-kubernetes-list-type"], "map", "{kind}");
            assert_eq!(pools["x-kubernetes-list-map-keys"], serde_json::json!(["name"]), "{kind}");
            assert_eq!(pools["maxItems"], project::MAX_NODE_POOLS, "{kind}");
            assert!(pools["items"]["required"].as_array().unwrap().contains(&"name".into()), "{kind}");
            assert!(spec.get("x-kubernetes-validations").is_none(), "{kind} needs no CEL for uniqueness");
        }
    }

    #[test]
    fn forecasts_and_learned_run_times_are_bounded_status_with_columns() {
        for kind in ["PodGroup", "Job"] {
            let crd = crd_json(kind);
            let columns =
                crd["spec"]["versions"][0]["additionalPrinterColumns"].as_array().cloned().unwrap_or_default();
            let path = |name: &str| columns.iter().find(|c| c["name"] == name).map(|c| c["jsonPath"].clone());
            assert_eq!(path("Position"), Some(".status.forecast.queuePosition".into()), "{kind}");
            assert_eq!(path("ETA"), Some(".status.forecast.eta".into()), "{kind}");
            let forecast = &schema(kind)["properties"]["status"]["properties"]["forecast"];
            let basis = &forecast["properties"]["basis"]["enum"];
            assert_eq!(
                basis,
                &serde_json::json!([
                    "DeclaredRunTimes",
                    "LearnedRunTimes",
                    "OtherNamespacesRunTimes",
                    "Unknown",
                    "Never"
                ]),
                "{kind}"
            );
            for field in ["expectedStart", "earliestStart", "latestStart"] {
                assert_eq!(forecast["properties"][field]["format"], "date-time", "{kind} {field}");
            }
            assert_eq!(forecast["properties"]["eta"]["maxLength"], 128, "{kind}");
        }
        let queue = schema("Queue");
        let run_times = &queue["properties"]["status"]["properties"]["runTimes"];
        assert_eq!(run_times["maxItems"], run_times::MAX_KINDS);
        let seconds = &run_times["items"]["properties"]["seconds"];
        assert_eq!(seconds["maxItems"], run_times::MAX_SAMPLES);
        assert_eq!(seconds["items"]["minimum"].as_f64(), Some(0.0));
        let rules = run_times["items"]["x-kubernetes-validations"].to_string();
        assert!(rules.contains("!(has(self.name) && has(self.gpus))"), "{rules}");
        assert!(queue["properties"].get("spec").is_some_and(|s| s["properties"].get("runTimes").is_none()));
    }

    #[test]
    fn the_manifests_are_the_crds_and_the_charge_guard() {
        let kinds: Vec<String> = manifests_yaml()
            .split("\n---\n")
            .map(|doc| serde_yaml::from_str::<Value>(doc).expect("each document parses")["kind"].to_string())
            .collect();
        let crds = kinds.iter().filter(|k| k.contains("CustomResourceDefinition")).count();
        assert_eq!(crds, all().len());
        assert_eq!(kinds[crds..], ["\"ValidatingAdmissionPolicy\"", "\"ValidatingAdmissionPolicyBinding\""]);
    }

    #[test]
    fn yaml_stream_has_one_document_per_crd() {
        let yaml = all_yaml();
        assert_eq!(yaml.matches("kind: CustomResourceDefinition").count(), 6);
        for doc in yaml.split("---\n") {
            let v: Value = serde_yaml::from_str(doc).expect("each document parses");
            assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
        }
    }
}
