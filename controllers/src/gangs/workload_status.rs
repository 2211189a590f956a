//! Reports Drover's scheduling of a Workload-API gang where that API expects it: the
//! `PodGroupScheduled` condition of the `scheduling.k8s.io/v1alpha2` PodGroup, from the
//! Drover PodGroup made from it (True once the gang runs; False, reason `Unschedulable`, with
//! Drover's reason, while it waits for one).

use std::future::Future;
use std::sync::Arc;

use drover_api::crd::conditions;
use drover_api::crd::podgroup::{PodGroup, PodGroupPhase, UNSCHEDULABLE};
use drover_kubeutil::watch_backoff::watch_backoff;
use futures::StreamExt;
use k8s_openapi::api::scheduling::v1alpha2::{PodGroup as K8sPodGroup, PodGroupStatus as K8sStatus};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{trigger_with, Action};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};

use crate::queues::runner::{changes, digest, drive, shutdown_signal, Context, Retries, Triggers};
use crate::queues::Error;

use super::workload::SOURCE;
use super::SOURCE_LABEL;

/// The condition type the Workload API reads.
pub const SCHEDULED: &str = "PodGroupScheduled";

struct Ctx {
    client: Client,
    retries: Retries,
}

impl Context for Ctx {
    fn retries(&self) -> &Retries {
        &self.retries
    }
}

/// Runs the status mirror until `shutdown` resolves.
pub async fn run_workload_status(
    client: Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shutdown = shutdown_signal(shutdown);
    let (groups, writer) = reflector::store::<PodGroup>();
    let wc = watcher::Config::default().labels(&format!("{SOURCE_LABEL}={SOURCE}"));
    let events =
        reflector::reflector(writer, watcher(Api::<PodGroup>::all(client.clone()), wc).backoff(watch_backoff()));
    let triggers: Triggers<PodGroup> =
        vec![trigger_with(changes(events, |g: &PodGroup| digest(&g.status)), |g: PodGroup| {
            Some(ObjectRef::from_obj(&g))
        })
        .boxed()];
    let ctx = Arc::new(Ctx { client, retries: Retries::default() });
    drive("workload-status", groups, triggers, reconcile, ctx, shutdown).await;
    Ok(())
}

/// The condition the upstream PodGroup should carry: (status, reason, message), or `None`
/// while Drover has not decided anything.
pub fn wanted(group: &PodGroup) -> Option<(bool, String, String)> {
    let status = group.status.as_ref()?;
    if matches!(status.phase, PodGroupPhase::Running | PodGroupPhase::Completed) {
        return Some((true, "Scheduled".into(), format!("Drover bound the gang (PodGroup {})", group.name_any())));
    }
    let waiting = status.conditions.iter().find(|c| c.type_ == UNSCHEDULABLE && c.status == "True")?;
    Some((false, UNSCHEDULABLE.into(), format!("{} ({}: {})", waiting.message, group.name_any(), waiting.reason)))
}

async fn reconcile(group: Arc<PodGroup>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(want) = wanted(&group) else { return Ok(Action::await_change()) };
    let upstream = group.owner_references().iter().find(|r| {
        r.kind == K8sPodGroup::kind(&()) && r.api_version == K8sPodGroup::api_version(&()) && r.controller == Some(true)
    });
    let Some(upstream) = upstream else { return Ok(Action::await_change()) };
    let api: Api<K8sPodGroup> = Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    let Some(mut live) = api.get_opt(&upstream.name).await? else { return Ok(Action::await_change()) };
    if live.uid().as_deref() != Some(upstream.uid.as_str()) {
        return Ok(Action::await_change());
    }
    let mut status = live.status.take().unwrap_or_else(K8sStatus::default);
    let mut conds = status.conditions.take().unwrap_or_default();
    let before = conds.clone();
    let (ok, reason, message) = want;
    conditions::set(&mut conds, SCHEDULED, ok, &reason, &message, jiff::Timestamp::now(), live.metadata.generation);
    if conds == before {
        return Ok(Action::await_change());
    }
    status.conditions = Some(conds);
    live.status = Some(status);
    // The resourceVersion read above makes this write fail on a concurrent change (retried).
    api.replace_status(&live.name_any(), &PostParams::default(), &live).await?;
    Ok(Action::await_change())
}
