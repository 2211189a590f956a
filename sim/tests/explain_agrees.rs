//! `drover explain` answers with the core: for every scenario under `scenarios/`, explaining
//! each job on the snapshot the last cycle started from gives the verdict and reason the
//! simulator's report gives. And the answer follows the configuration: explained without the
//! fair-share plugin, a job the fair share holds back gets another answer.

mod support;

use std::path::Path;

use drover_scheduler::config::{ActionName, PluginConfig, SchedulerConfig};
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
    assert_eq!(
        advice("second"),
        [format!("{raise} 5, or wait until 1 of nvidia.com/gpu is freed in queue proj-capped")]
    );
    assert_eq!(
        advice("elastic"),
        [format!("{raise} 5, or wait until 1 of nvidia.com/gpu is freed in queue proj-capped")]
    );
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

/// What `explain` tells the scenario's job would let it start.
fn advice_in(scenario: &str, adjust: impl Fn(SchedulerConfig) -> SchedulerConfig, job: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(scenario);
    let (config, result, _) = run(&path);
    let snap = &result.snapshot;
    let j = snap.jobs.position(|j| j.name == job).expect("the scenario's job");
    explain(snap, &adjust(config), j).to_start.join("; ")
}

#[test]
fn a_gang_waiting_for_room_is_told_which_victims_would_seat_it_and_which_rule_forbids_them() {
    let same = |c| c;
    assert_eq!(
        advice_in("runai-reclaim-never-nonpreemptible.yaml", same, "train"),
        "evicting 4 pod(s) of default/build would let it start now, but the rules forbid it (preempt: job \
         default/build is non-preemptible)"
    );
    assert_eq!(
        advice_in("kai-reclaim-no-ping-pong.yaml", same, "victim"),
        "evicting 5 pod(s) of default/fenced-job would let it start now, but the rules forbid it (reclaim: queue \
         fenced is not reclaimable)"
    );
    let protected = advice_in("min-runtime-protects-work-just-started.yaml", same, "a");
    assert!(protected.contains("of default/b would let it start now"), "{protected}");
    assert!(protected.contains("(reclaim: job default/b is protected until t=1540 s"), "{protected}");
    // Two jobs must go: both are named, and the refusal is the first one's that is refused.
    assert_eq!(
        advice_in("strict-fifo-only-the-first-waiting-job-evicts.yaml", same, "j1"),
        "evicting 2 pod(s) of default/v, default/keep would let it start now, but the rules forbid it (preempt: \
         job default/keep does not have a lower priority)"
    );
}

#[test]
fn a_gang_that_requires_a_rack_is_told_which_rack_would_hold_it() {
    let advice = advice_in("topology-1-gang-waits-when-no-rack-holds-it.yaml", |c| c, "gang");
    assert_eq!(
        advice,
        "evicting 1 pod(s) of default/busy-r7 would let it start now in rack b1/r7, but the rules forbid it \
         (preempt: job default/busy-r7 does not have a lower priority)"
    );
}

#[test]
fn victims_only_an_action_the_scheduler_does_not_run_could_take_are_refused_for_that() {
    let without_preempt = |c: SchedulerConfig| SchedulerConfig {
        actions: c.actions.iter().copied().filter(|a| *a != ActionName::Preempt).collect(),
        ..c
    };
    assert_eq!(
        advice_in("determined-priority-step3.yaml", without_preempt, "notebook"),
        "evicting 1 pod(s) of default/asha would let it start now, but the rules forbid it (the scheduler runs no \
         preempt action)"
    );
}
