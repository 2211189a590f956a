//! The words for fair share's rules: limits, fair shares, deserved quotas and reclaim.

use std::fmt;

use crate::why::{Ending, Rule, Why};

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
