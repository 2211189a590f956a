//! Each rule's scenarios must fail without the rule: the same scenario, run with the plugin
//! that holds the rule taken out of the default configuration, must miss its expectations.
//! A scenario that passes either way would not show the rule at all.

use std::path::Path;

use drover_scheduler::config::SchedulerConfig;
use drover_sim::{check, report, run, scenario};

/// Whether the scenario meets its expectations with the plugin `without` (by name) left out.
fn holds_without(file: &str, without: &str) -> bool {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(file);
    let s = scenario::load(&path).expect("the scenario is valid");
    let mut config = SchedulerConfig::default();
    config.apply(&s.config);
    let before = config.plugins.len();
    config.plugins.retain(|p| p.name() != without);
    assert_eq!(config.plugins.len() + 1, before, "the default configuration enables {without}");
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
