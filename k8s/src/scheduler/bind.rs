//! The cycle's bindings, gang-safe: per gang, the bind intent in the PodGroup's status, then
//! each pod's binding (carrying its charge record), then the intent's removal.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use drover_api::crd::podgroup::{BindIntent, PodGroup};
use drover_scheduler::snapshot::{JobId, NodeId, PodId, Snapshot};
use futures::StreamExt;

use super::api;
use super::cache::{key_of, Key, Overlay};
use super::intents::Intents;
use super::placement::{pod_domain, DOMAIN_ANNOTATION};
use super::{Leader, Writer};
use crate::charge::Charge;
use crate::convert::{Converted, ObjectLists, PodRef};

/// A binding to write: the pod, its node, what it is charged to and, for a job in a topology,
/// its domain path (see [`super::placement`]).
pub(super) type Bind = (PodRef, String, Charge, Option<String>);

/// Binds each pod, its Binding carrying its charge record and, in a topology, its domain
/// annotation (the API server sets both on the pod in the write that binds it, so launchers
/// reading the domain at start find it).
pub(super) async fn bind_many(writer: &Writer<'_>, binds: Vec<Bind>) -> Vec<(PodRef, String, Result<(), String>)> {
    let client = writer.client.clone();
    futures::stream::iter(binds)
        .map(move |(pod, node, charge, domain)| {
            let client = client.clone();
            async move {
                let mut annotations = BTreeMap::from([charge.annotation()]);
                if let Some(domain) = domain {
                    annotations.insert(DOMAIN_ANNOTATION.to_string(), domain);
                }
                let result = api::bind(&client, &pod, &node, annotations).await;
                (pod, node, result)
            }
        })
        .buffer_unordered(writer.concurrency)
        .collect()
        .await
}

/// Records successful bindings in the overlay; returns how many succeeded and the errors.
pub(super) fn note_binds(
    overlay: &mut Overlay,
    results: &[(PodRef, String, Result<(), String>)],
) -> (usize, Vec<String>) {
    let mut ok = 0;
    let mut errors = Vec::new();
    for (pod, node, result) in results {
        match result {
            Ok(()) => {
                overlay.pod_bound(pod, node);
                ok += 1;
            }
            Err(e) => errors.push(e.clone()),
        }
    }
    (ok, errors)
}

/// One gang's writes, planned before any is made.
struct GangPlan {
    key: Key,
    group: Arc<PodGroup>,
    pods: Vec<Bind>,
    id: String,
    intent: BindIntent,
}

/// What writing one gang did, applied to the overlay and intents afterwards.
struct GangWritten {
    key: Key,
    id: String,
    /// The group as the intent write returned it (`None`: not written, nothing bound).
    annotated: Option<(Option<String>, PodGroup)>,
    binds: Vec<(PodRef, String, Result<(), String>)>,
    /// The group as the intent's removal returned it.
    cleared: Option<PodGroup>,
}

/// Writes one gang: the intent (skipped on any error, a 409 included), then its bindings,
/// then the intent's removal if every binding succeeded.
async fn write_gang(writer: &Writer<'_>, plan: GangPlan) -> GangWritten {
    let GangPlan { key, group, pods, id, intent } = plan;
    let mut out = GangWritten { key, id, annotated: None, binds: Vec::new(), cleared: None };
    let written = match api::write_intent(writer.client, &group, Some(&intent)).await {
        Ok(w) => w,
        Err(e) => {
            let (ns, name) = &out.key;
            if api::code(&e) == Some(409) {
                tracing::debug!(namespace = %ns, group = %name, "pod group changed; binding next cycle");
            } else {
                tracing::warn!(namespace = %ns, group = %name, error = %e, "could not write the bind intent; binding next cycle");
            }
            return out;
        }
    };
    out.binds = bind_many(writer, pods).await;
    if out.binds.iter().all(|(_, _, r)| r.is_ok()) {
        match api::write_intent(writer.client, &written, None).await {
            Ok(cleared) => out.cleared = Some(cleared),
            Err(e) => {
                let (ns, name) = &out.key;
                tracing::warn!(namespace = %ns, group = %name, error = %e, "could not remove the bind intent; retrying next cycle");
            }
        }
    }
    out.annotated = Some((group.metadata.resource_version.clone(), written));
    out
}

/// Writes the cycle's bindings, several gangs at once (each in its own order: intent, then
/// bindings, then the intent's removal, so that a crash at any point leaves either nothing or
/// an intent that the next leader's recovery completes or rolls back). A group with a failed
/// binding keeps its intent, which the next cycle's recovery completes or rolls back.
/// Returns the number of pods bound.
#[allow(clippy::too_many_arguments)]
pub(super) async fn bind_decisions(
    writer: &Writer<'_>,
    intents: &mut Intents,
    overlay: &mut Overlay,
    g: &ObjectLists,
    snap: &Snapshot,
    converted: &Converted,
    binds: &[(PodId, NodeId)],
    blocked: &BTreeSet<Key>,
    is_leader: &Leader,
) -> usize {
    let mut by_job: BTreeMap<JobId, Vec<(PodId, NodeId)>> = BTreeMap::new();
    for &(pod, node) in binds {
        by_job.entry(snap.pods[pod].job).or_default().push((pod, node));
    }
    let groups: HashMap<Key, &Arc<PodGroup>> = g.pod_groups.iter().map(|pg| (key_of(&pg.metadata), pg)).collect();
    let mut plans = Vec::new();
    for (job, list) in by_job {
        let j = &snap.jobs[job];
        let key = (j.namespace.clone(), j.name.clone());
        if blocked.contains(&key) {
            continue;
        }
        let Some(&group) = groups.get(&key) else { continue };
        if group.status.as_ref().is_some_and(|s| s.bind_intent.is_some()) {
            continue; // an intent the recovery left alone (e.g. too young)
        }
        let charge = Charge::for_job(snap, job);
        let pods: Vec<Bind> = list
            .iter()
            .filter_map(|&(p, n)| {
                let node = snap.nodes.get(n)?.name.clone();
                Some((converted.pods.get(p)?.clone(), node, charge.clone(), pod_domain(snap, p, n)))
            })
            .collect();
        let id = intents.new_id();
        let intent = BindIntent {
            pods: pods.iter().map(|(p, n, _, _)| (p.name.clone(), n.clone())).collect(),
            id: Some(id.clone()),
            at: Some(jiff::Timestamp::now().to_string()),
        };
        plans.push(GangPlan { key, group: group.clone(), pods, id, intent });
    }
    let gangs_at_once = (writer.concurrency / 2).max(1);
    let written: Vec<GangWritten> = futures::stream::iter(plans)
        .filter(|_| std::future::ready(is_leader()))
        .map(|plan| write_gang(writer, plan))
        .buffer_unordered(gangs_at_once)
        .collect()
        .await;
    let mut bound = 0;
    for gang in written {
        let Some((before, annotated)) = gang.annotated else { continue };
        overlay.group_written(before, annotated.clone());
        let (ok, errors) = note_binds(overlay, &gang.binds);
        bound += ok;
        match gang.cleared {
            Some(cleared) => {
                overlay.group_written(annotated.metadata.resource_version.clone(), cleared);
                intents.cleared(Some(&gang.id));
            }
            None => {
                if !errors.is_empty() {
                    let (ns, name) = &gang.key;
                    tracing::warn!(namespace = %ns, group = %name, ?errors, "some bindings failed; the intent is recovered next cycle");
                }
                intents.pending(&gang.id);
            }
        }
    }
    bound
}
