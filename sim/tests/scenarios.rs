//! Runs every scenario under `scenarios/` and requires its `expect` block to hold, exactly as
//! `drover sim --check` does. Each scenario reproduces one scheduling rule; a scenario
//! without expectations is an error here, so that no rule goes unchecked.

mod support;

use std::path::Path;

use drover_scheduler::config::SchedulerConfig;
use drover_sim::{check, report, run, scenario};

fn failures(path: &Path) -> Vec<String> {
    let s = match scenario::load(path) {
        Ok(s) => s,
        Err(e) => return vec![e.to_string()],
    };
    if s.expect.is_none() {
        return vec!["has no expect block".into()];
    }
    let mut config = SchedulerConfig::default();
    config.apply(&s.config);
    let result = run::simulate(&s, &config, s.cycles).expect("validated scenarios build");
    let rep = report::report(&s.name, &result);
    let again = report::report(&s.name, &run::simulate(&s, &config, s.cycles).expect("builds"));
    let mut problems = check::mismatches(&s, &rep);
    if report::to_json(&rep) != report::to_json(&again) {
        problems.push("two runs printed different output".into());
    }
    // Written straight, the report's keys come out sorted, as through a sorted tree of values.
    let value = serde_json::to_value(&rep).expect("reports serialize");
    let sorted = serde_json::to_string_pretty(&value).expect("values serialize") + "\n";
    if report::to_json(&rep) != sorted {
        problems.push("the JSON's keys are not sorted".into());
    }
    problems.extend(summary_problems(&rep, &result));
    problems
}

/// The table's report leaves out the pods and nothing else; each job's evictions are those
/// of the `evictions` list whose name is one of its pods' in the final snapshot.
fn summary_problems(rep: &report::Report, result: &run::SimResult) -> Vec<String> {
    let summary = report::summary(&rep.scenario, result);
    let mut problems = Vec::new();
    if !summary.pods.is_empty() || report::to_table(&summary) != report::to_table(rep) {
        problems.push("the summary differs from the report beyond its pods".into());
    }
    let snap = &result.snapshot;
    let owner: std::collections::HashMap<String, String> =
        snap.pods.iter_enumerated().map(|(p, pod)| (run::pod_key(snap, p), snap.jobs[pod.job].key())).collect();
    for (key, job) in &rep.jobs {
        let expected = result.evictions.iter().filter(|e| owner.get(&e.pod) == Some(key)).count();
        if job.evicted as usize != expected {
            problems.push(format!("job {key}: {} evictions reported, {expected} in the list", job.evicted));
        }
    }
    problems
}

#[test]
fn every_scenario_meets_its_expectations() {
    let files = support::scenario_files();
    assert!(files.len() > 1, "scenarios are bundled");
    let mut all = Vec::new();
    for f in &files {
        for p in failures(f) {
            all.push(format!("{}: {p}", f.file_name().unwrap().to_string_lossy()));
        }
    }
    assert!(all.is_empty(), "{} scenario expectation(s) failed:\n{}", all.len(), all.join("\n"));
}
