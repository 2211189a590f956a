//! Writing decisions: evictions (with Events), gang-safe bindings behind a bind intent in
//! the PodGroup's status, and the recovery of intents a previous leader (or an earlier cycle)
//! left behind, each binding checked again against the predicates and the queue bounds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use drover_api::crd::podgroup::{BindIntent, PodGroup};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::framework::Framework;
use drover_scheduler::plugin::ShareBound;
use drover_scheduler::session::{EvictReason, PodState, Session, Statement};
use drover_scheduler::snapshot::{self, JobId, NodeId, PodId, Snapshot};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;

use super::api::{self, Removal};
use super::cache::{key_of, Gathered, Key, Overlay};
use super::Leader;
use crate::charge::Charge;
use crate::convert::{self, Converted, PodRef, DEFAULT_TASK, POD_GROUP_ANNOTATION, TASK_LABEL};
use crate::events::{self, EventType};

/// The PodGroup annotation where bind intents once lived. Anyone who may edit a PodGroup can
/// write it, so it is never read as an intent: a group carrying it gets a Warning Event.
pub const IGNORED_BIND_INTENT_ANNOTATION: &str = "scheduling.drover.dev/bind-intent";

/// What every writer needs.
pub(super) struct Ctx<'a> {
    pub client: &'a Client,
    pub config: &'a SchedulerConfig,
    pub scheduler_name: &'a str,
    pub concurrency: usize,
    pub period: Duration,
}

/// The intents this process wrote.
#[derive(Debug, Default)]
pub(super) struct Intents {
    /// Written, but some binding failed: recover next cycle, whatever their age.
    own_pending: HashSet<String>,
    /// Completed and removed: if the store still shows them, it is behind.
    cleared: HashSet<String>,
    cleared_order: VecDeque<String>,
    /// Groups (uid and annotation value) already reported for the ignored annotation.
    reported: HashSet<String>,
    seq: u64,
}

const CLEARED_KEPT: usize = 10_000;

impl Intents {
    fn new_id(&mut self) -> String {
        self.seq += 1;
        format!("{:x}-{}", jiff::Timestamp::now().as_nanosecond(), self.seq)
    }

    fn pending(&mut self, id: &str) {
        self.own_pending.insert(id.to_string());
    }

    fn cleared(&mut self, id: Option<&str>) {
        let Some(id) = id else { return };
        self.own_pending.remove(id);
        if self.cleared.insert(id.to_string()) {
            self.cleared_order.push_back(id.to_string());
            while self.cleared_order.len() > CLEARED_KEPT {
                if let Some(old) = self.cleared_order.pop_front() {
                    self.cleared.remove(&old);
                }
            }
        }
    }
}

fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
    }
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
}

fn finished(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// The group a pod of this scheduler belongs to.
pub(super) fn group_of<'p>(pod: &'p Pod, scheduler_name: &str) -> Option<&'p str> {
    if pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) != Some(scheduler_name) {
        return None;
    }
    pod.metadata.annotations.as_ref()?.get(POD_GROUP_ANNOTATION).map(String::as_str).filter(|g| !g.is_empty())
}

/// Whether the group has its gang minimum (overall and per task) of bound, live pods, when
/// the pods named in `adding` are bound too.
fn gang_ok(group: &PodGroup, pods: &[Arc<Pod>], scheduler_name: &str, adding: &BTreeSet<&str>) -> bool {
    let (namespace, name) = key_of(&group.metadata);
    let mut total = 0u32;
    let mut per_task: BTreeMap<String, u32> = BTreeMap::new();
    for pod in pods {
        if pod.metadata.namespace.as_deref().unwrap_or_default() != namespace
            || group_of(pod, scheduler_name) != Some(name.as_str())
        {
            continue;
        }
        let live = node_of(pod).is_some() && pod.metadata.deletion_timestamp.is_none() && !finished(pod);
        if !live && !adding.contains(pod.metadata.name.as_deref().unwrap_or_default()) {
            continue;
        }
        total += 1;
        let task = pod.metadata.labels.as_ref().and_then(|l| l.get(TASK_LABEL)).map_or(DEFAULT_TASK, |t| t.as_str());
        *per_task.entry(task.to_string()).or_default() += 1;
    }
    total >= group.spec.min_member
        && group.spec.min_task_member.iter().all(|(task, min)| per_task.get(task).copied().unwrap_or(0) >= *min)
}

/// A binding to write: the pod, its node, and what it is charged to.
type Bind = (PodRef, String, Charge);

/// Binds each pod after recording its charge on it (a pod whose record could not be written
/// is not bound: no pod is ever bound without one).
async fn bind_many(ctx: &Ctx<'_>, binds: Vec<Bind>) -> Vec<(PodRef, String, Result<(), String>)> {
    let client = ctx.client.clone();
    futures::stream::iter(binds)
        .map(move |(pod, node, charge)| {
            let client = client.clone();
            async move {
                let result = match api::record_charge(&client, &pod, &charge).await {
                    Ok(()) => api::bind(&client, &pod, &node).await,
                    Err(e) => Err(e),
                };
                (pod, node, result)
            }
        })
        .buffer_unordered(ctx.concurrency)
        .collect()
        .await
}

/// Records successful bindings in the overlay; returns how many succeeded and the errors.
fn note_binds(overlay: &mut Overlay, results: &[(PodRef, String, Result<(), String>)]) -> (usize, Vec<String>) {
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

/// Removes the intent; `false` if that failed (it is tried again next cycle).
async fn clear_intent(ctx: &Ctx<'_>, overlay: &mut Overlay, group: &PodGroup) -> bool {
    match api::write_intent(ctx.client, group, None).await {
        Ok(written) => {
            overlay.group_written(group.metadata.resource_version.clone(), written);
            true
        }
        Err(e) => {
            let (ns, name) = key_of(&group.metadata);
            tracing::warn!(namespace = %ns, group = %name, error = %e, "could not remove the bind intent; retrying next cycle");
            false
        }
    }
}

/// What recovery left.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    /// Groups whose intent is still unresolved: the cycle must not bind their pods.
    pub blocked: BTreeSet<Key>,
    /// Whether recovery wrote anything (the objects must be gathered again).
    pub wrote: bool,
    /// Pods bound.
    pub bound: usize,
}

fn young(at: Option<&str>, period: Duration) -> bool {
    let Some(at) = at.and_then(|a| a.parse::<jiff::Timestamp>().ok()) else { return false };
    let age = jiff::Timestamp::now().duration_since(at);
    age < jiff::SignedDuration::try_from(period).unwrap_or(jiff::SignedDuration::ZERO)
}

/// Whether the pod `p` may be bound to node `n` now, by the same rules as a new decision:
/// a pending member of its gang, every predicate (cordon, taints, selectors, affinity, node
/// pool), the node's idle capacity and every queue bound up the tree (limits, the deserved
/// quota of non-preemptible work).
fn may_bind(fw: &Framework, ssn: &Session, p: PodId, n: NodeId) -> Result<(), String> {
    let snap = ssn.snap;
    let pod = &snap.pods[p];
    let node = &snap.nodes[n].name;
    if ssn.pod_state[p] != PodState::Pending {
        return Err("it is not pending".into());
    }
    fw.node_filter(snap, pod.job, pod.task, n).map_err(|e| format!("node {node}: {e}"))?;
    if !ssn.fits_idle(n, ssn.requests(p), None) {
        return Err(format!("it no longer fits node {node}"));
    }
    fw.allocatable(ssn, pod.job, ssn.requests(p), ShareBound::Idle).map_err(|why| why.to_string())
}

/// Reports, once per group and value, a group carrying [`IGNORED_BIND_INTENT_ANNOTATION`].
async fn report_ignored_annotations(ctx: &Ctx<'_>, intents: &mut Intents, g: &Gathered) {
    for pg in &g.pod_groups {
        let Some(value) = pg.metadata.annotations.as_ref().and_then(|a| a.get(IGNORED_BIND_INTENT_ANNOTATION)) else {
            continue;
        };
        let seen = format!("{}/{value}", pg.metadata.uid.as_deref().unwrap_or_default());
        if intents.reported.len() > CLEARED_KEPT {
            intents.reported.clear();
        }
        if !intents.reported.insert(seen) {
            continue;
        }
        let (namespace, name) = key_of(&pg.metadata);
        tracing::warn!(%namespace, group = %name, "ignoring the annotation {IGNORED_BIND_INTENT_ANNOTATION}: bind intents are read only from status");
        let message = format!(
            "the annotation {IGNORED_BIND_INTENT_ANNOTATION} is ignored: only the scheduler records bindings, in status.bindIntent"
        );
        events::publish(ctx.client, "drover-scheduler", pg.as_ref(), EventType::Warning, "BindIntentIgnored", &message)
            .await;
    }
}

/// What recovery does with one intent, decided before any write.
enum IntentPlan {
    /// Bind these pods: the gang has its minimum with them.
    Complete(Vec<Bind>),
    /// Delete the pods bound per the intent: the gang cannot reach its minimum.
    RollBack { bound: Vec<PodRef>, lost: Vec<String> },
}

/// One intent to resolve.
struct Resolution<'g> {
    key: Key,
    group: &'g Arc<PodGroup>,
    id: Option<String>,
    plan: IntentPlan,
    /// Bindings refused by a rule, to report.
    refused: Vec<String>,
}

/// Decides every intent against one session, in order, so that the bindings one intent
/// completes count against the capacity and queue bounds the next is checked with.
fn resolve<'g>(
    ctx: &Ctx<'_>,
    g: &Gathered,
    snap: &Snapshot,
    converted: &Converted,
    found: Vec<(Key, &'g Arc<PodGroup>, &'g BindIntent)>,
) -> Vec<Resolution<'g>> {
    let mut ssn = Session::open(snap);
    let mut fw = Framework::new(ctx.config);
    fw.open(&mut ssn);
    let pod_ids: HashMap<(&str, &str), PodId> =
        converted.pods.iter().enumerate().map(|(i, r)| ((r.namespace.as_str(), r.name.as_str()), i)).collect();
    let node_ids: HashMap<&str, NodeId> = snap.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let pods = g.pods_by_key();
    let mut out = Vec::new();
    for (key, group, intent) in found {
        let mut st = Statement::new();
        let mut to_bind: Vec<Bind> = Vec::new();
        let mut bound: Vec<PodRef> = Vec::new();
        let mut lost: Vec<String> = Vec::new();
        let mut refused: Vec<String> = Vec::new();
        for (pod_name, node) in &intent.pods {
            let Some(pod) = pods.get(&(key.0.clone(), pod_name.clone())) else {
                lost.push(format!("pod {pod_name} is gone"));
                continue;
            };
            if group_of(pod, ctx.scheduler_name) != Some(key.1.as_str()) {
                refused.push(format!("pod {pod_name} is not a member of the group"));
                continue;
            }
            match node_of(pod) {
                Some(n) if n == node => bound.push(pod_ref(pod)),
                Some(_) => {} // bound elsewhere, not by this intent
                None if pod.metadata.deletion_timestamp.is_some() || finished(pod) => {
                    lost.push(format!("pod {pod_name} is terminating"))
                }
                None => match (node_ids.get(node.as_str()), pod_ids.get(&(key.0.as_str(), pod_name.as_str()))) {
                    (None, _) => lost.push(format!("node {node} of pod {pod_name} is gone")),
                    (_, None) => lost.push(format!("pod {pod_name} cannot be scheduled now")),
                    (Some(&n), Some(&p)) => match may_bind(&fw, &ssn, p, n) {
                        Ok(()) => {
                            ssn.allocate(&mut st, p, n);
                            to_bind.push((pod_ref(pod), node.clone(), Charge::for_job(snap, snap.pods[p].job)));
                        }
                        Err(why) => refused.push(format!("pod {pod_name}: {why}")),
                    },
                },
            }
        }
        lost.extend(refused.iter().cloned());
        let adding: BTreeSet<&str> = to_bind.iter().map(|(p, _, _)| p.name.as_str()).collect();
        let plan = if lost.is_empty() || gang_ok(group, &g.pods, ctx.scheduler_name, &adding) {
            ssn.commit(st);
            IntentPlan::Complete(to_bind)
        } else {
            ssn.discard(st);
            IntentPlan::RollBack { bound, lost }
        };
        out.push(Resolution { key, group, id: intent.id.clone(), plan, refused });
    }
    out
}

/// Completes or rolls back every bind intent found in the groups' status: pods of the intent
/// still unbound are bound where the intent says if [`may_bind`] allows it; if some cannot be
/// and the gang would stay below its minimum, the pods bound per the intent are deleted at
/// once. Then the intent is removed. A binding refused by a predicate or a queue bound is
/// reported (Warning Event `BindIntentRefused` and a log line), never written.
///
/// Intents of this process whose bindings failed are recovered at once; others (a previous
/// leader's) once they are older than one period, or at once when they carry no time.
pub(super) async fn recover(
    ctx: &Ctx<'_>,
    intents: &mut Intents,
    overlay: &mut Overlay,
    g: &Gathered,
    is_leader: &Leader,
) -> Recovery {
    let mut out = Recovery::default();
    if is_leader() {
        report_ignored_annotations(ctx, intents, g).await;
    }
    let mut found = Vec::new();
    for pg in &g.pod_groups {
        let Some(intent) = pg.status.as_ref().and_then(|s| s.bind_intent.as_ref()) else { continue };
        if intent.id.as_ref().is_some_and(|id| intents.cleared.contains(id)) {
            continue; // removed by this process; the store has not caught up
        }
        let own = intent.id.as_ref().is_some_and(|id| intents.own_pending.contains(id));
        if !own && young(intent.at.as_deref(), ctx.period) {
            out.blocked.insert(key_of(&pg.metadata));
            continue;
        }
        found.push((key_of(&pg.metadata), pg, intent));
    }
    if found.is_empty() {
        return out;
    }
    let converted = convert::convert(&g.objects(), ctx.scheduler_name);
    let snap = match snapshot::build(&converted.nodes, &converted.queues, &converted.jobs) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "could not build a snapshot for recovery; bind intents wait");
            out.blocked.extend(found.into_iter().map(|(k, _, _)| k));
            return out;
        }
    };
    for Resolution { key, group, id, plan, refused } in resolve(ctx, g, &snap, &converted, found) {
        if !is_leader() {
            out.blocked.insert(key);
            continue;
        }
        if !refused.is_empty() {
            let message = format!("bind intent not followed: {}", refused.join("; "));
            tracing::warn!(namespace = %key.0, group = %key.1, %message, "refusing bindings of a bind intent");
            events::publish(
                ctx.client,
                "drover-scheduler",
                group.as_ref(),
                EventType::Warning,
                "BindIntentRefused",
                &message,
            )
            .await;
        }
        out.wrote = true;
        let resolved = match plan {
            IntentPlan::Complete(to_bind) => {
                if !to_bind.is_empty() {
                    tracing::info!(namespace = %key.0, group = %key.1, pods = to_bind.len(), "completing a bind intent");
                }
                let results = bind_many(ctx, to_bind).await;
                let (ok, errors) = note_binds(overlay, &results);
                out.bound += ok;
                if !errors.is_empty() {
                    tracing::warn!(namespace = %key.0, group = %key.1, ?errors, "recovery could not bind every pod; retrying next cycle");
                }
                errors.is_empty()
            }
            IntentPlan::RollBack { bound, lost } => {
                tracing::warn!(namespace = %key.0, group = %key.1, ?lost, "bind intent cannot be completed; rolling the gang back");
                roll_back(ctx, overlay, bound).await
            }
        };
        if resolved && clear_intent(ctx, overlay, group).await {
            intents.cleared(id.as_deref());
            continue;
        }
        if let Some(id) = &id {
            intents.pending(id);
        }
        out.blocked.insert(key);
    }
    out
}

/// Deletes the pods a gang's intent bound; `false` if some deletion failed.
async fn roll_back(ctx: &Ctx<'_>, overlay: &mut Overlay, bound: Vec<PodRef>) -> bool {
    let client = ctx.client.clone();
    let results: Vec<(PodRef, Result<Removal, String>)> = futures::stream::iter(bound)
        .map(move |pod| {
            let client = client.clone();
            async move {
                let r = api::delete_now(&client, &pod).await;
                (pod, r)
            }
        })
        .buffer_unordered(ctx.concurrency)
        .collect()
        .await;
    let mut all = true;
    for (pod, r) in &results {
        match r {
            Ok(_) => overlay.pod_deleted(pod),
            Err(e) => {
                all = false;
                tracing::warn!(error = %e, "rollback could not delete a pod; retrying next cycle");
            }
        }
    }
    all
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
async fn write_gang(ctx: &Ctx<'_>, plan: GangPlan) -> GangWritten {
    let GangPlan { key, group, pods, id, intent } = plan;
    let mut out = GangWritten { key, id, annotated: None, binds: Vec::new(), cleared: None };
    let written = match api::write_intent(ctx.client, &group, Some(&intent)).await {
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
    out.binds = bind_many(ctx, pods).await;
    if out.binds.iter().all(|(_, _, r)| r.is_ok()) {
        match api::write_intent(ctx.client, &written, None).await {
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
    ctx: &Ctx<'_>,
    intents: &mut Intents,
    overlay: &mut Overlay,
    g: &Gathered,
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
                Some((converted.pods.get(p)?.clone(), snap.nodes.get(n)?.name.clone(), charge.clone()))
            })
            .collect();
        let id = intents.new_id();
        let intent = BindIntent {
            pods: pods.iter().map(|(p, n, _)| (p.name.clone(), n.clone())).collect(),
            id: Some(id.clone()),
            at: Some(jiff::Timestamp::now().to_string()),
        };
        plans.push(GangPlan { key, group: group.clone(), pods, id, intent });
    }
    let gangs_at_once = (ctx.concurrency / 2).max(1);
    let written: Vec<GangWritten> = futures::stream::iter(plans)
        .filter(|_| std::future::ready(is_leader()))
        .map(|plan| write_gang(ctx, plan))
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

fn names(list: &BTreeSet<String>) -> String {
    let mut v: Vec<&str> = list.iter().map(String::as_str).take(3).collect();
    if list.len() > 3 {
        v.push("...");
    }
    v.join(", ")
}

/// Evicts the cycle's victims through the Eviction API and records an Event on each.
/// Returns the number of pods evicted.
pub(super) async fn evict_decisions(
    ctx: &Ctx<'_>,
    overlay: &mut Overlay,
    snap: &Snapshot,
    converted: &Converted,
    evictions: &[(PodId, EvictReason)],
    pipelined: &[(PodId, NodeId)],
) -> usize {
    if evictions.is_empty() {
        return 0;
    }
    // The groups the evictions make room for, by queue.
    let mut waiting: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for &(pod, _) in pipelined {
        let job = &snap.jobs[snap.pods[pod].job];
        waiting.entry(job.queue).or_default().insert(job.key());
    }
    let work: Vec<(PodRef, String, String)> = evictions
        .iter()
        .filter_map(|&(pod, reason)| {
            let r = converted.pods.get(pod)?.clone();
            let job = &snap.jobs[snap.pods[pod].job];
            let queue = &snap.queues[job.queue].name;
            Some(match reason {
                EvictReason::Preempt => {
                    let by = waiting.get(&job.queue).map(names).unwrap_or_default();
                    let by =
                        if by.is_empty() { "higher-priority work".to_string() } else { format!("pod group(s) {by}") };
                    (r, "Preempted".to_string(), format!("Preempted by {by} of higher priority in queue {queue}"))
                }
                EvictReason::Reclaim => {
                    let others: BTreeSet<String> = waiting
                        .iter()
                        .filter(|(q, _)| **q != job.queue)
                        .flat_map(|(_, groups)| groups.iter().cloned())
                        .collect();
                    let by = if others.is_empty() {
                        "another queue".to_string()
                    } else {
                        format!("pod group(s) {}", names(&others))
                    };
                    (
                        r,
                        "Reclaimed".to_string(),
                        format!("Reclaimed from queue {queue}, which runs over its deserved quota, for {by}"),
                    )
                }
                EvictReason::Consolidate => {
                    let by: BTreeSet<String> = waiting.values().flatten().cloned().collect();
                    let by = if by.is_empty() { "a waiting gang".to_string() } else { format!("pod group(s) {}", names(&by)) };
                    (
                        r,
                        "Consolidated".to_string(),
                        format!("Moved by consolidation: its replacement fits another node, and {by} fits the space it frees"),
                    )
                }
            })
        })
        .collect();
    let client = ctx.client.clone();
    let component = ctx.scheduler_name.to_string();
    let results: Vec<(PodRef, Result<Removal, String>)> = futures::stream::iter(work)
        .map(move |(pod, reason, message)| {
            let client = client.clone();
            let component = component.clone();
            async move {
                let r = api::evict(&client, &pod).await;
                if r == Ok(Removal::Done) {
                    api::pod_event(&client, &component, &pod, &reason, &message).await;
                }
                (pod, r)
            }
        })
        .buffer_unordered(ctx.concurrency)
        .collect()
        .await;
    let mut evicted = 0;
    for (pod, r) in results {
        match r {
            Ok(Removal::Done) => {
                overlay.pod_deleting(&pod);
                evicted += 1;
            }
            Ok(Removal::Gone) => overlay.pod_deleted(&pod),
            Err(e) => tracing::warn!(error = %e, "eviction failed; retrying next cycle"),
        }
    }
    evicted
}
