//! Reservations seen through `drover sim`: the report shows which nodes a waiting gang holds
//! and from when, and without the `reservation` plugin the same cluster lets a long job take
//! the capacity the gang needs.

use std::path::Path;

use drover_scheduler::config::SchedulerConfig;
use drover_sim::report::{self, Report};
use drover_sim::{run, scenario};

const SCENARIO: &str = "../scenarios/reservation-backfill-only-what-ends-before-the-gang-starts.yaml";

fn run(config: &SchedulerConfig) -> Report {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCENARIO);
    let s = scenario::load(&path).expect("the scenario loads");
    let mut config = config.clone();
    config.apply(&s.config);
    report::report(&s.name, &run::simulate(&s, &config, s.cycles).expect("it runs"))
}

#[test]
fn the_report_shows_the_reserved_nodes_and_the_start() {
    let report = run(&SchedulerConfig::default());
    let big = &report.jobs["default/big"];
    let r = big.reservation.as_ref().expect("big holds a reservation");
    assert_eq!((r.nodes.as_slice(), r.start), (&["n1".to_string(), "n2".to_string()][..], 3600));
    assert!(big.reason.contains("reserved n1, n2, expected to start in 3600 s"), "{}", big.reason);
    assert!(report.jobs["default/small-short"].reservation.is_none());
    let json: serde_json::Value = serde_json::from_str(&report::to_json(&report)).expect("JSON");
    assert_eq!(json["jobs"]["default/big"]["reservation"], serde_json::json!({"nodes": ["n1", "n2"], "start": 3600}));
    assert!(json["jobs"]["default/small-short"].get("reservation").is_none(), "absent when none is held");
}

#[test]
fn without_the_plugin_a_long_job_takes_what_the_gang_needs() {
    let mut config = SchedulerConfig::default();
    config.plugins.retain(|p| p.name() != "reservation");
    let report = run(&config);
    assert_eq!(report.jobs["default/small-long"].running, 1, "best effort: the long job starts");
    assert_eq!(report.jobs["default/small-short"].running, 0);
    assert!(report.jobs["default/big"].reservation.is_none());
}
