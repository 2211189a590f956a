//! The `shortestfirst` plugin (off by default): within a priority, the job declaring the
//! least service (run time x GPUs) starts first, jobs declaring no run time come last, and
//! a job that has waited `agingSeconds` goes before all of these. One 8-GPU node, four
//! pending 8-GPU jobs, so the job that starts is the first in job order.

use drover_scheduler::config::{PluginConfig, SchedulerConfig, ShortestFirstArgs};
use drover_sim::report::{self, Report};
use drover_sim::{run, scenario};

const CLUSTER: &str = r#"
name: shortest-first
now: 100000
nodes: [{name: n1, allocatable: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "8"}}]
queues: [{name: q}]
jobs:
  - {name: old, queue: q, createdAt: 0, duration: 50000,
     tasks: [{name: w, replicas: 1, requests: {nvidia.com/gpu: "8"}}]}
  - {name: undeclared, queue: q, createdAt: 98000,
     tasks: [{name: w, replicas: 1, requests: {nvidia.com/gpu: "8"}}]}
  - {name: long, queue: q, createdAt: 99000, duration: 36000,
     tasks: [{name: w, replicas: 1, requests: {nvidia.com/gpu: "8"}}]}
  - {name: short-wide, queue: q, createdAt: 99500, duration: 600,
     tasks: [{name: w, replicas: 2, requests: {nvidia.com/gpu: "4"}}]}
"#;

/// The job that runs after one cycle, with `aging` (seconds) or without the plugin.
fn started(aging: Option<u32>, drop: &[&str]) -> String {
    let mut s = scenario::parse(CLUSTER, "shortest-first.yaml").expect("the scenario parses");
    s.jobs.retain(|j| !drop.contains(&j.name.as_str()));
    let mut config = SchedulerConfig::default();
    if let Some(aging_seconds) = aging {
        config.plugins.insert(1, PluginConfig::Shortestfirst(ShortestFirstArgs { aging_seconds }));
    }
    let report: Report = report::report(&s.name, &run::simulate(&s, &config, 1).expect("it runs"));
    let running: Vec<&String> = report.jobs.iter().filter(|(_, j)| j.running > 0).map(|(k, _)| k).collect();
    assert_eq!(running.len(), 1, "one job fills the node: {running:?}");
    running[0].trim_start_matches("default/").to_string()
}

#[test]
fn without_the_plugin_jobs_start_in_submission_order() {
    assert_eq!(started(None, &[]), "old");
}

#[test]
fn a_job_that_waited_past_aging_goes_first() {
    assert_eq!(started(Some(86_400), &[]), "old");
}

#[test]
fn the_least_declared_service_goes_first_before_aging() {
    // short-wide declares 600 s x 8 GPUs, long 36,000 s x 8 GPUs.
    assert_eq!(started(Some(200_000), &[]), "short-wide");
}

#[test]
fn a_job_declaring_no_run_time_comes_after_those_that_do() {
    assert_eq!(started(Some(200_000), &["old", "long", "short-wide"]), "undeclared");
    assert_eq!(started(Some(200_000), &["short-wide"]), "long", "undeclared is older than long");
}

#[test]
fn the_bundled_shortest_first_configuration_is_the_default_plus_the_plugin() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/scheduler-shortest-first.yaml");
    let text = std::fs::read_to_string(path).expect("the file is bundled");
    let bundled = SchedulerConfig::from_yaml(&text).expect("it is a valid configuration");
    let mut expected = SchedulerConfig::default();
    expected.plugins.insert(1, PluginConfig::Shortestfirst(ShortestFirstArgs::default()));
    assert_eq!(bundled, expected, "config/scheduler-shortest-first.yaml drifted from config/scheduler.yaml");
}
