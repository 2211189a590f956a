//! A cycle's answers from the clock hold until the time its snapshot's clock notes
//! (`Clock::holds_until`), which the Kubernetes scheduler trusts to skip cycles that would
//! repeat the last. On every bundled scenario, the first cycle comes out the same (decisions,
//! reasons, forecasts, what would let each job start) one second before that time, or a
//! million seconds later when nothing was noted: a rule that read the time without noting it
//! would change its answer sooner. Where a rule waits for a time (a minimum run time), the
//! cycle at the noted time decides otherwise: the note is not later than the change.

mod support;

use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::explain::to_start;
use drover_scheduler::snapshot::{self, Snapshot};
use drover_sim::scenario::{self, Scenario};

fn snapshot_at(s: &Scenario, now: i64) -> Snapshot {
    let mut snap = snapshot::build_with_topologies(&s.nodes, &s.queues, &s.topologies, &s.jobs)
        .expect("bundled scenarios build")
        .at(now);
    snap.past_usage = s.usage.for_snapshot(&snap);
    snap
}

fn config(s: &Scenario) -> SchedulerConfig {
    let mut config = SchedulerConfig::default();
    config.apply(&s.config);
    config
}

/// Everything a cycle at `now` tells, as text; and the time its answers hold until.
fn cycle_at(s: &Scenario, now: i64) -> (String, i64) {
    let snap = snapshot_at(s, now);
    let outcome = run_cycle(&snap, &config(s));
    let starts: Vec<Option<String>> = snap.jobs.iter_enumerated().map(|(j, _)| to_start(&snap, &outcome, j)).collect();
    (format!("{outcome:?}\n{starts:?}"), snap.clock.holds_until())
}

#[test]
fn every_scenario_decides_alike_until_the_noted_time() {
    let mut problems = Vec::new();
    for path in support::scenario_files() {
        let s = scenario::load(&path).expect("bundled scenarios load");
        let (first, holds_until) = cycle_at(&s, s.now);
        assert!(holds_until > s.now, "{}: an answer cannot change before the cycle's own time", s.name);
        let later = if holds_until == i64::MAX { s.now + 1_000_000 } else { holds_until - 1 };
        if cycle_at(&s, later).0 != first {
            problems.push(format!("{}: noted {holds_until}, yet the cycle at {later} differs", s.name));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn a_minimum_run_time_is_noted_as_the_time_it_ends() {
    let path = support::scenario_files()
        .into_iter()
        .find(|p| p.ends_with("min-runtime-protects-work-just-started.yaml"))
        .expect("the scenario is bundled");
    let s = scenario::load(&path).expect("loads");
    let (first, holds_until) = cycle_at(&s, s.now);
    assert_eq!(holds_until, 1540, "job b's minimum run time ends at 940 + 600");
    let snap = snapshot_at(&s, holds_until);
    let outcome = run_cycle(&snap, &config(&s));
    assert!(!outcome.decisions.evictions.is_empty(), "at 1540 job b may be reclaimed, and is");
    assert_ne!(cycle_at(&s, holds_until).0, first);
}
