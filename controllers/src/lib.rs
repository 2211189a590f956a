//! Drover's controllers (kube-runtime): each reconciles one kind of object, idempotently,
//! from the API alone.

pub use drover_k8s::events;
pub mod job;
pub mod queues;
