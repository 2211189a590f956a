//! Every queue's demand and fair share: what its subtree asks (capped by its limit), and the
//! cluster's capacity divided down the tree by deserved quota, over-quota weight and, with
//! time-based fair share, past usage (see [`crate::share_division`]).

use crate::config::{FairShareArgs, TimeBasedArgs};
use crate::ids::{ti_vec, TiSlice, TiVec};
use crate::res::{Res, UNLIMITED};
use crate::session::Session;
use crate::share_division::{divide, Claim, PastUsage};
use crate::snapshot::{JobId, QueueId, Snapshot, ROOT};

/// Computes demand and fair share of every queue into the session; `past` is every queue's
/// normalized past usage when time-based fair share is on ([`past_usage`]).
pub(super) fn compute_shares(
    ssn: &mut Session,
    jobs_by_queue: &TiSlice<QueueId, Vec<JobId>>,
    args: &FairShareArgs,
    past: Option<&TiSlice<QueueId, Vec<f64>>>,
) {
    let snap = ssn.snap;
    let n = snap.resources.len();
    let mut demand = ti_vec![Res::zero(n); snap.queues.len()];
    for (q, jobs) in jobs_by_queue.iter_enumerated() {
        for &j in jobs {
            for t in &snap.jobs[j].tasks {
                demand[q].add(&t.requests.times(t.pods.len() as i64));
            }
        }
    }
    fill_demand(snap, ROOT, &mut demand);
    let mut fair = ti_vec![Res::zero(n); snap.queues.len()];
    fair[ROOT] = snap.capacity.clone();
    let mut stack = vec![ROOT];
    while let Some(p) = stack.pop() {
        let children = &snap.queues[p].children;
        for r in 0..n {
            let claims: Vec<Claim> = children
                .iter()
                .map(|&c| Claim {
                    deserved: snap.queues[c].deserved[r],
                    demand: demand[c][r],
                    weight: snap.queues[c].over_quota_weight,
                })
                .collect();
            let usage: Vec<f64> = past.map(|u| children.iter().map(|&c| u[c][r]).collect()).unwrap_or_default();
            let past = past.is_some().then_some(PastUsage { k_value: args.time_based.k_value, usage: &usage });
            for (&c, share) in children.iter().zip(divide(fair[p][r], &claims, args.mode, past)) {
                fair[c][r] = share;
            }
        }
        stack.extend(children.iter().copied());
    }
    // The pod count is node capacity, not something queues share: no fair-share bound on it.
    for share in &mut fair {
        share[snap.pods_resource] = UNLIMITED;
    }
    ssn.demand = demand;
    ssn.fair_share = fair;
}

/// With time-based fair share on, per queue and resource, its past usage as a part of what
/// the cluster's capacity could have given over the remembered time (0 where the cluster has
/// none of the resource); `None` when it is off.
pub(super) fn past_usage(snap: &Snapshot, time_based: TimeBasedArgs) -> Option<TiVec<QueueId, Vec<f64>>> {
    if !time_based.enabled {
        return None;
    }
    let memory = crate::usage::memory_seconds(&time_based);
    let part = |q: QueueId, r: usize| {
        let used = snap.past_usage.get(q).and_then(|u| u.get(r)).copied().unwrap_or(0.0);
        let could = snap.capacity[r] as f64 * memory;
        if could > 0.0 && used.is_finite() {
            (used / could).max(0.0)
        } else {
            0.0
        }
    };
    Some(snap.queues.keys().map(|q| (0..snap.resources.len()).map(|r| part(q, r)).collect()).collect())
}

/// Sums the demand of `q`'s subtree into `demand[q]`, each capped by the queue's limit.
fn fill_demand(snap: &Snapshot, q: QueueId, demand: &mut TiSlice<QueueId, Res>) {
    for &c in &snap.queues[q].children {
        fill_demand(snap, c, demand);
        let child = demand[c].clone();
        demand[q].add(&child);
    }
    let limit = &snap.queues[q].limit;
    for r in 0..limit.len() {
        demand[q][r] = demand[q][r].min(limit[r]);
    }
}
