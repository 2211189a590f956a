//! Run:ai's elasticity played over cycles (issue 24): a 16-GPU elastic job on a cluster with
//! 6 free GPUs restarts at 4, then at 8 and at 16 as the build job that holds the rest
//! finishes; it never grows while another job waits; a job that does not ask never shrinks.
//! The cluster is the one of `scenarios/elastic-shrinks-by-half.yaml`.

use std::path::Path;

use drover_scheduler::carry::{carry, Termination};
use drover_scheduler::config::SchedulerConfig;
use drover_scheduler::cycle::run_cycle;
use drover_scheduler::session::PodState;
use drover_scheduler::snapshot::{self, JobInput, NodeInput, PodPhaseInput, QueueInput};
use drover_sim::scenario;

/// A run in progress.
struct Run {
    nodes: Vec<NodeInput>,
    queues: Vec<QueueInput>,
    jobs: Vec<JobInput>,
}

impl Run {
    fn start(file: &str) -> Run {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(file);
        let s = scenario::load(&path).expect("the scenario is valid");
        Run { nodes: s.nodes, queues: s.queues, jobs: s.jobs }
    }

    fn job(&mut self, name: &str) -> &mut JobInput {
        self.jobs.iter_mut().find(|j| j.name == name).expect("the job exists")
    }

    /// The build job finishes `n` of its pods (they leave the cluster).
    fn build_finishes(&mut self, n: usize) {
        let build = self.job("build");
        let left = build.tasks[0].pods.len() - n;
        build.tasks[0].pods.truncate(left);
        build.min_member = build.min_member.min(left as u32);
    }

    /// One cycle; the train job's size and its running pods after it, and the resizes decided.
    fn cycle(&mut self) -> (usize, usize, Vec<(u32, u32)>) {
        let snap = snapshot::build(&self.nodes, &self.queues, &self.jobs).expect("consistent");
        let out = run_cycle(&snap, &SchedulerConfig::default());
        let train = snap.jobs.iter().find(|j| j.name == "train").expect("train");
        let running = train.tasks[0]
            .pods
            .iter()
            .filter(|&&p| matches!(out.pod_state[p], PodState::Bound(_) | PodState::Allocated(_)))
            .count();
        let resizes = out.decisions.resizes.iter().map(|r| (r.from, r.to)).collect();
        carry(&mut self.jobs, &snap, &out, Termination::Immediate);
        (self.job("train").tasks[0].pods.len(), running, resizes)
    }
}

#[test]
fn an_elastic_job_runs_at_four_then_grows_to_eight_and_sixteen_as_capacity_frees() {
    let mut run = Run::start("elastic-shrinks-by-half.yaml");
    assert_eq!(run.cycle(), (4, 0, vec![(16, 4)]), "16 do not fit in 6 free GPUs, nor 8: it restarts at 4");
    assert_eq!(run.cycle(), (4, 4, vec![]), "the 4 run");
    assert_eq!(run.cycle(), (4, 4, vec![]), "2 GPUs free: not enough to double");
    run.build_finishes(4);
    assert_eq!(run.cycle(), (8, 4, vec![(4, 8)]), "6 GPUs free: 4 more fit, it restarts at 8");
    assert_eq!(run.cycle(), (8, 8, vec![]), "the 8 run");
    run.build_finishes(6);
    assert_eq!(run.cycle(), (16, 8, vec![(8, 16)]), "the cluster is free: it restarts at 16, what it asks for");
    assert_eq!(run.cycle(), (16, 16, vec![]));
    assert_eq!(run.cycle(), (16, 16, vec![]), "at what it asks for, it stays");
}

#[test]
fn an_elastic_job_does_not_grow_while_another_job_waits() {
    let mut run = Run::start("elastic-shrinks-by-half.yaml");
    run.cycle();
    run.cycle();
    // A job that does not fit the 2 free GPUs arrives; then 4 GPUs free up, enough for it to
    // double, but somebody waits.
    let mut waiting = run.job("build").clone();
    waiting.name = "eval".into();
    waiting.priority = 0;
    waiting.tasks[0].pods = vec![PodPhaseInput::Pending; 8];
    waiting.min_member = 8;
    run.jobs.push(waiting);
    run.build_finishes(4);
    for _ in 0..3 {
        let (size, running, resizes) = run.cycle();
        assert_eq!((size, running, resizes), (4, 4, vec![]), "it keeps its 4 pods while eval waits");
    }
}

#[test]
fn a_job_that_does_not_ask_never_shrinks() {
    let mut run = Run::start("elastic-never-for-a-job-that-does-not-ask.yaml");
    for _ in 0..5 {
        assert_eq!(run.cycle(), (16, 0, vec![]), "its gang stays 16 and waits");
    }
}
