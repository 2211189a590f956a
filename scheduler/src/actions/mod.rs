//! The actions of a scheduling cycle, from least to most disruptive, and what they share:
//! whose turn it is ([`turns`]), placing a gang as one statement ([`gang_place`]) and the
//! victim solver that preempt, reclaim and consolidation call ([`victim_solver`]).

pub mod allocate;
pub mod backfill;
pub mod claim;
pub mod consolidate;
pub mod enqueue;
pub mod forbidden;
pub mod gang_place;
pub mod preempt;
mod queue_choice;
pub mod reclaim;
pub mod resize;
pub mod turns;
pub mod victim_solver;

pub use gang_place::{fits_without_eviction, place_all, try_place_all, NoRoom};
pub use turns::{
    class, elastic_evicting_jobs, elastic_request, elastic_waiting, evicting_jobs, jobs_by_queue, serve_elastic_need,
    serve_in_queue_order, starving, strict,
};
pub use victim_solver::{make_room, shortfall, victim_units, Failure, VictimOrder, VictimPool};

use crate::framework::Framework;
use crate::placement::Placer;
use crate::reservation::Reservations;
use crate::session::Session;
use crate::snapshot::JobId;

/// Everything an action works with.
pub struct Ctx<'a, 's> {
    /// The cycle's state.
    pub ssn: &'a mut Session<'s>,
    /// The plugins.
    pub fw: &'a Framework,
    /// The node finder.
    pub placer: &'a mut Placer,
    /// Capacity set aside for gangs that cannot start yet.
    pub reservations: &'a mut Reservations,
}

/// Adds `why` to the job's reason for waiting (after what an earlier action said).
pub fn append_reason(ctx: &mut Ctx, job: JobId, why: &str) {
    // The first refusal keeps giving the reason when the reason keeps its words.
    let (joined, by) = match ctx.ssn.reasons[job].as_deref() {
        Some(prior) if !prior.is_empty() && !prior.contains(why) => {
            (format!("{prior}; {why}"), ctx.ssn.blocked_by[job])
        }
        _ => (why.to_string(), None),
    };
    ctx.ssn.set_refusal(job, joined, by);
}
