//! Each rule's scenarios must fail without the rule: the same scenario, run with the plugin
//! that holds the rule taken out of the default configuration, must miss its expectations.
//! A scenario that passes either way would not show the rule at all.

use std::path::Path;

use drover_scheduler::config::{ActionName, ConfigOverrides, SchedulerConfig, TimeBasedArgs};
use drover_sim::{check, report, run, scenario};

/// Whether the scenario meets its expectations with the plugin `without` (by name) left out.
fn holds_without(file: &str, without: &str) -> bool {
    holds_changed(file, |config| {
        let before = config.plugins.len();
        config.plugins.retain(|p| p.name() != without);
        assert_eq!(config.plugins.len() + 1, before, "the default configuration enables {without}");
    })
}

/// Whether the scenario meets its expectations with its configuration changed by `change`.
fn holds_changed(file: &str, change: impl FnOnce(&mut SchedulerConfig)) -> bool {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(file);
    let s = scenario::load(&path).expect("the scenario is valid");
    let mut config = SchedulerConfig::default();
    config.apply(&s.config);
    change(&mut config);
    let result = run::simulate(&s, &config, s.cycles).expect("validated scenarios build");
    check::mismatches(&s, &report::report(&s.name, &result)).is_empty()
}

#[test]
fn running_limit_scenarios_need_the_runninglimits_plugin() {
    for file in ["running-limit-jobs.yaml", "running-limit-pods.yaml", "running-limit-priority-swaps-jobs.yaml"] {
        assert!(!holds_without(file, "runninglimits"), "{file} holds without running limits");
    }
}

#[test]
fn min_runtime_scenarios_need_the_minruntime_plugin() {
    for file in ["min-runtime-protects-work-just-started.yaml", "min-runtime-preempts-the-job-past-it.yaml"] {
        assert!(!holds_without(file, "minruntime"), "{file} holds without minimum run times");
    }
}

#[test]
fn the_quota_decrease_scenario_needs_the_fairshare_plugin() {
    assert!(!holds_without("quota-decrease-is-reclaimed-once.yaml", "fairshare"), "it holds without fair shares");
}

#[test]
fn the_time_based_scenario_needs_time_based_fair_share() {
    let file = "time-based-fair-share-favours-the-queue-that-used-less.yaml";
    assert!(holds_changed(file, |_| {}), "it holds as written");
    let off = ConfigOverrides { time_based: Some(TimeBasedArgs::default()), ..ConfigOverrides::default() };
    assert!(!holds_changed(file, |config| config.apply(&off)), "it holds without time-based fair share");
}

#[test]
fn the_shrink_scenario_needs_the_resize_action() {
    let file = "elastic-shrinks-by-half.yaml";
    assert!(holds_changed(file, |_| {}), "it holds as written");
    let without = |config: &mut SchedulerConfig| config.actions.retain(|a| *a != ActionName::Resize);
    assert!(!holds_changed(file, without), "it holds without the resize action");
}
