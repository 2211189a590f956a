//! The resource types this server serves: the fixed built-ins and those of every established
//! CustomResourceDefinition. Discovery, routing and storage all read this one table, so a type
//! is either fully served or not at all.

use std::sync::Arc;

use serde_json::Value;

use crate::error::Subject;

/// Built-in behaviour attached to a type (defaults, admission, special subresources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// core/v1 Pod, with `binding` and `eviction` subresources.
    Pod,
    /// core/v1 Node.
    Node,
    /// core/v1 Namespace.
    Namespace,
    /// core/v1 Event.
    Event,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Service.
    Service,
    /// coordination.k8s.io/v1 Lease.
    Lease,
    /// scheduling.k8s.io/v1 PriorityClass.
    PriorityClass,
    /// apiextensions.k8s.io/v1 CustomResourceDefinition.
    Crd,
    /// Any custom resource served because of a CRD.
    Custom,
}

/// One `additionalPrinterColumns` entry of a CRD version (or a built-in's default column).
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    /// Optional OpenAPI format.
    pub format: String,
    /// Column description.
    pub description: String,
    /// 0 = shown by default, >0 = only with `-o wide`.
    pub priority: i64,
    /// The simple JSONPath (`.spec.x`) the cell comes from.
    pub json_path: String,
}

/// A resource served at one group/version.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group; empty for core.
    pub group: String,
    /// The version this entry serves.
    pub version: String,
    /// The version objects are stored in (CRDs: the `storage: true` version).
    pub storage_version: String,
    /// Plural resource name (URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Kind of the list.
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    pub categories: Vec<String>,
    /// Whether the `status` subresource exists (status split on writes).
    pub status: bool,
    /// Built-in behaviour.
    pub builtin: Builtin,
    /// The served version's `openAPIV3Schema` (custom resources only).
    pub schema: Option<Value>,
    /// Table columns besides Name and Age.
    pub columns: Vec<PrinterColumn>,
    /// Whether PUT may create a missing object.
    pub create_on_update: bool,
    /// Whether PUT without `metadata.resourceVersion` is allowed.
    pub unconditional_update: bool,
}

impl ResourceType {
    /// The storage table key shared by all versions: `pods`, `jobs.batch.drover.dev`.
    pub fn storage_key(&self) -> String {
        storage_key(&self.group, &self.plural)
    }

    /// `apiVersion` of objects served by this entry.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// How errors name this resource.
    pub fn subject(&self) -> Subject<'_> {
        Subject { group: &self.group, plural: &self.plural }
    }
}

/// `group/version`, or just `version` for core.
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// The storage key of a group and plural.
pub fn storage_key(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// All served types, built-ins first then CRDs in creation order.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<Arc<ResourceType>>,
}

/// The storage key of CustomResourceDefinitions (loaded first from a state file).
pub const CRD_KEY: &str = "customresourcedefinitions.apiextensions.k8s.io";

struct Def {
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    builtin: Builtin,
    create_on_update: bool,
}

const BUILTINS: &[Def] = &[
    Def {
        group: "",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short: &["cm"],
        categories: &[],
        status: false,
        builtin: Builtin::ConfigMap,
        create_on_update: false,
    },
    Def {
        group: "",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        status: false,
        builtin: Builtin::Event,
        create_on_update: true,
    },
    Def {
        group: "",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short: &["ns"],
        categories: &[],
        status: true,
        builtin: Builtin::Namespace,
        create_on_update: false,
    },
    Def {
        group: "",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short: &["no"],
        categories: &[],
        status: true,
        builtin: Builtin::Node,
        create_on_update: false,
    },
    Def {
        group: "",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short: &["po"],
        categories: &["all"],
        status: true,
        builtin: Builtin::Pod,
        create_on_update: false,
    },
    Def {
        group: "",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short: &["svc"],
        categories: &["all"],
        status: true,
        builtin: Builtin::Service,
        create_on_update: true,
    },
    Def {
        group: "apiextensions.k8s.io",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short: &["crd", "crds"],
        categories: &["api-extensions"],
        status: true,
        builtin: Builtin::Crd,
        create_on_update: false,
    },
    Def {
        group: "coordination.k8s.io",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short: &[],
        categories: &[],
        status: false,
        builtin: Builtin::Lease,
        create_on_update: true,
    },
    Def {
        group: "scheduling.k8s.io",
        plural: "priorityclasses",
        singular: "priorityclass",
        kind: "PriorityClass",
        namespaced: false,
        short: &["pc"],
        categories: &[],
        status: false,
        builtin: Builtin::PriorityClass,
        create_on_update: false,
    },
];

fn col(name: &str, type_: &str, json_path: &str, priority: i64) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: String::new(),
        priority,
        json_path: json_path.into(),
    }
}

fn builtin_columns(b: Builtin) -> Vec<PrinterColumn> {
    match b {
        Builtin::Pod => vec![
            col("Status", "string", ".status.phase", 0),
            col("Node", "string", ".spec.nodeName", 0),
            col("Priority", "integer", ".spec.priority", 1),
        ],
        Builtin::Node => vec![col("Unschedulable", "boolean", ".spec.unschedulable", 0)],
        Builtin::Namespace => vec![col("Status", "string", ".status.phase", 0)],
        Builtin::Event => vec![
            col("Type", "string", ".type", 0),
            col("Reason", "string", ".reason", 0),
            col("Object", "string", ".involvedObject.name", 0),
            col("Message", "string", ".message", 0),
        ],
        Builtin::Service => {
            vec![col("Type", "string", ".spec.type", 0), col("Cluster-IP", "string", ".spec.clusterIP", 0)]
        }
        Builtin::Lease => vec![col("Holder", "string", ".spec.holderIdentity", 0)],
        Builtin::PriorityClass => {
            vec![col("Value", "integer", ".value", 0), col("Global-Default", "boolean", ".globalDefault", 0)]
        }
        Builtin::Crd => vec![col("Created At", "date", ".metadata.creationTimestamp", 0)],
        Builtin::ConfigMap | Builtin::Custom => vec![],
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

impl Registry {
    /// The registry with only the built-in types.
    pub fn builtins() -> Self {
        let types = BUILTINS
            .iter()
            .map(|d| {
                Arc::new(ResourceType {
                    group: d.group.into(),
                    version: "v1".into(),
                    storage_version: "v1".into(),
                    plural: d.plural.into(),
                    singular: d.singular.into(),
                    kind: d.kind.into(),
                    list_kind: format!("{}List", d.kind),
                    namespaced: d.namespaced,
                    short_names: d.short.iter().map(|s| s.to_string()).collect(),
                    categories: d.categories.iter().map(|s| s.to_string()).collect(),
                    status: d.status,
                    builtin: d.builtin,
                    schema: None,
                    columns: builtin_columns(d.builtin),
                    create_on_update: d.create_on_update,
                    unconditional_update: true,
                })
            })
            .collect();
        Registry { types }
    }

    /// The type served at group/version/plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types.iter().find(|t| t.group == group && t.version == version && t.plural == plural).cloned()
    }

    /// The storage-version entry of a storage key.
    pub fn find_storage(&self, key: &str) -> Option<Arc<ResourceType>> {
        self.types.iter().find(|t| t.storage_key() == key && t.version == t.storage_version).cloned()
    }

    /// Every served type.
    pub fn all(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// Whether any type (of any version) is stored under this key.
    pub fn has_key(&self, key: &str) -> bool {
        self.types.iter().any(|t| t.storage_key() == key)
    }

    /// Serves (or re-serves, after an update) the types a CRD defines.
    pub fn register_crd(&mut self, crd: &Value) {
        let new = types_from_crd(crd);
        if let Some(first) = new.first() {
            let key = first.storage_key();
            self.types.retain(|t| t.storage_key() != key);
        }
        self.types.extend(new.into_iter().map(Arc::new));
    }

    /// Stops serving a storage key (CRD deleted).
    pub fn unregister(&mut self, key: &str) {
        self.types.retain(|t| t.storage_key() != key || t.builtin != Builtin::Custom);
    }
}

/// The served types of a CRD (one per served version). Assumes `crd::check` passed.
fn types_from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let plural = names["plural"].as_str().unwrap_or_default().to_string();
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    let singular = names["singular"].as_str().map_or_else(|| kind.to_lowercase(), str::to_string);
    let list_kind = names["listKind"].as_str().map_or_else(|| format!("{kind}List"), str::to_string);
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_string();
    versions
        .iter()
        .filter(|v| v["served"].as_bool() == Some(true))
        .map(|v| ResourceType {
            group: group.clone(),
            version: v["name"].as_str().unwrap_or_default().to_string(),
            storage_version: storage_version.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: strings(names.get("shortNames")),
            categories: strings(names.get("categories")),
            status: v.get("subresources").and_then(|s| s.get("status")).is_some_and(|s| !s.is_null()),
            builtin: Builtin::Custom,
            schema: v.get("schema").and_then(|s| s.get("openAPIV3Schema")).cloned(),
            columns: v["additionalPrinterColumns"]
                .as_array()
                .map(|cols| {
                    cols.iter()
                        .map(|c| PrinterColumn {
                            name: c["name"].as_str().unwrap_or_default().into(),
                            type_: c["type"].as_str().unwrap_or("string").into(),
                            format: c["format"].as_str().unwrap_or_default().into(),
                            description: c["description"].as_str().unwrap_or_default().into(),
                            priority: c["priority"].as_i64().unwrap_or(0),
                            json_path: c["jsonPath"].as_str().unwrap_or_default().into(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            create_on_update: false,
            unconditional_update: false,
        })
        .collect()
}
