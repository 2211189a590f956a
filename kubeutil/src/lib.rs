//! Kubernetes client helpers that the scheduler's edge (drover-k8s) and the controllers
//! both use, kept here so that neither depends on the other.
pub mod events;
pub mod watch_backoff;
