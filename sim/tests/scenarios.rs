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
