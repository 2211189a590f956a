//! Which leaf queue an action serves next: descending from the root, at each level the child
//! the queue order serves first among those with an eligible leaf below. Asked once per job
//! served, over thousands of queues, so each queue's choice is kept between asks: it depends
//! only on the state of the queue's own subtree (its allocation, its jobs, whether its leaves
//! are eligible), so only the queues changed since — by the session's changes
//! ([`Session::changed_queues`](crate::session::Session::changed_queues)) or, for what the
//! action itself keeps (a queue's next job), as the action says ([`QueueChoice::changed`]) —
//! and their ancestors choose again.

use super::Ctx;
use crate::ids::{ti_vec, TiVec};
use crate::snapshot::{QueueId, Snapshot, ROOT};
use std::cmp::Ordering;

/// The choices of one run of an action.
pub struct QueueChoice {
    /// Per queue, the leaf its subtree serves next (none when no leaf below is eligible),
    /// valid unless `stale`.
    leaf: TiVec<QueueId, Option<QueueId>>,
    /// Per queue, whether its choice must be made again; a stale queue's ancestors are stale.
    stale: TiVec<QueueId, bool>,
    /// How much of the session's changed queues has been read.
    seen: usize,
}

impl QueueChoice {
    /// Choices to be made, from the session's state now.
    pub fn new(ctx: &Ctx) -> QueueChoice {
        let n = ctx.ssn.snap.queues.len();
        QueueChoice { leaf: ti_vec![None; n], stale: ti_vec![true; n], seen: ctx.ssn.changed_queues.len() }
    }

    /// The queue `q` changed in a way the session does not record (its eligibility, as the
    /// action judges it): it and its ancestors choose again.
    pub fn changed(&mut self, snap: &Snapshot, q: QueueId) {
        for a in snap.ancestry(q).chain(std::iter::once(ROOT)) {
            if std::mem::replace(&mut self.stale[a], true) {
                break;
            }
        }
    }

    /// The leaf queue to serve next among those `eligible`.
    pub fn next(&mut self, ctx: &Ctx, eligible: &dyn Fn(QueueId) -> bool) -> Option<QueueId> {
        let snap = ctx.ssn.snap;
        let changed = &ctx.ssn.changed_queues;
        for &q in &changed[self.seen.min(changed.len())..] {
            self.changed(snap, q);
        }
        self.seen = changed.len();
        self.choose(ctx, ROOT, eligible)
    }

    /// The leaf `q`'s subtree serves next: the first served by the queue order among its
    /// children's choices, the earlier child among equals.
    fn choose(&mut self, ctx: &Ctx, q: QueueId, eligible: &dyn Fn(QueueId) -> bool) -> Option<QueueId> {
        if !self.stale[q] {
            return self.leaf[q];
        }
        let children = &ctx.ssn.snap.queues[q].children;
        let leaf = if children.is_empty() {
            (q != ROOT && eligible(q)).then_some(q)
        } else {
            let mut best: Option<(QueueId, QueueId)> = None;
            for &c in children {
                let Some(leaf) = self.choose(ctx, c, eligible) else { continue };
                best = match best {
                    Some((b, _)) if ctx.fw.queue_order(ctx.ssn, b, c) != Ordering::Greater => best,
                    _ => Some((c, leaf)),
                };
            }
            best.map(|(_, leaf)| leaf)
        };
        self.leaf[q] = leaf;
        self.stale[q] = false;
        leaf
    }
}
