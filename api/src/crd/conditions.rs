//! Setting a status condition the Kubernetes way, shared by every component that writes
//! Drover's statuses.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Sets condition `type_` to `status` with `reason` and `message`, keeping its transition
/// time unless its status changes. Returns whether the status (True/False) or reason changed.
pub fn set(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
    generation: Option<i64>,
) -> bool {
    let status = if status { "True" } else { "False" };
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        let changed = c.status != status || c.reason != reason;
        if c.status != status {
            c.last_transition_time = Time(now);
        }
        c.status = status.into();
        c.reason = reason.into();
        c.message = message.into();
        c.observed_generation = generation;
        changed
    } else {
        conds.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(now),
            observed_generation: generation,
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_transition_time_while_the_status_holds() {
        let t0 = Timestamp::UNIX_EPOCH;
        let t1 = Timestamp::from_second(60).unwrap();
        let mut conds = Vec::new();
        assert!(set(&mut conds, "Valid", true, "Ok", "", t0, Some(1)));
        assert!(!set(&mut conds, "Valid", true, "Ok", "new message", t1, Some(2)));
        assert_eq!((conds[0].last_transition_time.0, conds[0].message.as_str()), (t0, "new message"));
        assert!(set(&mut conds, "Valid", false, "Broken", "", t1, Some(2)));
        assert_eq!((conds.len(), conds[0].last_transition_time.0), (1, t1));
    }
}
