//! Predicates: whether a pod can ever run on a node (cordon, taints, node selector including
//! the node-pool label, required node affinity) and whether it fits the node's idle
//! resources now (every requested resource, including the pod count), and the seed's NVLink
//! rule. A gang with a pod larger than every schedulable node, or with pods that must share
//! one domain of a topology level asking more than the largest domain there has, is not
//! admitted: no eviction, finishing job or wait would ever seat it, and admitting it would
//! hold its queue's reservation for nothing.

use drover_api::tolerates_all;
use drover_api::topology::{nvlink_gpus, NVLINK_PAIRS_LABEL};

use crate::ids::TiSlice;
use crate::plugin::{Hook, Plugin, Rule, Subject, Verdict, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{JobId, Level, NodeId, QueueId, Snapshot};

/// The predicates plugin.
pub struct Predicates;

impl Plugin for Predicates {
    fn name(&self) -> &'static str {
        "predicates"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::Enqueueable, Hook::NodeFilter]
    }

    fn enqueueable<'s>(&self, ssn: &Session<'s>, job: JobId, _: Option<&TiSlice<QueueId, Res>>) -> Verdict<'s> {
        let snap = ssn.snap;
        for p in ssn.gang_pods(job) {
            let req = ssn.requests(p);
            let task = &snap.jobs[job].tasks[snap.pods[p].task];
            if let Some(min) = task.constraints.min_nvlink_gpus {
                let gpus = snap.gpu.map_or(0, |g| req[g]);
                if gpus < min {
                    let e = (snap.gpu.unwrap_or(snap.cpu), gpus, min);
                    return Err(Why::exceeding(snap, Rule::NvlinkBelowMinimum, Subject::Job(job), e));
                }
            }
            if let Some(r) = req.first_exceeding(&snap.largest_node) {
                let e = (r, req[r], snap.largest_node[r]);
                return Err(Why::exceeding(snap, Rule::LargerThanAnyNode, Subject::Cluster, e));
            }
        }
        for (t, level, need) in must_share(ssn, job) {
            let largest = &snap.topologies[t].largest[level];
            if let Some(r) = need.first_exceeding(largest) {
                let e = (r, need[r], largest[r]);
                return Err(Why::exceeding(snap, Rule::LargerThanAnyDomain, Subject::Job(job), e).in_level(t, level));
            }
        }
        Ok(())
    }

    fn node_filter(&self, snap: &Snapshot, job: JobId, task: usize, node: NodeId) -> Result<(), String> {
        let n = &snap.nodes[node];
        let c = &snap.jobs[job].tasks[task].constraints;
        if n.unschedulable {
            return Err("node(s) were unschedulable".into());
        }
        if let Err(key) = tolerates_all(&c.tolerations, &n.taints) {
            return Err(format!("node(s) had untolerated taint {{{key}}}"));
        }
        let selector_ok = c.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v));
        if !selector_ok || !c.affinity.iter().all(|r| r.matches(&n.labels)) {
            return Err("node(s) didn't match Pod's node affinity/selector".into());
        }
        if c.min_nvlink_gpus.is_some() {
            let task = &snap.jobs[job].tasks[task];
            let gpus = snap.gpu.map_or(0, |g| task.requests[g]);
            if !n.labels.contains_key(NVLINK_PAIRS_LABEL) {
                return Err("node(s) missing nvlink-pairs label".into());
            }
            match nvlink_gpus(&n.labels) {
                None => return Err("node(s) had an invalid nvlink-pairs label".into()),
                Some(linked) if linked < gpus => {
                    return Err(format!("node(s) only have {linked} NVLink-connected GPUs, the pod needs {gpus}"))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// What the pods of a job's gang minimum that must share one domain ask, per topology and
/// required level: the whole gang (at least its declared minimum) for the job's level, each
/// task's part of it for the task's, and one slice for a slice's.
fn must_share(ssn: &Session, job: JobId) -> Vec<(usize, Level, Res)> {
    let j = &ssn.snap.jobs[job];
    let gang = ssn.gang_pods(job);
    let mut out = Vec::new();
    if let Some((t, level)) = j.topology.and_then(|r| Some((r.topology, r.required?))) {
        out.push((t, level, ssn.gang_request(job)));
    }
    for (i, task) in j.tasks.iter().enumerate() {
        let in_gang = (gang.iter().filter(|&&p| ssn.snap.pods[p].task == i).count() as i64).max(1);
        if let Some((t, level)) = task.topology.and_then(|r| Some((r.topology, r.required?))) {
            out.push((t, level, task.requests.times(in_gang)));
        }
        if let Some(s) = task.slices {
            let slice = i64::from(s.size).min(task.pods.len() as i64).max(1);
            out.push((s.topology, s.level, task.requests.times(slice)));
        }
    }
    out
}

/// The first resource a request does not fit in `idle`, if any.
pub fn insufficient(req: &Res, idle: &Res) -> Option<usize> {
    req.first_exceeding(idle)
}
