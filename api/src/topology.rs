//! Topology: where nodes sit in the network and NVLink hierarchy, read from their labels.
//! Shared by the scheduling core (which places gangs inside domains) and the controllers
//! (which report a `Topology`'s domains), so that both read a node's place the same way.

use std::collections::BTreeMap;

/// The name of the implicit finest level of every topology: the node itself.
pub const NODE_LEVEL: &str = "node";

/// The topology a job or task uses when it names none.
pub const DEFAULT_TOPOLOGY: &str = "default";

/// Node label: the number of NVLink-connected GPU pairs on the node (the seed's rule).
pub const NVLINK_PAIRS_LABEL: &str = "gpu-topology.my.company.com/nvlink-pairs";

/// Pod annotation: the fewest GPUs a pod needs, all NVLink-connected (the seed's rule).
pub const MIN_NVLINK_GPUS_ANNOTATION: &str = "gpu-topology.my.company.com/min-nvlink-gpus";

/// Pod annotation the scheduler writes on each pod it binds in a topology: the pod's domain
/// path down to its node (`b1/r7/n3`), so that launchers can order NCCL rings.
pub const DOMAIN_ANNOTATION: &str = "topology.drover.dev/domain";

/// The node label of the `node` level in migrated annotations (KAI's and Kueue's topologies
/// often end with it).
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// KAI-Scheduler's workload annotation naming its Topology.
pub const KAI_TOPOLOGY: &str = "kai.scheduler/topology";
/// KAI-Scheduler's workload annotation: the node label of the level the whole workload must
/// fit in.
pub const KAI_REQUIRED: &str = "kai.scheduler/topology-required-placement";
/// KAI-Scheduler's workload annotation: the node label of the level the workload should fit in.
pub const KAI_PREFERRED: &str = "kai.scheduler/topology-preferred-placement";
/// Kueue's pod-template annotation: the node label of the level a pod set must fit in.
pub const KUEUE_REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
/// Kueue's pod-template annotation: the node label of the level a pod set should fit in.
pub const KUEUE_PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";
/// Kueue's pod-template annotation: the node label of the level each slice must fit in.
pub const KUEUE_SLICE_REQUIRED: &str = "kueue.x-k8s.io/podset-slice-required-topology";
/// Kueue's pod-template annotation: pods per slice.
pub const KUEUE_SLICE_SIZE: &str = "kueue.x-k8s.io/podset-slice-size";

/// A node's domain at each level of a hierarchy, coarse to fine: the label values from the
/// top level down. A node lacking the label of some level has a domain only at the levels
/// above it (the path is cut there): a domain is the whole path, so a rack label without its
/// block label names no rack.
pub fn domain_path<'a>(level_labels: &[String], labels: &'a BTreeMap<String, String>) -> Vec<&'a str> {
    level_labels.iter().map_while(|key| labels.get(key).map(String::as_str)).collect()
}

/// The NVLink GPUs a node offers (twice its labelled pairs), `None` when the label is absent
/// or not a count.
pub fn nvlink_gpus(labels: &BTreeMap<String, String>) -> Option<i64> {
    labels.get(NVLINK_PAIRS_LABEL)?.trim().parse::<i64>().ok().filter(|n| *n >= 0).map(|n| n * 2)
}

/// Reads the `min-nvlink-gpus` annotation: `Ok(None)` when absent, an error naming the value
/// when it is not a positive count.
pub fn min_nvlink_gpus(annotations: &BTreeMap<String, String>) -> Result<Option<i64>, String> {
    let Some(raw) = annotations.get(MIN_NVLINK_GPUS_ANNOTATION) else { return Ok(None) };
    match raw.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!("annotation {MIN_NVLINK_GPUS_ANNOTATION}: {raw:?} is not a positive number of GPUs")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_path_stops_at_the_first_missing_level() {
        let levels = vec!["block".to_string(), "rack".to_string()];
        assert_eq!(domain_path(&levels, &labels(&[("block", "b1"), ("rack", "r7")])), ["b1", "r7"]);
        assert_eq!(domain_path(&levels, &labels(&[("rack", "r7")])), Vec::<&str>::new());
        assert_eq!(domain_path(&levels, &labels(&[("block", "b2")])), ["b2"]);
    }

    #[test]
    fn nvlink_label_and_annotation_are_read_strictly() {
        assert_eq!(nvlink_gpus(&labels(&[(NVLINK_PAIRS_LABEL, "4")])), Some(8));
        assert_eq!(nvlink_gpus(&labels(&[(NVLINK_PAIRS_LABEL, "four")])), None);
        assert_eq!(min_nvlink_gpus(&labels(&[(MIN_NVLINK_GPUS_ANNOTATION, "4")])), Ok(Some(4)));
        assert!(min_nvlink_gpus(&labels(&[(MIN_NVLINK_GPUS_ANNOTATION, "0")])).unwrap_err().contains("\"0\""));
        assert_eq!(min_nvlink_gpus(&BTreeMap::new()), Ok(None));
    }
}
