//! Priority classes: PriorityClass objects first, then Drover's built-in classes.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_api::{BUILTIN_PRIORITY_CLASSES, NON_PREEMPTIBLE_THRESHOLD};
use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::member::Member;
use super::{Problem, PREEMPTIBLE_ANNOTATION};
use drover_api::crd::podgroup::PodGroup;

/// A resolved priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    pub class: String,
    pub value: i32,
    pub preemptible: bool,
}

/// The classes known this cycle, by name.
pub(super) struct Classes(BTreeMap<String, (i32, Option<bool>)>);

impl Classes {
    /// Reads the PriorityClass objects; an unreadable preemptible annotation is reported and
    /// ignored.
    pub fn new(objects: &[Arc<PriorityClass>], problems: &mut Vec<Problem>) -> Classes {
        let mut map = BTreeMap::new();
        for ((_, name), pc) in super::unique(objects, |pc| &pc.metadata) {
            let annotation = pc.metadata.annotations.as_ref().and_then(|a| a.get(PREEMPTIBLE_ANNOTATION));
            let preemptible = match annotation.map(|s| s.trim().to_ascii_lowercase()) {
                None => None,
                Some(s) if s == "true" => Some(true),
                Some(s) if s == "false" => Some(false),
                Some(_) => {
                    problems.push(Problem {
                        kind: "PriorityClass",
                        namespace: None,
                        name: name.clone(),
                        reason: "InvalidAnnotation".into(),
                        message: format!(
                            "{PREEMPTIBLE_ANNOTATION} must be \"true\" or \"false\", not {:?}; the value threshold \
                             decides",
                            annotation.map(String::as_str).unwrap_or_default()
                        ),
                    });
                    None
                }
            };
            map.insert(name, (pc.value.unwrap_or(0), preemptible));
        }
        Classes(map)
    }

    /// A class by name: a PriorityClass object, else a built-in class.
    pub fn resolve(&self, name: &str) -> Option<Resolved> {
        let (value, preemptible) = match self.0.get(name) {
            Some(&found) => found,
            None => (BUILTIN_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name)?.1, None),
        };
        Some(Resolved {
            class: name.to_string(),
            value,
            preemptible: preemptible.unwrap_or(value < NON_PREEMPTIBLE_THRESHOLD),
        })
    }

    /// The class of work that names none: the lowest built-in class.
    pub fn default_class(&self) -> Resolved {
        let (name, _) = BUILTIN_PRIORITY_CLASSES.iter().min_by_key(|(_, v)| *v).expect("built-in classes exist");
        self.resolve(name).expect("built-in classes resolve")
    }

    /// A value without a class object (a pod's admitted `spec.priority`).
    pub fn bare(class: &str, value: i32) -> Resolved {
        Resolved { class: class.to_string(), value, preemptible: value < NON_PREEMPTIBLE_THRESHOLD }
    }
}

/// A group's priority from its spec's class, else its pods' (see "Priority" in docs/conversion.md);
/// an error names the class that does not exist.
pub(super) fn resolve_priority(group: &PodGroup, members: &[Member], classes: &Classes) -> Result<Resolved, String> {
    if let Some(class) = group.spec.priority_class_name.as_deref().filter(|c| !c.is_empty()) {
        return classes
            .resolve(class)
            .ok_or_else(|| format!("priority class {class:?} does not exist; the group is not scheduled"));
    }
    let from_pod = members.iter().find_map(|m| {
        let spec = m.info.pod.spec.as_ref()?;
        let class = spec.priority_class_name.as_deref().filter(|c| !c.is_empty());
        (class.is_some() || spec.priority.is_some_and(|p| p != 0)).then_some((m, class, spec.priority))
    });
    match from_pod {
        None => Ok(classes.default_class()),
        Some((m, Some(class), value)) => match (classes.resolve(class), value) {
            (Some(resolved), _) => Ok(resolved),
            (None, Some(value)) => Ok(Classes::bare(class, value)),
            (None, None) => Err(format!(
                "pod {} names priority class {class:?}, which does not exist; the group is not scheduled",
                m.info.name
            )),
        },
        Some((_, None, value)) => Ok(Classes::bare("", value.unwrap_or(0))),
    }
}
