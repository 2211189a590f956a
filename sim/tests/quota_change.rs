//! Quota changes while work runs converge (issue 23): lowering a queue's deserved quota or
//! its limit evicts nothing by itself; what the queue then runs beyond its new fair share is
//! reclaimed once, when another queue waits for it, and nothing moves after that. The
//! change is made between cycles of one run, as an administrator's edit lands between two
//! scheduling cycles; the clock moves 30 s a cycle, so the regrow delay passes.

use std::path::Path;

use drover_api::GPU;
use drover_scheduler::carry::{carry, Termination};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::session::PodState;
use drover_scheduler::snapshot::{self, JobInput, NodeInput, PodPhaseInput, QueueInput};
use drover_sim::scenario;

/// Seconds between cycles.
const CYCLE_SECONDS: i64 = 30;

/// A run in progress: the queues as they stand, the jobs, the clock.
struct Run {
    queues: Vec<QueueInput>,
    jobs: Vec<JobInput>,
    now: i64,
    nodes: Vec<NodeInput>,
}

impl Run {
    /// qa deserves 6 of the node's 8 GPUs and runs an elastic job on all 8; qb deserves 2 and
    /// waits with an elastic job of 4 (the quota-decrease scenario's cluster, before the
    /// decrease).
    fn start() -> Run {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/quota-decrease-is-reclaimed-once.yaml");
        let s = scenario::load(&path).expect("the scenario is valid");
        let mut run = Run { queues: s.queues, jobs: s.jobs, now: s.now, nodes: s.nodes };
        run.change_queue("qa", |q| q.deserved = gpus(6));
        run.jobs[0].tasks[0].pods.fill(PodPhaseInput::Bound("n1".into()));
        run.jobs[1].tasks[0].pods.fill(PodPhaseInput::Pending);
        run
    }

    /// An administrator's edit of a queue, landing before the next cycle.
    fn change_queue(&mut self, queue: &str, change: impl Fn(&mut QueueInput)) {
        change(self.queues.iter_mut().find(|q| q.name == queue).expect("the queue exists"));
    }

    /// Runs `n` cycles; the pods evicted in each, and the GPUs each job holds (bound or
    /// pipelined) after the last.
    fn cycles(&mut self, n: usize) -> (Vec<usize>, Vec<u32>) {
        let config = SchedulerConfig::default();
        let mut evicted = Vec::new();
        let mut held = Vec::new();
        for _ in 0..n {
            let snap = snapshot::build(&self.nodes, &self.queues, &self.jobs).expect("consistent").at(self.now);
            let out = run_cycle(&snap, &config);
            evicted.push(out.decisions.evictions.len());
            held = snap
                .jobs
                .iter()
                .map(|j| {
                    let pods = j.tasks.iter().flat_map(|t| &t.pods);
                    pods.filter(|&&p| matches!(out.pod_state[p], PodState::Bound(_) | PodState::Allocated(_))).count()
                        as u32
                })
                .collect();
            carry(&mut self.jobs, &snap, &out, Termination::Immediate);
            self.now += CYCLE_SECONDS;
        }
        (evicted, held)
    }
}

fn gpus(n: i64) -> drover_api::ResourceList {
    drover_api::ResourceList([(GPU.to_string(), n)].into())
}

#[test]
fn a_lowered_deserved_quota_is_reclaimed_once_and_then_nothing_moves() {
    let mut run = Run::start();
    let (evicted, held) = run.cycles(6);
    assert_eq!(evicted, [2, 0, 0, 0, 0, 0], "qb reclaims its deserved 2 at once");
    assert_eq!(held, [6, 2]);

    // qa's deserved quota drops from 6 to 2: fair shares become 4 and 4.
    run.change_queue("qa", |q| q.deserved = gpus(2));
    let (evicted, held) = run.cycles(10);
    assert_eq!(evicted, [2, 0, 0, 0, 0, 0, 0, 0, 0, 0], "what qa runs beyond its new share goes once");
    assert_eq!(held, [4, 4]);
}

#[test]
fn a_lowered_limit_evicts_nothing_until_another_queue_waits_for_it() {
    let mut run = Run::start();
    run.change_queue("qa", |q| q.deserved = gpus(2));
    let (_, held) = run.cycles(6);
    assert_eq!(held, [4, 4]);

    // qb's limit drops to 2 while it runs 4. qb's fair share shrinks to 2 (a share never
    // exceeds the limit), qa's grows to 6, and qa still wants its pending elastic pods: they
    // reclaim qb's 2 pods beyond its limit, once.
    run.change_queue("qb", |q| q.limit = Some(gpus(2)));
    let (evicted, held) = run.cycles(10);
    assert_eq!(evicted.iter().sum::<usize>(), 2, "qb loses what it runs beyond its limit, once: {evicted:?}");
    assert_eq!(evicted.iter().position(|&e| e > 0), Some(0), "in the first cycle after the change");
    assert_eq!(held, [6, 2]);

    // With nobody waiting for it, a queue over its new limit keeps what it runs: qa's limit
    // drops to 4 while it runs 6, and qb (at its own limit) wants nothing more.
    run.change_queue("qa", |q| q.limit = Some(gpus(4)));
    let (evicted, held) = run.cycles(10);
    assert_eq!(evicted, [0; 10], "a limit holds work back; it does not evict");
    assert_eq!(held, [6, 2]);
}
