//! The Kubernetes edge of the Drover scheduler.
pub mod convert;
