//! Synthetic clusters for benchmarks and scale tests: a queue tree (5 departments x 10
//! projects, or 10 divisions x 10 departments x 19 projects) whose deserved GPU quotas add up
//! to the cluster (root 4 and project 5 of each parent with limits), running one-GPU jobs of
//! 10 spread over the nodes without over-committing any (mostly in small-quota projects that
//! borrowed beyond their quota, 30% of them elastic), and pending one-GPU gangs of 10 spread
//! over the projects in proportion to quota, 30% of them at priority 75 and the rest at 50.
//! The cluster is written as a scenario file, so benchmarks and `drover sim` read exactly the
//! same thing. Generation is deterministic.

use std::fmt::Write as _;

/// GPUs of every node.
pub const GPUS_PER_NODE: i64 = 8;
const GANG: usize = 10;
/// Deserved GPU quota of the projects of a parent, by project index modulo 10, as weights.
const PROJECT_QUOTA: [u64; 10] = [4, 3, 3, 2, 2, 2, 1, 1, 1, 1];
/// How running jobs spread over the projects of a parent (by index modulo 10): the
/// small-quota projects 6-9 borrowed far beyond their quota (reclaim victims), projects 0-2
/// run nothing.
const RUNNING_WEIGHT: [u64; 10] = [0, 0, 0, 1, 1, 1, 5, 5, 5, 5];

/// The queue tree: how many queues the roots' level has and how many children each queue of
/// the levels below has, the last level being the projects jobs run in; and what each
/// level's queues are called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tree {
    fanout: &'static [usize],
    names: &'static [&'static str],
}

impl Tree {
    /// 5 departments x 10 projects: 55 queues (bench sizes A and B).
    pub const DEPARTMENTS: Tree = Tree { fanout: &[5, 10], names: &["dept", "proj"] };
    /// 10 divisions x 10 departments x 19 projects: 2,010 queues in 3 levels (bench size C).
    pub const DIVISIONS: Tree = Tree { fanout: &[10, 10, 19], names: &["div", "dept", "proj"] };

    /// A tree by the name `gen_scale_scenario --tree` takes.
    pub fn named(name: &str) -> Option<Tree> {
        match name {
            "departments" => Some(Tree::DEPARTMENTS),
            "divisions" => Some(Tree::DIVISIONS),
            _ => None,
        }
    }

    fn projects(&self) -> usize {
        self.fanout[self.fanout.len() - 1]
    }

    /// A queue's name from its path of indices (one per level, from the root).
    fn name(&self, path: &[usize]) -> String {
        let parts: Vec<String> = path.iter().zip(self.names).map(|(i, n)| format!("{n}-{i}")).collect();
        parts.join("-")
    }
}

/// Per project of a parent, a weight from `pattern` (by index modulo its length).
fn project_weights(pattern: &[u64], projects: usize) -> Vec<u64> {
    (0..projects).map(|p| pattern[p % pattern.len()]).collect()
}

/// A small deterministic generator (Knuth's MMIX LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut x = self.below(weights.iter().sum());
        for (i, &w) in weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        unreachable!("x is below the sum of weights")
    }
}

struct PlanQueue {
    name: String,
    parent: Option<String>,
    deserved_gpu: i64,
    limit_gpu: Option<i64>,
}

struct PlanJob {
    name: String,
    queue: String,
    priority_class: &'static str,
    priority: i32,
    min_member: u32,
    created_at: i64,
    replicas: u32,
    /// Node index of each running pod, in pod index order (the rest are pending).
    running: Vec<usize>,
}

/// A synthetic cluster, ready to be written as a scenario.
pub struct Plan {
    nodes: usize,
    queues: Vec<PlanQueue>,
    jobs: Vec<PlanJob>,
}

fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

/// `nodes` nodes of 8 GPUs, the queue `tree` whose deserved GPU quotas add up to the cluster,
/// `running` running one-GPU pods as jobs of 10 (no node over-committed) and `pending`
/// pending one-GPU pods in gangs of 10 (minMember 10).
pub fn plan(nodes: usize, running: usize, pending: usize, tree: Tree) -> Result<Plan, String> {
    let total_gpu = nodes as i64 * GPUS_PER_NODE;
    if nodes == 0 || running as i64 > total_gpu {
        return Err(format!("{running} running one-GPU pods do not fit {nodes} nodes of {GPUS_PER_NODE} GPUs"));
    }
    let mut rng = Lcg(0x5eed_d20e);
    let mut queues = Vec::new();
    let roots = tree.fanout[0];
    for (r, deserved) in split_evenly(total_gpu, roots).into_iter().enumerate() {
        // Root 4 may borrow at most half its quota again.
        let limit_gpu = (r == 4).then_some(deserved * 3 / 2);
        add_queues(&tree, &mut queues, vec![r], None, deserved, limit_gpu);
    }
    let running_weight = project_weights(&RUNNING_WEIGHT, tree.projects());
    let pending_weight = project_weights(&PROJECT_QUOTA, tree.projects());
    let leaf = |rng: &mut Lcg, root: usize, weights: &[u64]| {
        let mut path = vec![root];
        for &n in &tree.fanout[1..tree.fanout.len() - 1] {
            path.push(rng.below(n as u64) as usize);
        }
        path.push(rng.weighted(weights));
        tree.name(&path)
    };

    let mut free = vec![GPUS_PER_NODE; nodes];
    let mut jobs = Vec::new();
    let running_jobs = running.div_ceil(GANG);
    for j in 0..running_jobs {
        let replicas = GANG.min(running - j * GANG);
        let queue = leaf(&mut rng, j % roots, &running_weight);
        let hot = rng.below(10) == 0;
        let elastic = rng.below(10) < 3;
        let mut on = Vec::with_capacity(replicas);
        for _ in 0..replicas {
            let mut n = rng.below(nodes as u64) as usize;
            while free[n] == 0 {
                n = (n + 1) % nodes;
            }
            free[n] -= 1;
            on.push(n);
        }
        jobs.push(PlanJob {
            name: format!("run-{j:05}"),
            queue,
            priority_class: if hot { "interactive-preemptible" } else { "train" },
            priority: if hot { 75 } else { 50 },
            min_member: if elastic { replicas.min(8) as u32 } else { replicas as u32 },
            created_at: j as i64,
            replicas: replicas as u32,
            running: on,
        });
    }
    for g in 0..pending.div_ceil(GANG) {
        let replicas = GANG.min(pending - g * GANG);
        let root = rng.below(roots as u64) as usize;
        let queue = leaf(&mut rng, root, &pending_weight);
        let hot = rng.below(10) < 3;
        jobs.push(PlanJob {
            name: format!("gang-{g:05}"),
            queue,
            priority_class: if hot { "interactive-preemptible" } else { "train" },
            priority: if hot { 75 } else { 50 },
            min_member: replicas as u32,
            created_at: (running_jobs + g) as i64,
            replicas: replicas as u32,
            running: Vec::new(),
        });
    }
    Ok(Plan { nodes, queues, jobs })
}

/// `total` in `n` parts, the remainder to the first.
fn split_evenly(total: i64, n: usize) -> Vec<i64> {
    let part = total / n as i64;
    (0..n).map(|i| part + if i == 0 { total - part * n as i64 } else { 0 }).collect()
}

/// Adds the queue at `path` (deserving `deserved` GPUs) and the queues below it, parents
/// before their children: the projects split their parent's quota by [`PROJECT_QUOTA`]
/// (project 5 of each capped at twice its quota), the levels between split it evenly.
fn add_queues(
    tree: &Tree,
    queues: &mut Vec<PlanQueue>,
    path: Vec<usize>,
    parent: Option<String>,
    deserved: i64,
    limit_gpu: Option<i64>,
) {
    let name = tree.name(&path);
    queues.push(PlanQueue { name: name.clone(), parent, deserved_gpu: deserved, limit_gpu });
    let depth = path.len();
    if depth == tree.fanout.len() {
        return;
    }
    let children = tree.fanout[depth];
    let shares = if depth + 1 == tree.fanout.len() {
        let weights = project_weights(&PROJECT_QUOTA, children);
        let sum: u64 = weights.iter().sum();
        let mut shares: Vec<i64> = weights.iter().map(|&w| deserved * w as i64 / sum as i64).collect();
        shares[0] += deserved - shares.iter().sum::<i64>();
        shares
    } else {
        split_evenly(deserved, children)
    };
    for (c, share) in shares.into_iter().enumerate() {
        let project = depth + 1 == tree.fanout.len();
        let limit_gpu = (project && c % 10 == 5).then_some(share * 2);
        let mut child = path.clone();
        child.push(c);
        add_queues(tree, queues, child, Some(name.clone()), share, limit_gpu);
    }
}

// ---------------------------------------------------------------------------------------
// Plan -> scenario YAML.
// ---------------------------------------------------------------------------------------

impl Plan {
    /// Number of jobs.
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The cluster as a scenario file named `name`.
    pub fn to_yaml(&self, name: &str) -> String {
        render(self, name)
    }
}

fn render(plan: &Plan, name: &str) -> String {
    let mut y = String::with_capacity(plan.jobs.len() * 256 + plan.nodes * 128);
    let hot = plan.jobs.iter().filter(|j| j.running.is_empty() && j.priority == 75).count();
    let running_jobs = plan.jobs.iter().filter(|j| !j.running.is_empty()).count();
    let _ = writeln!(y, "name: {name}");
    let _ = writeln!(
        y,
        "description: >\n  Synthetic scale scenario written by sim/examples/gen_scale_scenario.rs:\n  \
         {} nodes x {GPUS_PER_NODE} GPUs, {} queues, {running_jobs} running jobs,\n  \
         {} pending gangs ({hot} of them at priority 75).",
        plan.nodes,
        plan.queues.len(),
        plan.jobs.len() - running_jobs
    );
    let _ = writeln!(y, "cycles: 1");
    let _ = writeln!(y, "nodes:");
    for i in 0..plan.nodes {
        let _ = writeln!(
            y,
            "  - {{name: {}, allocatable: \
             {{cpu: \"64\", memory: 512Gi, nvidia.com/gpu: \"{GPUS_PER_NODE}\", pods: \"110\"}}}}",
            node_name(i)
        );
    }
    let _ = writeln!(y, "queues:");
    for q in &plan.queues {
        let _ = write!(y, "  - {{name: {}", q.name);
        if let Some(p) = &q.parent {
            let _ = write!(y, ", parent: {p}");
        }
        let _ = write!(y, ", deserved: {{nvidia.com/gpu: \"{}\"}}", q.deserved_gpu);
        if let Some(l) = q.limit_gpu {
            let _ = write!(y, ", limit: {{nvidia.com/gpu: \"{l}\"}}");
        }
        let _ = writeln!(y, ", overQuotaWeight: 1}}");
    }
    let _ = writeln!(y, "jobs:");
    for j in &plan.jobs {
        let _ = writeln!(y, "  - name: {}", j.name);
        let _ = writeln!(y, "    queue: {}", j.queue);
        let _ = writeln!(y, "    priorityClass: {}", j.priority_class);
        let _ = writeln!(y, "    minMember: {}", j.min_member);
        let _ = writeln!(y, "    createdAt: {}", j.created_at);
        let _ = writeln!(y, "    tasks:");
        let _ = writeln!(y, "      - name: worker");
        let _ = writeln!(y, "        replicas: {}", j.replicas);
        let _ = writeln!(y, "        requests: {{nvidia.com/gpu: \"1\", cpu: \"6\", memory: 48Gi}}");
        if !j.running.is_empty() {
            let nodes: Vec<String> = j.running.iter().map(|&n| node_name(n)).collect();
            let _ = writeln!(y, "        running: [{}]", nodes.join(", "));
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queues with no children, and the depth of every queue.
    fn leaves_and_depths(plan: &Plan) -> (Vec<&PlanQueue>, Vec<usize>) {
        let is_parent = |q: &PlanQueue| plan.queues.iter().any(|c| c.parent.as_ref() == Some(&q.name));
        let depth = |q: &PlanQueue| {
            let mut d = 1;
            let mut at = q.parent.clone();
            while let Some(p) = at {
                d += 1;
                at = plan.queues.iter().find(|c| c.name == p).and_then(|c| c.parent.clone());
            }
            d
        };
        (plan.queues.iter().filter(|q| !is_parent(q)).collect(), plan.queues.iter().map(depth).collect())
    }

    #[test]
    fn each_tree_has_its_levels_and_its_projects_deserve_the_whole_cluster() {
        for (tree, queues, levels) in [(Tree::DEPARTMENTS, 55, 2), (Tree::DIVISIONS, 2010, 3)] {
            let plan = plan(100, 500, 1000, tree).expect("the sizes fit");
            assert_eq!(plan.queues(), queues);
            let (leaves, depths) = leaves_and_depths(&plan);
            assert_eq!(depths.iter().max(), Some(&levels));
            assert!(leaves.iter().all(|q| q.name.contains("proj-")), "jobs' queues are the projects");
            assert_eq!(leaves.iter().map(|q| q.deserved_gpu).sum::<i64>(), 100 * GPUS_PER_NODE);
            assert!(plan.jobs.iter().all(|j| leaves.iter().any(|q| q.name == j.queue)), "every job in a project");
        }
    }
}
