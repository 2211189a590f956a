//! Per-type rules applied on writes, as the real registry strategies and admission plugins do:
//! defaults, status reset on create, the pod spec update rules, priority admission, and the
//! custom resource schema hook (defaulting, pruning, validation).

use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult, Cause};
use crate::meta::now_rfc3339;
use crate::registry::{Builtin, ResourceType};
use crate::store::Store;

/// The name of the default scheduler, set on pods that name none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

fn forbidden_cause(field: &str, message: &str) -> Cause {
    Cause { reason: "FieldValueForbidden".into(), message: format!("Forbidden: {message}"), field: field.into() }
}

fn required_cause(field: &str) -> Cause {
    Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: field.into() }
}

fn invalid_err(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&rt.kind, &rt.group, name, causes)
}

/// Spec defaults the real API server applies to every pod, so updates compare like for like.
fn default_pod_spec(spec: &mut Map<String, Value>) {
    spec.entry("schedulerName").or_insert_with(|| json!(DEFAULT_SCHEDULER));
    spec.entry("restartPolicy").or_insert_with(|| json!("Always"));
    spec.entry("dnsPolicy").or_insert_with(|| json!("ClusterFirst"));
    spec.entry("terminationGracePeriodSeconds").or_insert_with(|| json!(30));
}

fn quantity_keys(c: &Value, which: &str) -> Map<String, Value> {
    c.get("resources").and_then(|r| r.get(which)).and_then(Value::as_object).cloned().unwrap_or_default()
}

/// The QoS class the real server computes from requests and limits.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let compute = |m: &Map<String, Value>| m.keys().any(|k| k == "cpu" || k == "memory");
    if containers.iter().all(|c| !compute(&quantity_keys(c, "requests")) && !compute(&quantity_keys(c, "limits"))) {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let limits = quantity_keys(c, "limits");
        let requests = quantity_keys(c, "requests");
        ["cpu", "memory"]
            .iter()
            .all(|r| limits.get(*r).is_some() && requests.get(*r).is_none_or(|q| Some(q) == limits.get(*r)))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The Priority admission plugin: resolves `priorityClassName` to `spec.priority`.
fn admit_priority(store: &Store, rt: &ResourceType, name: &str, spec: &mut Map<String, Value>) -> ApiResult<()> {
    let classes: Vec<&Value> = store.list("priorityclasses.scheduling.k8s.io", None).map(|v| &**v).collect();
    let class = match spec.get("priorityClassName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(pc) => {
            Some(classes.iter().find(|c| crate::meta::meta_str(c, "name") == pc).copied().ok_or_else(|| {
                ApiError::forbidden(rt.subject(), name, &format!("no PriorityClass with name {pc} was found"))
            })?)
        }
        None => classes.iter().find(|c| c["globalDefault"].as_bool() == Some(true)).copied(),
    };
    let value = class.and_then(|c| c["value"].as_i64()).unwrap_or(0);
    if let Some(given) = spec.get("priority").and_then(Value::as_i64) {
        if given != value {
            return Err(ApiError::forbidden(
                rt.subject(),
                name,
                &format!("the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"),
            ));
        }
    }
    if let Some(c) = class {
        spec.insert("priorityClassName".into(), json!(crate::meta::meta_str(c, "name")));
        let policy = c.get("preemptionPolicy").cloned().unwrap_or_else(|| json!("PreemptLowerPriority"));
        spec.entry("preemptionPolicy").or_insert(policy);
    }
    spec.insert("priority".into(), json!(value));
    Ok(())
}

fn validate_pod(rt: &ResourceType, name: &str, pod: &Value) -> ApiResult<()> {
    let mut causes = Vec::new();
    let containers = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        causes.push(required_cause("spec.containers"));
    }
    for (i, c) in containers.iter().enumerate() {
        for f in ["name", "image"] {
            if c[f].as_str().unwrap_or_default().is_empty() {
                causes.push(required_cause(&format!("spec.containers[{i}].{f}")));
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid_err(rt, name, causes))
    }
}

/// Type-specific defaults and checks on create; `obj` already carries server metadata.
pub fn prepare_create(store: &Store, rt: &ResourceType, obj: &mut Value, strict: bool) -> ApiResult<()> {
    let name = crate::meta::meta_str(obj, "name").to_string();
    match rt.builtin {
        Builtin::Pod => {
            let spec = obj_map(obj, "spec");
            default_pod_spec(spec);
            admit_priority(store, rt, &name, spec)?;
            let qos = qos_class(&obj["spec"]);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
            validate_pod(rt, &name, obj)
        }
        Builtin::Namespace => {
            if let Some(why) = crate::meta::dns_label_problem(&name) {
                return Err(invalid_err(rt, &name, vec![name_cause(&name, &why)]));
            }
            obj["status"] = json!({"phase": "Active"});
            Ok(())
        }
        Builtin::Service => {
            obj_map(obj, "spec").entry("type").or_insert_with(|| json!("ClusterIP"));
            obj["status"] = json!({"loadBalancer": {}});
            Ok(())
        }
        Builtin::PriorityClass => {
            if obj.get("value").and_then(Value::as_i64).is_none() {
                return Err(invalid_err(rt, &name, vec![required_cause("value")]));
            }
            obj.as_object_mut().map(|m| m.entry("preemptionPolicy").or_insert_with(|| json!("PreemptLowerPriority")));
            Ok(())
        }
        Builtin::Crd => {
            let causes = crate::crd::check(obj, &store.registry, false);
            if !causes.is_empty() {
                return Err(invalid_err(rt, &name, causes));
            }
            crate::crd::set_established(obj, None);
            Ok(())
        }
        Builtin::Custom => {
            if rt.status {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
            schema_check(rt, obj, None, strict)
        }
        Builtin::Node | Builtin::Event | Builtin::ConfigMap | Builtin::Lease => Ok(()),
    }
}

/// Type-specific checks on update (main resource or status), after server fields are kept.
pub fn prepare_update(store: &Store, rt: &ResourceType, new: &mut Value, old: &Value, strict: bool) -> ApiResult<()> {
    let name = crate::meta::meta_str(new, "name").to_string();
    match rt.builtin {
        Builtin::Pod => {
            default_pod_spec(obj_map(new, "spec"));
            if let Some(p) = old["spec"].get("priority") {
                obj_map(new, "spec").entry("priority").or_insert(p.clone());
            }
            let mask = |v: &Value| {
                let mut s = v["spec"].clone();
                for list in ["containers", "initContainers"] {
                    if let Some(cs) = s.get_mut(list).and_then(Value::as_array_mut) {
                        cs.iter_mut().filter_map(Value::as_object_mut).for_each(|c| {
                            c.remove("image");
                        });
                    }
                }
                if let Some(m) = s.as_object_mut() {
                    for f in ["activeDeadlineSeconds", "tolerations", "schedulingGates"] {
                        m.remove(f);
                    }
                }
                s
            };
            if mask(new) != mask(old) {
                return Err(invalid_err(rt, &name, vec![forbidden_cause(
                    "spec",
                    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.schedulingGates` (only removals)",
                )]));
            }
            Ok(())
        }
        Builtin::Crd => {
            let causes = crate::crd::check(new, &store.registry, true);
            if !causes.is_empty() {
                return Err(invalid_err(rt, &name, causes));
            }
            if new["spec"]["group"] != old["spec"]["group"]
                || new["spec"]["names"]["plural"] != old["spec"]["names"]["plural"]
            {
                return Err(invalid_err(
                    rt,
                    &name,
                    vec![Cause {
                        reason: "FieldValueInvalid".into(),
                        message: "Invalid value: field is immutable".into(),
                        field: "spec.group".into(),
                    }],
                ));
            }
            crate::crd::set_established(new, Some(old));
            Ok(())
        }
        Builtin::Custom => schema_check(rt, new, Some(old), strict),
        _ => Ok(()),
    }
}

fn name_cause(name: &str, why: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {name:?}: {why}"),
        field: "metadata.name".into(),
    }
}

/// Validates the object name like the real server (namespaces: DNS label; others: subdomain).
pub fn check_name(rt: &ResourceType, name: &str) -> ApiResult<()> {
    let problem = if rt.builtin == Builtin::Namespace {
        crate::meta::dns_label_problem(name)
    } else {
        crate::meta::dns_subdomain_problem(name)
    };
    match problem {
        Some(why) => Err(invalid_err(rt, name, vec![name_cause(name, &why)])),
        None => Ok(()),
    }
}

fn obj_map<'a>(obj: &'a mut Value, field: &str) -> &'a mut Map<String, Value> {
    if !obj[field].is_object() {
        obj[field] = Value::Object(Map::new());
    }
    obj[field].as_object_mut().expect("object ensured above")
}

/// Defaults, prunes and validates a custom resource against its served version's schema.
/// `apiVersion`, `kind` and `metadata` are never pruned (the real server keeps them too).
/// With `strict` (`fieldValidation=Strict`), unknown fields are a 400 as on a real server.
fn schema_check(rt: &ResourceType, obj: &mut Value, old: Option<&Value>, strict: bool) -> ApiResult<()> {
    let Some(schema) = &rt.schema else { return Ok(()) };
    let keep: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
        .iter()
        .filter_map(|k| obj.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    let pruned = crate::validation::default_and_prune_reporting(schema, obj);
    if strict && !pruned.is_empty() {
        let fields: Vec<String> = pruned.iter().map(|f| format!("unknown field {f:?}")).collect();
        return Err(ApiError::bad_request(format!(
            "{kind} in version {v:?} cannot be handled as a {kind}: strict decoding error: {}",
            fields.join(", "),
            kind = rt.kind,
            v = rt.version
        )));
    }
    if let Some(m) = obj.as_object_mut() {
        m.extend(keep);
    }
    crate::validation::validate(schema, obj, old).map_err(|errs| {
        let causes = errs.into_iter().map(|e| Cause { reason: e.reason, message: e.message, field: e.field }).collect();
        invalid_err(rt, crate::meta::meta_str(obj, "name"), causes)
    })
}

/// The `PodScheduled=True` condition the binding subresource sets.
pub fn scheduled_condition() -> Value {
    json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()})
}
