//! Building a snapshot from its inputs: interning resource names, checking every reference
//! and the queue tree, and laying everything out as index-based arenas.

use std::collections::HashMap;

use drover_api::{ResourceList, CPU, GPU, NODE_POOL_LABEL, PODS};

use crate::clock::Clock;
use crate::ids::{ti_vec, TiVec};
use crate::res::{Res, UNLIMITED};

use super::{
    JobConverter, JobInput, Node, NodeInput, Queue, QueueBounds, QueueId, QueueInput, QueueingStrategy, Snapshot,
    SnapshotError, Topology, TopologyInput, ROOT,
};

/// Builds a snapshot from name-based inputs, interning resource names (no topologies).
pub fn build(nodes: &[NodeInput], queues: &[QueueInput], jobs: &[JobInput]) -> Result<Snapshot, SnapshotError> {
    build_with_topologies(nodes, queues, &[], jobs)
}

/// Builds a snapshot from name-based inputs with the hierarchies jobs may name.
pub fn build_with_topologies(
    nodes: &[NodeInput],
    queues: &[QueueInput],
    topologies: &[TopologyInput],
    jobs: &[JobInput],
) -> Result<Snapshot, SnapshotError> {
    let mut names: Vec<String> = vec![CPU.to_string(), PODS.to_string()];
    let mut intern = |list: &ResourceList| {
        for k in list.0.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
    };
    nodes.iter().for_each(|n| intern(&n.allocatable));
    for q in queues {
        intern(&q.deserved);
        if let Some(l) = &q.limit {
            intern(l);
        }
    }
    jobs.iter().flat_map(|j| &j.tasks).for_each(|t| intern(&t.requests));
    jobs.iter().filter_map(|j| j.min_resources.as_ref()).for_each(&mut intern);
    names[2..].sort();
    let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let n = names.len();
    let vec_of = |list: &ResourceList, fill: i64| {
        let mut r = Res::filled(n, fill);
        for (k, v) in &list.0 {
            r[index[k.as_str()]] = *v;
        }
        r
    };
    let pods_resource = index[PODS];

    let mut pools: Vec<String> =
        nodes.iter().map(|n| n.labels.get(NODE_POOL_LABEL).cloned().unwrap_or_default()).collect();
    pools.sort();
    pools.dedup();
    let mut node_index = HashMap::new();
    let mut snap_nodes = TiVec::with_capacity(nodes.len());
    let mut capacity = Res::zero(n);
    let mut largest_node = Res::zero(n);
    for (i, node) in nodes.iter().enumerate() {
        if node_index.insert(node.name.as_str(), i).is_some() {
            return Err(SnapshotError::Duplicate(format!("node {}", node.name)));
        }
        let allocatable = vec_of(&node.allocatable, 0);
        if !node.unschedulable {
            capacity.add(&allocatable);
            largest_node.max_with(&allocatable);
        }
        let pool_name = node.labels.get(NODE_POOL_LABEL).map(String::as_str).unwrap_or("");
        snap_nodes.push(Node {
            name: node.name.clone(),
            allocatable,
            labels: node.labels.clone(),
            taints: node.taints.clone(),
            unschedulable: node.unschedulable,
            pool: pools.iter().position(|p| p == pool_name).unwrap_or(0),
        });
    }

    let snap_queues = build_queues(queues, n, &vec_of, &index, pods_resource)?;
    let declared = |r: usize| snap_queues.iter().any(|q| q.deserved_declared[r]);
    let none_declared = !(0..n).any(declared);
    let quota_resources = (0..n).map(|r| r != pods_resource && (none_declared || declared(r))).collect();
    let mut snap = Snapshot {
        gpu: index.get(GPU).copied(),
        cpu: index[CPU],
        pods_resource,
        resources: names.clone(),
        pools,
        nodes: snap_nodes,
        queues: snap_queues,
        jobs: TiVec::with_capacity(jobs.len()),
        pods: TiVec::new(),
        capacity,
        largest_node,
        quota_resources,
        topologies: Vec::with_capacity(topologies.len()),
        clock: Clock::default(),
        unix_clock: false,
        past_usage: TiVec::new(),
    };
    for t in topologies {
        if snap.topologies.iter().any(|o| o.name == t.name) {
            return Err(SnapshotError::Duplicate(format!("topology {}", t.name)));
        }
        let built = Topology::build(t, &snap.nodes, n)?;
        snap.topologies.push(built);
    }
    let mut converter = JobConverter::new(&snap);
    for job in jobs {
        converter.push(&mut snap, job)?;
    }
    Ok(snap)
}

pub(super) fn build_queues(
    queues: &[QueueInput],
    n: usize,
    vec_of: &dyn Fn(&ResourceList, i64) -> Res,
    index: &HashMap<&str, usize>,
    pods_resource: usize,
) -> Result<TiVec<QueueId, Queue>, SnapshotError> {
    let mut sorted: Vec<&QueueInput> = queues.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out: TiVec<QueueId, Queue> = ti_vec![Queue {
        name: String::new(),
        parent: None,
        children: Vec::new(),
        depth: 0,
        deserved: Res::zero(n),
        deserved_declared: vec![false; n],
        governed: vec![false; n],
        limit: Res::filled(n, UNLIMITED),
        over_quota_weight: 1,
        reclaimable: true,
        strategy: QueueingStrategy::BestEffortFifo,
        bounds: QueueBounds::default(),
        owner: None,
    }];
    let mut by_name: HashMap<&str, QueueId> = HashMap::new();
    for q in &sorted {
        if by_name.insert(q.name.as_str(), out.next_key()).is_some() {
            return Err(SnapshotError::Duplicate(format!("queue {}", q.name)));
        }
        let mut declared = vec![false; n];
        for k in q.deserved.0.keys() {
            declared[index[k.as_str()]] = true;
        }
        let none_declared = !declared.iter().any(|d| *d);
        let governed = (0..n).map(|r| r != pods_resource && (declared[r] || none_declared)).collect();
        out.push(Queue {
            name: q.name.clone(),
            parent: None,
            children: Vec::new(),
            depth: 0,
            deserved: vec_of(&q.deserved, 0),
            deserved_declared: declared,
            governed,
            limit: q.limit.as_ref().map(|l| vec_of(l, UNLIMITED)).unwrap_or_else(|| Res::filled(n, UNLIMITED)),
            over_quota_weight: q.over_quota_weight,
            reclaimable: q.reclaimable,
            strategy: q.strategy,
            bounds: q.bounds,
            owner: q.owner.clone(),
        });
    }
    for (i, q) in sorted.iter().enumerate() {
        let id = QueueId(i + 1);
        let parent = match q.parent.as_deref() {
            None | Some("") => ROOT,
            Some(p) => *by_name.get(p).ok_or_else(|| SnapshotError::Missing {
                object: format!("queue {}", q.name),
                field: "parent",
                name: p.to_string(),
            })?,
        };
        out[id].parent = Some(parent);
        out[parent].children.push(id);
    }
    for start in out.keys().skip(1) {
        let mut q = start;
        for _ in 0..out.len() {
            match out[q].parent {
                Some(ROOT) => break,
                Some(p) => q = p,
                None => break,
            }
            if q == start {
                return Err(SnapshotError::Cycle(out[start].name.clone()));
            }
        }
        if q != ROOT && out[q].parent != Some(ROOT) {
            return Err(SnapshotError::Cycle(out[start].name.clone()));
        }
    }
    // Parents before children: depths, and minimum run times a queue does not set itself.
    let mut stack = vec![ROOT];
    while let Some(q) = stack.pop() {
        let (depth, inherited) = (out[q].depth, out[q].bounds);
        for c in out[q].children.clone() {
            let child = &mut out[c];
            child.depth = depth + 1;
            child.bounds.preempt_min_runtime = child.bounds.preempt_min_runtime.or(inherited.preempt_min_runtime);
            child.bounds.reclaim_min_runtime = child.bounds.reclaim_min_runtime.or(inherited.reclaim_min_runtime);
            stack.push(c);
        }
    }
    Ok(out)
}
