//! The Kubernetes edge of the Drover scheduler.
pub mod charge;
pub mod convert;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod scheduler;
pub mod watch_backoff;
