//! The ids of the snapshot's arenas, one type each, and the vectors keyed by them
//! ([`TiVec`], [`TiSlice`]): a per-queue vector takes only a [`QueueId`], so a mix-up such as
//! indexing the queues' allocations with a job does not compile. Through the job's queue:
//!
//! ```
//! # use drover_scheduler::{ids::JobId, res::Res, session::Session};
//! fn alloc<'a>(ssn: &'a Session, job: JobId) -> &'a Res { &ssn.queue_alloc[ssn.snap.jobs[job].queue] }
//! ```
//!
//! and not with the job itself:
//!
//! ```compile_fail
//! # use drover_scheduler::{ids::JobId, res::Res, session::Session};
//! fn alloc<'a>(ssn: &'a Session, job: JobId) -> &'a Res { &ssn.queue_alloc[job] }
//! ```

pub use typed_index_collections::{ti_vec, TiSlice, TiVec};

/// Declares id types: a copyable `usize` newtype each, convertible to and from `usize` as
/// [`TiVec`] needs.
macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub usize);
        impl From<usize> for $name { fn from(index: usize) -> $name { $name(index) } }
        impl From<$name> for usize { fn from(id: $name) -> usize { id.0 } }
    )*};
}

ids! {
    /// A node: index into `Snapshot::nodes`.
    NodeId;
    /// A queue: index into `Snapshot::queues`; [`crate::snapshot::ROOT`] is the implicit root.
    QueueId;
    /// A job (pod group): index into `Snapshot::jobs`.
    JobId;
    /// A pod: index into `Snapshot::pods`.
    PodId;
}
