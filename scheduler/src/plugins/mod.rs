//! Policy plugins. Each supplies some of the framework's hooks; the configuration decides
//! which are enabled and in which order their orderings are consulted.

pub mod drf;
pub mod fairshare;
pub mod gang;
pub mod nodeorder;
pub mod predicates;
pub mod priority;
pub mod reservation;
pub mod shortestfirst;
