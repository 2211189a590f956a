//! The free capacity of one resource over time, as a forecast plans it: the running pods hold
//! it until their ends, and each waiting gang, in serving order, takes the earliest time from
//! which its need stays free for as long as it runs. A gang later in the order may so take a
//! gap that an earlier one cannot use, but never one that delays an earlier one: backfill as
//! the cycle does it, with no gang passed over for ever.

/// Free capacity from each step's time until the next step's; the last step lasts for ever.
pub struct Profile {
    /// (from, free), `from` strictly increasing.
    steps: Vec<(i64, i64)>,
    capacity: i64,
    /// The learned ends planned so far, (time, namespace number), by time.
    learned: Vec<(i64, u32)>,
    /// The first time after the start of the plan at which a running pod ends.
    next_end: Option<i64>,
}

/// What a running job holds of the resource: how much, until when (none: no known end), and
/// the namespace whose learned run times say when, if learned.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    /// The amount held.
    pub amount: i64,
    /// When it is free again.
    pub until: Option<i64>,
    /// The namespace number of the learned run times the end rests on.
    pub learned: Option<u32>,
}

impl Profile {
    /// The plan from `now` of a resource of `capacity`, of which the running pods hold `holds`.
    pub fn new(capacity: i64, now: i64, holds: &[Hold]) -> Profile {
        let mut ends: Vec<(i64, i64)> = holds.iter().filter_map(|h| h.until.map(|t| (t.max(now), h.amount))).collect();
        ends.sort_unstable();
        let mut free = capacity - holds.iter().map(|h| h.amount).sum::<i64>();
        let mut steps = vec![(now, free)];
        for (t, amount) in ends {
            free += amount;
            match steps.last_mut() {
                Some(last) if last.0 == t => last.1 = free,
                _ => steps.push((t, free)),
            }
        }
        let mut learned: Vec<(i64, u32)> =
            holds.iter().filter_map(|h| h.until.zip(h.learned).map(|(t, ns)| (t.max(now), ns))).collect();
        learned.sort_unstable();
        let next_end = steps.get(1).map(|s| s.0);
        Profile { steps, capacity, learned, next_end }
    }

    /// The first time after the start of the plan at which a running pod ends, if one does.
    pub fn next_end(&self) -> Option<i64> {
        self.next_end
    }

    /// The namespaces of the learned ends planned at or before `t`.
    pub fn learned_until(&self, t: i64) -> impl Iterator<Item = u32> + '_ {
        self.learned.iter().take_while(move |&&(end, _)| end <= t).map(|&(_, ns)| ns)
    }

    /// Plans a gang that needs `need` for `run` seconds (none: for ever) at the earliest time,
    /// not before `at_least`, from which that much stays free for the whole run, and holds it
    /// then (its end learned from `learned`'s namespace, if learned). None, and nothing held,
    /// when that much is never free for that long.
    pub fn place(&mut self, need: i64, at_least: i64, run: Option<i64>, learned: Option<u32>) -> Option<i64> {
        if need > self.capacity {
            return None;
        }
        let mut i = self.steps.partition_point(|s| s.0 <= at_least).max(1) - 1;
        let start = loop {
            let start = self.steps[i].0.max(at_least);
            let end = run.map(|r| start.saturating_add(r));
            let mut window = self.steps[i..].iter().take_while(|s| end.is_none_or(|e| s.0 < e));
            match window.position(|s| s.1 < need) {
                None => break start,
                Some(short) => {
                    i += short + 1;
                    if i == self.steps.len() {
                        return None;
                    }
                }
            }
        };
        let end = run.map(|r| start.saturating_add(r));
        let from = self.split(start);
        let to = end.map_or(self.steps.len(), |e| self.split(e));
        for step in &mut self.steps[from..to] {
            step.1 -= need;
        }
        if let Some((e, ns)) = end.zip(learned) {
            let at = self.learned.partition_point(|&(t, _)| t <= e);
            self.learned.insert(at, (e, ns));
        }
        Some(start)
    }

    /// The index of the step that starts at `t`, made if none does (`t` is not before the
    /// plan's start).
    fn split(&mut self, t: i64) -> usize {
        let at = self.steps.partition_point(|s| s.0 < t);
        if self.steps.get(at).is_some_and(|s| s.0 == t) {
            return at;
        }
        let free = self.steps[at - 1].1;
        self.steps.insert(at, (t, free));
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(amount: i64, until: i64) -> Hold {
        Hold { amount, until: Some(until), learned: None }
    }

    #[test]
    fn a_gang_starts_when_its_need_is_free_for_its_whole_run() {
        let mut p = Profile::new(8, 0, &[hold(4, 100), hold(4, 300)]);
        assert_eq!(p.place(8, 0, Some(50), None), Some(300), "all eight are free at 300");
        assert_eq!(p.place(4, 0, Some(200), None), Some(100), "a later gang fills the gap before it");
        assert_eq!(p.place(4, 0, Some(300), None), Some(350), "a gang too long for the gap waits for the first");
        assert_eq!(p.place(9, 0, Some(1), None), None, "more than the capacity never starts");
    }

    #[test]
    fn a_gang_with_no_known_end_holds_its_share_for_ever() {
        let mut p = Profile::new(8, 0, &[Hold { amount: 4, until: None, learned: None }, hold(4, 100)]);
        assert_eq!(p.place(4, 0, None, None), Some(100));
        assert_eq!(p.place(1, 0, Some(1), None), None, "nothing is ever free again");
        assert_eq!(p.next_end(), Some(100));
    }

    #[test]
    fn the_learned_ends_a_start_follows_are_those_planned_before_it() {
        let mut p = Profile::new(8, 0, &[Hold { amount: 8, until: Some(100), learned: Some(3) }]);
        assert_eq!(p.place(8, 0, Some(100), Some(5)), Some(100));
        assert_eq!(p.place(8, 0, Some(10), None), Some(200));
        assert_eq!(p.learned_until(150).collect::<Vec<_>>(), [3]);
        assert_eq!(p.learned_until(200).collect::<Vec<_>>(), [3, 5]);
    }
}
