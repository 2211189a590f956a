//! The `drover` binary as users run it: exit codes, error messages naming file, object and
//! field, deterministic output, and the `--check`, `--cycles` and `--output` flags.

use std::path::PathBuf;
use std::process::{Command, Output};

fn drover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drover")).args(args).output().expect("the drover binary runs")
}

fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path).display().to_string()
}

fn write_temp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("drover-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

const BASE: &str = r#"name: t
nodes:
  - {name: n1, allocatable: {cpu: "8", nvidia.com/gpu: "4"}}
queues:
  - {name: q}
jobs:
  - name: j1
    queue: q
    tasks:
      - {name: w, replicas: 2, requests: {nvidia.com/gpu: "1"}}
expect:
  jobs:
    j1: {running: 2}
"#;

#[test]
fn bundled_example_passes_its_check() {
    let out = drover(&["sim", &repo("scenarios/example.yaml"), "--check"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("default/owner") && table.contains("evictions:"), "{table}");
}

#[test]
fn json_output_is_identical_across_runs_and_sorted() {
    let a = drover(&["sim", &repo("scenarios/example.yaml"), "--output", "json"]);
    let b = drover(&["sim", &repo("scenarios/example.yaml"), "--output", "json"]);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    let text = String::from_utf8(a.stdout).unwrap();
    let keys: Vec<usize> = ["\"cycles\"", "\"evictions\"", "\"jobs\"", "\"pods\"", "\"queues\"", "\"scenario\""]
        .iter()
        .map(|k| text.find(k).unwrap_or_else(|| panic!("{k} in output")))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "top-level keys are sorted: {text}");
    assert!(
        text.contains("\"default/owner-worker-0\": {\n      \"node\": \"n1\",\n      \"state\": \"Bound\""),
        "{text}"
    );
}

#[test]
fn check_mismatch_exits_one_and_names_it() {
    let path = write_temp("mismatch.yaml", &BASE.replace("j1: {running: 2}", "j1: {running: 3}"));
    let out = drover(&["sim", &path, "--check"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("job default/j1: running is 2, expected 3"), "{err}");
}

#[test]
fn cycles_flag_overrides_the_scenario() {
    let one = drover(&["sim", &repo("scenarios/example.yaml"), "--cycles", "1", "--output", "json"]);
    let text = String::from_utf8_lossy(&one.stdout);
    assert!(text.contains("\"cycles\": 1"), "{text}");
    assert!(text.contains("\"state\": \"Evicted\""), "after one cycle the reclaimed pods are still evicting: {text}");
    assert_eq!(drover(&["sim", &repo("scenarios/example.yaml"), "--cycles", "0"]).status.code(), Some(2));
}

/// Each bad input gets exit code 2 and a message naming the file, the object and the field.
#[test]
fn bad_input_exits_two_naming_file_object_and_field() {
    let cases: [(&str, String, &[&str]); 7] = [
        ("unknown-field.yaml", BASE.replace("replicas: 2", "replica: 2"), &["job default/j1 task w", "replica"]),
        (
            "bad-quantity.yaml",
            BASE.replace("nvidia.com/gpu: \"1\"}", "nvidia.com/gpu: \"lots\"}"),
            &["job default/j1 task w", "requests.nvidia.com/gpu", "lots"],
        ),
        ("missing-queue.yaml", BASE.replace("queue: q", "queue: nope"), &["job default/j1", "queue", "nope"]),
        ("negative-replicas.yaml", BASE.replace("replicas: 2", "replicas: -1"), &["job default/j1 task w", "replicas"]),
        (
            "fractional-replicas.yaml",
            BASE.replace("replicas: 2", "replicas: 1.5"),
            &["job default/j1 task w", "replicas"],
        ),
        (
            "queue-cycle.yaml",
            BASE.replace("  - {name: q}", "  - {name: q}\n  - {name: a, parent: b}\n  - {name: b, parent: a}"),
            &["queue a", "parent"],
        ),
        (
            "running-missing-node.yaml",
            BASE.replace("requests: {nvidia.com/gpu: \"1\"}}", "requests: {nvidia.com/gpu: \"1\"}, running: [n9]}"),
            &["job default/j1 task w", "running[0]", "n9"],
        ),
    ];
    for (file, text, needles) in cases {
        let path = write_temp(file, &text);
        let out = drover(&["sim", &path]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert!(err.contains(file), "{file}: the error names the file: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{file}: the error mentions {needle:?}: {err}");
        }
        assert!(!err.contains("panicked"), "{file}: {err}");
    }
}

#[test]
fn unreadable_file_and_bad_config_exit_two() {
    assert_eq!(drover(&["sim", "/nonexistent/scenario.yaml"]).status.code(), Some(2));
    let config = write_temp("bad-config.yaml", "actions: [allocate, teleport]\nplugins: []\n");
    let out = drover(&["sim", &repo("scenarios/example.yaml"), "--config", &config]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad-config.yaml"));
}

#[test]
fn crds_prints_every_custom_resource_definition() {
    let out = drover(&["crds"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [
        "queues.scheduling.drover.dev",
        "podgroups.scheduling.drover.dev",
        "projects.scheduling.drover.dev",
        "departments.scheduling.drover.dev",
        "jobs.batch.drover.dev",
    ] {
        assert!(text.contains(&format!("name: {name}")), "{name} in {text}");
    }
}

#[test]
fn queue_tables_name_the_resource_that_decided_a_queues_state() {
    // pb runs 8 GPUs, over its fair share of 4, and keeps them (its job is protected by its
    // minimum run time); pa waits within its quota.
    let scenario = repo("scenarios/min-runtime-protects-work-just-started.yaml");
    let out = drover(&["sim", &scenario, "--cycles", "1", "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["queues"]["pb"]["state"], "OverFairShare");
    assert_eq!(report["queues"]["pb"]["stateResource"], "nvidia.com/gpu");
    assert_eq!(report["queues"]["pa"]["state"], "InQuota");
    assert!(report["queues"]["pa"].get("stateResource").is_none(), "an in-quota queue has no deciding resource");
    let table = String::from_utf8(drover(&["sim", &scenario, "--cycles", "1"]).stdout).unwrap();
    assert!(table.lines().any(|l| l.starts_with("pb") && l.contains("OverFairShare (nvidia.com/gpu)")), "{table}");
}

/// Trace mode as `scenario-format.md` specifies it: every policy by default, side by side, the
/// contract's JSON keys, the same bytes twice, and bad rows refused with file, line and column.
#[test]
fn trace_mode_replays_every_policy_and_refuses_bad_rows() {
    let trace = write_temp(
        "t.csv",
        "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user,queue,priority_or_qos,status\n\
         a,0,100,1,8,,u1,,,\nb,0,50,2,8,,u2,,,\nc,10,10,1,4,,u1,,,\n",
    );
    let out = drover(&["sim", "--trace", &trace, "--nodes", "2", "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let policies = json["policies"].as_object().expect("policies");
    let mut names: Vec<&str> = policies.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["drover", "drover-elastic", "fifo-backfill", "fifo-strict", "greedy", "sjf"]);
    for (name, p) in policies {
        for key in ["avgJctSeconds", "avgQueueSeconds", "p95QueueSeconds", "p99QueueSeconds", "gpuAllocation"] {
            assert!(p[key].is_number(), "{name}: {key}");
        }
        assert_eq!(p["jobs"], 3, "{name}");
        assert_eq!(p["deadlocks"], 0, "{name}");
    }
    // c passes the waiting b only where something may pass a waiting job.
    assert_eq!(policies["fifo-strict"]["avgQueueSeconds"], 80.0);
    assert_eq!(policies["fifo-backfill"]["avgQueueSeconds"], 33.3);
    assert_eq!(out.stdout, drover(&["sim", "--trace", &trace, "--nodes", "2", "--output", "json"]).stdout);

    let one = drover(&["sim", "--trace", &trace, "--nodes", "2", "--policy", "sjf"]);
    let table = String::from_utf8_lossy(&one.stdout);
    assert!(table.contains("sjf") && !table.contains("fifo-strict"), "{table}");

    let bad = write_temp("bad.csv", "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\na,0,-3,1,1\n");
    let out = drover(&["sim", "--trace", &bad, "--nodes", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{bad}:2:3: `duration_s` is -3")), "{err}");
    let out = drover(&["sim", "--trace", &trace, "--nodes", "2", "--policy", "lottery"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy \"lottery\""));
}

/// Trace mode's plots as a person reads them: the command names the files it wrote, time
/// ticks are in hours, not raw seconds, the cluster's capacity is drawn and named in the
/// legend, and the queue-shares plot exists only when there are queues to compare.
#[test]
fn trace_plots_name_their_files_label_time_for_people_and_draw_the_capacity() {
    // Two 8-GPU nodes; work spanning about four hours, from two users.
    let trace = write_temp(
        "hours.csv",
        "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user,queue,priority_or_qos,status\n\
         a,0,7200,1,8,,u1,,,\nb,0,3600,2,8,,u2,,,\nc,600,1800,1,4,,u1,,,\nd,700,300,1,8,,u2,,,\n",
    );
    let dir = std::env::temp_dir().join(format!("drover-cli-{}-plots", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let one = dir.join("one-queue");
    let plots = |queues: &str, into: &std::path::Path| {
        let args = ["sim", "--trace", &trace, "--nodes", "2", "--queues", queues, "--output", "json", "--plots"];
        let out = drover(&[&args[..], &[into.to_str().unwrap()]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("stdout stays the JSON report alone");
        String::from_utf8(out.stderr).unwrap()
    };
    let said = plots("1", &one);
    for file in ["allocation.svg", "queue-delay-cdf.svg"] {
        assert!(said.contains(&format!("wrote plot {}", one.join(file).display())), "{file}: {said}");
    }
    assert!(!said.contains("queue-shares") && !one.join("queue-shares.svg").exists(), "one queue: {said}");
    let allocation = std::fs::read_to_string(one.join("allocation.svg")).unwrap();
    let texts: Vec<&str> = allocation.lines().map(str::trim).collect();
    for tick in ["30 min", "1 h", "2 h", "4 h"] {
        assert!(texts.contains(&tick), "no time tick {tick:?} in {allocation}");
    }
    assert!(!texts.iter().any(|t| t.contains("3600") || t.contains("7200")), "a tick in raw seconds: {allocation}");
    assert!(texts.contains(&"cluster capacity: 16 GPUs"), "no capacity line in the legend: {allocation}");
    let cdf = std::fs::read_to_string(one.join("queue-delay-cdf.svg")).unwrap();
    assert!(cdf.lines().any(|l| l.trim() == "10 min"), "{cdf}");

    let two = dir.join("two-queues");
    let said = plots("2", &two);
    assert!(said.contains(&format!("wrote plot {}", two.join("queue-shares.svg").display())), "{said}");
    let shares = std::fs::read_to_string(two.join("queue-shares.svg")).unwrap();
    assert!(shares.contains("drover: fair share (cross)"), "{shares}");
}

#[test]
fn scheduler_and_controllers_default_to_different_metrics_ports() {
    // The README's playground starts both on one machine: the same default port made the
    // second one exit with "Address already in use".
    let default_of = |component: &str| {
        let help = String::from_utf8(drover(&[component, "--help"]).stdout).expect("utf-8 help");
        let line = help.lines().skip_while(|l| !l.contains("--metrics-addr")).take(4).collect::<Vec<_>>().join(" ");
        line.split("[default: ").nth(1).and_then(|d| d.split(']').next()).map(str::to_string).expect("a default")
    };
    let (scheduler, controllers) = (default_of("scheduler"), default_of("controllers"));
    assert_eq!(scheduler, "0.0.0.0:8080");
    assert_ne!(scheduler, controllers);
}
