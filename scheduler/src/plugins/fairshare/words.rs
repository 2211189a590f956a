//! The words for fair share's rules: limits, fair shares, deserved quotas and reclaim.

use std::fmt;

use crate::why::{AdviceFacts, Ending, Rule, Why};

/// Fair share's words (see [`crate::why::Words`]).
pub(crate) fn words(why: &Why, s: &str, f: &mut fmt::Formatter<'_>) -> Option<Result<Ending, fmt::Error>> {
    let written = match why.rule {
        Rule::Limit => write!(f, "queue {s} would exceed its limit"),
        Rule::LimitForGang => write!(f, "queue {s} cannot hold the gang's minimum within its limit"),
        Rule::FairShare => write!(f, "queue {s} would exceed its fair share"),
        Rule::UsableShare => write!(
            f,
            "queue {s} would exceed its fair share, which counts only capacity its waiting gangs can start on"
        ),
        Rule::OverFairShare => write!(f, "queue {s} is over its fair share"),
        Rule::NonPreemptibleDeserved => write!(f, "non-preemptible work may only use queue {s}'s deserved quota"),
        Rule::NonPreemptibleGangDeserved => {
            write!(f, "non-preemptible work may only use queue {s}'s deserved quota, which is smaller than the gang")
        }
        Rule::ClusterCapacity => write!(f, "the gang needs more than the whole cluster has"),
        Rule::SameQueue => write!(f, "queue {s} is on the reclaimer's own path"),
        Rule::OutsideQuota => write!(f, "the request uses no resource that queue quotas cover"),
        Rule::NotAboveDeserved => write!(f, "queue {s} is not above its deserved quota in what the request needs"),
        Rule::OverDeserved => write!(f, "queue {s} would go over its deserved quota"),
        Rule::ElasticBeyondFairShare => {
            write!(f, "elastic pods take only from queues above their fair share, and queue {s} is not above it")
        }
        Rule::NotReclaimable => write!(f, "queue {s} is not reclaimable"),
        _ => return None,
    };
    Some(Ending::figures(written))
}

/// Fair share's advice on its refusals (see [`crate::why::Advice`]): which setting to raise,
/// or what to wait for.
pub(crate) fn advice(a: &AdviceFacts) -> Option<String> {
    let (snap, e) = (a.snap, a.blocker.excess?);
    let (r, amount, freed) = (&snap.resources[e.resource], snap.amount(e.resource, e.amount), e.amount - e.bound);
    let (q, limit, deserved) = (a.queue, &a.limit, &a.deserved);
    Some(match a.blocker.rule {
        Rule::Limit | Rule::LimitForGang if freed > e.amount - a.need[e.resource] => {
            format!("raise {limit} to at least {amount}: the request alone exceeds it")
        }
        Rule::Limit | Rule::LimitForGang => format!(
            "raise {limit} to at least {amount}, or wait until {} of {r} is freed in queue {q}",
            snap.amount(e.resource, freed)
        ),
        Rule::UsableShare => format!(
            "wait until free capacity that one of queue {q}'s waiting gangs can start on brings its fair share of {r} to {amount}"
        ),
        Rule::FairShare | Rule::OverFairShare => format!(
            "wait until queue {q}'s fair share of {r} reaches {amount} (other queues' demand falls) or raise {deserved}"
        ),
        Rule::NonPreemptibleDeserved | Rule::NonPreemptibleGangDeserved => {
            format!("use a preemptible priority class or raise {deserved} to {amount}")
        }
        Rule::ClusterCapacity => format!("the gang needs more {r} than the cluster has: shrink it"),
        _ => return None,
    })
}
