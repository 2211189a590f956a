//! Claiming capacity that evictions are freeing, within allocate.
//!
//! Preempt and reclaim pipeline a job onto the nodes whose pods they evict, but that claim
//! lasts only for the cycle that made it, and evicted pods may take several cycles to
//! terminate. Until they do, the job cannot be placed: the capacity is not idle yet. Without
//! a claim, allocation's passes beyond fair share would hand the idle rest of those nodes to
//! other work first, and the job would need more victims; with slow termination, the same
//! job could lose pods to reclaim again and again.
//!
//! So after the fair-share passes, jobs that still wait within their fair share claim the
//! capacity being freed again, in queue order. Gang minimums come first, then one elastic
//! pod per job. A claim goes only onto nodes with releasing pods, and only where the job
//! fits without evicting anything. Jobs that may not evict claim nothing: in a `StrictFIFO`
//! queue only the first waiting job of each class claims (as in preempt and reclaim), and
//! queues over their fair share claim nothing.

use crate::framework::ShareBound;
use crate::placement::Avail;
use crate::res::Res;
use crate::snapshot::{JobId, NodeId, PodId};

use super::{class, evicting_jobs, jobs_by_queue, select_queue, strict, try_place_all, Ctx};

/// Runs the step; allocate calls it between its fair-share passes and its idle ones.
pub fn run(ctx: &mut Ctx) {
    let ssn = &ctx.ssn;
    let none = Res::zero(ssn.snap.resources.len());
    let releasing: Vec<NodeId> =
        (0..ssn.snap.nodes.len()).filter(|&n| ssn.node_releasing[n].first_exceeding(&none).is_some()).collect();
    if releasing.is_empty() {
        return;
    }
    let minimums = evicting_jobs(ctx);
    claim(ctx, &minimums, &releasing, &|c, j| c.ssn.gang_pods(j));
    let firsts = super::reclaim::first_waiting(ctx);
    let elastic = jobs_by_queue(ctx, |j| {
        let q = ctx.ssn.snap.jobs[j].queue;
        (!strict(ctx, q) || firsts[q][class(ctx, j)] == Some(j))
            && ctx.ssn.job_pipelined[j] == 0
            && ctx.fw.job_ready(ctx.ssn, j)
            && ctx.ssn.pending_pods(j).next().is_some()
    });
    claim(ctx, &elastic, &releasing, &|c, j| c.ssn.pending_pods(j).take(1).collect());
}

/// Serves the jobs listed per queue, most deprived queue first, each once: `pods` of a job
/// are pipelined onto `releasing` nodes when they fit there within the job's fair share.
fn claim(ctx: &mut Ctx, by_queue: &[Vec<JobId>], releasing: &[NodeId], pods: &dyn Fn(&Ctx, JobId) -> Vec<PodId>) {
    let mut cursor = vec![0usize; by_queue.len()];
    loop {
        let heads: Vec<Option<JobId>> = (0..by_queue.len()).map(|q| by_queue[q].get(cursor[q]).copied()).collect();
        let eligible = |q: usize| heads[q].is_some() && !ctx.fw.overused(ctx.ssn, q);
        let Some(q) = select_queue(ctx, &eligible) else { break };
        let job = heads[q].expect("selected queue has a job to serve");
        cursor[q] += 1;
        let wanted = pods(ctx, job);
        if wanted.is_empty() || ctx.ssn.job_pipelined[job] > 0 {
            continue;
        }
        let need = ctx.ssn.sum_requests(&wanted);
        if ctx.fw.allocatable(ctx.ssn, job, &need, ShareBound::FairShare).is_err() {
            continue;
        }
        if let Some(st) = try_place_all(ctx, &wanted, Avail::Releasing(releasing)) {
            ctx.ssn.commit(st);
            ctx.ssn.set_reason(job, "waiting for evicted pods to terminate on the nodes it will use".into());
        }
    }
}
