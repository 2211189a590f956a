//! Recovery of the bind intents a previous leader (or an earlier cycle) left behind: each is
//! completed, its bindings checked again against the predicates and the queue bounds, or
//! rolled back when the gang cannot reach its minimum. It works on the cycle's conversion
//! and snapshot, and brings the snapshot up to date with what it wrote.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::podgroup::{BindIntent, PodGroup};
use drover_kubeutil::events::{self, EventType};
use drover_scheduler::recovery::IntentJudge;
use drover_scheduler::session::Statement;
use drover_scheduler::snapshot::{NodeId, PodId, PodPhase, Snapshot};
use futures::StreamExt;

use super::api::{self, Removal};
use super::bind::{bind_many, note_binds, Bind};
use super::cache::{key_of, Key, Overlay};
use super::intents::{report_ignored_annotations, Intents};
use super::placement::pod_domain;
use super::{Leader, Writer};
use crate::charge::Charge;
use crate::convert::{Converted, ObjectLists, PodRef};

/// What recovery left.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    /// Groups whose intent is still unresolved: the cycle must not bind their pods.
    pub blocked: BTreeSet<Key>,
    /// Whether recovery wrote anything (the objects must be gathered again before they are
    /// written to).
    pub wrote: bool,
    /// Pods bound.
    pub bound: usize,
    /// Whether any group showed a bind intent, whatever became of it: a later cycle may have
    /// more to do (an intent grows old enough to take over, the store catches up).
    pub seen: bool,
}

fn young(at: Option<&str>, period: Duration) -> bool {
    let Some(at) = at.and_then(|a| a.parse::<jiff::Timestamp>().ok()) else { return false };
    let age = jiff::Timestamp::now().duration_since(at);
    age < jiff::SignedDuration::try_from(period).unwrap_or(jiff::SignedDuration::ZERO)
}

/// What recovery does with one intent, decided before any write.
enum IntentPlan {
    /// Bind these pods: the gang has its minimum with them.
    Complete(Vec<Bind>),
    /// Delete the pods bound per the intent: the gang cannot reach its minimum.
    RollBack { bound: Vec<PodRef>, lost: Vec<String> },
}

/// One intent to resolve.
struct Resolution {
    key: Key,
    group: Arc<PodGroup>,
    id: Option<String>,
    plan: IntentPlan,
    /// Bindings refused by a rule, to report.
    refused: Vec<String>,
}

/// Decides every intent against one session, in order, so that the bindings one intent
/// completes count against the capacity and queue bounds the next is checked with.
fn resolve<'g>(
    writer: &Writer<'_>,
    g: &ObjectLists,
    snap: &Snapshot,
    converted: &Converted,
    found: Vec<(Key, &'g Arc<PodGroup>, &'g BindIntent)>,
) -> Vec<Resolution> {
    let mut judge = IntentJudge::open(snap, writer.config);
    let pod_ids = pod_ids(converted);
    let node_ids = node_ids(snap);
    let pods = g.pods_by_key();
    let mut out = Vec::new();
    for (key, group, intent) in found {
        let facts = converted.groups.get(&key);
        let mut st = Statement::new();
        let mut to_bind: Vec<Bind> = Vec::new();
        let mut bound: Vec<PodRef> = Vec::new();
        let mut lost: Vec<String> = Vec::new();
        let mut refused: Vec<String> = Vec::new();
        for (pod_name, node) in &intent.pods {
            if !pods.contains_key(&(key.0.clone(), pod_name.clone())) {
                lost.push(format!("pod {pod_name} is gone"));
                continue;
            }
            let Some(member) = facts.and_then(|f| f.members.get(pod_name)) else {
                refused.push(format!("pod {pod_name} is not a member of the group"));
                continue;
            };
            match member.node.as_deref() {
                Some(n) if n == node => bound.push(member.pod.clone()),
                Some(_) => {} // bound elsewhere, not by this intent
                None if member.ended => lost.push(format!("pod {pod_name} is terminating")),
                None => match (node_ids.get(node.as_str()), pod_ids.get(&(key.0.as_str(), pod_name.as_str()))) {
                    (None, _) => lost.push(format!("node {node} of pod {pod_name} is gone")),
                    (_, None) => lost.push(format!("pod {pod_name} cannot be scheduled now")),
                    (Some(&n), Some(&p)) => match judge.take(&mut st, p, n) {
                        Ok(()) => {
                            let charge = Charge::for_job(snap, snap.pods[p].job);
                            to_bind.push((member.pod.clone(), node.clone(), charge, pod_domain(snap, p, n)));
                        }
                        Err(why) => refused.push(format!("pod {pod_name}: {why}")),
                    },
                },
            }
        }
        lost.extend(refused.iter().cloned());
        let adding: BTreeSet<&str> = to_bind.iter().map(|(p, _, _, _)| p.name.as_str()).collect();
        let plan = if lost.is_empty() || facts.is_some_and(|f| f.ready_with(&adding)) {
            judge.keep(st);
            IntentPlan::Complete(to_bind)
        } else {
            judge.give_back(st);
            IntentPlan::RollBack { bound, lost }
        };
        out.push(Resolution { key, group: group.clone(), id: intent.id.clone(), plan, refused });
    }
    out
}

/// Completes or rolls back every bind intent found in the groups' status: pods of the intent
/// still unbound are bound where the intent says if the core's [`IntentJudge`] allows it; if some cannot be
/// and the gang would stay below its minimum, the pods bound per the intent are deleted at
/// once. Then the intent is removed. A binding refused by a predicate or a queue bound is
/// reported (Warning Event `BindIntentRefused` and a log line), never written.
///
/// Intents of this process whose bindings failed are recovered at once; others (a previous
/// leader's) once they are older than one period, or at once when they carry no time.
///
/// Decided on the cycle's `converted` objects and `snap`shot, which then shows the pods
/// recovery bound as bound and those it deleted as releasing their nodes.
pub(super) async fn recover(
    writer: &Writer<'_>,
    intents: &mut Intents,
    overlay: &mut Overlay,
    g: &ObjectLists,
    converted: &Converted,
    snap: &mut Snapshot,
    is_leader: &Leader,
) -> Recovery {
    let mut out = Recovery::default();
    if is_leader() {
        report_ignored_annotations(writer, intents, g).await;
    }
    let mut found = Vec::new();
    for pg in &g.pod_groups {
        let Some(intent) = pg.status.as_ref().and_then(|s| s.bind_intent.as_ref()) else { continue };
        out.seen = true;
        if intent.id.as_ref().is_some_and(|id| intents.cleared.contains(id)) {
            continue; // removed by this process; the store has not caught up
        }
        let own = intent.id.as_ref().is_some_and(|id| intents.own_pending.contains(id));
        if !own && young(intent.at.as_deref(), writer.period) {
            out.blocked.insert(key_of(&pg.metadata));
            continue;
        }
        found.push((key_of(&pg.metadata), pg, intent));
    }
    if found.is_empty() {
        return out;
    }
    let mut placed: Vec<(PodRef, String)> = Vec::new();
    let mut deleted: Vec<PodRef> = Vec::new();
    let gangs_at_once = (writer.concurrency / 2).max(1);
    let resolved: Vec<Recovered> = futures::stream::iter(resolve(writer, g, snap, converted, found))
        .map(|resolution| recover_one(writer, resolution, is_leader.clone()))
        .buffer_unordered(gangs_at_once)
        .collect()
        .await;
    for gang in resolved {
        let Recovered { key, id, wrote, binds, removed, cleared } = gang;
        out.wrote |= wrote;
        let (ok, _) = note_binds(overlay, &binds);
        out.bound += ok;
        placed.extend(binds.into_iter().filter(|(_, _, r)| r.is_ok()).map(|(pod, node, _)| (pod, node)));
        for pod in removed {
            overlay.pod_deleted(&pod);
            deleted.push(pod);
        }
        if let Some((before, written)) = cleared {
            overlay.group_written(before, written);
            intents.cleared(id.as_deref());
            continue;
        }
        if let Some(id) = id.as_ref().filter(|_| wrote) {
            intents.pending(id);
        }
        out.blocked.insert(key);
    }
    note_in_snapshot(snap, converted, &placed, &deleted);
    out
}

fn pod_ids(converted: &Converted) -> HashMap<(&str, &str), PodId> {
    converted.pods.iter_enumerated().map(|(i, r)| ((r.namespace.as_str(), r.name.as_str()), i)).collect()
}

fn node_ids(snap: &Snapshot) -> HashMap<&str, NodeId> {
    snap.nodes.iter_enumerated().map(|(i, n)| (n.name.as_str(), i)).collect()
}

/// Brings the snapshot up to date with recovery's writes, as the overlay does the stores:
/// the pods it bound hold their nodes, and those it deleted release theirs.
fn note_in_snapshot(snap: &mut Snapshot, converted: &Converted, placed: &[(PodRef, String)], deleted: &[PodRef]) {
    let pod_ids = pod_ids(converted);
    let node_ids = node_ids(snap);
    let id = |pod: &PodRef| pod_ids.get(&(pod.namespace.as_str(), pod.name.as_str())).copied();
    let mut phases: Vec<(PodId, PodPhase)> = placed
        .iter()
        .filter_map(|(pod, node)| Some((id(pod)?, PodPhase::Bound(*node_ids.get(node.as_str())?))))
        .collect();
    for p in deleted.iter().filter_map(id) {
        if let PodPhase::Bound(n) | PodPhase::Releasing(n) = snap.pods[p].phase {
            phases.push((p, PodPhase::Releasing(n)));
        }
    }
    for (p, phase) in phases {
        snap.pods[p].phase = phase;
    }
}

/// What resolving one intent wrote, applied to the overlay and intents once every gang is done.
struct Recovered {
    key: Key,
    id: Option<String>,
    /// Whether anything was written.
    wrote: bool,
    binds: Vec<(PodRef, String, Result<(), String>)>,
    /// Pods deleted by a rollback.
    removed: Vec<PodRef>,
    /// The group as the intent's removal returned it, with the version it was made on
    /// (`None`: the intent stays, resolved again next cycle).
    cleared: Option<(Option<String>, PodGroup)>,
}

/// Resolves one intent: its bindings completed or its bound pods deleted, then the intent
/// removed if every write succeeded. Nothing is written once this process is not the leader.
async fn recover_one(writer: &Writer<'_>, resolution: Resolution, is_leader: Leader) -> Recovered {
    let Resolution { key, group, id, plan, refused } = resolution;
    let mut out = Recovered { key, id, wrote: false, binds: Vec::new(), removed: Vec::new(), cleared: None };
    if !is_leader() {
        return out;
    }
    let (namespace, name) = (&out.key.0, &out.key.1);
    if !refused.is_empty() {
        let message = format!("bind intent not followed: {}", refused.join("; "));
        tracing::warn!(%namespace, group = %name, %message, "refusing bindings of a bind intent");
        events::publish(
            writer.client,
            "drover-scheduler",
            group.as_ref(),
            EventType::Warning,
            "BindIntentRefused",
            &message,
        )
        .await;
    }
    out.wrote = true;
    let done = match plan {
        IntentPlan::Complete(to_bind) => {
            if !to_bind.is_empty() {
                tracing::info!(%namespace, group = %name, pods = to_bind.len(), "completing a bind intent");
            }
            out.binds = bind_many(writer, to_bind).await;
            let errors: Vec<&String> = out.binds.iter().filter_map(|(_, _, r)| r.as_ref().err()).collect();
            if !errors.is_empty() {
                tracing::warn!(%namespace, group = %name, ?errors, "recovery could not bind every pod; retrying next cycle");
            }
            errors.is_empty()
        }
        IntentPlan::RollBack { bound, lost } => {
            tracing::warn!(%namespace, group = %name, ?lost, "bind intent cannot be completed; rolling the gang back");
            let (removed, all) = roll_back(writer, bound).await;
            out.removed = removed;
            all
        }
    };
    if !done {
        return out;
    }
    match api::write_intent(writer.client, &group, None).await {
        Ok(written) => out.cleared = Some((group.metadata.resource_version.clone(), written)),
        Err(e) => {
            tracing::warn!(%namespace, group = %name, error = %e, "could not remove the bind intent; retrying next cycle")
        }
    }
    out
}

/// Deletes the pods a gang's intent bound; returns those deleted and whether all were.
async fn roll_back(writer: &Writer<'_>, bound: Vec<PodRef>) -> (Vec<PodRef>, bool) {
    let client = writer.client.clone();
    let results: Vec<(PodRef, Result<Removal, String>)> = futures::stream::iter(bound)
        .map(move |pod| {
            let client = client.clone();
            async move {
                let r = api::delete_now(&client, &pod).await;
                (pod, r)
            }
        })
        .buffer_unordered(writer.concurrency)
        .collect()
        .await;
    let mut all = true;
    let mut removed = Vec::new();
    for (pod, r) in results {
        match r {
            Ok(_) => removed.push(pod),
            Err(e) => {
                all = false;
                tracing::warn!(error = %e, "rollback could not delete a pod; retrying next cycle");
            }
        }
    }
    (removed, all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{convert, Objects, POD_GROUP_ANNOTATION};
    use serde_json::json;

    fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("a valid object"))
    }

    #[test]
    fn the_snapshot_shows_what_recovery_bound_and_deleted() {
        let meta = |name: &str| json!({"name": name, "namespace": "ns", "annotations": {POD_GROUP_ANNOTATION: "g"}});
        let pod = |name, node: Option<&str>| {
            object(
                json!({"metadata": meta(name), "spec": {"schedulerName": "drover", "nodeName": node, "containers": []}}),
            )
        };
        let objects = Objects {
            nodes: &[object(json!({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "pods": "9"}}}))],
            pods: &[pod("a", None), pod("b", Some("n1"))],
            pod_groups: &[object(json!({"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2}}))],
            namespaces: &[object(json!({"metadata": {"name": "ns"}}))],
            queues: &[],
            priority_classes: &[],
            topologies: &[],
        };
        let converted = convert(&objects, "drover");
        let mut snap = converted.snapshot().unwrap();
        let (a, b) = (converted.pods[PodId(0)].clone(), converted.pods[PodId(1)].clone());
        note_in_snapshot(&mut snap, &converted, &[(a, "n1".into())], &[b]);
        let phases: Vec<PodPhase> = snap.pods.iter().map(|p| p.phase).collect();
        assert_eq!(phases, [PodPhase::Bound(NodeId(0)), PodPhase::Releasing(NodeId(0))]);
    }
}
