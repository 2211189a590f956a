//! Topology-aware placement in the core, on clusters built in code: the rules the scenario
//! files also check, plus properties over many generated clusters (a gang's pods always in
//! one domain of its required level; nothing placed on a node lacking the level's label).

use std::collections::BTreeMap;

use drover_api::{ResourceList, CPU, GPU, PODS};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::{run_cycle, CycleOutcome};
use drover_scheduler::ids::JobId;
use drover_scheduler::session::PodState;
use drover_scheduler::snapshot::{
    self, Constraints, JobInput, JobPhase, LevelInput, NodeInput, PodPhaseInput, QueueBounds, QueueInput,
    QueueingStrategy, SlicesInput, Snapshot, TaskInput, TopologyInput, TopologyRequestInput,
};

fn gpus(n: i64) -> ResourceList {
    ResourceList(BTreeMap::from([(GPU.to_string(), n), (CPU.to_string(), n * 1000)]))
}

/// A node with `gpu` GPUs in block `block` and rack `rack` (empty: no such label).
fn node(name: &str, gpu: i64, block: &str, rack: &str) -> NodeInput {
    let mut labels = BTreeMap::new();
    if !block.is_empty() {
        labels.insert("block".to_string(), block.to_string());
    }
    if !rack.is_empty() {
        labels.insert("rack".to_string(), rack.to_string());
    }
    let mut allocatable = gpus(gpu);
    allocatable.0.insert(PODS.to_string(), 110);
    allocatable.0.insert(CPU.to_string(), 64_000);
    NodeInput { name: name.into(), allocatable, labels, taints: Vec::new(), unschedulable: false }
}

fn topology() -> TopologyInput {
    TopologyInput {
        name: "default".into(),
        levels: vec![
            LevelInput { name: "block".into(), node_label: "block".into() },
            LevelInput { name: "rack".into(), node_label: "rack".into() },
        ],
    }
}

fn request(required: Option<&str>, preferred: Option<&str>) -> Option<TopologyRequestInput> {
    Some(TopologyRequestInput {
        topology: "default".into(),
        required: required.map(String::from),
        preferred: preferred.map(String::from),
    })
}

/// A job of `pods` pods of `gpu` GPUs each; `running` names the nodes of its first pods.
fn job(name: &str, pods: usize, gpu: i64, min: u32, running: &[&str], priority: i32) -> JobInput {
    let mut phases: Vec<PodPhaseInput> = running.iter().map(|n| PodPhaseInput::Bound(n.to_string())).collect();
    phases.resize(pods, PodPhaseInput::Pending);
    JobInput {
        name: name.into(),
        namespace: "ns".into(),
        queue: "team".into(),
        priority_class: "train".into(),
        priority,
        preemptible: true,
        min_member: min,
        min_resources: None,
        created_at: 0,
        phase: if running.is_empty() { JobPhase::Pending } else { JobPhase::Running },
        tasks: vec![TaskInput {
            name: "w".into(),
            min_available: 0,
            requests: gpus(gpu),
            constraints: Constraints::default(),
            pods: phases,
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

fn build(nodes: &[NodeInput], jobs: &[JobInput]) -> Snapshot {
    let team = QueueInput {
        name: "team".into(),
        parent: None,
        deserved: ResourceList::default(),
        limit: None,
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    };
    snapshot::build_with_topologies(nodes, &[team], &[topology()], jobs).expect("a valid cluster")
}

fn run(nodes: &[NodeInput], jobs: &[JobInput]) -> (Snapshot, CycleOutcome) {
    let snap = build(nodes, jobs);
    let out = run_cycle(&snap, &SchedulerConfig::default());
    (snap, out)
}

/// Node names of the job's bound or newly placed pods, in pod order.
fn placed(snap: &Snapshot, out: &CycleOutcome, job: &str) -> Vec<String> {
    let j = snap.jobs.iter().position(|j| j.name == job).expect("job exists");
    snap.jobs[JobId(j)]
        .tasks
        .iter()
        .flat_map(|t| &t.pods)
        .filter_map(|&p| match out.pod_state[p] {
            PodState::Bound(n) | PodState::Allocated(n) | PodState::Pipelined(n) => Some(snap.nodes[n].name.clone()),
            _ => None,
        })
        .collect()
}

fn reason(snap: &Snapshot, out: &CycleOutcome, job: &str) -> String {
    let j = snap.jobs.iter().position(|j| j.name == job).expect("job exists");
    out.reasons[JobId(j)].clone().unwrap_or_default()
}

/// Four racks of two 8-GPU nodes; rack r7 has one node with 4 GPUs used, every other rack one
/// node fully used: a gang of 2 x 8 GPUs that requires one rack waits, and says which rack
/// came closest and how much of the gang it holds.
#[test]
fn a_gang_no_rack_holds_waits_naming_the_best_rack() {
    let mut nodes = Vec::new();
    for r in ["r1", "r4", "r7", "r9"] {
        nodes.push(node(&format!("{r}-a"), 8, "b1", r));
        nodes.push(node(&format!("{r}-b"), 8, "b1", r));
    }
    let mut jobs = vec![
        job("fill-r1", 1, 8, 1, &["r1-a"], 50),
        job("fill-r4", 1, 8, 1, &["r4-a"], 50),
        job("fill-r9", 1, 8, 1, &["r9-a"], 50),
        job("half-r7", 1, 4, 1, &["r7-a"], 50),
    ];
    let mut gang = job("gang", 2, 8, 2, &[], 50);
    gang.topology = request(Some("rack"), None);
    jobs.push(gang);
    let (snap, out) = run(&nodes, &jobs);
    assert!(placed(&snap, &out, "gang").is_empty(), "the gang's pods would straddle racks");
    let why = reason(&snap, &out, "gang");
    assert!(why.contains("needs 2 pod(s) x 8 nvidia.com/gpu within one rack"), "{why}");
    assert!(why.contains("best rack b1/r1 holds 1 of 2") || why.contains("holds 1 of 2"), "{why}");
    assert!(why.contains("4 rack(s) checked"), "{why}");
    assert!(why.contains("fragmented"), "12 GPUs are free in r7 alone: {why}");
}

/// Racks of 18 nodes x 4 GPUs (72 GPUs each): a gang of 20 x 4 GPUs that requires one rack is
/// refused at admission, whatever frees up.
#[test]
fn a_gang_larger_than_any_rack_is_not_admitted() {
    let nodes: Vec<NodeInput> =
        (0..36).map(|i| node(&format!("n{i}"), 4, "b1", if i < 18 { "r1" } else { "r2" })).collect();
    let mut gang = job("big", 20, 4, 20, &[], 50);
    gang.topology = request(Some("rack"), None);
    let (snap, out) = run(&nodes, &[gang]);
    assert!(placed(&snap, &out, "big").is_empty());
    let why = reason(&snap, &out, "big");
    assert!(why.contains("not admitted"), "{why}");
    assert!(why.contains("largest rack has 72 nvidia.com/gpu"), "{why}");
    assert_eq!(out.job_phase[JobId(0)], JobPhase::Pending);
}

/// Two racks, r1 half full, r2 empty: single-GPU pods that ask for no topology fill r1, and
/// r2 stays empty for a gang that needs a whole rack.
#[test]
fn pods_without_topology_fill_the_fullest_rack() {
    let mut nodes = Vec::new();
    for i in 0..5 {
        nodes.push(node(&format!("r2-{i}"), 8, "b1", "r2"));
    }
    for i in 0..5 {
        nodes.push(node(&format!("r1-{i}"), 8, "b1", "r1"));
    }
    let mut jobs: Vec<JobInput> =
        (0..5).map(|i| job(&format!("half-{i}"), 1, 4, 1, &[&format!("r1-{i}")], 50)).collect();
    for i in 0..20 {
        let mut j = job(&format!("one-{i}"), 1, 1, 1, &[], 50);
        j.created_at = i;
        jobs.push(j);
    }
    let (snap, out) = run(&nodes, &jobs);
    for i in 0..20 {
        let at = placed(&snap, &out, &format!("one-{i}"));
        assert_eq!(at.len(), 1, "one-{i} runs");
        assert!(at[0].starts_with("r1-"), "one-{i} went to {at:?}: r2 should stay empty");
    }
}

/// A node missing the rack label is never used for a gang that requires a rack, and the
/// reason counts it.
#[test]
fn a_node_without_the_level_label_is_not_a_place_and_is_counted() {
    let nodes = vec![node("labelled", 8, "b1", "r1"), node("busy", 8, "b1", "r1"), node("bare", 8, "b1", "")];
    let mut gang = job("gang", 2, 8, 2, &[], 50);
    gang.topology = request(Some("rack"), None);
    let (snap, out) = run(&nodes, &[job("busy", 1, 8, 1, &["busy"], 50), gang]);
    assert!(placed(&snap, &out, "gang").is_empty());
    let why = reason(&snap, &out, "gang");
    assert!(why.contains("1 node(s) without a rack label"), "{why}");
}

/// An elastic job (minimum 8) running in rack r1 grows to 12 with 2 slots free in r1: 2 more
/// start in r1, 2 wait, although r2 is empty; nothing moves.
#[test]
fn running_pods_pin_the_domain_and_elastic_pods_grow_only_there() {
    let mut nodes: Vec<NodeInput> = (0..5).map(|i| node(&format!("r1-{i}"), 2, "b1", "r1")).collect();
    nodes.extend((0..5).map(|i| node(&format!("r2-{i}"), 2, "b1", "r2")));
    let running: Vec<String> = (0..4).flat_map(|i| [format!("r1-{i}"), format!("r1-{i}")]).collect();
    let running: Vec<&str> = running.iter().map(String::as_str).collect();
    let mut elastic = job("elastic", 12, 1, 8, &running, 50);
    elastic.topology = request(Some("rack"), None);
    let (snap, out) = run(&nodes, &[elastic]);
    let at = placed(&snap, &out, "elastic");
    assert_eq!(at.len(), 10, "8 running + 2 placed: {at:?}");
    assert!(at.iter().all(|n| n.starts_with("r1-")), "{at:?}");
    assert!(out.decisions.evictions.is_empty());
}

/// A gang that prefers one rack but requires only its block spreads over the fewest racks
/// when no rack holds it.
#[test]
fn preferred_level_spreads_over_the_fewest_racks() {
    let mut nodes = Vec::new();
    for (r, count) in [("r1", 1), ("r2", 3), ("r3", 2)] {
        for i in 0..count {
            nodes.push(node(&format!("{r}-{i}"), 8, "b1", r));
        }
    }
    let mut gang = job("gang", 4, 8, 4, &[], 50);
    gang.topology = request(Some("block"), Some("rack"));
    let (snap, out) = run(&nodes, &[gang]);
    let at = placed(&snap, &out, "gang");
    assert_eq!(at.len(), 4, "{}", reason(&snap, &out, "gang"));
    let racks: std::collections::BTreeSet<&str> = at.iter().map(|n| &n[..2]).collect();
    assert_eq!(racks.len(), 2, "3 in r2 and 1 more rack: {at:?}");
    assert!(at.iter().filter(|n| n.starts_with("r2")).count() == 3, "{at:?}");
}

/// Slices of 2 pods each must share a node: 4 pods of 4 GPUs on nodes with 8 free land two per
/// node, and a node with room for only one pod of a slice is not used for it.
#[test]
fn slices_keep_consecutive_pods_together() {
    let nodes = vec![node("a", 8, "b1", "r1"), node("b", 4, "b1", "r1"), node("c", 8, "b1", "r1")];
    let mut gang = job("sliced", 4, 4, 4, &[], 50);
    gang.topology = request(Some("rack"), None);
    gang.tasks[0].slices = Some(SlicesInput { size: 2, required: "node".into() });
    let (snap, out) = run(&nodes, &[gang]);
    let at = placed(&snap, &out, "sliced");
    assert_eq!(at.len(), 4, "{}", reason(&snap, &out, "sliced"));
    assert_eq!(at[0], at[1], "pods 0-1 share a node: {at:?}");
    assert_eq!(at[2], at[3], "pods 2-3 share a node: {at:?}");
    assert!(!at.contains(&"b".to_string()), "{at:?}");
}

/// Three racks of four 4-GPU nodes full of priority-30 single-GPU jobs (`low-<rack>-<k>`, in
/// node order) but for 3 free GPUs in r2 and 2 in r3.
fn three_racks_of_low_priority_pods() -> (Vec<NodeInput>, Vec<JobInput>) {
    let mut nodes = Vec::new();
    let mut jobs = Vec::new();
    for (r, free) in [("r1", 0), ("r2", 3), ("r3", 2)] {
        for i in 0..4 {
            nodes.push(node(&format!("{r}-{i}"), 4, "b1", r));
        }
        for k in 0..(16 - free) {
            let mut j = job(&format!("low-{r}-{k}"), 1, 1, 1, &[&format!("{r}-{}", k / 4)], 30);
            j.created_at = k as i64;
            jobs.push(j);
        }
    }
    (nodes, jobs)
}

/// Three racks of four 4-GPU nodes full of priority-30 single-GPU jobs but for 3 free GPUs in
/// r2 and 2 in r3: a priority-65 gang of 11 x 1 GPU that requires one rack evicts only inside
/// one rack, and the fewest pods (8, in r2), and is pipelined there.
#[test]
fn preemption_evicts_inside_one_rack_the_fewest() {
    let (nodes, mut jobs) = three_racks_of_low_priority_pods();
    let mut gang = job("urgent", 11, 1, 11, &[], 65);
    gang.topology = request(Some("rack"), None);
    gang.created_at = 100;
    jobs.push(gang);
    let (snap, out) = run(&nodes, &jobs);
    let evicted: Vec<String> = out
        .decisions
        .evictions
        .iter()
        .filter_map(|e| match out.pod_state[e.0] {
            PodState::Releasing(n) => Some(snap.nodes[n].name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(evicted.len(), 8, "{evicted:?} {}", reason(&snap, &out, "urgent"));
    assert!(evicted.iter().all(|n| n.starts_with("r2-")), "{evicted:?}");
    let at = placed(&snap, &out, "urgent");
    assert_eq!(at.len(), 11);
    assert!(at.iter().all(|n| n.starts_with("r2-")), "{at:?}");
}

/// Rack r1 has two 4-GPU nodes full of priority-50 single-GPU jobs, rack r2 one 4-GPU node
/// full of priority-10 ones: r1 has the most capacity to free and is ranked first, but a
/// priority-65 gang of 4 x 1 GPU that requires one rack evicts the four priority-10 jobs in
/// r2, the rack where room costs least, and nothing in r1.
#[test]
fn preemption_takes_the_cheapest_rack_not_the_roomiest() {
    let mut nodes = Vec::new();
    let mut jobs = Vec::new();
    for (rack, count, priority) in [("r1", 2, 50), ("r2", 1, 10)] {
        for i in 0..count {
            let name = format!("{rack}-{i}");
            nodes.push(node(&name, 4, "b1", rack));
            for k in 0..4 {
                jobs.push(job(&format!("p{priority}-{i}-{k}"), 1, 1, 1, &[name.as_str()], priority));
            }
        }
    }
    let mut gang = job("urgent", 4, 1, 4, &[], 65);
    gang.topology = request(Some("rack"), None);
    jobs.push(gang);
    let (snap, out) = run(&nodes, &jobs);
    let evicted: Vec<&str> =
        out.decisions.evictions.iter().map(|e| snap.jobs[snap.pods[e.0].job].name.as_str()).collect();
    assert_eq!(evicted.len(), 4, "{evicted:?} {}", reason(&snap, &out, "urgent"));
    assert!(evicted.iter().all(|j| j.starts_with("p10-")), "{evicted:?}");
    let at = placed(&snap, &out, "urgent");
    assert_eq!(at, vec!["r2-0"; 4]);
}

/// Two racks of two 4-GPU nodes, each rack with one node of priority-70 work and one of
/// priority-30 work: a priority-65 gang of 2 x 4 GPUs that requires one rack finds no rack to
/// free, but the same gang without topology, after it in the queue, still preempts the two
/// priority-30 pods (a failure under a rack requirement says nothing of a gang without one).
#[test]
fn a_gang_that_finds_no_rack_does_not_stop_a_gang_without_topology() {
    let mut nodes = Vec::new();
    let mut jobs = Vec::new();
    for r in ["r1", "r2"] {
        nodes.push(node(&format!("{r}-0"), 4, "b1", r));
        nodes.push(node(&format!("{r}-1"), 4, "b1", r));
        jobs.push(job(&format!("high-{r}"), 1, 4, 1, &[&format!("{r}-0")], 70));
        jobs.push(job(&format!("low-{r}"), 1, 4, 1, &[&format!("{r}-1")], 30));
    }
    let mut racked = job("racked", 2, 4, 2, &[], 65);
    racked.topology = request(Some("rack"), None);
    racked.created_at = 10;
    jobs.push(racked);
    let mut anywhere = job("anywhere", 2, 4, 2, &[], 65);
    anywhere.created_at = 20;
    jobs.push(anywhere);
    let (snap, out) = run(&nodes, &jobs);
    assert!(placed(&snap, &out, "racked").is_empty());
    let mut at = placed(&snap, &out, "anywhere");
    at.sort();
    assert_eq!(at, ["r1-1", "r2-1"], "{}", reason(&snap, &out, "anywhere"));
    assert_eq!(out.decisions.evictions.len(), 2);
}

/// A gang that requires one rack reserves the nodes of the rack where it starts soonest, not
/// the two nodes anywhere that free first: r1-a frees at 10 and r2-a at 20 (together the
/// soonest pair), but r2 frees both nodes at 30 and r1 only at 100.
#[test]
fn a_reservation_holds_one_rack() {
    let nodes = vec![
        node("r1-a", 8, "b1", "r1"),
        node("r1-b", 8, "b1", "r1"),
        node("r2-a", 8, "b1", "r2"),
        node("r2-b", 8, "b1", "r2"),
    ];
    let mut jobs = Vec::new();
    for (n, end) in [("r1-a", 1010), ("r1-b", 1100), ("r2-a", 1020), ("r2-b", 1030)] {
        let mut busy = job(&format!("busy-{n}"), 1, 8, 1, &[n], 50);
        busy.ends_at = Some(end);
        jobs.push(busy);
    }
    let mut gang = job("gang", 2, 8, 2, &[], 50);
    gang.topology = request(Some("rack"), None);
    jobs.push(gang);
    let snap = build(&nodes, &jobs).at(1000);
    let out = run_cycle(&snap, &SchedulerConfig::default());
    let r = out.reservations.first().expect("the gang reserves");
    let names: Vec<&str> = r.nodes.iter().map(|(n, _)| snap.nodes[*n].name.as_str()).collect();
    assert_eq!(names, ["r2-a", "r2-b"]);
    assert_eq!(r.start, 1030);
}

/// After a leader kill the new leader sees the victims in r2 still terminating: it pipelines
/// the gang into r2 again and evicts nothing more, although r1 and r3 hold more evictable
/// pods of lower priority than the gang.
#[test]
fn a_new_leader_keeps_the_rack_victims_are_leaving() {
    let (nodes, mut jobs) = three_racks_of_low_priority_pods();
    // The 8 victims the first leader chose in r2 are still terminating.
    for j in jobs.iter_mut().filter(|j| j.name.starts_with("low-r2-")).take(8) {
        let PodPhaseInput::Bound(at) = j.tasks[0].pods[0].clone() else { unreachable!("low jobs run") };
        j.tasks[0].pods = vec![PodPhaseInput::Releasing(at)];
        j.phase = JobPhase::Pending;
    }
    let mut gang = job("urgent", 11, 1, 11, &[], 65);
    gang.topology = request(Some("rack"), None);
    gang.phase = JobPhase::Inqueue;
    jobs.push(gang);
    let (snap, out) = run(&nodes, &jobs);
    assert!(out.decisions.evictions.is_empty(), "{:?}", reason(&snap, &out, "urgent"));
    let at = placed(&snap, &out, "urgent");
    assert_eq!(at.len(), 11, "{}", reason(&snap, &out, "urgent"));
    assert!(at.iter().all(|n| n.starts_with("r2-")), "{at:?}");
}

/// The seed's NVLink rule: n1 has 2 NVLink pairs (4 GPUs), n2 has 4 (8 GPUs); with
/// `min-nvlink-gpus: 4`, an 8-GPU pod fits only n2, a 4-GPU pod either, and a 2-GPU pod is
/// refused outright.
#[test]
fn nvlink_pairs_decide_where_a_pod_fits() {
    let nvlink = |name: &str, pairs: &str| {
        let mut n = node(name, 8, "", "");
        n.labels.insert(drover_api::topology::NVLINK_PAIRS_LABEL.into(), pairs.into());
        n
    };
    let nodes = vec![nvlink("n1", "2"), nvlink("n2", "4")];
    let linked = |name: &str, gpu: i64| {
        let mut j = job(name, 1, gpu, 1, &[], 50);
        j.tasks[0].constraints.min_nvlink_gpus = Some(4);
        j
    };
    let (snap, out) = run(&nodes, &[linked("eight", 8), linked("two", 2)]);
    assert_eq!(placed(&snap, &out, "eight"), ["n2"]);
    assert!(placed(&snap, &out, "two").is_empty());
    assert!(
        reason(&snap, &out, "two").contains("pod requests 2 GPUs but requires 4 with NVLink"),
        "{}",
        reason(&snap, &out, "two")
    );
    let (snap, out) = run(&nodes, &[linked("four-a", 4), linked("four-b", 4), linked("four-c", 4)]);
    let mut at: Vec<String> = ["four-a", "four-b", "four-c"].iter().flat_map(|j| placed(&snap, &out, j)).collect();
    at.sort();
    assert_eq!(at.len(), 3, "4-GPU pods fit either node");
    assert!(at.contains(&"n1".to_string()) && at.contains(&"n2".to_string()), "{at:?}");
    let (snap, out) = run(&[nvlink("n1", "2")], &[linked("eight", 8)]);
    let why = reason(&snap, &out, "eight");
    assert!(why.contains("1 node(s) only have 4 NVLink-connected GPUs, the pod needs 8"), "{why}");
}

/// Consolidation seats a gang that requires a rack inside one rack: r1's three nodes have 4
/// of 8 GPUs free each (room in total, split), r2 is full of work that cannot move; moving one
/// 4-GPU pod from one r1 node to another frees a whole node there for the gang's 8-GPU pod,
/// and its 4-GPU partner takes the third.
#[test]
fn consolidation_frees_room_inside_the_required_rack() {
    let nodes = vec![
        node("r1-a", 8, "b1", "r1"),
        node("r1-b", 8, "b1", "r1"),
        node("r1-c", 8, "b1", "r1"),
        node("r2-a", 8, "b1", "r2"),
    ];
    let mut fixed = job("fixed", 1, 8, 1, &["r2-a"], 50);
    fixed.preemptible = false;
    let mut gang = job("gang", 1, 8, 1, &[], 50);
    gang.tasks[0].pods = vec![PodPhaseInput::Pending];
    gang.topology = request(Some("rack"), None);
    let mut partner = gang.tasks[0].clone();
    partner.name = "p".into();
    partner.requests = gpus(4);
    gang.tasks.push(partner);
    gang.min_member = 2;
    let small = |n: &str| job(&format!("small-{n}"), 1, 4, 1, &[n], 50);
    let jobs = vec![small("r1-a"), small("r1-b"), small("r1-c"), fixed, gang];
    let snap = build(&nodes, &jobs);
    let mut config = SchedulerConfig::default();
    config.actions.insert(2, drover_scheduler::config::ActionName::Consolidation);
    let out = run_cycle(&snap, &config);
    assert_eq!(out.decisions.evictions.len(), 1, "{}", reason(&snap, &out, "gang"));
    let at = placed(&snap, &out, "gang");
    assert_eq!(at.len(), 2, "{}", reason(&snap, &out, "gang"));
    assert!(at.iter().all(|n| n.starts_with("r1-")), "{at:?}");
}

/// A gang's kept claim holds its rack while another rack is freeing capacity too (a drain):
/// r2 holds the gang's 8 victims, still terminating, and its claim (pods nominated to r2's
/// nodes); r1's 11 pods of an unrelated job are terminating as well. Both racks will have room
/// for exactly 11 GPUs. With the claim, the gang is pipelined into r2 again; without it, the
/// capacity freed in r1 would do as well, and the gang goes there.
#[test]
fn a_kept_claim_keeps_its_rack_while_another_rack_frees_capacity() {
    let mut nodes = Vec::new();
    let mut jobs = Vec::new();
    for r in ["r1", "r2"] {
        for i in 0..4 {
            nodes.push(node(&format!("{r}-{i}"), 4, "b1", r));
        }
    }
    // r1: a drained job's 11 pods terminating, 5 GPUs of priority-70 work.
    let mut drained = job("drained", 11, 1, 11, &[], 50);
    drained.tasks[0].pods = (0..11).map(|k| PodPhaseInput::Releasing(format!("r1-{}", k / 4))).collect();
    jobs.push(drained);
    jobs.push(job("high", 5, 1, 5, &["r1-2", "r1-3", "r1-3", "r1-3", "r1-3"], 70));
    // r2: the gang's 8 victims terminating, 5 priority-70 pods, 3 GPUs free.
    let mut victims = job("victims", 8, 1, 8, &[], 30);
    victims.tasks[0].pods = (0..8).map(|k| PodPhaseInput::Releasing(format!("r2-{}", k / 4))).collect();
    jobs.push(victims);
    jobs.push(job("high-2", 5, 1, 5, &["r2-2", "r2-3", "r2-3", "r2-3", "r2-3"], 70));
    let mut gang = job("urgent", 11, 1, 11, &[], 65);
    gang.topology = request(Some("rack"), None);
    gang.phase = JobPhase::Inqueue;
    let claim = ["r2-0", "r2-0", "r2-0", "r2-0", "r2-1", "r2-1", "r2-1", "r2-1", "r2-2", "r2-2", "r2-2"];
    gang.tasks[0].pods = claim.iter().map(|n| PodPhaseInput::Nominated(n.to_string())).collect();
    jobs.push(gang);

    let (snap, out) = run(&nodes, &jobs);
    assert!(out.decisions.evictions.is_empty(), "{:?}", reason(&snap, &out, "urgent"));
    let at = placed(&snap, &out, "urgent");
    assert_eq!(at.len(), 11, "{}", reason(&snap, &out, "urgent"));
    assert!(at.iter().all(|n| n.starts_with("r2-")), "the claim keeps r2: {at:?}");

    let gang = jobs.last_mut().expect("the gang");
    gang.tasks[0].pods = vec![PodPhaseInput::Pending; 11];
    let (snap, out) = run(&nodes, &jobs);
    let at = placed(&snap, &out, "urgent");
    assert!(at.len() == 11 && at.iter().all(|n| n.starts_with("r1-")), "without the claim, r1 does: {at:?}");
}
