//! An elastic PodGroup (`spec.elasticity`) as the core reads it: the sizes it may be resized
//! to, or, while the scheduler's last resize (`status.resize`) is still to be applied by its
//! controller, a group that is restarting and must neither start nor be resized again.

use drover_api::crd::podgroup::PodGroup;
use drover_scheduler::snapshot::Resize;

/// What the scheduler may do with a group's size this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Elastic {
    /// Not elastic: its size is its spec's.
    Fixed,
    /// Elastic and settled at its `minMember`: the core may resize it within these bounds.
    Resizable(Resize),
    /// Resized, and its controller has not restarted it yet (its `minMember` is still the size
    /// it was resized from): its pending pods, made for the old size, are left out so that the
    /// gang it is leaving cannot start; its bound pods stay charged until they end.
    Restarting,
}

/// The elastic state of `group`.
pub(super) fn of(group: &PodGroup) -> Elastic {
    let Some(bounds) = &group.spec.elasticity else { return Elastic::Fixed };
    let decided = group.status.as_ref().and_then(|s| s.resize.as_ref());
    if decided.is_some_and(|r| r.from == group.spec.min_member && r.replicas != r.from) {
        return Elastic::Restarting;
    }
    let floor = bounds.min_member.max(1);
    Elastic::Resizable(Resize { floor, ceiling: bounds.max_member.max(floor) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_api::crd::elasticity::{GroupElasticity, ResizeStatus};
    use drover_api::crd::podgroup::{PodGroupSpec, PodGroupStatus};

    fn group(min_member: u32, resize: Option<(u32, u32)>) -> PodGroup {
        let elasticity = Some(GroupElasticity { min_member: 1, max_member: 16 });
        let mut g = PodGroup::new("g", PodGroupSpec { min_member, elasticity, ..PodGroupSpec::default() });
        let resize = resize.map(|(from, replicas)| ResizeStatus { from, replicas, ..ResizeStatus::default() });
        g.status = Some(PodGroupStatus { resize, ..PodGroupStatus::default() });
        g
    }

    #[test]
    fn a_group_restarts_until_its_controller_moves_it_off_the_size_it_was_resized_from() {
        let resizable = Elastic::Resizable(Resize { floor: 1, ceiling: 16 });
        assert_eq!(of(&group(16, None)), resizable, "never resized");
        assert_eq!(of(&group(16, Some((16, 4)))), Elastic::Restarting, "decided, not applied");
        assert_eq!(of(&group(4, Some((16, 4)))), resizable, "applied");
        assert_eq!(of(&group(8, Some((16, 4)))), resizable, "superseded by its controller (replicas lowered)");
        let mut fixed = group(16, Some((16, 4)));
        fixed.spec.elasticity = None;
        assert_eq!(of(&fixed), Elastic::Fixed, "a group that no longer asks is not held back");
    }
}
