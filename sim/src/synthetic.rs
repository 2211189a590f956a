//! Synthetic clusters for benchmarks and scale tests: a two-level queue tree of 5
//! departments x 10 projects whose deserved GPU quotas add up to the cluster (department 4
//! and project 5 of each department with limits), running one-GPU jobs of 10 spread over the
//! nodes without over-committing any (mostly in small-quota projects that borrowed beyond
//! their quota, 30% of them elastic), and pending one-GPU gangs of 10 spread over the
//! projects in proportion to quota, 30% of them at priority 75 and the rest at 50. The
//! cluster is written as a scenario file, so benchmarks and `drover sim` read exactly the
//! same thing. Generation is deterministic.

use std::fmt::Write as _;

/// GPUs of every node.
pub const GPUS_PER_NODE: i64 = 8;
const DEPARTMENTS: usize = 5;
const PROJECTS: usize = 10;
const GANG: usize = 10;
/// Deserved GPU quota of the projects of a department, in twentieths of the department's.
const PROJECT_QUOTA: [i64; PROJECTS] = [4, 3, 3, 2, 2, 2, 1, 1, 1, 1];
/// How running jobs spread over the projects of a department: the small-quota projects 6-9
/// borrowed far beyond their quota (reclaim victims), projects 0-2 run nothing.
const RUNNING_WEIGHT: [u64; PROJECTS] = [0, 0, 0, 1, 1, 1, 5, 5, 5, 5];
/// How pending gangs spread over the projects of a department: in proportion to quota.
const PENDING_WEIGHT: [u64; PROJECTS] = [4, 3, 3, 2, 2, 2, 1, 1, 1, 1];

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

fn leaf_name(d: usize, p: usize) -> String {
    format!("dept-{d}-proj-{p}")
}

/// `nodes` nodes of 8 GPUs, 5 departments x 10 projects whose deserved GPU quotas add up to
/// the cluster, `running` running one-GPU pods as jobs of 10 (no node over-committed) and
/// `pending` pending one-GPU pods in gangs of 10 (minMember 10).
pub fn plan(nodes: usize, running: usize, pending: usize) -> Result<Plan, String> {
    let total_gpu = nodes as i64 * GPUS_PER_NODE;
    if nodes == 0 || running as i64 > total_gpu {
        return Err(format!("{running} running one-GPU pods do not fit {nodes} nodes of {GPUS_PER_NODE} GPUs"));
    }
    let mut rng = Lcg(0x5eed_d20e);
    let mut queues = Vec::new();
    let dept_gpu = total_gpu / DEPARTMENTS as i64;
    for d in 0..DEPARTMENTS {
        let deserved = dept_gpu + if d == 0 { total_gpu % DEPARTMENTS as i64 } else { 0 };
        let name = format!("dept-{d}");
        // Department 4 may borrow at most half its quota again.
        let limit_gpu = (d == 4).then_some(deserved * 3 / 2);
        queues.push(PlanQueue { name: name.clone(), parent: None, deserved_gpu: deserved, limit_gpu });
        let shares: Vec<i64> = PROJECT_QUOTA.iter().map(|w| deserved * w / 20).collect();
        let rest = deserved - shares.iter().sum::<i64>();
        for (p, share) in shares.into_iter().enumerate() {
            let deserved_gpu = share + if p == 0 { rest } else { 0 };
            // Project 5 of every department is capped at twice its quota.
            let limit_gpu = (p == 5).then_some(deserved_gpu * 2);
            queues.push(PlanQueue { name: leaf_name(d, p), parent: Some(name.clone()), deserved_gpu, limit_gpu });
        }
    }

    let mut free = vec![GPUS_PER_NODE; nodes];
    let mut jobs = Vec::new();
    let running_jobs = running.div_ceil(GANG);
    for j in 0..running_jobs {
        let replicas = GANG.min(running - j * GANG);
        let d = j % DEPARTMENTS;
        let p = rng.weighted(&RUNNING_WEIGHT);
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
            queue: leaf_name(d, p),
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
        let d = rng.below(DEPARTMENTS as u64) as usize;
        let p = rng.weighted(&PENDING_WEIGHT);
        let hot = rng.below(10) < 3;
        jobs.push(PlanJob {
            name: format!("gang-{g:05}"),
            queue: leaf_name(d, p),
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
