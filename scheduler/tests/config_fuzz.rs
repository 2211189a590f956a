//! Hostile input for the scheduler configuration (`SchedulerConfig::from_yaml`, and the
//! per-scenario `ConfigOverrides`). The configuration is written by cluster admins into the
//! chart's ConfigMap; a typo, a wrong type or a crafted YAML document (aliases, deep nesting)
//! must give an error naming the field, never a panic or a hang, and every configuration the
//! parser accepts must run a scheduling cycle without breaking the cluster's capacity
//! (issue 9, part 5).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_api::{ResourceList, Taint, TaintEffect, CPU, GPU, PODS};
use drover_scheduler::config::{
    ActionName, ConfigOverrides, DrfConfig, FairShareArgs, FairShareMode, PlacementConfig, PlacementStrategy,
    PluginConfig, PoolPlacement, SchedulerConfig, DEFAULT_CONFIG_YAML,
};
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::ids::{NodeId, TiVec};
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, NodeInput, PodPhase, PodPhaseInput, QueueBounds, QueueInput,
    QueueingStrategy, Snapshot, TaskInput,
};
use proptest::prelude::*;
use proptest::sample::select;
use serde_yaml::{Mapping, Value};

const PREFIX: &str = "invalid scheduler configuration: ";
const ACTIONS: [&str; 5] = ["enqueue", "allocate", "preempt", "reclaim", "backfill"];
const PLUGINS: [&str; 6] = ["priority", "gang", "fairshare", "drf", "predicates", "nodeorder"];

// ---------------------------------------------------------------------------------------
// A small cluster every accepted configuration is run on

fn list(pairs: &[(&str, i64)]) -> ResourceList {
    ResourceList(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
}

fn pending_job(name: &str, queue: &str, min: u32, pods: usize, requests: ResourceList) -> JobInput {
    JobInput {
        name: name.into(),
        namespace: "ns".into(),
        queue: queue.into(),
        priority_class: "train".into(),
        priority: 50,
        preemptible: true,
        min_member: min,
        min_resources: None,
        created_at: 0,
        phase: JobPhase::Pending,
        tasks: vec![TaskInput {
            name: "main".into(),
            min_available: min,
            requests,
            constraints: Constraints::default(),
            pods: vec![PodPhaseInput::Pending; pods],
            topology: None,
            slices: None,
        }],
        run_time: None,
        ends_at: None,
        preempted_at: None,
        started_at: None,
        topology: None,
        resize: None,
    }
}

fn cluster() -> Snapshot {
    let node = |name: &str, cpu: i64, gpu: i64, taints: Vec<Taint>| NodeInput {
        name: name.into(),
        allocatable: list(&[(CPU, cpu), (GPU, gpu), (PODS, 8)]),
        labels: BTreeMap::new(),
        taints,
        unschedulable: false,
    };
    let queue = |name: &str, gpu: i64| QueueInput {
        name: name.into(),
        parent: None,
        deserved: list(&[(GPU, gpu)]),
        limit: None,
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    };
    let tainted = Taint { key: "dedicated".into(), value: "x".into(), effect: TaintEffect::NoSchedule };
    let nodes = [node("n0", 4000, 4, vec![]), node("n1", 4000, 4, vec![]), node("n2", 2000, 0, vec![tainted])];
    let queues = [queue("a", 4), queue("b", 4)];
    let jobs = [
        pending_job("gang", "a", 2, 2, list(&[(CPU, 1000), (GPU, 2)])),
        pending_job("wide", "a", 1, 4, list(&[(CPU, 1500)])),
        pending_job("greedy", "b", 3, 3, list(&[(CPU, 500), (GPU, 4)])),
        pending_job("small", "b", 1, 6, list(&[(CPU, 250)])),
    ];
    snapshot::build(&nodes, &queues, &jobs).expect("a consistent cluster")
}

/// Runs one cycle of `config` and checks what holds whatever the configuration: every
/// binding is of a distinct pending pod to an existing node, nothing is evicted (nothing ran),
/// and no node holds more than its allocatable.
fn run_checked(snap: &Snapshot, config: &SchedulerConfig) -> Result<(), TestCaseError> {
    let outcome = run_cycle(snap, config);
    prop_assert_eq!(outcome.pod_state.len(), snap.pods.len());
    prop_assert_eq!(outcome.job_phase.len(), snap.jobs.len());
    prop_assert!(outcome.decisions.evictions.is_empty(), "{:?}", outcome.decisions.evictions);
    let mut used: TiVec<NodeId, Vec<i64>> = snap.nodes.iter().map(|_| vec![0; snap.resources.len()]).collect();
    let mut seen = std::collections::BTreeSet::new();
    for &(pod, node) in &outcome.decisions.binds {
        prop_assert!(seen.insert(pod), "pod {:?} bound twice", pod);
        prop_assert!(node.0 < snap.nodes.len());
        prop_assert_eq!(&snap.pods[pod].phase, &PodPhase::Pending);
        let p = &snap.pods[pod];
        let requests = &snap.jobs[p.job].tasks[p.task].requests;
        for (r, u) in used[node].iter_mut().enumerate() {
            *u += requests[r];
        }
    }
    for (n, u) in used.iter_enumerated() {
        for (r, amount) in u.iter().enumerate() {
            prop_assert!(
                *amount <= snap.nodes[n].allocatable[r],
                "{:?}: node {} over its {} ({} > {})",
                config,
                snap.nodes[n].name,
                snap.resources[r],
                amount,
                snap.nodes[n].allocatable[r]
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Generators

/// Scalars that are wrong wherever the configuration expects a name, a boolean or a list.
fn wrong_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        select(vec![-1i64, 0, i64::MIN, i64::MAX]).prop_map(|n| Value::Number(n.into())),
        any::<u64>().prop_map(|n| Value::Number(n.into())),
        select(vec![-1.5f64, 1e300, f64::NAN, f64::INFINITY]).prop_map(|n| Value::Number(n.into())),
        select(vec!["", "Allocate", "ALLOCATE", "teleport", "-1", "1e400", "99999999999999999999", "{", "🙂"])
            .prop_map(|s| Value::String(s.into())),
        ".{0,12}".prop_map(Value::String),
    ]
}

/// A wrong scalar, a list or a map.
fn wrong_value() -> impl Strategy<Value = Value> {
    wrong_scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Sequence),
            prop::collection::vec(("[a-z]{1,6}", inner), 1..3)
                .prop_map(|kv| Value::Mapping(kv.into_iter().map(|(k, v)| (Value::String(k), v)).collect())),
        ]
    })
}

fn s(text: &str) -> Value {
    Value::String(text.into())
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Mapping(pairs.into_iter().map(|(k, v)| (s(k), v)).collect::<Mapping>())
}

/// Whether a YAML value is a string naming one of `names`, exactly as the parser requires.
fn is_name(v: &Value, names: &[&str]) -> bool {
    v.as_str().is_some_and(|t| names.contains(&t))
}

/// One entry of `actions`: a known action (its name) or something else (`None`).
fn action_entry() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    prop_oneof![
        5 => select(ACTIONS.to_vec()).prop_map(|a| (s(a), Some(a))),
        2 => wrong_value().prop_filter_map("a known action", |v| (!is_name(&v, &ACTIONS)).then_some((v, None))),
    ]
}

/// Arguments a plugin accepts, or hostile ones; `true` when accepted.
fn arguments(plugin: &'static str) -> BoxedStrategy<(Option<Value>, bool)> {
    let strategy = || prop_oneof![Just(s("binpack")), Just(s("spread"))];
    let bad_strategy = || wrong_value().prop_filter("a strategy", |v| !is_name(v, &["binpack", "spread"]));
    let pool = move || {
        (prop::option::of(strategy()), prop::option::of(strategy())).prop_map(|(gpu, cpu)| {
            let mut m = Vec::new();
            if let Some(g) = gpu {
                m.push(("gpu", g));
            }
            if let Some(c) = cpu {
                m.push(("cpu", c));
            }
            map(m)
        })
    };
    let unknown_field = wrong_value().prop_map(|v| Some(map(vec![("surprise", v)])));
    // Plugins that take arguments need the key, even empty (`missing field \`arguments\``).
    match plugin {
        "fairshare" => prop_oneof![
            Just((None, false)),
            Just((Some(map(vec![])), true)),
            select(vec!["maxMin", "demandProportional"]).prop_map(|m| (Some(map(vec![("mode", s(m))])), true)),
            wrong_value()
                .prop_filter("a mode", |v| !is_name(v, &["maxMin", "demandProportional"]))
                .prop_map(|v| (Some(map(vec![("mode", v)])), false)),
            unknown_field.prop_map(|a| (a, false)),
        ]
        .boxed(),
        "drf" => prop_oneof![
            Just((None, false)),
            Just((Some(map(vec![])), true)),
            (any::<bool>(), any::<bool>()).prop_map(|(j, q)| (
                Some(map(vec![("jobOrder", Value::Bool(j)), ("queueOrder", Value::Bool(q))])),
                true
            )),
            wrong_value()
                .prop_filter("a boolean", |v| !v.is_bool())
                .prop_map(|v| (Some(map(vec![("jobOrder", v)])), false)),
            unknown_field.prop_map(|a| (a, false)),
        ]
        .boxed(),
        "nodeorder" => prop_oneof![
            Just((None, false)),
            Just((Some(map(vec![])), true)),
            (pool(), prop::collection::btree_map(".{0,10}", pool(), 0..3)).prop_map(|(default, pools)| {
                let pools = Value::Mapping(pools.into_iter().map(|(k, v)| (Value::String(k), v)).collect());
                (Some(map(vec![("default", default), ("pools", pools)])), true)
            }),
            bad_strategy().prop_map(|v| (Some(map(vec![("default", map(vec![("gpu", v)]))])), false)),
            bad_strategy().prop_map(|v| (Some(map(vec![("pools", map(vec![("p", map(vec![("cpu", v)]))]))])), false)),
            wrong_value()
                .prop_filter("a map", |v| !v.is_mapping() && !v.is_null())
                .prop_map(|v| (Some(map(vec![("pools", v)])), false)),
            unknown_field.prop_map(|a| (a, false)),
        ]
        .boxed(),
        // Plugins without arguments refuse any.
        _ => prop_oneof![
            3 => Just((None, true)),
            1 => wrong_value()
                .prop_filter("not empty", |v| !v.is_null())
                .prop_map(|v| (Some(map(vec![("x", v)])), false)),
        ]
        .boxed(),
    }
}

/// One entry of `plugins`: `(value, plugin name when the entry is valid)`.
fn plugin_entry() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    prop_oneof![
        6 => select(PLUGINS.to_vec()).prop_flat_map(|p| arguments(p).prop_map(move |(args, ok)| {
            let mut m = vec![("name", s(p))];
            if let Some(a) = args {
                m.push(("arguments", a));
            }
            (map(m), ok.then_some(p))
        })),
        1 => wrong_value()
            .prop_filter("a known plugin", |v| !is_name(v, &PLUGINS))
            .prop_map(|name| (map(vec![("name", name)]), None)),
        1 => Just((map(vec![("arguments", map(vec![]))]), None)),
        1 => select(PLUGINS.to_vec()).prop_map(|p| (s(p), None)),
    ]
}

/// What a generated document must give.
#[derive(Debug, Clone)]
struct Expect {
    /// Accepted.
    valid: bool,
    /// Texts of which the error must contain at least one (the paths of the bad parts).
    markers: Vec<String>,
}

/// A configuration document, usually close to valid, with what the parser must say about it.
fn document() -> impl Strategy<Value = (Value, Expect)> {
    (
        prop_oneof![
            5 => prop::collection::vec(action_entry(), 0..6).prop_map(Some),
            1 => Just(None),
        ],
        prop_oneof![
            5 => prop::collection::vec(plugin_entry(), 0..7).prop_map(Some),
            1 => Just(None),
        ],
        prop_oneof![6 => Just(None), 1 => wrong_value().prop_filter("not a list", |v| !v.is_sequence()).prop_map(Some)],
        prop_oneof![6 => Just(None), 1 => wrong_value().prop_filter("not a list", |v| !v.is_sequence()).prop_map(Some)],
        prop_oneof![
            8 => Just(None),
            1 => ("[a-z]{1,8}", wrong_value()).prop_filter("an unknown field", |(k, _)| k != "actions" && k != "plugins").prop_map(Some),
        ],
        any::<bool>(),
    )
        .prop_map(|(actions, plugins, actions_type, plugins_type, extra, extra_first)| {
            let mut markers = Vec::new();
            let mut valid = true;
            let mut doc = Mapping::new();
            if let Some((key, value)) = extra.as_ref().filter(|_| extra_first) {
                doc.insert(s(key), value.clone());
            }
            let mut section = |field: &str, entries: Option<Vec<(Value, Option<&'static str>)>>, wrong: Option<Value>| {
                let Some(entries) = entries else {
                    markers.push(format!("missing field `{field}`"));
                    valid = false;
                    return;
                };
                if let Some(w) = wrong {
                    markers.push(format!("{field}: invalid type"));
                    valid = false;
                    doc.insert(s(field), w);
                    return;
                }
                let mut names: Vec<&str> = Vec::new();
                let mut all_valid = true;
                for (i, (_, name)) in entries.iter().enumerate() {
                    match name {
                        None => {
                            markers.push(format!("{field}[{i}]"));
                            all_valid = false;
                        }
                        Some(n) if names.contains(n) => {
                            markers.push(format!("{} {n} is listed twice", &field[..field.len() - 1]));
                            all_valid = false;
                        }
                        Some(n) => names.push(n),
                    }
                }
                valid &= all_valid;
                doc.insert(s(field), Value::Sequence(entries.into_iter().map(|(v, _)| v).collect()));
            };
            section("actions", actions, actions_type);
            section("plugins", plugins, plugins_type);
            if let Some((key, value)) = extra {
                markers.push(format!("unknown field `{key}`"));
                valid = false;
                if !extra_first {
                    doc.insert(s(&key), value);
                }
            }
            (Value::Mapping(doc), Expect { valid, markers })
        })
}

/// YAML-looking text: fragments of real configurations, anchors, tags and junk.
fn yaml_soup() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        select(vec![
            "actions:",
            "plugins:",
            "- ",
            "[",
            "]",
            "{",
            "}",
            ", ",
            ": ",
            "\n",
            "  ",
            "name: ",
            "arguments: ",
            "mode: ",
            "allocate",
            "gang",
            "nodeorder",
            "pools:",
            "default:",
            "gpu: spread",
            "&a ",
            "*a",
            "&b ",
            "*b",
            "!!binary ",
            "!!str ",
            "!allocate ",
            "~",
            "null",
            "-1",
            "1e400",
            "99999999999999999999",
            "\"",
            "'",
            "#",
            "---\n",
            "...\n",
            "? ",
            "|\n",
            ">\n",
            "\t",
            "%YAML 1.2\n",
            "<<: *a\n",
            "\u{feff}",
            "🙂",
        ])
        .prop_map(str::to_string),
        ".{0,6}",
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

// ---------------------------------------------------------------------------------------
// Named cases

#[test]
fn the_bundled_configuration_parses_and_runs() {
    let config = SchedulerConfig::from_yaml(DEFAULT_CONFIG_YAML).expect("the default configuration");
    let snap = cluster();
    let outcome = run_cycle(&snap, &config);
    assert!(!outcome.decisions.binds.is_empty(), "the default configuration schedules something");
    run_checked(&snap, &config).unwrap();
}

#[test]
fn errors_name_the_field_that_is_wrong() {
    for (yaml, path) in [
        ("actions: [allocate, teleport]\nplugins: []", "actions[1]"),
        ("actions: 5\nplugins: []", "actions: invalid type"),
        ("actions: [-1]\nplugins: []", "actions[0]"),
        (
            "actions: []\nplugins: [{name: gang}, {name: fairshare, arguments: {mode: fast}}]",
            "plugins[1].arguments.mode",
        ),
        ("actions: []\nplugins: [{name: drf, arguments: {jobOrder: 5}}]", "plugins[0].arguments.jobOrder"),
        ("actions: []\nplugins: [{name: drf, arguments: {jobOrderr: true}}]", "unknown field `jobOrderr`"),
        (
            "actions: []\nplugins: [{name: nodeorder, arguments: {pools: {a: {gpu: 1e400}}}}]",
            "plugins[0].arguments.pools.a.gpu",
        ),
        ("actions: []\nplugins: [{name: gang, arguments: {x: 1}}]", "plugins[0].arguments"),
        ("actions: []\nplugins: [{arguments: {}}]", "plugins[0]: missing field `name`"),
        ("actions: []\nplugins: [teleport]", "plugins[0]"),
        ("actions: []\nplugins: []\nextra: 1", "unknown field `extra`"),
        ("plugins: []", "missing field `actions`"),
        ("", "missing field `actions`"),
        ("[1, 2]", "expected struct SchedulerConfig"),
        ("actions: [allocate, enqueue, allocate]\nplugins: []", "action allocate is listed twice"),
        ("actions: []\nplugins: [{name: gang}, {name: predicates}, {name: gang}]", "plugin gang is listed twice"),
        // A plugin that takes arguments is refused without them, by name, not defaulted.
        ("actions: []\nplugins: [{name: gang}, {name: drf}]", "plugins[1]: missing field `arguments`"),
    ] {
        let err = SchedulerConfig::from_yaml(yaml).expect_err(yaml).to_string();
        assert!(err.starts_with(PREFIX) && err.contains(path), "{yaml:?}: {err}");
    }
}

#[test]
fn alias_bombs_and_deep_nesting_fail_fast() {
    // A "billion laughs" document inside the actions list, and nesting far beyond any real
    // configuration: both must be refused quickly, without exhausting memory or the stack.
    let mut bomb = String::from("actions: [&a0 allocate");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        bomb.push_str(&format!(", &a{i} [{}]", vec![prev; 10].join(", ")));
    }
    bomb.push_str("]\nplugins: []\n");
    // (The YAML parser takes time quadratic in the nesting depth: 10,000 levels take about
    // 0.2 s, 100,000 about 20 s. The file is the admin's, read once at start.)
    let deep = format!("actions: {}allocate{}\nplugins: []\n", "[".repeat(5_000), "]".repeat(5_000));
    let deep_maps = format!("actions: []\nplugins: [{}\n", "{a: ".repeat(5_000));
    for doc in [bomb, deep, deep_maps] {
        let started = Instant::now();
        let result = SchedulerConfig::from_yaml(&doc);
        assert!(result.is_err(), "{:.80}", doc);
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
        let err = result.unwrap_err().to_string();
        assert!(err.starts_with(PREFIX), "{err}");
    }
}

#[test]
fn accepted_unusual_configurations_keep_capacity() {
    // Valid but odd: nothing at all, no predicates, actions out of order, only backfill.
    let snap = cluster();
    for yaml in [
        "actions: []\nplugins: []",
        "actions: [allocate]\nplugins: []",
        "actions: [backfill]\nplugins: []",
        "actions: [backfill, reclaim, preempt, allocate, enqueue]\nplugins: [{name: nodeorder, arguments: {}}, {name: gang}]",
        "actions: [allocate, backfill]\nplugins: [{name: fairshare, arguments: {mode: demandProportional}}]",
    ] {
        let config = SchedulerConfig::from_yaml(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
        run_checked(&snap, &config).unwrap_or_else(|e| panic!("{yaml}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------
// Properties

/// Any valid configuration, as a value.
fn valid_config() -> impl Strategy<Value = SchedulerConfig> {
    let strategy = || select(vec![PlacementStrategy::Binpack, PlacementStrategy::Spread]);
    let pool = move || (strategy(), strategy()).prop_map(|(gpu, cpu)| PoolPlacement { gpu, cpu });
    let plugin = prop_oneof![
        Just(PluginConfig::Priority),
        Just(PluginConfig::Gang),
        Just(PluginConfig::Predicates),
        Just(PluginConfig::Regrow),
        select(vec![FairShareMode::MaxMin, FairShareMode::DemandProportional])
            .prop_map(|mode| PluginConfig::Fairshare(FairShareArgs { mode, ..FairShareArgs::default() })),
        (any::<bool>(), any::<bool>())
            .prop_map(|(job_order, queue_order)| PluginConfig::Drf(DrfConfig { job_order, queue_order })),
        (pool(), prop::collection::btree_map(".{0,8}", pool(), 0..3))
            .prop_map(|(default, pools)| PluginConfig::Nodeorder(PlacementConfig { default, pools })),
    ];
    (Just(ACTIONS.to_vec()).prop_shuffle(), 0usize..=5, prop::collection::vec(plugin, 0..8)).prop_map(
        |(actions, n, plugins)| {
            let actions = actions[..n].iter().map(|a| serde_yaml::from_value(s(a)).expect("an action")).collect();
            let mut unique: Vec<PluginConfig> = Vec::new();
            for p in plugins {
                if !unique.iter().any(|q| q.name() == p.name()) {
                    unique.push(p);
                }
            }
            SchedulerConfig { actions, plugins: unique }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in prop_oneof![yaml_soup(), any::<String>()]) {
        match SchedulerConfig::from_yaml(&text) {
            Ok(c) => {
                // Whatever is accepted obeys the rules the parser promises.
                for (i, a) in c.actions.iter().enumerate() {
                    prop_assert!(!c.actions[..i].contains(a));
                }
                for (i, p) in c.plugins.iter().enumerate() {
                    prop_assert!(c.plugins[..i].iter().all(|q| q.name() != p.name()));
                }
            }
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.starts_with(PREFIX) && e.len() > PREFIX.len(), "{}", e);
            }
        }
        // Scenario overrides take the same input.
        let _ = serde_yaml::from_str::<ConfigOverrides>(&text);
    }

    #[test]
    fn hostile_documents_are_refused_with_the_path_of_a_bad_part((doc, expect) in document()) {
        let text = serde_yaml::to_string(&doc).expect("a YAML document");
        match SchedulerConfig::from_yaml(&text) {
            Ok(config) => {
                prop_assert!(expect.valid, "accepted {:?} though {:?} are wrong", text, expect.markers);
                run_checked(&cluster(), &config)?;
            }
            Err(e) => {
                let e = e.to_string();
                prop_assert!(!expect.valid, "refused a valid document {:?}: {}", text, e);
                prop_assert!(e.starts_with(PREFIX), "{}", e);
                prop_assert!(
                    expect.markers.iter().any(|m| e.contains(m.as_str())),
                    "{:?}: error {:?} names none of {:?}", text, e, expect.markers
                );
            }
        }
    }

    #[test]
    fn valid_configurations_round_trip_and_run(config in valid_config()) {
        let text = serde_yaml::to_string(&config).expect("serializable");
        let parsed = SchedulerConfig::from_yaml(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(&parsed, &config);
        run_checked(&cluster(), &parsed)?;
        // The capacity rule also holds on the scenario overrides' path.
        let mut overridden = SchedulerConfig::default();
        overridden.apply(&ConfigOverrides {
            actions: Some(config.actions.clone()),
            ..ConfigOverrides::default()
        });
        run_checked(&cluster(), &overridden)?;
    }

    #[test]
    fn overrides_with_repeated_actions_run(actions in prop::collection::vec(select(ACTIONS.to_vec()), 0..8)) {
        // Scenario overrides are not checked for repeats like the main file; running an
        // action twice must still keep capacity.
        let text = format!("{{actions: [{}]}}", actions.join(", "));
        let overrides: ConfigOverrides = serde_yaml::from_str(&text).expect("valid overrides");
        let mut config = SchedulerConfig::default();
        config.apply(&overrides);
        let wanted: Vec<ActionName> = actions.iter().map(|a| serde_yaml::from_value(s(a)).expect("an action")).collect();
        prop_assert_eq!(&config.actions, &wanted);
        run_checked(&cluster(), &config)?;
    }
}
