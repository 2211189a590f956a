//! The scheduler runs cycles only while the charge guard holds: the admission policy that keeps
//! each bound pod's charge record as its binding wrote it ([`drover_api::charge_guard`]).
//! Without it a tenant could rewrite what its pods are charged to, so the leader checks the
//! policy and its binding when it starts leading and again every [`RECHECK`] (every
//! [`RECHECK_MISSING`] while they do not hold), and while they are missing or weakened it
//! schedules nothing and says why: in its log, and on the waiting pods and the Queues
//! (`halted.rs`).

use std::time::{Duration, Instant};

use drover_api::charge_guard::{self, NAME};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::{Api, Client};

/// How long a check that found the guard holding stands.
pub(super) const RECHECK: Duration = Duration::from_secs(30);
/// How long a check that found it missing stands: nothing is scheduled meanwhile.
pub(super) const RECHECK_MISSING: Duration = Duration::from_secs(5);

/// The last check of the guard.
#[derive(Debug, Default)]
pub(super) struct Guard {
    /// When it was checked and what it found (`Err`: why it does not hold).
    last: Option<(Instant, Result<(), String>)>,
}

impl Guard {
    /// Forgets the last check, so the next [`Guard::holds`] reads the cluster (on leading again).
    pub(super) fn forget(&mut self) {
        self.last = None;
    }

    /// Why the guard does not hold, as the last check found it, for the pods and Queues that
    /// wait (`halted.rs`); `None` while it holds or before the first check.
    pub(super) fn why_not(&self) -> Option<String> {
        match &self.last {
            Some((_, Err(why))) => Some(explained(why)),
            _ => None,
        }
    }

    /// Whether the guard holds, as read from the API server at most [`RECHECK`] (or
    /// [`RECHECK_MISSING`]) ago. A change of the answer is logged: an error saying why the
    /// scheduler does not schedule.
    pub(super) async fn holds(&mut self, client: &Client) -> bool {
        if let Some((at, found)) = &self.last {
            let stands = if found.is_ok() { RECHECK } else { RECHECK_MISSING };
            if at.elapsed() < stands {
                return found.is_ok();
            }
        }
        let found = read(client).await;
        let changed = self.last.as_ref().is_none_or(|(_, before)| *before != found);
        if changed {
            match &found {
                Ok(()) => tracing::info!(policy = NAME, "the charge guard holds; scheduling"),
                Err(why) => tracing::error!(policy = NAME, "not scheduling: {}", explained(why)),
            }
        }
        let holds = found.is_ok();
        self.last = Some((Instant::now(), found));
        holds
    }
}

/// Why nothing is scheduled, for people: what the check found and what to do.
fn explained(why: &str) -> String {
    format!(
        "{why}; without it tenants could rewrite what their bound pods are charged to \
         (apply it with `drover manifests | kubectl apply --server-side -f -`, or install the chart)"
    )
}

/// The guard as the cluster holds it, checked against the chart's.
async fn read(client: &Client) -> Result<(), String> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policy =
        policies.get_opt(NAME).await.map_err(|e| format!("reading the ValidatingAdmissionPolicy {NAME}: {e}"))?;
    let binding = bindings
        .get_opt(NAME)
        .await
        .map_err(|e| format!("reading the ValidatingAdmissionPolicyBinding {NAME}: {e}"))?;
    charge_guard::check(policy.as_ref(), binding.as_ref())
}
