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
//! pod per job. A claim takes capacity being freed first and idle capacity for the rest of
//! a gang (as the reclaim that freed it pipelined the gang), and only where the job fits
//! without evicting anything. Jobs that may not evict claim nothing: in a `StrictFIFO`
//! queue only the first waiting job of each class claims (as in preempt and reclaim), and
//! queues over their fair share claim nothing.

use crate::ids::{JobId, NodeId, PodId, QueueId, TiSlice};
use crate::placement::Avail;
use crate::plugin::ShareBound;

use super::{
    elastic_evicting_jobs, elastic_waiting, evicting_jobs, serve_in_queue_order, starving, try_place_all, Ctx,
};

/// Runs the step; allocate calls it between its fair-share passes and its idle ones.
pub fn run(ctx: &mut Ctx) {
    let ssn = &ctx.ssn;
    let terminating = |n: NodeId| (0..ssn.snap.resources.len()).any(|r| ssn.node_releasing[n][r] > 0);
    let releasing: Vec<NodeId> = ssn.snap.nodes.keys().filter(|&n| terminating(n)).collect();
    if releasing.is_empty() {
        return;
    }
    let minimums = evicting_jobs(ctx);
    claim(ctx, &minimums, &releasing, &starving, &|c, j| c.ssn.gang_pods(j));
    let elastic = elastic_evicting_jobs(ctx);
    claim(ctx, &elastic, &releasing, &elastic_waiting, &|c, j| c.ssn.pending_pods(j).take(1).collect());
}

/// Serves the jobs listed per queue that still `want` room, most deprived queue first, each
/// once: `pods` of a job are pipelined onto `releasing` nodes, the rest onto idle capacity,
/// when they fit within the job's fair share.
fn claim(
    ctx: &mut Ctx,
    by_queue: &TiSlice<QueueId, Vec<JobId>>,
    releasing: &[NodeId],
    wants: &dyn Fn(&Ctx, JobId) -> bool,
    pods: &dyn Fn(&Ctx, JobId) -> Vec<PodId>,
) {
    let within_share = |c: &Ctx, q: QueueId| c.fw.within_fair_share(c.ssn, q).is_ok();
    serve_in_queue_order(ctx, by_queue, wants, &within_share, &mut |ctx, job| {
        let wanted = pods(ctx, job);
        if wanted.is_empty() {
            return;
        }
        let need = ctx.ssn.sum_requests(&wanted);
        if ctx.fw.allocatable(ctx.ssn, job, &need, ShareBound::FairShare).is_err() {
            return;
        }
        if let Some(st) = try_place_all(ctx, &wanted, Avail::Future(releasing)) {
            ctx.ssn.commit(st);
            ctx.ssn.set_reason(job, "waiting for evicted pods to terminate on the nodes it will use".into());
        }
    });
}
