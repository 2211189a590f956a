//! Topologies and what groups ask of them: Topology objects into the core's inputs (one the
//! snapshot could not build is left out, reported), and a group's topology blocks (its spec,
//! else the KAI and Kueue annotations users migrate with) into requests that name only
//! existing topologies and levels. A group whose request names anything else is left out
//! with the reason, never placed without its constraint (see "Topology" in
//! docs/conversion.md).

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_api::crd::podgroup::PodGroup;
use drover_api::crd::topology::{SliceConstraint, TaskTopologyConstraint, Topology, TopologySpec};
use drover_api::topology::{
    DEFAULT_TOPOLOGY, HOSTNAME_LABEL, KAI_PREFERRED, KAI_REQUIRED, KAI_TOPOLOGY, KUEUE_PREFERRED, KUEUE_REQUIRED,
    KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE, NODE_LEVEL,
};
use drover_scheduler::snapshot::{LevelInput, SlicesInput, TopologyInput, TopologyRequestInput};
use k8s_openapi::api::core::v1::Pod;

use super::facts::task_of;
use super::{unique, PodInfo, Problem};

/// Why a group's request cannot be taken: a CamelCase reason and a message.
pub(super) type Refusal = (&'static str, String);

/// The Topologies of a cycle by name: those handed to the core, and those left out with why.
#[derive(Default)]
pub(super) struct Catalog<'a> {
    usable: BTreeMap<&'a str, &'a TopologySpec>,
    refused: BTreeMap<&'a str, String>,
}

/// A group's topology requests, by the names the core resolves.
#[derive(Debug, Clone, Default)]
pub(super) struct Requests {
    /// The whole group's.
    pub job: Option<TopologyRequestInput>,
    /// Per task (pods' task label): its request and slices.
    pub tasks: BTreeMap<String, (Option<TopologyRequestInput>, Option<SlicesInput>)>,
}

/// The usable Topologies as core inputs, and the catalog groups are checked against.
pub(super) fn convert<'a>(
    objects: &'a [Arc<Topology>],
    problems: &mut Vec<Problem>,
) -> (Vec<TopologyInput>, Catalog<'a>) {
    let mut inputs = Vec::new();
    let mut catalog = Catalog::default();
    for t in unique(objects, |t| &t.metadata).into_values() {
        let name = t.metadata.name.as_deref().unwrap_or_default();
        if let Some((reason, message)) = t.spec.refusal() {
            problems.push(Problem {
                kind: "Topology",
                namespace: None,
                name: name.to_string(),
                reason: reason.to_string(),
                message: format!("{message}; no job is placed by it"),
            });
            catalog.refused.insert(name, message);
            continue;
        }
        inputs.push(TopologyInput {
            name: name.to_string(),
            levels: t
                .spec
                .levels
                .iter()
                .map(|l| LevelInput { name: l.name.clone(), node_label: l.node_label.clone() })
                .collect(),
        });
        catalog.usable.insert(name, &t.spec);
    }
    (inputs, catalog)
}

fn annotation<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A value and where it was read, for messages.
type Sourced<'a> = (&'a str, String);

impl Catalog<'_> {
    fn spec(&self, name: &str) -> Result<&TopologySpec, Refusal> {
        if let Some(spec) = self.usable.get(name) {
            return Ok(spec);
        }
        if let Some(why) = self.refused.get(name) {
            return Err(("TopologyNotReady", format!("topology {name:?} cannot be used ({why}); the group waits")));
        }
        let known: Vec<&str> = self.usable.keys().copied().collect();
        let known =
            if known.is_empty() { "there are none".to_string() } else { format!("topologies: {}", known.join(", ")) };
        Err(("TopologyNotFound", format!("topology {name:?} does not exist ({known}); the group waits until it does")))
    }

    /// A group's requests: the spec's blocks, else the KAI annotations (the group's, else its
    /// first pod's) for the whole group and the Kueue annotations (the task's first pod's)
    /// per task. Every level is checked against the topology, so that the core is never
    /// handed one it would refuse.
    pub(super) fn requests(&self, group: &PodGroup, name: &str, pods: &[PodInfo]) -> Result<Requests, Refusal> {
        let group_annotations = group.metadata.annotations.as_ref();
        let kai = |key: &str| -> Option<Sourced> {
            let on_group = group_annotations.and_then(|a| a.get(key)).map(|v| (v.as_str(), format!("PodGroup {name}")));
            on_group.or_else(|| pods.iter().find_map(|p| Some((annotation(p.pod, key)?, format!("pod {}", p.name)))))
        };
        let kueue = |task: &str, key: &str| -> Option<Sourced> {
            pods.iter()
                .filter(|p| task_of(p.pod) == task)
                .find_map(|p| Some((annotation(p.pod, key)?, format!("pod {}", p.name))))
        };
        let spec = &group.spec;
        let asks_kai = [KAI_TOPOLOGY, KAI_REQUIRED, KAI_PREFERRED].iter().any(|k| kai(k).is_some());
        let mut tasks: Vec<String> = pods.iter().map(|p| task_of(p.pod)).collect();
        tasks.extend(spec.task_topology.keys().cloned());
        tasks.sort();
        tasks.dedup();
        let kueue_keys = [KUEUE_REQUIRED, KUEUE_PREFERRED, KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE];
        let asks_kueue = tasks.iter().any(|t| kueue_keys.iter().any(|k| kueue(t, k).is_some()));
        if spec.topology.is_none() && spec.task_topology.is_empty() && !asks_kai && !asks_kueue {
            return Ok(Requests::default());
        }
        let whole = spec.topology.clone().unwrap_or_default();
        let topology = match (&whole.name, kai(KAI_TOPOLOGY)) {
            (Some(n), _) => n.clone(),
            (None, Some((n, _))) => n.to_string(),
            (None, None) => DEFAULT_TOPOLOGY.to_string(),
        };
        let levels = Levels { name: &topology, spec: self.spec(&topology)? };
        let pick = |field: &str, level: &Option<String>, key: &str| match level {
            Some(l) => levels.by_name(field, l).map(Some),
            None => kai(key).map(|(label, from)| levels.by_label(key, label, &from)).transpose(),
        };
        let job = TopologyRequestInput {
            topology: topology.clone(),
            required: pick("spec.topology.required", &whole.required, KAI_REQUIRED)?,
            preferred: pick("spec.topology.preferred", &whole.preferred, KAI_PREFERRED)?,
        };
        let mut out = Requests { job: Some(job), tasks: BTreeMap::new() };
        for task in tasks {
            let block = match spec.task_topology.get(&task) {
                Some(b) => levels.task_block(&task, b)?,
                None => levels.kueue_block(&task, &|key| kueue(&task, key))?,
            };
            if block.0.is_some() || block.1.is_some() {
                out.tasks.insert(task, block);
            }
        }
        Ok(out)
    }
}

/// One topology's levels, for checking the names and labels a group gives.
struct Levels<'a> {
    name: &'a str,
    spec: &'a TopologySpec,
}

impl Levels<'_> {
    fn by_name(&self, field: &str, level: &str) -> Result<String, Refusal> {
        let names = self.spec.level_names();
        if names.contains(&level) {
            return Ok(level.to_string());
        }
        Err((
            "TopologyLevelNotFound",
            format!(
                "{field}: {level:?} is not a level of topology {:?} (levels: {}); the group waits",
                self.name,
                names.join(", ")
            ),
        ))
    }

    /// The level whose node label is `label` (KAI's and Kueue's annotations name labels).
    fn by_label(&self, key: &str, label: &str, from: &str) -> Result<String, Refusal> {
        if let Some(l) = self.spec.levels.iter().find(|l| l.node_label == label) {
            return Ok(l.name.clone());
        }
        if label == HOSTNAME_LABEL {
            return Ok(NODE_LEVEL.to_string());
        }
        let labels: Vec<String> = self
            .spec
            .levels
            .iter()
            .map(|l| format!("{} ({})", l.node_label, l.name))
            .chain([format!("{HOSTNAME_LABEL} ({NODE_LEVEL})")])
            .collect();
        Err((
            "TopologyLevelNotFound",
            format!(
                "annotation {key} on {from}: node label {label:?} is no level of topology {:?} (labels: {}); the group waits",
                self.name,
                labels.join(", ")
            ),
        ))
    }

    fn request(&self, required: Option<String>, preferred: Option<String>) -> Option<TopologyRequestInput> {
        (required.is_some() || preferred.is_some()).then(|| TopologyRequestInput {
            topology: self.name.to_string(),
            required,
            preferred,
        })
    }

    fn task_block(
        &self,
        task: &str,
        b: &TaskTopologyConstraint,
    ) -> Result<(Option<TopologyRequestInput>, Option<SlicesInput>), Refusal> {
        let field = |f: &str| format!("spec.taskTopology.{task}.{f}");
        let level = |f: &str, l: &Option<String>| l.as_deref().map(|l| self.by_name(&field(f), l)).transpose();
        let request = self.request(level("required", &b.required)?, level("preferred", &b.preferred)?);
        let slices = match &b.slices {
            Some(SliceConstraint { size, required }) => {
                Some(SlicesInput { size: (*size).max(1), required: self.by_name(&field("slices.required"), required)? })
            }
            None => None,
        };
        Ok((request, slices))
    }

    fn kueue_block<'p>(
        &self,
        task: &str,
        read: &dyn Fn(&str) -> Option<Sourced<'p>>,
    ) -> Result<(Option<TopologyRequestInput>, Option<SlicesInput>), Refusal> {
        let level = |key: &str| read(key).map(|(label, from)| self.by_label(key, label, &from)).transpose();
        let request = self.request(level(KUEUE_REQUIRED)?, level(KUEUE_PREFERRED)?);
        let slices = match (level(KUEUE_SLICE_REQUIRED)?, read(KUEUE_SLICE_SIZE)) {
            (None, None) => None,
            (Some(required), Some((size, from))) => match size.trim().parse::<u32>() {
                Ok(size) if size > 0 => Some(SlicesInput { size, required }),
                _ => {
                    return Err(bad(format!(
                        "annotation {KUEUE_SLICE_SIZE} on {from}: {size:?} is not a positive number of pods"
                    )))
                }
            },
            (Some(_), None) => {
                return Err(bad(format!("task {task}: {KUEUE_SLICE_REQUIRED} needs {KUEUE_SLICE_SIZE} beside it")))
            }
            (None, Some((_, from))) => {
                return Err(bad(format!(
                    "annotation {KUEUE_SLICE_SIZE} on {from} needs {KUEUE_SLICE_REQUIRED} beside it"
                )))
            }
        };
        Ok((request, slices))
    }
}

fn bad(message: String) -> Refusal {
    ("InvalidTopologyAnnotation", format!("{message}; the group waits"))
}
