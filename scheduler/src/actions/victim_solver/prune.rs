//! Pruning a victim set that makes room for a gang: victims without which the gang still
//! fits are spared. Each victim is taken back alone (its evictions are their own statement)
//! and the gang tried without it, latest victim first; inside a domain, the gang is tried
//! only once the domain could hold it by count without that victim (see [`DomainRoom`]).

use crate::ids::{NodeId, PodId};
use crate::placement::Avail;
use crate::plugin::Victim;
use crate::session::{EvictReason, Statement};
use crate::snapshot::JobId;

use super::domain_room::{cluster_could_hold, DomainRoom};
use super::{evict_unit, freed_within, key_need, try_place_all, Ctx};

/// Sets larger than this are kept whole (pruning tries the gang once per victim).
const MAX_PRUNE: usize = 32;

/// A domain the gang must fit inside: its nodes, its room for the gang before anything is
/// evicted, and which of its nodes the gang may use.
pub type Domain<'d, 's> = (&'d [NodeId], DomainRoom<'d, 's>, &'d dyn Fn(NodeId) -> bool);

/// Drops from a working victim set (in eviction order) each victim without which the gang
/// still fits, latest first, then applies the set kept and pipelines the gang; returns the
/// statement and the set kept. Without the latest victim the set is one its search tried
/// and found short; without the only victim nothing is freed.
pub fn spare_unneeded<'v>(
    ctx: &mut Ctx,
    gang: &[PodId],
    chosen: Vec<&'v Victim>,
    why: (EvictReason, JobId),
    fits: &dyn Fn(&Ctx) -> bool,
    domain: Option<Domain<'_, '_>>,
) -> Option<(Statement, Vec<&'v Victim>)> {
    let pruning = Pruning { gang, why, fits, domain };
    let chosen = if chosen.len() > 1 && chosen.len() <= MAX_PRUNE { pruning.prune(ctx, chosen) } else { chosen };
    pruning.apply(ctx, &chosen).map(|st| (st, chosen))
}

/// What a victim set is pruned for: the gang, why its victims go, the bound on the gang's
/// queue, and the domain it must fit inside.
struct Pruning<'a, 's> {
    gang: &'a [PodId],
    why: (EvictReason, JobId),
    fits: &'a dyn Fn(&Ctx) -> bool,
    domain: Option<Domain<'a, 's>>,
}

/// One victim of the set being pruned: its evictions while they stand, the nodes they free,
/// and whether it is still in the set.
struct Taken<'v> {
    victim: &'v Victim,
    st: Option<Statement>,
    nodes: Vec<NodeId>,
    kept: bool,
}

impl Pruning<'_, '_> {
    /// The set without the victims the gang does not need. The books are sums, so taking
    /// one victim's evictions back leaves them as applying the set without it would; except
    /// that a whole-job victim later in the set evicts an earlier victim's pod of the same
    /// job anyway, so that earlier victim leaves the set with its pod still evicted, without
    /// a try.
    fn prune<'v>(&self, ctx: &mut Ctx, chosen: Vec<&'v Victim>) -> Vec<&'v Victim> {
        let mut taken: Vec<Taken> = chosen.iter().map(|&v| evict(ctx, v, self.why)).collect();
        let mut room = self.domain.as_ref().map(|(_, room, usable)| {
            let mut room = room.clone();
            taken.iter().flat_map(|t| &t.nodes).for_each(|&n| room.update(ctx.ssn, n, usable));
            room
        });
        for k in (0..taken.len() - 1).rev() {
            let v = taken[k].victim;
            if v.elastic && taken[k + 1..].iter().any(|t| t.kept && t.victim.job == v.job && !t.victim.elastic) {
                taken[k].kept = false;
                continue;
            }
            // A victim without which the domain could not hold the gang by count stays, its
            // evictions untouched (taking them back and making them again changes nothing).
            if let (Some(room), Some((_, _, usable)), Some(st)) = (room.as_ref(), &self.domain, &taken[k].st) {
                if !room.could_hold_without(ctx.ssn, st.evicted(), *usable) {
                    continue;
                }
            }
            ctx.ssn.discard(taken[k].st.take().expect("every victim's evictions stand until it is tried"));
            self.recount(ctx, room.as_mut(), &taken[k].nodes);
            if room.as_ref().is_none_or(DomainRoom::could_hold) && self.fits_without(ctx, &taken) {
                taken[k].kept = false;
                continue;
            }
            taken[k] = evict(ctx, v, self.why);
            self.recount(ctx, room.as_mut(), &taken[k].nodes);
        }
        let kept = taken.iter().filter(|t| t.kept).map(|t| t.victim).collect();
        for st in taken.into_iter().rev().filter_map(|t| t.st) {
            ctx.ssn.discard(st);
        }
        kept
    }

    /// Counts the domain's room on `nodes` again, after a victim there was taken back or
    /// evicted again.
    fn recount(&self, ctx: &Ctx, room: Option<&mut DomainRoom>, nodes: &[NodeId]) {
        if let (Some(room), Some((_, _, usable))) = (room, &self.domain) {
            nodes.iter().for_each(|&n| room.update(ctx.ssn, n, usable));
        }
    }

    /// Whether the gang fits on what the victims still in the set free (the placement is
    /// tried and taken back).
    fn fits_without(&self, ctx: &mut Ctx, taken: &[Taken]) -> bool {
        if !(self.fits)(ctx) {
            return false;
        }
        let mut nodes: Vec<NodeId> =
            taken.iter().filter(|t| t.st.is_some()).flat_map(|t| t.nodes.iter().copied()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        if self.domain.is_none() && !cluster_could_hold(ctx.ssn, key_need(ctx.ssn, self.gang), &nodes) {
            return false;
        }
        match try_place_all(
            ctx,
            self.gang,
            Avail::Future(&freed_within(&nodes, self.domain.as_ref().map(|&(d, ..)| d))),
        ) {
            Some(pipe) => {
                ctx.ssn.discard(pipe);
                true
            }
            None => false,
        }
    }

    /// Applies the victim set in order and pipelines the gang onto what it frees (inside the
    /// domain, when there is one); `None`, with nothing applied, when the gang does not fit.
    fn apply(&self, ctx: &mut Ctx, set: &[&Victim]) -> Option<Statement> {
        let mut st = Statement::new();
        let mut nodes = Vec::new();
        for &v in set {
            if still_evictable(ctx, v) {
                evict_unit(ctx.ssn, &mut st, v, self.why, &mut nodes);
            }
        }
        if (self.fits)(ctx) {
            let freed = freed_within(&nodes, self.domain.as_ref().map(|&(d, ..)| d));
            if let Some(pipe) = try_place_all(ctx, self.gang, Avail::Future(&freed)) {
                ctx.ssn.absorb(&mut st, pipe);
                return Some(st);
            }
        }
        ctx.ssn.discard(st);
        None
    }
}

/// Whether a victim of the set still has pods to lose once the victims before it are
/// evicted: an elastic pod still running whose job can lose it, or a job still running.
fn still_evictable(ctx: &Ctx, v: &Victim) -> bool {
    if v.elastic {
        ctx.ssn.pod_state[v.pods[0]].running_on().is_some()
            && ctx.ssn.can_lose_one(v.job, ctx.ssn.snap.pods[v.pods[0]].task)
    } else {
        ctx.ssn.running_pods(v.job).next().is_some()
    }
}

/// Evicts one victim of the set in a statement of its own.
fn evict<'v>(ctx: &mut Ctx, v: &'v Victim, why: (EvictReason, JobId)) -> Taken<'v> {
    let mut st = Statement::with_capacity(v.pods.len());
    let mut nodes = Vec::with_capacity(v.pods.len());
    if still_evictable(ctx, v) {
        evict_unit(ctx.ssn, &mut st, v, why, &mut nodes);
    }
    Taken { victim: v, st: Some(st), nodes, kept: true }
}
