//! The Kubernetes edge of the Drover scheduler.
pub mod charge;
pub mod convert;
pub mod leader;
pub mod metrics;
pub mod run_times;
pub mod scheduler;
