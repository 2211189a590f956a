//! Predicates: whether a pod can ever run on a node (cordon, taints, node selector including
//! the node-pool label, required node affinity) and whether it fits the node's idle
//! resources now (every requested resource, including the pod count), and the seed's NVLink
//! rule. A gang with a pod larger than every schedulable node, or with pods that must share
//! one domain of a topology level asking more than the largest domain there has, is not
//! admitted: no eviction, finishing job or wait would ever seat it, and admitting it would
//! hold its queue's reservation for nothing. The same holds for pods whose node selector,
//! affinity and tolerations allow only some nodes (a Project's node pool, say): a pod larger
//! than every node it may use, or the gang's pods that may use only those nodes asking more
//! than they have in all, are never seated (see [`Reach`]).

use std::fmt;

use crate::why::{AdviceFacts, Ending};
use std::collections::HashMap;
use std::sync::Arc;

use drover_api::tolerates_all;
use drover_api::topology::{nvlink_gpus, NVLINK_PAIRS_LABEL};

use crate::ids::TiSlice;
use crate::plugin::{Hook, Plugin, Rule, Subject, Verdict, Why};
use crate::res::Res;
use crate::session::Session;
use crate::snapshot::{Constraints, JobId, Level, Node, NodeId, QueueId, Snapshot};

/// At most this many distinct task constraints get their [`Reach`] worked out in a cycle: each
/// costs a pass over the nodes, and a tenant must not make every cycle pay one per job it
/// writes. Constraints beyond it are judged against the whole cluster only.
const REACH_SETS_MAX: usize = 64;

/// The predicates plugin.
#[derive(Default)]
pub struct Predicates {
    /// Per task constraints (by address: equal constraints share one) judged when the session
    /// opens, what the nodes they allow have, if they allow only some nodes.
    reach: HashMap<usize, Option<Reach>>,
}

/// What the schedulable nodes a task's constraints allow have (cordoned ones do not count, as
/// for the largest node): in all, and the most any one of them has of each resource. Only
/// constraints that allow at least one such node but not every node have one; a selector no
/// schedulable node matches yet waits for nodes (an autoscaler may add them), as before.
struct Reach {
    total: Res,
    largest: Res,
}

impl Reach {
    /// The reach of `constraints`, or `None` when they allow every node or none.
    fn of(snap: &Snapshot, constraints: &Constraints) -> Option<Reach> {
        let n = snap.resources.len();
        let (mut total, mut largest, mut allowed) = (Res::zero(n), Res::zero(n), 0);
        for node in snap.nodes.iter().filter(|node| !node.unschedulable && allows(constraints, node).is_ok()) {
            total.add(&node.allocatable);
            largest.max_with(&node.allocatable);
            allowed += 1;
        }
        (allowed > 0 && allowed < snap.nodes.len()).then_some(Reach { total, largest })
    }
}

/// Whether a node's labels and taints let a pod with `c` on it, cordon aside: the part of the
/// filter that only the pod's spec or the node's labels can change.
fn allows(c: &Constraints, n: &Node) -> Result<(), String> {
    if let Err(key) = tolerates_all(&c.tolerations, &n.taints) {
        return Err(format!("node(s) had untolerated taint {{{key}}}"));
    }
    let selector_ok = c.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v));
    if !selector_ok || !c.affinity.iter().all(|r| r.matches(&n.labels)) {
        return Err("node(s) didn't match Pod's node affinity/selector".into());
    }
    Ok(())
}

/// The address that identifies a task's constraints within a snapshot.
fn constraints_key(c: &Arc<Constraints>) -> usize {
    Arc::as_ptr(c) as usize
}

impl Predicates {
    /// The gang's pods judged against the nodes their constraints allow: each pod within the
    /// largest of them, and the pods sharing constraints within what those nodes have in all.
    fn within_reach<'s>(&self, ssn: &Session<'s>, job: JobId) -> Verdict<'s> {
        let snap = ssn.snap;
        // In the order the gang's pods first name each constraints: addresses differ between
        // runs, and the first refusal must not.
        let mut asked: Vec<(&Reach, Res)> = Vec::new();
        for p in ssn.gang_pods(job) {
            let key = constraints_key(&snap.jobs[job].tasks[snap.pods[p].task].constraints);
            let Some(Some(reach)) = self.reach.get(&key) else { continue };
            let req = ssn.requests(p);
            if let Some(r) = req.first_exceeding(&reach.largest) {
                let e = (r, req[r], reach.largest[r]);
                return Err(Why::exceeding(snap, Rule::LargerThanAnyAllowedNode, Subject::Job(job), e));
            }
            match asked.iter_mut().find(|(seen, _)| std::ptr::eq(*seen, reach)) {
                Some((_, sum)) => sum.add(req),
                None => asked.push((reach, req.clone())),
            }
        }
        for (reach, sum) in asked {
            let total = &reach.total;
            if let Some(r) = sum.first_exceeding(total) {
                let e = (r, sum[r], total[r]);
                return Err(Why::exceeding(snap, Rule::BeyondAllowedNodes, Subject::Job(job), e));
            }
        }
        Ok(())
    }
}

impl Plugin for Predicates {
    fn name(&self) -> &'static str {
        "predicates"
    }

    fn hooks(&self) -> Vec<Hook> {
        vec![Hook::Enqueueable, Hook::NodeFilter]
    }

    fn on_open(&mut self, ssn: &mut Session) {
        let snap = ssn.snap;
        self.reach.clear();
        let tainted = snap.nodes.iter().any(|n| !n.taints.is_empty());
        for (j, job) in snap.jobs.iter_enumerated() {
            if ssn.pending_pods(j).next().is_none() {
                continue;
            }
            for task in &job.tasks {
                let c = &task.constraints;
                let open = c.node_selector.is_empty() && c.affinity.is_empty() && !tainted;
                let key = constraints_key(c);
                if open || self.reach.len() == REACH_SETS_MAX || self.reach.contains_key(&key) {
                    continue;
                }
                self.reach.insert(key, Reach::of(snap, c));
            }
        }
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
        self.within_reach(ssn, job)?;
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
        allows(c, n)?;
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

/// The words for the rules of what a gang's nodes can hold (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, _s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    let snap = why.snap();
    match why.rule {
        Rule::LargerThanAnyNode => Some(match why.excess {
            Some(e) => {
                let r = e.resource;
                let (largest, asked) = (snap.amount(r, e.bound), snap.amount(r, e.amount));
                Ending::said(write!(
                    f,
                    "can never fit: largest node has {largest} {}, a pod asks {asked}",
                    snap.resources[r]
                ))
            }
            None => Ending::figures(write!(f, "can never fit on any node")),
        }),
        Rule::LargerThanAnyAllowedNode | Rule::BeyondAllowedNodes => {
            let Some(e) = why.excess else {
                return Some(Ending::said(write!(f, "can never fit on the nodes its pods may use")));
            };
            let r = e.resource;
            let (has, asked) = (snap.amount(r, e.bound), snap.amount(r, e.amount));
            let res = &snap.resources[r];
            Some(Ending::said(if why.rule == Rule::LargerThanAnyAllowedNode {
                write!(
                    f,
                    "can never fit: the largest node its node selector, affinity and tolerations allow has {has} {res}, a pod asks {asked}"
                )
            } else {
                write!(
                    f,
                    "can never fit: the nodes its pods' node selector, affinity and tolerations allow have {has} {res} in all, the gang's pods need {asked}"
                )
            }))
        }
        Rule::LargerThanAnyDomain => {
            let level = why.level.map_or("domain", |(t, l)| snap.topologies[t].levels[l].as_str());
            let Some(e) = why.excess else { return Some(Ending::said(write!(f, "can never fit in one {level}"))) };
            let r = e.resource;
            let (largest, asked) = (snap.amount(r, e.bound), snap.amount(r, e.amount));
            Some(Ending::said(write!(
                f,
                "can never fit: largest {level} has {largest} {}, the pods that must share one need {asked}",
                snap.resources[r]
            )))
        }
        Rule::NvlinkBelowMinimum => {
            let Some(e) = why.excess else {
                return Some(Ending::said(write!(f, "requests fewer GPUs than it requires with NVLink")));
            };
            Some(Ending::said(write!(f, "pod requests {} GPUs but requires {} with NVLink", e.amount, e.bound)))
        }
        _ => None,
    }
}

/// The advice on what a gang's nodes cannot hold (see [`crate::why::Advice`]).
pub(crate) fn advice(a: &AdviceFacts) -> Option<String> {
    let (snap, e) = (a.snap, a.blocker.excess?);
    let (r, amount, bound) =
        (&snap.resources[e.resource], snap.amount(e.resource, e.amount), snap.amount(e.resource, e.bound));
    Some(match a.blocker.rule {
        Rule::LargerThanAnyNode => format!("ask at most {bound} {r} per pod (the largest node's) or add a node with {amount}"),
        Rule::LargerThanAnyAllowedNode => format!(
            "ask at most {bound} {r} per pod (the largest allowed node's), or let its pods use more nodes (node selector, affinity, tolerations; a Project's node pool)"
        ),
        Rule::BeyondAllowedNodes => format!(
            "shrink the gang to {bound} {r}, or let its pods use more nodes (node selector, affinity, tolerations; a Project's node pool)"
        ),
        Rule::LargerThanAnyDomain => format!(
            "fit the pods that must share one domain into {bound} {r} (the largest domain's), or require a coarser level"
        ),
        _ => return None,
    })
}
