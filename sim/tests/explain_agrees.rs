//! `drover explain` answers with the core: for every scenario under `scenarios/`, explaining
//! each job on the snapshot the last cycle started from gives the verdict and reason the
//! simulator's report gives. And the answer follows the configuration: explained without the
//! fair-share plugin, a job the fair share holds back gets another answer.

mod support;

use std::path::Path;

use drover_scheduler::config::{PluginConfig, SchedulerConfig};
use drover_scheduler::explain::{explain, Verdict};
use drover_scheduler::ids::JobId;
use drover_sim::{report, run, scenario};

/// The scenario's configuration and its run.
fn run(path: &Path) -> (SchedulerConfig, run::SimResult, report::Report) {
    let s = scenario::load(path).expect("bundled scenarios load");
    let mut config = SchedulerConfig::default();
    config.apply(&s.config);
    let result = run::simulate(&s, &config, s.cycles).expect("bundled scenarios build");
    let rep = report::report(&s.name, &result);
    (config, result, rep)
}

#[test]
fn explain_agrees_with_the_scheduler_on_every_job_of_every_scenario() {
    let mut disagreements = Vec::new();
    let mut waiting = 0;
    for path in support::scenario_files() {
        let (config, result, rep) = run(&path);
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for (j, job) in result.snapshot.jobs.iter_enumerated() {
            let reported = &rep.jobs[&job.key()];
            let e = explain(&result.snapshot, &config, j);
            let reason = e.reason.clone().unwrap_or_default();
            let verdict_agrees = match e.verdict {
                Verdict::Waiting => reported.phase != "Running",
                Verdict::Starting | Verdict::Running => reported.phase == "Running",
            };
            if reason != reported.reason || !verdict_agrees {
                disagreements.push(format!(
                    "{file}: {}: explain says {:?} {reason:?}, the scheduler {} {:?}",
                    job.key(),
                    e.verdict,
                    reported.phase,
                    reported.reason
                ));
            }
            if e.verdict == Verdict::Waiting {
                waiting += 1;
                let leaf = e.path.first().map(|q| result.snapshot.queues[q.queue].name.as_str());
                if leaf != Some(reported.queue.as_str()) || e.to_start.is_empty() {
                    disagreements.push(format!("{file}: {}: path {leaf:?}, to start {:?}", job.key(), e.to_start));
                }
            }
        }
    }
    assert!(waiting > 20, "the scenarios have waiting jobs to explain: {waiting}");
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

#[test]
fn explained_with_another_configuration_the_answer_changes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/runai-queue-limit.yaml");
    let (config, result, _) = run(&path);
    let snap = &result.snapshot;
    let without_fairshare = SchedulerConfig {
        plugins: config.plugins.iter().filter(|p| !matches!(p, PluginConfig::Fairshare(_))).cloned().collect(),
        ..config.clone()
    };
    let changed = snap.jobs.keys().filter(|&j| {
        let (with, without) = (explain(snap, &config, j), explain(snap, &without_fairshare, j));
        with.verdict == Verdict::Waiting && (with.verdict, with.reason) != (without.verdict, without.reason)
    });
    assert!(
        changed.count() > 0,
        "a job the queue limit holds back is explained the same without the fair-share plugin"
    );
}

#[test]
fn a_job_held_by_its_queue_limit_is_told_which_limit_to_raise() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/runai-queue-limit.yaml");
    let (config, result, _) = run(&path);
    let snap = &result.snapshot;
    let advice = |name: &str| {
        let j = snap.jobs.position(|j| j.name == name).expect("the scenario's job");
        explain(snap, &config, j).to_start
    };
    let raise = "raise queue proj-capped's limit of nvidia.com/gpu to at least";
    assert_eq!(advice("second"), [format!("{raise} 5, or wait until 1 of nvidia.com/gpu is freed in it")]);
    assert_eq!(advice("elastic"), [format!("{raise} 5, or wait until 1 of nvidia.com/gpu is freed in it")]);
    assert!(advice("first").is_empty());
}

#[test]
fn a_gang_larger_than_its_queue_limit_is_not_told_to_wait() {
    let text = "name: gang-over-limit
nodes:
  - {name: n1, allocatable: {cpu: \"64\", memory: 512Gi, nvidia.com/gpu: \"8\"}}
queues:
  - {name: capped, deserved: {nvidia.com/gpu: \"2\"}, limit: {nvidia.com/gpu: \"4\"}}
jobs:
  - {name: big, queue: capped, createdAt: 0, tasks: [{name: t, replicas: 6, requests: {nvidia.com/gpu: \"1\"}}]}
";
    let s = scenario::parse(text, "inline.yaml").expect("the inline scenario reads");
    let config = SchedulerConfig::default();
    let result = run::simulate(&s, &config, s.cycles).expect("the inline scenario builds");
    let e = explain(&result.snapshot, &config, JobId(0));
    assert_eq!(e.verdict, Verdict::Waiting);
    assert_eq!(
        e.to_start,
        ["raise queue capped's limit of nvidia.com/gpu to at least 6: the request alone exceeds it"]
    );
}
