//! Drover's controllers (kube-runtime): each reconciles one kind of object, idempotently,
//! from the API alone.

pub mod gangs;
pub mod job;
pub mod queues;
pub mod topology;
