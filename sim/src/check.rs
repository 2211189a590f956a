//! `--check`: compares a run's report with the scenario's `expect` block and names every
//! mismatch.

use std::collections::BTreeSet;

use drover_api::ResourceList;

use crate::report::Report;
use crate::scenario::{PodRef, Scenario};

/// Every way the report differs from the expectations (empty when it matches).
pub fn mismatches(scenario: &Scenario, report: &Report) -> Vec<String> {
    let Some(expect) = &scenario.expect else { return Vec::new() };
    let mut out = Vec::new();
    for (key, want) in &expect.jobs {
        for job in scenario.find_jobs(key) {
            let k = job.key();
            let Some(got) = report.jobs.get(&k) else { continue };
            let mut cmp = |what: &str, want: Option<u32>, got: u32| {
                if let Some(w) = want.filter(|w| *w != got) {
                    out.push(format!("job {k}: {what} is {got}, expected {w}"));
                }
            };
            cmp("running", want.running, got.running);
            cmp("pending", want.pending, got.pending);
            cmp("evicted", want.evicted, got.evicted);
            if let Some(phase) = want.phase.as_ref().filter(|p| **p != got.phase) {
                out.push(format!("job {k}: phase is {}, expected {phase}", got.phase));
            }
            if let Some(reason) = want.reason.as_ref().filter(|r| !got.reason.contains(r.as_str())) {
                out.push(format!("job {k}: reason is {:?}, expected it to contain {reason:?}", got.reason));
            }
        }
    }
    for (pod, node) in &expect.placements {
        for p in scenario.find_pods(pod) {
            let k = p.key();
            let got = report.pods.get(&k).and_then(|r| if r.state == "Bound" { r.node.as_deref() } else { None });
            if got != Some(node.as_str()) {
                out.push(format!("pod {k}: bound to {}, expected {node}", got.unwrap_or("no node")));
            }
        }
    }
    if let Some(evicted) = &expect.evicted {
        let want: BTreeSet<String> = evicted
            .iter()
            .flat_map(|e| {
                let found: Vec<String> = scenario.find_pods(e).iter().map(PodRef::key).collect();
                if found.is_empty() {
                    vec![if e.contains('/') { e.clone() } else { format!("default/{e}") }]
                } else {
                    found
                }
            })
            .collect();
        let got: BTreeSet<String> = report.evictions.iter().cloned().collect();
        for missing in want.difference(&got) {
            out.push(format!("pod {missing}: expected to be evicted, was not"));
        }
        for extra in got.difference(&want) {
            out.push(format!("pod {extra}: evicted, not expected"));
        }
    }
    for (name, want) in &expect.queues {
        let Some(got) = report.queues.get(name) else { continue };
        let mut cmp = |what: &str, want: &Option<ResourceList>, got: &std::collections::BTreeMap<String, String>| {
            let Some(want) = want else { return };
            for (resource, text) in want.to_strings() {
                let actual = got.get(&resource).map_or("0", String::as_str);
                if actual != text {
                    out.push(format!("queue {name}: {what} {resource} is {actual}, expected {text}"));
                }
            }
        };
        cmp("allocated", &want.allocated, &got.allocated);
        cmp("fairShare", &want.fair_share, &got.fair_share);
        cmp("deserved", &want.deserved, &got.deserved);
    }
    out
}
