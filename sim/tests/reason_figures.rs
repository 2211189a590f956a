//! No false figures: every bound a reason cites about a queue (its limit, fair share or
//! deserved quota, "queue q would exceed its limit (nvidia.com/gpu 40 > 24)") is that queue's
//! figure in the report of the same run, and an over-fair-share reason's allocation is the
//! queue's. Checked on every job of every scenario under `scenarios/`.

mod support;

use std::collections::BTreeMap;

use drover_api::ResourceList;
use drover_scheduler::config::SchedulerConfig;
use drover_sim::report::{self, QueueReport};
use drover_sim::{run, scenario};

/// Which figure of the queue's row a cited number is.
#[derive(Debug, Clone, Copy)]
enum Figure {
    Limit,
    FairShare,
    Deserved,
    Allocated,
}

/// A number a reason cites about a queue.
#[derive(Debug)]
struct Cited {
    queue: String,
    figure: Figure,
    resource: String,
    amount: String,
}

/// `(resource amount > bound)` at the end of a clause.
fn parenthesized(clause: &str) -> Option<(String, String, String)> {
    let open = clause.rfind('(')?;
    let inner = clause[open + 1..].strip_suffix(')')?;
    let (left, bound) = inner.split_once(" > ")?;
    let (resource, amount) = left.rsplit_once(' ')?;
    Some((resource.to_string(), amount.to_string(), bound.to_string()))
}

/// The queue figures a reason clause cites, as the rules word them.
fn cited(clause: &str) -> Vec<Cited> {
    const BY_NAME: [(&str, Figure); 4] = [
        (" would exceed its limit (", Figure::Limit),
        (" cannot hold the gang's minimum within its limit (", Figure::Limit),
        (" would exceed its fair share (", Figure::FairShare),
        (" is over its fair share (", Figure::FairShare),
    ];
    let Some((resource, amount, bound)) = parenthesized(clause) else { return Vec::new() };
    let mut out = Vec::new();
    for (phrase, figure) in BY_NAME {
        if let Some(at) = clause.find(phrase) {
            let queue = clause[..at].rsplit_once("queue ").map(|(_, q)| q.to_string()).unwrap_or_default();
            if phrase.contains("is over") {
                let (queue, resource, amount) = (queue.clone(), resource.clone(), amount.clone());
                out.push(Cited { queue, figure: Figure::Allocated, resource, amount });
            }
            out.push(Cited { queue, figure, resource: resource.clone(), amount: bound.clone() });
        }
    }
    if let Some((_, rest)) = clause.split_once("non-preemptible work may only use queue ") {
        if let Some((queue, _)) = rest.split_once("'s deserved quota") {
            out.push(Cited { queue: queue.to_string(), figure: Figure::Deserved, resource, amount: bound });
        }
    }
    out
}

/// The queue row's figure for a resource, in the resource's unit (absent: 0, or unlimited).
fn row_figure(row: &QueueReport, figure: Figure, resource: &str) -> Option<i64> {
    let list: &BTreeMap<String, String> = match figure {
        Figure::Limit => &row.limit,
        Figure::FairShare => &row.fair_share,
        Figure::Deserved => &row.deserved,
        Figure::Allocated => &row.allocated,
    };
    match list.get(resource) {
        Some(text) => Some(ResourceList::parse_amount(resource, text).expect("reports print quantities")),
        None if matches!(figure, Figure::Limit) => None,
        None => Some(0),
    }
}

#[test]
fn every_queue_figure_a_reason_cites_is_the_queues_figure_in_the_report() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in support::scenario_files() {
        let s = scenario::load(&path).expect("bundled scenarios load");
        let mut config = SchedulerConfig::default();
        config.apply(&s.config);
        let result = run::simulate(&s, &config, s.cycles).expect("bundled scenarios build");
        let rep = report::report(&s.name, &result);
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for (job, row) in &rep.jobs {
            for clause in row.reason.split("; ") {
                for c in cited(clause) {
                    checked += 1;
                    let said = ResourceList::parse_amount(&c.resource, &c.amount).expect("reasons print quantities");
                    let has = rep.queues.get(&c.queue).and_then(|q| row_figure(q, c.figure, &c.resource));
                    if has != Some(said) {
                        wrong.push(format!(
                            "{file}: {job}: {clause:?} cites {:?} {} of queue {}, the report has {has:?}",
                            c.figure, c.amount, c.queue
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 20, "the scenarios' reasons cite queue figures: {checked}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reading of a reason finds what it cites, so that the property above cannot pass by
/// finding nothing.
#[test]
fn the_reader_finds_each_kind_of_cited_figure() {
    let kinds = |text: &str| {
        cited(text)
            .iter()
            .map(|c| format!("{:?} {} {} {}", c.figure, c.queue, c.resource, c.amount))
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds("queue q would exceed its limit (nvidia.com/gpu 40 > 24)"), ["Limit q nvidia.com/gpu 24"]);
    assert_eq!(
        kinds("reclaim: queue a.b is over its fair share (cpu 3 > 2)"),
        ["Allocated a.b cpu 3", "FairShare a.b cpu 2"]
    );
    assert_eq!(
        kinds("not admitted: non-preemptible work may only use queue q's deserved quota, which is smaller than the gang (nvidia.com/gpu 9 > 8)"),
        ["Deserved q nvidia.com/gpu 8"]
    );
    assert!(kinds("0/2 nodes are available: 2 Insufficient nvidia.com/gpu").is_empty());
}
