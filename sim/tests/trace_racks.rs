//! Trace mode with racks (`--nodes-per-rack`): gangs larger than a node land within one rack
//! when one rack can hold them, a gang too large for any rack still runs, and the figures of
//! the replay without topology are exactly those of a replay without racks.

use drover_sim::trace::{self, policy::Policy, racks::Racks, replay, replay::Cluster, rows};
use serde_json::Value;

/// Four 8-GPU nodes; with `nodes_per_rack`, racks of that many nodes.
fn cluster(nodes_per_rack: Option<u32>) -> Cluster {
    let racks = nodes_per_rack.map(|n| Racks { nodes_per_rack: n, racks_per_block: None, aware: true });
    Cluster { racks, ..Cluster::uniform(4, 8, 96) }
}

/// Per job of the replay: (finish, racks its pods spanned when it last started).
fn outcome(text: &str, cluster: &Cluster, policy: Policy) -> Vec<(Option<i64>, Option<u32>)> {
    let jobs = rows::parse("racks.csv", text).unwrap();
    replay::replay(&jobs, cluster, policy).unwrap().jobs.iter().map(|r| (r.finish, r.racks)).collect()
}

/// `a` (one 8-GPU pod, 100 s) arrives at 0 and takes a node of the first rack; the gang `g`
/// (two 8-GPU pods, 50 s) arrives at 10, when three nodes are idle: one in the first rack,
/// two in the second.
const SPLIT: &str = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\na,0,100,1,8\ng,10,50,2,8\n";

#[test]
fn a_gang_that_one_rack_holds_lands_within_one_rack() {
    // Not `greedy`: there each pod is a gang of one, so the first pod of `g` alone picks the
    // tightest rack (beside `a`) and the second waits in it for `a` to end.
    for policy in [Policy::FifoStrict, Policy::FifoBackfill, Policy::Sjf, Policy::Drover] {
        // Racks of two: the second rack is empty, so `g` starts at once (10) inside it.
        assert_eq!(
            outcome(SPLIT, &cluster(Some(2)), policy),
            [(Some(100), Some(1)), (Some(60), Some(1))],
            "{policy:?}"
        );
    }
    // Blind to the racks, the scheduler fills the node beside `a` first and spreads `g` over
    // both racks.
    let blind =
        Cluster { racks: Some(Racks { nodes_per_rack: 2, racks_per_block: None, aware: false }), ..cluster(None) };
    assert_eq!(outcome(SPLIT, &blind, Policy::FifoBackfill), [(Some(100), Some(1)), (Some(60), Some(2))]);
}

#[test]
fn a_gang_waits_for_a_whole_rack_rather_than_spread() {
    // a (10 s), b and c (100 s) fill three nodes at 0; a ends at 10 and leaves one idle node
    // in each rack. The gang g arrives at 20: required within one rack, it waits for b and c
    // to end (100) and runs 100-150 in one rack, where without racks it runs 20-70 over two.
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\n\
                a,0,10,1,8\nb,0,100,1,8\nc,0,100,1,8\ng,20,50,2,8\n";
    let with = outcome(text, &cluster(Some(2)), Policy::FifoBackfill);
    assert_eq!(with[3], (Some(150), Some(1)), "{with:?}");
    let blind =
        Cluster { racks: Some(Racks { nodes_per_rack: 2, racks_per_block: None, aware: false }), ..cluster(None) };
    assert_eq!(outcome(text, &blind, Policy::FifoBackfill)[3], (Some(70), Some(2)));
}

#[test]
fn a_gang_larger_than_any_rack_still_runs_over_as_few_racks_as_it_can() {
    // Three 8-GPU pods on racks of two nodes: no rack holds it, so it requires nothing and
    // runs at once over two racks; it is counted apart, not in the share.
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\nbig,0,50,3,8\n";
    let c = cluster(Some(2));
    assert_eq!(outcome(text, &c, Policy::Drover), [(Some(50), Some(2))]);
    let jobs = rows::parse("big.csv", text).unwrap();
    let run = trace::run(&jobs, &c, &[Policy::Drover]).unwrap();
    let placement = run[0].racks.as_ref().unwrap().placement;
    assert_eq!((placement.gangs, placement.within_rack, placement.larger_than_rack), (0, 0, 1));
}

#[test]
fn jobs_of_one_node_pack_into_the_fullest_rack() {
    // Racks of two; a (4 GPUs) takes the first rack; b (8 GPUs) and c (4 GPUs) follow: c
    // shares a's node and b the other node of that rack, so the second rack stays empty for a
    // gang, which then starts at once inside it.
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\n\
                a,0,100,1,4\nb,10,100,1,8\nc,20,100,1,4\ng,30,50,2,8\n";
    let jobs = rows::parse("pack.csv", text).unwrap();
    let run = replay::replay(&jobs, &cluster(Some(2)), Policy::Drover).unwrap();
    assert_eq!(run.jobs[3].finish, Some(80), "{:?}", run.jobs);
    assert_eq!(run.jobs[3].racks, Some(1));
}

#[test]
fn without_topology_the_figures_are_those_of_a_replay_without_racks() {
    let text = "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod\n\
                a,0,10,1,8\nb,0,100,1,8\nc,0,100,1,8\ng,20,50,2,8\nh,25,40,1,4\n";
    let jobs = rows::parse("same.csv", text).unwrap();
    let plain = trace::to_json(&cluster(None), &trace::run(&jobs, &cluster(None), &trace::policy::ALL).unwrap());
    let racked = trace::to_json(&cluster(Some(2)), &trace::run(&jobs, &cluster(Some(2)), &trace::policy::ALL).unwrap());
    let plain: Value = serde_json::from_str(&plain).unwrap();
    let racked: Value = serde_json::from_str(&racked).unwrap();
    // The report without racks has none of the rack keys.
    assert!(plain["cluster"].get("nodesPerRack").is_none());
    assert_eq!(racked["cluster"]["nodesPerRack"], 2);
    assert_eq!(racked["cluster"]["racks"], 2);
    for policy in trace::policy::ALL {
        let name = policy.name();
        assert!(plain["policies"][name].get("racks").is_none());
        let mut flat = racked["policies"][name]["withoutTopology"].clone();
        assert!(flat["racks"]["multiNodeGangs"].is_number(), "{flat}");
        flat.as_object_mut().unwrap().remove("racks");
        assert_eq!(flat, plain["policies"][name], "{name}");
        // With racks, the gang waits for a whole rack: every other key is the same set.
        let on = racked["policies"][name].as_object().unwrap();
        let keys: Vec<&String> = on.keys().filter(|k| *k != "racks" && *k != "withoutTopology").collect();
        let plain_keys: Vec<&String> = plain["policies"][name].as_object().unwrap().keys().collect();
        assert_eq!(keys, plain_keys);
        assert_eq!(racked["policies"][name]["racks"]["withinOneRack"], 1.0, "{name}");
    }
    let table = trace::to_table(&cluster(None), &trace::run(&jobs, &cluster(None), &trace::policy::ALL).unwrap());
    assert!(!table.contains("racks of"), "{table}");
}
